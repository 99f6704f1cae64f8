/* chat.h - chat prompts in the model's format, as llama.cpp's built-in
 * (non-Jinja) templates write them (llama_chat_apply_template, commit
 * c392e509). The Jinja text of tokenizer.chat_template is not run: it is
 * only inspected to recognise the format, like llama.cpp does.
 *
 * Formats (the text has no BOS: the tokenizer adds it):
 *   llama3  "<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>" per
 *           message (CONTENT trimmed of ASCII whitespace), and with
 *           add_assistant "<|start_header_id|>assistant<|end_header_id|>\n\n".
 *           Recognised by "<|start_header_id|>" and "<|end_header_id|>".
 *   llama2  "[INST] " + system "<<SYS>>\nSYS\n<</SYS>>\n\n" + user "USER [/INST]"
 *           + assistant "ANSWER</s>", the next turn opening with "[INST] "
 *           (variants: no <<SYS>> support, "<s>[INST] " inside the history,
 *           stripped messages). Recognised by "[INST]" (and "<<SYS>>",
 *           "bos_token + '[INST]", "content.strip()" for the variants);
 *           add_assistant changes nothing, as in llama.cpp.
 *   chatml  "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then "<|im_start|>assistant\n".
 *           Recognised by "<|im_start|>" (with "<|im_sep|>" it is Phi-4: not
 *           supported).
 *   mistral-v7  system "[SYSTEM_PROMPT] S[/SYSTEM_PROMPT]", user "[INST] U[/INST]",
 *           assistant " A</s>". Recognised by "[INST]" and "[SYSTEM_PROMPT]".
 *   mistral-v1, -v3, -v3-tekken  "[INST]" turns opened with " [INST] " (v1),
 *           "[INST] " (v3), "[INST]" (tekken); system "S\n\n", user "U [/INST]"
 *           (v1: "U [/INST]", v3 and tekken: "U[/INST]"), assistant " A</s>"
 *           (tekken: "A</s>"; v3 trims A). Recognised by "[INST]" with
 *           "' [INST] ' + system_message" or "[AVAILABLE_TOOLS]": " [INST]" in
 *           the text means v1, "\"[INST]\"" tekken, else v3.
 *   zephyr  "<|ROLE|>\nCONTENT<|endoftext|>\n", then "<|assistant|>\n".
 *           Recognised by "<|user|>" (but "<|assistant|>" with "<|end|>" is
 *           Phi-3: not supported).
 *   vicuna  system "S\n\n" (vicuna-orca: "SYSTEM: S\n"), "USER: U\n",
 *           "ASSISTANT: A</s>\n", then "ASSISTANT:". Recognised by "USER: " and
 *           "ASSISTANT: " ("SYSTEM: " too: vicuna-orca).
 * The tests are llama.cpp's, in its order (ChatML, the [INST] family, Phi-3,
 * Zephyr, Vicuna, Llama 3); the formats are those of llama.cpp's
 * llama_chat_apply_template.
 * A template may also be given by name (ntx-run and ntx-serve
 * --chat-template): "llama3", "llama2", "llama2-sys", "llama2-sys-bos",
 * "llama2-sys-strip", "chatml", "mistral-v1", "mistral-v3", "mistral-v3-tekken",
 * "mistral-v7", "zephyr", "vicuna", "vicuna-orca".
 * Any other template is an error (NTX_EUNSUP) that names --chat-template, and
 * so is a model without tokenizer.chat_template, unless the caller asks for a
 * fallback (NTX_CHAT_FALLBACK): then llama3 if the vocabulary has the
 * <|start_header_id|> token, else llama2-sys. (llama.cpp's tools fall back to
 * ChatML, whose tokens Llama vocabularies do not have.) */
#ifndef NTX_CHAT_H
#define NTX_CHAT_H

#include "err.h"
#include "tokenizer.h"

struct ntx_chat_msg {
	const char *role;    /* "system", "user", "assistant", ... */
	const char *content;
};

enum ntx_chat_style {
	NTX_CHAT_LLAMA3 = 1,
	NTX_CHAT_LLAMA2,           /* no system message support */
	NTX_CHAT_LLAMA2_SYS,
	NTX_CHAT_LLAMA2_SYS_BOS,
	NTX_CHAT_LLAMA2_SYS_STRIP,
	NTX_CHAT_CHATML,
	NTX_CHAT_MISTRAL_V1,
	NTX_CHAT_MISTRAL_V3,
	NTX_CHAT_MISTRAL_V3_TEKKEN,
	NTX_CHAT_MISTRAL_V7,
	NTX_CHAT_ZEPHYR,
	NTX_CHAT_VICUNA,
	NTX_CHAT_VICUNA_ORCA
};

/* The name of a style ("llama3", "chatml", ...). */
const char *ntx_chat_style_name(enum ntx_chat_style st);

enum {
	NTX_CHAT_FALLBACK = 1 /* unknown or missing template: pick a format */
};

/* The style of a template text or name; -1 and *err (NTX_EUNSUP) if it is
 * not one of the above. */
int ntx_chat_detect(const char *tmpl, struct ntx_err *err);

/* Format msgs[0..n) with tmpl (a Jinja template text or a name), or with the
 * model's tokenizer.chat_template when tmpl is NULL (v is then required; it
 * may be NULL otherwise). add_assistant: end with the open assistant header.
 * *out is malloc'ed (caller frees), NUL-terminated. Returns 0, or -1 and
 * *err. */
int ntx_chat_format(const struct ntx_vocab *v, const char *tmpl, const struct ntx_chat_msg *msgs,
		    int n, int add_assistant, char **out, struct ntx_err *err);

/* The same with flags (NTX_CHAT_FALLBACK). */
int ntx_chat_format_ex(const struct ntx_vocab *v, const char *tmpl,
		       const struct ntx_chat_msg *msgs, int n, int add_assistant, unsigned flags,
		       char **out, struct ntx_err *err);

#endif
