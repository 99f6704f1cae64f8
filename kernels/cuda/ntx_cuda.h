/* ntx_cuda.h - CUDA kernels of the Llama forward pass, as a C API callable
 * from the engine (C11) and from the GPU tests. Every function enqueues work
 * on the given stream and returns 0, or -1 with *err filled (a launch error,
 * returned by the launch or pending in cudaGetLastError; an unsupported type
 * or shape). Pointers are device pointers unless stated otherwise. Each
 * kernel has a CPU twin that is its oracle (kernels/cpu: ntx_vec_dot_ref,
 * ntx_dequant_row_ref, ntx_ops.h); tests/gpu/test_cuda_kernels.c checks
 * every kernel against it.
 *
 * Activation rows are row-major float32: x[t * n + i] for token t < n_tok.
 * Weight matrices are in GGUF layout (struct ntx_wmat in ntx_cpu.h: n_out
 * rows of n_in elements of one ggml type, rows row_bytes apart, contiguous),
 * placed in device memory unchanged, or in the split-row layout below
 * (weight type ntx_cuda_split_type(t)): every function that takes a weight
 * type takes either. */
#ifndef NTX_CUDA_H
#define NTX_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *ntx_stream_t; /* == cudaStream_t */

/* ---- switches ----
 * Hand the kernels their switches (tunables.h: gemv_dl, gemv_early,
 * gemv_dl_shape, attn_prefetch, attn_chunk, no_pdl, no_cublas, cublas; NULL:
 * the defaults), as the engine does when it creates its GPU context, before
 * any launch. A value out of range is the default. Process-wide (every
 * engine of a process reads the same environment); later launches use
 * them, cuBLAS loads with the values of its first use. Until it is called
 * the kernels use the defaults: they never read the environment. */
struct ntx_tunables;
void ntx_cuda_tunables_set(const struct ntx_tunables *t);

/* ---- split rows: the resident layout of Q4_0, Q8_0 and Q6_K ----
 * Blocks of these types are 18, 34 and 210 bytes, so in GGUF layout their
 * quantized bytes cannot be read with aligned 16-byte loads. For weights that
 * stay in device memory, ntx_cuda_repack rewrites each row in place as
 *     [payload of block 0][payload of block 1]...[d of block 0][d of block 1]...
 * (payload: Q4_0 qs[16], Q8_0 qs[32], Q6_K ql[128] qh[64] scales[16], each in
 * its GGUF byte order; d: the block's fp16 scale), the same bytes per row, so
 * offsets of rows and tensors do not change. Rows must be multiples of 16
 * bytes (then every payload is 16-byte aligned). The result is described by
 * the weight type NTX_CUDA_SPLIT | t, which the GEMV reads with aligned
 * 16-byte loads (gemv_dl.cu). Dequantization, matmul and get_rows take it
 * too, with the values of the GGUF layout bit for bit. */
#define NTX_CUDA_SPLIT 0x100u
/* t without the split flag. */
static inline uint32_t ntx_cuda_base_type(uint32_t t)
{
	return t & ~NTX_CUDA_SPLIT;
}
/* The split type for rows of n_in elements of GGUF type t when the layout
 * applies (t is Q4_0, Q8_0 or Q6_K, rows are multiples of 16 bytes and at
 * most 96 KiB), else t itself. */
uint32_t ntx_cuda_split_type(uint32_t t, int64_t n_in);
/* Rewrite n_out rows of n_in elements of GGUF type t at w (device memory,
 * 16-byte aligned) in the split layout, in place (enqueued on s). t must
 * have ntx_cuda_split_type(t, n_in) != t. */
int ntx_cuda_repack(uint32_t t, void *w, int64_t n_in, int64_t n_out, ntx_stream_t s,
		    struct ntx_err *err);

