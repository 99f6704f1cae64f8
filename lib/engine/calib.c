/* calib.c - layer-skip calibration (calib.h).
 *
 * Three steps, each its own section below:
 *   1. the calibration text runs through the full model in chunks of n_ctx
 *      tokens (ntx_perplexity, with the engine collecting per-layer cosine
 *      statistics): mean and spread of cos(in, out) for every layer;
 *   2. candidate sets: the layers with the highest mean cosine (the ends
 *      and the plan's skipped layers excluded), one set per asked size,
 *      plus the threshold set and, with naive, the last-layers baseline;
 *   3. with a held-out text, the full model's log-probabilities are kept in
 *      a temporary file and every set is scored against them (PPL, KL
 *      divergence, top-1 agreement), as llama-perplexity does.
 * The document is built last, keys in a fixed order (doc/skip-calib.md). */
#include "calib.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"

struct cset {
	const char *method;   /* "calibrated", "threshold", "naive_last" */
	int n;
	int layers[NTX_CALIB_MAX_COUNT];
	struct ntx_ppl_result r;
	int evaluated;
};

/* a layer and its mean cosine, for sorting without global state */
struct ranked {
	double cos;
	int layer;
};

struct pass {
	const struct ntx_calib_opts *o;
	const char *what;
};

static void on_chunk(void *p, int chunk, int n_chunks, double ppl)
{
	struct pass *ps = p;

	if (ps->o->progress)
		ps->o->progress(ps->o->user, ps->what, chunk, n_chunks, ppl);
}

/* descending mean cosine, then ascending index */
static int cmp_ranked(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->cos != y->cos)
		return x->cos < y->cos ? 1 : -1;
	return x->layer - y->layer;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

static int plan_skips(const struct ntx_plan *plan, int l)
{
	return plan && plan->layers[l].skip;
}

/* ---- checks ---- */

static int check_opts(const struct ntx_calib_opts *o, struct ntx_err *err)
{
	int i;

	if (!o->calib && o->calib_len)
		return ntx_err_set(err, NTX_EINVAL, "calibration text: NULL with length %zu",
				   o->calib_len);
	if (!o->eval && o->eval_len)
		return ntx_err_set(err, NTX_EINVAL, "evaluation text: NULL with length %zu",
				   o->eval_len);
	if (o->n_counts < 0 || o->n_counts > NTX_CALIB_MAX_SETS || (o->n_counts && !o->counts))
		return ntx_err_set(err, NTX_EINVAL, "%d set sizes: at most %d", o->n_counts,
				   NTX_CALIB_MAX_SETS);
	for (i = 0; i < o->n_counts; i++)
		if (o->counts[i] < 1 || o->counts[i] > NTX_CALIB_MAX_COUNT)
			return ntx_err_set(err, NTX_EINVAL, "%d is out of range [1, %d]",
					   o->counts[i], NTX_CALIB_MAX_COUNT);
	if (o->use_threshold && !(o->threshold >= -1 && o->threshold <= 1))
		return ntx_err_set(err, NTX_EINVAL, "threshold %g is out of range [-1, 1]",
				   o->threshold);
	if (o->n_ctx && (o->n_ctx < 8 || o->n_ctx > 1 << 20))
		return ntx_err_set(err, NTX_EINVAL, "%d is out of range [8, %d]", o->n_ctx, 1 << 20);
	if (o->n_threads < 0 || o->n_threads > 1024)
		return ntx_err_set(err, NTX_EINVAL, "threads %d is out of range [0, 1024]",
				   o->n_threads);
	return 0;
}

/* ---- candidate sets ---- */

/* Fill sets[] (room for 2 * n_counts + 1) from the per-layer means; returns
 * how many. */
static int make_sets(const struct ntx_calib_opts *o, const struct ntx_plan *plan, int L,
		     const double *cos, const int *counts, int n_counts, struct cset *sets,
		     struct ranked *order)
{
	int n_cand = 0, n_sets = 0, i, l;

