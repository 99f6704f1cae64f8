/* attention.cu - causal GQA attention over the KV cache, split over the
 * sequence (flash-decoding).
 *
 * Grid (token, kv head, split); one CTA of 128 threads handles the whole
 * group of G = n_head / n_kv query heads of its kv head, so each K and V row
 * is read once per group. The split's position range is computed on the
 * device from pos[t] (n_pos = pos + 1 positions cut into n_split chunks of
 * at least AT_MIN_CHUNK), so the launch depends only on n_tok, n_head and
 * n_ctx and can be captured in a CUDA graph. Per tile of 128 positions:
 *   1. scores: thread per position, K row read with 16-byte loads, dot with
 *      the G pre-scaled queries held in shared memory (broadcast reads);
 *   2. online softmax: warp w updates heads g = w, w+4, ... (running max m,
 *      sum l, rescale factor alpha) and turns scores into weights;
 *   3. V: thread (4-element slice d, position group pg) accumulates
 *      acc[g][d..d+3] += p[g][pos] V[pos][d..d+3] over its positions.
 * At the end the position groups are summed in shared memory (fixed order)
 * and the CTA writes either the normalized output (one split) or the
 * partial (m, l, acc) of its split. ntx_cuda_attention merges the partials
 * in a second kernel (ntx_attn_combine_kernel); ntx_cuda_attention_q8 in
 * the same launch: every split CTA counts itself in a per-(token, kv head)
 * counter in the workspace after a memory fence, and the last one merges
 * the G heads and resets the counter (so a CUDA graph can replay it). Both
 * merges run the same arithmetic (at_merge_w, at_merge_d), so the two entry
 * points give bitwise the same output; ntx_cuda_attention_q8 can write the
 * output in q8 form as well (ntx_q8_store8, in the consumer's format),
 * which saves the quantization kernel before the output projection.
 *
 * Batch invariance: for n_tok <= NTX_CUDA_GEMV_MAX_TOK the number of splits
 * is that of a single token (at_splits), so a token's chunks, their tiles
 * and the merge order depend on its pos only. */
#include "common.cuh"

#define AT_THREADS 128
#define AT_TILE 128
#define AT_MIN_CHUNK 32
#define AT_MAX_SPLIT 64
#define AT_MAX_HD 256

struct at_args {
	float *out;
	const float *q;
	int n_tok, n_head, G, hd, n_kv, n_ctx, n_seq, n_split;
	const void *kc, *vc;
	const int32_t *seq, *pos;
	float *part_acc; /* [n_tok][n_head][n_split][hd] */
	float2 *part_ml; /* [n_tok][n_head][n_split] (m, l) */
	unsigned *cnt;   /* [n_tok][n_kv] split counters (fused merge), or NULL */
	int8_t *xqs;     /* q8 output [n_tok][n_head * hd], or NULL */
	float2 *xds;     /* its (d, d*sum) [n_tok][n_head * hd / 32] */
	int fmt;         /* its format (NTX_Q8F_*) */
	float scale;
};

/* Splits of n_pos positions that hold any (a prefix of the n_split). */
__device__ __forceinline__ int at_n_eff(int n_pos, int n_split)
{
	int chunk = (n_pos + n_split - 1) / n_split;

	if (chunk < AT_MIN_CHUNK)
		chunk = AT_MIN_CHUNK;
	return min(n_split, (n_pos + chunk - 1) / chunk);
}

/* q8 form of the n = G * hd output values in shared memory o (16-byte
 * aligned; this CTA's heads, which start at element e0 of token t's row):
 * each warp takes 256 values per step, 8 per lane (n and e0 multiples of
 * the format's group, checked on entry). */
