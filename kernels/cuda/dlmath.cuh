/* dlmath.cuh - the lane math of the direct-load GEMV (gemv_dl.cu), shared
 * with a host test (tests/gpu/host_blockmath.cu) that emulates a warp lane
 * by lane against the CPU oracle.
 *
 * The direct-load GEMV reads every weight byte with an aligned 16-byte load
 * straight into registers: no shared memory, no staging. That needs rows
 * whose blocks sit at 16-byte boundaries: Q4_K (144 B) and Q5_K (176 B) in
 * GGUF layout, and Q4_0, Q8_0, Q6_K in split rows (ntx_cuda.h). A "step" of
 * a warp is 32 lanes' worth of one row: LPB lanes per block, so 32 / LPB
 * consecutive blocks; lane l works on block l / LPB of the step with its
 * part j = l % LPB:
 *
 *   Q4_K, LPB 8: qs[16j ..+16], the 16 bytes (d, dmin, scales) broadcast to
 *     the block's 8 lanes. qs[16j + i] holds element 16(j&1) + i of unit
 *     2(j>>1) (low nibble) and of unit 2(j>>1)+1 (high nibble, used in place
 *     as 16 x its value with an unsigned x signed dp4a, shifted back exactly).
 *   Q5_K, LPB 8: as Q4_K, plus qh[16(j&1) ..+16] (the fifth bits; shared by
 *     the 4 lanes of the same half).
 *   Q6_K (split), LPB 8: h = j >> 2, c = j & 3: ql[64h + 16c ..+16] holds
 *     positions l = 16(c&1) + i of units 4h + (c>>1) (low nibbles) and
 *     4h + (c>>1) + 2 (high nibbles); their top bits are bits 2(c>>1), +1 and
 *     2(c>>1) + 4, +5 of qh[32h + l] (a 16-byte load shared by lanes j and
 *     j ^ 2); scales[8h + c] and scales[8h + c + 4] (one 8-byte load), d.
 *   Q4_0 (split), LPB 1: the block's qs[16] (elements l: low nibble of qs[l],
 *     l + 16: high nibble) and d.
 *   Q8_0 (split), LPB 2: qs[16j ..+16] and d.
 *
 * Q4_K and split Q6_K take the canonical chain at the end of this file
 * (per block exact integers, one float step per block slot). For the other
 * types a lane holds at most 16 elements of a unit, so Q5_K's min terms
 * (which cover a whole unit through d * sum(q)) are added by the even lanes
 * only. Every lane accumulates in float, step after step, with the same
 * instructions whatever the number of tokens: a token's value does not
 * depend on the other tokens of the launch (batch invariance). */
#ifndef NTX_CUDA_DLMATH_CUH
#define NTX_CUDA_DLMATH_CUH

#include "blockmath.cuh"

/* Lanes per block; bytes of a block in the row's payload region. */
template <int T> struct ntx_dl;
template <> struct ntx_dl<NTX_TYPE_Q4_K> {
	enum { LPB = 8, PB = 144 };
};
template <> struct ntx_dl<NTX_TYPE_Q5_K> {
	enum { LPB = 8, PB = 176 };
};
template <> struct ntx_dl<NTX_SPLIT | NTX_TYPE_Q6_K> {
	enum { LPB = 8, PB = 208 };
};
template <> struct ntx_dl<NTX_SPLIT | NTX_TYPE_Q4_0> {
	enum { LPB = 1, PB = 16 };
};
template <> struct ntx_dl<NTX_SPLIT | NTX_TYPE_Q8_0> {
	enum { LPB = 2, PB = 32 };
};

