/* engine.c - batch evaluation: embedding, the layer loop (each layer on its
 * executor, its weights resident, streamed or computed in place), final norm
 * and output head; KV cache bookkeeping; the streamer's job list (the layers
 * whose weights move, lib/stream/stream.h). See engine_int.h for the parts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/mman.h>

#include "clock.h"
#include "engine_int.h"
#include "pack.h"
#include "sampler.h"

const char *ntx_backend_name(enum ntx_backend b)
{
	return b == NTX_BACKEND_CUDA ? "cuda" : b == NTX_BACKEND_CPU ? "cpu" : "auto";
}

int ntx_engine_gpu_usable(int device, char *why, size_t why_len)
{
	return ntx_gpu_usable(device, why, why_len);
}

static int kv_alloc(struct ntx_kv_layer *kv, const struct ntx_llama_config *c, int n_ctx,
		    int n_seq, int f16, struct ntx_err *err)
{
	size_t n = (size_t)n_seq * n_ctx * c->n_head_kv * c->head_dim;
	size_t es = f16 ? 2 : 4;

	kv->f16 = f16;
	kv->n_ctx = n_ctx;
	kv->n_seq = n_seq;
	kv->n_head_kv = c->n_head_kv;
	kv->head_dim = c->head_dim;
	kv->k = calloc(n, es);
	kv->v = calloc(n, es);
	if (!kv->k || !kv->v)
		return ntx_err_set(err, NTX_ENOMEM,
				   "out of memory for the KV cache (%zu bytes per layer)", 2 * n * es);
	return 0;
}

static int n_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

/* Home and executor of every layer from the plan and the backend. */
static void place_layers(struct ntx_engine *e)
{
	const struct ntx_plan *p = e->o.plan;
	int l, gpu = e->backend == NTX_BACKEND_CUDA;

	for (l = 0; l < e->cfg.n_layer; l++) {
		struct eng_layer *L = &e->layers[l];

		L->job = -1;
		if (p) {
			L->home = p->layers[l].home;
			L->exec = p->layers[l].exec;
		} else {
			L->home = gpu ? NTX_TIER_VRAM : NTX_TIER_RAM;
			L->exec = gpu ? NTX_EXEC_GPU : NTX_EXEC_CPU;
		}
		if (!gpu) {
			/* the CPU backend runs any plan: VRAM layers are read
			 * from RAM, disk layers still come from the pack */
			L->exec = NTX_EXEC_CPU;
			if (L->home == NTX_TIER_VRAM)
				L->home = NTX_TIER_RAM;
		}
		if (L->home == NTX_TIER_VRAM)
			L->exec = NTX_EXEC_GPU;
	}
	e->head_on_gpu = gpu && (!p || p->output_home == NTX_TIER_VRAM);
}

/* The expert split of layer l (plan "cpu_experts", CUDA backend): the
 * experts the CPU computes, the places of the others in the device copy,
 * and the layout of that copy (lay: the layer with 3-D views of the
 * resident experts only). */
static int split_experts(struct ntx_engine *e, int l, struct ntx_err *err)
{
	const struct ntx_plan *p = e->o.plan;
	const struct ntx_layer_tensors *lt = &e->m->layers[l];
	const struct ntx_gguf_tensor *src[3] = { lt->w_gate, lt->w_up, lt->w_down };
	struct eng_layer *L = &e->layers[l];
	const uint8_t *cpu;
	int NE = e->cfg.n_expert, x, i;

	L->lay = *lt;
	if (!p || !p->cpu_exp || !p->layers[l].n_cpu_exp || e->backend != NTX_BACKEND_CUDA ||
	    L->home != NTX_TIER_VRAM)
		return 0;
	if (p->model.n_expert != NE || NE <= 0 || !src[0] || !src[1] || !src[2])
		return ntx_err_set(err, NTX_EINVAL,
				   "the plan places the experts of layer %d, but the model's layer has %d experts, the plan's %d: make the plan again for this model",
				   l, NE, p->model.n_expert);
	cpu = p->cpu_exp + (size_t)l * NE;
	L->exp_slot = malloc((size_t)NE * sizeof *L->exp_slot);
	L->cpu_slot = malloc((size_t)NE * sizeof *L->cpu_slot);
	if (!L->exp_slot || !L->cpu_slot)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (x = 0; x < NE; x++) {
		L->exp_slot[x] = cpu[x] ? -1 : L->n_exp_dev++;
		L->cpu_slot[x] = x;
	}
	L->n_cpu_exp = NE - L->n_exp_dev;
	for (i = 0; i < 3; i++) {
		struct ntx_gguf_tensor *v = &L->exv[i];

		*v = *src[i];
		v->ne[2] = L->n_exp_dev;
		v->nbytes = src[i]->nbytes / (uint64_t)NE * (uint64_t)L->n_exp_dev;
		v->n_elem = src[i]->n_elem / NE * L->n_exp_dev;
		v->data = NULL;
	}
	L->lay.w_gate = L->n_exp_dev ? &L->exv[0] : NULL;
	L->lay.w_up = L->n_exp_dev ? &L->exv[1] : NULL;
	L->lay.w_down = L->n_exp_dev ? &L->exv[2] : NULL;
	ntx_layer_layout(&L->lay, &L->lo);
	return 0;
}

