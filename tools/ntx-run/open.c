/* open.c - a mode's model, placement and context over ntx.h: the plan
 * (--plan, else planned in memory for the hardware found now), the skip
 * set, the context with the options' backend, sizes and read mode, the
 * draft model and speculative decoding of --draft and --lookup, and the
 * lines ntx-run prints about them. The modes ported so far use it
 * (--perplexity, --batch, --bench); the others still open the internals
 * (ctx.c, run_open). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

struct ntx_ctx *volatile run_sig_ctx;

/* "ntx-run: [context: ]message" unless interrupted; the exit status. */
static int fail(const char *context, const struct ntx_error *e)
{
	enum ntx_status s = ntx_error_status(e);

	if (s == NTX_STATUS_INTERRUPTED)
		return 130;
	if (context)
		fprintf(stderr, PROG ": %s: %s\n", context, ntx_error_message(e));
	else
		fprintf(stderr, PROG ": %s\n", ntx_error_message(e));
	return s == NTX_STATUS_NOFIT ? 3 : 1;
}

static const char *backend_name(enum ntx_backend_choice b)
{
	return b == NTX_USE_CUDA ? "cuda" : b == NTX_USE_CPU ? "cpu" : "auto";
}

/* Without --plan: choose the backend and plan in memory from the detected
 * hardware (and --vram-budget/--ram-budget/--executor). On the CPU the plan
 * (no VRAM, every layer on the CPU) checks that the model fits in RAM: a
 * model larger than RAM (or --ram-budget) is refused with exit 3 and the
 * commands that make a plan and a pack, never read until the kernel kills
 * the process; with --pack its disk layers stream from the pack, else the
 * plan is dropped and the whole model runs from the GGUF map. */
static int plan_in_memory(struct run_opts *o, struct run_api *a, const char *mpath,
			  const int *skip, int n_skip, struct ntx_error *e)
{
	struct ntx_model_desc *d = NULL;
	struct ntx_planner_params pp;
	struct ntx_placement_info pi;
	char why[256] = "";
	int cpu = o->backend == NTX_USE_CPU;

	if (!cpu && !ntx_gpu_check(o->gpu_index, why, sizeof why)) {
		if (o->backend == NTX_USE_CUDA) {
			fprintf(stderr, PROG ": cuda: %s\n", why);
			return 1;
		}
		if (!o->quiet)
			fprintf(stderr, PROG ": %s: using the CPU\n", why);
		o->backend = NTX_USE_CPU;
		cpu = 1;
	}
	ntx_planner_params_init(&pp);
	pp.notes = 0;
	pp.n_ctx = o->n_ctx;
	pp.kv_type = o->kv_type;
	pp.n_seq = o->batch ? o->parallel : 1;
	pp.gpu_index = o->gpu_index;
	pp.pack_path = o->pack_path;
	pp.vram_budget = o->vram_budget;
	pp.ram_budget = o->ram_budget;
	pp.executor = !o->executor || !strcmp(o->executor, "auto") ? NTX_EXECUTOR_AUTO :
		      !strcmp(o->executor, "gpu") ? NTX_EXECUTOR_GPU : NTX_EXECUTOR_CPU;
	if (cpu) {
		pp.vram_budget = 0;
		pp.executor = NTX_EXECUTOR_CPU;
	}
	pp.skip = skip;
	pp.n_skip = n_skip;
	pi.size = sizeof pi;
	if (ntx_model_desc_open(mpath, &d, e) || ntx_placement_plan(d, &pp, &a->pl, e) ||
	    ntx_placement_info(a->pl, &pi, e)) {
		ntx_model_desc_free(d);
		return fail(NULL, e);
	}
	ntx_model_desc_free(d);
	if (pi.n_disk && !o->pack_path) {
		fprintf(stderr, PROG ": the model does not fit in %s; make a plan and a pack: ntx-plan %s%s%s%s -o plan.json && ntx-pack %s --plan plan.json, then ntx-run --plan plan.json\n",
			cpu ? "RAM" : "VRAM and RAM", mpath, cpu ? " --vram-budget 0" : "",
			o->ram_budget_arg ? " --ram-budget " : "",
			o->ram_budget_arg ? o->ram_budget_arg : "", mpath);
		return 3;
	}
	if (o->verbose)
		fprintf(stderr, PROG ": planned in memory%s: predicted %.2f tok/s\n",
			cpu ? " (CPU)" : "", pi.predicted_tok_per_s);
	if (cpu && !pi.n_disk) { /* everything in RAM: the plain CPU engine */
		ntx_placement_free(a->pl);
		a->pl = NULL;
	}
	return 0;
}

/* The skip set of --skip or --skip-layers (*skip freed with ntx_free). */
static int skip_set(const struct run_opts *o, const char *mpath, int n_layer, int **skip,
		    int *n, struct ntx_error *e)
{
	struct ntx_model_desc *d = NULL;
	int rc = 0;

	*skip = NULL;
	*n = 0;
	if (o->skip_layers)
		return ntx_arg_layers(o->skip_layers, n_layer, skip, n, e) ? fail("--skip-layers", e)
									  : 0;
	if (!o->skip_file)
		return 0;
	if (ntx_model_desc_open(mpath, &d, e) || ntx_model_desc_skip(d, o->skip_file, -1, skip, n, e))
		rc = fail(NULL, e);
	ntx_model_desc_free(d);
	return rc;
}

/* "ntx-run: --draft PATH: message"; the exit status. */
static int draft_fail(const struct run_opts *o, const struct ntx_error *e)
{
	char context[1024];

	snprintf(context, sizeof context, "--draft %s", o->draft_path);
	return fail(context, e);
}

