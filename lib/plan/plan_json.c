/* plan_json.c - the plan as JSON ("format": "ntx.plan", "version": 1; spec in
 * doc/plan-json.md): writer, validating reader, and the model check. */
#include "plan.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "jsonpos.h"
#include "parse.h"
#include "plan_int.h"

/* ---- writer ---- */

struct wr {
	int ok;
};

static void put(struct wr *w, json_t *obj, const char *key, json_t *v)
{
	if (!v || json_object_set_new(obj, key, v))
		w->ok = 0;
}

static json_t *jbytes(uint64_t v)
{
	return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v);
}

static json_t *jstr_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static const char *kv_name(enum ntx_kv_type k)
{
	return k == NTX_KV_F32 ? "f32" : "f16";
}

static json_t *hw_json(struct wr *w, const struct ntx_plan_hw *hw)
{
	json_t *o = json_object(), *t = json_object(), *tb = json_object();
	int gpu = (hw->detected & NTX_HW_GPU) != 0, i;

	if (!o || !t || !tb) {
		json_decref(o);
		json_decref(t);
		json_decref(tb);
		w->ok = 0;
		return NULL;
	}
	put(w, o, "gpu_present", gpu ? json_boolean(hw->gpu_present) : json_null());
	put(w, o, "gpu_count", gpu ? json_integer(hw->gpu_count) : json_null());
	put(w, o, "gpu_index", json_integer(hw->gpu_index));
	put(w, o, "gpu_name", gpu && hw->gpu_present ? json_string(hw->gpu_name) : json_null());
	put(w, o, "vram_total_bytes", gpu && hw->gpu_present ? jbytes(hw->vram_total) : json_null());
	put(w, o, "vram_free_bytes", gpu && hw->gpu_present ? jbytes(hw->vram_free) : json_null());
	put(w, o, "gpu_bus_id", hw->gpu_bus_id[0] ? json_string(hw->gpu_bus_id) : json_null());
	put(w, o, "pcie_gts", hw->pcie_gts > 0 ? json_real(hw->pcie_gts) : json_null());
	put(w, o, "pcie_width", hw->pcie_width > 0 ? json_integer(hw->pcie_width) : json_null());
	put(w, o, "ram_available_bytes",
	    hw->detected & NTX_HW_RAM ? jbytes(hw->ram_available) : json_null());
	put(w, o, "cpu_cores", hw->detected & NTX_HW_CPU ? json_integer(hw->cpu_cores) : json_null());
	put(w, o, "disk_free_bytes", hw->detected & NTX_HW_DISK ? jbytes(hw->disk_free) : json_null());
	put(w, o, "probed", json_boolean(hw->probed));
	put(w, o, "h2d_gbps", json_real(hw->h2d_gbps));
	put(w, o, "h2d_source", json_string(ntx_src_name(hw->h2d_src)));
	put(w, o, "disk_gbps", json_real(hw->disk_gbps));
	put(w, o, "disk_source", json_string(ntx_src_name(hw->disk_src)));
	put(w, o, "cpu_gbps", json_real(hw->cpu_gbps));
	put(w, o, "cpu_source", json_string(ntx_src_name(hw->cpu_src)));
	put(w, o, "gpu_gbps", json_real(hw->gpu_gbps));
	put(w, o, "gpu_source", json_string(ntx_src_name(hw->gpu_src)));
	put(w, o, "cpu_batch_gbps", json_real(hw->cpu_batch_gbps));
	put(w, o, "cpu_batch_source", json_string(ntx_src_name(hw->cpu_batch_src)));
	for (i = 0; i < NTX_TYPE_COUNT; i++)
		if (hw->cpu_type_gbps[i] > 0)
			put(w, t, ntx_type_name((uint32_t)i), json_real(hw->cpu_type_gbps[i]));
	put(w, o, "cpu_type_gbps", t);
	for (i = 0; i < NTX_TYPE_COUNT; i++)
		if (hw->cpu_type_batch_gbps[i] > 0)
			put(w, tb, ntx_type_name((uint32_t)i), json_real(hw->cpu_type_batch_gbps[i]));
	put(w, o, "cpu_type_batch_gbps", tb);
	return o;
}

/* "model": the model's identity, hyperparameters and byte counts. */
static void put_model(struct wr *w, json_t *root, const struct ntx_plan_model *pm)
{
	json_t *m = json_object(), *x;
	uint64_t total = 0;
	int l;

	put(w, root, "model", m);
	if (!m)
		return;
	put(w, m, "path", json_string(pm->path ? pm->path : ""));
	put(w, m, "file_size_bytes", jbytes(pm->file_size));
	put(w, m, "fingerprint", json_string(pm->fingerprint));
	put(w, m, "n_layer", json_integer(pm->n_layer));
	put(w, m, "n_embd", json_integer(pm->n_embd));
	put(w, m, "n_ff", json_integer(pm->n_ff));
	put(w, m, "n_head", json_integer(pm->n_head));
	put(w, m, "n_head_kv", json_integer(pm->n_head_kv));
	put(w, m, "head_dim", json_integer(pm->head_dim));
	put(w, m, "n_ctx_train", json_integer(pm->n_ctx_train));
	put(w, m, "n_vocab", json_integer(pm->n_vocab));
	put(w, m, "output_tied", json_boolean(pm->output_tied));
	put(w, m, "tok_embd_bytes", jbytes(pm->tok_embd_bytes));
	put(w, m, "output_bytes", jbytes(pm->output_bytes));
	put(w, m, "other_bytes", jbytes(pm->other_bytes));
	for (l = 0; l < pm->n_layer; l++)
		total = ntx_plan_sat_add(total, pm->layer_bytes[l]);
	put(w, m, "layer_bytes", jbytes(total));
	if (pm->n_expert > 0) {
		put(w, m, "n_expert", json_integer(pm->n_expert));
		put(w, m, "n_expert_used", json_integer(pm->n_expert_used));
	}
	x = json_object();
	put(w, m, "layer_type_bytes", x);
	for (l = 0; x && l < NTX_TYPE_COUNT; l++)
		if (pm->layer_type_bytes[l])
			put(w, x, ntx_type_name((uint32_t)l), jbytes(pm->layer_type_bytes[l]));
}

