/* ntx.h - the public C API of libntx: run Llama GGUF models on the CPU or
 * a CUDA GPU from a C program.
 *
 * The parts, in the order a program uses them:
 *   struct ntx_error      where a failed call leaves its code and message
 *   struct ntx_lm         an open model: metadata, tokenizer
 *   struct ntx_placement  where each layer lives (VRAM, RAM, disk): loaded
 *                         from ntx-plan's JSON or planned in memory
 *   struct ntx_ctx        an engine over a model: KV caches, sequences,
 *                         generation, continuous batching, statistics
 *   serving (0.3)         chat prompts, streaming text (struct
 *                         ntx_detokenizer), sampling options from text,
 *                         finish names, speculative decoding on a context
 *   the tools' calls      option values (ntx_arg_*), files replaced when
 *                         complete (struct ntx_output), inspect, calibration
 *   plans and packs       placements planned from parameters (struct
 *                         ntx_model_desc), checked and explained; pack
 *                         files written and verified (struct ntx_packfile)
 *   ntx-run's calls (0.4) contexts with skipped layers, read modes and
 *                         packs, perplexity; vocabulary-only models, token
 *                         id and layer lists
 *   generate details (0.5) teacher forcing, a logits sink, self-
 *                         speculation, speculative and streaming counters
 *   batch requests and    JSON Lines request lines (struct
 *   bench (0.5)           ntx_request_json), cancelling every request, the
 *                         throughput benchmark's document
 *
 * Rules every call follows (doc/libntx.md is the full contract):
 *   - Every call that can fail returns enum ntx_status (NTX_OK = 0) and takes
 *     a struct ntx_error * as its last argument (NULL: the code only).
 *   - Handles are opaque. open/close and new/free pair up; every close and
 *     free accepts NULL.
 *   - Every struct starts with a `size` field: set it to sizeof the struct
 *     (the _init functions do), so a program built against an older header
 *     keeps working with a newer library.
 *   - No global state. Thread safety is stated per call: "any thread" calls
 *     may run concurrently on the same handle; "one thread" calls need the
 *     caller to serialize them per handle (distinct handles are independent).
 *   - The library never prints and never exits.
 *   - Strings and arrays the library returns are borrowed from the handle
 *     named, unless the call says the caller frees them with ntx_free(). */
#ifndef NTX_H
#define NTX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ---- */

#define NTX_VERSION_MAJOR 0
#define NTX_VERSION_MINOR 5
#define NTX_VERSION_PATCH 0
/* The header's version as one number: 0x00MMmmpp. */
#define NTX_VERSION_NUMBER \
	((NTX_VERSION_MAJOR << 16) | (NTX_VERSION_MINOR << 8) | NTX_VERSION_PATCH)

/* The library's version as "MAJOR.MINOR.PATCH" (static string). Compare with
 * NTX_VERSION_NUMBER through ntx_version_number(): a library whose major
 * differs from the header's is not compatible. Any thread. */
const char *ntx_version(void);
unsigned ntx_version_number(void);

/* ---- errors ---- */

enum ntx_status {
	NTX_OK = 0,
	NTX_STATUS_IO = 1,          /* I/O error (the message ends with the errno text) */
	NTX_STATUS_FORMAT = 2,      /* malformed input file */
	NTX_STATUS_UNSUPPORTED = 3, /* valid input this library does not support */
	NTX_STATUS_INVALID = 4,     /* bad argument (NULL handle, value out of range) */
	NTX_STATUS_NOMEM = 5,       /* out of memory */
	NTX_STATUS_NOFIT = 6,       /* valid input with no solution (the model does not fit) */
	NTX_STATUS_DEVICE = 7,      /* GPU / CUDA failure, or no usable GPU */
	NTX_STATUS_INTERRUPTED = 8, /* ntx_ctx_interrupt() */
	NTX_STATUS_MISMATCH = 9,    /* files that do not belong together */
	NTX_STATUS_BUFFER = 10,     /* the caller's buffer is too small (the call
				     * says how much is needed) */
	NTX_STATUS_BUSY = 11        /* the handle is in a state that refuses the
				     * call (e.g. batch requests are active) */
};

/* A short name for a status ("ok", "io", "format", ...; static). Any thread. */
const char *ntx_status_name(enum ntx_status s);

/* Where a failed call leaves its status and a one-line message that names
 * the value and the limit ("models/x.gguf: No such file or directory").
 * One per thread: calls on one error object must not overlap. */
struct ntx_error;

/* A new error object (status NTX_OK, message ""); NULL when out of memory. */
struct ntx_error *ntx_error_new(void);
void ntx_error_free(struct ntx_error *e);
/* The last failure's status and message (borrowed, valid until the next
 * call that takes e). A successful call does not clear e: a caller checks
 * the returned status first. */
enum ntx_status ntx_error_status(const struct ntx_error *e);
const char *ntx_error_message(const struct ntx_error *e);
void ntx_error_clear(struct ntx_error *e);

/* Free memory the library allocated for the caller (ntx_placement_to_json).
 * NULL ok. Any thread. */
void ntx_free(void *p);

/* ---- models ---- */

struct ntx_lm;

/* Open a Llama GGUF file: maps it read-only, checks every tensor, loads the
 * tokenizer. On success *out owns the map until ntx_lm_close(). Once open, an
 * lm is never modified: every ntx_lm_* call below is "any thread", and any
 * number of contexts (in any threads) may use it; close it after them. */
enum ntx_status ntx_lm_open(const char *path, struct ntx_lm **out, struct ntx_error *err);
void ntx_lm_close(struct ntx_lm *lm);

struct ntx_lm_info {
	size_t size;              /* sizeof(struct ntx_lm_info) */
	const char *path;         /* as given to ntx_lm_open (borrowed from lm) */
	const char *arch;         /* general.architecture ("llama"; borrowed) */
	const char *fingerprint;  /* 16 hex digits identifying the file (borrowed) */
	uint64_t file_size;       /* bytes */
	uint64_t n_params;        /* elements of every tensor */
	int n_layer, n_embd, n_ff, n_head, n_head_kv;
	int n_ctx_train;          /* the context length it was trained with */
	int32_t n_vocab;
	int32_t bos, eos;         /* -1: none */
	const char *chat_template; /* tokenizer.chat_template, the Jinja text
				    * (borrowed); NULL: the model has none */
	int n_expert, n_expert_used; /* mixture of experts: experts per layer and
				      * per token; 0 for a dense model */
};

/* Fill *info (info->size set by the caller). Any thread. */
enum ntx_status ntx_lm_info(const struct ntx_lm *lm, struct ntx_lm_info *info,
			    struct ntx_error *err);

/* Is id an end-of-generation token (eos, eot, ...)? 0 for ids out of range.
 * Any thread. */
int ntx_lm_is_eog(const struct ntx_lm *lm, int32_t id);

/* ---- tokenizer ---- */

enum {
	NTX_TOKENIZE_ADD_BOS = 1,  /* add BOS (and EOS) as the model asks */
	NTX_TOKENIZE_SPECIAL = 2   /* text of control tokens becomes those tokens */
};

/* Tokenize text[0..len) (any bytes) with NTX_TOKENIZE_* flags into
 * ids[0..cap). *n_ids: the number of ids; when it exceeds cap, nothing is
 * written, NTX_STATUS_BUFFER is returned and *n_ids says how many to make
 * room for. Any thread. */
