/* model.c - the model view (see model.h). */
#include "model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "types.h"

uint64_t ntx_gguf_fingerprint(const struct ntx_gguf *g)
{
	struct ntx_hash h;
	unsigned char sz[8];
	int i;

	for (i = 0; i < 8; i++)
		sz[i] = (unsigned char)(g->file_size >> (8 * i));
	ntx_hash_init(&h, 0x6e7478u /* "ntx" */);
	ntx_hash_update(&h, sz, 8);
	if (g->map)
		ntx_hash_update(&h, g->map, (size_t)g->header_bytes);
	return ntx_hash_final(&h);
}

int ntx_tensor_layer(const char *name)
{
	long v = 0;
	const char *p;

	if (strncmp(name, "blk.", 4) != 0)
		return -1;
	p = name + 4;
	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p - '0');
		if (v > 1000000)
			return -1;
		p++;
	}
	return *p == '.' ? (int)v : -1;
}

/* Read an integer key into *out within [lo, hi]; absent -> def (or error
 * when required). */
static int get_int(const struct ntx_gguf *g, const char *key, int64_t def, int required,
		   int64_t lo, int64_t hi, int64_t *out, struct ntx_err *err)
{
	uint64_t v;
	int rc = ntx_gguf_get_u64(g, key, &v, err);

	if (rc < 0)
		return -1;
	if (rc == 0) {
		if (required)
			return ntx_err_set(err, NTX_EFORMAT, "missing key '%s'", key);
		*out = def;
		return 0;
	}
	if (v < (uint64_t)lo || v > (uint64_t)hi)
		return ntx_err_set(err, NTX_EFORMAT, "key '%s' = %" PRIu64 " is out of range [%" PRId64 ", %" PRId64 "]",
				   key, v, lo, hi);
	*out = (int64_t)v;
	return 0;
}

static int get_float(const struct ntx_gguf *g, const char *key, double def, double lo,
		     double hi, double *out, struct ntx_err *err)
{
	int rc = ntx_gguf_get_f64(g, key, out, err);

	if (rc < 0)
		return -1;
	if (rc == 0)
		*out = def;
	if (!(*out >= lo && *out <= hi))
		return ntx_err_set(err, NTX_EFORMAT, "key '%s' = %g is out of range [%g, %g]", key,
				   *out, lo, hi);
	return 0;
}

/* The mixture-of-experts keys: expert_count, expert_used_count, the expert
 * width (the descriptor's key, else feed_forward_length), and what ntx does
 * not run yet (shared experts, a gating function other than softmax). */
static int read_experts(const struct ntx_gguf *g, struct ntx_llama_config *cfg, char *key,
			size_t ksz, struct ntx_err *err)
{
	const struct ntx_arch *a = cfg->desc;
	int64_t v;

#define K(name) (snprintf(key, ksz, "%s.%s", cfg->arch, name), key)
	if (a->ffn == NTX_FFN_DENSE)
		return 0;
	if (get_int(g, K("expert_count"), 0, a->ffn == NTX_FFN_MOE, 0, 1 << 16, &v, err))
		return -1;
	cfg->n_expert = (int)v;
	if (cfg->n_expert == 0)
		return 0;
	if (get_int(g, K("expert_used_count"), 0, 1, 1, cfg->n_expert, &v, err))
		return -1;
	cfg->n_expert_used = (int)v;
	if (a->expert_ff_key) {
		if (get_int(g, K(a->expert_ff_key), cfg->n_ff / cfg->n_expert_used, 0, 1, 1 << 22,
			    &v, err))
			return -1;
		cfg->n_ff = (int)v;
		if (cfg->n_ff < 1)
			return ntx_err_set(err, NTX_EFORMAT, "expert FFN width is 0 (no key '%s')",
					   K(a->expert_ff_key));
	}
	if (get_int(g, K("expert_shared_count"), 0, 0, 0, 1 << 16, &v, err))
		return -1;
	if (v > 0)
		return ntx_err_set(err, NTX_EUNSUP,
				   "shared experts ('%s' = %lld) are not supported yet",
				   K("expert_shared_count"), (long long)v);
	/* llama_expert_gating_func_type: 1 softmax, 2 sigmoid */
	if (get_int(g, K("expert_gating_func"), 1, 0, 0, 1 << 16, &v, err))
		return -1;
	if (v != 1)
		return ntx_err_set(err, NTX_EUNSUP,
				   "expert gating function %lld ('%s') is not supported yet "
				   "(only 1, softmax)", (long long)v, K("expert_gating_func"));
	if (get_float(g, K("expert_weights_scale"), 0.0, 0.0, 1e6, &cfg->expert_weights_scale,
		      err))
		return -1;
#undef K
	return 0;
}

