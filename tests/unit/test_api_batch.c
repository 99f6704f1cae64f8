/* test_api_batch - the 0.5 calls of include/ntx.h for ntx-run --batch and
 * --bench on the shipped tiny model: request lines parse over the caller's
 * defaults with the reader's messages and the id kept for the error
 * record; cancelling every request runs each on_done, oldest first, with
 * the finish given; the statistics count the batch's speculative steps;
 * the bench document has its tests, keys and sizes, and refuses what it
 * must. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ntx.h"
#include "t.h"

#define MODEL "models/tinymodel-q4_k_m.gguf"

static const char *msg(enum ntx_status st, const struct ntx_error *e)
{
	return st ? ntx_error_message(e) : "ok";
}

/* ---- request lines ---- */

static enum ntx_status parse(const char *line, struct ntx_request_json **r, char **id,
			     struct ntx_error *e)
{
	struct ntx_gen_params gp;
	struct ntx_request_json_info def;

	ntx_gen_params_init(&gp);
	gp.temperature = 0.5f;
	gp.n_predict = 7;
	gp.ignore_eog = 1;
	memset(&def, 0, sizeof def);
	def.size = sizeof def;
	def.system = "default system";
	return ntx_request_parse_json(line, strlen(line), &gp, &def, r, id, e);
}

/* line is refused with want (a part of the message) and the id text
 * want_id (NULL: none). */
static void bad(const char *line, const char *want, const char *want_id, struct ntx_error *e)
{
	struct ntx_request_json *r = (struct ntx_request_json *)1;
	char *id = (char *)1;
	enum ntx_status st = parse(line, &r, &id, e);

	t_ok(st == NTX_STATUS_INVALID && r == NULL && strstr(ntx_error_message(e), want) &&
		     (want_id ? id && !strcmp(id, want_id) : id == NULL),
	     "%s: '%s', id %s (got %s '%s', id %s)", line, want, want_id ? want_id : "none",
	     ntx_status_name(st), ntx_error_message(e), id ? id : "none");
	ntx_free(id);
}

