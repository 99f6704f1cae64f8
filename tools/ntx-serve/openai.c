/* openai.c - the OpenAI API's request fields and response objects for
 * ntx-serve: chat completions, completions, their stream chunks, usage and
 * error objects. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "chat_json.h"
#include "serve.h"
#include "unicode.h"

/* An optional number field: 0 when absent or null, 1 with *out when valid,
 * -1 with msg for a wrong type or range (integers: integral numbers only). */
static int num_field(json_t *req, const char *key, int integer, double lo, double hi, double *out,
		     char *msg, size_t msz)
{
	json_t *v = json_object_get(req, key);
	double x;

	if (!v || json_is_null(v))
		return 0;
	x = json_number_value(v);
	if (!json_is_number(v) || !(x >= lo && x <= hi) || (integer && x != floor(x))) {
		if (integer)
			snprintf(msg, msz, "'%s' must be an integer in [%.0f, %.0f]", key, lo, hi);
		else
			snprintf(msg, msz, "'%s' must be a number in [%g, %g]", key, lo, hi);
		return -1;
	}
	*out = x;
	return 1;
}

static int parse_stop(json_t *v, struct sreq *r, char *msg, size_t msz)
{
	size_t i, n;

	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		if (json_string_length(v) == 0)
			return 0;
		r->stop[0] = strdup(json_string_value(v));
		r->n_stop = r->stop[0] != NULL;
		return 0;
	}
	n = json_array_size(v);
	if (!json_is_array(v) || n > SERVE_MAX_STOP) {
		snprintf(msg, msz, "'stop' must be a string or an array of at most %d strings",
			 SERVE_MAX_STOP);
		return -1;
	}
	for (i = 0; i < n; i++) {
		json_t *e = json_array_get(v, i);

		if (!json_is_string(e)) {
			snprintf(msg, msz, "'stop[%zu]' must be a string", i);
			return -1;
		}
		if (json_string_length(e) == 0)
			continue;
		r->stop[r->n_stop] = strdup(json_string_value(e));
		if (r->stop[r->n_stop])
			r->n_stop++;
	}
	return 0;
}

/* The prompt text of a request (malloc'ed). */
static int prompt_text(const struct server *s, json_t *req, struct sreq *r, char **out, char *msg,
		       size_t msz, const char **param)
{
	struct ntx_err err = { 0 };

	if (r->kind == SREQ_CHAT) {
		json_t *m = json_object_get(req, "messages");
		struct ntx_chat_msg *msgs = NULL, *all;
		int n = 0, rc;

		*param = "messages";
		if (!m) {
			snprintf(msg, msz, "missing 'messages'");
			return -1;
		}
		if (ntx_chat_msgs_from_json(m, "messages", &msgs, &n, &err)) {
			snprintf(msg, msz, "%s", err.msg);
			return -1;
		}
		all = msgs;
		if (s->o->system && strcmp(msgs[0].role, "system") != 0) {
			/* the server's default system message */
			all = malloc((size_t)(n + 1) * sizeof *all);
			if (all) {
				all[0].role = "system";
				all[0].content = s->o->system;
				memcpy(all + 1, msgs, (size_t)n * sizeof *all);
				n++;
			} else {
				all = msgs;
			}
		}
		rc = ntx_chat_format(s->vocab, s->o->chat_template, all, n, 1, out, &err);
		if (all != msgs)
			free(all);
		free(msgs);
		if (rc) {
			snprintf(msg, msz, "%s", err.msg);
			*param = NULL;
			return -1;
		}
		return 0;
	} else {
		json_t *p = json_object_get(req, "prompt");

		*param = "prompt";
		/* a one-string array is the same prompt */
		if (json_is_array(p) && json_array_size(p) == 1)
			p = json_array_get(p, 0);
		if (!p) {
			snprintf(msg, msz, "missing 'prompt'");
			return -1;
		}
		if (!json_is_string(p)) {
			snprintf(msg, msz, "'prompt' must be a string (or an array of one string)");
			return -1;
		}
		*out = strdup(json_string_value(p));
		if (!*out) {
			snprintf(msg, msz, "out of memory");
			return -1;
		}
		return 0;
	}
}

