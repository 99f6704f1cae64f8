/* test_basics.c - size/number parsing, fp16 conversion, hashing, type table. */
#include <getopt.h>
#include <math.h>
#include <string.h>

#include "hash.h"
#include "parse.h"
#include "sampler.h"
#include "t.h"
#include "types.h"

static void test_sizes(void)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "0", 0 }, { "512", 512 }, { "24G", 24ull << 30 }, { "512M", 512ull << 20 },
		{ "1.5G", 3ull << 29 }, { "4k", 4096 }, { "2TiB", 2ull << 40 }, { "10gb", 10ull << 30 },
		{ "7B", 7 },
	};
	static const char *bad[] = { "", "G", "-1G", "12X", "1.5", "abc", "1e30T", " ", "0x10" };
	struct ntx_err err;
	size_t i;

	for (i = 0; i < sizeof good / sizeof good[0]; i++) {
		uint64_t v = 1234;
		int rc = ntx_parse_size(good[i].s, &v, &err);

		t_ok(rc == 0 && v == good[i].v, "size '%s' = %llu (got %llu)", good[i].s,
		     (unsigned long long)good[i].v, (unsigned long long)v);
	}
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v;

		t_ok(ntx_parse_size(bad[i], &v, &err) == -1 && err.msg[0],
		     "size '%s' rejected: %s", bad[i], err.msg);
	}
	{ /* budgets: the same sizes, at most 1 PiB */
		int64_t b = -1;

		t_ok(ntx_parse_budget("24G", &b, &err) == 0 && b == 24ll << 30, "budget 24G");
		t_ok(ntx_parse_budget("1024T", &b, &err) == 0 && b == 1ll << 50, "budget 1024T");
		t_ok(ntx_parse_budget("1025T", &b, &err) == -1 && strstr(err.msg, "too large"),
		     "budget 1025T rejected: %s", err.msg);
		t_ok(ntx_parse_budget("zzz", &b, &err) == -1 && err.msg[0], "budget zzz rejected");
	}
}

static void test_numbers(void)
{
	struct ntx_err err;
	int v;
	double d;
	int *ls, n;

	t_ok(ntx_parse_int("42", 0, 100, &v, &err) == 0 && v == 42, "int 42");
	t_ok(ntx_parse_int("101", 0, 100, &v, &err) == -1, "int out of range: %s", err.msg);
	t_ok(ntx_parse_int("4x", 0, 100, &v, &err) == -1, "int garbage: %s", err.msg);
	t_ok(ntx_parse_int("99999999999999999999", 0, 100, &v, &err) == -1, "int overflow");
	t_ok(ntx_parse_double("0.95", 0, 1, &d, &err) == 0 && d == 0.95, "double 0.95");
	t_ok(ntx_parse_double("nan", 0, 1, &d, &err) == -1, "double nan rejected");
	t_ok(ntx_parse_range_list("3,5,10-12,5", 16, &ls, &n, &err) == 0 && n == 5 &&
		     ls[0] == 3 && ls[4] == 12,
	     "range list");
	free(ls);
	t_ok(ntx_parse_range_list("3-20", 16, &ls, &n, &err) == -1, "range past end: %s", err.msg);
	/* duplicates beyond n_layer entries must not push later layers out */
	t_ok(ntx_parse_range_list("2,2,2,2,2,2,4", 5, &ls, &n, &err) == 0 && n == 2 && ls[0] == 2 &&
		     ls[1] == 4,
	     "range list with many duplicates keeps every layer");
	free(ls);
	t_ok(ntx_parse_range_list("0-4,1-3,4", 5, &ls, &n, &err) == 0 && n == 5 && ls[4] == 4,
	     "overlapping ranges");
	free(ls);
	t_ok(ntx_parse_range_list("3-1", 16, &ls, &n, &err) == -1 && strstr(err.msg, "reversed"),
	     "reversed range: %s", err.msg);
	t_ok(ntx_parse_range_list("", 16, &ls, &n, &err) == 0 && n == 0, "empty list");
	free(ls);
}

static void test_fp16(void)
{
	uint32_t h;
	int bad = 0;

	for (h = 0; h < 65536; h++) {
		float f = ntx_fp16_to_fp32((uint16_t)h);
		uint16_t back = ntx_fp32_to_fp16(f);

		if (isnan(f))
			continue;
		if (back != h)
			bad++;
	}
	t_ok(bad == 0, "fp16 -> fp32 -> fp16 round-trips all %d values (%d bad)", 65536, bad);
	t_ok(ntx_fp32_to_fp16(1.0f) == 0x3c00, "fp16(1.0)");
	t_ok(ntx_fp32_to_fp16(65520.0f) == 0x7c00, "fp16(65520) = inf");
	t_ok(ntx_fp32_to_fp16(1.0f + 1.0f / 2048) == 0x3c00, "fp16 ties to even (down)");
	t_ok(ntx_fp32_to_fp16(1.0f + 3.0f / 2048) == 0x3c02, "fp16 ties to even (up)");
	t_ok(ntx_fp32_to_fp16(5.96046448e-8f) == 1, "fp16 smallest subnormal");
	t_ok(ntx_bf16_to_fp32(ntx_fp32_to_bf16(3.140625f)) == 3.140625f, "bf16 round trip");
}

