/* api_ctx.c - the public API (include/ntx.h), second half: contexts (an
 * engine and, from the first batch request on, a scheduler over its
 * sequences), single-sequence generation, batch requests and statistics.
 *
 * Generation and batches share the engine's KV caches: the scheduler keeps
 * the tokens each slot holds for prefix reuse, which ntx_generate would
 * overwrite behind its back. So ntx_ctx_generate refuses while requests are
 * active and otherwise drops the scheduler (keeping its counts); the next
 * submit makes a new one with empty caches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "engine.h"
#include "expert_stats.h"
#include "generate.h"
#include "sampler.h"
#include "scheduler.h"

/* A submitted request until its on_done (a list, so ntx_ctx_free can free
 * the ones the scheduler drops without callbacks). */
struct req {
	struct ntx_ctx *ctx;
	int64_t id;
	ntx_token_fn on_token;
	ntx_done_fn on_done;
	void *user;
	struct req *prev, *next;
};

/* ---- parameters ---- */

void ntx_ctx_params_init(struct ntx_ctx_params *p)
{
	if (!p)
		return;
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
}

void ntx_gen_params_init(struct ntx_gen_params *p)
{
	struct ntx_sampler_params sp;

	if (!p)
		return;
	ntx_sampler_defaults(&sp);
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
	p->n_predict = -1;
	p->temperature = sp.temp;
	p->top_k = sp.top_k;
	p->top_p = sp.top_p;
	p->min_p = sp.min_p;
	p->repeat_penalty = sp.repeat_penalty;
	p->repeat_last_n = sp.repeat_last_n;
	p->seed = sp.seed;
}

void ntx_request_init(struct ntx_request *r)
{
	if (!r)
		return;
	memset(r, 0, sizeof *r);
	r->size = sizeof *r;
}

/* The caller's generation parameters (NULL: defaults), checked, as *x and
 * the sampler's. */
static enum ntx_status gen_params(const struct ntx_gen_params *in, struct ntx_gen_params *x,
				  struct ntx_sampler_params *sp, struct ntx_error *e)
{
	enum ntx_status s;

	ntx_gen_params_init(x);
	s = ntx_api_struct_in(x, sizeof *x, in, "ntx_gen_params", e);
	if (s)
		return s;
	if (x->n_predict < -1)
		return ntx_api_set(e, NTX_STATUS_INVALID, "n_predict %d: expected -1 or more",
				   x->n_predict);
	if (isnan(x->temperature) || isinf(x->temperature))
		return ntx_api_set(e, NTX_STATUS_INVALID, "temperature %g: expected a finite number",
				   x->temperature);
	if (!(x->top_p >= 0))
		return ntx_api_set(e, NTX_STATUS_INVALID, "top_p %g: expected 0 or more", x->top_p);
	if (!(x->min_p >= 0 && x->min_p <= 1))
		return ntx_api_set(e, NTX_STATUS_INVALID, "min_p %g: expected 0 to 1", x->min_p);
	if (!(x->repeat_penalty > 0) || isinf(x->repeat_penalty))
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "repeat_penalty %g: expected a number above 0", x->repeat_penalty);
	if (x->repeat_last_n < -1)
		return ntx_api_set(e, NTX_STATUS_INVALID, "repeat_last_n %d: expected -1 or more",
				   x->repeat_last_n);
	ntx_sampler_defaults(sp);
	sp->temp = x->temperature;
	sp->top_k = x->top_k;
	sp->top_p = x->top_p;
	sp->min_p = x->min_p;
	sp->repeat_penalty = x->repeat_penalty;
	sp->repeat_last_n = x->repeat_last_n;
	sp->seed = x->seed;
	return NTX_OK;
}

static enum ntx_finish finish_of(enum ntx_stop s)
{
	switch (s) {
	case NTX_STOP_EOG: return NTX_FINISH_EOG;
	case NTX_STOP_CONTEXT: return NTX_FINISH_CONTEXT;
	case NTX_STOP_CALLER: return NTX_FINISH_STOPPED;
	case NTX_STOP_INTERRUPT: return NTX_FINISH_INTERRUPTED;
	default: return NTX_FINISH_LENGTH;
	}
}

