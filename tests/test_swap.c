/*
 * Swap hand-off: 1,000 push buffers filled by the caller and swapped. Every
 * swap must return a different buffer of the same capacity, and the disk
 * sink must store every batch intact, in hand-off order, with sequence
 * numbers 0..999. The data file and index are parsed here directly, then
 * read back through ush_reader.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/frame.h"
#include "core/spill.h"
#include "write/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NBATCH 1000
#define SHUFFLE 7
#define MAP 0
#define NPARTS 3
#define PART 1
#define PUSH (64u << 10)

/* Whether dir's file system accepts O_DIRECT (tmpfs does not). */
static int direct_ok(const char *dir)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/.direct-probe", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		close(fd);
		unlink(p);
	}
	return fd >= 0;
}

/*
 * Fills batch i: a 4-byte record holding i, then records whose lengths and
 * bytes derive from (i, j). Every 4th batch is filled to the last byte,
 * a few stay empty, the others stop at a length that depends on i.
 * Returns the batch bytes; *nrec gets the record count.
 */
static size_t fill_batch(uint8_t *buf, size_t cap, uint32_t i, uint32_t *nrec)
{
	*nrec = 0;
	if (i % 250 == 123)
		return 0;
	uint8_t le[4] = {(uint8_t)i, (uint8_t)(i >> 8), (uint8_t)(i >> 16),
			 (uint8_t)(i >> 24)};
	size_t off = ush_record_put(buf, le, 4);
	size_t target = i % 4 == 0 ? cap : cap / 4 * (i % 4) + i % 1009;
	*nrec = 1;
	for (uint32_t j = 1;; j++) {
		size_t len = (i * 31u + j * 17u) % 1500u;
		if (off + USH_RECORD_HDR_SIZE + len > target) {
			/* Full batches: one last record to the last byte. */
			if (i % 4 || target - off < USH_RECORD_HDR_SIZE)
				break;
			len = target - off - USH_RECORD_HDR_SIZE;
		}
		uint8_t *d = buf + off;
		d[0] = (uint8_t)len;
		d[1] = (uint8_t)(len >> 8);
		d[2] = (uint8_t)(len >> 16);
		d[3] = (uint8_t)(len >> 24);
		th_fill(d + USH_RECORD_HDR_SIZE, len, (uint64_t)i << 20 | j);
		off += USH_RECORD_HDR_SIZE + len;
		(*nrec)++;
	}
	return off;
}

/* Sum of record lengths of a batch built by fill_batch. */
static uint64_t batch_rec_bytes(size_t len, uint32_t nrec)
{
	return len - (uint64_t)nrec * USH_RECORD_HDR_SIZE;
}

