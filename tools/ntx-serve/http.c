/* http.c - ntx-serve's HTTP side on libmicrohttpd (one thread per
 * connection): routing, the bearer key, size limits, JSON error objects,
 * the server's description (/v1/models, /props, /health),
 * blocking non-streaming responses and server-sent event streams. A client
 * that goes away is noticed while its request waits (a peek at the socket
 * every 100 ms, and failed writes): its sequence is cancelled. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "serve.h"

/* One request on a connection (MHD's con_cls). */
struct conn {
	char *body;
	size_t len, cap;
	int too_big;
};

/* An event stream's state (the content reader's cls). */
struct stream {
	struct server *s;
	struct sreq *r;
	struct MHD_Connection *c;
	size_t sent;               /* text bytes sent */
	int first_sent, end_sent;
	char *out;                 /* formatted, not yet handed to MHD */
	size_t out_len, out_off;
};

static int ct_equal(const char *a, size_t alen, const char *key)
{
	size_t klen = strlen(key), i;
	unsigned char d = (unsigned char)(alen != klen);

	/* the time depends on the key's length only */
	for (i = 0; i < klen; i++)
		d |= (unsigned char)((i < alen ? (unsigned char)a[i] : 0) ^ (unsigned char)key[i]);
	return d == 0;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
	char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
	struct MHD_Response *resp;
	enum MHD_Result rc;
	size_t n;

	json_decref(j);
	if (!txt)
		return MHD_NO;
	n = strlen(txt);
	txt[n] = '\n'; /* the NUL: a final newline */
	resp = MHD_create_response_from_buffer(n + 1, txt, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(txt);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	if (status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	rc = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *msg,
				  const char *param)
{
	const char *type = status == 401 ? "authentication_error"
			   : status >= 500 ? "server_error" : "invalid_request_error";
	const char *code = status == 401 ? "invalid_api_key"
			   : status == 413 ? "request_too_large"
			   : status == 404 ? "not_found"
			   : status == 503 ? "overloaded" : NULL;

	return send_json(c, status, serve_error_json(msg, type, param, code));
}

static int client_gone(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	char b;
	ssize_t n;

	if (!ci)
		return 0;
	n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Wait (mutex held) at most 100 ms for progress. */
static void wait_progress(struct server *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 100 * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&s->progress, &s->mu, &ts);
}

/* ---- event streams ---- */

static void out_event(struct stream *st, json_t *j)
{
	char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
	size_t n = txt ? strlen(txt) : 0;
	char *o;

	json_decref(j);
	if (!txt)
		return;
	o = realloc(st->out, st->out_len + n + 9);
	if (o) {
		st->out = o;
		memcpy(o + st->out_len, "data: ", 6);
		memcpy(o + st->out_len + 6, txt, n);
		memcpy(o + st->out_len + 6 + n, "\n\n", 2);
		st->out_len += n + 8;
	}
	free(txt);
}

static void out_raw(struct stream *st, const char *txt)
{
	size_t n = strlen(txt);
	char *o = realloc(st->out, st->out_len + n);

	if (o) {
		st->out = o;
		memcpy(o + st->out_len, txt, n);
		st->out_len += n;
	}
}

/* Format what is new (mutex held). */
static void stream_collect(struct stream *st)
{
	struct server *s = st->s;
	struct sreq *r = st->r;

	if (!st->first_sent) {
		st->first_sent = 1;
		if (r->kind == SREQ_CHAT)
			out_event(st, serve_chunk_json(s, r, NULL, 0, 1, NULL));
	}
	if (r->n_safe > st->sent) {
		out_event(st, serve_chunk_json(s, r, r->text + st->sent, r->n_safe - st->sent, 0, NULL));
		st->sent = r->n_safe;
	}
	if (r->state == SREQ_DONE && !st->end_sent) {
		st->end_sent = 1;
		if (r->error[0]) {
			out_event(st, serve_error_json(r->error, "server_error", NULL, NULL));
		} else {
			out_event(st, serve_chunk_json(s, r, r->kind == SREQ_CHAT ? NULL : "", 0, 0,
						       r->finish));
			if (r->include_usage)
				out_event(st, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", r->id,
							"object", r->kind == SREQ_CHAT
							? "chat.completion.chunk" : "text_completion",
							"created", (json_int_t)r->created, "model",
							s->model_name, "choices", "usage",
							serve_usage_json(r)));
		}
		out_raw(st, "data: [DONE]\n\n");
	}
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	struct server *s = st->s;
	size_t n;

	(void)pos;
	while (st->out_off == st->out_len) {
		st->out_off = st->out_len = 0;
		if (st->end_sent)
			return MHD_CONTENT_READER_END_OF_STREAM;
		pthread_mutex_lock(&s->mu);
		if (st->first_sent && st->r->n_safe == st->sent && st->r->state != SREQ_DONE)
			wait_progress(s);
		stream_collect(st);
		pthread_mutex_unlock(&s->mu);
		if (st->out_len == 0 && client_gone(st->c))
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	n = st->out_len - st->out_off;
	if (n > max)
		n = max;
	memcpy(buf, st->out + st->out_off, n);
	st->out_off += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	struct stream *st = cls;

	serve_abandon(st->s, st->r);
	serve_sreq_free(st->r);
	free(st->out);
	free(st);
}

/* ---- requests ---- */

static enum MHD_Result completion(struct server *s, struct MHD_Connection *c, enum sreq_kind kind,
				  struct conn *cn)
{
	static unsigned long long counter;
	struct sreq *r = calloc(1, sizeof *r);
	char msg[SERVE_MSG_MAX];
	const char *param = NULL, *why = NULL;
	int status = 0;
	enum MHD_Result rc;

	if (!r)
		return MHD_NO;
	r->kind = kind;
	r->created = (int64_t)time(NULL);
	snprintf(r->id, sizeof r->id, "%s-%llx%llx", kind == SREQ_CHAT ? "chatcmpl" : "cmpl",
		 (unsigned long long)r->created,
		 (unsigned long long)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
	if (serve_parse_request(s, cn->body ? cn->body : "", cn->len, r, msg, sizeof msg, &param)) {
		serve_sreq_free(r);
		return send_error(c, 400, msg, param);
	}
	if (serve_submit(s, r, &status, &why)) {
		serve_sreq_free(r);
		return send_error(c, (unsigned)status, why, NULL);
	}
	if (r->stream) {
		struct stream *st = calloc(1, sizeof *st);
		struct MHD_Response *resp;

		if (!st) {
			serve_abandon(s, r);
			serve_sreq_free(r);
			return MHD_NO;
		}
		st->s = s;
		st->r = r;
		st->c = c;
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st,
							 stream_free);
		if (!resp) {
			stream_free(st);
			return MHD_NO;
		}
		MHD_add_response_header(resp, "Content-Type", "text/event-stream");
		MHD_add_response_header(resp, "Cache-Control", "no-cache");
		rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
		MHD_destroy_response(resp);
		return rc;
	}
	pthread_mutex_lock(&s->mu);
	while (r->state != SREQ_DONE) {
		wait_progress(s);
		if (r->state != SREQ_DONE && client_gone(c)) {
			pthread_mutex_unlock(&s->mu);
			serve_abandon(s, r);
			serve_sreq_free(r);
			return MHD_NO; /* nobody to answer */
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (r->error[0])
		rc = send_error(c, (unsigned)r->error_status, r->error, NULL);
	else
		rc = send_json(c, MHD_HTTP_OK, serve_response_json(s, r, r->text, r->len));
	serve_sreq_free(r);
	return rc;
}

static enum MHD_Result health(struct server *s, struct MHD_Connection *c)
{
	int busy, n_slots = s->n_slots, queued, draining;

	pthread_mutex_lock(&s->mu);
	busy = s->n_running;
	queued = s->n_queued;
	draining = s->draining;
	pthread_mutex_unlock(&s->mu);
	return send_json(c, draining ? 503 : 200,
			 json_pack("{s:s, s:i, s:i, s:i}", "status", draining ? "shutting down" : "ok",
				   "slots_idle", n_slots - busy, "slots_processing", busy, "queued",
				   queued));
}

static enum MHD_Result models(struct server *s, struct MHD_Connection *c)
{
	return send_json(c, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s}]}", "object", "list",
					   "data", "id", s->model_name, "object", "model", "created",
					   (json_int_t)time(NULL), "owned_by", "ntx", "chat_template",
					   s->chat_template));
}

