/* plan_search.c - the search for the placement that minimises the
 * predicted time per token (resident layers, CPU layers, ring slots; with a
 * draft, the best K), and for a mixture of experts the expert split. Every
 * candidate is accounted by plan.c. doc/plan-json.md, "How the split is
 * chosen" and "The expert split". */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "plan_int.h"

static const char *sz(uint64_t b, char *buf)
{
	return ntx_fmt_size(b, buf, 32);
}

/* ---- the search ---- */

struct search {
	struct ntx_plan *p;
	const int *prio;      /* active layers, most important first */
	int n_act;
	int gpu;
	int slots;
	unsigned char *res;   /* per layer: resident */
	int *nr;              /* non-resident active layers, model order */
	int r_max;            /* most resident items whose bytes fit the VRAM budget */
};

/* Is item j of n among k picked evenly (k of n, first and last picked
 * when k >= 2)? */
static int spread_pick(int j, int k, int n)
{
	if (k <= 0 || n <= 0)
		return 0;
	if (k >= n)
		return 1;
	if (k == 1)
		return j == 0;
	/* pick round(i * (n - 1) / (k - 1)) for i = 0 .. k - 1 */
	{
		long i = ((long)j * (k - 1) + (n - 1) / 2) / (n - 1);

		return (i * (n - 1) + (k - 1) / 2) / (k - 1) == j;
	}
}

/* Build the candidate with the first r items of [head, prio...] resident and
 * kcpu (or, kcpu < 0, every) non-resident layers on the CPU. Returns the
 * number of non-resident layers, or -1 when kcpu exceeds it. */
static int build(struct search *s, int r, int kcpu)
{
	struct ntx_plan *p = s->p;
	const struct ntx_plan_model *pm = &p->model;
	int head_res = s->gpu && r > 0, rl = r - head_res, m = 0, j, l;
	uint64_t head = ntx_plan_head_bytes(pm), fixed, sum = 0, maxb = 0, avail;

	memset(s->res, 0, (size_t)pm->n_layer);
	if (p->by_scores) {
		for (j = 0; j < rl; j++)
			s->res[s->prio[j]] = 1;
	} else {
		/* resident layers spread evenly through the model (first and
		 * last kept): the copy engine then always has a streamed layer
		 * to fetch while resident ones compute */
		for (j = 0; j < s->n_act && rl > 0; j++)
			s->res[s->prio[j]] = spread_pick(j, rl, s->n_act);
	}
	for (l = 0; l < pm->n_layer; l++) {
		struct ntx_plan_layer *L = &p->layers[l];

		if (L->skip)
			continue;
		if (s->res[l]) {
			L->home = NTX_TIER_VRAM;
			L->exec = NTX_EXEC_GPU;
		} else {
			s->nr[m++] = l;
			sum = ntx_plan_sat_add(sum, L->bytes);
			if (L->bytes > maxb)
				maxb = L->bytes;
		}
	}
	if (kcpu < 0)
		kcpu = m;
	if (kcpu > m)
		return -1;
	/* CPU layers spread evenly through the non-resident ones */
	for (j = 0; j < m; j++)
		p->layers[s->nr[j]].exec = spread_pick(j, kcpu, m) ? NTX_EXEC_CPU : NTX_EXEC_GPU;
	p->output_home = head_res ? NTX_TIER_VRAM : NTX_TIER_RAM;
	p->output_exec = head_res ? NTX_EXEC_GPU : NTX_EXEC_CPU;
	/* homes: RAM first-fit in model order, the rest on disk */
	fixed = ntx_plan_sat_add(pm->tok_embd_bytes, pm->other_bytes);
	if (!head_res && !pm->output_tied)
		fixed = ntx_plan_sat_add(fixed, head);
	fixed = ntx_plan_sat_add(fixed, ntx_plan_sat_mul(p->kv_layer_bytes, (uint64_t)kcpu));
	avail = p->ram_budget > fixed ? p->ram_budget - fixed : 0;
	sum = ntx_plan_sat_add(sum, (uint64_t)m * NTX_PLAN_LAYER_PAD);
	if (sum > avail) {
		/* a MoE layer the CPU computes keeps its other weights in RAM
		 * when it goes to disk (xdisk_layer): reserve them for all,
		 * each layer then placed in RAM costs the rest; disk staging
		 * (or the expert cache's least) comes first */
		uint64_t staging, rbs = 0, maxn = 0, xeb = 0;

		for (j = 0; j < m; j++) {
			int l2 = s->nr[j];
			uint64_t rb = ntx_plan_moe_disk_resid(p, l2);

			rbs = ntx_plan_sat_add(rbs, rb);
			if (!rb && p->layers[l2].bytes > maxn)
				maxn = p->layers[l2].bytes;
			if (rb && pm->expert_bytes[l2] > xeb)
				xeb = pm->expert_bytes[l2];
		}
		staging = maxn ? 2 * ntx_plan_layer_buf_bytes(maxn) : 0;
		if (xeb && ntx_plan_xcache_least(pm, xeb) > staging)
			staging = ntx_plan_xcache_least(pm, xeb);
		staging = ntx_plan_sat_add(staging, rbs);
		avail = avail > staging ? avail - staging : 0;
	}
	for (j = 0; j < m; j++) {
		struct ntx_plan_layer *L = &p->layers[s->nr[j]];
		uint64_t need = ntx_plan_layer_buf_bytes(L->bytes);

		if (sum > avail) /* its other weights are reserved already */
			need -= ntx_plan_moe_disk_resid(p, s->nr[j]);
		if (sum <= avail || need <= avail) {
			L->home = NTX_TIER_RAM;
			if (sum > avail)
				avail -= need;
		} else {
			L->home = NTX_TIER_DISK;
		}
	}
	return m;
}

