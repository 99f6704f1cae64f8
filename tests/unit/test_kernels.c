/* test_kernels.c - CPU weight kernels: layouts, reference accuracy, fast
 * paths against the reference (every ISA the CPU has), matmul, edge shapes,
 * the thread pool, and real tensors from the shared fixtures. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_impl.h"
#include "gguf.h"
#include "ntx_cpu.h"
#include "refio.h"
#include "t.h"
#include "tunables.h"

/* ---- tolerances (normalized mean squared error, sum (a-b)^2 / sum b^2) ----
 *
 * Reference dot vs the float64 dot of dequantized weights and unquantized x:
 * the only error is the activation quantization. Rounding x to a step of
 * amax/127 adds uniform noise of variance step^2/12 per element; for Gaussian
 * x, amax is about 2.2 sigma over 32 values (Q8_0) and 3 sigma over 256
 * (Q8_K), so the relative noise power is (2.2/127)^2/12 = 2.5e-5 and
 * (3/127)^2/12 = 4.6e-5, and a dot with random weights inherits it. The
 * bounds leave 4x margin; a layout bug gives NMSE near 1. Float weights with
 * F32 activations have no quantization: only the final rounding to float. */
#define NMSE_REF_Q8_0 1e-4
#define NMSE_REF_Q8_K 2e-4
#define NMSE_REF_FLOAT 1e-12
/* Fast vs reference. Integer paths compute the same integers; only the
 * float accumulation order differs (about 1e-7 relative): 1e-10 is generous.
 * Float paths accumulate n products in float lanes instead of double: the
 * relative error grows like sqrt(n) * 2^-24, i.e. 1e-5 at n = 8192 in the
 * worst case, NMSE 1e-10; typical is far smaller. */
#define NMSE_FAST_INT 1e-10
#define NMSE_FAST_FLOAT 1e-9

static const uint32_t all_types[] = { NTX_TYPE_F32, NTX_TYPE_F16, NTX_TYPE_BF16, NTX_TYPE_Q4_0, NTX_TYPE_Q5_0,
				      NTX_TYPE_Q8_0, NTX_TYPE_Q4_K, NTX_TYPE_Q5_K, NTX_TYPE_Q6_K };
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

/* ---- helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_u64(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double rng_unif(void) /* [0, 1) */
{
	return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}