int ntx_llama_config_read(const struct ntx_gguf *g, struct ntx_llama_config *cfg,
			  struct ntx_err *err)
{
	struct ntx_gguf_str arch, st;
	char key[128];
	int64_t v;
	const struct ntx_gguf_kv *tok;
	int rc;

	memset(cfg, 0, sizeof *cfg);
	rc = ntx_gguf_get_str(g, "general.architecture", &arch, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return ntx_err_set(err, NTX_EFORMAT, "missing key 'general.architecture'");
	cfg->desc = ntx_arch_find(arch.p, arch.len);
	if (!cfg->desc)
		return ntx_err_set(err, NTX_EUNSUP,
				   "architecture '%.*s' is not supported yet (supported: %s)",
				   (int)(arch.len > 40 ? 40 : arch.len), arch.p, ntx_arch_names());
	snprintf(cfg->arch, sizeof cfg->arch, "%s", cfg->desc->name);
	cfg->rope_style = cfg->desc->rope;
	cfg->qk_norm = cfg->desc->qk_norm;
	cfg->qkv_bias = cfg->desc->qkv_bias;

#define K(name) (snprintf(key, sizeof key, "%s.%s", cfg->arch, name), key)
	if (get_int(g, K("block_count"), 0, 1, 1, 10000, &v, err))
		return -1;
	cfg->n_layer = (int)v;
	if (get_int(g, K("embedding_length"), 0, 1, 1, 1 << 20, &v, err))
		return -1;
	cfg->n_embd = (int)v;
	if (get_int(g, K("feed_forward_length"), 0, 1, 1, 1 << 22, &v, err))
		return -1;
	cfg->n_ff = (int)v;
	if (get_int(g, K("attention.head_count"), 0, 1, 1, 1 << 14, &v, err))
		return -1;
	cfg->n_head = (int)v;
	if (get_int(g, K("attention.head_count_kv"), cfg->n_head, 0, 1, cfg->n_head, &v, err))
		return -1;
	cfg->n_head_kv = (int)v;
	if (cfg->n_head % cfg->n_head_kv)
		return ntx_err_set(err, NTX_EFORMAT,
				   "head count %d is not a multiple of the KV head count %d",
				   cfg->n_head, cfg->n_head_kv);
	if (get_int(g, K("attention.key_length"), cfg->n_embd / cfg->n_head, 0, 1, 1 << 14, &v, err))
		return -1;
	cfg->head_dim = (int)v;
	if (cfg->head_dim < 1)
		return ntx_err_set(err, NTX_EFORMAT,
				   "head dimension is 0 (embedding length %d < head count %d and no key_length)",
				   cfg->n_embd, cfg->n_head);
	if (cfg->head_dim % 2)
		return ntx_err_set(err, NTX_EFORMAT, "head dimension %d is odd", cfg->head_dim);
	if (get_int(g, K("rope.dimension_count"), cfg->head_dim, 0, 0, cfg->head_dim, &v, err))
		return -1;
	cfg->n_rot = (int)v;
	if (cfg->n_rot % 2)
		return ntx_err_set(err, NTX_EFORMAT, "RoPE dimension count %d is odd", cfg->n_rot);
	if (get_int(g, K("context_length"), 2048, 0, 1, 1 << 24, &v, err))
		return -1;
	cfg->n_ctx_train = (int)v;
	if (get_float(g, K("rope.freq_base"), 10000.0, 1e-3, 1e12, &cfg->rope_base, err))
		return -1;
	if (get_float(g, K("attention.layer_norm_rms_epsilon"), 1e-5, 0, 1, &cfg->rms_eps, err))
		return -1;
	cfg->rope_freq_scale = 1.0;
	rc = ntx_gguf_get_str(g, K("rope.scaling.type"), &st, err);
	if (rc < 0)
		return -1;
	if (rc == 1 && st.len == 6 && memcmp(st.p, "linear", 6) == 0) {
		double f;

		if (get_float(g, K("rope.scaling.factor"), 1.0, 1e-6, 1e6, &f, err))
			return -1;
		cfg->rope_freq_scale = 1.0 / f;
	}
	/* vocab size: key, else the token list, else token_embd rows */
	cfg->n_vocab = 0;
	if (get_int(g, K("vocab_size"), 0, 0, 0, INT32_MAX, &v, err))
		return -1;
	cfg->n_vocab = v;
	if (read_experts(g, cfg, key, sizeof key, err))
		return -1;
#undef K
	if (!cfg->n_vocab && ntx_gguf_get_arr(g, "tokenizer.ggml.tokens", &tok, err) == 1)
		cfg->n_vocab = (int64_t)tok->val.n;
	if (!cfg->n_vocab) {
		const struct ntx_gguf_tensor *te = ntx_gguf_find_tensor(g, "token_embd.weight");

		if (te && te->n_dims == 2)
			cfg->n_vocab = te->ne[1];
	}
	if (get_int(g, "general.file_type", -1, 0, 0, 1 << 20, &cfg->file_type, err))
		return -1;
	return 0;
}

/* Check that tensor t exists with type among the allowed, shape (a, b, c)
 * (c > 1: a 3-D stack of c matrices, the experts). */
static int check_tensor3(const struct ntx_gguf *g, const char *name, int64_t a, int64_t b,
			 int64_t c, int weight, const struct ntx_gguf_tensor **out,
			 struct ntx_err *err)
{
	const struct ntx_gguf_tensor *t = ntx_gguf_find_tensor(g, name);
	const struct ntx_type_info *ti;
	uint32_t dims = c > 1 ? 3 : b > 1 ? 2 : 1;

