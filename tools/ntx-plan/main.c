/* ntx-plan - decide where every layer of a model lives (vram, ram, disk) and
 * where it is computed (gpu, cpu); write the plan as JSON.
 *
 *   ntx-plan [options] MODEL.gguf | INSPECT.json | -
 *   ntx-plan --check PLAN.json [MODEL.gguf]
 *
 * Exit status: 0 ok, 1 runtime error, 2 usage, 3 the model does not fit. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ntx.h"
#include "tool.h"

static const char *prog = "ntx-plan";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [options] MODEL.gguf | INSPECT.json | -\n"
		"       %s --check PLAN.json [MODEL.gguf]\n"
		"\n"
		"Decide where every layer lives (vram, ram, disk) and where it is computed\n"
		"(gpu, cpu); print the plan as JSON (doc/plan-json.md). '-' reads ntx-inspect\n"
		"JSON from stdin.\n"
		"\n"
		"Budgets (default: detected):\n"
		"      --vram-budget SIZE  device memory the plan may use, margin included\n"
		"                          (default: free VRAM; 0 = no GPU: a CPU-only plan)\n"
		"      --ram-budget SIZE   host memory (default: MemAvailable - 2 GiB)\n"
		"      --disk-budget SIZE  space for the pack file (default: free space there)\n"
		"      --reserve SIZE      VRAM safety margin (default 512M)\n"
		"      --gpu N             GPU index (default 0)\n"
		"      --pack PATH         pack file for disk layers (default MODEL.ntxp)\n"
		"Run parameters:\n"
		"  -c, --ctx N             context length (default min(n_ctx_train, 4096))\n"
		"      --kv-type f16|f32   KV cache type (default f16)\n"
		"      --parallel N        sequences decoded together (default 1)\n"
		"      --ubatch N          max tokens per step (default 512)\n"
		"      --ring-slots N      device buffers for streamed layers (default: 3 or 2, the faster plan)\n"
		"Bandwidths in GB/s (default: --probe's, else the probe cache's, else assumed):\n"
		"      --h2d-gbps X        pinned host-to-device copy (default: from the PCIe\n"
		"                          link, else 25)\n"
		"      --disk-gbps X       O_DIRECT reads (default 2)\n"
		"      --cpu-gbps X        CPU GEMV weight bytes (default 4 per core, max 80)\n"
		"      --gpu-gbps X        GPU GEMV on resident weights (default 2000)\n"
		"      --cpu-batch-gbps X  CPU matmul over a batch, weight bytes x tokens\n"
		"                          (default 20 per core)\n"
		"      --probe             measure H2D, disk and CPU rates on this machine and\n"
		"                          store them in the probe cache, which later plans\n"
		"                          read (~/.cache/ntx/probe.json, see ntx-plan(1))\n"
		"      --no-probe-cache    neither read nor write the probe cache\n"
		"Placement:\n"
		"      --executor P        auto (default), gpu (stream every non-resident\n"
		"                          layer) or cpu (compute them all on the CPU)\n"
		"      --skip LIST|FILE    remove layers (\"3,5,10-12\" or an ntx.skip file)\n"
		"      --skip-set N        use set N of the skip file's \"sets\"\n"
		"      --scores FILE       keep the most important layers (ntx.skip \"layers\"\n"
		"                          cos_mean, lower = more important) in VRAM\n"
		"      --vram-experts N    mixture of experts: keep N experts of each layer in\n"
		"                          VRAM and the rest in RAM, computed by the CPU while\n"
		"                          the GPU runs the layer's other parts (0: every\n"
		"                          expert on the CPU, as llama.cpp --cpu-moe; default:\n"
		"                          this split when it beats placing whole layers)\n"
		"      --expert-stats FILE keep the most chosen experts in VRAM (routing counts\n"
		"                          from ntx-run --expert-stats on calibration text)\n"
		"Speculative decoding:\n"
		"      --draft FILE        reserve VRAM for this draft model (resident) and\n"
		"                          plan the target for verification passes of K+1\n"
		"                          tokens (K: the best predicted, or --draft-k)\n"
		"      --draft-k N         draft length to plan for (1..64)\n"
		"      --accept P          acceptance the prediction assumes (default 0.7)\n"
		"Output:\n"
		"  -o, --output FILE       write the plan to FILE (default stdout)\n"
		"      --explain           print a human summary on stderr\n"
		"      --check             validate (and re-account) a plan; with MODEL, check\n"
		"                          that the plan was made for it\n"
		"  -q, --quiet             no warnings\n"
		"  -v, --verbose           say what was detected\n"
		"  -h, --help              this help\n"
		"  -V, --version           version\n"
		"\n"
		"Exit status: 0 ok, 1 error, 2 usage, 3 the model does not fit the budgets.\n",
		prog, prog);
}

static const struct tool T = { "ntx-plan", "Try 'ntx-plan --help' for more information.\n" };

enum {
	O_GPU = 256, O_PACK, O_KV, O_PARALLEL, O_UBATCH,
	O_RING, O_H2D, O_DISKBW, O_CPU, O_CPUB, O_GPUBW, O_PROBE, O_EXECUTOR, O_SKIP, O_SKIPSET,
	O_SCORES, O_EXPLAIN, O_CHECK, O_DRAFT, O_DRAFTK, O_ACCEPT, O_NOCACHE, O_VEXP, O_XSTATS
};

static const struct option longopts[] = {
	TOOL_OPTION_BUDGETS,
	{ "gpu", required_argument, NULL, O_GPU },
	{ "pack", required_argument, NULL, O_PACK },
	{ "ctx", required_argument, NULL, 'c' },
	{ "kv-type", required_argument, NULL, O_KV },
	{ "parallel", required_argument, NULL, O_PARALLEL },
	{ "ubatch", required_argument, NULL, O_UBATCH },
	{ "ring-slots", required_argument, NULL, O_RING },
	{ "h2d-gbps", required_argument, NULL, O_H2D },
	{ "disk-gbps", required_argument, NULL, O_DISKBW },
	{ "cpu-gbps", required_argument, NULL, O_CPU },
	{ "cpu-batch-gbps", required_argument, NULL, O_CPUB },
	{ "gpu-gbps", required_argument, NULL, O_GPUBW },
	{ "probe", no_argument, NULL, O_PROBE },
	{ "no-probe-cache", no_argument, NULL, O_NOCACHE },
	{ "executor", required_argument, NULL, O_EXECUTOR },
	{ "skip", required_argument, NULL, O_SKIP },
	{ "skip-set", required_argument, NULL, O_SKIPSET },
	{ "scores", required_argument, NULL, O_SCORES },
	{ "vram-experts", required_argument, NULL, O_VEXP },
	{ "expert-stats", required_argument, NULL, O_XSTATS },
	{ "draft", required_argument, NULL, O_DRAFT },
	{ "draft-k", required_argument, NULL, O_DRAFTK },
	{ "accept", required_argument, NULL, O_ACCEPT },
	TOOL_OPTION_OUTPUT,
	{ "explain", no_argument, NULL, O_EXPLAIN },
	{ "check", no_argument, NULL, O_CHECK },
	TOOL_OPTION_QUIET, TOOL_OPTION_VERBOSE, TOOL_OPTION_HELP, TOOL_OPTION_VERSION,
	{ NULL, 0, NULL, 0 },
};

/* ---- options ---- */

