/* common.cuh - what every kernels/cuda/*.cu shares: the C headers with C
 * linkage, error helpers (argument checks and launch checks that fill a
 * struct ntx_err), the switches (ntx_cu_knob, tuning.cu), the launch helper
 * (ntx_launch, programmatic dependent launch), cp.async and warp-level helpers, and the lane-parallel
 * q8 quantizer used by ntx_cuda_quantize_q8, the fused rmsnorm and
 * attention. */
#ifndef NTX_CUDA_COMMON_CUH
#define NTX_CUDA_COMMON_CUH

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" {
#include "err.h"
#include "tunables.h"
#include "types.h"
}
#include "ntx_kernels.h"
#include "ntx_cuda.h"

#include "blockmath.cuh"

static_assert(NTX_CUDA_Q8F_32 == NTX_Q8F_32 && NTX_CUDA_Q8F_Q8_0 == NTX_Q8F_Q8_0 &&
		      NTX_CUDA_Q8F_Q8_K == NTX_Q8F_Q8_K,
	      "q8 format numbers of ntx_cuda.h and blockmath.cuh");
static_assert(NTX_CUDA_SPLIT == NTX_SPLIT, "the split-row flag of ntx_cuda.h and blockmath.cuh");

#define NTX_FULL_MASK 0xffffffffu

/* ---- errors ---- */

/* After a launch that returned launch (ntx_launch): 0, or -1 with
 * "cuda: <what>: <error string>" for launch's error, else for one pending
 * in the runtime (cudaGetLastError, which is cleared either way). */
static inline int ntx_cu_launched(const char *what, cudaError_t launch, struct ntx_err *err)
{
	cudaError_t e = cudaGetLastError();

	if (launch != cudaSuccess)
		e = launch;
	if (e != cudaSuccess)
		return ntx_err_set(err, NTX_EDEVICE, "cuda: %s: %s", what, cudaGetErrorString(e));
	return 0;
}

static inline int ntx_cu_call(cudaError_t e, const char *what, struct ntx_err *err)
{
	if (e != cudaSuccess) {
		cudaGetLastError();
		return ntx_err_set(err, NTX_EDEVICE, "cuda: %s: %s", what, cudaGetErrorString(e));
	}
	return 0;
}

/* ---- switches (tuning.cu) ---- */

/* The switches of struct ntx_tunables the kernels use. */
enum ntx_cu_knob {
	NTX_CU_GEMV_DL,       /* 0/1 */
	NTX_CU_GEMV_EARLY,    /* 0/1 */
	NTX_CU_GEMV_DL_SHAPE, /* -1 (the default shape), 0, 1, 2 */
	NTX_CU_GEMV_MMA,      /* tensor cores for 2..8 tokens of Q4_K / split Q6_K (1, default) */
	NTX_CU_GEMV_MMA_OVERLAP, /* 0/1: a GEMV's second type beside its first (1, default) */
	NTX_CU_ATTN_PREFETCH, /* 0/1 */
	NTX_CU_ATTN_CHUNK,    /* a multiple of 32 in [32, 65536] */
	NTX_CU_NO_PDL,        /* 0/1 */
	NTX_CU_NO_CUBLAS,     /* 0/1 */
	NTX_CU_N_KNOBS
};

/* A switch's value now: set by ntx_cuda_tunables_set, else its default.
 * Thread-safe (a relaxed atomic load). */
int ntx_cu_knob(enum ntx_cu_knob k);
/* NTX_CUBLAS: the cuBLAS library to try first, "" none (into buf). */
void ntx_cu_cublas_path(char *buf, size_t n);

static inline int ntx_cu_aligned(const void *p, unsigned a)
{
	return ((uintptr_t)p & (uintptr_t)(a - 1)) == 0;
}

/* Bytes of one element block of a supported weight type, its element count,
 * or 0 for an unsupported type. */
