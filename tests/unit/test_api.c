/* test_api - the public API (include/ntx.h) on the shipped tiny model: its
 * tokens and greedy generation equal the internal modules' (tokenizer.h,
 * generate.h), batch requests equal generation alone, placements round-trip
 * through JSON, the tools' calls (values, output files, inspect,
 * calibration) give what the tools print, the 0.3 calls (chat prompts,
 * the streaming detokenizer, sampling options from text, speculative
 * decoding, the KV cache type) agree with the internal modules and keep
 * greedy output, the 0.5 generate details (teacher forcing, the logits
 * sink, self-speculation, the speculative and streaming counters) do what
 * ntx-run needs, and every misuse gets its status and a message naming
 * the value. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx.h"
#include "t.h"

#include "chat.h"
#include "engine.h"
#include "generate.h"
#include "model.h"
#include "tokenizer.h"
#include "version.h"

#define MODEL "models/tinymodel-q4_k_m.gguf"
#define PROMPT "Once upon a time"
#define N_GEN 16

struct rec {
	int32_t ids[64];
	char text[1024];
	size_t len;
	int n, stop_after;
};

/* The message of a call that failed, for the diagnostics. */
static const char *msg(enum ntx_status st, const struct ntx_error *e)
{
	return st ? ntx_error_message(e) : "ok";
}

static int on_token(void *user, int32_t id, const char *piece, size_t len)
{
	struct rec *r = user;

	if (r->n < 64)
		r->ids[r->n] = id;
	r->n++;
	if (r->len + len < sizeof r->text) {
		memcpy(r->text + r->len, piece, len);
		r->len += len;
	}
	return r->stop_after && r->n >= r->stop_after;
}

/* Set p on ctx and generate greedily into got (cleared first): the status. */
static enum ntx_status spec_generate(struct ntx_ctx *ctx, const struct ntx_spec_params *p,
				     const int32_t *ids, int n, const struct ntx_gen_params *gp,
				     struct rec *got, struct ntx_gen_result *res, struct ntx_error *err)
{
	enum ntx_status st = ntx_ctx_set_spec(ctx, p, err);

	memset(got, 0, sizeof *got);
	return st == NTX_OK ? ntx_ctx_generate(ctx, 0, ids, n, gp, on_token, got, res, err) : st;
}

static int internal_tok(void *user, int32_t tok)
{
	struct rec *r = user;

	if (r->n < 64)
		r->ids[r->n++] = tok;
	return 0;
}

/* The reference: 16 greedy tokens through the internal API. */
static int internal_generate(struct rec *ref)
{
	struct ntx_err err = { 0 };
	struct ntx_model *m = ntx_model_open(MODEL, 0, &err);
	struct ntx_vocab *v = m ? ntx_vocab_load(m->gguf, &err) : NULL;
	struct ntx_engine_opts eo = { .backend = NTX_BACKEND_CPU };
	struct ntx_engine *e = v ? ntx_engine_new(m, &eo, &err) : NULL;
	struct ntx_gen_opts go = { .n_predict = N_GEN };
	struct ntx_gen_stats st;
	uint8_t *eog = m ? calloc((size_t)m->cfg.n_vocab, 1) : NULL;
	const int32_t *eids;
	int32_t *ids = NULL;
	int n = 0, i, rc = -1;

	if (e && eog && !ntx_tokenize(v, PROMPT, strlen(PROMPT), 1, 1, &ids, &n, &err)) {
		eids = ntx_vocab_eog_ids(v, &i);
		while (i-- > 0)
			eog[eids[i]] = 1;
		ntx_sampler_defaults(&go.sp);
		go.sp.temp = 0;
		go.eog = eog;
		rc = ntx_generate(e, 0, ids, n, &go, internal_tok, ref, &st, &err);
	}
	if (rc)
		t_diag("internal: %s", err.msg);
	free(ids);
	free(eog);
	ntx_engine_free(e);
	ntx_vocab_free(v);
	ntx_model_close(m);
	return rc;
}

/* The reference of 0.4's perplexity: the internal engine's, with layers
 * flagged in skip (may be NULL) removed. */
static int internal_ppl(const int32_t *ids, int n, int n_chunk, const uint8_t *skip, double *ppl)
{
	struct ntx_err err = { 0 };
	struct ntx_model *m = ntx_model_open(MODEL, 0, &err);
	struct ntx_vocab *v = m ? ntx_vocab_load(m->gguf, &err) : NULL;
	struct ntx_engine_opts eo = { .backend = NTX_BACKEND_CPU, .n_ctx = 64, .skip = skip };
	struct ntx_engine *e = v ? ntx_engine_new(m, &eo, &err) : NULL;
	struct ntx_ppl_result r;
	int rc = -1;

	if (e)
		rc = ntx_perplexity(e, ids, n, n_chunk, ntx_vocab_bos(v), NULL, NULL, NULL, NULL,
				    NULL, &r, &err);
	if (rc)
		t_diag("internal: %s", err.msg);
	else
		*ppl = r.ppl;
	ntx_engine_free(e);
	ntx_vocab_free(v);
	ntx_model_close(m);
	return rc;
}

static void count_chunks(void *user, int chunk, int n_chunks, double ppl)
{
	int *last = user;

	(void)n_chunks;
	(void)ppl;
	*last = chunk;
}

static void done_cb(void *user, int64_t id, const struct ntx_gen_result *r, const int32_t *gen)
{
	struct rec *recs = user;
	struct rec *x = &recs[id & 1];

	x->n = r->n_gen < 64 ? r->n_gen : 64;
	memcpy(x->ids, gen, (size_t)x->n * sizeof *gen);
	x->stop_after = (int)r->finish; /* reused as the finish reason */
}

/* ---- plans and packs (ntx-plan, ntx-pack) ---- */

struct notes {
	int n, ram;
};

/* 0.5's logits sink: counts the rows and keeps each one's argmax; fails
 * at row fail_at (1-based; 0: never) with ENOSPC. */
struct rows {
	int n, fail_at, bad_len;
	int32_t argmax[128];
};

static int on_rows(void *user, const float *logits, int32_t n_vocab)
{
	struct rows *r = user;
	int32_t i, best = 0;

	for (i = 1; i < n_vocab; i++)
		if (logits[i] > logits[best])
			best = i;
	if (r->n < 128)
		r->argmax[r->n] = best;
	r->n++;
	return r->fail_at && r->n == r->fail_at ? ENOSPC : 0;
}

static void on_note(void *user, const char *line)
{
	struct notes *n = user;

	n->n++;
	n->ram += !strncmp(line, "RAM available: ", 15);
}

struct progress {
	uint64_t done, total;
	int n;
};

static void on_progress(void *user, uint64_t done, uint64_t total)
{
	struct progress *p = user;

	p->n++;
	p->done = done;
	p->total = total;
}

/* Plan the tiny model with everything given: no detection, the same plan
 * on every machine. ram: the RAM budget (10M puts layers on disk). */
static void fixed_params(struct ntx_planner_params *pp, int64_t ram)
{
	ntx_planner_params_init(pp);
	pp->vram_budget = 0;
	pp->ram_budget = ram;
	pp->disk_budget = 1 << 30;
	pp->n_ctx = 256;
	pp->cpu_gbps = 10;
	pp->cpu_batch_gbps = 40;
}

static char *plan_json(const struct ntx_model_desc *d, const struct ntx_planner_params *pp,
		       struct ntx_error *err)
{
	struct ntx_placement *pl = NULL;
	char *json = NULL;

	if (ntx_placement_plan(d, pp, &pl, err) == NTX_OK)
		ntx_placement_to_json(pl, &json, err);
	ntx_placement_free(pl);
	return json;
}