/* The piece a token callback gets: "" for end-of-generation tokens. */
static const char *piece_of(const struct ntx_lm *lm, int32_t tok, size_t *len)
{
	const char *p = lm->eog[tok] ? NULL : ntx_vocab_piece(lm->v, tok, 0, len);

	if (!p) {
		*len = 0;
		return "";
	}
	return p;
}

/* ---- contexts ---- */

/* The caller's context parameters p (NULL: defaults) as *x, checked, and
 * the model lm checked against them and the plan (NULL: none). */
static enum ntx_status ctx_params_in(const struct ntx_lm *lm, const struct ntx_plan *plan,
				     const struct ntx_ctx_params *p, struct ntx_ctx_params *x,
				     struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	enum ntx_status s;

	ntx_ctx_params_init(x);
	s = ntx_api_struct_in(x, sizeof *x, p, "ntx_ctx_params", e);
	if (s)
		return s;
	if (ntx_api_backend_in(x->backend, e))
		return NTX_STATUS_INVALID;
	if ((unsigned)x->cache_type > NTX_KV_CACHE_F32)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "cache_type %d: expected NTX_KV_CACHE_DEFAULT, NTX_KV_CACHE_F16 or NTX_KV_CACHE_F32",
				   (int)x->cache_type);
	if ((unsigned)x->io > NTX_IO_MODE_MMAP)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "io %d: expected NTX_IO_MODE_DIRECT or NTX_IO_MODE_MMAP", x->io);
	if (x->n_skip < 0 || (x->n_skip > 0 && !x->skip))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_params: skip NULL, n_skip %d",
				   x->n_skip);
	if (x->n_ctx < 0 || x->n_seq < 0 || x->n_threads < 0 || x->gpu_index < 0)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_ctx_params: n_ctx %d, n_seq %d, n_threads %d, gpu_index %d: expected 0 or more",
				   x->n_ctx, x->n_seq, x->n_threads, x->gpu_index);
	if (lm->m->gguf->n_tensors == 0) /* ntx_lm_open_vocab */
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "%s: file has no tensors (a vocabulary-only file?)", lm->m->gguf->path);
	if (plan && ntx_plan_check_model(plan, lm->m, &ie))
		return ntx_api_fail(e, &ie);
	return NTX_OK;
}

/* 0.4: the skip list of *x as the engine's n_layer flags in *out (owned by
 * the caller; NULL and an error on failure). */
static enum ntx_status ctx_skip_flags(const struct ntx_lm *lm, const struct ntx_ctx_params *x,
				      uint8_t **out, struct ntx_error *e)
{
	int i, L = lm->m->cfg.n_layer;
	uint8_t *skip = calloc((size_t)L, 1);

	*out = NULL;
	if (!skip)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	for (i = 0; i < x->n_skip; i++) {
		if (x->skip[i] < 0 || x->skip[i] >= L) {
			free(skip);
			return ntx_api_set(e, NTX_STATUS_INVALID,
					   "skip layer %d is out of range [0, %d]", x->skip[i], L - 1);
		}
		skip[x->skip[i]] = 1;
	}
	*out = skip;
	return NTX_OK;
}

/* The engine's options for context c from the checked parameters *x and the
 * plan (NULL: none): what x leaves at 0 comes from the plan, else defaults. */
