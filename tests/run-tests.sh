#!/bin/sh
# Run every C unit test and every bats CLI test (TAP), then print the totals
# as the last line: "N passed, N failed". A test program that crashes or
# exits non-zero without reporting a failure counts as one failure.
BUILD=${BUILD:-build}
export BUILD
NTX_BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd)
export NTX_BIN
if [ -z "${NTX_FIXTURES:-}" ]; then
	if [ -d ../shared/fixtures ]; then NTX_FIXTURES=$(cd ../shared/fixtures && pwd); fi
fi
export NTX_FIXTURES
. "$(dirname "$0")/tap-count.sh"

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	echo "# unit: $name"
	"$t" >"$log" 2>&1
	rc=$?
	grep -E '^(not ok|# )' "$log" | head -50
	count "$log" "$rc" "$name"
done

if command -v bats >/dev/null 2>&1; then
	for b in tests/cli/*.bats; do
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

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
