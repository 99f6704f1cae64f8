#!/usr/bin/env bats
# Mixture-of-experts models through the tools, on the CPU (the moe fixtures:
# mixtral-tiny, `llama` with 8 experts, 2 per token; qwen3moe-tiny, 16
# experts, 4 per token, q/k norms, NEOX RoPE, the qwen2 pre-tokenizer).
# Greedy text is the same whether the layers are read from the model file,
# kept in RAM by a plan, or on disk (the chosen experts read from the pack
# into the expert cache, or whole layers with --io mmap); speculative
# decoding (prompt lookup, a draft model, self-speculation) and batch mode
# give what plain decoding gives; ntx-inspect reports the experts; plans
# place experts (the expert split, routing counts). The logits themselves
# are checked against llama.cpp in tests/unit/test_moe.c.

load gguf_helpers

setup_file() {
	export RUN="$NTX_BIN/ntx-run"
	export F="$NTX_FIXTURES"
	export MX="$F/moe/mixtral-tiny-q8_0.gguf"
	export MK="$F/moe/mixtral-tiny-q4_k_m.gguf"
	export QW="$F/moe/qwen3moe-tiny-q8_0.gguf"
	export D="$BATS_FILE_TMPDIR"
	[ -x "$RUN" ] || { echo "no $RUN (make first)" >&2; return 1; }
	have_fixtures && [ -f "$MX" ] || return 0 # every test calls need_moe
	printf 'Once upon a time, there was a little girl named Lily.' >"$D/p1.txt"
	printf 'The cat sat on the mat and' >"$D/p2.txt"
	for m in MX QW; do
		for p in p1 p2; do
			"$RUN" -m "${!m}" --backend cpu -t 2 -q -f "$D/$p.txt" -n 48 --temp 0 \
				--ignore-eos -c 256 >"$D/$m.$p.plain"
		done
	done
}

# all_to_disk IN OUT PACK: plan IN with every layer on disk (pack PACK) as OUT
all_to_disk() {
	python3 - "$@" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for l in p["layers"]:
    l["home"] = "disk"
p["pack_path"] = sys.argv[3]
json.dump(p, open(sys.argv[2], "w"), indent=2)
PY
}

need_moe() {
	need_fixtures
	[ -f "$MX" ] && [ -f "$QW" ] || skip "no moe fixtures at '$F/moe'"
}

# same M PROMPT ARGS...: greedy output of model $M (MX or QW) with ARGS
# equals its plain decoding
same() {
	local m=$1 p=$2
	shift 2
	run --separate-stderr "$RUN" --backend cpu -t 2 -q -f "$D/$p.txt" -n 48 --temp 0 \
		--ignore-eos -c 256 "$@"
	[ "$status" -eq 0 ] || { echo "exit $status with $*: $stderr" >&2; return 1; }
	[ -n "$output" ]
	[ "$output" = "$(cat "$D/$m.$p.plain")" ] || { echo "differs with $*: $output" >&2; return 1; }
}

