/* gemv_mma.cu - the direct-load GEMV for 2..8 tokens on tensor cores, for
 * the K-quants the direct-load GEMV reads with 8 lanes per block (Q4_K in
 * GGUF layout, Q6_K in split rows), bitwise equal per token to that GEMV
 * (gemv_dl.cu), which is what a verification pass of speculative decoding
 * needs: its tokens must get the logits a single-token pass gives.
 *
 * Why it is exact. A lane of the direct-load GEMV works on part j of a
 * block (dlmath.cuh): two integer dot products ia, ib of 16 weights with 16
 * int8 activations, then a fixed chain of float operations into its
 * accumulator, block after block of its "virtual lane" l = 8 bl + j (block
 * bl of every step s = kw, kw + ks, ...); the 32 lane sums go through the
 * warp's butterfly (pairs l ^ 16, then ^ 8, ^ 4, ^ 2, ^ 1), the ks warps of
 * a row in order. Here one int8 mma m16n8k16 gives ia (or ib) of one part
 * for 16 rows x 8 tokens at once: integer sums, exact in any order. The
 * float chain is then the same instructions in the same order per (row,
 * token, virtual lane), and the reduction follows the same tree: that is
 * the whole contract, and test_cuda_kernels checks it bitwise.
 *
 * Work split: a CTA owns 16 rows of a segment (and, for the fused gate/up,
 * the same 16 up rows); warp (m, kw, bl) runs virtual lanes 8 bl .. 8 bl + 7
 * of share kw of matrix m, with ks from the single-token plan (ntx_gv_dl_ks)
 * so the float order is the same. Loads: a quad of lanes (g, c) takes row
 * g and g + 8's parts c and c + 4 (16-byte loads), token g's half-units c,
 * c + 4, c + 8, c + 12, and transposes them in the quad so that lane c
 * holds word c of each, as the mma's fragments want.
 *
 * Off by default (the switch gemv_mma, NTX_GEMV_MMA=1|2): exact, but not
 * faster yet; PERF-NOTES.md (version 7) has what was measured and why. */
#include <atomic>

#include "gemv.cuh"
#include "dlmath.cuh"

#define MM_ROWS 16
#define MM_NT 8      /* tokens per launch (the mma's n) */
#define MM_MIN_TOK 6 /* fewest tokens it takes by default */

struct mm_seg {
	const uint8_t *w, *w1; /* gate (or the matrix), up for NM = 2 */
	float *y;
	uint64_t row_bytes;
	int n_out, type, epi, ks, cta0;
};

struct mm_args {
	mm_seg seg[GV_MAX_SEG];
	int n_seg, n_in, n_tok;
	const int8_t *xqs;
	const float2 *xds;
	int early;
};

/* ---- a quad's 4 x 4 word transpose ----
 * In: lane c of the quad holds row c (m[0..3]); out: lane c holds column c,
 * t[q] = row q's word c. Two exchanges of two words each. */
__device__ __forceinline__ void mm_qtr(const uint32_t m[4], uint32_t t[4], int c)
{
	const bool hi = c & 2, lo = c & 1;
	uint32_t a[4], s0, s1, r0, r1;

	s0 = hi ? m[0] : m[2];
	s1 = hi ? m[1] : m[3];
	r0 = __shfl_xor_sync(NTX_FULL_MASK, s0, 2);
	r1 = __shfl_xor_sync(NTX_FULL_MASK, s1, 2);
	a[0] = hi ? r0 : m[0];
	a[1] = hi ? r1 : m[1];
	a[2] = hi ? m[2] : r0;
	a[3] = hi ? m[3] : r1;
	/* a[k] = row ((c & 1) | (k & 2))'s word 2 hi + (k & 1) */
	s0 = lo ? a[0] : a[1];
	s1 = lo ? a[2] : a[3];
	r0 = __shfl_xor_sync(NTX_FULL_MASK, s0, 1);
	r1 = __shfl_xor_sync(NTX_FULL_MASK, s1, 1);
	t[0] = lo ? r0 : a[0];
	t[1] = lo ? a[1] : r0;
	t[2] = lo ? r1 : a[2];
	t[3] = lo ? a[3] : r1;
}

