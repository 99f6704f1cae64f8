/* quant_amx.c - AMX-INT8 matrix kernels for Q4_K and Q5_K weights (built with
 * -mamx-tile -mamx-int8 and the AVX-512 flags, called only when the CPU has
 * AMX and the kernel lets this process use it). Everything else, and a
 * single token, comes from the AVX-512 table.
 *
 * A tile call covers up to 16 weight rows and 64 tokens. Per super-block of
 * the rows:
 *   1. the 16 rows' nibbles (Q5_K: plus the fifth bit) are unpacked to bytes
 *      in a staging buffer, one 256-byte line per row, and their 6-bit
 *      scales and mins decoded;
 *   2. for every group of 16 tokens and every sub-block j of 32 elements,
 *      TDPBUSD multiplies the 16 x 32 unsigned weights by the group's 32 x 16
 *      activations (prepared in the VNNI layout AMX reads) into a 16 x 16
 *      int32 tile: the exact sub-block sums P_j of every (row, token);
 *   3. AVX-512, 16 tokens a vector: I = sum_j sc_j P_j (vpmulld), M = sum_j
 *      m_j S_j (S_j: the group's per-32 activation sums, vpmaddwd), and the
 *      canonical float step of cpu_impl.h per (row, token) on lane b % 4:
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
 * Group layout (per NTX_GROUP_T = 16 tokens), per super-block b:
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

/* ---- the group layout ---- */

static int is_k(uint32_t wtype)
{
	return wtype == NTX_TYPE_Q4_K || wtype == NTX_TYPE_Q5_K;
}

/* Below this many tokens the AVX-512 kernels (same arithmetic) are faster:
 * a group costs the same whatever its tokens (single core, 4096 x 4096
 * Q4_K: AMX ~5 ms for 2 or 16 tokens; AVX-512 1.1 ms for 2, 6.5 for 16). */
#define AMX_MIN_TOK 12

static int group(uint32_t wtype, int64_t n_tok)
{
	return is_k(wtype) && n_tok >= AMX_MIN_TOK ? NTX_GROUP_T : 0;
}

static size_t group_bytes(uint32_t wtype, int64_t n)
{
	return is_k(wtype) ? (size_t)(n / NTX_QK_K) * GB_BLOCK : 0;
}

static void prepare_group(uint32_t wtype, const void *xq, void *gbuf, int t, int64_t n)
{
	const struct ntx_block_q8_k *x = xq;

	(void)wtype;
	for (int64_t b = 0; b < n / NTX_QK_K; b++, x++) {
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

/* ---- the tile kernel ---- */

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

/* Where sub-block j of a row sits in its staging line: the unpacked low
 * nibbles of qs[0..63] hold sub-blocks 0 and 2, their high nibbles 1 and 3,
 * and the same for qs[64..127] with 4 6 and 5 7. */
static const int stage_off[8] = { 0, 64, 32, 96, 128, 192, 160, 224 };

struct blk_sc {
	int32_t sc[TILE_ROWS][8]; /* [row][j] */
	int32_t mp[TILE_ROWS][4]; /* [row][p]: int16 pairs m_2p, m_2p+1 */
	float d[TILE_ROWS], dmin[TILE_ROWS];
};

/* Step 1 for super-block b of rows w (ws bytes apart, nr of them; missing
 * rows repeat the last). */
static inline void unpack_rows(int q5, const void *w, size_t ws, int nr, int64_t b, uint8_t *stage,
			       struct blk_sc *bs)
{
	const __m512i m4 = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16);
	const __m512i hb[4] = {
		_mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(4), 1),
		_mm512_inserti64x4(_mm512_set1_epi8(2), _mm256_set1_epi8(8), 1),
		_mm512_inserti64x4(_mm512_set1_epi8(16), _mm256_set1_epi8(64), 1),
		_mm512_inserti64x4(_mm512_set1_epi8(32), _mm256_set1_epi8((char)-128), 1),
	};

	for (int r = 0; r < TILE_ROWS; r++) {
		const char *row = (const char *)w + (size_t)(r < nr ? r : nr - 1) * ws;
		const struct ntx_block_q4_k *b4 = (const struct ntx_block_q4_k *)row + b;
		const struct ntx_block_q5_k *b5 = (const struct ntx_block_q5_k *)row + b;
		const uint8_t *qs = q5 ? b5->qs : b4->qs;
		uint64_t sc, mn;
		__m512i v[4], q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);

		ntx_k_scales8(q5 ? b5->scales : b4->scales, &sc, &mn);
		_mm256_store_si256((__m256i *)bs->sc[r], _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
		_mm_store_si128((__m128i *)bs->mp[r], _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn)));
		bs->d[r] = _cvtsh_ss(q5 ? b5->d : b4->d);
		bs->dmin[r] = _cvtsh_ss(q5 ? b5->dmin : b4->dmin);
		v[0] = _mm512_and_si512(q0, m4);
		v[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
		v[2] = _mm512_and_si512(q1, m4);
		v[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
		if (q5) {
			__m512i hh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b5->qh));

			for (int k = 0; k < 4; k++)
				v[k] = _mm512_mask_add_epi8(v[k], _mm512_test_epi8_mask(hh, hb[k]), v[k], c16);
		}
		for (int k = 0; k < 4; k++)
			_mm512_store_si512(stage + 256 * r + 64 * k, v[k]);
	}
}

