/* ntx_kernels.h - the one header shared by the CPU and CUDA kernels.
 *
 * Block layouts of the quantized weight types (byte-identical to GGUF/ggml),
 * defined once and included from C and CUDA, and the CPU kernel API:
 * scalar `_ref` kernels (the oracle) and the fast, multi-threaded paths. */
#ifndef NTX_KERNELS_H
#define NTX_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

#ifdef __cplusplus
#define NTX_STATIC_ASSERT static_assert
extern "C" {
#else
#define NTX_STATIC_ASSERT _Static_assert
#endif

#define NTX_QK 32    /* elements per Q4_0 / Q5_0 / Q8_0 block */
#define NTX_QK_K 256 /* elements per K-quant super-block */

/* ---- block layouts ---- */

/* Q4_0: x = d * (q - 8), q in [0, 15]; qs[j] holds element j (low nibble)
 * and element j + 16 (high nibble). */
struct ntx_block_q4_0 {
	uint16_t d; /* fp16 scale */
	uint8_t qs[NTX_QK / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q4_0) == 18, "q4_0 block size");

/* Q5_0: x = d * (q - 16), q in [0, 31]: the low 4 bits as Q4_0's nibbles
 * (qs[j]: element j low, element j + 16 high), the fifth bit of element j
 * is bit j of qh read as a little-endian uint32. */
struct ntx_block_q5_0 {
	uint16_t d; /* fp16 scale */
	uint8_t qh[4];
	uint8_t qs[NTX_QK / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q5_0) == 22, "q5_0 block size");

/* Q8_0: x = d * q */
struct ntx_block_q8_0 {
	uint16_t d; /* fp16 scale */
	int8_t qs[NTX_QK];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q8_0) == 34, "q8_0 block size");

/* Q4_K: 8 sub-blocks of 32; 6-bit scale and min per sub-block packed in
 * scales[12]; x = d * sc * q - dmin * m. */
struct ntx_block_q4_k {
	uint16_t d;    /* fp16 super-block scale for the scales */
	uint16_t dmin; /* fp16 super-block scale for the mins */
	uint8_t scales[12];
	uint8_t qs[NTX_QK_K / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q4_k) == 144, "q4_K block size");

/* Q5_K: as Q4_K plus a fifth bit per element in qh. */
struct ntx_block_q5_k {
	uint16_t d;
	uint16_t dmin;
	uint8_t scales[12];
	uint8_t qh[NTX_QK_K / 8];
	uint8_t qs[NTX_QK_K / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q5_k) == 176, "q5_K block size");

/* Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * sc * (q - 32),
 * q = 4 low bits (ql) | 2 high bits (qh) << 4. */
struct ntx_block_q6_k {
	uint8_t ql[NTX_QK_K / 2];
	uint8_t qh[NTX_QK_K / 4];
	int8_t scales[NTX_QK_K / 16];
	uint16_t d; /* fp16 */
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q6_k) == 210, "q6_K block size");

/* Q4_1: x = d * q + m, q in [0, 15], nibbles as Q4_0's. */
struct ntx_block_q4_1 {
	uint16_t d; /* fp16 scale */
	uint16_t m; /* fp16 offset */
	uint8_t qs[NTX_QK / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q4_1) == 20, "q4_1 block size");

/* Q5_1: x = d * q + m, q in [0, 31]: nibbles and fifth bits as Q5_0's. */
struct ntx_block_q5_1 {
	uint16_t d;
	uint16_t m;
	uint8_t qh[4];
	uint8_t qs[NTX_QK / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q5_1) == 24, "q5_1 block size");

/* Q2_K: 16 sub-blocks of 16, scales[i]: low nibble the scale, high the
 * min of sub-block i; x = d * sc * q - dmin * mn, q in [0, 3]. Element
 * 128 h + 32 j + 16 u + l (h < 2, j < 4, u < 2, l < 16) is bits 2 j, 2 j + 1
 * of qs[32 h + 16 u + l] and belongs to sub-block 8 h + 2 j + u. */
struct ntx_block_q2_k {
	uint8_t scales[NTX_QK_K / 16];
	uint8_t qs[NTX_QK_K / 4];
	uint16_t d;    /* fp16, for the scales */
	uint16_t dmin; /* fp16, for the mins */
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q2_k) == 84, "q2_K block size");

/* Q3_K: 16 sub-blocks of 16 with 6-bit scales s (x = d * (s - 32) * q),
 * q = 2 low bits as Q2_K's (same element order) minus 4 unless the high
 * bit is set: bit 4 h + j of hmask[16 u + l] for element 128 h + 32 j +
 * 16 u + l. Scale i: low 4 bits scales[i] & 15 (i < 8) or scales[i - 8]
 * >> 4, high 2 bits (scales[8 + i % 4] >> 2 (i / 4)) & 3. */
struct ntx_block_q3_k {
	uint8_t hmask[NTX_QK_K / 8];
	uint8_t qs[NTX_QK_K / 4];
	uint8_t scales[12];
	uint16_t d; /* fp16 */
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q3_k) == 110, "q3_K block size");

/* The 16 values of the non-linear 4-bit types (IQ4_NL, IQ4_XS): a
 * nibble q stands for ntx_iq4_values[q] times the scale. */
static const int8_t ntx_iq4_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
					   1,    13,   25,  38,  53,  69,  89,  113 };

/* IQ4_NL: x = d * ntx_iq4_values[q]; qs[j] holds element j (low nibble)
 * and element j + 16 (high nibble), as Q4_0. */
struct ntx_block_iq4_nl {
	uint16_t d; /* fp16 scale */
	uint8_t qs[NTX_QK / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_iq4_nl) == 18, "iq4_nl block size");

/* IQ4_XS: 8 sub-blocks of 32, each with a 6-bit scale ls (low 4 bits: the
 * nibble ib % 2 of scales_l[ib / 2]; high 2 bits: bits 2 ib, 2 ib + 1 of
 * scales_h); x = d * (ls - 32) * ntx_iq4_values[q], the nibbles of a
 * sub-block as IQ4_NL's (qs[16 ib + j]: element 32 ib + j low, + 16 high). */
struct ntx_block_iq4_xs {
	uint16_t d; /* fp16 */
	uint16_t scales_h;
	uint8_t scales_l[NTX_QK_K / 64];
	uint8_t qs[NTX_QK_K / 2];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_iq4_xs) == 136, "iq4_xs block size");

/* Q8_K: activations for the K-quant dot products (never stored in GGUF
 * weights we read): x = d * q, bsums = sums of each 16 q values. */
struct ntx_block_q8_k {
	float d;
	int8_t qs[NTX_QK_K];
	int16_t bsums[NTX_QK_K / 16];
};
NTX_STATIC_ASSERT(sizeof(struct ntx_block_q8_k) == 292, "q8_K block size");

/* Unpack the 6-bit scale and min j (0..7) of a Q4_K / Q5_K block. */
static inline void ntx_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

#ifdef __cplusplus
}
#endif

#endif
