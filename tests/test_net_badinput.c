/*
 * Malformed input against a real ushuffled: each bad connection gets an
 * ERROR frame or a close, the worker stays up, and a normal job pushed at
 * the same time succeeds and verifies.
 */
#include "net_helpers.h"
#include "core/status.h"
#include "net/proto.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

static struct th_worker wk;

/* Each hand-made writer connection names an attempt of its own (of
 * shuffle 77, map 0): one left behind by an earlier connection would be
 * refused (-EEXIST). DATA frames of it carry cur_attempt. */
static uint32_t cur_attempt;

static void hello(int fd, uint32_t version)
{
	static uint32_t next_attempt = 100;
	uint8_t b[USHI_PROTO_SMALL];
	cur_attempt = next_attempt++;
	struct proto_hello h = {version, USHI_ROLE_WRITER, 0, 0, 77, 0,
				cur_attempt, "default", 0, {0}};
	if (version == USHI_PROTO_VERSION)
		th_hello(fd, h); /* authenticated, as the library does */
	else
		th_send_all(fd, b, proto_put_hello(b, &h));
}

/* Reads until EOF: returns 1 if an ERROR frame came (its message in
 * msg), 0 on a bare close. Fails on a timeout: the worker must act. */
static int outcome(int fd, char *msg, size_t n)
{
	uint8_t buf[8192];
	size_t got = 0;
	for (;;) {
		ssize_t r = recv(fd, buf + got, sizeof(buf) - got, 0);
		if (r < 0 && errno == ECONNRESET)
			break;
		if (r < 0)
			fail_msg("worker neither answered nor closed: %s",
				 strerror(errno));
		if (r == 0)
			break;
		got += (size_t)r;
		if (got == sizeof(buf))
			got = 0;
	}
	close(fd);
	/* Skip the HELLO reply if one came first. */
	size_t off = 0;
	while (got - off >= USH_FRAME_HDR_SIZE) {
		struct ushi_frame f;
		const char *why;
		if (proto_header(buf + off, &f, 1u << 20, false, &why) ||
		    proto_size(&f) > got - off)
			break;
		size_t size = proto_size(&f);
		th_open(fd, buf + off, &f);
		if (f.type == USHI_FRAME_ERROR) {
			proto_get_error(buf + off + USH_FRAME_HDR_SIZE,
					f.payload_len, msg, n);
			return 1;
		}
		off += size;
	}
	msg[0] = 0;
	return 0;
}

static size_t data_frame(uint8_t *b, uint32_t payload)
{
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = 77,
			      .attempt = cur_attempt, .partition = 0,
			      .raw_len = payload, .payload_len = payload,
			      .nrec = 1};
	put_le32(b + USH_FRAME_HDR_SIZE, payload - 4);
	memset(b + USH_FRAME_HDR_SIZE + 4, 'x', payload - 4);
	frame_encode(b, &f);
	return USH_FRAME_HDR_SIZE + payload;
}

static void expect_error(int fd, const char *want)
{
	char msg[600];
	int e = outcome(fd, msg, sizeof(msg));
	if (want && (!e || !strstr(msg, want)))
		fail_msg("expected an ERROR with '%s', got %s '%s'", want,
			 e ? "ERROR" : "a close", msg);
	assert_true(th_worker_alive(&wk));
}

static void random_bytes(void **state)
{
	(void)state;
	uint8_t b[65536];
	th_fill(b, sizeof(b), 42);
	int fd = th_raw_connect(wk.port);
	send(fd, b, sizeof(b), MSG_NOSIGNAL);
	expect_error(fd, "bad frame header");
}

static void truncated_then_close(void **state)
{
	(void)state;
	uint8_t b[2048];
	int fd = th_raw_connect(wk.port);
	hello(fd, USHI_PROTO_VERSION);
	size_t n = data_frame(b, 1000);
	th_send_all(fd, b, n - 500);
	shutdown(fd, SHUT_WR);
	expect_error(fd, NULL);
}

