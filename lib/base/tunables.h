/* tunables.h - the switches that change how ntx computes, not what: kernel
 * choices for comparisons and measurements, and fault injection for tests;
 * and where the planner keeps what --probe measured (the probe cache).
 *
 * They come from the environment (NTX_*), read in one place,
 * ntx_tunables_from_env(), once per engine (ntx_engine_new; a tool without
 * an engine reads them once at its start). The engine hands the struct
 * down: to the CPU kernels with ntx_cpu_tunables_set, to the CUDA kernels
 * with ntx_cuda_tunables_set, to the pack reader with ntx_dio_open. Kernels
 * never read the environment. doc/tunables.md lists every switch: its
 * values, default, what it changes and who reads it. */
#ifndef NTX_TUNABLES_H
#define NTX_TUNABLES_H

#include <stdint.h>

#define NTX_TUNABLES_PATH_MAX 4096

/* Every field holds its default after ntx_tunables_default(); a flag is 0
 * or 1. */
struct ntx_tunables {
	/* ---- CPU kernels (kernels/cpu/dispatch.c) ---- */
	int cpu_scalar;     /* NTX_CPU_SCALAR: scalar reference kernels only (0) */
	int no_amx;         /* NTX_NO_AMX: no AMX-INT8 tiles (0) */
	/* ---- CUDA kernels (kernels/cuda/tuning.cu) ---- */
	int gemv_dl;        /* NTX_GEMV_DL: direct-load GEMV for Q4_K, Q5_K and split rows (1) */
	int gemv_early;     /* NTX_GEMV_EARLY: its first weight loads before the PDL wait (1) */
	int gemv_dl_shape;  /* NTX_GEMV_DL_SHAPE: single-token direct-load shape 0..2, -1 the default (1) */
	int gemv_mma;       /* NTX_GEMV_MMA: tensor cores for 2..8 tokens of Q4_K / split Q6_K,
			     * the same bits as the dp4a lanes (1) */
	int gemv_mma_overlap; /* NTX_GEMV_MMA_OVERLAP: a GEMV's second launch (its other weight
			       * type) runs beside its first instead of after it (1) */
	int attn_prefetch;  /* NTX_ATTN_PREFETCH: decode attention prefetches into L2 (1) */
	int attn_chunk;     /* NTX_ATTN_CHUNK: least positions per attention split, a multiple of 32 (32) */
	int no_pdl;         /* NTX_NO_PDL: no programmatic dependent launch (0) */
	int no_cublas;      /* NTX_NO_CUBLAS: do not load cuBLAS (0) */
	char cublas[NTX_TUNABLES_PATH_MAX]; /* NTX_CUBLAS: cuBLAS library to try first ("" none) */
	/* ---- engine (lib/engine) ---- */
	int no_graphs;      /* NTX_NO_GRAPHS: no CUDA graphs for decode steps (0) */
	int no_hugepages;   /* NTX_NO_HUGEPAGES: no huge-page copies of CPU weights (0) */
	int xcache_experts; /* NTX_EXPERT_CACHE: experts the cache of disk experts holds, 1..1024
			     * (0: 4 x the experts a token uses, at least 16) */
	int expert_upload;  /* NTX_EXPERT_UPLOAD: a CPU expert of the expert split routed at
			     * least this many rows of a prompt pass is copied to VRAM and
			     * computed by the GPU; 9 .. 65536, 0 never (16) */
	int spec_backoff;   /* NTX_SPEC_BACKOFF: the adaptive draft length may pause drafting
			     * that does not pay (spec.h) (1) */
	/* ---- the planner (lib/plan) ---- */
	int expert_split;   /* NTX_EXPERT_SPLIT: plans may keep a MoE model's experts in RAM for
			     * the CPU by themselves, without --vram-experts (0: until the GPU
			     * path is measured on a device) */
	/* ---- pack reads (lib/stream/dio.c; tests) ---- */
	int64_t fault_read; /* NTX_FAULT_READ: the N-th chunk read fails with EIO; 0 off,
			     * -1 set to something else than an integer >= 1 (opening a
			     * pack reader then fails) */
	int fault_read_every; /* NTX_FAULT_READ_EVERY: every read from the N-th on fails (0) */
	int dio_buffered;   /* NTX_DIO_BUFFERED: no O_DIRECT, as if refused (0) */
	/* ---- the planner's probe cache (lib/plan/probe_cache.c) ---- */
	int probe_cache;    /* NTX_PROBE_CACHE: plans read the rates an earlier --probe stored,
			     * and --probe stores them (1) */
	char cache_dir[NTX_TUNABLES_PATH_MAX]; /* $XDG_CACHE_HOME (absolute), else $HOME/.cache;
						 * "" when neither is set (no cache) */
};

/* The defaults: what ntx does with none of the variables set. */
void ntx_tunables_default(struct ntx_tunables *t);

/* The defaults, then every NTX_* switch set in the environment. A value a
 * switch does not take leaves its default (doc/tunables.md says, per
 * switch), except NTX_FAULT_READ: fault_read = -1. Never fails. */
void ntx_tunables_from_env(struct ntx_tunables *t);

#endif
