/*
 * Retried and competing attempts of one map. The reader reads the attempt
 * whose map status it is given, its records each exactly once: after an
 * aborted attempt, after a crashed one (a child process killed
 * mid-write), when two attempts both commit (each status reads its own
 * attempt; a committed attempt cannot be reopened, an open one cannot be
 * opened twice, and neither refusal touches its files), and when the
 * index names the same frame twice.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHUFFLE 9
#define MAP 0
#define NPARTS 8
#define NREC 300 /* per partition and attempt */
#define PUSH 4096u

static uint32_t rec_len(uint32_t attempt, uint32_t part, uint32_t i)
{
	/* Mostly small, every 50th above the push size (goes out alone). */
	return i % 50 == 49 ? PUSH + 100 * attempt
			    : (attempt * 11 + part * 7 + i * 31) % 600;
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static void paths(const char *dir, uint32_t attempt, char *data, char *tmp,
		  char *index)
{
	spill_data(data, PATH_MAX, dir, SHUFFLE, MAP, attempt);
	snprintf(tmp, PATH_MAX, "%s/s%u/m%u.a%u.index.tmp", dir, SHUFFLE, MAP,
		 attempt);
	spill_index(index, PATH_MAX, dir, SHUFFLE, MAP, attempt);
}

static ush_ring *new_ring(void)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = PUSH;
	ro.pool_bytes = 1u << 20;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	return ring;
}

static ush_writer *open_attempt(ush_ring *ring, const char *dir,
				uint32_t attempt)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = SHUFFLE,
		.map = MAP, .attempt = attempt, .partitions = NPARTS,
		.target = USH_TARGET_DISK, .dir = dir, .direct = 1};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	return w;
}

/* Writes records [from, to) of every partition, partitions interleaved.
 * Returns 0 or the first error (usable from a child without cmocka). */
static int write_range(ush_writer *w, uint32_t attempt, uint32_t from,
		       uint32_t to)
{
	static uint8_t rec[PUSH + 1024];
	for (uint32_t i = from; i < to; i++)
		for (uint32_t p = 0; p < NPARTS; p++) {
			uint32_t len = rec_len(attempt, p, i);
			th_fill(rec, len, th_rec_seed(attempt, p, i));
			int ret = ush_writer_write(w, p, rec, len);
			if (ret)
				return ret;
		}
	return 0;
}

/* Read with st, every partition holds exactly attempt's NREC records, in
 * order, once. */
static void expect_attempt(const struct ush_status *st, uint32_t attempt)
{
	static uint8_t want[PUSH + 1024];
	struct ush_status_info info;
	th_ok(ush_status_info(st, &info));
	assert_int_equal(info.attempt, attempt);
	for (uint32_t p = 0; p < NPARTS; p++) {
		ush_reader *r;
		const void *rec;
		size_t len;
		th_ok(th_reader_open(&r, st, 1, p, 0));
		for (uint32_t i = 0; i < NREC; i++) {
			int ret = ush_reader_next(r, &rec, &len);
			if (ret != 1)
				fail_msg("partition %u record %u: next = %d: "
					 "%s", p, i, ret, ush_last_error());
			uint32_t wlen = rec_len(attempt, p, i);
			th_fill(want, wlen, th_rec_seed(attempt, p, i));
			if (len != wlen || memcmp(rec, want, len))
				fail_msg("partition %u record %u: not attempt "
					 "%u's record (%zu bytes, want %u)", p,
					 i, attempt, len, wlen);
		}
		int ret = ush_reader_next(r, &rec, &len);
		if (ret != 0)
			fail_msg("partition %u: %d after the last record: %s",
				 p, ret, ush_last_error());
		ush_reader_free(r);
	}
}

/* attempt has no committed output: a reader given a status naming it
 * (as a driver could hold) is refused at open, naming the index. */
static void expect_uncommitted(const char *dir, uint32_t attempt)
{
	char index[PATH_MAX];
	spill_index(index, sizeof(index), dir, SHUFFLE, MAP, attempt);
	struct ush_status st;
	th_status_forge(&st, USH_TARGET_DISK, dir, SHUFFLE, MAP, attempt,
			NPARTS);
	ush_reader *r = NULL;
	assert_int_equal(th_reader_open(&r, &st, 1, 0, 0), USH_ENOTCOMMITTED);
	assert_null(r);
	assert_non_null(strstr(ush_last_error(), index));
	th_status_free(&st);
}

/* Attempt 1 writes everything and commits; its status reads it alone. */
static void retry_commits(const char *dir)
{
	ush_ring *ring = new_ring();
	ush_writer *w = open_attempt(ring, dir, 1);
	struct ush_status st;
	th_ok(write_range(w, 1, 0, NREC));
	th_ok(th_commit(w, NULL, &st));
	ush_writer_free(w);
	ush_ring_free(ring);
	expect_attempt(&st, 1);
	th_status_free(&st);
}

