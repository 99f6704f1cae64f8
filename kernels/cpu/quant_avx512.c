/* quant_avx512.c - AVX-512 (F, BW, VL, DQ) + VNNI dot-product kernels (built
 * with those flags, called only when the CPU has them). Dequantization and
 * activation quantization are memory-bound and come from quant_avx2.c.
 *
 * Activations are "prepared" once per matmul (ntx_vec_dot: per chunk, on the
 * stack): the quantized values are copied into a 64-byte aligned array in the
 * order the weight registers come out of the nibble unpacking, next to float
 * block scales and precomputed integer sums. The inner loops are then plain
 * aligned loads, integer dots and one float FMA per 64 elements:
 *   Q8_0: vpdpbusd on |w| and sign(w) * x, 2 blocks per register;
 *   Q4_0: vpdpbusd on the unsigned nibbles, 4 blocks per register, with the
 *         -8 * sum(x) offset as the accumulator's starting value;
 *   Q4_K/Q5_K/Q6_K: maddubs (u8 x s8 -> s16 pairs), then vpdpwssd with the
 *         int16 sub-block scales; mins and the Q6_K offset through sums of x.
 * Every integer is exact; only the float accumulation order differs from the
 * reference. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu_impl.h"
#include "kquant_avx512.h"

#define XROW(T, x, xs, t) ((const T *)((const char *)(x) + (size_t)(t) * (xs)))
#define AT(T, x, off) ((T *)((char *)(x) + (off)))
#define CAT(T, x, off) ((const T *)((const char *)(x) + (off)))

/* Software prefetch of the weight stream: the cache lines that start in
 * [p + d, p + d + len), d = PF_DIST_<type> bytes ahead of the block being
 * read, so that each line is asked for once as the loop moves on by len.
 * Rows are read one after the other (one stream per thread: interleaving
 * rows looks faster in cache but loses a third of the memory bandwidth), so
 * this runs on into the next row; prefetches past the end are harmless.
 * Distances measured on Zen 4 (DRAM-fed GEMV); 0 = none. */
#define PREFETCH(p, d, len)                                                                       \
	do {                                                                                      \
		uintptr_t a_ = ((uintptr_t)(p) + (d) + 63) & ~(uintptr_t)63;                     \
		for (; (d) && a_ < (uintptr_t)(p) + (d) + (len); a_ += 64)                        \
			_mm_prefetch((const char *)a_, _MM_HINT_T0);                              \
	} while (0)
#ifndef PF_DIST_Q8_0
#define PF_DIST_Q8_0 0 /* the hardware prefetcher keeps up; software ones cost 5-15% */
#endif
#ifndef PF_DIST_Q4_0
#define PF_DIST_Q4_0 4096 /* +7% with 2 MiB pages */
#endif
#ifndef PF_DIST_Q4_K
#define PF_DIST_Q4_K 4096 /* +20% (Q4_K and Q5_K), 4 KiB or 2 MiB pages */
#endif
#ifndef PF_DIST_Q6_K
#define PF_DIST_Q6_K 4096 /* +23% with 2 MiB pages */
#endif

/* ---- helpers ---- */

static inline float hsum_ps256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
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

INLINE void row_float(uint32_t type, int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT,
		      float *outR)
{
	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		float *out = outR + r * NTX_TILE_T;

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
}

/* ---- prepared activations ----
 *
 * One row of n elements: qs (n int8, order below) at 0, then 64-aligned
 *   d:   float scale per block (32 or 256 elements);
 *   ext: Q4_0: per group of 4 blocks, 16 int32: lane 4b = -8 * sum of
 *              block b's quants, other lanes 0 (the dpbusd start value);
 *        Q4_K/Q5_K: per super-block 8 int16, the sums of each 32;
 *        Q6_K: per super-block the 16 bsums.
 * qs order: Q8_0, Q6_K: natural. Q4_0: per group of k <= 4 blocks, the first
 * halves (16 each) of the k blocks, then their second halves. Q4_K/Q5_K: per
 * super-block, sub-blocks 0 2 1 3 4 6 5 7 (how the nibbles unpack). */

struct layout {
	size_t d, ext, total;
};

static size_t al64(size_t v)
{
	return (v + 63) & ~(size_t)63;
}

static struct layout layout_of(uint32_t wtype, int64_t n)
{
	struct layout L = { al64((size_t)n), 0, 0 };
	size_t nb = (size_t)n / (wtype == NTX_TYPE_Q4_0 || wtype == NTX_TYPE_Q8_0 ? NTX_QK : NTX_QK_K);

