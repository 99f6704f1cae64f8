/* gemv.cuh - what the two GEMV files (gemv.cu: float weights and the public
 * entry points; gemv_q8.cu: quantized weights with q8 activations) share:
 * the argument block, the warp reduction and the epilogue.
 *
 * Work split common to both: a CTA is GV_WARPS warps; each warp owns RH
 * output rows (RH rows of one matrix, or RH gate rows plus the same RH up
 * rows for the fused SwiGLU, NM = 2) and walks the whole row length, lanes
 * splitting the columns. Every weight byte is loaded once and used for all
 * n_tok <= NT tokens; each activation load is reused for the warp's R rows.
 * Per-lane partial sums acc[m][rh][t] are reduced across the warp by a
 * reduce-scatter butterfly (31 shuffles for 32 values instead of 160), after
 * which lane group i holds value i; the epilogue stores, accumulates or
 * applies silu(g) * u. No shared state between warps: a warp past the last
 * row simply returns. */
#ifndef NTX_CUDA_GEMV_CUH
#define NTX_CUDA_GEMV_CUH

#include "common.cuh"

#define GV_WARPS 4

enum { GV_EPI_STORE = 0, GV_EPI_ACC = 1, GV_EPI_SWIGLU = 2 };

struct gv_args {
	const uint8_t *w0; /* (n_out, n_in) weights; gate for NM = 2 */
	const uint8_t *w1; /* up weights for NM = 2, else unused */
	uint64_t row_bytes;
	int n_in, n_out, n_tok;
	int epi;             /* GV_EPI_*: y = v, y += v, y = silu(y) * v */
	const int8_t *xqs;   /* q8 activations: int8 [n_tok][n_in] */
	const float2 *xds;   /* q8 activations: (d, d*sum) [n_tok][n_in/32] */
	const float *x;      /* float activations [n_tok][n_in] */
	float *y;            /* [n_tok][n_out] */
};

__host__ __device__ constexpr int gv_pow2(int x)
{
	return x <= 1 ? 1 : 2 * gv_pow2((x + 1) / 2);
}

__host__ __device__ constexpr int gv_log2(int x)
{
	return x <= 1 ? 0 : 1 + gv_log2(x / 2);
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

/* acc layout: index m * HALF + rh * NT + t, HALF = gv_pow2(RH * NT). */
template <int NT, int RH, int NM>
__device__ __forceinline__ void gv_epilogue(float *acc, int lane, int row0, const gv_args &a)
{
	constexpr int HALF = gv_pow2(RH * NT), V = HALF * NM, LOGV = gv_log2(V);
	static_assert(V <= 32, "too many accumulators for one warp");
	float v, u = 0.0f;
	int idx, rh, t, row;

	gv_rs<V, 16>::run(acc, lane);
	v = acc[0];
	if constexpr (NM == 2)
		u = __shfl_xor_sync(NTX_FULL_MASK, v, 16); /* value idx + HALF */
	if (lane & ((32 >> LOGV) - 1))
		return;
	idx = lane >> (5 - LOGV);
	if (idx >= HALF)
		return;
	rh = idx / NT;
	t = idx % NT;
	row = row0 + rh;
	if (rh >= RH || t >= a.n_tok || row >= a.n_out)
		return;
	float *yp = a.y + (int64_t)t * a.n_out + row;
	if constexpr (NM == 2)
		*yp = ntx_silu_mul(v, u);
	else if (a.epi == GV_EPI_ACC)
		*yp += v;
	else if (a.epi == GV_EPI_SWIGLU)
		*yp = ntx_silu_mul(*yp, v);
	else
		*yp = v;
}

/* gemv_q8.cu: run the q8 GEMV for a quantized type (nm = 1 or 2). */
int ntx_gv_q8(uint32_t type, int nm, const gv_args &a, cudaStream_t s, struct ntx_err *err);

#endif
