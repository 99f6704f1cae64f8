/* engine_gpu.c - the engine's device side: device memory for resident
 * weights, KV caches of GPU-executed layers and activations; the GPU layer
 * (a sequence of kernels from kernels/cuda on the compute stream); the
 * output head; decode steps as CUDA graphs (mixture-of-experts layers:
 * engine_gpu_moe.c). Streamed layers come from the
 * streamer's ring of device slots (lib/stream/ring.c), ordered against the
 * compute stream there. Without CUDA this file provides stubs that say so. */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

/* ---- the rows of a chunk (engine_int.h; built without CUDA too, for
 * tests/unit/test_engine_ref.c) ---- */

void ntx_cut_rows(struct ntx_row_cut *c, const int32_t *seq, int n, int verify, int small)
{
	int i = 0, d0 = -1;

	c->n_rows = n;
	c->n_dc = c->n_seg = 0;
	while (i <= n) {
		int j = i + 1, prompt;

		while (j < n && seq[j] == seq[i])
			j++;
		prompt = i < n && !verify && j - i > small;
		if (i == n || prompt) { /* close the run of decode rows */
			for (; d0 >= 0 && d0 < i; d0 += small) {
				c->dc_r[c->n_dc] = d0;
				c->dc_k[c->n_dc++] = i - d0 < small ? i - d0 : small;
			}
			d0 = -1;
		}
		if (i == n)
			break;
		if (prompt) {
			c->seg_off[c->n_seg] = i;
			c->seg_len[c->n_seg++] = j - i;
		} else if (d0 < 0) {
			d0 = i;
		}
		i = j;
	}
}

#ifdef NTX_HAVE_CUDA

#include "engine_gpu_int.h"

int ntx_gpu_usable(int device, char *why, size_t why_len)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);

	if (rc != cudaSuccess) {
		ntx_gpu_unusable_why(why, why_len, cudaGetErrorString(rc), ntx_nvidia_driver_present());
		cudaGetLastError();
		return 0;
	}
	if (device >= n) {
		snprintf(why, why_len, "no CUDA device %d (%d found)", device, n);
		return 0;
	}
	return 1;
}

static int dalloc(void **p, size_t bytes, const char *what, struct ntx_err *err)
{
	cudaError_t rc = cudaMalloc(p, bytes ? bytes : 16);

	if (rc != cudaSuccess) {
		*p = NULL;
		return ntx_err_set(err, NTX_EDEVICE, "cuda: cudaMalloc(%zu) for %s failed: %s", bytes,
				   what, cudaGetErrorString(rc));
	}
	return 0;
}

static size_t max_z(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* Upload layer l's tensors from the GGUF map into dst in the layout. */
static int upload_layer(struct ntx_engine *e, int l, void *dst, cudaStream_t st,
			struct ntx_err *err)
{
	const struct eng_layer *L = &e->layers[l];
	int i, x;

	for (i = 0; i < NTX_LAYER_NT; i++) {
		const struct ntx_gguf_tensor *t = ntx_layer_tensor(&e->m->layers[l], i);
		size_t xb;

		if (!t)
			continue;
		if (!L->exp_slot || i < 6 || i > 8) {
			CK(cudaMemcpyAsync((char *)dst + L->lo.offset[i], t->data, t->nbytes,
					   cudaMemcpyHostToDevice, st),
			   "cudaMemcpyAsync (weights)");
			continue;
		}
		/* the expert split: only the resident experts, in their places */
		xb = t->nbytes / (size_t)t->ne[2];
		for (x = 0; x < (int)t->ne[2]; x++)
			if (L->exp_slot[x] >= 0)
				CK(cudaMemcpyAsync((char *)dst + L->lo.offset[i] + (size_t)L->exp_slot[x] * xb,
						   (const char *)t->data + (size_t)x * xb, xb,
						   cudaMemcpyHostToDevice, st),
				   "cudaMemcpyAsync (experts)");
	}
	return 0;
}

/* The tensors of layer l as the device holds them (see ntx_gpu.dlt). */
static const struct ntx_layer_tensors *dev_lt(const struct ntx_engine *e, int l)
{
	const struct ntx_gpu *g = e->gpu;

	return g->resident && g->resident[l] ? &g->dlt[l] : &e->m->layers[l];
}

/* Rewrite the resident matrix (or 3-D stack of expert matrices) t at w
 * (device) in split rows where that applies and the direct-load GEMV is
 * enabled (ntx_cuda.h: aligned 16-byte loads in the GEMV; off with the
 * switch gemv_dl = 0, NTX_GEMV_DL=0); *view is t with the type the device
 * data now has. */
static int split_resident(const struct ntx_gguf_tensor *t, void *w, struct ntx_gguf_tensor *view,
			  cudaStream_t st, struct ntx_err *err)
{
	uint32_t ty = (t->n_dims == 2 || t->n_dims == 3) && ntx_cuda_gemv_dl_enabled()
			      ? ntx_cuda_split_type(t->type, t->ne[0])
			      : t->type;
	int64_t rows = t->ne[1] * (t->n_dims == 3 ? t->ne[2] : 1);

	*view = *t;
	if (ty == t->type)
		return 0;
	/* a stack of experts (3-D) is ne1 * ne2 rows: split rows keep the
	 * bytes of each row, so expert e stays at e * (its bytes) */
	if (ntx_cuda_repack(t->type, w, t->ne[0], rows, (ntx_stream_t)st, err))
		return -1;
	view->type = ty;
	return 0;
}

/* Layer l now in device memory at dev: views of its tensors, matrices in
 * split rows. */
static int dev_tensors(struct ntx_engine *e, int l, void *dev, cudaStream_t st, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	const struct ntx_layer_tensors *lt = e->layers[l].exp_slot ? &e->layers[l].lay
								   : &e->m->layers[l];
	const struct ntx_gguf_tensor **dst[NTX_LAYER_NT];
	struct ntx_layer_tensors *d = &g->dlt[l];
	int i;

	*d = *lt;
	dst[0] = &d->attn_norm, dst[1] = &d->wq, dst[2] = &d->wk, dst[3] = &d->wv, dst[4] = &d->wo;
	dst[5] = &d->ffn_norm, dst[6] = &d->w_gate, dst[7] = &d->w_up, dst[8] = &d->w_down;
	dst[9] = &d->router, dst[10] = &d->q_norm, dst[11] = &d->k_norm;
	dst[12] = &d->bq, dst[13] = &d->bk, dst[14] = &d->bv;
	for (i = 0; i < NTX_LAYER_NT; i++) {
		if (!ntx_layer_tensor(lt, i))
			continue;
		if (split_resident(ntx_layer_tensor(lt, i), (char *)dev + e->layers[l].lo.offset[i],
				   &g->dtv[l][i], st, err))
			return -1;
		*dst[i] = &g->dtv[l][i];
	}
	g->resident[l] = 1;
	return 0;
}

static size_t mm_ws(const struct ntx_gguf_tensor *t, int n_tok)
{
	return ntx_cuda_matmul_ws_bytes(t->ne[0], t->ne[1], n_tok);
}

/* Select the device, create the compute and prefetch streams, read the
 * memory bandwidth, load cuBLAS and decide PDL before any capture. */
static int gpu_open_device(struct ntx_engine *e, struct ntx_gpu *g, struct ntx_err *err)
{
	int clk = 0, bus = 0;

	ntx_cuda_tunables_set(&e->tun); /* before any launch or cuBLAS load */
	g->dev = e->o.gpu_index;
	CK(cudaSetDevice(g->dev), "cudaSetDevice");
	CK(cudaStreamCreateWithFlags(&g->cs, cudaStreamNonBlocking), "cudaStreamCreate");
	CK(cudaStreamCreateWithFlags(&g->ps, cudaStreamNonBlocking), "cudaStreamCreate");
	if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, g->dev) == cudaSuccess &&
	    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, g->dev) == cudaSuccess)
		g->peak_gbps = 2.0 * clk * 1e3 * (bus / 8.0) / 1e9;
	cudaGetLastError();
	/* load cuBLAS (prompt processing) now, before any graph capture, and
	 * decide programmatic dependent launch for this device (no_pdl):
	 * captured graphs keep the launches' choice */
	(void)ntx_cuda_have_cublas();
	(void)ntx_cuda_pdl_enabled();
	g->no_graphs = e->tun.no_graphs;
	return 0;
}

