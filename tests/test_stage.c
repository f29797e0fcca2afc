/*
 * Staged writes (src/write/stage.c): with a pool share per partition
 * below the packed-frame size, ush_writer_write() stages records in order
 * and frames them by partition when the stage fills. A 4 MiB pool (a
 * stage of 24 push buffers) and 3,000 partitions make it flush many
 * times. Records of every size a stage takes (empty, small, up to the
 * largest that fits a batch, which never fits a pack's leftover room),
 * records above the push size (written alone) and swapped batches are
 * interleaved in the same partitions, and a run of empty records fills
 * the stage's notes before its bytes. Every record of every partition is
 * read back in order, through the ring, the psync engine and with lz4;
 * the null target frames the same writes. Few partitions never stage.
 */
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

#define SHUFFLE 12
#define PUSH (64u << 10)
#define REC_MAX_STAGED (PUSH - 48 - 4) /* the largest record a batch holds */

static uint32_t nparts = 3000;
static uint32_t read_stride = 1; /* reads back every this many partitions */
static enum ush_codec codec = USH_CODEC_NONE;

/* Mostly small records, some of 8 KiB, a few of the largest staged size
 * and very few above the push size; with small_mix, records of 0-40
 * bytes, some of 257-1,000 and a few of the largest staged size: a
 * stage flush scatters records that average at most 64 bytes. */
static bool small_mix;

static uint32_t pick_len(uint64_t *rng)
{
	uint64_t x = th_rand(rng);
	if (x % 4096 == 1) /* each flushes the stage: rare */
		return PUSH + (uint32_t)(x >> 12) % 5000;
	if (small_mix && x % 8192 == 2)
		return REC_MAX_STAGED - (uint32_t)(x >> 13) % 3;
	if (small_mix)
		return x % 64 == 0 ? 257 + (uint32_t)(x >> 8) % 744 :
				     (uint32_t)(x >> 8) % 41;
	switch (x % 64) {
	case 0:
		return REC_MAX_STAGED - (uint32_t)(x >> 8) % 3;
	case 1: case 2: case 3: case 4:
		return 8000 + (uint32_t)(x >> 8) % 300;
	default:
		return (uint32_t)(x >> 8) % 300;
	}
}

/* A writer of map on ring; dir may be NULL. */
static ush_writer *open_map(ush_ring *ring, uint32_t map, uint32_t partitions,
			    enum ush_target target, const char *dir,
			    enum ush_ioengine eng)
{
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.shuffle = SHUFFLE;
	wo.map = map;
	wo.partitions = partitions;
	wo.target = target;
	wo.dir = dir;
	wo.ioengine = eng;
	wo.direct = 1;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	return w;
}

/* A writer of map 0 on a new ring with a 4 MiB pool (the stage: 24
 * push buffers) and the test's codec; dir may be NULL. */
static ush_writer *open_writer(ush_ring **ring, uint32_t partitions,
			       enum ush_target target, const char *dir,
			       enum ush_ioengine eng)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = PUSH;
	ro.pool_bytes = 4u << 20;
	ro.codec = codec;
	th_ok(ush_ring_create(ring, &ro));
	return open_map(*ring, 0, partitions, target, dir, eng);
}

/* Writes map 0 to target; fills parts[] with what each partition holds
 * and returns the writer's stats. */
