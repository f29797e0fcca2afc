/*
 * Malformed input against a real ushuffled: each bad connection gets an
 * ERROR frame or a close, the worker stays up, and a normal job pushed at
 * the same time succeeds and verifies.
 */
#include "net_helpers.h"
#include "net/proto.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

static struct th_worker wk;

static int raw_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)wk.port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	/* Generous: the worker closes silent peers after 1 s here. */
	struct timeval tv = {30, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void hello(int fd, uint32_t version)
{
	uint8_t b[USHI_PROTO_SMALL];
	struct proto_hello h = {version, USHI_ROLE_WRITER, 0, 0};
	send_all(fd, b, proto_put_hello(b, &h));
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
		if (f.type == USHI_FRAME_ERROR) {
			proto_get_error(buf + off + USH_FRAME_HDR_SIZE,
					f.payload_len, msg, n);
			return 1;
		}
		off += proto_size(&f);
	}
	msg[0] = 0;
	return 0;
}

static size_t data_frame(uint8_t *b, uint32_t payload)
{
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = 77,
			      .partition = 0, .raw_len = payload,
			      .payload_len = payload, .nrec = 1};
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
	int fd = raw_connect();
	send(fd, b, sizeof(b), MSG_NOSIGNAL);
	expect_error(fd, "bad frame header");
}

static void truncated_then_close(void **state)
{
	(void)state;
	uint8_t b[2048];
	int fd = raw_connect();
	hello(fd, USHI_PROTO_VERSION);
	size_t n = data_frame(b, 1000);
	send_all(fd, b, n - 500);
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
	int fd = raw_connect();
	hello(fd, USHI_PROTO_VERSION);
	send_all(fd, b, USH_FRAME_HDR_SIZE);
	expect_error(fd, "maximum size");
	/* A control frame claiming a huge count. */
	struct ushi_frame m = {.type = USHI_FRAME_MAPPER_END, .seq = 1ull << 40,
			      .raw_len = 12, .payload_len = 12};
	frame_encode(b, &m);
	put_le64(b + 24, 1ull << 40);
	fd = raw_connect();
	hello(fd, USHI_PROTO_VERSION);
	send_all(fd, b, USH_FRAME_HDR_SIZE);
	expect_error(fd, "MAPPER_END length");
}

static void wrong_crc(void **state)
{
	(void)state;
	uint8_t b[4096];
	size_t n = data_frame(b, 3000);
	b[n - 7] ^= 0x20;
	int fd = raw_connect();
	hello(fd, USHI_PROTO_VERSION);
	send_all(fd, b, n);
	expect_error(fd, "CRC32C mismatch");
}

static void unknown_type(void **state)
{
	(void)state;
	uint8_t b[USH_FRAME_HDR_SIZE];
	struct ushi_frame f = {.type = 42};
	frame_encode(b, &f);
	int fd = raw_connect();
	hello(fd, USHI_PROTO_VERSION);
	send_all(fd, b, sizeof(b));
	expect_error(fd, "unknown frame type");
}

static void wrong_version(void **state)
{
	(void)state;
	char msg[600];
	int fd = raw_connect();
	hello(fd, 99);
	assert_int_equal(outcome(fd, msg, sizeof(msg)), 1);
	/* The refusal names both versions. */
	assert_non_null(strstr(msg, "version 99"));
	assert_non_null(strstr(msg, "speaks version 1"));
	assert_true(th_worker_alive(&wk));
}

static void data_before_hello(void **state)
{
	(void)state;
	uint8_t b[256];
	int fd = raw_connect();
	send_all(fd, b, data_frame(b, 100));
	expect_error(fd, "before HELLO");
}

static void silent_peer(void **state)
{
	(void)state;
	int fd = raw_connect();
	expect_error(fd, NULL); /* closed (after an ERROR) for silence */
}

/* A one-record DATA frame of shuffle s, map 0, partition 0, seq. */
static size_t rec_frame(uint8_t *b, uint32_t s, uint64_t seq, const char *r)
{
	uint32_t n = (uint32_t)strlen(r);
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = s,
			      .seq = seq, .raw_len = 4 + n,
			      .payload_len = 4 + n, .nrec = 1};
	put_le32(b + USH_FRAME_HDR_SIZE, n);
	memcpy(b + USH_FRAME_HDR_SIZE + 4, r, n);
	frame_encode(b, &f);
	return USH_FRAME_HDR_SIZE + 4 + n;
}

/* Pushes frames by hand, commits claiming `claimed` batches, and waits
 * for the commit ACK. */
static void raw_push(uint32_t s, uint64_t claimed)
{
	uint8_t b[256];
	int fd = raw_connect();
	hello(fd, USHI_PROTO_VERSION);
	send_all(fd, b, rec_frame(b, s, 0, "first"));
	send_all(fd, b, rec_frame(b, s, 0, "first")); /* a duplicate */
	send_all(fd, b, rec_frame(b, s, 1, "second"));
	struct proto_count e = {0, claimed};
	send_all(fd, b, proto_put_mapper_end(b, s, 0, 0, 1, &e, 1));
	for (;;) {
		struct ushi_frame f;
		const char *why;
		struct proto_ack a;
		assert_int_equal(recv(fd, b, 64, MSG_WAITALL), 64);
		assert_int_equal(proto_header(b, &f, 4096, false, &why), 0);
		if (f.type == USHI_FRAME_HELLO)
			continue; /* the reply to ours, 64 bytes too */
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
	raw_push(50, 2);
	struct ush_reader_opts ro = {.size = sizeof(ro), .shuffle = 50,
		.partition = 0, .maps = 1, .workers = wk.addr};
	th_ok(ush_reader_open(&r, &ro));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_memory_equal(rec, "first", len);
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_memory_equal(rec, "second", len);
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	/* A MAPPER_END that claims a batch that never came. */
	raw_push(51, 3);
	ro.shuffle = 51;
	th_ok(ush_reader_open(&r, &ro));
	int ret;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1)
		;
	assert_int_equal(ret, USH_ECORRUPT);
	assert_non_null(strstr(ush_last_error(), "MAPPER_END says 3"));
	ush_reader_free(r);
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
	struct job_arg a = {.j = {.workers = list, .shuffle = 3,
				  .partitions = 7, .maps = 2,
				  .records = 40000}};
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
	pthread_join(tid, NULL);
	th_ok(a.ret[0]);
	th_ok(a.ret[1]);
	th_verify(&a.j);
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
		cmocka_unit_test(random_bytes),
		cmocka_unit_test(truncated_then_close),
		cmocka_unit_test(oversized_length),
		cmocka_unit_test(wrong_crc),
		cmocka_unit_test(unknown_type),
		cmocka_unit_test(wrong_version),
		cmocka_unit_test(data_before_hello),
		cmocka_unit_test(silent_peer),
		cmocka_unit_test(duplicates_and_counts),
		cmocka_unit_test(all_at_once),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
