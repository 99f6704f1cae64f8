/* gemv_mma.cu - the K-quant GEMV on int8 tensor cores for 2..8 tokens:
 * Q4_K in GGUF layout and Q6_K in split rows, with Q8_K activations (the
 * format ntx_cuda_q8_fmt gives them: one d per 256 values). A verification
 * pass of speculative decoding runs here, a single token on the dp4a lanes
 * of gemv_dl.cu; both give the same bits.
 *
 * Why: with dp4a lanes every extra token costs the dot products again (a
 * pass of 8 tokens took 2.5x a pass of 1 on a resident 8B); one mma
 * m16n8k32 gives 16 rows x 8 tokens of exact integer sums at once.
 *
 * Arithmetic: the canonical chain of dlmath.cuh (ntx_dlk_*): per row, token
 * and block b of 256, exact integers
 *   Q4_K: I_b = sum_u sc_u (q . x)_u,  M_b = sum_u m_u sum(x)_u  (8 units
 *         of 32);
 *   Q6_K: I_b = sum_s sc_s ((q . x)_s - 32 sum(x)_s)  (16 units of 16);
 * then ntx_dlk_acc into the float stream of the block's slot b % 4, over
 * the steps kw, kw + ks, ... (4 blocks each) of the warp's share kw of the
 * row, (a0 + a2) + (a1 + a3), the ks shares added in order, ks from the
 * direct-load GEMV's plan (ntx_gv_dl_ks). Integers are exact in any order,
 * so these are gemv_dl.cu's values bit for bit, and a token's value
 * depends on nothing else in the launch (its own mma column).
 *
 * Lanes: lane (g, t) of a warp holds rows g and g + 8 of its 16-row tile
 * and token column g (the mma fragments). Q4_K: its 8 bytes 8t .. 8t + 7 of
 * each 32-byte chunk of qs (low nibbles: unit 2c, high: 2c + 1, used in
 * place as 16 x the value with u8 x s8; one 8-byte load per row and chunk,
 * a quad reads whole 32-byte sectors), mapped to the mma's k positions
 * 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3, and the token's activation bytes
 * at the same positions; M from a second mma whose weights are the mins.
 * Q6_K: m16n8k16 per unit of 16 on 4-byte pieces of ql and qh, the sums of
 * x from an all-ones mma. Q4_K keeps the next block's weights in flight
 * while one is computed; split Q6_K, whose block does not fit twice in the
 * registers, the other half of the block (or the next block's first half)
 * while one half is computed. The first weights are loaded before the PDL
 * wait (the kernel before never writes weights). */
#include <atomic>

#include "gemv.cuh"
#include "dlmath.cuh"

#define MM_ROWS 16
#define MM_NT 8    /* tokens per launch: the mma's n */
#define MM_WARPS 8 /* warps per CTA */
#define MM_CTAS_SM 2 /* CTAs per SM (__launch_bounds__: 128 registers) */
#define MM_SB 2    /* warps per share (one per slot pair); 4, a slot each, measured slower */

struct mm_seg {
	const uint8_t *w, *w1; /* the matrix (gate for NM = 2), up for NM = 2 */
	float *y;
	uint64_t row_bytes;
	int n_out, type, epi;
	int ks;   /* shares of a row (the direct-load GEMV's ks) */
	int sb;   /* warps per share: 2 (slots q, q + 2 each) or 1 */
	int tpc;  /* tiles per CTA */
	int cta0; /* first CTA of the segment */
};

struct mm_args {
	mm_seg seg[GV_MAX_SEG];
	int n_seg, n_in, n_tok;
	const int8_t *xqs;
	const float2 *xds;
	int early;
	int beside; /* the second launch of one GEMV (its other weight type): it
		     * reads nothing the launch before writes, so it does not wait
		     * for it until its end (common.cuh) */
};

/* ---- the mma shapes (int8, s32 accumulators) ---- */

/* c = A (u8: rows g, g + 8) . B (s8: token column g) over 32 k, + c0. */
__device__ __forceinline__ void mm_k32u(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
					uint32_t b1, const int c0[4], int c[4])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
	    "{%8, %9}, {%10, %11, %12, %13};"
	    : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c0[0]), "r"(c0[1]), "r"(c0[2]),
	      "r"(c0[3]));
