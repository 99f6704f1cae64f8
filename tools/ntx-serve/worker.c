/* worker.c - the engine thread of ntx-serve: the queue, the context's
 * batch requests and the text of every request (see serve.h for the
 * threads and the lock). The worker never holds the mutex while it calls
 * the context: the requests' callbacks take it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

void serve_sreq_free(struct sreq *r)
{
	int i;

	if (!r)
		return;
	free(r->tokens);
	for (i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	ntx_detokenizer_free(r->dt);
	free(r->text);
	free(r);
}

size_t serve_safe_len(const char *text, size_t len, char *const *stop, int n)
{
	size_t k, max = 0;
	int i;

	for (i = 0; i < n; i++)
		if (strlen(stop[i]) > max)
			max = strlen(stop[i]);
	for (k = max ? max - 1 : 0; k > 0; k--) {
		if (k > len)
			continue;
		for (i = 0; i < n; i++)
			if (strlen(stop[i]) > k && memcmp(text + len - k, stop[i], k) == 0)
				return len - k;
	}
	return len;
}

/* Append bytes to r's text (mutex held). */
static void append(struct sreq *r, const char *p, size_t n)
{
	if (!n)
		return;
	if (r->len + n + 1 > r->cap) {
		size_t cap = r->cap ? r->cap : 256;
		char *t;

		while (cap < r->len + n + 1)
			cap *= 2;
		t = realloc(r->text, cap);
		if (!t)
			return; /* the text stays short; the tokens still count */
		r->text = t;
		r->cap = cap;
	}
	memcpy(r->text + r->len, p, n);
	r->len += n;
	r->text[r->len] = '\0';
}

/* After new text from old: cut it at the first stop string. Returns 1 when
 * one was found. */
static int check_stop(struct sreq *r, size_t old)
{
	size_t best = (size_t)-1;
	int i;

	for (i = 0; i < r->n_stop; i++) {
		size_t sl = strlen(r->stop[i]), from = old >= sl ? old - sl + 1 : 0;
		const char *hit;

		if (r->len < sl)
			continue;
		hit = memmem(r->text + from, r->len - from, r->stop[i], sl);
		if (hit && (size_t)(hit - r->text) < best)
			best = (size_t)(hit - r->text);
	}
	if (best == (size_t)-1)
		return 0;
	r->len = best;
	if (r->text)
		r->text[best] = '\0';
	return 1;
}

static int on_token(void *user, int32_t tok, const char *piece, size_t piece_len)
{
	struct sreq *r = user;
	struct server *s = r->srv;
	const char *p = NULL;
	size_t n = 0, old;
	int stop;

	(void)piece;
	(void)piece_len;
	if (ntx_lm_is_eog(s->lm, tok))
		return 0; /* the request stops (or, with ignore_eos, goes on); not text */
	if (ntx_detokenizer_push(r->dt, tok, &p, &n, NULL))
		n = 0;
	pthread_mutex_lock(&s->mu);
	old = r->len;
	append(r, p, n);
	r->n_gen++;
	r->stop_hit = check_stop(r, old);
	r->n_safe = r->stop_hit ? r->len : serve_safe_len(r->text, r->len, r->stop, r->n_stop);
	stop = r->stop_hit || r->cancel;
	pthread_cond_broadcast(&s->progress);
	pthread_mutex_unlock(&s->mu);
	return stop;
}

static void remove_running(struct server *s, struct sreq *r)
{
	int i;

	for (i = 0; i < s->n_slots; i++) {
		if (s->running[i] == r) {
			s->running[i] = NULL;
			s->n_running--;
		}
	}
}

static void on_done(void *user, int64_t id, const struct ntx_gen_result *res, const int32_t *gen)
{
	struct sreq *r = user;
	struct server *s = r->srv;
	const char *p = NULL;
	size_t n = 0;

	(void)id;
	(void)gen;
	if (!r->stop_hit)
		ntx_detokenizer_flush(r->dt, &p, &n);
	pthread_mutex_lock(&s->mu);
	if (!r->stop_hit) {
		size_t old = r->len;

		append(r, p, n);
		r->stop_hit = check_stop(r, old);
	}
	r->n_gen = res->n_gen;
	r->n_reused = res->n_reused;
	r->n_safe = r->len;
	if (s->failing) {
		snprintf(r->error, sizeof r->error, "%s", s->failing);
		r->error_status = 500;
	} else if (r->stop_hit || res->finish == NTX_FINISH_EOG) {
		r->finish = "stop";
	} else if (res->finish == NTX_FINISH_LENGTH || res->finish == NTX_FINISH_CONTEXT) {
		r->finish = "length";
	} else {
		snprintf(r->error, sizeof r->error, "%s",
			 s->draining ? "the server is shutting down" : "the request was cancelled");
		r->error_status = 503;
	}
	r->state = SREQ_DONE;
	remove_running(s, r);
	s->n_served++;
	pthread_cond_broadcast(&s->progress);
	pthread_mutex_unlock(&s->mu);
}

/* End a request that never ran (mutex held). */
static void end_unrun(struct server *s, struct sreq *r, int status, const char *msg)
{
	snprintf(r->error, sizeof r->error, "%s", msg);
	r->error_status = status;
	r->state = SREQ_DONE;
	pthread_cond_broadcast(&s->progress);
}

