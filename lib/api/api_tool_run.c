/* api_tool_run.c - the public API (include/ntx.h) for ntx-run (0.4): what
 * its modes need beyond contexts and generation (api_ctx.c): models opened
 * for their vocabulary, the lists its options take. Each call checks its arguments and runs the library's
 * module; printing stays with the caller. */
#include <stdlib.h>

#include "api_int.h"
#include "model.h"
#include "parse.h"

/* ---- models ---- */

enum ntx_status ntx_lm_open_vocab(const char *path, struct ntx_lm **out, struct ntx_error *e)
{
	return ntx_api_lm_open(path, NTX_MODEL_VOCAB_ONLY, "ntx_lm_open_vocab", out, e);
}

/* ---- values ---- */

enum ntx_status ntx_arg_ids(const char *s, int32_t max, int32_t **ids, int *n,
			    struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !ids || !n)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_ids: NULL argument");
	*ids = NULL;
	*n = 0;
	if (max < 0)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_ids: max %d: expected 0 or more",
				   (int)max);
	return ntx_parse_id_list(s, max, ids, n, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}

enum ntx_status ntx_arg_layers(const char *s, int n_layer, int **layers, int *n,
			       struct ntx_error *e)
{
	struct ntx_err ie = { 0 };

	if (!s || !layers || !n)
		return ntx_api_set(e, NTX_STATUS_INVALID, "ntx_arg_layers: NULL argument");
	*layers = NULL;
	*n = 0;
	if (n_layer < 1)
		return ntx_api_set(e, NTX_STATUS_INVALID,
				   "ntx_arg_layers: n_layer %d: expected 1 or more", n_layer);
	return ntx_parse_range_list(s, n_layer, layers, n, &ie) ? ntx_api_fail(e, &ie) : NTX_OK;
}
