/* blockmath.cuh - per-block math of the quantized weight types, shared by
 * the CUDA kernels and a host-side test (tests/gpu/host_blockmath.cu) that
 * checks it against the CPU oracle (ntx_vec_dot_ref, ntx_dequant_row_ref)
 * on a machine without a GPU. Every function here is __host__ __device__;
 * intrinsics (__dp4a, __funnelshift_r, half conversion) have portable host
 * fallbacks.
 *
 * The unit of work is 32 consecutive elements of a weight row ("a unit"):
 * one Q4_0 / Q5_0 / Q8_0 block, or one eighth of a K-quant super-block. A unit
 * decodes into 8 words of 4 packed int8 values (struct ntx_wu), and its dot
 * product with one q8 activation block (32 int8, float2 ds = (d, d*sum(q)),
 * see ntx_cuda.h) is
 *
 *     a * ds.x * (s0 * sum_{k<4} v_k.x_k + s1 * sum_{k>=4} v_k.x_k) - b * ds.y
 *
 * with a, b, s0, s1 per type:
 *   Q4_0: v = nibble 0..15, a = d, b = 8d, s = 1    (d (q - 8) = d q - 8 d)
 *   Q5_0: v = nibble | h<<4 (0..31), a = d, b = 16d, s = 1
 *   Q8_0: v = q,            a = d, b = 0,  s = 1
 *   Q4_K: v = nibble,       a = d sc, b = dmin m, s = 1
 *   Q5_K: v = nibble | h<<4, as Q4_K
 *   Q6_K: v = q - 32,       a = d, b = 0, s0/s1 = the two int8 sub-block scales
 * Layout facts (ggml's, also documented in kernels/cpu/quant_ref.c):
 *   Q4_0  18 B: d, qs[16]: element l low nibble of qs[l], l+16 high nibble.
 *   Q5_0  22 B: d, qh[4], qs[16]: the nibbles as Q4_0's; bit l of qh (a
 *         little-endian uint32) is the fifth bit of element l.
 *   Q8_0  34 B: d, qs[32].
 *   Q4_K 144 B: d, dmin, scales[12], qs[128]: unit j uses qs[32(j/2) ..+32],
 *         low nibbles for even j, high for odd; 6-bit sc/m packed in scales.
 *   Q5_K 176 B: d, dmin, scales[12], qh[32], qs[128]: bit j of qh[l] is the
 *         fifth bit of element l of unit j.
 *   Q6_K 210 B: ql[128], qh[64], scales[16] (int8), d: unit u = 4h + q uses
 *         ql[64h + 32(q&1) ..+32] (low nibble if q < 2, else high) and bits
 *         2q, 2q+1 of qh[32h ..+32]; scales[2u], scales[2u+1].
 * Alignment: Q4_K / Q5_K blocks are read with 16-byte loads (block address
 * 16-byte aligned), the others with aligned 4-byte loads and funnel shifts
 * (block address 2-byte aligned). */
#ifndef NTX_CUDA_BLOCKMATH_CUH
#define NTX_CUDA_BLOCKMATH_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_fp16.h>

extern "C" {
#include "types.h"
}

#define NTX_HD __host__ __device__ __forceinline__

/* ---- intrinsics with host fallbacks ---- */

NTX_HD int ntx_dp4a(uint32_t a, uint32_t b, int c)
{
#ifdef __CUDA_ARCH__
	return __dp4a((int)a, (int)b, c);
#else
	for (int i = 0; i < 4; i++)
		c += (int)(int8_t)(uint8_t)(a >> (8 * i)) * (int)(int8_t)(uint8_t)(b >> (8 * i));
	return c;
#endif
}

/* Low 32 bits of (hi:lo) >> sh, sh in [0, 32). */
NTX_HD uint32_t ntx_fshr(uint32_t lo, uint32_t hi, uint32_t sh)
{
#ifdef __CUDA_ARCH__
	return __funnelshift_r(lo, hi, sh);
#else
	return sh ? (lo >> sh) | (hi << (32 - sh)) : lo;
#endif
}

NTX_HD float ntx_h2f(uint32_t h)
{
#ifdef __CUDA_ARCH__
	return __half2float(__ushort_as_half((unsigned short)h));
#else
	return ntx_fp16_to_fp32((uint16_t)h);
#endif
}

