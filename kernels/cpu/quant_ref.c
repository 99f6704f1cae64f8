/* quant_ref.c - scalar reference kernels: the oracle every fast path is
 * tested against. Plain C, one element at a time, written for clarity.
 *
 * Dot products follow ggml: quantized weights are multiplied with quantized
 * activations in integers, one float multiply per block (Q4_0/Q5_0/Q8_0 with Q8_0
 * activations, Q4_K/Q5_K/Q6_K with Q8_K); float weights with float
 * activations. Accumulation across blocks is in double so that the oracle
 * itself adds no rounding beyond the activation quantization. */
#include <math.h>
#include <string.h>

#include "cpu_impl.h"

/* ---- type facts ---- */

uint32_t ntx_act_type(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q5_0:
	case NTX_TYPE_Q8_0:
	case NTX_TYPE_Q4_1:
	case NTX_TYPE_Q5_1:
	case NTX_TYPE_IQ4_NL:
		return NTX_TYPE_Q8_0;
	case NTX_TYPE_Q2_K:
	case NTX_TYPE_Q3_K:
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
	case NTX_TYPE_Q6_K:
	case NTX_TYPE_IQ4_XS:
		return NTX_TYPE_Q8_K;
	default:
		return NTX_TYPE_F32;
	}
}

size_t ntx_act_bytes(uint32_t act_type, int64_t n)
{
	if (n <= 0)
		return 0;
	switch (act_type) {
	case NTX_TYPE_Q8_0:
		return (size_t)(n / NTX_QK) * sizeof(struct ntx_block_q8_0);
	case NTX_TYPE_Q8_K:
		return (size_t)(n / NTX_QK_K) * sizeof(struct ntx_block_q8_k);
	default:
		return (size_t)n * sizeof(float);
	}
}

int ntx_cpu_supports(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_F32:
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16:
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q5_0:
	case NTX_TYPE_Q8_0:
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
	case NTX_TYPE_Q6_K:
		return 1;
	default:
		return 0;
	}
}

/* ---- dequantization ---- */

static void dequant_q4_0(const struct ntx_block_q4_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK) {
		float d = ntx_fp16_to_fp32(b->d);

		for (int j = 0; j < NTX_QK / 2; j++) {
			y[j] = d * (float)((b->qs[j] & 0xF) - 8);
			y[j + NTX_QK / 2] = d * (float)((b->qs[j] >> 4) - 8);
		}
	}
}

/* Q5_0: element j (0..31) is (low 4 bits | bit j of qh << 4) - 16, the low
 * bits from qs[j] (j < 16, low nibble) or qs[j - 16] (high nibble). */
static int q5_0_value(const struct ntx_block_q5_0 *b, int j)
{
	uint32_t qh = (uint32_t)b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 |
		      (uint32_t)b->qh[3] << 24;
	int lo = j < NTX_QK / 2 ? b->qs[j] & 0xF : b->qs[j - NTX_QK / 2] >> 4;

	return (lo | (int)((qh >> j) & 1) << 4) - 16;
}

static void dequant_q5_0(const struct ntx_block_q5_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK) {
		float d = ntx_fp16_to_fp32(b->d);

		for (int j = 0; j < NTX_QK; j++)
			y[j] = d * (float)q5_0_value(b, j);
	}
}

static void dequant_q8_0(const struct ntx_block_q8_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK) {
		float d = ntx_fp16_to_fp32(b->d);

		for (int j = 0; j < NTX_QK; j++)
			y[j] = d * (float)b->qs[j];
	}
}

/* Q4_K: qs[32 * g + l] holds element 64g + l (low nibble, sub-block 2g) and
 * 64g + 32 + l (high nibble, sub-block 2g + 1). y = (d * sc) * q - dmin * m,
 * evaluated in exactly this order (the fast paths reproduce it bit for bit). */
static void dequant_q4_k(const struct ntx_block_q4_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++) {
		float d = ntx_fp16_to_fp32(b->d), dmin = ntx_fp16_to_fp32(b->dmin);

		for (int g = 0; g < 4; g++, y += 64) {
			const uint8_t *q = b->qs + 32 * g;
			uint8_t sc0, m0, sc1, m1;
			float d0, d1, o0, o1;

			ntx_k_scale_min(2 * g, b->scales, &sc0, &m0);
			ntx_k_scale_min(2 * g + 1, b->scales, &sc1, &m1);
			d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
			for (int l = 0; l < 32; l++) {
				y[l] = d0 * (float)(q[l] & 0xF) - o0;
				y[l + 32] = d1 * (float)(q[l] >> 4) - o1;
			}
		}
	}
}

