/* openai.c - the OpenAI API's request fields and response objects for
 * ntx-serve: chat completions, completions, their stream chunks, usage and
 * error objects. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

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

/* The messages of arr (OpenAI's "messages": objects with a role of
 * "system", "user" or "assistant" and a string content) as two arrays
 * (malloc'ed; the strings borrowed from arr), with room for one more at
 * the front. Returns 0, or -1 with msg. */
static int chat_messages(json_t *arr, const char ***roles, const char ***contents, int *n,
			 char *msg, size_t msz)
{
	size_t i, len = json_array_size(arr);

	*roles = *contents = NULL;
	if (!json_is_array(arr) || len == 0) {
		snprintf(msg, msz, "\"messages\" must be a non-empty array");
		return -1;
	}
	if (len > 1 << 20) {
		snprintf(msg, msz, "\"messages\" has %zu messages, more than %d", len, 1 << 20);
		return -1;
	}
	*roles = malloc((len + 1) * sizeof **roles);
	*contents = malloc((len + 1) * sizeof **contents);
	if (!*roles || !*contents) {
		snprintf(msg, msz, "out of memory");
		return -1;
	}
	for (i = 0; i < len; i++) {
		json_t *e = json_array_get(arr, i);
		const char *role = json_string_value(json_object_get(e, "role"));
		json_t *c = json_object_get(e, "content");

		if (!json_is_object(e)) {
			snprintf(msg, msz, "\"messages[%zu]\" must be an object", i);
			return -1;
		}
		if (!role || (strcmp(role, "system") && strcmp(role, "user") &&
			      strcmp(role, "assistant"))) {
			snprintf(msg, msz,
				 "\"messages[%zu].role\" must be \"system\", \"user\" or \"assistant\"", i);
			return -1;
		}
		if (!json_is_string(c)) {
			snprintf(msg, msz, "\"messages[%zu].content\" must be a string", i);
			return -1;
		}
		(*roles)[i + 1] = role;
		(*contents)[i + 1] = json_string_value(c);
	}
	*n = (int)len;
	return 0;
}

