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
 *   Q5_0: the same on its values q - 16 (nibbles, the fifth bits as a mask);
 *   Q4_0: vpdpbusd on the unsigned nibbles, 4 blocks per register, with the
 *         -8 * sum(x) offset as the accumulator's starting value;
 *   Q4_K/Q5_K/Q6_K, one token: maddubs (u8 x s8 -> s16 pairs), then
 *         vpdpwssd with the int16 sub-block scales; mins and the Q6_K offset
 *         through sums of x;
 *   Q4_K/Q5_K/Q6_K, several tokens: the values transposed so that each
 *         int32 lane holds one sub-block, vpdpbusd, one scale multiply, and
 *         four blocks x four tokens reduced together (see "K-quant weights,
 *         several tokens").
 * Every integer is exact; only the float accumulation order differs from the
 * reference. The K-quants (and ntx_avx512_tile_canon's Q8_0) follow the
 * canonical order of cpu_impl.h at every token count, so that a token gets
 * the same bits alone, in any batch, and under the AMX ISA. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu_impl.h"
#include "kquant_avx512.h"

#define XROW(T, x, xs, t) ((const T *)((const char *)(x) + (size_t)(t) * (xs)))
#define AT(T, x, off) ((T *)((char *)(x) + (off)))
#define CAT(T, x, off) ((const T *)((const char *)(x) + (off)))

/* Tokens per pass of the row kernels other than the K-quants'. */
#define TOK_GROUP 4

/* The sub-block of int32 lane L of transposed K-quant registers (below). */
#define KQ_SUB4 0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7
#define KQ_SUB6 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15

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
#ifndef PF_DIST_Q5_0
#define PF_DIST_Q5_0 4096 /* Q4_0's (not measured for Q5_0) */
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
		float *out = outR + r * TOK_GROUP;

		__m512 a0[TOK_GROUP], a1[TOK_GROUP];
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
 *        (Q5_0 weights take the Q8_0 layout)
 *   ext: Q4_0: per group of 4 blocks, 16 int32: lane 4b = -8 * sum of
 *              block b's quants, other lanes 0 (the dpbusd start value);
 *        Q4_K/Q5_K: per super-block 8 int16, the sums of each 32;
 *        Q6_K: per super-block the 16 bsums, then (ext6) per super-block
 *              16 int32, lane L = -32 * the sum of sub-block KQ_SUB6[L]
 *              (the multi-token kernel's vpdpbusd start value).
 * qs order: Q8_0: natural. Q4_0: per group of k <= 4 blocks, the first
 * halves (16 each) of the k blocks, then their second halves. K-quants: per
 * super-block the order of the unpacked weight registers (Q4_K/Q5_K
 * sub-blocks 0 2 1 3 4 6 5 7, how the nibbles unpack; Q6_K natural), and
 * after them (at qt, for several tokens) the same with kq_transpose
 * applied: dword k of 128-bit lane q of 64-byte register e moves to dword e
 * of lane q of register k. */

struct layout {
	size_t qt, d, ext, ext6, total;
};

static size_t al64(size_t v)
{
	return (v + 63) & ~(size_t)63;
}

static struct layout layout_of(uint32_t wtype, int64_t n)
{
	const int kq = wtype == NTX_TYPE_Q4_K || wtype == NTX_TYPE_Q5_K || wtype == NTX_TYPE_Q6_K;
	struct layout L = { al64((size_t)n), 0, 0, 0, 0 };
	size_t nb = (size_t)n / (wtype == NTX_TYPE_Q4_0 || wtype == NTX_TYPE_Q5_0 || wtype == NTX_TYPE_Q8_0 ? NTX_QK
														   : NTX_QK_K);

	L.d = kq ? 2 * L.qt : L.qt;
	L.ext = L.d + al64(nb * sizeof(float));
	switch (wtype) {
	case NTX_TYPE_Q8_0:
	case NTX_TYPE_Q5_0:
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
		L.ext6 = L.ext + al64(nb * 32);
		L.total = L.ext6 + nb * 64;
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

	if (wtype == NTX_TYPE_Q8_0 || wtype == NTX_TYPE_Q5_0 || wtype == NTX_TYPE_Q4_0) {
		const struct ntx_block_q8_0 *b = xq;
		int64_t nb = n / NTX_QK;

		for (int64_t i = 0; i < nb; i++)
			d[i] = _cvtsh_ss(b[i].d);
		if (wtype != NTX_TYPE_Q4_0) {
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
		static const int sub6[16] = { KQ_SUB6 };
		int q6 = wtype == NTX_TYPE_Q6_K;

		for (int64_t i = 0; i < n / NTX_QK_K; i++, b++) {
			int8_t *un = qs + NTX_QK_K * i, *tr = AT(int8_t, xp, L.qt) + NTX_QK_K * i;
			int16_t *ext = AT(int16_t, xp, L.ext) + (q6 ? 16 : 8) * i;

			d[i] = b->d;
			for (int j = 0; j < 8; j++)
				memcpy(un + 32 * j, b->qs + 32 * (q6 ? j : order[j]), 32);
			for (int e = 0; e < 4; e++)
				for (int q = 0; q < 4; q++)
					for (int k = 0; k < 4; k++)
						memcpy(tr + 64 * k + 16 * q + 4 * e, un + 64 * e + 16 * q + 4 * k, 4);
			for (int j = 0; j < (q6 ? 16 : 8); j++)
				ext[j] = q6 ? b->bsums[j] : (int16_t)(b->bsums[2 * j] + b->bsums[2 * j + 1]);
			for (int l = 0; q6 && l < 16; l++)
				AT(int32_t, xp, L.ext6)[16 * i + l] = -32 * b->bsums[sub6[l]];
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

/* The signed values of Q8_0 (q) or Q5_0 (q - 16) weights: block b of the
 * row w, and blocks b, b + 1 in one register. Q5_0: the nibbles unpacked
 * as Q4_0's (element j low, j + 16 high), 16 taken off wherever the fifth
 * bit (bit j of qh) is clear. */
INLINE __m256i q5_0_vals(const struct ntx_block_q5_0 *b)
{
	const __m128i v = loadu128(b->qs), m4 = _mm_set1_epi8(0x0F);
	const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
	uint32_t qh;

	memcpy(&qh, b->qh, 4);
	return _mm256_mask_sub_epi8(q, (__mmask32)~qh, q, _mm256_set1_epi8(16));
}

INLINE __m256i wvals1(int q5, const void *w, int64_t b)
{
	if (q5)
		return q5_0_vals((const struct ntx_block_q5_0 *)w + b);
	return loadu256(((const struct ntx_block_q8_0 *)w)[b].qs);
}

INLINE __m512i wvals2(int q5, const void *w, int64_t b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(wvals1(q5, w, b)), wvals1(q5, w, b + 1), 1);
}

INLINE uint16_t wd(int q5, const void *w, int64_t b)
{
	return q5 ? ((const struct ntx_block_q5_0 *)w)[b].d : ((const struct ntx_block_q8_0 *)w)[b].d;
}

/* Q8_0 (q5 = 0) or Q5_0 (q5 = 1) weights, prepared Q8_0 activations. */
INLINE void row_q8_0(int q5, int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT,
		     float *outR)
{
	const size_t bsz = q5 ? sizeof(struct ntx_block_q5_0) : sizeof(struct ntx_block_q8_0);

	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		float *out = outR + r * TOK_GROUP;

		const struct layout L = layout_of(NTX_TYPE_Q8_0, n);
		const __m512i zero = _mm512_setzero_si512();
		int64_t nb = n / NTX_QK, i = 0;
		__m512 acc[TOK_GROUP];

		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm512_setzero_ps();
		for (; i + 8 <= nb; i += 8) {
			__m256 dw = scales8((const char *)w + (size_t)i * bsz, (int)bsz);
			__m512 s8[TOK_GROUP];

			if (q5)
				PREFETCH((const char *)w + (size_t)i * bsz, PF_DIST_Q5_0, 8 * 22);
			else
				PREFETCH((const char *)w + (size_t)i * bsz, PF_DIST_Q8_0, 8 * 34);
			UNROLL for (int t = 0; t < NT; t++)
				s8[t] = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_load_ps(CAT(float, XROW(char, x, xs, t), L.d) + i)));
			UNROLL for (int p = 0; p < 4; p++) {
				__m512i wq = wvals2(q5, w, i + 2 * p);
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
			__m256i wq = wvals1(q5, w, i);

			UNROLL for (int t = 0; t < NT; t++) {
				const int8_t *xq = XROW(int8_t, x, xs, t) + NTX_QK * i;
				__m256i pr = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wq),
								 _mm256_sign_epi8(loadu256(xq), wq));

				out[t] += hsum_ps256(_mm256_cvtepi32_ps(pr)) *
					  (_cvtsh_ss(wd(q5, w, i)) * CAT(float, XROW(char, x, xs, t), L.d)[i]);
			}
		}
	}
}

INLINE void row_q4_0(int64_t n, const void *w0, size_t ws, int R, const void *x, size_t xs, int NT, float *outR)
{
	for (int r = 0; r < R; r++) {
		const void *w = (const char *)w0 + (size_t)r * ws;
		float *out = outR + r * TOK_GROUP;

		const struct ntx_block_q4_0 *wb = w;
		const struct layout L = layout_of(NTX_TYPE_Q4_0, n);
		const __m512i m4 = _mm512_set1_epi8(0x0F);
		int64_t nb = n / NTX_QK, i = 0;
		__m512 acc[TOK_GROUP];

		UNROLL for (int t = 0; t < NT; t++)
			acc[t] = _mm512_setzero_ps();
		for (; i + 8 <= nb; i += 8) {
			__m256 dw = scales8(wb + i, sizeof *wb);
			__m512 s8[TOK_GROUP];

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
		__m128 acc[TOK_GROUP];
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

			outR[r * TOK_GROUP + t] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
		}
	}
}

/* ---- K-quant weights, one token ----
 *
 * A GEMV (memory-bound) keeps the unpacked values in register order, with
 * no transposition: maddubs and vpdpwssd by int16 sub-block scales, the
 * activations' qs in the same order; per token the integers of four blocks
 * are reduced together and applied in one FMA pair on the four lanes a_k:
 * the canonical steps, as the multi-token kernel below takes them. */

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

/* Blocks i0 .. i0 + k4 - 1 (k4 <= 4) for the token of prepared row xr
 * into the lanes of acc. */
INLINE __m128 kq1_quad(int kind, const void *w, int64_t i0, int k4, const struct layout *L, const char *xr, __m128 acc)
{
	const __mmask8 live = (__mmask8)((1u << k4) - 1);
	const __m128 x4 = _mm_maskz_loadu_ps(live, CAT(float, xr, L->d) + i0);
	__m512i sv[4];
	__m128i mv[4];
	float d4[4] = { 0, 0, 0, 0 }, dm4[4] = { 0, 0, 0, 0 };
	__m128 fi, fm = _mm_setzero_ps();

	UNROLL for (int k = 0; k < 4; k++) {
		sv[k] = _mm512_setzero_si512();
		mv[k] = _mm_setzero_si128();
		if (k >= k4)
			continue;
		if (kind == 2) {
			struct q6blk kb;

			q6_block(w, i0 + k, &kb);
			d4[k] = kb.d;
			sv[k] = q6_dot(&kb, (const int8_t *)xr + NTX_QK_K * (i0 + k), CAT(__m256i, xr, L->ext) + i0 + k);
		} else {
			struct kblk kb;

			k_block(kind, w, i0 + k, &kb);
			d4[k] = kb.d, dm4[k] = kb.dmin;
			k_dot(&kb, (const int8_t *)xr + NTX_QK_K * (i0 + k), CAT(__m128i, xr, L->ext) + i0 + k, &sv[k], &mv[k]);
		}
	}
	k_reduce4(sv, kind == 2 ? NULL : mv, &fi, &fm);
	acc = _mm_mask3_fmadd_ps(fi, _mm_mul_ps(x4, _mm_loadu_ps(d4)), acc, live);
	if (kind != 2)
		acc = _mm_mask3_fnmadd_ps(fm, _mm_mul_ps(x4, _mm_loadu_ps(dm4)), acc, live);
	return acc;
}

/* ---- K-quant weights, several tokens ----
 *
 * The canonical arithmetic of cpu_impl.h for one weight row and up to
 * NTX_TILE_T tokens per pass, each super-block unpacked once for all of
 * them (the multi-token product is compute-bound: what the tokens share is
 * what they stop paying for).
 *
 * Values. The unpacking (k_values, q6_k_unpack) leaves a block's 256
 * unsigned values in four registers W_0..W_3; kq_transpose swaps their
 * dwords within each 128-bit lane, T_k[q][e] = W_e[q][k] (q the 128-bit
 * lane, e and k dwords), after which int32 lane L = 4q + e of all four
 * registers holds values of one sub-block: Q4_K/Q5_K sub-block KQ_SUB4[L]
 * (two lanes of 16 values each), Q6_K sub-block KQ_SUB6[L] (one lane). The
 * prepared activations are in the same order, so per token four vpdpbusd
 * leave in every lane the exact sum of its 16 products, and one multiply by
 * the lane's scale gives 16 lanes adding up to I_b: vpmaddwd for Q4_K (16
 * products of a 4-bit value and an int8 fit int16), vpmulld for Q5_K and
 * Q6_K (whose sums start at -32 times the activations' sum: its values are
 * q - 32).
 *
 * Sums. Four blocks (a quad) of four tokens are reduced together, an add
 * and two shuffles per halving: per block the four tokens (256-bit, then
 * 128-bit halves: 128-bit lane t is token t), then per quad the four blocks
 * (32-bit, then 64-bit unpacks: dword k is block k); lane 4t + k ends as I
 * of token t and block k, and M (mins times the activations' sub-block
 * sums, vpmaddwd) the same way. The float steps then update the lanes a_k
 * of four tokens in one register. Tokens past a multiple of four reduce
 * their quads alone (kq_fin1), on four lanes. */

/* T_k[q][e] = W_e[q][k] for the dwords of each 128-bit lane q. */
INLINE void kq_transpose(__m512i W[4])
{
	__m512i t0 = _mm512_unpacklo_epi32(W[0], W[1]), t1 = _mm512_unpackhi_epi32(W[0], W[1]);
	__m512i t2 = _mm512_unpacklo_epi32(W[2], W[3]), t3 = _mm512_unpackhi_epi32(W[2], W[3]);

	W[0] = _mm512_unpacklo_epi64(t0, t2);
	W[1] = _mm512_unpackhi_epi64(t0, t2);
	W[2] = _mm512_unpacklo_epi64(t1, t3);
	W[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* One super-block decoded: T the transposed values, sc each lane's scale. */
struct kqblk {
	__m512i T[4], sc;
};

/* kind 0 Q4_K, 1 Q5_K, 2 Q6_K (a constant at every call); *mn: the 8 mins
 * of a Q4_K / Q5_K block, a byte each. */
INLINE void kq_block(int kind, const void *w, int64_t i, struct kqblk *k, uint64_t *mn)
{
	if (kind == 2) {
		const struct ntx_block_q6_k *b = (const struct ntx_block_q6_k *)w + i;

		PREFETCH(b, PF_DIST_Q6_K, sizeof *b);
		q6_k_unpack(b, k->T);
		k->sc = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(loadu128(b->scales), _mm_setr_epi8(KQ_SUB6)));
	} else {
		const struct ntx_block_q4_k *b4 = (const struct ntx_block_q4_k *)w + i;
		const struct ntx_block_q5_k *b5 = (const struct ntx_block_q5_k *)w + i;
		const void *b = kind ? (const void *)b5 : (const void *)b4;
		uint64_t sc;

		PREFETCH(b, PF_DIST_Q4_K, kind ? sizeof *b5 : sizeof *b4);
		ntx_k_scales8(kind ? b5->scales : b4->scales, &sc, mn);
		k_values(kind, b, k->T);
		k->sc = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)sc), _mm_setr_epi8(KQ_SUB4)));
	}
	kq_transpose(k->T);
}

