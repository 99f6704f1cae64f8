/* gen_vocab.c - the tokenizer of synthetic models: a small byte-level BPE
 * vocabulary shaped like Llama 3's (or a copy of another file's tokenizer).
 *
 * Synthetic layout (n_vocab tokens):
 *   0..255            the 256 bytes, as GPT-2's byte-to-unicode characters,
 *                     in that mapping's order (printable bytes first), as in
 *                     Llama 3's vocabulary
 *   256..             the results of a few English merges ("Ġt", "he", "Ġthe")
 *   ...               filler tokens "[filler_N]" (no merge produces them)
 *   n_vocab-5..-1     <|begin_of_text|> <|end_of_text|> <|start_header_id|>
 *                     <|end_header_id|> <|eot_id|>, type CONTROL
 * BOS = <|begin_of_text|>, EOS = <|end_of_text|>, EOT = <|eot_id|>. */
#include "gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

/* Merges in rank order, as "left right" in byte-to-unicode text ("Ġ" is the
 * space byte). Every part is a byte or the result of an earlier merge. */
static const char *const merges[] = {
	"\xc4\xa0" " t", "\xc4\xa0" " a", "h e", "i n", "r e", "o n", "\xc4\xa0" "t he", "e r",
	"\xc4\xa0" " s", "a t", "\xc4\xa0" " w", "\xc4\xa0" " o", "e n", "\xc4\xa0" " c", "i t", "i s",
	"a n", "o r", "e s", "\xc4\xa0" " b", "e d", "\xc4\xa0" " f", "in g", "\xc4\xa0" " p",
	"o u", "\xc4\xa0" "a n", "a l", "a r", "\xc4\xa0" "t o", "\xc4\xa0" " m", "\xc4\xa0" "o f",
	"\xc4\xa0" " in", "\xc4\xa0" " d", "\xc4\xa0" " h", "\xc4\xa0" "an d",
};
#define N_MERGES ((int64_t)(sizeof merges / sizeof merges[0]))

static const char *const specials[5] = {
	"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
	"<|eot_id|>",
};

/* GPT-2's bytes_to_unicode: the code point standing for byte b, in order[]. */
static void byte_map(uint32_t cp[256], int order[256])
{
	int b, n = 0, k = 0;

	for (b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
				(b >= 0xae && b <= 0xff);

		if (printable) {
			cp[b] = (uint32_t)b;
			order[k++] = b;
		}
	}
	for (b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
				(b >= 0xae && b <= 0xff);

		if (!printable) {
			cp[b] = 256 + (uint32_t)n++;
			order[k++] = b;
		}
	}
}

static size_t utf8(uint32_t c, char *out)
{
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	}
	out[0] = (char)(0xc0 | (c >> 6)); /* all code points here are < 0x800 */
	out[1] = (char)(0x80 | (c & 0x3f));
	return 2;
}

int gen_vocab_synthetic(struct ntx_gguf_writer *w, int64_t n_vocab, const char *pre,
			struct ntx_err *err)
{
	uint32_t cp[256];
	int order[256];
	char **tok = NULL, *pool = NULL;
	int32_t *type = NULL;
	int64_t n_merge, i, id = 0;
	size_t pool_len = 0, pool_cap;
	int rc = -1;

	if (n_vocab < GEN_VOCAB_MIN || n_vocab > INT32_MAX)
		return ntx_err_set(err, NTX_EINVAL,
				   "a vocabulary of %lld tokens is too small for the synthetic tokenizer (at least %d)",
				   (long long)n_vocab, GEN_VOCAB_MIN);
	n_merge = n_vocab - GEN_VOCAB_MIN < N_MERGES ? n_vocab - GEN_VOCAB_MIN : N_MERGES;
	byte_map(cp, order);
	/* every token text fits in 24 bytes ("[filler_2147483647]") */
	pool_cap = (size_t)n_vocab * 24;
	tok = malloc((size_t)n_vocab * sizeof *tok);
	type = malloc((size_t)n_vocab * sizeof *type);
	pool = malloc(pool_cap);
	if (!tok || !type || !pool) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory for %lld tokens", (long long)n_vocab);
		goto out;
	}
#define NEW_TOKEN(ty)                                \
	do {                                         \
		tok[id] = pool + pool_len;           \
		type[id] = (ty);                     \
		id++;                                \
	} while (0)
	for (i = 0; i < 256; i++) {
		NEW_TOKEN(1);
		pool_len += utf8(cp[order[i]], pool + pool_len);
		pool[pool_len++] = '\0';
	}
	for (i = 0; i < n_merge; i++) { /* "a b" -> "ab" */
		const char *m = merges[i];

		NEW_TOKEN(1);
		for (; *m; m++) {
			if (*m != ' ')
				pool[pool_len++] = *m;
		}
		pool[pool_len++] = '\0';
	}
	while (id < n_vocab - 5) {
		NEW_TOKEN(1);
		pool_len += (size_t)snprintf(pool + pool_len, 24, "[filler_%lld]", (long long)id) + 1;
	}
	for (i = 0; i < 5; i++) {
		NEW_TOKEN(3);
		pool_len += (size_t)snprintf(pool + pool_len, 24, "%s", specials[i]) + 1;
	}
#undef NEW_TOKEN
	if (ntx_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", err) ||
	    ntx_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre, err) ||
	    ntx_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", (const char *const *)tok, NULL,
					  (uint64_t)n_vocab, err) ||
	    ntx_gguf_writer_add_array(w, "tokenizer.ggml.token_type", NTX_GGUF_I32, type,
				      (uint64_t)n_vocab, err) ||
	    ntx_gguf_writer_add_str_array(w, "tokenizer.ggml.merges", merges, NULL,
					  (uint64_t)n_merge, err) ||
	    ntx_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(n_vocab - 5), err) ||
	    ntx_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(n_vocab - 4), err) ||
	    ntx_gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)(n_vocab - 1), err))
		goto out;
	rc = 0;
out:
	free(tok);
	free(type);
	free(pool);
	return rc;
}

int gen_vocab_count(const char *path, int64_t *n_tokens, struct ntx_err *err)
{
	struct ntx_gguf *g = ntx_gguf_open(path, err);
	const struct ntx_gguf_kv *kv;
	int rc;

	if (!g)
		return -1;
	rc = ntx_gguf_get_arr(g, "tokenizer.ggml.tokens", &kv, err);
	if (rc == 1)
		*n_tokens = (int64_t)kv->val.n;
	else if (rc == 0)
		ntx_err_set(err, NTX_EFORMAT, "no tokenizer.ggml.tokens key");
	ntx_gguf_close(g);
	return rc == 1 ? 0 : -1;
}

int gen_vocab_copy(struct ntx_gguf_writer *w, const char *path, struct ntx_err *err)
{
	struct ntx_gguf *g = ntx_gguf_open(path, err);
	uint64_t i;
	int rc = 0;

	if (!g)
		return -1;
	for (i = 0; i < g->n_kv && !rc; i++) {
		const struct ntx_gguf_kv *kv = &g->kv[i];

		if (kv->key.len > 10 && memcmp(kv->key.p, "tokenizer.", 10) == 0)
			rc = ntx_gguf_writer_copy_kv(w, kv, err);
	}
	ntx_gguf_close(g);
	return rc;
}
