/* The worker protocol's frames: bounds before use, round trips, the
 * control-frame MACs, and the partition -> worker hash. */
#include "helpers.h"
#include "net/mac.h"
#include "net/proto.h"

#include <errno.h>

static void control_round_trips(void **state)
{
	(void)state;
	uint8_t b[USHI_PROTO_ERROR_SIZE + 64];
	struct ushi_frame f;
	const char *why;
	/* A writer's HELLO names its attempt in the header, every HELLO
	 * its application in the payload. */
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 4096,
				1u << 20, 7, 3, 2, "app-1:x", 0, {0}}, h2;
	h.flags = USHI_HELLO_AUTH;
	memset(h.nonce, 0xa5, sizeof(h.nonce));
	assert_int_equal(proto_put_hello(b, &h), 48 + 120);
	assert_int_equal(proto_header(b, &f, 1u << 20, false, &why), 0);
	assert_int_equal(frame_check(b, &f), 0);
	assert_int_equal(f.type, USHI_FRAME_HELLO);
	assert_int_equal(f.shuffle, 7);
	assert_int_equal(f.map, 3);
	assert_int_equal(f.attempt, 2);
	proto_get_hello(&f, b + USH_FRAME_HDR_SIZE, &h2);
	/* Field by field: the struct has padding after app. */
	assert_int_equal(h2.version, h.version);
	assert_int_equal(h2.role, h.role);
	assert_int_equal(h2.window, h.window);
	assert_int_equal(h2.max_frame, h.max_frame);
	assert_int_equal(h2.shuffle, 7);
	assert_int_equal(h2.map, 3);
	assert_int_equal(h2.attempt, 2);
	assert_string_equal(h2.app, h.app);
	assert_int_equal(h2.flags, USHI_HELLO_AUTH);
	assert_memory_equal(h2.nonce, h.nonce, sizeof(h.nonce));
	/* AUTH: step, nonce and proof. */
	struct proto_auth au = {USHI_AUTH_CHALLENGE, {0}, {0}}, au2;
	memset(au.nonce, 1, sizeof(au.nonce));
	memset(au.mac, 2, sizeof(au.mac));
	assert_int_equal(proto_put_auth(b, &au), 48 + 72);
	assert_int_equal(proto_header(b, &f, 1u << 20, false, &why), 0);
	assert_int_equal(frame_check(b, &f), 0);
	assert_int_equal(f.type, USHI_FRAME_AUTH);
	proto_get_auth(b + USH_FRAME_HDR_SIZE, &au2);
	assert_int_equal(au2.step, USHI_AUTH_CHALLENGE);
	assert_memory_equal(au2.nonce, au.nonce, sizeof(au.nonce));
	assert_memory_equal(au2.mac, au.mac, sizeof(au.mac));
	assert_true(proto_app_ok("app-1:x"));
	assert_true(proto_app_ok("a") && !proto_app_ok(""));
	assert_false(proto_app_ok("a b") || proto_app_ok("a/b") ||
		     proto_app_ok("../x"));
	char big[66];
	memset(big, 'a', 65);
	big[65] = 0;
	assert_false(proto_app_ok(big));
	big[64] = 0;
	assert_true(proto_app_ok(big));

	struct proto_ack a = {USHI_ACK_COMMIT, USH_ECOMMITTED, 12345}, a2;
	proto_put_ack(b, 1, 2, 3, &a);
	assert_int_equal(proto_header(b, &f, 1u << 20, false, &why), 0);
	proto_get_ack(b + USH_FRAME_HDR_SIZE, &a2);
	assert_int_equal(a2.status, USH_ECOMMITTED);
	assert_int_equal(a2.value, 12345);
	assert_int_equal(f.map, 2);

	char msg[USHI_PROTO_ERRMSG_MAX];
	char longmsg[2000];
	memset(longmsg, 'z', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = 0;
	size_t n = proto_put_error(b, -EPROTO, longmsg);
	/* Truncated to the bound, which leaves room for a tag. */
	assert_int_equal(n, USHI_PROTO_ERROR_SIZE - USHI_MAC_TAG);
	assert_int_equal(proto_header(b, &f, 1u << 20, false, &why), 0);
	assert_int_equal(proto_get_error(b + USH_FRAME_HDR_SIZE,
					 f.payload_len, msg, sizeof(msg)),
			 -EPROTO);
	assert_int_equal(strlen(msg), sizeof(msg) - 1);

	/* MAPPER_END and MANIFEST: bare headers naming what they are of. */
	assert_int_equal(proto_put_mapper_end(b, 7, 3, 1), USH_FRAME_HDR_SIZE);
	assert_int_equal(proto_header(b, &f, 1u << 20, false, &why), 0);
	assert_int_equal(frame_check(b, &f), 0);
	assert_int_equal(f.type, USHI_FRAME_MAPPER_END);
	assert_int_equal(f.payload_len, 0);
	assert_int_equal(f.shuffle, 7);
	assert_int_equal(f.map, 3);
	assert_int_equal(f.attempt, 1);
	assert_int_equal(proto_put_manifest(b, 7, 5), USH_FRAME_HDR_SIZE);
	assert_int_equal(proto_header(b, &f, 1u << 20, false, &why), 0);
	assert_int_equal(frame_check(b, &f), 0);
	assert_int_equal(f.type, USHI_FRAME_MANIFEST);
	assert_int_equal(f.shuffle, 7);
	assert_int_equal(f.partition, 5);

	/* FETCH: an offset and the range's count, then per partition of it
	 * the attempt of each map wanted and the batches of it to leave
	 * out. */
	struct proto_want w[3] = {{5, 1, 0, 0}, {5, 4, 2, 17},
				  {8, 9, 70, 1ull << 40}},
			  w2;
	uint8_t m[256];
	assert_int_equal(proto_fetch_size(3), USH_FRAME_HDR_SIZE + 16 + 72);
	assert_int_equal(proto_put_fetch(m, 7, 5, 4, 123456789012ull, w, 3),
			 proto_fetch_size(3));
	assert_int_equal(proto_header(m, &f, 1u << 20, false, &why), 0);
	assert_int_equal(frame_check(m, &f), 0);
	assert_int_equal(f.type, USHI_FRAME_FETCH);
	assert_int_equal(f.shuffle, 7);
	assert_int_equal(f.partition, 5);
	assert_int_equal(get_le64(m + USH_FRAME_HDR_SIZE), 123456789012ull);
	assert_int_equal(get_le32(m + USH_FRAME_HDR_SIZE + 8), 4);
	assert_int_equal(proto_wants(&f), 3);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(proto_get_want(m + USH_FRAME_HDR_SIZE, i,
						&w2), 0);
		assert_int_equal(w2.partition, w[i].partition);
		assert_int_equal(w2.map, w[i].map);
		assert_int_equal(w2.attempt, w[i].attempt);
		assert_int_equal(w2.skip, w[i].skip);
	}
	assert_int_equal(proto_fetch_size(1), USH_FRAME_HDR_SIZE + 40);
	proto_put_fetch(m, 7, 5, 1, 0, w, 1);
	assert_int_equal(proto_header(m, &f, 1u << 20, false, &why), 0);
	assert_int_equal(proto_wants(&f), 1);
}

