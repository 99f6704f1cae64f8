/* quant_amx.c - AMX-INT8 matrix kernels for Q4_K, Q5_K, Q6_K and Q8_0 weights (built with
 * -mamx-tile -mamx-int8 and the AVX-512 flags, called only when the CPU has
 * AMX and the kernel lets this process use it). Everything else, and a
 * single token, comes from the AVX-512 table.
 *
 * A tile call covers up to 16 weight rows and 64 tokens. Per super-block of
 * the rows:
 *   1. the 16 rows' values (Q4_K nibbles, Q5_K with the fifth bit, Q6_K six
 *      bits, all unsigned) are unpacked to bytes in a staging buffer, one
 *      256-byte line per row, and their scales (and mins) decoded;
 *   2. for every group of 16 tokens and every sub-block j (32 elements;
 *      Q6_K: 16), TDPBUSD multiplies the 16 rows' unsigned values by the
 *      group's activations (prepared in the VNNI layout AMX reads) into a
 *      16 x 16 int32 tile: the exact sub-block sums P_j of every (row, token);
 *   3. AVX-512, 16 tokens a vector: I = sum_j sc_j P_j (vpmulld), M = sum_j
 *      m_j S_j (S_j: the group's per-sub-block activation sums, vpmaddwd;
 *      Q6_K: I -= 32 sum_j sc_j S_j instead), and the canonical float step
 *      of cpu_impl.h per (row, token) on lane b % 4:
 *        a = fma(I, dx * d, a); a = fma(-M, dx * dmin, a),
 *      the result (a_0 + a_2) + (a_1 + a_3).
 * The same integers and float operations as ntx_avx512_tile_canon, which
 * serves fewer tokens: batches are bitwise what each token gets alone.
 *
 * Four C tiles rotate so that the TDPBUSD latency overlaps; the next rows of
 * the matrix are prefetched during the current tile (the 16 rows are read
 * interleaved, which the hardware prefetchers follow poorly). Single core,
 * 4096 x 2048 Q4_K, against the AVX-512 kernel in the same run: 1.5x at 12
 * tokens, 1.9x at 16, 2.3x at 32, 2.5x at 64 (bench_kernels has the matmul
 * rates).
 *
 * Q8_0 (signed quants: TDPBSSD) 8 blocks at a time: the rows' quants are
 * copied to staging and each block's exact integer dot P_b comes out of one
 * tile; a = fma(P_b, dw_b * dx_b, a) on lane b % 4, as the canonical
 * AVX-512 Q8_0 kernel. Single core, 4096 x 4096: 1.5x at 12 tokens, 1.8x at
 * 16, 2.5x at 32; the canonical kernel below 12 tokens costs 5-12% against
 * the lane kernel it replaces (per-block horizontal sums; NTX_NO_AMX=1
 * returns to it).
 *
 * Q4_K / Q5_K group layout (per NTX_GROUP_T = 16 tokens), per super-block b:
 *   [0, 4096)     8 sub-blocks x 8 rows x 64 bytes: row k of sub-block j
 *                 holds, for token t, its quants 32j + 4k .. 32j + 4k + 3;
 *   [4096, 4160)  16 floats: each token's Q8_K d;
 *   [4160, 4416)  4 x 16 int16 pairs (S_2p, S_2p+1) per token, the sums of
 *                 the quants of sub-blocks 2p and 2p + 1. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "cpu_impl.h"
#include "kquant_avx512.h"

#define GB_BLOCK 4416
#define GB_D 4096
#define GB_S 4160
#define TILE_ROWS 16
#define TILE_TOKENS 64

/* ---- can this process use AMX? ---- */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int ntx_cpu_has_amx(void)
{
	static int state = -1;
	unsigned a, b, c, d;

	if (state >= 0)
		return state;
	state = 0;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
	if (!(d & (1u << 24)) || !(d & (1u << 25))) /* AMX-TILE, AMX-INT8 */
		return 0;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	if (!(c & (1u << 27))) /* OSXSAVE */
		return 0;
	{
		unsigned lo, hi;

		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		if ((lo & 0x60000) != 0x60000) /* XTILECFG, XTILEDATA enabled by the OS */
			return 0;
	}
	state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
	return state;
}

/* ---- the group layouts ---- */

