/* bench.c - llama-bench-style throughput test: pp (prompt processing of N
 * tokens in one batch) and tg (N tokens generated one at a time), repeated,
 * as JSON on stdout with mean and standard deviation, plus the share of the
 * memory-bandwidth roofline for tg. tg decodes greedily: each token's
 * argmax (computed where the head runs) is the next input. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One run: pp tokens as one prompt batch, then tg tokens one by one. */
static int bench_once(struct run_ctx *c, int pp, int tg, double *t, struct ntx_err *err)
{
	int64_t V = ntx_engine_n_vocab(c->engine);
	int32_t *tok = malloc((size_t)(pp > 0 ? pp : 1) * sizeof *tok), *pos;
	float *logits = malloc((size_t)V * sizeof(float));
	struct ntx_batch b;
	double t0;
	int i, rc = -1;
	uint64_t x = 0x243F6A8885A308D3ull;

	pos = malloc((size_t)(pp > 0 ? pp : 1) * sizeof *pos);
	if (!tok || !pos || !logits) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < (pp > 0 ? pp : 1); i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		tok[i] = (int32_t)((x >> 33) % (uint64_t)V);
		pos[i] = i;
	}
	memset(&b, 0, sizeof b);
	t0 = now_s();
	if (pp > 0) {
		b.n_tok = pp;
		b.tok = tok;
		b.pos = pos;
		if (ntx_engine_eval(c->engine, &b, NULL, logits, err))
			goto out;
	} else {
		b.n_tok = 1;
		b.tok = tok;
		b.pos = pos;
		if (ntx_engine_eval(c->engine, &b, NULL, logits, err))
			goto out;
		t0 = now_s(); /* tg alone: the first token is not timed */
	}
	if (tg > 0) {
		/* greedy: each token's argmax is the next input, and only the
		 * ids leave the device (b.ids) */
		int32_t cur = ntx_argmax(logits, V), next = 0, p = pp > 0 ? pp : 1;

		if (pp > 0)
			*t = now_s() - t0, t0 = now_s();
		for (i = 0; i < tg; i++) {
			b.n_tok = 1;
			b.tok = &cur;
			b.pos = &p;
			b.ids = &next;
			if (ntx_engine_eval(c->engine, &b, NULL, NULL, err))
				goto out;
			cur = next;
			p++;
		}
	}
	*t = now_s() - t0;
	rc = 0;
out:
	free(tok);
	free(pos);
	free(logits);
	return rc;
}

static json_t *bench_test(struct run_ctx *c, const char *name, int pp, int tg, int reps,
			  struct ntx_err *err)
{
	double *ts = calloc((size_t)reps, sizeof *ts), sum = 0, sum2 = 0, mean, sd, t;
	int n = pp > 0 ? pp : tg, r;
	json_t *samples = json_array(), *j;
	struct ntx_engine_stats st;
	double bw = ntx_engine_peak_gbps(c->engine);
	uint64_t wbytes = ntx_engine_weight_bytes_per_token(c->engine);

	if (!ts || !samples) {
		free(ts);
		json_decref(samples);
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	/* warm-up */
	if (bench_once(c, pp, tg ? (tg < 4 ? tg : 4) : 0, &t, err))
		goto fail;
	for (r = 0; r < reps; r++) {
		if (bench_once(c, pp, tg, &t, err))
			goto fail;
		ts[r] = n / t;
		sum += ts[r];
		sum2 += ts[r] * ts[r];
		json_array_append_new(samples, json_real(ts[r]));
	}
	mean = sum / reps;
	sd = reps > 1 ? sqrt(fmax(0, (sum2 - reps * mean * mean) / (reps - 1))) : 0;
	ntx_engine_get_stats(c->engine, &st);
	j = json_pack("{s:s, s:s, s:I, s:I, s:s, s:i, s:i, s:i, s:f, s:f, s:o}",
		      "test", name, "model_filename", c->model->gguf->path,
		      "model_size", (json_int_t)c->model->gguf->file_size,
		      "weight_bytes_per_token", (json_int_t)wbytes,
		      "backend", ntx_backend_name(ntx_engine_backend(c->engine)),
		      "n_threads", run_n_threads(c->o), "n_prompt", pp, "n_gen", tg,
		      "avg_ts", mean, "stddev_ts", sd, "samples_ts", samples);
	if (tg > 0 && pp == 0 && bw > 0) {
		double gbps = (double)wbytes * mean / 1e9;

		json_object_set_new(j, "weight_gbps", json_real(gbps));
		json_object_set_new(j, "peak_gbps", json_real(bw));
		json_object_set_new(j, "roofline_share", json_real(gbps / bw));
	}
	free(ts);
	return j;
fail:
	free(ts);
	json_decref(samples);
	return NULL;
}

int mode_bench(struct run_ctx *c)
{
	const struct run_opts *o = c->o;
	struct ntx_err err = { 0 };
	json_t *arr = json_array(), *j;
	char name[32];
	int rc = 0;

	if (o->bench_pp > 0) {
		snprintf(name, sizeof name, "pp%d", o->bench_pp);
		j = bench_test(c, name, o->bench_pp, 0, o->bench_reps, &err);
		if (!j)
			goto fail;
		json_array_append_new(arr, j);
	}
	if (o->bench_tg > 0) {
		snprintf(name, sizeof name, "tg%d", o->bench_tg);
		j = bench_test(c, name, 0, o->bench_tg, o->bench_reps, &err);
		if (!j)
			goto fail;
		json_array_append_new(arr, j);
	}
	if (json_dumpf(arr, stdout, JSON_INDENT(2)) || fputc('\n', stdout) == EOF)
		rc = 1;
	json_decref(arr);
	return rc;
fail:
	json_decref(arr);
	return run_fail(&err);
}
