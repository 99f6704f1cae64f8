/* host_blockmath.cu - the per-block math of the CUDA kernels
 * (kernels/cuda/blockmath.cuh), run on the host, against the CPU oracle.
 * Built by nvcc as a host program ($(BUILD)/tests/test_cuda_host) whenever
 * nvcc is found, and run by `make test`: it needs no GPU, so layout and
 * arithmetic bugs of the GPU kernels are caught on any machine.
 *
 * Checks, for every quantized type (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K), on
 * random blocks (fixed seed):
 *   - unit decode + ntx_unit_value == ntx_dequant_row_ref, bit for bit;
 *   - unit dot products with q8 activations == ntx_vec_dot_ref when the
 *     activations are built so that the per-32 q8 format and ggml's Q8_0 /
 *     Q8_K give the same integers (per-block max = 127 * 2^k): NMSE <= 1e-10
 *     (only float rounding order differs);
 *   - the same on plain random activations vs the float64 dot of the
 *     dequantized row: NMSE <= 1e-4 (activation quantization noise);
 *   - ntx_q8_quantize32 == ntx_quantize_act_ref(Q8_0) on those inputs;
 *   - the 2-byte-aligned word loader at both alignments;
 *   - K-quant pairs: ntx_pair_decode holds the same values, scales and mins
 *     as ntx_unit_decode of its two units, and row dots through
 *     ntx_pair_dot match ntx_vec_dot_ref (same integers) and the float64
 *     dequantized dot, as the unit path does;
 *   - the q8 formats (ntx_q8_quantize_fmt): Q8_0 and Q8_K hold exactly the
 *     integers and d of ntx_quantize_act_ref (ties of +max and -max, zero
 *     blocks, the clamp at 127);
 *   - the direct-load GEMV (gemv_dl.cu): a warp emulated lane by lane with
 *     the kernel's own lane functions (dlmath.cuh; Q4_K and split Q6_K
 *     through the canonical chain, ntx_dlk_*), on Q4_K / Q5_K rows and
 *     split rows of Q4_0 / Q8_0 / Q6_K (ntx_split_row), with activations in
 *     the CPU's q8 format: equals ntx_vec_dot_ref up to float summation
 *     order (NMSE <= 1e-10), token 0 the same with 1 or 3 tokens; split rows
 *     dequantize (ntx_unit_at) to the GGUF values bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlmath.cuh"
#include "t.h"

extern "C" {
#include "ntx_cpu.h"
}

#define NMSE_STRICT 1e-10
#define NMSE_RANDOM 1e-4

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rng_u64(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double rng_unif(void)
{
	return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0);
}

static float rng_gauss(void)
{
	double u = rng_unif() + 1e-300, v = rng_unif();

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

struct tinfo {
	uint32_t t;
	const char *name;
	int bs, bb, upb;
};

static const tinfo types[] = {
	{ NTX_TYPE_Q4_0, "Q4_0", 32, 18, 1 },  { NTX_TYPE_Q8_0, "Q8_0", 32, 34, 1 },
	{ NTX_TYPE_Q4_K, "Q4_K", 256, 144, 8 }, { NTX_TYPE_Q5_K, "Q5_K", 256, 176, 8 },
	{ NTX_TYPE_Q6_K, "Q6_K", 256, 210, 8 }, { NTX_TYPE_Q5_0, "Q5_0", 32, 22, 1 },
};

/* Random, well-formed blocks: random bytes, finite fp16 scales. */
static void random_blocks(const tinfo &ti, uint8_t *p, int nb)
{
	for (int i = 0; i < nb * ti.bb; i++)
		p[i] = (uint8_t)rng_u64();
	for (int b = 0; b < nb; b++) {
		uint8_t *blk = p + (size_t)b * ti.bb;
		uint16_t d = ntx_fp32_to_fp16((float)(0.001 + 0.02 * rng_unif()));
		uint16_t m = ntx_fp32_to_fp16((float)(0.001 + 0.02 * rng_unif()));

		switch (ti.t) {
		case NTX_TYPE_Q4_0:
		case NTX_TYPE_Q5_0:
		case NTX_TYPE_Q8_0:
			memcpy(blk, &d, 2);
			break;
		case NTX_TYPE_Q4_K:
		case NTX_TYPE_Q5_K:
			memcpy(blk, &d, 2);
			memcpy(blk + 2, &m, 2);
			break;
		default:
			memcpy(blk + 208, &d, 2);
			break;
		}
	}
}

