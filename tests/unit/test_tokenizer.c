/* test_tokenizer.c - the tokenizers, detokenizers and chat formats against
 * llama.cpp's outputs (commit c392e509) in ../shared/fixtures:
 *   vocab/X.gguf.inp, .out  llama.cpp's own test vectors, one TAP line each
 *   vocab/X-cases.jsonl     ids, ids with parse_special, both detok fields
 *   ref/stories260K         prompt ids of the SPM reference models
 *   tinymodel/eval.txt      the Llama-3-style tinymodel's token count
 * plus the streaming detokenizer, chat formatting and corrupt vocabularies
 * built in memory with a small GGUF writer. */
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "gguf.h"
#include "t.h"
#include "tokenizer.h"
#include "unicode.h"

/* ---- helpers ---- */

static char *slurp(const char *rel, size_t *len)
{
	char path[1024];
	FILE *f;
	char *buf = NULL;
	long n;

	snprintf(path, sizeof path, "%s/%s", t_fixtures(), rel);
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
			buf[n] = 0;
			*len = (size_t)n;
		} else {
			free(buf);
			buf = NULL;
		}
	}
	fclose(f);
	return buf;
}

struct vocab_file {
	struct ntx_gguf *g;
	struct ntx_vocab *v;
	double load_ms;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int open_vocab(const char *rel, struct vocab_file *vf)
{
	char path[1024];
	struct ntx_err err = { 0 };
	double t0;

	snprintf(path, sizeof path, "%s/%s", t_fixtures(), rel);
	vf->v = NULL;
	vf->g = ntx_gguf_open(path, &err);
	if (!vf->g) {
		t_ok(0, "open %s: %s", rel, err.msg);
		return -1;
	}
	t0 = now_ms();
	vf->v = ntx_vocab_load(vf->g, &err);
	vf->load_ms = now_ms() - t0;
	if (!t_ok(vf->v != NULL, "load vocabulary of %s%s%s", rel, vf->v ? "" : ": ", err.msg))
		return -1;
	return 0;
}

static void close_vocab(struct vocab_file *vf)
{
	ntx_vocab_free(vf->v);
	ntx_gguf_close(vf->g);
}

static int ids_eq(const int32_t *a, int na, const int32_t *b, int nb)
{
	return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* "[1 2 3]" of at most 24 ids, for diagnostics. */
static const char *ids_str(const int32_t *a, int n, char *buf, size_t cap)
{
	size_t o = 0;
	int i;

	o += (size_t)snprintf(buf + o, cap - o, "[");
	for (i = 0; i < n && i < 24 && o < cap - 16; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? " " : "", a[i]);
	snprintf(buf + o, cap - o, "%s]", i < n ? " ..." : "");
	return buf;
}

static int tok(const struct ntx_vocab *v, const char *s, size_t n, int bos, int special,
	       int32_t **ids, int *nids)
{
	struct ntx_err err = { 0 };

	if (ntx_tokenize(v, s, n, bos, special, ids, nids, &err)) {
		t_diag("tokenize: %s", err.msg);
		*ids = NULL;
		*nids = -1;
		return -1;
	}
	return 0;
}

/* ---- llama.cpp's .inp/.out vectors ---- */

static void test_inp_out_n(const struct ntx_vocab *v, const char *inp_rel, const char *out_rel,
			   int n_cases)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	size_t inl, outl, pos = 0, opos = 0;
	char *inp = slurp(inp_rel, &inl), *out = slurp(out_rel, &outl);
	int n = 0, bad = 0;

	if (!t_ok(inp && out, "read %s and %s", inp_rel, out_rel))
		goto done;
	while (pos < inl) {
		const char *m = memmem(inp + pos, inl - pos, sep, sizeof sep - 1);
		size_t tl = m ? (size_t)(m - (inp + pos)) : inl - pos;
		int32_t want[4096], *got;
		int nw = 0, ng;
		char *eol = memchr(out + opos, '\n', outl - opos), *p, b1[512], b2[512];

		if (!m || !eol) {
			t_ok(0, "%s: case %d: malformed fixture", inp_rel, n + 1);
			break;
		}
		for (p = out + opos; p < eol && nw < 4096;) {
			char *e;
			long x = strtol(p, &e, 10);

			if (e == p)
				break;
			want[nw++] = (int32_t)x;
			p = e;
		}
		tok(v, inp + pos, tl, 0, 0, &got, &ng);
		n++;
		if (!t_ok(ids_eq(got, ng, want, nw), "%s case %d (%zu bytes)", inp_rel, n, tl)) {
			t_diag("want %s", ids_str(want, nw, b1, sizeof b1));
			t_diag("got  %s", ids_str(got, ng, b2, sizeof b2));
			bad++;
		}
		free(got);
		pos += tl + sizeof sep - 1;
		opos = (size_t)(eol - out) + 1;
	}
	t_ok(n == n_cases && opos == outl, "%s: all %d cases read (%d, %d failed)", inp_rel, n_cases,
	     n, bad);
done:
	free(inp);
	free(out);
}

static void test_inp_out(const struct ntx_vocab *v, const char *inp_rel, const char *out_rel)
{
	test_inp_out_n(v, inp_rel, out_rel, 46);
}

/* ---- the qwen2 pre-tokenizer (vocab/README.md, tinybpe) ---- */

static void test_qwen2(void)
{
	struct vocab_file q2, tiny;
	int32_t *a = NULL, *b = NULL;
	int na = 0, nb = 0;
	char *back = NULL;
	size_t bl = 0;
	struct ntx_err err = { 0 };

	if (open_vocab("vocab/ggml-vocab-tinybpe-qwen2.gguf", &q2))
		return;
	test_inp_out(q2.v, "vocab/ggml-vocab-tinybpe-qwen2.gguf.inp",
		     "vocab/ggml-vocab-tinybpe-qwen2.gguf.out");
	test_inp_out_n(q2.v, "vocab/tinybpe-pretok-extra.inp", "vocab/tinybpe-pretok-extra.qwen2.out",
		       25);
	/* defaults: no BOS (the tokenizer adds nothing with add_bos), no
	 * clean-spaces pass in detokenization */
	t_ok(ntx_vocab_add_bos(q2.v) == 0 && ntx_vocab_bos(q2.v) == 8187,
	     "qwen2: BOS 8187 exists but is not added by default");
	tok(q2.v, "Hello", 5, 1, 0, &a, &na);
	t_ok(na > 0 && a[0] != 8187, "qwen2: tokenize with add_bos adds no BOS (%d ids, first %d)", na,
	     na > 0 ? a[0] : -1);
	free(a);
	a = NULL;
	tok(q2.v, "a , b . c ?", 11, 0, 0, &a, &na);
	if (na > 0 && ntx_detokenize(q2.v, a, na, 0, 0, &back, &bl, &err) == 0)
		t_ok(bl == 11 && memcmp(back, "a , b . c ?", 11) == 0,
		     "qwen2: detokenize keeps ' ,' ' .' ' ?' (clean_spaces false): '%s'", back);
	else
		t_ok(0, "qwen2: detokenize (%s)", err.msg);
	free(back);
	back = NULL;
	if (open_vocab("tinymodel/tinymodel-q8_0.gguf", &tiny) == 0) {
		/* the same vocabulary with pre llama-bpe: digits in groups of 3,
		 * spaces cleaned */
		tok(tiny.v, "12345", 5, 0, 0, &b, &nb);
		free(a);
		tok(q2.v, "12345", 5, 0, 0, &a, &na);
		t_ok(na == 5 && nb > 0 && nb < 5,
		     "qwen2 splits 12345 into 5 digits (%d ids), llama-bpe into 123|45 (%d ids)", na, nb);
		free(a);
		a = NULL;
		tok(tiny.v, "a , b . c ?", 11, 0, 0, &a, &na);
		if (na > 0 && ntx_detokenize(tiny.v, a, na, 0, 0, &back, &bl, &err) == 0)
			t_ok(bl == 8 && memcmp(back, "a, b. c?", 8) == 0,
			     "llama-bpe: detokenize cleans the spaces: '%s'", back);
		free(back);
		close_vocab(&tiny);
	}
	free(a);
	free(b);
	close_vocab(&q2);
}

/* ---- the JSONL cases ---- */

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decode a lowercase hex string; returns malloc'ed bytes or NULL. */
static char *unhex(const char *h, size_t *n)
{
	size_t l = strlen(h), i;
	char *b = malloc(l / 2 + 1);

	if (!b || l % 2)
		goto bad;
	for (i = 0; i < l / 2; i++) {
		int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);

		if (hi < 0 || lo < 0)
			goto bad;
		b[i] = (char)(hi << 4 | lo);
	}
	*n = l / 2;
	return b;
bad:
	free(b);
	return NULL;
}