static void test_parse(struct ntx_error *e)
{
	struct ntx_request_json *r = NULL;
	struct ntx_request_json_info info;
	struct ntx_gen_params gp;
	char *id = NULL;
	enum ntx_status st;

	info.size = sizeof info;
	gp.size = sizeof gp;
	st = parse("{\"prompt\": \"hi\"}", &r, &id, e);
	if (st == NTX_OK)
		st = ntx_request_json_info(r, &info, &gp, e);
	t_ok(st == NTX_OK && id == NULL && !strcmp(info.prompt, "hi") && info.n_messages == 0 &&
		     !info.chat && !strcmp(info.system, "default system") && gp.n_predict == 7 &&
		     gp.temperature == 0.5f && gp.ignore_eog == 1 && gp.top_k == 40,
	     "defaults: %s", msg(st, e));
	ntx_request_json_free(r);
	st = parse("{\"id\": [1, \"a\"], \"prompt\": \"x\", \"n_predict\": 5, \"temp\": 0, "
		   "\"top_k\": 3, \"seed\": 7, \"chat\": true, \"system\": \"s\"}", &r, &id, e);
	if (st == NTX_OK)
		st = ntx_request_json_info(r, &info, &gp, e);
	t_ok(st == NTX_OK && id && !strcmp(id, "[1,\"a\"]") && gp.n_predict == 5 &&
		     gp.temperature == 0 && gp.top_k == 3 && gp.seed == 7 && gp.ignore_eog == 1 &&
		     info.chat && !strcmp(info.system, "s"),
	     "overrides, the id as compact JSON (%s): %s", id ? id : "none", msg(st, e));
	ntx_request_json_free(r);
	ntx_free(id);
	st = parse("{\"id\": \"q\", \"messages\": [{\"role\": \"system\", \"content\": \"A\"}, "
		   "{\"role\": \"user\", \"content\": \"B\"}]}", &r, &id, e);
	if (st == NTX_OK)
		st = ntx_request_json_info(r, &info, NULL, e);
	t_ok(st == NTX_OK && id && !strcmp(id, "\"q\"") && !info.prompt && info.n_messages == 2 &&
		     !strcmp(info.roles[0], "system") && !strcmp(info.contents[0], "A") &&
		     !strcmp(info.roles[1], "user") && !strcmp(info.contents[1], "B") && info.chat,
	     "messages: %d, chat %d: %s", info.n_messages, info.chat, msg(st, e));
	ntx_request_json_free(r);
	ntx_free(id);
	/* the reader's messages; the id whenever the line is an object with one */
	bad("not json", "invalid JSON at column", NULL, e);
	bad("[1]", "a request must be a JSON object", NULL, e);
	bad("{\"id\": 1}", "missing \"prompt\"", "1", e);
	bad("{\"id\": \"q7\", \"prompt\": \"x\", \"top_p\": 2}", "\"top_p\" must be a number in [0, 1]",
	    "\"q7\"", e);
	bad("{\"id\": 1.5, \"prompt\": \"x\", \"n_predict\": 1.5}",
	    "\"n_predict\" must be an integer in [-1, 1073741824]", "1.5", e);
	bad("{\"id\": \"a\\u0000b\", \"prompt\": \"a\\u0000b\"}",
	    "NUL (\\u0000) is not allowed in a prompt", "\"a\\u0000b\"", e);
	bad("{\"id\": {\"k\": null}, \"messages\": []}", "messages", "{\"k\":null}", e);
	/* misuse */
	t_ok(ntx_request_parse_json("{}", 2, NULL, NULL, NULL, NULL, e) == NTX_STATUS_INVALID,
	     "out NULL: '%s'", ntx_error_message(e));
	gp.size = 0;
	t_ok(ntx_request_parse_json("{\"prompt\": \"x\"}", 15, &gp, NULL, &r, NULL, e) ==
			     NTX_STATUS_INVALID && r == NULL &&
		     strstr(ntx_error_message(e), "ntx_gen_params: size 0"),
	     "gen size 0: '%s'", ntx_error_message(e));
	t_ok(ntx_request_parse_json("{\"prompt\": \"x\"}", 15, NULL, NULL, &r, NULL, e) == NTX_OK &&
		     ntx_request_json_info(r, &info, NULL, e) == NTX_OK && !info.system && !info.chat,
	     "no defaults: no chat, no system message");
	info.size = 0;
	t_ok(ntx_request_json_info(r, &info, NULL, e) == NTX_STATUS_INVALID &&
		     ntx_request_json_info(NULL, &info, NULL, e) == NTX_STATUS_INVALID,
	     "info size 0, r NULL: invalid");
	ntx_request_json_free(r);
	ntx_request_json_free(NULL);
}

/* ---- cancelling every request ---- */

struct done {
	int64_t ids[4];
	enum ntx_finish finish[4];
	int n;
};

static void on_done(void *user, int64_t id, const struct ntx_gen_result *r, const int32_t *gen)
{
	struct done *d = user;

	(void)gen;
	if (d->n < 4) {
		d->ids[d->n] = id;
		d->finish[d->n] = r->finish;
	}
	d->n++;
}

static void test_cancel_all(struct ntx_ctx *ctx, const int32_t *ids, int n, struct ntx_error *e)
{
	struct ntx_request rq;
	struct done d;
	int64_t id0 = -1, id1 = -1;
	int n_active = -1;
	enum ntx_status st;

	t_ok(ntx_ctx_cancel_all(ctx, NTX_FINISH_STOPPED, e) == NTX_OK,
	     "cancel_all with no request: nothing to do");
	t_ok(ntx_ctx_cancel_all(NULL, NTX_FINISH_STOPPED, e) == NTX_STATUS_INVALID &&
		     ntx_ctx_cancel_all(ctx, NTX_FINISH_EOG, e) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(e), "finish 1"),
	     "ctx NULL, finish eog: invalid ('%s')", ntx_error_message(e));
	memset(&d, 0, sizeof d);
	ntx_request_init(&rq);
	rq.prompt = ids;
	rq.n_prompt = n;
	rq.on_done = on_done;
	rq.user = &d;
	st = ntx_ctx_submit(ctx, &rq, &id0, e);
	if (st == NTX_OK)
		st = ntx_ctx_submit(ctx, &rq, &id1, e);
	if (st == NTX_OK)
		st = ntx_ctx_step(ctx, &n_active, e);
	if (st == NTX_OK)
		st = ntx_ctx_cancel_all(ctx, NTX_FINISH_INTERRUPTED, e);
	t_ok(st == NTX_OK && d.n == 2 && d.ids[0] == id0 && d.ids[1] == id1 &&
		     d.finish[0] == NTX_FINISH_INTERRUPTED && d.finish[1] == NTX_FINISH_INTERRUPTED,
	     "cancel_all: %d on_done, oldest first, finish interrupted: %s", d.n, msg(st, e));
	st = ntx_ctx_step(ctx, &n_active, e);
	t_ok(st == NTX_OK && n_active == 0, "nothing active after it");
	memset(&d, 0, sizeof d);
	st = ntx_ctx_submit(ctx, &rq, &id0, e);
	if (st == NTX_OK)
		st = ntx_ctx_cancel_all(ctx, NTX_FINISH_STOPPED, e);
	t_ok(st == NTX_OK && d.n == 1 && d.finish[0] == NTX_FINISH_STOPPED,
	     "cancel_all stopped: finish %d", (int)d.finish[0]);
}

