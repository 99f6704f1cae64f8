/* attention.cu - causal GQA attention over the KV cache, split over the
 * sequence (flash-decoding).
 *
 * Grid (token, kv head, split); one CTA of 128 threads (4 warps) handles
 * the whole group of G = n_head / n_kv query heads of its kv head, so each
 * K and V row is read once per group. The split's position range is
 * computed on the device from pos[t] (n_pos = pos + 1 positions cut into
 * chunks of at least AT_MIN_CHUNK; the n_eff splits that hold any are a
 * prefix), so the launch depends only on n_tok, n_head and n_ctx and can be
 * captured in a CUDA graph; the CTAs of empty splits return at once. A CTA
 * walks its range in tiles of 32 positions, one per lane, and every load
 * of a tile is issued before any of it is used (the next tile's K while
 * this one's softmax and V run):
 *   1. scores: warp w dots the 8-element K segments w, w + 4, ... of its
 *      lane's position with the G pre-scaled queries held in shared memory
 *      (broadcast reads); the 4 warps' partial sums are added in warp order;
 *   2. online softmax: warp w updates heads g = w, w+4, ... (running max m,
 *      sum l, rescale factor alpha), lane = position;
 *   3. V: thread (4-element slice d, position group pg) accumulates
 *      acc[g][d..d+3] += p[g][pos] V[pos][d..d+3] over its positions.
 * At the end the position groups are summed in shared memory (fixed order).
 * With one split holding positions (n_eff <= 1: short contexts, prefill)
 * the CTA writes the normalized output itself; else each writes the
 * partial (m, l, acc) of its split, and the partials are merged:
 * ntx_cuda_attention in a second kernel (ntx_attn_combine_kernel),
 * ntx_cuda_attention_q8 in the same launch: every non-empty split CTA
 * counts itself in a per-(token, kv head) counter in the workspace after a
 * memory fence, and the n_eff-th merges the G heads and resets the counter
 * (so a CUDA graph can replay it). Both merges run the same arithmetic
 * (at_merge_w, at_merge_d), so the two entry points give bitwise the same
 * output; ntx_cuda_attention_q8 can write the output in q8 form as well
 * (ntx_q8_store8, in the consumer's format), which saves the quantization
 * kernel before the output projection.
 *
 * A prefill (more tokens than NTX_CUDA_GEMV_MAX_TOK, one split) takes
 * ntx_attn_prefill_kernel instead: the same phases over tiles of 128
 * positions, thread per position for the scores.
 *
 * Batch invariance: for n_tok <= NTX_CUDA_GEMV_MAX_TOK the number of splits
 * is that of a single token (at_splits), so a token's chunks, their tiles
 * and the merge order depend on its pos only. */
#include "common.cuh"

#define AT_THREADS 128
#define AT_WARPS (AT_THREADS / 32)
#define AT_TILE 32 /* positions per tile: one per lane */
#define AP_TILE 128 /* prefill kernel: positions per tile, one per thread */
#define AT_MIN_CHUNK 32
#define AT_MAX_SPLIT 64 /* two per lane in at_merge_w */
#define AT_MAX_HD 256

struct at_args {
	float *out;
	const float *q;
	int n_tok, n_head, G, hd, n_kv, n_ctx, n_seq, n_split;
	int min_chunk; /* positions per split at least (AT_MIN_CHUNK) */
	const void *kc, *vc;
	const int32_t *seq, *pos;
	float *part_acc; /* [n_tok][n_head][n_split][hd] */
	float2 *part_ml; /* [n_tok][n_head][n_split] (m, l) */
	unsigned *cnt;   /* [n_tok][n_kv] split counters (fused merge), or NULL */
	int8_t *xqs;     /* q8 output [n_tok][n_head * hd], or NULL */
	float2 *xds;     /* its (d, d*sum) [n_tok][n_head * hd / 32] */
	int fmt;         /* its format (NTX_Q8F_*) */
	float scale;
	int prefetch;    /* decode: the first tile into L2 before the PDL wait */
};