static void ctx_engine_opts(const struct ntx_ctx_params *x, const struct ntx_plan *plan,
			    struct ntx_ctx *c, struct ntx_engine_opts *eo)
{
	memset(eo, 0, sizeof *eo);
	eo->backend = x->backend == NTX_USE_CPU ? NTX_BACKEND_CPU :
		      x->backend == NTX_USE_CUDA ? NTX_BACKEND_CUDA : NTX_BACKEND_AUTO;
	eo->n_ctx = x->n_ctx ? x->n_ctx : plan ? plan->n_ctx : 0;
	eo->kv_type = x->cache_type == NTX_KV_CACHE_F32 ? NTX_KV_F32 :
		      x->cache_type == NTX_KV_CACHE_F16 ? NTX_KV_F16 :
		      plan ? plan->kv_type : NTX_KV_F16;
	eo->n_seq = x->n_seq ? x->n_seq : plan && plan->n_seq > 0 ? plan->n_seq : 1;
	eo->n_ubatch = plan ? plan->n_ubatch : 0;
	eo->n_threads = x->n_threads;
	eo->gpu_index = x->gpu_index;
	eo->plan = plan;
	eo->interrupt = &c->intr;
	eo->skip = c->skip;
	eo->io = x->io == NTX_IO_MODE_MMAP ? NTX_IO_MMAP : NTX_IO_DIRECT;
	eo->copy_limit = x->page_cache_only ? -1 : 0;
	eo->pack_path = x->pack_path;
}

enum ntx_status ntx_ctx_new(const struct ntx_lm *lm, const struct ntx_placement *pl,
			    const struct ntx_ctx_params *p, struct ntx_ctx **out,
			    struct ntx_error *e)
{
	struct ntx_ctx_params x;
	struct ntx_engine_opts eo;
	struct ntx_err ie = { 0 };
	const struct ntx_plan *plan = pl ? pl->p : NULL;
	struct ntx_ctx *c;
	enum ntx_status s;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_new: out is NULL");
	*out = NULL;
	if (!lm)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_new: lm is NULL");
	s = ctx_params_in(lm, plan, p, &x, e);
	if (s)
		return s;
	c = calloc(1, sizeof *c);
	if (!c)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	c->lm = lm;
	c->plan = plan;
	if (x.n_skip && (s = ctx_skip_flags(lm, &x, &c->skip, e)) != NTX_OK) {
		free(c);
		return s;
	}
	ctx_engine_opts(&x, plan, c, &eo);
	c->kv_type = eo.kv_type;
	c->n_threads = eo.n_threads;
	c->gpu_index = eo.gpu_index;
	c->e = ntx_engine_new(lm->m, &eo, &ie);
	if (!c->e) {
		free(c->skip);
		free(c);
		return ntx_api_fail(e, &ie);
	}
	*out = c;
	return NTX_OK;
}

void ntx_ctx_free(struct ntx_ctx *c)
{
	struct req *r, *next;

	if (!c)
		return;
	ntx_sched_free(c->sched); /* calls no callback */
	for (r = c->reqs; r; r = next) {
		next = r->next;
		free(r);
	}
	ntx_engine_free(c->draft);
	ntx_engine_free(c->e);
	free(c->skip);
	free(c->self_mask);
	free(c);
}

void ntx_ctx_interrupt(struct ntx_ctx *c)
{
	if (c)
		c->intr = 1;
}

enum ntx_status ntx_ctx_expert_layer_stats(const struct ntx_ctx *c, int layer,
					   struct ntx_expert_layer_stats *st, struct ntx_error *e)
{
	struct ntx_expert_layer_stats x;

	if (!c || !st)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_expert_layer_stats: ctx or st is NULL");
	if (c->lm->m->cfg.n_expert <= 0)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "expert statistics: the model has no experts (it is not a mixture of experts)");
	if (layer < 0 || layer >= c->lm->m->cfg.n_layer)
		return ntx_api_set(e, NTX_STATUS_INVALID, "layer %d is out of range [0, %d]", layer,
				   c->lm->m->cfg.n_layer - 1);
	memset(&x, 0, sizeof x);
	ntx_engine_expert_layer(c->e, layer, &x.routed, &x.routed_cpu, &x.cache_hits,
				&x.cache_misses);
	x.size = sizeof x;
	return ntx_api_struct_out(st, &x, sizeof x, "ntx_expert_layer_stats", e);
}

