/* gemv_q8.cu - activation quantization (q8, three formats) and the GEMV for
 * quantized weights (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) on the int8 tensor cores
 * (mma.sync m16n8k32), over one matrix or several sharing one input
 * (ntx_cuda_gemv_multi), of any mix of these types in one launch.
 *
 * Work: a warp owns a tile of 16 rows (of the gate and, for the fused
 * SwiGLU, of the up matrix) and a fixed share of the row length (ks warps
 * of one CTA split it: a function of the type and shape, ntx_gq_ks). Lane
 * (g, t) loads its words of rows g and g+8 straight from global memory into
 * registers (blockmath.cuh ntx_mb_load: 16- and 8-byte loads for Q4_K /
 * Q5_K, aligned 4-byte loads and funnel shifts for the 2-byte-aligned
 * Q4_0, Q8_0, Q6_K blocks), all loads of S blocks before the first use;
 * no shared-memory staging. Per 32-element unit: the activations of token
 * g (8 bytes, through L1) and the (d, d*sum) of tokens 2t, 2t+1 (L1), one
 * mma (two for Q6_K's half-unit scales) giving 16 rows x 8 tokens of exact
 * integer sums, then 4 float updates per lane (ntx_mepi). Tokens past n_tok
 * have zero activations: the instructions, and therefore every rounding,
 * are the same for every n_tok (batch invariance), and n_tok 8 costs about
 * what n_tok 1 does. The ks warps of a tile add their sums through shared
 * memory in warp order; the epilogue stores, accumulates or applies
 * silu(g) * u. One kernel serves every type (a switch per CTA). */
#include "gemv.cuh"

/* ---- q8 activations ---- */

size_t ntx_cuda_q8_qs_bytes(int64_t n, int n_tok)
{
	if (n <= 0 || n_tok <= 0)
		return 0;
	return ((size_t)n * (size_t)n_tok + 15) & ~(size_t)15;
}

size_t ntx_cuda_q8_bytes(int64_t n, int n_tok)
{
	if (n <= 0 || n_tok <= 0)
		return 0;
	return ntx_cuda_q8_qs_bytes(n, n_tok) + (size_t)n_tok * (size_t)(n / 32) * sizeof(float2);
}

extern "C" int ntx_cuda_q8_fmt(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q8_0:
		return NTX_CUDA_Q8F_Q8_0;
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
	case NTX_TYPE_Q6_K:
		return NTX_CUDA_Q8F_Q8_K;
	default:
		return -1;
	}
}

extern "C" int ntx_cuda_q8_group(int fmt)
{
	return fmt >= NTX_Q8F_32 && fmt <= NTX_Q8F_Q8_K ? ntx_q8f_group(fmt) : 0;
}

/* One lane per 8 floats (a warp per 256 consecutive elements of a row when
 * n % 256 == 0; groups of 32 never straddle rows since n % 32 == 0). */
__global__ void ntx_q8_quantize_kernel(const float *x, int8_t *qs, float2 *ds, int64_t n,
				       int64_t total /* n_tok * n / 8 */, int fmt)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	const int ok = i < total;
	const int64_t ii = ok ? i : 0, g8 = n / 8;
	const int64_t t = ii / g8, g = ii % g8;
	float v[8] = { 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f };

	if (ok) {
		const float4 a = *(const float4 *)(x + t * n + 8 * g);
		const float4 b = *(const float4 *)(x + t * n + 8 * g + 4);

		v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
		v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
	}
	ntx_q8_store8(v, qs + t * n, ds + t * (n / 32), 8 * g, fmt, ok);
}