static struct ush_writer_stats write_map(const char *dir,
					 enum ush_target target,
					 enum ush_ioengine eng,
					 struct th_part *parts,
					 struct ush_status *st,
					 struct ush_part_stats *ps)
{
	ush_ring *ring;
	ush_writer *w = open_writer(&ring, nparts, target, dir, eng);
	uint8_t *rec = malloc(PUSH + 5000);
	assert_non_null(rec);
	void *sbuf;
	size_t scap;
	th_ok(ush_writer_acquire(w, &sbuf, &scap));
	uint64_t rng = 42, seq = 0;
	for (uint32_t i = 0; i < 40000; i++) {
		uint32_t p = (uint32_t)(th_rand(&rng) % nparts);
		if (i % 9973 == 0) { /* flushes the stage too */
			th_swap_batch(w, &sbuf, p, &parts[p], &seq);
			continue;
		}
		uint32_t len = pick_len(&rng);
		uint64_t seed = (uint64_t)p << 32 | seq++;
		th_fill(rec, len, seed);
		th_ok(ush_writer_write(w, p, rec, len));
		th_note(&parts[p], seed, len);
	}
	/* Empty records: the stage's notes fill before its bytes. */
	for (uint32_t i = 0; i < 60000; i++) {
		uint32_t p = i % nparts;
		th_ok(ush_writer_write(w, p, NULL, 0));
		th_note(&parts[p], 0, 0);
	}
	th_ok(ush_writer_release(w, sbuf));
	th_ok(th_commit(w, ps, target == USH_TARGET_NULL ? NULL : st));
	struct ush_writer_stats ws;
	ush_writer_stats(w, &ws);
	ush_writer_free(w);
	ush_ring_free(ring);
	free(rec);
	return ws;
}

static void check_stats(const struct th_part *parts,
			const struct ush_part_stats *ps)
{
	for (uint32_t p = 0; p < nparts; p++) {
		uint64_t bytes = 0;
		for (uint32_t i = 0; i < parts[p].n; i++)
			bytes += parts[p].len[i];
		if (ps[p].records != parts[p].n || ps[p].bytes != bytes)
			fail_msg("partition %u: stats say %llu records, %llu "
				 "bytes; written %u, %llu", p,
				 (unsigned long long)ps[p].records,
				 (unsigned long long)ps[p].bytes, parts[p].n,
				 (unsigned long long)bytes);
	}
}

static void read_back(const struct ush_status *st, const struct th_part *parts)
{
	for (uint32_t p = 0; p < nparts; p += read_stride) {
		ush_reader *r;
		th_ok(th_reader_open(&r, st, 1, p, 0));
		const void *rec;
		size_t len;
		for (uint32_t i = 0; i < parts[p].n; i++) {
			int ret = ush_reader_next(r, &rec, &len);
			th_part_check(&parts[p], p, i, ret, rec, len);
		}
		int ret = ush_reader_next(r, &rec, &len);
		if (ret != 0)
			fail_msg("partition %u: %d after its %u records", p,
				 ret, parts[p].n);
		ush_reader_free(r);
	}
}

/* Writes map 0 and checks its statistics and every record: its stats. */
static struct ush_writer_stats write_check(enum ush_target target,
					   enum ush_ioengine eng)
{
	const char *dir = th_scratch("stage");
	struct th_part *parts = calloc(nparts, sizeof(*parts));
	struct ush_part_stats *ps = calloc(nparts, sizeof(*ps));
	assert_non_null(parts);
	assert_non_null(ps);
	struct ush_status st = {0};
	struct ush_writer_stats ws = write_map(dir, target, eng, parts, &st,
					       ps);
	printf("%u partitions: %llu stage flushes, %llu batches\n", nparts,
	       (unsigned long long)ws.staged_flushes,
	       (unsigned long long)ws.batches);
	check_stats(parts, ps);
	if (target != USH_TARGET_NULL)
		read_back(&st, parts);
	th_status_free(&st);
	th_parts_free(parts, nparts);
	free(ps);
	th_teardown(NULL);
	return ws;
}

static void run(enum ush_target target, enum ush_ioengine eng)
{
	struct ush_writer_stats ws = write_check(target, eng);
	/* The bytes alone fill a 1.5 MiB stage many times, the empty
	 * records its 24,576 notes twice more. */
	assert_true(ws.staged_flushes >= 10);
	assert_int_equal(ws.grows, 0);
	if (codec != USH_CODEC_NONE) {
		assert_true(ws.stored_raw > 0);
		assert_true(ws.frame_bytes < ws.raw_bytes + 48 * ws.batches);
	}
}

