/* The library opens a ring and round-trips a few records through disk. */
#include "helpers.h"

#include <string.h>

static void round_trip_small(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("smoke");
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, NULL));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 3, .map = 0,
		.partitions = 2, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 1};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	th_ok(ush_writer_write(w, 1, "hello", 5));
	th_ok(ush_writer_write(w, 1, "", 0));
	struct ush_status st;
	th_ok(th_commit(w, NULL, &st));
	ush_writer_free(w);
	ush_ring_free(ring);

	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(th_reader_open(&r, &st, 1, 1, 0));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_int_equal(len, 5);
	assert_memory_equal(rec, "hello", 5);
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_int_equal(len, 0);
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	th_status_free(&st);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_small),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
