/* pool.c - a thread pool tuned for many short parallel regions.
 *
 * Decode calls ntx_pool_run hundreds of times per token, each region a few
 * to a few hundred microseconds, so waking workers must cost far less than
 * a syscall. Workers are persistent: a run publishes fn/ctx and bumps the
 * generation counter `gen`; idle workers spin on it (pause, then yielding)
 * for about SPIN_NS before sleeping on a futex.
 *
 * The indices ith = 1..n-1 are claimed, not assigned: a worker that wakes
 * for generation g takes the next unclaimed ith of g with a CAS on `claim`
 * (generation in the high half, next ith in the low half). The caller runs
 * ith 0 and then claims whatever no worker has started, so it only ever
 * waits for work that is actually running: a worker that is descheduled
 * (more threads than free cores, a busy machine) does not stall the run.
 * A worker reads fn/ctx only after a successful claim, and the caller does
 * not return before every claimed ith is done, so a late worker never
 * touches a finished run's context.
 *
 * Lost wake-ups are prevented the usual way (Dekker with seq_cst): a
 * sleeper announces itself (sleepers / caller_waiting) before re-checking
 * the word it sleeps on, and the waker changes the word before checking for
 * sleepers; FUTEX_WAIT itself re-checks the word in the kernel. All data
 * handed over is ordered by atomics, so the pool is clean under
 * ThreadSanitizer. Linux only (futex). */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ntx_cpu.h"

#define NTX_POOL_MAX 1024
#define SPIN_NS 200000      /* how long an idle worker spins before sleeping */
#define YIELD_AFTER_NS 5000 /* spin this long before yielding between checks */

struct ntx_pool {
	alignas(64) _Atomic uint32_t gen; /* futex word: bumped once per run */
	_Atomic int sleepers;             /* workers in (or entering) futex wait */
	_Atomic int stop;
	alignas(64) _Atomic uint64_t claim; /* gen << 32 | next ith to hand out */
	ntx_pool_fn fn;                     /* published before claim */
	void *ctx;
	alignas(64) _Atomic uint32_t done; /* futex word: iths >= 1 finished this run */
	_Atomic int caller_waiting;
	alignas(64) int n;                 /* threads, caller included */
	int n_started;                     /* workers created */
	pthread_t *threads;                /* n - 1 */
};

/* ---- futex and spinning ---- */

static void futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
	/* EAGAIN (word changed) and EINTR both just mean "look again". */
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int n)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin while (*word == v) == equal, for at most about SPIN_NS. Returns the
 * last value seen. After the first few microseconds the spin yields the
 * CPU between checks, so that on an oversubscribed machine (more threads
 * than free cores) the thread we wait for gets to run. */
static uint32_t spin_on(_Atomic uint32_t *word, uint32_t v, int equal)
{
	uint64_t t0 = 0, t;
	uint32_t cur;

	for (unsigned i = 1;; i++) {
		cur = atomic_load_explicit(word, memory_order_acquire);
		if ((cur == v) != equal)
			return cur;
		cpu_relax();
		if ((i & 63) == 0) {
			t = now_ns();
			if (!t0)
				t0 = t;
			else if (t - t0 > SPIN_NS)
				return cur;
			else if (t - t0 > YIELD_AFTER_NS)
				sched_yield();
		}
	}
}

/* ---- claiming and running ---- */

/* Claim the next ith of generation g: returns it, or -1 when none is left
 * (or the run g is over). */
static int claim_next(struct ntx_pool *pool, uint32_t g)
{
	uint64_t v = atomic_load_explicit(&pool->claim, memory_order_acquire);

	for (;;) {
		if ((uint32_t)(v >> 32) != g || (int)(uint32_t)v >= pool->n)
			return -1;
		if (atomic_compare_exchange_weak_explicit(&pool->claim, &v, v + 1, memory_order_acq_rel,
							  memory_order_acquire))
			return (int)(uint32_t)v;
	}
}

