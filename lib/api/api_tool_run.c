/* api_tool_run.c - the public API (include/ntx.h) for ntx-run (0.4): what
 * its modes need beyond contexts and generation (api_ctx.c): models opened
 * for their vocabulary, the lists its options take. Each call checks its arguments and runs the library's
 * module; printing stays with the caller. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "engine.h"
#include "generate.h"
#include "model.h"
#include "parse.h"

/* ---- models ---- */

enum ntx_status ntx_lm_open_vocab(const char *path, struct ntx_lm **out, struct ntx_error *e)
{
	return ntx_api_lm_open(path, NTX_MODEL_VOCAB_ONLY, "ntx_lm_open_vocab", out, e);
}

/* ---- contexts ---- */

int ntx_gpu_check(int index, char *why, size_t len)
{
	char buf[256] = "";
	int ok = index >= 0 && ntx_engine_gpu_usable(index, buf, sizeof buf);

	if (index < 0)
		snprintf(buf, sizeof buf, "GPU index %d: expected 0 or more", index);
	if (why && len)
		snprintf(why, len, "%s", ok ? "" : buf);
	return ok;
}

const char *ntx_ctx_fallback_note(const struct ntx_ctx *c)
{
	struct ntx_engine_stats es;

	if (!c)
		return NULL;
	ntx_engine_get_stats(c->e, &es);
	if (!es.fell_back_to_cpu)
		return NULL;
	/* the engine's stats are a copy: keep the text in the context */
	snprintf(((struct ntx_ctx *)c)->note, sizeof c->note, "%s", es.backend_note);
	return c->note;
}

/* ---- perplexity ---- */

struct ppl_cb {
	ntx_perplexity_fn fn;
	void *user;
};

static void ppl_progress(void *p, int chunk, int n_chunks, double ppl)
{
	struct ppl_cb *cb = p;

	if (cb->fn)
		cb->fn(cb->user, chunk, n_chunks, ppl);
}

enum ntx_status ntx_ctx_perplexity(struct ntx_ctx *c, const int32_t *ids, int n, int n_chunk,
				   ntx_perplexity_fn progress, void *user,
				   struct ntx_perplexity_result *res, struct ntx_error *e)
{
	struct ntx_perplexity_result r;
	struct ntx_ppl_result pr;
	struct ntx_err ie = { 0 };
	struct ppl_cb cb = { progress, user };
	int i;

	if (!c || !ids || n < 1)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_perplexity: %s",
				   !c ? "ctx is NULL" : "no tokens");
	for (i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= c->lm->m->cfg.n_vocab)
			return ntx_api_set(e, NTX_STATUS_INVALID,
					   "token id %d is out of range [0, %lld)", ids[i],
					   (long long)c->lm->m->cfg.n_vocab);
	if (n < n_chunk)
		return ntx_api_set(e, NTX_STATUS_INVALID, "%d tokens, fewer than one chunk of %d",
				   n, n_chunk);
	if (c->sched && ntx_sched_n_active(c->sched))
		return ntx_api_set(e, NTX_STATUS_BUSY, "%d batch requests are active",
				   ntx_sched_n_active(c->sched));
	ntx_api_drop_sched(c); /* its slots' caches are about to be overwritten */
	if (ntx_perplexity(c->e, ids, n, n_chunk, ntx_vocab_bos(c->lm->v), NULL, NULL, NULL,
			   ppl_progress, &cb, &pr, &ie))
		return ntx_api_fail(e, &ie);
	if (res) {
		memset(&r, 0, sizeof r);
		r.size = sizeof r;
		r.ppl = pr.ppl;
		r.ppl_err = pr.ppl_err;
		r.nll = pr.nll;
		r.n_chunks = pr.n_chunks;
		r.n_scored = pr.n_scored;
		return ntx_api_struct_out(res, &r, sizeof r, "ntx_perplexity_result", e);
	}
	return NTX_OK;
}

/* ---- values ---- */

enum ntx_status ntx_arg_ids(const char *s, int32_t max, int32_t **ids, int *n,
			    struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !ids || !n)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_ids: NULL argument");
	*ids = NULL;
	*n = 0;
	if (max < 0)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_ids: max %d: expected 0 or more",
				   (int)max);
	return ntx_parse_id_list(s, max, ids, n, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_arg_layers(const char *s, int n_layer, int **layers, int *n,
			       struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !layers || !n)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_layers: NULL argument");
	*layers = NULL;
	*n = 0;
	if (n_layer < 1)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_arg_layers: n_layer %d: expected 1 or more", n_layer);
	return ntx_parse_range_list(s, n_layer, layers, n, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}
