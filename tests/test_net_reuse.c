/*
 * Readers reuse their connections (src/net/connpool.c): reading every
 * partition of a many-partition shuffle one after another opens one
 * connection per worker and reading thread, not one per partition; a
 * pooled connection the worker closed (a restart, its idle timeout) is
 * replaced and the read is still exact; a reader freed in the middle of
 * its stream does not hand that stream to the next reader.
 */
#include "net_helpers.h"

#include <pthread.h>

#define PARTS 2000u

/* A worker of threads threads over a fresh directory (tag). */
static void done(struct th_worker *w, struct th_job *j)
{
	th_worker_stop(w);
	th_rmrf(w->dir);
	th_job_free(j);
}

static struct ush_lib_stats lib(void)
{
	struct ush_lib_stats s;
	ush_lib_stats(&s);
	return s;
}

/* Two workers, one shuffle of many partitions, read one partition at a
 * time: one handshake per worker, every later FETCH on it. */
static void many_partitions_one_connection(void **state)
{
	(void)state;
	struct th_worker w[2] = {{0}};
	char list[160];
	for (int i = 0; i < 2; i++)
		th_worker_fresh(&w[i], i ? "reuse-b" : "reuse-a", 2, NULL, NULL);
	snprintf(list, sizeof(list), "%s,%s", w[0].addr, w[1].addr);
	struct ush_status st[2] = {{0}};
	struct th_job j = {.workers = list, .shuffle = 1, .partitions = PARTS,
			   .maps = 2, .records = 4 * PARTS, .statuses = st};
	for (uint32_t m = 0; m < j.maps; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	struct ush_lib_stats s0 = lib();
	th_verify(&j);
	struct ush_lib_stats s1 = lib();
	assert_int_equal(s1.net_connects - s0.net_connects, 2);
	assert_int_equal(s1.net_reuses - s0.net_reuses, PARTS - 2);
	/* Both workers restarted on their ports (one killed, one stopped):
	 * the pooled connections are dead, the reads are redialled once per
	 * worker and still exact. */
	th_worker_kill(&w[0]);
	th_worker_restart(&w[0], 1);
	th_worker_stop(&w[1]);
	th_worker_spawn(&w[1], "127.0.0.1", w[1].port, 3);
	th_verify(&j);
	struct ush_lib_stats s2 = lib();
	assert_int_equal(s2.net_connects - s1.net_connects, 2);
	for (int i = 0; i < 2; i++) {
		th_worker_stop(&w[i]);
		th_rmrf(w[i].dir);
	}
	th_job_free(&j);
}

static bool idle_closed(const char *log)
{
	static const char want[] = "idle for 2000 ms";
	size_t len;
	char *s = th_read_file(log, &len);
	bool yes = s && memmem(s, len, want, sizeof(want) - 1);
	free(s);
	return yes;
}

/* The worker closes connections idle past --idle-timeout (with an
 * ERROR): the next reader finds the pooled one closed and dials anew. */
static void worker_idle_close(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("reuse-idle"));
	char log[600];
	snprintf(log, sizeof(log), "%s.log", w.dir);
	w.errlog = log;
	w.extra = "--idle-timeout=2000";
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 3, .partitions = 4,
			   .maps = 1, .records = 400, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	th_verify(&j);
	struct ush_lib_stats s0 = lib();
	/* Waits for the worker to close the idle connection: an event in
	 * its log, not a duration assumed. */
	for (int i = 0; !idle_closed(log); i++) {
		assert_true(i < 3000); /* 30 s */
		usleep(10000);
	}
	th_verify(&j);
	struct ush_lib_stats s1 = lib();
	assert_int_equal(s1.net_connects - s0.net_connects, 1);
	assert_int_equal(s1.net_reuses - s0.net_reuses, 3);
	done(&w, &j);
	unlink(log);
}

/* A reader freed before its stream's end: its connection is closed, not
 * pooled, so the next reader of that worker reads only its own stream. */
static void reader_stops_early(void **state)
{
	(void)state;
	struct th_worker w = {0};
	th_worker_fresh(&w, "reuse-early", 1, NULL, NULL);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 4, .partitions = 2,
			   .maps = 1, .records = 20000, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	struct ush_lib_stats s0 = lib();
	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(th_reader_open(&r, st, 1, 0, 20000));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	ush_reader_free(r);
	th_verify(&j);
	struct ush_lib_stats s1 = lib();
	assert_int_equal(s1.net_connects - s0.net_connects, 2);
	assert_int_equal(s1.net_reuses - s0.net_reuses, 1);
	done(&w, &j);
}

struct rthread {
	const struct th_job *j;
	atomic_uint *next;
	uint64_t records;
	int err;
};

/* Reads partitions from a shared counter, as the CLI's threads do. */
static void *read_some(void *p)
{
	struct rthread *a = p;
	unsigned n;
	while (!a->err && (n = atomic_fetch_add(a->next, 1)) < a->j->partitions) {
		ush_reader *r;
		const void *rec;
		size_t len;
		int ret = th_reader_open(&r, a->j->statuses, a->j->maps, n,
					 20000);
		while (!ret && (ret = ush_reader_next(r, &rec, &len)) == 1)
			a->records++, ret = 0;
		if (ret < 0)
			a->err = ret;
		ush_reader_free(r);
	}
	return NULL;
}

/* Threads reading at once share the pool: at most one connection per
 * worker and thread, every record read. */
static void threads_share_pool(void **state)
{
	(void)state;
	enum { NT = 4 };
	struct th_worker w = {0};
	th_worker_fresh(&w, "reuse-mt", 2, NULL, NULL);
	struct ush_status st[2] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 5, .partitions = 500,
			   .maps = 2, .records = 5000, .statuses = st};
	for (uint32_t m = 0; m < j.maps; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	struct ush_lib_stats s0 = lib();
	atomic_uint next = 0;
	struct rthread a[NT];
	pthread_t tid[NT];
	for (int i = 0; i < NT; i++) {
		a[i] = (struct rthread){.j = &j, .next = &next};
		assert_int_equal(pthread_create(&tid[i], NULL, read_some,
						&a[i]), 0);
	}
	uint64_t total = 0;
	for (int i = 0; i < NT; i++) {
		pthread_join(tid[i], NULL);
		assert_int_equal(a[i].err, 0);
		total += a[i].records;
	}
	assert_int_equal(total, (uint64_t)j.maps * j.records);
	struct ush_lib_stats s1 = lib();
	assert_true(s1.net_connects - s0.net_connects <= NT);
	assert_int_equal((s1.net_connects - s0.net_connects) +
			 (s1.net_reuses - s0.net_reuses), j.partitions);
	done(&w, &j);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(many_partitions_one_connection),
		cmocka_unit_test(worker_idle_close),
		cmocka_unit_test(reader_stops_early),
		cmocka_unit_test(threads_share_pool),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
