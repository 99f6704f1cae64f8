/* jsonpos.c - map JSON value paths to line:column (see jsonpos.h). */
#include "jsonpos.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct scan {
	const char *p, *end;
	int line, col;
};

static void adv(struct scan *s)
{
	if (*s->p == '\n') {
		s->line++;
		s->col = 1;
	} else {
		s->col++;
	}
	s->p++;
}

static void skip_ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		adv(s);
}

/* Skip a string starting at '"'; if key is not NULL, decode it into key
 * (keylen bytes, NUL-terminated; *klen = decoded length, or -1 when too long). */
static int skip_string(struct scan *s, char *key, size_t keylen, long *klen)
{
	size_t n = 0;
	int toolong = 0;

	if (s->p >= s->end || *s->p != '"')
		return -1;
	adv(s);
	while (s->p < s->end && *s->p != '"') {
		char c = *s->p;

		if (c == '\\') {
			adv(s);
			if (s->p >= s->end)
				return -1;
			switch (*s->p) {
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u': {
				unsigned v = 0;
				int i;

				for (i = 0; i < 4; i++) {
					char h;

					adv(s);
					if (s->p >= s->end)
						return -1;
					h = *s->p;
					v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' :
							      h >= 'a' && h <= 'f' ? h - 'a' + 10 :
							      h >= 'A' && h <= 'F' ? h - 'A' + 10 : 0);
				}
				/* keys we look up are ASCII; anything else only needs
				 * to differ from them */
				c = v && v < 0x80 ? (char)v : '\x7f';
				break;
			}
			default: c = *s->p; break;
			}
		}
		if (key) {
			if (n + 1 < keylen)
				key[n++] = c;
			else
				toolong = 1;
		}
		adv(s);
	}
	if (s->p >= s->end)
		return -1;
	adv(s); /* closing quote */
	if (key) {
		key[n] = '\0';
		*klen = toolong ? -1 : (long)n;
	}
	return 0;
}

static int skip_value(struct scan *s, int depth)
{
	skip_ws(s);
	if (s->p >= s->end || depth > 4096)
		return -1;
	if (*s->p == '"')
		return skip_string(s, NULL, 0, NULL);
	if (*s->p == '{' || *s->p == '[') {
		char close = *s->p == '{' ? '}' : ']';
		int obj = *s->p == '{';

		adv(s);
		skip_ws(s);
		if (s->p < s->end && *s->p == close) {
			adv(s);
			return 0;
		}
		for (;;) {
			if (obj) {
				skip_ws(s);
				if (skip_string(s, NULL, 0, NULL))
					return -1;
				skip_ws(s);
				if (s->p >= s->end || *s->p != ':')
					return -1;
				adv(s);
			}
			if (skip_value(s, depth + 1))
				return -1;
			skip_ws(s);
			if (s->p >= s->end)
				return -1;
			if (*s->p == ',') {
				adv(s);
				continue;
			}
			if (*s->p == close) {
				adv(s);
				return 0;
			}
			return -1;
		}
	}
	/* number, true, false, null */
	while (s->p < s->end && !strchr(" \t\r\n,]}", *s->p))
		adv(s);
	return 0;
}

/* Walk to path; on return *found_len is how much of path was matched and
 * (*line, *col) the position of that value. Returns 0 when all of it was. */
static int walk(const char *text, size_t len, const char *path, size_t *found_len, int *line,
		int *col)
{
	struct scan s = { text, text + len, 1, 1 };
	const char *rest = path;

	skip_ws(&s);
	*found_len = 0;
	*line = s.line;
	*col = s.col;
	if (s.p >= s.end)
		return -1;
	for (;;) {
		if (*rest == '\0')
			return 0;
		if (*rest == '[') {
			long want = 0, i;
			const char *q = rest + 1;

			if (*q < '0' || *q > '9')
				return -1;
			while (*q >= '0' && *q <= '9') {
				want = want * 10 + (*q - '0');
				if (want > 1000000000L)
					return -1;
				q++;
			}
			if (*q != ']' || *s.p != '[')
				return -1;
			adv(&s);
			for (i = 0;; i++) {
				skip_ws(&s);
				if (s.p >= s.end || *s.p == ']')
					return -1;
				if (i == want)
					break;
				if (skip_value(&s, 0))
					return -1;
				skip_ws(&s);
				if (s.p >= s.end || *s.p != ',')
					return -1;
				adv(&s);
			}
			rest = q + 1;
		} else {
			char key[256];
			long klen;
			int matched = 0;

			if (rest != path) {
				if (*rest != '.')
					return -1;
				rest++;
			}
			if (*s.p != '{')
				return -1;
			adv(&s);
			for (;;) {
				skip_ws(&s);
				if (s.p >= s.end || *s.p == '}')
					return -1;
				if (skip_string(&s, key, sizeof key, &klen))
					return -1;
				skip_ws(&s);
				if (s.p >= s.end || *s.p != ':')
					return -1;
				adv(&s);
				skip_ws(&s);
				if (klen >= 0 && strlen(rest) >= (size_t)klen &&
				    memcmp(rest, key, (size_t)klen) == 0 &&
				    (rest[klen] == '\0' || rest[klen] == '.' || rest[klen] == '[')) {
					rest += klen;
					matched = 1;
					break;
				}
				if (skip_value(&s, 0))
					return -1;
				skip_ws(&s);
				if (s.p >= s.end || *s.p != ',')
					return -1;
				adv(&s);
			}
			if (!matched)
				return -1;
		}
		skip_ws(&s);
		if (s.p >= s.end)
			return -1;
		*found_len = (size_t)(rest - path);
		*line = s.line;
		*col = s.col;
	}
}

