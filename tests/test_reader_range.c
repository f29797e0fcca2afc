/* A disk reader of a range of partitions (ush_reader_opts.npartitions)
 * keeps USH_READER_RANGE_MAX as the net reader does: npartitions times
 * nstatuses above it is -E2BIG at open, before any file is opened; at
 * it, the range reads. */
#include "helpers.h"

#include <errno.h>
#include <string.h>

#define MAPS 3u
#define AT (USH_READER_RANGE_MAX / MAPS) /* 233016: 699048 entries */

static void disk_range_bound(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("rrange");
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, NULL));
	struct ush_status st[MAPS];
	for (uint32_t m = 0; m < MAPS; m++) {
		struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 4,
			.map = m, .partitions = AT + 1,
			.target = USH_TARGET_DISK, .dir = dir};
		ush_writer *w;
		th_ok(ush_writer_open(&w, ring, &wo));
		th_ok(ush_writer_write(w, 0, "first", 5));
		th_ok(ush_writer_write(w, AT - 1, "last", 4));
		th_ok(ush_writer_write(w, AT, "beyond", 6));
		th_ok(th_commit(w, NULL, &st[m]));
		ush_writer_free(w);
	}
	ush_ring_free(ring);
	struct ush_reader_opts o;
	ush_reader_opts_init(&o);
	o.statuses = st;
	o.nstatuses = MAPS;
	o.npartitions = AT + 1; /* 699051 entries */
	ush_reader *r = NULL;
	int ret = ush_reader_open(&r, &o);
	print_message("%d %s\n", ret, ush_last_error());
	assert_int_equal(ret, -E2BIG);
	assert_null(r);
	assert_non_null(strstr(ush_last_error(), "USH_READER_RANGE_MAX"));
	o.npartitions = AT;
	th_ok(ush_reader_open(&r, &o));
	const void *p;
	size_t len;
	unsigned n = 0, last = 0;
	while ((ret = ush_reader_next(r, &p, &len)) == 1) {
		n++;
		last += len == 4 && !memcmp(p, "last", 4);
		assert_false(len == 6 && !memcmp(p, "beyond", 6));
	}
	assert_int_equal(ret, 0);
	assert_int_equal(n, 2 * MAPS);
	assert_int_equal(last, MAPS);
	ush_reader_free(r);
	th_statuses_free(st, MAPS);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(disk_range_bound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
