/* pack.c - the pack file reader: header and directory validation and the
 * checks against a model and a plan (see pack.h and doc/pack-format.md).
 * Decoding extents is in pack_decode.c, the writer in pack_write.c,
 * streaming reads and verification in pack_read.c. */
#include "pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "hash.h"
#include "types.h"

/* ---- little-endian fields ---- */

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

const char *ntx_pack_comp_name(uint32_t c)
{
	return c == NTX_PACK_COMP_NONE ? "none" : c == NTX_PACK_COMP_ZSTD ? "zstd" : "?";
}

const char *ntx_pack_xform_name(uint32_t x)
{
	return x == NTX_PACK_XFORM_NONE     ? "none"
	       : x == NTX_PACK_XFORM_SPLIT2 ? "split2"
	       : x == NTX_PACK_XFORM_SPLIT4 ? "split4"
					    : "?";
}

int ntx_pack_is_pack(const void *buf, size_t len)
{
	return len >= NTX_PACK_MAGIC_LEN && memcmp(buf, NTX_PACK_MAGIC, NTX_PACK_MAGIC_LEN) == 0;
}

int ntx_pack_file_is_pack(const char *path)
{
	unsigned char h[NTX_PACK_MAGIC_LEN];
	FILE *f = fopen(path, "rb");
	int yes;

	if (!f)
		return 0;
	yes = fread(h, 1, sizeof h, f) == sizeof h && ntx_pack_is_pack(h, sizeof h);
	fclose(f);
	return yes;
}

/* ---- header ---- */

