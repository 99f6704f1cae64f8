/* engine.c - batch evaluation: embedding, the layer loop (each layer on its
 * executor), final norm and output head; KV cache bookkeeping. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_int.h"

struct eng_layer {
	enum ntx_tier home;
	enum ntx_exec exec;
	int skip;
	struct ntx_layer_w w;      /* host weight views (CPU executor) */
	struct ntx_kv_layer kv;    /* host KV cache (CPU executor) */
};

struct ntx_engine {
	const struct ntx_model *m;
	struct ntx_llama_config cfg;
	struct ntx_engine_opts o;
	enum ntx_backend backend;
	int n_ctx, n_seq, n_ub, n_threads;
	struct ntx_rope rope;
	struct ntx_pool *pool;
	struct eng_layer *layers;
	uint8_t *skip;             /* engine's skip set */
	struct ntx_wmat out_w;     /* output head (host) */
	const float *out_norm;
	struct ntx_cpu_scratch s;
	float *x;                  /* [n_ub][n_embd] hidden state */
	float *x_in;               /* copy of a layer's input (cos stats) */
	float *head_in;            /* gathered normed rows for logits */
	int32_t *seq0;             /* zeros for batches without seq */
	uint8_t *want_buf;         /* [n_ub] */
	struct ntx_cos_stats *cos;
	struct ntx_engine_stats st;
};

