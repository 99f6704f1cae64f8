#!/usr/bin/env bats
# ntx-run --draft / --lookup: speculative decoding with a draft model of the
# same vocabulary and with prompt lookup. Greedy output must equal plain
# decoding on every placement the CPU runs (all in RAM, layers read from the
# pack on disk), in --json mode too; stats report what was drafted and
# accepted; bad drafts and bad options are one-line errors with the right
# exit status (a crash never passes). CPU only, the trained tiny pair.

load gguf_helpers

setup_file() {
	export RUN="$NTX_BIN/ntx-run"
	export F="$NTX_FIXTURES"
	export Q="$F/tinymodel/tinymodel-q8_0.gguf"
	export DQ="$F/tinymodel/tinydraft-q8_0.gguf"
	export DF="$F/tinymodel/tinydraft-f16.gguf"
	export S="$F/models/stories260K.gguf"
	export D="$BATS_FILE_TMPDIR"
	[ -x "$RUN" ] || { echo "no $RUN (make first)" >&2; return 1; }
	have_fixtures || return 0 # every test calls need_fixtures
	[ -f "$Q" ] && [ -f "$DQ" ] || { echo "no fixtures at '$F'" >&2; return 1; }
	# the target with most of its layers read from a pack on disk
	"$NTX_BIN/ntx-plan" "$Q" --vram-budget 0 --ram-budget 14M -c 512 --pack "$D/q.ntxp" \
		-o "$D/disk.json"
	"$NTX_BIN/ntx-pack" -q "$Q" --plan "$D/disk.json" --compress none
	printf 'And the LORD said unto Moses, Speak unto the children of Israel, and say unto them,' >"$D/p1.txt"
	printf 'The committee reported that' >"$D/p2.txt"
	for p in p1 p2; do
		"$RUN" -m "$Q" -q -f "$D/$p.txt" -n 96 --temp 0 -c 512 >"$D/$p.plain"
	done
}

# spec_same PROMPT ARGS...: greedy output with ARGS equals plain decoding's
spec_same() {
	local p=$1
	shift
	run --separate-stderr "$RUN" -m "$Q" -q -f "$D/$p.txt" -n 96 --temp 0 -c 512 "$@"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/$p.plain")" ] || { echo "differs with $*: $output" >&2; return 1; }
}

@test "--draft: greedy output equals plain decoding (K adaptive, 1, 4, 8; -md and --model-draft)" {
	need_fixtures
	for p in p1 p2; do
		spec_same $p --draft "$DQ"
		spec_same $p -md "$DQ" --draft-k 1
		spec_same $p --model-draft "$DF" --draft-k 4
		spec_same $p --draft "$DQ" --draft-k 8
	done
}

@test "--lookup alone and with --draft: greedy output equals plain decoding" {
	need_fixtures
	for p in p1 p2; do
		spec_same $p --lookup 3
		spec_same $p --lookup 1 --draft-k 6
		spec_same $p --lookup 2 --draft "$DQ"
	done
}

@test "--draft with the target's layers on disk (pack) equals plain decoding" {
	need_fixtures
	run --separate-stderr "$RUN" --plan "$D/disk.json" -q -f "$D/p1.txt" -n 96 --temp 0
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/p1.plain")" ]
	run --separate-stderr "$RUN" --plan "$D/disk.json" -q -f "$D/p1.txt" -n 96 --temp 0 \
		--draft "$DQ" --lookup 2
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/p1.plain")" ]
}

@test "--draft --stats-json: drafted, accepted, tokens per target pass, time shares" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$Q" -f "$D/p1.txt" -n 96 --temp 0 -c 512 \
		--draft "$DQ" --stats-json "$D/s.json"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"ntx-run: speculative (draft model): "*" drafted, "*" accepted ("*"%), "*" tokens per target pass, "*" of "*" passes paused; draft "*" s ("*"%), verify "*" s ("*"%)"* ]]
	[ "$(json "$D/s.json" 'd["speculative"]["source"]')" = "draft model" ]
	[ "$(json "$D/s.json" 'd["speculative"]["accepted"] > 0')" = true ]
	[ "$(json "$D/s.json" 'd["speculative"]["accepted"] <= d["speculative"]["drafted"]')" = true ]
	[ "$(json "$D/s.json" 'd["speculative"]["tokens_per_target_pass"] > 1')" = true ]
	[ "$(json "$D/s.json" '0 < d["speculative"]["draft_time_share"] < 1')" = true ]
	[ "$(json "$D/s.json" 'abs(d["speculative"]["acceptance_rate"] * d["speculative"]["drafted"] - d["speculative"]["accepted"]) < 1e-6')" = true ]
	[ "$(json "$D/s.json" '0 <= d["speculative"]["paused_steps"] <= d["speculative"]["target_passes"]')" = true ]
}

