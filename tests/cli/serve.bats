#!/usr/bin/env bats
# ntx-serve (doc/ntx-serve.1): the official openai npm client against the
# tiny model (greedy output equal to ntx-run alone), every error status
# (401, 413, 400, 404, 405, 503) as an OpenAI error object, a client that
# goes away frees its slot, prefix reuse across a conversation, SIGTERM; the
# chat format (the model's, --chat-template, else chatml) in /props and
# /v1/models.

load serve_helpers

setup_file() {
	export RUN="$NTX_BIN/ntx-run"
	export M="$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf"
	export NODE_DIR="$BATS_TEST_DIRNAME/../serve/node_modules-dir"
	[ -x "$NTX_BIN/ntx-serve" ] || { echo "no $NTX_BIN/ntx-serve (make first)" >&2; return 1; }
	command -v curl >/dev/null || { echo "no curl (run scripts/setup)" >&2; return 1; }
	# the tiny model without a chat template, and with one of no known format
	export NOTMPL="$BATS_FILE_TMPDIR/tiny-notmpl.gguf" UNKNOWN="$BATS_FILE_TMPDIR/tiny-unknown.gguf"
	template_model "$M" "$NOTMPL" none && template_model "$M" "$UNKNOWN" unknown
}

setup() {
	T="$BATS_TEST_TMPDIR"
	SRV_PID=""
}

teardown() {
	stop_server
	# background clients of a test
	local p
	for p in ${BG_PIDS:-}; do kill "$p" 2>/dev/null; done
	BG_PIDS=""
}

@test "openai npm client: chat (plain and streamed) and completion equal ntx-run alone at temp 0" {
	if ! command -v node >/dev/null || [ ! -d "$NODE_DIR/node_modules/openai" ]; then
		[ "${CI:-}" != true ] || { echo "CI: node or the openai package is missing (scripts/setup installs it)" >&2; return 1; }
		skip "node or tests/serve/node_modules-dir/node_modules/openai missing (run scripts/setup)"
	fi
	start_server -m "$M" --api-key sekret --parallel 2
	run timeout 120 node "$BATS_TEST_DIRNAME/../serve/openai-client.mjs" "$URL/v1" sekret "Tell me a story" 24
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	echo "$output" >"$T/r.json"
	chat=$("$RUN" -m "$M" -q -t 2 --chat -p "Tell me a story" -n 24 --temp 0)
	cmpl=$("$RUN" -m "$M" -q -t 2 -p "Tell me a story" -n 24 --temp 0)
	[ "$(jq_py "$T/r.json" 'd["chat"]["content"]')" = "$chat" ]
	[ "$(jq_py "$T/r.json" 'd["stream"]["content"]')" = "$chat" ]
	[ "$(jq_py "$T/r.json" 'd["completion"]["text"]')" = "$cmpl" ]
	[ "$(jq_py "$T/r.json" '[d["model"], d["chat_template"], d["chat"]["role"], d["chat"]["object"], d["stream"]["role"]]')" = \
	  '["tinymodel-q4_k_m.gguf", "llama3", "assistant", "chat.completion", "assistant"]' ]
	# usage: the prompt's tokens, 24 generated; the streamed request reused the first one's prompt
	python3 - "$T/r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c, s = d["chat"], d["stream"]
assert c["finish"] == "length" and s["finish"] == "length", d
assert c["usage"]["completion_tokens"] == 24 and c["usage"]["prompt_tokens"] > 5, c
assert c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + 24, c
assert s["usage"]["prompt_tokens"] == c["usage"]["prompt_tokens"], s
assert s["usage"]["prompt_tokens_details"]["cached_tokens"] == c["usage"]["prompt_tokens"] - 1, s
assert s["chunks"] >= 3, s  # tokens that come together share a chunk
PY
}