extern "C" int ntx_cuda_quantize_q8_fmt(const float *x, void *xq, int64_t n, int n_tok, int fmt,
					ntx_stream_t s, struct ntx_err *err)
{
	int64_t total;

	if (ntx_cu_check_fmt("quantize_q8", fmt, n, err))
		return -1;
	if (n_tok <= 0)
		return ntx_err_set(err, NTX_EINVAL, "quantize_q8: n_tok = %d", n_tok);
	if (!x || !xq || !ntx_cu_aligned(x, 16) || !ntx_cu_aligned(xq, 16))
		return ntx_err_set(err, NTX_EINVAL, "quantize_q8: buffers must be non-NULL and 16-byte aligned");
	total = n * n_tok / 8;
	ntx_q8_quantize_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)s>>>(
		x, (int8_t *)xq, (float2 *)((char *)xq + ntx_cuda_q8_qs_bytes(n, n_tok)), n, total, fmt);
	return ntx_cu_launched("quantize_q8", err);
}

extern "C" int ntx_cuda_quantize_q8(const float *x, void *xq, int64_t n, int n_tok, ntx_stream_t s,
				    struct ntx_err *err)
{
	return ntx_cuda_quantize_q8_fmt(x, xq, n, n_tok, NTX_CUDA_Q8F_32, s, err);
}

/* ---- the tensor-core GEMV ---- */

#define GQ_WARPS 8 /* warps per CTA */
#ifndef GQ_SK
#define GQ_SK 2
#endif
#ifndef GQ_S32
#define GQ_S32 8
#endif

/* D = A . B for one m16n8k32 tile (C = 0); U8: A holds unsigned bytes. */
template <bool U8>
__device__ __forceinline__ void gq_mma(int *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
				       const uint32_t *b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	if constexpr (U8)
		asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, "
		    "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
		    : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
		    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[0]), "r"(b[1]), "r"(0));
	else
		asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
		    "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
		    : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
		    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[0]), "r"(b[1]), "r"(0));
#else
	(void)a0, (void)a1, (void)a2, (void)a3, (void)b;
	c[0] = c[1] = c[2] = c[3] = 0; /* not built: the Makefile targets sm_80+ */
#endif
}

/* Blocks per iteration (all their loads issued before the first use):
 * enough bytes in flight per warp, registers permitting. */
template <int T> __host__ __device__ constexpr int gq_steps(void)
{
	return ntx_qt<T>::UPB == 1 ? GQ_S32 : T == NTX_TYPE_Q4_K ? GQ_SK : 1;
}

/* One warp's share [b_lo, b_hi) of the blocks of rows r0 (lane row g)
 * and r1 (g + 8) of matrix w, accumulated into acc[i]: i = 0, 1: row g,
 * tokens 2t, 2t+1; i = 2, 3: row g + 8. The fused gate/up calls it once
 * per matrix, so each matrix's sums are those of a single GEMV. */
