/* gen_model.c - shapes, per-tensor type mixes and the file description of
 * synthetic models: dense Llama, Mixtral-style (llama with experts) and
 * qwen3moe.
 *
 * The K_M mixes follow llama.cpp's llama_tensor_get_type (src/llama-quant.cpp)
 * without imatrix:
 *   - 1-D tensors (norms, rope_freqs) stay F32, and so does every expert
 *     router (ffn_gate_inp: never quantized, and the converter writes it F32);
 *   - output.weight (and token_embd.weight when the output is tied) becomes
 *     Q6_K for every quantized mix except Q8_0 (which keeps Q8_0), or Q8_0
 *     when its rows are not a multiple of the mix type's block;
 *   - Q4_K_M / Q5_K_M: attn_v and ffn_down (ffn_down_exps) get Q6_K in the
 *     layers where use_more_bits(i, n) = i < n/8 || i >= 7n/8 ||
 *     (i - n/8) % 3 == 2; a 70B llama (80 layers, GQA, not 8 experts) gets
 *     Q5_K instead of Q4_K for the other attn_v tensors;
 *   - exactly 8 experts (Mixtral): attn_k and attn_v become Q8_0 in every
 *     quantized mix, attn_output Q5_K in Q4_K_M;
 *   - rows that are not a whole number of blocks fall back as llama.cpp does
 *     (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16); Q4_0 and Q8_0,
 *     for which llama.cpp stops with an error, fall back to F16 here.
 * Checked against models/tensor_types.json (set A, 2 layers), the 16-layer
 * tinymodel-q4_k_m.gguf and moe/tensor_types.json (mixtral-tiny and
 * qwen3moe-tiny, F16, Q8_0, Q4_K_M) of the fixtures. */
#include "gen.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model.h"
#include "types.h"

static const struct {
	const char *name;
	enum gen_arch arch;
	int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_expert, n_expert_used, n_ctx;
	int64_t n_vocab;
	double rope_base;
	float rms_eps;
} presets[] = {
	/* dense Llama: n_ff is the FFN width */
	{ "tiny", ARCH_LLAMA, 2, 256, 768, 4, 2, 0, 0, 0, 2048, 512, 10000.0, 1e-5f },
	{ "1b", ARCH_LLAMA, 16, 2048, 8192, 32, 8, 0, 0, 0, 2048, 32000, 10000.0, 1e-5f },
	{ "8b", ARCH_LLAMA, 32, 4096, 14336, 32, 8, 0, 0, 0, 131072, 128256, 500000.0, 1e-5f },
	{ "70b", ARCH_LLAMA, 80, 8192, 28672, 64, 8, 0, 0, 0, 131072, 128256, 500000.0, 1e-5f },
	/* mixtures of experts: n_ff is the width of one expert */
	{ "tiny-moe", ARCH_LLAMA, 2, 256, 256, 4, 2, 0, 8, 2, 2048, 512, 1e6, 1e-5f },
	{ "mixtral-8x7b", ARCH_LLAMA, 32, 4096, 14336, 32, 8, 0, 8, 2, 32768, 32000, 1e6, 1e-5f },
	{ "tiny-qwen3moe", ARCH_QWEN3MOE, 2, 256, 128, 4, 2, 128, 16, 4, 2048, 512, 1e6, 1e-6f },
	{ "qwen3-30b-a3b", ARCH_QWEN3MOE, 48, 2048, 768, 32, 4, 128, 128, 8, 40960, 151936, 1e6,
	  1e-6f },
	{ "qwen3-235b-a22b", ARCH_QWEN3MOE, 94, 4096, 1536, 64, 4, 128, 128, 8, 40960, 151936, 1e6,
	  1e-6f },
};