__device__ __forceinline__ void at_store_q8(const at_args &a, const float *o, int n, int t,
					    int64_t e0)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int64_t row = (int64_t)a.n_head * a.hd;

	for (int b = 256 * warp; b < n; b += AT_THREADS * 8) {
		const int i = b + 8 * lane;
		const int ok = i < n;
		float v[8] = { 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f };

		if (ok) {
			const float4 x = *(const float4 *)(o + i), y = *(const float4 *)(o + i + 4);

			v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
			v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
		}
		ntx_q8_store8(v, a.xqs + (int64_t)t * row, a.xds + (int64_t)t * (row / 32), e0 + i,
			      a.fmt, ok);
	}
}

/* Merge weights of the n_eff split partials (p0: index of split 0 of the
 * head), one warp: M = max m_s, L = sum exp(m_s - M) l_s (lane-strided
 * partial sums, then the butterfly), w[s] = exp(m_s - M) / L. */
__device__ __forceinline__ void at_merge_w(const at_args &a, int64_t p0, int n_eff, int lane,
					   float *w)
{
	float M = -INFINITY, L = 0.0f;

	for (int s = lane; s < n_eff; s += 32)
		M = fmaxf(M, __ldcg(&a.part_ml[p0 + s].x));
	M = ntx_warp_max(M);
	for (int s = lane; s < n_eff; s += 32) {
		const float2 v = __ldcg(&a.part_ml[p0 + s]);

		L = __fmaf_rn(expf(__fsub_rn(v.x, M)), v.y, L);
	}
	L = ntx_warp_sum(L);
	for (int s = lane; s < n_eff; s += 32)
		w[s] = __fdiv_rn(expf(__fsub_rn(__ldcg(&a.part_ml[p0 + s].x), M)), L);
}

/* Merged element d of the head: sum over the splits in order (NaN when
 * there are none: an invalid position). */
__device__ __forceinline__ float at_merge_d(const at_args &a, int64_t p0, int n_eff, const float *w,
					    int d)
{
	float acc = 0.0f;

	for (int s = 0; s < n_eff; s++)
		acc = __fmaf_rn(w[s], __ldcg(&a.part_acc[(p0 + s) * a.hd + d]), acc);
	return n_eff ? acc : NAN;
}

/* Split s of n_pos positions: [*beg, *end), possibly empty. */
__device__ __forceinline__ void at_range(int n_pos, int n_split, int s, int *beg, int *end)
{
	int chunk = (n_pos + n_split - 1) / n_split;

	if (chunk < AT_MIN_CHUNK)
		chunk = AT_MIN_CHUNK;
	*beg = min(s * chunk, n_pos);
	*end = min(*beg + chunk, n_pos);
}

__device__ __forceinline__ bool at_valid(const at_args &a, int t, int *n_pos, int *sq)
{
	const int p = a.pos[t];

	*sq = a.seq[t];
	*n_pos = p + 1;
	return p >= 0 && p < a.n_ctx && *sq >= 0 && *sq < a.n_seq;
}

/* 8 consecutive cache elements as floats. */
template <bool F16> __device__ __forceinline__ void at_ld8(const void *base, int64_t off, float *f)
{
	if constexpr (F16) {
		uint4 v = *(const uint4 *)((const __half *)base + off);
		const uint32_t w[4] = { v.x, v.y, v.z, v.w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			float2 t = __half22float2(*(const __half2 *)&w[i]);

			f[2 * i] = t.x, f[2 * i + 1] = t.y;
		}
	} else {
		const float4 *p = (const float4 *)((const float *)base + off);
		float4 x = p[0], y = p[1];

		f[0] = x.x, f[1] = x.y, f[2] = x.z, f[3] = x.w;
		f[4] = y.x, f[5] = y.y, f[6] = y.z, f[7] = y.w;
	}
}

template <bool F16> __device__ __forceinline__ void at_ld4(const void *base, int64_t off, float *f)
{
	if constexpr (F16) {
		uint2 v = *(const uint2 *)((const __half *)base + off);
		float2 a = __half22float2(*(const __half2 *)&v.x), b = __half22float2(*(const __half2 *)&v.y);

		f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
	} else {
		float4 x = *(const float4 *)((const float *)base + off);

		f[0] = x.x, f[1] = x.y, f[2] = x.z, f[3] = x.w;
	}
}

