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
 * outside them, so that longer drafts get tried once). */
struct ntx_spec_tuner {
	int k_max, k_init;
	double acc, examined;               /* decayed counts */
	double t_draft;                     /* seconds per drafted token; < 0 unknown */
	double t_pass[NTX_SPEC_KMAX + 2];   /* seconds per pass of n tokens; 0 unknown */
	int n_obs;
};

void ntx_spec_tuner_init(struct ntx_spec_tuner *t, int k_max, int k_init);
/* One step's outcome: k drafted, n_acc accepted, t_draft_s spent drafting
 * them (0 for free drafts such as lookup: then the drafting cost is not
 * updated) and t_pass_s for the verification pass of k + 1 tokens. */
void ntx_spec_tuner_observe(struct ntx_spec_tuner *t, int k, int n_acc, double t_draft_s,
			    double t_pass_s, int model_draft);
/* A verification pass of n tokens without a draft (a plain step). */
void ntx_spec_tuner_observe_pass(struct ntx_spec_tuner *t, int n, double t_pass_s);
/* The estimated acceptance (a prior of 0.5 weighs as two drafts). */
double ntx_spec_tuner_acceptance(const struct ntx_spec_tuner *t);
/* The estimated cost of a pass of n tokens (0 when nothing is known). */
double ntx_spec_tuner_pass_cost(const struct ntx_spec_tuner *t, int n);
/* K in [1, k_max] that maximizes expected tokens per second; k_init until
 * a step has been observed. With model_draft 0 drafting costs nothing. */
int ntx_spec_tuner_pick(const struct ntx_spec_tuner *t, int model_draft);
/* The same choice for a given acceptance a and drafting cost t_draft
 * (seconds per token), from the pass costs t has seen; *rate (may be NULL)
 * gets the expected tokens per second. */
int ntx_spec_best_k(const struct ntx_spec_tuner *t, double a, double t_draft, double *rate);

#endif
