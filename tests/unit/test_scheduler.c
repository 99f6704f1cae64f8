/* test_scheduler.c - the continuous-batching scheduler (lib/engine/scheduler.c):
 * greedy output equals ntx_generate alone, with several requests in flight;
 * prefix reuse evaluates only the rest of a prompt (a prompt that is all
 * cached still evaluates its last token) and gives the same tokens as a run
 * from scratch; cancel, a full set of slots, bad prompts. On the trained
 * tiny model (shared fixtures). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "generate.h"
#include "model.h"
#include "scheduler.h"
#include "t.h"

struct res {
	int done, n_gen, n_reused, n_prompt, n_cb;
	enum ntx_stop stop;
	int32_t gen[64];
};

static int on_tok(void *p, int32_t t)
{
	struct res *r = p;

	r->n_cb++;
	(void)t;
	return 0;
}

static void on_done(void *p, const struct ntx_sched_result *x)
{
	struct res *r = p;

	r->done++;
	r->n_gen = x->n_gen;
	r->n_reused = x->n_reused;
	r->n_prompt = x->n_prompt;
	r->stop = x->stop;
	if (x->n_gen > 0)
		memcpy(r->gen, x->gen, (size_t)(x->n_gen < 64 ? x->n_gen : 64) * sizeof(int32_t));
}

struct cap {
	int32_t tok[64];
	int n;
};

static int cap_tok(void *p, int32_t t)
{
	struct cap *c = p;

	if (c->n < 64)
		c->tok[c->n++] = t;
	return 0;
}

/* Greedy tokens of prompt run alone (ntx_generate, sequence 0). */
static int alone(struct ntx_engine *e, const int32_t *p, int n, int n_gen, struct cap *c)
{
	struct ntx_gen_opts o;
	struct ntx_gen_stats st;
	struct ntx_err err = { 0 };

	memset(&o, 0, sizeof o);
	ntx_sampler_defaults(&o.sp);
	o.sp.temp = 0;
	o.n_predict = n_gen;
	c->n = 0;
	return ntx_generate(e, 0, p, n, &o, cap_tok, c, &st, &err);
}

static int64_t submit(struct ntx_sched *s, const int32_t *p, int n, int n_gen, struct res *r,
		      struct ntx_err *err)
{
	struct ntx_sched_req q;

	memset(&q, 0, sizeof q);
	memset(r, 0, sizeof *r);
	q.tokens = p;
	q.n_tokens = n;
	q.n_predict = n_gen;
	ntx_sampler_defaults(&q.sp);
	q.sp.temp = 0;
	q.on_token = on_tok;
	q.on_done = on_done;
	q.user = r;
	return ntx_sched_submit(s, &q, err);
}

static void run_until(struct ntx_sched *s, const int *done)
{
	struct ntx_err err = { 0 };
	int i;

	for (i = 0; i < 10000 && !*done; i++)
		if (ntx_sched_step(s, &err))
			break;
}