enum ntx_status ntx_lm_tokenize(const struct ntx_lm *lm, const char *text, size_t len,
				unsigned flags, int32_t *ids, int cap, int *n_ids,
				struct ntx_error *err);

enum {
	NTX_DETOKENIZE_REMOVE_SPECIAL = 1, /* drop a leading BOS (and trailing EOS) */
	NTX_DETOKENIZE_SPECIAL = 2         /* render control tokens as their text */
};

/* The text of ids[0..n) (llama.cpp's detokenizer) into buf[0..cap), NUL-
 * terminated; *len: its length without the NUL (the text may hold NULs and
 * invalid UTF-8). When len + 1 exceeds cap, NTX_STATUS_BUFFER and *len say
 * how much is needed. NTX_STATUS_INVALID for an id out of range. Any thread. */
enum ntx_status ntx_lm_detokenize(const struct ntx_lm *lm, const int32_t *ids, int n,
				  unsigned flags, char *buf, size_t cap, size_t *len,
				  struct ntx_error *err);

/* The bytes of one token as generation streams them (borrowed from lm, not
 * NUL-terminated; maybe part of a UTF-8 character: the concatenated pieces
 * are the text). Control tokens give "". NTX_STATUS_INVALID out of range.
 * Any thread. */
enum ntx_status ntx_lm_piece(const struct ntx_lm *lm, int32_t id, const char **piece,
			     size_t *len, struct ntx_error *err);

/* ---- placement: where the layers live ---- */

struct ntx_placement;

/* Read a plan written by ntx-plan (JSON, doc/plan-json.md) and check that it
 * was made for lm (NTX_STATUS_MISMATCH otherwise). Any thread. */
enum ntx_status ntx_placement_load(const struct ntx_lm *lm, const char *path,
				   struct ntx_placement **out, struct ntx_error *err);

struct ntx_placement_params {
	size_t size;           /* sizeof(struct ntx_placement_params) */
	int64_t vram_budget;   /* bytes; -1: detect (default); 0: no GPU */
	int64_t ram_budget;    /* bytes; -1: detect (default) */
	int n_ctx;             /* 0: min(n_ctx_train, 4096) */
	int n_seq;             /* sequences decoded together; 0: 1 */
	const char *pack_path; /* where disk layers are packed (ntx-pack); NULL:
				* MODEL.ntxp */
	int gpu_index;
};
void ntx_placement_params_init(struct ntx_placement_params *p);

/* Plan in memory for the hardware found now within the budgets (as ntx-plan
 * does; the rates of the probe cache when an earlier ntx-plan --probe on this
 * machine stored them, unless NTX_PROBE_CACHE=0). NTX_STATUS_NOFIT when the
 * model fits nowhere. A plan with layers on
 * disk needs its pack (made by ntx-pack) at pack_path. Any thread. */
enum ntx_status ntx_placement_make(const struct ntx_lm *lm,
				   const struct ntx_placement_params *p,
				   struct ntx_placement **out, struct ntx_error *err);
void ntx_placement_free(struct ntx_placement *pl);

/* The model file the plan at plan_path names (resolved against the plan's
 * directory), for opening it before ntx_placement_load. *model_path is
 * freed with ntx_free(). NTX_STATUS_INVALID when the plan names none that
 * can be opened again (a GGUF read from stdin). Any thread. */
enum ntx_status ntx_placement_model_path(const char *plan_path, char **model_path,
					 struct ntx_error *err);

struct ntx_placement_info {
	size_t size;              /* sizeof(struct ntx_placement_info) */
	int n_layer;
	int n_vram, n_ram, n_disk, n_skipped; /* layers per home */
	int n_gpu_exec, n_cpu_exec;           /* layers per executor */
	int n_ctx, n_seq;                     /* what its reserves were made for */
	double predicted_tok_per_s;
	/* 0.4: */
	int kv_cache;                         /* enum ntx_kv_cache (declared below):
					       * the KV cache type its reserves
					       * counted, F16 or F32 */
};
/* Any thread. */
enum ntx_status ntx_placement_info(const struct ntx_placement *pl,
				   struct ntx_placement_info *info, struct ntx_error *err);
/* The plan as ntx-plan's JSON; *json is NUL-terminated, the caller frees it
 * with ntx_free(). Any thread. */
enum ntx_status ntx_placement_to_json(const struct ntx_placement *pl, char **json,
				      struct ntx_error *err);

/* ---- contexts: the engine ---- */

enum ntx_backend_choice {
	NTX_USE_AUTO = 0,  /* the GPU when one is usable, else the CPU */
	NTX_USE_CPU = 1,
	NTX_USE_CUDA = 2   /* NTX_STATUS_DEVICE when no GPU is usable */
};

/* The element type of the KV caches (0.3). */
enum ntx_kv_cache {
	NTX_KV_CACHE_DEFAULT = 0, /* the placement's, else f16 */
	NTX_KV_CACHE_F16 = 1,
	NTX_KV_CACHE_F32 = 2
};

struct ntx_ctx_params {
	size_t size;                   /* sizeof(struct ntx_ctx_params) */
	enum ntx_backend_choice backend;
	int n_ctx;       /* KV positions per sequence; 0: the placement's, else
			  * min(n_ctx_train, 4096) */
	int n_seq;       /* sequences (batch slots); 0: the placement's, else 1 */
	int n_threads;   /* CPU threads; 0: every core */
	int gpu_index;
	/* 0.3: */
	enum ntx_kv_cache cache_type; /* the KV caches' element type */
	/* 0.4: */
	const int *skip;      /* layers removed from the model (any order; read
			       * during ntx_ctx_new), besides the placement's */
	int n_skip;
	int io;               /* enum ntx_io_mode (ntx-run's contexts, below):
			       * how streamed layers are read */
	int page_cache_only;  /* RAM layers computed on the CPU are read in place
			       * from the model's map, never copied into
			       * anonymous memory (a RAM budget: the page cache
			       * is the only copy) */
	const char *pack_path;/* the pack of disk layers; NULL: the placement's */
};
void ntx_ctx_params_init(struct ntx_ctx_params *p);

struct ntx_ctx;

/* An engine for lm placed by pl (NULL: every layer on the backend); both
 * are borrowed and must outlive the context. Any
 * thread, for distinct contexts. Everything below on one ctx: one thread at a
 * time, except ntx_ctx_interrupt. */
enum ntx_status ntx_ctx_new(const struct ntx_lm *lm, const struct ntx_placement *pl,
			    const struct ntx_ctx_params *p, struct ntx_ctx **out,
			    struct ntx_error *err);
/* Frees everything; active batch requests end without callbacks. */
void ntx_ctx_free(struct ntx_ctx *ctx);

/* Ask the ntx_ctx_generate or ntx_ctx_step in progress (else the next one) to
 * stop soon: generate ends with NTX_FINISH_INTERRUPTED, step returns
 * NTX_STATUS_INTERRUPTED. Any thread, and async-signal-safe. */
void ntx_ctx_interrupt(struct ntx_ctx *ctx);

/* Mixture of experts: write how often the router chose each expert of each
 * layer, over every token this context evaluated (prompts, generation,
 * verification), to path ("-": stdout) as an "ntx.experts" document
 * (doc/plan-json.md) for ntx_planner_params.expert_stats_path, through a
 * temporary name. NTX_STATUS_INVALID for a dense model. */