/* ---- statistics: the batch's speculative decoding ---- */

static void test_spec_stats(struct ntx_ctx *ctx, const struct ntx_lm *draft, const int32_t *ids,
			    int n, struct ntx_error *e)
{
	struct ntx_spec_params sp;
	struct ntx_gen_params gp;
	struct ntx_request rq;
	struct ntx_ctx_stats cs, cs2;
	int n_active = 1, steps;
	enum ntx_status st;

	cs.size = cs2.size = sizeof cs;
	st = ntx_ctx_stats(ctx, &cs, e);
	t_ok(st == NTX_OK && cs.n_batch_verify_steps == 0 && cs.n_batch_draft_evals == 0 &&
		     cs.t_batch_draft_ms == 0 && cs.bytes_h2d == 0 && cs.bytes_disk == 0 &&
		     cs.bytes_cpu_weights > 0 && cs.t_cpu_ms > 0,
	     "no speculation yet: 0 steps; on the CPU nothing copied or read, %llu weight bytes computed there",
	     (unsigned long long)cs.bytes_cpu_weights);
	ntx_spec_params_init(&sp);
	sp.draft = draft; /* the model drafts for itself: every draft is accepted */
	sp.draft_k = 4;
	ntx_gen_params_init(&gp);
	gp.temperature = 0;
	gp.n_predict = 12;
	ntx_request_init(&rq);
	rq.prompt = ids;
	rq.n_prompt = n;
	rq.gen = &gp;
	st = ntx_ctx_set_spec(ctx, &sp, e);
	if (st == NTX_OK)
		st = ntx_ctx_submit(ctx, &rq, NULL, e);
	for (steps = 0; st == NTX_OK && n_active && steps < 1000; steps++)
		st = ntx_ctx_step(ctx, &n_active, e);
	if (st == NTX_OK)
		st = ntx_ctx_stats(ctx, &cs2, e);
	t_ok(st == NTX_OK && cs2.n_batch_verify_steps > 0 && cs2.n_batch_draft_evals > 0 &&
		     cs2.t_batch_verify_ms > 0 && cs2.t_batch_draft_ms > 0 &&
		     cs2.n_drafted > cs.n_drafted && cs2.n_accepted > cs.n_accepted,
	     "a draft model: %lld verification steps, %lld draft evaluations, %.3f ms verifying: %s",
	     (long long)cs2.n_batch_verify_steps, (long long)cs2.n_batch_draft_evals,
	     cs2.t_batch_verify_ms, msg(st, e));
	/* dropping the scheduler keeps the counts */
	if (st == NTX_OK)
		st = ntx_ctx_set_spec(ctx, NULL, e);
	if (st == NTX_OK)
		st = ntx_ctx_stats(ctx, &cs, e);
	t_ok(st == NTX_OK && cs.n_batch_verify_steps == cs2.n_batch_verify_steps &&
		     cs.t_batch_draft_ms == cs2.t_batch_draft_ms,
	     "the counts outlive the scheduler: %s", msg(st, e));
}

/* ---- bench ---- */

