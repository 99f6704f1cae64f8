/* gemv.cuh - what the GEMV files (gemv.cu: float weights and the public
 * entry points; gemv_q8.cu and gemv_dl.cu: quantized weights with q8
 * activations; gemv_plan.cu: the work split on the host) share: the
 * argument block, the work split, the warp reduction and the epilogue.
 *
 * Work split common to both: the rows of up to GV_MAX_SEG matrices that
 * share one input (segments: Q, K, V) are cut into row groups of RH rows
 * (RH gate rows plus the same RH up rows for the fused SwiGLU, NM = 2),
 * numbered across the segments. A CTA is GV_WARPS warps; ks (1, 2 or 4)
 * warps share a row group and split its row length (warp kw takes stages
 * kw, kw + ks, ...), so that small matrices still put enough warps and
 * bytes in flight; a CTA holds GV_WARPS / ks row groups. Every weight byte
 * is loaded once and used for all n_tok <= NT tokens; each activation load
 * is reused for the warp's R rows. Per-lane partial sums acc[m][rh][t] are
 * reduced across the warp by a reduce-scatter butterfly (31 shuffles for 32
 * values instead of 160), after which lane group i holds value i; with
 * ks > 1 the warps of a group add their values through shared memory in a
 * fixed order; the epilogue stores, accumulates or applies silu(g) * u. */
#ifndef NTX_CUDA_GEMV_CUH
#define NTX_CUDA_GEMV_CUH

#include "common.cuh"

#define GV_WARPS 4
#define GV_MAX_SEG 4

enum { GV_EPI_STORE = 0, GV_EPI_ACC = 1, GV_EPI_SWIGLU = 2 };

struct gv_seg {
	const uint8_t *w;   /* (n_out, n_in) weights; the gate for NM = 2 */
	float *y;           /* [n_tok][n_out] */
	uint64_t row_bytes;
	int n_out;
	int type;
	int epi;            /* GV_EPI_*: y = v, y += v, y = silu(y) * v */
	int g0;             /* first row group of this segment */
};

struct gv_args {
	gv_seg seg[GV_MAX_SEG];
	int n_seg;
	const uint8_t *w1;  /* up weights for NM = 2 (rows as seg[0].w) */
	int n_in, n_tok;
	int ks;             /* warps per row group */
	int st;             /* ring slots per warp in use (q8 kernel) */
	int sb;             /* shared-memory bytes per row and stage (q8 kernel) */
	const int8_t *xqs;  /* q8 activations: int8 [n_tok][n_in] */
	const float2 *xds;  /* q8 activations: (d, d*sum) [n_tok][n_in/32] */
	const float *x;     /* float activations [n_tok][n_in] */
	int early;          /* direct-load GEMV: first weights loaded before the PDL wait */
};

__host__ __device__ constexpr int gv_pow2(int x)
{
	return x <= 1 ? 1 : 2 * gv_pow2((x + 1) / 2);
}

__host__ __device__ constexpr int gv_log2(int x)
{
	return x <= 1 ? 0 : 1 + gv_log2(x / 2);
}

/* This warp's row group, segment, first row and share of the row (kw of
 * ks); active = 0 for a warp past the last group (it still takes part in
 * the CTA's barrier). */
struct gv_where {
	int s, row0, kw, active;
};

template <int RH> __device__ __forceinline__ gv_where gv_locate(const gv_args &a, int warp)
{
	const int gpc = GV_WARPS / a.ks; /* groups per CTA */
	const int g = blockIdx.x * gpc + warp / a.ks;
	gv_where w;
	int s = 0;

#pragma unroll
	for (int i = 1; i < GV_MAX_SEG; i++)
		if (i < a.n_seg && g >= a.seg[i].g0)
			s = i;
	w.s = s;
	w.kw = warp % a.ks;
	w.row0 = (g - a.seg[s].g0) * RH;
	w.active = w.row0 < a.seg[s].n_out;
	return w;
}

/* Reduce-scatter of V values (a power of two <= 32) across the warp: after
 * it, v[0] of a lane holds the warp-wide sum of value lane >> (5 - log2 V). */
template <int V, int O> struct gv_rs {
	static __device__ __forceinline__ void run(float *v, int lane)
	{
		if constexpr (V > 1) {
			const bool up = (lane & O) != 0;

#pragma unroll
			for (int i = 0; i < V / 2; i++) {
				float send = up ? v[i] : v[i + V / 2];
				float keep = up ? v[i + V / 2] : v[i];

				v[i] = keep + __shfl_xor_sync(NTX_FULL_MASK, send, O);
			}
			gv_rs<V / 2, O / 2>::run(v, lane);
		} else {
			v[0] += __shfl_xor_sync(NTX_FULL_MASK, v[0], O);
			gv_rs<1, O / 2>::run(v, lane);
		}
	}
};

template <int V> struct gv_rs<V, 0> {
	static __device__ __forceinline__ void run(float *, int)
	{
	}
};

/* The segment this CTA works on, for kernels that give each segment its
 * own range of CTAs from seg[i].cta0 on. */
template <typename S> __device__ __forceinline__ int gv_cta_seg(const S *seg, int n_seg)
{
	int s = 0;

#pragma unroll
	for (int i = 1; i < GV_MAX_SEG; i++)
		if (i < n_seg && (int)blockIdx.x >= seg[i].cta0)
			s = i;
	return s;
}

/* Where a row group's values go: rows row0 .. row0 + RH - 1 of y. */
struct gv_out {
	float *y;   /* [n_tok][n_out] */
	int n_out;
	int epi;    /* GV_EPI_* (NM = 1) */
};

/* The epilogue of one value: y[t][row] = v, += v, silu(y) * v (NM = 1, by
 * o.epi), or silu(v) * u (NM = 2: v gate, u up). */
