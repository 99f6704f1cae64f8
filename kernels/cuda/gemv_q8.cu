/* gemv_q8.cu - activation quantization (q8) and the GEMV for quantized
 * weights (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) with integer dot products (dp4a).
 *
 * Loads: quantized blocks are 18, 34 or 210 bytes (2-byte aligned), so a
 * lane per block would issue narrow, scattered loads. Instead each warp
 * streams its R rows through a private shared-memory ring of ST stages with
 * cp.async: a stage is 1024 elements of each row, copied as the 16-byte
 * aligned cover of its byte range (coalesced 16-byte copies that bypass L1;
 * the block bytes keep their address mod 16 in shared memory). ST - 1 stages
 * are in flight while one is computed, and several warps per SM each keep
 * their own ring full, so enough bytes are in flight to saturate HBM.
 *
 * Compute: lane l of the warp takes unit l (32 elements) of the stage for
 * all R rows: decodes the R units from shared memory (blockmath.cuh), then
 * for each token loads the 32 int8 activations (two 16-byte loads, through
 * L1) and their (d, d*sum), and does 8 dp4a per row. */
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

/* One lane per 4 floats; 8 lanes per block of 32. */
__global__ void ntx_q8_quantize_kernel(const float *x, int8_t *qs, float2 *ds, int64_t n,
				       int64_t total /* n_tok * n / 4 */)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int ok = i < total;
	int64_t ii = ok ? i : 0, g4 = n / 4;
	int64_t t = ii / g4, g = ii % g4;
	float4 v = ok ? *(const float4 *)(x + t * n + 4 * g) : make_float4(0.f, 0.f, 0.f, 0.f);

	ntx_q8_store4(v, qs + t * n, ds + t * (n / 32), g, ok);
}

int ntx_cuda_quantize_q8(const float *x, void *xq, int64_t n, int n_tok, ntx_stream_t s,
			 struct ntx_err *err)
{
	int64_t total;

	if (n <= 0 || n % 32)
		return ntx_err_set(err, NTX_EINVAL, "quantize_q8: n = %lld is not a positive multiple of 32",
				   (long long)n);
	if (n_tok <= 0)
		return ntx_err_set(err, NTX_EINVAL, "quantize_q8: n_tok = %d", n_tok);
	if (!x || !xq || !ntx_cu_aligned(x, 16) || !ntx_cu_aligned(xq, 16))
		return ntx_err_set(err, NTX_EINVAL, "quantize_q8: buffers must be non-NULL and 16-byte aligned");
	total = n * n_tok / 4;
	ntx_q8_quantize_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)s>>>(
		x, (int8_t *)xq, (float2 *)((char *)xq + ntx_cuda_q8_qs_bytes(n, n_tok)), n, total);
	return ntx_cu_launched("quantize_q8", err);
}

/* ---- the staged GEMV ---- */

#define GV_E 1024 /* elements of each row per stage */

/* Shared-memory bytes per row and stage: the stage's bytes plus the worst
 * case of aligning both ends to 16, rounded to 16. */
template <int T> __host__ __device__ constexpr int gv_srow()
{
	return (GV_E / ntx_qt<T>::BS * ntx_qt<T>::BB + 30 + 15) / 16 * 16;
}

