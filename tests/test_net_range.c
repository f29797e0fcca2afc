/*
 * Readers of a range of partitions (ush_reader_opts.npartitions) against
 * real workers: the records equal those of one reader per partition,
 * partition after partition, at 64 and 10,000 partitions, over maps
 * placed on different workers, with empty partitions, sealed maps,
 * replicas and a worker killed mid-range; one FETCH per worker, on one
 * connection; a reader freed mid-range hands no half-read stream to the
 * pool; and the worker refuses a malformed range FETCH with an ERROR.
 */
#include "net/net.h"
#include "net_helpers.h"
#include "net/proto.h"

static const struct ush_seal_key KEY = {
	.id = 5,
	.key = "range readers open sealed maps.",
};

static struct ush_lib_stats lib(void)
{
	struct ush_lib_stats s;
	ush_lib_stats(&s);
	return s;
}

/* Every record of partitions [first, first + count), as (partition,
 * map << 32 | record) in the order read: with one range reader (range),
 * or one reader per partition. Returns how many (at most cap). */
static size_t collect(const struct ush_status *st, uint32_t nst,
		      uint32_t first, uint32_t count, bool range,
		      uint64_t (*out)[2], size_t cap)
{
	size_t n = 0;
	for (uint32_t p = first; p - first < count; p += range ? count : 1) {
		ush_reader *r;
		th_ok(th_range_open(&r, st, nst, p, range ? count : 1, 20000));
		assert_int_equal(ush_reader_partition(r), p);
		const void *rec;
		size_t len;
		int ret;
		while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
			assert_true(n < cap && len >= 8);
			out[n][0] = ush_reader_partition(r);
			memcpy(&out[n][1], rec, 8);
			n++;
		}
		if (ret)
			fail_msg("partition %u: %s", p, ush_last_error());
		ush_reader_free(r);
	}
	return n;
}

static int by_part_map(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return (x[1] >> 32) < (y[1] >> 32) ? -1 : (x[1] >> 32) > (y[1] >> 32);
}

/* Within a partition maps of different workers may come in another
 * order; each map's records come in its order. Sorting by (partition,
 * map), stable by position (qsort is not: the index breaks ties),
 * compares them. */
static void same_records(const struct ush_status *st, uint32_t nst,
			 uint32_t first, uint32_t count, size_t want)
{
	size_t cap = want + 1;
	uint64_t (*a)[2] = calloc(cap, sizeof(*a));
	uint64_t (*b)[2] = calloc(cap, sizeof(*b));
	assert_non_null(a);
	assert_non_null(b);
	size_t na = collect(st, nst, first, count, true, a, cap);
	size_t nb = collect(st, nst, first, count, false, b, cap);
	assert_int_equal(na, want);
	assert_int_equal(nb, want);
	for (size_t i = 1; i < na; i++) /* partition after partition */
		assert_true(a[i][0] >= a[i - 1][0]);
	uint64_t (*sa)[3] = calloc(na, sizeof(*sa)),
		 (*sb)[3] = calloc(na, sizeof(*sb));
	for (size_t i = 0; i < na; i++) {
		memcpy(sa[i], a[i], 16);
		memcpy(sb[i], b[i], 16);
		sa[i][2] = sb[i][2] = i;
	}
	qsort(sa, na, sizeof(*sa), by_part_map); /* (part, map), then i */
	qsort(sb, na, sizeof(*sb), by_part_map);
	for (size_t i = 0; i < na; i++) {
		assert_int_equal(sa[i][0], sb[i][0]);
		assert_int_equal(sa[i][1], sb[i][1]);
	}
	free(sa);
	free(sb);
	free(a);
	free(b);
}

/* Maps 0 and 1 on workers "A,B", map 2 on "B,A": a partition's maps
 * live on different workers. 64 partitions, the last 24 empty. */
