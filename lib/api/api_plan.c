/* api_plan.c - the public API (include/ntx.h) for plans and packs: what
 * ntx-plan and ntx-pack do, as calls. A model description (the planner's
 * view of a GGUF or of ntx-inspect JSON) and the planner's parameters go in,
 * a placement comes out; placements are read, checked, rebased and
 * explained; packs are written, opened, checked against a placement and
 * verified against their model. Detection, probing and the draft model's
 * reserve happen inside ntx_placement_plan, which reports what it saw
 * through the caller's note callback instead of printing. api.c has the
 * placements' first calls (load, make, info, JSON); api_tools.c the other
 * tools' calls. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api_int.h"
#include "clock.h"
#include "expert_stats.h"
#include "fileio.h"
#include "pack.h"
#include "pack_read.h"
#include "parse.h"
#include "probe_cache.h"
#include "skipset.h"
#include "tunables.h"

_Static_assert(NTX_PACKFILE_ALIGN == NTX_PACK_ALIGN && NTX_PACKFILE_FRAME_MAX == NTX_PACK_FRAME_MAX,
	       "the public pack constants are the format's");
_Static_assert((int)NTX_EXECUTOR_AUTO == (int)NTX_POLICY_AUTO &&
		       (int)NTX_EXECUTOR_GPU == (int)NTX_POLICY_GPU &&
		       (int)NTX_EXECUTOR_CPU == (int)NTX_POLICY_CPU,
	       "public planner enums equal the planner's");
/* The caller's cancel flag is an int; the writer's is a sig_atomic_t. */
_Static_assert(_Generic((sig_atomic_t)0, int: 1, default: 0), "sig_atomic_t is int");

/* ---- model descriptions ---- */

struct ntx_model_desc {
	struct ntx_plan_model pm;
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

static enum ntx_status desc_new(struct ntx_model_desc **out, struct ntx_error *e)
{
	*out = calloc(1, sizeof **out);
	return *out ? NTX_OK : ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
}

/* JSON or not: a document starts with '{' after white space. */
static int check_json_start(const char *text, size_t len, const char *name, struct ntx_err *ie)
{
	const unsigned char *u = (const unsigned char *)text;
	size_t i = 0;

	while (i < len && strchr(" \t\r\n", text[i]) && text[i])
		i++;
	if (i < len && text[i] == '{')
		return 0;
	if (len == 0)
		return ntx_err_set(ie, NTX_EINVAL, "%s: not a GGUF file or inspect JSON (empty)", name);
	return ntx_err_set(ie, NTX_EINVAL,
			   "%s: not a GGUF file or inspect JSON (starts with %02x %02x %02x %02x)",
			   name, u[0], len > 1 ? u[1] : 0, len > 2 ? u[2] : 0, len > 3 ? u[3] : 0);
}

enum ntx_status ntx_model_desc_from_text(const char *text, size_t len, const char *name,
					 struct ntx_model_desc **out, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	enum ntx_status s;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_model_desc_from_text: out is NULL");
	*out = NULL;
	if (!text && len)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_model_desc_from_text: text is NULL");
	if (!name)
		name = "<stdin>";
	if (check_json_start(text ? text : "", len, name, &ie))
		return ntx_api_fail(e, &ie);
	if ((s = desc_new(out, e)))
		return s;
	if (ntx_plan_model_from_inspect(text, len, name, &(*out)->pm, &ie)) {
		ntx_model_desc_free(*out);
		*out = NULL;
		return ntx_api_fail(e, &ie);
	}
	return NTX_OK;
}

enum ntx_status ntx_model_desc_open(const char *path, struct ntx_model_desc **out,
				    struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_model *m;
	enum ntx_status s;
	char *text;
	size_t len;
	int g;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_model_desc_open: out is NULL");
	*out = NULL;
	if (!path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_model_desc_open: path is NULL");
	g = is_gguf(path);
	if (g < 0) {
		ntx_err_errno(&ie, errno, "%s", path);
		return ntx_api_fail(e, &ie);
	}
	if (!g) {
		text = ntx_read_text_file(path, &len, &ie);
		if (!text)
			return ntx_api_fail(e, &ie);
		s = ntx_model_desc_from_text(text, len, path, out, e);
		free(text);
		return s;
	}
	if ((s = desc_new(out, e)))
		return s;
	m = ntx_model_open(path, 0, &ie);
	if (!m || ntx_plan_model_from_model(m, &(*out)->pm, &ie)) {
		ntx_err_prefix(&ie, "%s", path);
		ntx_model_close(m);
		ntx_model_desc_free(*out);
		*out = NULL;
		return ntx_api_fail(e, &ie);
	}
	ntx_model_close(m);
	return NTX_OK;
}

void ntx_model_desc_free(struct ntx_model_desc *d)
{
	if (!d)
		return;
	ntx_plan_model_free(&d->pm);
	free(d);
}

enum ntx_status ntx_model_desc_skip(const struct ntx_model_desc *d, const char *arg,
				    int set_index, int **layers, int *n, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!layers || !n)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_model_desc_skip: %s is NULL",
				   !layers ? "layers" : "n");
	*layers = NULL;
	*n = 0;
	if (!d || !arg)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_model_desc_skip: %s is NULL",
				   !d ? "d" : "arg");
	if (ntx_skip_parse(arg, d->pm.n_layer, set_index < 0 ? -1 : set_index, d->pm.fingerprint,
			   layers, n, &ie))
		return ntx_api_fail(e, &ie);
	return NTX_OK;
}

