/* api_bench.c - the public API (include/ntx.h) for ntx-run --bench (0.5):
 * a llama-bench-style throughput test over a context's engine, the whole
 * document made here (as ntx_calibrate makes "ntx.skip"), so the timing
 * loops are the library's and the tool only prints.
 *
 * The tests, in order: pp (prompt processing of N tokens in one batch) and
 * tg (N tokens generated one at a time), each after a warm-up run and
 * repeated, with mean and standard deviation, plus the share of the
 * memory-bandwidth roofline for tg. tg decodes greedily: each token's
 * argmax (computed where the head runs) is the next input.
 *
 * The verification curve ("verify"): the time of one target pass of 1, 2,
 * 4, 8 and 16 tokens of one sequence evaluated as speculative verification
 * does (every row as if decoded alone, argmax ids out), after a prompt of
 * 64 tokens; with a draft model (ntx_ctx_set_spec), the time of one
 * drafted token (resident draft); and from them the tok/s that speculative
 * decoding would reach at acceptance 0.5 .. 0.8 with the best K, marked as
 * a projection. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_int.h"
#include "clock.h"
#include "engine.h"
#include "sampler.h"
#include "spec.h"

/* What every test object names. */
struct bench {
	struct ntx_engine *e;
	struct ntx_engine *draft;  /* NULL: no draft model */
	const char *model_path;
	uint64_t model_size;
	int n_threads;             /* as the engine counts them */
};

/* ---- pp and tg ---- */

/* One run: pp tokens as one prompt batch, then tg tokens one by one. */
static int bench_once(struct ntx_engine *e, int pp, int tg, double *t, struct ntx_err *err)
{
	int64_t V = ntx_engine_n_vocab(e);
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
	t0 = ntx_now_s();
	if (pp > 0) {
		b.n_tok = pp;
		b.tok = tok;
		b.pos = pos;
		if (ntx_engine_eval(e, &b, NULL, logits, err))
			goto out;
	} else {
		b.n_tok = 1;
		b.tok = tok;
		b.pos = pos;
		if (ntx_engine_eval(e, &b, NULL, logits, err))
			goto out;
		t0 = ntx_now_s(); /* tg alone: the first token is not timed */
	}
	if (tg > 0) {
		/* greedy: each token's argmax is the next input, and only the
		 * ids leave the device (b.ids) */
		int32_t cur = ntx_argmax(logits, V), next = 0, p = pp > 0 ? pp : 1;

		if (pp > 0)
			*t = ntx_now_s() - t0, t0 = ntx_now_s();
		for (i = 0; i < tg; i++) {
			b.n_tok = 1;
			b.tok = &cur;
			b.pos = &p;
			b.ids = &next;
			if (ntx_engine_eval(e, &b, NULL, NULL, err))
				goto out;
			cur = next;
			p++;
		}
	}
	*t = ntx_now_s() - t0;
	rc = 0;
out:
	free(tok);
	free(pos);
	free(logits);
	return rc;
}

/* The test's object: its runs' tok/s after a warm-up; for tg alone, the
 * weight bytes it moved per second against the peak bandwidth. */
static json_t *bench_test(const struct bench *B, const char *name, int pp, int tg, int reps,
			  struct ntx_err *err)
{
	double *ts = calloc((size_t)reps, sizeof *ts), sum = 0, sum2 = 0, mean, sd, t;
	int n = pp > 0 ? pp : tg, r;
	json_t *samples = json_array(), *j;
	double bw = ntx_engine_peak_gbps(B->e);
	uint64_t wbytes = ntx_engine_weight_bytes_per_token(B->e);

