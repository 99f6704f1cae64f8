/* quant_avx2.c - AVX2 + FMA + F16C kernels (built with -mavx2 -mfma -mf16c,
 * called only when the CPU has them).
 *
 * Dequantization reproduces quant_ref.c bit for bit (same float operations
 * in the same order; this file is compiled with -std=c11, so the compiler
 * does not contract mul + sub into FMA). Activation quantization is bit-exact
 * too (cvtps2dq rounds to nearest even like ntx_round_even). Dot products use
 * ggml's integer scheme: maddubs (u8 x s8 -> s16 pairs) then madd with the
 * scales or ones (-> s32), one float FMA per block. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu_impl.h"

/* Tokens per pass of a row kernel (a tile call loops over groups). */
#define TOK_GROUP 4

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

/* ---- helpers ---- */

static inline float hsum_ps(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
	return _mm_cvtsi128_si32(s);
}

static inline float hmax_ps(__m256 v)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline float hmin_ps(__m256 v)
{
	__m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_min_ps(s, _mm_movehl_ps(s, s));
	s = _mm_min_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline float fp16(uint16_t h)
{
	return _cvtsh_ss(h);
}

static inline __m256i loadu256(const void *p)
{
	return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i loadu128(const void *p)
{
	return _mm_loadu_si128((const __m128i *)p);
}

/* 8 bytes at p (unsigned or signed) to 8 floats. */
static inline __m256 u8x8_ps(const uint8_t *p)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* 32 signed bytes (packed 4 x 8 int32 -> int8 in order). */
static inline __m256i pack_epi32_epi8(__m256i a, __m256i b, __m256i c, __m256i d)
{
	__m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);

	return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
					   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The 32 values of a Q5_0 block minus 16, as signed bytes in element order:
 * the nibbles as Q4_0's, the fifth bits spread from qh (byte j of the
 * register takes byte j / 8 of qh, then tests bit j % 8). */
static inline __m256i q5_0_bytes(const struct ntx_block_q5_0 *b)
{
	const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL), c16 = _mm256_set1_epi8(16);
	const __m256i which = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
						 0x0303030303030303LL);
	__m128i v = loadu128(b->qs), m4 = _mm_set1_epi8(0x0F);
	__m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
	uint32_t qh;
	__m256i h;

	memcpy(&qh, b->qh, 4);
	h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), which);
	h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit); /* 0xFF where the fifth bit is set */
	return _mm256_sub_epi8(q, _mm256_andnot_si256(h, c16));
}

/* ---- dequantization ---- */

/* Store y[k] = d * v[k] - o for the 32 small integers in bytes v. */
static inline void store32_affine(float *y, __m256i v, float dsc, float off)
{
	__m256 d = _mm256_set1_ps(dsc), o = _mm256_set1_ps(off);
	uint8_t b[32];

	_mm256_storeu_si256((__m256i *)b, v);
	for (int k = 0; k < 32; k += 8)
		_mm256_storeu_ps(y + k, _mm256_sub_ps(_mm256_mul_ps(d, u8x8_ps(b + k)), o));
}

static void dequant_q4_k(const void *src, float *y, int64_t nb, int q5)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);

	for (int64_t i = 0; i < nb; i++) {
		const struct ntx_block_q4_k *b = (const struct ntx_block_q4_k *)src + i;
		const struct ntx_block_q5_k *b5 = (const struct ntx_block_q5_k *)src + i;
		const uint8_t *qs = q5 ? b5->qs : b->qs, *sv = q5 ? b5->scales : b->scales;
		float d = fp16(q5 ? b5->d : b->d), dmin = fp16(q5 ? b5->dmin : b->dmin);
		__m256i h = q5 ? loadu256(b5->qh) : _mm256_setzero_si256();
		uint8_t sc[8], m[8];
		uint64_t sc64, m64;

		ntx_k_scales8(sv, &sc64, &m64);
		memcpy(sc, &sc64, 8);
		memcpy(m, &m64, 8);
		UNROLL for (int g = 0; g < 4; g++, y += 64) {
			__m256i q = loadu256(qs + 32 * g);
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			__m256i h0 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * g)), one);
			__m256i h1 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * g + 1)), one);

			lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
			hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
			store32_affine(y, lo, d * sc[2 * g], dmin * m[2 * g]);
			store32_affine(y + 32, hi, d * sc[2 * g + 1], dmin * m[2 * g + 1]);
		}
	}
}

