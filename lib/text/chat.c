/* chat.c - chat prompt formatting (see chat.h). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	enum ntx_chat_style style;
} named[] = {
	{ "llama3", NTX_CHAT_LLAMA3 },
	{ "llama2", NTX_CHAT_LLAMA2 },
	{ "llama2-sys", NTX_CHAT_LLAMA2_SYS },
	{ "llama2-sys-bos", NTX_CHAT_LLAMA2_SYS_BOS },
	{ "llama2-sys-strip", NTX_CHAT_LLAMA2_SYS_STRIP },
	{ "chatml", NTX_CHAT_CHATML },
	{ "mistral-v1", NTX_CHAT_MISTRAL_V1 },
	{ "mistral-v3", NTX_CHAT_MISTRAL_V3 },
	{ "mistral-v3-tekken", NTX_CHAT_MISTRAL_V3_TEKKEN },
	{ "mistral-v7", NTX_CHAT_MISTRAL_V7 },
	{ "zephyr", NTX_CHAT_ZEPHYR },
	{ "vicuna", NTX_CHAT_VICUNA },
	{ "vicuna-orca", NTX_CHAT_VICUNA_ORCA },
};

#define NAMES "llama3, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, chatml, " \
	"mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, zephyr, vicuna, vicuna-orca"

const char *ntx_chat_style_name(enum ntx_chat_style st)
{
	size_t i;

	for (i = 0; i < sizeof named / sizeof named[0]; i++)
		if (named[i].style == st)
			return named[i].name;
	return "unknown";
}

int ntx_chat_detect(const char *tmpl, struct ntx_err *err)
{
	size_t i;

	for (i = 0; i < sizeof named / sizeof named[0]; i++)
		if (strcmp(tmpl, named[i].name) == 0)
			return named[i].style;
	/* llama.cpp's tests, in its order */
	if (strstr(tmpl, "<|im_start|>")) {
		if (strstr(tmpl, "<|im_sep|>"))
			return ntx_err_set(err, NTX_EUNSUP, "the Phi-4 chat template is not supported: "
					   "force a format with --chat-template NAME (" NAMES ")");
		return NTX_CHAT_CHATML;
	}
	if (strncmp(tmpl, "mistral", 7) == 0 || strstr(tmpl, "[INST]")) {
		if (strstr(tmpl, "[SYSTEM_PROMPT]"))
			return NTX_CHAT_MISTRAL_V7;
		if (strstr(tmpl, "' [INST] ' + system_message") || strstr(tmpl, "[AVAILABLE_TOOLS]")) {
			if (strstr(tmpl, " [INST]"))
				return NTX_CHAT_MISTRAL_V1;
			if (strstr(tmpl, "\"[INST]\""))
				return NTX_CHAT_MISTRAL_V3_TEKKEN;
			return NTX_CHAT_MISTRAL_V3;
		}
		if (strstr(tmpl, "content.strip()"))
			return NTX_CHAT_LLAMA2_SYS_STRIP;
		if (strstr(tmpl, "bos_token + '[INST]"))
			return NTX_CHAT_LLAMA2_SYS_BOS;
		if (strstr(tmpl, "<<SYS>>"))
			return NTX_CHAT_LLAMA2_SYS;
		return NTX_CHAT_LLAMA2;
	}
	if (strstr(tmpl, "<|assistant|>") && strstr(tmpl, "<|end|>"))
		return ntx_err_set(err, NTX_EUNSUP, "the Phi-3 chat template is not supported: "
				   "force a format with --chat-template NAME (" NAMES ")");
	if (strstr(tmpl, "<|user|>"))
		return NTX_CHAT_ZEPHYR;
	if (strstr(tmpl, "USER: ") && strstr(tmpl, "ASSISTANT: "))
		return strstr(tmpl, "SYSTEM: ") ? NTX_CHAT_VICUNA_ORCA : NTX_CHAT_VICUNA;
	if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|end_header_id|>"))
		return NTX_CHAT_LLAMA3;
	return ntx_err_set(err, NTX_EUNSUP, "unrecognised chat template (%zu bytes): force a format "
			   "with --chat-template NAME (" NAMES ")", strlen(tmpl));
}

/* ---- output buffer ---- */

struct sbuf {
	char *p;
	size_t n, cap;
	int failed;
};

