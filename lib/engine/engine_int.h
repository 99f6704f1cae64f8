/* engine_int.h - internals shared by the engine's files (not a public API):
 * engine.c (batch evaluation, the layer loop, the streamer's job list),
 * engine_cpu.c (the CPU layer), engine_gpu.c (device memory and the GPU
 * layer). The streamer that feeds non-resident layers is lib/stream
 * (stream.h). */
#ifndef NTX_ENGINE_INT_H
#define NTX_ENGINE_INT_H

#include <pthread.h>

#include "engine.h"
#include "layout.h"
#include "ntx_cpu.h"
#include "ntx_ops.h"
#include "stream.h"
#include "xcache.h"

#ifdef NTX_HAVE_CUDA
#include "ntx_cuda.h"
#endif

/* Experts that are not in memory (a disk layer's, read into the expert
 * cache, xcache.h): load makes up to cap of layer's experts available and
 * gives their gate, up and down data (3 pointers per id), valid until the
 * next load; 0 or -1 with *err. */
struct ntx_expert_src {
	int cap;
	int layer;
	int (*load)(void *ctx, int layer, const int *ids, int n, const void **ptr,
		    struct ntx_err *err);
	void *ctx;
};

/* One layer's weights as views usable by the CPU kernels (host memory).
 * With experts (cfg.n_expert > 0) gate, up and down are expert 0's
 * matrices of the 3-D ffn_*_exps tensors; ntx_wmat_expert gives expert e
 * (or, with xsrc, their data comes from xsrc and gate, up and down give the
 * shapes). */
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
	struct ntx_wmat router;  /* ffn_gate_inp (n_embd -> n_expert); data NULL: dense FFN */
	const float *q_norm;     /* (head_dim), or NULL */
	const float *k_norm;     /* (head_dim), or NULL */
	const float *bq, *bk, *bv; /* q, k, v projection biases, or NULL */
	const struct ntx_expert_src *xsrc; /* NULL: the experts are in memory */
};

/* Expert e of a 3-D expert tensor viewed as expert 0's matrix w: the
 * experts are n_out rows of row_bytes apart. */
static inline struct ntx_wmat ntx_wmat_expert(const struct ntx_wmat *w, int e)
{
	struct ntx_wmat x = *w;

	x.data = (const char *)w->data + (size_t)e * w->row_bytes * (size_t)w->n_out;
	return x;
}


/* Weight views of a layer from the GGUF map (base = map, base_off = 0). */
void ntx_layer_w_from_tensors(struct ntx_layer_w *w, const struct ntx_layer_tensors *lt,
			      const unsigned char *base, uint64_t base_off);
/* Weight views of a layer stored in the layout of layout.h at base. */
void ntx_layer_w_from_layout(struct ntx_layer_w *w, const struct ntx_layer_tensors *lt,
			     const struct ntx_layer_layout *lo, const void *base);
struct ntx_wmat ntx_wmat_from_tensor(const struct ntx_gguf_tensor *t, const void *data);

/* CPU scratch for up to n_ub tokens. With experts: router logits,
 * each token's k experts and weights, each expert's gathered rows, each
 * token's k expert outputs (summed in the token's top-k order, so that a
 * token's result does not depend on the other tokens of the pass). */
struct ntx_cpu_scratch {
	int n_ub;
	float *xb, *q, *k, *v, *att, *g, *u, *tmp;
	float *rl;         /* [n_ub][n_expert] */
	int32_t *sel;      /* [n_ub][k] */
	float *wgt;        /* [n_ub][k] */
	float *xg;         /* [n_ub][max(n_embd, n_ff)]: one expert's rows */
	float *acc;        /* [n_ub][k][n_embd] */
	int32_t *slot;     /* [n_ub * k]: t * k + j, grouped by expert */
	int32_t *first;    /* [2 * n_expert + 1]: each expert's run in slot, then fill counters */
	int *xids;         /* [n_expert]: the experts a pass chose */
	const void **xptr; /* [3 * n_expert]: their matrices from an ntx_expert_src */
	struct ntx_err xerr; /* why ntx_cpu_layer_forward returned -1 */
	void *mm;          /* matmul activation scratch */
	float *att_scratch;
	uint64_t *exp_count; /* [n_expert]: the routing counts of the layer being computed, or NULL */
};

int ntx_cpu_scratch_init(struct ntx_cpu_scratch *s, const struct ntx_llama_config *c,
			 const struct ntx_model *m, int n_ub, int n_ctx, int n_threads,
			 struct ntx_err *err);
void ntx_cpu_scratch_free(struct ntx_cpu_scratch *s);

/* Forward n_tok rows of hidden state x through one layer on the CPU, in
 * place. Returns the number of experts that ran (0 for a dense FFN), or -1
 * when w->xsrc could not load them (s->xerr says why). */
