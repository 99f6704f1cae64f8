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
	expect "${stderr%%$'\n'*}" "ntx-gguf-gen: --shape: unknown shape '13b' (tiny 1b 8b 70b tiny-moe mixtral-8x7b tiny-qwen3moe qwen3-30b-a3b qwen3-235b-a22b)"
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
usage: ntx-gguf-gen [--shape NAME] [--mix MIX] [options] -o FILE"
	[ ! -e "$T/x.gguf" ]
	run "$GEN" --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"--experts N"*"--experts-used N"*"--vocab-from"*"--sparse"* ]]
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
	"$GEN" -q --mix q4_k_m --type-of blk.0.ffn_down.weight=Q5_0 -o "$T/b.gguf"
	"$INSPECT" "$T/b.gguf" >"$T/b.json"
	expect "$(json "$T/b.json" 'd["model"], d["model_error"]')" \
		"(None, \"tensor 'blk.0.ffn_down.weight' has type Q5_0, which ntx does not support (supported: F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K)\")"
	expect "$(json "$T/b.json" 'len(d["layers"]), d["layers"][0]["types"]["Q5_0"]')" "(2, 135168)"
}

# ---- mixtures of experts ----

@test "tiny-moe and tiny-qwen3moe have the MoE fixtures' tensors, types and keys" {
	need_fixtures
	for p in "tiny-moe mixtral-tiny" "tiny-qwen3moe qwen3moe-tiny"; do
		set -- $p
		for m in f16 q8_0 q4_k_m; do
			"$GEN" -q --shape "$1" --vocab 8192 --mix "$m" -o "$T/$1-$m.gguf"
			"$INSPECT" "$T/$1-$m.gguf" >"$T/$1-$m.json"
			python3 - "$T/$1-$m.json" "$F/moe/tensor_types.json" "$2-$m.gguf" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ref = json.load(open(sys.argv[2]))[sys.argv[3]]
mine = {t["name"]: (t["type"], t["shape"], t["bytes"]) for t in d["tensors"]}
want = {t["name"]: (t["type"], t["ne"], t["n_bytes"]) for t in ref["tensors"]}
assert mine == want, (sys.argv[3], {k: (mine.get(k), want.get(k)) for k in set(mine) | set(want) if mine.get(k) != want.get(k)})
arch = ref["kv"]["general.architecture"]
keys = [k for k in ref["kv"] if k.startswith(arch + ".") or k in ("general.architecture", "general.file_type")]
md = d["metadata"]
assert {k: md.get(k) for k in keys} == {k: ref["kv"][k] for k in keys}, (sys.argv[3], {k: (md.get(k), ref["kv"][k]) for k in keys if md.get(k) != ref["kv"][k]})
assert sorted(k for k in md if k.startswith(arch + ".")) == sorted(k for k in ref["kv"] if k.startswith(arch + ".")), sys.argv[3]
assert md["tokenizer.ggml.pre"] == ref["kv"]["tokenizer.ggml.pre"]
# the model view reads it (Q5_0, the fallback of Q4_K for rows of 128, may not be computable yet)
m = d["model"]
if m is None:
    assert "qwen3moe-tiny-q4_k_m" in sys.argv[3] and "has type Q5_0" in d["model_error"], d["model_error"]
else:
    hd = ref["kv"].get(arch + ".attention.key_length", 64)
    ff = ref["kv"].get(arch + ".expert_feed_forward_length", ref["kv"][arch + ".feed_forward_length"])
    assert (m["arch"], m["n_layer"], m["n_embd"], m["n_ff"], m["n_head"], m["n_head_kv"], m["head_dim"], m["n_vocab"]) == (arch, 2, 256, ff, 4, 2, hd, 8192), m
    assert m["rms_eps"] == ref["kv"][arch + ".attention.layer_norm_rms_epsilon"], m
PY
		done
	done
	# the file_type-only difference: both tiny MoE files are read as models
	expect "$(json "$T/tiny-moe-q4_k_m.json" 'd["model"]["arch"], d["model"]["file_type"]')" "('llama', 15)"
	expect "$(json "$T/tiny-qwen3moe-q8_0.json" 'd["model"]["arch"], d["model"]["file_type"]')" "('qwen3moe', 7)"
}

