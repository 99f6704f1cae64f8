/* gen_fill.c - random, well-scaled tensor data for synthetic models, made
 * fast: xoshiro256++ per segment of ~64 KiB (seeded from the run's seed,
 * the tensor and the segment number, so the output depends on the seed only,
 * never on the thread count or the chunking), segments spread over threads.
 *
 * Nothing is reused: every byte comes from the generator, so compressors see
 * data about as incompressible as real weights. Float weights are
 * approximately N(0, 0.02) (Irwin-Hall sum of four uniforms), so F16/BF16
 * tensors have the skewed exponent bytes of real weights; norms are about
 * N(1, 0.05), expert routers (ffn_gate_inp, F32) N(0, 0.15) as in the MoE
 * fixtures. A 3-D expert tensor is its experts' matrices one after the
 * other, each filled like a 2-D matrix. Quantized blocks hold finite, plausible fp16 scales and random
 * quants (Q8_0 quants gaussian-shaped like real ones). */
#include "gen.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "types.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

#define SIGMA 0.02f
#define ROUTER_SIGMA 0.15f /* routers: wide enough that routing varies by token */
#define SEG_BYTES 65536

/* ---- PRNG ---- */

struct rng {
	uint64_t s[4];
};

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = rotl(s[0] + s[3], 23) + s[0], t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed, uint64_t tensor, uint64_t segment)
{
	uint64_t x = seed ^ (tensor * 0xd1342543de82ef95ull) ^ (segment * 0x9e3779b97f4a7c15ull);
	int i;

	x = splitmix(&x) ^ segment;
	for (i = 0; i < 4; i++)
		r->s[i] = splitmix(&x);
}

/* A unit-variance, zero-mean sample (sum of four 16-bit uniforms). */
static inline float gauss16(uint64_t r)
{
	int32_t s = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) +
		    (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48);

	return (float)(s - 131070) * (1.0f / 37837.23f);
}

/* Two unit-variance samples from one draw (sums of four bytes). */
static inline void gauss8x2(uint64_t r, float *a, float *b)
{
	uint64_t p = (r & 0x00ff00ff00ff00ffull) + ((r >> 8) & 0x00ff00ff00ff00ffull);
	int32_t s0 = (int32_t)((p & 0xffff) + ((p >> 16) & 0xffff));
	int32_t s1 = (int32_t)(((p >> 32) & 0xffff) + (p >> 48));

	*a = (float)(s0 - 510) * (1.0f / 147.8f);
	*b = (float)(s1 - 510) * (1.0f / 147.8f);
}

/* A factor in [0.75, 1.25) to vary scales between blocks. */
static inline float jitter(struct rng *r)
{
	return 0.75f + (float)(next(r) >> 40) * (0.5f / 16777216.0f);
}

static inline void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static inline void rand_bytes(struct rng *r, unsigned char *p, size_t n)
{
	while (n >= 8) {
		uint64_t v = next(r);

		memcpy(p, &v, 8);
		p += 8;
		n -= 8;
	}
	if (n) {
		uint64_t v = next(r);

		memcpy(p, &v, n);
	}
}

/* fp16 scale from a float, never zero, never infinite. */
static inline uint16_t scale16(float v)
{
	uint16_t h = ntx_fp32_to_fp16(v);

	return (h & 0x7fff) ? h : (uint16_t)(h | 1);
}

/* ---- floats ---- */

#ifdef HAVE_X86
__attribute__((target("avx,f16c"))) static void cvt8_f16c(const float *in, uint16_t *out)
{
	__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);

	_mm_storeu_si128((__m128i *)(void *)out, h);
}
#endif

static int have_f16c(void)
{
#ifdef HAVE_X86
	static int v = -1;

	if (v < 0) {
		__builtin_cpu_init();
		v = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
	}
	return v;
#else
	return 0;
#endif
}

static void gen_floats(struct rng *r, uint32_t type, float mean, float sd, unsigned char *out,
		       uint64_t n)
{
	float f[8];
	uint16_t h[8];
	uint64_t i;
	int k, fast = type == NTX_TYPE_F16 && have_f16c();

	for (i = 0; i < n; i += 8) {
		int m = n - i < 8 ? (int)(n - i) : 8;

		for (k = 0; k < m; k++)
			f[k] = mean + sd * gauss16(next(r));
		switch (type) {
		case NTX_TYPE_F32:
			memcpy(out + 4 * i, f, 4 * (size_t)m);
			break;
		case NTX_TYPE_F16:
#ifdef HAVE_X86
			if (fast && m == 8) {
				cvt8_f16c(f, h);
			} else
#endif
			{
				for (k = 0; k < m; k++)
					h[k] = ntx_fp32_to_fp16(f[k]);
			}
			memcpy(out + 2 * i, h, 2 * (size_t)m);
			break;
		default: /* BF16 */
			for (k = 0; k < m; k++)
				h[k] = ntx_fp32_to_bf16(f[k]);
			memcpy(out + 2 * i, h, 2 * (size_t)m);
			break;
		}
	}
	(void)fast;
}