/* Below this many tokens the AVX-512 kernels (same arithmetic) are faster:
 * a group costs the same whatever its tokens. Single core, 4096 x 4096,
 * GMAC/s AVX-512 / AMX: Q4_K 12 tokens 51 / 85, 16: 49 / 89; Q6_K (twice
 * the tiles and scale products per block) 16: 47 / 48, 24: 47 / 48, 32:
 * 49 / 61, 64: 53 / 79. */
#define AMX_MIN_TOK 12
#define AMX_MIN_TOK_Q6 32

/* Q6_K per super-block: 8 pairs of sub-blocks (32 elements) x two 8 x 64
 * B tiles, the first with the pair's first 16 elements (rows 4-7 zero), the
 * second with the last 16 (rows 0-3 zero), so that one A tile of the pair
 * gives both 16-element sums; then 16 floats d; then 8 x 16 int16 pairs
 * (S_2p, S_2p+1) of the per-16 quant sums (bsums). */
#define GB6_BLOCK 8768
#define GB6_D 8192
#define GB6_S 8256

/* Q8_0 per block of 32: one 8 x 64 B tile, then 16 floats d. */
#define GB8_BLOCK 576
#define GB8_D 512

static int grouped(uint32_t wtype)
{
	return wtype == NTX_TYPE_Q4_K || wtype == NTX_TYPE_Q5_K || wtype == NTX_TYPE_Q6_K ||
	       wtype == NTX_TYPE_Q8_0;
}

static int group(uint32_t wtype, int64_t n_tok)
{
	return grouped(wtype) && n_tok >= (wtype == NTX_TYPE_Q6_K ? AMX_MIN_TOK_Q6 : AMX_MIN_TOK) ? NTX_GROUP_T : 0;
}

static size_t group_bytes(uint32_t wtype, int64_t n)
{
	if (!grouped(wtype))
		return 0;
	if (wtype == NTX_TYPE_Q8_0)
		return (size_t)(n / NTX_QK) * GB8_BLOCK;
	return (size_t)(n / NTX_QK_K) * (wtype == NTX_TYPE_Q6_K ? GB6_BLOCK : GB_BLOCK);
}

static void prepare_group(uint32_t wtype, const void *xq, void *gbuf, int t, int64_t n)
{
	const struct ntx_block_q8_k *x = xq;
	const uint32_t zero = 0;

	if (wtype == NTX_TYPE_Q8_0) {
		const struct ntx_block_q8_0 *x8 = xq;

		for (int64_t b = 0; b < n / NTX_QK; b++, x8++) {
			uint8_t *g = (uint8_t *)gbuf + b * GB8_BLOCK;
			const float d = ntx_fp16_to_fp32(x8->d);

			for (int k = 0; k < 8; k++)
				memcpy(g + 64 * k + 4 * t, x8->qs + 4 * k, 4);
			memcpy(g + GB8_D + 4 * t, &d, 4);
		}
		return;
	}

	for (int64_t b = 0; b < n / NTX_QK_K; b++, x++) {
		if (wtype == NTX_TYPE_Q6_K) {
			uint8_t *g = (uint8_t *)gbuf + b * GB6_BLOCK;
			int16_t *S = (int16_t *)(g + GB6_S);

			for (int p = 0; p < 8; p++)
				for (int k = 0; k < 8; k++) {
					memcpy(g + 1024 * p + 64 * k + 4 * t, k < 4 ? x->qs + 32 * p + 4 * k : (const int8_t *)&zero, 4);
					memcpy(g + 1024 * p + 512 + 64 * k + 4 * t, k >= 4 ? x->qs + 32 * p + 4 * k : (const int8_t *)&zero, 4);
				}
			memcpy(g + GB6_D + 4 * t, &x->d, 4);
			for (int p = 0; p < 8; p++) {
				S[32 * p + 2 * t] = x->bsums[2 * p];
				S[32 * p + 2 * t + 1] = x->bsums[2 * p + 1];
			}
			continue;
		}
		{
			uint8_t *g = (uint8_t *)gbuf + b * GB_BLOCK;
			int16_t *S = (int16_t *)(g + GB_S);

			for (int j = 0; j < 8; j++)
				for (int k = 0; k < 8; k++)
					memcpy(g + 512 * j + 64 * k + 4 * t, x->qs + 32 * j + 4 * k, 4);
			memcpy(g + GB_D + 4 * t, &x->d, 4);
			for (int p = 0; p < 4; p++) {
				S[32 * p + 2 * t] = (int16_t)(x->bsums[4 * p] + x->bsums[4 * p + 1]);
				S[32 * p + 2 * t + 1] = (int16_t)(x->bsums[4 * p + 2] + x->bsums[4 * p + 3]);
			}
		}
	}
}

