/*
 * Frames. "Exact size" (the Comet lesson): what the writer puts on disk
 * is byte for byte ush_frame_size_of(codec, level, batch, len). Header
 * encoding: every field round-trips, the CRC is CRC32C, any flipped bit
 * is caught, malformed headers are rejected.
 */
#include "helpers.h"
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

/* Bitwise CRC32C (Castagnoli, reflected), independent of ISA-L. */
static uint32_t ref_crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		crc ^= p[i];
		for (int k = 0; k < 8; k++)
			crc = crc >> 1 ^ (0x82f63b78u & -(crc & 1));
	}
	return crc;
}

static uint8_t *read_file(const char *path, size_t *size)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st))
		fail_msg("open %s failed", path);
	uint8_t *b = malloc((size_t)st.st_size + 1);
	assert_non_null(b);
	assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*size = (size_t)st.st_size;
	return b;
}

/* ------------------------------------------------------- header codec */

static void frame_header_round_trip(void **state)
{
	(void)state;
	uint8_t buf[USH_FRAME_HDR_SIZE + 1000];
	th_fill(buf + USH_FRAME_HDR_SIZE, 1000, 1);
	struct ushi_frame f = {
		.type = USHI_FRAME_DATA,
		.codec = USH_CODEC_LZ4,
		.flags = 0,
		.shuffle = 0x01020304u,
		.map = 0xa1b2c3d4u,
		.attempt = 7,
		.partition = 0xfffffffeu,
		.seq = 0x0123456789abcdefull,
		.raw_len = 5000,
		.payload_len = 1000,
		.nrec = 17,
	};
	frame_encode(buf, &f);

	/* The documented little-endian layout, byte by byte. */
	static const uint8_t want[44] = {
		0x55, 0x53, 0x48, 0x46, /* "USHF" */
		1, USHI_FRAME_DATA, USH_CODEC_LZ4, 0,
		0x04, 0x03, 0x02, 0x01,
		0xd4, 0xc3, 0xb2, 0xa1,
		7, 0, 0, 0,
		0xfe, 0xff, 0xff, 0xff,
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
		0x88, 0x13, 0, 0, /* 5000 */
		0xe8, 0x03, 0, 0, /* 1000 */
		17, 0, 0, 0,
	};
	assert_memory_equal(buf, want, sizeof(want));
	/* CRC32C over the header before the CRC field, then the payload. */
	uint32_t c = ref_crc32c(0xffffffffu, buf, 44);
	c = ~ref_crc32c(c, buf + USH_FRAME_HDR_SIZE, 1000);
	assert_int_equal(f.crc, c);
	assert_int_equal(get_le32(buf + 44), c);

	struct ushi_frame g;
	memset(&g, 0xa5, sizeof(g));
	assert_int_equal(frame_decode(buf, &g), 0);
	assert_int_equal(g.type, f.type);
	assert_int_equal(g.codec, f.codec);
	assert_int_equal(g.flags, f.flags);
	assert_int_equal(g.shuffle, f.shuffle);
	assert_int_equal(g.map, f.map);
	assert_int_equal(g.attempt, f.attempt);
	assert_int_equal(g.partition, f.partition);
	assert_int_equal(g.seq, f.seq);
	assert_int_equal(g.raw_len, f.raw_len);
	assert_int_equal(g.payload_len, f.payload_len);
	assert_int_equal(g.nrec, f.nrec);
	assert_int_equal(g.crc, f.crc);
	assert_int_equal(frame_check(buf, &g), 0);

	/* Zero-length payload: a header alone is a valid frame. */
	struct ushi_frame e = {.type = USHI_FRAME_DATA}, h;
	frame_encode(buf, &e);
	assert_int_equal(e.crc, ~ref_crc32c(0xffffffffu, buf, 44));
	assert_int_equal(frame_decode(buf, &h), 0);
	assert_int_equal(frame_check(buf, &h), 0);
	assert_int_equal(ush_frame_size(0), USH_FRAME_HDR_SIZE);
	assert_int_equal(ush_frame_size(12345), USH_FRAME_HDR_SIZE + 12345);
}

