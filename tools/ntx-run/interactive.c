/* interactive.c - ntx-run -i (--chat -i, -cnv) over ntx.h: a conversation
 * on a terminal or a pipe. Each line of stdin is a user turn; the whole
 * conversation is rendered with the chat template and submitted as a batch
 * request (ntx_ctx_submit), whose prefix reuse keeps the KV cache of the
 * earlier turns: only the new tokens (the end of the last reply, the new
 * user message, the assistant header) are evaluated. The reply streams to
 * stdout; per-turn counts and timings go to stderr (and --stats-json).
 *
 * Ctrl-C during a reply stops it between steps (the token callback sees
 * the flag; what was said stays in the history and the cache stays valid)
 * and returns to the prompt; Ctrl-C at the prompt, a second Ctrl-C during
 * a reply (main.c's handler), or end of input ends the conversation. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "out.h"

/* The conversation so far: roles[i], contents[i] (owned). */
struct convo {
	const char **roles;
	char **contents;
	int n, cap;
};

struct chat {
	struct run_opts *o;
	struct run_api a;
	struct ntx_error *e;
	struct run_stats stats;
	struct convo cv;
	json_t *turns;               /* --stats-json's "turns" */
	int n_turn;
};

/* One reply. */
struct turn {
	const struct chat *ch;
	struct ntx_detokenizer *dt;
	int failed;                  /* stdout failed */
	int werr;
	int done;
	struct ntx_gen_result res;
	int32_t *gen;                /* a copy of the reply's tokens */
};

/* ---- the conversation ---- */

/* Add a message, taking content (freed here on failure): 0 or -1. */
static int convo_add(struct convo *cv, const char *role, char *content)
{
	if (content && cv->n == cv->cap) {
		int cap = cv->cap ? cv->cap * 2 : 16;
		const char **r = realloc(cv->roles, (size_t)cap * sizeof *r);
		char **c;

		if (r)
			cv->roles = r;
		c = r ? realloc(cv->contents, (size_t)cap * sizeof *c) : NULL;
		if (c) {
			cv->contents = c;
			cv->cap = cap;
		}
	}
	if (!content || cv->n == cv->cap) {
		free(content);
		return -1;
	}
	cv->roles[cv->n] = role;
	cv->contents[cv->n++] = content;
	return 0;
}

static void convo_free(struct convo *cv)
{
	int i;

	for (i = 0; i < cv->n; i++)
		free(cv->contents[i]);
	free(cv->roles);
	free(cv->contents);
}

/* The conversation as the prompt of the assistant's next turn: *ids
 * malloc'ed. 0, or the exit status after the message. */
static int convo_prompt(struct chat *ch, int32_t **ids, int *n)
{
	const struct run_opts *o = ch->o;
	char *text = NULL;
	int rc;

	if (ntx_lm_chat_apply(ch->a.lm, o->chat_template, ch->cv.roles,
			      (const char *const *)ch->cv.contents, ch->cv.n, NTX_CHAT_ADD_ASSISTANT,
			      &text, ch->e))
		return run_err(ch->e);
	rc = run_tokenize(ch->a.lm, text, strlen(text),
			  (o->no_bos ? 0 : NTX_TOKENIZE_ADD_BOS) | NTX_TOKENIZE_SPECIAL, ids, n);
	ntx_free(text);
	return rc;
}

/* Read one line into *line (without its newline). Returns 1, 0 at end of
 * input, -1 when interrupted. */
static int read_turn(char **line, size_t *cap)
{
	ssize_t n;

	errno = 0;
	n = getline(line, cap, stdin);
	if (n < 0) {
		if (errno == EINTR || run_interrupted) {
			clearerr(stdin);
			return -1;
		}
		return 0;
	}
	while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
		(*line)[--n] = '\0';
	return 1;
}

/* ---- a reply ---- */

