/*
 * The disk target at 100,000 partitions: two maps write a few records to
 * most partitions (none to every third), interleaved, through the ring
 * and through the psync engine. Every record of every partition is read
 * back and verified, and the data files hold at most 1.2 times the frame
 * bytes: small frames are packed, not padded to 4 KiB each. A third run
 * does the same at 2,000 partitions in a pool too small for the sink to
 * keep packs of its own. It also
 * prints (never asserts) what opening a partition costs here.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/spill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SHUFFLE 11
#define NMAPS 2

/* The run's shape: 100,000 partitions in the default pool; or a pool of
 * 16 push buffers (the sink then holds no pack of its own and borrows
 * whatever the pool has, often nothing) with 2,000 partitions. */
static uint32_t NPARTS = 100000;
static size_t pool_bytes; /* 0: the default */
static uint32_t len_max = 29;

/* Records of partition p in map m: 0, 1 or 2 (and 3 for map 1's
 * multiples of 7), so some partitions are empty in one map only. */
static uint32_t nrec(uint32_t m, uint32_t p)
{
	return (p + m) % 3 + (m == 1 && p % 7 == 0);
}

static uint32_t rec_len(uint32_t m, uint32_t p, uint32_t i)
{
	return 4 + (m * 5 + p * 11 + i * 3) % len_max;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Writes map m; returns its frame bytes, and the status in *st. */
static uint64_t write_map(const char *dir, uint32_t m, enum ush_ioengine eng,
			  struct ush_status *st)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	if (pool_bytes)
		ro.pool_bytes = pool_bytes;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.shuffle = SHUFFLE;
	wo.map = m;
	wo.partitions = NPARTS;
	wo.target = USH_TARGET_DISK;
	wo.dir = dir;
	wo.ioengine = eng;
	wo.direct = 1; /* where padding would cost: buffered on tmpfs */
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	static uint8_t rec[8192];
	/* Round-robin over the partitions, so their frames interleave. */
	for (uint32_t i = 0; i < 4; i++)
		for (uint32_t p = 0; p < NPARTS; p++) {
			if (i >= nrec(m, p))
				continue;
			uint32_t len = rec_len(m, p, i);
			th_fill(rec, len, th_rec_seed(m, p, i));
			th_ok(ush_writer_write(w, p, rec, len));
		}
	th_ok(th_commit(w, NULL, st));
	struct ush_writer_stats ws;
	ush_writer_stats(w, &ws);
	ush_writer_free(w);
	ush_ring_free(ring);
	return ws.frame_bytes;
}

static void check_bytes(const char *dir, uint32_t m, uint64_t frame_bytes)
{
	char path[4096];
	struct stat sb;
	spill_data(path, sizeof(path), dir, SHUFFLE, m, 0);
	assert_int_equal(stat(path, &sb), 0);
	double ratio = (double)sb.st_size / (double)frame_bytes;
	printf("map %u: %lld bytes on disk for %llu frame bytes (%.3fx)\n", m,
	       (long long)sb.st_size, (unsigned long long)frame_bytes, ratio);
	if ((uint64_t)sb.st_size * 10 > frame_bytes * 12)
		fail_msg("map %u: %lld bytes on disk for %llu frame bytes, "
			 "more than 1.2x", m, (long long)sb.st_size,
			 (unsigned long long)frame_bytes);
}

static void read_all_parts(const struct ush_status *st)
{
	static uint8_t want[8192];
	double open_s = 0;
	for (uint32_t p = 0; p < NPARTS; p++) {
		ush_reader *r;
		double t0 = now_s();
		th_ok(th_reader_open(&r, st, NMAPS, p, 0));
		open_s += now_s() - t0;
		const void *rec;
		size_t len;
		for (uint32_t m = 0; m < NMAPS; m++)
			for (uint32_t i = 0; i < nrec(m, p); i++) {
				int ret = ush_reader_next(r, &rec, &len);
				if (ret != 1)
					fail_msg("partition %u map %u record "
						 "%u: %d (%s)", p, m, i, ret,
						 ush_last_error());
				uint32_t wl = rec_len(m, p, i);
				th_fill(want, wl, th_rec_seed(m, p, i));
				if (len != wl || memcmp(rec, want, wl))
					fail_msg("partition %u map %u record "
						 "%u: wrong bytes", p, m, i);
			}
		int ret = ush_reader_next(r, &rec, &len);
		if (ret != 0)
			fail_msg("partition %u: %d after its records (%s)", p,
				 ret, ret < 0 ? ush_last_error() : "extra");
		ush_reader_free(r);
	}
	printf("reader open: %.1f us per partition over %u maps\n",
	       open_s / NPARTS * 1e6, NMAPS);
}

static void run(enum ush_ioengine eng)
{
	const char *dir = th_scratch("scale");
	struct ush_status st[NMAPS];
	for (uint32_t m = 0; m < NMAPS; m++)
		check_bytes(dir, m, write_map(dir, m, eng, &st[m]));
	read_all_parts(st);
	th_statuses_free(st, NMAPS);
}

static void scale_io_uring(void **state)
{
	(void)state;
	run(USH_IOENGINE_URING);
}

static void scale_psync(void **state)
{
	(void)state;
	run(USH_IOENGINE_PSYNC);
}

/* A pool without room for the sink's packs: frames up to 16 KiB,
 * packs borrowed from a pool that the partitions' buffers fill. */
static void small_pool(void **state)
{
	(void)state;
	NPARTS = 2000;
	pool_bytes = 1u << 20;
	len_max = 8000;
	run(USH_IOENGINE_URING);
	NPARTS = 100000;
	pool_bytes = 0;
	len_max = 29;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(scale_io_uring, th_teardown),
		cmocka_unit_test_teardown(scale_psync, th_teardown),
		cmocka_unit_test_teardown(small_pool, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
