/* test_cuda_e2e.c - the CUDA engine against the CPU engine (the oracle) on
 * every fixture model: logits at every prompt position and at every
 * teacher-forced generation step within a tolerance, greedy continuations
 * identical wherever the top-1/top-2 margin exceeds twice that tolerance, and
 * the same greedy text for stories260K and the trained tiny model.
 *
 * Every model is compared twice: with an F32 KV cache on both sides, where
 * float weights must agree to 1e-3 (the two sides only sum in another
 * order), and with the default F16 KV cache,
 * where one F16 rounding of K or V that lands on the other side of a
 * boundary moves logits by ~1e-2 x s (README 3.2: stories260K 1.8e-2), with
 * s = the CPU logits' standard deviation / 0.44 (the set-A scale the README
 * measured at; at least 1).
 * Quantized weights: 0.1 x s max and 0.015 x s mean in both cases (the CPU
 * quantizes activations per 256 for K-quants, the GPU per 32: one int8
 * rounding that flips moves set-A logits by ~1e-2, README 3.2). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_int.h"
#include "model.h"
#include "sampler.h"
#include "t.h"
#include "types.h"

struct mcase {
	const char *file;
	double tol, mean_tol;
};

static const struct mcase cases[] = {
	{ "models/ref-a-f32.gguf", 1e-2, 0 },
	{ "models/ref-a-f16.gguf", 1e-2, 0 },
	{ "models/ref-a-q8_0.gguf", 0.1, 0.015 },
	{ "models/ref-a-q4_0.gguf", 0.1, 0.015 },
	{ "models/ref-a-q4_k_m.gguf", 0.1, 0.015 },
	{ "models/ref-a-q5_k_m.gguf", 0.1, 0.015 },
	{ "models/ref-a-q6_k.gguf", 0.1, 0.015 },
	{ "quants/ref-a-q5_0.gguf", 0.1, 0.015 },
	{ "models/stories260K.gguf", 1e-2, 0 },
	{ "tinymodel/tinymodel-f16.gguf", 1e-2, 0 },
	{ "tinymodel/tinymodel-q8_0.gguf", 0.1, 0.015 },
	{ "tinymodel/tinymodel-q4_k_m.gguf", 0.1, 0.015 },
};

#define NP 24
#define NG 24

static struct ntx_engine *mk(const struct ntx_model *m, enum ntx_backend b, int kv32,
			     struct ntx_err *err)
{
	struct ntx_engine_opts o;

	memset(&o, 0, sizeof o);
	o.backend = b;
	o.kv_type = kv32 ? NTX_KV_F32 : NTX_KV_F16;
	o.n_ctx = 256;
	o.n_threads = 0;
	return ntx_engine_new(m, &o, err);
}

/* Prompt rows then teacher-forced rows of ids[NP..NP+NG) into out. */
static int run(struct ntx_engine *e, const int32_t *ids, float *out, int64_t V,
	       struct ntx_err *err)
{
	int32_t pos[NP + NG];
	uint8_t want[NP];
	struct ntx_batch b;
	int i;

	for (i = 0; i < NP + NG; i++)
		pos[i] = i;
	memset(want, 1, sizeof want);
	memset(&b, 0, sizeof b);
	b.n_tok = NP;
	b.tok = ids;
	b.pos = pos;
	b.want = want;
	if (ntx_engine_eval(e, &b, NULL, out, err))
		return -1;
	for (i = 0; i < NG; i++) {
		b.n_tok = 1;
		b.tok = &ids[NP + i];
		b.pos = &pos[NP + i];
		b.want = NULL;
		if (ntx_engine_eval(e, &b, NULL, out + (int64_t)(NP + i) * V, err))
			return -1;
	}
	return 0;
}

static double margin(const float *row, int64_t V)
{
	int32_t a = ntx_argmax(row, V);
	float b = -INFINITY;
	int64_t i;

	for (i = 0; i < V; i++)
		if (i != a && row[i] > b)
			b = row[i];
	return row[a] - b;
}

