/* scheduler.c - continuous batching with prefix reuse (see scheduler.h).
 *
 * A slot is FREE, PREFILL (prompt pieces still to evaluate) or DECODE (one
 * sampled token, cur, waiting to be evaluated). Every slot also keeps
 * cache[0..n_cache): the tokens whose K/V are in its KV cache, in order; it
 * outlives the request and is what a later request's prompt is compared
 * with. A step puts every decoding slot's cur and the next prompt pieces
 * (oldest request first, while they fit in the ubatch) in one engine call;
 * the rows that come back are sampled in row order. */
#include "clock.h"
#include "scheduler.h"
#include "spec.h"

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
	int d_past;               /* of those, in the draft model's cache */
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
	/* speculative decoding (ntx_sched_set_spec) */
	int spec;                 /* on */
	struct ntx_engine *draft;
	int lookup, k_fixed, kmax;
	struct ntx_spec_tuner tun[2]; /* K of lookup drafts, of model drafts */
	int kl, km;               /* this step's K of each (0: paused) */
	double t_tok;             /* the tuner's drafting time per drafted token after a
				   * catch-up (0 unknown), or -1: the slot's share */
	int *sl;                  /* [n_slots] the decoding slots of a step */
	int *dk, *dsrc, *dwant;   /* [n_slots] drafts, their source, model K */
	int32_t *d;               /* [n_slots * (kmax + 1)]: cur, then the drafts */
	int32_t *vtok, *vpos, *vseq, *vids; /* [n_slots * (kmax + 1)] */
	uint8_t *vwant;
	float *vlogits;           /* [n_slots * (kmax + 1) * V] verification rows */
	float *q;                 /* [n_slots * kmax * V] draft probability rows */
	float *dlogits;           /* [n_slots * V] draft model rows */
	float *p;                 /* [V] */
};

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
	free(s->sl);
	free(s->dk);
	free(s->dsrc);
	free(s->dwant);
	free(s->d);
	free(s->vtok);
	free(s->vpos);
	free(s->vseq);
	free(s->vids);
	free(s->vwant);
	free(s->vlogits);
	free(s->q);
	free(s->dlogits);
	free(s->p);
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
	if (s->d_past > s->n_reused)
		s->d_past = s->n_reused;
	ntx_engine_kv_truncate(sc->e, i, s->n_reused);
	s->id = s->last_used = sc->next_id++;
	s->state = SLOT_PREFILL;
	s->t_submit = ntx_now_s();
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
	r.t_end = ntx_now_s();
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

/* t was sampled for s (after n_past evaluated tokens): record it, tell the
 * caller, and finish s when it stops. Returns 1 when s finished, 0 when it
 * goes on, -1 on an error. */