int ntx_jsonpos_find(const char *text, size_t len, const char *path, int *line, int *col)
{
	size_t n;
	int l, c;

	if (!text || walk(text, len, path ? path : "", &n, &l, &c))
		return -1;
	*line = l;
	*col = c;
	return 0;
}

size_t ntx_jsonpos_nearest(const char *text, size_t len, const char *path, int *line, int *col)
{
	size_t n = 0;

	*line = 1;
	*col = 1;
	if (text)
		walk(text, len, path ? path : "", &n, line, col);
	return n;
}

int ntx_jsonpos_error(struct ntx_err *err, int code, const char *text, size_t len,
		      const char *name, const char *path, const char *fmt, ...)
{
	char msg[NTX_ERR_MAX];
	va_list ap;
	int line, col;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	ntx_jsonpos_nearest(text, len, path, &line, &col);
	return ntx_err_set(err, code, "%s:%d:%d: %s", name ? name : "<json>", line, col, msg);
}

/* ---- validating readers ---- */

void ntx_jrd_path(char *buf, const char *opath, const char *key)
{
	if (opath && *opath)
		snprintf(buf, NTX_JRD_PATH, "%s.%s", opath, key);
	else
		snprintf(buf, NTX_JRD_PATH, "%s", key);
}

const char *ntx_json_type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_REAL: return "number";
	case JSON_TRUE:
	case JSON_FALSE: return "boolean";
	case JSON_NULL: return "null";
	}
	return "?";
}

