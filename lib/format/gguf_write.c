/* gguf_write.c - GGUF v3 writer (see gguf_write.h). */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "types.h"

#define GGUF_MAGIC_BYTES "GGUF"
#define DEFAULT_CHUNK (16u << 20)
#define MIN_CHUNK (64u << 10)
#define MAX_NAME NTX_GGUF_MAX_NAME

struct wtensor {
	char *name;
	uint32_t n_dims;
	int64_t ne[NTX_GGUF_MAX_DIMS];
	uint32_t type;
	uint64_t nbytes;
	uint64_t offset; /* in the data section; set by layout() */
	const void *data;
	ntx_gguf_fill_fn fill;
	void *fill_ctx;
};

struct ntx_gguf_writer {
	uint32_t version;
	uint32_t alignment;
	int alignment_set;
	size_t chunk;
	void (*progress)(void *, uint64_t, uint64_t);
	void *progress_ctx;
	struct ntx_gguf_vbuf kv; /* encoded pairs */
	uint64_t n_kv;
	char **keys;
	size_t n_keys, cap_keys;
	struct wtensor *t;
	uint64_t n_t, cap_t;
	/* layout */
	uint64_t header_bytes, data_offset, data_bytes, file_size;
};

/* ---- checked arithmetic ---- */

static int add_ovf(uint64_t a, uint64_t b, uint64_t *out)
{
	if (a > UINT64_MAX - b)
		return -1;
	*out = a + b;
	return 0;
}

static int align_ovf(uint64_t v, uint64_t a, uint64_t *out)
{
	uint64_t r = v % a;

	return add_ovf(v, r ? a - r : 0, out);
}

/* ---- value buffer ---- */

void ntx_gguf_vbuf_free(struct ntx_gguf_vbuf *b)
{
	if (!b)
		return;
	free(b->p);
	memset(b, 0, sizeof *b);
}

