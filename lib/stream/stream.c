/* stream.c - the streamer (stream.h): feeds every job's layer to its
 * executor, in job order, ahead of the compute.
 *
 * The weights a forward pass needs are the same every token, so the
 * streamer runs a cyclic schedule of jobs with monotonic job numbers k (job
 * k is jobs[k % n]). One streamed layer, top to bottom in this file:
 *   1. the reader thread (pack jobs only) reads the layer's extent from the
 *      pack (O_DIRECT, many chunks in flight, decoded on the I/O threads)
 *      into a pinned staging buffer, as far ahead as the staging buffers
 *      allow; a buffer is free again once its GPU copy is done (the ring's
 *      staging event) or its host job was released;
 *   2. the copier thread, for a GPU job, waits until its ring slot is free
 *      (the job that used the slot before was released) and enqueues the
 *      host-to-device copy on the ring's copy stream (ring.c), from the
 *      pinned RAM copy, the staging buffer or the GGUF map; then the job is
 *      produced (a host job is produced once read);
 *   3. the consumer (the engine's layer loop) acquires job k: waits until
 *      it is produced; for a GPU job the compute stream waits for the
 *      copy's event; it gets the slot or the staging buffer;
 *   4. the consumer releases job k when its compute is enqueued (GPU: the
 *      compute stream marks the slot free) or done (host).
 * So reading layer i+2, copying layer i+1 and computing layer i happen at
 * once, CPU-executed layers included. Errors (read errors, checksums, CUDA)
 * stop the streamer and are returned by the next acquire: never a hang. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dio.h"
#include "ntx_cpu.h"
#include "pack_read.h"
#include "ring.h"
#include "stream.h"

struct sjob {
	int layer;
	int to_gpu;                          /* copy into a ring slot */
	int from_disk;                       /* read from the pack first (x) */
	const struct ntx_layer_tensors *lt;  /* map_copy: the tensors in the GGUF map */
	const struct ntx_layer_layout *lo;
	int map_copy;                        /* copy from the map (--io mmap) */
	void *pinned;                        /* RAM job: pinned copy in the layout */
	const struct ntx_pack_extent *x;     /* from_disk: the layer's extent */
	int gpu_rank;                        /* index among the cycle's GPU jobs */
	int disk_rank;                       /* index among the cycle's disk jobs */
};

struct ntx_streamer {
	struct sjob *jobs;
	int n_jobs, n_gpu, n_disk;
	int n_slots, n_staging;
	char *pack_path;
	struct ntx_ring *ring;    /* NULL without GPU jobs */
	void **staging;           /* pinned, raw layout */
	void **readbuf;           /* stored bytes of compressed extents (or NULL) */
	size_t staging_bytes;
	int64_t *slot_owner;      /* job number that last used each slot (-1) */
	int64_t *stg_owner;       /* job number that last used each staging buffer */
	struct ntx_pack *pack;
	struct ntx_dio *dio;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t reader, copier;
	int reader_on, copier_on;
	int64_t read_done;        /* disk jobs read (by disk sequence number) */
	int64_t produced;         /* jobs ready for the consumer */
	int64_t consumed;         /* jobs released by the consumer */
	int64_t next;             /* the consumer's next job number */
	int stop, failed;
	struct ntx_err err;
	uint64_t bytes_h2d, bytes_disk;
	double t_disk;
	struct ntx_stream_stats pub; /* the counters as of the last release */
};

static int64_t dseq(const struct ntx_streamer *s, int64_t k)
{
	return k / s->n_jobs * s->n_disk + s->jobs[k % s->n_jobs].disk_rank;
}

static int64_t gseq(const struct ntx_streamer *s, int64_t k)
{
	return k / s->n_jobs * s->n_gpu + s->jobs[k % s->n_jobs].gpu_rank;
}