/* The server's settings, as llama-server's /props (whose chat_template is
 * the Jinja text; ours is the format's name, chat_template_source says
 * where it came from). */
static enum MHD_Result props(struct server *s, struct MHD_Connection *c)
{
	return send_json(c, 200, json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:s}", "model",
					   s->model_name, "model_path", s->model_file,
					   "chat_template", s->chat_template, "chat_template_source",
					   s->chat_source, "n_ctx", s->n_ctx, "total_slots", s->n_slots,
					   "backend", s->backend == NTX_USE_CUDA ? "cuda" : "cpu"));
}

static enum MHD_Result header_size(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	size_t *n = cls;

	(void)kind;
	*n += strlen(key) + (value ? strlen(value) : 0) + 4;
	return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	struct server *s = cls;
	struct conn *cn = *con_cls;
	int post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
	int chat = strcmp(url, "/v1/chat/completions") == 0, compl = strcmp(url, "/v1/completions") == 0;
	int mdl = strcmp(url, "/v1/models") == 0, hlth = strcmp(url, "/health") == 0;
	int prp = strcmp(url, "/props") == 0;

	(void)version;
	if (!cn) {
		size_t hsz = strlen(url);
		const char *auth, *cl;

		cn = calloc(1, sizeof *cn);
		if (!cn)
			return MHD_NO;
		*con_cls = cn;
		__atomic_add_fetch(&s->n_http, 1, __ATOMIC_SEQ_CST);
		MHD_get_connection_values(c, MHD_HEADER_KIND, header_size, &hsz);
		if (hsz > s->o->max_header)
			return send_error(c, 413, "the request headers are larger than the limit (--max-header)",
					  NULL);
		if (!chat && !compl && !mdl && !hlth && !prp)
			return send_error(c, 404, "no such endpoint", NULL);
		if (((chat || compl) && !post) || ((mdl || hlth || prp) && !get))
			return send_error(c, 405, "method not allowed", NULL);
		if (s->o->api_key && !hlth) {
			auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
			if (!auth || strncmp(auth, "Bearer ", 7) ||
			    !ct_equal(auth + 7, strlen(auth + 7), s->o->api_key))
				return send_error(c, 401, "invalid or missing API key (Authorization: Bearer KEY)",
						  NULL);
		}
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > s->o->max_body)
			return send_error(c, 413, "the request body is larger than the limit (--max-body)",
					  NULL);
		if (get)
			return hlth ? health(s, c) : prp ? props(s, c) : models(s, c);
		return MHD_YES; /* the body comes next */
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		if (cn->too_big || cn->len + n > s->o->max_body) {
			cn->too_big = 1;
			return MHD_YES;
		}
		if (cn->len + n + 1 > cn->cap) {
			size_t cap = cn->cap ? cn->cap : 4096;
			char *b;

			while (cap < cn->len + n + 1)
				cap *= 2;
			b = realloc(cn->body, cap);
			if (!b)
				return MHD_NO;
			cn->body = b;
			cn->cap = cap;
		}
		memcpy(cn->body + cn->len, upload_data, n);
		cn->len += n;
		return MHD_YES;
	}
	if (cn->too_big)
		return send_error(c, 413, "the request body is larger than the limit (--max-body)", NULL);
	return completion(s, c, chat ? SREQ_CHAT : SREQ_COMPLETION, cn);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct conn *cn = *con_cls;
	struct server *s = cls;

	(void)c;
	(void)toe;
	if (cn) {
		__atomic_sub_fetch(&s->n_http, 1, __ATOMIC_SEQ_CST);
		free(cn->body);
		free(cn);
		*con_cls = NULL;
	}
}