static int on_token(void *user, int32_t id, const char *piece, size_t len)
{
	struct turn *t = user;
	const char *s;
	size_t n;

	(void)piece;
	(void)len;
	if (!run_is_eog(t->ch->o, t->ch->a.lm, id) && !t->failed &&
	    ntx_detokenizer_push(t->dt, id, &s, &n, NULL) == NTX_OK && n) {
		errno = 0;
		if (fwrite(s, 1, n, stdout) != n || fflush(stdout)) {
			t->failed = 1;
			t->werr = errno ? errno : EIO;
		}
	}
	return t->failed || run_interrupted;
}

static void on_done(void *user, int64_t id, const struct ntx_gen_result *r, const int32_t *gen)
{
	struct turn *t = user;

	(void)id;
	t->done = 1;
	t->res = *r;
	t->gen = malloc((size_t)(r->n_gen ? r->n_gen : 1) * sizeof *t->gen);
	if (t->gen && r->n_gen > 0)
		memcpy(t->gen, gen, (size_t)r->n_gen * sizeof *t->gen);
}

/* The end of the reply: what the detokenizer held, a newline. */
static void reply_end(struct turn *t)
{
	const char *p;
	size_t n;

	ntx_detokenizer_flush(t->dt, &p, &n);
	errno = 0;
	if (!t->failed && ((n && fwrite(p, 1, n, stdout) != n) || fputc('\n', stdout) == EOF ||
			   fflush(stdout))) {
		t->failed = 1;
		t->werr = errno ? errno : EIO;
	}
}

/* Submit ids and step until the reply is done. 0, or the exit status
 * after the message. */
static int reply(struct chat *ch, struct turn *t, const int32_t *ids, int n)
{
	struct ntx_gen_params p = ch->o->gp;
	struct ntx_request rq;
	int64_t id;

	p.n_predict = ch->o->n_predict;
	p.ignore_eog = ch->o->ignore_eos;
	ntx_request_init(&rq);
	rq.prompt = ids;
	rq.n_prompt = n;
	rq.gen = &p;
	rq.on_token = on_token;
	rq.on_done = on_done;
	rq.user = t;
	if (ntx_detokenizer_new(ch->a.lm, 0, &t->dt, ch->e) ||
	    ntx_ctx_submit(ch->a.ctx, &rq, &id, ch->e)) /* the conversation no longer fits */
		return run_err(ch->e);
	while (!t->done) {
		/* an interrupt (a Ctrl-C before the context was there) leaves
		 * the request active: the callback ends it */
		if (ntx_ctx_step(ch->a.ctx, NULL, ch->e) &&
		    ntx_error_status(ch->e) != NTX_STATUS_INTERRUPTED) {
			int rc = run_err(ch->e);

			ntx_ctx_cancel(ch->a.ctx, id, NULL);
			return rc;
		}
	}
	reply_end(t);
	return 0;
}

/* The turn's line on stderr and its entry in --stats-json. */
static void turn_report(struct chat *ch, const struct turn *t)
{
	const struct ntx_gen_result *r = &t->res;
	int n_eval = r->n_prompt - r->n_reused;
	double gen_s = r->t_gen_ms / 1e3;

	ch->n_turn++;
	json_array_append_new(ch->turns, json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f}",
		"turn", ch->n_turn, "n_prompt", r->n_prompt, "n_reused", r->n_reused,
		"n_evaluated", n_eval, "n_gen", r->n_gen, "stop_reason", run_finish_name(r->finish),
		"ttft_ms", r->t_prompt_ms,
		"gen_tok_per_s", gen_s > 0 && r->n_gen > 1 ? (r->n_gen - 1) / gen_s : 0.0));
	if (!ch->o->quiet)
		fprintf(stderr, PROG ": turn %d: %d prompt tokens (%d reused, %d evaluated), %d generated, first token in %.1f ms%s\n",
			ch->n_turn, r->n_prompt, r->n_reused, n_eval, r->n_gen, r->t_prompt_ms,
			r->finish == NTX_FINISH_STOPPED && run_interrupted ? ", interrupted" : "");
}