/* ---- quantized blocks ---- */

/* n blocks of a quantized type. Scales are what llama.cpp's quantizers give
 * for N(0, SIGMA) weights, varied by +-25%. */
static void gen_blocks(struct rng *r, uint32_t type, unsigned char *p, uint64_t n)
{
	uint64_t b;
	int k;

	for (b = 0; b < n; b++) {
		switch (type) {
		case NTX_TYPE_Q8_0: /* d, qs[32]: gaussian quants, absmax ~ 127 */
			put16(p, scale16(SIGMA / 55.0f * jitter(r)));
			for (k = 0; k < 32; k += 2) {
				float a, c;
				long qa, qc;

				gauss8x2(next(r), &a, &c);
				qa = lrintf(a * 55.0f);
				qc = lrintf(c * 55.0f);
				p[2 + k] = (unsigned char)(int8_t)(qa > 127 ? 127 : qa < -127 ? -127 : qa);
				p[3 + k] = (unsigned char)(int8_t)(qc > 127 ? 127 : qc < -127 ? -127 : qc);
			}
			p += 34;
			break;
		case NTX_TYPE_Q4_0: /* d (either sign), qs[16] */
			put16(p, scale16((next(r) & 1 ? -1.0f : 1.0f) * SIGMA * 2.1f / 8.0f * jitter(r)));
			rand_bytes(r, p + 2, 16);
			p += 18;
			break;
		case NTX_TYPE_Q5_0: /* d, qh[4], qs[16] */
			put16(p, scale16((next(r) & 1 ? -1.0f : 1.0f) * SIGMA * 2.1f / 16.0f * jitter(r)));
			rand_bytes(r, p + 2, 20);
			p += 22;
			break;
		case NTX_TYPE_Q5_1: /* d, m, qh[4], qs[16] */
			put16(p, scale16(SIGMA * 4.2f / 31.0f * jitter(r)));
			put16(p + 2, scale16(-SIGMA * 2.1f * jitter(r)));
			rand_bytes(r, p + 4, 20);
			p += 24;
			break;
		case NTX_TYPE_Q4_K: /* d, dmin, scales[12], qs[128] */
			put16(p, scale16(SIGMA * 4.2f / 15.0f / 63.0f * jitter(r)));
			put16(p + 2, scale16(SIGMA * 2.1f / 63.0f * jitter(r)));
			rand_bytes(r, p + 4, 140);
			p += 144;
			break;
		case NTX_TYPE_Q5_K: /* d, dmin, scales[12], qh[32], qs[128] */
			put16(p, scale16(SIGMA * 4.2f / 31.0f / 63.0f * jitter(r)));
			put16(p + 2, scale16(SIGMA * 2.1f / 63.0f * jitter(r)));
			rand_bytes(r, p + 4, 172);
			p += 176;
			break;
		case NTX_TYPE_Q6_K: /* ql[128], qh[64], scales[16] (int8), d */
			rand_bytes(r, p, 208);
			put16(p + 208, scale16(SIGMA * 2.1f / 32.0f / 127.0f * jitter(r)));
			p += 210;
			break;
		default:
			return;
		}
	}
}

int gen_type_supported(uint32_t type)
{
	switch (type) {
	case NTX_TYPE_F32:
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16:
	case NTX_TYPE_Q8_0:
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q5_0:
	case NTX_TYPE_Q5_1:
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
	case NTX_TYPE_Q6_K:
		return 1;
	default:
		return 0;
	}
}

/* ---- RoPE factors ---- */

void gen_rope_freqs(double base, int n_rot, float *out)
{
	const float factor = 8.0f, low = 1.0f, high = 4.0f, old_ctx = 8192.0f;
	const float low_wl = old_ctx / low, high_wl = old_ctx / high;
	const float pi2 = (float)(2.0 * 3.14159265358979323846);
	int i;

	for (i = 0; i < n_rot / 2; i++) {
		float freq = 1.0f / powf((float)base, (float)(2 * i) / (float)n_rot);
		float wl = pi2 / freq;

		if (wl < high_wl) {
			out[i] = 1.0f;
		} else if (wl > low_wl) {
			out[i] = factor;
		} else {
			float smooth = (old_ctx / wl - low) / (high - low);

			out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
		}
	}
}

