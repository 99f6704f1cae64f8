/* plan_explain.c - the human summary of a plan (ntx-plan --explain). */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

static const char *sz(uint64_t b, char *buf)
{
	return ntx_fmt_size(b, buf, 32);
}

static uint64_t head_bytes(const struct ntx_plan_model *pm)
{
	return pm->output_tied ? pm->tok_embd_bytes : pm->output_bytes;
}

struct sbuf {
	char *s;
	size_t n, cap;
	int oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->s && b->n + (size_t)n < b->cap) {
			b->n += (size_t)n;
			return;
		}
		{
			size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
			char *t = realloc(b->s, cap);

			if (!t) {
				b->oom = 1;
				return;
			}
			b->s = t;
			b->cap = cap;
		}
	}
}

/* Layers matching (home, exec) as a range list "0-27,30" (home < 0: skipped). */
static int list_layers(struct sbuf *b, const struct ntx_plan *p, int home, int exec)
{
	int l, n = 0, start = -1;

	for (l = 0; l <= p->model.n_layer; l++) {
		const struct ntx_plan_layer *L = l < p->model.n_layer ? &p->layers[l] : NULL;
		int in = L && (home < 0 ? L->skip :
				!L->skip && (int)L->home == home && (int)L->exec == exec);

		if (in) {
			n++;
			if (start < 0)
				start = l;
			continue;
		}
		if (start >= 0) {
			sb_printf(b, "%s%d", n > l - start ? "," : "", start);
			if (l - 1 > start)
				sb_printf(b, "-%d", l - 1);
			start = -1;
		}
	}
	return n;
}

static int count_layers(const struct ntx_plan *p, int home, int exec)
{
	int l, n = 0;

	for (l = 0; l < p->model.n_layer; l++) {
		const struct ntx_plan_layer *L = &p->layers[l];

		n += home < 0 ? L->skip : !L->skip && (int)L->home == home && (int)L->exec == exec;
	}
	return n;
}