static int json_ids(json_t *a, int32_t **ids, int *n)
{
	size_t i;

	*n = 0;
	*ids = malloc((json_array_size(a) + 1) * sizeof **ids);
	if (!json_is_array(a) || !*ids)
		return -1;
	for (i = 0; i < json_array_size(a); i++) {
		json_t *x = json_array_get(a, i);

		if (!json_is_integer(x))
			return -1;
		(*ids)[(*n)++] = (int32_t)json_integer_value(x);
	}
	return 0;
}

/* detok of ids (remove_special 0, unparse_special 1) equals the hex bytes */
static int detok_is(const struct ntx_vocab *v, const int32_t *ids, int n, const char *hex)
{
	struct ntx_err err = { 0 };
	size_t wl, gl;
	char *want = unhex(hex, &wl), *got;
	int ok;

	if (!want || ntx_detokenize(v, ids, n, 0, 1, &got, &gl, &err)) {
		if (want)
			t_diag("detokenize: %s", err.msg);
		free(want);
		return 0;
	}
	ok = gl == wl && memcmp(got, want, wl) == 0;
	free(want);
	free(got);
	return ok;
}

static void test_jsonl(const struct ntx_vocab *v, const char *rel, int *n_roundtrip)
{
	size_t len, pos = 0;
	char *all = slurp(rel, &len);
	int lines = 0;

	if (!t_ok(all != NULL, "read %s", rel))
		return;
	while (pos < len) {
		char *eol = memchr(all + pos, '\n', len - pos), b1[512], b2[512];
		json_error_t je;
		json_t *o;
		const char *id, *th, *dh, *dph;
		int32_t *want = NULL, *want_ps = NULL, *got = NULL, *got_ps = NULL, *got_bos = NULL;
		int nw, nwp, ng, ngp, ngb;
		size_t tl = 0;
		char *text;

		if (!eol)
			break;
		*eol = 0;
		o = json_loads(all + pos, 0, &je);
		pos = (size_t)(eol - all) + 1;
		lines++;
		if (!o) {
			t_ok(0, "%s line %d parses: %s", rel, lines, je.text);
			continue;
		}
		id = json_string_value(json_object_get(o, "id"));
		th = json_string_value(json_object_get(o, "text_hex"));
		dh = json_string_value(json_object_get(o, "detok_hex"));
		dph = json_string_value(json_object_get(o, "detok_parse_special_hex"));
		text = th ? unhex(th, &tl) : NULL;
		if (!(id && text && dh && dph && !json_ids(json_object_get(o, "ids"), &want, &nw) &&
		      !json_ids(json_object_get(o, "ids_parse_special"), &want_ps, &nwp))) {
			t_ok(0, "%s line %d has its fields", rel, lines);
			free(text);
			free(want);
			free(want_ps);
			json_decref(o);
			continue;
		}
		tok(v, text, tl, 0, 0, &got, &ng);
		tok(v, text, tl, 1, 0, &got_bos, &ngb);
		if (!t_ok(ids_eq(got, ng, want, nw) && ngb == nw + 1 && got_bos[0] == ntx_vocab_bos(v) &&
			  ids_eq(got_bos + 1, ngb - 1, want, nw),
			  "%s ids (and with BOS)", id)) {
			t_diag("want %s", ids_str(want, nw, b1, sizeof b1));
			t_diag("got  %s", ids_str(got, ng, b2, sizeof b2));
		}
		tok(v, text, tl, 0, 1, &got_ps, &ngp);
		if (!t_ok(ids_eq(got_ps, ngp, want_ps, nwp), "%s ids_parse_special", id)) {
			t_diag("want %s", ids_str(want_ps, nwp, b1, sizeof b1));
			t_diag("got  %s", ids_str(got_ps, ngp, b2, sizeof b2));
		}
		t_ok(detok_is(v, want, nw, dh), "%s detok", id);
		t_ok(detok_is(v, want_ps, nwp, dph), "%s detok_parse_special", id);
		if (strcmp(th, dh) == 0) { /* decode(encode(text)) == text */
			t_ok(got && detok_is(v, got, ng, th), "%s decode(encode(text)) == text", id);
			(*n_roundtrip)++;
		}
		free(text);
		free(want);
		free(want_ps);
		free(got);
		free(got_ps);
		free(got_bos);
		json_decref(o);
	}
	t_ok(pos == len && lines > 0, "%s: read %d cases", rel, lines);
	free(all);
}

/* ---- SPM reference models (fixtures/models, fixtures/ref) ---- */

static int read_ids(const char *rel, int32_t *ids, int cap)
{
	size_t len;
	char *s = slurp(rel, &len), *p, *e;
	int n = 0;

	if (!s)
		return -1;
	for (p = s; n < cap; p = e) {
		long x = strtol(p, &e, 10);

		if (e == p)
			break;
		ids[n++] = (int32_t)x;
	}
	free(s);
	return n;
}