struct args {
	struct ntx_planner_params pp;
	const char *out, *skip_arg;
	int skip_set, explain, check;
};

static void on_note(void *user, const char *line)
{
	(void)user;
	fprintf(stderr, "%s: %s\n", prog, line);
}

/* One option outside tool_common: 0, or the usage error's status. */
static int take_opt(int c, const char *arg, struct args *a)
{
	static const char *const gbps[] = { "--h2d-gbps", "--disk-gbps", "--cpu-gbps",
					    "--cpu-batch-gbps", "--gpu-gbps" };
	struct ntx_planner_params *p = &a->pp;
	double *bw[] = { &p->h2d_gbps, &p->disk_gbps, &p->cpu_gbps, &p->cpu_batch_gbps,
			 &p->gpu_gbps };

	switch (c) {
	case O_GPU: return tool_int(&T, "--gpu", arg, 0, 1023, &p->gpu_index);
	case O_PACK: p->pack_path = arg; return 0;
	case 'c': return tool_int(&T, "--ctx", arg, 1, 1 << 24, &p->n_ctx);
	case O_KV:
		if (strcmp(arg, "f16") == 0)
			p->kv_type = NTX_KV_CACHE_F16;
		else if (strcmp(arg, "f32") == 0)
			p->kv_type = NTX_KV_CACHE_F32;
		else
			return tool_usage(&T, "--kv-type: '%s' is not f16 or f32", arg);
		return 0;
	case O_PARALLEL: return tool_int(&T, "--parallel", arg, 1, 4096, &p->n_seq);
	case O_UBATCH: return tool_int(&T, "--ubatch", arg, 1, 65536, &p->n_ubatch);
	case O_DRAFT: p->draft_path = arg; return 0;
	case O_DRAFTK: return tool_int(&T, "--draft-k", arg, 1, 64, &p->draft_k);
	case O_XSTATS: p->expert_stats_path = arg; return 0;
	case O_VEXP: return tool_int(&T, "--vram-experts", arg, 0, 1024, &p->vram_experts);
	case O_ACCEPT: return tool_double(&T, "--accept", arg, 0.01, 0.99, &p->draft_accept);
	case O_RING: return tool_int(&T, "--ring-slots", arg, 2, 64, &p->ring_slots);
	case O_H2D: case O_DISKBW: case O_CPU: case O_CPUB: case O_GPUBW:
		return tool_double(&T, gbps[c - O_H2D], arg, 1e-6, 1e6, bw[c - O_H2D]);
	case O_PROBE: p->probe = 1; return 0;
	case O_NOCACHE: p->probe_cache = 0; return 0;
	case O_EXECUTOR:
		if (strcmp(arg, "auto") == 0)
			p->executor = NTX_EXECUTOR_AUTO;
		else if (strcmp(arg, "gpu") == 0)
			p->executor = NTX_EXECUTOR_GPU;
		else if (strcmp(arg, "cpu") == 0)
			p->executor = NTX_EXECUTOR_CPU;
		else
			return tool_usage(&T, "--executor: '%s' is not auto, gpu or cpu", arg);
		return 0;
	case O_SKIP: a->skip_arg = arg; return 0;
	case O_SKIPSET: return tool_int(&T, "--skip-set", arg, 0, 1 << 20, &a->skip_set);
	case O_SCORES: p->scores_path = arg; return 0;
	case O_EXPLAIN: a->explain = 1; return 0;
	case O_CHECK: a->check = 1; return 0;
	default: return tool_usage_tail(&T);
	}
}

