/*
 * The disk target on small, real file systems: an ext4 image mounted on a
 * loop device under /var/tmp. O_DIRECT writers preallocate ahead of their
 * data (performance.md §4), and preallocation must never fail a commit
 * that fits: 16 writers of 4 MiB all commit on a 512 MiB file system (64
 * MiB each up front failed half of them with ENOSPC at offset 0), a 1 MiB
 * commit fits a 16 MiB one, and what a writer reserved and did not use is
 * back at its commit and at its abort. Skipped (77, with the reason)
 * where no loop device can be set up (not root, no loop driver).
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SHUFFLE 3
#define PARTS 4
#define REC 4000u

static char img[256], mnt[256], dir[300];

/* Makes an ext4 file system of mib MiB and mounts it at mnt: 0, or -1
 * with the reason printed. */
static int fs_make(unsigned mib)
{
	snprintf(img, sizeof(img), "/var/tmp/ush-enospc-%d.img", (int)getpid());
	snprintf(mnt, sizeof(mnt), "/var/tmp/ush-enospc-%d.mnt", (int)getpid());
	snprintf(dir, sizeof(dir), "%s/spill", mnt);
	int fd = open(img, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)mib << 20)) {
		perror(img);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "mkdir -p %s && mkfs.ext4 -q -F -m 0 %s && "
		 "mount -o loop %s %s", mnt, img, img, mnt);
	if (system(cmd)) {
		printf("'%s' failed\n", cmd);
		rmdir(mnt);
		unlink(img);
		return -1;
	}
	return 0;
}

static void fs_remove(void)
{
	if (umount2(mnt, MNT_DETACH)) /* a failed test may leave files open */
		perror(mnt);
	rmdir(mnt);
	unlink(img);
}

static int setup_512(void **state)
{
	(void)state;
	return fs_make(512);
}

static int setup_16(void **state)
{
	(void)state;
	return fs_make(16);
}

static int teardown(void **state)
{
	(void)state;
	fs_remove();
	return 0;
}

/* Bytes free for an unprivileged writer, every freed block counted. */
static uint64_t fs_free(void)
{
	struct statvfs sv;
	sync();
	assert_int_equal(statvfs(mnt, &sv), 0);
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* A ring of push buffers of push bytes (0: the default, 64 KiB). */
static ush_writer *writer_open(ush_ring *ring, uint32_t map)
{
	struct ush_writer_opts o;
	ush_writer_opts_init(&o);
	o.shuffle = SHUFFLE;
	o.map = map;
	o.partitions = PARTS;
	o.target = USH_TARGET_DISK;
	o.dir = dir;
	o.direct = 1;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &o));
	return w;
}

static void write_rec(ush_writer *w, uint32_t map, uint32_t i)
{
	static uint8_t rec[REC];
	th_fill(rec, REC, (uint64_t)map << 32 | i);
	int ret = ush_writer_write(w, i % PARTS, rec, REC);
	if (ret)
		fail_msg("map %u record %u: %d %s: %s", map, i, ret,
			 ush_err_name(ret), ush_last_error());
}

/* The data file of map holds no block beyond its end (what preallocation
 * reserved and the data did not use), an extent block aside. */
static void no_tail(uint32_t map)
{
	char path[600];
	struct stat sb;
	spill_data(path, sizeof(path), dir, SHUFFLE, map, 0);
	assert_int_equal(stat(path, &sb), 0);
	uint64_t held = (uint64_t)sb.st_blocks * 512;
	if (held > (uint64_t)sb.st_size + 4096)
		fail_msg("%s: %llu bytes long, holds %llu", path,
			 (unsigned long long)sb.st_size,
			 (unsigned long long)held);
}

/* Reads every partition of the n statuses back: the records written. */
static uint64_t read_back(const struct ush_status *st, uint32_t n)
{
	uint64_t total = 0;
	for (uint32_t p = 0; p < PARTS; p++) {
		ush_reader *r;
		th_ok(th_reader_open(&r, st, n, p, 0));
		const void *rec;
		size_t len;
		int ret;
		while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
			assert_int_equal(len, REC);
			total++;
		}
		th_ok(ret);
		ush_reader_free(r);
	}
	return total;
}

/* 16 writers open at once, 4 MiB each, on 512 MiB: 64 MiB, a tenth of
 * the file system, fits; each writer's reservation follows its data. */