static int choose_backend(struct ntx_engine *e, struct ntx_err *err)
{
	char why[256] = "";

	if (e->o.backend == NTX_BACKEND_CPU) {
		e->backend = NTX_BACKEND_CPU;
		return 0;
	}
	if (ntx_gpu_usable(e->o.gpu_index, why, sizeof why)) {
		e->backend = NTX_BACKEND_CUDA;
		return 0;
	}
	if (e->o.backend == NTX_BACKEND_CUDA)
		return ntx_err_set(err, NTX_EDEVICE, "cuda: %s", why);
	e->backend = NTX_BACKEND_CPU;
	e->st.fell_back_to_cpu = 1;
	snprintf(e->st.backend_note, sizeof e->st.backend_note, "%s", why);
	return 0;
}

/* ---- CPU-computed weights in huge pages ----
 * Weights the CPU computes from RAM are copied out of the GGUF map into
 * anonymous memory with transparent huge pages: 2 MiB pages double a
 * core's streaming rate over 4 KiB file pages (measured by the CPU kernel
 * bench). Only as many as fit in opts.copy_limit (by default what
 * MemAvailable leaves after 2 GiB), and the map's pages of each copied
 * weight are released at once: one copy is ever resident, never two, and
 * a model larger than RAM is read in place (the page cache is the only
 * copy). NTX_NO_HUGEPAGES=1 and --io mmap keep reading the map. */

/* Drop this process's pages of [p, p + n) in the read-only GGUF map: they
 * are read again (page cache or file) if ever touched. */
static void map_release(const void *p, size_t n)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p & ~(pg - 1), b = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);

	if (n)
		madvise((void *)a, b - a, MADV_DONTNEED);
}

static void *hot_alloc(size_t bytes, size_t *out)
{
	size_t n = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
#ifdef MADV_HUGEPAGE
	madvise(p, n, MADV_HUGEPAGE);
#endif
	*out = n;
	return p;
}

struct hot_ctx {
	struct ntx_engine *e;
};

/* The CPU experts of a split layer (split_experts) into L->exp_hot: the
 * gate stack of those experts, then the up and the down stacks, each in
 * the order of the experts; their map pages released. */
static void hot_experts(struct ntx_engine *e, int l)
{
	struct eng_layer *L = &e->layers[l];
	const struct ntx_layer_tensors *lt = &e->m->layers[l];
	const struct ntx_gguf_tensor *src[3] = { lt->w_gate, lt->w_up, lt->w_down };
	struct ntx_wmat *w[3] = { &L->w.gate, &L->w.up, &L->w.down };
	char *o = L->exp_hot;
	int NE = e->cfg.n_expert, i, x, c;

	if (e->o.interrupt && *e->o.interrupt) { /* Ctrl-C: stay on the map */
		L->exp_hot = NULL;
		return;
	}
	for (i = 0; i < 3; i++) {
		size_t xb = src[i]->nbytes / (size_t)NE;

		w[i]->data = o;
		for (x = 0, c = 0; x < NE; x++) {
			if (L->exp_slot[x] >= 0)
				continue;
			memcpy(o, (const char *)src[i]->data + (size_t)x * xb, xb);
			map_release((const char *)src[i]->data + (size_t)x * xb, xb);
			o += xb;
			L->cpu_slot[x] = c++;
		}
	}
}

static void hot_worker(void *p, int ith, int nth)
{
	struct ntx_engine *e = ((struct hot_ctx *)p)->e;
	int l, i;

	for (l = ith; l < e->cfg.n_layer; l += nth) {
		struct eng_layer *L = &e->layers[l];

		if (L->exp_hot)
			hot_experts(e, l);
		if (!L->hot)
			continue;
		if (e->o.interrupt && *e->o.interrupt) { /* Ctrl-C: stop copying, eval says so */
			L->hot = NULL;
			continue;
		}
		ntx_layer_pack_copy(&e->m->layers[l], &L->lo, L->hot);
		ntx_layer_w_from_layout(&L->w, &e->m->layers[l], &L->lo, L->hot);
		for (i = 0; i < NTX_LAYER_NT; i++) {
			const struct ntx_gguf_tensor *t = ntx_layer_tensor(&e->m->layers[l], i);

			if (t)
				map_release(t->data, t->nbytes);
		}
	}
	if (ith == nth - 1 && e->out_hot) {
		memcpy(e->out_hot, e->m->output->data, e->m->output->nbytes);
		/* token_embd may share the output's pages (tied): it stays */
		if (e->m->output->data != e->m->tok_embd->data)
			map_release(e->m->output->data, e->m->output->nbytes);
	}
}

