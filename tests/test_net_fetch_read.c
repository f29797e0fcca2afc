/*
 * The read path's memory between streams, against a real worker and
 * real readers: a worker whose pool cannot lend a stream's reads keeps
 * the heap buffers it read into for the next stream (no allocation, and
 * so no page faults, per read), and a reader that reads partition after
 * partition on a pooled connection keeps its receive buffer with the
 * connection instead of growing a new one per partition.
 */
#include "net_helpers.h"

static struct ush_worker_stats wstats(ush_worker *wk)
{
	struct ush_worker_stats s;
	ush_worker_stats(wk, &s);
	return s;
}

static struct ush_lib_stats lib(void)
{
	struct ush_lib_stats s;
	ush_lib_stats(&s);
	return s;
}

/* A 1 MiB pool (256 KiB log buffers): a FETCH stream reads up to eight
 * log buffers ahead, beyond the half of the pool it may take, so the
 * rest of its reads go to heap memory. Read back three times: the
 * second and third reads allocate none. */
static void heap_read_buffers_kept(void **state)
{
	(void)state;
	char addr[64] = "";
	ush_worker *wk = th_worker_embed_pool(th_scratch("heapbuf"), 1,
					      1u << 20, addr, sizeof(addr));
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = addr, .shuffle = 41, .partitions = 4,
			   .maps = 1, .records = 20000,
			   .codec = USH_CODEC_NONE, .timeout_ms = 20000,
			   .statuses = st, .range = 4};
	th_ok(th_push_map(&j, 0, 0, NULL));
	th_verify(&j);
	uint64_t first = wstats(wk).fetch_heap_allocs;
	/* The test reaches what it tests. */
	assert_true(first > 0);
	th_verify(&j);
	th_verify(&j);
	assert_int_equal(wstats(wk).fetch_heap_allocs, first);
	th_job_free(&j);
	ush_worker_free(wk);
}

/* 64 partitions read one reader each, on the connection the first one
 * made: one receive buffer in all (it goes with the connection to the
 * pool and comes back with it), not one (and its growth) per reader. */
static void recv_buffer_kept_across_partitions(void **state)
{
	(void)state;
	char addr[64] = "";
	ush_worker *wk = th_worker_embed(th_scratch("rbuf"), 1, addr,
					 sizeof(addr));
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = addr, .shuffle = 42, .partitions = 64,
			   .maps = 1, .records = 6400,
			   .codec = USH_CODEC_NONE, .timeout_ms = 20000,
			   .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	struct ush_lib_stats a = lib();
	th_verify(&j);
	struct ush_lib_stats b = lib();
	/* Every FETCH after the first went on the pooled connection. */
	assert_int_equal(b.net_reuses - a.net_reuses, 63);
	/* At most one new buffer (none when an earlier test's was kept). */
	assert_in_range(b.net_recv_bufs - a.net_recv_bufs, 0, 1);
	th_job_free(&j);
	ush_worker_free(wk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(heap_read_buffers_kept, th_teardown),
		cmocka_unit_test_teardown(recv_buffer_kept_across_partitions,
					  th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
