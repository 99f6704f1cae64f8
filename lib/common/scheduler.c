/* scheduler.c - continuous batching with prefix reuse (see scheduler.h).
 *
 * A slot is FREE, PREFILL (prompt pieces still to evaluate) or DECODE (one
 * sampled token, cur, waiting to be evaluated). Every slot also keeps
 * cache[0..n_cache): the tokens whose K/V are in its KV cache, in order; it
 * outlives the request and is what a later request's prompt is compared
 * with. A step puts every decoding slot's cur and the next prompt pieces
 * (oldest request first, while they fit in the ubatch) in one engine call;
 * the rows that come back are sampled in row order. */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum slot_state { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE };

struct slot {
	enum slot_state state;
	int64_t id;               /* the request's id (submission order) */
	struct ntx_sched_req req; /* callbacks and parameters; tokens points to prompt */
	int32_t *prompt;
	int n_prompt, n_fed;      /* prompt tokens and how many are in the cache */
	int n_reused;
	int32_t *gen;
	int n_gen, cap_gen;
	int32_t cur;              /* sampled, not yet evaluated */
	int n_past;
	struct ntx_sampler *smp;
	double t_submit, t_first;
	enum ntx_stop stop;
	int in_step;              /* its prompt piece is in this step: 1 shared, 2 alone */
	int32_t *cache;           /* [n_ctx] tokens whose K/V are in the slot */
	int n_cache;
	int64_t last_used;        /* id of the last request in this slot (LRU) */
};

struct ntx_sched {
	struct ntx_engine *e;
	const uint8_t *eog;
	struct slot *slots;
	int n_slots, n_active;
	int64_t V;
	int n_ctx, n_ub, n_cut;
	int64_t next_id;
	int32_t *tok, *pos, *seq;
	uint8_t *want;
	int *row_slot;
	float *logits;
	int32_t *ids;             /* [n_slots] argmax rows, when every row's sampler is argmax */
	int top1;                 /* the last eval returned ids, not logits */
	int first;                /* slot the next step's decode tokens start at */
	struct ntx_sched_stats st;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct ntx_sched *ntx_sched_new(struct ntx_engine *e, const uint8_t *eog, struct ntx_err *err)
{
	struct ntx_sched *s = calloc(1, sizeof *s);
	int i, ok;

