/* fuzz_pack.c - libFuzzer target for the pack reader (pack.h): any input must
 * be rejected with a message or give a pack whose every extent lies inside
 * the input and decodes (or fails to decode) without reading or writing out
 * of bounds; the inspect document must always serialise. Each input is tried
 * twice: as it is, and with its directory and header checksums recomputed,
 * so that mutations reach the validation behind the checksums. Built and run
 * by scripts/fuzz-pack (clang -fsanitize=fuzzer,address,undefined). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "inspect.h"
#include "inspect_pack.h"
#include "pack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RAW_MAX (16u << 20) /* decode extents up to this size */

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void wr64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void check(const uint8_t *data, size_t size)
{
	struct ntx_err err;
	struct ntx_pack *p = ntx_pack_open_buffer(data, size, &err);
	json_t *doc;
	int x;

	if (!p) {
		if (!err.msg[0])
			abort(); /* a failure must say why */
		return;
	}
	for (x = 0; x < p->n_extents; x++) {
		const struct ntx_pack_extent *e = &p->extents[x];
		unsigned char *raw;

		if (e->offset > size || e->stored_size > size - e->offset ||
		    e->data_size > e->stored_size || ntx_pack_extent_for_layer(p, e->layer) != e)
			abort(); /* validation let an extent escape the file */
		if (e->raw_size > RAW_MAX)
			continue;
		raw = malloc(e->raw_size ? e->raw_size : 1);
		if (!raw)
			continue;
		(void)ntx_pack_decode_extent(p, e, data + e->offset, raw, 1, &err);
		(void)ntx_pack_decode_extent(p, e, data + e->offset, raw, 0, &err);
		if (e->compression == NTX_PACK_COMP_NONE) {
			/* in place: needs a writable copy of the stored bytes */
			memcpy(raw, data + e->offset, (size_t)e->raw_size);
			(void)ntx_pack_decode_extent(p, e, raw, raw, 1, &err);
		}
		free(raw);
	}
	doc = ntx_inspect_pack_json(p, "fuzz", NTX_INSPECT_FULL, &err);
	if (doc) {
		char *s = json_dumps(doc, JSON_INDENT(2)), *t;

		if (!s)
			abort(); /* the document must always serialise */
		t = ntx_inspect_pack_summary(doc);
		free(t);
		free(s);
		json_decref(doc);
	}
	ntx_pack_close(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *c;
	uint64_t dir;

	check(data, size);
	if (size < NTX_PACK_HEADER_SIZE)
		return 0;
	c = malloc(size);
	if (!c)
		return 0;
	memcpy(c, data, size);
	dir = rd64(c + 56);
	if (dir <= size - NTX_PACK_HEADER_SIZE)
		wr64(c + 112, ntx_hash64(c + NTX_PACK_HEADER_SIZE, (size_t)dir, 0));
	wr64(c + 120, ntx_hash64(c, 120, 0));
	check(c, size);
	free(c);
	return 0;
}
