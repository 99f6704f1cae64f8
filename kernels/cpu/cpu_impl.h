/* cpu_impl.h - internal to the CPU kernels: the per-ISA kernel table that
 * dispatch.c selects at run time, and helpers shared by the kernel files.
 * Not part of the library's API (tests and benchmarks may include it to
 * pin an ISA). */
#ifndef NTX_CPU_IMPL_H
#define NTX_CPU_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ntx_cpu.h"

/* Largest tile a tile kernel is asked for (rows x tokens). */
#define NTX_TILE_R 4
#define NTX_TILE_T 16

/* A tile kernel: for r < nr and t < nt,
 *   y[t * ldy + r] = dot(weight row r, activation row t)
 * w: nr rows of n elements of the kernel's weight type, wstride bytes apart;
 * x: nt activation rows, xstride bytes apart, each either in ntx_act_type
 * format or, when the ISA prepares activations for this type (prep_bytes >
 * 0), in the ISA's prepared layout; 1 <= nr <= NTX_TILE_R,
 * 1 <= nt <= NTX_TILE_T, n a multiple of the block. Weight rows need only
 * the alignment of their fields (2 bytes; GGUF gives 32), no SIMD alignment;
 * prepared rows are 64-byte aligned. */
typedef void (*ntx_tile_fn)(int64_t n, const void *w, size_t wstride, int nr, const void *x,
			    size_t xstride, int nt, float *y, int64_t ldy);

/* Upper bound of any ISA's prepared row (64-byte multiple), so that scratch
 * sizes do not depend on the ISA chosen at run time. */
#define NTX_PREP_MAX(n) ((size_t)(3 * (n) + 256))

/* Group layouts (activations of NTX_GROUP_T tokens interleaved for a matrix
 * unit, quant_amx.c): upper bound of one group's bytes, any ISA. */
#define NTX_GROUP_T 16
#define NTX_GROUP_MAX(n) ((size_t)(36 * (n) + 4096))

/* Elements per chunk when ntx_vec_dot prepares activations on the stack. */
#define NTX_PREP_CHUNK 2048

/* One instruction-set level: every entry is set for every supported type. */
struct ntx_cpu_isa {
	const char *name; /* what ntx_cpu_features() reports */
	void (*dequant_row)(uint32_t type, const void *src, float *dst, int64_t n);
	void (*quantize_act)(uint32_t act_type, const float *x, void *xq, int64_t n);
	/* Bytes of a prepared activation row for weight type wtype, or 0 when
	 * the tile kernel reads ntx_act_type rows as they are. */
	size_t (*prep_bytes)(uint32_t wtype, int64_t n);
	/* Rearrange one row of ntx_act_type(wtype) activations (n elements)
	 * into the prepared layout at xp (64-byte aligned, prep_bytes long). */
	void (*prepare)(uint32_t wtype, const void *xq, void *xp, int64_t n);
	ntx_tile_fn (*tile)(uint32_t wtype); /* NULL for an unsupported type */
	/* Optional (NULL: never): a matmul of n_tok tokens takes the group
	 * path when group(wtype, n_tok) is non-zero. Then every token is
	 * quantized into its ntx_act_type row and handed to prepare_group,
	 * which writes it as token t (0 .. NTX_GROUP_T - 1) of the group buffer
	 * gbuf (group_bytes(wtype, n) bytes, 64-byte aligned; a partial last
	 * group is zeroed first), and the product goes through
	 * tile_group(wtype): the tile kernel contract above with nr <=
	 * group_rows, nt <= group_tokens (a multiple of NTX_GROUP_T) and x the
	 * first of the tile's group buffers, xstride = group_bytes apart. For
	 * each token the result is bitwise the tile's for n_tok = 1. */
	/* Attention of up to NTX_ATTN_G heads sharing a KV head (NULL: the
	 * scalar loop of ops.c): ntx_attn_avx2's contract. */
	void (*attn)(const float *q, int ng, int hd, const void *k, const void *v, int f16, int64_t row,
		     int n_pos, float scale, float *out);
	int (*group)(uint32_t wtype, int64_t n_tok);
	size_t (*group_bytes)(uint32_t wtype, int64_t n);
	void (*prepare_group)(uint32_t wtype, const void *xq, void *gbuf, int t, int64_t n);
	ntx_tile_fn (*tile_group)(uint32_t wtype);
	int group_rows, group_tokens;
};

extern const struct ntx_cpu_isa ntx_cpu_isa_scalar;
#if defined(__x86_64__) || defined(__i386__)
extern const struct ntx_cpu_isa ntx_cpu_isa_avx2;
extern const struct ntx_cpu_isa ntx_cpu_isa_avx512;
extern const struct ntx_cpu_isa ntx_cpu_isa_amx;