static void put(struct sbuf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->n + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void puts_(struct sbuf *b, const char *s)
{
	put(b, s, strlen(s));
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Content without leading and trailing ASCII whitespace (llama.cpp's trim). */
static void put_trimmed(struct sbuf *b, const char *s)
{
	size_t a = 0, e = strlen(s);

	while (a < e && is_space(s[a]))
		a++;
	while (e > a && is_space(s[e - 1]))
		e--;
	put(b, s + a, e - a);
}

static void format_llama3(struct sbuf *b, const struct ntx_chat_msg *m, int n, int add_assistant)
{
	int i;

	for (i = 0; i < n; i++) {
		puts_(b, "<|start_header_id|>");
		puts_(b, m[i].role);
		puts_(b, "<|end_header_id|>\n\n");
		put_trimmed(b, m[i].content);
		puts_(b, "<|eot_id|>");
	}
	if (add_assistant)
		puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void format_llama2(struct sbuf *b, enum ntx_chat_style st, const struct ntx_chat_msg *m, int n)
{
	int sys = st != NTX_CHAT_LLAMA2, bos_inside = st == NTX_CHAT_LLAMA2_SYS_BOS;
	int strip = st == NTX_CHAT_LLAMA2_SYS_STRIP, inside = 1, i;

	puts_(b, "[INST] ");
	for (i = 0; i < n; i++) {
		if (!inside) {
			inside = 1;
			puts_(b, bos_inside ? "<s>[INST] " : "[INST] ");
		}
		if (strcmp(m[i].role, "system") == 0) {
			if (sys)
				puts_(b, "<<SYS>>\n");
			if (strip)
				put_trimmed(b, m[i].content);
			else
				puts_(b, m[i].content);
			puts_(b, sys ? "\n<</SYS>>\n\n" : "\n");
		} else if (strcmp(m[i].role, "user") == 0) {
			if (strip)
				put_trimmed(b, m[i].content);
			else
				puts_(b, m[i].content);
			puts_(b, " [/INST]");
		} else {
			if (strip)
				put_trimmed(b, m[i].content);
			else
				puts_(b, m[i].content);
			puts_(b, "</s>");
			inside = 0;
		}
	}
}

static void put_content(struct sbuf *b, const char *s, int trim)
{
	if (trim)
		put_trimmed(b, s);
	else
		puts_(b, s);
}

static void format_chatml(struct sbuf *b, const struct ntx_chat_msg *m, int n, int add_assistant)
{
	int i;

	for (i = 0; i < n; i++) {
		puts_(b, "<|im_start|>");
		puts_(b, m[i].role);
		puts_(b, "\n");
		puts_(b, m[i].content);
		puts_(b, "<|im_end|>\n");
	}
	if (add_assistant)
		puts_(b, "<|im_start|>assistant\n");
}

static void format_mistral_v7(struct sbuf *b, const struct ntx_chat_msg *m, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		if (strcmp(m[i].role, "system") == 0) {
			puts_(b, "[SYSTEM_PROMPT] ");
			puts_(b, m[i].content);
			puts_(b, "[/SYSTEM_PROMPT]");
		} else if (strcmp(m[i].role, "user") == 0) {
			puts_(b, "[INST] ");
			puts_(b, m[i].content);
			puts_(b, "[/INST]");
		} else {
			puts_(b, " ");
			puts_(b, m[i].content);
			puts_(b, "</s>");
		}
	}
}

static void format_mistral(struct sbuf *b, enum ntx_chat_style st, const struct ntx_chat_msg *m,
			   int n)
{
	const char *lead = st == NTX_CHAT_MISTRAL_V1 ? " " : "";
	const char *trail = st == NTX_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
	int inside = 0, i;

	for (i = 0; i < n; i++) {
		if (!inside) {
			puts_(b, lead);
			puts_(b, "[INST]");
			puts_(b, trail);
			inside = 1;
		}
		if (strcmp(m[i].role, "system") == 0) {
			puts_(b, m[i].content);
			puts_(b, "\n\n");
		} else if (strcmp(m[i].role, "user") == 0) {
			puts_(b, m[i].content);
			puts_(b, lead);
			puts_(b, "[/INST]");
		} else {
			puts_(b, trail);
			put_content(b, m[i].content, st == NTX_CHAT_MISTRAL_V3);
			puts_(b, "</s>");
			inside = 0;
		}
	}
}

static void format_zephyr(struct sbuf *b, const struct ntx_chat_msg *m, int n, int add_assistant)
{
	int i;

	for (i = 0; i < n; i++) {
		puts_(b, "<|");
		puts_(b, m[i].role);
		puts_(b, "|>\n");
		puts_(b, m[i].content);
		puts_(b, "<|endoftext|>\n");
	}
	if (add_assistant)
		puts_(b, "<|assistant|>\n");
}

static void format_vicuna(struct sbuf *b, enum ntx_chat_style st, const struct ntx_chat_msg *m,
			  int n, int add_assistant)
{
	int i;

	for (i = 0; i < n; i++) {
		if (strcmp(m[i].role, "system") == 0) {
			if (st == NTX_CHAT_VICUNA_ORCA) {
				puts_(b, "SYSTEM: ");
				puts_(b, m[i].content);
				puts_(b, "\n");
			} else {
				puts_(b, m[i].content);
				puts_(b, "\n\n");
			}
		} else if (strcmp(m[i].role, "user") == 0) {
			puts_(b, "USER: ");
			puts_(b, m[i].content);
			puts_(b, "\n");
		} else if (strcmp(m[i].role, "assistant") == 0) {
			puts_(b, "ASSISTANT: ");
			puts_(b, m[i].content);
			puts_(b, "</s>\n");
		}
	}
	if (add_assistant)
		puts_(b, "ASSISTANT:");
}

int ntx_chat_format_ex(const struct ntx_vocab *v, const char *tmpl,
		       const struct ntx_chat_msg *msgs, int n, int add_assistant, unsigned flags,
		       char **out, struct ntx_err *err)
{
	struct sbuf b = { NULL, 0, 0, 0 };
	int style, i;

	*out = NULL;
	if (n < 0 || (n > 0 && !msgs))
		return ntx_err_set(err, NTX_EINVAL, "bad message list (%d messages)", n);
	for (i = 0; i < n; i++)
		if (!msgs[i].role || !msgs[i].content)
			return ntx_err_set(err, NTX_EINVAL, "message %d has no %s", i,
					   msgs[i].role ? "content" : "role");
	if (!tmpl) {
		if (!v)
			return ntx_err_set(err, NTX_EINVAL, "no template and no vocabulary");
		tmpl = ntx_vocab_chat_template(v);
	}
	if (tmpl) {
		style = ntx_chat_detect(tmpl, err);
		if (style < 0 && !(flags & NTX_CHAT_FALLBACK))
			return -1;
	} else {
		style = -1;
		if (!(flags & NTX_CHAT_FALLBACK))
			return ntx_err_set(err, NTX_EUNSUP, "the model has no tokenizer.chat_template");
	}
	if (style < 0) {
		if (err)
			ntx_err_clear(err);
		style = v && ntx_vocab_find(v, "<|start_header_id|>") >= 0 ? NTX_CHAT_LLAMA3
									 : NTX_CHAT_LLAMA2_SYS;
	}
	switch (style) {
	case NTX_CHAT_LLAMA3:
		format_llama3(&b, msgs, n, add_assistant);
		break;
	case NTX_CHAT_CHATML:
		format_chatml(&b, msgs, n, add_assistant);
		break;
	case NTX_CHAT_MISTRAL_V7:
		format_mistral_v7(&b, msgs, n);
		break;
	case NTX_CHAT_MISTRAL_V1:
	case NTX_CHAT_MISTRAL_V3:
	case NTX_CHAT_MISTRAL_V3_TEKKEN:
		format_mistral(&b, (enum ntx_chat_style)style, msgs, n);
		break;
	case NTX_CHAT_ZEPHYR:
		format_zephyr(&b, msgs, n, add_assistant);
		break;
	case NTX_CHAT_VICUNA:
	case NTX_CHAT_VICUNA_ORCA:
		format_vicuna(&b, (enum ntx_chat_style)style, msgs, n, add_assistant);
		break;
	default:
		format_llama2(&b, (enum ntx_chat_style)style, msgs, n);
	}
	if (!b.p && !b.failed)
		put(&b, "", 0);
	if (b.failed) {
		free(b.p);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory for the chat prompt");
	}
	*out = b.p;
	return 0;
}

int ntx_chat_format(const struct ntx_vocab *v, const char *tmpl, const struct ntx_chat_msg *msgs,
		    int n, int add_assistant, char **out, struct ntx_err *err)
{
	return ntx_chat_format_ex(v, tmpl, msgs, n, add_assistant, 0, out, err);
}