/* float -> fp16 bits, round to nearest even. */
NTX_HD uint32_t ntx_f2h(float f)
{
#ifdef __CUDA_ARCH__
	return __half_as_ushort(__float2half_rn(f));
#else
	return ntx_fp32_to_fp16(f);
#endif
}

/* Products and differences that must not be fused into an FMA, so that
 * dequantized values are bit-identical to the CPU reference. */
NTX_HD float ntx_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(a, b);
#else
	return a * b;
#endif
}

NTX_HD float ntx_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fsub_rn(a, b);
#else
	return a - b;
#endif
}

/* Round to nearest, ties to even (what cvtps2dq and ntx_round_even do). */
NTX_HD int ntx_rne(float v)
{
#ifdef __CUDA_ARCH__
	return __float2int_rn(v);
#else
	return (int)__builtin_rintf(v);
#endif
}

/* ---- loads ---- */

NTX_HD uint32_t ntx_ld32(const uint8_t *p) /* p 4-byte aligned */
{
#ifdef __CUDA_ARCH__
	return *(const uint32_t *)p;
#else
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
#endif
}

NTX_HD uint32_t ntx_ld16(const uint8_t *p) /* p 2-byte aligned */
{
#ifdef __CUDA_ARCH__
	return *(const uint16_t *)p;
#else
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
#endif
}

/* N little-endian words starting at p (2-byte aligned): aligned 4-byte loads
 * and funnel shifts. Never reads past the 4-byte word holding the last byte. */
template <int N> NTX_HD void ntx_ld_words_a2(const uint8_t *p, uint32_t *w)
{
	/* pointer arithmetic (not an integer round trip) keeps the address
	 * space visible to the compiler: shared-memory loads stay LDS */
	const uint8_t *b = p - ((uintptr_t)p & 3);
	uint32_t sh = ((uint32_t)(uintptr_t)p & 2u) * 8u;
	uint32_t raw[N + 1];

#pragma unroll
	for (int i = 0; i < N; i++)
		raw[i] = ntx_ld32(b + 4 * i);
	raw[N] = ntx_ld32(b + 4 * (N - (sh == 0))); /* unused when aligned */
#pragma unroll
	for (int i = 0; i < N; i++)
		w[i] = ntx_fshr(raw[i], raw[i + 1], sh);
}

/* N words (N a multiple of 4) from p, 16-byte aligned: 16-byte loads. */
template <int N> NTX_HD void ntx_ld_words_a16(const uint8_t *p, uint32_t *w)
{
#pragma unroll
	for (int i = 0; i < N; i += 4) {
#ifdef __CUDA_ARCH__
		uint4 v = *(const uint4 *)(p + 4 * i);

		w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
#else
		memcpy(w + i, p + 4 * i, 16);
#endif
	}
}

/* ---- type traits ---- */

template <int T> struct ntx_qt;
template <> struct ntx_qt<NTX_TYPE_Q4_0> {
	enum { BS = 32, BB = 18, UPB = 1, ALIGN = 2 };
};
template <> struct ntx_qt<NTX_TYPE_Q5_0> {
	enum { BS = 32, BB = 22, UPB = 1, ALIGN = 2 };
};
template <> struct ntx_qt<NTX_TYPE_Q8_0> {
	enum { BS = 32, BB = 34, UPB = 1, ALIGN = 2 };
};
template <> struct ntx_qt<NTX_TYPE_Q4_K> {
	enum { BS = 256, BB = 144, UPB = 8, ALIGN = 16 };
};
template <> struct ntx_qt<NTX_TYPE_Q5_K> {
	enum { BS = 256, BB = 176, UPB = 8, ALIGN = 16 };
};
template <> struct ntx_qt<NTX_TYPE_Q6_K> {
	enum { BS = 256, BB = 210, UPB = 8, ALIGN = 2 };
};

/* Split rows (ntx_cuda.h): NTX_SPLIT | t, rows [payloads][fp16 d's]. */
#define NTX_SPLIT 0x100
template <> struct ntx_qt<NTX_SPLIT | NTX_TYPE_Q4_0> {
	enum { BS = 32, BB = 18, UPB = 1, ALIGN = 16 };
};
template <> struct ntx_qt<NTX_SPLIT | NTX_TYPE_Q8_0> {
	enum { BS = 32, BB = 34, UPB = 1, ALIGN = 16 };
};
template <> struct ntx_qt<NTX_SPLIT | NTX_TYPE_Q6_K> {
	enum { BS = 256, BB = 210, UPB = 8, ALIGN = 16 };
};

