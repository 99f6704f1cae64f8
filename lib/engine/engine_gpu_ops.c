/* engine_gpu_ops.c - the CUDA engine's matrix products, shared by its dense
 * and mixture-of-experts layers (engine_gpu_int.h): the GEMV with its q8
 * activations, the prompt path on the tensor cores, and the q8 format
 * several consumers of one input share. */
#include "engine_int.h"

#ifdef NTX_HAVE_CUDA
#include "engine_gpu_int.h"

int ntx_gpu_fail(struct ntx_err *err, cudaError_t rc, const char *what)
{
	return ntx_err_set(err, NTX_EDEVICE, "cuda: %s failed: %s", what, cudaGetErrorString(rc));
}

/* The q8 activation format a weight type consumes: the CPU oracle's (Q8_0
 * for Q4_0/Q8_0, Q8_K for K-quants), so the GPU's integer dot products are
 * the CPU's; -1 for float weights. */
int ntx_gpu_fmt_of(const struct ntx_gguf_tensor *t)
{
	return ntx_cuda_q8_fmt(t->type);
}

/* y (=|+=) W x for n <= NTX_CUDA_GEMV_MAX_TOK rows, quantizing x for W's
 * format first when W takes q8 activations. */
int ntx_gpu_gemv_one(struct ntx_engine *e, const struct ntx_gguf_tensor *t, const void *w,
		    const float *x, float *y, int n, int acc, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	ntx_stream_t st = (ntx_stream_t)g->cs;

	if (ntx_gpu_fmt_of(t) >= 0 &&
	    ntx_cuda_quantize_q8_fmt(x, g->xq, t->ne[0], n, ntx_gpu_fmt_of(t), st, err))
		return -1;
	return ntx_cuda_gemv(t->type, w, t->ne[0], t->ne[1], x, g->xq, y, n, acc, st, err);
}

/* The same for any n: chunks of NTX_CUDA_GEMV_MAX_TOK rows, so each row
 * gets what it gets alone. */
int ntx_gpu_gemv_rows(struct ntx_engine *e, const struct ntx_gguf_tensor *t, const void *w,
		     const float *x, float *y, int n, int acc, struct ntx_err *err)
{
	int r, k;

	for (r = 0; r < n; r += k) {
		k = n - r < NTX_CUDA_GEMV_MAX_TOK ? n - r : NTX_CUDA_GEMV_MAX_TOK;
		if (ntx_gpu_gemv_one(e, t, w, x + (size_t)r * t->ne[0], y + (size_t)r * t->ne[1], k, acc, err))
			return -1;
	}
	return 0;
}

/* Float weights keep F32 activations (the GEMV) for prompts up to this
 * many tokens; the tensor cores round them to F16. */
#define FLOAT_GEMV_MAX 64

int ntx_gpu_is_float(const struct ntx_gguf_tensor *t)
{
	return t->type == NTX_TYPE_F32 || t->type == NTX_TYPE_F16 || t->type == NTX_TYPE_BF16;
}

/* y (=|+=) W x for n rows: GEMV for few rows, tiles + tensor cores else. */
int ntx_gpu_mm(struct ntx_engine *e, const struct ntx_gguf_tensor *t, const void *w,
	      const float *x, float *y, int n, int acc, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	int64_t K = t->ne[0], N = t->ne[1];

	if (n <= NTX_CUDA_GEMV_MAX_TOK)
		return ntx_cuda_gemv(t->type, w, K, N, x, g->xq, y, n, acc, (ntx_stream_t)g->cs, err);
	if (K % 8 == 0 && !(ntx_gpu_is_float(t) && n <= FLOAT_GEMV_MAX))
		return ntx_cuda_matmul(t->type, w, K, N, x, y, n, acc, g->ws_mm, g->ws_mm_bytes,
				       (ntx_stream_t)g->cs, err);
	/* rows the tensor-core path cannot take (n_in not a multiple of 8, e.g.
	 * stories260K's 172) or should not (short float prompts) */
	return ntx_gpu_gemv_rows(e, t, w, x, y, n, acc, err);
}

int ntx_gpu_needs_q8(int n, const struct ntx_gguf_tensor *a, const struct ntx_gguf_tensor *b,
		    const struct ntx_gguf_tensor *c)
{
	if (n > NTX_CUDA_GEMV_MAX_TOK)
		return 0;
	return ntx_cuda_wtype_q8(a->type) == 1 || (b && ntx_cuda_wtype_q8(b->type) == 1) ||
	       (c && ntx_cuda_wtype_q8(c->type) == 1);
}

/* The format shared by up to three consumers of one input, or -2 when they
 * need different ones (then each quantizes its own copy). Float consumers
 * are ignored; -1 when all are float. */
int ntx_gpu_shared_fmt(const struct ntx_gguf_tensor *a, const struct ntx_gguf_tensor *b,
		      const struct ntx_gguf_tensor *c)
{
	const struct ntx_gguf_tensor *t[3] = { a, b, c };
	int f = -1, i;

	for (i = 0; i < 3; i++) {
		int fi = t[i] ? ntx_gpu_fmt_of(t[i]) : -1;

		if (fi < 0)
			continue;
		if (f >= 0 && fi != f)
			return -2;
		f = fi;
	}
	return f;
}

#endif
