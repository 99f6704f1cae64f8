/* test_pack.c - the pack file: writer and reader round trips (compressed and
 * not) on the fixture models, byte planes, validation of every header and
 * directory field, truncation, corruption, mismatched models and plans, and
 * the direct-I/O reader (many reads in flight, fault injection, short reads,
 * a file that shrinks). A watchdog alarm turns a hang into a failure. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dio.h"
#include "hash.h"
#include "inspect.h"
#include "inspect_pack.h"
#include "layout.h"
#include "model.h"
#include "pack.h"
#include "pack_read.h"
#include "plan.h"
#include "t.h"

static char tmpdir[256];

/* ---- helpers ---- */

static void wr32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static void wr64(unsigned char *p, uint64_t v)
{
	wr32(p, (uint32_t)v);
	wr32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)n + 1);
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return b;
}

static int spit(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -1;
	ok = fwrite(b, 1, n, f) == n;
	return fclose(f) == 0 && ok ? 0 : -1;
}

static void tpath(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", tmpdir, name);
}

static struct ntx_model *fixture(const char *name)
{
	char path[512];
	struct ntx_err err;
	struct ntx_model *m;

	snprintf(path, sizeof path, "%s/%s", t_fixtures(), name);
	m = ntx_model_open(path, 0, &err);
	if (!m)
		t_diag("cannot open %s: %s", path, err.msg);
	return m;
}

/* Recompute the directory and header checksums of a pack image of len
 * bytes (the directory's only when its size fits in the image). */
static void reseal(unsigned char *img, size_t len)
{
	uint64_t dir_size = rd64(img + 56);

	if (dir_size <= len - NTX_PACK_HEADER_SIZE)
		wr64(img + 112, ntx_hash64(img + NTX_PACK_HEADER_SIZE, (size_t)dir_size, 0));
	wr64(img + 120, ntx_hash64(img, 120, 0));
}

static int all_layers(const struct ntx_model *m, int *layers)
{
	int i;

	for (i = 0; i < m->cfg.n_layer; i++)
		layers[i] = i;
	return m->cfg.n_layer;
}

static int write_pack(const struct ntx_model *m, const char *path, uint32_t comp,
		      double min_saving, uint32_t frame, const int *layers, int n,
		      struct ntx_pack_write_stats *st, struct ntx_err *err)
{
	struct ntx_pack_write_opts o;

	ntx_pack_write_opts_init(&o);
	o.compression = comp;
	o.min_saving = min_saving;
	o.frame_size = frame;
	o.threads = 2;
	o.layers = layers;
	o.n_layers = n;
	o.no_sync = 1;
	return ntx_pack_write(m, path, &o, st, err);
}

/* Read every extent with pread and decode it; compare with the layer as
 * ntx_layer_pack_copy lays it out. Returns the number of layers that match. */
static int decode_all(const struct ntx_pack *p, const struct ntx_model *m, const char *path)
{
	int fd = open(path, O_RDONLY), x, good = 0;

	for (x = 0; x < p->n_extents; x++) {
		const struct ntx_pack_extent *e = &p->extents[x];
		struct ntx_layer_layout lo;
		unsigned char *st = malloc(e->stored_size), *raw = malloc(e->raw_size + 1),
			      *want = malloc(e->raw_size + 1);
		struct ntx_err err;

		ntx_layer_layout(&m->layers[e->layer], &lo);
		ntx_layer_pack_copy(&m->layers[e->layer], &lo, want);
		if (pread(fd, st, e->stored_size, (off_t)e->offset) == (ssize_t)e->stored_size &&
		    ntx_pack_decode_extent(p, e, st, raw, 1, &err) == 0 &&
		    memcmp(raw, want, e->raw_size) == 0 && lo.total == e->raw_size)
			good++;
		else
			t_diag("layer %d does not decode: %s", e->layer, err.msg);
		if (e->compression == NTX_PACK_COMP_NONE &&
		    (ntx_pack_decode_extent(p, e, st, st, 1, &err) != 0 ||
		     memcmp(st, want, e->raw_size) != 0)) {
			t_diag("layer %d: in-place use fails", e->layer);
			good--;
		}
		free(st);
		free(raw);
		free(want);
	}
	close(fd);
	return good;
}

static int no_temps(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".tmp."))
			n++;
	closedir(d);
	return n == 0;
}

/* ---- byte planes ---- */

static void test_planes(void)
{
	static const size_t sizes[] = { 0, 4, 8, 28, 64, 100, 4096, 65536 + 12 };
	size_t i, j;
	int w, bad = 0, layout_ok = 1;

	for (w = 2; w <= 4; w += 2)
		for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			size_t n = sizes[i] / (size_t)w * (size_t)w;
			unsigned char *a = malloc(n + 1), *s = malloc(n + 1), *b = malloc(n + 1);

			for (j = 0; j < n; j++)
				a[j] = (unsigned char)(j * 131 + (j >> 8) * 7 + 3);
			ntx_pack_planes_split(a, s, n, w);
			for (j = 0; j < n; j++)
				if (s[(j % (size_t)w) * (n / (size_t)w) + j / (size_t)w] != a[j])
					layout_ok = 0;
			ntx_pack_planes_merge(s, b, n, w);
			if (memcmp(a, b, n) != 0)
				bad++;
			free(a);
			free(s);
			free(b);
		}
	t_ok(bad == 0, "byte planes: split then merge is the identity (w = 2, 4; %d bad)", bad);
	t_ok(layout_ok, "byte planes: plane k holds byte k of every element");
}