/* "budgets" and "run": what the plan was asked for. */
static void put_budgets_run(struct wr *w, json_t *root, const struct ntx_plan *p)
{
	json_t *o = json_object();

	put(w, root, "budgets", o);
	if (o) {
		put(w, o, "vram_bytes", jbytes(p->vram_budget));
		put(w, o, "vram_source", json_string(ntx_src_name(p->vram_budget_src)));
		put(w, o, "ram_bytes", jbytes(p->ram_budget));
		put(w, o, "ram_source", json_string(ntx_src_name(p->ram_budget_src)));
		put(w, o, "disk_bytes", jbytes(p->disk_budget));
		put(w, o, "disk_source", json_string(ntx_src_name(p->disk_budget_src)));
	}

	o = json_object();
	put(w, root, "run", o);
	if (o) {
		put(w, o, "n_ctx", json_integer(p->n_ctx));
		put(w, o, "kv_type", json_string(kv_name(p->kv_type)));
		put(w, o, "n_seq", json_integer(p->n_seq));
		put(w, o, "n_ubatch", json_integer(p->n_ubatch));
		put(w, o, "executor", json_string(ntx_policy_name(p->executor)));
		put(w, o, "placement", json_string(p->by_scores ? "scores" : "model_order"));
	}
}

/* "reserves" and "nonlayer": what is held besides the layers. */
static void put_reserves_nonlayer(struct wr *w, json_t *root, const struct ntx_plan *p)
{
	const struct ntx_plan_model *pm = &p->model;
	json_t *o = json_object(), *x;

	put(w, root, "reserves", o);
	if (o) {
		put(w, o, "kv_layer_bytes", jbytes(p->kv_layer_bytes));
		put(w, o, "kv_vram_bytes", jbytes(p->kv_vram_bytes));
		put(w, o, "kv_ram_bytes", jbytes(p->kv_ram_bytes));
		put(w, o, "workspace_bytes", jbytes(p->workspace_bytes));
		put(w, o, "ring_slots", json_integer(p->ring_slots));
		put(w, o, "ring_bytes", jbytes(p->ring_bytes));
		put(w, o, "staging_bytes", jbytes(p->staging_bytes));
		put(w, o, "margin_bytes", jbytes(p->margin_bytes));
	}

	o = json_object();
	put(w, root, "nonlayer", o);
	if (!o)
		return;
	x = json_object();
	put(w, o, "tok_embd", x);
	if (x) {
		put(w, x, "home", json_string(ntx_tier_name(p->tok_embd_home)));
		put(w, x, "bytes", jbytes(pm->tok_embd_bytes));
	}
	x = json_object();
	put(w, o, "output", x);
	if (x) {
		put(w, x, "home", json_string(ntx_tier_name(p->output_home)));
		put(w, x, "exec", json_string(ntx_exec_name(p->output_exec)));
		put(w, x, "bytes", jbytes(pm->output_tied ? pm->tok_embd_bytes : pm->output_bytes));
		put(w, x, "tied", json_boolean(pm->output_tied));
	}
	x = json_object();
	put(w, o, "other", x);
	if (x)
		put(w, x, "bytes", jbytes(pm->other_bytes));
}

/* "layers": each layer's home and executor (null when skipped). */
static void put_layers(struct wr *w, json_t *root, const struct ntx_plan *p)
{
	json_t *ls = json_array();
	int l;

	put(w, root, "layers", ls);
	for (l = 0; ls && l < p->model.n_layer; l++) {
		const struct ntx_plan_layer *L = &p->layers[l];
		json_t *e = json_object();

		if (!e || json_array_append_new(ls, e)) {
			w->ok = 0;
			break;
		}
		put(w, e, "index", json_integer(L->index));
		put(w, e, "home", L->skip ? json_null() : json_string(ntx_tier_name(L->home)));
		put(w, e, "exec", L->skip ? json_null() : json_string(ntx_exec_name(L->exec)));
		put(w, e, "bytes", jbytes(L->bytes));
		put(w, e, "skip", json_boolean(L->skip));
		if (p->model.n_expert > 0 && p->model.expert_bytes)
			put(w, e, "bytes_per_expert", jbytes(p->model.expert_bytes[l]));
		if (L->n_cpu_exp > 0 && p->cpu_exp) {
			char *r = ntx_plan_experts_format(p->cpu_exp + (size_t)l * p->model.n_expert,
							  p->model.n_expert);

			put(w, e, "cpu_experts", r ? json_string(r) : NULL);
			put(w, e, "cpu_hit", json_real(L->cpu_hit));
			free(r);
		}
	}
}

/* "usage", "estimate" and, with a draft, "draft": what the plan predicts. */
static void put_usage_estimate(struct wr *w, json_t *root, const struct ntx_plan *p)
{
	json_t *o = json_object();

	put(w, root, "usage", o);
	if (o) {
		put(w, o, "vram_layers_bytes", jbytes(p->vram_layers_bytes));
		put(w, o, "vram_used_bytes", jbytes(p->vram_used_bytes));
		put(w, o, "ram_layers_bytes", jbytes(p->ram_layers_bytes));
		put(w, o, "ram_used_bytes", jbytes(p->ram_used_bytes));
		put(w, o, "disk_layers_bytes", jbytes(p->disk_layers_bytes));
		put(w, o, "pack_bytes", jbytes(p->pack_bytes));
	}

	o = json_object();
	put(w, root, "estimate", o);
	if (o) {
		put(w, o, "vram_read_bytes", jbytes(p->bytes_vram));
		put(w, o, "h2d_from_ram_bytes", jbytes(p->bytes_h2d_ram));
		put(w, o, "h2d_from_disk_bytes", jbytes(p->bytes_h2d_disk));
		put(w, o, "disk_read_bytes", jbytes(p->bytes_disk));
		put(w, o, "cpu_read_bytes", jbytes(p->bytes_cpu));
		put(w, o, "cpu_from_disk_bytes", jbytes(p->bytes_cpu_disk));
		put(w, o, "resident_ms", json_real(p->t_resident_ms));
		put(w, o, "link_ms", json_real(p->t_link_ms));
		put(w, o, "disk_ms", json_real(p->t_disk_ms));
		put(w, o, "cpu_ms", json_real(p->t_cpu_ms));
		put(w, o, "overhead_ms", json_real(p->t_overhead_ms));
		put(w, o, "total_ms", json_real(p->t_total_ms));
		put(w, o, "pass_tokens", json_integer(p->pass_tokens));
		put(w, o, "pass_1_ms", json_real(p->t_pass1_ms));
		put(w, o, "predicted_tok_per_s", json_real(p->predicted_tok_per_s));
	}
	if (p->draft_path) {
		o = json_object();
		put(w, root, "draft", o);
		if (o) {
			put(w, o, "path", json_string(p->draft_path));
			put(w, o, "vram_bytes", jbytes(p->draft_vram_bytes));
			put(w, o, "k", json_integer(p->n_verify - 1));
			put(w, o, "accept", json_real(p->draft_accept));
			put(w, o, "token_ms", json_real(p->draft_token_ms));
			put(w, o, "predicted_tok_per_s", json_real(p->predicted_spec_tok_per_s));
		}
	}
}

