/* hash.c - XXH64, implemented from the algorithm's specification. */
#include "hash.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static inline uint64_t rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t rd32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static inline uint64_t round1(uint64_t acc, uint64_t in)
{
	acc += in * P2;
	acc = rotl(acc, 31);
	return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v)
{
	acc ^= round1(0, v);
	return acc * P1 + P4;
}

void ntx_hash_init(struct ntx_hash *h, uint64_t seed)
{
	memset(h, 0, sizeof *h);
	h->seed = seed;
	h->v[0] = seed + P1 + P2;
	h->v[1] = seed + P2;
	h->v[2] = seed;
	h->v[3] = seed - P1;
}

static void stripes(struct ntx_hash *h, const unsigned char *p, size_t n)
{
	uint64_t v0 = h->v[0], v1 = h->v[1], v2 = h->v[2], v3 = h->v[3];

	for (; n >= 32; n -= 32, p += 32) {
		v0 = round1(v0, rd64(p));
		v1 = round1(v1, rd64(p + 8));
		v2 = round1(v2, rd64(p + 16));
		v3 = round1(v3, rd64(p + 24));
	}
	h->v[0] = v0;
	h->v[1] = v1;
	h->v[2] = v2;
	h->v[3] = v3;
}

void ntx_hash_update(struct ntx_hash *h, const void *data, size_t len)
{
	const unsigned char *p = data;

	h->total += len;
	if (h->buf_len) {
		size_t take = 32 - h->buf_len;

		if (take > len)
			take = len;
		memcpy(h->buf + h->buf_len, p, take);
		h->buf_len += (unsigned)take;
		p += take;
		len -= take;
		if (h->buf_len < 32)
			return;
		stripes(h, h->buf, 32);
		h->buf_len = 0;
	}
	if (len >= 32) {
		size_t n = len & ~(size_t)31;

		stripes(h, p, n);
		p += n;
		len -= n;
	}
	if (len) {
		memcpy(h->buf, p, len);
		h->buf_len = (unsigned)len;
	}
}

uint64_t ntx_hash_final(const struct ntx_hash *h)
{
	const unsigned char *p = h->buf;
	size_t n = h->buf_len;
	uint64_t acc;

	if (h->total >= 32) {
		acc = rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) +
		      rotl(h->v[3], 18);
		acc = merge(acc, h->v[0]);
		acc = merge(acc, h->v[1]);
		acc = merge(acc, h->v[2]);
		acc = merge(acc, h->v[3]);
	} else {
		acc = h->seed + P5;
	}
	acc += h->total;
	for (; n >= 8; n -= 8, p += 8) {
		acc ^= round1(0, rd64(p));
		acc = rotl(acc, 27) * P1 + P4;
	}
	if (n >= 4) {
		acc ^= (uint64_t)rd32(p) * P1;
		acc = rotl(acc, 23) * P2 + P3;
		n -= 4;
		p += 4;
	}
	for (; n; n--, p++) {
		acc ^= (uint64_t)*p * P5;
		acc = rotl(acc, 11) * P1;
	}
	acc ^= acc >> 33;
	acc *= P2;
	acc ^= acc >> 29;
	acc *= P3;
	acc ^= acc >> 32;
	return acc;
}

uint64_t ntx_hash64(const void *data, size_t len, uint64_t seed)
{
	struct ntx_hash h;

	ntx_hash_init(&h, seed);
	ntx_hash_update(&h, data, len);
	return ntx_hash_final(&h);
}
