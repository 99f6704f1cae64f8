/* fileio.c - small file helpers (see fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ntx_open_regular(const char *path, uint64_t *size, struct ntx_err *err)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return ntx_err_errno(err, errno, "%s", "");
	if (fstat(fd, &st) != 0) {
		ntx_err_errno(err, errno, "fstat");
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode))
			ntx_err_errno(err, EISDIR, "%s", "");
		else
			ntx_err_set(err, NTX_EINVAL, "not a regular file");
		close(fd);
		return -1;
	}
	*size = (uint64_t)st.st_size;
	return fd;
}

/* ---- output files written through a temporary name ---- */

int ntx_outfile_open(struct ntx_outfile *o, const char *path, const char *mode, FILE *dash,
		     struct ntx_err *err)
{
	struct stat st;
	size_t n;

	memset(o, 0, sizeof *o);
	if (!path || (dash && !strcmp(path, "-"))) {
		o->f = dash;
		return 0;
	}
	n = strlen(path);
	o->path = malloc(n + 1);
	if (!o->path)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	memcpy(o->path, path, n + 1);
	o->own = 1;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		o->f = fopen(path, mode); /* /dev/null, /dev/full, a FIFO: in place */
		if (!o->f) {
			ntx_err_errno(err, errno, "%s", path);
			ntx_outfile_abort(o);
			return -1;
		}
		return 0;
	}
	o->tmp = malloc(n + 32);
	if (!o->tmp) {
		ntx_outfile_abort(o);
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	}
	snprintf(o->tmp, n + 32, "%s.%ld.tmp", path, (long)getpid());
	o->f = fopen(o->tmp, mode);
	if (!o->f) {
		int e = errno;

		/* name the destination: the temporary is ours, not the user's */
		ntx_err_errno(err, e, "%s", path);
		free(o->tmp);
		o->tmp = NULL;
		ntx_outfile_abort(o);
		return -1;
	}
	return 0;
}

int ntx_outfile_commit(struct ntx_outfile *o, struct ntx_err *err)
{
	int bad, e;

	if (!o->f)
		return 0;
	errno = 0;
	bad = fflush(o->f) != 0 || ferror(o->f);
	e = errno;
	if (o->own) {
		if (fclose(o->f) != 0 && !bad) {
			bad = 1;
			e = errno;
		}
		o->f = NULL;
	}
	if (!bad && o->tmp && rename(o->tmp, o->path) != 0) {
		bad = 1;
		e = errno;
	}
	if (bad) {
		ntx_err_errno(err, e ? e : EIO, "%s", o->path ? o->path : "writing output");
		ntx_outfile_abort(o);
		return -1;
	}
	free(o->tmp);
	free(o->path);
	memset(o, 0, sizeof *o);
	return 0;
}

void ntx_outfile_abort(struct ntx_outfile *o)
{
	if (o->own && o->f)
		fclose(o->f);
	if (o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	free(o->path);
	memset(o, 0, sizeof *o);
}

char *ntx_read_text_file(const char *path, size_t *len, struct ntx_err *err)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f) {
		ntx_err_errno(err, errno, "%s", path);
		return NULL;
	}
	for (;;) {
		size_t got;

		if (cap - n < 65536) {
			char *t;

			if (cap > ((size_t)1 << 32)) {
				ntx_err_set(err, NTX_EFORMAT, "%s: larger than 4 GiB: not a JSON document",
					    path);
				goto fail;
			}
			cap = cap ? cap * 2 : 65536 * 2;
			t = realloc(buf, cap + 1);
			if (!t) {
				ntx_err_set(err, NTX_ENOMEM, "out of memory");
				goto fail;
			}
			buf = t;
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		ntx_err_errno(err, errno ? errno : EIO, "%s", path);
		goto fail;
	}
	if (f != stdin)
		fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
fail:
	if (f != stdin)
		fclose(f);
	free(buf);
	return NULL;
}
