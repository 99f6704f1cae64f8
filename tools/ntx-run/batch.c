/* batch.c - --batch over ntx.h: JSON Lines requests on stdin, one JSON
 * Lines result per request on stdout as each finishes (doc/batch-jsonl.md).
 * Up to --parallel sequences decode together (each with its own KV cache
 * slot and sampler); a new request takes the slot of a finished one
 * (continuous batching). One step evaluates every active sequence's next
 * token (and pieces of new prompts), so each weight transfer serves the
 * whole batch.
 *
 * Every request line gets exactly one record: a result, or an error record
 * with the line number (a bad line never stops the others). Ctrl-C ends the
 * run with a record for each request in flight (stop_reason "interrupted");
 * a closed stdout ends it quietly. The library reads each line
 * (ntx_request_parse_json) and schedules the requests (ntx_ctx_submit,
 * ntx_ctx_step: slots, samplers, stop conditions, prefix reuse, shared
 * with ntx-serve); this file reads stdin and writes records. */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "out.h"
#include "tool.h"

/* One request in flight: what its record needs besides the library's
 * result. */
struct breq {
	struct batch *b;
	json_t *id;               /* the request's id (any JSON value), echoed */
	long line;                /* its input line */
	double t_submit;          /* for a request whose prompt never finished */
};

struct batch {
	struct run_opts *o;
	struct run_api a;
	struct run_stats stats;       /* --stats-json, opened before any work */
	struct ntx_error *e;          /* the run's calls */
	struct ntx_error *re;         /* a request's: its error record */
	struct ntx_detokenizer *detok;
	struct ntx_gen_params gp;     /* the options: every request's defaults */
	struct ntx_request_json_info def;
	int n_slots, n_active;
	long line_no;
	int eof;
	int rerr;                 /* errno of a failed read of stdin */
	int werr;                 /* errno of a failed write of stdout */
	const char *failing;      /* an engine error: records of requests in flight */
	char *buf;                /* input not yet consumed */
	size_t len, cap;
	int64_t done, gen_total, prompt_total, errors;
	double t0, t_progress;
	int tty;
};

/* ---- output ---- */

/* Write one record (takes j). After the first failed write nothing more is
 * written; b->werr says why. Returns 0 or -1. */
static int emit_json(struct batch *b, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	size_t n;

	json_decref(j);
	if (b->werr) {
		free(s);
		return -1;
	}
	if (!s) {
		b->werr = ENOMEM;
		return -1;
	}
	n = strlen(s);
	s[n] = '\n'; /* json_dumps' NUL: the line's end (written with n + 1) */
	errno = 0;
	if (fwrite(s, 1, n + 1, stdout) != n + 1 || fflush(stdout))
		b->werr = errno ? errno : EIO;
	free(s);
	return b->werr ? -1 : 0;
}

static int error_record(struct batch *b, json_t *id, long line, const char *msg)
{
	b->errors++;
	b->done++;
	return emit_json(b, json_pack("{s:O?, s:s, s:I}", "id", id, "error", msg, "line",
				      (json_int_t)line));
}

/* A request's record (an error record when the engine failed); frees the
 * request. */