/* ---- round trips ---- */

static void round_trip(const char *model, uint32_t comp, double min_saving, uint32_t frame,
		       const char *tag)
{
	struct ntx_model *m = fixture(model);
	struct ntx_pack_write_stats st;
	struct ntx_pack *p;
	struct ntx_err err;
	char path[512];
	int layers[256], n, x, aligned = 1;

	if (!t_ok(m != NULL, "%s: fixture opens", model))
		return;
	n = all_layers(m, layers);
	tpath(path, sizeof path, "rt.ntxp");
	if (!t_ok(write_pack(m, path, comp, min_saving, frame, layers, n, &st, &err) == 0,
		  "%s %s: pack written (%s)", model, tag, err.msg)) {
		ntx_model_close(m);
		return;
	}
	p = ntx_pack_open(path, &err);
	if (!t_ok(p != NULL, "%s %s: pack opens (%s)", model, tag, p ? "" : err.msg)) {
		ntx_model_close(m);
		return;
	}
	for (x = 0; x < p->n_extents; x++)
		aligned &= p->extents[x].offset % 4096 == 0 && p->extents[x].stored_size % 4096 == 0;
	t_ok(p->n_extents == n && aligned && p->file_size == st.file_size,
	     "%s %s: %d extents, 4096-aligned, file %" PRIu64 " bytes", model, tag, p->n_extents,
	     p->file_size);
	t_ok(ntx_pack_check_model(p, m, &err) == 0, "%s %s: check_model", model, tag);
	t_ok(decode_all(p, m, path) == n, "%s %s: every extent decodes to the GGUF bytes", model,
	     tag);
	t_ok(ntx_pack_verify(p, m, 3, NULL, NULL, NULL, &err) == 0, "%s %s: ntx_pack_verify (%s)", model,
	     tag, err.msg);
	t_diag("%s %s: raw %" PRIu64 " stored %" PRIu64 " (ratio %.3f), %d/%d extents compressed",
	       model, tag, st.raw_bytes, st.stored_bytes,
	       (double)st.stored_bytes / (double)st.raw_bytes, st.n_compressed, st.n_extents);
	if (comp == NTX_PACK_COMP_ZSTD && strstr(model, "f16") && min_saving == 0)
		t_ok(st.n_compressed == n && st.stored_bytes < st.raw_bytes,
		     "%s %s: F16 extents compress", model, tag);
	ntx_pack_close(p);
	ntx_model_close(m);
	t_ok(no_temps(), "%s %s: no temporary file left", model, tag);
}

/* Pack only some layers; the others are absent. */
static void test_partial(void)
{
	struct ntx_model *m = fixture("tinymodel/tinymodel-q8_0.gguf");
	struct ntx_pack *p;
	struct ntx_err err;
	char path[512];
	int layers[] = { 3, 7, 8, 15 }, ok = 1, l;

	if (!m)
		return;
	tpath(path, sizeof path, "partial.ntxp");
	t_ok(write_pack(m, path, NTX_PACK_COMP_NONE, 0, 0, layers, 4, NULL, &err) == 0,
	     "partial pack written");
	p = ntx_pack_open(path, &err);
	if (t_ok(p != NULL, "partial pack opens")) {
		for (l = 0; l < m->cfg.n_layer; l++) {
			const struct ntx_pack_extent *e = ntx_pack_extent_for_layer(p, l);
			int want = l == 3 || l == 7 || l == 8 || l == 15;

			ok &= want ? e && e->layer == l : e == NULL;
		}
		t_ok(ok && !ntx_pack_extent_for_layer(p, -1) && !ntx_pack_extent_for_layer(p, 16),
		     "extent_for_layer: the 4 packed layers, NULL for the rest");
		t_ok(ntx_pack_verify(p, m, 0, NULL, NULL, NULL, &err) == 0, "partial pack verifies");
		{
			json_t *doc = ntx_inspect_pack_json(p, "x.ntxp", NTX_INSPECT_FULL, &err);
			json_t *ex = json_object_get(doc, "extents");
			json_t *t0 = json_array_get(json_object_get(json_array_get(ex, 1), "tensors"), 0);
			char *sum = doc ? ntx_inspect_pack_summary(doc) : NULL;

			t_ok(doc && strcmp(json_string_value(json_object_get(doc, "kind")), "pack") == 0 &&
				     json_array_size(ex) == 4 &&
				     json_integer_value(json_object_get(json_array_get(ex, 1), "layer")) == 7 &&
				     strcmp(json_string_value(json_object_get(t0, "name")),
					    "blk.7.attn_norm.weight") == 0 &&
				     strcmp(json_string_value(json_object_get(doc, "fingerprint")),
					    m->fingerprint_hex) == 0,
			     "inspect document of the partial pack");
			t_ok(sum && strstr(sum, "extents      4:") && strstr(sum, "layer 15"),
			     "inspect summary");
			free(sum);
			json_decref(doc);
		}
		t_ok(ntx_pack_file_is_pack(path) && !ntx_pack_file_is_pack("/nonexistent"),
		     "ntx_pack_file_is_pack");
		ntx_pack_close(p);
	}
	{
		int bad[] = { 3, 3 };

		t_ok(write_pack(m, path, 0, 0, 0, bad, 2, NULL, &err) == -1 &&
			     err.code == NTX_EINVAL,
		     "writer refuses a repeated layer: %s", err.msg);
	}
	ntx_model_close(m);
}

