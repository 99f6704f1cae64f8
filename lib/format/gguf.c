/* gguf.c - validating GGUF reader (see gguf.h). */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "types.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */

/* ---- cursor ---- */

struct cur {
	const unsigned char *base;
	uint64_t pos, size;
	struct ntx_err *err;
};

static uint64_t rd_le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* Ensure n more bytes are available; what names the value being read. */
static int need(struct cur *c, uint64_t n, const char *what)
{
	if (n > c->size - c->pos)
		return ntx_err_set(c->err, NTX_EFORMAT,
				   "%s at offset %llu needs %llu bytes, but only %llu remain in a file of %llu bytes",
				   what, (unsigned long long)c->pos, (unsigned long long)n,
				   (unsigned long long)(c->size - c->pos),
				   (unsigned long long)c->size);
	return 0;
}

static int get_u32(struct cur *c, uint32_t *v, const char *what)
{
	if (need(c, 4, what))
		return -1;
	*v = (uint32_t)rd_le(c->base + c->pos, 4);
	c->pos += 4;
	return 0;
}

static int get_u64(struct cur *c, uint64_t *v, const char *what)
{
	if (need(c, 8, what))
		return -1;
	*v = rd_le(c->base + c->pos, 8);
	c->pos += 8;
	return 0;
}

static int get_str(struct cur *c, struct ntx_gguf_str *s, const char *what)
{
	uint64_t len;

	if (get_u64(c, &len, what))
		return -1;
	if (len > c->size - c->pos)
		return ntx_err_set(c->err, NTX_EFORMAT,
				   "%s length %llu at offset %llu exceeds the %llu bytes left in the file",
				   what, (unsigned long long)len,
				   (unsigned long long)(c->pos - 8),
				   (unsigned long long)(c->size - c->pos));
	s->p = (const char *)c->base + c->pos;
	s->len = len;
	c->pos += len;
	return 0;
}

int ntx_gguf_vtype_size(uint32_t t)
{
	switch (t) {
	case NTX_GGUF_U8:
	case NTX_GGUF_I8:
	case NTX_GGUF_BOOL:
		return 1;
	case NTX_GGUF_U16:
	case NTX_GGUF_I16:
		return 2;
	case NTX_GGUF_U32:
	case NTX_GGUF_I32:
	case NTX_GGUF_F32:
		return 4;
	case NTX_GGUF_U64:
	case NTX_GGUF_I64:
	case NTX_GGUF_F64:
		return 8;
	default:
		return 0;
	}
}

const char *ntx_gguf_vtype_name(uint32_t t)
{
	static const char *names[NTX_GGUF_NTYPES] = {
		"u8", "i8", "u16", "i16", "u32", "i32", "f32",
		"bool", "string", "array", "u64", "i64", "f64",
	};

	return t < NTX_GGUF_NTYPES ? names[t] : "unknown";
}

/* Parse a value of type t at the cursor (recursively for arrays), filling v.
 * depth limits nesting; key names the pair for messages. */
