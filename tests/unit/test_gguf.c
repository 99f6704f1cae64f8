/* test_gguf.c - the GGUF reader and the model view: crafted bad files built
 * in memory (every truncation, bad headers, lying counts and lengths, bad
 * tensor directories), metadata round trips through the writer, and every
 * fixture file against its README. Each crafted buffer is malloc'd at its
 * exact size so AddressSanitizer catches any read past the end. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_write.h"
#include "model.h"
#include "t.h"
#include "types.h"

/* ---- helpers ---- */

static unsigned char *dup_buf(const unsigned char *p, size_t n)
{
	unsigned char *q = malloc(n ? n : 1);

	if (!q)
		abort();
	if (n)
		memcpy(q, p, n);
	return q;
}

/* Open a copy of exactly n bytes; returns 1 if it opened. Fills *err. */
static int opens(const unsigned char *p, size_t n, struct ntx_err *err)
{
	unsigned char *q = dup_buf(p, n);
	struct ntx_gguf *g;

	ntx_err_clear(err);
	g = ntx_gguf_open_buffer(q, n, err);
	ntx_gguf_close(g);
	free(q);
	return g != NULL;
}

/* Expect a failure whose message contains want (NULL: any message). */
static void expect_fail(const unsigned char *p, size_t n, const char *want, const char *what)
{
	struct ntx_err err;
	int ok = opens(p, n, &err);

	t_ok(!ok && err.msg[0] && (!want || strstr(err.msg, want)), "%s rejected: %s", what,
	     ok ? "(opened)" : err.msg);
}

static void put32(unsigned char *p, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Position of the first occurrence of GGUF string s (length prefix + bytes). */
static size_t find_gstr(const unsigned char *buf, size_t len, const char *s)
{
	size_t n = strlen(s), i;

	for (i = 0; i + 8 + n <= len; i++) {
		uint64_t l = 0;
		int k;

		for (k = 7; k >= 0; k--)
			l = (l << 8) | buf[i + k];
		if (l == n && memcmp(buf + i + 8, s, n) == 0)
			return i;
	}
	t_diag("string '%s' not found", s);
	abort();
}

/* A small valid file: a few keys (strings, an array of strings, a nested
 * array) and three tensors with data; the last tensor ends the file. */
static unsigned char *small_file(size_t *len)
{
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	struct ntx_gguf_vbuf v = { 0 };
	struct ntx_err err;
	static const char *toks[] = { "a", "bc", "" };
	static float f32[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	static unsigned char q8[2 * 34];
	static uint16_t f16[12];
	int64_t ne1[1] = { 8 }, ne2[2] = { 32, 2 }, ne3[2] = { 4, 3 };
	unsigned char *buf;
	int i;

	for (i = 0; i < 68; i++)
		q8[i] = (unsigned char)(i * 7);
	for (i = 0; i < 12; i++)
		f16[i] = ntx_fp32_to_fp16((float)i / 4);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_ARRAY, 2);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_U32, 1);
	ntx_gguf_vbuf_u32(&v, 7);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_STRING, 1);
	ntx_gguf_vbuf_str(&v, "xy", 2);
	if (!w || ntx_gguf_writer_add_str(w, "general.architecture", "llama", &err) ||
	    ntx_gguf_writer_add_u32(w, "test.count", 5, &err) ||
	    ntx_gguf_writer_add_str_array(w, "test.tokens", toks, NULL, 3, &err) ||
	    ntx_gguf_writer_add_raw(w, "test.nested", NTX_GGUF_ARRAY, v.p, v.len, &err) ||
	    ntx_gguf_writer_add_f32(w, "test.f", 0.5f, &err) ||
	    ntx_gguf_writer_add_tensor(w, "t.q8", NTX_TYPE_Q8_0, 2, ne2, q8, &err) < 0 ||
	    ntx_gguf_writer_add_tensor(w, "t.f16", NTX_TYPE_F16, 2, ne3, f16, &err) < 0 ||
	    ntx_gguf_writer_add_tensor(w, "t.f32", NTX_TYPE_F32, 1, ne1, f32, &err) < 0 ||
	    ntx_gguf_writer_write_mem(w, &buf, len, &err)) {
		t_diag("small_file: %s", err.msg);
		abort();
	}
	ntx_gguf_vbuf_free(&v);
	ntx_gguf_writer_free(w);
	return buf;
}

