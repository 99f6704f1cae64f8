/* test_inspect.c - the ntx.inspect document (doc/inspect-json.md): key order,
 * value conversions (u64 beyond int64, NaN, invalid UTF-8), array summaries,
 * layer grouping with and without a usable model, vocabulary-only files, and
 * agreement with the model view on every fixture model. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_write.h"
#include "inspect.h"
#include "model.h"
#include "t.h"
#include "types.h"

static json_t *doc_of(struct ntx_gguf_writer *w, unsigned flags, unsigned char **buf,
		      struct ntx_gguf **g)
{
	struct ntx_err err;
	size_t len;
	json_t *d = NULL;

	*g = NULL;
	if (ntx_gguf_writer_write_mem(w, buf, &len, &err) ||
	    !(*g = ntx_gguf_open_buffer(*buf, len, &err)) ||
	    !(d = ntx_inspect_json(*g, "x.gguf", flags, &err)))
		t_diag("doc_of: %s", err.msg);
	return d;
}

static void test_top_level(void)
{
	static const char *keys[] = {
		"format", "version", "path", "kind", "file_size_bytes", "gguf_version",
		"alignment", "data_offset_bytes", "fingerprint", "n_kv", "n_tensors", "metadata",
		"model", "model_error", "tensors", "layers", "layer_bytes", "nonlayer_bytes",
		"nonlayer", "quant_mix", "experts",
	};
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	struct ntx_err err;
	unsigned char *buf = NULL;
	struct ntx_gguf *g;
	json_t *d;
	const char *k;
	json_t *v;
	size_t i = 0;
	int order = 1;
	float f[64] = { 0 };
	int64_t ne[2] = { 32, 2 };

	ntx_gguf_writer_add_str(w, "general.architecture", "gpt2", &err);
	ntx_gguf_writer_add_tensor(w, "blk.3.x.weight", NTX_TYPE_F32, 2, ne, f, &err);
	ntx_gguf_writer_add_tensor(w, "blk.1.y.weight", NTX_TYPE_F32, 2, ne, f, &err);
	ntx_gguf_writer_add_tensor(w, "other.weight", NTX_TYPE_F16, 2, ne, f, &err);
	d = doc_of(w, 0, &buf, &g);
	if (!t_ok(d != NULL, "document built"))
		goto out;
	json_object_foreach(d, k, v) {
		if (i >= sizeof keys / sizeof keys[0] || strcmp(k, keys[i]))
			order = 0;
		i++;
	}
	t_ok(order && i == sizeof keys / sizeof keys[0], "top-level keys in the documented order");
	t_ok(strcmp(json_string_value(json_object_get(d, "format")), "ntx.inspect") == 0 &&
		     json_integer_value(json_object_get(d, "version")) == 1 &&
		     strcmp(json_string_value(json_object_get(d, "path")), "x.gguf") == 0 &&
		     json_integer_value(json_object_get(d, "n_tensors")) == 3 &&
		     strlen(json_string_value(json_object_get(d, "fingerprint"))) == 16,
	     "format, version, path, counts, fingerprint");
	t_ok(json_is_null(json_object_get(d, "model")) &&
		     strstr(json_string_value(json_object_get(d, "model_error")), "gpt2"),
	     "not a Llama model: model null, model_error '%s'",
	     json_string_value(json_object_get(d, "model_error")));
	{
		/* without a config, layers are the blk.N that occur */
		json_t *l = json_object_get(d, "layers");
		json_t *t = json_object_get(d, "tensors");

		t_ok(json_array_size(l) == 2 &&
			     json_integer_value(json_object_get(json_array_get(l, 0), "index")) == 1 &&
			     json_integer_value(json_object_get(json_array_get(l, 1), "index")) == 3 &&
			     json_integer_value(json_object_get(json_array_get(t, 0), "layer")) == 3 &&
			     json_is_null(json_object_get(json_array_get(t, 2), "layer")) &&
			     json_integer_value(json_object_get(d, "layer_bytes")) == 512 &&
			     json_integer_value(json_object_get(d, "nonlayer_bytes")) == 128,
		     "no config: layers 1 and 3 from tensor names, other.weight non-layer");
		t_ok(json_integer_value(json_object_get(json_object_get(d, "quant_mix"), "F32")) == 512 &&
			     json_integer_value(json_object_get(json_object_get(d, "quant_mix"), "F16")) == 128,
		     "quant mix sums bytes per type");
		t_ok(json_integer_value(json_object_get(json_array_get(t, 1), "offset_bytes")) ==
			     (json_int_t)g->tensors[1].file_offset &&
			     json_integer_value(json_array_get(json_object_get(json_array_get(t, 1), "shape"), 1)) == 2,
		     "tensor offsets are absolute, shapes in ggml order");
	}