void ntx_gguf_vbuf_put(struct ntx_gguf_vbuf *b, const void *p, size_t n)
{
	if (b->oom || n == 0)
		return;
	if (n > SIZE_MAX / 2 - b->len) {
		b->oom = 1;
		return;
	}
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		unsigned char *np;

		while (cap < b->len + n)
			cap *= 2;
		np = realloc(b->p, cap);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void put_le(struct ntx_gguf_vbuf *b, uint64_t v, int n)
{
	unsigned char tmp[8];
	int i;

	for (i = 0; i < n; i++)
		tmp[i] = (unsigned char)(v >> (8 * i));
	ntx_gguf_vbuf_put(b, tmp, (size_t)n);
}

void ntx_gguf_vbuf_u8(struct ntx_gguf_vbuf *b, uint8_t v) { put_le(b, v, 1); }
void ntx_gguf_vbuf_u16(struct ntx_gguf_vbuf *b, uint16_t v) { put_le(b, v, 2); }
void ntx_gguf_vbuf_u32(struct ntx_gguf_vbuf *b, uint32_t v) { put_le(b, v, 4); }
void ntx_gguf_vbuf_u64(struct ntx_gguf_vbuf *b, uint64_t v) { put_le(b, v, 8); }

void ntx_gguf_vbuf_f32(struct ntx_gguf_vbuf *b, float v)
{
	uint32_t u;

	memcpy(&u, &v, 4);
	put_le(b, u, 4);
}

void ntx_gguf_vbuf_f64(struct ntx_gguf_vbuf *b, double v)
{
	uint64_t u;

	memcpy(&u, &v, 8);
	put_le(b, u, 8);
}

void ntx_gguf_vbuf_str(struct ntx_gguf_vbuf *b, const char *s, size_t len)
{
	put_le(b, (uint64_t)len, 8);
	ntx_gguf_vbuf_put(b, s, len);
}

void ntx_gguf_vbuf_arr(struct ntx_gguf_vbuf *b, uint32_t elem_type, uint64_t n)
{
	put_le(b, elem_type, 4);
	put_le(b, n, 8);
}

/* Append one host scalar of fixed-size type t from p, little-endian. */
static void put_scalar(struct ntx_gguf_vbuf *b, uint32_t t, const void *p)
{
	int sz = ntx_gguf_vtype_size(t);
	uint64_t v = 0;

	switch (sz) {
	case 1: { uint8_t x; memcpy(&x, p, 1); v = x; break; }
	case 2: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
	case 4: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
	case 8: { uint64_t x; memcpy(&x, p, 8); v = x; break; }
	default: return;
	}
	put_le(b, v, sz);
}

/* ---- building ---- */

struct ntx_gguf_writer *ntx_gguf_writer_new(void)
{
	struct ntx_gguf_writer *w = calloc(1, sizeof *w);

	if (!w)
		return NULL;
	w->version = 3;
	w->alignment = NTX_GGUF_DEFAULT_ALIGNMENT;
	w->chunk = DEFAULT_CHUNK;
	return w;
}

void ntx_gguf_writer_free(struct ntx_gguf_writer *w)
{
	size_t i;

	if (!w)
		return;
	for (i = 0; i < w->n_keys; i++)
		free(w->keys[i]);
	free(w->keys);
	for (i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->t);
	ntx_gguf_vbuf_free(&w->kv);
	free(w);
}

void ntx_gguf_writer_set_version(struct ntx_gguf_writer *w, uint32_t version)
{
	w->version = version;
}

void ntx_gguf_writer_set_chunk_bytes(struct ntx_gguf_writer *w, size_t bytes)
{
	w->chunk = bytes < MIN_CHUNK ? MIN_CHUNK : bytes;
}

void ntx_gguf_writer_set_progress(struct ntx_gguf_writer *w,
				  void (*fn)(void *, uint64_t, uint64_t), void *ctx)
{
	w->progress = fn;
	w->progress_ctx = ctx;
}

uint64_t ntx_gguf_writer_n_tensors(const struct ntx_gguf_writer *w)
{
	return w->n_t;
}

/* Start a pair: check the key and append it with the value type. */
static int begin_kv(struct ntx_gguf_writer *w, const char *key, uint32_t type,
		    struct ntx_err *err)
{
	size_t i, len;
	char *copy;

	if (!key || !*key)
		return ntx_err_set(err, NTX_EINVAL, "empty metadata key");
	len = strlen(key);
	for (i = 0; i < w->n_keys; i++) {
		if (strcmp(w->keys[i], key) == 0)
			return ntx_err_set(err, NTX_EINVAL, "duplicate metadata key '%s'", key);
	}
	if (type >= NTX_GGUF_NTYPES)
		return ntx_err_set(err, NTX_EINVAL, "key '%s': unknown value type %u", key, type);
	if (w->n_keys == w->cap_keys) {
		size_t cap = w->cap_keys ? 2 * w->cap_keys : 32;
		char **nk = realloc(w->keys, cap * sizeof *nk);

		if (!nk)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		w->keys = nk;
		w->cap_keys = cap;
	}
	copy = strdup(key);
	if (!copy)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	w->keys[w->n_keys++] = copy;
	ntx_gguf_vbuf_str(&w->kv, key, len);
	ntx_gguf_vbuf_u32(&w->kv, type);
	w->n_kv++;
	return 0;
}

static int end_kv(struct ntx_gguf_writer *w, struct ntx_err *err)
{
	if (w->kv.oom)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory encoding metadata");
	return 0;
}

int ntx_gguf_writer_add_scalar(struct ntx_gguf_writer *w, const char *key, uint32_t type,
			       const void *value, struct ntx_err *err)
{
	if (!ntx_gguf_vtype_size(type))
		return ntx_err_set(err, NTX_EINVAL, "key '%s': %s is not a fixed-size type", key,
				   ntx_gguf_vtype_name(type));
	if (type == NTX_GGUF_BOOL && *(const uint8_t *)value > 1)
		return ntx_err_set(err, NTX_EINVAL, "key '%s': bool value %u is not 0 or 1", key,
				   *(const uint8_t *)value);
	if (begin_kv(w, key, type, err))
		return -1;
	put_scalar(&w->kv, type, value);
	return end_kv(w, err);
}

int ntx_gguf_writer_add_u32(struct ntx_gguf_writer *w, const char *key, uint32_t v,
			    struct ntx_err *err)
{
	return ntx_gguf_writer_add_scalar(w, key, NTX_GGUF_U32, &v, err);
}

int ntx_gguf_writer_add_i32(struct ntx_gguf_writer *w, const char *key, int32_t v,
			    struct ntx_err *err)
{
	return ntx_gguf_writer_add_scalar(w, key, NTX_GGUF_I32, &v, err);
}

int ntx_gguf_writer_add_u64(struct ntx_gguf_writer *w, const char *key, uint64_t v,
			    struct ntx_err *err)
{
	return ntx_gguf_writer_add_scalar(w, key, NTX_GGUF_U64, &v, err);
}

int ntx_gguf_writer_add_f32(struct ntx_gguf_writer *w, const char *key, float v,
			    struct ntx_err *err)
{
	return ntx_gguf_writer_add_scalar(w, key, NTX_GGUF_F32, &v, err);
}

int ntx_gguf_writer_add_bool(struct ntx_gguf_writer *w, const char *key, int v,
			     struct ntx_err *err)
{
	uint8_t b = v ? 1 : 0;

	return ntx_gguf_writer_add_scalar(w, key, NTX_GGUF_BOOL, &b, err);
}

int ntx_gguf_writer_add_strn(struct ntx_gguf_writer *w, const char *key, const char *s,
			     size_t len, struct ntx_err *err)
{
	if (begin_kv(w, key, NTX_GGUF_STRING, err))
		return -1;
	ntx_gguf_vbuf_str(&w->kv, s, len);
	return end_kv(w, err);
}

int ntx_gguf_writer_add_str(struct ntx_gguf_writer *w, const char *key, const char *s,
			    struct ntx_err *err)
{
	return ntx_gguf_writer_add_strn(w, key, s, strlen(s), err);
}

int ntx_gguf_writer_add_array(struct ntx_gguf_writer *w, const char *key, uint32_t elem_type,
			      const void *elems, uint64_t n, struct ntx_err *err)
{
	int sz = ntx_gguf_vtype_size(elem_type);
	const unsigned char *p = elems;
	uint64_t i;

	if (!sz)
		return ntx_err_set(err, NTX_EINVAL,
				   "key '%s': arrays of %s need add_str_array or add_raw", key,
				   ntx_gguf_vtype_name(elem_type));
	if (n > SIZE_MAX / (uint64_t)sz)
		return ntx_err_set(err, NTX_EINVAL, "key '%s': array of %llu elements is too large",
				   key, (unsigned long long)n);
	if (elem_type == NTX_GGUF_BOOL) {
		for (i = 0; i < n; i++) {
			if (p[i] > 1)
				return ntx_err_set(err, NTX_EINVAL,
						   "key '%s': bool element %llu is not 0 or 1", key,
						   (unsigned long long)i);
		}
	}
	if (begin_kv(w, key, NTX_GGUF_ARRAY, err))
		return -1;
	ntx_gguf_vbuf_arr(&w->kv, elem_type, n);
	for (i = 0; i < n && !w->kv.oom; i++)
		put_scalar(&w->kv, elem_type, p + i * (uint64_t)sz);
	return end_kv(w, err);
}

int ntx_gguf_writer_add_str_array(struct ntx_gguf_writer *w, const char *key,
				  const char *const *s, const size_t *lens, uint64_t n,
				  struct ntx_err *err)
{
	uint64_t i;

	if (begin_kv(w, key, NTX_GGUF_ARRAY, err))
		return -1;
	ntx_gguf_vbuf_arr(&w->kv, NTX_GGUF_STRING, n);
	for (i = 0; i < n && !w->kv.oom; i++)
		ntx_gguf_vbuf_str(&w->kv, s[i], lens ? lens[i] : strlen(s[i]));
	return end_kv(w, err);
}

int ntx_gguf_writer_add_raw(struct ntx_gguf_writer *w, const char *key, uint32_t type,
			    const void *value, size_t len, struct ntx_err *err)
{
	if (begin_kv(w, key, type, err))
		return -1;
	ntx_gguf_vbuf_put(&w->kv, value, len);
	return end_kv(w, err);
}

int ntx_gguf_writer_copy_kv(struct ntx_gguf_writer *w, const struct ntx_gguf_kv *kv,
			    struct ntx_err *err)
{
	char key[NTX_ERR_MAX];

	if (kv->key.len >= sizeof key || memchr(kv->key.p, '\0', (size_t)kv->key.len))
		return ntx_err_set(err, NTX_EINVAL, "metadata key of %llu bytes cannot be copied",
				   (unsigned long long)kv->key.len);
	memcpy(key, kv->key.p, (size_t)kv->key.len);
	key[kv->key.len] = '\0';
	if (kv->val.size > SIZE_MAX)
		return ntx_err_set(err, NTX_EINVAL, "key '%s': value too large", key);
	if (begin_kv(w, key, kv->val.type, err))
		return -1;
	/* for arrays the reader's view starts after the element type and count */
	if (kv->val.type == NTX_GGUF_ARRAY)
		ntx_gguf_vbuf_arr(&w->kv, kv->val.elem_type, kv->val.n);
	ntx_gguf_vbuf_put(&w->kv, kv->val.p, (size_t)kv->val.size);
	return end_kv(w, err);
}

int ntx_gguf_writer_set_alignment(struct ntx_gguf_writer *w, uint32_t alignment,
				  struct ntx_err *err)
{
	if (w->alignment_set)
		return ntx_err_set(err, NTX_EINVAL, "alignment set twice");
	if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (1u << 30))
		return ntx_err_set(err, NTX_EINVAL,
				   "alignment %u is not a power of two from 1 to 2^30", alignment);
	if (alignment != NTX_GGUF_DEFAULT_ALIGNMENT &&
	    ntx_gguf_writer_add_u32(w, "general.alignment", alignment, err))
		return -1;
	w->alignment = alignment;
	w->alignment_set = 1;
	return 0;
}

