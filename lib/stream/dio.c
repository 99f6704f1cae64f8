/* dio.c - direct-I/O reads with a pool of threads (see dio.h).
 *
 * Two queues, oldest first: requests with chunks left to read, and requests
 * whose reads are done and whose hook parts are left. A free thread reads
 * when fewer than half the threads are reading (so the disk always has
 * reads in flight while others decode), else runs a hook part (finishing the
 * oldest request first is what a consumer reading layers in order wants),
 * else reads. The mutex is held only to hand out work and to count
 * completions, never during a read or a hook. */
#include "dio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ntx_dio {
	int fd;
	int direct;
	size_t chunk;
	int n_threads;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t work; /* the queue has work, or stop */
	pthread_cond_t done; /* a request finished */
	struct ntx_dio_req *rq, *rq_tail; /* chunks left to read */
	struct ntx_dio_req *hq, *hq_tail; /* hook parts left */
	int n_reading;        /* threads in a read now */
	int min_readers;      /* reads get this many threads first */
	int stop;
	uint64_t reads;       /* chunk reads issued */
	uint64_t fault_at;    /* tunables fault_read, NTX_FAULT_READ (0 = off) */
	int fault_every;
};

/* ---- one chunk ---- */

static int truncated(struct ntx_dio *d, struct ntx_dio_req *r, struct ntx_err *err)
{
	uint64_t size = ntx_dio_file_size(d);

	if (r->layer >= 0)
		return ntx_err_set(err, NTX_EFORMAT,
				   "pack file truncated: extent of layer %d at offset %" PRIu64
				   " needs %zu bytes, file has %" PRIu64,
				   r->layer, r->off, r->len, size);
	return ntx_err_set(err, NTX_EFORMAT,
			   "file truncated: read at offset %" PRIu64 " needs %zu bytes, file has %" PRIu64,
			   r->off, r->len, size);
}

static int read_chunk(struct ntx_dio *d, struct ntx_dio_req *r, size_t i, uint64_t nth,
		      struct ntx_err *err)
{
	uint64_t off = r->off + (uint64_t)i * d->chunk;
	size_t len = r->len - i * d->chunk, done = 0;
	char what[64] = "";