/* ---- batch invariance ----
 * The value computed for token t is bitwise the same whatever n_tok
 * (1..NTX_CUDA_GEMV_MAX_TOK) and whichever other tokens share the launch,
 * for attention, the quantizers and the quantized GEMV (Q4_0, Q5_0, Q8_0,
 * Q4_K, Q5_K, Q6_K; measured on the H200 by tests/gpu, which require it). The
 * float GEMV (F32, F16, BF16) is not: it splits rows differently for 3-8
 * tokens (results agree to float rounding). So self-speculative
 * verification and batched decoding reproduce single-token decoding
 * exactly on quantized models.
 * Also bitwise: ntx_cuda_rmsnorm's q8 output == ntx_cuda_quantize_q8_fmt of
 * its float output; ntx_cuda_attention_q8's q8 output ==
 * ntx_cuda_quantize_q8_fmt of ntx_cuda_attention's float output (and both
 * float outputs are equal); ntx_cuda_gemv_swiglu == ntx_cuda_gemv (gate),
 * ntx_cuda_gemv (up), ntx_cuda_swiglu; each ntx_cuda_gemv_multi segment ==
 * ntx_cuda_gemv of that matrix. tests/gpu checks each of these. */

/* ---- activation quantization (q8, for the integer tensor-core GEMV) ----
 * "q8 activations" of n_tok rows of n (n a multiple of 32): per row, n int8
 * values, then for the whole buffer n_tok * n/32 float2 (d, d * sum(q)) per
 * block of 32 (the GEMV reads only this, whatever the format).
 * Layout: int8 qs[n_tok][n] at offset 0, float2 ds[n_tok][n/32] at offset
 * ntx_cuda_q8_qs_bytes(n, n_tok) (a multiple of 16).
 * Formats (how q and d are chosen), enum ntx_cuda_q8_fmt:
 *   NTX_CUDA_Q8F_32: per 32, d = max|x| / 127 in float, q = rne(x * 127 /
 *     max|x|) (0 when max = 0). The original format.
 *   NTX_CUDA_Q8F_Q8_0: as ggml's Q8_0 (what the CPU engine uses for Q4_0,
 *     Q5_0 and Q8_0 weights): q as above, d rounded to fp16.
 *   NTX_CUDA_Q8F_Q8_K: per 256 (n a multiple of 256), as ggml's Q8_K (the
 *     CPU's format for Q4_K, Q5_K, Q6_K weights): max = the first x of
 *     largest magnitude, iscale = -127 / max, q = min(127, rne(iscale * x)),
 *     d = 1 / iscale (negative when max > 0), the same d in the 8 blocks.
 * With the format of ntx_cuda_q8_fmt(wtype), the q8 integers and effective
 * scales equal those of ntx_quantize_act_ref(ntx_act_type(wtype)) bit for
 * bit, so the GPU's dot products differ from the CPU's only in float
 * summation order. */
enum ntx_cuda_q8_fmt {
	NTX_CUDA_Q8F_32 = 0,
	NTX_CUDA_Q8F_Q8_0 = 1,
	NTX_CUDA_Q8F_Q8_K = 2,
};
/* The format matching the CPU for weight type wtype (Q4_0, Q5_0, Q8_0:
 * NTX_CUDA_Q8F_Q8_0; Q4_K, Q5_K, Q6_K: NTX_CUDA_Q8F_Q8_K), or -1 for float
 * or unsupported types. */
int ntx_cuda_q8_fmt(uint32_t wtype);
/* Elements per scale group of a format: 32 or 256 (0 if not a format). */
int ntx_cuda_q8_group(int fmt);
size_t ntx_cuda_q8_qs_bytes(int64_t n, int n_tok);
size_t ntx_cuda_q8_bytes(int64_t n, int n_tok);
/* x (n_tok rows of n floats, 16-byte aligned) -> q8 activations xq in
 * format fmt (n a multiple of ntx_cuda_q8_group(fmt)). */
int ntx_cuda_quantize_q8_fmt(const float *x, void *xq, int64_t n, int n_tok, int fmt,
			     ntx_stream_t s, struct ntx_err *err);
/* = ntx_cuda_quantize_q8_fmt(..., NTX_CUDA_Q8F_32, ...). */
int ntx_cuda_quantize_q8(const float *x, void *xq, int64_t n, int n_tok, ntx_stream_t s,
			 struct ntx_err *err);

/* Does this weight type take q8 activations (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K)
 * or float ones (F32, F16, BF16)? Returns 1 for q8, 0 for float, -1 if the
 * type is not supported. */
int ntx_cuda_wtype_q8(uint32_t wtype);