__device__ __forceinline__ void mm_qtr4(const uint4 &v, uint32_t *t, int c)
{
	const uint32_t m[4] = { v.x, v.y, v.z, v.w };

	mm_qtr(m, t, c);
}

/* d[e] = A (rows g, g + 8: a0, a1) . B (token column g: b) over 16 int8
 * values: d[0] (g, 2c), d[1] (g, 2c + 1), d[2] (g + 8, 2c), d[3] (g + 8,
 * 2c + 1). */
__device__ __forceinline__ void mm_dot(uint32_t a0, uint32_t a1, uint32_t b, int d[4])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
	    "{%7, %7, %7, %7};"
	    : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
	    : "r"(a0), "r"(a1), "r"(b), "r"(0));
#else
	d[0] = d[1] = d[2] = d[3] = 0 * (int)(a0 + a1 + b);
#endif
}

/* ---- weights: what a lane loads per block ---- */

template <int T> struct mm_raw;
template <> struct mm_raw<NTX_TYPE_Q4_K> {
	uint4 h[2];    /* the 16-byte header of rows g, g + 8 */
	uint4 q[2][2]; /* [row][G]: part 4 G + c */
};
template <> struct mm_raw<NTX_SPLIT | NTX_TYPE_Q6_K> {
	uint4 ql[2][2]; /* [row][G]: ql part 4 G + c */
	uint4 qh[2];    /* [row]: qh chunk c */
	uint4 sc[2];    /* [row]: the 16 scales */
	uint32_t d[2];
};

template <int T>
__device__ __forceinline__ void mm_load(const uint8_t *const rp[2], int nb, int b, int c, mm_raw<T> &w)
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		if constexpr (T == NTX_TYPE_Q4_K) {
			const uint8_t *blk = rp[r] + (int64_t)b * 144;

			w.h[r] = ntx_ldg128(blk);
			w.q[r][0] = ntx_ldg128s(blk + 16 + 16 * c);
			w.q[r][1] = ntx_ldg128s(blk + 80 + 16 * c);
		} else {
			const uint8_t *blk = rp[r] + (int64_t)b * 208;

			w.ql[r][0] = ntx_ldg128s(blk + 16 * c);
			w.ql[r][1] = ntx_ldg128s(blk + 64 + 16 * c);
			w.qh[r] = ntx_ldg128s(blk + 128 + 16 * c);
			w.sc[r] = ntx_ldg128(blk + 192);
			w.d[r] = ntx_ldg16(rp[r] + (int64_t)nb * 208 + 2 * b);
		}
	}
}

/* Byte k (0..15) of v, sign-extended. */
__device__ __forceinline__ int mm_s8(const uint4 &v, int k)
{
	const uint32_t w = k < 4 ? v.x : k < 8 ? v.y : k < 12 ? v.z : v.w;

	return (int)(int8_t)(uint8_t)(w >> (8 * (k & 3)));
}

/* Word c of token g's half-units 4 G .. 4 G + 3 of block b (zero past
 * n_tok: xq NULL). */
__device__ __forceinline__ void mm_xload(const int8_t *xq, int b, int G, int c, uint32_t x[4])
{
	const uint4 v = xq ? ntx_ldg128((const uint8_t *)xq + 256 * (int64_t)b + 16 * (4 * G + c))
			   : make_uint4(0, 0, 0, 0);

	mm_qtr4(v, x, c);
}

/* One block for this warp: acc[j][e] of part j, entry e of the mma's
 * output, through the same float chain as ntx_dl_dot. xq: token g's int8
 * row (NULL past n_tok); d0, d1: tokens 2c, 2c + 1's (d, d*sum) rows.
 * Everything the block needs is loaded first (measured: loads inside the
 * part loop expose their latency, 6.4 against 4.8 ms for an 8B pass). */
