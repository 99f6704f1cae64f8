/* test_cuda_attention.c - RoPE (adjacent pairs and NEOX halves) + KV store and causal GQA attention
 * (kernels/cuda/norm_rope.cu, attention.cu) against ntx_op_rope,
 * ntx_op_kv_store and ntx_op_attention: F16 and F32 caches, MHA and groups
 * of 2..16, head_dim 48..256, contexts 1, 33, 4097, positions at n_ctx - 1,
 * several sequences, decode and 512-token prefill, an out-of-range position
 * (NaN out, no stray write), and a CUDA graph captured once and replayed at
 * new positions (the launch must not depend on pos). ntx_cuda_attention_q8
 * (splits merged in the same launch, q8 output): the same cases, twice on
 * one workspace (its counters must be left zero), the q8 bytes equal to the
 * host quantizer's on the float output, and a graph replayed at new
 * positions. */
#include "gpu_util.h"
#include "ntx_ops.h"

#define NMSE_ROPE 1e-10
#define NMSE_ATTN 1e-6

/* ---- rope + store ---- */

/* NEOX RoPE on the host (the CPU kernels' ntx_op_rope does adjacent
 * pairs): pair i < n_rot/2 of each head is (x[i], x[i + n_rot/2]), the
 * angles in double precision as ntx_op_rope takes them. */
static void neox_ref(float *x, int n_tok, int n_heads, int hd, const int32_t *pos,
		     const struct ntx_rope *r)
{
	int half = r->n_rot / 2;

	for (int t = 0; t < n_tok; t++)
		for (int i = 0; i < half; i++) {
			double inv = r->freq_scale * pow(r->base, -2.0 * i / r->n_rot), th;

			if (r->freqs)
				inv /= r->freqs[i];
			th = (double)pos[t] * inv;
			float c = (float)cos(th), sn = (float)sin(th);

			for (int h = 0; h < n_heads; h++) {
				float *p = x + ((int64_t)t * n_heads + h) * hd;
				float a = p[i], b = p[i + half];

				p[i] = a * c - b * sn;
				p[i + half] = a * sn + b * c;
			}
		}
}