/* ---- validation ---- */

static struct ntx_pack *open_img(const unsigned char *img, size_t n, struct ntx_err *err)
{
	return ntx_pack_open_buffer(img, n, err);
}

static void test_corrupt_header(const unsigned char *img, size_t len)
{
	unsigned char *c = malloc(len);
	struct ntx_pack *p;
	struct ntx_err err;
	int i, opened = 0, named = 0;

	for (i = 0; i < NTX_PACK_HEADER_SIZE; i++) {
		memcpy(c, img, len);
		c[i] ^= 0x10;
		p = open_img(c, len, &err);
		if (p) {
			opened++;
			ntx_pack_close(p);
		} else if (i < 8 ? strstr(err.msg, "not a pack") != NULL
				 : strstr(err.msg, "checksum") != NULL) {
			named++;
		} else {
			t_diag("header byte %d: %s", i, err.msg);
		}
	}
	t_ok(opened == 0 && named == NTX_PACK_HEADER_SIZE,
	     "every corrupted header byte is refused with a checksum or magic error (%d/%d)",
	     named, NTX_PACK_HEADER_SIZE);
	memcpy(c, img, len);
	c[NTX_PACK_HEADER_SIZE + 70] ^= 1; /* inside the first tensor name */
	p = open_img(c, len, &err);
	t_ok(!p && strstr(err.msg, "directory checksum"), "corrupted directory byte: %s", err.msg);
	ntx_pack_close(p);
	free(c);
}

/* A directory field changed and the checksums recomputed: each must be
 * caught by validation with a message naming the value. */
static void test_fields(const unsigned char *img, size_t len)
{
	static const struct {
		int off;     /* from the start of the file */
		int size;    /* 4 or 8 */
		uint64_t v;
		const char *want;
	} cases[] = {
		{ 8, 4, 2, "version 2" },
		{ 12, 4, 64, "header size" },
		{ 16, 4, 3000, "alignment 3000" },
		{ 16, 4, 1u << 21, "alignment" },
		{ 20, 4, 128, "tensor alignment" },
		{ 24, 4, 0, "layer count 0" },
		{ 28, 4, 3, "extent count 3" },
		{ 48, 8, 256, "directory offset" },
		{ 56, 8, 100, "directory size 100" },
		{ 56, 8, 1ull << 40, "directory size" },
		{ 64, 8, 4095, "data offset 4095" },
		{ 72, 8, 1ull << 50, "truncated" },
		{ 72, 8, 4096, "after its end" },
		{ 80, 4, 1000, "frame size 1000" },
		{ 84, 4, 1, "flags" },
		{ 100, 4, 7, "reserved" },
		/* first extent record at 128 */
		{ 128 + 0, 4, 5, "layer 5" },
		{ 128 + 4, 4, 8, "8 tensors" },
		{ 128 + 8, 8, 8192, "offset 8192" },
		{ 128 + 16, 8, 4096, "stored size 4096" },
		{ 128 + 24, 8, 0, "data size 0" },
		{ 128 + 32, 8, 12345, "raw size 12345" },
		{ 128 + 40, 4, 7, "compression 7" },
		{ 128 + 44, 4, 1, "transform 1" },
		{ 128 + 56, 4, 1u << 30, "frame records" },
		{ 128 + 60, 4, 1, "reserved" },
		/* first tensor record at 128 + 64 */
		{ 192 + 0, 4, 0, "empty" },
		{ 192 + 64, 4, 4, "unknown type 4" },
		{ 192 + 68, 4, 5, "5 dimensions" },
		{ 192 + 72, 8, 0, "dimension 0 is 0" },
		{ 192 + 80, 8, 3, "dimension 1 is 3" },
		{ 192 + 104, 8, 256, "offset 256" },
		{ 192 + 112, 8, 999, "999 bytes" },
		/* second tensor (wq): a shape whose byte size disagrees */
		{ 312 + 72, 8, 500, "" },
	};
	unsigned char *c = malloc(len);
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct ntx_err err;
		struct ntx_pack *p;

		memcpy(c, img, len);
		if (cases[i].size == 4)
			wr32(c + cases[i].off, (uint32_t)cases[i].v);
		else
			wr64(c + cases[i].off, cases[i].v);
		reseal(c, len);
		p = open_img(c, len, &err);
		t_ok(!p && err.msg[0] && strstr(err.msg, cases[i].want),
		     "field at %d = %" PRIu64 " refused: %s", cases[i].off, cases[i].v,
		     p ? "(opened!)" : err.msg);
		ntx_pack_close(p);
	}
	free(c);
}