	L.ext = L.d + al64(nb * sizeof(float));
	switch (wtype) {
	case NTX_TYPE_Q8_0:
		L.total = L.ext;
		break;
	case NTX_TYPE_Q4_0:
		L.total = L.ext + (nb + 3) / 4 * 64;
		break;
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
		L.total = L.ext + al64(nb * 16);
		break;
	case NTX_TYPE_Q6_K:
		L.total = L.ext + al64(nb * 32);
		break;
	default:
		L.total = 0;
		break;
	}
	return L;
}

static size_t prep_bytes(uint32_t wtype, int64_t n)
{
	return layout_of(wtype, n).total;
}

static void prepare(uint32_t wtype, const void *xq, void *xp, int64_t n)
{
	struct layout L = layout_of(wtype, n);
	int8_t *qs = xp;
	float *d = AT(float, xp, L.d);

	if (wtype == NTX_TYPE_Q8_0 || wtype == NTX_TYPE_Q4_0) {
		const struct ntx_block_q8_0 *b = xq;
		int64_t nb = n / NTX_QK;

		for (int64_t i = 0; i < nb; i++)
			d[i] = _cvtsh_ss(b[i].d);
		if (wtype == NTX_TYPE_Q8_0) {
			for (int64_t i = 0; i < nb; i++)
				memcpy(qs + NTX_QK * i, b[i].qs, NTX_QK);
			return;
		}
		for (int64_t g = 0; g < (nb + 3) / 4; g++) {
			int k = nb - 4 * g < 4 ? (int)(nb - 4 * g) : 4;
			int32_t *init = AT(int32_t, xp, L.ext) + 16 * g;

			memset(init, 0, 64);
			for (int j = 0; j < k; j++) {
				const struct ntx_block_q8_0 *bj = b + 4 * g + j;
				int sum = 0;

				memcpy(qs + 128 * g + 16 * j, bj->qs, 16);
				memcpy(qs + 128 * g + 16 * k + 16 * j, bj->qs + 16, 16);
				for (int l = 0; l < NTX_QK; l++)
					sum += bj->qs[l];
				init[4 * j] = -8 * sum;
			}
		}
	} else {
		const struct ntx_block_q8_k *b = xq;
		static const int order[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };
		int q6 = wtype == NTX_TYPE_Q6_K;

		for (int64_t i = 0; i < n / NTX_QK_K; i++, b++) {
			int16_t *ext = AT(int16_t, xp, L.ext) + (q6 ? 16 : 8) * i;

			d[i] = b->d;
			for (int j = 0; j < 8; j++)
				memcpy(qs + NTX_QK_K * i + 32 * j, b->qs + 32 * (q6 ? j : order[j]), 32);
			for (int j = 0; j < (q6 ? 16 : 8); j++)
				ext[j] = q6 ? b->bsums[j] : (int16_t)(b->bsums[2 * j] + b->bsums[2 * j + 1]);
		}
	}
}

/* ---- Q8_0 and Q4_0 weights ---- */

/* fp16 scales of 8 consecutive blocks (stride bytes apart) as floats: the
 * gather reads 4 bytes at each block start (d and the first 2 quants). */
INLINE __m256 scales8(const void *b, int stride)
{
#ifdef USE_GATHER
	__m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));

	return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_i32gather_epi32((const int *)b, idx, 1)));
#else
	const char *p = b;
	uint16_t h;
	__m128i v;

	memcpy(&h, p, 2);
	v = _mm_cvtsi32_si128(h);
#define INS(k)                                   \
	memcpy(&h, p + (k) * stride, 2);         \
	v = _mm_insert_epi16(v, h, k);
	INS(1) INS(2) INS(3) INS(4) INS(5) INS(6) INS(7)
#undef INS
	return _mm256_cvtph_ps(v);
#endif
}

/* permutexvar index: float j of the 8 scales in lanes [16/k * j ...] */
INLINE __m512i spread(int first, int per)
{
	__m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

	return _mm512_add_epi32(_mm512_set1_epi32(first), _mm512_srli_epi32(lane, per == 8 ? 3 : 2));
}