/* ---- the tile kernels ---- */

struct tcfg {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/* C: tiles 0-3 (16 x 16 int32); A: 4-5 (16 rows x 32 bytes); B: 6-7 (8 x 64).
 * A constant in memory: GCC 12 drops stores into a local struct that only
 * ldtilecfg reads. */
static const struct tcfg amx_cfg __attribute__((aligned(64))) = {
	.palette = 1,
	.colsb = { 64, 64, 64, 64, 32, 32, 64, 64 },
	.rows = { 16, 16, 16, 16, 16, 16, 8, 8 },
};

static void tile_config(void)
{
	static __thread int loaded;

	if (loaded)
		return;
	_tile_loadconfig(&amx_cfg);
	loaded = 1;
}

/* Where sub-block j of a Q4_K / Q5_K row sits in its staging line (k_values'
 * register order: 0 2 | 1 3 | 4 6 | 5 7); Q6_K rows are in element order. */
static const int stage_off[8] = { 0, 64, 32, 96, 128, 192, 160, 224 };

/* A tile row group's scales for one super-block. */
struct blk_sc {
	int32_t sc[TILE_ROWS][16]; /* [row][j]: Q4_K 8, Q6_K 16 sub-block scales */
	int32_t mp[TILE_ROWS][8];  /* [row][p] int16 pairs: Q4_K mins m_2p, m_2p+1; Q6_K scales */
	float d[TILE_ROWS], dmin[TILE_ROWS];
};

/* Step 1 for super-block b of rows w (ws bytes apart, nr of them; missing
 * rows repeat the last) of type T. */
static inline void unpack_rows(uint32_t T, const void *w, size_t ws, int nr, int64_t b, uint8_t *stage,
			       struct blk_sc *bs)
{
	for (int r = 0; r < TILE_ROWS; r++) {
		const char *row = (const char *)w + (size_t)(r < nr ? r : nr - 1) * ws;
		__m512i v[4];

		if (T == NTX_TYPE_Q6_K) {
			const struct ntx_block_q6_k *b6 = (const struct ntx_block_q6_k *)row + b;
			const __m128i s8 = _mm_loadu_si128((const __m128i *)b6->scales);

			q6_k_unpack(b6, v);
			_mm512_store_si512(bs->sc[r], _mm512_cvtepi8_epi32(s8));
			_mm256_store_si256((__m256i *)bs->mp[r], _mm256_cvtepi8_epi16(s8));
			bs->d[r] = _cvtsh_ss(b6->d);
		} else {
			const int q5 = T == NTX_TYPE_Q5_K;
			const struct ntx_block_q4_k *b4 = (const struct ntx_block_q4_k *)row + b;
			const struct ntx_block_q5_k *b5 = (const struct ntx_block_q5_k *)row + b;
			uint64_t sc, mn;

			ntx_k_scales8(q5 ? b5->scales : b4->scales, &sc, &mn);
			_mm256_store_si256((__m256i *)bs->sc[r], _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
			_mm_store_si128((__m128i *)bs->mp[r], _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn)));
			bs->d[r] = _cvtsh_ss(q5 ? b5->d : b4->d);
			bs->dmin[r] = _cvtsh_ss(q5 ? b5->dmin : b4->dmin);
			k_values(q5, q5 ? (const void *)b5 : (const void *)b4, v);
		}
		for (int k = 0; k < 4; k++)
			_mm512_store_si512(stage + 256 * r + 64 * k, v[k]);
	}
}

/* c = A . B for the 16 x 32 bytes at a (lines 256 apart) and the 8 x 64 at b:
 * unsigned A (DP, the K-quants' values) or signed (DPS, Q8_0's quants). */
