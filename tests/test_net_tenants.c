/*
 * What one tenant can make a worker hold (issue 22, item 5), against real
 * workers: attempts open or abandoned, committed attempts and
 * applications are each bounded, refused at the limit with ERROR -EDQUOT
 * naming the flag, while other applications go on; every silent
 * application goes in one expiry pass; the commit log stays bounded by
 * the live records however many attempts were abandoned, and serves what
 * was committed after a restart.
 */
#include "net_helpers.h"

#include <dirent.h>
#include <sys/stat.h>

/* A worker over a fresh directory, with up to two more options. */
static void done(struct th_worker *w)
{
	assert_true(th_worker_alive(w));
	th_worker_stop(w);
	th_rmrf(w->dir);
}

/* Reads frames up to the HELLO answer (0) or an ERROR (-1, its code and
 * message in *code and msg). */
static int answer(int fd, int *code, char *msg, size_t n)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int type = th_recv_frame(fd, b, sizeof(b), &f);
	if (type == USHI_FRAME_HELLO)
		return 0;
	if (type != USHI_FRAME_ERROR)
		fail_msg("expected HELLO or ERROR, got %d", type);
	*code = proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg, n);
	return -1;
}

/* A raw writer of app's (shuffle s, map m, attempt 0): the open
 * connection once welcomed, or -1 with the ERROR's code and message. */
static int writer(int port, const char *app, uint32_t s, uint32_t m,
		  int *code, char *msg, size_t n)
{
	struct proto_hello h = {.role = USHI_ROLE_WRITER, .shuffle = s,
				.map = m};
	snprintf(h.app, sizeof(h.app), "%s", app);
	int fd = th_raw_connect(port);
	th_hello(fd, h);
	if (!answer(fd, code, msg, n))
		return fd;
	close(fd);
	return -1;
}

static int writer_ok(int port, const char *app, uint32_t s, uint32_t m)
{
	char msg[600];
	int code;
	int fd = writer(port, app, s, m, &code, msg, sizeof(msg));
	if (fd < 0)
		fail_msg("writer of %s shuffle %u map %u refused: %d '%s'", app,
			 s, m, code, msg);
	return fd;
}

/* Asserts that a writer of app's (s, m) is refused with -EDQUOT and a
 * message naming flag. */
static void writer_refused(int port, const char *app, uint32_t s,
			   uint32_t m, const char *flag)
{
	char msg[600];
	int code = 0;
	int fd = writer(port, app, s, m, &code, msg, sizeof(msg));
	if (fd >= 0)
		fail_msg("writer of %s shuffle %u map %u welcomed; expected "
			 "-EDQUOT (%s)", app, s, m, flag);
	print_message("refused: %s\n", msg);
	assert_int_equal(code, -EDQUOT);
	assert_non_null(strstr(msg, flag));
}

/* An empty commit of (s, m, attempt 0) on writer fd, acknowledged. */
static void commit(int fd, uint32_t s, uint32_t m)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	th_send_ctrl(fd, b, proto_put_mapper_end(b, s, m, 0));
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_ACK);
	struct proto_ack a;
	proto_get_ack(b + USH_FRAME_HDR_SIZE, &a);
	assert_int_equal(a.kind, USHI_ACK_COMMIT);
	assert_int_equal(a.status, 0);
}

