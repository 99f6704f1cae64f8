/* api_batch.c - the public API (include/ntx.h) for ntx-run --batch (0.5):
 * request lines of JSON Lines read into a handle (the reader is
 * lib/engine/batchreq.c, so the messages are doc/batch-jsonl.md's), and
 * every active batch request cancelled at once (the scheduler's
 * ntx_sched_cancel_all; the requests' callbacks are api_ctx.c's). */
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "batchreq.h"
#include "chat_json.h"
#include "sampler.h"

/* A parsed line: the reader's result (owning the JSON document its strings
 * live in), the messages as two arrays, the default system message copied
 * (the caller's is read during the parse only), the sampling parameters. */
struct ntx_request_json {
	struct ntx_batch_req req;
	const char **roles, **contents;
	int n_messages;
	char *system;
	struct ntx_gen_params gen;
};

/* ---- request lines ---- */

/* The caller's defaults (both may be NULL) as *g and the reader's *d. */
static enum ntx_status request_defaults(const struct ntx_gen_params *gen,
					const struct ntx_request_json_info *def,
					struct ntx_gen_params *g, struct ntx_batch_req *d,
					struct ntx_error *e)
{
	struct ntx_request_json_info x;
	enum ntx_status s;

	ntx_gen_params_init(g);
	memset(&x, 0, sizeof x);
	x.size = sizeof x;
	if ((s = ntx_api_struct_in(g, sizeof *g, gen, "ntx_gen_params", e)) != NTX_OK ||
	    (s = ntx_api_struct_in(&x, sizeof x, def, "ntx_request_json_info", e)) != NTX_OK)
		return s;
	memset(d, 0, sizeof *d);
	ntx_sampler_defaults(&d->sp);
	d->sp.temp = g->temperature;
	d->sp.top_k = g->top_k;
	d->sp.top_p = g->top_p;
	d->sp.min_p = g->min_p;
	d->sp.repeat_penalty = g->repeat_penalty;
	d->sp.repeat_last_n = g->repeat_last_n;
	d->sp.seed = g->seed;
	d->n_predict = g->n_predict;
	d->chat = x.chat;
	d->system = x.system;
	return NTX_OK;
}

/* "messages" as the roles and contents arrays (borrowed from the
 * document), the system message copied, the request's sampling fields
 * over the defaults in r->gen. */
static enum ntx_status request_fields(struct ntx_request_json *r, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_chat_msg *mm = NULL;
	int n = 0, i;

	r->gen.n_predict = r->req.n_predict;
	r->gen.temperature = r->req.sp.temp;
	r->gen.top_k = r->req.sp.top_k;
	r->gen.top_p = r->req.sp.top_p;
	r->gen.min_p = r->req.sp.min_p;
	r->gen.repeat_penalty = r->req.sp.repeat_penalty;
	r->gen.repeat_last_n = r->req.sp.repeat_last_n;
	r->gen.seed = r->req.sp.seed;
	if (r->req.system && !(r->system = strdup(r->req.system)))
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	if (!r->req.messages)
		return NTX_OK;
	if (ntx_chat_msgs_from_json(r->req.messages, "messages", &mm, &n, &ie))
		return ntx_api_fail(e, &ie); /* the reader has checked them */
	r->roles = malloc((size_t)n * sizeof *r->roles);
	r->contents = malloc((size_t)n * sizeof *r->contents);
	if (!r->roles || !r->contents) {
		free(mm);
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	}
	for (i = 0; i < n; i++) {
		r->roles[i] = mm[i].role;
		r->contents[i] = mm[i].content;
	}
	r->n_messages = n;
	free(mm);
	return NTX_OK;
}

enum ntx_status ntx_request_parse_json(const char *line, size_t len,
				       const struct ntx_gen_params *gen,
				       const struct ntx_request_json_info *def,
				       struct ntx_request_json **out, char **id,
				       struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_batch_req d;
	struct ntx_request_json *r;
	enum ntx_status s;

	if (id)
		*id = NULL;
	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_request_parse_json: out is NULL");
	*out = NULL;
	if (!line && len)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_request_parse_json: line is NULL");
	r = calloc(1, sizeof *r);
	if (!r)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	s = request_defaults(gen, def, &r->gen, &d, e);
	if (!s && ntx_batch_req_parse(line ? line : "", len, &d, &r->req, &ie))
		s = ntx_api_fail(e, &ie);
	/* the id, for the error record too (out of memory: none) */
	if (id && r->req.id)
		*id = json_dumps(r->req.id, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!s && id && r->req.id && !*id)
		s = ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	if (!s)
		s = request_fields(r, e);
	if (s) {
		if (id && s != NTX_STATUS_INVALID) {
			free(*id);
			*id = NULL;
		}
		ntx_request_json_free(r);
		return s;
	}
	*out = r;
	return NTX_OK;
}

enum ntx_status ntx_request_json_info(const struct ntx_request_json *r,
				      struct ntx_request_json_info *info,
				      struct ntx_gen_params *gen, struct ntx_error *e)
{
	struct ntx_request_json_info x;
	enum ntx_status s;

	if (!r)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_request_json_info: r is NULL");
	memset(&x, 0, sizeof x);
	x.size = sizeof x;
	x.prompt = r->req.prompt;
	x.n_messages = r->n_messages;
	x.roles = r->roles;
	x.contents = r->contents;
	x.system = r->system;
	x.chat = r->req.chat;
	s = ntx_api_struct_out(info, &x, sizeof x, "ntx_request_json_info", e);
	if (s || !gen)
		return s;
	return ntx_api_struct_out(gen, &r->gen, sizeof r->gen, "ntx_gen_params", e);
}

void ntx_request_json_free(struct ntx_request_json *r)
{
	if (!r)
		return;
	ntx_batch_req_free(&r->req);
	free(r->roles);
	free(r->contents);
	free(r->system);
	free(r);
}

/* ---- cancelling ---- */

enum ntx_status ntx_ctx_cancel_all(struct ntx_ctx *c, enum ntx_finish finish,
				   struct ntx_error *e)
{
	if (!c)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_cancel_all: ctx is NULL");
	if (finish != NTX_FINISH_STOPPED && finish != NTX_FINISH_INTERRUPTED)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "finish %d: expected NTX_FINISH_STOPPED or NTX_FINISH_INTERRUPTED",
				   (int)finish);
	if (c->sched)
		ntx_sched_cancel_all(c->sched, finish == NTX_FINISH_INTERRUPTED ? NTX_STOP_INTERRUPT
										 : NTX_STOP_CALLER);
	return NTX_OK;
}