INLINE void row_q8_0(int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT, float *outR)
{
	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		float *out = outR + r * NTX_TILE_T;

		const struct ntx_block_q8_0 *wb = w;
		const struct layout L = layout_of(NTX_TYPE_Q8_0, n);
		const __m512i zero = _mm512_setzero_si512();
		int64_t nb = n / NTX_QK, i = 0;
		__m512 acc[NTX_TILE_T];

		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm512_setzero_ps();
		for (; i + 8 <= nb; i += 8) {
			__m256 dw = scales8(wb + i, sizeof *wb);
			__m512 s8[NTX_TILE_T];

			PREFETCH(wb + i, PF_DIST_Q8_0, 8 * 34);
			UNROLL for (int t = 0; t < NT; t++)
				s8[t] = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_load_ps(CAT(float, XROW(char, x, xs, t), L.d) + i)));
			UNROLL for (int p = 0; p < 4; p++) {
				const struct ntx_block_q8_0 *b = wb + i + 2 * p;
				__m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(b[0].qs)), loadu256(b[1].qs), 1);
				__m512i aw = _mm512_abs_epi8(wq);
				__mmask64 neg = _mm512_movepi8_mask(wq);
				__m512i idx = spread(2 * p, 8);

				UNROLL for (int t = 0; t < NT; t++) {
					__m512i xv = _mm512_load_si512(XROW(int8_t, x, xs, t) + NTX_QK * (i + 2 * p));
					__m512i pr = _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8(xv, neg, zero, xv));

					acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pr), _mm512_permutexvar_ps(idx, s8[t]), acc[t]);
				}
			}
		}
		UNROLL for (int t = 0; t < NT; t++)
			out[t] = _mm512_reduce_add_ps(acc[t]);
		for (; i < nb; i++) {
			__m256i wq = loadu256(wb[i].qs);

			UNROLL for (int t = 0; t < NT; t++) {
				const int8_t *xq = XROW(int8_t, x, xs, t) + NTX_QK * i;
				__m256i pr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wq),
								 _mm256_sign_epi8(loadu256(xq), wq));

				out[t] += hsum_ps256(_mm256_cvtepi32_ps(pr)) *
					  (_cvtsh_ss(wb[i].d) * CAT(float, XROW(char, x, xs, t), L.d)[i]);
			}
		}
	}
}

INLINE void row_q4_0(int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT, float *outR)
{
	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		float *out = outR + r * NTX_TILE_T;

		const struct ntx_block_q4_0 *wb = w;
		const struct layout L = layout_of(NTX_TYPE_Q4_0, n);
		const __m512i m4 = _mm512_set1_epi8(0x0F);
		int64_t nb = n / NTX_QK, i = 0;
		__m512 acc[NTX_TILE_T];

		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm512_setzero_ps();
		for (; i + 8 <= nb; i += 8) {
			__m256 dw = scales8(wb + i, sizeof *wb);
			__m512 s8[NTX_TILE_T];

			PREFETCH(wb + i, PF_DIST_Q4_0, 8 * 18);
			UNROLL for (int t = 0; t < NT; t++)
				s8[t] = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_load_ps(CAT(float, XROW(char, x, xs, t), L.d) + i)));
			UNROLL for (int g = 0; g < 2; g++) {
				const struct ntx_block_q4_0 *b = wb + i + 4 * g;
				int64_t G = i / 4 + g;
				__m512i v = _mm512_castsi128_si512(loadu128(b[0].qs));
				__m512i lo, hi, idx = spread(4 * g, 4);

				v = _mm512_inserti32x4(v, loadu128(b[1].qs), 1);
				v = _mm512_inserti32x4(v, loadu128(b[2].qs), 2);
				v = _mm512_inserti32x4(v, loadu128(b[3].qs), 3);
				lo = _mm512_and_si512(v, m4);
				hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
				UNROLL for (int t = 0; t < NT; t++) {
					const char *xr = XROW(char, x, xs, t);
					__m512i pr = _mm512_load_si512(CAT(int32_t, xr, L.ext) + 16 * G);

					pr = _mm512_dpbusd_epi32(pr, lo, _mm512_load_si512(xr + 128 * G));
					pr = _mm512_dpbusd_epi32(pr, hi, _mm512_load_si512(xr + 128 * G + 64));
					acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pr), _mm512_permutexvar_ps(idx, s8[t]), acc[t]);
				}
			}
		}
		UNROLL for (int t = 0; t < NT; t++)
			out[t] = _mm512_reduce_add_ps(acc[t]);
		for (; i < nb; i++) { /* blocks of the last, possibly short, groups */
			int64_t G = i / 4;
			int j = (int)(i % 4), k = nb - 4 * G < 4 ? (int)(nb - 4 * G) : 4;
			__m128i v = loadu128(wb[i].qs), m = _mm_set1_epi8(0x0F);
			__m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);

			UNROLL for (int t = 0; t < NT; t++) {
				const char *xr = XROW(char, x, xs, t);
				__m128i pr = _mm_dpbusd_epi32(_mm_setzero_si128(), lo, loadu128(xr + 128 * G + 16 * j));
				int sum;

				pr = _mm_dpbusd_epi32(pr, hi, loadu128(xr + 128 * G + 16 * k + 16 * j));
				pr = _mm_add_epi32(pr, _mm_shuffle_epi32(pr, 0x4E));
				pr = _mm_add_epi32(pr, _mm_shuffle_epi32(pr, 0xB1));
				sum = _mm_cvtsi128_si32(pr) + CAT(int32_t, xr, L.ext)[16 * G + 4 * j];
				out[t] += (float)sum * (_cvtsh_ss(wb[i].d) * CAT(float, xr, L.d)[i]);
			}
		}
	}
}

