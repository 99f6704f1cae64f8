/* arch.h - architectures as data. One descriptor per GGUF architecture
 * (general.architecture) holds the rules llama.cpp hard-codes for it: the
 * RoPE pairing, per-head q/k norms, whether the FFN is a mixture of experts
 * and which key gives the expert width. model.c fills the model's numbers
 * (struct ntx_llama_config) from the "<arch>." keys under these rules; the
 * engine and the kernels read the config's fields, never the name.
 *
 * What is not here: the BOS rule is the vocabulary's (tokenizer.ggml.pre and
 * tokenizer.ggml.add_bos_token, lib/text), as in llama.cpp. */
#ifndef NTX_ARCH_H
#define NTX_ARCH_H

#include <stddef.h>

/* How RoPE pairs the dimensions of a head. */
enum ntx_rope_style {
	NTX_ROPE_NORM = 0, /* adjacent pairs (x[2i], x[2i+1]): llama */
	NTX_ROPE_NEOX = 1  /* halves (x[i], x[i + n_rot/2]): qwen2, qwen3, qwen3moe, gemma3 */
};

/* How the FFN of a layer is made. */
enum ntx_ffn_kind {
	NTX_FFN_DENSE = 0,      /* ffn_gate, ffn_up, ffn_down */
	NTX_FFN_MOE_IF_EXPERTS, /* dense, or experts when <arch>.expert_count > 0 (llama: Mixtral) */
	NTX_FFN_MOE             /* always experts (qwen3moe) */
};

struct ntx_arch {
	const char *name;              /* general.architecture */
	enum ntx_rope_style rope;
	int qk_norm;                   /* RMS norm of each q and k head before RoPE
					* (attn_q_norm, attn_k_norm: head_dim, F32) */
	enum ntx_ffn_kind ffn;
	const char *expert_ff_key;     /* key suffix of the expert FFN width; NULL:
					* feed_forward_length is the expert width */
	int qkv_bias;                  /* q, k, v projections add a bias
					* (attn_{q,k,v}.bias, F32): qwen2 */
};

/* The descriptor of architecture name[0..len), or NULL when ntx does not
 * run it. */
const struct ntx_arch *ntx_arch_find(const char *name, size_t len);

/* The names ntx runs, for messages: "llama, qwen3moe". */
const char *ntx_arch_names(void);

#endif
