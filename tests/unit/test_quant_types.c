/* test_quant_types.c - the scalar references of the weight types the
 * engine does not run yet (the quant-types issue): Q4_1, Q5_1, Q2_K,
 * Q3_K, IQ4_NL and IQ4_XS.
 * Layouts from literal bytes worked out by hand; llama.cpp's files in
 * fixtures/quants against the F32 file they were quantized from; the
 * integer dot products against the float dot of the dequantized rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "ntx_cpu.h"
#include "ntx_kernels.h"
#include "refio.h"
#include "t.h"

static void test_layouts(void)
{
	float y[256];
	int bad = 0;

	{ /* Q4_1: d = 0.5, m = -1; qs[j] = j | (15 - j) << 4 */
		struct ntx_block_q4_1 b;

		b.d = ntx_fp32_to_fp16(0.5f);
		b.m = ntx_fp32_to_fp16(-1.0f);
		for (int j = 0; j < 16; j++)
			b.qs[j] = (uint8_t)(j | (15 - j) << 4);
		ntx_dequant_row_ref(NTX_TYPE_Q4_1, &b, y, 32);
		bad = y[0] != -1.0f || y[15] != 6.5f || y[16] != 6.5f || y[31] != -1.0f || y[3] != 0.5f;
		t_ok(!bad, "Q4_1 from literal bytes: d * q + m (y[0]=%g y[15]=%g y[16]=%g)", y[0], y[15],
		     y[16]);
	}
	{ /* Q5_1: d = 1, m = -16; fifth bits 0 and 31 set */
		struct ntx_block_q5_1 b;

		memset(&b, 0, sizeof b);
		b.d = ntx_fp32_to_fp16(1.0f);
		b.m = ntx_fp32_to_fp16(-16.0f);
		b.qh[0] = 0x01;
		b.qh[3] = 0x80;
		b.qs[0] = 0x21;  /* element 0: 1 | 16 -> 1; element 16: 2 -> -14 */
		b.qs[15] = 0x70; /* element 15: 0 -> -16; element 31: 7 | 16 -> 7 */
		ntx_dequant_row_ref(NTX_TYPE_Q5_1, &b, y, 32);
		bad = y[0] != 1.0f || y[16] != -14.0f || y[15] != -16.0f || y[31] != 7.0f;
		t_ok(!bad, "Q5_1 from literal bytes: (nibble | qh bit << 4) * d + m (y[0]=%g y[16]=%g y[31]=%g)",
		     y[0], y[16], y[31]);
	}
	{ /* Q2_K: d = 1, dmin = 0.5; scale | min << 4 */
		struct ntx_block_q2_k b;

		memset(&b, 0, sizeof b);
		b.d = ntx_fp32_to_fp16(1.0f);
		b.dmin = ntx_fp32_to_fp16(0.5f);
		b.scales[0] = 0x23; /* sub-block 0: scale 3, min 2 */
		b.scales[1] = 0x01; /* 1: scale 1, min 0 */
		b.scales[2] = 0x12; /* 2: scale 2, min 1 */
		b.scales[8] = 0x15; /* 8: scale 5, min 1 */
		b.qs[0] = 0xE4;     /* elements 0, 32, 64, 96: q 0, 1, 2, 3 */
		b.qs[16] = 0x03;    /* element 16 (sub-block 1): 3 */
		b.qs[32] = 0x02;    /* element 128 (sub-block 8): 2 */
		ntx_dequant_row_ref(NTX_TYPE_Q2_K, &b, y, 256);
		/* by hand: 3 * 0 - 0.5 * 2, 2 * 1 - 0.5 * 1, sub-blocks 4 and 6 are
		 * zero, 1 * 3, 5 * 2 - 0.5 * 1, element 1 (q 0, sub-block 0) -1 */
		bad = y[0] != -1.0f || y[32] != 1.5f || y[64] != 0.0f || y[96] != 0.0f || y[16] != 3.0f ||
		      y[128] != 9.5f || y[1] != -1.0f;
		t_ok(!bad, "Q2_K from literal bytes: element 128 h + 32 j + 16 u + l (y[0]=%g y[32]=%g y[16]=%g y[128]=%g)",
		     y[0], y[32], y[16], y[128]);
	}
	{ /* Q3_K: d = 1; scale 0 = 33 (+1), 1 = 35 (+3), 8 = 23 (-9) */
		struct ntx_block_q3_k b;

		memset(&b, 0, sizeof b);
		b.d = ntx_fp32_to_fp16(1.0f);
		b.scales[0] = 0x71; /* low 4 bits of scales 0 (1) and 8 (7) */
		b.scales[1] = 0x03; /* of scale 1 (3) */
		b.scales[8] = 0x12; /* high 2 bits: scale 0 (2), scale 4 (0), scale 8 (1) */
		b.scales[9] = 0x02; /* scale 1 (2) */
		b.qs[0] = 0x03;     /* element 0: 3, high bit set below: q 3 */
		b.hmask[0] = 0x11;  /* elements 0 (bit 0) and 128 (bit 4) */
		b.qs[32] = 0x01;    /* element 128: 1, high bit set: q 1 */
		ntx_dequant_row_ref(NTX_TYPE_Q3_K, &b, y, 256);
		/* by hand: 1 * 3; element 16 (sub-block 1, bits 0, no high bit):
		 * 3 * -4; element 128: -9 * 1; element 1: 1 * -4 */
		bad = y[0] != 3.0f || y[16] != -12.0f || y[128] != -9.0f || y[1] != -4.0f;
		t_ok(!bad, "Q3_K from literal bytes: hmask bit 4 h + j, 6-bit scales - 32 (y[0]=%g y[16]=%g y[128]=%g y[1]=%g)",
		     y[0], y[16], y[128], y[1]);
	}
	{ /* IQ4_NL: d = 2; qs[j] = j | (15 - j) << 4 */
		struct ntx_block_iq4_nl b;

		b.d = ntx_fp32_to_fp16(2.0f);
		for (int j = 0; j < 16; j++)
			b.qs[j] = (uint8_t)(j | (15 - j) << 4);
		ntx_dequant_row_ref(NTX_TYPE_IQ4_NL, &b, y, 32);
		/* by hand: element 0 = 2 * -127, 7 = 2 * -10, 8 = 2 * 1, 15 = 2 * 113;
		 * element 16 (nibble 15) = 226, 31 (nibble 0) = -254 */
		bad = y[0] != -254.0f || y[7] != -20.0f || y[8] != 2.0f || y[15] != 226.0f ||
		      y[16] != 226.0f || y[23] != 2.0f || y[24] != -20.0f || y[31] != -254.0f;
		t_ok(!bad, "IQ4_NL from literal bytes: the table, low nibble j, high j + 16 (y[0]=%g y[8]=%g y[31]=%g)",
		     y[0], y[8], y[31]);
	}
	{ /* IQ4_XS: d = 0.5; sub-block scales ls = nibble | 2 << 4 (scales_h all 2s):
	   * scales_l[0] = 0x31: ib 0 ls 33 (x1), ib 1 ls 35 (x3); the other
	   * scales_l 0x00: ls 32, x0 */
		struct ntx_block_iq4_xs b;

		memset(&b, 0, sizeof b);
		b.d = ntx_fp32_to_fp16(0.5f);
		b.scales_h = 0xAAAA;
		b.scales_l[0] = 0x31;
		b.qs[0] = 0x0F;  /* element 0: nibble 15; element 16: nibble 0 */
		b.qs[16] = 0x80; /* element 32: nibble 0; element 48: nibble 8 */
		b.qs[17] = 0x5A; /* element 33: nibble 10; element 49: nibble 5 */
		b.qs[32] = 0xFF; /* sub-block 2 (scale 0): zeros */
		ntx_dequant_row_ref(NTX_TYPE_IQ4_XS, &b, y, 256);
		/* by hand: 0.5 * 1 * 113, 0.5 * 1 * -127; 0.5 * 3 * -127, 0.5 * 3 * 1,
		 * 0.5 * 3 * 25, 0.5 * 3 * -35; element 1 (nibble 0) = 0.5 * -127 */
		bad = y[0] != 56.5f || y[16] != -63.5f || y[1] != -63.5f || y[32] != -190.5f ||
		      y[48] != 1.5f || y[33] != 37.5f || y[49] != -52.5f || y[64] != 0.0f ||
		      y[80] != 0.0f || y[255] != 0.0f;
		t_ok(!bad && offsetof(struct ntx_block_iq4_xs, scales_l) == 4 &&
			     offsetof(struct ntx_block_iq4_xs, qs) == 8,
		     "IQ4_XS from literal bytes: d, scales_h, scales_l[4], qs[128]; 6-bit scales - 32 (y[0]=%g y[32]=%g y[49]=%g)",
		     y[0], y[32], y[49]);
	}
}

