/*
 * A worker's shuffles over their lifetime, against real ushuffled
 * processes (issue 10): applications own their shuffles; an application
 * whose heartbeats stop loses them after --app-ttl; one worker per
 * directory and per port; a corrupt commit-log record loses only itself;
 * the log is compacted; what no application owns is swept at start; a
 * log of another version stops the worker instead of being cut.
 */
#include "net_helpers.h"

#include <stdarg.h>
#include <stdbool.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#define PARTS 8

static struct th_worker wk;

static void spawn_with(const char *extra)
{
	wk.extra = extra;
	th_worker_spawn(&wk, "127.0.0.1", 0, 1);
}

static int setup(void **state)
{
	(void)state;
	wk = (struct th_worker){0};
	snprintf(wk.dir, sizeof(wk.dir), "%s", th_tmpdir("life"));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (th_worker_alive(&wk))
		th_worker_stop(&wk);
	th_rmrf(wk.dir);
	return 0;
}

/* Writes map m of shuffle s as app (PARTS partitions, n records), commits
 * and returns a heap copy of the status, or {0} with *ret set. */
static struct ush_status put(const char *app, uint32_t s, uint32_t m,
			     uint32_t n, int *ret)
{
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 4u << 20;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = s, .map = m,
		.partitions = PARTS, .target = USH_TARGET_NET,
		.workers = wk.addr, .app = app};
	ush_writer *w = NULL;
	struct ush_status st = {0};
	uint8_t buf[1024]; /* th_rec: up to 708 bytes */
	*ret = ush_writer_open(&w, ring, &wo);
	for (uint32_t i = 0; !*ret && i < n; i++)
		*ret = ush_writer_write(w, i % PARTS, buf, th_rec(buf, m, i));
	if (!*ret)
		*ret = th_commit(w, NULL, &st);
	ush_writer_free(w);
	ush_ring_free(ring);
	return st;
}

/* Records of partition 0 over the statuses, or a negative error. */
static long count(const struct ush_status *st, uint32_t n)
{
	ush_reader *r;
	int ret = th_reader_open(&r, st, n, 0, 5000);
	if (ret)
		return ret;
	const void *rec;
	size_t len;
	long k = 0;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1)
		k++;
	ush_reader_free(r);
	return ret ? ret : k;
}

