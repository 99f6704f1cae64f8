/* test_spec.c - speculative decoding with a draft model and prompt lookup:
 *   - the pure parts: n-gram lookup, expected tokens, the choice of K;
 *   - the vocabulary check (the trained pair passes, other vocabularies are
 *     refused with the first difference named);
 *   - greedy output with a draft model, with lookup and with both equals
 *     plain decoding, for fixed K (1, 3, 8) and adaptive K, with a
 *     repetition penalty too, on the trained tiny pair and on stories260K
 *     with an unrelated draft (nothing accepted);
 *   - sampling: the distribution of the 2nd and 3rd generated tokens is
 *     unchanged (two-sample chi-square, p >= 0.001 as test_selfspec), with a
 *     draft model and with lookup drafts (one-hot q). Seeds are fixed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "generate.h"
#include "model.h"
#include "scheduler.h"
#include "spec.h"
#include "chi2.h"
#include "t.h"
#include "tokenizer.h"

/* ---- pure parts ---- */

static void lookup_cases(void)
{
	static const int32_t h1[] = { 5, 6, 7, 8, 9, 5, 6, 7 };
	static const int32_t h2[] = { 1, 2, 3, 9, 2, 3, 4, 2, 3 };
	static const int32_t h3[] = { 1, 2, 3, 4 };
	int32_t out[8];
	int n;

	n = ntx_spec_lookup(h1, 8, 3, 4, out);
	t_ok(n == 4 && out[0] == 8 && out[1] == 9 && out[2] == 5 && out[3] == 6,
	     "lookup: '5 6 7' again drafts what followed it (%d)", n);
	n = ntx_spec_lookup(h1, 8, 3, 1, out);
	t_ok(n == 1 && out[0] == 8, "lookup: at most k_max tokens");
	/* "2 3" occurs twice before the tail: the most recent match wins */
	n = ntx_spec_lookup(h2, 9, 2, 4, out);
	t_ok(n == 3 && out[0] == 4 && out[1] == 2 && out[2] == 3,
	     "lookup: the most recent match (%d: %d)", n,
	     n ? out[0] : -1);
	n = ntx_spec_lookup(h3, 4, 3, 4, out);
	t_ok(n == 0, "lookup: no match, no draft");
	n = ntx_spec_lookup(h1, 1, 3, 4, out);
	t_ok(n == 0, "lookup: a one-token history has nothing to match");
	n = ntx_spec_lookup(h1, 8, 3, 0, out);
	t_ok(n == 0, "lookup: k_max 0 drafts nothing");
}

static void tuner_cases(void)
{
	struct ntx_spec_tuner t;
	int i, k;

	t_ok(fabs(ntx_spec_expected_tokens(0.5, 3) - 1.875) < 1e-12 &&
		     ntx_spec_expected_tokens(1.0, 4) == 5 && ntx_spec_expected_tokens(0, 7) == 1,
	     "expected tokens: (1 - a^(K+1)) / (1 - a)");
	ntx_spec_tuner_init(&t, 16, 4);
	t_ok(ntx_spec_tuner_pick(&t, 1) == 4, "tuner: K starts at its initial value");
	/* a PCIe-bound target: a pass costs the same for 1..17 tokens, the
	 * draft 1% of a pass, acceptance 0.8: long drafts pay */
	for (i = 0; i < 20; i++) {
		ntx_spec_tuner_observe(&t, 4, 3, 4 * 0.001, 0.1, 1);
		ntx_spec_tuner_observe(&t, 8, 7, 8 * 0.001, 0.1, 1);
	}
	k = ntx_spec_tuner_pick(&t, 1);
	t_ok(k >= 12, "tuner: flat pass cost, cheap draft, acceptance ~0.8: K = %d >= 12", k);
	/* a CPU-bound target: a pass of n tokens costs n, acceptance ~0.3 */
	ntx_spec_tuner_init(&t, 16, 4);
	for (i = 0; i < 30; i++) {
		ntx_spec_tuner_observe(&t, 4, i % 3 == 0, 4 * 0.05, 0.5, 1);
		ntx_spec_tuner_observe(&t, 2, i % 2, 2 * 0.05, 0.3, 1);
		ntx_spec_tuner_observe_pass(&t, 1, 0.1);
	}
	k = ntx_spec_best_k(&t, ntx_spec_tuner_acceptance(&t), t.t_draft, NULL);
	t_ok(k >= 1 && k <= 2, "tuner: pass cost grows per token, acceptance ~0.3: K = %d in [1, 2]", k);
	t_ok(ntx_spec_tuner_pick(&t, 1) == 0 && t.off,
	     "tuner: there drafting does not pay (10 tok/s plain): paused, K 0");
	t_ok(fabs(ntx_spec_tuner_pass_cost(&t, 4) - (0.3 + 0.5) / 2) < 0.05,
	     "tuner: an unseen width is interpolated (%.3f)", ntx_spec_tuner_pass_cost(&t, 4));
}