static void on_done(void *user, int64_t id, const struct ntx_gen_result *r, const int32_t *gen)
{
	struct breq *q = user;
	struct batch *b = q->b;
	double prompt_ms = r->t_prompt_ms, gen_ms = r->t_gen_ms;
	json_t *text;

	(void)id;
	b->n_active--;
	if (r->n_gen == 0 && r->finish != NTX_FINISH_LENGTH) /* the prompt never finished */
		prompt_ms = (tool_now_s() - q->t_submit) * 1e3, gen_ms = 0;
	if (b->failing) {
		error_record(b, q->id, q->line, b->failing);
	} else if (!(text = run_text_json(b->o, b->detok, b->a.lm, gen, r->n_gen, b->re))) {
		error_record(b, q->id, q->line,
			     ntx_error_message(b->re)[0] ? ntx_error_message(b->re) : "out of memory");
	} else {
		b->done++;
		b->gen_total += r->n_gen;
		emit_json(b, json_pack("{s:O?, s:o, s:i, s:s, s:i, s:I, s:i, s:{s:f, s:f, s:f}}",
				       "id", q->id, "text", text, "tokens", r->n_gen, "stop_reason",
				       run_finish_name(r->finish), "prompt_tokens", r->n_prompt, "line",
				       (json_int_t)q->line, "reused_tokens", r->n_reused, "timings",
				       "prompt_ms", prompt_ms, "gen_ms", gen_ms, "gen_tok_per_s",
				       gen_ms > 0 && r->n_gen > 1 ? (r->n_gen - 1) / (gen_ms / 1e3)
								  : 0.0));
	}
	json_decref(q->id);
	free(q);
}

/* ---- requests ---- */

/* The prompt text of a request: its "messages", or its prompt as the user
 * message after the system one, through the chat template; else its
 * prompt. *chat (freed with ntx_free) holds a templated text. */
static const char *prompt_text(const struct batch *b, const struct ntx_request_json_info *in,
			       char **chat)
{
	const char *roles[2] = { "system", "user" }, *contents[2] = { in->system, in->prompt };
	int sys = in->system != NULL;

	*chat = NULL;
	if (!in->chat)
		return in->prompt;
	if (in->n_messages
		    ? ntx_lm_chat_apply(b->a.lm, b->o->chat_template, in->roles, in->contents,
					in->n_messages, NTX_CHAT_ADD_ASSISTANT, chat, b->re)
		    : ntx_lm_chat_apply(b->a.lm, b->o->chat_template, roles + !sys, contents + !sys,
					1 + sys, NTX_CHAT_ADD_ASSISTANT, chat, b->re))
		return NULL;
	return *chat;
}

/* Submit a parsed request (its prompt through the chat template, as
 * tokens) with id for its record: 0, or -1 with b->re's message (empty
 * when out of memory). */
static int submit(struct batch *b, const struct ntx_request_json *rj, json_t *id)
{
	struct ntx_request_json_info in;
	struct ntx_gen_params gp;
	struct ntx_request rq;
	struct breq *q = NULL;
	const char *text;
	char *chat = NULL;
	int32_t *toks = NULL;
	int n = 0, rc = -1;

	in.size = sizeof in;
	gp.size = sizeof gp;
	if (ntx_request_json_info(rj, &in, &gp, b->re) || !(text = prompt_text(b, &in, &chat)) ||
	    run_lm_tokenize(b->a.lm, text, strlen(text),
			    (b->o->no_bos ? 0 : NTX_TOKENIZE_ADD_BOS) |
				    (in.chat || !b->o->no_parse_special ? NTX_TOKENIZE_SPECIAL : 0),
			    &toks, &n, b->re) ||
	    !(q = calloc(1, sizeof *q)))
		goto out;
	q->b = b;
	q->id = json_incref(id);
	q->line = b->line_no;
	q->t_submit = tool_now_s();
	ntx_request_init(&rq);
	rq.prompt = toks;
	rq.n_prompt = n;
	rq.gen = &gp;
	rq.on_done = on_done;
	rq.user = q;
	if (ntx_ctx_submit(b->a.ctx, &rq, NULL, b->re)) {
		json_decref(q->id);
		free(q);
		goto out;
	}
	b->n_active++;
	b->prompt_total += n;
	rc = 0;
out:
	ntx_free(chat);
	free(toks);
	return rc;
}

/* Parse one request line and submit it; on a bad line write an error
 * record. Returns -1 only when stdout fails. */
