/* norm_rope.cu - RMSNorm (optionally writing q8 activations for the next
 * GEMV in the same pass) and RoPE + KV-cache store. */
#include "common.cuh"

/* ---- rmsnorm ---- */

#define RN_THREADS 256

/* One CTA per row. Pass 1: sum of squares (float, tree). Pass 2: lanes
 * take 8 consecutive elements (a warp 256), quantized by ntx_q8_store8 in
 * format fmt when qs is set, exactly as ntx_cuda_quantize_q8_fmt would
 * quantize the float output. */
__global__ void __launch_bounds__(RN_THREADS)
	ntx_rmsnorm_kernel(float *out, int8_t *qs, float2 *ds, int fmt, const float *x, const float *w,
			   int dim, float eps, int vec)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	__shared__ float red[RN_THREADS / 32];
	__shared__ float scale_s;
	const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const float *xr = x + (int64_t)t * dim;
	float ss = 0.0f;

	for (int i = threadIdx.x; i < dim; i += RN_THREADS)
		ss += xr[i] * xr[i];
	ss = ntx_warp_sum(ss);
	if (lane == 0)
		red[warp] = ss;
	__syncthreads();
	if (threadIdx.x == 0) {
		float s = 0.0f;

		for (int i = 0; i < RN_THREADS / 32; i++)
			s += red[i];
		scale_s = 1.0f / sqrtf(s / (float)dim + eps);
	}
	__syncthreads();
	const float scale = scale_s;
	float *o = out ? out + (int64_t)t * dim : NULL;

	if (!vec) {
		for (int i = threadIdx.x; i < dim; i += RN_THREADS)
			o[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
		return;
	}
	/* dim % 8 == 0 here, and a multiple of the q8 group when qs is set */
	const int g8 = dim / 8;
	const int n_iter = (g8 + RN_THREADS - 1) / RN_THREADS;

	for (int it = 0; it < n_iter; it++) {
		const int g = it * RN_THREADS + threadIdx.x;
		const int ok = g < g8;
		float v[8] = { 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f };

		if (ok) {
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const float4 a = ((const float4 *)xr)[2 * g + h], b = ((const float4 *)w)[2 * g + h];

				v[4 * h] = __fmul_rn(__fmul_rn(a.x, scale), b.x);
				v[4 * h + 1] = __fmul_rn(__fmul_rn(a.y, scale), b.y);
				v[4 * h + 2] = __fmul_rn(__fmul_rn(a.z, scale), b.z);
				v[4 * h + 3] = __fmul_rn(__fmul_rn(a.w, scale), b.w);
			}
			if (o) {
				((float4 *)o)[2 * g] = make_float4(v[0], v[1], v[2], v[3]);
				((float4 *)o)[2 * g + 1] = make_float4(v[4], v[5], v[6], v[7]);
			}
		}
		if (qs) /* uniform across the CTA: every lane calls it */
			ntx_q8_store8(v, qs + (int64_t)t * dim, ds + (int64_t)t * (dim / 32), 8 * (int64_t)g,
				      fmt, ok);
	}
}

/* Rows of up to RN_THREADS * 8 * NIT elements (dim % 8 == 0, 16-byte
 * aligned x, w, out): thread i holds groups of 8 elements i, i +
 * RN_THREADS, ... of x and w in registers, all loaded in one round, so the
 * row is read once and the kernel has one memory latency before the sum of
 * squares instead of a loop of them (3.1 -> ~2 us at dim 4096 on the H200,
 * where each decode layer runs two). The same output and q8 as
 * ntx_rmsnorm_kernel's vector path except for the summation order of the
 * squares. */
template <int NIT>
__global__ void __launch_bounds__(RN_THREADS)
	ntx_rmsnorm_reg_kernel(float *out, int8_t *qs, float2 *ds, int fmt, const float *x,
			       const float *w, int dim, float eps)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	__shared__ float red[RN_THREADS / 32];
	const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = dim / 8;
	const float4 *xr = (const float4 *)(x + (int64_t)t * dim), *wr = (const float4 *)w;
	float4 xv[NIT][2], wv[NIT][2];
	float ss = 0.0f, tot = 0.0f;

#pragma unroll
	for (int it = 0; it < NIT; it++) {
		const int g = it * RN_THREADS + threadIdx.x;

#pragma unroll
		for (int h = 0; h < 2; h++) {
			xv[it][h] = g < g8 ? xr[2 * g + h] : make_float4(0.f, 0.f, 0.f, 0.f);
			wv[it][h] = g < g8 ? wr[2 * g + h] : make_float4(0.f, 0.f, 0.f, 0.f);
		}
	}
#pragma unroll
	for (int it = 0; it < NIT; it++)