/* Where block b of a row of nb blocks keeps its quantized payload (*q: Q4_0
 * / Q8_0 qs, Q5_0 qh then qs, Q6_K ql..scales, the whole block for Q4_K /
 * Q5_K) and its fp16
 * d (*d; Q4_K / Q5_K: unused), in GGUF layout (blocks of BB bytes) or split
 * rows (payloads of BB - 2 bytes, then the d's). */
template <int T>
NTX_HD void ntx_block_parts(const uint8_t *row, int64_t nb, int64_t b, const uint8_t **q,
			    const uint8_t **d)
{
	constexpr int B = T & ~NTX_SPLIT, BB = ntx_qt<T>::BB;

	if constexpr ((T & NTX_SPLIT) != 0) {
		*q = row + b * (BB - 2);
		*d = row + nb * (BB - 2) + 2 * b;
	} else {
		const uint8_t *blk = row + b * BB;

		*q = B == NTX_TYPE_Q4_0 || B == NTX_TYPE_Q5_0 || B == NTX_TYPE_Q8_0 ? blk + 2 : blk;
		*d = B == NTX_TYPE_Q6_K ? blk + 208 : blk;
	}
}

/* The split form of one row of nb blocks of GGUF type T (host and tests;
 * the device repacks with ntx_cuda_repack). */
template <int T> NTX_HD void ntx_split_row(const uint8_t *src, int64_t nb, uint8_t *dst)
{
	constexpr int BB = ntx_qt<T>::BB;

	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *q, *d;

		ntx_block_parts<T>(src, nb, b, &q, &d);
		memcpy(dst + b * (BB - 2), q, BB - 2);
		memcpy(dst + nb * (BB - 2) + 2 * b, d, 2);
	}
}

/* ---- unit decode ---- */

/* Bits 0..3 of n, one to a byte: bit i of n becomes bit 0 of byte i (the
 * four shifted copies of n do not overlap, so the product never carries). */
NTX_HD uint32_t ntx_bits4_bytes(uint32_t n)
{
	return ((n & 0xFu) * 0x00204081u) & 0x01010101u;
}

struct ntx_wu {
	uint32_t v[8]; /* 32 int8 values, element 4k + i in byte i of v[k] */
	float a, b;
	int s0, s1;
};

/* 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes held in
 * s0 (bytes 0-3), s1 (4-7), s2 (8-11); see ntx_k_scale_min. */
NTX_HD void ntx_kscale(int j, uint32_t s0, uint32_t s1, uint32_t s2, int *sc, int *m)
{
	if (j < 4) {
		*sc = (int)((s0 >> (8 * j)) & 63);
		*m = (int)((s1 >> (8 * j)) & 63);
	} else {
		uint32_t sh = 8 * (j - 4);
		uint32_t hi = (s2 >> sh) & 0xFF, lo0 = (s0 >> sh) & 0xFF, lo1 = (s1 >> sh) & 0xFF;

		*sc = (int)((hi & 0xF) | ((lo0 >> 6) << 4));
		*m = (int)((hi >> 4) | ((lo1 >> 6) << 4));
	}
}

/* Decode unit u (0 .. UPB-1) of a block of GGUF type T from its payload q
 * and fp16 scale dp (ntx_block_parts). */