int gen_preset(struct gen_model *m, const char *name)
{
	size_t i;

	for (i = 0; i < sizeof presets / sizeof presets[0]; i++) {
		if (strcasecmp(presets[i].name, name) == 0) {
			m->shape = presets[i].name;
			m->arch = presets[i].arch;
			m->n_layer = presets[i].n_layer;
			m->n_embd = presets[i].n_embd;
			m->n_ff = presets[i].n_ff;
			m->n_head = presets[i].n_head;
			m->n_head_kv = presets[i].n_head_kv;
			m->head_dim = presets[i].head_dim;
			m->n_expert = presets[i].n_expert;
			m->n_expert_used = presets[i].n_expert_used;
			m->n_ctx = presets[i].n_ctx;
			m->n_vocab = presets[i].n_vocab;
			m->rope_base = presets[i].rope_base;
			m->rms_eps = presets[i].rms_eps;
			return 0;
		}
	}
	return -1;
}

const char *gen_preset_names(char sep)
{
	static char buf[256];
	size_t i, n = 0;

	for (i = 0; i < sizeof presets / sizeof presets[0]; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? (char[2]){ sep, 0 } : "",
				      presets[i].name);
	return buf;
}

static const char *const arch_names[] = { [ARCH_LLAMA] = "llama", [ARCH_QWEN3MOE] = "qwen3moe" };

int gen_arch_from_name(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof arch_names / sizeof arch_names[0]; i++) {
		if (strcmp(arch_names[i], name) == 0)
			return (int)i;
	}
	return -1;
}

const char *gen_arch_name(enum gen_arch arch)
{
	return arch_names[arch];
}

int gen_head_dim(const struct gen_model *m)
{
	return m->head_dim > 0 ? m->head_dim : m->n_embd / m->n_head;
}

static const struct {
	const char *name;
	uint32_t type;   /* default weight type */
	int file_type;   /* llama.cpp LLAMA_FTYPE_* */
} mixes[] = {
	[MIX_F32] = { "f32", NTX_TYPE_F32, 0 },
	[MIX_F16] = { "f16", NTX_TYPE_F16, 1 },
	[MIX_BF16] = { "bf16", NTX_TYPE_BF16, 32 },
	[MIX_Q8_0] = { "q8_0", NTX_TYPE_Q8_0, 7 },
	[MIX_Q4_0] = { "q4_0", NTX_TYPE_Q4_0, 2 },
	[MIX_Q4_K_M] = { "q4_k_m", NTX_TYPE_Q4_K, 15 },
	[MIX_Q5_K_M] = { "q5_k_m", NTX_TYPE_Q5_K, 17 },
	[MIX_Q6_K] = { "q6_k", NTX_TYPE_Q6_K, 18 },
};

int gen_mix_from_name(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof mixes / sizeof mixes[0]; i++) {
		if (strcasecmp(mixes[i].name, name) == 0)
			return (int)i;
	}
	return -1;
}

const char *gen_mix_name(enum gen_mix mix)
{
	return mixes[mix].name;
}

int gen_mix_file_type(enum gen_mix mix)
{
	return mixes[mix].file_type;
}

static int is_quantized(uint32_t t)
{
	return ntx_type_get(t)->block_size > 1;
}

static int use_more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

