# tap-count.sh - sourced by the test runners: a temporary TAP log and the
# running totals. count FILE STATUS NAME adds a TAP file's ok / not ok lines
# (an "ok ... # skip" line counts as skipped, not passed); a program that
# exited non-zero without reporting a failure counts as one failure.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pass=0 fail=0 skipped=0

count() { # $1 = TAP file, $2 = exit status, $3 = name
	p=$(grep -c '^ok ' "$1")
	s=$(grep -ci '^ok .*# skip' "$1")
	f=$(grep -c '^not ok ' "$1")
	if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "not ok - $3 exited with status $2"
		f=1
	fi
	pass=$((pass + p - s))
	skipped=$((skipped + s))
	fail=$((fail + f))
}

# totals: the last line of every run
totals() {
	echo "$pass passed, $fail failed, $skipped skipped"
}
