/* test_probe.c - what the planner knows of a machine without --probe: the
 * PCIe link estimate (sysfs strings, a fake sysfs tree, the H2D rate it
 * gives and the 70B predictions that follow: issue #28) and the probe cache
 * (document, matching, corrupt files, save and load). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan.h"
#include "plan70b.h"
#include "probe_cache.h"
#include "t.h"
#include "types.h"

#define GiB (1ull << 30)

/* ---- sysfs strings ---- */

static void test_link_strings(void)
{
	static const struct {
		const char *speed, *width;
		double want; /* GB/s; 0: not known */
	} c[] = {
		{ "32.0 GT/s PCIe", "16", 55.45 },   /* Gen5 x16: 63.0 raw x 0.88 */
		{ "32.0 GT/s PCIe\n", "16\n", 55.45 },
		{ "16.0 GT/s PCIe", "16", 27.72 },   /* Gen4 x16: 31.5 raw */
		{ "8.0 GT/s", "8", 6.93 },           /* Gen3 x8, an older kernel's spelling */
		{ "8 GT/s PCIe", "x4", 3.47 },
		{ "5.0 GT/s PCIe", "16", 7.04 },     /* Gen2: 8b/10b */
		{ "2.5 GT/s PCIe", "1", 0.22 },
		{ "64.0 GT/s PCIe", "16", 112.64 },  /* Gen6: FLITs, taken as ~1 */
		{ "Unknown", "16", 0 },
		{ "Unknown speed", "16", 0 },
		{ "32.0 GT/s PCIe", "0", 0 },
		{ "32.0 GT/s PCIe", "255", 0 },
		{ "32.0 GT/s PCIe", "sixteen", 0 },
		{ "32.0 GT/s PCIe", "16x", 0 },
		{ "", "", 0 },
		{ "GT/s", "16", 0 },
		{ "-8.0 GT/s", "16", 0 },
		{ "nan GT/s", "16", 0 },
		{ "1e9 GT/s", "16", 0 },
		{ "32.0 MT/s", "16", 0 },
	};
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		double g = ntx_pcie_link_gbps(c[i].speed, c[i].width);

		t_ok(c[i].want ? fabs(g - c[i].want) < 0.01 : g == 0,
		     "link \"%.*s\" x \"%.*s\"%s: %.2f GB/s (want %.2f)",
		     (int)strcspn(c[i].speed, "\n"), c[i].speed, (int)strcspn(c[i].width, "\n"),
		     c[i].width, strchr(c[i].speed, '\n') ? " (with newlines)" : "", g, c[i].want);
	}
	t_ok(ntx_pcie_gts(NULL) == 0 && ntx_pcie_width(NULL) == 0 && ntx_pcie_gbps(32, 0) == 0 &&
		     ntx_pcie_gbps(0, 16) == 0,
	     "NULL strings and zeros: not known");
}

/* ---- a fake sysfs tree ---- */

static int put_file(const char *dir, const char *name, const char *text)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static int mkdirs(const char *path)
{
	char buf[4096], *s;

	snprintf(buf, sizeof buf, "%s", path);
	for (s = buf + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			if (mkdir(buf, 0700) && errno != EEXIST)
				return -1;
			*s = '/';
		}
	return mkdir(buf, 0700) && errno != EEXIST ? -1 : 0;
}

/* A PCI function at ROOT/devices/PATH with a link (speed NULL: no link
 * files), linked from ROOT/bus/pci/devices/ID. */
static int fake_fn(const char *root, const char *path, const char *speed, const char *width)
{
	char dir[4096], link[4096], target[4096];
	const char *id = strrchr(path, '/');

	snprintf(dir, sizeof dir, "%s/devices/%s", root, path);
	if (mkdirs(dir))
		return -1;
	if (speed && (put_file(dir, "max_link_speed", speed) ||
		      put_file(dir, "max_link_width", width) ||
		      put_file(dir, "current_link_speed", "2.5 GT/s PCIe\n") ||
		      put_file(dir, "current_link_width", width)))
		return -1;
	id = id ? id + 1 : path;
	snprintf(link, sizeof link, "%s/bus/pci/devices", root);
	if (mkdirs(link))
		return -1;
	snprintf(link, sizeof link, "%s/bus/pci/devices/%s", root, id);
	snprintf(target, sizeof target, "../../../devices/%s", path);
	return symlink(target, link) && errno != EEXIST ? -1 : 0;
}