/* A crafted tensor-directory entry, written exactly as given. */
struct rt {
	const char *name;
	uint32_t n_dims;
	uint64_t ne[6];
	uint32_t type;
	uint64_t offset;
};

/* Header (one key unless kv is given), the directory as given, padding to
 * 32, then data_bytes zeros. */
static unsigned char *craft(const struct ntx_gguf_vbuf *kv, uint64_t n_kv, const struct rt *t,
			    int nt, uint64_t data_bytes, size_t *len)
{
	struct ntx_gguf_vbuf b = { 0 };
	int i;
	uint32_t d;

	ntx_gguf_vbuf_put(&b, "GGUF", 4);
	ntx_gguf_vbuf_u32(&b, 3);
	ntx_gguf_vbuf_u64(&b, (uint64_t)nt);
	if (kv) {
		ntx_gguf_vbuf_u64(&b, n_kv);
		ntx_gguf_vbuf_put(&b, kv->p, kv->len);
	} else {
		ntx_gguf_vbuf_u64(&b, 1);
		ntx_gguf_vbuf_str(&b, "general.architecture", 20);
		ntx_gguf_vbuf_u32(&b, NTX_GGUF_STRING);
		ntx_gguf_vbuf_str(&b, "llama", 5);
	}
	for (i = 0; i < nt; i++) {
		ntx_gguf_vbuf_str(&b, t[i].name, strlen(t[i].name));
		ntx_gguf_vbuf_u32(&b, t[i].n_dims);
		for (d = 0; d < t[i].n_dims && d < 6; d++)
			ntx_gguf_vbuf_u64(&b, t[i].ne[d]);
		ntx_gguf_vbuf_u32(&b, t[i].type);
		ntx_gguf_vbuf_u64(&b, t[i].offset);
	}
	while (b.len % 32)
		ntx_gguf_vbuf_u8(&b, 0);
	while (data_bytes--)
		ntx_gguf_vbuf_u8(&b, 0);
	if (b.oom)
		abort();
	*len = b.len;
	return b.p;
}

/* One key/value pair (key, type tag, raw value) into kv. */
static void kv_raw(struct ntx_gguf_vbuf *kv, const char *key, uint32_t type,
		   const struct ntx_gguf_vbuf *val)
{
	ntx_gguf_vbuf_str(kv, key, strlen(key));
	ntx_gguf_vbuf_u32(kv, type);
	ntx_gguf_vbuf_put(kv, val->p, val->len);
}

/* ---- header ---- */

static void test_truncation(void)
{
	size_t len, i, bad = 0, first_bad = 0;
	unsigned char *buf = small_file(&len);
	struct ntx_err err;

	t_ok(opens(buf, len, &err), "small file opens (%zu bytes) %s", len, err.msg);
	for (i = 0; i < len; i++) {
		if (opens(buf, i, &err) || !err.msg[0]) {
			if (!bad++)
				first_bad = i;
		}
	}
	t_ok(bad == 0, "all %zu truncations fail with a message (%zu opened, first at %zu)", len,
	     bad, first_bad);
	/* a few messages, for the record */
	opens(buf, 0, &err);
	t_ok(strstr(err.msg, "empty") != NULL, "0 bytes: %s", err.msg);
	opens(buf, 3, &err);
	t_ok(strstr(err.msg, "too small") != NULL, "3 bytes: %s", err.msg);
	opens(buf, len - 1, &err);
	t_ok(strstr(err.msg, "exceeds") != NULL, "one byte short: %s", err.msg);
	free(buf);
}

