/* tokenizer_bpe.c - byte-level BPE with the Llama 3 pre-tokenizer, as
 * llama.cpp's llm_tokenizer_bpe_session and unicode_regex_split_custom_llama3
 * (commit c392e509) run it, and Qwen2's (the same regex with digits one at
 * a time). */
#include <limits.h>
#include <string.h>

#include "tokenizer_int.h"
#include "unicode.h"

/* ---- Llama 3 pre-tokenizer ---- */

/* The split of llama.cpp's hand-written matcher for
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * over code points cp[0..n) with flags fl (ntx_unicode_flags). Writes the end
 * of every piece to ends[] (at most n) and returns their count. Positions
 * past the end read as flags 0 and code point "none", as in llama.cpp.
 * digits_max 1 gives Qwen2's regex (\p{N} instead of \p{N}{1,3}; its
 * (?:'[sS]|'[tT]|...) contractions are the same as (?i:...)). */
static size_t split_llama3(const uint32_t *cp, const uint16_t *fl, size_t n, size_t *ends,
			   int digits_max)
{
	const unsigned L = NTX_UCAT_LETTER, N = NTX_UCAT_NUMBER, WS = NTX_UCAT_WHITESPACE;
	size_t pos = 0, ne = 0;

#define FL(i) ((i) < n ? fl[i] : 0u)
#define CP(i) ((i) < n ? cp[i] : 0xFFFFFFFFu)
#define EMIT(p) do { if ((p) > (ne ? ends[ne - 1] : 0)) ends[ne++] = (p); } while (0)
#define LOWER(c) ((c) >= 'A' && (c) <= 'Z' ? (c) + 32 : (c))
	while (pos < n) {
		uint32_t c = cp[pos];
		unsigned f = fl[pos], f2;
		size_t nws, last_nl;

		/* (?i:'s|'t|'re|'ve|'m|'ll|'d): only ASCII letters lower-case to
		 * these (checked by scripts/gen-unicode.py) */
		if (c == '\'' && pos + 1 < n) {
			uint32_t c1 = LOWER(cp[pos + 1]);

			if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
				pos += 2;
				EMIT(pos);
				continue;
			}
			if (pos + 2 < n) {
				uint32_t c2 = LOWER(cp[pos + 2]);

				if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
				    (c1 == 'l' && c2 == 'l')) {
					pos += 3;
					EMIT(pos);
					continue;
				}
			}
		}
		/* [^\r\n\p{L}\p{N}]?\p{L}+ */
		if (!(c == '\r' || c == '\n' || (f & N)) && ((f & L) || (FL(pos + 1) & L))) {
			pos++;
			while (FL(pos) & L)
				pos++;
			EMIT(pos);
			continue;
		}
		/* \p{N}{1,3} (qwen2: \p{N}) */
		if (f & N) {
			size_t ini = pos;

			while (FL(pos) & N) {
				if (++pos - ini >= (size_t)digits_max) {
					EMIT(pos);
					ini = pos;
				}
			}
			EMIT(pos);
			continue;
		}
		/* " ?[^\s\p{L}\p{N}]+[\r\n]*" (f is never 0 inside the text) */
		f2 = c == ' ' ? FL(pos + 1) : f;
		if (!(f2 & (WS | L | N)) && f) {
			pos += c == ' ';
			while (!(f2 & (WS | L | N)) && f2)
				f2 = FL(pos + 1), pos++;
			while (CP(pos) == '\r' || CP(pos) == '\n')
				pos++;
			EMIT(pos);
			continue;
		}
		/* \s*[\r\n]+ | \s+(?!\S) | \s+ */
		nws = 0;
		last_nl = 0;
		while (FL(pos + nws) & WS) {
			if (CP(pos + nws) == '\r' || CP(pos + nws) == '\n')
				last_nl = pos + nws + 1;
			nws++;
		}
		if (last_nl > 0) {
			pos = last_nl;
			EMIT(pos);
			continue;
		}
		if (nws > 1 && pos + nws < n) {
			pos += nws - 1;
			EMIT(pos);
			continue;
		}
		if (nws > 0) {
			pos += nws;
			EMIT(pos);
			continue;
		}
		EMIT(++pos); /* no match: one code point alone */
	}
#undef FL
#undef CP
#undef EMIT
#undef LOWER
	return ne;
}

/* ---- BPE merges ---- */

struct sym {
	size_t off, n;   /* bytes of the word */
	int prev, next;
	int32_t id;      /* the token of these bytes, or -1 */
};

struct bpe_ws {
	struct sym *sym;
	size_t cap;      /* entries in sym */
	struct ntx_heap heap;
};

