/* gemv.cu - decode GEMV entry points (ntx_cuda_gemv, ntx_cuda_gemv_swiglu)
 * and the GEMV for float weights (F32, F16, BF16).
 *
 * Float weights: rows are read directly with 16-byte streaming loads (8
 * halves or 4 floats per lane), lanes of a warp on consecutive 16-byte
 * chunks (fully coalesced), U chunks per row in flight per lane before the
 * first use; activations come through L1 as float4. FMA in float. */
#include "gemv.cuh"

template <int WT> __device__ __forceinline__ float gv_dot16(uint4 w, const float *x)
{
	const uint32_t q[4] = { w.x, w.y, w.z, w.w };
	float s = 0.0f;

	if constexpr (WT == NTX_TYPE_F32) {
#pragma unroll
		for (int i = 0; i < 4; i++)
			s = fmaf(__uint_as_float(q[i]), x[i], s);
	} else if constexpr (WT == NTX_TYPE_F16) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float2 f = __half22float2(*(const __half2 *)&q[i]);

			s = fmaf(f.x, x[2 * i], s);
			s = fmaf(f.y, x[2 * i + 1], s);
		}
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			s = fmaf(__uint_as_float(q[i] << 16), x[2 * i], s);
			s = fmaf(__uint_as_float(q[i] & 0xFFFF0000u), x[2 * i + 1], s);
		}
	}
	return s;
}

template <int WT, int NT, int RH, int NM, int U>
__global__ void __launch_bounds__(GV_WARPS * 32) ntx_gemv_f_kernel(gv_args a)
{
	constexpr int R = RH * NM, EPC = WT == NTX_TYPE_F32 ? 4 : 8;
	constexpr int HALF = gv_pow2(RH * NT), V = HALF * NM;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int row0 = (blockIdx.x * GV_WARPS + warp) * RH;

	if (row0 >= a.n_out)
		return;

	const uint4 *rp[R];
	float acc[V];
	const int nch = a.n_in / EPC;

#pragma unroll
	for (int r = 0; r < R; r++) {
		int ri = min(row0 + r % RH, a.n_out - 1);

		rp[r] = (const uint4 *)((r < RH ? a.w0 : a.w1) + (uint64_t)ri * a.row_bytes);
	}
#pragma unroll
	for (int i = 0; i < V; i++)
		acc[i] = 0.0f;

	for (int c0 = lane; c0 < nch; c0 += 32 * U) {
		uint4 wv[R][U];

#pragma unroll
		for (int r = 0; r < R; r++) {
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int c = c0 + 32 * u;

				wv[r][u] = c < nch ? ntx_ld_stream16(rp[r] + c) : make_uint4(0, 0, 0, 0);
			}
		}
#pragma unroll
		for (int t = 0; t < NT; t++) {
			if (t < a.n_tok) {
#pragma unroll
				for (int u = 0; u < U; u++) {
					const int c = c0 + 32 * u;

					if (c < nch) {
						const float4 *xp = (const float4 *)(a.x + (int64_t)t * a.n_in +
										    (int64_t)c * EPC);
						float xf[EPC];

#pragma unroll
						for (int i = 0; i < EPC / 4; i++) {
							float4 f = __ldg(xp + i);

							xf[4 * i] = f.x, xf[4 * i + 1] = f.y;
							xf[4 * i + 2] = f.z, xf[4 * i + 3] = f.w;
						}
#pragma unroll
						for (int r = 0; r < R; r++)
							acc[(r / RH) * HALF + (r % RH) * NT + t] +=
								gv_dot16<WT>(wv[r][u], xf);
					}
				}
			}
		}
	}
	gv_epilogue<NT, RH, NM>(acc, lane, row0, a);
}

template <int WT, int NT, int RH, int NM, int U>
static int gvf_launch(const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	const int rows = GV_WARPS * RH;

	ntx_gemv_f_kernel<WT, NT, RH, NM, U>
		<<<(unsigned)((a.n_out + rows - 1) / rows), GV_WARPS * 32, 0, s>>>(a);
	return ntx_cu_launched(NM == 2 ? "gemv_swiglu_f" : "gemv_f", err);
}

template <int WT, int NM> static int gvf_nt(const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	if (a.n_tok <= 1)
		return gvf_launch<WT, 1, 2 / NM, NM, 4>(a, s, err);
	if (a.n_tok <= 2)
		return gvf_launch<WT, 2, 2 / NM, NM, 4>(a, s, err);
	if (a.n_tok <= 4)
		return gvf_launch<WT, 4, 4 / NM, NM, 2>(a, s, err);
	return gvf_launch<WT, 8, 4 / NM, NM, 2>(a, s, err);
}

static int gvf(uint32_t type, int nm, const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	switch (type) {
	case NTX_TYPE_F32: return nm == 2 ? gvf_nt<NTX_TYPE_F32, 2>(a, s, err) : gvf_nt<NTX_TYPE_F32, 1>(a, s, err);
	case NTX_TYPE_F16: return nm == 2 ? gvf_nt<NTX_TYPE_F16, 2>(a, s, err) : gvf_nt<NTX_TYPE_F16, 1>(a, s, err);
	case NTX_TYPE_BF16: return nm == 2 ? gvf_nt<NTX_TYPE_BF16, 2>(a, s, err) : gvf_nt<NTX_TYPE_BF16, 1>(a, s, err);
	default:
		return ntx_err_set(err, NTX_EUNSUP, "gemv: type %s has no float kernel", ntx_type_name(type));
	}
}

