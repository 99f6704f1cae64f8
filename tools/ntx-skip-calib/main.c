/* ntx-skip-calib - calibrate layer-skip sets by cosine similarity and
 * measure what each set costs.
 *
 *   ntx-skip-calib -m MODEL.gguf [--count 1,2,4,6 | --threshold 0.98]
 *                  [--eval heldout.txt] [--naive] < calib.txt > skip.json
 *
 * The calibration text runs through the full model; for every layer the
 * cosine similarity between the hidden state entering and leaving it is
 * averaged over all tokens. A layer whose output is nearly its input
 * contributes little: sets are the layers with the highest similarity
 * (first and last layer excluded unless --allow-ends). With --eval, each set
 * is measured on held-out text the way llama-perplexity does: perplexity,
 * mean KL divergence from the full model, and top-1 agreement; --naive adds,
 * for each size, the "last layers" set as a baseline.
 *
 * The work is the library's (ntx_calibrate in ntx.h); this program reads
 * the options and the texts, shows progress and writes the document. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx.h"
#include "tool.h"

#define PROG "ntx-skip-calib"
#define MAX_SETS 64

static const struct tool T = {
	PROG, "usage: " PROG " -m MODEL.gguf [options] < calib.txt > skip.json\n"
	      "Try '" PROG " --help' for more information.\n"
};

struct opts {
	struct tool_common c;
	const char *eval, *calib;
	int counts[MAX_SETS], n_counts;
	double threshold;
	int have_threshold;
	int n_ctx, allow_ends, naive;
	enum ntx_backend_choice backend;
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " -m MODEL.gguf [options] < calib.txt > skip.json\n"
"Calibrate layer-skip sets by the cosine similarity of each layer's input and\n"
"output hidden states, and measure their quality cost.\n"
"  -m, --model FILE       GGUF model\n"
"      --plan FILE        take the model from a plan (and refuse a mismatch)\n"
"  -f, --file FILE        calibration text (default: stdin)\n"
"      --count LIST       set sizes to report, e.g. 1,2,4,6 (default 1,2,4,6)\n"
"      --threshold T      also the set of layers with mean cosine >= T (it\n"
"                         becomes the \"skip\" set)\n"
"      --eval FILE        measure each set on held-out text (PPL, KLD, top-1)\n"
"      --naive            also measure the last-N-layers set of each size\n"
"      --allow-ends       the first and last layers may be skipped too\n"
"  -c, --ctx-size N       chunk size in tokens (default 512)\n"
"  -t, --threads N        CPU threads\n"
"      --backend B        cpu, cuda or auto\n"
"  -o, --output FILE      write the JSON here (default stdout)\n"
"  -q, --quiet            no progress on stderr\n"
"  -h, --help, -V, --version\n"
"exit status: 0 ok, 1 error, 2 usage, 130 interrupted\n");
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int s)
{
	(void)s;
	if (interrupted) /* a second Ctrl-C: stop now */
		_exit(130);
	interrupted = 1;
}

/* --count: a comma-separated list of set sizes, each in [1, 1024]. Returns
 * 0 or the usage error's status. */
