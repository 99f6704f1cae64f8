/* expert_stats.c - the "ntx.experts" routing counts (expert_stats.h). */
#include "expert_stats.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "jsonpos.h"

int ntx_expert_stats_write(const char *path, const char *fingerprint, int n_layer, int n_expert,
			   int n_expert_used, const uint64_t *counts, struct ntx_err *err)
{
	json_t *root = json_object(), *m = json_object(), *ls = json_array();
	struct ntx_outfile of;
	uint64_t tokens = 0;
	char *text = NULL;
	int l, x, ok = root && m && ls;

	for (l = 0; l < n_layer && !tokens; l++) /* the first layer that ran */
		for (x = 0; x < n_expert; x++)
			tokens += counts[(size_t)l * n_expert + x];
	tokens /= (uint64_t)(n_expert_used > 0 ? n_expert_used : 1);
	ok = ok && !json_object_set_new(root, "format", json_string("ntx.experts")) &&
	     !json_object_set_new(root, "version", json_integer(1)) &&
	     !json_object_set_new(m, "fingerprint", json_string(fingerprint)) &&
	     !json_object_set_new(m, "n_layer", json_integer(n_layer)) &&
	     !json_object_set_new(m, "n_expert", json_integer(n_expert)) &&
	     !json_object_set_new(m, "n_expert_used", json_integer(n_expert_used)) &&
	     !json_object_set(root, "model", m) &&
	     !json_object_set_new(root, "tokens", json_integer((json_int_t)tokens)) &&
	     !json_object_set(root, "layers", ls);
	for (l = 0; ok && l < n_layer; l++) {
		json_t *e = json_object(), *c = json_array();

		ok = e && c && !json_object_set_new(e, "index", json_integer(l)) &&
		     !json_object_set(e, "counts", c) && !json_array_append(ls, e);
		for (x = 0; ok && x < n_expert; x++)
			ok = !json_array_append_new(
				c, json_integer((json_int_t)counts[(size_t)l * n_expert + x]));
		json_decref(c);
		json_decref(e);
	}
	if (ok)
		text = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT);
	json_decref(m);
	json_decref(ls);
	json_decref(root);
	if (!text)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	if (ntx_outfile_open(&of, path, "w", stdout, err)) {
		free(text);
		return -1;
	}
	fputs(text, of.f);
	fputc('\n', of.f);
	free(text);
	return ntx_outfile_commit(&of, err);
}

int ntx_expert_stats_from_json(const char *text, size_t len, const char *name, int n_layer,
			       int n_expert, const char *fingerprint, uint64_t **counts,
			       struct ntx_err *err)
{
	struct ntx_jrd r = { text, len, name ? name : "<experts>", err };
	json_t *root, *m, *ls;
	char kp[NTX_JRD_PATH], ep[64];
	const char *fp;
	uint64_t *c = NULL, tokens;
	uint8_t *seen = NULL;
	int nl, ne, k, i, x;

	*counts = NULL;
	root = ntx_jrd_parse(text, len, r.name, err);
	if (!root)
		return -1;
	if (ntx_jrd_format(&r, root, "ntx.experts") || ntx_jrd_obj(&r, root, "", "model", &m, kp) ||
	    ntx_jrd_str(&r, m, "model", "fingerprint", 0, &fp) ||
	    ntx_jrd_fingerprint(&r, "model.fingerprint", fp) ||
	    ntx_jrd_int(&r, m, "model", "n_layer", 1, 10000, &nl) ||
	    ntx_jrd_int(&r, m, "model", "n_expert", 1, 1024, &ne) ||
	    ntx_jrd_int(&r, m, "model", "n_expert_used", 1, ne, &k) ||
	    ntx_jrd_bytes(&r, root, "", "tokens", &tokens))
		goto fail;
	if (fingerprint && strcmp(fp, fingerprint) != 0) {
		ntx_jrd_error(&r, "model.fingerprint",
			      "made for another model (fingerprint %s, this model has %s): run ntx-run --expert-stats on this model",
			      fp, fingerprint);
		goto fail;
	}
	if (nl != n_layer || ne != n_expert) {
		ntx_jrd_error(&r, "model", "made for %d layers of %d experts, but the model has %d of %d",
			      nl, ne, n_layer, n_expert);
		goto fail;
	}
	ls = ntx_jrd_member(&r, root, "", "layers", 1, kp);
	if (!ls || ntx_jrd_want(&r, ls, "layers", "layers", JSON_ARRAY, "an array"))
		goto fail;
	c = calloc((size_t)nl * (size_t)ne, sizeof *c);
	seen = calloc((size_t)nl, 1);
	if (!c || !seen) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	for (i = 0; i < (int)json_array_size(ls); i++) {
		json_t *e = json_array_get(ls, (size_t)i), *a;
		uint64_t sum = 0;
		int idx;

		snprintf(ep, sizeof ep, "layers[%d]", i);
		if (ntx_jrd_want(&r, e, ep, ep, JSON_OBJECT, "an object") ||
		    ntx_jrd_int(&r, e, ep, "index", 0, nl - 1, &idx))
			goto fail;
		if (seen[idx]) {
			ntx_jrd_path(kp, ep, "index");
			ntx_jrd_error(&r, kp, "layer %d is listed twice", idx);
			goto fail;
		}
		seen[idx] = 1;
		a = ntx_jrd_member(&r, e, ep, "counts", 1, kp);
		if (!a || ntx_jrd_want(&r, a, kp, "counts", JSON_ARRAY, "an array"))
			goto fail;
		if (json_array_size(a) != (size_t)ne) {
			ntx_jrd_error(&r, kp, "%zu counts, expected one per expert (%d)",
				      json_array_size(a), ne);
			goto fail;
		}
		for (x = 0; x < ne; x++) {
			json_t *v = json_array_get(a, (size_t)x);
			char xp[NTX_JRD_PATH + 16];

			snprintf(xp, sizeof xp, "%s[%d]", kp, x);
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    (uint64_t)json_integer_value(v) > tokens) {
				ntx_jrd_error(&r, xp,
					      "expected a count from 0 to \"tokens\" (%" PRIu64 ")", tokens);
				goto fail;
			}
			c[(size_t)idx * ne + x] = (uint64_t)json_integer_value(v);
			sum += c[(size_t)idx * ne + x];
		}
		/* a skipped layer routed nothing */
		if (sum && sum != tokens * (uint64_t)k) {
			ntx_jrd_error(&r, kp,
				      "the counts add up to %" PRIu64 ", not tokens x n_expert_used = %" PRIu64 " (or 0 for a layer that did not run)",
				      sum, tokens * (uint64_t)k);
			goto fail;
		}
	}
	for (i = 0; i < nl; i++)
		if (!seen[i]) {
			ntx_jrd_error(&r, "layers", "layer %d is missing (the model has %d layers)", i, nl);
			goto fail;
		}
	free(seen);
	json_decref(root);
	*counts = c;
	return 0;
fail:
	free(seen);
	free(c);
	json_decref(root);
	return -1;
}

int ntx_expert_stats_load(const char *path, int n_layer, int n_expert, const char *fingerprint,
			  uint64_t **counts, struct ntx_err *err)
{
	size_t len;
	char *text = ntx_read_text_file(path, &len, err);
	int rc;

	if (!text)
		return -1;
	rc = ntx_expert_stats_from_json(text, len, path, n_layer, n_expert, fingerprint, counts,
					err);
	free(text);
	return rc;
}