struct cand {
	int ok, r, kcpu;
	double t, t_nondisk;
};

static int better(const struct cand *a, const struct cand *b)
{
	double eps = 1e-9;

	if (!b->ok)
		return 1;
	if (a->t < b->t * (1 - eps))
		return 1;
	if (a->t > b->t * (1 + eps))
		return 0;
	if (a->t_nondisk < b->t_nondisk * (1 - eps))
		return 1;
	if (a->t_nondisk > b->t_nondisk * (1 + eps))
		return 0;
	return a->kcpu < b->kcpu;
}

/* Evaluate kcpu (< 0: all non-resident on the CPU) at the largest r whose
 * VRAM use fits. Returns the candidate; on failure *fail/ferr hold why. */
static struct cand evaluate(struct search *s, int kcpu, struct ntx_plan_fail *fail,
			    struct ntx_err *ferr)
{
	struct cand c = { 0, 0, kcpu, 0, 0 };
	int r;

	/* no more resident than the weights alone allow: saves the scan most
	 * of its steps */
	for (r = s->gpu ? s->r_max : 0; r >= 0; r--) {
		struct ntx_plan_fail f;
		struct ntx_err e = { 0, "" };
		int m = build(s, r, kcpu);

		if (m < 0)
			continue;
		if (ntx_plan_account_ex(s->p, s->slots, &f, &e) == 0) {
			c.ok = 1;
			c.r = r;
			c.kcpu = kcpu < 0 ? m : kcpu;
			c.t = f.t;
			c.t_nondisk = f.t_nondisk;
			return c;
		}
		/* VRAM short: fewer resident layers; RAM or disk short: fewer
		 * resident layers only makes it worse */
		if (f.what == NTX_PLAN_SHORT_VRAM && r > 0)
			continue;
		if (!ferr->code || (e.code == NTX_ENOFIT && ferr->code == NTX_ENOFIT &&
				    f.short_bytes < fail->short_bytes)) {
			*fail = f;
			*ferr = e;
		}
		return c;
	}
	return c;
}

static const double *g_scores; /* qsort has no context argument */

static int cmp_prio(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	double sx = g_scores[x], sy = g_scores[y];
	int nx = isnan(sx), ny = isnan(sy);

	if (nx != ny)
		return nx - ny;
	if (!nx && sx != sy)
		return sx < sy ? -1 : 1;
	return x - y;
}

static double resolve_bw(double given, double detected, enum ntx_src dsrc, double def,
			 enum ntx_src *src)
{
	if (given > 0) {
		*src = NTX_SRC_OVERRIDE;
		return ntx_plan_round6(given);
	}
	if (detected > 0) {
		*src = dsrc == NTX_SRC_PROBE || dsrc == NTX_SRC_LINK || dsrc == NTX_SRC_CACHE ?
			       dsrc : NTX_SRC_DEFAULT;
		return ntx_plan_round6(detected);
	}
	*src = NTX_SRC_DEFAULT;
	return def;
}

/* Measured on this machine: now (--probe) or by an earlier probe (cache). */
static int measured(enum ntx_src s)
{
	return s == NTX_SRC_PROBE || s == NTX_SRC_CACHE;
}

/* The CPU rate for this model from per-type probe rates: bytes-weighted
 * harmonic mean over the layers' types (0 when nothing applies). */
static double type_rate_for_model(const struct ntx_plan_model *pm, const double *rate)
{
	double bytes = 0, secs = 0;
	int t;

	for (t = 0; t < NTX_TYPE_COUNT; t++) {
		if (!pm->layer_type_bytes[t] || rate[t] <= 0)
			continue;
		bytes += (double)pm->layer_type_bytes[t];
		secs += (double)pm->layer_type_bytes[t] / rate[t];
	}
	return secs > 0 ? bytes / secs : 0;
}

static double cpu_rate_for_model(const struct ntx_plan_model *pm, const struct ntx_plan_hw *hw)
{
	return type_rate_for_model(pm, hw->cpu_type_gbps);
}

