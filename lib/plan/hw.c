/* hw.c - hardware detection for the planner (GPU through the CUDA runtime
 * when built with CUDA, its PCIe link from sysfs, RAM, cores, free disk) and
 * the --probe measurements (pinned H2D bandwidth, O_DIRECT read rate, CPU
 * GEMV rate). See plan.h. */
#include "plan.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#ifdef NTX_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "clock.h"
#include "ntx_cpu.h"
#include "plan_int.h"
#include "types.h"

/* ---- detection ---- */

int ntx_nvidia_driver_present(void)
{
	void *h;

	if (access("/proc/driver/nvidia/version", F_OK) == 0)
		return 1;
	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		return 0;
	dlclose(h);
	return 1;
}

void ntx_gpu_unusable_why(char *why, size_t n, const char *cuda_msg, int driver_present)
{
	if (!driver_present) /* the runtime says "driver version is insufficient" */
		snprintf(why, n, "no NVIDIA driver found");
	else
		snprintf(why, n, "no usable CUDA device (%s)", cuda_msg ? cuda_msg : "unknown error");
}

static void detect_gpu(struct ntx_plan_hw *hw, int gpu_index)
{
	hw->detected |= NTX_HW_GPU;
#ifdef NTX_HAVE_CUDA
	{
		int n = 0;
		size_t fr = 0, tot = 0;
		struct cudaDeviceProp prop;

		/* no driver, no device, too old a driver: all mean "no GPU" */
		if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
			cudaGetLastError();
			return;
		}
		hw->gpu_count = n;
		if (gpu_index < 0 || gpu_index >= n)
			return;
		if (cudaGetDeviceProperties(&prop, gpu_index) != cudaSuccess ||
		    cudaSetDevice(gpu_index) != cudaSuccess ||
		    cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
			cudaGetLastError();
			return;
		}
		hw->gpu_present = 1;
		snprintf(hw->gpu_name, sizeof hw->gpu_name, "%s", prop.name);
		hw->vram_total = tot;
		hw->vram_free = fr;
		if (cudaDeviceGetPCIBusId(hw->gpu_bus_id, (int)sizeof hw->gpu_bus_id, gpu_index) !=
		    cudaSuccess) {
			cudaGetLastError();
			hw->gpu_bus_id[0] = '\0';
		}
		for (char *c = hw->gpu_bus_id; *c; c++) /* "0000:3B:00.0": sysfs is lower case */
			*c = (char)tolower((unsigned char)*c);
	}
#else
	(void)gpu_index;
#endif
}

uint64_t ntx_mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	uint64_t b = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long long kb;

		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
			b = (uint64_t)kb * 1024;
			break;
		}
	}
	fclose(f);
	return b;
}

static void detect_ram(struct ntx_plan_hw *hw)
{
	uint64_t b = ntx_mem_available();

	if (b) {
		hw->ram_available = b;
		hw->detected |= NTX_HW_RAM;
	}
}

static void detect_cpu(struct ntx_plan_hw *hw)
{
	cpu_set_t set;
	long n = 0;

	if (sched_getaffinity(0, sizeof set, &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n > 0) {
		hw->cpu_cores = (int)n;
		hw->detected |= NTX_HW_CPU;
	}
}

static void detect_disk(struct ntx_plan_hw *hw, const char *dir)
{
	struct statvfs st;
	struct stat sb;

	if (!dir || !*dir)
		dir = ".";
	if (statvfs(dir, &st) != 0)
		return;
	hw->disk_free = (uint64_t)st.f_bavail * (uint64_t)st.f_frsize;
	if (stat(dir, &sb) == 0)
		hw->disk_dev = (uint64_t)sb.st_dev;
	hw->detected |= NTX_HW_DISK;
}

/* ---- the PCIe link (sysfs) ---- */

double ntx_pcie_gts(const char *s)
{
	char *end;
	double v;

	if (!s)
		return 0;
	while (*s == ' ' || *s == '\t')
		s++;
	if (!isdigit((unsigned char)*s))
		return 0;
	v = strtod(s, &end);
	while (*end == ' ')
		end++;
	if (strncmp(end, "GT/s", 4) != 0 || !(v > 0) || v > 1024)
		return 0;
	return v;
}

int ntx_pcie_width(const char *s)
{
	char *end;
	long v;

	if (!s)
		return 0;
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == 'x' || *s == 'X')
		s++;
	if (!isdigit((unsigned char)*s))
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	while (*end == ' ' || *end == '\t' || *end == '\n')
		end++;
	if (*end || errno || v < 1 || v > 32)
		return 0;
	return (int)v;
}