/* ---- pausing: simulated runs on recorded costs ----
 *
 * A decoding loop as generate.c runs it, with synthetic costs (ms): the
 * target's pass of n tokens, piecewise linear through pass(1), pass(5) and
 * pass(8) (the last slope beyond), with a +-3% jitter; the draft model's
 * evaluation d, a catch-up of m tokens in one evaluation d * (1 + (m - 1)
 * / 16). Each draft is accepted with probability acc(step) when the ones
 * before it were. The tuner sees what generate.c shows it: after a catch-up
 * of more than two tokens, k times the mean of the single-token evaluations
 * after it (0 with none). */

struct costs {
	const char *name;
	double p1, p5, p8, d;
};

/* a 70B Q4_K_M streamed at --vram-budget 24G, a 1B draft */
static const struct costs streamed70 = { "streamed 70B", 232.7, 240.0, 281.6, 3.0 };
/* a resident 8B, a 1B draft */
static const struct costs resident8 = { "resident 8B", 2.1, 2.1 + 4 * 0.9 / 7, 3.0, 0.4 };

static double sim_pass(const struct costs *c, int n)
{
	if (n <= 5)
		return c->p1 + (c->p5 - c->p1) * (n - 1) / 4.0;
	return c->p5 + (c->p8 - c->p5) * (n - 5) / 3.0;
}

static uint64_t sim_rng = 88172645463325252ull;

static double sim_uniform(void)
{
	sim_rng ^= sim_rng << 13;
	sim_rng ^= sim_rng >> 7;
	sim_rng ^= sim_rng << 17;
	return (double)(sim_rng >> 11) / 9007199254740992.0;
}

static double jitter(double x)
{
	return x * (0.97 + 0.06 * sim_uniform());
}

struct sim {
	int steps, draft_steps, paused, probes;
	int64_t tokens, drafted;
	double t, t_plain;   /* ms: the run's, plain decoding's for its tokens */
	double k_sum;        /* of the K drafted */
	int first_accept;    /* the first step from `from` on with a draft accepted (-1) */
};

/* n steps with acceptance a0 before step `from`, a1 from it on; the tuner t
 * carries over when the caller runs several. */
static void simulate(struct ntx_spec_tuner *t, const struct costs *c, int n, double a0,
		     double a1, int from, struct sim *r)
{
	int i, lag = 32; /* the prompt: the draft's first evaluation catches up */

	memset(r, 0, sizeof *r);
	r->first_accept = -1;
	for (i = 0; i < n; i++) {
		double a = i < from ? a0 : a1, drafting, singles, pass;
		int k = ntx_spec_tuner_pick(t, 1), n_acc = 0;

		r->steps++;
		if (k == 0) {
			pass = jitter(c->p1);
			ntx_spec_tuner_skipped(t);
			ntx_spec_tuner_observe_pass(t, 1, pass * 1e-3);
			r->t += pass;
			r->t_plain += c->p1;
			r->tokens++;
			r->paused++;
			lag++;
			continue;
		}
		if (t->off)
			r->probes++;
		singles = (k - 1) * jitter(c->d);
		drafting = jitter(c->d * (1 + (lag - 1) / 16.0)) + singles;
		pass = jitter(sim_pass(c, k + 1));
		while (n_acc < k && sim_uniform() < a)
			n_acc++;
		ntx_spec_tuner_observe(t, k, n_acc,
				       (lag <= 2 ? drafting : k > 1 ? k * singles / (k - 1) : 0) * 1e-3,
				       pass * 1e-3, 1);
		r->t += drafting + pass;
		r->t_plain += c->p1 * (n_acc + 1);
		r->tokens += n_acc + 1;
		r->drafted += k;
		r->k_sum += k;
		r->draft_steps++;
		if (n_acc > 0 && i >= from && r->first_accept < 0)
			r->first_accept = i;
		lag = n_acc == k ? 2 : 1;
	}
}