static int parse_value(struct cur *c, uint32_t t, struct ntx_gguf_value *v, int depth,
		       const struct ntx_gguf_str *key)
{
	uint64_t start = c->pos;
	int sz;

	memset(v, 0, sizeof *v);
	v->type = t;
	v->p = c->base + c->pos;
	if (t >= NTX_GGUF_NTYPES)
		return ntx_err_set(c->err, NTX_EFORMAT,
				   "key '%.*s': unknown value type %u at offset %llu",
				   (int)(key->len > 200 ? 200 : key->len), key->p, t,
				   (unsigned long long)c->pos);
	sz = ntx_gguf_vtype_size(t);
	if (sz) {
		if (need(c, (uint64_t)sz, "metadata value"))
			return -1;
		if (t == NTX_GGUF_BOOL && c->base[c->pos] > 1)
			return ntx_err_set(c->err, NTX_EFORMAT,
					   "key '%.*s': bool value %u at offset %llu is not 0 or 1",
					   (int)(key->len > 200 ? 200 : key->len), key->p,
					   c->base[c->pos], (unsigned long long)c->pos);
		c->pos += (uint64_t)sz;
	} else if (t == NTX_GGUF_STRING) {
		struct ntx_gguf_str s;

		if (get_str(c, &s, "string value"))
			return -1;
	} else { /* array */
		uint32_t et;
		uint64_t n, i, esz;

		if (depth >= NTX_GGUF_MAX_DEPTH)
			return ntx_err_set(c->err, NTX_EFORMAT,
					   "key '%.*s': arrays nested deeper than %d levels",
					   (int)(key->len > 200 ? 200 : key->len), key->p,
					   NTX_GGUF_MAX_DEPTH);
		if (get_u32(c, &et, "array element type") || get_u64(c, &n, "array length"))
			return -1;
		if (et >= NTX_GGUF_NTYPES)
			return ntx_err_set(c->err, NTX_EFORMAT,
					   "key '%.*s': unknown array element type %u",
					   (int)(key->len > 200 ? 200 : key->len), key->p, et);
		v->elem_type = et;
		v->n = n;
		v->p = c->base + c->pos;
		esz = (uint64_t)ntx_gguf_vtype_size(et);
		/* every element takes at least 8 bytes (string length / array
		 * header 12) when it is not fixed-size */
		if (!esz)
			esz = et == NTX_GGUF_STRING ? 8 : 12;
		if (n > (c->size - c->pos) / esz)
			return ntx_err_set(c->err, NTX_EFORMAT,
					   "key '%.*s': array of %llu %s elements at offset %llu exceeds the %llu bytes left in the file",
					   (int)(key->len > 200 ? 200 : key->len), key->p,
					   (unsigned long long)n, ntx_gguf_vtype_name(et),
					   (unsigned long long)c->pos,
					   (unsigned long long)(c->size - c->pos));
		if (ntx_gguf_vtype_size(et)) {
			if (et == NTX_GGUF_BOOL) {
				for (i = 0; i < n; i++) {
					if (c->base[c->pos + i] > 1)
						return ntx_err_set(c->err, NTX_EFORMAT,
								   "key '%.*s': bool element %llu is not 0 or 1",
								   (int)(key->len > 200 ? 200 : key->len),
								   key->p, (unsigned long long)i);
				}
			}
			c->pos += n * esz;
		} else {
			for (i = 0; i < n; i++) {
				struct ntx_gguf_value sub;

				if (parse_value(c, et, &sub, depth + 1, key))
					return -1;
			}
		}
		v->size = c->pos - (uint64_t)(v->p - c->base);
		return 0;
	}
	v->size = c->pos - start;
	return 0;
}

/* ---- open ---- */

static void gguf_free(struct ntx_gguf *g)
{
	uint64_t i;

	if (!g)
		return;
	if (g->kv) {
		for (i = 0; i < g->n_kv; i++)
			free((void *)g->kv[i].str_index);
		free(g->kv);
	}
	if (g->tensors) {
		for (i = 0; i < g->n_tensors; i++)
			free(g->tensors[i].name);
		free(g->tensors);
	}
	free(g->path);
	free(g);
}

static int key_eq(const struct ntx_gguf_str *s, const char *k)
{
	size_t n = strlen(k);

	return s->len == n && memcmp(s->p, k, n) == 0;
}

static int index_strings(struct ntx_gguf_kv *kv, struct ntx_err *err)
{
	const unsigned char *p = kv->val.p;
	uint64_t *idx, i, off = 0;

	if (kv->val.n == 0)
		return 0;
	idx = malloc(kv->val.n * sizeof *idx);
	if (!idx)
		return ntx_err_set(err, NTX_ENOMEM,
				   "out of memory indexing %llu strings",
				   (unsigned long long)kv->val.n);
	for (i = 0; i < kv->val.n; i++) {
		idx[i] = off;
		off += 8 + rd_le(p + off, 8); /* bounds were checked by parse_value */
	}
	kv->str_index = idx;
	return 0;
}

