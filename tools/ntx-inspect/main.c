/* ntx-inspect - print what is in a GGUF file as one JSON document (or a
 * human summary). See doc/ntx-inspect.1 and doc/inspect-json.md. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "fileio.h"
#include "gguf.h"
#include "inspect.h"
#include "inspect_pack.h"
#include "table.h"
#include "version.h"


static const char *prog = "ntx-inspect";

static void usage(FILE *f)
{
	fprintf(f, "usage: %s [--full] [--format json|table] [-o FILE] FILE\n", prog);
}

static void help(void)
{
	usage(stdout);
	printf("\n"
	       "Print what is in a GGUF file: header, metadata, Llama configuration,\n"
	       "tensors, bytes per layer and per type. FILE '-' reads standard input.\n"
	       "A pack file (.ntxp, from ntx-pack) gives its header and extents instead\n"
	       "(\"kind\": \"pack\", doc/pack-format.md).\n"
	       "\n"
	       "  -f, --format FMT   json (default): one ntx.inspect JSON document;\n"
	       "                     table: a summary for people\n"
	       "      --full         every array element (arrays longer than %d are\n"
	       "                     otherwise summarised by type, count and first %d)\n"
	       "  -o, --output FILE  write to FILE instead of standard output\n"
	       "  -h, --help         this help\n"
	       "  -V, --version      print the version\n"
	       "\n"
	       "Exit status: 0 success, 1 error (unreadable or invalid file, write\n"
	       "failure), 2 usage error.\n",
	       NTX_INSPECT_ARRAY_MAX, NTX_INSPECT_ARRAY_HEAD);
}

/* Read all of stdin into memory. */
static unsigned char *slurp_stdin(size_t *len, struct ntx_err *err)
{
	size_t cap = 1 << 16, n = 0;
	unsigned char *buf = malloc(cap);

	if (!buf) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	for (;;) {
		size_t r;

		if (n == cap) {
			unsigned char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;

			if (!nb) {
				free(buf);
				ntx_err_set(err, NTX_ENOMEM, "out of memory reading standard input");
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
		r = fread(buf + n, 1, cap - n, stdin);
		n += r;
		if (r == 0) {
			if (ferror(stdin)) {
				ntx_err_errno(err, errno, "read");
				free(buf);
				return NULL;
			}
			break;
		}
	}
	*len = n;
	return buf;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "full", no_argument, NULL, 'F' },
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path, *out_path = NULL, *what;
	unsigned flags = 0;
	int table = 0, c, rc = 1;
	struct ntx_err err;
	struct ntx_gguf *g = NULL;
	unsigned char *buf = NULL;
	json_t *doc = NULL;
	FILE *out = stdout;
	struct ntx_outfile of = { 0 };

	ntx_err_clear(&err);
	argv[0] = (char *)prog; /* getopt's messages name the program */
	while ((c = getopt_long(argc, argv, "f:o:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'F':
			flags |= NTX_INSPECT_FULL;
			break;
		case 'f':
			if (strcmp(optarg, "json") == 0) {
				table = 0;
			} else if (strcmp(optarg, "table") == 0) {
				table = 1;
			} else {
				fprintf(stderr, "%s: --format: '%s' is not json or table\n", prog, optarg);
				usage(stderr);
				return 2;
			}
			break;
		case 'o':
			out_path = optarg;
			break;
		case 'h':
			help();
			return ntx_close_stdout(prog, 0);
		case 'V':
			printf("%s (ntx) %s\n", prog, NTX_VERSION);
			return ntx_close_stdout(prog, 0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 1) {
		fprintf(stderr, "%s: %s\n", prog,
			argc - optind ? "expected one FILE" : "missing FILE");
		usage(stderr);
		return 2;
	}
	path = argv[optind];
	what = strcmp(path, "-") == 0 ? "stdin" : path;
	/* -o FILE: written through a temporary, renamed when complete */
	if (out_path && strcmp(out_path, "-") != 0) {
		if (ntx_outfile_open(&of, out_path, "w", stdout, &err)) {
			fprintf(stderr, "%s: %s\n", prog, err.msg);
			goto done;
		}
		out = of.f;
	}

	if (strcmp(path, "-") == 0) {
		size_t len = 0;

		buf = slurp_stdin(&len, &err);
		if (buf && ntx_pack_is_pack(buf, len)) /* a pack file: its own document */
			doc = ntx_inspect_pack_file(path, buf, len, flags, &err);
		else if (buf)
			g = ntx_gguf_open_buffer(buf, len, &err);
	} else if (ntx_pack_file_is_pack(path)) {
		doc = ntx_inspect_pack_file(path, NULL, 0, flags, &err);
	} else {
		g = ntx_gguf_open(path, &err);
	}
	if (!g && !doc) {
		fprintf(stderr, "%s: %s: %s\n", prog, what, err.msg);
		goto done;
	}
	if (!doc)
		doc = ntx_inspect_json(g, path, flags, &err);
	if (!doc) {
		fprintf(stderr, "%s: %s: %s\n", prog, what, err.msg);
		goto done;
	}
	errno = 0;
	if (table && !g) {
		char *sum = ntx_inspect_pack_summary(doc);

		fputs(sum ? sum : "", out);
		free(sum);
	} else if (table) {
		ntx_inspect_table(out, doc);
	} else if (json_dumpf(doc, out, JSON_INDENT(2)) == 0) {
		fputc('\n', out);
	}
	if (fflush(out) != 0 || ferror(out)) {
		fprintf(stderr, "%s: %s: %s\n", prog, out == stdout ? "standard output" : out_path,
			errno ? strerror(errno) : "write error");
		goto done;
	}
	if (out != stdout && ntx_outfile_commit(&of, &err)) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		goto done;
	}
	rc = 0;
done:
	ntx_outfile_abort(&of);
	json_decref(doc);
	ntx_gguf_close(g);
	free(buf);
	return ntx_close_stdout(prog, rc);
}