char *ntx_plan_explain(const struct ntx_plan *p)
{
	static const struct {
		int home, exec;
		const char *what;
	} groups[] = {
		{ NTX_TIER_VRAM, NTX_EXEC_GPU, "vram/gpu (resident)" },
		{ NTX_TIER_RAM, NTX_EXEC_GPU, "ram/gpu (streamed over PCIe)" },
		{ NTX_TIER_RAM, NTX_EXEC_CPU, "ram/cpu (computed by the CPU)" },
		{ NTX_TIER_DISK, NTX_EXEC_GPU, "disk/gpu (read, then streamed)" },
		{ NTX_TIER_DISK, NTX_EXEC_CPU, "disk/cpu (read, computed by the CPU)" },
		{ -1, 0, "skipped" },
	};
	const struct ntx_plan_model *pm = &p->model;
	struct sbuf b = { 0 };
	char a[32], c[32], d[32], e[32], f[32], g[32], h[32], k[32];
	const char *bound;
	uint64_t total = 0;
	size_t i;
	int l;

	for (l = 0; l < pm->n_layer; l++)
		total += pm->layer_bytes[l];
	sb_printf(&b, "model: %s: %d layers, %s of layers + %s other; fingerprint %s\n",
		  pm->path ? pm->path : "?", pm->n_layer, sz(total, a),
		  sz(pm->tok_embd_bytes + pm->output_bytes + pm->other_bytes, c), pm->fingerprint);
	if (p->hw.gpu_present && p->hw.pcie_gts > 0)
		sb_printf(&b, "hardware: GPU %d %s (%s free of %s; PCIe %g GT/s x%d), ",
			  p->hw.gpu_index, p->hw.gpu_name, sz(p->hw.vram_free, a),
			  sz(p->hw.vram_total, c), p->hw.pcie_gts, p->hw.pcie_width);
	else if (p->hw.gpu_present)
		sb_printf(&b, "hardware: GPU %d %s (%s free of %s), ", p->hw.gpu_index,
			  p->hw.gpu_name, sz(p->hw.vram_free, a), sz(p->hw.vram_total, c));
	else
		sb_printf(&b, "hardware: %s, ", p->hw.detected & NTX_HW_GPU ? "no GPU" :
			  "GPU not detected (VRAM budget given)");
	sb_printf(&b, "bandwidths: H2D %g GB/s (%s), disk %g GB/s (%s), CPU %g GB/s (%s), GPU %g GB/s (%s); CPU batched %g GB/s x tokens (%s)\n",
		  p->hw.h2d_gbps, ntx_src_name(p->hw.h2d_src), p->hw.disk_gbps,
		  ntx_src_name(p->hw.disk_src), p->hw.cpu_gbps, ntx_src_name(p->hw.cpu_src),
		  p->hw.gpu_gbps, ntx_src_name(p->hw.gpu_src), p->hw.cpu_batch_gbps,
		  ntx_src_name(p->hw.cpu_batch_src));
	sb_printf(&b, "run: ctx %d, KV %s, %d sequence%s, ubatch %d, executor %s, resident layers by %s\n",
		  p->n_ctx, p->kv_type == NTX_KV_F32 ? "f32" : "f16", p->n_seq,
		  p->n_seq == 1 ? "" : "s", p->n_ubatch, ntx_policy_name(p->executor),
		  p->by_scores ? "importance scores" : "spread through the model");
	if (!p->vram_budget) {
		sb_printf(&b, "VRAM: not used: a CPU-only plan (VRAM budget 0, %s)\n",
			  ntx_src_name(p->vram_budget_src));
	} else {
		sb_printf(&b, "VRAM: %s used of %s (%s): layers %s, output and norms %s, KV %s, workspace %s, ring %d x %s, margin %s\n",
			  sz(p->vram_used_bytes, a), sz(p->vram_budget, c),
			  ntx_src_name(p->vram_budget_src), sz(p->vram_layers_bytes, d),
			  sz((p->output_home == NTX_TIER_VRAM ? head_bytes(pm) : 0) + pm->other_bytes, e),
			  sz(p->kv_vram_bytes, f), sz(p->workspace_bytes, g), p->ring_slots,
			  sz(p->ring_slots ? p->ring_bytes / (uint64_t)p->ring_slots : 0, h),
			  sz(p->margin_bytes, k));
	}
	sb_printf(&b, "RAM:  %s used of %s (%s): layers %s, token embeddings %s, KV %s, disk staging %s\n",
		  sz(p->ram_used_bytes, a), sz(p->ram_budget, c), ntx_src_name(p->ram_budget_src),
		  sz(p->ram_layers_bytes, d), sz(pm->tok_embd_bytes, e), sz(p->kv_ram_bytes, f),
		  sz(p->staging_bytes, g));
	sb_printf(&b, "disk: %s used of %s (%s)%s%s\n", sz(p->pack_bytes, a), sz(p->disk_budget, c),
		  ntx_src_name(p->disk_budget_src), p->pack_path ? ": pack " : "",
		  p->pack_path ? p->pack_path : "");
	sb_printf(&b, "output head: %s/%s (%s%s)\n", ntx_tier_name(p->output_home),
		  ntx_exec_name(p->output_exec), sz(head_bytes(pm), a),
		  pm->output_tied ? ", tied to the token embeddings" : "");
	for (i = 0; i < sizeof groups / sizeof groups[0]; i++) {
		int n = count_layers(p, groups[i].home, groups[i].exec);

		if (!n)
			continue;
		sb_printf(&b, "layers %s: %d: ", groups[i].what, n);
		list_layers(&b, p, groups[i].home, groups[i].exec);
		sb_printf(&b, "\n");
	}
	if (p->cpu_exp) {
		int n = 0, lo = pm->n_expert, hi = 0;

		for (i = 0; i < (size_t)pm->n_layer; i++)
			if (p->layers[i].n_cpu_exp) {
				n++;
				lo = p->layers[i].n_cpu_exp < lo ? p->layers[i].n_cpu_exp : lo;
				hi = p->layers[i].n_cpu_exp > hi ? p->layers[i].n_cpu_exp : hi;
			}
		if (lo == hi)
			sb_printf(&b, "experts: %d of %d per layer in RAM, computed by the CPU (%d layers, %s); the rest in VRAM; %d chosen per token\n",
				  lo, pm->n_expert, n, sz(p->cpu_exp_bytes, a), pm->n_expert_used);
		else
			sb_printf(&b, "experts: %d to %d of %d per layer in RAM, computed by the CPU (%d layers, %s); the rest in VRAM; %d chosen per token\n",
				  lo, hi, pm->n_expert, n, sz(p->cpu_exp_bytes, a), pm->n_expert_used);
	}
	sb_printf(&b, "per token: VRAM reads %s, H2D %s (from RAM %s, from disk %s), disk reads %s, CPU reads %s\n",
		  sz(p->bytes_vram, a), sz(p->bytes_h2d_ram + p->bytes_h2d_disk, c),
		  sz(p->bytes_h2d_ram, d), sz(p->bytes_h2d_disk, e), sz(p->bytes_disk, f),
		  sz(p->bytes_cpu, g));
	if (p->t_total_ms == p->t_link_ms && p->t_link_ms > 0)
		bound = "PCIe-bound";
	else if (p->t_total_ms == p->t_disk_ms && p->t_disk_ms > 0)
		bound = "disk-bound";
	else
		bound = "compute-bound";
	sb_printf(&b, "time per step: max(link %.4g ms, disk %.4g ms, resident %.4g + CPU %.4g + overhead %.4g ms) = %.4g ms (%s): %.4g tok/s predicted\n",
		  p->t_link_ms, p->t_disk_ms, p->t_resident_ms, p->t_cpu_ms, p->t_overhead_ms,
		  p->t_total_ms, bound, p->predicted_tok_per_s);
	if (p->pass_tokens > 1)
		sb_printf(&b, "a pass of %d tokens: %.4g ms; of 1 token: %.4g ms (%.3gx)\n",
			  p->pass_tokens, p->t_total_ms, p->t_pass1_ms,
			  p->t_pass1_ms > 0 ? p->t_total_ms / p->t_pass1_ms : 0);
	if (p->draft_path)
		sb_printf(&b, "draft %s: %s VRAM, %.4g ms per drafted token; the target planned for passes of %d tokens (K = %d): %.4g tok/s predicted at acceptance %.2f\n",
			  p->draft_path, sz(p->draft_vram_bytes, a), p->draft_token_ms, p->n_verify,
			  p->n_verify - 1, p->predicted_spec_tok_per_s, p->draft_accept);
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s;
}
