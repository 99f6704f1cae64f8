/* inspect_pack.h - the "ntx.inspect" document of a pack file ("kind":
 * "pack"): header fields and every extent with its tensor directory. The
 * schema is in doc/pack-format.md ("ntx-inspect on a pack"). Kept apart from
 * inspect.h (GGUF files) so that the two readers stay independent. */
#ifndef NTX_INSPECT_PACK_H
#define NTX_INSPECT_PACK_H

#include <jansson.h>
#include <stddef.h>

#include "err.h"
#include "pack.h"

/* The document of an open pack; path is recorded as given. flags:
 * NTX_INSPECT_FULL (inspect.h) adds every extent's frame table. Returns a new
 * reference, or NULL and fills *err (out of memory). */
json_t *ntx_inspect_pack_json(const struct ntx_pack *p, const char *path, unsigned flags,
			      struct ntx_err *err);

/* Open and validate path (or, with buf != NULL, the len bytes of buf, e.g.
 * standard input) and build its document. Errors do not include the path. */
json_t *ntx_inspect_pack_file(const char *path, const void *buf, size_t len, unsigned flags,
			      struct ntx_err *err);

/* A summary for people (ntx-inspect --format table) of a pack document:
 * several lines, each ending in '\n'. Caller frees; NULL when out of memory. */
char *ntx_inspect_pack_summary(const json_t *doc);

#endif
