/* perplexity.c - ntx-run --perplexity FILE over ntx.h: llama-perplexity's
 * method over the file's tokens in chunks of -c (the context's size). */
#include <stdio.h>
#include <stdlib.h>

#include "run.h"

static void progress(void *p, int chunk, int n_chunks, double ppl)
{
	const struct run_opts *o = p;

	if (!o->quiet)
		fprintf(stderr, "[%d/%d] %.4f\n", chunk, n_chunks, ppl);
}

int mode_perplexity(struct run_opts *o)
{
	struct ntx_error *e = ntx_error_new();
	struct run_api a;
	struct ntx_ctx_stats st;
	struct ntx_perplexity_result r;
	char *text = NULL, msg[1024];
	size_t len;
	int32_t *ids = NULL;
	int n = 0, n_ctx, rc;

	if (!e) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}
	if ((rc = run_api_open(o, &a)) != 0) {
		ntx_error_free(e);
		return rc;
	}
	if ((rc = run_slurp(o->perplexity, &text, &len, msg, sizeof msg)) != 0) {
		if (rc != 130)
			fprintf(stderr, PROG ": %s\n", msg);
		goto out;
	}
	st.size = sizeof st;
	/* with BOS, special-token text as plain text */
	if (run_lm_tokenize(a.lm, text, len, NTX_TOKENIZE_ADD_BOS, &ids, &n, e) || ntx_ctx_stats(a.ctx, &st, e)) {
		rc = 1;
		fprintf(stderr, PROG ": %s\n", ntx_error_message(e)[0] ? ntx_error_message(e)
								      : "out of memory");
		goto out;
	}
	n_ctx = o->n_ctx > 0 ? o->n_ctx : st.n_ctx;
	if (n < n_ctx) {
		fprintf(stderr, PROG ": %s: %d tokens, fewer than one chunk of %d (give a longer text or a smaller -c)\n",
			o->perplexity, n, n_ctx);
		rc = 1;
		goto out;
	}
	if (!o->quiet)
		fprintf(stderr, PROG ": perplexity: %d tokens, %d chunks of %d\n", n, n / n_ctx, n_ctx);
	r.size = sizeof r;
	if (ntx_ctx_perplexity(a.ctx, ids, n, n_ctx, progress, o, &r, e)) {
		rc = ntx_error_status(e) == NTX_STATUS_INTERRUPTED ? 130 : 1;
		if (rc == 1)
			fprintf(stderr, PROG ": %s\n", ntx_error_message(e));
		goto out;
	}
	printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
	rc = run_expert_stats(o, &a, rc);
out:
	free(ids);
	free(text);
	run_api_close(&a);
	ntx_error_free(e);
	return rc;
}