#else
	for (int i = 0; i < 4; i++)
		c[i] = c0[i] + 0 * (int)(a0 + a1 + a2 + a3 + b0 + b1);
#endif
}

/* The same over 16 k (a0, a1; b), from zero. */
__device__ __forceinline__ void mm_k16u(uint32_t a0, uint32_t a1, uint32_t b, int c[4])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
	    "{%7, %7, %7, %7};"
	    : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
	    : "r"(a0), "r"(a1), "r"(b), "r"(0));
#else
	c[0] = c[1] = c[2] = c[3] = 0 * (int)(a0 + a1 + b);
#endif
}

__device__ __forceinline__ uint32_t mm_ldg32(const uint8_t *p)
{
	uint32_t v;

	asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
}

__device__ __forceinline__ uint2 mm_ldg64s(const uint8_t *p) /* weights: past L1 */
{
	uint2 v;

	asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
	return v;
}

/* ---- Q4_K: what a lane loads for one block of its two rows, and the
 * block's integer sums ---- */

template <int T> struct mm_w;
template <> struct mm_w<NTX_TYPE_Q4_K> {
	uint4 h[2];    /* [row]: d, dmin, scales */
	uint2 q[2][4]; /* [row][chunk]: qs bytes 32 c + 8 t .. + 8 */
};

template <int T>
__device__ __forceinline__ void mm_load(const uint8_t *const rp[2], int b, int t, mm_w<T> &w)
{
	static_assert(T == NTX_TYPE_Q4_K, "split Q6_K loads half blocks (mm_load6h)");
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const uint8_t *blk = rp[r] + (int64_t)b * 144;

		w.h[r] = ntx_ldg128(blk);
#pragma unroll
		for (int c = 0; c < 4; c++)
			w.q[r][c] = mm_ldg64s(blk + 16 + 32 * c + 8 * t);
	}
}

/* What a lane loads of token g's activations for one block (zero past
 * n_tok: xq NULL), and the block's d of tokens 2t, 2t + 1. */
template <int T> struct mm_x {
	uint32_t x[16]; /* unit u's 8 bytes 8t.. in x[2u], x[2u + 1] */
	float dx[2];
};

template <int T>
__device__ __forceinline__ void mm_xload(const int8_t *xq, const float2 *const xd[2], int b, int t, mm_x<T> &x)
{
	const uint8_t *xp = xq ? (const uint8_t *)xq + 256 * (int64_t)b : NULL;

#pragma unroll
	for (int u = 0; u < 8; u++) {
		const uint2 v = xp ? ntx_ldg64(xp + 32 * u + 8 * t) : make_uint2(0, 0);

		x.x[2 * u] = v.x, x.x[2 * u + 1] = v.y;
	}
	x.dx[0] = ntx_ldg_f2(xd[0] + 8 * (int64_t)b).x;
	x.dx[1] = ntx_ldg_f2(xd[1] + 8 * (int64_t)b).x;
}

/* The block's I[e] and M[e] for the lane's 4 outputs e: (row g, token 2t),
 * (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1), from its weights w and token
 * g's activations xv. */
