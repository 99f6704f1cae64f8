/* fuzz_probe.c - libFuzzer target for the probe cache reader
 * (ntx_probe_cache_apply, behind every plan made without --probe): any input
 * must be refused with a message and leave the hardware as it was, or
 * apply only positive, finite rates with the "cache" source. The first
 * input byte picks which parts of the machine match (host, CPUs, GPU,
 * filesystem). Built and run by scripts/fuzz. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "probe_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rate_ok(double r)
{
	return isfinite(r) && r > 0 && r <= 1e6;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ntx_probe_key k = { "gpu-host", "Intel(R) Xeon(R) Processor", 16 };
	struct ntx_plan_hw hw, before;
	struct ntx_err err;
	int64_t when = -1;
	char *text;
	int n, i;

	if (size < 1)
		return 0;
	if (data[0] & 1)
		snprintf(k.host, sizeof k.host, "elsewhere");
	if (data[0] & 2)
		k.cpu_cores = 8;
	memset(&hw, 0, sizeof hw);
	hw.gpu_present = 1;
	hw.detected = NTX_HW_ALL;
	hw.cpu_cores = 16;
	hw.disk_dev = data[0] & 4 ? 2049 : 7;
	snprintf(hw.gpu_name, sizeof hw.gpu_name, "NVIDIA H200");
	snprintf(hw.gpu_bus_id, sizeof hw.gpu_bus_id, data[0] & 8 ? "0000:00:06.0" : "0000:3b:00.0");
	hw.h2d_gbps = 55.45;
	hw.h2d_src = NTX_SRC_LINK;
	hw.disk_gbps = 2;
	hw.cpu_gbps = 64;
	hw.cpu_batch_gbps = 320;
	hw.gpu_gbps = 2000;
	before = hw;
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	err.code = 0;
	err.msg[0] = '\0';
	n = ntx_probe_cache_apply(text, size - 1, "fuzz.json", &k, &hw, &when, &err);
	if (n < 0) {
		if (!err.msg[0] || memcmp(&hw, &before, sizeof hw) != 0)
			abort();
	} else {
		if (n > 4 || when < 0 || !rate_ok(hw.h2d_gbps) || !rate_ok(hw.disk_gbps) ||
		    !rate_ok(hw.cpu_gbps) || !rate_ok(hw.cpu_batch_gbps))
			abort();
		if ((hw.cpu_src == NTX_SRC_CACHE) != (hw.cpu_batch_src == NTX_SRC_CACHE))
			abort();
		for (i = 0; i < NTX_TYPE_COUNT; i++)
			if (hw.cpu_type_gbps[i] < 0 || !isfinite(hw.cpu_type_gbps[i]) ||
			    hw.cpu_type_batch_gbps[i] < 0 || !isfinite(hw.cpu_type_batch_gbps[i]))
				abort();
	}
	free(text);
	return 0;
}
