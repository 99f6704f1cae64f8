/* scheduler.h - continuous batching over one engine: up to n_seq sequences
 * decode together, each in its own KV cache slot with its own sampler; one
 * step evaluates the next token of every decoding sequence and the next
 * pieces of the waiting prompts in one engine call, so each weight transfer
 * serves the whole batch. A request submitted while a slot is free starts at
 * once (ntx-run --batch, ntx-run -i, ntx-serve).
 *
 * Prefix reuse: a slot keeps the tokens whose K/V are in its cache after its
 * sequence ends. A new request goes to the free slot whose cached tokens
 * share the longest prefix with its prompt; only the rest is evaluated (at
 * least its last token, whose logits start the generation). On the CPU the
 * K/V of a token do not depend on the batch it was evaluated in, so a reused
 * prefix gives exactly what evaluating it again would: greedy output is the
 * same as the request run alone.
 *
 * Not thread-safe: one thread calls every function; the callbacks run in
 * that thread, inside ntx_sched_step() or ntx_sched_cancel(). */
#ifndef NTX_SCHEDULER_H
#define NTX_SCHEDULER_H

#include <stdint.h>

#include "engine.h"
#include "err.h"
#include "generate.h"
#include "sampler.h"

struct ntx_sched;

/* What a finished request produced (borrowed: valid during on_done). */
struct ntx_sched_result {
	const int32_t *gen;   /* generated tokens, a final end-of-generation one
			       * included (NULL when n_gen is 0) */
	int n_gen;
	int n_prompt;         /* prompt tokens */
	int n_reused;         /* of which taken from the slot's cache (not evaluated) */
	enum ntx_stop stop;   /* NTX_STOP_CALLER: on_token asked to stop; else as
			       * ntx_generate, or the reason given to cancel */
	double t_submit, t_first, t_end; /* CLOCK_MONOTONIC seconds; t_first 0
					  * when the prompt never finished */
};

/* Each generated token, as it is sampled; non-zero stops the sequence
 * (stop NTX_STOP_CALLER; the token counts as generated). */
typedef int (*ntx_sched_token_fn)(void *user, int32_t tok);
/* Exactly once for every admitted request, when it ends; its slot is free
 * when this returns. It may call ntx_sched_submit(), not step or cancel. */
typedef void (*ntx_sched_done_fn)(void *user, const struct ntx_sched_result *r);

struct ntx_sched_req {
	const int32_t *tokens;   /* the prompt (copied), 1 .. n_ctx tokens */
	int n_tokens;
	int n_predict;           /* -1: until EOG or a full context; 0: prompt only */
	int ignore_eog;          /* end-of-generation tokens do not stop it */
	struct ntx_sampler_params sp;
	ntx_sched_token_fn on_token; /* may be NULL */
	ntx_sched_done_fn on_done;   /* may be NULL */
	void *user;
};

/* A scheduler over every sequence of engine e (borrowed). eog: n_vocab flags
 * of the tokens that end generation (borrowed; NULL: none). Returns NULL and
 * fills *err when out of memory. */
struct ntx_sched *ntx_sched_new(struct ntx_engine *e, const uint8_t *eog, struct ntx_err *err);
/* Frees everything; no callback is called (cancel requests first). NULL ok. */
void ntx_sched_free(struct ntx_sched *s);

/* Start a request in a free slot. Returns its id (>= 0, never reused), or -1
 * and *err: NTX_EINVAL for an empty prompt, a prompt longer than the
 * context, bad sampling parameters; NTX_ENOFIT when no slot is free. */
int64_t ntx_sched_submit(struct ntx_sched *s, const struct ntx_sched_req *r, struct ntx_err *err);

/* One step over every active request (nothing when none). Returns 0, or -1
 * and *err for an engine error (NTX_EINTR when interrupted): the requests
 * stay active, their slots' caches forgotten; cancel them or step again. */
int ntx_sched_step(struct ntx_sched *s, struct ntx_err *err);

/* End request id now: on_done is called with stop = why and what it has so
 * far. Returns 0, or -1 when id is not active. */
int ntx_sched_cancel(struct ntx_sched *s, int64_t id, enum ntx_stop why);
/* Cancel every active request (oldest first). */
void ntx_sched_cancel_all(struct ntx_sched *s, enum ntx_stop why);

int ntx_sched_n_slots(const struct ntx_sched *s);
int ntx_sched_n_active(const struct ntx_sched *s);
static inline int ntx_sched_n_free(const struct ntx_sched *s)
{
	return ntx_sched_n_slots(s) - ntx_sched_n_active(s);
}

/* Speculative decoding for every request (ntx-run --batch --draft/--lookup):
 * draft: a draft model's engine of the same vocabulary with at least as many
 * sequences and as large a context (borrowed; NULL: none); lookup: prompt
 * lookup n-gram size (0: off); draft_k: K (1..NTX_SPEC_KMAX); adaptive:
 * choose K every step from measured acceptance and costs, up to 8, and
 * pause drafting while it does not pay (one K for every sequence of a step;
 * spec.h). Each
 * decoding sequence drafts up to K tokens (a lookup match first, else the
 * draft model; drafting runs for all sequences together, one draft position
 * per evaluation), then one verification evaluation checks every sequence's
 * drafts (each row as if decoded alone): greedy output stays that of the
 * request run alone, sampled output keeps the target's distribution.
 * Returns 0, or -1 and *err (bad arguments, out of memory). Call before the
 * first submit. */
int ntx_sched_set_spec(struct ntx_sched *s, struct ntx_engine *draft, int lookup, int draft_k,
		       int adaptive, struct ntx_err *err);

/* Totals since ntx_sched_new. */
struct ntx_sched_stats {
	int64_t n_requests;      /* admitted */
	int64_t n_prompt;        /* prompt tokens of those */
	int64_t n_reused;        /* of which reused from a slot's cache */
	int64_t n_gen;           /* tokens generated */
	int64_t n_steps;         /* engine calls */
	/* speculative decoding: drafts made and accepted, verification steps,
	 * draft model evaluations, seconds drafting and verifying */
	int64_t n_drafted, n_accepted, n_verify_steps, n_draft_evals;
	double t_draft_s, t_verify_s;
	/* adaptive K: verification steps without a draft model evaluation
	 * (without lookup drafts, when there is no draft model) because
	 * drafting did not pay (spec.h) */
	int64_t n_paused_steps;
};
void ntx_sched_get_stats(const struct ntx_sched *s, struct ntx_sched_stats *st);

/* The length of the longest common prefix of a[0..na) and b[0..nb). */
int ntx_sched_common_prefix(const int32_t *a, int na, const int32_t *b, int nb);

#endif
