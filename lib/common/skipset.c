/* skipset.c - skip sets as layer flags (see skipset.h). */
#include "skipset.h"

#include <stdlib.h>

#include "plan.h"

int ntx_skipset_load(const char *path, const struct ntx_model *m, uint8_t *flags,
		     struct ntx_err *err)
{
	int *layers, n, i;

	if (ntx_plan_skip_parse(path, m->cfg.n_layer, -1, m->fingerprint_hex, &layers, &n, err))
		return -1;
	for (i = 0; i < n; i++)
		flags[layers[i]] = 1;
	free(layers);
	return 0;
}
