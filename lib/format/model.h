/* model.h - the model view on top of a GGUF file: hyperparameters from the
 * "<arch>." keys (with llama.cpp's defaults) under the architecture's
 * descriptor (arch.h), tensors grouped per layer and checked against the
 * hyperparameters, tied-output detection, and the model fingerprint that
 * later tools use to refuse mismatched files. */
#ifndef NTX_MODEL_H
#define NTX_MODEL_H

#include <stdint.h>

#include "arch.h"
#include "err.h"
#include "gguf.h"

struct ntx_llama_config {
	char arch[32];        /* general.architecture ("llama", "qwen3moe") */
	const struct ntx_arch *desc; /* its descriptor (static) */
	int n_layer;          /* llama.block_count */
	int n_embd;           /* llama.embedding_length */
	int n_ff;             /* width of every FFN matrix: llama.feed_forward_length,
			       * or with experts the width of one expert
			       * (qwen3moe.expert_feed_forward_length) */
	int n_head;           /* llama.attention.head_count */
	int n_head_kv;        /* llama.attention.head_count_kv (default n_head) */
	int head_dim;         /* llama.attention.key_length (default n_embd / n_head) */
	int n_rot;            /* llama.rope.dimension_count (default head_dim) */
	int n_ctx_train;      /* llama.context_length */
	int64_t n_vocab;      /* llama.vocab_size, else tokens, else token_embd rows */
	double rope_base;     /* llama.rope.freq_base (default 10000) */
	double rope_freq_scale; /* 1 / llama.rope.scaling.factor for linear scaling, else 1 */
	double rms_eps;       /* llama.attention.layer_norm_rms_epsilon (default 1e-5) */
	int64_t file_type;    /* general.file_type, -1 if absent */
	/* from the descriptor */
	enum ntx_rope_style rope_style;
	int qk_norm;          /* per-head RMS norm of q and k before RoPE */
	int qkv_bias;         /* q, k and v projections add a bias */
	/* mixture of experts (n_expert 0: a dense FFN) */
	int n_expert;         /* <arch>.expert_count */
	int n_expert_used;    /* <arch>.expert_used_count: k of the router's top-k */
	double expert_weights_scale; /* <arch>.expert_weights_scale; 0: none */
};

/* One transformer block's tensors (borrowed from the GGUF). Shapes in ggml
 * order (ne0 = input features). With experts (n_expert > 0) the FFN
 * matrices are the 3-D ffn_{gate,up,down}_exps: expert e is slice e
 * (ne2 = n_expert), and router is ffn_gate_inp. The optional slots are NULL
 * when the architecture has no such tensor. */
struct ntx_layer_tensors {
	const struct ntx_gguf_tensor *attn_norm; /* (n_embd), F32 */
	const struct ntx_gguf_tensor *wq;        /* (n_embd, n_head*head_dim) */
	const struct ntx_gguf_tensor *wk;        /* (n_embd, n_head_kv*head_dim) */
	const struct ntx_gguf_tensor *wv;        /* (n_embd, n_head_kv*head_dim) */
	const struct ntx_gguf_tensor *wo;        /* (n_head*head_dim, n_embd) */
	const struct ntx_gguf_tensor *ffn_norm;  /* (n_embd), F32 */
	const struct ntx_gguf_tensor *w_gate;    /* (n_embd, n_ff) */
	const struct ntx_gguf_tensor *w_up;      /* (n_embd, n_ff) */
	const struct ntx_gguf_tensor *w_down;    /* (n_ff, n_embd) */
	const struct ntx_gguf_tensor *router;    /* (n_embd, n_expert), or NULL (dense) */
	const struct ntx_gguf_tensor *q_norm;    /* (head_dim), F32, or NULL */
	const struct ntx_gguf_tensor *k_norm;    /* (head_dim), F32, or NULL */
	const struct ntx_gguf_tensor *bq;        /* (n_head*head_dim), F32, or NULL */
	const struct ntx_gguf_tensor *bk;        /* (n_head_kv*head_dim), F32, or NULL */
	const struct ntx_gguf_tensor *bv;        /* (n_head_kv*head_dim), F32, or NULL */
	uint64_t bytes;                          /* all blk.N.* tensors */
	int n_tensors;                           /* count of blk.N.* tensors */
};

/* Slots of the tensors the forward pass uses per layer; the last six are
 * optional (a dense Llama layer has the first 9). */
#define NTX_LAYER_NT 15

/* The layer's tensor in slot i of a fixed order (attn_norm, wq, wk, wv, wo,
 * ffn_norm, w_gate, w_up, w_down, router, q_norm, k_norm, bq, bk, bv), e.g. for
 * packing; NULL for an optional slot the layer does not have. */
const struct ntx_gguf_tensor *ntx_layer_tensor(const struct ntx_layer_tensors *lt, int i);

struct ntx_model {
	struct ntx_gguf *gguf;                    /* owned */
	struct ntx_llama_config cfg;
	const struct ntx_gguf_tensor *tok_embd;    /* (n_embd, n_vocab) */
	const struct ntx_gguf_tensor *output_norm; /* (n_embd), F32 */
	const struct ntx_gguf_tensor *output;      /* (n_embd, n_vocab); == tok_embd when tied */
	const struct ntx_gguf_tensor *rope_freqs;  /* (n_rot/2), F32, or NULL */
	int output_tied;                           /* no output.weight: uses tok_embd */
	struct ntx_layer_tensors *layers;          /* n_layer entries */
	uint64_t layer_bytes;                      /* sum over layers */
	uint64_t nonlayer_bytes;                   /* every tensor not in a layer */
	uint64_t fingerprint;
	char fingerprint_hex[17];
};

enum {
	NTX_MODEL_VOCAB_ONLY = 1 /* accept files without tensors (tokenizer use) */
};

/* The number of tensors layer lt has in its slots (9 to NTX_LAYER_NT). */
int ntx_layer_n_tensors(const struct ntx_layer_tensors *lt);

/* Open a GGUF file as a model. With NTX_MODEL_VOCAB_ONLY, a file with no
 * tensors is accepted (layers == NULL). Returns NULL and fills *err. */
struct ntx_model *ntx_model_open(const char *path, unsigned flags, struct ntx_err *err);

/* Build the view on an open GGUF; on success the model owns g. On failure g
 * is left open (the caller closes it). */
struct ntx_model *ntx_model_from_gguf(struct ntx_gguf *g, unsigned flags, struct ntx_err *err);

void ntx_model_close(struct ntx_model *m);

/* Read just the hyperparameters (no tensor checks). Returns 0 or -1. */
int ntx_llama_config_read(const struct ntx_gguf *g, struct ntx_llama_config *cfg,
			  struct ntx_err *err);

/* The fingerprint: XXH64 of the file size and every byte of the header,
 * metadata and tensor directory (not the tensor data). */
uint64_t ntx_gguf_fingerprint(const struct ntx_gguf *g);

/* Layer index of a tensor name "blk.N.*", or -1. */
int ntx_tensor_layer(const char *name);

#endif