/* Run every ith of generation g this thread can claim. */
static void run_claimed(struct ntx_pool *pool, uint32_t g)
{
	int ith;

	while ((ith = claim_next(pool, g)) >= 0) {
		pool->fn(pool->ctx, ith, pool->n);
		if (atomic_fetch_add(&pool->done, 1) + 1 == (uint32_t)(pool->n - 1) &&
		    atomic_load(&pool->caller_waiting))
			futex_wake(&pool->done, 1);
	}
}

static void *worker_main(void *p)
{
	struct ntx_pool *pool = p;
	uint32_t seen = 0;

	for (;;) {
		uint32_t g = spin_on(&pool->gen, seen, 1);

		if (g == seen) {
			atomic_fetch_add(&pool->sleepers, 1);
			while ((g = atomic_load(&pool->gen)) == seen)
				futex_wait(&pool->gen, seen);
			atomic_fetch_sub(&pool->sleepers, 1);
		}
		seen = g;
		if (atomic_load_explicit(&pool->stop, memory_order_acquire))
			break;
		run_claimed(pool, g);
	}
	return NULL;
}

/* ---- public ---- */

static void pool_stop(struct ntx_pool *pool)
{
	atomic_store_explicit(&pool->stop, 1, memory_order_release);
	atomic_fetch_add(&pool->gen, 1);
	futex_wake(&pool->gen, INT_MAX);
	for (int i = 0; i < pool->n_started; i++)
		pthread_join(pool->threads[i], NULL);
}

struct ntx_pool *ntx_pool_new(int n_threads, struct ntx_err *err)
{
	struct ntx_pool *pool;

	if (n_threads < 1 || n_threads > NTX_POOL_MAX) {
		ntx_err_set(err, NTX_EINVAL, "thread count %d out of range 1..%d", n_threads,
			    NTX_POOL_MAX);
		return NULL;
	}
	pool = aligned_alloc(64, sizeof *pool);
	if (!pool) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory for a thread pool");
		return NULL;
	}
	memset(pool, 0, sizeof *pool);
	atomic_init(&pool->gen, 0);
	atomic_init(&pool->sleepers, 0);
	atomic_init(&pool->stop, 0);
	atomic_init(&pool->claim, 0);
	atomic_init(&pool->done, 0);
	atomic_init(&pool->caller_waiting, 0);
	pool->n = n_threads;
	if (n_threads == 1)
		return pool;
	pool->threads = calloc((size_t)n_threads - 1, sizeof *pool->threads);
	if (!pool->threads) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory for %d threads", n_threads);
		ntx_pool_free(pool);
		return NULL;
	}
	for (int i = 0; i < n_threads - 1; i++) {
		int rc = pthread_create(&pool->threads[i], NULL, worker_main, pool);

		if (rc) {
			ntx_err_errno(err, rc, "pthread_create (thread %d of %d)", i + 2, n_threads);
			ntx_pool_free(pool);
			return NULL;
		}
		pool->n_started++;
	}
	return pool;
}

void ntx_pool_free(struct ntx_pool *pool)
{
	if (!pool)
		return;
	if (pool->n_started)
		pool_stop(pool);
	free(pool->threads);
	free(pool);
}

int ntx_pool_threads(const struct ntx_pool *pool)
{
	return pool ? pool->n : 1;
}

void ntx_pool_run(struct ntx_pool *pool, ntx_pool_fn fn, void *ctx)
{
	uint32_t target, g, d;

	if (!pool || pool->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	target = (uint32_t)(pool->n - 1);
	g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
	pool->fn = fn;
	pool->ctx = ctx;
	atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
	atomic_store_explicit(&pool->claim, (uint64_t)g << 32 | 1u, memory_order_release);
	atomic_store(&pool->gen, g); /* seq_cst: pairs with the sleepers check */
	if (atomic_load(&pool->sleepers) > 0)
		futex_wake(&pool->gen, INT_MAX);

	fn(ctx, 0, pool->n);
	run_claimed(pool, g); /* whatever no worker has started yet */

	d = spin_on(&pool->done, target, 0);
	if (d != target) {
		atomic_store(&pool->caller_waiting, 1);
		while ((d = atomic_load(&pool->done)) != target)
			futex_wait(&pool->done, d);
		atomic_store(&pool->caller_waiting, 0);
	}
}