static void oversized_length(void **state)
{
	(void)state;
	uint8_t b[USH_FRAME_HDR_SIZE + 16] = {0};
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .nrec = 1};
	frame_encode(b, &f);
	/* Lengths patched after the CRC: the bound is checked first. */
	put_le32(b + 32, 1u << 30);
	put_le32(b + 36, 1u << 30);
	int fd = th_raw_connect(wk.port);
	hello(fd, USHI_PROTO_VERSION);
	th_send_all(fd, b, USH_FRAME_HDR_SIZE);
	expect_error(fd, "maximum size");
	/* A MAPPER_END with a payload (version 1's counts): version 2's
	 * is a bare header. */
	struct ushi_frame m = {.type = USHI_FRAME_MAPPER_END, .shuffle = 77,
			      .attempt = cur_attempt, .seq = 1ull << 40,
			      .raw_len = 12, .payload_len = 12};
	frame_encode(b, &m);
	fd = th_raw_connect(wk.port);
	hello(fd, USHI_PROTO_VERSION);
	th_send_all(fd, b, USH_FRAME_HDR_SIZE);
	expect_error(fd, "MAPPER_END, MANIFEST");
	/* FETCHes of a bad length: half an attempt, then none at all. */
	static const uint32_t lens[] = {USHI_PROTO_FETCH_LEN + 4,
					USHI_PROTO_FETCH_LEN, 8};
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		struct ushi_frame q = {.type = USHI_FRAME_FETCH, .shuffle = 77,
				      .raw_len = lens[i],
				      .payload_len = lens[i]};
		frame_encode(b, &q);
		struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER,
					0, 0, 0, 0, 0, "default", 0, {0}};
		fd = th_raw_connect(wk.port);
		th_hello(fd, h);
		th_send_all(fd, b, USH_FRAME_HDR_SIZE);
		expect_error(fd, "FETCH length");
	}
}

static void wrong_crc(void **state)
{
	(void)state;
	uint8_t b[4096];
	size_t n = data_frame(b, 3000);
	b[n - 7] ^= 0x20;
	int fd = th_raw_connect(wk.port);
	hello(fd, USHI_PROTO_VERSION);
	th_send_all(fd, b, n);
	expect_error(fd, "CRC32C mismatch");
}

static void unknown_type(void **state)
{
	(void)state;
	uint8_t b[USH_FRAME_HDR_SIZE];
	struct ushi_frame f = {.type = 42};
	frame_encode(b, &f);
	int fd = th_raw_connect(wk.port);
	hello(fd, USHI_PROTO_VERSION);
	th_send_all(fd, b, sizeof(b));
	expect_error(fd, "unknown frame type");
}

static void wrong_version(void **state)
{
	(void)state;
	/* Nonsense, and the version before this one (a client of before
	 * control-frame MACs, whose HELLO has this one's length). The
	 * refusal names both versions. */
	const uint32_t versions[] = {99, USHI_PROTO_VERSION - 1};
	for (unsigned i = 0; i < 2; i++) {
		char msg[600], want[64];
		int fd = th_raw_connect(wk.port);
		hello(fd, versions[i]);
		assert_int_equal(outcome(fd, msg, sizeof(msg)), 1);
		snprintf(want, sizeof(want), "version %u is not supported",
			 versions[i]);
		assert_non_null(strstr(msg, want));
		snprintf(want, sizeof(want), "speaks version %u",
			 USHI_PROTO_VERSION);
		assert_non_null(strstr(msg, want));
	}
	assert_true(th_worker_alive(&wk));
}

static void data_before_hello(void **state)
{
	(void)state;
	uint8_t b[256];
	int fd = th_raw_connect(wk.port);
	th_send_all(fd, b, data_frame(b, 100));
	expect_error(fd, "before HELLO");
}

static void silent_peer(void **state)
{
	(void)state;
	int fd = th_raw_connect(wk.port);
	expect_error(fd, NULL); /* closed (after an ERROR) for silence */
}

/* A writer writes only the attempt its HELLO named: DATA or MAPPER_END
 * of another attempt (or map, or shuffle) is refused. */
