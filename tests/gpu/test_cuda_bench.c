/* test_cuda_bench.c - timings of the hot kernels at 8B-model shapes, with a
 * sampled correctness check of each big run (so a fast wrong kernel fails):
 *   GEMV, n_tok 1 and 8, every weight type (split rows of Q4_0 / Q8_0 /
 *     Q6_K too), on 4096x4096, 4096x14336, 14336x4096 and 4096x128256 (n_in x
 *     n_out): GB/s of weight bytes (n_tok 8: the ratio of its time per weight
 *     byte to n_tok 1's); Q4_K, Q5_K and split rows also through the
 *     direct-load GEMV in its three shapes (ntx_cuda_gemv_dl_variant), so the
 *     staged and direct-load kernels are compared in one run; rotating over
 *     copies of the matrix totalling >= 256 MB so that the 50 MB L2 cannot
 *     serve repeats; activations in the weight type's CPU-matching q8
 *     format (ntx_cuda_q8_fmt);
 *   fused gate/up (SwiGLU) GEMV, Q4_K, Q8_0, F16 4096 -> 14336, n_tok 1, 8;
 *   activation producers: quantize_q8_fmt and rmsnorm_fmt (Q8_K, Q8_0);
 *   matmul, n_tok 512: TFLOP/s (cuBLAS when it loads, else our WMMA);
 *   attention: decode at 4096 positions and a 512-token prefill;
 *   gemv_multi: Q, K, V of an 8B Q4_K_M layer (Q4_K, Q4_K, Q6_K) in one
 *     launch vs three ntx_cuda_gemv launches;
 *   attention_q8 (merge and q8 output in one launch) at pos 20 .. 4095
 *     (--attention: only the attention benchmarks);
 *   layer: the per-layer kernel sequence of the engine (ntx_gpu_layer) for
 *     an 8B Q4_K_M layer (Q4_K q/k/o/gate/up, Q6_K v/down), n_tok 1, F16
 *     KV cache, as a CUDA graph over 4 layers' weights (556 MB, so L2
 *     cannot hold them) replayed 250 times: us per layer and the implied
 *     tok/s for 32 layers + the Q6_K head; once as the engine runs it and
 *     once unfused (Q, K, V as three GEMVs, attention + quantize_q8); then
 *     the engine's sequence captured with programmatic dependent launch
 *     forced on and forced off ("# bench layer pdl=on: X us ...",
 *     "# bench layer pdl=off: Y us ...": on devices without PDL, both off);
 *     and with each GEMV (staged with GGUF Q6_K, direct-load with split
 *     Q6_K): the sequence, then each of its 9 kernels alone.
 * --k8: only Q4_K and split Q6_K GEMVs at 1, 2, 4, 8 tokens; --layer8: only
 *   the layer benchmarks, for 1 token and then for verification passes of
 *   8 and 2 tokens (the sequence and each kernel, the head at that width);
 * --one q4k|q6ks N_IN N_OUT N_TOK SWIGLU: one GEMV (a target for ncu).
 * Each timing is the median over 5 repetitions of back-to-back launches
 * timed with CUDA events, after a warm-up. Lines start with "# bench". */
#include "gpu_util.h"

#define PATTERN_BYTES ((size_t)32 << 20)
#define ROTATE_BYTES ((size_t)256 << 20)
#define HBM_GBS 4800.0
#define NMSE_SAMPLE_EXACT 1e-8
#define NMSE_SAMPLE_MM 1e-5

#define SPLIT(t) (NTX_CUDA_SPLIT | (t))
static const uint32_t all_types[] = { NTX_TYPE_F32, NTX_TYPE_F16, NTX_TYPE_BF16, NTX_TYPE_Q4_0,
				      NTX_TYPE_Q8_0, NTX_TYPE_Q4_K, NTX_TYPE_Q5_K, NTX_TYPE_Q6_K,
				      SPLIT(NTX_TYPE_Q4_0), SPLIT(NTX_TYPE_Q8_0), SPLIT(NTX_TYPE_Q6_K) };
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

/* A weight matrix in device memory, ncopy copies, filled by repeating a
 * random pattern (whole blocks) so it can be rebuilt on the host. */
struct wm {
	uint32_t t;
	int64_t n_in, n_out;
	size_t rb, bytes;
	int ncopy;
	unsigned char *d;
	const unsigned char *pat;
	size_t plen;
};

static unsigned char *g_pat[N_TYPES];
static size_t g_plen[N_TYPES];

static void pattern_for(int ti)
{
	uint32_t t = all_types[ti];
	int bs = block_of(t);
	size_t bb = row_bytes(t, bs), nblk = PATTERN_BYTES / bb;

	if (g_pat[ti])
		return;
	g_plen[ti] = nblk * bb;
	g_pat[ti] = malloc(g_plen[ti]);
	rnd_rows(t, g_pat[ti], (int64_t)bs * (int64_t)nblk, 1);
}

static void wm_init(struct wm *m, int ti, int64_t n_in, int64_t n_out, int rotate)
{
	size_t done;

	pattern_for(ti);
	m->t = all_types[ti], m->n_in = n_in, m->n_out = n_out;
	m->rb = row_bytes(m->t, n_in), m->bytes = m->rb * (size_t)n_out;
	m->ncopy = rotate ? (int)((ROTATE_BYTES + m->bytes - 1) / m->bytes) : 1;
	if (m->ncopy > 16)
		m->ncopy = 16;
	m->pat = g_pat[ti], m->plen = g_plen[ti];
	m->d = dev_alloc(m->bytes * m->ncopy);
	dev_put(m->d, m->pat, m->plen < m->bytes ? m->plen : m->bytes);
	for (done = m->plen; done < m->bytes; done += m->plen) {
		size_t n = m->bytes - done < m->plen ? m->bytes - done : m->plen;

		CK(cudaMemcpy(m->d + done, m->d, n, cudaMemcpyDeviceToDevice));
	}
	if (m->t & NTX_CUDA_SPLIT) /* the engine's layout of resident weights */
		T_CUDA(ntx_cuda_repack(ntx_cuda_base_type(m->t), m->d, n_in, n_out, NULL, &g_err));
	for (int c = 1; c < m->ncopy; c++)
		CK(cudaMemcpy(m->d + (size_t)c * m->bytes, m->d, m->bytes, cudaMemcpyDeviceToDevice));
}

