/* generate.h - the decoding loop for one sequence: prompt processing, then
 * token-by-token generation with a sampler, stop conditions, optional
 * self-speculative decoding, logits dumps; and perplexity. */
#ifndef NTX_GENERATE_H
#define NTX_GENERATE_H

#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "sampler.h"

enum ntx_stop {
	NTX_STOP_NONE = 0,
	NTX_STOP_EOG,      /* an end-of-generation token */
	NTX_STOP_LENGTH,   /* n_predict reached */
	NTX_STOP_CONTEXT,  /* the context is full */
	NTX_STOP_CALLER,   /* the token callback asked to stop (closed output) */
	NTX_STOP_INTERRUPT /* Ctrl-C */
};

const char *ntx_stop_name(enum ntx_stop s); /* "eos", "length", "context", ... */

/* One row of n_vocab logits; returns 0, or an errno value to stop. */
typedef int (*ntx_logits_cb)(void *ctx, const float *row, int64_t n_vocab);

struct ntx_gen_opts {
	int n_predict;                 /* < 0: until EOG or the context is full */
	struct ntx_sampler_params sp;
	const uint8_t *eog;            /* n_vocab flags: tokens that end generation */
	const int32_t *force;          /* teacher forcing: feed these instead of sampling */
	int n_force;
	/* each evaluated row's logits: every prompt position, then every
	 * generated token (each is evaluated, the last one too); a non-zero
	 * return (an errno value) ends generation with an error "writing
	 * logits: ..." */
	ntx_logits_cb logits;
	void *logits_ctx;
	/* speculative decoding: drafts from prompt lookup (lookup > 0: n-gram
	 * matches of up to that many tokens in the prompt and the text so far,
	 * tried first), else from a draft model (draft) or from the target
	 * with draft_mask's layers skipped (self_spec); greedy output equals
	 * plain decoding's, sampled output has the target's distribution */
	int self_spec;
	struct ntx_engine *draft;      /* same vocabulary as the target (the
					* caller checks ntx_spec_check_vocab) */
	int draft_seq;                 /* the draft engine's sequence to use */
	int lookup;
	int draft_k;                   /* tokens drafted per step (default 4; at
					* most NTX_SPEC_KMAX) */
	int adaptive_k;                /* choose K every step from measured
					* acceptance and costs (up to
					* NTX_SPEC_KMAX_ADAPTIVE), starting at draft_k;
					* K 0 (plain steps, with a probe now and
					* then) while drafting does not pay (spec.h;
					* the engine's NTX_SPEC_BACKOFF=0: never) */
	const uint8_t *draft_mask;     /* n_layer flags: layers the draft skips */
};

struct ntx_gen_stats {
	int n_prompt, n_gen;
	/* t_prompt_s: prompt processing up to the first generated token; t_gen_s:
	 * from then to the last token, so the generation rate is
	 * (n_gen - 1) / t_gen_s (tokens produced after the first), the same for
	 * plain and speculative decoding and comparable with llama.cpp's eval
	 * rate. */
	double t_prompt_s, t_gen_s;
	enum ntx_stop stop;
	/* speculative: tokens drafted and accepted (lookup's share of them
	 * too), target passes during generation, draft model evaluations,
	 * seconds spent drafting and verifying */
	int64_t n_drafted, n_accepted, n_full_passes, n_draft_passes;
	int64_t n_lookup_drafted, n_lookup_accepted;
	double t_draft_s, t_verify_s;
	/* adaptive K: plain steps taken because drafting did not pay (the
	 * tuner paused it, spec.h; its probes draft and are not counted) */
	int64_t n_paused;
};

/* Called with each generated token; return non-zero to stop. */
typedef int (*ntx_token_cb)(void *ctx, int32_t tok);

/* Evaluate the prompt in sequence seq (positions from 0; the sequence's old
 * contents are discarded) and generate. Returns 0 (see st->stop for why it
 * ended, NTX_STOP_INTERRUPT included) or -1 on an error. */
int ntx_generate(struct ntx_engine *e, int seq, const int32_t *prompt, int n_prompt,
		 const struct ntx_gen_opts *o, ntx_token_cb cb, void *cb_ctx,
		 struct ntx_gen_stats *st, struct ntx_err *err);

/* llama-perplexity's method: chunks of n_ctx tokens (the first replaced by
 * bos), scoring the second half of each chunk. Calls progress(ctx, chunk,
 * n_chunks, running_ppl) after each chunk (may be NULL). With kld_ref /
 * kld_out: if kld_out is non-NULL, the scored rows' log-probabilities are
 * written to it (for a later KL comparison); if kld_ref is non-NULL, the mean
 * KL divergence against those rows and the top-1 agreement are computed. */
struct ntx_ppl_result {
	double ppl, ppl_err;      /* PPL and its standard error, as llama-perplexity */
	double nll;               /* mean negative log-likelihood */
	int n_chunks, n_scored;
	double kld, kld_err;      /* mean KL(ref || this), when kld_ref */
	double top1;              /* share of rows whose argmax equals ref's */
};

typedef void (*ntx_ppl_progress)(void *ctx, int chunk, int n_chunks, double ppl);

int ntx_perplexity(struct ntx_engine *e, const int32_t *tokens, int n_tokens, int n_ctx,
		   int32_t bos, const uint8_t *layer_mask, FILE *kld_out, FILE *kld_ref,
		   ntx_ppl_progress progress, void *pctx, struct ntx_ppl_result *r,
		   struct ntx_err *err);

#endif