/* Splits of n_pos positions that hold any (a prefix of the n_split). */
__device__ __forceinline__ int at_n_eff(int n_pos, int n_split, int min_chunk)
{
	int chunk = (n_pos + n_split - 1) / n_split;

	if (chunk < min_chunk)
		chunk = min_chunk;
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
 * head), one warp, each (m, l) loaded once (lane s and s + 32): M = max m_s,
 * L = sum exp(m_s - M) l_s (per lane, then the butterfly),
 * w[s] = exp(m_s - M) / L. */
__device__ __forceinline__ void at_merge_w(const at_args &a, int64_t p0, int n_eff, int lane,
					   float *w)
{
	const float2 none = make_float2(-INFINITY, 0.0f);
	const float2 v0 = lane < n_eff ? __ldcg(&a.part_ml[p0 + lane]) : none;
	const float2 v1 = lane + 32 < n_eff ? __ldcg(&a.part_ml[p0 + lane + 32]) : none;
	float M = ntx_warp_max(fmaxf(v0.x, v1.x)), L = 0.0f;

	if (lane < n_eff)
		L = __fmaf_rn(expf(__fsub_rn(v0.x, M)), v0.y, L);
	if (lane + 32 < n_eff)
		L = __fmaf_rn(expf(__fsub_rn(v1.x, M)), v1.y, L);
	L = ntx_warp_sum(L);
	if (lane < n_eff)
		w[lane] = __fdiv_rn(expf(__fsub_rn(v0.x, M)), L);
	if (lane + 32 < n_eff)
		w[lane + 32] = __fdiv_rn(expf(__fsub_rn(v1.x, M)), L);
}

/* Merged elements d..d+3 of the head (d a multiple of 4): for each, the
 * sum over the splits in order. */
__device__ __forceinline__ float4 at_merge_d4(const at_args &a, int64_t p0, int n_eff, const float *w,
					      int d)
{
	float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

#pragma unroll 16
	for (int s = 0; s < n_eff; s++) {
		const float4 v = __ldcg((const float4 *)&a.part_acc[(p0 + s) * a.hd + d]);

		acc.x = __fmaf_rn(w[s], v.x, acc.x), acc.y = __fmaf_rn(w[s], v.y, acc.y);
		acc.z = __fmaf_rn(w[s], v.z, acc.z), acc.w = __fmaf_rn(w[s], v.w, acc.w);
	}
	return acc;
}

/* Split s of n_pos positions: [*beg, *end), possibly empty. */
__device__ __forceinline__ void at_range(int n_pos, int n_split, int min_chunk, int s, int *beg,
					 int *end)
{
	int chunk = (n_pos + n_split - 1) / n_split;

	if (chunk < min_chunk)
		chunk = min_chunk;
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

/* Before the PDL wait (decode kernel): the K and V rows of this CTA's first
 * tile into L2, so that its loads after the wait hit there while the kernel
 * before (rope_store) still runs. A hint only: L2 is coherent with that
 * kernel's writes, and pos / seq (copied from the host before any kernel of
 * the step) are range-checked, so the addresses stay inside the cache. */
template <bool F16>
__device__ __forceinline__ void at_prefetch(const at_args &a, int t, int kvh, int split)
{
	int n_pos, sq, beg, end;

	if (!at_valid(a, t, &n_pos, &sq))
		return;
	const int n_eff = at_n_eff(n_pos, a.n_split, a.min_chunk);

	if (split >= (n_eff > 1 ? n_eff : 1))
		return;
	at_range(n_pos, a.n_split, a.min_chunk, split, &beg, &end);

	const int rowb = a.hd * (F16 ? 2 : 4), lpr = (rowb + 127) / 128;
	const int np = min(AT_TILE, end - beg);

	for (int i = threadIdx.x; i < np * lpr; i += AT_THREADS) {
		const int64_t off = (((int64_t)sq * a.n_ctx + beg + i / lpr) * a.n_kv + kvh) * rowb +
				    (int64_t)(i % lpr) * 128;

		asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)a.kc + off));
		asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)a.vc + off));
	}
}

/* 8 consecutive cache elements, raw (F16: r[0]; F32: r[0], r[1]), and as
 * floats. */
