/* plan.c - the placement planner's model: options, the plan model of a
 * GGUF, reserves, and the accounting of a plan (every byte of each budget,
 * the predicted time of a pass, mixture-of-experts reads). The search for
 * the placement is plan_search.c; JSON reading and writing plan_json.c. The
 * engine model and every formula are documented in doc/plan-json.md. */
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

uint64_t ntx_plan_head_bytes(const struct ntx_plan_model *pm)
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
uint64_t ntx_plan_moe_disk_resid(const struct ntx_plan *p, int l)
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
uint64_t ntx_plan_xcache_least(const struct ntx_plan_model *pm, uint64_t eb)
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
	if (gpu && p->cpu_exp && pm->expert_bytes) {
		/* the expert split's two upload buffers (engine_gpu_moe.c): one
		 * expert of the largest split layer each */
		uint64_t xb = 0;

		for (l = 0; l < pm->n_layer; l++)
			if (p->layers[l].n_cpu_exp && pm->expert_bytes[l] > xb)
				xb = pm->expert_bytes[l];
		p->workspace_bytes = ntx_plan_sat_add(p->workspace_bytes, ntx_plan_sat_mul(2, xb));
	}
	if (!gpu)
		p->margin_bytes = 0;
	p->ring_slots = t->max_stream ? ring_slots : 0;
	p->ring_bytes = t->max_stream ? ntx_plan_sat_mul((uint64_t)p->ring_slots,
							 ntx_plan_layer_buf_bytes(t->max_stream)) : 0;
	p->staging_bytes = t->max_disk ? ntx_plan_sat_mul(2, ntx_plan_layer_buf_bytes(t->max_disk)) : 0;
	if (t->xdisk_eb && ntx_plan_xcache_least(pm, t->xdisk_eb) > p->staging_bytes)
		p->staging_bytes = ntx_plan_xcache_least(pm, t->xdisk_eb); /* the expert cache's least */

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
	/* mixture of experts: the bytes of resident experts the pass reads,
	 * of the split's CPU experts, and what the CPU and the disk need not
	 * read (experts no token chose) */
	double vram_exp, cpu_exp, cpu_unread, disk_unread;
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
	o->vram_exp = ev;
	o->cpu_unread = cpu_unread(p, n);
	o->disk_unread = xdisk_unread(p, n);
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
	o->disk = ((double)p->bytes_disk - o->disk_unread) / (p->hw.disk_gbps * 1e9);
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
	o->cpu = ((double)p->bytes_cpu - o->cpu_unread) * cpu_s_per_byte;
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
	/* what a pass of n_tok reads, not what the layers hold */
	p->bytes_vram = tl->vram_gpu - tl->vram_exp + (uint64_t)x.vram_exp;
	p->bytes_cpu = ntx_plan_sat_add(p->bytes_cpu - (uint64_t)x.cpu_unread, (uint64_t)x.cpu_exp);
	p->bytes_disk -= (uint64_t)fmin((double)p->bytes_disk, x.disk_unread);
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
	t.head = ntx_plan_head_bytes(&p->model);
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
	uint64_t w = ntx_plan_sat_add(dm->other_bytes, ntx_plan_head_bytes(dm)), v;
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
