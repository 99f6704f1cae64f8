/* plan_int.h - internals shared by plan.c and plan_json.c (not installed). */
#ifndef NTX_PLAN_INT_H
#define NTX_PLAN_INT_H

#include "layout.h"
#include "plan.h"

/* Which budget an accounting failed on, by how much, and the predicted
 * times (seconds) of the candidate. */
enum { NTX_PLAN_SHORT_NONE = 0, NTX_PLAN_SHORT_VRAM = 1, NTX_PLAN_SHORT_RAM = 2,
       NTX_PLAN_SHORT_DISK = 3 };
struct ntx_plan_fail {
	int what;
	uint64_t short_bytes;
	double t, t_nondisk;
};

int ntx_plan_account_ex(struct ntx_plan *p, int ring_slots, struct ntx_plan_fail *f,
			struct ntx_err *err);

/* Deep copy (path and layer_bytes duplicated). */
int ntx_plan_model_copy(struct ntx_plan_model *dst, const struct ntx_plan_model *src,
			struct ntx_err *err);

uint64_t ntx_plan_sat_add(uint64_t a, uint64_t b);
uint64_t ntx_plan_sat_mul(uint64_t a, uint64_t b);

/* x rounded to 6 significant digits, exactly as the JSON writer prints it, so
 * a plan read back holds the same doubles. */
double ntx_plan_round6(double x);
/* GPU time of a decode step of n_tok tokens per weight byte, in units of a
 * single-token GEMV pass (1 for one token): the dp4a GEMV, and the K-quant
 * GEMV on tensor cores (plan.h). */
double ntx_plan_gpu_batch_cost(int n_tok);
double ntx_plan_gpu_mma_cost(int n_tok);

/* A layer held as one buffer (layout.h: NTX_LAYER_NT tensors, each aligned
 * to NTX_LAYER_ALIGN): at most this much more than its tensor bytes. Counted
 * for every layer buffer: resident, pinned RAM copy, ring slot, staging. */
#define NTX_PLAN_LAYER_PAD ((uint64_t)NTX_LAYER_NT * NTX_LAYER_ALIGN)
uint64_t ntx_plan_layer_buf_bytes(uint64_t layer_bytes);

/* Largest byte count a plan may hold (1 PiB): sums cannot overflow. */
#define NTX_PLAN_MAX_BYTES (1ull << 50)

/* The head's bytes (output, or the tied embeddings). */
uint64_t ntx_plan_head_bytes(const struct ntx_plan_model *pm);
/* A MoE layer l the CPU would compute from disk: what it keeps in RAM (its
 * weights but the experts; 0 when it would not read experts on demand). */
uint64_t ntx_plan_moe_disk_resid(const struct ntx_plan *p, int l);
/* The least the expert cache holds for experts of eb bytes. */
uint64_t ntx_plan_xcache_least(const struct ntx_plan_model *pm, uint64_t eb);

#endif
