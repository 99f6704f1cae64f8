/* ntx-run - run inference: prompts on stdin, tokens on stdout.
 * Options and dispatch only; see run.h and the mode files. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "tool.h"


volatile sig_atomic_t run_interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	if (run_interrupted) /* a second Ctrl-C: stop now */
		_exit(130);
	run_interrupted = 1;
	if (run_sig_ctx) /* the modes over ntx.h */
		ntx_ctx_interrupt(run_sig_ctx);
}

/* Run the mode the options name: the exit status, messages on stderr. */
static int run_main(struct run_opts *o)
{
	if (o->tokenize) /* the vocabulary only */
		return mode_tokenize(o);
	if (o->perplexity)
		return mode_perplexity(o);
	if (o->bench)
		return mode_bench(o);
	if (o->batch)
		return mode_batch(o);
	return o->interactive ? mode_interactive(o) : mode_generate(o);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [options] -m MODEL.gguf [< prompt.txt]\n"
"       " PROG " [options] --plan plan.json [< prompt.txt]\n"
"Generate text: the prompt comes from stdin (or -p/-f), only the generated text\n"
"goes to stdout; timings go to stderr.\n"
"\n"
"model and placement:\n"
"  -m, --model FILE        GGUF model (default: the plan's)\n"
"      --plan FILE         placement plan from ntx-plan (tiers and executors)\n"
"      --backend B         cpu, cuda or auto (default auto: CUDA if usable)\n"
"      --vram-budget SIZE  plan in memory with this VRAM budget (e.g. 24G)\n"
"      --ram-budget SIZE   plan in memory with this RAM budget\n"
"      --executor E        in-memory plan policy: auto, gpu or cpu\n"
"      --pack FILE         pack file for disk-tier layers\n"
"      --io MODE           streamed-layer path: direct (default) or mmap (baseline)\n"
"      --gpu N             GPU index (default 0)\n"
"  -t, --threads N         CPU threads (default: all cores)\n"
"  -c, --ctx-size N        context size (default: the plan's, else min(model, 4096))\n"
"      --kv-type T         KV cache type: f16 (default) or f32\n"
"prompt:\n"
"  -p, --prompt TEXT       prompt text\n"
"  -f, --file FILE         read the prompt from FILE\n"
"      --prompt-ids IDS    prompt as token ids (\"1 403 407\")\n"
"      --chat              apply the model's chat template\n"
"  -i, --interactive       a conversation: a user turn per line of stdin (also\n"
"                          -cnv, --conversation; implies --chat)\n"
"      --system TEXT       system message for --chat\n"
"      --chat-template NAME  force a chat format (llama3, llama2, mistral-v1,\n"
"                          mistral-v3, mistral-v7, chatml, zephyr, vicuna, ...)\n"
"      --no-bos            do not add BOS\n"
"      --no-parse-special  special-token text stays plain text\n"
"generation:\n"
"  -n, --n-predict N       tokens to generate (default -1: until EOS or full)\n"
"      --temp T            temperature (default 0.8; 0 = greedy)\n"
"      --top-k N           (default 40; 0 = off)\n"
"      --top-p P           (default 0.95; 1 = off)\n"
"      --min-p P           (default 0.05; 0 = off)\n"
"      --repeat-penalty F  (default 1.0 = off)\n"
"      --repeat-last-n N   (default 64; -1 = whole context)\n"
"  -s, --seed N            RNG seed (same seed, same output)\n"
"      --ignore-eos        do not stop at end-of-generation tokens\n"
"      --skip FILE         skip the layer set of an ntx-skip-calib JSON\n"
"      --skip-layers LIST  skip these layers (\"20-39\", \"3,5\")\n"
"      --self-spec         self-speculative decoding (lossless)\n"
"  -md, --draft FILE       speculative decoding with a draft model of the same\n"
"                          vocabulary (alias --model-draft; lossless)\n"
"      --lookup N          prompt lookup: draft from n-gram matches (up to N\n"
"                          tokens) in the prompt and the text so far\n"
"      --draft-k N         tokens drafted per step, 1..64 (default: chosen every\n"
"                          step from the measured acceptance and costs)\n"
"      --draft-skip FILE   draft = full model minus this skip set (default: the\n"
"                          plan's VRAM-resident layers)\n"
"other modes:\n"
"      --tokenize          print the prompt's token ids as a JSON array\n"
"      --perplexity FILE   llama-perplexity's method over FILE (chunks of -c)\n"
"      --batch             JSON Lines requests on stdin, results on stdout\n"
"      --parallel N        sequences decoded together in --batch (default:\n"
"                          the plan's, else 4)\n"
"      --json              single prompt: token events and a summary as JSON Lines\n"
"      --bench             llama-bench-style pp/tg benchmark, JSON on stdout\n"
"      --bench-pp N, --bench-tg N, --bench-reps N   (512, 128, 3)\n"
"output:\n"
"      --stats-json FILE   timings and counters as JSON\n"
"      --expert-stats FILE mixture of experts: how often each expert was chosen,\n"
"                          for ntx-plan --expert-stats (calibrate with\n"
"                          --perplexity TEXT)\n"
"      --dump-logits FILE  float32 logits of every evaluated position\n"
"  -q, --quiet             no timings on stderr\n"
"  -v, --verbose           more detail on stderr\n"
"  -h, --help              this help\n"
"  -V, --version           version\n"
"exit status: 0 ok, 1 error, 2 usage, 3 the model does not fit, 130 interrupted\n");
}