static void pause_cases(const struct costs *c)
{
	struct ntx_spec_tuner t;
	struct sim r;
	double waste;
	int resumed;

	/* acceptance 0: drafting pauses, probes back off, the waste is bounded */
	ntx_spec_tuner_init(&t, NTX_SPEC_KMAX_ADAPTIVE, 4);
	simulate(&t, c, 1000, 0, 0, 0, &r);
	waste = (r.t - r.t_plain) / r.t_plain;
	t_ok(r.draft_steps <= 50 && waste <= 0.05,
	     "pause, %s, acceptance 0: %d of 1000 steps drafted (<= 50: %d probes), %.2f%% of the time lost (<= 5%%)",
	     c->name, r.draft_steps, r.probes, 100 * waste);
	/* the same on a run of 128 tokens, the device's measure */
	ntx_spec_tuner_init(&t, NTX_SPEC_KMAX_ADAPTIVE, 4);
	simulate(&t, c, 128, 0, 0, 0, &r);
	waste = (r.t - r.t_plain) / r.t_plain;
	t_ok(waste <= 0.05, "pause, %s, acceptance 0, 128 steps: %d drafted, %.2f%% lost (<= 5%%)",
	     c->name, r.draft_steps, 100 * waste);
	/* without pausing (NTX_SPEC_BACKOFF=0) every step drafts */
	ntx_spec_tuner_init(&t, NTX_SPEC_KMAX_ADAPTIVE, 4);
	t.pause = 0;
	simulate(&t, c, 200, 0, 0, 0, &r);
	t_ok(r.draft_steps == 200 && r.paused == 0,
	     "pause, %s, acceptance 0, pausing off: every step drafts (%d of 200), %.2f%% lost",
	     c->name, r.draft_steps, 100 * (r.t - r.t_plain) / r.t_plain);

	/* acceptance 0.8: drafting goes on with a sensible K */
	ntx_spec_tuner_init(&t, NTX_SPEC_KMAX_ADAPTIVE, 4);
	simulate(&t, c, 1000, 0.8, 0.8, 0, &r);
	t_ok(r.paused <= 20 && r.k_sum / r.draft_steps >= 2 && r.k_sum / r.draft_steps <= 10 &&
		     r.t_plain / r.t > 1.4,
	     "pause, %s, acceptance 0.8: %d plain steps of %d (<= 20), mean K %.2f in [2, 10], %.2fx plain (> 1.4)",
	     c->name, r.paused, r.steps, r.k_sum / r.draft_steps, r.t_plain / r.t);

	/* acceptance 0 for 200 steps, then 0.9: drafting resumes within a
	 * wait of NTX_SPEC_BACKOFF_MAX and two probes */
	ntx_spec_tuner_init(&t, NTX_SPEC_KMAX_ADAPTIVE, 4);
	simulate(&t, c, 600, 0, 0.9, 200, &r);
	resumed = r.first_accept - 200;
	t_ok(r.first_accept >= 200 && resumed <= 2 * (NTX_SPEC_BACKOFF_MAX + 1) && !t.off,
	     "pause, %s, acceptance 0 then 0.9: the first draft accepted %d steps after the change (<= %d), drafting on at the end",
	     c->name, resumed, 2 * (NTX_SPEC_BACKOFF_MAX + 1));
	{
		/* and from there on it drafts as if acceptance had been 0.9 */
		struct sim r2;

		simulate(&t, c, 300, 0.9, 0.9, 0, &r2);
		t_ok(r2.paused <= 8 && r2.t_plain / r2.t > 1.4,
		     "pause, %s, after the change: %d plain steps of 300, %.2fx plain", c->name,
		     r2.paused, r2.t_plain / r2.t);
		/* acceptance falls to 0 after that: the credit drains and
		 * drafting pauses again, losing as little as from the start */
		simulate(&t, c, 1000, 0, 0, 0, &r2);
		waste = (r2.t - r2.t_plain) / r2.t_plain;
		t_ok(r2.draft_steps <= 60 && waste <= 0.05,
		     "pause, %s, then acceptance 0: %d of 1000 steps drafted (<= 60), %.2f%% lost (<= 5%%)",
		     c->name, r2.draft_steps, 100 * waste);
	}
}

/* The state machine step by step: a single unlucky step does not pause, a
 * run of them does; the waits double to the cap; a probe that pays resumes. */
