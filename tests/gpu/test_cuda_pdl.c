/* test_cuda_pdl.c - programmatic dependent launch (kernels/cuda/common.cuh,
 * launch.cu) changes timing only. A decode step of a small Llama-shaped
 * model - Q6_K embedding lookup; 4 layers alternating as ntx_gpu_layer runs
 * them (rmsnorm + q8, Q/K/V in one gemv_multi, rope + KV store, attention
 * with the in-launch merge and q8 output, o and fused gate/up GEMVs,
 * quantize, down GEMV with the residual add) and unfused (three GEMVs,
 * attention + combine kernel, quantize, GEMV + add, gate, up, swiglu); then
 * a copy of the residual, rmsnorm, an F16 head and argmax - in which every
 * kernel reads what the one before wrote and overwrites buffers the one
 * before read, for 1 and 3 tokens, gives bitwise the same logits, argmax,
 * residual stream and KV caches with PDL forced off (the reference) and on:
 * launched one by one on a stream and on the legacy default stream, and
 * captured in a CUDA graph and replayed. Also the switches:
 * ntx_cuda_pdl_set(0 / 1 / -1), no_pdl (ntx_cuda_tunables_set) and
 * NTX_NO_PDL (run-gpu-tests.sh runs this program again with NTX_NO_PDL=1).
 * On a device without PDL (compute capability < 9) "on" launches as "off",
 * and the checks say so. */
#include "gpu_util.h"

#define PL_E 2048   /* n_embd */
#define PL_NH 16    /* heads */
#define PL_NKV 4    /* KV heads */
#define PL_HD 128   /* head_dim */
#define PL_KVD (PL_NKV * PL_HD)
#define PL_F 5632   /* n_ff */
#define PL_V 4096   /* vocab */
#define PL_CTX 1024 /* n_ctx: 16 attention splits at decode */
#define PL_SEQ 2
#define PL_LAYERS 4
#define PL_MAXT 3

struct pl_layer {
	void *wq, *wk, *wv, *wo, *wg, *wu, *wd; /* Q4_K (n_out rows of n_in); wv, wd Q6_K */
	float *an, *fn;                         /* (PL_E) norm weights */
	struct ntx_cuda_kv kv;                  /* F16 [PL_SEQ][PL_CTX][PL_KVD] */
	uint16_t *hk, *hv;                      /* host copies of the initial cache */
};

struct pl_model {
	struct pl_layer L[PL_LAYERS];
	void *emb;            /* Q6_K (PL_V rows of PL_E) */
	void *wout;           /* F16 (PL_V rows of PL_E) */
	float *on;            /* (PL_E) */
	int32_t *tok, *seq, *pos;
	/* activations, [n_tok][...] */
	float *x, *xb, *q, *k, *v, *att, *tmp, *g, *h, *logits;
	void *xq;             /* q8 of up to PL_F per token */
	void *ws;             /* attention workspace (counters zeroed once) */
	size_t wsb;
	int32_t *am;
	void *amws;           /* argmax workspace (counters zeroed once) */
};

/* What a run leaves behind, on the host. */
struct pl_out {
	float *logits, *x;
	int32_t am[PL_MAXT];
	uint16_t *kc[PL_LAYERS], *vc[PL_LAYERS];
};

#define PL_CACHE_EL ((size_t)PL_SEQ * PL_CTX * PL_KVD)

static void *pl_rand_w(uint32_t t, int64_t n_in, int64_t n_out)
{
	size_t nb = row_bytes(t, n_in) * (size_t)n_out;
	void *h = malloc(nb), *d;

	rnd_rows(t, h, n_in, n_out);
	d = dev_up(h, nb);
	free(h);
	return d;
}

static float *pl_norm_w(void)
{
	float *h = rnd_gauss_vec(PL_E, 0.1f), *d;

	for (int i = 0; i < PL_E; i++)
		h[i] += 1.0f;
	d = dev_up(h, PL_E * 4);
	free(h);
	return d;
}