@test "openai npm client on a model without a chat template: chats in chatml, equal ntx-run --chat-template chatml" {
	if ! command -v node >/dev/null || [ ! -d "$NODE_DIR/node_modules/openai" ]; then
		[ "${CI:-}" != true ] || { echo "CI: node or the openai package is missing (scripts/setup installs it)" >&2; return 1; }
		skip "node or tests/serve/node_modules-dir/node_modules/openai missing (run scripts/setup)"
	fi
	start_server -m "$NOTMPL" --api-key sekret --parallel 2
	run timeout 120 node "$BATS_TEST_DIRNAME/../serve/openai-client.mjs" "$URL/v1" sekret "Tell me a story" 16
	[ "$status" -eq 0 ] || { echo "$output"; false; }
	echo "$output" >"$T/r.json"
	chatml=$("$RUN" -m "$NOTMPL" -q -t 2 --chat --chat-template chatml -p "Tell me a story" -n 16 --temp 0)
	llama3=$("$RUN" -m "$NOTMPL" -q -t 2 --chat --chat-template llama3 -p "Tell me a story" -n 16 --temp 0)
	[ "$chatml" != "$llama3" ] # the formats give different texts: the check below can fail
	[ "$(jq_py "$T/r.json" 'd["chat"]["content"]')" = "$chatml" ]
	[ "$(jq_py "$T/r.json" 'd["stream"]["content"]')" = "$chatml" ]
	[ "$(jq_py "$T/r.json" 'd["chat"]["usage"]["prompt_tokens"]')" = \
	  "$(n_tokens -m "$NOTMPL" --chat --chat-template chatml -p "Tell me a story")" ]
	[ "$(jq_py "$T/r.json" '[d["model"], d["chat_template"], d["chat"]["finish"]]')" = \
	  '["tiny-notmpl.gguf", "chatml", "length"]' ]
}