	*out = t;
	if (!t)
		return ntx_err_set(err, NTX_EFORMAT, "missing tensor '%s'", name);
	if (t->ne[0] != a || t->ne[1] != b || t->ne[2] != c || t->ne[3] != 1 ||
	    t->n_dims != dims) {
		if (c > 1)
			return ntx_err_set(err, NTX_EFORMAT,
					   "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
					   name, (long long)t->ne[0], (long long)t->ne[1],
					   (long long)t->ne[2], (long long)t->ne[3], (long long)a,
					   (long long)b, (long long)c);
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
				   name, (long long)t->ne[0], (long long)t->ne[1],
				   (long long)t->ne[2], (long long)t->ne[3], (long long)a,
				   (long long)b);
	}
	ti = ntx_type_get(t->type);
	if (!weight) {
		if (t->type != 0)
			return ntx_err_set(err, NTX_EUNSUP,
					   "tensor '%s' has type %s; norm and RoPE tensors must be F32",
					   name, ntx_type_name(t->type));
	} else if (!ti || !ti->computable) {
		return ntx_err_set(err, NTX_EUNSUP,
				   "tensor '%s' has type %s, which ntx does not support (supported: F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K)",
				   name, ntx_type_name(t->type));
	}
	return 0;
}

static int check_tensor(const struct ntx_gguf *g, const char *name, int64_t a, int64_t b,
			int weight, const struct ntx_gguf_tensor **out, struct ntx_err *err)
{
	return check_tensor3(g, name, a, b, 1, weight, out, err);
}

const struct ntx_gguf_tensor *ntx_layer_tensor(const struct ntx_layer_tensors *lt, int i)
{
	const struct ntx_gguf_tensor *v[NTX_LAYER_NT] = {
		lt->attn_norm, lt->wq, lt->wk, lt->wv, lt->wo,
		lt->ffn_norm, lt->w_gate, lt->w_up, lt->w_down,
		lt->router, lt->q_norm, lt->k_norm, lt->bq, lt->bk, lt->bv,
	};

	return i >= 0 && i < NTX_LAYER_NT ? v[i] : NULL;
}

int ntx_layer_n_tensors(const struct ntx_layer_tensors *lt)
{
	int i, n = 0;

	for (i = 0; i < NTX_LAYER_NT; i++)
		n += ntx_layer_tensor(lt, i) != NULL;
	return n;
}

/* Tensors of layer l that ntx would ignore although they change the
 * result: shared experts, expert-choice biases, attention biases. */
static int check_unsupported(const struct ntx_gguf *g, int l, int qkv_bias, struct ntx_err *err)
{
	static const char *const sfx[] = {
		"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
		"ffn_gate_inp_shexp.weight", "exp_probs_b.bias", "attn_output.bias",
		"attn_q.bias", "attn_k.bias", "attn_v.bias", /* the last three: qkv_bias reads them */
	};
	char name[96];
	size_t i;

	for (i = 0; i < sizeof sfx / sizeof sfx[0] - (qkv_bias ? 3 : 0); i++) {
		snprintf(name, sizeof name, "blk.%d.%s", l, sfx[i]);
		if (ntx_gguf_find_tensor(g, name))
			return ntx_err_set(err, NTX_EUNSUP, "tensor '%s' is not supported yet", name);
	}
	return 0;
}

struct ntx_model *ntx_model_from_gguf(struct ntx_gguf *g, unsigned flags, struct ntx_err *err)
{
	struct ntx_model *m = calloc(1, sizeof *m);
	struct ntx_llama_config *c;
	uint64_t i;
	int l;
	char name[96];