/* Q8_0 in the canonical arithmetic (cpu_impl.h): per row and token four
 * float lanes, block b (32 elements) updating lane b % 4 with
 * a = fma((float)P_b, dw_b * dx_b, a), P_b the block's exact integer dot;
 * (a_0 + a_2) + (a_1 + a_3). Eight blocks at a time, as row_q8_0 reads them
 * (|w| and sign decoded once for all tokens, 64-byte dpbusd: 8 lanes a
 * block); each quad of blocks reduced together. Blocks past the last
 * multiple of 8 go one at a time into the same lanes. */
INLINE void row_q8_0_canon(int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT,
			   float *outR)
{
	const struct layout L = layout_of(NTX_TYPE_Q8_0, n);
	const __m512i zero = _mm512_setzero_si512();
	const int64_t nb = n / NTX_QK;

	for (int r = 0; r < R; r++) {
		const struct ntx_block_q8_0 *wb = (const struct ntx_block_q8_0 *)((const char *)w0 + (size_t)r * ws);
		__m128 acc[NTX_TILE_T];
		int64_t i = 0;

		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm_setzero_ps();
		for (; i + 8 <= nb; i += 8) {
			const __m256 dw = scales8(wb + i, sizeof *wb);
			__m512i aw[4];
			__mmask64 neg[4];

			PREFETCH(wb + i, PF_DIST_Q8_0, 8 * 34);
			UNROLL for (int p = 0; p < 4; p++) {
				const struct ntx_block_q8_0 *bp = wb + i + 2 * p;
				__m512i wq = _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(bp[0].qs)), loadu256(bp[1].qs), 1);

				aw[p] = _mm512_abs_epi8(wq);
				neg[p] = _mm512_movepi8_mask(wq);
			}
			UNROLL for (int t = 0; t < NT; t++) {
				const int8_t *xq = XROW(int8_t, x, xs, t) + NTX_QK * i;
				const __m256 D = _mm256_mul_ps(dw, _mm256_load_ps(CAT(float, XROW(char, x, xs, t), L.d) + i));
				__m512i pr[4];

				UNROLL for (int p = 0; p < 4; p++) {
					__m512i xv = _mm512_load_si512(xq + 64 * p);

					pr[p] = _mm512_dpbusd_epi32(zero, aw[p], _mm512_mask_sub_epi8(xv, neg[p], zero, xv));
				}
				acc[t] = _mm_fmadd_ps(lane_sums4(pair_halves(pr[0], pr[1])), _mm256_castps256_ps128(D), acc[t]);
				acc[t] = _mm_fmadd_ps(lane_sums4(pair_halves(pr[2], pr[3])), _mm256_extractf128_ps(D, 1), acc[t]);
			}
		}
		for (; i < nb; i++) {
			const __m256i wq = loadu256(wb[i].qs);
			const float dwi = _cvtsh_ss(wb[i].d);
			const __mmask8 lane = (__mmask8)(1u << (i & 3));

			UNROLL for (int t = 0; t < NT; t++) {
				const char *xr = XROW(char, x, xs, t);
				__m256i pr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wq),
								 _mm256_sign_epi8(loadu256(xr + NTX_QK * i), wq));
				__m128i p4 = _mm_add_epi32(_mm256_castsi256_si128(pr), _mm256_extracti128_si256(pr, 1));
				__m128 P = lane_sums4(_mm512_zextsi128_si512(p4)); /* lane 0 */

				acc[t] = _mm_mask3_fmadd_ps(_mm_broadcastss_ps(P), _mm_set1_ps(dwi * CAT(float, xr, L.d)[i]),
							    acc[t], lane);
			}
		}
		UNROLL for (int t = 0; t < NT; t++) {
			__m128 h = _mm_add_ps(acc[t], _mm_movehl_ps(acc[t], acc[t]));

			outR[r * NTX_TILE_T + t] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
		}
	}
}

