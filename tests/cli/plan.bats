#!/usr/bin/env bats
# ntx-plan: placement plans driven by overrides (no GPU needed), on 70B-shaped
# sparse GGUFs from ntx-gguf-gen and on the small fixture models.

bats_require_minimum_version 1.5.0
load fixtures

setup_file() {
	export PLAN="$NTX_BIN/ntx-plan"
	export GEN="$NTX_BIN/ntx-gguf-gen"
	export D="$BATS_FILE_TMPDIR"
	# 70B shapes, data region a hole: a few MB of disk for 40-58 GB files
	"$GEN" --shape 70b --mix q6_k --sparse -q -o "$D/q6.gguf"
	"$GEN" --shape 70b --mix q4_k_m --sparse -q -o "$D/q4.gguf"
	# everything overridden: the same plan on every machine
	export FIX="--disk-budget 500G --cpu-gbps 40 --h2d-gbps 25 --disk-gbps 2"
}

# count_layers FILE HOME EXEC: layers with that home and executor
count_layers() {
	awk -v h="\"home\": \"$2\"," -v e="\"exec\": \"$3\"," '
		/^  "layers": \[/ { in_l = 1; next }
		in_l && /^  \]/ { in_l = 0 }
		in_l && index($0, h) { hm = 1; next }
		in_l && index($0, e) { if (hm) n++; hm = 0; next }
		in_l && /"exec"/ { hm = 0 }
		END { print n + 0 }' "$1"
}

# num FILE KEY: the (first) integer value of "KEY" in the plan
num() {
	grep -m1 "\"$2\": " "$1" | sed 's/.*: //; s/,$//'
}

# sum of layer bytes by home ("null" for skipped layers)
home_bytes() {
	awk -v h="\"home\": $2," '
		/^  "layers": \[/ { in_l = 1; next }
		in_l && /^  \]/ { in_l = 0 }
		in_l && /"home": / { hm = index($0, h) > 0 }
		in_l && /"bytes": / { if (hm) { v = $2; sub(",", "", v); s += v } }
		END { printf "%.0f\n", s }' "$1"
}

@test "ntx-plan --help prints usage on stdout, exit 0" {
	run --separate-stderr "$PLAN" --help
	[ "$status" -eq 0 ]
	[[ "$output" == usage:* ]]
	[[ "$output" == *"--vram-budget"* ]]
	[ -z "$stderr" ]
}

@test "ntx-plan: usage errors exit 2" {
	run "$PLAN" --bogus "$D/q4.gguf"
	[ "$status" -eq 2 ]
	run "$PLAN"
	[ "$status" -eq 2 ]
	[[ "$output" == *"missing input"* ]]
	run "$PLAN" --vram-budget 24X "$D/q4.gguf"
	[ "$status" -eq 2 ]
	[[ "$output" == *"--vram-budget"* ]]
	run "$PLAN" --kv-type q8 "$D/q4.gguf"
	[ "$status" -eq 2 ]
	run "$PLAN" --executor tpu "$D/q4.gguf"
	[ "$status" -eq 2 ]
	run "$PLAN" --ctx 0 "$D/q4.gguf"
	[ "$status" -eq 2 ]
	run "$PLAN" --skip 3,200 --vram-budget 0 "$D/q4.gguf"
	[ "$status" -eq 2 ]
}

@test "ntx-plan: a missing input file is a runtime error (exit 1)" {
	run "$PLAN" "$D/nope.gguf"
	[ "$status" -eq 1 ]
	[[ "$output" == "ntx-plan: $D/nope.gguf: No such file or directory" ]]
}

