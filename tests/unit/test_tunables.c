/* test_tunables.c - the switches (lib/base/tunables.c): the defaults, and
 * what ntx_tunables_from_env makes of each variable, good and bad values
 * (doc/tunables.md is the contract). */
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "tunables.h"

static const char *const vars[] = {
	"NTX_CPU_SCALAR",    "NTX_NO_AMX",       "NTX_GEMV_DL",          "NTX_GEMV_EARLY",
	"NTX_GEMV_DL_SHAPE", "NTX_ATTN_PREFETCH", "NTX_ATTN_CHUNK",      "NTX_NO_PDL",
	"NTX_NO_CUBLAS",     "NTX_CUBLAS",        "NTX_NO_GRAPHS",       "NTX_NO_HUGEPAGES",
	"NTX_FAULT_READ",    "NTX_FAULT_READ_EVERY", "NTX_DIO_BUFFERED", "NTX_GEMV_MMA",
	"NTX_GEMV_MMA_OVERLAP", "NTX_SPEC_BACKOFF", "NTX_EXPERT_SPLIT", "NTX_EXPERT_CACHE", "NTX_EXPERT_UPLOAD", "NTX_PROBE_CACHE", "XDG_CACHE_HOME", "HOME",
};

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
		unsetenv(vars[i]);
}

/* ntx_tunables_from_env with name=value alone in the environment. */
static struct ntx_tunables with(const char *name, const char *value)
{
	struct ntx_tunables t;

	clear_env();
	setenv(name, value, 1);
	ntx_tunables_from_env(&t);
	unsetenv(name);
	return t;
}

static void test_defaults(void)
{
	struct ntx_tunables d, e;

	ntx_tunables_default(&d);
	t_ok(!d.cpu_scalar && !d.no_amx && d.gemv_dl == 1 && d.gemv_early == 1 &&
		     d.gemv_dl_shape == -1 && d.gemv_mma == 1 && d.gemv_mma_overlap == 1 && d.attn_prefetch == 1 &&
		     d.attn_chunk == 32 && !d.no_pdl &&
		     !d.no_cublas && !d.cublas[0] && !d.no_graphs && !d.no_hugepages && d.spec_backoff == 1 && d.expert_split == 0 && d.xcache_experts == 0 && d.expert_upload == 16 &&
		     d.fault_read == 0 && !d.fault_read_every && !d.dio_buffered &&
		     d.probe_cache == 1 && !d.cache_dir[0],
	     "defaults: every switch at what ntx does without them");
	clear_env();
	memset(&e, 0x5a, sizeof e);
	ntx_tunables_from_env(&e);
	t_ok(memcmp(&d, &e, sizeof d) == 0, "an empty environment gives the defaults");
}

/* "NTX_NO_X=1" switches: on for anything but "" and "0". */
static void test_set_flags(void)
{
	static const char *const names[] = { "NTX_CPU_SCALAR", "NTX_NO_AMX",       "NTX_NO_PDL",
					     "NTX_NO_CUBLAS",  "NTX_NO_GRAPHS",    "NTX_NO_HUGEPAGES",
					     "NTX_FAULT_READ_EVERY", "NTX_DIO_BUFFERED" };

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		struct ntx_tunables a = with(names[i], "1"), b = with(names[i], "yes"),
				    c = with(names[i], "0"), d = with(names[i], "");
		int *fa, *fb, *fc, *fd;

		switch (i) {
		case 0: fa = &a.cpu_scalar, fb = &b.cpu_scalar, fc = &c.cpu_scalar, fd = &d.cpu_scalar; break;
		case 1: fa = &a.no_amx, fb = &b.no_amx, fc = &c.no_amx, fd = &d.no_amx; break;
		case 2: fa = &a.no_pdl, fb = &b.no_pdl, fc = &c.no_pdl, fd = &d.no_pdl; break;
		case 3: fa = &a.no_cublas, fb = &b.no_cublas, fc = &c.no_cublas, fd = &d.no_cublas; break;
		case 4: fa = &a.no_graphs, fb = &b.no_graphs, fc = &c.no_graphs, fd = &d.no_graphs; break;
		case 5: fa = &a.no_hugepages, fb = &b.no_hugepages, fc = &c.no_hugepages, fd = &d.no_hugepages; break;
		case 6:
			fa = &a.fault_read_every, fb = &b.fault_read_every, fc = &c.fault_read_every,
			fd = &d.fault_read_every;
			break;
		default:
			fa = &a.dio_buffered, fb = &b.dio_buffered, fc = &c.dio_buffered, fd = &d.dio_buffered;
			break;
		}
		t_ok(*fa == 1 && *fb == 1 && *fc == 0 && *fd == 0, "%s: \"1\" and \"yes\" on, \"0\" and \"\" off",
		     names[i]);
	}
}

