/* ring.h - the ring of device slots that GPU jobs stream through (used by
 * stream.c only): slot buffers in device memory, a copy stream, and events
 * that order the copy stream against the consumer's compute stream:
 *
 *   copier thread (copy stream)          consumer thread (compute stream)
 *   fill: wait freed[s], copy into s,    acquire: wait copied[s]
 *         record copied[s]               ... kernels reading slot s ...
 *                                        release: record freed[s]
 *
 * plus one event per host staging buffer, recorded on the copy stream after
 * the copy out of it, that the reader thread waits for before it reads the
 * next extent into that buffer. The copies and the compute wait are timed
 * with events too (ntx_ring_take_times).
 * Without CUDA every call fails with "this build has no CUDA support". */
#ifndef NTX_RING_H
#define NTX_RING_H

#include <stdint.h>

#include "err.h"
#include "layout.h"
#include "model.h"

struct CUstream_st;
struct ntx_ring;

/* n_slots >= 1 slots of slot_bytes on the current device, a copy stream,
 * n_staging staging events; compute: the consumer's stream (borrowed).
 * NULL and *err on failure. */
struct ntx_ring *ntx_ring_new(int n_slots, uint64_t slot_bytes, int n_staging,
			      struct CUstream_st *compute, struct ntx_err *err);
/* Wait for the device (every stream), free the slots, events and stream.
 * NULL ok. */
void ntx_ring_free(struct ntx_ring *r);

/* Slot s's device buffer. */
void *ntx_ring_slot(const struct ntx_ring *r, int s);

/* Copier side, on the copy stream: wait until the compute stream released
 * slot s, copy bytes from src (pinned host) into it, mark it copied. */
int ntx_ring_fill(struct ntx_ring *r, int s, const void *src, uint64_t bytes, struct ntx_err *err);
/* The same from the tensors lt in the GGUF map, placed as lo says, with
 * pageable copies after the copy stream drained (the --io mmap baseline). */
int ntx_ring_fill_map(struct ntx_ring *r, int s, const struct ntx_layer_tensors *lt,
		      const struct ntx_layer_layout *lo, struct ntx_err *err);
/* Record on the copy stream that the copies out of staging buffer b so far
 * are enqueued; wait (without spinning) until they are done. */
int ntx_ring_staging_mark(struct ntx_ring *r, int b, struct ntx_err *err);
int ntx_ring_staging_wait(struct ntx_ring *r, int b, struct ntx_err *err);

/* Consumer side, on the compute stream: wait for slot s's copy / mark
 * slot s free once the work enqueued so far is done. */
int ntx_ring_acquire(struct ntx_ring *r, int s, struct ntx_err *err);
int ntx_ring_release(struct ntx_ring *r, int s, struct ntx_err *err);

/* Seconds of copies, seconds the compute stream waited, since the last
 * call (consumer's thread). */
void ntx_ring_take_times(struct ntx_ring *r, double *t_copy, double *t_wait);

/* Wait for all device work (after a failed pass). */
int ntx_ring_sync(struct ntx_ring *r, struct ntx_err *err);

#endif
