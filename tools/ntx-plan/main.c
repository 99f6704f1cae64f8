/* ntx-plan - decide where every layer of a model lives (vram, ram, disk) and
 * where it is computed (gpu, cpu); write the plan as JSON.
 *
 *   ntx-plan [options] MODEL.gguf | INSPECT.json | -
 *   ntx-plan --check PLAN.json [MODEL.gguf]
 *
 * Exit status: 0 ok, 1 runtime error, 2 usage, 3 the model does not fit. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "parse.h"
#include "plan.h"
#include "skipset.h"
#include "fileio.h"
#include "tool.h"
#include "version.h"


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
		"Bandwidths in GB/s (default: measured with --probe, else assumed):\n"
		"      --h2d-gbps X        pinned host-to-device copy (default 25)\n"
		"      --disk-gbps X       O_DIRECT reads (default 2)\n"
		"      --cpu-gbps X        CPU GEMV weight bytes (default 4 per core, max 80)\n"
		"      --gpu-gbps X        GPU GEMV on resident weights (default 2000)\n"
		"      --cpu-batch-gbps X  CPU matmul over a batch, weight bytes x tokens\n"
		"                          (default 20 per core)\n"
		"      --probe             measure H2D, disk and CPU rates on this machine\n"
		"Placement:\n"
		"      --executor P        auto (default), gpu (stream every non-resident\n"
		"                          layer) or cpu (compute them all on the CPU)\n"
		"      --skip LIST|FILE    remove layers (\"3,5,10-12\" or an ntx.skip file)\n"
		"      --skip-set N        use set N of the skip file's \"sets\"\n"
		"      --scores FILE       keep the most important layers (ntx.skip \"layers\"\n"
		"                          cos_mean, lower = more important) in VRAM\n"
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

static int exit_code(const struct ntx_err *err)
{
	return err->code == NTX_ENOFIT ? 3 : 1;
}

enum {
	O_GPU = 256, O_PACK, O_KV, O_PARALLEL, O_UBATCH,
	O_RING, O_H2D, O_DISKBW, O_CPU, O_CPUB, O_GPUBW, O_PROBE, O_EXECUTOR, O_SKIP, O_SKIPSET,
	O_SCORES, O_EXPLAIN, O_CHECK, O_DRAFT, O_DRAFTK, O_ACCEPT
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
	{ "executor", required_argument, NULL, O_EXECUTOR },
	{ "skip", required_argument, NULL, O_SKIP },
	{ "skip-set", required_argument, NULL, O_SKIPSET },
	{ "scores", required_argument, NULL, O_SCORES },
	{ "draft", required_argument, NULL, O_DRAFT },
	{ "draft-k", required_argument, NULL, O_DRAFTK },
	{ "accept", required_argument, NULL, O_ACCEPT },
	TOOL_OPTION_OUTPUT,
	{ "explain", no_argument, NULL, O_EXPLAIN },
	{ "check", no_argument, NULL, O_CHECK },
	TOOL_OPTION_QUIET, TOOL_OPTION_VERBOSE, TOOL_OPTION_HELP, TOOL_OPTION_VERSION,
	{ NULL, 0, NULL, 0 },
};

/* Is path a GGUF file (by its magic)? -1 when it cannot be opened. */
static int is_gguf(const char *path)
{
	FILE *f = fopen(path, "rb");
	char magic[4];
	int r;

	if (!f)
		return -1;
	r = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
	fclose(f);
	return r;
}

/* Load the model description from a GGUF or ntx-inspect JSON. */
/* --draft: the draft's VRAM and per-token bytes for the planner; its
 * vocabulary size must be the target's. */
static int draft_opts(struct ntx_plan_opts *o, const struct ntx_plan_model *pm,
		      struct ntx_err *err)
{
	struct ntx_model *m = ntx_model_open(o->draft_path, 0, err);
	struct ntx_plan_model dm;
	int n_ctx = o->n_ctx > 0 ? o->n_ctx :
		    pm->n_ctx_train > 0 && pm->n_ctx_train < 4096 ? pm->n_ctx_train : 4096;