/* ---- entry points ---- */

extern "C" int ntx_cuda_wtype_q8(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q8_0:
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
	case NTX_TYPE_Q6_K:
		return 1;
	case NTX_TYPE_F32:
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16:
		return 0;
	default:
		return -1;
	}
}

/* Validate and run one GEMV (nm = 1) or the fused gate/up (nm = 2, w1 the
 * up matrix of the same type). */
static int gv_run(const char *fn, uint32_t type, const void *w0, const void *w1, int64_t n_in,
		  int64_t n_out, const float *x, const void *xq, float *y, int n_tok, int epi, int nm,
		  cudaStream_t s, struct ntx_err *err)
{
	int q8 = ntx_cuda_wtype_q8(type);
	gv_args a;

	if (q8 < 0)
		return ntx_err_set(err, NTX_EUNSUP, "%s: weight type %s is not supported on CUDA", fn,
				   ntx_type_name(type));
	if (n_tok < 1 || n_tok > NTX_CUDA_GEMV_MAX_TOK)
		return ntx_err_set(err, NTX_EINVAL, "%s: n_tok = %d is outside 1..%d", fn, n_tok,
				   NTX_CUDA_GEMV_MAX_TOK);
	if (n_out < 1 || n_out > INT32_MAX / 2)
		return ntx_err_set(err, NTX_EINVAL, "%s: n_out = %lld is outside 1..%d", fn,
				   (long long)n_out, INT32_MAX / 2);
	/* float rows are read 16 bytes at a time: rows must start 16-aligned;
	 * quantized rows need what their blocks need (ntx_cu_type_align) */
	if (ntx_cu_check_w(fn, type, w0, n_in, q8 ? 1 : 16, err) ||
	    (nm == 2 && ntx_cu_check_w(fn, type, w1, n_in, q8 ? 1 : 16, err)))
		return -1;
	if (!q8 && n_in % (type == NTX_TYPE_F32 ? 4 : 8))
		return ntx_err_set(err, NTX_EINVAL, "%s: n_in = %lld is not a multiple of %d for %s", fn,
				   (long long)n_in, type == NTX_TYPE_F32 ? 4 : 8, ntx_type_name(type));
	if (!y)
		return ntx_err_set(err, NTX_EINVAL, "%s: NULL output", fn);
	if (q8 && (!xq || !ntx_cu_aligned(xq, 16)))
		return ntx_err_set(err, NTX_EINVAL, "%s: %s weights need q8 activations (xq), 16-byte aligned",
				   fn, ntx_type_name(type));
	if (!q8 && (!x || !ntx_cu_aligned(x, 16)))
		return ntx_err_set(err, NTX_EINVAL, "%s: %s weights need float activations (x), 16-byte aligned",
				   fn, ntx_type_name(type));
	a.w0 = (const uint8_t *)w0;
	a.w1 = (const uint8_t *)w1;
	a.row_bytes = ntx_cu_row_bytes(type, n_in);
	a.n_in = (int)n_in;
	a.n_out = (int)n_out;
	a.n_tok = n_tok;
	a.epi = epi;
	a.xqs = (const int8_t *)xq;
	a.xds = q8 ? (const float2 *)((const char *)xq + ntx_cuda_q8_qs_bytes(n_in, n_tok)) : NULL;
	a.x = x;
	a.y = y;
	return q8 ? ntx_gv_q8(type, nm, a, s, err) : gvf(type, nm, a, s, err);
}

extern "C" int ntx_cuda_gemv(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
			     const float *x, const void *xq, float *y, int n_tok, int accumulate,
			     ntx_stream_t s, struct ntx_err *err)
{
	return gv_run("gemv", wtype, w, NULL, n_in, n_out, x, xq, y, n_tok,
		      accumulate ? GV_EPI_ACC : GV_EPI_STORE, 1, (cudaStream_t)s, err);
}

extern "C" int ntx_cuda_gemv_swiglu(uint32_t gtype, const void *wg, uint32_t utype, const void *wu,
				    int64_t n_in, int64_t n_out, const float *x, const void *xq,
				    float *h, int n_tok, ntx_stream_t s, struct ntx_err *err)
{
	if (gtype == utype)
		return gv_run("gemv_swiglu", gtype, wg, wu, n_in, n_out, x, xq, h, n_tok,
			      GV_EPI_STORE, 2, (cudaStream_t)s, err);
	/* different types: h = Wg x, then h = silu(h) * (Wu x) in the epilogue */
	if (gv_run("gemv_swiglu", gtype, wg, NULL, n_in, n_out, x, xq, h, n_tok, GV_EPI_STORE, 1,
		   (cudaStream_t)s, err))
		return -1;
	return gv_run("gemv_swiglu", utype, wu, NULL, n_in, n_out, x, xq, h, n_tok, GV_EPI_SWIGLU, 1,
		      (cudaStream_t)s, err);
}