static void test_link_sysfs(const char *root)
{
	struct ntx_plan_hw hw;
	double gts, g;
	int w;

	/* a GPU (Gen5 x16) behind a Gen4 x16 root port; one (Gen5 x16) on
	 * the root bus as in the H200 test host's VM; one behind an x8 port;
	 * a bridge that says "Unknown"; one whose device has no link files */
	t_ok(fake_fn(root, "pci0000:00/0000:00:01.0", "16.0 GT/s PCIe\n", "16\n") == 0 &&
		     fake_fn(root, "pci0000:00/0000:00:01.0/0000:01:00.0", "32.0 GT/s PCIe\n", "16\n") == 0 &&
		     fake_fn(root, "pci0000:00/0000:00:06.0", "32.0 GT/s PCIe\n", "16\n") == 0 &&
		     fake_fn(root, "pci0000:00/0000:00:02.0", "32.0 GT/s PCIe\n", "8\n") == 0 &&
		     fake_fn(root, "pci0000:00/0000:00:02.0/0000:02:00.0", "32.0 GT/s PCIe\n", "16\n") == 0 &&
		     fake_fn(root, "pci0000:00/0000:00:03.0", "Unknown\n", "16\n") == 0 &&
		     fake_fn(root, "pci0000:00/0000:00:03.0/0000:03:00.0", "32.0 GT/s PCIe\n", "16\n") == 0 &&
		     fake_fn(root, "pci0000:00/0000:00:07.0", NULL, NULL) == 0,
	     "fake sysfs tree under %s", root);
	g = ntx_pcie_sysfs_link(root, "0000:01:00.0", &gts, &w);
	t_ok(fabs(g - 27.72) < 0.01 && gts == 16 && w == 16,
	     "Gen5 GPU behind a Gen4 port: capped at the port, %.2f GB/s (%g GT/s x%d)", g, gts, w);
	g = ntx_pcie_sysfs_link(root, "0000:00:06.0", &gts, &w);
	t_ok(fabs(g - 55.45) < 0.01 && gts == 32 && w == 16,
	     "Gen5 x16 on the root bus (no bridge links): %.2f GB/s, the maximum, not the idle current speed",
	     g);
	g = ntx_pcie_sysfs_link(root, "0000:02:00.0", &gts, &w);
	t_ok(fabs(g - 27.72) < 0.01 && w == 8, "x16 GPU in an x8 port: %.2f GB/s, x%d", g, w);
	g = ntx_pcie_sysfs_link(root, "0000:03:00.0", &gts, &w);
	t_ok(fabs(g - 55.45) < 0.01, "a bridge that says Unknown does not cap: %.2f GB/s", g);
	g = ntx_pcie_sysfs_link(root, "00000000:00:06.0", &gts, &w);
	t_ok(fabs(g - 55.45) < 0.01, "CUDA's 8-digit domain, upper case: %.2f GB/s", g);
	t_ok(ntx_pcie_sysfs_link(root, "0000:00:07.0", &gts, &w) == 0 && gts == 0 && w == 0,
	     "no link files: not known");
	t_ok(ntx_pcie_sysfs_link(root, "0000:09:00.0", &gts, &w) == 0, "no such device: not known");
	t_ok(ntx_pcie_sysfs_link(root, "../../etc", &gts, &w) == 0 &&
		     ntx_pcie_sysfs_link(root, "", &gts, &w) == 0 &&
		     ntx_pcie_sysfs_link(root, "0000:0g:00.0", &gts, &w) == 0,
	     "not a PCI address: not known");
	t_ok(ntx_pcie_sysfs_link("/nonexistent-sysfs", "0000:00:06.0", &gts, &w) == 0,
	     "no sysfs: not known");

	memset(&hw, 0, sizeof hw);
	hw.h2d_gbps = NTX_PLAN_DEFAULT_H2D_GBPS;
	t_ok(ntx_hw_link_estimate(&hw, root) == 0 && hw.h2d_src == NTX_SRC_DEFAULT,
	     "no GPU: no estimate");
	hw.gpu_present = 1;
	snprintf(hw.gpu_bus_id, sizeof hw.gpu_bus_id, "0000:00:06.0");
	t_ok(ntx_hw_link_estimate(&hw, root) == 1 && hw.h2d_src == NTX_SRC_LINK &&
		     fabs(hw.h2d_gbps - 55.45) < 0.01 && hw.pcie_gts == 32 && hw.pcie_width == 16,
	     "the GPU's link: H2D %.2f GB/s (%s)", hw.h2d_gbps, ntx_src_name(hw.h2d_src));
}

