/* matmul.c - y = W x for n_tok activation rows, on the thread pool.
 *
 * 1. The n_tok rows of x are quantized once into scratch (in the activation
 *    format the weight type consumes; float weights read x directly), and
 *    rearranged into the ISA's prepared layout if it has one, by the pool
 *    when there are several rows.
 * 2. Output rows are split into chunks (multiples of CHUNK_ALIGN rows, so
 *    that no two threads write the same cache line of y) handed out through
 *    an atomic counter, which keeps threads busy when one core is slowed by
 *    other work. Within a chunk, rows are visited in blocks small enough to
 *    stay in L2; for each block, tokens go in groups of NTX_TILE_T through
 *    the ISA's tile kernel, so each weight row fetched from memory serves up
 *    to NTX_TILE_T tokens per pass and the block is reused from cache for
 *    the next group: a matrix-matrix product, not n_tok GEMVs. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "cpu_impl.h"

#define CHUNK_ALIGN 16          /* rows: 64 bytes of y */
#define L2_BLOCK_BYTES (192 << 10) /* weight bytes per row block when n_tok > 1 */

/* Bytes between activation rows in scratch (64-byte multiple). */
static size_t act_stride(uint32_t at, int64_t n_in)
{
	return (ntx_act_bytes(at, n_in) + 63) & ~(size_t)63;
}

/* Scratch: n_tok rows of ntx_act_type format, then (64-byte aligned) n_tok
 * rows of the ISA's prepared layout or the group buffers, sized for any ISA. */
size_t ntx_matmul_scratch_bytes(const struct ntx_wmat *w, int64_t n_tok)
{
	uint32_t at = ntx_act_type(w->type);
	size_t rows, groups;

	if (at == NTX_TYPE_F32 || n_tok <= 0)
		return 0;
	rows = NTX_PREP_MAX(w->n_in) * (size_t)n_tok;
	groups = NTX_GROUP_MAX(w->n_in) * (size_t)((n_tok + NTX_GROUP_T - 1) / NTX_GROUP_T);
	return act_stride(at, w->n_in) * (size_t)n_tok + (rows > groups ? rows : groups) + 64;
}

/* ---- activation quantization ---- */

struct quant_job {
	const struct ntx_cpu_isa *isa;
	uint32_t wtype, at;
	const float *x; /* (n_tok, n_in) */
	int64_t n_in, n_tok;
	char *xq;       /* n_tok rows, stride bytes apart */
	size_t stride;
	char *xp;       /* prepared rows, pstride bytes apart (pstride 0: none), */
	size_t pstride; /* or group buffers, gstride bytes apart */
	size_t gstride;
};

static void quant_worker(void *p, int ith, int nth)
{
	const struct quant_job *j = p;

	for (int64_t t = ith; t < j->n_tok; t += nth) {
		char *xq = j->xq + (size_t)t * j->stride;

		j->isa->quantize_act(j->at, j->x + t * j->n_in, xq, j->n_in);
		if (j->gstride)
			j->isa->prepare_group(j->wtype, xq, j->xp + (size_t)(t / NTX_GROUP_T) * j->gstride,
					      (int)(t % NTX_GROUP_T), j->n_in);
		else if (j->pstride)
			j->isa->prepare(j->wtype, xq, j->xp + (size_t)t * j->pstride, j->n_in);
	}
}

/* ---- the product ---- */

struct mm_job {
	ntx_tile_fn tile;
	int tile_r, tile_t; /* rows and tokens per tile call */
	int grouped;        /* xq holds group buffers of NTX_GROUP_T tokens */
	const struct ntx_wmat *w;
	const char *xq; /* n_tok activation rows (or groups), xs bytes apart */
	size_t xs;
	int64_t n_tok;
	float *y;        /* (n_tok, n_out) */
	int64_t chunk;   /* rows per chunk */
	int64_t n_chunks;
	int64_t rblock;  /* rows per cache block */
	atomic_llong next;
};