template <int T>
__device__ __forceinline__ void mm_block_sums(const mm_w<T> &w, const mm_x<T> &xv, int I[4], int M[4])
{
#pragma unroll
	for (int e = 0; e < 4; e++)
		I[e] = M[e] = 0;
	if constexpr (T == NTX_TYPE_Q4_K) {
		const int z[4] = { 0, 0, 0, 0 };
		uint32_t sc[2][2], mn[2][2]; /* [row][units 0-3, 4-7]: one byte per unit */
		int Ih[4] = { 0, 0, 0, 0 };  /* high-nibble units: 16 x their sums */
		int Mh[4] = { 0, 0, 0, 0 };

#pragma unroll
		for (int r = 0; r < 2; r++) { /* the 6-bit scales and mins (ggml's get_scale_min_k4) */
			const uint4 h = w.h[r];

			sc[r][0] = h.y & 0x3F3F3F3Fu;
			mn[r][0] = h.z & 0x3F3F3F3Fu;
			sc[r][1] = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
			mn[r][1] = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
		}
#pragma unroll
		for (int u = 0; u < 8; u++) {
			const int c = u >> 1, k = u & 3, hi = u & 1;
			const uint32_t mask = hi ? 0xF0F0F0F0u : 0x0F0F0F0Fu, sel = 0x1111u * (uint32_t)k;
			const uint32_t ma = __byte_perm(mn[0][u >> 2], 0, sel), mb = __byte_perm(mn[1][u >> 2], 0, sel);
			int C[4];

			mm_k32u(w.q[0][c].x & mask, w.q[1][c].x & mask, w.q[0][c].y & mask, w.q[1][c].y & mask, xv.x[2 * u],
				xv.x[2 * u + 1], z, C);
			if (hi) /* M += m_u . sum(x)_u, in two chains */
				mm_k32u(ma, mb, ma, mb, xv.x[2 * u], xv.x[2 * u + 1], Mh, Mh);
			else
				mm_k32u(ma, mb, ma, mb, xv.x[2 * u], xv.x[2 * u + 1], M, M);
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int s8 = (int)((sc[e >> 1][u >> 2] >> (8 * k)) & 0xFFu);

				if (hi)
					Ih[e] += s8 * C[e];
				else
					I[e] += s8 * C[e];
			}
		}
#pragma unroll
		for (int e = 0; e < 4; e++)
			I[e] += Ih[e] >> 4, M[e] += Mh[e]; /* exact: Ih is a multiple of 16 */
	}
}

/* acc[e] += the block, in the canonical float chain. dx[i]: tokens 2t + i's
 * activation d for the block. */
template <int T>
__device__ __forceinline__ void mm_block(const mm_w<T> &w, const mm_x<T> &xv, float acc[4])
{
	const float *dx = xv.dx;
	int I[4], M[4];
	float d[2], dm[2];

	mm_block_sums<T>(w, xv, I, M);
#pragma unroll
	for (int r = 0; r < 2; r++) {
		d[r] = ntx_h2f(w.h[r].x & 0xFFFF);
		dm[r] = ntx_h2f(w.h[r].x >> 16);
	}
#pragma unroll
	for (int e = 0; e < 4; e++)
		acc[e] = ntx_dlk_acc<T>(I[e], M[e], dx[e & 1], d[e >> 1], dm[e >> 1], acc[e]);
}

/* ---- split Q6_K in half blocks (units 8 n .. 8 n + 7 of half n), so
 * that one half is in flight while the other is computed: a whole block
 * in each of two buffers does not fit the registers ---- */

struct mm_h6 {
	uint32_t ql[2][2][2]; /* [row][l-half h][+32]: ql[64 n + 32 i + 16 h + 4 t] */
	uint32_t qh[2][2];    /* [row][h]: qh[32 n + 16 h + 4 t] */
	uint2 sc[2];          /* [row]: scales 8 n .. 8 n + 7 */
	uint32_t d[2];        /* [row]: the block's d (loaded with half 0) */
};

__device__ __forceinline__ void mm_load6h(const uint8_t *const rp[2], int nb, int b, int n, int t, mm_h6 &w)
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const uint8_t *blk = rp[r] + (int64_t)b * 208;

#pragma unroll
		for (int h = 0; h < 2; h++) {
			w.ql[r][h][0] = mm_ldg32(blk + 64 * n + 16 * h + 4 * t);
			w.ql[r][h][1] = mm_ldg32(blk + 64 * n + 32 + 16 * h + 4 * t);
			w.qh[r][h] = mm_ldg32(blk + 128 + 32 * n + 16 * h + 4 * t);
		}
		w.sc[r] = ntx_ldg64(blk + 192 + 8 * n);
		if (n == 0)
			w.d[r] = ntx_ldg16(rp[r] + (int64_t)nb * 208 + 2 * b);
	}
}

/* Token g's activations of half n of block b (units 8 n .. 8 n + 7: 4
 * bytes 4t.. each), and with half 0 the block's d of tokens 2t, 2t + 1. */
struct mm_x6h {
	uint32_t x[8];
	float dx[2];
};

