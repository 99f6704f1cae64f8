#!/usr/bin/env bats
# ntx-pack: exit statuses and messages (doc/ntx-pack.1). Every test checks the
# exact status: a crash (status >= 128) never passes as an expected failure.

load fixtures

# M: the model packed (the reference set's tiny F16 model, else the shipped
# Q4_K_M one); OTHER: a different model.
setup() {
	BIN=${NTX_BIN:-$PWD/build/bin}
	FIX=${NTX_FIXTURES:-$PWD/../shared/fixtures}
	M=$FIX/tinymodel/tinymodel-f16.gguf
	OTHER=$FIX/models/ref-a-f16.gguf
	T=$BATS_TEST_TMPDIR
	RB=22M RB2=20M # RAM budgets: about 10, then 11 of 16 layers on disk
	[ -x "$BIN/ntx-pack" ] || { echo "no $BIN/ntx-pack (make first)" >&2; return 1; }
	if ! have_fixtures; then
		M=$BATS_TEST_DIRNAME/../../models/tinymodel-q4_k_m.gguf
		OTHER=$T/other.gguf
		RB=8M RB2=7M
		"$BIN/ntx-gguf-gen" -q --mix f16 -o "$OTHER"
	fi
}

# A plan with the last layers (about 10 of 16) on disk.
plan() {
	"$BIN/ntx-plan" "$M" --vram-budget 0 --ram-budget $RB -c 256 --pack "$T/m.ntxp" -o "$T/plan.json"
}

no_temps() {
	! ls "$T" | grep -q '\.tmp\.'
}

@test "ntx-pack -h prints usage on stdout, exit 0" {
	run "$BIN/ntx-pack" -h
	[ "$status" -eq 0 ]
	[[ "$output" == *"usage: ntx-pack MODEL.gguf"* ]]
	[[ "$output" == *"Exit status"* ]]
}

@test "ntx-pack -V prints the version" {
	run "$BIN/ntx-pack" -V
	[ "$status" -eq 0 ]
	[[ "$output" == "ntx-pack (ntx) "* ]]
}

@test "bad option: usage on stderr, exit 2" {
	run "$BIN/ntx-pack" --bogus
	[ "$status" -eq 2 ]
	[[ "$output" == *"usage:"* ]]
}

@test "missing model: exit 2" {
	run "$BIN/ntx-pack" --all
	[ "$status" -eq 2 ]
	[[ "$output" == *"missing MODEL.gguf"* ]]
}

@test "neither --plan nor --all: exit 2" {
	run "$BIN/ntx-pack" "$M" -o "$T/x.ntxp"
	[ "$status" -eq 2 ]
	[[ "$output" == *"need --plan"* ]]
	[ ! -e "$T/x.ntxp" ]
}

@test "bad --compress, --level, --threads, --frame-size: exit 2" {
	run "$BIN/ntx-pack" "$M" --all -o "$T/x.ntxp" --compress lz4
	[ "$status" -eq 2 ]
	[[ "$output" == *"'lz4' is not none, zstd or auto"* ]]
	run "$BIN/ntx-pack" "$M" --all -o "$T/x.ntxp" --level 99
	[ "$status" -eq 2 ]
	run "$BIN/ntx-pack" "$M" --all -o "$T/x.ntxp" --threads 0
	[ "$status" -eq 2 ]
	run "$BIN/ntx-pack" "$M" --all -o "$T/x.ntxp" --frame-size 1000
	[ "$status" -eq 2 ]
	run "$BIN/ntx-pack" "$M" --all -o "$T/x.ntxp" extra
	[ "$status" -eq 2 ]
	[ ! -e "$T/x.ntxp" ]
}

@test "output to stdout refused: exit 2" {
	run "$BIN/ntx-pack" "$M" --all -o -
	[ "$status" -eq 2 ]
}

@test "missing plan file: exit 1 naming it" {
	run "$BIN/ntx-pack" "$M" --plan "$T/nope.json" -o "$T/x.ntxp"
	[ "$status" -eq 1 ]
	[[ "$output" == "ntx-pack: $T/nope.json: "* ]]
	[ ! -e "$T/x.ntxp" ]
}

@test "missing model file: exit 1" {
	run "$BIN/ntx-pack" "$T/nope.gguf" --all -o "$T/x.ntxp"
	[ "$status" -eq 1 ]
	[[ "$output" == *"nope.gguf: No such file or directory"* ]]
}

@test "plan made for another model: exit 1, no output, no temporary" {
	plan
	run "$BIN/ntx-pack" "$OTHER" --plan "$T/plan.json" -o "$T/x.ntxp"
	[ "$status" -eq 1 ]
	[[ "$output" == *"the plan was made for another model"* ]]
	[ ! -e "$T/x.ntxp" ]
	no_temps
}

@test "plan with no disk layer: exit 1, nothing to pack" {
	"$BIN/ntx-plan" "$M" --vram-budget 0 -o "$T/ram.json"
	run "$BIN/ntx-pack" "$M" --plan "$T/ram.json" -o "$T/x.ntxp"
	[ "$status" -eq 1 ]
	[[ "$output" == *"nothing to pack"* ]]
	[ ! -e "$T/x.ntxp" ]
}

