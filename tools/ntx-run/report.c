/* report.c - ntx-run's reports over ntx.h (see report.h): the
 * --stats-json file, the streaming counters, generated text as JSON. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

/* ---- --stats-json ---- */

int run_stats_open(const struct run_opts *o, struct run_stats *s)
{
	struct ntx_error *e;
	int rc = 0;

	memset(s, 0, sizeof *s);
	s->path = o->stats_json;
	if (!s->path)
		return 0;
	if (!strcmp(s->path, "-")) { /* ntx_output's "-" is stdout: ours is stderr */
		s->f = stderr;
		return 0;
	}
	e = ntx_error_new();
	if (!e || ntx_output_open(s->path, &s->out, e)) {
		fprintf(stderr, PROG ": %s\n", e ? ntx_error_message(e) : "out of memory");
		rc = 1;
	}
	ntx_error_free(e);
	return rc;
}

int run_stats_write(struct run_stats *s, const json_t *j)
{
	struct ntx_error *e;
	char *text;
	size_t n;
	int rc = 0;

	if (!s->path)
		return 0;
	text = json_dumps(j, JSON_INDENT(2));
	if (!text) {
		run_stats_close(s);
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	n = strlen(text);
	text[n] = '\n'; /* json_dumps' NUL: the trailing newline (written with n + 1) */
	if (s->f) {
		errno = 0;
		if (fwrite(text, 1, n + 1, s->f) != n + 1 || fflush(s->f)) {
			fprintf(stderr, PROG ": %s: %s\n", s->path, strerror(errno ? errno : EIO));
			rc = 1;
		}
		s->f = NULL;
	} else {
		e = ntx_error_new();
		if (!e || ntx_output_write(s->out, text, n + 1, e)) {
			ntx_output_abort(s->out); /* the file keeps its old contents */
			rc = 1;
		} else if (ntx_output_commit(s->out, e)) { /* frees it either way */
			rc = 1;
		}
		if (rc)
			fprintf(stderr, PROG ": %s\n", e ? ntx_error_message(e) : "out of memory");
		s->out = NULL;
		ntx_error_free(e);
	}
	free(text);
	return rc;
}

void run_stats_close(struct run_stats *s)
{
	ntx_output_abort(s->out);
	memset(s, 0, sizeof *s);
}

/* ---- the engine's counters ---- */

void run_streaming_json(const struct ntx_ctx_stats *st, json_t *j)
{
	if (st->bytes_h2d || st->bytes_disk || st->bytes_cpu_weights)
		json_object_set_new(j, "streaming",
				    json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I}",
					      "bytes_h2d", (json_int_t)st->bytes_h2d,
					      "bytes_disk", (json_int_t)st->bytes_disk,
					      "bytes_cpu_weights", (json_int_t)st->bytes_cpu_weights,
					      "t_h2d_s", st->t_h2d_ms / 1e3, "t_disk_s", st->t_disk_ms / 1e3,
					      "t_cpu_s", st->t_cpu_ms / 1e3,
					      "t_gpu_wait_s", st->t_gpu_wait_ms / 1e3,
					      "t_cpu_wait_s", st->t_cpu_wait_ms / 1e3,
					      "t_eval_s", st->t_eval_ms / 1e3,
					      "n_eval_calls", (json_int_t)st->n_eval_calls));
}

void run_streaming_print(const struct ntx_ctx_stats *st)
{
	double h2d = st->t_h2d_ms / 1e3, disk = st->t_disk_ms / 1e3;

	if (st->bytes_h2d || st->bytes_disk || (st->bytes_cpu_weights && st->backend == NTX_USE_CUDA))
		fprintf(stderr,
			PROG ": streaming: %.2f GB over PCIe (%.1f GB/s), %.2f GB from disk (%.1f GB/s), %.2f GB computed on the CPU (%.2f s); GPU waited %.2f s, CPU waited %.2f s; %lld evaluations, %.2f s\n",
			st->bytes_h2d / 1e9, h2d > 0 ? st->bytes_h2d / 1e9 / h2d : 0,
			st->bytes_disk / 1e9, disk > 0 ? st->bytes_disk / 1e9 / disk : 0,
			st->bytes_cpu_weights / 1e9, st->t_cpu_ms / 1e3, st->t_gpu_wait_ms / 1e3,
			st->t_cpu_wait_ms / 1e3, (long long)st->n_eval_calls, st->t_eval_ms / 1e3);
}

int run_threads(const struct run_opts *o)
{
	long n;

	if (o->n_threads > 0)
		return o->n_threads;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* ---- text ---- */

/* Append p[0..n) to *buf (*len of *cap used). */
static int append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = (*len + n + 1) * 2;
		char *b = realloc(*buf, c);

		if (!b)
			return -1;
		*buf = b;
		*cap = c;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	return 0;
}

json_t *run_text_json(struct ntx_detokenizer *d, const struct ntx_lm *lm, const int32_t *ids,
		      int n, int keep_eog, struct ntx_error *e)
{
	char *buf = NULL;
	size_t len = 0, cap = 0, k;
	const char *p;
	json_t *j = NULL;
	int i, bad = 0;

	ntx_error_clear(e);
	for (i = 0; i < n && !bad; i++) {
		if (!keep_eog && ntx_lm_is_eog(lm, ids[i]))
			continue;
		bad = ntx_detokenizer_push(d, ids[i], &p, &k, e) || append(&buf, &len, &cap, p, k);
	}
	ntx_detokenizer_flush(d, &p, &k); /* the held tail; d starts anew */
	if (!bad && !append(&buf, &len, &cap, p, k))
		j = json_stringn(buf ? buf : "", len);
	free(buf);
	return j;
}
