/* test_model.c - the Llama model view (model.h) on files made with the
 * writer (missing tensors, bad shapes and types, defaults, tied output), and
 * every fixture file in models/, tinymodel/ and vocab/ against its README and
 * models/tensor_types.json. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "gguf_write.h"
#include "model.h"
#include "t.h"
#include "types.h"

/* ---- synthetic models ---- */

struct shape {
	int n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab;
	int tied, rope_freqs;
	uint32_t wtype;       /* weight type */
	const char *skip;     /* tensor to leave out */
	const char *bad_name; /* tensor to give a wrong shape */
	uint32_t bad_type;    /* ... or this type (if nonzero) */
	const char *drop_key; /* key to leave out */
	const char *extra_key; /* a u32 key to add */
	uint32_t extra_val;
};

/* A small Llama file in memory; NULL (and a diag) if the writer refused. */
static unsigned char *make_model(const struct shape *s, size_t *len)
{
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	struct ntx_err err;
	int hd = s->n_embd / s->n_head, l, k, ok = 1;
	char name[64];
	unsigned char *buf = NULL;
	struct {
		const char *suffix;
		int64_t a, b;
		int norm;
	} lt[9] = {
		{ "attn_norm", s->n_embd, 1, 1 },
		{ "attn_q", s->n_embd, (int64_t)s->n_head * hd, 0 },
		{ "attn_k", s->n_embd, (int64_t)s->n_head_kv * hd, 0 },
		{ "attn_v", s->n_embd, (int64_t)s->n_head_kv * hd, 0 },
		{ "attn_output", (int64_t)s->n_head * hd, s->n_embd, 0 },
		{ "ffn_norm", s->n_embd, 1, 1 },
		{ "ffn_gate", s->n_embd, s->n_ff, 0 },
		{ "ffn_up", s->n_embd, s->n_ff, 0 },
		{ "ffn_down", s->n_ff, s->n_embd, 0 },
	};

#define KEY(k, v)                                                            \
	do {                                                                 \
		if (!s->drop_key || strcmp(s->drop_key, k))                  \
			ok &= !ntx_gguf_writer_add_u32(w, k, (uint32_t)(v), &err); \
	} while (0)
	ok &= !ntx_gguf_writer_add_str(w, "general.architecture", "llama", &err);
	KEY("llama.block_count", s->n_layer);
	KEY("llama.embedding_length", s->n_embd);
	KEY("llama.feed_forward_length", s->n_ff);
	KEY("llama.attention.head_count", s->n_head);
	KEY("llama.attention.head_count_kv", s->n_head_kv);
	KEY("llama.vocab_size", s->n_vocab);
#undef KEY
	ok &= !ntx_gguf_writer_add_f32(w, "llama.rope.freq_base", 500000.0f, &err);
	if (s->extra_key)
		ok &= !ntx_gguf_writer_add_u32(w, s->extra_key, s->extra_val, &err);

	/* one tensor (NULL data: zeros) unless skipped or made bad */
#define T(nm, a, b, norm)                                                            \
	do {                                                                         \
		int64_t ne[2] = { (a), (b) };                                        \
		uint32_t ty = (norm) ? NTX_TYPE_F32 : s->wtype;                      \
		if (s->skip && !strcmp(s->skip, nm))                                 \
			break;                                                       \
		if (s->bad_name && !strcmp(s->bad_name, nm)) {                       \
			if (s->bad_type)                                             \
				ty = s->bad_type;                                    \
			else                                                         \
				ne[0] *= 2;                                          \
		}                                                                    \
		ok &= ntx_gguf_writer_add_tensor(w, nm, ty, ne[1] == 1 ? 1 : 2, ne, NULL, \
						 &err) >= 0;                         \
	} while (0)
	T("token_embd.weight", s->n_embd, s->n_vocab, 0);
	if (s->rope_freqs)
		T("rope_freqs.weight", hd / 2, 1, 1);
	for (l = 0; l < s->n_layer; l++) {
		for (k = 0; k < 9; k++) {
			snprintf(name, sizeof name, "blk.%d.%s.weight", l, lt[k].suffix);
			T(name, lt[k].a, lt[k].b, lt[k].norm);
		}
	}
	T("output_norm.weight", s->n_embd, 1, 1);
	if (!s->tied)
		T("output.weight", s->n_embd, s->n_vocab, 0);
#undef T
	ok &= !ntx_gguf_writer_write_mem(w, &buf, len, &err);
	if (!ok)
		t_diag("make_model: %s", err.msg);
	ntx_gguf_writer_free(w);
	return ok ? buf : (free(buf), NULL);
}

