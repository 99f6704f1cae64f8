/* parse.c - validated number and size parsing (see parse.h). */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int is_blank(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return *s == '\0';
}

int ntx_parse_size(const char *s, uint64_t *out, struct ntx_err *err)
{
	static const struct {
		const char *name;
		int shift;
	} units[] = {
		{ "", 0 },    { "b", 0 },    { "k", 10 },   { "kb", 10 },
		{ "kib", 10 }, { "m", 20 },   { "mb", 20 },  { "mib", 20 },
		{ "g", 30 },  { "gb", 30 },  { "gib", 30 }, { "t", 40 },
		{ "tb", 40 }, { "tib", 40 },
	};
	const char *p = s;
	char *end;
	double v;
	size_t i;

	if (!s || is_blank(s))
		return ntx_err_set(err, NTX_EINVAL, "empty size");
	while (isspace((unsigned char)*p))
		p++;
	if (!isdigit((unsigned char)*p) && *p != '.')
		return ntx_err_set(err, NTX_EINVAL,
				   "invalid size '%s' (expected e.g. 24G, 512M)", s);
	errno = 0;
	v = strtod(p, &end);
	{
		const char *q = p;

		while (isdigit((unsigned char)*q) || *q == '.')
			q++;
		if (q != end) /* no hex, exponents, inf or nan */
			return ntx_err_set(err, NTX_EINVAL, "invalid size '%s'", s);
	}
	if (end == p || errno || !isfinite(v) || v < 0)
		return ntx_err_set(err, NTX_EINVAL, "invalid size '%s'", s);
	for (i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcasecmp(end, units[i].name) == 0)
			break;
	}
	if (i == sizeof units / sizeof units[0])
		return ntx_err_set(err, NTX_EINVAL,
				   "invalid size suffix in '%s' (use K, M, G or T)", s);
	v = ldexp(v, units[i].shift);
	if (v >= 18446744073709551616.0)
		return ntx_err_set(err, NTX_EINVAL, "size '%s' is too large", s);
	if (units[i].shift == 0 && v != floor(v))
		return ntx_err_set(err, NTX_EINVAL, "size '%s' is not a whole number of bytes", s);
	*out = (uint64_t)v;
	return 0;
}

int ntx_parse_budget(const char *s, int64_t *out, struct ntx_err *err)
{
	uint64_t v;

	if (ntx_parse_size(s, &v, err))
		return -1;
	if (v > (1ull << 50))
		return ntx_err_set(err, NTX_EINVAL, "size '%s' is too large (at most 1P)", s);
	*out = (int64_t)v;
	return 0;
}

int ntx_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out,
		  struct ntx_err *err)
{
	char *end;
	long long v;

	if (!s || is_blank(s))
		return ntx_err_set(err, NTX_EINVAL, "empty number");
	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || *end != '\0')
		return ntx_err_set(err, NTX_EINVAL, "invalid integer '%s'", s);
	if (errno == ERANGE || v < min || v > max)
		return ntx_err_set(err, NTX_EINVAL,
				   "%s is out of range [%lld, %lld]", s,
				   (long long)min, (long long)max);
	*out = v;
	return 0;
}

int ntx_parse_int(const char *s, int min, int max, int *out, struct ntx_err *err)
{
	int64_t v;

	if (ntx_parse_i64(s, min, max, &v, err))
		return -1;
	*out = (int)v;
	return 0;
}

int ntx_parse_double(const char *s, double min, double max, double *out,
		     struct ntx_err *err)
{
	char *end;
	double v;

	if (!s || is_blank(s))
		return ntx_err_set(err, NTX_EINVAL, "empty number");
	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || !isfinite(v))
		return ntx_err_set(err, NTX_EINVAL, "invalid number '%s'", s);
	if (errno == ERANGE || v < min || v > max)
		return ntx_err_set(err, NTX_EINVAL, "%s is out of range [%g, %g]",
				   s, min, max);
	*out = v;
	return 0;
}

