/* blockmath.cuh - per-block math of the quantized weight types, shared by
 * the CUDA kernels and a host-side test (tests/gpu/host_blockmath.cu) that
 * checks it against the CPU oracle (ntx_vec_dot_ref, ntx_dequant_row_ref)
 * on a machine without a GPU. Every function here is __host__ __device__;
 * intrinsics (__dp4a, __funnelshift_r, half conversion) have portable host
 * fallbacks.
 *
 * The unit of work is 32 consecutive elements of a weight row ("a unit"):
 * one Q4_0 / Q8_0 block, or one eighth of a K-quant super-block. A unit
 * decodes into 8 words of 4 packed int8 values (struct ntx_wu), and its dot
 * product with one q8 activation block (32 int8, float2 ds = (d, d*sum(q)),
 * see ntx_cuda.h) is
 *
 *     a * ds.x * (s0 * sum_{k<4} v_k.x_k + s1 * sum_{k>=4} v_k.x_k) - b * ds.y
 *
 * with a, b, s0, s1 per type:
 *   Q4_0: v = nibble 0..15, a = d, b = 8d, s = 1    (d (q - 8) = d q - 8 d)
 *   Q8_0: v = q,            a = d, b = 0,  s = 1
 *   Q4_K: v = nibble,       a = d sc, b = dmin m, s = 1
 *   Q5_K: v = nibble | h<<4, as Q4_K
 *   Q6_K: v = q - 32,       a = d, b = 0, s0/s1 = the two int8 sub-block scales
 * Layout facts (ggml's, also documented in kernels/cpu/quant_ref.c):
 *   Q4_0  18 B: d, qs[16]: element l low nibble of qs[l], l+16 high nibble.
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

/* ---- unit decode ---- */

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

/* Decode unit u (0 .. UPB-1) of the block at blk. */
template <int T> NTX_HD void ntx_unit_decode(const uint8_t *blk, int u, ntx_wu &w)
{
	if constexpr (T == NTX_TYPE_Q4_0) {
		uint32_t q[4];

		(void)u;
		ntx_ld_words_a2<4>(blk + 2, q);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			w.v[k] = q[k] & 0x0F0F0F0Fu;
			w.v[k + 4] = (q[k] >> 4) & 0x0F0F0F0Fu;
		}
		w.a = ntx_h2f(ntx_ld16(blk));
		w.b = 8.0f * w.a;
		w.s0 = w.s1 = 1;
	} else if constexpr (T == NTX_TYPE_Q8_0) {
		(void)u;
		ntx_ld_words_a2<8>(blk + 2, w.v);
		w.a = ntx_h2f(ntx_ld16(blk));
		w.b = 0.0f;
		w.s0 = w.s1 = 1;
	} else if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K) {
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
		w.a = ntx_h2f(ntx_ld16(blk + 208));
		w.b = 0.0f;
		w.s0 = (int)(int8_t)(uint8_t)(sc & 0xFF);
		w.s1 = (int)(int8_t)(uint8_t)(sc >> 8);
	}
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

