/* batchreq.h - one request line of ntx-run --batch (doc/batch-jsonl.md): a
 * JSON object with "prompt" (or OpenAI-style "messages") and the optional
 * "id", "n_predict", sampling fields, "chat" and "system". Parsing and range checks only (no model), so
 * that the parser can be fuzzed on its own (tests/fuzz/fuzz_batchreq.c). */
#ifndef NTX_BATCHREQ_H
#define NTX_BATCHREQ_H

#include <jansson.h>

#include "err.h"
#include "sampler.h"

struct ntx_batch_req {
	json_t *doc;                  /* the parsed line; owns the strings below */
	json_t *id;                   /* borrowed from doc; NULL when absent */
	const char *prompt;           /* borrowed; NUL-free; NULL with messages */
	json_t *messages;             /* borrowed; a valid message array
				       * (ntx_chat_msgs_from_json), NUL-free
				       * contents; NULL without */
	const char *system;           /* borrowed, or the default's; may be NULL */
	int chat;                     /* apply the chat template (always with
				       * messages) */
	int n_predict;
	struct ntx_sampler_params sp;
};

/* Parse line[0..len) over the defaults (the command line's values of sp,
 * n_predict, chat and system; their doc and id are ignored). Returns 0, or -1
 * with err set to the message for the request's error record; r->id is set
 * whenever the line is an object with an "id" (so the record can carry it).
 * Call ntx_batch_req_free() in both cases. */
int ntx_batch_req_parse(const char *line, size_t len, const struct ntx_batch_req *defaults,
			struct ntx_batch_req *r, struct ntx_err *err);

/* Release r->doc (the borrowed strings and id go with it). NULL-safe. */
void ntx_batch_req_free(struct ntx_batch_req *r);

#endif