static void pause_steps(void)
{
	struct ntx_spec_tuner t;
	int i, k, waits[6], w;

	ntx_spec_tuner_init(&t, 16, 4);
	ntx_spec_tuner_observe_pass(&t, 1, 2.1e-3);
	/* resident-8B-like: two good steps, then one with nothing accepted */
	ntx_spec_tuner_observe(&t, 4, 4, 1.6e-3, 2.6e-3, 1);
	ntx_spec_tuner_observe(&t, 4, 3, 1.6e-3, 2.6e-3, 1);
	ntx_spec_tuner_observe(&t, 4, 0, 1.6e-3, 2.6e-3, 1);
	k = ntx_spec_tuner_pick(&t, 1);
	t_ok(k >= 1 && !t.off, "pause: one step with nothing accepted does not pause (K %d, credit %.2f)",
	     k, t.credit);
	/* the first step of all rejected: the starting credit holds too */
	ntx_spec_tuner_init(&t, 16, 4);
	ntx_spec_tuner_observe_pass(&t, 1, 2.1e-3);
	ntx_spec_tuner_observe(&t, 4, 0, 1.6e-3, 2.6e-3, 1);
	t_ok(ntx_spec_tuner_pick(&t, 1) >= 1, "pause: a first step with nothing accepted does not pause");
	for (i = 0; i < 10 && !t.off; i++)
		ntx_spec_tuner_observe(&t, ntx_spec_tuner_pick(&t, 1), 0, 0.4e-3, 2.3e-3, 1);
	t_ok(t.off && i <= 6, "pause: steps with nothing accepted pause drafting after %d more", i);
	/* waits of 8, 16, 32, 64, 64 plain steps between failed probes */
	for (w = 0; w < 6; w++) {
		for (waits[w] = 0; (k = ntx_spec_tuner_pick(&t, 1)) == 0 && waits[w] < 1000; waits[w]++) {
			ntx_spec_tuner_skipped(&t);
			ntx_spec_tuner_observe_pass(&t, 1, 2.1e-3);
		}
		if (k != NTX_SPEC_PROBE_K)
			break;
		if (w < 5)
			ntx_spec_tuner_observe(&t, k, 0, 0.4e-3, 2.3e-3, 1);
	}
	t_ok(w == 6 && waits[0] == 8 && waits[1] == 16 && waits[2] == 32 && waits[3] == 64 &&
		     waits[4] == 64 && waits[5] == 64,
	     "pause: probes of K %d after waits of %d, %d, %d, %d, %d, %d plain steps", NTX_SPEC_PROBE_K,
	     waits[0], waits[1], waits[2], waits[3], waits[4], waits[5]);
	t_ok(t.n_paused == 8 + 16 + 32 + 64 + 64 + 64 && t.n_probes == 5,
	     "pause: %lld paused steps, %lld probes counted", (long long)t.n_paused,
	     (long long)t.n_probes);
	/* the sixth probe's draft is accepted and the step beats a plain one */
	ntx_spec_tuner_observe(&t, 1, 1, 0.4e-3, 2.3e-3, 1);
	k = ntx_spec_tuner_pick(&t, 1);
	t_ok(!t.off && k >= 1 && t.backoff == NTX_SPEC_BACKOFF_MIN && t.credit == NTX_SPEC_CREDIT,
	     "pause: a probe that pays resumes drafting (K %d), the wait back to %d", k, t.backoff);
	/* an accepted draft that still loses to a plain step does not resume:
	 * a draft model slower than the target */
	ntx_spec_tuner_init(&t, 16, 1);
	ntx_spec_tuner_observe_pass(&t, 1, 1e-3);
	for (i = 0; i < 20 && !t.off; i++)
		ntx_spec_tuner_observe(&t, 1, 1, 3e-3, 1.1e-3, 1);
	t_ok(t.off, "pause: a draft that costs more than it yields pauses at acceptance 1 (%d steps)", i);
	for (i = 0; i < 8; i++)
		ntx_spec_tuner_skipped(&t);
	ntx_spec_tuner_observe(&t, ntx_spec_tuner_pick(&t, 1), 1, 3e-3, 1.1e-3, 1);
	t_ok(t.off && t.wait == 16, "pause: its accepted probe does not pay (wait %d)", t.wait);
	/* lookup drafts are free: a lookup tuner pauses only where the wider
	 * pass costs (a CPU-bound target) */
	ntx_spec_tuner_init(&t, 16, 4);
	ntx_spec_tuner_observe_pass(&t, 1, 1e-3);
	for (i = 0; i < 50 && !t.off; i++)
		ntx_spec_tuner_observe(&t, 4, 0, 0, 1.0e-3, 0);
	t_ok(!t.off, "pause: lookup at acceptance 0 with a flat pass cost drafts on");
	for (i = 0; i < 50 && !t.off; i++)
		ntx_spec_tuner_observe(&t, ntx_spec_tuner_pick(&t, 0), 0, 0, 2.0e-3, 0);
	t_ok(t.off, "pause: lookup at acceptance 0 with a pass of 5 at twice a pass of 1 pauses (%d steps)",
	     i);
}

/* ---- engines ---- */

struct cap {
	int32_t tok[96];
	int n;
};

static int on_tok(void *p, int32_t t)
{
	struct cap *c = p;

	if (c->n < 96)
		c->tok[c->n++] = t;
	return 0;
}

struct src {
	struct ntx_engine *draft;
	int lookup, k; /* k 0: adaptive */
};

static int gen(struct ntx_engine *e, const int32_t *prompt, int np, int n, float temp,
	       float penalty, uint64_t seed, const struct src *s, struct cap *c,
	       struct ntx_gen_stats *st)
{
	struct ntx_gen_opts o;
	struct ntx_gen_stats st0;
	struct ntx_err err;

	memset(&o, 0, sizeof o);
	ntx_sampler_defaults(&o.sp);
	o.sp.temp = temp;
	o.sp.seed = seed;
	o.sp.top_k = 12;
	o.sp.top_p = 1.0f;
	o.sp.min_p = 0;
	o.sp.repeat_penalty = penalty;
	o.n_predict = n;
	if (s) {
		o.draft = s->draft;
		o.lookup = s->lookup;
		o.draft_k = s->k ? s->k : 4;
		o.adaptive_k = s->k == 0;
	}
	c->n = 0;
	if (ntx_generate(e, 0, prompt, np, &o, on_tok, c, st ? st : &st0, &err)) {
		t_diag("generate: %s", err.msg);
		return -1;
	}
	return 0;
}

/* backoff: NTX_SPEC_BACKOFF for the engine (-1: from the environment) */
static struct ntx_engine *open_engine_n(const char *rel, struct ntx_model **m, int n_seq,
					int backoff)
{
	char path[512];
	struct ntx_err err;
	struct ntx_engine_opts eo;
	struct ntx_tunables tun;

	snprintf(path, sizeof path, "%s/%s", t_fixtures(), rel);
	*m = ntx_model_open(path, 0, &err);
	if (!*m)
		return NULL;
	memset(&eo, 0, sizeof eo);
	eo.backend = NTX_BACKEND_CPU;
	eo.n_ctx = 256;
	eo.n_threads = 2;
	eo.n_seq = n_seq;
	if (backoff >= 0) {
		ntx_tunables_from_env(&tun);
		tun.spec_backoff = backoff;
		eo.tunables = &tun;
	}
	return ntx_engine_new(*m, &eo, &err);
}