static void pl_init(struct pl_model *m)
{
	const int32_t tok[PL_MAXT] = { 17, 4000, 1234 }, seq[PL_MAXT] = { 0, 1, 0 };
	const int32_t pos[PL_MAXT] = { 700, 650, 701 };

	memset(m, 0, sizeof *m);
	for (int l = 0; l < PL_LAYERS; l++) {
		struct pl_layer *L = &m->L[l];

		L->wq = pl_rand_w(NTX_TYPE_Q4_K, PL_E, PL_E);
		L->wk = pl_rand_w(NTX_TYPE_Q4_K, PL_E, PL_KVD);
		L->wv = pl_rand_w(NTX_TYPE_Q6_K, PL_E, PL_KVD);
		L->wo = pl_rand_w(NTX_TYPE_Q4_K, PL_E, PL_E);
		L->wg = pl_rand_w(NTX_TYPE_Q4_K, PL_E, PL_F);
		L->wu = pl_rand_w(NTX_TYPE_Q4_K, PL_E, PL_F);
		L->wd = pl_rand_w(NTX_TYPE_Q6_K, PL_F, PL_E);
		L->an = pl_norm_w(), L->fn = pl_norm_w();
		L->hk = malloc(PL_CACHE_EL * 2), L->hv = malloc(PL_CACHE_EL * 2);
		for (size_t i = 0; i < PL_CACHE_EL; i++)
			L->hk[i] = ntx_fp32_to_fp16(rnd_gauss()), L->hv[i] = ntx_fp32_to_fp16(rnd_gauss());
		L->kv.k = dev_alloc(PL_CACHE_EL * 2), L->kv.v = dev_alloc(PL_CACHE_EL * 2);
		L->kv.kv_f16 = 1, L->kv.n_ctx = PL_CTX, L->kv.n_seq = PL_SEQ;
		L->kv.n_head_kv = PL_NKV, L->kv.head_dim = PL_HD;
	}
	m->emb = pl_rand_w(NTX_TYPE_Q6_K, PL_E, PL_V);
	m->wout = pl_rand_w(NTX_TYPE_F16, PL_E, PL_V);
	m->on = pl_norm_w();
	m->tok = dev_up(tok, sizeof tok), m->seq = dev_up(seq, sizeof seq);
	m->pos = dev_up(pos, sizeof pos);
	m->x = dev_alloc(PL_MAXT * PL_E * 4), m->xb = dev_alloc(PL_MAXT * PL_E * 4);
	m->q = dev_alloc(PL_MAXT * PL_E * 4), m->k = dev_alloc(PL_MAXT * PL_KVD * 4);
	m->v = dev_alloc(PL_MAXT * PL_KVD * 4), m->att = dev_alloc(PL_MAXT * PL_E * 4);
	m->tmp = dev_alloc(PL_MAXT * PL_E * 4), m->g = dev_alloc(PL_MAXT * PL_F * 4);
	m->h = dev_alloc(PL_MAXT * PL_F * 4), m->logits = dev_alloc(PL_MAXT * PL_V * 4);
	m->xq = dev_alloc(ntx_cuda_q8_bytes(PL_F, PL_MAXT));
	for (int nt = 1; nt <= PL_MAXT; nt++) {
		size_t b = ntx_cuda_attention_ws_bytes(nt, PL_NH, PL_HD, PL_CTX);

		m->wsb = b > m->wsb ? b : m->wsb;
	}
	m->ws = dev_alloc(m->wsb);
	CK(cudaMemset(m->ws, 0, m->wsb));
	m->am = dev_alloc(PL_MAXT * 4);
	m->amws = dev_alloc(ntx_cuda_argmax_ws_bytes(PL_MAXT));
	CK(cudaMemset(m->amws, 0, ntx_cuda_argmax_ws_bytes(PL_MAXT)));
}

