/* spec.h - the pure parts of speculative decoding with a draft model or
 * prompt lookup: the vocabulary check that makes a draft usable, n-gram
 * drafts from the context (prompt lookup), and the choice of the draft
 * length K from measured acceptance and measured costs. The decoding loop
 * that uses them is in generate.c. */
#ifndef NTX_SPEC_H
#define NTX_SPEC_H

#include <stdint.h>

#include "err.h"
#include "sampler.h"
#include "tokenizer.h"

/* The longest draft a step may verify (--draft-k's upper bound). */
#define NTX_SPEC_KMAX 64
/* The longest draft the adaptive choice tries without --draft-k. */
#define NTX_SPEC_KMAX_ADAPTIVE 16

/* Can a model with vocabulary d draft for a target with vocabulary t? The
 * same token count, the same text and type of every token, the same BOS,
 * EOS, EOT, EOM and unknown ids and the same add-BOS rule. Returns 0, or -1
 * with NTX_EINVAL and a message naming the first difference. */
int ntx_spec_check_vocab(const struct ntx_vocab *t, const struct ntx_vocab *d,
			 struct ntx_err *err);

/* Prompt lookup: find the most recent earlier occurrence of the last n
 * tokens of hist[0..n_hist) for n from ngram_max down to 1, and copy up to
 * k_max of the tokens that followed it into out. Returns the number of
 * tokens drafted (0: no match). */
int ntx_spec_lookup(const int32_t *hist, int n_hist, int ngram_max, int k_max, int32_t *out);

/* Verify drafts d[1..k] (d[0] is the token they follow) against the
 * target's k + 1 rows of one verification pass: rows (k + 1 logits rows of
 * V), or ids (their argmax, when the sampler is argmax; rows may then be
 * NULL). q: the draft's k probability rows (NULL for one-hot drafts such as
 * lookup). p: scratch of V floats. Greedy: a draft is accepted when it is
 * the target's pick; sampling: with probability min(1, p/q), a rejection
 * resampling from max(0, p - q). Returns the number accepted; *next gets the
 * target's token after them (the bonus token when all are accepted). The
 * sampler's history is as before the call (the caller accepts what it
 * emits). */
int ntx_spec_accept(struct ntx_sampler *smp, int64_t V, const float *rows, const int32_t *ids,
		    const float *q, const int32_t *d, int k, float *p, int32_t *next);

/* Expected tokens of one speculative step with K drafted tokens when each
 * is accepted with probability a (given the ones before it were):
 * (1 - a^(K+1)) / (1 - a), K + 1 at a = 1. */
double ntx_spec_expected_tokens(double a, int k);

/* The adaptive choice of K. Acceptance is estimated from decayed counts of
 * drafts accepted and drafts examined (a rejected draft ends the examined
 * ones); the costs are running averages of the time to draft one token and
 * of a verification pass of n tokens, for each n seen. A pass of an n not
 * yet seen is interpolated linearly between the nearest seen ones (flat
 * outside them, so that longer drafts get tried once).
 *
 * Pausing. A draft that is never accepted still costs its drafting and the
 * wider verification pass: at acceptance 0 a step of K drafts yields the
 * one token a plain step yields, in K * t_draft + pass(K + 1) instead of
 * pass(1). The acceptance estimate cannot see that soon enough: with the
 * prior (half of two drafts, Laplace's rule) and counts that decay by 0.9
 * per step it never falls below 1 / 12, while drafting pays on a streamed
 * 70B from about 0.02 and on a resident 8B from about 0.25. The prior is
 * kept (it only chooses K, where a wrong guess costs little); whether to
 * draft at all is decided from what the steps yielded instead. Each draft
 * step adds its gain over plain decoding, in tokens,
 *
 *     g = (accepted + 1) - (drafting time + pass time) / pass(1),
 *
 * to a credit that decays by 0.9 per step, starts at NTX_SPEC_CREDIT and is
 * capped at NTX_SPEC_CREDIT_MAX. A step that accepts nothing costs about
 * one token's worth, so the start survives a first step or two of bad luck
 * and a good stretch three or four rejected steps in a row (at acceptance
 * 0.9, no false pause in 12 simulated runs of 1300 steps; with a cap of 4 a
 * few), while the cap keeps the drain short when acceptance falls. pass(1)
 * is the cheapest pass of any width seen: a wider pass never costs less, so
 * before a plain step this overstates it (erring on the side of drafting),
 * and one width's average left slow by a preempted pass cannot hide the
 * others. Observations over twice a running average count as twice it. When
 * the credit falls below 0 drafting pauses: K = 0 (a plain step) for a wait
 * of NTX_SPEC_BACKOFF_MIN steps, then one probe step with K =
 * NTX_SPEC_PROBE_K. A probe pays when its draft is accepted and the step
 * beat a plain one (g > 0): drafting resumes with the starting credit and
 * the wait returns to its minimum. Otherwise the wait doubles, up to
 * NTX_SPEC_BACKOFF_MAX. While paused the acceptance counts decay as if
 * steps passed, so a resumed draft chooses K from the probe rather than
 * from the stretch that paused it.
 *
 * The bound at acceptance 0. Let w be a step's loss in steps of pass(1): (K
 * t_draft + pass(K + 1) - pass(1)) / pass(1). Until the pause, the decayed
 * sum of the losses must pass the decayed credit: with pass(1) known that
 * costs at most about NTX_SPEC_CREDIT + w steps of time, spread over more
 * steps the smaller w is (w = 0.02: ~25 steps, half a step lost; w = 0.25:
 * ~6 steps, 1.5 lost). Then each probe costs w_p = (t_draft + catch-up +
 * pass(2) - pass(1)) / pass(1) (catch-up: the draft model evaluating the
 * tokens it missed in one batched evaluation, paid once and kept out of
 * t_draft), one probe per wait of 8, 16, 32, 64, 64, ... steps: over N
 * steps at most 4 + N / 64 probes, a share of about w_p / 64 of the time in
 * the long run. On the synthetic costs of tests/unit/test_spec.c (streamed
 * 70B: pass(1) 232.7 ms, pass(8) 281.6 ms, 3 ms a drafted token; resident
 * 8B: 2.1, 3.0 and 0.4 ms; a catch-up of m tokens at 1 + m / 16 drafted
 * tokens) 1000 steps at acceptance 0 draft 42 and 23 times and lose 0.2%
 * and 1.9% of plain decoding's time, 128 steps 0.7% and 3.2% (the first
 * step's K = 4 and the prompt's catch-up included); the test bounds them at
 * 50 steps and 5%. Without pausing they lose 2.3% and 26%. After a stretch
 * at acceptance 0.9 the drain adds a few steps: 31 and 20 drafted of the
 * next 1000 at 0. The same waits bound how late drafting resumes when
 * acceptance returns: within one wait (at most 64 steps) and a probe, and
 * each probe pays with the probability that its draft is accepted.
 *
 * NTX_SPEC_BACKOFF=0 (struct ntx_tunables.spec_backoff, for comparisons)
 * turns pausing off: the tuner drafts at every step, K >= 1, as before. */
