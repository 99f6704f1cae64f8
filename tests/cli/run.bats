#!/usr/bin/env bats
# ntx-run: exit statuses and messages (doc/ntx-run.1), generation against the
# llama.cpp references in the fixtures, every output mode, and bad input of
# every kind: each error is one line "ntx-run: ..." and an exact status (a
# crash, status >= 128, never passes as an expected failure). CPU only; the
# tiny models keep the whole file well under a minute.

load gguf_helpers

setup_file() {
	export RUN="$NTX_BIN/ntx-run"
	export CALIB="$NTX_BIN/ntx-skip-calib"
	export F="$NTX_FIXTURES"
	export S="$F/models/stories260K.gguf"
	export Q="$F/tinymodel/tinymodel-q8_0.gguf"
	export QF="$F/tinymodel/tinymodel-f16.gguf"
	export Q4="$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf"
	export V3="$F/vocab/ggml-vocab-llama3.gguf"
	export R="$F/ref/stories260K"
	export D="$BATS_FILE_TMPDIR"
	[ -x "$RUN" ] || { echo "no $RUN (make first)" >&2; return 1; }
	self_contained_models "$D" || return 1
	# a plan with most layers on disk, and its pack (tiny q8_0: 14 of 16)
	"$NTX_BIN/ntx-plan" "$Q" --vram-budget 0 --ram-budget 10M -c 256 --pack "$D/q.ntxp" \
		-o "$D/plan.json"
	"$NTX_BIN/ntx-pack" -q "$Q" --plan "$D/plan.json" --compress none
	# a skip file for the q8_0 model (short calibration)
	english_text | head -c 3000 >"$D/calib.txt"
	"$CALIB" -q -m "$Q" -c 128 --count 1 <"$D/calib.txt" >"$D/skip.json"
}

setup() {
	T="$BATS_TEST_TMPDIR"
}

# A GPU makes the "no GPU" tests meaningless: skip them there.
no_gpu() {
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
		skip "a GPU is present"
	fi
}

# ---- usage ----

@test "-h: usage on stdout, nothing on stderr, exit 0" {
	run --separate-stderr "$RUN" -h
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: ntx-run "* ]]
	for o in --perplexity --tokenize --dump-logits --stats-json --batch --self-spec --chat; do
		[[ "$output" == *"$o"* ]]
	done
	[ -z "$stderr" ]
	run "$RUN" -V
	[ "$status" -eq 0 ]
	[[ "$output" == "ntx-run (ntx) "[0-9]* ]]
}

@test "-h to a full disk: exit 1 with a message" {
	[ -c /dev/full ] || skip "no /dev/full"
	run bash -c '"$RUN" -h >/dev/full'
	[ "$status" -eq 1 ]
	expect "$output" "ntx-run: writing output: No space left on device"
}

@test "bad options: one message, a short usage on stderr, exit 2" {
	run --separate-stderr "$RUN" --bogus -m "$S"
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[[ "$stderr" == "ntx-run: invalid option '--bogus'"$'\n'"usage: ntx-run "* ]]
	run --separate-stderr "$RUN" -m
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: option '-m' needs a value"* ]]
	run --separate-stderr "$RUN" -m "$S" -n x
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --n-predict: invalid integer 'x'"* ]]
	run --separate-stderr "$RUN" -m "$S" -c -5
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --ctx-size: "* ]]
	run --separate-stderr "$RUN" -m "$S" --temp hot
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$S" --top-p 1.5
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$S" --repeat-penalty 0
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --repeat-penalty: must be > 0"* ]]
	run --separate-stderr "$RUN" -m "$S" --threads 0
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$S" --kv-type q8
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$S" --skip-layers 3,x
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --skip-layers: invalid layer list '3,x'"* ]]
	run --separate-stderr "$RUN" -m "$S" extra
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: unexpected argument 'extra'"* ]]
	run --separate-stderr "$RUN" -p hi
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: no model: give -m MODEL.gguf or --plan plan.json"* ]]
}

@test "bad sizes and executors: exit 2 as ntx-plan, never ignored (CPU too)" {
	run --separate-stderr "$RUN" -m "$Q4" --vram-budget 24X --ram-budget zzz -p hi -n 1
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[[ "$stderr" == "ntx-run: --vram-budget: invalid size suffix in '24X' (use K, M, G or T)"$'\n'* ]]
	run --separate-stderr "$RUN" -m "$Q4" --ram-budget zzz -p hi -n 1
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --ram-budget: invalid size 'zzz' (expected e.g. 24G, 512M)"$'\n'* ]]
	run --separate-stderr "$NTX_BIN/ntx-plan" "$Q4" --ram-budget zzz
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-plan: --ram-budget: invalid size 'zzz' (expected e.g. 24G, 512M)"$'\n'* ]]
	run --separate-stderr "$RUN" -m "$Q4" --ram-budget 2000T -p hi -n 1
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --ram-budget: size '2000T' is too large (at most 1P)"* ]]
	run --separate-stderr "$RUN" -m "$Q4" --executor npu -p hi -n 1
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --executor: expected auto, gpu or cpu, got 'npu'"* ]]
}

