/* ntx-serve - an OpenAI-compatible HTTP server: chat completions and
 * completions (streamed as server-sent events or not), models, props and health,
 * over one engine with continuous batching across connections and prefix
 * reuse (see serve.h for the threads). Options, opening and shutdown here. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "serve.h"
#include "tool.h"

static const struct tool T = {
	PROG, "usage: " PROG " [options] -m MODEL.gguf\n"
	      "Try '" PROG " --help' for more information.\n"
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [options] -m MODEL.gguf\n"
"       " PROG " [options] --plan plan.json\n"
"Serve the OpenAI API over HTTP: POST /v1/chat/completions, POST /v1/completions,\n"
"GET /v1/models, GET /props, GET /health.\n"
"\n"
"  -m, --model FILE        GGUF model (default: the plan's)\n"
"      --plan FILE         placement plan from ntx-plan\n"
"      --backend B         cpu, cuda or auto (default auto)\n"
"  -t, --threads N         CPU threads (default: all cores)\n"
"  -c, --ctx-size N        context per sequence (default: the plan's, else min(model, 4096))\n"
"      --kv-type T         f16 (default) or f32\n"
"      --parallel N        sequences decoded together (default: the plan's, else 4)\n"
"      --queue N           requests waiting for a slot before 503 (default 64)\n"
"      --host ADDR         address to bind (default 127.0.0.1)\n"
"      --port N            port (default 8080; 0: any free port, printed on stderr)\n"
"      --api-key KEY       require 'Authorization: Bearer KEY' (401 otherwise)\n"
"      --alias NAME        the model's name in the API (default: the file name)\n"
"      --chat-template NAME  force a chat format (see ntx-run --help; default:\n"
"                            the model's when known, else chatml)\n"
"  -md, --draft FILE         speculative decoding with a draft model of the same\n"
"                            vocabulary (every request; greedy output unchanged)\n"
"      --lookup N            prompt lookup drafts (n-grams up to N tokens)\n"
"      --draft-k N           tokens drafted per step (default: adaptive, up to 8)\n"
"      --system TEXT       system message for chats that have none\n"
"      --max-body SIZE     largest request body (default 1M; 413 above)\n"
"      --max-header SIZE   largest request headers (default 16K; 413 above)\n"
"      --shutdown-timeout S  on SIGTERM, seconds in-flight requests may finish (default 10)\n"
"  -n, --n-predict N       default max_tokens (default -1: until EOS or full)\n"
"      --temp T, --top-k N, --top-p P, --min-p P, --repeat-penalty F, --repeat-last-n N\n"
"  -s, --seed N            default seed\n"
"  -q, --quiet             nothing on stderr but errors\n"
"  -h, --help              this help\n"
"  -V, --version           version\n"
"exit status: 0 ok (also after SIGTERM or SIGINT), 1 error, 2 usage\n");
}

enum {
	O_PLAN = 256, O_BACKEND, O_KV, O_PARALLEL, O_QUEUE, O_HOST, O_PORT, O_KEY, O_ALIAS,
	O_TMPL, O_SYSTEM, O_MAXBODY, O_MAXHDR, O_SHUTDOWN, O_TEMP, O_TOPK, O_TOPP, O_MINP,
	O_RPEN, O_RLAST, O_DRAFT, O_LOOKUP, O_DRAFTK
};

static const struct option longopts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "plan", required_argument, NULL, O_PLAN },
	{ "backend", required_argument, NULL, O_BACKEND },
	{ "threads", required_argument, NULL, 't' },
	{ "ctx-size", required_argument, NULL, 'c' },
	{ "kv-type", required_argument, NULL, O_KV },
	{ "parallel", required_argument, NULL, O_PARALLEL },
	{ "queue", required_argument, NULL, O_QUEUE },
	{ "host", required_argument, NULL, O_HOST },
	{ "port", required_argument, NULL, O_PORT },
	{ "api-key", required_argument, NULL, O_KEY },
	{ "alias", required_argument, NULL, O_ALIAS },
	{ "chat-template", required_argument, NULL, O_TMPL },
	{ "system", required_argument, NULL, O_SYSTEM },
	{ "max-body", required_argument, NULL, O_MAXBODY },
	{ "max-header", required_argument, NULL, O_MAXHDR },
	{ "shutdown-timeout", required_argument, NULL, O_SHUTDOWN },
	{ "n-predict", required_argument, NULL, 'n' },
	{ "temp", required_argument, NULL, O_TEMP },
	{ "top-k", required_argument, NULL, O_TOPK },
	{ "top-p", required_argument, NULL, O_TOPP },
	{ "min-p", required_argument, NULL, O_MINP },
	{ "repeat-penalty", required_argument, NULL, O_RPEN },
	{ "repeat-last-n", required_argument, NULL, O_RLAST },
	{ "seed", required_argument, NULL, 's' },
	{ "draft", required_argument, NULL, O_DRAFT },
	{ "model-draft", required_argument, NULL, O_DRAFT },
	{ "lookup", required_argument, NULL, O_LOOKUP },
	{ "draft-k", required_argument, NULL, O_DRAFTK },
	{ "quiet", no_argument, NULL, 'q' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 }
};

/* A value's message: "PROG: OPT: MESSAGE" and the usage tail; returns 2. */
static int bad(const char *opt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const char *opt, const char *fmt, ...)
{
	char m[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	return tool_usage(&T, "%s: %s", opt, m);
}

/* -md FILE (llama.cpp's spelling of --model-draft): getopt_long reads it as
 * -m with the value "d"; take the next argument instead. Returns 1 when
 * argv[optind - 1] was "-md" (then *path is set), -1 when FILE is missing,
 * 0 otherwise. */
static int getopt_md(int argc, char *const argv[], const char **path)
{
	if (optind < 1 || strcmp(argv[optind - 1], "-md"))
		return 0;
	if (optind >= argc)
		return -1;
	*path = argv[optind++];
	return 1;
}

/* What an option group's parser returns for an option not of its group. */
enum { OPT_NOT_MINE = -2 };

/* Model, placement and context: 0, an exit status or OPT_NOT_MINE. */
static int opt_model(struct serve_opts *o, int ch, const char *a, int argc, char **argv)
{
	int rc;

	switch (ch) {
	case 'm':
		switch (getopt_md(argc, argv, &o->draft_path)) {
		case 1: break;
		case -1: return tool_usage(&T, "option '-md' needs a draft model file");
		default: o->model_path = a;
		}
		return 0;
	case O_PLAN: o->plan_path = a; return 0;
	case O_BACKEND: return tool_backend(&T, a, &o->backend);
	case 't': return tool_int(&T, "--threads", a, 1, 1024, &o->n_threads);
	case 'c': return tool_int(&T, "--ctx-size", a, 0, 1 << 24, &o->n_ctx);
	case O_KV:
		if (!strcmp(a, "f16"))
			o->kv_type = NTX_KV_CACHE_F16;
		else if (!strcmp(a, "f32"))
			o->kv_type = NTX_KV_CACHE_F32;
		else
			return bad("--kv-type", "expected f16 or f32, got '%s'", a);
		return 0;
	case O_PARALLEL:
		rc = tool_int(&T, "--parallel", a, 1, 1024, &o->parallel);
		o->parallel_set = 1;
		return rc;
	}
	return OPT_NOT_MINE;
}

/* Speculative decoding: 0, an exit status or OPT_NOT_MINE. */
static int opt_spec(struct serve_opts *o, int ch, const char *a)
{
	switch (ch) {
	case O_DRAFT: o->draft_path = a; return 0;
	case O_LOOKUP: return tool_int(&T, "--lookup", a, 1, 16, &o->lookup);
	case O_DRAFTK: return tool_int(&T, "--draft-k", a, 1, NTX_DRAFT_K_MAX, &o->draft_k);
	}
	return OPT_NOT_MINE;
}

/* A size option in [min, max] (range names it for the message): 0 or the
 * exit status 2. *out is set as before the split, also on an error. */
static int opt_size_in(const char *opt, const char *a, uint64_t min, uint64_t max,
		       const char *range, size_t *out)
{
	uint64_t sz;
	int rc;

	rc = tool_size(&T, opt, a, &sz);
	if (!rc && (sz < min || sz > max))
		return bad(opt, "must be in %s", range);
	*out = (size_t)sz;
	return rc;
}

/* The HTTP server, its requests and the messages: 0, an exit status or
 * OPT_NOT_MINE. */
static int opt_server(struct serve_opts *o, int ch, const char *a)
{
	switch (ch) {
	case O_QUEUE: return tool_int(&T, "--queue", a, 0, 1 << 20, &o->n_queue);
	case O_HOST: o->host = a; return 0;
	case O_PORT: return tool_int(&T, "--port", a, 0, 65535, &o->port);
	case O_KEY:
		if (!*a)
			return bad("--api-key", "the key is empty");
		o->api_key = a;
		return 0;
	case O_ALIAS: o->alias = a; return 0;
	case O_TMPL: o->chat_template = a; return 0;
	case O_SYSTEM: o->system = a; return 0;
	case O_MAXBODY:
		return opt_size_in("--max-body", a, 16, (uint64_t)1 << 30, "[16, 1G]", &o->max_body);
	case O_MAXHDR:
		return opt_size_in("--max-header", a, 256, (uint64_t)1 << 20, "[256, 1M]", &o->max_header);
	case O_SHUTDOWN:
		return tool_double(&T, "--shutdown-timeout", a, 0, 3600, &o->shutdown_s);
	case 'q': o->quiet = 1; return 0;
	case 'v': o->verbose++; return 0;
	}
	return OPT_NOT_MINE;
}

/* Default generation length and sampling (li: the long option's index):
 * 0, an exit status or OPT_NOT_MINE. */
static int opt_sampling(struct serve_opts *o, int ch, const char *a, int li)
{
	const char *nm = ch == 's' ? "seed" : longopts[li].name;
	struct ntx_error *e;
	char opt[40];
	int rc = 0;

	switch (ch) {
	case 'n': return tool_int(&T, "--n-predict", a, -1, 1 << 30, &o->gp.n_predict);
	case O_TEMP: case O_TOPK: case O_TOPP: case O_MINP: case O_RPEN: case O_RLAST:
	case 's':
		break;
	default:
		return OPT_NOT_MINE;
	}
	e = ntx_error_new();
	snprintf(opt, sizeof opt, "--%s", nm);
	if (!e)
		return tool_usage(&T, "out of memory");
	if (ntx_gen_params_parse(&o->gp, nm, a, e))
		rc = tool_bad_value(&T, opt, e);
	ntx_error_free(e);
	return rc;
}

/* Take option ch with value a: 0, -1 when done (-h, -V; stdout to be
 * closed) or the exit status. li: the long option's index. */
static int parse_opt(struct serve_opts *o, int ch, const char *a, int li, int argc, char **argv)
{
	int rc;

	if ((rc = opt_model(o, ch, a, argc, argv)) != OPT_NOT_MINE ||
	    (rc = opt_spec(o, ch, a)) != OPT_NOT_MINE ||
	    (rc = opt_server(o, ch, a)) != OPT_NOT_MINE ||
	    (rc = opt_sampling(o, ch, a, li)) != OPT_NOT_MINE)
		return rc;
	switch (ch) {
	case 'h':
		usage(stdout);
		return fflush(stdout) || ferror(stdout) ? 1 : -1;
	case 'V':
		tool_version(&T);
		return fflush(stdout) || ferror(stdout) ? 1 : -1;
	default:
		tool_getopt_complaint(PROG, ch, argv);
		return tool_usage_tail(&T);
	}
}

/* --chat-template names a known format: 0 or the exit status 2. */
static int check_chat_template(const char *tmpl)
{
	struct ntx_error *e = ntx_error_new();
	const char *name;
	int rc;

	if (!e)
		return tool_usage(&T, "out of memory");
	rc = ntx_chat_template_name(tmpl, &name, e) ?
	     tool_bad_value(&T, "--chat-template", e) : 0;
	ntx_error_free(e);
	return rc;
}

/* Fill *o from the command line: 0 to go on, -1 when done (-h, -V) or
 * the exit status. */
static int parse_opts(int argc, char **argv, struct serve_opts *o)
{
	int ch, li = 0, rc;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":m:t:c:n:s:qvhV", longopts, &li)) != -1)
		if ((rc = parse_opt(o, ch, optarg, li, argc, argv)) != 0)
			return rc;
	if (optind < argc)
		return tool_usage(&T, "unexpected argument '%s'", argv[optind]);
	if (!o->model_path && !o->plan_path)
		return tool_usage(&T, "no model: give -m MODEL.gguf or --plan plan.json");
	if (o->chat_template)
		return check_chat_template(o->chat_template);
	return 0;
}

