/* gen_model.c - shapes, per-tensor type mixes and the file description of
 * synthetic Llama models.
 *
 * The K_M mixes follow llama.cpp's llama_tensor_get_type (src/llama-quant.cpp)
 * for a Llama model without imatrix:
 *   - 1-D tensors (norms, rope_freqs) stay F32;
 *   - output.weight (and token_embd.weight when the output is tied) becomes
 *     Q6_K for every quantized mix except Q8_0 (which keeps Q8_0), or Q8_0
 *     when its rows are not a multiple of the mix type's block;
 *   - Q4_K_M / Q5_K_M: attn_v and ffn_down get Q6_K in the layers where
 *     use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2;
 *     a 70B model (80 layers, GQA) gets Q5_K instead of Q4_K for the other
 *     attn_v tensors;
 *   - rows that are not a whole number of blocks fall back as llama.cpp does
 *     (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16); Q4_0, Q5_0 and
 *     Q8_0, for which llama.cpp stops with an error, fall back to F16 here.
 * Checked against models/tensor_types.json of the fixtures (2 layers) and
 * the 16-layer tinymodel-q4_k_m.gguf. */
#include "gen.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model.h"
#include "types.h"

static const struct {
	const char *name;
	int n_layer, n_embd, n_ff, n_head, n_head_kv, n_ctx;
	int64_t n_vocab;
	double rope_base;
} presets[] = {
	{ "tiny", 2, 256, 768, 4, 2, 2048, 512, 10000.0 },
	{ "1b", 16, 2048, 8192, 32, 8, 2048, 32000, 10000.0 },
	{ "8b", 32, 4096, 14336, 32, 8, 131072, 128256, 500000.0 },
	{ "70b", 80, 8192, 28672, 64, 8, 131072, 128256, 500000.0 },
};

int gen_preset(struct gen_model *m, const char *name)
{
	size_t i;

	for (i = 0; i < sizeof presets / sizeof presets[0]; i++) {
		if (strcasecmp(presets[i].name, name) == 0) {
			m->shape = presets[i].name;
			m->n_layer = presets[i].n_layer;
			m->n_embd = presets[i].n_embd;
			m->n_ff = presets[i].n_ff;
			m->n_head = presets[i].n_head;
			m->n_head_kv = presets[i].n_head_kv;
			m->n_ctx = presets[i].n_ctx;
			m->n_vocab = presets[i].n_vocab;
			m->rope_base = presets[i].rope_base;
			return 0;
		}
	}
	return -1;
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
	[MIX_Q5_0] = { "q5_0", NTX_TYPE_Q5_0, 8 },
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

	if (n_dims < 2)
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
		/* llama.cpp's LLM_TYPE_70B: 80 layers and grouped KV heads */
		if (m->n_layer == 80 && m->n_head != m->n_head_kv &&
		    (t == NTX_TYPE_Q3_K || t == NTX_TYPE_Q4_K))
			t = NTX_TYPE_Q5_K;
	} else if (layer >= 0 && ends_with(name, ".ffn_down.weight")) {
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
	char name[96];
	int hd = m->n_embd / m->n_head;

	snprintf(name, sizeof name, "ntx-synthetic-%s-%s", m->shape ? m->shape : "custom",
		 gen_mix_name(m->mix));
	if (ntx_gguf_writer_add_str(w, "general.architecture", "llama", err) ||
	    ntx_gguf_writer_add_str(w, "general.name", name, err) ||
	    (m->alignment && ntx_gguf_writer_set_alignment(w, m->alignment, err)) ||
	    ntx_gguf_writer_add_u32(w, "llama.block_count", (uint32_t)m->n_layer, err) ||
	    ntx_gguf_writer_add_u32(w, "llama.context_length", (uint32_t)m->n_ctx, err) ||
	    ntx_gguf_writer_add_u32(w, "llama.embedding_length", (uint32_t)m->n_embd, err) ||
	    ntx_gguf_writer_add_u32(w, "llama.feed_forward_length", (uint32_t)m->n_ff, err) ||
	    ntx_gguf_writer_add_u32(w, "llama.attention.head_count", (uint32_t)m->n_head, err) ||
	    ntx_gguf_writer_add_u32(w, "llama.attention.head_count_kv", (uint32_t)m->n_head_kv, err) ||
	    ntx_gguf_writer_add_f32(w, "llama.rope.freq_base", (float)m->rope_base, err) ||
	    ntx_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f, err) ||
	    ntx_gguf_writer_add_u32(w, "general.file_type", (uint32_t)gen_mix_file_type(m->mix), err) ||
	    ntx_gguf_writer_add_u32(w, "llama.vocab_size", (uint32_t)m->n_vocab, err) ||
	    ntx_gguf_writer_add_u32(w, "llama.rope.dimension_count", (uint32_t)hd, err))
		return -1;
	if (m->vocab_from) {
		if (gen_vocab_copy(w, m->vocab_from, err)) {
			ntx_err_prefix(err, "%s", m->vocab_from);
			return -1;
		}
	} else if (!m->no_vocab && gen_vocab_synthetic(w, m->n_vocab, err)) {
		return -1;
	}
	if (is_quantized(mixes[m->mix].type) &&
	    ntx_gguf_writer_add_u32(w, "general.quantization_version", 2, err))
		return -1;
	return 0;
}