/* Block i against the prepared row xr: 16 lanes adding up to I. */
INLINE __m512i kq_dot(int kind, const struct kqblk *k, const char *xr, const struct layout *L, int64_t i)
{
	const int8_t *xq = CAT(int8_t, xr, L->qt) + NTX_QK_K * i;
	__m512i s = kind == 2 ? _mm512_load_si512(CAT(int32_t, xr, L->ext6) + 16 * i) : _mm512_setzero_si512();

	UNROLL for (int c = 0; c < 4; c++)
		s = _mm512_dpbusd_epi32(s, k->T[c], _mm512_load_si512(xq + 64 * c));
	return kind == 0 ? _mm512_madd_epi16(s, k->sc) : _mm512_mullo_epi32(s, k->sc);
}

/* The halvings: lanes 0-7 sum a, 8-15 sum b. */
INLINE __m512i half256(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
}

/* Of two half256 results: 128-bit lanes sum a's halves, then b's. */
INLINE __m512i half128(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
}

/* Within each 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3]. */
INLINE __m512i half64(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

/* Of two half64 results: each 128-bit lane [a's 2 sums, b's 2 sums]. */
INLINE __m512i half32(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/* The float scales of blocks b0 .. b0 + k4 - 1 (0 for the others): d and
 * (Q4_K/Q5_K) dmin, one block a lane. */
INLINE void kq_d4(int kind, const void *w, int64_t b0, int k4, __m128 *d4, __m128 *dm4)
{
	if (kind == 2) {
		const struct ntx_block_q6_k *b = (const struct ntx_block_q6_k *)w + b0;
		__m128i h = _mm_setzero_si128();

		h = _mm_insert_epi16(h, b[0].d, 0);
		if (k4 > 1)
			h = _mm_insert_epi16(h, b[1].d, 1);
		if (k4 > 2)
			h = _mm_insert_epi16(h, b[2].d, 2);
		if (k4 > 3)
			h = _mm_insert_epi16(h, b[3].d, 3);
		*d4 = _mm_cvtph_ps(h);
	} else {
		/* d and dmin are the first dword of either block type */
		const size_t bs = kind ? sizeof(struct ntx_block_q5_k) : sizeof(struct ntx_block_q4_k);
		const char *p = (const char *)w + (size_t)b0 * bs;
		uint32_t v[4] = { 0, 0, 0, 0 };
		__m256 f;

		for (int k = 0; k < k4; k++)
			memcpy(&v[k], p + k * bs, 4);
		f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)v));
		f = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
		*d4 = _mm256_castps256_ps128(f);
		*dm4 = _mm256_extractf128_ps(f, 1);
	}
}

