/* fileio.h - small file helpers the readers and tools share. */
#ifndef NTX_FILEIO_H
#define NTX_FILEIO_H

#include <stdint.h>

#include "err.h"

/* Open path read-only (close-on-exec) and check that it is a regular file.
 * Returns the descriptor with *size set, or -1 with err set: the strerror
 * text alone (the caller prefixes the path; a directory gives "Is a
 * directory"), or "not a regular file". */
int ntx_open_regular(const char *path, uint64_t *size, struct ntx_err *err);

/* A tool's last step: close stdout, checked (a full disk or a closed pipe
 * must not exit 0). Returns rc, or 1 after "prog: standard output: why" on
 * stderr when rc is 0 and the close failed. */
int ntx_close_stdout(const char *prog, int rc);

#endif