static int start_request(struct batch *b, const char *line, size_t len)
{
	struct ntx_request_json *rj = NULL;
	char *idtext = NULL;
	json_t *id;
	enum ntx_status s;
	int rc = 0;

	ntx_error_clear(b->re);
	s = ntx_request_parse_json(line, len, &b->gp, &b->def, &rj, &idtext, b->re);
	/* the id as given (NULL when absent), for the record */
	id = idtext ? json_loads(idtext, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
	ntx_free(idtext);
	if (s || submit(b, rj, id))
		rc = error_record(b, id, b->line_no,
				  ntx_error_message(b->re)[0] ? ntx_error_message(b->re)
							      : "out of memory");
	json_decref(id);
	ntx_request_json_free(rj);
	return rc;
}

/* ---- input ---- */

/* Read one line if available (blocking only when block is set). Returns 1
 * with the line in b->buf[0..len), 0 if none now, -1 at end of input (or
 * when interrupted). A last line without a newline is a line. */
static int read_line(struct batch *b, int block)
{
	for (;;) {
		char *nl = b->len ? memchr(b->buf, '\n', b->len) : NULL;
		ssize_t r;
		struct pollfd pfd = { 0, POLLIN, 0 };

		if (nl)
			return 1;
		if (b->eof)
			return b->len ? 1 : -1;
		if (run_interrupted)
			return -1;
		if (!block && poll(&pfd, 1, 0) <= 0)
			return 0;
		if (b->cap - b->len < 65536) {
			size_t cap = b->cap ? b->cap * 2 : 1 << 20;
			char *nb = realloc(b->buf, cap);

			if (!nb) {
				b->rerr = ENOMEM;
				b->eof = 1;
				continue;
			}
			b->buf = nb;
			b->cap = cap;
		}
		r = read(0, b->buf + b->len, b->cap - b->len);
		if (r < 0 && errno == EINTR)
			continue; /* Ctrl-C: checked at the top */
		if (r < 0)
			b->rerr = errno;
		if (r <= 0)
			b->eof = 1;
		else
			b->len += (size_t)r;
	}
}

/* Submit requests from the input while a slot is free. Returns -1 when
 * stdout fails. */
static int fill_slots(struct batch *b)
{
	while (b->n_active < b->n_slots && !run_interrupted) {
		int r = read_line(b, b->n_active == 0);
		char *nl;
		size_t n, k = 0;

		if (r <= 0)
			return 0;
		nl = memchr(b->buf, '\n', b->len);
		n = nl ? (size_t)(nl - b->buf) : b->len;
		b->line_no++;
		if (n && b->buf[n - 1] == '\r')
			n--;
		/* blank lines are skipped (they still count as lines) */
		while (k < n && (b->buf[k] == ' ' || b->buf[k] == '\t'))
			k++;
		if (k < n && start_request(b, b->buf, n))
			return -1;
		n = nl ? (size_t)(nl - b->buf) + 1 : b->len;
		memmove(b->buf, b->buf + n, b->len - n);
		b->len -= n;
	}
	return 0;
}

/* ---- progress and totals ---- */

static void progress(struct batch *b, int final)
{
	double t = tool_now_s(), el = t - b->t0;

	if (!b->tty || b->o->quiet || (!final && t - b->t_progress < 0.2))
		return;
	b->t_progress = t;
	fprintf(stderr, "\r" PROG ": batch: %lld done (%lld errors), %d active, %lld tokens, %.1f tok/s\033[K",
		(long long)b->done, (long long)b->errors, b->n_active,
		(long long)b->gen_total, el > 0 ? b->gen_total / el : 0.0);
	if (final)
		fputc('\n', stderr);
}

/* The summary lines on stderr (not with -q). */
static void summary(const struct batch *b, const struct ntx_ctx_stats *st, double t, int rc)
{
	if (b->o->quiet)
		return;
	if (rc == 130)
		fprintf(stderr, PROG ": interrupted\n");
	fprintf(stderr, PROG ": batch: %lld requests (%lld errors), %lld tokens generated in %.2f s (%.2f tok/s), %d parallel\n",
		(long long)b->done, (long long)b->errors, (long long)b->gen_total, t,
		t > 0 ? b->gen_total / t : 0.0, st->n_seq);
	if (st->n_batch_verify_steps)
		fprintf(stderr, PROG ": speculative: %lld drafted, %lld accepted (%.1f%%), %lld verification steps; draft %.2f s, verify %.2f s\n",
			(long long)st->n_drafted, (long long)st->n_accepted,
			st->n_drafted ? 100.0 * st->n_accepted / st->n_drafted : 0.0,
			(long long)st->n_batch_verify_steps, st->t_batch_draft_ms / 1e3,
			st->t_batch_verify_ms / 1e3);
	run_streaming_line(st);
}

/* The --stats-json document: 0, or 1 after the message. */
static int write_stats(struct batch *b, const struct ntx_ctx_stats *st, double t)
{
	const struct run_opts *o = b->o;
	struct ntx_lm_info li;
	json_t *j;
	int rc;

	li.size = sizeof li;
	if (ntx_lm_info(b->a.lm, &li, b->e)) {
		fprintf(stderr, PROG ": %s\n", ntx_error_message(b->e));
		return 1;
	}
	j = json_pack("{s:s, s:i, s:s, s:s, s:I, s:s, s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f}",
		      "format", "ntx.stats", "version", 1, "mode", "batch",
		      "model_filename", li.path, "model_size", (json_int_t)li.file_size,
		      "backend", run_backend_name(st->backend),
		      "n_threads", run_threads(o), "n_ctx", st->n_ctx, "n_parallel", st->n_seq,
		      "kv_type", o->kv_type == NTX_KV_CACHE_F32 ? "f32" : "f16",
		      "n_requests", (json_int_t)b->done, "n_errors", (json_int_t)b->errors,
		      "n_prompt", (json_int_t)b->prompt_total,
		      "n_prompt_reused", (json_int_t)st->n_prompt_reused,
		      "n_gen", (json_int_t)b->gen_total,
		      "t_total_ms", t * 1e3, "gen_tok_per_s", t > 0 ? b->gen_total / t : 0.0);
	if (!j) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	if (st->n_batch_verify_steps)
		json_object_set_new(j, "speculative",
				    json_pack("{s:I, s:I, s:f, s:I, s:I, s:f, s:f}",
					      "drafted", (json_int_t)st->n_drafted,
					      "accepted", (json_int_t)st->n_accepted,
					      "acceptance_rate", st->n_drafted ? (double)st->n_accepted / st->n_drafted : 0.0,
					      "verify_steps", (json_int_t)st->n_batch_verify_steps,
					      "draft_evals", (json_int_t)st->n_batch_draft_evals,
					      "t_draft_ms", st->t_batch_draft_ms,
					      "t_verify_ms", st->t_batch_verify_ms));
	run_streaming_json(st, j);
	run_experts_json(b->a.lm, b->a.ctx, j);
	rc = run_stats_commit(o, &b->stats, j);
	json_decref(j);
	return rc;
}

/* ---- the run ---- */

/* Submit and step until the input ends and every request is done, stdout
 * fails or a step fails: 0, or the failed step's status (in b->e). */
static enum ntx_status run_batch(struct batch *b)
{
	enum ntx_status s;

	for (;;) {
		if (fill_slots(b))
			return NTX_OK; /* stdout failed */
		if (!b->n_active)
			return NTX_OK;
		/* Ctrl-C between two steps: the context's flag may have been
		 * cleared by the step it came during */
		if (run_interrupted)
			return NTX_STATUS_INTERRUPTED;
		s = ntx_ctx_step(b->a.ctx, NULL, b->e);
		if (s)
			return s;
		if (b->werr)
			return NTX_OK;
		progress(b, 0);
	}
}

/* The end of a run: the records of the requests in flight, the messages,
 * the statistics; the exit status. */
static int finish(struct batch *b, enum ntx_status s)
{
	struct ntx_ctx_stats st;
	int rc = 0;
	double t;

	if (run_interrupted || s == NTX_STATUS_INTERRUPTED) {
		/* Ctrl-C: what each request in flight has so far */
		ntx_ctx_cancel_all(b->a.ctx, NTX_FINISH_INTERRUPTED, NULL);
		rc = 130;
	} else if (s && !b->werr) {
		/* an engine error: every request in flight gets it as its
		 * error record, then the run stops */
		b->failing = ntx_error_message(b->e);
		ntx_ctx_cancel_all(b->a.ctx, NTX_FINISH_STOPPED, NULL);
		fprintf(stderr, PROG ": %s\n", b->failing);
		rc = s == NTX_STATUS_NOFIT ? 3 : 1;
	}
	t = tool_now_s() - b->t0;
	if (b->werr == EPIPE) /* the reader has gone (| head): end quietly */
		return rc;
	progress(b, 1);
	if (b->werr) {
		fprintf(stderr, PROG ": writing results: %s\n", strerror(b->werr));
		rc = 1;
	} else if (b->rerr) {
		fprintf(stderr, PROG ": reading requests: %s\n", strerror(b->rerr));
		rc = 1;
	}
	st.size = sizeof st;
	if (ntx_ctx_stats(b->a.ctx, &st, b->re)) {
		fprintf(stderr, PROG ": %s\n", ntx_error_message(b->re));
		return 1;
	}
	summary(b, &st, t, rc);
	if (b->o->stats_json && write_stats(b, &st, t) && rc == 0)
		rc = 1;
	return rc;
}

/* What a run needs besides the context: the error objects, the
 * detokenizer of the records' text, the requests' defaults. */
static int batch_init(struct batch *b)
{
	const struct run_opts *o = b->o;
	struct ntx_ctx_stats st;

	b->tty = isatty(2);
	b->t0 = tool_now_s();
	b->e = ntx_error_new();
	b->re = ntx_error_new();
	st.size = sizeof st;
	if (!b->e || !b->re ||
	    ntx_detokenizer_new(b->a.lm, NTX_DETOKENIZER_REPLACE_INVALID, &b->detok, b->e) ||
	    ntx_ctx_stats(b->a.ctx, &st, b->e)) {
		fprintf(stderr, PROG ": %s\n", b->e ? ntx_error_message(b->e) : "out of memory");
		return 1;
	}
	b->n_slots = st.n_seq;
	b->gp = o->gp;
	b->gp.size = sizeof b->gp;
	b->gp.n_predict = o->n_predict;
	b->gp.ignore_eog = o->ignore_eos;
	memset(&b->def, 0, sizeof b->def);
	b->def.size = sizeof b->def;
	b->def.chat = o->chat;
	b->def.system = o->system;
	return 0;
}

int mode_batch(struct run_opts *o)
{
	struct batch b;
	int rc;

	memset(&b, 0, sizeof b);
	b.o = o;
	/* --stats-json first: an unwritable file fails before any work */
	if ((rc = run_stats_open(o, &b.stats)) != 0)
		return rc;
	if ((rc = run_api_open(o, &b.a)) == 0 && (rc = batch_init(&b)) == 0)
		rc = run_expert_stats(o, &b.a, finish(&b, run_batch(&b)));
	/* requests left after a write error: no records */
	b.werr = b.werr ? b.werr : EPIPE;
	if (b.a.ctx)
		ntx_ctx_cancel_all(b.a.ctx, NTX_FINISH_STOPPED, NULL);
	run_stats_abort(&b.stats);
	ntx_detokenizer_free(b.detok);
	run_api_close(&b.a);
	ntx_error_free(b.re);
	ntx_error_free(b.e);
	free(b.buf);
	return rc;
}
