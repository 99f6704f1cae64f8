/* gemv_q8.cu - activation quantization (q8) and the GEMV for quantized
 * weights (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K) with integer dot products (dp4a),
 * over one matrix or several sharing one input (ntx_cuda_gemv_multi), of
 * any mix of these types in one launch.
 *
 * Loads: quantized blocks are 18, 22, 34 or 210 bytes (2-byte aligned), so a
 * lane per block would issue narrow, scattered loads. Instead each warp
 * streams its R rows through a private shared-memory ring of up to ST
 * stages with cp.async: a stage is 32 lanes' worth of elements of each row
 * (1024 for Q4_0 / Q5_0 / Q8_0, 2048 for the K-quants), copied as the 16-byte
 * aligned cover of its byte range (coalesced 16-byte copies that bypass L1;
 * the block bytes keep their address mod 16 in shared memory). ST - 1
 * stages are in flight while one is computed, and several warps per SM each
 * keep their own ring full, so enough bytes are in flight to saturate HBM.
 * When ks warps split a row, each warp's ring holds only the stages it has.
 *
 * Compute: Q4_0 / Q5_0 / Q8_0: lane l takes block l (32 elements) of the stage for
 * all R rows (ntx_unit_decode). K-quants: lane l takes pair l % 4 (64
 * elements that share their weight bytes, blockmath.cuh) of block l / 4, so
 * each byte loaded from shared memory is used whole and the scales are
 * decoded once per 64 elements; for each token it loads the 64 int8
 * activations (four 16-byte loads, through L1) and their (d, d*sum), and
 * does 16 dp4a per row. The segment's type is a run-time switch per warp:
 * one kernel serves every type and every mix. */
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
	if ((wtype & NTX_CUDA_SPLIT) && !ntx_cu_type_bs(wtype))
		return -1;
	switch (ntx_cuda_base_type(wtype)) {
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q5_0:
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
	ntx_pdl_wait();
	ntx_pdl_trigger();

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
	cudaError_t e;

	if (ntx_cu_check_fmt("quantize_q8", fmt, n, err))
		return -1;
	if (n_tok <= 0)
		return ntx_err_set(err, NTX_EINVAL, "quantize_q8: n_tok = %d", n_tok);
	if (!x || !xq || !ntx_cu_aligned(x, 16) || !ntx_cu_aligned(xq, 16))
		return ntx_err_set(err, NTX_EINVAL, "quantize_q8: buffers must be non-NULL and 16-byte aligned");
	total = n * n_tok / 8;
	e = ntx_launch(ntx_q8_quantize_kernel, (unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)s,
		       x, (int8_t *)xq, (float2 *)((char *)xq + ntx_cuda_q8_qs_bytes(n, n_tok)), n,
		       total, fmt);
	return ntx_cu_launched("quantize_q8", e, err);
}

extern "C" int ntx_cuda_quantize_q8(const float *x, void *xq, int64_t n, int n_tok, ntx_stream_t s,
				    struct ntx_err *err)
{
	return ntx_cuda_quantize_q8_fmt(x, xq, n, n_tok, NTX_CUDA_Q8F_32, s, err);
}

/* ---- the staged GEMV ---- */

#define GV_ST 4 /* ring slots per warp */

/* Elements per lane and stage: a block of Q4_0 / Q5_0 / Q8_0, a K-quant pair. */
template <int T> __host__ __device__ constexpr int gv_epl()
{
	return ntx_qt<T>::UPB == 8 ? 64 : 32;
}

template <int T> __host__ __device__ constexpr int gv_se()
{
	return 32 * gv_epl<T>();
}

/* Shared-memory bytes per row and stage: the stage's bytes plus the worst
 * case of aligning both ends to 16, rounded to 16. */
template <int T> __host__ __device__ constexpr int gv_srow()
{
	return (gv_se<T>() / ntx_qt<T>::BS * ntx_qt<T>::BB + 30 + 15) / 16 * 16;
}

/* One token's activations for a K-quant pair whose units are the 32-blocks
 * u0 and u1 (global unit indices) of the row. */
