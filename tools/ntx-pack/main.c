/* ntx-pack - write the pack file (.ntxp) of a model's streamed layers, or
 * verify one against its GGUF. See doc/ntx-pack.1 and doc/pack-format.md. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ntx.h"
#include "tool.h"

/* Default compression: see doc/pack-format.md, "Compression: the numbers".
 * auto = zstd level 1 on byte planes, a frame kept compressed only when it
 * saves at least AUTO_MIN_SAVING; quantized layers then stay uncompressed. */
#define DEFAULT_COMPRESS "auto"
#define AUTO_MIN_SAVING 0.10

static const char *prog = "ntx-pack";
/* the library's cancel flag is an int (sig_atomic_t is one, ntx.h) */
static volatile int got_signal;

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

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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
	double dt = now_s() - b->t0;
	char a[32], t[32];

	if (!b->on || (pct == b->last_pct && done != total))
		return;
	b->last_pct = pct;
	fprintf(stderr, "\r%s: %s [", prog, b->what);
	for (i = 0; i < 30; i++)
		fputc(i < fill ? '#' : ' ', stderr);
	fprintf(stderr, "] %3d%% %s / %s %.2f GB/s ", pct, ntx_size_format(done, a, sizeof a),
		ntx_size_format(total, t, sizeof t), dt > 0 ? (double)done / dt / 1e9 : 0.0);
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

/* Check the pack at pack_path against lm (and the placement read from
 * plan_path, when given): 0, or 1 after the message. */
static int verify(const char *pack_path, const struct ntx_lm *lm, const struct ntx_placement *pl,
		  const char *plan_path, int threads, int quiet, struct ntx_error *e)
{
	struct ntx_packfile *pf;
	struct ntx_packfile_params pp;
	struct ntx_packfile_stats st = { .size = sizeof st };
	struct ntx_lm_info info = { .size = sizeof info };
	struct bar b = { !quiet && isatty(2), "verify", now_s(), -1 };
	char sz[32];
	int rc = 1;

	if (ntx_packfile_open(pack_path, &pf, e)) {
		fprintf(stderr, "%s: %s: %s\n", prog, pack_path, ntx_error_message(e));
		return 1;
	}
	ntx_packfile_params_init(&pp);
	pp.n_threads = threads;
	pp.progress = bar_cb;
	pp.user = &b;
	if (pl && ntx_packfile_check(pf, pl, e)) {
		fprintf(stderr, "%s: %s: %s: %s\n", prog, pack_path, plan_path, ntx_error_message(e));
	} else if (ntx_packfile_verify(pf, lm, &pp, &st, e) || ntx_lm_info(lm, &info, e)) {
		if (b.on && b.last_pct >= 0)
			fputc('\n', stderr);
		fprintf(stderr, "%s: %s: %s\n", prog, pack_path, ntx_error_message(e));
	} else {
		if (!quiet)
			fprintf(stderr, "%s: %s: OK: %d extents, %s match %s\n", prog, pack_path,
				st.n_extents, ntx_size_format(st.raw_bytes, sz, sizeof sz), info.path);
		rc = 0;
	}
	ntx_packfile_close(pf);
	return rc;
}

/* ---- options ---- */

struct args {
	const char *model, *plan, *out, *arg;
	int all, verify, quiet, threads;
	struct ntx_packfile_params wp; /* compression, level, split, frame size, threads */
};

enum { OPT_ALL = 256, OPT_COMPRESS, OPT_LEVEL, OPT_VERIFY, OPT_NOSPLIT, OPT_FRAME };

/* -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct args *a)
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
	const char *compress = DEFAULT_COMPRESS;
	struct tool_common tc;
	uint64_t v;
	int c, r;

	memset(a, 0, sizeof *a);
	ntx_packfile_params_init(&a->wp);
	argv[0] = (char *)prog;
	tool_common_init(&tc, 256);
	while ((c = getopt_long(argc, argv, "m:o:t:qhV", opts, NULL)) != -1) {
		if ((r = tool_common_opt(&T, c, optarg, &tc)) != TOOL_NOT_COMMON) {
			if (r)
				return r;
			continue;
		}
		switch (c) {
		case OPT_ALL:
			a->all = 1;
			break;
		case OPT_COMPRESS:
			if (strcmp(optarg, "none") && strcmp(optarg, "zstd") && strcmp(optarg, "auto"))
				return tool_usage(&T, "--compress: '%s' is not none, zstd or auto",
						  optarg);
			compress = optarg;
			break;
		case OPT_LEVEL:
			if ((r = tool_int(&T, "--level", optarg, -7, 22, &a->wp.level)) != 0)
				return r;
			break;
		case OPT_NOSPLIT:
			a->wp.split = 0;
			break;
		case OPT_FRAME:
			if ((r = tool_size(&T, "--frame-size", optarg, &v)) != 0)
				return r;
			if (v < NTX_PACKFILE_ALIGN || v > NTX_PACKFILE_FRAME_MAX || v % NTX_PACKFILE_ALIGN)
				return tool_usage(&T, "--frame-size: must be a multiple of 4K up to 256M");
			a->wp.frame_size = (uint32_t)v;
			break;
		case OPT_VERIFY:
			a->verify = 1;
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
	a->model = tc.model;
	a->plan = tc.plan;
	a->out = tc.output;
	a->threads = a->wp.n_threads = tc.threads;
	a->quiet = tc.quiet;
	if (strcmp(compress, "none") != 0) {
		a->wp.compression = NTX_COMPRESS_ZSTD;
		a->wp.min_saving = strcmp(compress, "auto") == 0 ? AUTO_MIN_SAVING : 0.0;
	}
	if (argc - optind > 1) {
		fprintf(stderr, "%s: too many arguments\n", prog);
		usage(stderr);
		return 2;
	}
	if (argc - optind == 1)
		a->arg = argv[optind];
	return -1;
}

/* ---- verify an existing pack ---- */

