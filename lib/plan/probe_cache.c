/* probe_cache.c - the probe cache (probe_cache.h): writing what --probe
 * measured, and reading it back for plans made without --probe. The reader
 * validates the whole document before it changes anything, so a truncated
 * or hand-broken file is refused as a whole with a message that says where
 * (the tools then plan with the defaults and print one warning). */
#include "probe_cache.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "jsonpos.h"
#include "types.h"

#define CACHE_FORMAT "ntx.probe"
#define CACHE_MAX_BYTES (1u << 20) /* a cache is a few hundred bytes */
#define RATE_MAX 1e6               /* GB/s, as the options allow */

/* ---- the machine ---- */

/* The CPU model: x86's "model name", else the first of ARM's fields that
 * name the part; "" when /proc/cpuinfo says none. */
static void cpu_model(char *out, size_t n)
{
	static const char *const keys[] = { "model name", "Model", "Hardware", "CPU part" };
	char line[512], best[512] = "";
	int rank = (int)(sizeof keys / sizeof keys[0]);
	FILE *f = fopen("/proc/cpuinfo", "re");

	out[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':'), *v;
		int i;

		if (!colon)
			continue;
		for (i = 0; i < rank; i++) {
			size_t kl = strlen(keys[i]);

			if (strncmp(line, keys[i], kl) == 0 && (line[kl] == ' ' || line[kl] == '\t' ||
								line[kl] == ':'))
				break;
		}
		if (i >= rank)
			continue;
		for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
			;
		v[strcspn(v, "\n")] = '\0';
		snprintf(best, sizeof best, "%s", v);
		rank = i;
		if (rank == 0)
			break;
	}
	fclose(f);
	snprintf(out, n, "%s", best);
}

void ntx_probe_key_now(struct ntx_probe_key *k, int cpu_cores)
{
	memset(k, 0, sizeof *k);
	if (gethostname(k->host, sizeof k->host - 1) != 0)
		k->host[0] = '\0';
	cpu_model(k->cpu_model, sizeof k->cpu_model);
	k->cpu_cores = cpu_cores;
}

int ntx_probe_cache_path(const struct ntx_tunables *tun, char *path, size_t n)
{
	if (!tun->probe_cache || !tun->cache_dir[0])
		return -1;
	if ((size_t)snprintf(path, n, "%s/ntx/probe.json", tun->cache_dir) >= n)
		return -1;
	return 0;
}

/* ---- writing ---- */

struct wr {
	int ok;
};

static void put(struct wr *w, json_t *obj, const char *key, json_t *v)
{
	if (!v || json_object_set_new(obj, key, v))
		w->ok = 0;
}

static json_t *type_rates(struct wr *w, const double *rate)
{
	json_t *o = json_object();
	int i;

	if (!o) {
		w->ok = 0;
		return NULL;
	}
	for (i = 0; i < NTX_TYPE_COUNT; i++)
		if (rate[i] > 0)
			put(w, o, ntx_type_name((uint32_t)i), json_real(rate[i]));
	return o;
}