template <int T>
__device__ __forceinline__ void gv_ld_xp(const gv_args &a, int t, int64_t u0, int64_t u1, ntx_xp &x)
{
	const uint4 *xq = (const uint4 *)(a.xqs + (int64_t)t * a.n_in);
	const float2 *ds = a.xds + (int64_t)t * (a.n_in / 32);
	const uint4 a0 = __ldg(xq + 2 * u0), a1 = __ldg(xq + 2 * u0 + 1);
	const uint4 b0 = __ldg(xq + 2 * u1), b1 = __ldg(xq + 2 * u1 + 1);

	x.x0[0] = a0.x, x.x0[1] = a0.y, x.x0[2] = a0.z, x.x0[3] = a0.w;
	x.x0[4] = a1.x, x.x0[5] = a1.y, x.x0[6] = a1.z, x.x0[7] = a1.w;
	x.x1[0] = b0.x, x.x1[1] = b0.y, x.x1[2] = b0.z, x.x1[3] = b0.w;
	x.x1[4] = b1.x, x.x1[5] = b1.y, x.x1[6] = b1.z, x.x1[7] = b1.w;
	if constexpr (T == NTX_TYPE_Q6_K) {
		x.ds0 = __ldg(ds + u0);
		x.ds1 = __ldg(ds + u1);
	} else { /* u1 = u0 + 1, u0 even: one 16-byte load */
		const float4 d = __ldg((const float4 *)(ds + u0));

		x.ds0 = make_float2(d.x, d.y);
		x.ds1 = make_float2(d.z, d.w);
	}
	ntx_xp_sums<T>(x);
}

/* One warp's share of its row group for type T: the stages kw, kw + ks, ...
 * of its R rows, accumulated into acc. */
template <int T, int NT, int RH, int NM>
__device__ __forceinline__ void gv_q8_body(const gv_args &a, const gv_where &wh, int lane,
					   uint8_t *ring, float *acc)
{
	constexpr int R = RH * NM, SE = gv_se<T>();
	constexpr int BS = ntx_qt<T>::BS, BB = ntx_qt<T>::BB, UPB = ntx_qt<T>::UPB;
	constexpr int HALF = gv_pow2(RH * NT);
	const int n_st = (a.n_in + SE - 1) / SE;
	const int n_loc = wh.kw < n_st ? (n_st - wh.kw + a.ks - 1) / a.ks : 0;
	const int sb = a.sb;
	const uint8_t *rp[R];

#pragma unroll
	for (int r = 0; r < R; r++)
		rp[r] = gv_row<RH>(a, wh, r);

	/* Copy local stage i (row stage kw + i * ks) into ring slot i % GV_ST
	 * (always commits a group, possibly empty, so that wait_group counts
	 * stay uniform). Slots past a.st are never used: a warp with fewer
	 * than GV_ST stages has n_loc <= a.st. */
	auto issue = [&](int i) {
		if (i < n_loc) {
			const int k0 = (wh.kw + i * a.ks) * SE, k1 = min(k0 + SE, a.n_in);
			const uint64_t b0 = (uint64_t)(k0 / BS) * BB, b1 = (uint64_t)(k1 / BS) * BB;
			uint8_t *dst = ring + (i % GV_ST) * (R * sb);

#pragma unroll
			for (int r = 0; r < R; r++) {
				uintptr_t lo = (uintptr_t)(rp[r] + b0) & ~(uintptr_t)15;
				uintptr_t hi = ((uintptr_t)(rp[r] + b1) + 15) & ~(uintptr_t)15;
				int n16 = (int)((hi - lo) >> 4);

				for (int c = lane; c < n16; c += 32)
					ntx_cp_async16(dst + r * sb + 16 * c, (const void *)(lo + 16 * c));
			}
		}
		ntx_cp_async_commit();
	};

#pragma unroll
	for (int i = 0; i < GV_ST - 1; i++)
		issue(i);

	for (int i = 0; i < n_loc; i++) {
		ntx_cp_async_wait<GV_ST - 2>();
		__syncwarp();
		/* the slot refilled here was last read in iteration i - 1 */
		issue(i + GV_ST - 1);

		const int k0 = (wh.kw + i * a.ks) * SE;
		const int nb = min(SE, a.n_in - k0) / BS; /* blocks in this stage */
		const uint8_t *slot = ring + (i % GV_ST) * (R * sb);
		const uint64_t b0 = (uint64_t)(k0 / BS) * BB;

		if constexpr (UPB == 8) {
			if (lane < 4 * nb) {
				const int bl = lane >> 2, p = lane & 3;
				const int64_t ub = (int64_t)(k0 / BS + bl) * 8; /* the block's first unit */
				int u0, u1;
				ntx_wp w[R];

				ntx_pair_units<T>(p, &u0, &u1);
#pragma unroll
				for (int r = 0; r < R; r++) {
					/* Q4_K / Q5_K rows and blocks are 16-byte aligned
					 * (checked on entry; 144 and 176 are multiples of 16) */
					const int off = BB % 16 ? (int)((uintptr_t)(rp[r] + b0) & 15) : 0;

					ntx_pair_decode<T>(slot + r * sb + off + bl * BB, p, w[r]);
				}
#pragma unroll
				for (int t = 0; t < NT; t++) {
					if (t < a.n_tok) {
						ntx_xp x;

						gv_ld_xp<T>(a, t, ub + u0, ub + u1, x);
#pragma unroll
						for (int r = 0; r < R; r++)
							acc[(r / RH) * HALF + (r % RH) * NT + t] +=
								ntx_pair_dot<T>(w[r], x);
					}
				}
			}
		} else {
			if (lane < nb) {
				const int64_t ug = (int64_t)(k0 / 32) + lane;
				ntx_wu wu[R];

#pragma unroll
				for (int r = 0; r < R; r++)
					ntx_unit_decode<T>(slot + r * sb + ((uintptr_t)(rp[r] + b0) & 15) + lane * BB,
							   0, wu[r]);
#pragma unroll
				for (int t = 0; t < NT; t++) {
					if (t < a.n_tok) {
						const uint4 *xp = (const uint4 *)(a.xqs + (int64_t)t * a.n_in) + 2 * ug;
						const uint4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
						const float2 ds = __ldg(a.xds + (int64_t)t * (a.n_in / 32) + ug);
						const uint32_t xw[8] = { x0.x, x0.y, x0.z, x0.w,
									 x1.x, x1.y, x1.z, x1.w };

#pragma unroll
						for (int r = 0; r < R; r++)
							acc[(r / RH) * HALF + (r % RH) * NT + t] +=
								ntx_unit_dot(wu[r], xw, ds.x, ds.y);
					}
				}
			}
		}
	}
	ntx_cp_async_wait<0>();
}

