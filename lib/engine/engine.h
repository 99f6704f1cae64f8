/* engine.h - the inference engine: evaluates batches of tokens through the
 * model on the CPU and/or the GPU, with every layer placed by a plan (home
 * tier and executor), a KV cache per sequence, and optional layer skipping.
 *
 * One engine serves up to n_seq sequences; each token of a batch names its
 * sequence and position, so the same call does prompt processing (many
 * tokens of one sequence), batched decoding (one token of each of many
 * sequences) and speculative verification (k tokens of one sequence). */
#ifndef NTX_ENGINE_H
#define NTX_ENGINE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model.h"
#include "plan.h"
#include "tunables.h"

enum ntx_backend { NTX_BACKEND_AUTO = 0, NTX_BACKEND_CPU = 1, NTX_BACKEND_CUDA = 2 };
enum ntx_io { NTX_IO_DIRECT = 0, NTX_IO_MMAP = 1 };

const char *ntx_backend_name(enum ntx_backend b);

struct ntx_engine_opts {
	enum ntx_backend backend;
	int n_ctx;                 /* KV positions per sequence; 0 = min(n_ctx_train, 4096) */
	enum ntx_kv_type kv_type;  /* NTX_KV_F16 (default) or NTX_KV_F32 */
	int n_seq;                 /* sequences (KV slots); 0 = 1 */
	int n_ubatch;              /* max tokens per internal step; 0 = 512 */
	int n_threads;             /* CPU threads; 0 = all cores */
	int gpu_index;
	const struct ntx_plan *plan; /* NULL: everything on the backend */
	const char *pack_path;     /* overrides plan->pack_path */
	enum ntx_io io;            /* streamed-layer data path */
	const uint8_t *skip;       /* n_layer flags (1 = skip) or NULL */
	volatile sig_atomic_t *interrupt; /* set asynchronously to stop eval */
	int collect_cos;           /* record per-layer cosine(in, out) stats */
	/* CPU-computed RAM-tier weights are copied into anonymous huge pages
	 * (faster to stream) up to this many bytes, the rest read in place from
	 * the GGUF map; the map's pages of a copied weight are released, so
	 * one copy is resident. 0: up to MemAvailable less 2 GiB; < 0: no
	 * copies (the page cache is the only copy, as --ram-budget wants). */
	int64_t copy_limit;
	/* The switches (tunables.h), copied at ntx_engine_new; NULL: read from
	 * the environment there (ntx_tunables_from_env). The engine hands them
	 * to the CPU and CUDA kernels, whose switches are process-wide: the
	 * last engine created sets them. */
	const struct ntx_tunables *tunables;
};

struct ntx_engine;

/* Is CUDA device `device` usable? When not, why says so (e.g. "no usable
 * CUDA device (no CUDA-capable device is detected)", "this build has no
 * CUDA support"). */
int ntx_engine_gpu_usable(int device, char *why, size_t why_len);

/* Build an engine for model m (borrowed: must outlive the engine). Returns
 * NULL and fills *err (NTX_EDEVICE for GPU failures, NTX_ENOMEM, ...). */
struct ntx_engine *ntx_engine_new(const struct ntx_model *m, const struct ntx_engine_opts *o,
				  struct ntx_err *err);
void ntx_engine_free(struct ntx_engine *e);

/* A batch of tokens to evaluate. */
struct ntx_batch {
	int n_tok;
	const int32_t *tok;     /* token ids */
	const int32_t *pos;     /* positions (0-based) within their sequence */
	const int32_t *seq;     /* sequence of each token; NULL = all 0 */
	const uint8_t *want;    /* 1 = return logits for this token; NULL = last only */
	/* 1: every token gets the logits it gets when decoded alone, one at a
	 * time (speculative verification). 0: a run of more than 8 tokens of
	 * one sequence is a prompt segment, which the GPU multiplies with its
	 * prompt kernels, shaped by the segment alone (the same result in any
	 * batch that holds the same segment). */
	int verify;
	/* Non-NULL: receives, for each wanted token in batch order, the id of
	 * its largest logit (lowest id on ties, as ntx_argmax; NaN counts as
	 * -inf on the GPU): greedy decoding. With the head on the GPU only
	 * these ids leave the device when logits is NULL. */
	int32_t *ids;
};

