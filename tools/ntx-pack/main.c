/* ntx-pack - write the pack file (.ntxp) of a model's streamed layers, or
 * verify one against its GGUF. See doc/ntx-pack.1 and doc/pack-format.md. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "fileio.h"
#include "model.h"
#include "pack.h"
#include "pack_read.h"
#include "parse.h"
#include "plan.h"
#include "tool.h"
#include "tunables.h"
#include "version.h"


/* Default compression: see doc/pack-format.md, "Compression: the numbers".
 * auto = zstd level 1 on byte planes, a frame kept compressed only when it
 * saves at least AUTO_MIN_SAVING; quantized layers then stay uncompressed. */
#define DEFAULT_COMPRESS "auto"
#define AUTO_MIN_SAVING 0.10

static const char *prog = "ntx-pack";
static volatile sig_atomic_t got_signal;

#define USAGE "usage: ntx-pack MODEL.gguf (--plan PLAN.json | --all) [-o OUT.ntxp] [options]\n" \
	      "       ntx-pack --verify PACK.ntxp -m MODEL.gguf [--plan PLAN.json]\n"
static const struct tool T = { "ntx-pack", USAGE };

static void usage(FILE *f)
{
	fputs(USAGE, f);
}

static void help(void)
{
	usage(stdout);
	printf("\n"
	       "Write the layers a plan puts on disk (or every layer, --all) into a pack\n"
	       "file: one 4096-byte aligned extent per layer, in the order the engine\n"
	       "reads them, with a checksummed directory (doc/pack-format.md). The file\n"
	       "is written under a temporary name and renamed when complete.\n"
	       "\n"
	       "  -m, --model FILE      the GGUF model (or give it as the argument)\n"
	       "      --plan FILE       pack the plan's disk layers (ntx-plan output)\n"
	       "      --all             pack every layer\n"
	       "  -o, --output FILE     the pack (default: the plan's pack_path, else\n"
	       "                        MODEL.ntxp next to the model)\n"
	       "      --compress MODE   none, zstd (every frame that shrinks) or auto\n"
	       "                        (frames that shrink by 10%% or more; default %s)\n"
	       "      --level N         zstd level (default 1)\n"
	       "      --no-split        zstd without the byte-plane split of F16/BF16/F32\n"
	       "      --frame-size SIZE raw bytes per compressed frame (default 4M)\n"
	       "  -t, --threads N       compression / I/O threads (default: all CPUs\n"
	       "                        for writing, 4 for verifying)\n"
	       "      --verify          after writing, read the pack back and compare it\n"
	       "                        with the model; with PACK.ntxp, check that pack\n"
	       "  -q, --quiet           no progress bar and no summary\n"
	       "  -h, --help            this help\n"
	       "  -V, --version         print the version\n"
	       "\n"
	       "Exit status: 0 success, 1 error (unreadable or mismatched input, corrupt\n"
	       "pack, write failure, interrupted), 2 usage error.\n",
	       DEFAULT_COMPRESS);
}

/* ---- progress ---- */

struct bar {
	int on;
	const char *what;
	double t0;
	int last_pct;
};

static void bar_cb(void *arg, uint64_t done, uint64_t total)
{
	struct bar *b = arg;
	int pct = total ? (int)(done * 100 / total) : 100, i, fill = pct * 30 / 100;
	double dt = ntx_now_s() - b->t0;
	char a[32], t[32];

	if (!b->on || (pct == b->last_pct && done != total))
		return;
	b->last_pct = pct;
	fprintf(stderr, "\r%s: %s [", prog, b->what);
	for (i = 0; i < 30; i++)
		fputc(i < fill ? '#' : ' ', stderr);
	fprintf(stderr, "] %3d%% %s / %s %.2f GB/s ", pct, ntx_fmt_size(done, a, sizeof a),
		ntx_fmt_size(total, t, sizeof t), dt > 0 ? (double)done / dt / 1e9 : 0.0);
	if (done == total)
		fputc('\n', stderr);
	fflush(stderr);
}

