/* modes.c - ntx-run's generate mode over ntx.h: one prompt, its tokens
 * streamed to stdout as text (or, with --json, as JSON Lines events and a
 * summary), timings on stderr and --stats-json. --force-ids feeds given
 * tokens instead of sampled ones, --dump-logits writes every evaluated
 * row's logits (through a temporary, renamed only when the run succeeds),
 * and --draft, --lookup, --self-spec decode speculatively (the context's
 * setting, made by open.c).
 *
 * The order is the user's: --stats-json is opened before any work (an
 * unwritable path fails first), then the model and context, the prompt,
 * the forced tokens and the dump. A closed stdout pipe (| head) ends the
 * run quietly with exit 0 and no timings; a stdout that fails otherwise
 * (a full disk) is an error. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "out.h"

struct gen {
	struct run_opts *o;
	struct run_api a;
	struct ntx_error *e;
	struct run_stats stats;       /* --stats-json */
	struct ntx_output *dump;      /* --dump-logits */
	int dump_failed;              /* a write of the dump failed */
	int32_t *prompt, *force;
	int n_prompt, n_force;
	struct ntx_detokenizer *dt;   /* what is printed */
	int failed;                   /* stdout closed or failing */
	int werr;                     /* errno of the failed write (EPIPE: the reader left) */
	int32_t *toks;                /* every generated token (--json's summary) */
	int n_toks, cap_toks;
	struct ntx_gen_result res;
};

/* ---- output ---- */

/* Write and flush (the text appears token by token). */
static int write_out(struct gen *g, const char *s, size_t n)
{
	if (g->failed)
		return 1;
	errno = 0;
	if (n && (fwrite(s, 1, n, stdout) != n || fflush(stdout))) {
		g->failed = 1;
		g->werr = errno ? errno : EIO;
		return 1;
	}
	return 0;
}

static int json_line(struct gen *g, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
	int rc;

	json_decref(j);
	if (!s) {
		g->failed = 1;
		g->werr = ENOMEM;
		return 1;
	}
	rc = write_out(g, s, strlen(s)) || write_out(g, "\n", 1);
	free(s);
	return rc;
}

static void keep_token(struct gen *g, int32_t id)
{
	if (g->n_toks == g->cap_toks) {
		int cap = g->cap_toks ? g->cap_toks * 2 : 256;
		int32_t *t = realloc(g->toks, (size_t)cap * sizeof *t);

		if (t) {
			g->toks = t;
			g->cap_toks = cap;
		}
	}
	if (g->n_toks < g->cap_toks)
		g->toks[g->n_toks++] = id;
}

static int on_token(void *user, int32_t id, const char *piece, size_t len)
{
	struct gen *g = user;
	const char *s;
	size_t n;

	(void)piece;
	(void)len;
	keep_token(g, id);
	if (!g->o->json && run_is_eog(g->o, g->a.lm, id))
		return 0; /* end-of-generation tokens are not printed */
	if (ntx_detokenizer_push(g->dt, id, &s, &n, NULL))
		return 1;
	if (g->o->json)
		return json_line(g, json_pack("{s:s, s:i, s:o}", "event", "token", "id", id,
					      "text", json_stringn(s, n)));
	return write_out(g, s, n);
}

/* --dump-logits: one row of float32 per evaluated position. */
static int on_logits(void *user, const float *logits, int32_t n_vocab)
{
	struct gen *g = user;

	errno = 0;
	if (ntx_output_write(g->dump, logits, (size_t)n_vocab * sizeof *logits, NULL) == NTX_OK)
		return 0;
	g->dump_failed = 1;
	return errno ? errno : EIO; /* the failed fwrite's: "writing logits: ..." */
}

/* ---- statistics ---- */

static double rate(int n, double ms)
{
	return ms > 0 && n > 0 ? n / (ms / 1e3) : 0;
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
static double tokens_per_pass(const struct ntx_gen_result *r)
{
	return r->n_target_passes ? (double)(r->n_gen - 1) / (double)r->n_target_passes : 0;
}

static json_t *spec_json(const struct run_opts *o, const struct ntx_gen_result *r)
{
	return json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}",
			 "source", spec_source(o),
			 "drafted", (json_int_t)r->n_drafted,
			 "accepted", (json_int_t)r->n_accepted,
			 "acceptance_rate",
			 r->n_drafted ? (double)r->n_accepted / r->n_drafted : 0.0,
			 "lookup_drafted", (json_int_t)r->n_lookup_drafted,
			 "lookup_accepted", (json_int_t)r->n_lookup_accepted,
			 "target_passes", (json_int_t)r->n_target_passes,
			 "paused_steps", (json_int_t)r->n_paused_steps,
			 "draft_passes", (json_int_t)r->n_draft_passes,
			 "tokens_per_target_pass", tokens_per_pass(r),
			 "t_draft_ms", r->t_draft_ms, "t_verify_ms", r->t_verify_ms,
			 "draft_time_share", share(r->t_draft_ms, r->t_gen_ms) / 100.0,
			 "verify_time_share", share(r->t_verify_ms, r->t_gen_ms) / 100.0);
}

