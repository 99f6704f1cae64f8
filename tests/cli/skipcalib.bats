#!/usr/bin/env bats
# ntx-skip-calib (doc/ntx-skip-calib.1, doc/skip-calib.md): the JSON document,
# skip sets by --count and --threshold, the ends rule, --eval measurements
# (calibrated sets must beat the last-layers baseline), usage and input
# errors, and ntx-run --skip with the result.

load gguf_helpers

setup_file() {
	export CALIB="$NTX_BIN/ntx-skip-calib"
	export RUN="$NTX_BIN/ntx-run"
	export F="$NTX_FIXTURES"
	export S="$F/models/stories260K.gguf"
	export Q="$F/tinymodel/tinymodel-q8_0.gguf"
	export D="$BATS_FILE_TMPDIR"
	[ -x "$CALIB" ] || { echo "no $CALIB (make first)" >&2; return 1; }
	self_contained_models "$D" || return 1
	# disjoint calibration and held-out texts from the tiny model's eval.txt
	english_text | head -c 3000 >"$D/calib.txt"
	english_text | tail -c +6001 | head -c 3000 >"$D/held.txt"
	# one measured run (about 5 s of CPU), shared by the tests below
	"$CALIB" -m "$Q" -c 128 --count 1,2 --naive --eval "$D/held.txt" <"$D/calib.txt" \
		>"$D/eval.json" 2>"$D/eval.err"
}

setup() {
	T="$BATS_TEST_TMPDIR"
}

# ---- usage ----

@test "-h: usage on stdout, exit 0; -V" {
	run --separate-stderr "$CALIB" -h
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: ntx-skip-calib "* ]]
	for o in --count --threshold --eval --naive --allow-ends --plan; do
		[[ "$output" == *"$o"* ]]
	done
	[ -z "$stderr" ]
	run "$CALIB" -V
	[ "$status" -eq 0 ]
	[[ "$output" == "ntx-skip-calib (ntx) "[0-9]* ]]
}

@test "usage errors: exit 2 with one message and a short usage" {
	run --separate-stderr "$CALIB" --bogus -m "$S"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-skip-calib: invalid option '--bogus'"$'\n'"usage: ntx-skip-calib "* ]]
	run --separate-stderr "$CALIB"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-skip-calib: no model: give -m MODEL.gguf or --plan plan.json"* ]]
	run --separate-stderr "$CALIB" -m "$S" --count 0
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-skip-calib: --count: 0 is out of range [1, 1024]"* ]]
	run --separate-stderr "$CALIB" -m "$S" --count 1,,2
	[ "$status" -eq 2 ]
	run --separate-stderr "$CALIB" -m "$S" --count x
	[ "$status" -eq 2 ]
	run --separate-stderr "$CALIB" -m "$S" --threshold 2
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-skip-calib: --threshold: "* ]]
	run --separate-stderr "$CALIB" -m "$S" -c 4
	[ "$status" -eq 2 ]
	run --separate-stderr "$CALIB" -m "$S" --backend tpu
	[ "$status" -eq 2 ]
	run --separate-stderr "$CALIB" -m "$S" extra
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-skip-calib: unexpected argument 'extra'"* ]]
	run --separate-stderr "$CALIB" -m "$S" --eval
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-skip-calib: option '--eval' needs a value"* ]]
}

# ---- bad input ----

@test "a model that is not a GGUF, a missing one: exit 1, one line" {
	need_fixtures
	printf '{"format": "ntx.plan"}\n' >"$T/plan.gguf"
	run --separate-stderr "$CALIB" -m "$T/plan.gguf" <"$D/calib.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: $T/plan.gguf: not a GGUF file (bad magic 7b 22 66 6f)"
	[ -z "$output" ]
	run --separate-stderr "$CALIB" -m "$T/nope.gguf" <"$D/calib.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: $T/nope.gguf: No such file or directory"
	run --separate-stderr "$CALIB" -m "$F/vocab/ggml-vocab-llama3.gguf" <"$D/calib.txt"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"no tensors"* ]]
}