/* ---- Q4_K / Q5_K weights ---- */

/* One Q4_K / Q5_K super-block decoded for the maddubs + dpwssd dot: W[k]
 * the unsigned values of sub-blocks (0,2) (1,3) (4,6) (5,7), S[k] their int16
 * scales, m16 the 8 mins, d and dmin. */
struct kblk {
	__m512i W[4], S[4];
	__m128i m16;
	float d, dmin;
};

INLINE void k_block(int q5, const void *w, int64_t i, struct kblk *k)
{
	const __m512i sel[4] = { scale_sel(0, 2), scale_sel(1, 3), scale_sel(4, 6), scale_sel(5, 7) };
	const struct ntx_block_q4_k *b4 = (const struct ntx_block_q4_k *)w + i;
	const struct ntx_block_q5_k *b5 = (const struct ntx_block_q5_k *)w + i;
	__m512i bsc;
	uint64_t sc, mn;

	PREFETCH(q5 ? (const void *)b5 : (const void *)b4, PF_DIST_Q4_K, q5 ? 176 : 144);
	k->d = _cvtsh_ss(q5 ? b5->d : b4->d);
	k->dmin = _cvtsh_ss(q5 ? b5->dmin : b4->dmin);
	ntx_k_scales8(q5 ? b5->scales : b4->scales, &sc, &mn);
	bsc = _mm512_set1_epi64((long long)sc);
	k->m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
	k_values(q5, q5 ? (const void *)b5 : (const void *)b4, k->W);
	UNROLL for (int j = 0; j < 4; j++)
		k->S[j] = _mm512_shuffle_epi8(bsc, sel[j]);
}

/* The block's exact integers against one token's prepared quants xq and
 * sums ext: *s (16 lanes adding up to I), *mins (4 lanes adding up to M). */
INLINE void k_dot(const struct kblk *k, const int8_t *xq, const __m128i *ext, __m512i *s, __m128i *mins)
{
	__m512i v = _mm512_setzero_si512();

	UNROLL for (int j = 0; j < 4; j++)
		v = _mm512_dpwssd_epi32(v, _mm512_maddubs_epi16(k->W[j], _mm512_load_si512(xq + 64 * j)), k->S[j]);
	*s = v;
	*mins = _mm_madd_epi16(k->m16, _mm_load_si128(ext));
}

/* Sums kept in 16 float lanes per token; several tokens share the decode. */
INLINE void row_q4_k(int q5, int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT,
		     float *outR)
{
	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		float *out = outR + r * NTX_TILE_T;

		const struct layout L = layout_of(NTX_TYPE_Q4_K, n);
		__m512 acc[NTX_TILE_T];
		__m128 accm[NTX_TILE_T];
		int64_t nb = n / NTX_QK_K;

		UNROLL for (int t = 0; t < NT; t++) {
			acc[t] = _mm512_setzero_ps();
			accm[t] = _mm_setzero_ps();
		}
		for (int64_t i = 0; i < nb; i++) {
			struct kblk k;

			k_block(q5, w, i, &k);
			UNROLL for (int t = 0; t < NT; t++) {
				const char *xr = XROW(char, x, xs, t);
				float dx = CAT(float, xr, L.d)[i];
				__m512i s;
				__m128i mins;

				k_dot(&k, (const int8_t *)xr + NTX_QK_K * i, CAT(__m128i, xr, L.ext) + i, &s, &mins);
				acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(k.d * dx), acc[t]);
				accm[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(mins), _mm_set1_ps(k.dmin * dx), accm[t]);
			}
		}
		UNROLL for (int t = 0; t < NT; t++) {
			__m128 m = _mm_add_ps(accm[t], _mm_movehl_ps(accm[t], accm[t]));

			m = _mm_add_ss(m, _mm_movehdup_ps(m));
			out[t] = _mm512_reduce_add_ps(acc[t]) - _mm_cvtss_f32(m);
		}
	}
}

/* [I0, I1, I2, I3] and [M0, M1, M2, M3] of four blocks from their k_dot
 * results (16 and 4 lanes each), as floats: pairs of 256-bit halves, then
 * pairs of 128-bit lanes, then the 4 lanes of each 128-bit lane. */