template <int T> NTX_HD void ntx_unit_decode_parts(const uint8_t *q8, const uint8_t *dp, int u, ntx_wu &w)
{
	const uint8_t *blk = q8; /* K-quants: the block */

	(void)blk;
	if constexpr (T == NTX_TYPE_Q4_0) {
		uint32_t q[4];

		(void)u;
		ntx_ld_words_a2<4>(q8, q);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			w.v[k] = q[k] & 0x0F0F0F0Fu;
			w.v[k + 4] = (q[k] >> 4) & 0x0F0F0F0Fu;
		}
		w.a = ntx_h2f(ntx_ld16(dp));
		w.b = 8.0f * w.a;
		w.s0 = w.s1 = 1;
	} else if constexpr (T == NTX_TYPE_Q5_0) {
		uint32_t q[5]; /* qh, then the 16 bytes of qs */

		(void)u;
		ntx_ld_words_a2<5>(q8, q);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			w.v[k] = (q[k + 1] & 0x0F0F0F0Fu) | ntx_bits4_bytes(q[0] >> (4 * k)) << 4;
			w.v[k + 4] = ((q[k + 1] >> 4) & 0x0F0F0F0Fu) | ntx_bits4_bytes(q[0] >> (16 + 4 * k)) << 4;
		}
		w.a = ntx_h2f(ntx_ld16(dp));
		w.b = 16.0f * w.a;
		w.s0 = w.s1 = 1;
	} else if constexpr (T == NTX_TYPE_Q8_0) {
		(void)u;
		ntx_ld_words_a2<8>(q8, w.v);
		w.a = ntx_h2f(ntx_ld16(dp));
		w.b = 0.0f;
		w.s0 = w.s1 = 1;
	} else if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K) {
		(void)dp;
		uint32_t h[4], q[8];
		uint32_t shift = 4u * (uint32_t)(u & 1);
		int sc, m;

		ntx_ld_words_a16<4>(blk, h);
		ntx_kscale(u, h[1], h[2], h[3], &sc, &m);
		if constexpr (T == NTX_TYPE_Q4_K) {
			ntx_ld_words_a16<8>(blk + 16 + 32 * (u >> 1), q);
#pragma unroll
			for (int k = 0; k < 8; k++)
				w.v[k] = (q[k] >> shift) & 0x0F0F0F0Fu;
		} else {
			uint32_t qh[8];

			ntx_ld_words_a16<8>(blk + 16, qh);
			ntx_ld_words_a16<8>(blk + 48 + 32 * (u >> 1), q);
#pragma unroll
			for (int k = 0; k < 8; k++)
				w.v[k] = ((q[k] >> shift) & 0x0F0F0F0Fu) |
					 (((qh[k] >> u) & 0x01010101u) << 4);
		}
		w.a = ntx_h2f(h[0] & 0xFFFF) * (float)sc;
		w.b = ntx_h2f(h[0] >> 16) * (float)m;
		w.s0 = w.s1 = 1;
	} else if constexpr (T == NTX_TYPE_Q6_K) {
		uint32_t ql[8], qh[8];
		int hf = u >> 2, qr = u & 3;
		uint32_t lsh = 4u * (uint32_t)(qr >> 1), hsh = 2u * (uint32_t)qr;
		uint32_t sc = ntx_ld16(blk + 192 + 2 * u);

		ntx_ld_words_a2<8>(blk + 64 * hf + 32 * (qr & 1), ql);
		ntx_ld_words_a2<8>(blk + 128 + 32 * hf, qh);
#pragma unroll
		for (int k = 0; k < 8; k++) {
			uint32_t v = ((ql[k] >> lsh) & 0x0F0F0F0Fu) | (((qh[k] >> hsh) & 0x03030303u) << 4);

			/* bytewise v - 32 for v in [0, 63]: v + 96 never carries */
			w.v[k] = (v + 0x60606060u) ^ 0x80808080u;
		}
		w.a = ntx_h2f(ntx_ld16(dp));
		w.b = 0.0f;
		w.s0 = (int)(int8_t)(uint8_t)(sc & 0xFF);
		w.s1 = (int)(int8_t)(uint8_t)(sc >> 8);
	}
}

/* Decode unit u (0 .. UPB-1) of the GGUF block at blk. */
template <int T> NTX_HD void ntx_unit_decode(const uint8_t *blk, int u, ntx_wu &w)
{
	const uint8_t *q, *d;

	ntx_block_parts<T>(blk, 1, 0, &q, &d);
	ntx_unit_decode_parts<T>(q, d, u, w);
}

/* Decode global unit i of rows of nb blocks of type T (GGUF or split),
 * rows contiguous from w. */
template <int T> NTX_HD void ntx_unit_at(const uint8_t *w, int64_t nb, int64_t i, ntx_wu &wu)
{
	constexpr int UPB = ntx_qt<T>::UPB, BB = ntx_qt<T>::BB;
	const int64_t bg = i / UPB;
	const uint8_t *q, *d;

	if constexpr ((T & NTX_SPLIT) != 0) {
		const int64_t r = bg / nb;

		ntx_block_parts<T>(w + (uint64_t)r * (uint64_t)(nb * BB), nb, bg - r * nb, &q, &d);
	} else {
		(void)nb;
		ntx_block_parts<T>(w + (uint64_t)bg * BB, 1, 0, &q, &d);
	}
	ntx_unit_decode_parts<T & ~NTX_SPLIT>(q, d, (int)(i % UPB), wu);
}