static void test_rope(int f16, int n_rot, int with_freqs, float freq_scale, int neox)
{
	const int n_tok = 5, n_head = 8, n_kv = 2, hd = 64, n_ctx = 1024, n_seq = 3;
	const int32_t pos[5] = { 0, 17, n_ctx - 1, 5, 1000 }, seq[5] = { 0, 1, 2, 0, 1 };
	const size_t nq = (size_t)n_tok * n_head * hd, nk = (size_t)n_tok * n_kv * hd;
	const size_t cache_el = (size_t)n_seq * n_ctx * n_kv * hd, esz = f16 ? 2 : 4;
	float *q = rnd_gauss_vec(nq, 1.0f), *k = rnd_gauss_vec(nk, 1.0f), *v = rnd_gauss_vec(nk, 1.0f);
	float *gq = malloc(nq * 4), *gk = malloc(nk * 4), freqs[32], *q0, *k0;
	unsigned char *gc_k = malloc(cache_el * esz), *gc_v = malloc(cache_el * esz);
	unsigned char *ec_k = malloc(cache_el * esz), *ec_v = malloc(cache_el * esz);
	float *dq, *dk, *dv, *dfreqs = NULL;
	int32_t *dpos, *dseq;
	struct ntx_cuda_kv kv = { 0 };
	struct ntx_cuda_rope rp = { n_rot, 500000.0f, freq_scale, NULL, NULL, neox };
	struct ntx_rope cr = { n_rot, 500000.0, freq_scale, NULL, neox };
	struct ntx_kv_layer ckv = { ec_k, ec_v, f16, n_ctx, n_seq, n_kv, hd };
	double e1, e2;

	for (int i = 0; i < 32; i++)
		freqs[i] = (float)(1.0 + 7.0 * rnd_unif());
	q0 = malloc(nq * 4), k0 = malloc(nk * 4);
	memcpy(q0, q, nq * 4), memcpy(k0, k, nk * 4);
	dq = dev_up(q, nq * 4), dk = dev_up(k, nk * 4), dv = dev_up(v, nk * 4);
	dpos = dev_up(pos, sizeof pos), dseq = dev_up(seq, sizeof seq);
	if (with_freqs) {
		dfreqs = dev_up(freqs, sizeof freqs);
		rp.freqs = dfreqs;
		cr.freqs = freqs;
	}
	kv.k = dev_alloc(cache_el * esz), kv.v = dev_alloc(cache_el * esz);
	kv.kv_f16 = f16, kv.n_ctx = n_ctx, kv.n_seq = n_seq, kv.n_head_kv = n_kv, kv.head_dim = hd;
	dev_poison(kv.k, cache_el * esz), dev_poison(kv.v, cache_el * esz);
	T_CUDA(ntx_cuda_rope_store(dq, dk, dv, n_tok, n_head, &kv, dseq, dpos, &rp, NULL, &g_err));
	dev_get(gq, dq, nq * 4), dev_get(gk, dk, nk * 4);
	dev_get(gc_k, kv.k, cache_el * esz), dev_get(gc_v, kv.v, cache_el * esz);
	if (neox) {
		neox_ref(q, n_tok, n_head, hd, pos, &cr);
		neox_ref(k, n_tok, n_kv, hd, pos, &cr);
	} else {
		ntx_op_rope(q, n_tok, n_head, hd, pos, &cr);
		ntx_op_rope(k, n_tok, n_kv, hd, pos, &cr);
	}
	e1 = nmse_f(gq, q, nq), e2 = nmse_f(gk, k, nk);
	t_ok(e1 <= NMSE_ROPE && e2 <= NMSE_ROPE,
	     "rope%s %s n_rot %d%s freq_scale %g: q NMSE %.3g, k NMSE %.3g (pos up to n_ctx-1)",
	     neox ? " NEOX" : "", f16 ? "F16" : "F32", n_rot, with_freqs ? " rope_freqs" : "",
	     freq_scale, e1, e2);
	/* the cache must hold exactly the GPU's rotated k and v at (seq, pos),
	 * and be untouched (still poison) everywhere else */
	memset(ec_k, 0xFF, cache_el * esz), memset(ec_v, 0xFF, cache_el * esz);
	ntx_op_kv_store(&ckv, gk, v, n_tok, seq, pos);
	t_ok(!memcmp(gc_k, ec_k, cache_el * esz) && !memcmp(gc_v, ec_v, cache_el * esz),
	     "rope_store %s: cache rows written at (seq, pos), nothing else", f16 ? "F16" : "F32");
	/* again from the table of inverse frequencies: the same bits */
	{
		double *tab = dev_alloc((size_t)n_rot / 2 * sizeof(double));
		float *tq = malloc(nq * 4);
		unsigned char *tc = malloc(cache_el * esz);
		int same;

		T_CUDA(ntx_cuda_rope_table(&rp, tab, NULL, &g_err));
		rp.inv = tab;
		dev_put(dq, q0, nq * 4), dev_put(dk, k0, nk * 4);
		dev_poison(kv.k, cache_el * esz), dev_poison(kv.v, cache_el * esz);
		T_CUDA(ntx_cuda_rope_store(dq, dk, dv, n_tok, n_head, &kv, dseq, dpos, &rp, NULL, &g_err));
		dev_get(tq, dq, nq * 4);
		same = !memcmp(tq, gq, nq * 4);
		dev_get(tc, kv.k, cache_el * esz);
		same &= !memcmp(tc, gc_k, cache_el * esz);
		dev_get(tc, kv.v, cache_el * esz);
		same &= !memcmp(tc, gc_v, cache_el * esz);
		t_ok(same, "rope_store %s n_rot %d%s: with ntx_cuda_rope_table's table bitwise the same",
		     f16 ? "F16" : "F32", n_rot, with_freqs ? " rope_freqs" : "");
		dev_free(tab), free(tq), free(tc);
	}
	dev_free(dq), dev_free(dk), dev_free(dv), dev_free(dpos), dev_free(dseq), dev_free(dfreqs);
	dev_free(kv.k), dev_free(kv.v);
	free(q0), free(k0);
	free(q), free(k), free(v), free(gq), free(gk), free(gc_k), free(gc_v), free(ec_k), free(ec_v);
}

/* ---- attention ---- */

