/* fuzz_skip.c - libFuzzer target for the skip-set reader
 * (ntx_skip_from_json, behind --skip and --draft-skip): any input must
 * be refused with a message or give sorted, unique layers in range. The
 * first input byte picks the layer count, the second the set (-1: "skip").
 * Built and run by scripts/fuzz. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "skipset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ntx_err err;
	int *layers = NULL, n = 0, n_layer, set, i;
	char *text;

	if (size < 2)
		return 0;
	n_layer = 1 + data[0] % 128;
	set = data[1] < 200 ? -1 : data[1] - 200;
	text = malloc(size - 1);
	if (!text)
		return 0;
	memcpy(text, data + 2, size - 2);
	text[size - 2] = '\0';
	err.msg[0] = '\0';
	if (ntx_skip_from_json(text, size - 2, "fuzz.json", n_layer, set,
				    data[0] & 128 ? "0123456789abcdef" : NULL, &layers, &n, &err)) {
		if (!err.msg[0] || layers)
			abort();
	} else {
		for (i = 0; i < n; i++)
			if (layers[i] < 0 || layers[i] >= n_layer || (i && layers[i] <= layers[i - 1]))
				abort();
	}
	free(layers);
	free(text);
	return 0;
}