/* ---- parallel fill ---- */

struct job {
	const struct gen_fill *f;
	const struct gen_tensor *t;
	uint64_t b0, b1;    /* block range of this job */
	uint64_t buf_b0;    /* block at buf[0] */
	unsigned char *buf;
};

static void gen_run(struct rng *r, const struct gen_tensor *t, unsigned char *out, uint64_t n)
{
	if (t->type == NTX_TYPE_F32 || t->type == NTX_TYPE_F16 || t->type == NTX_TYPE_BF16)
		gen_floats(r, t->type, t->dist == DIST_NORM ? 1.0f : 0.0f,
			   t->dist == DIST_NORM ? 0.05f : t->dist == DIST_ROUTER ? ROUTER_SIGMA : SIGMA,
			   out, n);
	else
		gen_blocks(r, t->type, out, n);
}

static void *run_job(void *arg)
{
	struct job *j = arg;
	const struct gen_tensor *t = j->t;
	uint64_t bsz = (uint64_t)ntx_type_get(t->type)->type_size;
	uint64_t seg = SEG_BYTES / bsz ? SEG_BYTES / bsz : 1;
	uint64_t b = j->b0;
	unsigned char scratch[SEG_BYTES + 512];

	while (b < j->b1) {
		uint64_t s = b / seg, sb = s * seg, se = sb + seg;
		struct rng r;

		if (se > j->b1)
			se = j->b1;
		rng_seed(&r, j->f->seed, t->index, s);
		if (sb < b) /* chunk starts inside this segment: skip its head */
			gen_run(&r, t, scratch, b - sb);
		gen_run(&r, t, j->buf + (b - j->buf_b0) * bsz, se - b);
		b = se;
	}
	return NULL;
}

int gen_fill_cb(void *ctx, uint64_t index, uint64_t offset, void *buf, size_t len,
		struct ntx_err *err)
{
	const struct gen_fill *f = ctx;
	const struct gen_tensor *t = NULL;
	uint64_t i, bsz, b0, b1, seg, nseg, per;
	struct job jobs[256];
	pthread_t th[256];
	int n, k, started[256];

	for (i = 0; i < f->n_t; i++) {
		if (f->t[i].index == index) {
			t = &f->t[i];
			break;
		}
	}
	if (!t)
		return ntx_err_set(err, NTX_EINVAL, "internal: no data for tensor %llu",
				   (unsigned long long)index);
	if (t->dist == DIST_ROPE) {
		uint64_t e0 = offset / 4, n_e = len / 4;

		for (i = 0; i < n_e; i++) {
			float v = e0 + i < (uint64_t)f->n_rope ? f->rope[e0 + i] : 1.0f;

			memcpy((unsigned char *)buf + 4 * i, &v, 4);
		}
		return 0;
	}
	bsz = (uint64_t)ntx_type_get(t->type)->type_size;
	b0 = offset / bsz;
	b1 = b0 + len / bsz;
	seg = SEG_BYTES / bsz ? SEG_BYTES / bsz : 1;
	nseg = (b1 - 1) / seg - b0 / seg + 1;
	n = f->threads < 1 ? 1 : f->threads > 256 ? 256 : f->threads;
	if ((uint64_t)n > nseg)
		n = (int)nseg;
	per = (nseg + (uint64_t)n - 1) / (uint64_t)n; /* segments per job */
	for (k = 0; k < n; k++) {
		uint64_t s0 = b0 / seg + (uint64_t)k * per;

		jobs[k].f = f;
		jobs[k].t = t;
		jobs[k].buf = buf;
		jobs[k].buf_b0 = b0;
		jobs[k].b0 = k == 0 ? b0 : s0 * seg;
		jobs[k].b1 = (s0 + per) * seg < b1 ? (s0 + per) * seg : b1;
		if (jobs[k].b0 > b1)
			jobs[k].b0 = b1;
		started[k] = 0;
	}
	for (k = 1; k < n; k++)
		started[k] = pthread_create(&th[k], NULL, run_job, &jobs[k]) == 0;
	run_job(&jobs[0]);
	for (k = 1; k < n; k++) {
		if (started[k])
			pthread_join(th[k], NULL);
		else
			run_job(&jobs[k]); /* could not start a thread: do it here */
	}
	return 0;
}

void gen_fill_free(struct gen_fill *f)
{
	if (!f)
		return;
	free(f->t);
	free(f->rope);
	free(f);
}