/* Every length rule refuses from the 48 header bytes alone. */
static void bounds(void **state)
{
	(void)state;
	uint8_t b[64] = {0};
	struct ushi_frame f;
	const char *why;
	struct { uint8_t type; uint32_t len; uint64_t seq; } bad[] = {
		{USHI_FRAME_HELLO, 15, 0},
		{USHI_FRAME_ACK, 17, 0},
		{USHI_FRAME_FETCH, 0, 0},
		{USHI_FRAME_FETCH, 8, 0},  /* an offset, no attempt */
		{USHI_FRAME_FETCH, 16, 0}, /* half an attempt */
		{USHI_FRAME_FETCH, 8 + 8 + 16, 0}, /* one and a half */
		{USHI_FRAME_FETCH, USHI_PROTO_CTRL_MAX + 8, 0},
		{USHI_FRAME_FETCH_END, 9, 0},
		{USHI_FRAME_DROP, 1, 0},
		{USHI_FRAME_ERROR, 7, 0},
		{USHI_FRAME_ERROR, 8 + USHI_PROTO_ERRMSG_MAX + 1, 0},
		/* MAPPER_END and MANIFEST carry no payload (version 2). */
		{USHI_FRAME_MAPPER_END, 12, 2},
		{USHI_FRAME_MAPPER_END, 1, 1ull << 62},
		{USHI_FRAME_MANIFEST, 16, 0},
		{USHI_FRAME_MANIFEST, 8, 0},
		{USHI_FRAME_PAD, 0, 0}, /* never on the wire */
		{USHI_FRAME_HEARTBEAT, 4, 0},
		{12, 0, 0},
		{0, 0, 0},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct ushi_frame g = {.type = bad[i].type, .seq = bad[i].seq};
		frame_encode(b, &g);
		put_le32(b + 32, bad[i].len);
		put_le32(b + 36, bad[i].len);
		if (proto_header(b, &f, 1u << 20, false, &why) != USH_ECORRUPT)
			fail_msg("case %zu (type %u len %u) accepted", i,
				 bad[i].type, bad[i].len);
	}
	/* DATA above the worker's maximum. */
	struct ushi_frame d = {.type = USHI_FRAME_DATA, .nrec = 1};
	frame_encode(b, &d);
	put_le32(b + 32, 5000);
	put_le32(b + 36, 5000);
	assert_int_equal(proto_header(b, &f, 4096, false, &why), USH_ECORRUPT);
	assert_int_equal(proto_header(b, &f, 8192, false, &why), 0);
	/* Bad magic and a frame version from the future. */
	b[0] ^= 1;
	assert_int_equal(proto_header(b, &f, 8192, false, &why), USH_ECORRUPT);
	b[0] ^= 1;
	b[4] = 9;
	assert_int_equal(proto_header(b, &f, 8192, false, &why), USH_ECORRUPT);
}

