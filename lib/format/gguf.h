/* gguf.h - a validating GGUF reader (versions 2 and 3, little-endian).
 *
 * The file is read through a read-only map. ntx_gguf_open() walks the whole
 * header, every metadata value (nested arrays included) and the tensor
 * directory, checking every count, length, dimension product and offset
 * against the file size and for overflow before use. After a successful open
 * every accessor is safe: nothing is read past the end of the map.
 *
 * Strings are views into the map (struct ntx_gguf_str: pointer and length,
 * not NUL-terminated). Everything returned is borrowed and lives until
 * ntx_gguf_close(). */
#ifndef NTX_GGUF_H
#define NTX_GGUF_H

#include <stdint.h>
#include <stddef.h>

#include "err.h"

#define NTX_GGUF_MAX_DIMS 4
#define NTX_GGUF_DEFAULT_ALIGNMENT 32
#define NTX_GGUF_MAX_DEPTH 8 /* nesting limit for arrays of arrays */
#define NTX_GGUF_MAX_NAME 1024 /* tensor name bytes (ggml itself allows 63) */

enum ntx_gguf_vtype {
	NTX_GGUF_U8 = 0,
	NTX_GGUF_I8 = 1,
	NTX_GGUF_U16 = 2,
	NTX_GGUF_I16 = 3,
	NTX_GGUF_U32 = 4,
	NTX_GGUF_I32 = 5,
	NTX_GGUF_F32 = 6,
	NTX_GGUF_BOOL = 7,
	NTX_GGUF_STRING = 8,
	NTX_GGUF_ARRAY = 9,
	NTX_GGUF_U64 = 10,
	NTX_GGUF_I64 = 11,
	NTX_GGUF_F64 = 12,
	NTX_GGUF_NTYPES = 13
};

struct ntx_gguf_str {
	const char *p; /* not NUL-terminated */
	uint64_t len;
};

/* A metadata value: a view into the map. For arrays, elem_type and n give the
 * element type and count, and p points at the first element. */
struct ntx_gguf_value {
	uint32_t type;
	const unsigned char *p; /* first byte of the value (after type tags) */
	uint64_t size;          /* bytes the value occupies from p */
	uint32_t elem_type;     /* arrays only */
	uint64_t n;             /* arrays only: element count */
};

struct ntx_gguf_kv {
	struct ntx_gguf_str key;
	struct ntx_gguf_value val;
	uint64_t file_offset;      /* where the key/value pair starts */
	const uint64_t *str_index; /* arrays of strings: offset of each element
				    * from val.p; NULL otherwise */
};

struct ntx_gguf_tensor {
	char *name;                       /* NUL-terminated copy */
	uint32_t n_dims;
	int64_t ne[NTX_GGUF_MAX_DIMS];    /* ne[0] is the contiguous dimension; unused = 1 */
	uint32_t type;                    /* ggml type id (enum ntx_type) */
	uint64_t offset;                  /* relative to the data section */
	uint64_t file_offset;             /* absolute */
	uint64_t nbytes;
	int64_t n_elem;
	const void *data;                 /* into the map */
};

struct ntx_gguf {
	char *path;
	int fd;
	const unsigned char *map;
	uint64_t file_size;
	uint32_t version;
	uint64_t n_kv;
	struct ntx_gguf_kv *kv;
	uint64_t n_tensors;
	struct ntx_gguf_tensor *tensors;
	uint32_t alignment;
	uint64_t header_bytes;  /* end of the tensor directory */
	uint64_t data_offset;   /* start of the data section (aligned) */
	uint64_t data_bytes;    /* file_size - data_offset (0 if past the end) */
};

/* Open and validate a GGUF file (read-only map). Returns NULL and fills *err
 * on failure; the message does not include the path (the caller adds it). */
struct ntx_gguf *ntx_gguf_open(const char *path, struct ntx_err *err);

/* Validate a GGUF image already in memory (not copied: buf must outlive the
 * result). Used by the fuzz target and unit tests. */
struct ntx_gguf *ntx_gguf_open_buffer(const void *buf, size_t len, struct ntx_err *err);

void ntx_gguf_close(struct ntx_gguf *g);

/* Find a key; NULL if absent. */
const struct ntx_gguf_kv *ntx_gguf_find(const struct ntx_gguf *g, const char *key);

/* Find a tensor by name; NULL if absent. */
const struct ntx_gguf_tensor *ntx_gguf_find_tensor(const struct ntx_gguf *g, const char *name);

/* Name of a value type ("u32", "string", "array", ...). */
const char *ntx_gguf_vtype_name(uint32_t t);

/* Scalar getters. Integers of any width convert when the value fits; floats
 * accept f32/f64 (and integers). Return 0, or -1 with *err naming the key
 * and the type found. */
int ntx_gguf_value_u64(const struct ntx_gguf_value *v, uint64_t *out);
int ntx_gguf_value_i64(const struct ntx_gguf_value *v, int64_t *out);
int ntx_gguf_value_f64(const struct ntx_gguf_value *v, double *out);
int ntx_gguf_value_str(const struct ntx_gguf_value *v, struct ntx_gguf_str *out);

/* Key lookups with defaults: return 1 if found and converted, 0 if absent,
 * -1 (with *err) if present with an incompatible type or value. */
int ntx_gguf_get_u64(const struct ntx_gguf *g, const char *key, uint64_t *out, struct ntx_err *err);
int ntx_gguf_get_f64(const struct ntx_gguf *g, const char *key, double *out, struct ntx_err *err);
int ntx_gguf_get_str(const struct ntx_gguf *g, const char *key, struct ntx_gguf_str *out, struct ntx_err *err);
/* Arrays: elem_type and n of the array under key (and the value itself). */
int ntx_gguf_get_arr(const struct ntx_gguf *g, const char *key, const struct ntx_gguf_kv **out, struct ntx_err *err);

/* Element i of an array value (any element type, nested arrays included;
 * O(1) for fixed-size elements and indexed string arrays, O(i) otherwise). */
int ntx_gguf_array_get(const struct ntx_gguf_kv *kv, const struct ntx_gguf_value *arr,
		       uint64_t i, struct ntx_gguf_value *out);

/* Iterate over an array's elements in order in O(1) per step: call with
 * i = 0, 1, 2, ...; on entry for i > 0, *elem must hold element i-1 (as the
 * previous call left it); on return it holds element i. Returns 0, or -1 when
 * i >= n or arr is not an array. */
int ntx_gguf_array_next(const struct ntx_gguf_value *arr, uint64_t i,
			struct ntx_gguf_value *elem);

/* String element i of a top-level array of strings (kv->str_index set). */
struct ntx_gguf_str ntx_gguf_arr_str(const struct ntx_gguf_kv *kv, uint64_t i);

/* Byte size of a fixed-size value type, 0 for string/array/unknown. */
int ntx_gguf_vtype_size(uint32_t t);

#endif
