/* api_int.h - what the parts of the public API (api.c: errors, models,
 * tokenizer, placements; api_ctx.c: contexts, generation, batches;
 * api_run.c: chat prompts, streaming text, request options, speculative
 * decoding; api_tool_run.c: ntx-run's calls; api_gen.c: generate
 * details; api_batch.c: batch request lines, cancelling every request;
 * api_bench.c: the bench) share. Not installed. */
#ifndef NTX_API_INT_H
#define NTX_API_INT_H

#include "ntx.h"
#include "err.h"
#include "model.h"
#include "engine.h"
#include "plan.h"
#include "scheduler.h"
#include "tokenizer.h"

#include <signal.h>

struct ntx_error {
	enum ntx_status status;
	char msg[NTX_ERR_MAX];
};

struct ntx_lm {
	struct ntx_model *m;   /* owned */
	struct ntx_vocab *v;   /* owned */
	uint8_t *eog;          /* n_vocab flags, owned */
	uint64_t n_params;
};

struct ntx_placement {
	struct ntx_plan *p;    /* owned */
};

struct req;

struct ntx_ctx {
	const struct ntx_lm *lm;
	struct ntx_engine *e;
	struct ntx_sched *sched;    /* NULL until the first submit */
	struct req *reqs;
	volatile sig_atomic_t intr; /* ntx_ctx_interrupt */
	struct ntx_sched_stats done_st; /* counts of schedulers dropped */
	enum ntx_kv_type kv_type;   /* as made, for a draft engine */
	int n_threads, gpu_index;
	/* ntx_ctx_set_spec (api_run.c): off when neither draft nor lookup */
	struct ntx_engine *draft;   /* owned */
	int lookup, draft_k;        /* draft_k 0: adaptive */
	int64_t gen_drafted, gen_accepted; /* by ntx_ctx_generate */
	/* 0.5 (api_gen.c): self-speculation's draft, the placement it is
	 * taken from (borrowed) */
	uint8_t *self_mask;         /* n_layer flags: layers the draft skips;
				     * NULL: off; owned */
	const struct ntx_plan *plan;
	uint8_t *skip;              /* n_layer flags or NULL (0.4), owned */
	char note[200];             /* ntx_ctx_fallback_note */
};

/* Drop ctx's scheduler (its slots' caches are forgotten), keeping its
 * counts; the next submit makes a new one. */
void ntx_api_drop_sched(struct ntx_ctx *c);

/* ntx_lm_open with ntx_model_open's flags (NTX_MODEL_VOCAB_ONLY:
 * ntx_lm_open_vocab); what names the call in messages. */
enum ntx_status ntx_api_lm_open(const char *path, unsigned model_flags, const char *what,
				struct ntx_lm **out, struct ntx_error *e);

/* ---- api_gen.c: generate details (0.5) ---- */

struct ntx_gen_opts;
struct ntx_gen_stats;

/* ntx_gen_params.on_logits as the engine's logits callback. */
struct ntx_api_logits {
	int (*fn)(void *user, const float *logits, int32_t n_vocab);
	void *user;
};
/* The 0.5 parameters x (checked) and the context's self-speculation into
 * go; lg is go's logits bridge and must outlive the generation. */
enum ntx_status ntx_api_gen_details(const struct ntx_ctx *c, const struct ntx_gen_params *x,
				    struct ntx_gen_opts *go, struct ntx_api_logits *lg,
				    struct ntx_error *e);
/* NTX_OK unless x or the context holds what only ntx_ctx_generate does. */
enum ntx_status ntx_api_request_check(const struct ntx_ctx *c, const struct ntx_gen_params *x,
				      struct ntx_error *e);
/* The 0.5 fields of r from st. */
void ntx_api_gen_result(struct ntx_gen_result *r, const struct ntx_gen_stats *st);
/* Self-speculation's mask from x (self_spec set; the draft model not):
 * *mask (malloc'ed) or an error. */
enum ntx_status ntx_api_self_mask(const struct ntx_ctx *c, const struct ntx_spec_params *x,
				  uint8_t **mask, struct ntx_error *e);
/* The 0.5 streaming fields of st. */
void ntx_api_stats_streaming(const struct ntx_ctx *c, struct ntx_ctx_stats *st);

/* Store an internal error in e (may be NULL); returns its status. */
enum ntx_status ntx_api_fail(struct ntx_error *e, const struct ntx_err *ie);
/* Store status s and a message in e; returns s. */
enum ntx_status ntx_api_set(struct ntx_error *e, enum ntx_status s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A versioned input struct: defaults (dst, dst_size bytes, already filled)
 * overwritten by the caller's first src->size bytes. what names it in the
 * message when src->size is too small to hold the size field. */
enum ntx_status ntx_api_struct_in(void *dst, size_t dst_size, const void *src, const char *what,
				  struct ntx_error *e);
/* A caller's backend choice: NTX_OK, or NTX_STATUS_INVALID naming it. */
enum ntx_status ntx_api_backend_in(enum ntx_backend_choice b, struct ntx_error *e);
/* A versioned output struct: the first min(dst->size, src_size) bytes of
 * src (the size field kept). */
enum ntx_status ntx_api_struct_out(void *dst, const void *src, size_t src_size, const char *what,
				   struct ntx_error *e);

#endif