#define DPX(op, ct, at, bt, a, b, c)                    \
	do {                                            \
		_tile_zero(ct);                         \
		_tile_loadd(at, a, 256);                \
		_tile_loadd(bt, b, 64);                 \
		op(ct, at, bt);                         \
		_tile_stored(ct, c, 64);                \
	} while (0)
#define DP(ct, at, bt, a, b, c) DPX(_tile_dpbusd, ct, at, bt, a, b, c)
#define DPS(ct, at, bt, a, b, c) DPX(_tile_dpbssd, ct, at, bt, a, b, c)

/* Step 2, Q4_K / Q5_K sub-block j: its 16 x 16 sums into cbuf[j] (C tiles
 * rotate over 0-3, A and B over two each, so that the dot products
 * overlap). */
static inline void amx_sub(int j, const uint8_t *stage, const uint8_t *gb, int32_t (*cbuf)[256])
{
	const uint8_t *a = stage + stage_off[j], *b = gb + 512 * j;

	switch (j & 3) { /* tile numbers are immediates */
	case 0: DP(0, 4, 6, a, b, cbuf[j]); break;
	case 1: DP(1, 5, 7, a, b, cbuf[j]); break;
	case 2: DP(2, 4, 6, a, b, cbuf[j]); break;
	default: DP(3, 5, 7, a, b, cbuf[j]); break;
	}
}

/* Step 2, Q6_K pair p: one A tile, the sums of sub-blocks 2p and 2p + 1
 * into cbuf[2p], cbuf[2p + 1]. */
static inline void amx_pair6(int p, const uint8_t *stage, const uint8_t *gb, int32_t (*cbuf)[256])
{
	const uint8_t *b = gb + 1024 * p;

#define DP2(c0, c1, at)                                                 \
	do {                                                            \
		_tile_zero(c0);                                         \
		_tile_zero(c1);                                         \
		_tile_loadd(at, stage + 32 * p, 256);                   \
		_tile_loadd(6, b, 64);                                  \
		_tile_loadd(7, b + 512, 64);                            \
		_tile_dpbusd(c0, at, 6);                                \
		_tile_dpbusd(c1, at, 7);                                \
		_tile_stored(c0, cbuf[2 * p], 64);                      \
		_tile_stored(c1, cbuf[2 * p + 1], 64);                  \
	} while (0)
	if (p & 1)
		DP2(2, 3, 5);
	else
		DP2(0, 1, 4);
#undef DP2
}

/* Step 3 for row r of one token group (its block's group data gb): the
 * canonical update of the lane at ap (16 tokens). */
static inline void epi_row(uint32_t T, int r, const uint8_t *gb, const int32_t (*cbuf)[256],
			   const struct blk_sc *bs, float *ap)
{
	const int nj = T == NTX_TYPE_Q6_K ? 16 : 8;
	const uint8_t *S = gb + (T == NTX_TYPE_Q6_K ? GB6_S : GB_S);
	const __m512 dx = _mm512_load_ps((const float *)(gb + (T == NTX_TYPE_Q6_K ? GB6_D : GB_D)));
	__m512i I = _mm512_mullo_epi32(_mm512_load_si512(cbuf[0] + 16 * r), _mm512_set1_epi32(bs->sc[r][0]));
	__m512i M = _mm512_madd_epi16(_mm512_load_si512(S), _mm512_set1_epi32(bs->mp[r][0]));
	__m512 a = _mm512_load_ps(ap);

	for (int j = 1; j < nj; j++)
		I = _mm512_add_epi32(I, _mm512_mullo_epi32(_mm512_load_si512(cbuf[j] + 16 * r),
							   _mm512_set1_epi32(bs->sc[r][j])));
	for (int p = 1; p < nj / 2; p++)
		M = _mm512_add_epi32(M, _mm512_madd_epi16(_mm512_load_si512(S + 64 * p), _mm512_set1_epi32(bs->mp[r][p])));
	if (T == NTX_TYPE_Q6_K) { /* I - 32 sum_j sc_j S_j: the values are q - 32 */
		I = _mm512_sub_epi32(I, _mm512_slli_epi32(M, 5));
		a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(dx, _mm512_set1_ps(bs->d[r])), a);
	} else {
		a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(dx, _mm512_set1_ps(bs->d[r])), a);
		a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dx, _mm512_set1_ps(bs->dmin[r])), a);
	}
	_mm512_store_ps(ap, a);
}