/* The float steps of one token (prepared row xr) for blocks b0 .. b0 + k4
 * - 1 on the four lanes of acc, from s (128-bit lane k: block k's 4 parts
 * of I) and (Q4_K/Q5_K) the blocks' mins m16 (8 int16 each). */
INLINE __m128 kq_fin1(int kind, int64_t b0, int k4, const struct layout *L, const char *xr, __m512i s, __m512i m16,
		      __m128 d4, __m128 dm4, __m128 acc)
{
	const __mmask8 live = (__mmask8)((1u << k4) - 1);
	const __m128 x4 = _mm_maskz_loadu_ps(live, CAT(float, xr, L->d) + b0);
	__m512i v;
	__m256 f;

	if (kind == 2) {
		v = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
		v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
	} else {
		v = half64(s, _mm512_madd_epi16(m16, _mm512_load_si512(CAT(int16_t, xr, L->ext) + 8 * b0)));
		v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC)); /* [I, M, I, M] */
	}
	f = _mm256_cvtepi32_ps(_mm512_castsi512_si256(
		_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), v)));
	acc = _mm_mask3_fmadd_ps(_mm256_castps256_ps128(f), _mm_mul_ps(x4, d4), acc, live);
	if (kind != 2)
		acc = _mm_mask3_fnmadd_ps(_mm256_extractf128_ps(f, 1), _mm_mul_ps(x4, dm4), acc, live);
	return acc;
}

