/* tokenizer_detok.c - token pieces, llama_detokenize and the streaming
 * detokenizer (see tokenizer.h). */
#include <inttypes.h>
#include <string.h>

#include "tokenizer_int.h"
#include "unicode.h"

/* ---- pieces ---- */

/* Grow *buf to hold need bytes. */
static int reserve(char **buf, size_t *cap, size_t need, struct ntx_err *err)
{
	size_t c = *cap ? *cap : 64;
	char *p;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (c > SIZE_MAX / 2)
			return ntx_err_set(err, NTX_ENOMEM, "buffer of %zu bytes is too large", need);
		c *= 2;
	}
	p = realloc(*buf, c);
	if (!p)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for %zu bytes", c);
	*buf = p;
	*cap = c;
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Append the bytes of a BYTE token: "<0xXX>" gives the byte; any other text
 * is taken as it is. */
static size_t byte_piece(const char *t, size_t n, char *out)
{
	if (n == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>' &&
	    hexval(t[3]) >= 0 && hexval(t[4]) >= 0) {
		out[0] = (char)(hexval(t[3]) << 4 | hexval(t[4]));
		return 1;
	}
	memcpy(out, t, n);
	return n;
}

/* SPM: U+2581 becomes a space. */
static size_t unescape_spaces(const char *t, size_t n, char *out)
{
	size_t i = 0, o = 0;

	while (i < n) {
		if (n - i >= 3 && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
			out[o++] = ' ';
			i += 3;
		} else {
			out[o++] = t[i++];
		}
	}
	return o;
}

/* BPE: llama.cpp's llama_decode_text. Each code point of the text goes back
 * to its byte; one outside the byte map is written as
 * "[UNK_BYTE_0x<hex of its UTF-8>" + the whole text + "]", as llama.cpp does.
 * With out NULL, only counts the bytes. */
static size_t bpe_decode(const struct ntx_vocab *v, const char *t, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i = 0, o = 0;

	while (i < n) {
		size_t adv, k, m;
		uint32_t cp = ntx_utf8_decode((const unsigned char *)t + i, n - i, &adv);
		char u[4];

		i += adv;
		if (cp < 324 && v->ub_byte[cp] >= 0) {
			if (out)
				out[o] = (char)v->ub_byte[cp];
			o++;
			continue;
		}
		m = ntx_utf8_encode(cp, u);
		if (out) {
			memcpy(out + o, "[UNK_BYTE_0x", 12);
			for (k = 0; k < m; k++) {
				out[o + 12 + 2 * k] = hex[(unsigned char)u[k] >> 4];
				out[o + 13 + 2 * k] = hex[(unsigned char)u[k] & 15];
			}
			memcpy(out + o + 12 + 2 * m, t, n);
			out[o + 12 + 2 * m + n] = ']';
		}
		o += 12 + 2 * m + n + 1;
	}
	return o;
}

int ntx_vocab_build_pieces(struct ntx_vocab *v, struct ntx_err *err)
{
	size_t cap = 0, total = 0, scratch_cap = 0;
	char *scratch = NULL;
	int32_t id;

	v->piece_off = malloc(((size_t)v->n_tokens + 1) * sizeof *v->piece_off);
	if (!v->piece_off)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for token pieces");
	for (id = 0; id < v->n_tokens; id++) {
		size_t n, m = 0;
		const char *t = vocab_text(v, id, &n);
		uint8_t a = v->attr[id];
		size_t need = v->type == NTX_VOCAB_BPE && (a & ATTR_NORMAL) &&
			      !(a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED))
			      ? bpe_decode(v, t, n, NULL) + 1 : n + 1;

		if (need > UINT32_MAX) {
			ntx_err_set(err, NTX_EFORMAT, "token %" PRId32 " decodes to %zu bytes (at most %u)",
				    id, need, UINT32_MAX);
			goto fail;
		}
		if (reserve(&scratch, &scratch_cap, need, err))
			goto fail;
		if (a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) {
			memcpy(scratch, t, n);
			m = n;
		} else if (a & ATTR_NORMAL) {
			m = v->type == NTX_VOCAB_SPM ? unescape_spaces(t, n, scratch)
						     : bpe_decode(v, t, n, scratch);
		} else if (a & ATTR_BYTE) {
			m = byte_piece(t, n, scratch);
		} /* UNDEFINED, UNUSED: nothing */
		if (total + m > UINT32_MAX) {
			ntx_err_set(err, NTX_EFORMAT, "token pieces exceed %u bytes", UINT32_MAX);
			goto fail;
		}
		if (reserve(&v->piece, &cap, total + m + 1, err))
			goto fail;
		v->piece_off[id] = (uint32_t)total;
		memcpy(v->piece + total, scratch, m);
		total += m;
	}
	v->piece_off[v->n_tokens] = (uint32_t)total;
	free(scratch);
	return 0;
fail:
	free(scratch);
	return -1;
}

const char *ntx_vocab_piece(const struct ntx_vocab *v, int32_t id, int special, size_t *len)
{
	if (id < 0 || id >= v->n_tokens) {
		*len = 0;
		return NULL;
	}
	if (!special && (v->attr[id] & (ATTR_UNKNOWN | ATTR_CONTROL))) {
		*len = 0;
		return v->piece + v->piece_off[id];
	}
	*len = v->piece_off[id + 1] - v->piece_off[id];
	return v->piece + v->piece_off[id];
}

/* ---- llama_detokenize ---- */

static int bad_id(const struct ntx_vocab *v, int32_t id, int i, struct ntx_err *err)
{
	return ntx_err_set(err, NTX_EINVAL, "token id %" PRId32 " at position %d is out of range "
			   "(the vocabulary has %d tokens)", id, i, v->n_tokens);
}