static void staged_io_uring(void **state)
{
	(void)state;
	run(USH_TARGET_DISK, USH_IOENGINE_URING);
}

static void staged_psync(void **state)
{
	(void)state;
	run(USH_TARGET_DISK, USH_IOENGINE_PSYNC);
}

/* Gathered, compressed and copied into the packs: the empty records'
 * batches shrink, th_fill's random bytes are stored raw. */
static void staged_lz4(void **state)
{
	(void)state;
	codec = USH_CODEC_LZ4;
	run(USH_TARGET_DISK, USH_IOENGINE_URING);
	codec = USH_CODEC_NONE;
}

static void staged_null(void **state)
{
	(void)state;
	run(USH_TARGET_NULL, USH_IOENGINE_URING);
}

/* A swap flushes the stage only when its partition has records staged
 * (they come first); other partitions' stay staged. */
static void swap_flushes_own_partition(void **state)
{
	(void)state;
	ush_ring *ring;
	ush_writer *w = open_writer(&ring, nparts, USH_TARGET_NULL, NULL,
				    USH_IOENGINE_URING);
	static uint8_t rec[100];
	for (uint32_t p = 1; p <= 100; p++)
		th_ok(ush_writer_write(w, p, rec, sizeof(rec)));
	void *buf;
	size_t cap;
	struct ush_writer_stats ws;
	th_ok(ush_writer_acquire(w, &buf, &cap));
	memset(buf, 0, 4); /* one empty record */
	th_ok(ush_writer_swap(w, 0, &buf, 4, 1));
	ush_writer_stats(w, &ws);
	assert_int_equal(ws.staged_flushes, 0);
	memset(buf, 0, 4);
	th_ok(ush_writer_swap(w, 5, &buf, 4, 1));
	ush_writer_stats(w, &ws);
	assert_int_equal(ws.staged_flushes, 1);
	th_ok(ush_writer_release(w, buf));
	struct ush_part_stats *ps = calloc(nparts, sizeof(*ps));
	assert_non_null(ps);
	th_ok(ush_writer_commit(w, ps));
	assert_int_equal(ps[0].records, 1);
	assert_int_equal(ps[5].records, 2);
	assert_int_equal(ps[6].records, 1);
	free(ps);
	ush_writer_free(w);
	ush_ring_free(ring);
}

/* 64 partitions in the same pool: 64 KiB each, so no stage. */
static void few_parts_unstaged(void **state)
{
	(void)state;
	ush_ring *ring;
	ush_writer *w = open_writer(&ring, 64, USH_TARGET_NULL, NULL,
				    USH_IOENGINE_URING);
	static uint8_t rec[1000];
	for (uint32_t i = 0; i < 20000; i++)
		th_ok(ush_writer_write(w, i % 64, rec, sizeof(rec)));
	th_ok(ush_writer_commit(w, NULL));
	struct ush_writer_stats ws;
	ush_writer_stats(w, &ws);
	assert_int_equal(ws.staged_flushes, 0);
	assert_true(ws.batches > 0);
	ush_writer_free(w);
	ush_ring_free(ring);
}


/* Files left in dir's shuffle directory (an aborted attempt leaves none). */
static unsigned files_left(const char *dir)
{
	char sdir[512];
	snprintf(sdir, sizeof(sdir), "%s/s%u", dir, SHUFFLE);
	DIR *d = opendir(sdir);
	if (!d)
		return 0;
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			print_message("left: %s/%s\n", sdir, e->d_name);
			n++;
		}
	closedir(d);
	return n;
}

/* Records staged, none flushed yet, and a flush half done: abort and
 * free leave no file and no buffer behind. */