static void hot_copies(struct ntx_engine *e)
{
	struct hot_ctx c = { e };
	uint64_t limit, used = 0, avail, *off, out_off = UINT64_MAX;
	int l;

	if (e->o.io == NTX_IO_MMAP || e->tun.no_hugepages || e->o.copy_limit < 0)
		return;
	off = malloc((size_t)e->cfg.n_layer * sizeof *off);
	if (!off)
		return; /* stay on the map */
	avail = ntx_mem_available();
	limit = e->o.copy_limit > 0 ? (uint64_t)e->o.copy_limit :
		!avail ? UINT64_MAX : avail > (2ull << 30) ? avail - (2ull << 30) : 0;
	/* one arena, each copy 4 KiB-aligned in it (a 2 MiB page per small
	 * layer would waste more than the layer) */
	if (!e->head_on_gpu && e->m->output->nbytes <= limit) {
		out_off = 0;
		used = (e->m->output->nbytes + 4095) & ~(uint64_t)4095;
	}
	for (l = 0; l < e->cfg.n_layer; l++) {
		struct eng_layer *L = &e->layers[l];
		uint64_t need = (L->lo.total + 4095) & ~(uint64_t)4095;

		off[l] = UINT64_MAX;
		if (L->n_cpu_exp && !e->skip[l]) /* the expert split: the CPU's experts */
			need = ((L->w.gate.row_bytes * L->w.gate.n_out + L->w.up.row_bytes * L->w.up.n_out +
				 L->w.down.row_bytes * L->w.down.n_out) * (uint64_t)L->n_cpu_exp + 4095) &
			       ~(uint64_t)4095;
		else if (e->skip[l] || L->exec != NTX_EXEC_CPU || L->home != NTX_TIER_RAM)
			continue; /* read in place */
		if (used + need > limit)
			continue;
		off[l] = used;
		used += need;
	}
	if (used)
		e->hot_arena = hot_alloc(used, &e->hot_arena_bytes); /* NULL: stay on the map */
	if (e->hot_arena) {
		for (l = 0; l < e->cfg.n_layer; l++)
			if (off[l] != UINT64_MAX && e->layers[l].n_cpu_exp)
				e->layers[l].exp_hot = (char *)e->hot_arena + off[l];
			else if (off[l] != UINT64_MAX)
				e->layers[l].hot = (char *)e->hot_arena + off[l];
		if (out_off != UINT64_MAX)
			e->out_hot = (char *)e->hot_arena + out_off;
	}
	free(off);
	ntx_pool_run(e->pool, hot_worker, &c);
	if (e->out_hot)
		e->out_w = ntx_wmat_from_tensor(e->m->output, e->out_hot);
}

/* ---- the streamer's jobs ----
 * Every layer whose weights move for each pass is a job, in layer order:
 * GPU-executed layers not in VRAM (into the ring: from a pinned RAM copy,
 * from the pack, or with --io mmap from the GGUF map) and CPU-executed disk
 * layers (from the pack into host staging). With --io mmap, CPU layers of
 * every home are computed in place from the map. Sets layers[l].job. */
static int start_streamer(struct ntx_engine *e, struct ntx_err *err)
{
	struct ntx_stream_params p = { 0 };
	struct ntx_stream_job *jobs = calloc((size_t)e->cfg.n_layer, sizeof *jobs);
	int l, n = 0, mmap_io = e->o.io == NTX_IO_MMAP;

	if (!jobs)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (l = 0; l < e->cfg.n_layer; l++) {
		struct eng_layer *L = &e->layers[l];
		struct ntx_stream_job *j = &jobs[n];
		int disk = L->home == NTX_TIER_DISK && !mmap_io;

		if (e->skip[l] || L->home == NTX_TIER_VRAM || L->xdisk)
			continue;
		if (L->exec != NTX_EXEC_GPU && !disk)
			continue; /* computed in place from the GGUF map */
		j->layer = l;
		j->to_gpu = L->exec == NTX_EXEC_GPU;
		j->src = disk ? NTX_STREAM_PACK : mmap_io ? NTX_STREAM_MAP : NTX_STREAM_RAM;
		j->lt = &e->m->layers[l];
		j->lo = &L->lo;
		L->job = n++;
	}
	if (n) {
		p.m = e->m;
		p.pack_path = e->pack_path;
		p.ring_slots = e->o.plan ? e->o.plan->ring_slots : 0;
		p.pool = e->pool;
		p.compute = ntx_gpu_compute_stream(e);
		p.tun = &e->tun;
		e->str = ntx_streamer_new(&p, jobs, n, err);
	}
	free(jobs);
	return n && !e->str ? -1 : 0;
}

/* Acquire / release layer l's job (engine_int.h: layers[l].job >= 0); the
 * time a CPU layer waits for its weights counts as t_cpu_wait_s, and the
 * streamer's counters are copied at every release. */
static int job_acquire(struct ntx_engine *e, int l, const void **base, struct ntx_err *err)
{
	double t0 = ntx_now_s();

	if (ntx_streamer_acquire(e->str, l, base, err))
		return -1;
	if (e->layers[l].exec != NTX_EXEC_GPU)
		e->st.t_cpu_wait_s += ntx_now_s() - t0;
	return 0;
}

static int job_release(struct ntx_engine *e, int l, struct ntx_err *err)
{
	struct ntx_stream_stats ss;

	if (ntx_streamer_release(e->str, l, err))
		return -1;
	ntx_streamer_stats(e->str, &ss);
	e->st.bytes_h2d = ss.bytes_h2d;
	e->st.bytes_disk = ss.bytes_disk;
	e->st.t_disk_s = ss.t_disk_s;
	return 0;
}

/* ---- experts on disk ----
 * A MoE layer that the plan puts on disk and has the CPU compute reads
 * only the experts a pass chose, from the layer's uncompressed pack extent
 * into the expert cache (xcache.h); its attention, norms and router are
 * read from the GGUF map (a few percent of the layer, every pass). A
 * compressed extent, or --io mmap, streams the whole layer as before. */

