/* pack.h - the pack file (.ntxp): every streamed layer of a model as one
 * contiguous extent aligned to 4096 bytes, in the order the engine consumes
 * them (model order), behind a checksummed header and directory.
 *
 * An extent holds one layer in the layout of layout.h (the NTX_LAYER_NT
 * tensors at NTX_LAYER_ALIGN-aligned offsets), either as is (compression
 * none: the stored bytes ARE the layer buffer, usable in place) or as a
 * sequence of independently decodable frames (zstd, optionally after a
 * byte-plane split of 2- or 4-byte elements). After reading (and decoding)
 * an extent, the engine points at tensors exactly as for a pinned RAM copy.
 *
 * The byte-by-byte format is in doc/pack-format.md. Every value is checked
 * against the file size and for overflow by ntx_pack_open() before anything
 * is allocated from it; after a successful open every extent and tensor
 * record is consistent (offsets, sizes, alignment, contiguity, shapes and
 * types against the ggml type table, frame tables). */
#ifndef NTX_PACK_H
#define NTX_PACK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "layout.h"
#include "model.h"

/* ---- format constants (doc/pack-format.md) ---- */

#define NTX_PACK_MAGIC "NTXPACK" /* 8 bytes on disk: these 7 and a NUL */
#define NTX_PACK_MAGIC_LEN 8
#define NTX_PACK_VERSION 1
#define NTX_PACK_HEADER_SIZE 128
#define NTX_PACK_EXTENT_REC 64   /* bytes of an extent record */
#define NTX_PACK_TENSOR_REC 120  /* bytes of a tensor record */
#define NTX_PACK_FRAME_REC 8     /* bytes of a frame record */
#define NTX_PACK_NAME_MAX 64     /* tensor name field, NUL included */
#define NTX_PACK_ALIGN 4096u     /* default extent alignment */
#define NTX_PACK_ALIGN_MIN 512u
#define NTX_PACK_ALIGN_MAX (1u << 20)
#define NTX_PACK_FRAME_DEFAULT (4u << 20) /* raw bytes per compressed frame */
#define NTX_PACK_FRAME_MAX (256u << 20)
#define NTX_PACK_MAX_LAYERS (1 << 20)
#define NTX_PACK_MAX_DIR (1ull << 30)

enum ntx_pack_comp {
	NTX_PACK_COMP_NONE = 0, /* stored bytes = layer buffer */
	NTX_PACK_COMP_ZSTD = 1  /* frames, each zstd or stored as is */
};

enum ntx_pack_xform {
	NTX_PACK_XFORM_NONE = 0,
	NTX_PACK_XFORM_SPLIT2 = 1, /* per frame: byte planes of 2-byte elements (F16, BF16) */
	NTX_PACK_XFORM_SPLIT4 = 2  /* per frame: byte planes of 4-byte elements (F32) */
};

enum ntx_pack_frame_kind {
	NTX_PACK_FRAME_ZSTD = 0, /* one zstd frame of the transformed bytes */
	NTX_PACK_FRAME_RAW = 1   /* the layer bytes as they are (no transform) */
};

const char *ntx_pack_comp_name(uint32_t c);  /* "none", "zstd", or "?" */
const char *ntx_pack_xform_name(uint32_t x); /* "none", "split2", "split4", or "?" */

/* ---- the reader ---- */

/* A tensor record: where one of the layer's tensors lies in the decoded
 * (raw) extent. */
struct ntx_pack_tensor {
	char name[NTX_PACK_NAME_MAX]; /* NUL-terminated */
	uint32_t type;                /* ggml type id, known to types.h */
	uint32_t n_dims;              /* 1..4 */
	int64_t ne[4];                /* unused dimensions are 1 */
	uint64_t offset;              /* from the start of the raw extent */
	uint64_t nbytes;
};

struct ntx_pack_frame {
	uint64_t raw_off;    /* offset in the raw extent */
	uint32_t raw_len;    /* raw bytes (frame_size; the last may be shorter) */
	uint64_t stored_off; /* offset in the stored data (from the extent start) */
	uint32_t stored_len;
	uint32_t kind;       /* enum ntx_pack_frame_kind */
};

/* One extent = one layer. */
struct ntx_pack_extent {
	int layer;                           /* model layer index */
	uint64_t offset;                     /* file offset, multiple of the alignment */
	uint64_t stored_size;                /* bytes to read: data_size padded to the alignment */
	uint64_t data_size;                  /* stored bytes before padding */
	uint64_t raw_size;                   /* decoded = ntx_layer_layout total */
	uint32_t compression;                /* enum ntx_pack_comp */
	uint32_t transform;                  /* enum ntx_pack_xform */
	uint64_t checksum;                   /* XXH64 (seed 0) of the data_size stored bytes */
	int n_tensors;                       /* NTX_LAYER_NT, in ntx_layer_tensor() order */
	const struct ntx_pack_tensor *tensors;
	int n_frames;                        /* 0 when compression is none */
	const struct ntx_pack_frame *frames;
};

struct ntx_pack {
	char *path;                  /* as given; "<buffer>" for open_buffer */
	int fd;                      /* -1 for open_buffer */
	uint64_t file_size;
	uint32_t version;
	uint32_t alignment;
	uint32_t tensor_align;       /* NTX_LAYER_ALIGN */
	uint32_t frame_size;         /* raw bytes per frame; 0 if no extent is compressed */
	int n_layer;                 /* of the model */
	uint64_t gguf_fingerprint;
	char fingerprint_hex[17];
	uint64_t gguf_size;
	uint64_t dir_size;
	uint64_t data_offset;        /* first extent */
	int n_extents;
	struct ntx_pack_extent *extents; /* in layer order */
	uint64_t raw_bytes;          /* sum of raw_size */
	uint64_t max_stored;         /* largest stored_size (staging buffer size) */
	uint64_t max_raw;            /* largest raw_size */
	/* private */
	int *by_layer;               /* n_layer entries: extent index or -1 */
	struct ntx_pack_tensor *tensor_mem;
	struct ntx_pack_frame *frame_mem;
};

