/* run.h - ntx-run's options and its modes, over include/ntx.h only: no
 * file of ntx-run sees the library's internal headers (the Makefile
 * compiles them with -Iinclude -Itools/common). */
#ifndef NTX_RUN_H
#define NTX_RUN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "ntx.h"

#define PROG "ntx-run"

/* --io: how streamed layers are read */
enum run_io { RUN_IO_DIRECT = 0, RUN_IO_MMAP = 1 };

struct run_opts {
	const char *model_path;
	const char *plan_path;
	const char *prompt;          /* -p */
	const char *prompt_file;     /* -f */
	const char *prompt_ids;      /* --prompt-ids */
	const char *force_ids;       /* --force-ids (teacher forcing, tests) */
	int n_predict;
	int n_ctx;
	struct ntx_gen_params gp;     /* sampling (n_predict is above) */
	int chat;
	const char *system;
	const char *chat_template;   /* --chat-template NAME (else the model's) */
	int interactive;             /* -i / -cnv */
	enum ntx_backend_choice backend;
	int n_threads;
	enum ntx_kv_cache kv_type;   /* F16 or F32 */
	const char *stats_json;
	const char *expert_stats;    /* --expert-stats FILE: the routing counts */
	const char *dump_logits;
	int tokenize;
	int no_bos;
	int no_parse_special;
	const char *perplexity;
	const char *skip_file;
	const char *skip_layers;
	int self_spec;
	const char *draft_path;      /* --draft: a draft model of the same vocabulary */
	int lookup;                  /* --lookup N: prompt lookup n-gram size */
	int draft_k;
	const char *draft_skip;
	int batch;
	int parallel;
	int kv_type_set, parallel_set; /* given on the command line (else the plan's) */
	int json;
	enum run_io io;
	int bench;
	int bench_reps;
	int bench_pp, bench_tg;
	int ignore_eos;
	int quiet;
	int verbose;
	int gpu_index;
	/* in-memory planning when no --plan is given */
	int64_t vram_budget, ram_budget; /* bytes, -1: not given */
	const char *ram_budget_arg;      /* as given, for messages */
	const char *pack_path;
	const char *executor;
};

/* Set by the SIGINT handler; the engine polls it between layers. */
extern volatile sig_atomic_t run_interrupted;

/* Read a whole file (NULL or "-": stdin) into *text (malloc'ed, NUL-
 * terminated): 0, or the exit status (1; 130 interrupted) with the message
 * in msg[0..cap) ("path: why"). */
int run_slurp(const char *path, char **text, size_t *len, char *msg, size_t cap);

/* text[0..len) as token ids with NTX_TOKENIZE_* flags: *ids malloc'ed
 * (NULL when *n is 0). 0, or the exit status after the message. */
int run_tokenize(const struct ntx_lm *lm, const char *text, size_t len, unsigned flags,
		 int32_t **ids, int *n);
/* The same, printing nothing: *ids malloc'ed (also when *n is 0). 0, or -1
 * with e's message (empty when out of memory). */
int run_lm_tokenize(const struct ntx_lm *lm, const char *text, size_t len, unsigned flags,
		    int32_t **ids, int *n, struct ntx_error *e);

/* The prompt of -p, -f (stdin) or --prompt-ids as token ids, through
 * --chat's template: *ids malloc'ed (NULL when *n is 0). 0, or the exit
 * status after the message on stderr. */
int run_prompt_ids(const struct run_opts *o, const struct ntx_lm *lm, int32_t **ids, int *n);

/* A plan's n_ctx, KV cache type and sequences as the defaults of o, and
 * the warnings about values beyond them (stderr, unless -q). */
void run_plan_defaults(struct run_opts *o, const struct ntx_placement_info *pi);

/* What a mode over ntx.h opens (open.c): the model, its placement (NULL:
 * every layer on the backend), the draft model (--draft; NULL: none) and
 * the context, with speculative decoding set as --draft, --lookup and
 * --self-spec ask (not for -i). */
struct run_api {
	struct ntx_lm *lm;
	struct ntx_placement *pl;
	struct ntx_lm *draft;
	struct ntx_ctx *ctx;
};
/* Open them from the options, printing what ntx-run prints (the backend
 * fallen back to, -v's lines): 0, or the exit status after the message. */
int run_api_open(struct run_opts *o, struct run_api *a);
void run_api_close(struct run_api *a);
/* After a mode's run (status rc): --expert-stats's file when rc is 0;
 * the status to exit with. */
int run_expert_stats(const struct run_opts *o, struct run_api *a, int rc);
/* The context the SIGINT handler interrupts (NULL: none yet). */
extern struct ntx_ctx *volatile run_sig_ctx;

/* --perplexity FILE: "Final estimate: PPL = ..." on stdout; exit status. */
int mode_perplexity(struct run_opts *o);

/* --tokenize: the prompt's ids as a JSON array on stdout; exit status. */
int mode_tokenize(struct run_opts *o);

/* Generate from the prompt (modes.c): the text on stdout (--json: JSON
 * Lines events), timings on stderr; exit status. */
int mode_generate(struct run_opts *o);

/* -i: a conversation, a user turn per line of stdin (interactive.c); exit
 * status. */
int mode_interactive(struct run_opts *o);

/* --batch: JSON Lines requests on stdin, a record per request on stdout
 * (doc/batch-jsonl.md); exit status. */
int mode_batch(struct run_opts *o);

/* --bench: the benchmark's JSON document on stdout; exit status. */
int mode_bench(struct run_opts *o);

#endif
