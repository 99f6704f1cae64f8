#!/usr/bin/env bats
# tests/run-tests.sh itself: a fresh clone (no reference set) passes with the
# tests that need the set skipped and one line saying where it was looked
# for; under CI=true a missing set is a failure, never a silent skip.

bats_require_minimum_version 1.5.0

setup() {
	cd "$BATS_TEST_DIRNAME/../.."
	T="$BATS_TEST_TMPDIR"
	# (no line of this file may start with the test keyword itself)
	{
		echo "load '$PWD/tests/cli/fixtures'"
		printf '@%s\n' 'test "needs the set" { need_fixtures; }' 'test "needs nothing" { true; }'
	} >"$T/x.bats"
}

# nested: run a command without this bats run's own BATS_* variables and
# its libexec directory at the head of PATH (whose "bats" is another program)
nested() {
	local u=() v p
	for v in $(compgen -e); do
		[[ $v == BATS_* ]] && u+=(-u "$v")
	done
	p=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v 'libexec/bats' | paste -sd:)
	env "${u[@]}" PATH="$p" "$@" 3>&-
}

@test "no reference set: skipped and said where, the last line ends '0 failed, 1 skipped' (the build check passes too)" {
	run nested CI= NTX_FIXTURES=/nonexistent BUILD="$(dirname "$NTX_BIN")" \
		tests/run-tests.sh "$T/x.bats"
	[ "$status" -eq 0 ]
	[[ "$output" == *"# no reference set at /nonexistent: the tests that need it are skipped (set NTX_FIXTURES=DIR to run them)"* ]]
	[ "${lines[${#lines[@]} - 1]}" = "2 passed, 0 failed, 1 skipped" ]
}

@test "no reference set under CI=true: a failure" {
	run nested CI=true NTX_FIXTURES=/nonexistent BUILD="$(dirname "$NTX_BIN")" \
		tests/run-tests.sh "$T/x.bats"
	[ "$status" -eq 1 ]
	[[ "$output" == *"not ok - no reference set at /nonexistent (CI=true"* ]]
	[ "${lines[${#lines[@]} - 1]}" = "2 passed, 2 failed, 0 skipped" ]
}

@test "the C tests skip without the set, and fail under CI=true" {
	run env CI= NTX_FIXTURES=/nonexistent "$(dirname "$NTX_BIN")/tests/test_model"
	[ "$status" -eq 0 ]
	[[ "$output" == *"# SKIP no reference set"* ]]
	run env CI=true NTX_FIXTURES=/nonexistent "$(dirname "$NTX_BIN")/tests/test_model"
	[ "$status" -ne 0 ]
	[[ "$output" == *"not ok "*"no reference set at /nonexistent"* ]]
}