@test "bad calibration and evaluation texts: exit 1 naming them, no output" {
	need_fixtures
	run --separate-stderr "$CALIB" -m "$S" </dev/null
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: stdin: the calibration text has 1 tokens; at least 16 are needed"
	run --separate-stderr "$CALIB" -m "$S" -f "$T"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: $T: Is a directory"
	run --separate-stderr "$CALIB" -m "$S" -f "$T/nope.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: $T/nope.txt: No such file or directory"
	# a held-out text shorter than one chunk fails before any work
	echo "Once upon a time" >"$T/short.txt"
	run --separate-stderr "$CALIB" -m "$S" -q -c 64 --eval "$T/short.txt" -o "$T/out.json" \
		<"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: $T/short.txt: the evaluation text has 6 tokens, fewer than one chunk of 64 (give a longer text or a smaller -c)"
	[ ! -e "$T/out.json" ]
	[ -z "$output" ]
	run --separate-stderr "$CALIB" -m "$S" -q -c 64 --eval "$T/nope.txt" \
		<"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: $T/nope.txt: No such file or directory"
}

@test "-o: the file; an unwritable output: exit 1, nothing partial left" {
	need_fixtures
	run --separate-stderr "$CALIB" -m "$S" -q -c 64 -o "$T/s.json" <"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	expect "$(json "$T/s.json" 'd["format"]')" ntx.skip
	[ -c /dev/full ] || skip "no /dev/full"
	run --separate-stderr "$CALIB" -m "$S" -q -c 64 -o /dev/full <"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: /dev/full: No space left on device"
	[ -c /dev/full ] # a device is never removed
	run --separate-stderr bash -c '"$CALIB" -m "$S" -q -c 64 <"$0" >/dev/full' "$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: writing output: No space left on device"
}

@test "-o FILE: a failed write keeps the old file; an unwritable one fails before calibrating" {
	echo old >"$T/s.json"
	run limited "$CALIB" -m "$S" -q -c 64 --count 1 -o "$T/s.json" <"$D/calib.txt"
	[ "$status" -eq 1 ]
	expect "$output" "ntx-skip-calib: $T/s.json: File too large"
	expect "$(cat "$T/s.json")" old
	expect "$(ls "$T")" s.json
	# a missing directory: refused at once (no calibration, no progress)
	run --separate-stderr "$CALIB" -m "$S" -c 64 --count 1 -o "$T/no/s.json" <"$D/calib.txt"
	[ "$status" -eq 1 ]
	expect "$stderr" "ntx-skip-calib: $T/no/s.json: No such file or directory"
}

# ---- the document ----

@test "JSON: format, model, calibration, cos_mean for every layer" {
	fp=$("$NTX_BIN/ntx-inspect" "$Q" | python3 -c 'import json,sys; print(json.load(sys.stdin)["fingerprint"])')
	python3 - "$D/eval.json" "$Q" "$fp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d)[:2] == ["format", "version"] and d["format"] == "ntx.skip" and d["version"] == 1
assert d["model"] == {"path": sys.argv[2], "fingerprint": sys.argv[3], "n_layer": 16}, d["model"]
c = d["calibration"]
assert c["file"] == "-" and c["ctx"] == 128 and c["tokens"] > 600 and c["ppl"] > 1, c
assert [l["index"] for l in d["layers"]] == list(range(16))
for l in d["layers"]:
    assert 0 < l["cos_mean"] <= 1 and l["cos_std"] >= 0, l
    assert l["n_tokens"] == c["tokens"] // 128 * 128, l
# the first layer transforms its input most (the tiny model: about 0.71)
assert min(d["layers"], key=lambda l: l["cos_mean"])["index"] == 0
PY
}