@test "llama.cpp habits: -ngl refused by name; an option taken for a file name refused" {
	run --separate-stderr "$RUN" -m "$Q4" -ngl 99 -p hi
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	[[ "$stderr" == "ntx-run: unknown option -ngl (ntx places layers with --vram-budget or a plan)"$'\n'* ]]
	run --separate-stderr "$RUN" -m "$Q4" --n-gpu-layers=99 -p hi
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: unknown option --n-gpu-layers ("* ]]
	run --separate-stderr "$RUN" -m "$Q4" --perplexity -c 256
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --perplexity: '-c' looks like an option, not a file (a file of that name: ./-c)"$'\n'* ]]
	run --separate-stderr "$RUN" -m -q -p hi
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: -m: '-q' looks like an option, not a file"* ]]
	# an option's value is not taken for a llama.cpp option
	run --separate-stderr "$RUN" -m "$Q4" -q -p -fa -n 1 --temp 0
	[ "$status" -eq 0 ]
	run --separate-stderr "$RUN" -m "$Q4" -q --system -ngl --chat -p x -n 1 --temp 0
	[ "$status" -eq 0 ]
}

@test "options that do not fit the mode: exit 2, nothing run" {
	run --separate-stderr "$RUN" -m "$S" --tokenize --batch
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"exclude each other"* ]]
	run --separate-stderr "$RUN" -m "$S" -p a -f b
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$S" --batch -p hello
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --batch reads its requests from stdin"* ]]
	run --separate-stderr "$RUN" -m "$S" --perplexity x --dump-logits "$T/d.f32"
	[ "$status" -eq 2 ]
	[ ! -e "$T/d.f32" ]
	run --separate-stderr "$RUN" -m "$S" -p hi --self-spec --dump-logits "$T/d.f32"
	[ "$status" -eq 2 ]
	[ ! -e "$T/d.f32" ]
	run --separate-stderr "$RUN" -m "$S" -p hi --draft-k 3
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --draft-k needs --draft, --lookup or --self-spec"* ]]
	run --separate-stderr "$RUN" -m "$S" -p hi --system "be brief"
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$S" --skip a.json --skip-layers 1
	[ "$status" -eq 2 ]
}

# ---- bad model files ----

@test "missing model: exit 1, one line naming the file" {
	run --separate-stderr "$RUN" -m "$T/nope.gguf" -p hi
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/nope.gguf: No such file or directory"
	[ -z "$output" ]
}

@test "a directory as the model: exit 1" {
	run --separate-stderr "$RUN" -m "$T" -p hi
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T: Is a directory"
}

@test "empty, truncated and corrupt GGUF files: exit 1, one line each" {
	need_fixtures
	: >"$T/empty.gguf"
	run --separate-stderr "$RUN" -m "$T/empty.gguf" -p hi
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/empty.gguf: file is empty"
	# cut inside the tensor data
	head -c 100000 "$S" >"$T/cut.gguf"
	run --separate-stderr "$RUN" -m "$T/cut.gguf" -p hi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: $T/cut.gguf: tensor '"*"exceeds"* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	# cut inside the metadata
	head -c 1000 "$S" >"$T/cut2.gguf"
	run --separate-stderr "$RUN" -m "$T/cut2.gguf" -p hi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: $T/cut2.gguf: "* ]]
	# bad magic
	cp "$S" "$T/bad.gguf"
	chmod u+w "$T/bad.gguf"
	printf 'XXXX' | dd of="$T/bad.gguf" conv=notrunc status=none
	run --separate-stderr "$RUN" -m "$T/bad.gguf" -p hi
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/bad.gguf: not a GGUF file (bad magic 58 58 58 58)"
	# the same for --tokenize, which reads only the vocabulary
	run --separate-stderr "$RUN" -m "$T/cut2.gguf" --tokenize -p hi
	[ "$status" -eq 1 ]
	[ -z "$output" ]
}

@test "a vocabulary-only GGUF: generation refused (exit 1), --tokenize works" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$V3" -p hi
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $V3: file has no tensors (a vocabulary-only file?)"
	run --separate-stderr "$RUN" -m "$V3" --tokenize -p "Hello world"
	[ "$status" -eq 0 ]
	expect "$output" "[128000, 9906, 1917]"
}

# ---- backends ----

@test "unknown backend: exit 2" {
	run --separate-stderr "$RUN" -m "$S" --backend tpu -p hi
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --backend: expected cpu, cuda or auto, got 'tpu'"* ]]
}

@test "--backend cuda without a GPU: a clear error, exit 1, no output" {
	no_gpu
	run --separate-stderr "$RUN" -m "$S" --backend cuda -p hi -n 3
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ "$stderr" == "ntx-run: cuda: "* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

@test "--backend auto without a GPU says on stderr that it uses the CPU" {
	need_fixtures
	no_gpu
	run --separate-stderr "$RUN" -m "$S" --backend auto -p "Once upon a time" -n 3 --temp 0
	[ "$status" -eq 0 ]
	[[ "$stderr" == "ntx-run: "*": using the CPU"$'\n'* ]]
	expect "$output" ", there was"
	# -q: not a word
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --temp 0
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
}

# ---- generation against llama.cpp ----

@test "stories260K greedy 'Once upon a time' -n 200 reproduces the reference text" {
	need_fixtures
	# fixtures README 1.2: llama-cli -p "Once upon a time" -n 200 --temp 0
	want='Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high. Lily'"'"'s mom said, "Lily, let'"'"'s go to the park." Lily was sad and didn'"'"'t know what to do.'
	readme=$(tr -s ' \n' '  ' <"$F/README.md")
	[[ "$readme" == *"prints \"$want ...\""* ]] # the quote is still the README's
	run --separate-stderr "$RUN" -m "$S" --backend cpu -c 256 -p "Once upon a time" -n 200 \
		--temp 0 --stats-json "$T/st.json"
	[ "$status" -eq 0 ]
	got=$(printf 'Once upon a time%s' "$output" | tr -s ' \n' '  ')
	expect "${got:0:${#want}}" "$want"
	expect "$(json "$T/st.json" 'd["n_gen"]')" 200
	expect "$(json "$T/st.json" 'd["stop_reason"]')" length
	expect "$(json "$T/st.json" 'd["n_prompt"]')" 5
}

@test "--prompt-ids and --dump-logits: rows match llama.cpp's logits (stories260K p0, F32 KV)" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$S" -q --prompt-ids "$(cat "$R/p0.prompt_ids.txt")" -n 16 \
		--temp 0 --ignore-eos --kv-type f32 --dump-logits "$T/d.f32" --json
	[ "$status" -eq 0 ]
	# 16 prompt rows, then one per generated token, 512 floats each
	expect "$(stat -c %s "$T/d.f32")" $(((16 + 16) * 512 * 4))
	ids=$(printf '%s\n' "$output" | tail -1 | python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["tokens"])))')
	expect "$ids" "$(cat "$R/p0.greedy_ids.txt")"
	python3 - "$T/d.f32" "$R/p0.kvf32.logits.f32" "$R/p0.kvf32.gen_logits.f32" <<'PY'