template <int T>
__device__ __forceinline__ void mm_block(const mm_raw<T> &w, int b, int c, const int8_t *xq,
					 const float2 *d0, const float2 *d1, float (*acc)[4])
{
	uint32_t x[16]; /* word c of token g's half-units 0..15 */
	float4 ds[2][4]; /* [token 2c + i][units 2k, 2k + 1] */

#pragma unroll
	for (int G = 0; G < 4; G++)
		mm_xload(xq, b, G, c, x + 4 * G);
#pragma unroll
	for (int k = 0; k < 4; k++) {
		ds[0][k] = ntx_ldg_f4((const float4 *)(d0 + 8 * (int64_t)b + 2 * k));
		ds[1][k] = ntx_ldg_f4((const float4 *)(d1 + 8 * (int64_t)b + 2 * k));
	}
	if constexpr (T == NTX_TYPE_Q4_K) {
		uint32_t q[2][8];
		float dd[2], dm[2];

#pragma unroll
		for (int r = 0; r < 2; r++) {
			mm_qtr4(w.q[r][0], q[r], c);
			mm_qtr4(w.q[r][1], q[r] + 4, c);
			dd[r] = ntx_h2f(w.h[r].x & 0xFFFF);
			dm[r] = ntx_h2f(w.h[r].x >> 16);
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const int p = j >> 1, h = j & 1;
			float aa[2], ab[2], ba[2], bb[2];
			int ia[4], ib[4];

#pragma unroll
			for (int r = 0; r < 2; r++) {
				uint32_t sc, m;

				ntx_kscale_pair(p, w.h[r].y, w.h[r].z, w.h[r].w, &sc, &m);
				aa[r] = ntx_mul(dd[r], (float)(sc & 0xFF));
				ab[r] = ntx_mul(dd[r], (float)(sc >> 8));
				/* odd parts add no min terms: -0, as ntx_dl_decode */
				ba[r] = h ? 0.0f : ntx_mul(dm[r], (float)(m & 0xFF));
				bb[r] = h ? 0.0f : ntx_mul(dm[r], (float)(m >> 8));
			}
			mm_dot(q[0][j] & 0x0F0F0F0Fu, q[1][j] & 0x0F0F0F0Fu, x[4 * p + h], ia);
			mm_dot((q[0][j] >> 4) & 0x0F0F0F0Fu, (q[1][j] >> 4) & 0x0F0F0F0Fu, x[4 * p + 2 + h], ib);
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int r = e >> 1;
				const float4 &s = ds[e & 1][p];
				float v = acc[j][e];

				v = ntx_fma(ntx_mul(aa[r], s.x), (float)ia[e], v);
				v = ntx_fma(ntx_mul(ab[r], s.z), (float)ib[e], v);
				v = ntx_fma(-ba[r], s.y, v);
				v = ntx_fma(-bb[r], s.w, v);
				acc[j][e] = v;
			}
		}
	} else {
		uint32_t ql[2][8], qh[2][4];
		float d[2];

#pragma unroll
		for (int r = 0; r < 2; r++) {
			mm_qtr4(w.ql[r][0], ql[r], c);
			mm_qtr4(w.ql[r][1], ql[r] + 4, c);
			mm_qtr4(w.qh[r], qh[r], c);
			d[r] = ntx_h2f(w.d[r]);
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const int h6 = j >> 2, c6 = j & 3, ua = 4 * h6 + (c6 >> 1);
			const uint32_t s0 = 2u * (uint32_t)(c6 >> 1);
			uint32_t va[2], vb[2];
			int ia[4], ib[4];

#pragma unroll
			for (int r = 0; r < 2; r++) {
				const uint32_t lw = ql[r][j], t = qh[r][2 * h6 + (c6 & 1)] >> s0;

				va[r] = __vsub4((lw & 0x0F0F0F0Fu) | ((t & 0x03030303u) << 4), 0x20202020u);
				vb[r] = __vsub4(((lw >> 4) & 0x0F0F0F0Fu) | (t & 0x30303030u), 0x20202020u);
			}
			mm_dot(va[0], va[1], x[8 * h6 + c6], ia);
			mm_dot(vb[0], vb[1], x[8 * h6 + c6 + 4], ib);
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int r = e >> 1;
				const float4 &sa = ds[e & 1][ua >> 1], &sb = ds[e & 1][(ua + 2) >> 1];
				const float dax = (ua & 1) ? sa.z : sa.x, dbx = (ua & 1) ? sb.z : sb.x;
				float v = acc[j][e];

				v = ntx_fma(ntx_mul(d[r], dax), (float)(mm_s8(w.sc[r], 8 * h6 + c6) * ia[e]), v);
				v = ntx_fma(ntx_mul(d[r], dbx), (float)(mm_s8(w.sc[r], 8 * h6 + c6 + 4) * ib[e]), v);
				acc[j][e] = v;
			}
		}
	}
}

