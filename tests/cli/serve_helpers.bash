# serve_helpers.bash - start ntx-serve on a free port of 127.0.0.1 in the
# background, wait for it (bounded), and always stop it in teardown.

# start_server ARGS...: sets SRV_PID, URL, SRV_LOG. Fails after ~20 s.
start_server() {
	SRV_LOG="$BATS_TEST_TMPDIR/server.log"
	"$NTX_BIN/ntx-serve" --port 0 -t 2 "$@" 2>"$SRV_LOG" &
	SRV_PID=$!
	local i port=""
	for i in $(seq 200); do
		port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\)$/\1/p' "$SRV_LOG")
		[ -n "$port" ] && break
		kill -0 "$SRV_PID" 2>/dev/null || { cat "$SRV_LOG" >&2; return 1; }
		sleep 0.1
	done
	[ -n "$port" ] || { echo "server did not start" >&2; cat "$SRV_LOG" >&2; return 1; }
	URL="http://127.0.0.1:$port"
	for i in $(seq 50); do
		curl -s --max-time 2 "$URL/health" >/dev/null && return 0
		sleep 0.1
	done
	echo "no /health" >&2
	return 1
}

# stop_server: SIGTERM, then SIGKILL after 15 s. Sets SRV_RC.
stop_server() {
	[ -n "${SRV_PID:-}" ] || return 0
	kill -TERM "$SRV_PID" 2>/dev/null || true
	local i
	for i in $(seq 150); do
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$SRV_PID" 2>/dev/null || true
	SRV_RC=0
	wait "$SRV_PID" || SRV_RC=$?
	SRV_PID=""
}

# post PATH JSON [curl args...]: the status on the first line of $T/status, the body in $T/body.
post() {
	local path=$1 body=$2
	shift 2
	curl -s --max-time 60 -o "$T/body" -w '%{http_code}' -H 'Content-Type: application/json' \
		-d "$body" "$@" "$URL$path" >"$T/status"
}

# jq_py FILE EXPR: EXPR (Python, d = the JSON document) printed.
jq_py() {
	python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2], {"d": d})
print(v if not isinstance(v, (dict, list, bool)) and v is not None else json.dumps(v))
PY
}

# health_field NAME: a field of /health.
health_field() {
	curl -s --max-time 5 "$URL/health" | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"
}

# wait_health NAME VALUE: up to ~20 s for /health's NAME to equal VALUE.
wait_health() {
	local i
	for i in $(seq 200); do
		[ "$(health_field "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	echo "health $1 never became $2: $(curl -s "$URL/health")" >&2
	return 1
}

# template_model SRC DST none|unknown: a copy of the model SRC without a
# tokenizer.chat_template (its key renamed) or with one that is no known
# format (its text overwritten); lengths and the file's layout unchanged.
template_model() {
	python3 - "$@" <<'PY'
import struct, sys
src, dst, mode = sys.argv[1:]
d = open(src, "rb").read()
k = b"tokenizer.chat_template"
i = d.index(k) + len(k)  # then the type (u32, 8: string), the length (u64), the text
assert d.count(k) == 1 and struct.unpack_from("<I", d, i)[0] == 8, "one string key"
n = struct.unpack_from("<Q", d, i + 4)[0]
if mode == "none":
    d = d[:i - 1] + b"X" + d[i:]
else:
    d = d[:i + 12] + b"{{ no known format }}".ljust(n, b" ") + d[i + 12 + n:]
open(dst, "wb").write(d)
PY
}

# n_tokens ARGS...: the number of prompt ids of ntx-run --tokenize ARGS.
n_tokens() {
	"$RUN" -q --tokenize "$@" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))'
}
