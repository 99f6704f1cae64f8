/* skipset.h - read a layer skip set from an ntx-skip-calib JSON document
 * ("format": "ntx.skip", "version": 1): its top-level "skip" array of layer
 * indices is the set; when the document names a model fingerprint it must
 * match the model. Also the per-layer importance scores ("layers"). */
#ifndef NTX_SKIPSET_H
#define NTX_SKIPSET_H

#include <stdint.h>

#include "err.h"
#include "model.h"

/* Set flags[l] = 1 for every layer in the file's "skip" array (flags has
 * n_layer entries, not cleared first). m may be NULL (no fingerprint check;
 * n_layer then from the document). */
int ntx_skipset_load(const char *path, const struct ntx_model *m, uint8_t *flags,
		     struct ntx_err *err);

/* Per-layer mean cosine similarity (lower = more important) into
 * cos[0..n_layer); layers the file does not list get 1.0. */
int ntx_skipset_scores(const char *path, int n_layer, double *cos, struct ntx_err *err);

#endif