__device__ __forceinline__ void mm_xload6h(const int8_t *xq, const float2 *const xd[2], int b, int n, int t,
					   mm_x6h &x)
{
	const uint8_t *xp = xq ? (const uint8_t *)xq + 256 * (int64_t)b + 128 * n : NULL;

#pragma unroll
	for (int u = 0; u < 4; u++) {
		x.x[2 * u] = xp ? mm_ldg32(xp + 32 * u + 4 * t) : 0u;
		x.x[2 * u + 1] = xp ? mm_ldg32(xp + 32 * u + 16 + 4 * t) : 0u;
	}
	if (n == 0) {
		x.dx[0] = ntx_ldg_f2(xd[0] + 8 * (int64_t)b).x;
		x.dx[1] = ntx_ldg_f2(xd[1] + 8 * (int64_t)b).x;
	}
}

/* I[e] += half n's sum_s sc_s ((q . x)_s - 32 sum(x)_s) (exact). */
__device__ __forceinline__ void mm_half6(const mm_h6 &w, const mm_x6h &xv, int I[4])
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
		/* unit 8 n + j: quarter qq = j >> 1 of the half, l-half h = j & 1 */
		const int qq = j >> 1, h = j & 1;
		uint32_t a[2];
		int C[4], S[4];

#pragma unroll
		for (int r = 0; r < 2; r++)
			a[r] = ((w.ql[r][h][qq & 1] >> (4 * (qq >> 1))) & 0x0F0F0F0Fu) |
			       (((w.qh[r][h] >> (2 * qq)) & 0x03030303u) << 4);
		mm_k16u(a[0], a[1], xv.x[j], C);
		mm_k16u(0x01010101u, 0x01010101u, xv.x[j], S);
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const uint32_t sw = (j < 4 ? w.sc[e >> 1].x : w.sc[e >> 1].y) >> (8 * (j & 3));

			I[e] += (int)(int8_t)(uint8_t)sw * (C[e] - 32 * S[e]);
		}
	}
}

/* The k-th block of a warp that runs slots q, q + SB, ... of every step of
 * its share kw (NPS = 4 / SB of them per step), or nb past its last. */
template <int SB> __device__ __forceinline__ int mm_blk(int k, int kw, int ks, int q, int nb, int n_steps)
{
	constexpr int NPS = 4 / SB;
	const int s = kw + ks * (k / NPS), b = 4 * s + q + SB * (k % NPS);

	return s < n_steps && b < nb ? b : nb;
}

/* One warp's blocks of its tile's rows row0 .. row0 + 15 of matrix wm: the
 * slots bl = q, q + SB, ... of the steps kw, kw + ks, ... (4 blocks each),
 * slot bl into stream acc[bl / SB] (the direct-load GEMV's order,
 * dlmath.cuh). Q4_K keeps the next block's weights in flight while one is
 * computed (two named buffers, no copies; SB 1: one block at a time);
 * split Q6_K a half block while the other half is computed (a block in two
 * buffers spilled; a ring of three live halves spilled too). The
 * activations (L1) are loaded just before their block or half. */