static void one_kv(const struct mcase *mc, int kv32)
{
	char path[512];
	struct ntx_err err = { 0 };
	struct ntx_model *m;
	struct ntx_engine *cpu = NULL, *gpu = NULL;
	int64_t V, i, n;
	int32_t ids[NP + NG];
	float *lc = NULL, *lg = NULL;
	double mx = 0, sum = 0, scale = 1, tol;
	uint64_t x = 12345;

	if (mc->file[0] == '/' || mc->file[0] == '.')
		snprintf(path, sizeof path, "%s", mc->file);
	else
		snprintf(path, sizeof path, "%s/%s", t_fixtures(), mc->file);
	m = ntx_model_open(path, 0, &err);
	if (!t_ok(m != NULL, "%s: open (%s)", mc->file, err.msg))
		return;
	V = m->cfg.n_vocab;
	cpu = mk(m, NTX_BACKEND_CPU, kv32, &err);
	if (!t_ok(cpu != NULL, "%s: CPU engine (%s)", mc->file, err.msg))
		goto out;
	gpu = mk(m, NTX_BACKEND_CUDA, kv32, &err);
	if (!t_ok(gpu != NULL, "%s: CUDA engine (%s)", mc->file, err.msg))
		goto out;
	for (i = 0; i < NP + NG; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((x >> 33) % (uint64_t)V);
	}
	ids[0] = 1 % (int32_t)V;
	n = (int64_t)(NP + NG) * V;
	lc = malloc((size_t)n * sizeof(float));
	lg = malloc((size_t)n * sizeof(float));
	for (i = 0; i < n; i++)
		lg[i] = NAN;
	if (!t_ok(run(cpu, ids, lc, V, &err) == 0, "%s: CPU run (%s)", mc->file, err.msg) ||
	    !t_ok(run(gpu, ids, lg, V, &err) == 0, "%s: CUDA run (%s)", mc->file, err.msg))
		goto out;
	{
		double s1 = 0, s2 = 0, sd;

		for (i = 0; i < n; i++) {
			s1 += lc[i];
			s2 += (double)lc[i] * lc[i];
		}
		sd = sqrt(fmax(0, s2 / n - (s1 / n) * (s1 / n)));
		scale = sd / 0.44 > 1 ? sd / 0.44 : 1;
	}
	tol = mc->tol * scale;
	if (mc->mean_tol == 0 && kv32)
		tol = 1e-3; /* float weights, F32 KV: only summation order differs */
	for (i = 0; i < n; i++) {
		double d = fabs((double)lc[i] - lg[i]);

		if (!(d <= mx))
			mx = isnan(d) ? INFINITY : d;
		sum += d;
	}
	t_ok(mx <= tol && (!mc->mean_tol || sum / n <= mc->mean_tol * scale),
	     "%s (KV %s): CUDA vs CPU logits (prompt + teacher-forced): max %.2e (tol %.2e) mean %.2e",
	     mc->file, kv32 ? "f32" : "f16", mx, tol, sum / n);
	/* greedy continuation from the prompt, compared where decisive */
	{
		int32_t cc = ntx_argmax(lc + (int64_t)(NP - 1) * V, V);
		int32_t cg = ntx_argmax(lg + (int64_t)(NP - 1) * V, V);
		int steps = 0, same = 1, id_bad = 0;
		float *rc = malloc((size_t)V * 4), *rg = malloc((size_t)V * 4);
		struct ntx_batch b;
		int32_t p, cid, gid, gid2;

		memset(&b, 0, sizeof b);
		for (i = 0; i < 32 && rc && rg; i++) {
			if (margin(i ? rc : lc + (int64_t)(NP - 1) * V, V) <= 2 * tol)
				break;
			if (cc != cg) {
				same = 0;
				break;
			}
			steps++;
			p = NP + (int32_t)i;
			b.n_tok = 1;
			b.tok = &cc;
			b.pos = &p;
			b.ids = &cid; /* logits and their argmax (b.ids) together */
			if (ntx_engine_eval(cpu, &b, NULL, rc, &err))
				break;
			b.tok = &cg;
			b.ids = &gid;
			if (ntx_engine_eval(gpu, &b, NULL, rg, &err))
				break;
			/* the same step again with only the ids out of the device */
			b.ids = &gid2;
			if (ntx_engine_eval(gpu, &b, NULL, NULL, &err))
				break;
			cc = ntx_argmax(rc, V);
			cg = ntx_argmax(rg, V);
			id_bad += cid != cc || gid != cg || gid2 != cg;
		}
		t_ok(same, "%s (KV %s): greedy ids identical on %d decisive steps", mc->file,
		     kv32 ? "f32" : "f16", steps);
		t_ok(id_bad == 0 && !err.msg[0],
		     "%s (KV %s): b.ids == argmax of the logits on both engines, and with the GPU's "
		     "logits left on the device (%d of %d steps differ) %s",
		     mc->file, kv32 ? "f32" : "f16", id_bad, steps, err.msg);
		free(rc);
		free(rg);
	}
out:
	free(lc);
	free(lg);
	ntx_engine_free(cpu);
	ntx_engine_free(gpu);
	ntx_model_close(m);
}

static void one(const struct mcase *mc)
{
	one_kv(mc, 1);
	one_kv(mc, 0);
}

/* Models named on the command line (absolute or relative paths): float
 * weights 1e-2 (synthetic models have larger logits than set A), quantized
 * 0.1 / 0.015 mean; without arguments, the fixture models. */
int main(int argc, char **argv)
{
	size_t i;
	char why[256];
	int a;

	if (!ntx_engine_gpu_usable(0, why, sizeof why)) {
		t_ok(0, "CUDA device: %s", why);
		return t_done();
	}
	{
		/* pinned buffers are page-aligned (O_DIRECT reads into staging) */
		static const size_t sizes[] = { 1, 100, 2048, 3000, 4096, 5000, 1 << 20, 503808 };
		int bad = 0;
		struct ntx_err err = { 0 };

		for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			char *p = ntx_host_alloc(sizes[i], &err);

			bad += !p || ((uintptr_t)p & 4095);
			if (p)
				memset(p, 1, sizes[i]);
			ntx_host_free(p);
		}
		t_ok(bad == 0, "ntx_host_alloc: 8 pinned buffers of 1 B to 1 MiB, all page-aligned (%d not)",
		     bad);
	}
	if (argc > 1) {
		for (a = 1; a < argc; a++) {
			struct mcase mc = { argv[a], 1e-2, 0 };
			struct ntx_err err;
			struct ntx_model *m = ntx_model_open(argv[a], 0, &err);
			uint64_t k;

			for (k = 0; m && k < m->gguf->n_tensors; k++) {
				uint32_t ty = m->gguf->tensors[k].type;

				if (ty != NTX_TYPE_F32 && ty != NTX_TYPE_F16 && ty != NTX_TYPE_BF16) {
					mc.tol = 0.1;
					mc.mean_tol = 0.015;
					break;
				}
			}
			ntx_model_close(m);
			one(&mc);
		}
		return t_done();
	}
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
		one(&cases[i]);
	return t_done();
}
