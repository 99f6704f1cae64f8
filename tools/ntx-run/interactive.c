/* interactive.c - ntx-run -i (--chat -i, -cnv): a conversation on a terminal
 * or a pipe. Each line of stdin is a user turn; the whole conversation is
 * rendered with the chat template and submitted to the scheduler
 * (lib/engine/scheduler.c), whose prefix reuse keeps the KV cache of the
 * earlier turns: only the new tokens (the end of the last reply, the new
 * user message, the assistant header) are evaluated. The reply streams to
 * stdout; per-turn counts and timings go to stderr (and --stats-json).
 *
 * Ctrl-C during a reply stops it (what was said stays in the history) and
 * returns to the prompt; Ctrl-C at the prompt, a second Ctrl-C during a
 * reply (main.c's handler), or end of input ends the conversation. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "run_int.h"
#include "tool.h"
#include "scheduler.h"

struct turn_out {
	struct run_ctx *c;
	struct ntx_detok *dt;
	int failed;                 /* stdout failed */
	int werr;
	int done;
	struct ntx_sched_result res;
	int32_t *gen;               /* a copy of the result's tokens */
};

static int on_token(void *p, int32_t tok)
{
	struct turn_out *t = p;
	struct ntx_err err = { 0 };
	const char *s;
	size_t n;

	if (!t->c->eog[tok] && !t->failed && ntx_detok_push(t->dt, tok, &s, &n, &err) == 0 && n) {
		errno = 0;
		if (fwrite(s, 1, n, stdout) != n || fflush(stdout)) {
			t->failed = 1;
			t->werr = errno ? errno : EIO;
		}
	}
	return t->failed || run_interrupted;
}

static void on_done(void *p, const struct ntx_sched_result *r)
{
	struct turn_out *t = p;

	t->done = 1;
	t->res = *r;
	t->gen = malloc((size_t)(r->n_gen ? r->n_gen : 1) * sizeof *t->gen);
	if (t->gen && r->n_gen > 0)
		memcpy(t->gen, r->gen, (size_t)r->n_gen * sizeof *t->gen);
	t->res.gen = t->gen;
}

/* The conversation so far. */
struct convo {
	struct ntx_chat_msg *m;
	char **own;                 /* owned strings, parallel to m */
	int n, cap;
};

static int convo_add(struct convo *cv, const char *role, char *content)
{
	if (cv->n == cv->cap) {
		int cap = cv->cap ? cv->cap * 2 : 16;
		struct ntx_chat_msg *m = realloc(cv->m, (size_t)cap * sizeof *m);
		char **own;

		if (!m)
			return -1;
		cv->m = m;
		own = realloc(cv->own, (size_t)cap * sizeof *own);
		if (!own)
			return -1;
		cv->own = own;
		cv->cap = cap;
	}
	cv->m[cv->n].role = role;
	cv->m[cv->n].content = content;
	cv->own[cv->n++] = content;
	return 0;
}