static int64_t add_tensor(struct ntx_gguf_writer *w, const char *name, uint32_t type,
			  uint32_t n_dims, const int64_t *ne, const void *data,
			  ntx_gguf_fill_fn fill, void *ctx, struct ntx_err *err)
{
	const struct ntx_type_info *ti = ntx_type_get(type);
	struct wtensor *t;
	uint64_t i, row_bytes, rows = 1, nbytes;
	size_t len = name ? strlen(name) : 0;
	uint32_t d;

	if (len == 0 || len > MAX_NAME)
		return ntx_err_set(err, NTX_EINVAL, "tensor name of %zu bytes (must be 1 to %d)",
				   len, MAX_NAME);
	if (!ti)
		return ntx_err_set(err, NTX_EINVAL, "tensor '%s': unknown type %u", name, type);
	if (n_dims < 1 || n_dims > NTX_GGUF_MAX_DIMS)
		return ntx_err_set(err, NTX_EINVAL, "tensor '%s': %u dimensions (must be 1 to %d)",
				   name, n_dims, NTX_GGUF_MAX_DIMS);
	for (d = 0; d < n_dims; d++) {
		if (ne[d] < 0)
			return ntx_err_set(err, NTX_EINVAL, "tensor '%s': dimension %u is negative",
					   name, d);
		if (d > 0) {
			if (ne[d] && rows > UINT64_MAX / (uint64_t)ne[d])
				return ntx_err_set(err, NTX_EINVAL,
						   "tensor '%s': the product of its dimensions overflows",
						   name);
			rows *= (uint64_t)ne[d];
		}
	}
	if (ntx_type_row_bytes(type, ne[0], &row_bytes, err)) {
		ntx_err_prefix(err, "tensor '%s'", name);
		if (err)
			err->code = NTX_EINVAL; /* a bad argument here, not a bad file */
		return -1;
	}
	if (rows && row_bytes > UINT64_MAX / rows)
		return ntx_err_set(err, NTX_EINVAL, "tensor '%s': byte size overflows", name);
	nbytes = row_bytes * rows;
	if (ne[0] && rows > (uint64_t)INT64_MAX / (uint64_t)ne[0])
		return ntx_err_set(err, NTX_EINVAL, "tensor '%s': element count overflows", name);
	for (i = 0; i < w->n_t; i++) {
		if (strcmp(w->t[i].name, name) == 0)
			return ntx_err_set(err, NTX_EINVAL, "duplicate tensor name '%s'", name);
	}
	if (w->n_t == w->cap_t) {
		uint64_t cap = w->cap_t ? 2 * w->cap_t : 64;
		struct wtensor *nt;

		if (cap > SIZE_MAX / sizeof *nt)
			return ntx_err_set(err, NTX_ENOMEM, "too many tensors");
		nt = realloc(w->t, (size_t)cap * sizeof *nt);
		if (!nt)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		w->t = nt;
		w->cap_t = cap;
	}
	t = &w->t[w->n_t];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	if (!t->name)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	t->n_dims = n_dims;
	for (d = 0; d < NTX_GGUF_MAX_DIMS; d++)
		t->ne[d] = d < n_dims ? ne[d] : 1;
	t->type = type;
	t->nbytes = nbytes;
	t->data = data;
	t->fill = fill;
	t->fill_ctx = ctx;
	return (int64_t)w->n_t++;
}