/* Fused merge: called by every thread of every split CTA of (t, kvh) after
 * it wrote its partial (or found its split empty). The last CTA to arrive
 * merges the G heads' partials into out (and the q8 output), then resets
 * the counter. ml and o are shared scratch (4 * GMAX and G * hd floats). */
template <int GMAX>
__device__ __forceinline__ void at_merge(const at_args &a, int t, int kvh, int n_pos, float *ml, float *o)
{
	__shared__ float w[GMAX][AT_MAX_SPLIT]; /* exp(m_s - M) / L */
	__shared__ int last;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.G, hd = a.hd;
	unsigned *cnt = a.cnt + (int64_t)t * a.n_kv + kvh;
	const int n_eff = at_n_eff(n_pos, a.n_split);

	__threadfence(); /* this CTA's partials are visible before it counts */
	__syncthreads();
	if (tid == 0)
		last = atomicAdd(cnt, 1u) == (unsigned)a.n_split - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	for (int g = warp; g < G; g += AT_THREADS / 32)
		at_merge_w(a, ((int64_t)t * a.n_head + (int64_t)kvh * G + g) * a.n_split, n_eff, lane,
			   w[g]);
	__syncthreads();
	for (int i = tid; i < G * hd; i += AT_THREADS) {
		const int g = i / hd, d = i % hd;
		const int64_t p0 = ((int64_t)t * a.n_head + (int64_t)kvh * G + g) * a.n_split;
		const float acc = at_merge_d(a, p0, n_eff, w[g], d);

		a.out[((int64_t)t * a.n_head + (int64_t)kvh * G + g) * hd + d] = acc;
		o[i] = acc;
	}
	if (tid == 0)
		*cnt = 0; /* every split has counted: ready for the next call */
	if (a.xqs) {
		__syncthreads();
		at_store_q8(a, o, G * hd, t, (int64_t)kvh * G * hd);
	}
	(void)ml;
}

template <int GMAX, bool F16> __global__ void __launch_bounds__(AT_THREADS, GMAX >= 16 ? 3 : 5) ntx_attn_kernel(at_args a)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	extern __shared__ __align__(16) float at_smem[];
	const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
	const int G = a.G, hd = a.hd, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int tpp = hd / 4, n_pg = AT_THREADS / tpp; /* threads per V row, position groups */
	const int dq = tid % tpp, pg = tid / tpp;
	float *qs = at_smem;                      /* [G][hd] */
	float *ml = qs + G * hd;                  /* m[GMAX], l[GMAX], alpha[GMAX], pad */
	float *sc = ml + 4 * GMAX;                /* [AT_TILE][GMAX], later [n_pg][G][hd] */
	int n_pos, sq, beg, end;
	const bool valid = at_valid(a, t, &n_pos, &sq);

	if (!valid)
		n_pos = 0;
	at_range(n_pos, a.n_split, split, &beg, &end);
	if (a.n_split > 1 && beg >= end) {
		/* empty split: the merge skips it (it computes the same ranges) */
		if (a.cnt)
			at_merge<GMAX>(a, t, kvh, n_pos, ml, sc);
		return;
	}

	for (int i = tid; i < G * hd; i += AT_THREADS)
		qs[i] = a.q[((int64_t)t * a.n_head + (int64_t)kvh * G) * hd + i] * a.scale;
	if (tid < GMAX) {
		ml[tid] = -INFINITY;
		ml[GMAX + tid] = 0.0f;
	}

	const int64_t rs = (int64_t)a.n_kv * hd; /* cache row stride (elements) */
	const int64_t kv0 = ((int64_t)sq * a.n_ctx) * rs + (int64_t)kvh * hd;
	float acc[GMAX][4];

