/* example - the smallest program over the public API (include/ntx.h):
 *   ntx-example MODEL.gguf PROMPT
 * loads the model, generates up to 16 tokens greedily on the CPU and streams
 * them to stdout (what `ntx-run -m MODEL -p PROMPT -n 16 --temp 0` prints).
 * Build against an installed libntx:
 *   cc example.c $(pkg-config --cflags --libs ntx) -o example */
#include <stdio.h>
#include <string.h>

#include <ntx.h>

/* Each token as it comes: write its piece; a failed write stops generation. */
static int on_token(void *user, int32_t id, const char *piece, size_t len)
{
	(void)user;
	(void)id;
	return fwrite(piece, 1, len, stdout) != len || fflush(stdout) != 0;
}

int main(int argc, char **argv)
{
	struct ntx_error *err = ntx_error_new();
	struct ntx_lm *lm = NULL;
	struct ntx_ctx *ctx = NULL;
	struct ntx_ctx_params cp;
	struct ntx_gen_params gp;
	struct ntx_gen_result res;
	int32_t ids[4096];
	int n = 0, rc = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]);
		ntx_error_free(err);
		return 2;
	}
	if (!err || ntx_version_number() >> 16 != NTX_VERSION_MAJOR) {
		fprintf(stderr, "%s: libntx %s does not match ntx.h\n", argv[0], ntx_version());
		goto out;
	}
	ntx_ctx_params_init(&cp);
	cp.backend = NTX_USE_CPU;
	ntx_gen_params_init(&gp);
	gp.n_predict = 16;
	gp.temperature = 0; /* greedy */
	res.size = sizeof res;
	if (ntx_lm_open(argv[1], &lm, err) ||
	    ntx_lm_tokenize(lm, argv[2], strlen(argv[2]),
			    NTX_TOKENIZE_ADD_BOS | NTX_TOKENIZE_SPECIAL, ids, 4096, &n, err) ||
	    ntx_ctx_new(lm, NULL, &cp, &ctx, err) ||
	    ntx_ctx_generate(ctx, 0, ids, n, &gp, on_token, NULL, &res, err)) {
		fprintf(stderr, "%s: %s\n", argv[0], ntx_error_message(err));
		goto out;
	}
	if (res.finish == NTX_FINISH_STOPPED) {
		fprintf(stderr, "%s: writing output failed\n", argv[0]);
		goto out;
	}
	rc = 0;
out:
	ntx_ctx_free(ctx);
	ntx_lm_close(lm);
	ntx_error_free(err);
	if (fclose(stdout) != 0)
		rc = 1;
	return rc;
}