/* Step 2 for sub-block j: its 16 x 16 sums into cbuf[j] (C tiles rotate
 * over 0-3, A and B over two each, so that the dot products overlap). */
static inline void amx_sub(int j, const uint8_t *stage, const uint8_t *gb, int32_t (*cbuf)[256])
{
#define DP(ct, at, bt)                                          \
	do {                                                    \
		_tile_zero(ct);                                 \
		_tile_loadd(at, stage + stage_off[j], 256);     \
		_tile_loadd(bt, gb + 512 * j, 64);              \
		_tile_dpbusd(ct, at, bt);                       \
		_tile_stored(ct, cbuf[j], 64);                  \
	} while (0)
	switch (j & 3) { /* tile numbers are immediates */
	case 0: DP(0, 4, 6); break;
	case 1: DP(1, 5, 7); break;
	case 2: DP(2, 4, 6); break;
	default: DP(3, 5, 7); break;
	}
#undef DP
}

/* Step 3 for row r of one token group (its block's group data gb): the
 * canonical update of lane `lane` of acc (16 tokens at ap). */
static inline void epi_row(int r, const uint8_t *gb, const int32_t (*cbuf)[256], const struct blk_sc *bs,
			   float *ap)
{
	const __m512 dx = _mm512_load_ps((const float *)(gb + GB_D));
	__m512i I = _mm512_mullo_epi32(_mm512_load_si512(cbuf[0] + 16 * r), _mm512_set1_epi32(bs->sc[r][0]));
	__m512i M = _mm512_madd_epi16(_mm512_load_si512(gb + GB_S), _mm512_set1_epi32(bs->mp[r][0]));
	__m512 a = _mm512_load_ps(ap);

	for (int j = 1; j < 8; j++)
		I = _mm512_add_epi32(I, _mm512_mullo_epi32(_mm512_load_si512(cbuf[j] + 16 * r),
							   _mm512_set1_epi32(bs->sc[r][j])));
	for (int p = 1; p < 4; p++)
		M = _mm512_add_epi32(M, _mm512_madd_epi16(_mm512_load_si512(gb + GB_S + 64 * p),
							  _mm512_set1_epi32(bs->mp[r][p])));
	a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(dx, _mm512_set1_ps(bs->d[r])), a);
	a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dx, _mm512_set1_ps(bs->dmin[r])), a);
	_mm512_store_ps(ap, a);
}

/* Per super-block: step 1, then for each token group steps 2 and 3. (A
 * software-pipelined order, step 3 of one item interleaved with step 2 of
 * the next, measured 10-15% slower.) */
static inline void tile_k(int q5, int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
			  int nt, float *y, int64_t ldy)
{
	_Alignas(64) uint8_t stage[TILE_ROWS * 256];
	_Alignas(64) int32_t cbuf[8][256];
	_Alignas(64) float acc[TILE_ROWS * 4 * TILE_TOKENS]; /* [row][lane][16 G tokens] */
	_Alignas(64) struct blk_sc bs;
	const int64_t nb = n / NTX_QK_K;
	const int G = (nt + NTX_GROUP_T - 1) / NTX_GROUP_T, ls = NTX_GROUP_T * G; /* lane stride */
	/* the next tile's rows, spread over this tile's blocks */
	const char *next = (const char *)w + (size_t)TILE_ROWS * ws;
	const size_t pf = ((size_t)TILE_ROWS * ws / (size_t)nb + 63) & ~(size_t)63;

	tile_config();
	memset(acc, 0, sizeof(float) * TILE_ROWS * 4 * (size_t)ls);
	for (int64_t b = 0; b < nb; b++) {
		for (size_t o = 0; o < pf; o += 64)
			_mm_prefetch(next + (size_t)b * pf + o, _MM_HINT_T0);
		unpack_rows(q5, w, ws, nr, b, stage, &bs);
		for (int g = 0; g < G; g++) {
			const uint8_t *gb = (const uint8_t *)x + (size_t)g * xs + (size_t)b * GB_BLOCK;
			float *ap = acc + (b & 3) * ls + NTX_GROUP_T * g;

			for (int j = 0; j < 8; j++)
				amx_sub(j, stage, gb, cbuf);
			for (int r = 0; r < TILE_ROWS; r++)
				epi_row(r, gb, (const int32_t (*)[256])cbuf, &bs, ap + r * 4 * ls);
		}
	}
	for (int r = 0; r < nr; r++) {
		const float *a = acc + r * 4 * ls;

		for (int t = 0; t < nt; t++)
			y[(int64_t)t * ldy + r] = (a[t] + a[2 * ls + t]) + (a[ls + t] + a[3 * ls + t]);
	}
}

static void tile_q4_k(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nt,
		      float *y, int64_t ldy)
{
	tile_k(0, n, w, ws, nr, x, xs, nt, y, ldy);
}

static void tile_q5_k(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nt,
		      float *y, int64_t ldy)
{
	tile_k(1, n, w, ws, nr, x, xs, nt, y, ldy);
}

static ntx_tile_fn tile_group(uint32_t wtype)
{
	return wtype == NTX_TYPE_Q4_K ? tile_q4_k : wtype == NTX_TYPE_Q5_K ? tile_q5_k : NULL;
}

/* ---- the table: the AVX-512 one, with Q4_K / Q5_K in canonical form ---- */

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