/* -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct args *a)
{
	struct tool_common tc;
	int c, r;

	memset(a, 0, sizeof *a);
	ntx_planner_params_init(&a->pp);
	a->skip_set = -1;
	tool_common_init(&tc, 1024);
	while ((c = getopt_long(argc, argv, "c:o:qvhV", longopts, NULL)) != -1) {
		if ((r = tool_common_opt(&T, c, optarg, &tc)) != TOOL_NOT_COMMON) {
			if (r)
				return r;
		} else if (c == 'h') {
			usage(stdout);
			return tool_close_stdout(&T, 0);
		} else if (c == 'V') {
			tool_version(&T);
			return tool_close_stdout(&T, 0);
		} else if ((r = take_opt(c, optarg, a)) != 0) {
			return r;
		}
	}
	a->pp.vram_budget = tc.vram_budget;
	a->pp.ram_budget = tc.ram_budget;
	a->pp.disk_budget = tc.disk_budget;
	a->pp.reserve = tc.reserve;
	a->pp.notes = (tc.quiet ? 0u : NTX_NOTE_WARNINGS) | (tc.verbose ? NTX_NOTE_DETECTED : 0u);
	a->pp.note = on_note;
	a->out = tc.output;
	return -1;
}

/* ---- input ---- */

/* All of standard input; NULL with errno set. */
static char *read_stdin(size_t *len)
{
	size_t cap = 1 << 16, n = 0, r;
	char *buf = malloc(cap), *t;

	while (buf) {
		r = fread(buf + n, 1, cap - n, stdin);
		n += r;
		if (n < cap) {
			if (ferror(stdin)) {
				free(buf);
				errno = errno ? errno : EIO;
				return NULL;
			}
			*len = n;
			return buf;
		}
		t = cap > ((size_t)1 << 32) ? NULL : realloc(buf, cap *= 2);
		if (!t)
			free(buf);
		buf = t;
	}
	errno = ENOMEM;
	return NULL;
}

/* The model description of a GGUF, an ntx-inspect document or "-": 0, or
 * the exit status after the message. */
