/* out.c - what ntx-run's modes over ntx.h print besides their product
 * (out.h): the --stats-json file, failed calls, names and counters. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "out.h"

int run_err(const struct ntx_error *e)
{
	enum ntx_status s = e ? ntx_error_status(e) : NTX_STATUS_NOMEM;

	if (s == NTX_STATUS_INTERRUPTED)
		return 130;
	fprintf(stderr, PROG ": %s\n", e ? ntx_error_message(e) : "out of memory");
	return s == NTX_STATUS_NOFIT ? 3 : 1;
}

/* ---- --stats-json ---- */

int run_stats_open(const struct run_opts *o, struct run_stats *s)
{
	struct ntx_error *e;
	int rc = 0;

	memset(s, 0, sizeof *s);
	if (!o->stats_json)
		return 0;
	if (!strcmp(o->stats_json, "-")) { /* ntx-run's statistics go to stderr */
		s->to_stderr = 1;
		return 0;
	}
	e = ntx_error_new();
	if (!e || ntx_output_open(o->stats_json, &s->out, e))
		rc = run_err(e);
	ntx_error_free(e);
	return rc;
}

static int stats_stderr(const struct run_opts *o, const char *text)
{
	errno = 0;
	if (fputs(text, stderr) == EOF || fputc('\n', stderr) == EOF || fflush(stderr)) {
		fprintf(stderr, PROG ": %s: %s\n", o->stats_json, strerror(errno ? errno : EIO));
		return 1;
	}
	return 0;
}