static double cpu_batch_rate_for_model(const struct ntx_plan_model *pm,
				       const struct ntx_plan_hw *hw)
{
	return type_rate_for_model(pm, hw->cpu_type_batch_gbps);
}

static int validate_inputs(const struct ntx_plan_model *pm, const struct ntx_plan_opts *o,
			   struct ntx_err *err)
{
	int i;

	if (pm->n_layer < 1 || !pm->layer_bytes)
		return ntx_err_set(err, NTX_EINVAL, "model has no layers");
	if (pm->n_embd < 1 || pm->n_head < 1 || pm->n_head_kv < 1 || pm->head_dim < 1 ||
	    pm->n_ff < 1 || pm->n_vocab < 1)
		return ntx_err_set(err, NTX_EINVAL, "model has invalid hyperparameters");
	if (o->n_ctx < 0 || o->n_seq < 0 || o->n_ubatch < 0)
		return ntx_err_set(err, NTX_EINVAL, "negative context, batch or ubatch size");
	if (o->ring_slots && (o->ring_slots < 2 || o->ring_slots > 64))
		return ntx_err_set(err, NTX_EINVAL, "ring slots %d out of range [2, 64]",
				   o->ring_slots);
	if (o->executor < NTX_POLICY_AUTO || o->executor > NTX_POLICY_CPU)
		return ntx_err_set(err, NTX_EINVAL, "unknown executor policy %d", o->executor);
	if (o->kv_type != NTX_KV_F16 && o->kv_type != NTX_KV_F32)
		return ntx_err_set(err, NTX_EINVAL, "unknown KV type %d", (int)o->kv_type);
	for (i = 0; i < o->n_skip; i++)
		if (o->skip[i] < 0 || o->skip[i] >= pm->n_layer)
			return ntx_err_set(err, NTX_EINVAL,
					   "skip layer %d is out of range (model has %d layers)",
					   o->skip[i], pm->n_layer);
	return 0;
}

/* Bandwidths of the plan: a given option, else a probed rate, else the
 * default (the CPU ones scale with the cores). */
static void plan_resolve_bandwidths(struct ntx_plan *p, const struct ntx_plan_model *pm,
				    const struct ntx_plan_hw *hw, const struct ntx_plan_opts *o)
{
	double def = NTX_PLAN_CPU_GBPS_PER_CORE * (hw->cpu_cores > 0 ? hw->cpu_cores : 1);
	double det = measured(hw->cpu_src) ? cpu_rate_for_model(pm, hw) : 0;

	p->hw = *hw;
	p->hw.h2d_gbps = resolve_bw(o->h2d_gbps, hw->h2d_gbps, hw->h2d_src,
				    NTX_PLAN_DEFAULT_H2D_GBPS, &p->hw.h2d_src);
	p->hw.disk_gbps = resolve_bw(o->disk_gbps, hw->disk_gbps, hw->disk_src,
				     NTX_PLAN_DEFAULT_DISK_GBPS, &p->hw.disk_src);
	p->hw.gpu_gbps = resolve_bw(o->gpu_gbps, hw->gpu_gbps, hw->gpu_src,
				    NTX_PLAN_DEFAULT_GPU_GBPS, &p->hw.gpu_src);
	if (def > NTX_PLAN_CPU_GBPS_MAX)
		def = NTX_PLAN_CPU_GBPS_MAX;
	if (det <= 0)
		det = measured(hw->cpu_src) ? hw->cpu_gbps : 0;
	p->hw.cpu_gbps = resolve_bw(o->cpu_gbps, det, hw->cpu_src, def, &p->hw.cpu_src);
	def = NTX_PLAN_CPU_BATCH_GBPS_PER_CORE * (hw->cpu_cores > 0 ? hw->cpu_cores : 1);
	det = measured(hw->cpu_batch_src) ? cpu_batch_rate_for_model(pm, hw) : 0;
	if (det <= 0)
		det = measured(hw->cpu_batch_src) ? hw->cpu_batch_gbps : 0;
	p->hw.cpu_batch_gbps = resolve_bw(o->cpu_batch_gbps, det, hw->cpu_batch_src, def,
					  &p->hw.cpu_batch_src);
}