static inline int ntx_cu_type_bs(uint32_t t)
{
	if (t & NTX_CUDA_SPLIT) /* split rows (ntx_cuda.h) of the three types that have them */
		return t == (NTX_CUDA_SPLIT | NTX_TYPE_Q4_0) || t == (NTX_CUDA_SPLIT | NTX_TYPE_Q8_0) ||
				       t == (NTX_CUDA_SPLIT | NTX_TYPE_Q6_K)
			       ? ntx_cu_type_bs(ntx_cuda_base_type(t))
			       : 0;
	switch (t) {
	case NTX_TYPE_F32:
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16:
		return 1;
	case NTX_TYPE_Q4_0:
	case NTX_TYPE_Q5_0:
	case NTX_TYPE_Q8_0:
		return 32;
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
	case NTX_TYPE_Q6_K:
		return 256;
	default:
		return 0;
	}
}

static inline uint64_t ntx_cu_row_bytes(uint32_t t, int64_t n)
{
	switch (ntx_cuda_base_type(t)) { /* split rows keep their bytes */
	case NTX_TYPE_F32: return (uint64_t)n * 4;
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16: return (uint64_t)n * 2;
	case NTX_TYPE_Q4_0: return (uint64_t)(n / 32) * 18;
	case NTX_TYPE_Q5_0: return (uint64_t)(n / 32) * 22;
	case NTX_TYPE_Q8_0: return (uint64_t)(n / 32) * 34;
	case NTX_TYPE_Q4_K: return (uint64_t)(n / 256) * 144;
	case NTX_TYPE_Q5_K: return (uint64_t)(n / 256) * 176;
	case NTX_TYPE_Q6_K: return (uint64_t)(n / 256) * 210;
	default: return 0;
	}
}

/* Alignment a weight pointer of type t needs in our kernels. */
static inline unsigned ntx_cu_type_align(uint32_t t)
{
	if (t & NTX_CUDA_SPLIT)
		return 16;
	switch (t) {
	case NTX_TYPE_Q4_K:
	case NTX_TYPE_Q5_K:
		return 16;
	case NTX_TYPE_F32:
		return 4;
	default:
		return 2;
	}
}

/* A weight type's name for messages ("Q6_K/split" for split rows). */
static inline const char *ntx_cu_type_name(uint32_t t)
{
	static thread_local char buf[40];

	if (!(t & NTX_CUDA_SPLIT))
		return ntx_type_name(t);
	snprintf(buf, sizeof buf, "%s/split", ntx_type_name(ntx_cuda_base_type(t)));
	return buf;
}

/* Check a weight type, its row length and pointer alignment. */
static inline int ntx_cu_check_w(const char *fn, uint32_t t, const void *w, int64_t n,
				 unsigned need_align, struct ntx_err *err)
{
	int bs = ntx_cu_type_bs(t);

	if (!bs)
		return ntx_err_set(err, NTX_EUNSUP, "%s: weight type %s is not supported on CUDA",
				   fn, ntx_cu_type_name(t));
	if (n <= 0 || n % bs || n > INT32_MAX - 1024)
		return ntx_err_set(err, NTX_EINVAL,
				   "%s: row length %lld is not a positive multiple of %d (type %s)",
				   fn, (long long)n, bs, ntx_cu_type_name(t));
	if (!w)
		return ntx_err_set(err, NTX_EINVAL, "%s: NULL weights", fn);
	if (need_align < ntx_cu_type_align(t))
		need_align = ntx_cu_type_align(t);
	if (!ntx_cu_aligned(w, need_align))
		return ntx_err_set(err, NTX_EINVAL, "%s: %s weights at %p are not %u-byte aligned",
				   fn, ntx_cu_type_name(t), w, need_align);
	return 0;
}

/* Opt a kernel in to more than 48 KB of dynamic shared memory (once per
 * kernel and size; cheap when already set). */
template <typename K> static inline int ntx_cu_smem(K kernel, size_t bytes, const char *what,
						    struct ntx_err *err)
{
	if (bytes <= 48 * 1024)
		return 0;
	return ntx_cu_call(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
						(int)bytes),
			   what, err);
}