/* Models, placement, context (speculative decoding set on it). Returns 0,
 * or -1 after printing the error. */
static int open_all(struct server *s, struct serve_opts *o, struct ntx_error *err)
{
	struct ntx_ctx_params cp;
	struct ntx_ctx_stats st;
	const char *mpath = o->model_path, *base;

	if (o->plan_path && !mpath) {
		if (ntx_placement_model_path(o->plan_path, &s->model_path, err))
			return tool_fail(&T, o->plan_path, err), -1;
		mpath = s->model_path;
	}
	if (ntx_lm_open(mpath, &s->lm, err)) /* the message names the file */
		return tool_fail(&T, NULL, err), -1;
	if (o->plan_path && ntx_placement_load(s->lm, o->plan_path, &s->pl, err))
		return tool_fail(&T, NULL, err), -1;
	if (o->draft_path) { /* refused before any work unless it shares the vocabulary */
		char what[4096];

		snprintf(what, sizeof what, "--draft %s", o->draft_path);
		if (ntx_lm_open(o->draft_path, &s->draft, err)) { /* "PATH: why" */
			fprintf(stderr, PROG ": --draft %s\n", ntx_error_message(err));
			return -1;
		}
		if (ntx_lm_check_draft(s->lm, s->draft, err))
			return tool_fail(&T, what, err), -1;
	}
	ntx_ctx_params_init(&cp);
	cp.backend = o->backend;
	cp.n_ctx = o->n_ctx;          /* 0: the plan's, else min(model, 4096) */
	cp.n_seq = o->parallel_set ? o->parallel : s->pl ? 0 : o->parallel; /* 0: the plan's */
	cp.n_threads = o->n_threads;
	cp.cache_type = o->kv_type;   /* default: the plan's, else f16 */
	if (ntx_ctx_new(s->lm, s->pl, &cp, &s->ctx, err))
		return tool_fail(&T, NULL, err), -1;
	if (s->draft || o->lookup) {
		struct ntx_spec_params sp;

		ntx_spec_params_init(&sp);
		sp.draft = s->draft;
		sp.lookup = o->lookup;
		sp.draft_k = o->draft_k; /* 0: adaptive */
		if (ntx_ctx_set_spec(s->ctx, &sp, err))
			return tool_fail(&T, s->draft ? "--draft" : "--lookup", err), -1;
	}
	st.size = sizeof st;
	if (ntx_ctx_stats(s->ctx, &st, err))
		return tool_fail(&T, NULL, err), -1;
	s->n_ctx = st.n_ctx;
	s->n_slots = st.n_seq;
	s->backend = st.backend;
	s->model_file = mpath;
	base = strrchr(mpath, '/');
	s->model_name = o->alias ? o->alias : base ? base + 1 : mpath;
	return 0;
}