enum ntx_status ntx_ctx_expert_stats(struct ntx_ctx *ctx, const char *path, struct ntx_error *err);

/* Mixture of experts, one layer, since ntx_ctx_new: the router's choices
 * (tokens x experts used per token), those that went to experts the CPU
 * computes beside the GPU (the expert split), and the expert cache's hits
 * and reads (experts on disk). NTX_STATUS_INVALID for a dense model or a
 * layer out of range. One thread. */
struct ntx_expert_layer_stats {
	size_t size;           /* sizeof(struct ntx_expert_layer_stats) */
	uint64_t routed, routed_cpu;
	uint64_t cache_hits, cache_misses;
};
enum ntx_status ntx_ctx_expert_layer_stats(const struct ntx_ctx *ctx, int layer,
					   struct ntx_expert_layer_stats *st,
					   struct ntx_error *err);

/* Sampling, llama.cpp's options and defaults. */
struct ntx_gen_params {
	size_t size;          /* sizeof(struct ntx_gen_params) */
	int n_predict;        /* tokens to generate; -1: until EOG or a full context */
	float temperature;    /* <= 0: greedy (default 0.8) */
	int top_k;            /* <= 0: off (default 40) */
	float top_p;          /* >= 1: off (default 0.95) */
	float min_p;          /* <= 0: off (default 0.05) */
	float repeat_penalty; /* 1: off (default) */
	int repeat_last_n;    /* tokens penalised (default 64; -1: the context) */
	uint64_t seed;        /* same seed, same output (default 0) */
	int ignore_eog;       /* end-of-generation tokens do not stop */
	/* 0.5, for ntx_ctx_generate only (ntx_ctx_submit refuses them; the
	 * 0.5 section below says more): */
	const int32_t *force; /* teacher forcing: the generated tokens are
			       * force[0..n_force), not sampled (read during
			       * the call); NULL: off */
	int n_force;
	/* each evaluated position's logits (ntx_logits_fn); NULL: none */
	int (*on_logits)(void *user, const float *logits, int32_t n_vocab);
	void *logits_user;    /* for on_logits */
};
void ntx_gen_params_init(struct ntx_gen_params *p);

enum ntx_finish {
	NTX_FINISH_EOG = 1,         /* an end-of-generation token */
	NTX_FINISH_LENGTH = 2,      /* n_predict reached */
	NTX_FINISH_CONTEXT = 3,     /* the context is full */
	NTX_FINISH_STOPPED = 4,     /* the token callback or ntx_ctx_cancel */
	NTX_FINISH_INTERRUPTED = 5  /* ntx_ctx_interrupt */
};

struct ntx_gen_result {
	size_t size;                /* sizeof(struct ntx_gen_result) */
	int n_prompt, n_gen;        /* tokens (n_gen counts a final EOG token) */
	int n_reused;               /* batch: prompt tokens taken from the cache */
	enum ntx_finish finish;
	double t_prompt_ms;         /* to the first generated token */
	double t_gen_ms;            /* from it to the last */
	/* 0.5: speculative decoding in ntx_ctx_generate (0 for batch
	 * requests and without ntx_ctx_set_spec) */
	int64_t n_drafted, n_accepted;   /* tokens drafted, of them accepted */
	int64_t n_lookup_drafted, n_lookup_accepted; /* prompt lookup's share */
	int64_t n_target_passes;    /* passes of the target after the prompt
				     * (each verifies a draft or decodes one
				     * token) */
	int64_t n_draft_passes;     /* evaluations of the draft model (or of the
				     * target with the draft's layers skipped) */
	double t_draft_ms;          /* of t_gen_ms: drafting */
	double t_verify_ms;         /* of t_gen_ms: the target's passes */
	int64_t n_paused_steps;     /* of n_target_passes: plain steps taken
				     * because drafting did not pay (the
				     * adaptive K paused it; 0 with a fixed K) */
};

/* Each generated token: its id and its piece (as ntx_lm_piece; "" for
 * end-of-generation and control tokens). Return non-zero to stop
 * (NTX_FINISH_STOPPED; the token counts as generated). */
typedef int (*ntx_token_fn)(void *user, int32_t id, const char *piece, size_t len);

/* Evaluate prompt[0..n_prompt) in sequence seq (0 .. n_seq-1; its previous
 * contents are dropped) and generate with p (NULL: defaults), calling on_token
 * (may be NULL) for each token. *res (may be NULL; res->size set) says how it
 * ended. NTX_STATUS_BUSY while batch requests are active. One thread. */
enum ntx_status ntx_ctx_generate(struct ntx_ctx *ctx, int seq, const int32_t *prompt,
				 int n_prompt, const struct ntx_gen_params *p,
				 ntx_token_fn on_token, void *user, struct ntx_gen_result *res,
				 struct ntx_error *err);

/* ---- batch requests: continuous batching over the context's sequences ---- */

/* When a request ends (exactly once for each submitted one): r is borrowed
 * for the call; gen[0..r->n_gen) its tokens. It may call ntx_ctx_submit. */
typedef void (*ntx_done_fn)(void *user, int64_t id, const struct ntx_gen_result *r,
			    const int32_t *gen);

struct ntx_request {
	size_t size;                      /* sizeof(struct ntx_request) */
	const int32_t *prompt;            /* copied; 1 .. n_ctx tokens */
	int n_prompt;
	const struct ntx_gen_params *gen; /* NULL: defaults */
	ntx_token_fn on_token;            /* may be NULL */
	ntx_done_fn on_done;              /* may be NULL */
	void *user;
};
void ntx_request_init(struct ntx_request *r);

/* Start a request in a free sequence; *id (may be NULL) receives its id
 * (>= 0, never reused). A sequence that cached the longest prefix of the
 * prompt is chosen and that prefix is not evaluated again.
 * NTX_STATUS_NOFIT when every sequence is busy. One thread. */
enum ntx_status ntx_ctx_submit(struct ntx_ctx *ctx, const struct ntx_request *r, int64_t *id,
			       struct ntx_error *err);
/* One step: the next token of every decoding request and the next piece of
 * every waiting prompt, in one engine pass; callbacks run inside. *n_active
 * (may be NULL): requests still active after it (0: all done). One thread. */
enum ntx_status ntx_ctx_step(struct ntx_ctx *ctx, int *n_active, struct ntx_error *err);
/* End request id now (on_done runs with NTX_FINISH_STOPPED).
 * NTX_STATUS_INVALID when id is not active. One thread. */
enum ntx_status ntx_ctx_cancel(struct ntx_ctx *ctx, int64_t id, struct ntx_error *err);

/* ---- chat prompts (0.3) ---- */

enum {
	NTX_CHAT_ADD_ASSISTANT = 1, /* end with the assistant's open turn: a prompt
				     * to generate the answer from */
	NTX_CHAT_ANY_TEMPLATE = 2   /* a model without a template, or with one not
				     * recognised, gets llama3 when its vocabulary
				     * has <|start_header_id|>, else llama2-sys */
};

/* The format a chat template is recognised as: tmpl is a format's name
 * ("llama3", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip",
 * "chatml", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
 * "zephyr", "vicuna", "vicuna-orca") or a Jinja text, which is inspected,
 * never run (llama.cpp's built-in formats). *name: the format's name
 * (static). NTX_STATUS_UNSUPPORTED for any other template; the message
 * lists the names. Any thread. */
