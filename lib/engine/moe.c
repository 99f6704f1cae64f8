/* moe.c - the router of a mixture-of-experts layer (moe.h). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "moe.h"

void ntx_moe_route(const float *logits, int n_expert, int k, double scale, int32_t *ids,
		   float *w, float *gap)
{
	float p[NTX_MOE_MAX_EXPERT];
	unsigned char used[NTX_MOE_MAX_EXPERT] = { 0 };
	float mx = logits[0], sk = 0.0f, inv;
	double sum = 0.0;
	int i, j;

	for (i = 1; i < n_expert; i++)
		if (logits[i] > mx)
			mx = logits[i];
	for (i = 0; i < n_expert; i++) {
		p[i] = expf(logits[i] - mx);
		sum += p[i];
	}
	inv = (float)(1.0 / sum); /* as ggml_soft_max: a double sum, scaled by its inverse */
	for (i = 0; i < n_expert; i++)
		p[i] *= inv;
	for (j = 0; j < k; j++) { /* selection: k is small */
		int b = -1;

		for (i = 0; i < n_expert; i++)
			if (!used[i] && (b < 0 || p[i] > p[b]))
				b = i;
		used[b] = 1;
		ids[j] = b;
		sk += p[b];
	}
	if (gap) {
		int b = -1;

		for (i = 0; i < n_expert; i++)
			if (!used[i] && (b < 0 || p[i] > p[b]))
				b = i;
		*gap = b < 0 ? 0.0f : logits[ids[k - 1]] - logits[b];
	}
	if (sk < 6.103515625e-5f)
		sk = 6.103515625e-5f;
	for (j = 0; j < k; j++) {
		w[j] = p[ids[j]] / sk;
		if (scale != 0.0 && scale != 1.0)
			w[j] *= (float)scale;
	}
}

void ntx_moe_route_rows(const float *logits, int n_tok, int n_expert, int k, double scale,
			int32_t *sel, float *wgt)
{
	int t;

	for (t = 0; t < n_tok; t++)
		ntx_moe_route(logits + (int64_t)t * n_expert, n_expert, k, scale,
			      sel + (int64_t)t * k, wgt + (int64_t)t * k, NULL);
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

void ntx_moe_pick_uploads(const int *rows, int n, double bytes, double cpu, double cpu_batch,
			  double h2d, int min_rows, int *scratch, uint8_t *up)
{
	double t_cpu = 0, t_up = 0, best;
	int i, m = 0, take = 0, cut = min_rows - 1;

	for (i = 0; i < n; i++) {
		up[i] = rows[i] >= min_rows;
		if (!up[i])
			t_cpu += bytes * fmax(1 / cpu, rows[i] / cpu_batch);
		else
			scratch[m++] = rows[i];
	}
	if (!m || cpu <= 0 || cpu_batch <= 0 || h2d <= 0)
		return;
	qsort(scratch, (size_t)m, sizeof *scratch, cmp_int);
	t_up = m * bytes / h2d;
	best = fmax(t_cpu, t_up);
	/* the CPU takes the i + 1 smallest (whole runs of equal sizes, so that
	 * the choice is a row count) */
	for (i = 0; i < m; i++) {
		t_cpu += bytes * fmax(1 / cpu, scratch[i] / cpu_batch);
		t_up -= bytes / h2d;
		if (i + 1 < m && scratch[i + 1] == scratch[i])
			continue;
		if (fmax(t_cpu, t_up) < best) {
			best = fmax(t_cpu, t_up);
			take = i + 1;
		}
	}
	if (take)
		cut = scratch[take - 1];
	for (i = 0; i < n; i++)
		up[i] = rows[i] >= min_rows && rows[i] > cut;
}
