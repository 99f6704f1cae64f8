/* xcache.c - experts read on demand from a pack into a RAM cache (xcache.h). */
#include "xcache.h"

#include <stdlib.h>
#include <string.h>

#include "dio.h"

#define AL ((uint64_t)NTX_DIO_ALIGN)

struct slot {
	int layer, expert;  /* -1: empty */
	int prev, next;     /* in the recency list, least recent first */
	unsigned char *mem; /* 3 regions */
	const void *ptr[3]; /* the matrices in it */
};

struct ntx_xcache {
	struct ntx_dio *dio;
	int n_layer, n_expert, cap;
	uint64_t region[3];            /* bytes of each region of a slot */
	struct ntx_xcache_layer *layers;
	int32_t *where;                /* [n_layer][n_expert]: slot or -1 */
	struct slot *slots;
	unsigned char *arena;
	struct ntx_dio_req *reqs;      /* 3 per slot */
	int lru, mru;                  /* the list's ends */
	uint64_t *l_hits, *l_misses;   /* per layer */
	uint64_t hits, misses, bytes;
};

static uint64_t up(uint64_t v)
{
	return (v + AL - 1) & ~(AL - 1);
}

struct ntx_xcache *ntx_xcache_new(const char *path, int n_layer, int n_expert, int cap,
				  const uint64_t max_bytes[3], const struct ntx_tunables *tun,
				  struct ntx_err *err)
{
	struct ntx_xcache *c = calloc(1, sizeof *c);
	uint64_t slot = 0;
	int i;

	if (!c) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	c->n_layer = n_layer;
	c->n_expert = n_expert;
	c->cap = cap;
	for (i = 0; i < 3; i++) {
		/* an unaligned matrix spans at most its bytes + one page more */
		c->region[i] = up(max_bytes[i]) + AL;
		slot += c->region[i];
	}
	c->layers = calloc((size_t)n_layer, sizeof *c->layers);
	c->l_hits = calloc((size_t)n_layer, sizeof *c->l_hits);
	c->l_misses = calloc((size_t)n_layer, sizeof *c->l_misses);
	c->where = malloc((size_t)n_layer * (size_t)n_expert * sizeof *c->where);
	c->slots = calloc((size_t)cap, sizeof *c->slots);
	c->reqs = calloc((size_t)(cap < n_expert ? cap : n_expert) * 3, sizeof *c->reqs);
	c->arena = ntx_dio_alloc((size_t)(slot * (uint64_t)cap));
	if (!c->layers || !c->l_hits || !c->l_misses || !c->where || !c->slots || !c->reqs ||
	    !c->arena) {
		ntx_xcache_free(c);
		ntx_err_set(err, NTX_ENOMEM, "out of memory for the expert cache (%d experts of %llu bytes)",
			    cap, (unsigned long long)slot);
		return NULL;
	}
	for (i = 0; i < n_layer * n_expert; i++)
		c->where[i] = -1;
	for (i = 0; i < cap; i++) {
		c->slots[i].layer = c->slots[i].expert = -1;
		c->slots[i].mem = c->arena + (size_t)slot * (size_t)i;
		c->slots[i].prev = i - 1;
		c->slots[i].next = i + 1 < cap ? i + 1 : -1;
	}
	c->lru = 0;
	c->mru = cap - 1;
	c->dio = ntx_dio_open(path, 0, 0, tun, err);
	if (!c->dio) {
		char msg[NTX_ERR_MAX];

		memcpy(msg, err->msg, sizeof msg);
		ntx_err_set(err, err->code, "%s: %s", path, msg);
		ntx_xcache_free(c);
		return NULL;
	}
	return c;
}

void ntx_xcache_free(struct ntx_xcache *c)
{
	if (!c)
		return;
	ntx_dio_close(c->dio);
	free(c->arena);
	free(c->reqs);
	free(c->slots);
	free(c->where);
	free(c->layers);
	free(c->l_hits);
	free(c->l_misses);
	free(c);
}

void ntx_xcache_set_layer(struct ntx_xcache *c, int l, const struct ntx_xcache_layer *xl)
{
	c->layers[l] = *xl;
}