/* Magic, version and the two counts (checked against the bytes left);
 * g->kv and g->tensors allocated. */
static int parse_header(struct ntx_gguf *g, struct cur *c)
{
	struct ntx_err *err = c->err;
	uint32_t magic, version;

	if (g->file_size == 0)
		return ntx_err_set(err, NTX_EFORMAT, "file is empty");
	if (g->file_size < 4)
		return ntx_err_set(err, NTX_EFORMAT,
				   "file of %llu bytes is too small for a GGUF header",
				   (unsigned long long)g->file_size);
	if (get_u32(c, &magic, "magic"))
		return -1;
	if (magic != GGUF_MAGIC)
		return ntx_err_set(err, NTX_EFORMAT,
				   "not a GGUF file (bad magic %02x %02x %02x %02x)",
				   g->map[0], g->map[1], g->map[2], g->map[3]);
	if (get_u32(c, &version, "version"))
		return -1;
	if ((version & 0xffff) == 0 && (version >> 24) >= 1 && (version >> 24) <= 3)
		return ntx_err_set(err, NTX_EUNSUP,
				   "big-endian GGUF (version %u) is not supported",
				   version >> 24);
	if (version == 1)
		return ntx_err_set(err, NTX_EUNSUP,
				   "GGUF version 1 is not supported (re-convert the model)");
	if (version != 2 && version != 3)
		return ntx_err_set(err, NTX_EUNSUP,
				   "unknown GGUF version %u (supported: 2, 3)", version);
	g->version = version;
	if (get_u64(c, &g->n_tensors, "tensor count") ||
	    get_u64(c, &g->n_kv, "metadata count"))
		return -1;
	/* a key/value pair takes at least 8+4+1 bytes, a tensor info 8+4+8+4+8 */
	if (g->n_kv > (c->size - c->pos) / 13)
		return ntx_err_set(err, NTX_EFORMAT,
				   "metadata count %llu exceeds what the %llu remaining bytes can hold",
				   (unsigned long long)g->n_kv,
				   (unsigned long long)(c->size - c->pos));
	if (g->n_tensors > (c->size - c->pos) / 32)
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor count %llu exceeds what the %llu remaining bytes can hold",
				   (unsigned long long)g->n_tensors,
				   (unsigned long long)(c->size - c->pos));
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
	g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
	if (!g->kv || !g->tensors)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	return 0;
}

/* Metadata pair i: a non-empty key not seen before, its value; string
 * arrays indexed, general.alignment checked and applied. */
static int parse_kv(struct ntx_gguf *g, struct cur *c, uint64_t i)
{
	struct ntx_err *err = c->err;
	struct ntx_gguf_kv *kv = &g->kv[i];
	uint32_t t;
	uint64_t j;

	kv->file_offset = c->pos;
	if (get_str(c, &kv->key, "metadata key") || get_u32(c, &t, "value type"))
		return -1;
	if (kv->key.len == 0)
		return ntx_err_set(err, NTX_EFORMAT,
				   "metadata key %llu at offset %llu is empty",
				   (unsigned long long)i,
				   (unsigned long long)kv->file_offset);
	if (parse_value(c, t, &kv->val, 0, &kv->key))
		return -1;
	for (j = 0; j < i; j++) {
		if (g->kv[j].key.len == kv->key.len &&
		    memcmp(g->kv[j].key.p, kv->key.p, kv->key.len) == 0)
			return ntx_err_set(err, NTX_EFORMAT,
					   "duplicate metadata key '%.*s'",
					   (int)(kv->key.len > 200 ? 200 : kv->key.len),
					   kv->key.p);
	}
	if (t == NTX_GGUF_ARRAY && kv->val.elem_type == NTX_GGUF_STRING &&
	    index_strings(kv, err))
		return -1;
	if (key_eq(&kv->key, "general.alignment")) {
		uint64_t a;

		if (ntx_gguf_value_u64(&kv->val, &a))
			return ntx_err_set(err, NTX_EFORMAT,
					   "general.alignment must be an unsigned integer, found %s",
					   ntx_gguf_vtype_name(t));
		if (a == 0 || (a & (a - 1)) || a > (1u << 30))
			return ntx_err_set(err, NTX_EFORMAT,
					   "general.alignment %llu is not a power of two from 1 to 2^30",
					   (unsigned long long)a);
		g->alignment = (uint32_t)a;
	}
	return 0;
}

