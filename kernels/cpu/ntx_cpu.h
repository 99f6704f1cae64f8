/* ntx_cpu.h - CPU kernels: thread pool, weight-type kernels (scalar `_ref`
 * oracle and fast SIMD paths selected at run time), matmul, and the
 * element-wise ops of the Llama forward pass. */
#ifndef NTX_CPU_H
#define NTX_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "ntx_kernels.h"

/* ---- thread pool ---- */

struct ntx_pool;

typedef void (*ntx_pool_fn)(void *ctx, int ith, int nth);

/* A pool of n_threads workers (the calling thread counts as one: n_threads
 * == 1 runs everything inline). Returns NULL and fills *err on failure. */
struct ntx_pool *ntx_pool_new(int n_threads, struct ntx_err *err);
void ntx_pool_free(struct ntx_pool *pool);
int ntx_pool_threads(const struct ntx_pool *pool);

/* Run fn(ctx, ith, nth) for ith = 0..nth-1 on the pool's threads and return
 * when all have finished. Each ith runs exactly once; the caller runs ith 0
 * and also any ith that no worker has started by then (so two iths may run
 * one after the other on one thread: fn must never wait for another ith).
 * pool may be NULL (inline, nth = 1). Not reentrant: fn must not call
 * ntx_pool_run. */
void ntx_pool_run(struct ntx_pool *pool, ntx_pool_fn fn, void *ctx);

/* ---- weight matrices ---- */

/* A weight matrix as GGUF stores it: n_out rows of n_in elements (ggml
 * ne[0] = n_in, ne[1] = n_out), rows row_bytes apart. */
struct ntx_wmat {
	uint32_t type;      /* enum ntx_type */
	int64_t n_in;
	int64_t n_out;
	uint64_t row_bytes;
	const void *data;
};

/* Which activation format the dot product of a weight type consumes:
 * NTX_TYPE_F32 for F32/F16/BF16 weights, NTX_TYPE_Q8_0 for Q4_0/Q5_0/Q8_0,
 * NTX_TYPE_Q8_K for Q4_K/Q5_K/Q6_K. */
uint32_t ntx_act_type(uint32_t wtype);

/* Bytes of n activations in format act_type (n a multiple of its block). */
size_t ntx_act_bytes(uint32_t act_type, int64_t n);

/* Is wtype supported by the CPU kernels? */
int ntx_cpu_supports(uint32_t wtype);

/* ---- reference kernels (scalar, portable: the oracle) ---- */

/* Dequantize n elements (a multiple of the block size) to float. */
void ntx_dequant_row_ref(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantize n floats (n a multiple of the block) into activation format
 * act_type. round() below is round-to-nearest, ties to even.
 *   Q8_0, per 32 (ggml's x86 quantize_row_q8_0): amax = max |x|;
 *     d = amax / 127 stored as fp16; q = round(x * (127 / amax)), q = 0 when
 *     amax == 0.
 *   Q8_K, per 256 (ggml's quantize_row_q8_K_ref): max = the first x of
 *     largest magnitude; iscale = -127 / max; q = min(127, round(iscale * x));
 *     d = 1 / iscale (a float of the opposite sign to max, so max maps to
 *     -127); bsums[k] = sum of q[16k .. 16k+15]; everything 0 when max == 0.
 *   F32 (or any other act_type): copy.
 * The fast ntx_quantize_act produces the same bytes. */
void ntx_quantize_act_ref(uint32_t act_type, const float *x, void *xq, int64_t n);

/* Dot product of one weight row (n elements of type wtype) with activations
 * xq in ntx_act_type(wtype) format. Scalar. */
float ntx_vec_dot_ref(uint32_t wtype, int64_t n, const void *w, const void *xq);

/* ---- fast paths (SIMD chosen at run time; same results as _ref within the
 * tolerances in tests/unit/test_kernels.c) ---- */

void ntx_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);
void ntx_quantize_act(uint32_t act_type, const float *x, void *xq, int64_t n);
float ntx_vec_dot(uint32_t wtype, int64_t n, const void *w, const void *xq);

/* Names of the SIMD features in use ("avx2 fma f16c", "scalar"). */
const char *ntx_cpu_features(void);

/* Force the scalar paths (tests); 0 returns to the automatic choice. */
void ntx_cpu_force_scalar(int on);

/* Hand the CPU kernels their switches (tunables.h: cpu_scalar, no_amx; NULL:
 * the defaults), as the engine does when it is created. An automatic ISA
 * choice already made is made again when they change; one pinned by
 * ntx_cpu_isa_select stays. Process-wide; not meant to race with running
 * kernels. Until it is called the kernels use the defaults: they never read
 * the environment. */
struct ntx_tunables;
void ntx_cpu_tunables_set(const struct ntx_tunables *t);

/* y[t][r] = dot(W row r, x[t]) for t < n_tok, r < n_out; x is n_tok rows of
 * n_in floats, y n_tok rows of n_out floats. Activations are quantized once
 * per call into scratch, which must hold ntx_matmul_scratch_bytes(w, n_tok)
 * bytes (any alignment; 0 for F32/F16/BF16 weights, which read x directly,
 * and then scratch may be NULL). Parallel over output rows on pool (NULL:
 * the calling thread alone). Results equal ntx_vec_dot of each row with
 * ntx_quantize_act of each x[t] up to float summation order. */
size_t ntx_matmul_scratch_bytes(const struct ntx_wmat *w, int64_t n_tok);
void ntx_cpu_matmul(struct ntx_pool *pool, const struct ntx_wmat *w, const float *x,
		    int64_t n_tok, float *y, void *scratch);

#endif
