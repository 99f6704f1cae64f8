/* gen.h - ntx-gguf-gen internals: synthetic Llama, Mixtral-style (llama with
 * experts) and qwen3moe GGUF files for tests and speed measurements (shapes,
 * llama.cpp's per-tensor type mixes, random well-scaled weights generated in
 * parallel, a synthetic tokenizer). */
#ifndef NTX_GEN_H
#define NTX_GEN_H

#include <stdint.h>

#include "err.h"
#include "gguf_write.h"

/* ---- model description ---- */

enum gen_mix { MIX_F32, MIX_F16, MIX_BF16, MIX_Q8_0, MIX_Q4_0, MIX_Q4_K_M, MIX_Q5_K_M, MIX_Q6_K };

struct gen_override {
	const char *name; /* tensor name */
	uint32_t type;
	int used;
};

/* general.architecture */
enum gen_arch { ARCH_LLAMA, ARCH_QWEN3MOE };

struct gen_model {
	const char *shape; /* preset name */
	enum gen_arch arch;
	int n_layer, n_embd, n_head, n_head_kv, n_ctx;
	int n_ff;          /* FFN width: dense, or of one expert when n_expert > 0 */
	int head_dim;      /* 0: n_embd / n_head */
	int n_expert;      /* 0: dense FFN (llama only) */
	int n_expert_used;
	int64_t n_vocab;
	double rope_base;
	float rms_eps;
	int rope_freqs; /* add rope_freqs.weight (Llama 3.1 scaling) */
	int tied;       /* no output.weight */
	enum gen_mix mix;
	struct gen_override *ovr;
	int n_ovr;
	uint64_t seed;
	int threads;
	uint32_t alignment;
	/* vocabulary: synthetic unless vocab_from is set or no_vocab */
	const char *vocab_from;
	int no_vocab;
};

/* Fill a preset: "tiny", "1b", "8b", "70b", "tiny-moe", "mixtral-8x7b",
 * "tiny-qwen3moe", "qwen3-30b-a3b", "qwen3-235b-a22b". Returns 0 or -1. */
int gen_preset(struct gen_model *m, const char *name);

/* The preset names, separated by sep ("tiny 1b ..."). */
const char *gen_preset_names(char sep);

/* Parse an architecture name ("llama", "qwen3moe"); -1 if unknown. */
int gen_arch_from_name(const char *name);
const char *gen_arch_name(enum gen_arch arch);

/* The head dimension of m (head_dim, else n_embd / n_head). */
int gen_head_dim(const struct gen_model *m);

/* Parse a mix name ("q4_k_m"); -1 if unknown. */
int gen_mix_from_name(const char *name);
const char *gen_mix_name(enum gen_mix mix);

/* The llama.cpp file type (general.file_type) of a mix. */
int gen_mix_file_type(enum gen_mix mix);

/* The type llama.cpp's quantizer would pick for a tensor of this mix (see
 * gen_model.c), before --type-of overrides. layer is -1 for non-layer
 * tensors; ne0 is the row length. */
uint32_t gen_tensor_type(const struct gen_model *m, const char *name, int layer, int64_t ne0,
			 int n_dims);

/* Describe the whole file into w: metadata, tokenizer, tensors with fill
 * callbacks. fill_ctx must live until the write. Returns 0 or -1. */
struct gen_fill;
int gen_describe(struct gen_model *m, struct ntx_gguf_writer *w, struct gen_fill **fill,
		 struct ntx_err *err);

/* ---- tokenizer (gen_vocab.c) ---- */

/* Add the synthetic byte-level BPE tokenizer (model gpt2, tokenizer.ggml.pre
 * pre: "llama-bpe", "qwen2") of n_vocab tokens: 256 byte tokens, merges,
 * fillers, 5 Llama 3 specials at the end. */
int gen_vocab_synthetic(struct ntx_gguf_writer *w, int64_t n_vocab, const char *pre,
			struct ntx_err *err);

/* Smallest n_vocab the synthetic tokenizer accepts. */
#define GEN_VOCAB_MIN (256 + 5)

/* The length of tokenizer.ggml.tokens in the GGUF file at path; and a copy
 * of every tokenizer.* key of that file into w, in its order. */
int gen_vocab_count(const char *path, int64_t *n_tokens, struct ntx_err *err);
int gen_vocab_copy(struct ntx_gguf_writer *w, const char *path, struct ntx_err *err);

/* ---- weights (gen_fill.c) ---- */

/* What one tensor's data looks like. */
enum gen_dist {
	DIST_WEIGHT, /* N(0, 0.02) */
	DIST_NORM,   /* N(1, 0.05) */
	DIST_ROUTER, /* N(0, 0.15): expert router (ffn_gate_inp), as the fixtures */
	DIST_ROPE    /* Llama 3.1 rope_freqs factors */
};

struct gen_tensor {
	uint32_t type;
	enum gen_dist dist;
	uint64_t index; /* in the writer */
};

struct gen_fill {
	uint64_t seed;
	int threads;
	struct gen_tensor *t;
	uint64_t n_t;
	float *rope; /* rope_freqs values */
	int64_t n_rope;
};

/* Can gen_fill_cb produce this type? */
int gen_type_supported(uint32_t type);

/* ntx_gguf_fill_fn: ctx is a struct gen_fill. Deterministic for a seed,
 * whatever the thread count and chunking. */
int gen_fill_cb(void *ctx, uint64_t index, uint64_t offset, void *buf, size_t len,
		struct ntx_err *err);

/* Llama 3.1 rope scaling factors (factor 8, low 1, high 4, original context
 * 8192) for n_rot/2 pairs, computed in float32 as convert_hf_to_gguf does. */
void gen_rope_freqs(double base, int n_rot, float *out);

void gen_fill_free(struct gen_fill *f);

#endif