/* The chat format of every request, resolved once: --chat-template, else
 * the model's template when it is a known format, else chatml, as
 * llama-server does (one line on stderr says why, unless -q). Returns 0,
 * or -1 after printing the error. */
static int resolve_chat(struct server *s, const struct serve_opts *o, struct ntx_error *err)
{
	struct ntx_lm_info li;

	if (o->chat_template) { /* checked by parse_opts */
		if (ntx_chat_template_name(o->chat_template, &s->chat_template, err))
			return tool_fail(&T, "--chat-template", err), -1;
		s->chat_source = "option";
		return 0;
	}
	li.size = sizeof li;
	if (ntx_lm_info(s->lm, &li, err))
		return tool_fail(&T, NULL, err), -1;
	if (li.chat_template && !ntx_chat_template_name(li.chat_template, &s->chat_template, err)) {
		s->chat_source = "model";
		return 0;
	}
	s->chat_template = "chatml";
	s->chat_source = "fallback";
	if (!o->quiet)
		fprintf(stderr, PROG ": %s: chat uses chatml (--chat-template NAME to choose another)\n",
			li.chat_template ? "the model's tokenizer.chat_template is not a known format"
					 : "the model has no tokenizer.chat_template");
	return 0;
}

/* The options' defaults. */
static void serve_defaults(struct serve_opts *o)
{
	memset(o, 0, sizeof *o);
	ntx_gen_params_init(&o->gp);
	o->host = "127.0.0.1";
	o->port = 8080;
	o->parallel = 4;
	o->n_queue = 64;
	o->max_body = 1 << 20;
	o->max_header = 16 << 10;
	o->shutdown_s = 10;
}

