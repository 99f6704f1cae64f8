/* plan.c - the placement planner: reserves, accounting, the search for the
 * split that minimises predicted time per token, and the human summary.
 * JSON reading and writing live in plan_json.c. The engine model and every
 * formula are documented in doc/plan-json.md. */
#include "plan.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "parse.h"
#include "plan_int.h"

/* ---- names ---- */

const char *ntx_tier_name(enum ntx_tier t)
{
	switch (t) {
	case NTX_TIER_VRAM: return "vram";
	case NTX_TIER_RAM: return "ram";
	case NTX_TIER_DISK: return "disk";
	}
	return "?";
}

const char *ntx_exec_name(enum ntx_exec e)
{
	switch (e) {
	case NTX_EXEC_GPU: return "gpu";
	case NTX_EXEC_CPU: return "cpu";
	}
	return "?";
}

const char *ntx_src_name(enum ntx_src s)
{
	switch (s) {
	case NTX_SRC_DEFAULT: return "default";
	case NTX_SRC_DETECTED: return "detected";
	case NTX_SRC_OVERRIDE: return "override";
	case NTX_SRC_PROBE: return "probe";
	case NTX_SRC_LINK: return "link";
	case NTX_SRC_CACHE: return "cache";
	}
	return "?";
}

const char *ntx_policy_name(int policy)
{
	switch (policy) {
	case NTX_POLICY_AUTO: return "auto";
	case NTX_POLICY_GPU: return "gpu";
	case NTX_POLICY_CPU: return "cpu";
	}
	return "?";
}

/* ---- small helpers ---- */