/* Tensor info i: a unique name without NUL, 1 to NTX_GGUF_MAX_DIMS
 * dimensions whose product fits int64, a known type; ti->nbytes. */
static int parse_tensor_info(struct ntx_gguf *g, struct cur *c, uint64_t i)
{
	struct ntx_err *err = c->err;
	struct ntx_gguf_tensor *ti = &g->tensors[i];
	struct ntx_gguf_str name;
	const struct ntx_type_info *tt;
	uint64_t d, row_bytes;
	int64_t n_elem = 1;

	if (get_str(c, &name, "tensor name"))
		return -1;
	if (name.len > NTX_GGUF_MAX_NAME)
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor %llu: name of %llu bytes exceeds the limit of %d",
				   (unsigned long long)i, (unsigned long long)name.len,
				   NTX_GGUF_MAX_NAME);
	ti->name = malloc(name.len + 1);
	if (!ti->name)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	memcpy(ti->name, name.p, name.len);
	ti->name[name.len] = '\0';
	if (strlen(ti->name) != name.len || name.len == 0)
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor %llu has an empty name or one with a NUL byte",
				   (unsigned long long)i);
	if (get_u32(c, &ti->n_dims, "tensor dimension count"))
		return -1;
	if (ti->n_dims < 1 || ti->n_dims > NTX_GGUF_MAX_DIMS)
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor '%s': %u dimensions (must be 1 to %d)",
				   ti->name, ti->n_dims, NTX_GGUF_MAX_DIMS);
	for (d = 0; d < NTX_GGUF_MAX_DIMS; d++)
		ti->ne[d] = 1;
	for (d = 0; d < ti->n_dims; d++) {
		uint64_t ne;

		if (get_u64(c, &ne, "tensor dimension"))
			return -1;
		if (ne > (uint64_t)INT64_MAX)
			return ntx_err_set(err, NTX_EFORMAT,
					   "tensor '%s': dimension %llu is %llu, above the limit %lld",
					   ti->name, (unsigned long long)d,
					   (unsigned long long)ne, (long long)INT64_MAX);
		ti->ne[d] = (int64_t)ne;
		if (ne && n_elem > INT64_MAX / (int64_t)ne)
			return ntx_err_set(err, NTX_EFORMAT,
					   "tensor '%s': the product of its dimensions overflows 64 bits",
					   ti->name);
		n_elem *= (int64_t)ne;
	}
	ti->n_elem = n_elem;
	if (get_u32(c, &ti->type, "tensor type") || get_u64(c, &ti->offset, "tensor offset"))
		return -1;
	tt = ntx_type_get(ti->type);
	if (!tt)
		return ntx_err_set(err, NTX_EUNSUP, "tensor '%s': unknown type %u",
				   ti->name, ti->type);
	if (ntx_type_row_bytes(ti->type, ti->ne[0], &row_bytes, err)) {
		ntx_err_prefix(err, "tensor '%s'", ti->name);
		return -1;
	}
	/* nbytes = row_bytes * rows, rows = n_elem / ne[0] */
	{
		uint64_t rows = ti->ne[0] ? (uint64_t)(n_elem / ti->ne[0]) : 0;

		if (rows && row_bytes > UINT64_MAX / rows)
			return ntx_err_set(err, NTX_EFORMAT,
					   "tensor '%s': byte size overflows 64 bits", ti->name);
		ti->nbytes = row_bytes * rows;
	}
	for (d = 0; d < i; d++) {
		if (strcmp(g->tensors[d].name, ti->name) == 0)
			return ntx_err_set(err, NTX_EFORMAT, "duplicate tensor name '%s'",
					   ti->name);
	}
	return 0;
}