char *ntx_plan_to_json(const struct ntx_plan *p, struct ntx_err *err)
{
	struct wr w = { 1 };
	json_t *root = json_object();
	char *text = NULL;

	if (!root)
		goto oom;
	put(&w, root, "format", json_string("ntx.plan"));
	put(&w, root, "version", json_integer(1));
	put_model(&w, root, &p->model);
	put(&w, root, "hardware", hw_json(&w, &p->hw));
	put_budgets_run(&w, root, p);
	put_reserves_nonlayer(&w, root, p);
	put_layers(&w, root, p);
	put(&w, root, "pack_path", jstr_or_null(p->pack_path));
	put_usage_estimate(&w, root, p);
	if (!w.ok)
		goto oom;
	text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(root);
	if (!text)
		goto oom2;
	{
		size_t n = strlen(text);
		char *t = realloc(text, n + 2);

		if (!t) {
			free(text);
			goto oom2;
		}
		t[n] = '\n';
		t[n + 1] = '\0';
		return t;
	}
oom:
	json_decref(root);
oom2:
	ntx_err_set(err, NTX_ENOMEM, "out of memory writing the plan");
	return NULL;
}

static const char *const src_names[] = { "default", "detected", "override", "probe", "link",
					 "cache" };
_Static_assert(sizeof src_names / sizeof src_names[0] == NTX_SRC_COUNT, "one name per source");
static const char *const tier_names[] = { "vram", "ram", "disk" };
static const char *const exec_names[] = { "gpu", "cpu" };
static const char *const policy_names[] = { "auto", "gpu", "cpu" };
static const char *const kv_names[] = { "f16", "f32" };
static const char *const placement_names[] = { "model_order", "scores" };

static int get_src(struct ntx_jrd *r, json_t *obj, const char *opath, const char *key,
		   enum ntx_src *out)
{
	int v;

	if (ntx_jrd_enum(r, obj, opath, key, src_names, NTX_SRC_COUNT, &v))
		return -1;
	*out = (enum ntx_src)v;
	return 0;
}

/* ---- plan reader ---- */

static int read_model(struct ntx_jrd *r, json_t *root, struct ntx_plan_model *pm)
{
	json_t *m, *tb;
	char kp[NTX_JRD_PATH];
	const char *s;
	int64_t v;
	uint64_t total;
	const char *key;
	json_t *val;

	if (ntx_jrd_obj(r, root, "", "model", &m, kp) || ntx_jrd_str(r, m, "model", "path", 0, &s))
		return -1;
	if (!(pm->path = strdup(s)))
		return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
	if (ntx_jrd_bytes(r, m, "model", "file_size_bytes", &pm->file_size) ||
	    ntx_jrd_str(r, m, "model", "fingerprint", 0, &s) ||
	    ntx_jrd_fingerprint(r, "model.fingerprint", s))
		return -1;
	memcpy(pm->fingerprint, s, 17);
	if (ntx_jrd_int(r, m, "model", "n_layer", 1, 10000, &pm->n_layer) ||
	    ntx_jrd_int(r, m, "model", "n_embd", 1, 1 << 20, &pm->n_embd) ||
	    ntx_jrd_int(r, m, "model", "n_ff", 1, 1 << 22, &pm->n_ff) ||
	    ntx_jrd_int(r, m, "model", "n_head", 1, 1 << 14, &pm->n_head) ||
	    ntx_jrd_int(r, m, "model", "n_head_kv", 1, 1 << 14, &pm->n_head_kv) ||
	    ntx_jrd_int(r, m, "model", "head_dim", 1, 1 << 14, &pm->head_dim) ||
	    ntx_jrd_int(r, m, "model", "n_ctx_train", 1, 1 << 24, &pm->n_ctx_train) ||
	    ntx_jrd_i64(r, m, "model", "n_vocab", 1, INT32_MAX, &v, NULL) ||
	    ntx_jrd_bool(r, m, "model", "output_tied", &pm->output_tied, NULL) ||
	    ntx_jrd_bytes(r, m, "model", "tok_embd_bytes", &pm->tok_embd_bytes) ||
	    ntx_jrd_bytes(r, m, "model", "output_bytes", &pm->output_bytes) ||
	    ntx_jrd_bytes(r, m, "model", "other_bytes", &pm->other_bytes) ||
	    ntx_jrd_bytes(r, m, "model", "layer_bytes", &total) ||
	    ntx_jrd_obj(r, m, "model", "layer_type_bytes", &tb, kp))
		return -1;
	pm->n_vocab = v;
	if (json_object_get(m, "n_expert") &&
	    (ntx_jrd_int(r, m, "model", "n_expert", 1, NTX_PLAN_MAX_EXPERT, &pm->n_expert) ||
	     ntx_jrd_int(r, m, "model", "n_expert_used", 1, pm->n_expert, &pm->n_expert_used)))
		return -1;
	if (pm->output_tied && pm->output_bytes)
		return ntx_jrd_error(r, "model.output_bytes", "\"output_bytes\" must be 0 when the output is tied");
	json_object_foreach(tb, key, val) {
		int t = ntx_type_from_name(key);

		if (t < 0)
			return ntx_jrd_error(r, "model.layer_type_bytes", "unknown tensor type \"%.40s\"", key);
		if (ntx_jrd_bytes(r, tb, "model.layer_type_bytes", key, &pm->layer_type_bytes[t]))
			return -1;
	}
	pm->layer_bytes = calloc((size_t)pm->n_layer, sizeof *pm->layer_bytes);
	if (!pm->layer_bytes)
		return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
	/* the total is checked against the layers once they are read */
	pm->layer_bytes[0] = total;
	return 0;
}