static int parse_header(struct ntx_pack *p, const unsigned char *h, struct ntx_err *err)
{
	uint32_t header_size, flags;
	uint64_t dir_offset, file_size_hdr, want, sum;
	uint32_t n_extents;
	int i;

	if (!ntx_pack_is_pack(h, NTX_PACK_MAGIC_LEN))
		return ntx_err_set(err, NTX_EFORMAT, "not a pack file (no NTXPACK magic)");
	sum = ntx_hash64(h, 120, 0);
	if (rd64(h + 120) != sum)
		return ntx_err_set(err, NTX_EFORMAT,
				   "pack header checksum mismatch: header has %016" PRIx64
				   ", bytes hash to %016" PRIx64 " (pack file corrupted)",
				   rd64(h + 120), sum);
	p->version = rd32(h + 8);
	if (p->version != NTX_PACK_VERSION)
		return ntx_err_set(err, NTX_EUNSUP, "pack version %u is not supported (only %d)",
				   p->version, NTX_PACK_VERSION);
	header_size = rd32(h + 12);
	if (header_size != NTX_PACK_HEADER_SIZE)
		return ntx_err_set(err, NTX_EFORMAT, "header size %u is not %d", header_size,
				   NTX_PACK_HEADER_SIZE);
	p->alignment = rd32(h + 16);
	if (p->alignment < NTX_PACK_ALIGN_MIN || p->alignment > NTX_PACK_ALIGN_MAX ||
	    (p->alignment & (p->alignment - 1)))
		return ntx_err_set(err, NTX_EFORMAT,
				   "alignment %u is not a power of two in [%u, %u]", p->alignment,
				   NTX_PACK_ALIGN_MIN, NTX_PACK_ALIGN_MAX);
	p->tensor_align = rd32(h + 20);
	if (p->tensor_align != NTX_LAYER_ALIGN)
		return ntx_err_set(err, NTX_EUNSUP, "tensor alignment %u is not %d",
				   p->tensor_align, NTX_LAYER_ALIGN);
	if (rd32(h + 24) < 1 || rd32(h + 24) > NTX_PACK_MAX_LAYERS)
		return ntx_err_set(err, NTX_EFORMAT, "layer count %u is not in [1, %d]",
				   rd32(h + 24), NTX_PACK_MAX_LAYERS);
	p->n_layer = (int)rd32(h + 24);
	n_extents = rd32(h + 28);
	if (n_extents > (uint32_t)p->n_layer)
		return ntx_err_set(err, NTX_EFORMAT, "extent count %u exceeds the layer count %d",
				   n_extents, p->n_layer);
	p->n_extents = (int)n_extents;
	p->gguf_fingerprint = rd64(h + 32);
	snprintf(p->fingerprint_hex, sizeof p->fingerprint_hex, "%016" PRIx64,
		 p->gguf_fingerprint);
	p->gguf_size = rd64(h + 40);
	dir_offset = rd64(h + 48);
	if (dir_offset != NTX_PACK_HEADER_SIZE)
		return ntx_err_set(err, NTX_EFORMAT, "directory offset %" PRIu64 " is not %d",
				   dir_offset, NTX_PACK_HEADER_SIZE);
	p->dir_size = rd64(h + 56);
	/* at least one tensor record per extent (a layer has 9 to NTX_LAYER_NT) */
	want = (uint64_t)n_extents * (NTX_PACK_EXTENT_REC + NTX_PACK_TENSOR_REC);
	if (p->dir_size > NTX_PACK_MAX_DIR || p->dir_size < want)
		return ntx_err_set(err, NTX_EFORMAT,
				   "directory size %" PRIu64 " is not in [%" PRIu64 ", %llu] for %u extents",
				   p->dir_size, want, NTX_PACK_MAX_DIR, n_extents);
	if (p->dir_size > p->file_size - NTX_PACK_HEADER_SIZE)
		return ntx_err_set(err, NTX_EFORMAT,
				   "pack file truncated: directory of %" PRIu64
				   " bytes at offset %d exceeds file size %" PRIu64,
				   p->dir_size, NTX_PACK_HEADER_SIZE, p->file_size);
	p->data_offset = rd64(h + 64);
	want = NTX_PACK_HEADER_SIZE + p->dir_size;
	if (p->data_offset < want || p->data_offset % p->alignment)
		return ntx_err_set(err, NTX_EFORMAT,
				   "data offset %" PRIu64 " is not a multiple of the alignment %u at or"
				   " after the end of the directory (%" PRIu64 ")",
				   p->data_offset, p->alignment, want);
	file_size_hdr = rd64(h + 72);
	if (file_size_hdr > p->file_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "pack file truncated: header says %" PRIu64 " bytes, file has %" PRIu64,
				   file_size_hdr, p->file_size);
	if (file_size_hdr < p->file_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "pack file has %" PRIu64 " bytes after its end at %" PRIu64,
				   p->file_size - file_size_hdr, file_size_hdr);
	if (p->data_offset > p->file_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "data offset %" PRIu64 " exceeds file size %" PRIu64,
				   p->data_offset, p->file_size);
	p->frame_size = rd32(h + 80);
	if (p->frame_size &&
	    (p->frame_size % NTX_PACK_ALIGN || p->frame_size > NTX_PACK_FRAME_MAX))
		return ntx_err_set(err, NTX_EFORMAT,
				   "frame size %u is not a multiple of %u in [%u, %u]", p->frame_size,
				   NTX_PACK_ALIGN, NTX_PACK_ALIGN, NTX_PACK_FRAME_MAX);
	flags = rd32(h + 84);
	if (flags)
		return ntx_err_set(err, NTX_EUNSUP, "unknown header flags 0x%x", flags);
	for (i = 88; i < 112; i++)
		if (h[i])
			return ntx_err_set(err, NTX_EFORMAT, "reserved header byte %d is %u, not 0",
					   i, h[i]);
	return 0;
}

/* ---- directory ---- */

/* Validate a tensor record and return its byte size; *off is the layout
 * offset it must have and is advanced. */
static int parse_tensor(const unsigned char *r, int x, int k, uint64_t *off,
			struct ntx_pack_tensor *t, struct ntx_err *err)
{
	const struct ntx_type_info *ti;
	uint64_t row, n, v;
	size_t nl;
	int d;

