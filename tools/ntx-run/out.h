/* out.h - what ntx-run's modes over ntx.h print besides their product
 * (out.c): the --stats-json document, failed calls, the names and counters
 * of generation. ntx.h and jansson only. */
#ifndef NTX_RUN_OUT_H
#define NTX_RUN_OUT_H

#include <jansson.h>
#include <stddef.h>

#include "run.h"

/* "ntx-run: message" for a failed call (nothing for an interrupt): the
 * exit status, 3 for a model that does not fit, 130 interrupted, else 1. */
int run_err(const struct ntx_error *e);

/* --stats-json, opened before any work so that an unwritable path fails
 * first: "-" is stderr (written as it is, not replaced), a file is written
 * under a temporary name and replaced when complete (ntx_output_*). */
struct run_stats {
	struct ntx_output *out;   /* NULL: none, or stderr */
	int to_stderr;
};
/* Nothing without --stats-json. 0, or the exit status after the message. */
int run_stats_open(const struct run_opts *o, struct run_stats *s);
/* j indented, a newline, then the file committed; nothing when none was
 * opened. 0, or the exit status after the message. */
int run_stats_commit(const struct run_opts *o, struct run_stats *s, const json_t *j);
/* Drop the file (a temporary left by a failure is removed). */
void run_stats_abort(struct run_stats *s);

/* ntx-run's word for how generation ended: "eos", "length", "context",
 * "closed" (the token callback stopped it), "interrupted". */
const char *run_finish_name(enum ntx_finish f);
/* "cpu" or "cuda". */
const char *run_backend_name(enum ntx_backend_choice b);
/* The CPU thread count a context uses (-t, else every online core). */
int run_threads(const struct run_opts *o);

/* The streaming counters of st: a "streaming" object added to j (when any
 * weights moved or ran on the CPU), a line on stderr (when weights moved,
 * or the CPU computed layers beside the GPU). */
void run_streaming_json(const struct ntx_ctx_stats *st, json_t *j);
/* Per MoE layer the router's choices, the CPU experts' share (the expert
 * split) and the expert cache's hit rate (experts on disk): an "experts"
 * object added to j; nothing for a dense model. */
void run_experts_json(const struct ntx_lm *lm, const struct ntx_ctx *ctx, json_t *j);
void run_streaming_line(const struct ntx_ctx_stats *st);

/* Is id a token that ends generation here (not with --ignore-eos)? Such
 * tokens are not printed. */
int run_is_eog(const struct run_opts *o, const struct ntx_lm *lm, int32_t id);
/* The generated text exactly as the plain mode prints it: the pieces of
 * every token but run_is_eog's, concatenated (no clean-up pass). *out
 * malloc'ed and NUL-terminated. 0, or the exit status after the message. */
int run_text(const struct run_opts *o, const struct ntx_lm *lm, const int32_t *ids, int n,
	     char **out, size_t *len);
/* The same text as a JSON string, each byte that is not valid UTF-8 as
 * U+FFFD (JSON carries only UTF-8). d: a detokenizer made with
 * NTX_DETOKENIZER_REPLACE_INVALID, reused (it starts anew after the call);
 * NULL: one is made for the call. NULL when an id is out of range (e set)
 * or out of memory (e's message empty; e may be NULL). */
json_t *run_text_json(const struct run_opts *o, struct ntx_detokenizer *d,
		      const struct ntx_lm *lm, const int32_t *ids, int n, struct ntx_error *e);

#endif