/* ---- signals: remove the temporary file on Ctrl-C / SIGTERM ---- */

static void on_signal(int sig)
{
	got_signal = sig;
}

static void catch_signals(int on)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa;
	size_t i;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on ? on_signal : SIG_DFL;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
}

/* ---- verify ---- */

static int verify(const char *pack_path, const struct ntx_model *m, const struct ntx_plan *plan,
		  const char *plan_path, int threads, int quiet)
{
	struct ntx_err err;
	struct ntx_pack *p;
	struct bar b = { !quiet && isatty(2), "verify", ntx_now_s(), -1 };
	struct ntx_tunables tun; /* NTX_FAULT_READ, ... (tests) */
	char sz[32];

	ntx_tunables_from_env(&tun);
	p = ntx_pack_open(pack_path, &err);
	if (!p) {
		fprintf(stderr, "%s: %s: %s\n", prog, pack_path, err.msg);
		return 1;
	}
	if (plan && ntx_pack_check_plan(p, plan, &err)) {
		fprintf(stderr, "%s: %s: %s: %s\n", prog, pack_path, plan_path, err.msg);
		ntx_pack_close(p);
		return 1;
	}
	if (ntx_pack_verify(p, m, threads, &tun, bar_cb, &b, &err)) {
		if (b.on && b.last_pct >= 0)
			fputc('\n', stderr);
		fprintf(stderr, "%s: %s: %s\n", prog, pack_path, err.msg);
		ntx_pack_close(p);
		return 1;
	}
	if (!quiet)
		fprintf(stderr, "%s: %s: OK: %d extents, %s match %s\n", prog, pack_path,
			p->n_extents, ntx_fmt_size(p->raw_bytes, sz, sizeof sz), m->gguf->path);
	ntx_pack_close(p);
	return 0;
}

/* ---- main ---- */

static int same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

