/* gemv_dl.cu - the direct-load GEMV for quantized weights whose blocks sit
 * at 16-byte boundaries (Q4_K, Q5_K in GGUF layout; Q4_0, Q8_0, Q6_K in
 * split rows, ntx_cuda.h), with q8 activations, over one matrix or several
 * sharing one input (any mix of these types in one launch), and the fused
 * gate/up (NM = 2).
 *
 * Each lane loads its weight bytes with aligned 16-byte loads straight into
 * registers (dlmath.cuh: which lane holds which bytes); a warp's load
 * instruction reads whole 32-byte sectors of 32 / LPB consecutive blocks
 * (its "step"). A warp owns RH rows (RH gate and RH up rows for NM = 2) and
 * every ks-th step of them (ks warps share a row group); per iteration it
 * issues the loads of U steps for all its rows before using any, so that
 * with ~32 warps per SM some 40-70 KB per SM are in flight. Activations come
 * through L1 (each load serves the warp's R rows); the reduction and
 * epilogue are gemv.cuh's.
 *
 * Work split per segment, from the segment's shape alone (so a segment of
 * ntx_cuda_gemv_multi computes exactly what ntx_cuda_gemv computes on it):
 * ks is the smallest of 1, 2, 4 that gives about 32 warps per SM, keeping a
 * step per warp; each segment has its own range of CTAs. The accumulation
 * order of a (row, token) value depends on ks only, never on n_tok or U:
 * batch invariant. Q4_K and split Q6_K take the canonical chain
 * (dlmath.cuh ntx_dlk_*: per block exact integers over its 8 lanes, one
 * float step per block slot), whose values gemv_mma.cu gives for 2..8
 * tokens on tensor cores, bit for bit. */
#include <atomic>

#include "gemv.cuh"
#include "dlmath.cuh"

struct dl_seg {
	const uint8_t *w;  /* (n_out, n_in); the gate for NM = 2 */
	const uint8_t *w1; /* up weights for NM = 2 */
	float *y;
	uint64_t row_bytes;
	int n_out, type, epi;
	int ks;            /* warps per row group */
	int cta0;          /* first CTA of the segment */
};

struct dl_args {
	dl_seg seg[GV_MAX_SEG];
	int n_seg, n_in, n_tok;
	const int8_t *xqs;
	const float2 *xds;
	int early; /* weight loads before the PDL wait (gv_args.early) */
};

/* Rows per warp: 2 (NM = 1), or 1 gate + 1 up row. */
template <int NM> __host__ __device__ constexpr int dl_rh()
{
	return NM == 2 ? 1 : 2;
}

/* Blocks per step of type t (host). */
static int dl_bps(int t)
{
	switch (t) {
	case NTX_TYPE_Q4_K: return 32 / ntx_dl<NTX_TYPE_Q4_K>::LPB;
	case NTX_TYPE_Q5_K: return 32 / ntx_dl<NTX_TYPE_Q5_K>::LPB;
	case NTX_SPLIT | NTX_TYPE_Q6_K: return 32 / ntx_dl<NTX_SPLIT | NTX_TYPE_Q6_K>::LPB;
	case NTX_SPLIT | NTX_TYPE_Q4_0: return 32 / ntx_dl<NTX_SPLIT | NTX_TYPE_Q4_0>::LPB;
	default: return 32 / ntx_dl<NTX_SPLIT | NTX_TYPE_Q8_0>::LPB;
	}
}

/* One step of one warp, every lane accumulating its own floats
 * (ntx_dl_dot: Q5_K, split Q4_0 and Q8_0). */
template <int T, int NT, int NM>
__device__ __forceinline__ void dl_step(const dl_args &a, const ntx_dlr<T> *raw, int b, int j, float *acc)
{
	constexpr int RH = dl_rh<NM>(), R = RH * NM, HALF = gv_pow2(RH * NT);
	ntx_dlw w[R];

#pragma unroll
	for (int r = 0; r < R; r++)
		ntx_dl_decode<T>(raw[r], j, w[r]);
#pragma unroll
	for (int t = 0; t < NT; t++) {
		if (t >= a.n_tok)
			continue;
		ntx_dlx x;

		ntx_dl_xload<T>(a.xqs + (int64_t)t * a.n_in, a.xds + (int64_t)t * (a.n_in / 32), b, j, x);
#pragma unroll
		for (int r = 0; r < R; r++) {
			float &v = acc[(r / RH) * HALF + (r % RH) * NT + t];

			v = ntx_dl_dot<T>(w[r], x, v);
		}
	}
}