#pragma unroll
	for (int g = 0; g < GMAX; g++)
		acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
	__syncthreads();

	for (int t0 = beg; t0 < end; t0 += AT_TILE) {
		const int np = min(AT_TILE, end - t0);

		/* 1. scores */
		{
			float s[GMAX];

#pragma unroll
			for (int g = 0; g < GMAX; g++)
				s[g] = tid < np ? 0.0f : -INFINITY;
			if (tid < np) {
				const int64_t ko = kv0 + (int64_t)(t0 + tid) * rs;

#pragma unroll 8 /* half a 128-wide K row in flight at once */
				for (int c = 0; c < hd; c += 8) {
					float kf[8];

					at_ld8<F16>(a.kc, ko + c, kf);
#pragma unroll
					for (int g = 0; g < GMAX; g++) {
						if (g < G) {
							const float4 q0 = *(const float4 *)(qs + g * hd + c);
							const float4 q1 = *(const float4 *)(qs + g * hd + c + 4);

							s[g] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] +
								q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] +
								q1.z * kf[6] + q1.w * kf[7];
						}
					}
				}
			}
#pragma unroll
			for (int g = 0; g < GMAX; g++)
				sc[tid * GMAX + g] = s[g];
		}
		__syncthreads();

		/* 2. online softmax, one warp per head */
		for (int g = warp; g < G; g += AT_THREADS / 32) {
			float v[AT_TILE / 32], mx = -INFINITY, sum = 0.0f;

#pragma unroll
			for (int j = 0; j < AT_TILE / 32; j++) {
				v[j] = sc[(lane + 32 * j) * GMAX + g];
				mx = fmaxf(mx, v[j]);
			}
			mx = ntx_warp_max(mx);
			const float m_old = ml[g], m_new = fmaxf(m_old, mx);

#pragma unroll
			for (int j = 0; j < AT_TILE / 32; j++) {
				const float e = expf(v[j] - m_new); /* -inf -> 0 */

				sc[(lane + 32 * j) * GMAX + g] = e;
				sum += e;
			}
			sum = ntx_warp_sum(sum);
			if (lane == 0) {
				const float alpha = expf(m_old - m_new); /* m_old = -inf -> 0 */

				ml[g] = m_new;
				ml[GMAX + g] = ml[GMAX + g] * alpha + sum;
				ml[2 * GMAX + g] = alpha;
			}
		}
		__syncthreads();

		/* 3. weighted V */
		if (pg < n_pg) {
#pragma unroll
			for (int g = 0; g < GMAX; g++) {
				if (g < G) {
					const float al = ml[2 * GMAX + g];

					acc[g][0] *= al, acc[g][1] *= al, acc[g][2] *= al, acc[g][3] *= al;
				}
			}
#pragma unroll 8 /* a 32-position chunk's V rows in flight at once */
			for (int i = pg; i < np; i += n_pg) {
				float vf[4];

				at_ld4<F16>(a.vc, kv0 + (int64_t)(t0 + i) * rs + 4 * dq, vf);
#pragma unroll
				for (int g = 0; g < GMAX; g++) {
					if (g < G) {
						const float p = sc[i * GMAX + g];

						acc[g][0] += p * vf[0], acc[g][1] += p * vf[1];
						acc[g][2] += p * vf[2], acc[g][3] += p * vf[3];
					}
				}
			}
		}
		__syncthreads(); /* sc is rewritten by the next tile */
	}

	/* sum the position groups */
	if (pg < n_pg) {
#pragma unroll
		for (int g = 0; g < GMAX; g++)
			if (g < G)
				*(float4 *)(sc + ((int64_t)pg * G + g) * hd + 4 * dq) =
					make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
	}
	__syncthreads();
	for (int i = tid; i < G * hd; i += AT_THREADS) {
		const int g = i / hd, d = i % hd, h = kvh * G + g;
		float s = 0.0f;

		for (int j = 0; j < n_pg; j++)
			s += sc[((int64_t)j * G + g) * hd + d];
		if (a.n_split == 1) {
			s /= ml[GMAX + g]; /* 0/0 = NaN if invalid */
			a.out[((int64_t)t * a.n_head + h) * hd + d] = s;
			sc[i] = s; /* only this thread reads column i above */
		} else {
			const int64_t pi = ((int64_t)t * a.n_head + h) * a.n_split + split;

			a.part_acc[pi * hd + d] = s;
			if (d == 0)
				a.part_ml[pi] = make_float2(ml[g], ml[GMAX + g]);
		}
	}
	if (a.n_split == 1) {
		if (a.xqs) {
			__syncthreads();
			at_store_q8(a, sc, G * hd, t, (int64_t)kvh * G * hd);
		}
	} else if (a.cnt) {
		at_merge<GMAX>(a, t, kvh, n_pos, ml, sc);
	}
}