@test "sets by --count are the most similar layers; ends never skipped; skip = largest set" {
	python3 - "$D/eval.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cos = {l["index"]: l["cos_mean"] for l in d["layers"]}
rank = sorted(range(1, 15), key=lambda i: (-cos[i], i))  # ends excluded
cal = [s for s in d["sets"] if s["method"] == "calibrated"]
naive = [s for s in d["sets"] if s["method"] == "naive_last"]
assert [s["count"] for s in cal] == [1, 2] and [s["count"] for s in naive] == [1, 2]
for s in cal:
    assert s["layers"] == sorted(rank[:s["count"]]), (s, rank)
for s in naive:
    assert s["layers"] == list(range(15 - s["count"], 15)), s  # the last layer stays
assert d["skip"] == cal[-1]["layers"], d["skip"]
PY
}

@test "--eval: every set has ppl, kld and top-1; calibrated sets beat --naive sets of the same size" {
	python3 - "$D/eval.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
e = d["eval"]
assert e["tokens"] > 600 and e["full_ppl"] > 1 and e["full_ppl_err"] > 0, e
by = {}
for s in d["sets"]:
    m = s["eval"]
    assert set(m) == {"ppl", "ppl_err", "kld", "kld_err", "top1_agreement", "n_scored"}, m
    assert m["ppl"] > 1 and m["kld"] > 0 and 0 < m["top1_agreement"] < 1, m
    assert m["n_scored"] == e["tokens"] // 128 * 63, m
    by[(s["method"], s["count"])] = m
for n in (1, 2):
    c, b = by[("calibrated", n)], by[("naive_last", n)]
    assert c["ppl"] < b["ppl"] and c["kld"] < b["kld"] and c["top1_agreement"] > b["top1_agreement"], (n, c, b)
    # skipping costs something: never better than the full model's agreement
    assert c["ppl"] > e["full_ppl"] * 0.98, (c, e)
PY
	# progress is for terminals only
	! grep -q $'\r' "$D/eval.err"
}

@test "--threshold picks the set (and the skip); --allow-ends lets the ends in" {
	need_fixtures
	run --separate-stderr "$CALIB" -m "$S" -q -c 128 --count 4 --threshold 0.85 \
		<"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/t.json"
	python3 - "$T/t.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cos = {l["index"]: l["cos_mean"] for l in d["layers"]}
th = [s for s in d["sets"] if s["method"] == "threshold"]
assert len(th) == 1, d["sets"]
want = sorted(i for i in range(1, 4) if cos[i] >= 0.85)
assert th[0]["layers"] == want and th[0]["count"] == len(want) and want, (th, cos)
assert d["skip"] == want, d["skip"]
cal = [s for s in d["sets"] if s["method"] == "calibrated"]
# 4 asked, 3 candidates (layers 1-3 of 5): one set of 3
assert [s["count"] for s in cal] == [3] and cal[0]["layers"] == [1, 2, 3], cal
PY
	run --separate-stderr "$CALIB" -m "$S" -q -c 128 --count 4,5 --allow-ends \
		<"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/a.json"
	python3 - "$T/a.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
cos = {l["index"]: l["cos_mean"] for l in d["layers"]}
rank = sorted(range(5), key=lambda i: (-cos[i], i))
cal = [s for s in d["sets"] if s["method"] == "calibrated"]
assert [s["layers"] for s in cal] == [sorted(rank[:4]), [0, 1, 2, 3, 4]], (cal, rank)
assert 0 in rank[4:] or 4 in rank[:4]  # an end layer is among the choices
PY
}