@test "a draft that is never accepted: drafting pauses (paused_steps), output equals plain; NTX_SPEC_BACKOFF=0 drafts every step" {
	need_fixtures
	# random weights with the target's vocabulary: nothing it drafts is
	# the target's pick, and it costs a third of a target pass
	"$NTX_BIN/ntx-gguf-gen" -q --vocab-from "$Q" --mix q8_0 -o "$D/rand.gguf"
	run --separate-stderr "$RUN" -m "$Q" -f "$D/p1.txt" -n 96 --temp 0 -c 512 \
		--draft "$D/rand.gguf" --stats-json "$D/r.json"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/p1.plain")" ]
	[[ "$stderr" == *" passes paused; "* ]]
	[ "$(json "$D/r.json" 'd["speculative"]["accepted"]')" = 0 ]
	# most steps are plain: a few draft before the pause, then a probe per wait
	[ "$(json "$D/r.json" 'd["speculative"]["paused_steps"] >= d["speculative"]["target_passes"] // 2')" = true ]
	[ "$(json "$D/r.json" 'd["speculative"]["target_passes"]')" = 95 ]
	run --separate-stderr env NTX_SPEC_BACKOFF=0 "$RUN" -m "$Q" -f "$D/p1.txt" -n 96 --temp 0 -c 512 \
		--draft "$D/rand.gguf" --stats-json "$D/r0.json"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/p1.plain")" ]
	[ "$(json "$D/r0.json" 'd["speculative"]["paused_steps"]')" = 0 ]
	[ "$(json "$D/r0.json" 'd["speculative"]["drafted"] >= 95')" = true ]
	# a fixed K never pauses
	run --separate-stderr "$RUN" -m "$Q" -f "$D/p1.txt" -n 96 --temp 0 -c 512 \
		--draft "$D/rand.gguf" --draft-k 2 --stats-json "$D/r2.json"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/p1.plain")" ]
	[ "$(json "$D/r2.json" 'd["speculative"]["paused_steps"]')" = 0 ]
	[ "$(json "$D/r2.json" 'd["speculative"]["drafted"] >= 2 * 94')" = true ]
}

@test "--json with --draft: the summary's text equals plain decoding" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$Q" -f "$D/p2.txt" -n 96 --temp 0 -c 512 --draft "$DQ" --json
	[ "$status" -eq 0 ]
	echo "$output" | tail -1 >"$D/last.json"
	[ "$(json "$D/last.json" 'd["event"]')" = done ]
	[ "$(json "$D/last.json" 'd["text"]')" = "$(cat "$D/p2.plain")" ]
	[ "$(json "$D/last.json" '"speculative" in d')" = true ]
}

@test "--draft at temp 0.8: the same seed gives the same text" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$Q" -q -f "$D/p1.txt" -n 48 --temp 0.8 -s 7 -c 512 --draft "$DQ" --draft-k 3
	[ "$status" -eq 0 ]
	a=$output
	run --separate-stderr "$RUN" -m "$Q" -q -f "$D/p1.txt" -n 48 --temp 0.8 -s 7 -c 512 --draft "$DQ" --draft-k 3
	[ "$status" -eq 0 ]
	[ "$output" = "$a" ]
	[ -n "$a" ]
}

# ---- refused before any work ----

