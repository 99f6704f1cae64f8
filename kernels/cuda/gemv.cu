/* gemv.cu - decode GEMV entry points (ntx_cuda_gemv, ntx_cuda_gemv_swiglu)
 * and the GEMV for float weights (F32, F16, BF16).
 *
 * Float weights: rows are read directly with 16-byte streaming loads (8
 * halves or 4 floats per lane), lanes of a warp on consecutive 16-byte
 * chunks (fully coalesced), U chunks per row in flight per lane before the
 * first use; activations come through L1 as float4. FMA in float. One
 * launch serves several matrices of one float type (gemv_multi). */
#include <string.h>

#include <atomic>

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
__global__ void __launch_bounds__(GV_WARPS * 32, 1) ntx_gemv_f_kernel(gv_args a)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	constexpr int R = RH * NM, EPC = WT == NTX_TYPE_F32 ? 4 : 8;
	constexpr int HALF = gv_pow2(RH * NT), V = HALF * NM;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const gv_where wh = gv_locate<RH>(a, warp);
	float acc[V];

#pragma unroll
	for (int i = 0; i < V; i++)
		acc[i] = 0.0f;
	if (wh.active) {
		const uint4 *rp[R];
		const int nch = a.n_in / EPC;

#pragma unroll
		for (int r = 0; r < R; r++)
			rp[r] = (const uint4 *)gv_row<RH>(a, wh, r);
		/* iterations of 32 * U chunks: warp kw takes kw, kw + ks, ... */
		for (int c0 = lane + 32 * U * wh.kw; c0 < nch; c0 += 32 * U * a.ks) {
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
	}
	gv_epilogue<NT, RH, NM>(acc, lane, warp, wh, a);
}

/* FINE: let ntx_gv_plan split rows until each warp has a single round of
 * 32 * U chunks (else at least two) */
template <int WT, int NT, int RH, int NM, int U, int FINE = 0>
static int gvf_launch(gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	constexpr int EPC = WT == NTX_TYPE_F32 ? 4 : 8;
	const int n_st = (a.n_in / EPC + 32 * U - 1) / (32 * U);
	const int grid = ntx_gv_plan(a, RH, FINE ? 2 * n_st : n_st);

	return ntx_cu_launched(NM == 2 ? "gemv_swiglu_f" : "gemv_f",
			       ntx_launch(ntx_gemv_f_kernel<WT, NT, RH, NM, U>, (unsigned)grid, GV_WARPS * 32, 0,
					  s, a),
			       err);
}

template <int WT, int NM> static int gvf_nt(gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	/* one token of half-width weights (F16, BF16): 4 rows per warp (2 for
	 * gate+up), 2 chunks in flight, rows split over up to GV_WARPS warps
	 * even with one chunk round per warp: more warps on small matrices
	 * (H200, 8B F16: 4096x4096 61 -> 63%, 4096x14336 77 -> 83% of 4.8
	 * TB/s; tg128 190 -> 199 tok/s) */
	if (a.n_tok <= 1 && WT != NTX_TYPE_F32)
		return NM == 1 ? gvf_launch<WT, 1, 4, 1, 2, 1>(a, s, err) :
				 gvf_launch<WT, 1, 2, 2, 2, 1>(a, s, err);
	if (a.n_tok <= 1)
		return gvf_launch<WT, 1, 2 / NM, NM, 4>(a, s, err);
	if (a.n_tok <= 2)
		return gvf_launch<WT, 2, 2 / NM, NM, 4>(a, s, err);
	if (a.n_tok <= 4)
		return gvf_launch<WT, 4, 4 / NM, NM, 2>(a, s, err);
	return gvf_launch<WT, 8, 4 / NM, NM, 2>(a, s, err);
}

/* All segments of one float type. */
static int gvf(int nm, gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	switch (a.seg[0].type) {
	case NTX_TYPE_F32: return nm == 2 ? gvf_nt<NTX_TYPE_F32, 2>(a, s, err) : gvf_nt<NTX_TYPE_F32, 1>(a, s, err);
	case NTX_TYPE_F16: return nm == 2 ? gvf_nt<NTX_TYPE_F16, 2>(a, s, err) : gvf_nt<NTX_TYPE_F16, 1>(a, s, err);
	case NTX_TYPE_BF16: return nm == 2 ? gvf_nt<NTX_TYPE_BF16, 2>(a, s, err) : gvf_nt<NTX_TYPE_BF16, 1>(a, s, err);
	default:
		return ntx_err_set(err, NTX_EUNSUP, "gemv: type %s has no float kernel",
				   ntx_cu_type_name((uint32_t)a.seg[0].type));
	}
}

/* ---- which kernel: direct loads (gemv_dl.cu) or staged (gemv_q8.cu) ---- */

static std::atomic<int> g_dl_force{ -1 }; /* ntx_cuda_gemv_dl_set */

