#!/usr/bin/env bats
# ntx-run -i (--chat -i, -cnv): a conversation over a pipe and under tmux.
# With prefix reuse each turn evaluates only its new tokens, and each reply
# equals the same conversation run from scratch (--batch "messages").

setup_file() {
	export RUN="$NTX_BIN/ntx-run"
	export M="$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf"
	[ -x "$RUN" ] || { echo "no $RUN (make first)" >&2; return 1; }
}

setup() {
	T="$BATS_TEST_TMPDIR"
	SESSION="ntx-i"
	# a tmux server of the test's own (no user configuration, no race with
	# another test's server shutting down)
	SOCK="ntx-i-$$-$BATS_TEST_NUMBER"
}

teardown() {
	tm kill-server 2>/dev/null || true
}

tm() { tmux -L "$SOCK" -f /dev/null "$@"; }

@test "-i over a pipe, 5 turns: each evaluates only its new tokens; replies equal the conversation run alone" {
	printf 'Hello\nWho are you?\nTell me more.\nWhy?\nThanks.\n' >"$T/in"
	run "$RUN" -m "$M" -t 2 -i -n 16 --temp 0 --system "Be brief." --stats-json "$T/s.json" <"$T/in"
	[ "$status" -eq 0 ]
	"$RUN" -m "$M" -t 2 -q -i -n 16 --temp 0 --system "Be brief." <"$T/in" >"$T/out"
	[ "$(wc -l <"$T/out")" -eq 5 ]
	python3 - "$T/s.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["turns"]
assert len(t) == 5, t
assert t[0]["n_reused"] == 0 and t[0]["n_evaluated"] == t[0]["n_prompt"], t[0]
for a, b in zip(t, t[1:]):
    cached = a["n_prompt"] + a["n_gen"] - 1   # the last sampled token is not evaluated
    assert b["n_reused"] == cached, (a, b)
    assert b["n_evaluated"] == b["n_prompt"] - cached, (a, b)
PY
	# the same conversations from scratch through --batch
	python3 - "$T/in" "$T/out" >"$T/req.jsonl" <<'PY'
import json, sys
users = open(sys.argv[1]).read().splitlines()
replies = open(sys.argv[2]).read().split("\n")[:5]
msgs = [{"role": "system", "content": "Be brief."}]
for i, u in enumerate(users):
    msgs.append({"role": "user", "content": u})
    print(json.dumps({"id": i, "messages": msgs, "n_predict": 16, "temp": 0}))
    msgs.append({"role": "assistant", "content": replies[i]})
PY
	"$RUN" -m "$M" -t 2 -q --batch --parallel 1 <"$T/req.jsonl" >"$T/alone.jsonl"
	python3 - "$T/alone.jsonl" "$T/out" <<'PY'
import json, sys
alone = [json.loads(l) for l in open(sys.argv[1])]
replies = open(sys.argv[2]).read().split("\n")[:5]
for r in alone:
    assert r["text"] == replies[r["id"]], (r["id"], r["text"], replies[r["id"]])
PY
}

@test "-i: the time to the first token of turn 5 stays within 1.5x of turn 1 (best of 3)" {
	printf 'Tell me about the sea.\nAnd the mountains?\nAnd the rivers?\nAnd the forests?\nAnd the deserts?\n' >"$T/in"
	ok=0
	for try in 1 2 3; do
		"$RUN" -m "$M" -t 2 -q -i -n 24 --temp 0 --stats-json "$T/s.json" <"$T/in" >/dev/null
		r=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["turns"]; print("%.3f %d %d" % (t[4]["ttft_ms"]/t[0]["ttft_ms"], t[0]["n_evaluated"], t[4]["n_evaluated"]))' "$T/s.json")
		echo "# try $try: ttft turn5/turn1, evaluated turn 1, turn 5: $r" >&3
		awk -v r="${r%% *}" 'BEGIN { exit !(r <= 1.5) }' && { ok=1; break; }
	done
	[ "$ok" -eq 1 ]
}

@test "-cnv is -i; -i with -p or --batch is a usage error" {
	run bash -c "printf 'Hi\n' | '$RUN' -m '$M' -t 2 -q -cnv -n 4 --temp 0"
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 1 ]
	run "$RUN" -m "$M" -i -p hi
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "ntx-run: -i reads its turns from stdin"* ]]
	run "$RUN" -m "$M" -i --batch
	[ "$status" -eq 2 ]
}

# tmux helpers: the pane's text, and waiting (bounded: tries x 0.05 s; 1500 generated
# tokens get 120 s, for slow builds such as make asan) for a pattern in it.
pane() { tm capture-pane -p -t "$SESSION" -S -200; }
wait_pane() { # REGEX [tries]
	local i
	for i in $(seq "${2:-200}"); do
		pane | grep -Eq "$1" && return 0
		sleep 0.05
	done
	echo "pane never matched '$1':" >&2
	pane >&2
	return 1
}

# wait_prompt: the last line shown is an empty prompt "> ".
wait_prompt() {
	local i
	for i in $(seq 200); do
		[ "$(pane | grep -v '^\s*$' | tail -n 1)" = ">" ] && return 0
		sleep 0.05
	done
	echo "no prompt:" >&2
	pane >&2
	return 1
}

@test "-i under tmux: 3 turns, Ctrl-C stops a reply and returns to the prompt, EOF ends with 0" {
	command -v tmux >/dev/null || { [ "${CI:-}" != true ] || return 1; skip "no tmux"; }
	tm new-session -d -s "$SESSION" -x 150 -y 50 \
		"'$RUN' -m '$M' -t 2 -c 4096 -n 1500 --ignore-eos --temp 0 -i; echo EXIT=\$? >'$T/exit'; sleep 30"
	wait_pane '^>\s*$'
	tm send-keys -t "$SESSION" 'Hello' Enter
	wait_pane 'turn 1: .* 1500 generated' 2400
	tm send-keys -t "$SESSION" 'Tell me a long story' Enter
	wait_pane 'turn 1: .*' && sleep 0.3
	tm send-keys -t "$SESSION" C-c
	wait_pane 'turn 2: .*, interrupted$' 2400
	wait_prompt
	tm send-keys -t "$SESSION" 'Go on' Enter
	wait_pane 'turn 3: .* 1500 generated' 2400
	# the interrupted reply stayed in the history: turn 3 reuses it
	n=$(pane | sed -n 's/.*turn 3: [0-9]* prompt tokens (\([0-9]*\) reused.*/\1/p')
	[ "$n" -gt 1500 ]
	tm send-keys -t "$SESSION" C-d
	for i in $(seq 100); do [ -s "$T/exit" ] && break; sleep 0.1; done
	[ "$(cat "$T/exit")" = EXIT=0 ]
}

@test "-i under tmux: Ctrl-C at the prompt ends with 130" {
	command -v tmux >/dev/null || { [ "${CI:-}" != true ] || return 1; skip "no tmux"; }
	tm new-session -d -s "$SESSION" -x 150 -y 50 \
		"'$RUN' -m '$M' -t 2 -n 4 --temp 0 -i; echo EXIT=\$? >'$T/exit'; sleep 30"
	wait_pane '^>\s*$'
	tm send-keys -t "$SESSION" 'Hi' Enter
	wait_pane 'turn 1: '
	wait_prompt
	tm send-keys -t "$SESSION" C-c
	for i in $(seq 100); do [ -s "$T/exit" ] && break; sleep 0.1; done
	[ "$(cat "$T/exit")" = EXIT=130 ]
}
