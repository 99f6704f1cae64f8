/* test_cuda_kernels.c - the GEMV, matmul, quantization, dequantization,
 * element-wise, norm, argmax and cosine kernels of kernels/cuda/ntx_cuda.h
 * (GEMV: single matrices, several sharing one input with mixed types, and
 * the fused gate/up)
 * against their CPU twins, on fresh random data (fixed seed, never zeros),
 * outputs poisoned with NaN before each run so an unwritten element fails.
 * The bitwise guarantees of ntx_cuda.h: the q8 formats Q8_0 / Q8_K equal
 * ntx_quantize_act_ref; GEMV outputs of a token are the same for n_tok
 * 1..8 and any companions (every type, shapes with and without k-split);
 * gemv_multi segments == single GEMVs; gemv_swiglu == gemv, gemv, swiglu;
 * rmsnorm's q8 == quantize_q8_fmt of its float output (every format).
 * Mixture of experts: the router's logits (float64 reference, each token
 * alone the same bits), the gather of rows, the weighted sum of a token's
 * experts in slot order (bitwise the host's float sums), the per-head
 * q/k RMS norm in place.
 * RoPE and attention: test_cuda_attention.c; timings: test_cuda_bench.c.
 *
 *   test_cuda_kernels                all checks
 *   test_cuda_kernels --matmul-only  the matmul checks (run with NTX_NO_CUBLAS=1)
 *   test_cuda_kernels --probe        exit 0 if a CUDA device is usable
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_util.h"
#include "ntx_ops.h"

/* ---- tolerances (NMSE = sum (a - b)^2 / sum b^2) ----
 * GEMV_EXACT: q8 GEMV vs ntx_vec_dot_ref on activations built so that the
 *   per-32 q8 format and ggml's Q8_0 / Q8_K hold the same integers: only
 *   float summation order differs (~1e-7 relative; NMSE ~1e-14).
 * GEMV_Q8: q8 GEMV vs the float64 dot of dequantized weights with plain
 *   Gaussian activations: activation quantization noise, (2.2/127)^2/12 =
 *   2.5e-5 expected; 4x margin.
 * GEMV_FLOAT: float weights, float accumulation vs double.
 * MATMUL: activations (and non-F16 weights) rounded to F16: 2 x 2^-22 / 3
 *   relative noise power ~1.6e-7 per product; bound 1e-5.
 * ATTN: float softmax and sums in a different order: 1e-6.
 * EW: element-wise ops, rmsnorm, rope: float rounding only. */
#define NMSE_GEMV_EXACT 1e-8
#define NMSE_GEMV_Q8 2e-4
#define NMSE_GEMV_FLOAT 1e-10
#define NMSE_MATMUL 1e-5
#define NMSE_ATTN 1e-6
#define NMSE_EW 1e-10
#define NMSE_ROPE_F16 1e-6

#define SPLIT(t) (NTX_CUDA_SPLIT | (t))
static const uint32_t all_types[] = { NTX_TYPE_F32, NTX_TYPE_F16, NTX_TYPE_BF16, NTX_TYPE_Q4_0,
				      NTX_TYPE_Q5_0, NTX_TYPE_Q8_0, NTX_TYPE_Q4_K, NTX_TYPE_Q5_K, NTX_TYPE_Q6_K,
				      SPLIT(NTX_TYPE_Q4_0), SPLIT(NTX_TYPE_Q8_0), SPLIT(NTX_TYPE_Q6_K) };
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

/* n rounded up so that rows of type t can be in split rows (whole 16-byte
 * rows: 8 blocks) when t is a split type; n itself otherwise. */
static int64_t fit_n(uint32_t t, int64_t n)
{
	const int64_t m = 8 * (int64_t)block_of(t);

	if (!(t & NTX_CUDA_SPLIT) || ntx_cuda_split_type(ntx_cuda_base_type(t), n) == t)
		return n;
	return (n + m - 1) / m * m;
}

/* ---- q8 checks ---- */

static void test_quantize(void)
{
	const int n = 4096, nt = 3;
	float *x = rnd_gauss_vec((size_t)n * nt, 3.0f);
	float *dx = dev_up(x, (size_t)n * nt * 4);
	size_t qb = ntx_cuda_q8_bytes(n, nt), qsb = ntx_cuda_q8_qs_bytes(n, nt);
	unsigned char *dq = dev_alloc(qb), *hq = malloc(qb);
	long bad = 0;

	x[5] = 0.0f; /* a zero inside a block, and one all-zero block */
	for (int i = 64; i < 96; i++)
		x[i] = 0.0f;
	dev_put(dx, x, (size_t)n * nt * 4);
	dev_poison(dq, qb);
	T_CUDA(ntx_cuda_quantize_q8(dx, dq, n, nt, NULL, &g_err));
	dev_get(hq, dq, qb);
	for (int t = 0; t < nt; t++) {
		for (int b = 0; b < n / 32; b++) {
			int8_t q[32];
			float d, ds, got[2];

			ntx_ref_q8_32(x + (size_t)t * n + 32 * b, q, &d, &ds);
			memcpy(got, hq + qsb + ((size_t)t * (n / 32) + b) * 8, 8);
			bad += memcmp(q, hq + (size_t)t * n + 32 * b, 32) != 0 || got[0] != d ||
			       got[1] != ds;
		}
	}
	t_ok(bad == 0, "quantize_q8: %d x %d bit-identical to the host quantizer (%ld bad blocks)", nt,
	     n, bad);
	free(x), free(hq);
}

/* The CPU-matching formats: Gaussian rows plus the edge cases of the Q8_K
 * sign rule (+max and -max in one block, the first wins), a zero block. */
static void test_quantize_fmt(void)
{
	const int n = 4096, nt = 3;
	static const char *names[3] = { "32 (float d)", "Q8_0", "Q8_K" };

	for (int fmt = 0; fmt < 3; fmt++) {
		float *x = rnd_gauss_vec((size_t)n * nt, 2.0f), *dx;
		size_t qb = ntx_cuda_q8_bytes(n, nt);
		unsigned char *dq = dev_alloc(qb), *hq = malloc(qb);
		long bad;

		for (int i = 256; i < 512; i++)
			x[i] = 0.0f;
		x[600] = -40.0f, x[601] = 40.0f, x[n + 700] = 41.0f, x[n + 701] = -41.0f;
		dx = dev_up(x, (size_t)n * nt * 4);
		dev_poison(dq, qb);
		T_CUDA(ntx_cuda_quantize_q8_fmt(dx, dq, n, nt, fmt, NULL, &g_err));
		dev_get(hq, dq, qb);
		bad = q8_bad_blocks(x, n, nt, fmt, hq);
		t_ok(bad == 0, "quantize_q8_fmt %s: %d x %d equal to the host oracle (ntx_quantize_act_ref for Q8_0/Q8_K): %ld bad blocks",
		     names[fmt], nt, n, bad);
		dev_free(dx), dev_free(dq);
		free(x), free(hq);
	}
	t_ok(ntx_cuda_q8_fmt(NTX_TYPE_Q4_0) == NTX_CUDA_Q8F_Q8_0 && ntx_cuda_q8_fmt(NTX_TYPE_Q8_0) == NTX_CUDA_Q8F_Q8_0 &&
		     ntx_cuda_q8_fmt(NTX_TYPE_Q5_0) == NTX_CUDA_Q8F_Q8_0 &&
		     ntx_cuda_q8_fmt(NTX_TYPE_Q4_K) == NTX_CUDA_Q8F_Q8_K && ntx_cuda_q8_fmt(NTX_TYPE_Q6_K) == NTX_CUDA_Q8F_Q8_K &&
		     ntx_cuda_q8_fmt(NTX_TYPE_F16) == -1 && ntx_cuda_q8_group(NTX_CUDA_Q8F_Q8_K) == 256 &&
		     ntx_cuda_q8_group(NTX_CUDA_Q8F_Q8_0) == 32,
	     "q8_fmt / q8_group: Q4_0, Q5_0, Q8_0 -> Q8_0 (32); K-quants -> Q8_K (256); F16 -> -1");
	{
		struct ntx_err e = { 0 };
		void *p = dev_alloc(8192);

		t_ok(ntx_cuda_quantize_q8_fmt(p, p, 288, 1, NTX_CUDA_Q8F_Q8_K, NULL, &e) == -1 && e.msg[0],
		     "quantize_q8_fmt: Q8_K with n = 288 rejected: %s", e.msg);
		dev_free(p);
	}
}

/* The q8 format the engine gives weight type t (ntx_cuda_q8_fmt). */
static int q8_fmt_of(uint32_t t)
{
	int f = ntx_cuda_q8_fmt(t);

	return f < 0 ? NTX_CUDA_Q8F_32 : f;
}

/* ---- GEMV ---- */

