/*
 * kill -9 at every step of a commit (docs/design.md, "Group commit"),
 * against real ushuffled processes with one thread: maps 0 and 1 of a
 * shuffle commit, and the worker kills itself (USHUFFLED_TEST_CRASH,
 * src/worker/crash.h) when map 2's commit reaches the step:
 *
 *   issued   its data written and its syncs started, its record not yet
 *            queued: after the restart map 2 is not committed;
 *   written  its record written to the commit log, not synced;
 *   logged   its record synced, not handed back to the thread;
 *   data     the thread saw its data synced (the record may or may not
 *            be back);
 *   acked    both durable, the ACK not sent.
 *
 * After each restart the acknowledged maps 0 and 1 read back whole,
 * map 2 attempt 0 is either committed (a new writer of it is refused
 * with USH_ECOMMITTED) or absent (a new writer of it opens), as the
 * step says, and the worker goes on committing: map 2 attempt 1 reads
 * back whole beside maps 0 and 1; after another restart all of it holds
 * again, map 2 attempt 0 included. A kill -9 keeps the page cache, so a record written
 * after its data always finds it: the "power loss" cases then cut what
 * a host crash could have lost since the data was not yet synced (the
 * index and log after map 1, all of map 2's entries or half of them, or
 * a flipped byte in a frame of map 2) before the restart: its durable
 * record must then read as not committed, the worker saying why, never
 * as a committed attempt with missing or damaged frames.
 *
 * USH_TEST_FILTER=name runs one test.
 */
#include "net_helpers.h"

#include <sys/stat.h>

#define SHUFFLE 5
#define PARTS 4
#define RECORDS 400

struct crash {
	struct th_worker w;
	struct th_job j;
	char errlog[600];
	uint64_t idx_after_1, log_after_1; /* t0's sizes once map 1 acked */
};

static uint64_t size_of(const struct crash *c, const char *name)
{
	char path[700];
	struct stat st;
	snprintf(path, sizeof(path), "%s/s%u/%s", c->w.dir, SHUFFLE, name);
	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

static void cut(const struct crash *c, const char *name, uint64_t size)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/s%u/%s", c->w.dir, SHUFFLE, name);
	assert_int_equal(truncate(path, (off_t)size), 0);
}

/* A worker that dies when map 2's commit reaches step; maps 0 and 1
 * committed, map 2's push failed. */
static void crash_at(struct crash *c, const char *step)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->w.dir, sizeof(c->w.dir), "%s", th_tmpdir("cmcrash"));
	snprintf(c->errlog, sizeof(c->errlog), "%s.log", c->w.dir);
	unlink(c->errlog);
	c->w.errlog = c->errlog;
	char spec[32];
	snprintf(spec, sizeof(spec), "%s:3", step);
	setenv("USHUFFLED_TEST_CRASH", spec, 1);
	th_worker_spawn(&c->w, "127.0.0.1", 0, 1);
	unsetenv("USHUFFLED_TEST_CRASH");
	c->j = (struct th_job){.workers = c->w.addr, .shuffle = SHUFFLE,
			       .partitions = PARTS, .maps = 3,
			       .records = RECORDS, .timeout_ms = 20000,
			       .statuses = calloc(3, sizeof(struct ush_status))};
	assert_non_null(c->j.statuses);
	th_ok(th_push_map(&c->j, 0, 0, NULL));
	th_ok(th_push_map(&c->j, 1, 0, NULL));
	c->idx_after_1 = size_of(c, "t0.idx");
	c->log_after_1 = size_of(c, "t0.log");
	int ret = th_push_map(&c->j, 2, 0, NULL);
	print_message("map 2's commit at the crash (%s): %s\n", step,
		      ush_err_name(ret));
	assert_int_not_equal(ret, 0);
	/* The worker killed itself: reap it. */
	int status;
	assert_int_equal(waitpid(c->w.pid, &status, 0), c->w.pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	th_track(c->w.pid, 0);
	c->w.pid = 0;
}

/* Whether the restarted worker's log says why a commit was dropped. */
static bool logged_torn(const struct crash *c)
{
	size_t n;
	char *log = th_read_file(c->errlog, &n);
	assert_non_null(log);
	char *text = strndup(log, n); /* th_read_file() adds no NUL */
	bool torn = text && strstr(text, "map 2 attempt 0: its data in") &&
		    strstr(text, "is not whole");
	free(text);
	free(log);
	return torn;
}