/* Q6_K: the 128 6-bit values of half h, in element order, as 4 x 32 bytes. */
static inline void q6_k_half(const uint8_t *ql, const uint8_t *qh, __m256i q[4])
{
	const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
	__m256i l0 = loadu256(ql), l1 = loadu256(ql + 32), h = loadu256(qh);

	q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
	q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
	q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m30));
	q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
			       _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
}

static void dequant_q6_k(const struct ntx_block_q6_k *b, float *y, int64_t nb)
{
	const __m256i c32 = _mm256_set1_epi8(32);

	for (int64_t i = 0; i < nb; i++, b++) {
		float d = fp16(b->d);

		UNROLL for (int h = 0; h < 2; h++) {
			__m256i q[4];

			q6_k_half(b->ql + 64 * h, b->qh + 32 * h, q);
			UNROLL for (int c = 0; c < 4; c++, y += 32) {
				int8_t v[32];

				_mm256_storeu_si256((__m256i *)v, _mm256_sub_epi8(q[c], c32));
				for (int k = 0; k < 32; k += 8) {
					const int8_t *s = b->scales + 8 * h + 2 * c + k / 16;
					__m256 vf = _mm256_cvtepi32_ps(
						_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(v + k))));

					_mm256_storeu_ps(y + k, _mm256_mul_ps(_mm256_set1_ps(d * (float)*s), vf));
				}
			}
		}
	}
}

void ntx_dequant_row_avx2(uint32_t type, const void *src, float *dst, int64_t n)
{
	int64_t i = 0;

	switch (type) {
	case NTX_TYPE_F16:
		for (; i + 8 <= n; i += 8)
			_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(loadu128((const uint16_t *)src + i)));
		for (; i < n; i++)
			dst[i] = ntx_fp16_to_fp32(ntx_ld_u16(src, i));
		break;
	case NTX_TYPE_BF16:
		for (; i + 8 <= n; i += 8) {
			__m256i v = _mm256_cvtepu16_epi32(loadu128((const uint16_t *)src + i));

			_mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
		}
		for (; i < n; i++)
			dst[i] = ntx_bf16_to_fp32(ntx_ld_u16(src, i));
		break;
	case NTX_TYPE_Q4_0:
		for (const struct ntx_block_q4_0 *b = src; i < n / NTX_QK; i++, b++, dst += NTX_QK) {
			__m128i v = loadu128(b->qs), m4 = _mm_set1_epi8(0x0F);
			__m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
			int8_t s[32];

			_mm256_storeu_si256((__m256i *)s, _mm256_sub_epi8(q, _mm256_set1_epi8(8)));
			for (int k = 0; k < 32; k += 8) {
				__m256 vf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + k))));

				_mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_set1_ps(fp16(b->d)), vf));
			}
		}
		break;
	case NTX_TYPE_Q5_0:
		for (const struct ntx_block_q5_0 *b = src; i < n / NTX_QK; i++, b++, dst += NTX_QK) {
			int8_t s[32];

			_mm256_storeu_si256((__m256i *)s, q5_0_bytes(b));
			for (int k = 0; k < 32; k += 8) {
				__m256 vf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + k))));

				_mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_set1_ps(fp16(b->d)), vf));
			}
		}
		break;
	case NTX_TYPE_Q8_0:
		for (const struct ntx_block_q8_0 *b = src; i < n / NTX_QK; i++, b++, dst += NTX_QK) {
			for (int k = 0; k < 32; k += 8) {
				__m256 vf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + k))));

				_mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_set1_ps(fp16(b->d)), vf));
			}
		}
		break;
	case NTX_TYPE_Q4_K:
		dequant_q4_k(src, dst, n / NTX_QK_K, 0);
		break;
	case NTX_TYPE_Q5_K:
		dequant_q4_k(src, dst, n / NTX_QK_K, 1);
		break;
	case NTX_TYPE_Q6_K:
		dequant_q6_k(src, dst, n / NTX_QK_K);
		break;
	default:
		ntx_dequant_row_ref(type, src, dst, n); /* F32 copy; NaN for unsupported */
		break;
	}
}

