/* inspect.h - the "ntx.inspect" JSON document: what is in a GGUF file.
 *
 * Built by ntx-inspect and by ntx-plan (which accepts a GGUF file directly),
 * so both see the same document. The schema is in doc/inspect-json.md. */
#ifndef NTX_INSPECT_H
#define NTX_INSPECT_H

#include <jansson.h>

#include "err.h"
#include "gguf.h"

#define NTX_INSPECT_FORMAT "ntx.inspect"
#define NTX_INSPECT_VERSION 1
#define NTX_INSPECT_ARRAY_MAX 16 /* longer arrays are summarised */
#define NTX_INSPECT_ARRAY_HEAD 8 /* elements shown in a summary */

enum {
	NTX_INSPECT_FULL = 1 /* every array element, no summaries */
};

/* Build the document for an open GGUF file. path is recorded as given (NULL
 * writes null). g is not consumed and not changed. A file that is valid GGUF
 * but not a usable Llama model still gives a document ("model": null and
 * "model_error"). Returns a new reference (json_decref it), or NULL and fills
 * *err (out of memory). */
json_t *ntx_inspect_json(struct ntx_gguf *g, const char *path, unsigned flags,
			 struct ntx_err *err);

/* Open path and build its document. Errors (file missing, not GGUF, ...) fill
 * *err without the path; the caller adds it. */
json_t *ntx_inspect_file(const char *path, unsigned flags, struct ntx_err *err);

/* Hex digits of the fingerprint (model.h ntx_gguf_fingerprint) into buf[17]. */
void ntx_inspect_fingerprint_hex(const struct ntx_gguf *g, char buf[17]);

#endif
