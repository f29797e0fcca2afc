/*
 * The disk target's runs (docs/format.md §2.2): a map of 8 partitions
 * whose push buffers fill, records of many sizes (empty to above the push
 * size), written with O_DIRECT and buffered, through the ring and the
 * psync engine. The index must show each partition's large frames lying
 * in runs, one after the other in the data file, which the reader reads
 * a run at a time; every record must come back, in order, byte for byte;
 * the file must hold at most 1.2 times the frame bytes, apparent and
 * allocated. A flipped byte in a frame in the middle of a run fails the
 * read there with a CRC error naming that frame's offset, after every
 * record before it came back intact. And a run's empty tail at the end
 * of a buffered file is the file's.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/spill.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHUFFLE 13
#define NPARTS 8
#define NREC 12000 /* records in all, spread over the partitions */
#define PUSH (64u << 10)

/* Mostly 0-3,000 bytes, one in 64 of 10-30 KiB, one in 500 above the
 * push size (a frame of its own, of an odd length). */
static uint32_t rec_len(uint32_t i)
{
	uint64_t h = th_rec_seed(0x5eed, 0, i) * 0x9e3779b97f4a7c15ull >> 20;
	if (h % 500 == 7)
		return PUSH + (uint32_t)(h >> 12) % 9000;
	if (h % 64 == 3)
		return 10000 + (uint32_t)(h >> 12) % 20000;
	return (uint32_t)(h >> 12) % 3001;
}

static uint32_t rec_part(uint32_t i)
{
	return (uint32_t)(th_rec_seed(0x5eed, 0, i) * 0xbf58476d1ce4e5b9ull >> 40) % NPARTS;
}

/* A disk writer of map 0 with push buffers of PUSH bytes, on a ring of
 * its own (*ring). */
static ush_writer *open_writer(const char *dir, uint32_t partitions,
			       int direct, enum ush_ioengine eng,
			       ush_ring **ring)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = PUSH;
	th_ok(ush_ring_create(ring, &ro));
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.shuffle = SHUFFLE;
	wo.partitions = partitions;
	wo.target = USH_TARGET_DISK;
	wo.dir = dir;
	wo.direct = direct;
	wo.ioengine = eng;
	ush_writer *w;
	th_ok(ush_writer_open(&w, *ring, &wo));
	return w;
}

static uint64_t write_map(const char *dir, int direct, enum ush_ioengine eng,
			  struct ush_status *st)
{
	ush_ring *ring;
	ush_writer *w = open_writer(dir, NPARTS, direct, eng, &ring);
	uint8_t *rec = malloc(2 * PUSH);
	assert_non_null(rec);
	for (uint32_t i = 0; i < NREC; i++) {
		th_fill(rec, rec_len(i), th_rec_seed(0x5eed, 0, i));
		th_ok(ush_writer_write(w, rec_part(i), rec, rec_len(i)));
	}
	free(rec);
	th_ok(th_commit(w, NULL, st));
	struct ush_writer_stats ws;
	ush_writer_stats(w, &ws);
	ush_writer_free(w);
	ush_ring_free(ring);
	return ws.frame_bytes;
}

/* Partition p's entries from the map's index, in seq order. */
static size_t entries(const char *dir, uint32_t p, struct spill_entry *e,
		      size_t max)
{
	char path[4096];
	size_t len;
	spill_index(path, sizeof(path), dir, SHUFFLE, 0, 0);
	uint8_t *img = th_read_file(path, &len);
	struct spill_header h;
	struct spill_slot s0, s1;
	th_ok(spill_header_get(img, &h));
	spill_slot_get(img + spill_slot_off(p), &s0);
	spill_slot_get(img + spill_slot_off(p + 1), &s1);
	size_t n = (size_t)(s1.start - s0.start);
	assert_true(n <= max);
	for (size_t i = 0; i < n; i++)
		spill_entry_get(img + spill_entry_off(NPARTS, s0.start + i),
				&e[i]);
	free(img);
	return n;
}

/* Most of each partition's frames follow the one before it in the file
 * (its end, or the 4 KiB padding after it); returns the offset of a
 * frame in the middle of a run of partition 0. */
static uint64_t check_runs(const char *dir, int direct)
{
	static struct spill_entry e[4096];
	uint64_t mid = 0;
	for (uint32_t p = 0; p < NPARTS; p++) {
		size_t n = entries(dir, p, e, 4096), adj = 0, run = 1, most = 1;
		for (size_t i = 1; i < n; i++) {
			uint64_t end = e[i - 1].off + e[i - 1].len;
			if (direct)
				end = (end + 4095) & ~4095ull;
			run = e[i].off == end ? run + 1 : 1;
			adj += run > 1;
			most = run > most ? run : most;
			if (!p && run == 3)
				mid = e[i - 1].off;
		}
		printf("partition %u: %zu frames, %zu after the one before, "
		       "longest run %zu\n", p, n, adj, most);
		if (adj * 3 < n || most < 4)
			fail_msg("partition %u: %zu of %zu frames follow the "
				 "one before, longest run %zu: no runs", p,
				 adj, n, most);
	}
	assert_true(mid > 0);
	return mid;
}

