/* gguf_write.h - a GGUF v3 writer (little-endian).
 *
 * Build a description (metadata pairs in order, then tensors), then write it
 * once: to a file descriptor, to a FILE *, to a path (temporary name, then
 * rename), or to a malloc'd buffer. Tensor data comes from a pointer or from
 * a fill callback called chunk by chunk, so a 40 GB tensor set streams through
 * a few MiB of memory; a background thread writes one chunk while the next is
 * filled. In sparse mode only the header and tensor directory are written and
 * the file is extended with ftruncate() to its full size (the data region is a
 * hole): a 70B-shaped file for planning tests costs a few MB of disk.
 *
 * Layout (as llama.cpp and gguf-py write it): header, metadata, tensor
 * directory, zero padding to the alignment, then each tensor's data at an
 * aligned offset, padded with zeros to the alignment (the last one too).
 *
 * Every size is checked for overflow. The writer validates what it is given
 * (unique non-empty keys and tensor names, known tensor types, 1 to 4
 * dimensions, rows that are a whole number of blocks) except values added
 * with ntx_gguf_writer_add_raw(), which are written as given so tests can
 * craft malformed files. The library never prints. */
#ifndef NTX_GGUF_WRITE_H
#define NTX_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"
#include "gguf.h"

struct ntx_gguf_writer;

/* ---- encoded values ---- */

/* A growable byte buffer for encoding values by hand (nested arrays, or
 * deliberately malformed values for tests). Functions never fail: on
 * allocation failure they set oom and stop appending; check it before use. */
struct ntx_gguf_vbuf {
	unsigned char *p;
	size_t len, cap;
	int oom;
};

void ntx_gguf_vbuf_free(struct ntx_gguf_vbuf *b); /* frees p, resets; NULL ok */
void ntx_gguf_vbuf_put(struct ntx_gguf_vbuf *b, const void *p, size_t n);
void ntx_gguf_vbuf_u8(struct ntx_gguf_vbuf *b, uint8_t v);
void ntx_gguf_vbuf_u16(struct ntx_gguf_vbuf *b, uint16_t v);
void ntx_gguf_vbuf_u32(struct ntx_gguf_vbuf *b, uint32_t v);
void ntx_gguf_vbuf_u64(struct ntx_gguf_vbuf *b, uint64_t v);
void ntx_gguf_vbuf_f32(struct ntx_gguf_vbuf *b, float v);
void ntx_gguf_vbuf_f64(struct ntx_gguf_vbuf *b, double v);
/* A GGUF string: u64 length then the bytes. */
void ntx_gguf_vbuf_str(struct ntx_gguf_vbuf *b, const char *s, size_t len);
/* An array header: u32 element type then u64 count; the caller appends the
 * elements (for nested arrays, each one a header plus its elements). */
void ntx_gguf_vbuf_arr(struct ntx_gguf_vbuf *b, uint32_t elem_type, uint64_t n);

/* ---- building ---- */

/* A new, empty description: version 3, alignment 32. NULL if out of memory. */
struct ntx_gguf_writer *ntx_gguf_writer_new(void);

/* Free the writer and its copies of names and values (not tensor data given
 * by pointer). NULL is ok. */
void ntx_gguf_writer_free(struct ntx_gguf_writer *w);

/* Data alignment (a power of two, 1 to 2^30). A value other than 32 also
 * appends the key general.alignment (u32) at this point of the metadata, as
 * the format requires; call it at most once. Returns 0 or -1. */
int ntx_gguf_writer_set_alignment(struct ntx_gguf_writer *w, uint32_t alignment,
				  struct ntx_err *err);

/* The version number written in the header (default 3). Only for tests that
 * craft files of other versions: the layout stays v3's. */
void ntx_gguf_writer_set_version(struct ntx_gguf_writer *w, uint32_t version);

/* Bytes per chunk handed to fill callbacks and to write() (default 16 MiB,
 * at least 64 KiB). Two such buffers are allocated while writing to a file. */
void ntx_gguf_writer_set_chunk_bytes(struct ntx_gguf_writer *w, size_t bytes);

/* Progress: fn(ctx, bytes_done, bytes_total) after every chunk of tensor data. */
void ntx_gguf_writer_set_progress(struct ntx_gguf_writer *w,
				  void (*fn)(void *ctx, uint64_t done, uint64_t total), void *ctx);

/* Metadata pairs, in the order added. Keys are copied; a key must be
 * non-empty and not added before. Each returns 0, or -1 and fills *err. */

/* A scalar of any fixed-size type (u8 ... f64, bool): value points at a host
 * value of that type (bool: a uint8_t 0 or 1). */
int ntx_gguf_writer_add_scalar(struct ntx_gguf_writer *w, const char *key, uint32_t type,
			       const void *value, struct ntx_err *err);
int ntx_gguf_writer_add_u32(struct ntx_gguf_writer *w, const char *key, uint32_t v,
			    struct ntx_err *err);