/* ---- planning ---- */

void ntx_planner_params_init(struct ntx_planner_params *p)
{
	if (!p)
		return;
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
	p->vram_budget = p->ram_budget = p->disk_budget = p->reserve = -1;
	p->notes = NTX_NOTE_WARNINGS;
	p->probe_cache = 1;
	p->vram_experts = -1;
}

/* One note, formatted, when the caller asked for its kind. */
static void note(const struct ntx_planner_params *p, unsigned kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void note(const struct ntx_planner_params *p, unsigned kind, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!p->note || !(p->notes & kind))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	p->note(p->user, line);
}

/* The parameters' ranges (the tools check them too, with their own
 * messages). */
static enum ntx_status check_params(const struct ntx_planner_params *x, struct ntx_error *e)
{
	const double *bw[] = { &x->h2d_gbps, &x->disk_gbps, &x->cpu_gbps, &x->cpu_batch_gbps,
			       &x->gpu_gbps };
	size_t i;

	if (x->vram_budget < -1 || x->ram_budget < -1 || x->disk_budget < -1 || x->reserve < -1)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_planner_params: budgets and reserve are -1 (detect) or >= 0");
	if (x->gpu_index < 0 || x->n_ctx < 0 || x->n_seq < 0 || x->n_ubatch < 0 || x->n_skip < 0 ||
	    (x->n_skip && !x->skip))
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_planner_params: gpu_index %d, n_ctx %d, n_seq %d, n_ubatch %d, n_skip %d: expected >= 0 (and skip with n_skip)",
				   x->gpu_index, x->n_ctx, x->n_seq, x->n_ubatch, x->n_skip);
	if ((unsigned)x->kv_type > NTX_KV_CACHE_F32 || (unsigned)x->executor > NTX_EXECUTOR_CPU)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_planner_params: kv_type %d, executor %d: unknown value",
				   (int)x->kv_type, (int)x->executor);
	if (x->ring_slots && (x->ring_slots < 2 || x->ring_slots > 64))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ring_slots %d is out of range [2, 64]",
				   x->ring_slots);
	if (x->vram_experts < -1)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "vram_experts %d: expected -1 (the planner decides) or >= 0",
				   x->vram_experts);
	if (x->draft_k < 0 || x->draft_k > 64)
		return ntx_api_set(e, NTX_STATUS_INVALID, "draft_k %d is out of range [1, 64]",
				   x->draft_k);
	if (x->draft_accept && !(x->draft_accept > 0 && x->draft_accept < 1))
		return ntx_api_set(e, NTX_STATUS_INVALID, "draft_accept %g is out of range (0, 1)",
				   x->draft_accept);
	for (i = 0; i < sizeof bw / sizeof bw[0]; i++)
		if (!(*bw[i] >= 0 && *bw[i] <= 1e6))
			return ntx_api_set(e, NTX_STATUS_INVALID,
					   "ntx_planner_params: bandwidth %g is out of range [0, 1e6] GB/s",
					   *bw[i]);
	return NTX_OK;
}

