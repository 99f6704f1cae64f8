/* tuning.cu - the switches of the CUDA kernels (tunables.h), as the engine
 * hands them over with ntx_cuda_tunables_set; the defaults until then.
 * Kernel files read them per launch through ntx_cu_knob (one relaxed atomic
 * load), the cuBLAS path once when it loads (ntx_cu_cublas_path). Nothing
 * here reads the environment: the engine does (ntx_tunables_from_env). */
#include <pthread.h>
#include <string.h>

#include <atomic>

#include "common.cuh"

static std::atomic<int> knob[NTX_CU_N_KNOBS];
static pthread_once_t knob_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t path_mu = PTHREAD_MUTEX_INITIALIZER;
static char cublas_path[NTX_TUNABLES_PATH_MAX]; /* under path_mu */

/* Store t's values, each checked: a value out of range is the default. */
static void knobs_store(const struct ntx_tunables *t)
{
	const int c = t->attn_chunk;

	knob[NTX_CU_GEMV_DL].store(!!t->gemv_dl, std::memory_order_relaxed);
	knob[NTX_CU_GEMV_EARLY].store(!!t->gemv_early, std::memory_order_relaxed);
	knob[NTX_CU_GEMV_DL_SHAPE].store(t->gemv_dl_shape >= 0 && t->gemv_dl_shape <= 2 ? t->gemv_dl_shape : -1,
					 std::memory_order_relaxed);
	knob[NTX_CU_GEMV_MMA].store(!!t->gemv_mma, std::memory_order_relaxed);
	knob[NTX_CU_GEMV_MMA_OVERLAP].store(!!t->gemv_mma_overlap, std::memory_order_relaxed);
	knob[NTX_CU_ATTN_PREFETCH].store(!!t->attn_prefetch, std::memory_order_relaxed);
	knob[NTX_CU_ATTN_CHUNK].store(c >= 32 && c <= 65536 && c % 32 == 0 ? c : 32,
				      std::memory_order_relaxed);
	knob[NTX_CU_NO_PDL].store(!!t->no_pdl, std::memory_order_relaxed);
	knob[NTX_CU_NO_CUBLAS].store(!!t->no_cublas, std::memory_order_relaxed);
	pthread_mutex_lock(&path_mu);
	memcpy(cublas_path, t->cublas, sizeof cublas_path);
	cublas_path[sizeof cublas_path - 1] = '\0';
	pthread_mutex_unlock(&path_mu);
}

static void knobs_default(void)
{
	struct ntx_tunables t;

	ntx_tunables_default(&t);
	knobs_store(&t);
}

int ntx_cu_knob(enum ntx_cu_knob k)
{
	pthread_once(&knob_once, knobs_default);
	return knob[k].load(std::memory_order_relaxed);
}

void ntx_cu_cublas_path(char *buf, size_t n)
{
	pthread_once(&knob_once, knobs_default);
	pthread_mutex_lock(&path_mu);
	snprintf(buf, n, "%s", cublas_path);
	pthread_mutex_unlock(&path_mu);
}

extern "C" void ntx_cuda_tunables_set(const struct ntx_tunables *t)
{
	pthread_once(&knob_once, knobs_default);
	if (t)
		knobs_store(t);
	else
		knobs_default();
}