/* Device activations of U rows, logits and ids of the head, statistics;
 * their pinned host twins and the row-cut arrays. */
static int gpu_alloc_activations(struct ntx_engine *e, struct ntx_gpu *g, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	size_t E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim;
	size_t KV = (size_t)c->n_head_kv * c->head_dim, F = (size_t)c->n_ff;
	size_t U = (size_t)e->n_ub, V = (size_t)c->n_vocab;
	size_t mx = max_z(E, max_z(Q, F));
	size_t K = c->n_expert > 0 ? (size_t)c->n_expert_used : 1, FK = F * K;

	/* [seq U][pos U] (padded to NTX_X_HDR) and x, as e->x_blk on the host */
	if (dalloc((void **)&g->d_seq, NTX_X_HDR(U) + U * E * 4, "activations", err) ||
	    dalloc((void **)&g->xb, U * E * 4, "activations", err) ||
	    dalloc((void **)&g->xin, U * E * 4, "activations", err) ||
	    dalloc((void **)&g->xh, HEAD_ROWS * E * 4, "activations", err) ||
	    dalloc((void **)&g->q, U * Q * 4, "activations", err) ||
	    dalloc((void **)&g->att, U * Q * 4, "activations", err) ||
	    dalloc((void **)&g->k, U * KV * 4, "activations", err) ||
	    dalloc((void **)&g->v, U * KV * 4, "activations", err) ||
	    dalloc((void **)&g->h, U * FK * 4, "activations", err) ||
	    dalloc((void **)&g->g, U * FK * 4, "activations", err) ||
	    dalloc((void **)&g->u, U * FK * 4, "activations", err) ||
	    dalloc((void **)&g->logits, HEAD_ROWS * V * 4, "logits", err) ||
	    dalloc((void **)&g->d_ids, HEAD_ROWS * 4, "token ids", err) ||
	    dalloc(&g->ws_am, ntx_cuda_argmax_ws_bytes(HEAD_ROWS), "argmax workspace", err) ||
	    dalloc(&g->xq, ntx_cuda_q8_bytes((int64_t)mx, NTX_CUDA_GEMV_MAX_TOK), "activations",
		   err) ||
	    dalloc((void **)&g->d_cos, (size_t)c->n_layer * 2 * sizeof(double), "statistics", err))
		return -1;
	CK(cudaMemset(g->d_cos, 0, (size_t)c->n_layer * 2 * sizeof(double)), "cudaMemset");
	CK(cudaMemset(g->ws_am, 0, ntx_cuda_argmax_ws_bytes(HEAD_ROWS)), "cudaMemset");
	g->d_pos = g->d_seq + U;
	g->x = (float *)((char *)g->d_seq + NTX_X_HDR(U));
	g->h_seq = (int32_t *)e->x_blk;
	g->h_pos = g->h_seq + U;
	g->h_logits = ntx_host_alloc(HEAD_ROWS * V * 4, err);
	g->h_ids = ntx_host_alloc(HEAD_ROWS * 4, err);
	g->h_cos = calloc((size_t)c->n_layer * 2, sizeof(double));
	g->cut.dc_r = malloc(U * sizeof(int));
	g->cut.dc_k = malloc(U * sizeof(int));
	g->cut.seg_off = malloc(U * sizeof(int));
	g->cut.seg_len = malloc(U * sizeof(int));
	if (g->h_ids && cudaHostGetDevicePointer((void **)&g->m_ids, g->h_ids, 0) != cudaSuccess) {
		cudaGetLastError();
		g->m_ids = NULL;
	}
	if (!g->h_logits || !g->h_ids || !g->h_cos || !g->cut.dc_r || !g->cut.dc_k ||
	    !g->cut.seg_off || !g->cut.seg_len)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (c->n_expert > 0) {
		size_t NE = (size_t)c->n_expert, map = U * K * 12;

		if (dalloc((void **)&g->moe_x, U * K * E * 4, "expert activations", err) ||
		    dalloc((void **)&g->moe_y, U * K * E * 4, "expert activations", err) ||
		    dalloc((void **)&g->d_rl, U * NE * 4, "router logits", err) ||
		    dalloc(&g->d_map, map, "expert map", err))
			return -1;
		g->h_rl = ntx_host_alloc(U * NE * 4, err);
		g->h_map = ntx_host_alloc(map, err);
		g->moe_ids = malloc(U * K * sizeof(int32_t));
		g->grp_ex = malloc(U * K * sizeof(int));
		g->grp_j0 = malloc(U * K * sizeof(int));
		g->grp_c = malloc(U * K * sizeof(int));
		g->moe_gap = malloc(U * sizeof(float));
		if (!g->h_rl || !g->h_map || !g->moe_ids || !g->grp_ex || !g->grp_j0 || !g->grp_c ||
		    !g->moe_gap)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		for (int l = 0; l < c->n_layer && !g->h_xb; l++)
			if (e->layers[l].n_cpu_exp &&
			    (!(g->h_xb = ntx_host_alloc(U * E * 4, err)) ||
			     !(g->h_ey = ntx_host_alloc(U * K * E * 4, err))))
				return -1;
	}
	return 0;
}

/* Workspaces: the largest matmul over every matrix, attention (zeroed). */
static int gpu_alloc_workspaces(struct ntx_engine *e, struct ntx_gpu *g, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	const struct ntx_model *m = e->m;
	size_t U = (size_t)e->n_ub;
	int l, i;

	g->ws_mm_bytes = mm_ws(m->output, HEAD_ROWS);
	for (l = 0; l < c->n_layer; l++) {
		const struct ntx_layer_tensors *lt = &m->layers[l];

		for (i = 1; i < NTX_LAYER_NT; i++) {
			if (i != 5 && i < 9)
				g->ws_mm_bytes = max_z(g->ws_mm_bytes, mm_ws(ntx_layer_tensor(lt, i), (int)U));
		}
	}
	/* attention splits long contexts more when there are fewer tokens: the
	 * workspace is not monotonic in n_tok, take the largest */
	for (i = 1; i <= (int)U; i++)
		g->ws_att_bytes = max_z(g->ws_att_bytes,
					ntx_cuda_attention_ws_bytes(i, c->n_head, c->head_dim, e->n_ctx));
	if (dalloc(&g->ws_mm, g->ws_mm_bytes, "matmul workspace", err) ||
	    dalloc(&g->ws_att, g->ws_att_bytes, "attention workspace", err))
		return -1;
	/* ntx_cuda_attention_q8 keeps split counters there: zero once */
	CK(cudaMemset(g->ws_att, 0, g->ws_att_bytes ? g->ws_att_bytes : 16), "cudaMemset");
	return 0;
}

