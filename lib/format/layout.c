/* layout.c - one layer as a contiguous buffer (see layout.h). */
#include "layout.h"

#include <string.h>

void ntx_layer_layout(const struct ntx_layer_tensors *lt, struct ntx_layer_layout *lo)
{
	uint64_t off = 0;
	int i;

	for (i = 0; i < NTX_LAYER_NT; i++) {
		const struct ntx_gguf_tensor *t = ntx_layer_tensor(lt, i);
		uint64_t n = t ? t->nbytes : 0; /* an absent optional slot takes no space */

		lo->offset[i] = off;
		lo->nbytes[i] = n;
		off += (n + NTX_LAYER_ALIGN - 1) / NTX_LAYER_ALIGN * NTX_LAYER_ALIGN;
	}
	lo->total = off;
}

void ntx_layer_pack_copy(const struct ntx_layer_tensors *lt, const struct ntx_layer_layout *lo,
			 void *dst)
{
	unsigned char *d = dst;
	int i;

	for (i = 0; i < NTX_LAYER_NT; i++) {
		const struct ntx_gguf_tensor *t = ntx_layer_tensor(lt, i);
		uint64_t end = i + 1 < NTX_LAYER_NT ? lo->offset[i + 1] : lo->total;

		if (!t)
			continue;
		memcpy(d + lo->offset[i], t->data, t->nbytes);
		memset(d + lo->offset[i] + t->nbytes, 0, end - lo->offset[i] - t->nbytes);
	}
}