/* Write the plan's disk layers and every layer, verify, refuse misuse. */
static void test_pack_calls(const struct ntx_lm *lm, const struct ntx_placement *pl,
			    const struct ntx_placement_info *info, struct ntx_error *err)
{
	struct ntx_packfile_params pp;
	struct ntx_packfile_stats ws = { .size = sizeof ws }, vs = { .size = sizeof vs };
	struct ntx_packfile *pf = NULL;
	struct progress pr = { 0 };
	struct ntx_lm_info li = { .size = sizeof li };
	char path[64], *dp = NULL;
	volatile int cancel = 1;
	enum ntx_status st;
	FILE *f;

	snprintf(path, sizeof path, "/tmp/test_api_%d.ntxp", (int)getpid());
	st = ntx_packfile_default_path(MODEL, &dp, err);
	t_ok(st == NTX_OK && !strcmp(dp, "models/tinymodel-q4_k_m.ntxp"),
	     "ntx_packfile_default_path: %s", dp ? dp : "-");
	ntx_free(dp);
	ntx_packfile_params_init(&pp);
	pp.progress = on_progress;
	pp.user = &pr;
	st = ntx_packfile_write(lm, pl, path, &pp, &ws, err);
	t_ok(st == NTX_OK && ws.n_extents == info->n_disk && ws.n_compressed == 0 &&
		     ws.raw_bytes > 0 && ws.stored_bytes >= ws.raw_bytes && pr.n > 0 &&
		     pr.done == pr.total,
	     "ntx_packfile_write of the disk layers: %d extents, %d progress calls: %s",
	     ws.n_extents, pr.n, msg(st, err));
	t_ok(ntx_packfile_detect(path) == 1 && ntx_packfile_detect(MODEL) == 0 &&
		     ntx_packfile_detect("no/such") == 0, "ntx_packfile_detect");
	st = ntx_packfile_open(path, &pf, err);
	if (st == NTX_OK)
		st = ntx_packfile_check(pf, pl, err);
	if (st == NTX_OK)
		st = ntx_packfile_verify(pf, lm, NULL, &vs, err);
	t_ok(st == NTX_OK && vs.n_extents == ws.n_extents && vs.raw_bytes == ws.raw_bytes &&
		     vs.stored_bytes == ws.stored_bytes && vs.file_size == ws.file_size,
	     "open, check, verify: %d extents: %s", vs.n_extents, msg(st, err));
	ntx_packfile_close(pf);
	pf = NULL;

	/* every layer, zstd: verified too */
	pp.compression = NTX_COMPRESS_ZSTD;
	pp.progress = NULL;
	st = ntx_packfile_write(lm, NULL, path, &pp, &ws, err);
	if (st == NTX_OK)
		st = ntx_packfile_open(path, &pf, err);
	if (st == NTX_OK)
		st = ntx_packfile_verify(pf, lm, NULL, &vs, err);
	t_ok(st == NTX_OK && ntx_lm_info(lm, &li, err) == NTX_OK && ws.n_extents == li.n_layer &&
		     vs.n_extents == li.n_layer && vs.n_compressed == ws.n_compressed,
	     "every layer, zstd: %d extents, %d compressed: %s", ws.n_extents, ws.n_compressed,
	     msg(st, err));
	ntx_packfile_close(pf);
	pf = NULL;

	/* a flipped byte in the first extent: verify fails */
	pp.compression = NTX_COMPRESS_NONE;
	st = ntx_packfile_write(lm, NULL, path, &pp, &ws, err);
	f = fopen(path, "r+b");
	if (f) {
		int c;

		fseek(f, (long)(ws.file_size - ws.stored_bytes) + 100, SEEK_SET);
		c = fgetc(f);
		fseek(f, -1, SEEK_CUR);
		fputc(c ^ 0x55, f);
		fclose(f);
	}
	if (st == NTX_OK)
		st = ntx_packfile_open(path, &pf, err);
	t_ok(st == NTX_OK && ntx_packfile_verify(pf, lm, NULL, &vs, err) != NTX_OK,
	     "a flipped byte: verify fails: '%s'", ntx_error_message(err));
	ntx_packfile_close(pf);

	/* refused: the model, a device, a bad frame size, a cancel */
	t_ok(ntx_packfile_write(lm, NULL, MODEL, &pp, NULL, err) == NTX_STATUS_INVALID &&
		     !strcmp(ntx_error_message(err), "refusing to overwrite the model"),
	     "over the model: '%s'", ntx_error_message(err));
	t_ok(ntx_packfile_write(lm, NULL, "/dev/null", &pp, NULL, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "not a regular file"),
	     "over /dev/null: '%s'", ntx_error_message(err));
	pp.frame_size = 5000;
	t_ok(ntx_packfile_write(lm, NULL, path, &pp, NULL, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "frame_size 5000"),
	     "frame_size 5000: '%s'", ntx_error_message(err));
	pp.frame_size = 0;
	remove(path);
	pp.cancel = &cancel;
	t_ok(ntx_packfile_write(lm, NULL, path, &pp, NULL, err) == NTX_STATUS_INTERRUPTED &&
		     access(path, F_OK) != 0,
	     "cancelled: interrupted, no file: '%s'", ntx_error_message(err));
	t_ok(ntx_packfile_open("no/such.ntxp", &pf, err) == NTX_STATUS_IO && !pf,
	     "ntx_packfile_open of a missing file: '%s'", ntx_error_message(err));
	remove(path);
}

static void test_plan_calls(const struct ntx_lm *lm, struct ntx_error *err)
{
	struct ntx_model_desc *d = NULL, *d2 = (struct ntx_model_desc *)1;
	struct ntx_planner_params pp;
	struct ntx_placement *pl = NULL, *pl2 = NULL;
	struct ntx_placement_info info = { .size = sizeof info };
	struct notes notes = { 0 };
	char *j1 = NULL, *j2 = NULL, *doc = NULL, *text = NULL, pj[64];
	const char *fx = getenv("NTX_FIXTURES");
	int *layers = NULL, n = -1;
	enum ntx_status st;
	FILE *f;

	/* model descriptions */
	t_ok(ntx_model_desc_open("no/such.gguf", &d2, err) == NTX_STATUS_IO && !d2 &&
		     !strcmp(ntx_error_message(err), "no/such.gguf: No such file or directory"),
	     "ntx_model_desc_open of a missing file: '%s'", ntx_error_message(err));
	t_ok(ntx_model_desc_from_text("hello", 5, "x.txt", &d2, err) == NTX_STATUS_INVALID &&
		     !strcmp(ntx_error_message(err),
			     "x.txt: not a GGUF file or inspect JSON (starts with 68 65 6c 6c)"),
	     "not JSON: '%s'", ntx_error_message(err));
	t_ok(ntx_model_desc_from_text("", 0, NULL, &d2, err) == NTX_STATUS_INVALID &&
		     !strcmp(ntx_error_message(err), "<stdin>: not a GGUF file or inspect JSON (empty)"),
	     "empty stdin: '%s'", ntx_error_message(err));
	st = ntx_model_desc_open(MODEL, &d, err);
	if (!t_ok(st == NTX_OK && d, "ntx_model_desc_open %s: %s", MODEL, msg(st, err)))
		return;

	/* the same plan from the GGUF and from its inspect JSON */
	fixed_params(&pp, 1 << 30);
	j1 = plan_json(d, &pp, err);
	st = ntx_inspect(MODEL, NULL, 0, 0, &doc, err);
	if (st == NTX_OK)
		st = ntx_model_desc_from_text(doc, strlen(doc), MODEL, &d2, err);
	if (st == NTX_OK)
		j2 = plan_json(d2, &pp, err);
	t_ok(j1 && j2 && !strcmp(j1, j2), "a plan from the GGUF equals one from its inspect JSON: %s",
	     msg(st, err));
	ntx_model_desc_free(d2);
	ntx_free(doc);
	ntx_free(j2);
	j2 = NULL;

	/* skip lists: the caller's usage error is NTX_STATUS_INVALID */
	st = ntx_model_desc_skip(d, "1,3-4", -1, &layers, &n, err);
	t_ok(st == NTX_OK && n == 3 && layers[0] == 1 && layers[1] == 3 && layers[2] == 4,
	     "ntx_model_desc_skip 1,3-4: %d layers: %s", n, msg(st, err));
	ntx_free(layers);
	t_ok(ntx_model_desc_skip(d, "no/such.json", -1, &layers, &n, err) == NTX_STATUS_IO &&
		     !layers,
	     "skip 'no/such.json': not a list, a file that cannot be read: '%s'",
	     ntx_error_message(err));
	t_ok(ntx_model_desc_skip(d, "1-999", -1, &layers, &n, err) == NTX_STATUS_INVALID &&
		     !layers && n == 0,
	     "skip 1-999: invalid: '%s'", ntx_error_message(err));
	st = ntx_model_desc_skip(d, "1,3-4", -1, &layers, &n, err);
	pp.skip = layers;
	pp.n_skip = n;
	st = st ? st : ntx_placement_plan(d, &pp, &pl, err);
	t_ok(st == NTX_OK && ntx_placement_info(pl, &info, err) == NTX_OK && info.n_skipped == 3 &&
		     info.n_disk == 0 && !ntx_placement_pack_path(pl),
	     "skipped 3 layers, none on disk, no pack path: %s", msg(st, err));
	ntx_placement_free(pl);
	pl = NULL;
	ntx_free(layers);

	/* budgets: nofit; bad parameters */
	fixed_params(&pp, 1000);
	t_ok(ntx_placement_plan(d, &pp, &pl, err) == NTX_STATUS_NOFIT && !pl,
	     "1000 bytes of RAM: nofit: '%s'", ntx_error_message(err));
	fixed_params(&pp, 1 << 30);
	pp.ring_slots = 1;
	t_ok(ntx_placement_plan(d, &pp, &pl, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "ring_slots 1"),
	     "ring_slots 1: '%s'", ntx_error_message(err));
	pp.ring_slots = 0;
	pp.size = 0;
	t_ok(ntx_placement_plan(d, &pp, &pl, err) == NTX_STATUS_INVALID,
	     "size 0: '%s'", ntx_error_message(err));

	/* notes: what was detected, when asked */
	fixed_params(&pp, -1);
	pp.notes = NTX_NOTE_DETECTED;
	pp.note = on_note;
	pp.user = &notes;
	st = ntx_placement_plan(d, &pp, &pl, err);
	t_ok(st == NTX_OK && notes.ram == 1, "a detected RAM size is a note (%d notes): %s", notes.n,
	     msg(st, err));
	ntx_placement_free(pl);
	pl = NULL;

	/* layers on disk: pack path, explain, read back, check, rebase */
	fixed_params(&pp, 10 << 20);
	st = ntx_placement_plan(d, &pp, &pl, err);
	t_ok(st == NTX_OK && ntx_placement_info(pl, &info, err) == NTX_OK && info.n_disk > 0 &&
		     ntx_placement_pack_path(pl) &&
		     !strcmp(ntx_placement_pack_path(pl), "models/tinymodel-q4_k_m.ntxp"),
	     "10M of RAM: %d layers on disk, pack %s: %s", info.n_disk,
	     pl && ntx_placement_pack_path(pl) ? ntx_placement_pack_path(pl) : "-", msg(st, err));
	if (!pl)
		goto out;
	st = ntx_placement_explain(pl, &text, err);
	t_ok(st == NTX_OK && text && strchr(text, '\n'), "ntx_placement_explain: %zu bytes",
	     text ? strlen(text) : 0);
	ntx_free(text);
	ntx_placement_to_json(pl, &j2, err);
	/* in the working directory (the plan's relative paths), named per process */
	snprintf(pj, sizeof pj, "test_api_plan.%ld.tmp.json", (long)getpid());
	f = fopen(pj, "w");
	if (f) {
		fputs(j2 ? j2 : "", f);
		fclose(f);
	}
	ntx_free(j1);
	j1 = NULL;
	st = ntx_placement_read(pj, &pl2, err);
	if (st == NTX_OK)
		st = ntx_placement_to_json(pl2, &j1, err);
	t_ok(st == NTX_OK && j1 && j2 && !strcmp(j1, j2), "a plan read back equals it: %s",
	     msg(st, err));
	t_ok(ntx_placement_check(pl2, lm, err) == NTX_OK, "ntx_placement_check: made for lm");
	remove(pj);
	{
		struct ntx_placement *pl3 = (struct ntx_placement *)1;

		t_ok(ntx_placement_read("no/plan.json", &pl3, err) == NTX_STATUS_IO && !pl3 &&
			     strstr(ntx_error_message(err), "no/plan.json"),
		     "ntx_placement_read of a missing file: '%s'", ntx_error_message(err));
	}
	st = ntx_placement_rebase(pl, "-", err);
	t_ok(st == NTX_OK && !strcmp(ntx_placement_pack_path(pl), "models/tinymodel-q4_k_m.ntxp"),
	     "rebase for stdout: paths as given");
	st = ntx_placement_rebase(pl, "sub/plan.json", err);
	t_ok(st == NTX_OK && ntx_placement_pack_path(pl)[0] == '/',
	     "rebase for sub/plan.json: %s", ntx_placement_pack_path(pl));
	if (fx && t_need_fixtures("a plan of another model: mismatch")) {
		char path[4096];
		struct ntx_model_desc *other = NULL;
		struct ntx_placement *plo = NULL;

		snprintf(path, sizeof path, "%s/models/stories260K.gguf", fx);
		fixed_params(&pp, 1 << 30);
		st = ntx_model_desc_open(path, &other, err);
		if (st == NTX_OK)
			st = ntx_placement_plan(other, &pp, &plo, err);
		t_ok(st == NTX_OK && ntx_placement_check(plo, lm, err) == NTX_STATUS_MISMATCH,
		     "a plan of another model: mismatch: '%s'", ntx_error_message(err));
		ntx_placement_free(plo);
		ntx_model_desc_free(other);
	}
	test_pack_calls(lm, pl2, &info, err);
out:
	ntx_free(j1);
	ntx_free(j2);
	ntx_placement_free(pl);
	ntx_placement_free(pl2);
	ntx_model_desc_free(d);
}

