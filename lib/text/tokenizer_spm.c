/* tokenizer_spm.c - SentencePiece BPE as llama.cpp's llm_tokenizer_spm_session
 * (commit c392e509) runs it: the text (with a space in front when asked) has
 * its spaces escaped as U+2581, is cut into UTF-8 characters by lead byte
 * alone, then the adjacent pair whose concatenation is the highest-scoring
 * token (leftmost on ties) is merged until none is left; a piece that is not
 * a token falls back to one <0xXX> byte token per byte. */
#include <limits.h>
#include <string.h>

#include "tokenizer_int.h"
#include "unicode.h"

struct sym {
	size_t off, n; /* bytes of the escaped text */
	int prev, next;
};

static int try_pair(const struct ntx_vocab *v, const char *t, const struct sym *sy, int l, int r,
		    struct ntx_heap *h, struct ntx_err *err)
{
	struct ntx_bigram b;
	int32_t id;

	if (l < 0 || r < 0)
		return 0;
	/* adjacent symbols are adjacent bytes of t */
	id = ntx_vocab_find_n(v, t + sy[l].off, sy[l].n + sy[r].n);
	if (id < 0)
		return 0;
	b.score = v->score[id];
	b.rank = 0;
	b.tok = id;
	b.left = l;
	b.right = r;
	b.size = sy[l].n + sy[r].n;
	return ntx_heap_push(h, &b, err);
}

int ntx_spm_tokenize(const struct ntx_vocab *v, const char *text, size_t len, int prefix,
		     struct ntx_idvec *out, struct ntx_err *err)
{
	static const char esc[3] = { '\xe2', '\x96', '\x81' }; /* U+2581 */
	struct ntx_heap h = { NULL, 0, 0, 0 };
	struct ntx_bigram b;
	struct sym *sy = NULL;
	char *t = NULL;
	size_t tl = 0, i, off;
	int ns = 0, rc = -1, k;

	if (len > (SIZE_MAX - 3) / 3 || (len + 1) * 3 >= INT_MAX) {
		ntx_err_set(err, NTX_EINVAL, "text of %zu bytes is too long for SPM", len);
		goto done;
	}
	t = malloc((len + 1) * 3);
	sy = malloc((len + 1) * 3 * sizeof *sy);
	if (!t || !sy) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory for %zu bytes of text", len);
		goto done;
	}
	if (prefix) {
		memcpy(t, esc, 3);
		tl = 3;
	}
	for (i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(t + tl, esc, 3);
			tl += 3;
		} else {
			t[tl++] = text[i];
		}
	}
	if (tl == 0) {
		rc = 0;
		goto done;
	}
	for (off = 0; off < tl; ns++) {
		size_t l = ntx_utf8_seq_len((unsigned char)t[off]);

		if (l > tl - off)
			l = tl - off;
		sy[ns].off = off;
		sy[ns].n = l;
		sy[ns].prev = ns - 1;
		sy[ns].next = ns + 1;
		off += l;
	}
	sy[ns - 1].next = -1;
	for (k = 1; k < ns; k++)
		if (try_pair(v, t, sy, k - 1, k, &h, err))
			goto done;
	while (h.n) {
		struct sym *l, *r;

		ntx_heap_pop(&h, &b);
		l = &sy[b.left];
		r = &sy[b.right];
		if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
			continue; /* outdated */
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			sy[r->next].prev = b.left;
		if (try_pair(v, t, sy, l->prev, b.left, &h, err) ||
		    try_pair(v, t, sy, b.left, l->next, &h, err))
			goto done;
	}
	for (k = 0; k != -1; k = sy[k].next) {
		int32_t id = ntx_vocab_find_n(v, t + sy[k].off, sy[k].n);

		if (id >= 0) {
			if (ntx_idvec_push(out, id, err))
				goto done;
			continue;
		}
		for (i = 0; i < sy[k].n; i++) {
			unsigned char c = (unsigned char)t[sy[k].off + i];

			if (v->byte_tok[c] < 0) {
				ntx_err_set(err, NTX_EFORMAT,
					    "byte 0x%02X has no <0x%02X> token for byte fallback", c, c);
				goto done;
			}
			if (ntx_idvec_push(out, v->byte_tok[c], err))
				goto done;
		}
	}
	rc = 0;
done:
	free(t);
	free(sy);
	free(h.a);
	return rc;
}
