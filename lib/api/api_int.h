/* api_int.h - what the two halves of the public API (api.c: errors, models,
 * tokenizer, placements; api_ctx.c: contexts, generation, batches) share.
 * Not installed. */
#ifndef NTX_API_INT_H
#define NTX_API_INT_H

#include "ntx.h"
#include "err.h"
#include "model.h"
#include "plan.h"
#include "tokenizer.h"

struct ntx_error {
	enum ntx_status status;
	char msg[NTX_ERR_MAX];
};

struct ntx_lm {
	struct ntx_model *m;   /* owned */
	struct ntx_vocab *v;   /* owned */
	uint8_t *eog;          /* n_vocab flags, owned */
	uint64_t n_params;
};

struct ntx_placement {
	struct ntx_plan *p;    /* owned */
};

/* Store an internal error in e (may be NULL); returns its status. */
enum ntx_status ntx_api_fail(struct ntx_error *e, const struct ntx_err *ie);
/* Store status s and a message in e; returns s. */
enum ntx_status ntx_api_set(struct ntx_error *e, enum ntx_status s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A versioned input struct: defaults (dst, dst_size bytes, already filled)
 * overwritten by the caller's first src->size bytes. what names it in the
 * message when src->size is too small to hold the size field. */
enum ntx_status ntx_api_struct_in(void *dst, size_t dst_size, const void *src, const char *what,
				  struct ntx_error *e);
/* A versioned output struct: the first min(dst->size, src_size) bytes of
 * src (the size field kept). */
enum ntx_status ntx_api_struct_out(void *dst, const void *src, size_t src_size, const char *what,
				   struct ntx_error *e);

#endif
