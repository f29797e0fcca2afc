/*
 * ush_bench_codec_speed: the codec's own single-thread speed on a batch
 * stream, the reference of benchmark 6 (transport overhead on top of the
 * codec). It compresses every batch of the stream in a loop with the calls
 * and settings the library uses (LZ4_compress_fast_extState on one state,
 * acceleration 1; ZSTD_compressCCtx on one CCtx at the given level), and
 * reports raw bytes per second, median over rounds.
 *
 * The stream is "the same records" the CLI job compresses when it is given
 * the spill data files of an uncompressed run of that job (--codec=none
 * --direct=0 --rw=write): each frame's payload is one batch, exactly as the
 * job built it (format: docs/format.md). Without files it generates batches
 * of --bs bytes itself (records of 100..1000 bytes, half compressible).
 *
 * --via=lib sends the same batches through the library instead: a null-
 * target writer on a ring with that codec, each batch memcpy'ed into the
 * acquired push buffer and handed over with ush_writer_swap() (what a
 * caller that builds batches elsewhere pays), so the difference to the
 * plain codec loop is what the transport adds: the copy, framing, CRC32C,
 * pool and queue work, with no record generation in it.
 *
 * Exit 1 on an unreadable or malformed input, if a batch does not
 * decompress to itself (checked once per batch before timing), or if the
 * writer's statistics disagree with the batches given to it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <json-c/json.h>
#include <lz4.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <ushuffle/ushuffle.h>

#include "util.h"

#define PROG "ush_bench_codec_speed"
#define HDR 48u
#define MAGIC 0x46485355u

struct batch {
	const uint8_t *p;
	size_t len;
	uint32_t part, nrec;
};

struct cfg {
	const char *codec;
	int level;
	unsigned rounds;
	double min_round_s;
	size_t bs, synth_bytes;
	bool json;
};

static struct batch *batches;
static size_t nbatches, cap_batches, raw_total;

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, PROG ": out of memory\n");
		exit(1);
	}
	return p;
}

static void add_batch(const uint8_t *p, size_t len, uint32_t part,
		      uint32_t nrec)
{
	if (nbatches == cap_batches) {
		cap_batches = cap_batches ? 2 * cap_batches : 1024;
		batches = realloc(batches, cap_batches * sizeof(*batches));
		if (!batches) {
			fprintf(stderr, PROG ": out of memory\n");
			exit(1);
		}
	}
	batches[nbatches++] = (struct batch){p, len, part, nrec};
	raw_total += len;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* Frames back to back, or each at a multiple of 4096 (O_DIRECT padding). */
static void load_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb)) {
		perror(path);
		exit(1);
	}
	size_t size = (size_t)sb.st_size, got = 0;
	uint8_t *d = xmalloc(size ? size : 1);
	while (got < size) {
		ssize_t r = read(fd, d + got, size - got);
		if (r <= 0) {
			perror(path);
			exit(1);
		}
		got += (size_t)r;
	}
	close(fd);
	size_t off = 0;
	while (off + HDR <= size) {
		const uint8_t *h = d + off;
		if (le32(h) != MAGIC) {
			off = (off | 4095) + 1; /* padding up to 4096 */
			continue;
		}
		uint32_t raw = le32(h + 32), plen = le32(h + 36);
		if (h[5] != 1 || h[6] != 0 || raw != plen ||
		    off + HDR + plen > size) {
			fprintf(stderr, PROG ": %s offset %zu: not an "
				"uncompressed DATA frame (run the job with "
				"--codec=none)\n", path, off);
			exit(1);
		}
		add_batch(h + HDR, plen, le32(h + 20), le32(h + 40));
		off += HDR + plen;
	}
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Fallback stream: records of 100..1000 bytes, each half repeated text. */
static void synthesize(size_t total, size_t bs)
{
	uint64_t s = 88172645463325252ull;
	for (size_t done = 0; done < total; done += bs) {
		uint8_t *b = xmalloc(bs);
		size_t n = 0;
		uint32_t k = 0;
		while (n + 4 + 100 <= bs) {
			size_t rec = 100 + rng(&s) % 901;
			if (n + 4 + rec > bs)
				rec = bs - n - 4;
			uint32_t l = (uint32_t)rec;
			memcpy(b + n, &l, 4);
			n += 4;
			for (size_t i = 0; i < rec; i++)
				b[n + i] = i < rec / 2 ? (uint8_t)('a' + i % 7)
						       : (uint8_t)rng(&s);
			n += rec;
			k++;
		}
		add_batch(b, n, (uint32_t)(done / bs % 64), k);
	}
}

struct codec {
	bool zstd;
	int level;
	void *lz4_state;
	ZSTD_CCtx *zc;
	ZSTD_DCtx *zd;
};

