/* inspect_pack.c - the ntx.inspect document of a pack file (see
 * inspect_pack.h and doc/pack-format.md). */
#include "inspect_pack.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect.h"
#include "parse.h"
#include "types.h"

static json_t *jint(uint64_t v)
{
	return json_integer((json_int_t)v);
}

static json_t *hex64(uint64_t v)
{
	char b[17];

	snprintf(b, sizeof b, "%016" PRIx64, v);
	return json_string(b);
}

static json_t *tensor_json(const struct ntx_pack_tensor *t)
{
	json_t *shape = json_array();
	uint32_t d;

	if (!shape)
		return NULL;
	for (d = 0; d < t->n_dims; d++)
		if (json_array_append_new(shape, json_integer(t->ne[d]))) {
			json_decref(shape);
			return NULL;
		}
	return json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", t->name, "type",
			 ntx_type_name(t->type), "shape", shape, "offset_bytes",
			 (json_int_t)t->offset, "bytes", (json_int_t)t->nbytes);
}

static json_t *extent_json(const struct ntx_pack_extent *e, unsigned flags)
{
	json_t *o, *ts = json_array();
	int k, nz = 0;

	if (!ts)
		return NULL;
	for (k = 0; k < e->n_tensors; k++)
		if (json_array_append_new(ts, tensor_json(&e->tensors[k]))) {
			json_decref(ts);
			return NULL;
		}
	for (k = 0; k < e->n_frames; k++)
		nz += e->frames[k].kind == NTX_PACK_FRAME_ZSTD;
	o = json_pack("{s:i, s:o, s:o, s:o, s:o, s:s, s:s, s:o, s:i, s:i, s:o}", "layer", e->layer,
		      "offset_bytes", jint(e->offset), "stored_bytes", jint(e->stored_size),
		      "data_bytes", jint(e->data_size), "raw_bytes", jint(e->raw_size),
		      "compression", ntx_pack_comp_name(e->compression), "transform",
		      ntx_pack_xform_name(e->transform), "checksum", hex64(e->checksum),
		      "n_frames", e->n_frames, "n_frames_zstd", nz, "tensors", ts);
	if (o && (flags & NTX_INSPECT_FULL) && e->n_frames) {
		json_t *fr = json_array();

		for (k = 0; fr && k < e->n_frames; k++)
			if (json_array_append_new(
				    fr, json_pack("{s:I, s:s}", "stored_bytes",
						  (json_int_t)e->frames[k].stored_len, "kind",
						  e->frames[k].kind == NTX_PACK_FRAME_ZSTD ? "zstd"
											    : "raw"))) {
				json_decref(fr);
				fr = NULL;
			}
		if (!fr || json_object_set_new(o, "frames", fr)) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

json_t *ntx_inspect_pack_json(const struct ntx_pack *p, const char *path, unsigned flags,
			      struct ntx_err *err)
{
	json_t *doc, *ex = json_array();
	uint64_t stored = 0;
	int x;

	if (!ex)
		goto nomem;
	for (x = 0; x < p->n_extents; x++) {
		stored += p->extents[x].stored_size;
		if (json_array_append_new(ex, extent_json(&p->extents[x], flags))) {
			json_decref(ex);
			goto nomem;
		}
	}
	doc = json_pack("{s:s, s:i, s:o, s:s, s:o, s:i, s:i, s:i, s:o, s:o, s:o, s:s, s:o, "
			"s:i, s:i, s:o, s:o, s:f, s:o}",
			"format", NTX_INSPECT_FORMAT, "version", NTX_INSPECT_VERSION, "path",
			path ? json_string(path) : json_null(), "kind", "pack", "file_size_bytes",
			jint(p->file_size), "pack_version", (int)p->version, "alignment",
			(int)p->alignment, "tensor_alignment", (int)p->tensor_align,
			"frame_size_bytes", jint(p->frame_size), "directory_bytes", jint(p->dir_size),
			"data_offset_bytes", jint(p->data_offset), "fingerprint", p->fingerprint_hex,
			"gguf_size_bytes", jint(p->gguf_size), "n_layer", p->n_layer, "n_extents",
			p->n_extents, "raw_bytes", jint(p->raw_bytes), "stored_bytes", jint(stored),
			"ratio", p->raw_bytes ? (double)stored / (double)p->raw_bytes : 1.0,
			"extents", ex);
	if (doc)
		return doc;
nomem:
	ntx_err_set(err, NTX_ENOMEM, "out of memory building the pack document");
	return NULL;
}

json_t *ntx_inspect_pack_file(const char *path, const void *buf, size_t len, unsigned flags,
			      struct ntx_err *err)
{
	struct ntx_pack *p = buf ? ntx_pack_open_buffer(buf, len, err) : ntx_pack_open(path, err);
	json_t *doc;

	if (!p)
		return NULL;
	doc = ntx_inspect_pack_json(p, path, flags, err);
	ntx_pack_close(p);
	return doc;
}

/* ---- summary ---- */

struct sbuf {
	char *s;
	size_t len, cap;
	int bad;
};

static void add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->bad)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->bad = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		{
			size_t cap = (b->cap + (size_t)n + 1) * 2;
			char *s = realloc(b->s, cap);

			if (!s) {
				b->bad = 1;
				return;
			}
			b->s = s;
			b->cap = cap;
		}
	}
}