/* Row r of the matrix, rebuilt from the pattern. */
static void wm_row(const struct wm *m, int64_t r, unsigned char *dst)
{
	size_t off = (size_t)r * m->rb;

	for (size_t i = 0; i < m->rb; i++)
		dst[i] = m->pat[(off + i) % m->plen];
}

/* Median ms per launch of fn(ctx, i) over 5 repetitions of n launches. */
typedef void (*launch_fn)(void *ctx, int i);

static double time_ms(launch_fn fn, void *ctx, int n)
{
	cudaEvent_t a, b;
	float ms[5];

	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int i = 0; i < 3; i++)
		fn(ctx, i);
	CK(cudaDeviceSynchronize());
	for (int r = 0; r < 5; r++) {
		CK(cudaEventRecord(a, 0));
		for (int i = 0; i < n; i++)
			fn(ctx, i);
		CK(cudaEventRecord(b, 0));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms[r], a, b));
		ms[r] /= n;
	}
	for (int i = 0; i < 5; i++) /* sort 5 */
		for (int j = i + 1; j < 5; j++)
			if (ms[j] < ms[i]) {
				float x = ms[i];

				ms[i] = ms[j], ms[j] = x;
			}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return ms[2];
}

/* ---- GEMV ---- */

struct gv_ctx {
	struct wm *m;
	float *dx, *dy;
	void *dxq;
	int n_tok;
	int swiglu;
};

static void gv_launch(void *p, int i)
{
	struct gv_ctx *c = p;
	struct wm *m = c->m;
	const unsigned char *w = m->d + (size_t)(i % m->ncopy) * m->bytes;

	if (c->swiglu) {
		const unsigned char *u = m->d + (size_t)((i + 1) % m->ncopy) * m->bytes;

		T_CUDA(ntx_cuda_gemv_swiglu(m->t, w, m->t, u, m->n_in, m->n_out, c->dx, c->dxq, c->dy,
					    c->n_tok, NULL, &g_err));
	} else {
		T_CUDA(ntx_cuda_gemv(m->t, w, m->n_in, m->n_out, c->dx, c->dxq, c->dy, c->n_tok, 0, NULL,
				     &g_err));
	}
}

/* Time one GEMV; check sampled rows of copy 0 against ntx_vec_dot_ref. */
static double bench_gemv(struct wm *m, int n_tok, int swiglu, double *nmse_out)
{
	struct gv_ctx c = { m, NULL, NULL, NULL, n_tok, swiglu };
	float *x = malloc((size_t)n_tok * m->n_in * 4), *y = malloc((size_t)n_tok * m->n_out * 4);
	int64_t rows[8] = { 0, 1, 2, m->n_out / 2, m->n_out - 3, m->n_out - 2, m->n_out - 1, 0 };
	unsigned char *row = malloc(m->rb);
	double got[64], ref[64], ms, bytes = (double)m->bytes * (swiglu ? 2 : 1);
	int ns = 0, n;

	rows[7] = (int64_t)(rng_u64() % (uint64_t)m->n_out);
	for (int k = 0; k < n_tok; k++)
		rnd_strict_acts(x + (size_t)k * m->n_in, m->n_in);
	c.dx = dev_up(x, (size_t)n_tok * m->n_in * 4);
	c.dy = dev_alloc((size_t)n_tok * m->n_out * 4);
	if (ntx_cuda_wtype_q8(m->t)) {
		c.dxq = dev_alloc(ntx_cuda_q8_bytes(m->n_in, n_tok));
		T_CUDA(ntx_cuda_quantize_q8_fmt(c.dx, c.dxq, m->n_in, n_tok, ntx_cuda_q8_fmt(m->t), NULL,
						&g_err));
	}
	*nmse_out = 0;
	if (!swiglu) {
		dev_poison(c.dy, (size_t)n_tok * m->n_out * 4);
		gv_launch(&c, 0);
		dev_get(y, c.dy, (size_t)n_tok * m->n_out * 4);
		for (int i = 0; i < 8; i++) {
			wm_row(m, rows[i], row);
			for (int k = 0; k < n_tok && ns < 64; k++, ns++) {
				ref_gemv(m->t, row, m->n_in, 1, x + (size_t)k * m->n_in, 1, 1, &ref[ns]);
				got[ns] = y[(size_t)k * m->n_out + rows[i]];
			}
		}
		*nmse_out = nmse_d(got, ref, ns);
		for (size_t i = 0; i < (size_t)n_tok * m->n_out; i++)
			if (isnan(y[i]))
				*nmse_out = INFINITY;
	}
	n = (int)(2e-3 / (bytes / 3e12)); /* about 2 ms per repetition */
	ms = time_ms(gv_launch, &c, n < 10 ? 10 : n);
	dev_free(c.dx), dev_free(c.dy), dev_free(c.dxq);
	free(x), free(y), free(row);
	return ms;
}