static struct ntx_engine *open_engine(const char *rel, struct ntx_model **m,
				      struct ntx_vocab **v)
{
	char path[512];
	struct ntx_err err;
	struct ntx_engine_opts eo;

	snprintf(path, sizeof path, "%s/%s", t_fixtures(), rel);
	*m = ntx_model_open(path, 0, &err);
	if (!*m)
		return NULL;
	if (v)
		*v = ntx_vocab_load((*m)->gguf, &err);
	memset(&eo, 0, sizeof eo);
	eo.backend = NTX_BACKEND_CPU;
	eo.n_ctx = 256;
	eo.n_threads = 2;
	return ntx_engine_new(*m, &eo, &err);
}

static void vocab_cases(void)
{
	static const char *same[] = { "tinymodel/tinymodel-q4_k_m.gguf", "tinymodel/tinydraft-f16.gguf" };
	static const char *other[] = { "vocab/ggml-vocab-llama3.gguf", "models/stories260K.gguf" };
	struct ntx_model *m[4] = { 0 };
	struct ntx_vocab *v[4] = { 0 };
	struct ntx_err err;
	char path[512];
	int i;

	for (i = 0; i < 4; i++) {
		snprintf(path, sizeof path, "%s/%s", t_fixtures(), i < 2 ? same[i] : other[i - 2]);
		m[i] = ntx_model_open(path, NTX_MODEL_VOCAB_ONLY, &err);
		v[i] = m[i] ? ntx_vocab_load(m[i]->gguf, &err) : NULL;
	}
	if (t_ok(v[0] && v[1] && v[2] && v[3], "vocab: four vocabularies load")) {
		t_ok(ntx_spec_check_vocab(v[0], v[1], &err) == 0,
		     "vocab: the trained draft shares the tiny model's vocabulary");
		t_ok(ntx_spec_check_vocab(v[0], v[2], &err) == -1 && strstr(err.msg, "tokens"),
		     "vocab: a vocabulary of another size is refused (%s)", err.msg);
		t_ok(ntx_spec_check_vocab(v[0], v[3], &err) == -1 && strstr(err.msg, "SPM"),
		     "vocab: an SPM vocabulary cannot draft for a BPE one (%s)", err.msg);
		t_ok(ntx_spec_check_vocab(v[0], v[0], &err) == 0, "vocab: a vocabulary drafts for itself");
	}
	for (i = 0; i < 4; i++) {
		ntx_vocab_free(v[i]);
		ntx_model_close(m[i]);
	}
}

static void greedy_pair(const char *target, const char *draft, const int32_t *prompt, int np,
			const char *what)
{
	struct ntx_model *mt, *md;
	struct ntx_engine *et = open_engine(target, &mt, NULL), *ed = open_engine(draft, &md, NULL);
	static const int ks[] = { 1, 3, 8, 0 };
	struct cap ref, c;
	struct ntx_gen_stats st;
	int i, n = 80, same;
	int64_t acc = 0;

	if (!t_ok(et && ed, "%s: engines", what))
		goto out;
	if (gen(et, prompt, np, n, 0, 1.0f, 1, NULL, &ref, NULL) || ref.n != n) {
		t_ok(0, "%s: plain decoding", what);
		goto out;
	}
	for (i = 0; i < 4; i++) {
		struct src s = { ed, 0, ks[i] };

		same = gen(et, prompt, np, n, 0, 1.0f, 1, &s, &c, &st) == 0 && c.n == n &&
		       !memcmp(ref.tok, c.tok, (size_t)n * sizeof(int32_t));
		acc += st.n_accepted;
		t_ok(same, "%s: greedy with the draft model (k %s%d) equals plain decoding (%lld of %lld accepted)",
		     what, ks[i] ? "" : "adaptive from ", ks[i] ? ks[i] : 4,
		     (long long)st.n_accepted, (long long)st.n_drafted);
	}
	{
		struct src s = { NULL, 3, 0 }, s2 = { ed, 2, 0 }, s3 = { NULL, 1, 5 };

		t_ok(gen(et, prompt, np, n, 0, 1.0f, 1, &s, &c, &st) == 0 && c.n == n &&
			     !memcmp(ref.tok, c.tok, (size_t)n * sizeof(int32_t)),
		     "%s: greedy with --lookup 3 equals plain decoding (%lld of %lld accepted)", what,
		     (long long)st.n_accepted, (long long)st.n_drafted);
		t_ok(gen(et, prompt, np, n, 0, 1.0f, 1, &s2, &c, &st) == 0 && c.n == n &&
			     !memcmp(ref.tok, c.tok, (size_t)n * sizeof(int32_t)),
		     "%s: greedy with lookup and the draft model equals plain decoding (lookup %lld, all %lld drafted)",
		     what, (long long)st.n_lookup_drafted, (long long)st.n_drafted);
		t_ok(gen(et, prompt, np, n, 0, 1.0f, 1, &s3, &c, &st) == 0 && c.n == n &&
			     !memcmp(ref.tok, c.tok, (size_t)n * sizeof(int32_t)),
		     "%s: greedy with --lookup 1 --draft-k 5 equals plain decoding", what);
	}
	{
		struct src s = { ed, 2, 4 };
		struct cap pref;

		same = gen(et, prompt, np, 64, 0, 1.3f, 1, NULL, &pref, NULL) == 0 &&
		       gen(et, prompt, np, 64, 0, 1.3f, 1, &s, &c, NULL) == 0 && c.n == 64 &&
		       !memcmp(pref.tok, c.tok, 64 * sizeof(int32_t));
		t_ok(same, "%s: greedy with --repeat-penalty 1.3, draft and lookup equals plain decoding",
		     what);
	}
	t_diag("%s: %lld drafts accepted over the four draft lengths", what, (long long)acc);
out:
	ntx_engine_free(et);
	ntx_engine_free(ed);
	ntx_model_close(mt);
	ntx_model_close(md);
}

