/* ctx.c - ntx-run's dispatch, and what --batch and --bench open through
 * the library's internals until they move onto ntx.h (open.c does it for
 * the other modes): model, vocabulary, plan, skip sets, engine, draft. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parse.h"
#include "run_int.h"
#include "skipset.h"
#include "spec.h"

int run_exit_code(const struct ntx_err *err)
{
	if (err->code == NTX_ENOFIT)
		return 3;
	if (err->code == NTX_EINTR)
		return 130;
	return 1;
}

int run_fail(const struct ntx_err *err)
{
	if (err->code != NTX_EINTR)
		fprintf(stderr, PROG ": %s\n", err->msg);
	return run_exit_code(err);
}

/* --draft: the draft model and its vocabulary, refused before any work
 * unless it shares the target's vocabulary. */
static int open_draft_model(struct run_ctx *c, struct ntx_err *err)
{
	const char *path = c->o->draft_path;

	c->dmodel = ntx_model_open(path, 0, err);
	if (!c->dmodel) {
		ntx_err_prefix(err, "--draft %s", path);
		return -1;
	}
	c->dvocab = ntx_vocab_load(c->dmodel->gguf, err);
	if (!c->dvocab || ntx_spec_check_vocab(c->vocab, c->dvocab, err)) {
		ntx_err_prefix(err, "--draft %s", path);
		return -1;
	}
	return 0;
}

/* The draft's engine: every layer resident on the backend the target's
 * engine runs on (ntx-plan --draft counted it in the VRAM budget), the same
 * context and sequences. */
static int open_draft_engine(struct run_ctx *c, const struct ntx_engine_opts *teo,
			     struct ntx_err *err)
{
	struct ntx_engine_opts eo = *teo;

	eo.backend = ntx_engine_backend(c->engine);
	eo.n_ctx = ntx_engine_n_ctx(c->engine);
	eo.plan = NULL;
	eo.pack_path = NULL;
	eo.skip = NULL;
	eo.n_ubatch = 0;
	c->draft = ntx_engine_new(c->dmodel, &eo, err);
	if (!c->draft) {
		ntx_err_prefix(err, "--draft %s", c->o->draft_path);
		return -1;
	}
	if (c->o->verbose)
		fprintf(stderr, PROG ": draft %s on %s\n", c->o->draft_path,
			ntx_backend_name(ntx_engine_backend(c->draft)));
	return 0;
}

/* Without --plan: choose the backend and plan in memory from the detected
 * hardware (and --vram-budget/--ram-budget/--executor). On the CPU the plan
 * (no VRAM, every layer on the CPU) checks that the model fits in RAM: a
 * model larger than RAM (or --ram-budget) is refused with exit 3 and the
 * commands that make a plan and a pack, never read until the kernel kills
 * the process; with --pack its disk layers stream from the pack, else the
 * plan is dropped and the whole model runs from the GGUF map. */
