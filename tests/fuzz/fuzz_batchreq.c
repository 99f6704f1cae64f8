/* fuzz_batchreq.c - libFuzzer target for the ntx-run --batch request parser
 * (batchreq.h): any line must be refused with a message or give a NUL-free
 * prompt and values in the documented ranges. Built and run by scripts/fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batchreq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ntx_batch_req def, r;
	struct ntx_err err;

	memset(&def, 0, sizeof def);
	ntx_sampler_defaults(&def.sp);
	def.n_predict = -1;
	err.msg[0] = '\0';
	if (ntx_batch_req_parse((const char *)data, size, &def, &r, &err)) {
		if (!err.msg[0] || (r.id && !r.doc))
			abort();
	} else {
		if (!r.prompt || !r.doc || r.n_predict < -1 || r.sp.temp < 0 || r.sp.temp > 100 ||
		    r.sp.top_p < 0 || r.sp.top_p > 1 || r.sp.min_p < 0 || r.sp.min_p > 1 ||
		    r.sp.repeat_penalty <= 0 || r.sp.top_k < 0)
			abort();
		(void)strlen(r.prompt);
		if (r.system)
			(void)strlen(r.system);
	}
	ntx_batch_req_free(&r);
	return 0;
}