/* Q5_K: as Q4_K; the fifth bit of element 64g + l is bit 2g of qh[l], that of
 * element 64g + 32 + l is bit 2g + 1 of qh[l]. */
static void dequant_q5_k(const struct ntx_block_q5_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++) {
		float d = ntx_fp16_to_fp32(b->d), dmin = ntx_fp16_to_fp32(b->dmin);

		for (int g = 0; g < 4; g++, y += 64) {
			const uint8_t *q = b->qs + 32 * g;
			uint8_t sc0, m0, sc1, m1;
			float d0, d1, o0, o1;

			ntx_k_scale_min(2 * g, b->scales, &sc0, &m0);
			ntx_k_scale_min(2 * g + 1, b->scales, &sc1, &m1);
			d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
			for (int l = 0; l < 32; l++) {
				int h0 = (b->qh[l] >> (2 * g)) & 1, h1 = (b->qh[l] >> (2 * g + 1)) & 1;

				y[l] = d0 * (float)((q[l] & 0xF) | h0 << 4) - o0;
				y[l + 32] = d1 * (float)((q[l] >> 4) | h1 << 4) - o1;
			}
		}
	}
}

/* Q6_K: two halves of 128. In half h, for l < 32, with L = ql + 64h and
 * H = qh + 32h, the 6-bit values (before - 32) are
 *   element 128h + l      : L[l] & 15      | ((H[l] >> 0) & 3) << 4
 *   element 128h + l + 32 : L[l + 32] & 15 | ((H[l] >> 2) & 3) << 4
 *   element 128h + l + 64 : L[l] >> 4      | ((H[l] >> 4) & 3) << 4
 *   element 128h + l + 96 : L[l + 32] >> 4 | ((H[l] >> 6) & 3) << 4
 * and element e has scale scales[e / 16]. y = (d * sc) * (q - 32). */
static int q6_k_value(const struct ntx_block_q6_k *b, int e)
{
	int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
	const uint8_t *L = b->ql + 64 * h, *H = b->qh + 32 * h;
	int lo = (quarter & 1) ? L[l + 32] : L[l];
	int lo4 = (quarter & 2) ? lo >> 4 : lo & 15;
	int hi2 = (H[l] >> (2 * quarter)) & 3;

	return (lo4 | hi2 << 4) - 32;
}

static void dequant_q6_k(const struct ntx_block_q6_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK_K) {
		float d = ntx_fp16_to_fp32(b->d);

		for (int e = 0; e < NTX_QK_K; e++)
			y[e] = d * (float)b->scales[e / 16] * (float)q6_k_value(b, e);
	}
}

/* Q4_1 / Q5_1: element j's q (0..15 / 0..31). */
static int q4_1_value(const struct ntx_block_q4_1 *b, int j)
{
	return j < 16 ? b->qs[j] & 0xF : b->qs[j - 16] >> 4;
}

static int q5_1_value(const struct ntx_block_q5_1 *b, int j)
{
	uint32_t qh = (uint32_t)b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 |
		      (uint32_t)b->qh[3] << 24;
	int lo = j < 16 ? b->qs[j] & 0xF : b->qs[j - 16] >> 4;

	return lo | (int)((qh >> j) & 1) << 4;
}

/* Q2_K / Q3_K: element e (0..255) as 128 h + 32 j + 16 u + l; its two low
 * bits, and its sub-block 8 h + 2 j + u. */
static int k2_bits(const uint8_t *qs, int e)
{
	int h = e / 128, j = e % 128 / 32, u = e % 32 / 16, l = e % 16;

	return (qs[32 * h + 16 * u + l] >> 2 * j) & 3;
}

static int k2_sub(int e)
{
	return 8 * (e / 128) + 2 * (e % 128 / 32) + e % 32 / 16;
}