/* The GPU's bus id and PCIe link (written since the link estimate; optional,
 * null when unknown). */
static int read_link(struct ntx_jrd *r, json_t *h, struct ntx_plan_hw *hw)
{
	const char *s = NULL;
	json_t *v;
	int64_t w = 0;
	int isnull;

	if (json_object_get(h, "gpu_bus_id") && ntx_jrd_str(r, h, "hardware", "gpu_bus_id", 1, &s))
		return -1;
	if (s) {
		if (strlen(s) >= sizeof hw->gpu_bus_id)
			return ntx_jrd_error(r, "hardware.gpu_bus_id",
					     "\"gpu_bus_id\" is longer than %zu bytes",
					     sizeof hw->gpu_bus_id - 1);
		snprintf(hw->gpu_bus_id, sizeof hw->gpu_bus_id, "%s", s);
	}
	v = json_object_get(h, "pcie_gts");
	if (v && !json_is_null(v) &&
	    ntx_jrd_dbl(r, h, "hardware", "pcie_gts", 0, 1024, 1, &hw->pcie_gts))
		return -1;
	if (json_object_get(h, "pcie_width") &&
	    ntx_jrd_i64(r, h, "hardware", "pcie_width", 1, 32, &w, &isnull))
		return -1;
	hw->pcie_width = (int)w;
	return 0;
}

static int read_hw(struct ntx_jrd *r, json_t *root, struct ntx_plan_hw *hw)
{
	json_t *h, *t;
	char kp[NTX_JRD_PATH];
	const char *s, *key;
	json_t *val;
	int isnull, b;
	int64_t v;

	memset(hw, 0, sizeof *hw);
	if (ntx_jrd_obj(r, root, "", "hardware", &h, kp))
		return -1;
	if (ntx_jrd_bool(r, h, "hardware", "gpu_present", &b, &isnull))
		return -1;
	if (!isnull) {
		hw->detected |= NTX_HW_GPU;
		hw->gpu_present = b;
	}
	if (ntx_jrd_i64(r, h, "hardware", "gpu_count", 0, 1024, &v, &isnull))
		return -1;
	hw->gpu_count = (int)v;
	if (ntx_jrd_int(r, h, "hardware", "gpu_index", 0, 1023, &hw->gpu_index) ||
	    ntx_jrd_str(r, h, "hardware", "gpu_name", 1, &s))
		return -1;
	if (s)
		snprintf(hw->gpu_name, sizeof hw->gpu_name, "%s", s);
	if (ntx_jrd_bytes_null(r, h, "hardware", "vram_total_bytes", &hw->vram_total, &isnull) ||
	    ntx_jrd_bytes_null(r, h, "hardware", "vram_free_bytes", &hw->vram_free, &isnull) ||
	    read_link(r, h, hw) ||
	    ntx_jrd_bytes_null(r, h, "hardware", "ram_available_bytes", &hw->ram_available, &isnull))
		return -1;
	if (!isnull)
		hw->detected |= NTX_HW_RAM;
	if (ntx_jrd_i64(r, h, "hardware", "cpu_cores", 0, 1 << 20, &v, &isnull))
		return -1;
	hw->cpu_cores = (int)v;
	if (!isnull)
		hw->detected |= NTX_HW_CPU;
	if (ntx_jrd_bytes_null(r, h, "hardware", "disk_free_bytes", &hw->disk_free, &isnull))
		return -1;
	if (!isnull)
		hw->detected |= NTX_HW_DISK;
	if (ntx_jrd_bool(r, h, "hardware", "probed", &hw->probed, NULL) ||
	    ntx_jrd_dbl(r, h, "hardware", "h2d_gbps", 0, 1e6, 1, &hw->h2d_gbps) ||
	    get_src(r, h, "hardware", "h2d_source", &hw->h2d_src) ||
	    ntx_jrd_dbl(r, h, "hardware", "disk_gbps", 0, 1e6, 1, &hw->disk_gbps) ||
	    get_src(r, h, "hardware", "disk_source", &hw->disk_src) ||
	    ntx_jrd_dbl(r, h, "hardware", "cpu_gbps", 0, 1e6, 1, &hw->cpu_gbps) ||
	    get_src(r, h, "hardware", "cpu_source", &hw->cpu_src) ||
	    ntx_jrd_dbl(r, h, "hardware", "gpu_gbps", 0, 1e6, 1, &hw->gpu_gbps) ||
	    get_src(r, h, "hardware", "gpu_source", &hw->gpu_src) ||
	    ntx_jrd_obj(r, h, "hardware", "cpu_type_gbps", &t, kp))
		return -1;
	json_object_foreach(t, key, val) {
		int ty = ntx_type_from_name(key);

		if (ty < 0)
			return ntx_jrd_error(r, "hardware.cpu_type_gbps", "unknown tensor type \"%.40s\"", key);
		if (ntx_jrd_dbl(r, t, "hardware.cpu_type_gbps", key, 0, 1e6, 1, &hw->cpu_type_gbps[ty]))
			return -1;
	}
	/* the batched CPU rate came later: optional, default per core */
	hw->cpu_batch_gbps = NTX_PLAN_CPU_BATCH_GBPS_PER_CORE * (hw->cpu_cores > 0 ? hw->cpu_cores : 1);
	hw->cpu_batch_src = NTX_SRC_DEFAULT;
	if (json_object_get(h, "cpu_batch_gbps") &&
	    (ntx_jrd_dbl(r, h, "hardware", "cpu_batch_gbps", 0, 1e6, 1, &hw->cpu_batch_gbps) ||
	     get_src(r, h, "hardware", "cpu_batch_source", &hw->cpu_batch_src)))
		return -1;
	if (json_object_get(h, "cpu_type_batch_gbps")) {
		if (ntx_jrd_obj(r, h, "hardware", "cpu_type_batch_gbps", &t, kp))
			return -1;
		json_object_foreach(t, key, val) {
			int ty = ntx_type_from_name(key);

			if (ty < 0)
				return ntx_jrd_error(r, "hardware.cpu_type_batch_gbps",
						     "unknown tensor type \"%.40s\"", key);
			if (ntx_jrd_dbl(r, t, "hardware.cpu_type_batch_gbps", key, 0, 1e6, 1,
					&hw->cpu_type_batch_gbps[ty]))
				return -1;
		}
	}
	return 0;
}