static void aborted_attempt(void **state)
{
	(void)state;
	const char *dir = th_scratch("attempt-abort");
	char data[PATH_MAX], tmp[PATH_MAX], index[PATH_MAX];
	paths(dir, 0, data, tmp, index);
	ush_ring *ring = new_ring();
	ush_writer *w = open_attempt(ring, dir, 0);
	th_ok(write_range(w, 0, 0, NREC / 2));
	assert_true(exists(data));
	assert_true(exists(tmp));
	th_ok(ush_writer_abort(w));
	/* Nothing of it is left, and it takes nothing more. */
	assert_false(exists(data));
	assert_false(exists(tmp));
	assert_false(exists(index));
	assert_int_equal(ush_writer_write(w, 0, "x", 1), USH_ESTATE);
	assert_int_equal(ush_writer_commit(w, NULL), USH_ESTATE);
	assert_int_equal(ush_writer_abort(w), USH_ESTATE);
	ush_writer_free(w);
	ush_ring_free(ring);
	expect_uncommitted(dir, 0);
	retry_commits(dir);
	th_rmrf(dir);
}

/* Attempt 0 runs in a child that dies mid-write: no commit, no abort,
 * its files are left behind as a crash leaves them. */
static void crashed_attempt(void **state)
{
	(void)state;
	const char *dir = th_scratch("attempt-crash");
	char data[PATH_MAX], tmp[PATH_MAX], index[PATH_MAX];
	paths(dir, 0, data, tmp, index);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct ush_ring_opts ro;
		ush_ring_opts_init(&ro);
		ro.push_size = PUSH;
		ro.pool_bytes = 1u << 20;
		ush_ring *ring;
		ush_writer *w;
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = SHUFFLE, .map = MAP, .partitions = NPARTS,
			.target = USH_TARGET_DISK, .dir = dir, .direct = 1};
		if (ush_ring_create(&ring, &ro) ||
		    ush_writer_open(&w, ring, &wo) ||
		    write_range(w, 0, 0, NREC / 2))
			_exit(1);
		/* Writes are in flight or done; the process dies here. */
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* The crash left a partial attempt, never a committed index. */
	struct stat st;
	assert_int_equal(stat(data, &st), 0);
	assert_true(st.st_size > 0);
	assert_true(exists(tmp));
	assert_false(exists(index));
	expect_uncommitted(dir, 0);
	retry_commits(dir);
	/* The stale files stay, ignored. */
	assert_true(exists(data));
	th_rmrf(dir);
}

/* Opening attempt's writer fails with err; its files are as they were
 * (while another writer of it runs, its writes may land meanwhile: the
 * file only grows, and its records are checked when read back). */
static void refused_open(ush_ring *ring, const char *dir, uint32_t attempt,
			 int err, const char *needle)
{
	char data[PATH_MAX], tmp[PATH_MAX], index[PATH_MAX];
	paths(dir, attempt, data, tmp, index);
	int had_tmp = exists(tmp), had_index = exists(index);
	size_t dlen, dlen2;
	uint8_t *before = th_read_file(data, &dlen);
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = SHUFFLE,
		.map = MAP, .attempt = attempt, .partitions = NPARTS,
		.target = USH_TARGET_DISK, .dir = dir, .direct = 1};
	ush_writer *w = NULL;
	assert_int_equal(ush_writer_open(&w, ring, &wo), err);
	assert_null(w);
	if (!strstr(ush_last_error(), needle))
		fail_msg("\"%s\" lacks \"%s\"", ush_last_error(), needle);
	uint8_t *after = th_read_file(data, &dlen2);
	if (err == -EBUSY) {
		assert_true(dlen2 >= dlen);
	} else {
		assert_int_equal(dlen, dlen2);
		assert_memory_equal(before, after, dlen);
	}
	assert_int_equal(exists(tmp), had_tmp);
	assert_int_equal(exists(index), had_index);
	free(before);
	free(after);
}

/*
 * Attempts 0 and 1 write the whole map side by side; `first` commits
 * first, then the other: both commit (no attempt wins on its own: the
 * driver chooses one by the status it gives the reader), and each status
 * reads back its own attempt's records. An attempt open in one writer
 * cannot be opened by another (-EBUSY), a committed one cannot be
 * reopened (USH_ECOMMITTED), and neither refusal touches its files.
 */