/* Non-layer tensors: the output head (when on the GPU), the output norm,
 * rope_freqs; the RoPE inverse frequencies, once (ntx_cuda_rope_table). */
static int gpu_upload_nonlayer(struct ntx_engine *e, struct ntx_gpu *g, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	const struct ntx_model *m = e->m;
	size_t E = (size_t)c->n_embd;

	g->out_t = *m->output;
	if (e->head_on_gpu) {
		if (dalloc(&g->out_w, m->output->nbytes, "the output head", err))
			return -1;
		CK(cudaMemcpy(g->out_w, m->output->data, m->output->nbytes, cudaMemcpyHostToDevice),
		   "cudaMemcpy (output head)");
		if (split_resident(m->output, g->out_w, &g->out_t, g->cs, err))
			return -1;
	}
	if (dalloc((void **)&g->out_norm, E * 4, "output norm", err))
		return -1;
	CK(cudaMemcpy(g->out_norm, m->output_norm->data, E * 4, cudaMemcpyHostToDevice),
	   "cudaMemcpy");
	if (m->rope_freqs) {
		if (dalloc((void **)&g->rope_freqs, m->rope_freqs->nbytes, "rope_freqs", err))
			return -1;
		CK(cudaMemcpy(g->rope_freqs, m->rope_freqs->data, m->rope_freqs->nbytes,
			      cudaMemcpyHostToDevice),
		   "cudaMemcpy");
	}

	if (c->n_rot >= 2) {
		struct ntx_cuda_rope rp = { c->n_rot, (float)c->rope_base, (float)c->rope_freq_scale,
					    g->rope_freqs, NULL, 0 };

		if (dalloc((void **)&g->rope_inv, (size_t)c->n_rot / 2 * sizeof(double), "rope table",
			   err) ||
		    ntx_cuda_rope_table(&rp, g->rope_inv, (ntx_stream_t)g->cs, err))
			return -1;
		CK(cudaStreamSynchronize(g->cs), "rope table");
	}
	return 0;
}

/* Layers: the device KV of GPU-executed layers, resident weights uploaded
 * on the prefetch stream (waited for). */
static int gpu_place_layers(struct ntx_engine *e, struct ntx_gpu *g, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	size_t KV = (size_t)c->n_head_kv * c->head_dim;
	size_t es = e->o.kv_type == NTX_KV_F32 ? 4 : 2;
	int l;

	g->dlt = calloc((size_t)c->n_layer, sizeof *g->dlt);
	g->dtv = calloc((size_t)c->n_layer, sizeof *g->dtv);
	g->resident = calloc((size_t)c->n_layer, 1);
	if (!g->dlt || !g->dtv || !g->resident)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (l = 0; l < c->n_layer; l++) {
		struct eng_layer *L = &e->layers[l];
		size_t kvb = (size_t)e->n_seq * e->n_ctx * KV * es;
		char what[64];

		if (e->skip[l] || L->exec != NTX_EXEC_GPU)
			continue;
		snprintf(what, sizeof what, "the KV cache of layer %d", l);
		if (dalloc(&L->dkv_k, kvb, what, err) || dalloc(&L->dkv_v, kvb, what, err))
			return -1;
		if (L->home == NTX_TIER_VRAM) {
			snprintf(what, sizeof what, "the weights of layer %d", l);
			if (dalloc(&L->dev, L->lo.total, what, err) ||
			    upload_layer(e, l, L->dev, g->ps, err) || dev_tensors(e, l, L->dev, g->ps, err))
				return -1;
		}
	}
	CK(cudaStreamSynchronize(g->ps), "uploading weights");
	return 0;
}

int ntx_gpu_init(struct ntx_engine *e, struct ntx_err *err)
{
	struct ntx_gpu *g;

	if (ntx_gpu_check_moe(e, err))
		return -1;
	g = calloc(1, sizeof *g);
	if (!g)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	e->gpu = g;
	if (gpu_open_device(e, g, err) || gpu_alloc_activations(e, g, err) ||
	    gpu_alloc_workspaces(e, g, err) || gpu_upload_nonlayer(e, g, err) ||
	    gpu_place_layers(e, g, err) || ntx_gpu_moe_upload_init(e, err))
		return -1;
	return 0;
}

void ntx_gpu_free(struct ntx_engine *e)
{
	struct ntx_gpu *g = e->gpu;
	int l, i;

	if (!g)
		return;
	cudaDeviceSynchronize();
	ntx_gpu_moe_upload_free(e);
	for (l = 0; e->layers && l < e->cfg.n_layer; l++) {
		cudaFree(e->layers[l].dev);
		cudaFree(e->layers[l].dkv_k);
		cudaFree(e->layers[l].dkv_v);
		e->layers[l].dev = e->layers[l].dkv_k = e->layers[l].dkv_v = NULL;
	}
	for (i = 0; i < g->n_graphs; i++)
		cudaGraphExecDestroy(g->graphs[i].exec);
	cudaFree(g->xb);
	cudaFree(g->xin);
	cudaFree(g->xh);
	cudaFree(g->q);
	cudaFree(g->att);
	cudaFree(g->k);
	cudaFree(g->v);
	cudaFree(g->h);
	cudaFree(g->g);
	cudaFree(g->u);
	cudaFree(g->logits);
	cudaFree(g->d_ids);
	cudaFree(g->ws_am);
	cudaFree(g->xq);
	cudaFree(g->d_seq);
	cudaFree(g->d_cos);
	cudaFree(g->ws_mm);
	cudaFree(g->ws_att);
	cudaFree(g->out_w);
	cudaFree(g->out_norm);
	cudaFree(g->rope_freqs);
	cudaFree(g->rope_inv);
	cudaFree(g->moe_x);
	cudaFree(g->moe_y);
	cudaFree(g->d_rl);
	cudaFree(g->d_map);
	ntx_host_free(g->h_rl);
	ntx_host_free(g->h_map);
	ntx_host_free(g->h_xb);
	ntx_host_free(g->h_ey);
	free(g->moe_ids);
	free(g->grp_ex);
	free(g->grp_j0);
	free(g->grp_c);
	free(g->moe_gap);
	ntx_host_free(g->h_logits);
	ntx_host_free(g->h_ids);
	free(g->h_cos);
	free(g->dlt);
	free(g->dtv);
	free(g->resident);
	free(g->cut.dc_r);
	free(g->cut.dc_k);
	free(g->cut.seg_off);
	free(g->cut.seg_len);
	if (g->cs)
		cudaStreamDestroy(g->cs);
	if (g->ps)
		cudaStreamDestroy(g->ps);
	free(g);
	e->gpu = NULL;
}

