/* pack_decode.c - decoding pack extents: checksums, zstd frames and byte
 * planes, in parts that several threads can share (see pack.h). Decoding
 * never reads or writes outside the stored and raw buffers, whatever the
 * stored bytes are: zstd is bounded by the frame's raw length, which the
 * reader validated against the extent's raw size. */
#include "pack.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "hash.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- byte planes ---- */

void ntx_pack_planes_split(const void *src, void *dst, size_t n, int w)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t m = n / (size_t)w, i;

	if (w == 2) {
		unsigned char *d0 = d, *d1 = d + m;

		for (i = 0; i < m; i++) {
			d0[i] = s[2 * i];
			d1[i] = s[2 * i + 1];
		}
	} else {
		unsigned char *d0 = d, *d1 = d + m, *d2 = d + 2 * m, *d3 = d + 3 * m;

		for (i = 0; i < m; i++) {
			d0[i] = s[4 * i];
			d1[i] = s[4 * i + 1];
			d2[i] = s[4 * i + 2];
			d3[i] = s[4 * i + 3];
		}
	}
}

void ntx_pack_planes_merge(const void *src, void *dst, size_t n, int w)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t m = n / (size_t)w, i = 0;

	if (w == 2) {
		const unsigned char *s0 = s, *s1 = s + m;

#if defined(__SSE2__)
		for (; i + 16 <= m; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(s0 + i));
			__m128i b = _mm_loadu_si128((const __m128i *)(s1 + i));

			_mm_storeu_si128((__m128i *)(d + 2 * i), _mm_unpacklo_epi8(a, b));
			_mm_storeu_si128((__m128i *)(d + 2 * i + 16), _mm_unpackhi_epi8(a, b));
		}
#endif
		for (; i < m; i++) {
			d[2 * i] = s0[i];
			d[2 * i + 1] = s1[i];
		}
	} else {
		const unsigned char *s0 = s, *s1 = s + m, *s2 = s + 2 * m, *s3 = s + 3 * m;

#if defined(__SSE2__)
		for (; i + 16 <= m; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(s0 + i));
			__m128i b = _mm_loadu_si128((const __m128i *)(s1 + i));
			__m128i c = _mm_loadu_si128((const __m128i *)(s2 + i));
			__m128i e = _mm_loadu_si128((const __m128i *)(s3 + i));
			__m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
			__m128i ce0 = _mm_unpacklo_epi8(c, e), ce1 = _mm_unpackhi_epi8(c, e);

			_mm_storeu_si128((__m128i *)(d + 4 * i), _mm_unpacklo_epi16(ab0, ce0));
			_mm_storeu_si128((__m128i *)(d + 4 * i + 16), _mm_unpackhi_epi16(ab0, ce0));
			_mm_storeu_si128((__m128i *)(d + 4 * i + 32), _mm_unpacklo_epi16(ab1, ce1));
			_mm_storeu_si128((__m128i *)(d + 4 * i + 48), _mm_unpackhi_epi16(ab1, ce1));
		}
#endif
		for (; i < m; i++) {
			d[4 * i] = s0[i];
			d[4 * i + 1] = s1[i];
			d[4 * i + 2] = s2[i];
			d[4 * i + 3] = s3[i];
		}
	}
}

/* ---- decoding ---- */

/* A per-thread scratch buffer for split frames (freed at thread exit). */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

struct scratch {
	size_t cap;
	unsigned char *b;
};

static void scratch_free(void *v)
{
	struct scratch *s = v;

	if (s) {
		free(s->b);
		free(s);
	}
}

static void scratch_init(void)
{
	(void)pthread_key_create(&scratch_key, scratch_free);
}

static unsigned char *scratch_get(size_t n)
{
	struct scratch *s;

	pthread_once(&scratch_once, scratch_init);
	s = pthread_getspecific(scratch_key);
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s)
			return NULL;
		if (pthread_setspecific(scratch_key, s) != 0) {
			free(s);
			return NULL;
		}
	}
	if (s->cap < n) {
		free(s->b);
		s->b = malloc(n);
		s->cap = s->b ? n : 0;
	}
	return s->b;
}