static int verify_pack(const struct args *a, struct ntx_error *e)
{
	struct ntx_lm *lm;
	struct ntx_placement *pl = NULL;
	int rc;

	if (!a->model || a->out) {
		fprintf(stderr, "%s: %s\n", prog,
			a->model ? "--verify PACK takes no -o" : "--verify PACK needs -m MODEL");
		usage(stderr);
		return 2;
	}
	if (ntx_lm_open(a->model, &lm, e))
		return tool_fail(&T, NULL, e);
	if (a->plan && ntx_placement_read(a->plan, &pl, e))
		rc = tool_fail(&T, a->plan, e);
	else
		rc = verify(a->arg, lm, pl, a->plan, a->threads, a->quiet, e);
	ntx_placement_free(pl);
	ntx_lm_close(lm);
	return rc;
}

/* ---- write a pack ---- */

/* The pack's path: -o, the plan's pack_path, else MODEL.ntxp (*alloc). */
static const char *out_path(const struct args *a, const char *model,
			    const struct ntx_placement *pl, char **alloc, struct ntx_error *e)
{
	if (a->out)
		return a->out;
	if (pl && ntx_placement_pack_path(pl))
		return ntx_placement_pack_path(pl);
	return ntx_packfile_default_path(model, alloc, e) ? NULL : *alloc;
}

static int write_pack(const struct args *a, struct ntx_error *e)
{
	const char *model = a->arg ? a->arg : a->model, *out;
	struct ntx_lm *lm = NULL;
	struct ntx_placement *pl = NULL;
	struct ntx_placement_info info = { .size = sizeof info };
	struct ntx_packfile_params wp = a->wp;
	struct ntx_packfile_stats st = { .size = sizeof st };
	struct bar b = { !a->quiet && isatty(2), "pack", 0, -1 };
	char *alloc = NULL, x[32], y[32];
	int rc = 1;

	if (a->arg && a->model) {
		fprintf(stderr, "%s: give the model once (argument or -m)\n", prog);
		usage(stderr);
		return 2;
	}
	if (!model || (!a->plan && !a->all)) {
		fprintf(stderr, "%s: %s\n", prog, !model ? "missing MODEL.gguf" :
			"need --plan PLAN.json (pack its disk layers) or --all");
		usage(stderr);
		return 2;
	}
	if (ntx_lm_open(model, &lm, e)) {
		rc = tool_fail(&T, NULL, e);
		goto done;
	}
	if (a->plan && (ntx_placement_read(a->plan, &pl, e) || ntx_placement_check(pl, lm, e))) {
		rc = tool_fail(&T, a->plan, e);
		goto done;
	}
	if (!a->all && (ntx_placement_info(pl, &info, e) || !info.n_disk)) {
		fprintf(stderr, "%s: %s: the plan puts no layer on disk: nothing to pack "
			"(--all packs every layer)\n", prog, a->plan);
		goto done;
	}
	if (!(out = out_path(a, model, pl, &alloc, e))) {
		rc = tool_fail(&T, NULL, e);
		goto done;
	}
	if (strcmp(out, "-") == 0) {
		fprintf(stderr, "%s: the pack cannot go to standard output (it is written "
			"out of order); give a file\n", prog);
		rc = 2;
		goto done;
	}
	b.t0 = now_s();
	wp.progress = bar_cb;
	wp.user = &b;
	wp.cancel = &got_signal;
	catch_signals(1);
	if (ntx_packfile_write(lm, a->all ? NULL : pl, out, &wp, &st, e)) {
		if (b.on && b.last_pct >= 0)
			fputc('\n', stderr);
		fprintf(stderr, "%s: %s: %s\n", prog, out, ntx_error_message(e));
		if (ntx_error_status(e) == NTX_STATUS_INTERRUPTED && got_signal) {
			/* die of the signal, as the shell expects */
			int sig = got_signal;

			catch_signals(0);
			fflush(stderr);
			raise(sig);
		}
		goto done;
	}
	catch_signals(0);
	if (!a->quiet)
		fprintf(stderr, "%s: %s: %d layers, %s stored (%s raw, %d extents compressed, "
			"ratio %.3f) in %.1f s\n",
			prog, out, st.n_extents, ntx_size_format(st.stored_bytes, y, sizeof y),
			ntx_size_format(st.raw_bytes, x, sizeof x), st.n_compressed,
			st.raw_bytes ? (double)st.stored_bytes / (double)st.raw_bytes : 1.0,
			st.seconds);
	rc = a->verify ? verify(out, lm, pl, a->plan, a->threads, a->quiet, e) : 0;
done:
	ntx_free(alloc);
	ntx_placement_free(pl);
	ntx_lm_close(lm);
	return rc;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
	struct args a;
	struct ntx_error *e;
	int rc = parse_args(argc, argv, &a);

	if (rc >= 0)
		return rc;
	if (!(e = ntx_error_new())) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return 1;
	}
	if (a.verify && a.arg && !a.all && !a.model && access(a.arg, F_OK) != 0) {
		/* a missing PACK is named, not taken for a model without --plan */
		fprintf(stderr, "%s: %s: %s\n", prog, a.arg, strerror(errno));
		rc = 1;
	} else if (a.verify && a.arg && !a.all && (a.model || ntx_packfile_detect(a.arg))) {
		rc = verify_pack(&a, e);
	} else {
		rc = write_pack(&a, e);
	}
	ntx_error_free(e);
	return tool_close_stdout(&T, rc);
}
