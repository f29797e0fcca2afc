/*
 * Control-frame MACs (docs/protocol.md §2.9) against a real ushuffled,
 * through a TCP proxy in the test that parses the frames both ways and
 * can rewrite one (with a correct CRC, as an attacker on the path would),
 * send one twice, or insert a forged one. Every altered, replayed or
 * injected control frame is refused by the side that receives it, before
 * it acts: nothing is committed or dropped, and the data stays readable;
 * the worker logs and counts each refusal. Untouched, everything passes
 * through.
 */
#include "net_helpers.h"

#include <pthread.h>

enum dir { C2W, W2C };
enum act { PASS, TAMPER, REPLAY, INJECT_DROP, INJECT_TAGGED_DROP };

/* What the proxy does to the first frame of a type in one direction
 * (with ACKs, of one kind): set while no connection is open. */
struct rule {
	enum act act;
	enum dir dir;
	uint8_t type;
	uint32_t ack_kind;    /* 0: any */
	uint32_t drop_shuffle; /* what an injected DROP names */
	atomic_int fired;
};

#define PAIRS 32

struct proxy {
	int lfd, port, wport;
	char addr[64];
	struct rule rule;
	atomic_ulong sealed[2]; /* sealed control frames seen per direction */
	pthread_t tid;
	struct pair {
		int cfd, wfd;
		pthread_t t[2];
	} pairs[PAIRS];
	atomic_uint npairs;
};

struct relay {
	struct proxy *p;
	int src, dst;
	enum dir dir;
};

static struct th_worker wk;
static struct proxy px;
static char wlog[600];

