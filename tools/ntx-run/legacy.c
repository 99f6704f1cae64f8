/* legacy.c - what --batch and --bench (batch.c, bench.c) print through the
 * library's internals: the generated text, JSON strings, the thread count,
 * the engine's streaming counters, the --stats-json file. Moved here
 * unchanged from modes.c when the generate mode went over ntx.h (out.c has
 * its ntx.h twins); it goes when they do (doc/ntx-run-api.md). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_int.h"
#include "unicode.h"

int run_gen_text(const struct run_ctx *c, const int32_t *ids, int n, char **out, size_t *len,
		 struct ntx_err *err)
{
	size_t total = 0, k;
	const char *p;
	char *buf;
	int i;

	for (i = 0; i < n; i++) {
		if (c->eog[ids[i]])
			continue;
		if (!ntx_vocab_piece(c->vocab, ids[i], 0, &k))
			return ntx_err_set(err, NTX_EINVAL, "token id %d is out of range", ids[i]);
		total += k;
	}
	buf = malloc(total + 1);
	if (!buf)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	total = 0;
	for (i = 0; i < n; i++) {
		if (c->eog[ids[i]])
			continue;
		p = ntx_vocab_piece(c->vocab, ids[i], 0, &k);
		memcpy(buf + total, p, k);
		total += k;
	}
	buf[total] = '\0';
	*out = buf;
	*len = total;
	return 0;
}

json_t *run_json_text(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	size_t m;
	char *v;

	if (j)
		return j;
	/* not valid UTF-8 (a character cut at the end, stray bytes): JSON
	 * cannot carry the bytes, so each invalid one becomes U+FFFD */
	v = ntx_utf8_sanitize(s, n, &m);
	j = v ? json_stringn(v, m) : NULL;
	free(v);
	return j;
}

/* The thread count the engine uses (its default: every online core). */
int run_n_threads(const struct run_opts *o)
{
	long n;

	if (o->n_threads > 0)
		return o->n_threads;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

void run_add_streaming_json(const struct run_ctx *c, json_t *j)
{
	struct ntx_engine_stats es;

	ntx_engine_get_stats(c->engine, &es);
	if (es.bytes_h2d || es.bytes_disk || es.bytes_cpu_weights)
		json_object_set_new(j, "streaming",
				    json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I}",
					      "bytes_h2d", (json_int_t)es.bytes_h2d,
					      "bytes_disk", (json_int_t)es.bytes_disk,
					      "bytes_cpu_weights", (json_int_t)es.bytes_cpu_weights,
					      "t_h2d_s", es.t_h2d_s, "t_disk_s", es.t_disk_s,
					      "t_cpu_s", es.t_cpu_s, "t_gpu_wait_s", es.t_gpu_wait_s,
					      "t_cpu_wait_s", es.t_cpu_wait_s, "t_eval_s", es.t_eval_s,
					      "n_eval_calls", (json_int_t)es.n_eval_calls));
}

void run_print_streaming(const struct run_ctx *c)
{
	struct ntx_engine_stats es;

	ntx_engine_get_stats(c->engine, &es);
	if (es.bytes_h2d || es.bytes_disk ||
	    (es.bytes_cpu_weights && ntx_engine_backend(c->engine) == NTX_BACKEND_CUDA))
		fprintf(stderr,
			PROG ": streaming: %.2f GB over PCIe (%.1f GB/s), %.2f GB from disk (%.1f GB/s), %.2f GB computed on the CPU (%.2f s); GPU waited %.2f s, CPU waited %.2f s; %lld evaluations, %.2f s\n",
			es.bytes_h2d / 1e9, es.t_h2d_s > 0 ? es.bytes_h2d / 1e9 / es.t_h2d_s : 0,
			es.bytes_disk / 1e9, es.t_disk_s > 0 ? es.bytes_disk / 1e9 / es.t_disk_s : 0,
			es.bytes_cpu_weights / 1e9, es.t_cpu_s, es.t_gpu_wait_s, es.t_cpu_wait_s,
			(long long)es.n_eval_calls, es.t_eval_s);
}

int run_write_stats(struct run_ctx *c, json_t *j, struct ntx_err *err)
{
	FILE *f = c->stats.f;

	if (!f)
		return 0;
	errno = 0;
	if (json_dumpf(j, f, JSON_INDENT(2)) || fputc('\n', f) == EOF || fflush(f)) {
		ntx_err_errno(err, errno ? errno : EIO, "%s", c->o->stats_json);
		ntx_outfile_abort(&c->stats);
		return -1;
	}
	return ntx_outfile_commit(&c->stats, err);
}