/* ---- launches: programmatic dependent launch (PDL, sm_90+) ----
 * Every kernel is launched with ntx_launch, never <<<>>>, and every
 * __global__ function begins with
 *	ntx_pdl_wait();
 *	ntx_pdl_trigger();
 * before it reads or writes global memory. With PDL on (launch.cu:
 * compute capability 9.0 or more, the switch no_pdl off), a launch
 * carries cudaLaunchAttributeProgrammaticStreamSerialization: the kernel
 * may be scheduled on the SMs as soon as every CTA of the kernel before it
 * in the stream has passed its trigger, and its CTAs then wait in
 * ntx_pdl_wait until that kernel has completed and its memory is visible.
 * Two exceptions: the direct-load GEMV (gemv_dl.cu) issues its first
 * weight loads before the wait, so that they overlap the kernel before.
 * Weights are written only by uploads and copies (ordered as usual, see
 * below) and by ntx_repack_kernel, which never triggers early. And the
 * decode attention (attention.cu) prefetches its first K/V tile into L2
 * before the wait: a hint, which L2 keeps coherent with the writes of the
 * kernel before, at addresses from range-checked pos / seq; its CTAs whose
 * split holds no position leave before the wait (pos and seq are copied
 * from the host ahead of the step's first kernel and no kernel writes them;
 * split 0 of every token and kv head runs and waits). And the
 * second launch of a tensor-core GEMV whose segments are of two weight
 * types (gemv_mma.cu, mm_args.beside): it reads only weights and the
 * activations that the first launch waited for, and writes outputs the
 * first does not touch, so it triggers at once and waits at its end; the
 * kernel after it still finds both complete.
 * Since every kernel waits before touching memory, and its own trigger
 * comes only after that wait, the order of all memory accesses is that of
 * plain stream order (read-after-write, write-after-read on shared
 * buffers, workspace counters, last-CTA merges): what overlaps is the
 * launch latency and CTA scheduling of the next kernel with the tail of
 * the current one. At most one kernel is scheduled ahead. A launch after
 * work that is not ours (cuBLAS, copies, event waits) is ordered as usual:
 * a kernel that never triggers triggers implicitly when it completes.
 * Without the attribute (PDL off, or sm_80..89, where the instructions
 * are compiled out) the wait returns at once. */

/* Wait until the grids this one depends on have completed and their
 * memory operations are visible. */
__device__ __forceinline__ void ntx_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Let the next kernel of the stream be scheduled (it still waits for this
 * one to complete in its own ntx_pdl_wait). */
__device__ __forceinline__ void ntx_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* 1 if launches on the current device get the PDL attribute, else 0
 * (launch.cu: decided once per device, ntx_cuda_pdl_set overrides). */
int ntx_cu_pdl(void);

/* Launch kernel k (grid g, block b, smem bytes of dynamic shared memory,
 * stream s) with args, each converted to the kernel's parameter type as
 * <<<>>> would. Returns the launch's error (pass it to ntx_cu_launched). */
template <typename... K, typename... A>
static inline cudaError_t ntx_launch(void (*k)(K...), dim3 g, dim3 b, size_t smem, cudaStream_t s,
				     A... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1] = {};

	cfg.gridDim = g;
	cfg.blockDim = b;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = s;
	if (ntx_cu_pdl()) {
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.attrs = at;
		cfg.numAttrs = 1;
	}
	return cudaLaunchKernelEx(&cfg, k, args...);
}

/* ---- device helpers ---- */

__device__ __forceinline__ void ntx_cp_async16(void *smem, const void *gmem)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

/* Copies src_bytes (0 or 16) and zero-fills the rest of the 16 bytes. */
__device__ __forceinline__ void ntx_cp_async16_z(void *smem, const void *gmem, int src_bytes)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
		     "r"(src_bytes)
		     : "memory");
}

__device__ __forceinline__ void ntx_cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void ntx_cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* 16-byte streaming load that does not allocate in L1 (weights; read-only
 * for the kernel's lifetime, so not volatile: the compiler may schedule it). */
__device__ __forceinline__ uint4 ntx_ld_stream16(const void *p)
{
	uint4 v;

	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p));
	return v;
}

__device__ __forceinline__ float ntx_warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(NTX_FULL_MASK, v, o);
	return v;
}

__device__ __forceinline__ double ntx_warp_sum_d(double v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(NTX_FULL_MASK, v, o);
	return v;
}

__device__ __forceinline__ float ntx_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(NTX_FULL_MASK, v, o));
	return v;
}

