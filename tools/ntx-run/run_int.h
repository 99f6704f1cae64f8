/* run_int.h - what --batch and --bench (batch.c, bench.c) share while they
 * still use the library's internal headers (doc/ntx-run-api.md lists them
 * and what replaces each); the other modes see only run.h. */
#ifndef NTX_RUN_INT_H
#define NTX_RUN_INT_H

#include <jansson.h>

#include "engine.h"
#include "fileio.h"
#include "generate.h"
#include "model.h"
#include "plan.h"
#include "run.h"
#include "sampler.h"
#include "tokenizer.h"

/* Everything a mode needs, opened from the options. */
struct run_ctx {
	struct run_opts *o;
	struct ntx_model *model;
	struct ntx_vocab *vocab;
	struct ntx_plan *plan;       /* loaded or computed; may be NULL (CPU) */
	struct ntx_engine *engine;
	uint8_t *skip;               /* n_layer flags or NULL */
	uint8_t *eog;                /* n_vocab flags */
	/* --draft: the draft model, its vocabulary (checked against the
	 * target's) and its engine (resident on the target's backend) */
	struct ntx_model *dmodel;
	struct ntx_vocab *dvocab;
	struct ntx_engine *draft;
	struct ntx_outfile stats;    /* --stats-json, opened before any work */
};

/* Print "ntx-run: message" and return exit status 1 (or 2/3 by code). */
int run_fail(const struct ntx_err *err);
int run_exit_code(const struct ntx_err *err);

int run_open(struct run_ctx *c, struct ntx_err *err);
void run_close(struct run_ctx *c);

/* legacy.c (moved from modes.c): what batch.c and bench.c print. */

/* The generated text exactly as the plain mode prints it: the pieces of
 * every token but the end-of-generation ones, concatenated (no clean-up
 * pass, no leading space removed). *out is malloc'ed, NUL-terminated. */
int run_gen_text(const struct run_ctx *c, const int32_t *ids, int n, char **out, size_t *len,
		 struct ntx_err *err);

/* A JSON string of s[0..n): as is when valid UTF-8, else with every
 * invalid byte replaced by U+FFFD. NULL only when out of memory. */
json_t *run_json_text(const char *s, size_t n);

/* The CPU thread count the engine uses (-t, else every online core). */
int run_n_threads(const struct run_opts *o);

/* The engine's streaming counters: a "streaming" object added to j (when any
 * weights moved or ran on the CPU), a line on stderr. */
void run_add_streaming_json(const struct run_ctx *c, json_t *j);
void run_print_streaming(const struct run_ctx *c);
/* Write the --stats-json document (opened by main before any work: "-" =
 * stderr, a file through a temporary renamed when complete). */
int run_write_stats(struct run_ctx *c, json_t *j, struct ntx_err *err);


/* The options' sampling parameters as the sampler's. */
void run_sampler_params(const struct run_opts *o, struct ntx_sampler_params *sp);
/* The options' KV cache type as the engine's, and back. */
enum ntx_kv_type run_kv_type(const struct run_opts *o);

#endif
