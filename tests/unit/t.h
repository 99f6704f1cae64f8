/* t.h - a minimal TAP producer for the C unit tests.
 * Each check prints "ok N - name" or "not ok N - name"; t_done() prints the
 * plan and returns the exit status (failures, capped). */
#ifndef NTX_T_H
#define NTX_T_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_n, t_fail;

static inline int t_ok(int cond, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline int t_ok(int cond, const char *fmt, ...)
{
	va_list ap;

	t_n++;
	if (!cond)
		t_fail++;
	printf("%sok %d - ", cond ? "" : "not ", t_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return cond;
}

/* Print a diagnostic line (TAP comment). */
static inline void t_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void t_diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static inline int t_done(void)
{
	printf("1..%d\n", t_n);
	return t_fail > 100 ? 100 : t_fail;
}

/* Record a skipped check: "ok N - name # SKIP reason" (counted as skipped). */
static inline void t_skip(const char *name, const char *why)
{
	t_n++;
	printf("ok %d - %s # SKIP %s\n", t_n, name, why);
	fflush(stdout);
}

/* Path of the shared fixtures (NTX_FIXTURES or ../shared/fixtures). */
static inline const char *t_fixtures(void)
{
	const char *p = getenv("NTX_FIXTURES");

	return p && *p ? p : "../shared/fixtures";
}

/* Is the reference set there? If not, record the checks under NAME as
 * skipped and return 0; under CI=true a missing set is a failure instead. */
static inline int t_need_fixtures(const char *name)
{
	char path[4096];
	const char *ci = getenv("CI");
	FILE *f;

	snprintf(path, sizeof path, "%s/models/tensor_types.json", t_fixtures());
	f = fopen(path, "rb");
	if (f) {
		fclose(f);
		return 1;
	}
	if (ci && !strcmp(ci, "true"))
		t_ok(0, "%s: no reference set at %s (CI=true: set NTX_FIXTURES)", name, t_fixtures());
	else
		t_skip(name, "no reference set (set NTX_FIXTURES)");
	return 0;
}

#endif