/* The data section after the header (aligned); each tensor aligned and
 * inside it, its file_offset and data pointer set. */
static int place_tensors(struct ntx_gguf *g, uint64_t header_end, struct ntx_err *err)
{
	uint64_t i, data_size;

	g->header_bytes = header_end;
	g->data_offset = (header_end + g->alignment - 1) / g->alignment * g->alignment;
	data_size = g->data_offset <= g->file_size ? g->file_size - g->data_offset : 0;
	g->data_bytes = data_size;
	for (i = 0; i < g->n_tensors; i++) {
		struct ntx_gguf_tensor *ti = &g->tensors[i];

		if (ti->offset % g->alignment)
			return ntx_err_set(err, NTX_EFORMAT,
					   "tensor '%s': offset %llu is not a multiple of the alignment %u",
					   ti->name, (unsigned long long)ti->offset, g->alignment);
		if (ti->offset > data_size || ti->nbytes > data_size - ti->offset)
			return ntx_err_set(err, NTX_EFORMAT,
					   "tensor '%s': offset %llu + %llu bytes exceeds the data section of %llu bytes (file size %llu)",
					   ti->name, (unsigned long long)ti->offset,
					   (unsigned long long)ti->nbytes,
					   (unsigned long long)data_size,
					   (unsigned long long)g->file_size);
		ti->file_offset = g->data_offset + ti->offset;
		ti->data = g->map + ti->file_offset;
	}
	return 0;
}

static int parse(struct ntx_gguf *g, struct ntx_err *err)
{
	struct cur c = { g->map, 0, g->file_size, err };
	uint64_t i;

	if (parse_header(g, &c))
		return -1;
	g->alignment = NTX_GGUF_DEFAULT_ALIGNMENT;
	for (i = 0; i < g->n_kv; i++)
		if (parse_kv(g, &c, i))
			return -1;
	for (i = 0; i < g->n_tensors; i++)
		if (parse_tensor_info(g, &c, i))
			return -1;
	return place_tensors(g, c.pos, err);
}

struct ntx_gguf *ntx_gguf_open_buffer(const void *buf, size_t len, struct ntx_err *err)
{
	struct ntx_gguf *g = calloc(1, sizeof *g);

	if (!g) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	g->fd = -1;
	g->map = buf;
	g->file_size = len;
	if (parse(g, err)) {
		g->map = NULL;
		gguf_free(g);
		return NULL;
	}
	return g;
}

struct ntx_gguf *ntx_gguf_open(const char *path, struct ntx_err *err)
{
	struct ntx_gguf *g;
	uint64_t size;
	int fd;
	void *map = NULL;

	fd = ntx_open_regular(path, &size, err);
	if (fd < 0)
		return NULL;
	if (size > 0) {
		map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			ntx_err_errno(err, errno, "mmap");
			close(fd);
			return NULL;
		}
	}
	g = calloc(1, sizeof *g);
	if (g)
		g->path = strdup(path);
	if (!g || !g->path) {
		free(g);
		if (map)
			munmap(map, (size_t)size);
		close(fd);
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	g->fd = fd;
	g->map = map;
	g->file_size = size;
	if (parse(g, err)) {
		ntx_gguf_close(g);
		return NULL;
	}
	return g;
}

void ntx_gguf_close(struct ntx_gguf *g)
{
	if (!g)
		return;
	if (g->fd >= 0) {
		if (g->map)
			munmap((void *)g->map, (size_t)g->file_size);
		close(g->fd);
	}
	gguf_free(g);
}

/* ---- lookups ---- */

const struct ntx_gguf_kv *ntx_gguf_find(const struct ntx_gguf *g, const char *key)
{
	uint64_t i;

	for (i = 0; i < g->n_kv; i++) {
		if (key_eq(&g->kv[i].key, key))
			return &g->kv[i];
	}
	return NULL;
}