	if (len > d->chunk)
		len = d->chunk;
	if (r->layer >= 0)
		snprintf(what, sizeof what, " (extent of layer %d)", r->layer);
	if (d->fault_at && (nth == d->fault_at || (d->fault_every && nth > d->fault_at)))
		return ntx_err_errno(err, EIO, "read of %zu bytes at offset %" PRIu64 "%s", len, off,
				     what);
	while (done < len) {
		ssize_t n = pread(d->fd, r->dst + i * d->chunk + done, len - done,
				  (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ntx_err_errno(err, errno, "read of %zu bytes at offset %" PRIu64 "%s",
					     len - done, off + done, what);
		if (n == 0)
			return truncated(d, r, err);
		done += (size_t)n;
		if (done < len && d->direct && done % NTX_DIO_ALIGN) {
			/* O_DIRECT stops short only at the end of the file; the
			 * rest could not be read at an unaligned offset anyway */
			if (ntx_dio_file_size(d) < off + len)
				return truncated(d, r, err);
			return ntx_err_set(err, NTX_EIO,
					   "short read: %zu of %zu bytes at offset %" PRIu64 "%s", done,
					   len, off, what);
		}
	}
	return 0;
}

/* ---- the pool ---- */

static void finish(struct ntx_dio *d, struct ntx_dio_req *r)
{
	r->phase = 2;
	pthread_cond_broadcast(&d->done);
}

static void fail(struct ntx_dio_req *r, const struct ntx_err *e)
{
	if (!r->failed) {
		r->failed = 1;
		r->err = *e;
	}
}

static void push(struct ntx_dio_req **head, struct ntx_dio_req **tail, struct ntx_dio_req *r)
{
	r->next = NULL;
	if (*tail)
		(*tail)->next = r;
	else
		*head = r;
	*tail = r;
}

static void pop(struct ntx_dio_req **head, struct ntx_dio_req **tail)
{
	*head = (*head)->next;
	if (!*head)
		*tail = NULL;
}

static void do_read(struct ntx_dio *d, struct ntx_dio_req *r)
{
	size_t i = r->chunk_next++;
	int skip = r->failed, rc = 0;
	uint64_t nth = 0;
	struct ntx_err e;

	ntx_err_clear(&e);
	if (r->chunk_next == r->n_chunks)
		pop(&d->rq, &d->rq_tail);
	if (!skip)
		nth = ++d->reads;
	d->n_reading++;
	pthread_mutex_unlock(&d->mu);
	if (!skip)
		rc = read_chunk(d, r, i, nth, &e);
	pthread_mutex_lock(&d->mu);
	d->n_reading--;
	if (rc)
		fail(r, &e);
	if (--r->chunks_left)
		return;
	if (r->failed || !r->hook) {
		finish(d, r);
		return;
	}
	r->phase = 1;
	r->parts_next = 0;
	r->parts_left = r->hook_parts;
	push(&d->hq, &d->hq_tail, r);
	pthread_cond_broadcast(&d->work);
}

static void do_hook(struct ntx_dio *d, struct ntx_dio_req *r)
{
	int part = r->parts_next++;
	int skip = r->failed, rc = 0;
	struct ntx_err e;

	ntx_err_clear(&e);
	if (r->parts_next == r->hook_parts)
		pop(&d->hq, &d->hq_tail);
	pthread_mutex_unlock(&d->mu);
	if (!skip) {
		rc = r->hook(r->hook_arg, part, &e);
		if (rc && !e.msg[0])
			ntx_err_set(&e, NTX_EIO, "post-read hook failed (part %d)", part);
	}
	pthread_mutex_lock(&d->mu);
	if (rc)
		fail(r, &e);
	if (--r->parts_left == 0)
		finish(d, r);
}

static void *worker(void *arg)
{
	struct ntx_dio *d = arg;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!d->rq && !d->hq && !d->stop)
			pthread_cond_wait(&d->work, &d->mu);
		if (d->rq && (!d->hq || d->n_reading < d->min_readers))
			do_read(d, d->rq);
		else if (d->hq)
			do_hook(d, d->hq);
		else
			break; /* stop, and nothing left */
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* The fault-injection switches of t (NULL: none). */
static int fault_set(struct ntx_dio *d, const struct ntx_tunables *t, struct ntx_err *err)
{
	if (!t || !t->fault_read)
		return 0;
	if (t->fault_read < 0)
		return ntx_err_set(err, NTX_EINVAL, "NTX_FAULT_READ: not an integer in [1, %" PRId64 "]",
				   INT64_MAX);
	d->fault_at = (uint64_t)t->fault_read;
	d->fault_every = t->fault_read_every;
	return 0;
}

struct ntx_dio *ntx_dio_open(const char *path, int threads, size_t chunk,
			     const struct ntx_tunables *tun, struct ntx_err *err)
{
	struct ntx_dio *d;
	int i;

	ntx_err_clear(err);
	if (threads == 0)
		threads = NTX_DIO_DEFAULT_THREADS;
	if (threads < 1 || threads > NTX_DIO_MAX_THREADS) {
		ntx_err_set(err, NTX_EINVAL, "%d I/O threads is not in [1, %d]", threads,
			    NTX_DIO_MAX_THREADS);
		return NULL;
	}
	if (chunk == 0)
		chunk = NTX_DIO_DEFAULT_CHUNK;
	if (chunk > (1u << 30)) {
		ntx_err_set(err, NTX_EINVAL, "chunk size %zu exceeds 1 GiB", chunk);
		return NULL;
	}
	chunk = (chunk + NTX_DIO_ALIGN - 1) / NTX_DIO_ALIGN * NTX_DIO_ALIGN;
	d = calloc(1, sizeof *d);
	if (!d) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	d->chunk = chunk;
	if (fault_set(d, tun, err)) {
		free(d);
		return NULL;
	}
	if (tun && tun->dio_buffered) { /* tests: force the fallback */
		d->fd = -1;
		errno = EINVAL;
	} else {
		d->fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	}
	d->direct = d->fd >= 0;
	if (d->fd < 0 && errno == EINVAL) {
		d->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (d->fd >= 0)
			(void)posix_fadvise(d->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	if (d->fd < 0) {
		ntx_err_errno(err, errno, "%s", "");
		free(d);
		return NULL;
	}
	d->threads = calloc((size_t)threads, sizeof *d->threads);
	if (!d->threads) {
		close(d->fd);
		free(d);
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	d->min_readers = threads / 2 > 0 ? threads / 2 : 1;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->done, NULL);
	for (i = 0; i < threads; i++) {
		int rc = pthread_create(&d->threads[i], NULL, worker, d);

		if (rc) {
			d->n_threads = i;
			ntx_dio_close(d);
			ntx_err_errno(err, rc, "creating I/O thread %d", i);
			return NULL;
		}
	}
	d->n_threads = threads;
	return d;
}

void ntx_dio_close(struct ntx_dio *d)
{
	int i;

	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->mu);
	for (i = 0; i < d->n_threads; i++)
		pthread_join(d->threads[i], NULL);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->done);
	close(d->fd);
	free(d->threads);
	free(d);
}

int ntx_dio_direct(const struct ntx_dio *d)
{
	return d->direct;
}

uint64_t ntx_dio_file_size(const struct ntx_dio *d)
{
	struct stat st;

	return fstat(d->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
}

uint64_t ntx_dio_reads(const struct ntx_dio *d)
{
	uint64_t n;

	pthread_mutex_lock((pthread_mutex_t *)&d->mu);
	n = d->reads;
	pthread_mutex_unlock((pthread_mutex_t *)&d->mu);
	return n;
}

int ntx_dio_submit(struct ntx_dio *d, uint64_t off, size_t len, void *dst,
		   struct ntx_dio_req *req, struct ntx_err *err)
{
	if (req->hook && req->hook_parts < 1)
		return ntx_err_set(err, NTX_EINVAL, "a hook needs at least one part (got %d)",
				   req->hook_parts);
	if (len && !dst)
		return ntx_err_set(err, NTX_EINVAL, "no destination buffer");
	if (off > INT64_MAX || len > INT64_MAX - off)
		return ntx_err_set(err, NTX_EINVAL, "read of %zu bytes at offset %" PRIu64
				   " overflows", len, off);
	if (d->direct && (off % NTX_DIO_ALIGN || len % NTX_DIO_ALIGN ||
			  (uintptr_t)dst % NTX_DIO_ALIGN))
		return ntx_err_set(err, NTX_EINVAL,
				   "direct read of %zu bytes at offset %" PRIu64
				   " into %p: all three must be multiples of %u",
				   len, off, dst, NTX_DIO_ALIGN);
	req->next = NULL;
	req->off = off;
	req->len = len;
	req->dst = dst;
	req->n_chunks = (len + d->chunk - 1) / d->chunk;
	req->chunk_next = 0;
	req->chunks_left = req->n_chunks;
	req->parts_next = 0;
	req->parts_left = 0;
	req->failed = 0;
	ntx_err_clear(&req->err);
	pthread_mutex_lock(&d->mu);
	if (req->n_chunks) {
		req->phase = 0;
		push(&d->rq, &d->rq_tail, req);
	} else if (req->hook) {
		req->phase = 1;
		req->parts_left = req->hook_parts;
		push(&d->hq, &d->hq_tail, req);
	} else {
		req->phase = 2;
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

int ntx_dio_wait(struct ntx_dio *d, struct ntx_dio_req *req, struct ntx_err *err)
{
	pthread_mutex_lock(&d->mu);
	while (req->phase != 2)
		pthread_cond_wait(&d->done, &d->mu);
	pthread_mutex_unlock(&d->mu);
	if (req->failed) {
		if (err)
			*err = req->err;
		return -1;
	}
	return 0;
}

int ntx_dio_done(struct ntx_dio *d, struct ntx_dio_req *req)
{
	int done;

	pthread_mutex_lock(&d->mu);
	done = req->phase == 2;
	pthread_mutex_unlock(&d->mu);
	return done;
}

void *ntx_dio_alloc(size_t n)
{
	void *p = NULL;

	n = (n + NTX_DIO_ALIGN - 1) / NTX_DIO_ALIGN * NTX_DIO_ALIGN;
	if (posix_memalign(&p, NTX_DIO_ALIGN, n ? n : NTX_DIO_ALIGN) != 0)
		return NULL;
	return p;
}