/* This warp's share: blocks (kw + i ks) * 4 + bl of its 16 rows, the next
 * block's weights loaded while one is computed. */
template <int T>
__device__ __forceinline__ void mm_body(const mm_args &a, const uint8_t *wm, const mm_seg &sg, int row0,
					int kw, int bl, int lane, float (*acc)[4], bool &waited)
{
	const int g = lane >> 2, c = lane & 3;
	const int nb = a.n_in / 256, n_steps = (nb + 3) / 4, ks = sg.ks;
	const uint8_t *rp[2];
	const int t0 = min(2 * c, a.n_tok - 1), t1 = min(2 * c + 1, a.n_tok - 1);
	const int8_t *xq = g < a.n_tok ? a.xqs + (int64_t)g * a.n_in : NULL;
	const float2 *d0 = a.xds + (int64_t)t0 * (a.n_in / 32), *d1 = a.xds + (int64_t)t1 * (a.n_in / 32);
	mm_raw<T> cur, nxt;
	int s = kw, b = 4 * s + bl;
	bool ok = s < n_steps && b < nb;

#pragma unroll
	for (int r = 0; r < 2; r++)
		rp[r] = wm + (uint64_t)min(row0 + g + 8 * r, sg.n_out - 1) * sg.row_bytes;
	if (ok)
		mm_load<T>(rp, nb, b, c, cur);
	if (!waited) { /* the first weights are in flight: now the activations */
		ntx_pdl_wait();
		ntx_pdl_trigger();
		waited = true;
	}
	while (ok) {
		const int s1 = s + ks, b1 = 4 * s1 + bl;
		const bool ok1 = s1 < n_steps && b1 < nb;

		if (ok1)
			mm_load<T>(rp, nb, b1, c, nxt);
		mm_block<T>(cur, b, c, xq, d0, d1, acc);
		cur = nxt;
		s = s1, b = b1, ok = ok1;
	}
}

/* Bytes of shared memory for the reduction of a CTA of NM matrices whose
 * rows are split ks ways. */
#define MM_RED 2048 /* floats of one (m, kw)'s partials: [2][8][4][32] */
#define MM_TOT 128  /* floats of one (m, kw)'s sums: [4][32] */

static size_t mm_smem(int nm, int ks)
{
	return (size_t)nm * ks * (MM_RED + MM_TOT) * sizeof(float);
}

/* The 32 virtual lanes' sums of each (row, token) through the butterfly's
 * tree (l ^ 16, ^ 8 across warps bl; ^ 4, ^ 2, ^ 1 across j), the ks shares
 * in order, then the epilogue. Called by every thread of the CTA. */