enum {
	O_PLAN = 256, O_BACKEND, O_EXECUTOR, O_PACK, O_IO, O_GPU, O_KV,
	O_PIDS, O_CHAT, O_SYSTEM, O_NOBOS, O_NOPS, O_TEMP, O_TOPK, O_TOPP, O_MINP, O_RPEN,
	O_RLAST, O_IGNEOS, O_SKIP, O_SKIPL, O_SPEC, O_DRAFTK, O_DRAFTSKIP, O_TOKENIZE,
	O_PPL, O_BATCH, O_PARALLEL, O_JSON, O_BENCH, O_BPP, O_BTG, O_BREPS, O_STATS, O_XSTATS, O_DUMP,
	O_FORCE, O_DRAFT, O_LOOKUP, O_CHAT_TMPL, O_INTERACTIVE
};

static const struct option longopts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "plan", required_argument, NULL, O_PLAN },
	{ "backend", required_argument, NULL, O_BACKEND },
	{ "vram-budget", required_argument, NULL, TOOL_OPT_VRAM },
	{ "ram-budget", required_argument, NULL, TOOL_OPT_RAM },
	{ "executor", required_argument, NULL, O_EXECUTOR },
	{ "pack", required_argument, NULL, O_PACK },
	{ "io", required_argument, NULL, O_IO },
	{ "gpu", required_argument, NULL, O_GPU },
	{ "threads", required_argument, NULL, 't' },
	{ "ctx-size", required_argument, NULL, 'c' },
	{ "kv-type", required_argument, NULL, O_KV },
	{ "prompt", required_argument, NULL, 'p' },
	{ "file", required_argument, NULL, 'f' },
	{ "prompt-ids", required_argument, NULL, O_PIDS },
	{ "force-ids", required_argument, NULL, O_FORCE },
	{ "chat", no_argument, NULL, O_CHAT },
	{ "system", required_argument, NULL, O_SYSTEM },
	{ "no-bos", no_argument, NULL, O_NOBOS },
	{ "no-parse-special", no_argument, NULL, O_NOPS },
	{ "n-predict", required_argument, NULL, 'n' },
	{ "temp", required_argument, NULL, O_TEMP },
	{ "top-k", required_argument, NULL, O_TOPK },
	{ "top-p", required_argument, NULL, O_TOPP },
	{ "min-p", required_argument, NULL, O_MINP },
	{ "repeat-penalty", required_argument, NULL, O_RPEN },
	{ "repeat-last-n", required_argument, NULL, O_RLAST },
	{ "seed", required_argument, NULL, 's' },
	{ "ignore-eos", no_argument, NULL, O_IGNEOS },
	{ "skip", required_argument, NULL, O_SKIP },
	{ "skip-layers", required_argument, NULL, O_SKIPL },
	{ "self-spec", no_argument, NULL, O_SPEC },
	{ "draft", required_argument, NULL, O_DRAFT },
	{ "model-draft", required_argument, NULL, O_DRAFT },
	{ "lookup", required_argument, NULL, O_LOOKUP },
	{ "draft-k", required_argument, NULL, O_DRAFTK },
	{ "draft-skip", required_argument, NULL, O_DRAFTSKIP },
	{ "tokenize", no_argument, NULL, O_TOKENIZE },
	{ "perplexity", required_argument, NULL, O_PPL },
	{ "batch", no_argument, NULL, O_BATCH },
	{ "parallel", required_argument, NULL, O_PARALLEL },
	{ "json", no_argument, NULL, O_JSON },
	{ "bench", no_argument, NULL, O_BENCH },
	{ "bench-pp", required_argument, NULL, O_BPP },
	{ "bench-tg", required_argument, NULL, O_BTG },
	{ "bench-reps", required_argument, NULL, O_BREPS },
	{ "stats-json", required_argument, NULL, O_STATS },
	{ "expert-stats", required_argument, NULL, O_XSTATS },
	{ "dump-logits", required_argument, NULL, O_DUMP },
	{ "quiet", no_argument, NULL, 'q' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ "chat-template", required_argument, NULL, O_CHAT_TMPL },
	{ "interactive", no_argument, NULL, 'i' },
	{ "conversation", no_argument, NULL, O_INTERACTIVE },
	{ NULL, 0, NULL, 0 }
};

