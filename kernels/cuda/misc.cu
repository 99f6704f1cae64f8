/* misc.cu - dequantization to F32, embedding lookup, element-wise SwiGLU and
 * add, argmax, and the cosine statistics of layer-skip calibration. */
#include "common.cuh"

/* ---- dequantization ---- */

/* Element block [i] of a row (nb blocks): 32 elements of a quantized type
 * (one unit), or 8 of a float type, written as floats to y. */
template <int T>
__device__ __forceinline__ void dq_unit(const uint8_t *row, int64_t nb, int64_t i, float *y)
{
	if constexpr (T == NTX_TYPE_F32 || T == NTX_TYPE_F16 || T == NTX_TYPE_BF16) {
		float f[8];

		(void)nb;
		if constexpr (T == NTX_TYPE_F32) {
			const float *p = (const float *)row + 8 * i;

#pragma unroll
			for (int k = 0; k < 8; k++)
				f[k] = p[k];
		} else {
			const uint16_t *p = (const uint16_t *)row + 8 * i;

#pragma unroll
			for (int k = 0; k < 8; k++)
				f[k] = T == NTX_TYPE_F16 ? ntx_h2f(p[k]) : __uint_as_float((uint32_t)p[k] << 16);
		}
#pragma unroll
		for (int k = 0; k < 8; k++)
			y[8 * i + k] = f[k];
	} else {
		ntx_wu wu;

		ntx_unit_at<T>(row, nb, i, wu);
#pragma unroll
		for (int e = 0; e < 32; e++)
			y[32 * i + e] = ntx_unit_value<T & ~NTX_SPLIT>(wu, e);
	}
}

template <int T> constexpr int dq_epu(void)
{
	return T == NTX_TYPE_F32 || T == NTX_TYPE_F16 || T == NTX_TYPE_BF16 ? 8 : 32;
}

/* Rows: blockIdx.y; row r at src + row_bytes * (tok ? tok[r] : r). */
template <int T>
__global__ void ntx_dequant_kernel(const uint8_t *src, uint64_t row_bytes, const int32_t *tok,
				   int64_t units, float *dst, int64_t n, int64_t nb)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	const int r = blockIdx.y;
	const uint8_t *row = src + row_bytes * (uint64_t)(tok ? tok[r] : r);

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < units;
	     i += (int64_t)gridDim.x * blockDim.x)
		dq_unit<T>(row, nb, i, dst + (int64_t)r * n);
}

static int dq_launch(const char *fn, uint32_t type, const void *src, uint64_t row_bytes,
		     const int32_t *tok, int64_t n, int n_rows, float *dst, cudaStream_t s,
		     struct ntx_err *err)
{
	int epu = ntx_cu_type_bs(type) == 1 ? 8 : 32;
	int64_t nb = n / ntx_cu_type_bs(type);
	int64_t units = n / epu, bx = (units + 255) / 256;
	dim3 grid((unsigned)(bx > 4096 ? 4096 : bx < 1 ? 1 : bx), (unsigned)n_rows);
	const uint8_t *p = (const uint8_t *)src;
	cudaError_t e;