double ntx_pcie_gbps(double gts, int width)
{
	double enc;

	if (!(gts > 0) || width < 1)
		return 0;
	/* line code: 8b/10b up to 5 GT/s, 128b/130b from 8 GT/s; 64 GT/s
	 * (Gen6) sends FLITs, taken as ~1 */
	enc = gts < 8 ? 0.8 : gts < 64 ? 128.0 / 130.0 : 1.0;
	return gts * enc * width / 8 * NTX_PLAN_PCIE_EFFICIENCY;
}

double ntx_pcie_link_gbps(const char *speed, const char *width)
{
	return ntx_pcie_gbps(ntx_pcie_gts(speed), ntx_pcie_width(width));
}

/* The first line of a small sysfs file; 0 or -1. */
static int read_line(const char *dir, const char *name, char *buf, size_t n)
{
	char path[PATH_MAX];
	FILE *f;
	int ok;

	if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
		return -1;
	f = fopen(path, "re");
	if (!f)
		return -1;
	ok = fgets(buf, (int)n, f) != NULL;
	fclose(f);
	if (!ok)
		return -1;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* The maximum link speed and width a PCI function's directory reports
 * (both, or neither: 0). */
static int dir_link(const char *dir, double *gts, int *width)
{
	char sp[64], wd[64];

	if (read_line(dir, "max_link_speed", sp, sizeof sp) ||
	    read_line(dir, "max_link_width", wd, sizeof wd))
		return 0;
	*gts = ntx_pcie_gts(sp);
	*width = ntx_pcie_width(wd);
	return *gts > 0 && *width > 0;
}

/* "0000:3B:00.0" or "00000000:3b:00.0" -> "0000:3b:00.0": 0, or -1 when it
 * is not a PCI address. */
static int norm_bus_id(const char *in, char *out, size_t n)
{
	const char *c = strchr(in, ':');
	size_t len, i;

	if (!c)
		return -1;
	if (c - in > 4) /* CUDA may print an 8-digit domain; sysfs has 4 */
		in = c - 4;
	len = strlen(in);
	if (len < 7 || len >= n || len > 16)
		return -1;
	for (i = 0; i < len; i++) {
		char ch = (char)tolower((unsigned char)in[i]);

		if (!isxdigit((unsigned char)ch) && ch != ':' && ch != '.')
			return -1;
		out[i] = ch;
	}
	out[len] = '\0';
	return 0;
}

double ntx_pcie_sysfs_link(const char *root, const char *bus_id, double *gts, int *width)
{
	char path[PATH_MAX], real[PATH_MAX], rroot[PATH_MAX], id[32];
	double g, pg;
	int w, pw;
	size_t rl;
	char *sl;

	*gts = 0;
	*width = 0;
	if (!root || !bus_id || norm_bus_id(bus_id, id, sizeof id) ||
	    (size_t)snprintf(path, sizeof path, "%s/bus/pci/devices/%s", root, id) >= sizeof path ||
	    !realpath(path, real) || !realpath(root, rroot) || !dir_link(real, &g, &w))
		return 0;
	/* every bridge above with a link of its own caps it (a GPU idles at a
	 * lower current speed, so the maximum, not the current, is read) */
	rl = strlen(rroot);
	while ((sl = strrchr(real, '/')) != NULL && (size_t)(sl - real) > rl) {
		*sl = '\0';
		if (dir_link(real, &pg, &pw)) {
			g = pg < g ? pg : g;
			w = pw < w ? pw : w;
		}
	}
	*gts = g;
	*width = w;
	return ntx_pcie_gbps(g, w);
}

int ntx_hw_link_estimate(struct ntx_plan_hw *hw, const char *sysfs_root)
{
	double g;

	if (!hw->gpu_present || !hw->gpu_bus_id[0])
		return 0;
	g = ntx_pcie_sysfs_link(sysfs_root, hw->gpu_bus_id, &hw->pcie_gts, &hw->pcie_width);
	if (g <= 0)
		return 0;
	hw->h2d_gbps = ntx_plan_round6(g);
	hw->h2d_src = NTX_SRC_LINK;
	return 1;
}

void ntx_hw_detect_some(struct ntx_plan_hw *hw, int gpu_index, const char *pack_dir,
			unsigned what)
{
	double cpu;

	memset(hw, 0, sizeof *hw);
	hw->gpu_index = gpu_index;
	if (what & NTX_HW_GPU)
		detect_gpu(hw, gpu_index);
	if (what & NTX_HW_RAM)
		detect_ram(hw);
	if (what & NTX_HW_CPU)
		detect_cpu(hw);
	if (what & NTX_HW_DISK)
		detect_disk(hw, pack_dir);
	cpu = NTX_PLAN_CPU_GBPS_PER_CORE * (hw->cpu_cores > 0 ? hw->cpu_cores : 1);
	hw->h2d_gbps = NTX_PLAN_DEFAULT_H2D_GBPS;
	hw->disk_gbps = NTX_PLAN_DEFAULT_DISK_GBPS;
	hw->cpu_gbps = cpu > NTX_PLAN_CPU_GBPS_MAX ? NTX_PLAN_CPU_GBPS_MAX : cpu;
	hw->gpu_gbps = NTX_PLAN_DEFAULT_GPU_GBPS;
	hw->cpu_batch_gbps = NTX_PLAN_CPU_BATCH_GBPS_PER_CORE * (hw->cpu_cores > 0 ? hw->cpu_cores : 1);
	hw->h2d_src = hw->disk_src = hw->cpu_src = hw->gpu_src = NTX_SRC_DEFAULT;
	hw->cpu_batch_src = NTX_SRC_DEFAULT;
	ntx_hw_link_estimate(hw, "/sys");
}

void ntx_hw_detect(struct ntx_plan_hw *hw, int gpu_index, const char *pack_dir)
{
	ntx_hw_detect_some(hw, gpu_index, pack_dir, NTX_HW_ALL);
}

/* ---- probe: pinned H2D ---- */

static int probe_h2d(struct ntx_plan_hw *hw, struct ntx_err *err)
{
#ifdef NTX_HAVE_CUDA
	const size_t sz = 256u << 20;
	const int reps = 8;
	void *host = NULL, *dev = NULL;
	cudaStream_t st = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	float ms = 0;
	int i, rc = -1;

	if (!hw->gpu_present)
		return 0;
	if (cudaSetDevice(hw->gpu_index) != cudaSuccess ||
	    cudaHostAlloc(&host, sz, cudaHostAllocDefault) != cudaSuccess ||
	    cudaMalloc(&dev, sz) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess ||
	    cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
		ntx_err_set(err, NTX_EDEVICE, "probe: H2D: %s", cudaGetErrorString(cudaGetLastError()));
		goto out;
	}
	memset(host, 0x5a, sz);
	if (cudaMemcpyAsync(dev, host, sz, cudaMemcpyHostToDevice, st) != cudaSuccess ||
	    cudaEventRecord(e0, st) != cudaSuccess)
		goto cuda_fail;
	for (i = 0; i < reps; i++)
		if (cudaMemcpyAsync(dev, host, sz, cudaMemcpyHostToDevice, st) != cudaSuccess)
			goto cuda_fail;
	if (cudaEventRecord(e1, st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
	    cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess || ms <= 0)
		goto cuda_fail;
	hw->h2d_gbps = ntx_plan_round6((double)sz * reps / (ms * 1e-3) / 1e9);
	hw->h2d_src = NTX_SRC_PROBE;
	rc = 0;
	goto out;
cuda_fail:
	ntx_err_set(err, NTX_EDEVICE, "probe: H2D copy: %s", cudaGetErrorString(cudaGetLastError()));
out:
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	if (st)
		cudaStreamDestroy(st);
	if (dev)
		cudaFree(dev);
	if (host)
		cudaFreeHost(host);
	return rc;
#else
	(void)hw;
	(void)err;
	return 0;
#endif
}

/* ---- probe: O_DIRECT reads ---- */

#define PROBE_CHUNK (16u << 20)
#define PROBE_THREADS 4

struct rd_job {
	int fd;
	void *buf;
	uint64_t size;
	int ith, nth;
	int err;
};

static void *read_worker(void *arg)
{
	struct rd_job *j = arg;
	uint64_t off;

	for (off = (uint64_t)j->ith * PROBE_CHUNK; off < j->size;
	     off += (uint64_t)j->nth * PROBE_CHUNK) {
		size_t done = 0;

		while (done < PROBE_CHUNK) {
			ssize_t n = pread(j->fd, (char *)j->buf + done, PROBE_CHUNK - done,
					  (off_t)(off + done));

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				j->err = n < 0 ? errno : EIO;
				return NULL;
			}
			done += (size_t)n;
		}
	}
	return NULL;
}

/* Write a temporary file of up to 1 GiB in dir with O_DIRECT (so the page
 * cache does not hold it), then read it back with O_DIRECT, 16 MiB reads,
 * PROBE_THREADS in flight: the rate the engine's disk tier will see. */
static int probe_disk(struct ntx_plan_hw *hw, const char *dir, struct ntx_err *err)
{
	struct rd_job jobs[PROBE_THREADS];
	pthread_t th[PROBE_THREADS];
	uint64_t size = 1ull << 30, off;
	struct statvfs st;
	char path[4096];
	unsigned char *buf = NULL;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	double t0, t;
	int fd = -1, i, started = 0, rc = -1;
	size_t k;

	if (!dir || !*dir)
		dir = ".";
	if (statvfs(dir, &st) == 0) {
		uint64_t avail = (uint64_t)st.f_bavail * st.f_frsize / 4;

		if (avail < size)
			size = avail / PROBE_CHUNK * PROBE_CHUNK;
	}
	if (size < 4 * (uint64_t)PROBE_CHUNK)
		return ntx_err_set(err, NTX_EIO, "probe: disk: not enough free space in %s", dir);
	fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT, 0600);
	if (fd < 0) {
		snprintf(path, sizeof path, "%s/.ntx-probe-%ld.tmp", dir, (long)getpid());
		fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_DIRECT, 0600);
		if (fd >= 0)
			unlink(path);
	}
	if (fd < 0)
		return ntx_err_errno(err, errno, "probe: disk: O_DIRECT file in %s", dir);
	for (i = 0; i < PROBE_THREADS; i++)
		jobs[i].buf = NULL;
	if (posix_memalign((void **)&buf, 4096, PROBE_CHUNK)) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	for (k = 0; k < PROBE_CHUNK; k += 8) { /* incompressible */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + k, &x, 8);
	}
	for (off = 0; off < size; off += PROBE_CHUNK) {
		ssize_t n = pwrite(fd, buf, PROBE_CHUNK, (off_t)off);

		if (n != (ssize_t)PROBE_CHUNK) {
			ntx_err_errno(err, n < 0 ? errno : ENOSPC, "probe: disk: writing %s", dir);
			goto out;
		}
	}
	if (fdatasync(fd)) {
		ntx_err_errno(err, errno, "probe: disk: fdatasync in %s", dir);
		goto out;
	}
	for (i = 0; i < PROBE_THREADS; i++) {
		jobs[i] = (struct rd_job){ fd, NULL, size, i, PROBE_THREADS, 0 };
		if (posix_memalign(&jobs[i].buf, 4096, PROBE_CHUNK)) {
			ntx_err_set(err, NTX_ENOMEM, "out of memory");
			goto out;
		}
	}
	t0 = ntx_now_s();
	for (i = 0; i < PROBE_THREADS; i++) {
		if (pthread_create(&th[i], NULL, read_worker, &jobs[i]))
			break;
		started++;
	}
	for (i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	t = ntx_now_s() - t0;
	if (started < PROBE_THREADS) {
		ntx_err_set(err, NTX_EIO, "probe: disk: cannot start reader threads");
		goto out;
	}
	for (i = 0; i < PROBE_THREADS; i++)
		if (jobs[i].err) {
			ntx_err_errno(err, jobs[i].err, "probe: disk: O_DIRECT read in %s", dir);
			goto out;
		}
	if (t > 0) {
		hw->disk_gbps = ntx_plan_round6((double)size / t / 1e9);
		hw->disk_src = NTX_SRC_PROBE;
		rc = 0;
	}
out:
	for (i = 0; i < PROBE_THREADS; i++)
		free(jobs[i].buf);
	free(buf);
	close(fd);
	return rc;
}

