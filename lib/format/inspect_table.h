/* inspect_table.h - the human summary of a GGUF file's ntx.inspect document
 * (ntx-inspect --format table). */
#ifndef NTX_INSPECT_TABLE_FMT_H
#define NTX_INSPECT_TABLE_FMT_H

#include <jansson.h>
#include <stdio.h>

/* Print the summary of doc (from ntx_inspect_json) to f. Write errors are
 * left in f's error flag for the caller to check. */
void ntx_inspect_table(FILE *f, const json_t *doc);

#endif
