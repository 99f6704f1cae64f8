/* plan.h - the placement plan: where every layer lives (home tier) and where
 * it is computed (executor), the memory reserves, and the predicted speed.
 * Produced by ntx-plan, read by ntx-pack, ntx-skip-calib and ntx-run.
 * JSON format ("format": "ntx.plan", "version": 1): doc/plan-json.md. */
#ifndef NTX_PLAN_H
#define NTX_PLAN_H

#include <stdint.h>

#include "err.h"
#include "model.h"

enum ntx_tier { NTX_TIER_VRAM = 0, NTX_TIER_RAM = 1, NTX_TIER_DISK = 2 };
enum ntx_exec { NTX_EXEC_GPU = 0, NTX_EXEC_CPU = 1 };
enum ntx_kv_type { NTX_KV_F16 = 0, NTX_KV_F32 = 1 };

const char *ntx_tier_name(enum ntx_tier t); /* "vram", "ram", "disk" */
const char *ntx_exec_name(enum ntx_exec e); /* "gpu", "cpu" */

/* What the planner needs to know about a model: filled from a GGUF
 * (ntx_plan_model_from_gguf) or from ntx-inspect's JSON. */
struct ntx_plan_model {
	char *path;              /* owned */
	uint64_t file_size;
	char fingerprint[17];
	int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_ctx_train;
	int64_t n_vocab;
	uint64_t *layer_bytes;   /* n_layer entries, owned */
	uint64_t tok_embd_bytes;
	uint64_t output_bytes;   /* 0 when tied (the head then reads tok_embd) */
	int output_tied;
	uint64_t other_bytes;    /* norms, rope_freqs, anything else non-layer */
};

/* Hardware as detected and as overridden. Bandwidths in GB/s (1e9 B/s). */
struct ntx_plan_hw {
	int gpu_present;
	int gpu_index;
	char gpu_name[128];
	uint64_t vram_total, vram_free;    /* detected (0 without GPU) */
	uint64_t ram_available;            /* /proc/meminfo MemAvailable */
	int cpu_cores;
	uint64_t disk_free;                /* free space where the pack goes */
	double h2d_gbps;                   /* pinned host -> device */
	double disk_gbps;                  /* O_DIRECT sequential read */
	double cpu_gbps;                   /* CPU GEMV weight bytes per second */
	double gpu_gbps;                   /* device memory bandwidth for resident GEMV */
	int probed;                        /* bandwidths measured by --probe */
};

struct ntx_plan_layer {
	int index;
	enum ntx_tier home;
	enum ntx_exec exec;
	uint64_t bytes;
	int skip;        /* in the skip set: in no tier, never computed */
};

struct ntx_plan {
	struct ntx_plan_model model;
	struct ntx_plan_hw hw;
	/* budgets actually used (overrides or detected minus reserves) */
	uint64_t vram_budget, ram_budget, disk_budget;
	/* run-time parameters the reserves were computed for */
	int n_ctx;
	enum ntx_kv_type kv_type;
	int n_seq;            /* sequences decoded together (batch mode) */
	int n_ubatch;         /* max tokens per forward step */
	int ring_slots;       /* device buffers for streamed layers */
	/* reserves */
	uint64_t kv_vram_bytes;      /* KV cache of GPU-executed layers */
	uint64_t kv_ram_bytes;       /* KV cache of CPU-executed layers */
	uint64_t workspace_bytes;    /* activations + scratch on the device */
	uint64_t ring_bytes;         /* ring_slots x largest streamed layer */
	uint64_t staging_bytes;      /* pinned host staging for disk reads */
	uint64_t margin_bytes;       /* safety margin (--reserve) */
	/* non-layer tensors */
	enum ntx_tier output_home;   /* where output.weight (or the tied head) lives */
	enum ntx_exec output_exec;
	enum ntx_tier tok_embd_home; /* normally ram: decode reads one row */
	/* layers */
	struct ntx_plan_layer *layers; /* n_layer entries, in model order */
	char *pack_path;               /* NULL when no layer is on disk */
	/* estimate for one decoded token (batch of n_seq) */
	uint64_t bytes_vram, bytes_h2d_ram, bytes_disk, bytes_cpu;
	double predicted_tok_per_s;
};