/* One step of one warp for the canonical K-quants (dlmath.cuh: ntx_dlk_*):
 * the block's integers are summed over its 8 lanes, then each lane adds
 * them to the float stream of its block slot bl. Lanes of a slot past the
 * last block (ok false: their 8 lanes agree) take part in the sums and
 * skip the float step. */
template <int T, int NT, int NM>
__device__ __forceinline__ void dlk_step(const dl_args &a, const ntx_dlr<T> *raw, int b, bool ok, int j,
					 float *acc)
{
	constexpr int RH = dl_rh<NM>(), R = RH * NM, LPB = ntx_dl<T>::LPB, HALF = gv_pow2(RH * NT);
	ntx_dlk w[R];

#pragma unroll
	for (int r = 0; r < R; r++)
		ntx_dlk_decode<T>(raw[r], j, w[r]);
#pragma unroll
	for (int t = 0; t < NT; t++) {
		if (t >= a.n_tok)
			continue;
		const float2 *xd = a.xds + (int64_t)t * (a.n_in / 32);
		ntx_dlx x;
		int sx[2], ip[R], mp[R];
		float dx = 0.0f;

		if (ok) {
			ntx_dl_xload<T>(a.xqs + (int64_t)t * a.n_in, xd, b, j, x);
			dx = ntx_ldg_f2(xd + 8 * (int64_t)b).x;
		} else {
			x.xa = x.xb = make_uint4(0, 0, 0, 0);
		}
		ntx_dlk_xsum(x, sx);
#pragma unroll
		for (int r = 0; r < R; r++) {
			ntx_dlk_dot<T>(w[r], x, sx, ip[r], mp[r]);
#pragma unroll
			for (int o = 1; o < LPB; o <<= 1) {
				ip[r] += __shfl_xor_sync(NTX_FULL_MASK, ip[r], o);
				if (T == NTX_TYPE_Q4_K)
					mp[r] += __shfl_xor_sync(NTX_FULL_MASK, mp[r], o);
			}
		}
		if (!ok)
			continue;
#pragma unroll
		for (int r = 0; r < R; r++) {
			float &v = acc[(r / RH) * HALF + (r % RH) * NT + t];

			v = ntx_dlk_acc<T>(ip[r], mp[r], dx, w[r].d, w[r].dm, v);
		}
	}
}

/* One warp's share of its row group for type T: steps kw, kw + ks, ... */
template <int T, int NT, int NM, int U>
__device__ __forceinline__ void dl_body(const dl_args &a, const dl_seg &sg, int row0, int kw, int ks,
					int lane, float *acc, bool &waited)
{
	constexpr int RH = dl_rh<NM>(), R = RH * NM, LPB = ntx_dl<T>::LPB, BPS = 32 / LPB;
	const int nb = a.n_in / ntx_qt<T>::BS, n_steps = (nb + BPS - 1) / BPS;
	const int j = lane % LPB, bl = lane / LPB;
	const uint8_t *rp[R];

#pragma unroll
	for (int r = 0; r < R; r++) /* rows past the end recompute the last (dropped) */
		rp[r] = (r < RH ? sg.w : sg.w1) + (uint64_t)min(row0 + r % RH, sg.n_out - 1) * sg.row_bytes;

	for (int s0 = kw; s0 < n_steps; s0 += U * ks) {
		ntx_dlr<T> raw[U][R];
		int b[U];
		bool ok[U];

#pragma unroll
		for (int u = 0; u < U; u++) {
			b[u] = (s0 + u * ks) * BPS + bl;
			ok[u] = s0 + u * ks < n_steps && b[u] < nb;
#pragma unroll
			for (int r = 0; r < R; r++)
				if (ok[u])
					ntx_dl_load<T>(rp[r], nb, b[u], j, raw[u][r]);
		}
		if (!waited) { /* the first weights are in flight: now the activations */
			ntx_pdl_wait();
			ntx_pdl_trigger();
			waited = true;
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (s0 + u * ks >= n_steps) /* the whole warp */
				continue;
			if constexpr (T == NTX_TYPE_Q4_K || T == (NTX_SPLIT | NTX_TYPE_Q6_K))
				dlk_step<T, NT, NM>(a, raw[u], b[u], ok[u], j, acc);
			else if (ok[u])
				dl_step<T, NT, NM>(a, raw[u], b[u], j, acc);
		}
	}
}

/* The canonical K-quants' reduction: every lane of a slot holds its
 * stream, the warp's value is (a0 + a2) + (a1 + a3) (slots bl), the ks
 * warps of a row group are added in order; then the epilogue. */
