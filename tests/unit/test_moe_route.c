/* test_moe_route.c - the router of mixture-of-experts layers (moe.h),
 * against float64 softmax / top-k / renormalisation written here: the
 * chosen experts in descending order, ties to the lowest index, the
 * weights summing to 1 (times expert_weights_scale when it is neither 0
 * nor 1), the near-tie gap (in logits), and k == n_expert. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "moe.h"
#include "t.h"

/* The float64 reference: p, and the expert chosen j-th. */
static void ref_route(const float *l, int n, int k, int *ids, double *w)
{
	double p[64], mx = l[0], s = 0, sk = 0;
	int used[64] = { 0 }, i, j;

	for (i = 1; i < n; i++)
		mx = l[i] > mx ? l[i] : mx;
	for (i = 0; i < n; i++)
		s += p[i] = exp(l[i] - mx);
	for (i = 0; i < n; i++)
		p[i] /= s;
	for (j = 0; j < k; j++) {
		int b = -1;

		for (i = 0; i < n; i++)
			if (!used[i] && (b < 0 || p[i] > p[b]))
				b = i;
		used[b] = 1, ids[j] = b, sk += p[b];
	}
	for (j = 0; j < k; j++)
		w[j] = p[ids[j]] / sk;
}

int main(void)
{
	int bad = 0, wbad = 0, c, j;
	double werr = 0;

	srand(7);
	for (c = 0; c < 2000; c++) {
		int n = 2 + rand() % 60, k = 1 + rand() % (n < 8 ? n : 8), ids[64];
		float l[64], w[8], gap;
		int32_t got[8];
		double rw[8], sum = 0;

		for (j = 0; j < n; j++)
			l[j] = (float)((rand() / (double)RAND_MAX - 0.5) * 8.0);
		ntx_moe_route(l, n, k, 0.0, got, w, &gap);
		ref_route(l, n, k, ids, rw);
		for (j = 0; j < k; j++) {
			bad += got[j] != ids[j];
			werr = fmax(werr, fabs(w[j] - rw[j]));
			sum += w[j];
		}
		wbad += fabs(sum - 1.0) > 1e-5 || gap < 0;
	}
	t_ok(bad == 0, "2000 random routings: the reference's experts in descending order (%d differ)", bad);
	t_ok(werr < 1e-6 && wbad == 0, "weights within %.2g of float64, summing to 1, gap >= 0", werr);
	{
		/* ties: lowest index first; the gap of a tie at the k-th place is 0 */
		const float l[6] = { 1.0f, 3.0f, 2.0f, 3.0f, 2.0f, 0.5f };
		int32_t id[6];
		float w[6], gap;

		ntx_moe_route(l, 6, 3, 0.0, id, w, &gap);
		t_ok(id[0] == 1 && id[1] == 3 && id[2] == 2 && gap == 0.0f,
		     "ties: experts 1, 3, 2 (got %d, %d, %d), gap 0 (%g)", id[0], id[1], id[2], gap);
		t_ok(w[0] == w[1] && w[0] > w[2], "tied experts have equal weights");
		ntx_moe_route(l, 6, 2, 0.0, id, w, &gap);
		t_ok(fabsf(w[0] - 0.5f) < 1e-7f && fabsf(w[1] - 0.5f) < 1e-7f && gap == 1.0f,
		     "k = 2: weights 0.5, 0.5 (%g, %g), gap = logit 3 - logit 2 (%g)", w[0], w[1], gap);
		ntx_moe_route(l, 6, 2, 2.5, id, w, NULL);
		t_ok(fabsf(w[0] - 1.25f) < 1e-6f, "expert_weights_scale 2.5 scales the weights (%g)",
		     w[0]);
		ntx_moe_route(l, 6, 2, 1.0, id, w, NULL);
		t_ok(fabsf(w[0] - 0.5f) < 1e-7f, "expert_weights_scale 1 is no scaling (%g)", w[0]);
		ntx_moe_route(l, 6, 6, 0.0, id, w, &gap);
		t_ok(id[5] == 5 && gap == 0.0f, "k == n_expert: every expert, the last is 5 (%d)", id[5]);
	}
	{
		/* a huge logit: the others get p = 0, no NaN */
		const float l[4] = { 100.0f, -100.0f, -100.0f, -100.0f };
		int32_t id[2];
		float w[2];

		ntx_moe_route(l, 4, 2, 0.0, id, w, NULL);
		t_ok(id[0] == 0 && id[1] == 1 && w[0] == 1.0f && w[1] == 0.0f,
		     "a dominant expert: weights 1 and 0 (%g, %g), ties below it to the lowest index",
		     w[0], w[1]);
	}
	{
		/* the expert split's uploads: CPU 100 B/s alone, 400 B x rows/s
		 * batched; copies 50 B/s; experts of 100 bytes */
		int rows[6] = { 4, 40, 10, 20, 30, 12 }, s[6];
		uint8_t up[6];

		ntx_moe_pick_uploads(rows, 6, 100, 100, 400, 50, 9, s, up);
		/* CPU: 4 -> 1 s; copies of 5 -> 10 s; the CPU takes 10 (2.5 s),
		 * 12 (3 s): 6.5 s vs 6 s, and 20 (5 s) would make 11.5 > 4 */
		t_ok(!up[0] && !up[2] && !up[5] && up[1] && up[3] && up[4],
		     "uploads: the CPU keeps the small group and takes the two smallest others (%d%d%d%d%d%d)",
		     up[0], up[1], up[2], up[3], up[4], up[5]);
		ntx_moe_pick_uploads(rows, 6, 100, 0, 400, 50, 9, s, up);
		t_ok(!up[0] && up[1] && up[2] && up[3] && up[4] && up[5],
		     "uploads without rates: every group of at least min_rows");
		ntx_moe_pick_uploads(rows, 6, 100, 100, 400, 1e9, 9, s, up);
		t_ok(!up[0] && up[1] && up[2] && up[3] && up[4] && up[5],
		     "uploads over a fast link: every group of at least min_rows");
		ntx_moe_pick_uploads(rows, 6, 100, 1e9, 1e9, 50, 9, s, up);
		t_ok(!up[0] && !up[1] && !up[2] && !up[3] && !up[4] && !up[5],
		     "a fast CPU: no uploads");
		{
			int eq[4] = { 16, 16, 16, 16 };

			ntx_moe_pick_uploads(eq, 4, 100, 100, 1600, 50, 9, s, up);
			t_ok(up[0] == up[1] && up[1] == up[2] && up[2] == up[3],
			     "groups of equal rows go the same way (%d%d%d%d)", up[0], up[1], up[2], up[3]);
		}
	}
	return t_done();
}