int run_stats_commit(const struct run_opts *o, struct run_stats *s, const json_t *j)
{
	struct ntx_error *e;
	char *text;
	int rc = 0;

	if (!s->out && !s->to_stderr)
		return 0;
	text = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
	if (!text) {
		run_stats_abort(s);
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	if (s->to_stderr) {
		rc = stats_stderr(o, text);
		free(text);
		s->to_stderr = 0;
		return rc;
	}
	e = ntx_error_new();
	if (!e || ntx_output_write(s->out, text, strlen(text), e) ||
	    ntx_output_write(s->out, "\n", 1, e)) {
		rc = run_err(e);
		run_stats_abort(s);
	} else {
		rc = ntx_output_commit(s->out, e) ? run_err(e) : 0;
		s->out = NULL;
	}
	ntx_error_free(e);
	free(text);
	return rc;
}

void run_stats_abort(struct run_stats *s)
{
	ntx_output_abort(s->out);
	memset(s, 0, sizeof *s);
}

/* ---- names ---- */

const char *run_finish_name(enum ntx_finish f)
{
	switch (f) {
	case NTX_FINISH_EOG: return "eos";
	case NTX_FINISH_LENGTH: return "length";
	case NTX_FINISH_CONTEXT: return "context";
	case NTX_FINISH_STOPPED: return "closed";
	case NTX_FINISH_INTERRUPTED: return "interrupted";
	}
	return "none";
}

const char *run_backend_name(enum ntx_backend_choice b)
{
	return b == NTX_USE_CUDA ? "cuda" : b == NTX_USE_CPU ? "cpu" : "auto";
}

int run_threads(const struct run_opts *o)
{
	long n;

	if (o->n_threads > 0)
		return o->n_threads;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* ---- streaming counters ---- */

void run_streaming_json(const struct ntx_ctx_stats *st, json_t *j)
{
	if (!st->bytes_h2d && !st->bytes_disk && !st->bytes_cpu_weights)
		return;
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
	if (st->expert_cache_hits || st->expert_cache_misses) {
		json_t *s = json_object_get(j, "streaming");
		uint64_t n = st->expert_cache_hits + st->expert_cache_misses;

		json_object_set_new(s, "expert_cache_hits", json_integer((json_int_t)st->expert_cache_hits));
		json_object_set_new(s, "expert_cache_misses",
				    json_integer((json_int_t)st->expert_cache_misses));
		json_object_set_new(s, "expert_cache_hit_rate",
				    json_real((double)st->expert_cache_hits / (double)n));
	}
}

void run_experts_json(const struct ntx_lm *lm, const struct ntx_ctx *ctx, json_t *j)
{
	struct ntx_lm_info li;
	json_t *ls;
	int l;

	memset(&li, 0, sizeof li);
	li.size = sizeof li;
	if (!lm || !ctx || ntx_lm_info(lm, &li, NULL) != NTX_OK || li.n_expert <= 0)
		return;
	ls = json_array();
	for (l = 0; ls && l < li.n_layer; l++) {
		struct ntx_expert_layer_stats s;
		json_t *e;

		memset(&s, 0, sizeof s);
		s.size = sizeof s;
		if (ntx_ctx_expert_layer_stats(ctx, l, &s, NULL) != NTX_OK)
			continue;
		e = json_pack("{s:i, s:I, s:f}", "index", l, "routed", (json_int_t)s.routed, "cpu_share",
			      s.routed ? (double)s.routed_cpu / (double)s.routed : 0.0);
		if (e && s.cache_hits + s.cache_misses)
			json_object_set_new(e, "cache_hit_rate",
					    json_real((double)s.cache_hits /
						      (double)(s.cache_hits + s.cache_misses)));
		json_array_append_new(ls, e);
	}
	json_object_set_new(j, "experts", json_pack("{s:i, s:i, s:o}", "n_expert", li.n_expert,
						    "n_expert_used", li.n_expert_used, "layers", ls));
}

static double gbps(uint64_t bytes, double ms)
{
	return ms > 0 ? bytes / 1e9 / (ms / 1e3) : 0;
}

void run_streaming_line(const struct ntx_ctx_stats *st)
{
	if (!st->bytes_h2d && !st->bytes_disk &&
	    !(st->bytes_cpu_weights && st->backend == NTX_USE_CUDA))
		return;
	fprintf(stderr,
		PROG ": streaming: %.2f GB over PCIe (%.1f GB/s), %.2f GB from disk (%.1f GB/s), %.2f GB computed on the CPU (%.2f s); GPU waited %.2f s, CPU waited %.2f s; %lld evaluations, %.2f s\n",
		st->bytes_h2d / 1e9, gbps(st->bytes_h2d, st->t_h2d_ms), st->bytes_disk / 1e9,
		gbps(st->bytes_disk, st->t_disk_ms), st->bytes_cpu_weights / 1e9,
		st->t_cpu_ms / 1e3, st->t_gpu_wait_ms / 1e3, st->t_cpu_wait_ms / 1e3,
		(long long)st->n_eval_calls, st->t_eval_ms / 1e3);
}

/* ---- generated text ---- */

int run_is_eog(const struct run_opts *o, const struct ntx_lm *lm, int32_t id)
{
	return !o->ignore_eos && ntx_lm_is_eog(lm, id);
}

int run_text(const struct run_opts *o, const struct ntx_lm *lm, const int32_t *ids, int n,
	     char **out, size_t *len)
{
	struct ntx_error *e = ntx_error_new();
	size_t total = 0, k;
	const char *p;
	char *buf;
	int i, ok = e != NULL;

	for (i = 0; ok && i < n; i++) { /* the length first: ids are checked */
		if (run_is_eog(o, lm, ids[i]))
			continue;
		if (ntx_lm_piece(lm, ids[i], &p, &k, e)) {
			i = run_err(e);
			ntx_error_free(e);
			return i;
		}
		total += k;
	}
	ntx_error_free(e);
	buf = ok ? malloc(total + 1) : NULL;
	if (!buf)
		return run_err(NULL);
	total = 0;
	for (i = 0; i < n; i++) {
		if (!run_is_eog(o, lm, ids[i]) && ntx_lm_piece(lm, ids[i], &p, &k, NULL) == NTX_OK) {
			memcpy(buf + total, p, k);
			total += k;
		}
	}
	buf[total] = '\0';
	*out = buf;
	*len = total;
	return 0;
}

/* Append p[0..n) to *buf (*len of *cap used): 0, or -1 out of memory. */
static int buf_add(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
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

json_t *run_text_json(const struct run_opts *o, struct ntx_detokenizer *d,
		      const struct ntx_lm *lm, const int32_t *ids, int n, struct ntx_error *e)
{
	struct ntx_detokenizer *own = NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0, k;
	const char *p;
	json_t *j = NULL;
	int i, bad = 0;

	ntx_error_clear(e);
	if (!d && ntx_detokenizer_new(lm, NTX_DETOKENIZER_REPLACE_INVALID, &own, e))
		return NULL;
	d = d ? d : own;
	for (i = 0; i < n && !bad; i++)
		if (!run_is_eog(o, lm, ids[i]))
			bad = ntx_detokenizer_push(d, ids[i], &p, &k, e) ||
			      buf_add(&buf, &len, &cap, p, k);
	ntx_detokenizer_flush(d, &p, &k); /* the held tail; d starts anew */
	if (!bad && !buf_add(&buf, &len, &cap, p, k))
		j = json_stringn(buf ? buf : "", len);
	ntx_detokenizer_free(own);
	free(buf);
	return j;
}