/* One CTA per (token, head), thread per element of the head; the same
 * arithmetic as the fused merge (at_merge). */
__global__ void ntx_attn_combine_kernel(at_args a)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	__shared__ float w[AT_MAX_SPLIT];
	const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
	const int64_t p0 = ((int64_t)t * a.n_head + h) * a.n_split;
	int n_pos, sq, n_eff = 0;

	if (at_valid(a, t, &n_pos, &sq))
		n_eff = at_n_eff(n_pos, a.n_split);
	if (threadIdx.x < 32)
		at_merge_w(a, p0, n_eff, threadIdx.x, w);
	__syncthreads();
	for (int d = threadIdx.x; d < a.hd; d += blockDim.x)
		a.out[((int64_t)t * a.n_head + h) * a.hd + d] = at_merge_d(a, p0, n_eff, w, d);
}

/* Splits: enough CTAs to fill the GPU at decode (about 2048 / n_head per
 * token), at most one per AT_MIN_CHUNK positions of the context. Up to
 * NTX_CUDA_GEMV_MAX_TOK tokens get the single-token count (batch
 * invariance: a token's chunks do not depend on n_tok); prefill fewer. */
static int at_splits(int n_tok, int n_head, int n_ctx)
{
	const int64_t nt = n_tok <= NTX_CUDA_GEMV_MAX_TOK ? 1 : n_tok;
	int64_t want = (2048 + (int64_t)n_head * nt - 1) / ((int64_t)n_head * nt);
	int64_t cap = (n_ctx + AT_MIN_CHUNK - 1) / AT_MIN_CHUNK;

	if (want > cap)
		want = cap;
	if (want > AT_MAX_SPLIT)
		want = AT_MAX_SPLIT;
	return want < 1 ? 1 : (int)want;
}

/* Workspace: split counters first, at a fixed place for every n_tok (the
 * engine shares one workspace between calls of different sizes, and the
 * counters must stay zero between calls), then the partials. A split > 1
 * needs n_head < 2048 (n_tok <= 8) or n_tok * n_head < 2048 (at_splits),
 * so n_tok * n_head_kv < AT_CNT. */
#define AT_CNT 16384
#define AT_CNT_BYTES (AT_CNT * sizeof(unsigned))

extern "C" size_t ntx_cuda_attention_ws_bytes(int n_tok, int n_head, int head_dim, int n_ctx)
{
	int ns;

	if (n_tok < 1 || n_head < 1 || head_dim < 1 || n_ctx < 1)
		return 0;
	ns = at_splits(n_tok, n_head, n_ctx);
	if (ns == 1)
		return 0;
	return AT_CNT_BYTES +
	       (size_t)n_tok * n_head * ns * ((size_t)head_dim * sizeof(float) + sizeof(float2)) + 256;
}

