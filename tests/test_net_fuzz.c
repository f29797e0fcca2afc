/*
 * A network fuzzer against a real ushuffled of two threads: each round
 * opens a connection, proves the secret as the library does (protocol 7,
 * MACs on), then sends frames of every type built from valid templates
 * (DATA, MAPPER_END, single and range FETCH over a committed shuffle,
 * DROP, ACK, HEARTBEAT, ...) with fields set to edge values before they
 * are sealed (the MAC holds, the worker's parsers see the garbage), and
 * sometimes bytes flipped, lengths changed or the stream cut after
 * sealing. One round in ten speaks garbage before the handshake instead.
 * The round ends with a half-close: the worker must answer or close by
 * the 30 s deadline, and must stay up. At the end, a job still pushes
 * and verifies.
 *
 * A sanitized worker (the ASan+UBSan tree) turns a memory or undefined
 * behaviour error into its death, which fails the test with the round's
 * seed and its log's tail. The suite runs 300 rounds of seed 1; longer:
 * USH_FUZZ_SECONDS=900 (or USH_FUZZ_ROUNDS=n), USH_FUZZ_SEED=s.
 */
#include "net_helpers.h"
#include "core/status.h"

#include <poll.h>
#include <time.h>

#define SHUF 3          /* the committed shuffle FETCHes aim at */
#define PARTS 8
#define BUF (256u << 10)

static uint64_t rng;

static uint64_t rnd(void)
{
	/* xorshift64*: deterministic for a seed */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

static uint32_t below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

/* A field's value: mostly plausible, sometimes an edge. */
static uint32_t v32(uint32_t plausible)
{
	static const uint32_t edge[] = {0, 1, 2, 7, 8, 255, 256, 65535,
					0x7fffffff, 0x80000000, 0xfffffffe,
					0xffffffff, USHI_PARTS_MAX - 1,
					USHI_PARTS_MAX, USHI_PROTO_CTRL_MAX};
	switch (below(8)) {
	case 0:
		return edge[below(ARRAY_SIZE(edge))];
	case 1:
		return (uint32_t)rnd();
	default:
		return plausible;
	}
}

static uint64_t v64(uint64_t plausible)
{
	switch (below(8)) {
	case 0:
		return UINT64_MAX - below(3);
	case 1:
		return rnd();
	case 2:
		return (uint64_t)v32((uint32_t)plausible);
	default:
		return plausible;
	}
}

struct round {
	int fd;
	uint8_t *b;
	size_t n;     /* bytes built in b */
	uint32_t map, attempt;
	unsigned frames;
	bool fetch; /* a FETCH among them */
};

/* Frame f with its payload already at r->b + r->n + header: encoded,
 * sealed unless DATA, appended. */
static void put(struct round *r, struct ushi_frame *f)
{
	uint8_t *h = r->b + r->n;
	frame_encode(h, f);
	r->n += mac_seal(th_mac(r->fd), h, proto_size(f));
	r->frames++;
}

static void put_data(struct round *r)
{
	uint8_t *p = r->b + r->n + USH_FRAME_HDR_SIZE;
	uint32_t nrec = 1 + below(8), len = 0;
	for (uint32_t i = 0; i < nrec; i++) {
		uint32_t l = below(64);
		put_le32(p + len, below(16) ? l : v32(l));
		memset(p + len + 4, 'a' + (int)i, l);
		len += 4 + l;
	}
	if (!below(8))
		len = below(len + 1); /* a batch cut short */
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = SHUF + 1,
			       .map = r->map, .attempt = r->attempt,
			       .partition = below(PARTS), .seq = below(4),
			       .raw_len = len, .payload_len = len,
			       .nrec = nrec};
	f.codec = below(8) ? 0 : (uint8_t)below(5);
	f.flags = below(8) ? 0 : (uint8_t)rnd();
	f.shuffle = v32(f.shuffle);
	f.map = v32(f.map);
	f.attempt = v32(f.attempt);
	f.partition = v32(f.partition);
	f.seq = v64(f.seq);
	f.raw_len = v32(f.raw_len);
	f.nrec = v32(f.nrec);
	put(r, &f);
}

