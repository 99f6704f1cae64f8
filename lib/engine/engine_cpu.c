/* engine_cpu.c - the Llama layer forward pass on the CPU. */
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

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
	size_t mm = 0;
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
	memset(s, 0, sizeof *s);
}

void ntx_cpu_layer_forward(struct ntx_pool *pool, const struct ntx_llama_config *c,
			   const struct ntx_rope *rope, const struct ntx_layer_w *w,
			   struct ntx_kv_layer *kv, float *x, int n_tok, const int32_t *seq,
			   const int32_t *pos, struct ntx_cpu_scratch *s)
{
	int64_t E = c->n_embd, F = c->n_ff;
	float eps = (float)c->rms_eps;

	/* attention block */
	ntx_op_rmsnorm(s->xb, x, w->attn_norm, n_tok, (int)E, eps);
	ntx_cpu_matmul(pool, &w->wq, s->xb, n_tok, s->q, s->mm);
	ntx_cpu_matmul(pool, &w->wk, s->xb, n_tok, s->k, s->mm);
	ntx_cpu_matmul(pool, &w->wv, s->xb, n_tok, s->v, s->mm);
	ntx_op_rope(s->q, n_tok, c->n_head, c->head_dim, pos, rope);
	ntx_op_rope(s->k, n_tok, c->n_head_kv, c->head_dim, pos, rope);
	ntx_op_kv_store(kv, s->k, s->v, n_tok, seq, pos);
	ntx_op_attention(pool, s->att, s->q, n_tok, c->n_head, kv, seq, pos, s->att_scratch);
	ntx_cpu_matmul(pool, &w->wo, s->att, n_tok, s->tmp, s->mm);
	ntx_op_add(x, s->tmp, n_tok * E);

	/* feed-forward block */
	ntx_op_rmsnorm(s->xb, x, w->ffn_norm, n_tok, (int)E, eps);
	ntx_cpu_matmul(pool, &w->gate, s->xb, n_tok, s->g, s->mm);
	ntx_cpu_matmul(pool, &w->up, s->xb, n_tok, s->u, s->mm);
	ntx_op_swiglu(s->g, s->g, s->u, n_tok * F);
	ntx_cpu_matmul(pool, &w->down, s->g, n_tok, s->tmp, s->mm);
	ntx_op_add(x, s->tmp, n_tok * E);
}