static int xc_load(void *ctx, int layer, const int *ids, int n, const void **ptr,
		   struct ntx_err *err)
{
	struct ntx_engine *e = ctx;
	double t0 = ntx_now_s();
	int rc = ntx_xcache_load(e->xc, layer, ids, n, ptr, err);

	e->xc_t_s += ntx_now_s() - t0;
	return rc;
}

/* The experts held at once (over all the layers; slot: the bytes of one):
 * what the plan's RAM budget leaves, the disk staging it reserved
 * included (these layers need none); at least a layer's worth for a pass
 * (4 x the experts a token uses, at least 16, at most the layer's: a
 * prompt pass goes through the experts in groups of that many); at most
 * every expert of the disk layers. */
static int xc_cap(const struct ntx_engine *e, int n_disk, uint64_t slot)
{
	const struct ntx_llama_config *c = &e->cfg;
	const struct ntx_plan *p = e->o.plan;
	uint64_t most = (uint64_t)n_disk * (uint64_t)c->n_expert, cap;
	int least = 4 * c->n_expert_used;

	if (least < 16)
		least = 16;
	if (least > c->n_expert)
		least = c->n_expert;
	if (e->tun.xcache_experts > 0) /* NTX_EXPERT_CACHE (tests, measurements) */
		return e->tun.xcache_experts < c->n_expert ? e->tun.xcache_experts : c->n_expert;
	cap = least;
	if (p && p->ram_budget > p->ram_used_bytes)
		cap = (p->ram_budget - p->ram_used_bytes + p->staging_bytes) / slot;
	if (cap < (uint64_t)least)
		cap = (uint64_t)least;
	if (cap > most)
		cap = most;
	return cap > (uint64_t)(1 << 20) ? 1 << 20 : (int)cap;
}

static int disk_experts(struct ntx_engine *e, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	struct ntx_pack *pk;
	uint64_t mx[3] = { 0, 0, 0 };
	int l, k, any = 0;

	if (c->n_expert <= 0 || e->o.io == NTX_IO_MMAP || !e->pack_path)
		return 0;
	for (l = 0; l < c->n_layer; l++)
		any |= !e->skip[l] && e->layers[l].home == NTX_TIER_DISK &&
		       e->layers[l].exec == NTX_EXEC_CPU;
	if (!any)
		return 0;
	pk = ntx_pack_open(e->pack_path, err);
	if (!pk || ntx_pack_check_model(pk, e->m, err)) {
		ntx_err_prefix(err, "%s", e->pack_path);
		ntx_pack_close(pk);
		return -1;
	}
	for (any = 0, l = 0; l < c->n_layer; l++) {
		struct eng_layer *L = &e->layers[l];
		const struct ntx_pack_extent *x = ntx_pack_extent_for_layer(pk, l);
		const struct ntx_layer_tensors *lt = &e->m->layers[l];
		const struct ntx_gguf_tensor *src[3] = { lt->w_gate, lt->w_up, lt->w_down };
		int ok = x && x->compression == NTX_PACK_COMP_NONE &&
			 x->transform == NTX_PACK_XFORM_NONE && x->n_tensors > 8;

		if (e->skip[l] || L->home != NTX_TIER_DISK || L->exec != NTX_EXEC_CPU)
			continue;
		for (k = 0; ok && k < 3; k++) {
			const struct ntx_pack_tensor *pt = &x->tensors[6 + k];

			ok = src[k] && pt->nbytes == src[k]->nbytes && pt->ne[2] == c->n_expert;
		}
		if (!ok)
			continue; /* the whole layer is streamed */
		L->xdisk = 1;
		any = 1;
		for (k = 0; k < 3; k++) {
			uint64_t b = src[k]->nbytes / (uint64_t)c->n_expert;

			mx[k] = b > mx[k] ? b : mx[k];
		}
	}
	if (any) {
		uint64_t slot = 0;
		int n_disk = 0;

		for (k = 0; k < 3; k++)
			slot += ((mx[k] + 4095) & ~(uint64_t)4095) + 4096; /* as xcache.c lays a slot out */
		for (l = 0; l < c->n_layer; l++)
			n_disk += e->layers[l].xdisk;
		e->xc = ntx_xcache_new(e->pack_path, c->n_layer, c->n_expert, xc_cap(e, n_disk, slot),
				       mx, &e->tun, err);
		for (l = 0; e->xc && l < c->n_layer; l++) {
			struct eng_layer *L = &e->layers[l];
			const struct ntx_pack_extent *x = ntx_pack_extent_for_layer(pk, l);
			struct ntx_xcache_layer xl;

			if (!L->xdisk)
				continue;
			for (k = 0; k < 3; k++) {
				xl.off[k] = x->offset + x->tensors[6 + k].offset;
				xl.bytes[k] = x->tensors[6 + k].nbytes / (uint64_t)c->n_expert;
			}
			ntx_xcache_set_layer(e->xc, l, &xl);
			L->xsrc.cap = ntx_xcache_cap(e->xc);
			L->xsrc.layer = l;
			L->xsrc.load = xc_load;
			L->xsrc.ctx = e;
		}
	}
	ntx_pack_close(pk);
	return any && !e->xc ? -1 : 0;
}