static void put_fetch(struct round *r)
{
	static const uint32_t counts[] = {1, 2, 3, 4, 8, 9, 1000,
					  USHI_PARTS_MAX};
	uint32_t first = below(PARTS + 1), count = counts[below(8)];
	struct proto_want w[8];
	uint32_t n = below(16) ? 1 + below(ARRAY_SIZE(w)) : 0;
	bool none = !below(6); /* skips past every batch: nothing planned */
	for (uint32_t i = 0; i < n; i++) {
		/* ascending (partition, map) over maps 0 and 1, mostly */
		uint32_t p = first + (count > 1 ? (i / 2) % count : 0);
		w[i] = (struct proto_want){p, i % 2, 0, 0};
		if (none)
			w[i].skip = 1000 + below(4);
		else if (!below(4))
			w[i].skip = below(4) ? below(6) : v64(1);
		if (!below(16))
			w[i].partition = v32(p);
		if (!below(16))
			w[i].map = v32(w[i].map);
		if (!below(16))
			w[i].attempt = v32(0);
	}
	uint64_t off = below(4) ? 0 : v64(below(4096));
	uint8_t *h = r->b + r->n;
	r->fetch = true;
	size_t len = proto_put_fetch(h, below(8) ? SHUF : v32(SHUF),
				     below(16) ? first : v32(first),
				     below(16) ? count : v32(count), off, w, n);
	if (!below(16)) /* a zero field that is not */
		h[USH_FRAME_HDR_SIZE + 12 + below(4)] = (uint8_t)(1 + below(255));
	struct ushi_frame f;
	frame_parse(h, &f);
	(void)len;
	put(r, &f);
}

/* A control frame of any type, its payload random bytes. */
static void put_ctrl(struct round *r)
{
	uint8_t *p = r->b + r->n + USH_FRAME_HDR_SIZE;
	uint32_t len = below(4) ? below(96) : below(1024);
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)rnd();
	struct ushi_frame f = {.type = (uint8_t)(2 + below(12)),
			       .shuffle = below(2) ? SHUF : v32(SHUF),
			       .map = v32(r->map), .attempt = v32(r->attempt),
			       .partition = v32(0), .seq = v64(0),
			       .raw_len = len, .payload_len = len};
	if (!below(4))
		f.type = (uint8_t)rnd();
	if (f.type == USHI_FRAME_DATA)
		f.type = USHI_FRAME_HEARTBEAT;
	if (f.type == USHI_FRAME_DROP && f.shuffle == SHUF)
		f.shuffle++; /* the fetches go on aiming at SHUF */
	put(r, &f);
}

/* A well-formed control frame the role may send, its fields fuzzed. */
static void put_known(struct round *r)
{
	uint8_t *h = r->b + r->n;
	struct proto_ack a = {1 + below(4), (int32_t)v32(0), v64(below(1024))};
	switch (below(6)) {
	case 0:
	case 5:
		proto_put_mapper_end(h, v32(SHUF + 1), v32(r->map),
				     v32(r->attempt));
		break;
	case 1:
		proto_put_ack(h, v32(SHUF), v32(r->map), v32(r->attempt), &a);
		break;
	case 2:
		proto_put_heartbeat(h);
		break;
	case 3:
		/* never the committed shuffle: the fetches go on aiming at
		 * it */
		proto_put_drop(h, SHUF + 1 + below(4));
		break;
	default:
		proto_put_error(h, (int)v32((uint32_t)-EINVAL), "fuzz");
		break;
	}
	struct ushi_frame f;
	frame_parse(h, &f);
	put(r, &f);
}