	for (l = 0; l < L && l < NTX_CALIB_MAX_COUNT; l++) {
		if (!o->allow_ends && (l == 0 || l == L - 1))
			continue;
		if (plan_skips(plan, l))
			continue; /* the plan skips it always: not a candidate */
		order[n_cand].cos = cos[l];
		order[n_cand++].layer = l;
	}
	qsort(order, (size_t)n_cand, sizeof *order, cmp_ranked);
	for (i = 0; i < n_counts; i++) {
		struct cset *s = &sets[n_sets];
		int k = counts[i] < n_cand ? counts[i] : n_cand, j, dup = 0;

		/* sizes past the candidates collapse into one set: once */
		for (j = 0; j < n_sets; j++)
			dup |= !strcmp(sets[j].method, "calibrated") && sets[j].n == k;
		if (dup || k == 0)
			continue;
		s->method = "calibrated";
		s->n = k;
		for (j = 0; j < k; j++)
			s->layers[j] = order[j].layer;
		qsort(s->layers, (size_t)k, sizeof(int), cmp_int);
		n_sets++;
		if (o->naive) {
			struct cset *nv = &sets[n_sets++];
			int top = o->allow_ends ? L - 1 : L - 2;

			nv->method = "naive_last";
			nv->n = 0;
			for (j = top; nv->n < k && j >= (o->allow_ends ? 0 : 1); j--)
				if (!plan_skips(plan, j))
					nv->layers[nv->n++] = j;
			qsort(nv->layers, (size_t)nv->n, sizeof(int), cmp_int);
		}
	}
	if (o->use_threshold) {
		struct cset *s = &sets[n_sets++];

		s->method = "threshold";
		for (i = 0; i < n_cand; i++)
			if (order[i].cos >= o->threshold)
				s->layers[s->n++] = order[i].layer;
		qsort(s->layers, (size_t)s->n, sizeof(int), cmp_int);
	}
	return n_sets;
}

/* ---- the document ---- */

static json_t *set_json(const struct cset *s)
{
	json_t *ls = json_array(), *j;
	int i;

	for (i = 0; i < s->n; i++)
		json_array_append_new(ls, json_integer(s->layers[i]));
	j = json_pack("{s:s, s:i, s:o}", "method", s->method, "count", s->n, "layers", ls);
	if (j && s->evaluated)
		json_object_set_new(j, "eval",
				    json_pack("{s:f, s:f, s:f, s:f, s:f, s:i}", "ppl", s->r.ppl,
					      "ppl_err", s->r.ppl_err, "kld", s->r.kld, "kld_err",
					      s->r.kld_err, "top1_agreement", s->r.top1, "n_scored",
					      s->r.n_scored));
	return j;
}

struct calib_out {
	const struct ntx_model *m;
	int n_ctx, n_ids, n_eids;
	const struct ntx_ppl_result *base, *full_eval;
	const double *cos, *cstd;
	const int64_t *cn;
	const struct cset *sets;
	int n_sets;
};

static json_t *make_doc(const struct ntx_calib_opts *o, const struct calib_out *c)
{
	const char *cname = o->calib_name ? o->calib_name : "-";
	int L = c->m->cfg.n_layer, l, i;
	const struct cset *pick = NULL;
	json_t *doc, *jl, *sk, *js;

	doc = json_pack("{s:s, s:i, s:{s:s, s:s, s:i}, s:{s:s, s:i, s:i, s:f}}", "format",
			"ntx.skip", "version", 1, "model", "path", c->m->gguf->path, "fingerprint",
			c->m->fingerprint_hex, "n_layer", L, "calibration", "file", cname, "tokens",
			c->n_ids, "ctx", c->n_ctx, "ppl", c->base->ppl);
	if (!doc)
		return NULL;
	jl = json_array();
	for (l = 0; l < L; l++) /* not listed: layers never evaluated (the plan's skip set) */
		if (c->cn[l] > 0)
			json_array_append_new(jl, json_pack("{s:i, s:f, s:f, s:I}", "index", l,
							    "cos_mean", c->cos[l], "cos_std",
							    c->cstd[l], "n_tokens",
							    (json_int_t)c->cn[l]));
	json_object_set_new(doc, "layers", jl);
	/* "skip": the threshold set if asked, else the largest calibrated set */
	sk = json_array();
	for (i = 0; i < c->n_sets; i++) {
		if (!strcmp(c->sets[i].method, "threshold"))
			pick = &c->sets[i];
		else if (!o->use_threshold && !strcmp(c->sets[i].method, "calibrated") &&
			 (!pick || c->sets[i].n > pick->n))
			pick = &c->sets[i];
	}
	for (i = 0; pick && i < pick->n; i++)
		json_array_append_new(sk, json_integer(pick->layers[i]));
	json_object_set_new(doc, "skip", sk);
	js = json_array();
	for (i = 0; i < c->n_sets; i++)
		json_array_append_new(js, set_json(&c->sets[i]));
	json_object_set_new(doc, "sets", js);
	if (o->eval)
		json_object_set_new(doc, "eval",
				    json_pack("{s:s, s:i, s:f, s:f}", "file",
					      o->eval_name ? o->eval_name : "-", "tokens", c->n_eids,
					      "full_ppl", c->full_eval->ppl, "full_ppl_err",
					      c->full_eval->ppl_err));
	return doc;
}

