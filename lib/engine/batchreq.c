/* batchreq.c - one --batch request line (see batchreq.h). */
#include "batchreq.h"

#include <stdlib.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chat_json.h"

/* An optional numeric field of req: 0 when absent or null (*have = 0) or
 * valid (*have = 1, *out set), -1 with err when it has the wrong type or
 * range. Integer fields accept integral numbers only. */
static int get_num(json_t *req, const char *key, int integer, double lo, double hi, double *out,
		   int *have, struct ntx_err *err)
{
	json_t *v = json_object_get(req, key);
	double x;

	*have = 0;
	if (!v || json_is_null(v))
		return 0;
	x = json_number_value(v);
	if (!json_is_number(v) || x < lo || x > hi || (integer && x != floor(x))) {
		if (integer)
			return ntx_err_set(err, NTX_EINVAL, "\"%s\" must be an integer in [%.0f, %.0f]",
					   key, lo, hi);
		return ntx_err_set(err, NTX_EINVAL, "\"%s\" must be a number in [%g, %g]", key, lo, hi);
	}
	*out = x;
	*have = 1;
	return 0;
}

/* A string field without NUL bytes (they would cut the text short). */
static int get_text(json_t *v, const char *key, const char **out, struct ntx_err *err)
{
	if (!json_is_string(v))
		return ntx_err_set(err, NTX_EINVAL, "\"%s\" must be a string", key);
	*out = json_string_value(v);
	if (strlen(*out) != json_string_length(v))
		return ntx_err_set(err, NTX_EINVAL, "NUL (\\u0000) is not allowed in a %s",
				   strcmp(key, "prompt") ? "system message" : "prompt");
	return 0;
}

/* "messages": the shape ntx_chat_msgs_from_json takes, with NUL-free
 * contents. */
static int check_messages(json_t *arr, struct ntx_err *err)
{
	struct ntx_chat_msg *mm = NULL;
	int n = 0, i;

	if (ntx_chat_msgs_from_json(arr, "messages", &mm, &n, err))
		return -1;
	free(mm);
	for (i = 0; i < n; i++) {
		json_t *c = json_object_get(json_array_get(arr, (size_t)i), "content");

		if (json_is_string(c) && strlen(json_string_value(c)) != json_string_length(c))
			return ntx_err_set(err, NTX_EINVAL,
					   "NUL (\\u0000) is not allowed in \"messages[%d].content\"", i);
	}
	return 0;
}

int ntx_batch_req_parse(const char *line, size_t len, const struct ntx_batch_req *defaults,
			struct ntx_batch_req *r, struct ntx_err *err)
{
	json_error_t je;
	json_t *v;
	double x;
	int have;

	*r = *defaults;
	r->doc = r->id = NULL;
	r->prompt = NULL;
	/* NUL is let through the JSON parser to be refused by name below */
	r->doc = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL,
			    &je);
	if (!r->doc)
		return ntx_err_set(err, NTX_EINVAL, "invalid JSON at column %d: %s", je.column,
				   je.text);
	if (!json_is_object(r->doc))
		return ntx_err_set(err, NTX_EINVAL, "a request must be a JSON object");
	r->id = json_object_get(r->doc, "id");
	v = json_object_get(r->doc, "prompt");
	r->messages = json_object_get(r->doc, "messages");
	if (json_is_null(r->messages))
		r->messages = NULL;
	if (v && r->messages)
		return ntx_err_set(err, NTX_EINVAL, "give \"prompt\" or \"messages\", not both");
	if (!v && !r->messages)
		return ntx_err_set(err, NTX_EINVAL, "missing \"prompt\"");
	if (v && get_text(v, "prompt", &r->prompt, err))
		return -1;
	if (r->messages && check_messages(r->messages, err))
		return -1;
#define NUM(key, integer, lo, hi, dst, cast)                                                \
	do {                                                                                \
		if (get_num(r->doc, key, integer, lo, hi, &x, &have, err))                  \
			return -1;                                                          \
		if (have)                                                                   \
			dst = (cast)x;                                                      \
	} while (0)
	/* the ranges of the command-line options; seeds up to 2^53 (exact in
	 * a JSON number) */
	NUM("n_predict", 1, -1, 1 << 30, r->n_predict, int);
	NUM("temp", 0, 0, 100, r->sp.temp, float);
	NUM("top_k", 1, 0, 1 << 30, r->sp.top_k, int);
	NUM("top_p", 0, 0, 1, r->sp.top_p, float);
	NUM("min_p", 0, 0, 1, r->sp.min_p, float);
	NUM("repeat_penalty", 0, 0.01, 100, r->sp.repeat_penalty, float);
	NUM("repeat_last_n", 1, -1, 1 << 30, r->sp.repeat_last_n, int);
	NUM("seed", 1, 0, 9007199254740992.0, r->sp.seed, uint64_t);
#undef NUM
	v = json_object_get(r->doc, "chat");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return ntx_err_set(err, NTX_EINVAL, "\"chat\" must be true or false");
		r->chat = json_is_true(v);
	}
	v = json_object_get(r->doc, "system");
	if (v && !json_is_null(v)) {
		if (r->messages)
			return ntx_err_set(err, NTX_EINVAL,
					   "\"system\" does not apply to \"messages\" (give a system message)");
		if (get_text(v, "system", &r->system, err))
			return -1;
	}
	if (r->messages)
		r->chat = 1;
	return 0;
}

void ntx_batch_req_free(struct ntx_batch_req *r)
{
	if (!r)
		return;
	json_decref(r->doc);
	r->doc = r->id = NULL;
}