static void test_header(void)
{
	size_t len;
	unsigned char *buf = small_file(&len);
	unsigned char *b = dup_buf(buf, len);
	struct ntx_err err;

	b[0] = 'X';
	expect_fail(b, len, "bad magic", "bad magic");
	memcpy(b, buf, len);
	put32(b + 4, 4);
	expect_fail(b, len, "unknown GGUF version 4", "version 4");
	put32(b + 4, 0);
	expect_fail(b, len, "version 0", "version 0");
	put32(b + 4, 1);
	expect_fail(b, len, "version 1 is not supported", "version 1");
	put32(b + 4, 0x03000000u);
	expect_fail(b, len, "big-endian", "big-endian version 3");
	put32(b + 4, 2);
	t_ok(opens(b, len, &err), "version 2 (same layout as 3) opens: %s", err.msg);
	memcpy(b, buf, len);
	put64(b + 8, 1ull << 62);
	expect_fail(b, len, "tensor count", "absurd tensor count");
	memcpy(b, buf, len);
	put64(b + 8, 100);
	expect_fail(b, len, NULL, "tensor count slightly too large");
	memcpy(b, buf, len);
	put64(b + 16, UINT64_MAX);
	expect_fail(b, len, "metadata count", "absurd metadata count");
	memcpy(b, buf, len);
	put64(b + 16, 7);
	expect_fail(b, len, NULL, "metadata count one too large");
	memcpy(b, buf, len);
	put64(b + 24, 1ull << 40); /* first key's length */
	expect_fail(b, len, "metadata key length", "key length past the end");
	memcpy(b, buf, len);
	put64(b + 24, 0);
	expect_fail(b, len, NULL, "empty key");
	free(b);
	free(buf);
}

/* ---- metadata ---- */

static void test_kv_errors(void)
{
	struct ntx_gguf_vbuf kv = { 0 }, v = { 0 };
	unsigned char *f;
	size_t len, p;
	int d;
	unsigned char *buf = small_file(&len), *b = dup_buf(buf, len);

	/* string value length past the end */
	p = find_gstr(buf, len, "general.architecture") + 8 + 20 + 4;
	put64(b + p, (uint64_t)len);
	expect_fail(b, len, "string value length", "string length past the end");
	memcpy(b, buf, len);
	put64(b + p, UINT64_MAX);
	expect_fail(b, len, "string value length", "string length 2^64-1");
	/* array count of the string array past the end */
	memcpy(b, buf, len);
	p = find_gstr(buf, len, "test.tokens") + 8 + 11 + 4 + 4;
	put64(b + p, 1ull << 59);
	expect_fail(b, len, "exceeds", "string array count past the end");
	memcpy(b, buf, len);
	put64(b + p, 4);
	expect_fail(b, len, NULL, "string array count one too large");
	/* unknown value type and element type */
	memcpy(b, buf, len);
	p = find_gstr(buf, len, "test.count") + 8 + 10;
	put32(b + p, 13);
	expect_fail(b, len, "unknown value type 13", "unknown value type");
	memcpy(b, buf, len);
	p = find_gstr(buf, len, "test.tokens") + 8 + 11 + 4;
	put32(b + p, 99);
	expect_fail(b, len, "unknown array element type 99", "unknown array element type");
	free(b);

	/* duplicates crafted directly */
	ntx_gguf_vbuf_u32(&v, 1);
	kv_raw(&kv, "a.b", NTX_GGUF_U32, &v);
	kv_raw(&kv, "a.b", NTX_GGUF_U32, &v);
	f = craft(&kv, 2, NULL, 0, 0, &len);
	expect_fail(f, len, "duplicate metadata key 'a.b'", "duplicate key");
	free(f);
	ntx_gguf_vbuf_free(&kv);
	ntx_gguf_vbuf_free(&v);

	/* array count past the end (fixed-size elements) */
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_U32, 1ull << 40);
	ntx_gguf_vbuf_u32(&v, 1);
	kv_raw(&kv, "a.arr", NTX_GGUF_ARRAY, &v);
	f = craft(&kv, 1, NULL, 0, 0, &len);
	expect_fail(f, len, "array of 1099511627776 u32", "u32 array count past the end");
	free(f);
	ntx_gguf_vbuf_free(&kv);
	ntx_gguf_vbuf_free(&v);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_U64, UINT64_MAX / 4);
	kv_raw(&kv, "a.arr", NTX_GGUF_ARRAY, &v);
	f = craft(&kv, 1, NULL, 0, 0, &len);
	expect_fail(f, len, "exceeds", "u64 array count whose byte size overflows");
	free(f);
	ntx_gguf_vbuf_free(&kv);
	ntx_gguf_vbuf_free(&v);
	/* array of arrays whose count lies */
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_ARRAY, 1ull << 50);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_U8, 0);
	kv_raw(&kv, "a.arr", NTX_GGUF_ARRAY, &v);
	f = craft(&kv, 1, NULL, 0, 0, &len);
	expect_fail(f, len, "exceeds", "nested array count past the end");
	free(f);
	ntx_gguf_vbuf_free(&kv);
	ntx_gguf_vbuf_free(&v);
	/* bool values other than 0/1 */
	ntx_gguf_vbuf_u8(&v, 2);
	kv_raw(&kv, "a.bool", NTX_GGUF_BOOL, &v);
	f = craft(&kv, 1, NULL, 0, 0, &len);
	expect_fail(f, len, "bool value 2", "bool value 2");
	free(f);
	ntx_gguf_vbuf_free(&kv);
	ntx_gguf_vbuf_free(&v);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_BOOL, 3);
	ntx_gguf_vbuf_put(&v, "\0\1\5", 3);
	kv_raw(&kv, "a.bools", NTX_GGUF_ARRAY, &v);
	f = craft(&kv, 1, NULL, 0, 0, &len);
	expect_fail(f, len, "bool element 2", "bool array element 5");
	free(f);
	ntx_gguf_vbuf_free(&kv);
	ntx_gguf_vbuf_free(&v);

	/* nesting: NTX_GGUF_MAX_DEPTH arrays deep opens, one more does not */
	for (d = NTX_GGUF_MAX_DEPTH; d <= NTX_GGUF_MAX_DEPTH + 1; d++) {
		struct ntx_err err;
		int k;

		for (k = 0; k < d - 1; k++)
			ntx_gguf_vbuf_arr(&v, NTX_GGUF_ARRAY, 1);
		ntx_gguf_vbuf_arr(&v, NTX_GGUF_U8, 1);
		ntx_gguf_vbuf_u8(&v, 42);
		kv_raw(&kv, "a.deep", NTX_GGUF_ARRAY, &v);
		f = craft(&kv, 1, NULL, 0, 0, &len);
		if (d == NTX_GGUF_MAX_DEPTH)
			t_ok(opens(f, len, &err), "arrays nested %d deep open: %s", d, err.msg);
		else
			expect_fail(f, len, "nested deeper", "arrays nested too deep");
		free(f);
		ntx_gguf_vbuf_free(&kv);
		ntx_gguf_vbuf_free(&v);
	}
	/* deep nesting with a huge count at every level (no blow-up) */
	for (d = 0; d < 64; d++)
		ntx_gguf_vbuf_arr(&v, NTX_GGUF_ARRAY, 1ull << 40);
	kv_raw(&kv, "a.deep", NTX_GGUF_ARRAY, &v);
	f = craft(&kv, 1, NULL, 0, 0, &len);
	expect_fail(f, len, NULL, "64 levels of huge nested arrays");
	free(f);
	ntx_gguf_vbuf_free(&kv);
	ntx_gguf_vbuf_free(&v);
	free(buf);
}