	if (!ts || !samples) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	/* warm-up */
	if (bench_once(B->e, pp, tg ? (tg < 4 ? tg : 4) : 0, &t, err))
		goto fail;
	for (r = 0; r < reps; r++) {
		if (bench_once(B->e, pp, tg, &t, err))
			goto fail;
		ts[r] = n / t;
		sum += ts[r];
		sum2 += ts[r] * ts[r];
		json_array_append_new(samples, json_real(ts[r]));
	}
	mean = sum / reps;
	sd = reps > 1 ? sqrt(fmax(0, (sum2 - reps * mean * mean) / (reps - 1))) : 0;
	j = json_pack("{s:s, s:s, s:I, s:I, s:s, s:i, s:i, s:i, s:f, s:f, s:o}",
		      "test", name, "model_filename", B->model_path,
		      "model_size", (json_int_t)B->model_size,
		      "weight_bytes_per_token", (json_int_t)wbytes,
		      "backend", ntx_backend_name(ntx_engine_backend(B->e)),
		      "n_threads", B->n_threads, "n_prompt", pp, "n_gen", tg,
		      "avg_ts", mean, "stddev_ts", sd, "samples_ts", samples);
	if (j && tg > 0 && pp == 0 && bw > 0) {
		double gbps = (double)wbytes * mean / 1e9;

		json_object_set_new(j, "weight_gbps", json_real(gbps));
		json_object_set_new(j, "peak_gbps", json_real(bw));
		json_object_set_new(j, "roofline_share", json_real(gbps / bw));
	}
	free(ts);
	if (!j)
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
	return j;
fail:
	free(ts);
	json_decref(samples);
	return NULL;
}

/* ---- the verification curve ---- */

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
		t0 = ntx_now_s();
		if (ntx_engine_eval(e, &b, NULL, NULL, err))
			return -1;
		ts[r > 0 ? r - 1 : 0] = ntx_now_s() - t0; /* the first is a warm-up */
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

/* The tok/s projected at acceptance 0.5 .. 0.8 from the measured passes
 * (t: the tuner holding their medians), t_draft per drafted token, t1 the
 * one-token pass. */
static json_t *projections(const struct ntx_spec_tuner *t, double t_draft, double t1)
{
	static const double accs[] = { 0.5, 0.6, 0.7, 0.8 };
	json_t *proj = json_array();
	size_t i;

	for (i = 0; proj && i < sizeof accs / sizeof accs[0]; i++) {
		double rate;
		int k = ntx_spec_best_k(t, accs[i], t_draft, &rate);

		json_array_append_new(proj, json_pack("{s:f, s:i, s:f, s:f}", "acceptance", accs[i],
						      "k", k, "tok_per_s", rate,
						      "speedup", t1 > 0 ? rate * t1 : 0.0));
	}
	return proj;
}

