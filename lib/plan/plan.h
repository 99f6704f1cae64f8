/* plan.h - the placement plan: where every layer lives (home tier) and where
 * it is computed (executor), the memory reserves, and the predicted speed.
 * Produced by ntx-plan, read by ntx-pack, ntx-skip-calib and ntx-run.
 * JSON format ("format": "ntx.plan", "version": 1): doc/plan-json.md. */
#ifndef NTX_PLAN_H
#define NTX_PLAN_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "tunables.h"
#include "types.h"

enum ntx_tier { NTX_TIER_VRAM = 0, NTX_TIER_RAM = 1, NTX_TIER_DISK = 2 };
enum ntx_exec { NTX_EXEC_GPU = 0, NTX_EXEC_CPU = 1 };
enum ntx_kv_type { NTX_KV_F16 = 0, NTX_KV_F32 = 1 };

const char *ntx_tier_name(enum ntx_tier t); /* "vram", "ram", "disk" */
const char *ntx_exec_name(enum ntx_exec e); /* "gpu", "cpu" */

/* Where a hardware value or budget came from: LINK, the H2D rate estimated
 * from the GPU's PCIe link (sysfs); CACHE, a rate an earlier --probe on this
 * machine measured (the probe cache). */
enum ntx_src { NTX_SRC_DEFAULT = 0, NTX_SRC_DETECTED = 1, NTX_SRC_OVERRIDE = 2, NTX_SRC_PROBE = 3,
	       NTX_SRC_LINK = 4, NTX_SRC_CACHE = 5 };
#define NTX_SRC_COUNT 6
/* "default", "detected", "override", "probe", "link", "cache" */
const char *ntx_src_name(enum ntx_src s);

/* Executor policy (ntx-plan --executor). */
enum ntx_policy { NTX_POLICY_AUTO = 0, NTX_POLICY_GPU = 1, NTX_POLICY_CPU = 2 };
const char *ntx_policy_name(int policy); /* "auto", "gpu", "cpu" */

/* Engine-model constants the planner uses (doc/plan-json.md). */
#define NTX_PLAN_DEFAULT_MARGIN (512ull << 20)   /* --reserve */
#define NTX_PLAN_RAM_HEADROOM (2ull << 30)       /* MemAvailable minus this */
#define NTX_PLAN_DEFAULT_RING_SLOTS 3
#define NTX_PLAN_DEFAULT_UBATCH 512
#define NTX_PLAN_PACK_ALIGN 4096ull
#define NTX_PLAN_PACK_HEADER (1ull << 20)        /* pack header estimate */
#define NTX_PLAN_LAYER_OVERHEAD_S 20e-6          /* per computed layer */
#define NTX_PLAN_CPU_LAYER_OVERHEAD_S 50e-6      /* per CPU-executed layer (hand-off) */
#define NTX_PLAN_DEFAULT_H2D_GBPS 25.0   /* when the PCIe link is not known */
/* Pinned cudaMemcpy over PCIe reaches this share of the link's raw rate
 * (the H200 test host: 55.5 GB/s on Gen5 x16, 63.0 GB/s raw) */
#define NTX_PLAN_PCIE_EFFICIENCY 0.88
#define NTX_PLAN_DEFAULT_DISK_GBPS 2.0
#define NTX_PLAN_DEFAULT_GPU_GBPS 2000.0
#define NTX_PLAN_CPU_GBPS_PER_CORE 4.0
#define NTX_PLAN_CPU_GBPS_MAX 80.0
#define NTX_PLAN_CPU_BATCH_GBPS_PER_CORE 20.0 /* weight bytes x tokens / s, batched matmul */
#define NTX_PLAN_CPU_BATCH_PROBE 16           /* tokens of the batched CPU probe */
/* GPU GEMV over a decode batch: chunks of 8 tokens, each chunk costing
 * 1 + NTX_PLAN_GPU_TOKEN_COST x (tokens - 1) single-token GEMVs (the H200's
 * dp4a GEMV: 8 tokens take 3.2x one token's time) */
