/* plan_inputs.c - what ntx-plan reads besides plans: ntx-inspect's JSON (to
 * plan without the GGUF at hand), skip sets and importance scores from
 * ntx-skip-calib. Every error names file:line:col (jsonpos). */
#include "plan.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonpos.h"
#include "parse.h"
#include "plan_int.h"

/* ---- ntx-inspect JSON ---- */

/* The file's path, size and fingerprint; "model": a Llama model's
 * hyperparameters. */
static int inspect_read_model(struct ntx_jrd *r, json_t *root, struct ntx_plan_model *pm)
{
	json_t *m;
	char kp[NTX_JRD_PATH];
	const char *s;
	int64_t v;

	if (ntx_jrd_format(r, root, "ntx.inspect") || ntx_jrd_str(r, root, "", "path", 0, &s))
		return -1;
	if (!(pm->path = strdup(s)))
		return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
	if (ntx_jrd_bytes(r, root, "", "file_size_bytes", &pm->file_size) ||
	    ntx_jrd_str(r, root, "", "fingerprint", 0, &s) || ntx_jrd_fingerprint(r, "fingerprint", s))
		return -1;
	memcpy(pm->fingerprint, s, 17);
	m = ntx_jrd_member(r, root, "", "model", 1, kp);
	if (!m)
		return -1;
	if (json_is_null(m))
		return ntx_jrd_error(r, "model", "not a Llama model (\"model\" is null): nothing to plan");
	if (ntx_jrd_want(r, m, "model", "model", JSON_OBJECT, "an object") ||
	    ntx_jrd_int(r, m, "model", "n_layer", 1, 10000, &pm->n_layer) ||
	    ntx_jrd_int(r, m, "model", "n_embd", 1, 1 << 20, &pm->n_embd) ||
	    ntx_jrd_int(r, m, "model", "n_ff", 1, 1 << 22, &pm->n_ff) ||
	    ntx_jrd_int(r, m, "model", "n_head", 1, 1 << 14, &pm->n_head) ||
	    ntx_jrd_int(r, m, "model", "n_head_kv", 1, 1 << 14, &pm->n_head_kv) ||
	    ntx_jrd_int(r, m, "model", "head_dim", 1, 1 << 14, &pm->head_dim) ||
	    ntx_jrd_int(r, m, "model", "n_ctx_train", 1, 1 << 24, &pm->n_ctx_train) ||
	    ntx_jrd_i64(r, m, "model", "n_vocab", 1, INT32_MAX, &v, NULL) ||
	    ntx_jrd_bool(r, m, "model", "output_tied", &pm->output_tied, NULL))
		return -1;
	pm->n_vocab = v;
	/* a mixture of experts (optional: older documents have no experts) */
	if (json_object_get(m, "n_expert") &&
	    (ntx_jrd_int(r, m, "model", "n_expert", 0, NTX_PLAN_MAX_EXPERT, &pm->n_expert) ||
	     (pm->n_expert > 0 &&
	      ntx_jrd_int(r, m, "model", "n_expert_used", 1, pm->n_expert, &pm->n_expert_used))))
		return -1;
	return 0;
}

/* "layers": every layer once (seen: n_layer flags), its bytes and bytes by
 * tensor type. */