import sys
from array import array
def rd(p):
    a = array('f'); a.frombytes(open(p, 'rb').read()); return a
got, ref = rd(sys.argv[1]), rd(sys.argv[2]) + rd(sys.argv[3])
assert len(got) == len(ref) == 32 * 512, (len(got), len(ref))
mx = max(abs(x - y) for x, y in zip(got, ref))
assert mx < 1e-3, "max abs diff %g >= 1e-3 (fixtures README 3.3)" % mx
PY
}

@test "--dump-logits row count: n_prompt + n_gen rows, exact size; -n 0: prompt rows only" {
	need_fixtures
	run "$RUN" -m "$S" -q -p "Once upon a time" -n 7 --temp 0 --dump-logits "$T/a.f32"
	[ "$status" -eq 0 ]
	expect "$(stat -c %s "$T/a.f32")" $(((5 + 7) * 512 * 4))
	run "$RUN" -m "$S" -q -p "Once upon a time" -n 0 --dump-logits "$T/b.f32"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	expect "$(stat -c %s "$T/b.f32")" $((5 * 512 * 4))
	# the prompt rows do not depend on what follows
	cmp -n $((5 * 512 * 4)) "$T/a.f32" "$T/b.f32"
}

@test "--prompt-ids equals the same prompt as text; a bad id is an error" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 20 --temp 0
	[ "$status" -eq 0 ]
	text=$output
	run --separate-stderr "$RUN" -m "$S" -q --prompt-ids "1 403 407 261 378" -n 20 --temp 0
	[ "$status" -eq 0 ]
	expect "$output" "$text"
	run --separate-stderr "$RUN" -m "$S" -q --prompt-ids "1 403 512" -n 2
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: token id 512 is out of range [0, 511]"
	run --separate-stderr "$RUN" -m "$S" -q --prompt-ids "1 x" -n 2
	[ "$status" -eq 1 ]
	[ -z "$output" ]
}

@test "prompt from stdin, -p and -f give the same text; an empty prompt is an error" {
	printf 'Once upon a time\n' >"$T/p.txt"
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 12 --temp 0
	a=$output
	run --separate-stderr "$RUN" -m "$S" -q -f "$T/p.txt" -n 12 --temp 0
	expect "$output" "$a"
	run --separate-stderr bash -c '"$RUN" -m "$S" -q -n 12 --temp 0 <"$0"' "$T/p.txt"
	[ "$status" -eq 0 ]
	expect "$output" "$a"
	run --separate-stderr "$RUN" -m "$S" -q -f "$T/nope.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/nope.txt: No such file or directory"
	run --separate-stderr "$RUN" -m "$S" -q --no-bos -p ""
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: the prompt is empty"
}

@test "--perplexity: llama-perplexity's values at -c 128 and -c 256 (within 1%), its last line" {
	need_fixtures
	for c in "128 3.7977" "256 3.5569"; do
		set -- $c
		run --separate-stderr "$RUN" -m "$S" -c "$1" --perplexity "$R/perplexity/tinystory.txt"
		[ "$status" -eq 0 ]
		[[ "$output" =~ ^Final\ estimate:\ PPL\ =\ [0-9]+\.[0-9]{4}\ \+/-\ [0-9]+\.[0-9]{5}$ ]]
		ppl=$(printf '%s\n' "$output" | awk '{ print $5 }')
		awk -v p="$ppl" -v r="$2" 'BEGIN { d = (p - r) / r; exit !(d < 0.01 && d > -0.01) }'
		[[ "$stderr" == *"chunks of $1"* ]]
	done
	# a text shorter than one chunk
	run --separate-stderr "$RUN" -m "$S" -q -c 128 --perplexity <(printf 'Once upon a time')
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: "*": 5 tokens, fewer than one chunk of 128"* ]]
	run --separate-stderr "$RUN" -m "$S" -q --perplexity "$T/nope.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/nope.txt: No such file or directory"
}

# ---- tokenize and chat ----

@test "--tokenize: stories260K prompts give llama.cpp's ids" {
	need_fixtures
	run "$RUN" -m "$S" --tokenize -p "Once upon a time, there was a little girl named Lily."
	[ "$status" -eq 0 ]
	expect "$output" "[$(sed 's/ /, /g' "$R/p0.prompt_ids.txt")]"
	run "$RUN" -m "$S" --tokenize --no-bos -p "Hello"
	expect "$output" "[346, 306, 414]"
}