INLINE void k_reduce4(const __m512i *s, const __m128i *m, __m128 *fi, __m128 *fm)
{
	__m512i p01 = _mm512_add_epi32(_mm512_shuffle_i64x2(s[0], s[1], 0x44), _mm512_shuffle_i64x2(s[0], s[1], 0xEE));
	__m512i p23 = _mm512_add_epi32(_mm512_shuffle_i64x2(s[2], s[3], 0x44), _mm512_shuffle_i64x2(s[2], s[3], 0xEE));

	*fi = lane_sums4(pair_halves(p01, p23));
	if (m) /* Q6_K has no mins */
		*fm = lane_sums4(_mm512_inserti32x4(
			_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(m[0]), m[1], 1), m[2], 2), m[3], 3));
}

/* Four blocks' integers into the lanes (live: the lanes that have a block). */
INLINE __m128 k_canon4(__m128 acc, const __m512i *s, const __m128i *m, const float *dx, __m128 vd, __m128 vdm,
		       __mmask8 live)
{
	__m128 fi, fm, x4 = _mm_maskz_loadu_ps(live, dx);

	k_reduce4(s, m, &fi, &fm);
	acc = _mm_mask3_fmadd_ps(fi, _mm_mul_ps(x4, vd), acc, live);
	return _mm_mask3_fnmadd_ps(fm, _mm_mul_ps(x4, vdm), acc, live);
}

/* Blocks i0 .. i0 + k4 - 1 (k4 <= 4) for NT tokens into the lanes of acc:
 * each block decoded once for all tokens, its integers parked until the
 * four are in, then reduced together and applied in one FMA pair. */
INLINE void k_quad(int q5, const void *w, int64_t i0, int k4, const struct layout *L, const void *x, size_t xs,
		   int NT, __m128 *acc)
{
	__m512i sv[NTX_TILE_T][4];
	__m128i mv[NTX_TILE_T][4];
	float d4[4] = { 0, 0, 0, 0 }, dm4[4] = { 0, 0, 0, 0 };

	UNROLL for (int k = 0; k < 4; k++) {
		struct kblk kb;

		UNROLL for (int t = 0; t < NT; t++)
			sv[t][k] = _mm512_setzero_si512(), mv[t][k] = _mm_setzero_si128();
		if (k >= k4)
			continue;
		k_block(q5, w, i0 + k, &kb);
		d4[k] = kb.d, dm4[k] = kb.dmin;
		UNROLL for (int t = 0; t < NT; t++) {
			const char *xr = XROW(char, x, xs, t);

			k_dot(&kb, (const int8_t *)xr + NTX_QK_K * (i0 + k), CAT(__m128i, xr, L->ext) + i0 + k, &sv[t][k],
			      &mv[t][k]);
		}
	}
	UNROLL for (int t = 0; t < NT; t++)
		acc[t] = k_canon4(acc[t], sv[t], mv[t], CAT(float, XROW(char, x, xs, t), L->d) + i0, _mm_loadu_ps(d4),
				  _mm_loadu_ps(dm4), (__mmask8)((1u << k4) - 1));
}

/* ---- Q6_K weights ---- */

/* One Q6_K super-block decoded: W[c] the unsigned values (q6_k_unpack), S[c]
 * the int16 sub-block scales per 128-bit lane, sc16 the 16 scales, d. */
struct q6blk {
	__m512i W[4], S[4];
	__m256i sc16;
	float d;
};

INLINE void q6_block(const void *w, int64_t i, struct q6blk *k)
{
	const struct ntx_block_q6_k *b = (const struct ntx_block_q6_k *)w + i;
	/* vpermw indices: scale 4c + lane for each 128-bit lane */
	const __m512i lanes = _mm512_inserti64x4(
		_mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(1), _mm_setzero_si128())),
		_mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(2)), 1);

	PREFETCH(b, PF_DIST_Q6_K, 210);
	k->sc16 = _mm256_cvtepi8_epi16(loadu128(b->scales));
	k->d = _cvtsh_ss(b->d);
	q6_k_unpack(b, k->W);
	UNROLL for (int c = 0; c < 4; c++)
		k->S[c] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set1_epi16((short)(4 * c)), lanes),
						   _mm512_castsi256_si512(k->sc16));
}

/* The block's exact integer I = sum_j sc_j sum_{i in j} (q_i - 32) x_i,
 * spread over 16 lanes, against one token's quants xq and 16 sums bs. */