struct ntx_engine *ntx_engine_new(const struct ntx_model *m, const struct ntx_engine_opts *o,
				  struct ntx_err *err)
{
	struct ntx_engine *e = calloc(1, sizeof *e);
	const struct ntx_llama_config *c = &m->cfg;
	int l;

	if (!e) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		return NULL;
	}
	e->m = m;
	e->cfg = *c;
	e->o = *o;
	if (o->tunables)
		e->tun = *o->tunables;
	else
		ntx_tunables_from_env(&e->tun);
	e->o.tunables = NULL;
	ntx_cpu_tunables_set(&e->tun);
	if (!m->layers) {
		ntx_err_set(err, NTX_EINVAL, "model has no tensors (vocabulary-only file)");
		goto fail;
	}
	if (o->plan && o->plan->model.n_layer != c->n_layer) {
		ntx_err_set(err, NTX_EMISMATCH, "the plan has %d layers, the model %d",
			    o->plan->model.n_layer, c->n_layer);
		goto fail;
	}
	e->n_ctx = o->n_ctx > 0 ? o->n_ctx : (c->n_ctx_train < 4096 ? c->n_ctx_train : 4096);
	e->n_seq = o->n_seq > 0 ? o->n_seq : 1;
	e->n_ub = o->n_ubatch > 0 ? o->n_ubatch : 512;
	/* prompts are cut into chunks of n_cut tokens whatever n_seq is (batch
	 * mode cuts each prompt as when it runs alone); a step holds up to
	 * n_ub tokens of several sequences, at least one decode token of each
	 * (up to 512) */
	e->n_cut = e->n_ub < e->n_ctx ? e->n_ub : e->n_ctx;
	if ((int64_t)e->n_ub > (int64_t)e->n_ctx * e->n_seq)
		e->n_ub = e->n_ctx * e->n_seq;
	if (e->n_ub < e->n_seq)
		e->n_ub = e->n_seq < 512 ? e->n_seq : 512;
	e->n_threads = o->n_threads > 0 ? o->n_threads : n_cores();
	e->pack_path = o->pack_path ? o->pack_path : o->plan ? o->plan->pack_path : NULL;
	if (choose_backend(e, err))
		goto fail;
	e->rope.n_rot = c->n_rot;
	e->rope.base = c->rope_base;
	e->rope.freq_scale = c->rope_freq_scale;
	e->rope.freqs = m->rope_freqs ? (const float *)m->rope_freqs->data : NULL;
	e->rope.neox = c->rope_style == NTX_ROPE_NEOX;

	e->pool = ntx_pool_new(e->n_threads, err);
	if (!e->pool)
		goto fail;
	e->layers = calloc((size_t)c->n_layer, sizeof *e->layers);
	e->skip = calloc((size_t)c->n_layer, 1);
	e->cos = calloc((size_t)c->n_layer, sizeof *e->cos);
	e->x_blk = ntx_host_alloc(NTX_X_HDR(e->n_ub) + (size_t)e->n_ub * c->n_embd * sizeof(float), err);
	e->x = e->x_blk ? (float *)((char *)e->x_blk + NTX_X_HDR(e->n_ub)) : NULL;
	e->x_in = malloc((size_t)e->n_ub * c->n_embd * sizeof(float));
	e->head_in = malloc((size_t)e->n_ub * c->n_embd * sizeof(float));
	e->seq0 = calloc((size_t)e->n_ub, sizeof(int32_t));
	e->want_buf = calloc((size_t)e->n_ub, 1);
	if (!e->layers || !e->skip || !e->cos || !e->x || !e->x_in || !e->head_in || !e->seq0 ||
	    !e->want_buf) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	if (c->n_expert > 0 &&
	    (!(e->exp_count = calloc((size_t)c->n_layer * (size_t)c->n_expert, sizeof *e->exp_count)) ||
	     !(e->exp_cpu = calloc((size_t)c->n_layer, sizeof *e->exp_cpu)))) {
		ntx_err_set(err, NTX_ENOMEM, "out of memory");
		goto fail;
	}
	place_layers(e);
	for (l = 0; l < c->n_layer; l++) {
		struct eng_layer *L = &e->layers[l];

		e->skip[l] = o->skip ? o->skip[l] : 0;
		if (o->plan && o->plan->layers[l].skip)
			e->skip[l] = 1;
		ntx_layer_layout(&m->layers[l], &L->lo);
		ntx_layer_w_from_tensors(&L->w, &m->layers[l], m->gguf->map, 0);
		if (!e->skip[l] && split_experts(e, l, err))
			goto fail;
		if (e->skip[l]) {
			e->st.n_layers_skipped++;
			continue;
		}
		e->st.n_layers_home[L->home]++;
		e->st.n_layers_exec[L->exec]++;
		if (L->exec == NTX_EXEC_CPU &&
		    kv_alloc(&L->kv, c, e->n_ctx, e->n_seq, o->kv_type == NTX_KV_F16, err))
			goto fail;
	}
	e->out_w = ntx_wmat_from_tensor(m->output, m->output->data);
	e->out_norm = m->output_norm->data;
	hot_copies(e);
	if (ntx_cpu_scratch_init(&e->s, c, m, e->n_ub, e->n_ctx, e->n_threads, err))
		goto fail;
	if (e->backend == NTX_BACKEND_CUDA && ntx_gpu_init(e, err))
		goto fail;
	if (disk_experts(e, err) || start_streamer(e, err))
		goto fail;
	return e;