template <int GMAX, bool F16>
static int at_launch(const at_args &a, cudaStream_t s, struct ntx_err *err)
{
	const int tpp = a.hd / 4, n_pg = AT_THREADS / tpp;
	size_t tail = (size_t)AT_TILE * GMAX;
	size_t smem;
	dim3 grid((unsigned)a.n_tok, (unsigned)a.n_kv, (unsigned)a.n_split);

	if (tail < (size_t)n_pg * a.G * a.hd)
		tail = (size_t)n_pg * a.G * a.hd;
	smem = ((size_t)a.G * a.hd + 4 * GMAX + tail) * sizeof(float);
	if (ntx_cu_smem(ntx_attn_kernel<GMAX, F16>, smem, "attention: cudaFuncSetAttribute", err))
		return -1;
	if (ntx_cu_launched("attention",
			    ntx_launch(ntx_attn_kernel<GMAX, F16>, grid, AT_THREADS, smem, s, a), err))
		return -1;
	if (a.n_split > 1 && !a.cnt)
		return ntx_cu_launched("attention combine",
				       ntx_launch(ntx_attn_combine_kernel, (unsigned)(a.n_tok * a.n_head),
						  a.hd <= 128 ? 128 : 256, 0, s, a),
				       err);
	return 0;
}

template <bool F16> static int at_g(const at_args &a, cudaStream_t s, struct ntx_err *err)
{
	if (a.G <= 1)
		return at_launch<1, F16>(a, s, err);
	if (a.G <= 2)
		return at_launch<2, F16>(a, s, err);
	if (a.G <= 4)
		return at_launch<4, F16>(a, s, err);
	if (a.G <= 8)
		return at_launch<8, F16>(a, s, err);
	return at_launch<16, F16>(a, s, err);
}

/* Both entry points; fused = merge the splits in the attention launch
 * (counters in ws), xq = q8 output or NULL. */