/* Q3_K: element e's q in [-4, 3]; sub-block i's scale - 32. */
static int q3_k_value(const struct ntx_block_q3_k *b, int e)
{
	int h = e / 128, j = e % 128 / 32, u = e % 32 / 16, l = e % 16;
	int hi = (b->hmask[16 * u + l] >> (4 * h + j)) & 1;

	return k2_bits(b->qs, e) - (hi ? 0 : 4);
}

static int q3_k_scale(const struct ntx_block_q3_k *b, int i)
{
	int lo = i < 8 ? b->scales[i] & 0xF : b->scales[i - 8] >> 4;
	int hi = (b->scales[8 + i % 4] >> 2 * (i / 4)) & 3;

	return (lo | hi << 4) - 32;
}

static void dequant_q4_1(const struct ntx_block_q4_1 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK) {
		float d = ntx_fp16_to_fp32(b->d), m = ntx_fp16_to_fp32(b->m);

		for (int j = 0; j < NTX_QK; j++)
			y[j] = d * (float)q4_1_value(b, j) + m;
	}
}

static void dequant_q5_1(const struct ntx_block_q5_1 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK) {
		float d = ntx_fp16_to_fp32(b->d), m = ntx_fp16_to_fp32(b->m);

		for (int j = 0; j < NTX_QK; j++)
			y[j] = d * (float)q5_1_value(b, j) + m;
	}
}

static void dequant_q2_k(const struct ntx_block_q2_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK_K) {
		float d = ntx_fp16_to_fp32(b->d), dmin = ntx_fp16_to_fp32(b->dmin);

		for (int e = 0; e < NTX_QK_K; e++) {
			int sc = b->scales[k2_sub(e)];

			y[e] = d * (float)(sc & 0xF) * (float)k2_bits(b->qs, e) - dmin * (float)(sc >> 4);
		}
	}
}

static void dequant_q3_k(const struct ntx_block_q3_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK_K) {
		float d = ntx_fp16_to_fp32(b->d);

		for (int e = 0; e < NTX_QK_K; e++)
			y[e] = d * (float)q3_k_scale(b, k2_sub(e)) * (float)q3_k_value(b, e);
	}
}

/* IQ4_XS: the scale of sub-block ib (0..7), ls - 32 in [-32, 31]. */
static int iq4_xs_scale(const struct ntx_block_iq4_xs *b, int ib)
{
	int ls = ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b->scales_h >> 2 * ib) & 3) << 4);

	return ls - 32;
}

/* The 32 values of a nibble group (IQ4_NL block, IQ4_XS sub-block),
 * unscaled, in element order. */
static void iq4_values(const uint8_t *qs, int *v)
{
	for (int j = 0; j < 16; j++) {
		v[j] = ntx_iq4_values[qs[j] & 0xF];
		v[j + 16] = ntx_iq4_values[qs[j] >> 4];
	}
}

static void dequant_iq4_nl(const struct ntx_block_iq4_nl *b, float *y, int64_t nb)
{
	int v[NTX_QK];

	for (int64_t i = 0; i < nb; i++, b++, y += NTX_QK) {
		float d = ntx_fp16_to_fp32(b->d);

		iq4_values(b->qs, v);
		for (int j = 0; j < NTX_QK; j++)
			y[j] = d * (float)v[j];
	}
}

static void dequant_iq4_xs(const struct ntx_block_iq4_xs *b, float *y, int64_t nb)
{
	int v[NTX_QK];

	for (int64_t i = 0; i < nb; i++, b++) {
		float d = ntx_fp16_to_fp32(b->d);

		for (int ib = 0; ib < NTX_QK_K / NTX_QK; ib++, y += NTX_QK) {
			float dl = d * (float)iq4_xs_scale(b, ib);

			iq4_values(b->qs + 16 * ib, v);
			for (int j = 0; j < NTX_QK; j++)
				y[j] = dl * (float)v[j];
		}
	}
}

