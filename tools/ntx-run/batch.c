/* batch.c - --batch: JSON Lines requests on stdin, one JSON Lines result per
 * request on stdout as each finishes. Up to --parallel sequences decode
 * together (each with its own KV cache slot and sampler); a new request
 * takes the slot of a finished one (continuous batching). One engine step
 * evaluates every active sequence's next token (and chunks of new prompts),
 * so each weight transfer serves the whole batch. */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "run.h"

enum slot_state { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE };

struct slot {
	enum slot_state state;
	json_t *id;               /* the request's id (any JSON value) */
	int32_t *prompt;
	int n_prompt, n_fed;      /* prompt tokens and how many are in the cache */
	int32_t *gen;
	int n_gen, cap_gen, n_predict;
	int32_t cur;              /* sampled, not yet evaluated */
	int n_past;
	struct ntx_sampler *smp;
	double t_start, t_first;
	enum ntx_stop stop;
};

struct batch {
	struct run_ctx *c;
	struct slot *slots;
	int n_slots;
	int64_t V;
	int n_ctx;
	long line_no;
	int eof;
	char *buf;                /* partial input line */
	size_t len, cap;
	int32_t *tok, *pos, *seq;
	uint8_t *want;
	int *row_slot;
	float *logits;
	int n_ub;
	int64_t done, gen_total, errors;
	double t0;
	int tty;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int emit_json(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
	int rc = 0;

	json_decref(j);
	if (!s)
		return -1;
	if (fputs(s, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout))
		rc = -1;
	free(s);
	return rc;
}

static int error_record(struct batch *b, json_t *id, const char *msg)
{
	b->errors++;
	b->done++;
	return emit_json(json_pack("{s:O?, s:s, s:I}", "id", id, "error", msg, "line",
				   (json_int_t)b->line_no));
}

static void slot_clear(struct slot *s)
{
	json_decref(s->id);
	free(s->prompt);
	free(s->gen);
	ntx_sampler_free(s->smp);
	memset(s, 0, sizeof *s);
}

static int finish(struct batch *b, struct slot *s)
{
	struct ntx_err err = { 0 };
	char *text = NULL;
	size_t tl = 0;
	int n = s->n_gen, rc;
	double t = now_s();
	json_t *j;

	if (n && s->stop == NTX_STOP_EOG)
		n--; /* the end-of-generation token is not part of the text */
	if (ntx_detokenize(b->c->vocab, s->gen, n, 0, 0, &text, &tl, &err))
		return error_record(b, s->id, err.msg);
	j = json_pack("{s:O?, s:s%, s:i, s:s, s:i, s:{s:f, s:f, s:f}}", "id", s->id, "text",
		      text, tl, "tokens", s->n_gen, "stop_reason", ntx_stop_name(s->stop),
		      "prompt_tokens", s->n_prompt, "timings", "prompt_ms",
		      (s->t_first - s->t_start) * 1e3, "gen_ms", (t - s->t_first) * 1e3,
		      "gen_tok_per_s", t > s->t_first ? s->n_gen / (t - s->t_first) : 0.0);
	free(text);
	b->done++;
	b->gen_total += s->n_gen;
	rc = emit_json(j);
	slot_clear(s);
	return rc;
}

/* Parse one request line into slot s; on a bad line write an error record
 * and leave the slot free. Returns -1 only when stdout fails. */
static int start_request(struct batch *b, struct slot *s, const char *line, size_t len)
{
	const struct run_opts *o = b->c->o;
	struct ntx_err err = { 0 };
	struct ntx_sampler_params sp = o->sp;
	json_error_t je;
	json_t *req = json_loadb(line, len, 0, &je), *v, *id;
	const char *prompt, *system = o->system;
	char *chat = NULL, msg[300];
	int use_chat = o->chat, n_predict = o->n_predict, rc;

	if (!req || !json_is_object(req)) {
		snprintf(msg, sizeof msg, "line %ld: %s", b->line_no,
			 req ? "a request must be a JSON object" : je.text);
		json_decref(req);
		return error_record(b, NULL, msg);
	}
	id = json_object_get(req, "id");
	v = json_object_get(req, "prompt");
	if (!json_is_string(v)) {
		rc = error_record(b, id, "missing string \"prompt\"");
		json_decref(req);
		return rc;
	}
	prompt = json_string_value(v);
#define NUM(key, lo, hi, dst, cast)                                                            \
	v = json_object_get(req, key);                                                         \
	if (v) {                                                                               \
		double x = json_number_value(v);                                               \
		if (!json_is_number(v) || x < (lo) || x > (hi)) {                              \
			snprintf(msg, sizeof msg, "\"%s\" must be a number in [%g, %g]", key,   \
				 (double)(lo), (double)(hi));                                  \
			rc = error_record(b, id, msg);                                         \
			json_decref(req);                                                      \
			return rc;                                                             \
		}                                                                              \
		dst = (cast)x;                                                                 \
	}
	NUM("n_predict", -1, 1 << 30, n_predict, int)
	NUM("temp", 0, 100, sp.temp, float)
	NUM("top_k", 0, 1 << 30, sp.top_k, int)
	NUM("top_p", 0, 1, sp.top_p, float)
	NUM("min_p", 0, 1, sp.min_p, float)
	NUM("repeat_penalty", 0.01, 100, sp.repeat_penalty, float)
	NUM("seed", 0, 9007199254740992.0, sp.seed, uint64_t)
#undef NUM
	v = json_object_get(req, "chat");
	if (v)
		use_chat = json_is_true(v);
	v = json_object_get(req, "system");
	if (json_is_string(v))
		system = json_string_value(v);
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
			rc = error_record(b, id, err.msg);
			json_decref(req);
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
	if (rc == 0 && s->n_prompt >= b->n_ctx)
		rc = ntx_err_set(&err, NTX_EINVAL,
				 "the prompt has %d tokens; the context holds %d (use -c)",
				 s->n_prompt, b->n_ctx);
	if (rc == 0) {
		s->smp = ntx_sampler_new(&sp, b->V, &err);
		if (!s->smp)
			rc = -1;
	}
	if (rc) {
		free(s->prompt);
		s->prompt = NULL;
		rc = error_record(b, id, err.msg);
		json_decref(req);
		return rc;
	}
	s->id = json_incref(id);
	json_decref(req);
	s->n_predict = n_predict;
	s->state = SLOT_PREFILL;
	s->t_start = now_s();
	for (int i = 0; i < s->n_prompt; i++)
		ntx_sampler_accept(s->smp, s->prompt[i]);
	return 0;
}

/* Read one line if available (blocking only when block is set). Returns 1
 * with the line in b->buf[0..len), 0 if none now, -1 at end of input. */
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
		if (!block && poll(&pfd, 1, 0) <= 0)
			return 0;
		if (b->cap - b->len < 65536) {
			size_t cap = b->cap ? b->cap * 2 : 1 << 20;
			char *nb = realloc(b->buf, cap);

			if (!nb)
				return -1;
			b->buf = nb;
			b->cap = cap;
		}
		r = read(0, b->buf + b->len, b->cap - b->len);
		if (r < 0 && errno == EINTR) {
			if (run_interrupted)
				return -1;
			continue;
		}
		if (r <= 0)
			b->eof = 1;
		else
			b->len += (size_t)r;
	}
}

