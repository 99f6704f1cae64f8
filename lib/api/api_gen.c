/* api_gen.c - the public API (include/ntx.h), generate details (0.5): what
 * ntx-run's generate mode needs beyond ntx_ctx_generate's sampling
 * (api_ctx.c): teacher forcing, a logits sink, self-speculation's draft
 * layers, the speculative and streaming counters.
 *
 * The calls of ntx.h that carry these (ntx_ctx_generate, ntx_ctx_submit,
 * ntx_ctx_set_spec, ntx_ctx_stats) call the helpers below, so what the 0.5
 * fields mean is decided here, in one place. */
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "engine.h"
#include "generate.h"
#include "plan.h"

/* ---- generation ---- */

static int logits_row(void *p, const float *row, int64_t n_vocab)
{
	const struct ntx_api_logits *lg = p;

	return lg->fn(lg->user, row, (int32_t)n_vocab);
}

static int spec_on(const struct ntx_ctx *c)
{
	return c->draft || c->lookup || c->self_mask;
}

enum ntx_status ntx_api_gen_details(const struct ntx_ctx *c, const struct ntx_gen_params *x,
				    struct ntx_gen_opts *go, struct ntx_api_logits *lg,
				    struct ntx_error *e)
{
	int64_t V = c->lm->m->cfg.n_vocab;
	int i;

	if (x->n_force < 0 || (x->n_force > 0 && !x->force))
		return ntx_api_set(e, NTX_STATUS_INVALID, "force NULL, n_force %d", x->n_force);
	for (i = 0; x->force && i < x->n_force; i++)
		if (x->force[i] < 0 || x->force[i] >= V)
			return ntx_api_set(e, NTX_STATUS_INVALID,
					   "forced token id %d is out of range [0, %lld)", x->force[i],
					   (long long)V);
	if (x->on_logits && spec_on(c))
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "on_logits cannot be combined with speculative decoding");
	go->force = x->force;
	go->n_force = x->force ? x->n_force : 0;
	if (x->on_logits) {
		lg->fn = x->on_logits;
		lg->user = x->logits_user;
		go->logits = logits_row;
		go->logits_ctx = lg;
	}
	if (c->self_mask) {
		go->self_spec = 1;
		go->draft_mask = c->self_mask;
		go->lookup = c->lookup;
		go->draft_k = c->draft_k > 0 ? c->draft_k : 4;
		go->adaptive_k = c->draft_k == 0;
	}
	return NTX_OK;
}

enum ntx_status ntx_api_request_check(const struct ntx_ctx *c, const struct ntx_gen_params *x,
				      struct ntx_error *e)
{
	if (x->force || x->n_force || x->on_logits)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_request: force and on_logits apply to ntx_ctx_generate only");
	if (c->self_mask)
		return ntx_api_set(e, NTX_STATUS_UNSUPPORTED,
				   "self-speculation applies to ntx_ctx_generate only: batch requests are refused while it is on");
	return NTX_OK;
}

void ntx_api_gen_result(struct ntx_gen_result *r, const struct ntx_gen_stats *st)
{
	r->n_drafted = st->n_drafted;
	r->n_accepted = st->n_accepted;
	r->n_lookup_drafted = st->n_lookup_drafted;
	r->n_lookup_accepted = st->n_lookup_accepted;
	r->n_target_passes = st->n_full_passes;
	r->n_draft_passes = st->n_draft_passes;
	r->t_draft_ms = st->t_draft_s * 1e3;
	r->t_verify_ms = st->t_verify_s * 1e3;
	r->n_paused_steps = st->n_paused;
}

/* ---- self-speculation ---- */

/* The draft skips self_skip's layers or, without a list, every layer the
 * placement does not keep in VRAM; and the context's skipped layers. */
enum ntx_status ntx_api_self_mask(const struct ntx_ctx *c, const struct ntx_spec_params *x,
				  uint8_t **mask, struct ntx_error *e)
{
	int L = c->lm->m->cfg.n_layer, l, n_draft = 0;
	uint8_t *m;

	*mask = NULL;
	if (x->n_self_skip > 0 && !x->self_skip)
		return ntx_api_set(e, NTX_STATUS_INVALID, "self_skip NULL, n_self_skip %d",
				   x->n_self_skip);
	if (x->n_self_skip < 0 && !c->plan)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "self-speculation needs draft layers: a placement with VRAM-resident layers, or self_skip");
	for (l = 0; l < x->n_self_skip; l++)
		if (x->self_skip[l] < 0 || x->self_skip[l] >= L)
			return ntx_api_set(e, NTX_STATUS_INVALID,
					   "self_skip layer %d is out of range [0, %d]", x->self_skip[l],
					   L - 1);
	m = calloc((size_t)L, 1);
	if (!m)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	if (x->n_self_skip < 0) {
		for (l = 0; l < L; l++)
			m[l] = c->plan->layers[l].home != NTX_TIER_VRAM;
	} else {
		for (l = 0; l < x->n_self_skip; l++)
			m[x->self_skip[l]] = 1;
	}
	for (l = 0; l < L; l++) {
		if (c->skip && c->skip[l])
			m[l] = 1;
		n_draft += !m[l];
	}
	if (n_draft == 0) {
		free(m);
		return ntx_api_set(e, NTX_STATUS_INVALID, "the draft model has no layers");
	}
	*mask = m;
	return NTX_OK;
}

/* ---- statistics ---- */

void ntx_api_stats_streaming(const struct ntx_ctx *c, struct ntx_ctx_stats *st)
{
	struct ntx_engine_stats es;

	ntx_engine_get_stats(c->e, &es);
	st->bytes_h2d = es.bytes_h2d;
	st->bytes_disk = es.bytes_disk;
	st->bytes_cpu_weights = es.bytes_cpu_weights;
	st->t_h2d_ms = es.t_h2d_s * 1e3;
	st->t_disk_ms = es.t_disk_s * 1e3;
	st->t_cpu_ms = es.t_cpu_s * 1e3;
	st->t_gpu_wait_ms = es.t_gpu_wait_s * 1e3;
	st->t_cpu_wait_ms = es.t_cpu_wait_s * 1e3;
	st->expert_cache_hits = es.xcache_hits;
	st->expert_cache_misses = es.xcache_misses;
}