int64_t ntx_gguf_writer_add_tensor(struct ntx_gguf_writer *w, const char *name, uint32_t type,
				   uint32_t n_dims, const int64_t *ne, const void *data,
				   struct ntx_err *err)
{
	return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL, err);
}

int64_t ntx_gguf_writer_add_tensor_fill(struct ntx_gguf_writer *w, const char *name,
					uint32_t type, uint32_t n_dims, const int64_t *ne,
					ntx_gguf_fill_fn fill, void *ctx, struct ntx_err *err)
{
	if (!fill)
		return ntx_err_set(err, NTX_EINVAL, "tensor '%s': no fill function", name);
	return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx, err);
}

/* ---- layout ---- */

int ntx_gguf_writer_layout(struct ntx_gguf_writer *w, uint64_t *file_size,
			   uint64_t *data_offset, struct ntx_err *err)
{
	uint64_t h = 4 + 4 + 8 + 8, off = 0, i;

	if (add_ovf(h, w->kv.len, &h))
		goto ovf;
	for (i = 0; i < w->n_t; i++) {
		const struct wtensor *t = &w->t[i];
		uint64_t ti = 8 + strlen(t->name) + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;

		if (add_ovf(h, ti, &h))
			goto ovf;
	}
	w->header_bytes = h;
	if (align_ovf(h, w->alignment, &w->data_offset))
		goto ovf;
	for (i = 0; i < w->n_t; i++) {
		w->t[i].offset = off;
		if (add_ovf(off, w->t[i].nbytes, &off) || align_ovf(off, w->alignment, &off))
			goto ovf;
	}
	w->data_bytes = off;
	if (add_ovf(w->data_offset, off, &w->file_size) || w->file_size > (uint64_t)INT64_MAX)
		goto ovf;
	if (file_size)
		*file_size = w->file_size;
	if (data_offset)
		*data_offset = w->data_offset;
	return 0;
ovf:
	return ntx_err_set(err, NTX_EINVAL, "GGUF file size overflows 63 bits");
}