@test "the tiny MoE presets: 512 tokens, qwen2 pre-tokenizer for qwen3moe" {
	"$GEN" -q --shape tiny-moe --mix q4_k_m -o "$T/a.gguf"
	"$INSPECT" "$T/a.gguf" >"$T/a.json"
	expect "$(json "$T/a.json" '[d["metadata"][k] for k in ("general.architecture", "llama.expert_count", "llama.expert_used_count", "llama.feed_forward_length", "llama.vocab_size", "tokenizer.ggml.pre")], d["model"]["n_ff"]')" \
		"(['llama', 8, 2, 256, 512, 'llama-bpe'], 256)"
	expect "$(json "$T/a.json" '{t["name"]: (t["type"], t["shape"]) for t in d["tensors"] if t["name"].startswith("blk.1.ffn")}')" \
		'{"blk.1.ffn_norm.weight": ["F32", [256]], "blk.1.ffn_gate_inp.weight": ["F32", [256, 8]], "blk.1.ffn_gate_exps.weight": ["Q4_K", [256, 256, 8]], "blk.1.ffn_up_exps.weight": ["Q4_K", [256, 256, 8]], "blk.1.ffn_down_exps.weight": ["Q6_K", [256, 256, 8]]}'
	"$GEN" -q --shape tiny-qwen3moe -o "$T/b.gguf"
	"$INSPECT" "$T/b.gguf" >"$T/b.json"
	expect "$(json "$T/b.json" '[d["metadata"][k] for k in ("general.architecture", "qwen3moe.expert_count", "qwen3moe.expert_used_count", "qwen3moe.expert_feed_forward_length", "qwen3moe.feed_forward_length", "qwen3moe.attention.key_length", "tokenizer.ggml.pre")], d["model"]["head_dim"], d["model"]["n_ff"]')" \
		"(['qwen3moe', 16, 4, 128, 512, 128, 'qwen2'], 128, 128)"
	expect "$(json "$T/b.json" '[t["name"][6:] for t in d["tensors"] if t["name"].startswith("blk.0.")]')" \
		'["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight", "ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"]'
}

