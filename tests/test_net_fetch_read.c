/*
 * The read path's memory between streams, against a real worker and
 * real readers: a worker whose pool cannot lend a stream's reads keeps
 * the heap buffers it read into for the next stream (no allocation, and
 * so no page faults, per read), and a reader that reads partition after
 * partition on a pooled connection keeps its receive buffer with the
 * connection instead of growing a new one per partition.
 */
#include "net_helpers.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A worker whose pool (64 KiB, log buffers of 32 KiB) lends no FETCH
 * read a buffer: every read of a 64 KiB frame goes to heap memory. The
 * first pass allocates what its reads hold at once; three more passes
 * together allocate less than that (none, unless one holds more at once
 * than any before): freed per read, they allocated one per read. */
static void heap_read_buffers_kept(void **state)
{
	(void)state;
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	o.dir = th_scratch("heapbuf");
	o.threads = 1;
	o.pool_bytes = 64u << 10;
	o.flush_size = 32u << 10;
	o.log_level = 0;
	th_worker_secret(&o);
	ush_worker *wk;
	th_ok(ush_worker_create(&wk, &o));
	th_ok(ush_worker_start(wk));
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", ush_worker_port(wk));
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = addr, .shuffle = 41, .partitions = 4,
			   .maps = 1, .records = 20000,
			   .codec = USH_CODEC_NONE, .timeout_ms = 20000,
			   .statuses = st, .range = 4};
	th_ok(th_push_map(&j, 0, 0, NULL));
	uint64_t frames = wstats(wk).frames_out;
	th_verify(&j);
	frames = wstats(wk).frames_out - frames;
	uint64_t first = wstats(wk).fetch_heap_allocs;
	/* The test reaches what it tests: reads went to the heap. */
	assert_true(first > 0);
	for (int i = 0; i < 3; i++)
		th_verify(&j);
	uint64_t more = wstats(wk).fetch_heap_allocs - first;
	if (more >= first)
		fail_msg("3 more passes of %llu frames allocated %llu heap "
			 "read buffers, the first %llu",
			 (unsigned long long)frames, (unsigned long long)more,
			 (unsigned long long)first);
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

/* Small frames of many partitions from several maps, read as one range:
 * the frames of neighbouring partitions that one map's flush wrote lie
 * side by side in the log, but the stream wants them partition after
 * partition, so no two it sends one after the other are adjacent. A
 * window of them is read by the maps' runs instead: far fewer reads than
 * frames (one per frame before). */
static void small_frames_read_in_windows(void **state)
{
	(void)state;
	char addr[64] = "";
	ush_worker *wk = th_worker_embed(th_scratch("window"), 1, addr,
					 sizeof(addr));
	enum { MAPS = 4, PARTS = 1000 };
	struct ush_status st[MAPS] = {{0}};
	struct th_job j = {.workers = addr, .shuffle = 43, .partitions = PARTS,
			   .maps = MAPS, .records = 20000,
			   .codec = USH_CODEC_NONE, .timeout_ms = 20000,
			   .statuses = st, .range = PARTS};
	for (uint32_t m = 0; m < MAPS; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	struct ush_worker_stats a = wstats(wk);
	th_verify(&j);
	struct ush_worker_stats b = wstats(wk);
	uint64_t frames = b.frames_out - a.frames_out;
	uint64_t reads = b.fetch_reads - a.fetch_reads;
	print_message("%llu frames in %llu reads\n",
		      (unsigned long long)frames, (unsigned long long)reads);
	/* The test reaches what it tests: a frame or more per partition
	 * and map, and small ones (below WK_FETCH_DIRECT_MIN, 32 KiB). */
	assert_true(frames >= MAPS * PARTS);
	assert_true((b.bytes_out - a.bytes_out) / frames < (32u << 10));
	if (reads * 8 > frames)
		fail_msg("%llu frames took %llu reads",
			 (unsigned long long)frames, (unsigned long long)reads);
	th_job_free(&j);
	ush_worker_free(wk);
}

/* The same frames from a log cut short behind the worker's back: the
 * window that reaches past its end fails the stream, and the reader says
 * why in the worker's words (it said "unexpected frame type 6"); every
 * record read before is one of the job's. */
static void window_past_a_cut_log_fails(void **state)
{
	(void)state;
	char addr[64] = "", log[PATH_MAX];
	const char *dir = th_scratch("wincut");
	ush_worker *wk = th_worker_embed(dir, 1, addr, sizeof(addr));
	enum { MAPS = 4, PARTS = 1000 };
	struct ush_status st[MAPS] = {{0}};
	struct th_job j = {.workers = addr, .shuffle = 44, .partitions = PARTS,
			   .maps = MAPS, .records = 20000,
			   .codec = USH_CODEC_NONE, .timeout_ms = 20000,
			   .statuses = st};
	for (uint32_t m = 0; m < MAPS; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	snprintf(log, sizeof(log), "%s/s44/t0.log", dir);
	struct stat sb;
	assert_int_equal(stat(log, &sb), 0);
	/* The last frames of the last map's last flush: those of its last
	 * partitions. */
	assert_true(sb.st_size > (256 << 10));
	assert_int_equal(truncate(log, sb.st_size - (64 << 10)), 0);
	ush_reader *r;
	th_ok(th_range_open(&r, st, MAPS, 0, PARTS, 20000));
	const void *rec;
	size_t len;
	int ret;
	uint64_t n = 0;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		uint8_t want[1024];
		uint64_t id;
		assert_true(len >= 8);
		memcpy(&id, rec, 8);
		uint32_t m = (uint32_t)(id >> 32), i = (uint32_t)id;
		assert_true(m < MAPS && i < j.records);
		assert_int_equal(th_rec(want, m, i), len);
		assert_memory_equal(want, rec, len);
		n++;
	}
	print_message("%llu records, then: %s\n", (unsigned long long)n,
		      ush_last_error());
	assert_true(ret < 0);
	assert_true(n > 0);
	assert_non_null(strstr(ush_last_error(), "shorter than its index"));
	ush_reader_free(r);
	th_job_free(&j);
	ush_worker_free(wk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(heap_read_buffers_kept, th_teardown),
		cmocka_unit_test_teardown(recv_buffer_kept_across_partitions,
					  th_teardown),
		cmocka_unit_test_teardown(small_frames_read_in_windows,
					  th_teardown),
		cmocka_unit_test_teardown(window_past_a_cut_log_fails,
					  th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