/* ---- pausing end to end ----
 *
 * stories260K with an unrelated draft: nothing is ever accepted and a pass of
 * K + 1 tokens costs more than one on the CPU, so the adaptive K pauses
 * drafting; greedy output stays that of plain decoding, with the draft model
 * catching up after each pause. NTX_SPEC_BACKOFF=0 drafts at every step. */

struct sched_out {
	int32_t tok[4][96];
	int n[4];
};

static void on_sched_greedy(void *user, const struct ntx_sched_result *r)
{
	struct sched_out *o = user;
	int i;

	for (i = 0; i < 4 && o->n[i] >= 0; i++)
		;
	if (i < 4) {
		o->n[i] = r->n_gen < 96 ? r->n_gen : 96;
		memcpy(o->tok[i], r->gen, (size_t)o->n[i] * sizeof(int32_t));
	}
}

static void pause_e2e(void)
{
	static const int32_t prompt[] = { 1, 403, 407, 261 };
	struct ntx_model *mt, *md, *mt0;
	struct ntx_engine *et = open_engine_n("models/stories260K.gguf", &mt, 4, 1);
	struct ntx_engine *ed = open_engine_n("models/ref-a-q4_0.gguf", &md, 4, 1);
	struct ntx_engine *et0 = open_engine_n("models/stories260K.gguf", &mt0, 1, 0);
	struct src s = { ed, 0, 0 }, l = { NULL, 2, 0 };
	struct cap ref, c;
	struct ntx_gen_stats st;
	struct ntx_sched *sc = NULL;
	struct ntx_sched_stats ss;
	struct sched_out so;
	struct ntx_err err;
	int n = 90, i, sub, same;

	if (!t_ok(et && ed && et0, "pause e2e: engines"))
		goto out;
	if (gen(et, prompt, 4, n, 0, 1.0f, 1, NULL, &ref, NULL) || ref.n != n) {
		t_ok(0, "pause e2e: plain decoding");
		goto out;
	}
	same = gen(et, prompt, 4, n, 0, 1.0f, 1, &s, &c, &st) == 0 && c.n == n &&
	       !memcmp(ref.tok, c.tok, (size_t)n * sizeof(int32_t));
	t_ok(same && st.n_accepted == 0 && st.n_paused > 0 &&
		     st.n_full_passes - st.n_paused < n / 2,
	     "pause e2e: unrelated draft, adaptive K: greedy equals plain; %lld of %lld steps paused, %lld drafted",
	     (long long)st.n_paused, (long long)st.n_full_passes, (long long)st.n_drafted);
	same = gen(et0, prompt, 4, n, 0, 1.0f, 1, &s, &c, &st) == 0 && c.n == n &&
	       !memcmp(ref.tok, c.tok, (size_t)n * sizeof(int32_t));
	t_ok(same && st.n_paused == 0 && st.n_drafted >= n - 1,
	     "pause e2e: NTX_SPEC_BACKOFF=0: every step drafts (%lld drafted, %lld paused), greedy equals plain",
	     (long long)st.n_drafted, (long long)st.n_paused);
	/* lookup on text that does not repeat its drafts: the same output */
	same = gen(et, prompt, 4, n, 0, 1.0f, 1, &l, &c, &st) == 0 && c.n == n &&
	       !memcmp(ref.tok, c.tok, (size_t)n * sizeof(int32_t));
	t_ok(same, "pause e2e: adaptive lookup: greedy equals plain (%lld drafted, %lld accepted, %lld paused)",
	     (long long)st.n_drafted, (long long)st.n_accepted, (long long)st.n_paused);

	/* the batch scheduler: four greedy requests at once */
	sc = ntx_sched_new(et, NULL, &err);
	if (!t_ok(sc && ntx_sched_set_spec(sc, ed, 0, 4, 1, &err) == 0,
		  "pause e2e: scheduler with the unrelated draft, adaptive K"))
		goto out;
	memset(&so, 0, sizeof so);
	for (i = 0; i < 4; i++)
		so.n[i] = -1;
	for (sub = 0; sub < 4; sub++) {
		struct ntx_sched_req r;

		memset(&r, 0, sizeof r);
		r.tokens = prompt;
		r.n_tokens = 4;
		r.n_predict = n;
		ntx_sampler_defaults(&r.sp);
		r.sp.temp = 0;
		r.sp.top_k = 12;
		r.sp.top_p = 1.0f;
		r.sp.min_p = 0;
		r.on_done = on_sched_greedy;
		r.user = &so;
		if (ntx_sched_submit(sc, &r, &err) < 0)
			break;
	}
	while (ntx_sched_n_active(sc) > 0)
		if (ntx_sched_step(sc, &err))
			break;
	ntx_sched_get_stats(sc, &ss);
	for (i = 0, same = sub == 4; i < 4; i++)
		same &= so.n[i] == n && !memcmp(ref.tok, so.tok[i], (size_t)n * sizeof(int32_t));
	t_ok(same && ss.n_accepted == 0 && ss.n_paused_steps > 0 &&
		     ss.n_verify_steps - ss.n_paused_steps < n / 2,
	     "pause e2e: batch of 4: each equals plain; %lld of %lld verification steps paused, %lld drafted",
	     (long long)ss.n_paused_steps, (long long)ss.n_verify_steps, (long long)ss.n_drafted);
out:
	ntx_sched_free(sc);
	ntx_engine_free(et);
	ntx_engine_free(ed);
	ntx_engine_free(et0);
	ntx_model_close(mt);
	ntx_model_close(md);
	ntx_model_close(mt0);
}

