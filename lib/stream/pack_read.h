/* pack_read.h - reading a pack's extents through the direct-I/O pool
 * (dio.h) and decoding them on its threads; verifying a whole pack. */
#ifndef NTX_PACK_READ_H
#define NTX_PACK_READ_H

#include "dio.h"
#include "pack.h"

/* Read an extent with the direct-I/O pool and decode it on the pool's
 * threads (checksum with verify, frames in parallel). stored: a buffer of
 * at least e->stored_size bytes aligned to NTX_DIO_ALIGN (pinned staging);
 * raw: e->raw_size bytes, or == stored for an uncompressed extent (then the
 * layer is used in place). r is caller-owned and must stay valid and
 * untouched until ntx_pack_read_wait() returns. Several reads may be in
 * flight at once. Returns 0 or -1 (bad arguments; nothing submitted). */
struct ntx_pack_read {
	const struct ntx_pack *p;
	const struct ntx_pack_extent *e;
	const void *stored;
	void *raw;
	int verify;
	struct ntx_dio_req req;
};
int ntx_pack_read_submit(struct ntx_dio *d, const struct ntx_pack *p,
			 const struct ntx_pack_extent *e, void *stored, void *raw, int verify,
			 struct ntx_pack_read *r, struct ntx_err *err);

/* Wait for a read submitted above: 0 when raw holds the layer, or -1 with
 * the first error (read error, truncation, checksum, decode). Always
 * returns, never hangs. */
int ntx_pack_read_wait(struct ntx_dio *d, struct ntx_pack_read *r, struct ntx_err *err);

/* Read every extent (through a direct-I/O pool of threads threads; 0 =
 * default; with the test switches of tun, as ntx_dio_open, NULL none) and
 * compare it, byte for byte, with the model's layer as
 * ntx_layer_pack_copy() lays it out; padding must be zero. Calls
 * progress(arg, done, total) with stored bytes read (may be NULL). Returns 0,
 * or -1 with the first difference or error. Also checks the model first
 * (ntx_pack_check_model). */
int ntx_pack_verify(const struct ntx_pack *p, const struct ntx_model *m, int threads,
		    const struct ntx_tunables *tun, ntx_pack_progress_fn progress, void *arg,
		    struct ntx_err *err);

#endif