/* ---- probe: CPU GEMV ---- */

/* Matrices cycled: well beyond any last-level cache (server parts have up
 * to 320 MiB of L3 and a 256 MiB cycle was measured at twice the rate the
 * engine gets from DRAM on such a host); halved while allocation fails. */
#define PROBE_CPU_BYTES ((size_t)1 << 30)
#define PROBE_CPU_MIN_BYTES ((size_t)256 << 20)
#define PROBE_CPU_SECONDS 0.25

/* Weight bytes x tokens per second of ntx_cpu_matmul over n_tok tokens,
 * cycling through the n_mats matrices of buf for PROBE_CPU_SECONDS. */
static double probe_rate(struct ntx_pool *pool, struct ntx_wmat *w, const unsigned char *buf,
			 size_t n_mats, uint64_t mat, const float *x, int64_t n_tok, float *y,
			 void *scratch)
{
	double t0 = ntx_now_s(), t;
	long calls = 0;
	size_t k;

	do {
		for (k = 0; k < n_mats; k++) {
			w->data = buf + k * mat;
			ntx_cpu_matmul(pool, w, x, n_tok, y, scratch);
			calls++;
		}
		t = ntx_now_s() - t0;
	} while (t < PROBE_CPU_SECONDS);
	return ntx_plan_round6((double)mat * (double)n_tok * (double)calls / t / 1e9);
}

