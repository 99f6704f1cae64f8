# fixtures.bash - the reference set (llama.cpp outputs and the models they
# came from) lives outside the repository, in $NTX_FIXTURES (tests/run-tests.sh
# sets it to ../shared/fixtures when that exists). Tests that need it call
# need_fixtures first: without the set they are skipped, except under CI=true,
# where a missing set is a failure. Everything else runs on the models shipped
# in models/ and ones made by ntx-gguf-gen.

# have_fixtures: is the reference set there?
have_fixtures() {
	[ -n "${NTX_FIXTURES:-}" ] && [ -d "$NTX_FIXTURES/models" ] &&
		[ -d "$NTX_FIXTURES/tinymodel" ]
}

# need_fixtures: skip this test (fail it under CI=true) without the set.
need_fixtures() {
	have_fixtures && return 0
	if [ "${CI:-}" = true ]; then
		echo "no reference set at '${NTX_FIXTURES:-}' (CI=true: set NTX_FIXTURES)" >&2
		return 1
	fi
	skip "no reference set at '${NTX_FIXTURES:-}' (set NTX_FIXTURES)"
}

# self_contained_models DIR: when the reference set is missing, point S (the
# small SPM model) and Q (the small BPE model) at stand-ins: the shipped
# models/tinymodel-q4_k_m.gguf and a model made by ntx-gguf-gen with its
# vocabulary. Tests that depend on the exact reference models call
# need_fixtures.
self_contained_models() {
	have_fixtures && return 0
	local root="$BATS_TEST_DIRNAME/../.."
	"$NTX_BIN/ntx-gguf-gen" -q --layers 4 --embd 256 --ff 512 --heads 4 --kv-heads 2 \
		--ctx 2048 --mix f32 --vocab-from "$root/models/tinymodel-q4_k_m.gguf" \
		-o "$1/gen-small.gguf" || return 1
	export S="$1/gen-small.gguf"
	export Q="$root/models/tinymodel-q4_k_m.gguf"
	export QF="$Q"
}

# english_text: English text for calibration and perplexity tests: the tiny
# model's eval.txt from the reference set, else the repository's own docs.
english_text() {
	if have_fixtures; then
		cat "$NTX_FIXTURES/tinymodel/eval.txt"
	else
		cat "$BATS_TEST_DIRNAME"/../../README.md "$BATS_TEST_DIRNAME"/../../doc/*.md
	fi
}