fail:
	ntx_engine_free(e);
	return NULL;
}

void ntx_engine_free(struct ntx_engine *e)
{
	int l;

	if (!e)
		return;
	ntx_streamer_free(e->str);
	ntx_xcache_free(e->xc);
	ntx_gpu_free(e);
	if (e->layers) {
		for (l = 0; l < e->cfg.n_layer; l++) {
			free(e->layers[l].kv.k);
			free(e->layers[l].kv.v);
			free(e->layers[l].exp_slot);
			free(e->layers[l].cpu_slot);
		}
	}
	if (e->hot_arena)
		munmap(e->hot_arena, e->hot_arena_bytes);
	ntx_cpu_scratch_free(&e->s);
	ntx_pool_free(e->pool);
	free(e->layers);
	free(e->exp_count);
	free(e->exp_cpu);
	free(e->skip);
	free(e->cos);
	ntx_host_free(e->x_blk);
	free(e->x_in);
	free(e->head_in);
	free(e->head_logits);
	free(e->seq0);
	free(e->want_buf);
	free(e);
}

static void embed(struct ntx_engine *e, const int32_t *tok, int n)
{
	const struct ntx_gguf_tensor *te = e->m->tok_embd;
	uint64_t rb = 0;
	int i;

	ntx_type_row_bytes(te->type, te->ne[0], &rb, NULL);
	for (i = 0; i < n; i++)
		ntx_dequant_row(te->type, (const unsigned char *)te->data + rb * (uint64_t)tok[i],
				e->x + (int64_t)i * e->cfg.n_embd, e->cfg.n_embd);
}

static void cos_accumulate(struct ntx_cos_stats *cs, const float *a, const float *b, int n_tok,
			   int dim)
{
	int t, i;

	for (t = 0; t < n_tok; t++) {
		const float *x = a + (int64_t)t * dim, *y = b + (int64_t)t * dim;
		double xy = 0, xx = 0, yy = 0, c;

		for (i = 0; i < dim; i++) {
			xy += (double)x[i] * y[i];
			xx += (double)x[i] * x[i];
			yy += (double)y[i] * y[i];
		}
		c = xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : 1.0;
		cs->sum += c;
		cs->sum_sq += c * c;
		cs->n++;
	}
}

/* Does this eval use any layer that the streamer feeds? */
static int uses_jobs(const struct ntx_engine *e, const uint8_t *mask)
{
	int l;

	for (l = 0; l < e->cfg.n_layer; l++) {
		if (e->layers[l].job >= 0 && !(mask ? mask[l] : e->skip[l]))
			return 1;
	}
	return 0;
}

/* Can this eval run as one captured graph: few tokens, every evaluated
 * layer resident on the GPU, the head too, no per-layer statistics? */
static int graphable(const struct ntx_engine *e, const uint8_t *mask, int n)
{
	int l;

	if (n > 8 || !e->head_on_gpu || e->o.collect_cos || !ntx_gpu_graphs_enabled(e))
		return 0;
	for (l = 0; l < e->cfg.n_layer; l++) {
		const struct eng_layer *L = &e->layers[l];

		if (mask ? mask[l] : e->skip[l])
			continue;
		if (L->exec != NTX_EXEC_GPU || L->home != NTX_TIER_VRAM)
			return 0;
	}
	return 1;
}

/* Run layer l on the CPU; the hidden state is on the host. */
static int cpu_layer(struct ntx_engine *e, int l, const int32_t *seq, const int32_t *pos, int n,
		     int from_job, struct ntx_err *err)
{
	struct eng_layer *L = &e->layers[l];
	struct ntx_layer_w w = L->w;
	double t0 = ntx_now_s();
	int n_run;

	if (from_job) {
		const void *base;

		if (job_acquire(e, l, &base, err))
			return -1;
		ntx_layer_w_from_layout(&w, &e->m->layers[l], &L->lo, base);
	}
	e->s.exp_count = e->exp_count ? e->exp_count + (size_t)l * e->cfg.n_expert : NULL;
	if (L->xdisk)
		w.xsrc = &L->xsrc;
	n_run = ntx_cpu_layer_forward(e->pool, &e->cfg, &e->rope, &w, &L->kv, e->x, n, seq, pos,
				      &e->s);
	if (n_run < 0) {
		*err = e->s.xerr;
		return -1;
	}
	/* with experts, only the experts that ran were read */
	e->st.bytes_cpu_weights += L->lo.total - (uint64_t)(e->cfg.n_expert - n_run) *
		(e->cfg.n_expert > 0 ? (L->lo.nbytes[6] + L->lo.nbytes[7] + L->lo.nbytes[8]) /
		 (uint64_t)e->cfg.n_expert : 0);
	e->st.t_cpu_s += ntx_now_s() - t0;
	if (from_job && job_release(e, l, err))
		return -1;
	return 0;
}

