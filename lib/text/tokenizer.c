/* tokenizer.c - vocabulary loading and queries (see tokenizer.h).
 * ntx_tokenize is in tokenizer_encode.c, the merge loops in tokenizer_bpe.c
 * and tokenizer_spm.c, the detokenizers in tokenizer_detok.c. */
#include "tokenizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer_int.h"
#include "unicode.h"

/* ---- small helpers ---- */

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Smallest power of two >= 4n/3 (at least 16): load factor <= 0.75. */
static uint32_t table_size(size_t n)
{
	uint32_t s = 16;

	while (s < n + n / 3)
		s <<= 1;
	return s;
}

/* A printable excerpt of a token text for messages. */
static const char *excerpt(const char *s, size_t n, char buf[64])
{
	size_t i, o = 0;

	for (i = 0; i < n && o < 56; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f && c != '\'') {
			buf[o++] = (char)c;
		} else {
			snprintf(buf + o, 5, "\\x%02x", c);
			o += 4;
		}
	}
	if (i < n) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = 0;
	return buf;
}

/* ---- lookups ---- */

int32_t ntx_vocab_find_n(const struct ntx_vocab *v, const char *text, size_t len)
{
	uint64_t h = hash_bytes(text, len);
	uint32_t i = (uint32_t)h & v->tok_mask, tag = (uint32_t)(h >> 32);

	for (;; i = (i + 1) & v->tok_mask) {
		int32_t id = v->tok_slot[i].id;
		size_t tl;
		const char *t;

		if (id < 0)
			return NTX_TOKEN_NONE;
		if (v->tok_slot[i].tag != tag)
			continue;
		t = vocab_text(v, id, &tl);
		if (tl == len && memcmp(t, text, len) == 0)
			return id;
	}
}

int32_t ntx_vocab_find(const struct ntx_vocab *v, const char *text)
{
	return ntx_vocab_find_n(v, text, strlen(text));
}

int32_t ntx_vocab_merge(const struct ntx_vocab *v, int32_t left, int32_t right, int32_t *tok)
{
	uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
	uint32_t i;

	if (!v->merge_key)
		return -1;
	for (i = (uint32_t)hash_u64(key) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
		if (v->merge_key[i] == UINT64_MAX)
			return -1;
		if (v->merge_key[i] == key) {
			*tok = v->merge_tok[i];
			return v->merge_rank[i];
		}
	}
}

/* ---- queries ---- */

enum ntx_vocab_type ntx_vocab_type(const struct ntx_vocab *v) { return v->type; }
int32_t ntx_vocab_n_tokens(const struct ntx_vocab *v) { return v->n_tokens; }
int64_t ntx_vocab_n_merges(const struct ntx_vocab *v) { return v->n_merges; }
int32_t ntx_vocab_bos(const struct ntx_vocab *v) { return v->bos; }
int32_t ntx_vocab_eos(const struct ntx_vocab *v) { return v->eos; }
int32_t ntx_vocab_eot(const struct ntx_vocab *v) { return v->eot; }
int32_t ntx_vocab_eom(const struct ntx_vocab *v) { return v->eom; }
int32_t ntx_vocab_unk(const struct ntx_vocab *v) { return v->unk; }
int32_t ntx_vocab_nl(const struct ntx_vocab *v) { return v->nl; }
int ntx_vocab_add_bos(const struct ntx_vocab *v) { return v->add_bos; }
int ntx_vocab_add_eos(const struct ntx_vocab *v) { return v->add_eos; }
const char *ntx_vocab_chat_template(const struct ntx_vocab *v) { return v->chat_template; }

int ntx_vocab_is_eog(const struct ntx_vocab *v, int32_t id)
{
	int lo = 0, hi = v->n_eog - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (v->eog[mid] == id)
			return 1;
		if (v->eog[mid] < id)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return 0;
}

const int32_t *ntx_vocab_eog_ids(const struct ntx_vocab *v, int *n)
{
	*n = v->n_eog;
	return v->eog;
}

