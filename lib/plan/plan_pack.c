/* plan_pack.c - does a pack serve a plan (see plan.h). */
#include "plan.h"

#include <stdio.h>
#include <string.h>

#include "pack.h"

/* "0-3,7,9-12" into buf: the layers of the pack. */
static void layer_list(const struct ntx_pack *p, char *buf, size_t n)
{
	size_t len = 0;
	int x = 0;

	buf[0] = '\0';
	while (x < p->n_extents && len + 32 < n) {
		int a = p->extents[x].layer, b = a;

		while (x + 1 < p->n_extents && p->extents[x + 1].layer == b + 1)
			b = p->extents[++x].layer;
		x++;
		len += (size_t)snprintf(buf + len, n - len, "%s%d", len ? "," : "", a);
		if (b > a)
			len += (size_t)snprintf(buf + len, n - len, "-%d", b);
	}
	if (x < p->n_extents)
		snprintf(buf + len, n - len, ",...");
	if (!p->n_extents)
		snprintf(buf, n, "none");
}

int ntx_pack_check_plan(const struct ntx_pack *p, const struct ntx_plan *plan,
			struct ntx_err *err)
{
	char have[160];
	int l;

	if (strcmp(plan->model.fingerprint, p->fingerprint_hex) != 0)
		return ntx_err_set(err, NTX_EMISMATCH,
				   "the plan is for another model: fingerprint %s, the pack's is %s",
				   plan->model.fingerprint, p->fingerprint_hex);
	if (plan->model.n_layer != p->n_layer)
		return ntx_err_set(err, NTX_EMISMATCH, "the plan has %d layers, the pack's model %d",
				   plan->model.n_layer, p->n_layer);
	for (l = 0; l < plan->model.n_layer; l++) {
		const struct ntx_plan_layer *pl = &plan->layers[l];

		if (pl->skip || pl->home != NTX_TIER_DISK || ntx_pack_extent_for_layer(p, l))
			continue;
		layer_list(p, have, sizeof have);
		return ntx_err_set(err, NTX_EMISMATCH,
				   "layer %d is on disk in the plan but not in the pack (it has layers %s)",
				   l, have);
	}
	return 0;
}