/* ---- matrix-vector products (decode: n_tok <= NTX_CUDA_GEMV_MAX_TOK) ----
 * y[t][r] = W[r] . x[t]   (accumulate = 0), or
 * y[t][r] += W[r] . x[t]  (accumulate = 1: the residual add is fused).
 * x is float (n_tok x n_in) for float weight types and ignored otherwise;
 * xq is the q8 form of the same rows for q8 types (any format: the GEMV
 * uses the per-32 (d, d*sum) pairs) and ignored otherwise. Reads each
 * weight byte once for all n_tok rows; quantized types go through int8
 * tensor-core products (sm_80+), whose cost hardly depends on n_tok.
 * Batch-invariant (see above). */
#define NTX_CUDA_GEMV_MAX_TOK 8
int ntx_cuda_gemv(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
		  const float *x, const void *xq, float *y, int n_tok, int accumulate,
		  ntx_stream_t s, struct ntx_err *err);

/* Several matrices that share one input in one launch (attention Q, K, V):
 * for each segment, y[t][r] (=|+=) W[r] . x[t] with the segment's type,
 * rows and output. Quantized segments of any mix of types run as one
 * launch; float segments as one launch per float type. Same contract as
 * ntx_cuda_gemv otherwise (x and/or xq as the types need); each segment's
 * output is bitwise that of ntx_cuda_gemv on its matrix. All segments read
 * the same xq: to match the CPU, their ntx_cuda_q8_fmt must agree (Q4_K /
 * Q5_K / Q6_K mixes do); otherwise split the call. */
#define NTX_CUDA_GEMV_MAX_SEG 4
struct ntx_cuda_gemv_seg {
	uint32_t wtype;
	const void *w;  /* (n_out rows of n_in), GGUF layout */
	int64_t n_out;
	float *y;       /* [n_tok][n_out] */
	int accumulate;
};
int ntx_cuda_gemv_multi(const struct ntx_cuda_gemv_seg *segs, int n_seg, int64_t n_in,
			const float *x, const void *xq, int n_tok, ntx_stream_t s,
			struct ntx_err *err);

/* Fused feed-forward up-projection: h[t][r] = silu(Wg[r] . x[t]) * (Wu[r] . x[t]),
 * bitwise equal to ntx_cuda_gemv (gate), ntx_cuda_gemv (up), ntx_cuda_swiglu.
 * Wg and Wu may have different types (then x and/or xq are used as each
 * needs). */
int ntx_cuda_gemv_swiglu(uint32_t gtype, const void *wg, uint32_t utype, const void *wu,
			 int64_t n_in, int64_t n_out, const float *x, const void *xq, float *h,
			 int n_tok, ntx_stream_t s, struct ntx_err *err);

/* The direct-load GEMV (gemv_dl.cu) reads split rows always, and GGUF-layout
 * Q4_K and Q5_K when it is enabled; otherwise those go through the staged
 * shared-memory kernel (gemv_q8.cu), as GGUF-layout Q4_0, Q8_0 and Q6_K
 * always do, and Q5_0 (which has no split layout) in every case. Enabled
 * unless the switches say gemv_dl = 0 (NTX_GEMV_DL=0); when enabled the
 * engine keeps resident Q4_0, Q8_0 and Q6_K matrices in split rows.
 * Measured on the H200 (PERF-NOTES.md, version 4): tg128 of 8B
 * Q4_K_M / Q8_0 / Q4_0 316 / 273 / 327 tok/s staged, 343 / 301 / 390
 * direct. ntx_cuda_gemv_dl_set: on = 1 enables, 0 disables, -1 returns to
 * the switches' choice (tests, benchmarks; not while kernels are being
 * launched from another thread). */
void ntx_cuda_gemv_dl_set(int on);
int ntx_cuda_gemv_dl_enabled(void);
/* The direct-load GEMV's shape for one token (benchmarks): -1 by the
 * switches (gemv_dl_shape, NTX_GEMV_DL_SHAPE; else 1: the default), 0 (2
 * steps in flight per warp, 5 CTAs per SM), 1 (1 step, 8 CTAs), 2 (2 steps,
 * 4 CTAs). Results do not depend on it. */
void ntx_cuda_gemv_dl_variant(int v);

