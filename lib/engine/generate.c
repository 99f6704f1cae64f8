/* generate.c - prompt processing, sampling loop, self-speculative decoding
 * and perplexity (see generate.h). */
#include "clock.h"
#include "generate.h"
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *ntx_stop_name(enum ntx_stop s)
{
	switch (s) {
	case NTX_STOP_EOG:
		return "eos";
	case NTX_STOP_LENGTH:
		return "length";
	case NTX_STOP_CONTEXT:
		return "context";
	case NTX_STOP_CALLER:
		return "closed";
	case NTX_STOP_INTERRUPT:
		return "interrupted";
	default:
		return "none";
	}
}

/* Rows [0, n) of V logits to o->logits, when set. */
static int dump_rows(const struct ntx_gen_opts *o, const float *rows, int n, int64_t V,
		     struct ntx_err *err)
{
	int i, e;

	if (!o->logits)
		return 0;
	for (i = 0; i < n; i++) {
		e = o->logits(o->logits_ctx, rows + (int64_t)i * V, V);
		if (e)
			return ntx_err_errno(err, e > 0 ? e : EIO, "writing logits");
	}
	return 0;
}

/* eval_span's rows */
enum {
	SPAN_LAST,
	SPAN_ALL,
	SPAN_VERIFY, /* all, each as if decoded alone */
	SPAN_NONE    /* no rows: only the cache (no output head) */
};

/* Evaluate tokens [from, from+n) of seq at positions from.. with logits for
 * the last (or all, or none: rows). */