/* Blocks b0 .. b0 + k4 - 1 (k4 <= 4) for NT tokens (1 .. NTX_TILE_T): the
 * first 4 * (NT / 4) in groups of four into acc[g] (lane 4t + k: token 4g +
 * t, lane a_k), the NT % 4 others one by one into a1[t] (lane k: a_k). */
INLINE void kq_quad(int kind, const void *w, int64_t b0, int k4, const struct layout *L, const void *x, size_t xs,
		    int NT, __m512 *acc, __m128 *a1)
{
	enum { GM = NTX_TILE_T / 4 };
	const int G = NT / 4, NS = NT % 4;
	const __m512i zero = _mm512_setzero_si512();
	const __mmask16 live = (__mmask16)(((1u << k4) - 1) * 0x1111u);
	__m512i p[GM], h[GM], I[GM], sp[3], sh[3];
	uint64_t mn[4] = { 0, 0, 0, 0 };
	__m128 d4, dm4 = _mm_setzero_ps();
	__m512i m16;

	UNROLL for (int k = 0; k < 4; k++) {
		__m512i q[GM], r1[3];

		if (k < k4) {
			struct kqblk kb;

			kq_block(kind, w, b0 + k, &kb, &mn[k]);
			UNROLL for (int g = 0; g < G; g++) {
				__m512i r[4];

				UNROLL for (int t = 0; t < 4; t++)
					r[t] = kq_dot(kind, &kb, XROW(char, x, xs, 4 * g + t), L, b0 + k);
				q[g] = half128(half256(r[0], r[1]), half256(r[2], r[3]));
			}
			UNROLL for (int t = 0; t < NS; t++)
				r1[t] = kq_dot(kind, &kb, XROW(char, x, xs, 4 * G + t), L, b0 + k);
		} else {
			UNROLL for (int g = 0; g < G; g++)
				q[g] = zero;
			UNROLL for (int t = 0; t < NS; t++)
				r1[t] = zero;
		}
		/* groups: tokens in 128-bit lanes, then blocks in dwords;
		 * singles: blocks in 128-bit lanes */
		UNROLL for (int g = 0; g < G; g++) {
			if (k == 0 || k == 2)
				p[g] = q[g];
			else if (k == 1)
				h[g] = half64(p[g], q[g]);
			else
				I[g] = half32(h[g], half64(p[g], q[g]));
		}
		UNROLL for (int t = 0; t < NS; t++) {
			if (k == 0 || k == 2)
				sp[t] = r1[t];
			else if (k == 1)
				sh[t] = half256(sp[t], r1[t]);
			else
				sh[t] = half128(sh[t], half256(sp[t], r1[t]));
		}
	}
	kq_d4(kind, w, b0, k4, &d4, &dm4);
	m16 = _mm512_cvtepu8_epi16(
		_mm256_setr_epi64x((long long)mn[0], (long long)mn[1], (long long)mn[2], (long long)mn[3]));
	UNROLL for (int g = 0; g < G; g++) {
		__m512 dx;
		__m128 dq[4];
		__m512i r[4];

		UNROLL for (int t = 0; t < 4; t++) {
			const char *xr = XROW(char, x, xs, 4 * g + t);

			dq[t] = _mm_load_ps(CAT(float, xr, L->d) + b0);
			r[t] = kind == 2 ? zero : _mm512_madd_epi16(m16, _mm512_load_si512(CAT(int16_t, xr, L->ext) + 8 * b0));
		}
		/* immediates spelled out: a loop index is one only once unrolled (not at -O0/-O1) */
		dx = _mm512_insertf32x4(_mm512_insertf32x4(_mm512_insertf32x4(
						_mm512_castps128_ps512(dq[0]), dq[1], 1), dq[2], 2), dq[3], 3);
		acc[g] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(I[g]), _mm512_mul_ps(dx, _mm512_broadcast_f32x4(d4)),
					       acc[g], live);
		if (kind != 2) {
			/* lane 4k + t to 4t + k */
			const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
			__m512i M = _mm512_permutexvar_epi32(tr, half32(half64(r[0], r[1]), half64(r[2], r[3])));

			acc[g] = _mm512_mask3_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dx, _mm512_broadcast_f32x4(dm4)),
							acc[g], live);
		}
	}
	UNROLL for (int t = 0; t < NS; t++)
		a1[t] = kq_fin1(kind, b0, k4, L, XROW(char, x, xs, 4 * G + t), sh[t], m16, d4, dm4, a1[t]);
}