static void pl_free(struct pl_model *m)
{
	for (int l = 0; l < PL_LAYERS; l++) {
		struct pl_layer *L = &m->L[l];

		dev_free(L->wq), dev_free(L->wk), dev_free(L->wv), dev_free(L->wo);
		dev_free(L->wg), dev_free(L->wu), dev_free(L->wd), dev_free(L->an), dev_free(L->fn);
		dev_free(L->kv.k), dev_free(L->kv.v);
		free(L->hk), free(L->hv);
	}
	dev_free(m->emb), dev_free(m->wout), dev_free(m->on);
	dev_free(m->tok), dev_free(m->seq), dev_free(m->pos);
	dev_free(m->x), dev_free(m->xb), dev_free(m->q), dev_free(m->k), dev_free(m->v);
	dev_free(m->att), dev_free(m->tmp), dev_free(m->g), dev_free(m->h), dev_free(m->logits);
	dev_free(m->xq), dev_free(m->ws), dev_free(m->am), dev_free(m->amws);
}

/* Before a run: the initial caches, every activation poisoned (NaN). */
static void pl_reset(struct pl_model *m)
{
	CK(cudaDeviceSynchronize());
	for (int l = 0; l < PL_LAYERS; l++) {
		dev_put(m->L[l].kv.k, m->L[l].hk, PL_CACHE_EL * 2);
		dev_put(m->L[l].kv.v, m->L[l].hv, PL_CACHE_EL * 2);
	}
	dev_poison(m->x, PL_MAXT * PL_E * 4), dev_poison(m->xb, PL_MAXT * PL_E * 4);
	dev_poison(m->q, PL_MAXT * PL_E * 4), dev_poison(m->k, PL_MAXT * PL_KVD * 4);
	dev_poison(m->v, PL_MAXT * PL_KVD * 4), dev_poison(m->att, PL_MAXT * PL_E * 4);
	dev_poison(m->tmp, PL_MAXT * PL_E * 4), dev_poison(m->g, PL_MAXT * PL_F * 4);
	dev_poison(m->h, PL_MAXT * PL_F * 4), dev_poison(m->logits, PL_MAXT * PL_V * 4);
	dev_poison(m->xq, ntx_cuda_q8_bytes(PL_F, PL_MAXT)), dev_poison(m->am, PL_MAXT * 4);
	CK(cudaDeviceSynchronize());
}

/* Layer l as the engine runs it (fused) or unfused; the residual stream x
 * is updated in place. */