/* The document's tests: names, keys, sizes. */
/* j[key] is the string want. */
static int str_is(const json_t *j, const char *key, const char *want)
{
	const char *s = json_string_value(json_object_get(j, key));

	return s && !strcmp(s, want);
}

static void check_bench(const char *json, int reps, const char *draft)
{
	static const char *keys[] = { "test", "model_filename", "model_size",
				      "weight_bytes_per_token", "backend", "n_threads",
				      "n_prompt", "n_gen", "avg_ts", "stddev_ts", "samples_ts" };
	json_error_t je;
	json_t *a = json_loads(json, 0, &je), *pp, *tg, *v, *pass, *x;
	const char *k;
	void *it;
	size_t i;
	int ok;

	pp = json_array_get(a, 0);
	tg = json_array_get(a, 1);
	v = json_array_get(a, 2);
	ok = json_array_size(a) == 3 && strlen(json) > 1 && json[strlen(json) - 1] == '\n' &&
	     str_is(pp, "test", "pp8") && str_is(tg, "test", "tg4") && str_is(v, "test", "verify");
	for (i = 0, it = json_object_iter(pp); ok && i < sizeof keys / sizeof *keys;
	     i++, it = json_object_iter_next(pp, it))
		ok = it && !strcmp(json_object_iter_key(it), keys[i]);
	ok = ok && json_integer_value(json_object_get(pp, "n_prompt")) == 8 &&
	     json_integer_value(json_object_get(tg, "n_gen")) == 4 &&
	     json_array_size(json_object_get(tg, "samples_ts")) == (size_t)reps &&
	     str_is(pp, "model_filename", MODEL) && str_is(tg, "backend", "cpu") &&
	     json_real_value(json_object_get(tg, "avg_ts")) > 0 &&
	     !json_object_get(tg, "roofline_share"); /* no peak bandwidth on the CPU */
	pass = json_object_get(v, "pass_ms");
	json_object_foreach(pass, k, x)
		ok = ok && json_real_value(x) > 0;
	ok = ok && json_object_size(pass) == 5 && json_object_get(pass, "16") &&
	     json_array_size(json_object_get(v, "projected")) == 4 &&
	     json_is_true(json_object_get(v, "projection")) &&
	     json_integer_value(json_object_get(v, "n_past")) == 64 &&
	     (draft ? str_is(v, "draft_filename", draft) &&
			      json_real_value(json_object_get(v, "draft_ms_per_token")) > 0
		    : json_is_null(json_object_get(v, "draft_filename")) &&
			      json_is_null(json_object_get(v, "draft_ms_per_token")));
	t_ok(ok, "bench document%s: pp8, tg4 (%d samples), verify; keys in order",
	     draft ? " with a draft" : "", reps);
	if (!ok)
		fprintf(stderr, "%s", json);
	json_decref(a);
}