const char *ntx_backend_name(enum ntx_backend b)
{
	return b == NTX_BACKEND_CUDA ? "cuda" : b == NTX_BACKEND_CPU ? "cpu" : "auto";
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int kv_alloc(struct ntx_kv_layer *kv, const struct ntx_llama_config *c, int n_ctx,
		    int n_seq, int f16, struct ntx_err *err)
{
	size_t n = (size_t)n_seq * n_ctx * c->n_head_kv * c->head_dim;
	size_t es = f16 ? 2 : 4;

	kv->f16 = f16;
	kv->n_ctx = n_ctx;
	kv->n_seq = n_seq;
	kv->n_head_kv = c->n_head_kv;
	kv->head_dim = c->head_dim;
	kv->k = calloc(n, es);
	kv->v = calloc(n, es);
	if (!kv->k || !kv->v)
		return ntx_err_set(err, NTX_ENOMEM,
				   "out of memory for the KV cache (%zu bytes per layer)", 2 * n * es);
	return 0;
}

static int n_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

struct ntx_engine *ntx_engine_new(const struct ntx_model *m, const struct ntx_engine_opts *o,
				  struct ntx_err *err)
{
	struct ntx_engine *e = calloc(1, sizeof *e);
	const struct ntx_llama_config *c = &m->cfg;
	int l;

	if (!e) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	e->m = m;
	e->cfg = *c;
	e->o = *o;
	if (!m->layers) {
		ntx_err_set(err, NTX_EINVAL, "model has no tensors (vocabulary-only file)");
		goto fail;
	}
	e->n_ctx = o->n_ctx > 0 ? o->n_ctx : (c->n_ctx_train < 4096 ? c->n_ctx_train : 4096);
	e->n_seq = o->n_seq > 0 ? o->n_seq : 1;
	e->n_ub = o->n_ubatch > 0 ? o->n_ubatch : 512;
	if (e->n_ub > e->n_ctx * e->n_seq)
		e->n_ub = e->n_ctx * e->n_seq;
	e->n_threads = o->n_threads > 0 ? o->n_threads : n_cores();
	if (o->backend == NTX_BACKEND_CUDA) {
		ntx_err_set(err, NTX_EDEVICE, "the CUDA backend is not available in this build");
		goto fail;
	}
	e->backend = NTX_BACKEND_CPU;
	e->rope.n_rot = c->n_rot;
	e->rope.base = c->rope_base;
	e->rope.freq_scale = c->rope_freq_scale;
	e->rope.freqs = m->rope_freqs ? (const float *)m->rope_freqs->data : NULL;

	e->pool = ntx_pool_new(e->n_threads, err);
	if (!e->pool)
		goto fail;
	e->layers = calloc((size_t)c->n_layer, sizeof *e->layers);
	e->skip = calloc((size_t)c->n_layer, 1);
	e->cos = calloc((size_t)c->n_layer, sizeof *e->cos);
	e->x = malloc((size_t)e->n_ub * c->n_embd * sizeof(float));
	e->x_in = malloc((size_t)e->n_ub * c->n_embd * sizeof(float));
	e->head_in = malloc((size_t)e->n_ub * c->n_embd * sizeof(float));
	e->seq0 = calloc((size_t)e->n_ub, sizeof(int32_t));
	e->want_buf = calloc((size_t)e->n_ub, 1);
	if (!e->layers || !e->skip || !e->cos || !e->x || !e->x_in || !e->head_in || !e->seq0 ||
	    !e->want_buf) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	for (l = 0; l < c->n_layer; l++) {
		struct eng_layer *L = &e->layers[l];

		L->home = NTX_TIER_RAM;
		L->exec = NTX_EXEC_CPU;
		e->skip[l] = o->skip ? o->skip[l] : 0;
		if (o->plan && o->plan->layers[l].skip)
			e->skip[l] = 1;
		ntx_layer_w_from_tensors(&L->w, &m->layers[l], m->gguf->map, 0);
		if (e->skip[l])
			continue;
		if (kv_alloc(&L->kv, c, e->n_ctx, e->n_seq, o->kv_type == NTX_KV_F16, err))
			goto fail;
	}
	e->out_w = ntx_wmat_from_tensor(m->output, m->output->data);
	e->out_norm = m->output_norm->data;
	if (ntx_cpu_scratch_init(&e->s, c, m, e->n_ub, e->n_ctx, e->n_threads, err))
		goto fail;
	return e;
fail:
	ntx_engine_free(e);
	return NULL;
}

void ntx_engine_free(struct ntx_engine *e)
{
	int l;

	if (!e)
		return;
	if (e->layers) {
		for (l = 0; l < e->cfg.n_layer; l++) {
			free(e->layers[l].kv.k);
			free(e->layers[l].kv.v);
		}
	}
	ntx_cpu_scratch_free(&e->s);
	ntx_pool_free(e->pool);
	free(e->layers);
	free(e->skip);
	free(e->cos);
	free(e->x);
	free(e->x_in);
	free(e->head_in);
	free(e->seq0);
	free(e->want_buf);
	free(e);
}

static void embed(struct ntx_engine *e, const int32_t *tok, int n)
{
	const struct ntx_gguf_tensor *te = e->m->tok_embd;
	uint64_t rb = 0;
	int i;

	ntx_type_row_bytes(te->type, te->ne[0], &rb, NULL);
	for (i = 0; i < n; i++)
		ntx_dequant_row(te->type, (const unsigned char *)te->data + rb * (uint64_t)tok[i],
				e->x + (int64_t)i * e->cfg.n_embd, e->cfg.n_embd);
}

static void cos_accumulate(struct ntx_cos_stats *cs, const float *a, const float *b, int n_tok,
			   int dim)
{
	int t, i;

	for (t = 0; t < n_tok; t++) {
		const float *x = a + (int64_t)t * dim, *y = b + (int64_t)t * dim;
		double xy = 0, xx = 0, yy = 0, c;

		for (i = 0; i < dim; i++) {
			xy += (double)x[i] * y[i];
			xx += (double)x[i] * x[i];
			yy += (double)y[i] * y[i];
		}
		c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : 1.0;
		cs->sum += c;
		cs->sum_sq += c * c;
		cs->n++;
	}
}

/* Evaluate one chunk of at most n_ub tokens. */
static int eval_chunk(struct ntx_engine *e, const int32_t *tok, const int32_t *pos,
		      const int32_t *seq, const uint8_t *want, int n, const uint8_t *mask,
		      float *logits, int *n_rows, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	int l, i, nr = 0;
	int E = c->n_embd;

	embed(e, tok, n);
	for (l = 0; l < c->n_layer; l++) {
		struct eng_layer *L = &e->layers[l];

		if (mask ? mask[l] : e->skip[l])
			continue;
		if (!L->kv.k)
			return ntx_err_set(err, NTX_EINVAL,
					   "layer %d is in the skip set of this engine and cannot be evaluated",
					   l);
		if (e->o.interrupt && *e->o.interrupt)
			return ntx_err_set(err, NTX_EINTR, "interrupted");
		if (e->o.collect_cos)
			memcpy(e->x_in, e->x, (size_t)n * E * sizeof(float));
		ntx_cpu_layer_forward(e->pool, c, &e->rope, &L->w, &L->kv, e->x, n, seq, pos, &e->s);
		if (e->o.collect_cos)
			cos_accumulate(&e->cos[l], e->x_in, e->x, n, E);
	}
	/* final norm and head on the wanted rows */
	for (i = 0; i < n; i++) {
		if (want[i]) {
			memcpy(e->head_in + (int64_t)nr * E, e->x + (int64_t)i * E,
			       (size_t)E * sizeof(float));
			nr++;
		}
	}
	if (nr) {
		ntx_op_rmsnorm(e->head_in, e->head_in, e->out_norm, nr, E, (float)c->rms_eps);
		ntx_cpu_matmul(e->pool, &e->out_w, e->head_in, nr, logits, e->s.mm);
	}
	*n_rows = nr;
	return 0;
}

int ntx_engine_eval(struct ntx_engine *e, const struct ntx_batch *b, const uint8_t *layer_mask,
		    float *logits, struct ntx_err *err)
{
	int done = 0, i;
	double t0 = now_s();
	int64_t V = e->cfg.n_vocab;

	for (i = 0; i < b->n_tok; i++) {
		int s = b->seq ? b->seq[i] : 0;

		if (b->tok[i] < 0 || b->tok[i] >= V)
			return ntx_err_set(err, NTX_EINVAL, "token id %d is out of range [0, %lld)",
					   b->tok[i], (long long)V);
		if (s < 0 || s >= e->n_seq)
			return ntx_err_set(err, NTX_EINVAL, "sequence %d is out of range [0, %d)", s,
					   e->n_seq);
		if (b->pos[i] < 0 || b->pos[i] >= e->n_ctx)
			return ntx_err_set(err, NTX_EINVAL,
					   "position %d is beyond the context size %d (use -c to raise it)",
					   b->pos[i], e->n_ctx);
	}
	while (done < b->n_tok) {
		int n = b->n_tok - done, nr = 0;
		const uint8_t *want;

		if (n > e->n_ub)
			n = e->n_ub;
		if (b->want) {
			want = b->want + done;
		} else { /* only the batch's last token */
			memset(e->want_buf, 0, (size_t)n);
			if (done + n == b->n_tok)
				e->want_buf[n - 1] = 1;
			want = e->want_buf;
		}
		if (eval_chunk(e, b->tok + done, b->pos + done, b->seq ? b->seq + done : e->seq0,
			       want, n, layer_mask, logits, &nr, err))
			return -1;
		if (logits)
			logits += (int64_t)nr * V;
		done += n;
	}
	e->st.n_eval_calls++;
	e->st.n_tokens += b->n_tok;
	e->st.t_eval_s += now_s() - t0;
	return 0;
}

void ntx_engine_kv_truncate(struct ntx_engine *e, int seq, int n)
{
	(void)e;
	(void)seq;
	(void)n; /* positions are overwritten on the next eval: nothing to do */
}

int ntx_engine_n_ctx(const struct ntx_engine *e)
{
	return e->n_ctx;
}

int ntx_engine_n_seq(const struct ntx_engine *e)
{
	return e->n_seq;
}

int64_t ntx_engine_n_vocab(const struct ntx_engine *e)
{
	return e->cfg.n_vocab;
}

enum ntx_backend ntx_engine_backend(const struct ntx_engine *e)
{
	return e->backend;
}

const struct ntx_model *ntx_engine_model(const struct ntx_engine *e)
{
	return e->m;
}

const struct ntx_cos_stats *ntx_engine_cos_stats(const struct ntx_engine *e)
{
	return e->cos;
}

void ntx_engine_cos_reset(struct ntx_engine *e)
{
	memset(e->cos, 0, (size_t)e->cfg.n_layer * sizeof *e->cos);
}

uint64_t ntx_engine_weight_bytes_per_token(const struct ntx_engine *e)
{
	uint64_t n = e->m->output->nbytes + e->m->output_norm->nbytes;
	int l;

	for (l = 0; l < e->cfg.n_layer; l++) {
		if (!e->skip[l])
			n += e->m->layers[l].bytes;
	}
	return n;
}

double ntx_engine_peak_gbps(const struct ntx_engine *e)
{
	(void)e;
	return 0;
}

void ntx_engine_get_stats(const struct ntx_engine *e, struct ntx_engine_stats *s)
{
	*s = e->st;
}
