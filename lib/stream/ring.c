/* ring.c - the ring of device slots and pinned host memory (ring.h,
 * stream.h). The CUDA runtime is called directly here; without CUDA the
 * ring calls fail with "this build has no CUDA support" and pinned memory
 * is plain aligned memory. In the order a streamed layer meets them: the
 * copier fills a slot (fill, fill_map, staging_mark), the reader waits for
 * a staging buffer (staging_wait), the consumer acquires and releases the
 * slot. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ring.h"
#include "stream.h"

#ifdef NTX_HAVE_CUDA
#include <cuda_runtime_api.h>

struct ring_slot {
	void *dev;                  /* slot_bytes of device memory */
	cudaEvent_t copied;         /* end of the last copy into it (timed) */
	cudaEvent_t freed;          /* the compute stream is done with it */
	cudaEvent_t cp0;            /* start of the last copy (timed) */
	cudaEvent_t w0, w1;         /* the compute stream's wait for the copy (timed) */
	int cp_pending, w_pending;  /* a copy / a wait to account */
};

struct ntx_ring {
	int n_slots, n_staging;
	struct ring_slot *slot;
	cudaEvent_t *ev_stg;        /* [n_staging] copies out of staging buffer b enqueued */
	cudaStream_t cs;            /* the consumer's compute stream (borrowed) */
	cudaStream_t ps;            /* the copy stream (pcie) */
	double t_copy, t_wait;      /* since the last ntx_ring_take_times */
	pthread_mutex_t tmu;        /* t_copy: the copier adds, the consumer takes */
};

static int cuda_fail(struct ntx_err *err, cudaError_t rc, const char *what)
{
	return ntx_err_set(err, NTX_EDEVICE, "cuda: %s failed: %s", what, cudaGetErrorString(rc));
}

#define CK(call, what)                                                         \
	do {                                                                   \
		cudaError_t rc_ = (call);                                      \
		if (rc_ != cudaSuccess)                                        \
			return cuda_fail(err, rc_, what);                      \
	} while (0)

/* ---- pinned host memory ---- */

void *ntx_host_alloc(size_t bytes, struct ntx_err *err)
{
	void *p = NULL;
	cudaError_t rc;
	int n = 0;

	if (bytes == 0)
		bytes = 1;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		cudaGetLastError();
		if (posix_memalign(&p, 4096, bytes))
			p = NULL;
		if (!p)
			ntx_err_set(err, NTX_ENOMEM, "out of memory (%zu bytes)", bytes);
		return p;
	}
	/* page-aligned, as O_DIRECT reads need (cudaHostAlloc does not promise
	 * it: small blocks come 2 KiB-aligned); the block's start is kept in
	 * the word before */
	if (bytes > SIZE_MAX - 8192) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory (%zu bytes)", bytes);
		return NULL;
	}
	rc = cudaHostAlloc(&p, bytes + 4096 + sizeof(void *), cudaHostAllocPortable);
	if (rc != cudaSuccess) {
		ntx_err_set(err, NTX_ENOMEM, "cuda: cudaHostAlloc(%zu) failed: %s", bytes,
			    cudaGetErrorString(rc));
		return NULL;
	}
	{
		char *a = (char *)(((uintptr_t)p + sizeof(void *) + 4095) & ~(uintptr_t)4095);

		((void **)a)[-1] = p;
		return a;
	}
}

void ntx_host_free(void *p)
{
	struct cudaPointerAttributes a;

	if (!p)
		return;
	if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
		cudaFreeHost(((void **)p)[-1]);
		return;
	}
	cudaGetLastError();
	free(p);
}

/* ---- the ring ---- */

static int ring_init(struct ntx_ring *r, uint64_t slot_bytes, struct ntx_err *err)
{
	int i;

	CK(cudaStreamCreateWithFlags(&r->ps, cudaStreamNonBlocking), "cudaStreamCreate");
	for (i = 0; i < r->n_slots; i++) {
		struct ring_slot *sl = &r->slot[i];
		cudaError_t rc = cudaMalloc(&sl->dev, slot_bytes ? slot_bytes : 16);

		if (rc != cudaSuccess) {
			sl->dev = NULL;
			return ntx_err_set(err, NTX_EDEVICE,
					   "cuda: cudaMalloc(%zu) for streaming slot %d failed: %s",
					   (size_t)slot_bytes, i, cudaGetErrorString(rc));
		}
		/* copied ends the copy that cp0 starts: timed */
		CK(cudaEventCreate(&sl->copied), "cudaEventCreate");
		CK(cudaEventCreateWithFlags(&sl->freed, cudaEventDisableTiming), "cudaEventCreate");
		CK(cudaEventCreate(&sl->cp0), "cudaEventCreate");
		CK(cudaEventCreate(&sl->w0), "cudaEventCreate");
		CK(cudaEventCreate(&sl->w1), "cudaEventCreate");
	}
	for (i = 0; i < r->n_staging; i++)
		CK(cudaEventCreateWithFlags(&r->ev_stg[i], cudaEventDisableTiming), "cudaEventCreate");
	return 0;
}