@test "full MoE shapes (sparse, 2 layers): the real models' hyperparameters and parameter counts" {
	# parameter counts of the Hugging Face models: Mixtral-8x7B-v0.1,
	# Qwen3-30B-A3B, Qwen3-235B-A22B (all layers; here 2 layers are written
	# and the count extrapolated from layer 0)
	for c in "mixtral-8x7b 32 llama 4096 14336 32 8 128 8 2 32000 46702792704" \
		 "qwen3-30b-a3b 48 qwen3moe 2048 768 32 4 128 128 8 151936 30532122624" \
		 "qwen3-235b-a22b 94 qwen3moe 4096 1536 64 4 128 128 8 151936 235093634560"; do
		set -- $c
		"$GEN" -q --shape "$1" --layers 2 --mix q4_k_m --sparse -o "$T/$1.gguf"
		[ "$(du -k "$T/$1.gguf" | cut -f1)" -lt 20000 ] # a hole, not data
		"$INSPECT" "$T/$1.gguf" >"$T/$1.json"
		python3 - "$T/$1.json" "$@" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
shape, n_layer, arch, embd, ff, heads, kv, hd, nexp, nused, vocab, params = sys.argv[2:]
n_layer, embd, ff, heads, kv, hd, nexp, nused, vocab, params = map(int, (n_layer, embd, ff, heads, kv, hd, nexp, nused, vocab, params))
m, md = d["model"], d["metadata"]
assert m is not None, d.get("model_error")
assert (m["arch"], m["n_layer"], m["n_embd"], m["n_ff"], m["n_head"], m["n_head_kv"], m["head_dim"], m["n_vocab"], m["rope_base"]) == (arch, 2, embd, ff, heads, kv, hd, vocab, 1e6), m
assert (md[arch + ".expert_count"], md[arch + ".expert_used_count"]) == (nexp, nused)
t = {x["name"]: x for x in d["tensors"]}
assert t["blk.1.ffn_gate_exps.weight"]["shape"] == [embd, ff, nexp]
assert t["blk.1.ffn_down_exps.weight"]["shape"] == [ff, embd, nexp]
assert t["blk.1.ffn_gate_inp.weight"]["shape"] == [embd, nexp] and t["blk.1.ffn_gate_inp.weight"]["type"] == "F32"
assert t["blk.0.attn_q.weight"]["shape"] == [embd, heads * hd]
assert t["blk.0.attn_output.weight"]["shape"] == [heads * hd, embd]
# Q4_K_M of a 2-layer file: use_more_bits(1, 2) (the last eighth) gives ffn_down_exps Q6_K in layer 1
assert (t["blk.0.ffn_down_exps.weight"]["type"], t["blk.1.ffn_down_exps.weight"]["type"], t["blk.1.ffn_up_exps.weight"]["type"], t["blk.0.ffn_gate_exps.weight"]["type"]) == ("Q4_K", "Q6_K", "Q4_K", "Q4_K")
# exactly 8 experts: attn_k/attn_v Q8_0, attn_output Q5_K (Mixtral)
# (else attn_v of layer 1 is Q6_K as ffn_down's)
types = tuple(t["blk.1." + k + ".weight"]["type"] for k in ("attn_k", "attn_v", "attn_output"))
assert types == (("Q8_0", "Q8_0", "Q5_K") if nexp == 8 else ("Q4_K", "Q6_K", "Q4_K")), (shape, types)
n = lambda x: math.prod(x["shape"])
layer0 = sum(n(x) for k, x in t.items() if k.startswith("blk.0."))
other = sum(n(x) for k, x in t.items() if not k.startswith("blk."))
assert other + n_layer * layer0 == params, (shape, other + n_layer * layer0, params)
PY
	done
}

