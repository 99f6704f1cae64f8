/* skipset.h - a layer skip set for ntx-run (--skip, --draft-skip): an
 * ntx-skip-calib JSON document's top-level "skip" array (read and checked by
 * ntx_skip_parse in plan_inputs.c, which ntx-plan --skip uses too; when
 * the document names a model fingerprint it must match). */
#ifndef NTX_SKIPSET_H
#define NTX_SKIPSET_H

#include <stdint.h>

#include "err.h"
#include "model.h"

/* Set flags[l] = 1 for every layer of the set in path (flags has
 * m->cfg.n_layer entries, not cleared first). Returns 0 or -1. */
int ntx_skipset_load(const char *path, const struct ntx_model *m, uint8_t *flags,
		     struct ntx_err *err);

/* ---- skip sets and importance scores (from ntx-skip-calib) ---- */

/* The layers of a --skip argument: a layer list ("3,5,10-12") or the path of
 * an "ntx.skip" JSON document, whose top-level "skip" array is the set, or,
 * with set_index >= 0, its "sets"[set_index]."layers". When the document has
 * "model": {"fingerprint"} and fingerprint is not NULL they must match.
 * *layers: sorted, unique, caller frees. Returns 0 or -1. */
int ntx_skip_parse(const char *arg, int n_layer, int set_index, const char *fingerprint,
			int **layers, int *n, struct ntx_err *err);

/* The same from the text of an "ntx.skip" document (name: for messages). */
int ntx_skip_from_json(const char *text, size_t len, const char *name, int n_layer,
			    int set_index, const char *fingerprint, int **layers, int *n,
			    struct ntx_err *err);

/* Per-layer importance from an "ntx.skip" document's "layers":
 * [{"index": i, "cos_mean": x}, ...] into a new array of n_layer doubles
 * (caller frees); unlisted layers get NAN (least important). */
int ntx_scores_load(const char *path, int n_layer, const char *fingerprint,
			 double **scores, struct ntx_err *err);

#endif