	memcpy(t->name, r, NTX_PACK_NAME_MAX);
	nl = strnlen(t->name, NTX_PACK_NAME_MAX);
	if (nl == 0 || nl == NTX_PACK_NAME_MAX)
		return ntx_err_set(err, NTX_EFORMAT,
				   "extent %d tensor %d: name is %s", x, k,
				   nl ? "not NUL-terminated within 64 bytes" : "empty");
	for (d = (int)nl; d < NTX_PACK_NAME_MAX; d++)
		if (t->name[d])
			return ntx_err_set(err, NTX_EFORMAT,
					   "extent %d tensor %d: name padding byte %d is not 0", x, k, d);
	t->type = rd32(r + 64);
	ti = ntx_type_get(t->type);
	if (!ti || ti->block_size <= 0 || ti->type_size <= 0)
		return ntx_err_set(err, NTX_EFORMAT, "tensor '%s': unknown type %u", t->name,
				   t->type);
	t->n_dims = rd32(r + 68);
	if (t->n_dims < 1 || t->n_dims > 4)
		return ntx_err_set(err, NTX_EFORMAT, "tensor '%s': %u dimensions, not 1 to 4",
				   t->name, t->n_dims);
	for (d = 0; d < 4; d++) {
		t->ne[d] = (int64_t)rd64(r + 72 + 8 * d);
		if (t->ne[d] < 1 || t->ne[d] > (1ll << 40) || ((uint32_t)d >= t->n_dims && t->ne[d] != 1))
			return ntx_err_set(err, NTX_EFORMAT,
					   "tensor '%s': dimension %d is %" PRId64
					   " (must be 1 to 2^40, and 1 beyond n_dims %u)",
					   t->name, d, t->ne[d], t->n_dims);
	}
	if (ntx_type_row_bytes(t->type, t->ne[0], &row, err) != 0) {
		ntx_err_prefix(err, "tensor '%s'", t->name);
		err->code = NTX_EFORMAT;
		return -1;
	}
	n = row;
	for (d = 1; d < 4; d++)
		if (__builtin_mul_overflow(n, (uint64_t)t->ne[d], &n) || n > (1ull << 48))
			return ntx_err_set(err, NTX_EFORMAT, "tensor '%s': byte size overflows 2^48",
					   t->name);
	t->nbytes = rd64(r + 112);
	if (t->nbytes != n)
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor '%s': %" PRIu64 " bytes, but its shape and type make %" PRIu64,
				   t->name, t->nbytes, n);
	t->offset = rd64(r + 104);
	if (t->offset != *off)
		return ntx_err_set(err, NTX_EFORMAT,
				   "tensor '%s': offset %" PRIu64 " in the layer, expected %" PRIu64
				   " (the layout of %d-byte aligned tensors)",
				   t->name, t->offset, *off, NTX_LAYER_ALIGN);
	v = align_up(n, NTX_LAYER_ALIGN);
	if (*off + v > (1ull << 48))
		return ntx_err_set(err, NTX_EFORMAT, "extent %d: layer size overflows 2^48", x);
	*off += v;
	return 0;
}

static int parse_frames(struct ntx_pack *p, struct ntx_pack_extent *e, const unsigned char *r,
			struct ntx_pack_frame *f, struct ntx_err *err)
{
	uint64_t stored = 0, raw = 0;
	int i;

	for (i = 0; i < e->n_frames; i++, r += NTX_PACK_FRAME_REC) {
		uint64_t left = e->raw_size - raw;

		f[i].raw_off = raw;
		f[i].raw_len = (uint32_t)(left < p->frame_size ? left : p->frame_size);
		f[i].stored_off = stored;
		f[i].stored_len = rd32(r);
		f[i].kind = rd32(r + 4);
		if (f[i].kind > NTX_PACK_FRAME_RAW)
			return ntx_err_set(err, NTX_EFORMAT, "layer %d frame %d: unknown kind %u",
					   e->layer, i, f[i].kind);
		if (f[i].kind == NTX_PACK_FRAME_RAW ? f[i].stored_len != f[i].raw_len
						    : f[i].stored_len < 1 || f[i].stored_len >= f[i].raw_len)
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d frame %d: %s frame of %u stored bytes for %u raw "
					   "(raw frames store exactly the raw bytes, zstd frames 1 to raw - 1)",
					   e->layer, i, f[i].kind ? "raw" : "zstd", f[i].stored_len, f[i].raw_len);
		if (e->transform != NTX_PACK_XFORM_NONE && f[i].raw_len % 4)
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d frame %d: %u raw bytes is not a multiple of 4",
					   e->layer, i, f[i].raw_len);
		stored += f[i].stored_len;
		raw += f[i].raw_len;
	}
	if (stored != e->data_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "layer %d: frames store %" PRIu64 " bytes, the extent %" PRIu64,
				   e->layer, stored, e->data_size);
	return 0;
}