static void run_gemv(void)
{
	static const int64_t shapes[4][2] = { { 4096, 4096 }, { 4096, 14336 }, { 14336, 4096 },
					      { 4096, 128256 } };

	for (int ti = 0; ti < N_TYPES; ti++) {
		double worst = 0, e;

		for (int s = 0; s < 4; s++) {
			struct wm m;
			double ms, ms8;

			wm_init(&m, ti, shapes[s][0], shapes[s][1], 1);
			ms = bench_gemv(&m, 1, 0, &e);
			worst = e > worst ? e : worst;
			t_diag("bench gemv %-10s %5lldx%-6lld n_tok 1: %8.2f us %7.0f GB/s (%3.0f%% of %.0f)",
			       type_name(m.t), (long long)m.n_in, (long long)m.n_out, ms * 1e3,
			       m.bytes / ms * 1e-6, m.bytes / ms * 1e-6 / HBM_GBS * 100, HBM_GBS);
			/* the direct-load kernel in its three shapes, same run, same
			 * matrices (Q4_K / Q5_K: the line above is the default kernel) */
			if (m.t == NTX_TYPE_Q4_K || m.t == NTX_TYPE_Q5_K || (m.t & NTX_CUDA_SPLIT)) {
				static const char *const vn[3] = { "dl", "dl-u1b8", "dl-u2b4" };

				ntx_cuda_gemv_dl_set(1);
				for (int v = 0; v < 3; v++) {
					double mv, ev;

					ntx_cuda_gemv_dl_variant(v);
					mv = bench_gemv(&m, 1, 0, &ev);
					worst = ev > worst ? ev : worst;
					t_diag("bench gemv %-10s %5lldx%-6lld n_tok 1 %-7s: %8.2f us %7.0f GB/s (%3.0f%%)",
					       type_name(m.t), (long long)m.n_in, (long long)m.n_out, vn[v], mv * 1e3,
					       m.bytes / mv * 1e-6, m.bytes / mv * 1e-6 / HBM_GBS * 100);
				}
				ntx_cuda_gemv_dl_variant(-1);
				ntx_cuda_gemv_dl_set(-1);
			}
			ms8 = bench_gemv(&m, 8, 0, &e);
			worst = e > worst ? e : worst;
			t_diag("bench gemv %-10s %5lldx%-6lld n_tok 8: %8.2f us %7.0f GB/s of weights (%.2fx n_tok 1's time)",
			       type_name(m.t), (long long)m.n_in, (long long)m.n_out, ms8 * 1e3,
			       m.bytes / ms8 * 1e-6, ms8 / ms);
			if (s == 1 && (m.t == NTX_TYPE_Q4_K || m.t == SPLIT(NTX_TYPE_Q8_0) || m.t == NTX_TYPE_F16 ||
				       m.t == SPLIT(NTX_TYPE_Q4_0))) {
				for (int nt = 1; nt <= 8; nt += 7) {
					ms = bench_gemv(&m, nt, 1, &e);
					t_diag("bench gemv_swiglu %-10s 4096->14336 (gate+up) n_tok %d: %8.2f us %7.0f GB/s",
					       type_name(m.t), nt, ms * 1e3, 2.0 * m.bytes / ms * 1e-6);
				}
				if (m.t != NTX_TYPE_F16) {
					static const char *const vn[3] = { "dl", "dl-u1b8", "dl-u2b4" };

					ntx_cuda_gemv_dl_set(1);
					for (int v = 0; v < 3; v++) {
						ntx_cuda_gemv_dl_variant(v);
						ms = bench_gemv(&m, 1, 1, &e);
						t_diag("bench gemv_swiglu %-10s 4096->14336 (gate+up) n_tok 1 %-7s: %8.2f us %7.0f GB/s",
						       type_name(m.t), vn[v], ms * 1e3, 2.0 * m.bytes / ms * 1e-6);
					}
					ntx_cuda_gemv_dl_variant(-1);
					ntx_cuda_gemv_dl_set(-1);
				}
			}
			dev_free(m.d);
		}
		t_ok(worst <= NMSE_SAMPLE_EXACT,
		     "gemv %s at 8B shapes: sampled rows vs ntx_vec_dot_ref NMSE %.3g <= %g",
		     type_name(all_types[ti]), worst, NMSE_SAMPLE_EXACT);
	}
}

static int type_index(uint32_t t);

/* The GEMVs a verification pass of a K-quant model runs (Q4_K, split
 * Q6_K) at 1, 2, 4 and 8 tokens, and Q4_K gate/up (--k8). */
static void run_gemv_k8(void)
{
	static const int64_t shapes[4][2] = { { 4096, 4096 }, { 4096, 14336 }, { 14336, 4096 },
					      { 4096, 128256 } };
	static const uint32_t types[2] = { NTX_TYPE_Q4_K, SPLIT(NTX_TYPE_Q6_K) };
	double worst = 0, e;

	for (int ti = 0; ti < 2; ti++)
		for (int s = 0; s < 4; s++) {
			struct wm m;
			double ms1 = 0;

			wm_init(&m, type_index(types[ti]), shapes[s][0], shapes[s][1], 1);
			for (int nt = 1; nt <= 8; nt *= 2) {
				const double ms = bench_gemv(&m, nt, 0, &e);

				ms1 = nt == 1 ? ms : ms1;
				worst = e > worst ? e : worst;
				t_diag("bench gemv %-10s %5lldx%-6lld n_tok %d: %8.2f us %7.0f GB/s (%.2fx n_tok 1)",
				       type_name(m.t), (long long)m.n_in, (long long)m.n_out, nt, ms * 1e3,
				       m.bytes / ms * 1e-6, ms / ms1);
			}
			if (ti == 0 && s == 1)
				for (int nt = 1; nt <= 8; nt += 7) {
					const double ms = bench_gemv(&m, nt, 1, &e);

					t_diag("bench gemv_swiglu %-10s 4096->14336 (gate+up) n_tok %d: %8.2f us %7.0f GB/s",
					       type_name(m.t), nt, ms * 1e3, 2.0 * m.bytes / ms * 1e-6);
				}
			dev_free(m.d);
		}
	t_ok(worst <= NMSE_SAMPLE_EXACT, "K-quant gemv at 8B shapes, 1..8 tokens: NMSE %.3g <= %g", worst,
	     NMSE_SAMPLE_EXACT);
}

/* ---- activation producers ---- */

struct qp_ctx {
	float *dx, *dw;
	void *dxq;
	int64_t n;
	int fmt, norm, n_tok;
};

static void qp_launch(void *p, int i)
{
	struct qp_ctx *c = p;

	(void)i;
	if (c->norm)
		T_CUDA(ntx_cuda_rmsnorm_fmt(NULL, c->dxq, c->fmt, c->dx, c->dw, c->n_tok, (int)c->n, 1e-5f,
					    NULL, &g_err));
	else
		T_CUDA(ntx_cuda_quantize_q8_fmt(c->dx, c->dxq, c->n, c->n_tok, c->fmt, NULL, &g_err));
}

static void run_producers(void)
{
	static const int fmts[2] = { NTX_CUDA_Q8F_Q8_K, NTX_CUDA_Q8F_Q8_0 };
	static const char *names[2] = { "Q8_K", "Q8_0" };
	float *x = rnd_gauss_vec((size_t)8 * 14336, 1.0f);
	struct qp_ctx c;

	c.dx = dev_up(x, (size_t)8 * 14336 * 4);
	c.dw = dev_up(x, 14336 * 4);
	c.dxq = dev_alloc(ntx_cuda_q8_bytes(14336, 8));
	for (int f = 0; f < 2; f++) {
		for (int norm = 0; norm < 2; norm++) {
			for (int nt = 1; nt <= 8; nt += 7) {
				double ms;

				c.fmt = fmts[f], c.norm = norm, c.n_tok = nt, c.n = norm ? 4096 : 14336;
				ms = time_ms(qp_launch, &c, 200);
				t_diag("bench %s %s n %lld n_tok %d: %6.2f us", norm ? "rmsnorm_fmt" : "quantize_q8_fmt",
				       names[f], (long long)c.n, nt, ms * 1e3);
			}
		}
	}
	dev_free(c.dx), dev_free(c.dw), dev_free(c.dxq);
	free(x);
}