/* Compressed size, or 0 if it did not shrink (the library stores raw). */
static size_t compress(struct codec *c, const struct batch *b, uint8_t *dst,
		       size_t cap)
{
	if (!c->zstd) {
		int r = LZ4_compress_fast_extState(c->lz4_state,
						   (const char *)b->p,
						   (char *)dst, (int)b->len,
						   (int)cap, c->level);
		return r > 0 ? (size_t)r : 0;
	}
	ZSTD_CCtx_reset(c->zc, ZSTD_reset_session_only);
	size_t r = ZSTD_compressCCtx(c->zc, dst, cap, b->p, b->len, c->level);
	return ZSTD_isError(r) ? 0 : r;
}

static bool roundtrip(struct codec *c, const struct batch *b, uint8_t *dst,
		      size_t n, uint8_t *back)
{
	if (!c->zstd)
		return LZ4_decompress_safe((const char *)dst, (char *)back,
					   (int)n, (int)b->len) == (int)b->len &&
		       !memcmp(back, b->p, b->len);
	size_t r = ZSTD_decompressDCtx(c->zd, back, b->len, dst, n);
	return r == b->len && !memcmp(back, b->p, b->len);
}

/* Bytes per second through a null-target writer: see the header. */
static double via_lib(const struct codec *k, const struct cfg *c,
		      size_t maxlen)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.codec = k->zstd ? USH_CODEC_ZSTD : USH_CODEC_LZ4;
	ro.level = k->level;
	ro.fixedbufs = 0; /* no I/O on the null target */
	while (ro.push_size < maxlen + USH_FRAME_HDR_SIZE)
		ro.push_size *= 2;
	uint32_t parts = 1;
	for (size_t i = 0; i < nbatches; i++)
		if (batches[i].part >= parts)
			parts = batches[i].part + 1;
	ush_ring *ring;
	ush_writer *w;
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 6,
		.partitions = parts, .target = USH_TARGET_NULL};
	int ret = ush_ring_create(&ring, &ro);
	if (ret || (ret = ush_writer_open(&w, ring, &wo))) {
		fprintf(stderr, PROG ": %s\n", ush_last_error());
		exit(1);
	}
	void *buf;
	size_t cap;
	if ((ret = ush_writer_acquire(w, &buf, &cap)) || cap < maxlen) {
		fprintf(stderr, PROG ": acquire: %s\n", ush_last_error());
		exit(1);
	}
	uint64_t t0 = now_ns(), t1, bytes = 0, n = 0;
	do {
		for (size_t i = 0; i < nbatches; i++) {
			const struct batch *b = &batches[i];
			memcpy(buf, b->p, b->len);
			if ((ret = ush_writer_swap(w, b->part, &buf, b->len,
						   b->nrec))) {
				fprintf(stderr, PROG ": swap: %s\n",
					ush_last_error());
				exit(1);
			}
		}
		bytes += raw_total;
		n += nbatches;
		t1 = now_ns();
	} while ((double)(t1 - t0) < c->min_round_s * 1e9);
	ush_writer_release(w, buf);
	if ((ret = ush_writer_commit(w, NULL))) {
		fprintf(stderr, PROG ": commit: %s\n", ush_last_error());
		exit(1);
	}
	t1 = now_ns();
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	if (st.batches != n || st.raw_bytes != bytes) {
		fprintf(stderr, PROG ": FAIL: writer counted %llu batches, "
			"%llu bytes; %llu, %llu were handed over\n",
			(unsigned long long)st.batches,
			(unsigned long long)st.raw_bytes,
			(unsigned long long)n, (unsigned long long)bytes);
		exit(1);
	}
	ush_writer_free(w);
	ush_ring_free(ring);
	return (double)bytes / ((double)(t1 - t0) / 1e9);
}