/* Pass 1 over the directory: each extent record's size (from its tensor
 * and frame counts) within the directory, which they fill exactly. */
static int count_dir_records(const struct ntx_pack *p, const unsigned char *dir,
			     uint64_t *total_frames, struct ntx_err *err)
{
	uint64_t pos = 0;
	int x;

	for (x = 0; x < p->n_extents; x++) {
		const unsigned char *r;
		uint32_t nt, nf;
		uint64_t need;

		if (p->dir_size - pos < NTX_PACK_EXTENT_REC)
			return ntx_err_set(err, NTX_EFORMAT,
					   "directory ends inside extent record %d (offset %" PRIu64
					   " of %" PRIu64 ")", x, pos, p->dir_size);
		r = dir + pos;
		nt = rd32(r + 4);
		nf = rd32(r + 56);
		if (nt < 1 || nt > NTX_LAYER_NT)
			return ntx_err_set(err, NTX_EFORMAT, "extent %d: %u tensors, not in [1, %d]",
					   x, nt, NTX_LAYER_NT);
		need = NTX_PACK_EXTENT_REC + (uint64_t)nt * NTX_PACK_TENSOR_REC +
		       (uint64_t)nf * NTX_PACK_FRAME_REC;
		if (need > p->dir_size - pos)
			return ntx_err_set(err, NTX_EFORMAT,
					   "extent %d: %u tensor and %u frame records need %" PRIu64
					   " bytes, the directory has %" PRIu64 " left",
					   x, nt, nf, need, p->dir_size - pos);
		pos += need;
		*total_frames += nf;
	}
	if (pos != p->dir_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "directory has %" PRIu64 " bytes after its last record (size %" PRIu64 ")",
				   p->dir_size - pos, p->dir_size);
	return 0;
}

/* Extent record r (extent x): its layer after *prev_layer, at *expect_off
 * (then moved past it), sizes that fit the file. */
static int parse_extent_head(const struct ntx_pack *p, struct ntx_pack_extent *e,
			     const unsigned char *r, int x, int *prev_layer,
			     uint64_t *expect_off, struct ntx_err *err)
{
	uint32_t layer = rd32(r);
	uint64_t want;

	if (layer >= (uint32_t)p->n_layer || (int)layer <= *prev_layer)
		return ntx_err_set(err, NTX_EFORMAT,
				   "extent %d: layer %u is not in (%d, %d) (extents are in "
				   "increasing layer order)",
				   x, layer, *prev_layer, p->n_layer);
	e->layer = *prev_layer = (int)layer;
	e->n_tensors = (int)rd32(r + 4); /* checked by count_dir_records */
	e->offset = rd64(r + 8);
	e->stored_size = rd64(r + 16);
	e->data_size = rd64(r + 24);
	e->raw_size = rd64(r + 32);
	e->compression = rd32(r + 40);
	e->transform = rd32(r + 44);
	e->checksum = rd64(r + 48);
	e->n_frames = (int)rd32(r + 56);
	if (rd32(r + 60))
		return ntx_err_set(err, NTX_EFORMAT, "layer %d: reserved field is %u, not 0",
				   e->layer, rd32(r + 60));
	if (e->offset != *expect_off || e->offset % p->alignment)
		return ntx_err_set(err, NTX_EFORMAT,
				   "layer %d: extent offset %" PRIu64 ", expected %" PRIu64
				   " (extents are contiguous from the data offset, aligned to %u)",
				   e->layer, e->offset, *expect_off, p->alignment);
	if (e->data_size < 1 || e->data_size > p->file_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "layer %d: data size %" PRIu64 " is not in [1, file size %" PRIu64 "]",
				   e->layer, e->data_size, p->file_size);
	want = align_up(e->data_size, p->alignment);
	if (e->stored_size != want)
		return ntx_err_set(err, NTX_EFORMAT,
				   "layer %d: stored size %" PRIu64 " is not the data size %" PRIu64
				   " padded to %u (%" PRIu64 ")",
				   e->layer, e->stored_size, e->data_size, p->alignment, want);
	if (e->stored_size > p->file_size - e->offset)
		return ntx_err_set(err, NTX_EFORMAT,
				   "pack file truncated: extent of layer %d at offset %" PRIu64
				   " needs %" PRIu64 " bytes, file has %" PRIu64,
				   e->layer, e->offset, e->stored_size, p->file_size);
	*expect_off = e->offset + e->stored_size;
	return 0;
}

