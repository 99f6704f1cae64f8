/* pack_read.c - streaming extents through the direct-I/O pool, decoding on
 * its threads, and the full verification of a pack against its GGUF (see
 * pack.h).
 *
 * Where decoding runs: on the I/O threads, as the request's post-read hook
 * (dio.h), split into the independent parts of ntx_pack_decode_part(): the
 * checksum is one part and every zstd frame another, so a compressed extent
 * decodes on all the pool's threads at once while the engine's own threads
 * compute. The engine calls ntx_pack_read_submit() for the layers ahead and
 * ntx_pack_read_wait() for the one it needs next. */
#include "pack_read.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int read_hook(void *arg, int part, struct ntx_err *err)
{
	struct ntx_pack_read *r = arg;

	return ntx_pack_decode_part(r->p, r->e, r->stored, r->raw, part, r->verify, err);
}

int ntx_pack_read_submit(struct ntx_dio *d, const struct ntx_pack *p,
			 const struct ntx_pack_extent *e, void *stored, void *raw, int verify,
			 struct ntx_pack_read *r, struct ntx_err *err)
{
	if (!raw || !stored)
		return ntx_err_set(err, NTX_EINVAL, "layer %d: no buffer", e->layer);
	if (raw == stored && e->compression != NTX_PACK_COMP_NONE)
		return ntx_err_set(err, NTX_EINVAL,
				   "layer %d: a compressed extent cannot be decoded in place", e->layer);
	memset(r, 0, sizeof *r);
	r->p = p;
	r->e = e;
	r->stored = stored;
	r->raw = raw;
	r->verify = verify;
	r->req.layer = e->layer;
	if (verify || raw != stored) {
		r->req.hook = read_hook;
		r->req.hook_arg = r;
		r->req.hook_parts = ntx_pack_decode_parts(e);
	}
	return ntx_dio_submit(d, e->offset, (size_t)e->stored_size, stored, &r->req, err);
}

int ntx_pack_read_wait(struct ntx_dio *d, struct ntx_pack_read *r, struct ntx_err *err)
{
	return ntx_dio_wait(d, &r->req, err);
}

/* ---- verification ---- */

/* Compare a decoded extent with the model's layer, and the stored padding
 * with zeros. */
static int compare(const struct ntx_pack_extent *e, const struct ntx_layer_tensors *lt,
		   const unsigned char *raw, const unsigned char *stored, struct ntx_err *err)
{
	struct ntx_layer_layout lo;
	uint64_t i;
	int k;

	ntx_layer_layout(lt, &lo);
	for (k = 0; k < NTX_LAYER_NT; k++) {
		const struct ntx_gguf_tensor *t = ntx_layer_tensor(lt, k);
		const unsigned char *a = raw + lo.offset[k], *b;
		uint64_t end = k + 1 < NTX_LAYER_NT ? lo.offset[k + 1] : lo.total;

		if (!t) /* absent optional slot: no bytes */
			continue;
		b = t->data;
		if (memcmp(a, b, (size_t)t->nbytes) != 0) {
			for (i = 0; i < t->nbytes && a[i] == b[i]; i++)
				;
			return ntx_err_set(err, NTX_EMISMATCH,
					   "layer %d: tensor '%s' differs from the model at byte %" PRIu64
					   " (pack 0x%02x, model 0x%02x)",
					   e->layer, t->name, i, a[i], b[i]);
		}
		for (i = lo.offset[k] + t->nbytes; i < end; i++)
			if (raw[i])
				return ntx_err_set(err, NTX_EFORMAT,
						   "layer %d: padding byte %" PRIu64 " after tensor '%s' is "
						   "0x%02x, not 0",
						   e->layer, i, t->name, raw[i]);
	}
	for (i = e->data_size; i < e->stored_size; i++)
		if (stored[i])
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d: extent padding byte %" PRIu64 " is 0x%02x, not 0",
					   e->layer, i, stored[i]);
	return 0;
}

int ntx_pack_verify(const struct ntx_pack *p, const struct ntx_model *m, int threads,
		    const struct ntx_tunables *tun, ntx_pack_progress_fn progress, void *arg,
		    struct ntx_err *err)
{
	struct ntx_pack_read rd[2];
	unsigned char *stored[2] = { NULL, NULL }, *raw[2] = { NULL, NULL };
	int inflight[2] = { 0, 0 };
	struct ntx_dio *d = NULL;
	uint64_t done = 0, total = 0;
	int x, s, rc = -1, any_zstd = 0;

	if (ntx_pack_check_model(p, m, err))
		return -1;
	if (p->fd < 0)
		return ntx_err_set(err, NTX_EINVAL, "the pack is not a file");
	for (x = 0; x < p->n_extents; x++) {
		total += p->extents[x].stored_size;
		any_zstd |= p->extents[x].compression != NTX_PACK_COMP_NONE;
	}
	d = ntx_dio_open(p->path, threads, 0, tun, err);
	if (!d)
		return -1;
	for (s = 0; s < 2; s++) {
		stored[s] = ntx_dio_alloc((size_t)p->max_stored);
		raw[s] = any_zstd ? ntx_dio_alloc((size_t)p->max_raw) : stored[s];
		if (!stored[s] || !raw[s]) {
			ntx_err_set(err, NTX_ENOMEM,
				    "out of memory for buffers of %" PRIu64 " and %" PRIu64 " bytes",
				    p->max_stored, p->max_raw);
			goto out;
		}
	}
	/* two extents in flight: read x + 1 while checking x */
	for (x = 0; x < p->n_extents + 1; x++) {
		if (x < p->n_extents) {
			const struct ntx_pack_extent *e = &p->extents[x];

			s = x & 1;
			if (ntx_pack_read_submit(d, p, e, stored[s],
						 e->compression == NTX_PACK_COMP_NONE ? stored[s] : raw[s], 1,
						 &rd[s], err))
				goto out;
			inflight[s] = 1;
		}
		if (x > 0) {
			const struct ntx_pack_extent *e = &p->extents[x - 1];

			s = (x - 1) & 1;
			inflight[s] = 0;
			if (ntx_pack_read_wait(d, &rd[s], err) ||
			    compare(e, &m->layers[e->layer], rd[s].raw, stored[s], err))
				goto out;
			done += e->stored_size;
			if (progress)
				progress(arg, done, total);
		}
	}
	rc = 0;
out:
	for (s = 0; s < 2; s++)
		if (inflight[s])
			(void)ntx_pack_read_wait(d, &rd[s], NULL);
	ntx_dio_close(d);
	for (s = 0; s < 2; s++) {
		if (raw[s] != stored[s])
			free(raw[s]);
		free(stored[s]);
	}
	return rc;
}
