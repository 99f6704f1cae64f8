/* types.c - the ggml type table (see types.h). */
#include "types.h"

#include <ctype.h>
#include <stdio.h>
#include <strings.h>

static const struct ntx_type_info table[NTX_TYPE_COUNT] = {
	[NTX_TYPE_F32] = { "F32", 1, 4, 1 },
	[NTX_TYPE_F16] = { "F16", 1, 2, 1 },
	[NTX_TYPE_Q4_0] = { "Q4_0", 32, 18, 1 },
	[NTX_TYPE_Q4_1] = { "Q4_1", 32, 20, 0 },
	[NTX_TYPE_Q5_0] = { "Q5_0", 32, 22, 1 },
	[NTX_TYPE_Q5_1] = { "Q5_1", 32, 24, 0 },
	[NTX_TYPE_Q8_0] = { "Q8_0", 32, 34, 1 },
	[NTX_TYPE_Q8_1] = { "Q8_1", 32, 36, 0 },
	[NTX_TYPE_Q2_K] = { "Q2_K", 256, 84, 0 },
	[NTX_TYPE_Q3_K] = { "Q3_K", 256, 110, 0 },
	[NTX_TYPE_Q4_K] = { "Q4_K", 256, 144, 1 },
	[NTX_TYPE_Q5_K] = { "Q5_K", 256, 176, 1 },
	[NTX_TYPE_Q6_K] = { "Q6_K", 256, 210, 1 },
	[NTX_TYPE_Q8_K] = { "Q8_K", 256, 292, 0 },
	[NTX_TYPE_IQ2_XXS] = { "IQ2_XXS", 256, 66, 0 },
	[NTX_TYPE_IQ2_XS] = { "IQ2_XS", 256, 74, 0 },
	[NTX_TYPE_IQ3_XXS] = { "IQ3_XXS", 256, 98, 0 },
	[NTX_TYPE_IQ1_S] = { "IQ1_S", 256, 50, 0 },
	[NTX_TYPE_IQ4_NL] = { "IQ4_NL", 32, 18, 0 },
	[NTX_TYPE_IQ3_S] = { "IQ3_S", 256, 110, 0 },
	[NTX_TYPE_IQ2_S] = { "IQ2_S", 256, 82, 0 },
	[NTX_TYPE_IQ4_XS] = { "IQ4_XS", 256, 136, 0 },
	[NTX_TYPE_I8] = { "I8", 1, 1, 0 },
	[NTX_TYPE_I16] = { "I16", 1, 2, 0 },
	[NTX_TYPE_I32] = { "I32", 1, 4, 0 },
	[NTX_TYPE_I64] = { "I64", 1, 8, 0 },
	[NTX_TYPE_F64] = { "F64", 1, 8, 0 },
	[NTX_TYPE_IQ1_M] = { "IQ1_M", 256, 56, 0 },
	[NTX_TYPE_BF16] = { "BF16", 1, 2, 1 },
	[NTX_TYPE_TQ1_0] = { "TQ1_0", 256, 54, 0 },
	[NTX_TYPE_TQ2_0] = { "TQ2_0", 256, 66, 0 },
	[NTX_TYPE_MXFP4] = { "MXFP4", 32, 17, 0 },
};

const struct ntx_type_info *ntx_type_get(uint32_t type)
{
	if (type >= NTX_TYPE_COUNT || !table[type].name)
		return NULL;
	return &table[type];
}

const char *ntx_type_name(uint32_t type)
{
	static _Thread_local char buf[32];
	const struct ntx_type_info *ti = ntx_type_get(type);

	if (ti)
		return ti->name;
	snprintf(buf, sizeof buf, "type %u", type);
	return buf;
}

int ntx_type_from_name(const char *name)
{
	int t;

	for (t = 0; t < NTX_TYPE_COUNT; t++) {
		if (table[t].name && strcasecmp(table[t].name, name) == 0)
			return t;
	}
	return -1;
}

int ntx_type_row_bytes(uint32_t type, int64_t n, uint64_t *bytes, struct ntx_err *err)
{
	const struct ntx_type_info *ti = ntx_type_get(type);
	uint64_t blocks;

	if (!ti)
		return ntx_err_set(err, NTX_EUNSUP, "unknown tensor type %u", type);
	if (n < 0)
		return ntx_err_set(err, NTX_EFORMAT, "negative element count %lld",
				   (long long)n);
	if (n % ti->block_size)
		return ntx_err_set(err, NTX_EFORMAT,
				   "row of %lld elements is not a multiple of the %s block size %d",
				   (long long)n, ti->name, ti->block_size);
	blocks = (uint64_t)n / (uint64_t)ti->block_size;
	if (blocks > UINT64_MAX / (uint64_t)ti->type_size)
		return ntx_err_set(err, NTX_EFORMAT, "row of %lld %s elements overflows",
				   (long long)n, ti->name);
	*bytes = blocks * (uint64_t)ti->type_size;
	return 0;
}