/* Jump hash: in range, balanced, and a new worker only takes
 * partitions, never shuffles them among the old ones. */
/* A client's and a worker's MACs keyed from one handshake. */
static void mac_pair(struct ushi_mac *client, struct ushi_mac *worker)
{
	const uint8_t secret[] = "a-secret-of-32-bytes-0123456789ab";
	uint8_t hello[USHI_PROTO_SMALL], nw[USHI_AUTH_NONCE];
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0,
				1, 2, 3, "app", USHI_HELLO_AUTH, {0}};
	th_ok(auth_nonce(h.nonce));
	th_ok(auth_nonce(nw));
	size_t hn = proto_put_hello(hello, &h);
	mac_keys kc, kw;
	th_ok(mac_derive(secret, sizeof(secret) - 1, hello, hn, nw, kc));
	th_ok(mac_derive(secret, sizeof(secret) - 1, hello, hn, nw, kw));
	/* One key per direction. */
	assert_memory_not_equal(kc[0], kc[1], USHI_AUTH_MAC);
	th_ok(mac_start(client, kc, AUTH_CLIENT));
	th_ok(mac_start(worker, kw, AUTH_WORKER));
	uint8_t zero[USHI_AUTH_MAC] = {0};
	assert_memory_equal(kc[0], zero, sizeof(zero)); /* wiped */
}

/* Parses, checks the CRC of and opens frame b with m. */
static int open_frame(struct ushi_mac *m, const uint8_t *b,
		      struct ushi_frame *f, const char **why)
{
	assert_int_equal(proto_header(b, f, 1u << 20, false, why), 0);
	assert_int_equal(frame_check(b, f), 0);
	return mac_open(m, b, f, why);
}

/* Sealed control frames open on the other side, in order, both ways,
 * and decode as they were; an altered, replayed, reordered, reflected
 * or unsealed frame is refused; DATA passes untouched. */
