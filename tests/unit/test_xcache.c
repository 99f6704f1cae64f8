/* test_xcache.c - the expert cache (lib/stream/xcache.h): experts read from
 * a file at unaligned offsets through direct I/O (and buffered, as where
 * the file system refuses O_DIRECT), least recently used replaced first,
 * several experts of a layer at once, errors that leave nothing half
 * valid. The "pack" is a file of known bytes: byte i is a function of i. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t.h"
#include "tunables.h"
#include "xcache.h"

static unsigned char byte_at(uint64_t i)
{
	return (unsigned char)((i * 2654435761u) >> 13);
}

/* Does p hold the file's bytes [off, off + n)? */
static int holds(const void *p, uint64_t off, uint64_t n)
{
	const unsigned char *b = p;
	uint64_t i;

	for (i = 0; i < n; i++)
		if (b[i] != byte_at(off + i))
			return 0;
	return 1;
}

#define NE 6
#define NL 2

/* Layer l's stacks: gate at 1000 + l * 300000, up and down after it, each
 * expert of odd sizes (nothing aligned). */
static void layer_at(int l, struct ntx_xcache_layer *xl)
{
	static const uint64_t bytes[3] = { 12345, 12345, 9999 };
	uint64_t o = 1000 + (uint64_t)l * 300000;
	int k;

	for (k = 0; k < 3; k++) {
		xl->off[k] = o;
		xl->bytes[k] = bytes[k];
		o += bytes[k] * NE + 77;
	}
}

static int check(const struct ntx_xcache_layer *xl, const int *ids, int n, const void **ptr)
{
	int i, k;

	for (i = 0; i < n; i++)
		for (k = 0; k < 3; k++)
			if (!holds(ptr[3 * i + k], xl->off[k] + (uint64_t)ids[i] * xl->bytes[k],
				   xl->bytes[k]))
				return 0;
	return 1;
}

static void run(const char *path, int buffered)
{
	struct ntx_tunables tun;
	struct ntx_err err = { 0, "" };
	struct ntx_xcache_layer xl[NL];
	const uint64_t mx[3] = { 12345, 12345, 9999 };
	const void *ptr[3 * 4];
	struct ntx_xcache *c;
	uint64_t h, m, b;
	int l;
	const char *mode = buffered ? "buffered" : "direct";

	ntx_tunables_default(&tun);
	tun.dio_buffered = buffered;
	c = ntx_xcache_new(path, NL, NE, 3, mx, &tun, &err);
	if (!t_ok(c != NULL, "%s: cache of 3 experts (%s)", mode, err.msg))
		return;
	for (l = 0; l < NL; l++) {
		layer_at(l, &xl[l]);
		ntx_xcache_set_layer(c, l, &xl[l]);
	}
	{
		int a[3] = { 5, 0, 2 };

		t_ok(ntx_xcache_load(c, 1, a, 3, ptr, &err) == 0 && check(&xl[1], a, 3, ptr),
		     "%s: three experts of layer 1 read at unaligned offsets", mode);
	}
	{
		int a[2] = { 2, 3 }; /* 2 is cached; 3 replaces the least recent (5, read first) */

		t_ok(ntx_xcache_load(c, 1, a, 2, ptr, &err) == 0 && check(&xl[1], a, 2, ptr),
		     "%s: a hit and a miss", mode);
		ntx_xcache_counts(c, &h, &m, &b);
		t_ok(h == 1 && m == 4, "%s: 1 hit, 4 misses (%llu, %llu)", mode,
		     (unsigned long long)h, (unsigned long long)m);
	}
	{
		int a[1] = { 0 }; /* still cached: 5 went, not 0 */

		t_ok(ntx_xcache_load(c, 1, a, 1, ptr, &err) == 0 && check(&xl[1], a, 1, ptr),
		     "%s: the least recently used went", mode);
		ntx_xcache_counts(c, &h, &m, &b);
		t_ok(h == 2 && m == 4, "%s: expert 0 was a hit", mode);
	}
	{
		int a[3] = { 0, 1, 4 }; /* another layer's experts of the same index */
		int z[3] = { 1, 2, 3 };

		t_ok(ntx_xcache_load(c, 0, a, 3, ptr, &err) == 0 && check(&xl[0], a, 3, ptr),
		     "%s: layer 0's experts are not layer 1's", mode);
		t_ok(ntx_xcache_load(c, 1, z, 3, ptr, &err) == 0 && check(&xl[1], z, 3, ptr),
		     "%s: and back", mode);
		t_ok(ntx_xcache_load(c, 1, z, 4, ptr, &err) != 0 && strstr(err.msg, "holds 3"),
		     "%s: more experts than the cache holds: %s", mode, err.msg);
	}
	ntx_xcache_free(c);
}

int main(void)
{
	char path[] = "/tmp/ntx-test-xcache-XXXXXX";
	int fd = mkstemp(path);
	unsigned char *buf;
	size_t n = 700000, i;
	struct ntx_err err = { 0, "" };

	buf = malloc(n);
	if (!t_ok(fd >= 0 && buf, "a file of known bytes"))
		return t_done();
	for (i = 0; i < n; i++)
		buf[i] = byte_at(i);
	t_ok(write(fd, buf, n) == (ssize_t)n, "written");
	close(fd);
	run(path, 0);
	run(path, 1);
	/* a file cut short: the read fails, and the slot is not kept */
	{
		const uint64_t mx[3] = { 12345, 12345, 9999 };
		struct ntx_xcache_layer xl;
		struct ntx_xcache *c;
		const void *ptr[3];
		int a[1] = { 5 };

		if (truncate(path, 301000) != 0)
			t_ok(0, "truncate");
		c = ntx_xcache_new(path, NL, NE, 2, mx, NULL, &err);
		layer_at(1, &xl);
		ntx_xcache_set_layer(c, 1, &xl);
		t_ok(c && ntx_xcache_load(c, 1, a, 1, ptr, &err) != 0 && strstr(err.msg, "truncated"),
		     "a truncated file: %s", err.msg);
		err.msg[0] = 0;
		t_ok(c && ntx_xcache_load(c, 1, a, 1, ptr, &err) != 0,
		     "and again (nothing was kept): %s", err.msg);
		ntx_xcache_free(c);
	}
	t_ok(ntx_xcache_new("/nonexistent/pack.ntxp", 1, 1, 1, (uint64_t[3]){ 1, 1, 1 }, NULL,
			    &err) == NULL && strstr(err.msg, "/nonexistent/pack.ntxp"),
	     "a missing file: %s", err.msg);
	unlink(path);
	free(buf);
	return t_done();
}
