#!/usr/bin/env bats
# ntx-inspect: exit statuses, messages, and the JSON document on the fixtures
# and on files written by ntx-gguf-gen.

load gguf_helpers

setup() {
	gguf_setup
}

# ---- errors and usage ----

@test "missing file: exit 1, one line naming the file" {
	run --separate-stderr "$INSPECT" "$T/nope.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: $T/nope.gguf: No such file or directory"
	[ -z "$output" ]
}

@test "directory: exit 1" {
	run --separate-stderr "$INSPECT" "$T"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: $T: Is a directory"
}

@test "empty file: exit 1" {
	: >"$T/empty.gguf"
	run --separate-stderr "$INSPECT" "$T/empty.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: $T/empty.gguf: file is empty"
}

@test "not a GGUF file: exit 1, bad magic" {
	printf 'hello, world\n' >"$T/text.gguf"
	run --separate-stderr "$INSPECT" "$T/text.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: $T/text.gguf: not a GGUF file (bad magic 68 65 6c 6c)"
}

@test "GGUF version 1 and big-endian files: exit 1" {
	printf 'GGUF\001\000\000\000' >"$T/v1.gguf"
	head -c 64 /dev/zero >>"$T/v1.gguf"
	run --separate-stderr "$INSPECT" "$T/v1.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: $T/v1.gguf: GGUF version 1 is not supported (re-convert the model)"
	printf 'GGUF\000\000\000\003' >"$T/be.gguf"
	head -c 64 /dev/zero >>"$T/be.gguf"
	run --separate-stderr "$INSPECT" "$T/be.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: $T/be.gguf: big-endian GGUF (version 3) is not supported"
}

@test "truncated files: exit 1 with a message, never a crash" {
	need_fixtures
	for n in 3 8 24 100 1000 20000 1185375; do
		head -c "$n" "$F/models/stories260K.gguf" >"$T/cut.gguf"
		run --separate-stderr "$INSPECT" "$T/cut.gguf"
		[ "$status" -eq 1 ] || { echo "cut at $n: status $status" >&2; return 1; }
		[[ "$stderr" == "ntx-inspect: $T/cut.gguf: "* ]]
		[ -z "$output" ]
	done
	expect "$stderr" "ntx-inspect: $T/cut.gguf: tensor 'blk.4.ffn_norm.weight': offset 1170944 + 256 bytes exceeds the data section of 1171199 bytes (file size 1185375)"
}

@test "usage errors: exit 2 with a short usage on stderr" {
	run --separate-stderr "$INSPECT" --bogus "$F/models/stories260K.gguf"
	[ "$status" -eq 2 ]
	expect "$stderr" "ntx-inspect: unrecognized option '--bogus'
usage: ntx-inspect [--full] [--format json|table] [-o FILE] FILE"
	[ -z "$output" ]
	run --separate-stderr "$INSPECT"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-inspect: missing FILE"* ]]
	run --separate-stderr "$INSPECT" a.gguf b.gguf
	[ "$status" -eq 2 ]
	run --separate-stderr "$INSPECT" --format xml "$F/models/stories260K.gguf"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-inspect: --format: 'xml' is not json or table"* ]]
	run --separate-stderr "$INSPECT" -o
	[ "$status" -eq 2 ]
}

@test "--help: stdout, exit 0; --version" {
	run --separate-stderr "$INSPECT" --help
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "usage: ntx-inspect "* ]]
	[[ "$output" == *"--format"*"--full"*"Exit status"* ]]
	[ -z "$stderr" ]
	run "$INSPECT" -V
	[ "$status" -eq 0 ]
	[[ "$output" == "ntx-inspect (ntx) "* ]]
}

@test "a full disk is an error: exit 1" {
	need_fixtures
	[ -w /dev/full ] || skip "no /dev/full"
	run --separate-stderr "$INSPECT" "$F/models/stories260K.gguf"
	[ "$status" -eq 0 ]
	run --separate-stderr sh -c '"$0" "$1" >/dev/full' "$INSPECT" "$F/models/stories260K.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: standard output: No space left on device"
	run --separate-stderr sh -c '"$0" --format table "$1" >/dev/full' "$INSPECT" "$F/models/stories260K.gguf"
	[ "$status" -eq 1 ]
	run --separate-stderr "$INSPECT" -o /dev/full "$F/models/stories260K.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-inspect: /dev/full: No space left on device"
}

