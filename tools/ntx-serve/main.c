/* ntx-serve - an OpenAI-compatible HTTP server: chat completions and
 * completions (streamed as server-sent events or not), models and health,
 * over one engine with continuous batching across connections and prefix
 * reuse (see serve.h for the threads). Options, opening and shutdown here. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "chat.h"
#include "parse.h"
#include "serve.h"
#include "spec.h"
#include "tool.h"

#define NTX_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [options] -m MODEL.gguf\n"
"       " PROG " [options] --plan plan.json\n"
"Serve the OpenAI API over HTTP: POST /v1/chat/completions, POST /v1/completions,\n"
"GET /v1/models, GET /health.\n"
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
"      --chat-template NAME  force a chat format (see ntx-run --help)\n"
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

static int usage_error(void)
{
	fprintf(stderr, "usage: " PROG " [options] -m MODEL.gguf\n"
			"Try '" PROG " --help' for more information.\n");
	return 2;
}

static int bad_arg(const char *opt, const struct ntx_err *err)
{
	fprintf(stderr, PROG ": %s: %s\n", opt, err->msg);
	return usage_error();
}

static int fail(const struct ntx_err *err)
{
	fprintf(stderr, PROG ": %s\n", err->msg);
	return 1;
}

static int parse_opts(int argc, char **argv, struct serve_opts *o)
{
	struct ntx_err err = { 0 };
	uint64_t sz;
	int ch, li = 0;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":m:t:c:n:s:qvhV", longopts, &li)) != -1) {
		const char *a = optarg;

		switch (ch) {
		case 'm':
			switch (ntx_getopt_md(argc, argv, &o->draft_path)) {
			case 1: break;
			case -1:
				fprintf(stderr, PROG ": option '-md' needs a draft model file\n");
				return usage_error();
			default: o->model_path = a;
			}
			break;
		case O_DRAFT: o->draft_path = a; break;
		case O_LOOKUP:
			if (ntx_parse_int(a, 1, 16, &o->lookup, &err))
				return bad_arg("--lookup", &err);
			break;
		case O_DRAFTK:
			if (ntx_parse_int(a, 1, NTX_SPEC_KMAX, &o->draft_k, &err))
				return bad_arg("--draft-k", &err);
			break;
		case O_PLAN: o->plan_path = a; break;
		case O_BACKEND:
			if (!strcmp(a, "cpu"))
				o->backend = NTX_BACKEND_CPU;
			else if (!strcmp(a, "cuda"))
				o->backend = NTX_BACKEND_CUDA;
			else if (!strcmp(a, "auto"))
				o->backend = NTX_BACKEND_AUTO;
			else {
				ntx_err_set(&err, NTX_EINVAL, "expected cpu, cuda or auto, got '%s'", a);
				return bad_arg("--backend", &err);
			}
			break;
		case 't':
			if (ntx_parse_int(a, 1, 1024, &o->n_threads, &err))
				return bad_arg("--threads", &err);
			break;
		case 'c':
			if (ntx_parse_int(a, 0, 1 << 24, &o->n_ctx, &err))
				return bad_arg("--ctx-size", &err);
			break;
		case O_KV:
			o->kv_type_set = 1;
			if (!strcmp(a, "f16"))
				o->kv_type = NTX_KV_F16;
			else if (!strcmp(a, "f32"))
				o->kv_type = NTX_KV_F32;
			else {
				ntx_err_set(&err, NTX_EINVAL, "expected f16 or f32, got '%s'", a);
				return bad_arg("--kv-type", &err);
			}
			break;
		case O_PARALLEL:
			if (ntx_parse_int(a, 1, 1024, &o->parallel, &err))
				return bad_arg("--parallel", &err);
			o->parallel_set = 1;
			break;
		case O_QUEUE:
			if (ntx_parse_int(a, 0, 1 << 20, &o->n_queue, &err))
				return bad_arg("--queue", &err);
			break;
		case O_HOST: o->host = a; break;
		case O_PORT:
			if (ntx_parse_int(a, 0, 65535, &o->port, &err))
				return bad_arg("--port", &err);
			break;
		case O_KEY:
			if (!*a) {
				ntx_err_set(&err, NTX_EINVAL, "the key is empty");
				return bad_arg("--api-key", &err);
			}
			o->api_key = a;
			break;
		case O_ALIAS: o->alias = a; break;
		case O_TMPL: o->chat_template = a; break;
		case O_SYSTEM: o->system = a; break;
		case O_MAXBODY:
			if (ntx_parse_size(a, &sz, &err) || sz < 16 || sz > ((uint64_t)1 << 30)) {
				if (!err.msg[0])
					ntx_err_set(&err, NTX_EINVAL, "must be in [16, 1G]");
				return bad_arg("--max-body", &err);
			}
			o->max_body = (size_t)sz;
			break;
		case O_MAXHDR:
			if (ntx_parse_size(a, &sz, &err) || sz < 256 || sz > ((uint64_t)1 << 20)) {
				if (!err.msg[0])
					ntx_err_set(&err, NTX_EINVAL, "must be in [256, 1M]");
				return bad_arg("--max-header", &err);
			}
			o->max_header = (size_t)sz;
			break;
		case O_SHUTDOWN:
			if (ntx_parse_double(a, 0, 3600, &o->shutdown_s, &err))
				return bad_arg("--shutdown-timeout", &err);
			break;
		case 'n':
			if (ntx_parse_int(a, -1, 1 << 30, &o->n_predict, &err))
				return bad_arg("--n-predict", &err);
			break;
		case O_TEMP: case O_TOPK: case O_TOPP: case O_MINP: case O_RPEN: case O_RLAST:
		case 's': {
			const char *nm = ch == 's' ? "seed" : longopts[li].name;

			if (ntx_sampler_parse_opt(nm, a, &o->sp, &err) < 0) {
				char opt[40];

				snprintf(opt, sizeof opt, "--%s", nm);
				return bad_arg(opt, &err);
			}
			break;
		}
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose++; break;
		case 'h':
			usage(stdout);
			return fflush(stdout) || ferror(stdout) ? 1 : -1;
		case 'V':
			printf(PROG " " NTX_VERSION "\n");
			return fflush(stdout) || ferror(stdout) ? 1 : -1;
		default:
			tool_getopt_complaint(PROG, ch, argv);
			return usage_error();
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		return usage_error();
	}
	if (!o->model_path && !o->plan_path) {
		fprintf(stderr, PROG ": no model: give -m MODEL.gguf or --plan plan.json\n");
		return usage_error();
	}
	if (o->chat_template && ntx_chat_detect(o->chat_template, &err) < 0)
		return bad_arg("--chat-template", &err);
	return 0;
}

/* Model, vocabulary, plan, engine and the end-of-generation set. */
static int open_all(struct server *s, struct serve_opts *o, struct ntx_err *err)
{
	struct ntx_engine_opts eo;
	const char *mpath = o->model_path, *base;
	const int32_t *ids;
	int i, n;

	if (o->plan_path) {
		s->plan = ntx_plan_load(o->plan_path, err);
		if (!s->plan)
			return -1;
		if (!mpath)
			mpath = s->plan->model.path;
		if (!o->n_ctx)
			o->n_ctx = s->plan->n_ctx;
		if (!o->kv_type_set)
			o->kv_type = s->plan->kv_type;
		if (!o->parallel_set)
			o->parallel = s->plan->n_seq > 0 ? s->plan->n_seq : 1;
	}
	s->model = ntx_model_open(mpath, 0, err);
	if (!s->model) {
		ntx_err_prefix(err, "%s", mpath);
		return -1;
	}
	s->vocab = ntx_vocab_load(s->model->gguf, err);
	if (!s->vocab) {
		ntx_err_prefix(err, "%s", mpath);
		return -1;
	}
	if (s->plan && ntx_plan_check_model(s->plan, s->model, err)) {
		ntx_err_prefix(err, "%s", o->plan_path);
		return -1;
	}
	if (o->draft_path) { /* refused before any work unless it shares the vocabulary */
		s->dmodel = ntx_model_open(o->draft_path, 0, err);
		s->dvocab = s->dmodel ? ntx_vocab_load(s->dmodel->gguf, err) : NULL;
		if (!s->dvocab || ntx_spec_check_vocab(s->vocab, s->dvocab, err)) {
			ntx_err_prefix(err, "--draft %s", o->draft_path);
			return -1;
		}
	}
	s->eog = calloc((size_t)s->model->cfg.n_vocab, 1);
	if (!s->eog)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	ids = ntx_vocab_eog_ids(s->vocab, &n);
	for (i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < s->model->cfg.n_vocab)
			s->eog[ids[i]] = 1;
	memset(&eo, 0, sizeof eo);
	eo.backend = o->backend;
	eo.n_ctx = o->n_ctx;
	eo.kv_type = o->kv_type;
	eo.n_seq = o->parallel;
	eo.n_ubatch = s->plan ? s->plan->n_ubatch : 0;
	eo.n_threads = o->n_threads;
	eo.plan = s->plan;
	s->engine = ntx_engine_new(s->model, &eo, err);
	if (!s->engine)
		return -1;
	s->n_ctx = ntx_engine_n_ctx(s->engine);
	if (s->dmodel) { /* resident on the target's backend, same context and slots */
		eo.backend = ntx_engine_backend(s->engine);
		eo.n_ctx = s->n_ctx;
		eo.plan = NULL;
		eo.n_ubatch = 0;
		s->draft = ntx_engine_new(s->dmodel, &eo, err);
		if (!s->draft) {
			ntx_err_prefix(err, "--draft %s", o->draft_path);
			return -1;
		}
	}
	base = strrchr(mpath, '/');
	s->model_name = o->alias ? o->alias : base ? base + 1 : mpath;
	return 0;
}