/* Activations whose per-32 max |x| is 127 * 2^k with the same k over each
 * 256, so q8 (per 32, float d) and Q8_0 / Q8_K give identical integers. */
static void strict_acts(float *x, int n)
{
	for (int b = 0; b < n; b += 256) {
		int k = (int)(rng_u64() % 7) - 4;
		float sc = ldexpf(1.0f, k);

		for (int i = b; i < b + 256 && i < n; i++)
			x[i] = sc * (float)(254.0 * rng_unif() - 127.0);
		for (int j = b; j < b + 256 && j < n; j += 32) {
			int at = j + (int)(rng_u64() % 32);

			x[at] = (rng_u64() & 1) ? 127.0f * sc : -127.0f * sc;
		}
	}
}

/* q8 activations of n floats with the host quantizer of blockmath.cuh. */
static void q8_acts(const float *x, int n, int8_t *qs, float *d, float *ds)
{
	for (int b = 0; b < n / 32; b++)
		ntx_q8_quantize32(x + 32 * b, qs + 32 * b, d + b, ds + b);
}

/* Dot of a weight row with q8 activations through the unit functions. */
static float unit_row_dot(const tinfo &ti, const uint8_t *row, int n, const int8_t *qs,
			  const float *d, const float *ds)
{
	double acc = 0;

	for (int u = 0; u < n / 32; u++) {
		ntx_wu wu;
		uint32_t xw[8];
		const uint8_t *blk = row + (size_t)(u / ti.upb) * ti.bb;

		switch (ti.t) {
		case NTX_TYPE_Q4_0: ntx_unit_decode<NTX_TYPE_Q4_0>(blk, u % ti.upb, wu); break;
		case NTX_TYPE_Q5_0: ntx_unit_decode<NTX_TYPE_Q5_0>(blk, u % ti.upb, wu); break;
		case NTX_TYPE_Q8_0: ntx_unit_decode<NTX_TYPE_Q8_0>(blk, u % ti.upb, wu); break;
		case NTX_TYPE_Q4_K: ntx_unit_decode<NTX_TYPE_Q4_K>(blk, u % ti.upb, wu); break;
		case NTX_TYPE_Q5_K: ntx_unit_decode<NTX_TYPE_Q5_K>(blk, u % ti.upb, wu); break;
		default: ntx_unit_decode<NTX_TYPE_Q6_K>(blk, u % ti.upb, wu); break;
		}
		memcpy(xw, qs + 32 * u, 32);
		acc += ntx_unit_dot(wu, xw, d[u], ds[u]);
	}
	return (float)acc;
}

static void unit_row_dequant(const tinfo &ti, const uint8_t *row, int n, float *y)
{
	for (int u = 0; u < n / 32; u++) {
		ntx_wu wu;
		const uint8_t *blk = row + (size_t)(u / ti.upb) * ti.bb;

		for (int e = 0; e < 32; e++) {
			switch (ti.t) {
			case NTX_TYPE_Q4_0: ntx_unit_decode<NTX_TYPE_Q4_0>(blk, u % ti.upb, wu); y[32 * u + e] = ntx_unit_value<NTX_TYPE_Q4_0>(wu, e); break;
			case NTX_TYPE_Q5_0: ntx_unit_decode<NTX_TYPE_Q5_0>(blk, u % ti.upb, wu); y[32 * u + e] = ntx_unit_value<NTX_TYPE_Q5_0>(wu, e); break;
			case NTX_TYPE_Q8_0: ntx_unit_decode<NTX_TYPE_Q8_0>(blk, u % ti.upb, wu); y[32 * u + e] = ntx_unit_value<NTX_TYPE_Q8_0>(wu, e); break;
			case NTX_TYPE_Q4_K: ntx_unit_decode<NTX_TYPE_Q4_K>(blk, u % ti.upb, wu); y[32 * u + e] = ntx_unit_value<NTX_TYPE_Q4_K>(wu, e); break;
			case NTX_TYPE_Q5_K: ntx_unit_decode<NTX_TYPE_Q5_K>(blk, u % ti.upb, wu); y[32 * u + e] = ntx_unit_value<NTX_TYPE_Q5_K>(wu, e); break;
			default: ntx_unit_decode<NTX_TYPE_Q6_K>(blk, u % ti.upb, wu); y[32 * u + e] = ntx_unit_value<NTX_TYPE_Q6_K>(wu, e); break;
			}
		}
	}
}