enum ntx_token_type ntx_vocab_token_type(const struct ntx_vocab *v, int32_t id)
{
	uint8_t a;

	if (id < 0 || id >= v->n_tokens)
		return NTX_TOKEN_UNDEFINED;
	a = v->attr[id];
	if (a & ATTR_BYTE)
		return NTX_TOKEN_BYTE;
	if (a & ATTR_USER_DEFINED)
		return NTX_TOKEN_USER_DEFINED;
	if (a & ATTR_CONTROL)
		return NTX_TOKEN_CONTROL;
	if (a & ATTR_UNKNOWN)
		return NTX_TOKEN_UNKNOWN;
	if (a & ATTR_UNUSED)
		return NTX_TOKEN_UNUSED;
	if (a & ATTR_NORMAL)
		return NTX_TOKEN_NORMAL;
	return NTX_TOKEN_UNDEFINED;
}

const char *ntx_vocab_token_text(const struct ntx_vocab *v, int32_t id, size_t *len)
{
	if (id < 0 || id >= v->n_tokens)
		return NULL;
	return vocab_text(v, id, len);
}

float ntx_vocab_token_score(const struct ntx_vocab *v, int32_t id)
{
	return id >= 0 && id < v->n_tokens ? v->score[id] : 0.0f;
}

/* ---- loading ---- */

