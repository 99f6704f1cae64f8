#!/usr/bin/env bats
# ntx-run --batch (doc/batch-jsonl.md) and --json: every request's greedy text
# equals the same prompt run alone, at any --parallel; bad lines, oversized
# requests, a closing stdin, a closed stdout and Ctrl-C never lose the other
# requests' results.

load gguf_helpers

setup_file() {
	export RUN="$NTX_BIN/ntx-run"
	export F="$NTX_FIXTURES"
	export S="$F/models/stories260K.gguf"
	export Q="$F/tinymodel/tinymodel-q8_0.gguf"
	export D="$BATS_FILE_TMPDIR"
	[ -x "$RUN" ] || { echo "no $RUN (make first)" >&2; return 1; }
	self_contained_models "$D" || return 1
	# six greedy requests of different lengths, and their texts run alone
	python3 - "$D/req.jsonl" <<'PY'
import json, sys
P = [("In the beginning", 20), ("The old man looked at the sea and", 25), ("A computer is", 10),
     ("And the LORD said unto Moses,", 31), ("The committee reported that", 7),
     ("Blessed are", 16)]
with open(sys.argv[1], "w") as f:
    for i, (p, n) in enumerate(P):
        f.write(json.dumps({"id": i, "prompt": p, "n_predict": n, "temp": 0}) + "\n")
PY
	python3 - "$D/req.jsonl" "$D/alone.json" <<'PY'
import json, subprocess, os, sys
out = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    t = subprocess.run([os.environ["RUN"], "-m", os.environ["Q"], "-q", "-p", r["prompt"],
                        "-n", str(r["n_predict"]), "--temp", "0"], capture_output=True, check=True)
    out[str(r["id"])] = t.stdout.decode()
json.dump(out, open(sys.argv[2], "w"))
PY
}

setup() {
	T="$BATS_TEST_TMPDIR"
}

# json_lines FILE EXPR: EXPR (Python, r = the record) for each record of a
# JSON Lines file in input-line order, printed with str() and joined by
# spaces.
json_lines() {
	python3 - "$1" "$2" <<'PY'
import json, sys
rs = sorted((json.loads(l) for l in open(sys.argv[1]) if l.strip()), key=lambda r: r["line"])
print(" ".join(str(eval(sys.argv[2], {"r": r})) for r in rs))
PY
}

# json_id FILE ID: the "text" of the record whose id prints as ID.
json_id() {
	python3 - "$1" "$2" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if str(r.get("id")) == sys.argv[2]:
        sys.stdout.write(r["text"])
PY
}

# check_alone RESULTS.jsonl: every result's text equals the prompt run alone,
# every request has exactly one record, tokens = n_predict, stop "length".
check_alone() {
	python3 - "$1" "$D/req.jsonl" "$D/alone.json" <<'PY'
import json, sys
res = [json.loads(l) for l in open(sys.argv[1])]
req = {json.loads(l)["id"]: json.loads(l) for l in open(sys.argv[2])}
alone = json.load(open(sys.argv[3]))
assert sorted(r["id"] for r in res) == sorted(req), [r["id"] for r in res]
for r in res:
    q = req[r["id"]]
    assert r["text"] == alone[str(r["id"])], (r["id"], r["text"], alone[str(r["id"])])
    assert r["tokens"] == q["n_predict"] and r["stop_reason"] == "length", r
    assert r["prompt_tokens"] > 1 and r["line"] == r["id"] + 1, r
    assert set(r["timings"]) == {"prompt_ms", "gen_ms", "gen_tok_per_s"}, r
    assert list(r)[:6] == ["id", "text", "tokens", "stop_reason", "prompt_tokens", "line"], list(r)
PY
}

@test "--parallel 1, 3 and 8: each greedy text equals the prompt run alone" {
	for p in 1 3 8; do
		run --separate-stderr "$RUN" -m "$Q" --batch --parallel $p <"$D/req.jsonl"
		[ "$status" -eq 0 ]
		printf '%s\n' "$output" >"$T/out$p.jsonl"
		check_alone "$T/out$p.jsonl"
		[[ "$stderr" == *"ntx-run: batch: 6 requests (0 errors), 109 tokens generated in "*", $p parallel" ]]
	done
	# with one slot the results come in input order
	expect "$(python3 -c 'import json,sys; print([json.loads(l)["id"] for l in open(sys.argv[1])])' "$T/out1.jsonl")" \
		"[0, 1, 2, 3, 4, 5]"
}