uint64_t ntx_plan_sat_add(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t ntx_plan_sat_mul(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

double ntx_plan_round6(double x)
{
	char buf[64];

	if (!isfinite(x))
		return x;
	snprintf(buf, sizeof buf, "%.6g", x);
	return strtod(buf, NULL);
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return ntx_plan_sat_add(v, a - 1) / a * a;
}

uint64_t ntx_plan_layer_buf_bytes(uint64_t layer_bytes)
{
	return ntx_plan_sat_add(layer_bytes, NTX_PLAN_LAYER_PAD);
}

double ntx_plan_gpu_mma_cost(int n_tok)
{
	double c = 0;

	if (n_tok < 1)
		n_tok = 1;
	if (n_tok > 64)
		n_tok = 64;
	for (; n_tok > 0; n_tok -= 8) {
		int k = n_tok > 8 ? 8 : n_tok;

		c += k == 1 ? 1 : 1 + NTX_PLAN_GPU_MMA_FIRST + NTX_PLAN_GPU_MMA_TOKEN * k;
	}
	return c;
}

double ntx_plan_gpu_batch_cost(int n_tok)
{
	double c = 0;

	if (n_tok < 1)
		n_tok = 1;
	if (n_tok > 64) /* larger batches take the matrix-matrix path */
		n_tok = 64;
	for (; n_tok > 0; n_tok -= 8)
		c += 1 + NTX_PLAN_GPU_TOKEN_COST * ((n_tok > 8 ? 8 : n_tok) - 1);
	return c;
}

static uint64_t head_bytes(const struct ntx_plan_model *pm)
{
	return pm->output_tied ? pm->tok_embd_bytes : pm->output_bytes;
}

/* ---- options, model ---- */

void ntx_plan_opts_init(struct ntx_plan_opts *o)
{
	memset(o, 0, sizeof *o);
	o->vram_budget = -1;
	o->ram_budget = -1;
	o->disk_budget = -1;
	o->reserve = -1;
	o->kv_type = NTX_KV_F16;
	o->executor = NTX_POLICY_AUTO;
	o->vram_experts = -1;
}

void ntx_plan_model_free(struct ntx_plan_model *pm)
{
	if (!pm)
		return;
	free(pm->path);
	free(pm->layer_bytes);
	free(pm->expert_bytes);
	pm->path = NULL;
	pm->layer_bytes = NULL;
	pm->expert_bytes = NULL;
}

int ntx_plan_model_copy(struct ntx_plan_model *dst, const struct ntx_plan_model *src,
			struct ntx_err *err)
{
	*dst = *src;
	dst->path = NULL;
	dst->layer_bytes = NULL;
	dst->expert_bytes = NULL;
	if (src->path && !(dst->path = strdup(src->path)))
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (src->n_layer > 0) {
		size_t n = (size_t)src->n_layer * sizeof *dst->layer_bytes;

		dst->layer_bytes = malloc(n);
		if (src->expert_bytes)
			dst->expert_bytes = malloc(n);
		if (!dst->layer_bytes || (src->expert_bytes && !dst->expert_bytes)) {
			ntx_plan_model_free(dst);
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		}
		memcpy(dst->layer_bytes, src->layer_bytes, n);
		if (src->expert_bytes)
			memcpy(dst->expert_bytes, src->expert_bytes, n);
	}
	return 0;
}

int ntx_plan_model_from_model(const struct ntx_model *m, struct ntx_plan_model *pm,
			      struct ntx_err *err)
{
	const struct ntx_llama_config *c = &m->cfg;
	uint64_t i;
	int l;

	memset(pm, 0, sizeof *pm);
	if (!m->layers || c->n_layer < 1)
		return ntx_err_set(err, NTX_EFORMAT, "model has no layers");
	pm->path = strdup(m->gguf->path ? m->gguf->path : "");
	pm->layer_bytes = calloc((size_t)c->n_layer, sizeof *pm->layer_bytes);
	if (!pm->path || !pm->layer_bytes) {
		ntx_plan_model_free(pm);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	pm->file_size = m->gguf->file_size;
	memcpy(pm->fingerprint, m->fingerprint_hex, sizeof pm->fingerprint);
	pm->n_layer = c->n_layer;
	pm->n_embd = c->n_embd;
	pm->n_ff = c->n_ff;
	pm->n_head = c->n_head;
	pm->n_head_kv = c->n_head_kv;
	pm->head_dim = c->head_dim;
	pm->n_ctx_train = c->n_ctx_train;
	pm->n_vocab = c->n_vocab;
	for (l = 0; l < c->n_layer; l++)
		pm->layer_bytes[l] = m->layers[l].bytes;
	if (c->n_expert > 0) {
		pm->n_expert = c->n_expert;
		pm->n_expert_used = c->n_expert_used;
		pm->expert_bytes = calloc((size_t)c->n_layer, sizeof *pm->expert_bytes);
		if (!pm->expert_bytes) {
			ntx_plan_model_free(pm);
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		}
		for (l = 0; l < c->n_layer; l++) {
			const struct ntx_layer_tensors *lt = &m->layers[l];

			if (lt->w_gate && lt->w_up && lt->w_down)
				pm->expert_bytes[l] = (lt->w_gate->nbytes + lt->w_up->nbytes +
						       lt->w_down->nbytes) / (uint64_t)c->n_expert;
		}
	}
	pm->tok_embd_bytes = m->tok_embd->nbytes;
	pm->output_tied = m->output_tied;
	pm->output_bytes = m->output_tied ? 0 : m->output->nbytes;
	pm->other_bytes = m->nonlayer_bytes - pm->tok_embd_bytes - pm->output_bytes;
	for (i = 0; i < m->gguf->n_tensors; i++) {
		const struct ntx_gguf_tensor *t = &m->gguf->tensors[i];
		int li = ntx_tensor_layer(t->name);

		if (li >= 0 && li < c->n_layer && t->type < NTX_TYPE_COUNT)
			pm->layer_type_bytes[t->type] += t->nbytes;
	}
	return 0;
}

char *ntx_plan_default_pack_path(const char *model_path)
{
	const char *base, *dot;
	size_t n;
	char *s;

	if (!model_path || !*model_path)
		model_path = "model.gguf";
	base = strrchr(model_path, '/');
	base = base ? base + 1 : model_path;
	dot = strrchr(base, '.');
	n = dot && dot != base ? (size_t)(dot - model_path) : strlen(model_path);
	s = malloc(n + 6);
	if (!s)
		return NULL;
	memcpy(s, model_path, n);
	memcpy(s + n, ".ntxp", 6);
	return s;
}

/* ---- reserves ---- */

uint64_t ntx_plan_kv_layer_bytes(const struct ntx_plan_model *pm, int n_ctx,
				 enum ntx_kv_type kv, int n_seq)
{
	uint64_t b = 2;

	b = ntx_plan_sat_mul(b, (uint64_t)(n_ctx > 0 ? n_ctx : 0));
	b = ntx_plan_sat_mul(b, (uint64_t)(pm->n_head_kv > 0 ? pm->n_head_kv : 0));
	b = ntx_plan_sat_mul(b, (uint64_t)(pm->head_dim > 0 ? pm->head_dim : 0));
	b = ntx_plan_sat_mul(b, kv == NTX_KV_F32 ? 4 : 2);
	return ntx_plan_sat_mul(b, (uint64_t)(n_seq > 0 ? n_seq : 1));
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return b ? (a + b - 1) / b : 0;
}

/* What the CUDA engine allocates besides weights and KV (engine_gpu.c
 * ntx_gpu_init, kernels/cuda): an upper bound of each part. */
uint64_t ntx_plan_workspace_bytes(const struct ntx_plan_model *pm, int n_ctx, int n_ubatch,
				  int n_seq)
{
	uint64_t ub = (uint64_t)(n_ubatch > 0 ? n_ubatch : NTX_PLAN_DEFAULT_UBATCH);
	uint64_t embd = (uint64_t)pm->n_embd, ff = (uint64_t)pm->n_ff;
	uint64_t q = (uint64_t)pm->n_head * (uint64_t)pm->head_dim;
	uint64_t kv = (uint64_t)pm->n_head_kv * (uint64_t)pm->head_dim;
	uint64_t nh = (uint64_t)(pm->n_head > 0 ? pm->n_head : 1);
	uint64_t vocab = (uint64_t)(pm->n_vocab > 0 ? pm->n_vocab : 0);
	uint64_t ctx = (uint64_t)(n_ctx > 0 ? n_ctx : 1), kmax, tile, ns1, act, head, mm, attn, w;

	/* the engine's ubatch: at most the contexts of all sequences, at
	 * least the sequences (up to 512) */
	if (n_seq > 0 && ub > ctx * (uint64_t)n_seq)
		ub = ctx * (uint64_t)n_seq;
	else if (n_seq <= 0 && ub > ctx)
		ub = ctx;
	if (n_seq > 0 && ub < (uint64_t)n_seq)
		ub = n_seq < 512 ? (uint64_t)n_seq : 512;
	kmax = ff > embd ? ff : embd;
	kmax = q > kmax ? q : kmax;
	/* activation rows: x, xb, xin; q, att; k, v; h, g, u */
	act = ntx_plan_sat_mul(ub * 4, 3 * embd + 2 * q + 2 * kv + 3 * ff);
	/* the head's 64 rows and their logits */
	head = ntx_plan_sat_mul(64 * 4, embd + vocab);
	/* matrix products: the F16 activations (+256 bytes of alignment per
	 * row; the head's 64 rows) and one dequantized tile of at most 64 Mi
	 * elements */
	tile = ntx_plan_sat_mul(ff > embd ? ff : embd, kmax);
	tile = tile > ntx_plan_sat_mul(vocab, embd) ? tile : ntx_plan_sat_mul(vocab, embd);
	tile = tile < (64ull << 20) ? tile : (64ull << 20);
	mm = ntx_plan_sat_add(ntx_plan_sat_mul(ub > 64 ? ub : 64, 2 * kmax + 256), 2 * tile);
	/* attention partials (kernels/cuda/attention.cu): 8 decode rows split
	 * up to 64 ways (fewer in short contexts), larger calls at most
	 * 2 x 2048 head-splits */
	ns1 = ceil_div(2048, nh);
	ns1 = ns1 < ceil_div(ctx, 64) ? ns1 : ceil_div(ctx, 64);
	ns1 = ns1 < 64 ? ns1 : 64;
	attn = (64ull << 10) + (4096 + 8 * nh * ns1) * ((uint64_t)pm->head_dim * 4 + 8);
	w = ntx_plan_sat_add(act, head);
	w = ntx_plan_sat_add(w, mm);
	w = ntx_plan_sat_add(w, attn);
	return ntx_plan_sat_add(w, 64ull << 20); /* cuBLAS, q8 rows, positions */
}

/* ---- accounting ---- */

static const char *sz(uint64_t b, char *buf)
{
	return ntx_fmt_size(b, buf, 32);
}

/* Per-plan sums over the active layers, by home and executor. */
struct tally {
	uint64_t head;        /* output (or tied embeddings) bytes */
	uint64_t max_stream;  /* largest layer streamed to the GPU */
	uint64_t max_disk;    /* largest layer on disk */
	uint64_t ram_gpu, ram_cpu, disk_gpu, disk_cpu, vram_gpu; /* bytes by home, exec */
	int n_gpu, n_cpu, n_disk, n_vram, n_ram;
	/* mixture of experts: expert bytes in vram_gpu (a pass reads the
	 * experts its tokens chose), and those in RAM that the CPU computes
	 * for resident layers (the expert split) */
	uint64_t vram_exp, cpu_exp;
	int n_split;
	uint64_t xdisk_ram;   /* the non-expert bytes of MoE layers on disk for the CPU */
	uint64_t xdisk_eb;    /* the largest expert among them */
};

/* A MoE layer on disk that the CPU computes: the engine reads the experts a
 * pass chose from the pack (xcache.h), not the whole layer (an
 * uncompressed pack, as ntx-pack writes by default). */
static int xdisk_layer(const struct ntx_plan *p, int l)
{
	const struct ntx_plan_model *pm = &p->model;
	const struct ntx_plan_layer *L = &p->layers[l];

	return !L->skip && L->home == NTX_TIER_DISK && L->exec == NTX_EXEC_CPU &&
	       pm->n_expert > 0 && pm->n_expert_used > 0 && pm->expert_bytes &&
	       pm->expert_bytes[l] && pm->expert_bytes[l] * (uint64_t)pm->n_expert <= L->bytes;
}

/* What such a layer keeps in RAM when it goes to disk (its weights but the
 * experts; 0 when it would not read experts on demand), for the search,
 * which decides the homes after the executors. */
static uint64_t moe_disk_resid(const struct ntx_plan *p, int l)
{
	const struct ntx_plan_model *pm = &p->model;
	const struct ntx_plan_layer *L = &p->layers[l];
	uint64_t ex;

	if (L->skip || L->exec != NTX_EXEC_CPU || pm->n_expert <= 0 || pm->n_expert_used <= 0 ||
	    !pm->expert_bytes || !pm->expert_bytes[l])
		return 0;
	ex = pm->expert_bytes[l] * (uint64_t)pm->n_expert;
	return ex <= L->bytes ? L->bytes - ex : 0;
}

/* The least the expert cache holds (engine.c: 4 x the experts a token
 * uses, at least 16, at most a layer's), each in 4 KiB-aligned matrices. */
static uint64_t xcache_least(const struct ntx_plan_model *pm, uint64_t eb)
{
	uint64_t least = 4 * (uint64_t)pm->n_expert_used;

	least = least < 16 ? 16 : least;
	least = least > (uint64_t)pm->n_expert ? (uint64_t)pm->n_expert : least;
	return ntx_plan_sat_mul(least, eb + 6 * 4096);
}

/* The bytes of those layers a pass of n tokens does not read from disk:
 * their other weights (in RAM) and the experts no token chose. */
static double xdisk_unread(const struct ntx_plan *p, int n)
{
	const struct ntx_plan_model *pm = &p->model;
	double u = 0, k = pm->n_expert_used, E = pm->n_expert;
	int l;

	for (l = 0; l < pm->n_layer; l++) {
		double ex;

		if (!xdisk_layer(p, l))
			continue;
		ex = E * (double)pm->expert_bytes[l];
		u += (double)p->layers[l].bytes - ex + ex * pow(1 - fmin(1, k / E), n);
	}
	return u;
}

/* Mixture of experts: the expert bytes a pass of n tokens reads from
 * VRAM (*vram) and that the CPU reads (*cpu, the expert split), and how
 * many tokens each CPU expert read serves (*per). Each token picks k of E;
 * a layer's chosen experts are on the CPU at the share L->cpu_hit (the
 * routing counts of --expert-stats, else n_cpu / E), each side's experts
 * equally likely among themselves: a side of m experts hit at share h has
 * each expert read with probability 1 - (1 - k h / m)^n. Only resident
 * GPU layers: streamed and CPU layers move and read whole layers. */
/* The expert bytes of CPU-executed MoE layer l that a pass of n tokens
 * does not read (the CPU engine reads only the chosen experts; a streamed
 * or disk layer still moves whole). */
static double cpu_layer_unread(const struct ntx_plan *p, int l, int n)
{
	const struct ntx_plan_model *pm = &p->model;
	const struct ntx_plan_layer *L = &p->layers[l];
	double k = pm->n_expert_used, E = pm->n_expert;

	if (E <= 0 || k <= 0 || !pm->expert_bytes || L->skip || L->exec != NTX_EXEC_CPU)
		return 0;
	return E * (double)pm->expert_bytes[l] * pow(1 - fmin(1, k / E), n);
}

static double cpu_unread(const struct ntx_plan *p, int n)
{
	double u = 0;
	int l;

	for (l = 0; l < p->model.n_layer; l++)
		u += cpu_layer_unread(p, l, n);
	return u;
}

static void expert_reads(const struct ntx_plan *p, int n, double *vram, double *cpu, double *per)
{
	const struct ntx_plan_model *pm = &p->model;
	double k = pm->n_expert_used, hits = 0, reads = 0;
	int l;

	*vram = *cpu = 0;
	*per = 1;
	if (pm->n_expert <= 0 || !pm->expert_bytes || k <= 0)
		return;
	for (l = 0; l < pm->n_layer; l++) {
		const struct ntx_plan_layer *L = &p->layers[l];
		double eb = (double)pm->expert_bytes[l], nc = L->n_cpu_exp, nd = pm->n_expert - nc;
		double h = nc > 0 ? L->cpu_hit : 0, pc, pd;

		if (L->skip || L->home != NTX_TIER_VRAM || !eb)
			continue;
		pc = nc > 0 ? fmin(1, k * h / nc) : 0;
		pd = nd > 0 ? fmin(1, k * (1 - h) / nd) : 0;
		*vram += nd * eb * (1 - pow(1 - pd, n));
		if (nc > 0) {
			double f = 1 - pow(1 - pc, n);

			*cpu += nc * eb * f;
			hits += n * k * h;
			reads += nc * f;
		}
	}
	if (reads > 0)
		*per = hits / reads;
}

/* Check layer l's expert split and move its CPU experts' bytes from *lb
 * (the layer's bytes at its home) to t. */
static int tally_split(struct ntx_plan *p, int l, uint64_t *lb, struct tally *t,
		       struct ntx_err *err)
{
	const struct ntx_plan_model *pm = &p->model;
	const struct ntx_plan_layer *L = &p->layers[l];
	uint64_t eb = pm->expert_bytes ? pm->expert_bytes[l] : 0, ce;

	if (pm->n_expert > 0 && eb && L->exec == NTX_EXEC_GPU && L->home == NTX_TIER_VRAM)
		t->vram_exp = ntx_plan_sat_add(t->vram_exp,
					      ntx_plan_sat_mul(eb, (uint64_t)(pm->n_expert - L->n_cpu_exp)));
	if (!L->n_cpu_exp)
		return 0;
	if (L->n_cpu_exp < 0 || L->n_cpu_exp > pm->n_expert || !eb || !p->cpu_exp)
		return ntx_err_set(err, NTX_EINVAL,
				   "layer %d: %d CPU experts, but the model's layer has %d experts%s",
				   l, L->n_cpu_exp, pm->n_expert,
				   eb ? "" : " (or the plan does not give their bytes)");
	if (L->home != NTX_TIER_VRAM)
		return ntx_err_set(err, NTX_EINVAL,
				   "layer %d: CPU experts need the layer's home \"vram\" (exec \"gpu\")", l);
	if (!(L->cpu_hit >= 0 && L->cpu_hit <= 1))
		return ntx_err_set(err, NTX_EINVAL,
				   "layer %d: the CPU experts' share of the routing (%g) is not in [0, 1]",
				   l, L->cpu_hit);
	ce = ntx_plan_sat_mul(eb, (uint64_t)L->n_cpu_exp);
	*lb = *lb > ce ? *lb - ce : 0;
	t->cpu_exp = ntx_plan_sat_add(t->cpu_exp, ce);
	t->n_split++;
	return 0;
}

/* Check each active layer's home and executor (and the output's, the token
 * embeddings', the pack path) and sum the layers into t and p's
 * *_layers_bytes. */
static int tally_layers(struct ntx_plan *p, int gpu, struct tally *t, struct ntx_err *err)
{
	const struct ntx_plan_model *pm = &p->model;
	int l;

	p->vram_layers_bytes = p->ram_layers_bytes = p->disk_layers_bytes = 0;
	for (l = 0; l < pm->n_layer; l++) {
		const struct ntx_plan_layer *L = &p->layers[l];
		uint64_t lb = L->bytes;

		if (L->skip)
			continue;
		if (L->home == NTX_TIER_VRAM && L->exec != NTX_EXEC_GPU)
			return ntx_err_set(err, NTX_EINVAL,
					   "layer %d: home \"vram\" needs exec \"gpu\"", l);
		if (tally_split(p, l, &lb, t, err))
			return -1;
		if (!gpu && (L->home == NTX_TIER_VRAM || L->exec == NTX_EXEC_GPU))
			return ntx_err_set(err, NTX_EINVAL,
					   "layer %d: home \"%s\", exec \"%s\" with a VRAM budget of 0 (no GPU)",
					   l, ntx_tier_name(L->home), ntx_exec_name(L->exec));
		if (L->exec == NTX_EXEC_GPU)
			t->n_gpu++;
		else
			t->n_cpu++;
		switch (L->home) {
		case NTX_TIER_VRAM:
			t->n_vram++;
			p->vram_layers_bytes = ntx_plan_sat_add(p->vram_layers_bytes, lb);
			t->vram_gpu = ntx_plan_sat_add(t->vram_gpu, lb);
			break;
		case NTX_TIER_RAM:
			t->n_ram++;
			p->ram_layers_bytes = ntx_plan_sat_add(p->ram_layers_bytes, lb);
			if (L->exec == NTX_EXEC_GPU)
				t->ram_gpu = ntx_plan_sat_add(t->ram_gpu, lb);
			else
				t->ram_cpu = ntx_plan_sat_add(t->ram_cpu, lb);
			break;
		case NTX_TIER_DISK:
			t->n_disk++;
			p->disk_layers_bytes = ntx_plan_sat_add(p->disk_layers_bytes, lb);
			if (xdisk_layer(p, l)) {
				/* its other weights stay in RAM (the GGUF's pages),
				 * its experts are read into the expert cache: no
				 * staging */
				uint64_t ne = lb - ntx_plan_sat_mul(pm->expert_bytes[l],
								    (uint64_t)pm->n_expert);

				t->xdisk_ram = ntx_plan_sat_add(t->xdisk_ram, ne);
				if (pm->expert_bytes[l] > t->xdisk_eb)
					t->xdisk_eb = pm->expert_bytes[l];
			} else if (lb > t->max_disk) {
				t->max_disk = lb;
			}
			if (L->exec == NTX_EXEC_GPU)
				t->disk_gpu = ntx_plan_sat_add(t->disk_gpu, lb);
			else
				t->disk_cpu = ntx_plan_sat_add(t->disk_cpu, lb);
			break;
		}
		if (L->home != NTX_TIER_VRAM && L->exec == NTX_EXEC_GPU && lb > t->max_stream)
			t->max_stream = lb;
	}
	if (!((p->output_home == NTX_TIER_VRAM && p->output_exec == NTX_EXEC_GPU && gpu) ||
	      (p->output_home == NTX_TIER_RAM && p->output_exec == NTX_EXEC_CPU)))
		return ntx_err_set(err, NTX_EINVAL,
				   "output: home \"%s\" with exec \"%s\" is not supported (vram/gpu%s or ram/cpu)",
				   ntx_tier_name(p->output_home), ntx_exec_name(p->output_exec),
				   gpu ? "" : ", which needs a GPU,");
	if (p->tok_embd_home != NTX_TIER_RAM)
		return ntx_err_set(err, NTX_EINVAL, "tok_embd: home must be \"ram\"");
	if (t->n_disk && (!p->pack_path || !*p->pack_path))
		return ntx_err_set(err, NTX_EINVAL, "%d layers are on disk but pack_path is not set",
				   t->n_disk);
	if (p->output_home == NTX_TIER_VRAM)
		t->vram_gpu = ntx_plan_sat_add(t->vram_gpu, t->head);
	else
		t->ram_cpu = ntx_plan_sat_add(t->ram_cpu, t->head);
	p->cpu_exp_bytes = t->cpu_exp;
	p->ram_layers_bytes = ntx_plan_sat_add(p->ram_layers_bytes, t->cpu_exp);
	p->ram_layers_bytes = ntx_plan_sat_add(p->ram_layers_bytes, t->xdisk_ram);
	return 0;
}

/* The reserves (KV, workspace, ring, staging) and every byte of each
 * budget: VRAM and RAM used, the pack's size. */
static void account_bytes(struct ntx_plan *p, int gpu, int ring_slots, const struct tally *t)
{
	const struct ntx_plan_model *pm = &p->model;
	int l;

	/* reserves */
	p->kv_layer_bytes = ntx_plan_kv_layer_bytes(pm, p->n_ctx, p->kv_type, p->n_seq);
	p->kv_vram_bytes = ntx_plan_sat_mul(p->kv_layer_bytes, (uint64_t)t->n_gpu);
	p->kv_ram_bytes = ntx_plan_sat_mul(p->kv_layer_bytes, (uint64_t)t->n_cpu);
	p->workspace_bytes = gpu ? ntx_plan_workspace_bytes(pm, p->n_ctx, p->n_ubatch, p->n_seq) : 0;
	if (!gpu)
		p->margin_bytes = 0;
	p->ring_slots = t->max_stream ? ring_slots : 0;
	p->ring_bytes = t->max_stream ? ntx_plan_sat_mul((uint64_t)p->ring_slots,
							 ntx_plan_layer_buf_bytes(t->max_stream)) : 0;
	p->staging_bytes = t->max_disk ? ntx_plan_sat_mul(2, ntx_plan_layer_buf_bytes(t->max_disk)) : 0;
	if (t->xdisk_eb && xcache_least(pm, t->xdisk_eb) > p->staging_bytes)
		p->staging_bytes = xcache_least(pm, t->xdisk_eb); /* the expert cache's least */

	/* every byte of each budget */
	p->vram_used_bytes = 0;
	if (gpu) {
		uint64_t v = ntx_plan_sat_add(p->vram_layers_bytes,
					      (uint64_t)t->n_vram * NTX_PLAN_LAYER_PAD);

		if (p->output_home == NTX_TIER_VRAM)
			v = ntx_plan_sat_add(v, t->head);
		v = ntx_plan_sat_add(v, pm->other_bytes);
		v = ntx_plan_sat_add(v, p->kv_vram_bytes);
		v = ntx_plan_sat_add(v, p->workspace_bytes);
		v = ntx_plan_sat_add(v, p->ring_bytes);
		v = ntx_plan_sat_add(v, p->draft_vram_bytes);
		p->vram_used_bytes = ntx_plan_sat_add(v, p->margin_bytes);
	}
	{
		uint64_t r = ntx_plan_sat_add(p->ram_layers_bytes, pm->tok_embd_bytes);

		r = ntx_plan_sat_add(r, (uint64_t)t->n_ram * NTX_PLAN_LAYER_PAD);

		if (p->output_home == NTX_TIER_RAM && !pm->output_tied)
			r = ntx_plan_sat_add(r, t->head);
		r = ntx_plan_sat_add(r, pm->other_bytes);
		r = ntx_plan_sat_add(r, p->kv_ram_bytes);
		p->ram_used_bytes = ntx_plan_sat_add(r, p->staging_bytes);
	}
	p->pack_bytes = 0;
	if (t->n_disk) {
		p->pack_bytes = NTX_PLAN_PACK_HEADER;
		for (l = 0; l < pm->n_layer; l++)
			if (!p->layers[l].skip && p->layers[l].home == NTX_TIER_DISK)
				p->pack_bytes = ntx_plan_sat_add(
					p->pack_bytes,
					align_up(p->layers[l].bytes, NTX_PLAN_PACK_ALIGN) +
						NTX_PLAN_PACK_ALIGN);
	}
}

/* The share of the model's layer bytes whose GPU products of 2..8 tokens run
 * on the tensor cores (Q4_K everywhere, Q6_K where resident: the engine
 * rewrites resident Q6_K in split rows); the rest take the dp4a GEMV. 0
 * when the model gives no bytes per type. */
static void mma_shares(const struct ntx_plan_model *pm, double *resident, double *streamed)
{
	double all = 0;
	int t;

	for (t = 0; t < NTX_TYPE_COUNT; t++)
		all += (double)pm->layer_type_bytes[t];
	*resident = *streamed = 0;
	if (all <= 0)
		return;
	*streamed = (double)pm->layer_type_bytes[NTX_TYPE_Q4_K] / all;
	*resident = *streamed + (double)pm->layer_type_bytes[NTX_TYPE_Q6_K] / all;
}

/* CPU seconds per weight byte of a pass of n tokens, from mem (seconds per
 * byte of one token: the one-token rate) and tok (seconds per byte and
 * token: the batched rate). One token is memory-bound, many are
 * compute-bound; between, the two limits overlap only in part, so a pass
 * costs their cube-norm, a smooth roofline (at most 1.26x the larger limit,
 * where the two are equal; 1.04x a factor 2 apart, 1.01x a factor 3). On
 * the H200 host (doc/plan-json.md, "Passes of several tokens"): beside
 * streaming (issue #28's plan, 17 CPU layers) the larger of the two put a
 * pass of 7 tokens 13% under the measured one, this 7%; the line through
 * the two probe points overestimates the CPU-only passes of 2 to 8 tokens
 * by 24-35%. */
static double cpu_pass_s_per_byte(double mem, double tok, int n)
{
	double c = n * tok;

	if (n <= 1 || tok <= 0)
		return mem;
	return cbrt(mem * mem * mem + c * c * c);
}

/* The parts of one pass (seconds). */
struct pass_t {
	double res, link, disk, cpu, ovh, total, nondisk;
	double cpu_exp; /* expert bytes the CPU reads (the expert split) */
};

/* The time of a pass of n tokens (a decode step of n sequences, or a
 * verification pass of n tokens of one sequence). */
static void pass_time(const struct ntx_plan *p, int gpu, int n, const struct tally *tl,
		      struct pass_t *o)
{
	const struct ntx_plan_model *pm = &p->model;
	double fm_res, fm_str, cpu_s_per_byte, comp, mem, tok, ev, ec, per;
	int l;

	expert_reads(p, n, &ev, &ec, &per);
	/* the GPU computes every GPU-executed layer, streamed ones included,
	 * in chunks of 8 tokens: tensor-core K-quant products grow little
	 * with the tokens, dp4a ones more (plan.h) */
	mma_shares(pm, &fm_res, &fm_str);
	o->res = 0;
	if (gpu) {
		double gm = ntx_plan_gpu_mma_cost(n), gd = ntx_plan_gpu_batch_cost(n);

		/* resident experts: those the pass's tokens chose */
		double vr = (double)tl->vram_gpu - (double)tl->vram_exp + ev;

		o->res = (vr * (fm_res * gm + (1 - fm_res) * gd) +
			  (double)(tl->ram_gpu + tl->disk_gpu) * (fm_str * gm + (1 - fm_str) * gd)) /
			 (p->hw.gpu_gbps * 1e9);
	}
	/* a streamed layer costs the link the same for 1 or 64 tokens */
	o->link = (double)(tl->ram_gpu + tl->disk_gpu) / (p->hw.h2d_gbps * 1e9);
	o->disk = ((double)p->bytes_disk - xdisk_unread(p, n)) / (p->hw.disk_gbps * 1e9);
	{
		/* the copies to the GPU halve the CPU's one-token rate (shared
		 * memory) and the batched rate of several sequences, but cost
		 * a verification pass of one sequence little (measured: plan.h) */
		int shared = tl->ram_gpu + tl->disk_gpu > 0;
		int verify = p->n_verify > 1 && p->n_seq <= 1;
		double bs = !shared ? 1 : verify ? NTX_PLAN_CPU_VERIFY_SHARED : NTX_PLAN_CPU_SHARED;

		mem = 1.0 / (p->hw.cpu_gbps * 1e9 * (shared ? NTX_PLAN_CPU_SHARED : 1));
		tok = p->hw.cpu_batch_gbps > 0 ? 1.0 / (p->hw.cpu_batch_gbps * 1e9 * bs) : 0;

		cpu_s_per_byte = cpu_pass_s_per_byte(mem, tok, n);
	}
	if (tl->ram_gpu + tl->disk_gpu > 0) {
		/* a CPU layer longer than the ring's lead (ring_slots streamed
		 * layers copied ahead) stalls the copy engine */
		double lead = p->ring_slots * (double)tl->max_stream / (p->hw.h2d_gbps * 1e9);

		for (l = 0; l < pm->n_layer; l++) {
			const struct ntx_plan_layer *L = &p->layers[l];
			double tlay = ((double)L->bytes - cpu_layer_unread(p, l, n)) * cpu_s_per_byte;

			if (!L->skip && L->exec == NTX_EXEC_CPU && tlay > lead)
				o->link += tlay - lead;
		}
	}
	o->cpu = ((double)p->bytes_cpu - cpu_unread(p, n)) * cpu_s_per_byte;
	/* the expert split: the CPU reads the chosen ones of its experts,
	 * each for the tokens that chose it */
	o->cpu_exp = ec;
	o->cpu += ec * cpu_pass_s_per_byte(mem, tok, (int)ceil(per));
	o->ovh = (tl->n_gpu + tl->n_cpu) * NTX_PLAN_LAYER_OVERHEAD_S +
		 (tl->n_cpu + tl->n_split) * NTX_PLAN_CPU_LAYER_OVERHEAD_S;
	comp = o->res + o->cpu + o->ovh;
	o->total = comp;
	if (o->link > o->total)
		o->total = o->link;
	if (o->disk > o->total)
		o->total = o->disk;
	o->nondisk = comp > o->link ? comp : o->link;
}

/* The estimate: bytes moved, the time of each part of a pass of n_tok
 * tokens and of a pass of one, tokens per second (and with a draft, the
 * speculative rate); f->t and f->t_nondisk when f. */
static void account_time(struct ntx_plan *p, int gpu, int n_tok, const struct tally *tl,
			 struct ntx_plan_fail *f)
{
	struct pass_t x, x1;
	double t;

	{
		double ev, ec, per;

		expert_reads(p, n_tok, &ev, &ec, &per);
		p->bytes_vram = tl->vram_gpu - tl->vram_exp + (uint64_t)ev;
	}
	p->bytes_h2d_ram = tl->ram_gpu;
	p->bytes_h2d_disk = tl->disk_gpu;
	p->bytes_disk = ntx_plan_sat_add(tl->disk_gpu, tl->disk_cpu);
	p->bytes_cpu = ntx_plan_sat_add(tl->ram_cpu, tl->disk_cpu);
	p->bytes_cpu_disk = tl->disk_cpu;
	pass_time(p, gpu, n_tok, tl, &x);
	t = x.total;
	x1 = x;
	if (n_tok > 1)
		pass_time(p, gpu, 1, tl, &x1);
	p->bytes_cpu = ntx_plan_sat_add(p->bytes_cpu - (uint64_t)cpu_unread(p, n_tok), (uint64_t)x.cpu_exp);
	p->bytes_disk -= (uint64_t)fmin((double)p->bytes_disk, xdisk_unread(p, n_tok));
	p->t_resident_ms = ntx_plan_round6(x.res * 1e3);
	p->t_link_ms = ntx_plan_round6(x.link * 1e3);
	p->t_disk_ms = ntx_plan_round6(x.disk * 1e3);
	p->t_cpu_ms = ntx_plan_round6(x.cpu * 1e3);
	p->t_overhead_ms = ntx_plan_round6(x.ovh * 1e3);
	p->t_total_ms = ntx_plan_round6(t * 1e3);
	p->pass_tokens = n_tok;
	p->t_pass1_ms = ntx_plan_round6(x1.total * 1e3);
	p->predicted_tok_per_s = t > 0 ? ntx_plan_round6((p->n_seq > 0 ? p->n_seq : 1) / t) : 0;
	p->predicted_spec_tok_per_s = 0;
	if (p->draft_path && p->n_verify > 1 && t > 0) {
		/* (1 - a^(K+1)) / (1 - a) tokens per K drafts and one pass */
		int K = p->n_verify - 1;
		double acc = p->draft_accept, toks = acc >= 1 ? K + 1 : (1 - pow(acc, K + 1)) / (1 - acc);

		p->predicted_spec_tok_per_s =
			ntx_plan_round6(toks / (t + K * p->draft_token_ms * 1e-3));
	}
	if (f) {
		f->t = t;
		f->t_nondisk = x.nondisk;
	}
}

/* VRAM, RAM, then disk: an ENOFIT error listing the parts of the first
 * budget exceeded (and f->what, f->short_bytes when f). */
static int check_budgets(const struct ntx_plan *p, int gpu, const struct tally *t,
			 struct ntx_plan_fail *f, struct ntx_err *err)
{
	const struct ntx_plan_model *pm = &p->model;
	char a[32], b[32], c[32], d[32], e[32], g[32], h[32], k[32], x[32];

	if (gpu && p->vram_used_bytes > p->vram_budget) {
		uint64_t s = p->vram_used_bytes - p->vram_budget;

		if (f) {
			f->what = NTX_PLAN_SHORT_VRAM;
			f->short_bytes = s;
		}
		return ntx_err_set(err, NTX_ENOFIT,
				   "does not fit: VRAM needs %s (layers %s + output and norms %s + KV cache %s + workspace %s + ring %s + margin %s) but the VRAM budget is %s: short by %s",
				   sz(p->vram_used_bytes, a), sz(p->vram_layers_bytes, b),
				   sz((p->output_home == NTX_TIER_VRAM ? t->head : 0) + pm->other_bytes, c),
				   sz(p->kv_vram_bytes, d), sz(p->workspace_bytes, e),
				   sz(p->ring_bytes, g), sz(p->margin_bytes, h), sz(p->vram_budget, k),
				   sz(s, x));
	}
	if (p->ram_used_bytes > p->ram_budget) {
		uint64_t s = p->ram_used_bytes - p->ram_budget;

		if (f) {
			f->what = NTX_PLAN_SHORT_RAM;
			f->short_bytes = s;
		}
		return ntx_err_set(err, NTX_ENOFIT,
				   "does not fit: RAM needs %s (layers %s + token embeddings, output and norms %s + KV cache %s + disk staging %s) but the RAM budget is %s: short by %s",
				   sz(p->ram_used_bytes, a), sz(p->ram_layers_bytes, b),
				   sz(p->ram_used_bytes - p->ram_layers_bytes - p->kv_ram_bytes -
					      p->staging_bytes, c),
				   sz(p->kv_ram_bytes, d), sz(p->staging_bytes, e), sz(p->ram_budget, g),
				   sz(s, h));
	}
	if (p->pack_bytes > p->disk_budget) {
		uint64_t s = p->pack_bytes - p->disk_budget;

		if (f) {
			f->what = NTX_PLAN_SHORT_DISK;
			f->short_bytes = s;
		}
		return ntx_err_set(err, NTX_ENOFIT,
				   "does not fit: the model is larger than the VRAM, RAM and disk budgets: %d layers (%s) go to disk and the pack needs %s, but the disk budget at %s is %s: short by %s",
				   t->n_disk, sz(p->disk_layers_bytes, a), sz(p->pack_bytes, b),
				   p->pack_path, sz(p->disk_budget, c), sz(s, d));
	}
	return 0;
}

int ntx_plan_account_ex(struct ntx_plan *p, int ring_slots, struct ntx_plan_fail *f,
			struct ntx_err *err)
{
	int gpu = p->vram_budget > 0;
	struct tally t = { 0 };
	/* tokens per pass: the sequences of a batch, or a verification pass of
	 * K + 1 tokens with a draft model */
	int n_seq = p->n_seq > 0 ? p->n_seq : 1;

	if (p->n_verify > n_seq)
		n_seq = p->n_verify;

	if (f)
		memset(f, 0, sizeof *f);
	t.head = head_bytes(&p->model);
	if (tally_layers(p, gpu, &t, err))
		return -1;
	account_bytes(p, gpu, ring_slots, &t);
	account_time(p, gpu, n_seq, &t, f);
	return check_budgets(p, gpu, &t, f, err);
}

int ntx_plan_account(struct ntx_plan *p, int ring_slots, struct ntx_err *err)
{
	if (ring_slots < 2)
		ring_slots = NTX_PLAN_DEFAULT_RING_SLOTS;
	return ntx_plan_account_ex(p, ring_slots, NULL, err);
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
	uint64_t head = head_bytes(pm), fixed, sum = 0, maxb = 0, avail;

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
			uint64_t rb = moe_disk_resid(p, l2);

			rbs = ntx_plan_sat_add(rbs, rb);
			if (!rb && p->layers[l2].bytes > maxn)
				maxn = p->layers[l2].bytes;
			if (rb && pm->expert_bytes[l2] > xeb)
				xeb = pm->expert_bytes[l2];
		}
		staging = maxn ? 2 * ntx_plan_layer_buf_bytes(maxn) : 0;
		if (xeb && xcache_least(pm, xeb) > staging)
			staging = xcache_least(pm, xeb);
		staging = ntx_plan_sat_add(staging, rbs);
		avail = avail > staging ? avail - staging : 0;
	}
	for (j = 0; j < m; j++) {
		struct ntx_plan_layer *L = &p->layers[s->nr[j]];
		uint64_t need = ntx_plan_layer_buf_bytes(L->bytes);

		if (sum > avail) /* its other weights are reserved already */
			need -= moe_disk_resid(p, s->nr[j]);
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
	uint64_t used = ntx_plan_sat_add(head_bytes(pm), 0);
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

/* With experts and a GPU: the expert split instead of the layer plan p
 * (accounted), when asked (o->vram_experts >= 0: that many experts per
 * layer in VRAM) or, with the auto executor, when some layer is not
 * resident and the split with the most VRAM experts that fit predicts
 * more tokens per second. */
static int try_expert_split(struct ntx_plan *p, const struct ntx_plan_opts *o, int slots,
			    struct ntx_err *err)
{
	const struct ntx_plan_model *pm = &p->model;
	struct ntx_plan_layer *keep;
	double before = plan_rate(p);
	int l, lo, hi, want = o->vram_experts, off = 0, *rank;

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
	keep = malloc((size_t)pm->n_layer * sizeof *keep);
	rank = rank_experts(pm, o->expert_counts);
	p->cpu_exp = calloc((size_t)pm->n_layer, (size_t)pm->n_expert);
	if (!keep || !rank || !p->cpu_exp) {
		free(keep);
		free(rank);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	memcpy(keep, p->layers, (size_t)pm->n_layer * sizeof *keep);
	if (want >= 0) {
		free(keep);
		split_set(p, want < pm->n_expert ? want : pm->n_expert, rank, o->expert_counts);
		free(rank);
		return ntx_plan_account_ex(p, slots, NULL, err);
	}
	/* the most VRAM experts per layer that fit */
	lo = -1;
	hi = pm->n_expert;
	while (lo < hi) {
		int m = (lo + hi + 1) / 2;

		split_set(p, m, rank, o->expert_counts);
		if (ntx_plan_account_ex(p, slots, NULL, &(struct ntx_err){ 0, "" }) == 0)
			lo = m;
		else
			hi = m - 1;
	}
	if (lo >= 0) {
		split_set(p, lo, rank, o->expert_counts);
		if (ntx_plan_account_ex(p, slots, NULL, err)) {
			free(keep);
			free(rank);
			return -1;
		}
		{
			/* the same VRAM spent on the model's hottest experts,
			 * wherever they are (better where layers differ), or
			 * without counts layer after layer (llama.cpp's
			 * --n-cpu-moe: a layer whose experts all stay in VRAM
			 * has no CPU work to wait for) */
			size_t ne = (size_t)pm->n_layer * (size_t)pm->n_expert;
			struct ntx_plan_layer *uni = malloc((size_t)pm->n_layer * sizeof *uni);
			uint8_t *uf = malloc(ne);
			uint64_t *ones = o->expert_counts ? NULL : malloc(ne * sizeof *ones);
			const uint64_t *cnts = o->expert_counts ? o->expert_counts : ones;
			double ru = plan_rate(p);
			int *order = NULL, M;
			size_t i;

			for (i = 0; ones && i < ne; i++)
				ones[i] = 1;
			if (!uni || !uf || !cnts) {
				free(ones);
				free(uni);
				free(uf);
				free(keep);
				free(rank);
				return ntx_err_set(err, NTX_ENOMEM, "out of memory");
			}
			memcpy(uni, p->layers, (size_t)pm->n_layer * sizeof *uni);
			memcpy(uf, p->cpu_exp, (size_t)pm->n_layer * (size_t)pm->n_expert);
			M = fit_global(p, slots, cnts, &order);
			if (M >= 0) {
				split_set_global(p, M, order, cnts);
				ntx_plan_account_ex(p, slots, NULL, &(struct ntx_err){ 0, "" });
			}
			if (M < 0 || plan_rate(p) <= ru) { /* back to the per-layer split */
				memcpy(p->layers, uni, (size_t)pm->n_layer * sizeof *uni);
				memcpy(p->cpu_exp, uf, (size_t)pm->n_layer * (size_t)pm->n_expert);
			}
			free(order);
			free(ones);
			free(uni);
			free(uf);
			if (ntx_plan_account_ex(p, slots, NULL, err)) {
				free(keep);
				free(rank);
				return -1;
			}
		}
		if (plan_rate(p) > before) {
			free(keep);
			free(rank);
			return 0;
		}
	}
	memcpy(p->layers, keep, (size_t)pm->n_layer * sizeof *keep);
	free(keep);
	free(rank);
	free(p->cpu_exp);
	p->cpu_exp = NULL;
	return ntx_plan_account_ex(p, slots, NULL, err);
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

void ntx_plan_free(struct ntx_plan *p)
{
	if (!p)
		return;
	ntx_plan_model_free(&p->model);
	free(p->layers);
	free(p->cpu_exp);
	free(p->pack_path);
	free(p->draft_path);
	free(p);
}

void ntx_plan_draft_bytes(const struct ntx_plan_model *dm, int n_ctx, enum ntx_kv_type kv,
			  int n_seq, uint64_t *vram, uint64_t *per_token)
{
	uint64_t w = ntx_plan_sat_add(dm->other_bytes, head_bytes(dm)), v;
	int l;

	if (!dm->output_tied)
		w = ntx_plan_sat_add(w, dm->tok_embd_bytes);
	for (l = 0; l < dm->n_layer; l++)
		w = ntx_plan_sat_add(w, dm->layer_bytes[l]);
	v = ntx_plan_sat_add(w, ntx_plan_sat_mul(ntx_plan_kv_layer_bytes(dm, n_ctx, kv, n_seq),
						 (uint64_t)dm->n_layer));
	v = ntx_plan_sat_add(v, ntx_plan_workspace_bytes(dm, n_ctx, 0, n_seq));
	*vram = v;
	*per_token = w - (dm->output_tied ? 0 : dm->tok_embd_bytes);
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

/* ---- expert lists ---- */

int ntx_plan_experts_parse(const char *s, int n, uint8_t *flags, int *count, char *why,
			   size_t why_len)
{
	const char *p = s;
	int last = -1;

	memset(flags, 0, (size_t)n);
	*count = 0;
	if (!*p) {
		snprintf(why, why_len, "an empty list of experts (leave \"cpu_experts\" out instead)");
		return -1;
	}
	while (*p) {
		long a, b;
		char *end;

		if (*p < '0' || *p > '9')
			goto bad;
		a = strtol(p, &end, 10);
		b = a;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9')
				goto bad;
			b = strtol(p, &end, 10);
			p = end;
		}
		if (a > b || a <= last || b >= n) {
			snprintf(why, why_len,
				 "experts %ld-%ld: a list of experts goes up (\"0-3,8\") and stays below %d",
				 a, b, n);
			return -1;
		}
		*count += (int)(b - a + 1);
		for (; a <= b; a++)
			flags[a] = 1;
		last = (int)b;
		if (*p == ',' && p[1])
			p++;
		else if (*p)
			goto bad;
	}
	return 0;
bad:
	snprintf(why, why_len, "expected a list of experts like \"0-3,8,10-127\" (at \"%.20s\")", p);
	return -1;
}

char *ntx_plan_experts_format(const uint8_t *flags, int n)
{
	char *r = malloc((size_t)n * 12 + 1), *o = r;
	int x = 0;

	if (!r)
		return NULL;
	*o = 0;
	while (x < n) {
		int a;

		if (!flags[x]) {
			x++;
			continue;
		}
		a = x;
		while (x < n && flags[x])
			x++;
		o += sprintf(o, o == r ? "%d" : ",%d", a);
		if (x - 1 > a)
			o += sprintf(o, "-%d", x - 1);
	}
	return r;
}