/* Evaluate one chunk of at most n_ub tokens. */
static int eval_chunk(struct ntx_engine *e, const int32_t *tok, const int32_t *pos,
		      const int32_t *seq, const uint8_t *want, int n, int verify, const uint8_t *mask,
		      float *logits, int32_t *ids, int *n_rows, struct ntx_err *err)
{
	const struct ntx_llama_config *c = &e->cfg;
	int l, i, nr = 0, on_gpu = 0, jobs = uses_jobs(e, mask);
	int E = c->n_embd;

	embed(e, tok, n);
	if (e->gpu && !jobs && graphable(e, mask, n) &&
	    ntx_gpu_graph_due(e, n, mask, want, logits, ids))
		return ntx_gpu_graph_forward(e, seq, pos, n, verify, mask, want, logits, ids, n_rows,
					     err);
	if (e->gpu && ntx_gpu_begin_chunk(e, seq, pos, n, verify, err))
		return -1;
	for (l = 0; l < c->n_layer; l++) {
		struct eng_layer *L = &e->layers[l];
		int skipped = mask ? mask[l] : e->skip[l];

		if (skipped) {
			if (jobs && L->job >= 0) { /* keep the stream cycle */
				const void *b;

				if (job_acquire(e, l, &b, err) || job_release(e, l, err))
					return -1;
			}
			continue;
		}
		if (e->skip[l])
			return ntx_err_set(err, NTX_EINVAL,
					   "layer %d is in the skip set of this engine and cannot be evaluated",
					   l);
		if (e->o.interrupt && *e->o.interrupt)
			return ntx_err_set(err, NTX_EINTR, "interrupted");
		if (L->exec == NTX_EXEC_GPU) {
			const void *base = L->dev;

			if (!on_gpu && ntx_gpu_x_to_device(e, n, err))
				return -1;
			on_gpu = 1;
			if (e->o.collect_cos && ntx_gpu_cos_begin(e, n, err))
				return -1;
			if (L->job >= 0 && job_acquire(e, l, &base, err))
				return -1;
			if (ntx_gpu_layer(e, l, base, n, err))
				return -1;
			if (L->job >= 0 && job_release(e, l, err))
				return -1;
			if (e->o.collect_cos && ntx_gpu_cos_end(e, l, n, err))
				return -1;
		} else {
			if (on_gpu) {
				double t0 = ntx_now_s();

				if (ntx_gpu_x_to_host(e, n, err))
					return -1;
				e->st.t_cpu_wait_s += ntx_now_s() - t0;
			}
			on_gpu = 0;
			if (e->o.collect_cos)
				memcpy(e->x_in, e->x, (size_t)n * E * sizeof(float));
			if (cpu_layer(e, l, seq, pos, n, L->job >= 0, err))
				return -1;
			if (e->o.collect_cos)
				cos_accumulate(&e->cos[l], e->x_in, e->x, n, E);
		}
	}
	if (e->head_on_gpu) {
		if (!on_gpu && ntx_gpu_x_to_device(e, n, err))
			return -1;
		if (ntx_gpu_head(e, want, n, logits, ids, &nr, err))
			return -1;
		if (e->o.collect_cos && ntx_gpu_cos_fetch(e, err))
			return -1;
		*n_rows = nr;
		return 0;
	}
	if (on_gpu && ntx_gpu_x_to_host(e, n, err))
		return -1;
	if (e->gpu && e->o.collect_cos && ntx_gpu_cos_fetch(e, err))
		return -1;
	/* final norm and head on the wanted rows (CPU) */
	for (i = 0; i < n; i++) {
		if (want[i]) {
			memcpy(e->head_in + (int64_t)nr * E, e->x + (int64_t)i * E,
			       (size_t)E * sizeof(float));
			nr++;
		}
	}
	if (nr) {
		float *out = logits;

		if (!out) { /* only ids wanted: logits into scratch */
			size_t need = (size_t)nr * (size_t)c->n_vocab;

			if (need > e->head_cap) {
				float *p = realloc(e->head_logits, need * sizeof(float));

				if (!p)
					return ntx_err_set(err, NTX_ENOMEM, "out of memory");
				e->head_logits = p;
				e->head_cap = need;
			}
			out = e->head_logits;
		}
		ntx_op_rmsnorm(e->head_in, e->head_in, e->out_norm, nr, E, (float)c->rms_eps);
		ntx_cpu_matmul(e->pool, &e->out_w, e->head_in, nr, out, e->s.mm);
		for (i = 0; ids && i < nr; i++)
			ids[i] = ntx_argmax(out + (int64_t)i * c->n_vocab, c->n_vocab);
	}
	*n_rows = nr;
	return 0;
}