@test "--arch, --experts, --experts-used, --head-dim override a preset" {
	"$GEN" -q --experts 4 -o "$T/a.gguf"  # tiny (dense llama) with 4 experts, 2 used
	"$INSPECT" "$T/a.gguf" >"$T/a.json"
	expect "$(json "$T/a.json" 'd["metadata"]["llama.expert_count"], d["metadata"]["llama.expert_used_count"], d["model"]["n_ff"], [t["shape"] for t in d["tensors"] if t["name"] == "blk.0.ffn_up_exps.weight"]')" \
		"(4, 2, 768, [[256, 768, 4]])"
	"$GEN" -q --shape tiny-moe --experts 0 -o "$T/b.gguf"  # dense again
	"$INSPECT" "$T/b.gguf" >"$T/b.json"
	expect "$(json "$T/b.json" '[k for k in d["metadata"] if "expert" in k], len([t for t in d["tensors"] if "exps" in t["name"] or "gate_inp" in t["name"]]), d["model"]["arch"]')" \
		"([], 0, 'llama')"
	"$GEN" -q --shape tiny-qwen3moe --arch llama --experts-used 3 --mix q8_0 -o "$T/c.gguf"
	"$INSPECT" "$T/c.gguf" >"$T/c.json"
	expect "$(json "$T/c.json" '[d["metadata"].get(k) for k in ("general.architecture", "llama.attention.key_length", "llama.rope.dimension_count", "llama.expert_count", "llama.expert_used_count")], d["model"]["head_dim"], d["model"]["n_rot"], [t["name"] for t in d["tensors"] if "norm" in t["name"] and "blk.0" in t["name"]]')" \
		"(['llama', 128, 128, 16, 3], 128, 128, ['blk.0.attn_norm.weight', 'blk.0.ffn_norm.weight'])"
	"$GEN" -q --arch qwen3moe --experts 6 --experts-used 2 --head-dim 32 --heads 8 --kv-heads 4 --mix q4_k_m -o "$T/d.gguf"
	"$INSPECT" "$T/d.gguf" >"$T/d.json"
	expect "$(json "$T/d.json" 'd["model"]["arch"], d["model"]["head_dim"], d["model"]["n_ff"], d["metadata"]["qwen3moe.feed_forward_length"], d["metadata"]["tokenizer.ggml.pre"], {t["name"]: (t["type"], t["shape"]) for t in d["tensors"]}["blk.0.attn_q.weight"], {t["name"]: (t["type"], t["shape"]) for t in d["tensors"]}["blk.0.attn_k_norm.weight"]')" \
		"('qwen3moe', 32, 768, 1536, 'qwen2', ('Q4_K', [256, 256]), ('F32', [32]))"
	# not 8 experts: attn_k/attn_v keep the mix's rules
	expect "$(json "$T/d.json" '[t["type"] for t in d["tensors"] if t["name"] in ("blk.0.attn_k.weight", "blk.1.attn_v.weight", "blk.1.attn_output.weight")]')" \
		'["Q4_K", "Q6_K", "Q4_K"]'
	run --separate-stderr "$GEN" --arch qwen3moe -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	expect "$stderr" "ntx-gguf-gen: qwen3moe needs experts (--experts N)"
	run --separate-stderr "$GEN" --shape tiny-moe --experts-used 9 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	expect "$stderr" "ntx-gguf-gen: --experts-used 9 is more than the 8 experts"
	run --separate-stderr "$GEN" --experts-used 1 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	run --separate-stderr "$GEN" --experts 1 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	expect "${stderr%%$'\n'*}" "ntx-gguf-gen: --experts: a mixture needs 2 experts or more (0: dense)"
	run --separate-stderr "$GEN" --head-dim 33 -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	run --separate-stderr "$GEN" --arch mistral -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-gguf-gen: --arch: unknown architecture 'mistral' (llama qwen3moe)"* ]]
	run --separate-stderr "$GEN" --shape tiny-qwen3moe --rope-freqs -o "$T/x.gguf"
	[ "$status" -eq 2 ]
	expect "$stderr" "ntx-gguf-gen: --rope-freqs is for llama, not qwen3moe"
	[ ! -e "$T/x.gguf" ]
}

@test "MoE weights: every expert slice N(0, 0.02)-like, routers N(0, 0.15) in F32" {
	"$GEN" -q --shape tiny-moe --mix f16 -o "$T/f.gguf"
	"$INSPECT" "$T/f.gguf" >"$T/f.json"
	python3 - "$T/f.gguf" "$T/f.json" <<'PY'
import json, math, struct, sys
t = {x["name"]: x for x in json.load(open(sys.argv[2]))["tensors"]}
def data(name):
    x = t[name]; f = open(sys.argv[1], "rb"); f.seek(x["offset_bytes"]); return f.read(x["bytes"])
def stats(v):
    m = sum(v) / len(v); return m, math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
b = data("blk.1.ffn_down_exps.weight")
assert len(b) == 256 * 256 * 8 * 2
slices = [struct.unpack("<65536e", b[e * 131072:(e + 1) * 131072]) for e in range(8)]
for e, v in enumerate(slices):
    m, s = stats(v)
    assert abs(m) < 0.001 and 0.019 < s < 0.021, (e, m, s)
assert len({v[:16] for v in slices}) == 8  # no expert repeats another
assert t["blk.0.ffn_gate_inp.weight"]["type"] == "F32"
r = struct.unpack("<2048f", data("blk.0.ffn_gate_inp.weight"))
m, s = stats(r)
assert abs(m) < 0.01 and 0.14 < s < 0.16, (m, s)
PY
}