@test "--tokenize reads its input byte for byte: a trailing newline is kept (as llama-tokenize)" {
	run --separate-stderr bash -c 'printf "Hello world\n" | "$RUN" -m "$Q4" --tokenize'
	[ "$status" -eq 0 ]
	a=$output
	run --separate-stderr "$RUN" -m "$Q4" --tokenize -p $'Hello world\n'
	expect "$output" "$a"
	run --separate-stderr "$RUN" -m "$Q4" --tokenize -p 'Hello world'
	[ "$output" != "$a" ]
	printf 'Hello world\n\n' >"$T/p.txt"
	run --separate-stderr "$RUN" -m "$Q4" --tokenize -p $'Hello world\n\n'
	b=$output
	run --separate-stderr "$RUN" -m "$Q4" --tokenize -f "$T/p.txt"
	expect "$output" "$b"
}

@test "--tokenize on the Llama 3 vocabulary: special tokens parsed, --no-parse-special, --no-bos" {
	need_fixtures
	run bash -c 'printf %s "Hello <|eot_id|> world" | "$RUN" -m "$V3" --tokenize'
	[ "$status" -eq 0 ]
	expect "$output" "[128000, 9906, 220, 128009, 1917]"
	run bash -c 'printf %s "Hello <|eot_id|> world" | "$RUN" -m "$V3" --tokenize --no-parse-special'
	[ "$status" -eq 0 ]
	expect "$output" "[128000, 9906, 83739, 68, 354, 851, 91, 29, 1917]"
	run bash -c 'printf %s "Hello <|eot_id|> world" | "$RUN" -m "$V3" --tokenize --no-bos'
	expect "$output" "[9906, 220, 128009, 1917]"
	run bash -c 'printf "" | "$RUN" -m "$V3" --tokenize --no-bos'
	[ "$status" -eq 0 ]
	expect "$output" "[]"
}

@test "--chat: the Llama 3 header format (with --system) on the tiny model" {
	need_fixtures
	# BOS, <|start_header_id|>user<|end_header_id|>\n\n Hello <|eot_id|>, then
	# the open assistant header
	run --separate-stderr "$RUN" -m "$Q" --tokenize --chat -p "Hello"
	[ "$status" -eq 0 ]
	expect "$output" "[8187, 8189, 6716, 8190, 389, 39, 927, 78, 8191, 8189, 562, 428, 437, 8190, 389]"
	run --separate-stderr "$RUN" -m "$Q" --tokenize --chat --system "Be brief." -p "Hello"
	expect "$output" "[8187, 8189, 1903, 896, 8190, 389, 2803, 4302, 13, 8191, 8189, 6716, 8190, 389, 39, 927, 78, 8191, 8189, 562, 428, 437, 8190, 389]"
	# generation feeds exactly those ids (-v lists them)
	run --separate-stderr "$RUN" -m "$Q" --chat -p "Hello" -n 2 --temp 0 -v
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"ntx-run: prompt: 15 tokens: 8187 8189 6716 8190 389 39 927 78 8191 8189 562 428 437 8190 389"* ]]
	# a model without a chat template
	run --separate-stderr "$RUN" -m "$S" -q --chat -p "Hello" -n 2
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: the model has no tokenizer.chat_template"
}

# ---- output modes ----

@test "--stats-json: llama-bench-like fields" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$S" -t 2 -c 64 -p "Once upon a time" -n 9 --temp 0 \
		--stats-json "$T/s.json"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"prompt 5 tokens"*"tok/s); generated 9 tokens"*"tok/s); stop: length"* ]]
	python3 - "$T/s.json" "$S" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = {"format": "ntx.stats", "version": 1, "model_filename": sys.argv[2], "model_size": 1185376,
        "backend": "cpu", "n_threads": 2, "n_ctx": 64, "kv_type": "f16", "n_prompt": 5,
        "n_gen": 9, "stop_reason": "length"}
for k, v in want.items():
    assert d[k] == v, (k, d[k], v)
assert d["model_n_params"] > 250000
for k in ("t_prompt_ms", "t_gen_ms", "prompt_tok_per_s", "gen_tok_per_s"):
    assert isinstance(d[k], float) and d[k] > 0, (k, d[k])
PY
	# unwritable: exit 1
	[ -c /dev/full ] || skip "no /dev/full"
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --temp 0 --stats-json /dev/full
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: /dev/full: No space left on device"
	[ -c /dev/full ]
}

@test "a prompt typed on a terminal ends with one Ctrl-D" {
	run timeout 30 python3 - "$RUN" -m "$Q4" -n 3 --temp 0 <<'PY'
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
os.write(fd, b"In the beginning\n")
time.sleep(0.3)
os.write(fd, b"\x04")  # one end-of-file, on an empty line
end = time.time() + 20
while time.time() < end:  # drain the output until the program exits
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            eof = not os.read(fd, 4096)
        except OSError:
            eof = True
        if eof:  # the terminal closed: the program has ended
            sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(st))
os.kill(pid, 9)
print("still waiting for input after one Ctrl-D")
sys.exit(9)
PY
	[ "$status" -eq 0 ]
}

@test "-v on the CPU prints the in-memory plan's prediction" {
	run --separate-stderr "$RUN" -m "$Q4" --backend cpu -v -p hi -n 1 --temp 0
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"ntx-run: planned in memory (CPU): predicted "*" tok/s"* ]]
}