/* Start the requests just admitted (mutex not held). */
static void start(struct server *s, struct sreq **admit, int n_a)
{
	struct ntx_error *err = s->werr;
	int i;

	for (i = 0; i < n_a; i++) {
		struct sreq *r = admit[i];
		struct ntx_request rq;
		enum ntx_status st;

		ntx_request_init(&rq);
		rq.prompt = r->tokens;
		rq.n_prompt = r->n_tokens;
		rq.gen = &r->gp;
		rq.on_token = on_token;
		rq.on_done = on_done;
		rq.user = r;
		st = ntx_detokenizer_new(s->lm, NTX_DETOKENIZER_REPLACE_INVALID, &r->dt, err);
		if (!st)
			st = ntx_ctx_submit(s->ctx, &rq, &r->ctx_id, err);
		if (st) {
			pthread_mutex_lock(&s->mu);
			remove_running(s, r);
			end_unrun(s, r, st == NTX_STATUS_INVALID ? 400 : 500, ntx_error_message(err));
			pthread_mutex_unlock(&s->mu);
		}
	}
}

/* An engine error: every request in flight fails with it (mutex not held). */
static void fail_all(struct server *s)
{
	int n = 0, i;

	pthread_mutex_lock(&s->mu);
	for (i = 0; i < s->n_slots; i++)
		if (s->running[i])
			s->cancel_ids[n++] = s->running[i]->ctx_id;
	pthread_mutex_unlock(&s->mu);
	s->failing = ntx_error_message(s->werr);
	for (i = 0; i < n; i++)
		ntx_ctx_cancel(s->ctx, s->cancel_ids[i], NULL);
	s->failing = NULL;
}

static void *worker_main(void *arg)
{
	struct server *s = arg;
	int64_t *cancel_ids = s->cancel_ids;
	struct sreq **admit = s->admit;
	int n_slots = s->n_slots, i;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		int n_c = 0, n_a = 0;

		for (i = 0; i < n_slots; i++) {
			struct sreq *r = s->running[i];

			if (r && r->cancel && !r->cancel_sent) {
				r->cancel_sent = 1;
				cancel_ids[n_c++] = r->ctx_id;
			}
		}
		while (s->q_head && s->n_running < n_slots) {
			struct sreq *r = s->q_head;

			s->q_head = r->next;
			if (!s->q_head)
				s->q_tail = NULL;
			s->n_queued--;
			r->next = NULL;
			if (r->cancel) {
				end_unrun(s, r, 503, "the request was cancelled");
				continue;
			}
			for (i = 0; i < n_slots && s->running[i]; i++)
				;
			s->running[i] = r;
			s->n_running++;
			r->state = SREQ_RUNNING;
			admit[n_a++] = r;
		}
		if (!n_c && !n_a && !s->n_running) {
			if (s->quit)
				break;
			pthread_cond_wait(&s->work, &s->mu);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		for (i = 0; i < n_c; i++) /* on_done runs inside: finish "stopped" */
			ntx_ctx_cancel(s->ctx, cancel_ids[i], NULL);
		start(s, admit, n_a);
		if (ntx_ctx_step(s->ctx, NULL, s->werr))
			fail_all(s);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int serve_worker_start(struct server *s, char *msg, size_t msz)
{
	int rc;

	s->werr = ntx_error_new();
	s->running = calloc((size_t)s->n_slots, sizeof *s->running);
	s->cancel_ids = malloc((size_t)s->n_slots * sizeof *s->cancel_ids);
	s->admit = malloc((size_t)s->n_slots * sizeof *s->admit);
	if (!s->werr || !s->running || !s->cancel_ids || !s->admit) {
		snprintf(msg, msz, "out of memory");
		return -1;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->progress, NULL);
	rc = pthread_create(&s->worker, NULL, worker_main, s);
	if (rc) {
		snprintf(msg, msz, "starting the worker thread: %s", strerror(rc));
		return -1;
	}
	return 0;
}

int serve_submit(struct server *s, struct sreq *r, int *status, const char **why)
{
	int rc = 0;

	r->srv = s;
	pthread_mutex_lock(&s->mu);
	if (s->draining) {
		*status = 503;
		*why = "the server is shutting down";
		rc = -1;
	} else if (s->n_queued >= s->o->n_queue && s->n_running >= s->n_slots) {
		*status = 503;
		*why = "the server is busy: every slot is in use and the queue is full (--queue)";
		rc = -1;
	} else {
		r->state = SREQ_QUEUED;
		if (s->q_tail)
			s->q_tail->next = r;
		else
			s->q_head = r;
		s->q_tail = r;
		s->n_queued++;
		pthread_cond_signal(&s->work);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void serve_abandon(struct server *s, struct sreq *r)
{
	pthread_mutex_lock(&s->mu);
	if (r->state == SREQ_QUEUED) {
		struct sreq **pp = &s->q_head, *prev = NULL;

		while (*pp && *pp != r) {
			prev = *pp;
			pp = &(*pp)->next;
		}
		if (*pp) {
			*pp = r->next;
			if (s->q_tail == r)
				s->q_tail = prev;
			s->n_queued--;
		}
		r->state = SREQ_DONE;
	}
	if (r->state != SREQ_DONE) {
		r->cancel = 1;
		pthread_cond_signal(&s->work);
		while (r->state != SREQ_DONE)
			pthread_cond_wait(&s->progress, &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
}

void serve_worker_stop(struct server *s, double timeout_s)
{
	struct timespec ts;
	int i, n = s->n_slots;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)timeout_s;
	ts.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->mu);
	s->draining = 1;
	/* queued requests never start */
	while (s->q_head) {
		struct sreq *r = s->q_head;

		s->q_head = r->next;
		r->next = NULL;
		end_unrun(s, r, 503, "the server is shutting down");
	}
	s->q_tail = NULL;
	s->n_queued = 0;
	while (s->n_running > 0) {
		if (pthread_cond_timedwait(&s->progress, &s->mu, &ts) == ETIMEDOUT)
			break;
	}
	/* the rest are cancelled */
	for (i = 0; i < n; i++)
		if (s->running[i])
			s->running[i]->cancel = 1;
	s->quit = 1;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->worker, NULL);
}