	if (!m || ntx_plan_model_from_model(m, &dm, err)) {
		ntx_model_close(m);
		ntx_err_prefix(err, "--draft %s", o->draft_path);
		return -1;
	}
	ntx_model_close(m);
	if (dm.n_vocab != pm->n_vocab) {
		ntx_err_set(err, NTX_EINVAL,
			    "--draft %s: the draft has %lld tokens, the target %lld: a draft must share the target's vocabulary",
			    o->draft_path, (long long)dm.n_vocab, (long long)pm->n_vocab);
		ntx_plan_model_free(&dm);
		return -1;
	}
	ntx_plan_draft_bytes(&dm, n_ctx, o->kv_type, o->n_seq > 0 ? o->n_seq : 1,
			     &o->draft_vram_bytes, &o->draft_token_bytes);
	o->draft_layers = dm.n_layer;
	ntx_plan_model_free(&dm);
	return 0;
}

static int load_model(const char *in, struct ntx_plan_model *pm, struct ntx_model **mout,
		      struct ntx_err *err)
{
	int g = strcmp(in, "-") == 0 ? 0 : is_gguf(in);
	char *text;
	size_t len;
	int rc;

	*mout = NULL;
	if (g < 0)
		return ntx_err_errno(err, errno, "%s", in);
	if (g) {
		struct ntx_model *m = ntx_model_open(in, 0, err);

		if (!m) {
			ntx_err_prefix(err, "%s", in);
			return -1;
		}
		if (ntx_plan_model_from_model(m, pm, err)) {
			ntx_err_prefix(err, "%s", in);
			ntx_model_close(m);
			return -1;
		}
		*mout = m;
		return 0;
	}
	text = ntx_read_text_file(in, &len, err);
	if (!text)
		return -1;
	{ /* neither GGUF nor JSON: say so, as the other tools do */
		size_t i = 0;

		while (i < len && strchr(" \t\r\n", text[i]))
			i++;
		if (i == len || text[i] != '{') {
			const unsigned char *u = (const unsigned char *)text;

			if (len == 0)
				ntx_err_set(err, NTX_EINVAL, "%s: not a GGUF file or inspect JSON (empty)",
					    strcmp(in, "-") == 0 ? "<stdin>" : in);
			else
				ntx_err_set(err, NTX_EINVAL,
					    "%s: not a GGUF file or inspect JSON (starts with %02x %02x %02x %02x)",
					    strcmp(in, "-") == 0 ? "<stdin>" : in, u[0],
					    len > 1 ? u[1] : 0, len > 2 ? u[2] : 0, len > 3 ? u[3] : 0);
			free(text);
			return -1;
		}
	}
	rc = ntx_plan_model_from_inspect(text, len, strcmp(in, "-") == 0 ? "<stdin>" : in, pm, err);
	free(text);
	return rc;
}

/* Write text to path ("-" or NULL = stdout): a file through a temporary
 * name renamed when complete; a device or a FIFO in place (never renamed
 * over). */
static int write_out(const char *path, const char *text, struct ntx_err *err)
{
	size_t n = strlen(text);
	struct ntx_outfile of;

	if (ntx_outfile_open(&of, path, "w", stdout, err))
		return -1;
	errno = 0;
	if (fwrite(text, 1, n, of.f) != n || fflush(of.f)) {
		ntx_err_errno(err, errno ? errno : EIO, "%s", of.f == stdout ? "stdout" : path);
		ntx_outfile_abort(&of);
		return -1;
	}
	return ntx_outfile_commit(&of, err);
}

static int emit(const struct ntx_plan *p, const char *out, int explain, struct ntx_err *err)
{
	char *json = ntx_plan_to_json(p, err);
	int rc;

	if (!json)
		return -1;
	if (explain) {
		char *s = ntx_plan_explain(p);

		if (s)
			fputs(s, stderr);
		free(s);
	}
	rc = write_out(out, json, err);
	free(json);
	return rc;
}

