/* tokenizer_util.c - the growable id vector and the merge-candidate heap
 * that the SPM and BPE tokenizers share (tokenizer_int.h). */
#include <stdint.h>
#include <stdlib.h>

#include "tokenizer_int.h"

/* ---- id vector ---- */

int ntx_idvec_push(struct ntx_idvec *a, int32_t id, struct ntx_err *err)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		int32_t *p = realloc(a->v, cap * sizeof *p);

		if (!p)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory for %zu token ids", cap);
		a->v = p;
		a->cap = cap;
	}
	a->v[a->n++] = id;
	return 0;
}

/* ---- heap ---- */

static int before(const struct ntx_heap *h, const struct ntx_bigram *a, const struct ntx_bigram *b)
{
	if (h->by_rank) {
		if (a->rank != b->rank)
			return a->rank < b->rank;
	} else if (a->score != b->score) {
		return a->score > b->score;
	}
	return a->left < b->left;
}

int ntx_heap_push(struct ntx_heap *h, const struct ntx_bigram *b, struct ntx_err *err)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct ntx_bigram *p = realloc(h->a, cap * sizeof *p);

		if (!p)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory for %zu merge candidates", cap);
		h->a = p;
		h->cap = cap;
	}
	i = h->n++;
	while (i > 0 && before(h, b, &h->a[(i - 1) / 2])) {
		h->a[i] = h->a[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->a[i] = *b;
	return 0;
}

void ntx_heap_pop(struct ntx_heap *h, struct ntx_bigram *out)
{
	struct ntx_bigram last;
	size_t i = 0;

	*out = h->a[0];
	last = h->a[--h->n];
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && before(h, &h->a[c + 1], &h->a[c]))
			c++;
		if (!before(h, &h->a[c], &last))
			break;
		h->a[i] = h->a[c];
		i = c;
	}
	if (h->n)
		h->a[i] = last;
}