/* VRAM, RAM and disk budgets (given, else detected) and the VRAM margin. */
static void plan_resolve_budgets(struct ntx_plan *p, const struct ntx_plan_hw *hw,
				 const struct ntx_plan_opts *o)
{
	if (o->vram_budget >= 0) {
		p->vram_budget = (uint64_t)o->vram_budget;
		p->vram_budget_src = NTX_SRC_OVERRIDE;
	} else {
		p->vram_budget = hw->gpu_present ? hw->vram_free : 0;
		p->vram_budget_src = NTX_SRC_DETECTED;
	}
	if (o->ram_budget >= 0) {
		p->ram_budget = (uint64_t)o->ram_budget;
		p->ram_budget_src = NTX_SRC_OVERRIDE;
	} else {
		p->ram_budget = hw->ram_available > NTX_PLAN_RAM_HEADROOM ?
					hw->ram_available - NTX_PLAN_RAM_HEADROOM : 0;
		p->ram_budget_src = NTX_SRC_DETECTED;
	}
	if (o->disk_budget >= 0) {
		p->disk_budget = (uint64_t)o->disk_budget;
		p->disk_budget_src = NTX_SRC_OVERRIDE;
	} else {
		p->disk_budget = hw->disk_free;
		p->disk_budget_src = NTX_SRC_DETECTED;
	}
	p->margin_bytes = p->vram_budget > 0 ?
		(o->reserve >= 0 ? (uint64_t)o->reserve : NTX_PLAN_DEFAULT_MARGIN) : 0;
}

/* Context, KV type, sequences, ubatch, executor, pack path and the draft
 * (which needs a GPU). */
static int plan_set_run_params(struct ntx_plan *p, int gpu, const struct ntx_plan_model *pm,
			       const struct ntx_plan_hw *hw, const struct ntx_plan_opts *o,
			       struct ntx_err *err)
{
	p->n_ctx = o->n_ctx > 0 ? o->n_ctx : (pm->n_ctx_train > 0 && pm->n_ctx_train < 4096 ?
						       pm->n_ctx_train : 4096);
	p->kv_type = o->kv_type;
	p->n_seq = o->n_seq > 0 ? o->n_seq : 1;
	p->n_ubatch = o->n_ubatch > 0 ? o->n_ubatch : NTX_PLAN_DEFAULT_UBATCH;
	p->executor = o->executor;
	p->by_scores = o->scores != NULL;
	p->tok_embd_home = NTX_TIER_RAM;
	p->pack_path = o->pack_path ? strdup(o->pack_path) : ntx_plan_default_pack_path(pm->path);
	if (!p->pack_path)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	p->kv_layer_bytes = ntx_plan_kv_layer_bytes(pm, p->n_ctx, p->kv_type, p->n_seq);
	p->n_verify = 1;
	if (!o->draft_path)
		return 0;
	p->draft_path = strdup(o->draft_path);
	if (!p->draft_path)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (!gpu)
		return ntx_err_set(err, NTX_EINVAL,
				   "--draft plans a draft resident in VRAM, but the VRAM budget is 0");
	p->draft_vram_bytes = o->draft_vram_bytes;
	p->n_verify = (o->draft_k > 0 ? o->draft_k : 8) + 1;
	p->draft_accept = o->draft_accept > 0 ? o->draft_accept : 0.7;
	p->draft_token_ms = ntx_plan_round6(
		((double)o->draft_token_bytes / (hw->gpu_gbps > 0 ? hw->gpu_gbps * 1e9 : 2e12) +
		 (o->draft_layers + 1) * NTX_PLAN_LAYER_OVERHEAD_S) * 1e3);
	return 0;
}

/* Fill p->layers (all in RAM on the CPU, the skip set marked) and prio with
 * the active layers, most important first. Returns the number of them. */
static int plan_init_layers(struct ntx_plan *p, const struct ntx_plan_model *pm,
			    const struct ntx_plan_opts *o, int *prio)
{
	int l, k, n_act = 0;

	for (l = 0; l < pm->n_layer; l++) {
		p->layers[l].index = l;
		p->layers[l].bytes = pm->layer_bytes[l];
		p->layers[l].home = NTX_TIER_RAM;
		p->layers[l].exec = NTX_EXEC_CPU;
	}
	for (k = 0; k < o->n_skip; k++)
		p->layers[o->skip[k]].skip = 1;
	for (l = 0; l < pm->n_layer; l++)
		if (!p->layers[l].skip)
			prio[n_act++] = l;
	if (o->scores) {
		g_scores = o->scores;
		qsort(prio, (size_t)n_act, sizeof *prio, cmp_prio);
		g_scores = NULL;
	}
	return n_act;
}

/* What must fit in VRAM whatever the split (KV cache, workspace, margin,
 * other tensors, the draft): an ENOFIT error that names the largest part
 * when it does not. */
static int check_fixed_vram(const struct ntx_plan *p, int gpu, int n_act,
			    const struct ntx_plan_model *pm, const struct ntx_plan_opts *o,
			    struct ntx_err *err)
{
	uint64_t kv_all = ntx_plan_sat_mul(p->kv_layer_bytes, (uint64_t)n_act), fixed;
	char a[32], b[32], c[32], d[32], e[32], f[32], g[32];

