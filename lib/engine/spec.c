/* spec.c - vocabulary check, prompt lookup and the choice of the draft
 * length for speculative decoding (see spec.h). */
#include "spec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- vocabulary check ---- */

static const char *show_id(int32_t id, char *buf, size_t n)
{
	if (id == NTX_TOKEN_NONE)
		snprintf(buf, n, "none");
	else
		snprintf(buf, n, "%d", id);
	return buf;
}

int ntx_spec_check_vocab(const struct ntx_vocab *t, const struct ntx_vocab *d,
			 struct ntx_err *err)
{
	static const struct {
		const char *name;
		int32_t (*get)(const struct ntx_vocab *);
	} specials[] = {
		{ "BOS", ntx_vocab_bos }, { "EOS", ntx_vocab_eos }, { "EOT", ntx_vocab_eot },
		{ "EOM", ntx_vocab_eom }, { "unknown-token", ntx_vocab_unk },
	};
	int32_t n = ntx_vocab_n_tokens(t), i;
	char a[16], b[16];
	size_t k;

	if (ntx_vocab_type(t) != ntx_vocab_type(d))
		return ntx_err_set(err, NTX_EINVAL,
				   "the draft's tokenizer is of another kind than the target's (SPM vs BPE)");
	if (ntx_vocab_n_tokens(d) != n)
		return ntx_err_set(err, NTX_EINVAL,
				   "the draft has %d tokens, the target %d: a draft must share the target's vocabulary",
				   ntx_vocab_n_tokens(d), n);
	for (k = 0; k < sizeof specials / sizeof specials[0]; k++) {
		int32_t x = specials[k].get(t), y = specials[k].get(d);

		if (x != y)
			return ntx_err_set(err, NTX_EINVAL,
					   "the draft's %s id is %s, the target's %s",
					   specials[k].name, show_id(y, a, sizeof a),
					   show_id(x, b, sizeof b));
	}
	if (ntx_vocab_add_bos(t) != ntx_vocab_add_bos(d))
		return ntx_err_set(err, NTX_EINVAL,
				   "the draft %s BOS to a prompt and the target %s",
				   ntx_vocab_add_bos(d) ? "adds" : "does not add",
				   ntx_vocab_add_bos(t) ? "does" : "does not");
	for (i = 0; i < n; i++) {
		size_t lt, ld;
		const char *st = ntx_vocab_token_text(t, i, &lt), *sd = ntx_vocab_token_text(d, i, &ld);

		if (lt != ld || memcmp(st, sd, lt))
			return ntx_err_set(err, NTX_EINVAL,
					   "token %d differs: '%.*s' in the draft, '%.*s' in the target",
					   i, (int)(ld > 40 ? 40 : ld), sd, (int)(lt > 40 ? 40 : lt), st);
		if (ntx_vocab_token_type(t, i) != ntx_vocab_token_type(d, i))
			return ntx_err_set(err, NTX_EINVAL,
					   "token %d ('%.*s') has another type in the draft (%d) than in the target (%d)",
					   i, (int)(lt > 40 ? 40 : lt), st,
					   (int)ntx_vocab_token_type(d, i), (int)ntx_vocab_token_type(t, i));
	}
	return 0;
}

/* ---- prompt lookup ---- */

int ntx_spec_lookup(const int32_t *hist, int n_hist, int ngram_max, int k_max, int32_t *out)
{
	int n;

	if (k_max <= 0)
		return 0;
	for (n = ngram_max < n_hist - 1 ? ngram_max : n_hist - 1; n >= 1; n--) {
		const int32_t *tail = hist + n_hist - n;
		int j;

		/* the match hist[j..j+n) must be followed by at least one token
		 * before the tail: j + n < n_hist - n + n, i.e. j < n_hist - n */
		for (j = n_hist - n - 1; j >= 0; j--) {
			int m;

			if (hist[j] != tail[0] || memcmp(hist + j, tail, (size_t)n * sizeof *hist))
				continue;
			m = n_hist - (j + n);
			if (m > k_max)
				m = k_max;
			memcpy(out, hist + j + n, (size_t)m * sizeof *out);
			return m;
		}
	}
	return 0;
}

/* ---- acceptance ---- */

static int32_t pick(struct ntx_sampler *smp, int64_t V, const float *rows, const int32_t *ids,
		    int r)
{
	return ids ? ids[r] : ntx_sampler_sample(smp, rows + (int64_t)r * V);
}

