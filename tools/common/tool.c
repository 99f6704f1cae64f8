/* tool.c - what the suite's tools share (tool.h). */
#include "tool.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static void tail(const struct tool *t)
{
	if (t->usage_tail)
		fputs(t->usage_tail, stderr);
}

int tool_usage(const struct tool *t, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", t->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	tail(t);
	return 2;
}

int tool_backend(const struct tool *t, const char *arg, enum ntx_backend_choice *out)
{
	if (!strcmp(arg, "cpu"))
		*out = NTX_USE_CPU;
	else if (!strcmp(arg, "cuda"))
		*out = NTX_USE_CUDA;
	else if (!strcmp(arg, "auto"))
		*out = NTX_USE_AUTO;
	else
		return tool_usage(t, "--backend: expected cpu, cuda or auto, got '%s'", arg);
	return 0;
}

int tool_usage_tail(const struct tool *t)
{
	tail(t);
	return 2;
}

int tool_bad_value(const struct tool *t, const char *opt, const struct ntx_error *e)
{
	return tool_usage(t, "%s: %s", opt, ntx_error_message(e));
}

/* ---- values ---- */

/* Run one ntx_arg_* parse: 0, or 2 after the usage error. */
#define PARSE(call)                                              \
	do {                                                     \
		struct ntx_error *e = ntx_error_new();           \
		int rc_ = 0;                                     \
		if (!e)                                          \
			return tool_usage(t, "out of memory");   \
		if (call)                                        \
			rc_ = tool_bad_value(t, opt, e);         \
		ntx_error_free(e);                               \
		return rc_;                                      \
	} while (0)

int tool_int(const struct tool *t, const char *opt, const char *arg, int min, int max, int *out)
{
	PARSE(ntx_arg_int(arg, min, max, out, e));
}

int tool_double(const struct tool *t, const char *opt, const char *arg, double min, double max,
		double *out)
{
	PARSE(ntx_arg_double(arg, min, max, out, e));
}

int tool_budget(const struct tool *t, const char *opt, const char *arg, int64_t *out)
{
	PARSE(ntx_arg_budget(arg, out, e));
}

int tool_size(const struct tool *t, const char *opt, const char *arg, uint64_t *out)
{
	PARSE(ntx_arg_size(arg, out, e));
}

void tool_getopt_complaint(const char *prog, int ch, char *const argv[])
{
	if (ch == ':')
		fprintf(stderr, "%s: option '%s' needs a value\n", prog, argv[optind - 1]);
	else if (optopt > 0 && optopt < 128)
		fprintf(stderr, "%s: invalid option '-%c'\n", prog, optopt);
	else
		fprintf(stderr, "%s: invalid option '%s'\n", prog, argv[optind - 1]);
}

/* ---- runtime errors, -V, stdout ---- */

int tool_fail(const struct tool *t, const char *context, const struct ntx_error *e)
{
	if (context)
		fprintf(stderr, "%s: %s: %s\n", t->prog, context, ntx_error_message(e));
	else
		fprintf(stderr, "%s: %s\n", t->prog, ntx_error_message(e));
	return ntx_error_status(e) == NTX_STATUS_NOFIT ? 3 : 1;
}

double tool_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int tool_getopt_md(int argc, char *const argv[], const char **path)
{
	if (optind < 1 || strcmp(argv[optind - 1], "-md"))
		return 0;
	if (optind >= argc)
		return -1;
	*path = argv[optind++];
	return 1;
}

void tool_version(const struct tool *t)
{
	printf("%s (ntx) %s\n", t->prog, ntx_version());
}

int tool_close_stdout(const struct tool *t, int rc)
{
	int bad = ferror(stdout);

	if ((fclose(stdout) != 0 || bad) && rc == 0) {
		fprintf(stderr, "%s: standard output: %s\n", t->prog,
			errno ? strerror(errno) : "write error");
		rc = 1;
	}
	return rc;
}

/* ---- the options several tools share ---- */

void tool_common_init(struct tool_common *c, int max_threads)
{
	memset(c, 0, sizeof *c);
	c->max_threads = max_threads;
	c->vram_budget = c->ram_budget = c->disk_budget = c->reserve = -1;
}

int tool_common_opt(const struct tool *t, int ch, const char *arg, struct tool_common *c)
{
	switch (ch) {
	case 'm': c->model = arg; return 0;
	case TOOL_OPT_PLAN: c->plan = arg; return 0;
	case 'o': c->output = arg; return 0;
	case 'q': c->quiet = 1; return 0;
	case 'v': c->verbose++; return 0;
	case 't': return tool_int(t, "--threads", arg, 1, c->max_threads, &c->threads);
	case TOOL_OPT_VRAM: return tool_budget(t, "--vram-budget", arg, &c->vram_budget);
	case TOOL_OPT_RAM: return tool_budget(t, "--ram-budget", arg, &c->ram_budget);
	case TOOL_OPT_DISK: return tool_budget(t, "--disk-budget", arg, &c->disk_budget);
	case TOOL_OPT_RESERVE: return tool_budget(t, "--reserve", arg, &c->reserve);
	default: return TOOL_NOT_COMMON;
	}
}