char *ntx_probe_cache_to_json(const struct ntx_plan_hw *hw, const struct ntx_probe_key *k,
			      int64_t probed_at, struct ntx_err *err)
{
	struct wr w = { 1 };
	json_t *root = json_object(), *o;
	char *text = NULL, *t;
	size_t n;

	if (!root)
		goto oom;
	put(&w, root, "format", json_string(CACHE_FORMAT));
	put(&w, root, "version", json_integer(1));
	put(&w, root, "host", json_string(k->host));
	put(&w, root, "cpu_model", json_string(k->cpu_model));
	put(&w, root, "cpu_cores", json_integer(k->cpu_cores));
	put(&w, root, "probed_at", json_integer(probed_at));
	o = json_null();
	if (hw->cpu_src == NTX_SRC_PROBE && hw->cpu_batch_src == NTX_SRC_PROBE &&
	    (o = json_object())) {
		put(&w, o, "gbps", json_real(hw->cpu_gbps));
		put(&w, o, "batch_gbps", json_real(hw->cpu_batch_gbps));
		put(&w, o, "type_gbps", type_rates(&w, hw->cpu_type_gbps));
		put(&w, o, "type_batch_gbps", type_rates(&w, hw->cpu_type_batch_gbps));
	}
	put(&w, root, "cpu", o);
	o = json_null();
	if (hw->h2d_src == NTX_SRC_PROBE && hw->gpu_present && (o = json_object())) {
		put(&w, o, "gpu_name", json_string(hw->gpu_name));
		put(&w, o, "gpu_bus_id", json_string(hw->gpu_bus_id));
		put(&w, o, "gbps", json_real(hw->h2d_gbps));
	}
	put(&w, root, "h2d", o);
	o = json_null();
	if (hw->disk_src == NTX_SRC_PROBE && (hw->detected & NTX_HW_DISK) && (o = json_object())) {
		put(&w, o, "device", json_integer((json_int_t)(hw->disk_dev & INT64_MAX)));
		put(&w, o, "gbps", json_real(hw->disk_gbps));
	}
	put(&w, root, "disk", o);
	if (!w.ok)
		goto oom;
	text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(root);
	root = NULL;
	if (!text)
		goto oom;
	n = strlen(text);
	t = realloc(text, n + 2);
	if (!t) {
		free(text);
		goto oom;
	}
	t[n] = '\n';
	t[n + 1] = '\0';
	return t;
oom:
	json_decref(root);
	ntx_err_set(err, NTX_ENOMEM, "out of memory writing the probe cache");
	return NULL;
}

/* ---- reading ---- */

/* A cache as read, before anything is applied. */
struct cache {
	const char *host, *cpu_model;
	int cpu_cores;
	int64_t probed_at;
	int has_cpu, has_h2d, has_disk;
	double cpu, cpu_batch, type[NTX_TYPE_COUNT], type_batch[NTX_TYPE_COUNT];
	const char *gpu_name, *gpu_bus_id;
	double h2d;
	int64_t disk_dev;
	double disk;
};

/* A string member no longer than max - 1 bytes. */
static int str_max(struct ntx_jrd *r, json_t *o, const char *opath, const char *key, size_t max,
		   const char **out)
{
	char kp[NTX_JRD_PATH];

	if (ntx_jrd_str(r, o, opath, key, 0, out))
		return -1;
	if (strlen(*out) >= max) {
		ntx_jrd_path(kp, opath, key);
		return ntx_jrd_error(r, kp, "\"%s\" is longer than %zu bytes", key, max - 1);
	}
	return 0;
}

/* Member key of root: an object (*out), or null (*out NULL). */
static int part(struct ntx_jrd *r, json_t *root, const char *key, json_t **out)
{
	char kp[NTX_JRD_PATH];
	json_t *v = ntx_jrd_member(r, root, "", key, 1, kp);

	*out = NULL;
	if (!v)
		return -1;
	if (json_is_null(v))
		return 0;
	if (ntx_jrd_want(r, v, kp, key, JSON_OBJECT, "an object or null"))
		return -1;
	*out = v;
	return 0;
}

/* {"TYPE": rate, ...} into rate[] (types by ggml name). */
static int read_types(struct ntx_jrd *r, json_t *o, const char *opath, const char *key,
		      double *rate)
{
	char kp[NTX_JRD_PATH];
	const char *name;
	json_t *t, *v;

	if (ntx_jrd_obj(r, o, opath, key, &t, kp))
		return -1;
	json_object_foreach(t, name, v) {
		int ty = ntx_type_from_name(name);

		(void)v;
		if (ty < 0)
			return ntx_jrd_error(r, kp, "unknown tensor type \"%.40s\"", name);
		if (ntx_jrd_dbl(r, t, kp, name, 0, RATE_MAX, 1, &rate[ty]))
			return -1;
	}
	return 0;
}