@test "-o FILE: a failed write leaves the existing file whole (temporary, then rename)" {
	M="$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf"
	echo '{"old": true}' >"$T/out.json"
	# a file size limit makes every write past 1 KiB fail (EFBIG), as a full disk would
	run limited "$INSPECT" -o "$T/out.json" "$M"
	[ "$status" -eq 1 ]
	expect "$output" "ntx-inspect: $T/out.json: File too large"
	expect "$(cat "$T/out.json")" '{"old": true}'
	[ -z "$(ls "$T" | grep -v '^out.json$')" ] # no temporary left
	run "$INSPECT" -o "$T/out.json" "$M"
	[ "$status" -eq 0 ]
	expect "$(json "$T/out.json" 'd["format"]')" ntx.inspect
	[ -z "$(ls "$T" | grep -v '^out.json$')" ]
}

# ---- the document on the fixtures ----

@test "ref-a-q4_k_m: config, types, quant mix, layers" {
	need_fixtures
	"$INSPECT" "$F/models/ref-a-q4_k_m.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'd["format"], d["version"], d["kind"], d["gguf_version"], d["alignment"]')" \
		"('ntx.inspect', 1, 'gguf', 3, 32)"
	expect "$(json "$T/d.json" 'd["file_size_bytes"], d["n_kv"], d["n_tensors"], d["data_offset_bytes"]')" \
		"(4161280, 23, 22, 12800)"
	expect "$(json "$T/d.json" '[d["model"][k] for k in ("n_layer","n_embd","n_ff","n_head","n_head_kv","head_dim","n_rot","n_ctx_train","n_vocab","file_type")]')" \
		"[2, 512, 1536, 4, 2, 128, 128, 2048, 512, 15]"
	expect "$(json "$T/d.json" 'd["model"]["rope_base"], d["model"]["has_rope_freqs"], d["model"]["output_tied"]')" \
		"(500000.0, True, False)"
	expect "$(json "$T/d.json" 'd["quant_mix"]')" '{"F32": 10496, "Q4_K": 3170304, "Q6_K": 967680}'
	expect "$(json "$T/d.json" '[l["types"] for l in d["layers"]]')" \
		'[{"F32": 4096, "Q4_K": 1769472}, {"F32": 4096, "Q4_K": 1253376, "Q6_K": 752640}]'
	expect "$(json "$T/d.json" '{t["name"]: t["type"] for t in d["tensors"]}["blk.1.attn_v.weight"]')" Q6_K
	expect "$(json "$T/d.json" '[(t["name"], t["type"], t["bytes"]) for t in d["nonlayer"]]')" \
		'[["output.weight", "Q6_K", 215040], ["output_norm.weight", "F32", 2048], ["rope_freqs.weight", "F32", 256], ["token_embd.weight", "Q4_K", 147456]]'
	expect "$(json "$T/d.json" 'd["layer_bytes"] == sum(l["bytes"] for l in d["layers"]) and d["layer_bytes"] + d["nonlayer_bytes"] == sum(d["quant_mix"].values())')" true
	expect "$(json "$T/d.json" 'd["metadata"]["tokenizer.ggml.tokens"]["n"], d["metadata"]["tokenizer.ggml.tokens"]["head"][:3]')" \
		"(512, ['<unk>', '<s>', '</s>'])"
}

@test "every set-A file: types per the fixture README, offsets per tensor_types.json" {
	need_fixtures
	for m in f32 f16 q8_0 q6_k q5_k_m q4_k_m q4_0; do
		"$INSPECT" "$F/models/ref-a-$m.gguf" >"$T/$m.json"
		python3 - "$T/$m.json" "$F/models/tensor_types.json" "ref-a-$m.gguf" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ref = json.load(open(sys.argv[2]))[sys.argv[3]]
mine = [(t["name"], t["type"], t["shape"], t["bytes"], t["offset_bytes"]) for t in d["tensors"]]
want = [(t["name"], t["type"], t["ne"], t["n_bytes"], t["offset"]) for t in ref["tensors"]]
assert mine == want, (sys.argv[3], [x for x in zip(mine, want) if x[0] != x[1]][:3])
assert d["file_size_bytes"] == ref["size"]
assert d["model"]["file_type"] == ref["kv"]["general.file_type"]
PY
	done
}