out:
	json_decref(d);
	ntx_gguf_close(g);
	free(buf);
	ntx_gguf_writer_free(w);
}

static void test_values(void)
{
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	struct ntx_gguf_vbuf v = { 0 };
	struct ntx_err err;
	unsigned char *buf = NULL;
	struct ntx_gguf *g;
	json_t *d, *md, *x;
	uint32_t many[20];
	float nan = NAN;
	double inf = -INFINITY;
	int i;

	for (i = 0; i < 20; i++)
		many[i] = (uint32_t)i * 3;
	ntx_gguf_writer_add_u64(w, "a.big", UINT64_MAX, &err);
	ntx_gguf_writer_add_u64(w, "a.small", 42, &err);
	ntx_gguf_writer_add_scalar(w, "a.nan", NTX_GGUF_F32, &nan, &err);
	ntx_gguf_writer_add_scalar(w, "a.inf", NTX_GGUF_F64, &inf, &err);
	ntx_gguf_writer_add_f32(w, "a.half", 0.5f, &err);
	ntx_gguf_writer_add_bool(w, "a.yes", 1, &err);
	ntx_gguf_writer_add_strn(w, "a.bad_utf8", "ok\xff\xc3(\0z", 7, &err);
	ntx_gguf_writer_add_str(w, "a.key\xe9", "latin1 key", &err);
	ntx_gguf_writer_add_array(w, "a.many", NTX_GGUF_U32, many, 20, &err);
	ntx_gguf_writer_add_array(w, "a.sixteen", NTX_GGUF_U32, many, 16, &err);
	/* an array of 17 arrays of 2 strings: summarised outside, full inside */
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_ARRAY, 17);
	for (i = 0; i < 17; i++) {
		ntx_gguf_vbuf_arr(&v, NTX_GGUF_STRING, 2);
		ntx_gguf_vbuf_str(&v, "p", 1);
		ntx_gguf_vbuf_str(&v, "q", 1);
	}
	ntx_gguf_writer_add_raw(w, "a.nested", NTX_GGUF_ARRAY, v.p, v.len, &err);
	d = doc_of(w, 0, &buf, &g);
	md = json_object_get(d, "metadata");
	t_ok(md != NULL, "metadata object");
	t_ok(json_is_string(json_object_get(md, "a.big")) &&
		     strcmp(json_string_value(json_object_get(md, "a.big")), "18446744073709551615") == 0 &&
		     json_integer_value(json_object_get(md, "a.small")) == 42,
	     "u64 beyond int64 is a decimal string, others integers");
	t_ok(strcmp(json_string_value(json_object_get(md, "a.nan")), "NaN") == 0 &&
		     strcmp(json_string_value(json_object_get(md, "a.inf")), "-Infinity") == 0 &&
		     json_real_value(json_object_get(md, "a.half")) == 0.5 &&
		     json_is_true(json_object_get(md, "a.yes")),
	     "non-finite floats are strings; finite ones numbers; bools");
	x = json_object_get(md, "a.bad_utf8");
	t_ok(x && json_string_length(x) == 13 &&
		     memcmp(json_string_value(x), "ok\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbdz", 13) == 0,
	     "invalid UTF-8 and NUL become U+FFFD");
	t_ok(json_object_get(md, "a.key\xef\xbf\xbd") != NULL, "keys are made valid UTF-8 too");
	x = json_object_get(md, "a.many");
	t_ok(json_is_object(x) && strcmp(json_string_value(json_object_get(x, "array_of")), "u32") == 0 &&
		     json_integer_value(json_object_get(x, "n")) == 20 &&
		     json_array_size(json_object_get(x, "head")) == 8 &&
		     json_integer_value(json_array_get(json_object_get(x, "head"), 7)) == 21,
	     "an array of 20 is summarised: array_of, n, head of 8");
	t_ok(json_array_size(json_object_get(md, "a.sixteen")) == 16, "an array of 16 is shown whole");
	x = json_object_get(md, "a.nested");
	t_ok(json_is_object(x) && strcmp(json_string_value(json_object_get(x, "array_of")), "array") == 0 &&
		     json_array_size(json_array_get(json_object_get(x, "head"), 0)) == 2,
	     "nested arrays: summarised outside, elements recursively");
	json_decref(d);
	ntx_gguf_close(g);
	free(buf);
	d = doc_of(w, NTX_INSPECT_FULL, &buf, &g);
	md = json_object_get(d, "metadata");
	t_ok(json_array_size(json_object_get(md, "a.many")) == 20 &&
		     json_array_size(json_object_get(md, "a.nested")) == 17,
	     "--full: every element");
	{
		char *s = json_dumps(d, JSON_INDENT(2));
		json_t *back = s ? json_loads(s, 0, NULL) : NULL;

		t_ok(back && json_equal(back, d),
		     "the document serialises and parses back (jansson default flags)");
		json_decref(back);
		free(s);
	}
	json_decref(d);
	ntx_gguf_close(g);
	free(buf);
	ntx_gguf_vbuf_free(&v);
	ntx_gguf_writer_free(w);
}