/* Dot of a decoded unit with 32 int8 activations (x, packed as w.v) whose
 * block has ds = (dx, dx * sum(q)). */
NTX_HD float ntx_unit_dot(const ntx_wu &w, const uint32_t *x, float dx, float dsum)
{
	int s0 = 0, s1 = 0;

#pragma unroll
	for (int k = 0; k < 4; k++) {
		s0 = ntx_dp4a(w.v[k], x[k], s0);
		s1 = ntx_dp4a(w.v[k + 4], x[k + 4], s1);
	}
	return w.a * dx * (float)(w.s0 * s0 + w.s1 * s1) - w.b * dsum;
}

/* Dequantized value of element e (0..31) of a decoded unit of type T,
 * evaluated exactly as the CPU reference does (no FMA contraction). */
template <int T> NTX_HD float ntx_unit_value(const ntx_wu &w, int e)
{
	int q = (int)(int8_t)(uint8_t)(w.v[e >> 2] >> (8 * (e & 3)));

	if constexpr (T == NTX_TYPE_Q4_0)
		return ntx_mul(w.a, (float)(q - 8));
	else if constexpr (T == NTX_TYPE_Q5_0)
		return ntx_mul(w.a, (float)(q - 16));
	else if constexpr (T == NTX_TYPE_Q8_0)
		return ntx_mul(w.a, (float)q);
	else if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K)
		return ntx_sub(ntx_mul(w.a, (float)q), w.b);
	else
		return ntx_mul(ntx_mul(w.a, (float)(e < 16 ? w.s0 : w.s1)), (float)q);
}

/* ---- pairs of K-quant units (the GEMV's unit of work) ----
 * A "pair" is 64 elements of a K-quant super-block that share their weight
 * bytes, so that each loaded byte is used whole:
 *   Q4_K / Q5_K pair p (0..3): units 2p (low nibbles of qs[32p ..+32]) and
 *     2p+1 (high nibbles of the same bytes); Q5_K adds bits 2p, 2p+1 of qh.
 *   Q6_K pair p (0..3), h = p/2, k = p%2: units 4h+k (low nibbles of
 *     ql[64h+32k ..+32], qh bits 2k, 2k+1) and 4h+k+2 (high nibbles of the
 *     same ql bytes, qh bits 2k+4, 2k+5).
 * Decoding keeps the unsigned values: Q4_K's high nibbles stay in place
 * (16 x the value, dotted with an unsigned x signed dp4a and shifted back:
 * exact), Q6_K's -32 is applied to the integer sums through the sums of the
 * activations over each 16 (sum (q - 32) x = sum q x - 32 sum x: exact).
 * The float arithmetic per unit is that of ntx_unit_dot, so a pair's result
 * equals the sum of its two units' ntx_unit_dot. */

/* Unsigned bytes of a times signed bytes of b, plus c. */
NTX_HD int ntx_dp4a_us(uint32_t a, uint32_t b, int c)
{
#ifdef __CUDA_ARCH__
	int d;

	asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
#else
	for (int i = 0; i < 4; i++)
		c += (int)(uint8_t)(a >> (8 * i)) * (int)(int8_t)(uint8_t)(b >> (8 * i));
	return c;
#endif
}

/* 6-bit scales and mins of sub-blocks 2p and 2p+1 from the scale words s0
 * (bytes 0-3), s1 (4-7), s2 (8-11), without branches on p (the GEMV's lanes
 * hold different p): two bytes each in *sc and *m. Same values as
 * ntx_kscale(2p + e) for e = 0, 1. */
NTX_HD void ntx_kscale_pair(int p, uint32_t s0, uint32_t s1, uint32_t s2, uint32_t *sc,
			    uint32_t *m)
{
	const uint32_t sh = 16u * (uint32_t)(p & 1);
	const uint32_t a = s0 >> sh, b = s1 >> sh, c = s2 >> sh;
	const uint32_t sc_lo = a & 0x3f3fu, m_lo = b & 0x3f3fu;
	const uint32_t sc_hi = (c & 0x0f0fu) | ((a >> 2) & 0x3030u);
	const uint32_t m_hi = ((c >> 4) & 0x0f0fu) | ((b >> 2) & 0x3030u);

	*sc = p >= 2 ? sc_hi : sc_lo;
	*m = p >= 2 ? m_hi : m_lo;
}