	switch (type) {
	case NTX_TYPE_F32: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_F32>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_F16: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_F16>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_BF16: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_BF16>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_Q4_0: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_Q4_0>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_Q5_0: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_Q5_0>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_Q8_0: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_Q8_0>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_Q4_K: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_Q4_K>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_Q5_K: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_Q5_K>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_TYPE_Q6_K: e = ntx_launch(ntx_dequant_kernel<NTX_TYPE_Q6_K>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_SPLIT | NTX_TYPE_Q4_0: e = ntx_launch(ntx_dequant_kernel<NTX_SPLIT | NTX_TYPE_Q4_0>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_SPLIT | NTX_TYPE_Q8_0: e = ntx_launch(ntx_dequant_kernel<NTX_SPLIT | NTX_TYPE_Q8_0>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	case NTX_SPLIT | NTX_TYPE_Q6_K: e = ntx_launch(ntx_dequant_kernel<NTX_SPLIT | NTX_TYPE_Q6_K>, grid, 256, 0, s, p, row_bytes, tok, units, dst, n, nb); break;
	default: return ntx_err_set(err, NTX_EUNSUP, "%s: type %s", fn, ntx_cu_type_name(type));
	}
	return ntx_cu_launched(fn, e, err);
}

extern "C" int ntx_cuda_dequant_f32(uint32_t type, const void *src, float *dst, int64_t n,
				    ntx_stream_t s, struct ntx_err *err)
{
	int bs = ntx_cu_type_bs(type);

	if (ntx_cu_check_w("dequant_f32", type, src, n, 1, err))
		return -1;
	if (!dst)
		return ntx_err_set(err, NTX_EINVAL, "dequant_f32: NULL output");
	if (bs == 1 && n % 8) /* float types go 8 elements per thread */
		return ntx_err_set(err, NTX_EINVAL, "dequant_f32: n = %lld is not a multiple of 8",
				   (long long)n);
	return dq_launch("dequant_f32", type, src, 0, NULL, n, 1, dst, (cudaStream_t)s, err);
}

extern "C" int ntx_cuda_get_rows(uint32_t type, const void *table, uint64_t row_bytes, int64_t n,
				 const int32_t *tok, int n_tok, float *out, ntx_stream_t s,
				 struct ntx_err *err)
{
	if (ntx_cu_check_w("get_rows", type, table, n, 1, err))
		return -1;
	if (ntx_cu_type_bs(type) == 1 && n % 8)
		return ntx_err_set(err, NTX_EINVAL, "get_rows: n = %lld is not a multiple of 8",
				   (long long)n);
	if (row_bytes < ntx_cu_row_bytes(type, n) || row_bytes % ntx_cu_type_align(type))
		return ntx_err_set(err, NTX_EINVAL, "get_rows: row_bytes %llu for %lld elements of %s",
				   (unsigned long long)row_bytes, (long long)n, ntx_cu_type_name(type));
	if (n_tok < 1 || n_tok > 65535 || !tok || !out)
		return ntx_err_set(err, NTX_EINVAL, "get_rows: n_tok = %d (1..65535), tok and out non-NULL",
				   n_tok);
	return dq_launch("get_rows", type, table, row_bytes, tok, n, n_tok, out, (cudaStream_t)s, err);
}

/* ---- element-wise ---- */

__global__ void ntx_swiglu_kernel(float *out, const float *g, const float *u, int64_t n)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		out[i] = ntx_silu_mul(g[i], u[i]);
}

__global__ void ntx_add_kernel(float *x, const float *y, int64_t n)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		x[i] += y[i];
}

/* x[r][i] += b[i] over rows of dim (a bias on every row) */
__global__ void ntx_add_rows_kernel(float *x, const float *b, int64_t dim, int64_t n)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		x[i] += b[i % dim];
}

