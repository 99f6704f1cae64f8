/* ntx_ops.h - element-wise and attention ops of the Llama forward pass on the
 * CPU (float32 activations). Each op is the reference for its CUDA twin in
 * kernels/cuda. Row-major activations: x[t * dim + i]. */
#ifndef NTX_OPS_H
#define NTX_OPS_H

#include <stdint.h>

#include "ntx_cpu.h"

/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n_tok rows of dim. */
void ntx_op_rmsnorm(float *out, const float *x, const float *w, int n_tok, int dim, float eps);

/* RoPE tables: theta_i(pos) = pos * freq_scale * base^(-2i/n_rot) / freqs[i]
 * for pair i < n_rot/2 (freqs may be NULL = all 1). */
struct ntx_rope {
	int n_rot;
	double base;
	double freq_scale;
	const float *freqs; /* rope_freqs.weight, n_rot/2 entries, or NULL */
	int neox;           /* 0: pairs (x[2i], x[2i+1]) ("normal", llama);
			     * 1: pairs (x[i], x[i + n_rot/2]) (NEOX: qwen3moe) */
};

/* Rotate, in place, the pairs of the first n_rot elements of each of
 * n_heads heads of head_dim in each of n_tok rows (row stride
 * n_heads*head_dim) at positions pos[t]: (a, b) -> (a cos - b sin,
 * a sin + b cos) with pair i at angle theta_i(pos[t]). Which elements pair
 * up is r->neox: adjacent ones (GGUF's "normal" llama layout) or the two
 * halves of the rotated part (NEOX). */
void ntx_op_rope(float *x, int n_tok, int n_heads, int head_dim, const int32_t *pos,
		 const struct ntx_rope *r);

/* Per-head RMS norm in place: each of n_rows rows of head_dim elements
 * becomes x / sqrt(mean(x^2) + eps) * w (w: head_dim), as ntx_op_rmsnorm
 * (qwen3moe's attn_q_norm / attn_k_norm before RoPE). */
void ntx_op_head_rmsnorm(float *x, const float *w, int n_rows, int head_dim, float eps);

/* out = silu(g) * u over n elements (g, u may alias out). */
void ntx_op_swiglu(float *out, const float *g, const float *u, int64_t n);

/* x += y over n elements. */
void ntx_op_add(float *x, const float *y, int64_t n);

/* x[r][i] += b[i] for n rows of dim (a bias on every row). */
void ntx_op_add_rows(float *x, const float *b, int n, int64_t dim);

/* ---- attention over a KV cache ---- */

/* A KV cache of one layer for n_seq sequences: K and V are
 * [n_seq][n_ctx][n_head_kv * head_dim], each element F16 (uint16) or F32. */
struct ntx_kv_layer {
	void *k, *v;
	int f16;       /* element type: 1 = F16, 0 = F32 */
	int n_ctx;
	int n_seq;
	int n_head_kv;
	int head_dim;
};

/* Store n_tok rows of k and v ([t][n_head_kv*head_dim] floats) at
 * (seq[t], pos[t]). */
void ntx_op_kv_store(struct ntx_kv_layer *kv, const float *k, const float *v, int n_tok,
		     const int32_t *seq, const int32_t *pos);

/* Causal GQA attention: for each token t, query q[t] (n_head heads of
 * head_dim) attends to positions 0..pos[t] of sequence seq[t] of the cache;
 * out[t] gets n_head*head_dim floats. Scale 1/sqrt(head_dim). Parallel over
 * (token, head) on the pool. scratch: ntx_op_attention_scratch floats. */
size_t ntx_op_attention_scratch(int n_threads, int n_ctx);
void ntx_op_attention(struct ntx_pool *pool, float *out, const float *q, int n_tok,
		      int n_head, const struct ntx_kv_layer *kv, const int32_t *seq,
		      const int32_t *pos, float *scratch);

#endif