enum { OPT_ALL = 256, OPT_COMPRESS, OPT_LEVEL, OPT_VERIFY, OPT_NOSPLIT, OPT_FRAME };

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		TOOL_OPTION_MODEL,
		TOOL_OPTION_PLAN,
		{ "all", no_argument, NULL, OPT_ALL },
		TOOL_OPTION_OUTPUT,
		{ "compress", required_argument, NULL, OPT_COMPRESS },
		{ "level", required_argument, NULL, OPT_LEVEL },
		{ "no-split", no_argument, NULL, OPT_NOSPLIT },
		{ "frame-size", required_argument, NULL, OPT_FRAME },
		TOOL_OPTION_THREADS,
		{ "verify", no_argument, NULL, OPT_VERIFY },
		TOOL_OPTION_QUIET, TOOL_OPTION_HELP, TOOL_OPTION_VERSION,
		{ NULL, 0, NULL, 0 },
	};
	const char *model_path = NULL, *plan_path = NULL, *out_path = NULL, *arg = NULL;
	const char *compress = DEFAULT_COMPRESS;
	int all = 0, do_verify = 0, quiet = 0, threads = 0, c, rc = 1, n_layers = 0, i;
	int *layers = NULL;
	char *out_alloc = NULL;
	struct ntx_pack_write_opts wo;
	struct ntx_pack_write_stats st;
	struct ntx_model *m = NULL;
	struct ntx_plan *plan = NULL;
	struct ntx_err err;
	struct bar b;
	struct tool_common tc;

	ntx_err_clear(&err);
	ntx_pack_write_opts_init(&wo);
	argv[0] = (char *)prog;
	tool_common_init(&tc, 256);
	while ((c = getopt_long(argc, argv, "m:o:t:qhV", opts, NULL)) != -1) {
		int r;

		if ((r = tool_common_opt(&T, c, optarg, &tc)) != TOOL_NOT_COMMON) {
			if (r)
				return r;
			continue;
		}
		switch (c) {
		case OPT_ALL:
			all = 1;
			break;
		case OPT_COMPRESS:
			if (strcmp(optarg, "none") && strcmp(optarg, "zstd") && strcmp(optarg, "auto"))
				return tool_usage(&T, "--compress: '%s' is not none, zstd or auto",
						  optarg);
			compress = optarg;
			break;
		case OPT_LEVEL:
			if ((r = tool_int(&T, "--level", optarg, -7, 22, &wo.level)) != 0)
				return r;
			break;
		case OPT_NOSPLIT:
			wo.split = 0;
			break;
		case OPT_FRAME: {
			uint64_t v;

			if ((r = tool_size(&T, "--frame-size", optarg, &v)) != 0)
				return r;
			if (v < NTX_PACK_ALIGN || v > NTX_PACK_FRAME_MAX || v % NTX_PACK_ALIGN)
				return tool_usage(&T, "--frame-size: must be a multiple of 4K up to 256M");
			wo.frame_size = (uint32_t)v;
			break;
		}
		case OPT_VERIFY:
			do_verify = 1;
			break;
		case 'h':
			help();
			return tool_close_stdout(&T, 0);
		case 'V':
			tool_version(&T);
			return tool_close_stdout(&T, 0);
		default:
			return tool_usage_tail(&T);
		}
	}
	model_path = tc.model;
	plan_path = tc.plan;
	out_path = tc.output;
	threads = tc.threads;
	quiet = tc.quiet;
	if (argc - optind > 1) {
		fprintf(stderr, "%s: too many arguments\n", prog);
		usage(stderr);
		return 2;
	}
	if (argc - optind == 1)
		arg = argv[optind];

	/* ---- verify an existing pack ---- */
	if (do_verify && arg && !all && !model_path && access(arg, F_OK) != 0) {
		/* a missing PACK is named, not taken for a model without --plan */
		fprintf(stderr, "%s: %s: %s\n", prog, arg, strerror(errno));
		return tool_close_stdout(&T, 1);
	}
	if (do_verify && arg && !all && (model_path || ntx_pack_file_is_pack(arg))) {
		if (!model_path || out_path) {
			fprintf(stderr, "%s: %s\n", prog,
				model_path ? "--verify PACK takes no -o"
					   : "--verify PACK needs -m MODEL");
			usage(stderr);
			return 2;
		}
		m = ntx_model_open(model_path, 0, &err);
		if (!m) {
			fprintf(stderr, "%s: %s: %s\n", prog, model_path, err.msg);
			return tool_close_stdout(&T, 1);
		}
		if (plan_path) {
			plan = ntx_plan_load(plan_path, &err);
			if (!plan) {
				fprintf(stderr, "%s: %s: %s\n", prog, plan_path, err.msg);
				ntx_model_close(m);
				return tool_close_stdout(&T, 1);
			}
		}
		rc = verify(arg, m, plan, plan_path, threads, quiet);
		ntx_plan_free(plan);
		ntx_model_close(m);
		return tool_close_stdout(&T, rc);
	}

	/* ---- write a pack ---- */
	if (arg && model_path) {
		fprintf(stderr, "%s: give the model once (argument or -m)\n", prog);
		usage(stderr);
		return 2;
	}
	if (arg)
		model_path = arg;
	if (!model_path) {
		fprintf(stderr, "%s: missing MODEL.gguf\n", prog);
		usage(stderr);
		return 2;
	}
	if (!plan_path && !all) {
		fprintf(stderr, "%s: need --plan PLAN.json (pack its disk layers) or --all\n", prog);
		usage(stderr);
		return 2;
	}
	if (strcmp(compress, "none") != 0) {
		wo.compression = NTX_PACK_COMP_ZSTD;
		wo.min_saving = strcmp(compress, "auto") == 0 ? AUTO_MIN_SAVING : 0.0;
	}
	wo.threads = threads;

	m = ntx_model_open(model_path, 0, &err);
	if (!m) {
		fprintf(stderr, "%s: %s: %s\n", prog, model_path, err.msg);
		goto done;
	}
	if (plan_path) {
		plan = ntx_plan_load(plan_path, &err);
		if (!plan) {
			fprintf(stderr, "%s: %s: %s\n", prog, plan_path, err.msg);
			goto done;
		}
		if (ntx_plan_check_model(plan, m, &err)) {
			fprintf(stderr, "%s: %s: %s\n", prog, plan_path, err.msg);
			goto done;
		}
	}
	layers = malloc(((size_t)m->cfg.n_layer + 1) * sizeof *layers);
	if (!layers) {
		fprintf(stderr, "%s: out of memory\n", prog);
		goto done;
	}
	for (i = 0; i < m->cfg.n_layer; i++)
		if (all || (!plan->layers[i].skip && plan->layers[i].home == NTX_TIER_DISK))
			layers[n_layers++] = i;
	if (!n_layers) {
		fprintf(stderr, "%s: %s: the plan puts no layer on disk: nothing to pack "
			"(--all packs every layer)\n", prog, plan_path);
		goto done;
	}
	if (!out_path && plan && plan->pack_path)
		out_path = plan->pack_path;
	if (!out_path) {
		out_path = out_alloc = ntx_plan_default_pack_path(model_path);
		if (!out_alloc) {
			fprintf(stderr, "%s: out of memory\n", prog);
			goto done;
		}
	}
	if (strcmp(out_path, "-") == 0) {
		fprintf(stderr, "%s: the pack cannot go to standard output (it is written "
			"out of order); give a file\n", prog);
		rc = 2;
		goto done;
	}
	{ /* the pack is renamed into place: never over a device or a FIFO */
		struct stat st_out;

		if (stat(out_path, &st_out) == 0 && !S_ISREG(st_out.st_mode)) {
			fprintf(stderr, "%s: %s: not a regular file (a pack is written under a temporary name and renamed over it)\n",
				prog, out_path);
			rc = 1;
			goto done;
		}
	}
	if (same_file(out_path, model_path)) {
		fprintf(stderr, "%s: %s: refusing to overwrite the model\n", prog, out_path);
		goto done;
	}

	wo.layers = layers;
	wo.n_layers = n_layers;
	b.on = !quiet && isatty(2);
	b.what = "pack";
	b.t0 = ntx_now_s();
	b.last_pct = -1;
	wo.progress = bar_cb;
	wo.progress_arg = &b;
	wo.cancel = &got_signal;
	catch_signals(1);
	if (ntx_pack_write(m, out_path, &wo, &st, &err)) {
		if (b.on && b.last_pct >= 0)
			fputc('\n', stderr);
		fprintf(stderr, "%s: %s: %s\n", prog, out_path, err.msg);
		if (err.code == NTX_EINTR && got_signal) {
			/* die of the signal, as the shell expects */
			int sig = got_signal;

			catch_signals(0);
			fflush(stderr);
			raise(sig);
		}
		goto done;
	}
	catch_signals(0);
	if (!quiet) {
		char a[32], s[32];

		fprintf(stderr, "%s: %s: %d layers, %s stored (%s raw, %d extents compressed, "
			"ratio %.3f) in %.1f s\n",
			prog, out_path, st.n_extents, ntx_fmt_size(st.stored_bytes, s, sizeof s),
			ntx_fmt_size(st.raw_bytes, a, sizeof a), st.n_compressed,
			st.raw_bytes ? (double)st.stored_bytes / (double)st.raw_bytes : 1.0,
			st.seconds);
	}
	rc = do_verify ? verify(out_path, m, plan, plan_path, threads, quiet) : 0;
done:
	free(layers);
	free(out_alloc);
	ntx_plan_free(plan);
	ntx_model_close(m);
	return tool_close_stdout(&T, rc);
}