/* Issue #28: without --probe the planner predicted the 70B Q4_K_M at
 * --vram-budget 24G --executor gpu (ctx 256) 2.2x too slow: 1.353 tok/s for
 * one sequence and 19.95 for 16, where the H200 host measured 2.97 and
 * 42.06 (copies at 55.2 GB/s over PCIe Gen5 x16). With the link estimate
 * from a (fake) Gen5 x16 and every other rate at its default, within 15%. */
static void test_no_probe_prediction(const char *root)
{
	static const struct {
		int n_seq;
		double tok_s, before;
	} c[] = { { 1, 2.97, 1.353 }, { 16, 42.06, 19.95 } };
	struct ntx_plan_model pm;
	struct ntx_plan_hw hw;
	size_t i;

	make_70b(&pm, 4);
	ntx_hw_detect_some(&hw, 0, NULL, 0); /* the defaults, nothing detected */
	hw.cpu_cores = 16;
	hw.detected = NTX_HW_CPU;
	hw.cpu_gbps = NTX_PLAN_CPU_GBPS_PER_CORE * 16;
	hw.cpu_batch_gbps = NTX_PLAN_CPU_BATCH_GBPS_PER_CORE * 16;
	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct ntx_plan_opts o;
		struct ntx_plan *p = NULL, *q = NULL;
		struct ntx_plan_hw h = hw, d = hw;
		struct ntx_err err = { 0, "" };

		h.gpu_present = 1;
		h.detected |= NTX_HW_GPU;
		h.gpu_count = 1;
		snprintf(h.gpu_name, sizeof h.gpu_name, "NVIDIA H200");
		snprintf(h.gpu_bus_id, sizeof h.gpu_bus_id, "0000:00:06.0");
		ntx_hw_link_estimate(&h, root);
		ntx_plan_opts_init(&o);
		o.vram_budget = (int64_t)(24 * GiB);
		o.ram_budget = (int64_t)(100 * GiB);
		o.disk_budget = (int64_t)(500 * GiB);
		o.n_ctx = 256;
		o.n_seq = c[i].n_seq;
		o.executor = NTX_POLICY_GPU;
		o.pack_path = "/packs/m.ntxp";
		if (!t_ok(ntx_plan_compute(&pm, &h, &o, &p, &err) == 0 &&
				  ntx_plan_compute(&pm, &d, &o, &q, &err) == 0,
			  "70B Q4_K_M, 24G, --executor gpu, %d sequence(s): planned", c[i].n_seq)) {
			t_diag("%s", err.msg);
			continue;
		}
		t_ok(p->hw.h2d_src == NTX_SRC_LINK &&
			     fabs(p->predicted_tok_per_s / c[i].tok_s - 1) <= 0.15,
		     "%d sequence(s), H2D from the link (%.1f GB/s): predicted %.3g tok/s, measured %.3g (%+.1f%%)",
		     c[i].n_seq, p->hw.h2d_gbps, p->predicted_tok_per_s, c[i].tok_s,
		     100 * (p->predicted_tok_per_s / c[i].tok_s - 1));
		t_ok(q->hw.h2d_src == NTX_SRC_DEFAULT && fabs(q->predicted_tok_per_s / c[i].before - 1) <= 0.02,
		     "%d sequence(s), without the link (25 GB/s): %.4g tok/s, the issue's %.4g", c[i].n_seq,
		     q->predicted_tok_per_s, c[i].before);
		ntx_plan_free(p);
		ntx_plan_free(q);
	}
	ntx_plan_model_free(&pm);
}

/* ---- the probe cache ---- */

/* A machine whose every rate was probed. */
static void probed_hw(struct ntx_plan_hw *hw)
{
	memset(hw, 0, sizeof *hw);
	hw->gpu_present = 1;
	hw->gpu_count = 1;
	hw->detected = NTX_HW_ALL;
	hw->cpu_cores = 16;
	hw->disk_dev = 2049;
	snprintf(hw->gpu_name, sizeof hw->gpu_name, "NVIDIA H200");
	snprintf(hw->gpu_bus_id, sizeof hw->gpu_bus_id, "0000:00:06.0");
	hw->probed = 1;
	hw->h2d_gbps = 55.25;
	hw->disk_gbps = 1.87;
	hw->cpu_gbps = 80.5;
	hw->cpu_batch_gbps = 315.6;
	hw->gpu_gbps = NTX_PLAN_DEFAULT_GPU_GBPS;
	hw->cpu_type_gbps[NTX_TYPE_Q4_K] = 78.25;
	hw->cpu_type_gbps[NTX_TYPE_Q6_K] = 70.5;
	hw->cpu_type_batch_gbps[NTX_TYPE_Q4_K] = 330;
	hw->h2d_src = hw->disk_src = hw->cpu_src = hw->cpu_batch_src = NTX_SRC_PROBE;
	hw->gpu_src = NTX_SRC_DEFAULT;
}