/* The extent's coding: none (stored as is), or zstd frames whose records
 * (at frec) go to *fm, advanced past them. */
static int parse_extent_coding(struct ntx_pack *p, struct ntx_pack_extent *e,
			       const unsigned char *frec, struct ntx_pack_frame **fm,
			       struct ntx_err *err)
{
	uint64_t nf;

	if (e->compression == NTX_PACK_COMP_NONE) {
		if (e->transform != NTX_PACK_XFORM_NONE || e->n_frames != 0 ||
		    e->data_size != e->raw_size)
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d: uncompressed extent with transform %u, %d "
					   "frames, %" PRIu64 " data bytes for %" PRIu64 " raw "
					   "(must be none, 0, equal)",
					   e->layer, e->transform, e->n_frames, e->data_size,
					   e->raw_size);
		return 0;
	}
	if (e->compression != NTX_PACK_COMP_ZSTD)
		return ntx_err_set(err, NTX_EUNSUP, "layer %d: unknown compression %u",
				   e->layer, e->compression);
	if (e->transform > NTX_PACK_XFORM_SPLIT4)
		return ntx_err_set(err, NTX_EFORMAT, "layer %d: unknown transform %u",
				   e->layer, e->transform);
	if (!p->frame_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "layer %d: compressed, but the frame size is 0",
				   e->layer);
	nf = (e->raw_size + p->frame_size - 1) / p->frame_size;
	if ((uint64_t)e->n_frames != nf)
		return ntx_err_set(err, NTX_EFORMAT,
				   "layer %d: %d frames, but %" PRIu64 " raw bytes in "
				   "frames of %u make %" PRIu64,
				   e->layer, e->n_frames, e->raw_size, p->frame_size, nf);
	e->frames = *fm;
	if (parse_frames(p, e, frec, *fm, err))
		return -1;
	*fm += e->n_frames;
	return 0;
}

/* Parse and validate the directory (dir_size bytes, checksum already
 * checked). Counts and sizes are checked against dir_size before each
 * allocation; offsets against the file size. */
static int parse_dir(struct ntx_pack *p, const unsigned char *dir, struct ntx_err *err)
{
	uint64_t pos = 0, total_frames = 0, expect_off = p->data_offset;
	int x, prev_layer = -1;
	struct ntx_pack_tensor *tm;
	struct ntx_pack_frame *fm;

	/* pass 1: record boundaries and counts */
	if (count_dir_records(p, dir, &total_frames, err))
		return -1;

	p->extents = calloc((size_t)p->n_extents + 1, sizeof *p->extents);
	p->tensor_mem = calloc((size_t)p->n_extents * NTX_LAYER_NT + 1, sizeof *p->tensor_mem);
	p->frame_mem = calloc((size_t)total_frames + 1, sizeof *p->frame_mem);
	p->by_layer = malloc((size_t)p->n_layer * sizeof *p->by_layer);
	if (!p->extents || !p->tensor_mem || !p->frame_mem || !p->by_layer)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for the pack directory");
	for (x = 0; x < p->n_layer; x++)
		p->by_layer[x] = -1;

	/* pass 2: every field */
	tm = p->tensor_mem;
	fm = p->frame_mem;
	for (x = 0; x < p->n_extents; x++) {
		struct ntx_pack_extent *e = &p->extents[x];
		const unsigned char *r = dir + pos;
		uint64_t off = 0;
		int k;

		if (parse_extent_head(p, e, r, x, &prev_layer, &expect_off, err))
			return -1;
		e->tensors = tm;
		for (k = 0; k < e->n_tensors; k++)
			if (parse_tensor(r + NTX_PACK_EXTENT_REC + k * NTX_PACK_TENSOR_REC, x, k, &off,
					 tm++, err))
				return -1;
		if (e->raw_size != off)
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d: raw size %" PRIu64 ", its tensors make %" PRIu64,
					   e->layer, e->raw_size, off);
		if (parse_extent_coding(p, e, r + NTX_PACK_EXTENT_REC +
						      (uint64_t)e->n_tensors * NTX_PACK_TENSOR_REC,
					&fm, err))
			return -1;
		p->by_layer[e->layer] = x;
		p->raw_bytes += e->raw_size;
		if (e->stored_size > p->max_stored)
			p->max_stored = e->stored_size;
		if (e->raw_size > p->max_raw)
			p->max_raw = e->raw_size;
		pos += NTX_PACK_EXTENT_REC + (uint64_t)e->n_tensors * NTX_PACK_TENSOR_REC +
		       (uint64_t)e->n_frames * NTX_PACK_FRAME_REC;
	}
	if (expect_off != p->file_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "extents end at %" PRIu64 ", the file at %" PRIu64, expect_off,
				   p->file_size);
	return 0;
}