void ntx_dequant_row_ref(uint32_t type, const void *src, float *dst, int64_t n)
{
	int64_t i;

	switch (type) {
	case NTX_TYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		break;
	case NTX_TYPE_F16:
		for (i = 0; i < n; i++)
			dst[i] = ntx_fp16_to_fp32(ntx_ld_u16(src, i));
		break;
	case NTX_TYPE_BF16:
		for (i = 0; i < n; i++)
			dst[i] = ntx_bf16_to_fp32(ntx_ld_u16(src, i));
		break;
	case NTX_TYPE_Q4_0:
		dequant_q4_0(src, dst, n / NTX_QK);
		break;
	case NTX_TYPE_Q5_0:
		dequant_q5_0(src, dst, n / NTX_QK);
		break;
	case NTX_TYPE_Q8_0:
		dequant_q8_0(src, dst, n / NTX_QK);
		break;
	case NTX_TYPE_Q4_K:
		dequant_q4_k(src, dst, n / NTX_QK_K);
		break;
	case NTX_TYPE_Q5_K:
		dequant_q5_k(src, dst, n / NTX_QK_K);
		break;
	case NTX_TYPE_Q6_K:
		dequant_q6_k(src, dst, n / NTX_QK_K);
		break;
	case NTX_TYPE_Q4_1:
		dequant_q4_1(src, dst, n / NTX_QK);
		break;
	case NTX_TYPE_Q5_1:
		dequant_q5_1(src, dst, n / NTX_QK);
		break;
	case NTX_TYPE_Q2_K:
		dequant_q2_k(src, dst, n / NTX_QK_K);
		break;
	case NTX_TYPE_Q3_K:
		dequant_q3_k(src, dst, n / NTX_QK_K);
		break;
	case NTX_TYPE_IQ4_NL:
		dequant_iq4_nl(src, dst, n / NTX_QK);
		break;
	case NTX_TYPE_IQ4_XS:
		dequant_iq4_xs(src, dst, n / NTX_QK_K);
		break;
	default:
		for (i = 0; i < n; i++)
			dst[i] = NAN;
		break;
	}
}

/* ---- activation quantization ---- */

/* Q8_0 (what ggml's x86 quantize_row_q8_0 does): per 32, amax = max |x|,
 * d = amax / 127 stored as fp16, q = round_even(x * (127 / amax)), q = 0 when
 * amax == 0. */
static void quantize_q8_0(const float *x, struct ntx_block_q8_0 *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += NTX_QK, y++) {
		float amax = 0.0f, id;

		for (int j = 0; j < NTX_QK; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		id = amax != 0.0f ? 127.0f / amax : 0.0f;
		y->d = ntx_fp32_to_fp16(amax / 127.0f);
		for (int j = 0; j < NTX_QK; j++)
			y->qs[j] = (int8_t)ntx_round_even(x[j] * id);
	}
}

/* Q8_K (ggml's quantize_row_q8_K_ref): per 256, max = the first x of largest
 * magnitude; iscale = -127 / max; q = min(127, round_even(iscale * x));
 * d = 1 / iscale (so d carries the opposite sign of max and max maps to
 * -127); bsums[k] = sum of q[16k .. 16k + 15]. All zero when max == 0. */
static void quantize_q8_k(const float *x, struct ntx_block_q8_k *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += NTX_QK_K, y++) {
		float amax = 0.0f, max = 0.0f, iscale;

		for (int j = 0; j < NTX_QK_K; j++) {
			if (fabsf(x[j]) > amax) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		if (amax == 0.0f) {
			memset(y, 0, sizeof *y);
			continue;
		}
		iscale = -127.0f / max;
		for (int j = 0; j < NTX_QK_K; j++) {
			int v = ntx_round_even(iscale * x[j]);

			y->qs[j] = (int8_t)(v < 127 ? v : 127);
		}
		for (int k = 0; k < NTX_QK_K / 16; k++) {
			int s = 0;

			for (int j = 0; j < 16; j++)
				s += y->qs[16 * k + j];
			y->bsums[k] = (int16_t)s;
		}
		y->d = 1.0f / iscale;
	}
}

void ntx_quantize_act_ref(uint32_t act_type, const float *x, void *xq, int64_t n)
{
	switch (act_type) {
	case NTX_TYPE_Q8_0:
		quantize_q8_0(x, xq, n / NTX_QK);
		break;
	case NTX_TYPE_Q8_K:
		quantize_q8_k(x, xq, n / NTX_QK_K);
		break;
	default:
		memcpy(xq, x, (size_t)n * sizeof(float));
		break;
	}
}

/* ---- dot products ---- */