static double nmse(const double *a, const double *ref, int n)
{
	double num = 0, den = 0;

	for (int i = 0; i < n; i++) {
		double e = a[i] - ref[i];

		num += e * e;
		den += ref[i] * ref[i];
	}
	return den > 0 ? num / den : (num > 0 ? INFINITY : 0);
}

#define N_EL 2048
#define N_ROWS 64

static void test_type(const tinfo &ti)
{
	const int nb = N_EL / ti.bs, rb = nb * ti.bb;
	uint8_t *w = (uint8_t *)aligned_alloc(64, (size_t)rb * N_ROWS + 64);
	float x[N_EL], yref[N_EL], yu[N_EL], dd[N_EL / 32], ds[N_EL / 32];
	int8_t qs[N_EL];
	void *xr = malloc(ntx_act_bytes(ntx_act_type(ti.t), N_EL));
	double got[N_ROWS], ref[N_ROWS], got2[N_ROWS], ref2[N_ROWS];
	long bad = 0;
	int r;

	/* every row starts 16-byte aligned only if rb is; Q4_0 / Q5_0 / Q8_0 /
	 * Q6_K blocks also land at 2 mod 4 so both word-loader alignments are
	 * exercised */
	random_blocks(ti, w, nb * N_ROWS);
	for (r = 0; r < N_ROWS; r++) {
		ntx_dequant_row_ref(ti.t, w + (size_t)r * rb, yref, N_EL);
		unit_row_dequant(ti, w + (size_t)r * rb, N_EL, yu);
		for (int i = 0; i < N_EL; i++)
			bad += memcmp(&yref[i], &yu[i], 4) != 0;
	}
	t_ok(bad == 0, "%s: unit dequant == ntx_dequant_row_ref bit for bit (%ld mismatches)", ti.name,
	     bad);

	bad = 0;
	for (r = 0; r < N_ROWS; r++) {
		strict_acts(x, N_EL);
		q8_acts(x, N_EL, qs, dd, ds);
		ntx_quantize_act_ref(ntx_act_type(ti.t), x, xr, N_EL);
		if (ntx_act_type(ti.t) == NTX_TYPE_Q8_0) {
			const struct ntx_block_q8_0 *b = (const struct ntx_block_q8_0 *)xr;

			for (int k = 0; k < N_EL / 32; k++)
				bad += memcmp(b[k].qs, qs + 32 * k, 32) != 0 ||
				       ntx_fp16_to_fp32(b[k].d) != dd[k];
		}
		got[r] = unit_row_dot(ti, w + (size_t)r * rb, N_EL, qs, dd, ds);
		ref[r] = ntx_vec_dot_ref(ti.t, N_EL, w + (size_t)r * rb, xr);

		for (int i = 0; i < N_EL; i++)
			x[i] = rng_gauss();
		q8_acts(x, N_EL, qs, dd, ds);
		ntx_dequant_row_ref(ti.t, w + (size_t)r * rb, yref, N_EL);
		got2[r] = unit_row_dot(ti, w + (size_t)r * rb, N_EL, qs, dd, ds);
		ref2[r] = 0;
		for (int i = 0; i < N_EL; i++)
			ref2[r] += (double)yref[i] * x[i];
	}
	if (ntx_act_type(ti.t) == NTX_TYPE_Q8_0)
		t_ok(bad == 0, "%s: ntx_q8_quantize32 == ntx_quantize_act_ref(Q8_0) (%ld bad blocks)",
		     ti.name, bad);
	{
		double e1 = nmse(got, ref, N_ROWS), e2 = nmse(got2, ref2, N_ROWS);

		t_ok(e1 <= NMSE_STRICT, "%s: unit dot vs ntx_vec_dot_ref, same integers: NMSE %.3g <= %g",
		     ti.name, e1, NMSE_STRICT);
		t_ok(e2 <= NMSE_RANDOM, "%s: unit dot vs float64 dequantized dot: NMSE %.3g <= %g",
		     ti.name, e2, NMSE_RANDOM);
		t_ok(e2 > 0, "%s: random activations do carry quantization noise (NMSE %.3g > 0)",
		     ti.name, e2);
	}
	free(xr);
	free(w);
}