__device__ __forceinline__ float ntx_silu_mul(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

/* Quantize 8 consecutive floats per lane (v[0..7] = elements e0..e0+7 of
 * a row, e0 % 8 == 0; qs, ds: the row's int8 values and float2 scales)
 * into q8 format fmt (NTX_Q8F_*). All 32 lanes call this. Group 32: lanes
 * 4k..4k+3 hold one block of 32; group 256 (Q8_K): the warp holds one
 * block, lane i its elements 8i..8i+7. store = 0 computes only (lanes past
 * the end hold zeros in blocks of their own and keep the warp converged).
 * The values of ntx_q8_quantize_fmt (blockmath.cuh, host-tested against
 * ntx_quantize_act_ref): max and integer sums are exact in any order, the
 * Q8_K sign rule takes the lowest index of largest magnitude. */
__device__ __forceinline__ void ntx_q8_store8(const float *v, int8_t *qs, float2 *ds, int64_t e0,
					      int fmt, int store)
{
	float amax = 0.0f, dd, id, mine = 0.0f;
	int q[8], sum = 0;
	bool has = false;

#pragma unroll
	for (int i = 0; i < 8; i++)
		amax = fmaxf(amax, fabsf(v[i]));
	amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 1));
	amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 2));
	if (fmt == NTX_Q8F_Q8_K) {
		unsigned bal;
		float mx;

		amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 4));
		amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 8));
		amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 16));
#pragma unroll
		for (int i = 7; i >= 0; i--) /* ends at this lane's lowest index */
			if (fabsf(v[i]) == amax)
				mine = v[i], has = true;
		bal = __ballot_sync(NTX_FULL_MASK, has);
		mx = __shfl_sync(NTX_FULL_MASK, mine, bal ? __ffs(bal) - 1 : 0);
		id = amax != 0.0f ? -127.0f / mx : 0.0f;
		dd = amax != 0.0f ? 1.0f / id : 0.0f;
#pragma unroll
		for (int i = 0; i < 8; i++)
			q[i] = min(127, __float2int_rn(__fmul_rn(id, v[i])));
	} else {
		id = amax != 0.0f ? 127.0f / amax : 0.0f;
		dd = amax / 127.0f;
		if (fmt == NTX_Q8F_Q8_0)
			dd = __half2float(__float2half_rn(dd));
#pragma unroll
		for (int i = 0; i < 8; i++)
			q[i] = __float2int_rn(__fmul_rn(v[i], id));
	}
#pragma unroll
	for (int i = 0; i < 8; i++)
		sum += q[i];
	sum += __shfl_xor_sync(NTX_FULL_MASK, sum, 1);
	sum += __shfl_xor_sync(NTX_FULL_MASK, sum, 2);
	if (store) {
		uint2 w;

		w.x = (uint32_t)(q[0] & 0xFF) | (uint32_t)(q[1] & 0xFF) << 8 |
		      (uint32_t)(q[2] & 0xFF) << 16 | (uint32_t)(q[3] & 0xFF) << 24;
		w.y = (uint32_t)(q[4] & 0xFF) | (uint32_t)(q[5] & 0xFF) << 8 |
		      (uint32_t)(q[6] & 0xFF) << 16 | (uint32_t)(q[7] & 0xFF) << 24;
		*(uint2 *)(qs + e0) = w;
		if ((e0 & 31) == 0)
			ds[e0 >> 5] = make_float2(dd, __fmul_rn(dd, (float)sum));
	}
}

/* Check a q8 format for rows of n elements; 0 or -1 with *err filled. */
static inline int ntx_cu_check_fmt(const char *fn, int fmt, int64_t n, struct ntx_err *err)
{
	if (fmt < NTX_Q8F_32 || fmt > NTX_Q8F_Q8_K)
		return ntx_err_set(err, NTX_EINVAL, "%s: q8 format %d is not one of 0..2", fn, fmt);
	if (n <= 0 || n % ntx_q8f_group(fmt))
		return ntx_err_set(err, NTX_EINVAL, "%s: n = %lld is not a positive multiple of %d (q8 format %d)",
				   fn, (long long)n, ntx_q8f_group(fmt), fmt);
	return 0;
}

#endif