static double dot_q4_0(const struct ntx_block_q4_0 *w, const struct ntx_block_q8_0 *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int sumi = 0;

		for (int j = 0; j < NTX_QK / 2; j++) {
			sumi += ((w->qs[j] & 0xF) - 8) * x->qs[j];
			sumi += ((w->qs[j] >> 4) - 8) * x->qs[j + NTX_QK / 2];
		}
		acc += (double)(ntx_fp16_to_fp32(w->d) * ntx_fp16_to_fp32(x->d)) * sumi;
	}
	return acc;
}

static double dot_q5_0(const struct ntx_block_q5_0 *w, const struct ntx_block_q8_0 *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int sumi = 0;

		for (int j = 0; j < NTX_QK; j++)
			sumi += q5_0_value(w, j) * x->qs[j];
		acc += (double)(ntx_fp16_to_fp32(w->d) * ntx_fp16_to_fp32(x->d)) * sumi;
	}
	return acc;
}

static double dot_q8_0(const struct ntx_block_q8_0 *w, const struct ntx_block_q8_0 *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int sumi = 0;

		for (int j = 0; j < NTX_QK; j++)
			sumi += w->qs[j] * x->qs[j];
		acc += (double)(ntx_fp16_to_fp32(w->d) * ntx_fp16_to_fp32(x->d)) * sumi;
	}
	return acc;
}

/* Q4_K / Q5_K: per super-block, sumi = sum_j sc_j * sum_l q * xq over the 8
 * sub-blocks, mins = sum_j m_j * (bsums[2j] + bsums[2j+1]);
 * result += (d * xd) * sumi - (dmin * xd) * mins. */
static double dot_q4_k(const struct ntx_block_q4_k *w, const struct ntx_block_q8_k *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int sumi = 0, mins = 0;

		for (int j = 0; j < 8; j++) {
			const uint8_t *q = w->qs + 32 * (j / 2);
			const int8_t *xs = x->qs + 32 * j;
			int shift = (j & 1) * 4, s = 0;
			uint8_t sc, m;

			ntx_k_scale_min(j, w->scales, &sc, &m);
			for (int l = 0; l < 32; l++)
				s += ((q[l] >> shift) & 0xF) * xs[l];
			sumi += sc * s;
			mins += m * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
		}
		acc += (double)(ntx_fp16_to_fp32(w->d) * x->d) * sumi -
		       (double)(ntx_fp16_to_fp32(w->dmin) * x->d) * mins;
	}
	return acc;
}

static double dot_q5_k(const struct ntx_block_q5_k *w, const struct ntx_block_q8_k *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int sumi = 0, mins = 0;

		for (int j = 0; j < 8; j++) {
			const uint8_t *q = w->qs + 32 * (j / 2);
			const int8_t *xs = x->qs + 32 * j;
			int shift = (j & 1) * 4, s = 0;
			uint8_t sc, m;

			ntx_k_scale_min(j, w->scales, &sc, &m);
			for (int l = 0; l < 32; l++) {
				int v = ((q[l] >> shift) & 0xF) | ((w->qh[l] >> j) & 1) << 4;

				s += v * xs[l];
			}
			sumi += sc * s;
			mins += m * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
		}
		acc += (double)(ntx_fp16_to_fp32(w->d) * x->d) * sumi -
		       (double)(ntx_fp16_to_fp32(w->dmin) * x->d) * mins;
	}
	return acc;
}

/* Q6_K: sumi = sum over the 16 sub-blocks of sc * sum (q - 32) * xq;
 * result += (d * xd) * sumi. */
static double dot_q6_k(const struct ntx_block_q6_k *w, const struct ntx_block_q8_k *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int sumi = 0;

		for (int k = 0; k < 16; k++) {
			int s = 0;

			for (int l = 0; l < 16; l++)
				s += q6_k_value(w, 16 * k + l) * x->qs[16 * k + l];
			sumi += w->scales[k] * s;
		}
		acc += (double)(ntx_fp16_to_fp32(w->d) * x->d) * sumi;
	}
	return acc;
}

/* Q4_1 / Q5_1 weights (q5: 0 / 1), Q8_0 activations: d dx sum(q xq) +
 * m dx sum(xq). The two blocks share d and m at their start. */
