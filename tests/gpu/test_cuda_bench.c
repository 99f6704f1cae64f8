/* test_cuda_bench.c - timings of the hot kernels at 8B-model shapes, with a
 * sampled correctness check of each big run (so a fast wrong kernel fails):
 *   GEMV, n_tok 1 (and 8 on one shape), every weight type, on 4096x4096,
 *     4096x14336, 14336x4096 and 4096x128256 (n_in x n_out): GB/s of weight
 *     bytes, rotating over copies of the matrix totalling >= 256 MB so that
 *     the 50 MB L2 cannot serve repeats;
 *   fused gate/up (SwiGLU) GEMV, Q4_K 4096 -> 14336;
 *   matmul, n_tok 512: TFLOP/s (cuBLAS when it loads, else our WMMA);
 *   attention: decode at 4096 positions and a 512-token prefill.
 * Each timing is the median over 5 repetitions of back-to-back launches
 * timed with CUDA events, after a warm-up. Lines start with "# bench". */
#include "gpu_util.h"

#define PATTERN_BYTES ((size_t)32 << 20)
#define ROTATE_BYTES ((size_t)256 << 20)
#define HBM_GBS 4800.0
#define NMSE_SAMPLE_EXACT 1e-8
#define NMSE_SAMPLE_MM 1e-5

static const uint32_t all_types[] = { NTX_TYPE_F32, NTX_TYPE_F16, NTX_TYPE_BF16, NTX_TYPE_Q4_0,
				      NTX_TYPE_Q8_0, NTX_TYPE_Q4_K, NTX_TYPE_Q5_K, NTX_TYPE_Q6_K };
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
		T_CUDA(ntx_cuda_quantize_q8(c.dx, c.dxq, m->n_in, n_tok, NULL, &g_err));
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
			double ms;

			wm_init(&m, ti, shapes[s][0], shapes[s][1], 1);
			ms = bench_gemv(&m, 1, 0, &e);
			worst = e > worst ? e : worst;
			t_diag("bench gemv %-5s %5lldx%-6lld n_tok 1: %8.2f us %7.0f GB/s (%3.0f%% of %.0f)",
			       type_name(m.t), (long long)m.n_in, (long long)m.n_out, ms * 1e3,
			       m.bytes / ms * 1e-6, m.bytes / ms * 1e-6 / HBM_GBS * 100, HBM_GBS);
			if (s == 1) {
				ms = bench_gemv(&m, 8, 0, &e);
				worst = e > worst ? e : worst;
				t_diag("bench gemv %-5s %5lldx%-6lld n_tok 8: %8.2f us %7.0f GB/s of weights",
				       type_name(m.t), (long long)m.n_in, (long long)m.n_out, ms * 1e3,
				       m.bytes / ms * 1e-6);
				if (m.t == NTX_TYPE_Q4_K || m.t == NTX_TYPE_Q8_0 || m.t == NTX_TYPE_F16) {
					ms = bench_gemv(&m, 1, 1, &e);
					t_diag("bench gemv_swiglu %-5s 4096->14336 (gate+up) n_tok 1: %8.2f us %7.0f GB/s",
					       type_name(m.t), ms * 1e3, 2.0 * m.bytes / ms * 1e-6);
				}
			}
			dev_free(m.d);
		}
		t_ok(worst <= NMSE_SAMPLE_EXACT,
		     "gemv %s at 8B shapes: sampled rows vs ntx_vec_dot_ref NMSE %.3g <= %g",
		     type_name(all_types[ti]), worst, NMSE_SAMPLE_EXACT);
	}
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
	void *ws;
	size_t wsb;
};

static void at_launch(void *p, int i)
{
	struct at_ctx *c = p;

	(void)i;
	T_CUDA(ntx_cuda_attention(c->dout, c->dq, c->n_tok, c->n_head, &c->kv, c->dseq, c->dpos, c->ws,
				  c->wsb, NULL, &g_err));
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
	dev_free(c.kv.k), dev_free(c.kv.v), dev_free(c.dq), dev_free(c.dout), dev_free(c.dseq);
	free(hk), free(pos), free(seq), free(q);
}

int main(int argc, char **argv)
{
	gpu_start(argc, argv);
	run_gemv();
	run_matmul();
	run_attention();
	for (int i = 0; i < N_TYPES; i++)
		free(g_pat[i]);
	t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
	return t_done();
}
