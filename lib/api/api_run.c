/* api_run.c - the public API (include/ntx.h), what a server or a chat
 * program needs around generation (0.3): chat prompts in the model's
 * format, streaming text in whole UTF-8 characters, sampling options from
 * their text, finish reasons, speculative decoding on a context.
 *
 * Speculative decoding is a setting of the context: ntx_ctx_set_spec makes
 * the draft engine and keeps the settings in the context; ntx_ctx_generate
 * passes them to each generation and ntx_ctx_submit to each new scheduler
 * (api_ctx.c). A scheduler takes them only before its first request, so
 * changing them drops the current one (its prefix caches). */
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "chat.h"
#include "generate.h"
#include "sampler.h"
#include "spec.h"

_Static_assert(NTX_DRAFT_K_MAX == NTX_SPEC_KMAX, "ntx.h's draft limit is the engine's");

/* ---- chat prompts ---- */

enum ntx_status ntx_chat_template_name(const char *tmpl, const char **name,
				       struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	int st;

	if (!tmpl || !name)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_chat_template_name: %s is NULL",
				   !tmpl ? "tmpl" : "name");
	st = ntx_chat_detect(tmpl, &ie);
	if (st < 0)
		return ntx_api_fail(e, &ie);
	*name = ntx_chat_style_name((enum ntx_chat_style)st);
	return NTX_OK;
}

enum ntx_status ntx_lm_chat_template(const struct ntx_lm *lm, const char **name,
				     struct ntx_error *e)
{
	const char *t;

	if (!lm || !name)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_chat_template: %s is NULL",
				   !lm ? "lm" : "name");
	t = ntx_vocab_chat_template(lm->v);
	if (!t)
		return ntx_api_set(e, NTX_STATUS_UNSUPPORTED,
				   "the model has no tokenizer.chat_template");
	return ntx_chat_template_name(t, name, e);
}

enum ntx_status ntx_lm_chat_apply(const struct ntx_lm *lm, const char *tmpl,
				  const char *const *roles, const char *const *contents, int n,
				  unsigned flags, char **prompt, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_chat_msg *m;
	int i, rc;

	if (!prompt)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_chat_apply: prompt is NULL");
	*prompt = NULL;
	if (!lm || n < 0 || (n > 0 && (!roles || !contents)))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_chat_apply: %s",
				   !lm ? "lm is NULL" : "bad message list (roles, contents, n)");
	if (flags & ~(unsigned)(NTX_CHAT_ADD_ASSISTANT | NTX_CHAT_ANY_TEMPLATE))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_chat_apply: unknown flags 0x%x",
				   flags);
	m = calloc(n > 0 ? (size_t)n : 1, sizeof *m);
	if (!m)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		m[i].role = roles[i];
		m[i].content = contents[i];
	}
	rc = ntx_chat_format_ex(lm->v, tmpl, m, n, !!(flags & NTX_CHAT_ADD_ASSISTANT),
				flags & NTX_CHAT_ANY_TEMPLATE ? NTX_CHAT_FALLBACK : 0, prompt, &ie);
	free(m);
	return rc ? ntx_api_fail(e, &ie) : NTX_OK;
}

/* ---- streaming text ---- */

struct ntx_detokenizer {
	struct ntx_detok *d;
};

enum ntx_status ntx_detokenizer_new(const struct ntx_lm *lm, unsigned flags,
				    struct ntx_detokenizer **out, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_detokenizer *d;
	unsigned f = 0;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_detokenizer_new: out is NULL");
	*out = NULL;
	if (!lm)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_detokenizer_new: lm is NULL");
	if (flags & ~(unsigned)(NTX_DETOKENIZER_REPLACE_INVALID | NTX_DETOKENIZER_SPECIAL))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_detokenizer_new: unknown flags 0x%x",
				   flags);
	if (flags & NTX_DETOKENIZER_REPLACE_INVALID)
		f |= NTX_DETOK_REPLACE_INVALID;
	if (flags & NTX_DETOKENIZER_SPECIAL)
		f |= NTX_DETOK_SPECIAL;
	d = malloc(sizeof *d);
	if (!d)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	d->d = ntx_detok_new(lm->v, f, &ie);
	if (!d->d) {
		free(d);
		return ntx_api_fail(e, &ie);
	}
	*out = d;
	return NTX_OK;
}

void ntx_detokenizer_free(struct ntx_detokenizer *d)
{
	if (!d)
		return;
	ntx_detok_free(d->d);
	free(d);
}

enum ntx_status ntx_detokenizer_push(struct ntx_detokenizer *d, int32_t id, const char **text,
				     size_t *len, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!d || !text || !len)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_detokenizer_push: NULL argument");
	*text = "";
	*len = 0;
	if (ntx_detok_push(d->d, id, text, len, &ie)) {
		*text = "";
		*len = 0;
		return ntx_api_fail(e, &ie);
	}
	if (!*text)
		*text = "";
	return NTX_OK;
}

void ntx_detokenizer_flush(struct ntx_detokenizer *d, const char **text, size_t *len)
{
	const char *t = NULL;
	size_t n = 0;

	if (d)
		ntx_detok_flush(d->d, &t, &n);
	if (text)
		*text = t ? t : "";
	if (len)
		*len = t ? n : 0;
}