#define NTX_PLAN_GPU_TOKEN_COST 0.31
/* The K-quant GEMV on int8 tensor cores (Q4_K, and Q6_K in split rows: the
 * resident ones), 2..8 tokens: a chunk of k tokens costs 1 + MMA_FIRST +
 * MMA_TOKEN x k single-token GEMVs (the H200, resident 8B Q4_K_M, twelfth
 * session: 2 / 4 / 8 tokens took 1.30 / 1.35 / 1.44x one token's pass) */
#define NTX_PLAN_GPU_MMA_FIRST 0.25
#define NTX_PLAN_GPU_MMA_TOKEN 0.025
/* The CPU's share of its probed rates while the copy engine streams pinned
 * RAM to the GPU (doc/plan-json.md). One token, and a batch of several
 * sequences: half (the H200 host computed 70B Q4_K_M layers at 0.51x its
 * probed GEMV rate and 0.51x its 16-token rate during PCIe streaming; on
 * 2026-12-02 a --parallel 16 plan with 6 CPU layers ran 27.4 tok/s against
 * 39.5 for the PCIe-only one). A verification pass of one sequence (K + 1
 * tokens with a draft): 0.9 (measured 2026-12-02: 18 CPU layers beside 21
 * streamed ones ran passes of 8 and 16 tokens at about 0.9x the probed
 * 16-token rate). */
#define NTX_PLAN_CPU_SHARED 0.5
#define NTX_PLAN_CPU_VERIFY_SHARED 0.9

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
	/* bytes of layer tensors per ggml type (weights the CPU GEMV rate
	 * applies to); informational, used to weigh per-type probe rates */
	uint64_t layer_type_bytes[NTX_TYPE_COUNT];
	/* mixture of experts: experts per layer and per token (0 = dense), and
	 * per layer the bytes of one expert (its gate, up and down matrices;
	 * NULL when not known, e.g. from ntx-inspect's JSON: no expert split) */
	int n_expert, n_expert_used;
	uint64_t *expert_bytes;
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
	/* added: */
	int gpu_count;                     /* devices seen (0 without GPU) */
	unsigned detected;                 /* NTX_HW_* bits: what was detected */
	enum ntx_src h2d_src, disk_src, cpu_src, gpu_src;
	double cpu_type_gbps[NTX_TYPE_COUNT]; /* probed GEMV rate per weight type (0 = not measured) */
	/* CPU matrix product over a batch of NTX_PLAN_CPU_BATCH_PROBE tokens:
	 * weight bytes x tokens per second (compute-bound where one token is
	 * memory-bound) */
	double cpu_batch_gbps;
	enum ntx_src cpu_batch_src;
	double cpu_type_batch_gbps[NTX_TYPE_COUNT]; /* probed, per weight type (0 = not measured) */
	/* the GPU's place on the PCIe bus, and its link (ntx_hw_link_estimate) */
	char gpu_bus_id[32];               /* "0000:3b:00.0", lower case; "" unknown */
	double pcie_gts;                   /* GT/s per lane, capped by the bridges above (0 = unknown) */
	int pcie_width;                    /* lanes, likewise (0 = unknown) */
	uint64_t disk_dev;                 /* st_dev of the pack directory (with NTX_HW_DISK) */
};

/* What ntx_hw_detect_some looks at (and hw->detected reports). */
enum { NTX_HW_GPU = 1, NTX_HW_RAM = 2, NTX_HW_CPU = 4, NTX_HW_DISK = 8, NTX_HW_ALL = 15 };

