/* quant_avx512.c - AVX-512 (F, BW, VL, DQ) + VNNI dot-product kernels (built
 * with those flags, called only when the CPU has them). Dequantization and
 * activation quantization are memory-bound and come from quant_avx2.c.
 *
 * Integer dots use vpdpbusd (u8 x s8, 4 products summed into s32) for Q8_0
 * and Q4_0, and for the K-quants maddubs (u8 x s8 -> s16 pairs) followed by
 * vpdpwssd with the int16 sub-block scales, 64 elements per instruction. The
 * nibble layouts are rearranged in registers so that activations are read
 * with plain contiguous loads. */
#include <immintrin.h>

#include "cpu_impl.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")
#define XROW(T, x, xs, t) ((const T *)((const char *)(x) + (size_t)(t) * (xs)))

/* ---- helpers ---- */

static inline float hsum_ps256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline float fp16(uint16_t h)
{
	return _cvtsh_ss(h);
}

static inline __m512i loadu512(const void *p)
{
	return _mm512_loadu_si512(p);
}

static inline __m256i loadu256(const void *p)
{
	return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i loadu128(const void *p)
{
	return _mm_loadu_si128((const __m128i *)p);
}

/* ---- float weights ---- */

INLINE __m512 load16_f(uint32_t type, const void *w, int64_t i, __mmask16 m)
{
	if (type == NTX_TYPE_F16)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
	if (type == NTX_TYPE_BF16)
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i)), 16));
	return _mm512_maskz_loadu_ps(m, (const float *)w + i);
}

INLINE void row_float(uint32_t type, int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	__m512 a0[NTX_TILE_T], a1[NTX_TILE_T];
	int64_t i = 0;

	UNROLL for (int t = 0; t < NT; t++)
		a0[t] = a1[t] = _mm512_setzero_ps();
	for (; i + 32 <= n; i += 32) {
		__m512 w0 = load16_f(type, w, i, 0xFFFF), w1 = load16_f(type, w, i + 16, 0xFFFF);

		UNROLL for (int t = 0; t < NT; t++) {
			const float *xt = XROW(float, x, xs, t);

			a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt + i), a0[t]);
			a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt + i + 16), a1[t]);
		}
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
		__m512 w0 = load16_f(type, w, i, m);

		UNROLL for (int t = 0; t < NT; t++)
			a0[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, XROW(float, x, xs, t) + i), a0[t]);
	}
	UNROLL for (int t = 0; t < NT; t++)
		out[t] = _mm512_reduce_add_ps(_mm512_add_ps(a0[t], a1[t]));
}

/* ---- Q4_0 / Q8_0 weights, Q8_0 activations ---- */

/* Two blocks of signed weights (the 64 values of blocks i, i + 1). */
INLINE __m512i q8_pair(int q4, const void *w, int64_t i)
{
	if (q4) {
		const struct ntx_block_q4_0 *b = (const struct ntx_block_q4_0 *)w + i;
		__m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b[0].qs)),
						    loadu128(b[1].qs), 1);
		/* [b0, b1, b0 >> 4, b1 >> 4] -> [b0 lo, b0 hi, b1 lo, b1 hi] */
		__m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);

		z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
		z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
		return _mm512_sub_epi8(z, _mm512_set1_epi8(8));
	} else {
		const struct ntx_block_q8_0 *b = (const struct ntx_block_q8_0 *)w + i;

		return _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(b[0].qs)), loadu256(b[1].qs), 1);
	}
}

INLINE float q8_scale(int q4, const void *w, int64_t i)
{
	return fp16(q4 ? ((const struct ntx_block_q4_0 *)w)[i].d : ((const struct ntx_block_q8_0 *)w)[i].d);
}