/* llama.cpp's clean_spaces passes, in place; returns the new length. */
static size_t clean_spaces(char *t, size_t total)
{
	size_t i, n;

	/* " ?" " !" " ." " ," lose the space */
	n = total;
	total = n ? 1 : 0;
	for (i = 1; i < n; i++) {
		char x = t[i];

		if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
			total--;
		t[total++] = x;
	}
	/* " ' " becomes "'" */
	n = total;
	total = n ? 1 : 0;
	for (i = 1; i < n; i++) {
		char x = t[i];

		if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
			total--;
			t[++i] = '\0'; /* the next space goes (llama.cpp leaves a NUL mark) */
		}
		t[total++] = x;
	}
	/* " 's" " 'm" " 're" " 've" lose the space (" 't" " 'd" " 'll" keep it) */
	n = total;
	total = n ? 1 : 0;
	for (i = 1; i < n; i++) {
		char x = t[i];

		if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
			char x1 = t[i + 1];

			if (x1 == 's' || x1 == 'm')
				total--;
			else if (x1 != 't' && x1 != 'd' && i + 2 < n &&
				 ((x1 == 'r' && t[i + 2] == 'e') || (x1 == 'v' && t[i + 2] == 'e')))
				total--;
		}
		t[total++] = x;
	}
	return total;
}

int ntx_detokenize(const struct ntx_vocab *v, const int32_t *ids, int n, int remove_special,
		   int unparse_special, char **out, size_t *len, struct ntx_err *err)
{
	int remove_space = v->add_space_prefix, i;
	size_t cap = 0, total = 0;
	char *buf = NULL;

	*out = NULL;
	*len = 0;
	if (n < 0)
		return ntx_err_set(err, NTX_EINVAL, "negative token count %d", n);
	if (remove_special && v->add_bos && n > 0 && ids[0] == v->bos) {
		remove_space = 0;
		ids++;
		n--;
	}
	if (remove_special && v->add_eos && n > 0 && ids[n - 1] == v->eos)
		n--;
	if (reserve(&buf, &cap, 1, err))
		return -1;
	for (i = 0; i < n; i++) {
		size_t pl;
		const char *p = ntx_vocab_piece(v, ids[i], unparse_special, &pl);

		if (!p) {
			free(buf);
			return bad_id(v, ids[i], i, err);
		}
		if (remove_space && pl && p[0] == ' ') {
			p++;
			pl--;
		}
		remove_space = 0;
		if (reserve(&buf, &cap, total + pl + 1, err)) {
			free(buf);
			return -1;
		}
		memcpy(buf + total, p, pl);
		total += pl;
	}
	if (v->clean_spaces)
		total = clean_spaces(buf, total);
	buf[total] = 0;
	*out = buf;
	*len = total;
	return 0;
}

/* ---- streaming ---- */

struct ntx_detok {
	const struct ntx_vocab *v;
	unsigned flags;
	int started;
	char *in;      /* held bytes, then the new piece */
	size_t in_n, in_cap;
	char *out;
	size_t out_cap;
};

struct ntx_detok *ntx_detok_new(const struct ntx_vocab *v, unsigned flags, struct ntx_err *err)
{
	struct ntx_detok *d = calloc(1, sizeof *d);

	if (!d) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	d->v = v;
	d->flags = flags;
	return d;
}

void ntx_detok_free(struct ntx_detok *d)
{
	if (!d)
		return;
	free(d->in);
	free(d->out);
	free(d);
}

/* Move the whole characters of d->in to d->out; at the end of the stream
 * (final) the incomplete tail goes too. */
static int drain(struct ntx_detok *d, int final, const char **out, size_t *len,
		 struct ntx_err *err)
{
	size_t i = 0, o = 0;

	*out = "";
	*len = 0;
	if (reserve(&d->out, &d->out_cap, d->in_n * 3 + 1, err))
		return -1;
	while (i < d->in_n) {
		int r = ntx_utf8_check((const unsigned char *)d->in + i, d->in_n - i);

		if (r > 0) {
			memcpy(d->out + o, d->in + i, (size_t)r);
			o += (size_t)r;
			i += (size_t)r;
			continue;
		}
		if (r == 0 && !final)
			break; /* hold the start of a character */
		if (d->flags & NTX_DETOK_REPLACE_INVALID) {
			memcpy(d->out + o, "\xef\xbf\xbd", 3);
			o += 3;
		} else {
			d->out[o++] = d->in[i];
		}
		i++;
	}
	if (i < d->in_n)
		memmove(d->in, d->in + i, d->in_n - i);
	d->in_n -= i;
	*out = d->out;
	*len = o;
	return 0;
}

int ntx_detok_push(struct ntx_detok *d, int32_t id, const char **out, size_t *len,
		   struct ntx_err *err)
{
	size_t pl;
	const char *p = ntx_vocab_piece(d->v, id, d->flags & NTX_DETOK_SPECIAL, &pl);

	*out = "";
	*len = 0;
	if (!p)
		return bad_id(d->v, id, 0, err);
	if (!d->started && (d->flags & NTX_DETOK_STRIP_SPACE) && d->v->add_space_prefix && pl &&
	    p[0] == ' ') {
		p++;
		pl--;
	}
	d->started = 1;
	if (pl) {
		if (reserve(&d->in, &d->in_cap, d->in_n + pl, err))
			return -1;
		memcpy(d->in + d->in_n, p, pl);
		d->in_n += pl;
	}
	return drain(d, 0, out, len, err);
}

void ntx_detok_flush(struct ntx_detok *d, const char **out, size_t *len)
{
	if (drain(d, 1, out, len, NULL)) {
		/* no memory for the output: emit nothing, drop what was held */
		*out = "";
		*len = 0;
	}
	d->in_n = 0;
	d->started = 0;
}
