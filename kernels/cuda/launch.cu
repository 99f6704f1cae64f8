/* launch.cu - whether ntx_launch (common.cuh) asks for programmatic
 * dependent launch (PDL): on devices of compute capability 9.0 or more,
 * unless the switch no_pdl is on (NTX_NO_PDL, handed over with
 * ntx_cuda_tunables_set); ntx_cuda_pdl_set overrides the switch (tests and
 * benchmarks compare both). The capability is looked up once per device;
 * the caches are atomics, so launching from several threads is safe (two
 * threads may both look up a device and store the same answer). */
#include <atomic>

#include "common.cuh"

#define PDL_MAX_DEV 64

/* Per device id: 0 not looked up yet, 1 no PDL (compute capability < 9), 2 PDL. */
static std::atomic<int> pdl_cap[PDL_MAX_DEV];
/* ntx_cuda_pdl_set: -1 automatic, 0 off, 1 on where supported. */
static std::atomic<int> pdl_force{ -1 };

/* Can the current device do PDL? A failed query answers 0 and is not
 * cached; its error stays pending for the launch check to report. */
static int pdl_supported(void)
{
	int dev = -1, major = 0, c;

	if (cudaGetDevice(&dev) != cudaSuccess)
		return 0;
	if (dev >= 0 && dev < PDL_MAX_DEV && (c = pdl_cap[dev].load(std::memory_order_relaxed)))
		return c == 2;
	if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
		return 0;
	c = major >= 9 ? 2 : 1;
	if (dev >= 0 && dev < PDL_MAX_DEV)
		pdl_cap[dev].store(c, std::memory_order_relaxed);
	return c == 2;
}

int ntx_cu_pdl(void)
{
	int f = pdl_force.load(std::memory_order_relaxed);

	if (f == 0 || (f < 0 && ntx_cu_knob(NTX_CU_NO_PDL)))
		return 0;
	return pdl_supported();
}

extern "C" int ntx_cuda_pdl_enabled(void)
{
	return ntx_cu_pdl();
}

extern "C" void ntx_cuda_pdl_set(int on)
{
	pdl_force.store(on < 0 ? -1 : on ? 1 : 0, std::memory_order_relaxed);
}
