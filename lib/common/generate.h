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

struct ntx_gen_opts {
	int n_predict;                 /* < 0: until EOG or the context is full */
	struct ntx_sampler_params sp;
	const uint8_t *eog;            /* n_vocab flags: tokens that end generation */
	const int32_t *force;          /* teacher forcing: feed these instead of sampling */
	int n_force;
	FILE *dump_logits;             /* float32 rows: every prompt position, then
					* every generated token (each is evaluated) */
	/* self-speculative decoding */
	int self_spec;
	int draft_k;                   /* tokens drafted per step (default 4) */
	int adaptive_k;                /* grow/shrink k from the acceptance */
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
	/* self-speculative */
	int64_t n_drafted, n_accepted, n_full_passes, n_draft_passes;
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