	if (!s) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	s->e = e;
	s->eog = eog;
	s->n_slots = ntx_engine_n_seq(e);
	s->V = ntx_engine_n_vocab(e);
	s->n_ctx = ntx_engine_n_ctx(e);
	s->n_ub = ntx_engine_n_ubatch(e);
	s->n_cut = ntx_engine_prompt_chunk(e);
	s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
	s->tok = malloc((size_t)s->n_ub * sizeof *s->tok);
	s->pos = malloc((size_t)s->n_ub * sizeof *s->pos);
	s->seq = malloc((size_t)s->n_ub * sizeof *s->seq);
	s->want = malloc((size_t)s->n_ub);
	s->row_slot = malloc((size_t)s->n_ub * sizeof *s->row_slot);
	s->logits = malloc((size_t)s->n_slots * (size_t)s->V * sizeof(float));
	s->ids = malloc((size_t)s->n_slots * sizeof *s->ids);
	ok = s->slots && s->tok && s->pos && s->seq && s->want && s->row_slot && s->logits && s->ids;
	for (i = 0; ok && i < s->n_slots; i++) {
		s->slots[i].cache = malloc((size_t)s->n_ctx * sizeof(int32_t));
		ok = s->slots[i].cache != NULL;
	}
	if (!ok) {
		ntx_sched_free(s);
		ntx_err_set(err, NTX_ENOMEM, "out of memory for %d sequences", ntx_engine_n_seq(e));
		return NULL;
	}
	return s;
}

/* Forget the request in s (the cache stays). */
static void slot_release(struct ntx_sched *sc, struct slot *s)
{
	free(s->prompt);
	free(s->gen);
	ntx_sampler_free(s->smp);
	s->prompt = s->gen = NULL;
	s->smp = NULL;
	s->n_prompt = s->n_fed = s->n_gen = s->cap_gen = s->n_past = s->n_reused = 0;
	s->in_step = 0;
	s->stop = NTX_STOP_NONE;
	memset(&s->req, 0, sizeof s->req);
	if (s->state != SLOT_FREE)
		sc->n_active--;
	s->state = SLOT_FREE;
}

void ntx_sched_free(struct ntx_sched *s)
{
	int i;

	if (!s)
		return;
	for (i = 0; s->slots && i < s->n_slots; i++) {
		slot_release(s, &s->slots[i]);
		free(s->slots[i].cache);
	}
	free(s->slots);
	free(s->tok);
	free(s->pos);
	free(s->seq);
	free(s->want);
	free(s->row_slot);
	free(s->logits);
	free(s->ids);
	free(s);
}

int ntx_sched_common_prefix(const int32_t *a, int na, const int32_t *b, int nb)
{
	int i, n = na < nb ? na : nb;

	for (i = 0; i < n && a[i] == b[i]; i++)
		;
	return i;
}

/* The free slot for a prompt: the longest common prefix with its cache, then
 * the least recently used. -1 when none is free. */
static int pick_slot(const struct ntx_sched *sc, const int32_t *p, int n, int *lcp)
{
	int i, best = -1, best_l = -1;

	for (i = 0; i < sc->n_slots; i++) {
		const struct slot *s = &sc->slots[i];
		int l;

		if (s->state != SLOT_FREE)
			continue;
		l = ntx_sched_common_prefix(s->cache, s->n_cache, p, n);
		if (l > best_l || (l == best_l && s->last_used < sc->slots[best].last_used)) {
			best = i;
			best_l = l;
		}
	}
	*lcp = best_l;
	return best;
}

int64_t ntx_sched_submit(struct ntx_sched *sc, const struct ntx_sched_req *r, struct ntx_err *err)
{
	struct slot *s;
	int i, lcp;

	if (r->n_tokens <= 0)
		return ntx_err_set(err, NTX_EINVAL, "the prompt is empty");
	/* the same limit as a single prompt: it may fill the context */
	if (r->n_tokens > sc->n_ctx)
		return ntx_err_set(err, NTX_EINVAL,
				   "the prompt has %d tokens, more than the context size %d (use -c)",
				   r->n_tokens, sc->n_ctx);
	for (i = 0; i < r->n_tokens; i++)
		if (r->tokens[i] < 0 || r->tokens[i] >= sc->V)
			return ntx_err_set(err, NTX_EINVAL, "token id %d is out of range [0, %lld)",
					   r->tokens[i], (long long)sc->V);
	i = pick_slot(sc, r->tokens, r->n_tokens, &lcp);
	if (i < 0)
		return ntx_err_set(err, NTX_ENOFIT, "no free sequence slot (%d in use)", sc->n_slots);
	s = &sc->slots[i];
	s->prompt = malloc((size_t)r->n_tokens * sizeof *s->prompt);
	if (!s->prompt)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	s->smp = ntx_sampler_new(&r->sp, sc->V, err);
	if (!s->smp) {
		free(s->prompt);
		s->prompt = NULL;
		return -1;
	}
	memcpy(s->prompt, r->tokens, (size_t)r->n_tokens * sizeof *s->prompt);
	s->req = *r;
	s->req.tokens = s->prompt;
	s->n_prompt = r->n_tokens;
	/* keep at least the last prompt token to evaluate: its logits start
	 * the generation */
	s->n_reused = lcp < s->n_prompt ? lcp : s->n_prompt - 1;
	s->n_fed = s->n_reused;
	s->n_cache = s->n_reused;
	ntx_engine_kv_truncate(sc->e, i, s->n_reused);
	s->id = s->last_used = sc->next_id++;
	s->state = SLOT_PREFILL;
	s->t_submit = now_s();
	s->t_first = 0;
	sc->n_active++;
	sc->st.n_requests++;
	sc->st.n_prompt += s->n_prompt;
	sc->st.n_reused += s->n_reused;
	for (i = 0; i < s->n_prompt; i++)
		ntx_sampler_accept(s->smp, s->prompt[i]);
	return s->id;
}

/* Call on_done and free the slot (its cache stays). */
static void finish(struct ntx_sched *sc, struct slot *s)
{
	struct ntx_sched_result r;

	r.gen = s->gen;
	r.n_gen = s->n_gen;
	r.n_prompt = s->n_prompt;
	r.n_reused = s->n_reused;
	r.stop = s->stop;
	r.t_submit = s->t_submit;
	r.t_first = s->t_first;
	r.t_end = now_s();
	if (s->req.on_done) {
		ntx_sched_done_fn done = s->req.on_done;
		void *user = s->req.user;

		/* the slot is free before the callback: it may submit */
		s->gen = NULL;
		slot_release(sc, s);
		done(user, &r);
		free((void *)r.gen);
		return;
	}
	slot_release(sc, s);
}

/* ---- steps ---- */

static int push_gen(struct slot *s, int32_t t, struct ntx_err *err)
{
	if (s->n_gen == s->cap_gen) {
		int cap = s->cap_gen ? s->cap_gen * 2 : 64;
		int32_t *g = realloc(s->gen, (size_t)cap * sizeof *g);

		if (!g)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		s->gen = g;
		s->cap_gen = cap;
	}
	s->gen[s->n_gen++] = t;
	return 0;
}

/* Sample the next token of each slot whose row came back, in row order, and
 * finish the slots that stop. */
static int take_rows(struct ntx_sched *sc, int nr, struct ntx_err *err)
{
	int i;

	for (i = 0; i < nr; i++) {
		struct slot *s = &sc->slots[sc->row_slot[i]];
		const float *row = sc->logits + (int64_t)i * sc->V;
		int32_t t;

		if (s->state == SLOT_PREFILL) {
			s->state = SLOT_DECODE;
			s->n_past = s->n_prompt;
			s->t_first = now_s();
			if (s->req.n_predict == 0) { /* the prompt only, as -n 0 */
				s->stop = NTX_STOP_LENGTH;
				finish(sc, s);
				continue;
			}
		} else {
			s->n_past++;
			s->cache[s->n_cache++] = s->cur;
		}
		t = sc->top1 ? sc->ids[i] : ntx_sampler_sample(s->smp, row);
		ntx_sampler_accept(s->smp, t);
		if (push_gen(s, t, err))
			return -1;
		sc->st.n_gen++;
		s->cur = t;
		/* the order of ntx_generate: the caller, end of generation,
		 * then length, then a full context (t would not fit) */
		if (s->req.on_token && s->req.on_token(s->req.user, t))
			s->stop = NTX_STOP_CALLER;
		else if (sc->eog && sc->eog[t] && !s->req.ignore_eog)
			s->stop = NTX_STOP_EOG;
		else if (s->req.n_predict >= 0 && s->n_gen >= s->req.n_predict)
			s->stop = NTX_STOP_LENGTH;
		else if (s->n_past >= sc->n_ctx)
			s->stop = NTX_STOP_CONTEXT;
		if (s->stop)
			finish(sc, s);
	}
	return 0;
}

/* The end of the next piece of s's prompt: prompts are cut at multiples of
 * the engine's prompt chunk, as ntx_generate cuts a prompt run alone. */
static int piece_end(const struct ntx_sched *sc, const struct slot *s)
{
	int end = (s->n_fed / sc->n_cut + 1) * sc->n_cut;

	return end < s->n_prompt ? end : s->n_prompt;
}

/* Append the next piece of slot i's prompt to the step's tokens at *n. */
static void add_piece(struct ntx_sched *sc, int i, int *n, int *nr)
{
	struct slot *s = &sc->slots[i];
	int k, end = piece_end(sc, s);

	for (k = s->n_fed; k < end; k++, (*n)++) {
		sc->tok[*n] = s->prompt[k];
		sc->pos[*n] = k;
		sc->seq[*n] = i;
		sc->want[*n] = k == s->n_prompt - 1;
	}
	if (end == s->n_prompt)
		sc->row_slot[(*nr)++] = i;
}

/* After a successful eval: the pieces are in the caches. */
static void commit_pieces(struct ntx_sched *sc, int n)
{
	int k;

	for (k = 0; k < n; k++) {
		struct slot *s = &sc->slots[sc->seq[k]];

		if (s->state == SLOT_PREFILL && sc->pos[k] == s->n_fed) {
			s->cache[s->n_cache++] = sc->tok[k];
			s->n_fed++;
		}
	}
}

/* An engine error: what the failed call wrote is unknown, so no slot's
 * cache can be trusted. */
static void forget_caches(struct ntx_sched *sc)
{
	int i;

	for (i = 0; i < sc->n_slots; i++) {
		struct slot *s = &sc->slots[i];

		s->n_cache = 0;
		if (s->state != SLOT_FREE) {
			/* a prefill restarts from 0; a decode cannot go on
			 * without its cache: the caller cancels it */
			s->n_fed = 0;
			s->n_reused = 0;
			ntx_engine_kv_truncate(sc->e, i, 0);
		}
	}
}

static int eval_step(struct ntx_sched *sc, int n, int nr, struct ntx_err *err)
{
	struct ntx_batch nb;
	int i;

	memset(&nb, 0, sizeof nb);
	nb.n_tok = n;
	nb.tok = sc->tok;
	nb.pos = sc->pos;
	nb.seq = sc->seq;
	nb.want = sc->want;
	/* greedy rows only: the engine hands back argmax ids, no logits */
	sc->top1 = 1;
	for (i = 0; i < nr; i++)
		sc->top1 &= ntx_sampler_is_argmax(sc->slots[sc->row_slot[i]].smp);
	nb.ids = sc->top1 ? sc->ids : NULL;
	sc->st.n_steps++;
	if (ntx_engine_eval(sc->e, &nb, NULL, sc->top1 ? NULL : sc->logits, err)) {
		forget_caches(sc);
		return -1;
	}
	commit_pieces(sc, n);
	return take_rows(sc, nr, err);
}

/* The waiting prompt of the oldest request not yet in this step, or -1. */
static int oldest_prefill(const struct ntx_sched *sc)
{
	int i, best = -1;

	for (i = 0; i < sc->n_slots; i++) {
		const struct slot *s = &sc->slots[i];

		if (s->state == SLOT_PREFILL && !s->in_step &&
		    (best < 0 || s->id < sc->slots[best].id))
			best = i;
	}
	return best;
}

/* One step: the next token of every decoding slot and the next piece of the
 * waiting prompts, oldest request first while they fit in the engine's
 * ubatch, in one evaluation. A piece that could not fit even with the decode
 * tokens alone goes in an evaluation of its own; the others wait for the
 * next step. The engine gives decode tokens and each prompt piece (a prompt
 * segment, struct ntx_batch) the results they get alone, and pieces are cut
 * as when the request runs alone, so each sequence's output equals running
 * it alone. */
int ntx_sched_step(struct ntx_sched *sc, struct ntx_err *err)
{
	int n = 0, nr = 0, n_dec, i, j;

	/* decode tokens from a rotating start: with more slots than the
	 * ubatch holds, every slot gets its turn */
	for (j = 0; j < sc->n_slots; j++) {
		struct slot *s = &sc->slots[i = (sc->first + j) % sc->n_slots];

		s->in_step = 0;
		if (s->state == SLOT_DECODE && n < sc->n_ub) {
			sc->tok[n] = s->cur;
			sc->pos[n] = s->n_past;
			sc->seq[n] = i;
			sc->want[n] = 1;
			sc->row_slot[nr++] = i;
			n++;
		}
	}
	n_dec = n;
	sc->first = (sc->first + n) % sc->n_slots;
	while ((i = oldest_prefill(sc)) >= 0) {
		struct slot *s = &sc->slots[i];
		int k = piece_end(sc, s) - s->n_fed;

		if (n + k > sc->n_ub && n_dec + k <= sc->n_ub)
			break; /* fits in a later step */
		if (n + k <= sc->n_ub) {
			add_piece(sc, i, &n, &nr);
			s->in_step = 1;
		} else {
			s->in_step = 2; /* too large to share a step with the decode tokens */
		}
	}
	if (n && eval_step(sc, n, nr, err))
		return -1;
	for (i = 0; i < sc->n_slots; i++) {
		if (sc->slots[i].in_step != 2 || sc->slots[i].state != SLOT_PREFILL)
			continue;
		n = nr = 0;
		add_piece(sc, i, &n, &nr);
		if (eval_step(sc, n, nr, err))
			return -1;
	}
	return 0;
}

int ntx_sched_cancel(struct ntx_sched *sc, int64_t id, enum ntx_stop why)
{
	int i;

	for (i = 0; i < sc->n_slots; i++) {
		struct slot *s = &sc->slots[i];

		if (s->state != SLOT_FREE && s->id == id) {
			s->stop = why;
			finish(sc, s);
			return 0;
		}
	}
	return -1;
}

void ntx_sched_cancel_all(struct ntx_sched *sc, enum ntx_stop why)
{
	for (;;) {
		int i, best = -1;

		for (i = 0; i < sc->n_slots; i++)
			if (sc->slots[i].state != SLOT_FREE &&
			    (best < 0 || sc->slots[i].id < sc->slots[best].id))
				best = i;
		if (best < 0)
			return;
		sc->slots[best].stop = why;
		finish(sc, &sc->slots[best]);
	}
}

int ntx_sched_n_slots(const struct ntx_sched *sc)
{
	return sc->n_slots;
}

int ntx_sched_n_active(const struct ntx_sched *sc)
{
	return sc->n_active;
}

void ntx_sched_get_stats(const struct ntx_sched *sc, struct ntx_sched_stats *st)
{
	*st = sc->st;
}