/* ---- K-quant pairs ---- */

template <int T> static float pair_row_dot(const tinfo &ti, const uint8_t *row, int n,
					   const int8_t *qs, const float *d, const float *ds)
{
	double acc = 0;

	for (int b = 0; b < n / ti.bs; b++) {
		for (int p = 0; p < 4; p++) {
			ntx_wp w;
			ntx_xp x;
			int u0, u1;

			ntx_pair_decode<T>(row + (size_t)b * ti.bb, p, w);
			ntx_pair_units<T>(p, &u0, &u1);
			memcpy(x.x0, qs + 256 * b + 32 * u0, 32);
			memcpy(x.x1, qs + 256 * b + 32 * u1, 32);
			x.ds0 = make_float2(d[8 * b + u0], ds[8 * b + u0]);
			x.ds1 = make_float2(d[8 * b + u1], ds[8 * b + u1]);
			ntx_xp_sums<T>(x);
			acc += ntx_pair_dot<T>(w, x);
		}
	}
	return (float)acc;
}

/* Decoded pair == the two decoded units (Q4_K: v1 is 16 x the value, Q6_K:
 * the values before -32). Returns the number of mismatches. */
template <int T> static long pair_vs_units(const tinfo &ti, const uint8_t *blk)
{
	long bad = 0;

	for (int p = 0; p < 4; p++) {
		ntx_wp w;
		ntx_wu a, b;
		int u0, u1;

		ntx_pair_decode<T>(blk, p, w);
		ntx_pair_units<T>(p, &u0, &u1);
		ntx_unit_decode<T>(blk, u0, a);
		ntx_unit_decode<T>(blk, u1, b);
		for (int k = 0; k < 8; k++) {
			uint32_t e0 = w.v0[k], e1 = w.v1[k];

			if (T == NTX_TYPE_Q4_K)
				e1 >>= 4;
			if (T == NTX_TYPE_Q6_K) { /* bytewise v - 32 as in ntx_unit_decode */
				e0 = (e0 + 0x60606060u) ^ 0x80808080u;
				e1 = (e1 + 0x60606060u) ^ 0x80808080u;
			}
			bad += e0 != a.v[k];
			bad += e1 != b.v[k];
		}
		bad += w.a0 != a.a || w.b0 != a.b || w.a1 != b.a || w.b1 != b.b;
		bad += w.s00 != a.s0 || w.s01 != a.s1 || w.s10 != b.s0 || w.s11 != b.s1;
	}
	return bad;
}

template <int T> static void test_pairs(const tinfo &ti)
{
	const int nb = N_EL / ti.bs, rb = nb * ti.bb;
	uint8_t *w = (uint8_t *)aligned_alloc(64, (size_t)rb * N_ROWS + 64);
	float x[N_EL], yref[N_EL], dd[N_EL / 32], ds[N_EL / 32];
	int8_t qs[N_EL];
	void *xr = malloc(ntx_act_bytes(ntx_act_type(ti.t), N_EL));
	double got[N_ROWS], ref[N_ROWS], got2[N_ROWS], ref2[N_ROWS];
	long bad = 0;

	random_blocks(ti, w, nb * N_ROWS);
	/* a few blocks with extreme scale bytes: all 6-bit scales 63, int8 -128 */
	memset(w + (ti.t == NTX_TYPE_Q6_K ? 192 : 4), ti.t == NTX_TYPE_Q6_K ? 0x80 : 0xFF,
	       ti.t == NTX_TYPE_Q6_K ? 16 : 12);
	for (int b = 0; b < nb * N_ROWS; b++)
		bad += pair_vs_units<T>(ti, w + (size_t)b * ti.bb);
	t_ok(bad == 0, "%s: pair decode == the two unit decodes (%ld mismatches)", ti.name, bad);
	for (int r = 0; r < N_ROWS; r++) {
		strict_acts(x, N_EL);
		q8_acts(x, N_EL, qs, dd, ds);
		ntx_quantize_act_ref(ntx_act_type(ti.t), x, xr, N_EL);
		got[r] = pair_row_dot<T>(ti, w + (size_t)r * rb, N_EL, qs, dd, ds);
		ref[r] = ntx_vec_dot_ref(ti.t, N_EL, w + (size_t)r * rb, xr);
		for (int i = 0; i < N_EL; i++)
			x[i] = 4.0f * rng_gauss();
		q8_acts(x, N_EL, qs, dd, ds);
		ntx_dequant_row_ref(ti.t, w + (size_t)r * rb, yref, N_EL);
		got2[r] = pair_row_dot<T>(ti, w + (size_t)r * rb, N_EL, qs, dd, ds);
		ref2[r] = 0;
		for (int i = 0; i < N_EL; i++)
			ref2[r] += (double)yref[i] * x[i];
	}
	{
		double e1 = nmse(got, ref, N_ROWS), e2 = nmse(got2, ref2, N_ROWS);

		t_ok(e1 <= NMSE_STRICT, "%s: pair dot vs ntx_vec_dot_ref, same integers: NMSE %.3g <= %g",
		     ti.name, e1, NMSE_STRICT);
		t_ok(e2 <= NMSE_RANDOM && e2 > 0,
		     "%s: pair dot vs float64 dequantized dot: NMSE %.3g <= %g (and > 0)", ti.name, e2,
		     NMSE_RANDOM);
	}
	free(xr);
	free(w);
}