int main(int argc, char **argv)
{
	struct serve_opts o;
	struct server s;
	struct ntx_err err = { 0 };
	struct MHD_Daemon *d = NULL;
	sigset_t set;
	int rc, sig = 0;

	memset(&o, 0, sizeof o);
	ntx_sampler_defaults(&o.sp);
	o.host = "127.0.0.1";
	o.port = 8080;
	o.parallel = 4;
	o.n_queue = 64;
	o.n_predict = -1;
	o.max_body = 1 << 20;
	o.max_header = 16 << 10;
	o.shutdown_s = 10;
	o.kv_type = NTX_KV_F16;
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? (fclose(stdout) ? 1 : 0) : rc;
	/* every thread blocks the stop signals; main waits for them */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	memset(&s, 0, sizeof s);
	s.o = &o;
	rc = 1;
	if (open_all(&s, &o, &err) || serve_worker_start(&s, &err)) {
		fail(&err);
		goto out;
	}
	d = serve_http_start(&s, &err);
	if (!d) {
		fail(&err);
		serve_worker_stop(&s, 0);
		goto out;
	}
	if (!o.quiet) {
		const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);

		fprintf(stderr, PROG ": %s, %d slots of %d tokens, backend %s\n", s.model_name,
			ntx_sched_n_slots(s.sched), s.n_ctx,
			ntx_backend_name(ntx_engine_backend(s.engine)));
		fprintf(stderr, PROG ": listening on http://%s:%u\n", o.host,
			di ? (unsigned)di->port : (unsigned)o.port);
	}
	sigwait(&set, &sig);
	if (!o.quiet)
		fprintf(stderr, PROG ": %s: stopping (in-flight requests get %g s)\n",
			sig == SIGTERM ? "SIGTERM" : "SIGINT", o.shutdown_s);
	{
		/* no new connections: the listening socket is ours to close */
		MHD_socket ls = MHD_quiesce_daemon(d);

		if (ls != MHD_INVALID_SOCKET)
			close(ls);
	}
	serve_worker_stop(&s, o.shutdown_s);
	/* every request has ended: let the connections send their answers
	 * (at most 5 s) before they are closed */
	for (int i = 0; i < 500 && __atomic_load_n(&s.n_http, __ATOMIC_SEQ_CST) > 0; i++)
		usleep(10000);
	MHD_stop_daemon(d);
	if (!o.quiet) {
		struct ntx_sched_stats st;

		ntx_sched_get_stats(s.sched, &st);
		fprintf(stderr, PROG ": served %lld requests: %lld prompt tokens (%lld reused), %lld generated\n",
			(long long)st.n_requests, (long long)st.n_prompt, (long long)st.n_reused,
			(long long)st.n_gen);
	}
	rc = 0;
out:
	ntx_sched_free(s.sched);
	free(s.running);
	ntx_engine_free(s.draft);
	ntx_vocab_free(s.dvocab);
	ntx_model_close(s.dmodel);
	ntx_engine_free(s.engine);
	ntx_vocab_free(s.vocab);
	ntx_plan_free(s.plan);
	ntx_model_close(s.model);
	free(s.eog);
	if (fclose(stdout) && rc == 0)
		rc = 1;
	return rc;
}