static int read_cache(struct ntx_jrd *r, json_t *root, struct cache *c)
{
	json_t *o;

	if (ntx_jrd_format(r, root, CACHE_FORMAT) ||
	    str_max(r, root, "", "host", sizeof ((struct ntx_probe_key *)0)->host, &c->host) ||
	    str_max(r, root, "", "cpu_model", sizeof ((struct ntx_probe_key *)0)->cpu_model,
		    &c->cpu_model) ||
	    ntx_jrd_int(r, root, "", "cpu_cores", 1, 1 << 20, &c->cpu_cores) ||
	    ntx_jrd_i64(r, root, "", "probed_at", 0, INT64_MAX, &c->probed_at, NULL))
		return -1;
	if (part(r, root, "cpu", &o))
		return -1;
	if (o) {
		c->has_cpu = 1;
		if (ntx_jrd_dbl(r, o, "cpu", "gbps", 0, RATE_MAX, 1, &c->cpu) ||
		    ntx_jrd_dbl(r, o, "cpu", "batch_gbps", 0, RATE_MAX, 1, &c->cpu_batch) ||
		    read_types(r, o, "cpu", "type_gbps", c->type) ||
		    read_types(r, o, "cpu", "type_batch_gbps", c->type_batch))
			return -1;
	}
	if (part(r, root, "h2d", &o))
		return -1;
	if (o) {
		c->has_h2d = 1;
		if (str_max(r, o, "h2d", "gpu_name", sizeof ((struct ntx_plan_hw *)0)->gpu_name,
			    &c->gpu_name) ||
		    str_max(r, o, "h2d", "gpu_bus_id", sizeof ((struct ntx_plan_hw *)0)->gpu_bus_id,
			    &c->gpu_bus_id) ||
		    ntx_jrd_dbl(r, o, "h2d", "gbps", 0, RATE_MAX, 1, &c->h2d))
			return -1;
	}
	if (part(r, root, "disk", &o))
		return -1;
	if (o) {
		c->has_disk = 1;
		if (ntx_jrd_i64(r, o, "disk", "device", 0, INT64_MAX, &c->disk_dev, NULL) ||
		    ntx_jrd_dbl(r, o, "disk", "gbps", 0, RATE_MAX, 1, &c->disk))
			return -1;
	}
	return 0;
}

/* A rate hw holds as a default (or, for H2D, as the link's estimate). */
static int replaceable(enum ntx_src s)
{
	return s == NTX_SRC_DEFAULT || s == NTX_SRC_LINK;
}

static int apply(const struct cache *c, const struct ntx_probe_key *k, struct ntx_plan_hw *hw)
{
	int n = 0;

	if (strcmp(c->host, k->host) != 0 || strcmp(c->cpu_model, k->cpu_model) != 0)
		return 0;
	if (c->has_cpu && c->cpu_cores == k->cpu_cores && replaceable(hw->cpu_src) &&
	    replaceable(hw->cpu_batch_src)) {
		hw->cpu_gbps = c->cpu;
		hw->cpu_batch_gbps = c->cpu_batch;
		memcpy(hw->cpu_type_gbps, c->type, sizeof c->type);
		memcpy(hw->cpu_type_batch_gbps, c->type_batch, sizeof c->type_batch);
		hw->cpu_src = hw->cpu_batch_src = NTX_SRC_CACHE;
		n += 2;
	}
	if (c->has_h2d && hw->gpu_present && strcmp(c->gpu_name, hw->gpu_name) == 0 &&
	    strcmp(c->gpu_bus_id, hw->gpu_bus_id) == 0 && replaceable(hw->h2d_src)) {
		hw->h2d_gbps = c->h2d;
		hw->h2d_src = NTX_SRC_CACHE;
		n++;
	}
	if (c->has_disk && (hw->detected & NTX_HW_DISK) &&
	    (uint64_t)c->disk_dev == (hw->disk_dev & INT64_MAX) && replaceable(hw->disk_src)) {
		hw->disk_gbps = c->disk;
		hw->disk_src = NTX_SRC_CACHE;
		n++;
	}
	return n;
}