void ntx_vocab_free(struct ntx_vocab *v)
{
	if (!v)
		return;
	free(v->text);
	free(v->text_off);
	free(v->score);
	free(v->attr);
	free(v->tok_slot);
	free(v->merge_key);
	free(v->merge_rank);
	free(v->merge_tok);
	free(v->piece);
	free(v->piece_off);
	free(v->special);
	free(v->eog);
	free(v->chat_template);
	free(v);
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* An array key with one entry per token, of one of the element types in
 * want (-1 terminated). Returns 1 found, 0 absent, -1 error. */
static int per_token_array(const struct ntx_gguf *g, const char *key, int64_t n_tokens,
			   const int *want, const struct ntx_gguf_kv **kv, struct ntx_err *err)
{
	int rc = ntx_gguf_get_arr(g, key, kv, err), i;

	if (rc <= 0)
		return rc;
	for (i = 0; want[i] >= 0; i++)
		if ((*kv)->val.elem_type == (uint32_t)want[i])
			break;
	if (want[i] < 0)
		return ntx_err_set(err, NTX_EFORMAT, "%s: unexpected element type %s", key,
				   ntx_gguf_vtype_name((*kv)->val.elem_type));
	if ((*kv)->val.n != (uint64_t)n_tokens)
		return ntx_err_set(err, NTX_EFORMAT,
				   "%s has %" PRIu64 " entries, but there are %" PRId64 " tokens",
				   key, (*kv)->val.n, n_tokens);
	return 1;
}

static int load_tokens(struct ntx_vocab *v, const struct ntx_gguf *g, struct ntx_err *err)
{
	static const int score_t[] = { NTX_GGUF_F32, NTX_GGUF_I32, -1 };
	static const int type_t[] = { NTX_GGUF_I32, -1 };
	const struct ntx_gguf_kv *tk, *sk = NULL, *yk = NULL;
	uint64_t total = 0, n, i;
	char name[32];
	int rc;

	if (ntx_gguf_get_arr(g, "tokenizer.ggml.tokens", &tk, err) <= 0) {
		if (err && !err->code)
			ntx_err_set(err, NTX_EFORMAT, "no tokenizer.ggml.tokens array");
		return -1;
	}
	if (tk->val.elem_type != NTX_GGUF_STRING)
		return ntx_err_set(err, NTX_EFORMAT, "tokenizer.ggml.tokens: expected strings, found %s",
				   ntx_gguf_vtype_name(tk->val.elem_type));
	n = tk->val.n;
	if (n == 0 || n > NTX_VOCAB_MAX_TOKENS || !tk->str_index)
		return ntx_err_set(err, NTX_EFORMAT,
				   "tokenizer.ggml.tokens has %" PRIu64 " tokens (must be 1 to %d)", n,
				   NTX_VOCAB_MAX_TOKENS);
	v->n_tokens = (int32_t)n;
	rc = per_token_array(g, "tokenizer.ggml.scores", v->n_tokens, score_t, &sk, err);
	if (rc < 0)
		return -1;
	rc = per_token_array(g, "tokenizer.ggml.token_type", v->n_tokens, type_t, &yk, err);
	if (rc < 0)
		return -1;

	for (i = 0; i < n; i++) {
		uint64_t len = ntx_gguf_arr_str(tk, i).len;

		total += (len ? len : (uint64_t)snprintf(name, sizeof name, "[EMPTY_%" PRIu64 "]", i)) + 1;
		if (total > UINT32_MAX - 1)
			return ntx_err_set(err, NTX_EFORMAT,
					   "token texts exceed %u bytes at token %" PRIu64, UINT32_MAX - 1, i);
	}
	v->text = malloc(total);
	v->text_off = malloc((n + 1) * sizeof *v->text_off);
	v->score = malloc(n * sizeof *v->score);
	v->attr = malloc(n);
	v->tok_mask = table_size(n) - 1;
	v->tok_slot = malloc(((size_t)v->tok_mask + 1) * sizeof *v->tok_slot);
	if (!v->text || !v->text_off || !v->score || !v->attr || !v->tok_slot)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for %" PRIu64 " tokens", n);
	memset(v->tok_slot, 0xff, ((size_t)v->tok_mask + 1) * sizeof *v->tok_slot);

	total = 0;
	for (i = 0; i < n; i++) {
		struct ntx_gguf_str s = ntx_gguf_arr_str(tk, i);
		uint64_t hh;
		uint32_t h;
		size_t len;
		char buf[64];

		if (s.len == 0) { /* llama.cpp renames empty tokens */
			s.len = (uint64_t)snprintf(name, sizeof name, "[EMPTY_%" PRIu64 "]", i);
			s.p = name;
		}
		v->text_off[i] = (uint32_t)total;
		memcpy(v->text + total, s.p, s.len);
		v->text[total + s.len] = 0;
		total += s.len + 1;
		v->text_off[i + 1] = (uint32_t)total;

		hh = hash_bytes(s.p, s.len);
		for (h = (uint32_t)hh & v->tok_mask;; h = (h + 1) & v->tok_mask) {
			int32_t o = v->tok_slot[h].id;
			const char *t;

			if (o < 0) {
				v->tok_slot[h].id = (int32_t)i;
				v->tok_slot[h].tag = (uint32_t)(hh >> 32);
				break;
			}
			if (v->tok_slot[h].tag != (uint32_t)(hh >> 32))
				continue;
			t = vocab_text(v, o, &len);
			if (len == s.len && memcmp(t, s.p, len) == 0)
				return ntx_err_set(err, NTX_EFORMAT,
						   "duplicate token '%s': ids %d and %" PRIu64,
						   excerpt(s.p, s.len, buf), o, i);
		}

		if (!sk) {
			v->score[i] = 0.0f;
		} else if (sk->val.elem_type == NTX_GGUF_F32) {
			uint32_t b = rd32(sk->val.p + 4 * i);

			memcpy(&v->score[i], &b, 4);
		} else {
			v->score[i] = (float)(int32_t)rd32(sk->val.p + 4 * i);
		}

		v->attr[i] = ATTR_NORMAL;
		if (yk) {
			switch ((int32_t)rd32(yk->val.p + 4 * i)) {
			case NTX_TOKEN_NORMAL: v->attr[i] = ATTR_NORMAL; break;
			case NTX_TOKEN_UNKNOWN: v->attr[i] = ATTR_UNKNOWN; break;
			case NTX_TOKEN_CONTROL: v->attr[i] = ATTR_CONTROL; break;
			case NTX_TOKEN_USER_DEFINED: v->attr[i] = ATTR_USER_DEFINED; break;
			case NTX_TOKEN_UNUSED: v->attr[i] = ATTR_UNUSED; break;
			case NTX_TOKEN_BYTE: v->attr[i] = ATTR_BYTE; break;
			default: v->attr[i] = 0; break; /* UNDEFINED, as llama.cpp */
			}
		}
	}
	return 0;
}

static int load_merges(struct ntx_vocab *v, const struct ntx_gguf *g, struct ntx_err *err)
{
	const struct ntx_gguf_kv *mk;
	uint64_t n, i, maxlen = 0;
	char *buf;
	int rc = ntx_gguf_get_arr(g, "tokenizer.ggml.merges", &mk, err);

	if (rc < 0)
		return -1;
	if (rc == 0)
		return ntx_err_set(err, NTX_EFORMAT, "BPE vocabulary without tokenizer.ggml.merges");
	if (mk->val.elem_type != NTX_GGUF_STRING || (!mk->str_index && mk->val.n))
		return ntx_err_set(err, NTX_EFORMAT, "tokenizer.ggml.merges: expected strings, found %s",
				   ntx_gguf_vtype_name(mk->val.elem_type));
	n = mk->val.n;
	if (n > NTX_VOCAB_MAX_MERGES)
		return ntx_err_set(err, NTX_EFORMAT, "tokenizer.ggml.merges has %" PRIu64
				   " merges (at most %d)", n, NTX_VOCAB_MAX_MERGES);
	v->merge_mask = table_size(n) - 1;
	v->merge_key = malloc(((size_t)v->merge_mask + 1) * sizeof *v->merge_key);
	v->merge_rank = malloc(((size_t)v->merge_mask + 1) * sizeof *v->merge_rank);
	v->merge_tok = malloc(((size_t)v->merge_mask + 1) * sizeof *v->merge_tok);
	for (i = 0; i < n; i++)
		if (ntx_gguf_arr_str(mk, i).len > maxlen)
			maxlen = ntx_gguf_arr_str(mk, i).len;
	buf = malloc(maxlen + 1);
	if (!v->merge_key || !v->merge_rank || !v->merge_tok || !buf) {
		free(buf);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for %" PRIu64 " merges", n);
	}
	memset(v->merge_key, 0xff, ((size_t)v->merge_mask + 1) * sizeof *v->merge_key);

	for (i = 0; i < n; i++) {
		struct ntx_gguf_str s = ntx_gguf_arr_str(mk, i);
		const char *sp = s.len > 1 ? memchr(s.p + 1, ' ', s.len - 1) : NULL;
		size_t ll, rl;
		int32_t l, r, t;
		uint64_t key;
		uint32_t h;
		char ex[64];

		if (!sp) {
			free(buf);
			return ntx_err_set(err, NTX_EFORMAT, "merge %" PRIu64 " '%s' is not 'LEFT RIGHT'",
					   i, excerpt(s.p, s.len, ex));
		}
		ll = (size_t)(sp - s.p);
		rl = s.len - ll - 1;
		l = ntx_vocab_find_n(v, s.p, ll);
		r = ntx_vocab_find_n(v, sp + 1, rl);
		memcpy(buf, s.p, ll);
		memcpy(buf + ll, sp + 1, rl);
		t = l >= 0 && r >= 0 ? ntx_vocab_find_n(v, buf, ll + rl) : NTX_TOKEN_NONE;
		if (t < 0) {
			free(buf);
			return ntx_err_set(err, NTX_EFORMAT, "merge %" PRIu64 " '%s': %s is not a token", i,
					   excerpt(s.p, s.len, ex),
					   l < 0 ? "the left part" : r < 0 ? "the right part" : "the merged text");
		}
		key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
		for (h = (uint32_t)hash_u64(key) & v->merge_mask;; h = (h + 1) & v->merge_mask) {
			if (v->merge_key[h] == key)
				break; /* duplicate pair: the first rank stays, as in llama.cpp */
			if (v->merge_key[h] == UINT64_MAX) {
				v->merge_key[h] = key;
				v->merge_rank[h] = (int32_t)i;
				v->merge_tok[h] = t;
				break;
			}
		}
	}
	v->n_merges = (int64_t)n;
	free(buf);
	return 0;
}

/* A special-token id key: absent -> keep *id; 0xFFFFFFFF or -1 -> none. */
static int load_id(const struct ntx_vocab *v, const struct ntx_gguf *g, const char *key, int32_t *id,
		   struct ntx_err *err)
{
	const struct ntx_gguf_kv *kv = ntx_gguf_find(g, key);
	int64_t x;

	if (!kv)
		return 0;
	if (ntx_gguf_value_i64(&kv->val, &x))
		return ntx_err_set(err, NTX_EFORMAT, "%s: expected an integer, found %s", key,
				   ntx_gguf_vtype_name(kv->val.type));
	if (x == -1 || x == 0xFFFFFFFFll) {
		*id = NTX_TOKEN_NONE;
		return 0;
	}
	if (x < 0 || x >= v->n_tokens)
		return ntx_err_set(err, NTX_EFORMAT,
				   "%s = %" PRId64 " is out of range: the vocabulary has %d tokens", key, x,
				   v->n_tokens);
	*id = (int32_t)x;
	return 0;
}

static int load_bool(const struct ntx_gguf *g, const char *key, int *out, struct ntx_err *err)
{
	const struct ntx_gguf_kv *kv = ntx_gguf_find(g, key);
	uint64_t x;

	if (!kv)
		return 0;
	if (kv->val.type != NTX_GGUF_BOOL || ntx_gguf_value_u64(&kv->val, &x))
		return ntx_err_set(err, NTX_EFORMAT, "%s: expected a bool, found %s", key,
				   ntx_gguf_vtype_name(kv->val.type));
	*out = x != 0;
	return 0;
}

static int cmp_id(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

struct len_id {
	uint32_t len;
	int32_t id;
};

/* Longest text first, then lowest id. */
static int cmp_special(const void *a, const void *b)
{
	const struct len_id *x = a, *y = b;

	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* EOT/EOM detection, the end-of-generation set and the special-token list,
 * as llama.cpp's llama_vocab::impl::load does at c392e509. */
static int find_specials(struct ntx_vocab *v, struct ntx_err *err)
{
	static const char *eot_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
					   "<|endoftext|>", "<EOT>", "_<EOT>",
					   "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
					   NULL };
	static const char *eog_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
					   "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", NULL };
	int32_t id, *tmp;
	int i, n = 0;

	/* Token texts are unique, so each name is one lookup. llama.cpp takes
	 * the first match in hash-map order; here the lowest id wins. */
	if (v->eot == NTX_TOKEN_NONE) {
		for (i = 0; eot_names[i]; i++) {
			id = ntx_vocab_find(v, eot_names[i]);
			if (id >= 0 && (v->eot == NTX_TOKEN_NONE || id < v->eot))
				v->eot = id;
		}
		if (v->eot != NTX_TOKEN_NONE)
			v->attr[v->eot] |= ATTR_CONTROL;
	}
	if (v->eom == NTX_TOKEN_NONE && (id = ntx_vocab_find(v, "<|eom_id|>")) >= 0) {
		v->eom = id;
		v->attr[id] |= ATTR_CONTROL;
	}
	tmp = malloc(((size_t)v->n_tokens + 3) * sizeof *tmp);
	if (!tmp)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (i = 0; eog_names[i]; i++) {
		id = ntx_vocab_find(v, eog_names[i]);
		if (id >= 0) {
			tmp[n++] = id;
			v->attr[id] |= ATTR_CONTROL;
		}
	}
	if (v->eos != NTX_TOKEN_NONE)
		tmp[n++] = v->eos;
	if (v->eot != NTX_TOKEN_NONE)
		tmp[n++] = v->eot;
	if (v->eom != NTX_TOKEN_NONE)
		tmp[n++] = v->eom;
	qsort(tmp, (size_t)n, sizeof *tmp, cmp_id);
	v->n_eog = 0;
	for (i = 0; i < n; i++)
		if (v->n_eog == 0 || tmp[v->n_eog - 1] != tmp[i])
			tmp[v->n_eog++] = tmp[i];
	v->eog = tmp;

	for (id = 0, n = 0; id < v->n_tokens; id++)
		if (v->attr[id] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
			n++;
	{
		struct len_id *li = malloc(((size_t)n + 1) * sizeof *li);

		v->special = malloc(((size_t)n + 1) * sizeof *v->special);
		if (!li || !v->special) {
			free(li);
			return ntx_err_set(err, NTX_ENOMEM, "out of memory");
		}
		for (id = 0, n = 0; id < v->n_tokens; id++)
			if (v->attr[id] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) {
				li[n].len = v->text_off[id + 1] - v->text_off[id];
				li[n++].id = id;
			}
		qsort(li, (size_t)n, sizeof *li, cmp_special);
		for (i = 0; i < n; i++)
			v->special[i] = li[i].id;
		v->n_special = n;
		free(li);
	}
	return 0;
}

/* GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves,
 * the others to U+0100 + n in byte order. */
static void init_byte_map(struct ntx_vocab *v)
{
	int b, n = 0;

	for (b = 0; b < 324; b++)
		v->ub_byte[b] = -1;
	for (b = 0; b < 256; b++) {
		int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
		uint32_t cp = keep ? (uint32_t)b : 256u + (uint32_t)n++;
		char u[4];

		v->bu_len[b] = (uint8_t)ntx_utf8_encode(cp, u);
		memcpy(v->bu_text[b], u, v->bu_len[b]);
		v->ub_byte[cp] = (int16_t)b;
	}
}

static int load_config(struct ntx_vocab *v, const struct ntx_gguf *g, struct ntx_err *err)
{
	struct ntx_gguf_str model, pre = { "", 0 };
	int rc, b, llama3 = 0, qwen2 = 0;

	rc = ntx_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
	if (rc < 0)
		return -1;
	if (rc == 0)
		return ntx_err_set(err, NTX_EFORMAT, "no tokenizer.ggml.model: the file has no vocabulary");
	if (model.len == 5 && memcmp(model.p, "llama", 5) == 0) {
		v->type = NTX_VOCAB_SPM;
	} else if (model.len == 4 && memcmp(model.p, "gpt2", 4) == 0) {
		v->type = NTX_VOCAB_BPE;
	} else {
		char ex[64];

		return ntx_err_set(err, NTX_EUNSUP,
				   "tokenizer.ggml.model '%s' is not supported (only 'llama' and 'gpt2')",
				   excerpt(model.p, model.len, ex));
	}
	if (v->type == NTX_VOCAB_BPE) {
		static const char *l3[] = { "llama3", "llama-v3", "llama-bpe", "falcon3", NULL };
		static const char *same_regex[] = { "dbrx", "smaug-bpe", NULL };
		static const char *q2[] = { "qwen2", "deepseek-r1-qwen", NULL };
		char ex[64];
		int i, ok = 0;

		if (ntx_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err) < 0)
			return -1;
		for (i = 0; l3[i]; i++)
			if (pre.len == strlen(l3[i]) && memcmp(pre.p, l3[i], pre.len) == 0)
				ok = llama3 = 1;
		for (i = 0; same_regex[i]; i++)
			if (pre.len == strlen(same_regex[i]) && memcmp(pre.p, same_regex[i], pre.len) == 0)
				ok = 1;
		for (i = 0; q2[i]; i++)
			if (pre.len == strlen(q2[i]) && memcmp(pre.p, q2[i], pre.len) == 0)
				ok = qwen2 = 1;
		if (!ok)
			return ntx_err_set(err, NTX_EUNSUP,
					   "tokenizer.ggml.pre %s%s%s: only the Llama 3 and Qwen2 pre-tokenizers "
					   "are implemented (llama-bpe, llama3, llama-v3, falcon3, dbrx, "
					   "smaug-bpe, qwen2, deepseek-r1-qwen)",
					   pre.len ? "'" : "is missing", pre.len ? excerpt(pre.p, pre.len, ex) : "",
					   pre.len ? "' is not supported" : "");
	}

	if (load_tokens(v, g, err))
		return -1;
	init_byte_map(v);

	/* llama.cpp's defaults per vocabulary type */
	if (v->type == NTX_VOCAB_SPM) {
		v->bos = 1, v->eos = 2, v->unk = 0;
		v->add_space_prefix = 1, v->clean_spaces = 0, v->add_bos = 1, v->add_eos = 0;
		v->ignore_merges = 0;
	} else {
		v->bos = 11, v->eos = 11, v->unk = NTX_TOKEN_NONE;
		v->add_space_prefix = 0, v->clean_spaces = 1, v->add_bos = llama3, v->add_eos = 0;
		v->ignore_merges = llama3;
		/* qwen2: the Llama 3 regex with \p{N} instead of \p{N}{1,3};
		 * llama.cpp sets clean_spaces false, leaves add_bos false */
		v->digits_max = qwen2 ? 1 : 3;
		if (qwen2)
			v->clean_spaces = 0;
	}
	if (v->bos >= v->n_tokens)
		v->bos = NTX_TOKEN_NONE;
	if (v->eos >= v->n_tokens)
		v->eos = NTX_TOKEN_NONE;
	if (v->unk >= v->n_tokens)
		v->unk = NTX_TOKEN_NONE;
	v->eot = v->eom = NTX_TOKEN_NONE;
	if (load_id(v, g, "tokenizer.ggml.bos_token_id", &v->bos, err) ||
	    load_id(v, g, "tokenizer.ggml.eos_token_id", &v->eos, err) ||
	    load_id(v, g, "tokenizer.ggml.eot_token_id", &v->eot, err) ||
	    load_id(v, g, "tokenizer.ggml.eom_token_id", &v->eom, err) ||
	    load_id(v, g, "tokenizer.ggml.unknown_token_id", &v->unk, err) ||
	    load_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err) ||
	    load_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err) ||
	    load_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err))
		return -1;
	if (v->add_bos && v->bos == NTX_TOKEN_NONE)
		return ntx_err_set(err, NTX_EFORMAT, "the model adds a BOS token but has none "
				   "(tokenizer.ggml.bos_token_id)");
	if (v->add_eos && v->eos == NTX_TOKEN_NONE)
		return ntx_err_set(err, NTX_EFORMAT, "the model adds an EOS token but has none "
				   "(tokenizer.ggml.eos_token_id)");

	if (v->type == NTX_VOCAB_BPE && load_merges(v, g, err))
		return -1;

	for (b = 0; b < 256; b++) {
		if (v->type == NTX_VOCAB_SPM) {
			char hex[8], one = (char)b;

			snprintf(hex, sizeof hex, "<0x%02X>", b);
			v->byte_tok[b] = ntx_vocab_find(v, hex);
			if (v->byte_tok[b] < 0)
				v->byte_tok[b] = ntx_vocab_find_n(v, &one, 1);
		} else {
			v->byte_tok[b] = ntx_vocab_find_n(v, v->bu_text[b], v->bu_len[b]);
		}
	}
	v->nl = v->byte_tok['\n'];
	return 0;
}

struct ntx_vocab *ntx_vocab_load(const struct ntx_gguf *g, struct ntx_err *err)
{
	struct ntx_vocab *v = calloc(1, sizeof *v);
	struct ntx_gguf_str tmpl;
	int rc;

	if (!v) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	if (err)
		ntx_err_clear(err);
	if (load_config(v, g, err) || find_specials(v, err))
		goto fail;
	rc = ntx_gguf_get_str(g, "tokenizer.chat_template", &tmpl, err);
	if (rc < 0)
		goto fail;
	if (rc > 0) {
		v->chat_template = malloc(tmpl.len + 1);
		if (!v->chat_template) {
			ntx_err_set(err, NTX_ENOMEM, "out of memory for the chat template");
			goto fail;
		}
		memcpy(v->chat_template, tmpl.p, tmpl.len);
		v->chat_template[tmpl.len] = 0;
	}
	if (ntx_vocab_build_pieces(v, err))
		goto fail;
	return v;
fail:
	ntx_vocab_free(v);
	return NULL;
}
