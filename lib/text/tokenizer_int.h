/* tokenizer_int.h - the vocab's insides, shared by tokenizer*.c only. */
#ifndef NTX_TOKENIZER_INT_H
#define NTX_TOKENIZER_INT_H

#include <stdint.h>
#include <stdlib.h>

#include "err.h"
#include "tokenizer.h"

/* Token attributes, as llama.cpp's llama_token_attr bits. */
enum {
	ATTR_UNKNOWN = 1 << 0,
	ATTR_UNUSED = 1 << 1,
	ATTR_NORMAL = 1 << 2,
	ATTR_CONTROL = 1 << 3,
	ATTR_USER_DEFINED = 1 << 4,
	ATTR_BYTE = 1 << 5
};

struct ntx_vocab {
	enum ntx_vocab_type type;
	int32_t n_tokens;
	char *text;             /* every token text, each followed by a NUL */
	uint32_t *text_off;     /* (n_tokens + 1): text of i is text[text_off[i] .. text_off[i+1]-1) */
	float *score;           /* (n_tokens) */
	uint8_t *attr;          /* (n_tokens) ATTR_* */
	struct ntx_tok_slot {
		uint32_t tag;   /* high half of the text's hash */
		int32_t id;     /* -1 = empty */
	} *tok_slot;            /* open-addressing table of ids by text */
	uint32_t tok_mask;      /* slots - 1 */

	/* BPE merges: (left id, right id) -> rank and the merged token. */
	int64_t n_merges;
	uint64_t *merge_key;    /* left << 32 | right; UINT64_MAX = empty */
	int32_t *merge_rank;
	int32_t *merge_tok;
	uint32_t merge_mask;

	/* Byte tokens: SPM <0xXX> (or the 1-byte text); BPE the byte-level char.
	 * -1 where the vocabulary has none. */
	int32_t byte_tok[256];
	/* GPT-2 byte-to-unicode mapping: UTF-8 of the char for each byte, and the
	 * byte for each of the 324 code points it uses (-1 elsewhere). */
	char bu_text[256][2];
	uint8_t bu_len[256];
	int16_t ub_byte[324];

	/* Pieces (token_to_piece with special = true), like llama.cpp's cache. */
	char *piece;
	uint32_t *piece_off;    /* (n_tokens + 1) */

	/* Tokens matched in raw text, longest text first. */
	int32_t *special;
	int n_special;

	int32_t bos, eos, eot, eom, unk, nl;
	int32_t *eog;
	int n_eog;
	int add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
	int digits_max;         /* BPE pre-tokenizer: digits per piece (Llama 3: 3, qwen2: 1) */
	char *chat_template;
};

/* A growing array of ids. */
struct ntx_idvec {
	int32_t *v;
	size_t n, cap;
};

int ntx_idvec_push(struct ntx_idvec *a, int32_t id, struct ntx_err *err);

/* Token text of id (not NUL-checked: id must be valid). */
static inline const char *vocab_text(const struct ntx_vocab *v, int32_t id, size_t *len)
{
	*len = v->text_off[id + 1] - v->text_off[id] - 1;
	return v->text + v->text_off[id];
}

/* Merge of two tokens: its rank, and the merged token in *tok; -1 if none. */
int32_t ntx_vocab_merge(const struct ntx_vocab *v, int32_t left, int32_t right, int32_t *tok);

/* Tokenize one raw-text fragment (no special tokens in it), appending. */
int ntx_bpe_tokenize(const struct ntx_vocab *v, const char *text, size_t len,
		     struct ntx_idvec *out, struct ntx_err *err);
/* SPM: prefix is a space to put before the text (add_space_prefix). */
int ntx_spm_tokenize(const struct ntx_vocab *v, const char *text, size_t len, int prefix,
		     struct ntx_idvec *out, struct ntx_err *err);

/* Build v->piece/piece_off (after everything else is loaded). */
int ntx_vocab_build_pieces(struct ntx_vocab *v, struct ntx_err *err);

/* Binary heap of merge candidates, shared by BPE (lowest rank first) and
 * SPM (highest score first); ties go to the leftmost pair. */
struct ntx_bigram {
	float score;   /* SPM */
	int32_t rank;  /* BPE */
	int32_t tok;   /* BPE: the merged token */
	int left, right;
	size_t size;   /* bytes of left + right when queued */
};

struct ntx_heap {
	struct ntx_bigram *a;
	size_t n, cap;
	int by_rank;   /* 1: BPE order, 0: SPM order */
};

int ntx_heap_push(struct ntx_heap *h, const struct ntx_bigram *b, struct ntx_err *err);
void ntx_heap_pop(struct ntx_heap *h, struct ntx_bigram *out);

#endif