enum ntx_status ntx_chat_template_name(const char *tmpl, const char **name,
				       struct ntx_error *err);

/* The format of the model's own template (tokenizer.chat_template), as
 * ntx_chat_template_name; NTX_STATUS_UNSUPPORTED when it has none or an
 * unknown one. Any thread. */
enum ntx_status ntx_lm_chat_template(const struct ntx_lm *lm, const char **name,
				     struct ntx_error *err);

/* The prompt text of the chat roles[i], contents[i] (i < n; roles "system",
 * "user", "assistant"; n >= 0) in the format of tmpl (a name or a Jinja text
 * as above; NULL: the model's), with NTX_CHAT_* flags. Tokenize it with
 * NTX_TOKENIZE_ADD_BOS | NTX_TOKENIZE_SPECIAL (the text has no BOS and holds
 * the format's control tokens). *prompt: NUL-terminated, freed with
 * ntx_free(). Arrays and strings are read during the call only. Any
 * thread. */
enum ntx_status ntx_lm_chat_apply(const struct ntx_lm *lm, const char *tmpl,
				  const char *const *roles, const char *const *contents, int n,
				  unsigned flags, char **prompt, struct ntx_error *err);

/* ---- streaming text: whole characters as tokens come (0.3) ---- */

/* Generated tokens in, text out as it becomes printable: the bytes of a
 * UTF-8 character split across tokens are held until it is complete (or
 * proven invalid). Over a whole stream the text is the tokens' pieces
 * concatenated (ntx_lm_piece), no clean-up pass. One thread per
 * detokenizer; the model is borrowed and must outlive it. */
struct ntx_detokenizer;

enum {
	NTX_DETOKENIZER_REPLACE_INVALID = 1, /* each byte that is not part of valid
					      * UTF-8 becomes U+FFFD: the text is
					      * always valid UTF-8 (JSON) */
	NTX_DETOKENIZER_SPECIAL = 2          /* control tokens give their text */
};

enum ntx_status ntx_detokenizer_new(const struct ntx_lm *lm, unsigned flags,
				    struct ntx_detokenizer **out, struct ntx_error *err);
void ntx_detokenizer_free(struct ntx_detokenizer *d);
/* Add token id: *text, *len the bytes ready now (*len may be 0; borrowed
 * from d until its next call). NTX_STATUS_INVALID for an id out of range. */
enum ntx_status ntx_detokenizer_push(struct ntx_detokenizer *d, int32_t id, const char **text,
				     size_t *len, struct ntx_error *err);
/* The end of a stream: the bytes still held (as push gives them); d starts
 * a new stream after it. */
void ntx_detokenizer_flush(struct ntx_detokenizer *d, const char **text, size_t *len);

/* ---- request options (0.3) ---- */

/* Set one sampling option of *p from its text, by the option's llama.cpp
 * name (as every tool spells it, without "--"): "temp" [0, 100], "top-k"
 * [0, 2^30], "top-p" [0, 1], "min-p" [0, 1], "repeat-penalty" (0, 100],
 * "repeat-last-n" [-1, 2^30], "seed" [0, 2^63). NTX_STATUS_INVALID with a
 * message naming the value and the limit (not the option), or naming an
 * unknown option. Any thread. */
enum ntx_status ntx_gen_params_parse(struct ntx_gen_params *p, const char *name,
				     const char *value, struct ntx_error *err);

/* A short name for a finish reason ("eog", "length", "context", "stopped",
 * "interrupted"; static; "unknown" otherwise). Any thread. */
const char *ntx_finish_name(enum ntx_finish f);

/* ---- speculative decoding (0.3) ---- */

/* The longest draft a step may verify. */
#define NTX_DRAFT_K_MAX 64

struct ntx_spec_params {
	size_t size;                /* sizeof(struct ntx_spec_params) */
	const struct ntx_lm *draft; /* a draft model of the same vocabulary
				     * (borrowed: it must outlive the context);
				     * NULL: none */
	int lookup;                 /* prompt lookup: drafts from earlier n-grams
				     * of up to this many tokens (0: off; 1..16),
				     * tried before the draft model */
	int draft_k;                /* tokens drafted per step, 1..NTX_DRAFT_K_MAX;
				     * 0: adaptive (from measured acceptance and
				     * costs, starting at 4) */
	/* 0.5: self-speculation (ntx_ctx_generate only; not with a draft
	 * model): the draft is the target with layers skipped */
	int self_spec;
	const int *self_skip;       /* the layers the draft skips (read during
				     * the call) */
	int n_self_skip;            /* < 0 (default): every layer the context's
				     * placement does not keep in VRAM */
};
void ntx_spec_params_init(struct ntx_spec_params *p);

/* Can draft draft for lm? The same tokens (count, text, type), the same
 * BOS, EOS, EOT, EOM and unknown ids and the same add-BOS rule;
 * NTX_STATUS_MISMATCH with a message naming the first difference. Cheap:
 * check before making a context. Any thread. */
enum ntx_status ntx_lm_check_draft(const struct ntx_lm *lm, const struct ntx_lm *draft,
				   struct ntx_error *err);

/* Decode speculatively from now on: each step drafts up to K tokens (a
 * lookup match first, else the draft model) and verifies them in one pass
 * of the target. Greedy output is unchanged; sampled output keeps the
 * target's distribution. A draft model gets its own engine, resident on the
 * context's backend, with the context's n_ctx, n_seq, threads and cache
 * type. p NULL, or no draft, lookup 0 and self_spec 0: speculative
 * decoding off (the draft engine is freed). Applies to ntx_ctx_generate
 * and batch requests (self-speculation: ntx_ctx_generate only, 0.5);
 * NTX_STATUS_BUSY while batch requests are active. One thread. */
enum ntx_status ntx_ctx_set_spec(struct ntx_ctx *ctx, const struct ntx_spec_params *p,
				 struct ntx_error *err);

/* ---- statistics ---- */

struct ntx_ctx_stats {
	size_t size;              /* sizeof(struct ntx_ctx_stats) */
	enum ntx_backend_choice backend; /* the backend in use (never AUTO) */
	int n_ctx, n_seq;
	int64_t n_eval_calls;     /* engine passes */
	int64_t n_tokens;         /* tokens evaluated */
	double t_eval_ms;
	int64_t n_requests;       /* batch requests admitted */
	int64_t n_prompt_reused;  /* batch prompt tokens taken from the cache */
	int64_t n_batch_gen;      /* tokens generated by batch requests */
	/* 0.3: */
	int64_t n_batch_prompt;   /* prompt tokens of the batch requests admitted
				   * (n_prompt_reused of them from the cache) */
	int64_t n_drafted;        /* speculative decoding: tokens drafted */
	int64_t n_accepted;       /* of which the target accepted */
	/* 0.5: streaming, for placements with layers outside VRAM (0 when
	 * every layer is resident) */
	uint64_t bytes_h2d;         /* weights copied to the GPU */
	uint64_t bytes_disk;        /* weights read from the pack or the GGUF */
	uint64_t bytes_cpu_weights; /* weights of layers computed on the CPU (of a
				     * mixture-of-experts layer: the experts that ran) */
	double t_h2d_ms, t_disk_ms; /* copying them, reading them */
	double t_cpu_ms;            /* computing the CPU's layers */
	double t_gpu_wait_ms;       /* the GPU waiting for streamed weights */
	double t_cpu_wait_ms;       /* the CPU waiting for its layers' weights */
	/* 0.5: the batch requests' speculative decoding (ntx-run --batch):
	 * verification steps, draft model evaluations, milliseconds drafting
	 * and verifying */
	int64_t n_batch_verify_steps, n_batch_draft_evals;
	double t_batch_draft_ms, t_batch_verify_ms;
	/* after 0.5: mixture of experts on disk, the expert cache (experts
	 * found there, experts read from the pack; bytes_disk holds their
	 * bytes); 0 without such layers */
	uint64_t expert_cache_hits, expert_cache_misses;
};
/* Cumulative since ntx_ctx_new. One thread. */
enum ntx_status ntx_ctx_stats(const struct ntx_ctx *ctx, struct ntx_ctx_stats *st,
			      struct ntx_error *err);

