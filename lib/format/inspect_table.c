/* inspect_table.c - the summary for people of a GGUF file's ntx.inspect document
 * (ntx-inspect --format table, ntx_inspect with NTX_INSPECT_SUMMARY), made from
 * the same JSON document the default output prints, so the two cannot disagree. */
#include "inspect_table.h"

#include <inttypes.h>
#include <string.h>

#include "parse.h"

static json_int_t num(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "?";
}

static const char *size(uint64_t v, char *buf)
{
	return ntx_fmt_size(v, buf, 32);
}

/* "Q4_K 1.2 MiB, F32 4.0 KiB" from a {"TYPE": bytes} object. */
static void types_line(FILE *f, const json_t *types)
{
	const char *k;
	json_t *v;
	char b[32];
	int first = 1;

	json_object_foreach((json_t *)types, k, v) {
		fprintf(f, "%s%s %s", first ? "" : ", ", k, size((uint64_t)json_integer_value(v), b));
		first = 0;
	}
}

/* Two layers look alike when their bytes and per-type bytes are equal. */
static int same_layer(const json_t *a, const json_t *b)
{
	return num(a, "bytes") == num(b, "bytes") && num(a, "n_tensors") == num(b, "n_tensors") &&
	       json_equal(json_object_get(a, "types"), json_object_get(b, "types"));
}

void ntx_inspect_table(FILE *f, const json_t *doc)
{
	const json_t *m = json_object_get(doc, "model");
	const json_t *layers = json_object_get(doc, "layers");
	const json_t *mix = json_object_get(doc, "quant_mix");
	const json_t *nonlayer = json_object_get(doc, "nonlayer");
	uint64_t total = 0;
	size_t i, n;
	const char *k;
	json_t *v;
	char b1[32], b2[32];

	fprintf(f, "file         %s\n", str(doc, "path"));
	fprintf(f, "size         %s (%" PRIu64 " bytes)\n",
		size((uint64_t)num(doc, "file_size_bytes"), b1), (uint64_t)num(doc, "file_size_bytes"));
	fprintf(f, "gguf         version %d, alignment %d, data at byte %" PRIu64
		   ", %d keys, %d tensors\n",
		(int)num(doc, "gguf_version"), (int)num(doc, "alignment"),
		(uint64_t)num(doc, "data_offset_bytes"), (int)num(doc, "n_kv"),
		(int)num(doc, "n_tensors"));
	fprintf(f, "fingerprint  %s\n", str(doc, "fingerprint"));
	if (json_is_object(m)) {
		const json_t *ft = json_object_get(m, "file_type");

		fprintf(f, "model        %s, %d layers, n_embd %d, n_ff %d, heads %d (kv %d), head_dim %d\n",
			str(m, "arch"), (int)num(m, "n_layer"), (int)num(m, "n_embd"),
			(int)num(m, "n_ff"), (int)num(m, "n_head"), (int)num(m, "n_head_kv"),
			(int)num(m, "head_dim"));
		fprintf(f, "             vocab %" PRId64 ", context %d, rope base %g (n_rot %d, freq scale %g%s), rms_eps %g\n",
			(int64_t)num(m, "n_vocab"), (int)num(m, "n_ctx_train"),
			json_number_value(json_object_get(m, "rope_base")), (int)num(m, "n_rot"),
			json_number_value(json_object_get(m, "rope_freq_scale")),
			json_is_true(json_object_get(m, "has_rope_freqs")) ? ", rope_freqs" : "",
			json_number_value(json_object_get(m, "rms_eps")));
		fprintf(f, "             output %s, file_type ",
			num(doc, "n_tensors") == 0 ? "-" :
			json_is_true(json_object_get(m, "output_tied")) ? "tied to token_embd" : "separate");
		if (json_is_integer(ft))
			fprintf(f, "%d\n", (int)json_integer_value(ft));
		else
			fprintf(f, "absent\n");
		if (strcmp(str(m, "rope_style"), "norm") || json_is_true(json_object_get(m, "qk_norm")))
			fprintf(f, "             rope %s%s\n", str(m, "rope_style"),
				json_is_true(json_object_get(m, "qk_norm")) ? ", q/k norms" : "");
	} else {
		fprintf(f, "model        not a usable Llama model: %s\n", str(doc, "model_error"));
	}
	if (num(doc, "n_tensors") == 0) {
		fprintf(f, "tensors      none (a vocabulary-only file)\n");
		return;
	}
	json_object_foreach((json_t *)mix, k, v)
		total += (uint64_t)json_integer_value(v);
	n = json_array_size(layers);
	fprintf(f, "layers       %zu, %s", n, size((uint64_t)num(doc, "layer_bytes"), b1));
	fprintf(f, "; non-layer %s\n", size((uint64_t)num(doc, "nonlayer_bytes"), b2));
	for (i = 0; i < n;) {
		const json_t *l = json_array_get(layers, i);
		size_t j = i + 1;

		while (j < n && same_layer(l, json_array_get(layers, j)))
			j++;
		if (j - i > 1)
			fprintf(f, "  %4d-%-4d  %s each: ", (int)num(l, "index"),
				(int)num(json_array_get(layers, j - 1), "index"),
				size((uint64_t)num(l, "bytes"), b1));
		else
			fprintf(f, "  %4d       %s: ", (int)num(l, "index"),
				size((uint64_t)num(l, "bytes"), b1));
		types_line(f, json_object_get(l, "types"));
		fputc('\n', f);
		i = j;
	}
	if (json_is_object(json_object_get(doc, "experts"))) {
		const json_t *x = json_object_get(doc, "experts");
		char b3[32];

		fprintf(f, "experts      %d per layer, %d used per token; %s of experts (%s per expert, all layers)\n",
			(int)num(x, "n_expert"), (int)num(x, "n_expert_used"),
			size((uint64_t)num(x, "expert_bytes"), b1),
			size((uint64_t)num(x, "bytes_per_expert"), b2));
		fprintf(f, "             a token reads %s of %s (dense %s + %d/%d of the experts), "
			   "%.1fM of %.1fM parameters\n",
			size((uint64_t)num(x, "active_bytes"), b1),
			size((uint64_t)num(x, "dense_bytes") + (uint64_t)num(x, "expert_bytes"), b2),
			size((uint64_t)num(x, "dense_bytes"), b3), (int)num(x, "n_expert_used"),
			(int)num(x, "n_expert"), (double)num(x, "active_params") / 1e6,
			(double)num(x, "n_params") / 1e6);
		for (i = 0; i < n; i++) {
			const json_t *l = json_array_get(layers, i);

			fprintf(f, "  %4d       experts %s, %s per expert\n", (int)num(l, "index"),
				size((uint64_t)num(l, "expert_bytes"), b1),
				size((uint64_t)num(l, "bytes_per_expert"), b2));
		}
	}
	for (i = 0; i < json_array_size(nonlayer); i++) {
		const json_t *t = json_array_get(nonlayer, i);

		fprintf(f, "  %-28s %-5s %s\n", str(t, "name"), str(t, "type"),
			size((uint64_t)num(t, "bytes"), b1));
	}
	fprintf(f, "quant mix   ");
	json_object_foreach((json_t *)mix, k, v) {
		uint64_t b = (uint64_t)json_integer_value(v);

		fprintf(f, " %s %s (%.1f%%)", k, size(b, b1), total ? 100.0 * (double)b / (double)total : 0.0);
	}
	fputc('\n', f);
}