/* A layer's "bytes_per_expert" and "cpu_experts" (both optional; MoE models). */
static int read_layer_experts(struct ntx_jrd *r, json_t *e, const char *ep, struct ntx_plan *p,
			      int l)
{
	struct ntx_plan_model *pm = &p->model;
	struct ntx_plan_layer *L = &p->layers[l];
	char kp[NTX_JRD_PATH], why[160];
	const char *s;
	uint64_t b;

	if (json_object_get(e, "bytes_per_expert")) {
		if (pm->n_expert <= 0) {
			ntx_jrd_path(kp, ep, "bytes_per_expert");
			return ntx_jrd_error(r, kp, "\"bytes_per_expert\" needs the model's \"n_expert\"");
		}
		if (ntx_jrd_bytes(r, e, ep, "bytes_per_expert", &b))
			return -1;
		if (!pm->expert_bytes &&
		    !(pm->expert_bytes = calloc((size_t)pm->n_layer, sizeof *pm->expert_bytes)))
			return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
		if (b > L->bytes / (uint64_t)pm->n_expert) {
			ntx_jrd_path(kp, ep, "bytes_per_expert");
			return ntx_jrd_error(r, kp, "%d experts of %" PRIu64 " bytes do not fit in the layer's %" PRIu64 " bytes",
					     pm->n_expert, b, L->bytes);
		}
		pm->expert_bytes[l] = b;
	}
	if (!json_object_get(e, "cpu_experts"))
		return 0;
	ntx_jrd_path(kp, ep, "cpu_experts");
	if (ntx_jrd_str(r, e, ep, "cpu_experts", 0, &s))
		return -1;
	if (pm->n_expert <= 0 || !pm->expert_bytes || !pm->expert_bytes[l])
		return ntx_jrd_error(r, kp, "\"cpu_experts\" needs the model's \"n_expert\" and the layer's \"bytes_per_expert\"");
	if (L->skip)
		return ntx_jrd_error(r, kp, "layer %d is skipped: it has no experts to place", l);
	if (!p->cpu_exp && !(p->cpu_exp = calloc((size_t)pm->n_layer, (size_t)pm->n_expert)))
		return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
	if (ntx_plan_experts_parse(s, pm->n_expert, p->cpu_exp + (size_t)l * pm->n_expert,
				   &L->n_cpu_exp, why, sizeof why))
		return ntx_jrd_error(r, kp, "%s", why);
	L->cpu_hit = ntx_plan_round6((double)L->n_cpu_exp / pm->n_expert);
	if (json_object_get(e, "cpu_hit") &&
	    ntx_jrd_dbl(r, e, ep, "cpu_hit", 0, 1, 0, &L->cpu_hit))
		return -1;
	return 0;
}

static int read_layers(struct ntx_jrd *r, json_t *root, struct ntx_plan *p, uint64_t total)
{
	json_t *ls;
	char kp[NTX_JRD_PATH], ep[64];
	int *seen, n = p->model.n_layer, i, any_disk = 0;
	uint64_t sum = 0;

	ls = ntx_jrd_member(r, root, "", "layers", 1, kp);
	if (!ls || ntx_jrd_want(r, ls, "layers", "layers", JSON_ARRAY, "an array"))
		return -1;
	if ((int)json_array_size(ls) != n) {
		if (json_array_size(ls) > (size_t)n)
			return ntx_jrd_error(r, "layers", "%zu layers listed but the model has %d",
				    json_array_size(ls), n);
	}
	seen = calloc((size_t)n, sizeof *seen);
	if (!seen)
		return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
	for (i = 0; i < (int)json_array_size(ls); i++) {
		json_t *e = json_array_get(ls, (size_t)i);
		struct ntx_plan_layer *L;
		int idx, skip, hn, en, v;
		uint64_t b;
		json_t *hv, *xv;

		snprintf(ep, sizeof ep, "layers[%d]", i);
		if (!json_is_object(e)) {
			ntx_jrd_error(r, ep, "expected an object for layers[%d] (found %s)", i, ntx_json_type_name(e));
			goto fail;
		}
		if (ntx_jrd_int(r, e, ep, "index", INT32_MIN, INT32_MAX, &idx))
			goto fail;
		if (idx < 0 || idx >= n) {
			ntx_jrd_path(kp, ep, "index");
			ntx_jrd_error(r, kp, "layer index %d is out of range [0, %d]", idx, n - 1);
			goto fail;
		}
		if (seen[idx]) {
			ntx_jrd_path(kp, ep, "index");
			ntx_jrd_error(r, kp, "duplicate layer %d (also layers[%d])", idx, seen[idx] - 1);
			goto fail;
		}
		seen[idx] = i + 1;
		L = &p->layers[idx];
		L->index = idx;
		if (ntx_jrd_bytes(r, e, ep, "bytes", &b) || ntx_jrd_bool(r, e, ep, "skip", &skip, NULL))
			goto fail;
		L->bytes = b;
		L->skip = skip;
		p->model.layer_bytes[idx] = b;
		sum += b;
		if (read_layer_experts(r, e, ep, p, idx))
			goto fail;
		hv = ntx_jrd_member(r, e, ep, "home", 1, kp);
		xv = hv ? ntx_jrd_member(r, e, ep, "exec", 1, kp) : NULL;
		if (!hv || !xv)
			goto fail;
		hn = json_is_null(hv);
		en = json_is_null(xv);
		if (skip) {
			if (!hn || !en) {
				ntx_jrd_path(kp, ep, hn ? "exec" : "home");
				ntx_jrd_error(r, kp, "layer %d is skipped: \"home\" and \"exec\" must be null", idx);
				goto fail;
			}
			L->home = NTX_TIER_RAM;
			L->exec = NTX_EXEC_CPU;
			continue;
		}
		if (ntx_jrd_enum(r, e, ep, "home", tier_names, 3, &v))
			goto fail;
		L->home = (enum ntx_tier)v;
		if (ntx_jrd_enum(r, e, ep, "exec", exec_names, 2, &v))
			goto fail;
		L->exec = (enum ntx_exec)v;
		if (L->home == NTX_TIER_VRAM && L->exec != NTX_EXEC_GPU) {
			ntx_jrd_path(kp, ep, "exec");
			ntx_jrd_error(r, kp, "layer %d has home \"vram\", which needs exec \"gpu\"", idx);
			goto fail;
		}
		any_disk |= L->home == NTX_TIER_DISK;
	}
	for (i = 0; i < n; i++) {
		if (!seen[i]) {
			ntx_jrd_error(r, "layers", "layer %d is missing (the model has %d layers)", i, n);
			goto fail;
		}
	}
	free(seen);
	if (sum != total)
		return ntx_jrd_error(r, "model.layer_bytes",
			    "\"layer_bytes\" = %" PRIu64 " but the layers add up to %" PRIu64, total, sum);
	if (any_disk && !p->pack_path)
		return ntx_jrd_error(r, "pack_path", "\"pack_path\" is required: some layers are on disk");
	return 0;
fail:
	free(seen);
	return -1;
}

