/* tokenizer.h - the Llama tokenizers, exactly as llama.cpp (commit c392e509)
 * runs them, and the detokenizers.
 *
 * Two vocabulary types, chosen by tokenizer.ggml.model:
 *   "llama" - SentencePiece BPE (Llama 2, TinyStories): a "▁" space prefix,
 *             spaces escaped as "▁", merges by token score, byte fallback to
 *             <0xXX> tokens.
 *   "gpt2"  - byte-level BPE (Llama 3): the Llama 3 pre-tokenizer regex
 *             (hand-written matcher in tokenizer_bpe.c), GPT-2 byte-to-unicode
 *             mapping, merges by rank, ignore_merges.
 * Two pre-tokenizers are implemented. Llama 3's: tokenizer.ggml.pre values
 * llama.cpp maps to it ("llama3", "llama-v3", "llama-bpe", "falcon3")
 * are accepted; "dbrx" and "smaug-bpe" (same regex, but without
 * ignore_merges and add_bos) too. Qwen2's ("qwen2", "deepseek-r1-qwen"):
 * the same regex with digits one at a time (\p{N} for \p{N}{1,3}), no
 * ignore_merges, no BOS by default, no clean-spaces pass. Any other value,
 * or none, is refused with NTX_EUNSUP: another regex silently replaced by
 * Llama 3's would give wrong ids, which is worse than no ids.
 *
 * Special tokens (CONTROL, USER_DEFINED and UNKNOWN types) are recognised in
 * text as llama.cpp's tokenizer_st_partition does: longest token text first,
 * every occurrence, when parse_special is set (USER_DEFINED ones always).
 *
 * Differences from llama.cpp, all in what llama.cpp accepts but should not:
 *   - a special-token id key (bos, eos, ...) out of range is an error, not a
 *     warning (0xFFFFFFFF or -1 mean "none");
 *   - scores/token_type arrays must have exactly one entry per token;
 *   - every merge must be "LEFT RIGHT" with LEFT, RIGHT and LEFT+RIGHT tokens;
 *   - duplicate token texts are an error (llama.cpp asserts);
 *   - 4-byte UTF-8 forms above U+10FFFF count as invalid bytes (U+FFFD)
 *     instead of throwing from inside llama_tokenize.
 * Nothing here prints or exits. Everything returned as const is borrowed from
 * the vocab and lives until ntx_vocab_free(). */
#ifndef NTX_TOKENIZER_H
#define NTX_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"

#define NTX_TOKEN_NONE (-1)
#define NTX_VOCAB_MAX_TOKENS (1 << 24)  /* refuse larger vocabularies */
#define NTX_VOCAB_MAX_MERGES (1 << 24)

enum ntx_vocab_type {
	NTX_VOCAB_SPM = 1, /* tokenizer.ggml.model "llama" */
	NTX_VOCAB_BPE = 2  /* tokenizer.ggml.model "gpt2" */
};

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum ntx_token_type {
	NTX_TOKEN_UNDEFINED = 0,
	NTX_TOKEN_NORMAL = 1,
	NTX_TOKEN_UNKNOWN = 2,
	NTX_TOKEN_CONTROL = 3,
	NTX_TOKEN_USER_DEFINED = 4,
	NTX_TOKEN_UNUSED = 5,
	NTX_TOKEN_BYTE = 6
};

struct ntx_vocab;

/* ---- loading ---- */

/* Read the tokenizer.* keys of an open GGUF (vocab-only files included) and
 * build the tokenizer. Everything needed is copied: g may be closed after.
 * Returns NULL and fills *err (NTX_EFORMAT for a malformed vocabulary,
 * NTX_EUNSUP for a valid one this code does not implement, NTX_ENOMEM). */
struct ntx_vocab *ntx_vocab_load(const struct ntx_gguf *g, struct ntx_err *err);

void ntx_vocab_free(struct ntx_vocab *v);

/* ---- queries ---- */

enum ntx_vocab_type ntx_vocab_type(const struct ntx_vocab *v);
int32_t ntx_vocab_n_tokens(const struct ntx_vocab *v);
int64_t ntx_vocab_n_merges(const struct ntx_vocab *v);  /* 0 for SPM */
/* Special ids, NTX_TOKEN_NONE when the model has none. */
int32_t ntx_vocab_bos(const struct ntx_vocab *v);
int32_t ntx_vocab_eos(const struct ntx_vocab *v);
int32_t ntx_vocab_eot(const struct ntx_vocab *v);  /* <|eot_id|> style */
int32_t ntx_vocab_eom(const struct ntx_vocab *v);  /* <|eom_id|> */
int32_t ntx_vocab_unk(const struct ntx_vocab *v);
int32_t ntx_vocab_nl(const struct ntx_vocab *v);   /* the token of "\n" */
/* Whether tokenizing with add_bos adds BOS / EOS (llama.cpp's defaults:
 * SPM and Llama 3 add BOS and no EOS; tokenizer.ggml.add_*_token override). */
int ntx_vocab_add_bos(const struct ntx_vocab *v);
int ntx_vocab_add_eos(const struct ntx_vocab *v);
/* End of generation: eos, eot, eom and every token named <|eot_id|>,
 * <|eom_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, <EOT>, _<EOT>
 * (llama.cpp's list at c392e509; Llama 3.1: {128008, 128009}). */