static void crc_reference_is_crc32c(void **state)
{
	(void)state;
	/* The standard check value of CRC-32C. */
	assert_int_equal(~ref_crc32c(0xffffffffu, (const uint8_t *)"123456789",
				     9),
			 0xe3069283u);
}

/* Decodes and checks a frame in one step, as a reader does. */
static int decode_check(const uint8_t *buf)
{
	struct ushi_frame f;
	int ret = frame_decode(buf, &f);
	return ret ? ret : frame_check(buf, &f);
}

/* Every single-bit flip in header or payload is caught. */
static void flip_every_bit(struct ushi_frame f, size_t payload)
{
	uint8_t *buf = malloc(USH_FRAME_HDR_SIZE + payload);
	assert_non_null(buf);
	th_fill(buf + USH_FRAME_HDR_SIZE, payload, f.seq);
	frame_encode(buf, &f);
	assert_int_equal(decode_check(buf), 0);
	for (size_t i = 0; i < USH_FRAME_HDR_SIZE + payload; i++)
		for (int bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1u << bit);
			int ret = decode_check(buf);
			buf[i] ^= (uint8_t)(1u << bit);
			if (i == 4) /* version byte */
				assert_int_equal(ret, USH_EVERSION);
			else if (i == 7 && bit == 0 && f.codec)
				/* sealed: a compressed payload's lengths
				 * still agree; the CRC refuses it */
				assert_int_equal(ret, USH_ECRC);
			else if (i < 8) /* magic, type, codec, flags */
				assert_int_equal(ret, USH_ECORRUPT);
			else if (i < 32 || i >= 44) /* ids, seq, CRC, payload */
				assert_int_equal(ret, USH_ECRC);
			else if (ret != USH_ECRC && ret != USH_ECORRUPT)
				fail_msg("byte %zu bit %d: %d", i, bit, ret);
		}
	assert_int_equal(decode_check(buf), 0);
	free(buf);
}

static void frame_bit_flips(void **state)
{
	(void)state;
	struct ushi_frame raw = {.type = USHI_FRAME_DATA, .shuffle = 1,
				.map = 2, .attempt = 3, .partition = 4,
				.seq = 5, .raw_len = 700, .payload_len = 700,
				.nrec = 3};
	flip_every_bit(raw, 700);
	struct ushi_frame z = {.type = USHI_FRAME_DATA, .codec = USH_CODEC_ZSTD,
			      .shuffle = 9, .seq = 77, .raw_len = 9000,
			      .payload_len = 512, .nrec = 100};
	flip_every_bit(z, 512);
	struct ushi_frame empty = {.type = USHI_FRAME_DATA, .seq = 1};
	flip_every_bit(empty, 0);
}

/* Encodes f (valid or not) and returns frame_decode's verdict. The
 * lengths are patched in afterwards: encoding CRCs payload_len bytes. */
static int decode_of(struct ushi_frame f)
{
	uint8_t buf[USH_FRAME_HDR_SIZE];
	struct ushi_frame g = f;
	g.payload_len = 0;
	frame_encode(buf, &g);
	put_le32(buf + 32, f.raw_len);
	put_le32(buf + 36, f.payload_len);
	put_le32(buf + 40, f.nrec);
	return frame_decode(buf, &g);
}