/* After sealing: bytes flipped, a length changed, or the stream cut. */
static void damage(struct round *r)
{
	switch (below(3)) {
	case 0:
		for (unsigned i = 1 + below(4); i && r->n; i--)
			r->b[below((uint32_t)r->n)] ^= (uint8_t)(1 + below(255));
		break;
	case 1:
		if (r->n >= USH_FRAME_HDR_SIZE)
			put_le32(r->b + 32 + 4 * below(2), v32(16));
		break;
	default:
		r->n = below((uint32_t)r->n + 1);
		break;
	}
}

/* The worker's answers by frame type, over the run: what the rounds
 * reached (a MANIFEST is a FETCH planned, an ERROR a refusal). */
static unsigned long answers[256];

/* Reads until the worker closes fd, counting the frames' types; half-
 * closes it at once, or with answer set once a FETCH_END or an ERROR
 * came (the worker drops a stream at the end of its request side).
 * Fails the test when the worker neither answers nor closes by the
 * deadline. */
static void drain(int fd, bool answer)
{
	static uint8_t sink[64 << 10];
	uint8_t hdr[USH_FRAME_HDR_SIZE];
	size_t have = 0;  /* header bytes of the next frame */
	uint64_t skip = 0; /* payload bytes of the last one */
	if (!answer)
		shutdown(fd, SHUT_WR);
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		int got = poll(&p, 1, 30000);
		if (got == 0)
			fail_msg("the worker neither answered nor closed a "
				 "half-closed connection in 30 s");
		ssize_t k = recv(fd, sink, sizeof(sink), 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		for (size_t o = 0; o < (size_t)k;) {
			size_t c;
			if (skip) {
				c = skip < (size_t)k - o ? skip : (size_t)k - o;
				skip -= c;
			} else {
				c = sizeof(hdr) - have;
				c = c < (size_t)k - o ? c : (size_t)k - o;
				memcpy(hdr + have, sink + o, c);
				have += c;
			}
			o += c;
			struct ushi_frame f;
			if (have == sizeof(hdr) && !frame_parse(hdr, &f)) {
				answers[f.type]++;
				if (answer && (f.type == USHI_FRAME_FETCH_END ||
					       f.type == USHI_FRAME_ERROR)) {
					shutdown(fd, SHUT_WR);
					answer = false;
				}
				skip = f.payload_len;
				have = 0;
			}
		}
	}
	close(fd);
}

/* Garbage before the handshake: a HELLO of random fields, or bytes. */
static void pre_auth(int port, uint8_t *b)
{
	int fd = th_raw_connect(port);
	size_t n;
	if (below(2)) {
		struct proto_hello h = {v32(USHI_PROTO_VERSION),
					v32(1 + below(3)), v32(0), v32(0),
					v32(SHUF), v32(0), v32(0), "default",
					v32(USHI_HELLO_AUTH), {0}};
		if (!below(4))
			snprintf(h.app, sizeof(h.app), "%08x",
				 (unsigned)rnd());
		n = proto_put_hello(b, &h);
		if (!below(2))
			b[below((uint32_t)n)] ^= (uint8_t)(1 + below(255));
	} else {
		n = below(512);
		for (size_t i = 0; i < n; i++)
			b[i] = (uint8_t)rnd();
	}
	send(fd, b, n, MSG_NOSIGNAL);
	drain(fd, false);
}