/* The draft's VRAM and per-token bytes for the planner; its vocabulary
 * must be the target's. */
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
		/* the message names the option, as ntx-plan has always said it */
		ntx_err_set(err, NTX_EMISMATCH,
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

static char *dir_of(const char *path)
{
	const char *sl = strrchr(path, '/');

	if (!sl)
		return strdup(".");
	if (sl == path)
		return strdup("/");
	return strndup(path, (size_t)(sl - path));
}

/* The notes of what was detected (NTX_NOTE_DETECTED). */
static void note_detected(const struct ntx_planner_params *x, const struct ntx_plan_hw *hw,
			  const char *pack_dir)
{
	char a[32], b[32];

	if (hw->detected & NTX_HW_GPU)
		note(x, NTX_NOTE_DETECTED, "GPU: %s", hw->gpu_present ? hw->gpu_name : "none");
	if (hw->pcie_gts > 0)
		note(x, NTX_NOTE_DETECTED, "PCIe link of %s: %g GT/s x%d (sysfs maximum, capped by the bridges above): H2D about %.3g GB/s",
		     hw->gpu_bus_id, hw->pcie_gts, hw->pcie_width,
		     ntx_pcie_gbps(hw->pcie_gts, hw->pcie_width));
	if (hw->gpu_present)
		note(x, NTX_NOTE_DETECTED, "VRAM: %s free of %s", ntx_fmt_size(hw->vram_free, a, 32),
		     ntx_fmt_size(hw->vram_total, b, 32));
	if (hw->detected & NTX_HW_RAM)
		note(x, NTX_NOTE_DETECTED, "RAM available: %s",
		     ntx_fmt_size(hw->ram_available, a, 32));
	if (hw->detected & NTX_HW_CPU)
		note(x, NTX_NOTE_DETECTED, "CPU cores: %d", hw->cpu_cores);
	if (hw->detected & NTX_HW_DISK)
		note(x, NTX_NOTE_DETECTED, "free at %s: %s", pack_dir,
		     ntx_fmt_size(hw->disk_free, a, 32));
	/* two CPU rates, each said for what: weight bytes per second of one
	 * token's products, and weight bytes x tokens per second of a batch's */
	if (hw->probed || hw->h2d_src != NTX_SRC_DEFAULT || hw->cpu_src != NTX_SRC_DEFAULT ||
	    hw->disk_src != NTX_SRC_DEFAULT)
		note(x, NTX_NOTE_DETECTED,
		     "rates: H2D %g GB/s (%s), disk %g GB/s (%s), CPU %g GB/s for one token (%s), CPU %g GB/s x tokens for %d tokens at once (%s)",
		     hw->h2d_gbps, ntx_src_name(hw->h2d_src), hw->disk_gbps,
		     ntx_src_name(hw->disk_src), hw->cpu_gbps, ntx_src_name(hw->cpu_src),
		     hw->cpu_batch_gbps, NTX_PLAN_CPU_BATCH_PROBE, ntx_src_name(hw->cpu_batch_src));
}

/* "2026-12-03" for a time in seconds since the epoch (UTC). */
static const char *date_of(int64_t t, char *buf, size_t n)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!gmtime_r(&tt, &tm) || !strftime(buf, n, "%Y-%m-%d", &tm))
		snprintf(buf, n, "?");
	return buf;
}

/* The probe cache: after --probe, store what it measured; else apply what
 * an earlier probe on this machine stored. A cache that cannot be read or
 * written is a warning, never an error. */
