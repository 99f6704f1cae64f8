/* inspect.c - build the ntx.inspect document (see inspect.h and
 * doc/inspect-json.md). Every value is built with jansson; strings from the
 * file are made valid UTF-8 first (invalid bytes become U+FFFD), since JSON
 * text must be UTF-8 and jansson refuses anything else; NUL bytes become
 * U+FFFD as well, since readers (jansson by default) refuse "\u0000". */
#include "inspect.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "types.h"

/* ---- strings ---- */

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0 if invalid
 * or NUL (which jansson's reader refuses by default, so ntx-plan would). */
static size_t utf8_len(const unsigned char *p, uint64_t n)
{
	uint32_t c;
	size_t len, i;

	if (p[0] < 0x80)
		return p[0] ? 1 : 0;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, c = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, c = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, c = p[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (p[i] & 0x3f);
	}
	if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10ffff ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return len;
}

/* A JSON string of the bytes s[0..len), invalid UTF-8 and NUL bytes each
 * replaced by U+FFFD. NULL if out of memory. */
static json_t *jstr(const char *s, uint64_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	uint64_t i = 0;
	char *buf, *q;
	json_t *j;

	while (i < len) {
		size_t k = utf8_len(p + i, len - i);

		if (!k)
			break;
		i += k;
	}
	if (i == len)
		return json_stringn(s, (size_t)len);
	if (len > SIZE_MAX / 3)
		return NULL;
	buf = malloc((size_t)len * 3 + 1); /* each bad byte -> 3 bytes */
	if (!buf)
		return NULL;
	q = buf;
	for (i = 0; i < len;) {
		size_t k = utf8_len(p + i, len - i);

		if (k) {
			memcpy(q, p + i, k);
			q += k;
			i += k;
		} else {
			memcpy(q, "\xef\xbf\xbd", 3);
			q += 3;
			i++;
		}
	}
	j = json_stringn(buf, (size_t)(q - buf));
	free(buf);
	return j;
}

/* Set obj[key] (key given as bytes) to v, stealing v. Returns 0 or -1. */
static int setn(json_t *obj, const char *key, uint64_t len, json_t *v)
{
	json_t *k = jstr(key, len);
	int rc;

	if (!k || !v) {
		json_decref(k);
		json_decref(v);
		return -1;
	}
	rc = json_object_setn_new(obj, json_string_value(k), json_string_length(k), v);
	json_decref(k);
	return rc;
}

/* obj[key] = v, stealing v; a NULL v (allocation failure) is an error. */
static int set(json_t *obj, const char *key, json_t *v)
{
	if (!v)
		return -1;
	return json_object_set_new(obj, key, v);
}

static json_t *juint(uint64_t v)
{
	char buf[24];

	if (v <= (uint64_t)INT64_MAX)
		return json_integer((json_int_t)v);
	/* beyond int64: an exact decimal string (see doc/inspect-json.md) */
	snprintf(buf, sizeof buf, "%" PRIu64, v);
	return json_string(buf);
}

static json_t *jreal(double d)
{
	if (isnan(d))
		return json_string("NaN");
	if (isinf(d))
		return json_string(d > 0 ? "Infinity" : "-Infinity");
	return json_real(d);
}

/* ---- metadata values ---- */

static json_t *value_json(const struct ntx_gguf_value *v, unsigned flags);

static json_t *array_json(const struct ntx_gguf_value *v, unsigned flags)
{
	int full = (flags & NTX_INSPECT_FULL) || v->n <= NTX_INSPECT_ARRAY_MAX;
	uint64_t n = full ? v->n : NTX_INSPECT_ARRAY_HEAD, i;
	struct ntx_gguf_value e;
	json_t *arr = json_array(), *sum;

	if (!arr)
		return NULL;
	for (i = 0; i < n; i++) {
		if (ntx_gguf_array_next(v, i, &e) ||
		    json_array_append_new(arr, value_json(&e, flags))) {
			json_decref(arr);
			return NULL;
		}
	}
	if (full)
		return arr;
	sum = json_object();
	if (!sum || set(sum, "array_of", json_string(ntx_gguf_vtype_name(v->elem_type))) ||
	    set(sum, "n", juint(v->n)) || json_object_set_new(sum, "head", arr)) {
		json_decref(sum);
		return NULL;
	}
	return sum;
}

static json_t *value_json(const struct ntx_gguf_value *v, unsigned flags)
{
	uint64_t u;
	int64_t s;
	double d;
	struct ntx_gguf_str str;

	switch (v->type) {
	case NTX_GGUF_U8:
	case NTX_GGUF_U16:
	case NTX_GGUF_U32:
	case NTX_GGUF_U64:
		return ntx_gguf_value_u64(v, &u) ? NULL : juint(u);
	case NTX_GGUF_I8:
	case NTX_GGUF_I16:
	case NTX_GGUF_I32:
	case NTX_GGUF_I64:
		return ntx_gguf_value_i64(v, &s) ? NULL : json_integer((json_int_t)s);
	case NTX_GGUF_F32:
	case NTX_GGUF_F64:
		return ntx_gguf_value_f64(v, &d) ? NULL : jreal(d);
	case NTX_GGUF_BOOL:
		return json_boolean(v->p[0] != 0);
	case NTX_GGUF_STRING:
		return ntx_gguf_value_str(v, &str) ? NULL : jstr(str.p, str.len);
	case NTX_GGUF_ARRAY:
		return array_json(v, flags);
	default:
		return NULL;
	}
}

static json_t *metadata_json(const struct ntx_gguf *g, unsigned flags)
{
	json_t *md = json_object();
	uint64_t i;

	if (!md)
		return NULL;
	for (i = 0; i < g->n_kv; i++) {
		const struct ntx_gguf_kv *kv = &g->kv[i];

		if (setn(md, kv->key.p, kv->key.len, value_json(&kv->val, flags))) {
			json_decref(md);
			return NULL;
		}
	}
	return md;
}

/* ---- model ---- */

static json_t *model_json(const struct ntx_model *m)
{
	const struct ntx_llama_config *c = &m->cfg;
	json_t *o = json_object();

	if (!o || set(o, "arch", json_string(c->arch)) ||
	    set(o, "n_layer", json_integer(c->n_layer)) ||
	    set(o, "n_embd", json_integer(c->n_embd)) || set(o, "n_ff", json_integer(c->n_ff)) ||
	    set(o, "n_head", json_integer(c->n_head)) ||
	    set(o, "n_head_kv", json_integer(c->n_head_kv)) ||
	    set(o, "head_dim", json_integer(c->head_dim)) ||
	    set(o, "n_rot", json_integer(c->n_rot)) ||
	    set(o, "n_ctx_train", json_integer(c->n_ctx_train)) ||
	    set(o, "n_vocab", json_integer(c->n_vocab)) ||
	    set(o, "rope_base", jreal(c->rope_base)) ||
	    set(o, "rope_freq_scale", jreal(c->rope_freq_scale)) ||
	    set(o, "rms_eps", jreal(c->rms_eps)) ||
	    set(o, "has_rope_freqs", json_boolean(m->rope_freqs != NULL)) ||
	    set(o, "output_tied", json_boolean(m->output_tied)) ||
	    set(o, "file_type", c->file_type < 0 ? json_null() : json_integer(c->file_type)) ||
	    set(o, "rope_style", json_string(c->rope_style == NTX_ROPE_NEOX ? "neox" : "norm")) ||
	    set(o, "qk_norm", json_boolean(c->qk_norm)) ||
	    set(o, "n_expert", json_integer(c->n_expert)) ||
	    set(o, "n_expert_used", json_integer(c->n_expert_used)) ||
	    set(o, "expert_weights_scale", jreal(c->expert_weights_scale))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* ---- tensors and layers ---- */

struct layer_acc {
	uint64_t bytes;
	uint64_t expert_bytes; /* the layer's ffn_*_exps tensors */
	int n_tensors;
	uint64_t type_bytes[NTX_TYPE_COUNT];
};

/* {"TYPE": bytes, ...} in type-id order, for the nonzero entries. */
static json_t *types_json(const uint64_t *tb)
{
	json_t *o = json_object();
	int t;

	if (!o)
		return NULL;
	for (t = 0; t < NTX_TYPE_COUNT; t++) {
		if (tb[t] && set(o, ntx_type_name((uint32_t)t), juint(tb[t]))) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* Slot of layer li in the sorted ids, or -1. */
static int slot_of(const int *ids, int n, int li)
{
	const int *p = bsearch(&li, ids, (size_t)n, sizeof *ids, cmp_int);

	return p ? (int)(p - ids) : -1;
}

/* Is t one of a layer's expert tensors (blk.N.ffn_{gate,up,down}_exps)? */
static int is_expert_tensor(const struct ntx_gguf_tensor *t)
{
	size_t n = strlen(t->name);

	return n > 12 && strcmp(t->name + n - 12, "_exps.weight") == 0 &&
	       ntx_tensor_layer(t->name) >= 0;
}

static uint64_t n_elements(const struct ntx_gguf_tensor *t)
{
	uint64_t n = 1;
	uint32_t d;

	for (d = 0; d < t->n_dims; d++)
		n *= t->ne[d];
	return n;
}

/* The "experts" object (null without experts): what a token reads is the
 * dense part and k of the E experts of every layer. */
static json_t *experts_json(int n_expert, int n_used, uint64_t total_bytes, uint64_t exp_bytes,
			    uint64_t n_params, uint64_t exp_params)
{
	json_t *o;
	uint64_t dense = total_bytes - exp_bytes, dense_p = n_params - exp_params;

	if (n_expert <= 0 || exp_bytes == 0)
		return json_null();
	o = json_object();
	if (!o || set(o, "n_expert", json_integer(n_expert)) ||
	    set(o, "n_expert_used", json_integer(n_used)) ||
	    set(o, "expert_bytes", juint(exp_bytes)) ||
	    set(o, "bytes_per_expert", juint(exp_bytes / (uint64_t)n_expert)) ||
	    set(o, "dense_bytes", juint(dense)) ||
	    set(o, "active_bytes", juint(dense + exp_bytes / (uint64_t)n_expert * (uint64_t)n_used)) ||
	    set(o, "n_params", juint(n_params)) ||
	    set(o, "active_params",
		juint(dense_p + exp_params / (uint64_t)n_expert * (uint64_t)n_used))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* n_layer: from the model config when it is readable (layers 0..n_layer-1,
 * blk.N beyond that are not layer tensors), else -1 (then the layers are the
 * blk.N indices that occur). n_expert, n_used: the config's (0: dense). */
static int add_tensors(json_t *doc, const struct ntx_gguf *g, int n_layer, int n_expert,
		       int n_used)
{
	json_t *tensors = json_array(), *layers = json_array(), *nonlayer = json_array();
	struct layer_acc *acc = NULL;
	uint64_t mix[NTX_TYPE_COUNT] = { 0 }, lbytes = 0, nlbytes = 0, i;
	uint64_t exp_bytes = 0, n_params = 0, exp_params = 0;
	int *ids = NULL, n_ids = 0, l, rc = -1;

	if (!tensors || !layers || !nonlayer)
		goto out;
	if (g->n_tensors) {
		size_t cap = n_layer >= 0 ? (size_t)n_layer : (size_t)g->n_tensors;

		ids = malloc((cap ? cap : 1) * sizeof *ids);
		if (!ids)
			goto out;
		if (n_layer >= 0) {
			for (l = 0; l < n_layer; l++)
				ids[n_ids++] = l;
		} else {
			for (i = 0; i < g->n_tensors; i++) {
				int li = ntx_tensor_layer(g->tensors[i].name);

				if (li >= 0)
					ids[n_ids++] = li;
			}
			qsort(ids, (size_t)n_ids, sizeof *ids, cmp_int);
			for (l = 0, i = 0; l < n_ids; l++) { /* unique */
				if (i == 0 || ids[i - 1] != ids[l])
					ids[i++] = ids[l];
			}
			n_ids = (int)i;
		}
		acc = calloc((size_t)(n_ids ? n_ids : 1), sizeof *acc);
		if (!acc)
			goto out;
	}
	for (i = 0; i < g->n_tensors; i++) {
		const struct ntx_gguf_tensor *t = &g->tensors[i];
		int li = ntx_tensor_layer(t->name);
		int sl = li >= 0 ? slot_of(ids, n_ids, li) : -1;
		json_t *o = json_object(), *shape = json_array();
		uint32_t d;

		if (!o || !shape) {
			json_decref(o);
			json_decref(shape);
			goto out;
		}
		for (d = 0; d < t->n_dims; d++) {
			if (json_array_append_new(shape, json_integer(t->ne[d]))) {
				json_decref(o);
				json_decref(shape);
				goto out;
			}
		}
		if (set(o, "name", jstr(t->name, strlen(t->name))) ||
		    set(o, "type", json_string(ntx_type_name(t->type))) ||
		    json_object_set_new(o, "shape", shape) ||
		    set(o, "offset_bytes", juint(t->file_offset)) || set(o, "bytes", juint(t->nbytes)) ||
		    set(o, "layer", sl >= 0 ? json_integer(li) : json_null()) ||
		    json_array_append_new(tensors, o))
			goto out;
		/* sums cannot overflow: every tensor lies inside the file */
		mix[t->type] += t->nbytes;
		n_params += n_elements(t);
		if (sl >= 0 && n_expert > 0 && is_expert_tensor(t)) {
			acc[sl].expert_bytes += t->nbytes;
			exp_bytes += t->nbytes;
			exp_params += n_elements(t);
		}
		if (sl >= 0) {
			acc[sl].bytes += t->nbytes;
			acc[sl].n_tensors++;
			acc[sl].type_bytes[t->type] += t->nbytes;
			lbytes += t->nbytes;
		} else {
			o = json_object();
			if (!o || set(o, "name", jstr(t->name, strlen(t->name))) ||
			    set(o, "type", json_string(ntx_type_name(t->type))) ||
			    set(o, "bytes", juint(t->nbytes)) || json_array_append_new(nonlayer, o))
				goto out;
			nlbytes += t->nbytes;
		}
	}
	for (l = 0; l < n_ids; l++) {
		json_t *o = json_object();

		if (!o || set(o, "index", json_integer(ids[l])) ||
		    set(o, "bytes", juint(acc[l].bytes)) ||
		    set(o, "n_tensors", json_integer(acc[l].n_tensors)) ||
		    set(o, "types", types_json(acc[l].type_bytes)) ||
		    (exp_bytes && (set(o, "expert_bytes", juint(acc[l].expert_bytes)) ||
				   set(o, "bytes_per_expert",
				       juint(acc[l].expert_bytes / (uint64_t)n_expert)))) ||
		    json_array_append_new(layers, o))
			goto out;
	}
	if (json_object_set(doc, "tensors", tensors) || json_object_set(doc, "layers", layers) ||
	    set(doc, "layer_bytes", juint(lbytes)) || set(doc, "nonlayer_bytes", juint(nlbytes)) ||
	    json_object_set(doc, "nonlayer", nonlayer) || set(doc, "quant_mix", types_json(mix)) ||
	    set(doc, "experts", experts_json(n_expert, n_used, lbytes + nlbytes, exp_bytes, n_params,
					     exp_params)))
		goto out;
	rc = 0;
out:
	free(acc);
	free(ids);
	json_decref(tensors);
	json_decref(layers);
	json_decref(nonlayer);
	return rc;
}

/* ---- document ---- */

void ntx_inspect_fingerprint_hex(const struct ntx_gguf *g, char buf[17])
{
	snprintf(buf, 17, "%016" PRIx64, ntx_gguf_fingerprint(g));
}

json_t *ntx_inspect_json(struct ntx_gguf *g, const char *path, unsigned flags,
			 struct ntx_err *err)
{
	json_t *doc = json_object();
	struct ntx_model *m;
	struct ntx_err merr;
	struct ntx_llama_config cfg;
	char fp[17];
	int n_layer = -1, n_expert = 0, n_used = 0;

	ntx_inspect_fingerprint_hex(g, fp);
	if (!doc || set(doc, "format", json_string(NTX_INSPECT_FORMAT)) ||
	    set(doc, "version", json_integer(NTX_INSPECT_VERSION)) ||
	    set(doc, "path", path ? jstr(path, strlen(path)) : json_null()) ||
	    set(doc, "kind", json_string("gguf")) ||
	    set(doc, "file_size_bytes", juint(g->file_size)) ||
	    set(doc, "gguf_version", json_integer(g->version)) ||
	    set(doc, "alignment", json_integer(g->alignment)) ||
	    set(doc, "data_offset_bytes", juint(g->data_offset)) ||
	    set(doc, "fingerprint", json_string(fp)) || set(doc, "n_kv", juint(g->n_kv)) ||
	    set(doc, "n_tensors", juint(g->n_tensors)) ||
	    set(doc, "metadata", metadata_json(g, flags)))
		goto oom;
	ntx_err_clear(&merr);
	m = ntx_model_from_gguf(g, NTX_MODEL_VOCAB_ONLY, &merr);
	if (m) {
		n_layer = m->cfg.n_layer;
		n_expert = m->cfg.n_expert;
		n_used = m->cfg.n_expert_used;
		if (set(doc, "model", model_json(m))) {
			m->gguf = NULL; /* borrowed: do not close it */
			ntx_model_close(m);
			goto oom;
		}
		m->gguf = NULL;
		ntx_model_close(m);
	} else {
		struct ntx_err cerr;

		if (merr.code == NTX_ENOMEM)
			goto oom;
		if (ntx_llama_config_read(g, &cfg, &cerr) == 0) {
			n_layer = cfg.n_layer;
			n_expert = cfg.n_expert;
			n_used = cfg.n_expert_used;
		}
		if (set(doc, "model", json_null()) || set(doc, "model_error", jstr(merr.msg, strlen(merr.msg))))
			goto oom;
	}
	if (add_tensors(doc, g, n_layer, n_expert, n_used))
		goto oom;
	return doc;
oom:
	json_decref(doc);
	ntx_err_set(err, NTX_ENOMEM, "out of memory building the inspect document");
	return NULL;
}

json_t *ntx_inspect_file(const char *path, unsigned flags, struct ntx_err *err)
{
	struct ntx_gguf *g = ntx_gguf_open(path, err);
	json_t *doc;

	if (!g)
		return NULL;
	doc = ntx_inspect_json(g, path, flags, err);
	ntx_gguf_close(g);
	return doc;
}