/* Cut the chunk's rows and stage its seq and pos in pinned memory (the
 * previous chunk ended with a synchronising copy: h_seq is free). */
static void stage_chunk(struct ntx_gpu *g, const int32_t *seq, const int32_t *pos, int n,
			int verify)
{
	int i;

	for (i = 0; g->moe_gap && i < n; i++)
		g->moe_gap[i] = FLT_MAX;
	ntx_cut_rows(&g->cut, seq, n, verify, NTX_CUDA_GEMV_MAX_TOK);
	memcpy(g->h_seq, seq, (size_t)n * 4);
	memcpy(g->h_pos, pos, (size_t)n * 4);
}

/* Enqueue the staged seq and pos: one copy of [seq U][pos n], and with
 * x_rows the first x_rows rows of x behind them (e->x_blk). */
static int inputs_to_device(struct ntx_engine *e, int n, int x_rows, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	size_t b = x_rows ? NTX_X_HDR(e->n_ub) + (size_t)x_rows * e->cfg.n_embd * 4
			  : ((size_t)e->n_ub + n) * 4;

	CK(cudaMemcpyAsync(g->d_seq, g->h_seq, b, cudaMemcpyHostToDevice, g->cs),
	   "cudaMemcpyAsync (positions)");
	return 0;
}

int ntx_gpu_begin_chunk(struct ntx_engine *e, const int32_t *seq, const int32_t *pos, int n,
			int verify, struct ntx_err *err)
{
	stage_chunk(e->gpu, seq, pos, n, verify);
	return inputs_to_device(e, n, 0, err);
}

int ntx_gpu_x_to_device(struct ntx_engine *e, int n, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;

	CK(cudaMemcpyAsync(g->x, e->x, (size_t)n * e->cfg.n_embd * 4, cudaMemcpyHostToDevice,
			   g->cs),
	   "cudaMemcpyAsync (hidden state)");
	return 0;
}

int ntx_gpu_x_to_host(struct ntx_engine *e, int n, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;

	CK(cudaMemcpyAsync(e->x, g->x, (size_t)n * e->cfg.n_embd * 4, cudaMemcpyDeviceToHost,
			   g->cs),
	   "cudaMemcpyAsync (hidden state)");
	CK(cudaStreamSynchronize(g->cs), "GPU layers");
	return 0;
}

/* Weight pointers of layer l at base (layout of layout.h), its device KV
 * cache and the RoPE parameters. */
static void layer_setup(struct ntx_engine *e, int l, const void *base, const void **W,
			struct ntx_cuda_kv *kv, struct ntx_cuda_rope *rope)
{
	const struct ntx_llama_config *c = &e->cfg;
	struct eng_layer *L = &e->layers[l];
	int i;

	for (i = 0; i < NTX_LAYER_NT; i++)
		W[i] = (const char *)base + L->lo.offset[i];
	kv->k = L->dkv_k;
	kv->v = L->dkv_v;
	kv->kv_f16 = e->o.kv_type != NTX_KV_F32;
	kv->n_ctx = e->n_ctx;
	kv->n_seq = e->n_seq;
	kv->n_head_kv = c->n_head_kv;
	kv->head_dim = c->head_dim;
	rope->n_rot = c->n_rot;
	rope->base = (float)c->rope_base;
	rope->freq_scale = (float)c->rope_freq_scale;
	rope->freqs = e->gpu->rope_freqs;
	rope->inv = e->gpu->rope_inv;
	rope->neox = c->rope_style == NTX_ROPE_NEOX;
}

/* After the projections and before RoPE: the q, k, v biases (qwen2), then
 * the per-head RMS norms of q and k (qwen3, qwen3moe; rows of head_dim, in
 * place, the model's eps); a row's result does not depend on the others. */
static int qk_norm(struct ntx_engine *e, const void **W, int n, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	struct ntx_gpu *g = e->gpu;
	ntx_stream_t st = (ntx_stream_t)g->cs;
	float eps = (float)c->rms_eps;
	int64_t KV = (int64_t)c->n_head_kv * c->head_dim;

	if (c->qkv_bias &&
	    (ntx_cuda_add_rows(g->q, (const float *)W[12], n, (int64_t)c->n_head * c->head_dim, st, err) ||
	     ntx_cuda_add_rows(g->k, (const float *)W[13], n, KV, st, err) ||
	     ntx_cuda_add_rows(g->v, (const float *)W[14], n, KV, st, err)))
		return -1;
	if (!c->qk_norm)
		return 0;
	return ntx_cuda_rmsnorm(g->q, NULL, g->q, (const float *)W[10], n * c->n_head, c->head_dim,
				eps, st, err) ||
	       ntx_cuda_rmsnorm(g->k, NULL, g->k, (const float *)W[11], n * c->n_head_kv,
				c->head_dim, eps, st, err)
		       ? -1
		       : 0;
}

/* The decode path for n <= NTX_CUDA_GEMV_MAX_TOK tokens, with fused q8
 * producers, or the prompt path (matrix products on the tensor cores) for
 * one prompt segment. */