INLINE void row_q8(int q4, int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	const __m512i zero = _mm512_setzero_si512();
	__m512 acc[NTX_TILE_T];
	int64_t nb = n / NTX_QK, i = 0;

	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = _mm512_setzero_ps();
	for (; i + 2 <= nb; i += 2) {
		__m512i wq = q8_pair(q4, w, i);
		__m512i aw = _mm512_abs_epi8(wq);
		__mmask64 neg = _mm512_movepi8_mask(wq);
		float d0 = q8_scale(q4, w, i), d1 = q8_scale(q4, w, i + 1);

		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_0 *xb = XROW(struct ntx_block_q8_0, x, xs, t) + i;
			__m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(xb[0].qs)),
							loadu256(xb[1].qs), 1);
			__m512i p = _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8(xv, neg, zero, xv));
			__m512 s = _mm512_insertf32x8(_mm512_set1_ps(d0 * fp16(xb[0].d)),
						      _mm256_set1_ps(d1 * fp16(xb[1].d)), 1);

			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc[t]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++)
		out[t] = _mm512_reduce_add_ps(acc[t]);
	if (i < nb) { /* odd block count: the last block on 256-bit lanes */
		const struct ntx_block_q4_0 *b4 = (const struct ntx_block_q4_0 *)w + i;
		__m256i wq;

		if (q4) {
			__m128i v = loadu128(b4->qs), m4 = _mm_set1_epi8(0x0F);

			wq = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
			wq = _mm256_sub_epi8(wq, _mm256_set1_epi8(8));
		} else {
			wq = loadu256(((const struct ntx_block_q8_0 *)w)[i].qs);
		}
		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_0 *xb = XROW(struct ntx_block_q8_0, x, xs, t) + i;
			__m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wq),
							_mm256_sign_epi8(loadu256(xb->qs), wq));

			out[t] += hsum_ps256(_mm256_cvtepi32_ps(p)) * (q8_scale(q4, w, i) * fp16(xb->d));
		}
	}
}

/* ---- Q4_K / Q5_K weights, Q8_K activations ---- */

/* The 256 4- or 5-bit values of a super-block in element order, 64 per
 * register: W[k] = sub-blocks 2k, 2k + 1. */
INLINE void q4_k_unpack(int q5, const uint8_t *qs, const uint8_t *qh, __m512i W[4])
{
	const __m512i m4 = _mm512_set1_epi8(0x0F);

	UNROLL for (int h = 0; h < 2; h++) {
		__m512i q = loadu512(qs + 64 * h); /* sub-blocks 4h..4h+3, nibbles interleaved */
		__m512i lo = _mm512_and_si512(q, m4);                        /* [4h | 4h+2] */
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);  /* [4h+1 | 4h+3] */

		W[2 * h] = _mm512_shuffle_i64x2(lo, hi, 0x44);
		W[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, 0xEE);
	}
	if (q5) {
		/* bit 2k of qh[l] is the fifth bit of element 64k + l, bit 2k + 1 that of 64k + 32 + l */
		const __m512i hh = _mm512_broadcast_i64x4(loadu256(qh));
		const __m512i base = _mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(2), 1);
		const __m512i c16 = _mm512_set1_epi8(16);

		UNROLL for (int k = 0; k < 4; k++) {
			__mmask64 m = _mm512_test_epi8_mask(hh, _mm512_slli_epi16(base, 2 * k));

			W[k] = _mm512_mask_add_epi8(W[k], m, W[k], c16);
		}
	}
}

INLINE void row_q4_k(int q5, int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	/* pshufb masks: int16 scale of sub-block 2k in lanes 0-1, 2k + 1 in lanes 2-3 */
	const __m512i lanesel = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);
	__m512 acc[NTX_TILE_T];
	__m256 accm[NTX_TILE_T];
	int64_t nb = n / NTX_QK_K;

	UNROLL for (int t = 0; t < NT; t++) {
		acc[t] = _mm512_setzero_ps();
		accm[t] = _mm256_setzero_ps();
	}
	for (int64_t i = 0; i < nb; i++) {
		const struct ntx_block_q4_k *b4 = (const struct ntx_block_q4_k *)w + i;
		const struct ntx_block_q5_k *b5 = (const struct ntx_block_q5_k *)w + i;
		float d = fp16(q5 ? b5->d : b4->d), dmin = fp16(q5 ? b5->dmin : b4->dmin);
		__m512i W[4], S[4], bsc;
		__m256i mdup;
		uint64_t sc, mn;

		ntx_k_scales8(q5 ? b5->scales : b4->scales, &sc, &mn);
		q4_k_unpack(q5, q5 ? b5->qs : b4->qs, b5->qh, W);
		bsc = _mm512_set1_epi64((long long)sc);
		UNROLL for (int k = 0; k < 4; k++)
			S[k] = _mm512_shuffle_epi8(bsc, _mm512_add_epi16(_mm512_set1_epi16((short)(0x8000 | 2 * k)), lanesel));
		mdup = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_cvtsi64_si128((long long)mn),
							      _mm_cvtsi64_si128((long long)mn)));
		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_k *xb = XROW(struct ntx_block_q8_k, x, xs, t) + i;
			__m512i s = _mm512_setzero_si512();

			UNROLL for (int k = 0; k < 4; k++)
				s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(W[k], loadu512(xb->qs + 64 * k)), S[k]);
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d * xb->d), acc[t]);
			accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mdup, loadu256(xb->bsums))),
						  _mm256_set1_ps(dmin * xb->d), accm[t]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++)
		out[t] = _mm512_reduce_add_ps(acc[t]) - hsum_ps256(accm[t]);
}