static void test_bench(struct ntx_ctx *ctx, const struct ntx_lm *lm, struct ntx_error *e)
{
	struct ntx_bench_params bp;
	struct ntx_spec_params sp;
	struct ntx_request rq;
	int32_t one = 1;
	char *json = NULL;
	enum ntx_status st;

	ntx_bench_params_init(&bp);
	t_ok(bp.size == sizeof bp && bp.n_prompt == 512 && bp.n_gen == 128 && bp.repetitions == 3,
	     "ntx_bench_params_init: 512, 128, 3");
	bp.n_prompt = 8;
	bp.n_gen = 4;
	bp.repetitions = 2;
	st = ntx_ctx_bench(ctx, &bp, &json, e);
	t_ok(st == NTX_OK && json, "ntx_ctx_bench: %s", msg(st, e));
	if (json)
		check_bench(json, 2, NULL);
	ntx_free(json);
	json = NULL;
	ntx_spec_params_init(&sp);
	sp.draft = lm;
	st = ntx_ctx_set_spec(ctx, &sp, e);
	if (st == NTX_OK)
		st = ntx_ctx_bench(ctx, &bp, &json, e);
	t_ok(st == NTX_OK && json, "ntx_ctx_bench with a draft: %s", msg(st, e));
	if (json)
		check_bench(json, 2, MODEL);
	ntx_free(json);
	json = (char *)1;
	bp.repetitions = 0;
	t_ok(ntx_ctx_bench(ctx, &bp, &json, e) == NTX_STATUS_INVALID && json == NULL &&
		     strstr(ntx_error_message(e), "repetitions 0"),
	     "repetitions 0: '%s'", ntx_error_message(e));
	bp.repetitions = 1;
	bp.n_gen = -1;
	t_ok(ntx_ctx_bench(ctx, &bp, &json, e) == NTX_STATUS_INVALID, "n_gen -1: '%s'",
	     ntx_error_message(e));
	bp.n_gen = 4;
	t_ok(ntx_ctx_bench(NULL, &bp, &json, e) == NTX_STATUS_INVALID &&
		     ntx_ctx_bench(ctx, &bp, NULL, e) == NTX_STATUS_INVALID,
	     "ctx NULL, json NULL: invalid");
	ntx_request_init(&rq);
	rq.prompt = &one;
	rq.n_prompt = 1;
	st = ntx_ctx_submit(ctx, &rq, NULL, e);
	t_ok(st == NTX_OK && ntx_ctx_bench(ctx, &bp, &json, e) == NTX_STATUS_BUSY,
	     "bench while a request is active: busy ('%s')", ntx_error_message(e));
	ntx_ctx_cancel_all(ctx, NTX_FINISH_STOPPED, NULL);
	ntx_ctx_interrupt(ctx);
	st = ntx_ctx_bench(ctx, &bp, &json, e);
	t_ok(st == NTX_STATUS_INTERRUPTED && json == NULL, "an interrupt stops it: %s",
	     ntx_status_name(st));
	st = ntx_ctx_bench(ctx, &bp, &json, e);
	t_ok(st == NTX_OK, "and is cleared: %s", msg(st, e));
	ntx_free(json);
}

/* A context of n_ctx 64 is too small for the verification curve. */
static void test_bench_small(const struct ntx_lm *lm, struct ntx_error *e)
{
	struct ntx_ctx_params cp;
	struct ntx_ctx *ctx = NULL;
	struct ntx_bench_params bp;
	char *json = NULL;
	enum ntx_status st;

	ntx_ctx_params_init(&cp);
	cp.backend = NTX_USE_CPU;
	cp.n_ctx = 64;
	cp.n_threads = 2;
	ntx_bench_params_init(&bp);
	bp.n_prompt = 8;
	bp.n_gen = 0;
	bp.repetitions = 1;
	st = ntx_ctx_new(lm, NULL, &cp, &ctx, e);
	if (st == NTX_OK)
		st = ntx_ctx_bench(ctx, &bp, &json, e);
	t_ok(st == NTX_STATUS_INVALID && json == NULL &&
		     !strcmp(ntx_error_message(e), "the verification curve needs a context of 80 (-c)"),
	     "n_ctx 64: '%s'", ntx_error_message(e));
	ntx_ctx_free(ctx);
}

int main(void)
{
	struct ntx_error *e = ntx_error_new();
	struct ntx_lm *lm = NULL;
	struct ntx_ctx *ctx = NULL;
	struct ntx_ctx_params cp;
	int32_t ids[64];
	int n = 0;
	enum ntx_status st;

	test_parse(e);
	st = ntx_lm_open(MODEL, &lm, e);
	if (st == NTX_OK)
		st = ntx_lm_tokenize(lm, "Once upon a time", 16, NTX_TOKENIZE_ADD_BOS, ids, 64, &n, e);
	ntx_ctx_params_init(&cp);
	cp.backend = NTX_USE_CPU;
	cp.n_ctx = 128;
	cp.n_seq = 2;
	cp.n_threads = 2;
	if (st == NTX_OK)
		st = ntx_ctx_new(lm, NULL, &cp, &ctx, e);
	if (!t_ok(st == NTX_OK, "open %s, a context: %s", MODEL, msg(st, e))) {
		ntx_lm_close(lm);
		ntx_error_free(e);
		return t_done();
	}
	test_cancel_all(ctx, ids, n, e);
	test_spec_stats(ctx, lm, ids, n, e);
	test_bench(ctx, lm, e);
	test_bench_small(lm, e);
	ntx_ctx_free(ctx);
	ntx_lm_close(lm);
	ntx_error_free(e);
	return t_done();
}