struct acase {
	const char *what;
	int n_tok, n_head, n_kv, hd, n_ctx, n_seq, f16;
	int pos_mode; /* 0: list, 1: prefill pos = t, 2: two sequences pos = t / 2 */
	int32_t pos[4], seq[4];
};

struct abuf {
	struct ntx_cuda_kv kv;
	struct ntx_kv_layer ckv;
	float *q, *dq, *dout;
	int32_t *pos, *seq, *dpos, *dseq;
	void *ws;
};

static void abuf_init(struct abuf *b, const struct acase *c)
{
	size_t row = (size_t)c->n_kv * c->hd, cel = (size_t)c->n_seq * c->n_ctx * row;
	size_t esz = c->f16 ? 2 : 4, nq = (size_t)c->n_tok * c->n_head * c->hd;
	void *hk = malloc(cel * esz), *hv = malloc(cel * esz);
	size_t wsb = ntx_cuda_attention_ws_bytes(c->n_tok, c->n_head, c->hd, c->n_ctx);

	for (size_t i = 0; i < cel; i++) {
		float a = rnd_gauss(), bb = rnd_gauss();

		if (c->f16) {
			((uint16_t *)hk)[i] = ntx_fp32_to_fp16(a);
			((uint16_t *)hv)[i] = ntx_fp32_to_fp16(bb);
		} else {
			((float *)hk)[i] = a;
			((float *)hv)[i] = bb;
		}
	}
	b->pos = malloc((size_t)c->n_tok * 4), b->seq = malloc((size_t)c->n_tok * 4);
	for (int t = 0; t < c->n_tok; t++) {
		b->pos[t] = c->pos_mode == 0 ? c->pos[t] : c->pos_mode == 1 ? t : t / 2;
		b->seq[t] = c->pos_mode == 0 ? c->seq[t] : c->pos_mode == 1 ? 0 : t % c->n_seq;
	}
	b->q = rnd_gauss_vec(nq, 2.0f);
	b->dq = dev_up(b->q, nq * 4);
	b->dout = dev_alloc(nq * 4);
	b->dpos = dev_up(b->pos, (size_t)c->n_tok * 4), b->dseq = dev_up(b->seq, (size_t)c->n_tok * 4);
	b->ws = wsb ? dev_alloc(wsb) : NULL;
	memset(&b->kv, 0, sizeof b->kv);
	b->kv.k = dev_up(hk, cel * esz), b->kv.v = dev_up(hv, cel * esz);
	b->kv.kv_f16 = c->f16, b->kv.n_ctx = c->n_ctx, b->kv.n_seq = c->n_seq;
	b->kv.n_head_kv = c->n_kv, b->kv.head_dim = c->hd;
	b->ckv.k = hk, b->ckv.v = hv, b->ckv.f16 = c->f16, b->ckv.n_ctx = c->n_ctx;
	b->ckv.n_seq = c->n_seq, b->ckv.n_head_kv = c->n_kv, b->ckv.head_dim = c->hd;
}

static void abuf_free(struct abuf *b)
{
	dev_free(b->dq), dev_free(b->dout), dev_free(b->dpos), dev_free(b->dseq), dev_free(b->ws);
	dev_free(b->kv.k), dev_free(b->kv.v);
	free(b->q), free(b->pos), free(b->seq), free(b->ckv.k), free(b->ckv.v);
}

static double attn_ref_nmse(struct abuf *b, const struct acase *c, const float *got)
{
	size_t nq = (size_t)c->n_tok * c->n_head * c->hd;
	float *ref = malloc(nq * 4);
	float *scr = malloc(ntx_op_attention_scratch(1, c->n_ctx) * 4);
	double e;

	ntx_op_attention(NULL, ref, b->q, c->n_tok, c->n_head, &b->ckv, b->seq, b->pos, scr);
	e = nmse_f(got, ref, nq);
	free(ref), free(scr);
	return e;
}