template <int T>
__device__ __forceinline__ void gq_body(const gv_args &a, const uint8_t *w, uint64_t row_bytes,
					int r0, int r1, int b_lo, int b_hi, int lane, float *acc)
{
	constexpr int BB = ntx_qt<T>::BB, UPB = ntx_qt<T>::UPB, S = gq_steps<T>();
	const int g = lane >> 2, t = lane & 3;
	const int64_t nu = a.n_in / 32; /* units per row */
	const uint8_t *rp0 = w + (uint64_t)r0 * row_bytes, *rp1 = w + (uint64_t)r1 * row_bytes;
	const int8_t *xg = a.xqs + (int64_t)g * a.n_in;
	const float2 *d0 = a.xds + (int64_t)(2 * t) * nu, *d1 = d0 + nu;
	const bool xok = g < a.n_tok, d0ok = 2 * t < a.n_tok, d1ok = 2 * t + 1 < a.n_tok;

	for (int b = b_lo; b < b_hi; b += S) {
		ntx_mb<T> wb[S][2];

#pragma unroll
		for (int j = 0; j < S; j++) {
			if (b + j < b_hi) {
				ntx_mb_load<T>(rp0 + (uint64_t)(b + j) * BB, t, wb[j][0]);
				ntx_mb_load<T>(rp1 + (uint64_t)(b + j) * BB, t, wb[j][1]);
			}
		}
#pragma unroll
		for (int j = 0; j < S; j++) {
			if (b + j >= b_hi)
				break;
#pragma unroll
			for (int u = 0; u < UPB; u++) {
				const int64_t ug = (int64_t)(b + j) * UPB + u;
				uint32_t bx[2] = { 0u, 0u }, w0[2], w1[2];
				float2 dA = make_float2(0.f, 0.f), dB = make_float2(0.f, 0.f);
				int c[4], c2[4] = { 0, 0, 0, 0 };
				float a0, b0, a1, b1;
				int s00, s01, s10, s11;

				if (xok)
					ntx_mx_load<T>(xg, ug, t, bx);
				if (d0ok)
					dA = ntx_ldg_f2(d0 + ug);
				if (d1ok)
					dB = ntx_ldg_f2(d1 + ug);
				ntx_mb_unit<T>(wb[j][0], u, t, w0);
				ntx_mb_unit<T>(wb[j][1], u, t, w1);
				if constexpr (T == NTX_TYPE_Q6_K) {
					/* k slots 0..15: first half, 16..31: second */
					gq_mma<false>(c, w0[0], w1[0], 0u, 0u, bx);
					gq_mma<false>(c2, 0u, 0u, w0[1], w1[1], bx);
				} else {
					gq_mma<ntx_mma_u8<T>()>(c, w0[0], w1[0], w0[1], w1[1], bx);
				}
				ntx_mb_scale<T>(wb[j][0], u, &a0, &b0, &s00, &s01);
				ntx_mb_scale<T>(wb[j][1], u, &a1, &b1, &s10, &s11);
				acc[0] = ntx_mepi<T>(acc[0], a0, b0, s00, s01, c[0], c2[0], dA);
				acc[1] = ntx_mepi<T>(acc[1], a0, b0, s00, s01, c[1], c2[1], dB);
				acc[2] = ntx_mepi<T>(acc[2], a1, b1, s10, s11, c[2], c2[2], dA);
				acc[3] = ntx_mepi<T>(acc[3], a1, b1, s10, s11, c[3], c2[3], dB);
			}
		}
	}
}

template <int T, int NM>
__device__ __forceinline__ void gq_rows(const gv_args &a, const gv_seg &sg, int r0, int r1, int b_lo,
					int b_hi, int lane, float (&acc)[NM][4])
{
	gq_body<T>(a, sg.w, sg.row_bytes, r0, r1, b_lo, b_hi, lane, acc[0]);
	if constexpr (NM == 2)
		gq_body<T>(a, a.w1, sg.row_bytes, r0, r1, b_lo, b_hi, lane, acc[1]);
}

/* Warps per tile (split of the row length) for a quantized matrix: a
 * function of its type and shape only. About 4096 warps, each with at
 * least 2 K-quant blocks or 16 Q4_0 / Q8_0 blocks (512 elements). */
static int gq_ks(uint32_t type, int64_t n_in, int64_t n_out)
{
	const int bs = ntx_cu_type_bs(type);
	const int64_t nblk = n_in / bs, tiles = (n_out + 15) / 16, minb = bs == 256 ? 2 : 16;
	int ks = 1;

	while (ks < GQ_WARPS && tiles * ks < 4096 && nblk >= 2 * minb * ks)
		ks *= 2;
	return ks;
}