/* Decode-style GEMV (one token) with ntx_cpu_matmul on 4096 x 4096 matrices
 * of each weight type the CPU kernels support, cycling through enough of
 * them (>= 256 MiB) that the weights stream from DRAM as they do in a real
 * layer. The rate is weight bytes per second. Then the same matrices times
 * a batch of NTX_PLAN_CPU_BATCH_PROBE tokens (a decode step of that many
 * sequences): weight bytes x tokens per second. */
static int probe_cpu(struct ntx_plan_hw *hw, int n_threads, struct ntx_err *err)
{
	static const uint32_t types[] = { NTX_TYPE_F32, NTX_TYPE_F16, NTX_TYPE_BF16, NTX_TYPE_Q8_0, NTX_TYPE_Q4_0,
					  NTX_TYPE_Q5_0, NTX_TYPE_Q4_K, NTX_TYPE_Q5_K, NTX_TYPE_Q6_K };
	const int64_t n = 4096, nb = NTX_PLAN_CPU_BATCH_PROBE;
	struct ntx_pool *pool = ntx_pool_new(n_threads > 0 ? n_threads : 1, err);
	float *x = NULL, *y = NULL;
	unsigned char *buf = NULL;
	double inv_sum = 0, inv_sum_b = 0;
	int n_rates = 0, rc = -1;
	size_t i, bytes;

	if (!pool)
		return -1;
	x = malloc((size_t)(n * nb) * sizeof *x);
	y = malloc((size_t)(n * nb) * sizeof *y);
	if (!x || !y) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < (size_t)(n * nb); i++)
		x[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
	/* one buffer for every type: 0x11 bytes are small normal fp16/bf16/f32
	 * scales and weights, no NaN */
	for (bytes = PROBE_CPU_BYTES; bytes >= PROBE_CPU_MIN_BYTES && !buf; bytes /= 2)
		if (posix_memalign((void **)&buf, 64, bytes))
			buf = NULL;
	if (!buf) {
		ntx_err_set(err, NTX_ENOMEM, "probe: CPU: out of memory");
		goto out;
	}
	bytes *= 2;
	memset(buf, 0x11, bytes);
	for (i = 0; i < sizeof types / sizeof types[0]; i++) {
		struct ntx_wmat w = { types[i], n, n, 0, NULL };
		uint64_t row, mat;
		size_t n_mats, scratch_sz;
		void *scratch = NULL;

		if (!ntx_cpu_supports(types[i]) || ntx_type_row_bytes(types[i], n, &row, NULL))
			continue;
		mat = row * (uint64_t)n;
		n_mats = (size_t)(bytes / mat);
		scratch_sz = ntx_matmul_scratch_bytes(&w, nb);
		if (scratch_sz && posix_memalign(&scratch, 64, scratch_sz)) {
			ntx_err_set(err, NTX_ENOMEM, "probe: CPU: out of memory");
			goto out;
		}
		w.row_bytes = row;
		w.data = buf;
		ntx_cpu_matmul(pool, &w, x, 1, y, scratch); /* warm-up */
		hw->cpu_type_gbps[types[i]] = probe_rate(pool, &w, buf, n_mats, mat, x, 1, y, scratch);
		inv_sum += 1.0 / hw->cpu_type_gbps[types[i]];
		hw->cpu_type_batch_gbps[types[i]] =
			probe_rate(pool, &w, buf, n_mats, mat, x, nb, y, scratch);
		inv_sum_b += 1.0 / hw->cpu_type_batch_gbps[types[i]];
		n_rates++;
		free(scratch);
	}
	if (n_rates) {
		hw->cpu_gbps = ntx_plan_round6(n_rates / inv_sum);
		hw->cpu_src = NTX_SRC_PROBE;
		hw->cpu_batch_gbps = ntx_plan_round6(n_rates / inv_sum_b);
		hw->cpu_batch_src = NTX_SRC_PROBE;
		rc = 0;
	} else {
		ntx_err_set(err, NTX_EUNSUP, "probe: CPU: no weight type is supported by the CPU kernels");
	}
out:
	free(buf);
	free(x);
	free(y);
	ntx_pool_free(pool);
	return rc;
}

/* ---- probe: all ---- */

int ntx_hw_probe(struct ntx_plan_hw *hw, const char *probe_dir, int n_threads,
		 const struct ntx_tunables *tun, struct ntx_err *err)
{
	struct ntx_err e[3] = { { 0, "" }, { 0, "" }, { 0, "" } };
	int rc = 0, i;

	if (tun)
		ntx_cpu_tunables_set(tun);
	hw->probed = 1;
	if (probe_h2d(hw, &e[0]))
		rc = -1;
	if (probe_disk(hw, probe_dir, &e[1]))
		rc = -1;
	if (probe_cpu(hw, n_threads > 0 ? n_threads : hw->cpu_cores, &e[2]))
		rc = -1;
	if (rc) {
		char msg[NTX_ERR_MAX] = "";
		int code = 0;

		for (i = 0; i < 3; i++) {
			if (!e[i].code)
				continue;
			if (!code)
				code = e[i].code;
			snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%s%s",
				 msg[0] ? "; " : "", e[i].msg);
		}
		ntx_err_set(err, code, "%s", msg);
	}
	return rc;
}