static float rng_gauss(void)
{
	double u = rng_unif() + 1e-300, v = rng_unif();

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static int is_float_type(uint32_t t)
{
	return t == NTX_TYPE_F32 || t == NTX_TYPE_F16 || t == NTX_TYPE_BF16;
}

static size_t row_bytes(uint32_t t, int64_t n)
{
	uint64_t b = 0;

	ntx_type_row_bytes(t, n, &b, NULL);
	return (size_t)b;
}

static int64_t block_of(uint32_t t)
{
	return ntx_type_get(t)->block_size;
}

/* Fill a row of n elements of type t with random, well-formed data: fp16
 * scales finite and of a realistic size, every other byte random. */
static void random_row(uint32_t t, void *dst, int64_t n)
{
	unsigned char *p = dst;
	size_t nb = row_bytes(t, n), bs, i;

	if (is_float_type(t)) {
		for (int64_t k = 0; k < n; k++) {
			float v = rng_gauss();

			if (t == NTX_TYPE_F32)
				memcpy(p + 4 * k, &v, 4);
			else {
				uint16_t h = t == NTX_TYPE_F16 ? ntx_fp32_to_fp16(v) : ntx_fp32_to_bf16(v);

				memcpy(p + 2 * k, &h, 2);
			}
		}
		return;
	}
	for (i = 0; i < nb; i++)
		p[i] = (unsigned char)rng_u64();
	bs = (size_t)ntx_type_get(t)->type_size;
	for (i = 0; i < nb; i += bs) {
		uint16_t d = ntx_fp32_to_fp16((float)(0.001 + 0.02 * rng_unif()));
		uint16_t m = ntx_fp32_to_fp16((float)(0.001 + 0.02 * rng_unif()));

		switch (t) {
		case NTX_TYPE_Q4_0:
		case NTX_TYPE_Q5_0:
		case NTX_TYPE_Q8_0:
			memcpy(p + i, &d, 2);
			break;
		case NTX_TYPE_Q4_K:
		case NTX_TYPE_Q5_K:
			memcpy(p + i, &d, 2);
			memcpy(p + i + 2, &m, 2);
			break;
		case NTX_TYPE_Q6_K:
			memcpy(p + i + offsetof(struct ntx_block_q6_k, d), &d, 2);
			break;
		}
	}
}

static double nmse(const float *a, const double *ref, int64_t n)
{
	double num = 0, den = 0;

	for (int64_t i = 0; i < n; i++) {
		num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
		den += ref[i] * ref[i];
	}
	return den > 0 ? num / den : num;
}

/* The larger error; NaN wins (a NaN result must fail the test). */
static double worse(double a, double b)
{
	return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* ---- 1. layouts: hand-built blocks ---- */

/* Pack 8 6-bit scales and mins the way the Q4_K / Q5_K format defines. */
static void pack_k_scales(uint8_t s[12], const uint8_t sc[8], const uint8_t m[8])
{
	for (int j = 0; j < 4; j++) {
		s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
		s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
		s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
	}
}

static void test_layouts(void)
{
	float y[NTX_QK_K];
	int bad, e;

	{ /* Q4_0: low nibble = element j, high nibble = element j + 16 */
		struct ntx_block_q4_0 b = { ntx_fp32_to_fp16(0.5f), { 0 } };

		for (int j = 0; j < 16; j++)
			b.qs[j] = (uint8_t)(j | (15 - j) << 4);
		b.qs[0] = 0x1F; /* element 0 = 15, element 16 = 1 */
		ntx_dequant_row_ref(NTX_TYPE_Q4_0, &b, y, 32);
		bad = y[0] != 3.5f || y[16] != -3.5f;
		for (int j = 1; j < 16; j++)
			bad |= y[j] != 0.5f * (j - 8) || y[j + 16] != 0.5f * (7 - j);
		t_ok(!bad, "Q4_0 layout: qs[j] low nibble is element j, high is j + 16 (y[0]=%g y[16]=%g)",
		     y[0], y[16]);
	}
	{ /* Q5_0, literal bytes: qh is a little-endian uint32, bit j = fifth bit of element j */
		struct ntx_block_q5_0 b;
		static const uint8_t qs[16] = { 0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,
						0x0F, 0x1E, 0x2D, 0x3C, 0x4B, 0x5A, 0x69, 0x78 };
		/* bits set: 0, 1, 9, 15, 16, 24, 31 */
		static const uint8_t qh[4] = { 0x03, 0x82, 0x01, 0x81 };
		/* by hand: q = nibble | bit << 4; element j < 16 low nibble of qs[j],
		 * j >= 16 high nibble of qs[j - 16]; y = 0.5 * (q - 16) */
		static const float want[32] = {
			0.0f, 1.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f,   /* q 16 18 4 6 8 10 12 14 */
			-0.5f, 7.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, 4.0f,   /* q 15 30 13 12 11 10 9 24 */
			0.5f, -6.5f, -5.5f, -4.5f, -3.5f, -2.5f, -1.5f, -0.5f,  /* q 17 3 5 7 9 11 13 15 */
			0.0f, -7.5f, -7.0f, -6.5f, -6.0f, -5.5f, -5.0f, 3.5f,   /* q 16 1 2 3 4 5 6 23 */
		};

		b.d = ntx_fp32_to_fp16(0.5f);
		memcpy(b.qs, qs, 16);
		memcpy(b.qh, qh, 4);
		ntx_dequant_row_ref(NTX_TYPE_Q5_0, &b, y, 32);
		bad = 0;
		for (int j = 0; j < 32; j++)
			bad |= y[j] != want[j];
		t_ok(!bad && offsetof(struct ntx_block_q5_0, qh) == 2 && offsetof(struct ntx_block_q5_0, qs) == 6,
		     "Q5_0 layout from literal bytes: d, qh[4] (bit j of the LE uint32), qs[16] (y[9]=%g y[31]=%g)",
		     y[9], y[31]);
	}
	{ /* Q8_0 */
		struct ntx_block_q8_0 b = { ntx_fp32_to_fp16(0.25f), { 0 } };

		for (int j = 0; j < 32; j++)
			b.qs[j] = (int8_t)(j - 16);
		ntx_dequant_row_ref(NTX_TYPE_Q8_0, &b, y, 32);
		bad = 0;
		for (int j = 0; j < 32; j++)
			bad |= y[j] != 0.25f * (j - 16);
		t_ok(!bad, "Q8_0 layout");
	}
	{ /* Q4_K scale unpacking, literal bytes: high bits of sc/m 4..7 live in bits 6-7 of bytes 0..7 */
		struct ntx_block_q4_k b;
		static const uint8_t s[12] = { 0xC1, 0x02, 0x43, 0x84, 0x05, 0x46, 0x87, 0xC8,
					       0x21, 0x43, 0x65, 0x87 };
		static const int sc[8] = { 1, 2, 3, 4, 49, 3, 21, 39 };
		static const int m[8] = { 5, 6, 7, 8, 2, 20, 38, 56 };

		memset(&b, 0x11, sizeof b); /* every q = 1 */
		b.d = ntx_fp32_to_fp16(1.0f);
		b.dmin = ntx_fp32_to_fp16(1.0f);
		memcpy(b.scales, s, 12);
		ntx_dequant_row_ref(NTX_TYPE_Q4_K, &b, y, NTX_QK_K);
		bad = 0;
		for (e = 0; e < NTX_QK_K; e++)
			bad |= y[e] != (float)(sc[e / 32] - m[e / 32]);
		t_ok(!bad, "Q4_K scale unpacking from literal bytes (y[128]=%g want %d)", y[128], 49 - 2);
	}
	{ /* Q4_K / Q5_K element layout with a packed pattern */
		struct ntx_block_q5_k b5;
		struct ntx_block_q4_k b4;
		uint8_t sc[8], m[8];
		int bad5 = 0;

		for (int j = 0; j < 8; j++)
			sc[j] = (uint8_t)(9 + 7 * j), m[j] = (uint8_t)(63 - 5 * j);
		memset(&b4, 0, sizeof b4);
		memset(&b5, 0, sizeof b5);
		b4.d = b5.d = ntx_fp32_to_fp16(1.0f);
		b4.dmin = b5.dmin = ntx_fp32_to_fp16(0.5f);
		pack_k_scales(b4.scales, sc, m);
		pack_k_scales(b5.scales, sc, m);
		for (e = 0; e < NTX_QK_K; e++) {
			int q4 = (e * 7 + 3) % 16, q5 = (e * 11 + 5) % 32, g = e / 64, l = e % 32;
			int hi = (e % 64) >= 32;

			b4.qs[32 * g + l] |= (uint8_t)(q4 << (4 * hi));
			b5.qs[32 * g + l] |= (uint8_t)((q5 & 15) << (4 * hi));
			b5.qh[l] |= (uint8_t)((q5 >> 4) << (2 * g + hi));
		}
		ntx_dequant_row_ref(NTX_TYPE_Q4_K, &b4, y, NTX_QK_K);
		bad = 0;
		for (e = 0; e < NTX_QK_K; e++)
			bad |= y[e] != (float)(sc[e / 32] * ((e * 7 + 3) % 16)) - 0.5f * m[e / 32];
		t_ok(!bad, "Q4_K layout: qs[32g + l] = element 64g + l | element 64g + 32 + l << 4");
		ntx_dequant_row_ref(NTX_TYPE_Q5_K, &b5, y, NTX_QK_K);
		for (e = 0; e < NTX_QK_K; e++)
			bad5 |= y[e] != (float)(sc[e / 32] * ((e * 11 + 5) % 32)) - 0.5f * m[e / 32];
		t_ok(!bad5, "Q5_K layout: fifth bit of element 64g + l (+32) is bit 2g (+1) of qh[l]");
	}
	{ /* Q6_K: ql / qh packing as the format's quantizer writes it */
		struct ntx_block_q6_k b;
		int q[NTX_QK_K];

		memset(&b, 0, sizeof b);
		b.d = ntx_fp32_to_fp16(1.0f);
		for (int k = 0; k < 16; k++)
			b.scales[k] = (int8_t)(9 * k - 70);
		for (e = 0; e < NTX_QK_K; e++)
			q[e] = (e * 13 + 7) % 64;
		for (int h = 0; h < 2; h++) {
			for (int l = 0; l < 32; l++) {
				const int *Q = q + 128 * h;

				b.ql[64 * h + l] = (uint8_t)((Q[l] & 15) | (Q[l + 64] & 15) << 4);
				b.ql[64 * h + l + 32] = (uint8_t)((Q[l + 32] & 15) | (Q[l + 96] & 15) << 4);
				b.qh[32 * h + l] = (uint8_t)((Q[l] >> 4) | (Q[l + 32] >> 4) << 2 |
							     (Q[l + 64] >> 4) << 4 | (Q[l + 96] >> 4) << 6);
			}
		}
		ntx_dequant_row_ref(NTX_TYPE_Q6_K, &b, y, NTX_QK_K);
		bad = 0;
		for (e = 0; e < NTX_QK_K; e++)
			bad |= y[e] != (float)(b.scales[e / 16] * (q[e] - 32));
		t_ok(!bad, "Q6_K layout: ql/qh quarters, int8 scale per 16 (y[200]=%g)", y[200]);
	}
	{ /* F16 / BF16 literals */
		uint16_t h[3] = { 0x3C00, 0xC000, 0x3555 }, bf[2] = { 0x3F80, 0xC0A0 };

		ntx_dequant_row_ref(NTX_TYPE_F16, h, y, 3);
		t_ok(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0.333251953125f, "F16 dequant literals");
		ntx_dequant_row_ref(NTX_TYPE_BF16, bf, y, 2);
		t_ok(y[0] == 1.0f && y[1] == -5.0f, "BF16 dequant literals");
	}
}

/* ---- 2. activation quantization rules ---- */

static void test_act_rules(void)
{
	float x[NTX_QK_K];
	struct ntx_block_q8_0 q0;
	struct ntx_block_q8_k qk;
	int bad = 0;

	for (int j = 0; j < 32; j++)
		x[j] = (float)(j - 16) * 0.125f; /* amax 2 (element 0) */
	ntx_quantize_act_ref(NTX_TYPE_Q8_0, x, &q0, 32);
	for (int j = 0; j < 32; j++)
		bad |= q0.qs[j] != (int8_t)lrintf((float)(j - 16) * 0.125f * 63.5f);
	t_ok(!bad && q0.d == ntx_fp32_to_fp16(2.0f / 127), "Q8_0: d = amax/127 (fp16), q = round(x*127/amax)");

	for (int j = 0; j < NTX_QK_K; j++)
		x[j] = 0.5f * (float)((j * 37) % 19 - 9) / 9.0f;
	x[10] = -2.0f, x[20] = 2.0f; /* tie: the first (negative) one decides the sign */
	ntx_quantize_act_ref(NTX_TYPE_Q8_K, x, &qk, NTX_QK_K);
	t_ok(qk.qs[10] == -127 && qk.qs[20] == 127 && qk.d == 1.0f / (-127.0f / -2.0f),
	     "Q8_K: first max-magnitude value maps to -127, d = 1/(-127/max) (d=%g)", qk.d);
	bad = 0;
	for (int k = 0; k < 16; k++) {
		int s = 0;

		for (int j = 0; j < 16; j++)
			s += qk.qs[16 * k + j];
		bad |= s != qk.bsums[k];
	}
	t_ok(!bad, "Q8_K bsums are sums of 16 quants");
	memset(x, 0, sizeof x);
	memset(&qk, 0x5A, sizeof qk);
	ntx_quantize_act_ref(NTX_TYPE_Q8_K, x, &qk, NTX_QK_K);
	t_ok(qk.d == 0.0f && qk.qs[7] == 0 && qk.bsums[3] == 0, "Q8_K of zeros is all zero");
}

/* ---- 3. reference accuracy ---- */

static void test_ref_accuracy(void)
{
	enum { N = 4096, ROWS = 48 };
	float *x = malloc(N * sizeof *x), *wf = malloc(N * sizeof *wf), got[ROWS];
	void *w = malloc(row_bytes(NTX_TYPE_F32, N)), *xq = malloc(ntx_act_bytes(NTX_TYPE_F32, N));
	double want[ROWS];

	for (int ti = 0; ti < N_TYPES; ti++) {
		uint32_t t = all_types[ti], at = ntx_act_type(t);
		double tol = at == NTX_TYPE_Q8_0 ? NMSE_REF_Q8_0 : at == NTX_TYPE_Q8_K ? NMSE_REF_Q8_K
									 : NMSE_REF_FLOAT;
		double e;

		for (int r = 0; r < ROWS; r++) {
			for (int i = 0; i < N; i++)
				x[i] = rng_gauss();
			random_row(t, w, N);
			ntx_dequant_row_ref(t, w, wf, N);
			ntx_quantize_act_ref(at, x, xq, N);
			want[r] = 0;
			for (int i = 0; i < N; i++)
				want[r] += (double)wf[i] * x[i];
			got[r] = ntx_vec_dot_ref(t, N, w, xq);
		}
		e = nmse(got, want, ROWS);
		t_ok(e <= tol, "%s ref dot vs float64 dot: NMSE %.3g <= %.0e", ntx_type_name(t), e, tol);
	}
	free(x), free(wf), free(w), free(xq);
}

/* ---- 4. fast paths vs reference, per ISA ---- */

static void test_fast_isa(const char *isa)
{
	enum { ROWS = 24 };
	static const int64_t sizes[] = { 256, 512, 4096, 8192 + 256 };

	for (int ti = 0; ti < N_TYPES; ti++) {
		uint32_t t = all_types[ti], at = ntx_act_type(t);
		double tol = is_float_type(t) ? NMSE_FAST_FLOAT : NMSE_FAST_INT, worst = 0;
		int deq_bad = 0, q_bad = 0;

		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
			int64_t n = sizes[si];
			size_t rb = row_bytes(t, n), ab = ntx_act_bytes(at, n);
			/* rows at +2 and activations at +4: aligned only to their fields */
			unsigned char *w = malloc(rb * ROWS + 2), *xq = malloc(ab + 4), *xq2 = malloc(ab);
			float *x = malloc((size_t)n * 4), *d1 = malloc((size_t)n * 4), *d2 = malloc((size_t)n * 4);
			float got[ROWS];
			double want[ROWS];

			for (int64_t i = 0; i < n; i++)
				x[i] = rng_gauss() * (i % 97 == 0 ? 8.0f : 1.0f);
			ntx_quantize_act_ref(at, x, xq + 4, n);
			ntx_quantize_act(at, x, xq2, n);
			q_bad |= memcmp(xq + 4, xq2, ab) != 0;
			for (int r = 0; r < ROWS; r++) {
				unsigned char *wr = w + 2 + rb * r;

				random_row(t, wr, n);
				ntx_dequant_row_ref(t, wr, d1, n);
				ntx_dequant_row(t, wr, d2, n);
				deq_bad |= memcmp(d1, d2, (size_t)n * 4) != 0;
				want[r] = ntx_vec_dot_ref(t, n, wr, xq + 4);
				got[r] = ntx_vec_dot(t, n, wr, xq + 4);
			}
			worst = worse(worst, nmse(got, want, ROWS));
			free(w), free(xq), free(xq2), free(x), free(d1), free(d2);
		}
		t_ok(!deq_bad, "%s %s dequant bit-exact vs ref", isa, ntx_type_name(t));
		t_ok(!q_bad, "%s %s activation quantization (%s) bit-exact vs ref", isa,
		     ntx_type_name(t), ntx_type_name(at));
		t_ok(worst <= tol, "%s %s vec_dot vs ref: NMSE %.3g <= %.0e", isa, ntx_type_name(t), worst, tol);
	}
}

/* Activation quantization corner cases: ties, zeros, tiny and huge values. */
static void test_quant_corners(const char *isa)
{
	float x[2 * NTX_QK_K];
	unsigned char a[2 * 292], b[2 * 292];
	int bad = 0;

	for (int c = 0; c < 6; c++) {
		for (int j = 0; j < 2 * NTX_QK_K; j++)
			x[j] = rng_gauss();
		if (c == 0) /* tie, negative first */
			x[3] = -9.0f, x[200] = 9.0f;
		if (c == 1) /* tie, positive first */
			x[3] = 9.0f, x[200] = -9.0f;
		if (c == 2) /* a zero block and a zero Q8_0 sub-block */
			memset(x, 0, NTX_QK_K * sizeof(float));
		if (c == 3)
			for (int j = 0; j < 2 * NTX_QK_K; j++)
				x[j] *= 1e-6f;
		if (c == 4)
			for (int j = 0; j < 2 * NTX_QK_K; j++)
				x[j] *= 3e4f;
		if (c == 5) /* values on .5 after scaling: ties to even */
			for (int j = 0; j < 2 * NTX_QK_K; j++)
				x[j] = (float)(j % 255 - 127) + 0.5f * (j & 1);
		for (int k = 0; k < 2; k++) {
			uint32_t at = k ? NTX_TYPE_Q8_K : NTX_TYPE_Q8_0;
			size_t nb = ntx_act_bytes(at, 2 * NTX_QK_K);

			ntx_quantize_act_ref(at, x, a, 2 * NTX_QK_K);
			ntx_quantize_act(at, x, b, 2 * NTX_QK_K);
			bad |= memcmp(a, b, nb) != 0;
		}
	}
	t_ok(!bad, "%s activation quantization corner cases (ties, zeros, tiny, huge) bit-exact", isa);
}

/* ---- 5. matmul ---- */

static int check_matmul(struct ntx_pool *pool, uint32_t t, int64_t n_in, int64_t n_out, int64_t n_tok,
			size_t pad, double *err)
{
	uint32_t at = ntx_act_type(t);
	size_t rb = row_bytes(t, n_in) + pad, ab = ntx_act_bytes(at, n_in);
	struct ntx_wmat w = { t, n_in, n_out, rb, NULL };
	unsigned char *wd = malloc(rb * (size_t)n_out + 2), *xq = malloc(ab);
	float *x = malloc((size_t)(n_in * n_tok) * 4), *y = malloc((size_t)(n_out * n_tok) * 4);
	double *want = malloc((size_t)(n_out * n_tok) * sizeof(double));
	size_t sb = ntx_matmul_scratch_bytes(&w, n_tok);
	void *scratch = sb ? malloc(sb) : NULL;

	for (int64_t r = 0; r < n_out; r++)
		random_row(t, wd + 2 + rb * r, n_in);
	w.data = wd + 2; /* not SIMD-aligned */
	for (int64_t i = 0; i < n_in * n_tok; i++)
		x[i] = rng_gauss();
	for (int64_t i = 0; i < n_out * n_tok; i++)
		y[i] = NAN;
	ntx_cpu_matmul(pool, &w, x, n_tok, y, scratch);
	for (int64_t k = 0; k < n_tok; k++) {
		ntx_quantize_act_ref(at, x + k * n_in, xq, n_in);
		for (int64_t r = 0; r < n_out; r++)
			want[k * n_out + r] = ntx_vec_dot_ref(t, n_in, wd + 2 + rb * r, xq);
	}
	*err = nmse(y, want, n_out * n_tok);
	free(wd), free(xq), free(x), free(y), free(want), free(scratch);
	return *err <= (is_float_type(t) ? NMSE_FAST_FLOAT : NMSE_FAST_INT);
}

static void test_matmul(const char *isa)
{
	static const int64_t toks[] = { 1, 3, 9, 17 };
	struct ntx_pool *pool = ntx_pool_new(2, NULL);

	for (int ti = 0; ti < N_TYPES; ti++) {
		uint32_t t = all_types[ti];
		int64_t n_in = 2 * block_of(t) > 512 ? 2 * block_of(t) : 512;
		double worst = 0, e;
		int ok = 1;

		for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
			ok &= check_matmul(pool, t, n_in, 77, toks[k], 0, &e);
			worst = worse(worst, e);
		}
		t_ok(ok, "%s %s matmul (2 threads, 77 x %lld, n_tok 1/3/9/17) vs ref dots: NMSE %.3g",
		     isa, ntx_type_name(t), (long long)n_in, worst);
	}
	ntx_pool_free(pool);
}