#pragma unroll
		for (int h = 0; h < 2; h++)
			ss += xv[it][h].x * xv[it][h].x + xv[it][h].y * xv[it][h].y +
			      xv[it][h].z * xv[it][h].z + xv[it][h].w * xv[it][h].w;
	ss = ntx_warp_sum(ss);
	if (lane == 0)
		red[warp] = ss;
	__syncthreads();
#pragma unroll
	for (int i = 0; i < RN_THREADS / 32; i++) /* every thread, same order */
		tot += red[i];

	const float scale = 1.0f / sqrtf(tot / (float)dim + eps);
	float *o = out ? out + (int64_t)t * dim : NULL;

#pragma unroll
	for (int it = 0; it < NIT; it++) {
		const int g = it * RN_THREADS + threadIdx.x;
		const int ok = g < g8;
		float v[8];

		if (it * RN_THREADS >= g8)
			break; /* uniform */
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const float4 a = xv[it][h], b = wv[it][h];

			v[4 * h] = __fmul_rn(__fmul_rn(a.x, scale), b.x);
			v[4 * h + 1] = __fmul_rn(__fmul_rn(a.y, scale), b.y);
			v[4 * h + 2] = __fmul_rn(__fmul_rn(a.z, scale), b.z);
			v[4 * h + 3] = __fmul_rn(__fmul_rn(a.w, scale), b.w);
		}
		if (o && ok) {
			((float4 *)o)[2 * g] = make_float4(v[0], v[1], v[2], v[3]);
			((float4 *)o)[2 * g + 1] = make_float4(v[4], v[5], v[6], v[7]);
		}
		if (qs) /* uniform across the CTA: every lane calls it */
			ntx_q8_store8(v, qs + (int64_t)t * dim, ds + (int64_t)t * (dim / 32), 8 * (int64_t)g,
				      fmt, ok);
	}
}

extern "C" int ntx_cuda_rmsnorm_fmt(float *out, void *xq, int fmt, const float *x, const float *w,
				    int n_tok, int dim, float eps, ntx_stream_t s, struct ntx_err *err)
{
	cudaError_t e;
	int vec;

	if (n_tok < 1 || dim < 1 || !x || !w || (!out && !xq))
		return ntx_err_set(err, NTX_EINVAL, "rmsnorm: n_tok = %d, dim = %d, NULL buffer", n_tok, dim);
	if (xq && (ntx_cu_check_fmt("rmsnorm", fmt, dim, err)))
		return -1;
	if (xq && !ntx_cu_aligned(xq, 16))
		return ntx_err_set(err, NTX_EINVAL, "rmsnorm: q8 output must be 16-byte aligned");
	vec = dim % 8 == 0 && ntx_cu_aligned(x, 16) && ntx_cu_aligned(w, 16) &&
	      (!out || ntx_cu_aligned(out, 16));
	if (xq && !vec)
		return ntx_err_set(err, NTX_EINVAL, "rmsnorm: q8 output needs 16-byte aligned x, w, out");
	float2 *ds = xq ? (float2 *)((char *)xq + ntx_cuda_q8_qs_bytes(dim, n_tok)) : NULL;

	if (vec && dim <= RN_THREADS * 8)
		e = ntx_launch(ntx_rmsnorm_reg_kernel<1>, n_tok, RN_THREADS, 0, (cudaStream_t)s, out,
			       (int8_t *)xq, ds, fmt, x, w, dim, eps);
	else if (vec && dim <= RN_THREADS * 8 * 2)
		e = ntx_launch(ntx_rmsnorm_reg_kernel<2>, n_tok, RN_THREADS, 0, (cudaStream_t)s, out,
			       (int8_t *)xq, ds, fmt, x, w, dim, eps);
	else if (vec && dim <= RN_THREADS * 8 * 4)
		e = ntx_launch(ntx_rmsnorm_reg_kernel<4>, n_tok, RN_THREADS, 0, (cudaStream_t)s, out,
			       (int8_t *)xq, ds, fmt, x, w, dim, eps);
	else
		e = ntx_launch(ntx_rmsnorm_kernel, n_tok, RN_THREADS, 0, (cudaStream_t)s, out,
			       (int8_t *)xq, ds, fmt, x, w, dim, eps, vec);
	return ntx_cu_launched("rmsnorm", e, err);
}

extern "C" int ntx_cuda_rmsnorm(float *out, void *xq, const float *x, const float *w, int n_tok,
				int dim, float eps, ntx_stream_t s, struct ntx_err *err)
{
	return ntx_cuda_rmsnorm_fmt(out, xq, NTX_CUDA_Q8F_32, x, w, n_tok, dim, eps, s, err);
}

/* ---- RoPE + KV store ---- */