INLINE __m512i q6_dot(const struct q6blk *k, const int8_t *xq, const __m256i *bs)
{
	__m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(k->sc16, _mm256_load_si256(bs)), 5);
	__m512i s = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(corr));

	UNROLL for (int c = 0; c < 4; c++)
		s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(k->W[c], _mm512_load_si512(xq + 64 * c)), k->S[c]);
	return s;
}

INLINE void row_q6_k(int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT, float *outR)
{
	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		float *out = outR + r * NTX_TILE_T;

		const struct layout L = layout_of(NTX_TYPE_Q6_K, n);
		__m512 acc[NTX_TILE_T];
		int64_t nb = n / NTX_QK_K;

		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm512_setzero_ps();
		for (int64_t i = 0; i < nb; i++) {
			struct q6blk k;

			q6_block(w, i, &k);
			UNROLL for (int t = 0; t < NT; t++) {
				const char *xr = XROW(char, x, xs, t);
				__m512i s = q6_dot(&k, (const int8_t *)xr + NTX_QK_K * i, CAT(__m256i, xr, L.ext) + i);

				acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(k.d * CAT(float, xr, L.d)[i]), acc[t]);
			}
		}
		UNROLL for (int t = 0; t < NT; t++)
			out[t] = _mm512_reduce_add_ps(acc[t]);
	}
}

/* Blocks i0 .. i0 + k4 - 1 of Q6_K in the canonical arithmetic (k_quad's,
 * with no mins). */
INLINE void q6_quad(const void *w, int64_t i0, int k4, const struct layout *L, const void *x, size_t xs, int NT,
		    __m128 *acc)
{
	__m512i sv[NTX_TILE_T][4];
	float d4[4] = { 0, 0, 0, 0 };

	UNROLL for (int k = 0; k < 4; k++) {
		struct q6blk kb;

		UNROLL for (int t = 0; t < NT; t++)
			sv[t][k] = _mm512_setzero_si512();
		if (k >= k4)
			continue;
		q6_block(w, i0 + k, &kb);
		d4[k] = kb.d;
		UNROLL for (int t = 0; t < NT; t++) {
			const char *xr = XROW(char, x, xs, t);

			sv[t][k] = q6_dot(&kb, (const int8_t *)xr + NTX_QK_K * (i0 + k), CAT(__m256i, xr, L->ext) + i0 + k);
		}
	}
	UNROLL for (int t = 0; t < NT; t++) {
		const __mmask8 live = (__mmask8)((1u << k4) - 1);
		__m128 fi, x4 = _mm_maskz_loadu_ps(live, CAT(float, XROW(char, x, xs, t), L->d) + i0);

		k_reduce4(sv[t], NULL, &fi, NULL);
		acc[t] = _mm_mask3_fmadd_ps(fi, _mm_mul_ps(x4, _mm_loadu_ps(d4)), acc[t], live);
	}
}

INLINE void kq_quad(int kind, const void *w, int64_t i0, int k4, const struct layout *L, const void *x,
		    size_t xs, int NT, __m128 *acc)
{
	if (kind == 2)
		q6_quad(w, i0, k4, L, x, xs, NT, acc);
	else
		k_quad(kind, w, i0, k4, L, x, xs, NT, acc);
}

/* The canonical arithmetic (cpu_impl.h) of the K-quants for NT tokens, four
 * blocks at a time (the missing lanes of a last, shorter quad keep their
 * sums): kind 0 Q4_K, 1 Q5_K, 2 Q6_K (a constant at every call). */
INLINE void row_kq_canon(int kind, int64_t n, const void *w0, size_t ws, int R, const void *x,
			 size_t xs, int NT, float *outR)
{
	const struct layout L = layout_of(kind == 2 ? NTX_TYPE_Q6_K : NTX_TYPE_Q4_K, n);
	const int64_t nb = n / NTX_QK_K;

	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		__m128 acc[NTX_TILE_T];

		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm_setzero_ps();
		int64_t i0 = 0;

		for (; i0 + 4 <= nb; i0 += 4)
			kq_quad(kind, w, i0, 4, &L, x, xs, NT, acc);
		if (i0 < nb)
			kq_quad(kind, w, i0, (int)(nb - i0), &L, x, xs, NT, acc);
		UNROLL for (int t = 0; t < NT; t++) {
			__m128 h = _mm_add_ps(acc[t], _mm_movehl_ps(acc[t], acc[t])); /* (0+2), (1+3) */

			outR[r * NTX_TILE_T + t] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
		}
	}
}