int ntx_engine_eval(struct ntx_engine *e, const struct ntx_batch *b, const uint8_t *layer_mask,
		    float *logits, struct ntx_err *err)
{
	int done = 0, i;
	double t0 = ntx_now_s();
	int64_t V = e->cfg.n_vocab;
	int32_t *ids = b->ids;

	for (i = 0; i < b->n_tok; i++) {
		int s = b->seq ? b->seq[i] : 0;

		if (b->tok[i] < 0 || b->tok[i] >= V)
			return ntx_err_set(err, NTX_EINVAL, "token id %d is out of range [0, %lld)",
					   b->tok[i], (long long)V);
		if (s < 0 || s >= e->n_seq)
			return ntx_err_set(err, NTX_EINVAL, "sequence %d is out of range [0, %d)", s,
					   e->n_seq);
		if (b->pos[i] < 0 || b->pos[i] >= e->n_ctx)
			return ntx_err_set(err, NTX_EINVAL,
					   "position %d is beyond the context size %d (use -c to raise it)",
					   b->pos[i], e->n_ctx);
	}
	while (done < b->n_tok) {
		int n = b->n_tok - done, nr = 0;
		const uint8_t *want;

		if (n > e->n_ub)
			n = e->n_ub;
		if (b->want) {
			want = b->want + done;
		} else { /* only the batch's last token */
			memset(e->want_buf, 0, (size_t)n);
			if (done + n == b->n_tok)
				e->want_buf[n - 1] = 1;
			want = e->want_buf;
		}
		if (eval_chunk(e, b->tok + done, b->pos + done, b->seq ? b->seq + done : e->seq0,
			       want, n, b->verify, layer_mask, logits, ids, &nr, err)) {
			/* leave the engine usable: finish device work, restart
			 * the stream cycle */
			struct ntx_err e2 = { 0 };

			if (e->gpu)
				ntx_gpu_sync(e, &e2);
			if (e->str)
				ntx_streamer_reset(e->str, &e2);
			return -1;
		}
		if (logits)
			logits += (int64_t)nr * V;
		if (ids)
			ids += nr;
		done += n;
	}
	e->st.n_eval_calls++;
	e->st.n_tokens += b->n_tok;
	e->st.t_eval_s += ntx_now_s() - t0;
	if (e->str) {
		double tc = 0, tw = 0;

		ntx_streamer_take_times(e->str, &tc, &tw);
		e->st.t_h2d_s += tc;
		e->st.t_gpu_wait_s += tw;
	}
	return 0;
}

void ntx_engine_kv_truncate(struct ntx_engine *e, int seq, int n)
{
	(void)e;
	(void)seq;
	(void)n; /* positions are overwritten on the next eval: nothing to do */
}

int ntx_engine_n_ctx(const struct ntx_engine *e)
{
	return e->n_ctx;
}

int ntx_engine_n_seq(const struct ntx_engine *e)
{
	return e->n_seq;
}

int ntx_engine_n_ubatch(const struct ntx_engine *e)
{
	return e->n_ub;
}

int ntx_engine_prompt_chunk(const struct ntx_engine *e)
{
	return e->n_cut;
}

int ntx_engine_decode_chunk(const struct ntx_engine *e)
{
	return e->gpu && e->n_cut > NTX_DECODE_CHUNK_GPU ? NTX_DECODE_CHUNK_GPU : e->n_cut;
}

const struct ntx_tunables *ntx_engine_tunables(const struct ntx_engine *e)
{
	return &e->tun;
}

int64_t ntx_engine_n_vocab(const struct ntx_engine *e)
{
	return e->cfg.n_vocab;
}

enum ntx_backend ntx_engine_backend(const struct ntx_engine *e)
{
	return e->backend;
}

const struct ntx_model *ntx_engine_model(const struct ntx_engine *e)
{
	return e->m;
}

const struct ntx_cos_stats *ntx_engine_cos_stats(const struct ntx_engine *e)
{
	return e->cos;
}

void ntx_engine_cos_reset(struct ntx_engine *e)
{
	memset(e->cos, 0, (size_t)e->cfg.n_layer * sizeof *e->cos);
}

uint64_t ntx_engine_weight_bytes_per_token(const struct ntx_engine *e)
{
	uint64_t n = e->m->output->nbytes + e->m->output_norm->nbytes;
	int l;

	for (l = 0; l < e->cfg.n_layer; l++) {
		const struct ntx_layer_tensors *lt = &e->m->layers[l];

		if (e->skip[l])
			continue;
		n += lt->bytes;
		/* with experts a token reads k of the E */
		if (lt->router && e->cfg.n_expert > 0)
			n -= (lt->w_gate->nbytes + lt->w_up->nbytes + lt->w_down->nbytes) /
			     (uint64_t)e->cfg.n_expert * (uint64_t)(e->cfg.n_expert - e->cfg.n_expert_used);
	}
	return n;
}

double ntx_engine_peak_gbps(const struct ntx_engine *e)
{
	return e->gpu ? ntx_gpu_peak_gbps(e) : 0;
}

const uint64_t *ntx_engine_expert_counts(const struct ntx_engine *e)
{
	return e->exp_count;
}

void ntx_engine_expert_layer(const struct ntx_engine *e, int l, uint64_t *routed, uint64_t *cpu,
			     uint64_t *hits, uint64_t *misses)
{
	int x;

	*routed = *cpu = *hits = *misses = 0;
	if (!e->exp_count || l < 0 || l >= e->cfg.n_layer)
		return;
	for (x = 0; x < e->cfg.n_expert; x++)
		*routed += e->exp_count[(size_t)l * e->cfg.n_expert + x];
	*cpu = e->exp_cpu[l];
	if (e->xc)
		ntx_xcache_layer_counts(e->xc, l, hits, misses);
}

void ntx_engine_get_stats(const struct ntx_engine *e, struct ntx_engine_stats *s)
{
	*s = e->st;
	if (e->xc) { /* the streamer's disk counters and the expert cache's */
		uint64_t b;

		ntx_xcache_counts(e->xc, &s->xcache_hits, &s->xcache_misses, &b);
		s->bytes_disk += b;
		s->t_disk_s += e->xc_t_s;
	}
}