static void abort_partly_staged(void **state)
{
	(void)state;
	const char *dir = th_scratch("stageabort");
	static uint8_t rec[300];
	for (int round = 0; round < 3; round++) {
		ush_ring *ring;
		ush_writer *w = open_writer(&ring, nparts, USH_TARGET_DISK, dir,
					    USH_IOENGINE_URING);
		uint32_t n = round == 0 ? 100 : 20000;
		for (uint32_t i = 0; i < n; i++)
			th_ok(ush_writer_write(w, i % nparts, rec, sizeof(rec)));
		struct ush_writer_stats ws;
		ush_writer_stats(w, &ws);
		assert_true(round == 0 ? ws.staged_flushes == 0 :
					 ws.staged_flushes > 0);
		if (round < 2)
			th_ok(ush_writer_abort(w));
		ush_writer_free(w); /* round 2: aborts */
		assert_int_equal(files_left(dir), 0);
		ush_ring_free(ring);
	}
}

static char mounted[512];

static int unmount(void **state)
{
	if (mounted[0])
		umount2(mounted, MNT_DETACH);
	mounted[0] = 0;
	return th_teardown(state);
}

/* The file system fills in the middle of the stage's flushes: a write
 * or the commit fails saying why, nothing hangs, abort leaves nothing. */
static void staged_enospc_engine(const char *dir, enum ush_ioengine eng)
{
	ush_ring *ring;
	ush_writer *w = open_writer(&ring, nparts, USH_TARGET_DISK, dir, eng);
	static uint8_t rec[500];
	int ret = 0;
	for (uint32_t i = 0; !ret && i < 40000; i++)
		ret = ush_writer_write(w, i % nparts, rec, sizeof(rec));
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	print_message("%s: %s: %s\n", eng == USH_IOENGINE_PSYNC ? "psync" :
		      "io_uring", ush_err_name(ret), ush_last_error());
	assert_int_equal(ret, -ENOSPC);
	if (!strstr(ush_last_error(), "No space left on device"))
		fail_msg("the error does not say why: %s", ush_last_error());
	ush_writer_free(w);
	assert_int_equal(files_left(dir), 0);
	ush_ring_free(ring);
}

static void staged_enospc(void **state)
{
	(void)state;
	const char *dir = th_scratch("stagefull");
	if (mount("tmpfs", dir, "tmpfs", 0, "size=2m,mode=0755")) {
		print_message("skipped: cannot mount a 2 MiB tmpfs at %s (%s): "
			      "needs CAP_SYS_ADMIN\n", dir, strerror(errno));
		skip();
	}
	snprintf(mounted, sizeof(mounted), "%s", dir);
	staged_enospc_engine(dir, USH_IOENGINE_URING);
	staged_enospc_engine(dir, USH_IOENGINE_PSYNC);
	codec = USH_CODEC_ZSTD;
	staged_enospc_engine(dir, USH_IOENGINE_URING);
	codec = USH_CODEC_NONE;
}

static void staged_zstd(void **state)
{
	(void)state;
	codec = USH_CODEC_ZSTD;
	run(USH_TARGET_DISK, USH_IOENGINE_URING);
	codec = USH_CODEC_NONE;
}

/* The threshold: a pool share of exactly 16 KiB per partition does not
 * stage, one partition more does; both read back in the order written,
 * swapped batches too (unstaged, a swap used to overtake its partition's
 * open batch). */
static void threshold(void **state)
{
	(void)state;
	uint32_t saved = nparts;
	for (nparts = 256; nparts <= 257; nparts++) {
		struct ush_writer_stats ws = write_check(USH_TARGET_DISK,
							 USH_IOENGINE_URING);
		assert_true(nparts == 256 ? ws.staged_flushes == 0 :
					    ws.staged_flushes > 0);
	}
	nparts = saved;
}