/* Open a synthetic model; returns the model (caller closes) or NULL. */
static struct ntx_model *open_model(const struct shape *s, unsigned char **buf, struct ntx_err *err)
{
	size_t len;
	struct ntx_gguf *g;
	struct ntx_model *m;

	ntx_err_clear(err);
	*buf = make_model(s, &len);
	if (!*buf)
		return NULL;
	g = ntx_gguf_open_buffer(*buf, len, err);
	if (!g)
		return NULL;
	m = ntx_model_from_gguf(g, 0, err);
	if (!m)
		ntx_gguf_close(g);
	return m;
}

static void expect_model_error(struct shape s, const char *want, const char *what)
{
	unsigned char *buf;
	struct ntx_err err;
	struct ntx_model *m = open_model(&s, &buf, &err);

	t_ok(!m && strstr(err.msg, want), "%s: %s", what, m ? "(opened)" : err.msg);
	ntx_model_close(m);
	free(buf);
}

static void test_model(void)
{
	const struct shape base = { 2, 256, 512, 4, 2, 64, 0, 1, NTX_TYPE_Q8_0, 0, 0, 0, 0, 0, 0 };
	struct shape s = base;
	unsigned char *buf;
	struct ntx_err err;
	struct ntx_model *m = open_model(&s, &buf, &err);

	t_ok(m != NULL, "synthetic model opens: %s", err.msg);
	if (m) {
		const struct ntx_llama_config *c = &m->cfg;
		uint64_t all = 0, i;

		for (i = 0; i < m->gguf->n_tensors; i++)
			all += m->gguf->tensors[i].nbytes;
		t_ok(c->n_layer == 2 && c->n_embd == 256 && c->n_ff == 512 && c->n_head == 4 &&
			     c->n_head_kv == 2 && c->head_dim == 64 && c->n_rot == 64 &&
			     c->n_vocab == 64 && c->rope_base == 500000.0 && c->n_ctx_train == 2048 &&
			     fabs(c->rms_eps - 1e-5) < 1e-12 && c->file_type == -1 &&
			     c->rope_freq_scale == 1.0,
		     "config and llama.cpp defaults (ctx 2048, eps 1e-5, head_dim from n_embd/n_head)");
		t_ok(!m->output_tied && m->output != m->tok_embd && m->rope_freqs,
		     "separate output, rope_freqs found");
		t_ok(m->layers[1].n_tensors == 9 && m->layer_bytes + m->nonlayer_bytes == all &&
			     m->layers[0].bytes == m->layers[1].bytes,
		     "layer accounting: %llu + %llu = %llu", (unsigned long long)m->layer_bytes,
		     (unsigned long long)m->nonlayer_bytes, (unsigned long long)all);
		t_ok(ntx_layer_tensor(&m->layers[0], 8) == m->layers[0].w_down &&
			     ntx_layer_tensor(&m->layers[0], 9) == NULL,
		     "ntx_layer_tensor order");
		t_ok(strlen(m->fingerprint_hex) == 16 && m->fingerprint == ntx_gguf_fingerprint(m->gguf),
		     "fingerprint %s", m->fingerprint_hex);
	}
	ntx_model_close(m);
	free(buf);

	s = base;
	s.tied = 1;
	m = open_model(&s, &buf, &err);
	t_ok(m && m->output_tied && m->output == m->tok_embd, "no output.weight: tied");
	ntx_model_close(m);
	free(buf);

	{
		/* the fingerprint changes with any header byte, not with data */
		size_t len;
		unsigned char *a, *b;
		struct ntx_gguf *ga, *gb;

		s = base;
		a = make_model(&s, &len);
		b = malloc(len);
		memcpy(b, a, len);
		b[len - 1] ^= 1;
		ga = ntx_gguf_open_buffer(a, len, &err);
		gb = ntx_gguf_open_buffer(b, len, &err);
		t_ok(ga && gb && ntx_gguf_fingerprint(ga) == ntx_gguf_fingerprint(gb),
		     "fingerprint ignores tensor data");
		ntx_gguf_close(gb);
		b[len - 1] ^= 1;
		b[33] ^= 1; /* inside the first key's name */
		gb = ntx_gguf_open_buffer(b, len, &err);
		t_ok(ga && gb && ntx_gguf_fingerprint(ga) != ntx_gguf_fingerprint(gb),
		     "fingerprint covers the metadata");
		ntx_gguf_close(ga);
		ntx_gguf_close(gb);
		free(a);
		free(b);
	}

	s = base;
	s.skip = "blk.1.ffn_up.weight";
	expect_model_error(s, "missing tensor 'blk.1.ffn_up.weight'", "missing tensor");
	s = base;
	s.skip = "token_embd.weight";
	expect_model_error(s, "missing tensor 'token_embd.weight'", "missing token_embd");
	s = base;
	s.bad_name = "blk.0.attn_k.weight";
	expect_model_error(s, "has shape [512, 128, 1, 1], expected [256, 128]", "wrong shape");
	s = base;
	s.bad_name = "blk.0.attn_norm.weight";
	s.bad_type = NTX_TYPE_F16;
	expect_model_error(s, "must be F32", "norm not F32");
	s = base;
	s.bad_name = "blk.1.ffn_down.weight";
	s.bad_type = NTX_TYPE_Q5_1;
	expect_model_error(s, "type Q5_1, which ntx does not support", "unsupported weight type");
	s = base;
	s.drop_key = "llama.block_count";
	expect_model_error(s, "missing key 'llama.block_count'", "missing block_count");
	s = base;
	s.n_head = 3;
	s.n_head_kv = 2;
	s.n_embd = 258;
	s.wtype = NTX_TYPE_F32;
	expect_model_error(s, "not a multiple of the KV head count", "heads not a multiple of KV heads");
	s = base;
	s.n_head_kv = 8;
	expect_model_error(s, "out of range", "more KV heads than heads");
	s = base;
	s.n_embd = 2;
	s.wtype = NTX_TYPE_F32;
	s.n_head = 4;
	s.n_head_kv = 4;
	expect_model_error(s, "head dimension is 0", "head dimension 0");
	s = base;
	s.extra_key = "llama.rope.dimension_count";
	s.extra_val = 63;
	expect_model_error(s, "RoPE dimension count 63 is odd", "odd n_rot");
	s = base;
	s.extra_key = "llama.rope.dimension_count";
	s.extra_val = 65;
	expect_model_error(s, "out of range", "n_rot above head_dim");
	s = base;
	s.extra_key = "llama.context_length";
	s.extra_val = 0;
	expect_model_error(s, "out of range", "context length 0");
	s = base;
	s.drop_key = "llama.vocab_size"; /* then token_embd rows (no tokens key) */
	m = open_model(&s, &buf, &err);
	t_ok(m && m->cfg.n_vocab == 64, "vocab size from token_embd rows: %s", err.msg);
	ntx_model_close(m);
	free(buf);

	{
		/* architecture checks */
		struct ntx_gguf_writer *w = ntx_gguf_writer_new();
		unsigned char *b;
		size_t len;
		struct ntx_gguf *g;

		ntx_gguf_writer_add_str(w, "general.architecture", "gpt2", &err);
		ntx_gguf_writer_write_mem(w, &b, &len, &err);
		g = ntx_gguf_open_buffer(b, len, &err);
		m = g ? ntx_model_from_gguf(g, NTX_MODEL_VOCAB_ONLY, &err) : NULL;
		t_ok(g && !m && strstr(err.msg, "'gpt2' is not supported"), "other arch: %s", err.msg);
		ntx_gguf_close(g);
		free(b);
		ntx_gguf_writer_free(w);
	}
}

