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
 * for each size, the "last layers" set as a baseline. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"
#include "fileio.h"
#include "generate.h"
#include "model.h"
#include "parse.h"
#include "plan.h"
#include "tokenizer.h"
#include "version.h"

#define PROG "ntx-skip-calib"
#define MAX_SETS 64

struct opts {
	const char *model, *plan_path, *eval, *out, *calib;
	int counts[MAX_SETS], n_counts;
	double threshold;
	int have_threshold;
	int n_ctx, n_threads, allow_ends, naive, quiet;
	enum ntx_backend backend;
};

struct cset {
	const char *method;   /* "calibrated", "threshold", "naive" */
	int n;
	int layers[1024];
	struct ntx_ppl_result r;
	int evaluated;
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

#define MIN_TOKENS 16 /* fewer calibration tokens say nothing about a layer */

static volatile sig_atomic_t interrupted;

static void on_sigint(int s)
{
	(void)s;
	if (interrupted) /* a second Ctrl-C: stop now */
		_exit(130);
	interrupted = 1;
}

static int usage_error(void)
{
	fprintf(stderr, "usage: " PROG " -m MODEL.gguf [options] < calib.txt > skip.json\n"
			"Try '" PROG " --help' for more information.\n");
	return 2;
}

static int bad_arg(const char *opt, const char *msg)
{
	fprintf(stderr, PROG ": %s: %s\n", opt, msg);
	return usage_error();
}

/* --count: a comma-separated list of set sizes, each in [1, 1024]. */
static int parse_counts(const char *s, int *counts, int *n, struct ntx_err *err)
{
	char buf[32];
	const char *p = s;

	*n = 0;
	for (;;) {
		size_t len = strcspn(p, ",");
		int v;

		if (len == 0 || len >= sizeof buf)
			return ntx_err_set(err, NTX_EINVAL, "expected sizes like 1,2,4,6, got '%s'", s);
		memcpy(buf, p, len);
		buf[len] = '\0';
		if (ntx_parse_int(buf, 1, 1024, &v, err))
			return -1;
		if (*n == MAX_SETS)
			return ntx_err_set(err, NTX_EINVAL, "at most %d sizes", MAX_SETS);
		counts[(*n)++] = v;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

static int fail(const struct ntx_err *err)
{
	fprintf(stderr, PROG ": %s\n", err->msg);
	return err->code == NTX_EINTR ? 130 : 1;
}

/* Read a whole text file (NULL or "-" = stdin). */
static int read_file(const char *path, char **text, size_t *len, struct ntx_err *err)
{
	int use_stdin = !path || !strcmp(path, "-");
	const char *name = use_stdin ? "stdin" : path;
	FILE *f = use_stdin ? stdin : fopen(path, "rb");
	size_t cap = 1 << 16, n = 0;
	char *b;
	int e = 0;

	if (!f)
		return ntx_err_errno(err, errno, "%s", path);
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
	if (!b)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory reading %s", name);
	if (e) {
		free(b);
		if (e == EINTR && interrupted)
			return ntx_err_set(err, NTX_EINTR, "interrupted");
		return ntx_err_errno(err, e, "%s", name);
	}
	b[n] = '\0';
	*text = b;
	*len = n;
	return 0;
}

struct prog {
	int quiet, tty;
	const char *what;
};

static void progress(void *p, int chunk, int n_chunks, double ppl)
{
	struct prog *pr = p;

	if (pr->quiet || !pr->tty)
		return;
	fprintf(stderr, "\r" PROG ": %s: chunk %d/%d, PPL %.4f   ", pr->what, chunk, n_chunks, ppl);
	if (chunk == n_chunks)
		fputc('\n', stderr);
}

static int tokenize_file(const struct ntx_vocab *v, const char *path, int32_t **ids, int *n,
			 struct ntx_err *err)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	if (read_file(path, &text, &len, err))
		return -1;
	rc = ntx_tokenize(v, text, len, 1, 0, ids, n, err);
	free(text);
	return rc;
}

/* Sort layer indices by descending mean cosine (qsort has no context). */
static const double *g_cos;

static int cmp_desc_g(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	if (g_cos[x] != g_cos[y])
		return g_cos[x] < g_cos[y] ? 1 : -1;
	return x - y;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

static json_t *set_json(const struct cset *s)
{
	json_t *ls = json_array(), *j;
	int i;

	for (i = 0; i < s->n; i++)
		json_array_append_new(ls, json_integer(s->layers[i]));
	j = json_pack("{s:s, s:i, s:o}", "method", s->method, "count", s->n, "layers", ls);
	if (s->evaluated)
		json_object_set_new(j, "eval",
				    json_pack("{s:f, s:f, s:f, s:f, s:f, s:i}", "ppl", s->r.ppl,
					      "ppl_err", s->r.ppl_err, "kld", s->r.kld, "kld_err",
					      s->r.kld_err, "top1_agreement", s->r.top1, "n_scored",
					      s->r.n_scored));
	return j;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "model", required_argument, NULL, 'm' }, { "plan", required_argument, NULL, 'P' },
		{ "file", required_argument, NULL, 'f' }, { "count", required_argument, NULL, 'C' },
		{ "threshold", required_argument, NULL, 'T' }, { "eval", required_argument, NULL, 'E' },
		{ "naive", no_argument, NULL, 'N' }, { "allow-ends", no_argument, NULL, 'A' },
		{ "ctx-size", required_argument, NULL, 'c' }, { "threads", required_argument, NULL, 't' },
		{ "backend", required_argument, NULL, 'B' }, { "output", required_argument, NULL, 'o' },
		{ "quiet", no_argument, NULL, 'q' }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 }
	};
	struct opts o;
	struct ntx_err err = { 0 };
	struct ntx_model *m = NULL;
	struct ntx_vocab *v = NULL;
	struct ntx_plan *plan = NULL;
	struct ntx_engine *e = NULL;
	struct ntx_engine_opts eo;
	struct ntx_ppl_result base, full_eval;
	struct prog pr;
	struct cset *sets = NULL;
	int32_t *ids = NULL, *eids = NULL;
	int n_ids = 0, n_eids = 0, ch, i, l, n_sets = 0, L, rc = 1;
	double *cos = NULL, *cstd = NULL;
	int64_t *cn = NULL;
	FILE *ref = NULL;
	json_t *doc = NULL, *jl, *js;
	uint8_t *mask = NULL;
	int stdout_closed = 0;
	struct ntx_outfile of = { 0 };

