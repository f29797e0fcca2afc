/* Writer -> ushuffled (real processes, loopback) -> reader, verified. */
#include "net_helpers.h"

static const char *worker_opt; /* one more ushuffled option */

static void run_job(unsigned nworkers, unsigned threads, enum ush_codec codec,
		    int send_zc, enum ush_ioengine engine)
{
	struct th_worker w[3] = {0};
	char list[256] = "";
	for (unsigned i = 0; i < nworkers; i++) {
		w[i].extra = worker_opt;
		snprintf(w[i].dir, sizeof(w[i].dir), "%s", th_tmpdir("netw"));
		th_worker_spawn(&w[i], "127.0.0.1", 0, threads);
		snprintf(list + strlen(list), sizeof(list) - strlen(list),
			 "%s%s", i ? "," : "", w[i].addr);
	}
	struct ush_status statuses[3] = {{0}};
	struct th_job j = {.workers = list, .shuffle = 5, .partitions = 13,
			   .maps = 3, .records = 20000, .codec = codec,
			   .send_zc = send_zc, .ioengine = engine,
			   .statuses = statuses};
	for (uint32_t m = 0; m < j.maps; m++) {
		struct ush_writer_stats st;
		th_ok(th_push_map(&j, m, 0, &st));
		assert_int_equal(st.net_workers, nworkers);
		assert_true(st.net_sends + st.net_zc_sends == st.batches);
		/* Only notified sends can be counted as copied. */
		assert_true(st.net_zc_copied <= st.net_zc_notifs);
	}
	th_verify(&j);
	/* DROP removes the shuffle everywhere: nothing is served after,
	 * whichever of its statuses a reader is given. */
	th_ok(ush_shuffle_drop(list, NULL, j.shuffle, 0));
	ush_reader *r;
	for (uint32_t p = 0; p < j.partitions; p += 6)
		assert_int_equal(th_reader_open(&r, statuses, j.maps, p, 0),
				 USH_ENOTCOMMITTED);
	assert_int_equal(th_reader_open(&r, &statuses[1], 1, 0, 0),
			 USH_ENOTCOMMITTED);
	th_job_free(&j);
	for (unsigned i = 0; i < nworkers; i++) {
		th_worker_stop(&w[i]);
		th_rmrf(w[i].dir);
	}
}

static void one_worker(void **state)
{
	(void)state;
	run_job(1, 2, USH_CODEC_NONE, 0, USH_IOENGINE_URING);
}

static void three_workers_lz4(void **state)
{
	(void)state;
	run_job(3, 1, USH_CODEC_LZ4, 0, USH_IOENGINE_URING);
}

static void zero_copy_always(void **state)
{
	(void)state;
	run_job(1, 1, USH_CODEC_NONE, 1, USH_IOENGINE_URING);
}

/* A buffered worker (O_DIRECT is the default): logs of unaligned ends. */
static void buffered_worker(void **state)
{
	(void)state;
	worker_opt = "--direct=0";
	run_job(1, 2, USH_CODEC_NONE, 0, USH_IOENGINE_URING);
	worker_opt = NULL;
}

static void psync_baseline(void **state)
{
	(void)state;
	run_job(2, 1, USH_CODEC_NONE, 0, USH_IOENGINE_PSYNC);
}

/* The embedded worker, as the CLI runs it: same process, port 0. */
static void embedded_worker(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("netemb");
	char list[64] = "";
	ush_worker *wk = th_worker_embed(dir, 2, list, sizeof(list));
	struct ush_status st0[2] = {{0}}, st1[1] = {{0}};
	struct th_job j = {.workers = list, .shuffle = 9, .partitions = 4,
			   .maps = 2, .records = 5000, .statuses = st0};
	for (uint32_t m = 0; m < j.maps; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	/* A second attempt of map 0, with fewer records, commits too: the
	 * worker elects none. Each status reads its own attempt. */
	struct th_job j1 = j;
	j1.maps = 1;
	j1.records = 1234;
	j1.statuses = st1;
	th_ok(th_push_map(&j1, 0, 1, NULL));
	th_verify(&j);
	th_verify(&j1);
	/* The driver's choice: attempt 1 of map 0 with attempt 0 of map 1. */
	struct ush_status mix[2] = {st1[0], st0[1]};
	uint64_t n = 0;
	for (uint32_t p = 0; p < j.partitions; p++) {
		ush_reader *r;
		const void *rec;
		size_t len;
		int ret;
		th_ok(th_reader_open(&r, mix, 2, p, 0));
		while ((ret = ush_reader_next(r, &rec, &len)) == 1)
			n++;
		th_ok(ret);
		ush_reader_free(r);
	}
	assert_int_equal(n, 1234 + 5000);
	/* A committed attempt cannot be written again. */
	assert_int_equal(th_push_map(&j, 0, 0, NULL), USH_ECOMMITTED);
	assert_int_equal(th_push_map(&j1, 0, 1, NULL), USH_ECOMMITTED);
	/* One writer at a time, a pool to spare: the worker wrote every
	 * DATA frame from the buffer it received it in, none copied. */
	struct ush_worker_stats ws;
	ush_worker_stats(wk, &ws);
	assert_int_equal(ws.bytes_in_place, ws.bytes_stored);
	th_job_free(&j);
	th_job_free(&j1);
	ush_worker_stop(wk);
	th_ok(ush_worker_wait(wk));
	ush_worker_free(wk);
	th_rmrf(dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_worker),
		cmocka_unit_test(three_workers_lz4),
		cmocka_unit_test(zero_copy_always),
		cmocka_unit_test(psync_baseline),
		cmocka_unit_test(buffered_worker),
		cmocka_unit_test(embedded_worker),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