@test "GET /health and /v1/models; the bearer key guards /v1 (401, constant-time compare), not /health" {
	start_server -m "$M" --api-key sekret --parallel 3 --alias tiny
	run curl -s -w ' %{http_code}' "$URL/health"
	[ "$output" = '{"status":"ok","slots_idle":3,"slots_processing":0,"queued":0}
 200' ]
	post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
	[ "$(cat "$T/status")" = 401 ]
	[ "$(jq_py "$T/body" '[d["error"]["type"], d["error"]["code"]]')" = '["authentication_error", "invalid_api_key"]' ]
	post /v1/completions '{"prompt":"hi","max_tokens":2}' -H 'Authorization: Bearer sekreT'
	[ "$(cat "$T/status")" = 401 ]
	post /v1/completions '{"prompt":"hi","max_tokens":2}' -H 'Authorization: Bearer sekret2'
	[ "$(cat "$T/status")" = 401 ]
	post /v1/completions '{"prompt":"hi","max_tokens":2}' -H 'Authorization: Basic sekret'
	[ "$(cat "$T/status")" = 401 ]
	run curl -s -w ' %{http_code}' "$URL/v1/models"
	[[ "$output" == *' 401' ]]
	run curl -s -H 'Authorization: Bearer sekret' "$URL/v1/models"
	echo "$output" >"$T/m.json"
	[ "$(jq_py "$T/m.json" '[d["object"], d["data"][0]["id"], d["data"][0]["object"]]')" = '["list", "tiny", "model"]' ]
	post /v1/completions '{"prompt":"In the beginning","max_tokens":3,"temperature":0}' -H 'Authorization: Bearer sekret'
	[ "$(cat "$T/status")" = 200 ]
	[ "$(jq_py "$T/body" '[d["object"], d["model"], d["choices"][0]["finish_reason"], d["usage"]["completion_tokens"]]')" = \
	  '["text_completion", "tiny", "length", 3]' ]
}

@test "a model without a chat template: chats in chatml (as llama-server), one line at start says so; /props and /v1/models name it" {
	start_server -m "$NOTMPL" --api-key sekret --parallel 2 -c 512 --alias plain
	[ "$(head -n 1 "$SRV_LOG")" = \
	  "ntx-serve: the model has no tokenizer.chat_template: chat uses chatml (--chat-template NAME to choose another)" ]
	msg='{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story"}],"max_tokens":12,"temperature":0}'
	chatml=$("$RUN" -m "$NOTMPL" -q -t 2 --chat --chat-template chatml --system "Be brief." -p "Tell me a story" -n 12 --temp 0)
	n=$(n_tokens -m "$NOTMPL" --chat --chat-template chatml --system "Be brief." -p "Tell me a story")
	# the other formats (llama3, the library's fallback llama2-sys) make other prompts
	[ "$n" -ne "$(n_tokens -m "$NOTMPL" --chat --chat-template llama3 --system "Be brief." -p "Tell me a story")" ]
	[ "$n" -ne "$(n_tokens -m "$NOTMPL" --chat --chat-template llama2-sys --system "Be brief." -p "Tell me a story")" ]
	for i in 1 2; do
		post /v1/chat/completions "$msg" -H 'Authorization: Bearer sekret'
		[ "$(cat "$T/status")" = 200 ] || { cat "$T/body"; false; }
		[ "$(jq_py "$T/body" 'd["choices"][0]["message"]["content"]')" = "$chatml" ]
		[ "$(jq_py "$T/body" 'd["usage"]["prompt_tokens"]')" = "$n" ]
	done
	# /props: the key guards it as /v1/models; GET only
	run curl -s -w ' %{http_code}' "$URL/props"
	[[ "$output" == *'"invalid_api_key"'*' 401' ]]
	run curl -s -H 'Authorization: Bearer sekret' "$URL/props"
	echo "$output" >"$T/p.json"
	[ "$(jq_py "$T/p.json" '[d["model"], d["model_path"], d["chat_template"], d["chat_template_source"], d["n_ctx"], d["total_slots"], d["backend"]]')" = \
	  "[\"plain\", \"$NOTMPL\", \"chatml\", \"fallback\", 512, 2, \"cpu\"]" ]
	run curl -s -w ' %{http_code}' -X POST -H 'Authorization: Bearer sekret' -d '{}' "$URL/props"
	[[ "$output" == *'method not allowed'*' 405' ]]
	run curl -s -w ' %{http_code}' -H 'Authorization: Bearer sekret' "$URL/props/more"
	[[ "$output" == *'"not_found"'*' 404' ]]
	run curl -s -H 'Authorization: Bearer sekret' "$URL/v1/models"
	echo "$output" >"$T/m.json"
	[ "$(jq_py "$T/m.json" '[d["data"][0]["id"], d["data"][0]["chat_template"]]')" = '["plain", "chatml"]' ]
	# the line was printed once, at start
	[ "$(grep -c 'chat uses' "$SRV_LOG")" = 1 ]
}

@test "a model whose chat template is no known format: chatml too, with its own line" {
	start_server -m "$UNKNOWN" --parallel 1
	[ "$(grep -c 'chat uses' "$SRV_LOG")" = 1 ]
	[ "$(head -n 1 "$SRV_LOG")" = \
	  "ntx-serve: the model's tokenizer.chat_template is not a known format: chat uses chatml (--chat-template NAME to choose another)" ]
	post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":12,"temperature":0}'
	[ "$(cat "$T/status")" = 200 ] || { cat "$T/body"; false; }
	[ "$(jq_py "$T/body" 'd["choices"][0]["message"]["content"]')" = \
	  "$("$RUN" -m "$UNKNOWN" -q -t 2 --chat --chat-template chatml -p "Tell me a story" -n 12 --temp 0)" ]
	run curl -s "$URL/props"
	echo "$output" >"$T/p.json"
	[ "$(jq_py "$T/p.json" '[d["model"], d["chat_template"], d["chat_template_source"], d["total_slots"]]')" = \
	  '["tiny-unknown.gguf", "chatml", "fallback", 1]' ]
}

@test "a known chat template is the model's own; --chat-template (a name or a Jinja text) overrides it" {
	chat() { # MODEL SERVER-FORMAT SOURCE RUN-ARGS...: the server's chat equals ntx-run with RUN-ARGS
		local m=$1 fmt=$2 src=$3
		shift 3
		if grep 'chat uses' "$SRV_LOG" >&2; then return 1; fi
		post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":12,"temperature":0}'
		[ "$(cat "$T/status")" = 200 ] || { cat "$T/body" >&2; return 1; }
		[ "$(jq_py "$T/body" 'd["choices"][0]["message"]["content"]')" = \
		  "$("$RUN" -m "$m" -q -t 2 --chat "$@" -p "Tell me a story" -n 12 --temp 0)" ]
		[ "$(jq_py "$T/body" 'd["usage"]["prompt_tokens"]')" = "$(n_tokens -m "$m" --chat "$@" -p "Tell me a story")" ]
		curl -s "$URL/props" >"$T/p.json"
		[ "$(jq_py "$T/p.json" '[d["chat_template"], d["chat_template_source"]]')" = "[\"$fmt\", \"$src\"]" ]
		curl -s "$URL/v1/models" >"$T/m.json"
		[ "$(jq_py "$T/m.json" 'd["data"][0]["chat_template"]')" = "$fmt" ]
	}
	start_server -m "$M" --parallel 1
	chat "$M" llama3 model
	# the model's own format is llama3: its prompt differs from chatml's
	[ "$(n_tokens -m "$M" --chat -p "Tell me a story")" -ne \
	  "$(n_tokens -m "$M" --chat --chat-template chatml -p "Tell me a story")" ]
	stop_server
	start_server -m "$NOTMPL" --parallel 1 --chat-template llama3
	chat "$NOTMPL" llama3 option --chat-template llama3
	stop_server
	start_server -m "$M" --parallel 1 --chat-template '{{ "<|im_start|>" + role }}'
	chat "$M" chatml option --chat-template chatml
}

@test "bad requests: 400 with an OpenAI error object naming the field; 404, 405" {
	start_server -m "$M" --parallel 1
	check400() { # BODY PATH PARAM MESSAGE-PART
		post "$2" "$1"
		[ "$(cat "$T/status")" = 400 ] || { echo "status $(cat "$T/status") for $1" >&2; return 1; }
		python3 - "$T/body" "$3" "$4" <<'PY' || { cat "$T/body" >&2; return 1; }
import json, sys
d = json.load(open(sys.argv[1]))
e = d["error"]
assert list(d) == ["error"] and e["type"] == "invalid_request_error", d
assert (e["param"] or "") == sys.argv[2], e
assert sys.argv[3] in e["message"], e
PY
	}
	check400 '{"messages":[{"role":"user","content":"hi"}' /v1/chat/completions "" "invalid JSON"
	check400 '[1,2]' /v1/chat/completions "" "must be a JSON object"
	check400 '{"max_tokens":4}' /v1/chat/completions messages "missing 'messages'"
	check400 '{"messages":[]}' /v1/chat/completions messages "non-empty array"
	check400 '{"messages":[{"role":"robot","content":"hi"}]}' /v1/chat/completions messages 'messages[0].role'
	check400 '{"messages":[{"role":"user","content":7}]}' /v1/chat/completions messages 'messages[0].content'
	check400 '{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}' /v1/chat/completions temperature "'temperature' must be a number"
	check400 '{"prompt":"hi","max_tokens":1.5}' /v1/completions max_tokens "'max_tokens' must be an integer"
	check400 '{"prompt":"hi","top_p":2}' /v1/completions top_p "'top_p'"
	check400 '{"prompt":"hi","stream":"yes"}' /v1/completions stream "'stream' must be true or false"
	check400 '{"prompt":"hi","stop":[1]}' /v1/completions stop "'stop[0]'"
	check400 '{"prompt":"hi","n":2}' /v1/completions n "'n'"
	check400 '{"prompt":"hi","model":3}' /v1/completions model "'model' must be a string"
	check400 '{"prompt":17}' /v1/completions prompt "'prompt' must be a string"
	check400 '{"prompt":"hi","prompt":"ho"}' /v1/completions "" "duplicate"
	check400 "{\"prompt\":\"$(printf 'word %.0s' $(seq 1100))\"}" /v1/completions prompt "more than the context size"
	run curl -s -w ' %{http_code}' "$URL/v1/nothing"
	[[ "$output" == *'"not_found"'*' 404' ]]
	run curl -s -w ' %{http_code}' "$URL/v1/chat/completions"
	[[ "$output" == *'method not allowed'*' 405' ]]
	# after all that the server still answers
	post /v1/completions '{"prompt":"hi","max_tokens":2}'
	[ "$(cat "$T/status")" = 200 ]
}

@test "limits: a body over --max-body and headers over --max-header get 413" {
	start_server -m "$M" --parallel 1 --max-body 2K --max-header 4K
	big=$(python3 -c 'import json; print(json.dumps({"prompt": "x" * 3000, "max_tokens": 1}))')
	post /v1/completions "$big"
	[ "$(cat "$T/status")" = 413 ]
	[ "$(jq_py "$T/body" 'd["error"]["code"]')" = request_too_large ]
	# the same without a Content-Length (chunked): counted as it comes
	printf '%s' "$big" >"$T/big.json"
	run curl -s --max-time 20 -w ' %{http_code}' -H 'Transfer-Encoding: chunked' --data-binary @"$T/big.json" "$URL/v1/completions"
	[[ "$output" == *' 413' ]]
	post /v1/completions '{"prompt":"hi","max_tokens":1}' -H "X-Filler: $(head -c 5000 /dev/zero | tr '\0' a)"
	[ "$(cat "$T/status")" = 413 ]
	post /v1/completions '{"prompt":"hi","max_tokens":1}'
	[ "$(cat "$T/status")" = 200 ]
}

@test "a full queue gets 503; a client that disconnects frees its slot" {
	start_server -m "$M" --parallel 1 --queue 1 -c 4096
	long='{"prompt":"In the beginning","max_tokens":3000,"ignore_eos":true}'
	curl -s --max-time 60 -o /dev/null -d "$long" "$URL/v1/completions" &
	BG_PIDS="$!"
	wait_health slots_processing 1
	curl -s --max-time 60 -o /dev/null -d "$long" "$URL/v1/completions" &
	BG_PIDS="$BG_PIDS $!"
	wait_health queued 1
	post /v1/completions '{"prompt":"hi","max_tokens":1}'
	[ "$(cat "$T/status")" = 503 ]
	[ "$(jq_py "$T/body" '[d["error"]["type"], d["error"]["code"]]')" = '["server_error", "overloaded"]' ]
	# the clients go away: the running sequence is cancelled, the queued one dropped
	kill $BG_PIDS
	wait_health slots_idle 1
	wait_health queued 0
	# a streaming client that reads a little and goes away
	timeout 2 curl -sN -d '{"prompt":"In the beginning","max_tokens":3000,"ignore_eos":true,"stream":true}' \
		"$URL/v1/completions" | head -c 300 >"$T/part" || true
	[[ "$(cat "$T/part")" == "data: {"* ]]
	wait_health slots_idle 1
	post /v1/completions '{"prompt":"hi","max_tokens":2}'
	[ "$(cat "$T/status")" = 200 ]
}

@test "streams: server-sent events ending in [DONE]; stop strings end the text before them" {
	start_server -m "$M" --parallel 2
	full=$("$RUN" -m "$M" -q -t 2 -p "In the beginning" -n 30 --temp 0)
	run curl -sN --max-time 60 -d '{"prompt":"In the beginning","max_tokens":30,"temperature":0,"stream":true}' "$URL/v1/completions"
	[ "$status" -eq 0 ]
	printf '%s' "$output" >"$T/sse"
	python3 - "$T/sse" "$full" <<'PY'
import json, sys
raw = open(sys.argv[1]).read()
events = [e for e in raw.split("\n\n") if e.strip()]
assert all(e.startswith("data: ") for e in events), events
assert events[-1] == "data: [DONE]", events[-1]
chunks = [json.loads(e[6:]) for e in events[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks)
assert text == sys.argv[2], (text, sys.argv[2])
assert chunks[-1]["choices"][0]["finish_reason"] == "length"
assert all(c["object"] == "text_completion" for c in chunks)
PY
	# a stop string: the text ends right before its first occurrence
	stop=$(python3 -c 'import sys; t=sys.argv[1]; print(t[t.index(" ", 10):t.index(" ", 10)+4])' "$full")
	want=$(python3 -c 'import sys; print(sys.argv[1].split(sys.argv[2])[0])' "$full" "$stop")
	body=$(python3 -c 'import json,sys; print(json.dumps({"prompt":"In the beginning","max_tokens":30,"temperature":0,"stop":[sys.argv[1]]}))' "$stop")
	post /v1/completions "$body"
	[ "$(jq_py "$T/body" 'd["choices"][0]["text"]')" = "$want" ]
	[ "$(jq_py "$T/body" 'd["choices"][0]["finish_reason"]')" = stop ]
	body=$(python3 -c 'import json,sys; print(json.dumps({"prompt":"In the beginning","max_tokens":30,"temperature":0,"stop":sys.argv[1],"stream":True}))' "$stop")
	run curl -sN --max-time 60 -d "$body" "$URL/v1/completions"
	printf '%s' "$output" >"$T/sse2"
	python3 - "$T/sse2" "$want" <<'PY'
import json, sys
events = [e for e in open(sys.argv[1]).read().split("\n\n") if e.strip()]
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert "".join(c["choices"][0]["text"] for c in chunks) == sys.argv[2]
assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
PY
}

@test "a conversation reuses its prefix: cached_tokens grow, the text equals ntx-run --batch alone" {
	start_server -m "$M" --parallel 2 --system "You are terse."
	conv='[{"role":"user","content":"Who made the world?"}]'
	prev=0
	for turn in 1 2 3; do
		body=$(python3 -c 'import json,sys; print(json.dumps({"messages":json.loads(sys.argv[1]),"max_tokens":12,"temperature":0}))' "$conv")
		post /v1/chat/completions "$body"
		[ "$(cat "$T/status")" = 200 ]
		reply=$(jq_py "$T/body" 'd["choices"][0]["message"]["content"]')
		cached=$(jq_py "$T/body" 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
		ptoks=$(jq_py "$T/body" 'd["usage"]["prompt_tokens"]')
		if [ "$turn" -gt 1 ]; then
			[ "$cached" -gt "$prev" ] || { echo "turn $turn: cached $cached, previous prompt $prev" >&2; false; }
		fi
		# the same messages through ntx-run --batch (one request, no reuse)
		python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"system","content":"You are terse."}]+json.loads(sys.argv[1]),"n_predict":12,"temp":0}))' "$conv" >"$T/req.jsonl"
		alone=$("$RUN" -m "$M" -q -t 2 --batch <"$T/req.jsonl" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["text"])')
		[ "$reply" = "$alone" ] || { echo "turn $turn: [$reply] != [$alone]" >&2; false; }
		prev=$ptoks
		conv=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); c += [{"role":"assistant","content":sys.argv[2]},{"role":"user","content":"And then?"}]; print(json.dumps(c))' "$conv" "$reply")
	done
}