static int pl_layer(struct pl_model *m, int l, int nt, int fused, ntx_stream_t s)
{
	const int K = NTX_CUDA_Q8F_Q8_K;
	const struct pl_layer *L = &m->L[l];
	struct ntx_cuda_rope rope = { PL_HD, 10000.0f, 1.0f, NULL, NULL, 0 };
	struct ntx_cuda_gemv_seg qkv[3] = {
		{ NTX_TYPE_Q4_K, L->wq, PL_E, m->q, 0 },
		{ NTX_TYPE_Q4_K, L->wk, PL_KVD, m->k, 0 },
		{ NTX_TYPE_Q6_K, L->wv, PL_KVD, m->v, 0 },
	};

	if (ntx_cuda_rmsnorm_fmt(m->xb, m->xq, K, m->x, L->an, nt, PL_E, 1e-5f, s, &g_err))
		return -1;
	if (fused) {
		if (ntx_cuda_gemv_multi(qkv, 3, PL_E, m->xb, m->xq, nt, s, &g_err) ||
		    ntx_cuda_rope_store(m->q, m->k, m->v, nt, PL_NH, &L->kv, m->seq, m->pos, &rope, s,
					&g_err) ||
		    ntx_cuda_attention_q8_fmt(m->att, m->xq, K, m->q, nt, PL_NH, &L->kv, m->seq, m->pos,
					      m->ws, m->wsb, s, &g_err) ||
		    ntx_cuda_gemv(NTX_TYPE_Q4_K, L->wo, PL_E, PL_E, m->att, m->xq, m->x, nt, 1, s, &g_err) ||
		    ntx_cuda_rmsnorm_fmt(m->xb, m->xq, K, m->x, L->fn, nt, PL_E, 1e-5f, s, &g_err) ||
		    ntx_cuda_gemv_swiglu(NTX_TYPE_Q4_K, L->wg, NTX_TYPE_Q4_K, L->wu, PL_E, PL_F, m->xb,
					 m->xq, m->h, nt, s, &g_err) ||
		    ntx_cuda_quantize_q8_fmt(m->h, m->xq, PL_F, nt, K, s, &g_err))
			return -1;
		return ntx_cuda_gemv(NTX_TYPE_Q6_K, L->wd, PL_F, PL_E, m->h, m->xq, m->x, nt, 1, s, &g_err);
	}
	for (int i = 0; i < 3; i++)
		if (ntx_cuda_gemv(qkv[i].wtype, qkv[i].w, PL_E, qkv[i].n_out, m->xb, m->xq, qkv[i].y, nt,
				  0, s, &g_err))
			return -1;
	if (ntx_cuda_rope_store(m->q, m->k, m->v, nt, PL_NH, &L->kv, m->seq, m->pos, &rope, s, &g_err) ||
	    ntx_cuda_attention(m->att, m->q, nt, PL_NH, &L->kv, m->seq, m->pos, m->ws, m->wsb, s,
			       &g_err) ||
	    ntx_cuda_quantize_q8_fmt(m->att, m->xq, PL_E, nt, K, s, &g_err) ||
	    ntx_cuda_gemv(NTX_TYPE_Q4_K, L->wo, PL_E, PL_E, m->att, m->xq, m->tmp, nt, 0, s, &g_err) ||
	    ntx_cuda_add(m->x, m->tmp, (int64_t)nt * PL_E, s, &g_err) ||
	    ntx_cuda_rmsnorm_fmt(m->xb, m->xq, K, m->x, L->fn, nt, PL_E, 1e-5f, s, &g_err) ||
	    ntx_cuda_gemv(NTX_TYPE_Q4_K, L->wg, PL_E, PL_F, m->xb, m->xq, m->g, nt, 0, s, &g_err) ||
	    ntx_cuda_gemv(NTX_TYPE_Q4_K, L->wu, PL_E, PL_F, m->xb, m->xq, m->h, nt, 0, s, &g_err) ||
	    ntx_cuda_swiglu(m->g, m->g, m->h, (int64_t)nt * PL_F, s, &g_err) ||
	    ntx_cuda_quantize_q8_fmt(m->g, m->xq, PL_F, nt, K, s, &g_err))
		return -1;
	return ntx_cuda_gemv(NTX_TYPE_Q6_K, L->wd, PL_F, PL_E, m->g, m->xq, m->x, nt, 1, s, &g_err);
}

/* The whole step: embedding, layers, head, argmax. The head reads a copy
 * of the residual made by cudaMemcpyAsync, as the engine gathers its head
 * rows: a kernel launched with PDL after a copy, in a stream and in a graph. */