/* The "ntx.stats" document (NULL when out of memory). */
static json_t *stats_json(struct gen *g)
{
	const struct ntx_gen_result *r = &g->res;
	struct ntx_lm_info li;
	struct ntx_ctx_stats st;
	json_t *j;

	li.size = sizeof li;
	st.size = sizeof st;
	if (ntx_lm_info(g->a.lm, &li, NULL) || ntx_ctx_stats(g->a.ctx, &st, NULL))
		return NULL;
	j = json_pack("{s:s, s:i, s:s, s:I, s:I, s:s, s:i, s:i, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:s}",
		      "format", "ntx.stats", "version", 1, "model_filename", li.path,
		      "model_size", (json_int_t)li.file_size,
		      "model_n_params", (json_int_t)li.n_params,
		      "backend", run_backend_name(st.backend), "n_threads", run_threads(g->o),
		      "n_ctx", st.n_ctx, "kv_type", g->o->kv_type == NTX_KV_CACHE_F32 ? "f32" : "f16",
		      "n_prompt", r->n_prompt, "n_gen", r->n_gen,
		      "t_prompt_ms", r->t_prompt_ms, "t_gen_ms", r->t_gen_ms,
		      "prompt_tok_per_s", rate(r->n_prompt, r->t_prompt_ms),
		      "gen_tok_per_s", rate(r->n_gen - 1, r->t_gen_ms),
		      "stop_reason", run_finish_name(r->finish));
	if (j && spec_on(g->o))
		json_object_set_new(j, "speculative", spec_json(g->o, r));
	if (j) {
		run_streaming_json(&st, j);
		run_experts_json(g->a.lm, g->a.ctx, j);
	}
	return j;
}

static void print_timings(struct gen *g)
{
	const struct ntx_gen_result *r = &g->res;
	struct ntx_ctx_stats st;

	if (g->o->quiet)
		return;
	fprintf(stderr,
		"\n" PROG ": prompt %d tokens, %.2f s (%.2f tok/s); generated %d tokens, %.2f s (%.2f tok/s); stop: %s\n",
		r->n_prompt, r->t_prompt_ms / 1e3, rate(r->n_prompt, r->t_prompt_ms), r->n_gen,
		r->t_gen_ms / 1e3, rate(r->n_gen - 1, r->t_gen_ms), run_finish_name(r->finish));
	if (spec_on(g->o) && r->n_target_passes)
		fprintf(stderr,
			PROG ": speculative (%s): %lld drafted, %lld accepted (%.1f%%), %.2f tokens per target pass, %lld of %lld passes paused; draft %.2f s (%.0f%%), verify %.2f s (%.0f%%)\n",
			spec_source(g->o), (long long)r->n_drafted, (long long)r->n_accepted,
			r->n_drafted ? 100.0 * r->n_accepted / r->n_drafted : 0.0, tokens_per_pass(r),
			(long long)r->n_paused_steps, (long long)r->n_target_passes,
			r->t_draft_ms / 1e3, share(r->t_draft_ms, r->t_gen_ms), r->t_verify_ms / 1e3,
			share(r->t_verify_ms, r->t_gen_ms));
	st.size = sizeof st;
	if (ntx_ctx_stats(g->a.ctx, &st, NULL) == NTX_OK)
		run_streaming_line(&st);
}

/* --json's last line: "event": "done", the statistics, the text and every
 * token. */
static void json_summary(struct gen *g)
{
	json_t *sum = json_pack("{s:s}", "event", "done"), *st = stats_json(g), *text, *arr;
	int i;

	json_object_update(sum, st);
	json_decref(st);
	/* the text as printed, invalid UTF-8 as U+FFFD (what JSON carries) */
	text = run_text_json(g->o, NULL, g->a.lm, g->toks, g->n_toks, NULL);
	if (text)
		json_object_set_new(sum, "text", text);
	arr = json_array();
	for (i = 0; i < g->n_toks; i++)
		json_array_append_new(arr, json_integer(g->toks[i]));
	json_object_set_new(sum, "tokens", arr);
	json_line(g, sum);
}

/* ---- the run ---- */

/* The prompt, the forced tokens, the dump and the detokenizer: 0, or the
 * exit status after the message. */