struct ntx_plan_layer {
	int index;
	enum ntx_tier home;
	enum ntx_exec exec;
	uint64_t bytes;
	int skip;        /* in the skip set: in no tier, never computed (home and
			  * exec are then meaningless; JSON writes null) */
	/* experts of this MoE layer kept in RAM and computed by the CPU
	 * (flags in ntx_plan.cpu_exp); the layer's other weights and its
	 * other experts are at its home (vram, exec gpu) */
	int n_cpu_exp;
	double cpu_hit;  /* the share of the layer's routing that goes to its CPU
			  * experts (routing counts; without them n_cpu_exp / n_expert) */
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
	uint64_t bytes_vram;       /* read in place by resident GEMV (layers + head) */
	uint64_t bytes_h2d_ram;    /* copied H2D from ram-home layers (exec gpu) */
	uint64_t bytes_disk;       /* read from the pack file (every disk-home layer) */
	uint64_t bytes_cpu;        /* read by CPU GEMV (cpu layers + head on the CPU) */
	double predicted_tok_per_s; /* all n_seq sequences together */
	/* ---- added ---- */
	enum ntx_src vram_budget_src, ram_budget_src, disk_budget_src;
	int executor;              /* enum ntx_policy the plan was made with */
	int by_scores;             /* resident layers chosen by importance scores */
	uint64_t kv_layer_bytes;   /* KV cache of one layer */
	uint64_t bytes_h2d_disk;   /* copied H2D from disk-home layers (exec gpu) */
	uint64_t bytes_cpu_disk;   /* part of bytes_cpu computed from disk staging */
	/* accounting: every byte of each budget */
	uint64_t vram_layers_bytes, ram_layers_bytes, disk_layers_bytes;
	uint64_t vram_used_bytes;  /* layers + head + other + kv_vram + workspace + ring + margin */
	uint64_t ram_used_bytes;   /* layers + tok_embd + head + other + kv_ram + staging */
	uint64_t pack_bytes;       /* pack file size estimate (disk budget use) */
	/* predicted time per token, ms */
	double t_resident_ms, t_link_ms, t_disk_ms, t_cpu_ms, t_overhead_ms, t_total_ms;
	/* the estimate is for a pass of pass_tokens tokens (n_seq, or K + 1
	 * with a draft); t_pass1_ms: the same plan's pass of one token */
	int pass_tokens;
	double t_pass1_ms;
	/* speculative decoding with a resident draft model (ntx-plan --draft):
	 * the target is planned for passes of n_verify = K + 1 tokens (the
	 * estimate above is then one such pass); the draft's weights, KV cache
	 * and workspace are reserved in VRAM */
	int n_verify;               /* 1 = no draft */
	char *draft_path;           /* NULL: no draft */
	uint64_t draft_vram_bytes;
	double draft_token_ms;      /* predicted time of one drafted token */
	double draft_accept;        /* the acceptance the prediction assumes */
	double predicted_spec_tok_per_s;
	/* the expert split: n_layer x model.n_expert flags, 1 = the expert is in
	 * RAM and the CPU computes it (NULL: no layer splits its experts) */
	uint8_t *cpu_exp;
	uint64_t cpu_exp_bytes;     /* bytes of those experts (in ram_layers_bytes) */
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
	double cpu_batch_gbps;                /* 0 = default/probe */
	int executor;                         /* enum ntx_policy */
	const int *skip; int n_skip;          /* layers removed from every tier */
	const double *scores;                 /* per-layer importance or NULL: n_layer
					       * entries, LOWER = MORE important
					       * (cosine in/out); NAN = unscored */
	int probe;
	/* added: */
	int64_t disk_budget;  /* -1 = detect (free space at the pack path) */
	int n_ubatch;         /* 0 = NTX_PLAN_DEFAULT_UBATCH */
	int ring_slots;       /* 0 = NTX_PLAN_DEFAULT_RING_SLOTS; >= 2 */
	/* a resident draft model: its VRAM (weights + KV + workspace), the
	 * weight bytes it reads per drafted token and its layer count; K
	 * (draft_k, 0 = the K whose plan predicts the most tok/s) and the
	 * assumed acceptance (0 = 0.7) */
	const char *draft_path;
	uint64_t draft_vram_bytes, draft_token_bytes;
	int draft_layers, draft_k;
	double draft_accept;
	/* MoE: experts of each layer kept in VRAM, the rest in RAM computed by
	 * the CPU beside the GPU (the others of the layer resident); -1 = the
	 * planner decides (the split when it is faster than placing whole
	 * layers), 0 = every expert on the CPU (llama.cpp's --cpu-moe) */
	int vram_experts;
	/* routing counts [n_layer][n_expert] (--expert-stats): the most chosen
	 * experts are the ones kept in VRAM, and the CPU's share of the
	 * routing follows them; NULL: every expert as likely as any */
	const uint64_t *expert_counts;
	int auto_expert_split; /* 1: with vram_experts -1 the planner may choose the
				* split (tunable expert_split, NTX_EXPERT_SPLIT=1);
				* 0: only when asked */
};

