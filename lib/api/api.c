/* api.c - the public API (include/ntx.h), first half: versions, errors,
 * models, the tokenizer and placements. Each call checks its handles and
 * options, calls the internal modules and turns their struct ntx_err into
 * the caller's struct ntx_error. api_ctx.c has contexts, generation and
 * batches. The status values equal the internal NTX_E* codes (checked
 * below), so an internal error passes through unchanged. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "probe_cache.h"
#include "tunables.h"
#include "version.h"

#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(NTX_STATUS_IO, NTX_EIO) && SAME(NTX_STATUS_FORMAT, NTX_EFORMAT) &&
		       SAME(NTX_STATUS_UNSUPPORTED, NTX_EUNSUP) &&
		       SAME(NTX_STATUS_INVALID, NTX_EINVAL) && SAME(NTX_STATUS_NOMEM, NTX_ENOMEM) &&
		       SAME(NTX_STATUS_NOFIT, NTX_ENOFIT) && SAME(NTX_STATUS_DEVICE, NTX_EDEVICE) &&
		       SAME(NTX_STATUS_INTERRUPTED, NTX_EINTR) &&
		       SAME(NTX_STATUS_MISMATCH, NTX_EMISMATCH),
	       "public statuses equal the internal error codes");

/* ---- version ---- */

const char *ntx_version(void)
{
	/* the suite's version (version.h) is the library's */
	return NTX_VERSION;
}

unsigned ntx_version_number(void)
{
	return NTX_VERSION_NUMBER;
}

/* ---- errors ---- */

static const char *const status_names[] = {
	"ok", "io", "format", "unsupported", "invalid", "nomem",
	"nofit", "device", "interrupted", "mismatch", "buffer", "busy",
};

const char *ntx_status_name(enum ntx_status s)
{
	if ((unsigned)s < sizeof status_names / sizeof status_names[0])
		return status_names[s];
	return "unknown";
}

struct ntx_error *ntx_error_new(void)
{
	return calloc(1, sizeof(struct ntx_error));
}

void ntx_error_free(struct ntx_error *e)
{
	free(e);
}

enum ntx_status ntx_error_status(const struct ntx_error *e)
{
	return e ? e->status : NTX_STATUS_INVALID;
}

const char *ntx_error_message(const struct ntx_error *e)
{
	return e ? e->msg : "no error object";
}

void ntx_error_clear(struct ntx_error *e)
{
	if (e) {
		e->status = NTX_OK;
		e->msg[0] = '\0';
	}
}

void ntx_free(void *p)
{
	free(p);
}

enum ntx_status ntx_api_fail(struct ntx_error *e, const struct ntx_err *ie)
{
	enum ntx_status s = ie->code > 0 ? (enum ntx_status)ie->code : NTX_STATUS_INVALID;

	if (e) {
		e->status = s;
		snprintf(e->msg, sizeof e->msg, "%s", ie->msg[0] ? ie->msg : "unknown error");
	}
	return s;
}

enum ntx_status ntx_api_set(struct ntx_error *e, enum ntx_status s, const char *fmt, ...)
{
	va_list ap;

	if (e) {
		e->status = s;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
		va_end(ap);
	}
	return s;
}

enum ntx_status ntx_api_backend_in(enum ntx_backend_choice b, struct ntx_error *e)
{
	if ((unsigned)b > NTX_USE_CUDA)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "backend %d: expected NTX_USE_AUTO, NTX_USE_CPU or NTX_USE_CUDA", (int)b);
	return NTX_OK;
}

enum ntx_status ntx_api_struct_in(void *dst, size_t dst_size, const void *src, const char *what,
				  struct ntx_error *e)
{
	size_t n;

	if (!src)
		return NTX_OK; /* the defaults */
	memcpy(&n, src, sizeof n);
	if (n < sizeof n)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "%s: size %zu: set it to sizeof(struct %s) (or call its _init)",
				   what, n, what);
	memcpy((char *)dst + sizeof n, (const char *)src + sizeof n,
	       (n < dst_size ? n : dst_size) - sizeof n);
	return NTX_OK;
}

enum ntx_status ntx_api_struct_out(void *dst, const void *src, size_t src_size, const char *what,
				   struct ntx_error *e)
{
	size_t n;

