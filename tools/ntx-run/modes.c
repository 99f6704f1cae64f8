/* modes.c - the generate mode of ntx-run. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parse.h"
#include "run_int.h"
#include "unicode.h"

/* ---- generate ---- */

struct out_ctx {
	struct run_ctx *c;
	struct ntx_detok *dt;
	int json;
	int failed;   /* stdout closed or failing */
	int werr;     /* errno of the failed write (EPIPE: the reader left) */
	int32_t *toks;
	int n_toks, cap_toks;
};

/* Write and flush (the text appears token by token). */
static int write_out(struct out_ctx *oc, const char *s, size_t n)
{
	if (oc->failed)
		return 1;
	errno = 0;
	if (n && (fwrite(s, 1, n, stdout) != n || fflush(stdout))) {
		oc->failed = 1;
		oc->werr = errno ? errno : EIO;
		return 1;
	}
	return 0;
}

static int json_line(struct out_ctx *oc, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
	int rc;

	json_decref(j);
	if (!s) {
		oc->failed = 1;
		oc->werr = ENOMEM;
		return 1;
	}
	rc = write_out(oc, s, strlen(s)) || write_out(oc, "\n", 1);
	free(s);
	return rc;
}

static int on_token(void *p, int32_t tok)
{
	struct out_ctx *oc = p;
	const char *s;
	size_t n;
	struct ntx_err err;

	if (oc->n_toks == oc->cap_toks) {
		int cap = oc->cap_toks ? oc->cap_toks * 2 : 256;
		int32_t *t = realloc(oc->toks, (size_t)cap * sizeof *t);

		if (t) {
			oc->toks = t;
			oc->cap_toks = cap;
		}
	}
	if (oc->n_toks < oc->cap_toks)
		oc->toks[oc->n_toks++] = tok;
	if (oc->c->eog[tok] && !oc->json)
		return 0; /* end-of-generation tokens are not printed */
	if (ntx_detok_push(oc->dt, tok, &s, &n, &err))
		return 1;
	if (oc->json)
		return json_line(oc, json_pack("{s:s, s:i, s:o}", "event", "token", "id", tok,
					       "text", run_json_text(s, n)));
	return write_out(oc, s, n);
}

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

static double rate(int n, double t)
{
	return t > 0 && n > 0 ? n / t : 0;
}

static uint64_t model_params(const struct ntx_model *m)
{
	uint64_t n = 0, i;

	for (i = 0; i < m->gguf->n_tensors; i++)
		n += (uint64_t)m->gguf->tensors[i].n_elem;
	return n;
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

static int spec_on(const struct run_opts *o)
{
	return o->self_spec || o->draft_path || o->lookup;
}

static const char *spec_source(const struct run_opts *o)
{
	if (o->self_spec)
		return o->lookup ? "lookup + self" : "self";
	if (o->draft_path)
		return o->lookup ? "lookup + draft model" : "draft model";
	return "lookup";
}

static double share(double part, double whole)
{
	return whole > 0 ? 100.0 * part / whole : 0;
}

/* Tokens produced per target pass during generation: the first token comes
 * from the prompt pass. */
static double tokens_per_pass(const struct ntx_gen_stats *st)
{
	return st->n_full_passes ? (double)(st->n_gen - 1) / (double)st->n_full_passes : 0;
}

static json_t *spec_json(const struct run_opts *o, const struct ntx_gen_stats *st)
{
	return json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}",
			 "source", spec_source(o),
			 "drafted", (json_int_t)st->n_drafted,
			 "accepted", (json_int_t)st->n_accepted,
			 "acceptance_rate",
			 st->n_drafted ? (double)st->n_accepted / st->n_drafted : 0.0,
			 "lookup_drafted", (json_int_t)st->n_lookup_drafted,
			 "lookup_accepted", (json_int_t)st->n_lookup_accepted,
			 "target_passes", (json_int_t)st->n_full_passes,
			 "draft_passes", (json_int_t)st->n_draft_passes,
			 "tokens_per_target_pass", tokens_per_pass(st),
			 "t_draft_ms", st->t_draft_s * 1e3, "t_verify_ms", st->t_verify_s * 1e3,
			 "draft_time_share", share(st->t_draft_s, st->t_gen_s) / 100.0,
			 "verify_time_share", share(st->t_verify_s, st->t_gen_s) / 100.0);
}