template <bool F16> __device__ __forceinline__ void at_raw8(const void *base, int64_t off, uint4 *r)
{
	if constexpr (F16) {
		r[0] = *(const uint4 *)((const __half *)base + off);
	} else {
		const uint4 *p = (const uint4 *)((const float *)base + off);

		r[0] = p[0], r[1] = p[1];
	}
}

template <bool F16> __device__ __forceinline__ void at_cvt8(const uint4 *r, float *f)
{
	if constexpr (F16) {
		const uint32_t w[4] = { r[0].x, r[0].y, r[0].z, r[0].w };

#pragma unroll
		for (int i = 0; i < 4; i++) {
			const float2 t = __half22float2(*(const __half2 *)&w[i]);

			f[2 * i] = t.x, f[2 * i + 1] = t.y;
		}
	} else {
		const uint32_t w[8] = { r[0].x, r[0].y, r[0].z, r[0].w, r[1].x, r[1].y, r[1].z, r[1].w };

#pragma unroll
		for (int i = 0; i < 8; i++)
			f[i] = __uint_as_float(w[i]);
	}
}

/* 4 consecutive cache elements, raw (F16: .x, .y) and as floats. */
template <bool F16> __device__ __forceinline__ uint4 at_raw4(const void *base, int64_t off)
{
	if constexpr (F16) {
		const uint2 v = *(const uint2 *)((const __half *)base + off);

		return make_uint4(v.x, v.y, 0u, 0u);
	} else {
		return *(const uint4 *)((const float *)base + off);
	}
}

template <bool F16> __device__ __forceinline__ void at_cvt4(uint4 r, float *f)
{
	if constexpr (F16) {
		const float2 a = __half22float2(*(const __half2 *)&r.x);
		const float2 b = __half22float2(*(const __half2 *)&r.y);

		f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
	} else {
		f[0] = __uint_as_float(r.x), f[1] = __uint_as_float(r.y);
		f[2] = __uint_as_float(r.z), f[3] = __uint_as_float(r.w);
	}
}

/* The G heads' running sums: acc[g] *= alpha[g] (online-softmax rescale). */
template <int GMAX>
__device__ __forceinline__ void at_rescale(float (*acc)[4], const float *alpha, int G)
{
#pragma unroll
	for (int g = 0; g < GMAX; g++) {
		if (g < G) {
			const float al = alpha[g];

			acc[g][0] *= al, acc[g][1] *= al, acc[g][2] *= al, acc[g][3] *= al;
		}
	}
}

/* acc[g] += p[g * ps] * vf for the G heads (vf: 4 elements of one V row). */
template <int GMAX>
__device__ __forceinline__ void at_add_v(float (*acc)[4], const float *p, int ps, const float *vf, int G)
{
#pragma unroll
	for (int g = 0; g < GMAX; g++) {
		if (g < G) {
			const float w = p[g * ps];

			acc[g][0] += w * vf[0], acc[g][1] += w * vf[1];
			acc[g][2] += w * vf[2], acc[g][3] += w * vf[3];
		}
	}
}

/* s[g] += q[g][c..c+7] . kf for the G heads (qs: [G][hd] in shared memory). */
template <int GMAX>
__device__ __forceinline__ void at_dot8(float *s, const float *qs, int hd, int c, const float *kf, int G)
{
#pragma unroll
	for (int g = 0; g < GMAX; g++) {
		if (g < G) {
			const float4 q0 = *(const float4 *)(qs + g * hd + c);
			const float4 q1 = *(const float4 *)(qs + g * hd + c + 4);

			s[g] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] +
				q1.y * kf[5] + q1.z * kf[6] + q1.w * kf[7];
		}
	}
}

/* Where a CTA's threads sit in a tile (hd elements per cache row). */
struct at_geo {
	int64_t rs, kv0; /* cache row stride, this (sequence, kv head)'s row 0 (elements) */
	int lane, warp, n_seg, tpp, n_pg, dq, pg;
};

/* This warp's K segments of the lane's position t0 + lane (SEGW = the most
 * per warp). */
template <bool F16, int SEGW>
__device__ __forceinline__ void at_load_k(const at_args &a, const at_geo &g, int t0, int np,
					  uint4 (*kr)[2])
{
	if (g.lane < np) {
		const int64_t ko = g.kv0 + (int64_t)(t0 + g.lane) * g.rs;

#pragma unroll
		for (int j = 0; j < SEGW; j++) {
			const int sg = g.warp + AT_WARPS * j;

			if (sg < g.n_seg)
				at_raw8<F16>(a.kc, ko + 8 * sg, kr[j]);
		}
	}
}