static void frame_rejects_bad_headers(void **state)
{
	(void)state;
	const struct ushi_frame ok = {.type = USHI_FRAME_DATA, .raw_len = 64,
				     .payload_len = 64, .nrec = 2};
	struct ushi_frame f;
	uint8_t buf[USH_FRAME_HDR_SIZE], saved;
	assert_int_equal(decode_of(ok), 0);

	/* Magic: each byte, and all zero. */
	f = ok;
	frame_encode(buf, &f);
	for (int i = 0; i < 4; i++) {
		saved = buf[i];
		buf[i] = (uint8_t)~saved;
		assert_int_equal(frame_decode(buf, &f), USH_ECORRUPT);
		buf[i] = saved;
	}
	memset(buf, 0, 4);
	assert_int_equal(frame_decode(buf, &f), USH_ECORRUPT);
	/* Version: older and newer. */
	frame_encode(buf, &f);
	buf[4] = 0;
	assert_int_equal(frame_decode(buf, &f), USH_EVERSION);
	buf[4] = 2;
	assert_int_equal(frame_decode(buf, &f), USH_EVERSION);
	buf[4] = 255;
	assert_int_equal(frame_decode(buf, &f), USH_EVERSION);

	f = ok;
	f.type = 0;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.type = 2;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.type = 255;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f = ok;
	f.codec = 3;
	f.payload_len = 10;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.codec = 255;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f = ok;
	f.flags = 1;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.flags = 0x80;
	assert_int_equal(decode_of(f), USH_ECORRUPT);

	/* Lengths: the largest batch is accepted, one byte more is not. */
	f = ok;
	f.raw_len = f.payload_len = USH_RECORD_MAX + USH_RECORD_HDR_SIZE;
	assert_int_equal(decode_of(f), 0);
	f.raw_len = f.payload_len = USH_RECORD_MAX + USH_RECORD_HDR_SIZE + 1;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.raw_len = f.payload_len = UINT32_MAX;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	/* A compressed payload longer than the batch it decodes to. */
	f = ok;
	f.codec = USH_CODEC_LZ4;
	f.payload_len = 65;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.payload_len = UINT32_MAX;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	/* Compressed but not smaller: a writer stores that raw. */
	f.payload_len = 64;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.payload_len = 63;
	assert_int_equal(decode_of(f), 0);
	/* Uncompressed: payload and batch lengths agree. */
	f = ok;
	f.payload_len = 63;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.payload_len = 65;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	/* More records than 4-byte prefixes fit. */
	f = ok;
	f.nrec = 16;
	assert_int_equal(decode_of(f), 0);
	f.nrec = 17;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f.nrec = UINT32_MAX;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
	f = ok;
	f.raw_len = f.payload_len = 0;
	f.nrec = 1;
	assert_int_equal(decode_of(f), USH_ECORRUPT);
}

static void records_iterate(void **state)
{
	(void)state;
	uint8_t b[64];
	size_t n = 0, off = 0, len;
	const void *rec;
	n += ush_record_put(b + n, "abc", 3);
	n += ush_record_put(b + n, "", 0);
	n += ush_record_put(b + n, "0123456789", 10);
	assert_int_equal(n, 3 * USH_RECORD_HDR_SIZE + 13);
	assert_int_equal(records_next(b, n, &off, &rec, &len), 1);
	assert_int_equal(len, 3);
	assert_memory_equal(rec, "abc", 3);
	assert_int_equal(records_next(b, n, &off, &rec, &len), 1);
	assert_int_equal(len, 0);
	assert_int_equal(records_next(b, n, &off, &rec, &len), 1);
	assert_int_equal(len, 10);
	assert_memory_equal(rec, "0123456789", 10);
	assert_int_equal(off, n);
	assert_int_equal(records_next(b, n, &off, &rec, &len), 0);

	/* A prefix cut short, a length past the end. */
	for (size_t cut = 1; cut < n; cut++) {
		if (cut == 7 || cut == 11)
			continue; /* record boundaries */
		size_t o = 0;
		int ret;
		while ((ret = records_next(b, cut, &o, &rec, &len)) == 1)
			;
		assert_int_equal(ret, USH_ECORRUPT);
	}
	put_le32(b, UINT32_MAX);
	off = 0;
	assert_int_equal(records_next(b, n, &off, &rec, &len), USH_ECORRUPT);
	assert_int_equal(off, 0);
}

/* ------------------------------------------------ exact size on disk */

enum mode { M_COPY, M_SWAP, M_WRITE };
static const char *const mode_name[] = {"copy", "swap", "write"};

/* Builds a batch of exactly len bytes (0, or 4 and more): records of
 * text (compressible) or one record of random bytes. */
