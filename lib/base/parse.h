/* parse.h - validated parsing of numbers and sizes from the command line and
 * from text files. Never atoi: every parser rejects empty input, trailing
 * garbage, overflow and out-of-range values with a message naming the value. */
#ifndef NTX_PARSE_H
#define NTX_PARSE_H

#include <stdint.h>

#include "err.h"

/* Parse a byte size: a non-negative number with an optional binary suffix
 * K, M, G, T (also KiB/MiB/GiB/TiB, KB/MB/GB/TB, case-insensitive, all powers
 * of 1024) or B. Fractions are allowed with a suffix ("1.5G"). "24G" ->
 * 25769803776. Returns 0, or -1 and fills *err. */
int ntx_parse_size(const char *s, uint64_t *out, struct ntx_err *err);

/* Parse a memory or disk budget (--vram-budget, --ram-budget, ...): a size
 * as ntx_parse_size, at most 1 PiB. The one parser every tool uses for its
 * budgets. Returns 0, or -1 and fills *err. */
int ntx_parse_budget(const char *s, int64_t *out, struct ntx_err *err);

/* Parse a decimal integer in [min, max]. Returns 0, or -1 and fills *err. */
int ntx_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out,
		  struct ntx_err *err);

/* Parse an int in [min, max]. */
int ntx_parse_int(const char *s, int min, int max, int *out, struct ntx_err *err);

/* llama.cpp's "-md FILE" (the draft model), which getopt_long reads as -m
 * with the argument "d": call where -m was returned. 0 when the option was a
 * plain -m; 1 with *path = the next argument (optind moves past it); -1 when
 * "-md" is the last argument. */
int ntx_getopt_md(int argc, char *const argv[], const char **path);

/* Parse a finite floating-point number in [min, max]. */
int ntx_parse_double(const char *s, double min, double max, double *out,
		     struct ntx_err *err);

/* Parse a list of integer ids separated by spaces, commas or newlines into a
 * newly allocated array (caller frees). Each id must be in [0, max]. */
int ntx_parse_id_list(const char *s, int32_t max, int32_t **ids, int *n,
		      struct ntx_err *err);

/* Parse a layer set "3,5,10-12" into a newly allocated sorted array of unique
 * layer indices below n_layer (caller frees). */
int ntx_parse_range_list(const char *s, int n_layer, int **out, int *n,
			 struct ntx_err *err);

/* Format a byte count for humans into buf ("23.5 GiB"). Returns buf. */
char *ntx_fmt_size(uint64_t bytes, char *buf, int len);

#endif
