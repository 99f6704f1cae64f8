/* fuzz_experts.c - libFuzzer target for the routing-count reader
 * (ntx_expert_stats_from_json, behind ntx-plan --expert-stats): any input
 * must be refused with a message or give counts for every expert of every
 * layer, none above the document's tokens. The first input byte picks the
 * layer count, the second the expert count; the fingerprint is checked
 * when the first byte's top bit is set. Built and run by scripts/fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "expert_stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ntx_err err;
	uint64_t *counts = NULL;
	int n_layer, n_expert;
	char *text;

	if (size < 2)
		return 0;
	n_layer = 1 + data[0] % 16;
	n_expert = 1 + data[1] % 64;
	text = malloc(size - 1);
	if (!text)
		return 0;
	memcpy(text, data + 2, size - 2);
	text[size - 2] = '\0';
	err.msg[0] = '\0';
	if (ntx_expert_stats_from_json(text, size - 2, "fuzz.json", n_layer, n_expert,
				       data[0] & 128 ? "0123456789abcdef" : NULL, &counts, &err)) {
		if (!err.msg[0] || counts)
			abort();
	} else {
		volatile uint64_t sum = 0;
		int i;

		if (!counts)
			abort();
		for (i = 0; i < n_layer * n_expert; i++) /* every count readable (ASan) */
			sum += counts[i];
		(void)sum;
	}
	free(counts);
	free(text);
	return 0;
}