/* AVX-512 tile kernels whose float arithmetic is the "canonical" one of the
 * group kernels of quant_amx.c (Q4_K, Q5_K, Q6_K, Q8_0; NULL for other types), so that a
 * token alone (n_tok = 1) gets bitwise what it gets in a group. Per row and
 * token, four float lanes a_0..a_3 start at 0; super-block b (in order)
 * updates lane b % 4:
 *   a = fma((float)I_b, dx_b * d_b, a); a = fma(-(float)M_b, dx_b * dmin_b, a)
 * with I_b = sum_j sc_j sum_{i in j} q_i x_i and M_b = sum_j m_j sum_{i in j} x_i
 * exact integers (j: the 8 sub-blocks of 32), dx_b the activations' Q8_K d;
 * Q6_K: I_b = sum_j sc_j sum_{i in j} (q_i - 32) x_i over its 16 sub-blocks
 * of 16, and no M_b step; Q8_0: blocks of 32, I_b = sum_i q_i x_i, d_b the
 * weights' fp16 d, dx_b the activations' (Q8_0), no M_b step. The result is
 * (a_0 + a_2) + (a_1 + a_3). The avx512 ISA's own K-quant tiles are these
 * (its Q8_0 tile is not). */
ntx_tile_fn ntx_avx512_tile_canon(uint32_t wtype);

/* The CPU can run AMX-INT8 tiles and this process may use them (asks the
 * kernel for the tile state once). */
int ntx_cpu_has_amx(void);
#endif

/* The ISA in use (chosen on first use from the CPU and the switches of
 * ntx_cpu_tunables_set; changed by ntx_cpu_force_scalar and
 * ntx_cpu_isa_select). Never NULL. */
const struct ntx_cpu_isa *ntx_cpu_isa(void);

/* Pin an ISA by name: "scalar", "avx2", "avx512" or "amx". Returns 0, or -1
 * when the CPU lacks it (nothing changes). "auto" returns to the automatic
 * choice (the best one the switches of ntx_cpu_tunables_set allow). */
int ntx_cpu_isa_select(const char *name);

/* Heads and head size the SIMD attention takes per call. */
#define NTX_ATTN_G 8
#define NTX_ATTN_HD 256

/* The AVX2 dequantize/quantize entry points (the AVX-512 table reuses them:
 * both are memory-bound, wider vectors buy nothing there). */
#if defined(__x86_64__) || defined(__i386__)
void ntx_dequant_row_avx2(uint32_t type, const void *src, float *dst, int64_t n);
void ntx_quantize_act_avx2(uint32_t act_type, const float *x, void *xq, int64_t n);
/* ng (1..NTX_ATTN_G) query heads of hd elements (hd % 8 == 0, <= NTX_ATTN_HD)
 * at q, consecutive, attending to positions 0..n_pos-1 of one KV head's rows
 * (k, v at position 0, row elements apart, F16 when f16 else F32); softmax
 * with scale; out: ng x hd floats. attn_avx2.c. */
void ntx_attn_avx2(const float *q, int ng, int hd, const void *k, const void *v, int f16, int64_t row,
		   int n_pos, float scale, float *out);
#endif

/* prep_bytes of an ISA that prepares nothing (always 0). */
size_t ntx_cpu_prep_none(uint32_t wtype, int64_t n);

/* ---- shared scalar helpers ---- */

/* Round to nearest, ties to even, for |v| < 2^22 (what cvtps2dq does in the
 * default rounding mode): adding 1.5 * 2^23 leaves the rounded integer in the
 * low mantissa bits. */
static inline int ntx_round_even(float v)
{
	union {
		float f;
		int32_t i;
	} u;

	u.f = v + 12582912.0f;
	return (u.i & 0x007fffff) - 0x00400000;
}

/* Element i of an array at any alignment (rows may sit at odd addresses). */
static inline float ntx_ld_f32(const void *p, int64_t i)
{
	float v;

	memcpy(&v, (const char *)p + 4 * i, 4);
	return v;
}

static inline uint16_t ntx_ld_u16(const void *p, int64_t i)
{
	uint16_t v;

	memcpy(&v, (const char *)p + 2 * i, 2);
	return v;
}

/* Unpack the 12 scale bytes of a Q4_K / Q5_K block into 8 scales (byte j of
 * *sc = scale of sub-block j) and 8 mins (*m), 6 bits each: all eight
 * ntx_k_scale_min results at once, on 32-bit words. */
static inline void ntx_k_scales8(const uint8_t *s, uint64_t *sc, uint64_t *m)
{
	uint32_t a, b, c, sc_hi, m_hi;

	memcpy(&a, s, 4);
	memcpy(&b, s + 4, 4);
	memcpy(&c, s + 8, 4);
	sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
	m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
	*sc = (a & 0x3F3F3F3Fu) | (uint64_t)sc_hi << 32;
	*m = (b & 0x3F3F3F3Fu) | (uint64_t)m_hi << 32;
}

#endif