/* Expert lists in plans: "0-3,8,10-127" (ascending ranges, no spaces).
 * Parse s into flags[n] (1 = listed) and *count; -1 with the reason in why
 * when s is not such a list of experts below n. Format: the list of the
 * flagged experts (caller frees; NULL when out of memory). */
#define NTX_PLAN_MAX_EXPERT 1024
int ntx_plan_experts_parse(const char *s, int n, uint8_t *flags, int *count, char *why,
			   size_t why_len);
char *ntx_plan_experts_format(const uint8_t *flags, int n);

/* Options with every override unset ("detect"/defaults). */
void ntx_plan_opts_init(struct ntx_plan_opts *o);

/* Fill a plan model from a GGUF model view (path copied). */
int ntx_plan_model_from_model(const struct ntx_model *m, struct ntx_plan_model *pm,
			      struct ntx_err *err);
void ntx_plan_model_free(struct ntx_plan_model *pm);

/* Fill a plan model from ntx-inspect's JSON ("format": "ntx.inspect"); name
 * is used in messages ("inspect.json:3:14: ..."). */
int ntx_plan_model_from_inspect(const char *text, size_t len, const char *name,
				struct ntx_plan_model *pm, struct ntx_err *err);

/* The default pack path for a model: MODEL.gguf -> MODEL.ntxp (caller frees;
 * NULL on allocation failure). */
char *ntx_plan_default_pack_path(const char *model_path);

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

/* The VRAM a resident draft model needs (weights, KV cache for n_ctx and
 * n_seq, workspace) and the weight bytes it reads per token. */
void ntx_plan_draft_bytes(const struct ntx_plan_model *dm, int n_ctx, enum ntx_kv_type kv,
			  int n_seq, uint64_t *vram, uint64_t *per_token);

/* Recompute the reserves, the accounting and the estimate of a plan from its
 * layers' homes and executors (after a hand edit, say), with ring_slots ring
 * buffers when any layer streams to the GPU. Checks that homes and executors
 * are consistent (vram => gpu; no GPU use with a zero VRAM budget; pack_path
 * when a layer is on disk). Returns 0; -1 with NTX_ENOFIT when a budget is
 * exceeded (the message says which and by how much), NTX_EINVAL otherwise. */
int ntx_plan_account(struct ntx_plan *p, int ring_slots, struct ntx_err *err);

/* A human summary of a plan (several lines, each ending in '\n'). Caller
 * frees. */
char *ntx_plan_explain(const struct ntx_plan *p);

/* Serialize as JSON text (one document, indent 2, fixed key order, trailing
 * newline). Caller frees. */
char *ntx_plan_to_json(const struct ntx_plan *p, struct ntx_err *err);

/* Parse and validate a plan from JSON text; name is used in messages
 * ("plan.json:12:5: expected integer for \"bytes\""). */
struct ntx_plan *ntx_plan_from_json(const char *text, size_t len, const char *name,
				    struct ntx_err *err);
/* Read a plan file ("-" = stdin). Relative model and pack paths in the file
 * are relative to its directory; they come back resolved against it. */
struct ntx_plan *ntx_plan_load(const char *path, struct ntx_err *err);

/* Before writing p to out_path: paths as given (relative to the current
 * directory) stay valid when out_path is in the current directory or
 * stdout; else the relative ones become absolute. Returns 0 or -1. */
int ntx_plan_rebase(struct ntx_plan *p, const char *out_path, struct ntx_err *err);

/* The model file a plan names, or NULL with err set when it names none that
 * can be opened again ("-": the GGUF was read from stdin). Borrowed. */
const char *ntx_plan_model_file(const struct ntx_plan *p, struct ntx_err *err);

/* Refuse a plan made for another model: compares fingerprint and layer
 * count/bytes. Returns 0 or -1 (NTX_EMISMATCH). */
int ntx_plan_check_model(const struct ntx_plan *p, const struct ntx_model *m,
			 struct ntx_err *err);

void ntx_plan_free(struct ntx_plan *p);

/* ---- packs (plan_pack.c) ---- */

struct ntx_pack;

/* The pack serves this plan: same model (fingerprint, layer count) and every
 * layer whose home is disk (and not skipped) is in the pack. Returns 0 or -1
 * (NTX_EMISMATCH). */