/* Batch invariance: each token's outputs in one matmul of 70 tokens (full
 * and partial groups, more tokens than one tile pass) are bitwise those of
 * the token alone (n_tok = 1) and in a matmul of 5: what makes batch mode
 * and speculative verification on the CPU equal to decoding alone. */
static long batch_diffs(struct ntx_pool *pool, uint32_t t, int64_t n_in, int64_t n_out)
{
	enum { NT = 70 };
	size_t rb = row_bytes(t, n_in);
	struct ntx_wmat w = { t, n_in, n_out, rb, NULL };
	unsigned char *wd = malloc(rb * (size_t)n_out);
	float *x = malloc((size_t)(n_in * NT) * 4), *y = malloc((size_t)(n_out * NT) * 4);
	float *y1 = malloc((size_t)(n_out * 5) * 4);
	void *scratch = malloc(ntx_matmul_scratch_bytes(&w, NT) + 1);
	long bad = 0;

	for (int64_t r = 0; r < n_out; r++)
		random_row(t, wd + rb * r, n_in);
	w.data = wd;
	for (int64_t i = 0; i < n_in * NT; i++)
		x[i] = rng_gauss();
	ntx_cpu_matmul(pool, &w, x, NT, y, scratch);
	for (int64_t k = 0; k < NT; k += 7) {
		ntx_cpu_matmul(pool, &w, x + k * n_in, 1, y1, scratch);
		bad += memcmp(y1, y + k * n_out, (size_t)n_out * 4) != 0;
	}
	ntx_cpu_matmul(pool, &w, x + 33 * n_in, 5, y1, scratch);
	bad += memcmp(y1, y + 33 * n_out, (size_t)(n_out * 5) * 4) != 0;
	free(wd), free(x), free(y), free(y1), free(scratch);
	return bad;
}