/* ---- values: the one parser of numbers and sizes (the tools' options) ---- */

/* Each parses all of s (no sign for sizes, no trailing garbage, no overflow)
 * or returns NTX_STATUS_INVALID with a message naming the value and the
 * limit ("0 is out of range [1, 1024]"), without the option's name. Any
 * thread. */
/* A byte size: a number with an optional binary suffix K, M, G, T (KiB,
 * KB, ... all powers of 1024; case-insensitive) or B; fractions with a
 * suffix ("1.5G"). */
enum ntx_status ntx_arg_size(const char *s, uint64_t *out, struct ntx_error *err);
/* A memory or disk budget: a size, at most 1 PiB. */
enum ntx_status ntx_arg_budget(const char *s, int64_t *out, struct ntx_error *err);
/* A decimal integer in [min, max]. */
enum ntx_status ntx_arg_int(const char *s, int min, int max, int *out, struct ntx_error *err);
/* A finite number in [min, max]. */
enum ntx_status ntx_arg_double(const char *s, double min, double max, double *out,
			       struct ntx_error *err);
/* bytes for people ("23.5 GiB") into buf[0..len); returns buf. Any thread. */
const char *ntx_size_format(uint64_t bytes, char *buf, size_t len);

/* ---- output files: replaced only when complete ---- */

/* A file written under a temporary name ("PATH.PID.tmp" beside it) and
 * renamed over PATH by ntx_output_commit, so a failed or interrupted write
 * leaves an existing PATH as it was. Devices, FIFOs and other non-regular
 * files are written in place; "-" writes the process's standard output
 * (flushed, never closed). One thread per output. */
struct ntx_output;

/* Open (create the temporary now: an unwritable directory fails here,
 * before any work). Messages name path. */
enum ntx_status ntx_output_open(const char *path, struct ntx_output **out,
				struct ntx_error *err);
enum ntx_status ntx_output_write(struct ntx_output *o, const void *data, size_t len,
				 struct ntx_error *err);
/* Flush, close and rename into place; frees o either way (on failure the
 * temporary is removed and the destination untouched). */
enum ntx_status ntx_output_commit(struct ntx_output *o, struct ntx_error *err);
/* Give up: close, remove the temporary, free o. NULL ok. */
void ntx_output_abort(struct ntx_output *o);

/* ---- inspect: what is in a GGUF or pack file (ntx-inspect) ---- */

enum {
	NTX_INSPECT_ALL_ELEMENTS = 1, /* every array element (longer arrays are
				       * otherwise summarised by type, count and
				       * the first elements); a pack's frame tables */
	NTX_INSPECT_SUMMARY = 2       /* a summary for people instead of JSON */
};

/* The "ntx.inspect" document (doc/inspect-json.md; a pack file, ntx-pack's,
 * gives "kind": "pack", doc/pack-format.md) of the file at path or, with buf
 * non-NULL, of the len bytes of buf (path is then only recorded in the
 * document). *text: the JSON (indented, trailing newline) or, with
 * NTX_INSPECT_SUMMARY, lines for people; NUL-terminated, freed with
 * ntx_free(). The message of a failure does not name the file: the caller
 * prefixes the name it shows. Any thread. */
enum ntx_status ntx_inspect(const char *path, const void *buf, size_t len, unsigned flags,
			    char **text, struct ntx_error *err);

/* ---- calibration: layer-skip sets (ntx-skip-calib) ---- */

/* After each chunk of each pass: stage ("calibration", "eval full model",
 * "eval calibrated 2", ...; borrowed for the call), chunk of n_chunks, the
 * running perplexity. Runs in the calling thread. */
typedef void (*ntx_calib_progress_fn)(void *user, const char *stage, int chunk, int n_chunks,
				      double ppl);
/* One line worth showing a person (a warning, what was detected), without
 * a program name or newline; borrowed for the call. */
typedef void (*ntx_note_fn)(void *user, const char *line);

struct ntx_calib_params {
	size_t size;                /* sizeof(struct ntx_calib_params) */
	const int *counts;          /* set sizes, each 1..1024, at most 64 of them
				     * (read during the call); NULL: 1, 2, 4, 6 */
	int n_counts;
	int use_threshold;          /* also the set of layers whose mean cosine
				     * >= threshold (it becomes the "skip" set) */
	double threshold;           /* [-1, 1] */
	int n_ctx;                  /* chunk size in tokens, 8..2^20 (default 512;
				     * a shorter calibration text: one chunk) */
	int allow_ends;             /* the first and last layers may be skipped */
	int naive;                  /* also the last-N-layers set of each size */
	enum ntx_backend_choice backend;
	int n_threads;              /* 0: every core */
	const char *calib_text;     /* the calibration text (any bytes; required) */
	size_t calib_len;
	const char *calib_name;     /* its name in the document and messages;
				     * NULL or "-": "-" and "stdin" */
	const char *eval_text;      /* held-out text; NULL: sets are not measured */
	size_t eval_len;
	const char *eval_name;      /* its name (NULL: "-") */
	ntx_calib_progress_fn progress; /* may be NULL */
	ntx_note_fn note;           /* may be NULL: the engine fell back to the CPU */
	void *user;                 /* for progress and note */
	/* set non-zero (from any thread or a signal handler) to stop:
	 * NTX_STATUS_INTERRUPTED. NULL: none. */
	volatile int *cancel;
};
void ntx_calib_params_init(struct ntx_calib_params *p);

/* Rank lm's layers by the cosine similarity of each layer's input and
 * output over the calibration text, build skip sets (by count, threshold,
 * naive baseline) and, with a held-out text, measure each (perplexity, KL
 * divergence from the full model, top-1 agreement). pl (may be NULL) places
 * the layers; layers it skips are always skipped and never candidates.
 * *json: the "ntx.skip" document (doc/skip-calib.md; indented, trailing
 * newline, NUL-terminated), freed with ntx_free(). Any thread (it makes and
 * frees its own engine). */
enum ntx_status ntx_calibrate(const struct ntx_lm *lm, const struct ntx_placement *pl,
			      const struct ntx_calib_params *p, char **json,
			      struct ntx_error *err);

/* ---- plans: placements from parameters (ntx-plan) ---- */