static int layer_fused(struct ntx_engine *e, int l, const void *base, int n, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	int fq, fg;
	const struct ntx_llama_config *c = &e->cfg;
	const struct ntx_layer_tensors *lt = dev_lt(e, l);
	ntx_stream_t st = (ntx_stream_t)g->cs;
	int E = c->n_embd, Q = c->n_head * c->head_dim, F = c->n_ff;
	float eps = (float)c->rms_eps;
	struct ntx_cuda_kv kv;
	struct ntx_cuda_rope rope;
	const void *W[NTX_LAYER_NT];

	layer_setup(e, l, base, W, &kv, &rope);

	/* attention */
	fq = ntx_gpu_shared_fmt(lt->wq, lt->wk, lt->wv);
	if (ntx_cuda_rmsnorm_fmt(g->xb, n <= NTX_CUDA_GEMV_MAX_TOK && fq >= 0 ? g->xq : NULL,
				 fq >= 0 ? fq : 0, g->x, (const float *)W[0], n, E, eps, st, err))
		return -1;
	if (n <= NTX_CUDA_GEMV_MAX_TOK && fq != -2) {
		/* Q, K and V share their input: one launch (mixed types too) */
		struct ntx_cuda_gemv_seg qkv[3] = {
			{ lt->wq->type, W[1], lt->wq->ne[1], g->q, 0 },
			{ lt->wk->type, W[2], lt->wk->ne[1], g->k, 0 },
			{ lt->wv->type, W[3], lt->wv->ne[1], g->v, 0 },
		};

		if (ntx_cuda_gemv_multi(qkv, 3, lt->wq->ne[0], g->xb, g->xq, n, st, err))
			return -1;
	} else if (n <= NTX_CUDA_GEMV_MAX_TOK) {
		if (ntx_gpu_gemv_one(e, lt->wq, W[1], g->xb, g->q, n, 0, err) ||
		    ntx_gpu_gemv_one(e, lt->wk, W[2], g->xb, g->k, n, 0, err) ||
		    ntx_gpu_gemv_one(e, lt->wv, W[3], g->xb, g->v, n, 0, err))
			return -1;
	} else if (ntx_gpu_mm(e, lt->wq, W[1], g->xb, g->q, n, 0, err) ||
		   ntx_gpu_mm(e, lt->wk, W[2], g->xb, g->k, n, 0, err) ||
		   ntx_gpu_mm(e, lt->wv, W[3], g->xb, g->v, n, 0, err)) {
		return -1;
	}
	if (qk_norm(e, W, n, err) ||
	    ntx_cuda_rope_store(g->q, g->k, g->v, n, c->n_head, &kv, g->d_seq, g->d_pos, &rope, st,
				err))
		return -1;
	{
		/* attention writes the q8 input of the output projection itself
		 * when a query-head group spans whole quantization groups */
		int q8 = ntx_gpu_needs_q8(n, lt->wo, NULL, NULL), fo = ntx_gpu_fmt_of(lt->wo);
		int fuse = q8 && (c->n_head / c->n_head_kv) * c->head_dim % ntx_cuda_q8_group(fo) == 0;

		if (ntx_cuda_attention_q8_fmt(g->att, fuse ? g->xq : NULL, fo >= 0 ? fo : 0, g->q, n,
					      c->n_head, &kv, g->d_seq, g->d_pos, g->ws_att,
					      g->ws_att_bytes, st, err))
			return -1;
		if (q8 && !fuse && ntx_cuda_quantize_q8_fmt(g->att, g->xq, Q, n, fo, st, err))
			return -1;
	}
	if (ntx_gpu_mm(e, lt->wo, W[4], g->att, g->x, n, 1, err))
		return -1;
	if (c->n_expert > 0)
		return ntx_cuda_rmsnorm(g->xb, NULL, g->x, (const float *)W[5], n, E, eps, st, err) ||
				       ntx_gpu_moe_ffn(e, l, lt, W, n, 0, err)
			       ? -1
			       : 0;
	/* feed-forward */
	fg = ntx_gpu_shared_fmt(lt->w_gate, lt->w_up, NULL);
	if (ntx_cuda_rmsnorm_fmt(g->xb, n <= NTX_CUDA_GEMV_MAX_TOK && fg >= 0 ? g->xq : NULL,
				 fg >= 0 ? fg : 0, g->x, (const float *)W[5], n, E, eps, st, err))
		return -1;
	if (n <= NTX_CUDA_GEMV_MAX_TOK && fg != -2) {
		if (ntx_cuda_gemv_swiglu(lt->w_gate->type, W[6], lt->w_up->type, W[7], E, F, g->xb,
					 g->xq, g->h, n, st, err))
			return -1;
	} else if (n <= NTX_CUDA_GEMV_MAX_TOK) {
		if (ntx_gpu_gemv_one(e, lt->w_gate, W[6], g->xb, g->g, n, 0, err) ||
		    ntx_gpu_gemv_one(e, lt->w_up, W[7], g->xb, g->u, n, 0, err) ||
		    ntx_cuda_swiglu(g->h, g->g, g->u, (int64_t)n * F, st, err))
			return -1;
	} else if (ntx_gpu_mm(e, lt->w_gate, W[6], g->xb, g->g, n, 0, err) ||
		   ntx_gpu_mm(e, lt->w_up, W[7], g->xb, g->u, n, 0, err) ||
		   ntx_cuda_swiglu(g->h, g->g, g->u, (int64_t)n * F, st, err)) {
		return -1;
	}
	if (ntx_gpu_needs_q8(n, lt->w_down, NULL, NULL) &&
	    ntx_cuda_quantize_q8_fmt(g->h, g->xq, F, n, ntx_gpu_fmt_of(lt->w_down), st, err))
		return -1;
	return ntx_gpu_mm(e, lt->w_down, W[8], g->h, g->x, n, 1, err);
}

/* Up to HEAD_ROWS wanted rows starting at row *i, normed into g->xh (read
 * in place when they are consecutive, else gathered first) and multiplied
 * by the head into g->logits, with their argmax into g->d_ids when out
 * asks for it (enqueued only). Returns the number of rows (0 when none are
 * left) or -1. */
static int head_compute(struct ntx_engine *e, const uint8_t *want, int n, int *i, int out,
			struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	const struct ntx_gguf_tensor *t = &g->out_t;
	int E = e->cfg.n_embd, k = 0, first = -1, last = -1, j;
	ntx_stream_t st = (ntx_stream_t)g->cs;
	const float *in = g->xh;
	float eps = (float)e->cfg.rms_eps;

	for (j = *i; j < n && k < HEAD_ROWS; j++) {
		if (!want[j])
			continue;
		if (first < 0)
			first = j;
		last = j;
		k++;
	}
	if (!k)
		return 0;
	if (last - first + 1 == k) {
		in = g->x + (size_t)first * E;
	} else {
		for (k = 0; *i <= last; (*i)++) {
			if (!want[*i])
				continue;
			CK(cudaMemcpyAsync(g->xh + (size_t)k * E, g->x + (size_t)*i * E, (size_t)E * 4,
					   cudaMemcpyDeviceToDevice, g->cs),
			   "cudaMemcpyAsync (head rows)");
			k++;
		}
	}
	*i = last + 1;
	/* more rows than the GEMV takes (batch mode, verification,
	 * perplexity): the decode GEMV in chunks, so every row gets the
	 * logits it gets alone */
	if (k <= NTX_CUDA_GEMV_MAX_TOK || t->ne[0] % 32) {
		if (ntx_cuda_rmsnorm_fmt(g->xh, ntx_gpu_needs_q8(k, t, NULL, NULL) ? g->xq : NULL,
					 ntx_gpu_fmt_of(t) >= 0 ? ntx_gpu_fmt_of(t) : 0, in, g->out_norm, k, E, eps, st,
					 err) ||
		    ntx_gpu_mm(e, t, g->out_w, g->xh, g->logits, k, 0, err))
			return -1;
	} else if (ntx_cuda_rmsnorm(g->xh, NULL, in, g->out_norm, k, E, eps, st, err) ||
		   ntx_gpu_gemv_rows(e, t, g->out_w, g->xh, g->logits, k, 0, err)) {
		return -1;
	}
	if ((out & OUT_IDS) &&
	    ntx_cuda_argmax(g->logits, e->cfg.n_vocab, k, g->m_ids ? g->m_ids : g->d_ids, g->ws_am,
			    ntx_cuda_argmax_ws_bytes(HEAD_ROWS), st, err))
		return -1;
	return k;
}

/* Enqueue the copies of k rows' logits and/or ids (out) to pinned memory. */
static int head_fetch(struct ntx_engine *e, int k, int out, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	size_t V = (size_t)e->cfg.n_vocab;

	if (out & OUT_LOGITS)
		CK(cudaMemcpyAsync(g->h_logits, g->logits, (size_t)k * V * 4, cudaMemcpyDeviceToHost,
				   g->cs),
		   "cudaMemcpyAsync (logits)");
	if ((out & OUT_IDS) && !g->m_ids)
		CK(cudaMemcpyAsync(g->h_ids, g->d_ids, (size_t)k * 4, cudaMemcpyDeviceToHost, g->cs),
		   "cudaMemcpyAsync (token ids)");
	return 0;
}