/* ---- matrix-matrix products (prompt processing, any n_tok) ----
 * Same contract as ntx_cuda_gemv for any n_tok: dequantizes W in tiles of
 * rows to F16 in the workspace and multiplies on the tensor cores (cuBLAS
 * when libcublas can be loaded at run time, else our own kernel), F32
 * accumulation. ws must hold ntx_cuda_matmul_ws_bytes(n_in, n_out, n_tok). */
size_t ntx_cuda_matmul_ws_bytes(int64_t n_in, int64_t n_out, int n_tok);
int ntx_cuda_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
		    const float *x, float *y, int n_tok, int accumulate, void *ws,
		    size_t ws_bytes, ntx_stream_t s, struct ntx_err *err);
/* The same for n_seg segments of rows of x and y (n_rows rows in all):
 * segment i is rows seg_off[i] .. + seg_len[i], multiplied as if it were
 * the whole call (the same kernels and shapes as ntx_cuda_matmul on those
 * rows alone, so bitwise the same result), with each weight tile
 * dequantized once for all of them. Rows outside the segments are left
 * alone. ws: ntx_cuda_matmul_ws_bytes(n_in, n_out, n_rows). */
#define NTX_CUDA_MM_MAX_SEGS 512
int ntx_cuda_matmul_segs(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
			 const float *x, float *y, const int *seg_off, const int *seg_len, int n_seg,
			 int n_rows, int accumulate, void *ws, size_t ws_bytes, ntx_stream_t s,
			 struct ntx_err *err);
/* 1 if cuBLAS was found and is used by ntx_cuda_matmul (loads it on first
 * call, with the switches then: no_cublas disables it, cublas names the
 * library to try first). */
int ntx_cuda_have_cublas(void);

/* Dequantize n elements (multiple of the block size) of type to float (for
 * a split-row type: one row of n elements). */
int ntx_cuda_dequant_f32(uint32_t type, const void *src, float *dst, int64_t n,
			 ntx_stream_t s, struct ntx_err *err);

/* Embedding lookup: out[t] = dequant(row tok[t] of table) for n_tok tokens;
 * tok is a device array; table is (n_vocab rows of n elements of type). */
int ntx_cuda_get_rows(uint32_t type, const void *table, uint64_t row_bytes, int64_t n,
		      const int32_t *tok, int n_tok, float *out, ntx_stream_t s,
		      struct ntx_err *err);

/* ---- element-wise ---- */

/* out = x / sqrt(mean(x^2) + eps) * w per row; out may be NULL; when xq is
 * non-NULL the result is also written as q8 activations in format fmt
 * (dim a multiple of ntx_cuda_q8_group(fmt)), bitwise equal to
 * ntx_cuda_quantize_q8_fmt of the float result. */
int ntx_cuda_rmsnorm_fmt(float *out, void *xq, int fmt, const float *x, const float *w, int n_tok,
			 int dim, float eps, ntx_stream_t s, struct ntx_err *err);
/* = ntx_cuda_rmsnorm_fmt(out, xq, NTX_CUDA_Q8F_32, ...). */
int ntx_cuda_rmsnorm(float *out, void *xq, const float *x, const float *w, int n_tok,
		     int dim, float eps, ntx_stream_t s, struct ntx_err *err);

/* out = silu(g) * u (n elements; out may alias g). */
int ntx_cuda_swiglu(float *out, const float *g, const float *u, int64_t n, ntx_stream_t s,
		    struct ntx_err *err);

/* x += y (n elements). */
int ntx_cuda_add(float *x, const float *y, int64_t n, ntx_stream_t s, struct ntx_err *err);

/* x[r][i] += b[i] for n_rows rows of dim (a bias on every row). */
int ntx_cuda_add_rows(float *x, const float *b, int n_rows, int64_t dim, ntx_stream_t s,
		      struct ntx_err *err);

/* ---- RoPE and the KV cache ----
 * The cache of one layer: K and V each [n_seq][n_ctx][n_head_kv*head_dim],
 * F16 (kv_f16 = 1) or F32. */
struct ntx_cuda_kv {
	void *k, *v;
	int kv_f16;
	int n_ctx, n_seq, n_head_kv, head_dim;
};

