/* engine_cpu.c - the layer forward pass on the CPU: Llama attention (with
 * qwen3moe's per-head q/k norms and NEOX RoPE when the architecture says
 * so) and a dense or mixture-of-experts FFN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "moe.h"

struct ntx_wmat ntx_wmat_from_tensor(const struct ntx_gguf_tensor *t, const void *data)
{
	struct ntx_wmat w;
	uint64_t rb = 0;

	ntx_type_row_bytes(t->type, t->ne[0], &rb, NULL);
	w.type = t->type;
	w.n_in = t->ne[0];
	w.n_out = t->ne[1];
	w.row_bytes = rb;
	w.data = data;
	return w;
}

void ntx_layer_w_from_tensors(struct ntx_layer_w *w, const struct ntx_layer_tensors *lt,
			      const unsigned char *base, uint64_t base_off)
{
#define AT(t) ((const void *)(base + ((t)->file_offset - base_off)))
	w->attn_norm = AT(lt->attn_norm);
	w->ffn_norm = AT(lt->ffn_norm);
	w->wq = ntx_wmat_from_tensor(lt->wq, AT(lt->wq));
	w->wk = ntx_wmat_from_tensor(lt->wk, AT(lt->wk));
	w->wv = ntx_wmat_from_tensor(lt->wv, AT(lt->wv));
	w->wo = ntx_wmat_from_tensor(lt->wo, AT(lt->wo));
	w->gate = ntx_wmat_from_tensor(lt->w_gate, AT(lt->w_gate));
	w->up = ntx_wmat_from_tensor(lt->w_up, AT(lt->w_up));
	w->down = ntx_wmat_from_tensor(lt->w_down, AT(lt->w_down));
	memset(&w->router, 0, sizeof w->router);
	if (lt->router)
		w->router = ntx_wmat_from_tensor(lt->router, AT(lt->router));
	w->q_norm = lt->q_norm ? AT(lt->q_norm) : NULL;
	w->k_norm = lt->k_norm ? AT(lt->k_norm) : NULL;
	w->bq = lt->bq ? AT(lt->bq) : NULL;
	w->bk = lt->bk ? AT(lt->bk) : NULL;
	w->bv = lt->bv ? AT(lt->bv) : NULL;
	w->xsrc = NULL;
#undef AT
}

void ntx_layer_w_from_layout(struct ntx_layer_w *w, const struct ntx_layer_tensors *lt,
			     const struct ntx_layer_layout *lo, const void *base)
{
	const unsigned char *b = base;

	w->attn_norm = (const float *)(b + lo->offset[0]);
	w->wq = ntx_wmat_from_tensor(lt->wq, b + lo->offset[1]);
	w->wk = ntx_wmat_from_tensor(lt->wk, b + lo->offset[2]);
	w->wv = ntx_wmat_from_tensor(lt->wv, b + lo->offset[3]);
	w->wo = ntx_wmat_from_tensor(lt->wo, b + lo->offset[4]);
	w->ffn_norm = (const float *)(b + lo->offset[5]);
	w->gate = ntx_wmat_from_tensor(lt->w_gate, b + lo->offset[6]);
	w->up = ntx_wmat_from_tensor(lt->w_up, b + lo->offset[7]);
	w->down = ntx_wmat_from_tensor(lt->w_down, b + lo->offset[8]);
	memset(&w->router, 0, sizeof w->router);
	if (lt->router)
		w->router = ntx_wmat_from_tensor(lt->router, b + lo->offset[9]);
	w->q_norm = lt->q_norm ? (const float *)(b + lo->offset[10]) : NULL;
	w->k_norm = lt->k_norm ? (const float *)(b + lo->offset[11]) : NULL;
	w->bq = lt->bq ? (const float *)(b + lo->offset[12]) : NULL;
	w->bk = lt->bk ? (const float *)(b + lo->offset[13]) : NULL;
	w->bv = lt->bv ? (const float *)(b + lo->offset[14]) : NULL;
	w->xsrc = NULL;
}

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

int ntx_cpu_scratch_init(struct ntx_cpu_scratch *s, const struct ntx_llama_config *c,
			 const struct ntx_model *m, int n_ub, int n_ctx, int n_threads,
			 struct ntx_err *err)
{
	size_t E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim;
	size_t KV = (size_t)c->n_head_kv * c->head_dim, F = (size_t)c->n_ff;
	size_t mm = 0, nx = (size_t)c->n_expert, nk = (size_t)c->n_expert_used;
	size_t G = F > E ? F : E;
	int l;

	memset(s, 0, sizeof *s);
	s->n_ub = n_ub;
	for (l = 0; l < c->n_layer; l++) {
		struct ntx_layer_w w;

		ntx_layer_w_from_tensors(&w, &m->layers[l], m->gguf->map, 0);
		mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.wq, n_ub));
		mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.wk, n_ub));
		mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.wv, n_ub));
		mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.wo, n_ub));
		mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.gate, n_ub));
		mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.up, n_ub));
		mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.down, n_ub));
		if (w.router.data)
			mm = max_sz(mm, ntx_matmul_scratch_bytes(&w.router, n_ub));
	}
	{
		struct ntx_wmat o = ntx_wmat_from_tensor(m->output, m->output->data);

		mm = max_sz(mm, ntx_matmul_scratch_bytes(&o, n_ub));
	}
	s->xb = malloc(n_ub * E * sizeof(float));
	s->tmp = malloc(n_ub * E * sizeof(float));
	s->q = malloc(n_ub * Q * sizeof(float));
	s->att = malloc(n_ub * Q * sizeof(float));
	s->k = malloc(n_ub * KV * sizeof(float));
	s->v = malloc(n_ub * KV * sizeof(float));
	s->g = malloc(n_ub * F * sizeof(float));
	s->u = malloc(n_ub * F * sizeof(float));
	s->mm = malloc(mm ? mm : 64);
	s->att_scratch = malloc(ntx_op_attention_scratch(n_threads, n_ctx) * sizeof(float));
	if (nx > 0 && nk > 0) {
		s->rl = malloc(n_ub * nx * sizeof(float));
		s->sel = malloc(n_ub * nk * sizeof(int32_t));
		s->wgt = malloc(n_ub * nk * sizeof(float));
		s->xg = malloc(n_ub * G * sizeof(float));
		s->acc = malloc(n_ub * nk * E * sizeof(float));
		s->slot = malloc(n_ub * nk * sizeof(int32_t));
		s->first = malloc((2 * nx + 1) * sizeof(int32_t));
		s->xids = malloc(nx * sizeof(int));
		s->xptr = malloc(3 * nx * sizeof(void *));
		if (!s->rl || !s->sel || !s->wgt || !s->xg || !s->acc || !s->slot || !s->first ||
		    !s->xids || !s->xptr) {
			ntx_cpu_scratch_free(s);
			return ntx_err_set(err, NTX_ENOMEM,
					   "out of memory for CPU expert activations (%d tokens)", n_ub);
		}
	}
	if (!s->xb || !s->tmp || !s->q || !s->att || !s->k || !s->v || !s->g || !s->u || !s->mm ||
	    !s->att_scratch) {
		ntx_cpu_scratch_free(s);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for CPU activations (%d tokens)",
				   n_ub);
	}
	return 0;
}

void ntx_cpu_scratch_free(struct ntx_cpu_scratch *s)
{
	free(s->xb);
	free(s->tmp);
	free(s->q);
	free(s->att);
	free(s->k);
	free(s->v);
	free(s->g);
	free(s->u);
	free(s->mm);
	free(s->att_scratch);
	free(s->rl);
	free(s->sel);
	free(s->wgt);
	free(s->xg);
	free(s->acc);
	free(s->slot);
	free(s->first);
	free(s->xids);
	free(s->xptr);
	memset(s, 0, sizeof *s);
}

/* The mixture-of-experts FFN of n_tok normalized rows xn into out (n_tok
 * rows of n_embd). Tokens are grouped by expert so each chosen expert's
 * matrices are read once per pass; each token's k results are kept apart
 * and summed in its top-k order, so a token's output is the same whatever
 * other tokens share the pass (the matmuls are per-row invariant too).
 * Returns the number of experts that ran. */