static void mm_rows(const struct mm_job *j, int64_t r0, int64_t r1)
{
	const struct ntx_wmat *w = j->w;
	size_t rb = (size_t)w->row_bytes;

	for (int64_t b0 = r0; b0 < r1; b0 += j->rblock) {
		int64_t b1 = b0 + j->rblock < r1 ? b0 + j->rblock : r1;

		for (int64_t t0 = 0; t0 < j->n_tok; t0 += j->tile_t) {
			int nt = (int)(j->n_tok - t0 < j->tile_t ? j->n_tok - t0 : j->tile_t);
			const char *x = j->xq + (size_t)(j->grouped ? t0 / NTX_GROUP_T : t0) * j->xs;

			for (int64_t r = b0; r < b1; r += j->tile_r) {
				int nr = (int)(b1 - r < j->tile_r ? b1 - r : j->tile_r);

				j->tile(w->n_in, (const char *)w->data + (size_t)r * rb, rb, nr, x, j->xs, nt,
					j->y + t0 * w->n_out + r, w->n_out);
			}
		}
	}
}

static void mm_worker(void *p, int ith, int nth)
{
	struct mm_job *j = p;
	int64_t c;

	(void)ith;
	(void)nth;
	while ((c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_chunks) {
		int64_t r0 = c * j->chunk;
		int64_t r1 = r0 + j->chunk < j->w->n_out ? r0 + j->chunk : j->w->n_out;

		mm_rows(j, r0, r1);
	}
}

void ntx_cpu_matmul(struct ntx_pool *pool, const struct ntx_wmat *w, const float *x,
		    int64_t n_tok, float *y, void *scratch)
{
	const struct ntx_cpu_isa *isa = ntx_cpu_isa();
	uint32_t at = ntx_act_type(w->type);
	int nth = ntx_pool_threads(pool);
	struct mm_job j;
	int64_t per;

	if (n_tok <= 0 || w->n_out <= 0)
		return;
	j.grouped = isa->group && isa->group(w->type, n_tok) == NTX_GROUP_T;
	j.tile = j.grouped ? isa->tile_group(w->type) : isa->tile(w->type);
	j.tile_r = j.grouped ? isa->group_rows : NTX_TILE_R;
	j.tile_t = j.grouped ? isa->group_tokens : NTX_TILE_T;
	if (!j.tile) {
		for (int64_t i = 0; i < n_tok * w->n_out; i++)
			y[i] = ntx_vec_dot_ref(w->type, 0, NULL, NULL); /* NaN: unsupported */
		return;
	}
	if (at == NTX_TYPE_F32) {
		j.xq = (const char *)x;
		j.xs = (size_t)w->n_in * sizeof(float);
	} else {
		struct quant_job q = { isa, w->type, at, x, w->n_in, n_tok, scratch, act_stride(at, w->n_in),
				       NULL, j.grouped ? 0 : isa->prep_bytes(w->type, w->n_in),
				       j.grouped ? isa->group_bytes(w->type, w->n_in) : 0 };

		if (q.pstride || q.gstride) {
			uintptr_t a = (uintptr_t)(q.xq + q.stride * (size_t)n_tok);

			q.xp = (char *)((a + 63) & ~(uintptr_t)63);
		}
		if (q.gstride && n_tok % NTX_GROUP_T) /* the missing tokens of the last group */
			memset(q.xp + (size_t)(n_tok / NTX_GROUP_T) * q.gstride, 0, q.gstride);
		if (n_tok > 1)
			ntx_pool_run(pool, quant_worker, &q);
		else
			quant_worker(&q, 0, 1);
		j.xq = q.pstride || q.gstride ? q.xp : q.xq;
		j.xs = q.gstride ? q.gstride : q.pstride ? q.pstride : q.stride;
	}
	j.w = w;
	j.n_tok = n_tok;
	j.y = y;
	/* about 4 chunks per thread for balance, CHUNK_ALIGN-row multiples */
	per = (w->n_out + 4 * nth - 1) / (4 * nth);
	j.chunk = (per + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
	j.n_chunks = (w->n_out + j.chunk - 1) / j.chunk;
	j.rblock = j.chunk;
	if (n_tok > j.tile_t) {
		int64_t rows = (int64_t)(L2_BLOCK_BYTES / (w->row_bytes ? w->row_bytes : 1));

		rows = rows < j.tile_r ? j.tile_r : rows / j.tile_r * j.tile_r;
		j.rblock = rows < j.chunk ? rows : j.chunk;
	}
	atomic_init(&j.next, 0);
	if (j.n_chunks == 1 || nth == 1)
		mm_worker(&j, 0, 1);
	else
		ntx_pool_run(pool, mm_worker, &j);
}