struct MHD_Daemon *serve_http_start(struct server *s, char *msg, size_t msz)
{
	const struct serve_opts *o = s->o;
	struct sockaddr_in a4;
	struct sockaddr_in6 a6;
	struct sockaddr *sa;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
	struct MHD_Daemon *d;

	memset(&a4, 0, sizeof a4);
	memset(&a6, 0, sizeof a6);
	if (inet_pton(AF_INET, o->host, &a4.sin_addr) == 1) {
		a4.sin_family = AF_INET;
		a4.sin_port = htons((uint16_t)o->port);
		sa = (struct sockaddr *)&a4;
	} else if (inet_pton(AF_INET6, o->host, &a6.sin6_addr) == 1) {
		a6.sin6_family = AF_INET6;
		a6.sin6_port = htons((uint16_t)o->port);
		sa = (struct sockaddr *)&a6;
		flags |= MHD_USE_IPv6;
	} else {
		snprintf(msg, msz, "--host: '%s' is not an IPv4 or IPv6 address", o->host);
		return NULL;
	}
	d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handler, s,
			     MHD_OPTION_SOCK_ADDR, sa,
			     MHD_OPTION_NOTIFY_COMPLETED, completed, s,
			     MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(o->max_header * 4 + 65536),
			     MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
			     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
			     MHD_OPTION_END);
	if (!d)
		snprintf(msg, msz, "cannot listen on %s port %d: %s", o->host, o->port,
			 strerror(errno ? errno : EADDRINUSE));
	return d;
}