static void fail(struct ntx_streamer *s, const struct ntx_err *err)
{
	pthread_mutex_lock(&s->mu);
	if (!s->failed) {
		s->failed = 1;
		s->err = *err;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* Wait (mutex held) until pred holds or the streamer stops/fails. */
#define WAIT_UNTIL(s, pred)                                                   \
	while (!(pred) && !(s)->stop && !(s)->failed)                         \
		pthread_cond_wait(&(s)->cv, &(s)->mu)

/* ---- 1. reader thread: disk jobs into staging buffers ----
 * Two extents are in flight at once, so the disk keeps reading while the
 * I/O threads verify (and decode) the previous one. */

struct inflight {
	int64_t k;
	struct ntx_pack_read rd;
};

/* Is staging buffer b free for a new read? (mutex held) */
static int staging_free(const struct ntx_streamer *s, int b)
{
	int64_t o = s->stg_owner[b];

	if (o < 0)
		return 1;
	return s->jobs[o % s->n_jobs].to_gpu ? s->produced > o : s->consumed > o;
}

/* Account the time the reader had reads outstanding. */
static void busy_tick(struct ntx_streamer *s, int outstanding, double *last)
{
	double t = ntx_now_s();

	pthread_mutex_lock(&s->mu);
	if (outstanding > 0)
		s->t_disk += t - *last;
	pthread_mutex_unlock(&s->mu);
	*last = t;
}

static int finish_read(struct ntx_streamer *s, struct inflight *f, int outstanding, double *last,
		       struct ntx_err *err)
{
	const struct sjob *j = &s->jobs[f->k % s->n_jobs];

	if (ntx_pack_read_wait(s->dio, &f->rd, err))
		return -1;
	busy_tick(s, outstanding, last);
	pthread_mutex_lock(&s->mu);
	s->bytes_disk += j->x->stored_size;
	s->read_done = dseq(s, f->k) + 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static void *reader_main(void *p)
{
	struct ntx_streamer *s = p;
	struct ntx_err err = { 0 };
	struct inflight q[2];
	int qh = 0, qn = 0;
	double last = ntx_now_s();
	int64_t k;

	for (k = 0;; k++) {
		const struct sjob *j = &s->jobs[k % s->n_jobs];
		const struct ntx_pack_extent *x = j->x;
		int b, gpu_owner, stopped = 0;
		void *dst;

		if (!j->from_disk)
			continue;
		b = (int)(dseq(s, k) % s->n_staging);
		for (;;) { /* wait for the staging buffer without blocking reads in flight */
			int ok;

			pthread_mutex_lock(&s->mu);
			ok = staging_free(s, b);
			stopped = s->stop || s->failed;
			if (!ok && !stopped && qn == 0) {
				WAIT_UNTIL(s, staging_free(s, b));
				ok = 1;
				stopped = s->stop || s->failed;
			}
			pthread_mutex_unlock(&s->mu);
			if (stopped || ok)
				break;
			if (finish_read(s, &q[qh], qn, &last, &err))
				goto failed;
			qh ^= 1;
			qn--;
		}
		if (stopped)
			break;
		/* a GPU job's copy out of the buffer is enqueued: wait until done */
		gpu_owner = s->stg_owner[b] >= 0 && s->jobs[s->stg_owner[b] % s->n_jobs].to_gpu;
		if (gpu_owner && ntx_ring_staging_wait(s->ring, b, &err))
			goto failed;
		if (qn == 2) {
			if (finish_read(s, &q[qh], qn, &last, &err))
				goto failed;
			qh ^= 1;
			qn--;
		}
		s->stg_owner[b] = k;
		dst = x->compression || x->transform ? s->readbuf[b] : s->staging[b];
		busy_tick(s, qn, &last);
		{
			struct inflight *f = &q[(qh + qn) % 2];

			f->k = k;
			/* read and decode (checksum, decompression, planes) on the I/O threads */
			if (ntx_pack_read_submit(s->dio, s->pack, x, dst, s->staging[b], 1, &f->rd, &err))
				goto failed;
			qn++;
		}
	}
	/* stopping: let reads in flight finish before their buffers go away */
	while (qn > 0) {
		struct ntx_err e2;

		ntx_pack_read_wait(s->dio, &q[qh].rd, &e2);
		qh ^= 1;
		qn--;
	}
	return NULL;
failed:
	while (qn > 0) {
		struct ntx_err e2;

		ntx_pack_read_wait(s->dio, &q[qh].rd, &e2);
		qh ^= 1;
		qn--;
	}
	ntx_err_prefix(&err, "%s", s->pack_path);
	fail(s, &err);
	return NULL;
}

/* ---- 2. copier thread: every job in order ---- */

/* Enqueue job k's copy into ring slot sl (mutex not held). */
static int copy_job(struct ntx_streamer *s, int64_t k, int sl, const void *src, struct ntx_err *err)
{
	const struct sjob *j = &s->jobs[k % s->n_jobs];

	if (j->map_copy)
		return ntx_ring_fill_map(s->ring, sl, j->lt, j->lo, err);
	if (ntx_ring_fill(s->ring, sl, src, j->lo->total, err))
		return -1;
	/* the reader may refill the staging buffer once this copy is done */
	return j->from_disk ? ntx_ring_staging_mark(s->ring, (int)(dseq(s, k) % s->n_staging), err)
			    : 0;
}

static void *copier_main(void *p)
{
	struct ntx_streamer *s = p;
	struct ntx_err err = { 0 };
	int64_t k;

	for (k = 0;; k++) {
		const struct sjob *j = &s->jobs[k % s->n_jobs];
		const void *src = j->pinned;

		pthread_mutex_lock(&s->mu);
		if (j->from_disk) {
			int64_t d = dseq(s, k);

			WAIT_UNTIL(s, s->read_done > d);
			src = s->staging[d % s->n_staging];
		}
		if (j->to_gpu) {
			int sl = (int)(gseq(s, k) % s->n_slots);

			WAIT_UNTIL(s, s->slot_owner[sl] < 0 || s->consumed > s->slot_owner[sl]);
			if (s->stop || s->failed) {
				pthread_mutex_unlock(&s->mu);
				break;
			}
			s->slot_owner[sl] = k;
			pthread_mutex_unlock(&s->mu);
			if (copy_job(s, k, sl, src, &err)) {
				fail(s, &err);
				break;
			}
			pthread_mutex_lock(&s->mu);
			s->bytes_h2d += j->lo->total;
		}
		if (s->stop || s->failed) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		s->produced = k + 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

/* ---- 3, 4. consumer side ---- */

static const struct sjob *expect(struct ntx_streamer *s, int l, struct ntx_err *err)
{
	const struct sjob *j = &s->jobs[s->next % s->n_jobs];

	if (j->layer != l) {
		ntx_err_set(err, NTX_EINVAL,
			    "internal: the streamer expected layer %d, the engine asked for layer %d",
			    j->layer, l);
		return NULL;
	}
	return j;
}

int ntx_streamer_acquire(struct ntx_streamer *s, int l, const void **base, struct ntx_err *err)
{
	const struct sjob *j = expect(s, l, err);
	int64_t k = s->next;

	if (!j)
		return -1;
	pthread_mutex_lock(&s->mu);
	WAIT_UNTIL(s, s->produced > k);
	if (s->failed) {
		*err = s->err;
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	pthread_mutex_unlock(&s->mu);
	if (!j->to_gpu) {
		*base = s->staging[dseq(s, k) % s->n_staging];
		return 0;
	}
	{
		int sl = (int)(gseq(s, k) % s->n_slots);

		/* the compute stream waits for the slot's copy */
		if (ntx_ring_acquire(s->ring, sl, err))
			return -1;
		*base = ntx_ring_slot(s->ring, sl);
	}
	return 0;
}

int ntx_streamer_release(struct ntx_streamer *s, int l, struct ntx_err *err)
{
	const struct sjob *j = expect(s, l, err);
	int64_t k = s->next;

	if (!j)
		return -1;
	/* the compute stream marks the slot free after the work using it */
	if (j->to_gpu && ntx_ring_release(s->ring, (int)(gseq(s, k) % s->n_slots), err))
		return -1;
	pthread_mutex_lock(&s->mu);
	s->next = k + 1;
	s->consumed = k + 1;
	s->pub.bytes_h2d = s->bytes_h2d;
	s->pub.bytes_disk = s->bytes_disk;
	s->pub.t_disk_s = s->t_disk;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void ntx_streamer_stats(struct ntx_streamer *s, struct ntx_stream_stats *st)
{
	pthread_mutex_lock(&s->mu);
	*st = s->pub;
	pthread_mutex_unlock(&s->mu);
}

void ntx_streamer_take_times(struct ntx_streamer *s, double *t_copy, double *t_wait)
{
	if (s->ring)
		ntx_ring_take_times(s->ring, t_copy, t_wait);
	else
		*t_copy = *t_wait = 0;
}

/* ---- the threads ---- */

static int start_threads(struct ntx_streamer *s, struct ntx_err *err)
{
	int rc;

	s->read_done = s->produced = s->consumed = s->next = 0;
	s->stop = s->failed = 0;
	memset(&s->err, 0, sizeof s->err);
	for (rc = 0; rc < s->n_slots; rc++)
		s->slot_owner[rc] = -1;
	for (rc = 0; rc < s->n_staging; rc++)
		s->stg_owner[rc] = -1;
	if (s->n_disk) {
		rc = pthread_create(&s->reader, NULL, reader_main, s);
		if (rc)
			return ntx_err_errno(err, rc, "starting the reader thread");
		s->reader_on = 1;
	}
	rc = pthread_create(&s->copier, NULL, copier_main, s);
	if (rc)
		return ntx_err_errno(err, rc, "starting the copier thread");
	s->copier_on = 1;
	return 0;
}

static void stop_threads(struct ntx_streamer *s)
{
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (s->reader_on)
		pthread_join(s->reader, NULL);
	if (s->copier_on)
		pthread_join(s->copier, NULL);
	s->reader_on = s->copier_on = 0;
}

int ntx_streamer_reset(struct ntx_streamer *s, struct ntx_err *err)
{
	stop_threads(s);
	if (s->ring && ntx_ring_sync(s->ring, err))
		return -1;
	return start_threads(s, err);
}

/* ---- setup ---- */

/* The job list, checked, with ranks; the ring's geometry. */
static int take_jobs(struct ntx_streamer *s, const struct ntx_stream_params *p,
		     const struct ntx_stream_job *jobs, int n, uint64_t *slot_bytes,
		     struct ntx_err *err)
{
	int i;

	if (n < 1)
		return ntx_err_set(err, NTX_EINVAL, "internal: a streamer needs at least one job");
	s->jobs = calloc((size_t)n, sizeof *s->jobs);
	if (!s->jobs)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	*slot_bytes = 0;
	for (i = 0; i < n; i++) {
		const struct ntx_stream_job *in = &jobs[i];
		struct sjob *j = &s->jobs[i];

		if (!in->lo || (in->src != NTX_STREAM_PACK && (!in->to_gpu || !in->lt)) ||
		    (in->src != NTX_STREAM_RAM && in->src != NTX_STREAM_PACK &&
		     in->src != NTX_STREAM_MAP))
			return ntx_err_set(err, NTX_EINVAL, "internal: bad streamer job for layer %d",
					   in->layer);
		j->layer = in->layer;
		j->to_gpu = in->to_gpu != 0;
		j->from_disk = in->src == NTX_STREAM_PACK;
		j->map_copy = in->src == NTX_STREAM_MAP;
		j->lt = in->lt;
		j->lo = in->lo;
		j->gpu_rank = j->to_gpu ? s->n_gpu++ : -1;
		j->disk_rank = j->from_disk ? s->n_disk++ : -1;
		if (j->to_gpu && j->lo->total > *slot_bytes)
			*slot_bytes = j->lo->total;
	}
	s->n_jobs = n;
	s->n_slots = s->n_gpu ? (p->ring_slots >= 2 ? p->ring_slots : 3) : 0;
	return 0;
}

struct pin_ctx {
	struct sjob **jobs;
	int n;
};

static void pin_worker(void *p, int ith, int nth)
{
	struct pin_ctx *c = p;
	int i;

	for (i = ith; i < c->n; i += nth)
		ntx_layer_pack_copy(c->jobs[i]->lt, c->jobs[i]->lo, c->jobs[i]->pinned);
}

/* Pinned copies of the RAM jobs' layers, made on the pool's threads. */
static int pin_ram_jobs(struct ntx_streamer *s, struct ntx_pool *pool, struct ntx_err *err)
{
	struct pin_ctx pc = { calloc((size_t)s->n_jobs, sizeof(struct sjob *)), 0 };
	int i;

	if (!pc.jobs)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (i = 0; i < s->n_jobs; i++) {
		struct sjob *j = &s->jobs[i];

		if (!j->to_gpu || j->from_disk || j->map_copy)
			continue;
		j->pinned = ntx_host_alloc(j->lo->total, err);
		if (!j->pinned) {
			ntx_err_prefix(err, "pinned memory for layer %d", j->layer);
			free(pc.jobs);
			return -1;
		}
		pc.jobs[pc.n++] = j;
	}
	if (pool)
		ntx_pool_run(pool, pin_worker, &pc);
	else
		pin_worker(&pc, 0, 1);
	free(pc.jobs);
	return 0;
}

/* The pack, checked against the model and the jobs; the direct-I/O pool;
 * the staging buffers. */
static int open_pack(struct ntx_streamer *s, const struct ntx_stream_params *p,
		     struct ntx_err *err)
{
	uint64_t max_raw = 0, max_stored = 0;
	int i;

	if (!p->pack_path)
		return ntx_err_set(err, NTX_EINVAL,
				   "the plan puts layers on disk but names no pack file (make one with ntx-pack, give --pack)");
	s->pack_path = strdup(p->pack_path);
	if (!s->pack_path)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	s->pack = ntx_pack_open(s->pack_path, err);
	if (!s->pack) {
		ntx_err_prefix(err, "%s", s->pack_path);
		return -1;
	}
	if (ntx_pack_check_model(s->pack, p->m, err)) {
		ntx_err_prefix(err, "%s", s->pack_path);
		return -1;
	}
	for (i = 0; i < s->n_jobs; i++) {
		struct sjob *j = &s->jobs[i];

		if (!j->from_disk)
			continue;
		j->x = ntx_pack_extent_for_layer(s->pack, j->layer);
		if (!j->x)
			return ntx_err_set(err, NTX_EMISMATCH,
					   "%s: layer %d is on disk in the plan but not in the pack (re-run ntx-pack with this plan)",
					   s->pack_path, j->layer);
		if (j->x->raw_size > max_raw)
			max_raw = j->x->raw_size;
		if (j->x->stored_size > max_stored)
			max_stored = j->x->stored_size;
	}
	/* 8 threads, 16 MiB chunks: a queue deep enough for NVMe and large
	 * enough reads for virtio disks (measured: 4 x 8 MiB read at 86% of
	 * the raw O_DIRECT rate with verification running alongside) */
	s->dio = ntx_dio_open(s->pack_path, p->io_threads > 0 ? p->io_threads : 8,
			      p->io_chunk ? p->io_chunk : 16 << 20, p->tun, err);
	if (!s->dio) {
		ntx_err_prefix(err, "%s", s->pack_path);
		return -1;
	}
	s->staging = calloc((size_t)s->n_staging, sizeof *s->staging);
	s->readbuf = calloc((size_t)s->n_staging, sizeof *s->readbuf);
	if (!s->staging || !s->readbuf)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	s->staging_bytes = (max_raw > max_stored ? max_raw : max_stored) + 4096;
	s->staging_bytes = (s->staging_bytes + 4095) & ~(size_t)4095;
	for (i = 0; i < s->n_staging; i++) {
		s->staging[i] = ntx_host_alloc(s->staging_bytes, err);
		if (!s->staging[i])
			return -1;
		if (posix_memalign(&s->readbuf[i], 4096, s->staging_bytes))
			return ntx_err_set(err, NTX_ENOMEM, "out of memory for read buffers");
	}
	return 0;
}

struct ntx_streamer *ntx_streamer_new(const struct ntx_stream_params *p,
				      const struct ntx_stream_job *jobs, int n, struct ntx_err *err)
{
	struct ntx_streamer *s = calloc(1, sizeof *s);
	uint64_t slot_bytes = 0;

	if (!s) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (take_jobs(s, p, jobs, n, &slot_bytes, err))
		goto fail;
	s->n_staging = s->n_disk ? (p->n_staging > 0 ? p->n_staging : 3) : 0;
	/* the ring first: device memory right after the engine's */
	if (s->n_gpu) {
		s->ring = ntx_ring_new(s->n_slots, slot_bytes, s->n_staging, p->compute, err);
		if (!s->ring)
			goto fail;
	}
	if (pin_ram_jobs(s, p->pool, err) || (s->n_disk && open_pack(s, p, err)))
		goto fail;
	s->slot_owner = calloc((size_t)(s->n_slots > 0 ? s->n_slots : 1), sizeof *s->slot_owner);
	s->stg_owner = calloc((size_t)(s->n_staging > 0 ? s->n_staging : 1), sizeof *s->stg_owner);
	if (!s->slot_owner || !s->stg_owner) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	if (start_threads(s, err))
		goto fail;
	return s;
fail:
	ntx_streamer_free(s);
	return NULL;
}

void ntx_streamer_free(struct ntx_streamer *s)
{
	int i;

	if (!s)
		return;
	stop_threads(s);
	ntx_ring_free(s->ring); /* waits for the copies out of the buffers below */
	ntx_dio_close(s->dio);
	ntx_pack_close(s->pack);
	for (i = 0; s->staging && i < s->n_staging; i++) {
		ntx_host_free(s->staging[i]);
		free(s->readbuf[i]);
	}
	for (i = 0; s->jobs && i < s->n_jobs; i++)
		ntx_host_free(s->jobs[i].pinned);
	free(s->staging);
	free(s->readbuf);
	free(s->slot_owner);
	free(s->stg_owner);
	free(s->jobs);
	free(s->pack_path);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}
