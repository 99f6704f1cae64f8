/* api_tools.c - the public API (include/ntx.h) for the suite's tools:
 * calibration (ntx-skip-calib), inspection (ntx-inspect), plans (ntx-plan),
 * packs (ntx-pack) and the parsers of the values their options take. Each
 * call checks its arguments, runs the library's module and hands text
 * (JSON, summaries) back in memory the caller frees with ntx_free; printing
 * and files stay with the caller. api.c has errors, models and placements;
 * api_ctx.c contexts. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "calib.h"
#include "fileio.h"
#include "gguf.h"
#include "inspect.h"
#include "inspect_pack.h"
#include "inspect_table.h"
#include "pack.h"
#include "parse.h"

/* The caller's cancel flag is an int; the engine's is a sig_atomic_t. */
_Static_assert(_Generic((sig_atomic_t)0, int: 1, default: 0), "sig_atomic_t is int");

/* A jansson document as text: indented by 2, a trailing newline, as the
 * tools have always printed it (json_dumpf + '\n'). NULL when out of memory. */
static char *doc_text(const json_t *doc)
{
	char *s = json_dumps(doc, JSON_INDENT(2)), *t;
	size_t n;

	if (!s)
		return NULL;
	n = strlen(s);
	t = realloc(s, n + 2);
	if (!t) {
		free(s);
		return NULL;
	}
	t[n] = '\n';
	t[n + 1] = '\0';
	return t;
}

/* ---- values ---- */

