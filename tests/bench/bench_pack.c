/* bench_pack.c - what per-extent compression buys for a model: for the
 * first --layers layers of a GGUF, laid out as pack extents and cut into
 * frames, the zstd ratio and the compress / decompress rate of ONE core at
 * each level, with and without the byte-plane split, plus the checksum and
 * plane-merge rates. One JSON document on stdout; the decision it informs
 * is written up in doc/pack-format.md.
 *   bench_pack MODEL.gguf [--layers N] [--levels 1,2,3] [--frame-size 4M] [--repeat R]
 * Rates are GB/s of raw (decoded) bytes per core, the best of R runs (the
 * machine may be shared).
 *   bench_pack --read PACK.ntxp [--threads T] [--inflight K] [--no-verify]
 * reads every extent of a pack the way the engine does (direct I/O pool, K
 * extents in flight, checksum and decoding on the I/O threads) and reports
 * the stored and raw GB/s and the CPU time it took. */
#include <getopt.h>
#include <inttypes.h>
#include <sys/resource.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "clock.h"
#include "layout.h"
#include "model.h"
#include "pack.h"
#include "pack_read.h"
#include "parse.h"

struct result {
	uint64_t raw, stored, stored_auto;
	double t_comp, t_dec;
	int frames, frames_auto;
};

/* Compress and decompress every frame of buf (n bytes) once. */
static int run(const unsigned char *buf, size_t n, size_t frame, int level, int w,
	       struct result *r)
{
	size_t cap = ZSTD_compressBound(frame), off;
	unsigned char *planes = malloc(frame), *out = malloc(cap), *back = malloc(frame),
		      *tmp = malloc(frame);
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	int rc = 0;

	for (off = 0; off < n; off += frame) {
		size_t len = n - off < frame ? n - off : frame, c, d;
		const unsigned char *src = buf + off;
		double t0 = ntx_now_s();

		if (w) {
			ntx_pack_planes_split(src, planes, len, w);
			src = planes;
		}
		c = ZSTD_compressCCtx(cc, out, cap, src, len, level);
		r->t_comp += ntx_now_s() - t0;
		if (ZSTD_isError(c)) {
			rc = -1;
			break;
		}
		t0 = ntx_now_s();
		d = ZSTD_decompressDCtx(dc, w ? tmp : back, frame, out, c);
		if (w)
			ntx_pack_planes_merge(tmp, back, len, w);
		r->t_dec += ntx_now_s() - t0;
		if (ZSTD_isError(d) || d != len || memcmp(back, buf + off, len) != 0) {
			rc = -1;
			break;
		}
		r->raw += len;
		r->stored += c < len ? c : len;
		r->frames++;
		/* the auto rule: keep a frame compressed when it saves >= 10% */
		if ((double)c <= 0.9 * (double)len) {
			r->stored_auto += c;
			r->frames_auto++;
		} else {
			r->stored_auto += len;
		}
	}
	ZSTD_freeCCtx(cc);
	ZSTD_freeDCtx(dc);
	free(planes);
	free(out);
	free(back);
	free(tmp);
	return rc;
}

