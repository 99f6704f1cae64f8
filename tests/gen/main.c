/* ntx-gguf-gen - write synthetic GGUF files (dense Llama, Mixtral-style llama
 * with experts, qwen3moe): small ones for tests and full-size shapes (random,
 * well-scaled weights in llama.cpp's type mixes) for speed and planning
 * tests. See usage() below. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gen.h"
#include "gguf_write.h"
#include "parse.h"
#include "types.h"
#include "version.h"


static const char *prog = "ntx-gguf-gen";

static void usage(FILE *f)
{
	fprintf(f, "usage: %s [--shape NAME] [--mix MIX] [options] -o FILE\n", prog);
}

static void help(void)
{
	usage(stdout);
	printf("\n"
	       "Write a synthetic GGUF model (dense Llama, Mixtral-style llama with experts,\n"
	       "or qwen3moe): random weights with the shapes and the per-tensor type mix that\n"
	       "llama.cpp would produce, and a tokenizer.\n"
	       "\n"
	       "Shape (a preset, then overrides):\n"
	       "  --shape NAME        dense llama: tiny (2 layers, 256 embd; default), 1b, 8b,\n"
	       "                      70b; llama with experts: tiny-moe, mixtral-8x7b;\n"
	       "                      qwen3moe: tiny-qwen3moe, qwen3-30b-a3b, qwen3-235b-a22b\n"
	       "  --layers N  --embd N  --heads N  --kv-heads N  --vocab N\n"
	       "  --ff N              FFN width (with experts: the width of one expert)\n"
	       "  --head-dim N        head dimension (default: embd / heads)\n"
	       "  --arch NAME         llama or qwen3moe (adds q/k norms; needs experts)\n"
	       "  --experts N         experts per layer (0: dense FFN, llama only)\n"
	       "  --experts-used N    experts used per token (default: the preset's, or 2)\n"
	       "  --ctx N             training context length (metadata only)\n"
	       "  --rope-base X       RoPE frequency base\n"
	       "  --rope-freqs        add a Llama 3.1 rope_freqs.weight (llama only)\n"
	       "  --tied              no output.weight (output tied to token_embd)\n"
	       "Types:\n"
	       "  --mix MIX           f32 f16 (default) bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k\n"
	       "  --type-of NAME=TYPE give tensor NAME type TYPE (repeatable)\n"
	       "Tokenizer (default: synthetic byte-level BPE, gpt2/llama-bpe, Llama 3 specials):\n"
	       "  --vocab-from FILE   copy every tokenizer.* key of FILE (its token count\n"
	       "                      becomes --vocab unless given, then they must agree)\n"
	       "  --no-vocab          no tokenizer keys\n"
	       "Output:\n"
	       "  -o, --output FILE   write FILE (through a temporary name, then renamed);\n"
	       "                      '-' writes standard output\n"
	       "  --sparse            header only, data region left as a hole (ftruncate)\n"
	       "  --alignment N       data alignment (default 32)\n"
	       "  --seed N            random seed (default 1); output depends on it only\n"
	       "  -t, --threads N     generator threads (default: all CPUs)\n"
	       "  -q, --quiet         no progress (progress shows when stderr is a terminal)\n"
	       "  -h, --help  -V, --version\n"
	       "\n"
	       "Exit status: 0 success, 1 error, 2 usage error.\n");
}

/* ---- progress ---- */

struct progress {
	int on;
	double t0, last;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct progress *p = ctx;
	double t = now();
	char a[32], b[32];

	if (!p->on || (t - p->last < 0.2 && done < total))
		return;
	p->last = t;
	fprintf(stderr, "\r%s: %3d%% %s of %s, %.0f MB/s   ", prog,
		total ? (int)(100.0 * (double)done / (double)total) : 100,
		ntx_fmt_size(done, a, sizeof a), ntx_fmt_size(total, b, sizeof b),
		(double)done / 1e6 / (t - p->t0 > 1e-6 ? t - p->t0 : 1e-6));
}

/* ---- options ---- */

enum {
	O_SHAPE = 256, O_LAYERS, O_EMBD, O_FF, O_HEADS, O_KV, O_VOCAB, O_CTX, O_ROPE_BASE,
	O_ROPE_FREQS, O_TIED, O_MIX, O_TYPE_OF, O_VOCAB_FROM, O_NO_VOCAB, O_SPARSE, O_SEED,
	O_ALIGN, O_HEAD_DIM, O_ARCH, O_EXPERTS, O_EXPERTS_USED
};

