/* moe.cu - mixture-of-experts helpers: the router's logits, the gather of
 * the rows routed to an expert, and the weighted sum of each token's
 * experts in slot order (batch-invariant: a token's result never depends
 * on which other tokens share the launch or on how rows were grouped). */
#include "common.cuh"

#define MOE_THREADS 256

/* Grid: one CTA per token; warp w of the CTA takes experts w, w + 8, ... */
__global__ void __launch_bounds__(MOE_THREADS)
	ntx_moe_router_kernel(const float *w, const float *x, float *logits, int64_t n_in,
			      int n_expert)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const float *xr = x + (int64_t)t * n_in;

	for (int e = warp; e < n_expert; e += MOE_THREADS / 32) {
		const float *wr = w + (int64_t)e * n_in;
		float s = 0.0f;

		for (int64_t i = lane; i < n_in; i += 32)
			s = __fadd_rn(s, __fmul_rn(wr[i], xr[i]));
		s = ntx_warp_sum(s);
		if (lane == 0)
			logits[(int64_t)t * n_expert + e] = s;
	}
}

extern "C" int ntx_cuda_moe_router(const float *w, const float *x, float *logits, int64_t n_in,
				   int n_expert, int n_tok, ntx_stream_t s, struct ntx_err *err)
{
	if (!w || !x || !logits || n_in < 1 || n_expert < 1 || n_tok < 1)
		return ntx_err_set(err, NTX_EINVAL, "moe_router: n_in = %lld, n_expert = %d, n_tok = %d, "
				   "NULL buffer", (long long)n_in, n_expert, n_tok);
	return ntx_cu_launched("moe_router",
			       ntx_launch(ntx_moe_router_kernel, (unsigned)n_tok, MOE_THREADS, 0,
					  (cudaStream_t)s, w, x, logits, n_in, n_expert),
			       err);
}

/* Grid (row, slice of the row). */
__global__ void ntx_gather_rows_kernel(const float *x, const int32_t *idx, float *out, int64_t dim)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	const int j = blockIdx.x;
	const float *src = x + (int64_t)idx[j] * dim;
	float *dst = out + (int64_t)j * dim;

	for (int64_t i = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; i < dim;
	     i += (int64_t)gridDim.y * blockDim.x)
		dst[i] = src[i];
}

static unsigned row_slices(int64_t dim)
{
	int64_t b = (dim + MOE_THREADS - 1) / MOE_THREADS;

	return (unsigned)(b < 1 ? 1 : b > 64 ? 64 : b);
}

extern "C" int ntx_cuda_gather_rows(const float *x, const int32_t *idx, float *out, int n_rows,
				    int64_t dim, ntx_stream_t s, struct ntx_err *err)
{
	if (n_rows < 0 || dim < 1 || (n_rows && (!x || !idx || !out)))
		return ntx_err_set(err, NTX_EINVAL, "gather_rows: n_rows = %d, dim = %lld, NULL buffer",
				   n_rows, (long long)dim);
	if (!n_rows)
		return 0;
	return ntx_cu_launched("gather_rows",
			       ntx_launch(ntx_gather_rows_kernel, dim3((unsigned)n_rows, row_slices(dim)),
					  MOE_THREADS, 0, (cudaStream_t)s, x, idx, out, dim),
			       err);
}

__global__ void ntx_moe_sum_kernel(float *x, const float *y, const float *w, const int32_t *src,
				   int k, int64_t dim)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	const int t = blockIdx.x;
	float *xr = x + (int64_t)t * dim;

	for (int64_t i = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; i < dim;
	     i += (int64_t)gridDim.y * blockDim.x) {
		float acc = __fmul_rn(w[(int64_t)t * k], y[(int64_t)src[(int64_t)t * k] * dim + i]);

		for (int s = 1; s < k; s++)
			acc = __fadd_rn(acc, __fmul_rn(w[(int64_t)t * k + s],
						       y[(int64_t)src[(int64_t)t * k + s] * dim + i]));
		xr[i] = __fadd_rn(xr[i], acc);
	}
}

extern "C" int ntx_cuda_moe_sum(float *x, const float *y, const float *w, const int32_t *src,
				int n_tok, int k, int64_t dim, ntx_stream_t s, struct ntx_err *err)
{
	if (n_tok < 0 || k < 1 || dim < 1 || (n_tok && (!x || !y || !w || !src)))
		return ntx_err_set(err, NTX_EINVAL, "moe_sum: n_tok = %d, k = %d, dim = %lld, NULL buffer",
				   n_tok, k, (long long)dim);
	if (!n_tok)
		return 0;
	return ntx_cu_launched("moe_sum",
			       ntx_launch(ntx_moe_sum_kernel, dim3((unsigned)n_tok, row_slices(dim)),
					  MOE_THREADS, 0, (cudaStream_t)s, x, y, w, src, k, dim),
			       err);
}