@test "stories260K: llama.cpp defaults for absent keys, all F32" {
	need_fixtures
	"$INSPECT" "$F/models/stories260K.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" '[d["model"][k] for k in ("n_layer","n_embd","n_ff","n_head","n_head_kv","head_dim","n_ctx_train","n_vocab","rope_base","file_type","has_rope_freqs","output_tied")]')" \
		"[5, 64, 172, 8, 4, 8, 128, 512, 10000.0, null, false, false]"
	expect "$(json "$T/d.json" 'list(d["quant_mix"]), len(d["layers"]), [l["n_tensors"] for l in d["layers"]]')" \
		"(['F32'], 5, [9, 9, 9, 9, 9])"
	expect "$(json "$T/d.json" '"llama.rope.freq_base" in d["metadata"], d["model"]["rms_eps"]')" \
		"(False, 9.999999747378752e-06)"
}

@test "tinymodel-q4_k_m: Q6_K in llama.cpp's use_more_bits layers" {
	need_fixtures
	"$INSPECT" "$F/tinymodel/tinymodel-q4_k_m.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" '[l["index"] for l in d["layers"] if "Q6_K" in l["types"]]')" \
		"[0, 1, 4, 7, 10, 13, 14, 15]"
	expect "$(json "$T/d.json" 'd["model"]["n_layer"], d["model"]["n_head"], d["model"]["n_head_kv"], d["model"]["n_vocab"]')" \
		"(16, 4, 2, 8192)"
}

@test "vocabulary-only files: model present, no tensors, no layers" {
	need_fixtures
	"$INSPECT" "$F/vocab/ggml-vocab-llama3.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'd["n_tensors"], d["tensors"], d["layers"], d["nonlayer"], d["quant_mix"], d["layer_bytes"]')" \
		"(0, [], [], [], {}, 0)"
	expect "$(json "$T/d.json" 'd["model"]["n_vocab"], d["model"]["n_head_kv"], d["model"]["n_ctx_train"]')" \
		"(128256, 8, 131072)"
	expect "$(json "$T/d.json" 'd["metadata"]["tokenizer.ggml.merges"]["array_of"], d["metadata"]["tokenizer.ggml.merges"]["n"], d["metadata"]["tokenizer.ggml.merges"]["head"][0]')" \
		"('string', 280147, 'Ġ Ġ')"
	"$INSPECT" "$F/vocab/ggml-vocab-llama-spm.gguf" >"$T/s.json"
	expect "$(json "$T/s.json" 'd["model"]["n_vocab"], d["model"]["n_head_kv"], d["metadata"]["tokenizer.ggml.model"]')" \
		"(32000, 32, 'llama')"
}

@test "--full prints whole arrays" {
	need_fixtures
	"$INSPECT" --full "$F/models/stories260K.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'len(d["metadata"]["tokenizer.ggml.tokens"]), d["metadata"]["tokenizer.ggml.tokens"][:4], d["metadata"]["tokenizer.ggml.tokens"][258]')" \
		"(512, ['<unk>', '<s>', '</s>', '<0x00>'], '<0xFF>')"
	expect "$(json "$T/d.json" 'len(d["metadata"]["tokenizer.ggml.scores"]), d["metadata"]["tokenizer.ggml.scores"][511], d["metadata"]["tokenizer.ggml.token_type"][:4]')" \
		"(512, -252.0, [2, 3, 3, 6])"
}