int ntx_gguf_writer_tensor_span(const struct ntx_gguf_writer *w, uint64_t index,
				uint64_t *offset, uint64_t *nbytes)
{
	if (index >= w->n_t)
		return -1;
	if (offset)
		*offset = w->t[index].offset;
	if (nbytes)
		*nbytes = w->t[index].nbytes;
	return 0;
}

/* Header, metadata and tensor directory (layout() must have run). */
static int encode_header(struct ntx_gguf_writer *w, struct ntx_gguf_vbuf *b, struct ntx_err *err)
{
	uint64_t i;
	uint32_t d;

	ntx_gguf_vbuf_put(b, GGUF_MAGIC_BYTES, 4);
	ntx_gguf_vbuf_u32(b, w->version);
	ntx_gguf_vbuf_u64(b, w->n_t);
	ntx_gguf_vbuf_u64(b, w->n_kv);
	ntx_gguf_vbuf_put(b, w->kv.p, w->kv.len);
	for (i = 0; i < w->n_t; i++) {
		const struct wtensor *t = &w->t[i];

		ntx_gguf_vbuf_str(b, t->name, strlen(t->name));
		ntx_gguf_vbuf_u32(b, t->n_dims);
		for (d = 0; d < t->n_dims; d++)
			ntx_gguf_vbuf_u64(b, (uint64_t)t->ne[d]);
		ntx_gguf_vbuf_u32(b, t->type);
		ntx_gguf_vbuf_u64(b, t->offset);
	}
	if (b->oom)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory encoding the GGUF header");
	return 0;
}