uint32_t gen_tensor_type(const struct gen_model *m, const char *name, int layer, int64_t ne0,
			 int n_dims)
{
	uint32_t t = mixes[m->mix].type;
	int km = m->mix == MIX_Q4_K_M || m->mix == MIX_Q5_K_M;

	if (n_dims < 2 || ends_with(name, ".ffn_gate_inp.weight"))
		return NTX_TYPE_F32;
	if (!is_quantized(t))
		return t;
	if (strcmp(name, "output.weight") == 0 || (m->tied && strcmp(name, "token_embd.weight") == 0)) {
		if (ne0 % ntx_type_get(t)->block_size)
			t = NTX_TYPE_Q8_0;
		else if (t != NTX_TYPE_Q8_0)
			t = NTX_TYPE_Q6_K;
	} else if (layer >= 0 && ends_with(name, ".attn_v.weight")) {
		if (km && use_more_bits(layer, m->n_layer))
			t = NTX_TYPE_Q6_K;
		/* llama.cpp's LLM_TYPE_70B: a llama of 80 layers and grouped KV
		 * heads (with 8 experts llama.cpp names no 70B type) */
		if (m->arch == ARCH_LLAMA && m->n_expert != 8 && m->n_layer == 80 &&
		    m->n_head != m->n_head_kv && (t == NTX_TYPE_Q3_K || t == NTX_TYPE_Q4_K))
			t = NTX_TYPE_Q5_K;
		if (m->n_expert == 8)
			t = NTX_TYPE_Q8_0;
	} else if (layer >= 0 && ends_with(name, ".attn_k.weight")) {
		if (m->n_expert == 8)
			t = NTX_TYPE_Q8_0;
	} else if (layer >= 0 && ends_with(name, ".attn_output.weight")) {
		if (m->n_expert == 8 && m->mix == MIX_Q4_K_M)
			t = NTX_TYPE_Q5_K;
	} else if (layer >= 0 && (ends_with(name, ".ffn_down.weight") ||
				  ends_with(name, ".ffn_down_exps.weight"))) {
		if (km && use_more_bits(layer, m->n_layer))
			t = NTX_TYPE_Q6_K;
	}
	if (ne0 % ntx_type_get(t)->block_size) {
		switch (t) {
		case NTX_TYPE_Q4_K: t = NTX_TYPE_Q5_0; break;
		case NTX_TYPE_Q5_K: t = NTX_TYPE_Q5_1; break;
		case NTX_TYPE_Q6_K: t = NTX_TYPE_Q8_0; break;
		default: t = NTX_TYPE_F16; break;
		}
		if (ne0 % ntx_type_get(t)->block_size)
			t = NTX_TYPE_F16;
	}
	return t;
}

/* ---- description ---- */

static int add_meta(const struct gen_model *m, struct ntx_gguf_writer *w, struct ntx_err *err)
{
	const char *a = gen_arch_name(m->arch);
	char name[96], key[96];
	int hd = gen_head_dim(m), qwen = m->arch == ARCH_QWEN3MOE;
	/* qwen3moe: feed_forward_length is the dense width of the HF config
	 * (intermediate_size), which no tensor uses; llama.cpp's fallback for
	 * the expert width is n_ff / n_expert_used, so write that product */
	int ff_key = qwen ? m->n_ff * m->n_expert_used : m->n_ff;

#define K(s) (snprintf(key, sizeof key, "%s.%s", a, s), key)
	snprintf(name, sizeof name, "ntx-synthetic-%s-%s", m->shape ? m->shape : "custom",
		 gen_mix_name(m->mix));
	if (ntx_gguf_writer_add_str(w, "general.architecture", a, err) ||
	    ntx_gguf_writer_add_str(w, "general.name", name, err) ||
	    (m->alignment && ntx_gguf_writer_set_alignment(w, m->alignment, err)) ||
	    ntx_gguf_writer_add_u32(w, K("block_count"), (uint32_t)m->n_layer, err) ||
	    ntx_gguf_writer_add_u32(w, K("context_length"), (uint32_t)m->n_ctx, err) ||
	    ntx_gguf_writer_add_u32(w, K("embedding_length"), (uint32_t)m->n_embd, err) ||
	    ntx_gguf_writer_add_u32(w, K("feed_forward_length"), (uint32_t)ff_key, err) ||
	    ntx_gguf_writer_add_u32(w, K("attention.head_count"), (uint32_t)m->n_head, err) ||
	    ntx_gguf_writer_add_u32(w, K("attention.head_count_kv"), (uint32_t)m->n_head_kv, err))
		return -1;
	/* the head dimension: qwen3moe always says it; llama when it is not
	 * n_embd / n_head */
	if ((qwen || hd * m->n_head != m->n_embd) &&
	    (ntx_gguf_writer_add_u32(w, K("attention.key_length"), (uint32_t)hd, err) ||
	     ntx_gguf_writer_add_u32(w, K("attention.value_length"), (uint32_t)hd, err)))
		return -1;
	if (ntx_gguf_writer_add_f32(w, K("rope.freq_base"), (float)m->rope_base, err) ||
	    ntx_gguf_writer_add_f32(w, K("attention.layer_norm_rms_epsilon"), m->rms_eps, err))
		return -1;
	if (m->n_expert > 0 &&
	    (ntx_gguf_writer_add_u32(w, K("expert_count"), (uint32_t)m->n_expert, err) ||
	     ntx_gguf_writer_add_u32(w, K("expert_used_count"), (uint32_t)m->n_expert_used, err) ||
	     (qwen && ntx_gguf_writer_add_u32(w, K("expert_feed_forward_length"),
					      (uint32_t)m->n_ff, err))))
		return -1;
	if (ntx_gguf_writer_add_u32(w, "general.file_type", (uint32_t)gen_mix_file_type(m->mix), err) ||
	    ntx_gguf_writer_add_u32(w, K("vocab_size"), (uint32_t)m->n_vocab, err) ||
	    (!qwen && ntx_gguf_writer_add_u32(w, K("rope.dimension_count"), (uint32_t)hd, err)))
		return -1;
#undef K
	if (m->vocab_from) {
		if (gen_vocab_copy(w, m->vocab_from, err)) {
			ntx_err_prefix(err, "%s", m->vocab_from);
			return -1;
		}
	} else if (!m->no_vocab &&
		   gen_vocab_synthetic(w, m->n_vocab, qwen ? "qwen2" : "llama-bpe", err)) {
		return -1;
	}
	if (is_quantized(mixes[m->mix].type) &&
	    ntx_gguf_writer_add_u32(w, "general.quantization_version", 2, err))
		return -1;
	return 0;
}

