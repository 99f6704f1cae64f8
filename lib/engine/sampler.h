/* sampler.h - token sampling with llama.cpp's options and defaults:
 * repetition penalty, then top-k, top-p, min-p, temperature, and a seeded
 * draw; greedy (argmax, lowest id on ties) when temp <= 0. */
#ifndef NTX_SAMPLER_H
#define NTX_SAMPLER_H

#include <stdint.h>

#include "err.h"

struct ntx_sampler_params {
	float temp;           /* <= 0: greedy. llama.cpp default 0.8 */
	int top_k;            /* <= 0: off. default 40 */
	float top_p;          /* >= 1: off. default 0.95 */
	float min_p;          /* <= 0: off. default 0.05 */
	float repeat_penalty; /* 1: off (default) */
	int repeat_last_n;    /* tokens of history penalised; default 64; -1 = context */
	uint64_t seed;        /* same seed, same output */
};

void ntx_sampler_defaults(struct ntx_sampler_params *p);

struct ntx_sampler;

struct ntx_sampler *ntx_sampler_new(const struct ntx_sampler_params *p, int64_t n_vocab,
				    struct ntx_err *err);
void ntx_sampler_free(struct ntx_sampler *s);

/* Forget the history (new prompt); the RNG continues. */
void ntx_sampler_reset(struct ntx_sampler *s);

/* Add a token to the history used by the repetition penalty (prompt tokens
 * and generated tokens alike). */
void ntx_sampler_accept(struct ntx_sampler *s, int32_t tok);

/* Remove the last n accepted tokens (speculative rollback). */
void ntx_sampler_unaccept(struct ntx_sampler *s, int n);

/* Choose the next token from a row of logits (not modified). */
int32_t ntx_sampler_sample(struct ntx_sampler *s, const float *logits);

/* The distribution the sampler draws from: probs[i] for every token (zero
 * outside top-k/top-p/min-p; one-hot argmax when greedy). */
void ntx_sampler_probs(struct ntx_sampler *s, const float *logits, float *probs);

/* Draw a token from a distribution (sums to ~1) with the sampler's RNG. */
int32_t ntx_sampler_draw(struct ntx_sampler *s, const float *probs);

/* A uniform random number in [0, 1) from the sampler's RNG. */
double ntx_sampler_uniform(struct ntx_sampler *s);

int ntx_sampler_is_greedy(const struct ntx_sampler *s);

/* 1 when every draw is the argmax of the raw logits (greedy, and the
 * repetition penalty changes nothing): the engine's b->ids can stand in
 * for the logits. */
int ntx_sampler_is_argmax(const struct ntx_sampler *s);

/* Index of the largest value (lowest index on ties). */
int32_t ntx_argmax(const float *x, int64_t n);

/* The sampling options every tool takes, by their long name (llama.cpp's):
 * "temp" [0, 100], "top-k" [0, 2^30], "top-p" and "min-p" [0, 1],
 * "repeat-penalty" (0, 100], "repeat-last-n" [-1, 2^30], "seed" [0, 2^63).
 * Returns 1 when name is one of them and arg was stored in *sp, 0 when it
 * is another option, -1 with *err for a bad value. */
int ntx_sampler_parse_opt(const char *name, const char *arg, struct ntx_sampler_params *sp,
			  struct ntx_err *err);

#endif
