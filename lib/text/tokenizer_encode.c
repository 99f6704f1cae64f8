/* tokenizer_encode.c - ntx_tokenize: the text is split on special tokens
 * (llama.cpp's tokenizer_st_partition), then each piece of raw text goes to
 * the SPM or BPE tokenizer (tokenizer_spm.c, tokenizer_bpe.c). */
#include <stdint.h>
#include <string.h> /* memmem: _GNU_SOURCE comes from the Makefile */

#include "tokenizer_int.h"

struct frag {
	int32_t id;     /* a special token, or -1 for raw text */
	size_t off, len;
};

struct fragvec {
	struct frag *f;
	size_t n, cap;
};

static int frag_push(struct fragvec *a, int32_t id, size_t off, size_t len, struct ntx_err *err)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		struct frag *p = realloc(a->f, cap * sizeof *p);

		if (!p)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory for %zu text fragments", cap);
		a->f = p;
		a->cap = cap;
	}
	a->f[a->n].id = id;
	a->f[a->n].off = off;
	a->f[a->n].len = len;
	a->n++;
	return 0;
}

/* Split the text on special tokens, longest token first, every occurrence
 * (llama.cpp's tokenizer_st_partition without the lstrip/rstrip attributes,
 * which no Llama model sets). */
static int partition(const struct ntx_vocab *v, const char *text, size_t len, int parse_special,
		     struct fragvec *out, struct ntx_err *err)
{
	struct fragvec tmp = { 0 }, cur = { 0 };
	int i, rc = -1;
	size_t k;

	if (frag_push(&cur, -1, 0, len, err))
		goto done;
	for (i = 0; i < v->n_special; i++) {
		int32_t id = v->special[i];
		size_t tl;
		const char *t = vocab_text(v, id, &tl);

		if (!parse_special && (v->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN)))
			continue;
		tmp.n = 0;
		for (k = 0; k < cur.n; k++) {
			struct frag f = cur.f[k];
			size_t pos = f.off, end = f.off + f.len;
			const char *m;

			if (f.id >= 0) {
				if (frag_push(&tmp, f.id, 0, 0, err))
					goto done;
				continue;
			}
			while (end - pos >= tl && (m = memmem(text + pos, end - pos, t, tl))) {
				size_t at = (size_t)(m - text);

				if (at > pos && frag_push(&tmp, -1, pos, at - pos, err))
					goto done;
				if (frag_push(&tmp, id, 0, 0, err))
					goto done;
				pos = at + tl;
			}
			if (pos < end && frag_push(&tmp, -1, pos, end - pos, err))
				goto done;
		}
		{
			struct fragvec sw = cur;

			cur = tmp;
			tmp = sw;
		}
	}
	*out = cur;
	cur.f = NULL;
	rc = 0;
done:
	free(tmp.f);
	free(cur.f);
	return rc;
}

int ntx_tokenize(const struct ntx_vocab *v, const char *text, size_t len, int add_bos,
		 int parse_special, int32_t **ids, int *n_ids, struct ntx_err *err)
{
	struct ntx_idvec out = { 0 };
	struct fragvec fr = { 0 };
	int prev_special = 1; /* SPM: a space prefix before the first text */
	size_t k;

	*ids = NULL;
	*n_ids = 0;
	if (len > INT32_MAX)
		return ntx_err_set(err, NTX_EINVAL, "text of %zu bytes is too long (at most %d)", len,
				   INT32_MAX);
	if (len > 0 && partition(v, text, len, parse_special, &fr, err))
		return -1;
	if (add_bos && v->add_bos && ntx_idvec_push(&out, v->bos, err))
		goto fail;
	for (k = 0; k < fr.n; k++) {
		const struct frag *f = &fr.f[k];

		if (f->id >= 0) {
			if (ntx_idvec_push(&out, f->id, err))
				goto fail;
			prev_special = 1;
			continue;
		}
		if (v->type == NTX_VOCAB_SPM) {
			if (ntx_spm_tokenize(v, text + f->off, f->len, v->add_space_prefix && prev_special,
					     &out, err))
				goto fail;
		} else if (ntx_bpe_tokenize(v, text + f->off, f->len, &out, err)) {
			goto fail;
		}
		prev_special = 0;
	}
	if (add_bos && v->add_eos && ntx_idvec_push(&out, v->eos, err))
		goto fail;
	if (out.n > INT32_MAX) {
		ntx_err_set(err, NTX_EINVAL, "%zu tokens: more than %d", out.n, INT32_MAX);
		goto fail;
	}
	if (!out.v && !(out.v = malloc(sizeof *out.v))) { /* never return NULL */
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	free(fr.f);
	*ids = out.v;
	*n_ids = (int)out.n;
	return 0;
fail:
	free(fr.f);
	free(out.v);
	return -1;
}
