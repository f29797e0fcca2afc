/* ush_reader_stats(): records, frames, bytes and the per-frame load
 * latency of a reader, against what the writer reported. */
#include "helpers.h"

#include <string.h>

static void counts_match_the_writer(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("rstats");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = 4096;
	ro.pool_bytes = 1 << 20;
	ro.codec = USH_CODEC_LZ4;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 9, .map = 0,
		.partitions = 2, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 1};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	char rec[300];
	memset(rec, 'x', sizeof(rec));
	for (int i = 0; i < 100; i++) /* about 8 frames of partition 1 */
		th_ok(ush_writer_write(w, 1, rec, sizeof(rec)));
	th_ok(ush_writer_write(w, 0, rec, 10));
	struct ush_part_stats parts[2];
	struct ush_status status;
	th_ok(th_commit(w, parts, &status));
	ush_writer_free(w);
	ush_ring_free(ring);

	ush_reader *r;
	const void *p;
	size_t len;
	struct ush_reader_stats st;
	th_ok(th_reader_open(&r, &status, 1, 1, 0));
	ush_reader_stats(r, &st);
	assert_int_equal(st.records, 0);
	assert_int_equal(ush_reader_load_lat(r)->count, 0);
	while (ush_reader_next(r, &p, &len) == 1)
		;
	ush_reader_stats(r, &st);
	assert_int_equal(st.records, 100);
	assert_int_equal(st.batches, parts[1].batches);
	assert_int_equal(st.dup_batches, 0);
	assert_int_equal(st.raw_bytes, 100 * (USH_RECORD_HDR_SIZE + 300));
	assert_true(st.stored_bytes >= st.batches * USH_FRAME_HDR_SIZE);
	assert_true(st.stored_bytes < st.raw_bytes); /* lz4 on 'x's */
	assert_int_equal(ush_reader_load_lat(r)->count, st.batches);
	ush_reader_free(r);
	th_status_free(&status);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(counts_match_the_writer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