/* ---- tensor-core GEMV fragments (mma.sync m16n8k32, int8) ----
 * The quantized GEMV (gemv_q8.cu) multiplies a tile of 16 weight rows by
 * the 8 token columns of the q8 activations, one 32-element unit at a time,
 * with mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.s8.s32 (PTX ISA,
 * "Matrix Fragments for mma.m16n8k32"; g = lane / 4, t = lane % 4):
 *   A (16 x 32): a0 = row g, k 4t..4t+3;  a1 = row g+8, k 4t..4t+3;
 *                a2 = row g, k 16+4t..;   a3 = row g+8, k 16+4t..
 *   B (32 x 8):  b0 = column g, k 4t..4t+3; b1 = column g, k 16+4t..
 *   C (16 x 8):  c0, c1 = row g, columns 2t, 2t+1; c2, c3 = row g+8, same.
 * Only the pairing of A's and B's k slots matters for the dot product, so
 * each type picks which 8 elements of a unit lane t holds ("lane words" w0,
 * w1 going to k slots 4t.. and 16+4t..; B takes the activations of the same
 * elements):
 *   Q4_0, Q8_0, Q4_K, Q5_K: elements 8t..8t+3 and 8t+4..8t+7 (8 contiguous
 *     bytes of the activations; Q4_K: 8 contiguous qs bytes serve both
 *     units of a pair);
 *   Q6_K: elements 4t..4t+3 and 16+4t..16+4t+3, so that k slots 0..15 hold
 *     the first 16-element sub-block and 16..31 the second: two mma with
 *     (a0, a1, 0, 0) and (0, 0, a2, a3) give the two sub-block sums, which
 *     have their own int8 scales.
 * C holds exact integer sums; every (row, token) value is then accumulated
 * in float by the one lane holding it, unit after unit, with the same
 * instructions whatever the number of tokens (ntx_mepi): results do not
 * depend on n_tok or on the other tokens of the launch.
 *
 * Value conventions (exact): Q4_0 q - 8 and Q6_K q - 32 as signed bytes;
 * Q4_K high nibbles in place (16 x q, unsigned bytes: the mma is u8 x s8)
 * with the unit's scale a divided by 16 (exact: a power of two); Q5_K q in
 * 0..31. Per unit and row: a (float), b (the min, Q4_K / Q5_K), and for
 * Q6_K the two int8 sub-block scales. */

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

NTX_HD uint32_t ntx_ldg32(const uint8_t *p) /* 4-byte aligned */
{
#ifdef __CUDA_ARCH__
	uint32_t v;

	asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
#else
	uint32_t v;

	memcpy(&v, p, 4);
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

NTX_HD uint2 ntx_ldg64s(const uint8_t *p) /* 8-byte aligned, streaming */
{
	uint2 v;
#ifdef __CUDA_ARCH__
	asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
#else
	memcpy(&v, p, 8);
#endif
	return v;
}

NTX_HD uint4 ntx_ldg128s(const uint8_t *p) /* 16-byte aligned, streaming */
{
	uint4 v;
#ifdef __CUDA_ARCH__
	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	    : "l"(p));
#else
	memcpy(&v, p, 16);
#endif
	return v;
}

NTX_HD float2 ntx_ldg_f2(const float2 *p)
{
#ifdef __CUDA_ARCH__
	return __ldg(p);
#else
	return *p;
#endif
}

/* ntx_ld_words_a2 through read-only global loads; a 4-byte aligned p takes
 * N plain loads (the rows of a matrix share their alignment when the row
 * size is a multiple of 4, so the branch is uniform across a warp; when it
 * is not, the warp diverges and stays correct). */
template <int N> NTX_HD void ntx_ldg_words_a2(const uint8_t *p, uint32_t *w)
{
	if (((uintptr_t)p & 2) == 0) {
#pragma unroll
		for (int i = 0; i < N; i++)
			w[i] = ntx_ldg32(p + 4 * i);
		return;
	}
	const uint8_t *b = p - ((uintptr_t)p & 3);
	const uint32_t sh = ((uint32_t)(uintptr_t)p & 2u) * 8u;
	uint32_t raw[N + 1];

#pragma unroll
	for (int i = 0; i < N; i++)
		raw[i] = ntx_ldg32(b + 4 * i);
	raw[N] = ntx_ldg32(b + 4 * (N - (sh == 0))); /* unused when aligned */
#pragma unroll
	for (int i = 0; i < N; i++)
		w[i] = ntx_fshr(raw[i], raw[i + 1], sh);
}

NTX_HD float ntx_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
	return __fmaf_rn(a, b, c);
#else
	return fmaf(a, b, c);
#endif
}

NTX_HD float ntx_add(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(a, b);
#else
	return a + b;
#endif
}

