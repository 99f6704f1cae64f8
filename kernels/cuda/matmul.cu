/* matmul.cu - prompt-processing matrix products (any n_tok):
 * y[t][r] (+)= W[r] . x[t] on the tensor cores.
 *
 * Activations are converted to F16 once per call into the workspace; W is
 * used as is when F16 (or F32, through an exact SGEMM), else dequantized in
 * tiles of rows to F16 in the workspace (one pass, thread per 32 elements,
 * the same decode as the GEMV, blockmath.cuh). Each tile is then one
 * cublasGemmEx (F16 in, F32 compute and out; beta = 1 accumulates into y)
 * when libcublas.so.13 can be loaded at run time, else our own WMMA kernel
 * (64 tokens x 128 rows per CTA, 8 warps of 32x32, K step 32, cp.async
 * double buffering). cuBLAS is loaded with dlopen so that binaries need no
 * CUDA install: the switch cublas (NTX_CUBLAS=path) first, then
 * libcublas.so.13, then /usr/local/cuda/lib64/libcublas.so.13; no_cublas
 * (NTX_NO_CUBLAS=1) disables it. The switches are those of the first use
 * (ntx_cuda_tunables_set). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h> /* types and prototypes only: nothing links against it */
#include <mma.h>

#include "common.cuh"

/* Largest weight tile dequantized at once (elements): 128 MB of F16, so an
 * 8B model's FFN matrices are one tile and big GEMMs keep the GPU busy. */
#define MM_TILE_ELEMS ((int64_t)64 << 20)

/* ---- cuBLAS, loaded at run time ---- */

static struct {
	int state; /* 0 = not tried, 1 = loaded, -1 = unavailable */
	void *lib;
	cublasHandle_t h;
	decltype(&cublasCreate_v2) create;
	decltype(&cublasSetStream_v2) set_stream;
	cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
				  const void *, const void *, cudaDataType, int, const void *,
				  cudaDataType, int, const void *, void *, cudaDataType, int,
				  cublasComputeType_t, cublasGemmAlgo_t);
} cb;
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;

static void cb_try_load(void)
{
	static char path[NTX_TUNABLES_PATH_MAX]; /* under cb_mu */
	const char *cand[3] = { path, "libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13" };

	cb.state = -1;
	if (ntx_cu_knob(NTX_CU_NO_CUBLAS))
		return;
	ntx_cu_cublas_path(path, sizeof path);
	if (!*path)
		cand[0] = NULL;
	for (int i = 0; i < 3 && !cb.lib; i++)
		if (cand[i])
			cb.lib = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
	if (!cb.lib)
		return;
	cb.create = (decltype(cb.create))dlsym(cb.lib, "cublasCreate_v2");
	cb.set_stream = (decltype(cb.set_stream))dlsym(cb.lib, "cublasSetStream_v2");
	cb.gemm_ex = (decltype(cb.gemm_ex))dlsym(cb.lib, "cublasGemmEx");
	if (!cb.create || !cb.set_stream || !cb.gemm_ex || cb.create(&cb.h) != CUBLAS_STATUS_SUCCESS) {
		dlclose(cb.lib);
		cb.lib = NULL;
		return;
	}
	cb.state = 1;
}

extern "C" int ntx_cuda_have_cublas(void)
{
	pthread_mutex_lock(&cb_mu);
	if (!cb.state)
		cb_try_load();
	pthread_mutex_unlock(&cb_mu);
	return cb.state > 0;
}

/* C (m x n, col-major, ldc) (+)= A^T B with A (k x m, lda), B (k x n, ldb). */
static int cb_gemm(cudaStream_t s, int m, int n, int k, const void *A, cudaDataType ta, int lda,
		   const void *B, cudaDataType tb, int ldb, float *C, int ldc, float beta,
		   struct ntx_err *err)
{
	const float alpha = 1.0f;
	cublasStatus_t st;