template <int NT, int RH, int NM>
__device__ __forceinline__ void dlk_reduce_store(const float *acc, int lane, int warp, int ks, int kw, int active,
						 int row0, const gv_out &o, int n_tok)
{
	constexpr int HALF = gv_pow2(RH * NT), V = HALF * NM;
	static_assert(V <= 32, "too many values for one warp");
	__shared__ float red[GV_WARPS][32];
	float out = 0.0f, u = 0.0f;
	int rh, t, row;

#pragma unroll
	for (int i = 0; i < V; i++) {
		float v = acc[i] + __shfl_xor_sync(NTX_FULL_MASK, acc[i], 16);

		v = v + __shfl_xor_sync(NTX_FULL_MASK, v, 8);
		if (lane == i)
			out = v;
	}
	if (ks > 1) {
		red[warp][lane] = out;
		__syncthreads();
		if (kw)
			return;
		out = red[warp][lane];
		for (int k = 1; k < ks; k++)
			out += red[warp + k][lane];
	}
	if (!active)
		return;
	if constexpr (NM == 2)
		u = __shfl_sync(NTX_FULL_MASK, out, (lane + HALF) & 31);
	if (lane >= HALF)
		return;
	rh = lane / NT;
	t = lane % NT;
	row = row0 + rh;
	if (rh >= RH || t >= n_tok || row >= o.n_out)
		return;
	gv_store<NM>(o, t, row, out, u);
}

/* MINB CTAs of 4 warps per SM at least (registers: 64K / (128 MINB)). */
template <int NT, int NM, int U, int MINB>
__global__ void __launch_bounds__(GV_WARPS * 32, MINB) ntx_gemv_dl_kernel(dl_args a)
{
	constexpr int RH = dl_rh<NM>(), V = gv_pow2(RH * NT) * NM;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const dl_seg &sg = a.seg[gv_cta_seg(a.seg, a.n_seg)];
	const int ks = sg.ks, kw = warp % ks;
	const int row0 = (((int)blockIdx.x - sg.cta0) * (GV_WARPS / ks) + warp / ks) * RH;
	const int active = row0 < sg.n_out;
	const gv_out o = { sg.y, sg.n_out, sg.epi };
	float acc[V];
	/* with a.early, the PDL wait comes after the first step's weight loads
	 * (dl_body), so they overlap the kernel before (common.cuh) */
	bool waited = !a.early;

	if (waited) {
		ntx_pdl_wait();
		ntx_pdl_trigger();
	}
#pragma unroll
	for (int i = 0; i < V; i++)
		acc[i] = 0.0f;
	if (active) {
		switch (sg.type) {
		case NTX_TYPE_Q4_K: dl_body<NTX_TYPE_Q4_K, NT, NM, U>(a, sg, row0, kw, ks, lane, acc, waited); break;
		case NTX_TYPE_Q5_K: dl_body<NTX_TYPE_Q5_K, NT, NM, U>(a, sg, row0, kw, ks, lane, acc, waited); break;
		case NTX_SPLIT | NTX_TYPE_Q6_K:
			dl_body<NTX_SPLIT | NTX_TYPE_Q6_K, NT, NM, U>(a, sg, row0, kw, ks, lane, acc, waited);
			break;
		case NTX_SPLIT | NTX_TYPE_Q4_0:
			dl_body<NTX_SPLIT | NTX_TYPE_Q4_0, NT, NM, U>(a, sg, row0, kw, ks, lane, acc, waited);
			break;
		case NTX_SPLIT | NTX_TYPE_Q8_0:
			dl_body<NTX_SPLIT | NTX_TYPE_Q8_0, NT, NM, U>(a, sg, row0, kw, ks, lane, acc, waited);
			break;
		default: break;
		}
	}
	if (!waited) {
		ntx_pdl_wait();
		ntx_pdl_trigger();
	}
	if (sg.type == NTX_TYPE_Q4_K || sg.type == (NTX_SPLIT | NTX_TYPE_Q6_K))
		dlk_reduce_store<NT, RH, NM>(acc, lane, warp, ks, kw, active, row0, o, a.n_tok);
	else
		gv_reduce_store<NT, RH, NM>(acc, lane, warp, ks, kw, active, row0, o, a.n_tok);
}

int ntx_gv_dl_type(uint32_t t)
{
	return t == NTX_TYPE_Q4_K || t == NTX_TYPE_Q5_K || t == (NTX_SPLIT | NTX_TYPE_Q6_K) ||
	       t == (NTX_SPLIT | NTX_TYPE_Q4_0) || t == (NTX_SPLIT | NTX_TYPE_Q8_0);
}

