/*
 * The worker's commit log (src/worker/wal.c, written by the committer of
 * group.c) on its own: records appended and replayed by the next worker
 * over the same directory, the per-thread logs of earlier versions
 * too; a torn tail cut, a corrupt record skipped (and a
 * commit whose claim was lost still giving its shuffle an owner), a log
 * of another version refused, and compaction into a snapshot. No loop
 * runs: each worker is created (which replays, and starts its
 * committer) and never started; the test logs claims and drops as the
 * loop's threads do, under the worker's lock.
 */
#define _GNU_SOURCE
#include "helpers.h"
#include "worker/app.h"
#include "worker/attempt.h"
#include "worker/files.h"
#include "worker/state.h"
#include "worker/thread.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC 128 /* wal.c's record size (docs/format.md) */

/* What the worker logged, for the checks on its messages. */
static char logged[1 << 16];

static void log_line(void *arg, const char *msg)
{
	(void)arg;
	size_t n = strlen(logged);
	snprintf(logged + n, sizeof(logged) - n, "%s\n", msg);
}

/* A worker over dir, created (its logs replayed) and not started; both
 * threads' commit logs open. */
static ush_worker *wk_open(const char *dir)
{
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	o.dir = dir;
	o.threads = 2;
	o.log_level = 1;
	th_worker_secret(&o);
	ush_worker *wk;
	logged[0] = 0;
	ush_worker_set_log(log_line, NULL);
	th_ok(ush_worker_create(&wk, &o));
	return wk;
}

/* Logs r on thread t's log and applies it, as the loop does. */
static void append(ush_worker *wk, uint8_t type,
		   uint32_t shuffle, uint32_t map, uint32_t attempt,
		   const char *app)
{
	struct wk_rec r = {.type = type, .shuffle = shuffle, .map = map,
			   .attempt = attempt};
	snprintf(r.app, sizeof(r.app), "%s", app);
	pthread_mutex_lock(&wk->lock);
	int ret = wk_rec_log(wk, &r, 1);
	if (!ret)
		ret = wk_rec_apply(wk, &r);
	pthread_mutex_unlock(&wk->lock);
	th_ok(ret);
	if (type == WK_REC_DROP) /* it has no files to remove */
		wk_drop_end(wk, &shuffle, 1);
}

static const char *owner(ush_worker *wk, uint32_t shuffle)
{
	pthread_mutex_lock(&wk->lock);
	const char *app = wk_owner_of(wk, shuffle);
	pthread_mutex_unlock(&wk->lock);
	return app;
}

static off_t size_of(const char *dir, const char *name)
{
	char path[600];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) ? -1 : st.st_size;
}

/* Overwrites (or appends, at the end) n bytes of dir/name at off. */
static void poke(const char *dir, const char *name, off_t off,
		 const void *p, size_t n)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, p, n, off), (ssize_t)n);
	close(fd);
}

/*
 * Claims of shuffles 1 and 2 for apps a and b; commits 1/0/0, 1/1/2 and
 * 2/0/0; the drop of 2: records 0 to 5 of the log.
 */
static ush_worker *history(const char *dir)
{
	ush_worker *wk = wk_open(dir);
	append(wk, WK_REC_CLAIM, 1, 0, 0, "a");
	append(wk, WK_REC_CLAIM, 2, 0, 0, "b");
	append(wk, WK_REC_COMMIT, 1, 0, 0, "a");
	append(wk, WK_REC_COMMIT, 1, 1, 2, "a");
	append(wk, WK_REC_COMMIT, 2, 0, 0, "b");
	append(wk, WK_REC_DROP, 2, 0, 0, "b");
	return wk;
}

static void check_history(ush_worker *wk)
{
	assert_true(wk_committed(wk, 1, 0, 0));
	assert_true(wk_committed(wk, 1, 1, 2));
	assert_false(wk_committed(wk, 1, 1, 0));
	assert_false(wk_committed(wk, 2, 0, 0));
	assert_string_equal(owner(wk, 1), "a");
	assert_null(owner(wk, 2));
}

/* Every record is durable once appended: the next worker replays them
 * in order (the drop after the commit it undoes). */
