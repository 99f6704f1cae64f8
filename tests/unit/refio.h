/* refio.h - reading llama.cpp's references in the fixtures (tests only):
 * prompt ids (whitespace-separated text), logits (raw little-endian
 * float32 rows) and the top-2 margin of a row. */
#ifndef NTX_TEST_REFIO_H
#define NTX_TEST_REFIO_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