template <int NM>
__device__ __forceinline__ void mm_reduce_store(float (*acc)[4], const mm_args &a, const mm_seg &sg,
						int row0, int m, int kw, int bl, bool live, int lane)
{
	extern __shared__ float mm_red[]; /* [NM][ks][MM_RED], then [NM][ks][MM_TOT] */
	const int ks = sg.ks, g = lane >> 2, c = lane & 3;
	float *mine = mm_red + (m * ks + kw) * MM_RED;
	float *tot = mm_red + NM * ks * MM_RED;

	/* a warp past NM * 4 ks (a segment with a smaller ks than the CTA's
	 * width) is not live but takes part in every barrier */
	if (live && bl >= 2) /* l + (l ^ 16): bl and bl ^ 2 */
		for (int j = 0; j < 8; j++)
			for (int e = 0; e < 4; e++)
				mine[(((bl - 2) * 8 + j) * 4 + e) * 32 + lane] = acc[j][e];
	__syncthreads();
	if (live && bl < 2)
		for (int j = 0; j < 8; j++)
			for (int e = 0; e < 4; e++)
				acc[j][e] = acc[j][e] + mine[((bl * 8 + j) * 4 + e) * 32 + lane];
	__syncthreads();
	if (live && bl == 1) /* + (l ^ 8): bl 0 and 1 */
		for (int j = 0; j < 8; j++)
			for (int e = 0; e < 4; e++)
				mine[(j * 4 + e) * 32 + lane] = acc[j][e];
	__syncthreads();
	if (live && bl == 0) {
		float v[4];

		for (int e = 0; e < 4; e++) {
			float z[8], y2[4];

			for (int j = 0; j < 8; j++)
				z[j] = acc[j][e] + mine[(j * 4 + e) * 32 + lane];
			for (int j = 0; j < 4; j++) /* ^ 4 */
				y2[j] = z[j] + z[j + 4];
			y2[0] = y2[0] + y2[2]; /* ^ 2 */
			y2[1] = y2[1] + y2[3];
			v[e] = y2[0] + y2[1]; /* ^ 1 */
		}
		for (int e = 0; e < 4; e++) /* the (m, kw) sums, [NM][ks][4][32] */
			tot[((m * ks + kw) * 4 + e) * 32 + lane] = v[e];
	}
	__syncthreads();
	if (!live || m || kw || bl)
		return;
	for (int e = 0; e < 4; e++) {
		const int row = row0 + g + 8 * (e >> 1), t = 2 * c + (e & 1);
		float v = tot[(0 * ks * 4 + e) * 32 + lane], u = 0.0f;

		for (int k = 1; k < ks; k++)
			v += tot[(k * 4 + e) * 32 + lane];
		if constexpr (NM == 2) {
			u = tot[((ks + 0) * 4 + e) * 32 + lane];
			for (int k = 1; k < ks; k++)
				u += tot[((ks + k) * 4 + e) * 32 + lane];
		}
		if (row >= sg.n_out || t >= a.n_tok)
			continue;
		float *yp = sg.y + (int64_t)t * sg.n_out + row;
		if constexpr (NM == 2)
			*yp = ntx_silu_mul(v, u);
		else if (sg.epi == GV_EPI_ACC)
			*yp += v;
		else if (sg.epi == GV_EPI_SWIGLU)
			*yp = ntx_silu_mul(*yp, v);
		else
			*yp = v;
	}
}

template <int NM> __global__ void __launch_bounds__(512, 1) ntx_gemv_mma_kernel(mm_args a)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const mm_seg &sg = a.seg[gv_cta_seg(a.seg, a.n_seg)];
	const int nw = 4 * sg.ks; /* warps per matrix */
	const int m = warp / nw, kw = (warp % nw) / 4, bl = warp % 4;
	const bool live = m < NM;
	const int row0 = ((int)blockIdx.x - sg.cta0) * MM_ROWS;
	float acc[8][4];
	bool waited = !(a.early && live);

	if (waited) {
		ntx_pdl_wait();
		ntx_pdl_trigger();
	}
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			acc[j][e] = 0.0f;
	if (live) {
		const uint8_t *wm = m ? sg.w1 : sg.w;

		if (sg.type == NTX_TYPE_Q4_K)
			mm_body<NTX_TYPE_Q4_K>(a, wm, sg, row0, kw, bl, lane, acc, waited);
		else
			mm_body<NTX_SPLIT | NTX_TYPE_Q6_K>(a, wm, sg, row0, kw, bl, lane, acc, waited);
	}
	if (!waited) {
		ntx_pdl_wait();
		ntx_pdl_trigger();
	}
	mm_reduce_store<NM>(acc, a, sg, row0, m, kw, bl, live, lane);
}