@test "70B Q6_K, 24G VRAM, 24G RAM, ctx 4096: three-way split, every byte accounted for" {
	run --separate-stderr "$PLAN" $FIX --vram-budget 24G --ram-budget 24G --ctx 4096 "$D/q6.gguf"
	[ "$status" -eq 0 ]
	echo "$output" > "$D/q6.json"
	v=$(( $(count_layers "$D/q6.json" vram gpu) ))
	r=$(( $(count_layers "$D/q6.json" ram gpu) + $(count_layers "$D/q6.json" ram cpu) ))
	k=$(( $(count_layers "$D/q6.json" disk gpu) + $(count_layers "$D/q6.json" disk cpu) ))
	echo "vram $v ram $r disk $k"
	[ "$v" -gt 0 ] && [ "$r" -gt 0 ] && [ "$k" -gt 0 ]
	[ $((v + r + k)) -eq 80 ]
	# sum of tiers + reserves <= budgets
	[ "$(num "$D/q6.json" vram_used_bytes)" -le "$(num "$D/q6.json" vram_bytes)" ]
	[ "$(num "$D/q6.json" ram_used_bytes)" -le "$(num "$D/q6.json" ram_bytes)" ]
	[ "$(num "$D/q6.json" pack_bytes)" -le "$(num "$D/q6.json" disk_bytes)" ]
	# the VRAM total is its parts (layers + 3840 B per layer buffer: 15 slots x 256 + head + other + reserves)
	want=$(( $(num "$D/q6.json" vram_layers_bytes) + 3840 * v + $(num "$D/q6.json" output_bytes) \
		+ $(num "$D/q6.json" other_bytes) + $(num "$D/q6.json" kv_vram_bytes) \
		+ $(num "$D/q6.json" workspace_bytes) + $(num "$D/q6.json" ring_bytes) \
		+ $(num "$D/q6.json" margin_bytes) ))
	[ "$want" -eq "$(num "$D/q6.json" vram_used_bytes)" ]
	# the tiers hold every layer byte exactly once
	[ $(( $(home_bytes "$D/q6.json" '"vram"') + $(home_bytes "$D/q6.json" '"ram"') \
		+ $(home_bytes "$D/q6.json" '"disk"') )) -eq "$(num "$D/q6.json" layer_bytes)" ]
	grep -q "\"pack_path\": \"$D/q6.ntxp\"" "$D/q6.json"
	grep -q '"format": "ntx.plan"' "$D/q6.json"
	[ "$(tail -c 2 "$D/q6.json")" = "}" ]
}

@test "70B Q4_K_M puts more layers in VRAM than Q6_K" {
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G --ctx 4096 "$D/q6.gguf" > "$D/a6.json"
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G --ctx 4096 "$D/q4.gguf" > "$D/a4.json"
	v6=$(count_layers "$D/a6.json" vram gpu)
	v4=$(count_layers "$D/a4.json" vram gpu)
	echo "Q6_K $v6, Q4_K_M $v4"
	[ "$v4" -gt "$v6" ]
}

@test "--vram-budget 0 gives a valid CPU-only plan" {
	run --separate-stderr "$PLAN" $FIX --vram-budget 0 --ram-budget 32G "$D/q4.gguf"
	[ "$status" -eq 0 ]
	echo "$output" > "$D/cpu.json"
	[ "$(count_layers "$D/cpu.json" vram gpu)" -eq 0 ]
	[ "$(count_layers "$D/cpu.json" ram gpu)" -eq 0 ]
	[ "$(count_layers "$D/cpu.json" disk gpu)" -eq 0 ]
	[ $(( $(count_layers "$D/cpu.json" ram cpu) + $(count_layers "$D/cpu.json" disk cpu) )) -eq 80 ]
	[ "$(num "$D/cpu.json" vram_used_bytes)" -eq 0 ]
	[ "$(num "$D/cpu.json" ring_slots)" -eq 0 ]
	[ "$(num "$D/cpu.json" workspace_bytes)" -eq 0 ]
	# and it reads back
	run "$PLAN" --check "$D/cpu.json" "$D/q4.gguf"
	[ "$status" -eq 0 ]
}