	if (o->executor == NTX_POLICY_GPU && !gpu)
		return ntx_err_set(err, NTX_ENOFIT,
			    "does not fit: --executor gpu needs a GPU, but the VRAM budget is 0 (%s)",
			    p->vram_budget_src == NTX_SRC_OVERRIDE ? "--vram-budget 0" : "no GPU detected");
	if (gpu) {
		uint64_t ws = ntx_plan_workspace_bytes(pm, p->n_ctx, p->n_ubatch, p->n_seq);
		uint64_t res = ntx_plan_sat_add(ntx_plan_sat_add(ws, p->margin_bytes), pm->other_bytes);

		res = ntx_plan_sat_add(res, p->draft_vram_bytes);
		uint64_t kv = o->executor == NTX_POLICY_CPU ? 0 : kv_all;

		fixed = ntx_plan_sat_add(kv, res);
		if (fixed > p->vram_budget) {
			uint64_t mg = p->margin_bytes, ot = pm->other_bytes;
			int kv_big = kv >= ws && kv >= mg && kv >= ot;

			if (kv_big)
				return ntx_err_set(err, NTX_ENOFIT,
					    "does not fit: KV cache (%s for %d layers, ctx %d, %s, %d seq) + reserves (%s) exceed the VRAM budget (%s) by %s; lower --ctx%s or use --executor cpu",
					    sz(kv, a), n_act, p->n_ctx, p->kv_type == NTX_KV_F32 ? "f32" : "f16",
					    p->n_seq, sz(res, b), sz(p->vram_budget, c),
					    sz(fixed - p->vram_budget, d),
					    p->kv_type == NTX_KV_F32 ? ", use --kv-type f16" : "");
			if (p->draft_vram_bytes >= ws && p->draft_vram_bytes >= mg &&
			    p->draft_vram_bytes >= ot)
				return ntx_err_set(err, NTX_ENOFIT,
					    "does not fit: the --draft model (%s: weights, KV cache and workspace) + reserves (%s)%s%s exceed the VRAM budget (%s) by %s; give a larger --vram-budget or a smaller draft",
					    sz(p->draft_vram_bytes, a), sz(res - p->draft_vram_bytes, b),
					    kv ? " + KV cache " : "", kv ? sz(kv, d) : "",
					    sz(p->vram_budget, e), sz(fixed - p->vram_budget, f));
			/* name the largest part and what changes it */
			return ntx_err_set(err, NTX_ENOFIT,
				    "does not fit: reserves (margin %s%s + workspace %s + other tensors %s%s%s)%s%s exceed the VRAM budget (%s) by %s; %s",
				    sz(mg, a), o->reserve >= 0 ? " from --reserve" : " (the --reserve default)",
				    sz(ws, b), sz(ot, c), p->draft_vram_bytes ? " + --draft model " : "",
				    p->draft_vram_bytes ? sz(p->draft_vram_bytes, g) : "",
				    kv ? " + KV cache " : "", kv ? sz(kv, d) : "",
				    sz(p->vram_budget, e), sz(fixed - p->vram_budget, f),
				    mg >= ws && mg >= ot ? "lower --reserve (the VRAM kept free for the CUDA context and other programs), e.g. --reserve 64M" :
				    ws >= ot ? "lower --ubatch or --ctx" :
				    "give a larger --vram-budget, or --vram-budget 0 to run on the CPU");
		}
	}
	return 0;
}

/* s->r_max: the most resident items (head first, then layers by priority)
 * whose bytes alone fit the VRAM budget. */
static void set_max_resident(struct search *s, const struct ntx_plan_model *pm)
{
	uint64_t used = ntx_plan_sat_add(ntx_plan_head_bytes(pm), 0);
	int k;

	s->r_max = used <= s->p->vram_budget ? 1 : 0;
	for (k = 0; s->r_max == k + 1 && k < s->n_act; k++) {
		used = ntx_plan_sat_add(used, ntx_plan_layer_buf_bytes(pm->layer_bytes[s->prio[k]]));
		if (used <= s->p->vram_budget)
			s->r_max++;
	}
	if (s->r_max == 0) /* the head alone does not fit: layers may */
		s->r_max = s->n_act + 1;
}

/* The fastest candidate with kcpu in [kmin, kmax] for s->slots ring slots:
 * every k up to 256 layers; beyond (hostile or future models), a grid of
 * 257 values refined around the best. */
static struct cand search_cpu_layers(struct search *s, int kmin, int kmax,
				     struct ntx_plan_fail *fail, struct ntx_err *ferr)
{
	int step = kmax - kmin > 256 ? (kmax - kmin + 255) / 256 : 1, pass, k;
	struct cand b1 = { 0 };

	for (pass = 0; pass < (step > 1 ? 2 : 1); pass++) {
		int lo = kmin, hi = kmax, st = step;

		if (pass) {
			lo = b1.ok && b1.kcpu - step > kmin ? b1.kcpu - step : kmin;
			hi = b1.ok && b1.kcpu + step < kmax ? b1.kcpu + step : kmax;
			st = 1;
		}
		for (k = lo; k <= hi; k += st) {
			struct cand c1 = evaluate(s, k, fail, ferr);

			if (c1.ok && better(&c1, &b1))
				b1 = c1;
			if (st > 1 && k < hi && k + st > hi)
				k = hi - st; /* always try hi */
		}
	}
	return b1;
}