	if (!m) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	c = &m->cfg;
	if (ntx_llama_config_read(g, c, err))
		goto fail;
	m->fingerprint = ntx_gguf_fingerprint(g);
	snprintf(m->fingerprint_hex, sizeof m->fingerprint_hex, "%016" PRIx64, m->fingerprint);
	if (g->n_tensors == 0 && (flags & NTX_MODEL_VOCAB_ONLY)) {
		m->gguf = g;
		return m;
	}
	if (g->n_tensors == 0) {
		ntx_err_set(err, NTX_EFORMAT, "file has no tensors (a vocabulary-only file?)");
		goto fail;
	}
	if (c->n_vocab <= 0) {
		ntx_err_set(err, NTX_EFORMAT, "cannot determine the vocabulary size");
		goto fail;
	}
	if (check_tensor(g, "token_embd.weight", c->n_embd, c->n_vocab, 1, &m->tok_embd, err) ||
	    check_tensor(g, "output_norm.weight", c->n_embd, 1, 0, &m->output_norm, err))
		goto fail;
	if (ntx_gguf_find_tensor(g, "output.weight")) {
		if (check_tensor(g, "output.weight", c->n_embd, c->n_vocab, 1, &m->output, err))
			goto fail;
	} else {
		m->output = m->tok_embd;
		m->output_tied = 1;
	}
	if (ntx_gguf_find_tensor(g, "rope_freqs.weight") &&
	    check_tensor(g, "rope_freqs.weight", c->n_rot / 2, 1, 0, &m->rope_freqs, err))
		goto fail;
	m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
	if (!m->layers) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	for (l = 0; l < c->n_layer; l++) {
		struct ntx_layer_tensors *lt = &m->layers[l];
		int64_t q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
		int64_t ne = c->n_expert > 0 ? c->n_expert : 1;
		const char *x = c->n_expert > 0 ? "_exps" : "";
		struct {
			const char *suffix;
			int64_t a, b, c;
			int weight, use;
			const struct ntx_gguf_tensor **slot;
		} want[NTX_LAYER_NT] = { /* slots 12-14 are biases (.bias), the rest .weight */
			{ "attn_norm", c->n_embd, 1, 1, 0, 1, &lt->attn_norm },
			{ "attn_q", c->n_embd, q, 1, 1, 1, &lt->wq },
			{ "attn_k", c->n_embd, kv, 1, 1, 1, &lt->wk },
			{ "attn_v", c->n_embd, kv, 1, 1, 1, &lt->wv },
			{ "attn_output", q, c->n_embd, 1, 1, 1, &lt->wo },
			{ "ffn_norm", c->n_embd, 1, 1, 0, 1, &lt->ffn_norm },
			{ "ffn_gate", c->n_embd, c->n_ff, ne, 1, 1, &lt->w_gate },
			{ "ffn_up", c->n_embd, c->n_ff, ne, 1, 1, &lt->w_up },
			{ "ffn_down", c->n_ff, c->n_embd, ne, 1, 1, &lt->w_down },
			{ "ffn_gate_inp", c->n_embd, c->n_expert, 1, 1, c->n_expert > 0, &lt->router },
			{ "attn_q_norm", c->head_dim, 1, 1, 0, c->qk_norm, &lt->q_norm },
			{ "attn_k_norm", c->head_dim, 1, 1, 0, c->qk_norm, &lt->k_norm },
			{ "attn_q", q, 1, 1, 0, c->qkv_bias, &lt->bq },
			{ "attn_k", kv, 1, 1, 0, c->qkv_bias, &lt->bk },
			{ "attn_v", kv, 1, 1, 0, c->qkv_bias, &lt->bv },
		};
		int k;

		if (check_unsupported(g, l, c->qkv_bias, err))
			goto fail;
		for (k = 0; k < NTX_LAYER_NT; k++) {
			if (!want[k].use)
				continue;
			snprintf(name, sizeof name, "blk.%d.%s%s.%s", l, want[k].suffix,
				 k >= 6 && k <= 8 ? x : "", k >= 12 ? "bias" : "weight");
			if (check_tensor3(g, name, want[k].a, want[k].b, want[k].c, want[k].weight,
					  want[k].slot, err))
				goto fail;
		}
	}
	for (i = 0; i < g->n_tensors; i++) {
		const struct ntx_gguf_tensor *t = &g->tensors[i];
		int li = ntx_tensor_layer(t->name);

		if (li >= 0 && li < c->n_layer) {
			m->layers[li].bytes += t->nbytes;
			m->layers[li].n_tensors++;
			m->layer_bytes += t->nbytes;
		} else {
			m->nonlayer_bytes += t->nbytes;
		}
	}
	m->gguf = g;
	return m;
fail:
	free(m->layers);
	free(m);
	return NULL;
}

struct ntx_model *ntx_model_open(const char *path, unsigned flags, struct ntx_err *err)
{
	struct ntx_gguf *g = ntx_gguf_open(path, err);
	struct ntx_model *m;

	if (!g)
		return NULL;
	m = ntx_model_from_gguf(g, flags, err);
	if (!m)
		ntx_gguf_close(g);
	return m;
}

void ntx_model_close(struct ntx_model *m)
{
	if (!m)
		return;
	ntx_gguf_close(m->gguf);
	free(m->layers);
	free(m);
}