static void range_equals_parts_64(void **state)
{
	(void)state;
	struct th_worker wk[2] = {{0}};
	char ab[160], ba[160];
	th_workers_spawn(wk, 2, "range64", ab, sizeof(ab));
	snprintf(ba, sizeof(ba), "%s,%s", wk[1].addr, wk[0].addr);
	struct ush_status st[3] = {{0}};
	struct th_job j = {.workers = ab, .shuffle = 1, .partitions = 64,
			   .maps = 3, .records = 40 + 64 * 30, .statuses = st};
	struct th_job j2 = j;
	j2.workers = ba;
	th_ok(th_push_map(&j, 0, 0, NULL));
	th_ok(th_push_map(&j, 1, 0, NULL));
	th_ok(th_push_map(&j2, 2, 0, NULL));
	same_records(st, 3, 0, 64, 3ull * j.records);
	/* A range inside, empty partitions at either end of it. */
	uint32_t want = 0;
	for (uint32_t i = 0; i < j.records; i++)
		want += i % 64 >= 30 && i % 64 < 50;
	same_records(st, 3, 30, 20, 3ull * want);
	/* One connection per worker and reading thread, one FETCH each. */
	net_conn_drain();
	struct ush_lib_stats s0 = lib();
	j.range = 64;
	th_verify(&j);
	struct ush_lib_stats s1 = lib();
	assert_int_equal(s1.net_connects - s0.net_connects, 2);
	assert_int_equal(s1.net_reuses - s0.net_reuses, 0);
	/* A range past the partition count fails the open. */
	ush_reader *r;
	assert_int_equal(th_range_open(&r, st, 3, 60, 5, 0), -EINVAL);
	th_workers_stop(wk, 2);
	th_job_free(&j);
}

/* Two workers (tag) whose list goes to j->workers (list, 160 bytes),
 * and every map of j pushed to them. */
static void two_workers(struct th_worker *wk, const char *tag, char *list,
			struct th_job *j)
{
	th_workers_spawn(wk, 2, tag, list, 160);
	j->workers = list;
	for (uint32_t m = 0; m < j->maps; m++)
		th_ok(th_push_map(j, m, 0, NULL));
}

/* 10,000 partitions of two maps on two workers: one range equals ten
 * thousand readers. */
static void range_equals_parts_10000(void **state)
{
	(void)state;
	struct th_worker wk[2] = {{0}};
	char list[160];
	struct ush_status st[2] = {{0}};
	struct th_job j = {.shuffle = 2, .partitions = 10000, .maps = 2,
			   .records = 25000, .statuses = st};
	two_workers(wk, "range10k", list, &j);
	same_records(st, 2, 0, 10000, 2ull * j.records);
	th_workers_stop(wk, 2);
	th_job_free(&j);
}

/* One map over two workers, no replicas, a range of 8 partitions: the
 * worker that does not hold partition 0 is gone. The partitions before
 * its first one are read whole; the error (naming that partition) comes
 * when the range reaches it. Before, the failover of the first FETCH
 * failed the whole range at once, before any record. */
static void range_fails_where_the_holders_are_gone(void **state)
{
	(void)state;
	struct th_worker wk[2] = {{0}};
	char list[160];
	struct ush_status st[1] = {{0}};
	struct th_job j = {.shuffle = 4, .partitions = 8, .maps = 1,
			   .records = 800, .statuses = st};
	two_workers(wk, "range-gone", list, &j);
	/* Without replicas a partition's worker is a hash over the list
	 * (wk[0], wk[1]). */
	uint32_t h0 = proto_worker_of(0, 2), victim = !h0, lost = 0;
	while (lost < j.partitions && proto_worker_of(lost, 2) == h0)
		lost++;
	assert_true(lost > 0 && lost < j.partitions);
	th_worker_kill(&wk[victim]);
	ush_reader *r;
	th_ok(th_range_open(&r, st, 1, 0, j.partitions, 20000));
	const void *rec;
	size_t len;
	int ret;
	uint64_t n = 0;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		assert_true(ush_reader_partition(r) < lost);
		n++;
	}
	print_message("%llu records of partitions [0, %u), then: %s\n",
		      (unsigned long long)n, lost, ush_last_error());
	assert_true(ret < 0);
	/* Record i goes to partition i % 8. */
	assert_int_equal(n, (uint64_t)lost * j.records / j.partitions);
	char want[32];
	snprintf(want, sizeof(want), "partition %u", lost);
	assert_non_null(strstr(ush_last_error(), want));
	ush_reader_free(r);
	th_worker_stop(&wk[!victim]);
	th_rmrf(wk[victim].dir);
	th_job_free(&j);
}

static struct th_worker *victims;
static uint64_t kill_at;