static void test_truncated(const unsigned char *img, size_t len, const struct ntx_pack *p)
{
	size_t cuts[64];
	int n = 0, i, refused = 0, said = 0;
	char path[512];

	cuts[n++] = 0;
	cuts[n++] = 1;
	cuts[n++] = 7;
	cuts[n++] = 8;
	cuts[n++] = 100;
	cuts[n++] = 127;
	cuts[n++] = 128;
	cuts[n++] = 129;
	cuts[n++] = 128 + (size_t)p->dir_size / 2;
	cuts[n++] = (size_t)p->data_offset - 1;
	cuts[n++] = (size_t)p->data_offset;
	cuts[n++] = (size_t)p->data_offset + 1;
	for (i = 0; i < p->n_extents && n < 60; i++) {
		cuts[n++] = (size_t)p->extents[i].offset + 4096;
		cuts[n++] = (size_t)(p->extents[i].offset + p->extents[i].stored_size) - 1;
	}
	tpath(path, sizeof path, "trunc.ntxp");
	for (i = 0; i < n; i++) {
		struct ntx_err err;
		struct ntx_pack *q;

		if (cuts[i] >= len)
			continue;
		q = open_img(img, cuts[i], &err);
		refused += q == NULL && err.msg[0];
		ntx_pack_close(q);
		/* through a file: the messages say "truncated" once the magic is there */
		spit(path, img, cuts[i]);
		q = ntx_pack_open(path, &err);
		if (!q && (cuts[i] < 8 || strstr(err.msg, "truncated")))
			said++;
		else
			t_diag("cut at %zu: %s", cuts[i], q ? "opened" : err.msg);
		ntx_pack_close(q);
	}
	t_ok(refused == n && said == n, "truncated at %d points: all refused (%d), 'truncated' (%d)",
	     n, refused, said);
}

static void test_corrupt_extent(void)
{
	struct ntx_model *m = fixture("models/ref-a-q4_k_m.gguf");
	struct ntx_model *f16 = fixture("models/ref-a-f16.gguf");
	char path[512];
	unsigned char *img;
	size_t len;
	int layers[2] = { 0, 1 }, pass;

	if (!m || !f16)
		return;
	tpath(path, sizeof path, "ce.ntxp");
	for (pass = 0; pass < 2; pass++) {
		struct ntx_model *mm = pass ? f16 : m;
		struct ntx_pack *p;
		struct ntx_err err;
		const struct ntx_pack_extent *e;
		unsigned char *raw;
		uint64_t at;

		write_pack(mm, path, pass ? NTX_PACK_COMP_ZSTD : NTX_PACK_COMP_NONE, 0, 65536, layers,
			   2, NULL, &err);
		img = slurp(path, &len);
		p = ntx_pack_open_buffer(img, len, &err);
		if (!t_ok(p != NULL, "pass %d: pack image opens", pass))
			continue;
		e = ntx_pack_extent_for_layer(p, 1);
		at = e->offset + e->data_size / 3;
		img[at] ^= 0x41;
		raw = malloc(e->raw_size);
		t_ok(ntx_pack_decode_extent(p, e, img + e->offset, raw, 1, &err) == -1 &&
			     strstr(err.msg, "layer 1") && strstr(err.msg, "checksum"),
		     "%s: corrupted extent byte: %s", pass ? "zstd" : "none", err.msg);
		/* without verify, decoding garbage must stay inside the buffers */
		(void)ntx_pack_decode_extent(p, e, img + e->offset, raw, 0, &err);
		t_ok(1, "%s: decoding a corrupted extent without verify stays in bounds",
		     pass ? "zstd" : "none");
		free(raw);
		ntx_pack_close(p);
		spit(path, img, len);
		p = ntx_pack_open(path, &err);
		t_ok(p && ntx_pack_verify(p, mm, 2, NULL, NULL, NULL, &err) == -1 &&
			     strstr(err.msg, "layer 1"),
		     "%s: verify names the corrupted layer: %s", pass ? "zstd" : "none", err.msg);
		ntx_pack_close(p);
		free(img);
	}
	ntx_model_close(m);
	ntx_model_close(f16);
}

/* ---- mismatches ---- */

static void test_mismatch(void)
{
	struct ntx_model *a = fixture("models/ref-a-f16.gguf");
	struct ntx_model *b = fixture("models/ref-a-q8_0.gguf");
	struct ntx_plan plan;
	struct ntx_plan_layer pl[2];
	struct ntx_pack *p;
	struct ntx_err err;
	char path[512];
	int one = 1;

	if (!a || !b)
		return;
	tpath(path, sizeof path, "mm.ntxp");
	write_pack(a, path, NTX_PACK_COMP_NONE, 0, 0, &one, 1, NULL, &err);
	p = ntx_pack_open(path, &err);
	if (!t_ok(p != NULL, "mismatch: pack opens"))
		return;
	t_ok(ntx_pack_check_model(p, b, &err) == -1 && err.code == NTX_EMISMATCH &&
		     strstr(err.msg, "another model"),
	     "pack checked against another model: %s", err.msg);
	t_ok(ntx_pack_verify(p, b, 0, NULL, NULL, NULL, &err) == -1 && err.code == NTX_EMISMATCH,
	     "verify against another model refused");

	memset(&plan, 0, sizeof plan);
	memset(pl, 0, sizeof pl);
	plan.model.n_layer = 2;
	memcpy(plan.model.fingerprint, a->fingerprint_hex, 17);
	plan.layers = pl;
	pl[0].index = 0;
	pl[0].home = NTX_TIER_RAM;
	pl[1].index = 1;
	pl[1].home = NTX_TIER_DISK;
	t_ok(ntx_pack_check_plan(p, &plan, &err) == 0, "plan with layer 1 on disk: served");
	pl[0].home = NTX_TIER_DISK;
	t_ok(ntx_pack_check_plan(p, &plan, &err) == -1 && strstr(err.msg, "layer 0") &&
		     strstr(err.msg, "has layers 1"),
	     "plan with layer 0 on disk too: %s", err.msg);
	pl[0].skip = 1;
	t_ok(ntx_pack_check_plan(p, &plan, &err) == 0, "a skipped disk layer need not be packed");
	memcpy(plan.model.fingerprint, b->fingerprint_hex, 17);
	t_ok(ntx_pack_check_plan(p, &plan, &err) == -1 && strstr(err.msg, "another model"),
	     "plan for another model: %s", err.msg);
	ntx_pack_close(p);
	ntx_model_close(a);
	ntx_model_close(b);
}

