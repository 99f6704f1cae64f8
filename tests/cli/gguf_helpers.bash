# Helpers for the GGUF tool tests (inspect.bats, gguf-gen.bats).
# Tests use $NTX_BIN and $NTX_FIXTURES (exported by tests/run-tests.sh).

bats_require_minimum_version 1.5.0
load fixtures

gguf_setup() {
	INSPECT="$NTX_BIN/ntx-inspect"
	GEN="$NTX_BIN/ntx-gguf-gen"
	F="$NTX_FIXTURES"
	T="$BATS_TEST_TMPDIR"
	[ -x "$INSPECT" ] || { echo "no $INSPECT (make first)" >&2; return 1; }
	command -v python3 >/dev/null || { echo "python3 is needed to read JSON" >&2; return 1; }
}

# json FILE EXPR: evaluate the Python expression EXPR with d = the JSON
# document in FILE; print it (JSON for containers, bools and null).
json() {
	python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2], {"d": d})
print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)
PY
}

# expect ACTUAL WANTED: compare, saying what differed.
expect() {
	if [ "$1" != "$2" ]; then
		echo "got:      $1" >&2
		echo "expected: $2" >&2
		return 1
	fi
}

# interrupted PID NAME: send SIGINT to the background job PID, which must
# exit with status 130 within 5 s (else it is killed and this fails).
interrupted() {
	local pid=$1 rc=0
	kill -INT "$pid"
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid"
		echo "$2 still running 5 s after SIGINT" >&2
		return 1
	fi
	wait "$pid" || rc=$?
	expect "$rc" 130
}

# limited CMD...: run CMD with a file size limit of 0, so that every write to
# a file fails (EFBIG) as on a full disk; stdout and stderr (merged) go
# through a pipe, which the limit does not touch. Returns CMD's status.
limited() {
	bash -c 'set -o pipefail; trap "" XFSZ; ulimit -f 0; "$@" 2>&1 | cat' limited "$@"
}