/* ---- sinks ---- */

enum { SINK_MEM, SINK_FD, SINK_STREAM };

struct sink {
	int kind;
	struct ntx_err *err;
	/* SINK_MEM: the whole file */
	unsigned char *mem;
	size_t mem_len, mem_cap;
	/* SINK_FD / SINK_STREAM: chunk buffers (two for FD, one for STREAM) */
	int fd;
	FILE *f;
	unsigned char *buf[2];
	size_t cap, used;
	int cur;
	/* FD: background writer */
	int threaded;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int full[2];
	size_t len[2];
	int quit;
	int err_no;
};

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t r = write(fd, p, n > (1u << 30) ? (1u << 30) : n);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (r == 0)
			return EIO;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void *sink_thread(void *arg)
{
	struct sink *s = arg;
	int j = 0;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		size_t n;
		int e = 0;

		while (!s->full[j] && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->full[j])
			break;
		n = s->len[j];
		if (!s->err_no) {
			pthread_mutex_unlock(&s->mu);
			e = write_all(s->fd, s->buf[j], n);
			pthread_mutex_lock(&s->mu);
			if (e && !s->err_no)
				s->err_no = e;
		}
		s->full[j] = 0;
		pthread_cond_broadcast(&s->cv);
		j ^= 1;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int sink_open_buffered(struct sink *s, size_t cap, int threaded)
{
	s->cap = cap;
	s->buf[0] = malloc(cap);
	s->buf[1] = threaded ? malloc(cap) : NULL;
	if (!s->buf[0] || (threaded && !s->buf[1])) {
		free(s->buf[0]);
		free(s->buf[1]);
		s->buf[0] = s->buf[1] = NULL;
		return ntx_err_set(s->err, NTX_ENOMEM, "out of memory for write buffers");
	}
	if (threaded) {
		pthread_mutex_init(&s->mu, NULL);
		pthread_cond_init(&s->cv, NULL);
		if (pthread_create(&s->th, NULL, sink_thread, s)) {
			pthread_mutex_destroy(&s->mu);
			pthread_cond_destroy(&s->cv);
			threaded = 0; /* write synchronously instead */
		}
	}
	s->threaded = threaded;
	return 0;
}

static int sink_io_error(struct sink *s, int e)
{
	return ntx_err_errno(s->err, e, "write");
}

/* Hand the current buffer to the output. */
static int sink_flush(struct sink *s)
{
	size_t n = s->used;

	if (s->kind == SINK_MEM || n == 0)
		return 0;
	s->used = 0;
	if (s->kind == SINK_STREAM) {
		if (fwrite(s->buf[0], 1, n, s->f) != n)
			return sink_io_error(s, errno ? errno : EIO);
		return 0;
	}
	if (!s->threaded) {
		int e = write_all(s->fd, s->buf[s->cur], n);

		return e ? sink_io_error(s, e) : 0;
	}
	pthread_mutex_lock(&s->mu);
	s->len[s->cur] = n;
	s->full[s->cur] = 1;
	pthread_cond_broadcast(&s->cv);
	s->cur ^= 1;
	while (s->full[s->cur])
		pthread_cond_wait(&s->cv, &s->mu);
	n = (size_t)s->err_no;
	pthread_mutex_unlock(&s->mu);
	return n ? sink_io_error(s, (int)n) : 0;
}

/* Writable space at the end of the output. */
static int sink_space(struct sink *s, unsigned char **p, size_t *avail)
{
	if (s->kind == SINK_MEM) {
		*p = s->mem + s->mem_len;
		*avail = s->mem_cap - s->mem_len;
		return 0;
	}
	if (s->used == s->cap && sink_flush(s))
		return -1;
	*p = s->buf[s->cur] + s->used;
	*avail = s->cap - s->used;
	return 0;
}

static void sink_commit(struct sink *s, size_t n)
{
	if (s->kind == SINK_MEM)
		s->mem_len += n;
	else
		s->used += n;
}

static int sink_put(struct sink *s, const void *data, uint64_t n)
{
	const unsigned char *p = data;

	while (n) {
		unsigned char *dst;
		size_t avail, k;

		if (sink_space(s, &dst, &avail))
			return -1;
		if (avail == 0)
			return ntx_err_set(s->err, NTX_EINVAL, "internal: output larger than its layout");
		k = n < avail ? (size_t)n : avail;
		if (p) {
			memcpy(dst, p, k);
			p += k;
		} else {
			memset(dst, 0, k);
		}
		sink_commit(s, k);
		n -= k;
	}
	return 0;
}

/* Flush and stop the writer thread. ok = 0 abandons buffered data. */
static int sink_close(struct sink *s, int ok)
{
	int rc = 0;

	if (ok && sink_flush(s))
		rc = -1;
	if (s->threaded) {
		pthread_mutex_lock(&s->mu);
		s->quit = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->th, NULL);
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		if (ok && !rc && s->err_no)
			rc = sink_io_error(s, s->err_no);
		s->threaded = 0;
	}
	free(s->buf[0]);
	free(s->buf[1]);
	s->buf[0] = s->buf[1] = NULL;
	return rc;
}