	pthread_mutex_lock(&cb_mu);
	st = cb.set_stream(cb.h, s);
	if (st == CUBLAS_STATUS_SUCCESS)
		st = cb.gemm_ex(cb.h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, A, ta, lda, B, tb, ldb,
				&beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	pthread_mutex_unlock(&cb_mu);
	if (st != CUBLAS_STATUS_SUCCESS)
		return ntx_err_set(err, NTX_EDEVICE, "cuda: cublasGemmEx(%d x %d x %d) failed: status %d",
				   m, n, k, (int)st);
	return 0;
}

/* ---- conversion kernels ---- */

__global__ void ntx_f32_to_f16_kernel(const float *x, __half *y, int64_t n4)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
	     i += (int64_t)gridDim.x * blockDim.x) {
		float4 v = ((const float4 *)x)[i];
		__half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
		uint2 o;

		o.x = *(uint32_t *)&a;
		o.y = *(uint32_t *)&b;
		((uint2 *)y)[i] = o;
	}
}

/* Quantized rows (GGUF or split, nb blocks each) -> F16: one thread per
 * unit of 32 elements, n_units in all (rows are contiguous, so unit i of the
 * tile is unit i of the rows). */
template <int T>
__global__ void ntx_dequant_f16_kernel(const uint8_t *w, __half *y, int64_t n_units, int64_t nb)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_units;
	     i += (int64_t)gridDim.x * blockDim.x) {
		ntx_wu wu;
		uint4 o[4];
		uint32_t *ow = (uint32_t *)o;

		ntx_unit_at<T>(w, nb, i, wu);
#pragma unroll
		for (int e = 0; e < 32; e += 2) {
			__half2 h = __floats2half2_rn(ntx_unit_value<T & ~NTX_SPLIT>(wu, e),
						      ntx_unit_value<T & ~NTX_SPLIT>(wu, e + 1));

			ow[e / 2] = *(uint32_t *)&h;
		}
#pragma unroll
		for (int k = 0; k < 4; k++)
			((uint4 *)(y + 32 * i))[k] = o[k];
	}
}

/* F32 / BF16 rows -> F16, 8 elements per thread. */
template <int T> __global__ void ntx_float_to_f16_kernel(const uint8_t *w, __half *y, int64_t n8)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
	     i += (int64_t)gridDim.x * blockDim.x) {
		float f[8];
		uint4 o;
		uint32_t *ow = (uint32_t *)&o;

		if constexpr (T == NTX_TYPE_F32) {
			const float4 *p = (const float4 *)w + 2 * i;
			float4 a = p[0], b = p[1];

			f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
			f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
		} else {
			uint4 v = ((const uint4 *)w)[i];
			const uint32_t q[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
			for (int k = 0; k < 4; k++) {
				f[2 * k] = __uint_as_float(q[k] << 16);
				f[2 * k + 1] = __uint_as_float(q[k] & 0xFFFF0000u);
			}
		}
#pragma unroll
		for (int k = 0; k < 4; k++) {
			__half2 h = __floats2half2_rn(f[2 * k], f[2 * k + 1]);

			ow[k] = *(uint32_t *)&h;
		}
		((uint4 *)y)[i] = o;
	}
}

