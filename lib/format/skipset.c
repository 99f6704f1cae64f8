/* skipset.c - skip sets and importance scores from ntx-skip-calib's
 * "ntx.skip" documents, as layer lists or layer flags (see skipset.h).
 * Every error names file:line:col (jsonpos). */
#include "skipset.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "jsonpos.h"
#include "parse.h"

int ntx_skipset_load(const char *path, const struct ntx_model *m, uint8_t *flags,
		     struct ntx_err *err)
{
	int *layers, n, i;

	if (ntx_skip_parse(path, m->cfg.n_layer, -1, m->fingerprint_hex, &layers, &n, err))
		return -1;
	for (i = 0; i < n; i++)
		flags[layers[i]] = 1;
	free(layers);
	return 0;
}

/* ---- skip sets and scores ---- */

static int is_layer_list(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || *s == ',' || *s == '-' || *s == ' '))
			return 0;
	return 1;
}

/* Parse a skip/scores document: format, version, optional fingerprint. */
static json_t *parse_skip_doc(struct ntx_jrd *r, const char *text, size_t len,
			      const char *fingerprint)
{
	json_t *root, *m, *fp;

	r->text = text;
	r->len = len;
	root = ntx_jrd_parse(text, len, r->name, r->err);
	if (!root)
		return NULL;
	if (ntx_jrd_format(r, root, "ntx.skip")) {
		json_decref(root);
		return NULL;
	}
	m = json_object_get(root, "model");
	fp = json_object_get(m, "fingerprint");
	if (fingerprint && fp) {
		if (!json_is_string(fp)) {
			ntx_jrd_error(r, "model.fingerprint", "expected a string for \"fingerprint\" (found %s)",
			     ntx_json_type_name(fp));
			json_decref(root);
			return NULL;
		}
		if (strcmp(json_string_value(fp), fingerprint) != 0) {
			ntx_jsonpos_error(r->err, NTX_EMISMATCH, r->text, r->len, r->name,
					  "model.fingerprint",
					  "made for another model (fingerprint %.16s, this model has %s)",
					  json_string_value(fp), fingerprint);
			json_decref(root);
			return NULL;
		}
	}
	return root;
}