static void test_attention_case(const struct acase *c)
{
	struct abuf b;
	size_t nq = (size_t)c->n_tok * c->n_head * c->hd;
	float *got = malloc(nq * 4);
	double e;

	abuf_init(&b, c);
	dev_poison(b.dout, nq * 4);
	T_CUDA(ntx_cuda_attention(b.dout, b.dq, c->n_tok, c->n_head, &b.kv, b.dseq, b.dpos, b.ws,
				  ntx_cuda_attention_ws_bytes(c->n_tok, c->n_head, c->hd, c->n_ctx),
				  NULL, &g_err));
	dev_get(got, b.dout, nq * 4);
	e = attn_ref_nmse(&b, c, got);
	t_ok(e <= NMSE_ATTN, "attention %s: %d tok, %d/%d heads, hd %d, n_ctx %d, %s: NMSE %.3g <= %g",
	     c->what, c->n_tok, c->n_head, c->n_kv, c->hd, c->n_ctx, c->f16 ? "F16" : "F32", e,
	     NMSE_ATTN);
	abuf_free(&b);
	free(got);
}

/* The fused variant; returns the NMSE of the worse of two runs and counts
 * q8 blocks that differ from the host quantizer of the float output. */
static double attn_q8_run(struct abuf *b, const struct acase *c, void *dxq, float *got,
			  unsigned char *hq, long *bad, cudaStream_t st)
{
	size_t nrow = (size_t)c->n_head * c->hd, nq = (size_t)c->n_tok * nrow;
	size_t qb = dxq ? ntx_cuda_q8_bytes((int64_t)nrow, c->n_tok) : 0;
	size_t qsb = dxq ? ntx_cuda_q8_qs_bytes((int64_t)nrow, c->n_tok) : 0;
	size_t wsb = ntx_cuda_attention_ws_bytes(c->n_tok, c->n_head, c->hd, c->n_ctx);
	double e;

	dev_poison(b->dout, nq * 4);
	if (dxq)
		dev_poison(dxq, qb);
	T_CUDA(ntx_cuda_attention_q8(b->dout, dxq, b->dq, c->n_tok, c->n_head, &b->kv, b->dseq,
				     b->dpos, b->ws, wsb, (ntx_stream_t)st, &g_err));
	CK(cudaStreamSynchronize(st));
	dev_get(got, b->dout, nq * 4);
	e = attn_ref_nmse(b, c, got);
	if (dxq) {
		dev_get(hq, dxq, qb);
		for (int t = 0; t < c->n_tok; t++) {
			for (size_t k = 0; k < nrow / 32; k++) {
				int8_t q[32];
				float d, ds, gd[2];

				ntx_ref_q8_32(got + t * nrow + 32 * k, q, &d, &ds);
				memcpy(gd, hq + qsb + ((size_t)t * (nrow / 32) + k) * 8, 8);
				*bad += memcmp(q, hq + t * nrow + 32 * k, 32) != 0 || gd[0] != d ||
					gd[1] != ds;
			}
		}
	}
	return e;
}

static void test_attention_q8_case(const struct acase *c)
{
	struct abuf b;
	size_t nrow = (size_t)c->n_head * c->hd, nq = (size_t)c->n_tok * nrow;
	size_t wsb = ntx_cuda_attention_ws_bytes(c->n_tok, c->n_head, c->hd, c->n_ctx);
	int q8 = c->hd % 32 == 0;
	float *got = malloc(nq * 4);
	void *dxq = q8 ? dev_alloc(ntx_cuda_q8_bytes((int64_t)nrow, c->n_tok)) : NULL;
	unsigned char *hq = q8 ? malloc(ntx_cuda_q8_bytes((int64_t)nrow, c->n_tok)) : NULL;
	long bad = 0;
	double e1, e2;

	abuf_init(&b, c);
	if (b.ws)
		CK(cudaMemset(b.ws, 0, wsb));
	e1 = attn_q8_run(&b, c, dxq, got, hq, &bad, 0);
	e2 = attn_q8_run(&b, c, dxq, got, hq, &bad, 0); /* counters reset by the first */
	t_ok(fmax(e1, e2) <= NMSE_ATTN && bad == 0,
	     "attention_q8 %s: %d tok, %d/%d heads, hd %d, n_ctx %d: NMSE %.3g, %.3g; q8 %s (%ld bad blocks)",
	     c->what, c->n_tok, c->n_head, c->n_kv, c->hd, c->n_ctx, e1, e2,
	     q8 ? "== host quantizer" : "not asked (hd % 32)", bad);
	abuf_free(&b);
	dev_free(dxq);
	free(got), free(hq);
}