static double dot_qx_1(const void *w, int q5, const struct ntx_block_q8_0 *x, int64_t nb)
{
	const size_t bb = q5 ? sizeof(struct ntx_block_q5_1) : sizeof(struct ntx_block_q4_1);
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, x++) {
		const void *b = (const char *)w + (size_t)i * bb;
		const struct ntx_block_q4_1 *h = b; /* d, m */
		int sumi = 0, sumx = 0;
		float dx = ntx_fp16_to_fp32(x->d);

		for (int j = 0; j < NTX_QK; j++) {
			sumi += (q5 ? q5_1_value(b, j) : q4_1_value(b, j)) * x->qs[j];
			sumx += x->qs[j];
		}
		acc += (double)(ntx_fp16_to_fp32(h->d) * dx) * sumi +
		       (double)(ntx_fp16_to_fp32(h->m) * dx) * sumx;
	}
	return acc;
}

/* Q2_K weights, Q8_K activations: per sub-block the integer dot times its
 * scale and the activation sum times its min, then d x.d and dmin x.d. */
static double dot_q2_k(const struct ntx_block_q2_k *w, const struct ntx_block_q8_k *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int64_t isum = 0, msum = 0;

		for (int e = 0; e < NTX_QK_K; e++) {
			int sc = w->scales[k2_sub(e)];

			isum += (int64_t)(sc & 0xF) * k2_bits(w->qs, e) * x->qs[e];
			msum += (int64_t)(sc >> 4) * x->qs[e];
		}
		acc += (double)(ntx_fp16_to_fp32(w->d) * x->d) * (double)isum -
		       (double)(ntx_fp16_to_fp32(w->dmin) * x->d) * (double)msum;
	}
	return acc;
}

static double dot_q3_k(const struct ntx_block_q3_k *w, const struct ntx_block_q8_k *x, int64_t nb)
{
	double acc = 0.0;

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int64_t isum = 0;

		for (int e = 0; e < NTX_QK_K; e++)
			isum += (int64_t)q3_k_scale(w, k2_sub(e)) * q3_k_value(w, e) * x->qs[e];
		acc += (double)(ntx_fp16_to_fp32(w->d) * x->d) * (double)isum;
	}
	return acc;
}

/* IQ4_NL weights, Q8_0 activations: per block the integer dot, one
 * float multiply. */
static double dot_iq4_nl(const struct ntx_block_iq4_nl *w, const struct ntx_block_q8_0 *x,
			 int64_t nb)
{
	double acc = 0.0;
	int v[NTX_QK];

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int sumi = 0;

		iq4_values(w->qs, v);
		for (int j = 0; j < NTX_QK; j++)
			sumi += v[j] * x->qs[j];
		acc += (double)(ntx_fp16_to_fp32(w->d) * ntx_fp16_to_fp32(x->d)) * sumi;
	}
	return acc;
}

/* IQ4_XS weights, Q8_K activations: per sub-block the integer dot times
 * its scale, summed in integers, then d * x.d. */
static double dot_iq4_xs(const struct ntx_block_iq4_xs *w, const struct ntx_block_q8_k *x,
			 int64_t nb)
{
	double acc = 0.0;
	int v[NTX_QK];

	for (int64_t i = 0; i < nb; i++, w++, x++) {
		int64_t sumi = 0;

		for (int ib = 0; ib < NTX_QK_K / NTX_QK; ib++) {
			int s = 0;

			iq4_values(w->qs + 16 * ib, v);
			for (int j = 0; j < NTX_QK; j++)
				s += v[j] * x->qs[NTX_QK * ib + j];
			sumi += (int64_t)iq4_xs_scale(w, ib) * s;
		}
		acc += (double)(ntx_fp16_to_fp32(w->d) * x->d) * (double)sumi;
	}
	return acc;
}