@test "output is stable; -o FILE and stdin give the same document" {
	need_fixtures
	"$INSPECT" "$F/models/ref-a-q8_0.gguf" >"$T/a.json"
	"$INSPECT" "$F/models/ref-a-q8_0.gguf" >"$T/b.json"
	cmp "$T/a.json" "$T/b.json"
	"$INSPECT" -o "$T/c.json" "$F/models/ref-a-q8_0.gguf"
	cmp "$T/a.json" "$T/c.json"
	"$INSPECT" - <"$F/models/ref-a-q8_0.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'd["path"]')" "-"
	expect "$(json "$T/d.json" 'dict(d, path=0)')" "$(json "$T/a.json" 'dict(d, path=0)')"
	[ "$(tail -c 1 "$T/a.json" | od -An -c | tr -d ' ')" = '\n' ]
	[ "$(sed -n 2p "$T/a.json")" = '  "format": "ntx.inspect",' ]
}

@test "--format table: a summary with the quant mix in percent" {
	need_fixtures
	run --separate-stderr "$INSPECT" --format table "$F/models/ref-a-q4_k_m.gguf"
	[ "$status" -eq 0 ]
	[[ "$output" == *"fingerprint  "* ]]
	[[ "$output" == *"model        llama, 2 layers, n_embd 512, n_ff 1536, heads 4 (kv 2), head_dim 128"* ]]
	[[ "$output" == *"layers       2, 3.61 MiB"* ]]
	[[ "$output" == *"quant mix    F32 10.25 KiB (0.3%) Q4_K 3.02 MiB (76.4%) Q6_K 945.00 KiB (23.3%)"* ]]
	run --separate-stderr "$INSPECT" -f table "$F/vocab/ggml-vocab-llama3.gguf"
	[ "$status" -eq 0 ]
	[[ "$output" == *"tensors      none (a vocabulary-only file)"* ]]
}

# ---- files written by ntx-gguf-gen ----

@test "gen -> inspect: requested shape, mix and tokenizer come back" {
	"$GEN" -q --layers 3 --embd 512 --ff 1024 --heads 8 --kv-heads 2 --vocab 1000 --ctx 4096 \
		--rope-base 1000000 --mix q5_k_m --rope-freqs --tied -o "$T/g.gguf"
	"$INSPECT" "$T/g.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" '[d["model"][k] for k in ("n_layer","n_embd","n_ff","n_head","n_head_kv","head_dim","n_ctx_train","n_vocab","rope_base","file_type","has_rope_freqs","output_tied")]')" \
		"[3, 512, 1024, 8, 2, 64, 4096, 1000, 1000000.0, 17, true, true]"
	# 3 layers: use_more_bits is true for layer 2 only; tied token_embd gets Q6_K
	expect "$(json "$T/d.json" '{t["name"]: t["type"] for t in d["tensors"]}')" \
		"$(json "$T/d.json" '{t["name"]: ("Q6_K" if t["name"] in ("token_embd.weight", "blk.2.attn_v.weight", "blk.2.ffn_down.weight") else "F32" if len(t["shape"]) == 1 else "Q5_K") for t in d["tensors"]}')"
	expect "$(json "$T/d.json" 'd["metadata"]["tokenizer.ggml.model"], d["metadata"]["tokenizer.ggml.pre"], d["metadata"]["tokenizer.ggml.bos_token_id"], d["metadata"]["tokenizer.ggml.eos_token_id"]')" \
		"('gpt2', 'llama-bpe', 995, 996)"
}

@test "gen --sparse: a 70B Q4_K_M file of ~42.5 GB that uses little disk" {
	"$GEN" -q --shape 70b --mix q4_k_m --sparse -o "$T/70b.gguf"
	"$INSPECT" "$T/70b.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'd["file_size_bytes"], d["n_tensors"], len(d["layers"])')" "(42515924896, 723, 80)"
	expect "$(json "$T/d.json" '[d["model"][k] for k in ("n_layer","n_embd","n_ff","n_head","n_head_kv","n_vocab","file_type")]')" \
		"[80, 8192, 28672, 64, 8, 128256, 15]"
	expect "$(json "$T/d.json" 'sorted(d["quant_mix"]), d["layers"][10]["types"]["Q5_K"]')" \
		"(['F32', 'Q4_K', 'Q5_K', 'Q6_K'], 5767168)"
	[ "$(du -k "$T/70b.gguf" | cut -f1)" -lt 16384 ]
	run --separate-stderr "$INSPECT" -f table "$T/70b.gguf"
	[[ "$output" == *"size         39.60 GiB (42515924896 bytes)"* ]]
}