@test "Gen3 x8 bandwidth: most RAM layers go to the CPU; Gen5: more are streamed" {
	"$PLAN" --disk-budget 500G --cpu-gbps 40 --vram-budget 24G --ram-budget 24G \
		--h2d-gbps 6.5 "$D/q4.gguf" > "$D/g3.json"
	"$PLAN" --disk-budget 500G --cpu-gbps 40 --vram-budget 24G --ram-budget 24G \
		--h2d-gbps 55 "$D/q4.gguf" > "$D/g5.json"
	c3=$(count_layers "$D/g3.json" ram cpu); s3=$(count_layers "$D/g3.json" ram gpu)
	c5=$(count_layers "$D/g5.json" ram cpu); s5=$(count_layers "$D/g5.json" ram gpu)
	echo "Gen3: $c3 cpu, $s3 streamed; Gen5: $c5 cpu, $s5 streamed"
	[ "$c3" -gt "$s3" ]
	[ "$s5" -gt "$s3" ]
}

@test "--parallel 16: a CPU slow on batches hands its layers to the GPU; the rate is recorded" {
	"$PLAN" --disk-budget 500G --cpu-gbps 100 --cpu-batch-gbps 4000 --vram-budget 24G \
		--ram-budget 64G --h2d-gbps 55 --parallel 16 --ctx 256 "$D/q4.gguf" > "$D/bf.json"
	"$PLAN" --disk-budget 500G --cpu-gbps 100 --cpu-batch-gbps 300 --vram-budget 24G \
		--ram-budget 64G --h2d-gbps 55 --parallel 16 --ctx 256 "$D/q4.gguf" > "$D/bs.json"
	cf=$(count_layers "$D/bf.json" ram cpu); cs=$(count_layers "$D/bs.json" ram cpu)
	echo "fast batched CPU: $cf CPU layers; slow: $cs"
	[ "$cf" -gt 0 ]
	[ "$cs" -lt "$cf" ]
	grep -q '"cpu_batch_gbps": 300' "$D/bs.json"
	grep -q '"cpu_batch_source": "override"' "$D/bs.json"
	run "$PLAN" --cpu-batch-gbps 0 "$D/q4.gguf"
	[ "$status" -eq 2 ]
	[[ "$output" == *"--cpu-batch-gbps"* ]]
}

@test "same inputs give a byte-identical plan" {
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G "$D/q6.gguf" > "$D/d1.json"
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G "$D/q6.gguf" > "$D/d2.json"
	cmp "$D/d1.json" "$D/d2.json"
}

@test "a plan read back equals the plan written (--check)" {
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G --skip 7,9 "$D/q6.gguf" -o "$D/rt.json"
	run --separate-stderr "$PLAN" --check "$D/rt.json" "$D/q6.gguf"
	[ "$status" -eq 0 ]
	echo "$output" > "$D/rt2.json"
	cmp "$D/rt.json" "$D/rt2.json"
}

@test "ntx-inspect JSON on stdin gives the same plan as the GGUF" {
	[ -x "$NTX_BIN/ntx-inspect" ] || skip "ntx-inspect not built"
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G "$D/q4.gguf" > "$D/g.json"
	"$NTX_BIN/ntx-inspect" "$D/q4.gguf" | "$PLAN" $FIX --vram-budget 24G --ram-budget 24G - > "$D/i.json"
	cmp "$D/g.json" "$D/i.json"
}

@test "a plan whose fingerprint does not match the model is refused" {
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G "$D/q6.gguf" > "$D/f6.json"
	run "$PLAN" --check "$D/f6.json" "$D/q4.gguf"
	[ "$status" -eq 1 ]
	[[ "$output" == *"made for another model: fingerprint"* ]]
}

# bad_plan SED-EXPR MESSAGE [STATUS]: the edited plan is refused with
# file:line:col and MESSAGE, exit STATUS (default 1)
bad_plan() {
	sed "$1" "$D/good.json" > "$D/bad.json"
	! cmp -s "$D/good.json" "$D/bad.json"
	run "$PLAN" --check "$D/bad.json"
	echo "$output"
	[ "$status" -eq "${3:-1}" ]
	[[ "$output" =~ ^ntx-plan:\ $D/bad.json:[0-9]+:[0-9]+:\  ]]
	[[ "$output" == *"$2"* ]]
}