struct ntx_ring *ntx_ring_new(int n_slots, uint64_t slot_bytes, int n_staging,
			      struct CUstream_st *compute, struct ntx_err *err)
{
	struct ntx_ring *r = calloc(1, sizeof *r);

	if (!r) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&r->tmu, NULL);
	r->cs = compute;
	r->n_slots = n_slots;
	r->n_staging = n_staging;
	r->slot = calloc((size_t)(n_slots > 0 ? n_slots : 1), sizeof *r->slot);
	r->ev_stg = calloc((size_t)(n_staging > 0 ? n_staging : 1), sizeof *r->ev_stg);
	if (!r->slot || !r->ev_stg) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		ntx_ring_free(r);
		return NULL;
	}
	if (ring_init(r, slot_bytes, err)) {
		ntx_ring_free(r);
		return NULL;
	}
	return r;
}

void ntx_ring_free(struct ntx_ring *r)
{
	int i;

	if (!r)
		return;
	cudaDeviceSynchronize();
	for (i = 0; r->slot && i < r->n_slots; i++) {
		struct ring_slot *sl = &r->slot[i];

		cudaFree(sl->dev);
		if (sl->copied)
			cudaEventDestroy(sl->copied);
		if (sl->freed)
			cudaEventDestroy(sl->freed);
		if (sl->cp0)
			cudaEventDestroy(sl->cp0);
		if (sl->w0)
			cudaEventDestroy(sl->w0);
		if (sl->w1)
			cudaEventDestroy(sl->w1);
	}
	for (i = 0; r->ev_stg && i < r->n_staging; i++)
		if (r->ev_stg[i])
			cudaEventDestroy(r->ev_stg[i]);
	if (r->ps)
		cudaStreamDestroy(r->ps);
	cudaGetLastError();
	free(r->slot);
	free(r->ev_stg);
	pthread_mutex_destroy(&r->tmu);
	free(r);
}

void *ntx_ring_slot(const struct ntx_ring *r, int s)
{
	return r->slot[s].dev;
}

/* Wait for an event without spinning: the streamer's threads wait for
 * copies that take milliseconds while the CPU may be computing layers on
 * every core (cudaEventSynchronize would busy-wait in the default
 * scheduling mode and take a core from the thread pool). */
static cudaError_t event_wait(cudaEvent_t ev)
{
	cudaError_t rc;

	while ((rc = cudaEventQuery(ev)) == cudaErrorNotReady) {
		struct timespec ts = { 0, 50000 };

		nanosleep(&ts, NULL);
	}
	return rc;
}

static double elapsed(cudaEvent_t a, cudaEvent_t b)
{
	float ms = 0;

	if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return ms * 1e-3;
}

/* ---- copier side (copy stream) ---- */

/* Account the slot's previous copy (long done), make the copy stream wait
 * until the compute stream released the slot, mark the copy's start. */
static int fill_begin(struct ntx_ring *r, struct ring_slot *sl, struct ntx_err *err)
{
	if (sl->cp_pending) {
		double t;

		CK(event_wait(sl->copied), "cudaEventQuery");
		t = elapsed(sl->cp0, sl->copied);
		pthread_mutex_lock(&r->tmu);
		r->t_copy += t;
		pthread_mutex_unlock(&r->tmu);
	}
	CK(cudaStreamWaitEvent(r->ps, sl->freed, 0), "cudaStreamWaitEvent");
	CK(cudaEventRecord(sl->cp0, r->ps), "cudaEventRecord");
	return 0;
}

/* Mark the end of the copy: what the consumer's acquire waits for. */
static int fill_end(struct ntx_ring *r, struct ring_slot *sl, struct ntx_err *err)
{
	CK(cudaEventRecord(sl->copied, r->ps), "cudaEventRecord");
	sl->cp_pending = 1;
	return 0;
}

int ntx_ring_fill(struct ntx_ring *r, int s, const void *src, uint64_t bytes, struct ntx_err *err)
{
	struct ring_slot *sl = &r->slot[s];

	if (fill_begin(r, sl, err))
		return -1;
	CK(cudaMemcpyAsync(sl->dev, src, bytes, cudaMemcpyHostToDevice, r->ps),
	   "cudaMemcpyAsync (streamed layer)");
	return fill_end(r, sl, err);
}