enum ntx_status ntx_ctx_expert_stats(struct ntx_ctx *c, const char *path, struct ntx_error *e)
{
	const struct ntx_model *m;
	const uint64_t *counts;
	struct ntx_err ie = { 0 };

	if (!c || !path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_expert_stats: ctx or path is NULL");
	m = c->lm->m;
	counts = ntx_engine_expert_counts(c->e);
	if (!counts)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "expert statistics: the model has no experts (it is not a mixture of experts)");
	if (ntx_expert_stats_write(path, m->fingerprint_hex, m->cfg.n_layer, m->cfg.n_expert,
				   m->cfg.n_expert_used, counts, &ie))
		return ntx_api_fail(e, &ie);
	return NTX_OK;
}

/* ---- generation ---- */

struct gen_cb {
	const struct ntx_lm *lm;
	ntx_token_fn fn;
	void *user;
};

static int gen_token(void *p, int32_t tok)
{
	struct gen_cb *g = p;
	const char *s;
	size_t n;

	if (!g->fn)
		return 0;
	s = piece_of(g->lm, tok, &n);
	return g->fn(g->user, tok, s, n);
}

void ntx_api_drop_sched(struct ntx_ctx *c)
{
	struct ntx_sched_stats st;

	if (!c->sched)
		return;
	ntx_sched_get_stats(c->sched, &st);
	c->done_st.n_requests += st.n_requests;
	c->done_st.n_reused += st.n_reused;
	c->done_st.n_gen += st.n_gen;
	c->done_st.n_prompt += st.n_prompt;
	c->done_st.n_drafted += st.n_drafted;
	c->done_st.n_accepted += st.n_accepted;
	c->done_st.n_verify_steps += st.n_verify_steps;
	c->done_st.n_draft_evals += st.n_draft_evals;
	c->done_st.t_draft_s += st.t_draft_s;
	c->done_st.t_verify_s += st.t_verify_s;
	ntx_sched_free(c->sched);
	c->sched = NULL;
}

enum ntx_status ntx_ctx_generate(struct ntx_ctx *c, int seq, const int32_t *prompt,
				 int n_prompt, const struct ntx_gen_params *p,
				 ntx_token_fn on_token, void *user, struct ntx_gen_result *res,
				 struct ntx_error *e)
{
	struct ntx_gen_params x;
	struct ntx_gen_opts go;
	struct ntx_gen_stats st;
	struct ntx_gen_result r;
	struct ntx_err ie = { 0 };
	struct ntx_api_logits lg;
	struct gen_cb cb;
	enum ntx_status s;
	int i, rc;

