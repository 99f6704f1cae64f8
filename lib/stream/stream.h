/* stream.h - the streamer: moves the weights of non-resident layers to
 * their executor, in a fixed cyclic order, ahead of the compute.
 *
 * A job list goes in (one job per layer whose weights move for every
 * forward pass), acquire/release come out: the consumer (the engine's layer
 * loop) acquires the jobs in list order, again and again (job k is
 * jobs[k % n]), gets the base of the layer's weights in the layout of
 * layout.h (a device ring slot for a GPU job, a host staging buffer for a
 * host job) and releases the job when done with it. How it works: stream.c;
 * the ring of device slots: ring.c. Knows nothing of the engine. */
#ifndef NTX_STREAM_H
#define NTX_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "layout.h"
#include "model.h"
#include "tunables.h"

struct ntx_pool;
struct CUstream_st; /* == cudaStream_t */

/* Where a job's bytes come from. */
enum ntx_stream_src {
	/* the layer's tensors in host memory (lt): ntx_streamer_new() copies
	 * them once into pinned memory in the layout lo; GPU jobs only */
	NTX_STREAM_RAM,
	/* the layer's extent in the pack (params.pack_path), read with direct
	 * I/O into pinned staging for every use */
	NTX_STREAM_PACK,
	/* the layer's tensors in the GGUF map (lt), copied tensor by tensor
	 * with pageable copies for every use: the --io mmap baseline; GPU jobs
	 * only */
	NTX_STREAM_MAP,
};

/* One job: one layer's weights, moved once per cycle. */
struct ntx_stream_job {
	int layer;                          /* model layer (pack extent, messages) */
	int to_gpu;                         /* 1: into a device ring slot; 0: host staging */
	enum ntx_stream_src src;
	const struct ntx_layer_tensors *lt; /* the layer's tensors (RAM, MAP) */
	const struct ntx_layer_layout *lo;  /* its layout: lo->total bytes per use */
};

struct ntx_stream_params {
	const struct ntx_model *m;      /* the model the pack must match (PACK jobs) */
	const char *pack_path;          /* the pack of PACK jobs (NULL: none given) */
	int ring_slots;                 /* device slots for GPU jobs (< 2: 3) */
	int n_staging;                  /* pinned staging buffers for pack reads (0: 3) */
	int io_threads;                 /* direct-I/O threads (0: 8) */
	size_t io_chunk;                /* direct-I/O read size (0: 16 MiB) */
	struct ntx_pool *pool;          /* threads that make the pinned copies (RAM jobs) */
	struct CUstream_st *compute;    /* the consumer's CUDA stream (GPU jobs) */
	const struct ntx_tunables *tun; /* the read fault switches (tests); NULL: none */
};

/* Counters of what moved (cumulative, as of the last release). */
struct ntx_stream_stats {
	uint64_t bytes_h2d;   /* copied into device slots */
	uint64_t bytes_disk;  /* read from the pack (stored bytes) */
	double t_disk_s;      /* time with pack reads outstanding */
};

struct ntx_streamer;

/* Start streaming the n >= 1 jobs (copied; lt and lo must stay valid until
 * ntx_streamer_free): pinned copies of RAM jobs, the pack opened and
 * checked against params->m, staging buffers, the ring of device slots
 * (on the current CUDA device) when a job goes to the GPU, then the reader
 * and copier threads. Returns NULL and fills *err on failure (errors about
 * the pack start with its path). */
struct ntx_streamer *ntx_streamer_new(const struct ntx_stream_params *params,
				      const struct ntx_stream_job *jobs, int n, struct ntx_err *err);

/* Stop the threads, wait for the device, free everything. NULL ok. */
void ntx_streamer_free(struct ntx_streamer *s);

/* Wait until the next job of the cycle is ready; it must be layer's (else
 * an internal error). *base: the layer in the layout of layout.h, a device
 * slot for a GPU job (the compute stream is made to wait for its copy: use
 * it only in work enqueued on that stream) or pinned host memory for a
 * host job; valid until the release. Returns 0, or -1 with the streamer's
 * first error (read error, checksum, CUDA): never a hang. */
int ntx_streamer_acquire(struct ntx_streamer *s, int layer, const void **base,
			 struct ntx_err *err);

/* The consumer is done with the job acquired last (GPU: the work using the
 * slot is enqueued on the compute stream; host: it was used). A layer that
 * is skipped is acquired and released unused, so the cycle holds. */
int ntx_streamer_release(struct ntx_streamer *s, int layer, struct ntx_err *err);

/* After a failed or interrupted pass: stop the threads, wait for the
 * device, start the cycle again at job 0. */
int ntx_streamer_reset(struct ntx_streamer *s, struct ntx_err *err);

/* Counters as of the last release. */
void ntx_streamer_stats(struct ntx_streamer *s, struct ntx_stream_stats *st);

/* Device time collected since the last call: seconds of host-to-device
 * copies into slots (*t_copy) and seconds the compute stream waited for
 * them (*t_wait). Zero without GPU jobs. Consumer's thread. */
void ntx_streamer_take_times(struct ntx_streamer *s, double *t_copy, double *t_wait);

/* Pinned host memory aligned to 4096 bytes (page-locked with CUDA when a
 * device is present, else plain aligned memory). NULL and *err on
 * failure. Free with ntx_host_free (NULL ok). */
void *ntx_host_alloc(size_t bytes, struct ntx_err *err);
void ntx_host_free(void *p);

#endif