static int eval_span(struct ntx_engine *e, int seq, const int32_t *tok, int from, int n,
		     int rows, const uint8_t *mask, float *logits, int32_t *ids, struct ntx_err *err)
{
	int all_rows = rows != SPAN_LAST;
	int32_t *pos = malloc((size_t)n * sizeof *pos), *sq = malloc((size_t)n * sizeof *sq);
	uint8_t *want = all_rows ? malloc((size_t)n) : NULL;
	struct ntx_batch b;
	int i, rc;

	if (!pos || !sq || (all_rows && !want)) {
		free(pos);
		free(sq);
		free(want);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	for (i = 0; i < n; i++) {
		pos[i] = from + i;
		sq[i] = seq;
		if (want)
			want[i] = rows != SPAN_NONE;
	}
	memset(&b, 0, sizeof b);
	b.n_tok = n;
	b.tok = tok;
	b.pos = pos;
	b.seq = sq;
	b.want = want;
	b.verify = rows == SPAN_VERIFY;
	b.ids = ids;
	rc = ntx_engine_eval(e, &b, mask, ids ? NULL : logits, err);
	free(pos);
	free(sq);
	free(want);
	return rc;
}

/* State of one generation. */
struct gen {
	struct ntx_engine *e;
	const struct ntx_gen_opts *o;
	struct ntx_sampler *smp;
	int64_t V;
	int seq, n_ctx, n_past;
	float *logits;      /* [(k+1) * V] */
	int32_t *ids;       /* [k + 1] argmax rows, when top1 */
	int top1;           /* greedy with nothing else to apply: the engine
			     * returns argmax ids instead of logits */
	float *p, *q;       /* [V] probability rows; q: [k * V] draft rows */
	int32_t *draft;     /* [k + 1] */
	ntx_token_cb cb;
	void *cb_ctx;
	struct ntx_gen_stats *st;
	int n_forced;
	/* speculative decoding */
	int32_t *hist;      /* [n_ctx + 1] the prompt and every emitted token */
	int n_hist;
	int d_past;         /* positions of hist in the draft model's cache */
	struct ntx_spec_tuner tun[2]; /* K for lookup drafts, for model drafts */
};

/* Emit tok; returns 1 when generation must stop (sets st->stop). */
static int emit(struct gen *g, int32_t tok)
{
	g->st->n_gen++;
	if (g->hist && g->n_hist <= g->n_ctx)
		g->hist[g->n_hist++] = tok;
	ntx_sampler_accept(g->smp, tok);
	if (g->cb && g->cb(g->cb_ctx, tok)) {
		g->st->stop = NTX_STOP_CALLER;
		return 1;
	}
	if (g->o->eog && g->o->eog[tok] && !g->o->force) {
		g->st->stop = NTX_STOP_EOG;
		return 1;
	}
	if (g->o->n_predict >= 0 && g->st->n_gen >= g->o->n_predict) {
		g->st->stop = NTX_STOP_LENGTH;
		return 1;
	}
	return 0;
}

static int32_t next_token(struct gen *g, const float *logits)
{
	if (g->o->force)
		return g->o->force[g->n_forced++];
	return ntx_sampler_sample(g->smp, logits);
}

/* Evaluate tokens [from, from + n) for rows (eval_span) into g->logits, or
 * only their argmax into g->ids (top1). */
static int gen_eval(struct gen *g, const int32_t *tok, int from, int n, int rows,
		    const uint8_t *mask, struct ntx_err *err)
{
	return eval_span(g->e, g->seq, tok, from, n, rows, mask, g->logits, g->top1 ? g->ids : NULL,
			 err);
}

/* The token sampled from row r of the last gen_eval. */
static int32_t gen_pick(struct gen *g, int r)
{
	if (g->top1)
		return g->ids[r];
	return ntx_sampler_sample(g->smp, g->logits + (int64_t)r * g->V);
}

static int fail_or_interrupt(struct gen *g, struct ntx_err *err)
{
	if (err->code == NTX_EINTR) {
		g->st->stop = NTX_STOP_INTERRUPT;
		return 0;
	}
	return -1;
}

/* Plain decoding: cur is sampled, not yet evaluated. */
static int decode_plain(struct gen *g, int32_t cur, struct ntx_err *err)
{
	for (;;) {
		int last = 0;

		if (emit(g, cur))
			last = 1;
		if (g->o->force && g->n_forced >= g->o->n_force && !last) {
			g->st->stop = NTX_STOP_LENGTH;
			last = 1;
		}
		if (last && !g->o->logits)
			return 0;
		if (g->n_past >= g->n_ctx) {
			if (!last)
				g->st->stop = NTX_STOP_CONTEXT;
			return 0;
		}
		if (gen_eval(g, &cur, g->n_past, 1, SPAN_LAST, NULL, err))
			return fail_or_interrupt(g, err);
		g->n_past++;
		if (dump_rows(g->o, g->logits, 1, g->V, err))
			return -1;
		if (last)
			return 0;
		cur = g->top1 ? g->ids[0] : next_token(g, g->logits);
	}
}

/* ---- speculative decoding ----
 *
 * One step from cur (sampled, emitted, not yet evaluated, at position
 * n_past): a draft of up to k tokens d_1..d_k comes from prompt lookup (an
 * n-gram match in the history), from the draft model (its own engine and KV
 * cache, kept in step with the accepted history), or from the target itself
 * with the draft mask's layers skipped (self-speculation); one verification
 * pass of the target evaluates cur, d_1..d_k, each row as if decoded alone;
 * the longest accepted prefix is kept, plus one token of the target's. Greedy:
 * a draft is accepted when it is the target's argmax, so the output is that
 * of plain decoding. Sampling: d is accepted with probability min(1, p/q) and
 * a rejection resamples from max(0, p - q) (q one-hot for lookup drafts), so
 * the output is distributed as the target's. */

enum { SRC_NONE, SRC_LOOKUP, SRC_MODEL, SRC_SELF };

/* Bring the draft model's cache up to the history (cur included) in passes
 * of at most chunk tokens; the last evaluation leaves the row after cur in
 * rows (or its argmax in ids, when not NULL). */
static int draft_sync(struct gen *g, int chunk, float *rows, int32_t *ids, struct ntx_err *err)
{
	while (g->d_past < g->n_hist) {
		int n = g->n_hist - g->d_past < chunk ? g->n_hist - g->d_past : chunk;

		/* only the last pass's last row is wanted: the others skip the head */
		if (eval_span(g->o->draft, g->o->draft_seq, g->hist + g->d_past, g->d_past, n,
			      g->d_past + n < g->n_hist ? SPAN_NONE : SPAN_LAST, NULL, rows, ids, err))
			return -1;
		g->d_past += n;
		g->st->n_draft_passes++;
	}
	return 0;
}

/* d_{i+1} from the row the last draft evaluation left (row 0); q row i. */
static void draft_take(struct gen *g, int i, int greedy)
{
	if (greedy) {
		g->draft[i + 1] = gen_pick(g, 0);
	} else {
		float *q = g->q + (int64_t)i * g->V;

		ntx_sampler_probs(g->smp, g->logits, q);
		g->draft[i + 1] = ntx_sampler_draw(g->smp, q);
	}
	ntx_sampler_accept(g->smp, g->draft[i + 1]);
}

/* Draft up to k tokens after cur (g->draft[0]) with the model or the mask.
 * Returns how many, or -1 (err). *t_tuner: what the tuner is to take as
 * the time of those k drafts, or -1 for the time they took. When the draft
 * model first caught up with more than the one or two tokens a step leaves
 * it (the prompt, a lookup step's tokens, the tokens of paused steps), that
 * is k times the mean of the single-token evaluations after the catch-up,
 * 0 (unknown) without any: the catch-up is paid for once, not per token. */
static int draft_model(struct gen *g, int k, int src, int greedy, double *t_tuner,
		       struct ntx_err *err)
{
	int i;

	*t_tuner = -1;
	if (src == SRC_MODEL) {
		/* the last position the draft evaluates is n_past + k - 1 */
		int room = ntx_engine_n_ctx(g->o->draft) - g->n_past, lag;
		double t0;

		k = k < room ? k : room;
		if (k < 1)
			return 0;
		g->d_past = g->d_past < g->n_past ? g->d_past : g->n_past;
		ntx_engine_kv_truncate(g->o->draft, g->o->draft_seq, g->d_past);
		lag = g->n_hist - g->d_past;
		/* the tokens since the last draft (the steps of a pause, a lookup
		 * step's) in decode-sized passes: the decode step's kernels, warm,
		 * where a prompt pass would load and tune others mid-generation */
		if (draft_sync(g, ntx_engine_decode_chunk(g->o->draft), g->logits,
			       g->top1 ? g->ids : NULL, err))
			return -1;
		draft_take(g, 0, greedy);
		t0 = ntx_now_s();
		for (i = 1; i < k; i++) {
			if (eval_span(g->o->draft, g->o->draft_seq, &g->draft[i], g->n_past + i, 1,
				      SPAN_LAST, NULL, g->logits, g->top1 ? g->ids : NULL, err)) {
				ntx_sampler_unaccept(g->smp, i);
				return -1;
			}
			g->d_past++;
			g->st->n_draft_passes++;
			draft_take(g, i, greedy);
		}
		if (lag > 2)
			*t_tuner = k > 1 ? k * (ntx_now_s() - t0) / (k - 1) : 0;
	} else {
		for (i = 0; i < k; i++) {
			if (gen_eval(g, &g->draft[i], g->n_past + i, 1, SPAN_LAST, g->o->draft_mask,
				     err)) {
				ntx_sampler_unaccept(g->smp, i);
				return -1;
			}
			g->st->n_draft_passes++;
			draft_take(g, i, greedy);
		}
	}
	ntx_sampler_unaccept(g->smp, k);
	return k;
}

/* A step without a draft: evaluate cur alone. */
static int plain_step(struct gen *g, int32_t cur, int32_t *next, struct ntx_err *err)
{
	double t0 = ntx_now_s();

	if (gen_eval(g, &cur, g->n_past, 1, SPAN_LAST, NULL, err))
		return fail_or_interrupt(g, err) ? -1 : 1;
	ntx_spec_tuner_observe_pass(&g->tun[0], 1, ntx_now_s() - t0);
	ntx_spec_tuner_observe_pass(&g->tun[1], 1, ntx_now_s() - t0);
	g->st->t_verify_s += ntx_now_s() - t0;
	g->st->n_full_passes++;
	g->n_past++;
	*next = gen_pick(g, 0);
	return 0;
}

/* One speculative step with a draft of up to k tokens. *out_cur gets the
 * next un-evaluated token; returns 1 if generation stopped, -1 on error.
 * A tuner that pauses drafting (K 0) gives a plain step; its source does not
 * draft, and the draft model catches up with the step's tokens at its next
 * draft. */
static int spec_step(struct gen *g, int32_t cur, int k_room, int32_t *out_cur,
		     struct ntx_err *err)
{
	int greedy = ntx_sampler_is_greedy(g->smp), i, k = 0, n_acc, src = SRC_NONE;
	int fixed = !g->o->adaptive_k, paused = 0;
	double t0 = ntx_now_s(), t1, t_tuner = -1;

	g->draft[0] = cur;
	if (g->o->lookup > 0) {
		int kl = fixed ? g->o->draft_k : ntx_spec_tuner_pick(&g->tun[0], 0);

		if (kl == 0) {
			ntx_spec_tuner_skipped(&g->tun[0]);
			paused = 1;
		}
		k = ntx_spec_lookup(g->hist, g->n_hist, g->o->lookup, kl < k_room ? kl : k_room,
				    g->draft + 1);
		if (k > 0)
			src = SRC_LOOKUP;
	}
	if (!src && (g->o->draft || g->o->self_spec)) {
		int km = fixed ? g->o->draft_k : ntx_spec_tuner_pick(&g->tun[1], 1);

		if (km == 0) {
			ntx_spec_tuner_skipped(&g->tun[1]);
			paused = 1;
		} else {
			src = g->o->draft ? SRC_MODEL : SRC_SELF;
			k = draft_model(g, km < k_room ? km : k_room, src, greedy, &t_tuner, err);
			if (k < 0)
				return fail_or_interrupt(g, err) ? -1 : 1;
		}
	}
	if (k == 0) {
		g->st->n_paused += paused;
		return plain_step(g, cur, out_cur, err);
	}
	t1 = ntx_now_s();
	/* verify: cur, d_1..d_k at n_past.. -> k+1 rows */
	if (gen_eval(g, g->draft, g->n_past, k + 1, SPAN_VERIFY, NULL, err))
		return fail_or_interrupt(g, err) ? -1 : 1;
	g->st->n_full_passes++;
	n_acc = ntx_spec_accept(g->smp, g->V, g->logits, g->top1 ? g->ids : NULL,
				src == SRC_LOOKUP ? NULL : g->q, g->draft, k, g->p, out_cur);
	ntx_spec_tuner_observe(&g->tun[src == SRC_LOOKUP ? 0 : 1], k, n_acc,
			       t_tuner >= 0 ? t_tuner : t1 - t0, ntx_now_s() - t1, src != SRC_LOOKUP);
	g->st->t_draft_s += t1 - t0;
	g->st->t_verify_s += ntx_now_s() - t1;
	g->st->n_drafted += k;
	g->st->n_accepted += n_acc;
	if (src == SRC_LOOKUP) {
		g->st->n_lookup_drafted += k;
		g->st->n_lookup_accepted += n_acc;
	}
	/* cur and the accepted drafts are now in the cache with the target's
	 * K/V; the draft model's cache is valid up to the accepted history */
	g->n_past += 1 + n_acc;
	ntx_engine_kv_truncate(g->e, g->seq, g->n_past);
	if (g->d_past > g->n_past)
		g->d_past = g->n_past;
	for (i = 1; i <= n_acc; i++) {
		if (emit(g, g->draft[i]))
			return 1;
	}
	return 0;
}

static int decode_spec(struct gen *g, int32_t cur, struct ntx_err *err)
{
	for (;;) {
		int kk = NTX_SPEC_KMAX, rc;
		int32_t next;

		if (emit(g, cur))
			return 0;
		/* room: positions n_past..n_past+kk must fit */
		if (g->n_past + kk + 1 > g->n_ctx)
			kk = g->n_ctx - g->n_past - 1;
		if (g->o->n_predict >= 0 && kk > g->o->n_predict - g->st->n_gen)
			kk = g->o->n_predict - g->st->n_gen;
		if (g->n_past >= g->n_ctx) {
			g->st->stop = NTX_STOP_CONTEXT;
			return 0;
		}
		rc = kk < 1 ? plain_step(g, cur, &next, err) : spec_step(g, cur, kk, &next, err);
		if (rc < 0)
			return -1;
		if (rc > 0)
			return 0;
		cur = next;
	}
}

/* The options and prompt against each other and the engine (draft
 * length, draft vocabulary, context size, logit dumps). */
static int check_gen_args(struct ntx_engine *e, const struct ntx_gen_opts *o, int n_prompt,
			  int kmax, int spec, struct ntx_err *err)
{
	if (kmax > NTX_SPEC_KMAX)
		return ntx_err_set(err, NTX_EINVAL, "draft length %d is more than %d", kmax,
				   NTX_SPEC_KMAX);
	if (o->self_spec && o->draft)
		return ntx_err_set(err, NTX_EINVAL,
				   "self-speculation and a draft model exclude each other");
	if (o->draft && ntx_engine_n_vocab(o->draft) != ntx_engine_n_vocab(e))
		return ntx_err_set(err, NTX_EINVAL,
				   "the draft has %lld tokens, the target %lld: a draft must share the target's vocabulary",
				   (long long)ntx_engine_n_vocab(o->draft),
				   (long long)ntx_engine_n_vocab(e));
	if (n_prompt <= 0)
		return ntx_err_set(err, NTX_EINVAL, "empty prompt");
	if (n_prompt > ntx_engine_n_ctx(e))
		return ntx_err_set(err, NTX_EINVAL,
				   "the prompt has %d tokens, more than the context size %d (use -c)",
				   n_prompt, ntx_engine_n_ctx(e));
	if (spec && o->logits)
		return ntx_err_set(err, NTX_EINVAL,
				   "--dump-logits cannot be combined with speculative decoding");
	return 0;
}

/* Buffers for kmax + 1 rows of logits and drafts, the token history with
 * speculation; the two draft-length tuners. */
static int gen_alloc(struct gen *g, int kmax, int k_init, int spec, struct ntx_err *err)
{
	g->logits = malloc((size_t)(kmax + 1) * (size_t)g->V * sizeof(float));
	g->p = malloc((size_t)g->V * sizeof(float));
	g->q = malloc((size_t)(kmax + 1) * (size_t)g->V * sizeof(float));
	g->draft = malloc((size_t)(kmax + 2) * sizeof(int32_t));
	g->ids = malloc((size_t)(kmax + 1) * sizeof(int32_t));
	g->hist = spec ? malloc(((size_t)g->n_ctx + 1) * sizeof(int32_t)) : NULL;
	g->top1 = ntx_sampler_is_argmax(g->smp) && !g->o->force && !g->o->logits;
	ntx_spec_tuner_init(&g->tun[0], kmax, k_init);
	ntx_spec_tuner_init(&g->tun[1], kmax, k_init);
	g->tun[0].pause = g->tun[1].pause = ntx_engine_tunables(g->e)->spec_backoff;
	if (!g->logits || !g->p || !g->q || !g->draft || !g->ids || (spec && !g->hist))
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	return 0;
}

/* The prompt with every row's logits given to o->logits, 64 rows at
 * a time; the last row's logits into g->logits. */
static int prompt_dump(struct gen *g, const int32_t *prompt, int n_prompt, struct ntx_err *err)
{
	int done = 0;
	float *rows = malloc((size_t)64 * (size_t)g->V * sizeof(float));

	if (!rows)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	while (done < n_prompt) {
		int n = n_prompt - done > 64 ? 64 : n_prompt - done;

		if (eval_span(g->e, g->seq, prompt + done, done, n, SPAN_ALL, NULL, rows, NULL, err) ||
		    dump_rows(g->o, rows, n, g->V, err)) {
			free(rows);
			return -1;
		}
		done += n;
	}
	memcpy(g->logits, rows + (int64_t)((n_prompt - 1) % 64) * g->V,
	       (size_t)g->V * sizeof(float));
	free(rows);
	return 0;
}

/* The prompt in the engine's prompt chunks, as batch mode cuts it; the last
 * row's logits into g->logits. */
static int prompt_chunks(struct gen *g, const int32_t *prompt, int n_prompt, struct ntx_err *err)
{
	int done = 0, chunk = ntx_engine_prompt_chunk(g->e);

	for (; done < n_prompt; done += chunk) {
		int n = n_prompt - done < chunk ? n_prompt - done : chunk;

		if (eval_span(g->e, g->seq, prompt + done, done, n, SPAN_LAST, NULL, g->logits, NULL,
			      err))
			return -1;
	}
	return 0;
}

int ntx_generate(struct ntx_engine *e, int seq, const int32_t *prompt, int n_prompt,
		 const struct ntx_gen_opts *o, ntx_token_cb cb, void *cb_ctx,
		 struct ntx_gen_stats *st, struct ntx_err *err)
{
	struct gen g;
	int spec = o->self_spec || o->draft || o->lookup > 0;
	int k_init = o->draft_k > 0 ? o->draft_k : 4;
	int kmax = !spec ? 0 : o->adaptive_k ? NTX_SPEC_KMAX_ADAPTIVE : k_init;
	int rc = -1;
	double t0;
	int32_t cur;

	memset(st, 0, sizeof *st);
	memset(&g, 0, sizeof g);
	if (check_gen_args(e, o, n_prompt, kmax, spec, err))
		return -1;
	g.e = e;
	g.o = o;
	g.V = ntx_engine_n_vocab(e);
	g.seq = seq;
	g.n_ctx = ntx_engine_n_ctx(e);
	g.cb = cb;
	g.cb_ctx = cb_ctx;
	g.st = st;
	g.smp = ntx_sampler_new(&o->sp, g.V, err);
	if (!g.smp)
		return -1;
	if (gen_alloc(&g, kmax, k_init, spec, err))
		goto out;
	ntx_engine_kv_truncate(e, seq, 0);
	if (o->draft)
		ntx_engine_kv_truncate(o->draft, o->draft_seq, 0);
	for (int i = 0; i < n_prompt; i++)
		ntx_sampler_accept(g.smp, prompt[i]);
	if (g.hist) {
		memcpy(g.hist, prompt, (size_t)n_prompt * sizeof *prompt);
		g.n_hist = n_prompt;
	}

	/* prompt; the draft model reads it too, as prompt work (its first
	 * draft then evaluates only cur), into g.q: g.logits holds the
	 * target's row for the first token. A prompt longer than the draft's
	 * context never drafts. */
	t0 = ntx_now_s();
	if ((o->logits ? prompt_dump(&g, prompt, n_prompt, err)
			    : prompt_chunks(&g, prompt, n_prompt, err)) ||
	    (o->draft && !o->force && o->n_predict != 0 && n_prompt < ntx_engine_n_ctx(o->draft) &&
	     draft_sync(&g, ntx_engine_prompt_chunk(o->draft), g.q, NULL, err))) {
		if (err->code == NTX_EINTR) {
			st->stop = NTX_STOP_INTERRUPT;
			rc = 0;
		}
		goto out;
	}
	st->n_prompt = n_prompt;
	st->t_prompt_s = ntx_now_s() - t0;
	g.n_past = n_prompt;
	if (o->n_predict == 0) {
		st->stop = NTX_STOP_LENGTH;
		rc = 0;
		goto out;
	}
	if (o->force && o->n_force == 0) {
		st->stop = NTX_STOP_LENGTH;
		rc = 0;
		goto out;
	}

	/* generation */
	t0 = ntx_now_s();
	cur = next_token(&g, g.logits);
	rc = spec && !o->force ? decode_spec(&g, cur, err) : decode_plain(&g, cur, err);
	st->t_gen_s = ntx_now_s() - t0;
out:
	ntx_sampler_free(g.smp);
	free(g.logits);
	free(g.p);
	free(g.q);
	free(g.draft);
	free(g.ids);
	free(g.hist);
	return rc;
}

/* ---- perplexity ---- */

/* The sums over the scored rows. */
struct ppl_acc {
	double nll, nll2, kl, kl2;
	int64_t count, top1;
};

/* Evaluate one chunk of n_ctx tokens (buf: their copy, BOS first when
 * bos >= 0) from an empty cache: logits of rows [first, n_ctx - 1). 0 or -1. */
static int ppl_eval_chunk(struct ntx_engine *e, const int32_t *chunk, int n_ctx, int first,
			  int32_t bos, const uint8_t *layer_mask, int32_t *buf, float *logits,
			  struct ntx_err *err)
{
	int32_t *pos = malloc((size_t)n_ctx * sizeof *pos);
	uint8_t *want = malloc((size_t)n_ctx);
	struct ntx_batch b;
	int i;

	if (!pos || !want) {
		free(pos);
		free(want);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	memcpy(buf, chunk, (size_t)n_ctx * sizeof *buf);
	if (bos >= 0)
		buf[0] = bos;
	for (i = 0; i < n_ctx; i++) {
		pos[i] = i;
		want[i] = i >= first && i < n_ctx - 1;
	}
	memset(&b, 0, sizeof b);
	b.n_tok = n_ctx;
	b.tok = buf;
	b.pos = pos;
	b.want = want;
	ntx_engine_kv_truncate(e, 0, 0);
	i = ntx_engine_eval(e, &b, layer_mask, logits, err);
	free(pos);
	free(want);
	return i ? -1 : 0;
}

/* Score one row of V logits against the next token: its NLL into *acc; its
 * log-probabilities (lp) written to kld_out and/or compared with the next
 * row of kld_ref (read into refrow). 0 or -1. */
static int ppl_score_row(const float *row, int64_t V, int32_t next, float *lp, float *refrow,
			 FILE *kld_out, FILE *kld_ref, struct ppl_acc *acc, struct ntx_err *err)
{
	float mx = row[0];
	double s = 0, logz, x;
	int64_t j;

	for (j = 1; j < V; j++)
		mx = row[j] > mx ? row[j] : mx;
	for (j = 0; j < V; j++)
		s += exp((double)row[j] - mx);
	logz = mx + log(s);
	x = logz - row[next];
	acc->nll += x;
	acc->nll2 += x * x;
	acc->count++;
	if (kld_out || kld_ref) {
		for (j = 0; j < V; j++)
			lp[j] = (float)(row[j] - logz);
	}
	if (kld_out && fwrite(lp, sizeof(float), (size_t)V, kld_out) != (size_t)V)
		return ntx_err_set(err, NTX_EIO, "writing reference log-probabilities failed");
	if (kld_ref) {
		double d = 0;

		if (fread(refrow, sizeof(float), (size_t)V, kld_ref) != (size_t)V)
			return ntx_err_set(err, NTX_EIO, "reading reference log-probabilities failed");
		for (j = 0; j < V; j++)
			d += exp((double)refrow[j]) * ((double)refrow[j] - lp[j]);
		acc->kl += d;
		acc->kl2 += d * d;
		if (ntx_argmax(refrow, V) == ntx_argmax(lp, V))
			acc->top1++;
	}
	return 0;
}

/* The results from the sums: PPL, its error, and the KL statistics when
 * there was a reference. */
static void ppl_result(const struct ppl_acc *acc, int n_chunks, int kld, struct ntx_ppl_result *r)
{
	double count = (double)acc->count;

	r->n_chunks = n_chunks;
	r->n_scored = (int)acc->count;
	r->nll = acc->nll / count;
	r->ppl = exp(r->nll);
	/* llama-perplexity: PPL error from the std error of the mean NLL */
	{
		double mean = acc->nll / count, var = acc->nll2 / count - mean * mean;

		r->ppl_err = acc->count > 1 ?
			     r->ppl * sqrt((var > 0 ? var : 0) / (double)(acc->count - 1)) : 0;
	}
	if (kld) {
		double mean = acc->kl / count, var = acc->kl2 / count - mean * mean;

		r->kld = mean;
		r->kld_err = acc->count > 1 ? sqrt((var > 0 ? var : 0) / (double)(acc->count - 1)) : 0;
		r->top1 = (double)acc->top1 / count;
	}
}

int ntx_perplexity(struct ntx_engine *e, const int32_t *tokens, int n_tokens, int n_ctx,
		   int32_t bos, const uint8_t *layer_mask, FILE *kld_out, FILE *kld_ref,
		   ntx_ppl_progress progress, void *pctx, struct ntx_ppl_result *r,
		   struct ntx_err *err)
{
	int64_t V = ntx_engine_n_vocab(e);
	int n_chunks, c, i, first = n_ctx / 2, rc = -1;
	int32_t *buf = NULL;
	float *logits = NULL, *lp = NULL, *refrow = NULL;
	struct ppl_acc acc = { 0 };

	memset(r, 0, sizeof *r);
	if (n_ctx < 4 || n_ctx > ntx_engine_n_ctx(e))
		return ntx_err_set(err, NTX_EINVAL,
				   "perplexity context %d must be in [4, %d] (the engine's -c)", n_ctx,
				   ntx_engine_n_ctx(e));
	n_chunks = n_tokens / n_ctx;
	if (n_chunks < 1)
		return ntx_err_set(err, NTX_EINVAL,
				   "need at least %d tokens for one chunk of -c %d; the text has %d",
				   n_ctx, n_ctx, n_tokens);
	buf = malloc((size_t)n_ctx * sizeof *buf);
	logits = malloc((size_t)(n_ctx - first) * (size_t)V * sizeof(float));
	lp = malloc((size_t)V * sizeof(float));
	refrow = malloc((size_t)V * sizeof(float));
	if (!buf || !logits || !lp || !refrow) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	for (c = 0; c < n_chunks; c++) {
		const int32_t *chunk = tokens + (int64_t)c * n_ctx;

		if (ppl_eval_chunk(e, chunk, n_ctx, first, bos, layer_mask, buf, logits, err))
			goto out;
		for (i = first; i < n_ctx - 1; i++)
			if (ppl_score_row(logits + (int64_t)(i - first) * V, V, chunk[i + 1], lp,
					  refrow, kld_out, kld_ref, &acc, err))
				goto out;
		if (progress)
			progress(pctx, c + 1, n_chunks, exp(acc.nll / (double)acc.count));
	}
	ppl_result(&acc, n_chunks, kld_ref != NULL, r);
	rc = 0;
out:
	free(buf);
	free(logits);
	free(lp);
	free(refrow);
	return rc;
}