int ntx_pack_check_plan(const struct ntx_pack *p, const struct ntx_plan *plan,
			struct ntx_err *err);

/* ---- hardware detection (hw.c) ---- */

/* MemAvailable from /proc/meminfo in bytes; 0 when unknown. */
uint64_t ntx_mem_available(void);

/* Is an NVIDIA kernel driver loaded or its user library (libcuda.so.1)
 * installed? */
int ntx_nvidia_driver_present(void);

/* Why no CUDA device can be used, for messages: "no NVIDIA driver found"
 * when there is none (whatever the runtime's cuda_msg), else "no usable
 * CUDA device (cuda_msg)". */
void ntx_gpu_unusable_why(char *why, size_t n, const char *cuda_msg, int driver_present);

/* Detect GPU (through the CUDA runtime when built with CUDA), RAM, cores and
 * free disk at pack_dir (NULL: current directory). Never fails hard: what it
 * cannot detect is left 0. Default bandwidths are filled in, the H2D rate
 * from the GPU's PCIe link when sysfs tells it (ntx_hw_link_estimate). */
void ntx_hw_detect(struct ntx_plan_hw *hw, int gpu_index, const char *pack_dir);

/* --probe: measure pinned H2D bandwidth (GPU only), O_DIRECT read rate (of a
 * temporary file of up to 1 GiB written in probe_dir and unlinked at once)
 * and the CPU GEMV rate, with the CPU kernels the switches of tun choose
 * (handed to them with ntx_cpu_tunables_set: NTX_CPU_SCALAR, NTX_NO_AMX;
 * NULL: the kernels as they are); fills the *_gbps fields it measured
 * (their *_src set to NTX_SRC_PROBE) and sets probed. Returns 0, or -1 when
 * a measurement failed: the others are still filled in, err says which
 * failed and why. */
int ntx_hw_probe(struct ntx_plan_hw *hw, const char *probe_dir, int n_threads,
		 const struct ntx_tunables *tun, struct ntx_err *err);

/* ---- the PCIe link ---- */

/* A sysfs link speed ("32.0 GT/s PCIe", "8 GT/s") in GT/s per lane; 0 when
 * it is not one ("Unknown", garbage). */
double ntx_pcie_gts(const char *s);
/* A sysfs link width ("16", "x16") in lanes, 1..32; 0 when it is not one. */
int ntx_pcie_width(const char *s);
/* What pinned host-to-device copies reach over a link of width lanes at gts
 * GT/s: the raw rate after the line code (8b/10b to 5 GT/s, 128b/130b from
 * 8 GT/s, ~1 for Gen6's FLITs) x NTX_PLAN_PCIE_EFFICIENCY, in GB/s; 0 when
 * either is unknown. Gen5 x16: 55.4; Gen4 x16: 27.7; Gen3 x8: 6.9. */
double ntx_pcie_gbps(double gts, int width);
/* The same from the two sysfs strings (max_link_speed, max_link_width). */
double ntx_pcie_link_gbps(const char *speed, const char *width);
/* The link of the PCI function bus_id ("0000:3b:00.0", any case, CUDA's
 * 8-digit domain accepted) under the sysfs tree root ("/sys"): its
 * max_link_speed and max_link_width, each lowered to that of any bridge
 * above it that reports one (the link can run no faster than its slowest
 * partner; the current speed is not used: a GPU lowers it when idle).
 * Returns ntx_pcie_gbps of that and fills *gts and *width; 0 (and zeros)
 * when the files are missing or unreadable. */
double ntx_pcie_sysfs_link(const char *root, const char *bus_id, double *gts, int *width);
/* With a GPU and its bus id known (ntx_hw_detect does this with "/sys"):
 * h2d_gbps from the link, h2d_src NTX_SRC_LINK, pcie_gts and pcie_width.
 * Returns 1 when it estimated, else 0 (hw unchanged). */
int ntx_hw_link_estimate(struct ntx_plan_hw *hw, const char *sysfs_root);

/* Detect only what the NTX_HW_* bits in what ask for (the rest is left 0 and
 * its bit clear in hw->detected); ntx_hw_detect is what = NTX_HW_ALL. */
void ntx_hw_detect_some(struct ntx_plan_hw *hw, int gpu_index, const char *pack_dir,
			unsigned what);

#endif