/* general.alignment: bad values rejected, good ones move the data. */
static void test_alignment(void)
{
	static const struct {
		uint32_t type;
		uint64_t v;
		const char *want;
	} bad[] = {
		{ NTX_GGUF_U32, 0, "not a power of two" },
		{ NTX_GGUF_U32, 3, "not a power of two" },
		{ NTX_GGUF_U32, 48, "not a power of two" },
		{ NTX_GGUF_U32, 1u << 31, "not a power of two" },
		{ NTX_GGUF_U64, 1ull << 40, "not a power of two" },
		{ NTX_GGUF_I32, (uint64_t)-1, "must be an unsigned integer" },
		{ NTX_GGUF_F32, 0, "must be an unsigned integer" },
		{ NTX_GGUF_STRING, 0, "must be an unsigned integer" },
	};
	size_t i, len;
	struct ntx_err err;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct ntx_gguf_vbuf kv = { 0 }, v = { 0 };
		unsigned char *f;

		if (bad[i].type == NTX_GGUF_STRING)
			ntx_gguf_vbuf_str(&v, "32", 2);
		else if (bad[i].type == NTX_GGUF_F32)
			ntx_gguf_vbuf_f32(&v, 32.0f);
		else if (bad[i].type == NTX_GGUF_U64)
			ntx_gguf_vbuf_u64(&v, bad[i].v);
		else
			ntx_gguf_vbuf_u32(&v, (uint32_t)bad[i].v);
		kv_raw(&kv, "general.alignment", bad[i].type, &v);
		f = craft(&kv, 1, NULL, 0, 0, &len);
		expect_fail(f, len, bad[i].want, "bad general.alignment");
		free(f);
		ntx_gguf_vbuf_free(&kv);
		ntx_gguf_vbuf_free(&v);
	}
	for (i = 0; i < 4; i++) {
		static const uint32_t al[] = { 1, 8, 64, 4096 };
		struct ntx_gguf_writer *w = ntx_gguf_writer_new();
		float data[3] = { 1, 2, 3 };
		int64_t ne[1] = { 3 };
		unsigned char *buf;
		struct ntx_gguf *g = NULL;

		if (ntx_gguf_writer_set_alignment(w, al[i], &err) ||
		    ntx_gguf_writer_add_tensor(w, "a", NTX_TYPE_F32, 1, ne, data, &err) < 0 ||
		    ntx_gguf_writer_add_tensor(w, "b", NTX_TYPE_F32, 1, ne, data, &err) < 0 ||
		    ntx_gguf_writer_write_mem(w, &buf, &len, &err) ||
		    !(g = ntx_gguf_open_buffer(buf, len, &err))) {
			t_ok(0, "alignment %u: %s", al[i], err.msg);
		} else {
			const struct ntx_gguf_tensor *b = ntx_gguf_find_tensor(g, "b");

			t_ok(g->alignment == al[i] && g->data_offset % al[i] == 0 && b &&
				     b->offset % al[i] == 0 && b->offset >= 12 &&
				     memcmp(b->data, data, 12) == 0 && len % al[i] == 0,
			     "alignment %u: data at %llu, b at +%llu", al[i],
			     (unsigned long long)g->data_offset, (unsigned long long)b->offset);
		}
		ntx_gguf_close(g);
		free(buf);
		ntx_gguf_writer_free(w);
	}
}

