/* test_gguf_write.c - the GGUF writer: argument checks, layout and overflow,
 * fill callbacks across chunk boundaries, every output path (memory, stream,
 * fd, file through a temporary name) giving the same bytes, sparse files,
 * and failures that leave nothing behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "t.h"
#include "types.h"

static char dir[] = "/tmp/ntx-test-gguf-write-XXXXXX";

/* Files in dir other than keep (NULL: all). */
static int count_files(const char *keep)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] != '.' && (!keep || strcmp(e->d_name, keep)))
			n++;
	}
	closedir(d);
	return n;
}

static unsigned char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc(n > 0 ? (size_t)n : 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* ---- argument checks ---- */

static void test_checks(void)
{
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	struct ntx_err err;
	int64_t ne[4] = { 256, 4, 1, 1 }, bad[2] = { 100, 4 }, neg[2] = { 32, -1 };
	int64_t huge[2] = { 1ll << 30, 1ll << 30 }, over[2] = { 1ll << 31, 1ll << 31 };
	uint8_t two = 2;
	uint64_t size;

	t_ok(ntx_gguf_writer_add_u32(w, "k", 1, &err) == 0, "a key");
	t_ok(ntx_gguf_writer_add_u32(w, "k", 2, &err) == -1 && strstr(err.msg, "duplicate"),
	     "duplicate key: %s", err.msg);
	t_ok(ntx_gguf_writer_add_u32(w, "", 2, &err) == -1, "empty key: %s", err.msg);
	t_ok(ntx_gguf_writer_add_scalar(w, "b", NTX_GGUF_BOOL, &two, &err) == -1,
	     "bool 2: %s", err.msg);
	t_ok(ntx_gguf_writer_add_scalar(w, "s", NTX_GGUF_STRING, "x", &err) == -1,
	     "string as scalar: %s", err.msg);
	t_ok(ntx_gguf_writer_add_array(w, "a", NTX_GGUF_STRING, NULL, 0, &err) == -1,
	     "string array through add_array: %s", err.msg);
	t_ok(ntx_gguf_writer_set_alignment(w, 48, &err) == -1, "alignment 48: %s", err.msg);
	t_ok(ntx_gguf_writer_set_alignment(w, 64, &err) == 0 &&
		     ntx_gguf_writer_set_alignment(w, 64, &err) == -1,
	     "alignment set twice: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "t", NTX_TYPE_Q4_K, 2, ne, NULL, &err) == 0, "tensor 0");
	t_ok(ntx_gguf_writer_add_tensor(w, "t", NTX_TYPE_Q4_K, 2, ne, NULL, &err) == -1 &&
		     strstr(err.msg, "duplicate"),
	     "duplicate tensor: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "u", 99, 2, ne, NULL, &err) == -1 && strstr(err.msg, "99"),
	     "unknown type: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "u", NTX_TYPE_Q4_K, 5, ne, NULL, &err) == -1,
	     "5 dimensions: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "u", NTX_TYPE_Q4_K, 0, ne, NULL, &err) == -1,
	     "0 dimensions: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "u", NTX_TYPE_Q4_0, 2, bad, NULL, &err) == -1 &&
		     strstr(err.msg, "block size"),
	     "row not a block multiple: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "u", NTX_TYPE_F32, 2, neg, NULL, &err) == -1,
	     "negative dimension: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "u", NTX_TYPE_F32, 2, over, NULL, &err) == -1 &&
		     strstr(err.msg, "overflows"),
	     "2^64 bytes: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "", NTX_TYPE_F32, 1, ne, NULL, &err) == -1,
	     "empty tensor name: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor_fill(w, "u", NTX_TYPE_F32, 1, ne, NULL, NULL, &err) == -1,
	     "fill without a function: %s", err.msg);
	t_ok(ntx_gguf_writer_add_tensor(w, "h1", NTX_TYPE_F32, 2, huge, NULL, &err) == 1 &&
		     ntx_gguf_writer_layout(w, &size, NULL, &err) == 0 && size > (1ull << 62),
	     "a 2^62-byte tensor lays out");
	t_ok(ntx_gguf_writer_add_tensor(w, "h2", NTX_TYPE_F32, 2, huge, NULL, &err) == 2 &&
		     ntx_gguf_writer_layout(w, &size, NULL, &err) == -1 && strstr(err.msg, "overflows"),
	     "two of them overflow the file size: %s", err.msg);
	ntx_gguf_writer_free(w);
	ntx_gguf_writer_free(NULL);
}

/* ---- fill callbacks ---- */

struct fill_log {
	uint64_t next; /* expected next offset */
	int calls, bad, fail_at;
};

static int fill_pattern(void *ctx, uint64_t index, uint64_t offset, void *buf, size_t len,
			struct ntx_err *err)
{
	struct fill_log *fl = ctx;
	size_t i;

	if (offset != fl->next || offset % 144 || len % 144 || index != 1)
		fl->bad++;
	fl->next = offset + len;
	if (++fl->calls == fl->fail_at)
		return ntx_err_set(err, NTX_EIO, "generator failed at call %d", fl->calls);
	for (i = 0; i < len; i++)
		((unsigned char *)buf)[i] = (unsigned char)((offset + i) * 31 + ((offset + i) >> 9));
	return 0;
}

/* A writer with a small tensor, a 1.1 MB Q4_K tensor filled by callback
 * (crossing 64 KiB chunks), and a final tensor. */
static struct ntx_gguf_writer *make(struct fill_log *fl, struct ntx_err *err)
{
	static float small[7] = { 1, 2, 3, 4, 5, 6, 7 };
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	int64_t ne0[1] = { 7 }, ne1[2] = { 2048, 4000 / 8 * 1 + 3 };
	static const char *toks[2] = { "x", "yz" };

	memset(fl, 0, sizeof *fl);
	ntx_gguf_writer_set_chunk_bytes(w, 1);
	if (ntx_gguf_writer_add_str(w, "general.architecture", "llama", err) ||
	    ntx_gguf_writer_add_str_array(w, "t.tokens", toks, NULL, 2, err) ||
	    ntx_gguf_writer_add_tensor(w, "small", NTX_TYPE_F32, 1, ne0, small, err) < 0 ||
	    ntx_gguf_writer_add_tensor_fill(w, "big", NTX_TYPE_Q4_K, 2, ne1, fill_pattern, fl, err) < 0 ||
	    ntx_gguf_writer_add_tensor(w, "last", NTX_TYPE_F32, 1, ne0, small, err) < 0) {
		ntx_gguf_writer_free(w);
		return NULL;
	}
	return w;
}

static void test_outputs(void)
{
	struct fill_log fl;
	struct ntx_err err;
	struct ntx_gguf_writer *w = (ntx_err_clear(&err), make(&fl, &err));
	unsigned char *mem = NULL, *b = NULL;
	size_t len = 0, blen;
	uint64_t size, off, nb;
	char path[256], path2[256];
	struct ntx_gguf *g;
	FILE *f;
	int fd, rc;
	struct stat st;

	if (!t_ok(w != NULL, "writer built: %s", err.msg))
		return;
	rc = ntx_gguf_writer_write_mem(w, &mem, &len, &err);
	t_ok(rc == 0 && fl.bad == 0 && fl.calls >= 9 /* 579456 bytes in 64 KiB chunks */,
	     "memory: %zu bytes, fill called %d times in order on block boundaries %s", len,
	     fl.calls, rc ? err.msg : "");
	t_ok(ntx_gguf_writer_layout(w, &size, NULL, &err) == 0 && size == len &&
		     ntx_gguf_writer_tensor_span(w, 1, &off, &nb) == 0 && off % 32 == 0 &&
		     nb == 144 * 8 * 503 && ntx_gguf_writer_tensor_span(w, 3, &off, &nb) == -1,
	     "layout: size, spans");
	g = ntx_gguf_open_buffer(mem, len, &err);
	{
		const struct ntx_gguf_tensor *t = g ? ntx_gguf_find_tensor(g, "big") : NULL;
		const unsigned char *p = t ? t->data : NULL;
		size_t i, bad = 0;

		for (i = 0; p && i < t->nbytes; i++)
			bad += p[i] != (unsigned char)(i * 31 + (i >> 9));
		t_ok(t && bad == 0 && ((const float *)ntx_gguf_find_tensor(g, "last")->data)[6] == 7.0f,
		     "reader sees the filled data (%zu bad bytes)", bad);
	}
	ntx_gguf_close(g);

	/* a file through a temporary name: same bytes, nothing else left */
	snprintf(path, sizeof path, "%s/out.gguf", dir);
	fl.next = 0;
	t_ok(ntx_gguf_writer_write_file(w, path, 0, &err) == 0, "write_file: %s", err.msg);
	b = read_all(path, &blen);
	t_ok(b && blen == len && memcmp(b, mem, len) == 0 && count_files("out.gguf") == 0,
	     "file equals the memory image; no temporary file left");
	free(b);
	t_ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644,
	     "file mode follows the umask (%o)", st.st_mode & 0777);
	/* a stream */
	snprintf(path2, sizeof path2, "%s/stream.gguf", dir);
	f = fopen(path2, "wb");
	fl.next = 0;
	t_ok(f && ntx_gguf_writer_write_stream(w, f, &err) == 0 && fclose(f) == 0,
	     "write_stream: %s", err.msg);
	b = read_all(path2, &blen);
	t_ok(b && blen == len && memcmp(b, mem, len) == 0, "stream equals the memory image");
	free(b);
	unlink(path2);
	/* an fd not at offset 0 */
	fd = open(path2, O_RDWR | O_CREAT | O_TRUNC, 0644);
	fl.next = 0;
	t_ok(fd >= 0 && write(fd, "abc", 3) == 3 && ntx_gguf_writer_write_fd(w, fd, 0, &err) == 0 &&
		     close(fd) == 0,
	     "write_fd after 3 bytes: %s", err.msg);
	b = read_all(path2, &blen);
	t_ok(b && blen == len + 3 && memcmp(b + 3, mem, len) == 0, "fd output starts at its position");
	free(b);
	unlink(path2);

	/* sparse: header written, the rest a hole of the right size */
	snprintf(path2, sizeof path2, "%s/sparse.gguf", dir);
	t_ok(ntx_gguf_writer_write_file(w, path2, NTX_GGUF_WRITE_SPARSE | NTX_GGUF_WRITE_NOSYNC, &err) == 0,
	     "sparse write: %s", err.msg);
	b = read_all(path2, &blen);
	g = b ? ntx_gguf_open_buffer(b, blen, &err) : NULL;
	{
		uint64_t hdr;

		ntx_gguf_writer_layout(w, NULL, &hdr, &err);
		t_ok(b && blen == len && memcmp(b, mem, (size_t)hdr) == 0 && g &&
			     ((const float *)ntx_gguf_find_tensor(g, "last")->data)[6] == 0.0f,
		     "sparse file: full size, same header, zero data, opens");
	}
	ntx_gguf_close(g);
	free(b);
	unlink(path2);
	/* sparse onto a file that held other data: the hole reads as zeros */
	fd = open(path2, O_RDWR | O_CREAT | O_TRUNC, 0644);
	{
		unsigned char junk[4096];
		int k, ok = fd >= 0;

		memset(junk, 0xab, sizeof junk);
		for (k = 0; ok && k < 200; k++)
			ok = write(fd, junk, sizeof junk) == (ssize_t)sizeof junk;
		ok = ok && lseek(fd, 0, SEEK_SET) == 0 &&
		     ntx_gguf_writer_write_fd(w, fd, NTX_GGUF_WRITE_SPARSE, &err) == 0;
		if (fd >= 0)
			close(fd);
		b = read_all(path2, &blen);
		g = b ? ntx_gguf_open_buffer(b, blen, &err) : NULL;
		t_ok(ok && g && blen == len &&
			     ((const unsigned char *)ntx_gguf_find_tensor(g, "big")->data)[1000] == 0,
		     "sparse over an old, larger file: right size, zero data");
		ntx_gguf_close(g);
		free(b);
		unlink(path2);
	}
	fd = open("/dev/null", O_WRONLY);
	t_ok(ntx_gguf_writer_write_fd(w, fd, NTX_GGUF_WRITE_SPARSE, &err) == -1 &&
		     strstr(err.msg, "regular"),
	     "sparse to /dev/null refused: %s", err.msg);
	close(fd);

	/* failures leave nothing behind and do not touch the target */
	fl.next = 0;
	fl.calls = 0;
	fl.fail_at = 3;
	t_ok(ntx_gguf_writer_write_file(w, path, 0, &err) == -1 &&
		     strstr(err.msg, "generator failed at call 3") && count_files("out.gguf") == 0,
	     "a failing fill callback: %s; no temporary file left", err.msg);
	b = read_all(path, &blen);
	t_ok(b && blen == len && memcmp(b, mem, len) == 0, "the existing file is untouched");
	free(b);
	fl.fail_at = 0;
	fd = open("/dev/full", O_WRONLY);
	if (fd >= 0) {
		fl.next = 0;
		t_ok(ntx_gguf_writer_write_fd(w, fd, 0, &err) == -1 && strstr(err.msg, "No space"),
		     "writing to /dev/full: %s", err.msg);
		close(fd);
	}
	snprintf(path2, sizeof path2, "%s/no/such/dir.gguf", dir);
	t_ok(ntx_gguf_writer_write_file(w, path2, 0, &err) == -1 && strstr(err.msg, "No such file"),
	     "missing directory: %s", err.msg);
	unlink(path);
	free(mem);
	ntx_gguf_writer_free(w);
}

/* A sparse 8 GiB file costs almost no disk. */
static void test_big_sparse(void)
{
	struct ntx_gguf_writer *w = ntx_gguf_writer_new();
	struct ntx_err err;
	int64_t ne[2] = { 8192, 1 << 19 }; /* F16: 8 GiB */
	char path[256];
	struct stat st;
	struct ntx_gguf *g = NULL;
	int ok;

	snprintf(path, sizeof path, "%s/big.gguf", dir);
	ntx_gguf_writer_add_str(w, "general.architecture", "llama", &err);
	ntx_gguf_writer_add_tensor(w, "huge", NTX_TYPE_F16, 2, ne, NULL, &err);
	memset(&st, 0, sizeof st);
	ok = ntx_gguf_writer_write_file(w, path, NTX_GGUF_WRITE_SPARSE | NTX_GGUF_WRITE_NOSYNC, &err) == 0 &&
	     stat(path, &st) == 0;
	t_ok(ok && st.st_size > (8ll << 30) && (long long)st.st_blocks * 512 < (1ll << 20),
	     "8 GiB sparse file: %lld bytes, %lld on disk %s", (long long)st.st_size,
	     (long long)st.st_blocks * 512, ok ? "" : err.msg);
	g = ntx_gguf_open(path, &err);
	t_ok(g && g->tensors[0].nbytes == (8ull << 30), "it opens: %s", g ? "" : err.msg);
	ntx_gguf_close(g);
	unlink(path);
	ntx_gguf_writer_free(w);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		t_ok(0, "mkdtemp: %s", strerror(errno));
		return t_done();
	}
	umask(022);
	test_checks();
	test_outputs();
	test_big_sparse();
	t_ok(rmdir(dir) == 0, "temporary directory empty at the end");
	return t_done();
}