/* ---- q8 formats vs the CPU oracle ---- */

static void test_q8_formats(void)
{
	const int n = 4096;
	float x[4096], d[128], ds[128];
	int8_t q[4096];
	struct ntx_block_q8_0 b0[128];
	struct ntx_block_q8_k bk[16];
	long bad0 = 0, badk = 0, bads = 0;

	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < n; i++)
			x[i] = (float)(3.0 * rng_gauss() * (1 + round % 5));
		/* edge cases: an all-zero block of 256, +max and -max in one
		 * block (the first decides the sign), a lone negative max,
		 * values that round to +-127.5 before the clamp */
		for (int i = 256; i < 512; i++)
			x[i] = 0.0f;
		x[600] = -50.0f, x[700] = 50.0f;
		x[1100] = 60.0f, x[1101] = -60.0f;
		x[2000] = -70.0f;
		x[3000] = 1e-30f;
		ntx_q8_quantize_fmt(x, n, NTX_Q8F_Q8_0, q, d, ds);
		ntx_quantize_act_ref(NTX_TYPE_Q8_0, x, b0, n);
		for (int k = 0; k < n / 32; k++) {
			int sum = 0;

			for (int i = 0; i < 32; i++)
				sum += q[32 * k + i];
			bad0 += memcmp(b0[k].qs, q + 32 * k, 32) != 0 || ntx_fp16_to_fp32(b0[k].d) != d[k];
			bads += ds[k] != d[k] * (float)sum;
		}
		ntx_q8_quantize_fmt(x, n, NTX_Q8F_Q8_K, q, d, ds);
		ntx_quantize_act_ref(NTX_TYPE_Q8_K, x, bk, n);
		for (int k = 0; k < n / 256; k++) {
			badk += memcmp(bk[k].qs, q + 256 * k, 256) != 0;
			for (int j = 0; j < 8; j++) {
				int sum = 0;

				for (int i = 0; i < 32; i++)
					sum += q[256 * k + 32 * j + i];
				badk += d[8 * k + j] != bk[k].d;
				badk += sum != bk[k].bsums[2 * j] + bk[k].bsums[2 * j + 1];
				bads += ds[8 * k + j] != d[8 * k + j] * (float)sum;
			}
		}
	}
	t_ok(bad0 == 0, "q8 format Q8_0: integers and fp16 d == ntx_quantize_act_ref(Q8_0) (%ld bad blocks)",
	     bad0);
	t_ok(badk == 0, "q8 format Q8_K: integers, d and sums == ntx_quantize_act_ref(Q8_K) (%ld bad)",
	     badk);
	t_ok(bads == 0, "q8 formats: dsum = d * sum(q) (%ld bad)", bads);
	{
		/* the sign rule: first of +m / -m decides; d < 0 when max > 0 */
		float y[256] = { 0 };

		y[10] = -2.0f, y[20] = 2.0f, y[30] = 1.0f;
		ntx_q8_quantize_fmt(y, 256, NTX_Q8F_Q8_K, q, d, ds);
		t_ok(q[10] == -127 && q[20] == 127 && q[30] == 64 && d[0] > 0,
		     "Q8_K sign rule: -2 first -> d = %g > 0, q = %d %d %d", d[0], q[10], q[20], q[30]);
		y[10] = 2.0f, y[20] = -2.0f;
		ntx_q8_quantize_fmt(y, 256, NTX_Q8F_Q8_K, q, d, ds);
		t_ok(q[10] == -127 && q[20] == 127 && d[0] < 0,
		     "Q8_K sign rule: +2 first -> d = %g < 0, q = %d %d", d[0], q[10], q[20]);
	}
}