/* ---- matmul ---- */

struct mm_ctx {
	struct wm *m;
	float *dx, *dy;
	void *ws;
	size_t wsb;
	int n_tok;
};

static void mm_launch(void *p, int i)
{
	struct mm_ctx *c = p;

	(void)i;
	T_CUDA(ntx_cuda_matmul(c->m->t, c->m->d, c->m->n_in, c->m->n_out, c->dx, c->dy, c->n_tok, 0,
			       c->ws, c->wsb, NULL, &g_err));
}

static void run_matmul(void)
{
	static const int64_t shapes[4][2] = { { 4096, 4096 }, { 4096, 14336 }, { 14336, 4096 },
					      { 4096, 128256 } };
	static const int types[] = { 1, 4, 5, 7, 3, 6, 2 }; /* F16 Q8_0 Q4_K Q6_K Q4_0 Q5_K BF16 */
	const int n_tok = 512;

	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
		int ti = types[k];
		double worst = 0;

		for (int s = 0; s < 4; s++) {
			struct wm m;
			struct mm_ctx c;
			float *x, *y;
			int64_t rows[4];
			unsigned char *row;
			double got[16], ref[16], ms, flop, e;
			int ns = 0;

			if (s == 3 && all_types[ti] != NTX_TYPE_Q6_K && all_types[ti] != NTX_TYPE_F16)
				continue; /* the output matrix: Q6_K in Q4_K_M files, F16 */
			wm_init(&m, ti, shapes[s][0], shapes[s][1], 0);
			c.m = &m, c.n_tok = n_tok;
			c.wsb = ntx_cuda_matmul_ws_bytes(m.n_in, m.n_out, n_tok);
			c.ws = dev_alloc(c.wsb);
			x = rnd_gauss_vec((size_t)n_tok * m.n_in, 1.0f);
			y = malloc((size_t)n_tok * m.n_out * 4);
			row = malloc(m.rb);
			c.dx = dev_up(x, (size_t)n_tok * m.n_in * 4);
			c.dy = dev_alloc((size_t)n_tok * m.n_out * 4);
			dev_poison(c.dy, (size_t)n_tok * m.n_out * 4);
			mm_launch(&c, 0);
			dev_get(y, c.dy, (size_t)n_tok * m.n_out * 4);
			rows[0] = 0, rows[1] = m.n_out - 1, rows[2] = m.n_out / 3;
			rows[3] = (int64_t)(rng_u64() % (uint64_t)m.n_out);
			for (int i = 0; i < 4; i++) {
				static const int toks[4] = { 0, 1, 255, 511 };

				wm_row(&m, rows[i], row);
				for (int j = 0; j < 4; j++, ns++) {
					ref_gemv(m.t, row, m.n_in, 1, x + (size_t)toks[j] * m.n_in, 1, 0,
						 &ref[ns]);
					got[ns] = y[(size_t)toks[j] * m.n_out + rows[i]];
				}
			}
			e = nmse_d(got, ref, ns);
			for (size_t i = 0; i < (size_t)n_tok * m.n_out; i++)
				if (isnan(y[i]))
					e = INFINITY;
			worst = e > worst ? e : worst;
			ms = time_ms(mm_launch, &c, 5);
			flop = 2.0 * m.n_in * m.n_out * n_tok;
			t_diag("bench matmul %-5s %5lldx%-6lld n_tok %d: %8.3f ms %6.1f TFLOP/s (%s)",
			       type_name(m.t), (long long)m.n_in, (long long)m.n_out, n_tok, ms,
			       flop / ms * 1e-9, ntx_cuda_have_cublas() ? "cuBLAS" : "WMMA");
			dev_free(c.dx), dev_free(c.dy), dev_free(c.ws), dev_free(m.d);
			free(x), free(y), free(row);
		}
		t_ok(worst <= NMSE_SAMPLE_MM, "matmul %s at 8B shapes, 512 tokens: sampled NMSE %.3g <= %g",
		     type_name(all_types[ti]), worst, NMSE_SAMPLE_MM);
	}
}

/* ---- attention ---- */

struct at_ctx {
	float *dout, *dq;
	int n_tok, n_head;
	struct ntx_cuda_kv kv;
	int32_t *dseq, *dpos;
	void *ws, *xq; /* xq: use ntx_cuda_attention_q8 with this q8 output */
	size_t wsb;
};

static void at_launch(void *p, int i)
{
	struct at_ctx *c = p;

	(void)i;
	if (c->xq)
		T_CUDA(ntx_cuda_attention_q8(c->dout, c->xq, c->dq, c->n_tok, c->n_head, &c->kv, c->dseq,
					     c->dpos, c->ws, c->wsb, NULL, &g_err));
	else
		T_CUDA(ntx_cuda_attention(c->dout, c->dq, c->n_tok, c->n_head, &c->kv, c->dseq, c->dpos,
					  c->ws, c->wsb, NULL, &g_err));
}

/* Decode at pos: attention_q8 (merge and q8 output in the launch) against
 * attention (+ combine). */
static void at_decode_pair(struct at_ctx *c, void *xq, int32_t pos, const char *what)
{
	double ms_q8, ms_old;

	CK(cudaMemcpy(c->dpos, &pos, 4, cudaMemcpyHostToDevice));
	c->xq = xq;
	ms_q8 = time_ms(at_launch, c, 200);
	c->xq = NULL;
	ms_old = time_ms(at_launch, c, 200);
	t_diag("bench attention_q8 decode at pos %4d%s (merge + q8 in one launch): %6.1f us;"
	       " attention (+ combine): %6.1f us", pos, what, ms_q8 * 1e3, ms_old * 1e3);
}