#define NTX_SPEC_CREDIT 2.0
#define NTX_SPEC_CREDIT_MAX 6.0
#define NTX_SPEC_BACKOFF_MIN 8
#define NTX_SPEC_BACKOFF_MAX 64
#define NTX_SPEC_PROBE_K 1

struct ntx_spec_tuner {
	int k_max, k_init;
	double acc, examined;               /* decayed counts */
	double t_draft;                     /* seconds per drafted token; < 0 unknown */
	double t_pass[NTX_SPEC_KMAX + 2];   /* seconds per pass of n tokens; 0 unknown */
	int n_obs;
	/* pausing */
	int pause;                          /* may pause drafting (1 after init) */
	int off;                            /* drafting is paused */
	int wait;                           /* while off: plain steps before the next probe */
	int backoff;                        /* the wait after the next failed probe */
	double credit;                      /* tokens drafting gained over plain, decayed */
	int64_t n_paused, n_probes;         /* plain steps taken while off, probe steps */
};

void ntx_spec_tuner_init(struct ntx_spec_tuner *t, int k_max, int k_init);
/* One step's outcome: k drafted, n_acc accepted, t_draft_s spent drafting
 * them and t_pass_s for the verification pass of k + 1 tokens. With
 * model_draft 0 (free drafts such as lookup) drafting costs nothing. With
 * model_draft 1 and t_draft_s <= 0 the drafting time is not known as the
 * time of k drafts (the draft model caught up with tokens it had missed:
 * the prompt, a lookup step's, a pause's): the cost per token is then not
 * updated and the step's gain counts k drafts at the known cost. Updates
 * the acceptance, the costs and the credit; ends a probe (see above). */
void ntx_spec_tuner_observe(struct ntx_spec_tuner *t, int k, int n_acc, double t_draft_s,
			    double t_pass_s, int model_draft);
/* A verification pass of n tokens without a draft (a plain step). */
void ntx_spec_tuner_observe_pass(struct ntx_spec_tuner *t, int n, double t_pass_s);
/* A step on which this tuner's source did not draft because
 * ntx_spec_tuner_pick chose 0 (once per step; the step's pass, when plain,
 * goes to ntx_spec_tuner_observe_pass as usual). Counts down the wait. */
void ntx_spec_tuner_skipped(struct ntx_spec_tuner *t);
/* The estimated acceptance (a prior of 0.5 weighs as two drafts). */
double ntx_spec_tuner_acceptance(const struct ntx_spec_tuner *t);
/* The estimated cost of a pass of n tokens (0 when nothing is known). */
double ntx_spec_tuner_pass_cost(const struct ntx_spec_tuner *t, int n);
/* K for the next step: k_init until a step has been observed; 0 while
 * drafting is paused (a plain step: then call ntx_spec_tuner_skipped),
 * NTX_SPEC_PROBE_K for a probe, else K in [1, k_max] that maximizes
 * expected tokens per second. With model_draft 0 drafting costs nothing.
 * Does not change t: every caller of one step gets the same K. */
int ntx_spec_tuner_pick(const struct ntx_spec_tuner *t, int model_draft);
/* The best drafting K in [1, k_max] for a given acceptance a and drafting
 * cost t_draft (seconds per token), from the pass costs t has seen; *rate
 * (may be NULL) gets the expected tokens per second. */
int ntx_spec_best_k(const struct ntx_spec_tuner *t, double a, double t_draft, double *rate);

#endif