/* Fill free slots from the input. */
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
			size_t n;

			if (r <= 0)
				return 0;
			nl = memchr(b->buf, '\n', b->len);
			n = nl ? (size_t)(nl - b->buf) : b->len;
			b->line_no++;
			if (n && b->buf[n - 1] == '\r')
				n--;
			/* blank lines are skipped */
			{
				size_t k = 0;

				while (k < n && (b->buf[k] == ' ' || b->buf[k] == '\t'))
					k++;
				if (k < n && start_request(b, s, b->buf, n))
					return -1;
			}
			n = nl ? (size_t)(nl - b->buf) + 1 : b->len;
			memmove(b->buf, b->buf + n, b->len - n);
			b->len -= n;
			if (s->state != SLOT_FREE)
				active++;
		}
	}
	return 0;
}

static void progress(struct batch *b)
{
	double t = now_s() - b->t0;

	if (b->tty && !b->c->o->quiet)
		fprintf(stderr, "\r" PROG ": %lld done, %lld errors, %lld tokens, %.1f tok/s   ",
			(long long)b->done, (long long)b->errors, (long long)b->gen_total,
			t > 0 ? b->gen_total / t : 0.0);
}

/* One engine step over all active slots. */
static int step(struct batch *b, struct ntx_err *err)
{
	int n = 0, nr = 0, i;
	struct ntx_batch nb;

	for (i = 0; i < b->n_slots; i++) {
		struct slot *s = &b->slots[i];

		if (s->state == SLOT_DECODE && n < b->n_ub) {
			b->tok[n] = s->cur;
			b->pos[n] = s->n_past;
			b->seq[n] = i;
			b->want[n] = 1;
			b->row_slot[nr++] = i;
			n++;
		}
	}
	for (i = 0; i < b->n_slots && n < b->n_ub; i++) {
		struct slot *s = &b->slots[i];

		while (s->state == SLOT_PREFILL && s->n_fed < s->n_prompt && n < b->n_ub) {
			b->tok[n] = s->prompt[s->n_fed];
			b->pos[n] = s->n_fed;
			b->seq[n] = i;
			b->want[n] = s->n_fed == s->n_prompt - 1;
			if (b->want[n])
				b->row_slot[nr++] = i;
			s->n_fed++;
			n++;
		}
	}
	if (n == 0)
		return 0;
	memset(&nb, 0, sizeof nb);
	nb.n_tok = n;
	nb.tok = b->tok;
	nb.pos = b->pos;
	nb.seq = b->seq;
	nb.want = b->want;
	if (ntx_engine_eval(b->c->engine, &nb, NULL, b->logits, err))
		return -1;
	for (i = 0; i < nr; i++) {
		struct slot *s = &b->slots[b->row_slot[i]];
		const float *row = b->logits + (int64_t)i * b->V;
		int32_t t;

		if (s->state == SLOT_PREFILL) {
			s->state = SLOT_DECODE;
			s->n_past = s->n_prompt;
			s->t_first = now_s();
		} else {
			s->n_past++;
		}
		t = ntx_sampler_sample(s->smp, row);
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

int mode_batch(struct run_ctx *c)
{
	struct batch b;
	struct ntx_err err = { 0 };
	int rc = 0, i, active;

	memset(&b, 0, sizeof b);
	b.c = c;
	b.n_slots = ntx_engine_n_seq(c->engine);
	b.V = ntx_engine_n_vocab(c->engine);
	b.n_ctx = ntx_engine_n_ctx(c->engine);
	b.n_ub = 512 > b.n_slots ? 512 : b.n_slots;
	b.tty = isatty(2);
	b.t0 = now_s();
	b.slots = calloc((size_t)b.n_slots, sizeof *b.slots);
	b.tok = malloc((size_t)b.n_ub * sizeof *b.tok);
	b.pos = malloc((size_t)b.n_ub * sizeof *b.pos);
	b.seq = malloc((size_t)b.n_ub * sizeof *b.seq);
	b.want = malloc((size_t)b.n_ub);
	b.row_slot = malloc((size_t)b.n_ub * sizeof *b.row_slot);
	b.logits = malloc((size_t)b.n_slots * (size_t)b.V * sizeof(float));
	if (!b.slots || !b.tok || !b.pos || !b.seq || !b.want || !b.row_slot || !b.logits) {
		ntx_err_set(&err, NTX_ENOMEM, "out of memory");
		rc = run_fail(&err);
		goto out;
	}
	for (;;) {
		if (fill_slots(&b)) {
			rc = 1; /* stdout failed */
			break;
		}
		for (active = 0, i = 0; i < b.n_slots; i++)
			active += b.slots[i].state != SLOT_FREE;
		if (!active)
			break;
		if (step(&b, &err)) {
			if (err.code == NTX_EINTR)
				rc = 130;
			else
				rc = run_fail(&err);
			break;
		}
		progress(&b);
	}
	if (b.tty && !c->o->quiet)
		fputc('\n', stderr);
	if (!c->o->quiet) {
		double t = now_s() - b.t0;

		fprintf(stderr, PROG ": batch: %lld requests (%lld errors), %lld tokens generated in %.2f s (%.2f tok/s), %d parallel\n",
			(long long)b.done, (long long)b.errors, (long long)b.gen_total, t,
			t > 0 ? b.gen_total / t : 0.0, b.n_slots);
	}
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
	free(b.buf);
	return rc;
}