@test "-n 0: nothing generated, exit 0" {
	run --separate-stderr "$RUN" -m "$S" -p "Once upon a time" -n 0 --stats-json "$T/s.json"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	expect "$(json "$T/s.json" 'd["n_gen"]')" 0
	expect "$(json "$T/s.json" 'd["n_prompt"]')" 5
}

@test "a prompt longer than -c: a clear error, exit 1, no output" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$S" -c 64 -f "$R/perplexity/tinystory.txt" -n 5
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ "$stderr" == *"ntx-run: the prompt has 998 tokens, more than the context size 64 (use -c)" ]]
}

@test "the context fills: stop reason context" {
	run --separate-stderr "$RUN" -m "$S" -q -c 16 -p "Once upon a time" --temp 0 \
		--stats-json "$T/s.json"
	[ "$status" -eq 0 ]
	expect "$(json "$T/s.json" 'd["stop_reason"]')" context
	expect "$(json "$T/s.json" 'd["n_gen"]')" 12
}

# ---- interruptions and broken outputs ----

@test "a closed stdout (| head -c 10) ends a long generation quietly with exit 0" {
	need_fixtures
	# far more output than a pipe holds: the write must fail, not fit
	run bash -c '"$RUN" -m "$S" -q -c 32768 -n 32000 --ignore-eos --temp 0 -p "Once upon a time" --stats-json "$1" 2>"$0" | head -c 10; exit ${PIPESTATUS[0]}' "$T/err" "$T/s.json"
	[ "$status" -eq 0 ]
	expect "$output" ", there wa"
	[ ! -s "$T/err" ]
	expect "$(json "$T/s.json" 'd["stop_reason"]')" closed
	# without -q: still no error message (and no timing line either)
	run bash -c '"$RUN" -m "$S" -c 32768 -n 32000 --ignore-eos --temp 0 -p "Once upon a time" 2>"$0" | head -c 10 >/dev/null; exit ${PIPESTATUS[0]}' "$T/err"
	[ "$status" -eq 0 ]
	! grep -v 'using the CPU' "$T/err"
}

@test "stdout on a full disk: exit 1 with a message" {
	[ -c /dev/full ] || skip "no /dev/full"
	run bash -c '"$RUN" -m "$S" -q -p "Once upon a time" -n 5 --temp 0 >/dev/full'
	[ "$status" -eq 1 ]
	expect "$output" "ntx-run: writing output: No space left on device"
}

@test "Ctrl-C: exit 130 within seconds, no hang, and no partial logits dump left" {
	"$RUN" -m "$Q" --backend cpu -c 8192 -n 8000 --ignore-eos --temp 0 -p "In the beginning" \
		--dump-logits "$T/d.f32" >"$T/out" 2>"$T/err" 3>&- &
	pid=$!
	sleep 1
	kill -0 "$pid" # still generating
	interrupted "$pid" ntx-run
	grep -q '^ntx-run: interrupted$' "$T/err"
	grep -q 'stop: interrupted' "$T/err"
	[ -s "$T/out" ]
	[ ! -e "$T/d.f32" ]
}

@test "--dump-logits on a full disk: exit 1 naming the file; an unwritable path: exit 1" {
	[ -c /dev/full ] || skip "no /dev/full"
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --temp 0 --dump-logits /dev/full
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: /dev/full: writing logits: No space left on device"
	[ -c /dev/full ] # a device is never removed
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --dump-logits "$T/no/d.f32"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/no/d.f32: No such file or directory"
	[ -z "$output" ]
}

@test "--dump-logits and --stats-json: a failed write keeps the old file; a bad path fails first" {
	echo old >"$T/d.f32"
	echo old >"$T/s.json"
	run limited "$RUN" -m "$Q4" -q -p hi -n 2 --temp 0 --dump-logits "$T/d.f32"
	[ "$status" -eq 1 ]
	expect "$(cat "$T/d.f32")" old
	run limited "$RUN" -m "$Q4" -q -p hi -n 2 --temp 0 --stats-json "$T/s.json"
	[ "$status" -eq 1 ]
	[[ "$output" == *"ntx-run: $T/s.json: File too large" ]]
	expect "$(cat "$T/s.json")" old
	expect "$(ls "$T" | sort | tr '\n' ' ')" "d.f32 s.json " # no temporary left
	# an unwritable --stats-json fails before anything is generated
	run --separate-stderr "$RUN" -m "$Q4" -q -p hi -n 4 --temp 0 --stats-json "$T/no/s.json"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/no/s.json: No such file or directory"
	[ -z "$output" ]
	run --separate-stderr "$RUN" -m "$Q4" -q -p hi -n 2 --temp 0 --stats-json "$T/s.json" \
		--dump-logits "$T/d.f32"
	[ "$status" -eq 0 ]
	expect "$(json "$T/s.json" 'd["n_gen"]')" 2
	[ "$(stat -c %s "$T/d.f32")" -gt 4 ]
}

# ---- skip sets, plans, packs ----

@test "--skip-layers out of range: exit 1; in range: runs" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --skip-layers 5
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: --skip-layers: layer range 5-5 is out of range [0, 4]"
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --skip-layers 3-1
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --skip-layers: layer range 3-1 is reversed"* ]]
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --temp 0 --skip-layers 2,2,2,2,2,4
	[ "$status" -eq 0 ]
	a=$output
	run --separate-stderr "$RUN" -m "$S" -q -p "Once upon a time" -n 3 --temp 0 --skip-layers 2,4
	expect "$output" "$a"
}