/* ---- host ---- */

int ntx_gv_mma_type(uint32_t t)
{
	return t == NTX_TYPE_Q4_K || t == (NTX_SPLIT | NTX_TYPE_Q6_K);
}

/* Tensor cores with int8 mma: compute capability 8.0 or more (all the
 * architectures this is built for; checked in case of a PTX JIT). */
static int mm_device_ok(void)
{
	int dev = 0, major = 0;

	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
		return 0;
	return major >= 8;
}

/* The widest ks of a's segments. */
static int mm_ks_max(int nm, const gv_args &g)
{
	int k = 1;

	for (int i = 0; i < g.n_seg; i++)
		k = max(k, ntx_gv_dl_ks(g.seg[i].type, g.seg[i].n_out, g.n_in, nm));
	return k;
}

int ntx_gv_mma_usable(int nm, const gv_args &g)
{
	static std::atomic<int> dev_ok{ -1 };
	int ok = dev_ok.load(std::memory_order_relaxed);

	const int knob = ntx_cu_knob(NTX_CU_GEMV_MMA);

	/* by default from MM_MIN_TOK tokens on: below, the dp4a lanes are
	 * faster (PERF-NOTES.md, version 7) */
	if (!knob || g.n_tok < (knob == 2 ? 2 : MM_MIN_TOK) || g.n_tok > MM_NT || g.n_in % 256)
		return 0;
	for (int i = 0; i < g.n_seg; i++) /* 16-byte loads, as gemv_dl.cu's */
		if (!ntx_gv_mma_type((uint32_t)g.seg[i].type) || g.seg[i].row_bytes % 16 ||
		    (uintptr_t)g.seg[i].w % 16 || (nm == 2 && (uintptr_t)g.w1 % 16))
			return 0;
	if (nm * mm_ks_max(nm, g) > 4) /* a CTA of at most 512 threads */
		return 0;
	if (ok < 0) {
		ok = mm_device_ok();
		dev_ok.store(ok, std::memory_order_relaxed);
	}
	return ok;
}

int ntx_gv_mma(int nm, const gv_args &g, cudaStream_t s, struct ntx_err *err)
{
	mm_args a;
	int cta = 0, ks_max = 1;

	memset(&a, 0, sizeof a);
	for (int i = 0; i < g.n_seg; i++) {
		const gv_seg &gs = g.seg[i];
		mm_seg &sg = a.seg[i];

		sg.w = gs.w;
		sg.w1 = g.w1;
		sg.y = gs.y;
		sg.row_bytes = gs.row_bytes;
		sg.n_out = gs.n_out;
		sg.type = gs.type;
		sg.epi = gs.epi;
		sg.ks = ntx_gv_dl_ks(gs.type, gs.n_out, g.n_in, nm);
		sg.cta0 = cta;
		cta += (gs.n_out + MM_ROWS - 1) / MM_ROWS;
		ks_max = max(ks_max, sg.ks);
	}
	a.n_seg = g.n_seg;
	a.n_in = g.n_in;
	a.n_tok = g.n_tok;
	a.xqs = g.xqs;
	a.xds = g.xds;
	a.early = g.early;

	const size_t smem = mm_smem(nm, ks_max);
	const unsigned threads = 4u * ks_max * nm * 32;
	cudaError_t e;

	if (nm == 2) {
		if (ntx_cu_smem(ntx_gemv_mma_kernel<2>, smem, "gemv_mma: cudaFuncSetAttribute", err))
			return -1;
		e = ntx_launch(ntx_gemv_mma_kernel<2>, (unsigned)cta, threads, smem, s, a);
	} else {
		if (ntx_cu_smem(ntx_gemv_mma_kernel<1>, smem, "gemv_mma: cudaFuncSetAttribute", err))
			return -1;
		e = ntx_launch(ntx_gemv_mma_kernel<1>, (unsigned)cta, threads, smem, s, a);
	}
	return ntx_cu_launched(nm == 2 ? "gemv_swiglu_mma" : "gemv_mma", e, err);
}