static int emit(struct ntx_sched *sc, struct slot *s, int32_t t, struct ntx_err *err)
{
	ntx_sampler_accept(s->smp, t);
	if (push_gen(s, t, err))
		return -1;
	sc->st.n_gen++;
	s->cur = t;
	/* the order of ntx_generate: the caller, end of generation, then
	 * length, then a full context (t would not fit) */
	if (s->req.on_token && s->req.on_token(s->req.user, t))
		s->stop = NTX_STOP_CALLER;
	else if (sc->eog && sc->eog[t] && !s->req.ignore_eog)
		s->stop = NTX_STOP_EOG;
	else if (s->req.n_predict >= 0 && s->n_gen >= s->req.n_predict)
		s->stop = NTX_STOP_LENGTH;
	else if (s->n_past >= sc->n_ctx)
		s->stop = NTX_STOP_CONTEXT;
	if (!s->stop)
		return 0;
	finish(sc, s);
	return 1;
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
			s->t_first = ntx_now_s();
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
		if (emit(sc, s, t, err) < 0)
			return -1;
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
		s->d_past = 0;
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

/* ---- speculative steps ---- */

enum { SRC_NONE, SRC_LOOKUP, SRC_MODEL };

#define SPEC_KMAX_BATCH 8 /* the adaptive K's bound in a batch */

int ntx_sched_set_spec(struct ntx_sched *sc, struct ntx_engine *draft, int lookup, int draft_k,
		       int adaptive, struct ntx_err *err)
{
	size_t ns = (size_t)sc->n_slots, w, V = (size_t)sc->V;

	if (sc->spec || sc->n_active)
		return ntx_err_set(err, NTX_EINVAL, "speculative decoding is set before any request");
	if (draft_k < 1 || draft_k > NTX_SPEC_KMAX || lookup < 0 || (!draft && !lookup))
		return ntx_err_set(err, NTX_EINVAL, "speculative decoding needs a draft or lookup and K in 1..%d",
				   NTX_SPEC_KMAX);
	if (draft && (ntx_engine_n_seq(draft) < sc->n_slots ||
		      ntx_engine_n_vocab(draft) != sc->V))
		return ntx_err_set(err, NTX_EINVAL,
				   "the draft engine needs %d sequences and %lld tokens (it has %d and %lld)",
				   sc->n_slots, (long long)sc->V, ntx_engine_n_seq(draft),
				   (long long)ntx_engine_n_vocab(draft));
	sc->draft = draft;
	sc->lookup = lookup;
	sc->k_fixed = adaptive ? 0 : draft_k;
	sc->kmax = adaptive ? (draft_k > SPEC_KMAX_BATCH ? draft_k : SPEC_KMAX_BATCH) : draft_k;
	ntx_spec_tuner_init(&sc->tun[0], sc->kmax, adaptive && draft_k > sc->kmax ? sc->kmax : draft_k);
	ntx_spec_tuner_init(&sc->tun[1], sc->kmax, adaptive && draft_k > sc->kmax ? sc->kmax : draft_k);
	sc->tun[0].pause = sc->tun[1].pause = ntx_engine_tunables(sc->e)->spec_backoff;
	w = ns * (size_t)(sc->kmax + 1);
	sc->sl = malloc(ns * sizeof *sc->sl);
	sc->dk = malloc(ns * sizeof *sc->dk);
	sc->dsrc = malloc(ns * sizeof *sc->dsrc);
	sc->dwant = malloc(ns * sizeof *sc->dwant);
	sc->d = malloc(w * sizeof *sc->d);
	sc->vtok = malloc(w * sizeof *sc->vtok);
	sc->vpos = malloc(w * sizeof *sc->vpos);
	sc->vseq = malloc(w * sizeof *sc->vseq);
	sc->vids = malloc(w * sizeof *sc->vids);
	sc->vwant = malloc(w);
	sc->vlogits = malloc(w * V * sizeof(float));
	sc->q = malloc(ns * (size_t)sc->kmax * V * sizeof(float));
	sc->dlogits = malloc(ns * V * sizeof(float));
	sc->p = malloc(V * sizeof(float));
	if (!sc->sl || !sc->dk || !sc->dsrc || !sc->dwant || !sc->d || !sc->vtok || !sc->vpos ||
	    !sc->vseq || !sc->vids || !sc->vwant || !sc->vlogits || !sc->q || !sc->dlogits || !sc->p)
		return ntx_err_set(err, NTX_ENOMEM,
				   "out of memory for speculative decoding of %d sequences (K %d)",
				   sc->n_slots, sc->kmax);
	sc->spec = 1;
	return 0;
}

/* One evaluation of the draft model: n tokens in sc->v*; the wanted rows
 * (one per drafting slot, in slot order of sc->sl) come back as ids (top1)
 * or logits in sc->dlogits. */
static int draft_eval(struct ntx_sched *sc, int n, int top1, struct ntx_err *err)
{
	struct ntx_batch b;

	memset(&b, 0, sizeof b);
	b.n_tok = n;
	b.tok = sc->vtok;
	b.pos = sc->vpos;
	b.seq = sc->vseq;
	b.want = sc->vwant;
	b.ids = top1 ? sc->vids : NULL;
	sc->st.n_draft_evals++;
	return ntx_engine_eval(sc->draft, &b, NULL, top1 ? NULL : sc->dlogits, err);
}

/* Draft r + 1 of slot i from its draft row j. */
static void draft_take(struct ntx_sched *sc, int i, int j, int r, int top1)
{
	struct slot *s = &sc->slots[i];
	int32_t *d = sc->d + (size_t)i * (sc->kmax + 1);
	int32_t t;

	if (top1) {
		t = sc->vids[j];
	} else if (ntx_sampler_is_greedy(s->smp)) {
		t = ntx_sampler_sample(s->smp, sc->dlogits + (int64_t)j * sc->V);
	} else {
		float *q = sc->q + ((size_t)i * sc->kmax + r) * (size_t)sc->V;

		ntx_sampler_probs(s->smp, sc->dlogits + (int64_t)j * sc->V, q);
		t = ntx_sampler_draw(s->smp, q);
	}
	d[r + 1] = t;
	ntx_sampler_accept(s->smp, t);
}

/* Drafting with the model, first evaluation: every slot of the ns in sc->sl
 * that wants drafts has its draft cache caught up with its history:
 * cache[d_past..n_past) and cur, the last wanted (cap tokens in all).
 * *rounds: the most drafts a slot wants. 0 or -1. */
static int draft_catch_up(struct ntx_sched *sc, int ns, int cap, int top1, int *rounds,
			  struct ntx_err *err)
{
	int a, n;
	int32_t *tok = malloc((size_t)cap * sizeof *tok), *pos = malloc((size_t)cap * sizeof *pos);
	int32_t *seq = malloc((size_t)cap * sizeof *seq);
	uint8_t *want = malloc((size_t)cap);
	struct ntx_batch b;
	int rc;

	if (!tok || !pos || !seq || !want) {
		free(tok), free(pos), free(seq), free(want);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	for (a = n = 0; a < ns; a++) {
		int i = sc->sl[a], k;
		struct slot *s = &sc->slots[i];

		if (sc->dwant[i] <= 0)
			continue;
		if (s->d_past > s->n_past)
			s->d_past = s->n_past;
		ntx_engine_kv_truncate(sc->draft, i, s->d_past);
		for (k = s->d_past; k <= s->n_past; k++, n++) {
			tok[n] = k < s->n_past ? s->cache[k] : s->cur;
			pos[n] = k;
			seq[n] = i;
			want[n] = k == s->n_past;
		}
		s->d_past = s->n_past + 1;
		if (sc->dwant[i] > *rounds)
			*rounds = sc->dwant[i];
	}
	memset(&b, 0, sizeof b);
	b.n_tok = n;
	b.tok = tok;
	b.pos = pos;
	b.seq = seq;
	b.want = want;
	b.ids = top1 ? sc->vids : NULL;
	sc->st.n_draft_evals++;
	rc = ntx_engine_eval(sc->draft, &b, NULL, top1 ? NULL : sc->dlogits, err);
	free(tok), free(pos), free(seq), free(want);
	return rc ? -1 : 0;
}

/* The draft model drafts dwant[i] tokens for each slot that asks: every
 * such slot's draft cache is caught up with its history (cur included) in
 * one evaluation, then one draft position per evaluation. */
static int draft_model(struct ntx_sched *sc, int ns, int top1, struct ntx_err *err)
{
	int a, r, n, j, rounds = 0, cap = 0, n_slots = 0, n_tok = 0;
	double t0;

	sc->t_tok = -1;
	for (a = 0; a < ns; a++) {
		struct slot *s = &sc->slots[sc->sl[a]];

		if (sc->dwant[sc->sl[a]] > 0) {
			cap += s->n_past + 1 - (s->d_past < s->n_past ? s->d_past : s->n_past);
			n_slots++;
		}
	}
	if (cap == 0)
		return 0;
	if (draft_catch_up(sc, ns, cap, top1, &rounds, err))
		return -1;
	t0 = ntx_now_s();
	for (a = j = 0; a < ns; a++)
		if (sc->dwant[sc->sl[a]] > 0)
			draft_take(sc, sc->sl[a], j++, 0, top1);
	for (r = 1; r < rounds; r++) {
		for (a = n = 0; a < ns; a++) {
			int i = sc->sl[a];
			struct slot *s = &sc->slots[i];

			if (sc->dwant[i] <= r)
				continue;
			sc->vtok[n] = sc->d[(size_t)i * (sc->kmax + 1) + r];
			sc->vpos[n] = s->n_past + r;
			sc->vseq[n] = i;
			sc->vwant[n] = 1;
			n++;
			s->d_past++;
		}
		n_tok += n;
		if (draft_eval(sc, n, top1, err))
			return -1;
		for (a = j = 0; a < ns; a++)
			if (sc->dwant[sc->sl[a]] > r)
				draft_take(sc, sc->sl[a], j++, r, top1);
	}
	for (a = 0; a < ns; a++) {
		int i = sc->sl[a];

		if (sc->dwant[i] > 0) {
			sc->dk[i] = sc->dwant[i];
			sc->dsrc[i] = SRC_MODEL;
			ntx_sampler_unaccept(sc->slots[i].smp, sc->dwant[i]);
		}
	}
	/* a catch-up of more than the one or two tokens a step leaves each
	 * slot (the prompt, lookup steps, paused steps) is paid once: the tuner
	 * gets the cost of the single-position rounds after it */
	if (cap > 2 * n_slots)
		sc->t_tok = n_tok ? (ntx_now_s() - t0) / n_tok : 0;
	return 0;
}

/* Drafting, first part: the decoding slots in sc->sl (returned: how many),
 * each with cur as d[0], its lookup draft (sc->dk, sc->dsrc) and, without
 * one, how many tokens the draft model is to draft (sc->dwant). *top1: every
 * slot samples by argmax. */
static int spec_plan_drafts(struct ntx_sched *sc, int *top1)
{
	size_t stride = (size_t)sc->kmax + 1;
	int ns = 0, i;

	/* one K of each source for every slot (0: drafting paused) */
	sc->kl = sc->k_fixed ? sc->k_fixed : ntx_spec_tuner_pick(&sc->tun[0], 0);
	sc->km = sc->k_fixed ? sc->k_fixed : ntx_spec_tuner_pick(&sc->tun[1], 1);
	for (i = 0; i < sc->n_slots; i++) {
		struct slot *s = &sc->slots[i];
		int32_t *d = sc->d + (size_t)i * stride;
		int room, kl = sc->kl, km = sc->km;

		if (s->state != SLOT_DECODE)
			continue;
		sc->sl[ns++] = i;
		*top1 &= ntx_sampler_is_argmax(s->smp);
		room = sc->n_ctx - s->n_past - 1;
		if (s->req.n_predict >= 0 && room > s->req.n_predict - s->n_gen)
			room = s->req.n_predict - s->n_gen;
		d[0] = s->cur;
		sc->dk[i] = sc->dwant[i] = 0;
		sc->dsrc[i] = SRC_NONE;
		if (room < 1)
			continue;
		if (sc->lookup && kl) {
			s->cache[s->n_past] = s->cur; /* the history: cache, then cur */
			sc->dk[i] = ntx_spec_lookup(s->cache, s->n_past + 1, sc->lookup,
						    kl < room ? kl : room, d + 1);
			sc->dsrc[i] = sc->dk[i] ? SRC_LOOKUP : SRC_NONE;
		}
		if (!sc->dk[i] && sc->draft && km) {
			int droom = ntx_engine_n_ctx(sc->draft) - s->n_past;

			km = km < room ? km : room;
			sc->dwant[i] = km < droom ? km : droom;
		}
	}
	return ns;
}

/* Verification: cur and the drafts of the ns slots in sc->sl, in one
 * evaluation of the target (logits or, top1, the argmax ids). 0 or -1. */
static int spec_verify(struct ntx_sched *sc, int ns, int top1, struct ntx_err *err)
{
	size_t stride = (size_t)sc->kmax + 1;
	struct ntx_batch b;
	int a, n = 0;

	for (a = 0; a < ns; a++) {
		int i = sc->sl[a], k;

		for (k = 0; k <= sc->dk[i]; k++, n++) {
			sc->vtok[n] = sc->d[(size_t)i * stride + k];
			sc->vpos[n] = sc->slots[i].n_past + k;
			sc->vseq[n] = i;
			sc->vwant[n] = 1;
		}
	}
	memset(&b, 0, sizeof b);
	b.n_tok = n;
	b.tok = sc->vtok;
	b.pos = sc->vpos;
	b.seq = sc->vseq;
	b.want = sc->vwant;
	b.verify = 1;
	b.ids = top1 ? sc->vids : NULL;
	sc->st.n_steps++;
	sc->st.n_verify_steps++;
	return ntx_engine_eval(sc->e, &b, NULL, top1 ? NULL : sc->vlogits, err) ? -1 : 0;
}

/* Acceptance for slot i, whose verification rows start at row off: the
 * accepted drafts, the counts and the tuners (t_draft: the slot's share of
 * the drafting time, t_verify: the verification's), the caches rolled back
 * past the accepted tokens, then the accepted tokens and the target's next
 * one emitted in order. 0 or -1. */
static int spec_accept_slot(struct ntx_sched *sc, int i, int off, int top1, double t_draft,
			    double t_verify, struct ntx_err *err)
{
	struct slot *s = &sc->slots[i];
	int32_t next, *d = sc->d + (size_t)i * ((size_t)sc->kmax + 1);
	int k = sc->dk[i], n_acc, j, past;

	n_acc = ntx_spec_accept(s->smp, sc->V, sc->vlogits + (int64_t)off * sc->V,
				top1 ? sc->vids + off : NULL,
				sc->dsrc[i] == SRC_MODEL ? sc->q + (size_t)i * sc->kmax * (size_t)sc->V : NULL,
				d, k, sc->p, &next);
	if (k) {
		sc->st.n_drafted += k;
		sc->st.n_accepted += n_acc;
		if (sc->dsrc[i] == SRC_MODEL && sc->t_tok >= 0)
			t_draft = k * sc->t_tok;
		ntx_spec_tuner_observe(&sc->tun[sc->dsrc[i] == SRC_MODEL], k, n_acc,
				       t_draft, t_verify, sc->dsrc[i] == SRC_MODEL);
	} else {
		ntx_spec_tuner_observe_pass(&sc->tun[0], 1, t_verify);
		ntx_spec_tuner_observe_pass(&sc->tun[1], 1, t_verify);
	}
	/* cur and the accepted drafts are in the target's cache */
	past = s->n_past;
	ntx_engine_kv_truncate(sc->e, i, past + 1 + n_acc);
	if (s->d_past > past + 1 + n_acc)
		s->d_past = past + 1 + n_acc;
	for (j = 1; j <= n_acc + 1; j++) {
		int rc;

		s->n_past = past + j;
		s->cache[s->n_cache++] = d[j - 1];
		rc = emit(sc, s, j <= n_acc ? d[j] : next, err);
		if (rc < 0)
			return -1;
		if (rc > 0)
			break;
	}
	return 0;
}

/* Every decoding slot: drafts (lookup, else the draft model), one
 * verification evaluation of all of them, acceptance, and the accepted
 * tokens and the target's next one emitted in order. */
static int spec_step(struct ntx_sched *sc, struct ntx_err *err)
{
	int ns, a, top1 = 1, off;
	double t0 = ntx_now_s(), t1, t2;

	ns = spec_plan_drafts(sc, &top1);
	if (ns == 0)
		return 0;
	sc->t_tok = -1;
	if (sc->draft && draft_model(sc, ns, top1, err)) {
		forget_caches(sc);
		return -1;
	}
	t1 = ntx_now_s();
	if (spec_verify(sc, ns, top1, err)) {
		forget_caches(sc);
		return -1;
	}
	t2 = ntx_now_s();
	sc->st.t_draft_s += t1 - t0;
	sc->st.t_verify_s += t2 - t1;
	/* acceptance, slot by slot in row order */
	for (a = off = 0; a < ns; a++) {
		int i = sc->sl[a];

		if (spec_accept_slot(sc, i, off, top1, (t1 - t0) / ns, t2 - t1, err))
			return -1;
		off += sc->dk[i] + 1;
	}
	/* a paused source: the step counts towards its wait */
	if (sc->lookup && sc->kl == 0)
		ntx_spec_tuner_skipped(&sc->tun[0]);
	if (sc->draft && sc->km == 0)
		ntx_spec_tuner_skipped(&sc->tun[1]);
	if ((sc->draft && sc->km == 0) || (!sc->draft && sc->kl == 0))
		sc->st.n_paused_steps++;
	return 0;
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

	/* speculative: the decoding slots verify their drafts first, alone */
	if (sc->spec && spec_step(sc, err))
		return -1;

	/* decode tokens from a rotating start: with more slots than the
	 * ubatch holds, every slot gets its turn */
	for (j = 0; j < sc->n_slots; j++) {
		struct slot *s = &sc->slots[i = (sc->first + j) % sc->n_slots];

		s->in_step = 0;
		if (!sc->spec && s->state == SLOT_DECODE && n < sc->n_ub) {
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