/* Evaluate a batch: stores the batch's K/V at (seq, pos) and writes one row of
 * n_vocab logits per wanted token, in batch order, to logits (may be NULL
 * when none are wanted or when b->ids takes the result). Positions 0..pos-1 of each token's sequence must
 * already be in the cache (or earlier in this batch). layer_mask (n_layer
 * flags, 1 = skip) overrides the engine's skip set for this call (self-
 * speculative drafting); NULL uses it. Returns 0 or -1 (NTX_EINTR when
 * interrupted). */
int ntx_engine_eval(struct ntx_engine *e, const struct ntx_batch *b, const uint8_t *layer_mask,
		    float *logits, struct ntx_err *err);

/* Tell the engine that positions >= n of sequence seq are no longer valid
 * (speculative rollback, a new prompt). Cheap: nothing is cleared. */
void ntx_engine_kv_truncate(struct ntx_engine *e, int seq, int n);

int ntx_engine_n_ctx(const struct ntx_engine *e);
int ntx_engine_n_seq(const struct ntx_engine *e);
/* Tokens per internal step: ntx_engine_eval cuts larger batches there. */
int ntx_engine_n_ubatch(const struct ntx_engine *e);
/* Prompts are evaluated in chunks of this many tokens (ntx_generate, batch
 * mode), the same for any number of sequences: min(ubatch, context). */
int ntx_engine_prompt_chunk(const struct ntx_engine *e);
/* The most tokens a pass takes on the decode path (the GPU's batch-invariant
 * GEMV: its kernels are the decode step's, warm and bit-identical to it);
 * the prompt chunk on the CPU, where passes of any size are exact. */
int ntx_engine_decode_chunk(const struct ntx_engine *e);
int64_t ntx_engine_n_vocab(const struct ntx_engine *e);
enum ntx_backend ntx_engine_backend(const struct ntx_engine *e);
const struct ntx_model *ntx_engine_model(const struct ntx_engine *e);
/* The switches the engine read at ntx_engine_new (borrowed, the engine's). */
const struct ntx_tunables *ntx_engine_tunables(const struct ntx_engine *e);

/* Weight bytes read per decoded token: every evaluated layer and the output
 * head (for roofline figures). */
uint64_t ntx_engine_weight_bytes_per_token(const struct ntx_engine *e);

/* Peak memory bandwidth of the device doing most of the work in GB/s (the
 * GPU's from its clock and bus width); 0 when unknown (CPU). */
double ntx_engine_peak_gbps(const struct ntx_engine *e);

/* Per-layer cosine similarity between the hidden state entering and leaving
 * each layer, over every token evaluated since the last reset (collect_cos). */
struct ntx_cos_stats {
	double sum, sum_sq;
	int64_t n;
};
const struct ntx_cos_stats *ntx_engine_cos_stats(const struct ntx_engine *e);
void ntx_engine_cos_reset(struct ntx_engine *e);

/* Run-time statistics (cumulative). */
struct ntx_engine_stats {
	int64_t n_eval_calls;
	int64_t n_tokens;
	double t_eval_s;
	/* streaming (filled by the tiered engine) */
	uint64_t bytes_h2d, bytes_disk, bytes_cpu_weights;
	double t_gpu_wait_s, t_cpu_wait_s, t_h2d_s, t_disk_s, t_cpu_s;
	int n_layers_home[3], n_layers_exec[2], n_layers_skipped;
	uint64_t xcache_hits, xcache_misses; /* the expert cache (disk experts) */
	int fell_back_to_cpu;     /* --backend auto found no usable GPU */
	char backend_note[200];   /* why */
};
void ntx_engine_get_stats(const struct ntx_engine *e, struct ntx_engine_stats *s);

/* Mixture of experts: how often the router chose each expert, [n_layer]
 * [n_expert] counts over every row evaluated since the engine was made
 * (prompts, generated tokens, verification passes); NULL for a dense
 * model. ntx-run --expert-stats writes them for ntx-plan. */
const uint64_t *ntx_engine_expert_counts(const struct ntx_engine *e);

/* Layer l of a MoE model: the router's choices (tokens x experts used),
 * those that went to experts the CPU computes beside the GPU (the expert
 * split), and the expert cache's hits and reads (experts on disk). 0s for
 * a dense model. */
void ntx_engine_expert_layer(const struct ntx_engine *e, int l, uint64_t *routed, uint64_t *cpu,
			     uint64_t *hits, uint64_t *misses);

#endif