/* "NTX_X=0" switches: off for exactly "0", else on. */
static void test_on_flags(void)
{
	struct ntx_tunables t;

	t = with("NTX_GEMV_DL", "0");
	t_ok(t.gemv_dl == 0 && t.gemv_early == 1 && t.attn_prefetch == 1, "NTX_GEMV_DL=0: off");
	t = with("NTX_GEMV_EARLY", "0");
	t_ok(t.gemv_early == 0 && t.gemv_dl == 1, "NTX_GEMV_EARLY=0: off");
	t = with("NTX_ATTN_PREFETCH", "0");
	t_ok(t.attn_prefetch == 0 && t.gemv_dl == 1, "NTX_ATTN_PREFETCH=0: off");
	t = with("NTX_GEMV_MMA", "0");
	t_ok(t.gemv_mma == 0 && t.gemv_dl == 1 && t.gemv_early == 1, "NTX_GEMV_MMA=0: off");
	t = with("NTX_GEMV_MMA", "on");
	t_ok(t.gemv_mma == 1, "NTX_GEMV_MMA=on: on (only \"0\" turns it off)");
	t = with("NTX_GEMV_MMA_OVERLAP", "0");
	t_ok(t.gemv_mma_overlap == 0 && t.gemv_mma == 1, "NTX_GEMV_MMA_OVERLAP=0: off");
	t = with("NTX_SPEC_BACKOFF", "0");
	t_ok(t.spec_backoff == 0 && t.gemv_dl == 1, "NTX_SPEC_BACKOFF=0: off");
	t = with("NTX_SPEC_BACKOFF", "1");
	t_ok(t.spec_backoff == 1, "NTX_SPEC_BACKOFF=1: on");
	t = with("NTX_EXPERT_UPLOAD", "0");
	t_ok(t.expert_upload == 0, "NTX_EXPERT_UPLOAD=0: never");
	t = with("NTX_EXPERT_UPLOAD", "9");
	t_ok(t.expert_upload == 9, "NTX_EXPERT_UPLOAD=9");
	t = with("NTX_EXPERT_UPLOAD", "8");
	t_ok(t.expert_upload == 16, "NTX_EXPERT_UPLOAD=8 (a decode chunk's rows): the default");
	t = with("NTX_EXPERT_UPLOAD", "x");
	t_ok(t.expert_upload == 16, "NTX_EXPERT_UPLOAD=x: the default");
	t = with("NTX_EXPERT_SPLIT", "1");
	t_ok(t.expert_split == 1, "NTX_EXPERT_SPLIT=1: on");
	t = with("NTX_EXPERT_SPLIT", "0");
	t_ok(t.expert_split == 0, "NTX_EXPERT_SPLIT=0: off");
	t = with("NTX_EXPERT_CACHE", "3");
	t_ok(t.xcache_experts == 3, "NTX_EXPERT_CACHE=3");
	t = with("NTX_EXPERT_CACHE", "0");
	t_ok(t.xcache_experts == 0, "NTX_EXPERT_CACHE=0: the default");
	t = with("NTX_EXPERT_CACHE", "2000");
	t_ok(t.xcache_experts == 0, "NTX_EXPERT_CACHE=2000: the default");
	t = with("NTX_GEMV_DL", "");
	t_ok(t.gemv_dl == 1, "NTX_GEMV_DL=\"\": on (only \"0\" turns it off)");
	t = with("NTX_ATTN_PREFETCH", "00");
	t_ok(t.attn_prefetch == 1, "NTX_ATTN_PREFETCH=00: on");
	t = with("NTX_GEMV_EARLY", "1");
	t_ok(t.gemv_early == 1, "NTX_GEMV_EARLY=1: on");
}

