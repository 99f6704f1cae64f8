/* pack_write.c - the pack file writer (see pack.h, doc/pack-format.md).
 *
 * The extents are cut into items (a frame of frame_size raw bytes when
 * compressing, 8 MiB pieces otherwise). Items are prepared in batches by a
 * few threads (copy the layer's bytes out of the GGUF map in the layout of
 * layout.h, split byte planes, zstd) while the calling thread writes the
 * previous batch, in order, with large pwrite()s, and hashes what it writes.
 * The directory, known only at the end, goes last into the space reserved
 * for it before the first extent; then fsync, then rename. */
#include "pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "clock.h"
#include "hash.h"
#include "types.h"

#define PIECE (8u << 20) /* item size of uncompressed extents */

/* ---- little-endian fields ---- */

static void wr32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static void wr64(unsigned char *p, uint64_t v)
{
	wr32(p, (uint32_t)v);
	wr32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

void ntx_pack_write_opts_init(struct ntx_pack_write_opts *o)
{
	memset(o, 0, sizeof *o);
	o->compression = NTX_PACK_COMP_NONE;
	o->min_saving = 0.0;
	o->level = 1;
	o->split = 1;
}

/* ---- plan of the file ---- */

struct xfr {              /* a frame record being filled */
	uint32_t stored_len, kind;
};

struct ext {
	int layer;
	const struct ntx_layer_tensors *lt;
	struct ntx_layer_layout lo;
	uint32_t compression, transform;
	int n_items;          /* items the extent is cut into */
	uint32_t item_size;
	struct xfr *frames;   /* n_items when compressed */
	int n_zstd;           /* frames stored as zstd */
	uint64_t offset, data_size, stored_size, checksum;
	struct ntx_hash h;
};

/* Copy bytes [a, a + n) of layer lt in layout lo into dst (padding zero). */
static void copy_range(const struct ntx_layer_tensors *lt, const struct ntx_layer_layout *lo,
		       uint64_t a, size_t n, unsigned char *dst)
{
	uint64_t b = a + n;
	int k;

	for (k = 0; k < NTX_LAYER_NT && a < b; k++) {
		const struct ntx_gguf_tensor *t = ntx_layer_tensor(lt, k);
		uint64_t t0 = lo->offset[k], t1 = t0 + (t ? t->nbytes : 0);
		uint64_t end = k + 1 < NTX_LAYER_NT ? lo->offset[k + 1] : lo->total;

		if (a >= end)
			continue;
		if (a < t1) {
			uint64_t m = (b < t1 ? b : t1) - a;

			memcpy(dst, (const unsigned char *)t->data + (a - t0), (size_t)m);
			dst += m;
			a += m;
		}
		if (a < b && a < end) {
			uint64_t m = (b < end ? b : end) - a;

			memset(dst, 0, (size_t)m);
			dst += m;
			a += m;
		}
	}
}

/* Byte-plane split for an extent: by the element width of most of its
 * bytes (F16/BF16: 2, F32: 4); none for quantized layers. */
static uint32_t pick_transform(const struct ntx_layer_tensors *lt)
{
	uint64_t w2 = 0, w4 = 0, all = 0;
	int k;

	for (k = 0; k < NTX_LAYER_NT; k++) {
		const struct ntx_gguf_tensor *t = ntx_layer_tensor(lt, k);

		if (!t)
			continue;
		all += t->nbytes;
		if (t->type == NTX_TYPE_F16 || t->type == NTX_TYPE_BF16)
			w2 += t->nbytes;
		else if (t->type == NTX_TYPE_F32)
			w4 += t->nbytes;
	}
	if (w2 * 2 >= all)
		return NTX_PACK_XFORM_SPLIT2;
	if (w4 * 2 >= all)
		return NTX_PACK_XFORM_SPLIT4;
	return NTX_PACK_XFORM_NONE;
}

/* ---- items and the worker threads ---- */

struct item {
	struct ext *e;
	int index;            /* within the extent */
	uint64_t raw_off;
	uint32_t raw_len;
	unsigned char *raw;   /* slot buffer: the layer bytes */
	unsigned char *out;   /* slot buffer: zstd output (compressed only) */
	size_t out_len;       /* 0: store raw */
	int failed;
	char msg[160];
};

struct batch {
	struct item *items;
	int n;
	int next;             /* atomic: next item to take */
	pthread_t *th;
	int n_th;
};

struct writer {
	const struct ntx_pack_write_opts *o;
	int threads;
	uint32_t frame_size;
	size_t out_cap;       /* ZSTD_compressBound(frame_size) */
	ZSTD_CCtx **cctx;     /* one per thread */
	unsigned char **scratch; /* one per thread: split planes */
	struct batch b[2];
	int fd;
	char *tmp;
};

struct worker_arg {
	struct writer *w;
	struct batch *b;
	int id;
};

static void prepare(struct writer *w, int id, struct item *it)
{
	struct ext *e = it->e;
	size_t r;

	copy_range(e->lt, &e->lo, it->raw_off, it->raw_len, it->raw);
	it->out_len = 0;
	if (e->compression != NTX_PACK_COMP_ZSTD)
		return;
	{
		const unsigned char *src = it->raw;
		double keep = 1.0 - w->o->min_saving;

		if (e->transform != NTX_PACK_XFORM_NONE) {
			ntx_pack_planes_split(it->raw, w->scratch[id], it->raw_len,
					      e->transform == NTX_PACK_XFORM_SPLIT2 ? 2 : 4);
			src = w->scratch[id];
		}
		r = ZSTD_compressCCtx(w->cctx[id], it->out, w->out_cap, src, it->raw_len,
				      w->o->level);
		if (ZSTD_isError(r)) {
			it->failed = 1;
			snprintf(it->msg, sizeof it->msg, "layer %d frame %d: zstd: %s", e->layer,
				 it->index, ZSTD_getErrorName(r));
			return;
		}
		/* a zstd frame must save at least min_saving (and one byte) */
		if (r < it->raw_len && (double)r <= keep * (double)it->raw_len)
			it->out_len = r;
	}
}

static void *worker(void *arg)
{
	struct worker_arg *a = arg;
	struct batch *b = a->b;

	for (;;) {
		int i = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);

		if (i >= b->n)
			break;
		if (a->w->o->cancel && *a->w->o->cancel)
			continue;
		prepare(a->w, a->id, &b->items[i]);
	}
	free(a);
	return NULL;
}