@test "a draft with another vocabulary: one-line error naming the difference, exit 1" {
	need_fixtures
	"$NTX_BIN/ntx-gguf-gen" -q --vocab 8192 -o "$D/other.gguf"
	run --separate-stderr "$RUN" -m "$Q" -p hi -n 4 --draft "$D/other.gguf"
	[ "$status" -eq 1 ]
	[ "$output" = "" ]
	[[ "$stderr" == "ntx-run: --draft $D/other.gguf: "* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	run --separate-stderr "$RUN" -m "$Q" -p hi -n 4 --draft "$S"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: --draft $S: "*"tokenizer"* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

@test "a corrupt or missing draft file: one-line error, exit 1" {
	need_fixtures
	head -c 100000 "$DQ" >"$D/cut.gguf"
	run --separate-stderr "$RUN" -m "$Q" -p hi -n 4 --draft "$D/cut.gguf"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: --draft $D/cut.gguf: "* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	run --separate-stderr "$RUN" -m "$Q" -p hi -n 4 --draft "$D/missing.gguf"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "ntx-run: --draft $D/missing.gguf: "* ]]
}

@test "--draft with --self-spec, --draft-k 0 or 65, -md without a file: usage errors (exit 2)" {
	need_fixtures
	run --separate-stderr "$RUN" -m "$Q" -p hi --draft "$DQ" --self-spec
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --draft and --self-spec exclude each other"* ]]
	for k in 0 65 x; do
		run --separate-stderr "$RUN" -m "$Q" -p hi --draft "$DQ" --draft-k $k
		[ "$status" -eq 2 ]
		[[ "$stderr" == "ntx-run: --draft-k: "* ]]
	done
	run --separate-stderr "$RUN" -m "$Q" -p hi -md
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$Q" -p hi --lookup 0
	[ "$status" -eq 2 ]
	[[ "$stderr" == "ntx-run: --lookup: "* ]]
	run --separate-stderr "$RUN" -m "$Q" --perplexity x --draft "$DQ"
	[ "$status" -eq 2 ]
	run --separate-stderr "$RUN" -m "$Q" -p hi --lookup 2 --dump-logits "$D/x.f32"
	[ "$status" -eq 2 ]
	[ ! -e "$D/x.f32" ]
}

# ---- --batch ----

@test "--batch --draft / --lookup: greedy records equal plain --batch and each request alone" {
	need_fixtures
	{
		echo '{"id": 1, "prompt": "In the beginning", "n_predict": 48, "temp": 0}'
		echo '{"id": 2, "prompt": "And the LORD said unto Moses,", "n_predict": 48, "temp": 0}'
		echo '{"id": 3, "prompt": "The committee reported that", "n_predict": 48, "temp": 0}'
		echo '{"id": 4, "prompt": "A computer is", "n_predict": 48, "temp": 0, "repeat_penalty": 1.3}'
		echo '{"id": 5, "prompt": "In the beginning God created", "n_predict": 40, "temp": 0}'
	} >"$D/req.jsonl"
	run --separate-stderr "$RUN" -m "$Q" -q -c 512 --batch --parallel 2 <"$D/req.jsonl"
	[ "$status" -eq 0 ]
	printf '%s\n' "$output" >"$D/plain.jsonl"
	texts() { python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(json.dumps(sorted((x["id"], x["text"]) for x in r)))' "$1"; }
	ref=$(texts "$D/plain.jsonl")
	for a in "--draft $DQ" "--lookup 2" "--draft $DQ --lookup 3 --draft-k 3" "--draft $DF --draft-k 1"; do
		for par in 2 5; do
			run --separate-stderr "$RUN" -m "$Q" -c 512 --batch --parallel $par $a \
				--stats-json "$D/bs.json" <"$D/req.jsonl"
			[ "$status" -eq 0 ]
			printf '%s\n' "$output" >"$D/spec.jsonl"
			[ "$(texts "$D/spec.jsonl")" = "$ref" ] || { echo "differs: $a --parallel $par" >&2; return 1; }
			[[ "$stderr" == *"ntx-run: speculative: "*" drafted, "*" accepted"* ]]
			[ "$(json "$D/bs.json" 'd["speculative"]["accepted"] <= d["speculative"]["drafted"]')" = true ]
		done
	done
	# and request 3 alone
	run --separate-stderr "$RUN" -m "$Q" -q -c 512 -p "The committee reported that" -n 48 --temp 0
	[ "$(python3 -c 'import json,sys; print([json.loads(l)["text"] for l in open(sys.argv[1]) if json.loads(l)["id"] == 3][0], end="")' "$D/spec.jsonl")" = "$output" ]
}

@test "--batch --draft at temp 0.8 with a fixed K: the same seed gives the same records" {
	need_fixtures
	printf '%s\n' '{"id": 1, "prompt": "In the beginning", "n_predict": 32, "temp": 0.8, "seed": 5}' \
		'{"id": 2, "prompt": "A computer is", "n_predict": 32, "temp": 0.8, "seed": 9}' >"$D/rs.jsonl"
	"$RUN" -m "$Q" -q -c 512 --batch --parallel 2 --draft "$DQ" --draft-k 3 <"$D/rs.jsonl" >"$D/rs1.jsonl"
	"$RUN" -m "$Q" -q -c 512 --batch --parallel 2 --draft "$DQ" --draft-k 3 <"$D/rs.jsonl" >"$D/rs2.jsonl"
	texts_of() { python3 -c 'import json,sys; print(sorted((json.loads(l)["id"], json.loads(l)["text"]) for l in open(sys.argv[1])))' "$1"; }
	[ -n "$(texts_of "$D/rs1.jsonl")" ]
	[ "$(texts_of "$D/rs1.jsonl")" = "$(texts_of "$D/rs2.jsonl")" ]
}

@test "ntx-plan --draft: the draft's VRAM in the plan, K in the explain line; a budget too small names the draft (exit 3)" {
	need_fixtures
	run --separate-stderr "$NTX_BIN/ntx-plan" "$Q" --vram-budget 200M --ram-budget 6M --reserve 0 -c 1024 \
		--draft "$DQ" --draft-k 4 --explain -o "$D/dp.json"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"draft $DQ: "*" VRAM, "*"passes of 5 tokens (K = 4)"* ]]
	grep -q '"draft"' "$D/dp.json"
	run --separate-stderr "$NTX_BIN/ntx-plan" "$Q" --vram-budget 98M --ram-budget 6M --reserve 0 -c 1024 \
		--draft "$DQ" -o "$D/dp2.json"
	[ "$status" -eq 3 ]
	[[ "$stderr" == "ntx-plan: does not fit: "*"--draft model "*"exceed the VRAM budget (98.00 MiB)"* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	[ ! -e "$D/dp2.json" ]
}