static void swap_direct(int direct)
{
	const char *dir = th_scratch("swap");
	int padded = direct && direct_ok(dir);
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = PUSH;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = SHUFFLE,
		.map = MAP, .partitions = NPARTS, .target = USH_TARGET_DISK,
		.dir = dir, .direct = direct};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));

	void *buf;
	size_t cap;
	th_ok(ush_writer_acquire(w, &buf, &cap));
	assert_int_equal(cap, PUSH - USH_FRAME_HDR_SIZE);

	/* A refused swap hands nothing over: the caller keeps its buffer. */
	void *same = buf;
	assert_int_equal(ush_writer_swap(w, NPARTS, &buf, 0, 0), -EINVAL);
	assert_ptr_equal(buf, same);
	assert_int_equal(ush_writer_swap(w, PART, &buf, cap + 1, 1), -EINVAL);
	assert_ptr_equal(buf, same);
	/* 2 records need at least 8 bytes of length prefixes. */
	assert_int_equal(ush_writer_swap(w, PART, &buf, 7, 2), -EINVAL);
	assert_ptr_equal(buf, same);

	static size_t lens[NBATCH];
	static uint32_t nrecs[NBATCH];
	uint64_t recs = 0, bytes = 0, raw = 0;
	struct ushi_pool *pool = ring_pool(ring);
	for (uint32_t i = 0; i < NBATCH; i++) {
		lens[i] = fill_batch(buf, cap, i, &nrecs[i]);
		assert_true(lens[i] <= cap);
		void *old = buf;
		th_ok(ush_writer_swap(w, PART, &buf, lens[i], nrecs[i]));
		/* A different buffer, now the caller's, of the same size;
		 * the old one is no longer the caller's. */
		assert_ptr_not_equal(buf, old);
		struct ushi_buf *nb =
			pool_lookup(pool, (uint8_t *)buf - USH_FRAME_HDR_SIZE);
		assert_int_equal(nb->state, BUF_USER);
		assert_int_equal(nb->cap, PUSH);
		size_t oi = (size_t)((uint8_t *)old - USH_FRAME_HDR_SIZE -
				     pool->arena) / USHI_BUF_MIN;
		assert_int_not_equal(pool->descs[oi].state, BUF_USER);
		recs += nrecs[i];
		bytes += batch_rec_bytes(lens[i], nrecs[i]);
		raw += lens[i];
	}
	th_ok(ush_writer_release(w, buf));

	struct ush_part_stats parts[NPARTS];
	struct ush_status status;
	th_ok(th_commit(w, parts, &status));
	assert_int_equal(parts[PART].records, recs);
	assert_int_equal(parts[PART].bytes, bytes);
	assert_int_equal(parts[PART].batches, NBATCH);
	for (uint32_t p = 0; p < NPARTS; p++) {
		if (p == PART)
			continue;
		assert_int_equal(parts[p].records, 0);
		assert_int_equal(parts[p].batches, 0);
	}
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	assert_int_equal(st.batches, NBATCH);
	assert_int_equal(st.records, recs);
	assert_int_equal(st.raw_bytes, raw);
	assert_int_equal(st.frame_bytes, raw + NBATCH * USH_FRAME_HDR_SIZE);
	ush_writer_free(w);
	ush_ring_free(ring);

	/* The committed index: one entry per batch, in hand-off order. */
	char dpath[PATH_MAX], ipath[PATH_MAX], tpath[PATH_MAX];
	spill_data(dpath, sizeof(dpath), dir, SHUFFLE, MAP, 0);
	spill_index(ipath, sizeof(ipath), dir, SHUFFLE, MAP, 0);
	snprintf(tpath, sizeof(tpath), "%s/s%u/m%u.a0.index.tmp", dir, SHUFFLE,
		 MAP);
	assert_int_equal(access(tpath, F_OK), -1);
	size_t nidx, dlen;
	struct spill_header t;
	struct spill_entry *idx;
	th_index_load(ipath, &t, &idx, &nidx);
	uint8_t *data = th_read_file(dpath, &dlen);
	assert_int_equal(nidx, NBATCH);
	assert_int_equal(t.flags, padded ? USHI_INDEX_DIRECT : 0);
	assert_int_equal(t.shuffle, SHUFFLE);
	assert_int_equal(t.map, MAP);
	assert_int_equal(t.attempt, 0);
	assert_int_equal(t.partitions, NPARTS);
	assert_int_equal(t.entries, NBATCH);
	assert_int_equal(t.data_bytes, dlen);
	/* Run tails inside the file (sink_disk.c) are the file's but never
	 * written: at most an eighth of the frames, and alignment. */
	assert_true(st.stored_bytes <= dlen);
	assert_true(dlen - st.stored_bytes <= st.stored_bytes / 8 + USHI_ALIGN);

	uint8_t *want = malloc(PUSH);
	bool *used = calloc(dlen, 1);
	assert_non_null(want);
	assert_non_null(used);
	/* Small frames (spill_packed()) follow each other in packs; a larger
	 * one is written in place, in its partition's run, at an aligned
	 * offset under O_DIRECT. No two frames overlap, and the bytes
	 * between them (padding, run tails) are zeros, never stale pool
	 * bytes. */
	uint64_t last = 0;
	for (uint32_t i = 0; i < NBATCH; i++) {
		const struct spill_entry e = idx[i];
		const uint64_t off = e.off;
		size_t flen = ush_frame_size(lens[i]);
		if (!spill_packed((uint32_t)flen) && padded)
			assert_int_equal(off % USHI_ALIGN, 0);
		assert_int_equal(e.len, flen);
		assert_int_equal(e.partition, PART);
		assert_true(off + flen <= dlen);
		for (uint64_t k = off; k < off + flen; k++) {
			if (used[k])
				fail_msg("batch %u overlaps another at %llu", i,
					 (unsigned long long)k);
			used[k] = true;
		}
		struct ushi_frame f;
		th_ok(frame_decode(data + off, &f));
		th_ok(frame_check(data + off, &f));
		assert_int_equal(f.type, USHI_FRAME_DATA);
		assert_int_equal(f.codec, USH_CODEC_NONE);
		assert_int_equal(f.shuffle, SHUFFLE);
		assert_int_equal(f.map, MAP);
		assert_int_equal(f.attempt, 0);
		assert_int_equal(f.partition, PART);
		assert_int_equal(f.seq, i);
		assert_int_equal(f.raw_len, lens[i]);
		assert_int_equal(f.payload_len, lens[i]);
		assert_int_equal(f.nrec, nrecs[i]);
		uint32_t n;
		size_t len = fill_batch(want, PUSH - USH_FRAME_HDR_SIZE, i, &n);
		assert_int_equal(len, lens[i]);
		assert_memory_equal(data + off + USH_FRAME_HDR_SIZE, want, len);
		if (off + flen > last)
			last = off + flen;
	}
	for (size_t k = 0; k < dlen; k++)
		if (!used[k] && data[k])
			fail_msg("byte %zu between frames is %u", k, data[k]);
	assert_int_equal(padded ? ALIGN_UP(last, USHI_ALIGN) : last, dlen);
	free(used);
	free(idx);
	free(data);

	/* The map status names this attempt and its batches. */
	struct ush_status_info info;
	th_ok(ush_status_info(&status, &info));
	assert_int_equal(info.target, USH_TARGET_DISK);
	assert_int_equal(info.shuffle, SHUFFLE);
	assert_int_equal(info.map, MAP);
	assert_int_equal(info.attempt, 0);
	assert_int_equal(info.partitions, NPARTS);
	assert_int_equal(info.batches, NBATCH);
	assert_int_equal(info.location_len, strlen(dir));

	/* Through the reader: every record of every batch, in order. */
	ush_reader *r;
	const void *rec;
	size_t rlen;
	th_ok(th_reader_open(&r, &status, 1, PART, 0));
	uint64_t got = 0;
	for (uint32_t i = 0; i < NBATCH; i++) {
		uint32_t n;
		size_t blen = fill_batch(want, PUSH - USH_FRAME_HDR_SIZE, i,
					 &n);
		size_t boff = 0;
		const void *wrec;
		size_t wlen;
		while (records_next(want, blen, &boff, &wrec, &wlen) == 1) {
			int ret = ush_reader_next(r, &rec, &rlen);
			if (ret != 1)
				fail_msg("batch %u: next = %d: %s", i, ret,
					 ush_last_error());
			assert_int_equal(rlen, wlen);
			assert_memory_equal(rec, wrec, wlen);
			got++;
		}
	}
	assert_int_equal(ush_reader_next(r, &rec, &rlen), 0);
	assert_int_equal(got, recs);
	ush_reader_free(r);

	/* The other partitions are empty. */
	th_ok(th_reader_open(&r, &status, 1, 0, 0));
	assert_int_equal(ush_reader_next(r, &rec, &rlen), 0);
	ush_reader_free(r);

	th_status_free(&status);
	free(want);
	th_rmrf(dir);
}

static void swap_buffered(void **state)
{
	(void)state;
	swap_direct(0);
}

static void swap_o_direct(void **state)
{
	(void)state;
	swap_direct(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(swap_buffered, th_teardown),
		cmocka_unit_test_teardown(swap_o_direct, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