int ntx_gv_dl_ks(int type, int n_out, int n_in, int nm)
{
	const int64_t want = ntx_gv_want_warps();
	const int rh = nm == 2 ? dl_rh<2>() : dl_rh<1>();
	const int64_t groups = (n_out + rh - 1) / rh;
	const int bps = dl_bps(type);
	const int steps = (n_in / ntx_cu_type_bs((uint32_t)type) + bps - 1) / bps;
	int ks = 1;

	while (ks < GV_WARPS && groups * ks < want && steps >= 2 * ks)
		ks *= 2;
	return ks;
}

/* Each segment's ks and CTA range; returns the grid size. */
static int dl_plan(dl_args &a, int nm)
{
	const int rh = nm == 2 ? dl_rh<2>() : dl_rh<1>();
	int cta = 0;

	for (int i = 0; i < a.n_seg; i++) {
		dl_seg &sg = a.seg[i];
		const int64_t groups = (sg.n_out + rh - 1) / rh;

		sg.ks = ntx_gv_dl_ks(sg.type, sg.n_out, a.n_in, nm);
		sg.cta0 = cta;
		cta += (int)((groups + GV_WARPS / sg.ks - 1) / (GV_WARPS / sg.ks));
	}
	return cta;
}

template <int NT, int NM, int U, int MINB>
static int dl_launch(dl_args &a, cudaStream_t s, struct ntx_err *err)
{
	const int grid = dl_plan(a, NM);

	return ntx_cu_launched(NM == 2 ? "gemv_swiglu_dl" : "gemv_dl",
			       ntx_launch(ntx_gemv_dl_kernel<NT, NM, U, MINB>, (unsigned)grid, GV_WARPS * 32, 0,
					  s, a),
			       err);
}

static std::atomic<int> g_variant{ -1 }; /* ntx_cuda_gemv_dl_variant */

extern "C" void ntx_cuda_gemv_dl_variant(int v)
{
	g_variant.store(v < 0 || v > 2 ? -1 : v, std::memory_order_relaxed);
}

/* The single-token shape: ntx_cuda_gemv_dl_variant's, else the switch
 * gemv_dl_shape's (NTX_GEMV_DL_SHAPE=0|1|2, for measuring), else -1. */
static int dl_variant(void)
{
	int v = g_variant.load(std::memory_order_relaxed);

	return v >= 0 ? v : ntx_cu_knob(NTX_CU_GEMV_DL_SHAPE);
}

/* One token: the shallow shape (1 step in flight, 8 CTAs per SM) for
 * every matrix. Alone it won for the 4096x4096 .. 14336x4096 matrices and
 * lost for the 128256-row heads and the GGUF Q4_K gate/up (PERF-NOTES.md,
 * version 4); since the first weight loads go out before the PDL wait it is
 * also the faster choice for those in the decode sequence: tg128 +0.5..1.9%
 * against that per-shape choice on 8B Q4_0, Q4_K_M, Q8_0 (version 5). */
template <int NM> static int dl_nt(dl_args &a, cudaStream_t s, struct ntx_err *err)
{
	if (a.n_tok <= 1) {
		int v = dl_variant();

		switch (v < 0 ? 1 : v) {
		case 1: return dl_launch<1, NM, 1, 8>(a, s, err);
		case 2: return dl_launch<1, NM, 2, 4>(a, s, err);
		default: return dl_launch<1, NM, 2, 5>(a, s, err);
		}
	}
	if (a.n_tok <= 2)
		return dl_launch<2, NM, 1, 4>(a, s, err);
	if (a.n_tok <= 4)
		return dl_launch<4, NM, 1, 4>(a, s, err);
	return dl_launch<8, NM, 1, 4>(a, s, err);
}

int ntx_gv_dl(int nm, const gv_args &g, cudaStream_t s, struct ntx_err *err)
{
	dl_args a;

	for (int i = 0; i < g.n_seg; i++) {
		const gv_seg &gs = g.seg[i];

		if (!ntx_gv_dl_type((uint32_t)gs.type) || gs.row_bytes % 16 || (uintptr_t)gs.w % 16 ||
		    (nm == 2 && (uintptr_t)g.w1 % 16))
			return ntx_err_set(err, NTX_EUNSUP, "gemv: type %s has no direct-load kernel here",
					   ntx_cu_type_name((uint32_t)gs.type));
	}
	memset(&a, 0, sizeof a);
	for (int i = 0; i < g.n_seg; i++) {
		const gv_seg &gs = g.seg[i];

		a.seg[i].w = gs.w;
		a.seg[i].w1 = g.w1;
		a.seg[i].y = gs.y;
		a.seg[i].row_bytes = gs.row_bytes;
		a.seg[i].n_out = gs.n_out;
		a.seg[i].type = gs.type;
		a.seg[i].epi = gs.epi;
	}
	a.n_seg = g.n_seg;
	a.n_in = g.n_in;
	a.n_tok = g.n_tok;
	a.xqs = g.xqs;
	a.xds = g.xds;
	a.early = g.early;
	return nm == 2 ? dl_nt<2>(a, s, err) : dl_nt<1>(a, s, err);
}