/* Tokens 2 and 3 of N sampled generations, plain vs speculative with s. */
static void sampling_case(struct ntx_engine *e, int V, const int32_t *prompt, int np,
			  const struct src *s, const char *what)
{
	int *cnt[2][2], i, k, pos, df, N = 3000;
	int64_t acc = 0, drafted = 0;
	struct cap c;
	struct ntx_gen_stats st;

	for (k = 0; k < 2; k++)
		for (pos = 0; pos < 2; pos++)
			cnt[k][pos] = calloc((size_t)V, sizeof(int));
	for (k = 0; k < 2; k++) {
		for (i = 0; i < N; i++) {
			if (gen(e, prompt, np, 3, 1.0f, 1.0f, (uint64_t)(1000003 * k + i), k ? s : NULL,
				&c, &st) || c.n != 3)
				break;
			cnt[k][0][c.tok[1]]++;
			cnt[k][1][c.tok[2]]++;
			if (k) {
				acc += st.n_accepted;
				drafted += st.n_drafted;
			}
		}
		t_ok(i == N, "%s: %d %s generations", what, N, k ? "speculative" : "plain");
	}
	t_ok(acc > 0 && acc < drafted, "%s: some drafts accepted, some rejected (%lld of %lld)", what,
	     (long long)acc, (long long)drafted);
	for (pos = 0; pos < 2; pos++) {
		double x = chi2(cnt[0][pos], cnt[1][pos], V, &df), p = chi2_p(x, df);

		t_ok(df >= 3 && p >= 1e-3,
		     "%s: token %d distribution unchanged (chi2 %.1f, df %d, p %.3g >= 0.001)", what,
		     pos + 2, x, df, p);
	}
	for (k = 0; k < 2; k++)
		for (pos = 0; pos < 2; pos++)
			free(cnt[k][pos]);
}

/* ---- the batch scheduler ---- */

struct sched_cap {
	int *cnt[2];
	int n_done, bad;
};

static void on_sched_done(void *user, const struct ntx_sched_result *r)
{
	struct sched_cap *c = user;

	if (r->n_gen == 3) {
		c->cnt[0][r->gen[1]]++;
		c->cnt[1][r->gen[2]]++;
	} else {
		c->bad++;
	}
	c->n_done++;
}

/* The scheduler's speculative steps (four sequences at once, drafts from
 * the draft model and from lookup): the 2nd and 3rd tokens of 3000 sampled
 * requests against 3000 plain generations. */