static double gemv_case(uint32_t t, int64_t n_in, int64_t n_out, int n_tok, int acc, int strict)
{
	n_in = fit_n(t, n_in);
	size_t rb = row_bytes(t, n_in), wb = rb * (size_t)n_out;
	unsigned char *w = malloc(wb);
	float *x = malloc((size_t)n_tok * n_in * 4), *y0 = rnd_gauss_vec((size_t)n_tok * n_out, 1.0f);
	float *y = malloc((size_t)n_tok * n_out * 4);
	double *ref = malloc((size_t)n_tok * n_out * 8), *got = malloc((size_t)n_tok * n_out * 8);
	void *dw, *dxq = NULL;
	float *dx, *dy;
	double e;
	int q8 = ntx_cuda_wtype_q8(t);

	rnd_rows(t, w, n_in, n_out);
	for (int k = 0; k < n_tok; k++) {
		if (strict)
			rnd_strict_acts(x + (size_t)k * n_in, n_in);
		else
			for (int64_t i = 0; i < n_in; i++)
				x[(size_t)k * n_in + i] = rnd_gauss();
	}
	ref_gemv(t, w, n_in, n_out, x, n_tok, strict, ref);
	dw = wdev_up(t, w, n_in, n_out);
	dx = dev_up(x, (size_t)n_tok * n_in * 4);
	dy = dev_alloc((size_t)n_tok * n_out * 4);
	if (acc)
		dev_put(dy, y0, (size_t)n_tok * n_out * 4);
	else
		dev_poison(dy, (size_t)n_tok * n_out * 4);
	if (q8) {
		dxq = dev_alloc(ntx_cuda_q8_bytes(n_in, n_tok));
		T_CUDA(ntx_cuda_quantize_q8_fmt(dx, dxq, n_in, n_tok, q8_fmt_of(t), NULL, &g_err));
	}
	T_CUDA(ntx_cuda_gemv(t, dw, n_in, n_out, dx, dxq, dy, n_tok, acc, NULL, &g_err));
	dev_get(y, dy, (size_t)n_tok * n_out * 4);
	for (size_t i = 0; i < (size_t)n_tok * n_out; i++) {
		got[i] = y[i];
		if (acc)
			ref[i] += y0[i];
	}
	e = nmse_d(got, ref, (size_t)n_tok * n_out);
	dev_free(dw), dev_free(dx), dev_free(dy), dev_free(dxq);
	free(w), free(x), free(y0), free(y), free(ref), free(got);
	return e;
}

static void test_gemv(void)
{
	static const int toks[] = { 1, 2, 3, 4, 5, 8 };

	for (int i = 0; i < N_TYPES; i++) {
		uint32_t t = all_types[i];
		int q8 = ntx_cuda_wtype_q8(t), bs = q8 ? block_of(t) : 8;
		double tol_exact = q8 ? NMSE_GEMV_EXACT : NMSE_GEMV_FLOAT;
		double tol_rand = q8 ? NMSE_GEMV_Q8 : NMSE_GEMV_FLOAT, e, worst = 0;

		/* 1280 = one full stage of 1024 plus a partial one; 67 rows: not a
		 * multiple of the rows per CTA */
		for (int k = 0; k < 6; k++) {
			e = gemv_case(t, 1280, 67, toks[k], k & 1, 1);
			worst = e > worst ? e : worst;
		}
		t_ok(worst <= tol_exact, "gemv %s 1280x67 n_tok 1..8 (+accumulate) vs ntx_vec_dot_ref: NMSE %.3g <= %g",
		     type_name(t), worst, tol_exact);
		e = gemv_case(t, bs, 1, 1, 0, 1);
		t_ok(e <= tol_exact, "gemv %s n_in = one block, one row: NMSE %.3g", type_name(t), e);
		e = gemv_case(t, bs, 3, 8, 1, 1);
		t_ok(e <= tol_exact, "gemv %s n_in = one block, 3 rows, 8 tokens: NMSE %.3g", type_name(t), e);
		e = gemv_case(t, 4096, 37, 3, 0, 0);
		t_ok(e <= tol_rand, "gemv %s 4096x37 Gaussian x vs float64 dequantized dot: NMSE %.3g <= %g",
		     type_name(t), e, tol_rand);
	}
}

/* ntx_cuda_gemv_multi: n_seg matrices of the given types (rows rows[i])
 * sharing one input, segment i accumulating when acc_mask bit i is set
 * (else its output is poisoned first); worst NMSE over the segments against
 * ntx_vec_dot_ref (strict activations). */
static double multi_case(const uint32_t *types, const int64_t *rows, int n_seg, int64_t n_in,
			 int n_tok, unsigned acc_mask)
{
	struct ntx_cuda_gemv_seg seg[NTX_CUDA_GEMV_MAX_SEG];
	unsigned char *w[NTX_CUDA_GEMV_MAX_SEG];
	float *y0[NTX_CUDA_GEMV_MAX_SEG], *x = malloc((size_t)n_tok * n_in * 4), *dx;
	void *dxq = dev_alloc(ntx_cuda_q8_bytes(n_in, n_tok));
	double worst = 0;

	for (int k = 0; k < n_tok; k++)
		rnd_strict_acts(x + (size_t)k * n_in, n_in);
	dx = dev_up(x, (size_t)n_tok * n_in * 4);
	T_CUDA(ntx_cuda_quantize_q8(dx, dxq, n_in, n_tok, NULL, &g_err));
	for (int i = 0; i < n_seg; i++) {
		size_t wb = row_bytes(types[i], n_in) * (size_t)rows[i], ny = (size_t)n_tok * rows[i];

		w[i] = malloc(wb);
		rnd_rows(types[i], w[i], n_in, rows[i]);
		y0[i] = rnd_gauss_vec(ny, 1.0f);
		seg[i].wtype = types[i];
		seg[i].w = wdev_up(types[i], w[i], n_in, rows[i]);
		seg[i].n_out = rows[i];
		seg[i].y = dev_alloc(ny * 4);
		seg[i].accumulate = (acc_mask >> i) & 1;
		if (seg[i].accumulate)
			dev_put(seg[i].y, y0[i], ny * 4);
		else
			dev_poison(seg[i].y, ny * 4);
	}
	T_CUDA(ntx_cuda_gemv_multi(seg, n_seg, n_in, dx, dxq, n_tok, NULL, &g_err));
	for (int i = 0; i < n_seg; i++) {
		size_t ny = (size_t)n_tok * rows[i];
		float *y = malloc(ny * 4);
		double *ref = malloc(ny * 8), *got = malloc(ny * 8), e;

		ref_gemv(types[i], w[i], n_in, rows[i], x, n_tok, 1, ref);
		dev_get(y, seg[i].y, ny * 4);
		for (size_t k = 0; k < ny; k++) {
			got[k] = y[k];
			if (seg[i].accumulate)
				ref[k] += y0[i][k];
		}
		e = nmse_d(got, ref, ny);
		worst = e > worst ? e : worst;
		dev_free((void *)seg[i].w), dev_free(seg[i].y);
		free(w[i]), free(y0[i]), free(y), free(ref), free(got);
	}
	dev_free(dx), dev_free(dxq);
	free(x);
	return worst;
}