int ntx_gguf_writer_add_i32(struct ntx_gguf_writer *w, const char *key, int32_t v,
			    struct ntx_err *err);
int ntx_gguf_writer_add_u64(struct ntx_gguf_writer *w, const char *key, uint64_t v,
			    struct ntx_err *err);
int ntx_gguf_writer_add_f32(struct ntx_gguf_writer *w, const char *key, float v,
			    struct ntx_err *err);
int ntx_gguf_writer_add_bool(struct ntx_gguf_writer *w, const char *key, int v,
			     struct ntx_err *err);
/* A string of len bytes (any bytes; not NUL-terminated); _str uses strlen. */
int ntx_gguf_writer_add_strn(struct ntx_gguf_writer *w, const char *key, const char *s,
			     size_t len, struct ntx_err *err);
int ntx_gguf_writer_add_str(struct ntx_gguf_writer *w, const char *key, const char *s,
			    struct ntx_err *err);
/* An array of n fixed-size elements of elem_type given as a host array
 * (bool: uint8_t each 0 or 1). */
int ntx_gguf_writer_add_array(struct ntx_gguf_writer *w, const char *key, uint32_t elem_type,
			      const void *elems, uint64_t n, struct ntx_err *err);
/* An array of n strings; lens may be NULL (then strlen of each). */
int ntx_gguf_writer_add_str_array(struct ntx_gguf_writer *w, const char *key,
				  const char *const *s, const size_t *lens, uint64_t n,
				  struct ntx_err *err);
/* A value of any type already encoded (for an array: element type, count,
 * elements; see ntx_gguf_vbuf). Written as given, not validated. */
int ntx_gguf_writer_add_raw(struct ntx_gguf_writer *w, const char *key, uint32_t type,
			    const void *value, size_t len, struct ntx_err *err);
/* A copy of a pair read by the reader (the reader validated it). */
int ntx_gguf_writer_copy_kv(struct ntx_gguf_writer *w, const struct ntx_gguf_kv *kv,
			    struct ntx_err *err);

/* Fill callback: write len bytes of tensor `index` (in the order added),
 * starting at byte `offset` of its data, into buf. offset and len are
 * multiples of the type's block size in bytes; calls go in order of offset.
 * Return 0, or -1 with *err set to abandon the write. */
typedef int (*ntx_gguf_fill_fn)(void *ctx, uint64_t index, uint64_t offset, void *buf,
				size_t len, struct ntx_err *err);

/* Tensors, in the order added (which is also the data order). ne holds n_dims
 * sizes (ne[0] contiguous). data must hold the tensor's bytes and live until
 * the write; NULL writes zeros. Returns the tensor's index, or -1. */
int64_t ntx_gguf_writer_add_tensor(struct ntx_gguf_writer *w, const char *name, uint32_t type,
				   uint32_t n_dims, const int64_t *ne, const void *data,
				   struct ntx_err *err);
int64_t ntx_gguf_writer_add_tensor_fill(struct ntx_gguf_writer *w, const char *name,
					uint32_t type, uint32_t n_dims, const int64_t *ne,
					ntx_gguf_fill_fn fill, void *ctx, struct ntx_err *err);

/* ---- layout ---- */

/* Compute the layout: total file size, start of the data section, and
 * (optional, index < n_tensors) a tensor's offset within the data section and
 * its byte size. Returns 0 or -1 (overflow). */
int ntx_gguf_writer_layout(struct ntx_gguf_writer *w, uint64_t *file_size,
			   uint64_t *data_offset, struct ntx_err *err);
int ntx_gguf_writer_tensor_span(const struct ntx_gguf_writer *w, uint64_t index,
				uint64_t *offset, uint64_t *nbytes);
uint64_t ntx_gguf_writer_n_tensors(const struct ntx_gguf_writer *w);

/* ---- writing ---- */

enum {
	NTX_GGUF_WRITE_SPARSE = 1, /* header only, then ftruncate to full size */
	NTX_GGUF_WRITE_NOSYNC = 2  /* _write_file: skip fsync before rename */
};

/* Write to fd from its current position (SPARSE needs a regular file). */
int ntx_gguf_writer_write_fd(struct ntx_gguf_writer *w, int fd, unsigned flags,
			     struct ntx_err *err);

/* Write to a stream (no SPARSE). The stream is flushed, not closed. */
int ntx_gguf_writer_write_stream(struct ntx_gguf_writer *w, FILE *f, struct ntx_err *err);

/* Write to path through a temporary file in the same directory
 * ("path.tmp.XXXXXX"), fsync'ed (unless NOSYNC) and renamed over path; on
 * failure the temporary file is removed and path is untouched. */
int ntx_gguf_writer_write_file(struct ntx_gguf_writer *w, const char *path, unsigned flags,
			       struct ntx_err *err);

/* Write into a new malloc'd buffer (*buf, *len; caller frees). */
int ntx_gguf_writer_write_mem(struct ntx_gguf_writer *w, unsigned char **buf, size_t *len,
			      struct ntx_err *err);

#endif