/* Stop taking connections, give the requests in flight shutdown_s seconds
 * (the worker ends them), then stop the daemon d. */
static void stop_serving(struct server *s, struct MHD_Daemon *d, double shutdown_s)
{
	/* no new connections: the listening socket is ours to close */
	MHD_socket ls = MHD_quiesce_daemon(d);

	if (ls != MHD_INVALID_SOCKET)
		close(ls);
	serve_worker_stop(s, shutdown_s);
	/* every request has ended: let the connections send their answers
	 * (at most 5 s) before they are closed */
	for (int i = 0; i < 500 && __atomic_load_n(&s->n_http, __ATOMIC_SEQ_CST) > 0; i++)
		usleep(10000);
	MHD_stop_daemon(d);
}

/* The totals on stderr once the worker has ended (the context is ours). */
static void print_served(struct server *s, struct ntx_error *err)
{
	struct ntx_ctx_stats st;

	st.size = sizeof st;
	if (!ntx_ctx_stats(s->ctx, &st, err))
		fprintf(stderr, PROG ": served %lld requests: %lld prompt tokens (%lld reused), %lld generated\n",
			(long long)st.n_requests, (long long)st.n_batch_prompt,
			(long long)st.n_prompt_reused, (long long)st.n_batch_gen);
}

int main(int argc, char **argv)
{
	struct serve_opts o;
	struct server s;
	struct ntx_error *err = ntx_error_new();
	struct MHD_Daemon *d = NULL;
	char msg[512];
	sigset_t set;
	int rc, sig = 0;

	if (!err) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	serve_defaults(&o);
	rc = parse_opts(argc, argv, &o);
	if (rc) {
		ntx_error_free(err);
		return rc < 0 ? (fclose(stdout) ? 1 : 0) : rc;
	}
	/* every thread blocks the stop signals; main waits for them */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	memset(&s, 0, sizeof s);
	s.o = &o;
	rc = 1;
	if (open_all(&s, &o, err) || resolve_chat(&s, &o, err))
		goto out;
	if (serve_worker_start(&s, msg, sizeof msg)) {
		fprintf(stderr, PROG ": %s\n", msg);
		goto out;
	}
	d = serve_http_start(&s, msg, sizeof msg);
	if (!d) {
		fprintf(stderr, PROG ": %s\n", msg);
		serve_worker_stop(&s, 0);
		goto out;
	}
	if (!o.quiet) {
		const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);

		fprintf(stderr, PROG ": %s, %d slots of %d tokens, backend %s\n", s.model_name,
			s.n_slots, s.n_ctx, s.backend == NTX_USE_CUDA ? "cuda" : "cpu");
		fprintf(stderr, PROG ": listening on http://%s:%u\n", o.host,
			di ? (unsigned)di->port : (unsigned)o.port);
	}
	sigwait(&set, &sig);
	if (!o.quiet)
		fprintf(stderr, PROG ": %s: stopping (in-flight requests get %g s)\n",
			sig == SIGTERM ? "SIGTERM" : "SIGINT", o.shutdown_s);
	stop_serving(&s, d, o.shutdown_s);
	if (!o.quiet)
		print_served(&s, err);
	rc = 0;
out:
	free(s.running);
	free(s.cancel_ids);
	free(s.admit);
	ntx_error_free(s.werr);
	ntx_ctx_free(s.ctx);
	ntx_placement_free(s.pl);
	ntx_lm_close(s.draft);
	ntx_lm_close(s.lm);
	ntx_free(s.model_path);
	ntx_error_free(err);
	return tool_close_stdout(&T, rc);
}