static char *dir_of(const char *path)
{
	const char *sl = strrchr(path, '/');
	char *d;

	if (!sl)
		return strdup(".");
	if (sl == path)
		return strdup("/");
	d = strndup(path, (size_t)(sl - path));
	return d;
}

int main(int argc, char **argv)
{
	struct ntx_plan_opts o;
	struct ntx_plan_hw hw;
	struct ntx_plan_model pm;
	struct ntx_plan *p = NULL;
	struct ntx_model *m = NULL;
	struct ntx_err err = { 0, "" };
	struct tool_common tc;
	const char *out = NULL, *skip_arg = NULL, *scores_path = NULL;
	int explain = 0, check = 0, quiet = 0, verbose = 0, skip_set = -1, c, rc = 1;
	int *skip = NULL, n_skip = 0;
	double *scores = NULL;
	char *pack = NULL, *pack_dir = NULL;
	unsigned what = NTX_HW_ALL;

	ntx_plan_opts_init(&o);
	memset(&pm, 0, sizeof pm);
	tool_common_init(&tc, 1024);
	while ((c = getopt_long(argc, argv, "c:o:qvhV", longopts, NULL)) != -1) {
		double d;
		int v, r;

		if ((r = tool_common_opt(&T, c, optarg, &tc)) != TOOL_NOT_COMMON) {
			if (r)
				return r;
			continue;
		}
		switch (c) {
		case O_GPU:
			if ((r = tool_int(&T, "--gpu", optarg, 0, 1023, &o.gpu_index)) != 0)
				return r;
			break;
		case O_PACK:
			o.pack_path = optarg;
			break;
		case 'c':
			if ((r = tool_int(&T, "--ctx", optarg, 1, 1 << 24, &o.n_ctx)) != 0)
				return r;
			break;
		case O_KV:
			if (strcmp(optarg, "f16") == 0)
				o.kv_type = NTX_KV_F16;
			else if (strcmp(optarg, "f32") == 0)
				o.kv_type = NTX_KV_F32;
			else
				return tool_usage(&T, "--kv-type: '%s' is not f16 or f32", optarg);
			break;
		case O_PARALLEL:
			if ((r = tool_int(&T, "--parallel", optarg, 1, 4096, &o.n_seq)) != 0)
				return r;
			break;
		case O_UBATCH:
			if ((r = tool_int(&T, "--ubatch", optarg, 1, 65536, &o.n_ubatch)) != 0)
				return r;
			break;
		case O_DRAFT:
			o.draft_path = optarg;
			break;
		case O_DRAFTK:
			if ((r = tool_int(&T, "--draft-k", optarg, 1, 64, &o.draft_k)) != 0)
				return r;
			break;
		case O_ACCEPT:
			if ((r = tool_double(&T, "--accept", optarg, 0.01, 0.99, &o.draft_accept)) != 0)
				return r;
			break;
		case O_RING:
			if ((r = tool_int(&T, "--ring-slots", optarg, 2, 64, &o.ring_slots)) != 0)
				return r;
			break;
		case O_H2D:
		case O_DISKBW:
		case O_CPU:
		case O_CPUB:
		case O_GPUBW: {
			static const char *const names[] = { "--h2d-gbps", "--disk-gbps", "--cpu-gbps",
							     "--cpu-batch-gbps", "--gpu-gbps" };

			if ((r = tool_double(&T, names[c - O_H2D], optarg, 1e-6, 1e6, &d)) != 0)
				return r;
			if (c == O_H2D)
				o.h2d_gbps = d;
			else if (c == O_DISKBW)
				o.disk_gbps = d;
			else if (c == O_CPU)
				o.cpu_gbps = d;
			else if (c == O_CPUB)
				o.cpu_batch_gbps = d;
			else
				o.gpu_gbps = d;
			break;
		}
		case O_PROBE:
			o.probe = 1;
			break;
		case O_EXECUTOR:
			if (strcmp(optarg, "auto") == 0)
				o.executor = NTX_POLICY_AUTO;
			else if (strcmp(optarg, "gpu") == 0)
				o.executor = NTX_POLICY_GPU;
			else if (strcmp(optarg, "cpu") == 0)
				o.executor = NTX_POLICY_CPU;
			else
				return tool_usage(&T, "--executor: '%s' is not auto, gpu or cpu", optarg);
			break;
		case O_SKIP:
			skip_arg = optarg;
			break;
		case O_SKIPSET:
			if ((r = tool_int(&T, "--skip-set", optarg, 0, 1 << 20, &v)) != 0)
				return r;
			skip_set = v;
			break;
		case O_SCORES:
			scores_path = optarg;
			break;
		case O_EXPLAIN:
			explain = 1;
			break;
		case O_CHECK:
			check = 1;
			break;
		case 'h':
			usage(stdout);
			return tool_close_stdout(&T, 0);
		case 'V':
			tool_version(&T);
			return tool_close_stdout(&T, 0);
		default:
			return tool_usage_tail(&T);
		}
	}
	o.vram_budget = tc.vram_budget;
	o.ram_budget = tc.ram_budget;
	o.disk_budget = tc.disk_budget;
	o.reserve = tc.reserve;
	out = tc.output;
	quiet = tc.quiet;
	verbose = tc.verbose;

	/* --check PLAN [MODEL] */
	if (check) {
		if (argc - optind < 1 || argc - optind > 2)
			return tool_usage(&T, "--check needs PLAN.json [MODEL.gguf]");
		p = ntx_plan_load(argv[optind], &err);
		if (!p)
			goto fail;
		if (argc - optind == 2) {
			m = ntx_model_open(argv[optind + 1], 0, &err);
			if (!m) {
				ntx_err_prefix(&err, "%s", argv[optind + 1]);
				goto fail;
			}
			if (ntx_plan_check_model(p, m, &err)) {
				ntx_err_prefix(&err, "%s", argv[optind]);
				goto fail;
			}
		}
		if (ntx_plan_rebase(p, out, &err) || emit(p, out, explain, &err))
			goto fail;
		rc = 0;
		goto done;
	}

	if (argc - optind != 1)
		return tool_usage(&T, "%s", argc - optind ? "expected one input, got several" :
				  "missing input (MODEL.gguf, INSPECT.json or -)");
	if (skip_set >= 0 && !skip_arg)
		return tool_usage(&T, "--skip-set needs --skip FILE");
	if (load_model(argv[optind], &pm, &m, &err))
		goto fail;
	if (skip_arg && ntx_skip_parse(skip_arg, pm.n_layer, skip_set, pm.fingerprint, &skip,
					    &n_skip, &err)) {
		if (err.code == NTX_EINVAL) {
			rc = tool_usage(&T, "--skip: %s", err.msg);
			goto done;
		}
		goto fail;
	}
	o.skip = skip;
	o.n_skip = n_skip;
	if (scores_path) {
		if (ntx_scores_load(scores_path, pm.n_layer, pm.fingerprint, &scores, &err))
			goto fail;
		o.scores = scores;
	}

	/* detect only what the overrides leave open */
	pack = o.pack_path ? strdup(o.pack_path) : ntx_plan_default_pack_path(pm.path);
	pack_dir = pack ? dir_of(pack) : NULL;
	if (!pack || !pack_dir) {
		ntx_err_set(&err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	if (!o.probe) {
		if (o.vram_budget >= 0)
			what &= ~(unsigned)NTX_HW_GPU;
		if (o.ram_budget >= 0)
			what &= ~(unsigned)NTX_HW_RAM;
		if (o.disk_budget >= 0)
			what &= ~(unsigned)NTX_HW_DISK;
		if (o.cpu_gbps > 0 && o.cpu_batch_gbps > 0)
			what &= ~(unsigned)NTX_HW_CPU;
	}
	ntx_hw_detect_some(&hw, o.gpu_index, pack_dir, what);
	if (!quiet && (what & NTX_HW_GPU) && !hw.gpu_present && hw.gpu_count > 0)
		fprintf(stderr, "%s: warning: GPU %d not found (%d device%s); planning without a GPU\n",
			prog, o.gpu_index, hw.gpu_count, hw.gpu_count == 1 ? "" : "s");
	if (!quiet && (what & NTX_HW_DISK) && !(hw.detected & NTX_HW_DISK))
		fprintf(stderr, "%s: warning: %s: cannot see free space (disk budget 0)\n", prog,
			pack_dir);
	if (o.probe) {
		struct ntx_err perr = { 0, "" };
		struct ntx_tunables tun; /* NTX_CPU_SCALAR, NTX_NO_AMX */

		ntx_tunables_from_env(&tun);
		if (ntx_hw_probe(&hw, pack_dir, hw.cpu_cores, &tun, &perr) && !quiet)
			fprintf(stderr, "%s: warning: %s\n", prog, perr.msg);
	}
	if (verbose) {
		char a[32], b[32], d[32];

		if (hw.detected & NTX_HW_GPU)
			fprintf(stderr, "%s: GPU: %s\n", prog,
				hw.gpu_present ? hw.gpu_name : "none");
		if (hw.gpu_present)
			fprintf(stderr, "%s: VRAM: %s free of %s\n", prog,
				ntx_fmt_size(hw.vram_free, a, 32), ntx_fmt_size(hw.vram_total, b, 32));
		if (hw.detected & NTX_HW_RAM)
			fprintf(stderr, "%s: RAM available: %s\n", prog,
				ntx_fmt_size(hw.ram_available, d, 32));
		if (hw.detected & NTX_HW_CPU)
			fprintf(stderr, "%s: CPU cores: %d\n", prog, hw.cpu_cores);
		if (hw.detected & NTX_HW_DISK)
			fprintf(stderr, "%s: free at %s: %s\n", prog, pack_dir,
				ntx_fmt_size(hw.disk_free, a, 32));
		/* two CPU rates, each said for what: weight bytes per second of
		 * one token's products, and weight bytes x tokens per second of
		 * a batch's */
		if (hw.probed)
			fprintf(stderr, "%s: rates: H2D %g GB/s (%s), disk %g GB/s (%s), CPU %g GB/s for one token (%s), CPU %g GB/s x tokens for %d tokens at once (%s)\n",
				prog, hw.h2d_gbps, ntx_src_name(hw.h2d_src), hw.disk_gbps,
				ntx_src_name(hw.disk_src), hw.cpu_gbps, ntx_src_name(hw.cpu_src),
				hw.cpu_batch_gbps, NTX_PLAN_CPU_BATCH_PROBE,
				ntx_src_name(hw.cpu_batch_src));
	}
	o.pack_path = pack;
	if (o.draft_path && draft_opts(&o, &pm, &err))
		goto fail;
	if (ntx_plan_compute(&pm, &hw, &o, &p, &err))
		goto fail;
	if (ntx_plan_rebase(p, out, &err) || emit(p, out, explain, &err))
		goto fail;
	rc = 0;
	goto done;
fail:
	fprintf(stderr, "%s: %s\n", prog, err.msg);
	rc = exit_code(&err);
done:
	ntx_plan_free(p);
	ntx_plan_model_free(&pm);
	ntx_model_close(m);
	free(skip);
	free(scores);
	free(pack);
	free(pack_dir);
	if (fclose(stdout) && rc == 0) {
		fprintf(stderr, "%s: stdout: %s\n", prog, strerror(errno));
		rc = 1;
	}
	return rc;
}