static void probe_cache(const struct ntx_planner_params *x, const struct ntx_plan_opts *o,
			const struct ntx_tunables *tun, struct ntx_plan_hw *hw)
{
	struct ntx_probe_key k;
	struct ntx_err ce = { 0, "" };
	char path[NTX_TUNABLES_PATH_MAX + 32], day[32];
	int64_t when = 0;
	int n;

	if (!x->probe_cache || ntx_probe_cache_path(tun, path, sizeof path))
		return;
	ntx_probe_key_now(&k, hw->cpu_cores);
	if (o->probe) {
		if (ntx_probe_cache_save(path, hw, &k, (int64_t)time(NULL), &ce))
			note(x, NTX_NOTE_WARNINGS, "warning: probe cache not written: %s", ce.msg);
		else
			note(x, NTX_NOTE_DETECTED, "probed rates stored in %s", path);
		return;
	}
	n = ntx_probe_cache_load(path, &k, hw, &when, &ce);
	if (n < 0)
		note(x, NTX_NOTE_WARNINGS,
		     "warning: probe cache ignored (planning with the default rates; --probe rewrites it): %s",
		     ce.msg);
	else if (n > 0)
		note(x, NTX_NOTE_DETECTED, "rates from the probe cache %s (probed %s)", path,
		     date_of(when, day, sizeof day));
}

/* Detect only what the parameters leave open, probe when asked. */
static void detect(const struct ntx_planner_params *x, const struct ntx_plan_opts *o,
		   const char *pack_dir, struct ntx_plan_hw *hw)
{
	struct ntx_tunables tun; /* NTX_CPU_SCALAR, NTX_NO_AMX, the probe cache */
	unsigned what = NTX_HW_ALL;

	ntx_tunables_from_env(&tun);
	if (!o->probe) {
		/* the GPU also for its PCIe link, when no H2D rate is given */
		if (o->vram_budget == 0 || (o->vram_budget > 0 && o->h2d_gbps > 0))
			what &= ~(unsigned)NTX_HW_GPU;
		if (o->ram_budget >= 0)
			what &= ~(unsigned)NTX_HW_RAM;
		if (o->disk_budget >= 0)
			what &= ~(unsigned)NTX_HW_DISK;
		if (o->cpu_gbps > 0 && o->cpu_batch_gbps > 0)
			what &= ~(unsigned)NTX_HW_CPU;
	}
	ntx_hw_detect_some(hw, o->gpu_index, pack_dir, what);
	if ((what & NTX_HW_GPU) && !hw->gpu_present && hw->gpu_count > 0)
		note(x, NTX_NOTE_WARNINGS, "warning: GPU %d not found (%d device%s); planning without a GPU",
		     o->gpu_index, hw->gpu_count, hw->gpu_count == 1 ? "" : "s");
	if ((what & NTX_HW_DISK) && !(hw->detected & NTX_HW_DISK))
		note(x, NTX_NOTE_WARNINGS, "warning: %s: cannot see free space (disk budget 0)",
		     pack_dir);
	if (o->probe) {
		struct ntx_err perr = { 0 };

		if (ntx_hw_probe(hw, pack_dir, hw->cpu_cores, &tun, &perr))
			note(x, NTX_NOTE_WARNINGS, "warning: %s", perr.msg);
	}
	probe_cache(x, o, &tun, hw);
	note_detected(x, hw, pack_dir);
}