static void both_commit(uint32_t first)
{
	const char *dir = th_scratch("attempt-race");
	uint32_t second = 1 - first;
	char data[2][PATH_MAX], tmp[2][PATH_MAX], index[2][PATH_MAX];
	paths(dir, 0, data[0], tmp[0], index[0]);
	paths(dir, 1, data[1], tmp[1], index[1]);
	ush_ring *ring = new_ring();
	ush_writer *w[2] = {open_attempt(ring, dir, 0),
			    open_attempt(ring, dir, 1)};
	for (uint32_t i = 0; i < NREC; i += 50) {
		th_ok(write_range(w[0], 0, i, i + 50));
		th_ok(write_range(w[1], 1, i, i + 50));
		if (i == 100) /* mid-write: each attempt has its writer */
			for (uint32_t a = 0; a < 2; a++)
				refused_open(ring, dir, a, -EBUSY, data[a]);
	}
	struct ush_status st[2];
	th_ok(th_commit(w[first], NULL, &st[first]));
	assert_true(exists(index[first]));
	assert_false(exists(index[second]));
	th_ok(th_commit(w[second], NULL, &st[second]));
	/* Committed once: the writers take no second commit. */
	assert_int_equal(ush_writer_commit(w[first], NULL), USH_ESTATE);
	assert_int_equal(ush_writer_commit(w[second], NULL), USH_ESTATE);
	assert_int_equal(ush_writer_abort(w[second]), USH_ESTATE);
	for (uint32_t a = 0; a < 2; a++) {
		assert_true(exists(data[a]));
		assert_false(exists(tmp[a]));
		assert_true(exists(index[a]));
	}
	/* The status stays readable until the writer is freed. */
	struct ush_status borrowed;
	th_ok(ush_writer_status(w[first], &borrowed));
	assert_int_equal(borrowed.len, st[first].len);
	assert_memory_equal(borrowed.data, st[first].data, borrowed.len);
	ush_writer_free(w[0]);
	ush_writer_free(w[1]);
	/* Freed after commit: the files stay. */
	for (uint32_t a = 0; a < 2; a++)
		assert_true(exists(index[a]));
	/* A retry of a committed attempt is refused at open. */
	for (uint32_t a = 0; a < 2; a++)
		refused_open(ring, dir, a, USH_ECOMMITTED, index[a]);
	ush_ring_free(ring);
	expect_attempt(&st[0], 0);
	expect_attempt(&st[1], 1);
	th_statuses_free(st, 2);
	th_rmrf(dir);
}

static void both_commit_in_order(void **state)
{
	(void)state;
	both_commit(0);
}

static void both_commit_reversed(void **state)
{
	(void)state;
	both_commit(1);
}

/*
 * The committed index names one frame twice (a copy of an entry inserted
 * right after it, and copies of a partition's first and last frames at
 * the end), with a valid trailer: the records come back once.
 */
static void duplicate_batch(void **state)
{
	(void)state;
	const char *dir = th_scratch("attempt-dup");
	char data[PATH_MAX], tmp[PATH_MAX], index[PATH_MAX];
	paths(dir, 0, data, tmp, index);
	ush_ring *ring = new_ring();
	ush_writer *w = open_attempt(ring, dir, 0);
	struct ush_status st;
	th_ok(write_range(w, 0, 0, NREC));
	th_ok(th_commit(w, NULL, &st));
	ush_writer_free(w);
	ush_ring_free(ring);

	size_t n;
	struct spill_header t;
	struct spill_entry *old;
	th_index_load(index, &t, &old, &n);
	assert_int_equal(t.entries, n);
	/* Partition 3's entries: copy its second one in place, its first
	 * and last ones at the end of its run. */
	const uint32_t part = 3;
	size_t pe[2048], np = 0;
	for (size_t i = 0; i < n && np < 2048; i++)
		if (old[i].partition == part)
			pe[np++] = i;
	assert_true(np >= 3);
	struct spill_entry *b = malloc((n + 3) * sizeof(*b));
	assert_non_null(b);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		b[m++] = old[i];
		if (i == pe[1])
			b[m++] = old[i];
	}
	b[m++] = old[pe[0]];
	b[m++] = old[pe[np - 1]];
	assert_int_equal(m, n + 3);
	th_index_store(index, &t, b, m);
	/* Every partition, the doctored one included, reads back whole. */
	expect_attempt(&st, 0);

	/* A copy of the last frame ahead of all others must not make the
	 * reader drop the batches it skipped as "duplicates": refused. */
	b[0] = old[pe[np - 1]];
	memcpy(b + 1, old, n * sizeof(*b));
	th_index_store(index, &t, b, n + 1);
	struct spill_entry last = old[pe[np - 1]];
	ush_reader *r;
	const void *rec;
	size_t len;
	char needle[PATH_MAX + 64];
	snprintf(needle, sizeof(needle), "%s offset %llu partition %u", data,
		 (unsigned long long)last.off, part);
	th_ok(th_reader_open(&r, &st, 1, part, 0));
	assert_int_equal(ush_reader_next(r, &rec, &len), USH_ECORRUPT);
	if (!strstr(ush_last_error(), needle))
		fail_msg("\"%s\" lacks \"%s\"", ush_last_error(), needle);
	ush_reader_free(r);
	th_status_free(&st);
	free(b);
	free(old);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(aborted_attempt, th_teardown),
		cmocka_unit_test_teardown(crashed_attempt, th_teardown),
		cmocka_unit_test_teardown(both_commit_in_order, th_teardown),
		cmocka_unit_test_teardown(both_commit_reversed, th_teardown),
		cmocka_unit_test_teardown(duplicate_batch, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
