/* expert_stats.h - routing counts of a mixture-of-experts model, the
 * calibration that tells ntx-plan which experts are hot: written by
 * ntx-run --expert-stats FILE, read by ntx-plan --expert-stats FILE.
 * JSON ("format": "ntx.experts", "version": 1; doc/plan-json.md):
 *   {"format": "ntx.experts", "version": 1,
 *    "model": {"fingerprint": "16 hex digits", "n_layer": L, "n_expert": E,
 *              "n_expert_used": K},
 *    "tokens": rows routed in each layer,
 *    "layers": [{"index": 0, "counts": [E counts]}, ...]}   (every layer once) */
#ifndef NTX_EXPERT_STATS_H
#define NTX_EXPERT_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Write counts [n_layer][n_expert] to path through a temporary name. */
int ntx_expert_stats_write(const char *path, const char *fingerprint, int n_layer, int n_expert,
			   int n_expert_used, const uint64_t *counts, struct ntx_err *err);

/* Read a document (name for messages) made for a model of n_layer layers
 * and n_expert experts (and, unless NULL, this fingerprint) into a new
 * array [n_layer][n_expert] (caller frees). Refuses, with the position
 * and the fix, anything else: another model, a missing or repeated
 * layer, counts of the wrong length, a layer whose counts do not add up
 * to tokens x n_expert_used. */
int ntx_expert_stats_from_json(const char *text, size_t len, const char *name, int n_layer,
			       int n_expert, const char *fingerprint, uint64_t **counts,
			       struct ntx_err *err);
int ntx_expert_stats_load(const char *path, int n_layer, int n_expert, const char *fingerprint,
			  uint64_t **counts, struct ntx_err *err);

#endif