static unsigned mm_grid(int64_t n, int threads)
{
	int64_t b = (n + threads - 1) / threads;

	return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

/* Rows [r0, r0 + nr) of W (type t, row_bytes rb) to F16 at y. */
static int mm_to_f16(uint32_t t, const uint8_t *w, uint64_t rb, int64_t n_in, int64_t r0,
		     int64_t nr, __half *y, cudaStream_t s, struct ntx_err *err)
{
	const uint8_t *p = w + (uint64_t)r0 * rb;
	int64_t nu = nr * (n_in / 32), n8 = nr * n_in / 8, nb = n_in / ntx_cu_type_bs(t);
	cudaError_t e;

	switch (t) {
	case NTX_TYPE_F32: e = ntx_launch(ntx_float_to_f16_kernel<NTX_TYPE_F32>, mm_grid(n8, 256), 256, 0, s, p, y, n8); break;
	case NTX_TYPE_BF16: e = ntx_launch(ntx_float_to_f16_kernel<NTX_TYPE_BF16>, mm_grid(n8, 256), 256, 0, s, p, y, n8); break;
	case NTX_TYPE_Q4_0: e = ntx_launch(ntx_dequant_f16_kernel<NTX_TYPE_Q4_0>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_TYPE_Q5_0: e = ntx_launch(ntx_dequant_f16_kernel<NTX_TYPE_Q5_0>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_TYPE_Q8_0: e = ntx_launch(ntx_dequant_f16_kernel<NTX_TYPE_Q8_0>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_TYPE_Q4_K: e = ntx_launch(ntx_dequant_f16_kernel<NTX_TYPE_Q4_K>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_TYPE_Q5_K: e = ntx_launch(ntx_dequant_f16_kernel<NTX_TYPE_Q5_K>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_TYPE_Q6_K: e = ntx_launch(ntx_dequant_f16_kernel<NTX_TYPE_Q6_K>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_SPLIT | NTX_TYPE_Q4_0: e = ntx_launch(ntx_dequant_f16_kernel<NTX_SPLIT | NTX_TYPE_Q4_0>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_SPLIT | NTX_TYPE_Q8_0: e = ntx_launch(ntx_dequant_f16_kernel<NTX_SPLIT | NTX_TYPE_Q8_0>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	case NTX_SPLIT | NTX_TYPE_Q6_K: e = ntx_launch(ntx_dequant_f16_kernel<NTX_SPLIT | NTX_TYPE_Q6_K>, mm_grid(nu, 256), 256, 0, s, p, y, nu, nb); break;
	default: return ntx_err_set(err, NTX_EUNSUP, "matmul: type %s", ntx_cu_type_name(t));
	}
	return ntx_cu_launched("matmul: dequantize to F16", e, err);
}

/* ---- our own tensor-core GEMM (used without cuBLAS) ----
 * Y[m][n] (+)= sum_k X[m][k] W[n][k]; X (M x K) and W (N x K) row-major
 * F16, K a multiple of 8; Y row-major with leading dimension ldy. */

#define MW_BM 64
#define MW_BN 128
#define MW_BK 32
#define MW_LD (MW_BK + 8) /* halves; rows 80 bytes apart: no bank conflicts */
#define MW_LDC (MW_BN + 4)

struct mw_smem_ab {
	__half a[2][MW_BM][MW_LD];
	__half b[2][MW_BN][MW_LD];
};
union mw_smem {
	mw_smem_ab ab;
	float c[MW_BM][MW_LDC];
};

__global__ void __launch_bounds__(256) ntx_mm_wmma_kernel(const __half *X, const __half *W, float *Y,
							  int M, int N, int K, int ldy, int acc)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	using namespace nvcuda;
	__shared__ __align__(128) mw_smem sm;
	const int tid = threadIdx.x, warp = tid >> 5;
	const int wm = warp >> 2, wn = warp & 3; /* 2 x 4 warps of 32 x 32 */
	const int m0 = blockIdx.y * MW_BM, n0 = blockIdx.x * MW_BN;
	const int nk = (K + MW_BK - 1) / MW_BK;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[2][2];

#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 2; j++)
			wmma::fill_fragment(c[i][j], 0.0f);

	auto load = [&](int kt, int buf) {
		const int k0 = kt * MW_BK;

		/* A: 64 rows x 4 chunks of 8 halves = 256 chunks; B: 512 chunks */
		for (int i = tid; i < (MW_BM + MW_BN) * 4; i += 256) {
			const bool isa = i < MW_BM * 4;
			const int j = isa ? i : i - MW_BM * 4;
			const int r = j >> 2, kc = (j & 3) * 8;
			const int gr = (isa ? m0 : n0) + r, lim = isa ? M : N;
			const bool ok = gr < lim && k0 + kc < K;
			const __half *src = isa ? X : W;
			__half *dst = isa ? &sm.ab.a[buf][r][kc] : &sm.ab.b[buf][r][kc];

			src = ok ? src + (int64_t)gr * K + k0 + kc : src;
			ntx_cp_async16_z(dst, src, ok ? 16 : 0);
		}
		ntx_cp_async_commit();
	};

	load(0, 0);
	for (int kt = 0; kt < nk; kt++) {
		const int buf = kt & 1;

		if (kt + 1 < nk) {
			load(kt + 1, buf ^ 1);
			ntx_cp_async_wait<1>();
		} else {
			ntx_cp_async_wait<0>();
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < MW_BK; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];

#pragma unroll
			for (int i = 0; i < 2; i++)
				wmma::load_matrix_sync(a[i], &sm.ab.a[buf][wm * 32 + i * 16][kk], MW_LD);
#pragma unroll
			for (int j = 0; j < 2; j++)
				wmma::load_matrix_sync(b[j], &sm.ab.b[buf][wn * 32 + j * 16][kk], MW_LD);
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < 2; j++)
					wmma::mma_sync(c[i][j], a[i], b[j], c[i][j]);
		}
		__syncthreads(); /* the buffer is refilled next iteration */
	}
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 2; j++)
			wmma::store_matrix_sync(&sm.c[wm * 32 + i * 16][wn * 32 + j * 16], c[i][j], MW_LDC,
						wmma::mem_row_major);
	__syncthreads();
	for (int i = tid; i < MW_BM * MW_BN; i += 256) {
		const int r = i / MW_BN, cc = i % MW_BN;
		const int gm = m0 + r, gn = n0 + cc;

		if (gm < M && gn < N) {
			float *yp = Y + (int64_t)gm * ldy + gn;

			*yp = acc ? *yp + sm.c[r][cc] : sm.c[r][cc];
		}
	}
}

/* ---- entry points ---- */

static int64_t mm_tile_rows(int64_t n_in, int64_t n_out)
{
	int64_t r = MM_TILE_ELEMS / n_in;

	if (r >= n_out)
		return n_out;
	r = r / 128 * 128;
	return r < 128 ? (n_out < 128 ? n_out : 128) : r;
}

static size_t al256(size_t b)
{
	return (b + 255) & ~(size_t)255;
}

/* Each segment's F16 activations start on a 256-byte boundary, so a
 * segment's cuBLAS call sees the same alignment whether it runs alone or
 * among others: n_tok * 256 bytes of slack cover any split. */
extern "C" size_t ntx_cuda_matmul_ws_bytes(int64_t n_in, int64_t n_out, int n_tok)
{
	if (n_in <= 0 || n_out <= 0 || n_tok <= 0)
		return 0;
	return al256((size_t)n_tok * (size_t)n_in * 2) + (size_t)n_tok * 256 +
	       al256((size_t)mm_tile_rows(n_in, n_out) * (size_t)n_in * 2);
}

extern "C" int ntx_cuda_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
			       const float *x, float *y, int n_tok, int accumulate, void *ws,
			       size_t ws_bytes, ntx_stream_t st, struct ntx_err *err)
{
	const int off = 0;

	return ntx_cuda_matmul_segs(wtype, w, n_in, n_out, x, y, &off, &n_tok, 1, n_tok, accumulate,
				    ws, ws_bytes, st, err);
}

extern "C" int ntx_cuda_matmul_segs(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
				    const float *x, float *y, const int *seg_off, const int *seg_len,
				    int n_seg, int n_rows, int accumulate, void *ws, size_t ws_bytes,
				    ntx_stream_t st, struct ntx_err *err)
{
	cudaStream_t s = (cudaStream_t)st;
	const uint64_t rb = ntx_cu_row_bytes(wtype, n_in);
	const int use_cb = ntx_cuda_have_cublas();
	const int64_t tr = n_out > 0 && n_in > 0 ? mm_tile_rows(n_in, n_out) : 0;
	const size_t need = ntx_cuda_matmul_ws_bytes(n_in, n_out, n_rows);
	size_t xh_off[NTX_CUDA_MM_MAX_SEGS + 1];
	int64_t sum = 0;
	__half *wt;

	if (ntx_cu_check_w("matmul", wtype, w, n_in, ntx_cuda_wtype_q8(wtype) == 1 ? 1 : 16, err))
		return -1;
	if (n_in % 8 || n_in > INT32_MAX / 2)
		return ntx_err_set(err, NTX_EINVAL, "matmul: n_in = %lld is not a multiple of 8",
				   (long long)n_in);
	if (n_out < 1 || n_out > INT32_MAX / 2 || n_rows < 1 || n_rows > INT32_MAX / 2)
		return ntx_err_set(err, NTX_EINVAL, "matmul: bad shape n_out = %lld, n_tok = %d",
				   (long long)n_out, n_rows);
	if (n_seg < 1 || n_seg > NTX_CUDA_MM_MAX_SEGS || !seg_off || !seg_len)
		return ntx_err_set(err, NTX_EINVAL, "matmul: %d segments (1 to %d)", n_seg,
				   NTX_CUDA_MM_MAX_SEGS);
	xh_off[0] = 0;
	for (int i = 0; i < n_seg; i++) {
		if (seg_len[i] < 1 || seg_off[i] < 0 || seg_off[i] > n_rows - seg_len[i])
			return ntx_err_set(err, NTX_EINVAL,
					   "matmul: segment %d (rows %d + %d) is outside the %d rows", i,
					   seg_off[i], seg_len[i], n_rows);
		xh_off[i + 1] = xh_off[i] + al256((size_t)seg_len[i] * (size_t)n_in * 2);
		sum += seg_len[i];
	}
	if (sum > n_rows)
		return ntx_err_set(err, NTX_EINVAL, "matmul: the segments hold %lld of %d rows",
				   (long long)sum, n_rows);
	if (!x || !y || !ntx_cu_aligned(x, 16))
		return ntx_err_set(err, NTX_EINVAL, "matmul: x must be non-NULL and 16-byte aligned");
	if (!ws || ws_bytes < need || !ntx_cu_aligned(ws, 256))
		return ntx_err_set(err, NTX_EINVAL,
				   "matmul: workspace of %zu bytes at %p; need %zu, 256-byte aligned",
				   ws_bytes, ws, need);
	wt = (__half *)((char *)ws + need - al256((size_t)tr * (size_t)n_in * 2));

	if (wtype == NTX_TYPE_F32 && use_cb) { /* exact SGEMM on the original data */
		for (int i = 0; i < n_seg; i++) {
			const int64_t o = seg_off[i];

			if (cb_gemm(s, (int)n_out, seg_len[i], (int)n_in, w, CUDA_R_32F, (int)n_in,
				    x + o * n_in, CUDA_R_32F, (int)n_in, y + o * n_out, (int)n_out,
				    accumulate ? 1.0f : 0.0f, err))
				return -1;
		}
		return 0;
	}
	for (int i = 0; i < n_seg; i++) {
		const int64_t n4 = (int64_t)seg_len[i] * n_in / 4;

		if (ntx_cu_launched("matmul: activations to F16",
				    ntx_launch(ntx_f32_to_f16_kernel, mm_grid(n4, 256), 256, 0, s,
					       x + (int64_t)seg_off[i] * n_in,
					       (__half *)((char *)ws + xh_off[i]), n4),
				    err))
			return -1;
	}
	/* each weight tile is dequantized once and serves every segment */
	for (int64_t r0 = 0; r0 < n_out; r0 += tr) {
		const int64_t nr = n_out - r0 < tr ? n_out - r0 : tr;
		const __half *a = wt;

		if (wtype == NTX_TYPE_F16)
			a = (const __half *)((const uint8_t *)w + (uint64_t)r0 * rb);
		else if (mm_to_f16(wtype, (const uint8_t *)w, rb, n_in, r0, nr, wt, s, err))
			return -1;
		for (int i = 0; i < n_seg; i++) {
			const __half *xh = (const __half *)((const char *)ws + xh_off[i]);
			float *yo = y + (int64_t)seg_off[i] * n_out + r0;
			const int nt = seg_len[i];

			if (use_cb) {
				if (cb_gemm(s, (int)nr, nt, (int)n_in, a, CUDA_R_16F, (int)n_in, xh,
					    CUDA_R_16F, (int)n_in, yo, (int)n_out,
					    accumulate ? 1.0f : 0.0f, err))
					return -1;
				continue;
			}
			dim3 grid((unsigned)((nr + MW_BN - 1) / MW_BN), (unsigned)((nt + MW_BM - 1) / MW_BM));

			if (grid.y > 65535)
				return ntx_err_set(err, NTX_EINVAL, "matmul: n_tok = %d too large", nt);
			if (ntx_cu_launched("matmul: wmma",
					    ntx_launch(ntx_mm_wmma_kernel, grid, 256, 0, s, xh, a, yo, nt,
						       (int)nr, (int)n_in, (int)n_out, accumulate),
					    err))
				return -1;
		}
	}
	return 0;
}
