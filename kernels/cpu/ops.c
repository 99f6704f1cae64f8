/* ops.c - CPU element-wise ops and attention (see ntx_ops.h). */
#include "cpu_impl.h"
#include "ntx_ops.h"

#include <math.h>
#include <string.h>

void ntx_op_rmsnorm(float *out, const float *x, const float *w, int n_tok, int dim, float eps)
{
	int t, i;

	for (t = 0; t < n_tok; t++) {
		const float *xr = x + (int64_t)t * dim;
		float *o = out + (int64_t)t * dim;
		double ss = 0;
		float scale;

		for (i = 0; i < dim; i++)
			ss += (double)xr[i] * xr[i];
		scale = (float)(1.0 / sqrt(ss / dim + eps));
		for (i = 0; i < dim; i++)
			o[i] = xr[i] * scale * w[i];
	}
}

void ntx_op_rope(float *x, int n_tok, int n_heads, int head_dim, const int32_t *pos,
		 const struct ntx_rope *r)
{
	int half = r->n_rot / 2, t, h, i;
	double inv[512];

	/* inverse frequencies; n_rot <= head_dim; chunk if very large */
	for (i = 0; i < half && i < 512; i++) {
		inv[i] = r->freq_scale * pow(r->base, -2.0 * i / r->n_rot);
		if (r->freqs)
			inv[i] /= r->freqs[i];
	}
	for (t = 0; t < n_tok; t++) {
		for (i = 0; i < half; i++) {
			double th = (double)pos[t] * (i < 512 ? inv[i] :
				   r->freq_scale * pow(r->base, -2.0 * i / r->n_rot) /
				   (r->freqs ? r->freqs[i] : 1.0f));
			float c = (float)cos(th), s = (float)sin(th);

			for (h = 0; h < n_heads; h++) {
				float *hp = x + ((int64_t)t * n_heads + h) * head_dim;
				float *pa = r->neox ? hp + i : hp + 2 * i;
				float *pb = r->neox ? hp + i + half : hp + 2 * i + 1;
				float a = *pa, b = *pb;

				*pa = a * c - b * s;
				*pb = a * s + b * c;
			}
		}
	}
}

void ntx_op_head_rmsnorm(float *x, const float *w, int n_rows, int head_dim, float eps)
{
	ntx_op_rmsnorm(x, x, w, n_rows, head_dim, eps); /* reads each element before writing it */
}

void ntx_op_swiglu(float *out, const float *g, const float *u, int64_t n)
{
	int64_t i;

	for (i = 0; i < n; i++) {
		float a = g[i];

		out[i] = a / (1.0f + expf(-a)) * u[i];
	}
}

void ntx_op_add_rows(float *x, const float *b, int n, int64_t dim)
{
	for (int r = 0; r < n; r++)
		ntx_op_add(x + (int64_t)r * dim, b, dim);
}

void ntx_op_add(float *x, const float *y, int64_t n)
{
	int64_t i;

	for (i = 0; i < n; i++)
		x[i] += y[i];
}

/* ---- attention ---- */

static inline int64_t kv_off(const struct ntx_kv_layer *kv, int seq, int pos)
{
	return ((int64_t)seq * kv->n_ctx + pos) * kv->n_head_kv * kv->head_dim;
}

void ntx_op_kv_store(struct ntx_kv_layer *kv, const float *k, const float *v, int n_tok,
		     const int32_t *seq, const int32_t *pos)
{
	int row = kv->n_head_kv * kv->head_dim, t, i;

	for (t = 0; t < n_tok; t++) {
		int64_t o = kv_off(kv, seq[t], pos[t]);
		const float *kr = k + (int64_t)t * row, *vr = v + (int64_t)t * row;

		if (kv->f16) {
			uint16_t *kd = (uint16_t *)kv->k + o, *vd = (uint16_t *)kv->v + o;

			for (i = 0; i < row; i++) {
				kd[i] = ntx_fp32_to_fp16(kr[i]);
				vd[i] = ntx_fp32_to_fp16(vr[i]);
			}
		} else {
			memcpy((float *)kv->k + o, kr, (size_t)row * sizeof(float));
			memcpy((float *)kv->v + o, vr, (size_t)row * sizeof(float));
		}
	}
}

size_t ntx_op_attention_scratch(int n_threads, int n_ctx)
{
	return (size_t)n_threads * ((size_t)n_ctx + 1024);
}

struct att_ctx {
	float *out;
	const float *q;
	int n_tok, n_head;
	const struct ntx_kv_layer *kv;
	const int32_t *seq, *pos;
	float *scratch;
	void (*attn)(const float *q, int ng, int hd, const void *k, const void *v, int f16, int64_t row,
		     int n_pos, float scale, float *out); /* the ISA's, or NULL: scalar */
};