/* Wait for the device and hand out the k rows head_fetch copied. */
static int head_finish(struct ntx_engine *e, int k, float *logits, int32_t *ids,
		       struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;

	CK(cudaStreamSynchronize(g->cs), "GPU forward pass");
	if (logits)
		memcpy(logits, g->h_logits, (size_t)k * (size_t)e->cfg.n_vocab * 4);
	if (ids)
		memcpy(ids, g->h_ids, (size_t)k * 4);
	return 0;
}

static int out_of(const float *logits, const int32_t *ids)
{
	return (logits ? OUT_LOGITS : 0) | (ids ? OUT_IDS : 0);
}

/* y (=|+=) W x over the prompt segments of the chunk, each as it is
 * multiplied alone (mm): quantized weights through ntx_cuda_matmul_segs,
 * which dequantizes each tile once for all segments. */
static int mm_prompt(struct ntx_engine *e, const struct ntx_gguf_tensor *t, const void *w,
		     const float *x, float *y, int acc, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	int i;

	if (!g->cut.n_seg)
		return 0;
	if (ntx_gpu_is_float(t)) {
		for (i = 0; i < g->cut.n_seg; i++)
			if (ntx_gpu_mm(e, t, w, x + (size_t)g->cut.seg_off[i] * t->ne[0],
			       y + (size_t)g->cut.seg_off[i] * t->ne[1], g->cut.seg_len[i], acc, err))
				return -1;
		return 0;
	}
	/* groups of at most NTX_CUDA_MM_MAX_SEGS: each segment's result does
	 * not depend on the others */
	for (i = 0; i < g->cut.n_seg; i += NTX_CUDA_MM_MAX_SEGS) {
		int k = g->cut.n_seg - i < NTX_CUDA_MM_MAX_SEGS ? g->cut.n_seg - i : NTX_CUDA_MM_MAX_SEGS;

		if (ntx_cuda_matmul_segs(t->type, w, t->ne[0], t->ne[1], x, y, g->cut.seg_off + i,
					 g->cut.seg_len + i, k, g->cut.n_rows, acc, g->ws_mm, g->ws_mm_bytes,
					 (ntx_stream_t)g->cs, err))
			return -1;
	}
	return 0;
}

/* A chunk of several rows that is not one prompt (batch mode, speculative
 * verification, prompts batched with decode tokens). Decode rows take the
 * single-token GEMV and attention kernels in chunks of at most
 * NTX_CUDA_GEMV_MAX_TOK rows: those kernels are batch invariant for up to
 * that many rows (ntx_cuda.h), so each token's result is the one it gets
 * when decoded alone: batch mode equals running alone, self-speculation is
 * lossless (float weights: up to rounding). Each prompt segment takes the
 * prompt path of layer_fused, shaped by the segment alone, so it gets what
 * it gets evaluated alone. Weights are read once per decode chunk and once
 * per prompt product (from VRAM). Rows must be multiples of 32 (q8). */
static int layer_mixed(struct ntx_engine *e, int l, const void *base, int n,
		       struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	const struct ntx_llama_config *c = &e->cfg;
	const struct ntx_layer_tensors *lt = dev_lt(e, l);
	ntx_stream_t st = (ntx_stream_t)g->cs;
	int E = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_head_kv * c->head_dim;
	int F = c->n_ff, r, k, i, fq, fg, fo = ntx_gpu_fmt_of(lt->wo);
	float eps = (float)c->rms_eps;
	struct ntx_cuda_kv kv;
	struct ntx_cuda_rope rope;
	const void *W[NTX_LAYER_NT];

	layer_setup(e, l, base, W, &kv, &rope);

#define CHUNKS for (i = 0; i < g->cut.n_dc && ((r = g->cut.dc_r[i]), (k = g->cut.dc_k[i]), 1); i++)
	if (ntx_cuda_rmsnorm(g->xb, NULL, g->x, (const float *)W[0], n, E, eps, st, err))
		return -1;
	fq = ntx_gpu_shared_fmt(lt->wq, lt->wk, lt->wv);
	CHUNKS {
		struct ntx_cuda_gemv_seg qkv[3] = {
			{ lt->wq->type, W[1], lt->wq->ne[1], g->q + (size_t)r * Q, 0 },
			{ lt->wk->type, W[2], lt->wk->ne[1], g->k + (size_t)r * KV, 0 },
			{ lt->wv->type, W[3], lt->wv->ne[1], g->v + (size_t)r * KV, 0 },
		};
		const float *xr = g->xb + (size_t)r * E;

		if (fq == -2) {
			if (ntx_gpu_gemv_one(e, lt->wq, W[1], xr, qkv[0].y, k, 0, err) ||
			    ntx_gpu_gemv_one(e, lt->wk, W[2], xr, qkv[1].y, k, 0, err) ||
			    ntx_gpu_gemv_one(e, lt->wv, W[3], xr, qkv[2].y, k, 0, err))
				return -1;
			continue;
		}
		if (fq >= 0 && ntx_cuda_quantize_q8_fmt(xr, g->xq, E, k, fq, st, err))
			return -1;
		if (ntx_cuda_gemv_multi(qkv, 3, E, xr, g->xq, k, st, err))
			return -1;
	}
	if (mm_prompt(e, lt->wq, W[1], g->xb, g->q, 0, err) ||
	    mm_prompt(e, lt->wk, W[2], g->xb, g->k, 0, err) ||
	    mm_prompt(e, lt->wv, W[3], g->xb, g->v, 0, err))
		return -1;
	if (qk_norm(e, W, n, err) ||
	    ntx_cuda_rope_store(g->q, g->k, g->v, n, c->n_head, &kv, g->d_seq, g->d_pos, &rope, st,
				err))
		return -1;
	/* attention per decode chunk and per segment: the number of splits
	 * over the sequence depends on the rows of a call */
	CHUNKS {
		if (ntx_cuda_attention_q8(g->att + (size_t)r * Q, NULL, g->q + (size_t)r * Q, k,
					  c->n_head, &kv, g->d_seq + r, g->d_pos + r, g->ws_att,
					  g->ws_att_bytes, st, err))
			return -1;
	}
	for (i = 0; i < g->cut.n_seg; i++) {
		r = g->cut.seg_off[i];
		if (ntx_cuda_attention_q8_fmt(g->att + (size_t)r * Q, NULL, fo >= 0 ? fo : 0,
					      g->q + (size_t)r * Q, g->cut.seg_len[i], c->n_head, &kv,
					      g->d_seq + r, g->d_pos + r, g->ws_att, g->ws_att_bytes,
					      st, err))
			return -1;
	}
	CHUNKS {
		if (ntx_gpu_gemv_one(e, lt->wo, W[4], g->att + (size_t)r * Q, g->x + (size_t)r * E, k, 1, err))
			return -1;
	}
	if (mm_prompt(e, lt->wo, W[4], g->att, g->x, 1, err) ||
	    ntx_cuda_rmsnorm(g->xb, NULL, g->x, (const float *)W[5], n, E, eps, st, err))
		return -1;
	if (c->n_expert > 0)
		return ntx_gpu_moe_ffn(e, l, lt, W, n, 1, err);
	fg = ntx_gpu_shared_fmt(lt->w_gate, lt->w_up, NULL);
	CHUNKS {
		const float *xr = g->xb + (size_t)r * E;

		if (fg == -2) {
			if (ntx_gpu_gemv_one(e, lt->w_gate, W[6], xr, g->g + (size_t)r * F, k, 0, err) ||
			    ntx_gpu_gemv_one(e, lt->w_up, W[7], xr, g->u + (size_t)r * F, k, 0, err) ||
			    ntx_cuda_swiglu(g->h + (size_t)r * F, g->g + (size_t)r * F,
					    g->u + (size_t)r * F, (int64_t)k * F, st, err))
				return -1;
			continue;
		}
		if (fg >= 0 && ntx_cuda_quantize_q8_fmt(xr, g->xq, E, k, fg, st, err))
			return -1;
		if (ntx_cuda_gemv_swiglu(lt->w_gate->type, W[6], lt->w_up->type, W[7], E, F, xr,
					 g->xq, g->h + (size_t)r * F, k, st, err))
			return -1;
	}
	if (mm_prompt(e, lt->w_gate, W[6], g->xb, g->g, 0, err) ||
	    mm_prompt(e, lt->w_up, W[7], g->xb, g->u, 0, err))
		return -1;
	for (i = 0; i < g->cut.n_seg; i++) {
		size_t o = (size_t)g->cut.seg_off[i] * F;

		if (ntx_cuda_swiglu(g->h + o, g->g + o, g->u + o, (int64_t)g->cut.seg_len[i] * F, st, err))
			return -1;
	}
	CHUNKS {
		if (ntx_gpu_gemv_one(e, lt->w_down, W[8], g->h + (size_t)r * F, g->x + (size_t)r * E, k, 1,
			     err))
			return -1;
	}
#undef CHUNKS
	return mm_prompt(e, lt->w_down, W[8], g->h, g->x, 1, err);
}

