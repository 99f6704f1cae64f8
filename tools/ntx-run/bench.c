/* bench.c - --bench over ntx.h: llama-bench's pp and tg tests and the
 * verification curve, as one JSON document on stdout. The library makes
 * the document and times the passes (ntx_ctx_bench: the tests, the
 * repetitions, the roofline share, the draft's cost, the projections);
 * this file opens the context (with --draft's model) and prints it. */
#include <stdio.h>
#include <string.h>

#include "out.h"

int mode_bench(struct run_opts *o)
{
	struct ntx_error *e = ntx_error_new();
	struct ntx_bench_params bp;
	struct run_api a;
	char *json = NULL;
	enum ntx_status s;
	int rc;

	if (!e)
		return run_err(NULL);
	if ((rc = run_api_open(o, &a)) != 0) {
		ntx_error_free(e);
		return rc;
	}
	ntx_bench_params_init(&bp);
	bp.n_prompt = o->bench_pp;
	bp.n_gen = o->bench_tg;
	bp.repetitions = o->bench_reps;
	s = ntx_ctx_bench(a.ctx, &bp, &json, e);
	if (s) {
		rc = run_err(e); /* 130 interrupted, quietly */
	} else if (fwrite(json, 1, strlen(json), stdout) != strlen(json)) {
		rc = 1; /* as before the move: exit 1 (fclose in main reports
			 * a failed flush when the write itself succeeded) */
	}
	ntx_free(json);
	run_api_close(&a);
	ntx_error_free(e);
	return rc;
}