/* ---- fixtures ---- */

struct want {
	const char *file;
	int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_ctx;
	int64_t n_vocab;
	double rope_base;
	int tied, rope_freqs, vocab_only;
	int64_t file_type;
	uint64_t n_tensors;
};

static const struct want fixtures[] = {
	{ "models/ref-a-f32.gguf", 2, 512, 1536, 4, 2, 128, 2048, 512, 500000, 0, 1, 0, 0, 22 },
	{ "models/ref-a-f16.gguf", 2, 512, 1536, 4, 2, 128, 2048, 512, 500000, 0, 1, 0, 1, 22 },
	{ "models/ref-a-q8_0.gguf", 2, 512, 1536, 4, 2, 128, 2048, 512, 500000, 0, 1, 0, 7, 22 },
	{ "models/ref-a-q6_k.gguf", 2, 512, 1536, 4, 2, 128, 2048, 512, 500000, 0, 1, 0, 18, 22 },
	{ "models/ref-a-q5_k_m.gguf", 2, 512, 1536, 4, 2, 128, 2048, 512, 500000, 0, 1, 0, 17, 22 },
	{ "models/ref-a-q4_k_m.gguf", 2, 512, 1536, 4, 2, 128, 2048, 512, 500000, 0, 1, 0, 15, 22 },
	{ "models/ref-a-q4_0.gguf", 2, 512, 1536, 4, 2, 128, 2048, 512, 500000, 0, 1, 0, 2, 22 },
	{ "models/stories260K.gguf", 5, 64, 172, 8, 4, 8, 128, 512, 10000, 0, 0, 0, -1, 48 },
	{ "tinymodel/tinymodel-f16.gguf", 16, 256, 768, 4, 2, 64, 1024, 8192, 500000, 0, 0, 0, 1, 147 },
	{ "tinymodel/tinymodel-q8_0.gguf", 16, 256, 768, 4, 2, 64, 1024, 8192, 500000, 0, 0, 0, 7, 147 },
	{ "tinymodel/tinymodel-q4_k_m.gguf", 16, 256, 768, 4, 2, 64, 1024, 8192, 500000, 0, 0, 0, 15, 147 },
	{ "vocab/ggml-vocab-llama3.gguf", 32, 4096, 14336, 32, 8, 128, 131072, 128256, 500000, 0, 0, 1, 1, 0 },
	{ "vocab/ggml-vocab-llama-spm.gguf", 32, 4096, 11008, 32, 32, 128, 4096, 32000, 10000, 0, 0, 1, 1, 0 },
};