/* ---- activation quantization (rules in quant_ref.c) ---- */

static void quantize_q8_0(const float *x, struct ntx_block_q8_0 *y, int64_t nb)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);

	for (int64_t i = 0; i < nb; i++, x += NTX_QK, y++) {
		__m256 v[4], m;
		__m256i q[4];
		float amax, id;

		UNROLL for (int k = 0; k < 4; k++)
			v[k] = _mm256_loadu_ps(x + 8 * k);
		m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
				  _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
		amax = hmax_ps(m);
		id = amax != 0.0f ? 127.0f / amax : 0.0f;
		y->d = ntx_fp32_to_fp16(amax / 127.0f);
		UNROLL for (int k = 0; k < 4; k++)
			q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
		_mm256_storeu_si256((__m256i *)y->qs, pack_epi32_epi8(q[0], q[1], q[2], q[3]));
	}
}

/* The Q8_K max rule: the first x of largest magnitude, found from the vector
 * max and min; only a tie (max == -min) needs a scan for which came first. */
static inline float q8_k_max(const float *x, float vmax, float vmin)
{
	if (vmax > -vmin)
		return vmax;
	if (-vmin > vmax)
		return vmin;
	for (int j = 0; j < NTX_QK_K; j++)
		if (fabsf(x[j]) == vmax)
			return x[j];
	return vmax;
}

static void quantize_q8_k(const float *x, struct ntx_block_q8_k *y, int64_t nb)
{
	const __m256i c127 = _mm256_set1_epi32(127);

	for (int64_t i = 0; i < nb; i++, x += NTX_QK_K, y++) {
		__m256 mx = _mm256_loadu_ps(x), mn = mx;
		float vmax, vmin, max, iscale;
		__m256 is;

		for (int k = 8; k < NTX_QK_K; k += 8) {
			__m256 v = _mm256_loadu_ps(x + k);

			mx = _mm256_max_ps(mx, v);
			mn = _mm256_min_ps(mn, v);
		}
		vmax = hmax_ps(mx);
		vmin = hmin_ps(mn);
		if (vmax == 0.0f && vmin == 0.0f) {
			memset(y, 0, sizeof *y);
			continue;
		}
		max = q8_k_max(x, vmax, vmin);
		iscale = -127.0f / max;
		is = _mm256_set1_ps(iscale);
		for (int k = 0; k < NTX_QK_K; k += 32) {
			__m256i q[4];

			UNROLL for (int j = 0; j < 4; j++)
				q[j] = _mm256_min_epi32(
					_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), is)), c127);
			y->bsums[k / 16] = (int16_t)hsum_epi32(_mm256_add_epi32(q[0], q[1]));
			y->bsums[k / 16 + 1] = (int16_t)hsum_epi32(_mm256_add_epi32(q[2], q[3]));
			_mm256_storeu_si256((__m256i *)(y->qs + k), pack_epi32_epi8(q[0], q[1], q[2], q[3]));
		}
		y->d = 1.0f / iscale;
	}
}

void ntx_quantize_act_avx2(uint32_t act_type, const float *x, void *xq, int64_t n)
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