/* 10,000 and 100,000 partitions, small records: a flush's records,
 * scattered in arrival order into its frames (those of at most 256
 * bytes) or gathered (larger ones, partitions of several frames, frames
 * across two buffers), read back record for record, each partition in
 * order (at 100,000 every tenth partition; the stats of all). */
static void staged_many_parts(void **state)
{
	(void)state;
	uint32_t saved = nparts;
	for (nparts = 10000; nparts <= 100000; nparts *= 10) {
		/* Each partition's stats, and 10,000 of them read back:
		 * a reader per partition is the test's cost. */
		read_stride = nparts / 10000;
		small_mix = true;
		struct ush_writer_stats ws = write_check(USH_TARGET_DISK,
							 USH_IOENGINE_URING);
		small_mix = false;
		assert_true(ws.staged_flushes >= 5);
	}
	read_stride = 1;
	nparts = saved;
}

/* Writers of one ring share its pool: four staged writers, interleaved,
 * each stage sized from the whole pool. They left no buffer for a
 * flush's packs ("disk: no pack buffer"); every record reads back, each
 * map's in order. */
static void writers_share_pool(void **state)
{
	(void)state;
	enum { NW = 4, NREC = 120000 };
	const char *dir = th_scratch("stageshare");
	ush_ring *ring;
	ush_writer *w[NW];
	w[0] = open_writer(&ring, nparts, USH_TARGET_DISK, dir,
			   USH_IOENGINE_URING);
	for (uint32_t m = 1; m < NW; m++)
		w[m] = open_map(ring, m, nparts, USH_TARGET_DISK, dir,
				USH_IOENGINE_URING);
	uint32_t rec[50] = {0}; /* map, partition, index in the partition */
	for (uint32_t i = 0; i < NREC; i++) {
		rec[0] = i % NW;
		rec[1] = (i / NW) % nparts;
		rec[2] = i / NW / nparts;
		th_ok(ush_writer_write(w[rec[0]], rec[1], rec, sizeof(rec)));
	}
	struct ush_status st[NW];
	for (uint32_t m = 0; m < NW; m++) {
		struct ush_writer_stats ws;
		ush_writer_stats(w[m], &ws);
		assert_true(ws.staged_flushes > 0);
		th_ok(th_commit(w[m], NULL, &st[m]));
		ush_writer_free(w[m]);
	}
	ush_ring_free(ring);
	for (uint32_t p = 0; p < nparts; p++) {
		ush_reader *r;
		th_ok(th_reader_open(&r, st, NW, p, 0));
		uint32_t next[NW] = {0}, n = 0;
		const void *got;
		size_t len;
		int ret;
		while ((ret = ush_reader_next(r, &got, &len)) == 1) {
			const uint32_t *g = got;
			if (len != sizeof(rec) || g[0] >= NW || g[1] != p ||
			    g[2] != next[g[0]])
				fail_msg("partition %u record %u: %zu bytes, map "
					 "%u partition %u index %u", p, n, len,
					 g[0], g[1], g[2]);
			next[g[0]]++;
			n++;
		}
		assert_int_equal(ret, 0);
		assert_int_equal(n, NREC / nparts);
		ush_reader_free(r);
	}
	th_statuses_free(st, NW);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(staged_io_uring, th_teardown),
		cmocka_unit_test_teardown(staged_psync, th_teardown),
		cmocka_unit_test_teardown(staged_lz4, th_teardown),
		cmocka_unit_test_teardown(staged_null, th_teardown),
		cmocka_unit_test(swap_flushes_own_partition),
		cmocka_unit_test(few_parts_unstaged),
		cmocka_unit_test_teardown(abort_partly_staged, th_teardown),
		cmocka_unit_test_teardown(staged_enospc, unmount),
		cmocka_unit_test_teardown(staged_zstd, th_teardown),
		cmocka_unit_test_teardown(threshold, th_teardown),
		cmocka_unit_test_teardown(staged_many_parts, th_teardown),
		cmocka_unit_test_teardown(writers_share_pool, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