/* One user turn (the line) and the reply: 0 to go on, -1 to end the
 * conversation quietly, else the exit status after the message. */
static int turn(struct chat *ch, const char *line)
{
	struct turn t;
	int32_t *ids = NULL;
	char *text = NULL;
	size_t len;
	int n = 0, rc;

	if (convo_add(&ch->cv, "user", strdup(line)))
		return run_err(NULL);
	if ((rc = convo_prompt(ch, &ids, &n)) != 0)
		return rc;
	memset(&t, 0, sizeof t);
	t.ch = ch;
	rc = reply(ch, &t, ids, n);
	free(ids);
	ntx_detokenizer_free(t.dt);
	if (rc == 0)
		turn_report(ch, &t);
	/* the reply (what was said of it) joins the history */
	if (rc == 0 && (rc = run_text(ch->o, ch->a.lm, t.gen, t.res.n_gen, &text, &len)) == 0 &&
	    convo_add(&ch->cv, "assistant", text))
		rc = run_err(NULL);
	free(t.gen);
	if (rc == 0 && t.failed) {
		if (t.werr == EPIPE)
			return -1;
		fprintf(stderr, PROG ": writing output: %s\n", strerror(t.werr));
		return 1;
	}
	run_interrupted = 0; /* a stopped reply: back to the prompt */
	return rc;
}

/* Turns until the end of input: the exit status. */
static int converse(struct chat *ch)
{
	char *line = NULL;
	size_t cap = 0;
	int tty = isatty(0), rc = 0, r;

	if (ch->o->system && convo_add(&ch->cv, "system", strdup(ch->o->system)))
		return run_err(NULL);
	for (;;) {
		if (tty && !ch->o->quiet) {
			fputs("> ", stderr);
			fflush(stderr);
		}
		r = read_turn(&line, &cap);
		if (r == 0)
			break; /* end of input */
		if (r < 0) {
			rc = 130; /* Ctrl-C at the prompt */
			if (tty)
				fputc('\n', stderr);
			break;
		}
		if (line[0] && (rc = turn(ch, line)) != 0) {
			rc = rc < 0 ? 0 : rc;
			break;
		}
	}
	free(line);
	return rc;
}

int mode_interactive(struct run_opts *o)
{
	struct chat ch;
	int rc, st_rc;

	memset(&ch, 0, sizeof ch);
	ch.o = o;
	ch.e = ntx_error_new();
	ch.turns = json_array();
	if (!ch.e || !ch.turns) {
		ntx_error_free(ch.e);
		json_decref(ch.turns);
		return run_err(NULL);
	}
	/* --stats-json first: an unwritable file fails before any work */
	if ((rc = run_stats_open(o, &ch.stats)) == 0 && (rc = run_api_open(o, &ch.a)) == 0) {
		/* Ctrl-C stops a reply between steps (its KV cache stays
		 * valid): the handler only sets run_interrupted */
		run_sig_ctx = NULL;
		rc = run_expert_stats(o, &ch.a, converse(&ch));
		if (o->stats_json) {
			struct ntx_ctx_stats st;
			json_t *j = NULL;

			st.size = sizeof st;
			if (ntx_ctx_stats(ch.a.ctx, &st, NULL) == NTX_OK)
				j = json_pack("{s:s, s:i, s:s, s:s, s:O}", "format", "ntx.stats",
					      "version", 1, "mode", "interactive", "backend",
					      run_backend_name(st.backend), "turns", ch.turns);
			st_rc = run_stats_commit(o, &ch.stats, j);
			rc = rc ? rc : st_rc;
			json_decref(j);
		}
	}
	run_stats_abort(&ch.stats);
	run_api_close(&ch.a);
	convo_free(&ch.cv);
	json_decref(ch.turns);
	ntx_error_free(ch.e);
	return rc;
}