/* The same machine as detected later, before any probe: defaults (H2D
 * from the link). */
static void fresh_hw(struct ntx_plan_hw *hw)
{
	probed_hw(hw);
	hw->probed = 0;
	hw->h2d_gbps = 55.45;
	hw->h2d_src = NTX_SRC_LINK;
	hw->disk_gbps = NTX_PLAN_DEFAULT_DISK_GBPS;
	hw->cpu_gbps = 64;
	hw->cpu_batch_gbps = 320;
	memset(hw->cpu_type_gbps, 0, sizeof hw->cpu_type_gbps);
	memset(hw->cpu_type_batch_gbps, 0, sizeof hw->cpu_type_batch_gbps);
	hw->disk_src = hw->cpu_src = hw->cpu_batch_src = NTX_SRC_DEFAULT;
}

static const struct ntx_probe_key key = { "gpu-host", "Intel(R) Xeon(R) Processor", 16 };

static void test_cache_document(void)
{
	struct ntx_plan_hw hw, h;
	struct ntx_probe_key other;
	struct ntx_err err = { 0, "" };
	int64_t when = 0;
	char *doc;
	int n;

	probed_hw(&hw);
	doc = ntx_probe_cache_to_json(&hw, &key, 1764720000, &err);
	if (!t_ok(doc != NULL, "cache document written"))
		return;
	t_ok(strstr(doc, "\"format\": \"ntx.probe\"") && strstr(doc, "\"host\": \"gpu-host\"") &&
		     strstr(doc, "\"gpu_bus_id\": \"0000:00:06.0\"") && doc[strlen(doc) - 1] == '\n',
	     "cache document: format, host, GPU, trailing newline");
	fresh_hw(&h);
	n = ntx_probe_cache_apply(doc, strlen(doc), "probe.json", &key, &h, &when, &err);
	t_ok(n == 4 && when == 1764720000 && h.h2d_gbps == 55.25 && h.disk_gbps == 1.87 &&
		     h.cpu_gbps == 80.5 && h.cpu_batch_gbps == 315.6 &&
		     h.cpu_type_gbps[NTX_TYPE_Q4_K] == 78.25 &&
		     h.cpu_type_gbps[NTX_TYPE_Q6_K] == 70.5 &&
		     h.cpu_type_batch_gbps[NTX_TYPE_Q4_K] == 330 && h.h2d_src == NTX_SRC_CACHE &&
		     h.cpu_src == NTX_SRC_CACHE && h.cpu_batch_src == NTX_SRC_CACHE &&
		     h.disk_src == NTX_SRC_CACHE && h.gpu_src == NTX_SRC_DEFAULT && !h.probed,
	     "the same machine: every rate from the cache (%d applied: %s)", n, err.msg);

	other = key;
	snprintf(other.host, sizeof other.host, "elsewhere");
	fresh_hw(&h);
	t_ok(ntx_probe_cache_apply(doc, strlen(doc), "probe.json", &other, &h, NULL, &err) == 0 &&
		     h.cpu_src == NTX_SRC_DEFAULT && h.h2d_src == NTX_SRC_LINK && h.cpu_gbps == 64,
	     "another host: nothing applied");
	other = key;
	snprintf(other.cpu_model, sizeof other.cpu_model, "AMD EPYC 9654");
	fresh_hw(&h);
	t_ok(ntx_probe_cache_apply(doc, strlen(doc), "probe.json", &other, &h, NULL, &err) == 0,
	     "another CPU model: nothing applied");
	other = key;
	other.cpu_cores = 8;
	fresh_hw(&h);
	t_ok(ntx_probe_cache_apply(doc, strlen(doc), "probe.json", &other, &h, NULL, &err) == 2 &&
		     h.cpu_src == NTX_SRC_DEFAULT && h.h2d_src == NTX_SRC_CACHE &&
		     h.disk_src == NTX_SRC_CACHE,
	     "fewer CPUs (taskset): the CPU rates not applied, H2D and disk are");
	fresh_hw(&h);
	snprintf(h.gpu_bus_id, sizeof h.gpu_bus_id, "0000:3b:00.0");
	h.disk_dev = 2050;
	t_ok(ntx_probe_cache_apply(doc, strlen(doc), "probe.json", &key, &h, NULL, &err) == 2 &&
		     h.h2d_src == NTX_SRC_LINK && h.h2d_gbps == 55.45 && h.disk_src == NTX_SRC_DEFAULT,
	     "another GPU (bus id), another filesystem: H2D stays the link's, disk the default");
	fresh_hw(&h);
	h.cpu_src = NTX_SRC_OVERRIDE;
	t_ok(ntx_probe_cache_apply(doc, strlen(doc), "probe.json", &key, &h, NULL, &err) == 2 &&
		     h.cpu_src == NTX_SRC_OVERRIDE && h.cpu_gbps == 64,
	     "a rate that is not a default is kept");
	free(doc);

	/* only what was probed is written */
	probed_hw(&hw);
	hw.disk_src = NTX_SRC_DEFAULT; /* the disk probe failed (tmpfs) */
	hw.gpu_present = 0;
	hw.h2d_src = NTX_SRC_DEFAULT;
	doc = ntx_probe_cache_to_json(&hw, &key, 5, &err);
	t_ok(doc && strstr(doc, "\"h2d\": null") && strstr(doc, "\"disk\": null") &&
		     strstr(doc, "\"cpu\": {"),
	     "a failed disk probe and no GPU: null parts");
	fresh_hw(&h);
	t_ok(doc && ntx_probe_cache_apply(doc, strlen(doc), "p.json", &key, &h, NULL, &err) == 2 &&
		     h.disk_src == NTX_SRC_DEFAULT && h.h2d_src == NTX_SRC_LINK,
	     "null parts apply nothing");
	free(doc);
}