/* The SIMD path (cpu_impl.h): jobs of hj heads of one KV group, hj as large
 * as the group allows while there are at least two jobs per thread. */
static void att_worker_simd(const struct att_ctx *c, int ith, int nth)
{
	const struct ntx_kv_layer *kv = c->kv;
	const int hd = kv->head_dim, G = c->n_head / kv->n_head_kv, row = kv->n_head_kv * hd;
	const float scale = 1.0f / sqrtf((float)hd);
	int hj = G < NTX_ATTN_G ? G : NTX_ATTN_G;
	int64_t job, n_jobs;

	while (hj > 1 && (G % hj || (int64_t)c->n_tok * c->n_head / hj < 2 * (int64_t)nth))
		hj--;
	n_jobs = (int64_t)c->n_tok * (c->n_head / hj);
	for (job = ith; job < n_jobs; job += nth) {
		const int t = (int)(job / (c->n_head / hj)), h0 = (int)(job % (c->n_head / hj)) * hj;
		const int64_t base = kv_off(kv, c->seq[t], 0) + (int64_t)(h0 / G) * hd;
		const int64_t qo = ((int64_t)t * c->n_head + h0) * hd;
		const size_t es = kv->f16 ? 2 : 4;

		c->attn(c->q + qo, hj, hd, (const char *)kv->k + (size_t)base * es,
			(const char *)kv->v + (size_t)base * es, kv->f16, row, c->pos[t] + 1, scale,
			c->out + qo);
	}
}

static void att_worker(void *p, int ith, int nth)
{
	const struct att_ctx *c = p;
	const struct ntx_kv_layer *kv = c->kv;
	int hd = kv->head_dim, group = c->n_head / kv->n_head_kv;
	int row = kv->n_head_kv * hd;
	float *sc = c->scratch + (size_t)ith * ((size_t)kv->n_ctx + 1024);
	float *acc = sc + kv->n_ctx;
	float scale = 1.0f / sqrtf((float)hd);
	int64_t job, n_jobs = (int64_t)c->n_tok * c->n_head;

	if (c->attn) {
		att_worker_simd(c, ith, nth);
		return;
	}
	for (job = ith; job < n_jobs; job += nth) {
		int t = (int)(job / c->n_head), h = (int)(job % c->n_head);
		int kvh = h / group, n_pos = c->pos[t] + 1, j, i;
		const float *q = c->q + ((int64_t)t * c->n_head + h) * hd;
		int64_t base = kv_off(kv, c->seq[t], 0) + (int64_t)kvh * hd;
		float mx = -INFINITY, sum = 0;

		for (j = 0; j < n_pos; j++) {
			float s = 0;

			if (kv->f16) {
				const uint16_t *kr = (const uint16_t *)kv->k + base + (int64_t)j * row;

				for (i = 0; i < hd; i++)
					s += q[i] * ntx_fp16_to_fp32(kr[i]);
			} else {
				const float *kr = (const float *)kv->k + base + (int64_t)j * row;

				for (i = 0; i < hd; i++)
					s += q[i] * kr[i];
			}
			s *= scale;
			sc[j] = s;
			if (s > mx)
				mx = s;
		}
		for (j = 0; j < n_pos; j++) {
			sc[j] = expf(sc[j] - mx);
			sum += sc[j];
		}
		for (i = 0; i < hd; i++)
			acc[i] = 0;
		for (j = 0; j < n_pos; j++) {
			float w = sc[j] / sum;

			if (kv->f16) {
				const uint16_t *vr = (const uint16_t *)kv->v + base + (int64_t)j * row;

				for (i = 0; i < hd; i++)
					acc[i] += w * ntx_fp16_to_fp32(vr[i]);
			} else {
				const float *vr = (const float *)kv->v + base + (int64_t)j * row;

				for (i = 0; i < hd; i++)
					acc[i] += w * vr[i];
			}
		}
		memcpy(c->out + ((int64_t)t * c->n_head + h) * hd, acc, (size_t)hd * sizeof(float));
	}
}

void ntx_op_attention(struct ntx_pool *pool, float *out, const float *q, int n_tok,
		      int n_head, const struct ntx_kv_layer *kv, const int32_t *seq,
		      const int32_t *pos, float *scratch)
{
	struct att_ctx c = { out, q, n_tok, n_head, kv, seq, pos, scratch, ntx_cpu_isa()->attn };

	if (kv->head_dim % 8 || kv->head_dim > NTX_ATTN_HD || n_head % kv->n_head_kv)
		c.attn = NULL;
	ntx_pool_run(pool, att_worker, &c);
}