static void convo_free(struct convo *cv)
{
	int i;

	for (i = 0; i < cv->n; i++)
		free(cv->own[i]);
	free(cv->m);
	free(cv->own);
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

int mode_interactive(struct run_ctx *c)
{
	const struct run_opts *o = c->o;
	struct ntx_err err = { 0 };
	struct ntx_sched *sc = ntx_sched_new(c->engine, c->eog, &err);
	struct convo cv;
	json_t *turns = json_array();
	char *line = NULL;
	size_t cap = 0;
	int tty = isatty(0), rc = 0, n_turn = 0;

	memset(&cv, 0, sizeof cv);
	if (!sc || !turns) {
		json_decref(turns);
		return run_fail(&err);
	}
	if (o->system) {
		char *s = strdup(o->system);

		if (!s || convo_add(&cv, "system", s)) {
			free(s);
			ntx_err_set(&err, NTX_ENOMEM, "out of memory");
			rc = run_fail(&err);
			goto out;
		}
	}
	for (;;) {
		struct turn_out t;
		struct ntx_sched_req sr;
		char *text = NULL, *u, *reply = NULL;
		int32_t *toks = NULL;
		int n_toks = 0, r;
		size_t rl = 0;
		const char *p;
		size_t pn;
		double t0;

		if (tty && !o->quiet) {
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
		if (!line[0])
			continue;
		u = strdup(line);
		if (!u || convo_add(&cv, "user", u)) {
			free(u);
			ntx_err_set(&err, NTX_ENOMEM, "out of memory");
			rc = run_fail(&err);
			break;
		}
		if (ntx_chat_format(c->vocab, o->chat_template, cv.m, cv.n, 1, &text, &err) ||
		    ntx_tokenize(c->vocab, text, strlen(text), !o->no_bos, 1, &toks, &n_toks, &err)) {
			free(text);
			rc = run_fail(&err);
			break;
		}
		free(text);
		memset(&t, 0, sizeof t);
		t.c = c;
		t.dt = ntx_detok_new(c->vocab, 0, &err);
		memset(&sr, 0, sizeof sr);
		sr.tokens = toks;
		sr.n_tokens = n_toks;
		sr.n_predict = o->n_predict;
		run_sampler_params(o, &sr.sp);
		sr.ignore_eog = o->ignore_eos;
		sr.on_token = on_token;
		sr.on_done = on_done;
		sr.user = &t;
		t0 = tool_now_s();
		if (!t.dt || ntx_sched_submit(sc, &sr, &err) < 0) {
			free(toks);
			ntx_detok_free(t.dt);
			/* the conversation no longer fits (or no memory) */
			rc = run_fail(&err);
			break;
		}
		free(toks);
		while (!t.done) {
			if (ntx_sched_step(sc, &err)) {
				ntx_sched_cancel_all(sc, NTX_STOP_INTERRUPT);
				if (err.code != NTX_EINTR) {
					ntx_detok_free(t.dt);
					free(t.gen);
					rc = run_fail(&err);
					goto out;
				}
			}
		}
		ntx_detok_flush(t.dt, &p, &pn);
		if (pn && !t.failed && fwrite(p, 1, pn, stdout) != pn)
			t.failed = 1;
		ntx_detok_free(t.dt);
		if (!t.failed && (fputc('\n', stdout) == EOF || fflush(stdout)))
			t.failed = 1;
		n_turn++;
		{
			const struct ntx_sched_result *res = &t.res;
			double ttft = res->t_first > 0 ? res->t_first - t0 : 0;
			double gen_s = res->t_end - (res->t_first > 0 ? res->t_first : res->t_end);
			int n_eval = res->n_prompt - res->n_reused;

			json_array_append_new(turns, json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f}",
				"turn", n_turn, "n_prompt", res->n_prompt, "n_reused", res->n_reused,
				"n_evaluated", n_eval, "n_gen", res->n_gen,
				"stop_reason", ntx_stop_name(res->stop), "ttft_ms", ttft * 1e3,
				"gen_tok_per_s", gen_s > 0 && res->n_gen > 1 ? (res->n_gen - 1) / gen_s : 0.0));
			if (!o->quiet)
				fprintf(stderr, PROG ": turn %d: %d prompt tokens (%d reused, %d evaluated), %d generated, first token in %.1f ms%s\n",
					n_turn, res->n_prompt, res->n_reused, n_eval, res->n_gen, ttft * 1e3,
					res->stop == NTX_STOP_CALLER && run_interrupted ? ", interrupted" : "");
		}
		/* the reply (what was said of it) joins the history */
		if (run_gen_text(c, t.gen, t.res.n_gen, &reply, &rl, &err) ||
		    convo_add(&cv, "assistant", reply)) {
			free(reply);
			free(t.gen);
			rc = run_fail(&err);
			break;
		}
		free(t.gen);
		if (t.failed) {
			if (t.werr != EPIPE) {
				fprintf(stderr, PROG ": writing output: %s\n", strerror(t.werr));
				rc = 1;
			}
			break;
		}
		run_interrupted = 0; /* a stopped reply: back to the prompt */
	}
	if (o->stats_json) {
		json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:o}", "format", "ntx.stats", "version", 1,
				      "mode", "interactive", "backend",
				      ntx_backend_name(ntx_engine_backend(c->engine)), "turns",
				      json_incref(turns));

		if (!j || run_write_stats(c, j, &err)) {
			if (rc == 0)
				rc = run_fail(&err);
		}
		json_decref(j);
	}
out:
	json_decref(turns);
	free(line);
	convo_free(&cv);
	ntx_sched_free(sc);
	return rc;
}