extern "C" void ntx_cuda_gemv_dl_set(int on)
{
	g_dl_force.store(on < 0 ? -1 : !!on, std::memory_order_relaxed);
}

extern "C" int ntx_cuda_gemv_dl_enabled(void)
{
	int f = g_dl_force.load(std::memory_order_relaxed);

	return f >= 0 ? f : ntx_cu_knob(NTX_CU_GEMV_DL);
}

/* gemv_early = 0 (NTX_GEMV_EARLY=0): the direct-load GEMV waits for the
 * kernel before it (PDL) before its first weight loads rather than after
 * (for measuring). */
static int gv_early(void)
{
	return ntx_cu_knob(NTX_CU_GEMV_EARLY);
}

/* Split rows always take the direct-load kernel (the staged one reads GGUF
 * blocks only); Q4_K and Q5_K when it is enabled. Per kernel alone the
 * staged one is faster on the H200 for a 4096x4096 Q4_K (6.9 against 7.2
 * us) and the Q4_K gate/up (23.9 against 24.3), but in the decode sequence
 * the direct-load one everywhere gives 82.3 us per layer against 87.5 with
 * that choice per launch (PDL overlaps its prologue better; PERF-NOTES.md,
 * version 4). */
static int gv_use_dl(uint32_t t)
{
	if (!ntx_gv_dl_type(t))
		return 0;
	return (t & NTX_CUDA_SPLIT) || ntx_cuda_gemv_dl_enabled();
}

/* The direct-load GEMV's types: the Q4_K and split Q6_K segments of a
 * 2..8-token launch on tensor cores when the switch gemv_mma is on
 * (gemv_mma.cu gives the dp4a kernel's bits, so a matrix's values never
 * depend on which kernel ran), everything else on the dp4a lanes
 * (gemv_dl.cu). */
static int gv_dl(int nm, const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	gv_args m = a, d = a;

	if (!ntx_gv_mma_usable(nm, a))
		return ntx_gv_dl(nm, a, s, err);
	m.n_seg = d.n_seg = 0;
	for (int i = 0; i < a.n_seg; i++) {
		if (ntx_gv_mma_seg(nm, a, i))
			m.seg[m.n_seg++] = a.seg[i];
		else
			d.seg[d.n_seg++] = a.seg[i];
	}
	if (m.n_seg && ntx_gv_mma(nm, m, s, err))
		return -1;
	return d.n_seg ? ntx_gv_dl(nm, d, s, err) : 0;
}

/* ---- entry points ---- */

/* Check one matrix of a GEMV call; q8: its type takes q8 activations. */
static int gv_check(const char *fn, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
		    float *y, struct ntx_err *err)
{
	int q8 = ntx_cuda_wtype_q8(type);

	if (q8 < 0)
		return ntx_err_set(err, NTX_EUNSUP, "%s: weight type %s is not supported on CUDA", fn,
				   ntx_cu_type_name(type));
	if (n_out < 1 || n_out > INT32_MAX / 2)
		return ntx_err_set(err, NTX_EINVAL, "%s: n_out = %lld is outside 1..%d", fn,
				   (long long)n_out, INT32_MAX / 2);
	/* float rows are read 16 bytes at a time: rows must start 16-aligned;
	 * quantized rows need what their blocks need (ntx_cu_type_align) */
	if (ntx_cu_check_w(fn, type, w, n_in, q8 ? 1 : 16, err))
		return -1;
	if (!q8 && n_in % (type == NTX_TYPE_F32 ? 4 : 8))
		return ntx_err_set(err, NTX_EINVAL, "%s: n_in = %lld is not a multiple of %d for %s", fn,
				   (long long)n_in, type == NTX_TYPE_F32 ? 4 : 8, ntx_cu_type_name(type));
	if (!y)
		return ntx_err_set(err, NTX_EINVAL, "%s: NULL output", fn);
	return 0;
}

/* Check the activations for a type family and fill them into a. */
static int gv_acts(const char *fn, int q8, uint32_t type, int64_t n_in, const float *x,
		   const void *xq, int n_tok, gv_args &a, struct ntx_err *err)
{
	if (n_tok < 1 || n_tok > NTX_CUDA_GEMV_MAX_TOK)
		return ntx_err_set(err, NTX_EINVAL, "%s: n_tok = %d is outside 1..%d", fn, n_tok,
				   NTX_CUDA_GEMV_MAX_TOK);
	if (q8 && (!xq || !ntx_cu_aligned(xq, 16)))
		return ntx_err_set(err, NTX_EINVAL, "%s: %s weights need q8 activations (xq), 16-byte aligned",
				   fn, ntx_cu_type_name(type));
	if (!q8 && (!x || !ntx_cu_aligned(x, 16)))
		return ntx_err_set(err, NTX_EINVAL, "%s: %s weights need float activations (x), 16-byte aligned",
				   fn, ntx_cu_type_name(type));
	a.n_in = (int)n_in;
	a.n_tok = n_tok;
	a.xqs = (const int8_t *)xq;
	a.xds = q8 ? (const float2 *)((const char *)xq + ntx_cuda_q8_qs_bytes(n_in, n_tok)) : NULL;
	a.x = x;
	a.early = gv_early();
	return 0;
}