static void test_gemv_multi(void)
{
	static const struct {
		const char *what;
		int n_seg;
		uint32_t t[4];
		int64_t rows[4], n_in;
		unsigned acc;
	} cases[] = {
		/* Q4_K_M attention: q, k Q4_K, v Q6_K (one launch) */
		{ "Q4_K/Q4_K/Q6_K", 3, { NTX_TYPE_Q4_K, NTX_TYPE_Q4_K, NTX_TYPE_Q6_K },
		  { 256, 64, 64 }, 2048, 0 },
		/* every quantized type, partial stages, odd rows, accumulate */
		{ "Q4_0/Q8_0/Q5_K/Q6_K", 4, { NTX_TYPE_Q4_0, NTX_TYPE_Q8_0, NTX_TYPE_Q5_K, NTX_TYPE_Q6_K },
		  { 67, 5, 33, 1 }, 1280, 0x5 },
		/* Q5_0 beside the other Q8_0-format types, partial stages */
		{ "Q5_0/Q4_0/Q5_0/Q8_0", 4, { NTX_TYPE_Q5_0, NTX_TYPE_Q4_0, NTX_TYPE_Q5_0, NTX_TYPE_Q8_0 },
		  { 67, 5, 33, 1 }, 1280, 0x6 },
		/* few rows, long rows: 4 warps share each row group */
		{ "Q4_K/Q4_0/Q6_K long rows", 3, { NTX_TYPE_Q4_K, NTX_TYPE_Q4_0, NTX_TYPE_Q6_K },
		  { 9, 3, 17 }, 8448, 0x2 },
		/* float segments: one launch per float type; mixed with q8 */
		{ "F16/F16/F32", 3, { NTX_TYPE_F16, NTX_TYPE_F16, NTX_TYPE_F32 }, { 40, 8, 8 }, 1024, 0x4 },
		{ "Q4_K/F16/BF16/Q8_0", 4, { NTX_TYPE_Q4_K, NTX_TYPE_F16, NTX_TYPE_BF16, NTX_TYPE_Q8_0 },
		  { 31, 7, 7, 12 }, 768, 0x9 },
		{ "one Q6_K segment", 1, { NTX_TYPE_Q6_K }, { 130 }, 4096, 0x1 },
		/* resident Q4_K_M attention: q, k Q4_K, v Q6_K in split rows */
		{ "Q4_K/Q4_K/Q6_K-split", 3, { NTX_TYPE_Q4_K, NTX_TYPE_Q4_K, SPLIT(NTX_TYPE_Q6_K) },
		  { 256, 64, 64 }, 2048, 0 },
		/* split and GGUF rows in one call: two launches */
		{ "Q4_0-split/Q8_0/Q8_0-split/Q6_K", 4,
		  { SPLIT(NTX_TYPE_Q4_0), NTX_TYPE_Q8_0, SPLIT(NTX_TYPE_Q8_0), NTX_TYPE_Q6_K },
		  { 67, 5, 33, 1 }, 1280, 0x5 },
	};
	static const int toks[] = { 1, 2, 3, 5, 8 };

	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		double worst = 0;

		for (int k = 0; k < 5; k++) {
			double e = multi_case(cases[c].t, cases[c].rows, cases[c].n_seg, cases[c].n_in,
					      toks[k], cases[c].acc);

			worst = e > worst ? e : worst;
		}
		t_ok(worst <= NMSE_GEMV_EXACT,
		     "gemv_multi %s n_in %lld n_tok 1..8 (poisoned or accumulated outputs): NMSE %.3g <= %g",
		     cases[c].what, (long long)cases[c].n_in, worst, NMSE_GEMV_EXACT);
	}
	{
		struct ntx_err e = { 0 };
		struct ntx_cuda_gemv_seg sg[5];
		void *p = dev_alloc(4096);

		for (int i = 0; i < 5; i++)
			sg[i] = (struct ntx_cuda_gemv_seg){ NTX_TYPE_Q4_K, p, 4, p, 0 };
		t_ok(ntx_cuda_gemv_multi(sg, 5, 256, p, p, 1, NULL, &e) == -1 && e.msg[0],
		     "gemv_multi: 5 segments rejected: %s", e.msg);
		sg[1].wtype = NTX_TYPE_Q2_K;
		t_ok(ntx_cuda_gemv_multi(sg, 2, 256, p, p, 1, NULL, &e) == -1 && e.msg[0],
		     "gemv_multi: an unsupported type rejected: %s", e.msg);
		dev_free(p);
	}
}

/* Fused gate/up (same type) and the two-launch path (different types). */
static double swiglu_case(uint32_t gt, uint32_t ut, int64_t n_in, int64_t n_out, int n_tok)
{
	n_in = fit_n(ut, fit_n(gt, n_in));
	size_t gb = row_bytes(gt, n_in) * n_out, ub = row_bytes(ut, n_in) * n_out;
	size_t ny = (size_t)n_tok * n_out;
	unsigned char *wg = malloc(gb), *wu = malloc(ub);
	float *x = malloc((size_t)n_tok * n_in * 4), *h = malloc(ny * 4);
	double *rg = malloc(ny * 8), *ru = malloc(ny * 8), *got = malloc(ny * 8), e;
	void *dwg, *dwu, *dxq;
	float *dx, *dh;

	rnd_rows(gt, wg, n_in, n_out);
	rnd_rows(ut, wu, n_in, n_out);
	for (int k = 0; k < n_tok; k++)
		rnd_strict_acts(x + (size_t)k * n_in, n_in);
	ref_gemv(gt, wg, n_in, n_out, x, n_tok, 1, rg);
	ref_gemv(ut, wu, n_in, n_out, x, n_tok, 1, ru);
	for (size_t i = 0; i < ny; i++)
		rg[i] = rg[i] / (1.0 + exp(-rg[i])) * ru[i];
	dwg = wdev_up(gt, wg, n_in, n_out), dwu = wdev_up(ut, wu, n_in, n_out);
	dx = dev_up(x, (size_t)n_tok * n_in * 4);
	dxq = dev_alloc(ntx_cuda_q8_bytes(n_in, n_tok));
	dh = dev_alloc(ny * 4);
	dev_poison(dh, ny * 4);
	T_CUDA(ntx_cuda_quantize_q8(dx, dxq, n_in, n_tok, NULL, &g_err));
	T_CUDA(ntx_cuda_gemv_swiglu(gt, dwg, ut, dwu, n_in, n_out, dx, dxq, dh, n_tok, NULL, &g_err));
	dev_get(h, dh, ny * 4);
	for (size_t i = 0; i < ny; i++)
		got[i] = h[i];
	e = nmse_d(got, rg, ny);
	dev_free(dwg), dev_free(dwu), dev_free(dx), dev_free(dxq), dev_free(dh);
	free(wg), free(wu), free(x), free(h), free(rg), free(ru), free(got);
	return e;
}

static void test_swiglu_gemv(void)
{
	static const uint32_t pairs[][2] = {
		{ NTX_TYPE_Q4_K, NTX_TYPE_Q4_K }, { NTX_TYPE_Q4_0, NTX_TYPE_Q4_0 },
		{ NTX_TYPE_Q5_0, NTX_TYPE_Q5_0 }, { NTX_TYPE_Q5_0, NTX_TYPE_Q8_0 },
		{ NTX_TYPE_Q6_K, NTX_TYPE_Q6_K }, { NTX_TYPE_F16, NTX_TYPE_F16 },
		{ NTX_TYPE_BF16, NTX_TYPE_BF16 }, { NTX_TYPE_Q4_K, NTX_TYPE_Q6_K },
		{ NTX_TYPE_F16, NTX_TYPE_Q8_0 }, { SPLIT(NTX_TYPE_Q6_K), SPLIT(NTX_TYPE_Q6_K) },
		{ SPLIT(NTX_TYPE_Q8_0), SPLIT(NTX_TYPE_Q8_0) }, { SPLIT(NTX_TYPE_Q4_0), NTX_TYPE_Q4_K },
	};

	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		uint32_t g = pairs[i][0], u = pairs[i][1];
		double tol = ntx_cuda_wtype_q8(g) || ntx_cuda_wtype_q8(u) ? NMSE_GEMV_EXACT : NMSE_GEMV_FLOAT;
		double e1 = swiglu_case(g, u, 1536, 45, 1), e2 = swiglu_case(g, u, 1536, 45, 8);
		double e3 = swiglu_case(g, u, 2048, 29, 3);
		/* long rows, few of them: warps split the rows */
		double e4 = swiglu_case(g, u, 8448, 13, 1), e5 = swiglu_case(g, u, 8448, 13, 4);
		double e = fmax(fmax(e1, fmax(e2, e3)), fmax(e4, e5));

		t_ok(e <= tol, "gemv_swiglu %s/%s n_tok 1, 3, 4, 8, n_in up to 8448: NMSE %.3g <= %g",
		     type_name(g), type_name(u), e, tol);
	}
}

/* ---- bitwise guarantees of the GEMVs ---- */

/* Upload n_tok rows of x (float and q8 in the type's format). */
static void acts_up(uint32_t t, const float *x, int64_t n_in, int n_tok, float **dx, void **dxq)
{
	*dx = dev_up(x, (size_t)n_tok * n_in * 4);
	*dxq = dev_alloc(ntx_cuda_q8_bytes(n_in, n_tok));
	if (ntx_cuda_wtype_q8(t) == 1)
		T_CUDA(ntx_cuda_quantize_q8_fmt(*dx, *dxq, n_in, n_tok, q8_fmt_of(t), NULL, &g_err));
}

/* Batch invariance: y of 8 reference tokens in one launch; then launches
 * of k = 1..8 tokens holding some of them in other slots, with a fresh
 * companion in slot 0: each reference token's outputs must be bitwise the
 * same. Accumulate: y0 + v, bitwise. */