	if (!dst)
		return ntx_api_set(e, NTX_STATUS_INVALID, "%s: NULL", what);
	memcpy(&n, dst, sizeof n);
	if (n < sizeof n)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "%s: size %zu: set it to sizeof(struct %s)", what, n, what);
	memcpy((char *)dst + sizeof n, (const char *)src + sizeof n,
	       (n < src_size ? n : src_size) - sizeof n);
	return NTX_OK;
}

/* ---- models ---- */

enum ntx_status ntx_lm_open(const char *path, struct ntx_lm **out, struct ntx_error *e)
{
	return ntx_api_lm_open(path, 0, "ntx_lm_open", out, e);
}

enum ntx_status ntx_api_lm_open(const char *path, unsigned model_flags, const char *what,
				struct ntx_lm **out, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_lm *lm;
	const int32_t *ids;
	uint64_t i;
	int n, k;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "%s: out is NULL", what);
	*out = NULL;
	if (!path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "%s: path is NULL", what);
	lm = calloc(1, sizeof *lm);
	if (!lm)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	lm->m = ntx_model_open(path, model_flags, &ie);
	if (lm->m)
		lm->v = ntx_vocab_load(lm->m->gguf, &ie);
	if (!lm->m || !lm->v) {
		ntx_err_prefix(&ie, "%s", path);
		ntx_lm_close(lm);
		return ntx_api_fail(e, &ie);
	}
	lm->eog = calloc(lm->m->cfg.n_vocab > 0 ? (size_t)lm->m->cfg.n_vocab : 1, 1);
	if (!lm->eog) {
		ntx_lm_close(lm);
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	}
	ids = ntx_vocab_eog_ids(lm->v, &n);
	for (k = 0; k < n; k++)
		if (ids[k] >= 0 && ids[k] < lm->m->cfg.n_vocab)
			lm->eog[ids[k]] = 1;
	for (i = 0; i < lm->m->gguf->n_tensors; i++)
		lm->n_params += (uint64_t)lm->m->gguf->tensors[i].n_elem;
	*out = lm;
	return NTX_OK;
}

void ntx_lm_close(struct ntx_lm *lm)
{
	if (!lm)
		return;
	free(lm->eog);
	ntx_vocab_free(lm->v);
	ntx_model_close(lm->m);
	free(lm);
}

enum ntx_status ntx_lm_info(const struct ntx_lm *lm, struct ntx_lm_info *info,
			    struct ntx_error *e)
{
	struct ntx_lm_info x;
	const struct ntx_llama_config *c;

	if (!lm)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_info: lm is NULL");
	c = &lm->m->cfg;
	memset(&x, 0, sizeof x);
	x.size = sizeof x;
	x.path = lm->m->gguf->path;
	x.arch = c->arch;
	x.fingerprint = lm->m->fingerprint_hex;
	x.file_size = lm->m->gguf->file_size;
	x.n_params = lm->n_params;
	x.n_layer = c->n_layer;
	x.n_embd = c->n_embd;
	x.n_ff = c->n_ff;
	x.n_head = c->n_head;
	x.n_head_kv = c->n_head_kv;
	x.n_ctx_train = c->n_ctx_train;
	x.n_vocab = (int32_t)c->n_vocab;
	x.bos = ntx_vocab_bos(lm->v);
	x.eos = ntx_vocab_eos(lm->v);
	x.chat_template = ntx_vocab_chat_template(lm->v);
	x.n_expert = c->n_expert;
	x.n_expert_used = c->n_expert > 0 ? c->n_expert_used : 0;
	return ntx_api_struct_out(info, &x, sizeof x, "ntx_lm_info", e);
}

int ntx_lm_is_eog(const struct ntx_lm *lm, int32_t id)
{
	return lm && id >= 0 && id < lm->m->cfg.n_vocab && lm->eog[id];
}

/* ---- tokenizer ---- */

