/* ntx-inspect - print what is in a GGUF file as one JSON document (or a
 * human summary). See doc/ntx-inspect.1 and doc/inspect-json.md. The
 * document and the summary are the library's (ntx_inspect in ntx.h); this
 * program reads the options and standard input and writes the text. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ntx.h"
#include "tool.h"

#define ARRAY_MAX 16  /* arrays longer are summarised (doc/inspect-json.md) */
#define ARRAY_HEAD 8  /* elements shown in a summary */

static const char *prog = "ntx-inspect";

static void usage(FILE *f)
{
	fprintf(f, "usage: %s [--full] [--format json|table] [-o FILE] FILE\n", prog);
}

static const struct tool T = {
	"ntx-inspect", "usage: ntx-inspect [--full] [--format json|table] [-o FILE] FILE\n"
};

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
	       ARRAY_MAX, ARRAY_HEAD);
}

/* Read all of stdin into memory; NULL after the message. */
static unsigned char *slurp_stdin(size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	unsigned char *buf = malloc(cap);

	if (!buf) {
		fprintf(stderr, "%s: stdin: out of memory\n", prog);
		return NULL;
	}
	for (;;) {
		size_t r;

		if (n == cap) {
			unsigned char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;

			if (!nb) {
				free(buf);
				fprintf(stderr, "%s: stdin: out of memory reading standard input\n", prog);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
		r = fread(buf + n, 1, cap - n, stdin);
		n += r;
		if (r == 0) {
			if (ferror(stdin)) {
				fprintf(stderr, "%s: stdin: read: %s\n", prog, strerror(errno));
				free(buf);
				return NULL;
			}
			break;
		}
	}
	*len = n;
	return buf;
}

/* Write text to stdout, checked. */
static int write_stdout(const char *text)
{
	errno = 0;
	fputs(text, stdout);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: standard output: %s\n", prog,
			errno ? strerror(errno) : "write error");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "full", no_argument, NULL, 'F' },
		{ "format", required_argument, NULL, 'f' },
		TOOL_OPTION_OUTPUT, TOOL_OPTION_HELP, TOOL_OPTION_VERSION,
		{ NULL, 0, NULL, 0 },
	};
	const char *path, *out_path = NULL, *what;
	unsigned flags = 0;
	int c, rc = 1;
	struct ntx_error *err = ntx_error_new();
	struct ntx_output *out = NULL;
	unsigned char *buf = NULL;
	size_t len = 0;
	char *text = NULL;

	argv[0] = (char *)prog; /* getopt's messages name the program */
	while ((c = getopt_long(argc, argv, "f:o:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'F':
			flags |= NTX_INSPECT_ALL_ELEMENTS;
			break;
		case 'f':
			if (strcmp(optarg, "json") == 0)
				flags &= ~(unsigned)NTX_INSPECT_SUMMARY;
			else if (strcmp(optarg, "table") == 0)
				flags |= NTX_INSPECT_SUMMARY;
			else
				return tool_usage(&T, "--format: '%s' is not json or table", optarg);
			break;
		case 'o':
			out_path = optarg;
			break;
		case 'h':
			help();
			return tool_close_stdout(&T, 0);
		case 'V':
			tool_version(&T);
			return tool_close_stdout(&T, 0);
		default:
			return tool_usage_tail(&T);
		}
	}
	if (argc - optind != 1)
		return tool_usage(&T, "%s", argc - optind ? "expected one FILE" : "missing FILE");
	if (!err)
		return 1;
	path = argv[optind];
	what = strcmp(path, "-") == 0 ? "stdin" : path;
	/* -o FILE: written through a temporary, renamed when complete */
	if (out_path && strcmp(out_path, "-") != 0 && ntx_output_open(out_path, &out, err)) {
		tool_fail(&T, NULL, err);
		goto done;
	}
	if (strcmp(path, "-") == 0 && !(buf = slurp_stdin(&len)))
		goto done;
	if (ntx_inspect(path, buf, len, flags, &text, err)) {
		tool_fail(&T, what, err);
		goto done;
	}
	if (!out) {
		rc = write_stdout(text);
		goto done;
	}
	if (ntx_output_write(out, text, strlen(text), err)) {
		tool_fail(&T, NULL, err);
		goto done;
	}
	rc = ntx_output_commit(out, err) ? tool_fail(&T, NULL, err) : 0;
	out = NULL; /* freed by the commit either way */
done:
	ntx_output_abort(out);
	ntx_free(text);
	free(buf);
	ntx_error_free(err);
	return tool_close_stdout(&T, rc);
}
