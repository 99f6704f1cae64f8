/* report.h - what ntx-run's modes over ntx.h write besides their product:
 * the --stats-json document ("-": standard error), the engine's streaming
 * counters (a JSON object, a line on stderr), the thread count, and
 * generated text as a JSON string. */
#ifndef NTX_RUN_REPORT_H
#define NTX_RUN_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "run.h"

/* --stats-json, opened before any work: an unwritable path fails first. */
struct run_stats {
	const char *path;        /* NULL: no --stats-json */
	FILE *f;                 /* "-": standard error, written in place */
	struct ntx_output *out;  /* a file, replaced only when complete */
};

/* Open o->stats_json (nothing without it): 0, or the exit status after
 * the message. */
int run_stats_open(const struct run_opts *o, struct run_stats *s);
/* Write j, indented by 2 with a trailing newline, and close: 0, or 1 after
 * the message ("ntx-run: PATH: why"). Nothing without --stats-json. */
int run_stats_write(struct run_stats *s, const json_t *j);
/* Close without writing (a file keeps its old contents). */
void run_stats_close(struct run_stats *s);

/* The "streaming" object of the --stats-json documents, added to j when
 * any weights were copied, read or computed on the CPU. */
void run_streaming_json(const struct ntx_ctx_stats *st, json_t *j);
/* The "ntx-run: streaming: ..." line on stderr, when weights moved (or
 * layers ran on the CPU beside a GPU). */
void run_streaming_print(const struct ntx_ctx_stats *st);

/* The CPU threads the context computes with (-t, else every online core). */
int run_threads(const struct run_opts *o);

/* The generated text of ids[0..n) as a JSON string: the pieces of every
 * token but the end-of-generation ones (all of them with keep_eog)
 * concatenated, exactly as the plain mode prints them, each byte that is
 * not valid UTF-8 as U+FFFD (JSON carries only UTF-8). d: a detokenizer
 * with NTX_DETOKENIZER_REPLACE_INVALID, reused. NULL with e set (or e's
 * message empty when out of memory). */
json_t *run_text_json(struct ntx_detokenizer *d, const struct ntx_lm *lm, const int32_t *ids,
		      int n, int keep_eog, struct ntx_error *e);

#endif