/* This thread's V slice of the tile's positions pg, pg + n_pg, ... */
template <bool F16, int VMAX>
__device__ __forceinline__ void at_load_v(const at_args &a, const at_geo &g, int t0, int np,
					  uint4 *vr)
{
	if (g.pg < g.n_pg) {
#pragma unroll
		for (int j = 0; j < VMAX; j++) {
			const int i = g.pg + g.n_pg * j;

			if (i < np)
				vr[j] = at_raw4<F16>(a.vc, g.kv0 + (int64_t)(t0 + i) * g.rs + 4 * g.dq);
		}
	}
}

/* Fused merge: called by every thread of each of the n_eff non-empty split
 * CTAs of (t, kvh) after it wrote its partial. The last CTA to arrive
 * merges the G heads' partials into out (and the q8 output), then resets
 * the counter. o is shared scratch of G * hd floats. */
template <int GMAX> __device__ __forceinline__ void at_merge(const at_args &a, int t, int kvh, int n_eff, float *o)
{
	__shared__ float w[GMAX][AT_MAX_SPLIT]; /* exp(m_s - M) / L */
	__shared__ int last;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.G, hd = a.hd;
	unsigned *cnt = a.cnt + (int64_t)t * a.n_kv + kvh;

	__threadfence(); /* this CTA's partials are visible before it counts */
	__syncthreads();
	if (tid == 0)
		last = atomicAdd(cnt, 1u) == (unsigned)n_eff - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	for (int g = warp; g < G; g += AT_WARPS)
		at_merge_w(a, ((int64_t)t * a.n_head + (int64_t)kvh * G + g) * a.n_split, n_eff, lane,
			   w[g]);
	__syncthreads();
	for (int i = 4 * tid; i < G * hd; i += 4 * AT_THREADS) {
		const int g = i / hd, d = i % hd;
		const int64_t p0 = ((int64_t)t * a.n_head + (int64_t)kvh * G + g) * a.n_split;
		const float4 acc = at_merge_d4(a, p0, n_eff, w[g], d);

		*(float4 *)&a.out[((int64_t)t * a.n_head + (int64_t)kvh * G + g) * hd + d] = acc;
		*(float4 *)&o[i] = acc;
	}
	if (tid == 0)
		*cnt = 0; /* every split has counted: ready for the next call */
	if (a.xqs) {
		__syncthreads();
		at_store_q8(a, o, G * hd, t, (int64_t)kvh * G * hd);
	}
}

/* The end of a CTA: the position groups' accumulators summed in shared
 * memory red (fixed order); with one split holding every position (or none:
 * n_eff <= 1) the normalized output (and its q8 form), else this split's
 * partial (m, l, acc), merged by the last CTA when the counters are there. */
template <int GMAX>
__device__ __forceinline__ void at_finish(const at_args &a, int t, int kvh, int split, int n_eff,
					  int pg, int n_pg, int dq, const float (*acc)[4], const float *ml,
					  float *red)
{
	const int G = a.G, hd = a.hd;

	if (pg < n_pg) {
#pragma unroll
		for (int g = 0; g < GMAX; g++)
			if (g < G)
				*(float4 *)(red + ((int64_t)pg * G + g) * hd + 4 * dq) =
					make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
	}
	__syncthreads();

	const bool direct = n_eff <= 1;

	for (int i = threadIdx.x; i < G * hd; i += AT_THREADS) {
		const int g = i / hd, d = i % hd, h = kvh * G + g;
		float s = 0.0f;

		for (int j = 0; j < n_pg; j++)
			s += red[((int64_t)j * G + g) * hd + d];
		if (direct) {
			s /= ml[GMAX + g]; /* 0/0 = NaN if invalid */
			a.out[((int64_t)t * a.n_head + h) * hd + d] = s;
			red[i] = s; /* only this thread reads column i above */
		} else {
			const int64_t pi = ((int64_t)t * a.n_head + h) * a.n_split + split;

			a.part_acc[pi * hd + d] = s;
			if (d == 0)
				a.part_ml[pi] = make_float2(ml[g], ml[GMAX + g]);
		}
	}
	if (direct) {
		if (a.xqs) {
			__syncthreads();
			at_store_q8(a, red, G * hd, t, (int64_t)kvh * G * hd);
		}
	} else if (a.cnt) {
		at_merge<GMAX>(a, t, kvh, n_eff, red);
	}
}