/* What one lane loads for one (row, block): raw words. */
template <int T> struct ntx_dlr;
template <> struct ntx_dlr<NTX_TYPE_Q4_K> {
	uint4 h, q;
};
template <> struct ntx_dlr<NTX_TYPE_Q5_K> {
	uint4 h, qh, q;
};
template <> struct ntx_dlr<NTX_SPLIT | NTX_TYPE_Q6_K> {
	uint4 ql, qh;
	uint2 sc; /* scales[8h ..+8] */
	uint32_t d;
};
template <> struct ntx_dlr<NTX_SPLIT | NTX_TYPE_Q4_0> {
	uint4 q;
	uint32_t d;
};
template <> struct ntx_dlr<NTX_SPLIT | NTX_TYPE_Q8_0> {
	uint4 q;
	uint32_t d;
};

/* Load part j of block b of a row of nb blocks. Quantized bytes stream past
 * L1 (read once); the bytes several lanes share (headers, scales, d) go
 * through L1. */
template <int T> NTX_HD void ntx_dl_load(const uint8_t *row, int nb, int b, int j, ntx_dlr<T> &r)
{
	constexpr int PB = ntx_dl<T>::PB;
	const uint8_t *blk = row + (int64_t)b * PB;

	if constexpr (T == NTX_TYPE_Q4_K) {
		r.h = ntx_ldg128(blk);
		r.q = ntx_ldg128s(blk + 16 + 16 * j);
	} else if constexpr (T == NTX_TYPE_Q5_K) {
		r.h = ntx_ldg128(blk);
		r.qh = ntx_ldg128(blk + 16 + 16 * (j & 1));
		r.q = ntx_ldg128s(blk + 48 + 16 * j);
	} else if constexpr (T == (NTX_SPLIT | NTX_TYPE_Q6_K)) {
		const int h = j >> 2, c = j & 3;

		r.ql = ntx_ldg128s(blk + 16 * j);
		r.qh = ntx_ldg128(blk + 128 + 16 * (2 * h + (c & 1)));
		r.sc = ntx_ldg64(blk + 192 + 8 * h);
		r.d = ntx_ldg16(row + (int64_t)nb * PB + 2 * b);
	} else {
		r.q = ntx_ldg128s(blk + 16 * j);
		r.d = ntx_ldg16(row + (int64_t)nb * PB + 2 * b);
	}
}

/* A lane's decoded weights: va = the first unit's 16 values (4 words),
 * vb = the second's (Q8_0: none); scales per unit. */
struct ntx_dlw {
	uint32_t va[4], vb[4];
	float aa, ab; /* d * scale of each unit (Q6_K: d) */
	float ba, bb; /* min terms (Q4_K / Q5_K even lanes, Q4_0: 8d), else 0 */
	int sa, sb;   /* Q6_K: the int8 scales of the lane's 16 elements */
};

