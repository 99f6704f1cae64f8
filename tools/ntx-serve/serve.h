/* serve.h - ntx-serve: an OpenAI-compatible HTTP server over libntx's
 * public API (ntx.h) only.
 *
 * Threads: libmicrohttpd runs one thread per connection (http.c); each
 * parses its request, renders and tokenizes the prompt (ntx_lm_* calls are
 * "any thread"), and queues it. One worker thread (worker.c) owns the
 * context (ntx_ctx_*: one thread; batch requests give continuous batching
 * and prefix reuse): it admits queued requests into free sequences, steps,
 * and appends each request's text as tokens come. Connections wait on a condition variable for text or the
 * end; a connection whose client went away marks its request cancelled and
 * waits until the worker has let it go before freeing it. One mutex guards
 * the queue and every request's shared fields. */
#ifndef NTX_SERVE_H
#define NTX_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ntx.h"

#define PROG "ntx-serve"
#define SERVE_MAX_STOP 4
#define SERVE_MSG_MAX 512          /* a 400's message */

struct serve_opts {
	const char *model_path, *plan_path;
	const char *host;
	int port;
	const char *api_key;
	const char *alias;          /* the model's name in the API */
	const char *chat_template;
	const char *system;         /* default system message (chat requests without one) */
	int parallel, parallel_set;
	int n_queue;                /* requests waiting for a slot before 503 */
	int n_ctx;
	int n_threads;
	enum ntx_backend_choice backend;
	enum ntx_kv_cache kv_type;  /* NTX_KV_CACHE_DEFAULT: the plan's, else f16 */
	struct ntx_gen_params gp;   /* defaults: sampling, n_predict (default
				     * max_tokens, -1: until EOG or the context) */
	size_t max_body, max_header;
	double shutdown_s;          /* SIGTERM: how long in-flight requests may finish */
	int quiet, verbose;
	const char *draft_path;     /* --draft: speculative decoding with a draft model */
	int lookup, draft_k;        /* --lookup N, --draft-k N (0: adaptive) */
};

enum sreq_kind { SREQ_CHAT, SREQ_COMPLETION };
enum sreq_state { SREQ_QUEUED, SREQ_RUNNING, SREQ_DONE };

/* One request. Fields under "shared" are read and written with the server
 * mutex held. */
struct sreq {
	/* set by the connection before queueing, then read-only */
	enum sreq_kind kind;
	int stream, include_usage;
	int32_t *tokens;
	int n_tokens;
	struct ntx_gen_params gp;    /* sampling, n_predict, ignore_eog (the
				      * extension "ignore_eos", as llama.cpp's
				      * server) */
	char *stop[SERVE_MAX_STOP];
	int n_stop;
	char id[48];
	int64_t created;
	struct server *srv;
	/* worker only */
	struct ntx_detokenizer *dt;
	int64_t ctx_id;
	int cancel_sent, stop_hit;
	/* shared */
	enum sreq_state state;
	int cancel;                 /* the client went away, or shutdown */
	char *text;                 /* generated text so far (valid UTF-8) */
	size_t len, cap;
	size_t n_safe;              /* bytes that can be sent (no partial stop string) */
	int n_gen, n_reused;
	const char *finish;         /* "stop", "length"; NULL while running */
	char error[256];            /* non-empty: failed (engine error, shutdown) */
	int error_status;           /* HTTP status of error */
	struct sreq *next;          /* queue */
};

struct server {
	const struct serve_opts *o;
	struct ntx_lm *lm;
	struct ntx_lm *draft;       /* --draft */
	struct ntx_placement *pl;
	struct ntx_ctx *ctx;        /* the worker's once it runs */
	char *model_path;           /* the plan's model (ntx_free) */
	const char *model_file;     /* the model's path (-m, or model_path) */
	const char *model_name;
	const char *chat_template;  /* every chat's format: a name (static) */
	const char *chat_source;    /* "option", "model" or "fallback" (chatml) */
	int n_ctx, n_slots;
	enum ntx_backend_choice backend; /* in use: CPU or CUDA */
	/* worker */
	pthread_t worker;
	struct ntx_error *werr;     /* the worker's error object */
	pthread_mutex_t mu;
	pthread_cond_t work;        /* the worker: something to do */
	pthread_cond_t progress;    /* connections: text, or a request ended */
	struct sreq *q_head, *q_tail;
	int n_queued;
	struct sreq **running;      /* [n_slots] */
	int64_t *cancel_ids;        /* [n_slots]: the worker's */
	struct sreq **admit;        /* [n_slots]: the worker's */
	int n_running;
	int quit;                   /* the worker ends when nothing is left */
	int draining;               /* SIGTERM: no new requests */
	int64_t n_served;
	const char *failing;        /* an engine error, for the requests it ends */
	int n_http;                 /* requests whose response is not yet sent (atomic) */
};

/* worker.c */
/* 0, or -1 with a message in msg. */
int serve_worker_start(struct server *s, char *msg, size_t msz);
/* Queue r (owned by the caller until it is DONE). Returns 0, or -1 with
 * *status 503 (queue full, shutting down). */
int serve_submit(struct server *s, struct sreq *r, int *status, const char **why);
/* The client went away (or gave up): cancel r and wait until the worker has
 * let it go. Then r may be freed. */
void serve_abandon(struct server *s, struct sreq *r);
/* Stop accepting, let running requests finish within timeout_s seconds,
 * then cancel the rest; join the worker. */
void serve_worker_stop(struct server *s, double timeout_s);
void serve_sreq_free(struct sreq *r);
/* The number of the longest suffix of text[0..len) that is a proper prefix
 * of one of stop[0..n): text up to len minus that can be sent. */
size_t serve_safe_len(const char *text, size_t len, char *const *stop, int n);

/* http.c */
struct MHD_Daemon;
/* NULL with a message in msg on failure. */
struct MHD_Daemon *serve_http_start(struct server *s, char *msg, size_t msz);

/* openai.c: requests and responses */
/* Parse a request body into r (kind already set). Returns 0, or -1 with
 * msg and *param (the offending field, or NULL) for a 400. */
int serve_parse_request(const struct server *s, const char *body, size_t len, struct sreq *r,
			char *msg, size_t msz, const char **param);
json_t *serve_error_json(const char *msg, const char *type, const char *param, const char *code);
json_t *serve_response_json(const struct server *s, const struct sreq *r, const char *text,
			    size_t len);
json_t *serve_chunk_json(const struct server *s, const struct sreq *r, const char *text, size_t len,
			 int first, const char *finish);
json_t *serve_usage_json(const struct sreq *r);

#endif