/* Per super-block: step 1, then for each token group steps 2 and 3. (A
 * software-pipelined order, step 3 of one item interleaved with step 2 of
 * the next, measured 10-15% slower.) */
static inline void tile_k(uint32_t T, int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
			  int nt, float *y, int64_t ldy)
{
	_Alignas(64) uint8_t stage[TILE_ROWS * 256];
	_Alignas(64) int32_t cbuf[16][256];
	_Alignas(64) float acc[TILE_ROWS * 4 * TILE_TOKENS]; /* [row][lane][16 G tokens] */
	_Alignas(64) struct blk_sc bs;
	const int64_t nb = n / NTX_QK_K;
	const size_t gblk = T == NTX_TYPE_Q6_K ? GB6_BLOCK : GB_BLOCK;
	const int G = (nt + NTX_GROUP_T - 1) / NTX_GROUP_T, ls = NTX_GROUP_T * G; /* lane stride */
	/* the next tile's rows, spread over this tile's blocks */
	const char *next = (const char *)w + (size_t)TILE_ROWS * ws;
	const size_t pf = ((size_t)TILE_ROWS * ws / (size_t)nb + 63) & ~(size_t)63;

	tile_config();
	memset(acc, 0, sizeof(float) * TILE_ROWS * 4 * (size_t)ls);
	for (int64_t b = 0; b < nb; b++) {
		for (size_t o = 0; o < pf; o += 64)
			_mm_prefetch(next + (size_t)b * pf + o, _MM_HINT_T0);
		unpack_rows(T, w, ws, nr, b, stage, &bs);
		for (int g = 0; g < G; g++) {
			const uint8_t *gb = (const uint8_t *)x + (size_t)g * xs + (size_t)b * gblk;
			float *ap = acc + (b & 3) * ls + NTX_GROUP_T * g;

			if (T == NTX_TYPE_Q6_K)
				for (int p = 0; p < 8; p++)
					amx_pair6(p, stage, gb, cbuf);
			else
				for (int j = 0; j < 8; j++)
					amx_sub(j, stage, gb, cbuf);
			for (int r = 0; r < TILE_ROWS; r++)
				epi_row(T, r, gb, (const int32_t (*)[256])cbuf, &bs, ap + r * 4 * ls);
		}
	}
	for (int r = 0; r < nr; r++) {
		const float *a = acc + r * 4 * ls;

		for (int t = 0; t < nt; t++)
			y[(int64_t)t * ldy + r] = (a[t] + a[2 * ls + t]) + (a[ls + t] + a[3 * ls + t]);
	}
}

/* Q8_0, 8 blocks of 32 at a time: the 16 rows' quants copied to a staging
 * buffer (straight tile loads from the rows, 16 lines in 16 pages, measured
 * 5x slower), their fp16 d's converted; per token group one tile product per
 * block (C tiles rotate); per (row, block) a = fma((float)P, dx * dw, a). */