int ntx_spec_accept(struct ntx_sampler *smp, int64_t V, const float *rows, const int32_t *ids,
		    const float *q, const int32_t *d, int k, float *p, int32_t *next)
{
	int greedy = ntx_sampler_is_greedy(smp), i, n_acc = 0;
	int64_t j;

	*next = -1;
	for (i = 0; i < k; i++) {
		int32_t t = d[i + 1];

		if (greedy) {
			int32_t x = pick(smp, V, rows, ids, i);

			if (x != t) {
				*next = x;
				break;
			}
		} else {
			const float *row = rows + (int64_t)i * V, *qi = q ? q + (int64_t)i * V : NULL;
			double a;

			ntx_sampler_probs(smp, row, p);
			a = !qi ? p[t] : qi[t] > 0 ? p[t] / qi[t] : 0;
			if (ntx_sampler_uniform(smp) >= a) {
				/* resample from max(0, p - q) */
				double sum = 0;

				for (j = 0; j < V; j++) {
					float r = p[j] - (qi ? qi[j] : (float)(j == t));

					p[j] = r > 0 ? r : 0;
					sum += p[j];
				}
				*next = sum > 0 ? ntx_sampler_draw(smp, p) : ntx_argmax(row, V);
				break;
			}
		}
		n_acc++;
		ntx_sampler_accept(smp, t); /* history for the next row */
	}
	/* all accepted: a bonus token from the last row, sampled while the
	 * history still holds d_1..d_k (the repetition penalty must see what
	 * plain decoding would have seen) */
	if (*next < 0)
		*next = pick(smp, V, rows, ids, k);
	ntx_sampler_unaccept(smp, n_acc);
	return n_acc;
}

/* ---- draft length ---- */

double ntx_spec_expected_tokens(double a, int k)
{
	if (a >= 1.0)
		return k + 1;
	if (a <= 0)
		return 1;
	return (1.0 - pow(a, k + 1)) / (1.0 - a);
}

void ntx_spec_tuner_init(struct ntx_spec_tuner *t, int k_max, int k_init)
{
	memset(t, 0, sizeof *t);
	if (k_max > NTX_SPEC_KMAX)
		k_max = NTX_SPEC_KMAX;
	t->k_max = k_max < 1 ? 1 : k_max;
	t->k_init = k_init < 1 ? 1 : k_init > t->k_max ? t->k_max : k_init;
	t->t_draft = -1;
	t->pause = 1;
	t->backoff = NTX_SPEC_BACKOFF_MIN;
	t->credit = NTX_SPEC_CREDIT;
}

/* A running average; an observation over twice it counts as twice it (a
 * step the machine preempted must not make a pass look slow for long). */
static void ema(double *x, double v)
{
	if (*x > 0 && v > 2 * *x)
		v = 2 * *x;
	*x = *x > 0 ? 0.7 * *x + 0.3 * v : v;
}

void ntx_spec_tuner_observe_pass(struct ntx_spec_tuner *t, int n, double t_pass_s)
{
	if (n >= 1 && n <= NTX_SPEC_KMAX + 1 && t_pass_s > 0)
		ema(&t->t_pass[n], t_pass_s);
}

/* Pause: plain steps for the current wait, which then doubles. */
static void pause_drafting(struct ntx_spec_tuner *t)
{
	t->off = 1;
	t->wait = t->backoff;
	t->backoff = t->backoff * 2 > NTX_SPEC_BACKOFF_MAX ? NTX_SPEC_BACKOFF_MAX : t->backoff * 2;
}

/* The cost of a plain step: the cheapest pass of any width seen (a pass of
 * more tokens never costs less: before a plain step this overstates it,
 * and one width's average made slow by a preempted pass and not seen since
 * cannot hide the others). 0 when nothing is known. */
static double plain_cost(const struct ntx_spec_tuner *t)
{
	double m = 0;
	int n;

	for (n = 1; n <= NTX_SPEC_KMAX + 1; n++)
		if (t->t_pass[n] > 0 && (m == 0 || t->t_pass[n] < m))
			m = t->t_pass[n];
	return m;
}

/* The credit after a step that yielded n_acc + 1 tokens in step_s seconds;
 * a probe's outcome. */
