/* fuzz_gguf.c - libFuzzer target for the GGUF reader, the model view and the
 * inspect document: any input must either be rejected with a message or give
 * a document, never crash, leak or read out of bounds. Built and run by
 * scripts/fuzz (clang -fsanitize=fuzzer,address,undefined). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "inspect.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Touch every value through the accessors, as a consumer would. */
static void walk(const struct ntx_gguf *g)
{
	uint64_t i, j;

	for (i = 0; i < g->n_kv; i++) {
		const struct ntx_gguf_kv *kv = &g->kv[i];
		struct ntx_gguf_value e;
		struct ntx_gguf_str s;
		uint64_t u;
		double d;

		(void)ntx_gguf_value_u64(&kv->val, &u);
		(void)ntx_gguf_value_f64(&kv->val, &d);
		(void)ntx_gguf_value_str(&kv->val, &s);
		if (kv->val.type != NTX_GGUF_ARRAY)
			continue;
		for (j = 0; j < kv->val.n && j < 64; j++)
			(void)ntx_gguf_array_get(kv, &kv->val, j, &e);
		if (kv->str_index && kv->val.n)
			(void)ntx_gguf_arr_str(kv, kv->val.n - 1);
	}
	for (i = 0; i < g->n_tensors; i++)
		(void)ntx_gguf_find_tensor(g, g->tensors[i].name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ntx_err err;
	struct ntx_gguf *g = ntx_gguf_open_buffer(data, size, &err);
	struct ntx_model *m;
	json_t *doc;

	if (!g) {
		if (!err.msg[0])
			abort(); /* a failure must say why */
		return 0;
	}
	walk(g);
	doc = ntx_inspect_json(g, "fuzz", NTX_INSPECT_FULL, &err);
	if (doc) {
		char *s = json_dumps(doc, JSON_INDENT(2));

		if (!s)
			abort(); /* the document must always serialise */
		free(s);
		json_decref(doc);
	}
	m = ntx_model_from_gguf(g, 0, &err);
	if (m)
		ntx_model_close(m); /* closes g */
	else
		ntx_gguf_close(g);
	return 0;
}