@test "malformed plans each give a clear error" {
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G "$D/q6.gguf" > "$D/good.json"
	bad_plan 's/"n_ctx": 4096/"n_ctx": "4096"/' 'expected integer for "n_ctx" (found string)'
	bad_plan '0,/"skip": false/s//"skjp": false/' 'missing "skip" in layers[0]'
	bad_plan 's/"staging_bytes": \([0-9]*\)/"staging_bytes": -\1/' '"staging_bytes" must not be negative'
	bad_plan 's/"index": 5,/"index": 80,/' 'layer index 80 is out of range [0, 79]'
	bad_plan 's/"index": 5,/"index": 4,/' 'duplicate layer 4'
	bad_plan 's/"index": 5,/"index": -2,/' 'layer index -2 is out of range'
	bad_plan '/"index": 0,/{n;s/"home": "vram"/"home": "gpu"/}' 'is not one of "vram", "ram" or "disk"'
	bad_plan 's/"format": "ntx.plan"/"format": "ntx.pack"/' 'expected "ntx.plan"'
	bad_plan 's/"version": 1,/"version": 1,,/' "'}' expected"
	bad_plan 's/"pack_path": ".*"/"pack_path": null/' '"pack_path" is required'
	# edited so that it no longer fits: re-accounted and refused with exit 3
	bad_plan 's/"vram_bytes": [0-9]*/"vram_bytes": 1000/' 'does not fit: VRAM needs' 3
}

@test "a plan with a layer missing is refused" {
	"$PLAN" $FIX --vram-budget 0 --ram-budget 64G "$D/q4.gguf" > "$D/good2.json"
	# drop layer 79: its object ("{" .. "}") and the comma after layer 78
	l=$(grep -n '"index": 79,' "$D/good2.json" | cut -d: -f1)
	sed -e "$((l - 2))s/},/}/" -e "$((l - 1)),$((l + 5))d" "$D/good2.json" > "$D/miss.json"
	run "$PLAN" --check "$D/miss.json"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"layer 79 is missing"* ]]
}

@test "infeasible: KV cache larger than VRAM exits 3 and says by how much" {
	run --separate-stderr "$PLAN" $FIX --vram-budget 8G --ram-budget 64G --ctx 32768 --kv-type f32 "$D/q4.gguf"
	[ "$status" -eq 3 ]
	[ -z "$output" ]
	[[ "$stderr" == "ntx-plan: does not fit: KV cache ("*") + reserves ("*") exceed the VRAM budget (8.00 GiB) by "*"; lower --ctx, use --kv-type f16 or use --executor cpu" ]]
}

@test "infeasible: model larger than RAM + disk budget exits 3" {
	run "$PLAN" --cpu-gbps 40 --vram-budget 0 --ram-budget 16G --disk-budget 10G "$D/q6.gguf"
	[ "$status" -eq 3 ]
	[[ "$output" == *"larger than the VRAM, RAM and disk budgets"*"short by"* ]]
}

@test "--executor gpu streams every non-resident layer; cpu computes them all on the CPU" {
	"$PLAN" $FIX --vram-budget 24G --ram-budget 64G --executor gpu "$D/q4.gguf" > "$D/eg.json"
	"$PLAN" $FIX --vram-budget 24G --ram-budget 64G --executor cpu "$D/q4.gguf" > "$D/ec.json"
	[ "$(count_layers "$D/eg.json" ram cpu)" -eq 0 ]
	[ "$(count_layers "$D/eg.json" ram gpu)" -gt 0 ]
	[ "$(count_layers "$D/ec.json" ram gpu)" -eq 0 ]
	[ "$(count_layers "$D/ec.json" ram cpu)" -gt 0 ]
	[ "$(num "$D/ec.json" ring_slots)" -eq 0 ]
	# pure streaming: the slot a 2-slot ring frees holds a resident layer
	[ "$(num "$D/eg.json" ring_slots)" -eq 2 ]
	"$PLAN" $FIX --vram-budget 24G --ram-budget 64G --executor gpu --ring-slots 3 "$D/q4.gguf" > "$D/eg3.json"
	[ "$(num "$D/eg3.json" ring_slots)" -eq 3 ]
	[ "$(count_layers "$D/eg3.json" vram gpu)" -lt "$(count_layers "$D/eg.json" vram gpu)" ]
}

