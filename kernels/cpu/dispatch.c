/* dispatch.c - choose the kernel ISA at run time and route the fast-path
 * entry points of ntx_cpu.h to it.
 *
 * The choice is made on first use: AVX-512 (F, BW, VL, DQ, VNNI) with
 * AMX-INT8 tiles when the CPU has them and the kernel grants this process
 * the tile state, else AVX-512, else AVX2 + FMA + F16C, else scalar. The
 * engine hands its tunables over with ntx_cpu_tunables_set: cpu_scalar
 * (NTX_CPU_SCALAR) forces scalar, no_amx (NTX_NO_AMX) keeps AMX out; an
 * automatic choice already made is made again with them, a pinned one
 * (ntx_cpu_isa_select of a name) stays. ntx_cpu_force_scalar() and
 * ntx_cpu_isa_select() change it later (tests, benchmarks); they are not
 * meant to race with running kernels. This file never reads the
 * environment. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_impl.h"
#include "tunables.h"

static _Atomic(const struct ntx_cpu_isa *) isa_current;
/* the current choice is automatic (isa_best), not pinned by name */
static atomic_int isa_auto = 1;
/* ntx_cpu_tunables_set: ISA_SCALAR, ISA_NO_AMX */
enum { ISA_SCALAR = 1, ISA_NO_AMX = 2 };
static atomic_int isa_flags;

/* ---- detection ---- */

static int has_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	       __builtin_cpu_supports("f16c");
#else
	return 0;
#endif
}

static int has_avx512(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	       __builtin_cpu_supports("avx512vnni");
#else
	return 0;
#endif
}

static const struct ntx_cpu_isa *isa_best(void)
{
	int f = atomic_load_explicit(&isa_flags, memory_order_relaxed);

	if (f & ISA_SCALAR)
		return &ntx_cpu_isa_scalar;
#if defined(__x86_64__) || defined(__i386__)
	if (has_avx512() && !(f & ISA_NO_AMX) && ntx_cpu_has_amx())
		return &ntx_cpu_isa_amx;
	if (has_avx512())
		return &ntx_cpu_isa_avx512;
	if (has_avx2())
		return &ntx_cpu_isa_avx2;
#endif
	return &ntx_cpu_isa_scalar;
}

const struct ntx_cpu_isa *ntx_cpu_isa(void)
{
	const struct ntx_cpu_isa *isa = atomic_load_explicit(&isa_current, memory_order_acquire);

	if (!isa) {
		/* Racing first calls compute the same answer. */
		isa = isa_best();
		atomic_store_explicit(&isa_current, isa, memory_order_release);
	}
	return isa;
}

void ntx_cpu_tunables_set(const struct ntx_tunables *t)
{
	int f = t ? (t->cpu_scalar ? ISA_SCALAR : 0) | (t->no_amx ? ISA_NO_AMX : 0) : 0;

	if (atomic_exchange(&isa_flags, f) == f)
		return; /* the same switches: the choice stands */
	if (atomic_load(&isa_auto))
		atomic_store_explicit(&isa_current, NULL, memory_order_release); /* choose again */
}

int ntx_cpu_isa_select(const char *name)
{
	const struct ntx_cpu_isa *isa = NULL;
	int is_auto = strcmp(name, "auto") == 0;

	if (is_auto)
		isa = isa_best();
	else if (strcmp(name, "scalar") == 0)
		isa = &ntx_cpu_isa_scalar;
#if defined(__x86_64__) || defined(__i386__)
	else if (strcmp(name, "avx2") == 0 && has_avx2())
		isa = &ntx_cpu_isa_avx2;
	else if (strcmp(name, "avx512") == 0 && has_avx512())
		isa = &ntx_cpu_isa_avx512;
	else if (strcmp(name, "amx") == 0 && has_avx512() && ntx_cpu_has_amx())
		isa = &ntx_cpu_isa_amx;
#endif
	if (!isa)
		return -1;
	atomic_store(&isa_auto, is_auto);
	atomic_store_explicit(&isa_current, isa, memory_order_release);
	return 0;
}

void ntx_cpu_force_scalar(int on)
{
	ntx_cpu_isa_select(on ? "scalar" : "auto");
}

const char *ntx_cpu_features(void)
{
	return ntx_cpu_isa()->name;
}

/* ---- fast entry points ---- */

void ntx_dequant_row(uint32_t type, const void *src, float *dst, int64_t n)
{
	ntx_cpu_isa()->dequant_row(type, src, dst, n);
}

void ntx_quantize_act(uint32_t act_type, const float *x, void *xq, int64_t n)
{
	ntx_cpu_isa()->quantize_act(act_type, x, xq, n);
}

/* With prepared activations, one chunk at a time through a stack buffer. */
float ntx_vec_dot(uint32_t wtype, int64_t n, const void *w, const void *xq)
{
	const struct ntx_cpu_isa *isa = ntx_cpu_isa();
	ntx_tile_fn fn = isa->tile(wtype);
	_Alignas(64) unsigned char buf[NTX_PREP_MAX(NTX_PREP_CHUNK)];
	const struct ntx_type_info *ti;
	uint32_t at = ntx_act_type(wtype);
	float y, sum = 0.0f;

	if (!fn)
		return ntx_vec_dot_ref(wtype, n, w, xq); /* NaN for an unsupported type */
	if (isa->prep_bytes(wtype, NTX_PREP_CHUNK) == 0) {
		fn(n, w, 0, 1, xq, 0, 1, &y, 1);
		return y;
	}
	ti = ntx_type_get(wtype);
	for (int64_t off = 0; off < n; off += NTX_PREP_CHUNK) {
		int64_t len = n - off < NTX_PREP_CHUNK ? n - off : NTX_PREP_CHUNK;

		isa->prepare(wtype, (const char *)xq + ntx_act_bytes(at, off), buf, len);
		fn(len, (const char *)w + (size_t)(off / ti->block_size) * (size_t)ti->type_size, 0, 1,
		   buf, 0, 1, &y, 1);
		sum += y;
	}
	return sum;
}