int main(void)
{
	static const int32_t a[] = { 1, 560, 279, 7314, 11, 4072, 1101, 279 };
	static const int32_t b[] = { 1, 578, 2362, 893, 7111, 520 };
	char path[1024];
	struct ntx_err err = { 0 };
	struct ntx_engine_opts eo;
	struct ntx_model *m;
	struct ntx_engine *e, *e1;
	struct ntx_sched *s;
	struct res ra, rb, rc, rd;
	struct cap ca, cb;
	int32_t ext[64];
	int n_ext, i;

	t_ok(ntx_sched_common_prefix(a, 8, a, 5) == 5 && ntx_sched_common_prefix(a, 8, b, 6) == 1 &&
	     ntx_sched_common_prefix(a, 0, b, 6) == 0, "common prefix");
	/* the model the repository ships: no reference set needed */
	snprintf(path, sizeof path, "models/tinymodel-q4_k_m.gguf");
	m = ntx_model_open(path, 0, &err);
	if (!t_ok(m != NULL, "open %s: %s", path, err.msg))
		return t_done();
	memset(&eo, 0, sizeof eo);
	eo.backend = NTX_BACKEND_CPU;
	eo.n_ctx = 256;
	eo.n_threads = 2;
	eo.n_seq = 2;
	e = ntx_engine_new(m, &eo, &err);
	s = e ? ntx_sched_new(e, NULL, &err) : NULL;
	eo.n_seq = 1;
	e1 = ntx_engine_new(m, &eo, &err); /* runs alone, apart from the slots' caches */
	if (!t_ok(e && s && e1, "engine and scheduler with 2 slots: %s", err.msg))
		return t_done();
	t_ok(ntx_sched_n_slots(s) == 2 && ntx_sched_n_free(s) == 2, "2 free slots");

	/* two requests together, each equal to running alone */
	alone(e1, a, 8, 12, &ca);
	alone(e1, b, 6, 9, &cb);
	t_ok(submit(s, a, 8, 12, &ra, &err) >= 0 && submit(s, b, 6, 9, &rb, &err) >= 0,
	     "two requests admitted");
	t_ok(submit(s, a, 8, 1, &rc, &err) < 0 && err.code == NTX_ENOFIT, "a third: no free slot (%s)",
	     err.msg);
	while (!ra.done || !rb.done)
		if (ntx_sched_step(s, &err))
			break;
	t_ok(ra.done == 1 && ra.n_gen == 12 && ra.stop == NTX_STOP_LENGTH &&
	     memcmp(ra.gen, ca.tok, 12 * sizeof(int32_t)) == 0 && ra.n_cb == 12,
	     "request A: 12 tokens, equal to alone, one callback each");
	t_ok(rb.done == 1 && rb.n_gen == 9 && memcmp(rb.gen, cb.tok, 9 * sizeof(int32_t)) == 0,
	     "request B: equal to alone");
	t_ok(ntx_sched_n_active(s) == 0, "both slots free again");

	/* a conversation's next turn: A's prompt + its reply + more */
	memcpy(ext, a, sizeof a);
	memcpy(ext + 8, ra.gen, 12 * sizeof(int32_t));
	ext[20] = 11;
	ext[21] = 323;
	n_ext = 22;
	alone(e1, ext, n_ext, 10, &ca);
	t_ok(submit(s, ext, n_ext, 10, &rc, &err) >= 0, "extended prompt admitted");
	run_until(s, &rc.done);
	/* the slot holds A's 8 prompt tokens and 11 of its 12 generated ones
	 * (the last was sampled, never evaluated) */
	t_ok(rc.n_reused == 19, "prefix reuse: %d of %d prompt tokens reused (want 19)", rc.n_reused,
	     n_ext);
	t_ok(rc.n_gen == 10 && memcmp(rc.gen, ca.tok, 10 * sizeof(int32_t)) == 0,
	     "with reuse the tokens equal a run from scratch");

	/* a prompt all in the cache still evaluates its last token */
	t_ok(submit(s, ext, 15, 6, &rd, &err) >= 0, "a prompt that is a prefix of the cache");
	run_until(s, &rd.done);
	alone(e1, ext, 15, 6, &ca);
	t_ok(rd.n_reused == 14 && rd.n_gen == 6 && memcmp(rd.gen, ca.tok, 6 * sizeof(int32_t)) == 0,
	     "all cached: %d reused (want 14), tokens equal alone", rd.n_reused);

	/* n_predict 0, cancel, bad prompts */
	t_ok(submit(s, b, 6, 0, &rd, &err) >= 0, "n_predict 0 admitted");
	run_until(s, &rd.done);
	t_ok(rd.done == 1 && rd.n_gen == 0 && rd.stop == NTX_STOP_LENGTH, "n_predict 0: the prompt only");
	i = (int)submit(s, a, 8, 50, &rd, &err);
	ntx_sched_step(s, &err);
	ntx_sched_step(s, &err);
	n_ext = ntx_sched_cancel(s, i, NTX_STOP_INTERRUPT);
	t_ok(n_ext == 0 && rd.done == 1 &&
	     rd.stop == NTX_STOP_INTERRUPT && rd.n_gen >= 1 && rd.n_gen < 50 && ntx_sched_n_active(s) == 0,
	     "cancel: on_done with what it has (%d tokens), slot free", rd.n_gen);
	t_ok(ntx_sched_cancel(s, i, NTX_STOP_INTERRUPT) == -1, "cancel of an ended request: -1");
	t_ok(submit(s, a, 0, 5, &rd, &err) < 0 && err.code == NTX_EINVAL, "empty prompt: %s", err.msg);
	{
		int32_t *big = calloc(300, sizeof *big);

		t_ok(big && submit(s, big, 300, 5, &rd, &err) < 0 && strstr(err.msg, "context size 256"),
		     "a prompt longer than the context: %s", err.msg);
		free(big);
	}
	{
		struct ntx_sched_stats st;

		ntx_sched_get_stats(s, &st);
		t_ok(st.n_requests == 6 && st.n_reused >= 33, "stats: %lld requests, %lld reused",
		     (long long)st.n_requests, (long long)st.n_reused);
	}
	ntx_sched_free(s);
	ntx_engine_free(e);
	ntx_engine_free(e1);
	ntx_model_close(m);
	return t_done();
}