/* Add tensor name of ggml shape [a, b, c] (b == 1: 1-D; c == 1: 2-D). */
static int add_one(struct gen_model *m, struct ntx_gguf_writer *w, struct gen_fill *f,
		   const char *name, int layer, int64_t a, int64_t b, int64_t c, enum gen_dist dist,
		   struct ntx_err *err)
{
	int64_t ne[3] = { a, b, c };
	int n_dims = c > 1 ? 3 : b == 1 ? 1 : 2, i;
	uint32_t t = gen_tensor_type(m, name, layer, a, n_dims);
	int64_t idx;

	for (i = 0; i < m->n_ovr; i++) {
		if (strcmp(m->ovr[i].name, name) == 0) {
			t = m->ovr[i].type;
			m->ovr[i].used = 1;
		}
	}
	if (!gen_type_supported(t))
		return ntx_err_set(err, NTX_EINVAL, "tensor '%s': cannot generate type %s", name,
				   ntx_type_name(t));
	if (dist == DIST_ROPE && t != NTX_TYPE_F32)
		return ntx_err_set(err, NTX_EINVAL, "tensor '%s' must be F32", name);
	idx = ntx_gguf_writer_add_tensor_fill(w, name, t, (uint32_t)n_dims, ne, gen_fill_cb, f, err);
	if (idx < 0)
		return -1;
	f->t[f->n_t].type = t;
	f->t[f->n_t].dist = dist;
	f->t[f->n_t].index = (uint64_t)idx;
	f->n_t++;
	return 0;
}

/* the most tensors of a layer (qwen3moe: 12) */
#define GEN_LAYER_NT 12

/* The tensors of layer l in the order llama.cpp's converters write them:
 * dense Llama: attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
 * ffn_gate, ffn_up, ffn_down; with experts attn_q_norm and attn_k_norm
 * (qwen3moe) follow attn_v, and the FFN is ffn_gate_inp (the router),
 * ffn_gate_exps, ffn_up_exps, ffn_down_exps (3-D: one matrix per expert). */
