/* jsonpos.h - where a JSON value starts in its text, by path.
 *
 * jansson reports positions for syntax errors only. Readers of ntx's JSON
 * formats (plans, ntx-inspect output, skip files) parse with jansson first
 * and then, only when a value is semantically wrong, ask this scanner where
 * it is, so the message can say `plan.json:12:5: expected integer for "bytes"`.
 *
 * Paths name a value from the document root: "" is the root, "model" a member
 * of the root object, "layers[3].home" a member of the fourth element of the
 * "layers" array. Keys are matched verbatim (a key containing '.' or '[' is
 * matched as written). Lines and columns are 1-based; columns count bytes.
 *
 * The scanner keeps nothing: each lookup walks the text once, descending
 * only into the containers on the path, so it costs nothing until an error
 * has to be reported. It expects text jansson has accepted; on malformed text
 * it stops and reports "not found". */
#ifndef NTX_JSONPOS_H
#define NTX_JSONPOS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "err.h"

/* Find the first character of the value at path. Returns 0 and sets *line and
 * *col, or -1 when no value has that path. */
int ntx_jsonpos_find(const char *text, size_t len, const char *path, int *line, int *col);

/* Like ntx_jsonpos_find, but when path does not exist (a missing member, an
 * index past the end) fall back to the nearest enclosing value that does.
 * Returns the length of the path prefix that was found (0 = the root). */
size_t ntx_jsonpos_nearest(const char *text, size_t len, const char *path, int *line, int *col);

/* Fill *err with code and "name:LINE:COL: message" where LINE:COL is the
 * position of the value at path (or of the nearest enclosing value). name is
 * the file name shown to the user. Returns -1. */
int ntx_jsonpos_error(struct ntx_err *err, int code, const char *text, size_t len,
		      const char *name, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

/* ---- validating readers ----
 *
 * Typed getters for documents parsed with jansson that report every
 * semantic error as "NAME:LINE:COL: message" at the offending value (or, for
 * a missing member, at the object that lacks it). Paths are as above: opath
 * names the object (NULL or "" = the root), key the member. All return 0, or
 * -1 with *r->err filled (NTX_EFORMAT). Readers ignore unknown members. */

struct ntx_jrd {
	const char *text;   /* the document text (for positions) */
	size_t len;
	const char *name;   /* file name shown in messages */
	struct ntx_err *err;
};

#define NTX_JRD_PATH 256                 /* room for a path */
#define NTX_JRD_MAX_BYTES (1ull << 50)   /* largest byte count accepted (1 PiB) */

/* Parse text (duplicate keys rejected); the top level must be an object.
 * Syntax errors are reported at jansson's position. New reference or NULL. */
json_t *ntx_jrd_parse(const char *text, size_t len, const char *name, struct ntx_err *err);

/* Check "format" == format and "version" == 1. */
int ntx_jrd_format(struct ntx_jrd *r, json_t *root, const char *format);

/* Report a message at path. Returns -1. */
int ntx_jrd_error(struct ntx_jrd *r, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* buf (NTX_JRD_PATH bytes) = opath.key */
void ntx_jrd_path(char *buf, const char *opath, const char *key);

/* "object", "array", "string", "integer", "number", "boolean", "null". */
const char *ntx_json_type_name(const json_t *v);

/* Member key of obj; NULL when absent (an error when required). kpath
 * (NTX_JRD_PATH bytes) receives its path. */
json_t *ntx_jrd_member(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		       int required, char *kpath);

/* v must have type (JSON_TRUE = any boolean, JSON_REAL = any number). */
int ntx_jrd_want(struct ntx_jrd *r, json_t *v, const char *kpath, const char *key,
		 json_type type, const char *tname);

int ntx_jrd_obj(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		json_t **out, char *kpath);
/* An integer in [min, max]; with isnull != NULL, null is accepted (*isnull = 1,
 * *out = 0). Negative values where min >= 0 say "must not be negative". */
int ntx_jrd_i64(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, int64_t min,
		int64_t max, int64_t *out, int *isnull);
int ntx_jrd_int(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, int min,
		int max, int *out);
/* A byte count in [0, NTX_JRD_MAX_BYTES]. */
int ntx_jrd_bytes(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		  uint64_t *out);
int ntx_jrd_bytes_null(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		       uint64_t *out, int *isnull);
/* A number in [min, max] ((min, max] when min_exclusive). */
int ntx_jrd_dbl(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, double min,
		double max, int min_exclusive, double *out);
int ntx_jrd_bool(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, int *out,
		 int *isnull);
/* A string (borrowed from obj), or NULL for null when nullable. */
int ntx_jrd_str(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		int nullable, const char **out);
/* One of names[0..n-1]; *out = its index. */
int ntx_jrd_enum(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		 const char *const *names, int n, int *out);

/* A model fingerprint as plans, skip files and inspect JSON write it: 16
 * lowercase hexadecimal digits; else an error at path. Returns 0 or -1. */
int ntx_jrd_fingerprint(struct ntx_jrd *r, const char *path, const char *fp);

#endif