/* What the planner needs to know about a model (layer sizes, shapes,
 * fingerprint), from a GGUF file or from ntx-inspect's JSON: enough to plan
 * a model that is not on this machine. Immutable once made: any thread. */
struct ntx_model_desc;

/* From the file at path: a GGUF (by its magic; opened and closed again) or
 * an "ntx.inspect" document. Messages name path. Any thread. */
enum ntx_status ntx_model_desc_open(const char *path, struct ntx_model_desc **out,
				    struct ntx_error *err);
/* From the text of an "ntx.inspect" document (text[0..len), not
 * NUL-terminated; name is used in messages, NULL: "<stdin>"); what is not
 * JSON gives NTX_STATUS_INVALID ("not a GGUF file or inspect JSON").
 * Any thread. */
enum ntx_status ntx_model_desc_from_text(const char *text, size_t len, const char *name,
					 struct ntx_model_desc **out, struct ntx_error *err);
void ntx_model_desc_free(struct ntx_model_desc *d);

/* The layers of a skip argument for d's model: a layer list ("3,5,10-12")
 * or the path of an "ntx.skip" document (ntx-skip-calib), whose "skip"
 * array is the set or, with set_index >= 0, its "sets"[set_index]; a
 * document naming another model's fingerprint is refused. *layers: sorted,
 * unique, *n of them, freed with ntx_free(). NTX_STATUS_INVALID: arg is
 * malformed or out of range (the caller's usage error); other statuses for
 * a file that cannot be read. Any thread. */
enum ntx_status ntx_model_desc_skip(const struct ntx_model_desc *d, const char *arg,
				    int set_index, int **layers, int *n, struct ntx_error *err);

/* Where the layers that are not resident in VRAM are computed. */
enum ntx_executor_policy {
	NTX_EXECUTOR_AUTO = 0, /* per layer, the faster */
	NTX_EXECUTOR_GPU = 1,  /* stream every one to the GPU */
	NTX_EXECUTOR_CPU = 2   /* compute every one on the CPU */
};

/* Which notes ntx_placement_plan gives (ntx_note_fn, calibration section). */
enum {
	NTX_NOTE_WARNINGS = 1, /* "warning: GPU 1 not found (1 device); ..." */
	NTX_NOTE_DETECTED = 2  /* "GPU: ...", "RAM available: ...", the probed rates */
};

struct ntx_planner_params {
	size_t size;             /* sizeof(struct ntx_planner_params) */
	int64_t vram_budget;     /* bytes, margin included; -1: free VRAM (default); 0: no GPU */
	int64_t ram_budget;      /* -1: MemAvailable - 2 GiB (default) */
	int64_t disk_budget;     /* -1: free space where the pack goes (default) */
	int64_t reserve;         /* VRAM safety margin; -1: 512 MiB (default) */
	int gpu_index;
	const char *pack_path;   /* the pack of disk layers; NULL: MODEL.ntxp */
	int n_ctx;               /* 0: min(n_ctx_train, 4096) */
	enum ntx_kv_cache kv_type;  /* NTX_KV_CACHE_DEFAULT: f16 */
	int n_seq;               /* sequences decoded together; 0: 1 */
	int n_ubatch;            /* tokens per step; 0: 512 */
	int ring_slots;          /* device buffers for streamed layers, 2..64;
				  * 0: 3 or 2, the faster plan */
	/* bandwidths in GB/s; 0: measured with probe, else the defaults */
	double h2d_gbps, disk_gbps, cpu_gbps, cpu_batch_gbps, gpu_gbps;
	int probe;               /* measure H2D, disk and CPU rates now (seconds) */
	enum ntx_executor_policy executor;
	const int *skip;         /* layers removed (ntx_model_desc_skip); read
				  * during the call */
	int n_skip;
	const char *scores_path; /* an "ntx.skip" document: its per-layer
				  * cos_mean (lower = more important) picks the
				  * resident layers; NULL: none */
	const char *draft_path;  /* a draft model (GGUF) kept resident for
				  * speculative decoding; NULL: none */
	int draft_k;             /* draft length, 1..64; 0: the best predicted */
	double draft_accept;     /* assumed acceptance; 0: 0.7 */
	unsigned notes;          /* NTX_NOTE_* (default NTX_NOTE_WARNINGS) */
	ntx_note_fn note;        /* may be NULL */
	void *user;              /* for note */
	int probe_cache;         /* 1 (default): without probe, use the rates an
				  * earlier probe on this machine stored in the
				  * probe cache; with probe, store them there
				  * (doc/plan-json.md); 0: neither. NTX_PROBE_CACHE=0
				  * turns it off for every call */
	const char *expert_stats_path; /* mixture of experts: routing counts
				  * (ntx_ctx_expert_stats, ntx-run --expert-stats):
				  * the most chosen experts stay in VRAM; NULL:
				  * every expert as likely as any */
	int vram_experts;        /* mixture of experts: experts of each layer kept
				  * in VRAM, the rest in RAM computed by the CPU
				  * while the GPU runs the layer's other parts;
				  * -1 (default): the planner decides (this split
				  * when it is faster than whole layers off the
				  * GPU); 0: every expert on the CPU */
};
void ntx_planner_params_init(struct ntx_planner_params *p);

/* Plan d's layers (as ntx-plan): detect what p leaves open (the GPU and its
 * PCIe link, RAM, cores, free disk where the pack goes), probe when asked
 * (else take the probe cache's rates), then place.
 * NTX_STATUS_NOFIT: valid input that fits nowhere (the message says what is
 * short and by how much); NTX_STATUS_MISMATCH: a draft with another
 * vocabulary; NTX_STATUS_INVALID: bad parameters or scores. Notes run in
 * the calling thread, before it returns. Any thread. */
enum ntx_status ntx_placement_plan(const struct ntx_model_desc *d,
				   const struct ntx_planner_params *p,
				   struct ntx_placement **out, struct ntx_error *err);

/* Read a plan file ("-": standard input) and validate it, re-accounting its
 * reserves and estimate from its layers (ntx-plan --check); no model is
 * needed (ntx_placement_check is the model's half). Relative paths in it
 * are resolved against its directory. Messages name the file. Any thread. */
enum ntx_status ntx_placement_read(const char *path, struct ntx_placement **out,
				   struct ntx_error *err);
/* NTX_STATUS_MISMATCH unless pl was made for lm (fingerprint, layers); the
 * message names neither. Any thread. */
enum ntx_status ntx_placement_check(const struct ntx_placement *pl, const struct ntx_lm *lm,
				    struct ntx_error *err);
/* Before writing pl's JSON to out_path (NULL or "-": standard output):
 * relative model and pack paths stay as given when out_path is in the
 * current directory or standard output, else they become absolute. Changes
 * pl: one thread, no other call on pl meanwhile. */
enum ntx_status ntx_placement_rebase(struct ntx_placement *pl, const char *out_path,
				     struct ntx_error *err);
/* A summary of pl for people (ntx-plan --explain): lines ending in '\n',
 * NUL-terminated, freed with ntx_free(). Any thread. */
enum ntx_status ntx_placement_explain(const struct ntx_placement *pl, char **text,
				      struct ntx_error *err);
/* The pack file pl reads its disk layers from (borrowed from pl); NULL when
 * no layer is on disk. Any thread. */
const char *ntx_placement_pack_path(const struct ntx_placement *pl);

/* ---- packs: the file of streamed layers (ntx-pack) ---- */