static json_t *load_skip_doc(struct ntx_jrd *r, const char *path, char **text, size_t *len,
			     const char *fingerprint)
{
	*text = ntx_read_text_file(path, len, r->err);
	if (!*text)
		return NULL;
	return parse_skip_doc(r, *text, *len, fingerprint);
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

int ntx_skip_parse(const char *arg, int n_layer, int set_index, const char *fingerprint,
			int **layers, int *n, struct ntx_err *err)
{
	char *text;
	size_t len;
	int rc;

	*layers = NULL;
	*n = 0;
	if (is_layer_list(arg)) {
		if (set_index >= 0)
			return ntx_err_set(err, NTX_EINVAL,
					   "--skip-set needs a skip file, not a layer list");
		return ntx_parse_range_list(arg, n_layer, layers, n, err);
	}
	text = ntx_read_text_file(arg, &len, err);
	if (!text)
		return -1;
	rc = ntx_skip_from_json(text, len, arg, n_layer, set_index, fingerprint, layers, n,
				     err);
	free(text);
	return rc;
}

int ntx_skip_from_json(const char *text, size_t len, const char *name, int n_layer,
			    int set_index, const char *fingerprint, int **layers, int *n,
			    struct ntx_err *err)
{
	struct ntx_jrd r = { NULL, 0, name, err };
	char path[NTX_JRD_PATH];
	json_t *root, *arr, *e;
	size_t i;
	int *out = NULL, k = 0;

	*layers = NULL;
	*n = 0;
	root = parse_skip_doc(&r, text, len, fingerprint);
	if (!root)
		return -1;
	if (set_index >= 0) {
		json_t *sets = json_object_get(root, "sets"), *set;

		if (!json_is_array(sets)) {
			ntx_jrd_error(&r, "", "--skip-set %d: the file has no \"sets\" array", set_index);
			goto fail;
		}
		if ((size_t)set_index >= json_array_size(sets)) {
			ntx_jrd_error(&r, "sets", "--skip-set %d: the file has %zu sets", set_index,
			     json_array_size(sets));
			goto fail;
		}
		set = json_array_get(sets, (size_t)set_index);
		snprintf(path, sizeof path, "sets[%d]", set_index);
		if (!json_is_object(set)) {
			ntx_jrd_error(&r, path, "expected an object for %s (found %s)", path, ntx_json_type_name(set));
			goto fail;
		}
		arr = ntx_jrd_member(&r, set, path, "layers", 1, path);
		if (!arr)
			goto fail;
	} else {
		arr = ntx_jrd_member(&r, root, "", "skip", 0, path);
		if (!arr) {
			json_t *sets = json_object_get(root, "sets");

			if (json_is_array(sets))
				ntx_jrd_error(&r, "", "no top-level \"skip\" array: choose one of the %zu sets with --skip-set N",
				     json_array_size(sets));
			else
				ntx_jrd_error(&r, "", "missing \"skip\"");
			goto fail;
		}
	}
	if (!json_is_array(arr)) {
		ntx_jrd_error(&r, path, "expected an array of layer indices (found %s)", ntx_json_type_name(arr));
		goto fail;
	}
	out = malloc((json_array_size(arr) + 1) * sizeof *out);
	if (!out) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	json_array_foreach(arr, i, e) {
		char ep[NTX_JRD_PATH + 32];
		json_int_t v;

		snprintf(ep, sizeof ep, "%s[%zu]", path, i);
		if (!json_is_integer(e)) {
			ntx_jrd_error(&r, ep, "expected a layer index (integer) (found %s)", ntx_json_type_name(e));
			goto fail;
		}
		v = json_integer_value(e);
		if (v < 0 || v >= n_layer) {
			ntx_jrd_error(&r, ep, "layer %lld is out of range [0, %d]", (long long)v, n_layer - 1);
			goto fail;
		}
		out[k++] = (int)v;
	}
	qsort(out, (size_t)k, sizeof *out, cmp_int);
	{
		int j, u = 0;

		for (j = 0; j < k; j++)
			if (!u || out[u - 1] != out[j])
				out[u++] = out[j];
		k = u;
	}
	json_decref(root);
	*layers = out;
	*n = k;
	return 0;
fail:
	free(out);
	json_decref(root);
	return -1;
}

int ntx_scores_load(const char *path, int n_layer, const char *fingerprint,
			 double **scores, struct ntx_err *err)
{
	struct ntx_jrd r = { NULL, 0, path, err };
	char *text = NULL, kp[NTX_JRD_PATH], ep[64];
	json_t *root, *ls, *e;
	double *sc = NULL;
	unsigned char *seen = NULL;
	size_t len, i;

	*scores = NULL;
	root = load_skip_doc(&r, path, &text, &len, fingerprint);
	if (!root) {
		free(text);
		return -1;
	}
	sc = malloc((size_t)n_layer * sizeof *sc);
	seen = calloc((size_t)n_layer, 1);
	if (!sc || !seen) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	for (i = 0; i < (size_t)n_layer; i++)
		sc[i] = NAN;
	ls = ntx_jrd_member(&r, root, "", "layers", 1, kp);
	if (!ls || ntx_jrd_want(&r, ls, "layers", "layers", JSON_ARRAY, "an array"))
		goto fail;
	json_array_foreach(ls, i, e) {
		int idx;
		double c;

		snprintf(ep, sizeof ep, "layers[%zu]", i);
		if (!json_is_object(e)) {
			ntx_jrd_error(&r, ep, "expected an object for %s (found %s)", ep, ntx_json_type_name(e));
			goto fail;
		}
		if (ntx_jrd_int(&r, e, ep, "index", INT32_MIN, INT32_MAX, &idx) ||
		    ntx_jrd_dbl(&r, e, ep, "cos_mean", -1.0001, 1.0001, 0, &c))
			goto fail;
		ntx_jrd_path(kp, ep, "index");
		if (idx < 0 || idx >= n_layer) {
			ntx_jrd_error(&r, kp, "layer index %d is out of range [0, %d]", idx, n_layer - 1);
			goto fail;
		}
		if (seen[idx]) {
			ntx_jrd_error(&r, kp, "duplicate layer %d", idx);
			goto fail;
		}
		seen[idx] = 1;
		sc[idx] = c;
	}
	free(seen);
	json_decref(root);
	free(text);
	*scores = sc;
	return 0;
fail:
	free(seen);
	free(sc);
	json_decref(root);
	free(text);
	return -1;
}