static int read_n(int fd, uint8_t *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(fd, b + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static void write_n(int fd, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return; /* the peer went: the reader side ends too */
		b += r;
		n -= (size_t)r;
	}
}

static bool matches(struct rule *r, enum dir dir, const uint8_t *b,
		    const struct ushi_frame *f)
{
	if (r->act == PASS || r->dir != dir || f->type != r->type)
		return false;
	if (r->ack_kind && get_le32(b + USH_FRAME_HDR_SIZE) != r->ack_kind)
		return false;
	return atomic_fetch_add(&r->fired, 1) == 0;
}

/* Flips one bit of what the frame says (its first payload byte, or the
 * partition of a frame without a payload) and fixes its CRC. */
static void tamper(uint8_t *b)
{
	struct ushi_frame f;
	frame_parse(b, &f);
	if (f.payload_len > USHI_MAC_TAG)
		b[USH_FRAME_HDR_SIZE] ^= 1;
	else
		f.partition ^= 1;
	frame_encode(b, &f);
}

/* A DROP of shuffle s, as a client's; with a tag of random bytes when
 * tagged (an attacker without the key). */
static size_t forged_drop(uint8_t *b, uint32_t s, bool tagged)
{
	size_t n = proto_put_drop(b, s);
	if (!tagged)
		return n;
	struct ushi_frame f;
	frame_parse(b, &f);
	f.flags = USHI_FLAG_MAC;
	f.payload_len = f.raw_len = USHI_MAC_TAG;
	th_ok(auth_nonce(b + USH_FRAME_HDR_SIZE)); /* the tag: random */
	frame_encode(b, &f);
	return n + USHI_MAC_TAG;
}

static void *relay_main(void *arg)
{
	struct relay *rl = arg;
	struct proxy *p = rl->p;
	uint8_t hdr[USH_FRAME_HDR_SIZE];
	while (!read_n(rl->src, hdr, sizeof(hdr))) {
		struct ushi_frame f;
		if (frame_parse(hdr, &f))
			break;
		size_t n = USH_FRAME_HDR_SIZE + (size_t)f.payload_len;
		uint8_t *b = malloc(n);
		if (!b)
			break;
		memcpy(b, hdr, sizeof(hdr));
		if (read_n(rl->src, b + sizeof(hdr), f.payload_len)) {
			free(b);
			break;
		}
		if (f.flags & USHI_FLAG_MAC)
			atomic_fetch_add(&p->sealed[rl->dir], 1);
		struct rule *r = &p->rule;
		if (matches(r, rl->dir, b, &f)) {
			uint8_t d[USHI_PROTO_SMALL];
			if (r->act == TAMPER)
				tamper(b);
			else if (r->act == REPLAY)
				write_n(rl->dst, b, n);
			else
				write_n(rl->dst, d,
					forged_drop(d, r->drop_shuffle,
						    r->act == INJECT_TAGGED_DROP));
		}
		write_n(rl->dst, b, n);
		free(b);
	}
	shutdown(rl->dst, SHUT_WR);
	free(rl);
	return NULL;
}

static void relay_start(struct proxy *p, struct pair *pr, enum dir dir)
{
	struct relay *rl = malloc(sizeof(*rl));
	assert_non_null(rl);
	*rl = (struct relay){p, dir == C2W ? pr->cfd : pr->wfd,
			     dir == C2W ? pr->wfd : pr->cfd, dir};
	assert_int_equal(pthread_create(&pr->t[dir], NULL, relay_main, rl), 0);
}

static void *accept_main(void *arg)
{
	struct proxy *p = arg;
	for (;;) {
		int cfd = accept(p->lfd, NULL, NULL);
		if (cfd < 0)
			return NULL; /* the test shut the listener */
		unsigned i = atomic_load(&p->npairs);
		assert_true(i < PAIRS);
		struct pair *pr = &p->pairs[i];
		pr->cfd = cfd;
		pr->wfd = th_raw_connect(p->wport);
		relay_start(p, pr, C2W);
		relay_start(p, pr, W2C);
		atomic_store(&p->npairs, i + 1);
	}
}

static void proxy_start(struct proxy *p, int wport)
{
	memset(p, 0, sizeof(*p));
	p->wport = wport;
	p->lfd = th_listen(&p->port);
	snprintf(p->addr, sizeof(p->addr), "127.0.0.1:%d", p->port);
	assert_int_equal(pthread_create(&p->tid, NULL, accept_main, p), 0);
}

/* Ends every relayed connection (each is over by now: its client
 * closed, and no other is being made) and sets the next rule. */
static void proxy_rule(struct proxy *p, struct rule r)
{
	unsigned n = atomic_load(&p->npairs);
	for (unsigned i = 0; i < n; i++) {
		struct pair *pr = &p->pairs[i];
		shutdown(pr->cfd, SHUT_RDWR);
		shutdown(pr->wfd, SHUT_RDWR);
		pthread_join(pr->t[C2W], NULL);
		pthread_join(pr->t[W2C], NULL);
		close(pr->cfd);
		close(pr->wfd);
	}
	atomic_store(&p->npairs, 0);
	p->rule.act = r.act;
	p->rule.dir = r.dir;
	p->rule.type = r.type;
	p->rule.ack_kind = r.ack_kind;
	p->rule.drop_shuffle = r.drop_shuffle;
	atomic_store(&p->rule.fired, 0);
}

static void proxy_stop(struct proxy *p)
{
	shutdown(p->lfd, SHUT_RDWR);
	pthread_join(p->tid, NULL);
	close(p->lfd);
	proxy_rule(p, (struct rule){.act = PASS});
}

static int setup(void **state)
{
	(void)state;
	snprintf(wk.dir, sizeof(wk.dir), "%s", th_tmpdir("mac"));
	snprintf(wlog, sizeof(wlog), "%s.log", wk.dir);
	unlink(wlog);
	wk.errlog = wlog;
	th_worker_spawn(&wk, "127.0.0.1", 0, 2);
	proxy_start(&px, wk.port);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	proxy_stop(&px);
	th_worker_stop(&wk);
	th_rmrf(wk.dir);
	unlink(wlog);
	return 0;
}

/* A job of shuffle s through the proxy: maps maps of attempt 0. */
static struct th_job job(uint32_t s, uint32_t maps, struct ush_status *st)
{
	return (struct th_job){.workers = px.addr, .shuffle = s,
			       .partitions = 4, .maps = maps, .records = 300,
			       .statuses = st, .timeout_ms = 10000};
}

/* The last error names what failed: a MAC. */
static void expect_mac_error(int ret, const char *want)
{
	print_message("refused: %s\n", ush_last_error());
	assert_int_equal(ret, -EACCES);
	if (!strstr(ush_last_error(), want))
		fail_msg("expected '%s' in '%s'", want, ush_last_error());
}

/* The worker logs (and counts) the refusal: its log gets a line with
 * want; it may come a moment after the client saw the ERROR. */
static void expect_worker_log(const char *want)
{
	for (int i = 0; i < 200; i++) {
		size_t len;
		char *log = th_read_file(wlog, &len);
		bool found = memmem(log, len, want, strlen(want)) != NULL;
		free(log);
		if (found)
			return;
		usleep(50000);
	}
	fail_msg("the worker's log has no line with '%s'", want);
}

static void fired(void)
{
	assert_int_equal(atomic_load(&px.rule.fired) > 0, 1);
}

/* Nothing altered: a push, its commit, the fetch, a heartbeat and a drop
 * pass, and every control frame after the handshake, both ways, came
 * sealed. */
static void untouched_connections_work(void **state)
{
	(void)state;
	proxy_rule(&px, (struct rule){.act = PASS});
	struct ush_status st[2] = {{0}, {0}};
	struct th_job j = job(1, 2, st);
	for (uint32_t m = 0; m < 2; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	th_verify(&j);
	th_ok(ush_app_heartbeat(px.addr, NULL, 10000));
	th_ok(ush_shuffle_drop(px.addr, NULL, 1, 10000));
	th_job_free(&j);
	/* MAPPER_END x2, FETCH per partition, HEARTBEAT, DROP; and the
	 * HELLO answers, ACKs, MANIFESTs and FETCH_ENDs. */
	assert_true(atomic_load(&px.sealed[C2W]) >= 2 + 4 + 2);
	assert_true(atomic_load(&px.sealed[W2C]) >= 4 + 2 + 4 + 4);
}

/* A MAPPER_END altered on the way: the worker refuses it before any
 * commit, so the attempt stays uncommitted; a later writer of the same
 * attempt is told it was abandoned, not that it is committed (map 1,
 * committed first, keeps the shuffle: one left with no attempt open or
 * committed goes, abandoned attempts with it). */
static void altered_commit_refused(void **state)
{
	(void)state;
	struct th_job j = job(2, 2, NULL);
	proxy_rule(&px, (struct rule){.act = PASS});
	th_ok(th_push_map(&j, 1, 0, NULL));
	proxy_rule(&px, (struct rule){.act = TAMPER, .dir = C2W,
				      .type = USHI_FRAME_MAPPER_END});
	expect_mac_error(th_push_map(&j, 0, 0, NULL), "failed its MAC");
	fired();
	expect_worker_log("MAPPER_END frame: a control frame failed its MAC");
	proxy_rule(&px, (struct rule){.act = PASS});
	int ret;
	/* The old connection may still hold the attempt for a moment. */
	for (int i = 0; (ret = th_push_map(&j, 0, 0, NULL)) == -EBUSY &&
			i < 200; i++)
		usleep(50000);
	assert_int_equal(ret, -EEXIST);
}

/* The worker's commit ACK altered on the way: the writer refuses it. */
static void altered_ack_refused(void **state)
{
	(void)state;
	proxy_rule(&px, (struct rule){.act = TAMPER, .dir = W2C,
				      .type = USHI_FRAME_ACK,
				      .ack_kind = USHI_ACK_COMMIT});
	struct th_job j = job(3, 1, NULL);
	expect_mac_error(th_push_map(&j, 0, 0, NULL), "failed its MAC");
	fired();
}

/* A FETCH altered on the way is refused by the worker; a DROP altered
 * on the way too, and drops nothing; the worker's ERROR altered on the
 * way is refused by the client. The data reads back after each. */
static void altered_fetch_drop_error_refused(void **state)
{
	(void)state;
	proxy_rule(&px, (struct rule){.act = PASS});
	struct ush_status st[1] = {{0}};
	struct th_job j = job(4, 1, st);
	th_ok(th_push_map(&j, 0, 0, NULL));
	proxy_rule(&px, (struct rule){.act = TAMPER, .dir = C2W,
				      .type = USHI_FRAME_FETCH});
	ush_reader *r;
	int ret = th_reader_open(&r, st, 1, 0, 10000);
	if (!ret) { /* streams open at the first read */
		const void *rec;
		size_t len;
		ret = ush_reader_next(r, &rec, &len);
		ush_reader_free(r);
	}
	expect_mac_error(ret, "failed its MAC");
	fired();
	expect_worker_log("FETCH frame: a control frame failed its MAC");
	proxy_rule(&px, (struct rule){.act = TAMPER, .dir = C2W,
				      .type = USHI_FRAME_DROP});
	expect_mac_error(ush_shuffle_drop(px.addr, NULL, 4, 10000),
			 "failed its MAC");
	fired();
	expect_worker_log("DROP frame: a control frame failed its MAC");
	/* A commit of a committed attempt: the worker's ERROR says so,
	 * unless it is altered. */
	proxy_rule(&px, (struct rule){.act = TAMPER, .dir = W2C,
				      .type = USHI_FRAME_ERROR});
	expect_mac_error(th_push_map(&j, 0, 0, NULL), "failed its MAC");
	fired();
	proxy_rule(&px, (struct rule){.act = PASS});
	assert_int_equal(th_push_map(&j, 0, 0, NULL), USH_ECOMMITTED);
	th_verify(&j);
	th_job_free(&j);
}

/* A control frame sent twice: a second HEARTBEAT is refused by the
 * worker; a second HELLO answer by the writer. */
static void replayed_frames_refused(void **state)
{
	(void)state;
	proxy_rule(&px, (struct rule){.act = REPLAY, .dir = C2W,
				      .type = USHI_FRAME_HEARTBEAT});
	th_ok(ush_app_heartbeat(px.addr, NULL, 10000)); /* the first */
	fired();
	expect_worker_log("HEARTBEAT frame: a control frame failed its MAC");
	proxy_rule(&px, (struct rule){.act = REPLAY, .dir = W2C,
				      .type = USHI_FRAME_HELLO});
	struct th_job j = job(5, 1, NULL);
	expect_mac_error(th_push_map(&j, 0, 0, NULL), "failed its MAC");
	fired();
}

/* A DROP injected into a writer's live connection, before its commit:
 * without a tag and with a forged one, the worker refuses it and drops
 * nothing; the shuffle's committed map reads back. */
static void injected_drop_refused(void **state)
{
	(void)state;
	proxy_rule(&px, (struct rule){.act = PASS});
	struct ush_status st[1] = {{0}};
	struct th_job j = job(6, 1, st);
	th_ok(th_push_map(&j, 0, 0, NULL));
	struct th_job j2 = job(6, 2, NULL);
	proxy_rule(&px, (struct rule){.act = INJECT_DROP, .dir = C2W,
				      .type = USHI_FRAME_MAPPER_END,
				      .drop_shuffle = 6});
	expect_mac_error(th_push_map(&j2, 1, 0, NULL), "without its MAC");
	fired();
	expect_worker_log("DROP frame: a control frame without its MAC");
	proxy_rule(&px, (struct rule){.act = INJECT_TAGGED_DROP, .dir = C2W,
				      .type = USHI_FRAME_MAPPER_END,
				      .drop_shuffle = 6});
	expect_mac_error(th_push_map(&j2, 1, 1, NULL), "failed its MAC");
	fired();
	proxy_rule(&px, (struct rule){.act = PASS});
	th_verify(&j);
	th_job_free(&j);
}

/* A refusal for a MAC counts as an authentication failure of the
 * worker (errors{kind="auth"}), as a wrong proof does: here a worker of
 * this process, whose counters the test reads. */
static void mac_failures_counted(void **state)
{
	(void)state;
	char addr[64] = ""; /* any port */
	const char *dir = th_tmpdir("mac-count");
	ush_worker *w = th_worker_embed(dir, 1, addr, sizeof(addr));
	struct proxy p2;
	proxy_start(&p2, ush_worker_port(w));
	proxy_rule(&p2, (struct rule){.act = REPLAY, .dir = C2W,
				      .type = USHI_FRAME_HEARTBEAT});
	th_ok(ush_app_heartbeat(p2.addr, NULL, 10000));
	assert_int_equal(atomic_load(&p2.rule.fired) > 0, 1);
	struct ush_worker_stats st;
	for (int i = 0; i < 1000; i++) {
		ush_worker_stats(w, &st);
		if (st.errors[USH_WORKER_ERR_AUTH])
			break;
		usleep(10000);
	}
	assert_int_equal(st.errors[USH_WORKER_ERR_AUTH], 1);
	proxy_stop(&p2);
	ush_worker_free(w);
	th_rmrf(dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(untouched_connections_work),
		cmocka_unit_test(altered_commit_refused),
		cmocka_unit_test(altered_ack_refused),
		cmocka_unit_test(altered_fetch_drop_error_refused),
		cmocka_unit_test(replayed_frames_refused),
		cmocka_unit_test(injected_drop_refused),
		cmocka_unit_test(mac_failures_counted),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