const struct ntx_gguf_tensor *ntx_gguf_find_tensor(const struct ntx_gguf *g, const char *name)
{
	uint64_t i;

	for (i = 0; i < g->n_tensors; i++) {
		if (strcmp(g->tensors[i].name, name) == 0)
			return &g->tensors[i];
	}
	return NULL;
}

int ntx_gguf_value_u64(const struct ntx_gguf_value *v, uint64_t *out)
{
	int64_t s;

	switch (v->type) {
	case NTX_GGUF_U8:
	case NTX_GGUF_BOOL:
		*out = v->p[0];
		return 0;
	case NTX_GGUF_U16:
		*out = rd_le(v->p, 2);
		return 0;
	case NTX_GGUF_U32:
		*out = rd_le(v->p, 4);
		return 0;
	case NTX_GGUF_U64:
		*out = rd_le(v->p, 8);
		return 0;
	case NTX_GGUF_I8:
	case NTX_GGUF_I16:
	case NTX_GGUF_I32:
	case NTX_GGUF_I64:
		if (ntx_gguf_value_i64(v, &s) || s < 0)
			return -1;
		*out = (uint64_t)s;
		return 0;
	default:
		return -1;
	}
}

int ntx_gguf_value_i64(const struct ntx_gguf_value *v, int64_t *out)
{
	uint64_t u;

	switch (v->type) {
	case NTX_GGUF_I8:
		*out = (int8_t)v->p[0];
		return 0;
	case NTX_GGUF_I16:
		*out = (int16_t)rd_le(v->p, 2);
		return 0;
	case NTX_GGUF_I32:
		*out = (int32_t)rd_le(v->p, 4);
		return 0;
	case NTX_GGUF_I64:
		*out = (int64_t)rd_le(v->p, 8);
		return 0;
	case NTX_GGUF_U8:
	case NTX_GGUF_BOOL:
	case NTX_GGUF_U16:
	case NTX_GGUF_U32:
	case NTX_GGUF_U64:
		if (ntx_gguf_value_u64(v, &u) || u > (uint64_t)INT64_MAX)
			return -1;
		*out = (int64_t)u;
		return 0;
	default:
		return -1;
	}
}

int ntx_gguf_value_f64(const struct ntx_gguf_value *v, double *out)
{
	int64_t i;

	switch (v->type) {
	case NTX_GGUF_F32: {
		uint32_t b = (uint32_t)rd_le(v->p, 4);
		float f;

		memcpy(&f, &b, 4);
		*out = f;
		return 0;
	}
	case NTX_GGUF_F64: {
		uint64_t b = rd_le(v->p, 8);

		memcpy(out, &b, 8);
		return 0;
	}
	default:
		if (ntx_gguf_value_i64(v, &i))
			return -1;
		*out = (double)i;
		return 0;
	}
}

int ntx_gguf_value_str(const struct ntx_gguf_value *v, struct ntx_gguf_str *out)
{
	if (v->type != NTX_GGUF_STRING)
		return -1;
	out->len = rd_le(v->p, 8);
	out->p = (const char *)v->p + 8;
	return 0;
}