/* Every token count a tile pass can take (1 .. 16: groups of four, single
 * tokens, two passes), each token against itself alone: the n_tok of
 * speculative verification (K + 1 = 9) included. */
static long count_diffs(struct ntx_pool *pool, uint32_t t, int64_t n_in, int64_t n_out)
{
	enum { NT = 16 };
	size_t rb = row_bytes(t, n_in);
	struct ntx_wmat w = { t, n_in, n_out, rb, NULL };
	unsigned char *wd = malloc(rb * (size_t)n_out);
	float *x = malloc((size_t)(n_in * NT) * 4), *y = malloc((size_t)(n_out * NT) * 4);
	float *y1 = malloc((size_t)(n_out * NT) * 4);
	void *scratch = malloc(ntx_matmul_scratch_bytes(&w, NT) + 1);
	long bad = 0;

	for (int64_t r = 0; r < n_out; r++)
		random_row(t, wd + rb * r, n_in);
	w.data = wd;
	for (int64_t i = 0; i < n_in * NT; i++)
		x[i] = rng_gauss();
	for (int64_t k = 0; k < NT; k++)
		ntx_cpu_matmul(pool, &w, x + k * n_in, 1, y1 + k * n_out, scratch);
	for (int64_t nt = 2; nt <= NT; nt++) {
		ntx_cpu_matmul(pool, &w, x, nt, y, scratch);
		for (int64_t k = 0; k < nt; k++)
			bad += memcmp(y1 + k * n_out, y + k * n_out, (size_t)n_out * 4) != 0;
	}
	free(wd), free(x), free(y), free(y1), free(scratch);
	return bad;
}