/* ---- split rows ---- */

#define SPLIT_MAX_ROW (96 * 1024)

extern "C" uint32_t ntx_cuda_split_type(uint32_t t, int64_t n_in)
{
	uint64_t rb;

	if (t != NTX_TYPE_Q4_0 && t != NTX_TYPE_Q8_0 && t != NTX_TYPE_Q6_K)
		return t;
	if (n_in <= 0 || n_in % ntx_cu_type_bs(t))
		return t;
	rb = ntx_cu_row_bytes(t, n_in);
	return rb % 16 || rb > SPLIT_MAX_ROW ? t : NTX_CUDA_SPLIT | t;
}

/* One CTA per row: the row into shared memory, then payloads and d's back. */
template <int T> __global__ void ntx_repack_kernel(uint8_t *w, uint64_t rb, int nb)
{
	/* no ntx_pdl_trigger: it writes weights, which the direct-load GEMV
	 * reads before its wait, so the next kernel must not start early */
	ntx_pdl_wait();

	constexpr int BB = ntx_qt<T>::BB, PB = BB - 2;
	extern __shared__ __align__(16) uint8_t rp_row[];
	uint8_t *row = w + (uint64_t)blockIdx.x * rb;

	for (uint64_t i = threadIdx.x; i < rb / 16; i += blockDim.x)
		((uint4 *)rp_row)[i] = ((const uint4 *)row)[i];
	__syncthreads();
	for (int64_t i = threadIdx.x; i < (int64_t)nb * PB; i += blockDim.x) {
		const uint8_t *q, *d;
		const int64_t b = i / PB;

		ntx_block_parts<T>(rp_row, nb, b, &q, &d);
		row[i] = q[i - b * PB];
	}
	for (int b = threadIdx.x; b < nb; b += blockDim.x) {
		const uint8_t *q, *d;

		ntx_block_parts<T>(rp_row, nb, b, &q, &d);
		row[(int64_t)nb * PB + 2 * b] = d[0];
		row[(int64_t)nb * PB + 2 * b + 1] = d[1];
	}
}

template <int T> static int repack_launch(uint8_t *w, uint64_t rb, int nb, int64_t n_out, cudaStream_t s,
					  struct ntx_err *err)
{
	if (ntx_cu_smem(ntx_repack_kernel<T>, rb, "repack: cudaFuncSetAttribute", err))
		return -1;
	for (int64_t r0 = 0; r0 < n_out; r0 += 65535) { /* grid.x limit for older launches */
		const int64_t nr = n_out - r0 < 65535 ? n_out - r0 : 65535;
		cudaError_t e = ntx_launch(ntx_repack_kernel<T>, (unsigned)nr, 256, rb, s, w + (uint64_t)r0 * rb, rb, nb);

		if (ntx_cu_launched("repack", e, err))
			return -1;
	}
	return 0;
}

extern "C" int ntx_cuda_repack(uint32_t t, void *w, int64_t n_in, int64_t n_out, ntx_stream_t s,
			       struct ntx_err *err)
{
	uint64_t rb;
	int nb;

	if (ntx_cuda_split_type(t, n_in) == t)
		return ntx_err_set(err, NTX_EINVAL, "repack: %s rows of %lld elements have no split layout",
				   ntx_cu_type_name(t), (long long)n_in);
	if (!w || !ntx_cu_aligned(w, 16) || n_out < 1)
		return ntx_err_set(err, NTX_EINVAL, "repack: weights must be non-NULL and 16-byte aligned, n_out >= 1");
	rb = ntx_cu_row_bytes(t, n_in);
	nb = (int)(n_in / ntx_cu_type_bs(t));
	switch (t) {
	case NTX_TYPE_Q4_0: return repack_launch<NTX_TYPE_Q4_0>((uint8_t *)w, rb, nb, n_out, (cudaStream_t)s, err);
	case NTX_TYPE_Q8_0: return repack_launch<NTX_TYPE_Q8_0>((uint8_t *)w, rb, nb, n_out, (cudaStream_t)s, err);
	default: return repack_launch<NTX_TYPE_Q6_K>((uint8_t *)w, rb, nb, n_out, (cudaStream_t)s, err);
	}
}