static long gemv_invariance(uint32_t t, int64_t n_in, int64_t n_out)
{
	n_in = fit_n(t, n_in);
	size_t wb = row_bytes(t, n_in) * (size_t)n_out;
	unsigned char *w = malloc(wb);
	float *xr = rnd_gauss_vec((size_t)8 * n_in, 1.0f), *y8 = malloc((size_t)8 * n_out * 4);
	float *x = malloc((size_t)8 * n_in * 4), *y = malloc((size_t)8 * n_out * 4);
	float *y0 = rnd_gauss_vec((size_t)8 * n_out, 1.0f);
	void *dw, *dxq;
	float *dx, *dy = dev_alloc((size_t)8 * n_out * 4);
	long bad = 0;

	rnd_rows(t, w, n_in, n_out);
	dw = wdev_up(t, w, n_in, n_out);
	acts_up(t, xr, n_in, 8, &dx, &dxq);
	dev_poison(dy, (size_t)8 * n_out * 4);
	T_CUDA(ntx_cuda_gemv(t, dw, n_in, n_out, dx, dxq, dy, 8, 0, NULL, &g_err));
	dev_get(y8, dy, (size_t)8 * n_out * 4);
	dev_free(dx), dev_free(dxq);
	for (int k = 1; k <= 8; k++) {
		int src[8];

		for (int i = 0; i < k; i++) {
			src[i] = (3 * i + k) % 8; /* distinct reference tokens */
			if (i == 0 && k > 1)
				src[i] = -1;      /* a fresh companion */
			if (src[i] < 0)
				for (int64_t e = 0; e < n_in; e++)
					x[(size_t)i * n_in + e] = 3.0f * rnd_gauss();
			else
				memcpy(x + (size_t)i * n_in, xr + (size_t)src[i] * n_in, (size_t)n_in * 4);
		}
		acts_up(t, x, n_in, k, &dx, &dxq);
		for (int acc = 0; acc < 2; acc++) {
			if (acc)
				dev_put(dy, y0, (size_t)k * n_out * 4);
			else
				dev_poison(dy, (size_t)k * n_out * 4);
			T_CUDA(ntx_cuda_gemv(t, dw, n_in, n_out, dx, dxq, dy, k, acc, NULL, &g_err));
			dev_get(y, dy, (size_t)k * n_out * 4);
			for (int i = 0; i < k; i++) {
				if (src[i] < 0)
					continue;
				for (int64_t r = 0; r < n_out; r++) {
					float want = y8[(size_t)src[i] * n_out + r];

					if (acc)
						want = y0[(size_t)i * n_out + r] + want;
					bad += memcmp(&want, &y[(size_t)i * n_out + r], 4) != 0;
				}
			}
		}
		dev_free(dx), dev_free(dxq);
	}
	dev_free(dw), dev_free(dy);
	free(w), free(xr), free(y8), free(x), free(y), free(y0);
	return bad;
}

static void test_gemv_invariance(void)
{
	/* (n_in, n_out): k-split 8 (few rows, long rows), 2, 1 (short rows),
	 * a partial last tile everywhere */
	static const int64_t shapes[3][2] = { { 8192, 40 }, { 2048, 300 }, { 512, 1100 } };

	for (int i = 0; i < N_TYPES; i++) {
		long bad = 0;

		for (int s = 0; s < 3; s++)
			bad += gemv_invariance(all_types[i], shapes[s][0], shapes[s][1]);
		/* required for the quantized types (the engine's decode path);
		 * measured only for float weights, whose GEMV splits rows by
		 * n_tok (ntx_cuda.h) */
		if (ntx_cuda_wtype_q8(all_types[i]) == 1)
			t_ok(bad == 0,
			     "gemv %s batch invariance: n_tok 1..8, other slots and companions, (+accumulate), 3 shapes: %ld values differ",
			     type_name(all_types[i]), bad);
		else
			t_diag("gemv %s batch invariance (not guaranteed for float weights): %ld values differ",
			       type_name(all_types[i]), bad);
	}
}

/* gemv_multi segments == ntx_cuda_gemv on each matrix, bitwise. */
static void test_multi_bitwise(void)
{
	static const struct {
		const char *what;
		int n_seg;
		uint32_t t[4];
		int64_t rows[4], n_in;
	} cases[] = {
		{ "Q4_K/Q4_K/Q6_K", 3, { NTX_TYPE_Q4_K, NTX_TYPE_Q4_K, NTX_TYPE_Q6_K }, { 4096, 1024, 1024 }, 4096 },
		{ "Q5_K/Q6_K/Q4_K/Q5_K", 4, { NTX_TYPE_Q5_K, NTX_TYPE_Q6_K, NTX_TYPE_Q4_K, NTX_TYPE_Q5_K }, { 67, 5, 300, 17 }, 2048 },
		{ "Q4_0/Q8_0/Q4_0", 3, { NTX_TYPE_Q4_0, NTX_TYPE_Q8_0, NTX_TYPE_Q4_0 }, { 33, 500, 8 }, 1536 },
		{ "Q5_0/Q4_0-split/Q5_0", 3, { NTX_TYPE_Q5_0, SPLIT(NTX_TYPE_Q4_0), NTX_TYPE_Q5_0 }, { 33, 500, 8 }, 1536 },
		{ "Q4_K/Q4_K/Q6_K-split", 3, { NTX_TYPE_Q4_K, NTX_TYPE_Q4_K, SPLIT(NTX_TYPE_Q6_K) }, { 4096, 1024, 1024 }, 4096 },
		{ "Q4_0-split/Q8_0-split/Q6_K/Q4_0-split", 4, { SPLIT(NTX_TYPE_Q4_0), SPLIT(NTX_TYPE_Q8_0), NTX_TYPE_Q6_K, SPLIT(NTX_TYPE_Q4_0) }, { 33, 500, 8, 70 }, 1536 },
		{ "F16/F32/BF16/F16", 4, { NTX_TYPE_F16, NTX_TYPE_F32, NTX_TYPE_BF16, NTX_TYPE_F16 }, { 40, 8, 300, 7 }, 1024 },
	};
	static const int toks[] = { 1, 3, 8 };

	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		long bad = 0;

		for (int k = 0; k < 3; k++) {
			const int nt = toks[k];
			const int64_t n_in = cases[c].n_in;
			struct ntx_cuda_gemv_seg seg[4];
			float *x = rnd_gauss_vec((size_t)nt * n_in, 1.0f), *dx, *ys[4];
			void *dxq;

			acts_up(cases[c].t[0], x, n_in, nt, &dx, &dxq);
			for (int i = 0; i < cases[c].n_seg; i++) {
				size_t wb = row_bytes(cases[c].t[i], n_in) * cases[c].rows[i];
				size_t ny = (size_t)nt * cases[c].rows[i];
				unsigned char *w = malloc(wb);
				float *y0 = rnd_gauss_vec(ny, 1.0f);

				rnd_rows(cases[c].t[i], w, n_in, cases[c].rows[i]);
				seg[i].wtype = cases[c].t[i];
				seg[i].w = wdev_up(cases[c].t[i], w, n_in, cases[c].rows[i]);
				seg[i].n_out = cases[c].rows[i];
				seg[i].y = dev_up(y0, ny * 4);
				seg[i].accumulate = i & 1;
				ys[i] = dev_up(y0, ny * 4);
				free(w), free(y0);
			}
			T_CUDA(ntx_cuda_gemv_multi(seg, cases[c].n_seg, n_in, dx, dxq, nt, NULL, &g_err));
			for (int i = 0; i < cases[c].n_seg; i++) {
				size_t ny = (size_t)nt * cases[c].rows[i];
				float *a = malloc(ny * 4), *b = malloc(ny * 4);

				T_CUDA(ntx_cuda_gemv(seg[i].wtype, seg[i].w, n_in, seg[i].n_out, dx, dxq, ys[i], nt,
						     seg[i].accumulate, NULL, &g_err));
				dev_get(a, seg[i].y, ny * 4);
				dev_get(b, ys[i], ny * 4);
				for (size_t e = 0; e < ny; e++)
					bad += memcmp(a + e, b + e, 4) != 0;
				dev_free((void *)seg[i].w), dev_free(seg[i].y), dev_free(ys[i]);
				free(a), free(b);
			}
			dev_free(dx), dev_free(dxq);
			free(x);
		}
		t_ok(bad == 0, "gemv_multi %s == single gemv per segment bitwise, n_tok 1, 3, 8 (+accumulate): %ld differ",
		     cases[c].what, bad);
	}
}