static void one_round(int port, uint8_t *b, unsigned i)
{
	if (!below(10)) {
		pre_auth(port, b);
		return;
	}
	struct round r = {.fd = th_raw_connect(port), .b = b,
			  .map = below(4), .attempt = 1000 + i};
	uint32_t pick = below(8), role = pick < 4 ? USHI_ROLE_READER :
				      pick < 7 ? USHI_ROLE_WRITER :
					      USHI_ROLE_ADMIN;
	struct proto_hello h = {USHI_PROTO_VERSION, role, 0, 0,
				role == USHI_ROLE_WRITER ? SHUF + 1 : 0, r.map,
				r.attempt, "default", 0, {0}};
	if (!below(8)) {
		h.window = v32(0);
		h.max_frame = v32(0);
	}
	char msg[600];
	if (th_try_hello(r.fd, h, NULL, msg, sizeof(msg))) {
		drain(r.fd, false);
		return;
	}
	/* Mostly what the role sends first (its DATA, a FETCH), as often
	 * alone as followed by more: an unexpected frame ends the
	 * connection before a FETCH it follows is planned. */
	unsigned frames = below(2) ? 1 : 1 + below(6);
	for (unsigned k = 0; k < frames && r.n < BUF - 4096; k++) {
		uint32_t c = below(8);
		if (role == USHI_ROLE_WRITER && c < 6)
			put_data(&r);
		else if (role != USHI_ROLE_WRITER && (k ? c < 3 : c < 6))
			put_fetch(&r);
		else if (c < 7)
			put_known(&r);
		else
			put_ctrl(&r);
	}
	if (role == USHI_ROLE_WRITER && below(2))
		put_known(&r); /* often a MAPPER_END: the commit */
	bool damaged = !below(5);
	if (damaged)
		damage(&r);
	if (r.n)
		send(r.fd, r.b, r.n, MSG_NOSIGNAL);
	/* An intact FETCH is answered: a stream, or an ERROR. */
	drain(r.fd, r.fetch && !damaged && role == USHI_ROLE_READER);
}

static void tail_log(const char *path)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "tail -n 40 '%.500s' >&2", path);
	if (system(cmd))
		print_message("(no log at %s)\n", path);
}

static void fuzz(void **state)
{
	(void)state;
	const char *e;
	uint64_t seed = (e = getenv("USH_FUZZ_SEED")) ? strtoull(e, NULL, 0)
						      : 1;
	unsigned rounds = (e = getenv("USH_FUZZ_ROUNDS")) ?
				  (unsigned)strtoul(e, NULL, 0) : 300;
	unsigned secs = (e = getenv("USH_FUZZ_SECONDS")) ?
				(unsigned)strtoul(e, NULL, 0) : 0;
	char log[600];
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("fuzz"));
	snprintf(log, sizeof(log), "%s.log", w.dir);
	unlink(log);
	w.errlog = log;
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct ush_status st[2] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = SHUF,
			   .partitions = PARTS, .maps = 2, .records = 200,
			   .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	th_ok(th_push_map(&j, 1, 0, NULL));
	uint8_t *b = malloc(BUF);
	assert_non_null(b);
	time_t end = time(NULL) + secs;
	unsigned i;
	for (i = 0; secs ? time(NULL) < end : i < rounds; i++) {
		rng = seed * 0x9E3779B97F4A7C15ULL + i + 1;
		one_round(w.port, b, i);
		if (!th_worker_alive(&w)) {
			tail_log(log);
			fail_msg("the worker died in round %u of seed %llu "
				 "(USH_FUZZ_SEED=%llu, its log above)", i,
				 (unsigned long long)seed,
				 (unsigned long long)seed);
		}
	}
	print_message("fuzz: %u rounds of seed %llu, the worker up; its "
		      "answers: %lu HELLO, %lu ERROR, %lu ACK, %lu MANIFEST, "
		      "%lu FETCH_END, %lu DATA\n", i,
		      (unsigned long long)seed, answers[USHI_FRAME_HELLO],
		      answers[USHI_FRAME_ERROR], answers[USHI_FRAME_ACK],
		      answers[USHI_FRAME_MANIFEST],
		      answers[USHI_FRAME_FETCH_END], answers[USHI_FRAME_DATA]);
	free(b);
	th_verify(&j); /* still serving what it stored */
	struct ush_status st2[1] = {{0}};
	struct th_job j2 = {.workers = w.addr, .shuffle = SHUF + 100,
			    .partitions = PARTS, .maps = 1, .records = 100,
			    .statuses = st2};
	th_ok(th_push_map(&j2, 0, 0, NULL));
	j2.range = PARTS;
	th_verify(&j2);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	if (!getenv("USH_FUZZ_KEEP_LOG"))
		unlink(log);
	th_job_free(&j);
	th_job_free(&j2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fuzz),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