/* n_tok 1..8, one code path: 2 CTAs of 8 warps per SM at least. */
template <int NM>
__global__ void __launch_bounds__(GQ_WARPS * 32, 2) ntx_gemv_q8_kernel(gv_args a)
{
	__shared__ float red[GQ_WARPS][NM * 4][32];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int s = gv_seg_of(a);
	const gv_seg &sg = a.seg[s];
	const int ks = sg.ks, tpc = GQ_WARPS / ks;
	const int tile = ((int)blockIdx.x - sg.c0) * tpc + warp / ks, kw = warp % ks;
	const int bs = sg.type == NTX_TYPE_Q4_0 || sg.type == NTX_TYPE_Q8_0 ? 32 : 256;
	const int nblk = a.n_in / bs;
	const int b_lo = (int)((int64_t)nblk * kw / ks), b_hi = (int)((int64_t)nblk * (kw + 1) / ks);
	const int g = lane >> 2, t = lane & 3;
	const int r0 = min(tile * 16 + g, sg.n_out - 1), r1 = min(tile * 16 + g + 8, sg.n_out - 1);
	float acc[NM][4];

#pragma unroll
	for (int m = 0; m < NM; m++)
		acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;
	/* tiles past the end recompute the last row (dropped below), so every
	 * warp reaches the barrier */
	switch (sg.type) {
	case NTX_TYPE_Q4_0: gq_rows<NTX_TYPE_Q4_0, NM>(a, sg, r0, r1, b_lo, b_hi, lane, acc); break;
	case NTX_TYPE_Q8_0: gq_rows<NTX_TYPE_Q8_0, NM>(a, sg, r0, r1, b_lo, b_hi, lane, acc); break;
	case NTX_TYPE_Q4_K: gq_rows<NTX_TYPE_Q4_K, NM>(a, sg, r0, r1, b_lo, b_hi, lane, acc); break;
	case NTX_TYPE_Q5_K: gq_rows<NTX_TYPE_Q5_K, NM>(a, sg, r0, r1, b_lo, b_hi, lane, acc); break;
	case NTX_TYPE_Q6_K: gq_rows<NTX_TYPE_Q6_K, NM>(a, sg, r0, r1, b_lo, b_hi, lane, acc); break;
	default: break;
	}
	if (ks > 1) { /* uniform in the CTA (one segment per CTA) */
#pragma unroll
		for (int m = 0; m < NM; m++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				red[warp][4 * m + i][lane] = acc[m][i];
		__syncthreads();
		if (kw)
			return;
		for (int k = 1; k < ks; k++)
#pragma unroll
			for (int m = 0; m < NM; m++)
#pragma unroll
				for (int i = 0; i < 4; i++)
					acc[m][i] = __fadd_rn(acc[m][i], red[warp + k][4 * m + i][lane]);
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int row = tile * 16 + g + 8 * (i >> 1), tok = 2 * t + (i & 1);

		if (row < sg.n_out && tok < a.n_tok) {
			float *yp = sg.y + (int64_t)tok * sg.n_out + row;

			if constexpr (NM == 2)
				*yp = ntx_silu_mul(acc[0][i], acc[NM - 1][i]);
			else if (sg.epi == GV_EPI_ACC)
				*yp = __fadd_rn(*yp, acc[0][i]);
			else if (sg.epi == GV_EPI_SWIGLU)
				*yp = ntx_silu_mul(*yp, acc[0][i]);
			else
				*yp = acc[0][i];
		}
	}
}

int ntx_gv_q8(int nm, gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	int64_t ctas = 0;

	for (int i = 0; i < a.n_seg; i++) {
		gv_seg &sg = a.seg[i];
		int64_t tiles, tpc;

		if (ntx_cuda_wtype_q8((uint32_t)sg.type) != 1)
			return ntx_err_set(err, NTX_EUNSUP, "gemv: type %s has no q8 kernel",
					   ntx_type_name((uint32_t)sg.type));
		sg.ks = gq_ks((uint32_t)sg.type, a.n_in, sg.n_out);
		tiles = (sg.n_out + 15) / 16;
		tpc = GQ_WARPS / sg.ks;
		sg.c0 = (int)ctas;
		ctas += (tiles + tpc - 1) / tpc;
	}
	if (nm == 2)
		ntx_gemv_q8_kernel<2><<<(unsigned)ctas, GQ_WARPS * 32, 0, s>>>(a);
	else
		ntx_gemv_q8_kernel<1><<<(unsigned)ctas, GQ_WARPS * 32, 0, s>>>(a);
	return ntx_cu_launched(nm == 2 ? "gemv_swiglu_q8" : "gemv_q8", err);
}