/* Whether map 2 attempt 0 is committed: USH_ECOMMITTED when a writer
 * of it is refused at open, 0 when one opens (it is then abandoned). */
static int probe(const struct crash *c)
{
	ush_ring *ring = th_ring(8u << 20, 0);
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = SHUFFLE,
		.map = 2, .attempt = 0, .partitions = PARTS,
		.target = USH_TARGET_NET, .workers = c->w.addr,
		.timeout_ms = 20000};
	ush_writer *w = NULL;
	int ret = ush_writer_open(&w, ring, &wo);
	ush_writer_free(w);
	ush_ring_free(ring);
	print_message("a new writer of map 2 attempt 0: %s\n",
		      ret ? ush_err_name(ret) : "opens");
	return ret;
}

/* After the restart: maps 0 and 1 whole; map 2 committed (want 1),
 * absent (0), or either (-1), and with torn its record dropped, saying
 * why; the worker commits on. */
static void after(struct crash *c, int want, bool torn)
{
	th_worker_restart(&c->w, 1);
	struct th_job two = c->j;
	two.maps = 2;
	th_verify(&two);
	/* Is attempt 0 committed? (Its frames, whole or not, are never
	 * read: no status names them.) */
	int ret = probe(c);
	if (ret == USH_ECOMMITTED) {
		assert_int_not_equal(want, 0);
	} else {
		th_ok(ret);
		assert_int_not_equal(want, 1);
	}
	/* Either way its driver runs the map again, as attempt 1. */
	th_ok(th_push_map(&c->j, 2, 1, NULL));
	th_verify(&c->j);
	th_worker_stop(&c->w);
	/* And so it stays: a torn record dropped at the first restart is
	 * gone from the log (compacted away), not trusted now that later
	 * records' watermarks pass it. */
	th_worker_restart(&c->w, 1);
	th_verify(&c->j);
	assert_int_equal(probe(c), ret);
	th_worker_stop(&c->w);
	if (torn && !logged_torn(c))
		fail_msg("the worker did not say map 2's commit is torn");
	th_job_free(&c->j);
	free(c->j.statuses);
	unlink(c->errlog);
	th_rmrf(c->w.dir);
}

static void crash_issued(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "issued");
	after(&c, 0, false);
}

static void crash_written(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "written");
	after(&c, 1, false);
}

static void crash_logged(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "logged");
	after(&c, 1, false);
}

static void crash_data(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "data");
	after(&c, -1, false);
}

static void crash_acked(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "acked");
	after(&c, 1, false);
}

/* The record durable, none of map 2's data: its index entries and
 * frames are gone. */
static void power_loss_all_data(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "logged");
	cut(&c, "t0.idx", c.idx_after_1);
	cut(&c, "t0.log", c.log_after_1);
	after(&c, 0, true);
}

/* The record durable, half of map 2's index entries. */
static void power_loss_half_the_index(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "written");
	uint64_t full = size_of(&c, "t0.idx");
	uint64_t ents = (full - c.idx_after_1) / 20;
	assert_true(ents >= 2);
	cut(&c, "t0.idx", c.idx_after_1 + ents / 2 * 20);
	after(&c, 0, true);
}

/* The record durable, a byte of one of map 2's frames not what was
 * written (a block of it lost). */
static void power_loss_a_block(void **state)
{
	(void)state;
	struct crash c;
	crash_at(&c, "logged");
	char path[700];
	snprintf(path, sizeof(path), "%s/s%u/t0.log", c.w.dir, SHUFFLE);
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	uint8_t b;
	/* The middle of map 2's bytes: inside one of its frames. */
	off_t at = (off_t)(c.log_after_1 + size_of(&c, "t0.log")) / 2;
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);
	after(&c, 0, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(crash_issued, th_teardown),
		cmocka_unit_test_teardown(crash_written, th_teardown),
		cmocka_unit_test_teardown(crash_logged, th_teardown),
		cmocka_unit_test_teardown(crash_data, th_teardown),
		cmocka_unit_test_teardown(crash_acked, th_teardown),
		cmocka_unit_test_teardown(power_loss_all_data, th_teardown),
		cmocka_unit_test_teardown(power_loss_half_the_index,
					  th_teardown),
		cmocka_unit_test_teardown(power_loss_a_block, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