/* Every fixture: the document agrees with the model view. */
static void test_fixture_docs(void)
{
	static const char *files[] = {
		"models/ref-a-q4_k_m.gguf", "models/ref-a-q5_k_m.gguf", "models/stories260K.gguf",
		"tinymodel/tinymodel-q4_k_m.gguf", "vocab/ggml-vocab-llama3.gguf",
		"vocab/ggml-vocab-llama-spm.gguf",
	};
	size_t i;

	if (!t_need_fixtures("fixture documents"))
		return;
	for (i = 0; i < sizeof files / sizeof files[0]; i++) {
		char path[4096];
		struct ntx_err err;
		struct ntx_model *m;
		json_t *d, *mo, *layers;
		int ok;
		size_t l;
		json_int_t mix = 0;
		const char *k;
		json_t *v;

		snprintf(path, sizeof path, "%s/%s", t_fixtures(), files[i]);
		m = ntx_model_open(path, NTX_MODEL_VOCAB_ONLY, &err);
		d = ntx_inspect_file(path, 0, &err);
		if (!t_ok(m && d, "%s: model and document: %s", files[i], err.msg)) {
			ntx_model_close(m);
			json_decref(d);
			continue;
		}
		mo = json_object_get(d, "model");
		layers = json_object_get(d, "layers");
		ok = json_integer_value(json_object_get(mo, "n_layer")) == m->cfg.n_layer &&
		     json_integer_value(json_object_get(mo, "n_head_kv")) == m->cfg.n_head_kv &&
		     json_integer_value(json_object_get(mo, "n_vocab")) == m->cfg.n_vocab &&
		     json_real_value(json_object_get(mo, "rope_base")) == m->cfg.rope_base &&
		     json_is_true(json_object_get(mo, "has_rope_freqs")) == (m->rope_freqs != NULL) &&
		     strcmp(json_string_value(json_object_get(d, "fingerprint")), m->fingerprint_hex) == 0 &&
		     (json_int_t)m->gguf->file_size == json_integer_value(json_object_get(d, "file_size_bytes")) &&
		     json_integer_value(json_object_get(d, "layer_bytes")) == (json_int_t)m->layer_bytes &&
		     json_integer_value(json_object_get(d, "nonlayer_bytes")) == (json_int_t)m->nonlayer_bytes;
		if (m->layers) {
			ok = ok && json_array_size(layers) == (size_t)m->cfg.n_layer;
			for (l = 0; ok && l < json_array_size(layers); l++)
				ok = json_integer_value(json_object_get(json_array_get(layers, l), "bytes")) ==
					     (json_int_t)m->layers[l].bytes &&
				     json_integer_value(json_object_get(json_array_get(layers, l), "n_tensors")) == 9;
		} else {
			ok = ok && json_array_size(layers) == 0 &&
			     json_array_size(json_object_get(d, "tensors")) == 0;
		}
		json_object_foreach(json_object_get(d, "quant_mix"), k, v)
			mix += json_integer_value(v);
		ok = ok && mix == (json_int_t)(m->layer_bytes + m->nonlayer_bytes);
		t_ok(ok, "%s: document agrees with the model view (layers %zu)", files[i],
		     json_array_size(layers));
		json_decref(d);
		ntx_model_close(m);
	}
	{
		struct ntx_err err;

		t_ok(ntx_inspect_file("/nonexistent.gguf", 0, &err) == NULL &&
			     strstr(err.msg, "No such file"),
		     "missing file: %s", err.msg);
	}
}

/* The moe fixtures: expert bytes and what a token reads, against the
 * sizes that moe/tensor_types.json lists (written by gguf-py, not by ntx).
 * qwen3moe-tiny-q4_k_m has a Q5_0 tensor: while ntx lacks Q5_0, model is
 * null but the experts are still reported from the configuration. */