@test "prompts longer than the ubatch: cut as alone, each text equals running alone" {
	"$NTX_BIN/ntx-plan" "$Q" --ubatch 16 -c 256 -o "$T/plan.json"
	python3 - "$T/r.jsonl" <<'PY'
import json, sys
P = ["The old man looked at the sea and thought about the long days of his youth, when the fish "
     "were many and the boats were small", "A computer is",
     "And the LORD said unto Moses, Go in unto Pharaoh, and tell him, Thus saith the LORD God of "
     "the Hebrews, Let my people go, that they may serve me.", "Blessed are the meek: for they"]
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(P):
        f.write(json.dumps({"id": i, "prompt": p, "n_predict": 12, "temp": 0}) + "\n")
PY
	# and a ubatch smaller than the batch (a step holds one token of each sequence)
	"$NTX_BIN/ntx-plan" "$Q" --ubatch 2 --parallel 3 -c 256 -o "$T/plan2.json"
	for p in 1 3; do
		run --separate-stderr "$RUN" --plan "$T/plan.json" --batch --parallel $p <"$T/r.jsonl"
		[ "$status" -eq 0 ]
		printf '%s\n' "$output" >"$T/out$p.jsonl"
	done
	run --separate-stderr "$RUN" --plan "$T/plan2.json" --batch <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out2.jsonl"
	python3 - "$T/r.jsonl" "$T/out1.jsonl" "$T/out3.jsonl" "$T/plan.json" "$T/out2.jsonl" "$T/plan2.json" <<'PY'
import json, os, subprocess, sys
req = [json.loads(l) for l in open(sys.argv[1])]
for outs, plan in (([sys.argv[2], sys.argv[3]], sys.argv[4]), ([sys.argv[5]], sys.argv[6])):
    outs = [{r["id"]: r for r in map(json.loads, open(f))} for f in outs]
    assert max(r["prompt_tokens"] for r in outs[0].values()) > 32, outs[0]
    for q in req:
        alone = subprocess.run([os.environ["RUN"], "--plan", plan, "-q", "-p", q["prompt"],
                                "-n", "12", "--temp", "0"], capture_output=True, check=True)
        for o in outs:
            assert o[q["id"]]["text"] == alone.stdout.decode(), (plan, q["id"], o[q["id"]]["text"])
            assert o[q["id"]]["tokens"] == 12, o[q["id"]]
PY
}

@test "results come as each request finishes: short ones first" {
	printf '%s\n' '{"id":"long","prompt":"In the beginning","n_predict":40,"temp":0}' \
		'{"id":"short","prompt":"In the beginning","n_predict":2,"temp":0}' >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch --parallel 2 <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	expect "$(printf '%s\n' "$output" | python3 -c 'import json,sys; print(" ".join(json.loads(l)["id"] for l in sys.stdin))')" \
		"short long"
}

@test "malformed lines: error records with their line numbers; the others complete" {
	{
		echo '{"id": 1, "prompt": "In the beginning", "n_predict": 5, "temp": 0}'
		echo 'not json'
		echo '[1, 2]'
		echo '"a string"'
		echo '{"id": "np"}'
		echo '{"id": "pi", "prompt": 42}'
		echo '{"id": "nx", "prompt": "x", "n_predict": "x"}'
		echo '{"id": "nf", "prompt": "x", "n_predict": 1.5}'
		echo '{"id": "tn", "prompt": "x", "temp": -1}'
		echo '{"id": "ch", "prompt": "x", "chat": "yes"}'
		echo '{"id": "sy", "prompt": "x", "chat": true, "system": 5}'
		echo '{"id": "dk", "prompt": "x", "prompt": "y"}'
		echo ''
		echo '{"id": 2, "prompt": "A computer is", "n_predict": 4, "temp": 0}'
	} >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch --parallel 2 <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"batch: 13 requests (11 errors)"* ]]
	printf '%s\n' "$output" >"$T/out.jsonl"
	python3 - "$T/out.jsonl" <<'PY'
