/*
 * What a write that fails leaves on a worker: when the attempt it
 * abandons was its shuffle's last open or committed one, the shuffle
 * goes at once (its bytes off the application's --max-app-bytes);
 * after a restart, a shuffle with no attempt committed goes at start.
 * They stayed until the application dropped the shuffle or expired,
 * and a restart kept them (a decommission waited on them).
 */
#include "net_helpers.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>

#define REC (60u << 10)

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

/* Waits (30 s at most) until the worker has removed shuffle s's
 * directory: false if it is still there. */
static bool gone(const struct th_worker *w, uint32_t s)
{
	for (int i = 0; i < 3000 && exists("%s/s%u", w->dir, s); i++)
		usleep(10000);
	return !exists("%s/s%u", w->dir, s);
}

/* A writer refused past --max-app-bytes: its shuffle holds nothing else,
 * so it goes, and the quota has room again without a drop; a refused
 * writer of a shuffle with a committed map leaves the shuffle. */
static void refused_write_frees_its_bytes(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("ab-quota"));
	w.extra = "--max-app-bytes=4m";
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct ush_status st[2] = {{0}};
	struct th_job kept = {.workers = w.addr, .shuffle = 21,
			      .partitions = 4, .maps = 2, .records = 200,
			      .statuses = st};
	th_ok(th_push_map(&kept, 0, 0, NULL));
	/* ~5.8 MB of records: past the quota. */
	struct th_job big = {.workers = w.addr, .shuffle = 22,
			     .partitions = 4, .maps = 1, .records = 16000};
	assert_int_equal(th_push_map(&big, 0, 0, NULL), -EDQUOT);
	assert_non_null(strstr(ush_last_error(), "(--max-app-bytes)"));
	assert_true(gone(&w, 22));
	/* Room again (~2.2 MB), no drop asked for. */
	big.shuffle = 23;
	big.records = 6000;
	th_ok(th_push_map(&big, 0, 0, NULL));
	/* Refused in a shuffle with a committed map: the shuffle stays,
	 * and its committed map reads. */
	kept.records = 16000;
	assert_int_equal(th_push_map(&kept, 1, 0, NULL), -EDQUOT);
	kept.records = 200;
	assert_true(exists("%s/s21", w.dir));
	kept.maps = 1;
	th_verify(&kept);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_job_free(&kept);
}

/* A worker killed while a writer's attempt is open: after the restart
 * its shuffle, with no attempt committed, is dropped at start, and a
 * committed one stays. */
static void restart_drops_uncommitted(void **state)
{
	(void)state;
	struct th_worker w = {0};
	char log[700];
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("ab-restart"));
	snprintf(log, sizeof(log), "%s.log", w.dir);
	unlink(log);
	w.errlog = log;
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct ush_status st[1] = {{0}};
	struct th_job kept = {.workers = w.addr, .shuffle = 30,
			      .partitions = 4, .maps = 1, .records = 200,
			      .statuses = st};
	th_ok(th_push_map(&kept, 0, 0, NULL));
	int fd = th_raw_connect(w.port);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, 31,
				0, 0, "default", 0, {0}};
	th_hello(fd, h);
	static uint8_t b[USH_FRAME_HDR_SIZE + 4 + REC];
	struct ushi_frame f;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_HELLO);
	/* 3 MB in frames of one 60 KB record: past a flush buffer, within
	 * the window. */
	for (uint64_t seq = 0; seq < 50; seq++) {
		f = (struct ushi_frame){.type = USHI_FRAME_DATA, .shuffle = 31,
					.seq = seq, .raw_len = 4 + REC,
					.payload_len = 4 + REC, .nrec = 1};
		put_le32(b + USH_FRAME_HDR_SIZE, REC);
		memset(b + USH_FRAME_HDR_SIZE + 4, 'u', REC);
		frame_encode(b, &f);
		th_send_all(fd, b, sizeof(b));
	}
	for (int i = 0; i < 3000 && !exists("%s/s31", w.dir); i++)
		usleep(10000);
	assert_true(exists("%s/s31", w.dir));
	th_worker_kill(&w);
	close(fd);
	th_worker_restart(&w, 1);
	assert_false(exists("%s/s31", w.dir)); /* before it listened */
	size_t n;
	char *text = th_read_file(log, &n);
	assert_non_null(strstr(text, "shuffle 31 of application default has "
				     "no attempt committed"));
	free(text);
	th_verify(&kept);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	unlink(log);
	th_job_free(&kept);
}

/* Files the test puts in the shuffle's directory, so that the drop's
 * removal of it takes a while (about 0.4 s here). */
#define JUNK 60000u

static void junk_name(char *p, size_t n, const struct th_worker *w,
		      uint32_t s, unsigned i)
{
	snprintf(p, n, "%s/s%u/junk%06u", w->dir, s, i);
}

/* Has the worker begun removing the junk (one of 300 spread out gone)? */
static bool removing(const struct th_worker *w, uint32_t s)
{
	char p[700];
	for (unsigned i = 0; i < JUNK; i += JUNK / 300) {
		junk_name(p, sizeof(p), w, s, i);
		if (access(p, F_OK))
			return true;
	}
	return false;
}

struct pusher {
	pthread_t tid;
	const struct th_job *job;
	uint32_t map;
	int ret;
};

static void *push(void *arg)
{
	struct pusher *p = arg;
	p->ret = th_push_map(p->job, p->map, 0, NULL);
	return NULL;
}

/* A writer that abandons its shuffle's last attempt drops the shuffle,
 * and the drop removes the shuffle's files once it is logged. Writers of
 * other maps claiming the shuffle meanwhile, on another worker thread,
 * made their files in the directory being removed: the removal took
 * them, and a read of their committed maps failed ("0 batches ..., its
 * map status says 1": 3 runs of 3 before the fix). A claim now waits
 * until the drop's files are gone. */
static void drop_races_a_claim(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("ab-race"));
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	const uint32_t s = 40;
	char p[700];
	snprintf(p, sizeof(p), "%s/s%u", w.dir, s);
	assert_int_equal(mkdir(p, 0755), 0);
	for (unsigned i = 0; i < JUNK; i++) {
		junk_name(p, sizeof(p), &w, s, i);
		int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
	int fd = th_raw_connect(w.port);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				9, 0, "default", 0, {0}};
	th_hello(fd, h);
	static uint8_t b[USH_FRAME_HDR_SIZE + 4096];
	struct ushi_frame f;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_HELLO);
	close(fd); /* map 9 abandoned: the shuffle's only attempt */
	for (int i = 0; i < 30000 && !removing(&w, s); i++)
		usleep(1000);
	assert_true(removing(&w, s));
	/* Eight writers at once, one connection each: some land on the
	 * thread that is not removing the files. */
	struct ush_status st[8] = {{0}};
	struct th_job job = {.workers = w.addr, .shuffle = s,
			     .partitions = 4, .maps = 8, .records = 50,
			     .statuses = st};
	struct pusher ps[8];
	for (uint32_t m = 0; m < job.maps; m++) {
		ps[m] = (struct pusher){.job = &job, .map = m};
		assert_int_equal(pthread_create(&ps[m].tid, NULL, push, &ps[m]),
				 0);
	}
	for (uint32_t m = 0; m < job.maps; m++) {
		pthread_join(ps[m].tid, NULL);
		th_ok(ps[m].ret);
	}
	th_verify(&job);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_job_free(&job);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(refused_write_frees_its_bytes),
		cmocka_unit_test(restart_drops_uncommitted),
		cmocka_unit_test(drop_races_a_claim),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