static uint32_t make_batch(uint8_t *b, size_t len, int random, uint64_t seed)
{
	uint32_t nrec = 0;
	if (!len)
		return 0;
	if (random) {
		uint8_t *tmp = malloc(len);
		assert_non_null(tmp);
		th_fill(tmp, len - USH_RECORD_HDR_SIZE, seed);
		ush_record_put(b, tmp, (uint32_t)(len - USH_RECORD_HDR_SIZE));
		free(tmp);
		return 1;
	}
	size_t off = 0;
	char rec[256];
	while (off < len) {
		size_t rem = len - off;
		size_t rl = rem - USH_RECORD_HDR_SIZE > 200
				    ? 96
				    : rem - USH_RECORD_HDR_SIZE;
		int n = snprintf(rec, sizeof(rec), "key=%08u value=%u ",
				 nrec, nrec * 7 % 13);
		for (size_t i = (size_t)n; i < rl; i++)
			rec[i] = (char)('a' + i % 26);
		off += ush_record_put(b + off, rec, (uint32_t)rl);
		nrec++;
	}
	assert_int_equal(off, len);
	return nrec;
}

struct codec_cfg {
	enum ush_codec codec;
	int level;
};

/* Writes one batch through a real writer and checks the data file, byte
 * for byte, against ush_frame_size_of(). */
static void exact_case(ush_ring *ring, const char *dir, uint32_t shuffle,
		       struct codec_cfg cc, const uint8_t *batch, size_t len,
		       uint32_t nrec, int random, enum mode mode)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = shuffle,
		.partitions = 1, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 0};
	struct ush_writer_stats st;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	if (mode == M_COPY) {
		th_ok(ush_writer_copy(w, 0, batch, len, nrec));
	} else if (mode == M_SWAP) {
		void *buf;
		size_t cap;
		th_ok(ush_writer_acquire(w, &buf, &cap));
		assert_true(cap >= len);
		memcpy(buf, batch, len);
		th_ok(ush_writer_swap(w, 0, &buf, len, nrec));
		th_ok(ush_writer_release(w, buf));
	} else {
		size_t off = 0, rl;
		const void *rec;
		while (records_next(batch, len, &off, &rec, &rl) == 1)
			th_ok(ush_writer_write(w, 0, rec, rl));
	}
	struct ush_status status;
	th_ok(th_commit(w, NULL, &status));
	ush_writer_stats(w, &st);
	ush_writer_free(w);

	long want = ush_frame_size_of(cc.codec, cc.level, batch, len);
	assert_true(want >= (long)USH_FRAME_HDR_SIZE);
	char path[PATH_MAX];
	spill_data(path, sizeof(path), dir, shuffle, 0, 0);
	size_t size;
	uint8_t *file = read_file(path, &size);
	if (size != (size_t)want)
		fail_msg("%s level %d, %zu-byte %s batch by %s: file %zu "
			 "bytes, ush_frame_size_of %ld",
			 ush_codec_name(cc.codec), cc.level, len,
			 random ? "random" : "text", mode_name[mode], size,
			 want);
	bool shrunk = (size_t)want < USH_FRAME_HDR_SIZE + len;
	if (cc.codec == USH_CODEC_NONE || random || len < 4)
		assert_int_equal(size, USH_FRAME_HDR_SIZE + len);
	else if (len >= 4095) /* text this long always compresses */
		assert_true(shrunk);
	assert_int_equal(st.batches, 1);
	assert_int_equal(st.raw_bytes, len);
	assert_int_equal(st.frame_bytes, size);
	assert_int_equal(st.stored_bytes, size);
	assert_int_equal(st.stored_raw,
			 cc.codec != USH_CODEC_NONE && len && !shrunk);

	/* The one frame on disk says what it holds. */
	struct ushi_frame f;
	assert_int_equal(frame_decode(file, &f), 0);
	assert_int_equal(frame_check(file, &f), 0);
	assert_int_equal(f.codec, shrunk ? cc.codec : USH_CODEC_NONE);
	assert_int_equal(f.raw_len, len);
	assert_int_equal(f.payload_len, size - USH_FRAME_HDR_SIZE);
	assert_int_equal(f.nrec, nrec);
	assert_int_equal(f.shuffle, shuffle);
	assert_int_equal(f.seq, 0);
	if (!shrunk)
		assert_memory_equal(file + USH_FRAME_HDR_SIZE, batch, len);
	free(file);

	/* The batch reads back to the same records. */
	ush_reader *r;
	const void *got, *rec;
	size_t glen, rl, off = 0;
	th_ok(th_reader_open(&r, &status, 1, 0, 0));
	while (records_next(batch, len, &off, &rec, &rl) == 1) {
		assert_int_equal(ush_reader_next(r, &got, &glen), 1);
		assert_int_equal(glen, rl);
		assert_memory_equal(got, rec, rl);
	}
	assert_int_equal(ush_reader_next(r, &got, &glen), 0);
	ush_reader_free(r);
	th_status_free(&status);
}