static void test_batch_invariance(const char *isa)
{
	struct ntx_pool *pool = ntx_pool_new(2, NULL);

	for (int ti = 0; ti < N_TYPES; ti++) {
		uint32_t t = all_types[ti];
		int64_t n_in = 2 * block_of(t) > 512 ? 2 * block_of(t) : 512;
		/* and 13 blocks: kernels that step 4 or 8 blocks at a time
		 * finish with a partial step */
		int64_t n_odd = 13 * (block_of(t) == 1 ? 32 : block_of(t));
		long bad = batch_diffs(pool, t, n_in, 77) + batch_diffs(pool, t, n_odd, 21);

		t_ok(bad == 0,
		     "%s %s matmul batch invariance: tokens of a 70-token product == alone and in 5, n_in %lld and %lld (%ld differ)",
		     isa, ntx_type_name(t), (long long)n_in, (long long)n_odd, bad);
		bad = count_diffs(pool, t, n_in, 37) + count_diffs(pool, t, n_odd, 5);
		t_ok(bad == 0, "%s %s matmul batch invariance: every token of n_tok 2..16 == alone, n_in %lld and %lld (%ld differ)",
		     isa, ntx_type_name(t), (long long)n_in, (long long)n_odd, bad);
	}
	ntx_pool_free(pool);
}

