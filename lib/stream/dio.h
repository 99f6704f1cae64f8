/* dio.h - direct-I/O reads for streaming layers from a pack file.
 *
 * A pool of threads reads with pread() from a file opened with O_DIRECT (no
 * page cache; the disk's own rate with many reads in flight). Where the file
 * system refuses O_DIRECT (tmpfs, some network file systems) the file is
 * opened normally with POSIX_FADV_SEQUENTIAL instead and ntx_dio_direct()
 * says so. A request (offset, length, destination) is split into chunks
 * that the threads read at once; ntx_dio_wait() blocks until every chunk of
 * that request is done and reports the first error.
 *
 * Post-read work: a request may carry a hook, called hook_parts times (part
 * 0 .. hook_parts-1, on the pool's threads, in any order and in parallel)
 * after all its reads succeeded; the request is done when the hooks have
 * returned (after a failed part, parts not yet started are skipped). pack.h
 * uses it to verify and decode extents on the I/O threads. Scheduling: a
 * free thread reads while fewer than half the threads (at least one) are
 * reading, else runs a hook part of the oldest request, else reads; so the
 * disk keeps reads in flight while the other threads decode.
 *
 * Fault injection (tests), from the tunables given to ntx_dio_open()
 * (tunables.h): fault_read = N (NTX_FAULT_READ=N, N >= 1) makes the N-th
 * chunk read of that handle (counted from 1 in the order the threads issue
 * them) fail with EIO; fault_read_every (NTX_FAULT_READ_EVERY=1) makes it
 * fail every read from the N-th on. dio_buffered (NTX_DIO_BUFFERED=1) skips
 * O_DIRECT as if the file system refused it.
 *
 * Requests are error-isolated: a failed request does not affect others. No
 * call ever hangs on an error: wait() returns once every chunk of the
 * request has been read, failed or skipped after the first failure. */
#ifndef NTX_DIO_H
#define NTX_DIO_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tunables.h"

#define NTX_DIO_ALIGN 4096u              /* offsets, lengths, buffers (direct mode) */
#define NTX_DIO_DEFAULT_THREADS 4
#define NTX_DIO_DEFAULT_CHUNK (8u << 20)
#define NTX_DIO_MAX_THREADS 256

struct ntx_dio;

/* A request. The caller owns the memory; it must stay valid and untouched
 * from ntx_dio_submit() until ntx_dio_wait() returns. Set the public fields
 * (or zero them) before submit. */
struct ntx_dio_req {
	/* public, set by the caller */
	int layer;          /* for messages ("extent of layer L"); -1 = none */
	int (*hook)(void *arg, int part, struct ntx_err *err); /* or NULL */
	void *hook_arg;
	int hook_parts;     /* >= 1 when hook is set */
	/* private */
	struct ntx_dio_req *next;
	uint64_t off;
	size_t len;
	unsigned char *dst;
	size_t n_chunks, chunk_next, chunks_left; /* reads */
	int parts_next, parts_left;               /* hooks */
	int phase;          /* 0 reading, 1 hooks, 2 done */
	int failed;
	struct ntx_err err; /* first error */
};

/* Open path for reading with threads threads (0 = NTX_DIO_DEFAULT_THREADS)
 * reading chunk bytes at a time (0 = NTX_DIO_DEFAULT_CHUNK; rounded up to
 * NTX_DIO_ALIGN), with the test switches of tun (borrowed, read here; NULL:
 * none). Returns NULL and fills *err (without the path), also for
 * fault_read < 0 (NTX_FAULT_READ set to something else than N >= 1). */
struct ntx_dio *ntx_dio_open(const char *path, int threads, size_t chunk,
			     const struct ntx_tunables *tun, struct ntx_err *err);

/* Close: waits for requests still queued or in flight (their results are
 * lost: wait for them first), joins the threads, closes the file. NULL ok. */
void ntx_dio_close(struct ntx_dio *d);

/* 1 if the file is read with O_DIRECT, 0 if the file system refused it and
 * reads go through the page cache. */
int ntx_dio_direct(const struct ntx_dio *d);

/* Size of the file now (fstat), or 0 on error. */
uint64_t ntx_dio_file_size(const struct ntx_dio *d);

/* Queue a read of len bytes at file offset off into dst. In direct mode off,
 * len and dst must be multiples of NTX_DIO_ALIGN. len may be 0 (then only
 * the hook runs). Returns 0, or -1 with *err for bad arguments (nothing is
 * queued then). */
int ntx_dio_submit(struct ntx_dio *d, uint64_t off, size_t len, void *dst,
		   struct ntx_dio_req *req, struct ntx_err *err);

/* Block until req is done. Returns 0, or -1 with the request's first error:
 * a read past the end of the file says "pack file truncated: extent of
 * layer L at offset O needs N bytes, file has M"; a read error names the
 * offset and errno text (NTX_EIO); a hook error is passed on. */
int ntx_dio_wait(struct ntx_dio *d, struct ntx_dio_req *req, struct ntx_err *err);

/* Nonzero once req is done (wait() will not block). */
int ntx_dio_done(struct ntx_dio *d, struct ntx_dio_req *req);

/* Chunk reads issued so far (for tests and statistics). */
uint64_t ntx_dio_reads(const struct ntx_dio *d);

/* Allocate a buffer aligned to NTX_DIO_ALIGN (free with free()). n is
 * rounded up to the alignment. NULL on failure. */
void *ntx_dio_alloc(size_t n);

#endif
