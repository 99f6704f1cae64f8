#!/bin/sh
# Run every C unit test and every bats CLI test (TAP), then print the totals
# as the last line: "N passed, N failed, M skipped". A test program that
# crashes or exits non-zero without reporting a failure counts as one failure.
# With arguments, run only those bats files (no unit tests).
#
# The reference set (llama.cpp outputs, the models they came from) is looked
# for in $NTX_FIXTURES, else in ../shared/fixtures beside the repository.
# Without it the tests that need it are skipped and one line says so; under
# CI=true a missing set is a failure.
BUILD=${BUILD:-build}
export BUILD
NTX_BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd)
export NTX_BIN
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${NTX_FIXTURES:-}" ]; then
	NTX_FIXTURES=$root/../shared/fixtures
	if [ -d "$NTX_FIXTURES" ]; then NTX_FIXTURES=$(cd "$NTX_FIXTURES" && pwd); fi
fi
export NTX_FIXTURES
. "$(dirname "$0")/tap-count.sh"
# No test reads or writes the user's files in ~/.cache (ntx-plan --probe
# stores its rates there and plans read them back): a cache of our own,
# removed at the end.
NTX_TEST_CACHE=$(mktemp -d)
XDG_CACHE_HOME=$NTX_TEST_CACHE
export XDG_CACHE_HOME
trap 'rm -f "$log"; rm -rf "$NTX_TEST_CACHE"' EXIT

# A test must never change the build it tests (issue 28: an install test once
# rebuilt it without CUDA). The compiler-flags stamp, the tools, the
# libraries and ntx.pc are fingerprinted before the tests and checked after.
build_state() {
	(cd "$BUILD" 2>/dev/null && md5sum .cflags ntx.pc bin/* libntx.* 2>/dev/null)
}
state_before=$(mktemp)
build_state >"$state_before"
trap 'rm -f "$log" "$state_before"' EXIT

if [ ! -d "$NTX_FIXTURES/models" ] || [ ! -d "$NTX_FIXTURES/tinymodel" ]; then
	if [ "${CI:-}" = true ]; then
		echo "not ok - no reference set at $NTX_FIXTURES (CI=true: a missing set fails; set NTX_FIXTURES=DIR)"
		fail=$((fail + 1))
	else
		echo "# no reference set at $NTX_FIXTURES: the tests that need it are skipped (set NTX_FIXTURES=DIR to run them)"
	fi
fi

if [ $# -eq 0 ]; then
	for t in "$BUILD"/tests/test_*; do
		[ -x "$t" ] || continue
		name=$(basename "$t")
		echo "# unit: $name"
		"$t" >"$log" 2>&1
		rc=$?
		grep -E '^(not ok|# )' "$log" | head -50
		count "$log" "$rc" "$name"
	done
	set -- tests/cli/*.bats
fi

if command -v bats >/dev/null 2>&1; then
	for b in "$@"; do
		[ -f "$b" ] || continue
		echo "# cli: $b"
		bats --tap "$b" >"$log" 2>&1
		rc=$?
		grep -E '^(not ok|#)' "$log" | head -50
		count "$log" "$rc" "$b"
	done
else
	echo "not ok - bats is not installed (run scripts/setup)"
	fail=$((fail + 1))
fi

if ! build_state | cmp -s - "$state_before"; then
	echo "not ok - the tests changed the build under test ($BUILD): $(build_state | diff "$state_before" - | sed -n 's/^> [0-9a-f]*  //p' | tr '\n' ' ')"
	fail=$((fail + 1))
else
	echo "ok - the tests left the build under test ($BUILD) as it was"
	pass=$((pass + 1))
fi

totals
[ "$fail" -eq 0 ]