/* llama.cpp's files (quants/, every matrix of one type) against the F32
 * file: a correct reading is the type's quantization noise on
 * random-normal weights (4-5 bits: a few 1e-3, Q3_K a few 1e-2, Q2_K about
 * 0.1); a wrong nibble order, table, scale or sign gives 0.5 or more. And each
 * row's integer dot product with a quantized activation row equals the
 * float dot of the dequantized rows up to float rounding. */
static void test_fixtures(void)
{
	/* max: the quantization noise bound of the type's bits (a wrong
	 * decode gives 0.5 or more) */
	static const struct {
		const char *file;
		uint32_t type;
		double max;
	} files[] = {
		{ "quants/ref-a-q4_1", NTX_TYPE_Q4_1, 2e-2 },     { "quants/ref-a-q5_1", NTX_TYPE_Q5_1, 1e-2 },
		{ "quants/ref-a-q2_k", NTX_TYPE_Q2_K, 0.3 },      { "quants/ref-a-q3_k_s", NTX_TYPE_Q3_K, 0.1 },
		{ "quants/ref-a-iq4_nl", NTX_TYPE_IQ4_NL, 2e-2 }, { "quants/ref-a-iq4_xs", NTX_TYPE_IQ4_XS, 2e-2 },
	};
	const char *tensors[] = { "blk.0.attn_q.weight", "blk.1.ffn_down.weight" };
	char path[1024];
	struct ntx_err err;
	struct ntx_gguf *g32;

	if (!t_need_fixtures("llama.cpp's files of the new types"))
		return;
	snprintf(path, sizeof path, "%s/models/ref-a-f32.gguf", t_fixtures());
	g32 = ntx_gguf_open(path, &err);
	if (!t_ok(g32 != NULL, "open %s", path))
		return;
	for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
		struct ntx_gguf *g;

		snprintf(path, sizeof path, "%s/%s.gguf", t_fixtures(), files[f].file);
		g = ntx_gguf_open(path, &err);
		if (!t_ok(g != NULL, "open %s", path))
			continue;
		for (size_t k = 0; k < sizeof tensors / sizeof tensors[0]; k++) {
			const struct ntx_gguf_tensor *tq = ntx_gguf_find_tensor(g, tensors[k]);
			const struct ntx_gguf_tensor *tf = ntx_gguf_find_tensor(g32, tensors[k]);
			int64_t n_in = tq ? tq->ne[0] : 0, n_out = tq ? tq->ne[1] : 0;
			uint32_t at = ntx_act_type(files[f].type);
			uint64_t rb = 0;
			float *w, *x, *xd;
			void *xq;
			double e, dmax = 0;

			if (!t_ok(tq && tf && tq->type == files[f].type &&
					  !ntx_type_row_bytes(tq->type, n_in, &rb, NULL),
				  "%s %s is %s", files[f].file, tensors[k], ntx_type_name(files[f].type)))
				continue;
			w = malloc((size_t)(n_in * n_out) * sizeof(float));
			x = malloc((size_t)n_in * sizeof(float));
			xd = malloc((size_t)n_in * sizeof(float));
			xq = malloc(ntx_act_bytes(at, n_in));
			for (int64_t r = 0; r < n_out; r++)
				ntx_dequant_row_ref(tq->type, (const char *)tq->data + r * rb, w + r * n_in, n_in);
			e = refio_nmse(w, tf->data, n_in * n_out);
			/* a smooth activation row, quantized as the engine would */
			for (int64_t i = 0; i < n_in; i++)
				x[i] = (float)sin(0.37 * (double)i + 0.1 * (double)k);
			ntx_quantize_act_ref(at, x, xq, n_in);
			if (at == NTX_TYPE_Q8_K) { /* x = d * q (no dequantization of Q8_K rows in the library) */
				const struct ntx_block_q8_k *b = xq;

				for (int64_t i = 0; i < n_in; i++)
					xd[i] = b[i / NTX_QK_K].d * (float)b[i / NTX_QK_K].qs[i % NTX_QK_K];
			} else {
				ntx_dequant_row_ref(at, xq, xd, n_in);
			}
			for (int64_t r = 0; r < n_out; r++) {
				double ref = 0, scale = 0;
				float got = ntx_vec_dot_ref(tq->type, n_in, (const char *)tq->data + r * rb, xq);

				for (int64_t i = 0; i < n_in; i++) {
					ref += (double)w[r * n_in + i] * xd[i];
					scale += fabs((double)w[r * n_in + i] * xd[i]);
				}
				if (!(fabs(got - ref) <= dmax * (scale > 0 ? scale : 1)))
					dmax = fabs(got - ref) / (scale > 0 ? scale : 1);
			}
			t_ok(e > 1e-4 && e < files[f].max && dmax < 1e-6,
			     "%s %s: vs the F32 file NMSE %.3g (quantization noise: 1e-4 .. %g); integer dot = float dot of the dequantized rows (%.2g of the sum of |terms|)",
			     files[f].file, tensors[k], e, files[f].max, dmax);
			free(w), free(x), free(xd), free(xq);
		}
		ntx_gguf_close(g);
	}
	ntx_gguf_close(g32);
}

int main(void)
{
	test_layouts();
	test_fixtures();
	return t_done();
}
