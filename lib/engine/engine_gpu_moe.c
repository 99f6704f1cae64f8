/* engine_gpu_moe.c - mixture-of-experts layers on the CUDA engine: the
 * router, the tokens grouped by expert, the experts the GPU computes and,
 * with the expert split, those the CPU computes beside it. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine_int.h"
#include "moe.h"
#include "ntx_ops.h"

#ifdef NTX_HAVE_CUDA
#include "engine_gpu_int.h"

/* What the MoE path takes: an F32 router (as in every file llama.cpp
 * writes), at most NTX_MOE_MAX_EXPERT experts. */
int ntx_gpu_check_moe(const struct ntx_engine *e, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	int l;

	if (c->n_expert <= 0)
		return 0;
	if (c->n_expert > NTX_MOE_MAX_EXPERT || c->n_expert_used < 1 ||
	    c->n_expert_used > c->n_expert)
		return ntx_err_set(err, NTX_EUNSUP, "cuda: %d experts, %d used per token (at most %d)",
				   c->n_expert, c->n_expert_used, NTX_MOE_MAX_EXPERT);
	for (l = 0; l < c->n_layer; l++)
		if (e->m->layers[l].router->type != NTX_TYPE_F32)
			return ntx_err_set(err, NTX_EUNSUP, "cuda: blk.%d.ffn_gate_inp is %s, not F32", l,
					   ntx_type_name(e->m->layers[l].router->type));
	return 0;
}

/* ---- mixture of experts ----
 * The FFN of a MoE layer on n rows whose normalized input is in g->xb:
 * router logits on the device (one kernel, batch-invariant), copied to the
 * host and routed there (ntx_moe_route: softmax, top-k, renormalised
 * weights; this synchronises the stream, so MoE models run without CUDA
 * graphs); then for each range of rows (a decode chunk of at most
 * NTX_CUDA_GEMV_MAX_TOK rows or one prompt segment, each computed as it
 * would be alone) the rows are grouped by expert, expert after expert and
 * in row order within an expert; every group runs the dense FFN's
 * kernels on that expert's matrices (the GEMV for groups of at most
 * NTX_CUDA_GEMV_MAX_TOK rows: batch-invariant; tiles + tensor cores for
 * larger groups of prompt rows) into one output row per (token, slot);
 * one kernel then adds each token's K outputs, weighted, in slot order to
 * the residual. So a decode token gets the same bits alone, in a
 * verification chunk or in a batch. */

/* Group rows [r, r + cnt) by expert: gather row j of g->moe_x is token
 * idx[j]; (token t, slot s) reads row src[t*K + s]; rows of a range start
 * at r * K. Appends the groups to g->grp_*. */
static void moe_group(struct ntx_engine *e, int r, int cnt)
{
	struct ntx_gpu *g = e->gpu;
	int K = e->cfg.n_expert_used, NE = e->cfg.n_expert, U = e->n_ub;
	int32_t *idx = (int32_t *)g->h_map, *src = idx + (size_t)U * K;
	int j = r * K, x, t, s;

	for (x = 0; x < NE; x++) {
		int j0 = j;

		for (t = r; t < r + cnt; t++)
			for (s = 0; s < K; s++)
				if (g->moe_ids[(size_t)t * K + s] == x) {
					idx[j] = t;
					src[(size_t)t * K + s] = j++;
				}
		if (j > j0) {
			g->grp_ex[g->n_grp] = x;
			g->grp_j0[g->n_grp] = j0;
			g->grp_c[g->n_grp++] = j - j0;
		}
	}
}

/* The expert e slice of a stack of expert matrices. */
static const void *expert_w(const struct ntx_gguf_tensor *t, const void *w, int x)
{
	return (const char *)w + (size_t)x * (t->nbytes / (size_t)t->ne[2]);
}

/* One group: c rows of g->moe_x from row j0 through the expert at place x
 * of the device's stack into the same rows of g->moe_y. */