/* Shared floats past the queries and (m, l, alpha): the partial scores
 * [AT_WARPS][GMAX][AT_TILE] and weights [GMAX][AT_TILE] of a tile, at the
 * end the position groups' sums [n_pg][G][hd]. */
static size_t at_tail_floats(int GMAX, int G, int hd)
{
	const size_t tile = (size_t)(AT_WARPS + 1) * GMAX * AT_TILE;
	const size_t red = (size_t)(AT_THREADS / (hd / 4)) * G * hd;

	return tile > red ? tile : red;
}

/* HDM: the largest head_dim of the instance (128 or 256): K segments per
 * warp SEGW = HDM / 32, V positions per thread and tile VMAX = HDM / 16. */
template <int GMAX, bool F16, int HDM>
__global__ void __launch_bounds__(AT_THREADS, GMAX >= 16 ? 3 : 5) ntx_attn_kernel(at_args a)
{
	constexpr int SEGW = HDM / 32, VMAX = HDM / 16;
	extern __shared__ __align__(16) float at_smem[];
	/* the latest tokens (most positions) first: a prefill's longest CTAs
	 * do not start in its last wave */
	const int t = a.n_tok - 1 - (int)blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
	const int G = a.G, hd = a.hd, tid = threadIdx.x;
	float *qs = at_smem;                 /* [G][hd] */
	float *ml = qs + G * hd;             /* m[GMAX], l[GMAX], alpha[GMAX], pad */
	float *sp = ml + 4 * GMAX;           /* partial scores [AT_WARPS][GMAX][AT_TILE] */
	float *pw = sp + AT_WARPS * GMAX * AT_TILE; /* weights [GMAX][AT_TILE] */
	float *red = sp;                     /* at the end: [n_pg][G][hd] */
	at_geo geo;
	int n_pos, sq, beg, end;

	/* pos and seq are copied from the host before any kernel of the step
	 * (at_prefetch), so a CTA with no split to run leaves before the PDL
	 * wait; split 0 of every (t, kvh) runs and waits, so the grid still
	 * completes after the kernel before (common.cuh) */
	if (!at_valid(a, t, &n_pos, &sq))
		n_pos = 0;
	const int n_eff = at_n_eff(n_pos, a.n_split, a.min_chunk);

	if (split >= (n_eff > 1 ? n_eff : 1))
		return; /* empty splits are not counted: the merge skips them */
	if (a.prefetch)
		at_prefetch<F16>(a, t, kvh, split);
	ntx_pdl_wait();
	ntx_pdl_trigger();
	at_range(n_pos, a.n_split, a.min_chunk, split, &beg, &end);
	geo.rs = (int64_t)a.n_kv * hd;
	geo.kv0 = ((int64_t)sq * a.n_ctx) * geo.rs + (int64_t)kvh * hd;
	geo.lane = tid & 31, geo.warp = tid >> 5;
	geo.n_seg = hd / 8, geo.tpp = hd / 4, geo.n_pg = AT_THREADS / geo.tpp;
	geo.dq = tid % geo.tpp, geo.pg = tid / geo.tpp;

	uint4 kr[SEGW][2], vr[VMAX];
	float acc[GMAX][4];

	/* the first tile's loads go out before the queries are staged */
	at_load_k<F16, SEGW>(a, geo, beg, min(AT_TILE, end - beg), kr);
	if constexpr (F16)
		at_load_v<F16, VMAX>(a, geo, beg, min(AT_TILE, end - beg), vr);
	for (int i = tid; i < G * hd; i += AT_THREADS)
		qs[i] = a.q[((int64_t)t * a.n_head + (int64_t)kvh * G) * hd + i] * a.scale;
	if (tid < GMAX) {
		ml[tid] = -INFINITY;
		ml[GMAX + tid] = 0.0f;
	}
#pragma unroll
	for (int g = 0; g < GMAX; g++)
		acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
	__syncthreads();

	for (int t0 = beg; t0 < end; t0 += AT_TILE) {
		const int np = min(AT_TILE, end - t0), nxt = t0 + AT_TILE;

		/* 1. partial scores over this warp's segments */
		{
			float s[GMAX];

#pragma unroll
			for (int g = 0; g < GMAX; g++)
				s[g] = 0.0f;
			if (geo.lane < np) {
#pragma unroll
				for (int j = 0; j < SEGW; j++) {
					const int sg = geo.warp + AT_WARPS * j;
					float kf[8];

					if (sg >= geo.n_seg)
						break;
					at_cvt8<F16>(kr[j], kf);
					at_dot8<GMAX>(s, qs, hd, 8 * sg, kf, G);
				}
			}
#pragma unroll
			for (int g = 0; g < GMAX; g++)
				if (g < G)
					sp[(geo.warp * GMAX + g) * AT_TILE + geo.lane] = s[g];
		}
		if (nxt < end) /* the next tile's K is in flight through 2. and 3. */
			at_load_k<F16, SEGW>(a, geo, nxt, min(AT_TILE, end - nxt), kr);
		__syncthreads();

		/* 2. online softmax: warp w takes heads w, w + 4, ...; lane = position */
		for (int g = geo.warp; g < G; g += AT_WARPS) {
			float v = -INFINITY;

			if (geo.lane < np) {
				v = sp[g * AT_TILE + geo.lane];
#pragma unroll
				for (int w = 1; w < AT_WARPS; w++)
					v += sp[(w * GMAX + g) * AT_TILE + geo.lane];
			}
			const float m_old = ml[g], m_new = fmaxf(m_old, ntx_warp_max(v));
			const float e = expf(v - m_new); /* -inf -> 0 */
			const float sum = ntx_warp_sum(e);

			pw[g * AT_TILE + geo.lane] = e;
			if (geo.lane == 0) {
				const float alpha = expf(m_old - m_new); /* m_old = -inf -> 0 */

				ml[g] = m_new;
				ml[GMAX + g] = ml[GMAX + g] * alpha + sum;
				ml[2 * GMAX + g] = alpha;
			}
		}
		if constexpr (!F16)
			at_load_v<F16, VMAX>(a, geo, t0, np, vr);
		__syncthreads();

		/* 3. weighted V */
		if (geo.pg < geo.n_pg) {
			at_rescale<GMAX>(acc, ml + 2 * GMAX, G);
#pragma unroll
			for (int j = 0; j < VMAX; j++) {
				const int i = geo.pg + geo.n_pg * j;
				float vf[4];

				if (i >= np)
					break;
				at_cvt4<F16>(vr[j], vf);
				at_add_v<GMAX>(acc, pw + i, AT_TILE, vf, G);
			}
		}
		if constexpr (F16)
			if (nxt < end)
				at_load_v<F16, VMAX>(a, geo, nxt, min(AT_TILE, end - nxt), vr);
		__syncthreads(); /* sp and pw are rewritten by the next tile */
	}

	at_finish<GMAX>(a, t, kvh, split, n_eff, geo.pg, geo.n_pg, geo.dq, acc, ml, red);
}