static json_t *bench_verify(const struct bench *B, int reps, struct ntx_err *err)
{
	static const int widths[] = { 1, 2, 4, 8, 16 };
	const int from = 64;
	struct ntx_spec_tuner t;
	json_t *j, *passes = json_object(), *proj;
	double t_draft = 0, t1 = 0, t8 = 0;
	size_t i;
	char key[8];

	if (reps > 31)
		reps = 31;
	if (reps < 3)
		reps = 3;
	if (ntx_engine_n_ctx(B->e) < from + 16) {
		ntx_err_set(err, NTX_EINVAL, "the verification curve needs a context of %d (-c)",
			    from + 16);
		goto fail;
	}
	ntx_spec_tuner_init(&t, NTX_SPEC_KMAX_ADAPTIVE, 4);
	if (fill_prompt(B->e, from, err))
		goto fail;
	for (i = 0; i < sizeof widths / sizeof widths[0]; i++) {
		double med;

		if (time_pass(B->e, from, widths[i], reps, &med, err))
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
	/* one drafted token: a single-token pass of the draft */
	if (B->draft && (fill_prompt(B->draft, from, err) ||
			 time_pass(B->draft, from, 1, reps, &t_draft, err)))
		goto fail;
	proj = projections(&t, t_draft, t1);
	ntx_engine_kv_truncate(B->e, 0, 0);
	j = json_pack("{s:s, s:s, s:s?, s:i, s:o, s:f, s:f, s:o?, s:b, s:o}", "test", "verify",
		      "model_filename", B->model_path,
		      "draft_filename", B->draft ? ntx_engine_model(B->draft)->gguf->path : NULL,
		      "n_past", from, "pass_ms", passes, "plain_tok_per_s", t1 > 0 ? 1.0 / t1 : 0.0,
		      "pass8_over_pass1", t1 > 0 ? t8 / t1 : 0.0,
		      "draft_ms_per_token", B->draft ? json_real(t_draft * 1e3) : NULL,
		      "projection", 1, "projected", proj);
	if (!j)
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
	return j;
fail:
	json_decref(passes);
	return NULL;
}

/* ---- the document ---- */

void ntx_bench_params_init(struct ntx_bench_params *p)
{
	if (!p)
		return;
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
	p->n_prompt = 512;
	p->n_gen = 128;
	p->repetitions = 3;
}

/* The tests of x into arr, in order. */
static int bench_all(const struct bench *B, const struct ntx_bench_params *x, json_t *arr,
		     struct ntx_err *err)
{
	char name[32];
	json_t *j;

	if (x->n_prompt > 0) {
		snprintf(name, sizeof name, "pp%d", x->n_prompt);
		j = bench_test(B, name, x->n_prompt, 0, x->repetitions, err);
		if (!j || json_array_append_new(arr, j))
			return -1;
	}
	if (x->n_gen > 0) {
		snprintf(name, sizeof name, "tg%d", x->n_gen);
		j = bench_test(B, name, 0, x->n_gen, x->repetitions, err);
		if (!j || json_array_append_new(arr, j))
			return -1;
	}
	j = bench_verify(B, x->repetitions * 3, err);
	return !j || json_array_append_new(arr, j) ? -1 : 0;
}

/* *json: arr indented by 2 with a trailing newline, for ntx_free. */
static enum ntx_status dump(const json_t *arr, char **json, struct ntx_error *e)
{
	char *s = json_dumps(arr, JSON_INDENT(2));
	size_t n = s ? strlen(s) : 0;

	*json = s ? malloc(n + 2) : NULL;
	if (*json) {
		memcpy(*json, s, n);
		memcpy(*json + n, "\n", 2);
	}
	free(s);
	return *json ? NTX_OK : ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
}

enum ntx_status ntx_ctx_bench(struct ntx_ctx *c, const struct ntx_bench_params *p, char **json,
			      struct ntx_error *e)
{
	struct ntx_bench_params x;
	struct ntx_err ie = { 0 };
	struct bench B;
	enum ntx_status s;
	json_t *arr;
	long nproc;
	int rc;

	if (!json)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_bench: json is NULL");
	*json = NULL;
	if (!c)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_bench: ctx is NULL");
	ntx_bench_params_init(&x);
	if ((s = ntx_api_struct_in(&x, sizeof x, p, "ntx_bench_params", e)) != NTX_OK)
		return s;
	if (x.n_prompt < 0 || x.n_prompt > (1 << 20) || x.n_gen < 0 || x.n_gen > (1 << 20))
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_bench_params: n_prompt %d, n_gen %d: expected 0 to %d",
				   x.n_prompt, x.n_gen, 1 << 20);
	if (x.repetitions < 1 || x.repetitions > 1000)
		return ntx_api_set(e, NTX_STATUS_INVALID, "repetitions %d is out of range [1, 1000]",
				   x.repetitions);
	if (c->sched && ntx_sched_n_active(c->sched))
		return ntx_api_set(e, NTX_STATUS_BUSY, "%d batch requests are active",
				   ntx_sched_n_active(c->sched));
	ntx_api_drop_sched(c); /* sequence 0's cache is about to be overwritten */
	nproc = sysconf(_SC_NPROCESSORS_ONLN);
	B.e = c->e;
	B.draft = c->draft;
	B.model_path = c->lm->m->gguf->path;
	B.model_size = c->lm->m->gguf->file_size;
	B.n_threads = c->n_threads > 0 ? c->n_threads : nproc > 0 ? (int)nproc : 1;
	arr = json_array();
	if (!arr)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	rc = bench_all(&B, &x, arr, &ie);
	c->intr = 0;
	if (rc) {
		json_decref(arr);
		if (!ie.msg[0])
			ntx_err_set(&ie, NTX_ENOMEM, "out of memory");
		return ntx_api_fail(e, &ie);
	}
	s = dump(arr, json, e);
	json_decref(arr);
	return s;
}