/* --draft: the draft model, refused before any work unless it shares the
 * target's vocabulary. */
static int open_draft(const struct run_opts *o, struct run_api *a, struct ntx_error *e)
{
	if (ntx_lm_open(o->draft_path, &a->draft, e)) { /* "PATH: why" */
		fprintf(stderr, PROG ": --draft %s\n", ntx_error_message(e));
		return 1;
	}
	if (ntx_lm_check_draft(a->lm, a->draft, e))
		return draft_fail(o, e);
	return 0;
}

/* --draft, --lookup, --draft-k: speculative decoding on the context (the
 * draft resident on its backend, the same context and sequences). */
static int set_spec(const struct run_opts *o, struct run_api *a, enum ntx_backend_choice b,
		    struct ntx_error *e)
{
	struct ntx_spec_params sp;

	if (!a->draft && !o->lookup)
		return 0;
	ntx_spec_params_init(&sp);
	sp.draft = a->draft;
	sp.lookup = o->lookup;
	sp.draft_k = o->draft_k; /* 0: adaptive */
	if (ntx_ctx_set_spec(a->ctx, &sp, e))
		return a->draft ? draft_fail(o, e) : fail(NULL, e);
	if (o->verbose && a->draft)
		fprintf(stderr, PROG ": draft %s on %s\n", o->draft_path, backend_name(b));
	return 0;
}

/* The context of a->lm and a->pl with the options' backend, sizes, read
 * mode and skip set; the lines ntx-run prints about it. */
static int new_ctx(struct run_opts *o, struct run_api *a, const int *skip, int n_skip,
		   struct ntx_error *e)
{
	struct ntx_ctx_params cp;
	struct ntx_ctx_stats st;
	const char *note;

	ntx_ctx_params_init(&cp);
	cp.backend = o->backend;
	cp.n_ctx = o->n_ctx;
	cp.cache_type = o->kv_type;
	cp.n_seq = o->batch ? o->parallel : 1;
	cp.n_threads = o->n_threads;
	cp.gpu_index = o->gpu_index;
	cp.pack_path = o->pack_path;
	cp.io = o->io == RUN_IO_MMAP ? NTX_IO_MODE_MMAP : NTX_IO_MODE_DIRECT;
	/* --ram-budget: no anonymous copies, the page cache is the only copy */
	cp.page_cache_only = o->ram_budget >= 0;
	cp.skip = skip;
	cp.n_skip = n_skip;
	if (ntx_ctx_new(a->lm, a->pl, &cp, &a->ctx, e))
		return fail(NULL, e);
	run_sig_ctx = a->ctx;
	if (run_interrupted) /* Ctrl-C before the context was there */
		ntx_ctx_interrupt(a->ctx);
	st.size = sizeof st;
	if (ntx_ctx_stats(a->ctx, &st, e))
		return fail(NULL, e);
	if (set_spec(o, a, st.backend, e))
		return 1;
	note = ntx_ctx_fallback_note(a->ctx);
	if (!o->quiet && note)
		fprintf(stderr, PROG ": %s: using the CPU\n", note);
	else if (!o->quiet && st.backend == NTX_USE_CUDA && o->backend == NTX_USE_AUTO)
		fprintf(stderr, PROG ": using CUDA device %d\n", o->gpu_index);
	if (o->verbose)
		fprintf(stderr, PROG ": backend %s, context %d\n", backend_name(st.backend), st.n_ctx);
	return 0;
}

static int open_all(struct run_opts *o, struct run_api *a, struct ntx_error *e)
{
	struct ntx_placement_info pi;
	struct ntx_lm_info li;
	char *mpath = NULL;
	const char *path = o->model_path;
	int *skip = NULL, n_skip = 0, rc;

	if (o->plan_path) {
		pi.size = sizeof pi;
		if (ntx_placement_read(o->plan_path, &a->pl, e))
			return fail(NULL, e);
		if (!path && ntx_placement_model_path(o->plan_path, &mpath, e))
			return fail(NULL, e);
		if (ntx_placement_info(a->pl, &pi, e)) {
			ntx_free(mpath);
			return fail(NULL, e);
		}
		run_plan_defaults(o, &pi);
		path = path ? path : mpath;
	}
	rc = 0;
	if (ntx_lm_open(path, &a->lm, e))
		rc = fail(NULL, e);
	else if (o->draft_path)
		rc = open_draft(o, a, e);
	if (!rc && a->pl && ntx_placement_check(a->pl, a->lm, e))
		rc = fail(o->plan_path, e);
	li.size = sizeof li;
	if (!rc && ntx_lm_info(a->lm, &li, e))
		rc = fail(NULL, e);
	if (!rc)
		rc = skip_set(o, path, li.n_layer, &skip, &n_skip, e);
	if (!rc && !a->pl)
		rc = plan_in_memory(o, a, path, skip, n_skip, e);
	if (!rc)
		rc = new_ctx(o, a, skip, n_skip, e);
	ntx_free(mpath);
	ntx_free(skip);
	return rc;
}

int run_api_open(struct run_opts *o, struct run_api *a)
{
	struct ntx_error *e = ntx_error_new();
	int rc;

	memset(a, 0, sizeof *a);
	if (!e) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	rc = open_all(o, a, e);
	ntx_error_free(e);
	if (rc)
		run_api_close(a);
	return rc;
}

void run_api_close(struct run_api *a)
{
	run_sig_ctx = NULL;
	ntx_ctx_free(a->ctx);
	ntx_lm_close(a->draft); /* after the context, which borrows it */
	ntx_placement_free(a->pl);
	ntx_lm_close(a->lm);
	memset(a, 0, sizeof *a);
}