/* The prompt text of a request (*out freed with free()). */
static int prompt_text(const struct server *s, json_t *req, struct sreq *r, char **out, char *msg,
		       size_t msz, const char **param)
{
	if (r->kind == SREQ_CHAT) {
		json_t *m = json_object_get(req, "messages");
		const char **roles, **contents;
		struct ntx_error *err;
		char *text = NULL;
		int n = 0, k = 1, rc = -1;

		*param = "messages";
		if (!m) {
			snprintf(msg, msz, "missing 'messages'");
			return -1;
		}
		if (chat_messages(m, &roles, &contents, &n, msg, msz))
			goto out;
		if (s->o->system && strcmp(roles[1], "system") != 0) {
			/* the server's default system message */
			roles[0] = "system";
			contents[0] = s->o->system;
			k = 0;
		}
		*param = NULL;
		err = ntx_error_new();
		if (!err) {
			snprintf(msg, msz, "out of memory");
			goto out;
		}
		if (ntx_lm_chat_apply(s->lm, s->chat_template, roles + k, contents + k, n + 1 - k,
				      NTX_CHAT_ADD_ASSISTANT, &text, err))
			snprintf(msg, msz, "%s", ntx_error_message(err));
		else if (!(*out = strdup(text)))
			snprintf(msg, msz, "out of memory");
		else
			rc = 0;
		ntx_free(text);
		ntx_error_free(err);
out:
		free(roles);
		free(contents);
		return rc;
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

/* text's tokens (BOS as the model asks; the text of control tokens parsed
 * as those) into r. Returns 0, or -1 with msg. */
static int tokenize(const struct server *s, const char *text, struct sreq *r, char *msg,
		    size_t msz)
{
	struct ntx_error *err = ntx_error_new();
	const unsigned fl = NTX_TOKENIZE_ADD_BOS | NTX_TOKENIZE_SPECIAL;
	size_t len = strlen(text);
	enum ntx_status st;
	int n = 0;

	if (!err) {
		snprintf(msg, msz, "out of memory");
		return -1;
	}
	st = ntx_lm_tokenize(s->lm, text, len, fl, NULL, 0, &n, err);
	if (st == NTX_STATUS_BUFFER) {
		r->tokens = malloc((size_t)n * sizeof *r->tokens);
		st = r->tokens ? ntx_lm_tokenize(s->lm, text, len, fl, r->tokens, n, &n, err)
			       : NTX_STATUS_NOMEM;
	}
	if (st)
		snprintf(msg, msz, "%s", st == NTX_STATUS_NOMEM && !r->tokens ? "out of memory" :
			 ntx_error_message(err));
	else
		r->n_tokens = n;
	ntx_error_free(err);
	return st ? -1 : 0;
}

int serve_parse_request(const struct server *s, const char *body, size_t len, struct sreq *r,
			char *msg, size_t msz, const char **param)
{
	json_error_t je;
	json_t *req = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je), *v;
	char *text = NULL;
	double x;
	int rc = -1, k;

	*param = NULL;
	r->gp = s->o->gp;
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
	NUM("max_tokens", 1, 0, 1 << 30, r->gp.n_predict = (int)x);
	if (r->kind == SREQ_CHAT)
		NUM("max_completion_tokens", 1, 0, 1 << 30, r->gp.n_predict = (int)x);
	NUM("temperature", 0, 0, 2, r->gp.temperature = (float)x);
	NUM("top_p", 0, 0, 1, r->gp.top_p = (float)x);
	NUM("top_k", 1, 0, 1 << 30, r->gp.top_k = (int)x);
	NUM("min_p", 0, 0, 1, r->gp.min_p = (float)x);
	NUM("seed", 1, -9007199254740992.0, 9007199254740992.0, r->gp.seed = (uint64_t)(int64_t)x);
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
	r->gp.ignore_eog = json_is_true(v);
	*param = "stop";
	if (parse_stop(json_object_get(req, "stop"), r, msg, msz))
		goto out;
	if (prompt_text(s, req, r, &text, msg, msz, param))
		goto out;
	/* chat text holds the template's special tokens; a completion prompt's
	 * special-token text is parsed too, as ntx-run does */
	if (tokenize(s, text, r, msg, msz))
		goto out;
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

/* A copy of s[0..n) with each byte that is not part of a valid UTF-8
 * sequence (RFC 3629: shortest form, no surrogates, at most U+10FFFF) as
 * U+FFFD; malloc'ed, *m bytes. The worker's text is valid already (its
 * detokenizers replace invalid bytes): this is the last guard before JSON. */
static char *utf8_clean(const char *s, size_t n, size_t *m)
{
	const unsigned char *u = (const unsigned char *)s;
	char *out = malloc(n * 3 + 1), *o = out;
	size_t i = 0;

	if (!out)
		return NULL;
	while (i < n) {
		unsigned c = u[i];
		size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 :
			   c >= 0xf0 && c <= 0xf4 ? 4 : 0;
		size_t j;
		int ok = k > 0 && i + k <= n;

		for (j = 1; ok && j < k; j++)
			ok = (u[i + j] & 0xc0) == 0x80;
		if (ok && k == 3)
			ok = !(c == 0xe0 && u[i + 1] < 0xa0) && !(c == 0xed && u[i + 1] > 0x9f);
		if (ok && k == 4)
			ok = !(c == 0xf0 && u[i + 1] < 0x90) && !(c == 0xf4 && u[i + 1] > 0x8f);
		if (ok) {
			memcpy(o, s + i, k);
			o += k;
			i += k;
		} else {
			memcpy(o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	*o = '\0';
	*m = (size_t)(o - out);
	return out;
}

static json_t *text_json(const char *s, size_t n)
{
	json_t *j = json_stringn(s ? s : "", s ? n : 0);
	size_t m;
	char *v;

	if (j)
		return j;
	v = utf8_clean(s, n, &m);
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