static unsigned ew_grid(int64_t n)
{
	int64_t b = (n + 255) / 256;

	return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

extern "C" int ntx_cuda_swiglu(float *out, const float *g, const float *u, int64_t n, ntx_stream_t s,
			       struct ntx_err *err)
{
	if (n < 0 || (n && (!out || !g || !u)))
		return ntx_err_set(err, NTX_EINVAL, "swiglu: n = %lld, NULL buffer", (long long)n);
	if (!n)
		return 0;
	return ntx_cu_launched("swiglu",
			       ntx_launch(ntx_swiglu_kernel, ew_grid(n), 256, 0, (cudaStream_t)s, out, g, u, n),
			       err);
}

extern "C" int ntx_cuda_add(float *x, const float *y, int64_t n, ntx_stream_t s, struct ntx_err *err)
{
	if (n < 0 || (n && (!x || !y)))
		return ntx_err_set(err, NTX_EINVAL, "add: n = %lld, NULL buffer", (long long)n);
	if (!n)
		return 0;
	return ntx_cu_launched("add", ntx_launch(ntx_add_kernel, ew_grid(n), 256, 0, (cudaStream_t)s, x, y, n),
			       err);
}

extern "C" int ntx_cuda_add_rows(float *x, const float *b, int n_rows, int64_t dim, ntx_stream_t s,
				 struct ntx_err *err)
{
	int64_t n = (int64_t)n_rows * dim;

	if (n_rows < 0 || dim < 1 || (n && (!x || !b)))
		return ntx_err_set(err, NTX_EINVAL, "add_rows: %d rows of %lld, NULL buffer", n_rows,
				   (long long)dim);
	if (!n)
		return 0;
	return ntx_cu_launched("add_rows",
			       ntx_launch(ntx_add_rows_kernel, ew_grid(n), 256, 0, (cudaStream_t)s, x, b, dim, n),
			       err);
}

/* ---- argmax ---- */

/* Is (v, i) better than (bv, bi)? NaN counts as -inf; lowest index on ties. */
__device__ __forceinline__ bool am_better(float v, int32_t i, float bv, int32_t bi)
{
	if (v != v)
		v = -INFINITY;
	if (bv != bv)
		bv = -INFINITY;
	return v > bv || (v == bv && i < bi);
}

/* CTAs per row: each takes a contiguous slice, leaves its best in the
 * workspace, and the last to finish (ticket counter of the row, reset by
 * it) merges the slices. The result does not depend on the order. */
#define AM_CTAS 32
#define AM_THREADS 256

struct am_part {
	float v;
	int32_t i;
};

__device__ __forceinline__ void am_warp(float &bv, int32_t &bi)
{
	for (int o = 16; o > 0; o >>= 1) {
		float v = __shfl_xor_sync(NTX_FULL_MASK, bv, o);
		int32_t i = __shfl_xor_sync(NTX_FULL_MASK, bi, o);

		if (am_better(v, i, bv, bi))
			bv = v, bi = i;
	}
}

__global__ void __launch_bounds__(AM_THREADS) ntx_argmax_kernel(const float *x, int64_t n,
								int32_t *out, am_part *part,
								unsigned *ticket)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	__shared__ am_part sp[AM_THREADS / 32];
	__shared__ bool last;
	const int r = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const float *row = x + (int64_t)r * n;
	const int32_t chunk = (int32_t)((n + AM_CTAS - 1) / AM_CTAS);
	const int32_t from = (int32_t)blockIdx.x * chunk;
	const int32_t to = (int32_t)(n - from < chunk ? n : from + chunk);
	float bv = -INFINITY;
	int32_t bi = INT32_MAX;

#pragma unroll 4
	for (int32_t i = from + (int32_t)threadIdx.x; i < to; i += AM_THREADS) {
		float v = row[i];

		if (am_better(v, i, bv, bi))
			bv = v, bi = i;
	}
	am_warp(bv, bi);
	if (lane == 0)
		sp[warp] = { bv, bi };
	__syncthreads();
	if (warp == 0) {
		bv = lane < AM_THREADS / 32 ? sp[lane].v : -INFINITY;
		bi = lane < AM_THREADS / 32 ? sp[lane].i : INT32_MAX;
		am_warp(bv, bi);
		if (lane == 0) {
			part[r * AM_CTAS + blockIdx.x] = { bv, bi };
			__threadfence();
			last = atomicAdd(&ticket[r], 1u) == AM_CTAS - 1;
		}
	}
	__syncthreads();
	if (!last || warp)
		return;
	/* the last CTA of the row: every slice's best is visible */
	__threadfence();
	{
		const volatile am_part *vp = part + r * AM_CTAS;

		bv = lane < AM_CTAS ? vp[lane].v : -INFINITY;
		bi = lane < AM_CTAS ? vp[lane].i : INT32_MAX;
	}
	am_warp(bv, bi);
	if (lane == 0) {
		out[r] = bi == INT32_MAX ? 0 : bi;
		__threadfence_system(); /* out may be mapped host memory */
		ticket[r] = 0;
	}
}