int ntx_vocab_is_eog(const struct ntx_vocab *v, int32_t id);
/* The end-of-generation ids, ascending (borrowed). */
const int32_t *ntx_vocab_eog_ids(const struct ntx_vocab *v, int *n);
/* Token text (NUL-terminated) to id; NTX_TOKEN_NONE if absent. */
int32_t ntx_vocab_find(const struct ntx_vocab *v, const char *text);
int32_t ntx_vocab_find_n(const struct ntx_vocab *v, const char *text, size_t len);
/* Type of a token (after llama.cpp's fix-ups: EOT/EOM-named tokens become
 * CONTROL); NTX_TOKEN_UNDEFINED for an id out of range. */
enum ntx_token_type ntx_vocab_token_type(const struct ntx_vocab *v, int32_t id);
/* Raw token text as stored in the GGUF (byte-level or "▁" form); NULL for an
 * id out of range. Empty texts read as "[EMPTY_<id>]" like llama.cpp. */
const char *ntx_vocab_token_text(const struct ntx_vocab *v, int32_t id, size_t *len);
float ntx_vocab_token_score(const struct ntx_vocab *v, int32_t id);
/* tokenizer.chat_template, or NULL if the file has none. */
const char *ntx_vocab_chat_template(const struct ntx_vocab *v);

/* ---- tokenize ---- */

/* Tokenize text[0..len) (any bytes; invalid UTF-8 is handled as llama.cpp
 * does). add_bos: add BOS (and EOS) as the model's add_bos/add_eos say
 * (llama.cpp's add_special). parse_special: text equal to a CONTROL or
 * UNKNOWN token becomes that token (llama-tokenize's default); USER_DEFINED
 * tokens are matched either way. On success *ids (malloc'ed, caller frees;
 * never NULL) holds *n_ids ids and 0 is returned; -1 and *err otherwise. */
int ntx_tokenize(const struct ntx_vocab *v, const char *text, size_t len, int add_bos,
		 int parse_special, int32_t **ids, int *n_ids, struct ntx_err *err);

/* ---- detokenize ---- */

/* The bytes of one token (llama_token_to_piece with lstrip 0): BPE tokens
 * through the reverse byte mapping, SPM "▁" as a space and <0xXX> as the byte;
 * CONTROL and UNKNOWN tokens as their text if special, else empty;
 * UNDEFINED/UNUSED tokens empty. Returns a borrowed pointer (not
 * NUL-terminated) and the length in *len; NULL for an id out of range. */
const char *ntx_vocab_piece(const struct ntx_vocab *v, int32_t id, int special, size_t *len);

/* llama_detokenize(ids, remove_special, unparse_special): the pieces joined;
 * SPM drops one leading space of the first piece; with remove_special a
 * leading BOS (and a trailing EOS when the model adds one) is dropped; BPE
 * vocabularies then get llama.cpp's clean-spaces pass (" ?" " !" " ." " ,"
 * lose the space, " ' " becomes "'", " 's" " 'm" " 're" " 've" lose the
 * space). *out is malloc'ed (caller frees), NUL-terminated, *len bytes
 * (it may contain NULs and invalid UTF-8). Returns 0, or -1 and *err for an id
 * out of range or no memory. */
int ntx_detokenize(const struct ntx_vocab *v, const int32_t *ids, int n, int remove_special,
		   int unparse_special, char **out, size_t *len, struct ntx_err *err);

/* ---- streaming detokenizer ---- */

enum {
	NTX_DETOK_SPECIAL = 1,      /* render CONTROL/UNKNOWN tokens as their text */
	NTX_DETOK_STRIP_SPACE = 2,  /* SPM: drop one leading space of the first
				     * piece (as llama_detokenize does for a
				     * whole sequence without BOS) */
	NTX_DETOK_REPLACE_INVALID = 4 /* invalid bytes become U+FFFD (EF BF BD)
				       * instead of passing through as they are */
};

/* Token-by-token output for generation (like llama-cli: pieces, no
 * clean-spaces pass). ntx_detok_push() returns only whole UTF-8 characters:
 * the bytes of an incomplete character are held until the next piece
 * completes it, or proves it invalid (then the bytes go out as they are, or
 * as U+FFFD each with NTX_DETOK_REPLACE_INVALID). ntx_detok_flush() emits
 * whatever is held, by the same rule. Without REPLACE_INVALID the bytes
 * emitted over a whole stream are exactly the concatenated pieces. */
struct ntx_detok;

struct ntx_detok *ntx_detok_new(const struct ntx_vocab *v, unsigned flags, struct ntx_err *err);
void ntx_detok_free(struct ntx_detok *d);
/* Add one id. *out and *len: bytes ready now (borrowed, valid until the next call
 * on d; *len may be 0). Returns 0, or -1 and *err for an id out of range. */
int ntx_detok_push(struct ntx_detok *d, int32_t id, const char **out, size_t *len,
		   struct ntx_err *err);
/* End of stream: the held bytes (borrowed as above); d can be reused after. */
void ntx_detok_flush(struct ntx_detok *d, const char **out, size_t *len);

#endif