/* A decoded pair: v0 = the first unit's 32 values (word k = elements 4k..),
 * v1 = the second's (Q4_K: 16 x the value); per unit a, b (as ntx_wu) and,
 * for Q6_K, the two int8 sub-block scales s[unit][half]. */
struct ntx_wp {
	uint32_t v0[8], v1[8];
	float a0, b0, a1, b1;
	int s00, s01, s10, s11;
};

/* Decode pair p (0..3) of the K-quant block at blk. Q4_K / Q5_K blocks are
 * 16-byte aligned (16-byte loads); Q6_K blocks 2-byte aligned. */
template <int T> NTX_HD void ntx_pair_decode(const uint8_t *blk, int p, ntx_wp &w)
{
	static_assert(T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K || T == NTX_TYPE_Q6_K, "K-quants");
	if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K) {
		uint32_t h[4], q[8], sc, m;

		ntx_ld_words_a16<4>(blk, h);
		ntx_kscale_pair(p, h[1], h[2], h[3], &sc, &m);
		if constexpr (T == NTX_TYPE_Q4_K) {
			ntx_ld_words_a16<8>(blk + 16 + 32 * p, q);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				w.v0[k] = q[k] & 0x0F0F0F0Fu;
				w.v1[k] = q[k] & 0xF0F0F0F0u;
			}
		} else {
			uint32_t qh[8];
			const uint32_t hs = 2u * (uint32_t)p;

			ntx_ld_words_a16<8>(blk + 16, qh);
			ntx_ld_words_a16<8>(blk + 48 + 32 * p, q);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				const uint32_t t = qh[k] >> hs;

				w.v0[k] = (q[k] & 0x0F0F0F0Fu) | ((t << 4) & 0x10101010u);
				w.v1[k] = ((q[k] >> 4) & 0x0F0F0F0Fu) | ((t << 3) & 0x10101010u);
			}
		}
		const float d = ntx_h2f(h[0] & 0xFFFF), dmin = ntx_h2f(h[0] >> 16);

		w.a0 = d * (float)(sc & 0xFF);
		w.a1 = d * (float)(sc >> 8);
		w.b0 = dmin * (float)(m & 0xFF);
		w.b1 = dmin * (float)(m >> 8);
		w.s00 = w.s01 = w.s10 = w.s11 = 1;
	} else {
		uint32_t ql[8], qh[8];
		const int hf = p >> 1, k2 = p & 1;
		const uint32_t hs = 2u * (uint32_t)k2;
		const int u0 = 4 * hf + k2;
		const uint32_t sc0 = ntx_ld16(blk + 192 + 2 * u0), sc1 = ntx_ld16(blk + 196 + 2 * u0);

		ntx_ld_words_a2<8>(blk + 64 * hf + 32 * k2, ql);
		ntx_ld_words_a2<8>(blk + 128 + 32 * hf, qh);
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const uint32_t t = qh[k] >> hs;

			w.v0[k] = (ql[k] & 0x0F0F0F0Fu) | ((t & 0x03030303u) << 4);
			w.v1[k] = ((ql[k] >> 4) & 0x0F0F0F0Fu) | (t & 0x30303030u);
		}
		w.a0 = w.a1 = ntx_h2f(ntx_ld16(blk + 208));
		w.b0 = w.b1 = 0.0f;
		w.s00 = (int)(int8_t)(uint8_t)(sc0 & 0xFF);
		w.s01 = (int)(int8_t)(uint8_t)(sc0 >> 8);
		w.s10 = (int)(int8_t)(uint8_t)(sc1 & 0xFF);
		w.s11 = (int)(int8_t)(uint8_t)(sc1 >> 8);
	}
}

/* Activations of one pair for one token: the two 32-blocks x0 (first unit)
 * and x1 (second unit) as packed int8 words, their (d, d*sum), and for Q6_K
 * the sums of each 16 (h00, h01: x0's halves; h10, h11: x1's). */
struct ntx_xp {
	uint32_t x0[8], x1[8];
	float2 ds0, ds1;
	int h00, h01, h10, h11;
};

