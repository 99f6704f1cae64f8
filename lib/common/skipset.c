/* skipset.c - read ntx-skip-calib JSON (see skipset.h). */
#include "skipset.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static json_t *load_doc(const char *path, struct ntx_err *err)
{
	json_error_t je;
	FILE *fp = fopen(path, "rb");
	json_t *doc, *f;

	/* open it here: the message is then "path: strerror", once */
	if (!fp) {
		ntx_err_errno(err, errno, "%s", path);
		return NULL;
	}
	doc = json_loadf(fp, 0, &je);
	fclose(fp);
	if (!doc) {
		if (je.line <= 0)
			ntx_err_set(err, NTX_EIO, "%s: %s", path, je.text);
		else
			ntx_err_set(err, NTX_EFORMAT, "%s:%d:%d: %s", path, je.line, je.column, je.text);
		return NULL;
	}
	if (!json_is_object(doc)) {
		ntx_err_set(err, NTX_EFORMAT, "%s: not an ntx-skip-calib file (not a JSON object)", path);
		json_decref(doc);
		return NULL;
	}
	f = json_object_get(doc, "format");
	if (!json_is_string(f) || strcmp(json_string_value(f), "ntx.skip") != 0) {
		ntx_err_set(err, NTX_EFORMAT, "%s: not an ntx-skip-calib file (\"format\" is not \"ntx.skip\")",
			    path);
		json_decref(doc);
		return NULL;
	}
	if (json_integer_value(json_object_get(doc, "version")) != 1) {
		ntx_err_set(err, NTX_EUNSUP, "%s: unsupported ntx.skip version", path);
		json_decref(doc);
		return NULL;
	}
	return doc;
}

int ntx_skipset_load(const char *path, const struct ntx_model *m, uint8_t *flags,
		     struct ntx_err *err)
{
	json_t *doc = load_doc(path, err), *skip, *fp, *v;
	size_t i;
	int n_layer;

	if (!doc)
		return -1;
	fp = json_object_get(json_object_get(doc, "model"), "fingerprint");
	if (m && json_is_string(fp) && strcmp(json_string_value(fp), m->fingerprint_hex) != 0) {
		ntx_err_set(err, NTX_EMISMATCH,
			    "%s: made for another model (fingerprint %s, this model has %s)", path,
			    json_string_value(fp), m->fingerprint_hex);
		json_decref(doc);
		return -1;
	}
	n_layer = m ? m->cfg.n_layer
		    : (int)json_integer_value(json_object_get(json_object_get(doc, "model"), "n_layer"));
	skip = json_object_get(doc, "skip");
	if (!json_is_array(skip)) {
		ntx_err_set(err, NTX_EFORMAT, "%s: missing \"skip\" array of layer indices", path);
		json_decref(doc);
		return -1;
	}
	json_array_foreach(skip, i, v) {
		json_int_t l = json_integer_value(v);

		if (!json_is_integer(v) || l < 0 || l >= n_layer) {
			ntx_err_set(err, NTX_EFORMAT,
				    "%s: \"skip\"[%zu] must be a layer index in [0, %d)", path, i,
				    n_layer);
			json_decref(doc);
			return -1;
		}
		flags[l] = 1;
	}
	json_decref(doc);
	return 0;
}

int ntx_skipset_scores(const char *path, int n_layer, double *cos, struct ntx_err *err)
{
	json_t *doc = load_doc(path, err), *layers, *v;
	size_t i;
	int l;

	if (!doc)
		return -1;
	for (l = 0; l < n_layer; l++)
		cos[l] = 1.0;
	layers = json_object_get(doc, "layers");
	if (!json_is_array(layers)) {
		ntx_err_set(err, NTX_EFORMAT, "%s: missing \"layers\" array", path);
		json_decref(doc);
		return -1;
	}
	json_array_foreach(layers, i, v) {
		json_t *ix = json_object_get(v, "index"), *cm = json_object_get(v, "cos_mean");
		json_int_t k = json_integer_value(ix);

		if (!json_is_integer(ix) || k < 0 || k >= n_layer || !json_is_number(cm)) {
			ntx_err_set(err, NTX_EFORMAT,
				    "%s: \"layers\"[%zu] needs an \"index\" in [0, %d) and a numeric \"cos_mean\"",
				    path, i, n_layer);
			json_decref(doc);
			return -1;
		}
		cos[k] = json_number_value(cm);
	}
	json_decref(doc);
	return 0;
}
