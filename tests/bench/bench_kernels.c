/* bench_kernels.c - CPU weight-kernel micro-benchmark; one JSON document on
 * stdout.
 *
 * GEMV (n_tok = 1) for every weight type at the matrix shapes of a
 * 1.1B Llama (n_embd 2048, n_ff 8192, 4 KV heads of 64, vocab 32000), on 1
 * and N threads, with weights streamed from memory: each shape is replicated
 * across a buffer much larger than the last-level cache and the calls cycle
 * through the copies (best of several rounds). Reports GB/s of weights read
 * and GFLOP/s. Then matmul
 * with n_tok = 16, 32, 64 (a batch step, prompt chunks) on N threads, and an estimate of
 * full-model decode speed (16 layers + output, no attention or norms) from
 * the measured GEMV times, for each type and for the Q4_K_M mix.
 *
 * Weights sit in 2 MiB pages (madvise MADV_HUGEPAGE) unless --small-pages:
 * with 4 KiB pages the TLB misses and the prefetchers stopping at every page
 * boundary cost a third of the bandwidth on the machine we test on, which
 * is why the engine should keep weights in huge pages too.
 *
 * usage: bench_kernels [-t N] [--isa auto|avx512|avx2|scalar] [--ms MS]
 *        [--types q4_k,q8_0,...] [--small-pages] */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "clock.h"
#include "cpu_impl.h"
#include "parse.h"

#define ARENA_BYTES (384ull << 20) /* >> 32 MiB of L3 */
#define N_LAYER 16

struct shape {
	const char *name;
	int64_t n_out, n_in;
	int per_layer; /* matrices of this shape per layer (0: once per model) */
};