/* RoPE parameters: theta_i(pos) = pos * freq_scale * base^(-2i/n_rot) / freqs[i]
 * (freqs: device pointer to n_rot/2 floats, or NULL), applied to adjacent
 * pairs (2i, 2i+1), i < n_rot/2, of each head (GGUF "normal" llama RoPE),
 * or with neox = 1 to the pairs (i, i + n_rot/2) (NEOX style: qwen2,
 * qwen3, qwen3moe); elements from n_rot on are left alone either way. */
struct ntx_cuda_rope {
	int n_rot;
	float base;
	float freq_scale;
	const float *freqs;
	/* optional: device table of the n_rot/2 inverse frequencies filled
	 * by ntx_cuda_rope_table (the same bits as computed in place, without
	 * a double-precision pow per pair in every launch); NULL: computed */
	const double *inv;
	int neox;               /* 0: adjacent pairs; 1: halves */
};

/* Fill inv[0 .. n_rot/2) with freq_scale * base^(-2i/n_rot) / freqs[i] in
 * double precision (rope->freqs and rope->inv are ignored). */
int ntx_cuda_rope_table(const struct ntx_cuda_rope *rope, double *inv, ntx_stream_t s,
			struct ntx_err *err);

/* Apply RoPE in place to q (n_tok x n_head x head_dim) and k (n_tok x
 * n_head_kv x head_dim) at positions pos[t] (device), then store k and v
 * (n_tok x n_head_kv x head_dim) into the cache at (seq[t], pos[t]). */
int ntx_cuda_rope_store(float *q, float *k, const float *v, int n_tok, int n_head,
			const struct ntx_cuda_kv *kv, const int32_t *seq, const int32_t *pos,
			const struct ntx_cuda_rope *rope, ntx_stream_t s, struct ntx_err *err);

/* Causal GQA attention over the cache: token t's query q[t] (n_head heads)
 * attends to positions 0..pos[t] of sequence seq[t]; out[t] = n_head*head_dim
 * floats. Scale 1/sqrt(head_dim). Long contexts are split over the sequence
 * (flash-decoding) into chunks of max(64, ceil((pos[t] + 1) / S)) positions
 * merged in chunk order, S = min(64, ceil(2048 / n_head), ceil(n_ctx / 64))
 * for n_tok <= NTX_CUDA_GEMV_MAX_TOK (batch-invariant: a token's result does
 * not depend on n_tok or the other tokens); for larger n_tok (prefill) S
 * shrinks as n_tok grows (fewer, longer chunks). The launch configuration
 * depends only on n_tok, n_head and kv->n_ctx (never on pos), so the call
 * can be captured in a CUDA graph and replayed with new positions.
 * ws: ntx_cuda_attention_ws_bytes(n_tok, ...) bytes; 0 when no split is
 * needed. It is not monotonic in n_tok: a workspace shared by calls of
 * 1..U tokens must have the largest size over n_tok = 1..U (for n_tok <= 8
 * the size is n_tok * n_head * S * (4 * head_dim + 8) + 8448 bytes). */
size_t ntx_cuda_attention_ws_bytes(int n_tok, int n_head, int head_dim, int n_ctx);
int ntx_cuda_attention(float *out, const float *q, int n_tok, int n_head,
		       const struct ntx_cuda_kv *kv, const int32_t *seq, const int32_t *pos,
		       void *ws, size_t ws_bytes, ntx_stream_t s, struct ntx_err *err);

/* As ntx_cuda_attention (bitwise the same float output), in one launch
 * instead of two (the last CTA of each token's splits merges them), and
 * when xq_out is non-NULL also writes out as q8 activations of
 * n_head*head_dim per token in format fmt, bitwise equal to
 * ntx_cuda_quantize_q8_fmt of out; this needs (n_head / n_head_kv) *
 * head_dim to be a multiple of ntx_cuda_q8_group(fmt) (else EINVAL: run
 * ntx_cuda_quantize_q8_fmt on out instead). The workspace holds counters
 * that must be zero before the first call: cudaMemset the whole of ws once
 * after allocating it; every call leaves them zero again. Calls that share
 * a workspace must not run concurrently. */
int ntx_cuda_attention_q8_fmt(float *out, void *xq_out, int fmt, const float *q, int n_tok,
			      int n_head, const struct ntx_cuda_kv *kv, const int32_t *seq,
			      const int32_t *pos, void *ws, size_t ws_bytes, ntx_stream_t s,
			      struct ntx_err *err);
