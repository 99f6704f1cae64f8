/* engine_stream.c - the streamer: feeds every non-resident layer to its
 * executor, in layer order, ahead of the compute.
 *
 * The weights a forward pass needs are the same every token, so the
 * streamer runs a cyclic schedule of "jobs" (one per non-resident layer that
 * needs data moved) with monotonic job numbers k (job k is jobs[k % n]):
 *   - a reader thread reads disk-home layers from the pack (O_DIRECT, many
 *     chunks in flight) into pinned staging buffers, as far ahead as the
 *     staging buffers allow;
 *   - a copier thread, for every GPU-executed job, waits until its ring slot
 *     is free (the job that used the slot before was released by the compute
 *     side) and enqueues the host-to-device copy on the copy stream, from the
 *     pinned RAM copy or the staging buffer;
 *   - the layer loop (engine.c) acquires job k (waits until it is produced;
 *     on the GPU, the compute stream waits for the copy's event) and
 *     releases it when its compute is enqueued (GPU) or done (CPU).
 * So reading layer i+2, copying layer i+1 and computing layer i happen at
 * once, CPU-executed layers included. Errors (read errors, checksums) stop
 * the streamer and are returned by the next acquire: never a hang. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dio.h"
#include "engine_int.h"
#include "pack_read.h"

struct sjob {
	int layer;
	int to_gpu;     /* copy into a ring slot */
	int from_disk;  /* read from the pack first */
	int gpu_rank;   /* index among the cycle's GPU jobs */
	int disk_rank;  /* index among the cycle's disk jobs */
};

