/* probe_cache.h - the probe cache: the rates `ntx-plan --probe` measured on
 * this machine, kept in a small JSON file ("format": "ntx.probe",
 * doc/plan-json.md "The probe cache"), so that plans made later without
 * --probe (ntx-plan, ntx-run -m, ntx_placement_make) use measured rates
 * instead of the defaults. A file written on another machine, or for another
 * GPU or filesystem, is not applied; a malformed one is refused with a
 * message (the caller ignores it and says so). */
#ifndef NTX_PROBE_CACHE_H
#define NTX_PROBE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "plan.h"
#include "tunables.h"

/* What identifies the machine: host name, CPU model (/proc/cpuinfo), and
 * the CPUs this process may use (the CPU probe ran that many threads). */
struct ntx_probe_key {
	char host[256];
	char cpu_model[256];
	int cpu_cores;
};

/* The key of the machine this runs on, with cpu_cores as detected. */
void ntx_probe_key_now(struct ntx_probe_key *k, int cpu_cores);

/* The cache file, DIR/ntx/probe.json for tun->cache_dir, into path (n
 * bytes): 0, or -1 when the cache is off (NTX_PROBE_CACHE=0) or there is no
 * directory for it (tun->cache_dir ""). */
int ntx_probe_cache_path(const struct ntx_tunables *tun, char *path, size_t n);

/* The cache document for what hw measured (the rates whose source is
 * NTX_SRC_PROBE; the others are null) on machine k; probed_at: seconds
 * since the epoch. One JSON document, trailing newline; caller frees. NULL
 * with err set on allocation failure. */
char *ntx_probe_cache_to_json(const struct ntx_plan_hw *hw, const struct ntx_probe_key *k,
			      int64_t probed_at, struct ntx_err *err);

/* Validate a cache document (name in messages: "name:3:14: ..."), then,
 * when it was written on machine k (host and CPU model), apply each part
 * that matches hw: the CPU rates when cpu_cores is k's, the H2D rate when
 * the GPU name and bus id are hw's, the disk rate when the filesystem
 * (st_dev) is hw->disk_dev's (NTX_HW_DISK detected). Only rates hw holds as
 * a default or a link estimate are replaced; their source becomes
 * NTX_SRC_CACHE. Returns the number of rates applied (0: another machine,
 * or nothing matches), or -1 with err set when the document is not a valid
 * cache (hw then unchanged). *probed_at (may be NULL) gets its time. */
int ntx_probe_cache_apply(const char *text, size_t len, const char *name,
			  const struct ntx_probe_key *k, struct ntx_plan_hw *hw, int64_t *probed_at,
			  struct ntx_err *err);

/* Read the file at path and apply it: as ntx_probe_cache_apply; a missing
 * file is 0 (no cache yet). Messages name the file. */
int ntx_probe_cache_load(const char *path, const struct ntx_probe_key *k, struct ntx_plan_hw *hw,
			 int64_t *probed_at, struct ntx_err *err);

/* Write the cache document for hw at path: its directory is created (mode
 * 0700) when missing, the file written through a temporary name and
 * renamed. Returns 0, or -1 with err set (naming the path). */
int ntx_probe_cache_save(const char *path, const struct ntx_plan_hw *hw,
			 const struct ntx_probe_key *k, int64_t probed_at, struct ntx_err *err);

#endif