static int at_run(const char *fn, float *out, void *xq, int fmt, const float *q, int n_tok,
		  int n_head, const struct ntx_cuda_kv *kv, const int32_t *seq, const int32_t *pos,
		  void *ws, size_t ws_bytes, int fused, cudaStream_t st, struct ntx_err *err)
{
	at_args a;
	size_t need;

	if (!kv || !out || !q || !seq || !pos || !kv->k || !kv->v)
		return ntx_err_set(err, NTX_EINVAL, "%s: NULL argument", fn);
	if (n_tok < 1 || n_tok > INT32_MAX / 2 || n_head < 1 || kv->n_head_kv < 1 ||
	    n_head % kv->n_head_kv || n_head / kv->n_head_kv > 16 || kv->n_head_kv > 65535 ||
	    kv->n_ctx < 1 || kv->n_seq < 1)
		return ntx_err_set(err, NTX_EINVAL,
				   "%s: n_tok = %d, n_head = %d, n_head_kv = %d (group <= 16), "
				   "n_ctx = %d, n_seq = %d",
				   fn, n_tok, n_head, kv->n_head_kv, kv->n_ctx, kv->n_seq);
	if (kv->head_dim < 8 || kv->head_dim % 8 || kv->head_dim > AT_MAX_HD)
		return ntx_err_set(err, NTX_EINVAL, "%s: head_dim = %d (a multiple of 8, <= %d)", fn,
				   kv->head_dim, AT_MAX_HD);
	if (!ntx_cu_aligned(q, 16) || !ntx_cu_aligned(out, 16) || !ntx_cu_aligned(kv->k, 16) ||
	    !ntx_cu_aligned(kv->v, 16))
		return ntx_err_set(err, NTX_EINVAL, "%s: q, out and the cache must be 16-byte aligned", fn);
	if (xq && (fmt < NTX_Q8F_32 || fmt > NTX_Q8F_Q8_K ||
		   (n_head / kv->n_head_kv) * kv->head_dim % ntx_q8f_group(fmt) ||
		   !ntx_cu_aligned(xq, 16)))
		return ntx_err_set(err, NTX_EINVAL,
				   "%s: q8 output in format %d needs (n_head / n_head_kv) * head_dim = %d to be "
				   "a multiple of its group and 16-byte alignment",
				   fn, fmt, (n_head / kv->n_head_kv) * kv->head_dim);
	a.out = out, a.q = q, a.n_tok = n_tok, a.n_head = n_head;
	a.G = n_head / kv->n_head_kv, a.hd = kv->head_dim, a.n_kv = kv->n_head_kv;
	a.n_ctx = kv->n_ctx, a.n_seq = kv->n_seq;
	a.n_split = at_splits(n_tok, n_head, kv->n_ctx);
	a.kc = kv->k, a.vc = kv->v, a.seq = seq, a.pos = pos;
	a.scale = 1.0f / sqrtf((float)kv->head_dim);
	a.part_acc = NULL, a.part_ml = NULL, a.cnt = NULL;
	a.xqs = (int8_t *)xq;
	a.fmt = fmt;
	a.xds = xq ? (float2 *)((char *)xq +
				 ntx_cuda_q8_qs_bytes((int64_t)n_head * kv->head_dim, n_tok))
		   : NULL;
	need = ntx_cuda_attention_ws_bytes(n_tok, n_head, kv->head_dim, kv->n_ctx);
	if (a.n_split > 1) {
		char *w = (char *)ws;

		if (!ws || ws_bytes < need || !ntx_cu_aligned(ws, 16))
			return ntx_err_set(err, NTX_EINVAL,
					   "%s: workspace of %zu bytes; need %zu, 16-byte aligned", fn,
					   ws_bytes, need);
		if (fused && (int64_t)n_tok * kv->n_head_kv > AT_CNT)
			return ntx_err_set(err, NTX_EINVAL, "%s: %d tokens x %d kv heads exceed %d counters",
					   fn, n_tok, kv->n_head_kv, AT_CNT);
		if (fused)
			a.cnt = (unsigned *)w;
		a.part_acc = (float *)(w + AT_CNT_BYTES);
		a.part_ml = (float2 *)(w + AT_CNT_BYTES +
				       (((size_t)n_tok * n_head * a.n_split * a.hd * sizeof(float) + 15) &
					~(size_t)15));
	}
	return kv->kv_f16 ? at_g<true>(a, st, err) : at_g<false>(a, st, err);
}

extern "C" int ntx_cuda_attention(float *out, const float *q, int n_tok, int n_head,
				  const struct ntx_cuda_kv *kv, const int32_t *seq, const int32_t *pos,
				  void *ws, size_t ws_bytes, ntx_stream_t st, struct ntx_err *err)
{
	return at_run("attention", out, NULL, NTX_Q8F_32, q, n_tok, n_head, kv, seq, pos, ws,
		      ws_bytes, 0, (cudaStream_t)st, err);
}

extern "C" int ntx_cuda_attention_q8_fmt(float *out, void *xq_out, int fmt, const float *q,
					 int n_tok, int n_head, const struct ntx_cuda_kv *kv,
					 const int32_t *seq, const int32_t *pos, void *ws,
					 size_t ws_bytes, ntx_stream_t st, struct ntx_err *err)
{
	return at_run("attention_q8", out, xq_out, fmt, q, n_tok, n_head, kv, seq, pos, ws, ws_bytes,
		      1, (cudaStream_t)st, err);
}

extern "C" int ntx_cuda_attention_q8(float *out, void *xq_out, const float *q, int n_tok,
				     int n_head, const struct ntx_cuda_kv *kv, const int32_t *seq,
				     const int32_t *pos, void *ws, size_t ws_bytes, ntx_stream_t st,
				     struct ntx_err *err)
{
	return ntx_cuda_attention_q8_fmt(out, xq_out, NTX_CUDA_Q8F_32, q, n_tok, n_head, kv, seq, pos,
					 ws, ws_bytes, st, err);
}