/* Every size, content and hand-off on one ring (codec, push size). */
static void exact_ring(struct codec_cfg cc, size_t push, const char *dir,
		       uint32_t *shuffle, uint8_t *batch)
{
	/* The 128 KiB ring adds the sizes a 64 KiB one cannot hold; push
	 * minus the header fills a buffer exactly; 4 bytes are one empty
	 * record, the smallest batch a hand-off accepts but none. */
	const size_t lens[] = {0, 4, 4095, 4096, 65536,
			       push - USH_FRAME_HDR_SIZE};
	struct ush_ring_opts o;
	struct ush_ring_info info;
	ush_ring *ring;
	ush_ring_opts_init(&o);
	o.pool_bytes = 8 * push;
	o.push_size = push;
	o.codec = cc.codec;
	o.level = cc.level;
	th_ok(ush_ring_create(&ring, &o));
	for (size_t li = 0; li < ARRAY_SIZE(lens); li++) {
		size_t len = lens[li];
		if (len > push - USH_FRAME_HDR_SIZE ||
		    (push > 64 * KiB && len < 65536))
			continue;
		for (int random = 0; random < 2; random++)
			for (int m = M_COPY; m <= M_WRITE; m++) {
				/* write() takes records: 4 bytes at least */
				if (m == M_WRITE && len < 4)
					continue;
				uint32_t nrec = make_batch(batch, len, random,
							   *shuffle);
				exact_case(ring, dir, (*shuffle)++, cc, batch,
					   len, nrec, random, (enum mode)m);
			}
	}
	ush_ring_info(ring, &info);
	assert_int_equal(info.pool_idle_bytes, 8 * push);
	ush_ring_free(ring);
}

static void frame_size_exact(void **state)
{
	(void)state;
	static const struct codec_cfg codecs[] = {
		{USH_CODEC_NONE, 0}, {USH_CODEC_LZ4, 1}, {USH_CODEC_LZ4, 8},
		{USH_CODEC_ZSTD, 1}, {USH_CODEC_ZSTD, 5},
	};
	const char *dir = th_tmpdir("frame-size");
	uint8_t *batch = malloc(128 * KiB);
	uint32_t shuffle = 0;
	assert_non_null(batch);
	for (size_t c = 0; c < ARRAY_SIZE(codecs); c++) {
		exact_ring(codecs[c], 64 * KiB, dir, &shuffle, batch);
		exact_ring(codecs[c], 128 * KiB, dir, &shuffle, batch);
	}
	/* 5 codecs x (5 + 2 sizes) x 2 contents x 3 hand-offs, less
	 * write() of the empty batch. */
	assert_int_equal(shuffle, 5 * (7 * 2 * 3 - 2));
	free(batch);
	th_rmrf(dir);
}