/* Rows a workspace of ws_bytes holds: its counters, padded to 16 bytes,
 * then the slices' partials (ntx_cuda_argmax_ws_bytes adds that padding). */
static size_t am_cap(size_t ws_bytes)
{
	return ws_bytes < 16 ? 0 : (ws_bytes - 16) / (AM_CTAS * sizeof(am_part) + sizeof(unsigned));
}

extern "C" size_t ntx_cuda_argmax_ws_bytes(int n_rows)
{
	size_t b = (size_t)(n_rows > 0 ? n_rows : 0) * (AM_CTAS * sizeof(am_part) + sizeof(unsigned));

	return ((b + 15) & ~(size_t)15) + 16; /* + the counters' padding */
}

extern "C" int ntx_cuda_argmax(const float *x, int64_t n, int n_rows, int32_t *out, void *ws,
			       size_t ws_bytes, ntx_stream_t s, struct ntx_err *err)
{
	if (n < 1 || n > INT32_MAX - 2 * AM_THREADS || n_rows < 1 || n_rows > 65535 || !x || !out)
		return ntx_err_set(err, NTX_EINVAL, "argmax: n = %lld, n_rows = %d", (long long)n, n_rows);
	if (!ws || !ntx_cu_aligned(ws, 16) || am_cap(ws_bytes) < (size_t)n_rows)
		return ntx_err_set(err, NTX_EINVAL,
				   "argmax: workspace of %zu bytes at %p (need %zu, 16-byte aligned)",
				   ws_bytes, ws, ntx_cuda_argmax_ws_bytes(n_rows));
	{
		/* the layout follows ws_bytes alone (rows the workspace holds):
		 * every row's counter stays where the last call left it zero */
		const size_t cap = am_cap(ws_bytes);
		unsigned *ticket = (unsigned *)ws;
		am_part *part = (am_part *)((char *)ws + ((cap * sizeof(unsigned) + 15) & ~(size_t)15));

		return ntx_cu_launched("argmax",
				       ntx_launch(ntx_argmax_kernel, dim3(AM_CTAS, (unsigned)n_rows),
						  AM_THREADS, 0, (cudaStream_t)s, x, n, out, part, ticket),
				       err);
	}
}

/* ---- cosine statistics ---- */

/* One CTA per row, double accumulation (as the CPU engine does); cos = 1
 * when either row is all zeros. */
__global__ void ntx_cos_kernel(const float *a, const float *b, int dim, double *acc)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	__shared__ double sm[3][32];
	const float *x = a + (int64_t)blockIdx.x * dim, *y = b + (int64_t)blockIdx.x * dim;
	double xy = 0, xx = 0, yy = 0;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;

	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		double p = x[i], q = y[i];

		xy += p * q;
		xx += p * p;
		yy += q * q;
	}
	xy = ntx_warp_sum_d(xy);
	xx = ntx_warp_sum_d(xx);
	yy = ntx_warp_sum_d(yy);
	if (lane == 0)
		sm[0][warp] = xy, sm[1][warp] = xx, sm[2][warp] = yy;
	__syncthreads();
	if (threadIdx.x == 0) {
		double c;

		xy = xx = yy = 0;
		for (int w = 0; w < nw; w++)
			xy += sm[0][w], xx += sm[1][w], yy += sm[2][w];
		c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : 1.0;
		atomicAdd(acc, c);
		atomicAdd(acc + 1, c * c);
	}
}

extern "C" int ntx_cuda_cos_accum(const float *a, const float *b, int n_tok, int dim, double *acc,
				  ntx_stream_t s, struct ntx_err *err)
{
	if (n_tok < 1 || dim < 1 || !a || !b || !acc)
		return ntx_err_set(err, NTX_EINVAL, "cos_accum: n_tok = %d, dim = %d", n_tok, dim);
	return ntx_cu_launched("cos_accum",
			       ntx_launch(ntx_cos_kernel, n_tok, 256, 0, (cudaStream_t)s, a, b, dim, acc), err);
}