/* Prefill (more than NTX_CUDA_GEMV_MAX_TOK tokens, one split): grid (token,
 * kv head), tiles of AP_TILE positions, one per thread for the scores (its
 * K row read 16 bytes at a time, all of them in flight), the softmax and
 * V as in the decode kernel. A prefill has many long CTAs and fills the GPU
 * by their number; per CTA this shape keeps 4x the bytes of a 32-position
 * tile in flight per phase, which is what the long ones need (29% faster on
 * a 512-token prefill than the decode kernel, PERF-NOTES.md). */
template <int GMAX, bool F16>
__global__ void __launch_bounds__(AT_THREADS, GMAX >= 16 ? 3 : 5) ntx_attn_prefill_kernel(at_args a)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	extern __shared__ __align__(16) float at_smem[];
	const int t = a.n_tok - 1 - (int)blockIdx.x, kvh = blockIdx.y; /* longest first */
	const int G = a.G, hd = a.hd, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int tpp = hd / 4, n_pg = AT_THREADS / tpp, dq = tid % tpp, pg = tid / tpp;
	float *qs = at_smem;       /* [G][hd] */
	float *ml = qs + G * hd;   /* m[GMAX], l[GMAX], alpha[GMAX], pad */
	float *sc = ml + 4 * GMAX; /* scores [AP_TILE][GMAX], at the end [n_pg][G][hd] */
	int n_pos, sq;

	if (!at_valid(a, t, &n_pos, &sq))
		n_pos = 0;

	const int64_t rs = (int64_t)a.n_kv * hd;
	const int64_t kv0 = ((int64_t)sq * a.n_ctx) * rs + (int64_t)kvh * hd;
	float acc[GMAX][4];

	for (int i = tid; i < G * hd; i += AT_THREADS)
		qs[i] = a.q[((int64_t)t * a.n_head + (int64_t)kvh * G) * hd + i] * a.scale;
	if (tid < GMAX) {
		ml[tid] = -INFINITY;
		ml[GMAX + tid] = 0.0f;
	}
