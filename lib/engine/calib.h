/* calib.h - layer-skip calibration (ntx-skip-calib, ntx_calibrate in
 * ntx.h): rank the layers by the cosine similarity of the hidden state
 * entering and leaving each, build skip sets by count and by threshold, and
 * measure each set on held-out text (PPL, KL divergence, top-1 agreement).
 * The result is the "ntx.skip" document (doc/skip-calib.md). */
#ifndef NTX_CALIB_H
#define NTX_CALIB_H

#include <jansson.h>
#include <signal.h>
#include <stddef.h>

#include "engine.h"
#include "err.h"
#include "model.h"
#include "plan.h"
#include "tokenizer.h"

#define NTX_CALIB_MAX_SETS 64     /* sizes in counts */
#define NTX_CALIB_MAX_COUNT 1024  /* a set's size */
#define NTX_CALIB_MIN_TOKENS 16   /* fewer calibration tokens say nothing */
#define NTX_CALIB_DEFAULT_CTX 512

struct ntx_calib_opts {
	const int *counts;       /* set sizes, each 1..NTX_CALIB_MAX_COUNT; NULL: 1,2,4,6 */
	int n_counts;            /* at most NTX_CALIB_MAX_SETS */
	int use_threshold;       /* also the set of layers with mean cosine >= threshold */
	double threshold;
	int n_ctx;               /* chunk size in tokens; 0: 512 */
	int allow_ends;          /* the first and last layers may be skipped */
	int naive;               /* also the last-N-layers set of each size */
	enum ntx_backend backend;
	int n_threads;
	/* the calibration text (required) and the held-out text (NULL: no
	 * evaluation), with the names the document and messages give them
	 * (calib_name NULL or "-": "-" in the document, "stdin" in messages) */
	const char *calib;
	size_t calib_len;
	const char *calib_name;
	const char *eval;
	size_t eval_len;
	const char *eval_name;
	volatile sig_atomic_t *interrupt; /* set asynchronously: stop (NTX_EINTR) */
	/* after each chunk of each pass: what ("calibration", "eval full
	 * model", "eval calibrated 2", ...), chunk of n_chunks, running PPL */
	void (*progress)(void *user, const char *what, int chunk, int n_chunks, double ppl);
	/* a line worth showing (the engine fell back to the CPU) */
	void (*note)(void *user, const char *line);
	void *user;
};

/* Calibrate model m (vocabulary v) placed by plan (NULL: every layer on the
 * backend; layers the plan skips are always skipped and never candidates).
 * Returns the "ntx.skip" document (a new reference), or NULL with err set
 * (NTX_EINTR when interrupted). */
json_t *ntx_calib_run(const struct ntx_model *m, const struct ntx_vocab *v,
		      const struct ntx_plan *plan, const struct ntx_calib_opts *o,
		      struct ntx_err *err);

#endif
