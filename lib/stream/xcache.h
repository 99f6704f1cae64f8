/* xcache.h - experts read on demand from a pack into a RAM cache.
 *
 * A mixture-of-experts layer that a plan puts on disk and has the CPU
 * compute reads, per pass, only the experts its tokens chose: each expert's
 * gate, up and down matrices are contiguous in the layer's uncompressed pack
 * extent (layout.h), so an expert is three direct-I/O reads (dio.h) of the
 * 4 KiB-aligned ranges that cover them, into a slot of the cache. The cache
 * holds cap experts (any layers), replaced least recently used first;
 * ntx_xcache_load() makes up to cap experts of one layer available at once
 * and reads the missing ones in parallel. Expert reads are not checked
 * against the extent's checksum (it covers the whole extent): ntx-pack
 * --verify and ntx-inspect PACK check the file. */
#ifndef NTX_XCACHE_H
#define NTX_XCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tunables.h"

struct ntx_xcache;

/* Where layer l's expert stacks lie in the pack file: gate, up and down
 * stack offsets (absolute) and the bytes of one expert in each. */
struct ntx_xcache_layer {
	uint64_t off[3];
	uint64_t bytes[3];
};

/* A cache of cap experts for n_layer layers of n_expert experts over the
 * pack at path (opened with direct I/O; tun: the test switches, may be
 * NULL); max_bytes[3]: the largest gate, up, down matrix of one expert
 * over the layers that use it. NULL with *err on failure. */
struct ntx_xcache *ntx_xcache_new(const char *path, int n_layer, int n_expert, int cap,
				  const uint64_t max_bytes[3], const struct ntx_tunables *tun,
				  struct ntx_err *err);
void ntx_xcache_free(struct ntx_xcache *c);

/* Say where layer l's experts are (before loading any of them). */
void ntx_xcache_set_layer(struct ntx_xcache *c, int l, const struct ntx_xcache_layer *xl);

int ntx_xcache_cap(const struct ntx_xcache *c);

/* Make experts ids[0..n) of layer l (distinct, n <= cap, n <= n_expert) available: ptr
 * receives 3 pointers per id (gate, up, down), valid until the next load.
 * Returns 0, or -1 with *err (a read error, a truncated pack). */
int ntx_xcache_load(struct ntx_xcache *c, int l, const int *ids, int n, const void **ptr,
		    struct ntx_err *err);

/* Layer l's counters: its experts found in the cache, and read. */
void ntx_xcache_layer_counts(const struct ntx_xcache *c, int l, uint64_t *hits, uint64_t *misses);

/* Counters since ntx_xcache_new: experts found in the cache, experts read,
 * bytes read from the file. */
void ntx_xcache_counts(const struct ntx_xcache *c, uint64_t *hits, uint64_t *misses,
		       uint64_t *bytes);

#endif