static void kill_one(const struct th_job *j, uint64_t n)
{
	(void)j;
	if (n == kill_at)
		th_worker_kill(&victims[0]);
}

/* Replicas 2 over three workers, sealed maps, ranges of 100 partitions:
 * a worker SIGKILLed in the middle of a range; its entries go on at
 * their other holders, each map resumed after its verified batches, and
 * every record comes exactly once. */
static void range_failover_sealed(void **state)
{
	(void)state;
	struct th_worker wk[3] = {{0}};
	char list[240];
	th_workers_spawn(wk, 3, "range-fo", list, sizeof(list));
	struct ush_status st[2] = {{0}};
	struct ush_reader_stats rs = {0};
	struct th_job j = {.workers = list, .shuffle = 3, .partitions = 300,
			   .maps = 2, .records = 30000, .replicas = 2,
			   .seal_key = &KEY, .statuses = st, .range = 100,
			   .rsum = &rs};
	for (uint32_t m = 0; m < 2; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	victims = wk;
	kill_at = 2 * j.records / 3 + 500; /* in the last range */
	j.checked = kill_one;
	th_verify(&j);
	print_message("failovers %u, resumed batches %llu, duplicates %llu\n",
		      rs.failovers, (unsigned long long)rs.resumed_batches,
		      (unsigned long long)rs.dup_batches);
	assert_true(rs.failovers >= 1);
	th_workers_stop(wk + 1, 2);
	th_rmrf(wk[0].dir);
	th_job_free(&j);
}

/* A range reader freed after its first record: its streams are closed,
 * not pooled; the next readers read exactly their own records. */
static void freed_mid_range(void **state)
{
	(void)state;
	struct th_worker wk[2] = {{0}};
	char list[160];
	struct ush_status st[1] = {{0}};
	struct th_job j = {.shuffle = 4, .partitions = 200, .maps = 1,
			   .records = 40000, .statuses = st, .range = 200};
	two_workers(wk, "range-free", list, &j);
	th_verify(&j); /* both connections pooled */
	ush_reader *r;
	const void *rec;
	size_t len;
	struct ush_lib_stats s0 = lib();
	th_ok(th_range_open(&r, st, 1, 0, 200, 0));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	ush_reader_free(r);
	th_verify(&j);
	j.range = 7;
	th_verify(&j);
	struct ush_lib_stats s1 = lib();
	/* The two pooled ones taken and closed with the freed reader, two
	 * new ones for the rest. */
	assert_int_equal(s1.net_connects - s0.net_connects, 2);
	th_workers_stop(wk, 2);
	th_job_free(&j);
}

/* Sends FETCH payload p (n bytes) of shuffle s from partition first on
 * a new reader connection; expects ERROR code with want in its
 * message. */
static void refused(int port, uint32_t s, uint32_t first, const uint8_t *p,
		    uint32_t n, int code, const char *want)
{
	int fd = th_raw_connect(port);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER, 0, 0, 0,
				0, 0, "default", 0, {0}};
	th_hello(fd, h);
	uint8_t b[4096];
	struct ushi_frame f;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_HELLO);
	struct ushi_frame q = {.type = USHI_FRAME_FETCH, .shuffle = s,
			      .partition = first, .raw_len = n,
			      .payload_len = n};
	assert_true(n + USH_FRAME_HDR_SIZE + USHI_MAC_TAG <= sizeof(b));
	memcpy(b + USH_FRAME_HDR_SIZE, p, n);
	frame_encode(b, &q);
	th_send_ctrl(fd, b, proto_size(&q));
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_ERROR);
	char msg[USHI_PROTO_ERRMSG_MAX];
	int got = proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg,
				  sizeof(msg));
	print_message("refused: %d %s\n", got, msg);
	assert_int_equal(got, code);
	assert_non_null(strstr(msg, want));
	close(fd);
}

/* A FETCH payload of the range count and the n entries w. */
static uint32_t fetch_payload(uint8_t *p, uint32_t count,
			      const struct proto_want *w, uint32_t n)
{
	uint8_t b[1024];
	size_t len = proto_put_fetch(b, 0, 0, count, 0, w, n);
	memcpy(p, b + USH_FRAME_HDR_SIZE, len - USH_FRAME_HDR_SIZE);
	return (uint32_t)(len - USH_FRAME_HDR_SIZE);
}