/* ---- tensor directory ---- */

static void test_tensors(void)
{
	struct {
		struct rt t[2];
		int nt;
		uint64_t data;
		const char *want, *what;
	} cases[] = {
		{ { { "t", 0, { 0 }, 0, 0 } }, 1, 32, "0 dimensions", "n_dims 0" },
		{ { { "t", 5, { 1, 1, 1, 1, 1 }, 0, 0 } }, 1, 32, "5 dimensions", "n_dims 5" },
		{ { { "t", UINT32_MAX, { 1 }, 0, 0 } }, 1, 32, "dimensions", "n_dims 2^32-1" },
		{ { { "t", 2, { 1ull << 32, 1ull << 32 }, 0, 0 } }, 1, 32, "overflows",
		  "dimension product overflows" },
		{ { { "t", 4, { 1ull << 20, 1ull << 20, 1ull << 20, 1ull << 4 }, 0, 0 } }, 1, 32,
		  "overflows", "4-d product overflows" },
		{ { { "t", 1, { 1ull << 63 }, 0, 0 } }, 1, 32, "above the limit", "dimension 2^63" },
		{ { { "t", 2, { 1ull << 31, 1ull << 31 }, 0, 0 } }, 1, 32, "byte size overflows",
		  "byte size overflows (F32 2^62 elements)" },
		{ { { "t", 1, { 1ull << 62 }, 0, 0 } }, 1, 32, "overflows",
		  "row byte size overflows (F32 2^62 elements)" },
		{ { { "t", 1, { 32 }, 99, 0 } }, 1, 64, "unknown type 99", "unknown type 99" },
		{ { { "t", 1, { 32 }, 4, 0 } }, 1, 64, "unknown type 4", "removed type 4 (Q4_2)" },
		{ { { "t", 1, { 32 }, 31, 0 } }, 1, 64, "unknown type 31", "removed type 31" },
		{ { { "t", 1, { 33 }, NTX_TYPE_Q4_0, 0 } }, 1, 64, "not a multiple of the Q4_0 block",
		  "row not a block multiple (Q4_0)" },
		{ { { "t", 2, { 128, 2 }, NTX_TYPE_Q4_K, 0 } }, 1, 512, "Q4_K block size 256",
		  "row not a block multiple (Q4_K)" },
		{ { { "t", 1, { 8 }, 0, 64 } }, 1, 64, "exceeds the data section",
		  "offset past the end" },
		{ { { "t", 1, { 8 }, 0, UINT64_MAX - 31 } }, 1, 64, "exceeds the data section",
		  "offset near 2^64" },
		{ { { "t", 1, { 17 }, 0, 0 } }, 1, 64, "exceeds the data section",
		  "data one element short" },
		{ { { "t", 1, { 8 }, 0, 16 } }, 1, 64, "not a multiple of the alignment",
		  "misaligned offset" },
		{ { { "t", 1, { 8 }, 0, 0 }, { "t", 1, { 8 }, 0, 32 } }, 2, 64,
		  "duplicate tensor name 't'", "duplicate tensor name" },
		{ { { "", 1, { 8 }, 0, 0 } }, 1, 64, "empty name", "empty tensor name" },
	};
	size_t i, len;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		unsigned char *f = craft(NULL, 0, cases[i].t, cases[i].nt, cases[i].data, &len);

		expect_fail(f, len, cases[i].want, cases[i].what);
		free(f);
	}
	{
		/* a name with an embedded NUL, written by hand */
		struct ntx_gguf_vbuf b = { 0 };

		ntx_gguf_vbuf_put(&b, "GGUF", 4);
		ntx_gguf_vbuf_u32(&b, 3);
		ntx_gguf_vbuf_u64(&b, 1);
		ntx_gguf_vbuf_u64(&b, 0);
		ntx_gguf_vbuf_str(&b, "a\0b", 3);
		ntx_gguf_vbuf_u32(&b, 1);
		ntx_gguf_vbuf_u64(&b, 8);
		ntx_gguf_vbuf_u32(&b, 0);
		ntx_gguf_vbuf_u64(&b, 0);
		while (b.len < 128)
			ntx_gguf_vbuf_u8(&b, 0);
		expect_fail(b.p, b.len, "NUL byte", "tensor name with an embedded NUL");
		ntx_gguf_vbuf_free(&b);
	}
	{
		/* a name longer than the limit */
		char *name = malloc(NTX_GGUF_MAX_NAME + 2);
		struct rt t = { name, 1, { 8 }, 0, 0 };
		unsigned char *f;

		memset(name, 'x', NTX_GGUF_MAX_NAME + 1);
		name[NTX_GGUF_MAX_NAME + 1] = '\0';
		f = craft(NULL, 0, &t, 1, 64, &len);
		expect_fail(f, len, "exceeds the limit", "tensor name too long");
		free(f);
		free(name);
	}
	{
		/* zero-sized dimensions are legal; a zero-byte tensor may sit at
		 * the end of the data section */
		struct rt t[2] = { { "z", 2, { 0, 5 }, 0, 0 }, { "y", 2, { 32, 0 }, 8, 0 } };
		unsigned char *f = craft(NULL, 0, t, 2, 0, &len);
		struct ntx_err err;

		t_ok(opens(f, len, &err), "zero-sized tensors open: %s", err.msg);
		free(f);
	}
}