	if (!c)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_generate: ctx is NULL");
	if (!prompt || n_prompt < 1)
		return ntx_api_set(e, NTX_STATUS_INVALID, "the prompt is empty");
	if (seq < 0 || seq >= ntx_engine_n_seq(c->e))
		return ntx_api_set(e, NTX_STATUS_INVALID, "sequence %d is out of range [0, %d)", seq,
				   ntx_engine_n_seq(c->e));
	for (i = 0; i < n_prompt; i++)
		if (prompt[i] < 0 || prompt[i] >= c->lm->m->cfg.n_vocab)
			return ntx_api_set(e, NTX_STATUS_INVALID,
					   "token id %d is out of range [0, %lld)", prompt[i],
					   (long long)c->lm->m->cfg.n_vocab);
	memset(&go, 0, sizeof go);
	s = gen_params(p, &x, &go.sp, e);
	if (!s)
		s = ntx_api_gen_details(c, &x, &go, &lg, e); /* 0.5: api_gen.c */
	if (s)
		return s;
	if (c->sched && ntx_sched_n_active(c->sched))
		return ntx_api_set(e, NTX_STATUS_BUSY, "%d batch requests are active",
				   ntx_sched_n_active(c->sched));
	ntx_api_drop_sched(c); /* its slots' caches are about to be overwritten */
	go.n_predict = x.n_predict;
	go.eog = x.ignore_eog ? NULL : c->lm->eog;
	if (c->draft || c->lookup) {
		go.draft = c->draft;
		go.draft_seq = seq;
		go.lookup = c->lookup;
		go.draft_k = c->draft_k > 0 ? c->draft_k : 4;
		go.adaptive_k = c->draft_k == 0;
	}
	cb.lm = c->lm;
	cb.fn = on_token;
	cb.user = user;
	memset(&st, 0, sizeof st);
	rc = ntx_generate(c->e, seq, prompt, n_prompt, &go, gen_token, &cb, &st, &ie);
	c->intr = 0;
	c->gen_drafted += st.n_drafted;
	c->gen_accepted += st.n_accepted;
	if (rc)
		return ntx_api_fail(e, &ie);
	if (res) {
		memset(&r, 0, sizeof r);
		r.size = sizeof r;
		r.n_prompt = st.n_prompt;
		r.n_gen = st.n_gen;
		r.finish = finish_of(st.stop);
		r.t_prompt_ms = st.t_prompt_s * 1e3;
		r.t_gen_ms = st.t_gen_s * 1e3;
		ntx_api_gen_result(&r, &st);
		return ntx_api_struct_out(res, &r, sizeof r, "ntx_gen_result", e);
	}
	return NTX_OK;
}

/* ---- batch requests ---- */

static int req_token(void *p, int32_t tok)
{
	struct req *q = p;
	const char *s;
	size_t n;

	if (!q->on_token)
		return 0;
	s = piece_of(q->ctx->lm, tok, &n);
	return q->on_token(q->user, tok, s, n);
}

static void req_unlink(struct req *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		q->ctx->reqs = q->next;
	if (q->next)
		q->next->prev = q->prev;
}

static void req_done(void *p, const struct ntx_sched_result *sr)
{
	struct req *q = p;
	struct ntx_gen_result r;

	memset(&r, 0, sizeof r);
	r.size = sizeof r;
	r.n_prompt = sr->n_prompt;
	r.n_gen = sr->n_gen;
	r.n_reused = sr->n_reused;
	r.finish = finish_of(sr->stop);
	if (sr->t_first > 0) {
		r.t_prompt_ms = (sr->t_first - sr->t_submit) * 1e3;
		r.t_gen_ms = (sr->t_end - sr->t_first) * 1e3;
	}
	req_unlink(q);
	if (q->on_done)
		q->on_done(q->user, q->id, &r, sr->gen);
	free(q);
}

enum ntx_status ntx_ctx_submit(struct ntx_ctx *c, const struct ntx_request *rq, int64_t *id,
			       struct ntx_error *e)
{
	struct ntx_request x;
	struct ntx_gen_params gp;
	struct ntx_sched_req sr;
	struct ntx_err ie = { 0 };
	enum ntx_status s;
	struct req *q;
	int64_t k;

	if (!c || !rq)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_submit: %s is NULL",
				   !c ? "ctx" : "request");
	ntx_request_init(&x);
	s = ntx_api_struct_in(&x, sizeof x, rq, "ntx_request", e);
	if (s)
		return s;
	if (!x.prompt && x.n_prompt)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_request: prompt is NULL");
	memset(&sr, 0, sizeof sr);
	s = gen_params(x.gen, &gp, &sr.sp, e);
	if (!s)
		s = ntx_api_request_check(c, &gp, e);
	if (s)
		return s;
	if (!c->sched) {
		c->sched = ntx_sched_new(c->e, c->lm->eog, &ie);
		if (!c->sched)
			return ntx_api_fail(e, &ie);
		/* speculative decoding (ntx_ctx_set_spec, api_run.c), taken by a
		 * scheduler before its first request */
		if ((c->draft || c->lookup) &&
		    ntx_sched_set_spec(c->sched, c->draft, c->lookup,
				       c->draft_k > 0 ? c->draft_k : 4, c->draft_k == 0, &ie)) {
			ntx_sched_free(c->sched);
			c->sched = NULL;
			return ntx_api_fail(e, &ie);
		}
	}
	q = calloc(1, sizeof *q);
	if (!q)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	q->ctx = c;
	q->on_token = x.on_token;
	q->on_done = x.on_done;
	q->user = x.user;
	sr.tokens = x.prompt;
	sr.n_tokens = x.n_prompt;
	sr.n_predict = gp.n_predict;
	sr.ignore_eog = gp.ignore_eog;
	sr.on_token = req_token;
	sr.on_done = req_done;
	sr.user = q;
	k = ntx_sched_submit(c->sched, &sr, &ie);
	if (k < 0) {
		free(q);
		return ntx_api_fail(e, &ie);
	}
	q->id = k;
	q->next = c->reqs;
	if (c->reqs)
		c->reqs->prev = q;
	c->reqs = q;
	if (id)
		*id = k;
	return NTX_OK;
}

