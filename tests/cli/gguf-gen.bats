#!/usr/bin/env bats
# ntx-gguf-gen: usage errors, the llama.cpp type mixes against the fixtures,
# determinism, tokenizers, sparse and streamed output.

load gguf_helpers

setup() {
	gguf_setup
	[ -x "$GEN" ] || { echo "no $GEN" >&2; return 1; }
}

# The set-A shape of the fixtures (README section 1.1).
SET_A="--layers 2 --embd 512 --ff 1536 --heads 4 --kv-heads 2 --vocab 512 --ctx 2048 --rope-base 500000 --rope-freqs"

@test "usage errors exit 2" {
	run --separate-stderr "$GEN" --mix q3_k -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-gguf-gen: --mix: unknown mix 'q3_k'"* ]]
	run --separate-stderr "$GEN" --shape 13b -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	run --separate-stderr "$GEN"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-gguf-gen: missing -o FILE"* ]]
	run --separate-stderr "$GEN" --layers abc -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	expect "${stderr%%$'\n'*}" "ntx-gguf-gen: --layers: invalid integer 'abc'"
	run --separate-stderr "$GEN" --layers 0 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	run --separate-stderr "$GEN" --heads 3 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"do not fit embedding length 256"* ]]
	run --separate-stderr "$GEN" --type-of blk.9.attn_q.weight=Q8_0 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	expect "$stderr" "ntx-gguf-gen: --type-of: no tensor named 'blk.9.attn_q.weight'"
	run --separate-stderr "$GEN" --type-of blk.0.attn_q.weight=Q2_K -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	run --separate-stderr "$GEN" --type-of blk.0.attn_q.weight=Q4_K --embd 128 --heads 2 --kv-heads 1 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"not a multiple of the Q4_K block size 256"* ]]
	run --separate-stderr "$GEN" --vocab 100 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	run --separate-stderr "$GEN" --sparse -o -
	[ "$status" -eq 2 ]
	run --separate-stderr "$GEN" --bogus
	[ "$status" -eq 2 ]
	expect "$stderr" "ntx-gguf-gen: unrecognized option '--bogus'
usage: ntx-gguf-gen [--shape tiny|1b|8b|70b] [--mix MIX] [options] -o FILE"
	[ ! -e "$T/x.gguf" ]
	run "$GEN" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"--vocab-from"*"--sparse"* ]]
}

@test "every mix of the set-A shape has the fixture's per-tensor types" {
	need_fixtures
	for m in f32 f16 q8_0 q6_k q5_k_m q4_k_m q4_0; do
		"$GEN" -q $SET_A --mix "$m" -o "$T/$m.gguf"
		"$INSPECT" "$T/$m.gguf" >"$T/$m.json"
		python3 - "$T/$m.json" "$F/models/tensor_types.json" "ref-a-$m.gguf" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ref = json.load(open(sys.argv[2]))[sys.argv[3]]
mine = {t["name"]: (t["type"], t["shape"], t["bytes"]) for t in d["tensors"]}
want = {t["name"]: (t["type"], t["ne"], t["n_bytes"]) for t in ref["tensors"]}
assert mine == want, (sys.argv[3], {k: (mine.get(k), want[k]) for k in want if mine.get(k) != want[k]})
assert d["model"]["file_type"] == ref["kv"]["general.file_type"], d["model"]["file_type"]
PY
	done
}

@test "rope_freqs holds the Llama 3.1 factors bit for bit" {
	need_fixtures
	"$GEN" -q $SET_A --mix f32 -o "$T/a.gguf"
	"$INSPECT" "$T/a.gguf" >"$T/a.json"
	"$INSPECT" "$F/models/ref-a-f32.gguf" >"$T/r.json"
	python3 - "$T/a.gguf" "$T/a.json" "$F/models/ref-a-f32.gguf" "$T/r.json" <<'PY'
import json, sys
def data(g, j, name):
    t = [t for t in json.load(open(j))["tensors"] if t["name"] == name][0]
    f = open(g, "rb"); f.seek(t["offset_bytes"]); return f.read(t["bytes"])
a = data(sys.argv[1], sys.argv[2], "rope_freqs.weight")
b = data(sys.argv[3], sys.argv[4], "rope_freqs.weight")
assert len(a) == 256 and a == b
PY
}