static void test_prompts(const char *model)
{
	struct vocab_file vf;
	size_t len, pos = 0;
	char *prompts = slurp("ref/prompts.txt", &len), rel[256];
	int k = 0;

	if (!t_ok(prompts != NULL, "read ref/prompts.txt") || open_vocab(model, &vf)) {
		free(prompts);
		return;
	}
	while (pos < len) {
		char *eol = memchr(prompts + pos, '\n', len - pos), b1[512], b2[512];
		size_t pl = eol ? (size_t)(eol - prompts) - pos : len - pos;
		int32_t want[256], *got;
		int nw, ng;

		snprintf(rel, sizeof rel, "ref/stories260K/p%d.prompt_ids.txt", k);
		nw = read_ids(rel, want, 256);
		tok(vf.v, prompts + pos, pl, 1, 0, &got, &ng);
		if (!t_ok(nw > 0 && ids_eq(got, ng, want, nw), "%s: prompt p%d with BOS", model, k)) {
			t_diag("want %s", ids_str(want, nw, b1, sizeof b1));
			t_diag("got  %s", ids_str(got, ng, b2, sizeof b2));
		}
		free(got);
		pos += pl + 1;
		k++;
	}
	t_ok(k == 3, "%s: 3 prompts (%d)", model, k);
	free(prompts);
	close_vocab(&vf);
}

static void test_tinystory(void)
{
	struct vocab_file vf;
	size_t len;
	char *text = slurp("ref/stories260K/perplexity/tinystory.txt", &len);
	int32_t want[2048], *got = NULL;
	int nw = read_ids("ref/stories260K/perplexity/tinystory.ids.txt", want, 2048), ng = 0;

	if (!t_ok(text && nw == 999, "read tinystory.txt and its 999 ids (%d)", nw) ||
	    open_vocab("models/stories260K.gguf", &vf)) {
		free(text);
		return;
	}
	tok(vf.v, text, len, 1, 0, &got, &ng);
	t_ok(ids_eq(got, ng, want, nw), "tinystory.txt gives the 999 ids of llama-perplexity (%d)", ng);
	free(got);
	free(text);
	close_vocab(&vf);
}

/* ---- tinymodel ---- */