/* ---- the expert split ---- */

/* Every active layer resident, each MoE layer's m most chosen experts in
 * VRAM (rank: per layer its experts by descending routing count, or in
 * index order without counts, when every expert is as likely as any) and
 * the rest in RAM for the CPU; cpu_hit from the counts. */
static void split_set(struct ntx_plan *p, int m, const int *rank, const uint64_t *counts)
{
	const struct ntx_plan_model *pm = &p->model;
	int l, x, NE = pm->n_expert;

	for (l = 0; l < pm->n_layer; l++) {
		struct ntx_plan_layer *L = &p->layers[l];
		uint8_t *f = p->cpu_exp + (size_t)l * NE;
		uint64_t all = 0, cpu = 0;

		if (L->skip)
			continue;
		L->home = NTX_TIER_VRAM;
		L->exec = NTX_EXEC_GPU;
		L->n_cpu_exp = pm->expert_bytes[l] ? NE - m : 0;
		for (x = 0; x < NE; x++)
			f[rank[(size_t)l * NE + x]] = L->n_cpu_exp > 0 && x >= m;
		L->cpu_hit = ntx_plan_round6((double)L->n_cpu_exp / NE);
		if (!counts || !L->n_cpu_exp)
			continue;
		for (x = 0; x < NE; x++) {
			all += counts[(size_t)l * NE + x];
			cpu += f[x] ? counts[(size_t)l * NE + x] : 0;
		}
		if (all)
			L->cpu_hit = ntx_plan_round6((double)cpu / (double)all);
	}
}

static const uint64_t *g_rank_counts; /* qsort has no context argument */

static int cmp_count(const void *a, const void *b)
{
	uint64_t ca = g_rank_counts[*(const int *)a], cb = g_rank_counts[*(const int *)b];

	if (ca != cb)
		return ca > cb ? -1 : 1;
	return *(const int *)a - *(const int *)b;
}

/* Per layer its experts, most chosen first (index order without counts). */
static int *rank_experts(const struct ntx_plan_model *pm, const uint64_t *counts)
{
	int NE = pm->n_expert, l, x;
	int *r = malloc((size_t)pm->n_layer * (size_t)NE * sizeof *r);

	if (!r)
		return NULL;
	for (l = 0; l < pm->n_layer; l++) {
		int *rl = r + (size_t)l * NE;

		for (x = 0; x < NE; x++)
			rl[x] = x;
		if (counts) {
			g_rank_counts = counts + (size_t)l * NE;
			qsort(rl, (size_t)NE, sizeof *rl, cmp_count);
		}
	}
	return r;
}

/* With routing counts: the M most chosen experts of the whole model in
 * VRAM (order: every (layer, expert) by descending count), wherever they
 * are; the rest on the CPU. */
static void split_set_global(struct ntx_plan *p, int M, const int *order, const uint64_t *counts)
{
	const struct ntx_plan_model *pm = &p->model;
	int l, x, i, NE = pm->n_expert, n = pm->n_layer * NE;

	for (i = 0; i < n; i++) {
		l = order[i] / NE;
		p->cpu_exp[order[i]] = i >= M && pm->expert_bytes[l] && !p->layers[l].skip;
	}
	for (l = 0; l < pm->n_layer; l++) {
		struct ntx_plan_layer *L = &p->layers[l];
		uint64_t all = 0, cpu = 0;

		if (L->skip)
			continue;
		L->home = NTX_TIER_VRAM;
		L->exec = NTX_EXEC_GPU;
		L->n_cpu_exp = 0;
		for (x = 0; x < NE; x++) {
			uint64_t c = counts[(size_t)l * NE + x];

			L->n_cpu_exp += p->cpu_exp[(size_t)l * NE + x];
			all += c;
			cpu += p->cpu_exp[(size_t)l * NE + x] ? c : 0;
		}
		L->cpu_hit = ntx_plan_round6(all ? (double)cpu / (double)all
						 : (double)L->n_cpu_exp / NE);
	}
}

/* By descending count; equal counts layer after layer: a layer whose
 * experts all stay in VRAM has no CPU work to wait for. */
static int cmp_count_all(const void *a, const void *b)
{
	int ia = *(const int *)a, ib = *(const int *)b;
	uint64_t ca = g_rank_counts[ia], cb = g_rank_counts[ib];

	if (ca != cb)
		return ca > cb ? -1 : 1;
	return ia - ib;
}

/* The split with the most of the model's most chosen experts that fit;
 * the number kept, or -1 when none fits. */
