/* tunables.c - the one reader of the NTX_* switches (tunables.h,
 * doc/tunables.md). Two kinds of flags, as they always were: "NTX_NO_X=1"
 * turns something off when set to anything but "" or "0"; "NTX_X=0" turns a
 * default on off when set to exactly "0". */
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "tunables.h"

/* 1 when name is set to anything but "" or "0". */
static int env_set(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

/* 0 when name is exactly "0", else 1 (a switch that is on by default). */
static int env_on(const char *name)
{
	const char *v = getenv(name);

	return !(v && strcmp(v, "0") == 0);
}

void ntx_tunables_default(struct ntx_tunables *t)
{
	memset(t, 0, sizeof *t);
	t->gemv_dl = 1;
	t->gemv_early = 1;
	t->gemv_dl_shape = -1;
	t->gemv_mma = 1;
	t->gemv_mma_overlap = 1;
	t->attn_prefetch = 1;
	t->attn_chunk = 32;
	t->spec_backoff = 1;
	t->expert_upload = 16;
	t->probe_cache = 1;
}

/* The directory for cached files: $XDG_CACHE_HOME when it is an absolute
 * path (the XDG spec ignores a relative one), else $HOME/.cache; "" when
 * neither is set or the path is too long. */
static void cache_dir(char *out, size_t n)
{
	const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");

	out[0] = '\0';
	if (x && x[0] == '/') {
		if (strlen(x) < n)
			strcpy(out, x);
	} else if (h && *h && strlen(h) + sizeof "/.cache" <= n) {
		strcpy(out, h);
		strcat(out, "/.cache");
	}
}

/* The integer e holds (strtol: leading blanks and a sign are read), or
 * -1 when e is unset or not one integer whole. */
static long env_long(const char *e)
{
	char *end = NULL;
	long c;

	if (!e)
		return -1;
	c = strtol(e, &end, 10);
	return end == e || *end ? -1 : c;
}

/* NTX_ATTN_CHUNK: a multiple of 32 in [32, 65536]; anything else is the
 * default. */
static int attn_chunk(const char *e)
{
	long c = env_long(e);

	return c > 65536 || c < 32 || c % 32 ? 32 : (int)c;
}

/* NTX_EXPERT_CACHE: an integer 1..1024, else 0 (the default). */
static int xcache_experts(const char *e)
{
	long c = env_long(e);

	return c < 1 || c > 1024 ? 0 : (int)c;
}

/* NTX_EXPERT_UPLOAD: 0 (never) or an integer 9..65536 (above a decode
 * chunk's 8 rows: a decode step never uploads), else 16 (the default). */
static int expert_upload(const char *e)
{
	long c = env_long(e);

	return c != 0 && (c < 9 || c > 65536) ? 16 : (int)c;
}

/* NTX_FAULT_READ: unset or "" 0 (off); an integer >= 1; else -1. */
static int64_t fault_read(const char *s)
{
	int64_t v;

	if (!s || !*s)
		return 0;
	return ntx_parse_i64(s, 1, INT64_MAX, &v, NULL) ? -1 : v;
}

void ntx_tunables_from_env(struct ntx_tunables *t)
{
	const char *s;

	ntx_tunables_default(t);
	t->cpu_scalar = env_set("NTX_CPU_SCALAR");
	t->no_amx = env_set("NTX_NO_AMX");

	t->gemv_dl = env_on("NTX_GEMV_DL");
	t->gemv_early = env_on("NTX_GEMV_EARLY");
	s = getenv("NTX_GEMV_DL_SHAPE");
	t->gemv_dl_shape = s && *s >= '0' && *s <= '2' && !s[1] ? *s - '0' : -1;
	t->gemv_mma = env_on("NTX_GEMV_MMA");
	t->gemv_mma_overlap = env_on("NTX_GEMV_MMA_OVERLAP");
	t->attn_prefetch = env_on("NTX_ATTN_PREFETCH");
	t->attn_chunk = attn_chunk(getenv("NTX_ATTN_CHUNK"));
	t->no_pdl = env_set("NTX_NO_PDL");
	t->no_cublas = env_set("NTX_NO_CUBLAS");
	s = getenv("NTX_CUBLAS");
	if (s && strlen(s) < sizeof t->cublas) /* longer: no such path (PATH_MAX) */
		strcpy(t->cublas, s);

	t->no_graphs = env_set("NTX_NO_GRAPHS");
	t->no_hugepages = env_set("NTX_NO_HUGEPAGES");
	t->xcache_experts = xcache_experts(getenv("NTX_EXPERT_CACHE"));
	t->expert_upload = expert_upload(getenv("NTX_EXPERT_UPLOAD"));
	t->spec_backoff = env_on("NTX_SPEC_BACKOFF");
	t->expert_split = env_set("NTX_EXPERT_SPLIT");

	t->fault_read = fault_read(getenv("NTX_FAULT_READ"));
	t->fault_read_every = env_set("NTX_FAULT_READ_EVERY");
	t->dio_buffered = env_set("NTX_DIO_BUFFERED");

	t->probe_cache = env_on("NTX_PROBE_CACHE");
	cache_dir(t->cache_dir, sizeof t->cache_dir);
}