@test "--skip removes layers from every tier" {
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G --skip 0,40-42 "$D/q4.gguf" > "$D/sk.json"
	[ "$(grep -c '"skip": true' "$D/sk.json")" -eq 4 ]
	[ "$(grep -c '"home": null' "$D/sk.json")" -eq 4 ]
	[ "$(( $(home_bytes "$D/sk.json" '"vram"') + $(home_bytes "$D/sk.json" '"ram"') \
		+ $(home_bytes "$D/sk.json" '"disk"') + $(home_bytes "$D/sk.json" null) ))" \
		-eq "$(num "$D/sk.json" layer_bytes)" ]
	# a skip file, with sets
	printf '{"format": "ntx.skip", "version": 1, "sets": [{"layers": [1]}, {"layers": [2, 3]}]}\n' > "$D/skip.json"
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G --skip "$D/skip.json" --skip-set 1 "$D/q4.gguf" > "$D/sk2.json"
	[ "$(grep -c '"skip": true' "$D/sk2.json")" -eq 2 ]
	run "$PLAN" $FIX --vram-budget 24G --ram-budget 24G --skip "$D/skip.json" "$D/q4.gguf"
	[ "$status" -eq 1 ]
	[[ "$output" == *"--skip-set N"* ]]
}

@test "--scores keeps the most important layers in VRAM" {
	{
		printf '{"format": "ntx.skip", "version": 1, "layers": ['
		for i in $(seq 0 79); do
			# layers 60..79 matter most (lowest cosine)
			if [ "$i" -ge 60 ]; then c=0.5; else c=0.99; fi
			printf '%s{"index": %d, "cos_mean": %s}' "$([ "$i" -gt 0 ] && echo ,)" "$i" "$c"
		done
		printf ']}\n'
	} > "$D/scores.json"
	"$PLAN" $FIX --vram-budget 24G --ram-budget 24G --scores "$D/scores.json" "$D/q4.gguf" > "$D/sc.json"
	grep -q '"placement": "scores"' "$D/sc.json"
	for i in 60 70 79; do
		grep -A1 "\"index\": $i," "$D/sc.json" | grep -q '"home": "vram"'
	done
	grep -A1 '"index": 59,' "$D/sc.json" | grep -vq '"home": "vram"'
}

@test "--explain prints a summary on stderr, the plan on stdout" {
	run --separate-stderr "$PLAN" --vram-budget 24G --ram-budget 100G --disk-budget 500G \
		--h2d-gbps 55 --cpu-gbps 47 --disk-gbps 1.9 --explain "$D/q4.gguf"
	[ "$status" -eq 0 ]
	[[ "$output" == "{"* ]]
	[[ "$stderr" == *"layers vram/gpu (resident)"* ]]
	[[ "$stderr" == *"tok/s predicted"* ]]
}

@test "fixture models plan; a tied output head is placed like a layer" {
	need_fixtures
	for m in ref-a-q4_k_m ref-a-f16 stories260K; do
		run --separate-stderr "$PLAN" --vram-budget 1G --ram-budget 1G --disk-budget 1G \
			--cpu-gbps 10 "$NTX_FIXTURES/models/$m.gguf"
		[ "$status" -eq 0 ]
		echo "$output" > "$D/$m.json"
		[ "$(count_layers "$D/$m.json" ram gpu)" -eq 0 ]
		grep -q '"pack_path": null' "$D/$m.json"
		run "$PLAN" --check "$D/$m.json" "$NTX_FIXTURES/models/$m.gguf"
		[ "$status" -eq 0 ]
	done
	"$GEN" --tied -q -o "$D/tied.gguf"
	"$PLAN" --vram-budget 1G --ram-budget 1G --disk-budget 1G --cpu-gbps 10 "$D/tied.gguf" > "$D/tied.json"
	grep -A4 '"output": {' "$D/tied.json" | grep -q '"tied": true'
	grep -A4 '"output": {' "$D/tied.json" | grep -q '"home": "vram"'
	"$PLAN" --vram-budget 0 --ram-budget 1G --disk-budget 1G --cpu-gbps 10 "$D/tied.gguf" > "$D/tied0.json"
	grep -A4 '"output": {' "$D/tied0.json" | grep -q '"home": "ram"'
}