static int fit_global(struct ntx_plan *p, int slots, const uint64_t *counts, int **order_out)
{
	const struct ntx_plan_model *pm = &p->model;
	int n = pm->n_layer * pm->n_expert, i, lo = -1, hi = n;
	int *order = malloc((size_t)n * sizeof *order);

	*order_out = order;
	if (!order)
		return -1;
	for (i = 0; i < n; i++)
		order[i] = i;
	g_rank_counts = counts;
	qsort(order, (size_t)n, sizeof *order, cmp_count_all);
	while (lo < hi) {
		int m = (lo + hi + 1) / 2;

		split_set_global(p, m, order, counts);
		if (ntx_plan_account_ex(p, slots, NULL, &(struct ntx_err){ 0, "" }) == 0)
			lo = m;
		else
			hi = m - 1;
	}
	return lo;
}

static double plan_rate(const struct ntx_plan *p)
{
	return p->predicted_spec_tok_per_s > 0 ? p->predicted_spec_tok_per_s : p->predicted_tok_per_s;
}

/* The planner's own split: the most of the model's experts that fit in
 * VRAM, taken in order of their routing counts over all layers (without
 * counts, layer after layer, as llama.cpp's --n-cpu-moe the other way
 * round: a layer whose experts all stay in VRAM has no CPU work to wait
 * for), kept when it predicts more tokens per second than the layer plan
 * (p->layers on entry, accounted), else that plan restored. */
static int auto_split(struct ntx_plan *p, const struct ntx_plan_opts *o, int slots,
		      struct ntx_err *err)
{
	const struct ntx_plan_model *pm = &p->model;
	size_t ne = (size_t)pm->n_layer * (size_t)pm->n_expert, i;
	struct ntx_plan_layer *keep = malloc((size_t)pm->n_layer * sizeof *keep);
	uint64_t *ones = o->expert_counts ? NULL : malloc(ne * sizeof *ones);
	const uint64_t *cnts = o->expert_counts ? o->expert_counts : ones;
	double before = plan_rate(p);
	int *order = NULL, M = -1;

	for (i = 0; ones && i < ne; i++)
		ones[i] = 1;
	if (keep && cnts) {
		memcpy(keep, p->layers, (size_t)pm->n_layer * sizeof *keep);
		M = fit_global(p, slots, cnts, &order);
	}
	if (M >= 0) {
		split_set_global(p, M, order, cnts);
		if (ntx_plan_account_ex(p, slots, NULL, &(struct ntx_err){ 0, "" }) == 0 &&
		    plan_rate(p) > before)
			goto done;
	}
	if (keep) /* back to the layer plan */
		memcpy(p->layers, keep, (size_t)pm->n_layer * sizeof *keep);
	free(p->cpu_exp);
	p->cpu_exp = NULL;
done:
	free(order);
	free(ones);
	if (!keep || !cnts) {
		free(keep);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	free(keep);
	return ntx_plan_account_ex(p, slots, NULL, err);
}

/* With experts and a GPU: the expert split instead of the layer plan p
 * (accounted), when asked (o->vram_experts >= 0: that many experts per
 * layer in VRAM, the most chosen ones) or, with the auto executor and
 * NTX_EXPERT_SPLIT, when some layer is not resident (auto_split). */
static int try_expert_split(struct ntx_plan *p, const struct ntx_plan_opts *o, int slots,
			    struct ntx_err *err)
{
	const struct ntx_plan_model *pm = &p->model;
	int l, want = o->vram_experts, off = 0;

	if (want >= 0 && (pm->n_expert <= 0 || !pm->expert_bytes))
		return ntx_err_set(err, NTX_EINVAL,
				   "--vram-experts %d: the model has no experts (or the planner was not given their sizes: plan from the GGUF)",
				   want);
	if (pm->n_expert <= 0 || !pm->expert_bytes)
		return 0;
	if (want >= 0 && p->vram_budget == 0)
		return ntx_err_set(err, NTX_EINVAL,
				   "--vram-experts %d keeps experts in VRAM, but there is no GPU (or the VRAM budget is 0)",
				   want);
	if (want >= 0 && o->executor != NTX_POLICY_AUTO)
		return ntx_err_set(err, NTX_EINVAL,
				   "--vram-experts %d: the experts left in RAM are computed by the CPU beside the GPU, which --executor %s rules out (drop it)",
				   want, ntx_policy_name(o->executor));
	if (want < 0) {
		if (p->vram_budget == 0 || o->executor != NTX_POLICY_AUTO || !o->auto_expert_split)
			return 0;
		for (l = 0; l < pm->n_layer; l++)
			off |= !p->layers[l].skip && p->layers[l].home != NTX_TIER_VRAM;
		if (!off)
			return 0;
	}
	p->cpu_exp = calloc((size_t)pm->n_layer, (size_t)pm->n_expert);
	if (!p->cpu_exp)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (want >= 0) {
		int *rank = rank_experts(pm, o->expert_counts);

		if (!rank)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		split_set(p, want < pm->n_expert ? want : pm->n_expert, rank, o->expert_counts);
		free(rank);
		return ntx_plan_account_ex(p, slots, NULL, err);
	}
	return auto_split(p, o, slots, err);
}

static int plan_compute_one(const struct ntx_plan_model *pm, const struct ntx_plan_hw *hw,
		     const struct ntx_plan_opts *o, struct ntx_plan **out, struct ntx_err *err)
{
	struct ntx_plan *p;
	struct search s = { 0 };
	struct ntx_plan_fail fail = { 0 };
	struct ntx_err ferr = { 0, "" };
	struct cand best = { 0 };
	int best_slots = NTX_PLAN_DEFAULT_RING_SLOTS;
	int kmin, kmax, *prio = NULL;

	*out = NULL;
	if (validate_inputs(pm, o, err))
		return -1;
	p = calloc(1, sizeof *p);
	if (!p)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (ntx_plan_model_copy(&p->model, pm, err)) {
		free(p);
		return -1;
	}
	p->layers = calloc((size_t)pm->n_layer, sizeof *p->layers);
	prio = malloc((size_t)pm->n_layer * sizeof *prio);
	s.res = malloc((size_t)pm->n_layer);
	s.nr = malloc((size_t)pm->n_layer * sizeof *s.nr);
	if (!p->layers || !prio || !s.res || !s.nr) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}