/* ---- the pack image tests on one small pack ---- */

static void test_image(void)
{
	struct ntx_model *m = fixture("models/ref-a-q4_k_m.gguf");
	struct ntx_pack *p;
	struct ntx_err err;
	char path[512];
	unsigned char *img;
	size_t len;
	int layers[2] = { 0, 1 };

	if (!m)
		return;
	tpath(path, sizeof path, "img.ntxp");
	write_pack(m, path, NTX_PACK_COMP_NONE, 0, 0, layers, 2, NULL, &err);
	img = slurp(path, &len);
	p = img ? ntx_pack_open_buffer(img, len, &err) : NULL;
	if (t_ok(p != NULL, "image: opens from a buffer")) {
		test_corrupt_header(img, len);
		test_fields(img, len);
		test_truncated(img, len, p);
		ntx_pack_close(p);
	}
	/* trailing bytes */
	{
		unsigned char *big = calloc(1, len + 4096);

		memcpy(big, img, len);
		p = ntx_pack_open_buffer(big, len + 4096, &err);
		t_ok(!p && strstr(err.msg, "after its end"), "trailing bytes refused: %s", err.msg);
		ntx_pack_close(p);
		free(big);
	}
	free(img);
	ntx_model_close(m);
}

/* A frame table that lies (checksums recomputed). */
static void test_frames(void)
{
	struct ntx_model *m = fixture("models/ref-a-f16.gguf");
	struct ntx_pack *p;
	struct ntx_err err;
	char path[512];
	unsigned char *img, *c;
	size_t len;
	int layers[1] = { 0 };
	uint64_t fr;

	if (!m)
		return;
	tpath(path, sizeof path, "fr.ntxp");
	write_pack(m, path, NTX_PACK_COMP_ZSTD, 0, 65536, layers, 1, NULL, &err);
	img = slurp(path, &len);
	c = malloc(len);
	p = ntx_pack_open_buffer(img, len, &err);
	if (!t_ok(p && p->extents[0].n_frames > 2 && p->extents[0].transform == NTX_PACK_XFORM_SPLIT2,
		  "f16 layer: %d frames, transform %s", p ? p->extents[0].n_frames : 0,
		  p ? ntx_pack_xform_name(p->extents[0].transform) : "?"))
		goto out;
	fr = NTX_PACK_HEADER_SIZE + NTX_PACK_EXTENT_REC + 9 * NTX_PACK_TENSOR_REC; /* a dense layer */
	memcpy(c, img, len);
	wr32(c + fr, (uint32_t)rd64(c + fr) + 1);
	reseal(c, len);
	ntx_pack_close(ntx_pack_open_buffer(c, len, &err));
	t_ok(strstr(err.msg, "frames store") || strstr(err.msg, "frame 0"),
	     "frame size off by one: %s", err.msg);
	memcpy(c, img, len);
	wr32(c + fr + 4, 9);
	reseal(c, len);
	ntx_pack_close(ntx_pack_open_buffer(c, len, &err));
	t_ok(strstr(err.msg, "unknown kind 9") != NULL, "frame kind 9: %s", err.msg);
	memcpy(c, img, len);
	wr32(c + fr + 4, NTX_PACK_FRAME_RAW);
	reseal(c, len);
	ntx_pack_close(ntx_pack_open_buffer(c, len, &err));
	t_ok(strstr(err.msg, "raw frame") != NULL, "zstd frame relabelled raw: %s", err.msg);
	/* swap two frames' bytes: checksum catches it; without verify zstd
	 * must fail cleanly or decode within bounds */
	{
		const struct ntx_pack_extent *e = &p->extents[0];
		unsigned char *raw = malloc(e->raw_size);

		memcpy(c, img, len);
		memset(c + e->offset + e->frames[1].stored_off, 0xff, e->frames[1].stored_len);
		t_ok(ntx_pack_decode_extent(p, e, c + e->offset, raw, 0, &err) == -1 &&
			     strstr(err.msg, "frame 1"),
		     "a garbled zstd frame fails to decode: %s", err.msg);
		free(raw);
	}
out:
	ntx_pack_close(p);
	free(img);
	free(c);
	ntx_model_close(m);
}

/* ---- cancel and failure leave the old file ---- */

static volatile sig_atomic_t cancel_flag;

