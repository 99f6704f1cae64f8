/* layout.h - the layout of one layer's weights as a single contiguous buffer:
 * the tensors the forward pass uses, in ntx_layer_tensor() slot order,
 * each at an offset aligned to NTX_LAYER_ALIGN (an absent optional slot has
 * 0 bytes at the offset of the next). The pack file stores
 * every streamed layer in this layout (one extent per layer), pinned host
 * copies of RAM-tier layers use it, and the device ring buffers receive it,
 * so the engine builds weight pointers the same way for every tier. */
#ifndef NTX_LAYOUT_H
#define NTX_LAYOUT_H

#include <stdint.h>

#include "model.h"

#define NTX_LAYER_ALIGN 256

struct ntx_layer_layout {
	uint64_t offset[NTX_LAYER_NT]; /* of each tensor from the buffer start */
	uint64_t nbytes[NTX_LAYER_NT];
	uint64_t total;                /* bytes of the whole buffer (aligned) */
};

/* Compute the layout of layer lt. */
void ntx_layer_layout(const struct ntx_layer_tensors *lt, struct ntx_layer_layout *lo);

/* Copy layer lt's tensors from the GGUF map into dst (lo->total bytes) in
 * that layout; padding is zeroed. */
void ntx_layer_pack_copy(const struct ntx_layer_tensors *lt, const struct ntx_layer_layout *lo,
			 void *dst);

#endif
