#!/usr/bin/env bats
# ntx-run --bench (doc/ntx-run.1): one JSON array on stdout, a pp and a tg
# object with the man page's keys in order and one sample per repetition,
# then the verification curve; 0 skips a test, --draft adds the draft's
# cost, a context too small for the curve is one line and exit 1, and the
# options that do not apply are usage errors. CPU only, on the shipped
# tiny model (the timings themselves are not checked).

bats_require_minimum_version 1.5.0

setup() {
	RUN="$NTX_BIN/ntx-run"
	M="$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf"
	T="$BATS_TEST_TMPDIR"
	[ -x "$RUN" ] || { echo "no $RUN (make first)" >&2; return 1; }
}

# check_bench FILE EXPECTED_TESTS REPS [DRAFT]: the document's shape.
check_bench() {
	python3 - "$@" "$M" <<'PY'
import json, sys
path, reps = sys.argv[1], int(sys.argv[3])
tests = [t for t in sys.argv[2].split(",") if t]
draft = sys.argv[4] if len(sys.argv) > 5 else None
model = sys.argv[-1]
text = open(path).read()
assert text.endswith("]\n") and text.startswith("[\n  {\n    \"test\""), text[:40]
doc = json.loads(text)
assert [t["test"] for t in doc] == tests + ["verify"], [t["test"] for t in doc]
keys = ["test", "model_filename", "model_size", "weight_bytes_per_token", "backend",
        "n_threads", "n_prompt", "n_gen", "avg_ts", "stddev_ts", "samples_ts"]
for t in doc[:-1]:
    assert list(t) == keys, list(t)  # no roofline keys on the CPU
    assert t["model_filename"] == model and t["backend"] == "cpu" and t["n_threads"] == 2, t
    assert len(t["samples_ts"]) == reps and all(x > 0 for x in t["samples_ts"]), t
    assert t["avg_ts"] > 0 and (t["stddev_ts"] == 0) == (reps == 1), t
    n = int(t["test"][2:])
    assert (t["n_prompt"], t["n_gen"]) == ((n, 0) if t["test"].startswith("pp") else (0, n)), t
v = doc[-1]
assert list(v) == ["test", "model_filename", "draft_filename", "n_past", "pass_ms",
                   "plain_tok_per_s", "pass8_over_pass1", "draft_ms_per_token", "projection",
                   "projected"], list(v)
assert v["n_past"] == 64 and list(v["pass_ms"]) == ["1", "2", "4", "8", "16"], v
assert all(x > 0 for x in v["pass_ms"].values()) and v["projection"] is True, v
assert [p["acceptance"] for p in v["projected"]] == [0.5, 0.6, 0.7, 0.8], v["projected"]
assert all(list(p) == ["acceptance", "k", "tok_per_s", "speedup"] for p in v["projected"])
if draft:
    assert v["draft_filename"] == draft and v["draft_ms_per_token"] > 0, v
else:
    assert v["draft_filename"] is None and v["draft_ms_per_token"] is None, v
PY
}

@test "--bench: pp and tg with a sample per repetition, then the verification curve" {
	run --separate-stderr "$RUN" -m "$M" -t 2 -q --bench --bench-pp 16 --bench-tg 8 --bench-reps 2
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	printf '%s\n' "$output" >"$T/b.json"
	check_bench "$T/b.json" pp16,tg8 2
}

@test "--bench: 0 skips a test; one repetition has no spread" {
	run --separate-stderr "$RUN" -m "$M" -t 2 -q --bench --bench-pp 0 --bench-tg 4 --bench-reps 1
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/b.json"
	check_bench "$T/b.json" tg4 1
	run --separate-stderr "$RUN" -m "$M" -t 2 -q --bench --bench-pp 0 --bench-tg 0
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/b.json"
	check_bench "$T/b.json" "" 1
}

@test "--bench --draft: the curve has the draft's name and its cost per token" {
	run --separate-stderr "$RUN" -m "$M" -t 2 -q --bench --bench-pp 8 --bench-tg 4 --bench-reps 1 \
		--draft "$M"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$T/b.json"
	check_bench "$T/b.json" pp8,tg4 1 "$M"
}

@test "--bench: a context under 80 positions, a missing draft: one line, exit 1" {
	run --separate-stderr "$RUN" -m "$M" -t 2 -q -c 64 --bench --bench-pp 8 --bench-tg 0
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[ "$stderr" = "ntx-run: the verification curve needs a context of 80 (-c)" ]
	run --separate-stderr "$RUN" -m "$M" -t 2 -q --bench --draft "$T/missing.gguf"
	[ "$status" -eq 1 ]
	[ "$stderr" = "ntx-run: --draft $T/missing.gguf: No such file or directory" ]
}

@test "--bench with --stats-json, --lookup, -p or --chat: usage errors (exit 2)" {
	run --separate-stderr "$RUN" -m "$M" --bench --stats-json "$T/s.json"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --stats-json applies to generation and --batch"* ]]
	[ ! -e "$T/s.json" ]
	run --separate-stderr "$RUN" -m "$M" --bench --lookup 2
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$M" --bench -p hi
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$M" --bench --chat
	[ "$status" -eq 2 ]
}
