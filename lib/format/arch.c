/* arch.c - the architecture descriptors (see arch.h). Facts from llama.cpp's
 * llama_model_rope_type and load_arch_hparams (fixtures/moe/README.md). */
#include "arch.h"

#include <string.h>

static const struct ntx_arch archs[] = {
	{ "llama", NTX_ROPE_NORM, 0, NTX_FFN_MOE_IF_EXPERTS, NULL, 0 },
	{ "qwen2", NTX_ROPE_NEOX, 0, NTX_FFN_DENSE, NULL, 1 },
	{ "qwen3", NTX_ROPE_NEOX, 1, NTX_FFN_DENSE, NULL, 0 },
	{ "qwen3moe", NTX_ROPE_NEOX, 1, NTX_FFN_MOE, "expert_feed_forward_length", 0 },
};

const struct ntx_arch *ntx_arch_find(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof archs / sizeof archs[0]; i++)
		if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0)
			return &archs[i];
	return NULL;
}

const char *ntx_arch_names(void)
{
	return "llama, qwen2, qwen3, qwen3moe";
}
