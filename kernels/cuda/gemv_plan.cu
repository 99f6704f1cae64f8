/* gemv_plan.cu - what the GEMV files (gemv.cu, gemv_q8.cu, gemv_dl.cu)
 * share on the host: which weight types take q8 activations
 * (ntx_cuda_wtype_q8) and the work split (ntx_gv_want_warps, ntx_gv_plan;
 * gemv.cuh says how rows are cut). They call into this file, never the
 * other way round: gemv.cu dispatches to gemv_q8.cu and gemv_dl.cu, and
 * those two need only this. */
#include <atomic>

#include "gemv.cuh"

/* ---- work split ---- */

/* SMs of the device current at the first call (100 when it cannot be
 * asked), for every later call. */
static int gv_sm_count(void)
{
	static std::atomic<int> n{ 0 };
	int v = n.load(std::memory_order_relaxed), dev = 0;

	if (!v) {
		if (cudaGetDevice(&dev) != cudaSuccess ||
		    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0)
			v = 100;
		cudaGetLastError();
		n.store(v, std::memory_order_relaxed); /* racing first calls store the same */
	}
	return v;
}

int ntx_gv_want_warps(void)
{
	return gv_sm_count() * 32;
}

/* Warps wanted in flight: about 32 per SM. Fewer row groups than that:
 * split rows over 2 or 4 warps, as long as each warp keeps whole stages. */
int ntx_gv_plan(gv_args &a, int rh, int n_st)
{
	const int64_t want = (int64_t)gv_sm_count() * 32;
	int64_t groups = 0;
	int ks = 1;

	for (int i = 0; i < a.n_seg; i++) {
		a.seg[i].g0 = (int)groups;
		groups += (a.seg[i].n_out + rh - 1) / rh;
	}
	while (ks < GV_WARPS && groups * ks < want && n_st >= 2 * ks)
		ks *= 2;
	a.ks = ks;
	return (int)((groups + GV_WARPS / ks - 1) / (GV_WARPS / ks));
}

/* ---- weight types ---- */

extern "C" int ntx_cuda_wtype_q8(uint32_t wtype)
{
	if (wtype & NTX_CUDA_SPLIT)
		return ntx_cu_type_bs(wtype) ? 1 : -1;
	switch (wtype) {
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q5_0:
	case NTX_TYPE_Q8_0:
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
	case NTX_TYPE_Q6_K:
		return 1;
	case NTX_TYPE_F32:
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16:
		return 0;
	default:
		return -1;
	}
}