/* Rows per warp: 2 (or 1 gate + 1 up row). */
template <int NM> __host__ __device__ constexpr int gv_rh()
{
	return NM == 2 ? 1 : 2;
}

/* n_tok 1 (decode) keeps 6 CTAs of registers per SM (as many as Q4_K's
 * rings fit; 5 on sm_80, whose code needs a few more registers not to
 * spill); larger NT may use more registers rather than spill. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 860
#define GV_MINB_NT1 5
#else
#define GV_MINB_NT1 6
#endif
template <int NT, int NM>
__global__ void __launch_bounds__(GV_WARPS * 32, NT == 1 ? GV_MINB_NT1 : 1) ntx_gemv_q8_kernel(gv_args a)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	constexpr int RH = gv_rh<NM>(), R = RH * NM;
	constexpr int V = gv_pow2(RH * NT) * NM;
	extern __shared__ __align__(16) uint8_t gv_smem[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const gv_where wh = gv_locate<RH>(a, warp);
	uint8_t *ring = gv_smem + warp * (a.st * R * a.sb);
	float acc[V];

#pragma unroll
	for (int i = 0; i < V; i++)
		acc[i] = 0.0f;
	if (wh.active) {
		switch (a.seg[wh.s].type) {
		case NTX_TYPE_Q4_0: gv_q8_body<NTX_TYPE_Q4_0, NT, RH, NM>(a, wh, lane, ring, acc); break;
		case NTX_TYPE_Q5_0: gv_q8_body<NTX_TYPE_Q5_0, NT, RH, NM>(a, wh, lane, ring, acc); break;
		case NTX_TYPE_Q8_0: gv_q8_body<NTX_TYPE_Q8_0, NT, RH, NM>(a, wh, lane, ring, acc); break;
		case NTX_TYPE_Q4_K: gv_q8_body<NTX_TYPE_Q4_K, NT, RH, NM>(a, wh, lane, ring, acc); break;
		case NTX_TYPE_Q5_K: gv_q8_body<NTX_TYPE_Q5_K, NT, RH, NM>(a, wh, lane, ring, acc); break;
		case NTX_TYPE_Q6_K: gv_q8_body<NTX_TYPE_Q6_K, NT, RH, NM>(a, wh, lane, ring, acc); break;
		default: break;
		}
	}
	gv_epilogue<NT, RH, NM>(acc, lane, warp, wh, a);
}

/* Stages of a row and shared bytes per row-stage for a quantized type. */
static void gv_type_geom(uint32_t t, int n_in, int *n_st, int *sb)
{
	int se, srow;

	switch (t) {
	case NTX_TYPE_Q4_0: se = gv_se<NTX_TYPE_Q4_0>(), srow = gv_srow<NTX_TYPE_Q4_0>(); break;
	case NTX_TYPE_Q5_0: se = gv_se<NTX_TYPE_Q5_0>(), srow = gv_srow<NTX_TYPE_Q5_0>(); break;
	case NTX_TYPE_Q8_0: se = gv_se<NTX_TYPE_Q8_0>(), srow = gv_srow<NTX_TYPE_Q8_0>(); break;
	case NTX_TYPE_Q4_K: se = gv_se<NTX_TYPE_Q4_K>(), srow = gv_srow<NTX_TYPE_Q4_K>(); break;
	case NTX_TYPE_Q5_K: se = gv_se<NTX_TYPE_Q5_K>(), srow = gv_srow<NTX_TYPE_Q5_K>(); break;
	default: se = gv_se<NTX_TYPE_Q6_K>(), srow = gv_srow<NTX_TYPE_Q6_K>(); break;
	}
	*n_st = (n_in + se - 1) / se;
	*sb = srow;
}