/* ---- 6. edge shapes ---- */

static void test_edges(void)
{
	struct ntx_pool *p3 = ntx_pool_new(3, NULL);
	double e;

	for (int ti = 0; ti < N_TYPES; ti++) {
		uint32_t t = all_types[ti];
		int64_t b = block_of(t) == 1 ? 7 : block_of(t); /* 7 floats: SIMD tails */
		int ok = 1;

		ok &= check_matmul(NULL, t, b, 1, 1, 0, &e);   /* one block, one row, no pool */
		ok &= check_matmul(p3, t, b, 5, 2, 0, &e);     /* odd rows, 3 threads */
		ok &= check_matmul(p3, t, 3 * b, 33, 5, 0, &e);
		ok &= check_matmul(p3, t, 7 * b, 9, 6, 0, &e);  /* 7 blocks: partial groups of 4 and 8 */
		ok &= check_matmul(p3, t, 2 * b, 50, 4, 6, &e); /* padded row stride */
		if (block_of(t) == 1)
			ok &= check_matmul(p3, t, 1, 19, 6, 0, &e) && check_matmul(p3, t, 33, 17, 9, 2, &e);
		t_ok(ok, "%s edge shapes: one block, odd rows, n_out %% threads != 0, unaligned and padded rows",
		     ntx_type_name(t));
	}
	{
		float y = 1.0f;
		struct ntx_wmat w = { NTX_TYPE_Q4_0, 32, 0, 18, NULL };

		ntx_cpu_matmul(p3, &w, NULL, 1, &y, NULL);
		t_ok(y == 1.0f, "matmul with n_out = 0 writes nothing");
	}
	/* Q2_K has a scalar reference (test_quant_types) but no engine kernels
	 * yet; IQ2_XXS has neither */
	t_ok(!ntx_cpu_supports(NTX_TYPE_Q2_K) && !ntx_cpu_supports(NTX_TYPE_IQ2_XXS) &&
		     ntx_cpu_supports(NTX_TYPE_Q6_K) && isnan(ntx_vec_dot_ref(NTX_TYPE_IQ2_XXS, 256, NULL, NULL)),
	     "unsupported types are reported (and dot to NaN)");
	ntx_pool_free(p3);
}

/* ---- 7. thread pool ---- */

struct pool_ctx {
	_Atomic int hits[8];
	int nth_seen[8];
	long sum[8];
	pthread_t caller;
	_Atomic long on_worker; /* iths run by a thread other than the caller */
};

static void pool_fn(void *p, int ith, int nth)
{
	struct pool_ctx *c = p;

	atomic_fetch_add(&c->hits[ith], 1);
	c->nth_seen[ith] = nth;
	c->sum[ith] += ith + 1;
	if (!pthread_equal(pthread_self(), c->caller))
		atomic_fetch_add(&c->on_worker, 1);
}

/* ith 0 (the caller) holds on until another ith has started (or 2 s pass),
 * so the others can only run on workers: proves the workers take part. */
static void pool_hold_fn(void *p, int ith, int nth)
{
	struct pool_ctx *c = p;

	if (ith == 0) {
		struct timespec t0, t;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		do
			clock_gettime(CLOCK_MONOTONIC, &t);
		while (atomic_load(&c->hits[1]) == 0 && t.tv_sec - t0.tv_sec < 2);
		return;
	}
	pool_fn(p, ith, nth);
}

static void test_pool(void)
{
	struct ntx_err err;
	struct pool_ctx c;
	int ok = 1;

	t_ok(ntx_pool_new(0, &err) == NULL && err.msg[0], "pool of 0 threads rejected: %s", err.msg);
	for (int n = 1; n <= 4; n++) {
		struct ntx_pool *p = ntx_pool_new(n, &err);
		int runs = 20000;

		memset(&c, 0, sizeof c);
		c.caller = pthread_self();
		for (int i = 0; i < runs; i++) {
			ntx_pool_run(p, pool_fn, &c);
			if (i % 5000 == 4999) { /* let workers fall asleep, then wake them */
				struct timespec ts = { 0, 3000000 };

				nanosleep(&ts, NULL);
			}
		}
		for (int i = 0; i < n; i++)
			ok &= c.hits[i] == runs && c.nth_seen[i] == n && c.sum[i] == (long)runs * (i + 1);
		ok &= ntx_pool_threads(p) == n;
		t_ok(ok, "pool of %d: %d runs, every ith once per run, results visible", n, runs);
		if (n > 1) { /* workers must really take part, not only the caller */
			memset(&c, 0, sizeof c);
			c.caller = pthread_self();
			for (int i = 0; i < 10; i++) {
				atomic_store(&c.hits[1], 0);
				ntx_pool_run(p, pool_hold_fn, &c);
			}
			t_ok(c.on_worker >= 10, "pool of %d: workers ran %ld of %d iths while the caller was busy",
			     n, (long)c.on_worker, 10 * (n - 1));
		}
		ntx_pool_free(p);
	}
	memset(&c, 0, sizeof c);
	ntx_pool_run(NULL, pool_fn, &c);
	t_ok(c.hits[0] == 1 && c.nth_seen[0] == 1 && ntx_pool_threads(NULL) == 1, "NULL pool runs inline");
	ntx_pool_free(NULL);
}

