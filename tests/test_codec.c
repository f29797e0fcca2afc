/*
 * Codec contexts are reused across batches (SPARK-3386) but must carry
 * nothing from one batch to the next (SPARK-7766): every batch compressed
 * by one long-lived context decodes alone, in any order, with a fresh
 * context. A batch that does not shrink is stored raw.
 */
#include "helpers.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KiB 1024u
#define NB 200
#define CORPUS (512 * KiB)

static uint8_t *corpus;

/* Text-like bytes from a small vocabulary: compressible, and batches cut
 * from overlapping windows share long matches, which a context that kept
 * history across batches would reference. */
static int setup(void **state)
{
	(void)state;
	static const char *const words[] = {
		"shuffle ", "partition ", "record ", "batch ", "ring ",
		"buffer ", "frame ", "writer ", "reader ", "commit ",
		"io_uring ", "zstd ", "lz4 ", "map ", "reduce ", "spill ",
	};
	uint64_t rng = 7;
	corpus = malloc(CORPUS);
	if (!corpus)
		return -1;
	size_t off = 0;
	while (off < CORPUS) {
		uint64_t r = th_rand(&rng);
		const char *w = words[r % ARRAY_SIZE(words)];
		char num[24];
		int n = snprintf(num, sizeof(num), "%u ",
				 (unsigned)(r >> 40) % 1000);
		for (const char *s = w; *s && off < CORPUS; s++)
			corpus[off++] = (uint8_t)*s;
		for (int i = 0; i < n && off < CORPUS; i++)
			corpus[off++] = (uint8_t)num[i];
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	free(corpus);
	return 0;
}

struct batch {
	uint8_t *raw, *z;
	size_t n;
	long zn;
	enum ush_codec codec;
	int level;
	bool random;
};

static size_t batch_size(int i)
{
	/* Tiny, odd and push-size batches, all different. */
	static const size_t fixed[] = {1, 2, 3, 15, 16, 100, 4095, 4096,
				       65488, 65536};
	if (i < (int)ARRAY_SIZE(fixed))
		return fixed[i];
	return 17 + ((size_t)i * 7919) % 65520;
}

static void make_batches(struct batch *b, int n, int mix)
{
	static const int zlevels[] = {1, 3, -5, 9};
	for (int i = 0; i < n; i++) {
		b[i].n = batch_size(i);
		b[i].raw = malloc(b[i].n);
		b[i].z = malloc(b[i].n);
		assert_non_null(b[i].raw);
		assert_non_null(b[i].z);
		b[i].random = i % 17 == 5;
		if (b[i].random) {
			th_fill(b[i].raw, b[i].n, (uint64_t)i);
		} else {
			size_t start = ((size_t)i * 4099) % (CORPUS - b[i].n);
			memcpy(b[i].raw, corpus + start, b[i].n);
			/* Make each batch unique. */
			for (size_t k = i % 7; k < b[i].n; k += 997)
				b[i].raw[k] ^= (uint8_t)(i + 1);
		}
		/* mix: 0 lz4 only, 1 zstd only, 2 alternating in one ctx */
		b[i].codec = mix == 0 || (mix == 2 && i % 2)
				     ? USH_CODEC_LZ4
				     : USH_CODEC_ZSTD;
		b[i].level = b[i].codec == USH_CODEC_LZ4
				     ? 1 + i % 3
				     : zlevels[i % ARRAY_SIZE(zlevels)];
	}
}

static void free_batches(struct batch *b, int n)
{
	for (int i = 0; i < n; i++) {
		free(b[i].raw);
		free(b[i].z);
	}
}

/* Decodes batch b alone with a context created for it. */
static void decode_fresh(const struct batch *b, int i)
{
	struct ushi_codec_ctx c;
	if (!b->zn)
		return; /* stored raw */
	uint8_t *out = malloc(b->n); /* exact size: ASan sees overruns */
	assert_non_null(out);
	assert_int_equal(codec_init(&c), 0);
	int ret = codec_decompress(&c, b->codec, b->z, (size_t)b->zn, out,
				   b->n);
	if (ret)
		fail_msg("batch %d (%s level %d, %zu bytes) does not decode "
			 "alone: %d", i, ush_codec_name(b->codec), b->level,
			 b->n, ret);
	if (memcmp(out, b->raw, b->n))
		fail_msg("batch %d decodes to other bytes", i);
	codec_destroy(&c);
	free(out);
}

static void context_reuse(int mix)
{
	struct batch b[NB];
	struct ushi_codec_ctx c;
	int order[NB];
	uint64_t rng = 99 + (uint64_t)mix;
	make_batches(b, NB, mix);

	/* One context for every batch, as a ring uses it. */
	assert_int_equal(codec_init(&c), 0);
	for (int i = 0; i < NB; i++) {
		b[i].zn = codec_compress(&c, b[i].codec, b[i].level, b[i].raw,
					 b[i].n, b[i].z, b[i].n);
		assert_true(b[i].zn >= 0);
		assert_true((size_t)b[i].zn < b[i].n);
		if (b[i].random)
			assert_int_equal(b[i].zn, 0);
		else if (b[i].n >= 100)
			assert_true(b[i].zn > 0);
	}
	codec_destroy(&c);

	/* Same bytes as from a fresh context: nothing carried over. */
	for (int i = 0; i < NB; i++) {
		uint8_t *z = malloc(b[i].n);
		assert_non_null(z);
		assert_int_equal(codec_init(&c), 0);
		long zn = codec_compress(&c, b[i].codec, b[i].level, b[i].raw,
					 b[i].n, z, b[i].n);
		codec_destroy(&c);
		assert_int_equal(zn, b[i].zn);
		if (zn > 0 && memcmp(z, b[i].z, (size_t)zn))
			fail_msg("batch %d: reused context wrote other bytes",
				 i);
		free(z);
	}

	/* Each batch alone, newest first, then in a random order. */
	for (int i = NB - 1; i >= 0; i--)
		decode_fresh(&b[i], i);
	for (int i = 0; i < NB; i++)
		order[i] = i;
	for (int i = NB - 1; i > 0; i--) {
		int j = (int)(th_rand(&rng) % (uint64_t)(i + 1));
		int t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (int i = 0; i < NB; i++)
		decode_fresh(&b[order[i]], order[i]);

	/* And with one reused decoding context, as a reader does. */
	assert_int_equal(codec_init(&c), 0);
	for (int k = 0; k < NB; k++) {
		const struct batch *x = &b[order[k]];
		if (!x->zn)
			continue;
		uint8_t *out = malloc(x->n);
		assert_non_null(out);
		assert_int_equal(codec_decompress(&c, x->codec, x->z,
						  (size_t)x->zn, out, x->n),
				 0);
		assert_memory_equal(out, x->raw, x->n);
		free(out);
	}
	codec_destroy(&c);
	free_batches(b, NB);
}

static void context_reuse_lz4(void **state)
{
	(void)state;
	context_reuse(0);
}

static void context_reuse_zstd(void **state)
{
	(void)state;
	context_reuse(1);
}

static void context_reuse_mixed(void **state)
{
	(void)state;
	context_reuse(2);
}

/* Steady state: a reused context compresses and decompresses push-size
 * batches without touching the heap. */
static void steady_state_allocates_nothing(void **state)
{
	(void)state;
	static const enum ush_codec codecs[] = {USH_CODEC_LZ4, USH_CODEC_ZSTD};
	enum { N = 64, SZ = 64 * KiB - USH_FRAME_HDR_SIZE };
	struct ushi_codec_ctx c;
	uint8_t *z = malloc(SZ), *out = malloc(SZ);
	assert_non_null(z);
	assert_non_null(out);
	assert_int_equal(codec_init(&c), 0);
	for (size_t k = 0; k < ARRAY_SIZE(codecs); k++) {
		long zn = 0;
		/* Warm up: the first batch makes the contexts, each
		 * direction's at its first use, and may size the workspace. */
		zn = codec_compress(&c, codecs[k], 1, corpus, SZ, z, SZ);
		assert_true(zn > 0);
		assert_int_equal(codec_decompress(&c, codecs[k], z, (size_t)zn,
						  out, SZ), 0);
		uint64_t before = ush_alloc_count();
		for (int i = 0; i < N; i++) {
			const uint8_t *src = corpus + (size_t)i * 4099;
			zn = codec_compress(&c, codecs[k], 1, src, SZ, z, SZ);
			assert_true(zn > 0);
			assert_int_equal(codec_decompress(&c, codecs[k], z,
							  (size_t)zn, out, SZ),
					 0);
			assert_memory_equal(out, src, SZ);
		}
		assert_int_equal(ush_alloc_count() - before, 0);
	}
	codec_destroy(&c);
	free(z);
	free(out);
}

/* A context is made the first time its codec and direction are used,
 * and only then: a reader of plain or lz4 frames makes no zstd context
 * (hundreds of KiB each), a reader of zstd ones no compressor. */
static void contexts_made_at_first_use(void **state)
{
	(void)state;
	enum { SZ = 16 * KiB };
	struct ushi_codec_ctx c;
	uint8_t *z = malloc(SZ), *out = malloc(SZ);
	assert_non_null(z);
	assert_non_null(out);
	assert_int_equal(codec_init(&c), 0);
	assert_null(c.lz4_state);
	assert_null(c.zc);
	assert_null(c.zd);
	assert_int_equal(codec_compress(&c, USH_CODEC_NONE, 0, corpus, SZ, z,
					SZ), 0);
	assert_null(c.lz4_state);
	long zn = codec_compress(&c, USH_CODEC_LZ4, 1, corpus, SZ, z, SZ);
	assert_true(zn > 0);
	assert_non_null(c.lz4_state);
	assert_int_equal(codec_decompress(&c, USH_CODEC_LZ4, z, (size_t)zn, out,
					  SZ), 0);
	assert_memory_equal(out, corpus, SZ);
	assert_null(c.zc);
	assert_null(c.zd);
	codec_destroy(&c);
	/* zstd frames made elsewhere: decoding them makes the
	 * decompressor alone. */
	struct ushi_codec_ctx w;
	assert_int_equal(codec_init(&w), 0);
	assert_int_equal(codec_prepare(&w, USH_CODEC_ZSTD), 0);
	assert_non_null(w.zc);
	assert_null(w.zd);
	zn = codec_compress(&w, USH_CODEC_ZSTD, 1, corpus, SZ, z, SZ);
	assert_true(zn > 0);
	codec_destroy(&w);
	assert_int_equal(codec_init(&c), 0);
	assert_int_equal(codec_decompress(&c, USH_CODEC_ZSTD, z, (size_t)zn,
					  out, SZ), 0);
	assert_memory_equal(out, corpus, SZ);
	assert_non_null(c.zd);
	assert_null(c.zc);
	assert_null(c.lz4_state);
	codec_destroy(&c);
	free(z);
	free(out);
}

static void no_shrink_is_zero(void **state)
{
	(void)state;
	static const enum ush_codec codecs[] = {USH_CODEC_LZ4, USH_CODEC_ZSTD};
	struct ushi_codec_ctx c;
	uint8_t rnd[4096], zeros[4096], dst[8192];
	th_fill(rnd, sizeof(rnd), 3);
	memset(zeros, 0, sizeof(zeros));
	assert_int_equal(codec_init(&c), 0);
	for (size_t k = 0; k < ARRAY_SIZE(codecs); k++) {
		enum ush_codec cd = codecs[k];
		/* Random bytes grow: reported as 0, store raw. */
		assert_int_equal(codec_compress(&c, cd, 1, rnd, sizeof(rnd),
						dst, sizeof(dst)),
				 0);
		assert_int_equal(codec_compress(&c, cd, 1, rnd, 64, dst, 64),
				 0);
		/* Nothing to gain below 2 bytes. */
		assert_int_equal(codec_compress(&c, cd, 1, rnd, 0, dst, 100),
				 0);
		assert_int_equal(codec_compress(&c, cd, 1, zeros, 1, dst, 100),
				 0);
		/* Zeros shrink, strictly. */
		long zn = codec_compress(&c, cd, 1, zeros, sizeof(zeros), dst,
					 sizeof(dst));
		assert_true(zn > 0);
		assert_true(zn < 200);
		/* The same batch into too small a buffer: store raw. */
		assert_int_equal(codec_compress(&c, cd, 1, zeros, sizeof(zeros),
						dst, (size_t)zn / 2),
				 0);
		/* The context works on after a refusal. */
		assert_int_equal(codec_compress(&c, cd, 1, zeros, sizeof(zeros),
						dst, sizeof(dst)),
				 zn);
	}
	assert_int_equal(codec_compress(&c, USH_CODEC_NONE, 0, zeros,
					sizeof(zeros), dst, sizeof(dst)),
			 0);
	assert_int_equal(codec_compress(&c, (enum ush_codec)3, 0, zeros,
					sizeof(zeros), dst, sizeof(dst)),
			 -EINVAL);
	codec_destroy(&c);
}

/* Broken input fails cleanly and leaves the context usable. */
static void decompress_rejects_bad_input(void **state)
{
	(void)state;
	static const enum ush_codec codecs[] = {USH_CODEC_LZ4, USH_CODEC_ZSTD};
	enum { N = 20000 };
	struct ushi_codec_ctx c;
	uint8_t *z = malloc(N), *out = malloc(N + 1), *junk = malloc(N);
	assert_non_null(z);
	assert_non_null(out);
	assert_non_null(junk);
	th_fill(junk, N, 11);
	assert_int_equal(codec_init(&c), 0);
	for (size_t k = 0; k < ARRAY_SIZE(codecs); k++) {
		enum ush_codec cd = codecs[k];
		long zn = codec_compress(&c, cd, 1, corpus, N, z, N);
		assert_true(zn > 0);
		size_t n = (size_t)zn;
		assert_int_equal(codec_decompress(&c, cd, z, n, out, N - 1),
				 USH_ECODEC);
		assert_int_equal(codec_decompress(&c, cd, z, n, out, N + 1),
				 USH_ECODEC);
		assert_int_equal(codec_decompress(&c, cd, z, n - 1, out, N),
				 USH_ECODEC);
		assert_int_equal(codec_decompress(&c, cd, z, n / 2, out, N),
				 USH_ECODEC);
		assert_int_equal(codec_decompress(&c, cd, junk, n, out, N),
				 USH_ECODEC);
		assert_int_equal(codec_decompress(&c, cd, z, 0, out, N),
				 USH_ECODEC);
		memset(out, 0, N);
		assert_int_equal(codec_decompress(&c, cd, z, n, out, N), 0);
		assert_memory_equal(out, corpus, N);
	}
	assert_int_equal(codec_decompress(&c, USH_CODEC_NONE, z, 10, out, 10),
			 USH_ECODEC);
	codec_destroy(&c);
	free(z);
	free(out);
	free(junk);
}

/* ---------------------------------------- stored raw through the writer */

/* Frames of the data file, in order, as (partition, codec, lens). */
struct seen {
	uint8_t codec;
	uint32_t raw_len, payload_len;
	int frames;
};

static void writer_stores_raw(enum ush_codec codec)
{
	const char *dir = th_tmpdir("codec-raw");
	struct ush_ring_opts o;
	ush_ring *ring;
	ush_ring_opts_init(&o);
	o.pool_bytes = 1024 * KiB;
	o.codec = codec;
	o.level = 1;
	th_ok(ush_ring_create(&ring, &o));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 2,
		.partitions = 6, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 0};
	ush_writer *w;
	enum { SMALL = 8000, BIG = 100000 };
	uint8_t *rnd = malloc(BIG), *batch = malloc(SMALL + 4);
	assert_non_null(rnd);
	assert_non_null(batch);
	th_fill(rnd, BIG, 21);
	th_ok(ush_writer_open(&w, ring, &wo));
	/* 0: random batch by copy; 1: text batch by copy. */
	ush_record_put(batch, rnd, SMALL);
	th_ok(ush_writer_copy(w, 0, batch, SMALL + 4, 1));
	ush_record_put(batch, corpus, SMALL);
	th_ok(ush_writer_copy(w, 1, batch, SMALL + 4, 1));
	/* 2, 3: records above the push size, sent alone. */
	th_ok(ush_writer_write(w, 2, rnd, BIG));
	th_ok(ush_writer_write(w, 3, corpus, BIG));
	/* 4: random batch by swap; 5: random records by write(). */
	void *buf;
	size_t cap;
	th_ok(ush_writer_acquire(w, &buf, &cap));
	ush_record_put(buf, rnd + 1, SMALL);
	th_ok(ush_writer_swap(w, 4, &buf, SMALL + 4, 1));
	th_ok(ush_writer_release(w, buf));
	th_ok(ush_writer_write(w, 5, rnd + 2, SMALL));
	struct ush_status status;
	th_ok(th_commit(w, NULL, &status));
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	ush_writer_free(w);
	struct ush_ring_info info;
	ush_ring_info(ring, &info);
	assert_int_equal(info.pool_idle_bytes, info.pool_bytes);
	ush_ring_free(ring);

	assert_int_equal(st.batches, 6);
	assert_int_equal(st.stored_raw, 4);
	assert_int_equal(st.records, 6);

	/* The frame header says how each batch was stored. */
	char path[PATH_MAX];
	struct stat sb;
	spill_data(path, sizeof(path), dir, 2, 0, 0);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	uint8_t *file = malloc((size_t)sb.st_size);
	assert_non_null(file);
	assert_int_equal(pread(fd, file, (size_t)sb.st_size, 0), sb.st_size);
	close(fd);
	assert_int_equal((uint64_t)sb.st_size, st.frame_bytes);
	struct seen seen[6] = {{0}};
	size_t off = 0;
	while (off < (size_t)sb.st_size) {
		struct ushi_frame f;
		assert_int_equal(frame_decode(file + off, &f), 0);
		assert_int_equal(frame_check(file + off, &f), 0);
		assert_true(f.partition < 6);
		seen[f.partition].codec = f.codec;
		seen[f.partition].raw_len = f.raw_len;
		seen[f.partition].payload_len = f.payload_len;
		seen[f.partition].frames++;
		off += ush_frame_size(f.payload_len);
	}
	free(file);
	for (int p = 0; p < 6; p++) {
		bool text = p == 1 || p == 3;
		assert_int_equal(seen[p].frames, 1);
		assert_int_equal(seen[p].raw_len,
				 (p == 2 || p == 3 ? BIG : SMALL) + 4);
		if (text) {
			assert_int_equal(seen[p].codec, codec);
			assert_true(seen[p].payload_len <
				    seen[p].raw_len * 3 / 4);
		} else {
			assert_int_equal(seen[p].codec, USH_CODEC_NONE);
			assert_int_equal(seen[p].payload_len, seen[p].raw_len);
		}
	}

	/* Every partition reads back to its record. */
	static const size_t offs[6] = {0, 0, 0, 0, 1, 2};
	for (uint32_t p = 0; p < 6; p++) {
		ush_reader *r;
		const void *got;
		size_t len, want = p == 2 || p == 3 ? BIG : SMALL;
		const uint8_t *src = p == 1 || p == 3 ? corpus : rnd + offs[p];
		th_ok(th_reader_open(&r, &status, 1, p, 0));
		assert_int_equal(ush_reader_next(r, &got, &len), 1);
		assert_int_equal(len, want);
		assert_memory_equal(got, src, want);
		assert_int_equal(ush_reader_next(r, &got, &len), 0);
		ush_reader_free(r);
	}
	th_status_free(&status);
	free(rnd);
	free(batch);
	th_rmrf(dir);
}

static void writer_stores_raw_lz4(void **state)
{
	(void)state;
	writer_stores_raw(USH_CODEC_LZ4);
}

static void writer_stores_raw_zstd(void **state)
{
	(void)state;
	writer_stores_raw(USH_CODEC_ZSTD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(context_reuse_lz4),
		cmocka_unit_test(context_reuse_zstd),
		cmocka_unit_test(context_reuse_mixed),
		cmocka_unit_test(steady_state_allocates_nothing),
		cmocka_unit_test(contexts_made_at_first_use),
		cmocka_unit_test(no_shrink_is_zero),
		cmocka_unit_test(decompress_rejects_bad_input),
		cmocka_unit_test(writer_stores_raw_lz4),
		cmocka_unit_test(writer_stores_raw_zstd),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
