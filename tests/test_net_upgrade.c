/*
 * A worker directory written by 0.4.5 (commit log format 1: a commit's
 * record logged only once its data was synced, no sum, no watermark)
 * opens in this version and keeps every committed attempt. The fixture
 * tests/fixtures/log-v1/ was made by the ushuffled of commit 26379b5
 * (main before format 2), with the generator below:
 *
 *   ushuffled --listen=127.0.0.1:47391 --dir=D --threads=1 &   (old build,
 *       USHUFFLE_SECRET as the tests set it)
 *   USH_MAKE_FIXTURE=D build-test/tests/test_net_upgrade     (pushes maps
 *       0..2 of shuffle 7, writes D/status.<m>)
 *   kill -TERM the worker; copy D without its lock file
 *
 * The checks: every map reads back whole with the statuses the old
 * worker gave; the log is not rewritten (its records stay version 1,
 * trusted, none checked against its data); a new commit appends version
 * 2 records after them, and everything reads back after another
 * restart, which checks no commit either (the clean stop logged the
 * watermark); a new writer of an old committed attempt is refused.
 */
#include "net_helpers.h"

#include <sys/stat.h>

#define PORT 47391
#define SHUFFLE 7
#define MAPS 3

static struct th_job job(const char *addr, struct ush_status *st,
			 uint32_t maps)
{
	return (struct th_job){.workers = addr, .shuffle = SHUFFLE,
			       .partitions = 4, .maps = maps, .records = 100,
			       .timeout_ms = 20000, .statuses = st};
}

/* The generator (USH_MAKE_FIXTURE=dir): pushes the maps to the worker
 * on PORT, each status into dir/status.<m>. */
static int make_fixture(const char *dir)
{
	char addr[64], path[600];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", PORT);
	struct ush_status st[MAPS] = {{0}};
	struct th_job j = job(addr, st, MAPS);
	for (uint32_t m = 0; m < MAPS; m++) {
		int ret = th_push_map(&j, m, 0, NULL);
		if (ret) {
			fprintf(stderr, "map %u: %s\n", m, ush_last_error());
			return 1;
		}
		snprintf(path, sizeof(path), "%s/status.%u", dir, m);
		th_write_file(path, st[m].data, st[m].len);
	}
	th_job_free(&j);
	return 0;
}

/* Copies the fixture's file rel into dir (made as needed). */
static void copy_in(const char *dir, const char *rel)
{
	char from[700], to[700];
	snprintf(from, sizeof(from), "%s/log-v1/%s", USH_FIXTURES, rel);
	snprintf(to, sizeof(to), "%s/%s", dir, rel);
	char *slash = strrchr(to, '/');
	*slash = 0;
	mkdir(to, 0755);
	*slash = '/';
	size_t n;
	void *b = th_read_file(from, &n);
	assert_non_null(b);
	th_write_file(to, b, n);
	free(b);
}

static uint8_t version_at(const char *dir, size_t rec)
{
	char path[700];
	size_t n;
	snprintf(path, sizeof(path), "%s/commit.log", dir);
	uint8_t *b = th_read_file(path, &n);
	assert_non_null(b);
	assert_true(n >= (rec + 1) * 128);
	uint8_t v = b[rec * 128 + 4];
	free(b);
	return v;
}

static size_t records_in(const char *dir)
{
	char path[700];
	struct stat st;
	snprintf(path, sizeof(path), "%s/commit.log", dir);
	assert_int_equal(stat(path, &st), 0);
	return (size_t)st.st_size / 128;
}

static void v1_directory_opens(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("upgrade"));
	static const char *const files[] = {"commit.log", "ushuffled.id",
					    "s7/t0.log", "s7/t0.idx"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		copy_in(w.dir, files[i]);
	size_t old = records_in(w.dir);
	assert_true(old >= MAPS + 1);
	for (size_t i = 0; i < old; i++)
		assert_int_equal(version_at(w.dir, i), 1);
	char errlog[600];
	snprintf(errlog, sizeof(errlog), "%s.log", w.dir);
	unlink(errlog);
	w.errlog = errlog;
	th_worker_spawn(&w, "127.0.0.1", PORT, 1);

	struct ush_status st[MAPS + 1] = {{0}};
	for (uint32_t m = 0; m < MAPS; m++) {
		char path[600];
		size_t n;
		snprintf(path, sizeof(path), "%s/log-v1/status.%u",
			 USH_FIXTURES, m);
		st[m].data = th_read_file(path, &n);
		assert_non_null(st[m].data);
		st[m].len = n;
	}
	struct th_job j = job(w.addr, st, MAPS);
	th_verify(&j);
	/* Opened as it is: the old records stay, none rewritten. */
	assert_int_equal(records_in(w.dir), old);
	/* Committed there, committed here. */
	struct th_job probe = j;
	probe.records = 0;
	probe.statuses = NULL;
	assert_int_equal(th_push_map(&probe, 1, 0, NULL), USH_ECOMMITTED);

	/* A new commit: version 2 records after the old ones. */
	j.maps = MAPS + 1;
	th_ok(th_push_map(&j, MAPS, 0, NULL));
	th_worker_stop(&w);
	size_t now = records_in(w.dir);
	assert_true(now > old);
	assert_int_equal(version_at(w.dir, 0), 1);
	assert_int_equal(version_at(w.dir, now - 1), 2);
	th_worker_restart(&w, 1);
	th_verify(&j);
	th_worker_stop(&w);

	size_t n;
	char *raw = th_read_file(errlog, &n);
	assert_non_null(raw);
	char *log = strndup(raw, n); /* th_read_file() adds no NUL */
	assert_non_null(log);
	/* Version 1 records are trusted, and the clean stop's watermark
	 * covers map 3's: neither start checked a commit against its
	 * data. */
	unsigned starts = 0;
	for (const char *p = log; (p = strstr(p, "), 0 commits checked "
					     "against their data (0 torn")); p++)
		starts++;
	if (strstr(log, "is not whole") || starts != 2)
		fail_msg("the worker checked or dropped records (%u starts "
			 "checked none):\n%s", starts, log);
	free(log);
	free(raw);
	unlink(errlog);
	th_job_free(&j);
	th_rmrf(w.dir);
}

int main(void)
{
	const char *fixture = getenv("USH_MAKE_FIXTURE");
	if (fixture)
		return make_fixture(fixture);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(v1_directory_opens, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