/* ---- 8. real tensors from the fixtures ---- */

/* set-A files of the fixtures, under models/ (quants/: the types models/
 * does not cover, quantized from the same F32 file) */
static const char *fixture_names[] = { "models/ref-a-f16", "models/ref-a-q8_0", "models/ref-a-q4_0",
				       "models/ref-a-q4_k_m", "models/ref-a-q5_k_m", "models/ref-a-q6_k",
				       "quants/ref-a-q5_0" };
/* weight quantization noise of the fixture's random-normal weights
 * (expected NMSE: Q8_0 ~4e-5, Q6_K ~2e-4, Q5_K ~1e-3, Q5_0 ~1.7e-3,
 * Q4_K/Q4_0 ~5e-3) */
static double fixture_tol(uint32_t t)
{
	switch (t) {
	case NTX_TYPE_F16: return 1e-6;
	case NTX_TYPE_Q8_0: return 2e-4;
	case NTX_TYPE_Q6_K: return 1e-3;
	case NTX_TYPE_Q5_K: return 4e-3;
	case NTX_TYPE_Q5_0: return 5e-3;
	default: return 2e-2;
	}
}

static void test_fixtures(void)
{
	char path[1024];
	struct ntx_err err;
	struct ntx_gguf *g32;
	const char *tensors[] = { "blk.0.attn_q.weight", "blk.1.ffn_down.weight", "output.weight" };

	if (!t_need_fixtures("real tensors from the fixtures"))
		return;
	snprintf(path, sizeof path, "%s/models/ref-a-f32.gguf", t_fixtures());
	g32 = ntx_gguf_open(path, &err);
	if (!t_ok(g32 != NULL, "open %s", path))
		return;
	for (size_t f = 0; f < sizeof fixture_names / sizeof fixture_names[0]; f++) {
		struct ntx_gguf *g;

		snprintf(path, sizeof path, "%s/%s.gguf", t_fixtures(), fixture_names[f]);
		g = ntx_gguf_open(path, &err);
		if (!t_ok(g != NULL, "open %s", path))
			continue;
		for (size_t k = 0; k < sizeof tensors / sizeof tensors[0]; k++) {
			const struct ntx_gguf_tensor *tq = ntx_gguf_find_tensor(g, tensors[k]);
			const struct ntx_gguf_tensor *tf = ntx_gguf_find_tensor(g32, tensors[k]);
			int64_t n_in = tq ? tq->ne[0] : 0, n_out = tq ? tq->ne[1] : 0, n_tok = 3;
			float *a, *b, *y, *yf, *x;
			struct ntx_wmat wq, wf;
			void *s1, *s2;
			int same = 1;
			double e, ey;

			if (!t_ok(tq && tf && ntx_cpu_supports(tq->type), "%s %s present and supported",
				  fixture_names[f], tensors[k]))
				continue;
			a = malloc((size_t)n_in * 4), b = malloc((size_t)(n_in * n_out) * 4);
			for (int64_t r = 0; r < n_out; r++) {
				const char *row = (const char *)tq->data + r * (int64_t)row_bytes(tq->type, n_in);

				ntx_dequant_row_ref(tq->type, row, a, n_in);
				ntx_dequant_row(tq->type, row, b + r * n_in, n_in);
				same &= memcmp(a, b + r * n_in, (size_t)n_in * 4) == 0;
			}
			e = refio_nmse(b, tf->data, n_in * n_out);
			wq = (struct ntx_wmat){ tq->type, n_in, n_out, row_bytes(tq->type, n_in), tq->data };
			wf = (struct ntx_wmat){ NTX_TYPE_F32, n_in, n_out, (uint64_t)n_in * 4, tf->data };
			x = malloc((size_t)(n_in * n_tok) * 4);
			y = malloc((size_t)(n_out * n_tok) * 4), yf = malloc((size_t)(n_out * n_tok) * 4);
			for (int64_t i = 0; i < n_in * n_tok; i++)
				x[i] = rng_gauss();
			s1 = malloc(ntx_matmul_scratch_bytes(&wq, n_tok) + 1);
			s2 = malloc(ntx_matmul_scratch_bytes(&wf, n_tok) + 1);
			ntx_cpu_matmul(NULL, &wq, x, n_tok, y, s1);
			ntx_cpu_matmul(NULL, &wf, x, n_tok, yf, s2);
			ey = refio_nmse(y, yf, n_out * n_tok);
			t_ok(same && e <= fixture_tol(tq->type) && ey <= fixture_tol(tq->type) + 2 * NMSE_REF_Q8_K,
			     "%s %s (%s): fast dequant = ref, vs F32 file NMSE %.3g, matmul NMSE %.3g",
			     fixture_names[f], tensors[k], ntx_type_name(tq->type), e, ey);
			free(a), free(b), free(x), free(y), free(yf), free(s1), free(s2);
		}
		ntx_gguf_close(g);
	}
	ntx_gguf_close(g32);
}