static int add_pair(const struct ntx_vocab *v, struct bpe_ws *ws, int l, int r, struct ntx_err *err)
{
	struct ntx_bigram b;

	if (l < 0 || r < 0 || ws->sym[l].id < 0 || ws->sym[r].id < 0)
		return 0;
	b.rank = ntx_vocab_merge(v, ws->sym[l].id, ws->sym[r].id, &b.tok);
	if (b.rank < 0)
		return 0;
	b.score = 0;
	b.left = l;
	b.right = r;
	b.size = ws->sym[l].n + ws->sym[r].n;
	return ntx_heap_push(&ws->heap, &b, err);
}

/* One pre-tokenized word w[0..n) (byte-level text) to tokens. */
static int bpe_word(const struct ntx_vocab *v, const char *w, size_t n, struct bpe_ws *ws,
		    struct ntx_idvec *out, struct ntx_err *err)
{
	struct sym *sy;
	struct ntx_bigram b;
	size_t off;
	int ns = 0, i;

	if (n == 0)
		return 0;
	if (n >= INT_MAX)
		return ntx_err_set(err, NTX_EINVAL, "a word of %zu bytes is too long (at most %d)", n,
				   INT_MAX - 1);
	if (v->ignore_merges) {
		int32_t id = ntx_vocab_find_n(v, w, n);

		if (id >= 0)
			return ntx_idvec_push(out, id, err);
	}
	if (n > ws->cap) { /* at most one symbol per byte */
		size_t cap = n < 256 ? 256 : n;

		sy = realloc(ws->sym, cap * sizeof *sy);
		if (!sy)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory for a word of %zu bytes", n);
		ws->sym = sy;
		ws->cap = cap;
	}
	sy = ws->sym;
	for (off = 0; off < n; ns++) {
		size_t l = ntx_utf8_seq_len((unsigned char)w[off]);

		if (l > n - off)
			l = n - off;
		sy[ns].off = off;
		sy[ns].n = l;
		sy[ns].prev = ns - 1;
		sy[ns].next = ns + 1;
		sy[ns].id = ntx_vocab_find_n(v, w + off, l);
		off += l;
	}
	sy[ns - 1].next = -1;
	ws->heap.n = 0;
	for (i = 1; i < ns; i++)
		if (add_pair(v, ws, i - 1, i, err))
			return -1;
	while (ws->heap.n) {
		struct sym *l, *r;

		ntx_heap_pop(&ws->heap, &b);
		l = &sy[b.left];
		r = &sy[b.right];
		if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
			continue; /* outdated */
		l->n += r->n;
		r->n = 0;
		l->id = b.tok;
		l->next = r->next;
		if (r->next >= 0)
			sy[r->next].prev = b.left;
		if (add_pair(v, ws, l->prev, b.left, err) || add_pair(v, ws, b.left, l->next, err))
			return -1;
	}
	for (i = 0; i != -1; i = sy[i].next) {
		if (sy[i].id >= 0) {
			if (ntx_idvec_push(out, sy[i].id, err))
				return -1;
			continue;
		}
		/* not a token: llama.cpp tries each byte of the text alone */
		for (off = 0; off < sy[i].n; off++) {
			int32_t id = ntx_vocab_find_n(v, w + sy[i].off + off, 1);

			if (id >= 0 && ntx_idvec_push(out, id, err))
				return -1;
		}
	}
	return 0;
}

int ntx_bpe_tokenize(const struct ntx_vocab *v, const char *text, size_t len,
		     struct ntx_idvec *out, struct ntx_err *err)
{
	uint32_t *cp = malloc(len * sizeof *cp);
	uint16_t *fl = malloc(len * sizeof *fl);
	size_t *ends = malloc(len * sizeof *ends);
	char *word = malloc(len * 8 + 8);
	struct bpe_ws ws = { NULL, 0, { NULL, 0, 0, 1 } };
	size_t n = 0, off = 0, ne, k, start = 0;
	int rc = -1;

	if (len == 0) {
		rc = 0;
		goto done;
	}
	if (!cp || !fl || !ends || !word) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory for %zu bytes of text", len);
		goto done;
	}
	while (off < len) {
		size_t adv;

		cp[n] = ntx_utf8_decode((const unsigned char *)text + off, len - off, &adv);
		fl[n] = (uint16_t)ntx_unicode_flags(cp[n]);
		n++;
		off += adv;
	}
	ne = split_llama3(cp, fl, n, ends, v->digits_max ? v->digits_max : 3);
	for (k = 0; k < ne; k++) {
		size_t wl = 0, i;

		for (i = start; i < ends[k]; i++) {
			char u[4];
			size_t j, m = ntx_utf8_encode(cp[i], u);

			for (j = 0; j < m; j++) {
				unsigned char byte = (unsigned char)u[j];

				memcpy(word + wl, v->bu_text[byte], v->bu_len[byte]);
				wl += v->bu_len[byte];
			}
		}
		start = ends[k];
		if (bpe_word(v, word, wl, &ws, out, err))
			goto done;
	}
	rc = 0;
done:
	free(cp);
	free(fl);
	free(ends);
	free(word);
	free(ws.sym);
	free(ws.heap.a);
	return rc;
}