@test "pack with a plan (output = the plan's pack_path), then --verify: exit 0" {
	plan
	n=$(grep -c '"home": "disk"' "$T/plan.json")
	[ "$n" -gt 2 ]
	run "$BIN/ntx-pack" "$M" --plan "$T/plan.json"
	[ "$status" -eq 0 ]
	[[ "$output" == *"$T/m.ntxp: $n layers"* ]]
	[ -f "$T/m.ntxp" ]
	no_temps
	run "$BIN/ntx-pack" --verify "$T/m.ntxp" -m "$M" --plan "$T/plan.json"
	[ "$status" -eq 0 ]
	[[ "$output" == *"OK: $n extents"* ]]
	run "$BIN/ntx-pack" -q --verify "$T/m.ntxp" -m "$M"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "--all --verify, each compression mode: exit 0" {
	for c in none zstd auto; do
		run "$BIN/ntx-pack" "$M" --all --compress $c -o "$T/$c.ntxp" --verify
		[ "$status" -eq 0 ]
		[[ "$output" == *"16 layers"* ]]
		[[ "$output" == *"OK: 16 extents"* ]]
	done
	# F16 layers compress: the zstd pack is smaller
	[ "$(stat -c %s "$T/zstd.ntxp")" -lt "$(stat -c %s "$T/none.ntxp")" ]
	# -q: nothing at all on stdout or stderr
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/q.ntxp"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}

@test "--verify of a pack with one corrupted extent byte: exit 1 naming the layer" {
	run "$BIN/ntx-pack" -q "$M" --all --compress none -o "$T/c.ntxp"
	[ "$status" -eq 0 ]
	# a byte in the middle of the file (inside an extent, not padding)
	off=$(( $(stat -c %s "$T/c.ntxp") / 2 + 100 ))
	printf '\x5a' | dd of="$T/c.ntxp" bs=1 seek=$off conv=notrunc status=none
	run "$BIN/ntx-pack" --verify "$T/c.ntxp" -m "$M"
	[ "$status" -eq 1 ]
	[[ "$output" == *"layer "*"checksum mismatch"*"corrupted"* ]]
}

@test "--verify of a pack with a corrupted header byte: exit 1" {
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/h.ntxp"
	printf '\x07' | dd of="$T/h.ntxp" bs=1 seek=30 conv=notrunc status=none
	run "$BIN/ntx-pack" --verify "$T/h.ntxp" -m "$M"
	[ "$status" -eq 1 ]
	[[ "$output" == *"pack header checksum mismatch"* ]]
}

@test "--verify of a truncated pack: exit 1, truncated" {
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/t.ntxp"
	truncate -s -5000 "$T/t.ntxp"
	run "$BIN/ntx-pack" --verify "$T/t.ntxp" -m "$M"
	[ "$status" -eq 1 ]
	[[ "$output" == *"pack file truncated"* ]]
}

@test "--verify against another model: exit 1" {
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/a.ntxp"
	run "$BIN/ntx-pack" --verify "$T/a.ntxp" -m "$OTHER"
	[ "$status" -eq 1 ]
	[[ "$output" == *"the pack was made from another model"* ]]
}

@test "--verify against a plan with a layer the pack lacks: exit 1" {
	plan
	run "$BIN/ntx-pack" -q "$M" --plan "$T/plan.json" -o "$T/p.ntxp"
	"$BIN/ntx-plan" "$M" --vram-budget 0 --ram-budget $RB2 -c 256 --pack "$T/p.ntxp" -o "$T/plan2.json"
	run "$BIN/ntx-pack" --verify "$T/p.ntxp" -m "$M" --plan "$T/plan2.json"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is on disk in the plan but not in the pack"* ]]
}

@test "--verify PACK needs -m: exit 2" {
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/a.ntxp"
	run "$BIN/ntx-pack" --verify "$T/a.ntxp"
	[ "$status" -eq 2 ]
}

@test "injected read error (NTX_FAULT_READ) during --verify: exit 1, no hang" {
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/f.ntxp"
	NTX_FAULT_READ=3 run timeout 60 "$BIN/ntx-pack" --verify "$T/f.ntxp" -m "$M"
	[ "$status" -eq 1 ]
	[[ "$output" == *"Input/output error"* ]]
}

@test "not a pack and not a model: exit 1" {
	printf 'hello' >"$T/junk"
	run "$BIN/ntx-pack" --verify "$T/junk" -m "$M"
	[ "$status" -eq 1 ]
	[[ "$output" == *"junk: not a pack file"* ]]
}

@test "refuses to overwrite the model itself" {
	cp "$M" "$T/m.gguf"
	run "$BIN/ntx-pack" "$T/m.gguf" --all -o "$T/m.gguf"
	[ "$status" -eq 1 ]
	[[ "$output" == *"refusing to overwrite the model"* ]]
	cmp -s "$M" "$T/m.gguf"
}

@test "output directory missing: exit 1, nothing left" {
	run "$BIN/ntx-pack" "$M" --all -o "$T/no/such/dir/x.ntxp"
	[ "$status" -eq 1 ]
	[[ "$output" == *"No such file or directory"* ]]
}

@test "an existing output is replaced only when the new pack is complete" {
	printf 'old' >"$T/r.ntxp"
	run "$BIN/ntx-pack" "$OTHER" --plan /nonexistent.json -o "$T/r.ntxp"
	[ "$status" -eq 1 ]
	[ "$(cat "$T/r.ntxp")" = old ]
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/r.ntxp"
	[ "$status" -eq 0 ]
	[ "$(stat -c %s "$T/r.ntxp")" -gt 1000000 ]
}

# M = a model that zstd level 19 on one thread takes seconds to pack (without
# the reference set: an F16 model made for it, the shipped one is too small)
slow_model() {
	if ! have_fixtures; then
		"$BIN/ntx-gguf-gen" -q --layers 8 --embd 512 --ff 1536 --mix f16 -o "$T/slow.gguf"
		M=$T/slow.gguf
	fi
}

@test "Ctrl-C (SIGINT) while writing: dies of the signal, no output, no temporary" {
	slow_model
	run timeout -s INT 0.7 "$BIN/ntx-pack" "$M" --all --compress zstd --level 19 \
		--threads 1 -o "$T/int.ntxp"
	[ "$status" -eq 124 ]
	[[ "$output" == *"interrupted"* ]]
	[ ! -e "$T/int.ntxp" ]
	no_temps
	run timeout --preserve-status -s INT 0.7 "$BIN/ntx-pack" "$M" --all --compress zstd \
		--level 19 --threads 1 -o "$T/int.ntxp"
	[ "$status" -eq 130 ]
	[ ! -e "$T/int.ntxp" ]
	no_temps
}

@test "SIGTERM while writing: no output, no temporary" {
	slow_model
	run timeout --preserve-status -s TERM 0.7 "$BIN/ntx-pack" "$M" --all --compress zstd \
		--level 19 --threads 1 -o "$T/term.ntxp"
	[ "$status" -eq 143 ]
	[ ! -e "$T/term.ntxp" ]
	no_temps
}

@test "ntx-inspect on a pack: an ntx.inspect document of kind pack" {
	need_fixtures # the zstd extents of the F16 model
	[ -x "$BIN/ntx-inspect" ] || skip "ntx-inspect not built"
	plan
	run "$BIN/ntx-pack" -q "$M" --plan "$T/plan.json"
	[ "$status" -eq 0 ]
	n=$(grep -c '"home": "disk"' "$T/plan.json")
	run "$BIN/ntx-inspect" "$T/m.ntxp"
	[ "$status" -eq 0 ]
	[[ "$output" == *'"format": "ntx.inspect"'* ]]
	[[ "$output" == *'"kind": "pack"'* ]]
	[[ "$output" == *"\"n_extents\": $n,"* ]]
	[ "$(printf '%s\n' "$output" | grep -c '"compression": "zstd"')" -eq "$n" ]
	[[ "$output" == *'"name": "blk.15.ffn_down.weight"'* ]]
	# from standard input, and as a table
	run sh -c "'$BIN/ntx-inspect' - < '$T/m.ntxp'"
	[ "$status" -eq 0 ]
	[[ "$output" == *'"kind": "pack"'* ]]
	run "$BIN/ntx-inspect" -f table "$T/m.ntxp"
	[ "$status" -eq 0 ]
	[[ "$output" == *"extents      $n:"* ]]
	[[ "$output" == *"layer 15"*"zstd+split2"* ]]
	# --full adds the frame tables
	run "$BIN/ntx-inspect" --full "$T/m.ntxp"
	[[ "$output" == *'"frames": ['* ]]
}

@test "ntx-inspect on a corrupted pack: exit 1" {
	[ -x "$BIN/ntx-inspect" ] || skip "ntx-inspect not built"
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/i.ntxp"
	printf '\x07' | dd of="$T/i.ntxp" bs=1 seek=200 conv=notrunc status=none
	run "$BIN/ntx-inspect" "$T/i.ntxp"
	[ "$status" -eq 1 ]
	[[ "$output" == "ntx-inspect: $T/i.ntxp: pack directory checksum mismatch"* ]]
}

@test "--verify of a missing pack names the file (not --plan): exit 1" {
	run "$BIN/ntx-pack" --verify "$T/missing.ntxp"
	[ "$status" -eq 1 ]
	[ "$output" = "ntx-pack: $T/missing.ntxp: No such file or directory" ]
}

@test "-o naming a device or a FIFO: refused (a pack is renamed into place), exit 1" {
	mkfifo "$T/fifo"
	run "$BIN/ntx-pack" -q "$M" --all -o "$T/fifo"
	[ "$status" -eq 1 ]
	[ "$output" = "ntx-pack: $T/fifo: not a regular file (a pack is written under a temporary name and renamed over it)" ]
	[ -p "$T/fifo" ]
	no_temps
}