static void tile_q8_0(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nt, float *y,
		      int64_t ldy)
{
	_Alignas(64) uint8_t stage[TILE_ROWS * 256];
	_Alignas(64) int32_t cbuf[8][256];
	_Alignas(64) float acc[TILE_ROWS * 4 * TILE_TOKENS];
	_Alignas(64) float dw[TILE_ROWS][8];
	const int64_t nb = n / NTX_QK;
	const int G = (nt + NTX_GROUP_T - 1) / NTX_GROUP_T, ls = NTX_GROUP_T * G;
	const char *next = (const char *)w + (size_t)TILE_ROWS * ws;
	const size_t pf = ((size_t)TILE_ROWS * ws / (size_t)((nb + 7) / 8) + 63) & ~(size_t)63;

	tile_config();
	memset(acc, 0, sizeof(float) * TILE_ROWS * 4 * (size_t)ls);
	for (int64_t b0 = 0; b0 < nb; b0 += 8) {
		const int k8 = nb - b0 < 8 ? (int)(nb - b0) : 8;

		for (size_t o = 0; o < pf; o += 64)
			_mm_prefetch(next + (size_t)(b0 / 8) * pf + o, _MM_HINT_T0);
		for (int r = 0; r < TILE_ROWS; r++) {
			const struct ntx_block_q8_0 *blk =
				(const struct ntx_block_q8_0 *)((const char *)w + (size_t)(r < nr ? r : nr - 1) * ws) + b0;

			for (int k = 0; k < k8; k++) {
				_mm256_store_si256((__m256i *)(stage + 256 * r + 32 * k),
						   _mm256_loadu_si256((const __m256i *)blk[k].qs));
				dw[r][k] = _cvtsh_ss(blk[k].d);
			}
		}
		for (int g = 0; g < G; g++) {
			const uint8_t *gb = (const uint8_t *)x + (size_t)g * xs + (size_t)b0 * GB8_BLOCK;
			float *ap = acc + NTX_GROUP_T * g;

			for (int k = 0; k < k8; k++) {
				const uint8_t *a = stage + 32 * k, *bb = gb + (size_t)k * GB8_BLOCK;

				switch (k & 3) { /* tile numbers are immediates */
				case 0: DPS(0, 4, 6, a, bb, cbuf[k]); break;
				case 1: DPS(1, 5, 7, a, bb, cbuf[k]); break;
				case 2: DPS(2, 4, 6, a, bb, cbuf[k]); break;
				default: DPS(3, 5, 7, a, bb, cbuf[k]); break;
				}
			}
			for (int k = 0; k < k8; k++) {
				const __m512 dx = _mm512_load_ps((const float *)(gb + (size_t)k * GB8_BLOCK + GB8_D));
				float *lp = ap + ((b0 + k) & 3) * ls;

				for (int r = 0; r < TILE_ROWS; r++) {
					float *p = lp + r * 4 * ls;

					_mm512_store_ps(p, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cbuf[k] + 16 * r)),
									   _mm512_mul_ps(dx, _mm512_set1_ps(dw[r][k])),
									   _mm512_load_ps(p)));
				}
			}
		}
	}
	for (int r = 0; r < nr; r++) {
		const float *a = acc + r * 4 * ls;

		for (int t = 0; t < nt; t++)
			y[(int64_t)t * ldy + r] = (a[t] + a[2 * ls + t]) + (a[ls + t] + a[3 * ls + t]);
	}
}

#define TILE_FN(name, T)                                                                        \
	static void name(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, \
			 int nt, float *y, int64_t ldy)                                         \
	{                                                                                       \
		tile_k(T, n, w, ws, nr, x, xs, nt, y, ldy);                                     \
	}
TILE_FN(tile_q4_k, NTX_TYPE_Q4_K)
TILE_FN(tile_q5_k, NTX_TYPE_Q5_K)
TILE_FN(tile_q6_k, NTX_TYPE_Q6_K)

static ntx_tile_fn tile_group(uint32_t wtype)
{
	switch (wtype) {
	case NTX_TYPE_Q4_K: return tile_q4_k;
	case NTX_TYPE_Q5_K: return tile_q5_k;
	case NTX_TYPE_Q6_K: return tile_q6_k;
	case NTX_TYPE_Q8_0: return tile_q8_0;
	default: return NULL;
	}
}

/* ---- the table: the AVX-512 one, with the K-quants in canonical form ---- */

static size_t prep_bytes(uint32_t wtype, int64_t n)
{
	return ntx_cpu_isa_avx512.prep_bytes(wtype, n);
}

static void prepare(uint32_t wtype, const void *xq, void *xp, int64_t n)
{
	ntx_cpu_isa_avx512.prepare(wtype, xq, xp, n);
}

static ntx_tile_fn tile_for(uint32_t wtype)
{
	ntx_tile_fn c = ntx_avx512_tile_canon(wtype);

	return c ? c : ntx_cpu_isa_avx512.tile(wtype);
}

const struct ntx_cpu_isa ntx_cpu_isa_amx = {
	.name = "avx512 vnni amx",
	.dequant_row = ntx_dequant_row_avx2,
	.quantize_act = ntx_quantize_act_avx2,
	.prep_bytes = prep_bytes,
	.prepare = prepare,
	.tile = tile_for,
	.attn = ntx_attn_avx2,
	.group = group,
	.group_bytes = group_bytes,
	.prepare_group = prepare_group,
	.tile_group = tile_group,
	.group_rows = TILE_ROWS,
	.group_tokens = TILE_TOKENS,
};
