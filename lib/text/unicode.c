/* unicode.c - UTF-8 and category lookups (see unicode.h). */
#include "unicode.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- categories ---- */

static unsigned is_whitespace(uint32_t cp)
{
	int lo = 0, hi = ntx_unicode_n_whitespace - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (ntx_unicode_whitespace[mid] == cp)
			return NTX_UCAT_WHITESPACE;
		if (ntx_unicode_whitespace[mid] < cp)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return 0;
}

unsigned ntx_unicode_flags(uint32_t cp)
{
	int lo = 0, hi = ntx_unicode_n_runs - 1;

	if (cp >= 0x110000)
		return NTX_UCAT_UNDEFINED;
	/* last run whose first <= cp (runs[0].first == 0) */
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;

		if (ntx_unicode_runs[mid].first <= cp)
			lo = mid;
		else
			hi = mid;
	}
	return ntx_unicode_runs[lo].flags | is_whitespace(cp);
}

/* ---- UTF-8 ---- */

size_t ntx_utf8_seq_len(unsigned char lead)
{
	static const unsigned char len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };

	return len[lead >> 4];
}

static int cont(unsigned char c)
{
	return (c & 0xC0) == 0x80;
}

uint32_t ntx_utf8_decode(const unsigned char *s, size_t len, size_t *adv)
{
	unsigned char c = s[0];
	uint32_t cp;

	*adv = 1;
	if (!(c & 0x80))
		return c;
	if (!(c & 0x40)) /* a continuation byte */
		return NTX_UNICODE_REPLACEMENT;
	if (!(c & 0x20)) {
		if (len < 2 || !cont(s[1]))
			return NTX_UNICODE_REPLACEMENT;
		*adv = 2;
		return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
	}
	if (!(c & 0x10)) {
		if (len < 3 || !cont(s[1]) || !cont(s[2]))
			return NTX_UNICODE_REPLACEMENT;
		*adv = 3;
		return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
	}
	if (!(c & 0x08)) {
		if (len < 4 || !cont(s[1]) || !cont(s[2]) || !cont(s[3]))
			return NTX_UNICODE_REPLACEMENT;
		cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
		     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
		if (cp > 0x10FFFF) /* llama.cpp throws later; we call it invalid */
			return NTX_UNICODE_REPLACEMENT;
		*adv = 4;
		return cp;
	}
	return NTX_UNICODE_REPLACEMENT;
}

size_t ntx_utf8_encode(uint32_t cp, char out[4])
{
	if (cp <= 0x7F) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp <= 0x7FF) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp <= 0xFFFF) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	if (cp <= 0x10FFFF) {
		out[0] = (char)(0xF0 | (cp >> 18));
		out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[3] = (char)(0x80 | (cp & 0x3F));
		return 4;
	}
	return 0;
}

int ntx_utf8_check(const unsigned char *s, size_t len)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c < 0xC2 || c > 0xF4)
		return -1;
	if (c < 0xE0) {
		need = 2;
	} else if (c < 0xF0) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0; /* no overlongs */
		else if (c == 0xED)
			hi = 0x9F; /* no surrogates */
	} else {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F; /* <= U+10FFFF */
	}
	for (i = 1; i < need; i++) {
		if (i >= len)
			return 0;
		if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF))
			return -1;
	}
	return (int)need;
}

char *ntx_utf8_sanitize(const char *s, size_t len, size_t *out_len)
{
	const unsigned char *u = (const unsigned char *)s;
	char *out;
	size_t i = 0, o = 0;

	if (len > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(len * 3 + 1); /* an invalid byte grows to 3 bytes */
	if (!out)
		return NULL;
	while (i < len) {
		int n = ntx_utf8_check(u + i, len - i);

		if (n > 0) {
			memcpy(out + o, u + i, (size_t)n);
			o += (size_t)n;
			i += (size_t)n;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	out[o] = '\0';
	if (out_len)
		*out_len = o;
	return out;
}