/* Per-tensor type per the README table for set A (type of attn_v/ffn_down
 * in blk.1 differs for the K_M mixes). */
static void check_set_a_types(const struct ntx_model *m, const char *file)
{
	static const struct {
		const char *tag, *embd, *out, *mid, *v0, *v1;
	} tab[] = {
		{ "f32", "F32", "F32", "F32", "F32", "F32" },
		{ "f16", "F16", "F16", "F16", "F16", "F16" },
		{ "q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0", "Q8_0" },
		{ "q6_k", "Q6_K", "Q6_K", "Q6_K", "Q6_K", "Q6_K" },
		{ "q5_k_m", "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q6_K" },
		{ "q4_k_m", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K" },
		{ "q4_0", "Q4_0", "Q6_K", "Q4_0", "Q4_0", "Q4_0" },
	};
	size_t i;

	for (i = 0; i < sizeof tab / sizeof tab[0]; i++) {
		char tag[32];
		const struct ntx_layer_tensors *l0 = &m->layers[0], *l1 = &m->layers[1];
		int ok;

		snprintf(tag, sizeof tag, "ref-a-%s.gguf", tab[i].tag);
		if (!strstr(file, tag))
			continue;
#define TY(t, want) (strcmp(ntx_type_name((t)->type), want) == 0)
		ok = TY(m->tok_embd, tab[i].embd) && TY(m->output, tab[i].out) &&
		     TY(l0->wq, tab[i].mid) && TY(l1->wk, tab[i].mid) && TY(l1->wo, tab[i].mid) &&
		     TY(l0->w_gate, tab[i].mid) && TY(l1->w_up, tab[i].mid) &&
		     TY(l0->wv, tab[i].v0) && TY(l0->w_down, tab[i].v0) && TY(l1->wv, tab[i].v1) &&
		     TY(l1->w_down, tab[i].v1) && TY(l0->attn_norm, "F32") &&
		     TY(m->rope_freqs, "F32");
#undef TY
		t_ok(ok, "%s: per-tensor types as in the README table", file);
	}
}

/* Every tensor's type, shape, size and offset against tensor_types.json. */
static void check_tensor_json(const struct ntx_model *m, const char *file, json_t *tj)
{
	const char *base = strrchr(file, '/') + 1;
	json_t *e = json_object_get(tj, base), *ts;
	const struct ntx_gguf *g = m->gguf;
	size_t i, bad = 0;

	if (!e)
		return;
	ts = json_object_get(e, "tensors");
	if ((uint64_t)json_array_size(ts) != g->n_tensors)
		bad++;
	for (i = 0; i < json_array_size(ts) && !bad; i++) {
		json_t *t = json_array_get(ts, i), *ne = json_object_get(t, "ne");
		const struct ntx_gguf_tensor *gt =
			ntx_gguf_find_tensor(g, json_string_value(json_object_get(t, "name")));
		size_t d;

		if (!gt || strcmp(ntx_type_name(gt->type), json_string_value(json_object_get(t, "type"))) ||
		    (uint64_t)json_integer_value(json_object_get(t, "n_bytes")) != gt->nbytes ||
		    (uint64_t)json_integer_value(json_object_get(t, "offset")) != gt->file_offset ||
		    json_array_size(ne) != gt->n_dims) {
			t_diag("%s: tensor %zu differs", base, i);
			bad++;
			break;
		}
		for (d = 0; d < gt->n_dims; d++)
			bad += json_integer_value(json_array_get(ne, d)) != gt->ne[d];
	}
	t_ok(!bad && (uint64_t)json_integer_value(json_object_get(e, "size")) == g->file_size,
	     "%s: %llu tensors match tensor_types.json (type, ne, bytes, offset)", base,
	     (unsigned long long)g->n_tensors);
}

static void test_fixtures(void)
{
	char path[4096];
	json_t *tj;
	json_error_t jerr;
	size_t i;
	struct stat st;

	snprintf(path, sizeof path, "%s/models/tensor_types.json", t_fixtures());
	if (!t_need_fixtures("fixture models") ||
	    !t_ok(stat(path, &st) == 0, "fixtures found at %s (set NTX_FIXTURES)", t_fixtures()))
		return;
	tj = json_load_file(path, 0, &jerr);
	t_ok(tj != NULL, "tensor_types.json parses");
	for (i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
		const struct want *w = &fixtures[i];
		struct ntx_err err;
		struct ntx_model *m;
		const struct ntx_llama_config *c;

		snprintf(path, sizeof path, "%s/%s", t_fixtures(), w->file);
		m = ntx_model_open(path, w->vocab_only ? NTX_MODEL_VOCAB_ONLY : 0, &err);
		if (!t_ok(m != NULL, "%s opens: %s", w->file, m ? "" : err.msg))
			continue;
		c = &m->cfg;
		t_ok(c->n_layer == w->n_layer && c->n_embd == w->n_embd && c->n_ff == w->n_ff &&
			     c->n_head == w->n_head && c->n_head_kv == w->n_head_kv &&
			     c->head_dim == w->head_dim && c->n_rot == w->head_dim &&
			     c->n_ctx_train == w->n_ctx && c->n_vocab == w->n_vocab &&
			     c->rope_base == w->rope_base && fabs(c->rms_eps - 1e-5) < 1e-9 &&
			     c->file_type == w->file_type && m->gguf->n_tensors == w->n_tensors &&
			     m->gguf->version == 3 && m->gguf->alignment == 32,
		     "%s: %d layers, embd %d, ff %d, heads %d/%d, head_dim %d, ctx %d, vocab %lld, rope %g, file_type %lld",
		     w->file, c->n_layer, c->n_embd, c->n_ff, c->n_head, c->n_head_kv, c->head_dim,
		     c->n_ctx_train, (long long)c->n_vocab, c->rope_base, (long long)c->file_type);
		if (!w->vocab_only) {
			t_ok(m->output_tied == w->tied && (m->rope_freqs != NULL) == w->rope_freqs &&
				     m->layer_bytes + m->nonlayer_bytes <= m->gguf->data_bytes &&
				     m->layers[w->n_layer - 1].n_tensors == 9,
			     "%s: output %s, rope_freqs %s, 9 tensors per layer", w->file,
			     m->output_tied ? "tied" : "separate", m->rope_freqs ? "present" : "absent");
			if (m->rope_freqs) {
				const float *rf = m->rope_freqs->data;

				t_ok(m->rope_freqs->ne[0] == 64 && rf[0] == 1.0f && rf[63] == 8.0f &&
					     ntx_fp32_to_bits(rf[29]) == 0x3f9a8ed5u,
				     "%s: rope_freqs values (1 ... 1.2074839 ... 8)", w->file);
			}
			check_set_a_types(m, w->file);
			if (tj)
				check_tensor_json(m, w->file, tj);
		} else {
			const struct ntx_gguf_kv *tok = ntx_gguf_find(m->gguf, "tokenizer.ggml.tokens");

			t_ok(m->layers == NULL && tok && tok->val.n == (uint64_t)w->n_vocab &&
				     tok->str_index,
			     "%s: vocabulary only, %llu tokens", w->file,
			     tok ? (unsigned long long)tok->val.n : 0ull);
		}
		if (strstr(w->file, "stories260K")) {
			t_ok(!ntx_gguf_find(m->gguf, "llama.rope.freq_base") &&
				     !ntx_gguf_find(m->gguf, "general.file_type") &&
				     !ntx_gguf_find(m->gguf, "llama.vocab_size"),
			     "stories260K: rope base, file type and vocab size come from defaults");
		}
		if (strstr(w->file, "llama3")) {
			const struct ntx_gguf_kv *mg = ntx_gguf_find(m->gguf, "tokenizer.ggml.merges");
			struct ntx_gguf_str s = mg ? ntx_gguf_arr_str(mg, 0) : (struct ntx_gguf_str){ "", 0 };

			t_ok(mg && mg->val.n == 280147 && s.len == 5 && memcmp(s.p, "\xc4\xa0 \xc4\xa0", 5) == 0,
			     "llama3 vocab: 280147 merges, first 'Ġ Ġ'");
		}
		ntx_model_close(m);
	}
	json_decref(tj);
}

int main(void)
{
	test_model();
	test_fixtures();
	return t_done();
}