static int parse_counts(const char *s, int *counts, int *n)
{
	char buf[32];
	const char *p = s;
	int rc;

	*n = 0;
	for (;;) {
		size_t len = strcspn(p, ",");

		if (len == 0 || len >= sizeof buf)
			return tool_usage(&T, "--count: expected sizes like 1,2,4,6, got '%s'", s);
		memcpy(buf, p, len);
		buf[len] = '\0';
		if (*n == MAX_SETS)
			return tool_usage(&T, "--count: at most %d sizes", MAX_SETS);
		if ((rc = tool_int(&T, "--count", buf, 1, 1024, &counts[*n])) != 0)
			return rc;
		++*n;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

/* Read a whole text file (NULL or "-" = stdin). Returns 0, or the exit
 * status after the message. */
static int read_file(const char *path, char **text, size_t *len)
{
	int use_stdin = !path || !strcmp(path, "-");
	const char *name = use_stdin ? "stdin" : path;
	FILE *f = use_stdin ? stdin : fopen(path, "rb");
	size_t cap = 1 << 16, n = 0;
	char *b;
	int e = 0;

	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return 1;
	}
	b = malloc(cap + 1);
	while (b) {
		size_t r = fread(b + n, 1, cap - n, f);

		n += r;
		if (r == 0) {
			if (ferror(f))
				e = errno ? errno : EIO;
			break;
		}
		if (n == cap) {
			char *nb = realloc(b, cap * 2 + 1);

			if (!nb) {
				free(b);
				b = NULL;
				break;
			}
			b = nb;
			cap *= 2;
		}
	}
	if (f != stdin)
		fclose(f);
	if (!b) {
		fprintf(stderr, PROG ": out of memory reading %s\n", name);
		return 1;
	}
	if (e) {
		free(b);
		if (e == EINTR && interrupted) {
			fprintf(stderr, PROG ": interrupted\n");
			return 130;
		}
		fprintf(stderr, PROG ": %s: %s\n", name, strerror(e));
		return 1;
	}
	b[n] = '\0';
	*text = b;
	*len = n;
	return 0;
}

struct prog {
	int quiet, tty;
};

static void progress(void *p, const char *what, int chunk, int n_chunks, double ppl)
{
	struct prog *pr = p;

	if (pr->quiet || !pr->tty)
		return;
	fprintf(stderr, "\r" PROG ": %s: chunk %d/%d, PPL %.4f   ", what, chunk, n_chunks, ppl);
	if (chunk == n_chunks)
		fputc('\n', stderr);
}

static void note(void *p, const char *line)
{
	if (!((struct prog *)p)->quiet)
		fprintf(stderr, PROG ": %s\n", line);
}

/* Options. Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_FILE = 256, O_COUNT, O_THRESHOLD, O_EVAL, O_NAIVE, O_ENDS, O_BACKEND };
	static const struct option lo[] = {
		TOOL_OPTION_MODEL, TOOL_OPTION_PLAN,
		{ "file", required_argument, NULL, 'f' }, { "count", required_argument, NULL, O_COUNT },
		{ "threshold", required_argument, NULL, O_THRESHOLD },
		{ "eval", required_argument, NULL, O_EVAL }, { "naive", no_argument, NULL, O_NAIVE },
		{ "allow-ends", no_argument, NULL, O_ENDS },
		{ "ctx-size", required_argument, NULL, 'c' }, TOOL_OPTION_THREADS,
		{ "backend", required_argument, NULL, O_BACKEND }, TOOL_OPTION_OUTPUT,
		TOOL_OPTION_QUIET, TOOL_OPTION_HELP, TOOL_OPTION_VERSION, { NULL, 0, NULL, 0 }
	};
	int ch, rc;

	memset(o, 0, sizeof *o);
	tool_common_init(&o->c, 1024);
	o->n_ctx = 512;
	o->backend = NTX_USE_AUTO;
	opterr = 0; /* our own messages, with the program's name */
	while ((ch = getopt_long(argc, argv, ":m:f:c:t:o:qhV", lo, NULL)) != -1) {
		if ((rc = tool_common_opt(&T, ch, optarg, &o->c)) != TOOL_NOT_COMMON) {
			if (rc)
				return rc;
			continue;
		}
		switch (ch) {
		case 'f': o->calib = optarg; break;
		case O_EVAL: o->eval = optarg; break;
		case O_NAIVE: o->naive = 1; break;
		case O_ENDS: o->allow_ends = 1; break;
		case O_COUNT:
			if ((rc = parse_counts(optarg, o->counts, &o->n_counts)) != 0)
				return rc;
			break;
		case O_THRESHOLD:
			if ((rc = tool_double(&T, "--threshold", optarg, -1, 1, &o->threshold)) != 0)
				return rc;
			o->have_threshold = 1;
			break;
		case 'c':
			if ((rc = tool_int(&T, "--ctx-size", optarg, 8, 1 << 20, &o->n_ctx)) != 0)
				return rc;
			break;
		case O_BACKEND:
			if ((rc = tool_backend(&T, optarg, &o->backend)) != 0)
				return rc;
			break;
		case 'h':
			usage(stdout);
			return tool_close_stdout(&T, 0);
		case 'V':
			tool_version(&T);
			return tool_close_stdout(&T, 0);
		default: /* ':' or '?' */
			tool_getopt_complaint(PROG, ch, argv);
			return tool_usage_tail(&T);
		}
	}
	if (optind < argc)
		return tool_usage(&T, "unexpected argument '%s'", argv[optind]);
	if (!o->c.model && !o->c.plan)
		return tool_usage(&T, "no model: give -m MODEL.gguf or --plan plan.json");
	return -1;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct ntx_error *err = ntx_error_new();
	struct ntx_lm *lm = NULL;
	struct ntx_placement *pl = NULL;
	struct ntx_output *out = NULL;
	struct ntx_calib_params cp;
	struct prog pr;
	struct sigaction sa;
	char *model = NULL, *calib = NULL, *eval = NULL, *json = NULL;
	size_t calib_len = 0, eval_len = 0;
	int rc = parse_args(argc, argv, &o);

	if (rc >= 0 || !err) {
		ntx_error_free(err);
		return rc >= 0 ? rc : 1;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	pr.quiet = o.c.quiet;
	pr.tty = isatty(2);
	rc = 1;
	/* the output first: an unwritable one fails before the calibration; a
	 * file is written through a temporary and renamed when complete */
	if (ntx_output_open(o.c.output ? o.c.output : "-", &out, err) ||
	    (!o.c.model && ntx_placement_model_path(o.c.plan, &model, err)) ||
	    ntx_lm_open(o.c.model ? o.c.model : model, &lm, err) ||
	    (o.c.plan && ntx_placement_load(lm, o.c.plan, &pl, err)))
		goto fail;
	if ((rc = read_file(o.calib, &calib, &calib_len)) != 0 ||
	    (o.eval && (rc = read_file(o.eval, &eval, &eval_len)) != 0))
		goto done;
	rc = 1;
	ntx_calib_params_init(&cp);
	cp.counts = o.n_counts ? o.counts : NULL;
	cp.n_counts = o.n_counts;
	cp.use_threshold = o.have_threshold;
	cp.threshold = o.threshold;
	cp.n_ctx = o.n_ctx;
	cp.allow_ends = o.allow_ends;
	cp.naive = o.naive;
	cp.backend = o.backend;
	cp.n_threads = o.c.threads;
	cp.calib_text = calib;
	cp.calib_len = calib_len;
	cp.calib_name = o.calib;
	cp.eval_text = eval;
	cp.eval_len = eval_len;
	cp.eval_name = o.eval;
	cp.progress = progress;
	cp.note = note;
	cp.user = &pr;
	cp.cancel = &interrupted;
	if (ntx_calibrate(lm, pl, &cp, &json, err) ||
	    ntx_output_write(out, json, strlen(json), err))
		goto fail;
	rc = ntx_output_commit(out, err);
	out = NULL;
	if (rc)
		goto fail;
	goto done;
fail:
	rc = ntx_error_status(err) == NTX_STATUS_INTERRUPTED ? 130 : 1;
	fprintf(stderr, PROG ": %s\n", ntx_error_message(err));
done:
	ntx_output_abort(out);
	ntx_free(json);
	free(calib);
	free(eval);
	ntx_free(model);
	ntx_placement_free(pl);
	ntx_lm_close(lm);
	ntx_error_free(err);
	return tool_close_stdout(&T, rc);
}