	plan_resolve_bandwidths(p, pm, hw, o);
	plan_resolve_budgets(p, hw, o);
	s.gpu = p->vram_budget > 0;
	s.slots = o->ring_slots ? o->ring_slots : NTX_PLAN_DEFAULT_RING_SLOTS;
	if (plan_set_run_params(p, s.gpu, pm, hw, o, err))
		goto fail;
	s.p = p;
	s.prio = prio;
	s.n_act = plan_init_layers(p, pm, o, prio);
	if (check_fixed_vram(p, s.gpu, s.n_act, pm, o, err))
		goto fail;

	/* the search: for each number of CPU-executed layers, the most resident
	 * layers that fit; keep the fastest */
	if (!s.gpu || o->executor == NTX_POLICY_CPU) {
		kmin = kmax = -1;
	} else if (o->executor == NTX_POLICY_GPU) {
		kmin = kmax = 0;
	} else {
		kmin = 0;
		kmax = s.n_act;
	}
	if (s.gpu)
		set_max_resident(&s, pm);
	/* without --ring-slots: 3 ring slots, or 2 when the slot it frees for
	 * a resident layer is worth more than the lead it costs (streaming
	 * without CPU layers between) */
	for (int sl = 0; sl < (o->ring_slots ? 1 : 2); sl++) {
		struct cand b1;

		s.slots = o->ring_slots ? o->ring_slots : NTX_PLAN_DEFAULT_RING_SLOTS - sl;
		b1 = search_cpu_layers(&s, kmin, kmax, &fail, &ferr);
		if (b1.ok && better(&b1, &best)) {
			best = b1;
			best_slots = s.slots;
		}
	}
	s.slots = best_slots;
	if (!best.ok) {
		if (ferr.code)
			*err = ferr;
		else
			ntx_err_set(err, NTX_ENOFIT, "does not fit: no placement fits the budgets");
		goto fail;
	}
	build(&s, best.r, kmin < 0 ? -1 : best.kcpu);
	if (ntx_plan_account_ex(p, s.slots, NULL, err) || try_expert_split(p, o, s.slots, err))
		goto fail;
	if (!p->disk_layers_bytes) {
		free(p->pack_path);
		p->pack_path = NULL;
	}
	free(prio);
	free(s.res);
	free(s.nr);
	*out = p;
	return 0;
fail:
	free(prio);
	free(s.res);
	free(s.nr);
	ntx_plan_free(p);
	return -1;
}

/* With a draft and no fixed K: the plan (and K) that predicts the most
 * tokens per second; passes of K + 1 tokens cost more on CPU-executed
 * layers, so each K gets its own placement. */
int ntx_plan_compute(const struct ntx_plan_model *pm, const struct ntx_plan_hw *hw,
		     const struct ntx_plan_opts *o, struct ntx_plan **out, struct ntx_err *err)
{
	static const int ks[] = { 1, 2, 3, 4, 6, 8, 12, 16 };
	struct ntx_plan_opts oo = *o;
	struct ntx_plan *best = NULL, *q;
	size_t i;

	if (!o->draft_path || o->draft_k > 0)
		return plan_compute_one(pm, hw, o, out, err);
	for (i = 0; i < sizeof ks / sizeof ks[0]; i++) {
		oo.draft_k = ks[i];
		if (plan_compute_one(pm, hw, &oo, &q, err)) {
			ntx_plan_free(best);
			return -1;
		}
		if (!best || q->predicted_spec_tok_per_s > best->predicted_spec_tok_per_s) {
			ntx_plan_free(best);
			best = q;
		} else {
			ntx_plan_free(q);
		}
	}
	*out = best;
	return 0;
}