/* One row (w) for NT tokens: out[t] = (a_0 + a_2) + (a_1 + a_3). */
INLINE void row_kq(int kind, int64_t n, const void *w, const void *x, size_t xs, int NT, float *out)
{
	const struct layout L = layout_of(kind == 2 ? NTX_TYPE_Q6_K : NTX_TYPE_Q4_K, n);
	const int64_t nb = n / NTX_QK_K;
	const int G = NT / 4, NS = NT % 4;
	__m512 acc[NTX_TILE_T / 4];
	__m128 a1[3];
	_Alignas(64) float a[NTX_TILE_T * 4];

	if (NT == 1) {
		__m128 h = _mm_setzero_ps();

		int64_t b0 = 0;

		for (; b0 + 4 <= nb; b0 += 4) /* k4 a constant: no masks */
			h = kq1_quad(kind, w, b0, 4, &L, x, h);
		if (b0 < nb)
			h = kq1_quad(kind, w, b0, (int)(nb - b0), &L, x, h);
		h = _mm_add_ps(h, _mm_movehl_ps(h, h)); /* (0+2), (1+3) */
		out[0] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
		return;
	}
	UNROLL for (int g = 0; g < G; g++)
		acc[g] = _mm512_setzero_ps();
	UNROLL for (int t = 0; t < NS; t++)
		a1[t] = _mm_setzero_ps();
	int64_t b0 = 0;

	for (; b0 + 4 <= nb; b0 += 4)
		kq_quad(kind, w, b0, 4, &L, x, xs, NT, acc, a1);
	if (b0 < nb)
		kq_quad(kind, w, b0, (int)(nb - b0), &L, x, xs, NT, acc, a1);
	UNROLL for (int g = 0; g < G; g++)
		_mm512_store_ps(a + 16 * g, acc[g]);
	UNROLL for (int t = 0; t < NS; t++)
		_mm_store_ps(a + 16 * G + 4 * t, a1[t]);
	for (int t = 0; t < NT; t++)
		out[t] = (a[4 * t] + a[4 * t + 2]) + (a[4 * t + 1] + a[4 * t + 3]);
}