@test "16 layers of Q4_K_M: llama.cpp's use_more_bits layers, like tinymodel" {
	need_fixtures
	"$GEN" -q --layers 16 --mix q4_k_m -o "$T/a.gguf"
	"$INSPECT" "$T/a.gguf" >"$T/a.json"
	"$INSPECT" "$F/tinymodel/tinymodel-q4_k_m.gguf" >"$T/t.json"
	expect "$(json "$T/a.json" '[sorted(l["types"]) for l in d["layers"]]')" \
		"$(json "$T/t.json" '[sorted(l["types"]) for l in d["layers"]]')"
	expect "$(json "$T/a.json" '[l["bytes"] for l in d["layers"]]')" \
		"$(json "$T/t.json" '[l["bytes"] for l in d["layers"]]')"
}

@test "the 8B Q4_K_M shape has the size of Llama 3.1 8B Q4_K_M" {
	"$GEN" -q --shape 8b --mix q4_k_m --sparse -o "$T/8b.gguf"
	"$INSPECT" "$T/8b.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'd["file_size_bytes"], len(d["layers"]), d["model"]["n_vocab"]')" \
		"(4916265664, 32, 128256)"
	"$GEN" -q --shape 1b --mix q8_0 --sparse -o "$T/1b.gguf"
	"$INSPECT" "$T/1b.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" '[d["model"][k] for k in ("n_layer","n_embd","n_ff","n_head","n_head_kv","n_vocab")], list(d["quant_mix"])')" \
		"([16, 2048, 8192, 32, 8, 32000], ['F32', 'Q8_0'])"
}

@test "output depends on the seed only, not on threads; no temporary files left" {
	mkdir "$T/out"
	"$GEN" -q --mix q4_k_m --seed 7 -t 1 -o "$T/out/a.gguf"
	"$GEN" -q --mix q4_k_m --seed 7 -t 3 -o "$T/out/b.gguf"
	"$GEN" -q --mix q4_k_m --seed 8 -t 3 -o "$T/out/c.gguf"
	cmp "$T/out/a.gguf" "$T/out/b.gguf"
	! cmp -s "$T/out/a.gguf" "$T/out/c.gguf"
	expect "$(ls "$T/out" | tr '\n' ' ')" "a.gguf b.gguf c.gguf "
	"$GEN" -q --mix f16 -o - | "$INSPECT" - >"$T/d.json"
	expect "$(json "$T/d.json" 'sorted(d["quant_mix"])')" '["F16", "F32"]'
}

@test "float weights are N(0, 0.02)-like, norms near 1, quant scales finite" {
	"$GEN" -q --mix f16 -o "$T/f.gguf"
	"$GEN" -q --mix q8_0 -o "$T/q.gguf"
	"$INSPECT" "$T/f.gguf" >"$T/f.json"
	"$INSPECT" "$T/q.gguf" >"$T/q.json"
	python3 - "$T/f.gguf" "$T/f.json" "$T/q.gguf" "$T/q.json" <<'PY'
import json, math, struct, sys
def data(g, j, name):
    t = [t for t in json.load(open(j))["tensors"] if t["name"] == name][0]
    f = open(g, "rb"); f.seek(t["offset_bytes"]); return f.read(t["bytes"])
def stats(v):
    m = sum(v) / len(v); return m, math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
w = struct.unpack("<65536e", data(sys.argv[1], sys.argv[2], "blk.1.attn_q.weight"))
m, s = stats(w)
assert abs(m) < 0.001 and 0.019 < s < 0.021, (m, s)
n = struct.unpack("<256f", data(sys.argv[1], sys.argv[2], "blk.1.ffn_norm.weight"))
m, s = stats(n)
assert 0.98 < m < 1.02 and 0.03 < s < 0.07, (m, s)
b = data(sys.argv[3], sys.argv[4], "blk.0.ffn_up.weight")
vals = []
for i in range(0, len(b), 34):
    d = struct.unpack("<e", b[i:i + 2])[0]
    assert math.isfinite(d) and d > 0
    vals += [d * q for q in struct.unpack("32b", b[i + 2:i + 34])]
m, s = stats(vals)
assert abs(m) < 0.001 and 0.018 < s < 0.022, (m, s)
PY
}