static int batch_start(struct writer *w, struct batch *b, struct ntx_err *err)
{
	int i;

	b->next = 0;
	b->n_th = 0;
	for (i = 0; i < w->threads && i < b->n; i++) {
		struct worker_arg *a = malloc(sizeof *a);
		int rc;

		if (!a)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		a->w = w;
		a->b = b;
		a->id = i; /* one batch is prepared at a time */
		rc = pthread_create(&b->th[i], NULL, worker, a);
		if (rc) {
			free(a);
			return ntx_err_errno(err, rc, "creating a compression thread");
		}
		b->n_th++;
	}
	return 0;
}

static void batch_join(struct batch *b)
{
	int i;

	for (i = 0; i < b->n_th; i++)
		pthread_join(b->th[i], NULL);
	b->n_th = 0;
}

/* ---- output ---- */

static int write_all(int fd, const void *buf, size_t n, uint64_t off, struct ntx_err *err)
{
	const char *p = buf;

	while (n) {
		ssize_t r = pwrite(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ntx_err_errno(err, errno, "write of %zu bytes at offset %" PRIu64, n,
					     off);
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static const unsigned char zeros[NTX_PACK_ALIGN_MAX];

/* Write a prepared batch in order; finish extents whose last item it holds. */
static int batch_write(struct writer *w, struct batch *b, uint64_t *pos, struct ntx_err *err)
{
	int i;

	for (i = 0; i < b->n; i++) {
		struct item *it = &b->items[i];
		struct ext *e = it->e;
		const unsigned char *data = it->out_len ? it->out : it->raw;
		size_t n = it->out_len ? it->out_len : it->raw_len;

		if (it->failed)
			return ntx_err_set(err, NTX_EIO, "%s", it->msg);
		if (it->index == 0) {
			e->offset = *pos;
			e->data_size = 0;
			ntx_hash_init(&e->h, 0);
		}
		if (write_all(w->fd, data, n, *pos, err))
			return -1;
		ntx_hash_update(&e->h, data, n);
		*pos += n;
		e->data_size += n;
		if (e->frames) {
			e->frames[it->index].stored_len = (uint32_t)n;
			e->frames[it->index].kind = it->out_len ? NTX_PACK_FRAME_ZSTD : NTX_PACK_FRAME_RAW;
			e->n_zstd += it->out_len != 0;
		}
		if (it->index == e->n_items - 1) {
			uint64_t pad;

			e->checksum = ntx_hash_final(&e->h);
			e->stored_size = align_up(e->data_size, w->o->alignment);
			pad = e->stored_size - e->data_size;
			if (pad && write_all(w->fd, zeros, (size_t)pad, *pos, err))
				return -1;
			*pos += pad;
			/* every frame stored as is: the data is the layer itself */
			if (e->frames && e->n_zstd == 0) {
				e->compression = NTX_PACK_COMP_NONE;
				e->transform = NTX_PACK_XFORM_NONE;
			}
		}
	}
	return 0;
}

/* Header and directory, into buf (data_offset bytes, zeroed). */
static void build_head(const struct ntx_model *m, const struct ntx_pack_write_opts *o,
		       struct ext *ex, int n, uint64_t dir_size, uint64_t data_offset,
		       uint64_t file_size, uint32_t frame_size, unsigned char *buf)
{
	unsigned char *d = buf + NTX_PACK_HEADER_SIZE;
	int x, k;

	for (x = 0; x < n; x++) {
		struct ext *e = &ex[x];
		int nf = e->compression == NTX_PACK_COMP_ZSTD ? e->n_items : 0;

		wr32(d, (uint32_t)e->layer);
		wr32(d + 4, (uint32_t)ntx_layer_n_tensors(e->lt));
		wr64(d + 8, e->offset);
		wr64(d + 16, e->stored_size);
		wr64(d + 24, e->data_size);
		wr64(d + 32, e->lo.total);
		wr32(d + 40, e->compression);
		wr32(d + 44, e->transform);
		wr64(d + 48, e->checksum);
		wr32(d + 56, (uint32_t)nf);
		wr32(d + 60, 0);
		d += NTX_PACK_EXTENT_REC;
		for (k = 0; k < NTX_LAYER_NT; k++) {
			const struct ntx_gguf_tensor *t = ntx_layer_tensor(e->lt, k);
			int j;

			if (!t) /* absent optional slot: no record */
				continue;
			memset(d, 0, NTX_PACK_NAME_MAX);
			memcpy(d, t->name, strlen(t->name));
			wr32(d + 64, t->type);
			wr32(d + 68, t->n_dims);
			for (j = 0; j < 4; j++)
				wr64(d + 72 + 8 * j, (uint64_t)t->ne[j]);
			wr64(d + 104, e->lo.offset[k]);
			wr64(d + 112, t->nbytes);
			d += NTX_PACK_TENSOR_REC;
		}
		for (k = 0; k < nf; k++) {
			wr32(d, e->frames[k].stored_len);
			wr32(d + 4, e->frames[k].kind);
			d += NTX_PACK_FRAME_REC;
		}
	}
	memcpy(buf, NTX_PACK_MAGIC, NTX_PACK_MAGIC_LEN);
	wr32(buf + 8, NTX_PACK_VERSION);
	wr32(buf + 12, NTX_PACK_HEADER_SIZE);
	wr32(buf + 16, o->alignment);
	wr32(buf + 20, NTX_LAYER_ALIGN);
	wr32(buf + 24, (uint32_t)m->cfg.n_layer);
	wr32(buf + 28, (uint32_t)n);
	wr64(buf + 32, m->fingerprint);
	wr64(buf + 40, m->gguf->file_size);
	wr64(buf + 48, NTX_PACK_HEADER_SIZE);
	wr64(buf + 56, dir_size);
	wr64(buf + 64, data_offset);
	wr64(buf + 72, file_size);
	wr32(buf + 80, frame_size);
	wr64(buf + 112, ntx_hash64(buf + NTX_PACK_HEADER_SIZE, (size_t)dir_size, 0));
	wr64(buf + 120, ntx_hash64(buf, 120, 0));
}

/* ---- the writer ---- */

static int check_opts(const struct ntx_model *m, const struct ntx_pack_write_opts *o,
		      struct ntx_err *err)
{
	int i;

	if (!m->layers)
		return ntx_err_set(err, NTX_EINVAL, "the model has no tensors");
	if (o->compression > NTX_PACK_COMP_ZSTD)
		return ntx_err_set(err, NTX_EINVAL, "unknown compression %u", o->compression);
	if (o->compression == NTX_PACK_COMP_ZSTD &&
	    (o->level < ZSTD_minCLevel() || o->level > ZSTD_maxCLevel()))
		return ntx_err_set(err, NTX_EINVAL, "zstd level %d is not in [%d, %d]", o->level,
				   ZSTD_minCLevel(), ZSTD_maxCLevel());
	if (!(o->min_saving >= 0.0 && o->min_saving < 1.0))
		return ntx_err_set(err, NTX_EINVAL, "minimum saving %g is not in [0, 1)",
				   o->min_saving);
	if (o->frame_size && (o->frame_size % NTX_PACK_ALIGN || o->frame_size > NTX_PACK_FRAME_MAX))
		return ntx_err_set(err, NTX_EINVAL,
				   "frame size %u is not a multiple of %u up to %u", o->frame_size,
				   NTX_PACK_ALIGN, NTX_PACK_FRAME_MAX);
	if (o->alignment && (o->alignment < NTX_PACK_ALIGN_MIN || o->alignment > NTX_PACK_ALIGN_MAX ||
			     (o->alignment & (o->alignment - 1))))
		return ntx_err_set(err, NTX_EINVAL, "alignment %u is not a power of two in [%u, %u]",
				   o->alignment, NTX_PACK_ALIGN_MIN, NTX_PACK_ALIGN_MAX);
	if (o->n_layers < 0 || (o->n_layers && !o->layers))
		return ntx_err_set(err, NTX_EINVAL, "bad layer list");
	for (i = 0; i < o->n_layers; i++) {
		int k;

		if (o->layers[i] < 0 || o->layers[i] >= m->cfg.n_layer ||
		    (i && o->layers[i] <= o->layers[i - 1]))
			return ntx_err_set(err, NTX_EINVAL,
					   "layer %d: not in [0, %d) or not in increasing order",
					   o->layers[i], m->cfg.n_layer);
		for (k = 0; k < NTX_LAYER_NT; k++) {
			const struct ntx_gguf_tensor *t = ntx_layer_tensor(&m->layers[o->layers[i]], k);

			if (t && strlen(t->name) >= NTX_PACK_NAME_MAX)
				return ntx_err_set(err, NTX_EUNSUP,
						   "tensor '%s': name longer than %d bytes", t->name,
						   NTX_PACK_NAME_MAX - 1);
		}
	}
	return 0;
}

/* fsync the directory holding path, so the rename is durable. */
static int sync_dir(const char *path, struct ntx_err *err)
{
	char *copy = strdup(path);
	int fd, rc = 0;

	if (!copy)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		if (fsync(fd) != 0 && errno != EINVAL)
			rc = ntx_err_errno(err, errno, "fsync of the directory");
		close(fd);
	}
	free(copy);
	return rc;
}

struct run {
	struct writer w;
	struct ext *ex;
	struct item *items;   /* every item of every extent, in order */
	int n_items;
	unsigned char *head;
	unsigned char *slots[2][2]; /* per batch: raw and zstd output buffers */
	int per_batch;        /* items per batch */
	uint64_t raw_total;   /* layer bytes of every extent */
	uint64_t data_offset; /* the first extent: header and directory before */
};

static void run_free(struct run *r)
{
	int i;

	if (r->w.cctx)
		for (i = 0; i < r->w.threads; i++)
			ZSTD_freeCCtx(r->w.cctx[i]);
	if (r->w.scratch)
		for (i = 0; i < r->w.threads; i++)
			free(r->w.scratch[i]);
	free(r->w.cctx);
	free(r->w.scratch);
	for (i = 0; i < 2; i++)
		free(r->w.b[i].th);
	if (r->ex) {
		int x;

		for (x = 0; r->ex[x].lt; x++)
			free(r->ex[x].frames);
	}
	free(r->ex);
	free(r->items);
	free(r->head);
}

/* The extents (one per layer of o) and the items they are cut into; the
 * directory size they reserve and where the data starts. -1: out of memory. */
static int plan_extents(struct run *r, const struct ntx_model *m,
			const struct ntx_pack_write_opts *o)
{
	struct writer *w = &r->w;
	uint64_t dir_size = 0;
	int x, i, k;

	r->ex = calloc((size_t)o->n_layers + 1, sizeof *r->ex);
	if (!r->ex)
		return -1;
	for (x = 0; x < o->n_layers; x++) {
		struct ext *e = &r->ex[x];

		e->layer = o->layers[x];
		e->lt = &m->layers[e->layer];
		ntx_layer_layout(e->lt, &e->lo);
		e->compression = o->compression;
		e->transform = o->compression == NTX_PACK_COMP_ZSTD && o->split
				       ? pick_transform(e->lt)
				       : NTX_PACK_XFORM_NONE;
		e->item_size = w->frame_size ? w->frame_size : PIECE;
		e->n_items = (int)((e->lo.total + e->item_size - 1) / e->item_size);
		if (e->compression == NTX_PACK_COMP_ZSTD) {
			e->frames = calloc((size_t)e->n_items, sizeof *e->frames);
			if (!e->frames)
				return -1;
			dir_size += (uint64_t)e->n_items * NTX_PACK_FRAME_REC;
		}
		dir_size += NTX_PACK_EXTENT_REC +
			    (uint64_t)ntx_layer_n_tensors(e->lt) * NTX_PACK_TENSOR_REC;
		r->n_items += e->n_items;
		r->raw_total += e->lo.total;
	}
	r->items = calloc((size_t)r->n_items + 1, sizeof *r->items);
	if (!r->items)
		return -1;
	for (x = 0, i = 0; x < o->n_layers; x++) {
		struct ext *e = &r->ex[x];

		for (k = 0; k < e->n_items; k++, i++) {
			struct item *it = &r->items[i];

			it->e = e;
			it->index = k;
			it->raw_off = (uint64_t)k * e->item_size;
			it->raw_len = (uint32_t)(e->lo.total - it->raw_off < e->item_size
							 ? e->lo.total - it->raw_off
							 : e->item_size);
		}
	}
	r->data_offset = align_up(NTX_PACK_HEADER_SIZE + dir_size, o->alignment);
	return 0;
}

/* Two sets of per_batch item buffers, the thread handles, and with zstd a
 * context and a plane-split scratch buffer per thread. -1: out of memory. */
static int alloc_buffers(struct run *r, const struct ntx_pack_write_opts *o)
{
	struct writer *w = &r->w;
	size_t item = w->frame_size ? w->frame_size : PIECE;
	int i;

	r->per_batch = w->threads < 4 ? 4 : w->threads;
	w->out_cap = w->frame_size ? ZSTD_compressBound(w->frame_size) : 0;
	for (i = 0; i < 2; i++) {
		r->slots[i][0] = malloc((size_t)r->per_batch * item);
		if (w->out_cap)
			r->slots[i][1] = malloc((size_t)r->per_batch * w->out_cap);
		w->b[i].th = calloc((size_t)w->threads, sizeof *w->b[i].th);
		if (!r->slots[i][0] || (w->out_cap && !r->slots[i][1]) || !w->b[i].th)
			return -1;
	}
	if (o->compression == NTX_PACK_COMP_ZSTD) {
		w->cctx = calloc((size_t)w->threads, sizeof *w->cctx);
		w->scratch = calloc((size_t)w->threads, sizeof *w->scratch);
		if (!w->cctx || !w->scratch)
			return -1;
		for (i = 0; i < w->threads; i++) {
			w->cctx[i] = ZSTD_createCCtx();
			w->scratch[i] = malloc(w->frame_size);
			if (!w->cctx[i] || !w->scratch[i])
				return -1;
		}
	}
	return 0;
}

/* Create PATH.tmp.XXXXXX (w->tmp, w->fd) with the umask's permissions. */
static int open_temp(struct writer *w, const char *path, struct ntx_err *err)
{
	size_t tl = strlen(path);

	w->tmp = malloc(tl + 16);
	if (!w->tmp)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	memcpy(w->tmp, path, tl);
	memcpy(w->tmp + tl, ".tmp.XXXXXX", 12);
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		ntx_err_errno(err, errno, "creating %s", w->tmp);
		free(w->tmp);
		w->tmp = NULL;
		return -1;
	}
	{
		mode_t um = umask(0);

		umask(um);
		(void)fchmod(w->fd, 0666 & ~um);
	}
	return 0;
}

/* Write every extent from r->data_offset, batch by batch: prepare batch
 * k+1 while writing batch k. *pos: the end of the data. */
static int write_extents(struct run *r, const struct ntx_pack_write_opts *o, uint64_t *pos,
			 struct ntx_err *err)
{
	struct writer *w = &r->w;
	uint64_t raw_done = 0;
	int i, cur = 0;

	*pos = r->data_offset;
	for (i = 0; i <= r->n_items; i += r->per_batch) {
		struct batch *b = &w->b[cur], *prev = &w->b[!cur];
		int j;

		if (o->cancel && *o->cancel) {
			ntx_err_set(err, NTX_EINTR, "interrupted");
			goto out_join;
		}
		b->items = r->items + i;
		b->n = r->n_items - i < r->per_batch ? r->n_items - i : r->per_batch;
		for (j = 0; j < b->n; j++) {
			struct item *it = &b->items[j];

			it->raw = r->slots[cur][0] + (size_t)j * (w->frame_size ? w->frame_size : PIECE);
			it->out = w->out_cap ? r->slots[cur][1] + (size_t)j * w->out_cap : NULL;
		}
		if (b->n && batch_start(w, b, err))
			goto out_join;
		if (prev->n) {
			if (batch_write(w, prev, pos, err))
				goto out_join;
			for (j = 0; j < prev->n; j++)
				raw_done += prev->items[j].raw_len;
			prev->n = 0;
			if (o->progress)
				o->progress(o->progress_arg, raw_done, r->raw_total);
		}
		batch_join(b);
		if (o->cancel && *o->cancel) {
			ntx_err_set(err, NTX_EINTR, "interrupted");
			goto out_join;
		}
		cur = !cur;
	}
	if (w->b[!cur].n) {
		struct batch *prev = &w->b[!cur];

		if (batch_write(w, prev, pos, err))
			return -1;
		raw_done = r->raw_total;
		if (o->progress)
			o->progress(o->progress_arg, raw_done, r->raw_total);
	}
	return 0;
out_join:
	batch_join(&w->b[0]);
	batch_join(&w->b[1]);
	return -1;
}

/* Header and directory into the space before the first extent; the file
 * cut to pos. */
static int write_head(struct run *r, const struct ntx_model *m,
		      const struct ntx_pack_write_opts *o, uint64_t pos, struct ntx_err *err)
{
	uint64_t dir_size = 0;
	int x;

	r->head = calloc(1, (size_t)r->data_offset);
	if (!r->head)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	/* compressed extents downgraded to none have no frame records, so the
	 * directory may be smaller than reserved; the gap stays zero */
	for (x = 0; x < o->n_layers; x++)
		dir_size += NTX_PACK_EXTENT_REC +
			    (uint64_t)ntx_layer_n_tensors(r->ex[x].lt) * NTX_PACK_TENSOR_REC +
			    (r->ex[x].compression == NTX_PACK_COMP_ZSTD
				     ? (uint64_t)r->ex[x].n_items * NTX_PACK_FRAME_REC
				     : 0);
	build_head(m, o, r->ex, o->n_layers, dir_size, r->data_offset, pos, r->w.frame_size,
		   r->head);
	if (write_all(r->w.fd, r->head, (size_t)r->data_offset, 0, err))
		return -1;
	if (ftruncate(r->w.fd, (off_t)pos) != 0)
		return ntx_err_errno(err, errno, "ftruncate to %" PRIu64, pos);
	return 0;
}

/* fsync, close and rename the temporary file to path (checking for a
 * cancel before each step that cannot be undone), then fsync its folder. */
static int commit_file(struct writer *w, const char *path, const struct ntx_pack_write_opts *o,
		       struct ntx_err *err)
{
	if (o->cancel && *o->cancel)
		return ntx_err_set(err, NTX_EINTR, "interrupted");
	if (!o->no_sync && fsync(w->fd) != 0)
		return ntx_err_errno(err, errno, "fsync");
	if (close(w->fd) != 0) {
		w->fd = -1;
		return ntx_err_errno(err, errno, "close");
	}
	w->fd = -1;
	if (o->cancel && *o->cancel)
		return ntx_err_set(err, NTX_EINTR, "interrupted");
	if (rename(w->tmp, path) != 0)
		return ntx_err_errno(err, errno, "renaming %s", w->tmp);
	free(w->tmp);
	w->tmp = NULL;
	if (!o->no_sync && sync_dir(path, err))
		return -1;
	return 0;
}

static void fill_stats(struct ntx_pack_write_stats *stats, const struct run *r,
		       const struct ntx_pack_write_opts *o, uint64_t file_size, double t0)
{
	int x;

	memset(stats, 0, sizeof *stats);
	stats->raw_bytes = r->raw_total;
	stats->file_size = file_size;
	stats->n_extents = o->n_layers;
	for (x = 0; x < o->n_layers; x++) {
		stats->stored_bytes += r->ex[x].stored_size;
		stats->n_compressed += r->ex[x].compression == NTX_PACK_COMP_ZSTD;
	}
	stats->seconds = ntx_now_s() - t0;
}

int ntx_pack_write(const struct ntx_model *m, const char *path,
		   const struct ntx_pack_write_opts *oin, struct ntx_pack_write_stats *stats,
		   struct ntx_err *err)
{
	struct ntx_pack_write_opts o = *oin;
	struct run r;
	struct writer *w = &r.w;
	uint64_t pos;
	int i, rc = -1;
	double t0 = ntx_now_s();

	ntx_err_clear(err);
	memset(&r, 0, sizeof r);
	w->fd = -1;
	if (check_opts(m, &o, err))
		return -1;
	if (!o.alignment)
		o.alignment = NTX_PACK_ALIGN;
	w->o = &o;
	w->frame_size = o.compression == NTX_PACK_COMP_ZSTD
				? (o.frame_size ? o.frame_size : NTX_PACK_FRAME_DEFAULT)
				: 0;
	w->threads = o.threads > 0 ? o.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (w->threads < 1)
		w->threads = 1;
	if (w->threads > 256)
		w->threads = 256;

	if (plan_extents(&r, m, &o) || alloc_buffers(&r, &o)) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	if (open_temp(w, path, err) || write_extents(&r, &o, &pos, err) ||
	    write_head(&r, m, &o, pos, err) || commit_file(w, path, &o, err))
		goto out;
	if (stats)
		fill_stats(stats, &r, &o, pos, t0);
	rc = 0;
out:
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp) {
		unlink(w->tmp);
		free(w->tmp);
	}
	for (i = 0; i < 2; i++) {
		free(r.slots[i][0]);
		free(r.slots[i][1]);
	}
	run_free(&r);
	return rc;
}
