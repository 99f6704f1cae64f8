/* plan70b.h - 70B-shaped model descriptions for the planner's unit tests
 * (test_plan.c, test_probe.c): Llama 3 70B hyperparameters and the byte
 * counts of each layer's tensors as llama.cpp would quantize them; no file
 * needed. */
#ifndef NTX_TEST_PLAN70B_H
#define NTX_TEST_PLAN70B_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "types.h"

#ifndef MiB
#define MiB (1ull << 20)
#endif

static uint64_t tbytes(int type, uint64_t n_elem)
{
	const struct ntx_type_info *ti = ntx_type_get((uint32_t)type);

	return n_elem / (uint64_t)ti->block_size * (uint64_t)ti->type_size;
}

/* llama.cpp's use_more_bits: which layers Q4_K_M gives more bits. */
static int more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Llama 3 70B shape; mix 6 = Q6_K everywhere, 4 = Q4_K_M (llama.cpp's
 * recipe for a 70B: attn_v Q5_K or Q6_K, ffn_down Q6_K on more_bits layers). */
static void make_70b(struct ntx_plan_model *pm, int mix)
{
	const uint64_t E = 8192, F = 28672, Q = 64 * 128, KV = 8 * 128, V = 128256;
	int l;

	memset(pm, 0, sizeof *pm);
	pm->path = strdup(mix == 6 ? "/models/llama-70b-q6_k.gguf" : "/models/llama-70b-q4_k_m.gguf");
	strcpy(pm->fingerprint, mix == 6 ? "00000000000000a6" : "00000000000000a4");
	pm->n_layer = 80;
	pm->n_embd = 8192;
	pm->n_ff = 28672;
	pm->n_head = 64;
	pm->n_head_kv = 8;
	pm->head_dim = 128;
	pm->n_ctx_train = 131072;
	pm->n_vocab = (int64_t)V;
	pm->layer_bytes = calloc(80, sizeof *pm->layer_bytes);
	for (l = 0; l < 80; l++) {
		int w = mix == 6 ? NTX_TYPE_Q6_K : NTX_TYPE_Q4_K;
		int vt = mix == 6 ? NTX_TYPE_Q6_K : more_bits(l, 80) ? NTX_TYPE_Q6_K : NTX_TYPE_Q5_K;
		int dt = mix == 6 || more_bits(l, 80) ? NTX_TYPE_Q6_K : NTX_TYPE_Q4_K;
		uint64_t norms = 2 * E * 4;
		uint64_t b[4] = { tbytes(w, E * Q) * 2 + tbytes(w, E * KV) + tbytes(w, E * F) * 2,
				  tbytes(vt, E * KV), tbytes(dt, F * E), norms };

		pm->layer_bytes[l] = b[0] + b[1] + b[2] + b[3];
		pm->layer_type_bytes[w] += b[0];
		pm->layer_type_bytes[vt] += b[1];
		pm->layer_type_bytes[dt] += b[2];
		pm->layer_type_bytes[NTX_TYPE_F32] += b[3];
	}
	pm->tok_embd_bytes = tbytes(mix == 6 ? NTX_TYPE_Q6_K : NTX_TYPE_Q4_K, E * V);
	pm->output_bytes = tbytes(NTX_TYPE_Q6_K, E * V);
	pm->other_bytes = E * 4 + 64 * 4;
	pm->file_size = 0;
	for (l = 0; l < 80; l++)
		pm->file_size += pm->layer_bytes[l];
	pm->file_size += pm->tok_embd_bytes + pm->output_bytes + pm->other_bytes + 8 * MiB;
}

#endif
