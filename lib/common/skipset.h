/* skipset.h - a layer skip set for ntx-run (--skip, --draft-skip): an
 * ntx-skip-calib JSON document's top-level "skip" array (read and checked by
 * ntx_plan_skip_parse in plan_inputs.c, which ntx-plan --skip uses too; when
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

#endif