static void sched_sampling_case(const char *what, const int32_t *prompt, int np, int use_draft,
				int lookup)
{
	struct ntx_model *mt, *md;
	struct ntx_engine_opts eo;
	struct ntx_engine *et, *ed;
	struct ntx_err err;
	struct ntx_sched *sc = NULL;
	struct sched_cap c = { 0 };
	int *plain[2], V, i, pos, df, N = 3000, sub = 0;
	char path[512];
	struct cap cp;
	struct ntx_gen_stats st;
	struct ntx_sched_stats ss;

	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_fixtures());
	mt = ntx_model_open(path, 0, &err);
	snprintf(path, sizeof path, "%s/models/ref-a-q8_0.gguf", t_fixtures());
	md = ntx_model_open(path, 0, &err);
	memset(&eo, 0, sizeof eo);
	eo.backend = NTX_BACKEND_CPU;
	eo.n_ctx = 64;
	eo.n_threads = 2;
	eo.n_seq = 4;
	et = mt ? ntx_engine_new(mt, &eo, &err) : NULL;
	ed = md ? ntx_engine_new(md, &eo, &err) : NULL;
	if (!t_ok(et && ed, "%s: engines of 4 sequences", what))
		goto out;
	V = (int)mt->cfg.n_vocab;
	for (i = 0; i < 2; i++) {
		plain[i] = calloc((size_t)V, sizeof(int));
		c.cnt[i] = calloc((size_t)V, sizeof(int));
	}
	for (i = 0; i < N; i++) {
		if (gen(et, prompt, np, 3, 1.0f, 1.0f, (uint64_t)i, NULL, &cp, &st) || cp.n != 3)
			break;
		plain[0][cp.tok[1]]++;
		plain[1][cp.tok[2]]++;
	}
	sc = ntx_sched_new(et, NULL, &err);
	if (!t_ok(sc && ntx_sched_set_spec(sc, use_draft ? ed : NULL, lookup, 2, 0, &err) == 0,
		  "%s: scheduler with speculation", what))
		goto out;
	while (c.n_done < N) {
		while (sub < N && ntx_sched_n_free(sc) > 0) {
			struct ntx_sched_req r;

			memset(&r, 0, sizeof r);
			r.tokens = prompt;
			r.n_tokens = np;
			r.n_predict = 3;
			ntx_sampler_defaults(&r.sp);
			r.sp.temp = 1.0f;
			r.sp.top_k = 12;
			r.sp.top_p = 1.0f;
			r.sp.min_p = 0;
			r.sp.seed = (uint64_t)(5000011 + sub);
			r.on_done = on_sched_done;
			r.user = &c;
			if (ntx_sched_submit(sc, &r, &err) < 0)
				break;
			sub++;
		}
		if (ntx_sched_step(sc, &err))
			break;
	}
	ntx_sched_get_stats(sc, &ss);
	t_ok(c.n_done == N && c.bad == 0, "%s: %d requests of 3 tokens (%d done)", what, N, c.n_done);
	t_ok(ss.n_accepted > 0 && ss.n_accepted < ss.n_drafted,
	     "%s: some drafts accepted, some rejected (%lld of %lld)", what,
	     (long long)ss.n_accepted, (long long)ss.n_drafted);
	for (pos = 0; pos < 2; pos++) {
		double x = chi2(plain[pos], c.cnt[pos], V, &df), p = chi2_p(x, df);

		t_ok(df >= 3 && p >= 1e-3,
		     "%s: token %d distribution unchanged (chi2 %.1f, df %d, p %.3g >= 0.001)", what,
		     pos + 2, x, df, p);
	}
	for (i = 0; i < 2; i++) {
		free(plain[i]);
		free(c.cnt[i]);
	}
out:
	ntx_sched_free(sc);
	ntx_engine_free(et);
	ntx_engine_free(ed);
	ntx_model_close(mt);
	ntx_model_close(md);
}

static void sampling_cases(void)
{
	struct ntx_model *mt, *md;
	struct ntx_engine *et = open_engine("models/stories260K.gguf", &mt, NULL);
	struct ntx_engine *ed = open_engine("models/ref-a-q8_0.gguf", &md, NULL);
	static const int32_t prompt[] = { 1, 403, 407, 261, 378 };
	/* a prompt that repeats itself, so that lookup drafts at once */
	static const int32_t rep[] = { 1, 403, 407, 261, 378, 403, 407, 261, 378, 403 };

	if (t_ok(et && ed, "stories260K + ref-a-q8_0: engines")) {
		struct src s = { ed, 0, 2 }, l = { NULL, 2, 2 };

		sampling_case(et, (int)mt->cfg.n_vocab, prompt, 5, &s, "stories260K, draft ref-a-q8_0");
		sampling_case(et, (int)mt->cfg.n_vocab, rep, 10, &l, "stories260K, lookup");
	}
	ntx_engine_free(et);
	ntx_engine_free(ed);
	ntx_model_close(mt);
	ntx_model_close(md);
}

int main(void)
{
	/* BOS "And the LORD said unto Moses," and BOS "A computer is" */
	static const int32_t p0[] = { 8187, 697, 259, 481, 483, 430, 1323, 11 };
	static const int32_t p1[] = { 8187, 32, 1823, 320 };
	static const int32_t s0[] = { 1, 403, 407, 261 };

	lookup_cases();
	tuner_cases();
	pause_steps();
	pause_cases(&streamed70);
	pause_cases(&resident8);
	if (!t_need_fixtures("speculative decoding on the fixture models"))
		return t_done();
	vocab_cases();
	greedy_pair("tinymodel/tinymodel-q8_0.gguf", "tinymodel/tinydraft-q8_0.gguf", p0, 8,
		    "tiny pair (bible prompt)");
	greedy_pair("tinymodel/tinymodel-q4_k_m.gguf", "tinymodel/tinydraft-f16.gguf", p1, 4,
		    "tiny pair q4_k_m (short prompt)");
	greedy_pair("models/stories260K.gguf", "models/ref-a-q4_0.gguf", s0, 4,
		    "stories260K, unrelated draft");
	pause_e2e();
	sampling_cases();
	{
		static const int32_t prompt[] = { 1, 403, 407, 261, 378 };
		static const int32_t rep[] = { 1, 403, 407, 261, 378, 403, 407, 261, 378, 403 };

		sched_sampling_case("batch, draft ref-a-q8_0", prompt, 5, 1, 0);
		sched_sampling_case("batch, lookup", rep, 10, 0, 2);
	}
	return t_done();
}