static const struct shape shapes[] = {
	{ "attn_q_o", 2048, 2048, 2 }, { "attn_k_v", 256, 2048, 2 }, { "ffn_gate_up", 8192, 2048, 2 },
	{ "ffn_down", 2048, 8192, 1 }, { "output", 32000, 2048, 0 },
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static const uint32_t types[] = { NTX_TYPE_F32, NTX_TYPE_F16, NTX_TYPE_BF16, NTX_TYPE_Q8_0,
				  NTX_TYPE_Q6_K, NTX_TYPE_Q5_K, NTX_TYPE_Q4_K, NTX_TYPE_Q4_0 };
#define N_TYPES (int)(sizeof types / sizeof types[0])

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Fill the arena with well-formed rows of type t: float types get values in
 * [-1, 1); quantized blocks random bytes with small finite fp16 scales. */
static void fill(unsigned char *a, size_t bytes, uint32_t t)
{
	const struct ntx_type_info *ti = ntx_type_get(t);
	size_t bs = (size_t)ti->type_size, i;

	if (t == NTX_TYPE_F32 || t == NTX_TYPE_F16 || t == NTX_TYPE_BF16) {
		for (i = 0; i + bs <= bytes; i += bs) {
			float v = (float)((int64_t)(rnd() >> 40) - (1 << 23)) / (float)(1 << 23);
			uint16_t h = t == NTX_TYPE_F16 ? ntx_fp32_to_fp16(v) : ntx_fp32_to_bf16(v);

			memcpy(a + i, t == NTX_TYPE_F32 ? (void *)&v : (void *)&h, bs);
		}
		return;
	}
	for (i = 0; i + 8 <= bytes; i += 8) {
		uint64_t r = rnd();

		memcpy(a + i, &r, 8);
	}
	for (i = 0; i + bs <= bytes; i += bs) {
		uint16_t d = ntx_fp32_to_fp16(0.01f);
		size_t off = t == NTX_TYPE_Q6_K ? offsetof(struct ntx_block_q6_k, d) : 0;

		memcpy(a + i + off, &d, 2);
		if (t == NTX_TYPE_Q4_K || t == NTX_TYPE_Q5_K)
			memcpy(a + i + 2, &d, 2);
	}
}

/* Seconds per call of y = W x (n_tok tokens), cycling through as many copies
 * of W as fit the arena so every call reads W from memory. The best of
 * ROUNDS rounds (each at least min_s / ROUNDS and 3 calls) is reported, so a
 * burst of other work on a shared machine does not set the result. */
#define ROUNDS 5
static double time_matmul(struct ntx_pool *pool, const unsigned char *arena, uint32_t t,
			  const struct shape *s, int64_t n_tok, double min_s, const float *x, float *y,
			  void *scratch)
{
	uint64_t rb = 0;
	size_t mat, copies;
	long calls = 0;
	double best = 1e30;

	ntx_type_row_bytes(t, s->n_in, &rb, NULL);
	mat = (size_t)(rb * (uint64_t)s->n_out);
	copies = ARENA_BYTES / mat;
	if (copies < 1)
		copies = 1;
	for (size_t c = 0; c < copies && c < 2; c++) { /* warm up */
		struct ntx_wmat w = { t, s->n_in, s->n_out, rb, arena + c * mat };

		ntx_cpu_matmul(pool, &w, x, n_tok, y, scratch);
	}
	for (int r = 0; r < ROUNDS; r++) {
		double t0 = ntx_now_s(), el;
		long k = 0;

		do {
			struct ntx_wmat w = { t, s->n_in, s->n_out, rb, arena + (calls % (long)copies) * mat };

			ntx_cpu_matmul(pool, &w, x, n_tok, y, scratch);
			calls++, k++;
			el = ntx_now_s() - t0;
		} while (el < min_s / ROUNDS || k < 3);
		if (el / (double)k < best)
			best = el / (double)k;
	}
	return best;
}

static void noop(void *ctx, int ith, int nth)
{
	(void)ctx, (void)ith, (void)nth;
}

static int usage(FILE *f, int rc)
{
	fprintf(f, "usage: bench_kernels [-t N] [--isa auto|avx512|avx2|scalar] [--ms MS] [--types LIST]\n"
		   "                     [--small-pages]\n");
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { { "threads", 1, 0, 't' }, { "isa", 1, 0, 'i' },
					      { "ms", 1, 0, 'm' },      { "types", 1, 0, 'T' },
					      { "small-pages", 0, 0, 'S' }, { "help", 0, 0, 'h' },
					      { 0, 0, 0, 0 } };
	int nth = 2, ms = 300, c, want[N_TYPES], huge = 1;
	const char *isa = "auto", *tlist = NULL;
	struct ntx_err err;
	unsigned char *arena;
	float *x, *y;
	void *scratch;
	struct ntx_pool *pools[2];
	double gemv_s[N_TYPES][N_SHAPES][2];
	json_t *root, *gemv, *mm, *est, *pool_j;

	while ((c = getopt_long(argc, argv, "t:h", opts, NULL)) != -1) {
		if (c == 't' && ntx_parse_int(optarg, 1, 256, &nth, &err) == 0)
			continue;
		if (c == 'm' && ntx_parse_int(optarg, 10, 100000, &ms, &err) == 0)
			continue;
		if (c == 'i') {
			isa = optarg;
			continue;
		}
		if (c == 'T') {
			tlist = optarg;
			continue;
		}
		if (c == 'S') {
			huge = 0;
			continue;
		}
		if (c == 'h')
			return usage(stdout, 0);
		if (c == 't' || c == 'm')
			fprintf(stderr, "bench_kernels: %s\n", err.msg);
		return usage(stderr, 2);
	}
	if (ntx_cpu_isa_select(isa) != 0) {
		fprintf(stderr, "bench_kernels: ISA '%s' is not available on this CPU\n", isa);
		return 1;
	}
	for (int i = 0; i < N_TYPES; i++) {
		char name[16];

		snprintf(name, sizeof name, ",%s,", ntx_type_name(types[i]));
		want[i] = 1;
		if (tlist) {
			char buf[256];

			snprintf(buf, sizeof buf, ",%s,", tlist);
			want[i] = strcasestr(buf, name) != NULL;
		}
	}
	arena = aligned_alloc(2u << 20, ARENA_BYTES);
	if (arena && huge && madvise(arena, ARENA_BYTES, MADV_HUGEPAGE) != 0)
		huge = 0; /* no THP: measure what we get */
	x = malloc(64 * 32000 * sizeof *x);
	y = malloc(64 * 32000 * sizeof *y);
	scratch = malloc(64 * 32000 * sizeof(float)); /* > any activation format */
	pools[0] = ntx_pool_new(1, &err);
	pools[1] = pools[0] ? ntx_pool_new(nth, &err) : NULL;
	if (!arena || !x || !y || !scratch || !pools[1]) {
		fprintf(stderr, "bench_kernels: %s\n", pools[1] ? "out of memory" : err.msg);
		return 1;
	}
	for (int i = 0; i < 64 * 32000; i++)
		x[i] = (float)((int64_t)(rnd() >> 40) - (1 << 23)) / (float)(1 << 23);

	root = json_object();
	json_object_set_new(root, "format", json_string("ntx.bench_kernels"));
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "isa", json_string(ntx_cpu_features()));
	json_object_set_new(root, "threads", json_integer(nth));
	json_object_set_new(root, "hugepages", json_boolean(huge));
	{
		long n = 20000;
		double t0 = ntx_now_s();

		for (long i = 0; i < n; i++)
			ntx_pool_run(pools[1], noop, NULL);
		pool_j = json_object();
		json_object_set_new(pool_j, "threads", json_integer(nth));
		json_object_set_new(pool_j, "empty_run_ns", json_real((ntx_now_s() - t0) / (double)n * 1e9));
		json_object_set_new(root, "pool", pool_j);
	}
	gemv = json_array();
	mm = json_array();
	for (int ti = 0; ti < N_TYPES; ti++) {
		uint32_t t = types[ti];

		if (!want[ti])
			continue;
		fill(arena, ARENA_BYTES, t);
		for (int si = 0; si < N_SHAPES; si++) {
			const struct shape *s = &shapes[si];
			uint64_t rb = 0;

			ntx_type_row_bytes(t, s->n_in, &rb, NULL);
			for (int p = 0; p < 2; p++) {
				double sec = time_matmul(pools[p], arena, t, s, 1, ms * 1e-3, x, y, scratch);
				json_t *o = json_object();

				gemv_s[ti][si][p] = sec;
				json_object_set_new(o, "type", json_string(ntx_type_name(t)));
				json_object_set_new(o, "shape", json_string(s->name));
				json_object_set_new(o, "n_out", json_integer(s->n_out));
				json_object_set_new(o, "n_in", json_integer(s->n_in));
				json_object_set_new(o, "threads", json_integer(p ? nth : 1));
				json_object_set_new(o, "us_per_call", json_real(sec * 1e6));
				json_object_set_new(o, "gb_per_s", json_real((double)(rb * (uint64_t)s->n_out) / sec * 1e-9));
				json_object_set_new(o, "gflop_per_s", json_real(2.0 * (double)(s->n_in * s->n_out) / sec * 1e-9));
				json_array_append_new(gemv, o);
			}
			if (si != 0 && si != 2 && si != 3)
				continue;
			for (int nt = 16; nt <= 64; nt *= 2) { /* a batch step, prompt chunks */
				double sec = time_matmul(pools[1], arena, t, s, nt, ms * 1e-3, x, y, scratch);
				json_t *o = json_object();

				json_object_set_new(o, "type", json_string(ntx_type_name(t)));
				json_object_set_new(o, "shape", json_string(s->name));
				json_object_set_new(o, "n_out", json_integer(s->n_out));
				json_object_set_new(o, "n_in", json_integer(s->n_in));
				json_object_set_new(o, "n_tok", json_integer(nt));
				json_object_set_new(o, "threads", json_integer(nth));
				json_object_set_new(o, "tok_per_s", json_real(nt / sec));
				json_object_set_new(o, "gflop_per_s",
						    json_real(2.0 * nt * (double)(s->n_in * s->n_out) / sec * 1e-9));
				json_object_set_new(o, "weight_gb_per_s",
						    json_real((double)(rb * (uint64_t)s->n_out) / sec * 1e-9));
				json_array_append_new(mm, o);
			}
		}
	}
	json_object_set_new(root, "gemv", gemv);
	json_object_set_new(root, "matmul", mm);

	/* decode estimate: sum of GEMV times over the model's matrices */
	est = json_array();
	for (int ti = 0; ti <= N_TYPES; ti++) {
		/* ti == N_TYPES: Q4_K_M = Q4_K, with Q6_K output and, in 8 of 16
		 * layers (llama.cpp's use_more_bits), Q6_K attn_v and ffn_down */
		int q4 = -1, q6 = -1;

		for (int k = 0; k < N_TYPES; k++) {
			q4 = types[k] == NTX_TYPE_Q4_K ? k : q4;
			q6 = types[k] == NTX_TYPE_Q6_K ? k : q6;
		}
		if (ti < N_TYPES ? !want[ti] : !(want[q4] && want[q6]))
			continue;
		for (int p = 0; p < 2; p++) {
			double sec = 0, bytes = 0;
			json_t *o = json_object();

			for (int si = 0; si < N_SHAPES; si++) {
				const struct shape *s = &shapes[si];
				int n_mat = s->per_layer ? s->per_layer * N_LAYER : 1;

				for (int m = 0; m < n_mat; m++) {
					int layer = m % N_LAYER, more = layer < 2 || layer >= 14 || (layer - 2) % 3 == 2;
					int k = ti;
					uint64_t rb = 0;

					if (ti == N_TYPES) {
						k = q4;
						if (si == 4 || (si == 3 && more) || (si == 1 && m >= N_LAYER && more))
							k = q6;
					}
					ntx_type_row_bytes(types[k], s->n_in, &rb, NULL);
					sec += gemv_s[k][si][p];
					bytes += (double)(rb * (uint64_t)s->n_out);
				}
			}
			json_object_set_new(o, "type", json_string(ti < N_TYPES ? ntx_type_name(types[ti]) : "Q4_K_M"));
			json_object_set_new(o, "threads", json_integer(p ? nth : 1));
			json_object_set_new(o, "weight_bytes_per_token", json_integer((json_int_t)bytes));
			json_object_set_new(o, "tok_per_s", json_real(1.0 / sec));
			json_object_set_new(o, "gb_per_s", json_real(bytes / sec * 1e-9));
			json_array_append_new(est, o);
		}
	}
	json_object_set_new(root, "decode_estimate_1b1", est);
	json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(5));
	fputc('\n', stdout);
	json_decref(root);
	ntx_pool_free(pools[0]);
	ntx_pool_free(pools[1]);
	free(arena), free(x), free(y), free(scratch);
	if (fclose(stdout) != 0) {
		perror("bench_kernels: stdout");
		return 1;
	}
	return 0;
}