static void frames_of_another_attempt(void **state)
{
	(void)state;
	uint8_t b[256];
	for (int k = 0; k < 4; k++) {
		int fd = th_raw_connect(wk.port);
		hello(fd, USHI_PROTO_VERSION);
		size_t n = data_frame(b, 100);
		struct ushi_frame f;
		const char *why;
		assert_int_equal(proto_header(b, &f, 4096, false, &why), 0);
		if (k == 0)
			f.attempt++;
		else if (k == 1)
			f.map++;
		else if (k == 2)
			f.shuffle++;
		if (k < 3) {
			frame_encode(b, &f);
		} else {
			th_send_all(fd, b, n); /* its own attempt: taken */
			n = proto_put_mapper_end(b, 77, 0, cur_attempt + 1);
		}
		th_send_ctrl(fd, b, n);
		expect_error(fd, "from the writer of shuffle 77 map 0");
	}
}

/* Reads one whole control frame (at most 128 bytes) into b. */
static void recv_frame(int fd, uint8_t *b, struct ushi_frame *f)
{
	const char *why;
	assert_int_equal(recv(fd, b, USH_FRAME_HDR_SIZE, MSG_WAITALL),
			 USH_FRAME_HDR_SIZE);
	assert_int_equal(proto_header(b, f, 4096, false, &why), 0);
	assert_true(f->payload_len <= USHI_PROTO_SMALL - USH_FRAME_HDR_SIZE);
	if (f->payload_len)
		assert_int_equal(recv(fd, b + USH_FRAME_HDR_SIZE,
				      f->payload_len, MSG_WAITALL),
				 f->payload_len);
	th_open(fd, b, f);
}

/* The status a driver would hold for map 0 attempt 0 of shuffle s on
 * this worker: one partition of `batches` batches with checksum sum. */
static void make_status(struct ush_status *st, uint32_t s, uint64_t batches,
			uint32_t sum)
{
	th_status_one_part(st, "default", wk.addr, s, batches, sum);
}

/* Pushes frames by hand (of map 0 attempt 0 of shuffle s: seq 0, a
 * duplicate of it, seq 1), commits with an empty MAPPER_END and waits for
 * the commit ACK. *sum gets the checksum of the two batches. */
static void raw_push(uint32_t s, uint32_t *sum)
{
	uint8_t b[256];
	uint32_t crc[3];
	int fd = th_raw_connect(wk.port);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				0, 0, "default", 0, {0}};
	th_hello(fd, h);
	th_send_all(fd, b, th_rec_frame(b, s, 0, "first", &crc[0]));
	th_send_all(fd, b, th_rec_frame(b, s, 0, "first", &crc[1])); /* a dup */
	th_send_all(fd, b, th_rec_frame(b, s, 1, "second", &crc[2]));
	*sum = ~status_sum_add(status_sum_add(USHI_SUM_INIT, crc[0]), crc[2]);
	th_send_ctrl(fd, b, proto_put_mapper_end(b, s, 0, 0));
	for (;;) {
		struct ushi_frame f;
		struct proto_ack a;
		recv_frame(fd, b, &f);
		if (f.type == USHI_FRAME_HELLO)
			continue; /* the reply to ours */
		assert_int_equal(f.type, USHI_FRAME_ACK);
		proto_get_ack(b + USH_FRAME_HDR_SIZE, &a);
		if (a.kind == USHI_ACK_COMMIT) {
			assert_int_equal(a.status, 0);
			break;
		}
	}
	close(fd);
}

static void duplicates_and_counts(void **state)
{
	(void)state;
	const void *rec;
	size_t len;
	ush_reader *r;
	uint32_t sum;
	struct ush_status st;
	raw_push(50, &sum);
	make_status(&st, 50, 2, sum);
	th_ok(th_reader_open(&r, &st, 1, 0, 0));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_memory_equal(rec, "first", len);
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_memory_equal(rec, "second", len);
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	th_status_free(&st);
	/* A status that claims a batch that never came, then one with the
	 * right count and another checksum. */
	raw_push(51, &sum);
	for (int k = 0; k < 2; k++) {
		make_status(&st, 51, k ? 2 : 3, k ? sum ^ 1 : sum);
		th_ok(th_reader_open(&r, &st, 1, 0, 0));
		int ret;
		while ((ret = ush_reader_next(r, &rec, &len)) == 1)
			;
		assert_int_equal(ret, USH_ECORRUPT);
		const char *want = k ? "its map status says 2"
				     : "its map status says 3";
		if (!strstr(ush_last_error(), want))
			fail_msg("\"%s\" lacks \"%s\"", ush_last_error(),
				 want);
		ush_reader_free(r);
		th_status_free(&st);
	}
}