static void test_values(void)
{
	static const struct {
		const char *v;
		int want;
	} shape[] = { { "0", 0 }, { "1", 1 }, { "2", 2 }, { "3", -1 }, { "12", -1 }, { "", -1 }, { "x", -1 } },
	  chunk[] = { { "64", 64 },     { "32", 32 }, { "65536", 65536 }, { " 96", 96 }, { "48", 32 },
		      { "0", 32 },      { "-64", 32 }, { "65568", 32 }, { "64x", 32 }, { "", 32 },
		      { "99999999999999999999", 32 } };
	static const struct {
		const char *v;
		int64_t want;
	} fault[] = { { "3", 3 }, { "1", 1 }, { "", 0 }, { "0", -1 }, { "x", -1 }, { "-2", -1 }, { "4k", -1 } };
	struct ntx_tunables t;
	char big[NTX_TUNABLES_PATH_MAX + 10];

	for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
		t = with("NTX_GEMV_DL_SHAPE", shape[i].v);
		t_ok(t.gemv_dl_shape == shape[i].want, "NTX_GEMV_DL_SHAPE=\"%s\": %d (want %d)", shape[i].v,
		     t.gemv_dl_shape, shape[i].want);
	}
	for (size_t i = 0; i < sizeof chunk / sizeof chunk[0]; i++) {
		t = with("NTX_ATTN_CHUNK", chunk[i].v);
		t_ok(t.attn_chunk == chunk[i].want, "NTX_ATTN_CHUNK=\"%s\": %d (want %d)", chunk[i].v,
		     t.attn_chunk, chunk[i].want);
	}
	for (size_t i = 0; i < sizeof fault / sizeof fault[0]; i++) {
		t = with("NTX_FAULT_READ", fault[i].v);
		t_ok(t.fault_read == fault[i].want, "NTX_FAULT_READ=\"%s\": %lld (want %lld)", fault[i].v,
		     (long long)t.fault_read, (long long)fault[i].want);
	}
	t = with("NTX_CUBLAS", "/opt/lib/libcublas.so.13");
	t_ok(strcmp(t.cublas, "/opt/lib/libcublas.so.13") == 0, "NTX_CUBLAS: the path");
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	t = with("NTX_CUBLAS", big);
	t_ok(t.cublas[0] == '\0', "NTX_CUBLAS longer than a path can be: ignored");
}

/* The probe cache: NTX_PROBE_CACHE=0 turns it off; its directory is
 * $XDG_CACHE_HOME when absolute, else $HOME/.cache. */
static void test_cache(void)
{
	struct ntx_tunables t;

	t = with("NTX_PROBE_CACHE", "0");
	t_ok(t.probe_cache == 0, "NTX_PROBE_CACHE=0: off");
	t = with("NTX_PROBE_CACHE", "1");
	t_ok(t.probe_cache == 1, "NTX_PROBE_CACHE=1: on");
	t = with("XDG_CACHE_HOME", "/var/cache/u");
	t_ok(!strcmp(t.cache_dir, "/var/cache/u"), "XDG_CACHE_HOME: '%s'", t.cache_dir);
	t = with("HOME", "/home/u");
	t_ok(!strcmp(t.cache_dir, "/home/u/.cache"), "HOME alone: '%s'", t.cache_dir);
	clear_env();
	setenv("HOME", "/home/u", 1);
	setenv("XDG_CACHE_HOME", "relative/dir", 1);
	ntx_tunables_from_env(&t);
	t_ok(!strcmp(t.cache_dir, "/home/u/.cache"),
	     "a relative XDG_CACHE_HOME is ignored (the XDG spec): '%s'", t.cache_dir);
	setenv("XDG_CACHE_HOME", "", 1);
	ntx_tunables_from_env(&t);
	t_ok(!strcmp(t.cache_dir, "/home/u/.cache"), "an empty XDG_CACHE_HOME too: '%s'",
	     t.cache_dir);
	clear_env();
}

int main(void)
{
	test_defaults();
	test_set_flags();
	test_on_flags();
	test_values();
	test_cache();
	clear_env();
	return t_done();
}