template <int T, int SB>
__device__ __forceinline__ void mm_body(const mm_args &a, const uint8_t *wm, const mm_seg &sg, int row0,
					int kw, int q, int lane, float acc[4][4], bool &waited)
{
	constexpr int NPS = 4 / SB, P = NPS > 2 ? NPS : 2;
	const int g = lane >> 2, t = lane & 3, nb = a.n_in / 256, ks = sg.ks, n_steps = (nb + 3) / 4;
	const uint8_t *rp[2];
	const int8_t *xq = g < a.n_tok ? a.xqs + (int64_t)g * a.n_in : NULL;
	const float2 *xd[2];
	mm_w<NTX_TYPE_Q4_K> w0, w1;
	mm_x<NTX_TYPE_Q4_K> x;
	mm_h6 h0, h1;
	int b = mm_blk<SB>(0, kw, ks, q, nb, n_steps);

#pragma unroll
	for (int r = 0; r < 2; r++) /* rows past the end recompute the last (dropped) */
		rp[r] = wm + (uint64_t)min(row0 + g + 8 * r, sg.n_out - 1) * sg.row_bytes;
#pragma unroll
	for (int i = 0; i < 2; i++) /* tokens past n_tok read token 0's d (dropped) */
		xd[i] = a.xds + (int64_t)(2 * t + i < a.n_tok ? 2 * t + i : 0) * (a.n_in / 32);
	if (b < nb) {
		if constexpr (T == NTX_TYPE_Q4_K)
			mm_load<T>(rp, b, t, w0);
		else
			mm_load6h(rp, nb, b, 0, t, h0);
	}
	if (!waited) { /* the first weights are in flight: now the activations */
		ntx_pdl_wait();
		ntx_pdl_trigger();
		waited = true;
	}
	if constexpr (T != NTX_TYPE_Q4_K) { /* half blocks: one in flight while one is computed */
		mm_x6h xh;
		float dx[2];
		uint32_t d[2];

		for (int k = 0; b < nb; k += NPS) {
#pragma unroll
			for (int i = 0; i < NPS; i++) {
				const int bn = mm_blk<SB>(k + i + 1, kw, ks, q, nb, n_steps);
				int I[4] = { 0, 0, 0, 0 };

				mm_load6h(rp, nb, b, 1, t, h1);
				mm_xload6h(xq, xd, b, 0, t, xh);
				dx[0] = xh.dx[0], dx[1] = xh.dx[1];
				d[0] = h0.d[0], d[1] = h0.d[1];
				mm_half6(h0, xh, I);
				if (bn < nb)
					mm_load6h(rp, nb, bn, 0, t, h0);
				mm_xload6h(xq, xd, b, 1, t, xh);
				mm_half6(h1, xh, I);
#pragma unroll
				for (int e = 0; e < 4; e++)
					acc[i][e] = ntx_dlk_acc<T>(I[e], 0, dx[e & 1], ntx_h2f(d[e >> 1]), 0.0f, acc[i][e]);
				b = bn;
				if (b >= nb)
					break;
			}
		}
	} else if constexpr (SB == 1) { /* Q4_K, SB 1: one block at a time (registers) */
		for (int k = 0; b < nb; k += NPS) {
#pragma unroll
			for (int i = 0; i < NPS; i++) {
				b = mm_blk<SB>(k + i, kw, ks, q, nb, n_steps);
				if (b >= nb)
					break;
				if (k + i)
					mm_load<T>(rp, b, t, w0);
				mm_xload<T>(xq, xd, b, t, x);
				mm_block<T>(w0, x, acc[i]);
			}
		}
	} else {
		for (int k = 0; b < nb; k += P) {
#pragma unroll
			for (int i = 0; i < P; i++) {
				mm_w<T> &cur = (i & 1) ? w1 : w0, &nxt = (i & 1) ? w0 : w1;
				const int bn = mm_blk<SB>(k + i + 1, kw, ks, q, nb, n_steps);

				if (bn < nb)
					mm_load<T>(rp, bn, t, nxt);
				mm_xload<T>(xq, xd, b, t, x);
				mm_block<T>(cur, x, acc[i % NPS]);
				b = bn;
				if (b >= nb)
					break;
			}
		}
	}
}

/* CTA: MM_WARPS warps, tiles of NM * ks * SB warps each (warp w of a
 * tile: matrix w / (ks SB), share (w / SB) % ks, slots q = w % SB); the
 * slots, the shares and, for NM = 2, gate and up meet in shared memory,
 * where the tile's first warp adds them in the chain's order. */