static int plan_in_memory(struct run_ctx *c, struct ntx_err *err)
{
	struct run_opts *o = c->o;
	struct ntx_plan_model pm;
	struct ntx_plan_hw hw;
	struct ntx_plan_opts po;
	char why[256] = "";
	int *skip = NULL, n_skip = 0, l, rc, cpu = o->backend == NTX_USE_CPU, n_disk = 0;

	if (!cpu && !ntx_engine_gpu_usable(o->gpu_index, why, sizeof why)) {
		if (o->backend == NTX_USE_CUDA)
			return ntx_err_set(err, NTX_EDEVICE, "cuda: %s", why);
		if (!o->quiet)
			fprintf(stderr, PROG ": %s: using the CPU\n", why);
		o->backend = NTX_USE_CPU;
		cpu = 1;
	}
	memset(&po, 0, sizeof po);
	po.vram_budget = po.ram_budget = po.reserve = po.disk_budget = -1;
	po.n_ctx = o->n_ctx;
	po.kv_type = run_kv_type(o);
	po.n_seq = 1; /* --batch opens its own (open.c) */
	po.gpu_index = o->gpu_index;
	po.pack_path = o->pack_path;
	po.vram_budget = o->vram_budget;
	po.ram_budget = o->ram_budget;
	po.executor = NTX_POLICY_AUTO;
	if (o->executor) {
		if (!strcmp(o->executor, "gpu"))
			po.executor = NTX_POLICY_GPU;
		else if (!strcmp(o->executor, "cpu"))
			po.executor = NTX_POLICY_CPU;
		else if (strcmp(o->executor, "auto"))
			return ntx_err_set(err, NTX_EINVAL, "--executor: expected auto, gpu or cpu");
	}
	if (cpu) {
		po.vram_budget = 0;
		po.executor = NTX_POLICY_CPU;
	}
	if (c->skip) {
		skip = calloc((size_t)c->model->cfg.n_layer, sizeof *skip);
		if (!skip)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		for (l = 0; l < c->model->cfg.n_layer; l++)
			if (c->skip[l])
				skip[n_skip++] = l;
	}
	po.skip = skip;
	po.n_skip = n_skip;
	if (ntx_plan_model_from_model(c->model, &pm, err)) {
		free(skip);
		return -1;
	}
	ntx_hw_detect(&hw, o->gpu_index, NULL);
	rc = ntx_plan_compute(&pm, &hw, &po, &c->plan, err);
	ntx_plan_model_free(&pm);
	free(skip);
	if (rc)
		return -1;
	for (l = 0; l < c->model->cfg.n_layer; l++)
		n_disk += !c->plan->layers[l].skip && c->plan->layers[l].home == NTX_TIER_DISK;
	if (n_disk && !o->pack_path)
		return ntx_err_set(err, NTX_ENOFIT,
				   "the model does not fit in %s; make a plan and a pack: ntx-plan %s%s%s%s -o plan.json && ntx-pack %s --plan plan.json, then ntx-run --plan plan.json",
				   cpu ? "RAM" : "VRAM and RAM", c->model->gguf->path,
				   cpu ? " --vram-budget 0" : "", o->ram_budget_arg ? " --ram-budget " : "",
				   o->ram_budget_arg ? o->ram_budget_arg : "", c->model->gguf->path);
	if (o->verbose)
		fprintf(stderr, PROG ": planned in memory%s: predicted %.2f tok/s\n",
			cpu ? " (CPU)" : "", c->plan->predicted_tok_per_s);
	if (cpu && !n_disk) { /* everything in RAM: the plain CPU engine */
		ntx_plan_free(c->plan);
		c->plan = NULL;
	}
	return 0;
}

/* A plan was made for a context size, KV type, number of sequences and
 * ubatch: they are the defaults, and larger values than the plan's are
 * said to be outside what its VRAM and RAM budgets counted. */
static void plan_run_params(struct run_ctx *c)
{
	const struct ntx_plan *p = c->plan;
	struct ntx_placement_info pi;

	memset(&pi, 0, sizeof pi);
	pi.size = sizeof pi;
	pi.n_ctx = p->n_ctx;
	pi.n_seq = p->n_seq;
	pi.kv_cache = p->kv_type == NTX_KV_F32 ? NTX_KV_CACHE_F32 : NTX_KV_CACHE_F16;
	run_plan_defaults(c->o, &pi);
}