#define NTX_PACKFILE_ALIGN 4096u             /* extent alignment; frame sizes are multiples */
#define NTX_PACKFILE_FRAME_MAX (256u << 20)  /* the largest frame size */

enum ntx_packfile_compression { NTX_COMPRESS_NONE = 0, NTX_COMPRESS_ZSTD = 1 };

/* Raw bytes done of total (written: raw layer bytes; verified: stored
 * bytes read). Runs in the calling thread. */
typedef void (*ntx_packfile_progress_fn)(void *user, uint64_t done, uint64_t total);

struct ntx_packfile_params {
	size_t size;          /* sizeof(struct ntx_packfile_params) */
	enum ntx_packfile_compression compression; /* default NONE */
	int level;            /* zstd level, -7..22 (default 1) */
	double min_saving;    /* zstd: a frame stays compressed only when that saves
			       * at least this fraction of it, 0..1 (default 0) */
	int split;            /* zstd: byte planes of F16/BF16/F32 first (default 1) */
	int n_threads;        /* 0: every core (writing), 4 (verifying) */
	uint32_t frame_size;  /* raw bytes per frame, a multiple of
			       * NTX_PACKFILE_ALIGN up to NTX_PACKFILE_FRAME_MAX;
			       * 0: 4 MiB */
	ntx_packfile_progress_fn progress; /* may be NULL */
	void *user;           /* for progress */
	/* set non-zero (from any thread or a signal handler) to stop:
	 * NTX_STATUS_INTERRUPTED. NULL: none. */
	volatile int *cancel;
};
void ntx_packfile_params_init(struct ntx_packfile_params *p);

struct ntx_packfile_stats {
	size_t size;          /* sizeof(struct ntx_packfile_stats) */
	int n_extents;        /* layers in the pack */
	int n_compressed;     /* extents stored with zstd */
	uint64_t raw_bytes;   /* the layers' bytes */
	uint64_t stored_bytes;/* the extents' bytes in the file, padding included */
	uint64_t file_size;
	double seconds;
};

/* Does the file at path begin with the pack magic? 0 when it cannot be
 * read. Any thread. */
int ntx_packfile_detect(const char *path);

/* MODEL.gguf -> MODEL.ntxp, the pack path a plan gets by default; *path is
 * freed with ntx_free(). Any thread. */
enum ntx_status ntx_packfile_default_path(const char *model_path, char **path,
					  struct ntx_error *err);

/* Write the pack of lm's layers that pl puts on disk (pl NULL: every layer)
 * to path (doc/pack-format.md): under a temporary name beside it, synced
 * and renamed over path when complete, so a failure or cancel leaves path
 * as it was. Refuses a path that exists and is not a regular file, and the
 * model file itself. *st (may be NULL; st->size set) receives the numbers.
 * The message does not name path: the caller prefixes it. Any thread. */
enum ntx_status ntx_packfile_write(const struct ntx_lm *lm, const struct ntx_placement *pl,
				   const char *path, const struct ntx_packfile_params *p,
				   struct ntx_packfile_stats *st, struct ntx_error *err);

/* An open pack file (its header and directory validated). One thread per
 * handle. */
struct ntx_packfile;

/* The message does not name path: the caller prefixes it. */
enum ntx_status ntx_packfile_open(const char *path, struct ntx_packfile **out,
				  struct ntx_error *err);
void ntx_packfile_close(struct ntx_packfile *pf);
/* NTX_STATUS_MISMATCH unless pf serves pl: the same model and every layer
 * pl puts on disk in it. */
enum ntx_status ntx_packfile_check(const struct ntx_packfile *pf, const struct ntx_placement *pl,
				   struct ntx_error *err);
/* Read every extent back and compare it, byte for byte, with lm's layer
 * (p: n_threads and progress; NULL: defaults; cancel is not watched). NTX_STATUS_MISMATCH
 * for another model, NTX_STATUS_FORMAT for the first difference or corrupt
 * extent. *st (may be NULL) receives the pack's numbers. */
enum ntx_status ntx_packfile_verify(struct ntx_packfile *pf, const struct ntx_lm *lm,
				    const struct ntx_packfile_params *p,
				    struct ntx_packfile_stats *st, struct ntx_error *err);

/* ---- ntx-run's calls (0.4) ---- */

/* ntx_lm_open for tokenizing only: a GGUF without tensors (a vocabulary-
 * only file) is accepted too; such an lm tokenizes, detokenizes and formats
 * chats, and ntx_ctx_new refuses it (NTX_STATUS_INVALID). A file with
 * tensors is checked as ntx_lm_open checks it. */
enum ntx_status ntx_lm_open_vocab(const char *path, struct ntx_lm **out, struct ntx_error *err);

/* ---- ntx-run's contexts (0.4) ---- */

/* ntx_ctx_params.io: how layers streamed from the pack or the GGUF are
 * read. */
enum ntx_io_mode {
	NTX_IO_MODE_DIRECT = 0, /* direct reads into pinned buffers (default) */
	NTX_IO_MODE_MMAP = 1    /* through the file's map (a baseline) */
};

/* Is CUDA device index usable? 1 yes; 0 no, with the reason in
 * why[0..len) ("this build has no CUDA support", ...; may be NULL). Any
 * thread. */
int ntx_gpu_check(int index, char *why, size_t len);

/* Why a context made with NTX_USE_AUTO runs on the CPU although a GPU was
 * looked for (borrowed from ctx); NULL when it did not fall back. One
 * thread. */
const char *ntx_ctx_fallback_note(const struct ntx_ctx *ctx);

struct ntx_perplexity_result {
	size_t size;           /* sizeof(struct ntx_perplexity_result) */
	double ppl, ppl_err;   /* perplexity and its standard error */
	double nll;            /* mean negative log-likelihood */
	int n_chunks, n_scored;/* chunks evaluated, tokens scored */
};

/* After each chunk: chunk of n_chunks, the running perplexity. Runs in the
 * calling thread. */
typedef void (*ntx_perplexity_fn)(void *user, int chunk, int n_chunks, double ppl);

/* llama-perplexity's method over ids[0..n): n / n_chunk chunks of n_chunk
 * tokens (4..n_ctx), each evaluated from an empty cache with BOS first,
 * the second half of each scored. progress may be NULL. *res (res->size
 * set). NTX_STATUS_INVALID when n < n_chunk; NTX_STATUS_BUSY while batch
 * requests are active; NTX_STATUS_INTERRUPTED after ntx_ctx_interrupt.
 * Overwrites sequence 0. One thread. */
enum ntx_status ntx_ctx_perplexity(struct ntx_ctx *ctx, const int32_t *ids, int n, int n_chunk,
				   ntx_perplexity_fn progress, void *user,
				   struct ntx_perplexity_result *res, struct ntx_error *err);

/* A list of token ids separated by spaces, commas or newlines ("1 403
 * 407"), each in [0, max]: *ids (freed with ntx_free; NULL when *n is 0),
 * *n of them. NTX_STATUS_INVALID with a message naming the value and the
 * limit. Any thread. */
enum ntx_status ntx_arg_ids(const char *s, int32_t max, int32_t **ids, int *n,
			    struct ntx_error *err);
/* A layer set ("3,5,10-12"), each layer below n_layer: *layers sorted and
 * unique (freed with ntx_free), *n of them. NTX_STATUS_INVALID as
 * ntx_arg_ids. Any thread. */