static void test_hash(void)
{
	const char *s = "Nobody inspects the spammish repetition";
	struct ntx_hash h;
	size_t i;
	uint64_t one;

	t_ok(ntx_hash64("", 0, 0) == 0xEF46DB3751D8E999ull, "xxh64 of empty input");
	t_ok(ntx_hash64("a", 1, 0) == 0xD24EC4F1A98C6E5Bull, "xxh64 of 'a'");
	one = ntx_hash64(s, strlen(s), 0);
	ntx_hash_init(&h, 0);
	for (i = 0; i < strlen(s); i++)
		ntx_hash_update(&h, s + i, 1);
	t_ok(ntx_hash_final(&h) == one, "streaming hash equals one-shot");
}

static void test_types(void)
{
	struct ntx_err err;
	uint64_t b;

	t_ok(ntx_type_get(12) && ntx_type_get(12)->type_size == 144, "Q4_K is 144 bytes per 256");
	t_ok(ntx_type_get(4) == NULL && ntx_type_get(31) == NULL && ntx_type_get(99) == NULL,
	     "removed and unknown ids have no entry");
	t_ok(strcmp(ntx_type_name(99), "type 99") == 0, "unknown type is named by number");
	t_ok(ntx_type_row_bytes(NTX_TYPE_Q6_K, 4096, &b, &err) == 0 && b == 16 * 210, "Q6_K row bytes");
	t_ok(ntx_type_row_bytes(NTX_TYPE_Q4_0, 33, &b, &err) == -1, "row not a block multiple: %s", err.msg);
	t_ok(ntx_type_from_name("q8_0") == NTX_TYPE_Q8_0, "type from name");
}

/* The sampling options the tools share (ntx_sampler_parse_opt) and -md. */
static void test_tool_opts(void)
{
	struct ntx_sampler_params sp;
	struct ntx_err err;
	char *argv[] = { "prog", "-md", "d.gguf", "-md", NULL };
	const char *path = NULL;

	ntx_sampler_defaults(&sp);
	t_ok(ntx_sampler_parse_opt("temp", "0.5", &sp, &err) == 1 && sp.temp == 0.5f &&
		     ntx_sampler_parse_opt("top-p", "0.9", &sp, &err) == 1 && sp.top_p == 0.9f &&
		     ntx_sampler_parse_opt("min-p", "0.1", &sp, &err) == 1 && sp.min_p == 0.1f &&
		     ntx_sampler_parse_opt("top-k", "7", &sp, &err) == 1 && sp.top_k == 7 &&
		     ntx_sampler_parse_opt("repeat-last-n", "-1", &sp, &err) == 1 &&
		     sp.repeat_last_n == -1 &&
		     ntx_sampler_parse_opt("repeat-penalty", "1.1", &sp, &err) == 1 &&
		     sp.repeat_penalty == 1.1f && ntx_sampler_parse_opt("seed", "42", &sp, &err) == 1 &&
		     sp.seed == 42,
	     "sampling options: each stored in its field");
	t_ok(ntx_sampler_parse_opt("threads", "4", &sp, &err) == 0, "another option: 0");
	t_ok(ntx_sampler_parse_opt("repeat-penalty", "0", &sp, &err) == -1 &&
		     !strcmp(err.msg, "must be > 0"),
	     "repeat-penalty 0: %s", err.msg);
	t_ok(ntx_sampler_parse_opt("top-p", "1.5", &sp, &err) == -1 &&
		     ntx_sampler_parse_opt("temp", "x", &sp, &err) == -1 &&
		     ntx_sampler_parse_opt("seed", "-1", &sp, &err) == -1 && sp.seed == 42,
	     "out-of-range or malformed values refused, nothing stored");
	optind = 2;
	t_ok(ntx_getopt_md(4, argv, &path) == 1 && !strcmp(path, "d.gguf") && optind == 3,
	     "-md FILE: the next argument");
	optind = 4;
	t_ok(ntx_getopt_md(4, argv, &path) == -1, "-md last: missing file");
	optind = 3;
	t_ok(ntx_getopt_md(4, argv, &path) == 0, "a plain -m: 0");
}

int main(void)
{
	test_tool_opts();
	test_sizes();
	test_numbers();
	test_fp16();
	test_hash();
	test_types();
	return t_done();
}