@test "-o writes the plan to a file; a full stdout fails" {
	need_fixtures
	run "$PLAN" $FIX --vram-budget 0 --ram-budget 1G "$NTX_FIXTURES/models/ref-a-q8_0.gguf" -o "$D/out.json"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	grep -q '"format": "ntx.plan"' "$D/out.json"
	[ -e /dev/full ] || skip "no /dev/full"
	run bash -c "'$PLAN' $FIX --vram-budget 0 --ram-budget 1G '$NTX_FIXTURES/models/ref-a-q8_0.gguf' > /dev/full"
	[ "$status" -eq 1 ]
}

@test "relative model and pack paths resolve against the plan file's directory; '-' is refused clearly" {
	cd "$BATS_TEST_TMPDIR"
	mkdir sub
	cp "$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf" m.gguf
	"$PLAN" m.gguf --vram-budget 0 --ram-budget 8M -c 256 --pack m.ntxp >plan.json
	grep -q '"path": "m.gguf"' plan.json # stored as given
	grep -q '"pack_path": "m.ntxp"' plan.json
	"$NTX_BIN/ntx-pack" -q m.gguf --plan plan.json
	cd sub
	run --separate-stderr "$NTX_BIN/ntx-run" --plan ../plan.json -q -p hi -n 3 --temp 0
	[ "$status" -eq 0 ]
	[ -n "$output" ]
	cd ..
	# -o into another directory: the relative paths given here become absolute
	"$PLAN" m.gguf --vram-budget 0 -o sub/p.json
	grep -q "\"path\": \"$PWD/m.gguf\"" sub/p.json
	# a plan of a GGUF read from stdin has no model file to reopen
	"$NTX_BIN/ntx-inspect" - <m.gguf | "$PLAN" - --vram-budget 0 >stdin.json
	run --separate-stderr "$NTX_BIN/ntx-run" --plan stdin.json -p hi -n 1
	[ "$status" -eq 1 ]
	[ "$stderr" = "ntx-run: stdin.json: the plan names no model file (it was planned from a GGUF on standard input): give the model with -m MODEL.gguf" ]
	run --separate-stderr "$NTX_BIN/ntx-run" --plan stdin.json -m m.gguf -q -p hi -n 1
	[ "$status" -eq 0 ]
}

@test "infeasible because of the --reserve margin: the message names --reserve, not --ctx" {
	M="$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf"
	run --separate-stderr "$PLAN" "$M" --vram-budget 100M
	[ "$status" -eq 3 ]
	[ -z "$output" ]
	[[ "$stderr" == "ntx-plan: does not fit: reserves (margin 512.00 MiB (the --reserve default) + "*"; lower --reserve (the VRAM kept free for the CUDA context and other programs), e.g. --reserve 64M" ]]
	[[ "$stderr" != *"--executor cpu"* ]]
	run --separate-stderr "$PLAN" "$M" --vram-budget 100M --reserve 16M -c 256
	[ "$status" -eq 0 ]
}

@test "neither GGUF nor inspect JSON (random bytes, an empty file): one line saying so, exit 1" {
	T="$BATS_TEST_TMPDIR"
	printf '\273\001\002\003random' >"$T/random.bin"
	: >"$T/empty.bin"
	run --separate-stderr "$PLAN" "$T/random.bin"
	[ "$status" -eq 1 ]
	[ "$stderr" = "ntx-plan: $T/random.bin: not a GGUF file or inspect JSON (starts with bb 01 02 03)" ]
	run --separate-stderr "$PLAN" "$T/empty.bin"
	[ "$status" -eq 1 ]
	[ "$stderr" = "ntx-plan: $T/empty.bin: not a GGUF file or inspect JSON (empty)" ]
	run --separate-stderr "$PLAN" - <"$T/empty.bin"
	[ "$status" -eq 1 ]
	[ "$stderr" = "ntx-plan: <stdin>: not a GGUF file or inspect JSON (empty)" ]
}