static void test_cache_corrupt(void)
{
	static const struct {
		const char *doc, *want; /* want: a part of the message */
	} c[] = {
		{ "", "p.json:" },
		{ "{", "p.json:1:" },
		{ "[]", "p.json" },
		{ "{\"format\": \"ntx.plan\", \"version\": 1}", "format" },
		{ "{\"format\": \"ntx.probe\", \"version\": 2}", "version" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1}", "host" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1, \"host\": \"gpu-host\", \"cpu_model\": \"x\", \"cpu_cores\": 16, \"probed_at\": 1, \"cpu\": null, \"h2d\": null}",
		  "disk" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1, \"host\": \"gpu-host\", \"cpu_model\": \"x\", \"cpu_cores\": 0, \"probed_at\": 1, \"cpu\": null, \"h2d\": null, \"disk\": null}",
		  "cpu_cores" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1, \"host\": \"gpu-host\", \"cpu_model\": \"Intel(R) Xeon(R) Processor\", \"cpu_cores\": 16, \"probed_at\": 1, \"cpu\": {\"gbps\": 80, \"batch_gbps\": -3, \"type_gbps\": {}, \"type_batch_gbps\": {}}, \"h2d\": null, \"disk\": null}",
		  "batch_gbps" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1, \"host\": \"gpu-host\", \"cpu_model\": \"Intel(R) Xeon(R) Processor\", \"cpu_cores\": 16, \"probed_at\": 1, \"cpu\": {\"gbps\": 80, \"batch_gbps\": 300, \"type_gbps\": {\"Q9_Z\": 1}, \"type_batch_gbps\": {}}, \"h2d\": null, \"disk\": null}",
		  "Q9_Z" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1, \"host\": \"gpu-host\", \"cpu_model\": \"Intel(R) Xeon(R) Processor\", \"cpu_cores\": 16, \"probed_at\": 1, \"cpu\": null, \"h2d\": {\"gpu_name\": \"x\", \"gpu_bus_id\": \"y\", \"gbps\": \"fast\"}, \"disk\": null}",
		  "gbps" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1, \"host\": \"gpu-host\", \"cpu_model\": \"Intel(R) Xeon(R) Processor\", \"cpu_cores\": 16, \"probed_at\": 1, \"cpu\": 3, \"h2d\": null, \"disk\": null}",
		  "cpu" },
		{ "{\"format\": \"ntx.probe\", \"version\": 1, \"host\": \"gpu-host\", \"cpu_model\": \"Intel(R) Xeon(R) Processor\", \"cpu_cores\": 16, \"probed_at\": 1, \"cpu\": null, \"h2d\": null, \"disk\": {\"device\": 1, \"gbps\": 1e9}}",
		  "gbps" },
	};
	struct ntx_plan_hw h, before;
	size_t i;

	for (i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct ntx_err err = { 0, "" };
		int n;

		fresh_hw(&h);
		before = h;
		n = ntx_probe_cache_apply(c[i].doc, strlen(c[i].doc), "p.json", &key, &h, NULL, &err);
		t_ok(n == -1 && strstr(err.msg, c[i].want) && memcmp(&h, &before, sizeof h) == 0,
		     "corrupt cache %zu refused, nothing applied: %s", i, err.msg);
	}
}