static json_t *run_stats_json(struct run_ctx *c, const struct ntx_gen_stats *st)
{
	json_t *j;

	j = json_pack("{s:s, s:i, s:s, s:I, s:I, s:s, s:i, s:i, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:s}",
		      "format", "ntx.stats", "version", 1,
		      "model_filename", c->model->gguf->path,
		      "model_size", (json_int_t)c->model->gguf->file_size,
		      "model_n_params", (json_int_t)model_params(c->model),
		      "backend", ntx_backend_name(ntx_engine_backend(c->engine)),
		      "n_threads", run_n_threads(c->o),
		      "n_ctx", ntx_engine_n_ctx(c->engine),
		      "kv_type", c->o->kv_type == NTX_KV_CACHE_F32 ? "f32" : "f16",
		      "n_prompt", st->n_prompt, "n_gen", st->n_gen,
		      "t_prompt_ms", st->t_prompt_s * 1e3, "t_gen_ms", st->t_gen_s * 1e3,
		      "prompt_tok_per_s", rate(st->n_prompt, st->t_prompt_s),
		      "gen_tok_per_s", rate(st->n_gen - 1, st->t_gen_s),
		      "stop_reason", ntx_stop_name(st->stop));
	if (j && spec_on(c->o))
		json_object_set_new(j, "speculative", spec_json(c->o, st));
	if (j)
		run_add_streaming_json(c, j);
	return j;
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

static void print_timings(struct run_ctx *c, const struct ntx_gen_stats *st)
{
	if (c->o->quiet)
		return;
	fprintf(stderr,
		"\n" PROG ": prompt %d tokens, %.2f s (%.2f tok/s); generated %d tokens, %.2f s (%.2f tok/s); stop: %s\n",
		st->n_prompt, st->t_prompt_s, rate(st->n_prompt, st->t_prompt_s), st->n_gen,
		st->t_gen_s, rate(st->n_gen - 1, st->t_gen_s), ntx_stop_name(st->stop));
	if (spec_on(c->o) && st->n_full_passes)
		fprintf(stderr,
			PROG ": speculative (%s): %lld drafted, %lld accepted (%.1f%%), %.2f tokens per target pass; draft %.2f s (%.0f%%), verify %.2f s (%.0f%%)\n",
			spec_source(c->o), (long long)st->n_drafted, (long long)st->n_accepted,
			st->n_drafted ? 100.0 * st->n_accepted / st->n_drafted : 0.0,
			tokens_per_pass(st), st->t_draft_s, share(st->t_draft_s, st->t_gen_s),
			st->t_verify_s, share(st->t_verify_s, st->t_gen_s));
	run_print_streaming(c);
}

/* --dump-logits: the engine's logits, a row at a time. */
static int dump_row(void *p, const float *row, int64_t n_vocab)
{
	errno = 0;
	if (fwrite(row, sizeof *row, (size_t)n_vocab, p) != (size_t)n_vocab)
		return errno ? errno : EIO;
	return 0;
}

static int32_t *parse_force(struct run_ctx *c, int *n, struct ntx_err *err)
{
	int32_t *ids = NULL;

	*n = 0;
	if (!c->o->force_ids)
		return NULL;
	if (ntx_parse_id_list(c->o->force_ids, (int32_t)c->model->cfg.n_vocab - 1, &ids, n, err))
		return NULL;
	return ids;
}

int mode_generate(struct run_ctx *c)
{
	const struct run_opts *o = c->o;
	struct ntx_err err = { 0 };
	struct ntx_gen_opts go;
	struct ntx_gen_stats st;
	struct out_ctx oc;
	struct ntx_outfile dump = { 0 };
	int32_t *prompt = NULL, *force = NULL;
	int n_prompt, n_force = 0, rc = 0;
	const char *s;
	size_t n;

	memset(&oc, 0, sizeof oc);
	oc.c = c;
	oc.json = o->json;
	if (run_read_prompt(o, c->vocab, &prompt, &n_prompt, &err))
		return run_fail(&err);
	if (o->verbose) {
		int i;

		fprintf(stderr, PROG ": prompt: %d tokens:", n_prompt);
		for (i = 0; i < n_prompt; i++)
			fprintf(stderr, " %d", prompt[i]);
		fputc('\n', stderr);
	}
	force = parse_force(c, &n_force, &err);
	if (o->force_ids && !force && err.msg[0]) {
		free(prompt);
		return run_fail(&err);
	}
	memset(&go, 0, sizeof go);
	go.n_predict = o->n_predict;
	run_sampler_params(o, &go.sp);
	go.eog = c->eog;
	go.force = force;
	go.n_force = n_force;
	go.self_spec = o->self_spec;
	go.draft = c->draft;
	go.lookup = o->lookup;
	go.draft_k = o->draft_k > 0 ? o->draft_k : 4;
	go.adaptive_k = o->draft_k == 0;
	go.draft_mask = c->draft_mask;
	if (o->dump_logits) { /* through a temporary, renamed when complete */
		if (ntx_outfile_open(&dump, o->dump_logits, "wb", NULL, &err)) {
			free(prompt);
			free(force);
			return run_fail(&err);
		}
		go.logits = dump_row;
		go.logits_ctx = dump.f;
	}
	/* JSON events carry valid UTF-8: invalid bytes become U+FFFD there */
	oc.dt = ntx_detok_new(c->vocab, o->json ? NTX_DETOK_REPLACE_INVALID : 0, &err);
	if (!oc.dt) {
		rc = run_fail(&err);
		goto out;
	}
	if (ntx_generate(c->engine, 0, prompt, n_prompt, &go, on_token, &oc, &st, &err)) {
		if (go.logits && ferror(dump.f))
			ntx_err_prefix(&err, "%s", o->dump_logits);
		rc = run_fail(&err);
		goto out;
	}
	ntx_detok_flush(oc.dt, &s, &n);
	if (!o->json)
		write_out(&oc, s, n);
	if (o->json && !oc.failed) {
		json_t *sum = json_pack("{s:s}", "event", "done"), *stats = run_stats_json(c, &st);

		/* the summary: "event" first, then the statistics */
		json_object_update(sum, stats);
		json_decref(stats);
		{
			char *text = NULL;
			size_t tl = 0;
			int k;

			/* exactly the text the plain mode prints */
			if (run_gen_text(c, oc.toks, oc.n_toks, &text, &tl, &err) == 0) {
				json_object_set_new(sum, "text", run_json_text(text, tl));
				free(text);
			}
			json_t *arr = json_array();

			for (k = 0; k < oc.n_toks; k++)
				json_array_append_new(arr, json_integer(oc.toks[k]));
			json_object_set_new(sum, "tokens", arr);
		}
		json_line(&oc, sum);
	}
	if (st.stop == NTX_STOP_INTERRUPT) {
		if (!o->quiet)
			fprintf(stderr, "\n" PROG ": interrupted\n");
		rc = 130;
	} else if (oc.failed && oc.werr != EPIPE) {
		/* a full disk or a broken device: never exit 0 */
		fprintf(stderr, PROG ": writing output: %s\n", strerror(oc.werr));
		rc = 1;
	} else if (st.stop == NTX_STOP_CALLER && !oc.failed) {
		rc = 1;
	}
	/* a closed stdout pipe (the reader has gone, as with | head) ends the
	 * run quietly: no timings either */
	if (!(oc.failed && oc.werr == EPIPE))
		print_timings(c, &st);
	if (o->stats_json) {
		json_t *j = run_stats_json(c, &st);

		if (!j || run_write_stats(c, j, &err))
			rc = run_fail(&err);
		json_decref(j);
	}
out:
	if (go.logits && rc == 0 && ntx_outfile_commit(&dump, &err))
		rc = run_fail(&err);
	ntx_outfile_abort(&dump); /* a partial dump must not look valid */
	ntx_detok_free(oc.dt);
	free(oc.toks);
	free(prompt);
	free(force);
	return rc;
}