template <int T, int NT, int RH, int NM, int ST>
__global__ void __launch_bounds__(GV_WARPS * 32) ntx_gemv_q8_kernel(gv_args a)
{
	constexpr int R = RH * NM, SB = gv_srow<T>();
	constexpr int BS = ntx_qt<T>::BS, BB = ntx_qt<T>::BB, UPB = ntx_qt<T>::UPB;
	constexpr int HALF = gv_pow2(RH * NT), V = HALF * NM;
	extern __shared__ __align__(16) uint8_t gv_smem[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int row0 = (blockIdx.x * GV_WARPS + warp) * RH;

	if (row0 >= a.n_out)
		return;

	uint8_t *ring = gv_smem + warp * (ST * R * SB);
	const uint8_t *rp[R];
	float acc[V];
	const int n_st = (a.n_in + GV_E - 1) / GV_E;

#pragma unroll
	for (int r = 0; r < R; r++) {
		int ri = min(row0 + r % RH, a.n_out - 1); /* rows past the end: recompute the last */

		rp[r] = (r < RH ? a.w0 : a.w1) + (uint64_t)ri * a.row_bytes;
	}
#pragma unroll
	for (int i = 0; i < V; i++)
		acc[i] = 0.0f;

	/* Copy stage s into ring slot s % ST (always commits a group, possibly
	 * empty, so that wait_group counts stay uniform). */
	auto issue = [&](int s) {
		if (s < n_st) {
			const int k0 = s * GV_E, k1 = min(k0 + GV_E, a.n_in);
			const uint64_t b0 = (uint64_t)(k0 / BS) * BB, b1 = (uint64_t)(k1 / BS) * BB;
			uint8_t *dst = ring + (s % ST) * (R * SB);

#pragma unroll
			for (int r = 0; r < R; r++) {
				uintptr_t lo = (uintptr_t)(rp[r] + b0) & ~(uintptr_t)15;
				uintptr_t hi = ((uintptr_t)(rp[r] + b1) + 15) & ~(uintptr_t)15;
				int n16 = (int)((hi - lo) >> 4);

				for (int c = lane; c < n16; c += 32)
					ntx_cp_async16(dst + r * SB + 16 * c, (const void *)(lo + 16 * c));
			}
		}
		ntx_cp_async_commit();
	};

#pragma unroll
	for (int s = 0; s < ST - 1; s++)
		issue(s);

	for (int s = 0; s < n_st; s++) {
		ntx_cp_async_wait<ST - 2>();
		__syncwarp();
		/* the slot refilled here was last read in iteration s - 1 */
		issue(s + ST - 1);

		const int k0 = s * GV_E;
		const int nu = min(GV_E, a.n_in - k0) / 32;

		if (lane < nu) {
			const uint8_t *slot = ring + (s % ST) * (R * SB);
			const uint64_t b0 = (uint64_t)(k0 / BS) * BB;
			const int bl = lane / UPB, u = lane % UPB;
			const int64_t ug = (int64_t)(k0 / 32) + lane;
			ntx_wu wu[R];

#pragma unroll
			for (int r = 0; r < R; r++) {
				const uint8_t *p = slot + r * SB + ((uintptr_t)(rp[r] + b0) & 15) + bl * BB;

				ntx_unit_decode<T>(p, u, wu[r]);
			}
#pragma unroll
			for (int t = 0; t < NT; t++) {
				if (t < a.n_tok) {
					const uint4 *xp = (const uint4 *)(a.xqs + (int64_t)t * a.n_in) + 2 * ug;
					const uint4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
					const float2 ds = __ldg(a.xds + (int64_t)t * (a.n_in / 32) + ug);
					const uint32_t xw[8] = { x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w };

#pragma unroll
					for (int r = 0; r < R; r++)
						acc[(r / RH) * HALF + (r % RH) * NT + t] +=
							ntx_unit_dot(wu[r], xw, ds.x, ds.y);
				}
			}
		}
	}
	gv_epilogue<NT, RH, NM>(acc, lane, row0, a);
}

template <int T, int NT, int RH, int NM>
static int gv_launch(const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	constexpr int R = RH * NM, ST = R <= 2 ? 4 : 3;
	static int attr_done;
	auto kern = ntx_gemv_q8_kernel<T, NT, RH, NM, ST>;
	const size_t smem = (size_t)GV_WARPS * ST * R * gv_srow<T>();
	const int rows = GV_WARPS * RH;

	if (!attr_done) {
		if (ntx_cu_smem(kern, smem, "gemv_q8: cudaFuncSetAttribute", err))
			return -1;
		/* many small rings per SM: ask for the largest shared carveout */
		cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
				     cudaSharedmemCarveoutMaxShared);
		cudaGetLastError();
		attr_done = 1;
	}
	kern<<<(unsigned)((a.n_out + rows - 1) / rows), GV_WARPS * 32, smem, s>>>(a);
	return ntx_cu_launched(NM == 2 ? "gemv_swiglu_q8" : "gemv_q8", err);
}

/* Rows per warp: 2 for one or two tokens (more warps, more loads in flight),
 * 4 for more tokens (each activation load serves more rows). */
template <int T, int NM> static int gv_nt(const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	if (a.n_tok <= 1)
		return gv_launch<T, 1, 2 / NM, NM>(a, s, err);
	if (a.n_tok <= 2)
		return gv_launch<T, 2, 2 / NM, NM>(a, s, err);
	if (a.n_tok <= 4)
		return gv_launch<T, 4, 4 / NM, NM>(a, s, err);
	return gv_launch<T, 8, 4 / NM, NM>(a, s, err);
}

template <int T> static int gv_nm(int nm, const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	return nm == 2 ? gv_nt<T, 2>(a, s, err) : gv_nt<T, 1>(a, s, err);
}

int ntx_gv_q8(uint32_t type, int nm, const gv_args &a, cudaStream_t s, struct ntx_err *err)
{
	switch (type) {
	case NTX_TYPE_Q4_0: return gv_nm<NTX_TYPE_Q4_0>(nm, a, s, err);
	case NTX_TYPE_Q8_0: return gv_nm<NTX_TYPE_Q8_0>(nm, a, s, err);
	case NTX_TYPE_Q4_K: return gv_nm<NTX_TYPE_Q4_K>(nm, a, s, err);
	case NTX_TYPE_Q5_K: return gv_nm<NTX_TYPE_Q5_K>(nm, a, s, err);
	case NTX_TYPE_Q6_K: return gv_nm<NTX_TYPE_Q6_K>(nm, a, s, err);
	default:
		return ntx_err_set(err, NTX_EUNSUP, "gemv: type %s has no q8 kernel", ntx_type_name(type));
	}
}