/* Open and validate a pack file (header, directory, every record against the
 * file size). Reads only the header and directory. Returns NULL and fills
 * *err on failure; the message does not include the path. */
struct ntx_pack *ntx_pack_open(const char *path, struct ntx_err *err);

/* Validate a pack image in memory (its header and directory; the extents
 * are at their offsets in buf). Not copied: buf must outlive the result.
 * For the fuzz target and tests. */
struct ntx_pack *ntx_pack_open_buffer(const void *buf, size_t len, struct ntx_err *err);

void ntx_pack_close(struct ntx_pack *p);

/* Nonzero if buf (len bytes, the start of a file) begins with the magic. */
int ntx_pack_is_pack(const void *buf, size_t len);

/* Nonzero if the file at path begins with the magic (0 when it cannot be
 * read). */
int ntx_pack_file_is_pack(const char *path);

/* The extent of a model layer, or NULL if that layer is not in the pack. */
const struct ntx_pack_extent *ntx_pack_extent_for_layer(const struct ntx_pack *p, int layer);

/* The pack was made from this model: fingerprint, GGUF size, layer count,
 * and every extent's tensor directory equals the model's layer layout
 * (names, types, shapes, offsets, sizes). Returns 0 or -1 (NTX_EMISMATCH). */
int ntx_pack_check_model(const struct ntx_pack *p, const struct ntx_model *m,
			 struct ntx_err *err);

/* Decode an extent read from the file: stored holds at least data_size bytes
 * of it (a stored_size buffer), raw receives raw_size bytes. With verify,
 * the checksum is checked first (error NTX_EFORMAT naming the layer). For an
 * uncompressed extent raw may equal stored (then it only checks); otherwise
 * the buffers must not overlap. Decoding never reads or writes outside the
 * two buffers, whatever the stored bytes are. Thread-safe. Returns 0 or -1. */
int ntx_pack_decode_extent(const struct ntx_pack *p, const struct ntx_pack_extent *e,
			   const void *stored, void *raw, int verify, struct ntx_err *err);

/* The same work in independent parts, so that several threads can share
 * one extent: part 0 checks the checksum (only with verify), part 1 + i
 * decodes frame i (or, uncompressed, copies when raw != stored). Parts may
 * run in any order and at once; the extent is decoded when every part has
 * returned 0. ntx_pack_decode_parts() is the number of parts (>= 1). */
int ntx_pack_decode_parts(const struct ntx_pack_extent *e);
int ntx_pack_decode_part(const struct ntx_pack *p, const struct ntx_pack_extent *e,
			 const void *stored, void *raw, int part, int verify,
			 struct ntx_err *err);

/* XXH64 of an extent's stored data (data_size bytes). */
uint64_t ntx_pack_checksum(const void *stored, uint64_t data_size);

/* Byte-plane split and merge of n bytes (n a multiple of w, w = 2 or 4):
 * split writes plane k (byte k of every element) at dst + k * n / w; merge
 * is the inverse. src and dst must not overlap. */
void ntx_pack_planes_split(const void *src, void *dst, size_t n, int w);
void ntx_pack_planes_merge(const void *src, void *dst, size_t n, int w);

/* Progress: done of total bytes (the writer, the verifier). */
typedef void (*ntx_pack_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* ---- the writer (pack_write.c) ---- */

struct ntx_pack_write_opts {
	uint32_t compression;      /* enum ntx_pack_comp (default none) */
	double min_saving;         /* zstd: a frame is stored compressed only when
				    * that saves at least this fraction of it
				    * (default 0: any saving); an extent none of
				    * whose frames is compressed is stored as
				    * compression none (usable in place) */
	int level;                 /* zstd level (default 1) */
	int split;                 /* zstd: byte-plane split of F16/BF16 (2-byte)
				    * and F32 (4-byte) extents first (default 1) */
	int threads;               /* preparing threads (0 = online CPUs) */
	uint32_t frame_size;       /* raw bytes per frame (0 = NTX_PACK_FRAME_DEFAULT) */
	uint32_t alignment;        /* 0 = NTX_PACK_ALIGN */
	const int *layers;         /* layers to pack, strictly increasing */
	int n_layers;
	ntx_pack_progress_fn progress; /* raw bytes done of total; may be NULL */
	void *progress_arg;
	volatile sig_atomic_t *cancel; /* when it becomes nonzero (a signal
				        * handler), stop with NTX_EINTR */
	int no_sync;               /* skip the fsyncs (tests only) */
};

void ntx_pack_write_opts_init(struct ntx_pack_write_opts *o);

struct ntx_pack_write_stats {
	uint64_t raw_bytes;        /* sum of raw extents */
	uint64_t stored_bytes;     /* sum of stored extents, padding included */
	uint64_t file_size;
	int n_extents;
	int n_compressed;          /* extents stored with zstd */
	double seconds;
};

/* Write a pack of the given layers of m to path: to a temporary file
 * "path.tmp.XXXXXX" in the same directory, fsync'd, then renamed over path;
 * on any failure (or cancel) the temporary is removed and path is left as it
 * was. Returns 0 or -1. stats may be NULL. */
int ntx_pack_write(const struct ntx_model *m, const char *path,
		   const struct ntx_pack_write_opts *o, struct ntx_pack_write_stats *stats,
		   struct ntx_err *err);

#endif