static uint64_t gu(const json_t *o, const char *k)
{
	return (uint64_t)json_integer_value(json_object_get(o, k));
}

char *ntx_inspect_pack_summary(const json_t *doc)
{
	struct sbuf b = { NULL, 0, 0, 0 };
	const json_t *ex = json_object_get(doc, "extents"), *e;
	char s1[32], s2[32];
	size_t i;

	b.s = malloc(256);
	b.cap = b.s ? 256 : 0;
	b.bad = !b.s;
	add(&b, "file         %s\n", json_string_value(json_object_get(doc, "path")));
	add(&b, "size         %s (%" PRIu64 " bytes)\n",
	    ntx_fmt_size(gu(doc, "file_size_bytes"), s1, sizeof s1), gu(doc, "file_size_bytes"));
	add(&b, "pack         version %" PRIu64 ", alignment %" PRIu64 ", data at byte %" PRIu64
		", frames of %s\n",
	    gu(doc, "pack_version"), gu(doc, "alignment"), gu(doc, "data_offset_bytes"),
	    ntx_fmt_size(gu(doc, "frame_size_bytes"), s2, sizeof s2));
	add(&b, "model        fingerprint %s, GGUF of %" PRIu64 " bytes, %" PRIu64 " layers\n",
	    json_string_value(json_object_get(doc, "fingerprint")), gu(doc, "gguf_size_bytes"),
	    gu(doc, "n_layer"));
	add(&b, "extents      %" PRIu64 ": %s stored, %s raw (ratio %.3f)\n", gu(doc, "n_extents"),
	    ntx_fmt_size(gu(doc, "stored_bytes"), s1, sizeof s1),
	    ntx_fmt_size(gu(doc, "raw_bytes"), s2, sizeof s2),
	    json_real_value(json_object_get(doc, "ratio")));
	json_array_foreach(ex, i, e) {
		add(&b, "  layer %-4" PRIu64 " at %-12" PRIu64 " %10s stored, %10s raw  %s%s%s\n",
		    gu(e, "layer"), gu(e, "offset_bytes"),
		    ntx_fmt_size(gu(e, "stored_bytes"), s1, sizeof s1),
		    ntx_fmt_size(gu(e, "raw_bytes"), s2, sizeof s2),
		    json_string_value(json_object_get(e, "compression")),
		    strcmp(json_string_value(json_object_get(e, "transform")), "none") ? "+" : "",
		    strcmp(json_string_value(json_object_get(e, "transform")), "none")
			    ? json_string_value(json_object_get(e, "transform"))
			    : "");
	}
	if (b.bad) {
		free(b.s);
		return NULL;
	}
	return b.s;
}