@test "MoE greedy text: the model file (huge-page copies, the map), a plan with the layers in RAM, layers streamed from a pack (direct and mmap)" {
	need_moe
	T="$BATS_TEST_TMPDIR"
	for m in MX QW; do
		"$NTX_BIN/ntx-plan" "${!m}" --vram-budget 0 --ram-budget 1G -c 256 -o "$T/$m.ram.json"
		# every layer in RAM, computed by the CPU; the plan's layer bytes
		# include the experts (the whole layer is the unit)
		run -0 python3 - "$T/$m.ram.json" "${!m}" "$NTX_BIN/ntx-inspect" <<'PY'
import json, subprocess, sys
p = json.load(open(sys.argv[1]))
d = json.loads(subprocess.run([sys.argv[3], sys.argv[2]], capture_output=True, check=True).stdout)
assert [l["home"] for l in p["layers"]] == ["ram", "ram"], p["layers"]
for pl, il in zip(p["layers"], d["layers"]):
    assert pl["bytes"] >= il["bytes"] > il["expert_bytes"] > 0, (pl, il)
PY
		# the planner keeps layers this small in RAM (two disk staging
		# slots cost as much as the layers): move them to the pack by hand
		all_to_disk "$T/$m.ram.json" "$T/$m.disk.json" "$T/$m.ntxp"
		"$NTX_BIN/ntx-pack" -q "${!m}" --plan "$T/$m.disk.json" --compress none
		"$NTX_BIN/ntx-pack" -q --verify "$T/$m.ntxp" -m "${!m}"
		for p in p1 p2; do
			same $m $p -m "${!m}"
			NTX_NO_HUGEPAGES=1 same $m $p -m "${!m}" # read in place from the map
			same $m $p --plan "$T/$m.ram.json"
			same $m $p --plan "$T/$m.disk.json" --stats-json "$T/s.json"
			same $m $p --plan "$T/$m.disk.json" --io mmap
		done
		# the pack was read, and a token reads k/E of the experts: the CPU's
		# weight bytes per evaluation are below the layers' bytes
		run -0 python3 - "$T/s.json" "$T/$m.ram.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["streaming"]
p = json.load(open(sys.argv[2]))
layers = sum(l["bytes"] for l in p["layers"])
assert s["bytes_disk"] > 0, s
assert 0 < s["bytes_cpu_weights"] / s["n_eval_calls"] < layers, (s, layers)
PY
	done
}

@test "MoE target: --lookup, --draft (the same file, another quantization), --self-spec equal plain decoding" {
	need_moe
	T="$BATS_TEST_TMPDIR"
	head -c 3000 "$F/tinymodel/eval.txt" >"$T/cal.txt"
	for m in MX QW; do
		"$NTX_BIN/ntx-skip-calib" -q -m "${!m}" --backend cpu -t 2 --allow-ends --count 1 \
			-f "$T/cal.txt" -o "$T/$m.skip.json"
		for p in p1 p2; do
			same $m $p -m "${!m}" --lookup 3
			same $m $p -m "${!m}" --draft "${!m}"
			same $m $p -m "${!m}" --draft "${!m}" --draft-k 4
			same $m $p -m "${!m}" --self-spec --draft-skip "$T/$m.skip.json"
		done
	done
	for p in p1 p2; do
		same MX $p -m "$MX" --draft "$MK"
		same MX $p -m "$MX" --lookup 2 --draft "$MK" --draft-k 6
	done
}

