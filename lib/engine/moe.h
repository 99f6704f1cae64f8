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

#endif