struct rope_args {
	float *q, *k;
	const float *v;
	int n_head, n_kv, hd, n_ctx, n_seq, n_rot, kv_f16, neox;
	void *kc, *vc;
	const int32_t *seq, *pos;
	float base, freq_scale;
	const float *freqs;
	const double *inv;
};

/* The inverse frequency of pair r, in double precision as the CPU
 * reference computes it. */
__device__ __forceinline__ double rope_inv(int n_rot, float base, float freq_scale,
					   const float *freqs, int r)
{
	double inv = (double)freq_scale * pow((double)base, -2.0 * r / n_rot);

	if (freqs)
		inv /= (double)freqs[r];
	return inv;
}

__global__ void ntx_rope_table_kernel(int n_rot, float base, float freq_scale, const float *freqs,
				      double *inv)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n_rot / 2; r += gridDim.x * blockDim.x)
		inv[r] = rope_inv(n_rot, base, freq_scale, freqs, r);
}

extern "C" int ntx_cuda_rope_table(const struct ntx_cuda_rope *rope, double *inv, ntx_stream_t s,
				   struct ntx_err *err)
{
	if (!rope || !inv || rope->n_rot < 2 || rope->n_rot % 2)
		return ntx_err_set(err, NTX_EINVAL, "rope_table: n_rot = %d (even, >= 2), non-NULL table",
				   rope ? rope->n_rot : 0);
	return ntx_cu_launched("rope_table",
			       ntx_launch(ntx_rope_table_kernel, 1, 128, 0, (cudaStream_t)s, rope->n_rot,
					  rope->base, rope->freq_scale, rope->freqs, inv),
			       err);
}

/* The CTA's angles of position p: cos and sin of every pair r < n_rot/2
 * into cs and sn (shared), in double precision, from the table of inverse
 * frequencies when there is one. The caller syncs the CTA. */
__device__ __forceinline__ void rope_angles(const rope_args &a, int p, float *cs, float *sn)
{
	for (int r = threadIdx.x; r < a.n_rot / 2; r += blockDim.x) {
		const double inv = a.inv ? a.inv[r] : rope_inv(a.n_rot, a.base, a.freq_scale, a.freqs, r);
		double sv, cv;

		sincos((double)p * inv, &sv, &cv);
		cs[r] = (float)cv;
		sn[r] = (float)sv;
	}
}

#define ROPE_THREADS 128

/* Grid (token, slice of pairs): every thread rotates one pair of q or k (and
 * stores that k pair and the v pair beside it), so no thread loops over
 * dependent loads and stores (one CTA per token did: ~8 us at n_tok 1 on
 * the H200, latency of 16 serialized iterations). Each CTA computes the
 * angles of its token once in double precision (as the CPU reference does:
 * large positions lose nothing), with the thread's pair already loading,
 * from the table of inverse frequencies when there is one (a pow per pair
 * was the longest step of the kernel). k and v are stored into the cache
 * unless (seq, pos) is out of range (then attention for that token yields
 * NaN). One body for both pairings. Normal: pair i of a head is (x[2i], x[2i+1]),
 * loaded and stored as one float2. NEOX (rope->neox): pair i < n_rot/2 is
 * (x[i], x[i + n_rot/2]); the elements past n_rot stay as they are, taken
 * as adjacent pairs only to share the work and the stores. The same cos and
 * sin of pair i either way. */