static void gv_seg_set(gv_seg &sg, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
		       float *y, int epi)
{
	sg.w = (const uint8_t *)w;
	sg.y = y;
	sg.row_bytes = ntx_cu_row_bytes(type, n_in);
	sg.n_out = (int)n_out;
	sg.type = (int)type;
	sg.epi = epi;
	sg.g0 = 0;
}

/* Validate and run one GEMV (nm = 1) or the fused gate/up (nm = 2, w1 the
 * up matrix of the same type). */
static int gv_run(const char *fn, uint32_t type, const void *w0, const void *w1, int64_t n_in,
		  int64_t n_out, const float *x, const void *xq, float *y, int n_tok, int epi, int nm,
		  cudaStream_t s, struct ntx_err *err)
{
	gv_args a;
	int q8;

	memset(&a, 0, sizeof a);
	if (gv_check(fn, type, w0, n_in, n_out, y, err) ||
	    (nm == 2 && gv_check(fn, type, w1, n_in, n_out, y, err)))
		return -1;
	q8 = ntx_cuda_wtype_q8(type);
	if (gv_acts(fn, q8, type, n_in, x, xq, n_tok, a, err))
		return -1;
	gv_seg_set(a.seg[0], type, w0, n_in, n_out, y, epi);
	a.n_seg = 1;
	a.w1 = (const uint8_t *)w1;
	if (!q8)
		return gvf(nm, a, s, err);
	return gv_use_dl(type) ? gv_dl(nm, a, s, err) : ntx_gv_q8(nm, a, s, err);
}

extern "C" int ntx_cuda_gemv(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
			     const float *x, const void *xq, float *y, int n_tok, int accumulate,
			     ntx_stream_t s, struct ntx_err *err)
{
	return gv_run("gemv", wtype, w, NULL, n_in, n_out, x, xq, y, n_tok,
		      accumulate ? GV_EPI_ACC : GV_EPI_STORE, 1, (cudaStream_t)s, err);
}

extern "C" int ntx_cuda_gemv_multi(const struct ntx_cuda_gemv_seg *segs, int n_seg, int64_t n_in,
				   const float *x, const void *xq, int n_tok, ntx_stream_t st,
				   struct ntx_err *err)
{
	gv_args a;
	int n_q8 = 0;

	if (!segs || n_seg < 1 || n_seg > NTX_CUDA_GEMV_MAX_SEG)
		return ntx_err_set(err, NTX_EINVAL, "gemv_multi: %d segments (1..%d)", n_seg,
				   NTX_CUDA_GEMV_MAX_SEG);
	for (int i = 0; i < n_seg; i++) {
		if (gv_check("gemv_multi", segs[i].wtype, segs[i].w, n_in, segs[i].n_out, segs[i].y, err))
			return -1;
		n_q8 += ntx_cuda_wtype_q8(segs[i].wtype);
	}
	/* quantized segments: one launch per kernel (direct-load, staged),
	 * whatever the mix of types */
	for (int dl = 1; n_q8 && dl >= 0; dl--) {
		memset(&a, 0, sizeof a);
		if (gv_acts("gemv_multi", 1, NTX_TYPE_Q8_0, n_in, x, xq, n_tok, a, err))
			return -1;
		for (int i = 0; i < n_seg; i++)
			if (ntx_cuda_wtype_q8(segs[i].wtype) && gv_use_dl(segs[i].wtype) == dl)
				gv_seg_set(a.seg[a.n_seg++], segs[i].wtype, segs[i].w, n_in, segs[i].n_out,
					   segs[i].y, segs[i].accumulate ? GV_EPI_ACC : GV_EPI_STORE);
		if (a.n_seg && (dl ? gv_dl(1, a, (cudaStream_t)st, err) : ntx_gv_q8(1, a, (cudaStream_t)st, err)))
			return -1;
	}
	/* float segments: one launch per float type */
	for (int i = 0; i < n_seg; i++) {
		uint32_t t = segs[i].wtype;
		int seen = 0;

		if (ntx_cuda_wtype_q8(t))
			continue;
		for (int j = 0; j < i; j++)
			seen |= segs[j].wtype == t;
		if (seen)
			continue;
		memset(&a, 0, sizeof a);
		if (gv_acts("gemv_multi", 0, t, n_in, x, xq, n_tok, a, err))
			return -1;
		for (int j = i; j < n_seg; j++)
			if (segs[j].wtype == t)
				gv_seg_set(a.seg[a.n_seg++], t, segs[j].w, n_in, segs[j].n_out, segs[j].y,
					   segs[j].accumulate ? GV_EPI_ACC : GV_EPI_STORE);
		if (gvf(1, a, (cudaStream_t)st, err))
			return -1;
	}
	return 0;
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