#define USAGE_TAIL "usage: " PROG " [options] -m MODEL.gguf [< prompt.txt]\n" \
		   "Try '" PROG " --help' for more information.\n"

/* For the options tools/common parses (budgets, threads). */
static const struct tool T = { PROG, USAGE_TAIL };

static int usage_error(void)
{
	fputs(USAGE_TAIL, stderr);
	return 2;
}

/* "ntx-run: OPT: message" for a bad value, and the short usage: 2. */
static int bad_value(const char *opt, const char *fmt, const char *a)
{
	fprintf(stderr, PROG ": %s: ", opt);
	fprintf(stderr, fmt, a);
	fputc('\n', stderr);
	return usage_error();
}

/* Options of llama.cpp that getopt would misread ("-ngl 99" is "-n gl"):
 * refused by name, with what ntx does instead. Returns 0 or the exit status. */
static int foreign_options(int argc, char **argv)
{
	static const struct {
		const char *opt, *hint;
	} tab[] = {
		{ "-ngl", "ntx places layers with --vram-budget or a plan" },
		{ "--n-gpu-layers", "ntx places layers with --vram-budget or a plan" },
		{ "--gpu-layers", "ntx places layers with --vram-budget or a plan" },
		{ "-fa", "attention needs no switch" },
		{ "-ctk", "use --kv-type" },
		{ "-ctv", "use --kv-type" },
		{ "-np", "use --parallel with --batch" },
	};
	int i;
	size_t k;

	for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		const char *a = argv[i];
		const struct option *lo;

		for (k = 0; k < sizeof tab / sizeof tab[0]; k++) {
			size_t n = strlen(tab[k].opt);

			if (!strncmp(a, tab[k].opt, n) && (!a[n] || a[n] == '=')) {
				fprintf(stderr, PROG ": unknown option %s (%s)\n", tab[k].opt, tab[k].hint);
				return usage_error();
			}
		}
		/* skip an option's value (-p -fa is a prompt) */
		if (a[0] == '-' && a[1] && !a[2] && strchr("mtcpfns", a[1]))
			i++;
		else if (a[0] == '-' && a[1] == '-' && !strchr(a, '='))
			for (lo = longopts; lo->name; lo++)
				if (!strcmp(a + 2, lo->name) && lo->has_arg == required_argument) {
					i++;
					break;
				}
	}
	return 0;
}