static void appended_records_replay(void **state)
{
	(void)state;
	const char *dir = th_scratch("wal-replay");
	ush_worker *wk = history(dir);
	check_history(wk);
	ush_worker_free(wk);
	assert_int_equal(size_of(dir, "commit.log"), 6 * REC);
	wk = wk_open(dir);
	check_history(wk);
	assert_non_null(strstr(logged, "replayed 6 commit log records (0 "
				       "corrupt"));
	/* Records appended after a replay sort after the replayed ones. */
	append(wk, WK_REC_CLAIM, 2, 0, 0, "b");
	append(wk, WK_REC_COMMIT, 2, 0, 0, "b");
	append(wk, WK_REC_DROP, 1, 0, 0, "a");
	ush_worker_free(wk);
	wk = wk_open(dir);
	assert_false(wk_committed(wk, 1, 0, 0));
	assert_null(owner(wk, 1));
	assert_true(wk_committed(wk, 2, 0, 0));
	ush_worker_free(wk);
}

/* An earlier version kept a log per thread ("commit.t<N>.log"): they
 * replay like the one log, and go at the first compaction. */
static void thread_logs_of_earlier_versions_replay(void **state)
{
	(void)state;
	const char *dir = th_scratch("wal-legacy");
	ush_worker_free(history(dir));
	char from[600], to[600];
	snprintf(from, sizeof(from), "%s/commit.log", dir);
	snprintf(to, sizeof(to), "%s/commit.t1.log", dir);
	th_ok(rename(from, to));
	ush_worker *wk = wk_open(dir);
	check_history(wk);
	assert_non_null(strstr(logged, "replayed 6 commit log records (0 "
				       "corrupt"));
	append(wk, WK_REC_COMMIT, 1, 4, 0, "a");
	ush_worker_free(wk);
	wk = wk_open(dir);
	check_history(wk);
	assert_true(wk_committed(wk, 1, 4, 0));
	ush_worker_free(wk);
	assert_int_equal(size_of(dir, "commit.t1.log"), 6 * REC);
	assert_int_equal(size_of(dir, "commit.log"), REC);
}

/* A crash in the middle of an append leaves part of a record, never
 * acknowledged: the replay cuts it and keeps every whole record. */
static void torn_tail_is_cut(void **state)
{
	(void)state;
	const char *dir = th_scratch("wal-torn");
	ush_worker_free(history(dir));
	uint8_t part[50];
	memset(part, 0x5a, sizeof(part));
	poke(dir, "commit.log", 6 * REC, part, sizeof(part));
	ush_worker *wk = wk_open(dir);
	check_history(wk);
	assert_non_null(strstr(logged, "cutting 50 bytes of torn tail"));
	assert_int_equal(size_of(dir, "commit.log"), 6 * REC);
	/* The next append starts at a record boundary. */
	append(wk, WK_REC_COMMIT, 1, 3, 0, "a");
	ush_worker_free(wk);
	wk = wk_open(dir);
	check_history(wk);
	assert_true(wk_committed(wk, 1, 3, 0));
	ush_worker_free(wk);
}

/* A corrupt record costs itself only: the replay reports it and skips
 * it. A commit whose shuffle's claim was the corrupt one gives the
 * shuffle the application the commit names. */
static void corrupt_record_is_skipped(void **state)
{
	(void)state;
	const char *dir = th_scratch("wal-corrupt");
	ush_worker_free(history(dir));
	uint8_t x = 0xff;
	poke(dir, "commit.log", 3 * REC + 30, &x, 1); /* commit 1/1/2 */
	poke(dir, "commit.log", 0 * REC + 40, &x, 1); /* claim of 1 */
	ush_worker *wk = wk_open(dir);
	assert_non_null(strstr(logged, "record skipped (CRC32C mismatch)"));
	assert_non_null(strstr(logged, "(2 corrupt, skipped)"));
	assert_true(wk_committed(wk, 1, 0, 0));
	assert_false(wk_committed(wk, 1, 1, 2));
	assert_false(wk_committed(wk, 2, 0, 0));
	assert_string_equal(owner(wk, 1), "a");
	assert_non_null(strstr(logged, "owned by application a, which its "
				       "commit names"));
	ush_worker_free(wk);
}

/* A log in which no record checks (another version's, or not a log) is
 * refused with USH_EVERSION rather than read as empty. */