static void test_moe_docs(void)
{
	static const struct {
		const char *file;
		int E, k;
		const char *rope;
		int qk;
	} f[] = { { "mixtral-tiny-q8_0.gguf", 8, 2, "norm", 0 },
		  { "mixtral-tiny-q4_k_m.gguf", 8, 2, "norm", 0 },
		  { "qwen3moe-tiny-q8_0.gguf", 16, 4, "neox", 1 },
		  { "qwen3moe-tiny-q4_k_m.gguf", 16, 4, "neox", 1 } };
	char path[4096];
	json_t *tt;
	json_error_t je;
	size_t i, j;

	snprintf(path, sizeof path, "%s/moe/tensor_types.json", t_fixtures());
	tt = json_load_file(path, 0, &je);
	if (!t_ok(tt != NULL, "moe/tensor_types.json (%s)", je.text))
		return;
	for (i = 0; i < sizeof f / sizeof f[0]; i++) {
		json_t *tens = json_object_get(json_object_get(tt, f[i].file), "tensors"), *d, *ex, *mo;
		uint64_t total = 0, eb = 0, np = 0, ep = 0, lb[2] = { 0, 0 };
		struct ntx_err err;
		int ok;

		for (j = 0; j < json_array_size(tens); j++) {
			json_t *t = json_array_get(tens, j), *ne = json_object_get(t, "ne");
			const char *name = json_string_value(json_object_get(t, "name"));
			uint64_t b = (uint64_t)json_integer_value(json_object_get(t, "n_bytes")), n = 1;
			size_t q;

			for (q = 0; q < json_array_size(ne); q++)
				n *= (uint64_t)json_integer_value(json_array_get(ne, q));
			total += b;
			np += n;
			if (strstr(name, "_exps.weight")) {
				eb += b;
				ep += n;
				lb[name[4] - '0'] += b;
			}
		}
		snprintf(path, sizeof path, "%s/moe/%s", t_fixtures(), f[i].file);
		d = ntx_inspect_file(path, 0, &err);
		if (!t_ok(d != NULL && total > 0, "%s: document (%s)", f[i].file, d ? "" : err.msg))
			continue;
		ex = json_object_get(d, "experts");
		mo = json_object_get(d, "model");
		ok = json_integer_value(json_object_get(ex, "n_expert")) == f[i].E &&
		     json_integer_value(json_object_get(ex, "n_expert_used")) == f[i].k &&
		     json_integer_value(json_object_get(ex, "expert_bytes")) == (json_int_t)eb &&
		     json_integer_value(json_object_get(ex, "bytes_per_expert")) == (json_int_t)(eb / f[i].E) &&
		     json_integer_value(json_object_get(ex, "dense_bytes")) == (json_int_t)(total - eb) &&
		     json_integer_value(json_object_get(ex, "active_bytes")) ==
			     (json_int_t)(total - eb + eb / f[i].E * f[i].k) &&
		     json_integer_value(json_object_get(ex, "n_params")) == (json_int_t)np &&
		     json_integer_value(json_object_get(ex, "active_params")) ==
			     (json_int_t)(np - ep + ep / f[i].E * f[i].k);
		for (j = 0; j < 2; j++) {
			json_t *l = json_array_get(json_object_get(d, "layers"), j);

			ok = ok && json_integer_value(json_object_get(l, "expert_bytes")) == (json_int_t)lb[j] &&
			     json_integer_value(json_object_get(l, "bytes_per_expert")) ==
				     (json_int_t)(lb[j] / f[i].E);
		}
		t_ok(ok, "%s: experts %d (%d used), %llu expert bytes, a token reads %lld of %llu bytes",
		     f[i].file, f[i].E, f[i].k, (unsigned long long)eb,
		     (long long)json_integer_value(json_object_get(ex, "active_bytes")),
		     (unsigned long long)total);
		if (json_is_object(mo))
			t_ok(json_integer_value(json_object_get(mo, "n_expert")) == f[i].E &&
			     json_integer_value(json_object_get(mo, "n_expert_used")) == f[i].k &&
			     !strcmp(json_string_value(json_object_get(mo, "rope_style")), f[i].rope) &&
			     json_is_true(json_object_get(mo, "qk_norm")) == f[i].qk &&
			     json_real_value(json_object_get(mo, "expert_weights_scale")) == 0,
			     "%s: model: rope_style %s, qk_norm %d, experts", f[i].file, f[i].rope, f[i].qk);
		json_decref(d);
	}
	/* a dense model: experts null, no per-layer expert keys */
	snprintf(path, sizeof path, "%s/models/ref-a-q8_0.gguf", t_fixtures());
	{
		struct ntx_err err;
		json_t *d = ntx_inspect_file(path, 0, &err);

		t_ok(d && json_is_null(json_object_get(d, "experts")) &&
		     !json_object_get(json_array_get(json_object_get(d, "layers"), 0), "expert_bytes") &&
		     json_integer_value(json_object_get(json_object_get(d, "model"), "n_expert")) == 0,
		     "dense model: experts null, no expert_bytes in layers, n_expert 0");
		json_decref(d);
	}
	json_decref(tt);
}

int main(void)
{
	test_top_level();
	test_values();
	test_fixture_docs();
	if (t_need_fixtures("moe inspect"))
		test_moe_docs();
	return t_done();
}