/* ---- dot products: one weight row against NT activation rows ---- */

#define XROW(T, x, xs, t) ((const T *)((const char *)(x) + (size_t)(t) * (xs)))

INLINE __m256 load8_f(uint32_t type, const void *w, int64_t i)
{
	if (type == NTX_TYPE_F16)
		return _mm256_cvtph_ps(loadu128((const uint16_t *)w + i));
	if (type == NTX_TYPE_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128((const uint16_t *)w + i)), 16));
	return _mm256_loadu_ps((const float *)w + i);
}

INLINE float load1_f(uint32_t type, const void *w, int64_t i)
{
	if (type == NTX_TYPE_F16)
		return ntx_fp16_to_fp32(ntx_ld_u16(w, i));
	if (type == NTX_TYPE_BF16)
		return ntx_bf16_to_fp32(ntx_ld_u16(w, i));
	return ntx_ld_f32(w, i);
}

INLINE void row_float(uint32_t type, int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	__m256 a0[TOK_GROUP], a1[TOK_GROUP];
	int64_t i = 0;

	UNROLL for (int t = 0; t < NT; t++)
		a0[t] = a1[t] = _mm256_setzero_ps();
	for (; i + 16 <= n; i += 16) {
		__m256 w0 = load8_f(type, w, i), w1 = load8_f(type, w, i + 8);

		UNROLL for (int t = 0; t < NT; t++) {
			const float *xt = XROW(float, x, xs, t);

			a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt + i), a0[t]);
			a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + i + 8), a1[t]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++) {
		const float *xt = XROW(float, x, xs, t);
		float s = hsum_ps(_mm256_add_ps(a0[t], a1[t]));

		for (int64_t j = i; j < n; j++)
			s += load1_f(type, w, j) * ntx_ld_f32(xt, j);
		out[t] = s;
	}
}

/* sum of the 32 products of signed bytes w and x, as 8 int32 lanes */
INLINE __m256i dot_i8(__m256i aw, __m256i w, __m256i x)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

/* Q4_0, Q5_0 and Q8_0 weights with Q8_0 activations: w as signed bytes. */
INLINE __m256i q4_0_bytes(const struct ntx_block_q4_0 *b)
{
	__m128i v = loadu128(b->qs), m4 = _mm_set1_epi8(0x0F);
	__m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));

	return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

enum { W_Q8_0, W_Q4_0, W_Q5_0 }; /* the weight type of row_q8 */

INLINE void row_q8(int wt, int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	const struct ntx_block_q4_0 *w4 = w;
	const struct ntx_block_q5_0 *w5 = w;
	const struct ntx_block_q8_0 *w8 = w;
	__m256 acc[TOK_GROUP];
	int64_t nb = n / NTX_QK;

	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		__m256i wq = wt == W_Q4_0 ? q4_0_bytes(w4 + i) : wt == W_Q5_0 ? q5_0_bytes(w5 + i) : loadu256(w8[i].qs);
		__m256i aw = _mm256_sign_epi8(wq, wq);
		float dw = fp16(wt == W_Q4_0 ? w4[i].d : wt == W_Q5_0 ? w5[i].d : w8[i].d);

		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_0 *xb = XROW(struct ntx_block_q8_0, x, xs, t) + i;
			__m256 p = _mm256_cvtepi32_ps(dot_i8(aw, wq, loadu256(xb->qs)));

			acc[t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * fp16(xb->d)), acc[t]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++)
		out[t] = hsum_ps(acc[t]);
}

/* Q4_K / Q5_K: per 32-element sub-block j, maddubs(q, x) then madd with the
 * scale sc_j; mins through bsums. */
