#!/usr/bin/env bats
# scripts/demo (the README's main job, `make demo`): inspect -> plan -> pack
# -> run on the model shipped in models/, with budgets that put layers in
# every tier. Run here on whatever machine the tests run on (CI: the CPU).

setup() {
	cd "$BATS_TEST_DIRNAME/../.."
	export NTX_DEMO_DIR="$BATS_TEST_TMPDIR/demo"
}

@test "the demo runs the whole pipeline with layers in VRAM, RAM and on disk" {
	run --separate-stderr env BUILD="$(dirname "$NTX_BIN")" scripts/demo
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"layers vram/"* ]]
	[[ "$stderr" == *"layers ram/"* ]]
	[[ "$stderr" == *"layers disk/"* ]]
	[[ "$stderr" == *"generated 64 tokens"* ]]
	[ -s "$NTX_DEMO_DIR/tinymodel.ntxp" ]
	[ -n "$output" ]
}
