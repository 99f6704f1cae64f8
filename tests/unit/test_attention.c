/* test_attention.c - the CPU attention over a KV cache (ntx_op_attention) on
 * every ISA against a float64 reference: F16 and F32 caches, head sizes 64,
 * 128 and one the SIMD path does not take (40), query-head groups of 1, 4, 8
 * and 16 (more than one SIMD call), positions across the tile edges, two
 * sequences; and batch invariance: a token's output is bitwise the same
 * computed alone, with other tokens, and on 1 or 4 threads (which changes
 * how heads are grouped into jobs).
 *
 * Tolerance: scores, exp (a vector polynomial of ~2e-7 relative error) and
 * sums in float against double: relative errors ~1e-6, NMSE ~1e-12; bound
 * 1e-9 (a wrong index or a missed rescale gives NMSE near 1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_impl.h"
#include "ntx_ops.h"
#include "t.h"

#define NMSE_ATTN 1e-9

static uint64_t rng = 0x853C49E6748FEA9Bull;

static float rnd(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

struct att_case {
	int n_head, n_kv, hd, n_ctx, f16;
};

/* Random cache and queries for the case; n_tok tokens at positions pos of
 * sequences seq (filled here). */
struct att_data {
	struct ntx_kv_layer kv;
	float *q;
	int32_t seq[8], pos[8];
	int n_tok;
};

static void data_make(const struct att_case *c, struct att_data *d)
{
	static const int32_t poss[8] = { 0, 62, 63, 64, 65, 300, 127, 1 };
	size_t n = (size_t)2 * c->n_ctx * c->n_kv * c->hd;

	memset(d, 0, sizeof *d);
	d->kv.f16 = c->f16, d->kv.n_ctx = c->n_ctx, d->kv.n_seq = 2;
	d->kv.n_head_kv = c->n_kv, d->kv.head_dim = c->hd;
	d->kv.k = malloc(n * 4), d->kv.v = malloc(n * 4);
	for (size_t i = 0; i < n; i++) {
		float a = 2 * rnd(), b = rnd();

		if (c->f16) {
			((uint16_t *)d->kv.k)[i] = ntx_fp32_to_fp16(a);
			((uint16_t *)d->kv.v)[i] = ntx_fp32_to_fp16(b);
		} else {
			((float *)d->kv.k)[i] = a;
			((float *)d->kv.v)[i] = b;
		}
	}
	d->n_tok = 8;
	for (int t = 0; t < 8; t++) {
		d->pos[t] = poss[t] < c->n_ctx ? poss[t] : c->n_ctx - 1;
		d->seq[t] = t & 1;
	}
	d->q = malloc((size_t)8 * c->n_head * c->hd * 4);
	for (size_t i = 0; i < (size_t)8 * c->n_head * c->hd; i++)
		d->q[i] = 2 * rnd();
}

static double kv_at(const struct ntx_kv_layer *kv, const void *base, int s, int p, int h, int i)
{
	size_t o = (((size_t)s * kv->n_ctx + p) * kv->n_head_kv + h) * kv->head_dim + i;

	return kv->f16 ? ntx_fp16_to_fp32(((const uint16_t *)base)[o]) : ((const float *)base)[o];
}

/* NMSE of out against the float64 attention of every (token, head). */
static double ref_nmse(const struct att_case *c, const struct att_data *d, const float *out)
{
	double num = 0, den = 0, *sc = malloc(sizeof(double) * c->n_ctx);
	const int G = c->n_head / c->n_kv;

	for (int t = 0; t < d->n_tok; t++) {
		for (int h = 0; h < c->n_head; h++) {
			const float *q = d->q + ((size_t)t * c->n_head + h) * c->hd;
			double mx = -INFINITY, sum = 0;

			for (int p = 0; p <= d->pos[t]; p++) {
				double s = 0;

				for (int i = 0; i < c->hd; i++)
					s += q[i] * kv_at(&d->kv, d->kv.k, d->seq[t], p, h / G, i);
				sc[p] = s / sqrt((double)c->hd);
				mx = sc[p] > mx ? sc[p] : mx;
			}
			for (int p = 0; p <= d->pos[t]; p++)
				sum += sc[p] = exp(sc[p] - mx);
			for (int i = 0; i < c->hd; i++) {
				double a = 0, e;

				for (int p = 0; p <= d->pos[t]; p++)
					a += sc[p] * kv_at(&d->kv, d->kv.v, d->seq[t], p, h / G, i);
				a /= sum;
				e = out[((size_t)t * c->n_head + h) * c->hd + i] - a;
				num += e * e, den += a * a;
			}
		}
	}
	free(sc);
	return num / den;
}

static float *run(struct ntx_pool *pool, int nth, const struct att_case *c, const struct att_data *d,
		  int t0, int n_tok)
{
	size_t no = (size_t)n_tok * c->n_head * c->hd;
	float *out = malloc(no * 4), *scr = malloc(ntx_op_attention_scratch(nth, c->n_ctx) * 4);

	for (size_t i = 0; i < no; i++)
		out[i] = NAN;
	ntx_op_attention(pool, out, d->q + (size_t)t0 * c->n_head * c->hd, n_tok, c->n_head, &d->kv,
			 d->seq + t0, d->pos + t0, scr);
	free(scr);
	return out;
}

static void test_isa(const char *isa, struct ntx_pool *p4)
{
	static const struct att_case cases[] = {
		{ 32, 8, 128, 400, 1 }, { 8, 8, 64, 80, 1 }, { 16, 1, 64, 130, 0 }, { 4, 1, 40, 70, 1 },
		{ 16, 2, 128, 66, 0 },
	};

	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const struct att_case *c = &cases[k];
		const size_t per = (size_t)c->n_head * c->hd;
		struct att_data d;
		float *all, *all4, *one, *mid;
		long bad = 0;
		double e;

		data_make(c, &d);
		all = run(NULL, 1, c, &d, 0, 8);
		all4 = run(p4, 4, c, &d, 0, 8);
		one = run(NULL, 1, c, &d, 5, 1);
		mid = run(p4, 4, c, &d, 2, 3);
		e = ref_nmse(c, &d, all);
		t_ok(e <= NMSE_ATTN, "%s attention %d/%d heads, hd %d, %s cache, positions up to %d: NMSE %.3g <= %g",
		     isa, c->n_head, c->n_kv, c->hd, c->f16 ? "F16" : "F32", c->n_ctx - 1, e, NMSE_ATTN);
		bad += memcmp(all, all4, 8 * per * 4) != 0;
		bad += memcmp(one, all + 5 * per, per * 4) != 0;
		bad += memcmp(mid, all + 2 * per, 3 * per * 4) != 0;
		t_ok(bad == 0, "%s attention %d/%d heads hd %d: tokens alone, in 3 and in 8, 1 or 4 threads, bitwise equal",
		     isa, c->n_head, c->n_kv, c->hd);
		free(all), free(all4), free(one), free(mid);
		free(d.q), free(d.kv.k), free(d.kv.v);
	}
}

int main(void)
{
	static const char *isas[] = { "scalar", "avx2", "avx512", "amx" };
	struct ntx_pool *p4 = ntx_pool_new(4, NULL);

	for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
		if (ntx_cpu_isa_select(isas[i]) != 0) {
			t_diag("%s: not available on this CPU, skipped", isas[i]);
			continue;
		}
		test_isa(isas[i], p4);
	}
	ntx_cpu_isa_select("auto");
	ntx_pool_free(p4);
	return t_done();
}