static int moe_ffn(struct ntx_pool *pool, const struct ntx_llama_config *c,
		   const struct ntx_layer_w *w, const float *xn, int n_tok, float *out,
		   struct ntx_cpu_scratch *s)
{
	const int64_t E = c->n_embd, F = c->n_ff;
	const int nx = c->n_expert, k = c->n_expert_used;
	const int chunk = w->xsrc ? w->xsrc->cap : nx;
	int t, j, e, x, c0, n_run = 0;

	ntx_cpu_matmul(pool, &w->router, xn, n_tok, s->rl, s->mm);
	ntx_moe_route_rows(s->rl, n_tok, nx, k, c->expert_weights_scale, s->sel, s->wgt);
	if (s->exp_count)
		for (t = 0; t < n_tok * k; t++)
			s->exp_count[s->sel[t]]++;
	/* counting sort of the (token, slot) pairs by expert; within an expert,
	 * tokens stay in order */
	for (e = 0; e <= nx; e++)
		s->first[e] = 0;
	for (t = 0; t < n_tok * k; t++)
		s->first[s->sel[t] + 1]++;
	for (e = 0; e < nx; e++)
		s->first[e + 1] += s->first[e];
	{
		int32_t *fill = s->first + nx + 1;

		for (e = 0; e < nx; e++)
			fill[e] = s->first[e];
		for (t = 0; t < n_tok * k; t++)
			s->slot[fill[s->sel[t]]++] = t;
	}
	/* the experts that have rows, in index order; from an expert source
	 * (disk) at most its capacity at a time */
	for (e = 0, n_run = 0; e < nx; e++)
		if (s->first[e + 1] > s->first[e])
			s->xids[n_run++] = e;
	for (c0 = 0; c0 < n_run; c0 += chunk) {
		int cn = n_run - c0 < chunk ? n_run - c0 : chunk;

		if (w->xsrc && w->xsrc->load(w->xsrc->ctx, w->xsrc->layer, s->xids + c0, cn, s->xptr,
					     &s->xerr))
			return -1;
		for (x = 0; x < cn; x++) {
			const int32_t *sl;
			int n, i;
			struct ntx_wmat gw, uw, dw;

			e = s->xids[c0 + x];
			sl = s->slot + s->first[e];
			n = s->first[e + 1] - s->first[e];
			gw = ntx_wmat_expert(&w->gate, e);
			uw = ntx_wmat_expert(&w->up, e);
			dw = ntx_wmat_expert(&w->down, e);
			if (w->xsrc) {
				gw.data = s->xptr[3 * x];
				uw.data = s->xptr[3 * x + 1];
				dw.data = s->xptr[3 * x + 2];
			}
			for (i = 0; i < n; i++)
				memcpy(s->xg + i * E, xn + (sl[i] / k) * E, (size_t)E * sizeof(float));
			ntx_cpu_matmul(pool, &gw, s->xg, n, s->g, s->mm);
			ntx_cpu_matmul(pool, &uw, s->xg, n, s->u, s->mm);
			ntx_op_swiglu(s->g, s->g, s->u, (int64_t)n * F);
			ntx_cpu_matmul(pool, &dw, s->g, n, s->xg, s->mm);
			for (i = 0; i < n; i++)
				memcpy(s->acc + (int64_t)sl[i] * E, s->xg + i * E,
				       (size_t)E * sizeof(float));
		}
	}
	/* out[t] = sum over j in top-k order of wgt[t][j] * acc[t][j] (as
	 * llama.cpp: each weighted row, then added left to right) */
	for (t = 0; t < n_tok; t++) {
		float *o = out + t * E;

		for (j = 0; j < k; j++) {
			const float *a = s->acc + ((int64_t)t * k + j) * E;
			float wj = s->wgt[(int64_t)t * k + j];
			int64_t i;

			if (j == 0)
				for (i = 0; i < E; i++)
					o[i] = a[i] * wj;
			else
				for (i = 0; i < E; i++)
					o[i] += a[i] * wj;
		}
	}
	return n_run;
}