/* gemv_swiglu == gemv (gate), gemv (up), swiglu, bitwise. */
static void test_swiglu_bitwise(void)
{
	static const uint32_t pairs[][2] = {
		{ NTX_TYPE_Q4_K, NTX_TYPE_Q4_K }, { NTX_TYPE_Q6_K, NTX_TYPE_Q6_K }, { NTX_TYPE_Q5_K, NTX_TYPE_Q5_K },
		{ NTX_TYPE_Q4_0, NTX_TYPE_Q4_0 }, { NTX_TYPE_Q8_0, NTX_TYPE_Q8_0 }, { NTX_TYPE_F16, NTX_TYPE_F16 },
		{ NTX_TYPE_BF16, NTX_TYPE_BF16 }, { NTX_TYPE_Q4_K, NTX_TYPE_Q6_K }, { NTX_TYPE_Q5_0, NTX_TYPE_Q5_0 },
		{ SPLIT(NTX_TYPE_Q6_K), SPLIT(NTX_TYPE_Q6_K) }, { SPLIT(NTX_TYPE_Q4_0), SPLIT(NTX_TYPE_Q4_0) },
		{ SPLIT(NTX_TYPE_Q8_0), SPLIT(NTX_TYPE_Q8_0) }, { NTX_TYPE_Q4_K, SPLIT(NTX_TYPE_Q6_K) },
	};
	static const int toks[] = { 1, 5, 8 };
	static const int64_t shapes[2][2] = { { 4096, 300 }, { 1024, 37 } };

	for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
		uint32_t gt = pairs[p][0], ut = pairs[p][1];
		long bad = 0;

		for (int s = 0; s < 2; s++) {
			for (int k = 0; k < 3; k++) {
				const int64_t n_in = fit_n(ut, fit_n(gt, shapes[s][0])), n_out = shapes[s][1];
				const int nt = toks[k];
				size_t gb = row_bytes(gt, n_in) * n_out, ub = row_bytes(ut, n_in) * n_out;
				size_t ny = (size_t)nt * n_out;
				unsigned char *wg = malloc(gb), *wu = malloc(ub);
				float *x = rnd_gauss_vec((size_t)nt * n_in, 1.0f), *h = malloc(ny * 4);
				float *h2 = malloc(ny * 4), *dx, *dh = dev_alloc(ny * 4), *dg = dev_alloc(ny * 4);
				float *du = dev_alloc(ny * 4);
				void *dwg, *dwu, *dxq;

				rnd_rows(gt, wg, n_in, n_out);
				rnd_rows(ut, wu, n_in, n_out);
				dwg = wdev_up(gt, wg, n_in, n_out), dwu = wdev_up(ut, wu, n_in, n_out);
				acts_up(ntx_cuda_wtype_q8(gt) == 1 ? gt : ut, x, n_in, nt, &dx, &dxq);
				dev_poison(dh, ny * 4);
				T_CUDA(ntx_cuda_gemv_swiglu(gt, dwg, ut, dwu, n_in, n_out, dx, dxq, dh, nt, NULL,
							    &g_err));
				T_CUDA(ntx_cuda_gemv(gt, dwg, n_in, n_out, dx, dxq, dg, nt, 0, NULL, &g_err));
				T_CUDA(ntx_cuda_gemv(ut, dwu, n_in, n_out, dx, dxq, du, nt, 0, NULL, &g_err));
				T_CUDA(ntx_cuda_swiglu(dg, dg, du, (int64_t)ny, NULL, &g_err));
				dev_get(h, dh, ny * 4);
				dev_get(h2, dg, ny * 4);
				for (size_t e = 0; e < ny; e++)
					bad += memcmp(h + e, h2 + e, 4) != 0;
				dev_free(dwg), dev_free(dwu), dev_free(dx), dev_free(dxq), dev_free(dh);
				dev_free(dg), dev_free(du);
				free(wg), free(wu), free(x), free(h), free(h2);
			}
		}
		t_ok(bad == 0, "gemv_swiglu %s/%s == gemv, gemv, swiglu bitwise (n_tok 1, 5, 8): %ld differ",
		     type_name(gt), type_name(ut), bad);
	}
}

/* Every GEMV check: accuracy, batch invariance, gemv_multi and the fused
 * gate/up, bitwise where the kernels promise it. */
static void test_gemv_all(void)
{
	test_gemv();
	test_gemv_invariance();
	test_multi_bitwise();
	test_swiglu_bitwise();
	test_gemv_multi();
	test_swiglu_gemv();
}

/* The checks again with the tensor-core GEMV off (the switch gemv_mma = 0:
 * the dp4a lanes for every token count); on (the default) the 2..8-token
 * launches of Q4_K / split Q6_K went through it above, and each check
 * compares them with the single-token dp4a kernel bitwise. */
static void test_gemv_mma(void)
{
	struct ntx_tunables tun;

	ntx_tunables_from_env(&tun);
	tun.gemv_mma = 0;
	ntx_cuda_tunables_set(&tun);
	t_diag("GEMV checks with the tensor-core kernel off (gemv_mma = 0)");
	test_gemv_all();
	ntx_tunables_from_env(&tun);
	ntx_cuda_tunables_set(&tun);
}


/* ---- matmul ---- */

static void test_matmul_one(uint32_t t, int64_t n_in, int64_t n_out, int n_tok, int acc)
{
	n_in = fit_n(t, n_in);
	size_t rb = row_bytes(t, n_in), wb = rb * n_out, ny = (size_t)n_tok * n_out;
	unsigned char *w = malloc(wb);
	float *x = rnd_gauss_vec((size_t)n_tok * n_in, 1.0f), *y0 = rnd_gauss_vec(ny, 1.0f);
	float *y = malloc(ny * 4);
	double *ref = malloc(ny * 8), *got = malloc(ny * 8), e;
	size_t wsb = ntx_cuda_matmul_ws_bytes(n_in, n_out, n_tok);
	void *dw, *ws = dev_alloc(wsb);
	float *dx, *dy;

	rnd_rows(t, w, n_in, n_out);
	ref_gemv(t, w, n_in, n_out, x, n_tok, 0, ref);
	dw = wdev_up(t, w, n_in, n_out);
	dx = dev_up(x, (size_t)n_tok * n_in * 4);
	dy = dev_alloc(ny * 4);
	if (acc)
		dev_put(dy, y0, ny * 4);
	else
		dev_poison(dy, ny * 4);
	T_CUDA(ntx_cuda_matmul(t, dw, n_in, n_out, dx, dy, n_tok, acc, ws, wsb, NULL, &g_err));
	dev_get(y, dy, ny * 4);
	for (size_t i = 0; i < ny; i++) {
		got[i] = y[i];
		if (acc)
			ref[i] += y0[i];
	}
	e = nmse_d(got, ref, ny);
	t_ok(e <= NMSE_MATMUL, "matmul%s %s %lldx%lld n_tok %d%s: NMSE %.3g <= %g",
	     ntx_cuda_have_cublas() ? " (cuBLAS)" : " (own WMMA)", type_name(t), (long long)n_in,
	     (long long)n_out, n_tok, acc ? " accumulate" : "", e, NMSE_MATMUL);
	dev_free(dw), dev_free(dx), dev_free(dy), dev_free(ws);
	free(w), free(x), free(y0), free(y), free(ref), free(got);
}

/* ntx_cuda_matmul_segs: each segment of a 60-row call (decode-like rows in
 * between, untouched) bitwise equal to ntx_cuda_matmul on its rows alone. */
static void test_matmul_segs_one(uint32_t t, int64_t n_in, int64_t n_out, int acc)
{
	enum { ROWS = 60, NS = 3 };
	static const int off[NS] = { 3, 20, 41 }, len[NS] = { 12, 9, 19 };
	n_in = fit_n(t, n_in);
	size_t rb = row_bytes(t, n_in), wb = rb * n_out, ny = (size_t)ROWS * n_out;
	unsigned char *w = malloc(wb);
	float *x = rnd_gauss_vec((size_t)ROWS * n_in, 1.0f), *y0 = rnd_gauss_vec(ny, 1.0f);
	float *y = malloc(ny * 4), *ya = malloc(ny * 4);
	size_t wsb = ntx_cuda_matmul_ws_bytes(n_in, n_out, ROWS);
	void *dw, *ws = dev_alloc(wsb);
	float *dx, *dy, *dya;
	long bad = 0;

	rnd_rows(t, w, n_in, n_out);
	dw = wdev_up(t, w, n_in, n_out);
	dx = dev_up(x, (size_t)ROWS * n_in * 4);
	dy = dev_up(y0, ny * 4);
	T_CUDA(ntx_cuda_matmul_segs(t, dw, n_in, n_out, dx, dy, off, len, NS, ROWS, acc, ws, wsb,
				    NULL, &g_err));
	dev_get(y, dy, ny * 4);
	for (int i = 0; i < NS; i++) {
		size_t n = (size_t)len[i] * n_out, o = (size_t)off[i] * n_out;
		float *dxa = dev_up(x + (size_t)off[i] * n_in, (size_t)len[i] * n_in * 4);

		dya = dev_up(y0 + o, n * 4);
		T_CUDA(ntx_cuda_matmul(t, dw, n_in, n_out, dxa, dya, len[i], acc, ws, wsb, NULL,
				       &g_err));
		dev_get(ya + o, dya, n * 4);
		dev_free(dxa), dev_free(dya);
	}
	for (int r = 0; r < ROWS; r++) {
		int in = 0;

		for (int i = 0; i < NS; i++)
			in |= r >= off[i] && r < off[i] + len[i];
		for (int64_t c = 0; c < n_out; c++) {
			size_t k = (size_t)r * n_out + c;

			bad += memcmp(y + k, in ? ya + k : y0 + k, 4) != 0;
		}
	}
	t_ok(bad == 0, "matmul_segs %s %lldx%lld%s: 3 segments == each alone, other rows kept: %ld differ",
	     type_name(t), (long long)n_in, (long long)n_out, acc ? " accumulate" : "", bad);
	dev_free(dw), dev_free(dx), dev_free(dy), dev_free(ws);
	free(w), free(x), free(y0), free(y), free(ya);
}