float ntx_vec_dot_ref(uint32_t wtype, int64_t n, const void *w, const void *xq)
{
	double acc = 0.0;
	int64_t i;

	switch (wtype) {
	case NTX_TYPE_F32:
		for (i = 0; i < n; i++)
			acc += (double)ntx_ld_f32(w, i) * ntx_ld_f32(xq, i);
		return (float)acc;
	case NTX_TYPE_F16:
		for (i = 0; i < n; i++)
			acc += (double)ntx_fp16_to_fp32(ntx_ld_u16(w, i)) * ntx_ld_f32(xq, i);
		return (float)acc;
	case NTX_TYPE_BF16:
		for (i = 0; i < n; i++)
			acc += (double)ntx_bf16_to_fp32(ntx_ld_u16(w, i)) * ntx_ld_f32(xq, i);
		return (float)acc;
	case NTX_TYPE_Q4_0:
		return (float)dot_q4_0(w, xq, n / NTX_QK);
	case NTX_TYPE_Q5_0:
		return (float)dot_q5_0(w, xq, n / NTX_QK);
	case NTX_TYPE_Q8_0:
		return (float)dot_q8_0(w, xq, n / NTX_QK);
	case NTX_TYPE_Q4_K:
		return (float)dot_q4_k(w, xq, n / NTX_QK_K);
	case NTX_TYPE_Q5_K:
		return (float)dot_q5_k(w, xq, n / NTX_QK_K);
	case NTX_TYPE_Q6_K:
		return (float)dot_q6_k(w, xq, n / NTX_QK_K);
	case NTX_TYPE_Q4_1:
		return (float)dot_qx_1(w, 0, xq, n / NTX_QK);
	case NTX_TYPE_Q5_1:
		return (float)dot_qx_1(w, 1, xq, n / NTX_QK);
	case NTX_TYPE_Q2_K:
		return (float)dot_q2_k(w, xq, n / NTX_QK_K);
	case NTX_TYPE_Q3_K:
		return (float)dot_q3_k(w, xq, n / NTX_QK_K);
	case NTX_TYPE_IQ4_NL:
		return (float)dot_iq4_nl(w, xq, n / NTX_QK);
	case NTX_TYPE_IQ4_XS:
		return (float)dot_iq4_xs(w, xq, n / NTX_QK_K);
	default:
		return NAN;
	}
}

/* ---- the scalar ISA (what NTX_CPU_SCALAR=1 runs) ---- */

static void tile_ref(uint32_t wtype, int64_t n, const void *w, size_t wstride, int nr,
		     const void *x, size_t xstride, int nt, float *y, int64_t ldy)
{
	for (int t = 0; t < nt; t++)
		for (int r = 0; r < nr; r++)
			y[t * ldy + r] = ntx_vec_dot_ref(wtype, n, (const char *)w + r * wstride,
							 (const char *)x + t * xstride);
}

#define NTX_TILE_REF(T, ID)                                                                       \
	static void tile_ref_##T(int64_t n, const void *w, size_t ws, int nr, const void *x,      \
				 size_t xs, int nt, float *y, int64_t ldy)                         \
	{                                                                                         \
		tile_ref(ID, n, w, ws, nr, x, xs, nt, y, ldy);                                    \
	}
NTX_TILE_REF(f32, NTX_TYPE_F32)
NTX_TILE_REF(f16, NTX_TYPE_F16)
NTX_TILE_REF(bf16, NTX_TYPE_BF16)
NTX_TILE_REF(q4_0, NTX_TYPE_Q4_0)
NTX_TILE_REF(q5_0, NTX_TYPE_Q5_0)
NTX_TILE_REF(q8_0, NTX_TYPE_Q8_0)
NTX_TILE_REF(q4_k, NTX_TYPE_Q4_K)
NTX_TILE_REF(q5_k, NTX_TYPE_Q5_K)
NTX_TILE_REF(q6_k, NTX_TYPE_Q6_K)

static ntx_tile_fn tile_ref_for(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_F32: return tile_ref_f32;
	case NTX_TYPE_F16: return tile_ref_f16;
	case NTX_TYPE_BF16: return tile_ref_bf16;
	case NTX_TYPE_Q4_0: return tile_ref_q4_0;
	case NTX_TYPE_Q5_0: return tile_ref_q5_0;
	case NTX_TYPE_Q8_0: return tile_ref_q8_0;
	case NTX_TYPE_Q4_K: return tile_ref_q4_k;
	case NTX_TYPE_Q5_K: return tile_ref_q5_k;
	case NTX_TYPE_Q6_K: return tile_ref_q6_k;
	default: return NULL;
	}
}

size_t ntx_cpu_prep_none(uint32_t wtype, int64_t n)
{
	(void)wtype, (void)n;
	return 0;
}

const struct ntx_cpu_isa ntx_cpu_isa_scalar = {
	.name = "scalar",
	.dequant_row = ntx_dequant_row_ref,
	.quantize_act = ntx_quantize_act_ref,
	.prep_bytes = ntx_cpu_prep_none,
	.tile = tile_ref_for,
};