/* ---- writing ---- */

/* Emit the header and, unless header_only, every tensor's data. */
static int emit(struct ntx_gguf_writer *w, struct sink *s, int header_only, struct ntx_err *err)
{
	struct ntx_gguf_vbuf hb = { 0 };
	uint64_t i, done = 0;

	if (encode_header(w, &hb, err))
		goto fail;
	if (hb.len != w->header_bytes) {
		ntx_err_set(err, NTX_EINVAL, "internal: header is %zu bytes, layout says %llu",
			    hb.len, (unsigned long long)w->header_bytes);
		goto fail;
	}
	if (sink_put(s, hb.p, hb.len) || sink_put(s, NULL, w->data_offset - w->header_bytes))
		goto fail;
	ntx_gguf_vbuf_free(&hb);
	if (header_only)
		return 0;
	for (i = 0; i < w->n_t; i++) {
		const struct wtensor *t = &w->t[i];
		uint64_t bsz = (uint64_t)ntx_type_get(t->type)->type_size, pos = 0, pad;

		if (!t->fill) {
			if (sink_put(s, t->data, t->nbytes))
				return -1;
			done += t->nbytes;
		}
		while (t->fill && pos < t->nbytes) {
			unsigned char *dst;
			size_t avail, k;

			if (sink_space(s, &dst, &avail))
				return -1;
			if (avail > w->chunk)
				avail = w->chunk;
			k = t->nbytes - pos < avail ? (size_t)(t->nbytes - pos) : avail;
			k -= k % bsz;
			if (k == 0) { /* less than a block left in this buffer */
				if (s->kind == SINK_MEM)
					return ntx_err_set(err, NTX_EINVAL, "internal: memory sink full");
				if (sink_flush(s))
					return -1;
				continue;
			}
			if (t->fill(t->fill_ctx, i, pos, dst, k, err))
				return -1;
			sink_commit(s, k);
			pos += k;
			done += k;
			if (w->progress)
				w->progress(w->progress_ctx, done, w->data_bytes);
		}
		pad = (t->nbytes % w->alignment) ? w->alignment - t->nbytes % w->alignment : 0;
		if (sink_put(s, NULL, pad))
			return -1;
		done += pad;
	}
	if (w->progress)
		w->progress(w->progress_ctx, w->data_bytes, w->data_bytes);
	return 0;
fail:
	ntx_gguf_vbuf_free(&hb);
	return -1;
}

int ntx_gguf_writer_write_fd(struct ntx_gguf_writer *w, int fd, unsigned flags,
			     struct ntx_err *err)
{
	struct sink s;
	off_t start = 0;
	int sparse = (flags & NTX_GGUF_WRITE_SPARSE) != 0;

