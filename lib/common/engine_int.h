/* engine_int.h - internals shared by the engine's files (not a public API). */
#ifndef NTX_ENGINE_INT_H
#define NTX_ENGINE_INT_H

#include "engine.h"
#include "ntx_cpu.h"
#include "ntx_ops.h"

/* One layer's weights as views usable by the CPU kernels (host memory). */
struct ntx_layer_w {
	const float *attn_norm;  /* (n_embd) */
	struct ntx_wmat wq;      /* (n_embd -> n_head*head_dim) */
	struct ntx_wmat wk;      /* (n_embd -> n_head_kv*head_dim) */
	struct ntx_wmat wv;      /* (n_embd -> n_head_kv*head_dim) */
	struct ntx_wmat wo;      /* (n_head*head_dim -> n_embd) */
	const float *ffn_norm;   /* (n_embd) */
	struct ntx_wmat gate;    /* (n_embd -> n_ff) */
	struct ntx_wmat up;      /* (n_embd -> n_ff) */
	struct ntx_wmat down;    /* (n_ff -> n_embd) */
};

/* Weight views of layer l from tensors whose data starts at base + (tensor
 * file offset - base_off) (the GGUF map: base = map, base_off = 0). */
void ntx_layer_w_from_tensors(struct ntx_layer_w *w, const struct ntx_layer_tensors *lt,
			      const unsigned char *base, uint64_t base_off);
struct ntx_wmat ntx_wmat_from_tensor(const struct ntx_gguf_tensor *t, const void *data);

/* CPU scratch for up to n_ub tokens. */
struct ntx_cpu_scratch {
	int n_ub;
	float *xb, *q, *k, *v, *att, *g, *u, *tmp;
	void *mm;          /* matmul activation scratch */
	float *att_scratch;
};

int ntx_cpu_scratch_init(struct ntx_cpu_scratch *s, const struct ntx_llama_config *c,
			 const struct ntx_model *m, int n_ub, int n_ctx, int n_threads,
			 struct ntx_err *err);
void ntx_cpu_scratch_free(struct ntx_cpu_scratch *s);

/* Forward n_tok rows of hidden state x through one layer on the CPU,
 * in place. */
void ntx_cpu_layer_forward(struct ntx_pool *pool, const struct ntx_llama_config *c,
			   const struct ntx_rope *rope, const struct ntx_layer_w *w,
			   struct ntx_kv_layer *kv, float *x, int n_tok, const int32_t *seq,
			   const int32_t *pos, struct ntx_cpu_scratch *s);

#endif