/* ---- request options ---- */

enum ntx_status ntx_gen_params_parse(struct ntx_gen_params *p, const char *name,
				     const char *value, struct ntx_error *e)
{
	struct ntx_sampler_params sp;
	struct ntx_err ie = { 0 };
	int rc;

	if (!p || !name || !value)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_gen_params_parse: NULL argument");
	if (p->size < sizeof p->size)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_gen_params: size %zu: set it to sizeof(struct ntx_gen_params) (or call its _init)",
				   p->size);
	ntx_sampler_defaults(&sp);
	rc = ntx_sampler_parse_opt(name, value, &sp, &ie);
	if (rc < 0)
		return ntx_api_fail(e, &ie);
	if (rc == 0)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "unknown sampling option '%s' (temp, top-k, top-p, min-p, repeat-penalty, repeat-last-n, seed)",
				   name);
	/* only the one option changes; every field below is in every
	 * ntx_gen_params since 0.1 */
	if (!strcmp(name, "temp"))
		p->temperature = sp.temp;
	else if (!strcmp(name, "top-k"))
		p->top_k = sp.top_k;
	else if (!strcmp(name, "top-p"))
		p->top_p = sp.top_p;
	else if (!strcmp(name, "min-p"))
		p->min_p = sp.min_p;
	else if (!strcmp(name, "repeat-penalty"))
		p->repeat_penalty = sp.repeat_penalty;
	else if (!strcmp(name, "repeat-last-n"))
		p->repeat_last_n = sp.repeat_last_n;
	else
		p->seed = sp.seed;
	return NTX_OK;
}

const char *ntx_finish_name(enum ntx_finish f)
{
	switch (f) {
	case NTX_FINISH_EOG: return "eog";
	case NTX_FINISH_LENGTH: return "length";
	case NTX_FINISH_CONTEXT: return "context";
	case NTX_FINISH_STOPPED: return "stopped";
	case NTX_FINISH_INTERRUPTED: return "interrupted";
	}
	return "unknown";
}

/* ---- speculative decoding ---- */

void ntx_spec_params_init(struct ntx_spec_params *p)
{
	if (!p)
		return;
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
	p->n_self_skip = -1; /* 0.5: the placement's layers outside VRAM */
}

enum ntx_status ntx_lm_check_draft(const struct ntx_lm *lm, const struct ntx_lm *draft,
				   struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!lm || !draft)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_check_draft: %s is NULL",
				   !lm ? "lm" : "draft");
	if (ntx_spec_check_vocab(lm->v, draft->v, &ie))
		return ntx_api_set(e, NTX_STATUS_MISMATCH, "%s", ie.msg);
	return NTX_OK;
}

enum ntx_status ntx_ctx_set_spec(struct ntx_ctx *c, const struct ntx_spec_params *p,
				 struct ntx_error *e)
{
	struct ntx_spec_params x;
	struct ntx_engine_opts eo;
	struct ntx_err ie = { 0 };
	struct ntx_engine *draft = NULL;
	uint8_t *self_mask = NULL;
	enum ntx_status s;

	if (!c)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_ctx_set_spec: ctx is NULL");
	ntx_spec_params_init(&x);
	s = ntx_api_struct_in(&x, sizeof x, p, "ntx_spec_params", e);
	if (s)
		return s;
	if (x.lookup < 0 || x.lookup > 16)
		return ntx_api_set(e, NTX_STATUS_INVALID, "lookup %d is out of range [0, 16]",
				   x.lookup);
	if (x.draft_k < 0 || x.draft_k > NTX_DRAFT_K_MAX)
		return ntx_api_set(e, NTX_STATUS_INVALID, "draft_k %d is out of range [0, %d]",
				   x.draft_k, NTX_DRAFT_K_MAX);
	if (c->sched && ntx_sched_n_active(c->sched))
		return ntx_api_set(e, NTX_STATUS_BUSY, "%d batch requests are active",
				   ntx_sched_n_active(c->sched));
	if (x.self_spec && x.draft)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "self-speculation and a draft model exclude each other");
	if (x.self_spec && (s = ntx_api_self_mask(c, &x, &self_mask, e)) != NTX_OK)
		return s; /* 0.5: api_gen.c */
	if (x.draft) {
		s = ntx_lm_check_draft(c->lm, x.draft, e);
		if (s)
			return s;
		/* resident on the target's backend, the same context and slots */
		memset(&eo, 0, sizeof eo);
		eo.backend = ntx_engine_backend(c->e);
		eo.n_ctx = ntx_engine_n_ctx(c->e);
		eo.kv_type = c->kv_type;
		eo.n_seq = ntx_engine_n_seq(c->e);
		eo.n_threads = c->n_threads;
		eo.gpu_index = c->gpu_index;
		eo.interrupt = &c->intr;
		draft = ntx_engine_new(x.draft->m, &eo, &ie);
		if (!draft)
			return ntx_api_fail(e, &ie);
	}
	ntx_api_drop_sched(c); /* a scheduler takes the settings when made */
	ntx_engine_free(c->draft);
	c->draft = draft;
	free(c->self_mask);
	c->self_mask = self_mask;
	c->lookup = x.lookup;
	c->draft_k = x.draft_k;
	return NTX_OK;
}