int ntx_parse_id_list(const char *s, int32_t max, int32_t **ids, int *n,
		      struct ntx_err *err)
{
	int32_t *v = NULL;
	int cap = 0, len = 0;
	const char *p = s;

	*ids = NULL;
	*n = 0;
	for (;;) {
		char *end;
		long long x;

		while (*p && (isspace((unsigned char)*p) || *p == ','))
			p++;
		if (!*p)
			break;
		if (!isdigit((unsigned char)*p)) {
			free(v);
			return ntx_err_set(err, NTX_EINVAL,
					   "invalid token id list near '%.16s'", p);
		}
		errno = 0;
		x = strtoll(p, &end, 10);
		if (errno || x > max) {
			free(v);
			return ntx_err_set(err, NTX_EINVAL,
					   "token id %.16s is out of range [0, %d]", p,
					   (int)max);
		}
		if (len == cap) {
			int32_t *nv;

			cap = cap ? cap * 2 : 64;
			nv = realloc(v, (size_t)cap * sizeof *v);
			if (!nv) {
				free(v);
				return ntx_err_set(err, NTX_ENOMEM, "out of memory");
			}
			v = nv;
		}
		v[len++] = (int32_t)x;
		p = end;
	}
	*ids = v;
	*n = len;
	return 0;
}

int ntx_parse_range_list(const char *s, int n_layer, int **out, int *n,
			 struct ntx_err *err)
{
	unsigned char *seen;
	int *v;
	int len = 0, i;
	const char *p = s;

	*out = NULL;
	*n = 0;
	if (n_layer <= 0)
		return ntx_err_set(err, NTX_EINVAL, "no layers");
	/* one flag per layer: duplicates and overlapping ranges cost nothing
	 * and can never push later layers out of the result */
	seen = calloc((size_t)n_layer, 1);
	if (!seen)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (;;) {
		char *end;
		long a, b;

		while (*p && (isspace((unsigned char)*p) || *p == ','))
			p++;
		if (!*p)
			break;
		if (!isdigit((unsigned char)*p))
			goto bad;
		errno = 0;
		a = strtol(p, &end, 10);
		b = a;
		p = end;
		if (*p == '-') {
			p++;
			if (!isdigit((unsigned char)*p))
				goto bad;
			b = strtol(p, &end, 10);
			p = end;
		}
		if (!errno && a > b) {
			free(seen);
			return ntx_err_set(err, NTX_EINVAL,
					   "layer range %ld-%ld is reversed (write %ld-%ld)", a, b, b,
					   a);
		}
		if (errno || b >= n_layer) {
			free(seen);
			return ntx_err_set(err, NTX_EINVAL,
					   "layer range %ld-%ld is out of range [0, %d]",
					   a, b, n_layer - 1);
		}
		for (; a <= b; a++)
			seen[a] = 1;
		if (*p && *p != ',' && !isspace((unsigned char)*p))
			goto bad;
	}
	for (i = 0; i < n_layer; i++)
		len += seen[i];
	v = malloc((size_t)(len ? len : 1) * sizeof *v);
	if (!v) {
		free(seen);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	for (i = 0, len = 0; i < n_layer; i++)
		if (seen[i])
			v[len++] = i;
	free(seen);
	*out = v;
	*n = len;
	return 0;
bad:
	free(seen);
	return ntx_err_set(err, NTX_EINVAL,
			   "invalid layer list '%s' (expected e.g. 3,5,10-12)", s);
}

char *ntx_fmt_size(uint64_t bytes, char *buf, int len)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, (size_t)len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, (size_t)len, "%.2f %s", v, unit[u]);
	return buf;
}

int ntx_getopt_md(int argc, char *const argv[], const char **path)
{
	if (optind < 1 || strcmp(argv[optind - 1], "-md"))
		return 0;
	if (optind >= argc)
		return -1;
	*path = argv[optind++];
	return 1;
}
