/* fileio.h - small file helpers the readers and tools share. */
#ifndef NTX_FILEIO_H
#define NTX_FILEIO_H

#include <stdint.h>
#include <stdio.h>

#include "err.h"

/* Open path read-only (close-on-exec) and check that it is a regular file.
 * Returns the descriptor with *size set, or -1 with err set: the strerror
 * text alone (the caller prefixes the path; a directory gives "Is a
 * directory"), or "not a regular file". */
int ntx_open_regular(const char *path, uint64_t *size, struct ntx_err *err);

/* Read a whole text file ("-" = stdin) into a NUL-terminated buffer (caller
 * frees); *len excludes the NUL. For plans, inspect and skip JSON (refuses
 * more than 4 GiB). */
char *ntx_read_text_file(const char *path, size_t *len, struct ntx_err *err);

/* ---- output files written through a temporary name ---- */

/* An output file that replaces its destination only when complete: a
 * regular (or new) file is written as "PATH.PID.tmp" beside it and renamed
 * over PATH by ntx_outfile_commit(), so a full disk or an interrupted run
 * leaves an existing PATH as it was. "-" (and NULL) write the stream given
 * as dash (stdout, stderr; with dash NULL, "-" is a file name); devices, FIFOs and other non-regular files are written
 * in place. */
struct ntx_outfile {
	FILE *f;      /* write here */
	char *path;   /* the destination (NULL for dash) */
	char *tmp;    /* the temporary (NULL when written in place) */
	int own;      /* f is ours to close (not dash) */
};

/* Open path for writing with fopen mode ("w", "wb"). Opening creates the
 * temporary, so an unwritable directory fails here, before any work.
 * Returns 0, or -1 with err set (the message names the path). */
int ntx_outfile_open(struct ntx_outfile *o, const char *path, const char *mode, FILE *dash,
		     struct ntx_err *err);

/* Flush, close and rename into place. Returns 0, or -1 with err set naming
 * the file; then the temporary is removed and the destination untouched. */
int ntx_outfile_commit(struct ntx_outfile *o, struct ntx_err *err);

/* Give up: close and remove the temporary. Accepts a zeroed or finished
 * struct (does nothing). */
void ntx_outfile_abort(struct ntx_outfile *o);

#endif
