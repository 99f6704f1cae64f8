/* err.c - error reporting for libntx (see err.h). */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ntx_err_set(struct ntx_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return -1;
	err->code = code ? code : NTX_EINVAL;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	return -1;
}

int ntx_err_errno(struct ntx_err *err, int errnum, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	if (!err)
		return -1;
	err->code = NTX_EIO;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	n = strlen(err->msg);
	snprintf(err->msg + n, sizeof err->msg - n, "%s%s", n ? ": " : "",
		 strerror(errnum));
	return -1;
}

void ntx_err_prefix(struct ntx_err *err, const char *fmt, ...)
{
	char pre[NTX_ERR_MAX], old[NTX_ERR_MAX];
	va_list ap;

	if (!err)
		return;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof old);
	snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
}

void ntx_err_clear(struct ntx_err *err)
{
	if (!err)
		return;
	err->code = 0;
	err->msg[0] = '\0';
}