static int moe_expert(struct ntx_engine *e, const struct ntx_layer_tensors *lt, const void **W,
		      int x, int j0, int c, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	ntx_stream_t st = (ntx_stream_t)g->cs;
	int64_t E = e->cfg.n_embd, F = e->cfg.n_ff;
	const void *wg = expert_w(lt->w_gate, W[6], x), *wu = expert_w(lt->w_up, W[7], x);
	const void *wd = expert_w(lt->w_down, W[8], x);
	const float *xr = g->moe_x + (size_t)j0 * E;
	float *h = g->h + (size_t)j0 * F, *gg = g->g + (size_t)j0 * F, *uu = g->u + (size_t)j0 * F;
	float *y = g->moe_y + (size_t)j0 * E;
	int fg = ntx_gpu_shared_fmt(lt->w_gate, lt->w_up, NULL);

	if (c > NTX_CUDA_GEMV_MAX_TOK)
		return ntx_gpu_mm(e, lt->w_gate, wg, xr, gg, c, 0, err) ||
				       ntx_gpu_mm(e, lt->w_up, wu, xr, uu, c, 0, err) ||
				       ntx_cuda_swiglu(h, gg, uu, (int64_t)c * F, st, err) ||
				       ntx_gpu_mm(e, lt->w_down, wd, h, y, c, 0, err)
			       ? -1
			       : 0;
	if (fg == -2) {
		if (ntx_gpu_gemv_one(e, lt->w_gate, wg, xr, gg, c, 0, err) ||
		    ntx_gpu_gemv_one(e, lt->w_up, wu, xr, uu, c, 0, err) ||
		    ntx_cuda_swiglu(h, gg, uu, (int64_t)c * F, st, err))
			return -1;
	} else if ((fg >= 0 && ntx_cuda_quantize_q8_fmt(xr, g->xq, E, c, fg, st, err)) ||
		   ntx_cuda_gemv_swiglu(lt->w_gate->type, wg, lt->w_up->type, wu, E, F, xr, g->xq, h, c,
					st, err)) {
		return -1;
	}
	return ntx_gpu_gemv_one(e, lt->w_down, wd, h, y, c, 0, err);
}

/* ---- expert uploads ----
 * With the expert split, a CPU expert that a prompt pass routes at least
 * tun.expert_upload (> NTX_CUDA_GEMV_MAX_TOK) rows to is copied over PCIe
 * into one of two VRAM staging buffers, on the upload stream once the
 * compute stream is done with that buffer's last expert, and the GPU
 * computes it there as it computes its own experts for such a group (the
 * tiles of ntx_gpu_mm), while the CPU computes the smaller groups. Decode
 * and verification ranges (at most NTX_CUDA_GEMV_MAX_TOK rows) never
 * upload, so their rows keep the bits of a step alone. The source is the
 * huge-page copy of the CPU experts, registered with the driver (pinned)
 * where it can be, else pageable memory. Without VRAM for the buffers
 * there are no uploads (the CPU computes its experts, as with 0). */
int ntx_gpu_moe_upload_init(struct ntx_engine *e, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	size_t need = 0;
	int l, b;

	if (e->tun.expert_upload <= 0)
		return 0;
	for (l = 0; l < e->cfg.n_layer; l++) {
		const struct eng_layer *L = &e->layers[l];
		size_t xb = L->w.gate.row_bytes * L->w.gate.n_out + L->w.up.row_bytes * L->w.up.n_out +
			    L->w.down.row_bytes * L->w.down.n_out;

		if (L->n_cpu_exp && !e->skip[l] && xb > need)
			need = xb;
	}
	if (!need)
		return 0;
	g->grp_up = calloc((size_t)e->n_ub * (size_t)e->cfg.n_expert_used, 2);
	g->xup_rows = malloc((size_t)e->n_ub * (size_t)e->cfg.n_expert_used * 2 * sizeof(int));
	if (!g->grp_up || !g->xup_rows)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (b = 0; b < 2; b++) {
		if (cudaMalloc(&g->xup[b], need) != cudaSuccess) {
			cudaGetLastError();
			g->xup[b] = NULL;
			ntx_gpu_moe_upload_free(e);
			return 0;
		}
		CK(cudaEventCreateWithFlags(&g->xup_copied[b], cudaEventDisableTiming), "cudaEventCreate");
		CK(cudaEventCreateWithFlags(&g->xup_free[b], cudaEventDisableTiming), "cudaEventCreate");
		CK(cudaEventRecord(g->xup_free[b], g->cs), "cudaEventRecord");
	}
	g->xup_bytes = need;
	if (e->hot_arena) {
		if (cudaHostRegister(e->hot_arena, e->hot_arena_bytes, cudaHostRegisterDefault) ==
		    cudaSuccess)
			g->xup_pinned = e->hot_arena;
		else
			cudaGetLastError();
	}
	return 0;
}

