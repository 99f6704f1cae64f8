/* chat_json.h - OpenAI-style chat messages from JSON (ntx-run --batch,
 * ntx-serve): [{"role": "system"|"user"|"assistant", "content": "..."}]. */
#ifndef NTX_CHAT_JSON_H
#define NTX_CHAT_JSON_H

#include <jansson.h>

#include "chat.h"
#include "err.h"

/* The messages of arr (the value of key, named in messages: "\"messages[2].role\"
 * must be ..."). Returns 0 with *msgs (malloc'ed array; its strings are
 * borrowed from arr) and *n >= 1, or -1 and *err (NTX_EINVAL): not a
 * non-empty array, an element not an object, a role other than system,
 * user and assistant, a content that is not a string. */
int ntx_chat_msgs_from_json(const json_t *arr, const char *key, struct ntx_chat_msg **msgs, int *n,
			    struct ntx_err *err);

#endif