static void test_cancel(void)
{
	struct ntx_model *m = fixture("models/ref-a-f16.gguf");
	struct ntx_pack_write_opts o;
	struct ntx_err err;
	char path[512];
	unsigned char *b;
	size_t len;
	int layers[2] = { 0, 1 };

	if (!m)
		return;
	tpath(path, sizeof path, "cancel.ntxp");
	spit(path, "old", 3);
	ntx_pack_write_opts_init(&o);
	o.layers = layers;
	o.n_layers = 2;
	o.cancel = &cancel_flag;
	o.no_sync = 1;
	cancel_flag = 1;
	t_ok(ntx_pack_write(m, path, &o, NULL, &err) == -1 && err.code == NTX_EINTR,
	     "cancelled write: %s", err.msg);
	b = slurp(path, &len);
	t_ok(b && len == 3 && memcmp(b, "old", 3) == 0 && no_temps(),
	     "cancelled write: old file intact, no temporary left");
	free(b);
	/* a write error (the file size limit, like a full disk): the
	 * temporary is removed and the old file stays */
	{
		struct rlimit old, lim;

		signal(SIGXFSZ, SIG_IGN);
		getrlimit(RLIMIT_FSIZE, &old);
		lim = old;
		lim.rlim_cur = 1 << 20;
		setrlimit(RLIMIT_FSIZE, &lim);
		o.cancel = NULL;
		t_ok(ntx_pack_write(m, path, &o, NULL, &err) == -1 && err.code == NTX_EIO &&
			     strstr(err.msg, "File too large"),
		     "write error: %s", err.msg);
		setrlimit(RLIMIT_FSIZE, &old);
		signal(SIGXFSZ, SIG_DFL);
		b = slurp(path, &len);
		t_ok(b && len == 3 && no_temps(), "write error: old file intact, no temporary left");
		free(b);
	}
	tpath(path, sizeof path, "no-such-dir/x.ntxp");
	o.cancel = NULL;
	t_ok(ntx_pack_write(m, path, &o, NULL, &err) == -1 && strstr(err.msg, "No such file"),
	     "write into a missing directory: %s", err.msg);
	ntx_model_close(m);
}

/* ---- dio ---- */

static void fill_pattern(unsigned char *b, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		b[i] = (unsigned char)(seed >> 56);
	}
}

static void test_dio(void)
{
	const size_t n = 6u << 20;
	unsigned char *src = malloc(n), *dst[4];
	struct ntx_dio_req req[4];
	struct ntx_tunables tun;
	struct ntx_err err;
	struct ntx_dio *d;
	char path[512];
	int i, ok = 1;

	tpath(path, sizeof path, "dio.bin");
	fill_pattern(src, n, 7);
	spit(path, src, n);
	d = ntx_dio_open(path, 3, 65536, NULL, &err);
	if (!t_ok(d != NULL, "dio opens (%s)", d ? "" : err.msg)) {
		free(src);
		return;
	}
	t_diag("dio on %s: %s", tmpdir, ntx_dio_direct(d) ? "O_DIRECT" : "buffered fallback");
	for (i = 0; i < 4; i++) {
		dst[i] = ntx_dio_alloc(n);
		memset(&req[i], 0, sizeof req[i]);
		req[i].layer = i;
		ok &= ntx_dio_submit(d, (uint64_t)i * 524288, n - 2 * 1048576, dst[i], &req[i],
				     &err) == 0;
	}
	for (i = 3; i >= 0; i--) {
		int rc = ntx_dio_wait(d, &req[i], &err);

		if (rc)
			t_diag("request %d: %s", i, err.msg);
		ok &= rc == 0 && memcmp(dst[i], src + (size_t)i * 524288, n - 2 * 1048576) == 0;
	}
	t_ok(ok, "dio: 4 requests of 4 MiB in 64 KiB chunks in flight, all correct");
	t_ok(ntx_dio_reads(d) == 4 * 64, "dio: %" PRIu64 " chunk reads (want 256)",
	     ntx_dio_reads(d));
	if (ntx_dio_direct(d)) {
		memset(&req[0], 0, sizeof req[0]);
		t_ok(ntx_dio_submit(d, 100, 4096, dst[0], &req[0], &err) == -1 &&
			     strstr(err.msg, "multiples of 4096"),
		     "dio: unaligned direct read refused: %s", err.msg);
	}
	/* short read: past the end of the file */
	memset(&req[0], 0, sizeof req[0]);
	req[0].layer = 5;
	ntx_dio_submit(d, n - 1048576, 2 * 1048576, dst[0], &req[0], &err);
	t_ok(ntx_dio_wait(d, &req[0], &err) == -1 &&
		     strstr(err.msg, "pack file truncated: extent of layer 5 at offset 5242880 "
				     "needs 2097152 bytes, file has 6291456"),
	     "dio: short read: %s", err.msg);
	ntx_dio_close(d);

	/* a file whose size is not a multiple of 4096 */
	spit(path, src, 100000);
	d = ntx_dio_open(path, 2, 65536, NULL, &err);
	memset(&req[0], 0, sizeof req[0]);
	req[0].layer = 2;
	ntx_dio_submit(d, 0, 131072, dst[0], &req[0], &err);
	t_ok(ntx_dio_wait(d, &req[0], &err) == -1 && strstr(err.msg, "needs 131072 bytes, file has 100000"),
	     "dio: unaligned end of file: %s", err.msg);
	ntx_dio_close(d);
	spit(path, src, n);

	/* fault injection: the 5th chunk read fails with EIO; the request
	 * fails, others succeed, nothing hangs */
	ntx_tunables_default(&tun);
	tun.fault_read = 5;
	d = ntx_dio_open(path, 4, 65536, &tun, &err);
	for (i = 0; i < 2; i++) {
		memset(&req[i], 0, sizeof req[i]);
		req[i].layer = 10 + i;
		ntx_dio_submit(d, 0, 1048576, dst[i], &req[i], &err);
	}
	ok = ntx_dio_wait(d, &req[0], &err) == -1 && strstr(err.msg, "Input/output error") &&
	     strstr(err.msg, "layer 10");
	t_ok(ok, "dio: injected EIO on read 5: %s", err.msg);
	t_ok(ntx_dio_wait(d, &req[1], &err) == 0 && memcmp(dst[1], src, 1048576) == 0,
	     "dio: the next request is unaffected");
	ntx_dio_close(d);
	tun.fault_read = 1;
	tun.fault_read_every = 1;
	d = ntx_dio_open(path, 4, 65536, &tun, &err);
	for (i = 0; i < 4; i++) {
		memset(&req[i], 0, sizeof req[i]);
		ntx_dio_submit(d, 0, 2097152, dst[i], &req[i], &err);
	}
	ok = 1;
	for (i = 0; i < 4; i++)
		ok &= ntx_dio_wait(d, &req[i], &err) == -1;
	t_ok(ok, "dio: every read failing: every wait returns an error");
	ntx_dio_close(d);
	/* from the environment, as the engine and ntx-pack read it */
	setenv("NTX_FAULT_READ", "x", 1);
	ntx_tunables_from_env(&tun);
	unsetenv("NTX_FAULT_READ");
	d = ntx_dio_open(path, 4, 0, &tun, &err);
	t_ok(!d && strstr(err.msg, "NTX_FAULT_READ"), "bad NTX_FAULT_READ: %s", err.msg);
	ntx_dio_close(d);
	setenv("NTX_FAULT_READ", "2", 1);
	ntx_tunables_from_env(&tun);
	unsetenv("NTX_FAULT_READ");
	d = ntx_dio_open(path, 4, 65536, &tun, &err);
	memset(&req[0], 0, sizeof req[0]);
	if (d)
		ntx_dio_submit(d, 0, 1048576, dst[0], &req[0], &err);
	t_ok(d && ntx_dio_wait(d, &req[0], &err) == -1 && strstr(err.msg, "Input/output error"),
	     "NTX_FAULT_READ=2 from the environment: %s", err.msg);
	ntx_dio_close(d);
	d = ntx_dio_open(path, 0, 0, NULL, &err);
	ntx_dio_close(d);
	t_ok(ntx_dio_open("/nonexistent/x", 0, 0, NULL, &err) == NULL &&
		     strstr(err.msg, "No such file"),
	     "dio: missing file: %s", err.msg);

	/* the buffered fallback (as on a file system that refuses O_DIRECT) */
	ntx_tunables_default(&tun);
	tun.dio_buffered = 1;
	d = ntx_dio_open(path, 3, 65536, &tun, &err);
	if (t_ok(d && !ntx_dio_direct(d), "dio: buffered fallback")) {
		memset(&req[0], 0, sizeof req[0]);
		memset(&req[1], 0, sizeof req[1]);
		req[1].layer = 9;
		ntx_dio_submit(d, 12345, 1000000, dst[0], &req[0], &err);
		ntx_dio_submit(d, n - 100, 4096, dst[1], &req[1], &err);
		t_ok(ntx_dio_wait(d, &req[0], &err) == 0 && memcmp(dst[0], src + 12345, 1000000) == 0,
		     "dio buffered: an unaligned read is fine");
		t_ok(ntx_dio_wait(d, &req[1], &err) == -1 && strstr(err.msg, "layer 9") &&
			     strstr(err.msg, "truncated"),
		     "dio buffered: short read: %s", err.msg);
	}
	ntx_dio_close(d);
	for (i = 0; i < 4; i++)
		free(dst[i]);
	free(src);
}