/* One row's share of one block as lane t holds it (raw words). */
template <int T> struct ntx_mb;
template <> struct ntx_mb<NTX_TYPE_Q4_0> {
	uint32_t q[2], d;
};
template <> struct ntx_mb<NTX_TYPE_Q8_0> {
	uint32_t q[2], d;
};
template <> struct ntx_mb<NTX_TYPE_Q4_K> {
	uint4 h;   /* d, dmin, scales[12] */
	uint2 q[4]; /* qs[32p + 8t ..+8] for pair p */
};
template <> struct ntx_mb<NTX_TYPE_Q5_K> {
	uint4 h;
	uint2 qh;   /* qh[8t ..+8] */
	uint2 q[4]; /* qs[32p + 8t ..+8] */
};
template <> struct ntx_mb<NTX_TYPE_Q6_K> {
	uint32_t ql[8]; /* [4h + 2k + j]: ql[64h + 32k + 16j + 4t ..+4] */
	uint32_t qh[4]; /* [2h + j]: qh[32h + 16j + 4t ..+4] */
	uint32_t sc[4]; /* the 16 int8 scales */
	uint32_t d;
};

/* Does the type's A operand need unsigned bytes (Q4_K's in-place high
 * nibbles, up to 240)? Every other type fits signed bytes. */
template <int T> NTX_HD constexpr bool ntx_mma_u8(void)
{
	return T == NTX_TYPE_Q4_K;
}

/* Load lane t's words of the block at blk (alignment: ntx_qt<T>::ALIGN). */
template <int T> NTX_HD void ntx_mb_load(const uint8_t *blk, int t, ntx_mb<T> &b)
{
	if constexpr (T == NTX_TYPE_Q4_0) {
		ntx_ldg_words_a2<2>(blk + 2 + 8 * (t & 1), b.q);
		b.d = ntx_ldg16(blk);
	} else if constexpr (T == NTX_TYPE_Q8_0) {
		ntx_ldg_words_a2<2>(blk + 2 + 8 * t, b.q);
		b.d = ntx_ldg16(blk);
	} else if constexpr (T == NTX_TYPE_Q4_K) {
		b.h = ntx_ldg128s(blk);
#pragma unroll
		for (int p = 0; p < 4; p++)
			b.q[p] = ntx_ldg64s(blk + 16 + 32 * p + 8 * t);
	} else if constexpr (T == NTX_TYPE_Q5_K) {
		b.h = ntx_ldg128s(blk);
		b.qh = ntx_ldg64s(blk + 16 + 8 * t);
#pragma unroll
		for (int p = 0; p < 4; p++)
			b.q[p] = ntx_ldg64s(blk + 48 + 32 * p + 8 * t);
	} else {
#pragma unroll
		for (int i = 0; i < 8; i++)
			ntx_ldg_words_a2<1>(blk + 64 * (i >> 2) + 32 * ((i >> 1) & 1) + 16 * (i & 1) + 4 * t,
					    &b.ql[i]);
#pragma unroll
		for (int i = 0; i < 4; i++)
			ntx_ldg_words_a2<1>(blk + 128 + 32 * (i >> 1) + 16 * (i & 1) + 4 * t, &b.qh[i]);
		ntx_ldg_words_a2<4>(blk + 192, b.sc);
		b.d = ntx_ldg16(blk + 208);
	}
}