static void test_cache_files(const char *dir)
{
	struct ntx_tunables tun;
	struct ntx_plan_hw hw, h;
	struct ntx_err err = { 0, "" };
	char path[4200], sub[4200];
	int64_t when = 0;
	FILE *f;

	ntx_tunables_default(&tun);
	t_ok(ntx_probe_cache_path(&tun, path, sizeof path) == -1, "no cache directory: no cache");
	snprintf(tun.cache_dir, sizeof tun.cache_dir, "%s/xdg", dir);
	t_ok(ntx_probe_cache_path(&tun, path, sizeof path) == 0 &&
		     snprintf(sub, sizeof sub, "%s/xdg/ntx/probe.json", dir) > 0 && !strcmp(path, sub),
	     "the cache file: %s", path);
	tun.probe_cache = 0;
	t_ok(ntx_probe_cache_path(&tun, sub, sizeof sub) == -1, "NTX_PROBE_CACHE=0: no cache");
	fresh_hw(&h);
	t_ok(ntx_probe_cache_load(path, &key, &h, NULL, &err) == 0 && h.cpu_src == NTX_SRC_DEFAULT,
	     "no file yet: nothing, no error (%s)", err.msg);
	probed_hw(&hw);
	t_ok(ntx_probe_cache_save(path, &hw, &key, 77, &err) == 0 && access(path, R_OK) == 0,
	     "saved, directories created: %s", err.msg);
	t_ok(ntx_probe_cache_save(path, &hw, &key, 78, &err) == 0, "saved again over it");
	fresh_hw(&h);
	t_ok(ntx_probe_cache_load(path, &key, &h, &when, &err) == 4 && when == 78 &&
		     h.cpu_gbps == 80.5,
	     "loaded: the second save's (%s)", err.msg);
	snprintf(sub, sizeof sub, "%s.%ld.tmp", path, (long)getpid());
	t_ok(access(sub, F_OK) != 0, "no temporary left");
	f = fopen(path, "w");
	if (f) {
		fputs("{\"format\": \"ntx.probe\", \"version\": 1, \"host\":", f);
		fclose(f);
	}
	fresh_hw(&h);
	t_ok(ntx_probe_cache_load(path, &key, &h, NULL, &err) == -1 && strstr(err.msg, path) &&
		     h.cpu_src == NTX_SRC_DEFAULT,
	     "truncated file refused, naming it: %s", err.msg);
	t_ok(ntx_probe_cache_load(dir, &key, &h, NULL, &err) == -1, "a directory: refused (%s)",
	     err.msg);
	snprintf(sub, sizeof sub, "%s/file-as-dir", dir);
	f = fopen(sub, "w");
	if (f)
		fclose(f);
	snprintf(sub, sizeof sub, "%s/file-as-dir/ntx/probe.json", dir);
	t_ok(ntx_probe_cache_save(sub, &hw, &key, 1, &err) == -1 && err.msg[0],
	     "cannot make the directory: an error (%s)", err.msg);
}

static void rm_tree(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		t_diag("could not remove %s", dir);
}

int main(void)
{
	char tmpl[] = "/tmp/ntx-test-probe-XXXXXX", root[4200];
	const char *dir = mkdtemp(tmpl);

	test_link_strings();
	if (!t_ok(dir != NULL, "temporary directory"))
		return t_done();
	snprintf(root, sizeof root, "%s/sys", dir);
	test_link_sysfs(root);
	test_no_probe_prediction(root);
	test_cache_document();
	test_cache_corrupt();
	test_cache_files(dir);
	rm_tree(dir);
	return t_done();
}