static void check_bytes(const char *dir, uint64_t frame_bytes)
{
	char path[4096];
	struct stat sb;
	spill_data(path, sizeof(path), dir, SHUFFLE, 0, 0);
	assert_int_equal(stat(path, &sb), 0);
	uint64_t alloc = (uint64_t)sb.st_blocks * 512;
	printf("%lld bytes (%llu allocated) for %llu frame bytes\n",
	       (long long)sb.st_size, (unsigned long long)alloc,
	       (unsigned long long)frame_bytes);
	if ((uint64_t)sb.st_size * 10 > frame_bytes * 12 ||
	    alloc * 10 > frame_bytes * 12)
		fail_msg("%lld bytes (%llu allocated) for %llu frame bytes: "
			 "more than 1.2x", (long long)sb.st_size,
			 (unsigned long long)alloc,
			 (unsigned long long)frame_bytes);
}

/* Reads partition p: its records in write order. Returns 0 at its end,
 * or the reader's error after the records before it checked. */
static int read_part(const struct ush_status *st, uint32_t p)
{
	ush_reader *r;
	th_ok(th_reader_open(&r, st, 1, p, 0));
	const void *rec;
	size_t len;
	int ret = 0;
	for (uint32_t i = 0; i < NREC && ret >= 0; i++) {
		if (rec_part(i) != p)
			continue;
		ret = ush_reader_next(r, &rec, &len);
		if (ret == 1 && (len != rec_len(i) ||
				 !th_check(rec, len, th_rec_seed(0x5eed, 0, i))))
			fail_msg("partition %u record %u: wrong bytes", p, i);
		if (ret == 0)
			fail_msg("partition %u: ends before record %u", p, i);
	}
	if (ret >= 0 && (ret = ush_reader_next(r, &rec, &len)) == 1)
		fail_msg("partition %u: a record after its last", p);
	ush_reader_free(r);
	return ret;
}

static void run(int direct, enum ush_ioengine eng)
{
	const char *dir = th_scratch("runs");
	struct ush_status st;
	uint64_t fb = write_map(dir, direct, eng, &st);
	uint64_t mid = check_runs(dir, direct);
	check_bytes(dir, fb);
	for (uint32_t p = 0; p < NPARTS; p++)
		th_ok(read_part(&st, p));
	if (eng == USH_IOENGINE_URING && direct) {
		/* A payload byte of the frame in the middle of a run. */
		char path[4096], want[64];
		spill_data(path, sizeof(path), dir, SHUFFLE, 0, 0);
		int fd = open(path, O_RDWR);
		assert_true(fd >= 0);
		uint8_t c;
		assert_int_equal(pread(fd, &c, 1, (off_t)mid + 100), 1);
		c ^= 0x40;
		assert_int_equal(pwrite(fd, &c, 1, (off_t)mid + 100), 1);
		close(fd);
		assert_int_equal(read_part(&st, 0), USH_ECRC);
		snprintf(want, sizeof(want), "offset %llu partition 0",
			 (unsigned long long)mid);
		if (!strstr(ush_last_error(), want))
			fail_msg("\"%s\" lacks \"%s\"", ush_last_error(), want);
	}
	th_status_free(&st);
}

static void direct_uring(void **state)
{
	(void)state;
	run(1, USH_IOENGINE_URING);
}

static void buffered_uring(void **state)
{
	(void)state;
	run(0, USH_IOENGINE_URING);
}

static void direct_psync(void **state)
{
	(void)state;
	run(1, USH_IOENGINE_PSYNC);
}

/* One partition of 40 whole push buffers, buffered: its runs of 1, 2,
 * 3 and 4 frames leave the last one a frame short at the end of the
 * file, which must still be as long as the index says. */
static void tail_at_end(void **state)
{
	(void)state;
	const char *dir = th_scratch("tail");
	ush_ring *ring;
	ush_writer *w = open_writer(dir, 1, 0, USH_IOENGINE_URING, &ring);
	static uint8_t rec[PUSH];
	for (uint32_t i = 0; i < 40; i++) {
		th_fill(rec, PUSH - 52, i);
		th_ok(ush_writer_write(w, 0, rec, PUSH - 52));
	}
	struct ush_status st;
	th_ok(th_commit(w, NULL, &st));
	ush_writer_free(w);
	ush_ring_free(ring);
	ush_reader *r;
	th_ok(th_reader_open(&r, &st, 1, 0, 0));
	const void *p;
	size_t len;
	for (uint32_t i = 0; i < 40; i++) {
		int ret = ush_reader_next(r, &p, &len);
		if (ret != 1)
			fail_msg("record %u: %d (%s)", i, ret,
				 ret < 0 ? ush_last_error() : "end");
		assert_int_equal(len, PUSH - 52);
		assert_true(th_check(p, len, i));
	}
	assert_int_equal(ush_reader_next(r, &p, &len), 0);
	ush_reader_free(r);
	th_status_free(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(direct_uring, th_teardown),
		cmocka_unit_test_teardown(buffered_uring, th_teardown),
		cmocka_unit_test_teardown(direct_psync, th_teardown),
		cmocka_unit_test_teardown(tail_at_end, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