	memset(&o, 0, sizeof o);
	o.n_ctx = 512;
	o.backend = NTX_BACKEND_AUTO;
	opterr = 0; /* our own messages, with the program's name */
	while ((ch = getopt_long(argc, argv, ":m:f:c:t:o:qhV", lo, NULL)) != -1) {
		switch (ch) {
		case 'm': o.model = optarg; break;
		case 'P': o.plan_path = optarg; break;
		case 'f': o.calib = optarg; break;
		case 'E': o.eval = optarg; break;
		case 'N': o.naive = 1; break;
		case 'A': o.allow_ends = 1; break;
		case 'o': o.out = optarg; break;
		case 'q': o.quiet = 1; break;
		case 'C':
			if (parse_counts(optarg, o.counts, &o.n_counts, &err))
				return bad_arg("--count", err.msg);
			break;
		case 'T':
			if (ntx_parse_double(optarg, -1, 1, &o.threshold, &err))
				return bad_arg("--threshold", err.msg);
			o.have_threshold = 1;
			break;
		case 'c':
			if (ntx_parse_int(optarg, 8, 1 << 20, &o.n_ctx, &err))
				return bad_arg("--ctx-size", err.msg);
			break;
		case 't':
			if (ntx_parse_int(optarg, 1, 1024, &o.n_threads, &err))
				return bad_arg("--threads", err.msg);
			break;
		case 'B':
			if (!strcmp(optarg, "cpu"))
				o.backend = NTX_BACKEND_CPU;
			else if (!strcmp(optarg, "cuda"))
				o.backend = NTX_BACKEND_CUDA;
			else if (!strcmp(optarg, "auto"))
				o.backend = NTX_BACKEND_AUTO;
			else
				return bad_arg("--backend", "expected cpu, cuda or auto");
			break;
		case 'h':
			usage(stdout);
			if (fclose(stdout)) {
				fprintf(stderr, PROG ": writing output: %s\n", strerror(errno));
				return 1;
			}
			return 0;
		case 'V':
			printf(PROG " (ntx) " NTX_VERSION "\n");
			if (fclose(stdout)) {
				fprintf(stderr, PROG ": writing output: %s\n", strerror(errno));
				return 1;
			}
			return 0;
		default: /* ':' or '?' */
			ntx_getopt_complaint(PROG, ch, argv);
			return usage_error();
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		return usage_error();
	}
	if (!o.model && !o.plan_path) {
		fprintf(stderr, PROG ": no model: give -m MODEL.gguf or --plan plan.json\n");
		return usage_error();
	}

	if (!o.n_counts) {
		static const int def[] = { 1, 2, 4, 6 };

		memcpy(o.counts, def, sizeof def);
		o.n_counts = 4;
	}
	{
		struct sigaction sa;

		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_sigint;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	pr.quiet = o.quiet;
	pr.tty = isatty(2);
	/* the output first: an unwritable one fails before the calibration; a
	 * file is written through a temporary and renamed when complete */
	if (ntx_outfile_open(&of, o.out, "w", stdout, &err))
		goto out;

	if (o.plan_path) {
		plan = ntx_plan_load(o.plan_path, &err);
		if (!plan)
			goto out;
		if (!o.model) {
			o.model = ntx_plan_model_file(plan, &err);
			if (!o.model) {
				ntx_err_prefix(&err, "%s", o.plan_path);
				goto out;
			}
		}
	}
	m = ntx_model_open(o.model, 0, &err);
	if (!m) {
		ntx_err_prefix(&err, "%s", o.model);
		goto out;
	}
	if (plan && ntx_plan_check_model(plan, m, &err)) {
		ntx_err_prefix(&err, "%s", o.plan_path);
		goto out;
	}
	v = ntx_vocab_load(m->gguf, &err);
	if (!v) {
		ntx_err_prefix(&err, "%s", o.model);
		goto out;
	}
	L = m->cfg.n_layer;
	if (tokenize_file(v, o.calib, &ids, &n_ids, &err))
		goto out;
	if (n_ids < MIN_TOKENS) {
		ntx_err_set(&err, NTX_EINVAL,
			    "%s: the calibration text has %d tokens; at least %d are needed",
			    o.calib && strcmp(o.calib, "-") ? o.calib : "stdin", n_ids, MIN_TOKENS);
		goto out;
	}
	if (o.n_ctx > n_ids)
		o.n_ctx = n_ids; /* short calibration text: one chunk */
	/* the held-out text before any work: a bad one fails at once */
	if (o.eval) {
		if (tokenize_file(v, o.eval, &eids, &n_eids, &err))
			goto out;
		if (n_eids < o.n_ctx) {
			ntx_err_set(&err, NTX_EINVAL,
				    "%s: the evaluation text has %d tokens, fewer than one chunk of %d (give a longer text or a smaller -c)",
				    o.eval, n_eids, o.n_ctx);
			goto out;
		}
	}
	memset(&eo, 0, sizeof eo);
	eo.backend = o.backend;
	eo.n_ctx = o.n_ctx;
	eo.n_threads = o.n_threads;
	eo.plan = plan;
	eo.interrupt = &interrupted;
	eo.collect_cos = 1;
	e = ntx_engine_new(m, &eo, &err);
	if (!e)
		goto out;
	{
		struct ntx_engine_stats es;

		ntx_engine_get_stats(e, &es);
		if (!o.quiet && es.fell_back_to_cpu)
			fprintf(stderr, PROG ": %s: using the CPU\n", es.backend_note);
	}

	/* calibration: cosine per layer over the whole text */
	pr.what = "calibration";
	if (ntx_perplexity(e, ids, n_ids, o.n_ctx, ntx_vocab_bos(v), NULL, NULL, NULL, progress,
			   &pr, &base, &err))
		goto out;
	cos = calloc((size_t)L, sizeof *cos);
	cstd = calloc((size_t)L, sizeof *cstd);
	cn = calloc((size_t)L, sizeof *cn);
	sets = calloc(3 * MAX_SETS + 1, sizeof *sets);
	mask = calloc((size_t)L, 1);
	if (!cos || !cstd || !cn || !sets || !mask) {
		ntx_err_set(&err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	{
		const struct ntx_cos_stats *cs = ntx_engine_cos_stats(e);

		for (l = 0; l < L; l++) {
			double mean = cs[l].n ? cs[l].sum / cs[l].n : 0;
			double var = cs[l].n ? cs[l].sum_sq / cs[l].n - mean * mean : 0;

			cos[l] = mean;
			cstd[l] = sqrt(var > 0 ? var : 0);
			cn[l] = cs[l].n;
		}
	}

	/* candidate sets */
	{
		int order[1024], n_cand = 0;

		for (l = 0; l < L && l < 1024; l++) {
			if (!o.allow_ends && (l == 0 || l == L - 1))
				continue;
			if (plan && plan->layers[l].skip)
				continue; /* the plan skips it always: not a candidate */
			order[n_cand++] = l;
		}
		g_cos = cos;
		qsort(order, (size_t)n_cand, sizeof *order, cmp_desc_g);
		for (i = 0; i < o.n_counts; i++) {
			struct cset *s = &sets[n_sets];
			int k = o.counts[i] < n_cand ? o.counts[i] : n_cand, j, dup = 0;

			/* sizes past the candidates collapse into one set: once */
			for (j = 0; j < n_sets; j++)
				dup |= !strcmp(sets[j].method, "calibrated") && sets[j].n == k;
			if (dup || k == 0)
				continue;
			s->method = "calibrated";
			s->n = k;
			memcpy(s->layers, order, (size_t)k * sizeof(int));
			qsort(s->layers, (size_t)k, sizeof(int), cmp_int);
			n_sets++;
			if (o.naive) {
				struct cset *nv = &sets[n_sets++];
				int top = o.allow_ends ? L - 1 : L - 2, j;

				nv->method = "naive_last";
				nv->n = 0;
				for (j = top; nv->n < k && j >= (o.allow_ends ? 0 : 1); j--)
					if (!plan || !plan->layers[j].skip)
						nv->layers[nv->n++] = j;
				qsort(nv->layers, (size_t)nv->n, sizeof(int), cmp_int);
			}
		}
		if (o.have_threshold) {
			struct cset *s = &sets[n_sets++];

			s->method = "threshold";
			for (i = 0; i < n_cand; i++)
				if (cos[order[i]] >= o.threshold)
					s->layers[s->n++] = order[i];
			qsort(s->layers, (size_t)s->n, sizeof(int), cmp_int);
		}
	}

	/* evaluation on held-out text */
	if (o.eval) {

		ref = tmpfile();
		if (!ref) {
			ntx_err_errno(&err, errno, "temporary file");
			goto out;
		}
		pr.what = "eval full model";
		if (ntx_perplexity(e, eids, n_eids, o.n_ctx, ntx_vocab_bos(v), NULL, ref, NULL,
				   progress, &pr, &full_eval, &err))
			goto out;
		for (i = 0; i < n_sets; i++) {
			char what[64];
			int j;

			/* the set, plus what the plan skips anyway */
			for (j = 0; j < L; j++)
				mask[j] = plan && plan->layers[j].skip;
			for (j = 0; j < sets[i].n; j++)
				mask[sets[i].layers[j]] = 1;
			rewind(ref);
			snprintf(what, sizeof what, "eval %s %d", sets[i].method, sets[i].n);
			pr.what = what;
			if (ntx_perplexity(e, eids, n_eids, o.n_ctx, ntx_vocab_bos(v), mask, NULL, ref,
					   progress, &pr, &sets[i].r, &err))
				goto out;
			sets[i].evaluated = 1;
		}
	}

	/* the document */
	doc = json_pack("{s:s, s:i, s:{s:s, s:s, s:i}, s:{s:s, s:i, s:i, s:f}}", "format",
			"ntx.skip", "version", 1, "model", "path", o.model, "fingerprint",
			m->fingerprint_hex, "n_layer", L, "calibration", "file",
			o.calib ? o.calib : "-", "tokens", n_ids, "ctx", o.n_ctx, "ppl", base.ppl);
	jl = json_array();
	for (l = 0; l < L; l++) /* not listed: layers never evaluated (the plan's skip set) */
		if (cn[l] > 0)
			json_array_append_new(jl, json_pack("{s:i, s:f, s:f, s:I}", "index", l,
							    "cos_mean", cos[l], "cos_std", cstd[l],
							    "n_tokens", (json_int_t)cn[l]));
	json_object_set_new(doc, "layers", jl);
	{
		/* "skip": the threshold set if asked, else the largest calibrated set */
		json_t *sk = json_array();
		const struct cset *pick = NULL;

		for (i = 0; i < n_sets; i++) {
			if (!strcmp(sets[i].method, "threshold"))
				pick = &sets[i];
			else if (!o.have_threshold && !strcmp(sets[i].method, "calibrated") &&
				 (!pick || sets[i].n > pick->n))
				pick = &sets[i];
		}
		for (i = 0; pick && i < pick->n; i++)
			json_array_append_new(sk, json_integer(pick->layers[i]));
		json_object_set_new(doc, "skip", sk);
	}
	js = json_array();
	for (i = 0; i < n_sets; i++)
		json_array_append_new(js, set_json(&sets[i]));
	json_object_set_new(doc, "sets", js);
	if (o.eval)
		json_object_set_new(doc, "eval",
				    json_pack("{s:s, s:i, s:f, s:f}", "file", o.eval, "tokens", n_eids,
					      "full_ppl", full_eval.ppl, "full_ppl_err",
					      full_eval.ppl_err));
	{
		int bad, e;

		errno = 0;
		bad = json_dumpf(doc, of.f, JSON_INDENT(2)) || fputc('\n', of.f) == EOF ||
		      fflush(of.f);
		e = errno;
		if (of.f == stdout) {
			stdout_closed = 1;
			if (fclose(stdout) && !bad) {
				bad = 1;
				e = errno;
			}
			of.f = NULL;
		}
		if (bad) {
			ntx_err_errno(&err, e ? e : EIO, "%s", o.out && strcmp(o.out, "-") ? o.out :
				      "writing output");
			goto out;
		}
		if (ntx_outfile_commit(&of, &err))
			goto out;
	}
	rc = 0;
out:
	ntx_outfile_abort(&of);
	if (rc)
		rc = fail(&err);
	json_decref(doc);
	if (ref)
		fclose(ref);
	free(mask);
	free(sets);
	free(cos);
	free(cstd);
	free(cn);
	free(ids);
	free(eids);
	ntx_engine_free(e);
	ntx_vocab_free(v);
	ntx_plan_free(plan);
	ntx_model_close(m);
	if (!stdout_closed && fclose(stdout) && rc == 0) {
		fprintf(stderr, PROG ": writing output: %s\n", strerror(errno));
		rc = 1;
	}
	return rc;
}