struct ntx_streamer {
	struct ntx_engine *e;
	struct sjob *jobs;
	int n_jobs, n_gpu, n_disk;
	int n_slots, n_staging;
	void **staging;           /* pinned, raw layout */
	void **readbuf;           /* stored bytes of compressed extents (or NULL) */
	size_t staging_bytes, readbuf_bytes;
	int64_t *slot_owner;      /* job number that last used each slot (-1) */
	int64_t *stg_owner;       /* job number that last used each staging buffer */
	struct ntx_pack *pack;
	struct ntx_dio *dio;
	int mmap_mode;
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

/* ---- reader thread: disk jobs into staging buffers ----
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
	const struct ntx_pack_extent *x = ntx_pack_extent_for_layer(s->pack, j->layer);

	if (ntx_pack_read_wait(s->dio, &f->rd, err))
		return -1;
	busy_tick(s, outstanding, last);
	pthread_mutex_lock(&s->mu);
	s->bytes_disk += x->stored_size;
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
		const struct ntx_pack_extent *x;
		int b, gpu_owner, stopped = 0;
		void *dst;

		if (!j->from_disk)
			continue;
		x = ntx_pack_extent_for_layer(s->pack, j->layer);
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
		gpu_owner = s->stg_owner[b] >= 0 && s->jobs[s->stg_owner[b] % s->n_jobs].to_gpu;
		if (gpu_owner && ntx_gpu_staging_wait(s->e, b, &err))
			goto failed;
		if (!x) {
			ntx_err_set(&err, NTX_EMISMATCH, "layer %d is not in the pack", j->layer);
			goto failed;
		}
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
	ntx_err_prefix(&err, "%s", s->e->pack_path);
	fail(s, &err);
	return NULL;
}

/* ---- copier thread: every job in order ---- */

static void *copier_main(void *p)
{
	struct ntx_streamer *s = p;
	struct ntx_engine *e = s->e;
	struct ntx_err err = { 0 };
	int64_t k;

	for (k = 0;; k++) {
		const struct sjob *j = &s->jobs[k % s->n_jobs];
		const struct eng_layer *L = &e->layers[j->layer];
		const void *src = L->pinned;

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
			if (ntx_gpu_slot_fill(e, sl, src, L->lo.total,
					      s->mmap_mode && !j->from_disk ? j->layer : -1, &err) ||
			    (j->from_disk &&
			     ntx_gpu_staging_mark(e, (int)(dseq(s, k) % s->n_staging), &err))) {
				fail(s, &err);
				break;
			}
			pthread_mutex_lock(&s->mu);
			s->bytes_h2d += L->lo.total;
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

/* ---- setup ---- */

void ntx_stream_ring(const struct ntx_engine *e, int *n_slots, uint64_t *slot_bytes)
{
	uint64_t mx = 0;
	int l, any = 0;

	for (l = 0; l < e->cfg.n_layer; l++) {
		const struct eng_layer *L = &e->layers[l];

		if (!e->skip[l] && L->exec == NTX_EXEC_GPU && L->home != NTX_TIER_VRAM) {
			any = 1;
			if (L->lo.total > mx)
				mx = L->lo.total;
		}
	}
	*n_slots = any ? (e->o.plan && e->o.plan->ring_slots >= 2 ? e->o.plan->ring_slots : 3) : 0;
	*slot_bytes = mx;
}

struct pin_ctx {
	struct ntx_engine *e;
	int *layers;
	int n;
};

static void pin_worker(void *p, int ith, int nth)
{
	struct pin_ctx *c = p;
	int i;

	for (i = ith; i < c->n; i += nth) {
		struct eng_layer *L = &c->e->layers[c->layers[i]];

		ntx_layer_pack_copy(&c->e->m->layers[c->layers[i]], &L->lo, L->pinned);
	}
}

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

int ntx_stream_start(struct ntx_engine *e, struct ntx_err *err)
{
	struct ntx_streamer *s = calloc(1, sizeof *s);
	struct pin_ctx pc = { e, NULL, 0 };
	int l, i;
	uint64_t max_raw = 0, max_stored = 0;

	if (!s)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	e->str = s;
	s->e = e;
	s->mmap_mode = e->o.io == NTX_IO_MMAP;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->jobs = calloc((size_t)e->cfg.n_layer, sizeof *s->jobs);
	pc.layers = calloc((size_t)e->cfg.n_layer, sizeof *pc.layers);
	if (!s->jobs || !pc.layers) {
		free(pc.layers);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	for (l = 0; l < e->cfg.n_layer; l++) {
		struct eng_layer *L = &e->layers[l];
		struct sjob *j = &s->jobs[s->n_jobs];
		int disk = L->home == NTX_TIER_DISK && !s->mmap_mode;

		if (e->skip[l] || L->home == NTX_TIER_VRAM)
			continue;
		if (L->exec != NTX_EXEC_GPU && !disk)
			continue; /* computed in place from the GGUF map */
		j->layer = l;
		j->to_gpu = L->exec == NTX_EXEC_GPU;
		j->from_disk = disk;
		j->gpu_rank = j->to_gpu ? s->n_gpu++ : -1;
		j->disk_rank = disk ? s->n_disk++ : -1;
		L->job = s->n_jobs++;
		if (j->to_gpu && !disk && !s->mmap_mode)
			pc.layers[pc.n++] = l;
	}
	if (!s->n_jobs) { /* nothing to move (every job number is taken mod n_jobs) */
		free(pc.layers);
		ntx_stream_stop(e);
		return 0;
	}
	/* pinned copies of RAM-tier layers that stream to the GPU */
	for (i = 0; i < pc.n; i++) {
		struct eng_layer *L = &e->layers[pc.layers[i]];

		L->pinned = ntx_host_alloc(L->lo.total, err);
		if (!L->pinned) {
			ntx_err_prefix(err, "pinned memory for layer %d", pc.layers[i]);
			free(pc.layers);
			return -1;
		}
	}
	ntx_pool_run(e->pool, pin_worker, &pc);
	free(pc.layers);
	if (s->n_disk) {
		if (!e->pack_path)
			return ntx_err_set(err, NTX_EINVAL,
					   "the plan puts layers on disk but names no pack file (make one with ntx-pack, give --pack)");
		s->pack = ntx_pack_open(e->pack_path, err);
		if (!s->pack) {
			ntx_err_prefix(err, "%s", e->pack_path);
			return -1;
		}
		if (ntx_pack_check_model(s->pack, e->m, err)) {
			ntx_err_prefix(err, "%s", e->pack_path);
			return -1;
		}
		for (i = 0; i < s->n_jobs; i++) {
			const struct ntx_pack_extent *x;

			if (!s->jobs[i].from_disk)
				continue;
			x = ntx_pack_extent_for_layer(s->pack, s->jobs[i].layer);
			if (!x)
				return ntx_err_set(err, NTX_EMISMATCH,
						   "%s: layer %d is on disk in the plan but not in the pack (re-run ntx-pack with this plan)",
						   e->pack_path, s->jobs[i].layer);
			if (x->raw_size > max_raw)
				max_raw = x->raw_size;
			if (x->stored_size > max_stored)
				max_stored = x->stored_size;
		}
		/* 8 threads, 16 MiB chunks: a queue deep enough for NVMe and large
		 * enough reads for virtio disks (measured: 4 x 8 MiB read at 86% of
		 * the raw O_DIRECT rate with verification running alongside) */
		s->dio = ntx_dio_open(e->pack_path, 8, 16 << 20, &e->tun, err);
		if (!s->dio) {
			ntx_err_prefix(err, "%s", e->pack_path);
			return -1;
		}
		s->n_staging = 3;
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
	}
	ntx_stream_ring(e, &s->n_slots, &max_raw);
	s->slot_owner = calloc((size_t)(s->n_slots > 0 ? s->n_slots : 1), sizeof *s->slot_owner);
	s->stg_owner = calloc((size_t)(s->n_staging > 0 ? s->n_staging : 1), sizeof *s->stg_owner);
	if (!s->slot_owner || !s->stg_owner)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	return start_threads(s, err);
}

void ntx_stream_stop(struct ntx_engine *e)
{
	struct ntx_streamer *s = e->str;
	int i;

	if (!s)
		return;
	stop_threads(s);
	ntx_dio_close(s->dio);
	ntx_pack_close(s->pack);
	for (i = 0; s->staging && i < s->n_staging; i++) {
		ntx_host_free(s->staging[i]);
		free(s->readbuf[i]);
	}
	for (i = 0; i < e->cfg.n_layer; i++) {
		ntx_host_free(e->layers[i].pinned);
		e->layers[i].pinned = NULL;
	}
	free(s->staging);
	free(s->readbuf);
	free(s->slot_owner);
	free(s->stg_owner);
	free(s->jobs);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	e->str = NULL;
}

int ntx_stream_reset(struct ntx_engine *e, struct ntx_err *err)
{
	struct ntx_streamer *s = e->str;

	stop_threads(s);
	if (e->gpu && ntx_gpu_sync(e, err))
		return -1;
	return start_threads(s, err);
}

/* ---- consumer side ---- */

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

int ntx_stream_acquire(struct ntx_engine *e, int l, const void **base, struct ntx_err *err)
{
	struct ntx_streamer *s = e->str;
	const struct sjob *j = expect(s, l, err);
	int64_t k = s->next;
	double t0 = ntx_now_s();

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
		e->st.t_cpu_wait_s += ntx_now_s() - t0;
		*base = s->staging[dseq(s, k) % s->n_staging];
		return 0;
	}
	{
		int sl = (int)(gseq(s, k) % s->n_slots);

		if (ntx_gpu_slot_acquire(e, sl, err))
			return -1;
		*base = ntx_gpu_slot(e, sl);
	}
	return 0;
}

int ntx_stream_release(struct ntx_engine *e, int l, struct ntx_err *err)
{
	struct ntx_streamer *s = e->str;
	const struct sjob *j = expect(s, l, err);
	int64_t k = s->next;

	if (!j)
		return -1;
	if (j->to_gpu && ntx_gpu_slot_release(e, (int)(gseq(s, k) % s->n_slots), err))
		return -1;
	pthread_mutex_lock(&s->mu);
	s->next = k + 1;
	s->consumed = k + 1;
	e->st.bytes_h2d = s->bytes_h2d;
	e->st.bytes_disk = s->bytes_disk;
	e->st.t_disk_s = s->t_disk;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}