static void test_matmul(void)
{
	for (int i = 0; i < N_TYPES; i++) {
		uint32_t t = all_types[i];

		test_matmul_one(t, 1024, 200, 17, 0);
		test_matmul_one(t, 512, 130, 512, i & 1);
		test_matmul_one(t, 256, 64, 1, 1);
	}
	test_matmul_one(NTX_TYPE_F16, 40, 33, 9, 0); /* K not a multiple of the K tile */
	for (int i = 0; i < N_TYPES; i++)
		test_matmul_segs_one(all_types[i], 512, 300, i & 1);
	{
		struct ntx_err e = { 0 };
		int rc = ntx_cuda_matmul(NTX_TYPE_Q4_K, (void *)(uintptr_t)256, 256, 10, (float *)256,
					 (float *)256, 4, 0, (void *)256, 16, NULL, &e);

		t_ok(rc == -1 && e.msg[0], "matmul: too small a workspace is an error: %s", e.msg);
	}
}

/* ---- dequant, get_rows ---- */

static void test_dequant(void)
{
	for (int i = 0; i < N_TYPES; i++) {
		uint32_t t = all_types[i];
		int64_t n = 4 * (ntx_cuda_wtype_q8(t) ? block_of(t) : 8) * 8, nrow = 50;
		size_t rb = row_bytes(t, n);
		unsigned char *tab = malloc(rb * nrow);
		float *ref = malloc((size_t)n * 4 * 4), *got = malloc((size_t)n * 4 * 4);
		int32_t tok[4] = { 7, 0, 49, 7 };
		void *dt;
		float *dout;
		int32_t *dtok;
		long bad = 0;

		rnd_rows(t, tab, n, nrow);
		dt = wdev_up(t, tab, n, nrow);
		dout = dev_alloc((size_t)n * 4 * 4);
		dtok = dev_up(tok, sizeof tok);
		{
			float *all = malloc((size_t)n * nrow * 4), *r2 = malloc((size_t)n * nrow * 4);
			float *dall = dev_alloc((size_t)n * nrow * 4);

			dev_poison(dall, (size_t)n * nrow * 4);
			if (t & NTX_CUDA_SPLIT) /* the layout is per row: one row per call */
				for (int64_t r = 0; r < nrow; r++)
					T_CUDA(ntx_cuda_dequant_f32(t, (char *)dt + rb * r, dall + n * r, n, NULL,
								    &g_err));
			else
				T_CUDA(ntx_cuda_dequant_f32(t, dt, dall, n * nrow, NULL, &g_err));
			dev_get(all, dall, (size_t)n * nrow * 4);
			ntx_dequant_row_ref(ntx_cuda_base_type(t), tab, r2, n * nrow);
			for (int64_t k = 0; k < n * nrow; k++)
				bad += memcmp(all + k, r2 + k, 4) != 0;
			t_ok(bad == 0, "dequant_f32 %s: %lld elements bit-identical to ntx_dequant_row_ref (%ld differ)",
			     type_name(t), (long long)(n * nrow), bad);
			free(all), free(r2);
			dev_free(dall);
		}
		bad = 0;
		dev_poison(dout, (size_t)n * 4 * 4);
		T_CUDA(ntx_cuda_get_rows(t, dt, rb, n, dtok, 4, dout, NULL, &g_err));
		dev_get(got, dout, (size_t)n * 4 * 4);
		for (int k = 0; k < 4; k++)
			ntx_dequant_row_ref(ntx_cuda_base_type(t), tab + rb * tok[k], ref + (size_t)k * n, n);
		for (int64_t k = 0; k < 4 * n; k++)
			bad += memcmp(ref + k, got + k, 4) != 0;
		t_ok(bad == 0, "get_rows %s: rows 7, 0, 49, 7 bit-identical (%ld differ)", type_name(t), bad);
		dev_free(dt), dev_free(dout), dev_free(dtok);
		free(tab), free(ref), free(got);
	}
}

/* ---- element-wise ---- */

static void test_elementwise(void)
{
	const int64_t n = 10007;
	float *g = rnd_gauss_vec(n, 4.0f), *u = rnd_gauss_vec(n, 1.0f), *o = malloc(n * 4);
	float *ref = malloc(n * 4);
	float *dg = dev_up(g, n * 4), *du = dev_up(u, n * 4), *dout = dev_alloc(n * 4);
	double e;

	dev_poison(dout, n * 4);
	T_CUDA(ntx_cuda_swiglu(dout, dg, du, n, NULL, &g_err));
	dev_get(o, dout, n * 4);
	ntx_op_swiglu(ref, g, u, n);
	e = nmse_f(o, ref, n);
	t_ok(e <= NMSE_EW, "swiglu n = %lld: NMSE %.3g", (long long)n, e);
	T_CUDA(ntx_cuda_swiglu(dg, dg, du, n, NULL, &g_err)); /* out aliases g */
	dev_get(o, dg, n * 4);
	e = nmse_f(o, ref, n);
	t_ok(e <= NMSE_EW, "swiglu in place: NMSE %.3g", e);
	dev_put(dg, g, n * 4);
	T_CUDA(ntx_cuda_add(dg, du, n, NULL, &g_err));
	dev_get(o, dg, n * 4);
	memcpy(ref, g, n * 4);
	ntx_op_add(ref, u, n);
	e = nmse_f(o, ref, n);
	t_ok(e == 0, "add n = %lld: exact (NMSE %.3g)", (long long)n, e);
	dev_free(dg), dev_free(du), dev_free(dout);
	free(g), free(u), free(o), free(ref);
}

static void test_rmsnorm_one(int n_tok, int dim, int with_q8)
{
	size_t nb = (size_t)n_tok * dim;
	float *x = rnd_gauss_vec(nb, 2.0f), *w = rnd_gauss_vec(dim, 1.0f), *o = malloc(nb * 4);
	float *ref = malloc(nb * 4);
	float *dx = dev_up(x, nb * 4), *dw = dev_up(w, dim * 4), *dout = dev_alloc(nb * 4);
	unsigned char *dq = NULL, *hq = NULL;
	double e;

	dev_poison(dout, nb * 4);
	if (with_q8) {
		dq = dev_alloc(ntx_cuda_q8_bytes(dim, n_tok));
		hq = malloc(ntx_cuda_q8_bytes(dim, n_tok));
		dev_poison(dq, ntx_cuda_q8_bytes(dim, n_tok));
	}
	T_CUDA(ntx_cuda_rmsnorm(dout, dq, dx, dw, n_tok, dim, 1e-5f, NULL, &g_err));
	dev_get(o, dout, nb * 4);
	ntx_op_rmsnorm(ref, x, w, n_tok, dim, 1e-5f);
	e = nmse_f(o, ref, nb);
	t_ok(e <= NMSE_EW, "rmsnorm %d x %d%s: NMSE %.3g", n_tok, dim, with_q8 ? " + q8" : "", e);
	if (with_q8) {
		size_t qsb = ntx_cuda_q8_qs_bytes(dim, n_tok);
		long bad = 0;

		dev_get(hq, dq, ntx_cuda_q8_bytes(dim, n_tok));
		for (int t = 0; t < n_tok; t++) {
			for (int b = 0; b < dim / 32; b++) {
				int8_t q[32];
				float d, ds, got[2];

				ntx_ref_q8_32(o + (size_t)t * dim + 32 * b, q, &d, &ds);
				memcpy(got, hq + qsb + ((size_t)t * (dim / 32) + b) * 8, 8);
				bad += memcmp(q, hq + (size_t)t * dim + 32 * b, 32) != 0 || got[0] != d ||
				       got[1] != ds;
			}
		}
		t_ok(bad == 0, "rmsnorm q8 output == q8 of its float output (%ld bad blocks)", bad);
		/* every format: == ntx_cuda_quantize_q8_fmt of the float output,
		 * bitwise, and == the host oracle */
		for (int fmt = 0; fmt < 3; fmt++) {
			size_t qb = ntx_cuda_q8_bytes(dim, n_tok);
			unsigned char *q1 = malloc(qb), *q2 = malloc(qb), *dq2 = dev_alloc(qb);

			if (dim % ntx_cuda_q8_group(fmt)) {
				struct ntx_err e = { 0 };

				t_ok(ntx_cuda_rmsnorm_fmt(dout, dq, fmt, dx, dw, n_tok, dim, 1e-5f, NULL, &e) == -1,
				     "rmsnorm_fmt %d: dim %d not a multiple of %d rejected: %s", fmt, dim,
				     ntx_cuda_q8_group(fmt), e.msg);
			} else {
				dev_poison(dq, qb), dev_poison(dq2, qb), dev_poison(dout, nb * 4);
				T_CUDA(ntx_cuda_rmsnorm_fmt(dout, dq, fmt, dx, dw, n_tok, dim, 1e-5f, NULL, &g_err));
				T_CUDA(ntx_cuda_quantize_q8_fmt(dout, dq2, dim, n_tok, fmt, NULL, &g_err));
				dev_get(q1, dq, qb), dev_get(q2, dq2, qb), dev_get(o, dout, nb * 4);
				t_ok(memcmp(q1, q2, qb) == 0 && q8_bad_blocks(o, dim, n_tok, fmt, q1) == 0,
				     "rmsnorm_fmt %d %d x %d: q8 == quantize_q8_fmt of its float output, bitwise, and == the host oracle",
				     fmt, n_tok, dim);
			}
			dev_free(dq2);
			free(q1), free(q2);
		}
		/* xq only, no float output */
		dev_poison(dq, ntx_cuda_q8_bytes(dim, n_tok));
		T_CUDA(ntx_cuda_rmsnorm(NULL, dq, dx, dw, n_tok, dim, 1e-5f, NULL, &g_err));
		{
			unsigned char *h2 = malloc(ntx_cuda_q8_bytes(dim, n_tok));

			dev_get(h2, dq, ntx_cuda_q8_bytes(dim, n_tok));
			t_ok(memcmp(h2, hq, ntx_cuda_q8_bytes(dim, n_tok)) == 0,
			     "rmsnorm with out = NULL writes the same q8");
			free(h2);
		}
	}
	dev_free(dx), dev_free(dw), dev_free(dout), dev_free(dq);
	free(x), free(w), free(o), free(ref), free(hq);
}

