/* open.c - a mode's model, placement and context over ntx.h: the plan
 * (--plan, else planned in memory for the hardware found now), the draft
 * model (--draft, checked against the target's vocabulary before any
 * work), the skip set, the context with the options' backend, sizes and
 * read mode, speculative decoding on it (--draft, --lookup, --self-spec),
 * and the lines ntx-run prints about them. Every mode but --tokenize uses
 * it. */
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

/* fail() with "--draft PATH" as the context. */
static int fail_draft(const struct run_opts *o, const struct ntx_error *e)
{
	char context[1024];

	snprintf(context, sizeof context, "--draft %s", o->draft_path);
	return fail(context, e);
}

static void on_note(void *user, const char *line)
{
	(void)user;
	fprintf(stderr, PROG ": %s\n", line);
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
	/* warnings only (a probe cache that cannot be read, say) */
	pp.notes = o->quiet ? 0u : (unsigned)NTX_NOTE_WARNINGS;
	pp.note = on_note;
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

/* The layers of a skip argument (a skip file or a layer list) for the
 * model at mpath: *layers freed with ntx_free. */
static int desc_skip(const char *mpath, const char *arg, int **layers, int *n,
		     struct ntx_error *e)
{
	struct ntx_model_desc *d = NULL;
	int rc = 0;

	if (ntx_model_desc_open(mpath, &d, e) || ntx_model_desc_skip(d, arg, -1, layers, n, e))
		rc = fail(NULL, e);
	ntx_model_desc_free(d);
	return rc;
}

/* The skip set of --skip or --skip-layers (*skip freed with ntx_free). */
static int skip_set(const struct run_opts *o, const char *mpath, int n_layer, int **skip,
		    int *n, struct ntx_error *e)
{
	*skip = NULL;
	*n = 0;
	if (o->skip_layers)
		return ntx_arg_layers(o->skip_layers, n_layer, skip, n, e) ? fail("--skip-layers", e)
									  : 0;
	return o->skip_file ? desc_skip(mpath, o->skip_file, skip, n, e) : 0;
}

/* --self-spec: the layers its draft skips, from --draft-skip, else (*n
 * -1) the placement's layers outside VRAM, which needs a placement. */
static int self_skip(const struct run_opts *o, const struct run_api *a, const char *mpath,
		     int **layers, int *n, struct ntx_error *e)
{
	*layers = NULL;
	*n = -1;
	if (!o->self_spec)
		return 0;
	if (o->draft_skip)
		return desc_skip(mpath, o->draft_skip, layers, n, e);
	if (!a->pl) {
		fprintf(stderr, PROG ": --self-spec needs a draft: a plan with VRAM-resident layers (--plan) or --draft-skip FILE\n");
		return 1;
	}
	return 0;
}

/* The plan (--plan), the model (-m, else the plan's) and the draft model
 * (--draft, refused unless it shares the model's vocabulary), the plan
 * checked against the model. *mpath: the model's path when it came from
 * the plan (freed with ntx_free). */
static int open_models(struct run_opts *o, struct run_api *a, char **mpath, struct ntx_error *e)
{
	struct ntx_placement_info pi;
	const char *path = o->model_path;

	if (o->plan_path) {
		pi.size = sizeof pi;
		if (ntx_placement_read(o->plan_path, &a->pl, e) ||
		    (!path && ntx_placement_model_path(o->plan_path, mpath, e)) ||
		    ntx_placement_info(a->pl, &pi, e))
			return fail(NULL, e);
		run_plan_defaults(o, &pi);
		path = path ? path : *mpath;
	}
	if (ntx_lm_open(path, &a->lm, e))
		return fail(NULL, e);
	if (o->draft_path && ntx_lm_open(o->draft_path, &a->draft, e)) {
		/* the message names the file: "--draft FILE: ..." */
		if (ntx_error_status(e) == NTX_STATUS_INTERRUPTED)
			return 130;
		fprintf(stderr, PROG ": --draft %s\n", ntx_error_message(e));
		return 1;
	}
	if (a->draft && ntx_lm_check_draft(a->lm, a->draft, e))
		return fail_draft(o, e);
	if (a->pl && ntx_placement_check(a->pl, a->lm, e))
		return fail(o->plan_path, e);
	return 0;
}

/* The context with the options' backend, sizes, read mode and skip set. */
static int new_ctx(const struct run_opts *o, struct run_api *a, const int *skip, int n_skip,
		   struct ntx_error *e)
{
	struct ntx_ctx_params cp;

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
	return 0;
}

/* Speculative decoding on the context: the draft model, prompt lookup,
 * self-speculation (sskip: ntx_spec_params.self_skip). -i decodes its
 * requests plainly, as it always did. */
static int set_spec(const struct run_opts *o, struct run_api *a, const int *sskip, int n_sskip,
		    struct ntx_error *e)
{
	struct ntx_spec_params sp;

	if (o->interactive || !(o->draft_path || o->lookup || o->self_spec))
		return 0;
	ntx_spec_params_init(&sp);
	sp.draft = a->draft;
	sp.lookup = o->lookup;
	sp.draft_k = o->draft_k; /* 0: adaptive */
	sp.self_spec = o->self_spec;
	sp.self_skip = sskip;
	sp.n_self_skip = n_sskip;
	if (ntx_ctx_set_spec(a->ctx, &sp, e))
		return o->draft_path ? fail_draft(o, e) : fail(NULL, e);
	return 0;
}

/* What ntx-run says about the context: the backend fallen back to, the
 * GPU used, -v's lines. */
static int report(const struct run_opts *o, const struct run_api *a, struct ntx_error *e)
{
	struct ntx_ctx_stats st;
	const char *note;

	st.size = sizeof st;
	if (ntx_ctx_stats(a->ctx, &st, e))
		return fail(NULL, e);
	if (o->verbose && o->draft_path && !o->interactive)
		fprintf(stderr, PROG ": draft %s on %s\n", o->draft_path, backend_name(st.backend));
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
	struct ntx_lm_info li;
	char *mpath = NULL;
	const char *path;
	int *skip = NULL, n_skip = 0, *sskip = NULL, n_sskip = -1, rc;

	rc = open_models(o, a, &mpath, e);
	path = o->model_path ? o->model_path : mpath;
	li.size = sizeof li;
	if (!rc && ntx_lm_info(a->lm, &li, e))
		rc = fail(NULL, e);
	if (!rc)
		rc = skip_set(o, path, li.n_layer, &skip, &n_skip, e);
	if (!rc && !a->pl)
		rc = plan_in_memory(o, a, path, skip, n_skip, e);
	if (!rc)
		rc = self_skip(o, a, path, &sskip, &n_sskip, e);
	if (!rc)
		rc = new_ctx(o, a, skip, n_skip, e);
	if (!rc)
		rc = set_spec(o, a, sskip, n_sskip, e);
	if (!rc)
		rc = report(o, a, e);
	ntx_free(mpath);
	ntx_free(skip);
	ntx_free(sskip);
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
	if (!rc && o->expert_stats) { /* before any work */
		struct ntx_lm_info li;

		memset(&li, 0, sizeof li);
		li.size = sizeof li;
		if (ntx_lm_info(a->lm, &li, e) == NTX_OK && li.n_expert == 0) {
			fprintf(stderr, PROG ": --expert-stats: %s is not a mixture of experts (it has no experts to count)\n",
				li.path);
			rc = 2;
		}
	}
	ntx_error_free(e);
	if (rc)
		run_api_close(a);
	return rc;
}

int run_expert_stats(const struct run_opts *o, struct run_api *a, int rc)
{
	struct ntx_error *e;

	if (rc || !o->expert_stats || !a->ctx)
		return rc;
	e = ntx_error_new();
	if (!e || ntx_ctx_expert_stats(a->ctx, o->expert_stats, e)) {
		fprintf(stderr, PROG ": --expert-stats: %s\n", e ? ntx_error_message(e) : "out of memory");
		rc = 1;
	}
	ntx_error_free(e);
	return rc;
}

void run_api_close(struct run_api *a)
{
	run_sig_ctx = NULL;
	ntx_ctx_free(a->ctx);
	ntx_lm_close(a->draft); /* after the context that borrows it */
	ntx_placement_free(a->pl);
	ntx_lm_close(a->lm);
	memset(a, 0, sizeof *a);
}
