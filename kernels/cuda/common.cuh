/* common.cuh - what every kernels/cuda/*.cu shares: the C headers with C
 * linkage, error helpers (argument checks and launch checks that fill a
 * struct ntx_err), cp.async and warp-level helpers, and the lane-parallel
 * q8 quantizer used by ntx_cuda_quantize_q8 and the fused rmsnorm. */
#ifndef NTX_CUDA_COMMON_CUH
#define NTX_CUDA_COMMON_CUH

#include <stdint.h>

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" {
#include "err.h"
#include "types.h"
}
#include "ntx_kernels.h"
#include "ntx_cuda.h"

#include "blockmath.cuh"

#define NTX_FULL_MASK 0xffffffffu

/* ---- errors ---- */

/* After a launch: 0, or -1 with "cuda: <what>: <error string>". */
static inline int ntx_cu_launched(const char *what, struct ntx_err *err)
{
	cudaError_t e = cudaGetLastError();

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

static inline int ntx_cu_aligned(const void *p, unsigned a)
{
	return ((uintptr_t)p & (uintptr_t)(a - 1)) == 0;
}

/* Bytes of one element block of a supported weight type, its element count,
 * or 0 for an unsupported type. */
static inline int ntx_cu_type_bs(uint32_t t)
{
	switch (t) {
	case NTX_TYPE_F32:
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16:
		return 1;
	case NTX_TYPE_Q4_0:
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
	switch (t) {
	case NTX_TYPE_F32: return (uint64_t)n * 4;
	case NTX_TYPE_F16:
	case NTX_TYPE_BF16: return (uint64_t)n * 2;
	case NTX_TYPE_Q4_0: return (uint64_t)(n / 32) * 18;
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

/* Check a weight type, its row length and pointer alignment. */
static inline int ntx_cu_check_w(const char *fn, uint32_t t, const void *w, int64_t n,
				 unsigned need_align, struct ntx_err *err)
{
	int bs = ntx_cu_type_bs(t);

	if (!bs)
		return ntx_err_set(err, NTX_EUNSUP, "%s: weight type %s is not supported on CUDA",
				   fn, ntx_type_name(t));
	if (n <= 0 || n % bs || n > INT32_MAX - 1024)
		return ntx_err_set(err, NTX_EINVAL,
				   "%s: row length %lld is not a positive multiple of %d (type %s)",
				   fn, (long long)n, bs, ntx_type_name(t));
	if (!w)
		return ntx_err_set(err, NTX_EINVAL, "%s: NULL weights", fn);
	if (need_align < ntx_cu_type_align(t))
		need_align = ntx_cu_type_align(t);
	if (!ntx_cu_aligned(w, need_align))
		return ntx_err_set(err, NTX_EINVAL, "%s: %s weights at %p are not %u-byte aligned",
				   fn, ntx_type_name(t), w, need_align);
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

/* Quantize 4 consecutive floats per lane into the q8 format; 8 aligned lanes
 * share one block of 32 (all 32 lanes of the warp must call this). gi is the
 * index of the lane's group of 4 within its row; qs points at the row's int8
 * values, ds at the row's float2 scales. store = 0 computes only (lanes past
 * the end keep the warp converged). Same arithmetic as ntx_q8_quantize32. */
__device__ __forceinline__ void ntx_q8_store4(float4 v, int8_t *qs, float2 *ds, int64_t gi,
					      int store)
{
	float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
	float id, d;
	int q0, q1, q2, q3, sum;

	amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 1));
	amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 2));
	amax = fmaxf(amax, __shfl_xor_sync(NTX_FULL_MASK, amax, 4));
	id = amax != 0.0f ? 127.0f / amax : 0.0f;
	d = amax / 127.0f;
	q0 = __float2int_rn(v.x * id);
	q1 = __float2int_rn(v.y * id);
	q2 = __float2int_rn(v.z * id);
	q3 = __float2int_rn(v.w * id);
	sum = q0 + q1 + q2 + q3;
	sum += __shfl_xor_sync(NTX_FULL_MASK, sum, 1);
	sum += __shfl_xor_sync(NTX_FULL_MASK, sum, 2);
	sum += __shfl_xor_sync(NTX_FULL_MASK, sum, 4);
	if (store) {
		char4 c = make_char4((signed char)q0, (signed char)q1, (signed char)q2,
				     (signed char)q3);

		*(char4 *)(qs + 4 * gi) = c;
		if ((gi & 7) == 0)
			ds[gi >> 3] = make_float2(d, d * (float)sum);
	}
}

#endif