/* Lane t's two A words of unit u (0 .. UPB-1) of a loaded block. */
template <int T> NTX_HD void ntx_mb_unit(const ntx_mb<T> &b, int u, int t, uint32_t *w)
{
	if constexpr (T == NTX_TYPE_Q4_0) {
		const uint32_t sh = 4u * (uint32_t)(t >> 1);

		(void)u;
#pragma unroll
		for (int i = 0; i < 2; i++) /* bytewise q - 8: q + 120 never carries */
			w[i] = (((b.q[i] >> sh) & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
	} else if constexpr (T == NTX_TYPE_Q8_0) {
		(void)u, (void)t;
		w[0] = b.q[0], w[1] = b.q[1];
	} else if constexpr (T == NTX_TYPE_Q4_K) {
		const uint32_t m = (u & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu;

		(void)t;
		w[0] = b.q[u >> 1].x & m;
		w[1] = b.q[u >> 1].y & m;
	} else if constexpr (T == NTX_TYPE_Q5_K) {
		const uint32_t sh = 4u * (uint32_t)(u & 1);
		const uint2 q = b.q[u >> 1];

		(void)t;
		w[0] = ((q.x >> sh) & 0x0F0F0F0Fu) | (((b.qh.x >> u) << 4) & 0x10101010u);
		w[1] = ((q.y >> sh) & 0x0F0F0F0Fu) | (((b.qh.y >> u) << 4) & 0x10101010u);
	} else {
		const int h = u >> 2, q = u & 3;
		const uint32_t ls = 4u * (uint32_t)(q >> 1), hs = 2u * (uint32_t)q;

		(void)t;
#pragma unroll
		for (int j = 0; j < 2; j++) {
			const uint32_t v = ((b.ql[4 * h + 2 * (q & 1) + j] >> ls) & 0x0F0F0F0Fu) |
					   (((b.qh[2 * h + j] >> hs) & 0x03030303u) << 4);

			w[j] = (v + 0x60606060u) ^ 0x80808080u; /* bytewise v - 32 */
		}
	}
}

/* Scales of unit u of a loaded block: *a, *bm (the min term, 0 if none),
 * Q6_K: *s0, *s1 = the int8 scales of the unit's two 16-element halves. */
template <int T> NTX_HD void ntx_mb_scale(const ntx_mb<T> &b, int u, float *a, float *bm, int *s0,
					 int *s1)
{
	*s0 = *s1 = 1;
	if constexpr (T == NTX_TYPE_Q4_0 || T == NTX_TYPE_Q8_0) {
		(void)u;
		*a = ntx_h2f(b.d);
		*bm = 0.0f;
	} else if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K) {
		const uint32_t s0w = b.h.y, s1w = b.h.z, s2w = b.h.w;
		/* 6-bit scales and mins of units 0..3 (lo) and 4..7 (hi), one per byte */
		const uint32_t sc = u < 4 ? s0w & 0x3f3f3f3fu
					  : (s2w & 0x0f0f0f0fu) | ((s0w >> 2) & 0x30303030u);
		const uint32_t m = u < 4 ? s1w & 0x3f3f3f3fu
					 : ((s2w >> 4) & 0x0f0f0f0fu) | ((s1w >> 2) & 0x30303030u);
		const uint32_t sh = 8u * (uint32_t)(u & 3);
		const float d = ntx_h2f(b.h.x & 0xFFFF), dmin = ntx_h2f(b.h.x >> 16);

		*a = ntx_mul(d, (float)((sc >> sh) & 0xFF));
		if (T == NTX_TYPE_Q4_K && (u & 1))
			*a = ntx_mul(*a, 0.0625f); /* the high nibbles are 16 x q: exact */
		*bm = ntx_mul(dmin, (float)((m >> sh) & 0xFF));
	} else {
		const uint32_t w = b.sc[u >> 1] >> (16 * (u & 1));

		*a = ntx_h2f(b.d);
		*bm = 0.0f;
		*s0 = (int)(int8_t)(uint8_t)(w & 0xFF);
		*s1 = (int)(int8_t)(uint8_t)((w >> 8) & 0xFF);
	}
}

/* Lane t's two B words of global unit ug of one token's int8 activations. */
template <int T> NTX_HD void ntx_mx_load(const int8_t *xrow, int64_t ug, int t, uint32_t *bw)
{
	const uint8_t *p = (const uint8_t *)xrow + 32 * ug;

	if constexpr (T == NTX_TYPE_Q6_K) {
		bw[0] = ntx_ldg32(p + 4 * t);
		bw[1] = ntx_ldg32(p + 16 + 4 * t);
	} else {
		const uint2 v = ntx_ldg64(p + 8 * t);

		bw[0] = v.x, bw[1] = v.y;
	}
}

/* Accumulate one (row, token) value of one unit: c0 = the mma sum (Q6_K:
 * c0, c1 = the sums of the two halves), ds = the token's (d, d*sum) of the
 * unit. The only float arithmetic of the GEMV before the final store. */
template <int T> NTX_HD float ntx_mepi(float acc, float a, float bm, int s0, int s1, int c0, int c1,
				      float2 ds)
{
	const int c = T == NTX_TYPE_Q6_K ? s0 * c0 + s1 * c1 : c0;

	(void)c1;
	acc = ntx_fma(ntx_mul(a, ds.x), (float)c, acc);
	if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K)
		acc = ntx_fma(-bm, ds.y, acc);
	return acc;
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
