/* model.c - Llama model view (see model.h). */
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
	if (arch.len != 5 || memcmp(arch.p, "llama", 5) != 0)
		return ntx_err_set(err, NTX_EUNSUP,
				   "architecture '%.*s' is not supported (only 'llama')",
				   (int)(arch.len > 40 ? 40 : arch.len), arch.p);
	strcpy(cfg->arch, "llama");

#define K(name) (snprintf(key, sizeof key, "llama.%s", name), key)
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

/* Check that tensor t exists with type among the allowed, shape (a, b). */
static int check_tensor(const struct ntx_gguf *g, const char *name, int64_t a, int64_t b,
			int weight, const struct ntx_gguf_tensor **out, struct ntx_err *err)
{
	const struct ntx_gguf_tensor *t = ntx_gguf_find_tensor(g, name);
	const struct ntx_type_info *ti;

	*out = t;
	if (!t)
		return ntx_err_set(err, NTX_EFORMAT, "missing tensor '%s'", name);
	if (t->ne[0] != a || t->ne[1] != b || t->ne[2] != 1 || t->ne[3] != 1 ||
	    (b == 1 && t->n_dims != 1) || (b != 1 && t->n_dims != 2))
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
				   name, (long long)t->ne[0], (long long)t->ne[1],
				   (long long)t->ne[2], (long long)t->ne[3], (long long)a,
				   (long long)b);
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

const struct ntx_gguf_tensor *ntx_layer_tensor(const struct ntx_layer_tensors *lt, int i)
{
	const struct ntx_gguf_tensor *v[NTX_LAYER_NT] = {
		lt->attn_norm, lt->wq, lt->wk, lt->wv, lt->wo,
		lt->ffn_norm, lt->w_gate, lt->w_up, lt->w_down,
	};

	return i >= 0 && i < NTX_LAYER_NT ? v[i] : NULL;
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
		struct {
			const char *suffix;
			int64_t a, b;
			int weight;
			const struct ntx_gguf_tensor **slot;
		} want[NTX_LAYER_NT] = {
			{ "attn_norm", c->n_embd, 1, 0, &lt->attn_norm },
			{ "attn_q", c->n_embd, q, 1, &lt->wq },
			{ "attn_k", c->n_embd, kv, 1, &lt->wk },
			{ "attn_v", c->n_embd, kv, 1, &lt->wv },
			{ "attn_output", q, c->n_embd, 1, &lt->wo },
			{ "ffn_norm", c->n_embd, 1, 0, &lt->ffn_norm },
			{ "ffn_gate", c->n_embd, c->n_ff, 1, &lt->w_gate },
			{ "ffn_up", c->n_embd, c->n_ff, 1, &lt->w_up },
			{ "ffn_down", c->n_ff, c->n_embd, 1, &lt->w_down },
		};
		int k;

		for (k = 0; k < NTX_LAYER_NT; k++) {
			snprintf(name, sizeof name, "blk.%d.%s.weight", l, want[k].suffix);
			if (check_tensor(g, name, want[k].a, want[k].b, want[k].weight,
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