int ntx_jrd_error(struct ntx_jrd *r, const char *path, const char *fmt, ...)
{
	char msg[NTX_ERR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return ntx_jsonpos_error(r->err, NTX_EFORMAT, r->text, r->len, r->name, path, "%s", msg);
}

/* The ntx_jrd_member key of obj (at opath); NULL (with an error when required). */
json_t *ntx_jrd_member(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		      int required, char *kpath)
{
	json_t *v = json_object_get(obj, key);

	ntx_jrd_path(kpath, opath, key);
	if (!v && required) {
		if (opath && *opath)
			ntx_jrd_error(r, opath, "missing \"%s\" in %s", key, opath);
		else
			ntx_jrd_error(r, "", "missing \"%s\"", key);
	}
	return v;
}

int ntx_jrd_want(struct ntx_jrd *r, json_t *v, const char *kpath, const char *key,
		     json_type type, const char *tname)
{
	if (json_typeof(v) == type || (type == JSON_TRUE && json_is_boolean(v)) ||
	    (type == JSON_REAL && json_is_number(v)))
		return 0;
	return ntx_jrd_error(r, kpath, "expected %s for \"%s\" (found %s)", tname, key, ntx_json_type_name(v));
}

int ntx_jrd_obj(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, json_t **out,
		   char *kpath)
{
	json_t *v = ntx_jrd_member(r, obj, opath, key, 1, kpath);

	if (!v || ntx_jrd_want(r, v, kpath, key, JSON_OBJECT, "an object"))
		return -1;
	*out = v;
	return 0;
}

/* An integer in [min, max]; nullable: *isnull set when null (and allowed). */
int ntx_jrd_i64(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, int64_t min,
		    int64_t max, int64_t *out, int *isnull)
{
	char kpath[NTX_JRD_PATH];
	json_t *v = ntx_jrd_member(r, obj, opath, key, 1, kpath);
	int64_t x;

	if (!v)
		return -1;
	if (isnull) {
		*isnull = json_is_null(v);
		if (*isnull) {
			*out = 0;
			return 0;
		}
	}
	if (ntx_jrd_want(r, v, kpath, key, JSON_INTEGER, "integer"))
		return -1;
	x = (int64_t)json_integer_value(v);
	if (x < 0 && min >= 0)
		return ntx_jrd_error(r, kpath, "\"%s\" must not be negative (%" PRId64 ")", key, x);
	if (x < min || x > max)
		return ntx_jrd_error(r, kpath, "\"%s\" = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]",
			    key, x, min, max);
	*out = x;
	return 0;
}

int ntx_jrd_int(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, int min, int max,
		   int *out)
{
	int64_t v;

	if (ntx_jrd_i64(r, obj, opath, key, min, max, &v, NULL))
		return -1;
	*out = (int)v;
	return 0;
}

int ntx_jrd_bytes(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, uint64_t *out)
{
	int64_t v;

	if (ntx_jrd_i64(r, obj, opath, key, 0, (int64_t)NTX_JRD_MAX_BYTES, &v, NULL))
		return -1;
	*out = (uint64_t)v;
	return 0;
}

int ntx_jrd_bytes_null(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
			  uint64_t *out, int *isnull)
{
	int64_t v;

	if (ntx_jrd_i64(r, obj, opath, key, 0, (int64_t)NTX_JRD_MAX_BYTES, &v, isnull))
		return -1;
	*out = (uint64_t)v;
	return 0;
}

int ntx_jrd_dbl(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, double min,
		   double max, int min_exclusive, double *out)
{
	char kpath[NTX_JRD_PATH];
	json_t *v = ntx_jrd_member(r, obj, opath, key, 1, kpath);
	double x;

	if (!v || ntx_jrd_want(r, v, kpath, key, JSON_REAL, "a number"))
		return -1;
	x = json_number_value(v);
	if (!(x >= min && x <= max) || (min_exclusive && x == min))
		return ntx_jrd_error(r, kpath, "\"%s\" = %g is out of range %s%g, %g]", key, x,
			    min_exclusive ? "(" : "[", min, max);
	*out = x;
	return 0;
}

int ntx_jrd_bool(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, int *out,
		    int *isnull)
{
	char kpath[NTX_JRD_PATH];
	json_t *v = ntx_jrd_member(r, obj, opath, key, 1, kpath);

	if (!v)
		return -1;
	if (isnull && (*isnull = json_is_null(v)) != 0) {
		*out = 0;
		return 0;
	}
	if (ntx_jrd_want(r, v, kpath, key, JSON_TRUE, "a boolean"))
		return -1;
	*out = json_is_true(v);
	return 0;
}

/* A string (or null when nullable: *out = NULL). */
int ntx_jrd_str(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key, int nullable,
		   const char **out)
{
	char kpath[NTX_JRD_PATH];
	json_t *v = ntx_jrd_member(r, obj, opath, key, 1, kpath);

	if (!v)
		return -1;
	if (nullable && json_is_null(v)) {
		*out = NULL;
		return 0;
	}
	if (ntx_jrd_want(r, v, kpath, key, JSON_STRING, nullable ? "a string or null" : "a string"))
		return -1;
	*out = json_string_value(v);
	return 0;
}

/* One of names[0..n-1]; *out = its index. */
int ntx_jrd_enum(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		    const char *const *names, int n, int *out)
{
	char kpath[NTX_JRD_PATH], list[160] = "";
	const char *s;
	int i;

	if (ntx_jrd_str(r, obj, opath, key, 0, &s))
		return -1;
	for (i = 0; i < n; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
			 i ? (i == n - 1 ? " or " : ", ") : "", names[i]);
	}
	ntx_jrd_path(kpath, opath, key);
	return ntx_jrd_error(r, kpath, "\"%s\" = \"%.40s\" is not one of %s", key, s, list);
}

json_t *ntx_jrd_parse(const char *text, size_t len, const char *name, struct ntx_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);

	if (!root) {
		ntx_err_set(err, NTX_EFORMAT, "%s:%d:%d: %s", name, je.line, je.column, je.text);
		return NULL;
	}
	if (!json_is_object(root)) {
		json_decref(root);
		ntx_jsonpos_error(err, NTX_EFORMAT, text, len, name, "",
				  "expected a JSON object at the top level");
		return NULL;
	}
	return root;
}

int ntx_jrd_format(struct ntx_jrd *r, json_t *root, const char *format)
{
	const char *f;
	int v;

	if (ntx_jrd_str(r, root, "", "format", 0, &f))
		return -1;
	if (strcmp(f, format) != 0)
		return ntx_jrd_error(r, "format", "\"format\" is \"%.40s\", expected \"%s\"", f, format);
	if (ntx_jrd_int(r, root, "", "version", 0, INT32_MAX, &v))
		return -1;
	if (v != 1)
		return ntx_jrd_error(r, "version", "%s version %d is not supported (this build reads version 1)",
			    format, v);
	return 0;
}

int ntx_jrd_fingerprint(struct ntx_jrd *r, const char *path, const char *fp)
{
	size_t i;

	if (strlen(fp) != 16)
		return ntx_jrd_error(r, path, "\"fingerprint\" must be 16 hexadecimal digits");
	for (i = 0; i < 16; i++)
		if (!((fp[i] >= '0' && fp[i] <= '9') || (fp[i] >= 'a' && fp[i] <= 'f')))
			return ntx_jrd_error(r, path,
					     "\"fingerprint\" must be 16 lowercase hexadecimal digits");
	return 0;
}