#pragma unroll
	for (int g = 0; g < GMAX; g++)
		acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
	__syncthreads();

	for (int t0 = 0; t0 < n_pos; t0 += AP_TILE) {
		const int np = min(AP_TILE, n_pos - t0);

		/* 1. scores: thread = position */
		{
			float s[GMAX];

#pragma unroll
			for (int g = 0; g < GMAX; g++)
				s[g] = tid < np ? 0.0f : -INFINITY;
			if (tid < np) {
				const int64_t ko = kv0 + (int64_t)(t0 + tid) * rs;

#pragma unroll 8 /* half a 128-wide K row in flight at once */
				for (int c = 0; c < hd; c += 8) {
					uint4 r[2];
					float kf[8];

					at_raw8<F16>(a.kc, ko + c, r);
					at_cvt8<F16>(r, kf);
					at_dot8<GMAX>(s, qs, hd, c, kf, G);
				}
			}
#pragma unroll
			for (int g = 0; g < GMAX; g++)
				sc[tid * GMAX + g] = s[g];
		}
		__syncthreads();

		/* 2. online softmax, one warp per head */
		for (int g = warp; g < G; g += AT_WARPS) {
			float v[AP_TILE / 32], mx = -INFINITY, sum = 0.0f;

#pragma unroll
			for (int j = 0; j < AP_TILE / 32; j++) {
				v[j] = sc[(lane + 32 * j) * GMAX + g];
				mx = fmaxf(mx, v[j]);
			}
			const float m_old = ml[g], m_new = fmaxf(m_old, ntx_warp_max(mx));

#pragma unroll
			for (int j = 0; j < AP_TILE / 32; j++) {
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
			at_rescale<GMAX>(acc, ml + 2 * GMAX, G);
#pragma unroll 8
			for (int i = pg; i < np; i += n_pg) {
				float vf[4];

				at_cvt4<F16>(at_raw4<F16>(a.vc, kv0 + (int64_t)(t0 + i) * rs + 4 * dq), vf);
				at_add_v<GMAX>(acc, sc + i * GMAX, 1, vf, G);
			}
		}
		__syncthreads(); /* sc is rewritten by the next tile */
	}
	at_finish<GMAX>(a, t, kvh, 0, 1, pg, n_pg, dq, acc, ml, sc);
}

/* One CTA per (token, head), thread per element of the head; the same
 * arithmetic as the fused merge (at_merge). Tokens with one split (or
 * none) got their output from the attention kernel. */
__global__ void ntx_attn_combine_kernel(at_args a)
{
	ntx_pdl_wait();
	ntx_pdl_trigger();

	__shared__ float w[AT_MAX_SPLIT];
	const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
	const int64_t p0 = ((int64_t)t * a.n_head + h) * a.n_split;
	int n_pos, sq, n_eff;

	if (!at_valid(a, t, &n_pos, &sq))
		return;
	n_eff = at_n_eff(n_pos, a.n_split, a.min_chunk);
	if (n_eff <= 1)
		return;
	if (threadIdx.x < 32)
		at_merge_w(a, p0, n_eff, threadIdx.x, w);
	__syncthreads();
	for (int d = 4 * threadIdx.x; d < a.hd; d += 4 * blockDim.x)
		*(float4 *)&a.out[((int64_t)t * a.n_head + h) * a.hd + d] = at_merge_d4(a, p0, n_eff, w, d);
}