static bool exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool exists(const char *fmt, ...)
{
	char path[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	return access(path, F_OK) == 0;
}

/* Another application can neither write, nor read, nor drop a shuffle. */
static void apps_own_their_shuffles(void **state)
{
	(void)state;
	spawn_with(NULL);
	int ret;
	struct ush_status a = put("app-a", 5, 0, 400, &ret);
	th_ok(ret);
	struct ush_status b = put("app-b", 5, 1, 400, &ret);
	assert_int_equal(ret, -EACCES);
	assert_non_null(strstr(ush_last_error(), "another application"));
	assert_null(b.data);
	assert_int_equal(count(&a, 1), 50);
	assert_int_equal(ush_shuffle_drop(wk.addr, "app-b", 5, 5000), -EACCES);
	assert_int_equal(count(&a, 1), 50);
	assert_int_equal(ush_shuffle_drop(wk.addr, "bad app", 5, 5000), -EINVAL);
	th_ok(ush_shuffle_drop(wk.addr, "app-a", 5, 5000));
	assert_int_equal(count(&a, 1), USH_ENOTCOMMITTED);
	assert_false(exists("%s/s5", wk.dir));
	/* Dropped: the id is free for any application again. */
	b = put("app-b", 5, 1, 400, &ret);
	th_ok(ret);
	th_status_free(&a);
	th_status_free(&b);
}

/* An application whose heartbeats stop loses its shuffles after the TTL;
 * one that heartbeats keeps them, across a restart too. */
static void silent_app_expires(void **state)
{
	(void)state;
	spawn_with("--app-ttl=1500");
	int ret;
	struct ush_status live = put("live", 1, 0, 300, &ret);
	th_ok(ret);
	struct ush_status gone = put("gone", 2, 0, 300, &ret);
	th_ok(ret);
	/* Heartbeat "live" until "gone"'s shuffle is swept: no timing is
	 * asserted, only the order of events (30 s at most). */
	for (int i = 0; i < 300 && exists("%s/s2", wk.dir); i++) {
		th_ok(ush_app_heartbeat(wk.addr, "live", 5000));
		usleep(100000);
	}
	assert_false(exists("%s/s2", wk.dir));
	assert_int_equal(count(&gone, 1), USH_ENOTCOMMITTED);
	assert_int_equal(count(&live, 1), 38);
	/* A restart gives every application a full TTL again. */
	th_worker_stop(&wk);
	wk.extra = "--app-ttl=600000";
	th_worker_spawn(&wk, "127.0.0.1", wk.port, 1);
	assert_int_equal(count(&live, 1), 38);
	th_status_free(&live);
	th_status_free(&gone);
}

/* Runs ushuffled with args and returns its exit status; its stderr in
 * err (n bytes). */
static int run_worker(char *err, size_t n, const char *listen, const char *dir)
{
	char path[700];
	snprintf(path, sizeof(path), "%s.err", dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		char l[128], d[700];
		snprintf(l, sizeof(l), "--listen=%s", listen);
		snprintf(d, sizeof(d), "--dir=%s", dir);
		execl(USH_USHUFFLED_PATH, "ushuffled", l, d, "--threads=1",
		      (char *)NULL);
		_exit(127);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	size_t len;
	char *m = th_read_file(path, &len);
	snprintf(err, n, "%.*s", (int)len, m);
	free(m);
	unlink(path);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* One worker per directory and per port, each refusal naming the
 * holder. */
static void one_worker_per_dir_and_port(void **state)
{
	(void)state;
	spawn_with(NULL);
	char err[1024], want[64], other[600];
	snprintf(want, sizeof(want), "pid %d", (int)wk.pid);
	assert_int_equal(run_worker(err, sizeof(err), "127.0.0.1:0", wk.dir),
			 1);
	if (!strstr(err, "in use by another worker") || !strstr(err, want))
		fail_msg("%s", err);
	snprintf(other, sizeof(other), "%s/other", wk.dir);
	assert_int_equal(run_worker(err, sizeof(err), wk.addr, other), 1);
	if (!strstr(err, "in use by") || !strstr(err, want))
		fail_msg("%s", err);
	/* The first one serves on, alone. */
	int ret;
	struct ush_status st = put("app", 3, 0, 80, &ret);
	th_ok(ret);
	assert_int_equal(count(&st, 1), 10);
	th_status_free(&st);
}

/* A flipped byte in one commit-log record loses that record alone, and
 * the worker says so. */
static void corrupt_record_loses_only_itself(void **state)
{
	(void)state;
	char errlog[600];
	snprintf(errlog, sizeof(errlog), "%s.log", wk.dir);
	wk.errlog = errlog;
	spawn_with(NULL);
	int ret;
	struct ush_status st[3];
	for (uint32_t m = 0; m < 3; m++) {
		st[m] = put("app", 4, m, 80, &ret);
		th_ok(ret);
	}
	th_worker_stop(&wk);
	/* Records: the claim, then the three commits, 128 bytes each. */
	char path[700];
	snprintf(path, sizeof(path), "%s/commit.log", wk.dir);
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	uint8_t byte;
	assert_int_equal(pread(fd, &byte, 1, 2 * 128 + 20), 1);
	byte ^= 0x40;
	assert_int_equal(pwrite(fd, &byte, 1, 2 * 128 + 20), 1);
	close(fd);
	th_worker_spawn(&wk, "127.0.0.1", wk.port, 1);
	assert_int_equal(count(&st[0], 1), 10);
	assert_int_equal(count(&st[1], 1), USH_ENOTCOMMITTED);
	assert_int_equal(count(&st[2], 1), 10);
	size_t len;
	char *log = th_read_file(errlog, &len);
	char want[800];
	snprintf(want, sizeof(want), "%s offset 256: record skipped", path);
	if (!memmem(log, len, want, strlen(want)))
		fail_msg("no '%s' in the worker's log", want);
	free(log);
	unlink(errlog);
	for (int m = 0; m < 3; m++)
		th_status_free(&st[m]);
}

static size_t log_bytes(void)
{
	DIR *d = opendir(wk.dir);
	struct dirent *de;
	size_t n = 0;
	while (d && (de = readdir(d))) {
		struct stat s;
		char p[1024];
		snprintf(p, sizeof(p), "%s/%s", wk.dir, de->d_name);
		if (!strncmp(de->d_name, "commit.", 7) && !stat(p, &s))
			n += (size_t)s.st_size;
	}
	if (d)
		closedir(d);
	return n;
}

/* Shuffles come and go; the log does not grow with them, and the live
 * state survives the compactions and a restart. */
static void log_is_compacted(void **state)
{
	(void)state;
	spawn_with(NULL);
	int ret;
	struct ush_status keep = put("app", 1, 0, 80, &ret);
	th_ok(ret);
	/* A claim, a commit and a drop each: 384 bytes of log. */
	for (uint32_t s = 2; s < 1200; s++) {
		struct ush_status st = put("app", s, 0, 8, &ret);
		th_ok(ret);
		th_status_free(&st);
		th_ok(ush_shuffle_drop(wk.addr, "app", s, 5000));
	}
	size_t bytes = log_bytes();
	print_message("1,198 shuffles written and dropped: %zu bytes of "
		      "commit log (460 KB without compaction)\n", bytes);
	assert_true(bytes < 300000);
	assert_true(exists("%s/commit.snap", wk.dir));
	th_worker_stop(&wk);
	th_worker_spawn(&wk, "127.0.0.1", wk.port, 1);
	assert_int_equal(count(&keep, 1), 10);
	th_status_free(&keep);
}

/* At start: a shuffle directory no application owns goes; a log of
 * another version stops the worker, cutting nothing. */
static void sweep_and_foreign_log(void **state)
{
	(void)state;
	char path[700];
	/* The worker's directory (shuffle logs where no directory holds a
	 * commit log are refused: its home would be missing). */
	spawn_with(NULL);
	th_worker_stop(&wk);
	snprintf(path, sizeof(path), "%s/s999", wk.dir);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/s999/t0.log", wk.dir);
	FILE *f = fopen(path, "w");
	fputs("left by a crash", f);
	fclose(f);
	spawn_with(NULL);
	assert_false(exists("%s/s999", wk.dir));
	th_worker_stop(&wk);
	/* Protocol 1's log: an 8-byte sequence number, then a frame. */
	snprintf(path, sizeof(path), "%s/commit.log", wk.dir);
	f = fopen(path, "w");
	for (int i = 0; i < 200; i++)
		fputc(i, f);
	fclose(f);
	char err[1024];
	assert_int_equal(run_worker(err, sizeof(err), "127.0.0.1:0", wk.dir),
			 1);
	if (!strstr(err, "another ushuffled version"))
		fail_msg("%s", err);
	struct stat s;
	assert_int_equal(stat(path, &s), 0);
	assert_int_equal(s.st_size, 200);
}

/* A shuffle stored by a 0.3 worker (a file per partition) stops the
 * start with a message saying what to do, rather than being served as
 * empty; without it the worker starts and serves its shuffles. */
static void old_layout_refused(void **state)
{
	(void)state;
	spawn_with(NULL);
	int ret;
	struct ush_status st = put("app", 3, 0, 80, &ret);
	th_ok(ret);
	th_worker_stop(&wk);
	char path[700], err[1024];
	snprintf(path, sizeof(path), "%s/s3/p0.t0.data", wk.dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("frames of 0.3", f);
	fclose(f);
	int rc = run_worker(err, sizeof(err), "127.0.0.1:0", wk.dir);
	if (rc != 1 || !strstr(err, "p0.t0.data") || !strstr(err, "0.3"))
		fail_msg("exit %d: %s", rc, err);
	assert_int_equal(unlink(path), 0);
	th_worker_spawn(&wk, "127.0.0.1", wk.port, 1);
	assert_int_equal(count(&st, 1), 10);
	th_status_free(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(apps_own_their_shuffles, setup,
						teardown),
		cmocka_unit_test_setup_teardown(silent_app_expires, setup,
						teardown),
		cmocka_unit_test_setup_teardown(one_worker_per_dir_and_port,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			corrupt_record_loses_only_itself, setup, teardown),
		cmocka_unit_test_setup_teardown(log_is_compacted, setup,
						teardown),
		cmocka_unit_test_setup_teardown(sweep_and_foreign_log, setup,
						teardown),
		cmocka_unit_test_setup_teardown(old_layout_refused, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