@test "--probe -v: the two CPU rates are labelled apart (one token, a batch)" {
	run --separate-stderr "$PLAN" "$D/q4.gguf" --probe -v --vram-budget 0 --ram-budget 64G \
		--disk-budget 500G -o "$BATS_TEST_TMPDIR/p.json"
	[ "$status" -eq 0 ]
	line=$(printf '%s\n' "$stderr" | grep '^ntx-plan: rates: ')
	[[ "$line" == *", CPU "*" GB/s for one token ("*"), CPU "*" GB/s x tokens for 16 tokens at once ("*")" ]]
}

@test "-o to a FIFO (or a device) writes in place: never renamed over" {
	T="$BATS_TEST_TMPDIR"
	mkfifo "$T/fifo"
	timeout 20 cat "$T/fifo" >"$T/got.json" &
	run --separate-stderr "$PLAN" "$D/q4.gguf" $FIX --vram-budget 24G --ram-budget 64G -o "$T/fifo"
	wait
	[ "$status" -eq 0 ]
	[ -p "$T/fifo" ]
	grep -q '"format": "ntx.plan"' "$T/got.json"
	[ -z "$(ls "$T" | grep '\.tmp')" ] # no temporary
}

# A probe cache for this machine (host, CPU model, CPUs as ntx-plan sees
# them) holding only CPU rates: cache_doc HOST CPU_GBPS > FILE
cache_doc() {
	model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
	printf '{"format": "ntx.probe", "version": 1, "host": "%s", "cpu_model": "%s", "cpu_cores": %d, "probed_at": 1764720000, "cpu": {"gbps": %s, "batch_gbps": 123.5, "type_gbps": {}, "type_batch_gbps": {}}, "h2d": null, "disk": null}\n' \
		"$1" "$model" "$(nproc)" "$2"
}

@test "--probe stores its rates in the probe cache; plans without --probe use them" {
	T="$BATS_TEST_TMPDIR"
	export XDG_CACHE_HOME="$T/cache"
	run --separate-stderr "$PLAN" "$D/q4.gguf" --probe -v --vram-budget 0 --ram-budget 64G \
		--disk-budget 500G -o "$T/p.json"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"ntx-plan: probed rates stored in $T/cache/ntx/probe.json"* ]]
	grep -q '"format": "ntx.probe"' "$T/cache/ntx/probe.json"
	grep -q "\"host\": \"$(uname -n)\"" "$T/cache/ntx/probe.json"
	[ -z "$(ls "$T/cache/ntx" | grep -v '^probe.json$')" ] # no temporary left
	probed=$(num "$T/p.json" cpu_gbps)
	# a plan without --probe takes the cached CPU rates, and says so with -v
	run --separate-stderr "$PLAN" "$D/q4.gguf" -v --vram-budget 0 --ram-budget 64G \
		--disk-budget 500G -o "$T/q.json"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"ntx-plan: rates from the probe cache $T/cache/ntx/probe.json (probed "* ]]
	grep -q '"cpu_source": "cache"' "$T/q.json"
	grep -q '"cpu_batch_source": "cache"' "$T/q.json"
	[ "$(num "$T/q.json" cpu_gbps)" = "$probed" ]
	# --no-probe-cache and NTX_PROBE_CACHE=0: the defaults
	run --separate-stderr "$PLAN" "$D/q4.gguf" --no-probe-cache --vram-budget 0 \
		--ram-budget 64G --disk-budget 500G -o "$T/r.json"
	[ "$status" -eq 0 ]
	grep -q '"cpu_source": "default"' "$T/r.json"
	NTX_PROBE_CACHE=0 run --separate-stderr "$PLAN" "$D/q4.gguf" --vram-budget 0 \
		--ram-budget 64G --disk-budget 500G -o "$T/s.json"
	[ "$status" -eq 0 ]
	grep -q '"cpu_source": "default"' "$T/s.json"
	# an option given wins over the cache
	run --separate-stderr "$PLAN" "$D/q4.gguf" --cpu-gbps 7 --vram-budget 0 --ram-budget 64G \
		--disk-budget 500G -o "$T/t.json"
	grep -q '"cpu_source": "override"' "$T/t.json"
}