template <int NM, int TS>
__global__ void __launch_bounds__(MM_WARPS * 32, MM_CTAS_SM) ntx_gemv_mma_kernel(mm_args a)
{
	__shared__ float red[MM_WARPS][4][32];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const mm_seg &sg = a.seg[gv_cta_seg(a.seg, a.n_seg)];
	const int ks = sg.ks, sb = sg.sb, per = NM * ks * sb, w = warp % per;
	const int tile = warp / per, m = w / (ks * sb), kw = (w / sb) % ks, q = w % sb;
	const int row0 = (((int)blockIdx.x - sg.cta0) * sg.tpc + tile) * MM_ROWS;
	const bool live = tile < sg.tpc && row0 < sg.n_out;
	const int g = lane >> 2, t = lane & 3;
	float acc[4][4];
	bool waited = a.beside || !(a.early && live);

	if (a.beside)
		ntx_pdl_trigger();
	else if (waited) {
		ntx_pdl_wait();
		ntx_pdl_trigger();
	}
#pragma unroll
	for (int k = 0; k < 4; k++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			acc[k][e] = 0.0f;
	if (live) {
		const uint8_t *wm = m ? sg.w1 : sg.w;

		constexpr int T = TS == 1 ? NTX_TYPE_Q4_K : (NTX_SPLIT | NTX_TYPE_Q6_K);

		if (sb == 2)
			mm_body<T, 2>(a, wm, sg, row0, kw, q, lane, acc, waited);
		else
			mm_body<T, 1>(a, wm, sg, row0, kw, q, lane, acc, waited);
	}
	if (!waited) {
		ntx_pdl_wait();
		ntx_pdl_trigger();
	}
	/* the warp's streams: slots q + q + 2 (SB = 2), or all four */
#pragma unroll
	for (int e = 0; e < 4; e++)
		red[warp][e][lane] = sb == 2 ? acc[0][e] + acc[1][e] : (acc[0][e] + acc[2][e]) + (acc[1][e] + acc[3][e]);
	__syncthreads();
#pragma unroll
	for (int e = 0; e < 4 && live && !w; e++) {
		const int row = row0 + g + 8 * (e >> 1), tok = 2 * t + (e & 1);

		if (tok >= a.n_tok || row >= sg.n_out)
			continue;
		const gv_out o = { sg.y, sg.n_out, sg.epi };
		float val[2] = { 0.0f, 0.0f };

		for (int mm = 0; mm < NM; mm++) { /* (a0 + a2) + (a1 + a3), then the shares in order */
			const float *r0 = &red[warp + mm * ks * sb][e][lane];
			float vv = 0.0f;

			for (int k = 0; k < ks; k++) {
				const float *r = r0 + k * sb * 4 * 32;
				const float sh = sb == 2 ? r[0] + r[4 * 32] : r[0];

				vv = k ? vv + sh : sh;
			}
			val[mm] = vv;
		}
		gv_store<NM>(o, tok, row, val[0], val[1]);
	}
	if (a.beside) /* this grid completes after the one before: the next kernel waits for both */
		ntx_pdl_wait();
}

/* ---- host ---- */

int ntx_gv_mma_type(uint32_t t)
{
	return t == NTX_TYPE_Q4_K || t == (NTX_SPLIT | NTX_TYPE_Q6_K);
}

/* int8 mma: compute capability 8.0 or more (every architecture this is
 * built for; checked in case of a PTX JIT). */
static int mm_device_ok(void)
{
	static std::atomic<int> ok{ -1 };
	int v = ok.load(std::memory_order_relaxed), dev = 0, major = 0;

	if (v < 0) {
		v = cudaGetDevice(&dev) == cudaSuccess &&
		    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
		    major >= 8;
		ok.store(v, std::memory_order_relaxed);
	}
	return v;
}

int ntx_gv_mma_seg(int nm, const gv_args &g, int i)
{
	const gv_seg &s = g.seg[i];

	return ntx_gv_mma_type((uint32_t)s.type) && (uintptr_t)s.w % 16 == 0 && s.row_bytes % 16 == 0 &&
	       (nm == 1 || (uintptr_t)g.w1 % 16 == 0);
}

int ntx_gv_mma_usable(int nm, const gv_args &g)
{
	(void)nm;
	return ntx_cu_knob(NTX_CU_GEMV_MMA) && g.n_tok >= 2 && g.n_tok <= MM_NT && g.n_in % 256 == 0 &&
	       mm_device_ok();
}

/* The launch over g's segments of type t (TS 1: Q4_K, 2: split Q6_K; a
 * kernel per type keeps each one's registers) with at most sb_max warps per
 * share: its arguments, and its CTA count (0: no segment of that type). */
template <int TS> static int mm_plan_sb(int nm, const gv_args &g, mm_args &a, int sb_max)
{
	const int t = TS == 1 ? NTX_TYPE_Q4_K : (NTX_SPLIT | NTX_TYPE_Q6_K);
	int cta = 0;

	memset(&a, 0, sizeof a);
	for (int i = 0; i < g.n_seg; i++) {
		const gv_seg &gs = g.seg[i];
		mm_seg &sg = a.seg[a.n_seg];
		const int tiles = (gs.n_out + MM_ROWS - 1) / MM_ROWS;

		if (gs.type != t)
			continue;
		a.n_seg++;
		sg.w = gs.w;
		sg.w1 = g.w1;
		sg.y = gs.y;
		sg.row_bytes = gs.row_bytes;
		sg.n_out = gs.n_out;
		sg.type = gs.type;
		sg.epi = gs.epi;
		sg.ks = ntx_gv_dl_ks(gs.type, gs.n_out, g.n_in, nm);
		sg.sb = min(sb_max, MM_WARPS / (nm * sg.ks));
		sg.tpc = MM_WARPS / (nm * sg.ks * sg.sb);
		sg.cta0 = cta;
		cta += (tiles + sg.tpc - 1) / sg.tpc;
	}
	a.n_in = g.n_in;
	a.n_tok = g.n_tok;
	a.xqs = g.xqs;
	a.xds = g.xds;
	a.early = g.early;
	return cta;
}

/* The launch's plan: a warp per slot pair (MM_SB), unless its CTAs then
 * take more than one wave (MM_CTAS_SM per SM; on an H200 q, k, v of 4096
 * columns, gate / up, the head): then a warp for all four slots, half the
 * CTAs. Its chain is twice as long (for Q4_K one block at a time) but the
 * second wave's latency goes: a pass of 8 tokens on a resident 8B Q4_K_M
 * 3.23 -> 3.09 ms (q, k, v 13.8 -> 11.4 us, gate / up 33.2 -> 31.7, the
 * split Q6_K head the same; PERF-NOTES.md, version 10). The shares and
 * slots, so the bits, are the same either way. */
template <int TS> static int mm_plan(int nm, const gv_args &g, mm_args &a)
{
	const int cta = mm_plan_sb<TS>(nm, g, a, MM_SB);

	return cta > MM_CTAS_SM * (ntx_gv_want_warps() / 32) ? mm_plan_sb<TS>(nm, g, a, 1) : cta;
}

template <int NM, int TS> static int mm_launch(const mm_args &a, int cta, cudaStream_t s, struct ntx_err *err)
{
	if (!cta)
		return 0;
	return ntx_cu_launched(NM == 2 ? "gemv_swiglu_mma" : "gemv_mma",
			       ntx_launch(ntx_gemv_mma_kernel<NM, TS>, (unsigned)cta, 32u * MM_WARPS, 0, s, a), err);
}

/* With both types, two launches: the one of fewer CTAs first, the other
 * beside it (NTX_GEMV_MMA_OVERLAP=0: Q4_K, then split Q6_K after it). */
template <int NM> static int mm_run(const gv_args &g, cudaStream_t s, struct ntx_err *err)
{
	mm_args a4, a6;
	const int c4 = mm_plan<1>(NM, g, a4), c6 = mm_plan<2>(NM, g, a6);

	if (!ntx_cu_knob(NTX_CU_GEMV_MMA_OVERLAP) || !c4 || !c6)
		return mm_launch<NM, 1>(a4, c4, s, err) || mm_launch<NM, 2>(a6, c6, s, err) ? -1 : 0;
	if (c6 <= c4) {
		a4.beside = 1;
		return mm_launch<NM, 2>(a6, c6, s, err) || mm_launch<NM, 1>(a4, c4, s, err) ? -1 : 0;
	}
	a6.beside = 1;
	return mm_launch<NM, 1>(a4, c4, s, err) || mm_launch<NM, 2>(a6, c6, s, err) ? -1 : 0;
}

int ntx_gv_mma(int nm, const gv_args &g, cudaStream_t s, struct ntx_err *err)
{
	return nm == 2 ? mm_run<2>(g, s, err) : mm_run<1>(g, s, err);
}