@test "--draft and --lookup: greedy completions equal ntx-run alone, also two at once" {
	# the shipped model drafts for itself (same vocabulary; every draft accepted), with lookup
	start_server -m "$M" --parallel 2 --draft "$M" --lookup 2 --draft-k 3
	for p in "In the beginning" "The old man looked at the sea and"; do
		body=$(python3 -c 'import json,sys; print(json.dumps({"prompt":sys.argv[1],"max_tokens":24,"temperature":0}))' "$p")
		curl -s --max-time 60 -o "$T/b-${#p}" -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions" &
		BG_PIDS="$BG_PIDS $!"
	done
	wait $BG_PIDS
	BG_PIDS=""
	for p in "In the beginning" "The old man looked at the sea and"; do
		alone=$("$RUN" -m "$M" -q -t 2 -p "$p" -n 24 --temp 0)
		[ "$(jq_py "$T/b-${#p}" 'd["choices"][0]["text"]')" = "$alone" ] || { echo "differs: $p" >&2; cat "$T/b-${#p}" >&2; false; }
	done
	stop_server
	[ "$SRV_RC" -eq 0 ]
	# a missing draft is refused at start, naming it
	run "$NTX_BIN/ntx-serve" --port 0 -m "$M" --draft "$NTX_BIN/../../models/none.gguf"
	[ "$status" -eq 1 ]
	[[ "$output" == "ntx-serve: --draft "* ]]
}

@test "SIGTERM: stops accepting, lets the request in flight finish, exits 0" {
	start_server -m "$M" --parallel 1 --shutdown-timeout 150 -c 4096
	curl -s --max-time 180 -o "$T/inflight" -w '%{http_code}' -d '{"prompt":"In the beginning","max_tokens":1500,"ignore_eos":true,"temperature":0}' \
		"$URL/v1/completions" >"$T/inflight.status" &
	c=$!
	wait_health slots_processing 1
	kill -TERM "$SRV_PID"
	sleep 0.2
	# no new connections while the request in flight finishes
	run curl -s --max-time 5 "$URL/health"
	[ "$status" -ne 0 ]
	wait "$c"
	[ "$(cat "$T/inflight.status")" = 200 ]
	[ "$(jq_py "$T/inflight" 'd["usage"]["completion_tokens"]')" = 1500 ]
	for i in $(seq 100); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
	rc=0
	wait "$SRV_PID" || rc=$?
	SRV_PID=""
	[ "$rc" -eq 0 ]
	grep -q 'SIGTERM: stopping' "$SRV_LOG"
}

@test "SIGTERM with --shutdown-timeout 0: the request in flight is cancelled (503), exit 0" {
	start_server -m "$M" --parallel 1 --shutdown-timeout 0 -c 4096
	curl -s --max-time 60 -o "$T/inflight" -w '%{http_code}' -d '{"prompt":"In the beginning","max_tokens":3000,"ignore_eos":true}' \
		"$URL/v1/completions" >"$T/inflight.status" &
	c=$!
	wait_health slots_processing 1
	stop_server
	wait "$c" || true
	cat "$SRV_LOG"
	[ "$SRV_RC" -eq 0 ]
	[ "$(cat "$T/inflight.status")" = 503 ]
	[[ "$(cat "$T/inflight")" == *'shutting down'* ]]
}

@test "usage errors: exit 2 with one message; a taken port: exit 1" {
	run "$NTX_BIN/ntx-serve" -m "$M" --port 70000
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "ntx-serve: --port: "* ]]
	run "$NTX_BIN/ntx-serve"
	[ "$status" -eq 2 ]
	run "$NTX_BIN/ntx-serve" -m "$M" --host nowhere
	[ "$status" -eq 1 ]
	[[ "$output" == *"--host: 'nowhere' is not an IPv4 or IPv6 address"* ]]
	run "$NTX_BIN/ntx-serve" -m "$M" --chat-template nonesuch
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "ntx-serve: --chat-template: unrecognised chat template"*"--chat-template NAME"* ]]
	run "$NTX_BIN/ntx-serve" -h
	[ "$status" -eq 0 ]
	[[ "$output" == *"/v1/chat/completions"* ]]
	start_server -m "$M" --parallel 1
	port=${URL##*:}
	run timeout 20 "$NTX_BIN/ntx-serve" -m "$M" --port "$port" -t 1
	[ "$status" -eq 1 ]
	[[ "$output" == "ntx-serve: cannot listen on 127.0.0.1 port $port"* ]]
	# the chat format's line comes at start, before the port; -q silences it
	run timeout 20 "$NTX_BIN/ntx-serve" -m "$NOTMPL" --port "$port" -t 1
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 2 ]
	[[ "${lines[0]}" == "ntx-serve: the model has no tokenizer.chat_template: chat uses chatml"* ]]
	run timeout 20 "$NTX_BIN/ntx-serve" -m "$NOTMPL" --port "$port" -t 1 -q
	[ "$status" -eq 1 ]
	[[ "$output" == "ntx-serve: cannot listen on 127.0.0.1 port $port"* ]]
	[ "${#lines[@]}" -eq 1 ]
}

@test "load: 32 clients x 4 requests, mixed streams and disconnects, 3 rounds: texts equal ntx-run alone, no slot leak, flat memory" {
	start_server -m "$M" --parallel 8
	# under AddressSanitizer (make asan) freed memory stays in quarantine
	mem=""
	[[ "${BUILD:-}" != *asan* ]] || mem=--no-memory-check
	run timeout 400 python3 "$BATS_TEST_DIRNAME/../serve/load.py" "$RUN" "$M" "$URL" "$SRV_PID" $mem
	echo "# $output" >&3
	[ "$status" -eq 0 ]
	echo "$output" >"$T/load.json"
	[ "$(jq_py "$T/load.json" 'sum(r["completed"] for r in d["rounds"])')" -gt 300 ]
	[ "$(jq_py "$T/load.json" 'min(r["disconnected"] for r in d["rounds"])')" -gt 0 ]
}
