/* test_selfspec.c - self-speculative decoding is lossless:
 *   - greedy: token-identical to plain decoding on every fixture model and on
 *     the trained tiny model, with fixed and adaptive draft lengths;
 *   - sampling: the distribution of generated tokens is unchanged. For many
 *     seeds, the 2nd and 3rd generated tokens (the 1st comes from the prompt
 *     pass and is never speculative) of plain and speculative decoding are
 *     compared with a two-sample chi-square test of homogeneity; the test
 *     fails when p < 0.001 (categories with fewer than 10 expected samples
 *     are pooled). Seeds are fixed, so the outcome is deterministic. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "generate.h"
#include "model.h"
#include "chi2.h"
#include "t.h"
#include "tokenizer.h"

struct cap {
	int32_t tok[64];
	int n;
};

static int on_tok(void *p, int32_t t)
{
	struct cap *c = p;

	if (c->n < 64)
		c->tok[c->n++] = t;
	return 0;
}

static int gen(struct ntx_engine *e, const int32_t *prompt, int np, int n, float temp,
	       uint64_t seed, const uint8_t *draft, int k, struct cap *c)
{
	struct ntx_gen_opts o;
	struct ntx_gen_stats st;
	struct ntx_err err;

	memset(&o, 0, sizeof o);
	ntx_sampler_defaults(&o.sp);
	o.sp.temp = temp;
	o.sp.seed = seed;
	o.sp.top_k = 12;
	o.sp.top_p = 1.0f;
	o.sp.min_p = 0;
	o.n_predict = n;
	o.self_spec = draft != NULL;
	o.draft_mask = draft;
	o.draft_k = k ? k : 4;
	o.adaptive_k = k == 0;
	c->n = 0;
	return ntx_generate(e, 0, prompt, np, &o, on_tok, c, &st, &err);
}

/* Greedy with a repetition penalty: the bonus token after a fully accepted
 * draft must see the accepted tokens in the penalty's history. */
static int gen_pen(struct ntx_engine *e, const int32_t *prompt, int np, int n, float penalty,
		   const uint8_t *draft, struct cap *c)
{
	struct ntx_gen_opts o;
	struct ntx_gen_stats st;
	struct ntx_err err;

	memset(&o, 0, sizeof o);
	ntx_sampler_defaults(&o.sp);
	o.sp.temp = 0;
	o.sp.repeat_penalty = penalty;
	o.n_predict = n;
	o.self_spec = draft != NULL;
	o.draft_mask = draft;
	o.draft_k = 4;
	o.adaptive_k = 1;
	c->n = 0;
	return ntx_generate(e, 0, prompt, np, &o, on_tok, c, &st, &err);
}

static struct ntx_engine *open_engine(const char *path, struct ntx_model **m)
{
	struct ntx_err err;
	struct ntx_engine_opts eo;

	*m = ntx_model_open(path, 0, &err);
	if (!*m)
		return NULL;
	memset(&eo, 0, sizeof eo);
	eo.backend = NTX_BACKEND_CPU;
	eo.n_ctx = 256;
	eo.n_threads = 2;
	return ntx_engine_new(*m, &eo, &err);
}

static void greedy_case(const char *rel, const int *skip, int n_skip)
{
	char path[512];
	struct ntx_model *m;
	struct ntx_engine *e;
	struct cap a, b, c;
	uint8_t draft[64] = { 0 };
	int32_t prompt[4] = { 1, 403, 407, 261 };
	int i, ok;

	snprintf(path, sizeof path, "%s/%s", t_fixtures(), rel);
	e = open_engine(path, &m);
	if (!t_ok(e != NULL, "%s: engine", rel)) {
		ntx_model_close(m);
		return;
	}
	if (m->cfg.n_vocab > 1000) { /* tinymodel: BOS + "In the" */
		prompt[0] = 8187, prompt[1] = 664, prompt[2] = 262, prompt[3] = 1250;
	}
	for (i = 0; i < n_skip; i++)
		draft[skip[i]] = 1;
	ok = gen(e, prompt, 4, 40, 0, 1, NULL, 0, &a) == 0 &&
	     gen(e, prompt, 4, 40, 0, 1, draft, 3, &b) == 0 &&
	     gen(e, prompt, 4, 40, 0, 1, draft, 0, &c) == 0;
	t_ok(ok && a.n == 40 && b.n == 40 && c.n == 40 && !memcmp(a.tok, b.tok, 40 * sizeof(int32_t)) &&
		     !memcmp(a.tok, c.tok, 40 * sizeof(int32_t)),
	     "%s: greedy self-spec (k=3 and adaptive) equals plain decoding for 40 tokens", rel);
	ntx_engine_free(e);
	ntx_model_close(m);
}