template <bool NEOX> __device__ __forceinline__ void rope_store(const rope_args &a)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	extern __shared__ float rs_cs[]; /* cos[n_rot/2], sin[n_rot/2] */
	const int t = blockIdx.x, half = a.n_rot / 2, hp = a.hd / 2;
	const int p = a.pos[t], sq = a.seq[t];
	const bool store = p >= 0 && p < a.n_ctx && sq >= 0 && sq < a.n_seq;
	float *cs = rs_cs, *sn = rs_cs + half;
	const int j = blockIdx.y * blockDim.x + threadIdx.x, nq = a.n_head * hp, row = a.n_kv * a.hd;
	const bool act = j < nq + a.n_kv * hp;
	const int jj = j < nq ? j : j - nq, i = jj % hp, hb = (jj / hp) * a.hd;
	const int oa = NEOX ? hb + (i < half ? i : a.n_rot + 2 * (i - half)) : hb + 2 * i;
	const int ob = NEOX && i < half ? oa + half : oa + 1;
	float *e = j < nq ? a.q + (int64_t)t * a.n_head * a.hd : a.k + (int64_t)t * row;
	const float *vr = a.v + (int64_t)t * row;
	float2 x = make_float2(0.0f, 0.0f), v = x;

	/* this thread's pair (and v beside a k pair) in flight during the angles */
	if (act)
		x = NEOX ? make_float2(e[oa], e[ob]) : *(const float2 *)(e + oa);
	if (act && j >= nq && store)
		v = NEOX ? make_float2(vr[oa], vr[ob]) : *(const float2 *)(vr + oa);
	rope_angles(a, p, cs, sn);
	__syncthreads();
	if (!act)
		return;
	if (i < half) {
		const float c = cs[i], s = sn[i];

		x = make_float2(x.x * c - x.y * s, x.x * s + x.y * c);
		if (NEOX) {
			e[oa] = x.x;
			e[ob] = x.y;
		} else {
			*(float2 *)(e + oa) = x;
		}
	}
	if (j < nq || !store)
		return;

	const int64_t co = ((int64_t)sq * a.n_ctx + p) * row + oa;

	if (!NEOX && a.kv_f16) {
		*(__half2 *)((__half *)a.kc + co) = __floats2half2_rn(x.x, x.y);
		*(__half2 *)((__half *)a.vc + co) = __floats2half2_rn(v.x, v.y);
	} else if (!NEOX) {
		*(float2 *)((float *)a.kc + co) = x;
		*(float2 *)((float *)a.vc + co) = v;
	} else if (a.kv_f16) {
		((__half *)a.kc)[co] = __float2half_rn(x.x);
		((__half *)a.kc)[co + ob - oa] = __float2half_rn(x.y);
		((__half *)a.vc)[co] = __float2half_rn(v.x);
		((__half *)a.vc)[co + ob - oa] = __float2half_rn(v.y);
	} else {
		((float *)a.kc)[co] = x.x;
		((float *)a.kc)[co + ob - oa] = x.y;
		((float *)a.vc)[co] = v.x;
		((float *)a.vc)[co + ob - oa] = v.y;
	}
}

__global__ void __launch_bounds__(ROPE_THREADS) ntx_rope_store_kernel(rope_args a)
{
	rope_store<false>(a);
}

__global__ void __launch_bounds__(ROPE_THREADS) ntx_rope_neox_store_kernel(rope_args a)
{
	rope_store<true>(a);
}

extern "C" int ntx_cuda_rope_store(float *q, float *k, const float *v, int n_tok, int n_head,
				   const struct ntx_cuda_kv *kv, const int32_t *seq,
				   const int32_t *pos, const struct ntx_cuda_rope *rope,
				   ntx_stream_t s, struct ntx_err *err)
{
	rope_args a;

	if (!kv || !rope || !q || !k || !v || !seq || !pos || !kv->k || !kv->v)
		return ntx_err_set(err, NTX_EINVAL, "rope_store: NULL argument");
	if (n_tok < 1 || n_tok > INT32_MAX / 2 || n_head < 1 || kv->n_head_kv < 1 ||
	    n_head % kv->n_head_kv || kv->head_dim < 2 || kv->head_dim % 2 || kv->n_ctx < 1 ||
	    kv->n_seq < 1)
		return ntx_err_set(err, NTX_EINVAL,
				   "rope_store: n_tok = %d, n_head = %d, n_head_kv = %d, head_dim = %d, "
				   "n_ctx = %d, n_seq = %d",
				   n_tok, n_head, kv->n_head_kv, kv->head_dim, kv->n_ctx, kv->n_seq);
	if (rope->n_rot < 0 || rope->n_rot % 2 || rope->n_rot > kv->head_dim)
		return ntx_err_set(err, NTX_EINVAL, "rope_store: n_rot = %d (even, <= head_dim %d)",
				   rope->n_rot, kv->head_dim);
	a.q = q, a.k = k, a.v = v;
	a.n_head = n_head, a.n_kv = kv->n_head_kv, a.hd = kv->head_dim;
	a.n_ctx = kv->n_ctx, a.n_seq = kv->n_seq, a.n_rot = rope->n_rot, a.kv_f16 = kv->kv_f16;
	a.kc = kv->k, a.vc = kv->v, a.seq = seq, a.pos = pos;
	a.base = rope->base, a.freq_scale = rope->freq_scale, a.freqs = rope->freqs;
	a.inv = rope->inv;
	a.neox = rope->neox;
	const int64_t pairs = (int64_t)(n_head + kv->n_head_kv) * (kv->head_dim / 2);

	if (pairs > (int64_t)65535 * ROPE_THREADS)
		return ntx_err_set(err, NTX_EINVAL, "rope_store: %lld head pairs per token (at most %d)",
				   (long long)pairs, 65535 * ROPE_THREADS);
	return ntx_cu_launched("rope_store",
			       ntx_launch(a.neox ? ntx_rope_neox_store_kernel : ntx_rope_store_kernel,
					  dim3((unsigned)n_tok, (unsigned)((pairs + ROPE_THREADS - 1) / ROPE_THREADS)),
					  ROPE_THREADS, (size_t)rope->n_rot * sizeof(float),
					  (cudaStream_t)s, a),
			       err);
}