/* ---- tiles ---- */

/* Expand a row kernel into a tile kernel. Rows are always taken one after
 * the other (one memory stream); a GEMV (one token) passes all nr rows to
 * one call, so that loop-invariant set-up is done once per tile. Several
 * tokens go in groups of up to TOK_GROUP, each size a compile-time
 * constant, the row staying in L1 from one group to the next. */
_Static_assert(TOK_GROUP == 4, "the tile switch below covers groups of 1 to 4 tokens");

#define TILE(name, call)                                                                          \
	static void name(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,   \
			 int nt, float *y, int64_t ldy)                                           \
	{                                                                                         \
		float out[NTX_TILE_R * TOK_GROUP];                                               \
		if (nt == 1) {                                                                    \
			call(w, nr, x, 1, out);                                                   \
			for (int r = 0; r < nr; r++)                                              \
				y[r] = out[r * TOK_GROUP];                                       \
			return;                                                                   \
		}                                                                                 \
		for (int r = 0; r < nr; r++) {                                                    \
			const void *wr = (const char *)w + (size_t)r * ws;                        \
			for (int t0 = 0; t0 < nt; t0 += TOK_GROUP) {                             \
				const void *xt = (const char *)x + (size_t)t0 * xs;               \
				int k = nt - t0 < TOK_GROUP ? nt - t0 : TOK_GROUP;              \
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
#define CALL_Q5_0(wr, R, xt, NT, out) row_q8_0(1, n, wr, ws, R, xt, xs, NT, out)
#define CALL_Q8_0(wr, R, xt, NT, out) row_q8_0(0, n, wr, ws, R, xt, xs, NT, out)

TILE(tile_f32, CALL_F32)
TILE(tile_f16, CALL_F16)
TILE(tile_bf16, CALL_BF16)
TILE(tile_q4_0, CALL_Q4_0)
TILE(tile_q5_0, CALL_Q5_0)
TILE(tile_q8_0, CALL_Q8_0)
#define CALL_Q8_0_C(wr, R, xt, NT, out) row_q8_0_canon(n, wr, ws, R, xt, xs, NT, out)
TILE(tile_q8_0_c, CALL_Q8_0_C)

/* The K-quants: rows one by one, the tokens in passes of row_kq, nt a
 * compile-time constant: up to 11 in one pass (two groups of four and three
 * single tokens: 9 = K + 1 of speculative decoding), 12 .. 16 as 8 and the
 * rest (four groups in registers spill: one more unpacking is cheaper;
 * Zen 4, one thread, Q6_K 16 tokens 1.04x -> 1.2x the old 4-token tiles). */
#define KQ_CASE(N)                                      \
	case N:                                         \
		row_kq(kind, n, wr, xt, xs, N, out);    \
		break;
_Static_assert(NTX_TILE_T <= 16, "at most two passes of row_kq below");

INLINE void tile_kq(int kind, int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nt,
		    float *y, int64_t ldy)
{
	if (nt == 1) { /* a GEMV: straight on */
		for (int r = 0; r < nr; r++)
			row_kq(kind, n, (const char *)w + (size_t)r * ws, x, xs, 1, y + r);
		return;
	}
	for (int t0 = 0; t0 < nt;) {
		const void *xt = (const char *)x + (size_t)t0 * xs;
		const int m = nt - t0 >= 12 ? 8 : nt - t0;

		for (int r = 0; r < nr; r++) {
			const void *wr = (const char *)w + (size_t)r * ws;
			float out[11];

			switch (m) {
				KQ_CASE(1) KQ_CASE(2) KQ_CASE(3) KQ_CASE(4) KQ_CASE(5)
				KQ_CASE(6) KQ_CASE(7) KQ_CASE(8) KQ_CASE(9) KQ_CASE(10)
			default:
				row_kq(kind, n, wr, xt, xs, 11, out);
				break;
			}
			for (int t = 0; t < m; t++)
				y[(t0 + t) * ldy + r] = out[t];
		}
		t0 += m;
	}
}

#define TILE_KQ(name, kind)                                                                                \
	static void name(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nt, float *y, \
			 int64_t ldy)                                                                      \
	{                                                                                                  \
		tile_kq(kind, n, w, ws, nr, x, xs, nt, y, ldy);                                            \
	}
TILE_KQ(tile_q4_k, 0)
TILE_KQ(tile_q5_k, 1)
TILE_KQ(tile_q6_k, 2)

ntx_tile_fn ntx_avx512_tile_canon(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_Q4_K: return tile_q4_k;
	case NTX_TYPE_Q5_K: return tile_q5_k;
	case NTX_TYPE_Q6_K: return tile_q6_k;
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
	case NTX_TYPE_Q5_0: return tile_q5_0;
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