/* ---- open / close ---- */

static struct ntx_pack *pack_new(const char *path, uint64_t size, struct ntx_err *err)
{
	struct ntx_pack *p = calloc(1, sizeof *p);

	if (!p || !(p->path = strdup(path))) {
		free(p);
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	p->fd = -1;
	p->file_size = size;
	return p;
}

/* Header and directory from memory or file: get(ctx, off, len, dst). */
static struct ntx_pack *pack_load(struct ntx_pack *p,
				  int (*get)(void *ctx, uint64_t off, size_t len, void *dst,
					     struct ntx_err *err),
				  void *ctx, struct ntx_err *err)
{
	unsigned char h[NTX_PACK_HEADER_SIZE];
	unsigned char *dir = NULL;
	uint64_t sum;

	if (p->file_size < NTX_PACK_HEADER_SIZE) {
		int magic = p->file_size >= NTX_PACK_MAGIC_LEN &&
			    get(ctx, 0, NTX_PACK_MAGIC_LEN, h, err) == 0 &&
			    ntx_pack_is_pack(h, NTX_PACK_MAGIC_LEN);

		if (magic)
			ntx_err_set(err, NTX_EFORMAT,
				    "pack file truncated: header needs %d bytes, file has %" PRIu64,
				    NTX_PACK_HEADER_SIZE, p->file_size);
		else
			ntx_err_set(err, NTX_EFORMAT, "not a pack file (%" PRIu64 " bytes)",
				    p->file_size);
		goto fail;
	}
	if (get(ctx, 0, NTX_PACK_HEADER_SIZE, h, err) || parse_header(p, h, err))
		goto fail;
	dir = malloc(p->dir_size ? p->dir_size : 1);
	if (!dir) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory for a %" PRIu64 "-byte directory",
			    p->dir_size);
		goto fail;
	}
	if (get(ctx, NTX_PACK_HEADER_SIZE, p->dir_size, dir, err))
		goto fail;
	sum = ntx_hash64(dir, p->dir_size, 0);
	if (sum != rd64(h + 112)) {
		ntx_err_set(err, NTX_EFORMAT,
			    "pack directory checksum mismatch: header says %016" PRIx64
			    ", directory hashes to %016" PRIx64 " (pack file corrupted)",
			    rd64(h + 112), sum);
		goto fail;
	}
	if (parse_dir(p, dir, err))
		goto fail;
	free(dir);
	return p;
fail:
	free(dir);
	ntx_pack_close(p);
	return NULL;
}

struct membuf {
	const unsigned char *b;
	size_t len;
};

static int mem_get(void *ctx, uint64_t off, size_t len, void *dst, struct ntx_err *err)
{
	struct membuf *m = ctx;

	if (off > m->len || len > m->len - off)
		return ntx_err_set(err, NTX_EFORMAT, "read past the end");
	memcpy(dst, m->b + off, len);
	return 0;
}

