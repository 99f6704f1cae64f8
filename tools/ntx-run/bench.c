/* bench.c - llama-bench-style throughput test: pp (prompt processing of N
 * tokens in one batch) and tg (N tokens generated one at a time), repeated,
 * as JSON on stdout with mean and standard deviation, plus the share of the
 * memory-bandwidth roofline for tg. tg decodes greedily: each token's
 * argmax (computed where the head runs) is the next input.
 *
 * The verification curve ("verify"): the time of one target pass of 1, 2,
 * 4, 8 and 16 tokens of one sequence evaluated as speculative verification
 * does (every row as if decoded alone, argmax ids out), after a prompt of
 * 64 tokens; with --draft, the time of one drafted token (resident draft);
 * and from them the tok/s that speculative decoding would reach at
 * acceptance 0.5 .. 0.8 with the best K, marked as a projection. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run_int.h"
#include "tool.h"
#include "spec.h"

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
	t0 = tool_now_s();
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
		t0 = tool_now_s(); /* tg alone: the first token is not timed */
	}
	if (tg > 0) {
		/* greedy: each token's argmax is the next input, and only the
		 * ids leave the device (b.ids) */
		int32_t cur = ntx_argmax(logits, V), next = 0, p = pp > 0 ? pp : 1;

		if (pp > 0)
			*t = tool_now_s() - t0, t0 = tool_now_s();
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
	*t = tool_now_s() - t0;
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

/* Median seconds of reps single-sequence passes of n tokens at positions
 * from.. (verification rows), the cache truncated back after each. */
static int time_pass(struct ntx_engine *e, int from, int n, int reps, double *med,
		     struct ntx_err *err)
{
	int32_t tok[32], pos[32], ids[32];
	uint8_t want[32];
	double ts[32], t0;
	struct ntx_batch b;
	int i, r;

	for (i = 0; i < n; i++) {
		tok[i] = (int32_t)((1000003u * (unsigned)(i + from)) % 1000u) + 1;
		pos[i] = from + i;
		want[i] = 1;
	}
	memset(&b, 0, sizeof b);
	b.n_tok = n;
	b.tok = tok;
	b.pos = pos;
	b.want = want;
	b.verify = 1;
	b.ids = ids;
	for (r = 0; r < reps + 1; r++) {
		t0 = tool_now_s();
		if (ntx_engine_eval(e, &b, NULL, NULL, err))
			return -1;
		ts[r > 0 ? r - 1 : 0] = tool_now_s() - t0; /* the first is a warm-up */
		ntx_engine_kv_truncate(e, 0, from);
	}
	for (i = 1; i < reps; i++) { /* insertion sort: reps is small */
		double x = ts[i];
		int j = i - 1;

		for (; j >= 0 && ts[j] > x; j--)
			ts[j + 1] = ts[j];
		ts[j + 1] = x;
	}
	*med = ts[reps / 2];
	return 0;
}

/* A prompt of n tokens into sequence 0 of e. */
static int fill_prompt(struct ntx_engine *e, int n, struct ntx_err *err)
{
	int32_t tok[64], pos[64];
	struct ntx_batch b;
	int i;

	for (i = 0; i < n; i++) {
		tok[i] = (int32_t)((7919u * (unsigned)i) % 1000u) + 1;
		pos[i] = i;
	}
	memset(&b, 0, sizeof b);
	b.n_tok = n;
	b.tok = tok;
	b.pos = pos;
	ntx_engine_kv_truncate(e, 0, 0);
	return ntx_engine_eval(e, &b, NULL, NULL, err);
}

static json_t *bench_verify(struct run_ctx *c, int reps, struct ntx_err *err)
{
	static const int widths[] = { 1, 2, 4, 8, 16 };
	static const double accs[] = { 0.5, 0.6, 0.7, 0.8 };
	const int from = 64;
	struct ntx_spec_tuner t;
	json_t *j, *passes = json_object(), *proj = json_array();
	double t_draft = 0, t1 = 0, t8 = 0;
	size_t i;
	char key[8];

	if (reps > 31)
		reps = 31;
	if (reps < 3)
		reps = 3;
	if (ntx_engine_n_ctx(c->engine) < from + 16) {
		ntx_err_set(err, NTX_EINVAL, "the verification curve needs a context of %d (-c)",
			    from + 16);
		goto fail;
	}
	ntx_spec_tuner_init(&t, NTX_SPEC_KMAX_ADAPTIVE, 4);
	if (fill_prompt(c->engine, from, err))
		goto fail;
	for (i = 0; i < sizeof widths / sizeof widths[0]; i++) {
		double med;

		if (time_pass(c->engine, from, widths[i], reps, &med, err))
			goto fail;
		ntx_spec_tuner_observe_pass(&t, widths[i], med);
		t.t_pass[widths[i]] = med; /* the median, not a running average */
		snprintf(key, sizeof key, "%d", widths[i]);
		json_object_set_new(passes, key, json_real(med * 1e3));
		if (widths[i] == 1)
			t1 = med;
		if (widths[i] == 8)
			t8 = med;
	}
	if (c->draft) {
		/* one drafted token: a single-token pass of the draft */
		if (fill_prompt(c->draft, from, err) || time_pass(c->draft, from, 1, reps, &t_draft, err))
			goto fail;
	}
	for (i = 0; i < sizeof accs / sizeof accs[0]; i++) {
		double rate;
		int k = ntx_spec_best_k(&t, accs[i], t_draft, &rate);

		json_array_append_new(proj, json_pack("{s:f, s:i, s:f, s:f}", "acceptance", accs[i],
						      "k", k, "tok_per_s", rate,
						      "speedup", t1 > 0 ? rate * t1 : 0.0));
	}
	ntx_engine_kv_truncate(c->engine, 0, 0);
	j = json_pack("{s:s, s:s, s:s?, s:i, s:o, s:f, s:f, s:o?, s:b, s:o}", "test", "verify",
		      "model_filename", c->model->gguf->path,
		      "draft_filename", c->o->draft_path, "n_past", from,
		      "pass_ms", passes, "plain_tok_per_s", t1 > 0 ? 1.0 / t1 : 0.0,
		      "pass8_over_pass1", t1 > 0 ? t8 / t1 : 0.0,
		      "draft_ms_per_token", c->draft ? json_real(t_draft * 1e3) : NULL,
		      "projection", 1, "projected", proj);
	return j;
fail:
	json_decref(passes);
	json_decref(proj);
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
	{
		j = bench_verify(c, o->bench_reps * 3, &err);
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
