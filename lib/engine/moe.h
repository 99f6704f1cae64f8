/* moe.h - the router of a mixture-of-experts layer, llama.cpp's
 * build_moe_ffn with gating SOFTMAX and norm_w (fixtures/moe/README.md,
 * section 2): p = softmax over all experts of the logits; the k experts of
 * largest p (ties: lowest index first), in descending order of p; their
 * weights p / max(sum of the k p, 6.103515625e-5), times scale when scale
 * is neither 0 nor 1. Pure C, no state: both engines route with it. */
#ifndef NTX_MOE_H
#define NTX_MOE_H

#include <stdint.h>

/* One token: logits[n_expert] -> ids[k] (expert indices, descending p) and
 * w[k]; gap (may be NULL): the router logit of the k-th chosen expert minus
 * that of the best expert left out (0 when k == n_expert), how near the
 * choice was to a tie (the measure of fixtures/moe/README.md, whose
 * near-ties are gaps below 0.1). 1 <= k <= n_expert <= NTX_MOE_MAX_EXPERT. */
#define NTX_MOE_MAX_EXPERT 1024
void ntx_moe_route(const float *logits, int n_expert, int k, double scale, int32_t *ids,
		   float *w, float *gap);

/* n_tok tokens: logits [n_tok][n_expert] -> sel [n_tok][k], wgt [n_tok][k],
 * each row as ntx_moe_route. */
void ntx_moe_route_rows(const float *logits, int n_tok, int n_expert, int k, double scale,
			int32_t *sel, float *wgt);

/* The expert split in a prompt pass: which of a layer's n CPU expert
 * groups (rows[i] rows each, experts of bytes bytes) are copied to VRAM
 * and computed by the GPU (up[i] = 1) and which the CPU computes, so that
 * both finish about together. A group costs the CPU bytes * max(1 / cpu,
 * rows / cpu_batch) seconds and the copy bytes / h2d (rates in bytes per
 * second; the GPU's compute overlaps the copies). Groups below min_rows
 * stay on the CPU; of the others the CPU takes the smallest as long as
 * that lowers the larger of the two times. Without rates (any <= 0) every
 * group of at least min_rows is copied. scratch: n ints. */
void ntx_moe_pick_uploads(const int *rows, int n, double bytes, double cpu, double cpu_batch,
			  double h2d, int min_rows, int *scratch, uint8_t *up);

#endif