template <int NT, int NM> static int gv_launch(gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	constexpr int R = gv_rh<NM>() * NM;
	static size_t attr_bytes;
	auto kern = ntx_gemv_q8_kernel<NT, NM>;
	int n_st = 1, sb = 16, grid, loc;
	size_t smem;

	for (int i = 0; i < a.n_seg; i++) {
		int ns, b;

		gv_type_geom((uint32_t)a.seg[i].type, a.n_in, &ns, &b);
		n_st = ns > n_st ? ns : n_st;
		sb = b > sb ? b : sb;
	}
	grid = ntx_gv_plan(a, gv_rh<NM>(), n_st);
	/* ring slots: no more than the most stages any warp has; the n_st
	 * above is the largest over the types, so every warp's fits */
	loc = (n_st + a.ks - 1) / a.ks;
	a.st = loc < GV_ST ? loc : GV_ST;
	a.sb = sb;
	smem = (size_t)GV_WARPS * a.st * R * sb;
	if (smem > attr_bytes) {
		if (ntx_cu_smem(kern, smem, "gemv_q8: cudaFuncSetAttribute", err))
			return -1;
		/* many small rings per SM: ask for the largest shared carveout */
		cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
				     cudaSharedmemCarveoutMaxShared);
		cudaGetLastError();
		attr_bytes = smem;
	}
	return ntx_cu_launched(NM == 2 ? "gemv_swiglu_q8" : "gemv_q8",
			       ntx_launch(kern, (unsigned)grid, GV_WARPS * 32, smem, s, a), err);
}

template <int NM> static int gv_nt(gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	if (a.n_tok <= 1)
		return gv_launch<1, NM>(a, s, err);
	if (a.n_tok <= 2)
		return gv_launch<2, NM>(a, s, err);
	if (a.n_tok <= 4)
		return gv_launch<4, NM>(a, s, err);
	return gv_launch<8, NM>(a, s, err);
}

int ntx_gv_q8(int nm, gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	for (int i = 0; i < a.n_seg; i++)
		if (ntx_cuda_wtype_q8((uint32_t)a.seg[i].type) != 1 || (a.seg[i].type & NTX_CUDA_SPLIT))
			return ntx_err_set(err, NTX_EUNSUP, "gemv: type %s has no q8 kernel",
					   ntx_cu_type_name((uint32_t)a.seg[i].type));
	return nm == 2 ? gv_nt<2>(a, s, err) : gv_nt<1>(a, s, err);
}