/* = ntx_cuda_attention_q8_fmt(out, xq_out, NTX_CUDA_Q8F_32, ...). */
int ntx_cuda_attention_q8(float *out, void *xq_out, const float *q, int n_tok, int n_head,
			  const struct ntx_cuda_kv *kv, const int32_t *seq, const int32_t *pos,
			  void *ws, size_t ws_bytes, ntx_stream_t s, struct ntx_err *err);

/* ---- mixture of experts ----
 * The router's logits: logits[t][e] = W[e] . x[t] for n_tok rows of n_in
 * floats and n_expert rows of F32 weights (ffn_gate_inp, as in the file:
 * llama-quantize never quantizes it). One warp per (token, expert), a
 * fixed summation order: a token's logits do not depend on n_tok or the
 * other tokens (batch-invariant for any n_tok). */
int ntx_cuda_moe_router(const float *w, const float *x, float *logits, int64_t n_in,
			int n_expert, int n_tok, ntx_stream_t s, struct ntx_err *err);
/* out[j] = x[idx[j]] for j < n_rows rows of dim floats (idx: device). */
int ntx_cuda_gather_rows(const float *x, const int32_t *idx, float *out, int n_rows,
			 int64_t dim, ntx_stream_t s, struct ntx_err *err);
/* The weighted sum of each token's k expert outputs, added to x:
 * x[t][i] += sum over s = 0 .. k-1, in that order, of w[t*k + s] *
 * y[src[t*k + s]][i] (the sum starts from the s = 0 product, then the
 * total is added to x[t][i]; products and sums rounded separately, no
 * fused multiply-add), for n_tok rows of dim floats. w and src are device
 * arrays; rows of y may be in any order (expert groups): the result does
 * not depend on it. */
int ntx_cuda_moe_sum(float *x, const float *y, const float *w, const int32_t *src, int n_tok,
		     int k, int64_t dim, ntx_stream_t s, struct ntx_err *err);

/* ---- launches ----
 * Programmatic dependent launch (PDL, compute capability 9.0+): each
 * kernel may be scheduled while the one before it in the stream finishes;
 * it waits for that kernel's completion before touching memory, so results
 * are bitwise the same with PDL on or off (tests/gpu check it). Only launch
 * latency overlaps; a CUDA graph captured with PDL on keeps it. */

/* 1 if kernels launched now on the current device use PDL: compute
 * capability 9.0 or more and the switch no_pdl (NTX_NO_PDL) off, unless
 * overridden by ntx_cuda_pdl_set; else 0 (also when no device is usable). */
int ntx_cuda_pdl_enabled(void);
/* Override the choice for later launches (and captures): on = 1 uses PDL
 * wherever the device supports it, whatever no_pdl says; on = 0 never;
 * on = -1 returns to the automatic choice. For tests and benchmarks; not
 * to be called while kernels are being launched from another thread. */
void ntx_cuda_pdl_set(int on);

/* ---- misc ---- */

/* Index of the maximum of each of n_rows rows of n floats (lowest index on
 * ties, NaN counts as -inf) into out (int32 in device memory, or mapped
 * pinned host memory): ntx_argmax of the CPU wherever row[0] is not NaN.
 * Each row is cut into slices, one CTA each, merged by the last CTA of the
 * row. ws: at least ntx_cuda_argmax_ws_bytes(n_rows) bytes, 16-byte
 * aligned, zeroed once before the first call (its counters return to zero
 * after every call); every call on one workspace must pass the same
 * ws_bytes (the layout follows it) and none may run concurrently with
 * another. */
size_t ntx_cuda_argmax_ws_bytes(int n_rows);
int ntx_cuda_argmax(const float *x, int64_t n, int n_rows, int32_t *out, void *ws,
		    size_t ws_bytes, ntx_stream_t s, struct ntx_err *err);

/* Cosine similarity between rows of a and b accumulated into acc[0] += sum
 * cos, acc[1] += sum cos^2 (device doubles), for layer-skip calibration. */
int ntx_cuda_cos_accum(const float *a, const float *b, int n_tok, int dim, double *acc,
		       ntx_stream_t s, struct ntx_err *err);

#ifdef __cplusplus
}
#endif

#endif