static int add_one(struct gen_model *m, struct ntx_gguf_writer *w, struct gen_fill *f,
		   const char *name, int layer, int64_t a, int64_t b, enum gen_dist dist,
		   struct ntx_err *err)
{
	int64_t ne[2] = { a, b };
	int n_dims = b == 1 ? 1 : 2, i;
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

int gen_describe(struct gen_model *m, struct ntx_gguf_writer *w, struct gen_fill **fillp,
		 struct ntx_err *err)
{
	static const struct {
		const char *suffix;
		int a, b; /* 0 embd, 1 q, 2 kv, 3 ff, 4 one */
		enum gen_dist dist;
	} lt[NTX_LAYER_NT] = {
		{ "attn_norm", 0, 4, DIST_NORM }, { "attn_q", 0, 1, DIST_WEIGHT },
		{ "attn_k", 0, 2, DIST_WEIGHT },  { "attn_v", 0, 2, DIST_WEIGHT },
		{ "attn_output", 1, 0, DIST_WEIGHT }, { "ffn_norm", 0, 4, DIST_NORM },
		{ "ffn_gate", 0, 3, DIST_WEIGHT }, { "ffn_up", 0, 3, DIST_WEIGHT },
		{ "ffn_down", 3, 0, DIST_WEIGHT },
	};
	struct gen_fill *f = calloc(1, sizeof *f);
	int hd = m->n_embd / m->n_head, l, k, i;
	int64_t dim[5] = { m->n_embd, (int64_t)m->n_head * hd, (int64_t)m->n_head_kv * hd, m->n_ff, 1 };
	char name[96];

	*fillp = f;
	if (!f)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	f->seed = m->seed;
	f->threads = m->threads;
	f->t = calloc((size_t)m->n_layer * NTX_LAYER_NT + 4, sizeof *f->t);
	if (!f->t)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (add_meta(m, w, err) ||
	    add_one(m, w, f, "token_embd.weight", -1, m->n_embd, m->n_vocab, DIST_WEIGHT, err))
		return -1;
	if (m->rope_freqs) {
		f->n_rope = hd / 2;
		f->rope = calloc((size_t)(f->n_rope ? f->n_rope : 1), sizeof *f->rope);
		if (!f->rope)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		gen_rope_freqs(m->rope_base, hd, f->rope);
		if (add_one(m, w, f, "rope_freqs.weight", -1, hd / 2, 1, DIST_ROPE, err))
			return -1;
	}
	for (l = 0; l < m->n_layer; l++) {
		for (k = 0; k < NTX_LAYER_NT; k++) {
			snprintf(name, sizeof name, "blk.%d.%s.weight", l, lt[k].suffix);
			if (add_one(m, w, f, name, l, dim[lt[k].a], dim[lt[k].b], lt[k].dist, err))
				return -1;
		}
	}
	if (add_one(m, w, f, "output_norm.weight", -1, m->n_embd, 1, DIST_NORM, err) ||
	    (!m->tied &&
	     add_one(m, w, f, "output.weight", -1, m->n_embd, m->n_vocab, DIST_WEIGHT, err)))
		return -1;
	for (i = 0; i < m->n_ovr; i++) {
		if (!m->ovr[i].used)
			return ntx_err_set(err, NTX_EINVAL, "--type-of: no tensor named '%s'",
					   m->ovr[i].name);
	}
	return 0;
}
