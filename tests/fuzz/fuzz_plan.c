/* fuzz_plan.c - libFuzzer target for the plan JSON reader
 * (ntx_plan_from_json): any input must be refused with a message or give a
 * plan that serialises and reads back. Built and run by scripts/fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ntx_err err;
	struct ntx_plan *p, *q;
	char *text = malloc(size + 1), *json;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	err.msg[0] = '\0';
	p = ntx_plan_from_json(text, size, "fuzz.json", &err);
	if (!p) {
		if (!err.msg[0])
			abort(); /* a refusal must say why */
		free(text);
		return 0;
	}
	json = ntx_plan_to_json(p, &err);
	if (!json)
		abort();
	q = ntx_plan_from_json(json, strlen(json), "round-trip.json", &err);
	if (!q)
		abort(); /* what we write, we read */
	ntx_plan_free(q);
	free(json);
	ntx_plan_free(p);
	free(text);
	return 0;
}