static int inspect_read_layers(struct ntx_jrd *r, json_t *root, struct ntx_plan_model *pm,
			       int *seen)
{
	json_t *ls, *e;
	char kp[NTX_JRD_PATH], ep[64];
	size_t i;

	ls = ntx_jrd_member(r, root, "", "layers", 1, kp);
	if (!ls || ntx_jrd_want(r, ls, "layers", "layers", JSON_ARRAY, "an array"))
		return -1;
	json_array_foreach(ls, i, e) {
		json_t *ty;
		const char *key;
		json_t *val;
		int idx;

		snprintf(ep, sizeof ep, "layers[%zu]", i);
		if (!json_is_object(e))
			return ntx_jrd_error(r, ep, "expected an object for %s (found %s)", ep,
					     ntx_json_type_name(e));
		if (ntx_jrd_int(r, e, ep, "index", INT32_MIN, INT32_MAX, &idx))
			return -1;
		ntx_jrd_path(kp, ep, "index");
		if (idx < 0 || idx >= pm->n_layer)
			return ntx_jrd_error(r, kp, "layer index %d is out of range [0, %d]", idx,
					     pm->n_layer - 1);
		if (seen[idx])
			return ntx_jrd_error(r, kp, "duplicate layer %d", idx);
		seen[idx] = 1;
		if (ntx_jrd_bytes(r, e, ep, "bytes", &pm->layer_bytes[idx]) ||
		    ntx_jrd_obj(r, e, ep, "types", &ty, kp))
			return -1;
		if (pm->n_expert > 0 && json_object_get(e, "bytes_per_expert")) {
			if (!pm->expert_bytes &&
			    !(pm->expert_bytes = calloc((size_t)pm->n_layer, sizeof *pm->expert_bytes)))
				return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
			if (ntx_jrd_bytes(r, e, ep, "bytes_per_expert", &pm->expert_bytes[idx]))
				return -1;
			if (pm->expert_bytes[idx] > pm->layer_bytes[idx] / (uint64_t)pm->n_expert) {
				ntx_jrd_path(kp, ep, "bytes_per_expert");
				return ntx_jrd_error(r, kp, "%d experts of %llu bytes do not fit in the layer's %llu bytes",
						     pm->n_expert, (unsigned long long)pm->expert_bytes[idx],
						     (unsigned long long)pm->layer_bytes[idx]);
			}
		}
		json_object_foreach(ty, key, val) {
			int t = ntx_type_from_name(key);
			uint64_t b;

			if (t < 0)
				return ntx_jrd_error(r, kp, "unknown tensor type \"%.40s\"", key);
			if (ntx_jrd_bytes(r, ty, kp, key, &b))
				return -1;
			pm->layer_type_bytes[t] += b;
		}
	}
	for (i = 0; i < (size_t)pm->n_layer; i++)
		if (!seen[i])
			return ntx_jrd_error(r, "layers", "layer %zu is missing (the model has %d layers)",
					     i, pm->n_layer);
	return 0;
}

/* "nonlayer": token embeddings, the output (unless tied) and the rest. */
static int inspect_read_nonlayer(struct ntx_jrd *r, json_t *root, struct ntx_plan_model *pm)
{
	json_t *nl, *e;
	char kp[NTX_JRD_PATH], ep[64];
	const char *s;
	size_t i;

	nl = ntx_jrd_member(r, root, "", "nonlayer", 1, kp);
	if (!nl || ntx_jrd_want(r, nl, "nonlayer", "nonlayer", JSON_ARRAY, "an array"))
		return -1;
	json_array_foreach(nl, i, e) {
		uint64_t b;

		snprintf(ep, sizeof ep, "nonlayer[%zu]", i);
		if (!json_is_object(e))
			return ntx_jrd_error(r, ep, "expected an object for %s (found %s)", ep,
					     ntx_json_type_name(e));
		if (ntx_jrd_str(r, e, ep, "name", 0, &s) || ntx_jrd_bytes(r, e, ep, "bytes", &b))
			return -1;
		if (strcmp(s, "token_embd.weight") == 0)
			pm->tok_embd_bytes = b;
		else if (strcmp(s, "output.weight") == 0 && !pm->output_tied)
			pm->output_bytes = b;
		else
			pm->other_bytes += b;
	}
	if (!pm->tok_embd_bytes)
		return ntx_jrd_error(r, "nonlayer", "no \"token_embd.weight\" among the non-layer tensors");
	if (!pm->output_tied && !pm->output_bytes)
		return ntx_jrd_error(r, "nonlayer", "no \"output.weight\" among the non-layer tensors and the output is not tied");
	return 0;
}

int ntx_plan_model_from_inspect(const char *text, size_t len, const char *name,
				struct ntx_plan_model *pm, struct ntx_err *err)
{
	struct ntx_jrd r = { text, len, name ? name : "<inspect>", err };
	json_t *root;
	int *seen = NULL;

	memset(pm, 0, sizeof *pm);
	root = ntx_jrd_parse(text, len, r.name, err);
	if (!root)
		return -1;
	if (inspect_read_model(&r, root, pm))
		goto fail;
	pm->layer_bytes = calloc((size_t)pm->n_layer, sizeof *pm->layer_bytes);
	seen = calloc((size_t)pm->n_layer, sizeof *seen);
	if (!pm->layer_bytes || !seen) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	if (inspect_read_layers(&r, root, pm, seen) || inspect_read_nonlayer(&r, root, pm))
		goto fail;
	free(seen);
	json_decref(root);
	return 0;
fail:
	free(seen);
	json_decref(root);
	ntx_plan_model_free(pm);
	return -1;
}
