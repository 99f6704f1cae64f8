/* table.h - ntx-inspect's human summary of an ntx.inspect document. */
#ifndef NTX_INSPECT_TABLE_H
#define NTX_INSPECT_TABLE_H

#include <jansson.h>
#include <stdio.h>

/* Print the summary of doc (from ntx_inspect_json) to f. Write errors are
 * left in f's error flag for the caller to check. */
void ntx_inspect_table(FILE *f, const json_t *doc);

#endif