/* ---- mixture of experts: router, gather, slot-order sum; per-head norm ---- */

static void test_moe(void)
{
	const int n_tok = 11, n_expert = 20, k = 3;
	const int64_t n_in = 300, dim = 260;
	float *w = rnd_gauss_vec((size_t)n_expert * n_in, 0.1f), *x = rnd_gauss_vec((size_t)n_tok * n_in, 1.0f);
	float *l = malloc((size_t)n_tok * n_expert * 4), *l1 = malloc((size_t)n_expert * 4);
	double *ref = malloc((size_t)n_tok * n_expert * sizeof(double)), num = 0, den = 0;
	float *dw = dev_up(w, (size_t)n_expert * n_in * 4), *dx = dev_up(x, (size_t)n_tok * n_in * 4);
	float *dl = dev_alloc((size_t)n_tok * n_expert * 4);
	long diff = 0;

	dev_poison(dl, (size_t)n_tok * n_expert * 4);
	T_CUDA(ntx_cuda_moe_router(dw, dx, dl, n_in, n_expert, n_tok, NULL, &g_err));
	dev_get(l, dl, (size_t)n_tok * n_expert * 4);
	for (int t = 0; t < n_tok; t++)
		for (int e = 0; e < n_expert; e++) {
			double s = 0;

			for (int64_t i = 0; i < n_in; i++)
				s += (double)w[e * n_in + i] * x[t * n_in + i];
			ref[t * n_expert + e] = s;
			num += (l[t * n_expert + e] - s) * (l[t * n_expert + e] - s);
			den += s * s;
		}
	t_ok(num / den <= NMSE_GEMV_FLOAT, "moe_router %d tokens x %d experts x %lld: NMSE %.3g",
	     n_tok, n_expert, (long long)n_in, num / den);
	/* each token alone: the same bits (batch invariance) */
	for (int t = 0; t < n_tok; t++) {
		T_CUDA(ntx_cuda_moe_router(dw, dx + t * n_in, dl, n_in, n_expert, 1, NULL, &g_err));
		dev_get(l1, dl, (size_t)n_expert * 4);
		diff += memcmp(l1, l + t * n_expert, (size_t)n_expert * 4) != 0;
	}
	t_ok(diff == 0, "moe_router: each token alone gives the same bits (%ld differ)", diff);

	/* gather n_tok * k rows in a scrambled order, then the weighted sum */
	{
		int nr = n_tok * k;
		int32_t *idx = malloc(nr * 4), *src = malloc(nr * 4);
		float *xs = rnd_gauss_vec((size_t)n_tok * dim, 1.0f), *got = malloc((size_t)nr * dim * 4);
		float *y = rnd_gauss_vec((size_t)nr * dim, 1.0f), *ws = malloc(nr * 4);
		float *res = rnd_gauss_vec((size_t)n_tok * dim, 1.0f), *want = malloc((size_t)n_tok * dim * 4);
		float *dxs = dev_up(xs, (size_t)n_tok * dim * 4), *dg = dev_alloc((size_t)nr * dim * 4);
		float *dy = dev_up(y, (size_t)nr * dim * 4), *dws, *dres = dev_up(res, (size_t)n_tok * dim * 4);
		int32_t *didx, *dsrc;
		long bad = 0;

		for (int j = 0; j < nr; j++) { /* row j of the groups: (j * 7) mod nr is a permutation */
			int ts = (j * 7) % nr;

			idx[j] = ts / k;
			src[ts] = j;
			ws[ts] = (float)rnd_unif();
		}
		didx = dev_up(idx, nr * 4), dsrc = dev_up(src, nr * 4), dws = dev_up(ws, nr * 4);
		dev_poison(dg, (size_t)nr * dim * 4);
		T_CUDA(ntx_cuda_gather_rows(dxs, didx, dg, nr, dim, NULL, &g_err));
		dev_get(got, dg, (size_t)nr * dim * 4);
		for (int j = 0; j < nr; j++)
			bad += memcmp(got + (size_t)j * dim, xs + (size_t)idx[j] * dim, dim * 4) != 0;
		t_ok(bad == 0, "gather_rows %d rows of %lld: exact (%ld rows differ)", nr, (long long)dim, bad);
		T_CUDA(ntx_cuda_moe_sum(dres, dy, dws, dsrc, n_tok, k, dim, NULL, &g_err));
		dev_get(want, dres, (size_t)n_tok * dim * 4);
		bad = 0;
		for (int t = 0; t < n_tok; t++)
			for (int64_t i = 0; i < dim; i++) {
				float acc = ws[t * k] * y[(size_t)src[t * k] * dim + i];

				for (int s = 1; s < k; s++)
					acc += ws[t * k + s] * y[(size_t)src[t * k + s] * dim + i];
				bad += want[t * dim + i] != res[t * dim + i] + acc;
			}
		t_ok(bad == 0, "moe_sum %d tokens x %d slots x %lld: the host's float sums in slot order, "
		     "bitwise (%ld differ)", n_tok, k, (long long)dim, bad);
		/* tokens summed alone (rows 3..5 as a 3-token call): the same bits */
		{
			float *r2 = malloc((size_t)3 * dim * 4);

			dev_put(dres, res + 3 * dim, (size_t)3 * dim * 4);
			T_CUDA(ntx_cuda_moe_sum(dres, dy, dws + 3 * k, dsrc + 3 * k, 3, k, dim, NULL, &g_err));
			dev_get(r2, dres, (size_t)3 * dim * 4);
			t_ok(!memcmp(r2, want + 3 * dim, (size_t)3 * dim * 4),
			     "moe_sum of 3 of the tokens alone: the same bits");
			free(r2);
		}
		dev_free(dxs), dev_free(dg), dev_free(dy), dev_free(dws), dev_free(dres);
		dev_free(didx), dev_free(dsrc);
		free(idx), free(src), free(xs), free(got), free(y), free(ws), free(res), free(want);
	}
	dev_free(dw), dev_free(dx), dev_free(dl);
	free(w), free(x), free(l), free(l1), free(ref);
}

/* The per-head q/k norm of qwen3-style models: ntx_cuda_rmsnorm over
 * n_tok * n_head rows of head_dim, in place (out == x), as the engine
 * runs it: == the out-of-place result bitwise, and the CPU reference. */
static void test_head_norm(int n_tok, int n_head, int hd)
{
	size_t nb = (size_t)n_tok * n_head * hd;
	float *x = rnd_gauss_vec(nb, 3.0f), *w = rnd_gauss_vec(hd, 1.0f), *a = malloc(nb * 4);
	float *b = malloc(nb * 4), *ref = malloc(nb * 4);
	float *dx = dev_up(x, nb * 4), *dw = dev_up(w, hd * 4), *dout = dev_alloc(nb * 4);
	double e;

	dev_poison(dout, nb * 4);
	T_CUDA(ntx_cuda_rmsnorm(dout, NULL, dx, dw, n_tok * n_head, hd, 1e-6f, NULL, &g_err));
	T_CUDA(ntx_cuda_rmsnorm(dx, NULL, dx, dw, n_tok * n_head, hd, 1e-6f, NULL, &g_err));
	dev_get(a, dout, nb * 4), dev_get(b, dx, nb * 4);
	ntx_op_rmsnorm(ref, x, w, n_tok * n_head, hd, 1e-6f);
	e = nmse_f(b, ref, nb);
	t_ok(!memcmp(a, b, nb * 4) && e <= NMSE_EW,
	     "per-head rmsnorm %d tokens x %d heads x %d, in place == out of place, NMSE %.3g", n_tok,
	     n_head, hd, e);
	dev_free(dx), dev_free(dw), dev_free(dout);
	free(x), free(w), free(a), free(b), free(ref);
}