/* Fill the Q6_K half sums of xp (other types need none). */
template <int T> NTX_HD void ntx_xp_sums(ntx_xp &x)
{
	if constexpr (T == NTX_TYPE_Q6_K) {
		int a = 0, b = 0, c = 0, e = 0;

#pragma unroll
		for (int k = 0; k < 4; k++) {
			a = ntx_dp4a(0x01010101u, x.x0[k], a);
			b = ntx_dp4a(0x01010101u, x.x0[k + 4], b);
			c = ntx_dp4a(0x01010101u, x.x1[k], c);
			e = ntx_dp4a(0x01010101u, x.x1[k + 4], e);
		}
		x.h00 = a, x.h01 = b, x.h10 = c, x.h11 = e;
	}
}

/* Dot of a decoded pair with one token's activations. */
template <int T> NTX_HD float ntx_pair_dot(const ntx_wp &w, const ntx_xp &x)
{
	int p0 = 0, p1 = 0, q0 = 0, q1 = 0;

	if constexpr (T == NTX_TYPE_Q4_K) {
#pragma unroll
		for (int k = 0; k < 4; k++) {
			p0 = ntx_dp4a(w.v0[k], x.x0[k], p0);
			p1 = ntx_dp4a(w.v0[k + 4], x.x0[k + 4], p1);
			q0 = ntx_dp4a_us(w.v1[k], x.x1[k], q0);
			q1 = ntx_dp4a_us(w.v1[k + 4], x.x1[k + 4], q1);
		}
		q0 >>= 4, q1 >>= 4; /* exact: 16 x an integer */
	} else {
#pragma unroll
		for (int k = 0; k < 4; k++) {
			p0 = ntx_dp4a(w.v0[k], x.x0[k], p0);
			p1 = ntx_dp4a(w.v0[k + 4], x.x0[k + 4], p1);
			q0 = ntx_dp4a(w.v1[k], x.x1[k], q0);
			q1 = ntx_dp4a(w.v1[k + 4], x.x1[k + 4], q1);
		}
	}
	if constexpr (T == NTX_TYPE_Q6_K) {
		p0 -= 32 * x.h00, p1 -= 32 * x.h01, q0 -= 32 * x.h10, q1 -= 32 * x.h11;
		return w.a0 * x.ds0.x * (float)(w.s00 * p0 + w.s01 * p1) +
		       w.a1 * x.ds1.x * (float)(w.s10 * q0 + w.s11 * q1);
	} else {
		return (w.a0 * x.ds0.x * (float)(p0 + p1) - w.b0 * x.ds0.y) +
		       (w.a1 * x.ds1.x * (float)(q0 + q1) - w.b1 * x.ds1.y);
	}
}

/* Index (0..7) of the two units of pair p within their block. */
template <int T> NTX_HD void ntx_pair_units(int p, int *u0, int *u1)
{
	if constexpr (T == NTX_TYPE_Q6_K) {
		*u0 = 4 * (p >> 1) + (p & 1);
		*u1 = *u0 + 2;
	} else {
		*u0 = 2 * p;
		*u1 = 2 * p + 1;
	}
}

/* ---- global loads ---- */

/* Read-only global loads for the GEMV (memcpy on the host). The streaming
 * forms (weights, read once) do not allocate in L1. */
NTX_HD uint32_t ntx_ldg16(const uint8_t *p) /* 2-byte aligned */
{
#ifdef __CUDA_ARCH__
	unsigned short v;

	asm("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
	return v;
#else
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
#endif
}

NTX_HD uint2 ntx_ldg64(const uint8_t *p) /* 8-byte aligned */
{
	uint2 v;
#ifdef __CUDA_ARCH__
	asm("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
#else
	memcpy(&v, p, 8);
#endif
	return v;
}

/* 16-byte aligned; STREAM: read once, not kept in L1 (weights), else
 * cached in L1 (bytes several lanes or rows share). */
template <bool STREAM> NTX_HD uint4 ntx_ldg128_x(const uint8_t *p)
{
	uint4 v;
#ifdef __CUDA_ARCH__
	if constexpr (STREAM)
		asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
		    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		    : "l"(p));
	else
		asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
		    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		    : "l"(p));
#else
	memcpy(&v, p, 16);
#endif
	return v;
}

NTX_HD uint4 ntx_ldg128s(const uint8_t *p)
{
	return ntx_ldg128_x<true>(p);
}