template <int T> NTX_HD void ntx_dl_decode(const ntx_dlr<T> &r, int j, ntx_dlw &w)
{
	w.sa = w.sb = 1;
	w.ba = w.bb = 0.0f;
	if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K) {
		const int p = j >> 1;
		const uint32_t qw[4] = { r.q.x, r.q.y, r.q.z, r.q.w };
		uint32_t sc, m;

		ntx_kscale_pair(p, r.h.y, r.h.z, r.h.w, &sc, &m);
		if constexpr (T == NTX_TYPE_Q4_K) {
#pragma unroll
			for (int k = 0; k < 4; k++) {
				w.va[k] = qw[k] & 0x0F0F0F0Fu;
				w.vb[k] = qw[k] & 0xF0F0F0F0u; /* 16 x the value */
			}
		} else {
			const uint32_t hw[4] = { r.qh.x, r.qh.y, r.qh.z, r.qh.w };
			const uint32_t s0 = 2u * (uint32_t)p;

#pragma unroll
			for (int k = 0; k < 4; k++) {
				w.va[k] = (qw[k] & 0x0F0F0F0Fu) | (((hw[k] >> s0) & 0x01010101u) << 4);
				w.vb[k] = ((qw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> (s0 + 1)) & 0x01010101u) << 4);
			}
		}
		const float d = ntx_h2f(r.h.x & 0xFFFF), dmin = ntx_h2f(r.h.x >> 16);

		w.aa = ntx_mul(d, (float)(sc & 0xFF));
		w.ab = ntx_mul(d, (float)(sc >> 8));
		if (!(j & 1)) {
			w.ba = ntx_mul(dmin, (float)(m & 0xFF));
			w.bb = ntx_mul(dmin, (float)(m >> 8));
		}
	} else if constexpr (T == (NTX_SPLIT | NTX_TYPE_Q6_K)) {
		const int c = j & 3;
		const uint32_t s0 = 2u * (uint32_t)(c >> 1), bs = 8u * (uint32_t)c;
		const uint32_t lw[4] = { r.ql.x, r.ql.y, r.ql.z, r.ql.w };
		const uint32_t hw[4] = { r.qh.x, r.qh.y, r.qh.z, r.qh.w };

#pragma unroll
		for (int k = 0; k < 4; k++) {
			const uint32_t t = hw[k] >> s0;

			w.va[k] = (lw[k] & 0x0F0F0F0Fu) | ((t & 0x03030303u) << 4);
			w.vb[k] = ((lw[k] >> 4) & 0x0F0F0F0Fu) | (t & 0x30303030u);
		}
		w.aa = w.ab = ntx_h2f(r.d);
		w.sa = (int)(int8_t)(uint8_t)(r.sc.x >> bs);
		w.sb = (int)(int8_t)(uint8_t)(r.sc.y >> bs);
	} else if constexpr (T == (NTX_SPLIT | NTX_TYPE_Q4_0)) {
		const uint32_t qw[4] = { r.q.x, r.q.y, r.q.z, r.q.w };

#pragma unroll
		for (int k = 0; k < 4; k++) {
			w.va[k] = qw[k] & 0x0F0F0F0Fu;
			w.vb[k] = (qw[k] >> 4) & 0x0F0F0F0Fu;
		}
		w.aa = ntx_h2f(r.d);
		w.ba = ntx_mul(8.0f, w.aa);
	} else {
		w.va[0] = r.q.x, w.va[1] = r.q.y, w.va[2] = r.q.z, w.va[3] = r.q.w;
		w.aa = ntx_h2f(r.d);
	}
}

/* A lane's activations for one token: xa, xb = the 16 bytes matching va, vb;
 * da, db = their unit's (d, d * sum). */
struct ntx_dlx {
	uint4 xa, xb;
	float2 da, db;
};

/* xq: the token's int8 row, xds: its (d, d*sum) per 32. */
template <int T>
NTX_HD void ntx_dl_xload(const int8_t *xq, const float2 *xds, int b, int j, ntx_dlx &x)
{
	const uint8_t *xp = (const uint8_t *)xq;

	if constexpr (T == NTX_TYPE_Q4_K || T == NTX_TYPE_Q5_K) {
		const int64_t ua = 8 * (int64_t)b + 2 * (j >> 1); /* even: ua, ua + 1 in one load */
		const float4 d = ntx_ldg_f4((const float4 *)(xds + ua));

		x.xa = ntx_ldg128(xp + 32 * ua + 16 * (j & 1));
		x.xb = ntx_ldg128(xp + 32 * (ua + 1) + 16 * (j & 1));
		x.da = make_float2(d.x, d.y);
		x.db = make_float2(d.z, d.w);
	} else if constexpr (T == (NTX_SPLIT | NTX_TYPE_Q6_K)) {
		const int h = j >> 2, c = j & 3;
		const int64_t ua = 8 * (int64_t)b + 4 * h + (c >> 1);

		x.xa = ntx_ldg128(xp + 32 * ua + 16 * (c & 1));
		x.xb = ntx_ldg128(xp + 32 * (ua + 2) + 16 * (c & 1));
		x.da = ntx_ldg_f2(xds + ua);
		x.db = ntx_ldg_f2(xds + ua + 2);
	} else if constexpr (T == (NTX_SPLIT | NTX_TYPE_Q4_0)) {
		x.xa = ntx_ldg128(xp + 32 * (int64_t)b);
		x.xb = ntx_ldg128(xp + 32 * (int64_t)b + 16);
		x.da = x.db = ntx_ldg_f2(xds + b);
	} else {
		x.xa = ntx_ldg128(xp + 32 * (int64_t)b + 16 * j);
		x.da = ntx_ldg_f2(xds + b);
		x.xb = make_uint4(0, 0, 0, 0);
		x.db = x.da;
	}
}