INLINE void row_q4_k(int q5, int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
	__m256 acc[TOK_GROUP], accm[TOK_GROUP];
	int64_t nb = n / NTX_QK_K;

	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = accm[t] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const struct ntx_block_q4_k *b4 = (const struct ntx_block_q4_k *)w + i;
		const struct ntx_block_q5_k *b5 = (const struct ntx_block_q5_k *)w + i;
		const uint8_t *qs = q5 ? b5->qs : b4->qs;
		float d = fp16(q5 ? b5->d : b4->d), dmin = fp16(q5 ? b5->dmin : b4->dmin);
		__m256i h = q5 ? loadu256(b5->qh) : _mm256_setzero_si256();
		__m256i isum[TOK_GROUP], sc16, mdup;
		uint64_t sc, mn;

		ntx_k_scales8(q5 ? b5->scales : b4->scales, &sc, &mn);
		sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
		mdup = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_cvtsi64_si128((long long)mn),
							      _mm_cvtsi64_si128((long long)mn)));
		UNROLL for (int t = 0; t < NT; t++)
			isum[t] = _mm256_setzero_si256();
		UNROLL for (int g = 0; g < 4; g++) {
			__m256i q = loadu256(qs + 32 * g);
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
			/* scale of sub-blocks 2g, 2g+1 as int16 in every lane */
			__m256i s0 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 * (4 * g + 1) + 4 * g)));
			__m256i s1 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 * (4 * g + 3) + 4 * g + 2)));

			if (q5) {
				__m256i h0 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * g)), one);
				__m256i h1 = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * g + 1)), one);

				lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
				hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
			}
			UNROLL for (int t = 0; t < NT; t++) {
				const int8_t *xq = (XROW(struct ntx_block_q8_k, x, xs, t) + i)->qs + 64 * g;
				__m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(xq)), s0);
				__m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(xq + 32)), s1);

				isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
			}
		}
		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_k *xb = XROW(struct ntx_block_q8_k, x, xs, t) + i;
			__m256i mm = _mm256_madd_epi16(mdup, loadu256(xb->bsums));

			acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * xb->d), acc[t]);
			accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(dmin * xb->d), accm[t]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++)
		out[t] = hsum_ps(acc[t]) - hsum_ps(accm[t]);
}

/* Q6_K: unsigned 6-bit q (0..63) times x via maddubs, scales per 16 via
 * madd, and -32 * sum(sc * bsums) for the offset. */
INLINE void row_q6_k(int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	__m256 acc[TOK_GROUP];
	int64_t nb = n / NTX_QK_K;

	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = _mm256_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const struct ntx_block_q6_k *b = (const struct ntx_block_q6_k *)w + i;
		__m128i sc8 = loadu128(b->scales);
		__m256i sc16 = _mm256_cvtepi8_epi16(sc8), isum[TOK_GROUP];
		float d = fp16(b->d);

		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_k *xb = XROW(struct ntx_block_q8_k, x, xs, t) + i;

			isum[t] = _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(xb->bsums)), 5);
			isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), isum[t]);
		}
		UNROLL for (int h = 0; h < 2; h++) {
			__m256i q[4];

			q6_k_half(b->ql + 64 * h, b->qh + 32 * h, q);
			UNROLL for (int c = 0; c < 4; c++) {
				/* 32 elements = sub-blocks k, k + 1 (k = 8h + 2c) */
				int k = 8 * h + 2 * c;
				__m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
					sc8, _mm_set_epi64x(0x0101010101010101LL * (k + 1), 0x0101010101010101LL * k)));

				UNROLL for (int t = 0; t < NT; t++) {
					const int8_t *xq = (XROW(struct ntx_block_q8_k, x, xs, t) + i)->qs + 32 * (k / 2);

					isum[t] = _mm256_add_epi32(
						isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q[c], loadu256(xq)), s));
				}
			}
		}
		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_k *xb = XROW(struct ntx_block_q8_k, x, xs, t) + i;

			acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * xb->d), acc[t]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++)
		out[t] = hsum_ps(acc[t]);
}

/* ---- tiles ---- */

/* Expand a row kernel into a tile kernel: rows one by one, tokens in groups
 * of up to TOK_GROUP with the group size a compile-time constant. */