enum ntx_status ntx_placement_plan(const struct ntx_model_desc *d,
				   const struct ntx_planner_params *pp,
				   struct ntx_placement **out, struct ntx_error *e)
{
	struct ntx_planner_params x;
	struct ntx_plan_opts o;
	struct ntx_plan_hw hw;
	struct ntx_err ie = { 0 };
	struct ntx_plan *p = NULL;
	double *scores = NULL;
	uint64_t *counts = NULL;
	char *pack = NULL, *pack_dir = NULL;
	enum ntx_status s;
	int rc = -1;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_plan: out is NULL");
	*out = NULL;
	if (!d)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_plan: d is NULL");
	ntx_planner_params_init(&x);
	if ((s = ntx_api_struct_in(&x, sizeof x, pp, "ntx_planner_params", e)) ||
	    (s = check_params(&x, e)))
		return s;
	ntx_plan_opts_init(&o);
	o.vram_budget = x.vram_budget;
	o.ram_budget = x.ram_budget;
	o.disk_budget = x.disk_budget;
	o.reserve = x.reserve;
	o.gpu_index = x.gpu_index;
	o.n_ctx = x.n_ctx;
	o.kv_type = x.kv_type == NTX_KV_CACHE_F32 ? NTX_KV_F32 : NTX_KV_F16;
	o.n_seq = x.n_seq;
	o.n_ubatch = x.n_ubatch;
	o.ring_slots = x.ring_slots;
	o.h2d_gbps = x.h2d_gbps;
	o.disk_gbps = x.disk_gbps;
	o.cpu_gbps = x.cpu_gbps;
	o.cpu_batch_gbps = x.cpu_batch_gbps;
	o.gpu_gbps = x.gpu_gbps;
	o.probe = x.probe;
	o.executor = (int)x.executor;
	o.skip = x.skip;
	o.n_skip = x.n_skip;
	o.draft_path = x.draft_path;
	o.draft_k = x.draft_k;
	o.draft_accept = x.draft_accept;
	o.vram_experts = x.vram_experts;
	{
		struct ntx_tunables tun;

		ntx_tunables_from_env(&tun);
		o.auto_expert_split = tun.expert_split;
	}
	if (x.expert_stats_path) {
		if (d->pm.n_expert <= 0) {
			ntx_err_set(&ie, NTX_EINVAL,
				    "--expert-stats %s: the model has no experts (it is not a mixture of experts)",
				    x.expert_stats_path);
			goto done;
		}
		if (ntx_expert_stats_load(x.expert_stats_path, d->pm.n_layer, d->pm.n_expert,
					  d->pm.fingerprint, &counts, &ie))
			goto done;
		o.expert_counts = counts;
	}
	if (x.scores_path) {
		if (ntx_scores_load(x.scores_path, d->pm.n_layer, d->pm.fingerprint, &scores, &ie))
			goto done;
		o.scores = scores;
	}
	pack = x.pack_path ? strdup(x.pack_path) : ntx_plan_default_pack_path(d->pm.path);
	pack_dir = pack ? dir_of(pack) : NULL;
	if (!pack || !pack_dir) {
		ntx_err_set(&ie, NTX_ENOMEM, "out of memory");
		goto done;
	}
	detect(&x, &o, pack_dir, &hw);
	o.pack_path = pack;
	if (o.draft_path && draft_opts(&o, &d->pm, &ie))
		goto done;
	rc = ntx_plan_compute(&d->pm, &hw, &o, &p, &ie);
done:
	free(scores);
	free(counts);
	free(pack);
	free(pack_dir);
	if (rc)
		return ntx_api_fail(e, &ie);
	*out = malloc(sizeof **out);
	if (!*out) {
		ntx_plan_free(p);
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	}
	(*out)->p = p;
	return NTX_OK;
}

/* ---- placements: read, check, rebase, explain ---- */

