/* err.h - error reporting for libntx.
 *
 * The library never prints and never exits. Functions that can fail take a
 * struct ntx_err * and, on failure, fill it with a one-line message that names
 * the value and the limit. Tools print it as "prog: context: message". */
#ifndef NTX_ERR_H
#define NTX_ERR_H

#include <stddef.h>

#define NTX_ERR_MAX 512

struct ntx_err {
	int code;              /* 0 = no error; else an NTX_E* value */
	char msg[NTX_ERR_MAX]; /* message, without program name or newline */
};

enum {
	NTX_EOK = 0,
	NTX_EIO = 1,      /* I/O error (errno text appended) */
	NTX_EFORMAT = 2,  /* malformed input file */
	NTX_EUNSUP = 3,   /* valid input we do not support */
	NTX_EINVAL = 4,   /* bad argument */
	NTX_ENOMEM = 5,   /* allocation failed */
	NTX_ENOFIT = 6,   /* valid input with no solution (plan does not fit) */
	NTX_EDEVICE = 7,  /* GPU / CUDA failure */
	NTX_EINTR = 8,    /* interrupted (Ctrl-C) */
	NTX_EMISMATCH = 9 /* files that do not belong together */
};

/* Set *err (may be NULL) to code and a printf-style message. Returns -1 so a
 * caller can write `return ntx_err_set(err, ...)`. */
int ntx_err_set(struct ntx_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like ntx_err_set, appending ": strerror(errnum)". */
int ntx_err_errno(struct ntx_err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefix the existing message with "prefix: " (e.g. a file name). */
void ntx_err_prefix(struct ntx_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Clear an error. */
void ntx_err_clear(struct ntx_err *err);

#endif