template <int NM>
__device__ __forceinline__ void gv_store(const gv_out &o, int t, int row, float v, float u)
{
	float *yp = o.y + (int64_t)t * o.n_out + row;

	if constexpr (NM == 2)
		*yp = ntx_silu_mul(v, u);
	else if (o.epi == GV_EPI_ACC)
		*yp += v;
	else if (o.epi == GV_EPI_SWIGLU)
		*yp = ntx_silu_mul(*yp, v);
	else
		*yp = v;
}

/* acc layout: index m * HALF + rh * NT + t, HALF = gv_pow2(RH * NT). The ks
 * warps of a row group are consecutive in the CTA (warp kw of them holds
 * its share of the row). Every thread of the CTA must call this with the
 * same ks (barrier when ks > 1). */
template <int NT, int RH, int NM>
__device__ __forceinline__ void gv_reduce_store(float *acc, int lane, int warp, int ks, int kw,
						int active, int row0, const gv_out &o, int n_tok)
{
	constexpr int HALF = gv_pow2(RH * NT), V = HALF * NM, LOGV = gv_log2(V);
	static_assert(V <= 32, "too many accumulators for one warp");
	__shared__ float red[GV_WARPS][NM][32];
	float v, u = 0.0f;
	int idx, rh, t, row;

	gv_rs<V, 16>::run(acc, lane);
	v = acc[0];
	if constexpr (NM == 2)
		u = __shfl_xor_sync(NTX_FULL_MASK, v, 16); /* value idx + HALF */
	if (ks > 1) {
		red[warp][0][lane] = v;
		if constexpr (NM == 2)
			red[warp][NM - 1][lane] = u;
		__syncthreads();
		if (kw)
			return;
		v = red[warp][0][lane];
		if constexpr (NM == 2)
			u = red[warp][NM - 1][lane];
		for (int k = 1; k < ks; k++) {
			v += red[warp + k][0][lane];
			if constexpr (NM == 2)
				u += red[warp + k][NM - 1][lane];
		}
	}
	if (!active)
		return;
	if (lane & ((32 >> LOGV) - 1))
		return;
	idx = lane >> (5 - LOGV);
	if (idx >= HALF)
		return;
	rh = idx / NT;
	t = idx % NT;
	row = row0 + rh;
	if (rh >= RH || t >= n_tok || row >= o.n_out)
		return;
	gv_store<NM>(o, t, row, v, u);
}

template <int NT, int RH, int NM>
__device__ __forceinline__ void gv_epilogue(float *acc, int lane, int warp, const gv_where &wh,
					    const gv_args &a)
{
	const gv_seg &sg = a.seg[wh.s];
	const gv_out o = { sg.y, sg.n_out, sg.epi };

	gv_reduce_store<NT, RH, NM>(acc, lane, warp, a.ks, wh.kw, wh.active, wh.row0, o, a.n_tok);
}

/* Row pointer of row r (of R = RH * NM) of this warp's group: rows past the
 * end of the segment recompute its last row (their results are dropped). */
template <int RH>
__device__ __forceinline__ const uint8_t *gv_row(const gv_args &a, const gv_where &wh, int r)
{
	const gv_seg &sg = a.seg[wh.s];
	const int ri = min(wh.row0 + r % RH, sg.n_out - 1);

	return (r < RH ? sg.w : a.w1) + (uint64_t)ri * sg.row_bytes;
}

/* gemv_plan.cu (host): number the row groups of a's segments (RH rows
 * each), choose the warps per group ks (1, 2, 4: more when there are too
 * few groups to fill the GPU and each warp keeps at least one of the row's
 * n_st stages), and return the grid size. */
int ntx_gv_plan(gv_args &a, int rh, int n_st);
/* gemv_plan.cu: warps wanted in flight over the whole GPU (about 32 per SM). */
int ntx_gv_want_warps(void);

/* gemv_q8.cu: run the staged q8 GEMV over a's segments (GGUF-layout
 * quantized types, any mix; nm = 1, or 2 for the fused gate/up with one
 * segment). */
int ntx_gv_q8(int nm, gv_args &a, cudaStream_t s, struct ntx_err *err);

/* gemv_dl.cu: the direct-load GEMV (Q4_K, Q5_K, and the split rows of Q4_0,
 * Q8_0, Q6_K; any mix), same contract as ntx_gv_q8 (a's ks, st, sb and g0
 * are not used: each segment is split by its own shape). */
int ntx_gv_dl(int nm, const gv_args &a, cudaStream_t s, struct ntx_err *err);
/* Does type t go through the direct-load GEMV? */
int ntx_gv_dl_type(uint32_t t);
/* gemv_dl.cu: the warps ks (1, 2, 4) that split each row of a segment of
 * this shape in the direct-load GEMV (nm = 2: the fused gate/up). */
int ntx_gv_dl_ks(int type, int n_out, int n_in, int nm);
/* gemv_mma.cu: the K-quant GEMV on tensor cores for 2..8 tokens (Q4_K,
 * split Q6_K; Q8_K activations), bit for bit the direct-load GEMV's values
 * (same blocks, streams and ks). Usable: the switch gemv_mma on, n_tok and
 * n_in fit, compute capability 8.0+; then segment i goes through it when
 * ntx_gv_mma_seg says so (its type and alignment), the others through
 * gemv_dl.cu. ntx_gv_mma takes only such segments. */
int ntx_gv_mma_usable(int nm, const gv_args &a);
int ntx_gv_mma_seg(int nm, const gv_args &a, int i);
int ntx_gv_mma(int nm, const gv_args &a, cudaStream_t s, struct ntx_err *err);
#endif