static void judge(struct ntx_spec_tuner *t, int n_acc, double step_s)
{
	double p1 = plain_cost(t);
	double g = p1 > 0 ? (n_acc + 1) - step_s / p1 : 0;

	if (t->off) {
		if (t->wait > 0)
			return; /* a step drafted while paused (the batch's other slots) */
		t->n_probes++;
		if (n_acc > 0 && g > 0) {
			t->off = 0;
			t->credit = NTX_SPEC_CREDIT;
			t->backoff = NTX_SPEC_BACKOFF_MIN;
		} else {
			pause_drafting(t);
		}
		return;
	}
	t->credit = 0.9 * t->credit + g;
	if (t->credit > NTX_SPEC_CREDIT_MAX)
		t->credit = NTX_SPEC_CREDIT_MAX;
	if (t->credit < 0 && t->pause)
		pause_drafting(t);
}

void ntx_spec_tuner_observe(struct ntx_spec_tuner *t, int k, int n_acc, double t_draft_s,
			    double t_pass_s, int model_draft)
{
	double drafting = 0;

	if (k < 1)
		return;
	/* a rejection ends the examined drafts: n_acc + 1 of them, or k */
	t->acc = 0.9 * t->acc + n_acc;
	t->examined = 0.9 * t->examined + (n_acc < k ? n_acc + 1 : k);
	if (model_draft && t_draft_s > 0) {
		ema(&t->t_draft, t_draft_s / k);
		drafting = t_draft_s;
	} else if (model_draft && t->t_draft > 0) {
		drafting = k * t->t_draft;
	}
	ntx_spec_tuner_observe_pass(t, k + 1, t_pass_s);
	t->n_obs++;
	if (t_pass_s > 0)
		judge(t, n_acc, drafting + t_pass_s);
}

void ntx_spec_tuner_skipped(struct ntx_spec_tuner *t)
{
	t->n_paused++;
	if (t->wait > 0)
		t->wait--;
	/* the evidence ages as if a step had drafted nothing */
	t->acc *= 0.9;
	t->examined *= 0.9;
}

double ntx_spec_tuner_acceptance(const struct ntx_spec_tuner *t)
{
	return (t->acc + 1.0) / (t->examined + 2.0);
}

double ntx_spec_tuner_pass_cost(const struct ntx_spec_tuner *t, int n)
{
	int lo, hi;

	if (n < 1)
		n = 1;
	if (n > NTX_SPEC_KMAX + 1)
		n = NTX_SPEC_KMAX + 1;
	if (t->t_pass[n] > 0)
		return t->t_pass[n];
	for (lo = n - 1; lo >= 1 && !(t->t_pass[lo] > 0); lo--)
		;
	for (hi = n + 1; hi <= NTX_SPEC_KMAX + 1 && !(t->t_pass[hi] > 0); hi++)
		;
	if (lo >= 1 && hi <= NTX_SPEC_KMAX + 1)
		return t->t_pass[lo] + (t->t_pass[hi] - t->t_pass[lo]) * (n - lo) / (double)(hi - lo);
	if (lo >= 1)
		return t->t_pass[lo];
	if (hi <= NTX_SPEC_KMAX + 1)
		return t->t_pass[hi];
	return 0;
}

int ntx_spec_best_k(const struct ntx_spec_tuner *t, double a, double t_draft, double *rate)
{
	double best = -1;
	int k, kbest = 1;

	for (k = 1; k <= t->k_max; k++) {
		double cost = k * t_draft + ntx_spec_tuner_pass_cost(t, k + 1);
		double r = cost > 0 ? ntx_spec_expected_tokens(a, k) / cost : 0;

		/* ties go to the shorter draft (the same speed for less work) */
		if (r > best * 1.0001) {
			best = r;
			kbest = k;
		}
	}
	if (rate)
		*rate = best > 0 ? best : 0;
	return kbest;
}

int ntx_spec_tuner_pick(const struct ntx_spec_tuner *t, int model_draft)
{
	if (t->off)
		return t->wait > 0 ? 0 : NTX_SPEC_PROBE_K < t->k_max ? NTX_SPEC_PROBE_K : t->k_max;
	if (t->n_obs == 0)
		return t->k_init;
	return ntx_spec_best_k(t, ntx_spec_tuner_acceptance(t),
			       model_draft && t->t_draft > 0 ? t->t_draft : 0, NULL);
}