NTX_HD uint4 ntx_ldg128(const uint8_t *p)
{
	return ntx_ldg128_x<false>(p);
}

NTX_HD float4 ntx_ldg_f4(const float4 *p) /* 16-byte aligned, cached in L1 */
{
#ifdef __CUDA_ARCH__
	return __ldg(p);
#else
	return *p;
#endif
}

NTX_HD float2 ntx_ldg_f2(const float2 *p)
{
#ifdef __CUDA_ARCH__
	return __ldg(p);
#else
	return *p;
#endif
}

NTX_HD float ntx_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
	return __fmaf_rn(a, b, c);
#else
	return fmaf(a, b, c);
#endif
}

/* ---- q8 activations ---- */

/* Formats of the q8 activations (values of enum ntx_cuda_q8_fmt, ntx_cuda.h). */
#define NTX_Q8F_32 0   /* per 32, d = max|x| / 127 in float */
#define NTX_Q8F_Q8_0 1 /* per 32, d rounded to fp16: ggml's Q8_0 */
#define NTX_Q8F_Q8_K 2 /* per 256, ggml's Q8_K sign and clamp rules */

NTX_HD int ntx_q8f_group(int fmt)
{
	return fmt == NTX_Q8F_Q8_K ? 256 : 32;
}

/* The q8 form of n floats (n a multiple of the format's group) in format
 * fmt, element by element as the CUDA producers compute it in parallel
 * (ntx_q8_store8, common.cuh): q[n], and per 32 elements d[] and dsum[] =
 * d * sum(q over the 32). Q8_0: q = rne(x * (127 / amax)), d = fp16(amax /
 * 127); Q8_K: max = the first x of largest magnitude, iscale = -127 / max,
 * q = min(127, rne(iscale * x)), d = 1 / iscale (0 and q = 0 when max = 0),
 * the same d for the 8 sub-blocks. The host test checks q and d against
 * ntx_quantize_act_ref. */
NTX_HD void ntx_q8_quantize_fmt(const float *x, int64_t n, int fmt, int8_t *q, float *d,
				float *dsum)
{
	const int gs = ntx_q8f_group(fmt);

	for (int64_t g0 = 0; g0 < n; g0 += gs) {
		float amax = 0.0f, mx = 0.0f, dd, id;

		for (int i = 0; i < gs; i++) {
			float ax = fabsf(x[g0 + i]);

			if (ax > amax)
				amax = ax, mx = x[g0 + i];
		}
		if (fmt == NTX_Q8F_Q8_K) {
			id = amax != 0.0f ? -127.0f / mx : 0.0f;
			dd = amax != 0.0f ? 1.0f / id : 0.0f;
			for (int i = 0; i < gs; i++) {
				int v = ntx_rne(ntx_mul(id, x[g0 + i]));

				q[g0 + i] = (int8_t)(v < 127 ? v : 127);
			}
		} else {
			id = amax != 0.0f ? 127.0f / amax : 0.0f;
			dd = amax / 127.0f;
			if (fmt == NTX_Q8F_Q8_0)
				dd = ntx_h2f(ntx_f2h(dd));
			for (int i = 0; i < gs; i++)
				q[g0 + i] = (int8_t)ntx_rne(ntx_mul(x[g0 + i], id));
		}
		for (int b = 0; b < gs / 32; b++) {
			int sum = 0;

			for (int i = 0; i < 32; i++)
				sum += q[g0 + 32 * b + i];
			d[g0 / 32 + b] = dd;
			dsum[g0 / 32 + b] = ntx_mul(dd, (float)sum);
		}
	}
}

/* Quantize 32 floats: amax = max |x|, d = amax / 127, q = rne(x * 127/amax)
 * (0 when amax = 0), dsum = d * sum(q). The CUDA kernels compute the same
 * values spread over 8 lanes (ntx_cuda.h: the q8 format). */
NTX_HD void ntx_q8_quantize32(const float *x, int8_t *q, float *d, float *dsum)
{
	float amax = 0.0f, id;
	int sum = 0;

	for (int i = 0; i < 32; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	id = amax != 0.0f ? 127.0f / amax : 0.0f;
	for (int i = 0; i < 32; i++) {
		q[i] = (int8_t)ntx_rne(x[i] * id);
		sum += q[i];
	}
	*d = amax / 127.0f;
	*dsum = *d * (float)sum;
}

#endif