void ntx_gpu_moe_upload_free(struct ntx_engine *e)
{
	struct ntx_gpu *g = e->gpu;
	int b;

	if (g->xup_pinned)
		cudaHostUnregister(g->xup_pinned);
	g->xup_pinned = NULL;
	for (b = 0; b < 2; b++) {
		cudaFree(g->xup[b]);
		if (g->xup_copied[b])
			cudaEventDestroy(g->xup_copied[b]);
		if (g->xup_free[b])
			cudaEventDestroy(g->xup_free[b]);
		g->xup[b] = NULL;
		g->xup_copied[b] = g->xup_free[b] = NULL;
	}
	g->xup_bytes = 0;
	free(g->grp_up);
	free(g->xup_rows);
	g->grp_up = NULL;
	g->xup_rows = NULL;
}

/* g->grp_up for the groups of layer l: of the CPU experts' groups, those
 * the GPU computes after a copy (ntx_moe_pick_uploads with the plan's
 * rates: the CPU's for the experts' weight type, the link's). */
static void moe_pick_uploads(struct ntx_engine *e, int l)
{
	struct ntx_gpu *g = e->gpu;
	const struct eng_layer *L = &e->layers[l];
	const struct ntx_plan *p = e->o.plan;
	int *rows = g->xup_rows, *scr = rows + (size_t)e->n_ub * e->cfg.n_expert_used;
	uint8_t *up = g->grp_up + g->n_grp; /* after the n_grp flags: scratch */
	double bytes = (double)(L->w.gate.row_bytes * L->w.gate.n_out +
				L->w.up.row_bytes * L->w.up.n_out +
				L->w.down.row_bytes * L->w.down.n_out);
	double cpu = 0, cpu_b = 0, h2d = 0;
	int i, n = 0, t = (int)L->w.gate.type;

	if (p) {
		cpu = p->hw.cpu_type_gbps[t] > 0 ? p->hw.cpu_type_gbps[t] : p->hw.cpu_gbps;
		cpu_b = p->hw.cpu_type_batch_gbps[t] > 0 ? p->hw.cpu_type_batch_gbps[t]
							 : p->hw.cpu_batch_gbps;
		h2d = p->hw.h2d_gbps;
	}
	for (i = 0; i < g->n_grp; i++)
		if (L->exp_slot[g->grp_ex[i]] < 0)
			rows[n++] = g->grp_c[i];
	ntx_moe_pick_uploads(rows, n, bytes, cpu * 1e9, cpu_b * 1e9, h2d * 1e9, e->tun.expert_upload,
			     scr, up);
	for (i = 0, n = 0; i < g->n_grp; i++)
		g->grp_up[i] = L->exp_slot[g->grp_ex[i]] < 0 && up[n++];
}

/* Group i (CPU expert x, c rows) through a staging buffer: the expert's
 * three matrices copied there on the upload stream, then computed on the
 * compute stream; the buffer is free again after that. */