static int bad_type(const struct ntx_gguf_kv *kv, const char *want, struct ntx_err *err)
{
	return ntx_err_set(err, NTX_EFORMAT, "key '%.*s': expected %s, found %s",
			   (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.p, want,
			   ntx_gguf_vtype_name(kv->val.type));
}

int ntx_gguf_get_u64(const struct ntx_gguf *g, const char *key, uint64_t *out, struct ntx_err *err)
{
	const struct ntx_gguf_kv *kv = ntx_gguf_find(g, key);

	if (!kv)
		return 0;
	if (ntx_gguf_value_u64(&kv->val, out))
		return bad_type(kv, "a non-negative integer", err);
	return 1;
}

int ntx_gguf_get_f64(const struct ntx_gguf *g, const char *key, double *out, struct ntx_err *err)
{
	const struct ntx_gguf_kv *kv = ntx_gguf_find(g, key);

	if (!kv)
		return 0;
	if (ntx_gguf_value_f64(&kv->val, out))
		return bad_type(kv, "a number", err);
	return 1;
}

int ntx_gguf_get_str(const struct ntx_gguf *g, const char *key, struct ntx_gguf_str *out, struct ntx_err *err)
{
	const struct ntx_gguf_kv *kv = ntx_gguf_find(g, key);

	if (!kv)
		return 0;
	if (ntx_gguf_value_str(&kv->val, out))
		return bad_type(kv, "a string", err);
	return 1;
}

int ntx_gguf_get_arr(const struct ntx_gguf *g, const char *key, const struct ntx_gguf_kv **out, struct ntx_err *err)
{
	const struct ntx_gguf_kv *kv = ntx_gguf_find(g, key);

	if (!kv)
		return 0;
	if (kv->val.type != NTX_GGUF_ARRAY)
		return bad_type(kv, "an array", err);
	*out = kv;
	return 1;
}

/* Size of the (already validated) value of type t starting at p. */
static uint64_t value_size(uint32_t t, const unsigned char *p)
{
	int sz = ntx_gguf_vtype_size(t);
	uint64_t n, i, off;
	uint32_t et;

	if (sz)
		return (uint64_t)sz;
	if (t == NTX_GGUF_STRING)
		return 8 + rd_le(p, 8);
	et = (uint32_t)rd_le(p, 4);
	n = rd_le(p + 4, 8);
	off = 12;
	if (ntx_gguf_vtype_size(et))
		return off + n * (uint64_t)ntx_gguf_vtype_size(et);
	for (i = 0; i < n; i++)
		off += value_size(et, p + off);
	return off;
}

/* Decode the (validated) element of type et that starts at p. */
static void elem_at(uint32_t et, const unsigned char *p, struct ntx_gguf_value *out)
{
	memset(out, 0, sizeof *out);
	out->type = et;
	out->size = value_size(et, p);
	if (et == NTX_GGUF_ARRAY) {
		out->elem_type = (uint32_t)rd_le(p, 4);
		out->n = rd_le(p + 4, 8);
		out->p = p + 12;
		out->size -= 12;
	} else {
		out->p = p;
	}
}

int ntx_gguf_array_get(const struct ntx_gguf_kv *kv, const struct ntx_gguf_value *arr,
		       uint64_t i, struct ntx_gguf_value *out)
{
	const unsigned char *p;
	int sz;

	if (arr->type != NTX_GGUF_ARRAY || i >= arr->n)
		return -1;
	sz = ntx_gguf_vtype_size(arr->elem_type);
	if (sz) {
		elem_at(arr->elem_type, arr->p + i * (uint64_t)sz, out);
		return 0;
	}
	if (kv && kv->str_index && arr == &kv->val) {
		p = arr->p + kv->str_index[i];
	} else {
		uint64_t j;

		p = arr->p;
		for (j = 0; j < i; j++)
			p += value_size(arr->elem_type, p);
	}
	elem_at(arr->elem_type, p, out);
	return 0;
}

int ntx_gguf_array_next(const struct ntx_gguf_value *arr, uint64_t i,
			struct ntx_gguf_value *elem)
{
	if (arr->type != NTX_GGUF_ARRAY || i >= arr->n)
		return -1;
	/* element i starts where element i-1 (in *elem) ends */
	elem_at(arr->elem_type, i == 0 ? arr->p : elem->p + elem->size, elem);
	return 0;
}

struct ntx_gguf_str ntx_gguf_arr_str(const struct ntx_gguf_kv *kv, uint64_t i)
{
	struct ntx_gguf_str s = { "", 0 };
	const unsigned char *p;

	if (!kv->str_index || i >= kv->val.n)
		return s;
	p = kv->val.p + kv->str_index[i];
	s.len = rd_le(p, 8);
	s.p = (const char *)p + 8;
	return s;
}