/* The lane's two signed dot products: ia = va . xa, ib = vb . xb. */
NTX_HD void ntx_dl_dots(const uint32_t va[4], const uint32_t vb[4], const ntx_dlx &x, int &ia, int &ib)
{
	const uint32_t xa[4] = { x.xa.x, x.xa.y, x.xa.z, x.xa.w };
	const uint32_t xb[4] = { x.xb.x, x.xb.y, x.xb.z, x.xb.w };

	ia = ib = 0;
#pragma unroll
	for (int k = 0; k < 4; k++) {
		ia = ntx_dp4a(va[k], xa[k], ia);
		ib = ntx_dp4a(vb[k], xb[k], ib);
	}
}

/* acc + this lane's share of one (row, block) for one token (Q5_K, split
 * Q4_0 and Q8_0; Q4_K and split Q6_K take the canonical chain below). */
template <int T> NTX_HD float ntx_dl_dot(const ntx_dlw &w, const ntx_dlx &x, float acc)
{
	static_assert(T != NTX_TYPE_Q4_K && T != (NTX_SPLIT | NTX_TYPE_Q6_K), "canonical chain: ntx_dlk_*");
	int ia = 0, ib = 0;

	if constexpr (T == (NTX_SPLIT | NTX_TYPE_Q8_0)) {
		const uint32_t xa[4] = { x.xa.x, x.xa.y, x.xa.z, x.xa.w };

#pragma unroll
		for (int k = 0; k < 4; k++)
			ia = ntx_dp4a(w.va[k], xa[k], ia);
		return ntx_fma(ntx_mul(w.aa, x.da.x), (float)ia, acc);
	} else if constexpr (T == (NTX_SPLIT | NTX_TYPE_Q4_0)) {
		ntx_dl_dots(w.va, w.vb, x, ia, ib);
		acc = ntx_fma(ntx_mul(w.aa, x.da.x), (float)(ia + ib), acc);
		return ntx_fma(-w.ba, x.da.y, acc);
	} else {
		ntx_dl_dots(w.va, w.vb, x, ia, ib);
		acc = ntx_fma(ntx_mul(w.aa, x.da.x), (float)ia, acc);
		acc = ntx_fma(ntx_mul(w.ab, x.db.x), (float)ib, acc);
		acc = ntx_fma(-w.ba, x.da.y, acc);
		return ntx_fma(-w.bb, x.db.y, acc);
	}
}

/* ---- the canonical K-quant chain (Q4_K, split Q6_K) ----
 * For these two types the lanes do not accumulate floats of their own: a
 * block's exact integers (cpu_impl.h's canonical chain)
 *   Q4_K: I = sum_u sc_u (q . x)_u,  M = sum_u m_u sum(x)_u
 *   Q6_K: I = sum_s sc_s ((q . x)_s - 32 sum(x)_s)
 * are summed over the block's 8 lanes in integers, then every lane applies
 *   a = fma((float)I, dx * d, a) [Q4_K: a = fma(-(float)M, dx * dmin, a)]
 * to the stream of its block slot bl (block b of a step: b % 4 == bl). The
 * tensor-core GEMV (gemv_mma.cu) computes the same integers with mma and
 * runs the same float chain in the same order, so 1 token (here) and 2..8
 * tokens (there) give the same bits. */
struct ntx_dlk {
	uint32_t va[4], vb[4]; /* the lane's 16 values of its two units (Q4_K vb: 16 x) */
	int sa, sb, ma, mb;    /* integer scales, Q4_K mins (Q6_K: 0) */
	float d, dm;           /* block d, dmin (Q6_K: 0) */
};