/* ---- Q6_K weights, Q8_K activations ---- */

/* The 256 6-bit values (unsigned, before - 32) in element order, 64 per
 * register: W[c] = elements 64c .. 64c + 63 (sub-blocks 4c .. 4c + 3). */
INLINE void q6_k_unpack(const struct ntx_block_q6_k *b, __m512i W[4])
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
	/* per 16-bit lane shifts moving the 2 high bits of each quarter to bits 4-5 */
	const __m512i sl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
	const __m512i sr23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);

	UNROLL for (int h = 0; h < 2; h++) {
		__m512i l = loadu512(b->ql + 64 * h);
		__m512i hh = _mm512_broadcast_i64x4(loadu256(b->qh + 32 * h));
		__m512i lo = _mm512_and_si512(l, m4);                       /* quarters 0, 1 */
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(l, 4), m4); /* quarters 2, 3 */

		/* a | (b & c) */
		W[2 * h] = _mm512_ternarylogic_epi32(lo, _mm512_sllv_epi16(hh, sl01), m30, 0xF8);
		W[2 * h + 1] = _mm512_ternarylogic_epi32(hi, _mm512_srlv_epi16(hh, sr23), m30, 0xF8);
	}
}

INLINE void row_q6_k(int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	__m512i idx[4];
	__m512 acc[NTX_TILE_T];
	int64_t nb = n / NTX_QK_K;

	/* vpermw indices: scale 4c + lane for each 128-bit lane */
	UNROLL for (int c = 0; c < 4; c++)
		idx[c] = _mm512_add_epi16(_mm512_set1_epi16((short)(4 * c)),
					  _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(
								     _mm_set1_epi16(1), _mm_setzero_si128())),
							     _mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(2)), 1));
	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = _mm512_setzero_ps();
	for (int64_t i = 0; i < nb; i++) {
		const struct ntx_block_q6_k *b = (const struct ntx_block_q6_k *)w + i;
		__m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b->scales));
		float d = fp16(b->d);
		__m512i W[4], S[4];

		q6_k_unpack(b, W);
		UNROLL for (int c = 0; c < 4; c++)
			S[c] = _mm512_permutexvar_epi16(idx[c], _mm512_castsi256_si512(sc16));
		UNROLL for (int t = 0; t < NT; t++) {
			const struct ntx_block_q8_k *xb = XROW(struct ntx_block_q8_k, x, xs, t) + i;
			__m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(xb->bsums)), 5);
			__m512i s = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));

			UNROLL for (int c = 0; c < 4; c++)
				s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(W[c], loadu512(xb->qs + 64 * c)), S[c]);
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d * xb->d), acc[t]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++)
		out[t] = _mm512_reduce_add_ps(acc[t]);
}

/* ---- tiles ---- */

#define TILE(name, call)                                                                          \
	static void name(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,   \
			 int nt, float *y, int64_t ldy)                                           \
	{                                                                                         \
		for (int r = 0; r < nr; r++) {                                                    \
			const void *wr = (const char *)w + (size_t)r * ws;                        \
			for (int t0 = 0; t0 < nt; t0 += NTX_TILE_T) {                             \
				const void *xt = (const char *)x + (size_t)t0 * xs;               \
				int k = nt - t0 < NTX_TILE_T ? nt - t0 : NTX_TILE_T;              \
				float out[NTX_TILE_T];                                            \
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
#define CALL_Q4_0(wr, xt, NT, out) row_q8(1, n, wr, xt, xs, NT, out)
#define CALL_Q8_0(wr, xt, NT, out) row_q8(0, n, wr, xt, xs, NT, out)
#define CALL_Q4_K(wr, xt, NT, out) row_q4_k(0, n, wr, xt, xs, NT, out)
#define CALL_Q5_K(wr, xt, NT, out) row_q4_k(1, n, wr, xt, xs, NT, out)
#define CALL_Q6_K(wr, xt, NT, out) row_q6_k(n, wr, xt, xs, NT, out)

TILE(tile_f32, CALL_F32)
TILE(tile_f16, CALL_F16)
TILE(tile_bf16, CALL_BF16)
TILE(tile_q4_0, CALL_Q4_0)
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
	case NTX_TYPE_Q8_0: return tile_q8_0;
	case NTX_TYPE_Q4_K: return tile_q4_k;
	case NTX_TYPE_Q5_K: return tile_q5_k;
	case NTX_TYPE_Q6_K: return tile_q6_k;
	default: return NULL;
	}
}

const struct ntx_cpu_isa ntx_cpu_isa_avx512 = {
	"avx512 vnni",
	ntx_dequant_row_avx2,
	ntx_quantize_act_avx2,
	tile_for,
};