/* The switch attn_chunk (NTX_ATTN_CHUNK): the least positions per split, a
 * multiple of AT_MIN_CHUNK (for measuring). */
static int at_min_chunk(void)
{
	static_assert(AT_MIN_CHUNK == 32, "tuning.cu checks attn_chunk as multiples of 32");
	return ntx_cu_knob(NTX_CU_ATTN_CHUNK);
}

/* attn_prefetch = 0 (NTX_ATTN_PREFETCH=0): no L2 prefetch before the PDL
 * wait (for measuring). */
static int at_prefetch_on(void)
{
	return ntx_cu_knob(NTX_CU_ATTN_PREFETCH);
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
static int at_launch_prefill(const at_args &a, cudaStream_t s, struct ntx_err *err)
{
	size_t tail = (size_t)AP_TILE * GMAX, red = (size_t)(AT_THREADS / (a.hd / 4)) * a.G * a.hd;
	const size_t smem = ((size_t)a.G * a.hd + 4 * GMAX + (tail > red ? tail : red)) * sizeof(float);
	dim3 grid((unsigned)a.n_tok, (unsigned)a.n_kv, 1);

	if (ntx_cu_smem(ntx_attn_prefill_kernel<GMAX, F16>, smem, "attention: cudaFuncSetAttribute", err))
		return -1;
	return ntx_cu_launched("attention",
			       ntx_launch(ntx_attn_prefill_kernel<GMAX, F16>, grid, AT_THREADS, smem, s, a),
			       err);
}

template <int GMAX, bool F16, int HDM>
static int at_launch(const at_args &a, cudaStream_t s, struct ntx_err *err)
{
	if (a.n_split == 1 && a.n_tok > NTX_CUDA_GEMV_MAX_TOK)
		return at_launch_prefill<GMAX, F16>(a, s, err);
	const size_t smem = ((size_t)a.G * a.hd + 4 * GMAX + at_tail_floats(GMAX, a.G, a.hd)) *
			    sizeof(float);
	dim3 grid((unsigned)a.n_tok, (unsigned)a.n_kv, (unsigned)a.n_split);

	if (ntx_cu_smem(ntx_attn_kernel<GMAX, F16, HDM>, smem, "attention: cudaFuncSetAttribute", err))
		return -1;
	if (ntx_cu_launched("attention",
			    ntx_launch(ntx_attn_kernel<GMAX, F16, HDM>, grid, AT_THREADS, smem, s, a),
			    err))
		return -1;
	if (a.n_split > 1 && !a.cnt)
		return ntx_cu_launched("attention combine",
				       ntx_launch(ntx_attn_combine_kernel, (unsigned)(a.n_tok * a.n_head),
						  a.hd <= 128 ? 32 : 64, 0, s, a),
				       err);
	return 0;
}

template <bool F16, int HDM> static int at_g(const at_args &a, cudaStream_t s, struct ntx_err *err)
{
	if (a.G <= 1)
		return at_launch<1, F16, HDM>(a, s, err);
	if (a.G <= 2)
		return at_launch<2, F16, HDM>(a, s, err);
	if (a.G <= 4)
		return at_launch<4, F16, HDM>(a, s, err);
	if (a.G <= 8)
		return at_launch<8, F16, HDM>(a, s, err);
	return at_launch<16, F16, HDM>(a, s, err);
}

template <bool F16> static int at_hd(const at_args &a, cudaStream_t s, struct ntx_err *err)
{
	return a.hd <= 128 ? at_g<F16, 128>(a, s, err) : at_g<F16, AT_MAX_HD>(a, s, err);
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
	a.min_chunk = at_min_chunk();
	a.prefetch = at_prefetch_on();
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
	return kv->kv_f16 ? at_hd<true>(a, st, err) : at_hd<false>(a, st, err);
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