static int hook_count;

static int count_hook(void *arg, int part, struct ntx_err *err)
{
	(void)arg;
	__atomic_fetch_add(&hook_count, 1, __ATOMIC_RELAXED);
	if (part == 6)
		return ntx_err_set(err, NTX_EFORMAT, "part six fails");
	return 0;
}

static void test_dio_hooks(void)
{
	struct ntx_dio_req r;
	struct ntx_err err;
	struct ntx_dio *d;
	char path[512];
	unsigned char *b = ntx_dio_alloc(1 << 20);

	tpath(path, sizeof path, "dio.bin");
	d = ntx_dio_open(path, 3, 0, NULL, &err);
	memset(&r, 0, sizeof r);
	r.hook = count_hook;
	r.hook_parts = 6;
	ntx_dio_submit(d, 0, 1 << 20, b, &r, &err);
	t_ok(ntx_dio_wait(d, &r, &err) == 0 && hook_count == 6, "dio: hook ran 6 parts (%d)",
	     hook_count);
	hook_count = 0;
	r.hook_parts = 9;
	ntx_dio_submit(d, 0, 0, NULL, &r, &err);
	t_ok(ntx_dio_wait(d, &r, &err) == -1 && strstr(err.msg, "part six") && hook_count >= 7 &&
		     hook_count <= 9,
	     "dio: hook error reported (%s); parts not yet started are skipped (%d ran)", err.msg,
	     hook_count);
	ntx_dio_close(d);
	free(b);
}