static int gen_setup(struct gen *g)
{
	const struct run_opts *o = g->o;
	struct ntx_lm_info li;
	int i, rc;

	if ((rc = run_prompt_ids(o, g->a.lm, &g->prompt, &g->n_prompt)) != 0)
		return rc;
	if (g->n_prompt == 0 && !o->prompt_ids) {
		fprintf(stderr, PROG ": the prompt is empty\n");
		return 1;
	}
	if (o->verbose) {
		fprintf(stderr, PROG ": prompt: %d tokens:", g->n_prompt);
		for (i = 0; i < g->n_prompt; i++)
			fprintf(stderr, " %d", g->prompt[i]);
		fputc('\n', stderr);
	}
	if (g->n_prompt == 0) { /* --prompt-ids "" */
		fprintf(stderr, PROG ": empty prompt\n");
		return 1;
	}
	li.size = sizeof li;
	if (o->force_ids && (ntx_lm_info(g->a.lm, &li, g->e) ||
			     ntx_arg_ids(o->force_ids, li.n_vocab - 1, &g->force, &g->n_force, g->e)))
		return run_err(g->e);
	/* through a temporary, renamed when complete; "-" is a file of that
	 * name, as it always was (ntx_output's "-" would be stdout) */
	if (o->dump_logits &&
	    ntx_output_open(strcmp(o->dump_logits, "-") ? o->dump_logits : "./-", &g->dump, g->e))
		return run_err(g->e);
	/* JSON events carry valid UTF-8: invalid bytes become U+FFFD there */
	if (ntx_detokenizer_new(g->a.lm, o->json ? NTX_DETOKENIZER_REPLACE_INVALID : 0, &g->dt, g->e))
		return run_err(g->e);
	return 0;
}

/* Generate and print the text: 0, or the exit status after the message. */
static int gen_run(struct gen *g)
{
	const struct run_opts *o = g->o;
	struct ntx_gen_params p = o->gp;
	const char *s;
	size_t n;

	p.n_predict = o->n_predict;
	p.ignore_eog = o->ignore_eos;
	p.force = g->force;
	p.n_force = g->n_force;
	if (g->dump) {
		p.on_logits = on_logits;
		p.logits_user = g;
	}
	g->res.size = sizeof g->res;
	if (ntx_ctx_generate(g->a.ctx, 0, g->prompt, g->n_prompt, &p, on_token, g, &g->res, g->e)) {
		if (!g->dump_failed)
			return run_err(g->e);
		fprintf(stderr, PROG ": %s: %s\n", o->dump_logits, ntx_error_message(g->e));
		return 1;
	}
	ntx_detokenizer_flush(g->dt, &s, &n);
	if (!o->json)
		write_out(g, s, n);
	else if (!g->failed)
		json_summary(g);
	return 0;
}

/* After generation: the exit status, the timings, --stats-json. */
static int gen_finish(struct gen *g)
{
	const struct run_opts *o = g->o;
	int rc = 0, st_rc = 0;

	if (g->res.finish == NTX_FINISH_INTERRUPTED) {
		if (!o->quiet)
			fprintf(stderr, "\n" PROG ": interrupted\n");
		rc = 130;
	} else if (g->failed && g->werr != EPIPE) {
		/* a full disk or a broken device: never exit 0 */
		fprintf(stderr, PROG ": writing output: %s\n", strerror(g->werr));
		rc = 1;
	} else if (g->res.finish == NTX_FINISH_STOPPED && !g->failed) {
		rc = 1;
	}
	/* a closed stdout pipe (the reader has gone, as with | head) ends the
	 * run quietly: no timings either */
	if (!(g->failed && g->werr == EPIPE))
		print_timings(g);
	if (o->stats_json) {
		json_t *j = stats_json(g);

		st_rc = run_stats_commit(o, &g->stats, j);
		json_decref(j);
	}
	return st_rc ? st_rc : rc;
}

int mode_generate(struct run_opts *o)
{
	struct gen g;
	int rc;

	memset(&g, 0, sizeof g);
	g.o = o;
	g.e = ntx_error_new();
	if (!g.e)
		return run_err(NULL);
	/* --stats-json first: an unwritable file fails before any work */
	if ((rc = run_stats_open(o, &g.stats)) == 0 && (rc = run_api_open(o, &g.a)) == 0 &&
	    (rc = gen_setup(&g)) == 0 && (rc = gen_run(&g)) == 0)
		rc = run_expert_stats(o, &g.a, gen_finish(&g));
	if (g.dump && rc == 0) {
		rc = ntx_output_commit(g.dump, g.e) ? run_err(g.e) : 0;
		g.dump = NULL;
	}
	ntx_output_abort(g.dump); /* a partial dump must not look valid */
	run_stats_abort(&g.stats);
	ntx_detokenizer_free(g.dt);
	run_api_close(&g.a);
	free(g.toks);
	free(g.prompt);
	ntx_free(g.force);
	ntx_error_free(g.e);
	return rc;
}