static void run_attention(void)
{
	const int n_head = 32, n_kv = 8, hd = 128, n_ctx = 4096;
	const size_t cel = (size_t)n_ctx * n_kv * hd;
	uint16_t *hk = malloc(cel * 2);
	struct at_ctx c;
	int32_t *pos = malloc(512 * 4), *seq = calloc(512, 4);
	float *q = rnd_gauss_vec((size_t)512 * n_head * hd, 1.0f);
	double ms;

	for (size_t i = 0; i < cel; i++)
		hk[i] = ntx_fp32_to_fp16(rnd_gauss());
	memset(&c, 0, sizeof c);
	c.kv.k = dev_up(hk, cel * 2), c.kv.v = dev_up(hk, cel * 2);
	c.kv.kv_f16 = 1, c.kv.n_ctx = n_ctx, c.kv.n_seq = 1, c.kv.n_head_kv = n_kv, c.kv.head_dim = hd;
	c.dq = dev_up(q, (size_t)512 * n_head * hd * 4);
	c.dout = dev_alloc((size_t)512 * n_head * hd * 4);
	c.n_head = n_head;
	c.dseq = dev_up(seq, 512 * 4);
	for (int pp = 0; pp < 2; pp++) {
		c.n_tok = pp ? 512 : 1;
		for (int t = 0; t < 512; t++)
			pos[t] = pp ? t : n_ctx - 1;
		c.dpos = dev_up(pos, 512 * 4);
		c.wsb = ntx_cuda_attention_ws_bytes(c.n_tok, n_head, hd, n_ctx);
		c.ws = c.wsb ? dev_alloc(c.wsb) : NULL;
		ms = time_ms(at_launch, &c, pp ? 5 : 50);
		if (pp)
			t_diag("bench attention prefill 512 tokens, 32/8 heads, hd 128, F16: %8.1f us", ms * 1e3);
		else
			t_diag("bench attention decode at pos 4095, 32/8 heads, hd 128, F16: %6.1f us %6.0f GB/s of K+V",
			       ms * 1e3, 2.0 * cel * 2 / ms * 1e-6);
		dev_free(c.dpos), dev_free(c.ws);
	}
	/* decode: the fused merge + q8 output vs attention + combine + quantize */
	c.n_tok = 1;
	c.wsb = ntx_cuda_attention_ws_bytes(1, n_head, hd, n_ctx);
	c.ws = dev_alloc(c.wsb);
	CK(cudaMemset(c.ws, 0, c.wsb));
	c.dpos = dev_alloc(4);
	{
		void *xq = dev_alloc(ntx_cuda_q8_bytes(n_head * hd, 1));
		static const int32_t at_pos[] = { 20, 100, 500, 1000, 4095 };

		for (int k = 0; k < (int)(sizeof at_pos / sizeof at_pos[0]); k++)
			at_decode_pair(&c, xq, at_pos[k], "");
		/* the same with a grid of 4 splits (n_ctx 128) instead of 64 */
		c.kv.n_ctx = 128;
		for (int k = 0; k < 2; k++)
			at_decode_pair(&c, xq, at_pos[k], ", n_ctx 128 (4 splits)");
		c.kv.n_ctx = n_ctx;
		dev_free(xq);
	}
	dev_free(c.dpos), dev_free(c.ws);
	dev_free(c.kv.k), dev_free(c.kv.v), dev_free(c.dq), dev_free(c.dout), dev_free(c.dseq);
	free(hk), free(pos), free(seq), free(q);
}

/* ---- gemv_multi ---- */

struct mq_ctx {
	struct wm *m[3];
	float *dy[3];
	void *dxq;
	int multi;
};

static void mq_launch(void *p, int i)
{
	struct mq_ctx *c = p;
	struct ntx_cuda_gemv_seg sg[3];

	for (int k = 0; k < 3; k++) {
		struct wm *m = c->m[k];

		sg[k] = (struct ntx_cuda_gemv_seg){ m->t, m->d + (size_t)(i % m->ncopy) * m->bytes,
						    m->n_out, c->dy[k], 0 };
	}
	if (c->multi) {
		T_CUDA(ntx_cuda_gemv_multi(sg, 3, 4096, NULL, c->dxq, 1, NULL, &g_err));
		return;
	}
	for (int k = 0; k < 3; k++)
		T_CUDA(ntx_cuda_gemv(sg[k].wtype, sg[k].w, 4096, sg[k].n_out, NULL, c->dxq, sg[k].y, 1,
				     0, NULL, &g_err));
}

static int type_index(uint32_t t)
{
	for (int i = 0; i < N_TYPES; i++)
		if (all_types[i] == t)
			return i;
	return 0;
}

/* Q, K, V of an 8B Q4_K_M layer: staged GEMV with GGUF Q6_K (dl = 0), or
 * the direct-load GEMV with split Q6_K rows (dl = 1). */
static void multi_once(int dl)
{
	struct wm mq, mk, mv;
	struct mq_ctx c;
	float *x = malloc(4096 * 4), *dx;
	double bytes, ms[2];

	ntx_cuda_gemv_dl_set(dl);
	wm_init(&mq, type_index(NTX_TYPE_Q4_K), 4096, 4096, 1);
	wm_init(&mk, type_index(NTX_TYPE_Q4_K), 4096, 1024, 1);
	wm_init(&mv, type_index(dl ? SPLIT(NTX_TYPE_Q6_K) : NTX_TYPE_Q6_K), 4096, 1024, 1);
	c.m[0] = &mq, c.m[1] = &mk, c.m[2] = &mv;
	rnd_strict_acts(x, 4096);
	dx = dev_up(x, 4096 * 4);
	c.dxq = dev_alloc(ntx_cuda_q8_bytes(4096, 1));
	T_CUDA(ntx_cuda_quantize_q8_fmt(dx, c.dxq, 4096, 1, NTX_CUDA_Q8F_Q8_K, NULL, &g_err));
	for (int k = 0; k < 3; k++)
		c.dy[k] = dev_alloc((size_t)c.m[k]->n_out * 4);
	bytes = (double)mq.bytes + mk.bytes + mv.bytes;
	for (int multi = 0; multi < 2; multi++) {
		c.multi = multi;
		ms[multi] = time_ms(mq_launch, &c, 200);
	}
	t_diag("bench gemv_multi %s Q4_K/Q4_K/%s 4096 -> 4096+1024+1024 (QKV) n_tok 1: %7.2f us %6.0f GB/s"
	       " (3 launches: %7.2f us)",
	       dl ? "direct-load" : "staged", type_name(mv.t), ms[1] * 1e3, bytes / ms[1] * 1e-6, ms[0] * 1e3);
	dev_free(mq.d), dev_free(mk.d), dev_free(mv.d), dev_free(dx), dev_free(c.dxq);
	for (int k = 0; k < 3; k++)
		dev_free(c.dy[k]);
	free(x);
	ntx_cuda_gemv_dl_set(-1);
}

static void run_gemv_multi(void)
{
	multi_once(0);
	multi_once(1);
}

/* ---- the engine's layer sequence ---- */

#define LAYER_COPIES 4