static void foreign_log_is_refused(void **state)
{
	(void)state;
	const char *dir = th_scratch("wal-foreign");
	uint8_t junk[2 * REC];
	th_fill(junk, sizeof(junk), 3);
	poke(dir, "commit.t0.log", 0, junk, sizeof(junk));
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	o.dir = dir;
	o.threads = 1;
	o.log_level = 0;
	th_worker_secret(&o);
	ush_worker *wk;
	assert_int_equal(ush_worker_create(&wk, &o), USH_EVERSION);
	assert_non_null(strstr(ush_last_error(), "commit.t0.log"));
}

/* Logs that grew past 256 KiB and four times the live state are written
 * as a snapshot and emptied, before the next append: the next worker
 * replays the snapshot and the records after it. */
static void logs_compact_into_a_snapshot(void **state)
{
	(void)state;
	const char *dir = th_scratch("wal-compact");
	ush_worker *wk = wk_open(dir);
	append(wk, WK_REC_CLAIM, 7, 0, 0, "keep");
	append(wk, WK_REC_COMMIT, 7, 5, 1, "keep");
	/* Short-lived shuffles: three records each, none live after. */
	uint32_t s = 100;
	while (!strstr(logged, "commit log compacted")) {
		assert_true(s < 100 + 1000);
		append(wk, WK_REC_CLAIM, s, 0, 0, "gone");
		append(wk, WK_REC_COMMIT, s, 0, 0, "gone");
		append(wk, WK_REC_DROP, s, 0, 0, "gone");
		s++;
	}
	/* The snapshot holds shuffle 7's claim and commit, and what was
	 * live of the last short-lived shuffle when it was taken; the logs
	 * what came after. */
	off_t snap = size_of(dir, "commit.snap");
	off_t logs = size_of(dir, "commit.log");
	assert_true(snap >= 2 * REC && snap <= 4 * REC && snap % REC == 0);
	assert_true(logs <= 3 * REC);
	append(wk, WK_REC_COMMIT, 7, 6, 0, "keep");
	ush_worker_free(wk);
	wk = wk_open(dir);
	assert_true(wk_committed(wk, 7, 5, 1));
	assert_true(wk_committed(wk, 7, 6, 0));
	assert_string_equal(owner(wk, 7), "keep");
	assert_false(wk_committed(wk, s - 1, 0, 0));
	assert_null(owner(wk, s - 1));
	ush_worker_free(wk);
}

/* A commit whose record is logged and not yet applied (its thread's
 * loop has not taken it back) while the log is compacted: the snapshot
 * holds it, so the log need not wait for a moment without commits. */
static void compaction_keeps_a_commit_under_way(void **state)
{
	(void)state;
	const char *dir = th_scratch("wal-compact-busy");
	ush_worker *wk = wk_open(dir);
	append(wk, WK_REC_CLAIM, 9, 0, 0, "keep");
	/* Its data known durable (a commit with data is the net tests'). */
	struct wk_rec r = {.type = WK_REC_COMMIT, .shuffle = 9, .map = 1,
			   .app = "keep", .durable = true};
	pthread_mutex_lock(&wk->lock);
	th_ok(wk_attempt_set(wk, 9, 1, 0, WK_OPEN));
	wk_attempt_find(wk, 9, 1, 0)->logging = true;
	wk_attempt_find(wk, 9, 1, 0)->rec = &r;
	th_ok(wk_group_log(wk, &r, 1));
	pthread_mutex_unlock(&wk->lock);
	for (uint32_t s = 100; !strstr(logged, "commit log compacted"); s++) {
		assert_true(s < 100 + 1000);
		append(wk, WK_REC_CLAIM, s, 0, 0, "gone");
		append(wk, WK_REC_COMMIT, s, 0, 0, "gone");
		append(wk, WK_REC_DROP, s, 0, 0, "gone");
	}
	ush_worker_free(wk);
	wk = wk_open(dir);
	assert_true(wk_committed(wk, 9, 1, 0));
	ush_worker_free(wk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(appended_records_replay, th_teardown),
		cmocka_unit_test_teardown(
			thread_logs_of_earlier_versions_replay, th_teardown),
		cmocka_unit_test_teardown(torn_tail_is_cut, th_teardown),
		cmocka_unit_test_teardown(corrupt_record_is_skipped,
					  th_teardown),
		cmocka_unit_test_teardown(foreign_log_is_refused, th_teardown),
		cmocka_unit_test_teardown(logs_compact_into_a_snapshot,
					  th_teardown),
		cmocka_unit_test_teardown(compaction_keeps_a_commit_under_way,
					  th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