uint64_t ntx_pack_checksum(const void *stored, uint64_t data_size)
{
	return ntx_hash64(stored, (size_t)data_size, 0);
}

/* Copy pieces of an uncompressed extent when raw != stored. */
#define COPY_PART ((uint64_t)NTX_PACK_FRAME_DEFAULT)

int ntx_pack_decode_parts(const struct ntx_pack_extent *e)
{
	if (e->compression == NTX_PACK_COMP_ZSTD)
		return 1 + e->n_frames;
	return 1 + (int)((e->raw_size + COPY_PART - 1) / COPY_PART);
}

static int decode_frame(const struct ntx_pack_extent *e, int i, const unsigned char *stored,
			unsigned char *raw, struct ntx_err *err)
{
	const struct ntx_pack_frame *f = &e->frames[i];
	const unsigned char *src = stored + f->stored_off;
	unsigned char *dst = raw + f->raw_off, *tmp = dst;
	int w = e->transform == NTX_PACK_XFORM_SPLIT2 ? 2 : 4;

	if (f->kind == NTX_PACK_FRAME_RAW) { /* the layer's bytes, untransformed */
		memcpy(dst, src, f->raw_len);
		return 0;
	}
	if (e->transform != NTX_PACK_XFORM_NONE) {
		tmp = scratch_get(f->raw_len);
		if (!tmp)
			return ntx_err_set(err, NTX_ENOMEM, "out of memory for a %u-byte frame",
					   f->raw_len);
	}
	{
		size_t r = ZSTD_decompress(tmp, f->raw_len, src, f->stored_len);

		if (ZSTD_isError(r))
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d frame %d: zstd: %s (pack file corrupted)", e->layer,
					   i, ZSTD_getErrorName(r));
		if (r != f->raw_len)
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d frame %d: decodes to %zu bytes, not %u (pack file "
					   "corrupted)",
					   e->layer, i, r, f->raw_len);
	}
	if (tmp != dst)
		ntx_pack_planes_merge(tmp, dst, f->raw_len, w);
	return 0;
}

int ntx_pack_decode_part(const struct ntx_pack *p, const struct ntx_pack_extent *e,
			 const void *stored, void *raw, int part, int verify,
			 struct ntx_err *err)
{
	(void)p;
	if (part < 0 || part >= ntx_pack_decode_parts(e))
		return ntx_err_set(err, NTX_EINVAL, "decode part %d is not in [0, %d)", part,
				   ntx_pack_decode_parts(e));
	if (part == 0) {
		uint64_t sum;

		if (!verify)
			return 0;
		sum = ntx_pack_checksum(stored, e->data_size);
		if (sum != e->checksum)
			return ntx_err_set(err, NTX_EFORMAT,
					   "layer %d: extent checksum mismatch: %016" PRIx64
					   ", the directory says %016" PRIx64 " (pack file corrupted)",
					   e->layer, sum, e->checksum);
		return 0;
	}
	if (e->compression == NTX_PACK_COMP_ZSTD)
		return decode_frame(e, part - 1, stored, raw, err);
	if (raw != stored) {
		uint64_t off = (uint64_t)(part - 1) * COPY_PART;
		uint64_t n = e->raw_size - off < COPY_PART ? e->raw_size - off : COPY_PART;

		memcpy((char *)raw + off, (const char *)stored + off, (size_t)n);
	}
	return 0;
}

int ntx_pack_decode_extent(const struct ntx_pack *p, const struct ntx_pack_extent *e,
			   const void *stored, void *raw, int verify, struct ntx_err *err)
{
	int i, n = ntx_pack_decode_parts(e);

	if (raw == stored && e->compression != NTX_PACK_COMP_NONE)
		return ntx_err_set(err, NTX_EINVAL,
				   "layer %d: a compressed extent cannot be decoded in place", e->layer);
	for (i = 0; i < n; i++)
		if (ntx_pack_decode_part(p, e, stored, raw, i, verify, err))
			return -1;
	return 0;
}