struct layer_w {
	void *wq, *wk, *wv, *wo, *wg, *wu, *wd;
	void *wv_s, *wd_s; /* v and down in split rows (the direct-load GEMV's layout) */
	float *an, *fn;
	struct ntx_cuda_kv kv;
};

struct layer_ctx {
	struct layer_w L[LAYER_COPIES];
	float *x, *xb, *q, *k, *v, *att, *h, *xr;
	void *xq, *ws;
	size_t wsb;
	int32_t *dseq, *dpos;
	float *freqs;
	double *rope_inv; /* the engine's table of inverse frequencies */
	int fused;
	int n_tok;    /* tokens per layer pass (1, or up to 8: a verification pass) */
	int dl;       /* the direct-load GEMV and split rows (else staged, GGUF layout) */
	unsigned ops; /* fused sequence: the kernels to enqueue (bit k: LAYER_OPS[k]), 0 = all */
};

static const char *const LAYER_OPS[9] = { "rmsnorm+q8", "qkv gemv_multi", "rope_store",
					  "attention_q8", "o gemv", "rmsnorm+q8", "gate/up swiglu",
					  "quantize_q8", "down gemv" };

static void *rand_dev(uint32_t t, int64_t n_in, int64_t n_out)
{
	struct wm m;

	wm_init(&m, type_index(t), n_in, n_out, 0);
	return m.d;
}

/* Enqueue one layer as ntx_gpu_layer does at n_tok 1 (fused = 1), or with
 * separate Q/K/V GEMVs and attention + quantize_q8 (fused = 0), with the
 * activations in the CPU-matching format of the K-quant weights (Q8_K),
 * as the engine is to run them. The residual adds go to xr rather than x,
 * so replays stay finite. */
static int layer_enqueue(struct layer_ctx *c, const struct layer_w *L, cudaStream_t st)
{
	const int E = 4096, KV = 1024, F = 14336, NH = 32;
	struct ntx_cuda_rope rope = { 128, 500000.0f, 1.0f, NULL, c->rope_inv, 0 };
	const uint32_t q6 = c->dl ? SPLIT(NTX_TYPE_Q6_K) : NTX_TYPE_Q6_K;
	const void *wv = c->dl ? L->wv_s : L->wv, *wd = c->dl ? L->wd_s : L->wd;
	struct ntx_cuda_gemv_seg qkv[3] = {
		{ NTX_TYPE_Q4_K, L->wq, E, c->q, 0 },
		{ NTX_TYPE_Q4_K, L->wk, KV, c->k, 0 },
		{ q6, wv, KV, c->v, 0 },
	};
	ntx_stream_t s = (ntx_stream_t)st;
	const unsigned ops = c->ops ? c->ops : 0x1FF;
	const int K = NTX_CUDA_Q8F_Q8_K; /* the CPU's activations for K-quant weights */
	const int nt = c->n_tok;

	if (!c->fused) {
		if (ntx_cuda_rmsnorm_fmt(c->xb, c->xq, K, c->x, L->an, 1, E, 1e-5f, s, &g_err))
			return -1;
		for (int i = 0; i < 3; i++)
			if (ntx_cuda_gemv(qkv[i].wtype, qkv[i].w, E, qkv[i].n_out, c->xb, c->xq, qkv[i].y, 1,
					  0, s, &g_err))
				return -1;
		if (ntx_cuda_rope_store(c->q, c->k, c->v, 1, NH, &L->kv, c->dseq, c->dpos, &rope, s, &g_err) ||
		    ntx_cuda_attention(c->att, c->q, 1, NH, &L->kv, c->dseq, c->dpos, c->ws, c->wsb, s,
				       &g_err) ||
		    ntx_cuda_quantize_q8_fmt(c->att, c->xq, E, 1, K, s, &g_err))
			return -1;
	} else {
		if (((ops & 1) && ntx_cuda_rmsnorm_fmt(c->xb, c->xq, K, c->x, L->an, nt, E, 1e-5f, s, &g_err)) ||
		    ((ops & 2) && ntx_cuda_gemv_multi(qkv, 3, E, c->xb, c->xq, nt, s, &g_err)) ||
		    ((ops & 4) && ntx_cuda_rope_store(c->q, c->k, c->v, nt, NH, &L->kv, c->dseq, c->dpos,
						      &rope, s, &g_err)) ||
		    ((ops & 8) && ntx_cuda_attention_q8_fmt(c->att, c->xq, K, c->q, nt, NH, &L->kv, c->dseq,
							    c->dpos, c->ws, c->wsb, s, &g_err)))
			return -1;
	}
	return ((ops & 16) && ntx_cuda_gemv(NTX_TYPE_Q4_K, L->wo, E, E, c->att, c->xq, c->xr, nt, 1, s, &g_err)) ||
	       ((ops & 32) && ntx_cuda_rmsnorm_fmt(c->xb, c->xq, K, c->x, L->fn, nt, E, 1e-5f, s, &g_err)) ||
	       ((ops & 64) && ntx_cuda_gemv_swiglu(NTX_TYPE_Q4_K, L->wg, NTX_TYPE_Q4_K, L->wu, E, F, c->xb,
						   c->xq, c->h, nt, s, &g_err)) ||
	       ((ops & 128) && ntx_cuda_quantize_q8_fmt(c->h, c->xq, F, nt, K, s, &g_err)) ||
	       ((ops & 256) && ntx_cuda_gemv(q6, wd, F, E, c->h, c->xq, c->xr, nt, 1, s, &g_err));
}

/* us per layer of a graph of LAYER_COPIES layers replayed n times. */
static double layer_time_us(struct layer_ctx *c, int n)
{
	cudaStream_t st;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	cudaEvent_t a, b;
	float ms[3];
	int ok = 1;

	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	for (int l = 0; l < LAYER_COPIES && ok; l++)
		ok = layer_enqueue(c, &c->L[l], st) == 0;
	CK(cudaStreamEndCapture(st, &g));
	if (!ok) {
		t_ok(0, "layer sequence captured: %s", g_err.msg);
		exit(t_done() | 1);
	}
	CK(cudaGraphInstantiate(&ge, g, 0));
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int i = 0; i < 10; i++)
		CK(cudaGraphLaunch(ge, st));
	CK(cudaStreamSynchronize(st));
	for (int r = 0; r < 3; r++) {
		CK(cudaEventRecord(a, st));
		for (int i = 0; i < n; i++)
			CK(cudaGraphLaunch(ge, st));
		CK(cudaEventRecord(b, st));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms[r], a, b));
	}
	if (ms[1] < ms[0]) { float t = ms[0]; ms[0] = ms[1]; ms[1] = t; }
	if (ms[2] < ms[1]) { float t = ms[1]; ms[1] = ms[2]; ms[2] = t; }
	if (ms[1] < ms[0]) { float t = ms[0]; ms[0] = ms[1]; ms[1] = t; }
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaStreamDestroy(st));
	return ms[1] * 1e3 / ((double)n * LAYER_COPIES);
}