/* Reads frames until an ACK of kind; its status must be 0. */
static void wait_ack(int fd, uint32_t kind)
{
	uint8_t b[USHI_PROTO_SMALL];
	for (;;) {
		struct ushi_frame f;
		struct proto_ack a;
		recv_frame(fd, b, &f);
		if (f.type != USHI_FRAME_ACK)
			continue; /* the HELLO reply */
		proto_get_ack(b + USH_FRAME_HDR_SIZE, &a);
		if (a.kind == kind) {
			assert_int_equal(a.status, 0);
			return;
		}
	}
}

/* A writer whose attempt was dropped under it, and then opened by
 * another writer, cannot write into, commit or abandon the new one. */
static void dropped_writer_cannot_touch_the_next(void **state)
{
	(void)state;
	uint8_t b[256];
	uint32_t crc[3], s = 60;
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				0, 0, "default", 0, {0}};
	int old = th_raw_connect(wk.port);
	th_hello(old, h);
	th_send_ctrl(old, b, proto_put_drop(b, s));
	wait_ack(old, USHI_ACK_DROP);
	int now = th_raw_connect(wk.port);
	th_hello(now, h);
	th_send_all(now, b, th_rec_frame(b, s, 0, "good0", &crc[0]));
	/* The new writer's frame is taken (its credit comes back) before
	 * the old one's frame is sent. */
	wait_ack(now, USHI_ACK_CREDIT);
	th_send_all(old, b, th_rec_frame(b, s, 0, "EVIL", &crc[2]));
	expect_error(old, "dropped since");
	th_send_all(now, b, th_rec_frame(b, s, 1, "good1", &crc[1]));
	th_send_ctrl(now, b, proto_put_mapper_end(b, s, 0, 0));
	wait_ack(now, USHI_ACK_COMMIT);
	close(now);
	struct ush_status st;
	make_status(&st, s, 2,
		    ~status_sum_add(status_sum_add(USHI_SUM_INIT, crc[0]),
				    crc[1]));
	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(th_reader_open(&r, &st, 1, 0, 0));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_memory_equal(rec, "good0", len);
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_memory_equal(rec, "good1", len);
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	th_status_free(&st);
}

/* A writer whose MAPPER_END and the start of its next frame (a
 * HEARTBEAT) arrive in one receive, the rest of that frame only after the
 * commit ACK: the frame's bytes received before the commit are kept, and
 * the HEARTBEAT is answered (the in-place receive buffer, given back at
 * the commit, must not take them with it). */
static void frame_split_across_commit(void **state)
{
	(void)state;
	uint8_t b[256];
	uint32_t crc, s = 63;
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				0, 0, "default", 0, {0}};
	int fd = th_raw_connect(wk.port);
	th_hello(fd, h);
	th_send_all(fd, b, th_rec_frame(b, s, 0, "only", &crc));
	size_t n = proto_put_mapper_end(b, s, 0, 0);
	size_t hb = proto_put_heartbeat(b + n);
	th_seal(fd, b, n + hb); /* each frame grows by its tag */
	n += USHI_MAC_TAG;
	hb += USHI_MAC_TAG;
	th_send_all(fd, b, n + hb / 2);
	wait_ack(fd, USHI_ACK_COMMIT);
	th_send_all(fd, b + n + hb / 2, hb - hb / 2);
	wait_ack(fd, USHI_ACK_HEARTBEAT);
	close(fd);
}

/* A one-record DATA frame of shuffle s (map 0, attempt 0, partition 0)
 * of total bytes in all, its record filled from seq; returns total. */
static size_t sized_frame(uint8_t *b, uint32_t s, uint64_t seq, size_t total,
			  uint32_t *crc)
{
	uint32_t payload = (uint32_t)(total - USH_FRAME_HDR_SIZE);
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = s,
			      .seq = seq, .raw_len = payload,
			      .payload_len = payload, .nrec = 1};
	put_le32(b + USH_FRAME_HDR_SIZE, payload - 4);
	th_fill(b + USH_FRAME_HDR_SIZE + 4, payload - 4, seq + 1);
	frame_encode(b, &f);
	*crc = f.crc;
	return total;
}