@test "a draft whose vocabulary adds BOS for a qwen2 target: one-line error, exit 1" {
	need_moe
	run --separate-stderr "$RUN" -m "$QW" --backend cpu -q -p hi -n 4 --draft "$MX"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"BOS"* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

@test "MoE --batch: greedy records equal each request run alone" {
	need_moe
	T="$BATS_TEST_TMPDIR"
	python3 - "$T/req.jsonl" <<'PY'
import json, sys
P = [("In the beginning", 20), ("Once upon a time, there was a little girl named Lily.", 25),
     ("A computer is", 10), ("The cat sat on the mat and", 31), ("Hello", 7)]
with open(sys.argv[1], "w") as f:
    for i, (p, n) in enumerate(P):
        f.write(json.dumps({"id": i, "prompt": p, "n_predict": n, "temp": 0}) + "\n")
PY
	for m in MX QW; do
		for par in 1 3; do
			run -0 --separate-stderr "$RUN" -m "${!m}" --backend cpu -t 2 -c 256 --batch \
				--parallel $par <"$T/req.jsonl"
			printf '%s\n' "$output" >"$T/out.jsonl"
			run -0 python3 - "$T/req.jsonl" "$T/out.jsonl" "${!m}" <<'PY'
import json, os, subprocess, sys
out = {}
for l in open(sys.argv[2]):
    if l.strip():
        r = json.loads(l)
        out[r["id"]] = r["text"]
for l in open(sys.argv[1]):
    r = json.loads(l)
    t = subprocess.run([os.environ["RUN"], "-m", sys.argv[3], "--backend", "cpu", "-t", "2",
                        "-c", "256", "-q", "-p", r["prompt"], "-n", str(r["n_predict"]),
                        "--temp", "0"], capture_output=True, check=True).stdout
    # random weights emit partial UTF-8; the records carry U+FFFD there
    t = t.decode("utf-8", "replace")
    assert out[r["id"]] == t, (r["id"], out[r["id"]], t)
PY
		done
	done
}

@test "MoE -i: a conversation of 3 turns over a pipe (chatml template)" {
	need_moe
	T="$BATS_TEST_TMPDIR"
	printf 'Hello\nWho are you?\nTell me more.\n' >"$T/in"
	for m in MX QW; do
		run -0 --separate-stderr "$RUN" -m "${!m}" --backend cpu -t 2 -q -i \
			--chat-template chatml -n 8 --temp 0 <"$T/in"
		[ -n "$output" ]
		"$RUN" -m "${!m}" --backend cpu -t 2 -q -i --chat-template chatml -n 8 --temp 0 \
			<"$T/in" >"$T/again"
		[ "$output" = "$(cat "$T/again")" ]
	done
}

@test "ntx-inspect --format table: the experts and what a token reads" {
	need_moe
	run -0 "$NTX_BIN/ntx-inspect" --format table "$QW"
	[[ "$output" == *"experts      16 per layer, 4 used per token"* ]]
	[[ "$output" == *"a token reads"*"4/16 of the experts"* ]]
	[[ "$output" == *"rope neox, q/k norms"* ]]
	run -0 "$NTX_BIN/ntx-inspect" --format table "$MX"
	[[ "$output" == *"experts      8 per layer, 2 used per token"* ]]
	[[ "$output" != *"rope neox"* ]]
}

@test "libntx: ntx-example prints what ntx-run -n 16 --temp 0 prints, for both MoE models" {
	need_moe
	for m in MX QW; do
		"$RUN" -m "${!m}" -p "Once upon a time" -n 16 --temp 0 -q >"$BATS_TEST_TMPDIR/want"
		"$NTX_BIN/ntx-example" "${!m}" "Once upon a time" >"$BATS_TEST_TMPDIR/got"
		[ -s "$BATS_TEST_TMPDIR/got" ]
		cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/want"
	done
}

@test "the expert split: --vram-experts N keeps N experts per layer in VRAM and lists the rest for the CPU; the plan checks, and the CPU backend runs it" {
	need_moe
	T="$BATS_TEST_TMPDIR"
	run -0 "$NTX_BIN/ntx-plan" "$QW" --vram-budget 8G --vram-experts 6 -c 256 -o "$T/split.json" --explain
	[[ "$output" == *"experts: 10 of 16 per layer in RAM, computed by the CPU"* ]]
	run -0 python3 - "$T/split.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["model"]["n_expert"] == 16 and p["model"]["n_expert_used"] == 4
for L in p["layers"]:
    assert L["home"] == "vram" and L["exec"] == "gpu", L
    assert L["cpu_experts"] == "6-15" and L["cpu_hit"] == 0.625, L
    assert L["bytes_per_expert"] * 16 < L["bytes"]
# the CPU experts' bytes are in RAM, not in VRAM
cpu = sum(10 * L["bytes_per_expert"] for L in p["layers"])
assert p["usage"]["ram_layers_bytes"] == cpu, (p["usage"], cpu)
assert p["usage"]["vram_layers_bytes"] == sum(L["bytes"] for L in p["layers"]) - cpu
PY
	run -0 "$NTX_BIN/ntx-plan" --check "$T/split.json" "$QW"
	same QW p1 --plan "$T/split.json"
	# from ntx-inspect's JSON (its bytes_per_expert): the same experts
	"$NTX_BIN/ntx-inspect" "$QW" | "$NTX_BIN/ntx-plan" - --vram-budget 8G --vram-experts 6 -c 256 -o "$T/split-i.json"
	[ "$(grep -c '"cpu_experts": "6-15"' "$T/split-i.json")" = "$(grep -c '"cpu_experts": "6-15"' "$T/split.json")" ]
	# 0: every expert on the CPU
	run -0 "$NTX_BIN/ntx-plan" "$QW" --vram-budget 8G --vram-experts 0 -c 256
	[[ "$output" == *'"cpu_experts": "0-15"'* ]]
	# what cannot be
	run -1 "$NTX_BIN/ntx-plan" "$QW" --vram-budget 0 --vram-experts 2
	[[ "$output" == *"there is no GPU"* ]]
	run -1 "$NTX_BIN/ntx-plan" "$QW" --vram-budget 8G --executor gpu --vram-experts 2
	[[ "$output" == *"--executor gpu rules out"* ]]
	run -1 "$NTX_BIN/ntx-plan" "$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf" --vram-budget 8G --vram-experts 2
	[[ "$output" == *"the model has no experts"* ]]
	run -2 "$NTX_BIN/ntx-plan" "$QW" --vram-experts -1
	# a hand-edited list that is not a list of experts
	sed 's/"cpu_experts": "6-15"/"cpu_experts": "6-16"/' "$T/split.json" >"$T/bad.json"
	run -1 "$NTX_BIN/ntx-plan" --check "$T/bad.json"
	[[ "$output" == *'bad.json:'*'stays below 16'* ]]
	sed 's/"cpu_experts": "6-15"/"cpu_experts": "7,3"/' "$T/split.json" >"$T/bad.json"
	run -1 "$RUN" --plan "$T/bad.json" -p hi -n 1
	[[ "$output" == *'goes up'* ]]
}

@test "--expert-stats: ntx-run counts the router's choices (--perplexity, generation); ntx-plan keeps the most chosen experts in VRAM" {
	need_moe
	T="$BATS_TEST_TMPDIR"
	for i in 1 2 3 4 5 6 7 8; do cat "$BATS_TEST_DIRNAME/../../README.md"; done >"$T/calib.txt"
	run -0 "$RUN" -m "$QW" --backend cpu -t 2 -q --perplexity "$T/calib.txt" -c 128 --expert-stats "$T/x.json"
	run -0 python3 - "$T/x.json" <<'PY'
import json, sys
x = json.load(open(sys.argv[1]))
assert x["format"] == "ntx.experts" and x["version"] == 1
assert x["model"]["n_layer"] == 2 and x["model"]["n_expert"] == 16 and x["model"]["n_expert_used"] == 4
assert [L["index"] for L in x["layers"]] == [0, 1]
for L in x["layers"]:
    assert len(L["counts"]) == 16 and sum(L["counts"]) == 4 * x["tokens"], L
assert x["tokens"] > 1000
# the three most chosen experts of each layer, for the plan below
print(" ".join(",".join(str(i) for i in sorted(sorted(range(16), key=lambda i: (-L["counts"][i], i))[:3])) for L in x["layers"]))
PY
	hot=($output)
	run -0 "$NTX_BIN/ntx-plan" "$QW" --vram-budget 8G --vram-experts 3 --expert-stats "$T/x.json" -c 256 -o "$T/p.json"
	run -0 python3 - "$T/p.json" "${hot[0]}" "${hot[1]}" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for L, hot in zip(p["layers"], sys.argv[2:]):
    cpu = set()
    for part in L["cpu_experts"].split(","):
        a, _, b = part.partition("-")
        cpu |= set(range(int(a), int(b or a) + 1))
    assert set(range(16)) - cpu == set(map(int, hot.split(","))), (L, hot)
    # three hot experts take more than 3/16 of the routing
    assert L["cpu_hit"] < 13 / 16, L
PY
	same QW p2 --plan "$T/p.json"
	# generation counts too; a dense model has nothing to count
	run -0 "$RUN" -m "$MX" --backend cpu -t 2 -q -p "Once upon a time" -n 8 --temp 0 --expert-stats "$T/g.json"
	grep -q '"n_expert":8' "$T/g.json"
	run -2 "$RUN" -m "$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf" -p hi -n 1 --expert-stats "$T/d.json"
	[[ "$output" == *"not a mixture of experts"* ]]
	[ ! -e "$T/d.json" ]
	# counts of another model, a broken file
	run -1 "$NTX_BIN/ntx-plan" "$MX" --vram-budget 8G --vram-experts 3 --expert-stats "$T/x.json"
	[[ "$output" == *"made for another model"* ]]
	sed 's/"tokens":[0-9]*/"tokens":3/' "$T/x.json" >"$T/bad.json"
	run -1 "$NTX_BIN/ntx-plan" "$QW" --vram-budget 8G --vram-experts 3 --expert-stats "$T/bad.json"
	[[ "$output" == *"bad.json:"*"expected a count from 0"* ]]
	run -2 "$RUN" -m "$QW" --tokenize -p hi --expert-stats "$T/t.json"
}

@test "experts on disk: a MoE layer on disk computed by the CPU reads the chosen experts from the pack into the expert cache; any cache size gives the same text" {
	need_moe
	T="$BATS_TEST_TMPDIR"
	for m in MX QW; do
		"$NTX_BIN/ntx-plan" "${!m}" --vram-budget 0 --ram-budget 1G -c 256 -o "$T/$m.ram.json"
		all_to_disk "$T/$m.ram.json" "$T/$m.disk.json" "$T/$m.ntxp"
		"$NTX_BIN/ntx-pack" -q "${!m}" --plan "$T/$m.disk.json" --compress none
		for c in 1 3 ""; do
			NTX_EXPERT_CACHE=$c same $m p1 --plan "$T/$m.disk.json" --stats-json "$T/s$c.json"
		done
		# a prompt pass needs every expert: groups of the cache's size
		NTX_EXPERT_CACHE=3 same $m p2 --plan "$T/$m.disk.json"
		# the default cache holds these models' experts: each is read once,
		# so the pack is read about once; one expert at a time rereads them
		# but never a whole layer per token
		python3 - "$T/s.json" "$T/s1.json" "$T/$m.ntxp" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))["streaming"]
