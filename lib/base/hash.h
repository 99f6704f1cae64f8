/* hash.h - 64-bit non-cryptographic hashing (the XXH64 algorithm, written
 * from its public specification). Used for model fingerprints and pack
 * extent checksums. */
#ifndef NTX_HASH_H
#define NTX_HASH_H

#include <stddef.h>
#include <stdint.h>

struct ntx_hash {
	uint64_t v[4];
	uint64_t total;
	uint64_t seed;
	unsigned char buf[32];
	unsigned buf_len;
};

uint64_t ntx_hash64(const void *data, size_t len, uint64_t seed);

/* Streaming form: init, update any number of times, final. */
void ntx_hash_init(struct ntx_hash *h, uint64_t seed);
void ntx_hash_update(struct ntx_hash *h, const void *data, size_t len);
uint64_t ntx_hash_final(const struct ntx_hash *h);

#endif