static int moe_upload_expert(struct ntx_engine *e, int l, int x, int j0, int c,
			     struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	const struct eng_layer *L = &e->layers[l];
	const struct ntx_wmat *w[3] = { &L->w.gate, &L->w.up, &L->w.down };
	const void *W[NTX_LAYER_NT] = { 0 };
	int b = g->xup_next, i;
	size_t off = 0;

	g->xup_next ^= 1;
	CK(cudaStreamWaitEvent(g->ps, g->xup_free[b], 0), "cudaStreamWaitEvent");
	for (i = 0; i < 3; i++) {
		struct ntx_wmat m = ntx_wmat_expert(w[i], L->cpu_slot[x]);
		size_t nb = m.row_bytes * (size_t)m.n_out;

		CK(cudaMemcpyAsync((char *)g->xup[b] + off, m.data, nb, cudaMemcpyHostToDevice, g->ps),
		   "cudaMemcpyAsync (expert upload)");
		W[6 + i] = (char *)g->xup[b] + off;
		off += nb;
	}
	e->st.bytes_h2d += off;
	CK(cudaEventRecord(g->xup_copied[b], g->ps), "cudaEventRecord");
	CK(cudaStreamWaitEvent(g->cs, g->xup_copied[b], 0), "cudaStreamWaitEvent");
	/* the file's 3-D tensors give type and shape; expert 0 of the buffer */
	if (moe_expert(e, &e->m->layers[l], W, 0, j0, c, err))
		return -1;
	CK(cudaEventRecord(g->xup_free[b], g->cs), "cudaEventRecord");
	return 0;
}

/* One group of the expert split on the CPU: c rows from gather row j0
 * (tokens idx[j] of the host copy of the input) through expert x, read
 * from the GGUF map, into the same rows of g->moe_y (copied after the
 * GPU's groups on the compute stream). */
static int moe_cpu_expert(struct ntx_engine *e, int l, int x, int j0, int c, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	const struct eng_layer *L = &e->layers[l];
	struct ntx_cpu_scratch *s = &e->s;
	const int32_t *idx = (const int32_t *)g->h_map;
	int xs = L->cpu_slot[x]; /* in the map, or in the huge-page copy */
	struct ntx_wmat gw = ntx_wmat_expert(&L->w.gate, xs), uw = ntx_wmat_expert(&L->w.up, xs);
	struct ntx_wmat dw = ntx_wmat_expert(&L->w.down, xs);
	int64_t E = e->cfg.n_embd, F = e->cfg.n_ff;
	float *y = g->h_ey + (size_t)j0 * E;
	double t0 = ntx_now_s();
	int i;

	for (i = 0; i < c; i++)
		memcpy(s->xg + i * E, g->h_xb + (size_t)idx[j0 + i] * E, (size_t)E * sizeof(float));
	ntx_cpu_matmul(e->pool, &gw, s->xg, c, s->g, s->mm);
	ntx_cpu_matmul(e->pool, &uw, s->xg, c, s->u, s->mm);
	ntx_op_swiglu(s->g, s->g, s->u, (int64_t)c * F);
	ntx_cpu_matmul(e->pool, &dw, s->g, c, y, s->mm);
	e->st.bytes_cpu_weights += gw.row_bytes * gw.n_out + uw.row_bytes * uw.n_out +
				   dw.row_bytes * dw.n_out;
	e->st.t_cpu_s += ntx_now_s() - t0;
	CK(cudaMemcpyAsync(g->moe_y + (size_t)j0 * E, y, (size_t)c * E * 4, cudaMemcpyHostToDevice,
			   g->cs),
	   "cudaMemcpyAsync (CPU experts)");
	return 0;
}

/* The MoE FFN of the n rows of the chunk (input normalized in g->xb),
 * added to g->x; by_cut: the ranges are the chunk's decode chunks and
 * prompt segments (layer_mixed), else the n rows are one range. With the
 * expert split (L->exp_slot) the layer's CPU experts run on the host
 * (moe_cpu_expert) while the GPU computes its own. */