/* Position in the "layers" array of the entry for layer l. */
static int seen_pos(json_t *root, int l)
{
	json_t *ls = json_object_get(root, "layers"), *e;
	size_t i;

	json_array_foreach(ls, i, e) {
		json_t *x = json_object_get(e, "index");

		if (json_is_integer(x) && json_integer_value(x) == l)
			return (int)i;
	}
	return l;
}

/* "budgets" and "run". */
static int read_budgets_run(struct ntx_jrd *r, json_t *root, struct ntx_plan *p)
{
	json_t *o;
	char kp[NTX_JRD_PATH];
	int v;

	if (ntx_jrd_obj(r, root, "", "budgets", &o, kp) ||
	    ntx_jrd_bytes(r, o, "budgets", "vram_bytes", &p->vram_budget) ||
	    get_src(r, o, "budgets", "vram_source", &p->vram_budget_src) ||
	    ntx_jrd_bytes(r, o, "budgets", "ram_bytes", &p->ram_budget) ||
	    get_src(r, o, "budgets", "ram_source", &p->ram_budget_src) ||
	    ntx_jrd_bytes(r, o, "budgets", "disk_bytes", &p->disk_budget) ||
	    get_src(r, o, "budgets", "disk_source", &p->disk_budget_src))
		return -1;

	if (ntx_jrd_obj(r, root, "", "run", &o, kp) ||
	    ntx_jrd_int(r, o, "run", "n_ctx", 1, 1 << 24, &p->n_ctx) ||
	    ntx_jrd_enum(r, o, "run", "kv_type", kv_names, 2, &v))
		return -1;
	p->kv_type = (enum ntx_kv_type)v;
	if (ntx_jrd_int(r, o, "run", "n_seq", 1, 4096, &p->n_seq) ||
	    ntx_jrd_int(r, o, "run", "n_ubatch", 1, 1 << 16, &p->n_ubatch) ||
	    ntx_jrd_enum(r, o, "run", "executor", policy_names, 3, &p->executor) ||
	    ntx_jrd_enum(r, o, "run", "placement", placement_names, 2, &p->by_scores))
		return -1;
	return 0;
}

/* "reserves": validated here, recomputed from the layers later; *ring: the
 * ring slots (0 or at least 2), p->margin_bytes. */