enum ntx_status ntx_placement_read(const char *path, struct ntx_placement **out,
				   struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_plan *p;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_read: out is NULL");
	*out = NULL;
	if (!path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_read: path is NULL");
	p = ntx_plan_load(path, &ie);
	if (!p)
		return ntx_api_fail(e, &ie);
	*out = malloc(sizeof **out);
	if (!*out) {
		ntx_plan_free(p);
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	}
	(*out)->p = p;
	return NTX_OK;
}

enum ntx_status ntx_placement_check(const struct ntx_placement *pl, const struct ntx_lm *lm,
				    struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!pl || !lm)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_check: %s is NULL",
				   !pl ? "pl" : "lm");
	return ntx_plan_check_model(pl->p, lm->m, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_placement_rebase(struct ntx_placement *pl, const char *out_path,
				     struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!pl)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_rebase: pl is NULL");
	return ntx_plan_rebase(pl->p, out_path, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_placement_explain(const struct ntx_placement *pl, char **text,
				      struct ntx_error *e)
{
	if (!pl || !text)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_explain: %s is NULL",
				   !pl ? "pl" : "text");
	*text = ntx_plan_explain(pl->p);
	return *text ? NTX_OK : ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
}

const char *ntx_placement_pack_path(const struct ntx_placement *pl)
{
	return pl ? pl->p->pack_path : NULL;
}

/* ---- packs ---- */

struct ntx_packfile {
	struct ntx_pack *p;
};

void ntx_packfile_params_init(struct ntx_packfile_params *p)
{
	if (!p)
		return;
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
	p->compression = NTX_COMPRESS_NONE;
	p->level = 1;
	p->split = 1;
}

static enum ntx_status packfile_params(struct ntx_packfile_params *x,
				       const struct ntx_packfile_params *pp, struct ntx_error *e)
{
	enum ntx_status s;

	ntx_packfile_params_init(x);
	if ((s = ntx_api_struct_in(x, sizeof *x, pp, "ntx_packfile_params", e)))
		return s;
	if ((unsigned)x->compression > NTX_COMPRESS_ZSTD)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "compression %d: expected NTX_COMPRESS_NONE or NTX_COMPRESS_ZSTD",
				   (int)x->compression);
	if (x->level < -7 || x->level > 22)
		return ntx_api_set(e, NTX_STATUS_INVALID, "level %d is out of range [-7, 22]",
				   x->level);
	if (!(x->min_saving >= 0 && x->min_saving <= 1))
		return ntx_api_set(e, NTX_STATUS_INVALID, "min_saving %g is out of range [0, 1]",
				   x->min_saving);
	if (x->n_threads < 0)
		return ntx_api_set(e, NTX_STATUS_INVALID, "n_threads %d: expected >= 0",
				   x->n_threads);
	if (x->frame_size && (x->frame_size > NTX_PACKFILE_FRAME_MAX ||
			      x->frame_size % NTX_PACKFILE_ALIGN))
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "frame_size %u: expected a multiple of %u up to %u", x->frame_size,
				   NTX_PACKFILE_ALIGN, NTX_PACKFILE_FRAME_MAX);
	return NTX_OK;
}

int ntx_packfile_detect(const char *path)
{
	return path && ntx_pack_file_is_pack(path);
}

enum ntx_status ntx_packfile_default_path(const char *model_path, char **path,
					  struct ntx_error *e)
{
	if (!model_path || !path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_packfile_default_path: %s is NULL",
				   !path ? "path" : "model_path");
	*path = ntx_plan_default_pack_path(model_path);
	return *path ? NTX_OK : ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
}

static int same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

enum ntx_status ntx_packfile_write(const struct ntx_lm *lm, const struct ntx_placement *pl,
				   const char *path, const struct ntx_packfile_params *pp,
				   struct ntx_packfile_stats *st, struct ntx_error *e)
{
	struct ntx_packfile_params x;
	struct ntx_packfile_stats out;
	struct ntx_pack_write_opts wo;
	struct ntx_pack_write_stats ws;
	struct ntx_err ie = { 0 };
	struct stat sb;
	enum ntx_status s;
	int *layers, n = 0, l, n_layer, rc;