/* A small job of app on shuffle s (maps maps), pushed and verified. */
static void honest(const struct th_worker *w, const char *app, uint32_t s,
		   uint32_t maps)
{
	struct ush_status st[8] = {{0}};
	struct th_job j = {.workers = w->addr, .shuffle = s, .partitions = 4,
			   .maps = maps, .records = 500, .statuses = st,
			   .app = app};
	for (uint32_t m = 0; m < maps; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	th_verify(&j);
	th_job_free(&j);
}

/* Attempts open or abandoned: three held, the fourth refused; abandoned
 * ones still count until their shuffle is dropped (a committed map keeps
 * shuffle 1: one left with no attempt open or committed goes at once,
 * test_net_abandoned); committed ones do not count. Another application
 * is not affected. */
static void attempts_quota(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "ten-att", 2, "--max-app-attempts=3", NULL);
	int kept = writer_ok(w.port, "A", 1, 9);
	commit(kept, 1, 9);
	close(kept);
	int fd[3];
	for (uint32_t m = 0; m < 3; m++)
		fd[m] = writer_ok(w.port, "A", 1, m);
	writer_refused(w.port, "A", 1, 3, "(--max-app-attempts)");
	writer_refused(w.port, "A", 2, 0, "(--max-app-attempts)");
	honest(&w, "B", 10, 4);
	for (int i = 0; i < 3; i++)
		close(fd[i]); /* abandoned: still held */
	writer_refused(w.port, "A", 1, 4, "(--max-app-attempts)");
	th_ok(ush_shuffle_drop(w.addr, "A", 1, 5000));
	/* Committed attempts leave the count: five maps under a quota of
	 * three. */
	honest(&w, "A", 3, 5);
	done(&w);
}

/* Committed attempts: four, then the fifth commit is refused; the four
 * stay readable, another application commits on, and a drop makes room
 * again. */
static void commits_quota(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "ten-commit", 2, "--max-app-commits=4", NULL);
	struct ush_status st[5] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 1, .partitions = 4,
			   .maps = 4, .records = 300, .statuses = st,
			   .app = "A"};
	for (uint32_t m = 0; m < 4; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	assert_int_equal(th_push_map(&j, 4, 0, NULL), -EDQUOT);
	print_message("%s\n", ush_last_error());
	assert_non_null(strstr(ush_last_error(), "(--max-app-commits)"));
	honest(&w, "B", 10, 3);
	th_verify(&j);
	th_job_free(&j);
	th_ok(ush_shuffle_drop(w.addr, "A", 1, 5000));
	honest(&w, "A", 2, 4);
	done(&w);
}

/* Applications: three known, a fourth refused at its HELLO; the three
 * go on. */
static void apps_limit(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "ten-apps", 2, "--max-apps=3", NULL);
	th_ok(ush_app_heartbeat(w.addr, "a1", 5000));
	th_ok(ush_app_heartbeat(w.addr, "a2", 5000));
	th_ok(ush_app_heartbeat(w.addr, "a3", 5000));
	assert_int_equal(ush_app_heartbeat(w.addr, "a4", 5000), -EDQUOT);
	print_message("%s\n", ush_last_error());
	assert_non_null(strstr(ush_last_error(), "(--max-apps)"));
	writer_refused(w.port, "a5", 1, 0, "(--max-apps)");
	th_ok(ush_app_heartbeat(w.addr, "a1", 5000));
	honest(&w, "a2", 2, 2);
	done(&w);
}

#define SILENT 2000

/* SILENT applications heartbeat once, three more own a shuffle each and
 * fall silent too: all of them go in one TTL period (the worker used to
 * remove one application a second), while one that heartbeats keeps its
 * shuffle. */