static int bad_value(const char *opt, const struct ntx_err *err)
{
	fprintf(stderr, "%s: %s: %s\n", prog, opt, err->msg);
	usage(stderr);
	return 2;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "shape", required_argument, NULL, O_SHAPE },
		{ "layers", required_argument, NULL, O_LAYERS },
		{ "embd", required_argument, NULL, O_EMBD },
		{ "ff", required_argument, NULL, O_FF },
		{ "heads", required_argument, NULL, O_HEADS },
		{ "kv-heads", required_argument, NULL, O_KV },
		{ "head-dim", required_argument, NULL, O_HEAD_DIM },
		{ "arch", required_argument, NULL, O_ARCH },
		{ "experts", required_argument, NULL, O_EXPERTS },
		{ "experts-used", required_argument, NULL, O_EXPERTS_USED },
		{ "vocab", required_argument, NULL, O_VOCAB },
		{ "ctx", required_argument, NULL, O_CTX },
		{ "rope-base", required_argument, NULL, O_ROPE_BASE },
		{ "rope-freqs", no_argument, NULL, O_ROPE_FREQS },
		{ "tied", no_argument, NULL, O_TIED },
		{ "mix", required_argument, NULL, O_MIX },
		{ "type-of", required_argument, NULL, O_TYPE_OF },
		{ "vocab-from", required_argument, NULL, O_VOCAB_FROM },
		{ "no-vocab", no_argument, NULL, O_NO_VOCAB },
		{ "sparse", no_argument, NULL, O_SPARSE },
		{ "seed", required_argument, NULL, O_SEED },
		{ "alignment", required_argument, NULL, O_ALIGN },
		{ "output", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 't' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct gen_model m;
	struct gen_override ovr[64];
	const char *out = NULL, *shape = "tiny";
	int layers = -1, embd = -1, ff = -1, heads = -1, kv = -1, ctx = -1, sparse = 0, quiet = 0;
	int head_dim = -1, arch = -1, experts = -1, experts_used = -1, hd;
	int64_t vocab = -1, seed = 1;
	double rope_base = -1;
	struct ntx_err err;
	struct ntx_gguf_writer *w = NULL;
	struct gen_fill *fill = NULL;
	struct progress pr = { 0, 0, 0 };
	uint64_t size = 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int c, rc = 1;

	memset(&m, 0, sizeof m);
	m.mix = MIX_F16;
	m.threads = ncpu > 0 ? (int)(ncpu > 256 ? 256 : ncpu) : 1;
	m.ovr = ovr;
	argv[0] = (char *)prog;
	ntx_err_clear(&err);
	while ((c = getopt_long(argc, argv, "o:t:qhV", opts, NULL)) != -1) {
		int64_t v;

		switch (c) {
		case O_SHAPE:
			shape = optarg;
			break;
		case O_LAYERS:
			if (ntx_parse_int(optarg, 1, 10000, &layers, &err))
				return bad_value("--layers", &err);
			break;
		case O_EMBD:
			if (ntx_parse_int(optarg, 2, 1 << 20, &embd, &err))
				return bad_value("--embd", &err);
			break;
		case O_FF:
			if (ntx_parse_int(optarg, 1, 1 << 22, &ff, &err))
				return bad_value("--ff", &err);
			break;
		case O_HEADS:
			if (ntx_parse_int(optarg, 1, 1 << 14, &heads, &err))
				return bad_value("--heads", &err);
			break;
		case O_KV:
			if (ntx_parse_int(optarg, 1, 1 << 14, &kv, &err))
				return bad_value("--kv-heads", &err);
			break;
		case O_HEAD_DIM:
			if (ntx_parse_int(optarg, 2, 1 << 14, &head_dim, &err))
				return bad_value("--head-dim", &err);
			if (head_dim % 2) {
				ntx_err_set(&err, NTX_EINVAL, "%d is odd (RoPE rotates pairs)", head_dim);
				return bad_value("--head-dim", &err);
			}
			break;
		case O_ARCH:
			arch = gen_arch_from_name(optarg);
			if (arch < 0) {
				fprintf(stderr, "%s: --arch: unknown architecture '%s' (llama qwen3moe)\n",
					prog, optarg);
				usage(stderr);
				return 2;
			}
			break;
		case O_EXPERTS:
			if (ntx_parse_int(optarg, 0, 1 << 16, &experts, &err))
				return bad_value("--experts", &err);
			if (experts == 1) {
				ntx_err_set(&err, NTX_EINVAL, "a mixture needs 2 experts or more (0: dense)");
				return bad_value("--experts", &err);
			}
			break;
		case O_EXPERTS_USED:
			if (ntx_parse_int(optarg, 1, 1 << 16, &experts_used, &err))
				return bad_value("--experts-used", &err);
			break;
		case O_VOCAB:
			if (ntx_parse_i64(optarg, 1, INT32_MAX, &vocab, &err))
				return bad_value("--vocab", &err);
			break;
		case O_CTX:
			if (ntx_parse_int(optarg, 1, 1 << 24, &ctx, &err))
				return bad_value("--ctx", &err);
			break;
		case O_ROPE_BASE:
			if (ntx_parse_double(optarg, 1e-3, 1e12, &rope_base, &err))
				return bad_value("--rope-base", &err);
			break;
		case O_ROPE_FREQS:
			m.rope_freqs = 1;
			break;
		case O_TIED:
			m.tied = 1;
			break;
		case O_MIX:
			if (gen_mix_from_name(optarg) < 0) {
				fprintf(stderr, "%s: --mix: unknown mix '%s' (f32 f16 bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k)\n",
					prog, optarg);
				usage(stderr);
				return 2;
			}
			m.mix = (enum gen_mix)gen_mix_from_name(optarg);
			break;
		case O_TYPE_OF: {
			char *eq = strchr(optarg, '=');
			int t = eq ? ntx_type_from_name(eq + 1) : -1;

			if (!eq || eq == optarg || t < 0 || !gen_type_supported((uint32_t)t) ||
			    m.n_ovr == (int)(sizeof ovr / sizeof ovr[0])) {
				fprintf(stderr, "%s: --type-of: expected NAME=TYPE with TYPE one of F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q5_1 Q4_K Q5_K Q6_K, got '%s'\n",
					prog, optarg);
				usage(stderr);
				return 2;
			}
			*eq = '\0';
			ovr[m.n_ovr].name = optarg;
			ovr[m.n_ovr].type = (uint32_t)t;
			ovr[m.n_ovr].used = 0;
			m.n_ovr++;
			break;
		}
		case O_VOCAB_FROM:
			m.vocab_from = optarg;
			break;
		case O_NO_VOCAB:
			m.no_vocab = 1;
			break;
		case O_SPARSE:
			sparse = 1;
			break;
		case O_SEED:
			if (ntx_parse_i64(optarg, 0, INT64_MAX, &seed, &err))
				return bad_value("--seed", &err);
			break;
		case O_ALIGN:
			if (ntx_parse_i64(optarg, 1, 1 << 30, &v, &err))
				return bad_value("--alignment", &err);
			if (v & (v - 1)) {
				ntx_err_set(&err, NTX_EINVAL, "%s is not a power of two", optarg);
				return bad_value("--alignment", &err);
			}
			m.alignment = (uint32_t)v;
			break;
		case 'o':
			out = optarg;
			break;
		case 't':
			if (ntx_parse_int(optarg, 1, 256, &m.threads, &err))
				return bad_value("--threads", &err);
			break;
		case 'q':
			quiet = 1;
			break;
		case 'h':
			help();
			return fclose(stdout) ? 1 : 0;
		case 'V':
			printf("%s (ntx) %s\n", prog, NTX_VERSION);
			return fclose(stdout) ? 1 : 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
		usage(stderr);
		return 2;
	}
	if (!out) {
		fprintf(stderr, "%s: missing -o FILE\n", prog);
		usage(stderr);
		return 2;
	}
	if (gen_preset(&m, shape)) {
		fprintf(stderr, "%s: --shape: unknown shape '%s' (%s)\n", prog, shape,
			gen_preset_names(' '));
		usage(stderr);
		return 2;
	}
	if (layers > 0) m.n_layer = layers;
	if (embd > 0) m.n_embd = embd;
	if (ff > 0) m.n_ff = ff;
	if (heads > 0) m.n_head = heads;
	if (kv > 0) m.n_head_kv = kv;
	else if (heads > 0 && m.n_head % m.n_head_kv) m.n_head_kv = m.n_head;
	if (head_dim > 0) m.head_dim = head_dim;
	if (arch >= 0) m.arch = (enum gen_arch)arch;
	if (experts >= 0) m.n_expert = experts;
	if (experts_used > 0) {
		if (experts_used > m.n_expert) {
			fprintf(stderr, "%s: --experts-used %d is more than the %d experts\n", prog,
				experts_used, m.n_expert);
			return 2;
		}
		m.n_expert_used = experts_used;
	} else if (m.n_expert_used < 1 || m.n_expert_used > m.n_expert) {
		m.n_expert_used = 2; /* a preset's count does not fit --experts */
	}
	if (m.n_expert == 0) m.n_expert_used = 0;
	if (ctx > 0) m.n_ctx = ctx;
	if (rope_base > 0) m.rope_base = rope_base;
	if (vocab > 0) m.n_vocab = vocab;
	m.seed = (uint64_t)seed;
	hd = gen_head_dim(&m);
	if ((m.head_dim <= 0 && (m.n_embd % m.n_head || hd % 2)) || hd < 2 ||
	    m.n_head % m.n_head_kv) {
		fprintf(stderr, "%s: heads %d and KV heads %d do not fit embedding length %d (need an even head dimension n_embd/heads, or --head-dim, and heads a multiple of KV heads)\n",
			prog, m.n_head, m.n_head_kv, m.n_embd);
		return 2;
	}
	if (m.arch == ARCH_QWEN3MOE && m.n_expert == 0) {
		fprintf(stderr, "%s: qwen3moe needs experts (--experts N)\n", prog);
		return 2;
	}
	if (m.rope_freqs && m.arch != ARCH_LLAMA) {
		fprintf(stderr, "%s: --rope-freqs is for llama, not %s\n", prog,
			gen_arch_name(m.arch));
		return 2;
	}
	if (m.vocab_from && m.no_vocab) {
		fprintf(stderr, "%s: --vocab-from and --no-vocab exclude each other\n", prog);
		return 2;
	}
	if (sparse && strcmp(out, "-") == 0) {
		fprintf(stderr, "%s: --sparse needs an output file, not standard output\n", prog);
		return 2;
	}
	if (m.vocab_from) {
		int64_t n;

		if (gen_vocab_count(m.vocab_from, &n, &err)) {
			fprintf(stderr, "%s: %s: %s\n", prog, m.vocab_from, err.msg);
			return 1;
		}
		if (vocab > 0 && vocab != n) {
			fprintf(stderr, "%s: %s has %lld tokens, but --vocab is %lld\n", prog,
				m.vocab_from, (long long)n, (long long)vocab);
			return 1;
		}
		m.n_vocab = n;
	} else if (!m.no_vocab && m.n_vocab < GEN_VOCAB_MIN) {
		fprintf(stderr, "%s: --vocab %lld is below %d, the smallest synthetic tokenizer (or use --no-vocab)\n",
			prog, (long long)m.n_vocab, GEN_VOCAB_MIN);
		return 2;
	}

	w = ntx_gguf_writer_new();
	if (!w) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return 1;
	}
	if (gen_describe(&m, w, &fill, &err)) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		rc = err.code == NTX_EINVAL ? 2 : 1; /* what the options asked for is impossible */
		goto done;
	}
	if (ntx_gguf_writer_layout(w, &size, NULL, &err)) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		rc = 2;
		goto done;
	}
	ntx_gguf_writer_set_chunk_bytes(w, 32u << 20);
	pr.on = !quiet && !sparse && isatty(STDERR_FILENO);
	pr.t0 = pr.last = now();
	ntx_gguf_writer_set_progress(w, on_progress, &pr);
	if (strcmp(out, "-") == 0) {
		if (ntx_gguf_writer_write_fd(w, STDOUT_FILENO, 0, &err)) {
			fprintf(stderr, "%s: standard output: %s\n", prog, err.msg);
			goto done;
		}
	} else if (ntx_gguf_writer_write_file(w, out, NTX_GGUF_WRITE_NOSYNC |
					      (sparse ? NTX_GGUF_WRITE_SPARSE : 0), &err)) {
		if (pr.on)
			fputc('\n', stderr);
		fprintf(stderr, "%s: %s: %s\n", prog, out, err.msg);
		goto done;
	}
	if (pr.on) {
		char a[32];
		double t = now() - pr.t0;

		fprintf(stderr, "\r%s: wrote %s: %s in %.1f s (%.0f MB/s)          \n", prog, out,
			ntx_fmt_size(size, a, sizeof a), t, (double)size / 1e6 / (t > 1e-6 ? t : 1e-6));
	}
	rc = 0;
done:
	gen_fill_free(fill);
	ntx_gguf_writer_free(w);
	if (fclose(stdout) != 0 && rc == 0) {
		fprintf(stderr, "%s: standard output: %s\n", prog, strerror(errno));
		rc = 1;
	}
	return rc;
}