	if (!lm || !path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_packfile_write: %s is NULL",
				   !lm ? "lm" : "path");
	if ((s = packfile_params(&x, pp, e)))
		return s;
	if (pl && ntx_plan_check_model(pl->p, lm->m, &ie))
		return ntx_api_fail(e, &ie);
	/* the pack is renamed into place: never over a device or a FIFO */
	if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "not a regular file (a pack is written under a temporary name and renamed over it)");
	if (same_file(path, lm->m->gguf->path))
		return ntx_api_set(e, NTX_STATUS_INVALID, "refusing to overwrite the model");
	n_layer = lm->m->cfg.n_layer;
	layers = malloc(((size_t)n_layer + 1) * sizeof *layers);
	if (!layers)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	for (l = 0; l < n_layer; l++)
		if (!pl || (!pl->p->layers[l].skip && pl->p->layers[l].home == NTX_TIER_DISK))
			layers[n++] = l;
	if (!n) {
		free(layers);
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "the placement puts no layer on disk: nothing to pack");
	}
	ntx_pack_write_opts_init(&wo);
	wo.compression = x.compression == NTX_COMPRESS_ZSTD ? NTX_PACK_COMP_ZSTD : NTX_PACK_COMP_NONE;
	wo.min_saving = x.min_saving;
	wo.level = x.level;
	wo.split = x.split;
	wo.threads = x.n_threads;
	wo.frame_size = x.frame_size;
	wo.layers = layers;
	wo.n_layers = n;
	wo.progress = x.progress;
	wo.progress_arg = x.user;
	wo.cancel = (volatile sig_atomic_t *)x.cancel;
	rc = ntx_pack_write(lm->m, path, &wo, &ws, &ie);
	free(layers);
	if (rc)
		return ntx_api_fail(e, &ie);
	if (!st)
		return NTX_OK;
	memset(&out, 0, sizeof out);
	out.size = sizeof out;
	out.n_extents = ws.n_extents;
	out.n_compressed = ws.n_compressed;
	out.raw_bytes = ws.raw_bytes;
	out.stored_bytes = ws.stored_bytes;
	out.file_size = ws.file_size;
	out.seconds = ws.seconds;
	return ntx_api_struct_out(st, &out, sizeof out, "ntx_packfile_stats", e);
}

enum ntx_status ntx_packfile_open(const char *path, struct ntx_packfile **out,
				  struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_packfile_open: out is NULL");
	*out = NULL;
	if (!path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_packfile_open: path is NULL");
	*out = calloc(1, sizeof **out);
	if (!*out)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	(*out)->p = ntx_pack_open(path, &ie);
	if (!(*out)->p) {
		free(*out);
		*out = NULL;
		return ntx_api_fail(e, &ie);
	}
	return NTX_OK;
}

void ntx_packfile_close(struct ntx_packfile *pf)
{
	if (!pf)
		return;
	ntx_pack_close(pf->p);
	free(pf);
}

enum ntx_status ntx_packfile_check(const struct ntx_packfile *pf, const struct ntx_placement *pl,
				   struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!pf || !pl)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_packfile_check: %s is NULL",
				   !pf ? "pf" : "pl");
	return ntx_pack_check_plan(pf->p, pl->p, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_packfile_verify(struct ntx_packfile *pf, const struct ntx_lm *lm,
				    const struct ntx_packfile_params *pp,
				    struct ntx_packfile_stats *st, struct ntx_error *e)
{
	struct ntx_packfile_params x;
	struct ntx_packfile_stats out;
	struct ntx_tunables tun; /* NTX_FAULT_READ, ... (tests) */
	struct ntx_err ie = { 0 };
	const struct ntx_pack *p;
	enum ntx_status s;
	double t0 = ntx_now_s();
	int i;

	if (!pf || !lm)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_packfile_verify: %s is NULL",
				   !pf ? "pf" : "lm");
	if ((s = packfile_params(&x, pp, e)))
		return s;
	ntx_tunables_from_env(&tun);
	p = pf->p;
	if (ntx_pack_verify(p, lm->m, x.n_threads, &tun, x.progress, x.user,
			    &ie))
		return ntx_api_fail(e, &ie);
	if (!st)
		return NTX_OK;
	memset(&out, 0, sizeof out);
	out.size = sizeof out;
	out.n_extents = p->n_extents;
	out.raw_bytes = p->raw_bytes;
	out.file_size = p->file_size;
	for (i = 0; i < p->n_extents; i++) {
		out.stored_bytes += p->extents[i].stored_size;
		out.n_compressed += p->extents[i].compression != NTX_PACK_COMP_NONE;
	}
	out.seconds = ntx_now_s() - t0;
	return ntx_api_struct_out(st, &out, sizeof out, "ntx_packfile_stats", e);
}
