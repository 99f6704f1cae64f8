/* sampler.c - token sampling (see sampler.h). */
#include "sampler.h"

#include "parse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
	float logit;
	int32_t id;
};

struct ntx_sampler {
	struct ntx_sampler_params p;
	int64_t n_vocab;
	uint64_t rng[4];
	int32_t *hist;
	int n_hist, cap_hist;
	struct cand *c;   /* [n_vocab] */
	float *work;      /* [n_vocab] */
};

void ntx_sampler_defaults(struct ntx_sampler_params *p)
{
	p->temp = 0.8f;
	p->top_k = 40;
	p->top_p = 0.95f;
	p->min_p = 0.05f;
	p->repeat_penalty = 1.0f;
	p->repeat_last_n = 64;
	p->seed = 0xffffffffu;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

double ntx_sampler_uniform(struct ntx_sampler *s)
{
	return (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0);
}

struct ntx_sampler *ntx_sampler_new(const struct ntx_sampler_params *p, int64_t n_vocab,
				    struct ntx_err *err)
{
	struct ntx_sampler *s = calloc(1, sizeof *s);
	uint64_t x;
	int i;

	if (!s || n_vocab <= 0) {
		free(s);
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	s->p = *p;
	s->n_vocab = n_vocab;
	x = p->seed;
	for (i = 0; i < 4; i++)
		s->rng[i] = splitmix(&x);
	s->c = malloc((size_t)n_vocab * sizeof *s->c);
	s->work = malloc((size_t)n_vocab * sizeof *s->work);
	if (!s->c || !s->work) {
		ntx_sampler_free(s);
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	return s;
}

void ntx_sampler_free(struct ntx_sampler *s)
{
	if (!s)
		return;
	free(s->hist);
	free(s->c);
	free(s->work);
	free(s);
}

void ntx_sampler_reset(struct ntx_sampler *s)
{
	s->n_hist = 0;
}

void ntx_sampler_accept(struct ntx_sampler *s, int32_t tok)
{
	if (s->n_hist == s->cap_hist) {
		int cap = s->cap_hist ? s->cap_hist * 2 : 256;
		int32_t *h = realloc(s->hist, (size_t)cap * sizeof *h);

		if (!h && s->n_hist == 0)
			return; /* no memory for any history: the penalty sees none */
		if (!h) { /* keep the most recent half */
			memmove(s->hist, s->hist + s->n_hist / 2,
				(size_t)(s->n_hist - s->n_hist / 2) * sizeof *h);
			s->n_hist -= s->n_hist / 2;
		} else {
			s->hist = h;
			s->cap_hist = cap;
		}
	}
	s->hist[s->n_hist++] = tok;
}

void ntx_sampler_unaccept(struct ntx_sampler *s, int n)
{
	s->n_hist = n > s->n_hist ? 0 : s->n_hist - n;
}

int ntx_sampler_is_greedy(const struct ntx_sampler *s)
{
	return s->p.temp <= 0;
}

int ntx_sampler_is_argmax(const struct ntx_sampler *s)
{
	return s->p.temp <= 0 && (s->p.repeat_penalty == 1.0f || s->p.repeat_last_n == 0);
}

int32_t ntx_argmax(const float *x, int64_t n)
{
	int64_t i, best = 0;

	for (i = 1; i < n; i++) {
		if (x[i] > x[best])
			best = i;
	}
	return (int32_t)best;
}

/* Apply the repetition penalty into s->work (a copy of logits). */
static void penalize(struct ntx_sampler *s, const float *logits)
{
	int i, from;

	memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
	if (s->p.repeat_penalty == 1.0f || s->p.repeat_last_n == 0 || s->n_hist == 0)
		return;
	from = s->p.repeat_last_n < 0 ? 0 : s->n_hist - s->p.repeat_last_n;
	if (from < 0)
		from = 0;
	/* each distinct token once (llama.cpp counts occurrences only for the
	 * frequency/presence penalties, which we do not implement) */
	for (i = from; i < s->n_hist; i++) {
		int32_t t = s->hist[i];
		int j, seen = 0;

		if (t < 0 || t >= s->n_vocab)
			continue;
		for (j = from; j < i; j++) {
			if (s->hist[j] == t) {
				seen = 1;
				break;
			}
		}
		if (seen)
			continue;
		if (s->work[t] > 0)
			s->work[t] /= s->p.repeat_penalty;
		else
			s->work[t] *= s->p.repeat_penalty;
	}
}

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->logit != y->logit)
		return x->logit < y->logit ? 1 : -1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Build the truncated candidate list (sorted, descending) with probabilities
 * in s->work[0..n) after top-k, top-p, min-p and temperature; returns n. */
static int candidates(struct ntx_sampler *s)
{
	int64_t V = s->n_vocab, i;
	int n, k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : (int)V;
	double sum = 0, cum;
	float mx;

	if (k < V) {
		/* top-k by a min-heap of k candidates (heap root = worst kept) */
		for (i = 0; i < V; i++) {
			struct cand x = { s->work[i], (int32_t)i };

			if (i < k) {
				int j = (int)i;

				s->c[j] = x;
				while (j > 0 && cmp_cand(&s->c[(j - 1) / 2], &s->c[j]) < 0) {
					struct cand t = s->c[j];

					s->c[j] = s->c[(j - 1) / 2];
					s->c[(j - 1) / 2] = t;
					j = (j - 1) / 2;
				}
			} else if (cmp_cand(&x, &s->c[0]) < 0) {
				int j = 0;

				s->c[0] = x;
				for (;;) {
					int l = 2 * j + 1, r = l + 1, w = j;

					if (l < k && cmp_cand(&s->c[l], &s->c[w]) > 0)
						w = l;
					if (r < k && cmp_cand(&s->c[r], &s->c[w]) > 0)
						w = r;
					if (w == j)
						break;
					{
						struct cand t = s->c[j];

						s->c[j] = s->c[w];
						s->c[w] = t;
					}
					j = w;
				}
			}
		}
		qsort(s->c, (size_t)k, sizeof *s->c, cmp_cand);
	} else {
		for (i = 0; i < V; i++) {
			s->c[i].logit = s->work[i];
			s->c[i].id = (int32_t)i;
		}
		qsort(s->c, (size_t)V, sizeof *s->c, cmp_cand);
	}
	n = k;
	/* softmax over the top-k (at temperature 1, as llama.cpp's top-p/min-p
	 * see the distribution before temperature) */
	mx = s->c[0].logit;
	for (i = 0; i < n; i++) {
		s->work[i] = expf(s->c[i].logit - mx);
		sum += s->work[i];
	}
	if (s->p.top_p < 1.0f) {
		cum = 0;
		for (i = 0; i < n; i++) {
			cum += s->work[i] / sum;
			if (cum >= s->p.top_p) {
				n = (int)i + 1;
				break;
			}
		}
	}
	if (s->p.min_p > 0) {
		/* keep tokens with p >= min_p * p_max (p_max has work = 1) */
		for (i = 1; i < n; i++) {
			if (s->work[i] < s->p.min_p)
				break;
		}
		n = (int)i;
	}
	/* temperature, renormalise */
	sum = 0;
	for (i = 0; i < n; i++) {
		s->work[i] = expf((s->c[i].logit - mx) / s->p.temp);
		sum += s->work[i];
	}
	for (i = 0; i < n; i++)
		s->work[i] = (float)(s->work[i] / sum);
	return n;
}

void ntx_sampler_probs(struct ntx_sampler *s, const float *logits, float *probs)
{
	int n, i;

	penalize(s, logits);
	memset(probs, 0, (size_t)s->n_vocab * sizeof(float));
	if (s->p.temp <= 0) {
		probs[ntx_argmax(s->work, s->n_vocab)] = 1.0f;
		return;
	}
	n = candidates(s);
	for (i = 0; i < n; i++)
		probs[s->c[i].id] = s->work[i];
}

int32_t ntx_sampler_draw(struct ntx_sampler *s, const float *probs)
{
	double u = ntx_sampler_uniform(s), sum = 0, cum = 0;
	int64_t i, last = -1;

	for (i = 0; i < s->n_vocab; i++)
		sum += probs[i];
	u *= sum;
	for (i = 0; i < s->n_vocab; i++) {
		if (probs[i] <= 0)
			continue;
		last = i;
		cum += probs[i];
		if (u < cum)
			return (int32_t)i;
	}
	return (int32_t)(last >= 0 ? last : 0);
}

int32_t ntx_sampler_sample(struct ntx_sampler *s, const float *logits)
{
	double u, cum = 0;
	int n, i;

	penalize(s, logits);
	if (s->p.temp <= 0)
		return ntx_argmax(s->work, s->n_vocab);
	n = candidates(s);
	u = ntx_sampler_uniform(s);
	for (i = 0; i < n; i++) {
		cum += s->work[i];
		if (u < cum)
			return s->c[i].id;
	}
	return s->c[n - 1].id;
}

/* ---- options ---- */

int ntx_sampler_parse_opt(const char *name, const char *arg, struct ntx_sampler_params *sp,
			  struct ntx_err *err)
{
	double d;
	int64_t v;

	if (!strcmp(name, "temp") || !strcmp(name, "top-p") || !strcmp(name, "min-p")) {
		if (ntx_parse_double(arg, 0, name[0] == 't' && name[1] == 'e' ? 100 : 1, &d, err))
			return -1;
		*(name[0] == 'm' ? &sp->min_p : name[1] == 'e' ? &sp->temp : &sp->top_p) = (float)d;
		return 1;
	}
	if (!strcmp(name, "repeat-penalty")) {
		if (ntx_parse_double(arg, 0, 100, &d, err))
			return -1;
		if (d <= 0)
			return ntx_err_set(err, NTX_EINVAL, "must be > 0");
		sp->repeat_penalty = (float)d;
		return 1;
	}
	if (!strcmp(name, "top-k"))
		return ntx_parse_int(arg, 0, 1 << 30, &sp->top_k, err) ? -1 : 1;
	if (!strcmp(name, "repeat-last-n"))
		return ntx_parse_int(arg, -1, 1 << 30, &sp->repeat_last_n, err) ? -1 : 1;
	if (!strcmp(name, "seed")) {
		if (ntx_parse_i64(arg, 0, INT64_MAX, &v, err))
			return -1;
		sp->seed = (uint64_t)v;
		return 1;
	}
	return 0;
}