/* ---- the direct-load GEMV (gemv_dl.cu), emulated ---- */

/* The canonical K-quants (dlmath.cuh, ntx_dlk_*) as a warp of the
 * direct-load GEMV runs them with ks = 1: per step, each block's integers
 * summed over its 8 lanes, the float chain per block slot bl, the warp's
 * value (a0 + a2) + (a1 + a3). */
template <int T>
static void emu_dlk(const uint8_t *w, size_t rb, int n_rows, int n_in, const int8_t *xq, const float2 *xds,
		    int n_tok, double *y)
{
	const int nb = n_in / 256, n_steps = (nb + 3) / 4;

	for (int r = 0; r < n_rows; r++) {
		for (int t = 0; t < n_tok; t++) {
			float a[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

			for (int s = 0; s < n_steps; s++) {
				for (int bl = 0; bl < 4; bl++) {
					const int b = 4 * s + bl;
					int I = 0, M = 0;
					float d = 0.0f, dm = 0.0f;

					if (b >= nb)
						continue;
					for (int j = 0; j < 8; j++) {
						ntx_dlr<T> raw;
						ntx_dlk wd;
						ntx_dlx x;
						int sx[2], ip, mp;

						ntx_dl_load<T>(w + (size_t)r * rb, nb, b, j, raw);
						ntx_dlk_decode<T>(raw, j, wd);
						ntx_dl_xload<T>(xq + (size_t)t * n_in, xds + (size_t)t * (n_in / 32), b, j, x);
						ntx_dlk_xsum(x, sx);
						ntx_dlk_dot<T>(wd, x, sx, ip, mp);
						I += ip, M += mp, d = wd.d, dm = wd.dm;
					}
					a[bl] = ntx_dlk_acc<T>(I, M, xds[(size_t)t * (n_in / 32) + 8 * b].x, d, dm, a[bl]);
				}
			}
			y[(size_t)t * n_rows + r] = (a[0] + a[2]) + (a[1] + a[3]);
		}
	}
}

/* The other types: every lane accumulates in float (ntx_dl_dot). */
template <int T>
static void emu_dl_lanes(const uint8_t *w, size_t rb, int n_rows, int n_in, const int8_t *xq,
			 const float2 *xds, int n_tok, double *y)
{
	constexpr int LPB = ntx_dl<T>::LPB, BPS = 32 / LPB, BS = ntx_qt<T>::BS;
	const int nb = n_in / BS, n_steps = (nb + BPS - 1) / BPS;

	for (int r = 0; r < n_rows; r++) {
		float acc[32][8];

		memset(acc, 0, sizeof acc);
		for (int s = 0; s < n_steps; s++) {
			for (int lane = 0; lane < 32; lane++) {
				const int b = s * BPS + lane / LPB, j = lane % LPB;
				ntx_dlr<T> raw;
				ntx_dlw wd;

				if (b >= nb)
					continue;
				ntx_dl_load<T>(w + (size_t)r * rb, nb, b, j, raw);
				ntx_dl_decode<T>(raw, j, wd);
				for (int t = 0; t < n_tok; t++) {
					ntx_dlx x;

					ntx_dl_xload<T>(xq + (size_t)t * n_in, xds + (size_t)t * (n_in / 32), b, j, x);
					acc[lane][t] = ntx_dl_dot<T>(wd, x, acc[lane][t]);
				}
			}
		}
		for (int t = 0; t < n_tok; t++) {
			double v = 0;

			for (int lane = 0; lane < 32; lane++)
				v += acc[lane][t];
			y[(size_t)t * n_rows + r] = v;
		}
	}
}

/* W[r] . x for n_tok tokens of q8 activations xq [n_tok][n_in] with d, ds
 * [n_tok][n_in/32], computed as one warp of ntx_gemv_dl_kernel does with
 * ks = 1: lane l takes part l % LPB of block step * 32/LPB + l / LPB of
 * every step through dlmath.cuh, accumulating in float; the lanes' sums are
 * then added (the kernel's butterfly adds in another fixed order). w: rows
 * in the layout of T (split rows for the split types), row bytes rb. */
template <int T>
static void emu_dl(const uint8_t *w, size_t rb, int n_rows, int n_in, const int8_t *xq,
		   const float *d, const float *ds, int n_tok, double *y /* [n_tok][n_rows] */)
{
	float2 *xds = (float2 *)malloc(sizeof(float2) * (size_t)n_tok * (n_in / 32));

	for (int i = 0; i < n_tok * (n_in / 32); i++)
		xds[i] = make_float2(d[i], ds[i]);
	if constexpr (T == NTX_TYPE_Q4_K || T == (NTX_SPLIT | NTX_TYPE_Q6_K))
		emu_dlk<T>(w, rb, n_rows, n_in, xq, xds, n_tok, y);
	else
		emu_dl_lanes<T>(w, rb, n_rows, n_in, xq, xds, n_tok, y);
	free(xds);
}

/* Split rows of GGUF rows (B the GGUF type). */
template <int B> static void split_rows(const uint8_t *src, size_t rb, int n_rows, int nb, uint8_t *dst)
{
	for (int r = 0; r < n_rows; r++)
		ntx_split_row<B>(src + (size_t)r * rb, nb, dst + (size_t)r * rb);
}

/* T: the GEMV's type (GGUF Q4_K / Q5_K, or NTX_SPLIT | Q4_0 / Q8_0 / Q6_K). */
template <int T> static void test_dl(const tinfo &ti)
{
	constexpr int B = T & ~NTX_SPLIT;
	const int n_rows = 8, n_tok = 3;
	const int fmt = ti.bs == 256 ? NTX_Q8F_Q8_K : NTX_Q8F_Q8_0;
	/* 1280: whole steps and a partial one for every LPB; 256 / 32: one block */
	static const int sizes[2] = { 1280, 2304 };
	long bad = 0;

	for (int si = 0; si < 2; si++) {
		const int n_in = sizes[si], nb = n_in / ti.bs;
		const size_t rb = (size_t)nb * ti.bb;
		uint8_t *w = (uint8_t *)aligned_alloc(64, rb * n_rows + 64);
		uint8_t *ws = (uint8_t *)aligned_alloc(64, rb * n_rows + 64);
		float *x = (float *)malloc(sizeof(float) * n_tok * n_in);
		float *d = (float *)malloc(sizeof(float) * n_tok * (n_in / 32));
		float *ds = (float *)malloc(sizeof(float) * n_tok * (n_in / 32));
		int8_t *xq = (int8_t *)malloc((size_t)n_tok * n_in);
		void *xr = malloc(ntx_act_bytes(ntx_act_type(ti.t), n_in));
		double got[n_tok * n_rows], ref[n_tok * n_rows], got1[n_rows];
		float row[2304], rowu[2304];

		random_blocks(ti, w, nb * n_rows);
		if (T & NTX_SPLIT)
			split_rows<B>(w, rb, n_rows, nb, ws);
		else
			memcpy(ws, w, rb * n_rows);
		for (int t = 0; t < n_tok; t++) {
			for (int i = 0; i < n_in; i++)
				x[(size_t)t * n_in + i] = (float)((1 + t) * rng_gauss());
			ntx_q8_quantize_fmt(x + (size_t)t * n_in, n_in, fmt, xq + (size_t)t * n_in,
					    d + (size_t)t * (n_in / 32), ds + (size_t)t * (n_in / 32));
		}
		emu_dl<T>(ws, rb, n_rows, n_in, xq, d, ds, n_tok, got);
		emu_dl<T>(ws, rb, n_rows, n_in, xq, d, ds, 1, got1);
		for (int r = 0; r < n_rows; r++)
			bad += memcmp(&got[r], &got1[r], sizeof(double)) != 0;
		for (int t = 0; t < n_tok; t++) {
			ntx_quantize_act_ref(ntx_act_type(ti.t), x + (size_t)t * n_in, xr, n_in);
			for (int r = 0; r < n_rows; r++)
				ref[t * n_rows + r] = ntx_vec_dot_ref(ti.t, n_in, w + (size_t)r * rb, xr);
		}
		{
			double e = nmse(got, ref, n_tok * n_rows);

			t_ok(e <= NMSE_STRICT,
			     "%s%s: direct-load warp (n_in %d, %d rows x %d tokens) vs ntx_vec_dot_ref, CPU q8 format: NMSE %.3g <= %g",
			     ti.name, T & NTX_SPLIT ? "/split" : "", n_in, n_rows, n_tok, e, NMSE_STRICT);
		}
		/* split rows dequantize to the GGUF rows' values, bit for bit */
		if (T & NTX_SPLIT) {
			long dbad = 0;

			for (int r = 0; r < n_rows; r++) {
				ntx_dequant_row_ref(ti.t, w + (size_t)r * rb, row, n_in);
				for (int u = 0; u < n_in / 32; u++) {
					ntx_wu wu;

					ntx_unit_at<T>(ws + (size_t)r * rb, nb, u, wu);
					for (int e = 0; e < 32; e++)
						rowu[32 * u + e] = ntx_unit_value<B>(wu, e);
				}
				dbad += memcmp(row, rowu, sizeof(float) * n_in) != 0;
			}
			t_ok(dbad == 0, "%s/split: rows of %d dequantize as the GGUF rows, bit for bit (%ld rows differ)",
			     ti.name, n_in, dbad);
		}
		free(w), free(ws), free(x), free(d), free(ds), free(xq), free(xr);
	}
	t_ok(bad == 0, "%s%s: direct-load token 0 the same with 1 and 3 tokens (%ld differ)", ti.name,
	     T & NTX_SPLIT ? "/split" : "", bad);
}

static void test_loaders(void)
{
	uint8_t buf[64];
	uint32_t w[8], want[8];
	int ok = 1;

	for (int i = 0; i < 64; i++)
		buf[i] = (uint8_t)(rng_u64());
	for (int off = 0; off <= 16; off += 2) {
		ntx_ld_words_a2<8>(buf + off, w);
		memcpy(want, buf + off, 32);
		ok &= memcmp(w, want, 32) == 0;
	}
	t_ok(ok, "ntx_ld_words_a2 reads 8 words at every even offset");
	ntx_ld_words_a16<8>(buf + 16, w);
	memcpy(want, buf + 16, 32);
	t_ok(memcmp(w, want, 32) == 0, "ntx_ld_words_a16 reads 8 words");
	/* bytes (1, 127, -1, -128) . (2, -1, -128, 127) = 2 - 127 + 128 - 16256 */
	t_ok(ntx_dp4a(0x80FF7F01u, 0x7F80FF02u, 5) == 5 - 16253, "ntx_dp4a host fallback: signed bytes");
}

int main(void)
{
	test_loaders();
	for (const tinfo &ti : types)
		test_type(ti);
	test_pairs<NTX_TYPE_Q4_K>(types[2]);
	test_pairs<NTX_TYPE_Q5_K>(types[3]);
	test_pairs<NTX_TYPE_Q6_K>(types[4]);
	test_q8_formats();
	test_dl<NTX_SPLIT | NTX_TYPE_Q4_0>(types[0]);
	test_dl<NTX_SPLIT | NTX_TYPE_Q8_0>(types[1]);
	test_dl<NTX_TYPE_Q4_K>(types[2]);
	test_dl<NTX_TYPE_Q5_K>(types[3]);
	test_dl<NTX_SPLIT | NTX_TYPE_Q6_K>(types[4]);
	/* bytes (0, 255, 128, 1) . (-128, 5, 127, -1) */
	t_ok(ntx_dp4a_us(0x0180FF00u, 0xFF7F0580u, 3) ==
		     3 + 0 * -128 + 255 * 5 + 128 * 127 + 1 * -1,
	     "ntx_dp4a_us host fallback: unsigned x signed bytes");
	{
		float z[32] = { 0 }, d = 1, ds = 1;
		int8_t q[32];

		ntx_q8_quantize32(z, q, &d, &ds);
		t_ok(d == 0 && ds == 0 && q[0] == 0 && q[31] == 0, "q8 of all zeros: d = 0, q = 0");
	}
	return t_done();
}