int ntx_gpu_moe_ffn(struct ntx_engine *e, int l, const struct ntx_layer_tensors *lt,
		    const void **W, int n, int by_cut, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	const struct eng_layer *L = &e->layers[l];
	const struct ntx_llama_config *c = &e->cfg;
	ntx_stream_t st = (ntx_stream_t)g->cs;
	int K = c->n_expert_used, NE = c->n_expert, U = e->n_ub, t, i;
	size_t mk = (size_t)U * K;
	float *w = (float *)((int32_t *)g->h_map + 2 * mk);
	float *dw = (float *)((int32_t *)g->d_map + 2 * mk);

	if (ntx_cuda_moe_router((const float *)W[9], g->xb, g->d_rl, c->n_embd, NE, n, st, err))
		return -1;
	CK(cudaMemcpyAsync(g->h_rl, g->d_rl, (size_t)n * NE * 4, cudaMemcpyDeviceToHost, g->cs),
	   "cudaMemcpyAsync (router logits)");
	if (L->n_cpu_exp)
		CK(cudaMemcpyAsync(g->h_xb, g->xb, (size_t)n * c->n_embd * 4, cudaMemcpyDeviceToHost,
				   g->cs),
		   "cudaMemcpyAsync (expert input)");
	/* also orders the last layer's map copy before h_map is rewritten */
	CK(cudaStreamSynchronize(g->cs), "router");
	for (t = 0; t < n; t++) {
		float gap;

		ntx_moe_route(g->h_rl + (size_t)t * NE, NE, K, c->expert_weights_scale,
			      g->moe_ids + (size_t)t * K, w + (size_t)t * K, &gap);
		if (gap < g->moe_gap[t])
			g->moe_gap[t] = gap;
	}
	if (e->exp_count) {
		uint64_t *cnt = e->exp_count + (size_t)l * NE;

		for (t = 0; t < n * K; t++) {
			cnt[g->moe_ids[t]]++;
			e->exp_cpu[l] += L->exp_slot && L->exp_slot[g->moe_ids[t]] < 0;
		}
	}
	g->n_grp = 0;
	if (!by_cut) {
		moe_group(e, 0, n);
	} else {
		for (i = 0; i < g->cut.n_dc; i++)
			moe_group(e, g->cut.dc_r[i], g->cut.dc_k[i]);
		for (i = 0; i < g->cut.n_seg; i++)
			moe_group(e, g->cut.seg_off[i], g->cut.seg_len[i]);
	}
	/* [idx n*K] [src n*K] [w n*K] of the U*K-sized map */
	CK(cudaMemcpyAsync(g->d_map, g->h_map, (size_t)n * K * 4, cudaMemcpyHostToDevice, g->cs),
	   "cudaMemcpyAsync (expert map)");
	CK(cudaMemcpyAsync((int32_t *)g->d_map + mk, (int32_t *)g->h_map + mk, (size_t)n * K * 4,
			   cudaMemcpyHostToDevice, g->cs),
	   "cudaMemcpyAsync (expert map)");
	CK(cudaMemcpyAsync(dw, w, (size_t)n * K * 4, cudaMemcpyHostToDevice, g->cs),
	   "cudaMemcpyAsync (expert weights)");
	if (ntx_cuda_gather_rows(g->xb, (const int32_t *)g->d_map, g->moe_x, n * K, c->n_embd, st,
				 err))
		return -1;
	/* the GPU's experts are queued first, so that they run while the CPU
	 * computes its own (the expert split) */
	for (i = 0; i < g->n_grp; i++) {
		int x = g->grp_ex[i], xs = L->exp_slot ? L->exp_slot[x] : x;

		if (xs >= 0 && moe_expert(e, lt, W, xs, g->grp_j0[i], g->grp_c[i], err))
			return -1;
	}
	/* then the CPU experts with enough rows to be worth a copy to VRAM
	 * (queued before the CPU starts on the others) */
	if (L->n_cpu_exp && g->xup_bytes)
		moe_pick_uploads(e, l);
	for (i = 0; L->n_cpu_exp && g->xup_bytes && i < g->n_grp; i++)
		if (g->grp_up[i] && moe_upload_expert(e, l, g->grp_ex[i], g->grp_j0[i], g->grp_c[i], err))
			return -1;
	for (i = 0; L->n_cpu_exp && i < g->n_grp; i++)
		if (L->exp_slot[g->grp_ex[i]] < 0 && !(g->xup_bytes && g->grp_up[i]) &&
		    moe_cpu_expert(e, l, g->grp_ex[i], g->grp_j0[i], g->grp_c[i], err))
			return -1;
	return ntx_cuda_moe_sum(g->x, g->moe_y, dw, (const int32_t *)g->d_map + mk, n, K, c->n_embd,
				st, err);
}

#endif