import json, sys
res = [json.loads(l) for l in open(sys.argv[1])]
err = {r["line"]: r for r in res if "error" in r}
ok = {r["id"]: r for r in res if "error" not in r}
assert sorted(ok) == [1, 2] and ok[1]["tokens"] == 5 and ok[2]["tokens"] == 4, ok
want = {2: (None, "invalid JSON at column "), 3: (None, "a request must be a JSON object"),
        4: (None, "a request must be a JSON object"), 5: ("np", 'missing "prompt"'),
        6: ("pi", '"prompt" must be a string'),
        7: ("nx", '"n_predict" must be an integer in [-1, 1073741824]'),
        8: ("nf", '"n_predict" must be an integer'), 9: ("tn", '"temp" must be a number in [0, 100]'),
        10: ("ch", '"chat" must be true or false'), 11: ("sy", '"system" must be a string'),
        12: ("dk", None)}
assert sorted(err) == sorted(want), sorted(err)
for line, (i, msg) in want.items():
    r = err[line]
    assert list(r) == ["id", "error", "line"], r
    if line != 12:
        assert r["id"] == i and r["error"].startswith(msg), (line, r)
assert "duplicate" in err[12]["error"], err[12]
PY
}

@test "a request larger than the context: an error record; the others complete" {
	need_fixtures
	long=$(head -c 2000 "$F/tinymodel/eval.txt" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
	{
		echo '{"id": "a", "prompt": "In the beginning", "n_predict": 5, "temp": 0}'
		echo "{\"id\": \"big\", \"prompt\": $long, \"n_predict\": 5}"
		echo '{"id": "b", "prompt": "A computer is", "n_predict": 100, "temp": 0}'
	} >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" -c 64 --batch --parallel 2 <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	expect "$(json_lines "$T/out.jsonl" 'r["id"] == "big" and r["line"] == 2 and r["error"].startswith("the prompt has ") and r["error"].endswith("more than the context size 64 (use -c)")')" \
		"False True False"
	# b fills the 64-token context: stop reason "context", 64 - 4 + 1 tokens
	expect "$(json_lines "$T/out.jsonl" 'r.get("stop_reason"), r.get("tokens")')" \
		"('length', 5) (None, None) ('context', 61)"
}

@test "stdin closing mid-line: complete requests still run; a cut one is an error record" {
	printf '%s\n%s' '{"id": 1, "prompt": "In the beginning", "n_predict": 3, "temp": 0}' \
		'{"id": 2, "prompt": "A computer is", "n_predict": 3, "temp": 0}' >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	expect "$(json_lines "$T/out.jsonl" 'r["id"], r["tokens"]')" "(1, 3) (2, 3)"
	printf '%s\n%s' '{"id": 1, "prompt": "In the beginning", "n_predict": 3, "temp": 0}' \
		'{"id": 2, "prompt": "A comp' >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	expect "$(json_lines "$T/out.jsonl" 'r["id"], r.get("tokens"), r.get("line"), "error" in r')" \
		"(1, 3, 1, False) (None, None, 2, True)"
	# no input at all: no records, exit 0
	run --separate-stderr "$RUN" -m "$Q" --batch </dev/null
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "ids are echoed as given; a missing id is null; unknown keys are ignored" {
	{
		echo '{"id": 7, "prompt": "In the beginning", "n_predict": 2, "temp": 0}'
		echo '{"id": "seven", "prompt": "In the beginning", "n_predict": 2, "temp": 0, "foo": [1, {"x": 2}]}'
		echo '{"id": {"k": [1, 2.5, null]}, "prompt": "In the beginning", "n_predict": 2, "temp": 0}'
		echo '{"id": 1.5, "prompt": "In the beginning", "n_predict": 2, "temp": 0, "stream": true}'
		echo '{"prompt": "In the beginning", "n_predict": 2, "temp": 0}'
	} >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch --parallel 1 <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	expect "$(json_lines "$T/out.jsonl" 'r["id"]')" "7 seven {'k': [1, 2.5, None]} 1.5 None"
	expect "$(json_lines "$T/out.jsonl" 'r["text"]')" "$(printf ', the %.0s' 1 2 3 4 5 | sed 's/ $//')"
}

@test "per-request temp and seed: reproducible, and equal to the same options alone" {
	{
		echo '{"id": 1, "prompt": "In the beginning", "n_predict": 15, "temp": 0.8, "seed": 42}'
		echo '{"id": 2, "prompt": "In the beginning", "n_predict": 15, "temp": 0.8, "seed": 42}'
		echo '{"id": 3, "prompt": "In the beginning", "n_predict": 15, "temp": 0.8, "seed": 43}'
		echo '{"id": 4, "prompt": "In the beginning", "n_predict": 15, "temp": 0}'
	} >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch --parallel 4 <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	t1=$(json_id "$T/out.jsonl" 1)
	expect "$(json_id "$T/out.jsonl" 2)" "$t1"
	[ "$(json_id "$T/out.jsonl" 3)" != "$t1" ]
	[ "$(json_id "$T/out.jsonl" 4)" != "$t1" ]
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning" -n 15 --temp 0.8 --seed 42
	expect "$output" "$t1"
	# the command line's sampling options are the defaults of every request
	run --separate-stderr "$RUN" -m "$Q" --batch --temp 0.8 --seed 42 -n 15 \
		<<<'{"id": 1, "prompt": "In the beginning"}'
	printf '%s\n' "$output" >"$T/o2.jsonl"
	expect "$(json_id "$T/o2.jsonl" 1)" "$t1"
}

@test "chat requests equal --chat alone; n_predict 0 generates nothing" {
	{
		echo '{"id": 1, "prompt": "Hello", "chat": true, "system": "Be brief.", "n_predict": 6, "temp": 0}'
		echo '{"id": 2, "prompt": "Hello", "n_predict": 0}'
	} >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	run --separate-stderr "$RUN" -m "$Q" -q --chat --system "Be brief." -p Hello -n 6 --temp 0
	expect "$(json_id "$T/out.jsonl" 1)" "$output"
	expect "$(json_lines "$T/out.jsonl" 'r["prompt_tokens"], r["tokens"], r["stop_reason"]')" \
		"(24, 6, 'length') (4, 0, 'length')"
	expect "$(json_id "$T/out.jsonl" 2)" ""
}

@test "\"messages\" requests: rendered with the chat template, equal to --chat alone; bad messages are error records" {
	{
		echo '{"id": 1, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "n_predict": 6, "temp": 0}'
		echo '{"id": 2, "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}, {"role": "user", "content": "Who are you?"}], "n_predict": 5, "temp": 0}'
		echo '{"id": 3, "messages": [{"role": "user", "content": "Hi"}], "prompt": "Hi"}'
		echo '{"id": 4, "messages": [{"role": "robot", "content": "Hi"}]}'
		echo '{"id": 5, "messages": []}'
		echo '{"id": 6, "messages": [{"role": "user", "content": "Hi"}], "system": "x"}'
	} >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$Q" --batch --parallel 2 <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	run --separate-stderr "$RUN" -m "$Q" -q --chat --system "Be brief." -p Hello -n 6 --temp 0
	expect "$(json_id "$T/out.jsonl" 1)" "$output"
	python3 - "$T/out.jsonl" <<'PY'
import json, sys
r = {x["id"]: x for x in map(json.loads, open(sys.argv[1]))}
assert r[1]["prompt_tokens"] == 24 and r[2]["tokens"] == 5, r
assert r[3]["error"] == 'give "prompt" or "messages", not both', r[3]
assert r[4]["error"] == '"messages[0].role" must be "system", "user" or "assistant"', r[4]
assert r[5]["error"] == '"messages" must be a non-empty array', r[5]
assert r[6]["error"].startswith('"system" does not apply to "messages"'), r[6]
PY
	# the Llama 3 text of the 3-message conversation, through -p with the template's tokens
	run --separate-stderr "$RUN" -m "$Q" -q -p '<|start_header_id|>user<|end_header_id|>

Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>

Hello there.<|eot_id|><|start_header_id|>user<|end_header_id|>

Who are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>

' -n 5 --temp 0
	expect "$(json_id "$T/out.jsonl" 2)" "$output"
}

@test "prefix reuse: a request that extends a finished one evaluates only the rest; texts equal running alone" {
	first=$("$RUN" -m "$Q" -q -p "In the beginning" -n 12 --temp 0)
	python3 - "$first" >"$T/r.jsonl" <<'PY'
import json, sys
print(json.dumps({"id": 1, "prompt": "In the beginning", "n_predict": 12, "temp": 0}))
print(json.dumps({"id": 2, "prompt": "In the beginning" + sys.argv[1] + " and", "n_predict": 10, "temp": 0}))
print(json.dumps({"id": 3, "prompt": "In the beginning", "n_predict": 12, "temp": 0}))
PY
	run --separate-stderr "$RUN" -m "$Q" --batch --parallel 1 --stats-json "$T/s.json" <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	expect "$(json_id "$T/out.jsonl" 1)" "$first"
	expect "$(json_id "$T/out.jsonl" 3)" "$first"
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning$first and" -n 10 --temp 0
	expect "$(json_id "$T/out.jsonl" 2)" "$output"
	# request 2 reuses request 1's prompt and 11 of its 12 tokens (the last
	# was never evaluated); request 3's prompt is all cached but its last token
	python3 - "$T/out.jsonl" "$T/s.json" <<'PY'
import json, sys
r = {x["id"]: x for x in map(json.loads, open(sys.argv[1]))}
assert r[1]["reused_tokens"] == 0, r[1]
assert r[2]["reused_tokens"] >= r[1]["prompt_tokens"] + 10, r[2]
assert r[3]["reused_tokens"] == r[3]["prompt_tokens"] - 1, r[3]
s = json.load(open(sys.argv[2]))
assert s["n_prompt_reused"] == r[2]["reused_tokens"] + r[3]["reused_tokens"], s
PY
}

@test "SentencePiece text keeps its leading space (stories260K), as the plain output" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a" -n 3 --temp 0
	expect "$output" " time, there"
	run --separate-stderr "$RUN" -m "$S" -q --batch <<<'{"id": 1, "prompt": "Once upon a", "n_predict": 3, "temp": 0}'
	printf '%s\n' "$output" >"$T/out.jsonl"
	expect "$(json_id "$T/out.jsonl" 1)" " time, there"
}

# san BYTES-FILE: the bytes as JSON text: valid UTF-8 as is, every byte that
# does not start a complete strict sequence as U+FFFD.
san() {
	python3 - "$1" <<'PY'
import sys
b, out, i = open(sys.argv[1], "rb").read(), [], 0
while i < len(b):
    for n in (1, 2, 3, 4):
        try:
            c = b[i:i + n].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(c) == 1:
            out.append(c); i += n; break
    else:
        out.append("\ufffd"); i += 1
sys.stdout.write("".join(out))
PY
}

@test "a text that is not valid UTF-8 gets U+FFFD; the other requests are unaffected" {
	need_fixtures
	# stories260K at temperature 20, seed 1: byte tokens that form no character
	"$RUN" -m "$S" -q -p Once -n 4 --temp 20 --top-k 0 --top-p 1 --min-p 0 --seed 1 >"$T/plain.bin"
	! python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$T/plain.bin" 2>/dev/null
	printf '%s\n' '{"id": 1, "prompt": "Once", "n_predict": 4, "temp": 20, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 1}' \
		'{"id": 2, "prompt": "Once", "n_predict": 4, "temp": 0}' >"$T/r.jsonl"
	run --separate-stderr "$RUN" -m "$S" --batch <"$T/r.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/out.jsonl"
	expect "$(json_id "$T/out.jsonl" 1)" "$(san "$T/plain.bin")"
	expect "$(json_id "$T/out.jsonl" 2)" " upon a time,"
	# --json: the same text in the summary, valid UTF-8 in every event
	run --separate-stderr "$RUN" -m "$S" -q -p Once -n 4 --temp 20 --top-k 0 --top-p 1 --min-p 0 \
		--seed 1 --json
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" | tail -1 >"$T/done.json"
	expect "$(json "$T/done.json" 'd["text"]')" "$(san "$T/plain.bin")"
	# a character cut by the end of generation (teacher-forced byte tokens)
	run --separate-stderr "$RUN" -m "$S" -q -p x --force-ids "231 232 163" --json
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" | tail -1 >"$T/done.json"
	expect "$(json "$T/done.json" 'd["text"] == "\ufffd" * 3')" true
}

@test "--json: token events, then a summary whose text equals the plain output" {
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a" -n 12 --temp 0
	plain=$output
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a" -n 12 --temp 0 --json
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/ev.jsonl"
	python3 - "$T/ev.jsonl" "$plain" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
tok, done = ev[:-1], ev[-1]
assert len(tok) == 12 and all(list(e) == ["event", "id", "text"] and e["event"] == "token" for e in tok)
assert list(done)[0] == "event" and done["event"] == "done", done
assert "".join(e["text"] for e in tok) == done["text"] == sys.argv[2], (done["text"], sys.argv[2])
assert done["tokens"] == [e["id"] for e in tok] and done["n_gen"] == 12, done
assert done["stop_reason"] == "length" and done["n_prompt"] == 4 and done["format"] == "ntx.stats"
PY
}

@test "a closed stdout (| head -n 1) ends a batch quietly with exit 0" {
	python3 -c 'import json
for i in range(400): print(json.dumps({"id": i, "prompt": "Once upon a time", "n_predict": 50}))' >"$T/r.jsonl"
	run bash -c '"$RUN" -m "$S" --batch --parallel 2 <"$0" 2>"$1" | head -n 1; exit ${PIPESTATUS[0]}' "$T/r.jsonl" "$T/err"
	[ "$status" -eq 0 ]
	[[ "$output" == '{"id":'* ]]
	! grep -v 'using the CPU' "$T/err"
	# a full disk is an error
	[ -c /dev/full ] || skip "no /dev/full"
	run bash -c '"$RUN" -m "$S" -q --batch <"$0" >/dev/full' "$T/r.jsonl"
	[ "$status" -eq 1 ]
	expect "$output" "ntx-run: writing results: No space left on device"
}

@test "Ctrl-C: finished results kept, the request in flight reported as interrupted, exit 130" {
	mkfifo "$T/in"
	"$RUN" -m "$Q" -c 8192 --batch --parallel 2 <"$T/in" >"$T/out.jsonl" 2>"$T/err" 3>&- &
	pid=$!
	exec 5>"$T/in"
	echo '{"id": "done", "prompt": "In the beginning", "n_predict": 3, "temp": 0}' >&5
	echo '{"id": "long", "prompt": "In the beginning", "n_predict": 8000, "temp": 0}' >&5
	sleep 1.5
	interrupted "$pid" ntx-run
	exec 5>&-
	expect "$(json_lines "$T/out.jsonl" 'r["id"], r["stop_reason"], r["tokens"] > 0')" \
		"('done', 'length', True) ('long', 'interrupted', True)"
	grep -q '^ntx-run: interrupted$' "$T/err"
}

@test "Ctrl-C while waiting for input: exit 130" {
	mkfifo "$T/in"
	"$RUN" -m "$S" --batch <"$T/in" >"$T/out.jsonl" 2>"$T/err" 3>&- &
	pid=$!
	exec 5>"$T/in"
	echo '{"id": 1, "prompt": "Once", "n_predict": 2}' >&5
	sleep 1
	interrupted "$pid" ntx-run
	exec 5>&-
	expect "$(json_lines "$T/out.jsonl" 'r["id"], r["tokens"]')" "(1, 2)"
}

@test "read errors during a batch: every request in flight gets an error record, exit 1" {
	"$NTX_BIN/ntx-plan" "$Q" --vram-budget 0 --ram-budget 10M -c 256 --pack "$T/q.ntxp" -o "$T/plan.json"
	"$NTX_BIN/ntx-pack" -q "$Q" --plan "$T/plan.json" --compress none
	NTX_FAULT_READ=40 run --separate-stderr timeout 60 "$RUN" --plan "$T/plan.json" --batch \
		--parallel 2 <"$D/req.jsonl"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"ntx-run: "*"Input/output error"* ]]
	printf '%s\n' "$output" >"$T/out.jsonl"
	# results before the fault, then one error record per request in flight
	python3 - "$T/out.jsonl" <<'PY'