/* The MoE fixture's Q5_0 experts (llama.cpp's fallback for Q4_K rows of 128):
 * blk.0.ffn_down_exps of qwen3moe-tiny-q4_k_m, a 3-D tensor of 16 x 256 rows,
 * against the same tensor of the Q8_0 file (both from one F16 parent, N(0,
 * 0.05)): fast dequantization equals the reference, and the two differ by
 * quantization noise only (Q5_0 ~1.7e-3 + Q8_0 ~4e-5 NMSE; a wrong bit
 * layout gives ~1). */
static void test_moe_q5_0(void)
{
	char p5[1024], p8[1024];
	struct ntx_err err;
	struct ntx_gguf *g5, *g8;
	const struct ntx_gguf_tensor *t5, *t8;
	const char *name = "blk.0.ffn_down_exps.weight";

	if (!t_need_fixtures("the MoE fixture's Q5_0 experts"))
		return;
	snprintf(p5, sizeof p5, "%s/moe/qwen3moe-tiny-q4_k_m.gguf", t_fixtures());
	snprintf(p8, sizeof p8, "%s/moe/qwen3moe-tiny-q8_0.gguf", t_fixtures());
	g5 = ntx_gguf_open(p5, &err);
	g8 = g5 ? ntx_gguf_open(p8, &err) : NULL;
	t5 = g8 ? ntx_gguf_find_tensor(g5, name) : NULL;
	t8 = t5 ? ntx_gguf_find_tensor(g8, name) : NULL;
	if (t_ok(t8 && t5->type == NTX_TYPE_Q5_0 && t8->type == NTX_TYPE_Q8_0 && t5->ne[0] == t8->ne[0] &&
			 t5->ne[1] * t5->ne[2] == t8->ne[1] * t8->ne[2],
		 "qwen3moe %s: Q5_0 in the Q4_K_M file, Q8_0 in the Q8_0 file", name)) {
		int64_t n = t5->ne[0] * t5->ne[1] * t5->ne[2];
		float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
		int same;
		double e;

		ntx_dequant_row_ref(NTX_TYPE_Q5_0, t5->data, a, n);
		ntx_dequant_row(NTX_TYPE_Q5_0, t5->data, b, n);
		ntx_dequant_row_ref(NTX_TYPE_Q8_0, t8->data, c, n);
		same = memcmp(a, b, (size_t)n * 4) == 0;
		e = refio_nmse(a, c, n);
		t_ok(same && e <= fixture_tol(NTX_TYPE_Q5_0),
		     "qwen3moe Q5_0 experts: fast dequant = ref, vs the Q8_0 file NMSE %.3g <= %.0e", e,
		     fixture_tol(NTX_TYPE_Q5_0));
		free(a), free(b), free(c);
	}
	ntx_gguf_close(g8);
	ntx_gguf_close(g5);
}

int main(void)
{
	static const char *isas[] = { "scalar", "avx2", "avx512", "amx" };

	test_layouts();
	test_act_rules();
	test_ref_accuracy();
	for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
		if (ntx_cpu_isa_select(isas[i]) != 0) {
			t_diag("%s: not available on this CPU, skipped", isas[i]);
			continue;
		}
		t_ok(strstr(ntx_cpu_features(), i ? isas[i] : "scalar") != NULL, "features: %s",
		     ntx_cpu_features());
		test_fast_isa(isas[i]);
		test_quant_corners(isas[i]);
		test_matmul(isas[i]);
		test_batch_invariance(isas[i]);
	}
	ntx_cpu_isa_select("auto");
	t_diag("best ISA: %s", ntx_cpu_features());
	{
		struct ntx_tunables tun;
		char best[64];

		snprintf(best, sizeof best, "%s", ntx_cpu_features());
		ntx_cpu_force_scalar(1);
		t_ok(strcmp(ntx_cpu_features(), "scalar") == 0, "ntx_cpu_force_scalar(1) selects scalar");
		ntx_cpu_force_scalar(0);
		t_ok(strcmp(ntx_cpu_features(), best) == 0, "ntx_cpu_force_scalar(0) returns to %s", best);
		/* the switches, as the engine hands them over */
		setenv("NTX_CPU_SCALAR", "1", 1);
		ntx_tunables_from_env(&tun);
		unsetenv("NTX_CPU_SCALAR");
		ntx_cpu_tunables_set(&tun);
		t_ok(strcmp(ntx_cpu_features(), "scalar") == 0, "NTX_CPU_SCALAR=1 selects scalar");
		ntx_tunables_default(&tun);
		ntx_cpu_tunables_set(&tun);
		t_ok(strcmp(ntx_cpu_features(), best) == 0, "the default switches return to %s", best);
		if (ntx_cpu_isa_select("avx2") == 0) {
			tun.cpu_scalar = 1;
			ntx_cpu_tunables_set(&tun);
			t_ok(strstr(ntx_cpu_features(), "avx2") != NULL,
			     "an ISA pinned by name stays when the switches change: %s",
			     ntx_cpu_features());
			ntx_cpu_isa_select("auto");
			t_ok(strcmp(ntx_cpu_features(), "scalar") == 0,
			     "\"auto\" then follows the switches (cpu_scalar)");
			ntx_cpu_tunables_set(NULL);
		}
		ntx_cpu_isa_select("auto");
		t_ok(ntx_cpu_isa_select("no-such-isa") == -1 && strcmp(ntx_cpu_features(), best) == 0,
		     "an unknown ISA name is refused");
	}
	test_edges();
	test_pool();
	test_fixtures();
	test_moe_q5_0();
	return t_done();
}