int ntx_cpu_layer_forward(struct ntx_pool *pool, const struct ntx_llama_config *c,
			   const struct ntx_rope *rope, const struct ntx_layer_w *w,
			   struct ntx_kv_layer *kv, float *x, int n_tok, const int32_t *seq,
			   const int32_t *pos, struct ntx_cpu_scratch *s);

/* ---- the engine ---- */

struct eng_layer {
	enum ntx_tier home;
	enum ntx_exec exec;
	int skip;                  /* in the engine's skip set: no weights, no KV */
	int job;                   /* index in the streamer's job list, or -1 */
	struct ntx_layer_layout lo;
	struct ntx_layer_w w;      /* host views into the GGUF map (CPU executor) */
	struct ntx_kv_layer kv;    /* host KV cache (CPU executor) */
	void *hot;                 /* huge-page layout copy (ram home, CPU executor) */
	void *dev;                 /* device layout copy (vram home) */
	void *dkv_k, *dkv_v;       /* device KV cache (GPU executor) */
	/* the expert split (plan "cpu_experts"; a resident GPU layer only):
	 * exp_slot[x] is expert x's place among the layer's resident experts
	 * or -1 for one the CPU computes from the GGUF map (L->w); the device
	 * copy holds the resident ones in lay (3-D views of n_exp_dev
	 * experts) and lo is lay's layout */
	int n_cpu_exp, n_exp_dev;
	int32_t *exp_slot;
	int32_t *cpu_slot;         /* [n_expert]: a CPU expert's place in w's stacks (x in the
				    * map; its rank among the CPU experts in exp_hot) */
	void *exp_hot;             /* huge-page copy of the CPU experts (gate, up, down stacks) */
	/* a MoE layer on disk computed by the CPU: its experts come from the
	 * pack through the expert cache (e->xc), its other weights from the
	 * GGUF map; not a streamer job */
	int xdisk;
	struct ntx_expert_src xsrc;
	struct ntx_layer_tensors lay;
	struct ntx_gguf_tensor exv[3];
};

struct ntx_gpu;      /* engine_gpu.c */

/* NTX_CUDA_GEMV_MAX_TOK (kernels/cuda/ntx_cuda.h; engine_gpu.c checks):
 * ntx_engine_decode_chunk on the GPU */
#define NTX_DECODE_CHUNK_GPU 8

#define NTX_X_HDR(n_ub) (((size_t)(n_ub) * 2 * sizeof(int32_t) + 255) & ~(size_t)255)

struct ntx_engine {
	const struct ntx_model *m;
	struct ntx_llama_config cfg;
	struct ntx_engine_opts o;  /* o.tunables: NULL (tun holds them) */
	struct ntx_tunables tun;   /* the switches, read once at ntx_engine_new */
	enum ntx_backend backend;
	int n_ctx, n_seq, n_ub, n_cut, n_threads; /* n_cut: prompt chunk */
	struct ntx_rope rope;
	struct ntx_pool *pool;
	struct eng_layer *layers;
	uint8_t *skip;             /* engine's skip set */
	struct ntx_wmat out_w;     /* output head (host) */
	void *out_hot;             /* huge-page copy of the head (CPU head) */
	void *hot_arena;           /* one huge-page mapping for every copy */
	size_t hot_arena_bytes;
	const float *out_norm;
	int head_on_gpu;
	struct ntx_cpu_scratch s;
	/* [n_ub][n_embd] hidden state (host; pinned with CUDA), at
	 * NTX_X_HDR(n_ub) bytes into x_blk: the GPU stages a chunk's seq and
	 * pos [n_ub] each in front of it, so that one copy carries all three */
	float *x;
	void *x_blk;
	float *x_in;               /* copy of a layer's input (cos stats) */
	float *head_in;            /* gathered normed rows for logits */
	float *head_logits;        /* CPU head's logits when only ids are wanted */
	size_t head_cap;           /* floats there */
	int32_t *seq0;             /* zeros for batches without seq */
	uint8_t *want_buf;         /* [n_ub] */
	struct ntx_cos_stats *cos;
	struct ntx_engine_stats st;
	uint64_t *exp_count;       /* [n_layer][n_expert] routing counts (MoE), or NULL */
	uint64_t *exp_cpu;         /* [n_layer]: of those, to CPU experts (the expert split) */
	struct ntx_gpu *gpu;       /* NULL on the CPU backend */
	struct ntx_streamer *str;  /* NULL when no layer's weights move (stream.h) */
	struct ntx_xcache *xc;     /* experts read from the pack on demand, or NULL */
	double xc_t_s;             /* time in its reads */
	const char *pack_path;
};