/* Options of ntx-plan (overrides). Zero / negative values mean "detect". */
struct ntx_plan_opts {
	int64_t vram_budget;  /* -1 = detect; 0 = no GPU use */
	int64_t ram_budget;   /* -1 = detect */
	int n_ctx;            /* 0 = min(n_ctx_train, 4096) */
	enum ntx_kv_type kv_type;
	int n_seq;            /* 0 = 1 */
	int64_t reserve;      /* -1 = default margin */
	int gpu_index;
	const char *pack_path;
	double h2d_gbps, disk_gbps, cpu_gbps, gpu_gbps; /* 0 = default/probe */
	enum { NTX_POLICY_AUTO, NTX_POLICY_GPU, NTX_POLICY_CPU } executor;
	const int *skip; int n_skip;          /* layers removed from every tier */
	const double *scores;                 /* per-layer importance or NULL */
	int probe;
};

/* Fill a plan model from a GGUF model view (path copied). */
int ntx_plan_model_from_model(const struct ntx_model *m, struct ntx_plan_model *pm,
			      struct ntx_err *err);
void ntx_plan_model_free(struct ntx_plan_model *pm);

/* Device memory the engine needs besides weights, KV and ring for a given
 * config (activations, attention partials, dequantization tiles for batched
 * GEMM, logits). The CUDA engine allocates no more than this. */
uint64_t ntx_plan_workspace_bytes(const struct ntx_plan_model *pm, int n_ctx, int n_ubatch,
				  int n_seq);

/* KV cache bytes of one layer. */
uint64_t ntx_plan_kv_layer_bytes(const struct ntx_plan_model *pm, int n_ctx,
				 enum ntx_kv_type kv, int n_seq);

/* Compute a plan. Returns 0; or -1 with err->code NTX_ENOFIT (the tool exits
 * 3) when it cannot fit, the message saying what is short and by how much;
 * or another code for bad input. The plan takes a copy of pm. */
int ntx_plan_compute(const struct ntx_plan_model *pm, const struct ntx_plan_hw *hw,
		     const struct ntx_plan_opts *o, struct ntx_plan **out, struct ntx_err *err);

/* Serialize as JSON text (one document, indent 2, fixed key order, trailing
 * newline). Caller frees. */
char *ntx_plan_to_json(const struct ntx_plan *p, struct ntx_err *err);

/* Parse and validate a plan from JSON text; name is used in messages
 * ("plan.json:12:5: expected integer for \"bytes\""). */
struct ntx_plan *ntx_plan_from_json(const char *text, size_t len, const char *name,
				    struct ntx_err *err);
struct ntx_plan *ntx_plan_load(const char *path, struct ntx_err *err);

/* Refuse a plan made for another model: compares fingerprint and layer
 * count/bytes. Returns 0 or -1 (NTX_EMISMATCH). */
int ntx_plan_check_model(const struct ntx_plan *p, const struct ntx_model *m,
			 struct ntx_err *err);

void ntx_plan_free(struct ntx_plan *p);

/* ---- hardware detection (hw.c) ---- */

/* Detect GPU (through the CUDA runtime when built with CUDA), RAM, cores and
 * free disk at pack_dir (NULL: current directory). Never fails hard: what it
 * cannot detect is left 0. Default bandwidths are filled in when not probed. */
void ntx_hw_detect(struct ntx_plan_hw *hw, int gpu_index, const char *pack_dir);

/* --probe: measure pinned H2D bandwidth, O_DIRECT read rate (of a file in
 * probe_dir) and the CPU GEMV rate; fills the *_gbps fields, sets probed. */
int ntx_hw_probe(struct ntx_plan_hw *hw, const char *probe_dir, int n_threads,
		 struct ntx_err *err);

#endif