/* ---- the run ---- */

/* Score every set on the held-out text against the full model's rows. */
static int eval_sets(struct ntx_engine *e, const struct ntx_calib_opts *o,
		     const struct ntx_plan *plan, int L, const int32_t *eids, int n_eids,
		     int n_ctx, int32_t bos, struct cset *sets, int n_sets,
		     struct ntx_ppl_result *full_eval, struct ntx_err *err)
{
	struct pass ps = { o, "eval full model" };
	uint8_t *mask = calloc((size_t)L, 1);
	FILE *ref = tmpfile();
	int i, j, rc = -1;

	if (!ref) {
		ntx_err_errno(err, errno, "temporary file");
		goto out;
	}
	if (!mask) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	if (ntx_perplexity(e, eids, n_eids, n_ctx, bos, NULL, ref, NULL, on_chunk, &ps,
			   full_eval, err))
		goto out;
	for (i = 0; i < n_sets; i++) {
		char what[64];

		/* the set, plus what the plan skips anyway */
		for (j = 0; j < L; j++)
			mask[j] = (uint8_t)plan_skips(plan, j);
		for (j = 0; j < sets[i].n; j++)
			mask[sets[i].layers[j]] = 1;
		rewind(ref);
		snprintf(what, sizeof what, "eval %s %d", sets[i].method, sets[i].n);
		ps.what = what;
		if (ntx_perplexity(e, eids, n_eids, n_ctx, bos, mask, NULL, ref, on_chunk, &ps,
				   &sets[i].r, err))
			goto out;
		sets[i].evaluated = 1;
	}
	rc = 0;
out:
	if (ref)
		fclose(ref);
	free(mask);
	return rc;
}

/* The calibration text and the held-out text (o->eval, if any) as tokens
 * in *ids and *eids (owned by the caller, also on failure), checked for
 * length; *n_ctx shrinks to a short calibration text (one chunk). The
 * held-out text is read before any work: a bad one fails at once. 0 or -1. */
static int calib_texts(const struct ntx_vocab *v, const struct ntx_calib_opts *o, int *n_ctx,
		       int32_t **ids, int *n_ids, int32_t **eids, int *n_eids, struct ntx_err *err)
{
	if (ntx_tokenize(v, o->calib ? o->calib : "", o->calib_len, 1, 0, ids, n_ids, err))
		return -1;
	if (*n_ids < NTX_CALIB_MIN_TOKENS) {
		ntx_err_set(err, NTX_EINVAL,
			    "%s: the calibration text has %d tokens; at least %d are needed",
			    o->calib_name && strcmp(o->calib_name, "-") ? o->calib_name : "stdin",
			    *n_ids, NTX_CALIB_MIN_TOKENS);
		return -1;
	}
	if (*n_ctx > *n_ids)
		*n_ctx = *n_ids; /* short calibration text: one chunk */
	if (o->eval) {
		const char *ename = o->eval_name ? o->eval_name : "-";

		if (ntx_tokenize(v, o->eval, o->eval_len, 1, 0, eids, n_eids, err))
			return -1;
		if (*n_eids < *n_ctx) {
			ntx_err_set(err, NTX_EINVAL,
				    "%s: the evaluation text has %d tokens, fewer than one chunk of %d (give a longer text or a smaller -c)",
				    ename, *n_eids, *n_ctx);
			return -1;
		}
	}
	return 0;
}

/* The engine that collects per-layer cosines, n_ctx tokens per chunk; a
 * fallback to the CPU goes to o->note. NULL on failure. */