@test "--skip with a skip file for another model: refused" {
	run --separate-stderr "$RUN" -m "$S" -q -p hi -n 2 --skip "$D/skip.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"ntx-run: $D/skip.json:"[0-9]+:[0-9]+": made for another model (fingerprint " ]]
	run --separate-stderr "$RUN" -m "$S" -q -p hi -n 2 --skip "$D/plan.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"ntx-run: $D/plan.json:"[0-9]+:[0-9]+": \"format\" is \"ntx.plan\", expected \"ntx.skip\""$ ]]
	run --separate-stderr "$RUN" -m "$S" -q -p hi -n 2 --skip "$T/nope.json"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/nope.json: No such file or directory"
}

@test "--plan with a plan for another model: refused; truncated or bad plan: exit 1" {
	need_fixtures
	run --separate-stderr "$RUN" --plan "$D/plan.json" -m "$QF" -q -p hi -n 2
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: $D/plan.json: the plan was made for another model: "* ]]
	head -c 300 "$D/plan.json" >"$T/cut.json"
	run --separate-stderr "$RUN" --plan "$T/cut.json" -q -p hi -n 2
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: $T/cut.json:"* ]]
	[ -z "$output" ]
	# valid JSON, not a usable plan
	echo '{"format": "ntx.plan", "version": 1}' >"$T/bad.json"
	run --separate-stderr "$RUN" --plan "$T/bad.json" -q -p hi -n 2
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/bad.json:1:1: missing \"model\""
	echo '{"format": "ntx.plan", "version": 99}' >"$T/bad.json"
	run --separate-stderr "$RUN" --plan "$T/bad.json" -q -p hi -n 2
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"ntx.plan version 99 is not supported"* ]]
}

@test "a plan with disk layers: greedy output equals the resident model" {
	run --separate-stderr "$RUN" --plan "$D/plan.json" -q -p "In the beginning" -n 12 --temp 0
	[ "$status" -eq 0 ]
	a=$output
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning" -n 12 --temp 0
	expect "$output" "$a"
}

@test "--io mmap runs a plan with disk layers on the CPU (no SIGFPE); same text as resident" {
	"$NTX_BIN/ntx-plan" "$Q4" --vram-budget 0 --ram-budget 8M -c 256 --pack "$T/m.ntxp" \
		-o "$T/plan.json"
	grep -q '"home": "disk"' "$T/plan.json"
	run --separate-stderr "$RUN" --plan "$T/plan.json" --io mmap -q -p "In the beginning" \
		-n 8 --temp 0
	[ "$status" -eq 0 ]
	a=$output
	run --separate-stderr "$RUN" -m "$Q4" -q -p "In the beginning" -n 8 --temp 0
	[ "$status" -eq 0 ]
	expect "$output" "$a"
}

@test "Q5_0: a generated q5_0 model through inspect, plan with disk layers, pack, run = resident" {
	"$NTX_BIN/ntx-gguf-gen" -q --mix q5_0 --layers 6 -o "$T/q5.gguf"
	"$NTX_BIN/ntx-inspect" "$T/q5.gguf" >"$T/i.json"
	# every matrix but output.weight (Q6_K, as llama.cpp's Q5_0 mix) is Q5_0:
	# 256 x 256 q, o, 256 x 128 k, v, 3 x 256 x 768 ffn = 786432 weights, 22 B per 32
	expect "$(json "$T/i.json" '[d["model"]["file_type"], sorted(d["quant_mix"]), d["layers"][5]["types"]]')" \
		'[8, ["F32", "Q5_0", "Q6_K"], {"F32": 2048, "Q5_0": 540672}]'
	"$NTX_BIN/ntx-plan" "$T/i.json" --vram-budget 0 --ram-budget 2M -c 256 --pack "$T/q5.ntxp" \
		-o "$T/plan.json"
	grep -q '"home": "disk"' "$T/plan.json"
	"$NTX_BIN/ntx-pack" -q "$T/q5.gguf" --plan "$T/plan.json"
	"$NTX_BIN/ntx-pack" -q --verify "$T/q5.ntxp" -m "$T/q5.gguf"
	run --separate-stderr "$RUN" --plan "$T/plan.json" -q -p "In the beginning" -n 12 --temp 0
	[ "$status" -eq 0 ]
	a=$output
	[ -n "$a" ]
	run --separate-stderr "$RUN" -m "$T/q5.gguf" -q -p "In the beginning" -n 12 --temp 0
	[ "$status" -eq 0 ]
	expect "$output" "$a"
}

@test "Q5_0: llama.cpp's fallback for Q4_K rows not a multiple of 256 (n_ff 640) runs" {
	"$NTX_BIN/ntx-gguf-gen" -q --mix q4_k_m --ff 640 -o "$T/fb.gguf"
	"$NTX_BIN/ntx-inspect" "$T/fb.gguf" >"$T/i.json"
	expect "$(json "$T/i.json" '[{t["name"]: t["type"] for t in d["tensors"]}["blk.%d.ffn_down.weight" % i] for i in (0, 1)]')" \
		'["Q5_0", "Q8_0"]'
	run --separate-stderr "$RUN" -m "$T/fb.gguf" -q -p "In the beginning" -n 6 --temp 0 --ignore-eos --json
	[ "$status" -eq 0 ]
	expect "$(printf '%s\n' "$output" | tail -1 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tokens"]))')" 6
}