/* The output head as the engine runs it for nt tokens: rmsnorm + q8, Q6_K
 * GEMV (dl: in split rows, with the direct-load GEMV). */
static double head_time_us(int dl, int nt)
{
	struct wm m;
	float *x = rnd_gauss_vec(4096 * nt, 1.0f), *w = rnd_gauss_vec(4096, 1.0f), *dx, *dw, *dy;
	void *dxq;
	cudaEvent_t a, b;
	float ms;
	const int n = 50;

	wm_init(&m, type_index(dl ? SPLIT(NTX_TYPE_Q6_K) : NTX_TYPE_Q6_K), 4096, 128256, 0);
	dx = dev_up(x, 4096 * 4 * nt), dw = dev_up(w, 4096 * 4);
	dy = dev_alloc((size_t)128256 * 4 * nt);
	dxq = dev_alloc(ntx_cuda_q8_bytes(4096, nt));
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int r = 0; r < 2; r++) { /* the first round warms up */
		CK(cudaEventRecord(a, 0));
		for (int i = 0; i < n; i++) {
			T_CUDA(ntx_cuda_rmsnorm_fmt(NULL, dxq, NTX_CUDA_Q8F_Q8_K, dx, dw, nt, 4096, 1e-5f, NULL,
						    &g_err));
			T_CUDA(ntx_cuda_gemv(m.t, m.d, 4096, 128256, NULL, dxq, dy, nt, 0, NULL, &g_err));
		}
		CK(cudaEventRecord(b, 0));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	dev_free(m.d), dev_free(dx), dev_free(dw), dev_free(dy), dev_free(dxq);
	free(x), free(w);
	return ms * 1e3 / n;
}

/* Each of the layer's 9 kernels alone (a graph of 4 layers' worth), and
 * their sum. */
static void layer_ops(struct layer_ctx *c, const char *what, int pos)
{
	double sum = 0;

	for (int k = 0; k < 9; k++) {
		double us;

		c->ops = 1u << k;
		us = layer_time_us(c, 250);
		sum += us;
		t_diag("bench layer %-11s op %-15s pos %4d: %7.2f us", what, LAYER_OPS[k], pos, us);
	}
	c->ops = 0;
	t_diag("bench layer %-11s ops alone pos %4d: %7.2f us in all", what, pos, sum);
}

/* nt 1: the whole comparison; nt 2..8: the engine's sequence and each of
 * its kernels (a verification pass at positions pos .. pos + nt - 1). */