int main(void)
{
	struct ntx_error *err = ntx_error_new();
	struct ntx_lm *lm = NULL, *lm2 = (struct ntx_lm *)1;
	struct ntx_ctx *ctx = NULL, *ctx2 = NULL;
	struct ntx_placement *pl = NULL, *pl2 = NULL;
	struct ntx_lm_info info;
	struct ntx_ctx_params cp;
	struct ntx_gen_params gp;
	struct ntx_gen_result res;
	struct ntx_ctx_stats cs;
	struct rec ref = { 0 }, got = { 0 }, stop = { 0 }, batch[2];
	struct ntx_request rq;
	int32_t ids[64], *iids = NULL;
	int n = 0, n_int = 0, i, same, n_active = -1, steps;
	struct ntx_err ierr = { 0 };
	char buf[1024], *json = NULL;
	size_t len = 0;
	int64_t id0 = -1, id1 = -1;
	enum ntx_status st;

	/* versions */
	t_ok(!strcmp(ntx_version(), NTX_VERSION), "ntx_version() %s is the suite's %s",
	     ntx_version(), NTX_VERSION);
	snprintf(buf, sizeof buf, "%d.%d.%d", NTX_VERSION_MAJOR, NTX_VERSION_MINOR,
		 NTX_VERSION_PATCH);
	t_ok(ntx_version_number() == NTX_VERSION_NUMBER && !strcmp(buf, NTX_VERSION),
	     "ntx_version_number() 0x%06x; ntx.h's %s is version.h's %s", ntx_version_number(),
	     buf, NTX_VERSION);
	t_ok(err != NULL, "ntx_error_new");

	/* errors: a missing file, NULL handles, bad options */
	t_ok(ntx_lm_open("no/such.gguf", &lm2, err) == NTX_STATUS_IO && lm2 == NULL &&
		     ntx_error_status(err) == NTX_STATUS_IO &&
		     !strcmp(ntx_error_message(err), "no/such.gguf: No such file or directory"),
	     "missing file: io, *out NULL, message '%s'", ntx_error_message(err));
	t_ok(ntx_lm_open(NULL, &lm2, NULL) == NTX_STATUS_INVALID, "NULL path, NULL error object");
	info.size = sizeof info;
	t_ok(ntx_lm_info(NULL, &info, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "lm is NULL"),
	     "ntx_lm_info(NULL): '%s'", ntx_error_message(err));
	t_ok(ntx_ctx_generate(NULL, 0, ids, 1, NULL, NULL, NULL, NULL, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "ctx is NULL"),
	     "ntx_ctx_generate(NULL): '%s'", ntx_error_message(err));
	t_ok(ntx_ctx_step(NULL, NULL, err) == NTX_STATUS_INVALID, "ntx_ctx_step(NULL)");
	ntx_lm_close(NULL);
	ntx_ctx_free(NULL);
	ntx_placement_free(NULL);
	ntx_error_free(NULL);
	t_ok(!strcmp(ntx_status_name(NTX_STATUS_NOFIT), "nofit") &&
		     !strcmp(ntx_status_name((enum ntx_status)99), "unknown"),
	     "ntx_status_name");

	st = ntx_lm_open(MODEL, &lm, err);
	if (!t_ok(st == NTX_OK, "open %s: %s", MODEL, msg(st, err)))
		return t_done();
	info.size = sizeof info;
	st = ntx_lm_info(lm, &info, err);
	t_ok(st == NTX_OK && info.n_layer > 0 && info.n_vocab > 0 &&
		     info.file_size > 0 && info.n_params > 0 && !strcmp(info.arch, "llama") &&
		     strlen(info.fingerprint) == 16 && !strcmp(info.path, MODEL),
	     "info: %d layers, vocab %d, ctx %d, %llu params, %llu bytes", info.n_layer,
	     info.n_vocab, info.n_ctx_train, (unsigned long long)info.n_params,
	     (unsigned long long)info.file_size);
	t_ok(info.chat_template && strstr(info.chat_template, "<|start_header_id|>") &&
		     !strncmp(info.chat_template, "{% set loop_messages", 20),
	     "info: the model's tokenizer.chat_template, its Jinja text");
	/* a caller built before chat_template: the field is left as it was */
	info.size = offsetof(struct ntx_lm_info, chat_template);
	info.chat_template = "untouched";
	t_ok(ntx_lm_info(lm, &info, err) == NTX_OK && !strcmp(info.chat_template, "untouched"),
	     "info.size without chat_template: the field is not written");
	info.size = 0;
	t_ok(ntx_lm_info(lm, &info, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "size 0"),
	     "info.size 0: '%s'", ntx_error_message(err));
	t_ok(ntx_lm_is_eog(lm, info.eos) && !ntx_lm_is_eog(lm, -1), "eos is end-of-generation");

	/* tokenizer: the internal one's ids; the buffer rule; the text back */
	{
		struct ntx_model *m = ntx_model_open(MODEL, NTX_MODEL_VOCAB_ONLY, &ierr);
		struct ntx_vocab *v = m ? ntx_vocab_load(m->gguf, &ierr) : NULL;

		if (v)
			ntx_tokenize(v, PROMPT, strlen(PROMPT), 1, 1, &iids, &n_int, &ierr);
		ntx_vocab_free(v);
		ntx_model_close(m);
	}
	st = ntx_lm_tokenize(lm, PROMPT, strlen(PROMPT), NTX_TOKENIZE_ADD_BOS | NTX_TOKENIZE_SPECIAL,
			     ids, 64, &n, err);
	t_ok(st == NTX_OK &&
		     iids && n == n_int && !memcmp(ids, iids, (size_t)n * sizeof *ids) &&
		     ids[0] == info.bos,
	     "tokenize: %d ids, as ntx_tokenize", n);
	i = -1;
	st = ntx_lm_tokenize(lm, PROMPT, strlen(PROMPT), NTX_TOKENIZE_ADD_BOS, ids, 2, &i, err);
	t_ok(st == NTX_STATUS_BUFFER && i == n,
	     "tokenize into 2 ids: buffer, %d needed: '%s'", i, ntx_error_message(err));
	t_ok(ntx_lm_tokenize(lm, PROMPT, 3, 0x80, ids, 64, &i, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "0x80"),
	     "unknown tokenize flag: '%s'", ntx_error_message(err));
	st = ntx_lm_detokenize(lm, ids, n, NTX_DETOKENIZE_REMOVE_SPECIAL, buf, sizeof buf, &len,
			       err);
	t_ok(st == NTX_OK && !strcmp(buf, PROMPT) && len == strlen(PROMPT),
	     "detokenize: '%s'", buf);
	st = ntx_lm_detokenize(lm, ids, n, NTX_DETOKENIZE_REMOVE_SPECIAL, buf, 4, &len, err);
	t_ok(st == NTX_STATUS_BUFFER && len == strlen(PROMPT),
	     "detokenize into 4 bytes: buffer, %zu needed", len);
	ids[n] = info.n_vocab;
	t_ok(ntx_lm_detokenize(lm, ids, n + 1, 0, buf, sizeof buf, &len, err) ==
		     NTX_STATUS_INVALID,
	     "detokenize an id out of range: '%s'", ntx_error_message(err));
	{
		const char *p;

		t_ok(ntx_lm_piece(lm, info.n_vocab, &p, &len, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "out of range"),
		     "piece out of range: '%s'", ntx_error_message(err));
	}

	/* contexts: bad options, then greedy generation equal to ntx_generate's */
	ntx_ctx_params_init(&cp);
	cp.backend = (enum ntx_backend_choice)7;
	t_ok(ntx_ctx_new(lm, NULL, &cp, &ctx, err) == NTX_STATUS_INVALID && !ctx &&
		     strstr(ntx_error_message(err), "backend 7"),
	     "backend 7: '%s'", ntx_error_message(err));
	cp.backend = NTX_USE_CPU;
	cp.n_seq = 2;
	cp.n_ctx = 256;
	st = ntx_ctx_new(lm, NULL, &cp, &ctx, err);
	if (!t_ok(st == NTX_OK, "ntx_ctx_new: %s", msg(st, err)))
		return t_done();
	ntx_gen_params_init(&gp);
	gp.temperature = NAN;
	t_ok(ntx_ctx_generate(ctx, 0, ids, n, &gp, NULL, NULL, NULL, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "temperature nan"),
	     "temperature NaN: '%s'", ntx_error_message(err));
	gp.temperature = 0;
	gp.n_predict = N_GEN;
	t_ok(ntx_ctx_generate(ctx, 2, ids, n, &gp, NULL, NULL, NULL, err) == NTX_STATUS_INVALID &&
		     strstr(ntx_error_message(err), "sequence 2"),
	     "sequence 2 of 2: '%s'", ntx_error_message(err));
	st = internal_generate(&ref) ? NTX_STATUS_INVALID : NTX_OK;
	t_ok(st == NTX_OK && ref.n > 0, "internal reference: %d tokens", ref.n);
	res.size = sizeof res;
	st = ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, &got, &res, err);
	t_ok(st == NTX_OK,
	     "generate: %s", msg(st, err));
	same = got.n == ref.n && !memcmp(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids);
	t_ok(same && res.n_gen == ref.n && res.n_prompt == n &&
		     (res.finish == NTX_FINISH_LENGTH || res.finish == NTX_FINISH_EOG),
	     "%d greedy tokens equal ntx_generate's (finish %d)", got.n, (int)res.finish);
	got.text[got.len] = '\0';
	t_diag("text: '%s'", got.text);
	t_ok(ntx_lm_detokenize(lm, got.ids, got.n, 0, buf, sizeof buf, &len, err) == NTX_OK &&
		     got.len > 0,
	     "the pieces make text (%zu bytes)", got.len);
	stop.stop_after = 3;
	st = ntx_ctx_generate(ctx, 1, ids, n, &gp, on_token, &stop, &res, err);
	t_ok(st == NTX_OK && res.finish == NTX_FINISH_STOPPED && res.n_gen == 3 && stop.n == 3,
	     "the callback stops after 3 tokens (finish %d, n_gen %d)", (int)res.finish, res.n_gen);

	/* batch requests: two at once, each equal to generation alone */
	memset(batch, 0, sizeof batch);
	ntx_request_init(&rq);
	rq.prompt = ids;
	rq.n_prompt = n;
	rq.gen = &gp;
	rq.on_done = done_cb;
	rq.user = batch;
	st = ntx_ctx_submit(ctx, &rq, &id0, err);
	if (st == NTX_OK)
		st = ntx_ctx_submit(ctx, &rq, &id1, err);
	t_ok(st == NTX_OK && id1 == id0 + 1,
	     "submit two requests (%lld, %lld): %s", (long long)id0, (long long)id1,
	     msg(st, err));
	t_ok(ntx_ctx_submit(ctx, &rq, NULL, err) == NTX_STATUS_NOFIT,
	     "a third with 2 sequences: nofit: '%s'", ntx_error_message(err));
	t_ok(ntx_ctx_generate(ctx, 0, ids, n, &gp, NULL, NULL, NULL, err) == NTX_STATUS_BUSY,
	     "generate while requests are active: busy: '%s'", ntx_error_message(err));
	for (steps = 0; steps < 1000; steps++)
		if (ntx_ctx_step(ctx, &n_active, err) != NTX_OK || n_active == 0)
			break;
	t_ok(n_active == 0, "every request done after %d steps", steps);
	for (i = 0; i < 2; i++)
		t_ok(batch[i].n == ref.n &&
			     !memcmp(batch[i].ids, ref.ids, (size_t)ref.n * sizeof *ref.ids),
		     "batch request %d: %d tokens equal generation alone (finish %d)", i,
		     batch[i].n, batch[i].stop_after);
	t_ok(ntx_ctx_cancel(ctx, id0, err) == NTX_STATUS_INVALID,
	     "cancel a finished request: '%s'", ntx_error_message(err));
	cs.size = sizeof cs;
	st = ntx_ctx_stats(ctx, &cs, err);
	t_ok(st == NTX_OK && cs.backend == NTX_USE_CPU &&
		     cs.n_ctx == 256 && cs.n_seq == 2 && cs.n_requests == 2 &&
		     cs.n_batch_gen == 2 * ref.n && cs.n_tokens > 0 && cs.n_eval_calls > 0,
	     "stats: %lld requests, %lld batch tokens, %lld evaluated",
	     (long long)cs.n_requests, (long long)cs.n_batch_gen, (long long)cs.n_tokens);
	/* a cancelled request */
	memset(batch, 0, sizeof batch);
	t_ok(ntx_ctx_submit(ctx, &rq, &id0, err) == NTX_OK &&
		     ntx_ctx_cancel(ctx, id0, err) == NTX_OK &&
		     batch[id0 & 1].stop_after == NTX_FINISH_STOPPED,
	     "cancel: on_done with finish stopped");
	/* generation after batches drops the scheduler and keeps its counts */
	memset(&got, 0, sizeof got);
	t_ok(ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, &got, NULL, err) == NTX_OK &&
		     got.n == ref.n && !memcmp(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids),
	     "generate after batches: the same tokens");
	st = ntx_ctx_stats(ctx, &cs, err);
	t_ok(st == NTX_OK && cs.n_requests == 3,
	     "stats kept: %lld requests", (long long)cs.n_requests);

	/* an interrupt set between calls stops the next one, then is cleared */
	ntx_ctx_interrupt(ctx);
	memset(&got, 0, sizeof got);
	st = ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, &got, &res, err);
	t_ok(st == NTX_OK && res.finish == NTX_FINISH_INTERRUPTED && got.n < ref.n,
	     "interrupted generation: finish %d, %d tokens: %s", (int)res.finish, got.n,
	     msg(st, err));
	ntx_ctx_interrupt(ctx);
	st = ntx_ctx_submit(ctx, &rq, &id0, err);
	if (st == NTX_OK)
		st = ntx_ctx_step(ctx, &n_active, err);
	t_ok(st == NTX_STATUS_INTERRUPTED && n_active == 1, "interrupted step: %s, %d active",
	     ntx_status_name(st), n_active);
	for (steps = 0; steps < 1000; steps++)
		if (ntx_ctx_step(ctx, &n_active, err) != NTX_OK || n_active == 0)
			break;
	t_ok(n_active == 0 && batch[id0 & 1].n == ref.n &&
		     !memcmp(batch[id0 & 1].ids, ref.ids, (size_t)ref.n * sizeof *ref.ids),
	     "stepping on after the interrupt: the same tokens");

	/* values: the tools' parser of numbers and sizes */
	{
		uint64_t sz = 0;
		int64_t b = 0;
		int iv = 0;
		double d = 0;
		char sb[32];

		t_ok(ntx_arg_size("24G", &sz, err) == NTX_OK && sz == 25769803776ull &&
			     ntx_arg_size("1.5K", &sz, err) == NTX_OK && sz == 1536,
		     "ntx_arg_size: 24G, 1.5K");
		t_ok(ntx_arg_size("12X", &sz, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "12X"),
		     "ntx_arg_size 12X: '%s'", ntx_error_message(err));
		t_ok(ntx_arg_budget("0", &b, err) == NTX_OK && b == 0 &&
			     ntx_arg_budget("2048T", &b, err) == NTX_STATUS_INVALID,
		     "ntx_arg_budget: 0 ok, 2048T over 1 PiB: '%s'", ntx_error_message(err));
		t_ok(ntx_arg_int("0", 1, 1024, &iv, err) == NTX_STATUS_INVALID &&
			     !strcmp(ntx_error_message(err), "0 is out of range [1, 1024]") &&
			     ntx_arg_int("64", 1, 1024, &iv, err) == NTX_OK && iv == 64,
		     "ntx_arg_int: 64 in, 0 out of range");
		t_ok(ntx_arg_double("0.98", -1, 1, &d, err) == NTX_OK && d == 0.98 &&
			     ntx_arg_double("nan", -1, 1, &d, err) == NTX_STATUS_INVALID &&
			     ntx_arg_int(NULL, 0, 1, &iv, err) == NTX_STATUS_INVALID,
		     "ntx_arg_double: 0.98 in, nan out; NULL refused");
		t_ok(!strcmp(ntx_size_format(1536, sb, sizeof sb), "1.50 KiB") &&
			     !strcmp(ntx_size_format(12, sb, sizeof sb), "12 B"),
		     "ntx_size_format: '%s'", ntx_size_format(1536, sb, sizeof sb));
	}

	/* output files: nothing at the destination until the commit; an abort
	 * leaves the old file */
	{
		struct ntx_output *o = NULL;
		char path[64], tmp[96], got_s[16] = "";
		FILE *f;

		snprintf(path, sizeof path, "/tmp/ntx-test-api-out-%ld", (long)getpid());
		snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
		st = ntx_output_open(path, &o, err);
		if (st == NTX_OK)
			st = ntx_output_write(o, "new\n", 4, err);
		t_ok(st == NTX_OK && access(path, F_OK) != 0 && access(tmp, F_OK) == 0,
		     "output: written to the temporary only: %s", msg(st, err));
		st = ntx_output_commit(o, err);
		f = fopen(path, "r");
		if (f) {
			if (!fgets(got_s, sizeof got_s, f))
				got_s[0] = '\0';
			fclose(f);
		}
		t_ok(st == NTX_OK && !strcmp(got_s, "new\n") && access(tmp, F_OK) != 0,
		     "output: renamed into place on commit");
		o = NULL;
		st = ntx_output_open(path, &o, err);
		if (st == NTX_OK)
			st = ntx_output_write(o, "other\n", 6, err);
		ntx_output_abort(o);
		f = fopen(path, "r");
		got_s[0] = '\0';
		if (f) {
			if (!fgets(got_s, sizeof got_s, f))
				got_s[0] = '\0';
			fclose(f);
		}
		t_ok(st == NTX_OK && !strcmp(got_s, "new\n") && access(tmp, F_OK) != 0,
		     "output: an abort keeps the old file and removes the temporary");
		remove(path);
		o = (struct ntx_output *)1;
		t_ok(ntx_output_open("/nonexistent/dir/x.json", &o, err) == NTX_STATUS_IO && !o &&
			     !strcmp(ntx_error_message(err),
				     "/nonexistent/dir/x.json: No such file or directory"),
		     "output in a missing directory: '%s'", ntx_error_message(err));
		ntx_output_abort(NULL);
	}

	/* inspect: the document of the model, from the file and from memory */
	{
		char *j1 = NULL, *j2 = NULL, *sum = NULL, *mem = NULL;
		long sz = 0;
		FILE *f = fopen(MODEL, "rb");

		if (f && !fseek(f, 0, SEEK_END) && (sz = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET)) {
			mem = malloc((size_t)sz);
			if (mem && fread(mem, 1, (size_t)sz, f) != (size_t)sz) {
				free(mem);
				mem = NULL;
			}
		}
		if (f)
			fclose(f);
		st = ntx_inspect(MODEL, NULL, 0, 0, &j1, err);
		t_ok(st == NTX_OK && strstr(j1, "\"format\": \"ntx.inspect\"") &&
			     strstr(j1, info.fingerprint) && j1[strlen(j1) - 1] == '\n',
		     "ntx_inspect: the document (%zu bytes): %s", j1 ? strlen(j1) : 0, msg(st, err));
		st = mem ? ntx_inspect(MODEL, mem, (size_t)sz, 0, &j2, err) : NTX_STATUS_IO;
		t_ok(st == NTX_OK && j1 && !strcmp(j1, j2), "ntx_inspect from memory: the same");
		st = ntx_inspect(MODEL, NULL, 0, NTX_INSPECT_SUMMARY, &sum, err);
		t_ok(st == NTX_OK && sum && !strstr(sum, "\"format\"") && strlen(sum) > 0,
		     "ntx_inspect summary: %zu bytes", sum ? strlen(sum) : 0);
		t_ok(ntx_inspect("no/such.gguf", NULL, 0, 0, &j2, err) ==
			     NTX_STATUS_IO && !j2 &&
			     !strcmp(ntx_error_message(err), "No such file or directory"),
		     "ntx_inspect of a missing file: io, the message without the name: '%s'",
		     ntx_error_message(err));
		t_ok(ntx_inspect("-", "{\"a\": 1}", 8, 0, &j2, err) != NTX_OK && !j2 &&
			     strstr(ntx_error_message(err), "not a GGUF file"),
		     "ntx_inspect of 8 bytes of JSON: %s: '%s'",
		     ntx_status_name(ntx_error_status(err)), ntx_error_message(err));
		t_ok(ntx_inspect(MODEL, NULL, 0, 0x40, &j2, err) == NTX_STATUS_INVALID,
		     "ntx_inspect: unknown flag: '%s'", ntx_error_message(err));
		ntx_free(j1);
		ntx_free(sum);
		free(mem);
	}

	/* calibration: the document, its sets, the checks of its parameters */
	{
		static const char text[] =
			"Once upon a time there was a little girl who lived in a village near "
			"the forest. Whenever she went out, the little girl wore a red riding "
			"cloak, so everyone in the village called her Little Red Riding Hood.";
		struct ntx_calib_params cal;
		int counts[2] = { 1, 2 }, bad[1] = { 0 };
		char *cj = NULL;

		ntx_calib_params_init(&cal);
		t_ok(cal.size == sizeof cal && cal.n_ctx == 512 && !cal.counts,
		     "ntx_calib_params_init: defaults");
		cal.backend = NTX_USE_CPU;
		cal.n_ctx = 16;
		cal.counts = counts;
		cal.n_counts = 2;
		cal.calib_text = text;
		cal.calib_len = strlen(text);
		cal.calib_name = "text";
		cal.eval_text = text;
		cal.eval_len = strlen(text);
		cal.eval_name = "held";
		st = ntx_calibrate(lm, NULL, &cal, &cj, err);
		t_ok(st == NTX_OK && cj && strstr(cj, "\"format\": \"ntx.skip\"") &&
			     strstr(cj, "\"method\": \"calibrated\"") && strstr(cj, "\"kld\"") &&
			     strstr(cj, "\"file\": \"held\"") && cj[strlen(cj) - 1] == '\n',
		     "ntx_calibrate: the ntx.skip document with measured sets: %s", msg(st, err));
		ntx_free(cj);
		cj = (char *)1;
		cal.calib_len = 5;
		t_ok(ntx_calibrate(lm, NULL, &cal, &cj, err) == NTX_STATUS_INVALID && !cj &&
			     strstr(ntx_error_message(err), "text: the calibration text has"),
		     "a calibration text of 5 bytes: '%s'", ntx_error_message(err));
		cal.calib_len = strlen(text);
		cal.counts = bad;
		cal.n_counts = 1;
		t_ok(ntx_calibrate(lm, NULL, &cal, &cj, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "0 is out of range"),
		     "set size 0: '%s'", ntx_error_message(err));
		cal.counts = counts;
		cal.size = 0;
		t_ok(ntx_calibrate(lm, NULL, &cal, &cj, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "size 0"),
		     "calib params size 0: '%s'", ntx_error_message(err));
		t_ok(ntx_calibrate(NULL, NULL, NULL, &cj, err) == NTX_STATUS_INVALID,
		     "ntx_calibrate(NULL lm)");
	}

	/* placements: planned in memory, to JSON, loaded back, a context on it */
	{
		struct ntx_placement_params pp;
		struct ntx_placement_info pi;
		char path[64];
		FILE *f;

		snprintf(path, sizeof path, "/tmp/ntx-test-api-%ld.json", (long)getpid());
		ntx_placement_params_init(&pp);
		pp.vram_budget = 0;
		pp.n_ctx = 128;
		st = ntx_placement_make(lm, &pp, &pl, err);
		t_ok(st == NTX_OK, "placement_make: %s", msg(st, err));
		memset(&pi, 0, sizeof pi);
		pi.size = sizeof pi;
		st = pl ? ntx_placement_info(pl, &pi, err) : NTX_STATUS_INVALID;
		t_ok(st == NTX_OK &&
			     pi.n_layer == info.n_layer && pi.n_ram == info.n_layer &&
			     pi.n_vram == 0 && pi.n_cpu_exec == info.n_layer && pi.n_ctx == 128 &&
			     pi.kv_cache == NTX_KV_CACHE_F16,
		     "placement: %d of %d layers in RAM, computed on the CPU", pi.n_ram,
		     pi.n_layer);
		t_ok(pl && ntx_placement_to_json(pl, &json, err) == NTX_OK && json &&
			     strstr(json, "\"ntx.plan\""),
		     "placement JSON");
		f = fopen(path, "w");
		if (f && json) {
			fputs(json, f);
			fclose(f);
		}
		st = ntx_placement_load(lm, path, &pl2, err);
		ntx_placement_free(pl2);
		pl2 = NULL;
		t_ok(st == NTX_OK, "placement_load: %s", msg(st, err));
		{
			char *mp = NULL;

			st = ntx_placement_model_path(path, &mp, err);
			t_ok(st == NTX_OK && mp && strstr(mp, "tinymodel-q4_k_m.gguf"),
			     "ntx_placement_model_path: '%s': %s", mp ? mp : "", msg(st, err));
			ntx_free(mp);
		}
		remove(path);
		t_ok(ntx_placement_load(lm, "no/plan.json", &pl2, err) == NTX_STATUS_IO &&
			     !pl2 && strstr(ntx_error_message(err), "no/plan.json"),
		     "missing plan: '%s'", ntx_error_message(err));
		pp.ram_budget = 1000;
		t_ok(ntx_placement_make(lm, &pp, &pl2, err) == NTX_STATUS_NOFIT && !pl2,
		     "1000 bytes of RAM: nofit: '%s'", ntx_error_message(err));
		ntx_ctx_params_init(&cp);
		cp.backend = NTX_USE_CPU;
		memset(&got, 0, sizeof got);
		st = ntx_ctx_new(lm, pl, &cp, &ctx2, err);
		if (st == NTX_OK)
			st = ntx_ctx_generate(ctx2, 0, ids, n, &gp, on_token, &got, NULL, err);
		t_ok(st == NTX_OK && got.n == ref.n &&
			     !memcmp(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids) &&
			     ntx_ctx_stats(ctx2, &cs, err) == NTX_OK && cs.n_ctx == 128,
		     "a context on the placement generates the same tokens: %s",
		     msg(st, err));
	}
	if (lm)
		test_plan_calls(lm, err);
	/* 0.3: chat prompts */
	{
		const char *roles[] = { "system", "user" }, *contents[] = { "Be brief.", "hi" };
		const char *name = NULL, *mname = NULL;
		struct ntx_chat_msg im[2] = { { "system", "Be brief." }, { "user", "hi" } };
		char *p = NULL, *ip = NULL;

		st = ntx_chat_template_name("chatml", &name, err);
		t_ok(st == NTX_OK && !strcmp(name, "chatml"), "ntx_chat_template_name(chatml): %s",
		     st ? ntx_error_message(err) : name);
		st = ntx_chat_template_name("{{ '<|start_header_id|>' }}{{ '<|end_header_id|>' }}",
					    &name, err);
		t_ok(st == NTX_OK && !strcmp(name, "llama3"), "a Jinja text recognised as %s",
		     st ? ntx_error_message(err) : name);
		t_ok(ntx_chat_template_name("nonesuch", &name, err) == NTX_STATUS_UNSUPPORTED &&
			     strstr(ntx_error_message(err), "--chat-template NAME"),
		     "an unknown template: unsupported: '%s'", ntx_error_message(err));
		st = ntx_lm_chat_template(lm, &mname, err);
		t_ok(st == NTX_OK || st == NTX_STATUS_UNSUPPORTED,
		     "the model's template: %s", st ? ntx_error_message(err) : mname);
		st = ntx_lm_chat_apply(lm, "llama3", roles, contents, 2, NTX_CHAT_ADD_ASSISTANT, &p, err);
		t_ok(st == NTX_OK && p && !strcmp(p, "<|start_header_id|>system<|end_header_id|>\n\n"
				"Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
				"<|start_header_id|>assistant<|end_header_id|>\n\n"),
		     "ntx_lm_chat_apply(llama3): %s", msg(st, err));
		ntx_free(p);
		p = NULL;
		/* the model's own format (or the fallback) equals the internal module's */
		st = ntx_lm_chat_apply(lm, NULL, roles, contents, 2,
				       NTX_CHAT_ADD_ASSISTANT | NTX_CHAT_ANY_TEMPLATE, &p, err);
		{
			struct ntx_model *m = ntx_model_open(MODEL, 0, &ierr);
			struct ntx_vocab *v = m ? ntx_vocab_load(m->gguf, &ierr) : NULL;

			if (v)
				ntx_chat_format_ex(v, NULL, im, 2, 1, NTX_CHAT_FALLBACK, &ip, &ierr);
			t_ok(st == NTX_OK && ip && !strcmp(p, ip),
			     "the model's format equals ntx_chat_format's: %s", msg(st, err));
			free(ip);
			ntx_vocab_free(v);
			ntx_model_close(m);
		}
		ntx_free(p);
		p = (char *)1;
		t_ok(ntx_lm_chat_apply(lm, "llama3", roles, contents, 2, 0x80, &p, err) ==
			     NTX_STATUS_INVALID && !p,
		     "unknown flags: '%s'", ntx_error_message(err));
		t_ok(ntx_lm_chat_apply(lm, "nonesuch", roles, contents, 2, 0, &p, err) ==
			     NTX_STATUS_UNSUPPORTED && !p,
		     "an unknown template: '%s'", ntx_error_message(err));
	}

	/* 0.3: streaming text */
	{
		struct ntx_detokenizer *dt = NULL;
		int32_t b[3] = { -1, -1, -1 }, nv;
		const unsigned char want[3] = { 0xe2, 0x82, 0xac }; /* U+20AC */
		char out[1024];
		size_t olen = 0, k;
		const char *t;
		int ok = 1, j;

		st = ntx_detokenizer_new(lm, 0, &dt, err);
		t_ok(st == NTX_OK && dt, "ntx_detokenizer_new: %s", msg(st, err));
		for (i = 0; i < ref.n && ok; i++) {
			ok = ntx_detokenizer_push(dt, ref.ids[i], &t, &k, err) == NTX_OK;
			if (ok && olen + k < sizeof out) {
				memcpy(out + olen, t, k);
				olen += k;
			}
		}
		ntx_detokenizer_flush(dt, &t, &k);
		memcpy(out + olen, t, k);
		olen += k;
		memset(&got, 0, sizeof got);
		gp.n_predict = N_GEN;
		ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, &got, NULL, err);
		t_ok(ok && olen == got.len && !memcmp(out, got.text, olen),
		     "the detokenizer's text is the pieces' (%zu bytes)", olen);
		t_ok(ntx_detokenizer_push(dt, -5, &t, &k, err) == NTX_STATUS_INVALID && k == 0,
		     "id -5: '%s'", ntx_error_message(err));
		ntx_detokenizer_free(dt);
		dt = NULL;
		/* a character split across byte tokens comes out whole */
		info.size = sizeof info;
		nv = ntx_lm_info(lm, &info, err) == NTX_OK ? info.n_vocab : 0;
		for (i = 0; i < nv; i++)
			if (ntx_lm_piece(lm, i, &t, &k, NULL) == NTX_OK && k == 1)
				for (j = 0; j < 3; j++)
					if ((unsigned char)t[0] == want[j] && b[j] < 0)
						b[j] = i;
		if (b[0] >= 0 && b[1] >= 0 && b[2] >= 0 &&
		    ntx_detokenizer_new(lm, NTX_DETOKENIZER_REPLACE_INVALID, &dt, err) == NTX_OK) {
			size_t k0 = 9, k1 = 9;

			ntx_detokenizer_push(dt, b[0], &t, &k0, err);
			ntx_detokenizer_push(dt, b[1], &t, &k1, err);
			ntx_detokenizer_push(dt, b[2], &t, &k, err);
			t_ok(k0 == 0 && k1 == 0 && k == 3 && !memcmp(t, want, 3),
			     "E2 82 AC as three tokens: held, held, then U+20AC");
			ntx_detokenizer_push(dt, b[0], &t, &k0, err);
			ntx_detokenizer_flush(dt, &t, &k);
			t_ok(k0 == 0 && k == 3 && !memcmp(t, "\xef\xbf\xbd", 3),
			     "REPLACE_INVALID: a held E2 at the end becomes U+FFFD");
		} else {
			t_ok(0, "byte tokens E2 82 AC in the tiny model (%d %d %d)", b[0], b[1], b[2]);
		}
		ntx_detokenizer_free(dt);
		ntx_detokenizer_free(NULL);
		t_ok(ntx_detokenizer_new(lm, 0x10, &dt, err) == NTX_STATUS_INVALID && !dt,
		     "detokenizer flags 0x10: '%s'", ntx_error_message(err));
	}

	/* 0.3: request options, finish names */
	{
		struct ntx_gen_params q;

		ntx_gen_params_init(&q);
		t_ok(ntx_gen_params_parse(&q, "temp", "0.25", err) == NTX_OK &&
			     q.temperature == 0.25f &&
			     ntx_gen_params_parse(&q, "top-k", "7", err) == NTX_OK && q.top_k == 7 &&
			     ntx_gen_params_parse(&q, "top-p", "0.5", err) == NTX_OK &&
			     q.top_p == 0.5f &&
			     ntx_gen_params_parse(&q, "min-p", "0", err) == NTX_OK && q.min_p == 0 &&
			     ntx_gen_params_parse(&q, "repeat-penalty", "1.5", err) == NTX_OK &&
			     q.repeat_penalty == 1.5f &&
			     ntx_gen_params_parse(&q, "repeat-last-n", "-1", err) == NTX_OK &&
			     q.repeat_last_n == -1 &&
			     ntx_gen_params_parse(&q, "seed", "9223372036854775807", err) == NTX_OK &&
			     q.seed == 9223372036854775807ull && q.n_predict == -1,
		     "ntx_gen_params_parse: each option sets its field, nothing else");
		t_ok(ntx_gen_params_parse(&q, "top-p", "1.5", err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "1.5") && q.top_p == 0.5f,
		     "top-p 1.5: '%s', unchanged", ntx_error_message(err));
		t_ok(ntx_gen_params_parse(&q, "repeat-penalty", "0", err) == NTX_STATUS_INVALID,
		     "repeat-penalty 0: '%s'", ntx_error_message(err));
		t_ok(ntx_gen_params_parse(&q, "warmth", "1", err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "warmth"),
		     "an unknown option: '%s'", ntx_error_message(err));
		t_ok(!strcmp(ntx_finish_name(NTX_FINISH_EOG), "eog") &&
			     !strcmp(ntx_finish_name(NTX_FINISH_LENGTH), "length") &&
			     !strcmp(ntx_finish_name(NTX_FINISH_STOPPED), "stopped") &&
			     !strcmp(ntx_finish_name((enum ntx_finish)99), "unknown"),
		     "ntx_finish_name");
	}

	/* 0.3: speculative decoding with the model drafting for itself */
	{
		struct ntx_spec_params sp;
		struct ntx_ctx_stats cs0;

		t_ok(ntx_lm_check_draft(lm, lm, err) == NTX_OK, "a model can draft for itself");
		cs0.size = sizeof cs0;
		ntx_ctx_stats(ctx, &cs0, err);
		ntx_spec_params_init(&sp);
		sp.draft = lm;
		sp.lookup = 2;
		sp.draft_k = 3;
		st = ntx_ctx_set_spec(ctx, &sp, err);
		t_ok(st == NTX_OK, "ntx_ctx_set_spec(draft, lookup 2, k 3): %s", msg(st, err));
		memset(&got, 0, sizeof got);
		st = ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, &got, NULL, err);
		t_ok(st == NTX_OK && got.n == ref.n &&
			     !memcmp(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids),
		     "speculative generation: the same greedy tokens: %s", msg(st, err));
		memset(batch, 0, sizeof batch);
		st = ntx_ctx_submit(ctx, &rq, &id0, err);
		if (st == NTX_OK)
			st = ntx_ctx_submit(ctx, &rq, &id1, err);
		sp.lookup = 0;
		t_ok(st == NTX_OK && ntx_ctx_set_spec(ctx, &sp, err) == NTX_STATUS_BUSY,
		     "set_spec while requests are active: busy: '%s'", ntx_error_message(err));
		for (steps = 0; st == NTX_OK && steps < 1000; steps++)
			if (ntx_ctx_step(ctx, &n_active, err) != NTX_OK || n_active == 0)
				break;
		t_ok(n_active == 0 && batch[0].n == ref.n && batch[1].n == ref.n &&
			     !memcmp(batch[0].ids, ref.ids, (size_t)ref.n * sizeof *ref.ids) &&
			     !memcmp(batch[1].ids, ref.ids, (size_t)ref.n * sizeof *ref.ids),
		     "speculative batch requests: the same greedy tokens");
		st = ntx_ctx_stats(ctx, &cs, err);
		t_ok(st == NTX_OK && cs.n_drafted > cs0.n_drafted &&
			     cs.n_accepted > cs0.n_accepted && cs.n_accepted <= cs.n_drafted &&
			     cs.n_batch_prompt == cs0.n_batch_prompt + 2 * n,
		     "stats: %lld drafted, %lld accepted, %lld batch prompt tokens",
		     (long long)cs.n_drafted, (long long)cs.n_accepted,
		     (long long)cs.n_batch_prompt);
		sp.lookup = 17;
		t_ok(ntx_ctx_set_spec(ctx, &sp, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "lookup 17"),
		     "lookup 17: '%s'", ntx_error_message(err));
		sp.lookup = 0;
		sp.draft_k = NTX_DRAFT_K_MAX + 1;
		t_ok(ntx_ctx_set_spec(ctx, &sp, err) == NTX_STATUS_INVALID,
		     "draft_k %d: '%s'", NTX_DRAFT_K_MAX + 1, ntx_error_message(err));
		t_ok(ntx_ctx_set_spec(ctx, NULL, err) == NTX_OK, "speculative decoding off");
		memset(&got, 0, sizeof got);
		t_ok(ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, &got, NULL, err) == NTX_OK &&
			     got.n == ref.n && ntx_ctx_stats(ctx, &cs0, err) == NTX_OK &&
			     cs0.n_drafted == cs.n_drafted,
		     "then generation drafts nothing");
	}

	/* 0.3: the KV cache type */
	{
		struct ntx_ctx *c3 = NULL;

		ntx_ctx_params_init(&cp);
		cp.backend = NTX_USE_CPU;
		cp.n_ctx = 64;
		cp.cache_type = (enum ntx_kv_cache)7;
		t_ok(ntx_ctx_new(lm, NULL, &cp, &c3, err) == NTX_STATUS_INVALID && !c3 &&
			     strstr(ntx_error_message(err), "cache_type 7"),
		     "cache_type 7: '%s'", ntx_error_message(err));
		cp.cache_type = NTX_KV_CACHE_F32;
		memset(&got, 0, sizeof got);
		st = ntx_ctx_new(lm, NULL, &cp, &c3, err);
		if (st == NTX_OK)
			st = ntx_ctx_generate(c3, 0, ids, n, &gp, on_token, &got, NULL, err);
		t_ok(st == NTX_OK && got.n == ref.n,
		     "an f32 KV cache generates %d tokens: %s", got.n, msg(st, err));
		ntx_ctx_free(c3);
	}

	/* 0.4: ntx-run's lists */
	{
		int32_t *li = NULL;
		int *ll = NULL, nl = -1;

		t_ok(ntx_arg_ids("1 403,407\n", 1000, &li, &nl, err) == NTX_OK && nl == 3 &&
			     li[0] == 1 && li[1] == 403 && li[2] == 407,
		     "ntx_arg_ids: 3 ids");
		ntx_free(li);
		li = (int32_t *)1;
		t_ok(ntx_arg_ids("1 1001", 1000, &li, &nl, err) == NTX_STATUS_INVALID && !li &&
			     nl == 0 && !strcmp(ntx_error_message(err),
						"token id 1001 is out of range [0, 1000]"),
		     "ntx_arg_ids: 1001 > 1000: '%s'", ntx_error_message(err));
		t_ok(ntx_arg_ids("  ", 10, &li, &nl, err) == NTX_OK && nl == 0 && !li &&
			     ntx_arg_ids("x", 10, &li, &nl, err) == NTX_STATUS_INVALID &&
			     ntx_arg_ids(NULL, 10, &li, &nl, err) == NTX_STATUS_INVALID,
		     "ntx_arg_ids: empty, 'x', NULL");
		t_ok(ntx_arg_layers("5,1-3,2", 8, &ll, &nl, err) == NTX_OK && nl == 4 &&
			     ll[0] == 1 && ll[1] == 2 && ll[2] == 3 && ll[3] == 5,
		     "ntx_arg_layers: 5,1-3,2 -> 1 2 3 5");
		ntx_free(ll);
		ll = (int *)1;
		t_ok(ntx_arg_layers("3-9", 8, &ll, &nl, err) == NTX_STATUS_INVALID && !ll &&
			     !strcmp(ntx_error_message(err), "layer range 3-9 is out of range [0, 7]"),
		     "ntx_arg_layers: 3-9 of 8: '%s'", ntx_error_message(err));
		t_ok(ntx_arg_layers("4-2", 8, &ll, &nl, err) == NTX_STATUS_INVALID &&
			     ntx_arg_layers("1", 0, &ll, &nl, err) == NTX_STATUS_INVALID,
		     "ntx_arg_layers: reversed, no layers");
	}

	/* 0.4: contexts with skipped layers and read modes; perplexity */
	{
		struct ntx_ctx *c4 = NULL;
		struct ntx_perplexity_result pr;
		int32_t pids[200];
		int np = 0, last = 0, skip1[] = { 1 }, bad[] = { 99 };
		uint8_t flags[64] = { 0 };
		double want = 0, want_skip = 0;
		char why[256] = "x";

		t_ok(ntx_gpu_check(-1, why, sizeof why) == 0 && strstr(why, "GPU index -1"),
		     "ntx_gpu_check(-1): '%s'", why);
		buf[0] = '\0';
		for (i = 0; i < 12; i++) /* 12 * 4 words */
			strcat(strcat(buf, PROMPT), i % 3 == 2 ? ". " : ", and ");
		st = ntx_lm_tokenize(lm, buf, strlen(buf), NTX_TOKENIZE_ADD_BOS, pids, 200, &np, err);
		t_ok(st == NTX_OK && np >= 32, "perplexity text: %d tokens", np);
		ntx_ctx_params_init(&cp);
		cp.backend = NTX_USE_CPU;
		cp.n_ctx = 64;
		cp.io = 7;
		t_ok(ntx_ctx_new(lm, NULL, &cp, &c4, err) == NTX_STATUS_INVALID && !c4 &&
			     strstr(ntx_error_message(err), "io 7"),
		     "io 7: '%s'", ntx_error_message(err));
		cp.io = NTX_IO_MODE_MMAP;
		cp.page_cache_only = 1;
		cp.skip = bad;
		cp.n_skip = 1;
		t_ok(ntx_ctx_new(lm, NULL, &cp, &c4, err) == NTX_STATUS_INVALID && !c4 &&
			     strstr(ntx_error_message(err), "skip layer 99"),
		     "skip layer 99: '%s'", ntx_error_message(err));
		cp.skip = NULL;
		cp.n_skip = 0;
		st = ntx_ctx_new(lm, NULL, &cp, &c4, err);
		t_ok(st == NTX_OK && !ntx_ctx_fallback_note(c4), "mmap reads, no copies: %s",
		     msg(st, err));
		pr.size = sizeof pr;
		t_ok(c4 && ntx_ctx_perplexity(c4, pids, 15, 16, NULL, NULL, &pr, err) ==
				   NTX_STATUS_INVALID,
		     "15 tokens, chunks of 16: '%s'", ntx_error_message(err));
		st = c4 ? ntx_ctx_perplexity(c4, pids, 32, 16, count_chunks, &last, &pr, err)
			: NTX_STATUS_INVALID;
		if (internal_ppl(pids, 32, 16, NULL, &want))
			want = -1;
		t_ok(st == NTX_OK && pr.n_chunks == 2 && last == 2 && fabs(pr.ppl - want) <= 1e-9 * want &&
			     pr.ppl > 1,
		     "perplexity %.6f, the engine's %.6f, 2 chunks: %s", pr.ppl, want,
		     msg(st, err));
		ntx_ctx_free(c4);
		c4 = NULL;
		cp.skip = skip1;
		cp.n_skip = 1;
		flags[1] = 1;
		st = ntx_ctx_new(lm, NULL, &cp, &c4, err);
		if (st == NTX_OK)
			st = ntx_ctx_perplexity(c4, pids, 32, 16, NULL, NULL, &pr, err);
		if (internal_ppl(pids, 32, 16, flags, &want_skip))
			want_skip = -1;
		t_ok(st == NTX_OK && fabs(pr.ppl - want_skip) <= 1e-9 * want_skip && want_skip != want,
		     "layer 1 skipped: perplexity %.6f, the engine's %.6f: %s", pr.ppl, want_skip,
		     msg(st, err));
		ntx_ctx_free(c4);
	}

	/* 0.4: a vocabulary-only file tokenizes; contexts refuse it */
	{
		const char *fx = getenv("NTX_FIXTURES");
		struct ntx_lm *vl = NULL, *bad = (struct ntx_lm *)1;
		struct ntx_ctx *vc = NULL;
		char vpath[512];
		int32_t vids[8];
		int vn = 0;

		t_ok(ntx_lm_open_vocab("no/such.gguf", &bad, err) == NTX_STATUS_IO && !bad,
		     "ntx_lm_open_vocab of a missing file: '%s'", ntx_error_message(err));
		snprintf(vpath, sizeof vpath, "%s/vocab/ggml-vocab-llama3.gguf", fx ? fx : "");
		if (!fx || access(vpath, R_OK)) {
			if (t_need_fixtures("ntx_lm_open_vocab of a vocabulary-only file"))
				t_ok(0, "ntx_lm_open_vocab: no %s in the reference set", vpath);
		} else {
			t_ok(ntx_lm_open(vpath, &bad, err) != NTX_OK && !bad &&
				     strstr(ntx_error_message(err), "no tensors"),
			     "ntx_lm_open refuses it: '%s'", ntx_error_message(err));
			st = ntx_lm_open_vocab(vpath, &vl, err);
			if (st == NTX_OK)
				st = ntx_lm_tokenize(vl, "Hello world", 11, NTX_TOKENIZE_ADD_BOS, vids,
						     8, &vn, err);
			t_ok(st == NTX_OK && vn == 3 && vids[0] == 128000 && vids[1] == 9906 &&
				     vids[2] == 1917,
			     "ntx_lm_open_vocab: 'Hello world' is 3 ids: %s", msg(st, err));
			ntx_ctx_params_init(&cp);
			cp.backend = NTX_USE_CPU;
			t_ok(vl && ntx_ctx_new(vl, NULL, &cp, &vc, err) == NTX_STATUS_INVALID && !vc &&
				     strstr(ntx_error_message(err), "no tensors"),
			     "ntx_ctx_new refuses it: '%s'", ntx_error_message(err));
		}
		st = ntx_lm_open_vocab(ntx_lm_info(lm, &info, err) == NTX_OK ? info.path : "",
				       &bad, err);
		t_ok(st == NTX_OK && ntx_lm_is_eog(bad, info.eos), "ntx_lm_open_vocab of a whole model");
		if (st == NTX_OK)
			ntx_lm_close(bad);
		ntx_lm_close(vl);
	}

	/* 0.5: teacher forcing, the logits sink, the speculative counters,
	 * self-speculation, the streaming counters */
	{
		struct ntx_gen_params fp;
		struct ntx_spec_params sp;
		struct ntx_placement_params pp;
		struct ntx_placement *pl5 = NULL;
		struct ntx_ctx *c5 = NULL;
		struct rows rw;
		int32_t force[5];
		int k, skip1[] = { 1 }, bad[] = { 99 }, all[64];

		info.size = sizeof info;
		ntx_lm_info(lm, &info, err);
		for (k = 0; k < 5; k++) /* not what sampling would give */
			force[k] = (int32_t)(100 + 37 * k);
		fp = gp;
		fp.temperature = 0.8f;
		fp.seed = 3;
		fp.n_predict = -1;
		fp.force = force;
		fp.n_force = 5;
		memset(&got, 0, sizeof got);
		res.size = sizeof res;
		st = ntx_ctx_generate(ctx, 0, ids, n, &fp, on_token, &got, &res, err);
		t_ok(st == NTX_OK && got.n == 5 && !memcmp(got.ids, force, sizeof force) &&
			     res.n_gen == 5 && res.finish == NTX_FINISH_LENGTH && res.n_drafted == 0,
		     "teacher forcing: the 5 forced tokens, finish length: %s", msg(st, err));
		force[2] = info.n_vocab;
		t_ok(ntx_ctx_generate(ctx, 0, ids, n, &fp, NULL, NULL, NULL, err) ==
				     NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "forced token id"),
		     "a forced id out of range: '%s'", ntx_error_message(err));
		fp.force = NULL;
		t_ok(ntx_ctx_generate(ctx, 0, ids, n, &fp, NULL, NULL, NULL, err) ==
			     NTX_STATUS_INVALID,
		     "force NULL, n_force 5: '%s'", ntx_error_message(err));
		fp.force = force;
		force[2] = 1;
		rq.gen = &fp;
		t_ok(ntx_ctx_submit(ctx, &rq, NULL, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "ntx_ctx_generate only"),
		     "a batch request with force: '%s'", ntx_error_message(err));
		rq.gen = &gp;

		/* the logits sink: a row per prompt and generated token; greedy
		 * tokens are the argmax of the row before them */
		fp = gp;
		memset(&rw, 0, sizeof rw);
		fp.on_logits = on_rows;
		fp.logits_user = &rw;
		memset(&got, 0, sizeof got);
		st = ntx_ctx_generate(ctx, 0, ids, n, &fp, on_token, &got, &res, err);
		same = st == NTX_OK && got.n == ref.n && rw.n == n + got.n;
		for (k = 0; same && k < got.n; k++)
			same = rw.argmax[n - 1 + k] == got.ids[k] && got.ids[k] == ref.ids[k];
		t_ok(same, "on_logits: %d rows for %d + %d tokens, greedy from them: %s", rw.n, n,
		     got.n, msg(st, err));
		memset(&rw, 0, sizeof rw);
		rw.fail_at = 3;
		st = ntx_ctx_generate(ctx, 0, ids, n, &fp, NULL, NULL, NULL, err);
		t_ok(st == NTX_STATUS_IO && rw.n == 3 &&
			     !strcmp(ntx_error_message(err), "writing logits: No space left on device"),
		     "on_logits fails at row 3: io, '%s'", ntx_error_message(err));

		/* the speculative counters of one generation */
		ntx_spec_params_init(&sp);
		sp.draft = lm;
		sp.lookup = 2;
		sp.draft_k = 3;
		st = spec_generate(ctx, &sp, ids, n, &gp, &got, &res, err);
		t_ok(st == NTX_OK && got.n == ref.n &&
			     !memcmp(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids) &&
			     res.n_drafted > 0 && res.n_accepted <= res.n_drafted &&
			     res.n_lookup_drafted <= res.n_drafted && res.n_target_passes > 0 &&
			     res.n_target_passes < res.n_gen && res.n_draft_passes > 0 &&
			     res.t_verify_ms > 0 && res.t_draft_ms + res.t_verify_ms <= res.t_gen_ms,
		     "speculative result: %lld drafted, %lld accepted, %lld target passes: %s",
		     (long long)res.n_drafted, (long long)res.n_accepted,
		     (long long)res.n_target_passes, msg(st, err));
		t_ok(ntx_ctx_generate(ctx, 0, ids, n, &fp, NULL, NULL, NULL, err) ==
				     NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "speculative"),
		     "on_logits with speculative decoding: '%s'", ntx_error_message(err));

		/* self-speculation */
		ntx_spec_params_init(&sp);
		sp.self_spec = 1;
		t_ok(sp.n_self_skip < 0 && ntx_ctx_set_spec(ctx, &sp, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "placement"),
		     "self_spec without a placement or layers: '%s'", ntx_error_message(err));
		sp.draft = lm;
		t_ok(ntx_ctx_set_spec(ctx, &sp, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "exclude"),
		     "self_spec with a draft model: '%s'", ntx_error_message(err));
		sp.draft = NULL;
		sp.self_skip = bad;
		sp.n_self_skip = 1;
		t_ok(ntx_ctx_set_spec(ctx, &sp, err) == NTX_STATUS_INVALID &&
			     strstr(ntx_error_message(err), "self_skip layer 99"),
		     "self_skip layer 99: '%s'", ntx_error_message(err));
		for (k = 0; k < info.n_layer && k < 64; k++)
			all[k] = k;
		sp.self_skip = all;
		sp.n_self_skip = k;
		t_ok(ntx_ctx_set_spec(ctx, &sp, err) == NTX_STATUS_INVALID &&
			     !strcmp(ntx_error_message(err), "the draft model has no layers"),
		     "self_skip of every layer: '%s'", ntx_error_message(err));
		sp.self_skip = skip1;
		sp.n_self_skip = 1;
		sp.draft_k = 2;
		st = spec_generate(ctx, &sp, ids, n, &gp, &got, &res, err);
		t_ok(st == NTX_OK && got.n == ref.n &&
			     !memcmp(got.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids) &&
			     res.n_drafted > 0 && res.n_draft_passes > 0 && res.n_lookup_drafted == 0,
		     "self-speculation skipping layer 1: the same greedy tokens, %lld drafted: %s",
		     (long long)res.n_drafted, msg(st, err));
		t_ok(ntx_ctx_submit(ctx, &rq, NULL, err) == NTX_STATUS_UNSUPPORTED,
		     "a batch request with self-speculation on: '%s'", ntx_error_message(err));
		st = ntx_ctx_set_spec(ctx, NULL, err);
		memset(&got, 0, sizeof got);
		if (st == NTX_OK)
			st = ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, &got, &res, err);
		t_ok(st == NTX_OK && res.n_drafted == 0 && res.n_target_passes == 0 && got.n == ref.n,
		     "off again: nothing drafted: %s", msg(st, err));
		/* a placement with every layer in RAM: its draft skips them all */
		ntx_placement_params_init(&pp);
		pp.vram_budget = 0;
		pp.n_ctx = 64;
		ntx_ctx_params_init(&cp);
		cp.backend = NTX_USE_CPU;
		st = ntx_placement_make(lm, &pp, &pl5, err);
		if (st == NTX_OK)
			st = ntx_ctx_new(lm, pl5, &cp, &c5, err);
		sp.self_skip = NULL;
		sp.n_self_skip = -1;
		t_ok(st == NTX_OK && ntx_ctx_set_spec(c5, &sp, err) == NTX_STATUS_INVALID &&
			     !strcmp(ntx_error_message(err), "the draft model has no layers"),
		     "self_spec from a placement with no VRAM layers: '%s'", ntx_error_message(err));
		ntx_ctx_free(c5);
		ntx_placement_free(pl5);

		/* streaming counters: the CPU computed with every layer's weights */
		cs.size = sizeof cs;
		st = ntx_ctx_stats(ctx, &cs, err);
		t_ok(st == NTX_OK && cs.bytes_cpu_weights > 0 && cs.bytes_h2d == 0 &&
			     cs.bytes_disk == 0 && cs.t_cpu_ms > 0 && cs.t_gpu_wait_ms == 0,
		     "streaming counters: %llu bytes of weights on the CPU in %.1f ms",
		     (unsigned long long)cs.bytes_cpu_weights, cs.t_cpu_ms);
	}

	ntx_free(json);
	ntx_ctx_free(ctx2);
	ntx_placement_free(pl);
	ntx_ctx_free(ctx);
	ntx_lm_close(lm);
	ntx_error_free(err);
	free(iids);
	return t_done();
}