/* Garbage in a range FETCH, over a real socket: each is refused with an
 * ERROR that says what, and the worker goes on serving. */
static void malformed_range(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("range-bad"));
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 5, .partitions = 8,
			   .maps = 1, .records = 80, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	uint8_t p[512];
	struct proto_want ok = {2, 0, 0, 0}, two[2] = {{3, 0, 0, 0},
						       {2, 0, 0, 0}};
	uint32_t n = fetch_payload(p, 0, &ok, 1);
	refused(w.port, 5, 2, p, n, -EINVAL, "count 0");
	n = fetch_payload(p, 2, &ok, 1);
	refused(w.port, 5, USHI_PARTS_MAX - 1, p, n, -EINVAL,
		"beyond the 16777216 partitions");
	n = fetch_payload(p, 0x20, &ok, 1);
	refused(w.port, 5, 0xfffffff0u, p, n, -EINVAL, "beyond the");
	n = fetch_payload(p, 1, &two[0], 1);
	refused(w.port, 5, 2, p, n, -EINVAL, "names partition 3, outside");
	n = fetch_payload(p, 4, two, 2);
	refused(w.port, 5, 2, p, n, USH_ECORRUPT, "not ascending");
	n = fetch_payload(p, 4, &ok, 1);
	p[12] = 1; /* the range's zero field */
	refused(w.port, 5, 2, p, n, -EINVAL, "bytes 12..15");
	n = fetch_payload(p, 4, &ok, 1);
	p[USHI_PROTO_FETCH_LEN + 12] = 1; /* the entry's */
	refused(w.port, 5, 2, p, n, -EINVAL, "entry 0: bytes 12..15");
	/* A length that is no whole entry, and one above the bound: refused
	 * at the header. */
	refused(w.port, 5, 2, p, USHI_PROTO_FETCH_LEN + 20, USH_ECORRUPT,
		"FETCH length");
	int fd = th_raw_connect(w.port);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER, 0, 0, 0,
				0, 0, "default", 0, {0}};
	th_hello(fd, h);
	uint8_t b[4096];
	struct ushi_frame f;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_HELLO);
	struct ushi_frame q = {.type = USHI_FRAME_FETCH, .shuffle = 5};
	frame_encode(b, &q);
	/* The lengths go in after the CRC: refused at the header, the
	 * frame needs none. */
	put_le32(b + 32, USHI_PROTO_CTRL_MAX + 8);
	put_le32(b + 36, USHI_PROTO_CTRL_MAX + 8);
	th_send_all(fd, b, USH_FRAME_HDR_SIZE);
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_ERROR);
	close(fd);
	th_verify(&j); /* still serving */
	j.range = 8;
	th_verify(&j);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_job_free(&j);
}

/* A range FETCH that plans no frame on a worker of several threads (the
 * skips of a reader failing over cover every batch of what it asks):
 * answered with a MANIFEST and an empty FETCH_END. It once gave qsort()
 * a NULL array, which the sanitized worker aborted on. */
static void range_plans_nothing(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("range-none"));
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 6, .partitions = 8,
			   .maps = 1, .records = 80, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	struct proto_want all[2] = {{2, 0, 0, UINT64_MAX >> 1},
				    {3, 0, 0, 1000}};
	for (uint32_t n = 1; n <= 2; n++) {
		int fd = th_raw_connect(w.port);
		struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER,
					0, 0, 0, 0, 0, "default", 0, {0}};
		th_hello(fd, h);
		uint8_t b[4096];
		struct ushi_frame f;
		assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f),
				 USHI_FRAME_HELLO);
		size_t len = proto_put_fetch(b, 6, 2, 4, 0, all, n);
		th_send_ctrl(fd, b, len);
		assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f),
				 USHI_FRAME_MANIFEST);
		assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f),
				 USHI_FRAME_FETCH_END);
		close(fd);
	}
	assert_true(th_worker_alive(&w));
	j.range = 4;
	th_verify(&j); /* still serving */
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_job_free(&j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(range_equals_parts_64),
		cmocka_unit_test(range_equals_parts_10000),
		cmocka_unit_test(range_failover_sealed),
		cmocka_unit_test(range_fails_where_the_holders_are_gone),
		cmocka_unit_test(freed_mid_range),
		cmocka_unit_test(malformed_range),
		cmocka_unit_test(range_plans_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