static void frame_size_of_bounds(void **state)
{
	(void)state;
	uint8_t b[4096];
	memset(b, 'x', sizeof(b));
	assert_int_equal(ush_frame_size_of(USH_CODEC_NONE, 0, b, 4096),
			 USH_FRAME_HDR_SIZE + 4096);
	assert_int_equal(ush_frame_size_of(USH_CODEC_LZ4, 1, b, 0),
			 USH_FRAME_HDR_SIZE);
	assert_int_equal(ush_frame_size_of(USH_CODEC_ZSTD, 1, b, 1),
			 USH_FRAME_HDR_SIZE + 1);
	long z = ush_frame_size_of(USH_CODEC_ZSTD, 1, b, 4096);
	assert_true(z > (long)USH_FRAME_HDR_SIZE);
	assert_true(z < (long)USH_FRAME_HDR_SIZE + 4096);
	assert_int_equal(ush_frame_size_of((enum ush_codec)3, 0, b, 10),
			 -EINVAL);
	assert_int_equal(ush_frame_size_of(USH_CODEC_NONE, 0, b,
					   (size_t)USH_RECORD_MAX +
						   USH_RECORD_HDR_SIZE + 1),
			 -EINVAL);
}

/*
 * A partition's frames reach the disk in batch-sequence order, and its
 * records come back in the order written, when a record above the push
 * size (sent alone) follows a full batch still waiting in the queue.
 */
static void partition_order_with_big_record(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("frame-order");
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, NULL));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 5,
		.partitions = 2, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 0};
	ush_writer *w;
	enum { SMALL = 1000, BIG = 100000, N = 150 };
	uint8_t *rec = malloc(BIG);
	size_t lens[N];
	assert_non_null(rec);
	th_ok(ush_writer_open(&w, ring, &wo));
	/* 70 records fill one 64 KiB batch and hand it off; the big one
	 * follows while that batch is queued; more small ones after. */
	for (int i = 0; i < N; i++) {
		lens[i] = i == 70 || i == 71 || i == 140 ? BIG : SMALL;
		th_fill(rec, lens[i], (uint64_t)i);
		th_ok(ush_writer_write(w, 1, rec, lens[i]));
		th_ok(ush_writer_write(w, 0, "x", 1));
	}
	struct ush_status status;
	th_ok(th_commit(w, NULL, &status));
	ush_writer_free(w);
	ush_ring_free(ring);

	/* Sequence numbers rise in file order, per partition. */
	char path[PATH_MAX];
	size_t size, off = 0;
	uint64_t next[2] = {0, 0};
	spill_data(path, sizeof(path), dir, 5, 0, 0);
	uint8_t *file = read_file(path, &size);
	while (off < size) {
		struct ushi_frame f;
		assert_true(size - off >= USH_FRAME_HDR_SIZE);
		assert_int_equal(frame_decode(file + off, &f), 0);
		assert_int_equal(frame_check(file + off, &f), 0);
		assert_true(f.partition < 2);
		assert_int_equal(f.seq, next[f.partition]);
		next[f.partition]++;
		off += ush_frame_size(f.payload_len);
	}
	assert_int_equal(off, size);
	free(file);

	ush_reader *r;
	const void *got;
	size_t len;
	th_ok(th_reader_open(&r, &status, 1, 1, 0));
	for (int i = 0; i < N; i++) {
		int ret = ush_reader_next(r, &got, &len);
		if (ret != 1)
			fail_msg("record %d: %d %s", i, ret, ush_last_error());
		if (len != lens[i] || !th_check(got, len, (uint64_t)i))
			fail_msg("record %d: %zu bytes, expected %zu (%s)", i,
				 len, lens[i],
				 len == lens[i] ? "content differs"
						: "out of order or lost");
	}
	assert_int_equal(ush_reader_next(r, &got, &len), 0);
	ush_reader_free(r);
	th_status_free(&status);
	free(rec);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(crc_reference_is_crc32c),
		cmocka_unit_test(frame_header_round_trip),
		cmocka_unit_test(frame_bit_flips),
		cmocka_unit_test(frame_rejects_bad_headers),
		cmocka_unit_test(records_iterate),
		cmocka_unit_test(frame_size_of_bounds),
		cmocka_unit_test(frame_size_exact),
		cmocka_unit_test(partition_order_with_big_record),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