/* Fused variant in a graph: captured once, replayed at new positions. */
static void test_attention_q8_graph(void)
{
	struct acase c = { "graph q8", 1, 32, 8, 128, 4097, 1, 1, 0, { 5 }, { 0 } };
	static const int32_t replay_pos[4] = { 10, 4000, 63, 4096 };
	size_t nq = (size_t)c.n_head * c.hd;
	float *got = malloc(nq * 4);
	void *dxq = dev_alloc(ntx_cuda_q8_bytes((int64_t)nq, 1));
	unsigned char *hq = malloc(ntx_cuda_q8_bytes((int64_t)nq, 1));
	struct abuf b;
	cudaStream_t st;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	double worst = 0;
	long bad = 0;

	abuf_init(&b, &c);
	CK(cudaMemset(b.ws, 0, ntx_cuda_attention_ws_bytes(1, c.n_head, c.hd, c.n_ctx)));
	CK(cudaStreamCreate(&st));
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	if (ntx_cuda_attention_q8(b.dout, dxq, b.dq, 1, c.n_head, &b.kv, b.dseq, b.dpos, b.ws,
				  ntx_cuda_attention_ws_bytes(1, c.n_head, c.hd, c.n_ctx),
				  (ntx_stream_t)st, &g_err)) {
		cudaStreamEndCapture(st, &g);
		t_ok(0, "attention_q8 captured in a graph: %s", g_err.msg);
		return;
	}
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	for (int i = 0; i < 4; i++) {
		double e;

		b.pos[0] = replay_pos[i];
		CK(cudaMemcpy(b.dpos, b.pos, 4, cudaMemcpyHostToDevice));
		dev_poison(b.dout, nq * 4);
		dev_poison(dxq, ntx_cuda_q8_bytes((int64_t)nq, 1));
		CK(cudaGraphLaunch(ge, st));
		CK(cudaStreamSynchronize(st));
		dev_get(got, b.dout, nq * 4);
		dev_get(hq, dxq, ntx_cuda_q8_bytes((int64_t)nq, 1));
		e = attn_ref_nmse(&b, &c, got);
		worst = e > worst ? e : worst;
		for (size_t k = 0; k < nq / 32; k++) {
			int8_t q[32];
			float d, ds, gd[2];

			ntx_ref_q8_32(got + 32 * k, q, &d, &ds);
			memcpy(gd, hq + ntx_cuda_q8_qs_bytes((int64_t)nq, 1) + k * 8, 8);
			bad += memcmp(q, hq + 32 * k, 32) != 0 || gd[0] != d || gd[1] != ds;
		}
	}
	t_ok(worst <= NMSE_ATTN && bad == 0,
	     "attention_q8 graph replayed at pos 10, 4000, 63, 4096: NMSE %.3g, %ld bad q8 blocks",
	     worst, bad);
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaStreamDestroy(st));
	abuf_free(&b);
	dev_free(dxq);
	free(got), free(hq);
}

/* pos out of range: that token's output is NaN; the others are right. */
static void test_attention_bad_pos(void)
{
	struct acase c = { "bad pos", 2, 8, 2, 64, 40, 1, 1, 0, { 39, 40 }, { 0, 0 } };
	struct abuf b;
	size_t nq = (size_t)c.n_tok * c.n_head * c.hd, half = nq / 2;
	float *got = malloc(nq * 4);
	int nan_ok = 1;

	abuf_init(&b, &c);
	dev_poison(b.dout, nq * 4);
	T_CUDA(ntx_cuda_attention(b.dout, b.dq, c.n_tok, c.n_head, &b.kv, b.dseq, b.dpos, b.ws,
				  ntx_cuda_attention_ws_bytes(c.n_tok, c.n_head, c.hd, c.n_ctx), NULL,
				  &g_err));
	dev_get(got, b.dout, nq * 4);
	for (size_t i = half; i < nq; i++)
		nan_ok &= isnan(got[i]) != 0;
	b.pos[1] = 39; /* the CPU reference cannot take pos 40: compare token 0 only */
	c.n_tok = 1;
	{
		double e = attn_ref_nmse(&b, &c, got);

		t_ok(nan_ok && e <= NMSE_ATTN, "attention: pos = n_ctx gives NaN for that token only (token 0 NMSE %.3g)", e);
	}
	c.n_tok = 2;
	abuf_free(&b);
	free(got);
}