int ntx_gpu_layer(struct ntx_engine *e, int l, const void *base, int n, struct ntx_err *err)
{
	const struct ntx_gpu *g = e->gpu;
	/* the file's tensors for the shapes: a layer of the expert split with
	 * every expert on the CPU has no device w_gate, w_up, w_down */
	const struct ntx_layer_tensors *lt = &e->m->layers[l];

	/* one prompt, or at most NTX_CUDA_GEMV_MAX_TOK decode rows: the
	 * fused path; rows the GEMV cannot take (not multiples of 32):
	 * layer_fused's fallbacks */
	if ((g->cut.n_dc + g->cut.n_seg == 1 && n <= NTX_CUDA_GEMV_MAX_TOK) || (g->cut.n_seg == 1 && !g->cut.n_dc) ||
	    lt->w_down->ne[0] % 32 || lt->wq->ne[0] % 32 || lt->wo->ne[0] % 32)
		return layer_fused(e, l, base, n, err);
	return layer_mixed(e, l, base, n, err);
}

int ntx_gpu_head(struct ntx_engine *e, const uint8_t *want, int n, float *logits, int32_t *ids,
		 int *nr, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	size_t V = (size_t)e->cfg.n_vocab;
	int i = 0, rows = 0, k, out = out_of(logits, ids);

	*nr = 0;
	while ((k = head_compute(e, want, n, &i, out, err)) > 0) {
		if (head_fetch(e, k, out, err) ||
		    head_finish(e, k, logits ? logits + (size_t)rows * V : NULL, ids ? ids + rows : NULL,
				err))
			return -1;
		rows += k;
	}
	if (k < 0)
		return -1;
	if (!rows)
		CK(cudaStreamSynchronize(g->cs), "GPU forward pass");
	*nr = rows;
	return 0;
}

_Static_assert(NTX_DECODE_CHUNK_GPU == NTX_CUDA_GEMV_MAX_TOK,
	       "ntx_engine_decode_chunk is the GEMV's token limit");

/* ---- CUDA graphs for decode steps ---- */

static uint64_t mask_hash(const uint8_t *mask, int n)
{
	uint64_t h = 1469598103934665603ull;
	int i;

	if (!mask)
		return 0;
	for (i = 0; i < n; i++)
		h = (h ^ mask[i]) * 1099511628211ull;
	return h | 1;
}

/* The key of a step's graph: token count, wanted rows (bits), mask hash,
 * outputs; *k: the rows wanted. */
static struct gpu_graph graph_key(const struct ntx_engine *e, int n, const uint8_t *mask,
				  const uint8_t *want, const float *logits, const int32_t *ids,
				  int *k)
{
	struct gpu_graph key = { n, out_of(logits, ids), 0, mask_hash(mask, e->cfg.n_layer), NULL };
	int i;

	*k = 0;
	for (i = 0; i < n; i++)
		if (want[i])
			key.want |= 1u << i, ++*k;
	if (!*k)
		key.out = 0;
	return key;
}

static int same_key(const struct gpu_graph *a, const struct gpu_graph *b)
{
	return a->n == b->n && a->want == b->want && a->mask == b->mask && a->out == b->out;
}

/* A step shape is captured on its second use: the first runs launch by
 * launch. A shape used once (a speculative probe's verification width, a
 * draft that is soon paused) then never pays for a capture. */
int ntx_gpu_graph_due(struct ntx_engine *e, int n, const uint8_t *mask, const uint8_t *want,
		      const float *logits, const int32_t *ids)
{
	struct ntx_gpu *g = e->gpu;
	int k, i;
	struct gpu_graph key = graph_key(e, n, mask, want, logits, ids, &k);

	for (i = 0; i < g->n_graphs; i++)
		if (same_key(&g->graphs[i], &key))
			return 1;
	for (i = 0; i < g->n_seen; i++)
		if (same_key(&g->seen[i], &key))
			return 1;
	if (g->n_seen == MAX_GRAPHS) { /* forget the oldest */
		memmove(g->seen, g->seen + 1, (MAX_GRAPHS - 1) * sizeof g->seen[0]);
		g->n_seen--;
	}
	g->seen[g->n_seen++] = key;
	return 0;
}