s1 = json.load(open(sys.argv[2]))["streaming"]
pack = os.path.getsize(sys.argv[3])
assert 0 < s["bytes_disk"] <= 1.2 * pack, (s, pack)
assert s1["bytes_disk"] > s["bytes_disk"], (s1, s)
assert s1["bytes_disk"] < s1["n_eval_calls"] * pack, (s1, pack)
# the cache's counters: a miss is an expert read
assert s["expert_cache_misses"] > 0 and s["expert_cache_hits"] > s["expert_cache_misses"], s
assert s1["expert_cache_hit_rate"] < s["expert_cache_hit_rate"], (s1, s)
# per layer: the router's choices (tokens x experts used) and the hit rate
x = json.load(open(sys.argv[1]))["experts"]
assert [l["index"] for l in x["layers"]] == [0, 1], x
for l in x["layers"]:
    assert l["routed"] % x["n_expert_used"] == 0 and l["routed"] > 0, l
    assert 0 < l["cache_hit_rate"] < 1 and l["cpu_share"] == 0, l
PY
	done
	# a pack cut short: one clear error, no text that looks complete
	truncate -s 200000 "$T/QW.ntxp"
	run --separate-stderr "$RUN" --plan "$T/QW.disk.json" --backend cpu -q -p "Once upon a time" -n 8 --temp 0
	[ "$status" -ne 0 ]
	[[ "$stderr" == *"truncated"* ]]
}
