/* attn_avx2.c - attention over a KV cache with AVX2 + FMA + F16C (built with
 * those flags, called only when the CPU has them; AVX-512 machines use it
 * too: the loops are short and bound by loads).
 *
 * One call serves the heads of one query-head group that share a KV head, so
 * each K and V row is converted once for all of them. Positions go in tiles
 * of AT_T with an online softmax per head (running max m, sum l, rescaled
 * accumulator), so memory does not grow with the context:
 *   scores  s[g][p] = (q_g . k_p) / sqrt(hd), eight-wide FMA over the head
 *           dimension, one horizontal sum per (head, position);
 *   softmax m' = max(m, max_p s), e = exp(s - m'), l = l exp(m - m') + sum e;
 *   values  acc_g = acc_g exp(m - m') + sum_p e_p v_p;
 * and out_g = acc_g / l. Every head runs the same operations in the same
 * order whatever the other heads of the call, so results do not depend on
 * how the caller groups heads or tokens (batch invariance). exp is a vector
 * polynomial (relative error ~2e-7) for the scores, expf for the rescale. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "cpu_impl.h"

#define AT_T 64 /* positions per tile */

static inline float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static inline __m256 load8(const void *p, int64_t i, int f16)
{
	if (f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
	return _mm256_loadu_ps((const float *)p + i);
}

/* e^x for x <= 0 (x below -87 gives 0): 2^n e^r, |r| <= ln2 / 2, degree-6
 * polynomial for e^r. */
static inline __m256 exp8(__m256 x)
{
	const __m256 lo = _mm256_set1_ps(-87.0f);
	const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
	const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
	__m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
	__m256 n, r, p;
	__m256i e;

	x = _mm256_max_ps(x, lo);
	n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, ln2_hi, x);
	r = _mm256_fnmadd_ps(n, ln2_lo, r);
	p = _mm256_set1_ps(1.0f / 720);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

/* ng (1..NTX_ATTN_G) heads of hd elements (hd % 8 == 0, hd <= NTX_ATTN_HD)
 * at q (consecutive), attending to n_pos positions of K and V rows of one KV
 * head (k, v: position 0; row elements between positions; F16 or F32), into
 * out (ng x hd). */
void ntx_attn_avx2(const float *q, int ng, int hd, const void *k, const void *v, int f16, int64_t row,
		   int n_pos, float scale, float *out)
{
	_Alignas(32) float s[NTX_ATTN_G][AT_T];
	_Alignas(32) float acc[NTX_ATTN_G][NTX_ATTN_HD];
	float m[NTX_ATTN_G], l[NTX_ATTN_G];
	const int nc = hd / 8;

	for (int g = 0; g < ng; g++) {
		m[g] = -INFINITY, l[g] = 0.0f;
		for (int c = 0; c < hd; c++)
			acc[g][c] = 0.0f;
	}
	for (int p0 = 0; p0 < n_pos; p0 += AT_T) {
		const int np = n_pos - p0 < AT_T ? n_pos - p0 : AT_T;

		/* scores: each K row converted once for the ng heads */
		for (int p = 0; p < np; p++) {
			const int64_t kr = (int64_t)(p0 + p) * row;
			__m256 d[NTX_ATTN_G];

			for (int g = 0; g < ng; g++)
				d[g] = _mm256_setzero_ps();
			for (int c = 0; c < nc; c++) {
				const __m256 kc = load8(k, kr + 8 * c, f16);

				for (int g = 0; g < ng; g++)
					d[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (int64_t)g * hd + 8 * c), kc, d[g]);
			}
			for (int g = 0; g < ng; g++)
				s[g][p] = hsum8(d[g]) * scale;
		}
		/* online softmax */
		for (int g = 0; g < ng; g++) {
			float mt = m[g], alpha, sum = 0.0f;
			int p;

			for (p = 0; p < np; p++)
				mt = s[g][p] > mt ? s[g][p] : mt;
			alpha = expf(m[g] - mt); /* 0 on the first tile (m = -inf) */
			{
				const __m256 mv = _mm256_set1_ps(mt);
				__m256 sv = _mm256_setzero_ps();

				for (p = 0; p + 8 <= np; p += 8) {
					__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(&s[g][p]), mv));

					_mm256_storeu_ps(&s[g][p], e);
					sv = _mm256_add_ps(sv, e);
				}
				sum = hsum8(sv);
			}
			for (; p < np; p++) {
				_Alignas(32) float t[8] = { s[g][p] - mt, 0, 0, 0, 0, 0, 0, 0 };

				s[g][p] = _mm_cvtss_f32(_mm256_castps256_ps128(exp8(_mm256_load_ps(t))));
				sum += s[g][p];
			}
			l[g] = l[g] * alpha + sum;
			m[g] = mt;
			if (alpha != 1.0f) {
				const __m256 a = _mm256_set1_ps(alpha);

				for (int c = 0; c < nc; c++)
					_mm256_store_ps(&acc[g][8 * c], _mm256_mul_ps(_mm256_load_ps(&acc[g][8 * c]), a));
			}
		}
		/* values: a chunk of the head dimension at a time, for all heads */
		for (int c = 0; c < nc; c++) {
			__m256 a[NTX_ATTN_G];

			for (int g = 0; g < ng; g++)
				a[g] = _mm256_load_ps(&acc[g][8 * c]);
			for (int p = 0; p < np; p++) {
				const __m256 vc = load8(v, (int64_t)(p0 + p) * row + 8 * c, f16);

				for (int g = 0; g < ng; g++)
					a[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&s[g][p]), vc, a[g]);
			}
			for (int g = 0; g < ng; g++)
				_mm256_store_ps(&acc[g][8 * c], a[g]);
		}
	}
	for (int g = 0; g < ng; g++) {
		const __m256 il = _mm256_set1_ps(1.0f / l[g]);

		for (int c = 0; c < nc; c++)
			_mm256_storeu_ps(out + (int64_t)g * hd + 8 * c, _mm256_mul_ps(_mm256_load_ps(&acc[g][8 * c]), il));
	}
}
