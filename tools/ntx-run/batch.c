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
 * a closed stdout ends it quietly. */
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
#include "run.h"

enum slot_state { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE };

struct slot {
	enum slot_state state;
	json_t *id;               /* the request's id (any JSON value), echoed */
	long line;                /* its input line */
	int32_t *prompt;
	int n_prompt, n_fed;      /* prompt tokens and how many are in the cache */
	int32_t *gen;
	int n_gen, cap_gen, n_predict;
	int32_t cur;              /* sampled, not yet evaluated */
	int n_past;
	struct ntx_sampler *smp;
	double t_start, t_first;
	enum ntx_stop stop;
	int in_step;              /* its prompt piece is in this step: 1 shared, 2 alone */
};

struct batch {
	struct run_ctx *c;
	struct slot *slots;
	int n_slots;
	int64_t V;
	int n_ctx;
	long line_no;
	int eof;
	int rerr;                 /* errno of a failed read of stdin */
	int werr;                 /* errno of a failed write of stdout */
	char *buf;                /* input not yet consumed */
	size_t len, cap;
	int32_t *tok, *pos, *seq;
	uint8_t *want;
	int *row_slot;
	float *logits;
	int32_t *ids;       /* [n_slots] argmax rows, when every row's sampler is argmax */
	int top1;           /* the last step returned ids, not logits */
	int n_ub;
	int n_cut;                /* prompts are cut into pieces of this many tokens */
	int first;                /* slot the next step's decode tokens start at */
	int64_t done, gen_total, prompt_total, errors;
	double t0, t_progress;
	int tty;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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

static void slot_clear(struct slot *s)
{
	json_decref(s->id);
	free(s->prompt);
	free(s->gen);
	ntx_sampler_free(s->smp);
	memset(s, 0, sizeof *s);
}

/* The result record of slot s; frees the slot. */
static int finish(struct batch *b, struct slot *s)
{
	struct ntx_err err = { 0 };
	char *text = NULL;
	size_t tl = 0;
	double t = now_s(), t_first = s->t_first > 0 ? s->t_first : t;
	json_t *j;
	int rc;

	if (run_gen_text(b->c, s->gen, s->n_gen, &text, &tl, &err)) {
		rc = error_record(b, s->id, s->line, err.msg);
		slot_clear(s);
		return rc;
	}
	j = json_pack("{s:O?, s:o, s:i, s:s, s:i, s:I, s:{s:f, s:f, s:f}}", "id", s->id, "text",
		      run_json_text(text, tl), "tokens", s->n_gen, "stop_reason", ntx_stop_name(s->stop),
		      "prompt_tokens", s->n_prompt, "line", (json_int_t)s->line, "timings",
		      "prompt_ms", (t_first - s->t_start) * 1e3, "gen_ms", (t - t_first) * 1e3,
		      "gen_tok_per_s", t > t_first && s->n_gen > 1 ? (s->n_gen - 1) / (t - t_first) : 0.0);
	free(text);
	b->done++;
	b->gen_total += s->n_gen;
	rc = emit_json(b, j);
	slot_clear(s);
	return rc;
}

/* ---- requests ---- */

/* Parse one request line into slot s; on a bad line write an error record
 * and leave the slot free. Returns -1 only when stdout fails. */
static int start_request(struct batch *b, struct slot *s, const char *line, size_t len)
{
	const struct run_opts *o = b->c->o;
	struct ntx_err err = { 0 };
	struct ntx_batch_req def, req;
	struct ntx_sampler_params sp;
	json_t *id;
	const char *prompt, *system;
	char *chat = NULL;
	int use_chat, n_predict, rc;

	memset(&def, 0, sizeof def);
	def.sp = o->sp;
	def.system = o->system;
	def.chat = o->chat;
	def.n_predict = o->n_predict;
	if (ntx_batch_req_parse(line, len, &def, &req, &err)) {
		rc = error_record(b, req.id, b->line_no, err.msg);
		ntx_batch_req_free(&req);
		return rc;
	}
	id = req.id;
	prompt = req.prompt;
	system = req.system;
	use_chat = req.chat;
	n_predict = req.n_predict;
	sp = req.sp;
	if (use_chat) {
		struct ntx_chat_msg m[2];
		int nm = 0;

		if (system) {
			m[nm].role = "system";
			m[nm++].content = system;
		}
		m[nm].role = "user";
		m[nm++].content = prompt;
		if (ntx_chat_format(b->c->vocab, NULL, m, nm, 1, &chat, &err)) {
			rc = error_record(b, id, b->line_no, err.msg);
			ntx_batch_req_free(&req);
			return rc;
		}
		prompt = chat;
	}
	memset(s, 0, sizeof *s);
	rc = ntx_tokenize(b->c->vocab, prompt, strlen(prompt), !o->no_bos,
			  use_chat || !o->no_parse_special, &s->prompt, &s->n_prompt, &err);
	free(chat);
	if (rc == 0 && s->n_prompt == 0)
		rc = ntx_err_set(&err, NTX_EINVAL, "the prompt is empty");
	/* the same limit as a single prompt: it may fill the context */
	if (rc == 0 && s->n_prompt > b->n_ctx)
		rc = ntx_err_set(&err, NTX_EINVAL,
				 "the prompt has %d tokens, more than the context size %d (use -c)",
				 s->n_prompt, b->n_ctx);
	if (rc == 0) {
		s->smp = ntx_sampler_new(&sp, b->V, &err);
		if (!s->smp)
			rc = -1;
	}
	if (rc) {
		free(s->prompt);
		memset(s, 0, sizeof *s);
		rc = error_record(b, id, b->line_no, err.msg);
		ntx_batch_req_free(&req);
		return rc;
	}
	s->id = json_incref(id);
	ntx_batch_req_free(&req);
	s->line = b->line_no;
	s->n_predict = n_predict;
	s->state = SLOT_PREFILL;
	s->t_start = now_s();
	b->prompt_total += s->n_prompt;
	for (int i = 0; i < s->n_prompt; i++)
		ntx_sampler_accept(s->smp, s->prompt[i]);
	return 0;
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

/* Fill free slots from the input. Returns -1 when stdout fails. */
static int fill_slots(struct batch *b)
{
	int i, active = 0;

	for (i = 0; i < b->n_slots; i++)
		active += b->slots[i].state != SLOT_FREE;
	for (i = 0; i < b->n_slots; i++) {
		struct slot *s = &b->slots[i];

		while (s->state == SLOT_FREE && !run_interrupted) {
			int r = read_line(b, active == 0);
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
			if (k < n && start_request(b, s, b->buf, n))
				return -1;
			n = nl ? (size_t)(nl - b->buf) + 1 : b->len;
			memmove(b->buf, b->buf + n, b->len - n);
			b->len -= n;
			if (s->state != SLOT_FREE)
				active++;
		}
	}
	return 0;
}

static void progress(struct batch *b, int final)
{
	double t = now_s(), el = t - b->t0;
	int i, active = 0;

	if (!b->tty || b->c->o->quiet || (!final && t - b->t_progress < 0.2))
		return;
	b->t_progress = t;
	for (i = 0; i < b->n_slots; i++)
		active += b->slots[i].state != SLOT_FREE;
	fprintf(stderr, "\r" PROG ": batch: %lld done (%lld errors), %d active, %lld tokens, %.1f tok/s\033[K",
		(long long)b->done, (long long)b->errors, active, (long long)b->gen_total,
		el > 0 ? b->gen_total / el : 0.0);
	if (final)
		fputc('\n', stderr);
}

/* ---- decoding ---- */

/* One engine step over all active slots. Returns -1 with *err on an engine
 * error (NTX_EINTR when interrupted) or a failed write. */
/* Sample the next token of each slot whose logits row came back, in row
 * order, and finish the slots that stop. */
static int take_rows(struct batch *b, int nr, struct ntx_err *err)
{
	int i;

	for (i = 0; i < nr; i++) {
		struct slot *s = &b->slots[b->row_slot[i]];
		const float *row = b->logits + (int64_t)i * b->V;
		int32_t t;

		if (s->state == SLOT_PREFILL) {
			s->state = SLOT_DECODE;
			s->n_past = s->n_prompt;
			s->t_first = now_s();
			if (s->n_predict == 0) { /* the prompt only, as -n 0 */
				s->stop = NTX_STOP_LENGTH;
				if (finish(b, s))
					return ntx_err_set(err, NTX_EIO, "writing results failed");
				continue;
			}
		} else {
			s->n_past++;
		}
		t = b->top1 ? b->ids[i] : ntx_sampler_sample(s->smp, row);
		ntx_sampler_accept(s->smp, t);
		if (s->n_gen == s->cap_gen) {
			int cap = s->cap_gen ? s->cap_gen * 2 : 64;
			int32_t *g = realloc(s->gen, (size_t)cap * sizeof *g);

			if (!g)
				return ntx_err_set(err, NTX_ENOMEM, "out of memory");
			s->gen = g;
			s->cap_gen = cap;
		}
		s->gen[s->n_gen++] = t;
		s->cur = t;
		/* the order of ntx_generate: end of generation, then length,
		 * then a full context (t would not fit) */
		if (b->c->eog[t])
			s->stop = NTX_STOP_EOG;
		else if (s->n_predict >= 0 && s->n_gen >= s->n_predict)
			s->stop = NTX_STOP_LENGTH;
		else if (s->n_past >= b->n_ctx)
			s->stop = NTX_STOP_CONTEXT;
		if (s->stop && finish(b, s))
			return ntx_err_set(err, NTX_EIO, "writing results failed");
	}
	return 0;
}

/* The end of the next piece of s's prompt: prompts are cut at multiples of
 * the engine's prompt chunk, as ntx_generate cuts a prompt run alone. */
static int piece_end(const struct batch *b, const struct slot *s)
{
	int end = (s->n_fed / b->n_cut + 1) * b->n_cut;

	return end < s->n_prompt ? end : s->n_prompt;
}

/* Append the next piece of slot i's prompt to the step's tokens at *n. */
static void add_piece(struct batch *b, int i, int *n, int *nr)
{
	struct slot *s = &b->slots[i];
	int k, end = piece_end(b, s);

	for (k = s->n_fed; k < end; k++, (*n)++) {
		b->tok[*n] = s->prompt[k];
		b->pos[*n] = k;
		b->seq[*n] = i;
		b->want[*n] = k == s->n_prompt - 1;
	}
	s->n_fed = end;
	if (end == s->n_prompt)
		b->row_slot[(*nr)++] = i;
}

static int eval_step(struct batch *b, int n, int nr, struct ntx_err *err)
{
	struct ntx_batch nb;
	int i;

	memset(&nb, 0, sizeof nb);
	nb.n_tok = n;
	nb.tok = b->tok;
	nb.pos = b->pos;
	nb.seq = b->seq;
	nb.want = b->want;
	/* greedy rows only: the engine hands back argmax ids, no logits */
	b->top1 = 1;
	for (i = 0; i < nr; i++)
		b->top1 &= ntx_sampler_is_argmax(b->slots[b->row_slot[i]].smp);
	nb.ids = b->top1 ? b->ids : NULL;
	if (ntx_engine_eval(b->c->engine, &nb, NULL, b->top1 ? NULL : b->logits, err))
		return -1;
	return take_rows(b, nr, err);
}

/* The waiting prompt of the oldest request not yet in this step, or -1. */
static int oldest_prefill(const struct batch *b)
{
	int i, best = -1;

	for (i = 0; i < b->n_slots; i++) {
		const struct slot *s = &b->slots[i];

		if (s->state == SLOT_PREFILL && !s->in_step &&
		    (best < 0 || s->line < b->slots[best].line))
			best = i;
	}
	return best;
}

/* One step: the next token of every decoding slot and the next piece of
 * the waiting prompts, oldest request first while they fit in the engine's
 * ubatch, in one evaluation (one weight stream serves the whole batch). A
 * piece that could not fit even with the decode tokens alone goes in an
 * evaluation of its own; the others wait for the next step. The engine
 * gives decode tokens and each prompt piece (a prompt segment, struct
 * ntx_batch) the results they get alone, and pieces are cut as when the
 * request runs alone, so each sequence's output equals running it alone. */
static int step(struct batch *b, struct ntx_err *err)
{
	int n = 0, nr = 0, n_dec, i, j;

	/* decode tokens from a rotating start: with more slots than the
	 * ubatch holds, every slot gets its turn */
	for (j = 0; j < b->n_slots; j++) {
		struct slot *s = &b->slots[i = (b->first + j) % b->n_slots];

		s->in_step = 0;
		if (s->state == SLOT_DECODE && n < b->n_ub) {
			b->tok[n] = s->cur;
			b->pos[n] = s->n_past;
			b->seq[n] = i;
			b->want[n] = 1;
			b->row_slot[nr++] = i;
			n++;
		}
	}
	n_dec = n;
	b->first = (b->first + n) % b->n_slots;
	while ((i = oldest_prefill(b)) >= 0) {
		struct slot *s = &b->slots[i];
		int k = piece_end(b, s) - s->n_fed;

		if (n + k > b->n_ub && n_dec + k <= b->n_ub)
			break; /* fits in a later step */
		if (n + k <= b->n_ub) {
			add_piece(b, i, &n, &nr);
			s->in_step = 1;
		} else {
			s->in_step = 2; /* too large to share a step with the decode tokens */
		}
	}
	if (n && eval_step(b, n, nr, err))
		return -1;
	for (i = 0; i < b->n_slots; i++) {
		if (b->slots[i].in_step != 2)
			continue;
		n = nr = 0;
		add_piece(b, i, &n, &nr);
		if (eval_step(b, n, nr, err))
			return -1;
	}
	return 0;
}

static int n_active(const struct batch *b)
{
	int i, n = 0;

	for (i = 0; i < b->n_slots; i++)
		n += b->slots[i].state != SLOT_FREE;
	return n;
}

static int write_stats(struct batch *b, double t)
{
	const struct run_opts *o = b->c->o;
	struct ntx_err err = { 0 };
	json_t *j;
	int rc;

	j = json_pack("{s:s, s:i, s:s, s:s, s:I, s:s, s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:I, s:f, s:f}",
		      "format", "ntx.stats", "version", 1, "mode", "batch",
		      "model_filename", b->c->model->gguf->path,
		      "model_size", (json_int_t)b->c->model->gguf->file_size,
		      "backend", ntx_backend_name(ntx_engine_backend(b->c->engine)),
		      "n_threads", run_n_threads(o), "n_ctx", b->n_ctx, "n_parallel", b->n_slots,
		      "kv_type", o->kv_type == NTX_KV_F32 ? "f32" : "f16",
		      "n_requests", (json_int_t)b->done, "n_errors", (json_int_t)b->errors,
		      "n_prompt", (json_int_t)b->prompt_total, "n_gen", (json_int_t)b->gen_total,
		      "t_total_ms", t * 1e3, "gen_tok_per_s", t > 0 ? b->gen_total / t : 0.0);
	if (!j) {
		ntx_err_set(&err, NTX_ENOMEM, "out of memory");
		return run_fail(&err);
	}
	run_add_streaming_json(b->c, j);
	rc = run_write_stats(b->c, j, &err);
	json_decref(j);
	return rc ? run_fail(&err) : 0;
}

int mode_batch(struct run_ctx *c)
{
	struct batch b;
	struct ntx_err err = { 0 };
	int rc = 0, i, failed = 0;
	double t;

	memset(&b, 0, sizeof b);
	b.c = c;
	b.n_slots = ntx_engine_n_seq(c->engine);
	b.V = ntx_engine_n_vocab(c->engine);
	b.n_ctx = ntx_engine_n_ctx(c->engine);
	b.n_ub = ntx_engine_n_ubatch(c->engine);
	b.n_cut = ntx_engine_prompt_chunk(c->engine);
	b.tty = isatty(2);
	b.t0 = now_s();
	b.slots = calloc((size_t)b.n_slots, sizeof *b.slots);
	b.tok = malloc((size_t)b.n_ub * sizeof *b.tok);
	b.pos = malloc((size_t)b.n_ub * sizeof *b.pos);
	b.seq = malloc((size_t)b.n_ub * sizeof *b.seq);
	b.want = malloc((size_t)b.n_ub);
	b.row_slot = malloc((size_t)b.n_ub * sizeof *b.row_slot);
	b.logits = malloc((size_t)b.n_slots * (size_t)b.V * sizeof(float));
	b.ids = malloc((size_t)b.n_slots * sizeof *b.ids);
	if (!b.slots || !b.tok || !b.pos || !b.seq || !b.want || !b.row_slot || !b.logits || !b.ids) {
		ntx_err_set(&err, NTX_ENOMEM, "out of memory");
		rc = run_fail(&err);
		goto out;
	}
	for (;;) {
		if (fill_slots(&b))
			break; /* stdout failed */
		if (!n_active(&b))
			break;
		if (step(&b, &err)) {
			if (!b.werr)
				failed = 1;
			break;
		}
		progress(&b, 0);
	}
	if (run_interrupted || err.code == NTX_EINTR) {
		/* Ctrl-C: what each request in flight has so far */
		for (i = 0; i < b.n_slots; i++) {
			if (b.slots[i].state != SLOT_FREE) {
				b.slots[i].stop = NTX_STOP_INTERRUPT;
				finish(&b, &b.slots[i]);
			}
		}
		rc = 130;
	} else if (failed) {
		/* an engine error: every request in flight gets it as its
		 * error record, then the run stops */
		for (i = 0; i < b.n_slots; i++) {
			if (b.slots[i].state != SLOT_FREE) {
				error_record(&b, b.slots[i].id, b.slots[i].line, err.msg);
				slot_clear(&b.slots[i]);
			}
		}
		rc = run_fail(&err);
	}
	t = now_s() - b.t0;
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
			t > 0 ? b.gen_total / t : 0.0, b.n_slots);
		run_print_streaming(c);
	}
	if (c->o->stats_json && write_stats(&b, t) && rc == 0)
		rc = 1;
out:
	for (i = 0; b.slots && i < b.n_slots; i++)
		slot_clear(&b.slots[i]);
	free(b.slots);
	free(b.tok);
	free(b.pos);
	free(b.seq);
	free(b.want);
	free(b.row_slot);
	free(b.logits);
	free(b.ids);
	free(b.buf);
	return rc;
}
