/* prompt.c - ntx-run's input over ntx.h only: whole files or stdin, the
 * prompt of -p, -f and --prompt-ids (with --chat's template) as token ids,
 * and the --tokenize mode, which opens only the model's vocabulary. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

/* "ntx-run: message" on stderr, unless it is the silent interrupt (130). */
static int fail(int rc, const char *msg)
{
	if (rc != 130)
		fprintf(stderr, PROG ": %s\n", msg);
	return rc;
}

/* A failed call's message and exit status (3 for a model that does not
 * fit, 130 for an interrupt, else 1). */
static int fail_api(const struct ntx_error *e)
{
	enum ntx_status s = ntx_error_status(e);

	return fail(s == NTX_STATUS_NOFIT ? 3 : s == NTX_STATUS_INTERRUPTED ? 130 : 1,
		    e ? ntx_error_message(e) : "out of memory");
}

static int msgf(char *msg, size_t cap, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int msgf(char *msg, size_t cap, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
	return rc;
}

/* ---- whole files ---- */

static int read_all(int fd, char **out, size_t *len, char *msg, size_t cap_msg)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap + 1);

	if (!buf)
		return msgf(msg, cap_msg, 1, "out of memory");
	for (;;) {
		ssize_t k;

		if (n == cap) {
			char *nb = cap > ((size_t)1 << 40) ? NULL : realloc(buf, cap * 2 + 1);

			if (!nb) {
				free(buf);
				return msgf(msg, cap_msg, 1, "input too large");
			}
			buf = nb;
			cap *= 2;
		}
		/* read(2), not fread: on a terminal one Ctrl-D (a read of 0
		 * bytes) ends the input, where fread would ask for another */
		k = read(fd, buf + n, cap - n);
		if (k < 0 && errno == EINTR && !run_interrupted)
			continue;
		if (k < 0) {
			int e = errno;

			free(buf);
			if (e == EINTR)
				return msgf(msg, cap_msg, 130, "interrupted");
			return msgf(msg, cap_msg, 1, "reading input: %s", strerror(e));
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int run_slurp(const char *path, char **text, size_t *len, char *msg, size_t cap)
{
	FILE *f = path && strcmp(path, "-") ? fopen(path, "rb") : stdin;
	char m[400];
	int rc;

	if (!f)
		return msgf(msg, cap, 1, "%s: %s", path, strerror(errno));
	rc = read_all(fileno(f), text, len, m, sizeof m);
	if (f != stdin)
		fclose(f);
	if (rc && path)
		return msgf(msg, cap, rc, "%s: %s", path, m);
	if (rc)
		return msgf(msg, cap, rc, "%s", m);
	return 0;
}

/* ---- the prompt ---- */

int run_lm_tokenize(const struct ntx_lm *lm, const char *text, size_t len, unsigned flags,
		    int32_t **ids, int *n, struct ntx_error *e)
{
	int cap = len < (1u << 30) ? (int)len + 16 : 1 << 30;
	enum ntx_status s;

	for (;;) {
		int32_t *v = malloc((size_t)cap * sizeof *v);

		if (!v) {
			ntx_error_clear(e);
			return -1;
		}
		s = ntx_lm_tokenize(lm, text, len, flags, v, cap, n, e);
		if (s == NTX_OK) {
			*ids = v;
			return 0;
		}
		free(v);
		if (s != NTX_STATUS_BUFFER || *n <= cap)
			return -1;
		cap = *n;
	}
}

/* text[0..len) as ids (*ids malloc'ed; NULL when none): 0, or the exit
 * status after the message. */
static int tokenize(const struct ntx_lm *lm, const char *text, size_t len, unsigned flags,
		    int32_t **ids, int *n, struct ntx_error *e)
{
	if (run_lm_tokenize(lm, text, len, flags, ids, n, e))
		return ntx_error_message(e)[0] ? fail_api(e) : fail(1, "out of memory");
	if (*n == 0) {
		free(*ids);
		*ids = NULL;
	}
	return 0;
}

int run_tokenize(const struct ntx_lm *lm, const char *text, size_t len, unsigned flags,
		 int32_t **ids, int *n)
{
	struct ntx_error *e = ntx_error_new();
	int rc;

	*ids = NULL;
	*n = 0;
	if (!e)
		return fail(1, "out of memory");
	rc = tokenize(lm, text, len, flags, ids, n, e);
	ntx_error_free(e);
	return rc;
}

int run_prompt_ids(const struct run_opts *o, const struct ntx_lm *lm, int32_t **ids, int *n)
{
	struct ntx_error *e = ntx_error_new();
	struct ntx_lm_info info;
	char *text = NULL, *chat = NULL, msg[512];
	size_t len = 0;
	int rc = 0;

	*ids = NULL;
	*n = 0;
	if (!e)
		return fail(1, "out of memory");
	if (o->prompt_ids) {
		info.size = sizeof info;
		if (ntx_lm_info(lm, &info, e) || ntx_arg_ids(o->prompt_ids, info.n_vocab - 1, ids, n, e))
			rc = fail_api(e);
		ntx_error_free(e);
		return rc;
	}
	if (o->prompt) {
		text = strdup(o->prompt);
		if (!text) {
			ntx_error_free(e);
			return fail(1, "out of memory");
		}
		len = strlen(text);
	} else if ((rc = run_slurp(o->prompt_file, &text, &len, msg, sizeof msg)) != 0) {
		ntx_error_free(e);
		return fail(rc, msg);
	} else if (!o->tokenize && len && text[len - 1] == '\n') {
		/* one trailing newline of a file or a pipe is not part of a
		 * prompt (as with the shell's $(cat file)); --tokenize reads its
		 * input byte for byte, as llama-tokenize does */
		text[--len] = '\0';
		if (len && text[len - 1] == '\r')
			text[--len] = '\0';
	}
	if (o->chat) {
		const char *roles[2], *contents[2];
		int nm = 0;

		if (o->system) {
			roles[nm] = "system";
			contents[nm++] = o->system;
		}
		roles[nm] = "user";
		contents[nm++] = text;
		if (ntx_lm_chat_apply(lm, o->chat_template, roles, contents, nm,
				      NTX_CHAT_ADD_ASSISTANT, &chat, e)) {
			free(text);
			rc = fail_api(e);
			ntx_error_free(e);
			return rc;
		}
		free(text);
		text = strdup(chat);
		ntx_free(chat);
		if (!text) {
			ntx_error_free(e);
			return fail(1, "out of memory");
		}
		len = strlen(text);
	}
	rc = tokenize(lm, text, len,
		      (o->no_bos ? 0 : NTX_TOKENIZE_ADD_BOS) |
		      (o->chat || !o->no_parse_special ? NTX_TOKENIZE_SPECIAL : 0), ids, n, e);
	free(text);
	ntx_error_free(e);
	return rc;
}

/* ---- --tokenize ---- */

/* A plan's context size and KV cache type are the defaults; values beyond
 * the plan's are said to be outside its budgets. */
void run_plan_defaults(struct run_opts *o, const struct ntx_placement_info *pi)
{
	if (!o->n_ctx)
		o->n_ctx = pi->n_ctx;
	if (!o->kv_type_set)
		o->kv_type = (enum ntx_kv_cache)pi->kv_cache;
	if (o->batch && !o->parallel_set)
		o->parallel = pi->n_seq > 0 ? pi->n_seq : 1;
	if (o->quiet)
		return;
	if (o->n_ctx > pi->n_ctx)
		fprintf(stderr, PROG ": warning: context %d is larger than the plan's (%d): its KV cache was not counted in the plan's budgets\n",
			o->n_ctx, pi->n_ctx);
	if (o->kv_type == NTX_KV_CACHE_F32 && pi->kv_cache != NTX_KV_CACHE_F32)
		fprintf(stderr, PROG ": warning: the plan counted an f16 KV cache, not f32\n");
	if (o->batch && o->parallel > pi->n_seq)
		fprintf(stderr, PROG ": warning: --parallel %d is more than the plan's %d sequences: their KV caches were not counted in its budgets\n",
			o->parallel, pi->n_seq);
}

/* The model's vocabulary only (the model of the plan when no -m). */
static int open_vocab(struct run_opts *o, struct ntx_lm **lm, struct ntx_error *e)
{
	struct ntx_placement *pl = NULL;
	struct ntx_placement_info pi;
	char *mpath = NULL;
	int rc = 0;

	if (o->plan_path) {
		pi.size = sizeof pi;
		if (ntx_placement_read(o->plan_path, &pl, e) ||
		    (!o->model_path && ntx_placement_model_path(o->plan_path, &mpath, e)) ||
		    ntx_placement_info(pl, &pi, e)) {
			ntx_placement_free(pl);
			return fail_api(e);
		}
		run_plan_defaults(o, &pi);
		ntx_placement_free(pl);
	}
	if (ntx_lm_open_vocab(o->model_path ? o->model_path : mpath, lm, e))
		rc = fail_api(e);
	ntx_free(mpath);
	return rc;
}

int mode_tokenize(struct run_opts *o)
{
	struct ntx_error *e = ntx_error_new();
	struct ntx_lm *lm = NULL;
	int32_t *ids;
	int n, i, rc;

	if (!e)
		return fail(1, "out of memory");
	rc = open_vocab(o, &lm, e);
	ntx_error_free(e);
	if (rc)
		return rc;
	/* an empty text is a valid input: [] */
	rc = run_prompt_ids(o, lm, &ids, &n);
	ntx_lm_close(lm);
	if (rc)
		return rc;
	putchar('[');
	for (i = 0; i < n; i++)
		printf(i ? ", %d" : "%d", ids[i]);
	printf("]\n");
	free(ids);
	return 0;
}