	if (ntx_gguf_writer_layout(w, NULL, NULL, err))
		return -1;
	if (sparse) {
		struct stat st;

		if (fstat(fd, &st) < 0)
			return ntx_err_errno(err, errno, "fstat");
		if (!S_ISREG(st.st_mode))
			return ntx_err_set(err, NTX_EINVAL, "a sparse file needs a regular output file");
		start = lseek(fd, 0, SEEK_CUR);
		if (start < 0)
			return ntx_err_errno(err, errno, "lseek");
		if ((uint64_t)start > (uint64_t)INT64_MAX - w->file_size)
			return ntx_err_set(err, NTX_EINVAL, "sparse file size overflows");
	}
	memset(&s, 0, sizeof s);
	s.kind = SINK_FD;
	s.fd = fd;
	s.err = err;
	if (sink_open_buffered(&s, w->chunk, !sparse))
		return -1;
	if (emit(w, &s, sparse, err)) {
		sink_close(&s, 0);
		return -1;
	}
	if (sink_close(&s, 1))
		return -1;
	/* first drop whatever the file held past the header, so that the data
	 * region reads as zeros, then extend it to its full size */
	if (sparse && (ftruncate(fd, start + (off_t)w->data_offset) < 0 ||
		       ftruncate(fd, start + (off_t)w->file_size) < 0))
		return ntx_err_errno(err, errno, "ftruncate to %llu bytes",
				     (unsigned long long)w->file_size);
	return 0;
}

int ntx_gguf_writer_write_stream(struct ntx_gguf_writer *w, FILE *f, struct ntx_err *err)
{
	struct sink s;

	if (ntx_gguf_writer_layout(w, NULL, NULL, err))
		return -1;
	memset(&s, 0, sizeof s);
	s.kind = SINK_STREAM;
	s.f = f;
	s.err = err;
	if (sink_open_buffered(&s, w->chunk, 0))
		return -1;
	if (emit(w, &s, 0, err)) {
		sink_close(&s, 0);
		return -1;
	}
	if (sink_close(&s, 1))
		return -1;
	if (fflush(f) != 0)
		return ntx_err_errno(err, errno, "write");
	return 0;
}

int ntx_gguf_writer_write_mem(struct ntx_gguf_writer *w, unsigned char **buf, size_t *len,
			      struct ntx_err *err)
{
	struct sink s;

	*buf = NULL;
	*len = 0;
	if (ntx_gguf_writer_layout(w, NULL, NULL, err))
		return -1;
	if (w->file_size > SIZE_MAX)
		return ntx_err_set(err, NTX_ENOMEM, "file of %llu bytes does not fit in memory",
				   (unsigned long long)w->file_size);
	memset(&s, 0, sizeof s);
	s.kind = SINK_MEM;
	s.err = err;
	s.mem_cap = (size_t)w->file_size;
	s.mem = malloc(s.mem_cap ? s.mem_cap : 1);
	if (!s.mem)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for a %llu-byte file",
				   (unsigned long long)w->file_size);
	if (emit(w, &s, 0, err)) {
		free(s.mem);
		return -1;
	}
	if (s.mem_len != s.mem_cap) {
		free(s.mem);
		return ntx_err_set(err, NTX_EINVAL, "internal: wrote %zu of %zu bytes", s.mem_len,
				   s.mem_cap);
	}
	*buf = s.mem;
	*len = s.mem_len;
	return 0;
}

int ntx_gguf_writer_write_file(struct ntx_gguf_writer *w, const char *path, unsigned flags,
			       struct ntx_err *err)
{
	size_t n = strlen(path);
	char *tmp = malloc(n + 16);
	mode_t um;
	int fd;

	if (!tmp)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	memcpy(tmp, path, n);
	memcpy(tmp + n, ".tmp.XXXXXX", 12);
	fd = mkstemp(tmp);
	if (fd < 0) {
		ntx_err_errno(err, errno, "cannot create a temporary file next to it");
		free(tmp);
		return -1;
	}
	um = umask(0);
	umask(um);
	if (fchmod(fd, 0666 & ~um) < 0) {
		ntx_err_errno(err, errno, "fchmod");
		goto fail;
	}
	if (ntx_gguf_writer_write_fd(w, fd, flags & NTX_GGUF_WRITE_SPARSE, err))
		goto fail;
	if (!(flags & NTX_GGUF_WRITE_NOSYNC) && fsync(fd) < 0) {
		ntx_err_errno(err, errno, "fsync");
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		ntx_err_errno(err, errno, "close");
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		ntx_err_errno(err, errno, "rename");
		goto fail;
	}
	free(tmp);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	free(tmp);
	return -1;
}