int ntx_gpu_graph_forward(struct ntx_engine *e, const int32_t *seq, const int32_t *pos, int n,
			  int verify, const uint8_t *mask, const uint8_t *want, float *logits,
			  int32_t *ids, int *nr, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	struct gpu_graph *gr = NULL;
	int i, l, k;
	struct gpu_graph key = graph_key(e, n, mask, want, logits, ids, &k);
	int out = key.out;

	stage_chunk(g, seq, pos, n, verify);
	for (i = 0; i < g->n_graphs; i++) {
		if (same_key(&g->graphs[i], &key)) {
			gr = &g->graphs[i];
			break;
		}
	}
	if (!gr) {
		cudaGraph_t graph;
		cudaError_t rc;
		int at = 0, ok = 1;

		if (g->n_graphs == MAX_GRAPHS) { /* evict the oldest */
			cudaGraphExecDestroy(g->graphs[0].exec);
			memmove(g->graphs, g->graphs + 1, (MAX_GRAPHS - 1) * sizeof g->graphs[0]);
			g->n_graphs--;
		}
		/* the whole step: inputs from pinned memory, layers, head,
		 * outputs to pinned memory */
		CK(cudaStreamBeginCapture(g->cs, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
		if (inputs_to_device(e, n, n, err))
			ok = 0;
		for (l = 0; l < e->cfg.n_layer && ok; l++) {
			if (mask ? mask[l] : e->skip[l])
				continue;
			if (ntx_gpu_layer(e, l, e->layers[l].dev, n, err))
				ok = 0;
		}
		if (ok && k && (head_compute(e, want, n, &at, out, err) < 0 || head_fetch(e, k, out, err)))
			ok = 0;
		rc = cudaStreamEndCapture(g->cs, &graph);
		if (!ok) {
			if (rc == cudaSuccess)
				cudaGraphDestroy(graph);
			return -1;
		}
		if (rc != cudaSuccess)
			return ntx_gpu_fail(err, rc, "cudaStreamEndCapture");
		gr = &g->graphs[g->n_graphs];
		*gr = key;
		rc = cudaGraphInstantiate(&gr->exec, graph, 0);
		cudaGraphDestroy(graph);
		if (rc != cudaSuccess)
			return ntx_gpu_fail(err, rc, "cudaGraphInstantiate");
		g->n_graphs++;
	}
	CK(cudaGraphLaunch(gr->exec, g->cs), "cudaGraphLaunch");
	*nr = k;
	return head_finish(e, k, logits, ids, err);
}

/* Not for MoE models: their router synchronises with the host in every
 * layer (moe_ffn), which a captured graph cannot do. */
int ntx_gpu_graphs_enabled(const struct ntx_engine *e)
{
	return e->gpu && !e->gpu->no_graphs && e->cfg.n_expert == 0;
}

int ntx_gpu_moe_gaps(const struct ntx_engine *e, float *gap, int n)
{
	const struct ntx_gpu *g = e->gpu;

	if (!g || !g->moe_gap || n > g->cut.n_rows)
		return -1;
	memcpy(gap, g->moe_gap, (size_t)n * sizeof(float));
	return 0;
}

int ntx_gpu_cos_begin(struct ntx_engine *e, int n, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;

	CK(cudaMemcpyAsync(g->xin, g->x, (size_t)n * e->cfg.n_embd * 4, cudaMemcpyDeviceToDevice,
			   g->cs),
	   "cudaMemcpyAsync");
	return 0;
}

int ntx_gpu_cos_end(struct ntx_engine *e, int l, int n, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;

	e->cos[l].n += n;
	return ntx_cuda_cos_accum(g->xin, g->x, n, e->cfg.n_embd, g->d_cos + 2 * l,
				  (ntx_stream_t)g->cs, err);
}

int ntx_gpu_cos_fetch(struct ntx_engine *e, struct ntx_err *err)
{
	struct ntx_gpu *g = e->gpu;
	size_t b = (size_t)e->cfg.n_layer * 2 * sizeof(double);
	int l;

	CK(cudaMemcpyAsync(g->h_cos, g->d_cos, b, cudaMemcpyDeviceToHost, g->cs), "cudaMemcpy");
	CK(cudaMemsetAsync(g->d_cos, 0, b, g->cs), "cudaMemset");
	CK(cudaStreamSynchronize(g->cs), "cudaStreamSynchronize");
	for (l = 0; l < e->cfg.n_layer; l++) {
		e->cos[l].sum += g->h_cos[2 * l];
		e->cos[l].sum_sq += g->h_cos[2 * l + 1];
	}
	return 0;
}

int ntx_gpu_sync(struct ntx_engine *e, struct ntx_err *err)
{
	(void)e;
	CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	return 0;
}

double ntx_gpu_peak_gbps(const struct ntx_engine *e)
{
	return e->gpu ? e->gpu->peak_gbps : 0;
}

struct CUstream_st *ntx_gpu_compute_stream(struct ntx_engine *e)
{
	return e->gpu ? e->gpu->cs : NULL;
}

#else /* no CUDA: the CPU backend only */

int ntx_gpu_usable(int device, char *why, size_t why_len)
{
	(void)device;
	snprintf(why, why_len, "this build has no CUDA support");
	return 0;
}

static int no_cuda(struct ntx_err *err)
{
	return ntx_err_set(err, NTX_EDEVICE, "this build has no CUDA support");
}

int ntx_gpu_init(struct ntx_engine *e, struct ntx_err *err)
{
	(void)e;
	return no_cuda(err);
}

void ntx_gpu_free(struct ntx_engine *e)
{
	(void)e;
}

int ntx_gpu_begin_chunk(struct ntx_engine *e, const int32_t *seq, const int32_t *pos, int n,
			int verify, struct ntx_err *err)
{
	(void)e, (void)seq, (void)pos, (void)n, (void)verify;
	return no_cuda(err);
}

int ntx_gpu_x_to_device(struct ntx_engine *e, int n, struct ntx_err *err)
{
	(void)e, (void)n;
	return no_cuda(err);
}

int ntx_gpu_x_to_host(struct ntx_engine *e, int n, struct ntx_err *err)
{
	(void)e, (void)n;
	return no_cuda(err);
}

int ntx_gpu_layer(struct ntx_engine *e, int l, const void *base, int n, struct ntx_err *err)
{
	(void)e, (void)l, (void)base, (void)n;
	return no_cuda(err);
}

int ntx_gpu_head(struct ntx_engine *e, const uint8_t *want, int n, float *logits, int32_t *ids,
		 int *nr, struct ntx_err *err)
{
	(void)e, (void)want, (void)n, (void)logits, (void)ids, (void)nr;
	return no_cuda(err);
}

int ntx_gpu_cos_begin(struct ntx_engine *e, int n, struct ntx_err *err)
{
	(void)e, (void)n;
	return no_cuda(err);
}

int ntx_gpu_cos_end(struct ntx_engine *e, int l, int n, struct ntx_err *err)
{
	(void)e, (void)l, (void)n;
	return no_cuda(err);
}

int ntx_gpu_cos_fetch(struct ntx_engine *e, struct ntx_err *err)
{
	(void)e;
	return no_cuda(err);
}

int ntx_gpu_sync(struct ntx_engine *e, struct ntx_err *err)
{
	(void)e, (void)err;
	return 0;
}

double ntx_gpu_peak_gbps(const struct ntx_engine *e)
{
	(void)e;
	return 0;
}

int ntx_gpu_graph_forward(struct ntx_engine *e, const int32_t *seq, const int32_t *pos, int n,
			  int verify, const uint8_t *mask, const uint8_t *want, float *logits,
			  int32_t *ids, int *nr, struct ntx_err *err)
{
	(void)e, (void)seq, (void)pos, (void)n, (void)verify, (void)mask, (void)want;
	(void)logits, (void)ids, (void)nr;
	return no_cuda(err);
}

int ntx_gpu_graphs_enabled(const struct ntx_engine *e)
{
	(void)e;
	return 0;
}

int ntx_gpu_graph_due(struct ntx_engine *e, int n, const uint8_t *mask, const uint8_t *want,
		      const float *logits, const int32_t *ids)
{
	(void)e, (void)n, (void)mask, (void)want, (void)logits, (void)ids;
	return 0;
}

int ntx_gpu_moe_gaps(const struct ntx_engine *e, float *gap, int n)
{
	(void)e, (void)gap, (void)n;
	return -1;
}

struct CUstream_st *ntx_gpu_compute_stream(struct ntx_engine *e)
{
	(void)e;
	return NULL;
}

#endif