enum ntx_status ntx_lm_tokenize(const struct ntx_lm *lm, const char *text, size_t len,
				unsigned flags, int32_t *ids, int cap, int *n_ids,
				struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	int32_t *t = NULL;
	int n = 0;

	if (!lm || !n_ids || (!text && len) || cap < 0 || (!ids && cap))
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_lm_tokenize: %s", !lm ? "lm is NULL" : !n_ids ? "n_ids is NULL" :
				   !text && len ? "text is NULL" : "bad buffer (ids, cap)");
	if (flags & ~(unsigned)(NTX_TOKENIZE_ADD_BOS | NTX_TOKENIZE_SPECIAL))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_tokenize: unknown flags 0x%x",
				   flags);
	if (ntx_tokenize(lm->v, text ? text : "", len, !!(flags & NTX_TOKENIZE_ADD_BOS),
			 !!(flags & NTX_TOKENIZE_SPECIAL), &t, &n, &ie))
		return ntx_api_fail(e, &ie);
	*n_ids = n;
	if (n > cap) {
		free(t);
		return ntx_api_set(e, NTX_STATUS_BUFFER, "%d tokens do not fit in a buffer of %d",
				   n, cap);
	}
	if (n)
		memcpy(ids, t, (size_t)n * sizeof *t);
	free(t);
	return NTX_OK;
}

enum ntx_status ntx_lm_detokenize(const struct ntx_lm *lm, const int32_t *ids, int n,
				  unsigned flags, char *buf, size_t cap, size_t *len,
				  struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	char *s = NULL;
	size_t k = 0;

	if (!lm || !len || n < 0 || (!ids && n) || (!buf && cap))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_detokenize: %s",
				   !lm ? "lm is NULL" : !len ? "len is NULL" : "bad arguments");
	if (flags & ~(unsigned)(NTX_DETOKENIZE_REMOVE_SPECIAL | NTX_DETOKENIZE_SPECIAL))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_detokenize: unknown flags 0x%x",
				   flags);
	if (ntx_detokenize(lm->v, ids, n, !!(flags & NTX_DETOKENIZE_REMOVE_SPECIAL),
			   !!(flags & NTX_DETOKENIZE_SPECIAL), &s, &k, &ie))
		return ntx_api_fail(e, &ie);
	*len = k;
	if (k + 1 > cap) {
		free(s);
		return ntx_api_set(e, NTX_STATUS_BUFFER,
				   "%zu bytes and a NUL do not fit in a buffer of %zu", k, cap);
	}
	memcpy(buf, s, k + 1);
	free(s);
	return NTX_OK;
}

enum ntx_status ntx_lm_piece(const struct ntx_lm *lm, int32_t id, const char **piece,
			     size_t *len, struct ntx_error *e)
{
	const char *p;
	size_t k;

	if (!lm || !piece || !len)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_lm_piece: NULL argument");
	p = ntx_vocab_piece(lm->v, id, 0, &k);
	if (!p)
		return ntx_api_set(e, NTX_STATUS_INVALID, "token id %d is out of range [0, %d)", id,
				   ntx_vocab_n_tokens(lm->v));
	*piece = p;
	*len = k;
	return NTX_OK;
}

/* ---- placement ---- */

/* Hand a computed or loaded plan to the caller as a placement (taken
 * either way). */
static enum ntx_status wrap_plan(struct ntx_plan *p, struct ntx_placement **out,
				 struct ntx_error *e)
{
	*out = malloc(sizeof **out);
	if (!*out) {
		ntx_plan_free(p);
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	}
	(*out)->p = p;
	return NTX_OK;
}

enum ntx_status ntx_placement_load(const struct ntx_lm *lm, const char *path,
				   struct ntx_placement **out, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_plan *p;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_load: out is NULL");
	*out = NULL;
	if (!lm || !path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_load: %s is NULL",
				   !lm ? "lm" : "path");
	p = ntx_plan_load(path, &ie);
	if (p && ntx_plan_check_model(p, lm->m, &ie)) {
		ntx_plan_free(p);
		p = NULL;
		ntx_err_prefix(&ie, "%s", path);
	}
	if (!p)
		return ntx_api_fail(e, &ie);
	return wrap_plan(p, out, e);
}

void ntx_placement_params_init(struct ntx_placement_params *p)
{
	if (!p)
		return;
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
	p->vram_budget = -1;
	p->ram_budget = -1;
}