/* ---- GPU side (engine_gpu.c; stubs without CUDA) ---- */

/* Is a CUDA device usable? Fills why (e.g. "no CUDA device") when not. */
int ntx_gpu_usable(int device, char *why, size_t why_len);

/* Create the device context and every device buffer the plan needs but
 * the streamer's ring: resident weights, device KV for GPU-executed layers,
 * activations, output head. */
int ntx_gpu_init(struct ntx_engine *e, struct ntx_err *err);
void ntx_gpu_free(struct ntx_engine *e);
/* The compute stream (a cudaStream_t) the GPU layers run on: the
 * streamer's ring makes it wait for a slot's copy and marks slots free on
 * it. NULL without CUDA. */
struct CUstream_st *ntx_gpu_compute_stream(struct ntx_engine *e);

/* The rows of a chunk as the GPU layers take them: each run of more than
 * `small` consecutive rows of one sequence is a prompt segment (none when
 * verify), the other rows are decode rows, in chunks of at most `small`
 * rows within each run of them. Arrays: room for n entries each. */
struct ntx_row_cut {
	int n_rows, n_dc, n_seg;
	int *dc_r, *dc_k;         /* decode chunk: first row, rows */
	int *seg_off, *seg_len;   /* prompt segment: first row, rows */
};
void ntx_cut_rows(struct ntx_row_cut *c, const int32_t *seq, int n, int verify, int small);

/* Upload a chunk's token metadata (seq, pos) for the GPU layers and cut its
 * rows into decode rows and prompt segments (struct ntx_batch, verify). */
int ntx_gpu_begin_chunk(struct ntx_engine *e, const int32_t *seq, const int32_t *pos, int n,
			int verify, struct ntx_err *err);
/* Move the hidden state (n rows) to the device / to the host (waits). */
int ntx_gpu_x_to_device(struct ntx_engine *e, int n, struct ntx_err *err);
int ntx_gpu_x_to_host(struct ntx_engine *e, int n, struct ntx_err *err);
/* Enqueue layer l on the compute stream with weights at base (device,
 * layout of layout.h) for the n rows of the chunk begun last. */
int ntx_gpu_layer(struct ntx_engine *e, int l, const void *base, int n, struct ntx_err *err);
/* Final norm + head on the device for the wanted rows (x on device);
 * logits (host) get nr rows and/or ids the argmax of each (either may be
 * NULL; with only ids, no logits leave the device). */
int ntx_gpu_head(struct ntx_engine *e, const uint8_t *want, int n, float *logits, int32_t *ids,
		 int *nr, struct ntx_err *err);
/* A whole decode step (n <= NTX_CUDA_GEMV_MAX_TOK tokens, every evaluated
 * layer resident, head on the GPU) replayed from a captured CUDA graph
 * that also holds the copies of the inputs (seq, pos, and x, embedded on
 * the host) and of the outputs (as ntx_gpu_head); no ntx_gpu_begin_chunk
 * before it. */
int ntx_gpu_graph_forward(struct ntx_engine *e, const int32_t *seq, const int32_t *pos, int n,
			  int verify, const uint8_t *mask, const uint8_t *want, float *logits,
			  int32_t *ids, int *nr, struct ntx_err *err);
int ntx_gpu_graphs_enabled(const struct ntx_engine *e);
/* Whether a step of this shape (token count, mask, wanted rows, outputs)
 * runs from a graph: on the second use of a shape and after; the first
 * runs launch by launch (ntx_gpu_begin_chunk and the layers). */
int ntx_gpu_graph_due(struct ntx_engine *e, int n, const uint8_t *mask, const uint8_t *want,
		      const float *logits, const int32_t *ids);
/* MoE models (tests): for each of the n rows of the chunk computed last,
 * the smallest router gap over its GPU layers (ntx_moe_route: the logit
 * of the k-th chosen expert minus that of the best one left out; FLT_MAX
 * when no MoE layer ran); n must not exceed that chunk's rows. Returns 0, or -1
 * when the engine has no GPU context or no experts. */
int ntx_gpu_moe_gaps(const struct ntx_engine *e, float *gap, int n);
/* Cosine stats of layer l on the device (collect_cos). */
int ntx_gpu_cos_begin(struct ntx_engine *e, int n, struct ntx_err *err);
int ntx_gpu_cos_end(struct ntx_engine *e, int l, int n, struct ntx_err *err);
int ntx_gpu_cos_fetch(struct ntx_engine *e, struct ntx_err *err);
/* Wait for all device work. */
int ntx_gpu_sync(struct ntx_engine *e, struct ntx_err *err);
/* Peak bandwidth GB/s of the device. */
double ntx_gpu_peak_gbps(const struct ntx_engine *e);

#endif