int ntx_probe_cache_apply(const char *text, size_t len, const char *name,
			  const struct ntx_probe_key *k, struct ntx_plan_hw *hw, int64_t *probed_at,
			  struct ntx_err *err)
{
	struct ntx_jrd r = { text, len, name ? name : "<probe cache>", err };
	struct cache c;
	json_t *root;
	int n = -1;

	memset(&c, 0, sizeof c);
	root = ntx_jrd_parse(text, len, r.name, err);
	if (!root)
		return -1;
	if (read_cache(&r, root, &c) == 0) {
		n = apply(&c, k, hw);
		if (probed_at)
			*probed_at = c.probed_at;
	}
	json_decref(root);
	return n;
}

int ntx_probe_cache_load(const char *path, const struct ntx_probe_key *k, struct ntx_plan_hw *hw,
			 int64_t *probed_at, struct ntx_err *err)
{
	struct ntx_err e = { 0, "" };
	uint64_t size = 0;
	char *text;
	ssize_t got;
	size_t n = 0;
	int fd, rc;

	if (access(path, F_OK) != 0 && errno == ENOENT)
		return 0; /* no cache yet */
	fd = ntx_open_regular(path, &size, &e);
	if (fd < 0)
		return ntx_err_set(err, e.code ? e.code : NTX_EIO, "%s: %s", path, e.msg);
	if (size > CACHE_MAX_BYTES) {
		close(fd);
		return ntx_err_set(err, NTX_EFORMAT, "%s: %llu bytes: not a probe cache (at most %u)",
				   path, (unsigned long long)size, CACHE_MAX_BYTES);
	}
	text = malloc((size_t)size + 1);
	if (!text) {
		close(fd);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	while (n < size && (got = read(fd, text + n, (size_t)size - n)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			ntx_err_errno(err, errno, "%s", path);
			close(fd);
			free(text);
			return -1;
		}
		n += (size_t)got;
	}
	close(fd);
	text[n] = '\0';
	rc = ntx_probe_cache_apply(text, n, path, k, hw, probed_at, err);
	free(text);
	return rc;
}

/* mkdir path with mode 0700 unless it exists: 0 or -1 (errno). */
static int make_dir(const char *path)
{
	return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

int ntx_probe_cache_save(const char *path, const struct ntx_plan_hw *hw,
			 const struct ntx_probe_key *k, int64_t probed_at, struct ntx_err *err)
{
	struct ntx_outfile o;
	char dir[4096], *sl;
	char *text;
	int rc;

	if (strlen(path) >= sizeof dir)
		return ntx_err_set(err, NTX_EINVAL, "%s: path too long", path);
	/* the cache directory and its ntx/ (XDG: 0700 when created) */
	strcpy(dir, path);
	sl = strrchr(dir, '/');
	if (sl && sl != dir) {
		char *up;

		*sl = '\0';
		up = strrchr(dir, '/');
		if (up && up != dir) {
			*up = '\0';
			if (make_dir(dir))
				return ntx_err_errno(err, errno, "%s", dir);
			*up = '/';
		}
		if (make_dir(dir))
			return ntx_err_errno(err, errno, "%s", dir);
	}
	text = ntx_probe_cache_to_json(hw, k, probed_at, err);
	if (!text)
		return -1;
	rc = -1;
	if (ntx_outfile_open(&o, path, "w", NULL, err) == 0) {
		if (fputs(text, o.f) == EOF) {
			ntx_err_errno(err, errno ? errno : EIO, "%s", path);
			ntx_outfile_abort(&o);
		} else {
			rc = ntx_outfile_commit(&o, err);
		}
	}
	free(text);
	return rc;
}