@test "Q5_0: llama.cpp's logits of quants/ref-a-q5_0, prompt and teacher-forced rows (F16 KV)" {
	need_fixtures
	local RQ="$F/quants/ref/ref-a-q5_0" p
	for p in p0 p1 p2; do
		ids="$(cat "$RQ/$p.prompt_ids.txt" "$RQ/$p.greedy_ids.txt" | tr '\n' ' ')"
		run --separate-stderr "$RUN" -m "$F/quants/ref-a-q5_0.gguf" -q --prompt-ids "$ids" -n 0 \
			--kv-type f16 --dump-logits "$T/$p.f32"
		[ "$status" -eq 0 ]
		# the prompt rows, then one row per greedy id fed back (gen_logits);
		# quants/README.md 4.4: 0.1 max / 0.015 mean for every quantized file
		python3 - "$T/$p.f32" "$RQ/$p.logits.f32" "$RQ/$p.gen_logits.f32" <<'PY'
import sys
from array import array
def rd(p):
    a = array('f'); a.frombytes(open(p, 'rb').read()); return a
got, ref = rd(sys.argv[1]), rd(sys.argv[2]) + rd(sys.argv[3])
assert len(got) == len(ref) and len(ref) % 512 == 0, (len(got), len(ref))
d = [abs(x - y) for x, y in zip(got, ref)]
assert max(d) < 0.1 and sum(d) / len(d) < 0.015, (sys.argv[1], max(d), sum(d) / len(d))
PY
	done
}

# peak_rss_kb CMD...: the command's peak resident set (KiB), its output dropped
peak_rss_kb() {
	python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
}

@test "no GPU, a model larger than RAM: exit 3 at once with the plan and pack commands" {
	"$NTX_BIN/ntx-gguf-gen" --shape 70b --mix q4_k_m --sparse -q -o "$T/q70.gguf"
	run --separate-stderr timeout 60 "$RUN" -m "$T/q70.gguf" --backend cpu --ram-budget 16G -p hi -n 1
	[ "$status" -eq 3 ]
	[ -z "$output" ]
	expect "$stderr" "ntx-run: the model does not fit in RAM; make a plan and a pack: ntx-plan $T/q70.gguf --vram-budget 0 --ram-budget 16G -o plan.json && ntx-pack $T/q70.gguf --plan plan.json, then ntx-run --plan plan.json"
	avail=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	if [ "$avail" -lt $((40 * 1024 * 1024)) ]; then # the detected RAM is too small too
		run --separate-stderr timeout 60 "$RUN" -m "$T/q70.gguf" --backend cpu -p hi -n 1
		[ "$status" -eq 3 ]
		[[ "$stderr" == "ntx-run: the model does not fit in RAM; make a plan and a pack: "* ]]
	fi
}

@test "the CPU reads weights in place: one copy resident, none with --ram-budget; a pack streams the rest" {
	inplace=$(NTX_NO_HUGEPAGES=1 peak_rss_kb "$RUN" -m "$Q4" -p "In the beginning" -n 4 --temp 0)
	budget=$(peak_rss_kb "$RUN" -m "$Q4" --ram-budget 64M -p "In the beginning" -n 4 --temp 0)
	copies=$(peak_rss_kb "$RUN" -m "$Q4" -p "In the beginning" -n 4 --temp 0)
	size=$(( $(stat -c %s "$Q4") / 1024 ))
	echo "in place $inplace KiB, --ram-budget $budget KiB, copies $copies KiB, file $size KiB" >&2
	[ "$budget" -lt $(( inplace + size / 4 )) ] # no second copy of the weights
	[ "$copies" -lt $(( inplace + size / 2 )) ] # the copies replace the map's pages
	# a RAM budget smaller than the model: refused without a pack, streamed with one
	run --separate-stderr "$RUN" -m "$Q4" --ram-budget 14M -p hi -n 1
	[ "$status" -eq 3 ]
	"$NTX_BIN/ntx-plan" "$Q4" --vram-budget 0 --ram-budget 14M --pack "$T/m.ntxp" -o "$T/p.json"
	"$NTX_BIN/ntx-pack" -q "$Q4" --plan "$T/p.json"
	run --separate-stderr "$RUN" -m "$Q4" --pack "$T/m.ntxp" --ram-budget 14M -q -p "In the beginning" -n 6 --temp 0
	[ "$status" -eq 0 ]
	a=$output
	run --separate-stderr "$RUN" -m "$Q4" -q -p "In the beginning" -n 6 --temp 0
	expect "$output" "$a"
}

@test "a plan's context size and sequences are the defaults; larger ones are warned about" {
	run --separate-stderr "$RUN" --plan "$D/plan.json" -p "In the beginning" -n 2 --temp 0 \
		--stats-json "$T/s.json"
	[ "$status" -eq 0 ]
	grep -q '"n_ctx": 256' "$T/s.json"
	[[ "$stderr" != *"warning"* ]]
	run --separate-stderr "$RUN" --plan "$D/plan.json" -c 512 -p "In the beginning" -n 2 --temp 0
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"warning: context 512 is larger than the plan's (256)"* ]]
	printf '{"id": 1, "prompt": "Once", "n_predict": 2}\n' > "$T/r.jsonl"
	run --separate-stderr "$RUN" --plan "$D/plan.json" --batch --stats-json "$T/b.json" < "$T/r.jsonl"
	[ "$status" -eq 0 ]
	grep -q '"n_parallel": 1' "$T/b.json"
	run --separate-stderr "$RUN" --plan "$D/plan.json" --batch --parallel 3 < "$T/r.jsonl"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"warning: --parallel 3 is more than the plan's 1 sequences"* ]]
}

