/* refio.h - reading llama.cpp's references in the fixtures (tests only):
 * prompt ids (whitespace-separated text), logits (raw little-endian
 * float32 rows), the top-2 margin of a row, an NMSE, and the references'
 * evaluation procedure (refio_feed). */
#ifndef NTX_TEST_REFIO_H
#define NTX_TEST_REFIO_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "sampler.h"

/* Up to max ids from path; -1 when it cannot be opened. */
static inline int refio_ids(const char *path, int32_t *ids, int max)
{
	FILE *f = fopen(path, "r");
	int n = 0;

	if (!f)
		return -1;
	while (n < max && fscanf(f, "%d", &ids[n]) == 1)
		n++;
	fclose(f);
	return n;
}

/* The whole file as floats (caller frees; *n floats), or NULL. */
static inline float *refio_f32(const char *path, long *n)
{
	FILE *f = fopen(path, "rb");
	float *v;
	long sz;

	*n = 0;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	v = sz > 0 ? malloc((size_t)sz) : NULL;
	if (v && fread(v, 1, (size_t)sz, f) != (size_t)sz) {
		free(v);
		v = NULL;
	}
	fclose(f);
	*n = v ? sz / 4 : 0;
	return v;
}

/* The largest logit minus the second largest. */
static inline double refio_margin(const float *row, int64_t V)
{
	int32_t a = ntx_argmax(row, V);
	float b = -INFINITY;
	int64_t i;

	for (i = 0; i < V; i++)
		if (i != a && row[i] > b)
			b = row[i];
	return row[a] - b;
}

/* Normalized mean squared error of a against the reference b. */
static inline double refio_nmse(const float *a, const float *b, int64_t n)
{
	double num = 0, den = 0;

	for (int64_t i = 0; i < n; i++) {
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += (double)b[i] * b[i];
	}
	return den > 0 ? num / den : num;
}

/* The reference's procedure on sequence 0 of e: the prompt (at most 64
 * ids) in one batch with every row's logits, then greedy[0 .. n_gen) one at
 * a time (teacher-forced): n_prompt + n_gen rows of V logits. */
static inline int refio_feed(struct ntx_engine *e, const int32_t *prompt, int n_prompt,
			     const int32_t *greedy, int n_gen, int64_t V, float *logits,
			     struct ntx_err *err)
{
	int32_t pos[64];
	uint8_t want[64];
	struct ntx_batch b;
	int i;

	for (i = 0; i < n_prompt; i++) {
		pos[i] = i;
		want[i] = 1;
	}
	memset(&b, 0, sizeof b);
	b.n_tok = n_prompt;
	b.tok = prompt;
	b.pos = pos;
	b.want = want;
	if (ntx_engine_eval(e, &b, NULL, logits, err))
		return -1;
	for (i = 0; i < n_gen; i++) {
		int32_t p = n_prompt + i;

		b.n_tok = 1;
		b.tok = &greedy[i];
		b.pos = &p;
		b.want = NULL;
		if (ntx_engine_eval(e, &b, NULL, logits + (int64_t)(n_prompt + i) * V, err))
			return -1;
	}
	return 0;
}

#endif