enum ntx_status ntx_arg_size(const char *s, uint64_t *out, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_size: NULL argument");
	return ntx_parse_size(s, out, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_arg_budget(const char *s, int64_t *out, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_budget: NULL argument");
	return ntx_parse_budget(s, out, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_arg_int(const char *s, int min, int max, int *out, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_int: NULL argument");
	return ntx_parse_int(s, min, max, out, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_arg_double(const char *s, double min, double max, double *out,
			       struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_double: NULL argument");
	return ntx_parse_double(s, min, max, out, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

const char *ntx_size_format(uint64_t bytes, char *buf, size_t len)
{
	if (!buf || !len)
		return "";
	return ntx_fmt_size(bytes, buf, len > 4096 ? 4096 : (int)len);
}

/* ---- output files ---- */

struct ntx_output {
	struct ntx_outfile of;
};

enum ntx_status ntx_output_open(const char *path, struct ntx_output **out,
				struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_output *o;

	if (!out)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_output_open: out is NULL");
	*out = NULL;
	if (!path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_output_open: path is NULL");
	o = calloc(1, sizeof *o);
	if (!o)
		return ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
	if (ntx_outfile_open(&o->of, path, "wb", stdout, &ie)) {
		free(o);
		return ntx_api_fail(e, &ie);
	}
	*out = o;
	return NTX_OK;
}

enum ntx_status ntx_output_write(struct ntx_output *o, const void *data, size_t len,
				 struct ntx_error *e)
{
	if (!o || (!data && len))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_output_write: %s is NULL",
				   !o ? "o" : "data");
	errno = 0;
	if (len && fwrite(data, 1, len, o->of.f) != len)
		return ntx_api_set(e, NTX_STATUS_IO, "%s: %s",
				   o->of.path ? o->of.path : "writing output",
				   strerror(errno ? errno : EIO));
	return NTX_OK;
}

enum ntx_status ntx_output_commit(struct ntx_output *o, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	int rc;

	if (!o)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_output_commit: o is NULL");
	rc = ntx_outfile_commit(&o->of, &ie);
	free(o);
	return rc ? ntx_api_fail(e, &ie) : NTX_OK;
}

void ntx_output_abort(struct ntx_output *o)
{
	if (!o)
		return;
	ntx_outfile_abort(&o->of);
	free(o);
}

/* ---- placements: the model a plan names ---- */

enum ntx_status ntx_placement_model_path(const char *plan_path, char **model_path,
					 struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_plan *p;
	const char *s;

	if (!model_path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_model_path: model_path is NULL");
	*model_path = NULL;
	if (!plan_path)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_placement_model_path: plan_path is NULL");
	p = ntx_plan_load(plan_path, &ie);
	if (!p)
		return ntx_api_fail(e, &ie);
	s = ntx_plan_model_file(p, &ie);
	if (!s) {
		ntx_plan_free(p);
		ntx_err_prefix(&ie, "%s", plan_path);
		return ntx_api_fail(e, &ie);
	}
	*model_path = strdup(s);
	ntx_plan_free(p);
	return *model_path ? NTX_OK : ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
}

/* ---- inspect ---- */

/* The summary for people of a document: a pack's (inspect_pack.c) or a
 * GGUF file's (inspect_table.c). NULL when out of memory. */
static char *doc_summary(const json_t *doc, int pack)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f;

	if (pack)
		return ntx_inspect_pack_summary(doc);
	f = open_memstream(&s, &n);
	if (!f)
		return NULL;
	ntx_inspect_table(f, doc);
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

enum ntx_status ntx_inspect(const char *path, const void *buf, size_t len, unsigned flags,
			    char **text, struct ntx_error *e)
{
	struct ntx_err ie = { 0 };
	struct ntx_gguf *g = NULL;
	unsigned iflags = flags & NTX_INSPECT_ALL_ELEMENTS ? NTX_INSPECT_FULL : 0;
	json_t *doc = NULL;
	int pack;

	if (!text)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_inspect: text is NULL");
	*text = NULL;
	if (!path || (!buf && len))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_inspect: %s",
				   !path ? "path is NULL" : "buf is NULL");
	if (flags & ~(unsigned)(NTX_INSPECT_ALL_ELEMENTS | NTX_INSPECT_SUMMARY))
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_inspect: unknown flags 0x%x", flags);
	pack = buf ? ntx_pack_is_pack(buf, len) : ntx_pack_file_is_pack(path);
	if (pack) /* a pack file: its own document */
		doc = ntx_inspect_pack_file(path, buf, len, iflags, &ie);
	else if ((g = buf ? ntx_gguf_open_buffer(buf, len, &ie) : ntx_gguf_open(path, &ie)))
		doc = ntx_inspect_json(g, path, iflags, &ie);
	if (!doc) {
		ntx_gguf_close(g);
		return ntx_api_fail(e, &ie);
	}
	*text = flags & NTX_INSPECT_SUMMARY ? doc_summary(doc, pack) : doc_text(doc);
	json_decref(doc);
	ntx_gguf_close(g);
	return *text ? NTX_OK : ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
}

/* ---- calibration ---- */

void ntx_calib_params_init(struct ntx_calib_params *p)
{
	if (!p)
		return;
	memset(p, 0, sizeof *p);
	p->size = sizeof *p;
	p->n_ctx = NTX_CALIB_DEFAULT_CTX;
}

struct calib_user {
	const struct ntx_calib_params *p;
};

static void calib_progress(void *u, const char *what, int chunk, int n_chunks, double ppl)
{
	const struct ntx_calib_params *p = ((struct calib_user *)u)->p;

	p->progress(p->user, what, chunk, n_chunks, ppl);
}

static void calib_note(void *u, const char *line)
{
	const struct ntx_calib_params *p = ((struct calib_user *)u)->p;

	p->note(p->user, line);
}

enum ntx_status ntx_calibrate(const struct ntx_lm *lm, const struct ntx_placement *pl,
			      const struct ntx_calib_params *pp, char **json,
			      struct ntx_error *e)
{
	struct ntx_calib_params x;
	struct ntx_calib_opts o;
	struct calib_user cu = { &x };
	struct ntx_err ie = { 0 };
	enum ntx_status s;
	json_t *doc;

	if (!json)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_calibrate: json is NULL");
	*json = NULL;
	if (!lm)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_calibrate: lm is NULL");
	ntx_calib_params_init(&x);
	s = ntx_api_struct_in(&x, sizeof x, pp, "ntx_calib_params", e);
	if (s)
		return s;
	if (ntx_api_backend_in(x.backend, e))
		return NTX_STATUS_INVALID;
	if (pl && ntx_plan_check_model(pl->p, lm->m, &ie))
		return ntx_api_fail(e, &ie);
	memset(&o, 0, sizeof o);
	o.counts = x.counts;
	o.n_counts = x.counts ? x.n_counts : 0;
	o.use_threshold = x.use_threshold;
	o.threshold = x.threshold;
	o.n_ctx = x.n_ctx;
	o.allow_ends = x.allow_ends;
	o.naive = x.naive;
	o.backend = x.backend == NTX_USE_CPU ? NTX_BACKEND_CPU :
		    x.backend == NTX_USE_CUDA ? NTX_BACKEND_CUDA : NTX_BACKEND_AUTO;
	o.n_threads = x.n_threads;
	o.calib = x.calib_text;
	o.calib_len = x.calib_len;
	o.calib_name = x.calib_name;
	o.eval = x.eval_text;
	o.eval_len = x.eval_len;
	o.eval_name = x.eval_name;
	o.interrupt = (volatile sig_atomic_t *)x.cancel;
	o.progress = x.progress ? calib_progress : NULL;
	o.note = x.note ? calib_note : NULL;
	o.user = &cu;
	doc = ntx_calib_run(lm->m, lm->v, pl ? pl->p : NULL, &o, &ie);
	if (!doc)
		return ntx_api_fail(e, &ie);
	*json = doc_text(doc);
	json_decref(doc);
	return *json ? NTX_OK : ntx_api_set(e, NTX_STATUS_NOMEM, "out of memory");
}