/* ---- round trips ---- */

static void test_roundtrip(void)
{
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	struct ntx_gguf_vbuf v = { 0 };
	struct ntx_err err;
	uint8_t u8 = 200, bl = 1;
	int8_t i8 = -100;
	uint16_t u16 = 65000;
	int16_t i16 = -30000;
	uint32_t u32 = 4000000000u;
	int32_t i32 = -2000000000;
	float f32 = -1.5e-7f;
	uint64_t u64 = UINT64_MAX - 5;
	int64_t i64 = INT64_MIN + 7;
	double f64 = 3.141592653589793;
	static const int32_t ai32[5] = { -1, 0, 1, INT32_MAX, INT32_MIN };
	static const double af64[2] = { 1e300, -0.0 };
	static const uint8_t abool[3] = { 1, 0, 1 };
	const char *strs[4] = { "", "hello", "caf\xc3\xa9", "nul\0inside" };
	size_t lens[4] = { 0, 5, 5, 10 };
	unsigned char *buf;
	size_t len;
	struct ntx_gguf *g = NULL;
	int ok = 1;

	ok &= !ntx_gguf_writer_add_scalar(w, "v.u8", NTX_GGUF_U8, &u8, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.i8", NTX_GGUF_I8, &i8, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.u16", NTX_GGUF_U16, &u16, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.i16", NTX_GGUF_I16, &i16, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.u32", NTX_GGUF_U32, &u32, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.i32", NTX_GGUF_I32, &i32, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.f32", NTX_GGUF_F32, &f32, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.bool", NTX_GGUF_BOOL, &bl, &err);
	ok &= !ntx_gguf_writer_add_strn(w, "v.str", strs[3], lens[3], &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.u64", NTX_GGUF_U64, &u64, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.i64", NTX_GGUF_I64, &i64, &err);
	ok &= !ntx_gguf_writer_add_scalar(w, "v.f64", NTX_GGUF_F64, &f64, &err);
	ok &= !ntx_gguf_writer_add_array(w, "a.i32", NTX_GGUF_I32, ai32, 5, &err);
	ok &= !ntx_gguf_writer_add_array(w, "a.f64", NTX_GGUF_F64, af64, 2, &err);
	ok &= !ntx_gguf_writer_add_array(w, "a.bool", NTX_GGUF_BOOL, abool, 3, &err);
	ok &= !ntx_gguf_writer_add_array(w, "a.empty", NTX_GGUF_U8, NULL, 0, &err);
	ok &= !ntx_gguf_writer_add_str_array(w, "a.str", strs, lens, 4, &err);
	/* [[1, 2], [], [["x"]]] as array of arrays of mixed element types */
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_ARRAY, 3);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_U16, 2);
	ntx_gguf_vbuf_u16(&v, 1);
	ntx_gguf_vbuf_u16(&v, 2);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_F32, 0);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_ARRAY, 1);
	ntx_gguf_vbuf_arr(&v, NTX_GGUF_STRING, 1);
	ntx_gguf_vbuf_str(&v, "x", 1);
	ok &= !ntx_gguf_writer_add_raw(w, "a.nested", NTX_GGUF_ARRAY, v.p, v.len, &err);
	ok &= !ntx_gguf_writer_write_mem(w, &buf, &len, &err);
	t_ok(ok, "every value type written: %s", ok ? "" : err.msg);
	if (!ok)
		goto out;
	g = ntx_gguf_open_buffer(buf, len, &err);
	t_ok(g && g->n_kv == 18 && g->n_tensors == 0, "round-trip file opens: %s", g ? "" : err.msg);
	if (!g)
		goto out;
	{
		uint64_t u;
		int64_t s;
		double d;
		struct ntx_gguf_str st;
		const struct ntx_gguf_kv *kv;
		struct ntx_gguf_value e, e2;
		uint64_t i;
		int good;

#define U(k, want) (ntx_gguf_get_u64(g, k, &u, &err) == 1 && u == (want))
#define S(k, want) (ntx_gguf_value_i64(&ntx_gguf_find(g, k)->val, &s) == 0 && s == (want))
		t_ok(U("v.u8", 200) && U("v.u16", 65000) && U("v.u32", 4000000000u) &&
			     U("v.u64", UINT64_MAX - 5) && U("v.bool", 1),
		     "unsigned scalars round-trip");
		t_ok(S("v.i8", -100) && S("v.i16", -30000) && S("v.i32", -2000000000) &&
			     S("v.i64", INT64_MIN + 7),
		     "signed scalars round-trip");
		t_ok(ntx_gguf_get_u64(g, "v.i8", &u, &err) == -1 && strstr(err.msg, "v.i8"),
		     "negative value as unsigned is an error: %s", err.msg);
		t_ok(ntx_gguf_get_f64(g, "v.f32", &d, &err) == 1 && d == (double)-1.5e-7f,
		     "f32 round-trips");
		t_ok(ntx_gguf_get_f64(g, "v.f64", &d, &err) == 1 && d == 3.141592653589793,
		     "f64 round-trips");
		t_ok(ntx_gguf_get_str(g, "v.str", &st, &err) == 1 && st.len == 10 &&
			     memcmp(st.p, "nul\0inside", 10) == 0,
		     "string with a NUL round-trips");
		t_ok(ntx_gguf_get_str(g, "v.u8", &st, &err) == -1 && strstr(err.msg, "found u8"),
		     "type mismatch named: %s", err.msg);
		t_ok(ntx_gguf_get_u64(g, "no.such", &u, &err) == 0, "absent key gives 0");
		kv = ntx_gguf_find(g, "a.i32");
		good = kv && kv->val.elem_type == NTX_GGUF_I32 && kv->val.n == 5;
		for (i = 0; good && i < 5; i++)
			good = !ntx_gguf_array_get(kv, &kv->val, i, &e) &&
			       !ntx_gguf_value_i64(&e, &s) && s == ai32[i];
		t_ok(good, "i32 array round-trips");
		kv = ntx_gguf_find(g, "a.f64");
		t_ok(kv && !ntx_gguf_array_get(kv, &kv->val, 0, &e) && !ntx_gguf_value_f64(&e, &d) &&
			     d == 1e300 && !ntx_gguf_array_get(kv, &kv->val, 1, &e) &&
			     !ntx_gguf_value_f64(&e, &d) && d == 0 && signbit(d),
		     "f64 array round-trips (incl. -0)");
		kv = ntx_gguf_find(g, "a.bool");
		t_ok(kv && kv->val.n == 3 && !ntx_gguf_array_get(kv, &kv->val, 1, &e) &&
			     e.p[0] == 0 && ntx_gguf_array_get(kv, &kv->val, 3, &e) == -1,
		     "bool array round-trips; index past the end fails");
		kv = ntx_gguf_find(g, "a.empty");
		t_ok(kv && kv->val.n == 0 && kv->val.elem_type == NTX_GGUF_U8 && kv->val.size == 0,
		     "empty array round-trips");
		kv = ntx_gguf_find(g, "a.str");
		good = kv && kv->str_index && kv->val.n == 4;
		for (i = 0; good && i < 4; i++) {
			st = ntx_gguf_arr_str(kv, i);
			good = st.len == lens[i] && memcmp(st.p, strs[i], lens[i]) == 0;
		}
		for (i = 0; good && i < 4; i++) {
			good = !ntx_gguf_array_next(&kv->val, i, &e) &&
			       !ntx_gguf_value_str(&e, &st) && st.len == lens[i] &&
			       memcmp(st.p, strs[i], lens[i]) == 0;
		}
		t_ok(good && ntx_gguf_array_next(&kv->val, 4, &e) == -1,
		     "string array round-trips (index and iterator)");
		kv = ntx_gguf_find(g, "a.nested");
		good = kv && kv->val.elem_type == NTX_GGUF_ARRAY && kv->val.n == 3 &&
		       !ntx_gguf_array_get(kv, &kv->val, 0, &e) && e.type == NTX_GGUF_ARRAY &&
		       e.elem_type == NTX_GGUF_U16 && e.n == 2 &&
		       !ntx_gguf_array_get(NULL, &e, 1, &e2) && !ntx_gguf_value_u64(&e2, &u) &&
		       u == 2 && !ntx_gguf_array_get(kv, &kv->val, 1, &e) &&
		       e.elem_type == NTX_GGUF_F32 && e.n == 0 &&
		       !ntx_gguf_array_get(kv, &kv->val, 2, &e) && e.elem_type == NTX_GGUF_ARRAY &&
		       !ntx_gguf_array_get(NULL, &e, 0, &e2) && e2.elem_type == NTX_GGUF_STRING &&
		       !ntx_gguf_array_get(NULL, &e2, 0, &e) && !ntx_gguf_value_str(&e, &st) &&
		       st.len == 1 && st.p[0] == 'x';
		t_ok(good, "nested arrays round-trip");
		/* the iterator visits the same elements as array_get */
		good = kv != NULL;
		for (i = 0; good && i < 3; i++)
			good = !ntx_gguf_array_next(&kv->val, i, &e) &&
			       !ntx_gguf_array_get(kv, &kv->val, i, &e2) && e.p == e2.p &&
			       e.size == e2.size && e.n == e2.n;
		t_ok(good, "array iterator agrees with array_get on nested arrays");
		/* every pair is in order and a copy through the writer is byte-identical */
		{
			struct ntx_gguf_writer *w2 = ntx_gguf_writer_new();
			unsigned char *b2 = NULL;
			size_t l2 = 0;

			good = 1;
			for (i = 0; i < g->n_kv && good; i++)
				good = !ntx_gguf_writer_copy_kv(w2, &g->kv[i], &err);
			good = good && !ntx_gguf_writer_write_mem(w2, &b2, &l2, &err);
			t_ok(good && l2 == len && memcmp(b2, buf, len) == 0,
			     "copying every pair reproduces the file byte for byte");
			free(b2);
			ntx_gguf_writer_free(w2);
		}
#undef U
#undef S
	}
out:
	ntx_gguf_close(g);
	ntx_gguf_vbuf_free(&v);
	free(buf);
	ntx_gguf_writer_free(w);
}

int main(void)
{
	test_truncation();
	test_header();
	test_kv_errors();
	test_alignment();
	test_tensors();
	test_roundtrip();
	return t_done();
}
