/* gpu_util.h - helpers shared by the CUDA test programs in tests/gpu:
 * device buffers that abort the test on a CUDA error, random well-formed
 * weights and activations (fixed seed, never zeros), the CPU references
 * and NMSE. Header-only (each test program is one .c file). */
#ifndef NTX_GPU_UTIL_H
#define NTX_GPU_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../unit/t.h"
#include "ntx_cpu.h"
#include "ntx_cuda.h"
#include "sampler.h"
#include "tunables.h"

static struct ntx_err g_err;

/* A kernel call that must succeed; on failure: report, stop the program. */
#define T_CUDA(call)                                                                           \
	do {                                                                                   \
		if ((call) != 0) {                                                             \
			t_ok(0, "%s: %s", #call, g_err.msg);                                   \
			exit(t_done() | 1);                                                    \
		}                                                                              \
	} while (0)

#define CK(call)                                                                               \
	do {                                                                                   \
		cudaError_t e_ = (call);                                                       \
		if (e_ != cudaSuccess) {                                                       \
			t_ok(0, "%s: %s", #call, cudaGetErrorString(e_));                      \
			exit(t_done() | 1);                                                    \
		}                                                                              \
	} while (0)

static inline int gpu_probe(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1 || cudaSetDevice(0) != cudaSuccess ||
	    cudaFree(0) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return 1;
}

static inline void gpu_banner(void)
{
	struct cudaDeviceProp p;

	if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
		t_diag("device: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, cuBLAS %s", p.name, p.major,
		       p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0,
		       p.l2CacheSize >> 20, ntx_cuda_have_cublas() ? "loaded" : "not used");
	t_diag("programmatic dependent launch: %s", ntx_cuda_pdl_enabled() ? "on" : "off");
}

/* ---- device buffers ---- */

static inline void *dev_alloc(size_t n)
{
	void *p = NULL;

	CK(cudaMalloc(&p, n ? n : 1));
	return p;
}

static inline void dev_free(void *p)
{
	if (p)
		CK(cudaFree(p));
}

static inline void dev_put(void *d, const void *h, size_t n)
{
	CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
}

static inline void *dev_up(const void *h, size_t n)
{
	void *d = dev_alloc(n);

	dev_put(d, h, n);
	return d;
}

static inline void dev_get(void *h, const void *d, size_t n)
{
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

/* All bytes 0xFF: a NaN for floats, -1 for ints. */
static inline void dev_poison(void *d, size_t n)
{
	CK(cudaMemset(d, 0xFF, n));
}

/* ---- random data ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static inline uint64_t rng_u64(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline double rnd_unif(void)
{
	return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}

static inline float rnd_gauss(void)
{
	double u = rnd_unif() + 1e-300, v = rnd_unif();

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static inline float *rnd_gauss_vec(size_t n, float scale)
{
	float *p = malloc(n * sizeof *p);

	for (size_t i = 0; i < n; i++)
		p[i] = scale * rnd_gauss();
	return p;
}

/* Weight types here may carry NTX_CUDA_SPLIT (split rows, ntx_cuda.h):
 * host data is always in GGUF layout of the base type; wdev_up puts it on
 * the device in the type's layout. */
static inline size_t row_bytes(uint32_t t, int64_t n)
{
	uint64_t b = 0;

	ntx_type_row_bytes(ntx_cuda_base_type(t), n, &b, NULL);
	return (size_t)b;
}

static inline int block_of(uint32_t t)
{
	return ntx_type_get(ntx_cuda_base_type(t))->block_size;
}

static inline const char *type_name(uint32_t t)
{
	static char buf[8][32];
	static int k;

	if (!(t & NTX_CUDA_SPLIT))
		return ntx_type_name(t);
	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "%s/split", ntx_type_name(ntx_cuda_base_type(t)));
	return buf[k];
}

static inline int is_float_type(uint32_t t)
{
	return t == NTX_TYPE_F32 || t == NTX_TYPE_F16 || t == NTX_TYPE_BF16;
}

/* Upload n_out rows of n_in elements of GGUF data h for a weight of type t
 * (repacked in place for a split type). */
static inline void *wdev_up(uint32_t t, const void *h, int64_t n_in, int64_t n_out)
{
	void *d = dev_up(h, row_bytes(t, n_in) * (size_t)n_out);

	if (t & NTX_CUDA_SPLIT) {
		T_CUDA(ntx_cuda_repack(ntx_cuda_base_type(t), d, n_in, n_out, NULL, &g_err));
		CK(cudaDeviceSynchronize());
	}
	return d;
}

/* n_rows rows of n elements of type t: Gaussian floats, or random blocks
 * with finite fp16 scales of a realistic size. */
static inline void rnd_rows(uint32_t t, void *dst, int64_t n, int64_t n_rows)
{
	unsigned char *p = dst;

	t = ntx_cuda_base_type(t);
	size_t nb = row_bytes(t, n) * (size_t)n_rows, bs, i;

	if (is_float_type(t)) {
		for (size_t k = 0; k < (size_t)(n * n_rows); k++) {
			float v = rnd_gauss();
			uint16_t h;

			if (t == NTX_TYPE_F32) {
				memcpy(p + 4 * k, &v, 4);
				continue;
			}
			h = t == NTX_TYPE_F16 ? ntx_fp32_to_fp16(v) : ntx_fp32_to_bf16(v);
			memcpy(p + 2 * k, &h, 2);
		}
		return;
	}
	for (i = 0; i + 8 <= nb; i += 8) {
		uint64_t r = rng_u64();

		memcpy(p + i, &r, 8);
	}
	for (; i < nb; i++)
		p[i] = (unsigned char)rng_u64();
	bs = (size_t)ntx_type_get(t)->type_size;
	for (i = 0; i < nb; i += bs) {
		uint16_t d = ntx_fp32_to_fp16((float)(0.001 + 0.02 * rnd_unif()));
		uint16_t m = ntx_fp32_to_fp16((float)(0.001 + 0.02 * rnd_unif()));

		if (t == NTX_TYPE_Q6_K) {
			memcpy(p + i + 208, &d, 2);
		} else {
			memcpy(p + i, &d, 2);
			if (t == NTX_TYPE_Q4_K || t == NTX_TYPE_Q5_K)
				memcpy(p + i + 2, &m, 2);
		}
	}
}

/* Activations whose max |x| is 127 * 2^k in every block of 32, with one k
 * per 256: then the CUDA q8 format (per 32, float d) and ggml's Q8_0 (fp16
 * d) and Q8_K (per 256) hold the same integers and exactly related scales,
 * and GEMV results can be held to ntx_vec_dot_ref within float rounding. */
static inline void rnd_strict_acts(float *x, int64_t n)
{
	for (int64_t b = 0; b < n; b += 256) {
		float sc = ldexpf(1.0f, (int)(rng_u64() % 7) - 4);

		for (int64_t i = b; i < b + 256 && i < n; i++)
			x[i] = sc * (float)(254.0 * rnd_unif() - 127.0);
		for (int64_t j = b; j < b + 256 && j + 32 <= n; j += 32)
			x[j + (int64_t)(rng_u64() % 32)] = (rng_u64() & 1) ? 127.0f * sc : -127.0f * sc;
	}
}

/* The q8 quantization of 32 floats (ntx_cuda.h), as the kernels do it. */
static inline void ntx_ref_q8_32(const float *x, int8_t *q, float *d, float *ds)
{
	float amax = 0.0f, id;
	int sum = 0;

	for (int i = 0; i < 32; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	id = amax != 0.0f ? 127.0f / amax : 0.0f;
	for (int i = 0; i < 32; i++) {
		q[i] = (int8_t)rintf(x[i] * id);
		sum += q[i];
	}
	*d = amax / 127.0f;
	*ds = *d * (float)sum;
}

/* q8 blocks of 32 in hq (the device layout of n_tok rows of n, copied to
 * the host) that differ from the host oracle's quantization of x in format
 * fmt: NTX_CUDA_Q8F_32: ntx_ref_q8_32; Q8_0 and Q8_K: the integers and d of
 * ntx_quantize_act_ref (the CPU engine's activations), dsum = d * sum(q). */
static inline long q8_bad_blocks(const float *x, int64_t n, int n_tok, int fmt,
				 const unsigned char *hq)
{
	size_t qsb = ntx_cuda_q8_qs_bytes(n, n_tok);
	uint32_t at = fmt == NTX_CUDA_Q8F_Q8_K ? NTX_TYPE_Q8_K : NTX_TYPE_Q8_0;
	void *ref = malloc(ntx_act_bytes(at, n) + 64);
	long bad = 0;

	for (int t = 0; t < n_tok; t++) {
		const float *xt = x + (size_t)t * n;
		const int8_t *q = (const int8_t *)hq + (size_t)t * n;

		if (fmt != NTX_CUDA_Q8F_32)
			ntx_quantize_act_ref(at, xt, ref, n);
		for (int64_t b = 0; b < n / 32; b++) {
			int8_t rq[32];
			float d = 0.0f, ds = 0.0f, got[2];
			int sum = 0;

			memcpy(got, hq + qsb + ((size_t)t * (n / 32) + b) * 8, 8);
			if (fmt == NTX_CUDA_Q8F_32) {
				ntx_ref_q8_32(xt + 32 * b, rq, &d, &ds);
			} else if (fmt == NTX_CUDA_Q8F_Q8_0) {
				const struct ntx_block_q8_0 *r = (const struct ntx_block_q8_0 *)ref + b;

				memcpy(rq, r->qs, 32);
				d = ntx_fp16_to_fp32(r->d);
			} else {
				const struct ntx_block_q8_k *r = (const struct ntx_block_q8_k *)ref + b / 8;

				memcpy(rq, r->qs + 32 * (b % 8), 32);
				d = r->d;
			}
			for (int i = 0; i < 32; i++)
				sum += rq[i];
			if (fmt != NTX_CUDA_Q8F_32)
				ds = d * (float)sum;
			bad += memcmp(rq, q + 32 * b, 32) != 0 || got[0] != d || got[1] != ds;
		}
	}
	free(ref);
	return bad;
}

/* ref[t * n_out + r] = W[r] . x[t]: with exact = 1 as ntx_vec_dot_ref
 * computes it (integer dot on ggml-quantized activations for quantized
 * types), else the float64 dot of the dequantized row with x. */
static inline void ref_gemv(uint32_t t, const void *w, int64_t n_in, int64_t n_out, const float *x,
		     int n_tok, int exact, double *ref)
{
	size_t rb = row_bytes(t, n_in);
	uint32_t at;

	t = ntx_cuda_base_type(t);
	at = ntx_act_type(t);
	void *xq = malloc(ntx_act_bytes(at, n_in) + 64);
	float *row = malloc((size_t)n_in * sizeof *row);

	for (int k = 0; k < n_tok; k++) {
		const float *xt = x + (size_t)k * n_in;

		if (exact) {
			ntx_quantize_act_ref(at, xt, xq, n_in);
			for (int64_t r = 0; r < n_out; r++)
				ref[(size_t)k * n_out + r] =
					ntx_vec_dot_ref(t, n_in, (const char *)w + rb * r, xq);
		} else {
			for (int64_t r = 0; r < n_out; r++) {
				double s = 0;

				ntx_dequant_row_ref(t, (const char *)w + rb * r, row, n_in);
				for (int64_t i = 0; i < n_in; i++)
					s += (double)row[i] * xt[i];
				ref[(size_t)k * n_out + r] = s;
			}
		}
	}
	free(xq);
	free(row);
}

/* ---- errors ---- */

static inline double nmse_d(const double *a, const double *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double e = a[i] - ref[i];

		num += e * e;
		den += ref[i] * ref[i];
	}
	return den > 0 ? num / den : (num == 0 ? 0 : INFINITY);
}

static inline double nmse_f(const float *a, const float *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double e = (double)a[i] - ref[i];

		num += e * e;
		den += (double)ref[i] * ref[i];
	}
	return den > 0 ? num / den : (num == 0 ? 0 : INFINITY);
}

/* Common start of every test program: --probe, and the device check. */
static inline int gpu_start(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--probe"))
			exit(gpu_probe() ? 0 : 1);
	if (!gpu_probe()) {
		printf("# no CUDA device\n");
		t_ok(0, "a CUDA device is usable");
		exit(t_done() | 1);
	}
	{
		/* the switches (NTX_NO_CUBLAS, NTX_NO_PDL, NTX_GEMV_DL, ...), read
		 * and handed to the kernels as the engine does */
		struct ntx_tunables tun;

		ntx_tunables_from_env(&tun);
		ntx_cpu_tunables_set(&tun);
		ntx_cuda_tunables_set(&tun);
	}
	gpu_banner();
	return 0;
}

#endif