template <int T> NTX_HD void ntx_dlk_decode(const ntx_dlr<T> &r, int j, ntx_dlk &w)
{
	static_assert(T == NTX_TYPE_Q4_K || T == (NTX_SPLIT | NTX_TYPE_Q6_K), "canonical K-quants");
	if constexpr (T == NTX_TYPE_Q4_K) {
		const uint32_t qw[4] = { r.q.x, r.q.y, r.q.z, r.q.w };
		uint32_t sc, m;

		ntx_kscale_pair(j >> 1, r.h.y, r.h.z, r.h.w, &sc, &m);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			w.va[k] = qw[k] & 0x0F0F0F0Fu;
			w.vb[k] = qw[k] & 0xF0F0F0F0u;
		}
		w.sa = (int)(sc & 0xFF), w.sb = (int)(sc >> 8);
		w.ma = (int)(m & 0xFF), w.mb = (int)(m >> 8);
		w.d = ntx_h2f(r.h.x & 0xFFFF), w.dm = ntx_h2f(r.h.x >> 16);
	} else {
		ntx_dlw v;

		ntx_dl_decode<T>(r, j, v);
#pragma unroll
		for (int k = 0; k < 4; k++)
			w.va[k] = v.va[k], w.vb[k] = v.vb[k];
		w.sa = v.sa, w.sb = v.sb, w.ma = w.mb = 0;
		w.d = v.aa, w.dm = 0.0f;
	}
}

/* The sums of the lane's 16 activation bytes of each unit (sx[0]: xa). */
NTX_HD void ntx_dlk_xsum(const ntx_dlx &x, int sx[2])
{
	const uint32_t xa[4] = { x.xa.x, x.xa.y, x.xa.z, x.xa.w };
	const uint32_t xb[4] = { x.xb.x, x.xb.y, x.xb.z, x.xb.w };

	sx[0] = sx[1] = 0;
#pragma unroll
	for (int k = 0; k < 4; k++) {
		sx[0] = ntx_dp4a(0x01010101u, xa[k], sx[0]);
		sx[1] = ntx_dp4a(0x01010101u, xb[k], sx[1]);
	}
}

/* The lane's shares of the block's I and M (exact integers). */
template <int T> NTX_HD void ntx_dlk_dot(const ntx_dlk &w, const ntx_dlx &x, const int sx[2], int &ip, int &mp)
{
	int ia = 0, ib = 0;

	if constexpr (T == NTX_TYPE_Q4_K) { /* vb: 16 x the high nibbles, unsigned */
		const uint32_t xa[4] = { x.xa.x, x.xa.y, x.xa.z, x.xa.w };
		const uint32_t xb[4] = { x.xb.x, x.xb.y, x.xb.z, x.xb.w };

#pragma unroll
		for (int k = 0; k < 4; k++) {
			ia = ntx_dp4a(w.va[k], xa[k], ia);
			ib = ntx_dp4a_us(w.vb[k], xb[k], ib);
		}
		ip = w.sa * ia + w.sb * (ib >> 4); /* exact: 16 x an integer */
		mp = w.ma * sx[0] + w.mb * sx[1];
	} else {
		ntx_dl_dots(w.va, w.vb, x, ia, ib);
		ip = w.sa * (ia - 32 * sx[0]) + w.sb * (ib - 32 * sx[1]);
		mp = 0;
	}
}

/* One block's step of the float chain (the same in gemv_mma.cu). */
template <int T> NTX_HD float ntx_dlk_acc(int I, int M, float dx, float d, float dm, float a)
{
	a = ntx_fma((float)I, ntx_mul(dx, d), a);
	if constexpr (T == NTX_TYPE_Q4_K)
		a = ntx_fma(-(float)M, ntx_mul(dx, dm), a);
	return a;
}

#endif