@test "a corrupted pack (one byte of an extent): exit 1 'checksum'" {
	cp "$D/q.ntxp" "$T/q.ntxp"
	sed "s|$D/q.ntxp|$T/q.ntxp|" "$D/plan.json" >"$T/plan.json"
	off=$(($(stat -c %s "$T/q.ntxp") / 2 + 100))
	printf '\x5a' | dd of="$T/q.ntxp" bs=1 seek=$off conv=notrunc status=none
	run --separate-stderr timeout 30 "$RUN" --plan "$T/plan.json" -q -p "In the beginning" -n 5 --temp 0
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: "*".ntxp: layer "*"checksum mismatch"*"(pack file corrupted)" ]]
}

@test "a truncated or missing pack: exit 1" {
	sed "s|$D/q.ntxp|$T/q.ntxp|" "$D/plan.json" >"$T/plan.json"
	head -c $(($(stat -c %s "$D/q.ntxp") - 5000)) "$D/q.ntxp" >"$T/q.ntxp"
	run --separate-stderr timeout 30 "$RUN" --plan "$T/plan.json" -q -p "In the beginning" -n 5
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: $T/q.ntxp: pack file truncated"* ]]
	[ -z "$output" ]
	rm "$T/q.ntxp"
	run --separate-stderr timeout 30 "$RUN" --plan "$T/plan.json" -q -p "In the beginning" -n 5
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: $T/q.ntxp: No such file or directory"
}

@test "read errors (NTX_FAULT_READ) with disk layers: exit 1 with a message, no hang" {
	for n in 1 3 20; do
		NTX_FAULT_READ=$n run --separate-stderr timeout 30 "$RUN" --plan "$D/plan.json" -q \
			-p "In the beginning" -n 5 --temp 0
		[ "$status" -eq 1 ]
		[[ "$stderr" == "ntx-run: "*"Input/output error" ]]
		[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	done
	# every read failing, with a logits dump: no partial dump left
	NTX_FAULT_READ=2 NTX_FAULT_READ_EVERY=1 run --separate-stderr timeout 30 "$RUN" \
		--plan "$D/plan.json" -q -p "In the beginning" -n 5 --temp 0 --dump-logits "$T/d.f32"
	[ "$status" -eq 1 ]
	[ ! -e "$T/d.f32" ]
}

# ---- self-speculation ----

@test "--self-spec --draft-skip: output identical to plain greedy (q8_0; repeat penalty too)" {
	for p in "In the beginning" "A computer is"; do
		for rp in 1.0 1.3; do
			run --separate-stderr "$RUN" -m "$Q" -q -p "$p" -n 64 --temp 0 --repeat-penalty $rp
			[ "$status" -eq 0 ]
			a=$output
			run --separate-stderr "$RUN" -m "$Q" -p "$p" -n 64 --temp 0 --repeat-penalty $rp \
				--self-spec --draft-skip "$D/skip.json" --stats-json "$T/s.json"
			[ "$status" -eq 0 ]
			expect "$output" "$a"
			[[ "$stderr" == *"ntx-run: speculative (self): "*" accepted"* ]]
			[ "$(json "$T/s.json" 'd["speculative"]["accepted"] > 0')" = true ]
		done
	done
	# a fixed draft length
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning" -n 40 --temp 0
	a=$output
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning" -n 40 --temp 0 --self-spec \
		--draft-k 2 --draft-skip "$D/skip.json"
	[ "$status" -eq 0 ]
	expect "$output" "$a"
}

@test "--self-spec on the repo's q4_k_m model with its own skip file: identical to greedy" {
	need_fixtures
	[ -f "$Q4" ] || skip "no $Q4"
	"$CALIB" -q -m "$Q4" -c 128 --count 2 <"$D/calib.txt" >"$T/skip4.json"
	run --separate-stderr "$RUN" -m "$Q4" -q -p "And the LORD said unto Moses," -n 48 --temp 0
	[ "$status" -eq 0 ]
	a=$output
	run --separate-stderr "$RUN" -m "$Q4" -q -p "And the LORD said unto Moses," -n 48 --temp 0 \
		--self-spec --draft-skip "$T/skip4.json"
	[ "$status" -eq 0 ]
	expect "$output" "$a"
	# the q8_0 model's skip file does not fit this model
	run --separate-stderr "$RUN" -m "$Q4" -q -p x -n 2 --self-spec --draft-skip "$D/skip.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"made for another model"* ]]
}

@test "--self-spec without a draft: a clear error, exit 1" {
	run --separate-stderr "$RUN" -m "$Q" -q -p hi -n 2 --self-spec
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-run: --self-spec needs a draft: a plan with VRAM-resident layers (--plan) or --draft-skip FILE"
}

@test "-m plans in memory with the probe cache: a corrupt cache is one warning, never fatal" {
	export XDG_CACHE_HOME="$T/cache"
	mkdir -p "$T/cache/ntx"
	printf '{"format": "ntx.probe", "version": 1, "host": 7}\n' >"$T/cache/ntx/probe.json"
	run --separate-stderr "$RUN" -m "$S" -p "Once upon a time" -n 4 --temp 0 --backend cpu
	[ "$status" -eq 0 ]
	[ -n "$output" ]
	[ "$(printf '%s\n' "$stderr" | grep -c 'probe cache')" -eq 1 ]
	[[ "$stderr" == *"ntx-run: warning: probe cache ignored (planning with the default rates; --probe rewrites it): $T/cache/ntx/probe.json:1:"* ]]
	run --separate-stderr "$RUN" -m "$S" -p "Once upon a time" -n 4 --temp 0 --backend cpu -q
	[ "$status" -eq 0 ]
	[[ "$stderr" != *"probe cache"* ]]
}