static int fd_get(void *ctx, uint64_t off, size_t len, void *dst, struct ntx_err *err)
{
	int fd = *(int *)ctx;
	size_t done = 0;

	while (done < len) {
		ssize_t r = pread(fd, (char *)dst + done, len - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ntx_err_errno(err, errno, "read at offset %" PRIu64, off + done);
		if (r == 0)
			return ntx_err_set(err, NTX_EFORMAT,
					   "pack file truncated while reading its header (offset %" PRIu64 ")",
					   off + done);
		done += (size_t)r;
	}
	return 0;
}

struct ntx_pack *ntx_pack_open(const char *path, struct ntx_err *err)
{
	struct ntx_pack *p;
	uint64_t size;
	int fd;

	ntx_err_clear(err);
	fd = ntx_open_regular(path, &size, err);
	if (fd < 0)
		return NULL;
	p = pack_new(path, size, err);
	if (!p) {
		close(fd);
		return NULL;
	}
	p->fd = fd;
	return pack_load(p, fd_get, &p->fd, err);
}

struct ntx_pack *ntx_pack_open_buffer(const void *buf, size_t len, struct ntx_err *err)
{
	struct membuf m = { buf, len };
	struct ntx_pack *p;

	ntx_err_clear(err);
	p = pack_new("<buffer>", len, err);
	return p ? pack_load(p, mem_get, &m, err) : NULL;
}

void ntx_pack_close(struct ntx_pack *p)
{
	if (!p)
		return;
	if (p->fd >= 0)
		close(p->fd);
	free(p->path);
	free(p->extents);
	free(p->tensor_mem);
	free(p->frame_mem);
	free(p->by_layer);
	free(p);
}

const struct ntx_pack_extent *ntx_pack_extent_for_layer(const struct ntx_pack *p, int layer)
{
	if (!p || layer < 0 || layer >= p->n_layer || p->by_layer[layer] < 0)
		return NULL;
	return &p->extents[p->by_layer[layer]];
}

/* ---- checks against a model ---- */

int ntx_pack_check_model(const struct ntx_pack *p, const struct ntx_model *m,
			 struct ntx_err *err)
{
	int x, k, j;

	if (p->gguf_fingerprint != m->fingerprint)
		return ntx_err_set(err, NTX_EMISMATCH,
				   "the pack was made from another model: fingerprint %s, but %s has %s",
				   p->fingerprint_hex, m->gguf->path ? m->gguf->path : "the model",
				   m->fingerprint_hex);
	if (p->gguf_size != m->gguf->file_size)
		return ntx_err_set(err, NTX_EMISMATCH,
				   "the pack was made from a GGUF of %" PRIu64 " bytes, the model has %" PRIu64,
				   p->gguf_size, m->gguf->file_size);
	if (p->n_layer != m->cfg.n_layer || !m->layers)
		return ntx_err_set(err, NTX_EMISMATCH,
				   "the pack was made for %d layers, the model has %d", p->n_layer,
				   m->cfg.n_layer);
	for (x = 0; x < p->n_extents; x++) {
		const struct ntx_pack_extent *e = &p->extents[x];
		const struct ntx_layer_tensors *lt = &m->layers[e->layer];
		struct ntx_layer_layout lo;

		ntx_layer_layout(lt, &lo);
		if (e->n_tensors != ntx_layer_n_tensors(lt))
			return ntx_err_set(err, NTX_EMISMATCH,
					   "layer %d: the pack has %d tensors, the model's layer %d",
					   e->layer, e->n_tensors, ntx_layer_n_tensors(lt));
		for (k = 0, j = 0; k < NTX_LAYER_NT; k++) {
			const struct ntx_gguf_tensor *t = ntx_layer_tensor(lt, k);
			const struct ntx_pack_tensor *pt;
			int d, same;

			if (!t)
				continue;
			pt = &e->tensors[j++];
			same = strcmp(t->name, pt->name) == 0 && t->type == pt->type &&
				      t->nbytes == pt->nbytes && pt->offset == lo.offset[k];

			for (d = 0; d < 4; d++)
				same = same && t->ne[d] == pt->ne[d];
			if (!same)
				return ntx_err_set(err, NTX_EMISMATCH,
						   "layer %d tensor %d: the pack has '%s' %s [%" PRId64
						   ", %" PRId64 "] at %" PRIu64 ", the model '%s' %s [%" PRId64
						   ", %" PRId64 "] at %" PRIu64,
						   e->layer, k, pt->name, ntx_type_name(pt->type), pt->ne[0],
						   pt->ne[1], pt->offset, t->name, ntx_type_name(t->type),
						   t->ne[0], t->ne[1], lo.offset[k]);
		}
		if (e->raw_size != lo.total)
			return ntx_err_set(err, NTX_EMISMATCH,
					   "layer %d: the pack extent decodes to %" PRIu64
					   " bytes, the model's layer has %" PRIu64,
					   e->layer, e->raw_size, lo.total);
	}
	return 0;
}
