/*
 * Retried and competing attempts of one map. Only the committed attempt's
 * records come back, each exactly once: after an aborted attempt, after a
 * crashed one (a child process killed mid-write), when two attempts both
 * try to commit (the second gets USH_ECOMMITTED), and when the index
 * names the same frame twice.
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

static uint64_t rec_seed(uint32_t attempt, uint32_t part, uint32_t i)
{
	return (uint64_t)attempt << 40 | (uint64_t)part << 20 | i;
}

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
	spill_index(index, PATH_MAX, dir, SHUFFLE, MAP);
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
			th_fill(rec, len, rec_seed(attempt, p, i));
			int ret = ush_writer_write(w, p, rec, len);
			if (ret)
				return ret;
		}
	return 0;
}

/* Every partition holds exactly attempt's NREC records, in order, once. */
static void expect_attempt(const char *dir, uint32_t attempt)
{
	static uint8_t want[PUSH + 1024];
	for (uint32_t p = 0; p < NPARTS; p++) {
		struct ush_reader_opts ro = {.size = sizeof(ro), .dir = dir,
			.shuffle = SHUFFLE, .partition = p, .maps = 1};
		ush_reader *r;
		const void *rec;
		size_t len;
		th_ok(ush_reader_open(&r, &ro));
		for (uint32_t i = 0; i < NREC; i++) {
			int ret = ush_reader_next(r, &rec, &len);
			if (ret != 1)
				fail_msg("partition %u record %u: next = %d: "
					 "%s", p, i, ret, ush_last_error());
			uint32_t wlen = rec_len(attempt, p, i);
			th_fill(want, wlen, rec_seed(attempt, p, i));
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

/* The map has no committed output: the reader says so, naming the index. */
static void expect_uncommitted(const char *dir)
{
	char index[PATH_MAX];
	spill_index(index, sizeof(index), dir, SHUFFLE, MAP);
	struct ush_reader_opts ro = {.size = sizeof(ro), .dir = dir,
		.shuffle = SHUFFLE, .partition = 0, .maps = 1};
	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(ush_reader_open(&r, &ro));
	assert_int_equal(ush_reader_next(r, &rec, &len), USH_ENOTCOMMITTED);
	assert_non_null(strstr(ush_last_error(), index));
	ush_reader_free(r);
}

/* Attempt 1 writes everything and commits; the reader gets it alone. */
static void retry_commits(const char *dir)
{
	ush_ring *ring = new_ring();
	ush_writer *w = open_attempt(ring, dir, 1);
	th_ok(write_range(w, 1, 0, NREC));
	th_ok(ush_writer_commit(w, NULL));
	ush_writer_free(w);
	ush_ring_free(ring);
	expect_attempt(dir, 1);
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
	expect_uncommitted(dir);
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
	expect_uncommitted(dir);
	retry_commits(dir);
	/* The stale files stay, ignored. */
	assert_true(exists(data));
	th_rmrf(dir);
}

/* Attempts 0 and 1 write the whole map side by side; `first` commits
 * first and wins; the other's commit fails and its files go. */
static void both_commit(uint32_t first)
{
	const char *dir = th_scratch("attempt-race");
	uint32_t second = 1 - first;
	char data[2][PATH_MAX], tmp[2][PATH_MAX], index[PATH_MAX];
	paths(dir, 0, data[0], tmp[0], index);
	paths(dir, 1, data[1], tmp[1], index);
	ush_ring *ring = new_ring();
	ush_writer *w[2] = {open_attempt(ring, dir, 0),
			    open_attempt(ring, dir, 1)};
	for (uint32_t i = 0; i < NREC; i += 50) {
		th_ok(write_range(w[0], 0, i, i + 50));
		th_ok(write_range(w[1], 1, i, i + 50));
	}
	th_ok(ush_writer_commit(w[first], NULL));
	assert_int_equal(ush_writer_commit(w[second], NULL), USH_ECOMMITTED);
	assert_non_null(strstr(ush_last_error(), index));
	/* The winner stays committed; the loser can only be aborted. */
	assert_int_equal(ush_writer_commit(w[first], NULL), USH_ESTATE);
	th_ok(ush_writer_abort(w[second]));
	assert_false(exists(data[second]));
	assert_false(exists(tmp[second]));
	assert_true(exists(data[first]));
	assert_false(exists(tmp[first]));
	ush_writer_free(w[0]);
	ush_writer_free(w[1]);
	ush_ring_free(ring);
	expect_attempt(dir, first);
	th_rmrf(dir);
}

static void first_of_two_wins(void **state)
{
	(void)state;
	both_commit(0);
}

static void second_of_two_wins(void **state)
{
	(void)state;
	both_commit(1);
}

static void write_index(const char *path, const uint8_t *b, size_t entries)
{
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_true(fd >= 0);
	size_t nb = entries * USHI_INDEX_ENTRY + USHI_INDEX_TRAILER;
	assert_int_equal(write(fd, b, nb), (ssize_t)nb);
	close(fd);
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
	th_ok(write_range(w, 0, 0, NREC));
	th_ok(ush_writer_commit(w, NULL));
	ush_writer_free(w);
	ush_ring_free(ring);

	size_t ilen;
	uint8_t *old = th_read_file(index, &ilen);
	size_t n = (ilen - USHI_INDEX_TRAILER) / USHI_INDEX_ENTRY;
	struct spill_trailer t;
	th_ok(spill_trailer_get(old + n * USHI_INDEX_ENTRY, &t,
				spill_crc(0xffffffffu, old,
					  n * USHI_INDEX_ENTRY)));
	assert_int_equal(t.entries, n);
	/* Partition 3's entries: copy its second one in place, its first
	 * and last ones at the end. */
	const uint32_t part = 3;
	size_t pe[2048], np = 0;
	for (size_t i = 0; i < n && np < 2048; i++) {
		struct spill_entry e;
		spill_entry_get(old + i * USHI_INDEX_ENTRY, &e);
		if (e.partition == part)
			pe[np++] = i;
	}
	assert_true(np >= 3);
	uint8_t *b = malloc(ilen + 3 * USHI_INDEX_ENTRY);
	assert_non_null(b);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(b + m++ * USHI_INDEX_ENTRY, old + i * USHI_INDEX_ENTRY,
		       USHI_INDEX_ENTRY);
		if (i == pe[1])
			memcpy(b + m++ * USHI_INDEX_ENTRY,
			       old + i * USHI_INDEX_ENTRY, USHI_INDEX_ENTRY);
	}
	memcpy(b + m++ * USHI_INDEX_ENTRY, old + pe[0] * USHI_INDEX_ENTRY,
	       USHI_INDEX_ENTRY);
	memcpy(b + m++ * USHI_INDEX_ENTRY, old + pe[np - 1] * USHI_INDEX_ENTRY,
	       USHI_INDEX_ENTRY);
	assert_int_equal(m, n + 3);
	t.entries = m;
	spill_trailer_put(b + m * USHI_INDEX_ENTRY, &t,
			  spill_crc(0xffffffffu, b, m * USHI_INDEX_ENTRY));
	write_index(index, b, m);
	/* Every partition, the doctored one included, reads back whole. */
	expect_attempt(dir, 0);

	/* A copy of the last frame ahead of all others must not make the
	 * reader drop the batches it skipped as "duplicates": refused. */
	memcpy(b, old + pe[np - 1] * USHI_INDEX_ENTRY, USHI_INDEX_ENTRY);
	memcpy(b + USHI_INDEX_ENTRY, old, n * USHI_INDEX_ENTRY);
	m = n + 1;
	t.entries = m;
	spill_trailer_put(b + m * USHI_INDEX_ENTRY, &t,
			  spill_crc(0xffffffffu, b, m * USHI_INDEX_ENTRY));
	write_index(index, b, m);
	struct spill_entry last;
	spill_entry_get(old + pe[np - 1] * USHI_INDEX_ENTRY, &last);
	struct ush_reader_opts ro = {.size = sizeof(ro), .dir = dir,
		.shuffle = SHUFFLE, .partition = part, .maps = 1};
	ush_reader *r;
	const void *rec;
	size_t len;
	char needle[PATH_MAX + 64];
	snprintf(needle, sizeof(needle), "%s offset %llu partition %u", data,
		 (unsigned long long)last.off, part);
	th_ok(ush_reader_open(&r, &ro));
	assert_int_equal(ush_reader_next(r, &rec, &len), USH_ECORRUPT);
	if (!strstr(ush_last_error(), needle))
		fail_msg("\"%s\" lacks \"%s\"", ush_last_error(), needle);
	ush_reader_free(r);
	free(b);
	free(old);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(aborted_attempt, th_teardown),
		cmocka_unit_test_teardown(crashed_attempt, th_teardown),
		cmocka_unit_test_teardown(first_of_two_wins, th_teardown),
		cmocka_unit_test_teardown(second_of_two_wins, th_teardown),
		cmocka_unit_test_teardown(duplicate_batch, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
