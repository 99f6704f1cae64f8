/* types.h - the ggml tensor type table and scalar conversions.
 *
 * Type ids are ggml's (they are what GGUF files store). Every id ggml ever
 * assigned is known by name, so an unsupported type is named in an error
 * instead of crashing; `computable` marks the types our kernels handle. */
#ifndef NTX_TYPES_H
#define NTX_TYPES_H

#include <stdint.h>
#include <string.h>

#include "err.h"

enum ntx_type {
	NTX_TYPE_F32 = 0,
	NTX_TYPE_F16 = 1,
	NTX_TYPE_Q4_0 = 2,
	NTX_TYPE_Q4_1 = 3,
	NTX_TYPE_Q5_0 = 6,
	NTX_TYPE_Q5_1 = 7,
	NTX_TYPE_Q8_0 = 8,
	NTX_TYPE_Q8_1 = 9,
	NTX_TYPE_Q2_K = 10,
	NTX_TYPE_Q3_K = 11,
	NTX_TYPE_Q4_K = 12,
	NTX_TYPE_Q5_K = 13,
	NTX_TYPE_Q6_K = 14,
	NTX_TYPE_Q8_K = 15,
	NTX_TYPE_IQ2_XXS = 16,
	NTX_TYPE_IQ2_XS = 17,
	NTX_TYPE_IQ3_XXS = 18,
	NTX_TYPE_IQ1_S = 19,
	NTX_TYPE_IQ4_NL = 20,
	NTX_TYPE_IQ3_S = 21,
	NTX_TYPE_IQ2_S = 22,
	NTX_TYPE_IQ4_XS = 23,
	NTX_TYPE_I8 = 24,
	NTX_TYPE_I16 = 25,
	NTX_TYPE_I32 = 26,
	NTX_TYPE_I64 = 27,
	NTX_TYPE_F64 = 28,
	NTX_TYPE_IQ1_M = 29,
	NTX_TYPE_BF16 = 30,
	NTX_TYPE_TQ1_0 = 34,
	NTX_TYPE_TQ2_0 = 35,
	NTX_TYPE_MXFP4 = 39,
	NTX_TYPE_COUNT = 40
};

struct ntx_type_info {
	const char *name;    /* ggml's name, e.g. "q4_K" is shown as "Q4_K" */
	int block_size;      /* elements per block */
	int type_size;       /* bytes per block */
	int computable;      /* our kernels support it as a weight type */
};

/* Info for a type id, or NULL for an id ggml never assigned or removed
 * (4, 5, 31-33, 36-38, >= 40). The table is static; never freed. */
const struct ntx_type_info *ntx_type_get(uint32_t type);

/* Name of a type id, or "type N" text in a static buffer per thread. */
const char *ntx_type_name(uint32_t type);

/* Find a type by name (case-insensitive, "Q4_K" or "q4_k"); -1 if none. */
int ntx_type_from_name(const char *name);

/* Bytes of a row of n elements of a known type. Fails (returns -1) when n is
 * not a multiple of the block size or the product overflows. */
int ntx_type_row_bytes(uint32_t type, int64_t n, uint64_t *bytes, struct ntx_err *err);

/* ---- scalar conversions (IEEE half, bfloat16) ---- */

static inline float ntx_fp32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline uint32_t ntx_fp32_to_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float ntx_fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;

	if (exp == 0) {
		/* zero or subnormal: man * 2^-24 */
		float v = (float)man * 5.9604644775390625e-8f;
		return sign ? -v : v;
	}
	if (exp == 31)
		return ntx_fp32_from_bits(sign | 0x7f800000u | (man << 13));
	return ntx_fp32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, overflow to infinity, NaN stays NaN. */
static inline uint16_t ntx_fp32_to_fp16(float f)
{
	uint32_t x = ntx_fp32_to_bits(f);
	uint32_t sign = (x >> 16) & 0x8000;
	uint32_t ax = x & 0x7fffffffu;

	if (ax >= 0x7f800000u)
		return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
	if (ax >= 0x477ff000u) /* >= 65520 rounds to inf */
		return (uint16_t)(sign | 0x7c00);
	if (ax < 0x38800000u) {
		/* result is subnormal or zero: round ax * 2^24 to an integer */
		float a = ntx_fp32_from_bits(ax) * 16777216.0f;
		uint32_t m = (uint32_t)a;
		float r = a - (float)m;

		if (r > 0.5f || (r == 0.5f && (m & 1)))
			m++;
		return (uint16_t)(sign | m);
	}
	{
		uint32_t e = (ax >> 23) - 112;
		uint32_t m = ax & 0x7fffff;
		uint32_t h = (e << 10) | (m >> 13);
		uint32_t rem = m & 0x1fff;

		if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
}

static inline float ntx_bf16_to_fp32(uint16_t b)
{
	return ntx_fp32_from_bits((uint32_t)b << 16);
}

static inline uint16_t ntx_fp32_to_bf16(float f)
{
	uint32_t x = ntx_fp32_to_bits(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