static void sixteen_writers(void **state)
{
	(void)state;
	enum { N = 16, RECS = (4u << 20) / REC };
	printf("%s: %llu MiB free\n", mnt,
	       (unsigned long long)(fs_free() >> 20));
	ush_ring *ring[N];
	ush_writer *w[N];
	struct ush_status st[N];
	for (uint32_t k = 0; k < N; k++) {
		ring[k] = th_ring(2u << 20, 0);
		w[k] = writer_open(ring[k], k);
	}
	for (uint32_t i = 0; i < RECS; i++)
		for (uint32_t k = 0; k < N; k++)
			write_rec(w[k], k, i);
	for (uint32_t k = 0; k < N; k++) {
		th_ok(th_commit(w[k], NULL, &st[k]));
		ush_writer_free(w[k]);
		ush_ring_free(ring[k]);
		no_tail(k);
	}
	assert_int_equal(read_back(st, N), (uint64_t)N * RECS);
	th_statuses_free(st, N);
}

/* A 1 MiB commit on 16 MiB; a 2 MiB abort gives back all it held, and a
 * commit after it still fits. */
static void small_fs(void **state)
{
	(void)state;
	enum { RECS = (1u << 20) / REC };
	printf("%s: %llu KiB free\n", mnt,
	       (unsigned long long)(fs_free() >> 10));
	ush_ring *ring = th_ring(2u << 20, 0);
	struct ush_status st[2];
	ush_writer *w = writer_open(ring, 0);
	for (uint32_t i = 0; i < RECS; i++)
		write_rec(w, 0, i);
	th_ok(th_commit(w, NULL, &st[0]));
	ush_writer_free(w);
	no_tail(0);
	uint64_t before = fs_free();
	w = writer_open(ring, 1);
	for (uint32_t i = 0; i < 2 * RECS; i++)
		write_rec(w, 1, i);
	th_ok(ush_writer_abort(w));
	ush_writer_free(w);
	assert_int_equal(fs_free(), before);
	w = writer_open(ring, 1);
	for (uint32_t i = 0; i < RECS; i++)
		write_rec(w, 1, i);
	th_ok(th_commit(w, NULL, &st[1]));
	ush_writer_free(w);
	no_tail(1);
	assert_int_equal(read_back(st, 2), 2 * RECS);
	th_statuses_free(st, 2);
	ush_ring_free(ring);
}

/*
 * A refused fallocate keeps nothing: with 1.5 MiB free, writer A's second
 * 1 MiB step fails (ext4 keeps the part it got) and A goes on appending,
 * 1.25 MiB in all; writer B commits 128 KiB while A is still open, then
 * A commits. B fits only if A gave that part back at once, not at its
 * commit.
 */
static void refused_step_returned(void **state)
{
	(void)state;
	char filler[600];
	snprintf(filler, sizeof(filler), "%s/filler", mnt);
	int fd = open(filler, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(fallocate(fd, 0, 0, (off_t)(fs_free() -
						     (3u << 19))), 0);
	close(fd);
	printf("%s: %llu KiB free\n", mnt,
	       (unsigned long long)(fs_free() >> 10));
	/* Frames of 4 records, 16 KiB: the writer hands them to the sink
	 * 16 at a time, a frame once the next record does not fit, so
	 * these 80 frames (1.25 MiB) all reach the disk before B. */
	enum { A_RECS = 80 * 4 + PARTS, B_RECS = 32 };
	ush_ring *ring = th_ring(2u << 20, 16u << 10);
	ush_writer *a = writer_open(ring, 0);
	for (uint32_t i = 0; i < A_RECS; i++)
		write_rec(a, 0, i);
	ush_ring *ring_b = th_ring(2u << 20, 16u << 10);
	ush_writer *b = writer_open(ring_b, 1);
	for (uint32_t i = 0; i < B_RECS; i++)
		write_rec(b, 1, i);
	struct ush_status st[2];
	th_ok(th_commit(b, NULL, &st[1]));
	ush_writer_free(b);
	ush_ring_free(ring_b);
	th_ok(th_commit(a, NULL, &st[0]));
	ush_writer_free(a);
	ush_ring_free(ring);
	no_tail(0);
	no_tail(1);
	assert_int_equal(read_back(st, 2), A_RECS + B_RECS);
	th_statuses_free(st, 2);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (fs_make(16)) {
		printf("skipped: no ext4 file system on a loop device here "
		       "(needs root, mkfs.ext4 and the loop driver)\n");
		return 77;
	}
	fs_remove();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(sixteen_writers, setup_512,
						teardown),
		cmocka_unit_test_setup_teardown(small_fs, setup_16, teardown),
		cmocka_unit_test_setup_teardown(refused_step_returned, setup_16,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