static int pl_step(struct pl_model *m, int nt, ntx_stream_t s)
{
	cudaError_t e;

	if (ntx_cuda_get_rows(NTX_TYPE_Q6_K, m->emb, row_bytes(NTX_TYPE_Q6_K, PL_E), PL_E, m->tok, nt,
			      m->x, s, &g_err))
		return -1;
	for (int l = 0; l < PL_LAYERS; l++)
		if (pl_layer(m, l, nt, l % 2 == 0, s))
			return -1;
	e = cudaMemcpyAsync(m->tmp, m->x, (size_t)nt * PL_E * 4, cudaMemcpyDeviceToDevice,
			    (cudaStream_t)s);
	if (e != cudaSuccess) {
		snprintf(g_err.msg, sizeof g_err.msg, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
		return -1;
	}
	return ntx_cuda_rmsnorm(m->xb, NULL, m->tmp, m->on, nt, PL_E, 1e-5f, s, &g_err) ||
	       ntx_cuda_gemv(NTX_TYPE_F16, m->wout, PL_E, PL_V, m->xb, NULL, m->logits, nt, 0, s,
			     &g_err) ||
	       ntx_cuda_argmax(m->logits, PL_V, nt, m->am, m->amws, ntx_cuda_argmax_ws_bytes(PL_MAXT), s,
			       &g_err);
}

static void pl_get(struct pl_model *m, int nt, struct pl_out *o)
{
	o->logits = malloc((size_t)nt * PL_V * 4), o->x = malloc((size_t)nt * PL_E * 4);
	dev_get(o->logits, m->logits, (size_t)nt * PL_V * 4);
	dev_get(o->x, m->x, (size_t)nt * PL_E * 4);
	dev_get(o->am, m->am, (size_t)nt * 4);
	for (int l = 0; l < PL_LAYERS; l++) {
		o->kc[l] = malloc(PL_CACHE_EL * 2), o->vc[l] = malloc(PL_CACHE_EL * 2);
		dev_get(o->kc[l], m->L[l].kv.k, PL_CACHE_EL * 2);
		dev_get(o->vc[l], m->L[l].kv.v, PL_CACHE_EL * 2);
	}
}

static void pl_out_free(struct pl_out *o)
{
	free(o->logits), free(o->x);
	for (int l = 0; l < PL_LAYERS; l++)
		free(o->kc[l]), free(o->vc[l]);
}

/* Run the step with PDL forced to pdl (0 or 1): one by one on s, or
 * captured on s as a graph and replayed (graph = 1). */
static void pl_run(struct pl_model *m, int nt, int pdl, int graph, cudaStream_t s, struct pl_out *o)
{
	ntx_cuda_pdl_set(pdl);
	if (graph) {
		cudaGraph_t g;
		cudaGraphExec_t ge;
		cudaError_t ce;
		int rc;

		CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
		rc = pl_step(m, nt, (ntx_stream_t)s);
		ce = cudaStreamEndCapture(s, &g);
		if (rc || ce != cudaSuccess) {
			t_ok(0, "step captured with PDL %s: %s", pdl ? "on" : "off",
			     rc ? g_err.msg : cudaGetErrorString(ce));
			exit(t_done() | 1);
		}
		CK(cudaGraphInstantiate(&ge, g, 0));
		pl_reset(m);
		CK(cudaGraphLaunch(ge, s));
		CK(cudaStreamSynchronize(s));
		CK(cudaGraphExecDestroy(ge));
		CK(cudaGraphDestroy(g));
	} else {
		pl_reset(m);
		T_CUDA(pl_step(m, nt, (ntx_stream_t)s));
	}
	CK(cudaDeviceSynchronize());
	ntx_cuda_pdl_set(-1);
	pl_get(m, nt, o);
}

static long pl_diff(const void *a, const void *b, size_t n, size_t el)
{
	long d = 0;

	for (size_t i = 0; i < n; i++)
		d += memcmp((const char *)a + i * el, (const char *)b + i * el, el) != 0;
	return d;
}

static void test_pdl_bitwise(int nt, int has_pdl)
{
	static const struct {
		int pdl, graph, legacy;
		const char *name;
	} runs[] = {
		{ 0, 1, 0, "PDL off, graph" },
		{ 1, 0, 0, "PDL on, stream" },
		{ 1, 0, 1, "PDL on, legacy default stream" },
		{ 1, 1, 0, "PDL on, graph" },
	};
	struct pl_model m;
	struct pl_out ref, o;
	cudaStream_t s;
	int fin = 1;

	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	pl_init(&m);
	pl_run(&m, nt, 0, 0, s, &ref);
	for (int i = 0; i < nt * PL_V; i++)
		fin &= isfinite(ref.logits[i]) != 0;
	for (int i = 0; i < nt * PL_E; i++)
		fin &= isfinite(ref.x[i]) != 0;
	t_ok(fin, "pdl n_tok %d: reference (PDL off, stream) logits and residual finite (argmax %d)", nt,
	     ref.am[0]);
	for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
		long dl, dx, da = 0, dk = 0;

		pl_run(&m, nt, runs[r].pdl, runs[r].graph, runs[r].legacy ? NULL : s, &o);
		dl = pl_diff(o.logits, ref.logits, (size_t)nt * PL_V, 4);
		dx = pl_diff(o.x, ref.x, (size_t)nt * PL_E, 4);
		for (int t = 0; t < nt; t++)
			da += o.am[t] != ref.am[t];
		for (int l = 0; l < PL_LAYERS; l++)
			dk += pl_diff(o.kc[l], ref.kc[l], PL_CACHE_EL, 2) +
			      pl_diff(o.vc[l], ref.vc[l], PL_CACHE_EL, 2);
		t_ok(dl == 0 && dx == 0 && da == 0 && dk == 0,
		     "pdl n_tok %d: %s%s == PDL off, bitwise (differing: %ld logits, %ld residual, "
		     "%ld argmax, %ld KV cache elements)",
		     nt, runs[r].name, runs[r].pdl && !has_pdl ? " (no PDL on this device: launched as off)" : "",
		     dl, dx, da, dk);
		pl_out_free(&o);
	}
	pl_out_free(&ref);
	pl_free(&m);
	CK(cudaStreamDestroy(s));
}