static json_t *result_json(const struct result *r)
{
	json_t *o = json_object();

	json_object_set_new(o, "raw_bytes", json_integer((json_int_t)r->raw));
	json_object_set_new(o, "stored_bytes", json_integer((json_int_t)r->stored));
	json_object_set_new(o, "ratio", json_real((double)r->stored / (double)r->raw));
	json_object_set_new(o, "compress_gb_per_s", json_real((double)r->raw / r->t_comp / 1e9));
	json_object_set_new(o, "decompress_gb_per_s", json_real((double)r->raw / r->t_dec / 1e9));
	json_object_set_new(o, "auto_ratio", json_real((double)r->stored_auto / (double)r->raw));
	json_object_set_new(o, "auto_frames_compressed", json_integer(r->frames_auto));
	json_object_set_new(o, "frames", json_integer(r->frames));
	return o;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* --read: stream a pack as the engine would. */
static int read_pack(const char *path, int threads, int inflight, int verify)
{
	struct ntx_err err;
	struct ntx_pack *p = ntx_pack_open(path, &err);
	struct ntx_pack_read *rd;
	struct ntx_dio *d;
	unsigned char **st, **raw;
	uint64_t stored = 0, rawb = 0;
	double t0, c0, dt, dc;
	int x, k, any_zstd = 0, rc = 0;
	json_t *doc;

	if (!p) {
		fprintf(stderr, "bench_pack: %s: %s\n", path, err.msg);
		return 1;
	}
	d = ntx_dio_open(path, threads, 0, NULL, &err);
	if (!d) {
		fprintf(stderr, "bench_pack: %s: %s\n", path, err.msg);
		return 1;
	}
	for (x = 0; x < p->n_extents; x++)
		any_zstd |= p->extents[x].compression != NTX_PACK_COMP_NONE;
	rd = calloc((size_t)inflight, sizeof *rd);
	st = calloc((size_t)inflight, sizeof *st);
	raw = calloc((size_t)inflight, sizeof *raw);
	for (k = 0; k < inflight; k++) {
		st[k] = ntx_dio_alloc((size_t)p->max_stored);
		raw[k] = any_zstd ? ntx_dio_alloc((size_t)p->max_raw) : st[k];
		memset(st[k], 0, (size_t)p->max_stored);
		if (any_zstd)
			memset(raw[k], 0, (size_t)p->max_raw);
	}
	t0 = ntx_now_s();
	c0 = cpu_s();
	for (x = 0; x < p->n_extents + inflight; x++) {
		if (x >= inflight) {
			const struct ntx_pack_extent *e = &p->extents[x - inflight];

			k = (x - inflight) % inflight;
			if (ntx_pack_read_wait(d, &rd[k], &err)) {
				fprintf(stderr, "bench_pack: %s: %s\n", path, err.msg);
				rc = 1;
			}
			stored += e->stored_size;
			rawb += e->raw_size;
		}
		if (x < p->n_extents) {
			const struct ntx_pack_extent *e = &p->extents[x];

			k = x % inflight;
			if (ntx_pack_read_submit(d, p, e, st[k],
						 e->compression == NTX_PACK_COMP_NONE ? st[k] : raw[k],
						 verify, &rd[k], &err)) {
				fprintf(stderr, "bench_pack: %s\n", err.msg);
				return 1;
			}
		}
	}
	dt = ntx_now_s() - t0;
	dc = cpu_s() - c0;
	doc = json_pack("{s:s, s:i, s:s, s:b, s:i, s:i, s:b, s:I, s:I, s:f, s:f, s:f, s:f}",
			"format", "ntx.bench.pack_read", "version", 1, "pack", path, "direct",
			ntx_dio_direct(d), "threads", threads, "inflight", inflight, "verify", verify,
			"stored_bytes", (json_int_t)stored, "raw_bytes", (json_int_t)rawb,
			"seconds", dt, "stored_gb_per_s", (double)stored / dt / 1e9,
			"raw_gb_per_s", (double)rawb / dt / 1e9, "cpu_cores_busy", dc / dt);
	json_dumpf(doc, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
	json_decref(doc);
	ntx_dio_close(d);
	for (k = 0; k < inflight; k++) {
		if (raw[k] != st[k])
			free(raw[k]);
		free(st[k]);
	}
	free(st);
	free(raw);
	free(rd);
	ntx_pack_close(p);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "layers", required_argument, NULL, 'l' },
		{ "levels", required_argument, NULL, 'L' },
		{ "frame-size", required_argument, NULL, 'f' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "read", required_argument, NULL, 'R' },
		{ "threads", required_argument, NULL, 't' },
		{ "inflight", required_argument, NULL, 'i' },
		{ "no-verify", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	int threads = 4, inflight = 3, verify = 1;
	const char *read_path = NULL;
	int n_layers = 2, repeat = 3, *levels = NULL, n_levels = 0, c, l, i, s;
	uint64_t frame = NTX_PACK_FRAME_DEFAULT;
	const char *lv = "1,2,3";
	struct ntx_model *m;
	struct ntx_err err;
	unsigned char *buf;
	size_t n = 0, pos = 0;
	json_t *doc, *res;
	double t0, dt;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'l' && ntx_parse_int(optarg, 1, 1000, &n_layers, &err) == 0)
			continue;
		if (c == 'r' && ntx_parse_int(optarg, 1, 100, &repeat, &err) == 0)
			continue;
		if (c == 'R') {
			read_path = optarg;
			continue;
		}
		if (c == 't' && ntx_parse_int(optarg, 1, 256, &threads, &err) == 0)
			continue;
		if (c == 'i' && ntx_parse_int(optarg, 1, 64, &inflight, &err) == 0)
			continue;
		if (c == 'n') {
			verify = 0;
			continue;
		}
		if (c == 'L') {
			lv = optarg;
			continue;
		}
		if (c == 'f' && ntx_parse_size(optarg, &frame, &err) == 0 && frame >= 4096)
			continue;
		fprintf(stderr, "usage: bench_pack MODEL.gguf [--layers N] [--levels 1,2,3] "
				"[--frame-size 4M]\n");
		return 2;
	}
	if (read_path)
		return read_pack(read_path, threads, inflight, verify);
	if (optind + 1 != argc) {
		fprintf(stderr, "usage: bench_pack MODEL.gguf [--layers N] [--levels 1,2,3]\n");
		return 2;
	}
	{
		char *copy = strdup(lv), *tok, *save = NULL;

		levels = calloc(32, sizeof *levels);
		for (tok = strtok_r(copy, ",", &save); tok && n_levels < 32;
		     tok = strtok_r(NULL, ",", &save))
			if (ntx_parse_int(tok, -7, 22, &levels[n_levels], &err) == 0)
				n_levels++;
		free(copy);
	}
	m = ntx_model_open(argv[optind], 0, &err);
	if (!m) {
		fprintf(stderr, "bench_pack: %s: %s\n", argv[optind], err.msg);
		return 1;
	}
	if (n_layers > m->cfg.n_layer)
		n_layers = m->cfg.n_layer;
	for (l = 0; l < n_layers; l++) {
		struct ntx_layer_layout lo;

		ntx_layer_layout(&m->layers[l], &lo);
		n += lo.total;
	}
	buf = malloc(n);
	for (l = 0; l < n_layers; l++) {
		struct ntx_layer_layout lo;

		ntx_layer_layout(&m->layers[l], &lo);
		ntx_layer_pack_copy(&m->layers[l], &lo, buf + pos);
		pos += lo.total;
	}
	doc = json_object();
	json_object_set_new(doc, "format", json_string("ntx.bench.pack"));
	json_object_set_new(doc, "version", json_integer(1));
	json_object_set_new(doc, "model", json_string(argv[optind]));
	json_object_set_new(doc, "layers", json_integer(n_layers));
	json_object_set_new(doc, "raw_bytes", json_integer((json_int_t)n));
	json_object_set_new(doc, "frame_bytes", json_integer((json_int_t)frame));
	json_object_set_new(doc, "zstd_version", json_string(ZSTD_versionString()));
	{
		unsigned char *tmp = malloc(n);
		double best[3] = { 1e30, 1e30, 1e30 };
		int k;

		memset(tmp, 0, n); /* fault the pages in first */
		for (k = 0; k < repeat; k++) {
			t0 = ntx_now_s();
			(void)ntx_pack_checksum(buf, n);
			dt = ntx_now_s() - t0;
			best[0] = dt < best[0] ? dt : best[0];
			t0 = ntx_now_s();
			ntx_pack_planes_merge(buf, tmp, n / 4 * 4, 2);
			dt = ntx_now_s() - t0;
			best[1] = dt < best[1] ? dt : best[1];
			t0 = ntx_now_s();
			memcpy(tmp, buf, n);
			dt = ntx_now_s() - t0;
			best[2] = dt < best[2] ? dt : best[2];
		}
		json_object_set_new(doc, "xxh64_gb_per_s", json_real((double)n / best[0] / 1e9));
		json_object_set_new(doc, "merge2_gb_per_s", json_real((double)n / best[1] / 1e9));
		json_object_set_new(doc, "memcpy_gb_per_s", json_real((double)n / best[2] / 1e9));
		free(tmp);
	}
	res = json_array();
	for (i = 0; i < n_levels; i++)
		for (s = 0; s < 2; s++) {
			struct result r;
			json_t *o;

			{
				struct result best = { 0, 0, 0, 1e30, 1e30, 0, 0 };
				int k;

				for (k = 0; k < repeat; k++) {
					memset(&r, 0, sizeof r);
					if (run(buf, n, (size_t)frame, levels[i], s ? 2 : 0, &r)) {
						fprintf(stderr, "bench_pack: round trip failed\n");
						return 1;
					}
					if (r.t_comp < best.t_comp)
						best.t_comp = r.t_comp;
					if (r.t_dec < best.t_dec)
						best.t_dec = r.t_dec;
				}
				r.t_comp = best.t_comp;
				r.t_dec = best.t_dec;
			}
			o = result_json(&r);
			json_object_set_new(o, "level", json_integer(levels[i]));
			json_object_set_new(o, "split", json_boolean(s));
			json_array_append_new(res, o);
			fprintf(stderr, "level %d split %d: ratio %.4f auto %.4f (%d/%d frames) "
					"compress %.3f GB/s decompress %.3f GB/s\n",
				levels[i], s, (double)r.stored / (double)r.raw,
				(double)r.stored_auto / (double)r.raw, r.frames_auto, r.frames,
				(double)r.raw / r.t_comp / 1e9, (double)r.raw / r.t_dec / 1e9);
		}
	json_object_set_new(doc, "results", res);
	json_dumpf(doc, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
	json_decref(doc);
	free(buf);
	free(levels);
	ntx_model_close(m);
	return fclose(stdout) == 0 ? 0 : 1;
}