static int open_desc(const char *in, struct ntx_model_desc **d, struct ntx_error *e)
{
	char *text;
	size_t len = 0;
	int rc;

	if (strcmp(in, "-") != 0)
		return ntx_model_desc_open(in, d, e) ? tool_fail(&T, NULL, e) : 0;
	errno = 0;
	if (!(text = read_stdin(&len))) {
		fprintf(stderr, "%s: -: %s\n", prog, strerror(errno));
		return 1;
	}
	rc = ntx_model_desc_from_text(text, len, "<stdin>", d, e) ? tool_fail(&T, NULL, e) : 0;
	free(text);
	return rc;
}

/* ---- output ---- */

/* text to out (NULL or "-": stdout, else a file replaced when complete). */
static int write_out(const char *out, const char *text, struct ntx_error *e)
{
	size_t n = strlen(text);
	struct ntx_output *o;

	if (!out || strcmp(out, "-") == 0) {
		errno = 0;
		if (fwrite(text, 1, n, stdout) == n && fflush(stdout) == 0)
			return 0;
		fprintf(stderr, "%s: stdout: %s\n", prog, strerror(errno ? errno : EIO));
		return 1;
	}
	if (ntx_output_open(out, &o, e))
		return tool_fail(&T, NULL, e);
	if (ntx_output_write(o, text, n, e)) {
		ntx_output_abort(o);
		return tool_fail(&T, NULL, e);
	}
	return ntx_output_commit(o, e) ? tool_fail(&T, NULL, e) : 0;
}

/* The plan's paths rebased for out, the summary on stderr (--explain), the
 * JSON to out: 0 or the exit status after the message. */
static int emit(struct ntx_placement *pl, const struct args *a, struct ntx_error *e)
{
	char *json = NULL, *text = NULL;
	int rc;

	if (ntx_placement_rebase(pl, a->out, e) || ntx_placement_to_json(pl, &json, e) ||
	    (a->explain && ntx_placement_explain(pl, &text, e))) {
		ntx_free(json);
		return tool_fail(&T, NULL, e);
	}
	if (text)
		fputs(text, stderr);
	rc = write_out(a->out, json, e);
	ntx_free(text);
	ntx_free(json);
	return rc;
}

/* ---- the two modes ---- */

/* --check PLAN [MODEL] */
static int check(const struct args *a, int n, char **in, struct ntx_error *e)
{
	struct ntx_placement *pl = NULL;
	struct ntx_lm *lm = NULL;
	int rc;

	if (n < 1 || n > 2)
		return tool_usage(&T, "--check needs PLAN.json [MODEL.gguf]");
	if (ntx_placement_read(in[0], &pl, e) || (n == 2 && ntx_lm_open(in[1], &lm, e)))
		rc = tool_fail(&T, NULL, e);
	else if (n == 2 && ntx_placement_check(pl, lm, e))
		rc = tool_fail(&T, in[0], e);
	else
		rc = emit(pl, a, e);
	ntx_lm_close(lm);
	ntx_placement_free(pl);
	return rc;
}

static int plan(struct args *a, int n, char **in, struct ntx_error *e)
{
	struct ntx_model_desc *d = NULL;
	struct ntx_placement *pl = NULL;
	int *skip = NULL, rc;

	if (n != 1)
		return tool_usage(&T, "%s", n ? "expected one input, got several" :
				  "missing input (MODEL.gguf, INSPECT.json or -)");
	if (a->skip_set >= 0 && !a->skip_arg)
		return tool_usage(&T, "--skip-set needs --skip FILE");
	if ((rc = open_desc(in[0], &d, e)) != 0)
		return rc;
	if (a->skip_arg &&
	    ntx_model_desc_skip(d, a->skip_arg, a->skip_set, &skip, &a->pp.n_skip, e)) {
		rc = ntx_error_status(e) == NTX_STATUS_INVALID ?
			     tool_usage(&T, "--skip: %s", ntx_error_message(e)) : tool_fail(&T, NULL, e);
	} else {
		a->pp.skip = skip;
		rc = ntx_placement_plan(d, &a->pp, &pl, e) ? tool_fail(&T, NULL, e) : emit(pl, a, e);
	}
	ntx_placement_free(pl);
	ntx_free(skip);
	ntx_model_desc_free(d);
	return rc;
}

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
	if (a.check)
		rc = check(&a, argc - optind, argv + optind, e);
	else
		rc = plan(&a, argc - optind, argv + optind, e);
	ntx_error_free(e);
	return tool_close_stdout(&T, rc);
}