/* Capture once, replay at other positions. */
static void test_attention_graph(void)
{
	struct acase c = { "graph", 1, 32, 8, 128, 4097, 1, 1, 0, { 5 }, { 0 } };
	static const int32_t replay_pos[3] = { 10, 4000, 63 };
	struct abuf b;
	size_t nq = (size_t)c.n_head * c.hd;
	float *got = malloc(nq * 4);
	cudaStream_t st;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	double worst = 0;

	abuf_init(&b, &c);
	CK(cudaStreamCreate(&st));
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	if (ntx_cuda_attention(b.dout, b.dq, 1, c.n_head, &b.kv, b.dseq, b.dpos, b.ws,
			       ntx_cuda_attention_ws_bytes(1, c.n_head, c.hd, c.n_ctx),
			       (ntx_stream_t)st, &g_err)) {
		cudaStreamEndCapture(st, &g);
		t_ok(0, "attention captured in a graph: %s", g_err.msg);
		return;
	}
	CK(cudaStreamEndCapture(st, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	for (int i = 0; i < 3; i++) {
		double e;

		b.pos[0] = replay_pos[i];
		CK(cudaMemcpy(b.dpos, b.pos, 4, cudaMemcpyHostToDevice));
		dev_poison(b.dout, nq * 4);
		CK(cudaGraphLaunch(ge, st));
		CK(cudaStreamSynchronize(st));
		dev_get(got, b.dout, nq * 4);
		e = attn_ref_nmse(&b, &c, got);
		worst = e > worst ? e : worst;
	}
	t_ok(worst <= NMSE_ATTN, "attention graph captured once, replayed at pos 10, 4000, 63: NMSE %.3g",
	     worst);
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaStreamDestroy(st));
	abuf_free(&b);
	free(got);
}

/* Batch invariance and the q8 formats: 8 reference tokens at spread
 * positions (one split and many), then launches of 1..8 tokens holding
 * some of them in other slots next to a fresh companion. */
static void test_attention_invariance(int f16)
{
	const int n_head = 32, n_kv = 8, hd = 128, n_ctx = 4097, n_seq = 2, NQ = n_head * hd;
	static const int32_t rpos[8] = { 4096, 100, 3000, 64, 65, 0, 2047, 511 };
	static const int32_t rseq[8] = { 0, 1, 0, 1, 1, 0, 1, 0 };
	struct acase c = { "invariance", 8, n_head, n_kv, hd, n_ctx, n_seq, f16, 0, { 0 }, { 0 } };
	struct abuf b;
	size_t wsb = 0, qb8 = ntx_cuda_q8_bytes(NQ, 8);
	float *ref = malloc((size_t)8 * NQ * 4), *got = malloc((size_t)8 * NQ * 4);
	float *q8 = malloc((size_t)8 * NQ * 4), *dq, *dout;
	unsigned char *rq[3], *hq = malloc(qb8), *hq2 = malloc(qb8);
	void *ws, *dxq = dev_alloc(qb8), *dxq2 = dev_alloc(qb8);
	int32_t pos[8], seq[8], *dpos, *dseq;
	long bad = 0, badq = 0, bad_same = 0, bad_fmt = 0;

	for (int k = 1; k <= 8; k++)
		if (ntx_cuda_attention_ws_bytes(k, n_head, hd, n_ctx) > wsb)
			wsb = ntx_cuda_attention_ws_bytes(k, n_head, hd, n_ctx);
	c.n_tok = 1;
	abuf_init(&b, &c); /* the cache; queries below */
	ws = dev_alloc(wsb);
	CK(cudaMemset(ws, 0, wsb));
	{
		float *qr = rnd_gauss_vec((size_t)8 * NQ, 2.0f);

		memcpy(q8, qr, (size_t)8 * NQ * 4);
		free(qr);
	}
	dq = dev_up(q8, (size_t)8 * NQ * 4);
	dout = dev_alloc((size_t)8 * NQ * 4);
	dpos = dev_up(rpos, sizeof rpos), dseq = dev_up(rseq, sizeof rseq);
	/* reference: 8 tokens, the float output and the q8 of each format */
	dev_poison(dout, (size_t)8 * NQ * 4);
	T_CUDA(ntx_cuda_attention(dout, dq, 8, n_head, &b.kv, dseq, dpos, ws, wsb, NULL, &g_err));
	dev_get(ref, dout, (size_t)8 * NQ * 4);
	for (int fmt = 0; fmt < 3; fmt++) {
		rq[fmt] = malloc(qb8);
		dev_poison(dout, (size_t)8 * NQ * 4), dev_poison(dxq, qb8);
		T_CUDA(ntx_cuda_attention_q8_fmt(dout, dxq, fmt, dq, 8, n_head, &b.kv, dseq, dpos, ws, wsb,
						 NULL, &g_err));
		T_CUDA(ntx_cuda_quantize_q8_fmt(dout, dxq2, NQ, 8, fmt, NULL, &g_err));
		dev_get(got, dout, (size_t)8 * NQ * 4);
		dev_get(rq[fmt], dxq, qb8), dev_get(hq2, dxq2, qb8);
		bad_same += memcmp(got, ref, (size_t)8 * NQ * 4) != 0;
		bad_fmt += memcmp(rq[fmt], hq2, qb8) != 0 || q8_bad_blocks(ref, NQ, 8, fmt, rq[fmt]) != 0;
	}
	{
		/* the reference itself against the CPU */
		struct acase c8 = c;
		struct abuf b8 = b;

		c8.n_tok = 8;
		b8.q = q8, b8.pos = (int32_t *)rpos, b8.seq = (int32_t *)rseq;
		t_ok(attn_ref_nmse(&b8, &c8, ref) <= NMSE_ATTN, "attention %s reference tokens vs ntx_op_attention",
		     f16 ? "F16" : "F32");
	}
	for (int k = 1; k <= 8; k++) {
		int src[8];
		float *qk = malloc((size_t)k * NQ * 4);
		float *dqk;
		int32_t *dp, *ds;

		for (int i = 0; i < k; i++) {
			src[i] = (3 * i + k) % 8;
			if (i == 0 && k > 1)
				src[i] = -1;
			if (src[i] < 0) { /* companion: its own query and position */
				for (int e = 0; e < NQ; e++)
					qk[(size_t)i * NQ + e] = 2.0f * rnd_gauss();
				pos[i] = 1234, seq[i] = 1;
			} else {
				memcpy(qk + (size_t)i * NQ, q8 + (size_t)src[i] * NQ, (size_t)NQ * 4);
				pos[i] = rpos[src[i]], seq[i] = rseq[src[i]];
			}
		}
		dqk = dev_up(qk, (size_t)k * NQ * 4);
		dp = dev_up(pos, (size_t)k * 4), ds = dev_up(seq, (size_t)k * 4);
		dev_poison(dout, (size_t)k * NQ * 4);
		T_CUDA(ntx_cuda_attention(dout, dqk, k, n_head, &b.kv, ds, dp, ws, wsb, NULL, &g_err));
		dev_get(got, dout, (size_t)k * NQ * 4);
		for (int i = 0; i < k; i++)
			if (src[i] >= 0)
				bad += memcmp(got + (size_t)i * NQ, ref + (size_t)src[i] * NQ, (size_t)NQ * 4) != 0;
		for (int fmt = 0; fmt < 3; fmt++) {
			size_t qbk = ntx_cuda_q8_bytes(NQ, k), qsk = ntx_cuda_q8_qs_bytes(NQ, k);

			dev_poison(dout, (size_t)k * NQ * 4), dev_poison(dxq, qbk);
			T_CUDA(ntx_cuda_attention_q8_fmt(dout, dxq, fmt, dqk, k, n_head, &b.kv, ds, dp, ws, wsb,
							 NULL, &g_err));
			dev_get(got, dout, (size_t)k * NQ * 4);
			dev_get(hq, dxq, qbk);
			for (int i = 0; i < k; i++) {
				if (src[i] < 0)
					continue;
				bad += memcmp(got + (size_t)i * NQ, ref + (size_t)src[i] * NQ, (size_t)NQ * 4) != 0;
				badq += memcmp(hq + (size_t)i * NQ, rq[fmt] + (size_t)src[i] * NQ, NQ) != 0;
				badq += memcmp(hq + qsk + (size_t)i * (NQ / 32) * 8,
					       rq[fmt] + ntx_cuda_q8_qs_bytes(NQ, 8) + (size_t)src[i] * (NQ / 32) * 8,
					       (NQ / 32) * 8) != 0;
			}
		}
		dev_free(dqk), dev_free(dp), dev_free(ds);
		free(qk);
	}
	t_ok(bad_same == 0 && bad_fmt == 0,
	     "attention_q8_fmt %s (formats 32, Q8_0, Q8_K): float output == attention's bitwise (%ld), q8 == quantize_q8_fmt of it and the host oracle (%ld)",
	     f16 ? "F16" : "F32", bad_same, bad_fmt);
	t_ok(bad == 0 && badq == 0,
	     "attention / attention_q8 %s batch invariance: n_tok 1..8, other slots and companions, pos 0..4096: %ld float rows, %ld q8 rows differ",
	     f16 ? "F16" : "F32", bad, badq);
	{
		struct ntx_err e = { 0 };
		struct ntx_cuda_kv kv1 = b.kv;

		kv1.n_head_kv = 8; /* G = 1 with 8 heads: G * hd = 128, not a multiple of 256 */
		t_ok(ntx_cuda_attention_q8_fmt(dout, dxq, NTX_CUDA_Q8F_Q8_K, dq, 1, 8, &kv1, dseq, dpos, ws,
					       wsb, NULL, &e) == -1 && e.msg[0],
		     "attention_q8_fmt: Q8_K output with (n_head / n_head_kv) * head_dim = 128 rejected: %s",
		     e.msg);
	}
	for (int fmt = 0; fmt < 3; fmt++)
		free(rq[fmt]);
	dev_free(dq), dev_free(dout), dev_free(dpos), dev_free(dseq), dev_free(ws), dev_free(dxq);
	dev_free(dxq2);
	abuf_free(&b);
	free(ref), free(got), free(q8), free(hq), free(hq2);
}

int main(int argc, char **argv)
{
	static const struct acase cases[] = {
		{ "decode, end of context", 1, 32, 8, 128, 4097, 1, 1, 0, { 4096 }, { 0 } },
		{ "decode", 1, 32, 8, 128, 4097, 1, 0, 0, { 33 }, { 0 } },
		{ "n_ctx 1, MHA", 1, 8, 8, 64, 1, 1, 1, 0, { 0 }, { 0 } },
		{ "3 sequences, n_ctx 33", 4, 8, 2, 64, 33, 3, 0, 0, { 32, 0, 17, 32 }, { 0, 1, 2, 1 } },
		{ "hd 48, group 3", 3, 6, 2, 48, 100, 2, 1, 0, { 99, 50, 3 }, { 1, 0, 1 } },
		{ "group 8", 2, 64, 8, 128, 2048, 1, 1, 0, { 2047, 700 }, { 0, 0 } },
		{ "group 16", 2, 16, 1, 64, 300, 1, 0, 0, { 299, 1 }, { 0, 0 } },
		{ "hd 256", 1, 8, 4, 256, 300, 1, 1, 0, { 299 }, { 0 } },
		{ "prefill 512 causal", 512, 8, 2, 64, 1024, 1, 1, 1, { 0 }, { 0 } },
		{ "prefill 2 sequences", 64, 16, 4, 128, 64, 2, 0, 2, { 0 }, { 0 } },
		{ "decode batch 8", 8, 32, 8, 128, 4097, 1, 1, 2, { 0 }, { 0 } },
	};

	gpu_start(argc, argv);
	test_rope(1, 64, 0, 1.0f, 0);
	test_rope(0, 64, 1, 1.0f, 0);
	test_rope(1, 32, 1, 0.25f, 0);
	test_rope(1, 64, 0, 1.0f, 1);
	test_rope(0, 64, 1, 1.0f, 1);
	test_rope(0, 32, 1, 0.25f, 1); /* n_rot < head_dim: the rest untouched */
	test_rope(1, 48, 0, 1.0f, 1);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		test_attention_case(&cases[i]);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		test_attention_q8_case(&cases[i]);
	test_attention_bad_pos();
	test_attention_graph();
	test_attention_q8_graph();
	test_attention_invariance(1);
	test_attention_invariance(0);
	t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
	return t_done();
}