@test "synthetic tokenizer: GPT-2 bytes, merges, fillers, Llama 3 specials" {
	"$GEN" -q --vocab 400 -o "$T/a.gguf"
	"$INSPECT" --full "$T/a.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'len(d["metadata"]["tokenizer.ggml.tokens"]), d["metadata"]["tokenizer.ggml.tokens"][:3], d["metadata"]["tokenizer.ggml.tokens"][-5:]')" \
		"(400, ['!', '\"', '#'], ['<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>'])"
	expect "$(json "$T/d.json" 'len(d["metadata"]["tokenizer.ggml.merges"]), d["metadata"]["tokenizer.ggml.merges"][0], d["metadata"]["tokenizer.ggml.tokens"][256], d["metadata"]["tokenizer.ggml.tokens"][220]')" \
		"(35, 'Ġ t', 'Ġt', 'Ġ')"
	expect "$(json "$T/d.json" 'd["metadata"]["tokenizer.ggml.token_type"][-6:], d["metadata"]["tokenizer.ggml.eot_token_id"]')" \
		"([1, 3, 3, 3, 3, 3], 399)"
	python3 - "$T/d.json" <<'PY'
import json, sys
md = json.load(open(sys.argv[1]))["metadata"]
tok = md["tokenizer.ggml.tokens"]
assert len(set(tok)) == len(tok)
for m in md["tokenizer.ggml.merges"]:  # every merge joins two tokens into a token
    a, b = m.split(" ")
    assert a in tok and b in tok and a + b in tok, m
PY
}

@test "--vocab-from copies the tokenizer; --no-vocab leaves it out" {
	need_fixtures
	"$GEN" -q --vocab-from "$F/tinymodel/tinymodel-f16.gguf" -o "$T/a.gguf"
	"$INSPECT" "$T/a.gguf" >"$T/a.json"
	"$INSPECT" "$F/tinymodel/tinymodel-f16.gguf" >"$T/t.json"
	expect "$(json "$T/a.json" '{k: v for k, v in d["metadata"].items() if k.startswith("tokenizer.")}')" \
		"$(json "$T/t.json" '{k: v for k, v in d["metadata"].items() if k.startswith("tokenizer.")}')"
	expect "$(json "$T/a.json" 'd["model"]["n_vocab"]')" 8192
	run --separate-stderr "$GEN" -q --vocab 1000 --vocab-from "$F/tinymodel/tinymodel-f16.gguf" -o "$T/b.gguf"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"has 8192 tokens, but --vocab is 1000" ]]
	run --separate-stderr "$GEN" -q --vocab-from "$T/nope.gguf" -o "$T/b.gguf"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-gguf-gen: $T/nope.gguf: No such file or directory"
	"$GEN" -q --no-vocab --vocab 100 -o "$T/c.gguf"
	"$INSPECT" "$T/c.gguf" >"$T/c.json"
	expect "$(json "$T/c.json" '[k for k in d["metadata"] if k.startswith("tokenizer.")], d["model"]["n_vocab"]')" "([], 100)"
}

@test "--type-of, --alignment; a type ntx cannot run leaves model null" {
	"$GEN" -q --mix q8_0 --type-of blk.1.ffn_up.weight=bf16 --type-of output.weight=Q4_0 --alignment 64 -o "$T/a.gguf"
	"$INSPECT" "$T/a.gguf" >"$T/a.json"
	expect "$(json "$T/a.json" '{t["name"]: t["type"] for t in d["tensors"]}["blk.1.ffn_up.weight"], {t["name"]: t["type"] for t in d["tensors"]}["output.weight"], d["alignment"], d["metadata"]["general.alignment"]')" \
		"('BF16', 'Q4_0', 64, 64)"
	expect "$(json "$T/a.json" 'all(t["offset_bytes"] % 64 == 0 for t in d["tensors"])')" true
	"$GEN" -q --mix q4_k_m --type-of blk.0.ffn_down.weight=Q5_1 -o "$T/b.gguf"
	"$INSPECT" "$T/b.gguf" >"$T/b.json"
	expect "$(json "$T/b.json" 'd["model"], d["model_error"]')" \
		"(None, \"tensor 'blk.0.ffn_down.weight' has type Q5_1, which ntx does not support (supported: F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K)\")"
	expect "$(json "$T/b.json" 'len(d["layers"]), d["layers"][0]["types"]["Q5_1"]')" "(2, 147456)"
}