int main(int argc, char **argv)
{
	struct cfg c = {.codec = "lz4", .rounds = 7, .bs = 64 << 10};
	unsigned lib = 0, min_round_ms = 300; /* lib: --via=lib */
	size_t synth_mib = 64;
	static const struct bench_cmd cmd = {PROG, "[DATAFILE...]",
		"Without DATAFILEs it compresses synthetic batches: --bs, "
		"--synth-mib.\nExit status: 0 ok, 1 an error or a failed "
		"check, 2 a bad option."};
	const struct bench_opt opts[] = {
		{"codec", "lz4|zstd:L", "codec and zstd level (default lz4)",
		 BENCH_STR, &c.codec},
		{"via", "codec|lib", "the codec's own loop, or the library: "
		 "a null-target\nwriter (default codec)", BENCH_CHOICE, &lib},
		{"rounds", "N", "rounds (default 7)", BENCH_COUNT, &c.rounds},
		{"min-round-ms", "MS", "whole passes until a round took this "
		 "long\n(default 300)", BENCH_UINT, &min_round_ms},
		{"bs", "B", "synthetic batch bytes (default 65536)", BENCH_SIZE,
		 &c.bs},
		{"synth-mib", "M", "synthetic MiB (default 64)", BENCH_SIZE,
		 &synth_mib},
		{"json", NULL, "JSON report on stdout", BENCH_FLAG, &c.json},
		{0},
	};
	int files = bench_parse(argc, argv, &cmd, opts);
	c.min_round_s = min_round_ms / 1e3;
	c.synth_bytes = synth_mib << 20;
	struct codec k = {.level = 1};
	if (!strncmp(c.codec, "zstd", 4)) {
		k.zstd = true;
		if (c.codec[4] == ':')
			k.level = atoi(c.codec + 5);
		k.zc = ZSTD_createCCtx();
		k.zd = ZSTD_createDCtx();
	} else if (!strcmp(c.codec, "lz4")) {
		k.lz4_state = xmalloc((size_t)LZ4_sizeofState());
	} else {
		bench_bad(PROG, "--codec=%s: lz4 or zstd[:LEVEL]", c.codec);
	}
	if (files < argc)
		for (int i = files; i < argc; i++)
			load_file(argv[i]);
	else if (c.bs < 256 || !c.synth_bytes)
		bench_bad(PROG, "--bs=%zu --synth-mib=%zu: at least 256 B and "
			  "1 MiB", c.bs, synth_mib);
	else
		synthesize(c.synth_bytes, c.bs);
	if (!nbatches) {
		fprintf(stderr, PROG ": no batches to compress\n");
		return 1;
	}
	size_t maxlen = 0;
	for (size_t i = 0; i < nbatches; i++)
		if (batches[i].len > maxlen)
			maxlen = batches[i].len;
	size_t cap = ZSTD_compressBound(maxlen) + LZ4_compressBound((int)maxlen);
	uint8_t *dst = xmalloc(cap), *back = xmalloc(maxlen);
	/* Verify (and warm up) once; count what would be stored. */
	size_t stored = 0, stored_raw = 0;
	for (size_t i = 0; i < nbatches; i++) {
		/* The library asks for strictly smaller output: cap len - 1. */
		size_t n = compress(&k, &batches[i], dst, batches[i].len - 1);
		if (!n) {
			stored += batches[i].len;
			stored_raw++;
			continue;
		}
		if (!roundtrip(&k, &batches[i], dst, n, back)) {
			fprintf(stderr, PROG ": FAIL: batch %zu does not "
				"decompress to itself\n", i);
			return 1;
		}
		stored += n;
	}
	double *bw = xmalloc(c.rounds * sizeof(*bw));
	for (unsigned r = 0; lib && r < c.rounds; r++)
		bw[r] = via_lib(&k, &c, maxlen);
	for (unsigned r = 0; !lib && r < c.rounds; r++) {
		/* Whole passes over the stream until min_round_s elapsed. */
		uint64_t t0 = now_ns(), t1;
		size_t bytes = 0;
		do {
			for (size_t i = 0; i < nbatches; i++)
				compress(&k, &batches[i], dst,
					 batches[i].len - 1);
			bytes += raw_total;
			t1 = now_ns();
		} while ((double)(t1 - t0) < c.min_round_s * 1e9);
		bw[r] = (double)bytes / ((double)(t1 - t0) / 1e9);
	}
	double med = median(bw, c.rounds);
	if (c.json) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "bench", json_object_new_string("codec_speed"));
		json_object_object_add(o, "codec",
				       json_object_new_string(k.zstd ? "zstd" : "lz4"));
		json_object_object_add(o, "level", json_object_new_int(k.level));
		json_object_object_add(o, "via", json_object_new_string(
			lib ? "ushuffle null-target writer, swap" : "codec"));
		json_object_object_add(o, "source", json_object_new_string(
			files < argc ? "spill files" : "synthetic"));
		json_object_object_add(o, "batches",
				       json_object_new_int64((int64_t)nbatches));
		json_object_object_add(o, "raw_bytes",
				       json_object_new_int64((int64_t)raw_total));
		json_object_object_add(o, "stored_bytes",
				       json_object_new_int64((int64_t)stored));
		json_object_object_add(o, "stored_raw_batches",
				       json_object_new_int64((int64_t)stored_raw));
		json_object_object_add(o, "rounds", json_object_new_int((int)c.rounds));
		json_object_object_add(o, "median_bytes_per_s",
				       json_object_new_double(med));
		json_object_object_add(o, "min_round_bytes_per_s",
				       json_object_new_double(bw[0]));
		json_object_object_add(o, "max_round_bytes_per_s",
				       json_object_new_double(bw[c.rounds - 1]));
		puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
		json_object_put(o);
	} else {
		printf(PROG ": %s%s level %d, %zu batches, %.1f MiB raw -> %.1f "
		       "MiB (%zu stored raw): %.0f MiB/s median of %u rounds\n",
		       lib ? "ushuffle+" : "", k.zstd ? "zstd" : "lz4",
		       k.level, nbatches,
		       raw_total / 1048576.0, stored / 1048576.0, stored_raw,
		       med / 1048576.0, c.rounds);
	}
	free(bw);
	free(dst);
	free(back);
	free(k.lz4_state);
	ZSTD_freeCCtx(k.zc);
	ZSTD_freeDCtx(k.zd);
	return 0;
}