/* Frames of the in-place receive buffer's size (the worker's flush size,
 * 1 MiB), one byte above it, small ones around them, a HEARTBEAT between
 * DATA frames and the MAPPER_END behind the last, all sent at once: every
 * record reads back, in order, whole. */
static void frames_around_the_buffer_size(void **state)
{
	(void)state;
	const size_t mib = 1u << 20;
	const size_t sizes[] = {100, mib, mib + 1, 200, mib, 60, mib - 48,
				mib + 4096, 300};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	uint32_t s = 64, crc, sum = USHI_SUM_INIT;
	size_t cap = 8 * mib, n = 0;
	uint8_t *b = malloc(cap), *chk = malloc(mib + 4096);
	assert_non_null(b);
	assert_non_null(chk);
	for (uint64_t i = 0; i < N; i++) {
		n += sized_frame(b + n, s, i, sizes[i], &crc);
		sum = status_sum_add(sum, crc);
		if (i == 3)
			n += proto_put_heartbeat(b + n);
	}
	n += proto_put_mapper_end(b + n, s, 0, 0);
	assert_true(n <= cap);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				0, 0, "default", 0, {0}};
	int fd = th_raw_connect(wk.port);
	th_hello(fd, h);
	th_send_ctrl(fd, b, n);
	wait_ack(fd, USHI_ACK_COMMIT);
	close(fd);
	struct ush_status st;
	make_status(&st, s, N, ~sum);
	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(th_reader_open(&r, &st, 1, 0, 0));
	for (uint64_t i = 0; i < N; i++) {
		assert_int_equal(ush_reader_next(r, &rec, &len), 1);
		assert_int_equal(len, sizes[i] - USH_FRAME_HDR_SIZE - 4);
		th_fill(chk, len, i + 1);
		assert_memory_equal(rec, chk, len);
	}
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	th_status_free(&st);
	free(b);
	free(chk);
}

struct job_arg {
	struct th_job j;
	int ret[2];
};

static void *normal_job(void *p)
{
	struct job_arg *a = p;
	for (uint32_t m = 0; m < a->j.maps; m++)
		a->ret[m] = th_push_map(&a->j, m, 0, NULL);
	return NULL;
}

static void all_at_once(void **state)
{
	char list[64];
	snprintf(list, sizeof(list), "%s", wk.addr);
	struct ush_status statuses[2] = {{0}};
	struct job_arg a = {.j = {.workers = list, .shuffle = 3,
				  .partitions = 7, .maps = 2,
				  .records = 40000, .statuses = statuses}};
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, normal_job, &a), 0);
	random_bytes(state);
	truncated_then_close(state);
	oversized_length(state);
	wrong_crc(state);
	unknown_type(state);
	wrong_version(state);
	data_before_hello(state);
	silent_peer(state);
	frames_of_another_attempt(state);
	pthread_join(tid, NULL);
	th_ok(a.ret[0]);
	th_ok(a.ret[1]);
	th_verify(&a.j);
	th_job_free(&a.j);
	assert_true(th_worker_alive(&wk));
}

static int setup(void **state)
{
	(void)state;
	snprintf(wk.dir, sizeof(wk.dir), "%s", th_tmpdir("netbad"));
	wk.extra = "--hello-timeout=1000";
	th_worker_spawn(&wk, "127.0.0.1", 0, 2);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	th_worker_stop(&wk);
	th_rmrf(wk.dir);
	return 0;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dropped_writer_cannot_touch_the_next),
		cmocka_unit_test(random_bytes),
		cmocka_unit_test(truncated_then_close),
		cmocka_unit_test(oversized_length),
		cmocka_unit_test(wrong_crc),
		cmocka_unit_test(unknown_type),
		cmocka_unit_test(wrong_version),
		cmocka_unit_test(data_before_hello),
		cmocka_unit_test(silent_peer),
		cmocka_unit_test(frames_of_another_attempt),
		cmocka_unit_test(duplicates_and_counts),
		cmocka_unit_test(frame_split_across_commit),
		cmocka_unit_test(frames_around_the_buffer_size),
		cmocka_unit_test(all_at_once),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