import json, sys
res = [json.loads(l) for l in open(sys.argv[1])]
errs = [r for r in res if "error" in r]
assert len(errs) == 2 and all("Input/output error" in r["error"] for r in errs), res
assert len({r["id"] for r in res}) == len(res), res
PY
}

@test "--stats-json for a batch; no progress bar when stderr is not a terminal" {
	run --separate-stderr "$RUN" -m "$Q" --batch --parallel 3 --stats-json "$T/s.json" <"$D/req.jsonl"
	[ "$status" -eq 0 ]
	[[ "$stderr" != *$'\r'* ]]
	expect "$(json "$T/s.json" '[d[k] for k in ("format", "mode", "n_requests", "n_errors", "n_gen", "n_parallel")]')" \
		'["ntx.stats", "batch", 6, 0, 109, 3]'
}

@test "a progress bar on stderr when it is a terminal" {
	command -v script >/dev/null || skip "no script(1)"
	run script -qec "\"$RUN\" -m \"$Q\" --batch --parallel 3 <\"$D/req.jsonl\" >\"$T/out.jsonl\"" /dev/null
	[ "$status" -eq 0 ]
	[[ "$output" == *$'\r'"ntx-run: batch: "*" done (0 errors), "* ]]
	check_alone "$T/out.jsonl"
	run script -qec "\"$RUN\" -q -m \"$Q\" --batch <\"$D/req.jsonl\" >\"$T/out.jsonl\"" /dev/null
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}