int ntx_ring_fill_map(struct ntx_ring *r, int s, const struct ntx_layer_tensors *lt,
		      const struct ntx_layer_layout *lo, struct ntx_err *err)
{
	struct ring_slot *sl = &r->slot[s];
	int i;

	if (fill_begin(r, sl, err))
		return -1;
	/* the naive baseline: pageable copies from the GGUF map */
	CK(cudaStreamSynchronize(r->ps), "cudaStreamSynchronize");
	for (i = 0; i < NTX_LAYER_NT; i++) {
		const struct ntx_gguf_tensor *t = ntx_layer_tensor(lt, i);

		if (!t)
			continue;
		CK(cudaMemcpyAsync((char *)sl->dev + lo->offset[i], t->data, t->nbytes,
				   cudaMemcpyHostToDevice, r->ps),
		   "cudaMemcpyAsync (weights)");
	}
	return fill_end(r, sl, err);
}

int ntx_ring_staging_mark(struct ntx_ring *r, int b, struct ntx_err *err)
{
	CK(cudaEventRecord(r->ev_stg[b], r->ps), "cudaEventRecord");
	return 0;
}

/* (reader thread) */
int ntx_ring_staging_wait(struct ntx_ring *r, int b, struct ntx_err *err)
{
	CK(event_wait(r->ev_stg[b]), "cudaEventQuery");
	return 0;
}

/* ---- consumer side (compute stream) ---- */

int ntx_ring_acquire(struct ntx_ring *r, int s, struct ntx_err *err)
{
	struct ring_slot *sl = &r->slot[s];

	if (sl->w_pending) {
		r->t_wait += elapsed(sl->w0, sl->w1);
		sl->w_pending = 0;
	}
	CK(cudaEventRecord(sl->w0, r->cs), "cudaEventRecord");
	CK(cudaStreamWaitEvent(r->cs, sl->copied, 0), "cudaStreamWaitEvent");
	CK(cudaEventRecord(sl->w1, r->cs), "cudaEventRecord");
	sl->w_pending = 1;
	return 0;
}

int ntx_ring_release(struct ntx_ring *r, int s, struct ntx_err *err)
{
	CK(cudaEventRecord(r->slot[s].freed, r->cs), "cudaEventRecord");
	return 0;
}

void ntx_ring_take_times(struct ntx_ring *r, double *t_copy, double *t_wait)
{
	pthread_mutex_lock(&r->tmu);
	*t_copy = r->t_copy;
	r->t_copy = 0;
	pthread_mutex_unlock(&r->tmu);
	*t_wait = r->t_wait;
	r->t_wait = 0;
}

int ntx_ring_sync(struct ntx_ring *r, struct ntx_err *err)
{
	(void)r;
	CK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	return 0;
}

#else /* no CUDA: host memory only, no ring */

void *ntx_host_alloc(size_t bytes, struct ntx_err *err)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, bytes ? bytes : 1))
		p = NULL;
	if (!p)
		ntx_err_set(err, NTX_ENOMEM, "out of memory (%zu bytes)", bytes);
	return p;
}

void ntx_host_free(void *p)
{
	free(p);
}

static int no_cuda(struct ntx_err *err)
{
	return ntx_err_set(err, NTX_EDEVICE, "this build has no CUDA support");
}

struct ntx_ring *ntx_ring_new(int n_slots, uint64_t slot_bytes, int n_staging,
			      struct CUstream_st *compute, struct ntx_err *err)
{
	(void)n_slots, (void)slot_bytes, (void)n_staging, (void)compute;
	no_cuda(err);
	return NULL;
}

void ntx_ring_free(struct ntx_ring *r)
{
	(void)r;
}

void *ntx_ring_slot(const struct ntx_ring *r, int s)
{
	(void)r, (void)s;
	return NULL;
}

int ntx_ring_fill(struct ntx_ring *r, int s, const void *src, uint64_t bytes, struct ntx_err *err)
{
	(void)r, (void)s, (void)src, (void)bytes;
	return no_cuda(err);
}

int ntx_ring_fill_map(struct ntx_ring *r, int s, const struct ntx_layer_tensors *lt,
		      const struct ntx_layer_layout *lo, struct ntx_err *err)
{
	(void)r, (void)s, (void)lt, (void)lo;
	return no_cuda(err);
}

int ntx_ring_staging_mark(struct ntx_ring *r, int b, struct ntx_err *err)
{
	(void)r, (void)b;
	return no_cuda(err);
}

int ntx_ring_staging_wait(struct ntx_ring *r, int b, struct ntx_err *err)
{
	(void)r, (void)b;
	return no_cuda(err);
}

int ntx_ring_acquire(struct ntx_ring *r, int s, struct ntx_err *err)
{
	(void)r, (void)s;
	return no_cuda(err);
}

int ntx_ring_release(struct ntx_ring *r, int s, struct ntx_err *err)
{
	(void)r, (void)s;
	return no_cuda(err);
}

void ntx_ring_take_times(struct ntx_ring *r, double *t_copy, double *t_wait)
{
	(void)r;
	*t_copy = *t_wait = 0;
}

int ntx_ring_sync(struct ntx_ring *r, struct ntx_err *err)
{
	(void)r;
	return no_cuda(err);
}

#endif