static void run_layer(int nt)
{
	const int E = 4096, KV = 1024, F = 14336, NH = 32, n_ctx = 4096;
	struct layer_ctx c;
	static const int32_t positions[2] = { 100, 4000 };
	size_t cel = (size_t)n_ctx * KV;
	uint16_t *hk = malloc(cel * 2);
	float *x = rnd_gauss_vec(E, 1.0f), *nw = rnd_gauss_vec(E, 1.0f);
	int32_t zero[8] = { 0 }, pv[8];
	double head[2] = { head_time_us(0, nt), head_time_us(1, nt) }, bytes;

	memset(&c, 0, sizeof c);
	c.n_tok = nt;
	for (size_t i = 0; i < cel; i++)
		hk[i] = ntx_fp32_to_fp16(rnd_gauss());
	for (int l = 0; l < LAYER_COPIES; l++) {
		struct layer_w *L = &c.L[l];

		L->wq = rand_dev(NTX_TYPE_Q4_K, E, E), L->wk = rand_dev(NTX_TYPE_Q4_K, E, KV);
		L->wv = rand_dev(NTX_TYPE_Q6_K, E, KV), L->wo = rand_dev(NTX_TYPE_Q4_K, E, E);
		L->wv_s = rand_dev(SPLIT(NTX_TYPE_Q6_K), E, KV), L->wd_s = rand_dev(SPLIT(NTX_TYPE_Q6_K), F, E);
		L->wg = rand_dev(NTX_TYPE_Q4_K, E, F), L->wu = rand_dev(NTX_TYPE_Q4_K, E, F);
		L->wd = rand_dev(NTX_TYPE_Q6_K, F, E);
		L->an = dev_up(nw, E * 4), L->fn = dev_up(nw, E * 4);
		L->kv.k = dev_up(hk, cel * 2), L->kv.v = dev_up(hk, cel * 2);
		L->kv.kv_f16 = 1, L->kv.n_ctx = n_ctx, L->kv.n_seq = 1, L->kv.n_head_kv = 8;
		L->kv.head_dim = 128;
	}
	bytes = (double)row_bytes(NTX_TYPE_Q4_K, E) * (2 * E + KV + 2 * F) +
		(double)row_bytes(NTX_TYPE_Q6_K, E) * KV + (double)row_bytes(NTX_TYPE_Q6_K, F) * E;
	c.x = dev_alloc(E * 4 * nt), c.xb = dev_alloc(E * 4 * nt), c.xr = dev_alloc(E * 4 * nt);
	for (int k = 0; k < nt; k++)
		CK(cudaMemcpy(c.x + (size_t)k * E, x, E * 4, cudaMemcpyHostToDevice));
	CK(cudaMemset(c.xr, 0, E * 4 * nt));
	c.q = dev_alloc(E * 4 * nt), c.k = dev_alloc(KV * 4 * nt), c.v = dev_alloc(KV * 4 * nt);
	c.att = dev_alloc(E * 4 * nt), c.h = dev_alloc(F * 4 * nt);
	c.xq = dev_alloc(ntx_cuda_q8_bytes(F, nt));
	c.wsb = ntx_cuda_attention_ws_bytes(nt, NH, 128, n_ctx);
	c.ws = dev_alloc(c.wsb);
	CK(cudaMemset(c.ws, 0, c.wsb));
	c.dseq = dev_up(zero, 4 * nt);
	c.dpos = dev_alloc(4 * nt);
	{
		struct ntx_cuda_rope rp = { 128, 500000.0f, 1.0f, NULL, NULL, 0 };

		c.rope_inv = dev_alloc(64 * sizeof(double));
		T_CUDA(ntx_cuda_rope_table(&rp, c.rope_inv, NULL, &g_err));
	}
	t_diag("bench layer: 8B Q4_K_M layer = %.1f MB of weights; head (rmsnorm + Q6_K 4096x128256 GEMV)"
	       " n_tok %d: %.1f us (staged), %.1f us (direct-load, split rows)",
	       bytes / 1e6, nt, head[0], head[1]);
	for (int pi = 0; pi < 2; pi++) {
		for (int k = 0; k < nt; k++)
			pv[k] = positions[pi] + k;
		CK(cudaMemcpy(c.dpos, pv, 4 * nt, cudaMemcpyHostToDevice));
		if (nt > 1) { /* the engine's sequence and its kernels, direct-load */
			char what[16];
			double us;

			c.fused = 1, c.dl = 1;
			us = layer_time_us(&c, 250);
			t_diag("bench layer n_tok %d pos %4d: %7.2f us per layer -> 32 layers + head: %7.1f us per pass",
			       nt, positions[pi], us, 32 * us + head[1]);
			snprintf(what, sizeof what, "n_tok %d", nt);
			layer_ops(&c, what, positions[pi]);
			continue;
		}
		for (int fused = 1; fused >= 0; fused--) {
			double us;

			c.fused = fused;
			c.dl = 1; /* split rows, as the engine keeps them by default */
			us = layer_time_us(&c, 250);
			t_diag("bench layer %-7s pos %4d n_tok 1: %7.2f us per layer (%5.0f GB/s of weights)"
			       " -> 32 layers + head: %7.1f tok/s",
			       fused ? "engine" : "unfused", positions[pi], us, bytes / us * 1e-3,
			       1e6 / (32 * us + head[1]));
		}
		c.fused = 1;
		for (int dl = 0; dl < 2; dl++) {
			/* the sequence, then each kernel alone (a graph of 4 layers'
			 * worth), with either GEMV and layout */
			const char *what = dl ? "direct-load" : "staged";
			double us;

			c.dl = dl;
			ntx_cuda_gemv_dl_set(dl);
			us = layer_time_us(&c, 250);
			t_diag("bench layer %-11s pos %4d n_tok 1: %7.2f us per layer (%5.0f GB/s of weights)"
			       " -> 32 layers + head: %7.1f tok/s",
			       what, positions[pi], us, bytes / us * 1e-3, 1e6 / (32 * us + head[dl]));
			layer_ops(&c, what, positions[pi]);
		}
		c.dl = 1;
		ntx_cuda_gemv_dl_set(-1);
		{
			double us[2]; /* [pdl] */
			int have;

			ntx_cuda_pdl_set(1);
			have = ntx_cuda_pdl_enabled();
			for (int pdl = 1; pdl >= 0; pdl--) {
				ntx_cuda_pdl_set(pdl);
				us[pdl] = layer_time_us(&c, 250);
			}
			ntx_cuda_pdl_set(-1);
			t_diag("bench layer pdl=on: %.2f us per layer (engine sequence, pos %d)%s", us[1],
			       positions[pi], have ? "" : " (no PDL on this device: launched as off)");
			t_diag("bench layer pdl=off: %.2f us per layer (engine sequence, pos %d)", us[0],
			       positions[pi]);
			t_diag("bench layer pdl saves %.2f us per layer (%.2f us per kernel boundary, 9 kernels per layer)",
			       us[0] - us[1], (us[0] - us[1]) / 9);
		}
	}
	{
		float *got = malloc(E * 4);
		int fin = 1;

		dev_get(got, c.xr, E * 4);
		for (int i = 0; i < E; i++)
			fin &= isfinite(got[i]) != 0;
		t_ok(fin, "layer sequence: residual output finite after the replays");
		free(got);
	}
	for (int l = 0; l < LAYER_COPIES; l++) {
		struct layer_w *L = &c.L[l];

		dev_free(L->wq), dev_free(L->wk), dev_free(L->wv), dev_free(L->wo);
		dev_free(L->wg), dev_free(L->wu), dev_free(L->wd), dev_free(L->an), dev_free(L->fn);
		dev_free(L->wv_s), dev_free(L->wd_s);
		dev_free(L->kv.k), dev_free(L->kv.v);
	}
	dev_free(c.x), dev_free(c.xb), dev_free(c.xr), dev_free(c.q), dev_free(c.k), dev_free(c.v);
	dev_free(c.att), dev_free(c.h), dev_free(c.xq), dev_free(c.ws), dev_free(c.dseq);
	dev_free(c.dpos);
	free(hk), free(x), free(nw);
}

int main(int argc, char **argv)
{
	gpu_start(argc, argv);
	for (int i = 1; i < argc; i++) { /* --layer: only the layer and multi benchmarks */
		if (!strcmp(argv[i], "--attention")) { /* only attention */
			run_attention();
			t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
			return t_done();
		}
		if (!strcmp(argv[i], "--one") && i + 5 < argc) { /* --one q4k|q6ks N_IN N_OUT N_TOK SWIGLU: for ncu */
			struct wm m;
			double e;
			const uint32_t t = strcmp(argv[i + 1], "q4k") ? SPLIT(NTX_TYPE_Q6_K) : NTX_TYPE_Q4_K;

			wm_init(&m, type_index(t), atoll(argv[i + 2]), atoll(argv[i + 3]), 1);
			t_diag("bench one %s: %.2f us", argv[i + 1],
			       1e3 * bench_gemv(&m, atoi(argv[i + 4]), atoi(argv[i + 5]), &e));
			return t_done();
		}
		if (!strcmp(argv[i], "--k8")) {
			run_gemv_k8();
			t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
			return t_done();
		}
		if (!strcmp(argv[i], "--layer8")) { /* the layer's kernels for 1, 8 and 2 tokens */
			run_layer(1);
			run_layer(8);
			run_layer(2);
			t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
			return t_done();
		}
		if (!strcmp(argv[i], "--layer")) {
			run_gemv_multi();
			run_layer(1);
			t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
			return t_done();
		}
	}
	run_gemv();
	run_producers();
	run_gemv_multi();
	run_layer(1);
	run_matmul();
	run_attention();
	for (int i = 0; i < N_TYPES; i++)
		free(g_pat[i]);
	t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
	return t_done();
}