static void penalty_case(void)
{
	char path[512];
	struct ntx_model *m;
	struct ntx_engine *e;
	struct cap a, b;
	uint8_t draft[16] = { 0 };
	/* BOS "A computer is" and BOS "And the LORD said unto Moses," */
	static const int32_t p0[] = { 8187, 32, 1823, 320 };
	static const int32_t p1[] = { 8187, 697, 259, 481, 483, 430, 1323, 11 };
	static const float pen[] = { 1.1f, 1.3f, 2.0f };
	int i, j, ok;

	snprintf(path, sizeof path, "%s/tinymodel/tinymodel-q8_0.gguf", t_fixtures());
	e = open_engine(path, &m);
	if (!t_ok(e != NULL, "tinymodel-q8_0: engine")) {
		ntx_model_close(m);
		return;
	}
	draft[6] = 1; /* a good draft: most steps accept every drafted token */
	for (i = 0; i < 3; i++) {
		for (j = 0; j < 2; j++) {
			ok = gen_pen(e, j ? p1 : p0, j ? 8 : 4, 64, pen[i], NULL, &a) == 0 &&
			     gen_pen(e, j ? p1 : p0, j ? 8 : 4, 64, pen[i], draft, &b) == 0;
			t_ok(ok && a.n == 64 && b.n == 64 && !memcmp(a.tok, b.tok, sizeof a.tok),
			     "tinymodel-q8_0: greedy self-spec with --repeat-penalty %.1f equals plain decoding (prompt %d)",
			     pen[i], j);
		}
	}
	ntx_engine_free(e);
	ntx_model_close(m);
}

static void sampling_case(void)
{
	char path[512];
	struct ntx_model *m;
	struct ntx_engine *e;
	struct cap c;
	uint8_t draft[8] = { 0, 0, 1, 1, 0 };
	int32_t prompt[5] = { 1, 403, 407, 261, 378 };
	int *cnt[2][2], V, i, s, pos, df, N = 3000;

	snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_fixtures());
	e = open_engine(path, &m);
	if (!t_ok(e != NULL, "stories260K: engine"))
		return;
	V = (int)m->cfg.n_vocab;
	for (s = 0; s < 2; s++)
		for (pos = 0; pos < 2; pos++)
			cnt[s][pos] = calloc((size_t)V, sizeof(int));
	for (s = 0; s < 2; s++) {
		for (i = 0; i < N; i++) {
			/* different seeds for the two samplers: independent samples */
			if (gen(e, prompt, 5, 3, 1.0f, (uint64_t)(1000003 * s + i), s ? draft : NULL, 2,
				&c) || c.n != 3)
				break;
			cnt[s][0][c.tok[1]]++;
			cnt[s][1][c.tok[2]]++;
		}
		t_ok(i == N, "stories260K: %d %s generations", N, s ? "self-speculative" : "plain");
	}
	for (pos = 0; pos < 2; pos++) {
		double x = chi2(cnt[0][pos], cnt[1][pos], V, &df), p = chi2_p(x, df);

		t_ok(df >= 3 && p >= 1e-3,
		     "stories260K: token %d distribution unchanged by self-speculation (chi2 %.1f, df %d, p %.3g >= 0.001)",
		     pos + 2, x, df, p);
	}
	/* the test has power: a sampler at another temperature is told apart */
	{
		int *other = calloc((size_t)V, sizeof(int));
		double x, p;

		for (i = 0; i < N && other; i++) {
			if (gen(e, prompt, 5, 3, 0.7f, (uint64_t)(7000001 + i), NULL, 2, &c) || c.n != 3)
				break;
			other[c.tok[1]]++;
		}
		x = chi2(cnt[0][0], other ? other : cnt[0][0], V, &df);
		p = chi2_p(x, df);
		t_ok(p < 1e-3, "stories260K: the same test rejects temp 0.7 vs 1.0 (chi2 %.1f, df %d, p %.3g)",
		     x, df, p);
		free(other);
	}
	for (s = 0; s < 2; s++)
		for (pos = 0; pos < 2; pos++)
			free(cnt[s][pos]);
	ntx_engine_free(e);
	ntx_model_close(m);
}

int main(void)
{
	static const int one[] = { 1 };
	static const int mid[] = { 2, 3 };
	static const int tiny[] = { 6, 8, 9 };

	if (!t_need_fixtures("self-speculative decoding on the fixture models"))
		return t_done();
	greedy_case("models/ref-a-f32.gguf", one, 1);
	greedy_case("models/ref-a-f16.gguf", one, 1);
	greedy_case("models/ref-a-q8_0.gguf", one, 1);
	greedy_case("models/ref-a-q4_0.gguf", one, 1);
	greedy_case("models/ref-a-q4_k_m.gguf", one, 1);
	greedy_case("models/ref-a-q5_k_m.gguf", one, 1);
	greedy_case("models/ref-a-q6_k.gguf", one, 1);
	greedy_case("models/stories260K.gguf", mid, 2);
	greedy_case("tinymodel/tinymodel-q4_k_m.gguf", tiny, 3);
	penalty_case();
	sampling_case();
	return t_done();
}