static void silent_apps_go_at_once(void **state)
{
	(void)state;
	char dir[600], addr[64], id[32];
	snprintf(dir, sizeof(dir), "%s", th_tmpdir("ten-expire"));
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	o.dir = dir;
	o.threads = 2;
	o.log_level = 0;
	o.app_ttl_ms = 2000;
	th_worker_secret(&o);
	ush_worker *wk;
	th_ok(ush_worker_create(&wk, &o));
	th_ok(ush_worker_start(wk));
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ush_worker_port(wk));
	struct ush_status st[2] = {{0}};
	struct th_job live = {.workers = addr, .shuffle = 100, .partitions = 4,
			      .maps = 2, .records = 300, .statuses = st,
			      .app = "live"};
	for (uint32_t m = 0; m < 2; m++)
		th_ok(th_push_map(&live, m, 0, NULL));
	for (uint32_t i = 0; i < 3; i++) {
		struct th_job j = {.workers = addr, .shuffle = 200 + i,
				   .partitions = 4, .maps = 1, .records = 10};
		snprintf(id, sizeof(id), "owner%u", i);
		j.app = id;
		th_ok(th_push_map(&j, 0, 0, NULL));
	}
	for (unsigned i = 0; i < SILENT; i++) {
		snprintf(id, sizeof(id), "silent%u", i);
		th_ok(ush_app_heartbeat(addr, id, 5000));
		if (i % 10 == 0)
			th_ok(ush_app_heartbeat(addr, "live", 5000));
	}
	struct ush_worker_stats s;
	ush_worker_stats(wk, &s);
	print_message("%llu applications known\n", (unsigned long long)s.apps);
	assert_true(s.apps > 3);
	/* The worker's own deadline is one TTL and a sweep; this one is far
	 * beyond, and far below SILENT sweeps. */
	for (unsigned i = 0; i < 300; i++) {
		th_ok(ush_app_heartbeat(addr, "live", 5000));
		ush_worker_stats(wk, &s);
		if (s.apps == 1)
			break;
		usleep(100000);
	}
	print_message("left: %llu applications, %llu shuffles, %llu "
		      "expired\n", (unsigned long long)s.apps,
		      (unsigned long long)s.shuffles,
		      (unsigned long long)s.expiries);
	assert_int_equal(s.apps, 1);
	assert_int_equal(s.shuffles, 1);
	assert_int_equal(s.expiries, 3);
	th_verify(&live);
	th_job_free(&live);
	ush_worker_free(wk);
	th_rmrf(dir);
}

/* Bytes of the commit log: the snapshot and every thread's log. */
static size_t log_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *de;
	size_t n = 0;
	while ((de = readdir(d))) {
		char path[1024];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (!strncmp(de->d_name, "commit.", 7) && !stat(path, &st))
			n += (size_t)st.st_size;
	}
	closedir(d);
	return n;
}

#define ABANDONED 2000
#define CYCLES 1200

/*
 * An application leaves ABANDONED attempts in a shuffle it keeps (they
 * are no records of the log), then commits and drops shuffle after
 * shuffle: three records each, about 450 KB. The log stays within the
 * compaction threshold (256 KiB) plus what one cycle adds: abandoned
 * attempts once counted as live records, so that it grew to four times
 * 128 bytes per abandoned attempt (1 MB here) before a compaction. A
 * restart serves the kept shuffle's commits.
 */
static void commit_log_bounded(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "ten-log", 2, "--log-level=error", NULL);
	struct ush_status st[2] = {{0}};
	struct th_job keep = {.workers = w.addr, .shuffle = 1, .partitions = 4,
			      .maps = 2, .records = 300, .statuses = st,
			      .app = "A"};
	for (uint32_t m = 0; m < 2; m++)
		th_ok(th_push_map(&keep, m, 0, NULL));
	for (uint32_t m = 2; m < 2 + ABANDONED; m++)
		close(writer_ok(w.port, "A", 1, m));
	size_t most = 0;
	for (uint32_t s = 2; s < 2 + CYCLES; s++) {
		int fd = writer_ok(w.port, "A", s, 0);
		commit(fd, s, 0);
		close(fd);
		th_ok(ush_shuffle_drop(w.addr, "A", s, 5000));
		size_t n = log_bytes(w.dir);
		most = n > most ? n : most;
	}
	print_message("%u attempts abandoned, %u shuffles committed and "
		      "dropped: at most %zu bytes of commit log (%u appended)\n",
		      ABANDONED, CYCLES, most, CYCLES * 3 * 128);
	assert_true(most <= (256u << 10) + 3 * 128);
	int port = w.port; /* the statuses name it */
	th_worker_stop(&w);
	th_worker_spawn(&w, "127.0.0.1", port, 2);
	th_verify(&keep);
	th_job_free(&keep);
	done(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(attempts_quota),
		cmocka_unit_test(commits_quota),
		cmocka_unit_test(apps_limit),
		cmocka_unit_test(silent_apps_go_at_once),
		cmocka_unit_test(commit_log_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