int ntx_xcache_cap(const struct ntx_xcache *c)
{
	return c->cap;
}

/* Make slot s the most recently used. */
static void touch(struct ntx_xcache *c, int s)
{
	struct slot *sl = &c->slots[s];

	if (c->mru == s)
		return;
	if (sl->prev >= 0)
		c->slots[sl->prev].next = sl->next;
	else
		c->lru = sl->next;
	c->slots[sl->next].prev = sl->prev; /* s is not the last: it has a next */
	sl->prev = c->mru;
	sl->next = -1;
	c->slots[c->mru].next = s;
	c->mru = s;
}

int ntx_xcache_load(struct ntx_xcache *c, int l, const int *ids, int n, const void **ptr,
		    struct ntx_err *err)
{
	const struct ntx_xcache_layer *xl = &c->layers[l];
	int i, k, nr = 0, rc = 0, *miss;

	if (n > c->cap || n > c->n_expert || n < 0)
		return ntx_err_set(err, NTX_EINVAL, "%d experts at once, the expert cache holds %d",
				   n, c->cap);
	miss = malloc((size_t)(n ? n : 1) * sizeof *miss);
	if (!miss)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	/* first the hits, so that no miss takes their slot: the experts of
	 * this load end the list, the victims come from its start */
	for (i = 0; i < n; i++) {
		int s = c->where[(size_t)l * c->n_expert + ids[i]];

		if (s >= 0)
			touch(c, s);
	}
	for (i = 0; i < n; i++) {
		int x = ids[i], s = c->where[(size_t)l * c->n_expert + x];
		struct slot *sl;
		unsigned char *dst;

		if (s >= 0) {
			c->hits++;
			c->l_hits[l]++;
			memcpy(ptr + 3 * i, c->slots[s].ptr, sizeof c->slots[s].ptr);
			continue;
		}
		s = c->lru;
		touch(c, s);
		sl = &c->slots[s];
		if (sl->layer >= 0)
			c->where[(size_t)sl->layer * c->n_expert + sl->expert] = -1;
		sl->layer = l;
		sl->expert = x;
		c->where[(size_t)l * c->n_expert + x] = s;
		c->misses++;
		c->l_misses[l]++;
		dst = sl->mem;
		for (k = 0; k < 3; k++) {
			uint64_t off = xl->off[k] + (uint64_t)x * xl->bytes[k], a = off & ~(AL - 1);
			uint64_t len = up(off + xl->bytes[k]) - a;
			struct ntx_dio_req *r = &c->reqs[3 * nr + k];

			memset(r, 0, sizeof *r);
			r->layer = l;
			sl->ptr[k] = dst + (off - a);
			if (!rc && ntx_dio_submit(c->dio, a, (size_t)len, dst, r, err))
				rc = -1;
			else if (!rc)
				c->bytes += len;
			dst += c->region[k];
		}
		memcpy(ptr + 3 * i, sl->ptr, sizeof sl->ptr);
		miss[nr++] = s;
		if (rc)
			break;
	}
	/* wait for every read submitted (also after a failure) */
	for (i = 0; i < nr; i++)
		for (k = 0; k < 3; k++) {
			struct ntx_dio_req *r = &c->reqs[3 * i + k];
			struct ntx_err e2 = { 0, "" };

			if (r->n_chunks && ntx_dio_wait(c->dio, r, &e2) && !rc) {
				*err = e2;
				rc = -1;
			}
		}
	if (rc) /* the slots read here hold nothing valid */
		for (i = 0; i < nr; i++) {
			struct slot *sl = &c->slots[miss[i]];

			c->where[(size_t)sl->layer * c->n_expert + sl->expert] = -1;
			sl->layer = sl->expert = -1;
		}
	free(miss);
	return rc;
}

void ntx_xcache_layer_counts(const struct ntx_xcache *c, int l, uint64_t *hits, uint64_t *misses)
{
	*hits = c->l_hits[l];
	*misses = c->l_misses[l];
}

void ntx_xcache_counts(const struct ntx_xcache *c, uint64_t *hits, uint64_t *misses,
		       uint64_t *bytes)
{
	*hits = c->hits;
	*misses = c->misses;
	*bytes = c->bytes;
}
