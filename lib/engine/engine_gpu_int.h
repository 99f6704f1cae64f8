/* engine_gpu_int.h - the CUDA engine's state and the helpers its files
 * share (engine_gpu.c: device memory, the dense layer, the head, graphs;
 * engine_gpu_moe.c: mixture-of-experts layers). CUDA builds only. */
#ifndef NTX_ENGINE_GPU_INT_H
#define NTX_ENGINE_GPU_INT_H

#include <cuda_runtime_api.h>

#include "engine_int.h"

#define HEAD_ROWS 64   /* logits rows computed per head pass */
#define MAX_GRAPHS 32  /* captured decode graphs (per token count, wanted rows, mask) */
#define OUT_LOGITS 1   /* what the head returns: logits rows, their argmax */
#define OUT_IDS 2

struct ntx_gpu {
	int dev;
	cudaStream_t cs, ps;            /* compute; uploads of resident weights */
	double peak_gbps;
	/* activations [n_ub rows] */
	float *x, *xb, *q, *k, *v, *att, *h, *g, *u, *xin, *xh, *logits;
	void *xq;
	void *ws_mm, *ws_att;
	size_t ws_mm_bytes, ws_att_bytes;
	int32_t *d_seq, *d_pos, *h_seq, *h_pos;
	float *h_logits;                /* pinned [HEAD_ROWS][V] */
	int32_t *d_ids, *h_ids;         /* argmax of each logits row [HEAD_ROWS] */
	int32_t *m_ids;                 /* h_ids as the device sees it (written there by the
					 * argmax kernel, no copy), or NULL: d_ids + a copy */
	void *ws_am;                    /* argmax workspace (counters zeroed once) */
	double *d_cos, *h_cos;          /* [n_layer][2] */
	/* resident non-layer tensors */
	void *out_w;
	float *out_norm, *rope_freqs;
	double *rope_inv;               /* RoPE inverse frequencies [n_rot / 2] */
	/* the tensors as the device holds them (dev_tensors): resident layers
	 * and the head in split rows where that applies, the rest as in the
	 * file; resident[l] says which layers have their own views */
	struct ntx_layer_tensors *dlt;          /* [n_layer] */
	struct ntx_gguf_tensor (*dtv)[NTX_LAYER_NT];
	uint8_t *resident;
	struct ntx_gguf_tensor out_t;
	/* decode steps captured as CUDA graphs (resident layers only) */
	struct gpu_graph {
		int n, out;           /* out: OUT_LOGITS | OUT_IDS */
		uint32_t want;
		uint64_t mask;        /* hash of the layer mask */
		cudaGraphExec_t exec;
	} graphs[MAX_GRAPHS], seen[MAX_GRAPHS]; /* seen: shapes run once, not captured */
	int n_graphs, n_seen;
	int no_graphs;            /* NTX_NO_GRAPHS=1 */
	/* the rows of the chunk begun last (ntx_gpu_begin_chunk): chunks of
	 * at most NTX_CUDA_GEMV_MAX_TOK decode rows and prompt segments */
	struct ntx_row_cut cut;
	/* mixture of experts (n_expert > 0; K = n_expert_used): the rows
	 * routed to the experts [U*K][n_embd] in expert groups and their
	 * down projections; router logits [U][n_expert] and their pinned
	 * twin; the map [gather rows U*K][src U*K] (int32) [weights U*K]
	 * (float), pinned and on the device; per token its K experts; the
	 * groups (expert, first row, rows) of the layer being computed */
	float *moe_x, *moe_y, *d_rl, *h_rl;
	void *d_map, *h_map;
	int32_t *moe_ids;
	int *grp_ex, *grp_j0, *grp_c;
	int n_grp;
	float *moe_gap;                 /* [U]: ntx_gpu_moe_gaps */
	/* the expert split: the layer's normalized input [U][E] and the CPU
	 * experts' output rows [U*K][E] (pinned; NULL without split layers) */
	float *h_xb, *h_ey;
	/* expert uploads (engine_gpu_moe.c): two VRAM staging buffers of
	 * xup_bytes, an expert's gate, up and down each; copied (on ps) and
	 * free again (on cs) events; the groups uploaded in this layer
	 * [U*K] (and as much scratch); the rows of the CPU's groups and
	 * scratch [2][U*K]; the huge-page copy registered with the driver
	 * (or NULL) */
	void *xup[2];
	size_t xup_bytes;
	cudaEvent_t xup_copied[2], xup_free[2];
	int xup_next;
	uint8_t *grp_up;
	int *xup_rows;
	void *xup_pinned;
};

/* "cuda: WHAT failed: reason" (NTX_EDEVICE). */
int ntx_gpu_fail(struct ntx_err *err, cudaError_t rc, const char *what);

#define CK(call, what)                                                         \
	do {                                                                   \
		cudaError_t rc_ = (call);                                      \
		if (rc_ != cudaSuccess)                                        \
			return ntx_gpu_fail(err, rc_, what);                      \
	} while (0)

/* engine_gpu_ops.c: the q8 activation format W consumes (-1: float); does
 * an input of n rows to these consumers need q8 rows; is W float. */
int ntx_gpu_fmt_of(const struct ntx_gguf_tensor *t);
int ntx_gpu_needs_q8(int n, const struct ntx_gguf_tensor *a, const struct ntx_gguf_tensor *b,
		     const struct ntx_gguf_tensor *c);
int ntx_gpu_is_float(const struct ntx_gguf_tensor *t);
/* y (=|+=) W x for n <= NTX_CUDA_GEMV_MAX_TOK rows, quantizing x for W's
 * format first when W takes q8 activations. */
int ntx_gpu_gemv_one(struct ntx_engine *e, const struct ntx_gguf_tensor *t, const void *w,
		     const float *x, float *y, int n, int acc, struct ntx_err *err);
/* The same for any n: chunks of NTX_CUDA_GEMV_MAX_TOK rows, so each row
 * gets what it gets alone. */
int ntx_gpu_gemv_rows(struct ntx_engine *e, const struct ntx_gguf_tensor *t, const void *w,
		      const float *x, float *y, int n, int acc, struct ntx_err *err);
/* y (=|+=) W x for n rows: GEMV for few rows, tiles + tensor cores else. */
int ntx_gpu_mm(struct ntx_engine *e, const struct ntx_gguf_tensor *t, const void *w,
	       const float *x, float *y, int n, int acc, struct ntx_err *err);
/* The q8 format shared by up to three consumers of one input, or -2 when
 * they need different ones; -1 when all are float. */
int ntx_gpu_shared_fmt(const struct ntx_gguf_tensor *a, const struct ntx_gguf_tensor *b,
		       const struct ntx_gguf_tensor *c);

/* engine_gpu_moe.c: what the MoE path takes (gpu init), and the FFN of a
 * MoE layer l on the n rows of the chunk (input normalized in g->xb),
 * added to g->x; by_cut: the ranges are the chunk's decode chunks and
 * prompt segments, else the n rows are one range. */
int ntx_gpu_check_moe(const struct ntx_engine *e, struct ntx_err *err);
int ntx_gpu_moe_ffn(struct ntx_engine *e, int l, const struct ntx_layer_tensors *lt,
		    const void **W, int n, int by_cut, struct ntx_err *err);
/* The staging buffers of expert uploads (tun.expert_upload; none without
 * split layers, or without the VRAM), and their release. */
int ntx_gpu_moe_upload_init(struct ntx_engine *e, struct ntx_err *err);
void ntx_gpu_moe_upload_free(struct ntx_engine *e);

#endif