enum ntx_status ntx_arg_layers(const char *s, int n_layer, int **layers, int *n,
			       struct ntx_error *err);

/* ---- 0.5: generate details (ntx-run) ---- */

/* What a program that inspects generation needs (ntx-run's generate
 * mode: teacher forcing, --dump-logits, --self-spec, its statistics). The
 * fields that carry it were appended to the structs above:
 *   ntx_gen_params  force, n_force, on_logits, logits_user
 *   ntx_gen_result  the speculative counters and times
 *   ntx_spec_params self_spec, self_skip, n_self_skip
 *   ntx_ctx_stats   the streaming counters (bytes_*, t_*_ms)
 *
 * Teacher forcing: each generated token is the next of force[] instead of
 * a sampled one; end-of-generation tokens do not stop it, it ends after
 * the last (NTX_FINISH_LENGTH; n_force 0: right after the prompt), and the
 * token callback sees the forced tokens. Speculative decoding is not used
 * while forcing.
 *
 * The logits sink (ntx_gen_params.on_logits): called in the calling
 * thread with the logits (n_vocab floats, borrowed for the call) of each
 * evaluated position in order: every prompt token, then every generated
 * token (the last one is evaluated too, for its row), so n_prompt + n_gen
 * rows. Return 0 to go on, or an errno value: generation ends,
 * ntx_ctx_generate fails with NTX_STATUS_IO and "writing logits: " and
 * that value's text. Refused (NTX_STATUS_INVALID) with speculative
 * decoding on.
 *
 * Self-speculation (ntx_spec_params.self_spec, ntx_ctx_set_spec): drafts
 * come from the target itself with the layers self_skip names skipped or,
 * with n_self_skip < 0, every layer the context's placement keeps outside
 * VRAM; the context's own skipped layers are skipped too. Greedy output is
 * that of plain decoding. NTX_STATUS_INVALID: with a draft model, a layer
 * out of range, no placement to take the layers from, or a draft that
 * would skip every layer. While it is on, ntx_ctx_submit refuses requests
 * (NTX_STATUS_UNSUPPORTED). */
typedef int (*ntx_logits_fn)(void *user, const float *logits, int32_t n_vocab);

/* ---- 0.5: batch requests and bench (ntx-run) ---- */

/* What ntx-run --batch and --bench need: the calls below and, appended to
 * ntx_ctx_stats after the streaming counters, the batch requests'
 * speculative decoding (n_batch_verify_steps, n_batch_draft_evals,
 * t_batch_draft_ms, t_batch_verify_ms). */

/* One request line of ntx-run --batch (JSON Lines, doc/batch-jsonl.md),
 * parsed: the prompt or the chat messages, the chat switch, the system
 * message and the sampling fields over the caller's defaults. Nothing is
 * tokenized (no model is needed). Immutable once made: any thread; what
 * ntx_request_json_info points to is borrowed from it until
 * ntx_request_json_free. */
struct ntx_request_json;

struct ntx_request_json_info {
	size_t size;                 /* sizeof(struct ntx_request_json_info) */
	const char *prompt;          /* "prompt" (no NUL inside); NULL with messages */
	int n_messages;              /* "messages", in order; 0 without */
	const char *const *roles;    /* [n_messages]: "system", "user", "assistant" */
	const char *const *contents; /* [n_messages], no NUL inside */
	const char *system;          /* "system", else the default; NULL: none */
	int chat;                    /* apply the chat template: "chat", else the
				      * default; always with messages */
};

/* Parse line[0..len) (one line without its newline) over the defaults: gen
 * (the sampling fields and n_predict, as the command line set them; NULL:
 * ntx_gen_params_init's) and def (its chat and system; the other fields are
 * ignored; NULL: no chat, no system message); both are read during the
 * call. On success *out, freed with ntx_request_json_free. NTX_STATUS_INVALID
 * with the message of the request's error record (missing "prompt",
 * "top_p" must be a number in [0, 1], ...: doc/batch-jsonl.md); *out is
 * then NULL. id (may be NULL): *id is the request's "id" as compact JSON
 * text (7, "q7", {"a":[1]}), set whenever the line is an object
 * with an "id", on failure too, else NULL; freed with ntx_free(). Any
 * thread. */
enum ntx_status ntx_request_parse_json(const char *line, size_t len,
				       const struct ntx_gen_params *gen,
				       const struct ntx_request_json_info *def,
				       struct ntx_request_json **out, char **id,
				       struct ntx_error *err);
/* The request's fields: *info (info->size set; strings and arrays borrowed
 * from r) and, when gen is not NULL, *gen (gen->size set): the defaults
 * with the request's sampling fields and n_predict. Any thread. */
enum ntx_status ntx_request_json_info(const struct ntx_request_json *r,
				      struct ntx_request_json_info *info,
				      struct ntx_gen_params *gen, struct ntx_error *err);
void ntx_request_json_free(struct ntx_request_json *r);

/* End every active batch request now, oldest first: on_done runs for each,
 * in the calling thread, with finish (NTX_FINISH_STOPPED or
 * NTX_FINISH_INTERRUPTED: a caller that stops for an interrupt says so).
 * Nothing to do when none is active. NTX_STATUS_INVALID for another finish.
 * One thread (not from an on_done). */
enum ntx_status ntx_ctx_cancel_all(struct ntx_ctx *ctx, enum ntx_finish finish,
				   struct ntx_error *err);

struct ntx_bench_params {
	size_t size;      /* sizeof(struct ntx_bench_params) */
	int n_prompt;     /* the pp test: tokens evaluated as one prompt batch,
			   * 0..2^20 (default 512; 0: no pp test) */
	int n_gen;        /* the tg test: tokens generated one at a time,
			   * 0..2^20 (default 128; 0: no tg test) */
	int repetitions;  /* timed runs of each test after a warm-up, 1..1000
			   * (default 3); the verification curve times three
			   * times as many passes of each width (3..31) */
};
void ntx_bench_params_init(struct ntx_bench_params *p);

/* ntx-run --bench (doc/ntx-run.1): llama-bench's pp and tg tests, each
 * repeated, with the mean and standard deviation of tok/s and, for tg on
 * a GPU, the share of the memory-bandwidth roofline; then the
 * verification curve (one target pass of 1, 2, 4, 8 and 16 tokens after a
 * 64-token prompt, the drafted token's cost when ntx_ctx_set_spec gave a
 * draft model, the tok/s projected for acceptance 0.5 .. 0.8). *json: the
 * document, a JSON array of one object per test ("pp512", "tg128",
 * "verify"; indented, trailing newline, NUL-terminated), freed with
 * ntx_free(). The tokens are made up (no tokenizer); greedy tg feeds each
 * argmax back. Overwrites sequence 0 (the batch prefix caches are
 * dropped). NTX_STATUS_INVALID: parameters out of range, a context under
 * 80 positions (the curve's); NTX_STATUS_BUSY while batch requests are
 * active; NTX_STATUS_INTERRUPTED after ntx_ctx_interrupt. One thread. */
enum ntx_status ntx_ctx_bench(struct ntx_ctx *ctx, const struct ntx_bench_params *p,
			      char **json, struct ntx_error *err);

#ifdef __cplusplus
}
#endif

#endif