@test "stdin and -f give the same document; --plan works and refuses another model" {
	need_fixtures
	run --separate-stderr "$CALIB" -m "$S" -q -c 128 --count 2 -f "$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 0 ]
	a=$(printf '%s\n' "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["layers"], d["sets"])')
	run --separate-stderr "$CALIB" -m "$S" -q -c 128 --count 2 <"$F/ref/stories260K/perplexity/tinystory.txt"
	b=$(printf '%s\n' "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["layers"], d["sets"])')
	expect "$b" "$a"
	"$NTX_BIN/ntx-plan" "$S" --vram-budget 0 -o "$T/plan.json"
	run --separate-stderr "$CALIB" --plan "$T/plan.json" -q -c 128 --count 2 <"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 0 ]
	c=$(printf '%s\n' "$output" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["layers"], d["sets"])')
	expect "$c" "$a"
	run --separate-stderr "$CALIB" --plan "$T/plan.json" -m "$Q" -q <"$D/calib.txt"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-skip-calib: $T/plan.json: the plan was made for another model: "* ]]
}

@test "--plan with a skip set: those layers are always skipped, never candidates, not listed" {
	need_fixtures
	"$NTX_BIN/ntx-plan" "$S" --vram-budget 0 --skip 2 -o "$T/plan.json"
	txt="$F/ref/stories260K/perplexity/tinystory.txt"
	run --separate-stderr "$CALIB" --plan "$T/plan.json" -q -c 64 --count 1,2 --naive --eval "$txt" <"$txt"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/s.json"
	expect "$(json "$T/s.json" '[l["index"] for l in d["layers"]]')" "[0, 1, 3, 4]"
	expect "$(json "$T/s.json" '[s["layers"] for s in d["sets"]]')" "[[1], [3], [1, 3], [1, 3]]"
	# a set's PPL is the model without the set and without layer 2
	ppl=$(json "$T/s.json" '"%.4f" % d["sets"][0]["eval"]["ppl"]')
	run "$RUN" -m "$S" -q -c 64 --skip-layers 1,2 --perplexity "$txt"
	[ "$status" -eq 0 ]
	[[ "$output" == "Final estimate: PPL = $ppl +/- "* ]]
}

@test "ntx-run --skip skip.json runs the set: the same text as --skip-layers" {
	layers=$(json "$D/eval.json" '",".join(map(str, d["skip"]))')
	[ -n "$layers" ]
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning" -n 24 --temp 0 --skip "$D/eval.json"
	[ "$status" -eq 0 ]
	[ -n "$output" ]
	a=$output
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning" -n 24 --temp 0 --skip-layers "$layers"
	expect "$output" "$a"
	# the full model differs (two layers fewer is not the same model)
	run --separate-stderr "$RUN" -m "$Q" -q -p "In the beginning" -n 24 --temp 0
	[ "$output" != "$a" ]
	# and another model refuses it
	run --separate-stderr "$RUN" -m "$S" -q -p x -n 2 --skip "$D/eval.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"made for another model"* ]]
}

@test "a progress bar on stderr only when it is a terminal" {
	need_fixtures
	command -v script >/dev/null || skip "no script(1)"
	run script -qec "\"$CALIB\" -m \"$S\" -c 128 <\"$F/ref/stories260K/perplexity/tinystory.txt\" >\"$T/s.json\"" /dev/null
	[ "$status" -eq 0 ]
	[[ "$output" == *$'\r'"ntx-skip-calib: calibration: chunk "*"/7, PPL "* ]]
	run script -qec "\"$CALIB\" -q -m \"$S\" -c 128 <\"$F/ref/stories260K/perplexity/tinystory.txt\" >\"$T/s.json\"" /dev/null
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	run --separate-stderr "$CALIB" -m "$S" -c 128 <"$F/ref/stories260K/perplexity/tinystory.txt"
	[ "$status" -eq 0 ]
	[[ "$stderr" != *$'\r'* ]]
}

@test "Ctrl-C: exit 130 within seconds, no output file" {
	need_fixtures
	# calibration and ten evaluation passes over 50 KB: long enough anywhere
	"$CALIB" -m "$Q" -c 512 --naive --eval "$F/tinymodel/eval.txt" -o "$T/s.json" 		<"$F/tinymodel/eval.txt" 2>"$T/err" 3>&- &
	pid=$!
	sleep 1
	kill -0 "$pid" # still calibrating
	interrupted "$pid" ntx-skip-calib
	grep -q '^ntx-skip-calib: interrupted$' "$T/err"
	[ ! -e "$T/s.json" ]
}