@test "the probe cache: a matching file is used, another machine's ignored, a corrupt one warned about once" {
	T="$BATS_TEST_TMPDIR"
	export XDG_CACHE_HOME="$T/cache"
	mkdir -p "$T/cache/ntx"
	args=("$D/q4.gguf" --vram-budget 0 --ram-budget 64G --disk-budget 500G)
	cache_doc "$(uname -n)" 12.5 >"$T/cache/ntx/probe.json"
	run --separate-stderr "$PLAN" "${args[@]}" -o "$T/a.json"
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	grep -q '"cpu_gbps": 12.5,' "$T/a.json"
	grep -q '"cpu_source": "cache"' "$T/a.json"
	grep -q '"cpu_batch_gbps": 123.5,' "$T/a.json"
	# written on another host: not used, nothing said
	cache_doc "not-$(uname -n)" 12.5 >"$T/cache/ntx/probe.json"
	run --separate-stderr "$PLAN" "${args[@]}" -o "$T/b.json"
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	grep -q '"cpu_source": "default"' "$T/b.json"
	# corrupt: one warning naming the file and where, the defaults, exit 0
	cache_doc "$(uname -n)" '"fast"' >"$T/cache/ntx/probe.json"
	run --separate-stderr "$PLAN" "${args[@]}" -o "$T/c.json"
	[ "$status" -eq 0 ]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	[[ "$stderr" == "ntx-plan: warning: probe cache ignored (planning with the default rates; --probe rewrites it): $T/cache/ntx/probe.json:1:"*'expected a number for "gbps" (found string)' ]]
	grep -q '"cpu_source": "default"' "$T/c.json"
	cmp "$T/b.json" "$T/c.json"
	printf '\x00\x01garbage' >"$T/cache/ntx/probe.json"
	run --separate-stderr "$PLAN" "${args[@]}" -o "$T/d.json"
	[ "$status" -eq 0 ]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
	[[ "$stderr" == "ntx-plan: warning: probe cache ignored "*"$T/cache/ntx/probe.json"* ]]
	# -q: not even the warning
	run --separate-stderr "$PLAN" "${args[@]}" -q -o "$T/e.json"
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	# a directory where the file should be
	rm "$T/cache/ntx/probe.json"
	mkdir "$T/cache/ntx/probe.json"
	run --separate-stderr "$PLAN" "${args[@]}" -o "$T/f.json"
	[ "$status" -eq 0 ]
	[[ "$stderr" == "ntx-plan: warning: probe cache ignored "*"Is a directory" ]]
}

@test "the plan's estimate gives the pass of K+1 tokens and the pass of 1 (--draft)" {
	T="$BATS_TEST_TMPDIR"
	"$GEN" --shape 1b --mix q4_k_m --vocab-from "$D/q4.gguf" --sparse -q -o "$T/d.gguf"
	run --separate-stderr "$PLAN" "$D/q4.gguf" $FIX --cpu-batch-gbps 380 --vram-budget 24G \
		--ram-budget 100G --draft "$T/d.gguf" --draft-k 7 --explain -o "$T/p.json"
	[ "$status" -eq 0 ]
	[ "$(num "$T/p.json" pass_tokens)" = 8 ]
	one=$(num "$T/p.json" pass_1_ms)
	total=$(num "$T/p.json" total_ms)
	awk -v a="$one" -v b="$total" 'BEGIN { exit !(a > 0 && b >= a) }'
	[[ "$stderr" == *"a pass of 8 tokens: "*" ms; of 1 token: "*" ms"* ]]
	# read back and re-serialized byte for byte
	run --separate-stderr "$PLAN" --check "$T/p.json" -o "$T/c.json"
	[ "$status" -eq 0 ]
	cmp "$T/p.json" "$T/c.json"
}