int serve_parse_request(const struct server *s, const char *body, size_t len, struct sreq *r,
			char *msg, size_t msz, const char **param)
{
	struct ntx_err err = { 0 };
	json_error_t je;
	json_t *req = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je), *v;
	char *text = NULL;
	double x;
	int rc = -1, k;

	*param = NULL;
	r->n_predict = s->o->n_predict;
	r->sp = s->o->sp;
	if (!req) {
		snprintf(msg, msz, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
		return -1;
	}
	if (!json_is_object(req)) {
		snprintf(msg, msz, "the request body must be a JSON object");
		goto out;
	}
	v = json_object_get(req, "model");
	if (v && !json_is_null(v) && !json_is_string(v)) {
		*param = "model";
		snprintf(msg, msz, "'model' must be a string");
		goto out;
	}
#define NUM(key, integer, lo, hi, stmt)                                               \
	do {                                                                          \
		*param = key;                                                         \
		k = num_field(req, key, integer, lo, hi, &x, msg, msz);               \
		if (k < 0)                                                            \
			goto out;                                                     \
		if (k > 0)                                                            \
			stmt;                                                         \
	} while (0)
	NUM("max_tokens", 1, 0, 1 << 30, r->n_predict = (int)x);
	if (r->kind == SREQ_CHAT)
		NUM("max_completion_tokens", 1, 0, 1 << 30, r->n_predict = (int)x);
	NUM("temperature", 0, 0, 2, r->sp.temp = (float)x);
	NUM("top_p", 0, 0, 1, r->sp.top_p = (float)x);
	NUM("top_k", 1, 0, 1 << 30, r->sp.top_k = (int)x);
	NUM("min_p", 0, 0, 1, r->sp.min_p = (float)x);
	NUM("seed", 1, -9007199254740992.0, 9007199254740992.0, r->sp.seed = (uint64_t)(int64_t)x);
	NUM("n", 1, 1, 1, (void)x);
#undef NUM
	*param = "stream";
	v = json_object_get(req, "stream");
	if (v && !json_is_null(v) && !json_is_boolean(v)) {
		snprintf(msg, msz, "'stream' must be true or false");
		goto out;
	}
	r->stream = json_is_true(v);
	*param = "stream_options";
	v = json_object_get(req, "stream_options");
	if (v && !json_is_null(v)) {
		json_t *u = json_object_get(v, "include_usage");

		if (!json_is_object(v) || (u && !json_is_boolean(u))) {
			snprintf(msg, msz, "'stream_options' must be an object with a boolean 'include_usage'");
			goto out;
		}
		r->include_usage = json_is_true(u);
	}
	*param = "ignore_eos";
	v = json_object_get(req, "ignore_eos");
	if (v && !json_is_null(v) && !json_is_boolean(v)) {
		snprintf(msg, msz, "'ignore_eos' must be true or false");
		goto out;
	}
	r->ignore_eos = json_is_true(v);
	*param = "stop";
	if (parse_stop(json_object_get(req, "stop"), r, msg, msz))
		goto out;
	if (prompt_text(s, req, r, &text, msg, msz, param))
		goto out;
	/* chat text holds the template's special tokens; a completion prompt's
	 * special-token text is parsed too, as ntx-run does */
	if (ntx_tokenize(s->vocab, text, strlen(text), 1, 1, &r->tokens, &r->n_tokens, &err)) {
		snprintf(msg, msz, "%s", err.msg);
		goto out;
	}
	if (r->n_tokens == 0) {
		snprintf(msg, msz, "the prompt is empty");
		goto out;
	}
	if (r->n_tokens > s->n_ctx) {
		snprintf(msg, msz, "the prompt has %d tokens, more than the context size %d",
			 r->n_tokens, s->n_ctx);
		goto out;
	}
	*param = NULL;
	rc = 0;
out:
	free(text);
	json_decref(req);
	return rc;
}

/* ---- responses ---- */

static json_t *text_json(const char *s, size_t n)
{
	json_t *j = json_stringn(s ? s : "", s ? n : 0);
	size_t m;
	char *v;

	if (j)
		return j;
	v = ntx_utf8_sanitize(s, n, &m);
	j = v ? json_stringn(v, m) : NULL;
	free(v);
	return j;
}

json_t *serve_error_json(const char *msg, const char *type, const char *param, const char *code)
{
	return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", msg, "type", type, "param",
			 param, "code", code);
}

json_t *serve_usage_json(const struct sreq *r)
{
	return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", r->n_tokens,
			 "completion_tokens", r->n_gen, "total_tokens", r->n_tokens + r->n_gen,
			 "prompt_tokens_details", "cached_tokens", r->n_reused);
}

json_t *serve_response_json(const struct server *s, const struct sreq *r, const char *text,
			    size_t len)
{
	json_t *choice;

	if (r->kind == SREQ_CHAT)
		choice = json_pack("{s:i, s:{s:s, s:o}, s:n, s:s}", "index", 0, "message", "role",
				   "assistant", "content", text_json(text, len), "logprobs",
				   "finish_reason", r->finish);
	else
		choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text", text_json(text, len),
				   "logprobs", "finish_reason", r->finish);
	return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", r->id, "object",
			 r->kind == SREQ_CHAT ? "chat.completion" : "text_completion", "created",
			 (json_int_t)r->created, "model", s->model_name, "choices", choice, "usage",
			 serve_usage_json(r));
}

json_t *serve_chunk_json(const struct server *s, const struct sreq *r, const char *text, size_t len,
			 int first, const char *finish)
{
	json_t *choice;

	if (r->kind == SREQ_CHAT) {
		json_t *delta = json_object();

		if (first)
			json_object_set_new(delta, "role", json_string("assistant"));
		if (text || first)
			json_object_set_new(delta, "content", text_json(text, len));
		choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "delta", delta, "logprobs",
				   "finish_reason", finish);
	} else {
		choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "text", text_json(text, len),
				   "logprobs", "finish_reason", finish);
	}
	return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", r->id, "object",
			 r->kind == SREQ_CHAT ? "chat.completion.chunk" : "text_completion", "created",
			 (json_int_t)r->created, "model", s->model_name, "choices", choice);
}