/* ntx_cuda_pdl_set, the switch no_pdl (ntx_cuda_tunables_set) and
 * NTX_NO_PDL (gpu_start hands the environment's switches over). Returns
 * whether the device can use PDL. */
static int test_pdl_switches(void)
{
	int dev = 0, major = 0, cap, auto_on;
	const char *no = getenv("NTX_NO_PDL");
	struct ntx_tunables tun;

	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	cap = major >= 9;
	auto_on = cap && !(no && *no && strcmp(no, "0"));
	ntx_cuda_pdl_set(-1);
	t_ok(ntx_cuda_pdl_enabled() == auto_on,
	     "pdl automatic: %s (compute capability %d.x, NTX_NO_PDL %s%s%s)",
	     ntx_cuda_pdl_enabled() ? "on" : "off", major, no ? "= \"" : "unset", no ? no : "",
	     no ? "\"" : "");
	ntx_cuda_pdl_set(0);
	t_ok(ntx_cuda_pdl_enabled() == 0, "pdl_set(0): off");
	ntx_cuda_pdl_set(1);
	t_ok(ntx_cuda_pdl_enabled() == cap, "pdl_set(1): %s (on wherever the device supports it)",
	     cap ? "on" : "off");
	ntx_cuda_pdl_set(-1);
	t_ok(ntx_cuda_pdl_enabled() == auto_on, "pdl_set(-1): back to automatic");
	ntx_tunables_default(&tun);
	tun.no_pdl = 1;
	ntx_cuda_tunables_set(&tun);
	t_ok(ntx_cuda_pdl_enabled() == 0, "switch no_pdl = 1: off");
	ntx_cuda_pdl_set(1);
	t_ok(ntx_cuda_pdl_enabled() == cap, "pdl_set(1) overrides no_pdl = 1: %s", cap ? "on" : "off");
	ntx_cuda_pdl_set(-1);
	tun.no_pdl = 0;
	ntx_cuda_tunables_set(&tun);
	t_ok(ntx_cuda_pdl_enabled() == cap, "switch no_pdl = 0: %s", cap ? "on" : "off");
	ntx_tunables_from_env(&tun); /* back to the environment's */
	ntx_cuda_tunables_set(&tun);
	t_ok(ntx_cuda_pdl_enabled() == auto_on, "the environment's switches again");
	return cap;
}

int main(int argc, char **argv)
{
	int cap;

	gpu_start(argc, argv);
	cap = test_pdl_switches();
	test_pdl_bitwise(1, cap);
	test_pdl_bitwise(3, cap);
	t_ok(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous CUDA error at the end");
	return t_done();
}