int run_open(struct run_ctx *c, struct ntx_err *err)
{
	struct run_opts *o = c->o;
	const char *mpath = o->model_path;
	struct ntx_engine_opts eo;
	int L, i, n;

	if (o->plan_path) {
		c->plan = ntx_plan_load(o->plan_path, err);
		if (!c->plan)
			return -1;
		if (!mpath) {
			mpath = ntx_plan_model_file(c->plan, err);
			if (!mpath) {
				ntx_err_prefix(err, "%s", o->plan_path);
				return -1;
			}
		}
		plan_run_params(c);
	}
	c->model = ntx_model_open(mpath, 0, err);
	if (!c->model) {
		ntx_err_prefix(err, "%s", mpath);
		return -1;
	}
	c->vocab = ntx_vocab_load(c->model->gguf, err);
	if (!c->vocab) {
		ntx_err_prefix(err, "%s", mpath);
		return -1;
	}
	if (o->draft_path && open_draft_model(c, err))
		return -1;
	if (c->plan && ntx_plan_check_model(c->plan, c->model, err)) {
		ntx_err_prefix(err, "%s", o->plan_path);
		return -1;
	}
	L = c->model->cfg.n_layer;
	if (o->skip_file || o->skip_layers) {
		c->skip = calloc((size_t)L, 1);
		if (!c->skip)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		if (o->skip_file) {
			if (ntx_skipset_load(o->skip_file, c->model, c->skip, err))
				return -1;
		} else {
			int *ls;

			if (ntx_parse_range_list(o->skip_layers, L, &ls, &n, err)) {
				ntx_err_prefix(err, "--skip-layers");
				return -1;
			}
			for (i = 0; i < n; i++)
				c->skip[ls[i]] = 1;
			free(ls);
		}
	}
	if (!c->plan && plan_in_memory(c, err))
		return -1;
	c->eog = calloc((size_t)c->model->cfg.n_vocab, 1);
	if (!c->eog)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (!o->ignore_eos) {
		const int32_t *ids = ntx_vocab_eog_ids(c->vocab, &n);

		for (i = 0; i < n; i++) {
			if (ids[i] >= 0 && ids[i] < c->model->cfg.n_vocab)
				c->eog[ids[i]] = 1;
		}
	}
	memset(&eo, 0, sizeof eo);
	eo.backend = o->backend == NTX_USE_CPU ? NTX_BACKEND_CPU :
		     o->backend == NTX_USE_CUDA ? NTX_BACKEND_CUDA : NTX_BACKEND_AUTO;
	eo.n_ctx = o->n_ctx;
	eo.kv_type = run_kv_type(o);
	eo.n_seq = 1; /* --batch opens its own (open.c) */
	eo.n_ubatch = c->plan ? c->plan->n_ubatch : 0;
	eo.n_threads = o->n_threads;
	eo.gpu_index = o->gpu_index;
	eo.plan = c->plan;
	eo.pack_path = o->pack_path;
	eo.io = o->io == RUN_IO_MMAP ? NTX_IO_MMAP : NTX_IO_DIRECT;
	/* --ram-budget: no anonymous copies, the page cache is the only copy */
	eo.copy_limit = o->ram_budget >= 0 ? -1 : 0;
	eo.skip = c->skip;
	eo.interrupt = &run_interrupted;
	c->engine = ntx_engine_new(c->model, &eo, err);
	if (!c->engine)
		return -1;
	if (c->dmodel && open_draft_engine(c, &eo, err))
		return -1;
	{
		struct ntx_engine_stats es;

		ntx_engine_get_stats(c->engine, &es);
		if (!o->quiet && es.fell_back_to_cpu)
			fprintf(stderr, PROG ": %s: using the CPU\n", es.backend_note);
		else if (!o->quiet && ntx_engine_backend(c->engine) == NTX_BACKEND_CUDA &&
			 o->backend == NTX_USE_AUTO)
			fprintf(stderr, PROG ": using CUDA device %d\n", o->gpu_index);
	}
	if (o->verbose)
		fprintf(stderr, PROG ": backend %s, context %d\n",
			ntx_backend_name(ntx_engine_backend(c->engine)), ntx_engine_n_ctx(c->engine));
	return 0;
}

void run_close(struct run_ctx *c)
{
	ntx_engine_free(c->draft);
	ntx_vocab_free(c->dvocab);
	ntx_model_close(c->dmodel);
	ntx_engine_free(c->engine);
	ntx_vocab_free(c->vocab);
	ntx_plan_free(c->plan);
	ntx_model_close(c->model);
	free(c->skip);
	free(c->eog);
	ntx_outfile_abort(&c->stats);
}

/* ---- options as the internals' types ---- */

void run_sampler_params(const struct run_opts *o, struct ntx_sampler_params *sp)
{
	ntx_sampler_defaults(sp);
	sp->temp = o->gp.temperature;
	sp->top_k = o->gp.top_k;
	sp->top_p = o->gp.top_p;
	sp->min_p = o->gp.min_p;
	sp->repeat_penalty = o->gp.repeat_penalty;
	sp->repeat_last_n = o->gp.repeat_last_n;
	sp->seed = o->gp.seed;
}

enum ntx_kv_type run_kv_type(const struct run_opts *o)
{
	return o->kv_type == NTX_KV_CACHE_F32 ? NTX_KV_F32 : NTX_KV_F16;
}

/* ---- the run ---- */

int run_main(struct run_opts *o)
{
	/* over ntx.h */
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
