/* kquant_avx512.h - AVX-512 unpacking of K-quant blocks shared by the
 * AVX-512 kernels (quant_avx512.c) and the AMX ones (quant_amx.c); include
 * only from files built with the AVX-512 flags. */
#ifndef NTX_KQUANT_AVX512_H
#define NTX_KQUANT_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "cpu_impl.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

/* pshufb mask: int16 scale of sub-block a in 128-bit lanes 0-1, b in 2-3 */
INLINE __m512i scale_sel(int a, int b)
{
	return _mm512_inserti64x4(_mm512_set1_epi16((short)(0x8000 | a)), _mm256_set1_epi16((short)(0x8000 | b)), 1);
}

INLINE __m512i byte_pair(int a, int b)
{
	return _mm512_inserti64x4(_mm512_set1_epi8((char)a), _mm256_set1_epi8((char)b), 1);
}

/* The 256 unsigned values of a Q4_K block (q5 = 0) or Q5_K block (q5 = 1,
 * fifth bit included) in four registers: sub-blocks (0,2) (1,3) (4,6) (5,7)
 * (the low nibbles of qs[0..63], their high nibbles, the same of
 * qs[64..127]). */
INLINE void k_values(int q5, const void *blk, __m512i W[4])
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16);
	const __m512i hbit[4] = { byte_pair(1, 4), byte_pair(2, 8), byte_pair(16, 64), byte_pair(32, -128) };
	const struct ntx_block_q4_k *b4 = blk;
	const struct ntx_block_q5_k *b5 = blk;
	const uint8_t *qs = q5 ? b5->qs : b4->qs;
	__m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);

	W[0] = _mm512_and_si512(q0, m4);
	W[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
	W[2] = _mm512_and_si512(q1, m4);
	W[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
	if (q5) {
		__m512i hh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b5->qh));

		UNROLL for (int j = 0; j < 4; j++)
			W[j] = _mm512_mask_add_epi8(W[j], _mm512_test_epi8_mask(hh, hbit[j]), W[j], c16);
	}
}

/* The 256 6-bit values (unsigned, before - 32) in element order, 64 per
 * register: W[c] = elements 64c .. 64c + 63 (sub-blocks 4c .. 4c + 3). */
INLINE void q6_k_unpack(const struct ntx_block_q6_k *b, __m512i W[4])
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
	/* per 16-bit lane shifts moving the 2 high bits of each quarter to bits 4-5 */
	const __m512i sl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
	const __m512i sr23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);

	UNROLL for (int h = 0; h < 2; h++) {
		__m512i l = _mm512_loadu_si512(b->ql + 64 * h);
		__m512i hh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
		__m512i lo = _mm512_and_si512(l, m4);                       /* quarters 0, 1 */
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(l, 4), m4); /* quarters 2, 3 */

		/* a | (b & c) */
		W[2 * h] = _mm512_ternarylogic_epi32(lo, _mm512_sllv_epi16(hh, sl01), m30, 0xF8);
		W[2 * h + 1] = _mm512_ternarylogic_epi32(hi, _mm512_srlv_epi16(hh, sr23), m30, 0xF8);
	}
}

/* The sums of the 4 int32 of each 128-bit lane of q, as 4 floats. */
INLINE __m128 lane_sums4(__m512i q)
{
	const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);

	q = _mm512_add_epi32(q, _mm512_shuffle_epi32(q, _MM_PERM_BADC));
	q = _mm512_add_epi32(q, _mm512_shuffle_epi32(q, _MM_PERM_CDAB));
	return _mm_cvtepi32_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(pick, q)));
}

/* 128-bit lanes [a0 + a1, a2 + a3, b0 + b1, b2 + b3] of a and b: two blocks
 * of 8 lanes each from both, as 4 blocks of 4 lanes. */
INLINE __m512i pair_halves(__m512i a, __m512i b)
{
	return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
}

#endif