/* ---- argmax, cos ---- */

static void test_argmax_cos(void)
{
	/* vocabulary sizes around the slicing (32 slices of 256-thread
	 * strides), rows up to the engine's 64, calls back to back on one
	 * workspace (its counters reset themselves) */
	static const int64_t ns[] = { 1, 5, 31, 32, 33, 257, 8191, 32000, 128256 };
	static const int nrs[] = { 3, 1, 64, 2, 8, 5, 4, 1, 4 };
	size_t wsb = ntx_cuda_argmax_ws_bytes(64);
	void *ws = dev_alloc(wsb);
	int bad = 0, calls = 0;

	CK(cudaMemset(ws, 0, wsb));
	for (int c = 0; c < (int)(sizeof ns / sizeof ns[0]); c++) {
		const int64_t n = ns[c];
		const int rows = nrs[c];
		float *x = rnd_gauss_vec(n * rows, 1.0f);
		int32_t *got = malloc((size_t)rows * 4);
		float *dx;
		int32_t *dout;

		if (n > 1000 && rows >= 4) {
			x[1000] = 50.0f, x[n - 7] = 50.0f;      /* tie: lowest index */
			x[n + n - 1] = 40.0f;                   /* last element */
			x[2 * n] = 60.0f, x[2 * n + 1] = NAN;   /* NaN never wins */
		}
		if (rows > 1) /* a row of -inf and NaN: index 0, as on the CPU */
			for (int64_t i = 0; i < n; i++)
				x[n * (rows - 1) + i] = i % 3 == 1 ? NAN : -INFINITY;
		if (rows > 1)
			x[n * (rows - 1)] = -INFINITY;
		dx = dev_up(x, (size_t)n * rows * 4);
		dout = dev_alloc((size_t)rows * 4);
		for (int rep = 0; rep < 2; rep++, calls++) {
			dev_poison(dout, (size_t)rows * 4);
			T_CUDA(ntx_cuda_argmax(dx, n, rows, dout, ws, wsb, NULL, &g_err));
			dev_get(got, dout, (size_t)rows * 4);
			for (int r = 0; r < rows; r++) {
				if (got[r] != ntx_argmax(x + r * n, n)) {
					if (!bad)
						t_diag("argmax n %lld row %d: %d, want %d", (long long)n, r,
						     got[r], ntx_argmax(x + r * n, n));
					bad++;
				}
			}
		}
		dev_free(dx), dev_free(dout);
		free(x), free(got);
	}
	t_ok(bad == 0, "argmax: %d calls (n 1 .. 128256, 1 .. 64 rows, ties, NaN, -inf) equal ntx_argmax (%d rows differ)",
	     calls, bad);
	t_ok(ntx_cuda_argmax(NULL, 10, 1, NULL, ws, wsb, NULL, &g_err) < 0 &&
		     ntx_cuda_argmax((float *)ws, 10, 65, (int32_t *)ws, ws, wsb, NULL, &g_err) < 0,
	     "argmax: bad arguments and a short workspace are refused (%s)", g_err.msg);
	dev_free(ws);

	{
		const int nt = 7, dim = 4096;
		float *a = rnd_gauss_vec((size_t)nt * dim, 1.0f), *b = rnd_gauss_vec((size_t)nt * dim, 1.0f);
		double acc[2] = { 0.25, 0.5 }, want2[2] = { 0.25, 0.5 };
		double *dacc;
		float *da, *db;

		for (int i = 0; i < dim; i++) /* row 1 similar, row 2 all zeros */
			b[dim + i] = a[dim + i] + 0.1f * b[dim + i], a[2 * dim + i] = 0.0f;
		da = dev_up(a, (size_t)nt * dim * 4), db = dev_up(b, (size_t)nt * dim * 4);
		dacc = dev_up(acc, sizeof acc);
		T_CUDA(ntx_cuda_cos_accum(da, db, nt, dim, dacc, NULL, &g_err));
		dev_get(acc, dacc, sizeof acc);
		for (int t = 0; t < nt; t++) {
			double xy = 0, xx = 0, yy = 0, c;

			for (int i = 0; i < dim; i++) {
				double p = a[t * dim + i], q = b[t * dim + i];

				xy += p * q, xx += p * p, yy += q * q;
			}
			c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : 1.0;
			want2[0] += c, want2[1] += c * c;
		}
		t_ok(fabs(acc[0] - want2[0]) < 1e-9 && fabs(acc[1] - want2[1]) < 1e-9,
		     "cos_accum: %.12f %.12f (want %.12f %.12f)", acc[0], acc[1], want2[0], want2[1]);
		dev_free(da), dev_free(db), dev_free(dacc);
		free(a), free(b);
	}
}

/* ---- argument errors ---- */

static void test_errors(void)
{
	struct ntx_err e = { 0 };
	void *p = dev_alloc(4096);

	t_ok(ntx_cuda_gemv(NTX_TYPE_Q4_K, p, 256, 4, p, p, p, 9, 0, NULL, &e) == -1 && e.msg[0],
	     "gemv: n_tok = 9 rejected: %s", e.msg);
	t_ok(ntx_cuda_gemv(NTX_TYPE_Q4_1, p, 256, 4, p, p, p, 1, 0, NULL, &e) == -1 && e.msg[0],
	     "gemv: Q4_1 unsupported: %s", e.msg);
	t_ok(ntx_cuda_gemv(NTX_TYPE_Q4_K, (char *)p + 8, 256, 4, p, p, p, 1, 0, NULL, &e) == -1,
	     "gemv: misaligned Q4_K weights rejected: %s", e.msg);
	t_ok(ntx_cuda_gemv(NTX_TYPE_Q8_0, p, 48, 4, p, p, p, 1, 0, NULL, &e) == -1,
	     "gemv: n_in not a multiple of the block: %s", e.msg);
	t_ok(ntx_cuda_wtype_q8(NTX_TYPE_Q6_K) == 1 && ntx_cuda_wtype_q8(NTX_TYPE_BF16) == 0 &&
		     ntx_cuda_wtype_q8(NTX_TYPE_Q2_K) == -1 && ntx_cuda_wtype_q8(SPLIT(NTX_TYPE_Q6_K)) == 1 &&
		     ntx_cuda_wtype_q8(SPLIT(NTX_TYPE_Q4_K)) == -1,
	     "wtype_q8: Q6_K 1, BF16 0, Q2_K -1, Q6_K/split 1, Q4_K/split -1");
	t_ok(ntx_cuda_split_type(NTX_TYPE_Q6_K, 4096) == SPLIT(NTX_TYPE_Q6_K) &&
		     ntx_cuda_split_type(NTX_TYPE_Q6_K, 256) == NTX_TYPE_Q6_K &&
		     ntx_cuda_split_type(NTX_TYPE_Q4_K, 4096) == NTX_TYPE_Q4_K &&
		     ntx_cuda_split_type(NTX_TYPE_Q8_0, 4096) == SPLIT(NTX_TYPE_Q8_0),
	     "split_type: Q6_K rows of 4096 split, of 256 (210 bytes) not, Q4_K never, Q8_0 of 4096 split");
	t_ok(ntx_cuda_repack(NTX_TYPE_Q6_K, p, 256, 4, NULL, &e) == -1 && e.msg[0],
	     "repack: rows that are not 16-byte multiples rejected: %s", e.msg);
	t_ok(ntx_cuda_gemv(SPLIT(NTX_TYPE_Q6_K), p, 256, 4, p, p, p, 1, 0, NULL, &e) == -1 && e.msg[0],
	     "gemv: split rows of 210 bytes rejected: %s", e.msg);
	dev_free(p);
}

int main(int argc, char **argv)
{
	int matmul_only = 0;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--matmul-only"))
			matmul_only = 1;
	gpu_start(argc, argv);
	if (!matmul_only) {
		test_errors();
		test_quantize();
		test_quantize_fmt();
		/* GGUF-layout Q4_K / Q5_K through both GEMV kernels (staged,
		 * direct-load; split rows take the direct-load one either way) */
		for (int dl = 0; dl < 2; dl++) {
			ntx_cuda_gemv_dl_set(dl);
			t_diag("GEMV checks with the direct-load kernel %s for Q4_K / Q5_K", dl ? "on" : "off");
			test_gemv_all();
		}
		ntx_cuda_gemv_dl_set(-1);
		test_gemv_mma();
	}
	test_matmul();
	if (!matmul_only) {
		test_dequant();
		test_elementwise();
		test_rmsnorm_one(3, 4096, 1);
		test_rmsnorm_one(8, 512, 1);
		test_rmsnorm_one(2, 288, 1);
		test_rmsnorm_one(2, 90, 0);
		test_argmax_cos();
		test_moe();
		test_head_norm(5, 4, 128);
		test_head_norm(8, 2, 64);
		test_head_norm(3, 32, 80);
	}
	t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
	return t_done();
}