/* A usage error that is not about one option's value. */
static int bad_use(const char *msg)
{
	fprintf(stderr, PROG ": %s\n", msg);
	return usage_error();
}

/* -h and -V: stdout must reach its destination (a full disk is an error). */
static int close_stdout_info(void)
{
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, PROG ": writing output: %s\n", strerror(errno));
		fclose(stdout);
		return 1;
	}
	if (fclose(stdout)) {
		fprintf(stderr, PROG ": writing output: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

/* Options that only make sense in some modes are usage errors elsewhere,
 * rather than silently ignored. Returns 0 or the exit status 2. */
static int check_modes(const struct run_opts *o)
{
	int n_modes = o->tokenize + !!o->perplexity + o->batch + o->bench;
	int generate = n_modes == 0;

	if (n_modes > 1)
		return bad_use("--tokenize, --perplexity, --batch and --bench exclude each other");
	if (o->interactive && (n_modes || o->prompt || o->prompt_file || o->prompt_ids || o->json ||
			       o->dump_logits || o->force_ids || o->self_spec))
		return bad_use("-i reads its turns from stdin: --batch, -p, -f, --json, --dump-logits, --self-spec and the other modes do not apply");
	if ((o->prompt != NULL) + (o->prompt_file != NULL) + (o->prompt_ids != NULL) > 1)
		return bad_use("give only one of -p, -f and --prompt-ids");
	if (o->skip_file && o->skip_layers)
		return bad_use("give only one of --skip and --skip-layers");
	if ((o->batch || o->perplexity || o->bench) &&
	    (o->prompt || o->prompt_file || o->prompt_ids))
		return bad_use(o->batch ? "--batch reads its requests from stdin: -p, -f and --prompt-ids do not apply"
					: "-p, -f and --prompt-ids do not apply to --perplexity and --bench");
	if (!generate && o->json)
		return bad_use("--json applies to generation only (--batch always writes JSON Lines)");
	if (!generate && o->dump_logits)
		return bad_use("--dump-logits applies to generation only");
	if (!generate && o->force_ids)
		return bad_use("--force-ids applies to generation only");
	if (!generate && (o->self_spec || o->draft_skip))
		return bad_use("--self-spec and --draft-skip apply to generation only");
	if (!generate && !o->batch && o->lookup)
		return bad_use("--lookup applies to generation and --batch");
	if (!generate && !o->bench && !o->batch && (o->draft_path || o->draft_k))
		return bad_use("--draft and --draft-k apply to generation, --batch and --bench");
	if (o->self_spec && o->draft_path)
		return bad_use("--draft and --self-spec exclude each other: the draft is either another model or the target's own layers");
	if (!o->self_spec && o->draft_skip)
		return bad_use("--draft-skip needs --self-spec");
	if (!o->self_spec && !o->draft_path && !o->lookup && o->draft_k)
		return bad_use("--draft-k needs --draft, --lookup or --self-spec");
	if ((o->self_spec || o->draft_path || o->lookup) && o->dump_logits)
		return bad_use("--dump-logits cannot be combined with speculative decoding");
	if ((o->perplexity || o->bench) && (o->chat || o->system))
		return bad_use("--chat and --system do not apply to --perplexity and --bench");
	if (o->system && !o->chat && !o->batch)
		return bad_use("--system needs --chat");
	if (o->stats_json && (o->tokenize || o->perplexity || o->bench))
		return bad_use("--stats-json applies to generation and --batch");
	if (o->expert_stats && (o->tokenize || o->bench))
		return bad_use("--expert-stats applies to generation, --batch and --perplexity");
	return 0;
}

/* ---- options ---- */

/* The defaults before any option. */
static void run_defaults(struct run_opts *o, struct tool_common *com)
{
	memset(o, 0, sizeof *o);
	ntx_gen_params_init(&o->gp);
	o->n_predict = -1;
	o->draft_k = 0;
	o->parallel = 4;
	o->bench_reps = 3;
	o->bench_pp = 512;
	o->bench_tg = 128;
	o->backend = NTX_USE_AUTO;
	o->vram_budget = o->ram_budget = -1;
	tool_common_init(com, 1024); /* -t 1..1024; budgets -1 until given */
	o->kv_type = NTX_KV_CACHE_F16;
}

/* What the option parsers share: the options, tools/common's, the
 * command line (for -md) and the index of the last long option. */
struct opt_state {
	struct run_opts *o;
	struct tool_common com;
	int argc;
	char **argv;
	int li;
};

/* What an option group's parser returns for an option not of its group. */
enum { OPT_NOT_MINE = -1 };

/* A file name that looks like an option is the option forgotten its value
 * before it (--perplexity -c 256): 0, or the exit status 2. */
static int check_file_arg(int ch, const char *a, char **argv)
{
	if (a && a[0] == '-' && a[1] &&
	    (ch == 'm' || ch == 'f' || ch == O_PLAN || ch == O_PACK || ch == O_PPL ||
	     ch == O_STATS || ch == O_XSTATS || ch == O_DUMP || ch == O_SKIP || ch == O_DRAFTSKIP)) {
		fprintf(stderr, PROG ": %s: '%s' looks like an option, not a file (a file of that name: ./%s)\n",
			argv[optind - 1] == a ? argv[optind - 2] : argv[optind - 1], a, a);
		return usage_error();
	}
	return 0;
}

/* Model, placement and budgets: 0, an exit status or OPT_NOT_MINE. */
static int opt_model(struct opt_state *s, int ch, const char *a)
{
	struct run_opts *o = s->o;
	int rc;

	switch (ch) {
	case 'm':
		switch (tool_getopt_md(s->argc, s->argv, &o->draft_path)) {
		case 1: break;
		case -1:
			fprintf(stderr, PROG ": option '-md' needs a draft model file\n");
			return usage_error();
		default: o->model_path = a;
		}
		return 0;
	case O_PLAN: o->plan_path = a; return 0;
	case O_BACKEND: return tool_backend(&T, a, &o->backend);
	case 't': case TOOL_OPT_VRAM: case TOOL_OPT_RAM: /* tools/common's */
		if ((rc = tool_common_opt(&T, ch, a, &s->com)) != 0)
			return rc;
		o->n_threads = s->com.threads;
		o->vram_budget = s->com.vram_budget;
		o->ram_budget = s->com.ram_budget;
		if (ch == TOOL_OPT_RAM)
			o->ram_budget_arg = a;
		return 0;
	case O_EXECUTOR:
		if (strcmp(a, "auto") && strcmp(a, "gpu") && strcmp(a, "cpu"))
			return bad_value("--executor", "expected auto, gpu or cpu, got '%s'", a);
		o->executor = a;
		return 0;
	case O_PACK: o->pack_path = a; return 0;
	case O_IO:
		if (!strcmp(a, "mmap"))
			o->io = RUN_IO_MMAP;
		else if (!strcmp(a, "direct"))
			o->io = RUN_IO_DIRECT;
		else
			return bad_value("--io", "expected direct or mmap, got '%s'", a);
		return 0;
	case O_GPU: return tool_int(&T, "--gpu", a, 0, 63, &o->gpu_index);
	case 'c': return tool_int(&T, "--ctx-size", a, 0, 1 << 24, &o->n_ctx);
	case O_KV:
		o->kv_type_set = 1;
		if (!strcmp(a, "f16"))
			o->kv_type = NTX_KV_CACHE_F16;
		else if (!strcmp(a, "f32"))
			o->kv_type = NTX_KV_CACHE_F32;
		else
			return bad_value("--kv-type", "expected f16 or f32, got '%s'", a);
		return 0;
	}
	return OPT_NOT_MINE;
}

/* The prompt and chat: 0 or OPT_NOT_MINE. */
static int opt_prompt(struct run_opts *o, int ch, const char *a)
{
	switch (ch) {
	case 'p': o->prompt = a; return 0;
	case 'f': o->prompt_file = a; return 0;
	case O_PIDS: o->prompt_ids = a; return 0;
	case O_FORCE: o->force_ids = a; return 0;
	case O_CHAT: o->chat = 1; return 0;
	case O_SYSTEM: o->system = a; return 0;
	case O_NOBOS: o->no_bos = 1; return 0;
	case O_NOPS: o->no_parse_special = 1; return 0;
	case O_CHAT_TMPL: o->chat_template = a; return 0;
	case 'i':
	case O_INTERACTIVE: o->interactive = o->chat = 1; return 0;
	}
	return OPT_NOT_MINE;
}

/* One of the sampling parameters ntx_gen_params_parse knows, by its name
 * nm: 0 or the exit status 2. */
static int opt_gen_param(struct run_opts *o, const char *nm, const char *a)
{
	struct ntx_error *e = ntx_error_new();
	char opt[40];
	int rc;

	if (e && ntx_gen_params_parse(&o->gp, nm, a, e) == NTX_OK) {
		ntx_error_free(e);
		return 0;
	}
	snprintf(opt, sizeof opt, "--%s", nm);
	rc = e ? tool_bad_value(&T, opt, e) : bad_value(opt, "%s", "out of memory");
	ntx_error_free(e);
	return rc;
}

/* Generation length and sampling: 0, an exit status or OPT_NOT_MINE. */
static int opt_sampling(struct opt_state *s, int ch, const char *a)
{
	switch (ch) {
	case 'n': return tool_int(&T, "--n-predict", a, -1, 1 << 30, &s->o->n_predict);
	case O_TEMP: case O_TOPK: case O_TOPP: case O_MINP: case O_RPEN: case O_RLAST:
	case 's':
		return opt_gen_param(s->o, ch == 's' ? "seed" : longopts[s->li].name, a);
	case O_IGNEOS: s->o->ignore_eos = 1; return 0;
	}
	return OPT_NOT_MINE;
}

/* --skip-layers: the syntax now (a usage error); the range once the
 * model's layer count is known. 0 or the exit status 2. */
static int opt_skip_layers(struct run_opts *o, const char *a)
{
	struct ntx_error *e = ntx_error_new();
	int *ls, n, rc;

	if (e && ntx_arg_layers(a, 1 << 24, &ls, &n, e) == NTX_OK) {
		ntx_free(ls);
		ntx_error_free(e);
		o->skip_layers = a;
		return 0;
	}
	rc = e ? tool_bad_value(&T, "--skip-layers", e)
	       : bad_value("--skip-layers", "%s", "out of memory");
	ntx_error_free(e);
	return rc;
}

/* Layer skipping and speculative decoding: 0, an exit status or
 * OPT_NOT_MINE. */
static int opt_spec(struct run_opts *o, int ch, const char *a)
{
	switch (ch) {
	case O_SKIP: o->skip_file = a; return 0;
	case O_SKIPL: return opt_skip_layers(o, a);
	case O_SPEC: o->self_spec = 1; return 0;
	case O_DRAFT: o->draft_path = a; return 0;
	case O_LOOKUP: return tool_int(&T, "--lookup", a, 1, 16, &o->lookup);
	case O_DRAFTK: return tool_int(&T, "--draft-k", a, 1, 64, &o->draft_k);
	case O_DRAFTSKIP: o->draft_skip = a; return 0;
	}
	return OPT_NOT_MINE;
}

/* The other modes (tokenize, perplexity, batch, bench) and the output:
 * 0, an exit status or OPT_NOT_MINE. */
static int opt_modes(struct run_opts *o, int ch, const char *a)
{
	int rc;

	switch (ch) {
	case O_TOKENIZE: o->tokenize = 1; return 0;
	case O_PPL: o->perplexity = a; return 0;
	case O_BATCH: o->batch = 1; return 0;
	case O_PARALLEL:
		if ((rc = tool_int(&T, "--parallel", a, 1, 1024, &o->parallel)) != 0)
			return rc;
		o->parallel_set = 1;
		return 0;
	case O_JSON: o->json = 1; return 0;
	case O_BENCH: o->bench = 1; return 0;
	case O_BPP: return tool_int(&T, "--bench-pp", a, 0, 1 << 20, &o->bench_pp);
	case O_BTG: return tool_int(&T, "--bench-tg", a, 0, 1 << 20, &o->bench_tg);
	case O_BREPS: return tool_int(&T, "--bench-reps", a, 1, 1000, &o->bench_reps);
	case O_STATS: o->stats_json = a; return 0;
	case O_XSTATS: o->expert_stats = a; return 0;
	case O_DUMP: o->dump_logits = a; return 0;
	case 'q': o->quiet = 1; return 0;
	case 'v': o->verbose++; return 0;
	}
	return OPT_NOT_MINE;
}

/* Take option ch with value a (getopt_long's): 0 or the exit status. */
static int parse_opt(struct opt_state *s, int ch, const char *a)
{
	int rc;

	if ((rc = check_file_arg(ch, a, s->argv)) != 0)
		return rc;
	if ((rc = opt_model(s, ch, a)) != OPT_NOT_MINE ||
	    (rc = opt_prompt(s->o, ch, a)) != OPT_NOT_MINE ||
	    (rc = opt_sampling(s, ch, a)) != OPT_NOT_MINE ||
	    (rc = opt_spec(s->o, ch, a)) != OPT_NOT_MINE ||
	    (rc = opt_modes(s->o, ch, a)) != OPT_NOT_MINE)
		return rc;
	/* ':' or '?' */
	tool_getopt_complaint(PROG, ch, s->argv);
	return usage_error();
}

/* -h and -V: the exit status. */
static int info_option(int ch)
{
	if (ch == 'h')
		usage(stdout);
	else
		tool_version(&T);
	return close_stdout_info();
}

/* What is left after the options: no operands, a model, modes that fit
 * together. 0 or the exit status 2. */
static int check_args(const struct run_opts *o, int argc, char **argv)
{
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		return usage_error();
	}
	if (!o->model_path && !o->plan_path)
		return bad_use("no model: give -m MODEL.gguf or --plan plan.json");
	return check_modes(o);
}

/* Fill *o from the command line. Returns 1 when the tool is done (-h, -V,
 * a usage error) with the exit status in *rc; 0 to go on and run. */
static int parse_args(int argc, char **argv, struct run_opts *o, int *rc)
{
	struct opt_state s;
	int ch;

	memset(&s, 0, sizeof s);
	run_defaults(o, &s.com);
	s.o = o;
	s.argc = argc;
	s.argv = argv;

	opterr = 0; /* our own messages, with the program's name */
	for (ch = 1; ch < argc && strcmp(argv[ch], "--"); ch++) /* llama-cli's -cnv */
		if (!strcmp(argv[ch], "-cnv"))
			argv[ch] = (char *)"--conversation";
	if ((*rc = foreign_options(argc, argv)) != 0)
		return 1;
	while ((ch = getopt_long(argc, argv, ":m:t:c:p:f:n:s:qvhVi", longopts, &s.li)) != -1) {
		if (ch == 'h' || ch == 'V') {
			*rc = info_option(ch);
			return 1;
		}
		if ((*rc = parse_opt(&s, ch, optarg)) != 0)
			return 1;
	}
	return (*rc = check_args(o, argc, argv)) != 0;
}

/* ---- run ---- */

/* SIGPIPE ignored (a write error instead); SIGINT and SIGTERM stop the
 * generation at the next token, a second one at once. */
static void install_signals(void)
{
	struct sigaction sa;

	signal(SIGPIPE, SIG_IGN);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* Close stdout after a run that ended with rc: the exit status. */
static int close_stdout_run(int rc)
{
	if (fclose(stdout) && rc == 0 && !run_interrupted) {
		/* a closed stdout pipe ends quietly; a full disk is an error */
		if (errno != EPIPE) {
			fprintf(stderr, PROG ": writing output: %s\n", strerror(errno));
			rc = 1;
		}
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct run_opts o;
	int rc;

	if (parse_args(argc, argv, &o, &rc))
		return rc;
	install_signals();
	return close_stdout_run(run_main(&o));
}
