/* fileio.c - small file helpers (see fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

int ntx_close_stdout(const char *prog, int rc)
{
	int bad = ferror(stdout);

	if ((fclose(stdout) != 0 || bad) && rc == 0) {
		fprintf(stderr, "%s: standard output: %s\n", prog,
			errno ? strerror(errno) : "write error");
		rc = 1;
	}
	return rc;
}