static int read_reserves(struct ntx_jrd *r, json_t *root, struct ntx_plan *p, int *ring)
{
	json_t *o;
	char kp[NTX_JRD_PATH];
	uint64_t u;

	if (ntx_jrd_obj(r, root, "", "reserves", &o, kp) ||
	    ntx_jrd_bytes(r, o, "reserves", "kv_layer_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "reserves", "kv_vram_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "reserves", "kv_ram_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "reserves", "workspace_bytes", &u) ||
	    ntx_jrd_int(r, o, "reserves", "ring_slots", 0, 64, ring) ||
	    ntx_jrd_bytes(r, o, "reserves", "ring_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "reserves", "staging_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "reserves", "margin_bytes", &p->margin_bytes))
		return -1;
	if (*ring == 1)
		return ntx_jrd_error(r, "reserves.ring_slots", "\"ring_slots\" must be 0 or at least 2");
	return 0;
}

/* "nonlayer": tok_embd in RAM, the output's home and executor, and bytes
 * that match "model". */
static int read_nonlayer(struct ntx_jrd *r, json_t *root, struct ntx_plan *p)
{
	json_t *nl, *x;
	char kp[NTX_JRD_PATH];
	uint64_t tb, ob, xb;
	int v;

	if (ntx_jrd_obj(r, root, "", "nonlayer", &nl, kp) ||
	    ntx_jrd_obj(r, nl, "nonlayer", "tok_embd", &x, kp) ||
	    ntx_jrd_enum(r, x, "nonlayer.tok_embd", "home", tier_names, 3, &v) ||
	    ntx_jrd_bytes(r, x, "nonlayer.tok_embd", "bytes", &tb))
		return -1;
	p->tok_embd_home = (enum ntx_tier)v;
	if (p->tok_embd_home != NTX_TIER_RAM)
		return ntx_jrd_error(r, "nonlayer.tok_embd.home",
				     "\"home\" of tok_embd must be \"ram\"");
	if (ntx_jrd_obj(r, nl, "nonlayer", "output", &x, kp) ||
	    ntx_jrd_enum(r, x, "nonlayer.output", "home", tier_names, 2, &v))
		return -1;
	p->output_home = (enum ntx_tier)v;
	if (ntx_jrd_enum(r, x, "nonlayer.output", "exec", exec_names, 2, &v))
		return -1;
	p->output_exec = (enum ntx_exec)v;
	if ((p->output_home == NTX_TIER_VRAM) != (p->output_exec == NTX_EXEC_GPU))
		return ntx_jrd_error(r, "nonlayer.output.exec", "output: home \"%s\" needs exec \"%s\"",
				     ntx_tier_name(p->output_home),
				     p->output_home == NTX_TIER_VRAM ? "gpu" : "cpu");
	if (ntx_jrd_bytes(r, x, "nonlayer.output", "bytes", &ob) ||
	    ntx_jrd_bool(r, x, "nonlayer.output", "tied", &v, NULL) ||
	    ntx_jrd_obj(r, nl, "nonlayer", "other", &x, kp) ||
	    ntx_jrd_bytes(r, x, "nonlayer.other", "bytes", &xb))
		return -1;
	if (tb != p->model.tok_embd_bytes || xb != p->model.other_bytes || v != p->model.output_tied ||
	    ob != (p->model.output_tied ? p->model.tok_embd_bytes : p->model.output_bytes))
		return ntx_jrd_error(r, "nonlayer",
				     "\"nonlayer\" does not match \"model\" (bytes or tied flag)");
	return 0;
}

/* "usage" and "estimate": validated only (recomputed by the accounting). */
static int read_usage_estimate(struct ntx_jrd *r, json_t *root)
{
	static const char *const tkeys[] = { "resident_ms", "link_ms", "disk_ms", "cpu_ms",
					     "overhead_ms", "total_ms", "predicted_tok_per_s" };
	static const char *const bkeys[] = { "vram_read_bytes", "h2d_from_ram_bytes",
					     "h2d_from_disk_bytes", "disk_read_bytes",
					     "cpu_read_bytes", "cpu_from_disk_bytes" };
	json_t *o;
	char kp[NTX_JRD_PATH];
	uint64_t u;
	int64_t n;
	double d;
	size_t i;

	if (ntx_jrd_obj(r, root, "", "usage", &o, kp) ||
	    ntx_jrd_bytes(r, o, "usage", "vram_layers_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "usage", "vram_used_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "usage", "ram_layers_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "usage", "ram_used_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "usage", "disk_layers_bytes", &u) ||
	    ntx_jrd_bytes(r, o, "usage", "pack_bytes", &u))
		return -1;
	if (ntx_jrd_obj(r, root, "", "estimate", &o, kp))
		return -1;
	for (i = 0; i < sizeof bkeys / sizeof bkeys[0]; i++)
		if (ntx_jrd_bytes(r, o, "estimate", bkeys[i], &u))
			return -1;
	for (i = 0; i < sizeof tkeys / sizeof tkeys[0]; i++)
		if (ntx_jrd_dbl(r, o, "estimate", tkeys[i], 0, 1e30, 0, &d))
			return -1;
	/* written since the estimate has both passes (optional) */
	if ((json_object_get(o, "pass_tokens") &&
	     ntx_jrd_i64(r, o, "estimate", "pass_tokens", 1, 1 << 20, &n, NULL)) ||
	    (json_object_get(o, "pass_1_ms") &&
	     ntx_jrd_dbl(r, o, "estimate", "pass_1_ms", 0, 1e30, 0, &d)))
		return -1;
	return 0;
}

/* An optional "draft" (ntx-plan --draft): its VRAM and verification width
 * enter the accounting. */
static int read_draft(struct ntx_jrd *r, json_t *root, struct ntx_plan *p)
{
	json_t *o;
	char kp[NTX_JRD_PATH];
	const char *dp;
	int k;

	p->n_verify = 1;
	if (!json_object_get(root, "draft"))
		return 0;
	if (ntx_jrd_obj(r, root, "", "draft", &o, kp) ||
	    ntx_jrd_str(r, o, "draft", "path", 0, &dp) ||
	    ntx_jrd_bytes(r, o, "draft", "vram_bytes", &p->draft_vram_bytes) ||
	    ntx_jrd_int(r, o, "draft", "k", 1, 64, &k) ||
	    ntx_jrd_dbl(r, o, "draft", "accept", 0, 1, 1, &p->draft_accept) ||
	    ntx_jrd_dbl(r, o, "draft", "token_ms", 0, 1e9, 0, &p->draft_token_ms))
		return -1;
	p->draft_path = strdup(dp);
	if (!p->draft_path)
		return ntx_err_set(r->err, NTX_ENOMEM, "out of memory");
	p->n_verify = k + 1;
	return 0;
}

/* With a VRAM budget of 0, no active layer may be executed on the GPU. */
static int check_no_gpu_layers(struct ntx_jrd *r, json_t *root, const struct ntx_plan *p)
{
	char kp[NTX_JRD_PATH];
	int l;

	if (p->vram_budget != 0)
		return 0;
	for (l = 0; l < p->model.n_layer; l++)
		if (!p->layers[l].skip && p->layers[l].exec == NTX_EXEC_GPU) {
			snprintf(kp, sizeof kp, "layers[%d].exec", seen_pos(root, l));
			return ntx_jrd_error(r, kp,
					     "layer %d is executed on the GPU but the VRAM budget is 0", l);
		}
	return 0;
}

struct ntx_plan *ntx_plan_from_json(const char *text, size_t len, const char *name,
				    struct ntx_err *err)
{
	struct ntx_jrd r = { text, len, name ? name : "<plan>", err };
	struct ntx_plan *p = calloc(1, sizeof *p);
	json_t *root = NULL;
	const char *s;
	uint64_t total;
	int ring;

	if (!p) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	root = ntx_jrd_parse(text, len, r.name, err);
	if (!root || ntx_jrd_format(&r, root, "ntx.plan") || read_model(&r, root, &p->model))
		goto fail;
	total = p->model.layer_bytes[0];
	p->model.layer_bytes[0] = 0;
	if (read_hw(&r, root, &p->hw) || read_budgets_run(&r, root, p) ||
	    read_reserves(&r, root, p, &ring) || read_nonlayer(&r, root, p))
		goto fail;

	if (ntx_jrd_str(&r, root, "", "pack_path", 1, &s))
		goto fail;
	if (s && !*s) {
		ntx_jrd_error(&r, "pack_path", "\"pack_path\" must not be empty (use null)");
		goto fail;
	}
	if (s && !(p->pack_path = strdup(s))) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	p->layers = calloc((size_t)p->model.n_layer, sizeof *p->layers);
	if (!p->layers) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	if (read_layers(&r, root, p, total) || read_usage_estimate(&r, root) ||
	    read_draft(&r, root, p) || check_no_gpu_layers(&r, root, p))
		goto fail;
	if (ntx_plan_account(p, ring ? ring : NTX_PLAN_DEFAULT_RING_SLOTS, err)) {
		char msg[NTX_ERR_MAX];

		memcpy(msg, err->msg, sizeof msg);
		ntx_jsonpos_error(err, err->code, text, len, r.name, "layers", "%s", msg);
		goto fail;
	}
	json_decref(root);
	return p;
fail:
	json_decref(root);
	ntx_plan_free(p);
	return NULL;
}

/* ---- paths in a plan file ---- */

static int is_relative(const char *s)
{
	return s && s[0] && s[0] != '/' && strcmp(s, "-") != 0;
}

/* *s = dir/(*s) for a relative *s. With keep_existing, a path that exists
 * as given while dir/(*s) does not stays as given (a plan written to
 * another directory through stdout, by an older ntx-plan or a script).
 * Returns 0 or -1 (out of memory). */
static int prepend_dir(char **s, const char *dir, size_t dlen, int keep_existing,
		       struct ntx_err *err)
{
	char *r;

	if (!is_relative(*s))
		return 0;
	r = malloc(dlen + strlen(*s) + 2);
	if (!r)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	memcpy(r, dir, dlen);
	r[dlen] = '/';
	strcpy(r + dlen + 1, *s);
	if (keep_existing && access(r, F_OK) != 0 && access(*s, F_OK) == 0) {
		free(r);
		return 0;
	}
	free(*s);
	*s = r;
	return 0;
}

struct ntx_plan *ntx_plan_load(const char *path, struct ntx_err *err)
{
	size_t len;
	char *text = ntx_read_text_file(path, &len, err);
	struct ntx_plan *p;
	const char *sl;

	if (!text)
		return NULL;
	p = ntx_plan_from_json(text, len, strcmp(path, "-") == 0 ? "<stdin>" : path, err);
	free(text);
	/* relative paths are relative to the plan file's directory, so that
	 * a plan works from anywhere */
	sl = strrchr(path, '/');
	if (p && sl &&
	    (prepend_dir(&p->model.path, path, sl > path ? (size_t)(sl - path) : 1, 1, err) ||
	     prepend_dir(&p->pack_path, path, sl > path ? (size_t)(sl - path) : 1, 1, err))) {
		ntx_plan_free(p);
		return NULL;
	}
	return p;
}

int ntx_plan_rebase(struct ntx_plan *p, const char *out_path, struct ntx_err *err)
{
	char cwd[4096];

	if (!out_path || !strcmp(out_path, "-") || !strchr(out_path, '/'))
		return 0; /* stdout or the current directory: paths stay as given */
	if (!is_relative(p->model.path) && !is_relative(p->pack_path))
		return 0;
	if (!getcwd(cwd, sizeof cwd))
		return ntx_err_errno(err, errno, "current directory");
	if (prepend_dir(&p->model.path, cwd, strlen(cwd), 0, err) ||
	    prepend_dir(&p->pack_path, cwd, strlen(cwd), 0, err))
		return -1;
	return 0;
}

const char *ntx_plan_model_file(const struct ntx_plan *p, struct ntx_err *err)
{
	const char *s = p->model.path;

	if (!s || !s[0] || !strcmp(s, "-")) {
		ntx_err_set(err, NTX_EINVAL,
			    "the plan names no model file (%s): give the model with -m MODEL.gguf",
			    s && s[0] ? "it was planned from a GGUF on standard input" : "empty path");
		return NULL;
	}
	return s;
}

int ntx_plan_check_model(const struct ntx_plan *p, const struct ntx_model *m,
			 struct ntx_err *err)
{
	const struct ntx_plan_model *pm = &p->model;
	const char *path = m->gguf && m->gguf->path ? m->gguf->path : "the model";
	int l;

	if (strcmp(pm->fingerprint, m->fingerprint_hex) != 0)
		return ntx_err_set(err, NTX_EMISMATCH,
				   "the plan was made for another model: fingerprint %s (%s), but %s has %s",
				   pm->fingerprint, pm->path ? pm->path : "?", path,
				   m->fingerprint_hex);
	if (pm->n_layer != m->cfg.n_layer)
		return ntx_err_set(err, NTX_EMISMATCH,
				   "the plan has %d layers but %s has %d", pm->n_layer, path,
				   m->cfg.n_layer);
	if (!m->layers)
		return ntx_err_set(err, NTX_EMISMATCH, "%s has no layer tensors", path);
	for (l = 0; l < pm->n_layer; l++)
		if (pm->layer_bytes[l] != m->layers[l].bytes)
			return ntx_err_set(err, NTX_EMISMATCH,
					   "layer %d has %" PRIu64 " bytes in the plan but %" PRIu64 " in %s",
					   l, pm->layer_bytes[l], m->layers[l].bytes, path);
	if (pm->file_size != m->gguf->file_size)
		return ntx_err_set(err, NTX_EMISMATCH,
				   "the plan's model has %" PRIu64 " bytes but %s has %" PRIu64,
				   pm->file_size, path, m->gguf->file_size);
	return 0;
}

/* ---- expert lists ---- */

int ntx_plan_experts_parse(const char *s, int n, uint8_t *flags, int *count, char *why,
			   size_t why_len)
{
	struct ntx_err e = { 0, "" };
	int *v = NULL, m = 0, i, parsed;
	char *canon = NULL;

	memset(flags, 0, (size_t)n);
	*count = 0;
	/* the layer lists' syntax (parse.h), in the one form the writer uses */
	parsed = *s && ntx_parse_range_list(s, n, &v, &m, &e) == 0;
	for (i = 0; parsed && i < m; i++)
		flags[v[i]] = 1;
	free(v);
	if (parsed && (canon = ntx_plan_experts_format(flags, n)) && strcmp(canon, s) == 0) {
		free(canon);
		*count = m;
		return 0;
	}
	snprintf(why, why_len,
		 "\"%.40s\" is not a list of experts that goes up and stays below %d, as in \"0-3,8,10-127\"%s%s%s",
		 s, n, canon ? " (write \"" : "", canon ? canon : "", canon ? "\")" : "");
	free(canon);
	memset(flags, 0, (size_t)n);
	return -1;
}

char *ntx_plan_experts_format(const uint8_t *flags, int n)
{
	char *r = malloc((size_t)n * 12 + 1), *o = r;
	int x = 0;

	if (!r)
		return NULL;
	*o = 0;
	while (x < n) {
		int a;

		if (!flags[x]) {
			x++;
			continue;
		}
		a = x;
		while (x < n && flags[x])
			x++;
		o += sprintf(o, o == r ? "%d" : ",%d", a);
		if (x - 1 > a)
			o += sprintf(o, "-%d", x - 1);
	}
	return r;
}