_Static_assert(TOK_GROUP == 4, "the tile switch below covers groups of 1 to 4 tokens");

#define TILE(name, call)                                                                          \
	static void name(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,   \
			 int nt, float *y, int64_t ldy)                                           \
	{                                                                                         \
		for (int r = 0; r < nr; r++) {                                                    \
			const void *wr = (const char *)w + (size_t)r * ws;                        \
			for (int t0 = 0; t0 < nt; t0 += TOK_GROUP) {                             \
				const void *xt = (const char *)x + (size_t)t0 * xs;               \
				int k = nt - t0 < TOK_GROUP ? nt - t0 : TOK_GROUP;              \
				float out[TOK_GROUP];                                            \
				switch (k) {                                                      \
				case 1: call(wr, xt, 1, out); break;                              \
				case 2: call(wr, xt, 2, out); break;                              \
				case 3: call(wr, xt, 3, out); break;                              \
				default: call(wr, xt, 4, out); break;                             \
				}                                                                 \
				for (int t = 0; t < k; t++)                                       \
					y[(t0 + t) * ldy + r] = out[t];                           \
			}                                                                         \
		}                                                                                 \
	}

#define CALL_F32(wr, xt, NT, out) row_float(NTX_TYPE_F32, n, wr, xt, xs, NT, out)
#define CALL_F16(wr, xt, NT, out) row_float(NTX_TYPE_F16, n, wr, xt, xs, NT, out)
#define CALL_BF16(wr, xt, NT, out) row_float(NTX_TYPE_BF16, n, wr, xt, xs, NT, out)
#define CALL_Q4_0(wr, xt, NT, out) row_q8(W_Q4_0, n, wr, xt, xs, NT, out)
#define CALL_Q5_0(wr, xt, NT, out) row_q8(W_Q5_0, n, wr, xt, xs, NT, out)
#define CALL_Q8_0(wr, xt, NT, out) row_q8(W_Q8_0, n, wr, xt, xs, NT, out)
#define CALL_Q4_K(wr, xt, NT, out) row_q4_k(0, n, wr, xt, xs, NT, out)
#define CALL_Q5_K(wr, xt, NT, out) row_q4_k(1, n, wr, xt, xs, NT, out)
#define CALL_Q6_K(wr, xt, NT, out) row_q6_k(n, wr, xt, xs, NT, out)

TILE(tile_f32, CALL_F32)
TILE(tile_f16, CALL_F16)
TILE(tile_bf16, CALL_BF16)
TILE(tile_q4_0, CALL_Q4_0)
TILE(tile_q5_0, CALL_Q5_0)
TILE(tile_q8_0, CALL_Q8_0)
TILE(tile_q4_k, CALL_Q4_K)
TILE(tile_q5_k, CALL_Q5_K)
TILE(tile_q6_k, CALL_Q6_K)

static ntx_tile_fn tile_for(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_F32: return tile_f32;
	case NTX_TYPE_F16: return tile_f16;
	case NTX_TYPE_BF16: return tile_bf16;
	case NTX_TYPE_Q4_0: return tile_q4_0;
	case NTX_TYPE_Q5_0: return tile_q5_0;
	case NTX_TYPE_Q8_0: return tile_q8_0;
	case NTX_TYPE_Q4_K: return tile_q4_k;
	case NTX_TYPE_Q5_K: return tile_q5_k;
	case NTX_TYPE_Q6_K: return tile_q6_k;
	default: return NULL;
	}
}

const struct ntx_cpu_isa ntx_cpu_isa_avx2 = {
	.name = "avx2 fma f16c",
	.dequant_row = ntx_dequant_row_avx2,
	.quantize_act = ntx_quantize_act_avx2,
	.prep_bytes = ntx_cpu_prep_none,
	.tile = tile_for,
	.attn = ntx_attn_avx2,
};
