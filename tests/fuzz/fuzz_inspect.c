/* fuzz_inspect.c - libFuzzer target for the ntx-inspect JSON reader behind
 * `ntx-inspect m.gguf | ntx-plan -` (ntx_plan_model_from_inspect): any
 * input must be refused with a message or give a plan model whose layers
 * (and, with experts, bytes per expert) are all there, each expert stack
 * within its layer. Built and run by scripts/fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ntx_plan_model pm;
	struct ntx_err err;
	char *text = malloc(size + 1);
	int l;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	err.msg[0] = '\0';
	memset(&pm, 0, sizeof pm);
	if (ntx_plan_model_from_inspect(text, size, "fuzz.json", &pm, &err)) {
		if (!err.msg[0] || pm.layer_bytes || pm.expert_bytes)
			abort();
	} else {
		if (pm.n_layer < 1 || !pm.layer_bytes)
			abort();
		for (l = 0; l < pm.n_layer; l++)
			if (pm.expert_bytes &&
			    pm.expert_bytes[l] * (uint64_t)pm.n_expert > pm.layer_bytes[l])
				abort();
		ntx_plan_model_free(&pm);
	}
	free(text);
	return 0;
}
