/* tool.h - what the suite's tools share: one way to report a usage error,
 * a bad option value, a getopt complaint and a runtime error; the options
 * several tools take (-m/--model, --plan, -o/--output, -t/--threads, -q,
 * -v, -h, -V and the budgets --vram-budget, --ram-budget, --disk-budget,
 * --reserve), their getopt_long entries and their parsing through the
 * library's one parser of sizes and numbers (ntx_arg_* in ntx.h); -V's line
 * and the checked close of stdout.
 *
 * Why a folder of the tools and not lib/: all of this prints and picks
 * exit statuses, which the library never does (doc/libntx.md). What is
 * worth having outside the suite, the parsing of the values, is in ntx.h;
 * this folder wraps it in the tools' messages. It includes only ntx.h and
 * libc, like the tools that use only the API. Every tool links
 * every file of tools/common (Makefile).
 *
 * Exit statuses (STYLE.md): 0 success, 1 runtime failure, 2 usage error,
 * 3 valid input with no solution (NTX_STATUS_NOFIT). */
#ifndef NTX_TOOL_H
#define NTX_TOOL_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "ntx.h"

/* One tool: its name, and what follows a usage error's message on stderr
 * (a short usage, "Try 'PROG --help' ..."); NULL: nothing. */
struct tool {
	const char *prog;
	const char *usage_tail;
};

/* "PROG: MESSAGE\n" and the usage tail on stderr; returns 2. */
int tool_usage(const struct tool *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The usage tail alone (after a message printed otherwise); returns 2. */
int tool_usage_tail(const struct tool *t);

/* A bad value: "PROG: OPT: MESSAGE\n" (e's message) and the tail; returns 2. */
int tool_bad_value(const struct tool *t, const char *opt, const struct ntx_error *e);

/* Values of options through ntx_arg_*: 0, or the usage error's status 2
 * after tool_bad_value (opt names the option as the user wrote it). */
int tool_int(const struct tool *t, const char *opt, const char *arg, int min, int max, int *out);
int tool_double(const struct tool *t, const char *opt, const char *arg, double min, double max,
		double *out);
int tool_budget(const struct tool *t, const char *opt, const char *arg, int64_t *out);
int tool_size(const struct tool *t, const char *opt, const char *arg, uint64_t *out);
/* --backend cpu|cuda|auto: 0, or the usage error's status 2. */
int tool_backend(const struct tool *t, const char *arg, enum ntx_backend_choice *out);

/* Why getopt_long (its option string starting with ':') returned ch: ':' a
 * missing value, else an unknown option; "PROG: ..." on stderr, without
 * the tail. */
void tool_getopt_complaint(const char *prog, int ch, char *const argv[]);

/* llama.cpp's "-md FILE" (a draft model), which getopt_long reads as -m
 * with the value "d": call where -m was returned. 0: a plain -m; 1: *path
 * is the next argument (optind moves past it); -1: "-md" was the last
 * argument. */
int tool_getopt_md(int argc, char *const argv[], const char **path);

/* Seconds on the monotonic clock, for the timings tools print: only
 * differences mean anything. */
double tool_now_s(void);

/* A runtime failure: "PROG: [CONTEXT: ]MESSAGE\n" on stderr. Returns the
 * exit status for e's status: 3 for NTX_STATUS_NOFIT, else 1. */
int tool_fail(const struct tool *t, const char *context, const struct ntx_error *e);

/* -V: "PROG (ntx) VERSION" on stdout (the library's version is the
 * suite's). */
void tool_version(const struct tool *t);

/* A tool's last step: close stdout, checked (a full disk or a closed pipe
 * must not exit 0). Returns rc, or 1 after "PROG: standard output: why"
 * when rc is 0 and the close failed. */
int tool_close_stdout(const struct tool *t, int rc);

/* ---- the options several tools share ---- */

enum {
	TOOL_OPT_PLAN = 0x1000, TOOL_OPT_VRAM, TOOL_OPT_RAM, TOOL_OPT_DISK, TOOL_OPT_RESERVE
};

/* getopt_long entries, for the tools' tables */
#define TOOL_OPTION_MODEL { "model", required_argument, NULL, 'm' }
#define TOOL_OPTION_PLAN { "plan", required_argument, NULL, TOOL_OPT_PLAN }
#define TOOL_OPTION_OUTPUT { "output", required_argument, NULL, 'o' }
#define TOOL_OPTION_THREADS { "threads", required_argument, NULL, 't' }
#define TOOL_OPTION_QUIET { "quiet", no_argument, NULL, 'q' }
#define TOOL_OPTION_VERBOSE { "verbose", no_argument, NULL, 'v' }
#define TOOL_OPTION_HELP { "help", no_argument, NULL, 'h' }
#define TOOL_OPTION_VERSION { "version", no_argument, NULL, 'V' }
#define TOOL_OPTION_BUDGETS \
	{ "vram-budget", required_argument, NULL, TOOL_OPT_VRAM }, \
	{ "ram-budget", required_argument, NULL, TOOL_OPT_RAM }, \
	{ "disk-budget", required_argument, NULL, TOOL_OPT_DISK }, \
	{ "reserve", required_argument, NULL, TOOL_OPT_RESERVE }

/* Their values. Budgets: -1 when not given (the library detects). */
struct tool_common {
	const char *model, *plan, *output;
	int threads;         /* 0: not given */
	int max_threads;     /* -t's upper bound (set before parsing) */
	int quiet, verbose;
	int64_t vram_budget, ram_budget, disk_budget, reserve;
};
void tool_common_init(struct tool_common *c, int max_threads);

enum { TOOL_NOT_COMMON = -1 };
/* Take option ch (getopt_long's return) with value arg if it is one of the
 * shared options (h and V excepted: each tool has its own help): returns
 * 0 when taken, TOOL_NOT_COMMON when not, or 2 after a bad value's
 * usage error. */
int tool_common_opt(const struct tool *t, int ch, const char *arg, struct tool_common *c);

#endif