static int add_layer(struct gen_model *m, struct ntx_gguf_writer *w, struct gen_fill *f, int l,
		     struct ntx_err *err)
{
	enum { EMBD, Q, KV, FF, HD, NEXP, ONE };
	static const struct {
		const char *suffix;
		int a, b, c;
		enum gen_dist dist;
		int when; /* 0 always, 1 dense, 2 experts, 3 q/k norms */
	} lt[] = {
		{ "attn_norm", EMBD, ONE, ONE, DIST_NORM, 0 },
		{ "attn_q", EMBD, Q, ONE, DIST_WEIGHT, 0 },
		{ "attn_k", EMBD, KV, ONE, DIST_WEIGHT, 0 },
		{ "attn_v", EMBD, KV, ONE, DIST_WEIGHT, 0 },
		{ "attn_q_norm", HD, ONE, ONE, DIST_NORM, 3 },
		{ "attn_k_norm", HD, ONE, ONE, DIST_NORM, 3 },
		{ "attn_output", Q, EMBD, ONE, DIST_WEIGHT, 0 },
		{ "ffn_norm", EMBD, ONE, ONE, DIST_NORM, 0 },
		{ "ffn_gate", EMBD, FF, ONE, DIST_WEIGHT, 1 },
		{ "ffn_up", EMBD, FF, ONE, DIST_WEIGHT, 1 },
		{ "ffn_down", FF, EMBD, ONE, DIST_WEIGHT, 1 },
		{ "ffn_gate_inp", EMBD, NEXP, ONE, DIST_ROUTER, 2 },
		{ "ffn_gate_exps", EMBD, FF, NEXP, DIST_WEIGHT, 2 },
		{ "ffn_up_exps", EMBD, FF, NEXP, DIST_WEIGHT, 2 },
		{ "ffn_down_exps", FF, EMBD, NEXP, DIST_WEIGHT, 2 },
	};
	int hd = gen_head_dim(m), moe = m->n_expert > 0, k;
	int64_t dim[] = { m->n_embd, (int64_t)m->n_head * hd, (int64_t)m->n_head_kv * hd, m->n_ff,
			  hd, m->n_expert, 1 };
	char name[96];

	for (k = 0; k < (int)(sizeof lt / sizeof lt[0]); k++) {
		if ((lt[k].when == 1 && moe) || (lt[k].when == 2 && !moe) ||
		    (lt[k].when == 3 && m->arch != ARCH_QWEN3MOE))
			continue;
		snprintf(name, sizeof name, "blk.%d.%s.weight", l, lt[k].suffix);
		if (add_one(m, w, f, name, l, dim[lt[k].a], dim[lt[k].b], dim[lt[k].c], lt[k].dist,
			    err))
			return -1;
	}
	return 0;
}

int gen_describe(struct gen_model *m, struct ntx_gguf_writer *w, struct gen_fill **fillp,
		 struct ntx_err *err)
{
	struct gen_fill *f = calloc(1, sizeof *f);
	int hd = gen_head_dim(m), l, i;

	*fillp = f;
	if (!f)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	f->seed = m->seed;
	f->threads = m->threads;
	f->t = calloc((size_t)m->n_layer * GEN_LAYER_NT + 4, sizeof *f->t);
	if (!f->t)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (add_meta(m, w, err) ||
	    add_one(m, w, f, "token_embd.weight", -1, m->n_embd, m->n_vocab, 1, DIST_WEIGHT, err))
		return -1;
	if (m->rope_freqs) {
		f->n_rope = hd / 2;
		f->rope = calloc((size_t)(f->n_rope ? f->n_rope : 1), sizeof *f->rope);
		if (!f->rope)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		gen_rope_freqs(m->rope_base, hd, f->rope);
		if (add_one(m, w, f, "rope_freqs.weight", -1, hd / 2, 1, 1, DIST_ROPE, err))
			return -1;
	}
	for (l = 0; l < m->n_layer; l++) {
		if (add_layer(m, w, f, l, err))
			return -1;
	}
	if (add_one(m, w, f, "output_norm.weight", -1, m->n_embd, 1, 1, DIST_NORM, err) ||
	    (!m->tied &&
	     add_one(m, w, f, "output.weight", -1, m->n_embd, m->n_vocab, 1, DIST_WEIGHT, err)))
		return -1;
	for (i = 0; i < m->n_ovr; i++) {
		if (!m->ovr[i].used)
			return ntx_err_set(err, NTX_EINVAL, "--type-of: no tensor named '%s'",
					   m->ovr[i].name);
	}
	return 0;
}