static struct ntx_engine *calib_engine(const struct ntx_model *m, const struct ntx_plan *plan,
				       const struct ntx_calib_opts *o, int n_ctx,
				       struct ntx_err *err)
{
	struct ntx_engine_opts eo;
	struct ntx_engine_stats es;
	struct ntx_engine *e;

	memset(&eo, 0, sizeof eo);
	eo.backend = o->backend;
	eo.n_ctx = n_ctx;
	eo.n_threads = o->n_threads;
	eo.plan = plan;
	eo.interrupt = o->interrupt;
	eo.collect_cos = 1;
	e = ntx_engine_new(m, &eo, err);
	if (!e)
		return NULL;
	ntx_engine_get_stats(e, &es);
	if (o->note && es.fell_back_to_cpu) {
		char line[sizeof es.backend_note + 32];

		snprintf(line, sizeof line, "%s: using the CPU", es.backend_note);
		o->note(o->user, line);
	}
	return e;
}

/* The engine's per-layer cosine statistics as mean, standard deviation and
 * count per layer (L of each). */
static void layer_cos(const struct ntx_engine *e, int L, double *cos, double *cstd, int64_t *cn)
{
	const struct ntx_cos_stats *cs = ntx_engine_cos_stats(e);
	int l;

	for (l = 0; l < L; l++) {
		double mean = cs[l].n ? cs[l].sum / cs[l].n : 0;
		double var = cs[l].n ? cs[l].sum_sq / cs[l].n - mean * mean : 0;

		cos[l] = mean;
		cstd[l] = sqrt(var > 0 ? var : 0);
		cn[l] = cs[l].n;
	}
}

json_t *ntx_calib_run(const struct ntx_model *m, const struct ntx_vocab *v,
		      const struct ntx_plan *plan, const struct ntx_calib_opts *o,
		      struct ntx_err *err)
{
	static const int def_counts[] = { 1, 2, 4, 6 };
	const int *counts = o->n_counts ? o->counts : def_counts;
	int n_counts = o->n_counts ? o->n_counts : 4;
	int n_ctx = o->n_ctx ? o->n_ctx : NTX_CALIB_DEFAULT_CTX;
	int L = m->cfg.n_layer, n_ids = 0, n_eids = 0, n_sets = 0;
	int32_t *ids = NULL, *eids = NULL, bos = ntx_vocab_bos(v);
	struct ntx_engine *e = NULL;
	struct ntx_ppl_result base = { 0 }, full_eval = { 0 };
	struct pass ps = { o, "calibration" };
	struct cset *sets = NULL;
	struct ranked *order = NULL;
	double *cos = NULL, *cstd = NULL;
	int64_t *cn = NULL;
	json_t *doc = NULL;

	if (check_opts(o, err))
		return NULL;
	if (calib_texts(v, o, &n_ctx, &ids, &n_ids, &eids, &n_eids, err))
		goto out;
	e = calib_engine(m, plan, o, n_ctx, err);
	if (!e)
		goto out;

	/* 1. calibration: cosine per layer over the whole text */
	if (ntx_perplexity(e, ids, n_ids, n_ctx, bos, NULL, NULL, NULL, on_chunk, &ps, &base, err))
		goto out;
	cos = calloc((size_t)L, sizeof *cos);
	cstd = calloc((size_t)L, sizeof *cstd);
	cn = calloc((size_t)L, sizeof *cn);
	sets = calloc(2 * (size_t)n_counts + 1, sizeof *sets);
	order = calloc((size_t)L, sizeof *order);
	if (!cos || !cstd || !cn || !sets || !order) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	layer_cos(e, L, cos, cstd, cn);

	/* 2. candidate sets */
	n_sets = make_sets(o, plan, L, cos, counts, n_counts, sets, order);

	/* 3. evaluation on held-out text */
	if (o->eval && eval_sets(e, o, plan, L, eids, n_eids, n_ctx, bos, sets, n_sets,
				 &full_eval, err))
		goto out;

	{
		struct calib_out c = { m, n_ctx, n_ids, n_eids, &base, &full_eval, cos, cstd, cn,
				       sets, n_sets };

		doc = make_doc(o, &c);
		if (!doc)
			ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
out:
	free(order);
	free(sets);
	free(cos);
	free(cstd);
	free(cn);
	free(ids);
	free(eids);
	ntx_engine_free(e);
	return doc;
}