/* ---- tiles ---- */

/* Expand a row kernel into a tile kernel. Rows are always taken one after
 * the other (one memory stream); a GEMV (one token) passes all nr rows to
 * one call, so that loop-invariant set-up is done once per tile. Several
 * tokens go in groups of up to NTX_TILE_T, each size a compile-time
 * constant. */
_Static_assert(NTX_TILE_T == 4, "the tile switch below covers groups of 1 to 4 tokens");

#define TILE(name, call)                                                                          \
	static void name(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,   \
			 int nt, float *y, int64_t ldy)                                           \
	{                                                                                         \
		float out[NTX_TILE_R * NTX_TILE_T];                                               \
		if (nt == 1) {                                                                    \
			call(w, nr, x, 1, out);                                                   \
			for (int r = 0; r < nr; r++)                                              \
				y[r] = out[r * NTX_TILE_T];                                       \
			return;                                                                   \
		}                                                                                 \
		for (int r = 0; r < nr; r++) {                                                    \
			const void *wr = (const char *)w + (size_t)r * ws;                        \
			for (int t0 = 0; t0 < nt; t0 += NTX_TILE_T) {                             \
				const void *xt = (const char *)x + (size_t)t0 * xs;               \
				int k = nt - t0 < NTX_TILE_T ? nt - t0 : NTX_TILE_T;              \
				switch (k) {                                                      \
				case 1: call(wr, 1, xt, 1, out); break;                           \
				case 2: call(wr, 1, xt, 2, out); break;                           \
				case 3: call(wr, 1, xt, 3, out); break;                           \
				default: call(wr, 1, xt, 4, out); break;                          \
				}                                                                 \
				for (int t = 0; t < k; t++)                                       \
					y[(t0 + t) * ldy + r] = out[t];                           \
			}                                                                         \
		}                                                                                 \
	}

#define CALL_F32(wr, R, xt, NT, out) row_float(NTX_TYPE_F32, n, wr, ws, R, xt, xs, NT, out)
#define CALL_F16(wr, R, xt, NT, out) row_float(NTX_TYPE_F16, n, wr, ws, R, xt, xs, NT, out)
#define CALL_BF16(wr, R, xt, NT, out) row_float(NTX_TYPE_BF16, n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q4_0(wr, R, xt, NT, out) row_q4_0(n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q8_0(wr, R, xt, NT, out) row_q8_0(n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q4_K(wr, R, xt, NT, out) row_q4_k(0, n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q5_K(wr, R, xt, NT, out) row_q4_k(1, n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q6_K(wr, R, xt, NT, out) row_q6_k(n, wr, ws, R, xt, xs, NT, out)

TILE(tile_f32, CALL_F32)
TILE(tile_f16, CALL_F16)
TILE(tile_bf16, CALL_BF16)
TILE(tile_q4_0, CALL_Q4_0)
TILE(tile_q8_0, CALL_Q8_0)
TILE(tile_q4_k, CALL_Q4_K)
TILE(tile_q5_k, CALL_Q5_K)
TILE(tile_q6_k, CALL_Q6_K)
#define CALL_Q4_K_C(wr, R, xt, NT, out) row_kq_canon(0, n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q5_K_C(wr, R, xt, NT, out) row_kq_canon(1, n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q6_K_C(wr, R, xt, NT, out) row_kq_canon(2, n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q8_0_C(wr, R, xt, NT, out) row_q8_0_canon(n, wr, ws, R, xt, xs, NT, out)
TILE(tile_q4_k_c, CALL_Q4_K_C)
TILE(tile_q5_k_c, CALL_Q5_K_C)
TILE(tile_q6_k_c, CALL_Q6_K_C)
TILE(tile_q8_0_c, CALL_Q8_0_C)

ntx_tile_fn ntx_avx512_tile_canon(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_Q4_K: return tile_q4_k_c;
	case NTX_TYPE_Q5_K: return tile_q5_k_c;
	case NTX_TYPE_Q6_K: return tile_q6_k_c;
	case NTX_TYPE_Q8_0: return tile_q8_0_c;
	default: return NULL;
	}
}

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
	.name = "avx512 vnni",
	.dequant_row = ntx_dequant_row_avx2,
	.quantize_act = ntx_quantize_act_avx2,
	.prep_bytes = prep_bytes,
	.prepare = prepare,
	.tile = tile_for,
	.attn = ntx_attn_avx2,
};