static void mac_seal_and_open(void **state)
{
	(void)state;
	struct ushi_mac c, w, off = {0};
	uint8_t b[2][USHI_PROTO_SMALL];
	struct ushi_frame f;
	const char *why;
	mac_pair(&c, &w);
	size_t n = proto_put_mapper_end(b[0], 5, 6, 7);
	assert_int_equal(mac_seal(&c, b[0], n), n + USHI_MAC_TAG);
	assert_int_equal(open_frame(&w, b[0], &f, &why), 0);
	assert_int_equal(f.type, USHI_FRAME_MAPPER_END);
	assert_int_equal(f.payload_len, 0);
	assert_int_equal(f.attempt, 7);
	/* Replayed: its tag was for the frame before. */
	assert_int_equal(open_frame(&w, b[0], &f, &why), -EACCES);
	assert_non_null(strstr(why, "failed its MAC"));
	/* The other way: an ACK decodes as it was sealed. */
	struct proto_ack a = {USHI_ACK_COMMIT, 0, 77}, a2;
	mac_seal(&w, b[0], proto_put_ack(b[0], 5, 6, 7, &a));
	assert_int_equal(open_frame(&c, b[0], &f, &why), 0);
	proto_get_ack(b[0] + USH_FRAME_HDR_SIZE, &a2);
	assert_int_equal(a2.value, 77);
	/* Reflected: the client's own frame handed back to it. */
	mac_seal(&c, b[0], proto_put_heartbeat(b[0]));
	assert_int_equal(open_frame(&c, b[0], &f, &why), -EACCES);
	mac_free(&c);
	mac_free(&w);
	/* Out of order: two sealed, the second opened first. */
	mac_pair(&c, &w);
	mac_seal(&c, b[0], proto_put_heartbeat(b[0]));
	mac_seal(&c, b[1], proto_put_drop(b[1], 9));
	assert_int_equal(open_frame(&w, b[1], &f, &why), -EACCES);
	mac_free(&c);
	mac_free(&w);
	/* One bit altered, the CRC fixed. */
	mac_pair(&c, &w);
	mac_seal(&c, b[0], proto_put_drop(b[0], 9));
	frame_parse(b[0], &f);
	f.shuffle ^= 1;
	frame_encode(b[0], &f);
	assert_int_equal(open_frame(&w, b[0], &f, &why), -EACCES);
	mac_free(&c);
	mac_free(&w);
	/* Unsealed where a tag is due; sealed where none is. */
	mac_pair(&c, &w);
	proto_put_heartbeat(b[0]);
	assert_int_equal(open_frame(&w, b[0], &f, &why), -EACCES);
	assert_non_null(strstr(why, "without its MAC"));
	mac_seal(&c, b[0], proto_put_heartbeat(b[0]));
	assert_int_equal(open_frame(&off, b[0], &f, &why), -EACCES);
	/* DATA: neither sealed nor checked. */
	struct ushi_frame d = {.type = USHI_FRAME_DATA, .raw_len = 8,
			       .payload_len = 8, .nrec = 1};
	put_le32(b[1] + USH_FRAME_HDR_SIZE, 4);
	memcpy(b[1] + USH_FRAME_HDR_SIZE + 4, "data", 4);
	frame_encode(b[1], &d);
	assert_int_equal(mac_seal(&c, b[1], 56), 56);
	assert_int_equal(open_frame(&w, b[1], &f, &why), 0);
	/* Off (no secret): nothing sealed, nothing checked. */
	assert_int_equal(mac_seal(&off, b[0], proto_put_heartbeat(b[0])),
			 USH_FRAME_HDR_SIZE);
	assert_int_equal(open_frame(&off, b[0], &f, &why), 0);
	mac_free(&c);
	mac_free(&w);
}

static void worker_hash(void **state)
{
	(void)state;
	unsigned count[8] = {0};
	for (uint32_t p = 0; p < 80000; p++) {
		uint32_t w7 = ush_net_worker_of(p, 7);
		uint32_t w8 = ush_net_worker_of(p, 8);
		assert_true(w7 < 7 && w8 < 8);
		assert_true(w8 == w7 || w8 == 7);
		count[w8]++;
	}
	for (int i = 0; i < 8; i++)
		assert_true(count[i] > 9000 && count[i] < 11000);
	assert_int_equal(ush_net_worker_of(12345, 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(control_round_trips),
		cmocka_unit_test(bounds),
		cmocka_unit_test(mac_seal_and_open),
		cmocka_unit_test(worker_hash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
