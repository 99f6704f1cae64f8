/* batch.c - --batch: JSON Lines requests on stdin, one JSON Lines result per
 * request on stdout as each finishes (doc/batch-jsonl.md). Up to --parallel
 * sequences decode together (each with its own KV cache slot and sampler); a
 * new request takes the slot of a finished one (continuous batching). One
 * engine step evaluates every active sequence's next token (and chunks of new
 * prompts), so each weight transfer serves the whole batch.
 *
 * Every request line gets exactly one record: a result, or an error record
 * with the line number (a bad line never stops the others). Ctrl-C ends the
 * run with a record for each request in flight (stop_reason "interrupted");
 * a closed stdout ends it quietly. The scheduling (slots, steps, samplers,
 * stop conditions, prefix reuse) is lib/engine/scheduler.c, shared with
 * ntx-serve; this file reads requests and writes records. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "batchreq.h"
#include "chat.h"
#include "chat_json.h"
#include "run_int.h"
#include "tool.h"
#include "scheduler.h"

/* One request in flight: what its record needs besides the scheduler's
 * result. */
struct breq {
	struct batch *b;
	json_t *id;               /* the request's id (any JSON value), echoed */
	long line;                /* its input line */
};

struct batch {
	struct run_ctx *c;
	struct ntx_sched *sched;
	int n_ctx;
	long line_no;
	int eof;
	int rerr;                 /* errno of a failed read of stdin */
	int werr;                 /* errno of a failed write of stdout */
	const char *failing;      /* an engine error: records of requests in flight */
	char *buf;                /* input not yet consumed */
	size_t len, cap;
	int64_t done, gen_total, prompt_total, reused_total, errors;
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

/* The scheduler's on_done: the request's record (an error record when the
 * engine failed); frees the request. */
static void on_done(void *user, const struct ntx_sched_result *r)
{
	struct breq *q = user;
	struct batch *b = q->b;
	struct ntx_err err = { 0 };
	char *text = NULL;
	size_t tl = 0;
	double t = r->t_end, t_first = r->t_first > 0 ? r->t_first : t;
	json_t *j;

	if (b->failing) {
		error_record(b, q->id, q->line, b->failing);
	} else if (run_gen_text(b->c, r->gen, r->n_gen, &text, &tl, &err)) {
		error_record(b, q->id, q->line, err.msg);
	} else {
		j = json_pack("{s:O?, s:o, s:i, s:s, s:i, s:I, s:i, s:{s:f, s:f, s:f}}", "id", q->id,
			      "text", run_json_text(text, tl), "tokens", r->n_gen, "stop_reason",
			      ntx_stop_name(r->stop), "prompt_tokens", r->n_prompt, "line",
			      (json_int_t)q->line, "reused_tokens", r->n_reused, "timings",
			      "prompt_ms", (t_first - r->t_submit) * 1e3, "gen_ms", (t - t_first) * 1e3,
			      "gen_tok_per_s",
			      t > t_first && r->n_gen > 1 ? (r->n_gen - 1) / (t - t_first) : 0.0);
		free(text);
		b->done++;
		b->gen_total += r->n_gen;
		emit_json(b, j);
	}
	json_decref(q->id);
	free(q);
}

/* ---- requests ---- */

/* The chat prompt of a request: its "messages", or its prompt as the user
 * message after the system one. *out malloc'ed. */
static int chat_prompt(const struct batch *b, json_t *messages, const char *system,
		       const char *prompt, char **out, struct ntx_err *err)
{
	const char *tmpl = b->c->o->chat_template;
	struct ntx_chat_msg m[2], *mm = NULL;
	int nm = 0, rc;

	if (messages) {
		if (ntx_chat_msgs_from_json(messages, "messages", &mm, &nm, err))
			return -1;
		rc = ntx_chat_format(b->c->vocab, tmpl, mm, nm, 1, out, err);
		free(mm);
		return rc;
	}
	if (system) {
		m[nm].role = "system";
		m[nm++].content = system;
	}
	m[nm].role = "user";
	m[nm++].content = prompt;
	return ntx_chat_format(b->c->vocab, tmpl, m, nm, 1, out, err);
}

/* Parse one request line (ntx_batch_req_parse) and submit it; on a bad line
 * write an error record. Returns -1 only when stdout fails. */
static int start_request(struct batch *b, const char *line, size_t len)
{
	const struct run_opts *o = b->c->o;
	struct ntx_err err = { 0 };
	struct ntx_sched_req sr;
	struct ntx_batch_req def, req;
	const char *prompt;
	char *chat = NULL;
	int32_t *toks = NULL;
	int n_toks = 0, rc;
	struct breq *q;

	memset(&def, 0, sizeof def);
	run_sampler_params(o, &def.sp);
	def.n_predict = o->n_predict;
	def.chat = o->chat;
	def.system = o->system;
	if (ntx_batch_req_parse(line, len, &def, &req, &err)) {
		rc = error_record(b, req.id, b->line_no, err.msg);
		ntx_batch_req_free(&req);
		return rc;
	}
	prompt = req.prompt;
	rc = 0;
	if (req.chat) {
		rc = chat_prompt(b, req.messages, req.system, req.prompt, &chat, &err);
		prompt = chat;
	}
	if (rc == 0)
		rc = ntx_tokenize(b->c->vocab, prompt, strlen(prompt), !o->no_bos,
				  req.chat || !o->no_parse_special, &toks, &n_toks, &err);
	free(chat);
	q = rc == 0 ? calloc(1, sizeof *q) : NULL;
	if (rc == 0 && !q)
		rc = ntx_err_set(&err, NTX_ENOMEM, "out of memory");
	if (rc == 0) {
		memset(&sr, 0, sizeof sr);
		sr.sp = req.sp;
		sr.n_predict = req.n_predict;
		q->b = b;
		q->id = json_incref(req.id);
		q->line = b->line_no;
		sr.tokens = toks;
		sr.n_tokens = n_toks;
		sr.on_done = on_done;
		sr.user = q;
		if (ntx_sched_submit(b->sched, &sr, &err) < 0) {
			json_decref(q->id);
			free(q);
			rc = -1;
		}
	}
	free(toks);
	if (rc)
		rc = error_record(b, req.id, b->line_no, err.msg);
	else
		b->prompt_total += n_toks;
	ntx_batch_req_free(&req);
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
	while (ntx_sched_n_free(b->sched) > 0 && !run_interrupted) {
		int r = read_line(b, ntx_sched_n_active(b->sched) == 0);
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

static void progress(struct batch *b, int final)
{
	double t = tool_now_s(), el = t - b->t0;

	if (!b->tty || b->c->o->quiet || (!final && t - b->t_progress < 0.2))
		return;
	b->t_progress = t;
	fprintf(stderr, "\r" PROG ": batch: %lld done (%lld errors), %d active, %lld tokens, %.1f tok/s\033[K",
		(long long)b->done, (long long)b->errors, ntx_sched_n_active(b->sched),
		(long long)b->gen_total, el > 0 ? b->gen_total / el : 0.0);
	if (final)
		fputc('\n', stderr);
}

static int write_stats(struct batch *b, double t)
{
	const struct run_opts *o = b->c->o;
	struct ntx_err err = { 0 };
	struct ntx_sched_stats ss;
	json_t *j;
	int rc;

	ntx_sched_get_stats(b->sched, &ss);
	j = json_pack("{s:s, s:i, s:s, s:s, s:I, s:s, s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f}",
		      "format", "ntx.stats", "version", 1, "mode", "batch",
		      "model_filename", b->c->model->gguf->path,
		      "model_size", (json_int_t)b->c->model->gguf->file_size,
		      "backend", ntx_backend_name(ntx_engine_backend(b->c->engine)),
		      "n_threads", run_n_threads(o), "n_ctx", b->n_ctx,
		      "n_parallel", ntx_sched_n_slots(b->sched),
		      "kv_type", o->kv_type == NTX_KV_CACHE_F32 ? "f32" : "f16",
		      "n_requests", (json_int_t)b->done, "n_errors", (json_int_t)b->errors,
		      "n_prompt", (json_int_t)b->prompt_total, "n_prompt_reused", (json_int_t)ss.n_reused,
		      "n_gen", (json_int_t)b->gen_total,
		      "t_total_ms", t * 1e3, "gen_tok_per_s", t > 0 ? b->gen_total / t : 0.0);
	if (!j) {
		ntx_err_set(&err, NTX_ENOMEM, "out of memory");
		return run_fail(&err);
	}
	if (ss.n_verify_steps)
		json_object_set_new(j, "speculative",
				    json_pack("{s:I, s:I, s:f, s:I, s:I, s:f, s:f}",
					      "drafted", (json_int_t)ss.n_drafted,
					      "accepted", (json_int_t)ss.n_accepted,
					      "acceptance_rate", ss.n_drafted ? (double)ss.n_accepted / ss.n_drafted : 0.0,
					      "verify_steps", (json_int_t)ss.n_verify_steps,
					      "draft_evals", (json_int_t)ss.n_draft_evals,
					      "t_draft_ms", ss.t_draft_s * 1e3, "t_verify_ms", ss.t_verify_s * 1e3));
	run_add_streaming_json(b->c, j);
	rc = run_write_stats(b->c, j, &err);
	json_decref(j);
	return rc ? run_fail(&err) : 0;
}

int mode_batch(struct run_ctx *c)
{
	struct batch b;
	struct ntx_err err = { 0 };
	int rc = 0, failed = 0;
	double t;

	memset(&b, 0, sizeof b);
	b.c = c;
	b.n_ctx = ntx_engine_n_ctx(c->engine);
	b.tty = isatty(2);
	b.t0 = tool_now_s();
	b.sched = ntx_sched_new(c->engine, c->eog, &err);
	if (!b.sched)
		return run_fail(&err);
	if ((c->draft || c->o->lookup) &&
	    ntx_sched_set_spec(b.sched, c->draft, c->o->lookup,
			       c->o->draft_k > 0 ? c->o->draft_k : 4, c->o->draft_k == 0, &err)) {
		ntx_sched_free(b.sched);
		return run_fail(&err);
	}
	for (;;) {
		if (fill_slots(&b))
			break; /* stdout failed */
		if (!ntx_sched_n_active(b.sched))
			break;
		if (ntx_sched_step(b.sched, &err)) {
			if (!b.werr)
				failed = 1;
			break;
		}
		if (b.werr)
			break;
		progress(&b, 0);
	}
	if (run_interrupted || err.code == NTX_EINTR) {
		/* Ctrl-C: what each request in flight has so far */
		ntx_sched_cancel_all(b.sched, NTX_STOP_INTERRUPT);
		rc = 130;
	} else if (failed) {
		/* an engine error: every request in flight gets it as its
		 * error record, then the run stops */
		b.failing = err.msg;
		ntx_sched_cancel_all(b.sched, NTX_STOP_NONE);
		rc = run_fail(&err);
	}
	t = tool_now_s() - b.t0;
	if (b.werr == EPIPE) {
		/* the reader has gone (| head): end quietly */
		goto out;
	}
	progress(&b, 1);
	if (b.werr) {
		fprintf(stderr, PROG ": writing results: %s\n", strerror(b.werr));
		rc = 1;
	} else if (b.rerr) {
		fprintf(stderr, PROG ": reading requests: %s\n", strerror(b.rerr));
		rc = 1;
	}
	if (!c->o->quiet) {
		if (rc == 130)
			fprintf(stderr, PROG ": interrupted\n");
		fprintf(stderr, PROG ": batch: %lld requests (%lld errors), %lld tokens generated in %.2f s (%.2f tok/s), %d parallel\n",
			(long long)b.done, (long long)b.errors, (long long)b.gen_total, t,
			t > 0 ? b.gen_total / t : 0.0, ntx_sched_n_slots(b.sched));
		{
			struct ntx_sched_stats ss;

			ntx_sched_get_stats(b.sched, &ss);
			if (ss.n_verify_steps)
				fprintf(stderr, PROG ": speculative: %lld drafted, %lld accepted (%.1f%%), %lld verification steps; draft %.2f s, verify %.2f s\n",
					(long long)ss.n_drafted, (long long)ss.n_accepted,
					ss.n_drafted ? 100.0 * ss.n_accepted / ss.n_drafted : 0.0,
					(long long)ss.n_verify_steps, ss.t_draft_s, ss.t_verify_s);
		}
		run_print_streaming(c);
	}
	if (c->o->stats_json && write_stats(&b, t) && rc == 0)
		rc = 1;
out:
	/* requests left after a write error: no records */
	b.werr = b.werr ? b.werr : EPIPE;
	ntx_sched_cancel_all(b.sched, NTX_STOP_CALLER);
	ntx_sched_free(b.sched);
	free(b.buf);
	return rc;
}