enum ntx_status ntx_placement_make(const struct ntx_lm *lm,
				   const struct ntx_placement_params *pp,
				   struct ntx_placement **out, struct ntx_error *e)
{
	struct ntx_placement_params x;
	struct ntx_err ie = { 0 };
	struct ntx_plan_model pm;
	struct ntx_plan_hw hw;
	struct ntx_plan_opts po;
	struct ntx_plan *p = NULL;
	enum ntx_status s;
	int rc;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_make: out is NULL");
	*out = NULL;
	if (!lm)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_make: lm is NULL");
	ntx_placement_params_init(&x);
	s = ntx_api_struct_in(&x, sizeof x, pp, "ntx_placement_params", e);
	if (s)
		return s;
	if (x.vram_budget < -1 || x.ram_budget < -1 || x.n_ctx < 0 || x.n_seq < 0 ||
	    x.gpu_index < 0)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_placement_params: vram_budget %lld, ram_budget %lld, n_ctx %d, n_seq %d, gpu_index %d: budgets are -1 or >= 0, the rest >= 0",
				   (long long)x.vram_budget, (long long)x.ram_budget, x.n_ctx, x.n_seq,
				   x.gpu_index);
	ntx_plan_opts_init(&po);
	po.vram_budget = x.vram_budget;
	po.ram_budget = x.ram_budget;
	po.n_ctx = x.n_ctx;
	po.n_seq = x.n_seq;
	po.gpu_index = x.gpu_index;
	po.pack_path = x.pack_path;
	if (x.vram_budget == 0)
		po.executor = NTX_POLICY_CPU;
	if (ntx_plan_model_from_model(lm->m, &pm, &ie))
		return ntx_api_fail(e, &ie);
	ntx_hw_detect(&hw, x.gpu_index, NULL);
	{
		/* the rates an earlier ntx-plan --probe stored; a cache that
		 * cannot be read leaves the defaults (no note channel here) */
		struct ntx_tunables tun;
		struct ntx_probe_key k;
		struct ntx_err ce = { 0, "" };
		char path[NTX_TUNABLES_PATH_MAX + 32];

		ntx_tunables_from_env(&tun);
		po.auto_expert_split = tun.expert_split;
		ntx_probe_key_now(&k, hw.cpu_cores);
		if (ntx_probe_cache_path(&tun, path, sizeof path) == 0)
			(void)ntx_probe_cache_load(path, &k, &hw, NULL, &ce);
	}
	rc = ntx_plan_compute(&pm, &hw, &po, &p, &ie);
	ntx_plan_model_free(&pm);
	if (rc)
		return ntx_api_fail(e, &ie);
	return wrap_plan(p, out, e);
}

void ntx_placement_free(struct ntx_placement *pl)
{
	if (!pl)
		return;
	ntx_plan_free(pl->p);
	free(pl);
}

enum ntx_status ntx_placement_info(const struct ntx_placement *pl,
				   struct ntx_placement_info *info, struct ntx_error *e)
{
	struct ntx_placement_info x;
	const struct ntx_plan *p;
	int l;

	if (!pl)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_info: pl is NULL");
	p = pl->p;
	memset(&x, 0, sizeof x);
	x.size = sizeof x;
	x.n_layer = p->model.n_layer;
	x.kv_cache = p->kv_type == NTX_KV_F32 ? NTX_KV_CACHE_F32 : NTX_KV_CACHE_F16;
	for (l = 0; l < p->model.n_layer; l++) {
		const struct ntx_plan_layer *L = &p->layers[l];

		if (L->skip) {
			x.n_skipped++;
			continue;
		}
		x.n_vram += L->home == NTX_TIER_VRAM;
		x.n_ram += L->home == NTX_TIER_RAM;
		x.n_disk += L->home == NTX_TIER_DISK;
		x.n_gpu_exec += L->exec == NTX_EXEC_GPU;
		x.n_cpu_exec += L->exec == NTX_EXEC_CPU;
	}
	x.n_ctx = p->n_ctx;
	x.n_seq = p->n_seq;
	x.predicted_tok_per_s = p->predicted_tok_per_s;
	return ntx_api_struct_out(info, &x, sizeof x, "ntx_placement_info", e);
}

enum ntx_status ntx_placement_to_json(const struct ntx_placement *pl, char **json,
				      struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!pl || !json)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_to_json: %s is NULL",
				   !pl ? "pl" : "json");
	*json = ntx_plan_to_json(pl->p, &ie);
	return *json ? NTX_OK : ntx_api_fail(e, &ie);
}