static void test_tinymodel(void)
{
	struct vocab_file vf;
	size_t len;
	char *text = slurp("tinymodel/eval.txt", &len), *back = NULL;
	int32_t *ids = NULL;
	int n = 0;
	double t0;

	if (!t_ok(text != NULL, "read tinymodel/eval.txt") ||
	    open_vocab("tinymodel/tinymodel-q8_0.gguf", &vf)) {
		free(text);
		return;
	}
	t_ok(ntx_vocab_n_tokens(vf.v) == 8192 && ntx_vocab_n_merges(vf.v) == 7931 &&
	     ntx_vocab_bos(vf.v) == 8187 && ntx_vocab_eos(vf.v) == 8188 &&
	     ntx_vocab_eot(vf.v) == 8191 && ntx_vocab_is_eog(vf.v, 8188) &&
	     ntx_vocab_is_eog(vf.v, 8191) && !ntx_vocab_is_eog(vf.v, 8187),
	     "tinymodel vocabulary: 8192 tokens, 7931 merges, BOS 8187, EOG {8188, 8191}");
	t0 = now_ms();
	tok(vf.v, text, len, 1, 0, &ids, &n);
	/* the README's 12,896 counts the text's tokens; with BOS there is one more */
	t_ok(n == 12897 && ids[0] == 8187, "eval.txt: BOS + 12896 tokens (%d in %.1f ms)", n,
	     now_ms() - t0);
	free(ids);
	tok(vf.v, text, len, 0, 0, &ids, &n);
	t_ok(n == 12896, "eval.txt without BOS: 12896 tokens (%d)", n);
	if (ids) {
		struct ntx_err err = { 0 };
		size_t bl = 0;
		int i, pieces_ok = 1;
		size_t o = 0;

		/* the pieces concatenated give the text back exactly */
		for (i = 0; i < n && pieces_ok; i++) {
			size_t pl;
			const char *p = ntx_vocab_piece(vf.v, ids[i], 0, &pl);

			pieces_ok = p && o + pl <= len && memcmp(text + o, p, pl) == 0;
			o += pl;
		}
		t_ok(pieces_ok && o == len, "eval.txt: pieces of its tokens rebuild it byte for byte");
		/* detokenize applies clean-spaces: eval.txt has only " ." and " ?"
		 * of its patterns (3 times), so the first pass alone gives it */
		{
			char *want = malloc(len + 1);
			size_t wl = len ? 1 : 0, j;
			int rc = ntx_detokenize(vf.v, ids, n, 0, 1, &back, &bl, &err);

			if (want && len)
				want[0] = text[0];
			for (j = 1; want && j < len; j++) {
				char x = text[j];

				if (text[j - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
					wl--;
				want[wl++] = x;
			}
			t_ok(rc == 0 && want && bl == wl && wl == len - 3 && memcmp(back, want, wl) == 0,
			     "eval.txt detokenizes to itself less 3 spaces (clean-spaces): %zu of %zu bytes",
			     bl, len);
			free(want);
		}
		free(back);
	}
	free(ids);
	free(text);
	close_vocab(&vf);
}

/* ---- streaming detokenizer ---- */

/* Stream ids through d; every chunk must be whole UTF-8 characters; the
 * chunks together must equal want. Returns the pushes that emitted nothing. */
static int stream_check(const struct ntx_vocab *v, unsigned flags, const int32_t *ids, int n,
			const char *want, size_t wl, const char *name)
{
	struct ntx_err err = { 0 };
	struct ntx_detok *d = ntx_detok_new(v, flags, &err);
	char *all = malloc(wl * 4 + 64);
	size_t al = 0;
	int i, whole = 1, held = 0;

	for (i = 0; d && all && i <= n; i++) {
		const char *o;
		size_t ol, k = 0;

		if (i < n) {
			if (ntx_detok_push(d, ids[i], &o, &ol, &err)) {
				whole = 0;
				break;
			}
		} else {
			ntx_detok_flush(d, &o, &ol);
		}
		held += i < n && ol == 0;
		while (k < ol) {
			int r = ntx_utf8_check((const unsigned char *)o + k, ol - k);

			if (r <= 0) {
				whole = 0;
				break;
			}
			k += (size_t)r;
		}
		if (al + ol <= wl * 4 + 64) {
			memcpy(all + al, o, ol);
			al += ol;
		}
	}
	t_ok(whole && al == wl && memcmp(all, want, wl) == 0,
	     "stream %s: %d ids, whole characters only, %zu bytes back", name, n, al);
	free(all);
	ntx_detok_free(d);
	return held;
}

static void test_stream(const struct ntx_vocab *l3, const struct ntx_vocab *spm)
{
	static const char *texts[] = {
		"\xf0\x9f\x9a\x80 rocket \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f and "
		"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 family",
		"\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82\xe6\x97\xa5"
		"\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88",
		"\xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 llama \xf0\x9f\x87\xaf\xf0\x9f\x87\xb5",
	};
	struct ntx_err err = { 0 };
	int32_t *ids, bytes[4];
	int n, i, held_l3 = 0, held_spm = 0;
	const char *o;
	size_t ol;
	struct ntx_detok *d;

	for (i = 0; i < 3; i++) {
		size_t tl = strlen(texts[i]);

		tok(l3, texts[i], tl, 0, 0, &ids, &n);
		held_l3 += stream_check(l3, 0, ids, n, texts[i], tl, "llama3");
		free(ids);
		tok(spm, texts[i], tl, 0, 0, &ids, &n);
		held_spm += stream_check(spm, NTX_DETOK_STRIP_SPACE, ids, n, texts[i], tl, "spm");
		free(ids);
	}
	t_ok(held_l3 > 0 && held_spm > 0,
	     "partial characters were held back (llama3 %d, spm %d pushes emitted nothing)",
	     held_l3, held_spm);

	/* SPM byte tokens: E2 28 is invalid: E2 goes out as it is, or as U+FFFD */
	bytes[0] = ntx_vocab_find(spm, "<0xE2>");
	bytes[1] = ntx_vocab_find(spm, "<0x28>");
	d = ntx_detok_new(spm, 0, &err);
	ntx_detok_push(d, bytes[0], &o, &ol, &err);
	t_ok(ol == 0, "stream: lone E2 is held");
	ntx_detok_push(d, bytes[1], &o, &ol, &err);
	t_ok(ol == 2 && memcmp(o, "\xe2(", 2) == 0, "stream: E2 28 passes through as it is");
	ntx_detok_free(d);
	d = ntx_detok_new(spm, NTX_DETOK_REPLACE_INVALID, &err);
	ntx_detok_push(d, bytes[0], &o, &ol, &err);
	ntx_detok_push(d, bytes[1], &o, &ol, &err);
	t_ok(ol == 4 && memcmp(o, "\xef\xbf\xbd(", 4) == 0, "stream: E2 28 gives U+FFFD ( when asked");
	/* a truncated emoji at the end: F0 9F held, flushed as 2 x U+FFFD */
	bytes[2] = ntx_vocab_find(spm, "<0xF0>");
	bytes[3] = ntx_vocab_find(spm, "<0x9F>");
	ntx_detok_push(d, bytes[2], &o, &ol, &err);
	ntx_detok_push(d, bytes[3], &o, &ol, &err);
	t_ok(ol == 0, "stream: F0 9F held");
	ntx_detok_flush(d, &o, &ol);
	t_ok(ol == 6 && memcmp(o, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0,
	     "stream: flush of F0 9F gives two U+FFFD");
	t_ok(ntx_detok_push(d, 99999, &o, &ol, &err) == -1 && err.msg[0],
	     "stream: id out of range: %s", err.msg);
	ntx_detok_free(d);
	/* control tokens: hidden unless NTX_DETOK_SPECIAL */
	d = ntx_detok_new(l3, 0, &err);
	ntx_detok_push(d, 128009, &o, &ol, &err);
	t_ok(ol == 0, "stream: <|eot_id|> not rendered by default");
	ntx_detok_free(d);
	d = ntx_detok_new(l3, NTX_DETOK_SPECIAL, &err);
	ntx_detok_push(d, 128009, &o, &ol, &err);
	t_ok(ol == 10 && memcmp(o, "<|eot_id|>", 10) == 0, "stream: <|eot_id|> rendered on request");
	ntx_detok_free(d);
}

/* ---- queries and detokenize details ---- */

static void test_queries(const struct ntx_vocab *l3, const struct ntx_vocab *spm)
{
	struct ntx_err err = { 0 };
	int32_t bad[2] = { 9906, 128256 }, bos_hello[3] = { 1, 15043, 2 };
	const int32_t *eog;
	char *out = NULL;
	size_t len, pl;
	const char *p;
	int n;

	t_ok(ntx_vocab_type(l3) == NTX_VOCAB_BPE && ntx_vocab_n_tokens(l3) == 128256 &&
	     ntx_vocab_n_merges(l3) == 280147, "llama3: BPE, 128256 tokens, 280147 merges");
	t_ok(ntx_vocab_bos(l3) == 128000 && ntx_vocab_eos(l3) == 128009 && ntx_vocab_eot(l3) == 128009 &&
	     ntx_vocab_eom(l3) == 128008 && ntx_vocab_nl(l3) == 198 && ntx_vocab_add_bos(l3) &&
	     !ntx_vocab_add_eos(l3), "llama3: BOS 128000, EOS = EOT 128009, EOM 128008, LF 198, add BOS");
	eog = ntx_vocab_eog_ids(l3, &n);
	t_ok(n == 2 && eog[0] == 128008 && eog[1] == 128009 && ntx_vocab_is_eog(l3, 128009) &&
	     !ntx_vocab_is_eog(l3, 128001), "llama3: EOG = {128008, 128009} (not <|end_of_text|>)");
	t_ok(ntx_vocab_find(l3, "<|eot_id|>") == 128009 && ntx_vocab_find(l3, "Hello") == 9906 &&
	     ntx_vocab_find(l3, "no such token") == NTX_TOKEN_NONE, "llama3: find by text");
	t_ok(ntx_vocab_token_type(l3, 128009) == NTX_TOKEN_CONTROL &&
	     ntx_vocab_token_type(l3, 9906) == NTX_TOKEN_NORMAL &&
	     ntx_vocab_token_type(l3, -1) == NTX_TOKEN_UNDEFINED, "llama3: token types");
	p = ntx_vocab_piece(l3, 220, 0, &pl);
	t_ok(p && pl == 1 && p[0] == ' ', "llama3: piece of 220 is a space");
	p = ntx_vocab_piece(l3, 128000, 0, &pl);
	t_ok(p && pl == 0, "llama3: control piece empty without special");
	t_ok(ntx_vocab_piece(l3, 128256, 1, &pl) == NULL, "llama3: piece of an id out of range is NULL");
	t_ok(ntx_detokenize(l3, bad, 2, 0, 1, &out, &len, &err) == -1 && err.msg[0],
	     "detokenize: id out of range: %s", err.msg);
	t_ok(ntx_vocab_type(spm) == NTX_VOCAB_SPM && ntx_vocab_n_tokens(spm) == 32000 &&
	     ntx_vocab_bos(spm) == 1 && ntx_vocab_eos(spm) == 2 && ntx_vocab_unk(spm) == 0 &&
	     ntx_vocab_nl(spm) == 13 && ntx_vocab_is_eog(spm, 2) && ntx_vocab_add_bos(spm),
	     "spm: 32000 tokens, BOS 1, EOS 2, UNK 0, LF 13, EOG {2}");
	p = ntx_vocab_piece(spm, 13, 0, &pl);
	t_ok(p && pl == 1 && p[0] == '\n', "spm: <0x0A> piece is a newline");
	/* remove_special drops BOS (keeping the leading space) but not EOS */
	ntx_detokenize(spm, bos_hello, 3, 1, 1, &out, &len, &err);
	t_ok(out && strcmp(out, " Hello</s>") == 0, "spm: detok remove_special (%s)", out ? out : "");
	free(out);
	ntx_detokenize(spm, bos_hello, 3, 0, 0, &out, &len, &err);
	t_ok(out && strcmp(out, " Hello") == 0, "spm: detok without specials (%s)", out ? out : "");
	free(out);
	ntx_detokenize(spm, bos_hello + 1, 1, 0, 0, &out, &len, &err);
	t_ok(out && strcmp(out, "Hello") == 0, "spm: detok strips the first leading space");
	free(out);
}

/* ---- chat ---- */

/* llama.cpp's test-chat-template conversation and the texts its built-in
 * formats give (add_assistant), by name and detected from template text. */
static void test_chat_formats(void)
{
	static const struct ntx_chat_msg c[] = {
		{ "system", "You are a helpful assistant" }, { "user", "Hello" },
		{ "assistant", "Hi there" }, { "user", "Who are you" },
		{ "assistant", "   I am an assistant   " }, { "user", "Another question" },
	};
	static const struct {
		const char *name, *tmpl; /* tmpl: a template text that detects as name */
		const char *want;
	} f[] = {
		{ "chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}",
		  "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
		  "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
		  "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
		  "<|im_start|>assistant\n" },
		{ "mistral-v1", "{{ bos_token }}{% if system_message %}{{ ' [INST] ' + system_message }}{% endif %}",
		  " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]"
		  "    I am an assistant   </s> [INST] Another question [/INST]" },
		{ "mistral-v3", "{%- if tools %}[AVAILABLE_TOOLS]{%- endif %}{{- '[INST] ' + message['content'] + '[/INST]' }}",
		  "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST]"
		  " I am an assistant</s>[INST] Another question[/INST]" },
		{ "mistral-v3-tekken", "{%- if tools %}[AVAILABLE_TOOLS]{%- endif %}{{- \"[INST]\" + message['content'] + \"[/INST]\" }}",
		  "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]"
		  "   I am an assistant   </s>[INST]Another question[/INST]" },
		{ "mistral-v7", "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- '[INST]' }}",
		  "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>"
		  "[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]" },
		{ "zephyr", "{% for message in messages %}{{'<|' + message['role'] + '|>\n' + message['content'] + '<|endoftext|>'}}{% endfor %}{{ '<|user|>' }}",
		  "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n"
		  "<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n"
		  "<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n"
		  "<|assistant|>\n" },
		{ "vicuna", "{{ 'USER: ' + message['content'] }}{{ 'ASSISTANT: ' + message['content'] }}",
		  "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\n"
		  "ASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:" },
		{ "vicuna-orca", "{{ 'SYSTEM: ' + s }}{{ 'USER: ' + message['content'] }}{{ 'ASSISTANT: ' + m }}",
		  "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\n"
		  "ASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:" },
	};
	struct ntx_err err = { 0 };
	size_t i;

	for (i = 0; i < sizeof f / sizeof f[0]; i++) {
		char *a = NULL, *b = NULL;
		int st = ntx_chat_detect(f[i].tmpl, &err);

		t_ok(ntx_chat_format(NULL, f[i].name, c, 6, 1, &a, &err) == 0 && strcmp(a, f[i].want) == 0,
		     "%s by name: llama.cpp's text", f[i].name);
		if (a && strcmp(a, f[i].want))
			t_diag("got [%s]", a);
		t_ok(st > 0 && strcmp(ntx_chat_style_name((enum ntx_chat_style)st), f[i].name) == 0 &&
		     ntx_chat_format(NULL, f[i].tmpl, c, 6, 1, &b, &err) == 0 && strcmp(b, f[i].want) == 0,
		     "%s detected from a template text (%s)", f[i].name,
		     st > 0 ? ntx_chat_style_name((enum ntx_chat_style)st) : err.msg);
		free(a);
		free(b);
	}
	t_ok(ntx_chat_detect("{{ '<|assistant|>' }}{{ '<|end|>' }}{{ '<|user|>' }}", &err) == -1 &&
	     strstr(err.msg, "Phi-3"), "Phi-3 (before Zephyr) refused: %s", err.msg);
}

static void test_chat(const struct ntx_vocab *l3, const struct ntx_vocab *spm,
		      const struct ntx_vocab *tiny)
{
	static const struct ntx_chat_msg m[] = {
		{ "system", "You are a helpful assistant." }, { "user", "  Hello!\n" },
	};
	static const int32_t want[] = { 128000, 128006, 9125, 128007, 271, 2675, 527, 264, 11190,
					18328, 13, 128009, 128006, 882, 128007, 271, 9906, 0, 128009,
					128006, 78191, 128007, 271 };
	static const char *want_txt =
		"<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
		"<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
		"<|start_header_id|>assistant<|end_header_id|>\n\n";
	struct ntx_err err = { 0 };
	char *out = NULL, b1[512];
	int32_t *ids;
	int n;

	t_ok(ntx_vocab_chat_template(l3) && ntx_chat_detect(ntx_vocab_chat_template(l3), &err) ==
						  NTX_CHAT_LLAMA3, "llama3 vocab: template is Llama 3");
	t_ok(ntx_chat_format(l3, NULL, m, 2, 1, &out, &err) == 0 && strcmp(out, want_txt) == 0,
	     "llama3: system + user with the model's template");
	if (out) {
		tok(l3, out, strlen(out), 1, 1, &ids, &n);
		if (!t_ok(ids_eq(ids, n, want, (int)(sizeof want / sizeof want[0])),
			  "llama3 chat tokenizes to the header ids 128006 .. 128007 .. 128009"))
			t_diag("got %s", ids_str(ids, n, b1, sizeof b1));
		free(ids);
		tok(l3, out, strlen(out), 1, 0, &ids, &n);
		t_ok(n > 40 && ids[1] != 128006, "llama3 chat without parse_special: header as text (%d)", n);
		free(ids);
	}
	free(out);
	t_ok(ntx_chat_format(l3, NULL, m, 2, 0, &out, &err) == 0 &&
	     strlen(out) == strlen(want_txt) - strlen("<|start_header_id|>assistant<|end_header_id|>\n\n"),
	     "llama3: without the assistant header");
	free(out);
	t_ok(tiny && ntx_chat_format(tiny, NULL, m + 1, 1, 1, &out, &err) == 0 &&
	     strstr(out, "<|start_header_id|>user"), "tinymodel: template is Llama 3");
	free(out);
	t_ok(ntx_chat_format(spm, "llama2-sys", m, 2, 1, &out, &err) == 0 &&
	     strcmp(out, "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\n  Hello!\n [/INST]") == 0,
	     "llama2-sys by name");
	free(out);
	t_ok(ntx_chat_format(NULL, "{% if messages[0]['role'] == 'system' %}<<SYS>>{% endif %}"
			     "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}", m, 2, 1,
			     &out, &err) == 0 &&
	     strcmp(out, "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST]") == 0,
	     "llama2 strip variant detected from template text");
	free(out);
	out = NULL;
	t_ok(ntx_chat_format(spm, NULL, m, 2, 1, &out, &err) == -1 && err.code == NTX_EUNSUP,
	     "spm vocab without a template: %s", err.msg);
	t_ok(ntx_chat_format(NULL, "{{ '<|im_start|>' + role + '<|im_sep|>' }}", m, 2, 1, &out, &err) == -1 &&
	     err.code == NTX_EUNSUP && strstr(err.msg, "--chat-template NAME"),
	     "Phi-4 refused, naming --chat-template: %s", err.msg);
	t_ok(ntx_chat_format(NULL, "{{ raise_exception('x') }}", m, 2, 1, &out, &err) == -1 &&
	     err.code == NTX_EUNSUP && strstr(err.msg, "--chat-template NAME"),
	     "an unknown template names --chat-template: %s", err.msg);
	t_ok(ntx_chat_format(NULL, "no-such-name", m, 2, 1, &out, &err) == -1 && err.code == NTX_EUNSUP,
	     "an unknown name is refused");
	test_chat_formats();
	t_ok(ntx_chat_format_ex(spm, "{{ something }}", m, 2, 1, NTX_CHAT_FALLBACK, &out, &err) == 0 &&
	     strncmp(out, "[INST] <<SYS>>", 14) == 0, "unknown template with fallback: llama2-sys");
	free(out);
	t_ok(ntx_chat_format_ex(l3, "{{ something }}", m, 2, 1, NTX_CHAT_FALLBACK, &out, &err) == 0 &&
	     strcmp(out, want_txt) == 0, "unknown template with fallback on llama3 vocab: llama3");
	free(out);
}

/* ---- corrupt vocabularies (a tiny GGUF v3 writer) ---- */

struct gw {
	unsigned char *p;
	size_t n, cap;
	uint64_t nkv;
};

static void gw_raw(struct gw *w, const void *d, size_t n)
{
	if (w->n + n > w->cap) {
		w->cap = (w->n + n) * 2 + 256;
		w->p = realloc(w->p, w->cap);
		if (!w->p)
			abort();
	}
	memcpy(w->p + w->n, d, n);
	w->n += n;
}

static void gw_u32(struct gw *w, uint32_t x) { gw_raw(w, &x, 4); } /* x86: little-endian */
static void gw_u64(struct gw *w, uint64_t x) { gw_raw(w, &x, 8); }

static void gw_str(struct gw *w, const char *s)
{
	gw_u64(w, strlen(s));
	gw_raw(w, s, strlen(s));
}

static void gw_begin(struct gw *w)
{
	memset(w, 0, sizeof *w);
	gw_raw(w, "GGUF", 4);
	gw_u32(w, 3);
	gw_u64(w, 0); /* tensors */
	gw_u64(w, 0); /* kv count, patched by gw_end */
}

static void gw_key(struct gw *w, const char *key, uint32_t type)
{
	gw_str(w, key);
	gw_u32(w, type);
	w->nkv++;
}

static void kv_str(struct gw *w, const char *k, const char *v) { gw_key(w, k, NTX_GGUF_STRING); gw_str(w, v); }
static void kv_u32(struct gw *w, const char *k, uint32_t v) { gw_key(w, k, NTX_GGUF_U32); gw_u32(w, v); }
static void kv_i32(struct gw *w, const char *k, int32_t v) { gw_key(w, k, NTX_GGUF_I32); gw_u32(w, (uint32_t)v); }

static void kv_bool(struct gw *w, const char *k, int v)
{
	unsigned char b = (unsigned char)v;

	gw_key(w, k, NTX_GGUF_BOOL);
	gw_raw(w, &b, 1);
}

static void kv_strs(struct gw *w, const char *k, const char *const *v, int n)
{
	int i;

	gw_key(w, k, NTX_GGUF_ARRAY);
	gw_u32(w, NTX_GGUF_STRING);
	gw_u64(w, (uint64_t)n);
	for (i = 0; i < n; i++)
		gw_str(w, v[i]);
}

static void kv_i32s(struct gw *w, const char *k, uint32_t et, const int32_t *v, int n)
{
	gw_key(w, k, NTX_GGUF_ARRAY);
	gw_u32(w, et);
	gw_u64(w, (uint64_t)n);
	gw_raw(w, v, (size_t)n * 4);
}

/* Which part of the small BPE vocabulary to break. */
enum {
	C_OK, C_MERGE_UNKNOWN, C_MERGE_NOSPACE, C_MERGE_RESULT, C_TYPES_SHORT, C_BOS_RANGE,
	C_EOS_NEG, C_TOKENS_U32, C_NO_MODEL, C_MODEL_BERT, C_PRE_QWEN, C_PRE_MISSING, C_DUP,
	C_NO_MERGES, C_ADD_BOS_NONE, C_TYPES_F32, C_NO_TOKENS, C_ADD_BOS_U32, C_SCORES_LONG,
	C_BOS_NONE, C_N
};

static const char *case_name[C_N] = {
	"valid", "merge with an unknown token", "merge without a space", "merge result not a token",
	"token_type shorter than tokens", "bos id out of range", "negative eos id",
	"tokens array of u32", "no tokenizer.ggml.model", "model 'bert'", "pre 'gpt-4o'",
	"pre missing", "duplicate token", "no merges", "add_bos with no BOS", "token_type of f32",
	"empty token list", "add_bos_token of type u32", "scores longer than tokens",
	"bos = 0xFFFFFFFF (none)",
};

static void build(struct gw *w, int c)
{
	static const char *toks[] = { "a", "b", "ab", "\xc4\x8a", "<|begin_of_text|>" };
	static const char *dup[] = { "a", "b", "ab", "a", "<|begin_of_text|>" };
	static const int32_t types[] = { 1, 1, 1, 1, 3 };
	static const int32_t scores[] = { 0, 0, 0, 0, 0, 0 };
	const char *merge = c == C_MERGE_UNKNOWN ? "a x" : c == C_MERGE_NOSPACE ? "ab" : "a b";

	gw_begin(w);
	kv_str(w, "general.architecture", "llama");
	if (c != C_NO_MODEL)
		kv_str(w, "tokenizer.ggml.model", c == C_MODEL_BERT ? "bert" : "gpt2");
	if (c != C_PRE_MISSING)
		kv_str(w, "tokenizer.ggml.pre", c == C_PRE_QWEN ? "gpt-4o" : "llama-bpe");
	if (c == C_TOKENS_U32)
		kv_i32s(w, "tokenizer.ggml.tokens", NTX_GGUF_U32, types, 5);
	else if (c == C_MERGE_RESULT)
		kv_strs(w, "tokenizer.ggml.tokens", (const char *const[]){ "a", "b", "c", "\xc4\x8a",
			"<|begin_of_text|>" }, 5);
	else if (c != C_NO_TOKENS)
		kv_strs(w, "tokenizer.ggml.tokens", c == C_DUP ? dup : toks, 5);
	else
		kv_strs(w, "tokenizer.ggml.tokens", toks, 0);
	kv_i32s(w, "tokenizer.ggml.token_type", c == C_TYPES_F32 ? NTX_GGUF_F32 : NTX_GGUF_I32, types,
		c == C_TYPES_SHORT ? 4 : c == C_NO_TOKENS ? 0 : 5);
	if (c == C_SCORES_LONG)
		kv_i32s(w, "tokenizer.ggml.scores", NTX_GGUF_F32, scores, 6);
	if (c != C_NO_MERGES)
		kv_strs(w, "tokenizer.ggml.merges", &merge, 1);
	if (c == C_BOS_RANGE)
		kv_u32(w, "tokenizer.ggml.bos_token_id", 99);
	else if (c == C_ADD_BOS_NONE || c == C_BOS_NONE)
		kv_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
	else
		kv_u32(w, "tokenizer.ggml.bos_token_id", 4);
	if (c == C_EOS_NEG)
		kv_i32(w, "tokenizer.ggml.eos_token_id", -5);
	if (c == C_ADD_BOS_U32)
		kv_u32(w, "tokenizer.ggml.add_bos_token", 1);
	if (c == C_BOS_NONE)
		kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
	memcpy(w->p + 16, &w->nkv, 8);
}

static void test_corrupt(void)
{
	int c;

	for (c = 0; c < C_N; c++) {
		struct ntx_err err = { 0 };
		struct gw w;
		struct ntx_gguf *g;
		struct ntx_vocab *v = NULL;

		build(&w, c);
		g = ntx_gguf_open_buffer(w.p, w.n, &err);
		if (g)
			v = ntx_vocab_load(g, &err);
		if (c == C_OK || c == C_BOS_NONE) {
			int32_t *ids = NULL;
			int n = 0;

			t_ok(v && (c == C_BOS_NONE ? ntx_vocab_bos(v) == NTX_TOKEN_NONE
						   : ntx_vocab_bos(v) == 4) &&
				     ntx_tokenize(v, "ab\nba", 5, 1, 0, &ids, &n, &err) == 0 &&
				     n == (c == C_OK ? 5 : 4) && ids[n - 4] == 2 && ids[n - 3] == 3 &&
				     ids[n - 2] == 1 && ids[n - 1] == 0,
			     "small vocabulary (%s) loads and tokenizes 'ab\\nba'%s%s", case_name[c],
			     v ? "" : ": ", err.msg);
			free(ids);
		} else {
			t_ok(g && !v && err.msg[0], "%s: %s", case_name[c], err.msg);
		}
		ntx_vocab_free(v);
		ntx_gguf_close(g);
		free(w.p);
	}
}

/* A small SPM vocabulary with byte fallback, a USER_DEFINED token and
 * scores that make "ab" win over "▁a". */
static void test_spm_small(void)
{
	const char *toks[256 + 9];
	char bytes[256][8];
	int32_t types[256 + 9];
	float scores[256 + 9];
	struct ntx_err err = { 0 };
	struct gw w;
	struct ntx_gguf *g;
	struct ntx_vocab *v = NULL;
	/* "ab<tool>b": "▁ab" -> ▁ ab (ab scores higher than ▁a), <tool>, then
	 * "▁b" (a space prefix after a special token) -> ▁ b */
	int32_t *ids = NULL, want1[] = { 259, 263, 264, 259, 261 };
	/* "<s>" as text: ▁ and three byte tokens (3 + byte) */
	int32_t want3[] = { 259, 3 + '<', 3 + 's', 3 + '>' }, want4[] = { 1 };
	int n = 0, i, nt = 0;

	toks[nt] = "<unk>", types[nt] = 2, scores[nt++] = 0;
	toks[nt] = "<s>", types[nt] = 3, scores[nt++] = 0;
	toks[nt] = "</s>", types[nt] = 3, scores[nt++] = 0;
	for (i = 0; i < 256; i++) {
		snprintf(bytes[i], sizeof bytes[i], "<0x%02X>", i);
		toks[nt] = bytes[i], types[nt] = 6, scores[nt++] = 0;
	}
	toks[nt] = "\xe2\x96\x81", types[nt] = 1, scores[nt++] = -1;     /* 259 */
	toks[nt] = "a", types[nt] = 1, scores[nt++] = -2;                /* 260 */
	toks[nt] = "b", types[nt] = 1, scores[nt++] = -3;                /* 261 */
	toks[nt] = "\xe2\x96\x81" "a", types[nt] = 1, scores[nt++] = -5; /* 262 */
	toks[nt] = "ab", types[nt] = 1, scores[nt++] = -4;               /* 263 */
	toks[nt] = "<tool>", types[nt] = 4, scores[nt++] = 0;            /* 264 */
	gw_begin(&w);
	kv_str(&w, "tokenizer.ggml.model", "llama");
	kv_strs(&w, "tokenizer.ggml.tokens", toks, nt);
	kv_i32s(&w, "tokenizer.ggml.token_type", NTX_GGUF_I32, types, nt);
	kv_i32s(&w, "tokenizer.ggml.scores", NTX_GGUF_F32, (const int32_t *)(const void *)scores, nt);
	memcpy(w.p + 16, &w.nkv, 8);
	g = ntx_gguf_open_buffer(w.p, w.n, &err);
	if (g)
		v = ntx_vocab_load(g, &err);
	if (t_ok(v != NULL, "small SPM vocabulary loads%s%s", v ? "" : ": ", err.msg)) {
		tok(v, "ab<tool>b", 9, 0, 0, &ids, &n);
		t_ok(ids_eq(ids, n, want1, 5),
		     "small SPM: higher score merges first, USER_DEFINED split without parse_special, "
		     "space prefix after it");
		free(ids);
		tok(v, "<s>", 3, 0, 0, &ids, &n);
		t_ok(ids_eq(ids, n, want3, 4), "small SPM: <s> as text falls back to byte tokens (%d ids)", n);
		free(ids);
		tok(v, "<s>", 3, 0, 1, &ids, &n);
		t_ok(ids_eq(ids, n, want4, 1), "small SPM: <s> with parse_special is BOS");
		free(ids);
	}
	ntx_vocab_free(v);
	ntx_gguf_close(g);
	free(w.p);
}

/* ---- random inputs ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16) % n;
}

/* Random texts: valid UTF-8 strings round-trip through the pieces of their
 * tokens (BPE: the bytes come back exactly; SPM: after the prefix space);
 * random bytes tokenize to ids in range. Then mutated copies of a small
 * GGUF vocabulary either load or fail cleanly. */
static void test_random(const struct ntx_vocab *l3, const struct ntx_vocab *spm)
{
	static const char *pool[] = { "a", "Z", "7", " ", "  ", "\n", "\r\n", "\t", "'", "'s", "'LL",
				      ",", ".", "!", "?", "-", "<|", "|>", "\xc3\xa9", "\xce\xa9",
				      "\xe4\xb8\x96", "\xf0\x9f\xa6\x99", "\xe2\x80\x8d", "\xc2\x85",
				      "\xef\xbb\xbf", "\xe2\x96\x81", "123", "x", "\xd9\x85" };
	const int np = (int)(sizeof pool / sizeof pool[0]);
	int iter, rt_bad = 0, range_bad = 0, fails = 0, loaded = 0;
	char text[512];

	for (iter = 0; iter < 300; iter++) {
		const struct ntx_vocab *v = iter % 2 ? spm : l3;
		size_t tl = 0, o = 0;
		int32_t *ids;
		int n, i, k = 1 + (int)rnd(40);

		while (k-- > 0) {
			const char *p = pool[rnd((uint32_t)np)];

			memcpy(text + tl, p, strlen(p));
			tl += strlen(p);
		}
		if (tok(v, text, tl, 0, iter % 4 == 0, &ids, &n)) {
			rt_bad++;
			continue;
		}
		if (v == spm) { /* a literal U+2581 comes back as a space */
			size_t j, m = 0;

			for (j = 0; j < tl; j++) {
				if (j + 2 < tl && memcmp(text + j, "\xe2\x96\x81", 3) == 0) {
					text[m++] = ' ';
					j += 2;
				} else {
					text[m++] = text[j];
				}
			}
			tl = m;
		}
		for (i = 0; i < n; i++) {
			size_t pl;
			const char *p = ntx_vocab_piece(v, ids[i], 1, &pl);

			if (v == spm && i == 0 && pl && p[0] == ' ') /* the prefix space */
				p++, pl--;
			if (!p || o + pl > tl || memcmp(text + o, p, pl) != 0)
				break;
			o += pl;
		}
		if (i < n || o != tl)
			rt_bad++;
		free(ids);
	}
	t_ok(rt_bad == 0, "300 random UTF-8 texts: pieces give the text back (%d bad)", rt_bad);

	for (iter = 0; iter < 200; iter++) {
		const struct ntx_vocab *v = iter % 2 ? spm : l3;
		size_t tl = rnd(sizeof text), j;
		int32_t *ids;
		int n, i;

		for (j = 0; j < tl; j++)
			text[j] = (char)rnd(256);
		if (tok(v, text, tl, 1, iter % 3 == 0, &ids, &n)) {
			range_bad++;
			continue;
		}
		for (i = 0; i < n; i++)
			if (ids[i] < 0 || ids[i] >= ntx_vocab_n_tokens(v))
				range_bad++;
		free(ids);
	}
	t_ok(range_bad == 0, "200 random byte strings tokenize to ids in range (%d bad)", range_bad);

	for (iter = 0; iter < 3000; iter++) {
		struct ntx_err err = { 0 };
		struct gw w;
		struct ntx_gguf *g;
		struct ntx_vocab *v = NULL;
		int m = 1 + (int)rnd(4);

		build(&w, C_OK);
		while (m-- > 0)
			w.p[24 + rnd((uint32_t)w.n - 24)] = (char)rnd(256);
		g = ntx_gguf_open_buffer(w.p, w.n, &err);
		if (g)
			v = ntx_vocab_load(g, &err);
		if (v) {
			int32_t *ids;
			int n;
			char *d;
			size_t dl;

			loaded++;
			if (ntx_tokenize(v, "ab\nba <|begin_of_text|>", 23, 1, 1, &ids, &n, &err) == 0) {
				if (ntx_detokenize(v, ids, n, 1, 1, &d, &dl, &err) == 0)
					free(d);
				free(ids);
			}
		} else if (g && !err.msg[0]) {
			fails++;
		}
		ntx_vocab_free(v);
		ntx_gguf_close(g);
		free(w.p);
	}
	t_ok(fails == 0, "3000 mutated vocabularies: %d load, the others fail with a message", loaded);
}

int main(void)
{
	struct vocab_file l3, spm, tiny;
	int rt_l3 = 0, rt_spm = 0;

	if (!t_need_fixtures("llama.cpp tokenizer references")) {
		test_corrupt();
		test_spm_small();
		return t_done();
	}
	if (open_vocab("vocab/ggml-vocab-llama3.gguf", &l3) ||
	    open_vocab("vocab/ggml-vocab-llama-spm.gguf", &spm))
		return t_done();
	t_diag("llama3 vocabulary (128256 tokens, 280147 merges) loaded in %.1f ms", l3.load_ms);
	t_ok(l3.load_ms < 3000, "llama3 vocabulary loads in under 3 s (%.1f ms)", l3.load_ms);
	test_inp_out(l3.v, "vocab/ggml-vocab-llama3.gguf.inp", "vocab/ggml-vocab-llama3.gguf.out");
	test_inp_out(l3.v, "vocab/ggml-vocab-llama-bpe.gguf.inp", "vocab/ggml-vocab-llama-bpe.gguf.out");
	test_inp_out(spm.v, "vocab/ggml-vocab-llama-spm.gguf.inp", "vocab/ggml-vocab-llama-spm.gguf.out");
	test_jsonl(l3.v, "vocab/llama3-cases.jsonl", &rt_l3);
	test_jsonl(spm.v, "vocab/spm-cases.jsonl", &rt_spm);
	t_ok(rt_l3 > 30 && rt_spm > 20, "round trips checked: llama3 %d, spm %d", rt_l3, rt_spm);
	test_prompts("models/stories260K.gguf");
	test_prompts("models/ref-a-q4_0.gguf");
	test_tinystory();
	test_tinymodel();
	test_qwen2();
	test_stream(l3.v, spm.v);
	test_queries(l3.v, spm.v);
	if (open_vocab("tinymodel/tinymodel-q8_0.gguf", &tiny) == 0) {
		test_chat(l3.v, spm.v, tiny.v);
		close_vocab(&tiny);
	}
	test_corrupt();
	test_spm_small();
	test_random(l3.v, spm.v);
	close_vocab(&l3);
	close_vocab(&spm);
	return t_done();
}