enum ntx_status ntx_ctx_step(struct ntx_ctx *c, int *n_active, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	int rc;

	if (!c)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_step: ctx is NULL");
	rc = c->sched ? ntx_sched_step(c->sched, &ie) : 0;
	c->intr = 0;
	if (n_active)
		*n_active = c->sched ? ntx_sched_n_active(c->sched) : 0;
	return rc ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_ctx_cancel(struct ntx_ctx *c, int64_t id, struct ntx_error *e)
{
	if (!c)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_cancel: ctx is NULL");
	if (!c->sched || ntx_sched_cancel(c->sched, id, NTX_STOP_CALLER))
		return ntx_api_set(e, NTX_STATUS_INVALID, "request %lld is not active",
				   (long long)id);
	return NTX_OK;
}

/* ---- statistics ---- */

enum ntx_status ntx_ctx_stats(const struct ntx_ctx *c, struct ntx_ctx_stats *out,
			      struct ntx_error *e)
{
	struct ntx_ctx_stats x;
	struct ntx_engine_stats es;
	struct ntx_sched_stats ss;

	if (!c)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_stats: ctx is NULL");
	ntx_engine_get_stats(c->e, &es);
	memset(&ss, 0, sizeof ss);
	if (c->sched)
		ntx_sched_get_stats(c->sched, &ss);
	memset(&x, 0, sizeof x);
	x.size = sizeof x;
	x.backend = ntx_engine_backend(c->e) == NTX_BACKEND_CUDA ? NTX_USE_CUDA : NTX_USE_CPU;
	x.n_ctx = ntx_engine_n_ctx(c->e);
	x.n_seq = ntx_engine_n_seq(c->e);
	x.n_eval_calls = es.n_eval_calls;
	x.n_tokens = es.n_tokens;
	x.t_eval_ms = es.t_eval_s * 1e3;
	x.n_requests = c->done_st.n_requests + ss.n_requests;
	x.n_prompt_reused = c->done_st.n_reused + ss.n_reused;
	x.n_batch_gen = c->done_st.n_gen + ss.n_gen;
	x.n_batch_prompt = c->done_st.n_prompt + ss.n_prompt;
	x.n_drafted = c->gen_drafted + c->done_st.n_drafted + ss.n_drafted;
	x.n_accepted = c->gen_accepted + c->done_st.n_accepted + ss.n_accepted;
	ntx_api_stats_streaming(c, &x);
	/* 0.5: the batch requests' speculative decoding */
	x.n_batch_verify_steps = c->done_st.n_verify_steps + ss.n_verify_steps;
	x.n_batch_draft_evals = c->done_st.n_draft_evals + ss.n_draft_evals;
	x.t_batch_draft_ms = (c->done_st.t_draft_s + ss.t_draft_s) * 1e3;
	x.t_batch_verify_ms = (c->done_st.t_verify_s + ss.t_verify_s) * 1e3;
	return ntx_api_struct_out(out, &x, sizeof x, "ntx_ctx_stats", e);
}