/* Streamed reads through ntx_pack_read_*, and a file that shrinks. */
static void test_stream(void)
{
	struct ntx_model *m = fixture("tinymodel/tinymodel-f16.gguf");
	struct ntx_pack_read rd[3];
	struct ntx_pack *p;
	struct ntx_dio *d;
	struct ntx_err err;
	char path[512];
	unsigned char *st[3], *raw[3], *want;
	int layers[256], n, x, ok = 1;

	if (!m)
		return;
	n = all_layers(m, layers);
	tpath(path, sizeof path, "stream.ntxp");
	write_pack(m, path, NTX_PACK_COMP_ZSTD, 0, 262144, layers, n, NULL, &err);
	p = ntx_pack_open(path, &err);
	if (!t_ok(p != NULL, "stream: pack opens"))
		return;
	d = ntx_dio_open(path, 4, 1 << 20, NULL, &err);
	want = malloc(p->max_raw);
	for (x = 0; x < 3; x++) {
		st[x] = ntx_dio_alloc(p->max_stored);
		raw[x] = malloc(p->max_raw);
	}
	/* three in flight, consumed in order */
	for (x = 0; x < p->n_extents + 2; x++) {
		if (x < p->n_extents)
			ok &= ntx_pack_read_submit(d, p, &p->extents[x], st[x % 3], raw[x % 3], 1,
						   &rd[x % 3], &err) == 0;
		if (x >= 2) {
			const struct ntx_pack_extent *e = &p->extents[x - 2];
			struct ntx_layer_layout lo;

			ntx_layer_layout(&m->layers[e->layer], &lo);
			ntx_layer_pack_copy(&m->layers[e->layer], &lo, want);
			ok &= ntx_pack_read_wait(d, &rd[(x - 2) % 3], &err) == 0 &&
			      memcmp(raw[(x - 2) % 3], want, e->raw_size) == 0;
		}
	}
	t_ok(ok, "stream: %d compressed extents read and decoded on the I/O threads",
	     p->n_extents);
	/* the file shrinks under the reader */
	if (truncate(path, (off_t)p->extents[10].offset + 4096) == 0) {
		ok = ntx_pack_read_submit(d, p, &p->extents[12], st[0], raw[0], 1, &rd[0], &err) == 0 &&
		     ntx_pack_read_wait(d, &rd[0], &err) == -1;
		t_ok(ok && strstr(err.msg, "pack file truncated: extent of layer 12"),
		     "stream: file shrunk: %s", err.msg);
	}
	ntx_dio_close(d);
	for (x = 0; x < 3; x++) {
		free(st[x]);
		free(raw[x]);
	}
	free(want);
	ntx_pack_close(p);
	ntx_model_close(m);
}

static void test_misc(void)
{
	struct ntx_err err;
	unsigned char junk[200];
	double t0, dt;
	size_t n = 64u << 20;
	unsigned char *b = malloc(n);
	uint64_t h;
	struct timespec ts;

	memset(junk, 'x', sizeof junk);
	t_ok(ntx_pack_open_buffer(junk, sizeof junk, &err) == NULL && strstr(err.msg, "not a pack"),
	     "junk: %s", err.msg);
	t_ok(ntx_pack_open("/nonexistent.ntxp", &err) == NULL &&
		     strcmp(err.msg, "No such file or directory") == 0,
	     "missing pack: '%s'", err.msg);
	t_ok(strcmp(ntx_pack_comp_name(1), "zstd") == 0 && strcmp(ntx_pack_xform_name(1), "split2") == 0,
	     "names");
	memset(b, 3, n);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
	h = ntx_pack_checksum(b, n);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	dt = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0;
	t_diag("XXH64 checksum: %.1f GB/s (%016" PRIx64 ")", (double)n / dt / 1e9, h);
	free(b);
}

static void cleanup(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	char p[600];

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(tmpdir);
}

int main(void)
{
	const char *td = getenv("TMPDIR");

	alarm(300); /* a hang is a failure */
	snprintf(tmpdir, sizeof tmpdir, "%s/ntx-test-pack-XXXXXX", td && *td ? td : "/tmp");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_planes();
	if (!t_need_fixtures("pack round trips on the fixture models")) {
		test_dio();
		test_dio_hooks();
		test_misc();
		cleanup();
		return t_done();
	}
	round_trip("models/ref-a-q4_k_m.gguf", NTX_PACK_COMP_NONE, 0, 0, "none");
	round_trip("models/ref-a-q4_k_m.gguf", NTX_PACK_COMP_ZSTD, 0, 65536, "zstd");
	round_trip("models/ref-a-f16.gguf", NTX_PACK_COMP_NONE, 0, 0, "none");
	round_trip("models/ref-a-f16.gguf", NTX_PACK_COMP_ZSTD, 0, 0, "zstd");
	round_trip("models/ref-a-f16.gguf", NTX_PACK_COMP_ZSTD, 0, 65536, "zstd 64K frames");
	round_trip("models/ref-a-f32.gguf", NTX_PACK_COMP_ZSTD, 0.1, 1 << 20, "zstd auto");
	round_trip("models/ref-a-q6_k.gguf", NTX_PACK_COMP_ZSTD, 0.1, 0, "zstd auto");
	round_trip("tinymodel/tinymodel-f16.gguf", NTX_PACK_COMP_ZSTD, 0.1, 0, "zstd auto");
	round_trip("models/stories260K.gguf", NTX_PACK_COMP_ZSTD, 0, 4096, "zstd 4K frames");
	test_partial();
	test_image();
	test_frames();
	test_corrupt_extent();
	test_mismatch();
	test_cancel();
	test_dio();
	test_dio_hooks();
	test_stream();
	test_misc();
	cleanup();
	return t_done();
}