int ntx_cpu_layer_forward(struct ntx_pool *pool, const struct ntx_llama_config *c,
			  const struct ntx_rope *rope, const struct ntx_layer_w *w,
			  struct ntx_kv_layer *kv, float *x, int n_tok, const int32_t *seq,
			  const int32_t *pos, struct ntx_cpu_scratch *s)
{
	int64_t E = c->n_embd, F = c->n_ff;
	float eps = (float)c->rms_eps;
	int n_run = 0;

	/* attention block */
	ntx_op_rmsnorm(s->xb, x, w->attn_norm, n_tok, (int)E, eps);
	ntx_cpu_matmul(pool, &w->wq, s->xb, n_tok, s->q, s->mm);
	ntx_cpu_matmul(pool, &w->wk, s->xb, n_tok, s->k, s->mm);
	ntx_cpu_matmul(pool, &w->wv, s->xb, n_tok, s->v, s->mm);
	if (w->bq) {
		ntx_op_add_rows(s->q, w->bq, n_tok, (int64_t)c->n_head * c->head_dim);
		ntx_op_add_rows(s->k, w->bk, n_tok, (int64_t)c->n_head_kv * c->head_dim);
		ntx_op_add_rows(s->v, w->bv, n_tok, (int64_t)c->n_head_kv * c->head_dim);
	}
	if (w->q_norm)
		ntx_op_head_rmsnorm(s->q, w->q_norm, n_tok * c->n_head, c->head_dim, eps);
	if (w->k_norm)
		ntx_op_head_rmsnorm(s->k, w->k_norm, n_tok * c->n_head_kv, c->head_dim, eps);
	ntx_op_rope(s->q, n_tok, c->n_head, c->head_dim, pos, rope);
	ntx_op_rope(s->k, n_tok, c->n_head_kv, c->head_dim, pos, rope);
	ntx_op_kv_store(kv, s->k, s->v, n_tok, seq, pos);
	ntx_op_attention(pool, s->att, s->q, n_tok, c->n_head, kv, seq, pos, s->att_scratch);
	ntx_cpu_matmul(pool, &w->wo, s->att, n_tok, s->tmp, s->mm);
	ntx_op_add(x, s->tmp, n_tok * E);

	/* feed-forward block */
	ntx_op_rmsnorm(s->xb, x, w->ffn_norm, n_tok, (int)E, eps);
	if (w->router.data && c->n_expert > 0) {
		n_run = moe_ffn(pool, c, w, s->xb, n_tok, s->tmp, s);
		if (n_run < 0)
			return -1;
	} else {
		ntx_cpu_matmul(pool, &w->gate, s->xb, n_tok, s->g, s->mm);
		ntx_cpu_matmul(pool, &w->up, s->xb, n_tok, s->u, s->mm);
		ntx_op_swiglu(s->g, s->g, s->u, n_tok * F);
		ntx_cpu_matmul(pool, &w->down, s->g, n_tok, s->tmp, s->mm);
	}
	ntx_op_add(x, s->tmp, n_tok * E);
	return n_run;
}
