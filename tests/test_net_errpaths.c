/*
 * The net error paths: a stalled worker under SEND_ZC must not hang the
 * writer (teardown or commit); replies larger than the client expects are
 * refused, not read past a buffer or reported through an unset pointer; a
 * second worker in the process must not reorder the first one's commit
 * log; a ring with no op to spare for sends is refused at open instead of
 * hanging.
 */
#include "net_helpers.h"
#include "net/auth.h"
#include "net/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <stdatomic.h>

#define TIMEOUT_MS 2000u

struct zc_pusher {
	const char *workers;
	atomic_ulong records;
	atomic_int done;
	int ret;
	char msg[512];
};

/* Waits up to 20 timeouts for tid, which runs against the SIGSTOPped
 * worker w, to set *done; resumes w, and fails the test with hung (after
 * joining tid) if it did not. Returns the milliseconds waited. */
static unsigned join_stalled(struct th_worker *w, pthread_t tid,
			     atomic_int *done, const char *msg,
			     const char *hung)
{
	unsigned waited = 0;
	while (!atomic_load(done) && waited < 20u * TIMEOUT_MS) {
		usleep(10000);
		waited += 10;
	}
	int ok = atomic_load(done);
	kill(w->pid, SIGCONT);
	if (!ok) {
		print_message("stuck after: %s\n", msg);
		/* Let it finish so the thread can be joined. */
		th_worker_kill(w);
		pthread_join(tid, NULL);
		fail_msg("%s", hung);
	}
	pthread_join(tid, NULL);
	return waited;
}

static void *zc_push(void *p)
{
	struct zc_pusher *a = p;
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 16u << 20;
	a->ret = ush_ring_create(&ring, &ro);
	if (a->ret) {
		atomic_store(&a->done, 1);
		return NULL;
	}
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 3,
		.partitions = 8, .target = USH_TARGET_NET,
		.workers = a->workers, .timeout_ms = TIMEOUT_MS, .send_zc = 1};
	ush_writer *w = NULL;
	a->ret = ush_writer_open(&w, ring, &wo);
	if (!a->ret)
		a->ret = th_push_until_error(w, &a->records);
	snprintf(a->msg, sizeof(a->msg), "%s", ush_last_error());
	/* The teardown waits for every zero-copy notification. */
	ush_writer_free(w);
	ush_ring_free(ring);
	atomic_store(&a->done, 1);
	return NULL;
}

/* A worker stopped mid-push leaves zero-copy sends whose notifications
 * only come once the socket lets go of their pages: the writer must fail
 * and free within its timeout, not wait for them forever. */
static void zc_stalled_worker(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("netzcstall"));
	/* A window beyond what the socket buffers hold: the stalled
	 * worker's unread bytes stay in the writer's send queue. */
	w.extra = "--window=1073741824";
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct zc_pusher a = {.workers = w.addr};
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, zc_push, &a), 0);
	while (atomic_load(&a.records) < 200000 && !atomic_load(&a.done))
		usleep(1000);
	kill(w.pid, SIGSTOP);
	join_stalled(&w, tid, &a.done, a.msg,
		     "writer teardown hung on a stalled worker (SEND_ZC)");
	assert_true(a.ret < 0);
	print_message("writer error: %s\n", a.msg);
	th_worker_stop(&w);
	th_rmrf(w.dir);
}

struct zc_committer {
	const char *workers;
	atomic_int opened, stopped, done;
	int ret;
	char msg[512];
};

static void *zc_commit(void *p)
{
	struct zc_committer *a = p;
	ush_ring *ring = NULL;
	ush_writer *w = NULL;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 16u << 20;
	a->ret = ush_ring_create(&ring, &ro);
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 4,
		.partitions = 8, .target = USH_TARGET_NET,
		.workers = a->workers, .timeout_ms = TIMEOUT_MS, .send_zc = 1};
	if (!a->ret)
		a->ret = ush_writer_open(&w, ring, &wo);
	atomic_store(&a->opened, 1);
	while (!a->ret && !atomic_load(&a->stopped))
		usleep(1000);
	/* Less than the socket buffers take: every send completes, and only
	 * the zero-copy notifications wait for the stopped worker. */
	uint8_t buf[1024];
	for (uint32_t i = 0; !a->ret && i < 2000; i++)
		a->ret = ush_writer_write(w, i % 8, buf, th_rec(buf, 0, i));
	if (!a->ret)
		a->ret = ush_writer_commit(w, NULL);
	snprintf(a->msg, sizeof(a->msg), "%s", ush_last_error());
	ush_writer_free(w);
	ush_ring_free(ring);
	atomic_store(&a->done, 1);
	return NULL;
}

/* The same, when the stall begins before the sends: commit must fail
 * within the timeout rather than wait for notifications forever. */
static void zc_commit_stalled(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("netzccommit"));
	w.extra = "--window=1073741824";
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct zc_committer a = {.workers = w.addr};
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, zc_commit, &a), 0);
	while (!atomic_load(&a.opened))
		usleep(1000);
	kill(w.pid, SIGSTOP);
	atomic_store(&a.stopped, 1);
	unsigned waited = join_stalled(&w, tid, &a.done, a.msg,
				       "commit hung on a stalled worker "
				       "(SEND_ZC)");
	assert_true(a.ret < 0);
	print_message("commit error after %u ms: %s\n", waited, a.msg);
	th_worker_stop(&w);
	th_rmrf(w.dir);
}

/* A fake worker: answers HELLO, then answers whatever comes next with a
 * control frame larger than any reply a client expects: a FETCH naming
 * 600 attempts (4808 payload bytes), which passes proto_header() (FETCH
 * payloads may reach USHI_PROTO_CTRL_MAX). */
struct fake {
	int lfd, port;
	int eager; /* send the MANIFEST right after HELLO */
};

/* The worker's half of the challenge, with the tests' secret: the fake
 * proves it, takes the client's proof unchecked, and keys m. */
static int fake_auth(int fd, uint8_t *in, struct ushi_mac *m)
{
	uint8_t out[USHI_PROTO_SMALL];
	struct proto_auth a = {.step = USHI_AUTH_CHALLENGE};
	const char *key = getenv("USHUFFLE_SECRET");
	if (auth_nonce(a.nonce) ||
	    auth_mac((const uint8_t *)key, strlen(key), AUTH_WORKER, in,
		     USH_FRAME_HDR_SIZE + USHI_PROTO_HELLO_LEN, a.nonce, NULL,
		     a.mac))
		return -1;
	if (net_write(fd, out, proto_put_auth(out, &a)) ||
	    th_worker_mac(m, key, in, a.nonce))
		return -1;
	return net_read(fd, in, USH_FRAME_HDR_SIZE + USHI_PROTO_AUTH_LEN);
}

static void *fake_worker(void *p)
{
	struct fake *fk = p;
	int fd = accept(fk->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	uint8_t in[USH_FRAME_HDR_SIZE + USHI_PROTO_HELLO_LEN];
	uint8_t out[8192];
	struct proto_want m[300];
	for (uint32_t i = 0; i < 300; i++)
		m[i] = (struct proto_want){0, i, 0, 0};
	_Static_assert(sizeof(out) >= USH_FRAME_HDR_SIZE +
					      USHI_PROTO_FETCH_LEN +
					      300 * USHI_PROTO_WANT_LEN,
		       "fake reply buffer");
	struct ushi_mac mac = {0};
	if (net_read(fd, in, sizeof(in)) == 0 && fake_auth(fd, in, &mac) == 0) {
		struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_ADMIN,
					4u << 20, 64u << 20, 0, 0, 0, "default", 0, {0}};
		net_write(fd, out, mac_seal(&mac, out,
					    proto_put_hello(out, &h)));
		/* The DROP: a bare header. */
		if (fk->eager || net_read(fd, in, USH_FRAME_HDR_SIZE) == 0)
			net_write(fd, out, proto_put_fetch(out, 1, 0, 1, 0, m, 300));
	}
	usleep(100000);
	close(fd);
	mac_free(&mac);
	return NULL;
}

/* A reply larger than the net sink's receive buffer fails the connection
 * with a message of its own (it used to print an unset pointer). */
static void writer_reply_too_large(void **state)
{
	(void)state;
	struct fake fk = {.eager = 1};
	fk.lfd = th_listen(&fk.port);
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, fake_worker, &fk), 0);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", fk.port);
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, NULL));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 1,
		.partitions = 1, .target = USH_TARGET_NET, .workers = addr,
		.timeout_ms = 5000};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	int ret = ush_writer_write(w, 0, "x", 1);
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	assert_int_equal(ret, -EPROTO);
	const char *msg = ush_last_error();
	if (!strstr(msg, "reply larger"))
		fail_msg("unexpected error: %s", msg);
	ush_writer_free(w);
	ush_ring_free(ring);
	pthread_join(tid, NULL);
	close(fk.lfd);
}

/* ush_shuffle_drop reads the reply into a buffer sized for an ERROR: a larger
 * control frame is refused, not read past the buffer's end. */
static void drop_reply_too_large(void **state)
{
	(void)state;
	struct fake fk = {0};
	fk.lfd = th_listen(&fk.port);
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, fake_worker, &fk), 0);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", fk.port);
	int ret = ush_shuffle_drop(addr, NULL, 1, 5000);
	pthread_join(tid, NULL);
	close(fk.lfd);
	assert_int_equal(ret, USH_ECORRUPT);
	print_message("%s\n", ush_last_error());
}

/* Two workers in one process share the commit log sequence: a second
 * worker replaying a shorter log must not move it back, or a DROP logged
 * after it sorts before the commits it undid, and they come back at the
 * next replay. */
static void drop_after_second_worker(void **state)
{
	(void)state;
	char d1[512], d2[512], a1[64] = "", a2[64] = "";
	snprintf(d1, sizeof(d1), "%s", th_tmpdir("lsn1"));
	snprintf(d2, sizeof(d2), "%s", th_tmpdir("lsn2"));
	ush_worker *wa = th_worker_embed(d1, 1, a1, sizeof(a1));
	struct ush_status st9[2] = {{0}}, st1[2] = {{0}};
	struct th_job j9 = {.workers = a1, .shuffle = 9, .partitions = 2,
			    .maps = 2, .records = 100, .statuses = st9};
	struct th_job j1 = j9;
	j1.shuffle = 1;
	j1.statuses = st1;
	for (uint32_t m = 0; m < 2; m++)
		th_ok(th_push_map(&j9, m, 0, NULL));
	for (uint32_t m = 0; m < 2; m++)
		th_ok(th_push_map(&j1, m, 0, NULL));
	ush_worker *wb = th_worker_embed(d2, 1, a2, sizeof(a2));
	th_ok(ush_shuffle_drop(a1, NULL, 1, 0));
	ush_worker_free(wa);
	wa = th_worker_embed(d1, 1, a1, sizeof(a1)); /* same port */
	ush_reader *r;
	int ret = th_reader_open(&r, st1, 2, 0, 0);
	if (!ret)
		ush_reader_free(r);
	assert_int_equal(ret, USH_ENOTCOMMITTED);
	th_verify(&j9);
	th_job_free(&j9);
	th_job_free(&j1);
	ush_worker_free(wb);
	ush_worker_free(wa);
	th_rmrf(d1);
	th_rmrf(d2);
}

/* A DROP (and a heartbeat, the same request path) goes to every worker of
 * the list even when one of them is down: the error names the dead one,
 * and the live one has dropped the shuffle. A heartbeat that stopped at
 * the first dead worker let the live ones expire the application. */
static void drop_past_dead_worker(void **state)
{
	(void)state;
	char d[512], a[64] = "", list[160];
	snprintf(d, sizeof(d), "%s", th_tmpdir("admindead"));
	ush_worker *wk = th_worker_embed(d, 1, a, sizeof(a));
	int s = socket(AF_INET, SOCK_STREAM, 0); /* a port nobody listens on */
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	close(s);
	char dead[64];
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", ntohs(sa.sin_port));
	snprintf(list, sizeof(list), "%s,%s", dead, a);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = a, .shuffle = 5, .partitions = 4,
			   .maps = 1, .records = 100, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	assert_int_equal(ush_app_heartbeat(list, NULL, 2000), -ECONNREFUSED);
	assert_int_equal(ush_shuffle_drop(list, NULL, 5, 2000), -ECONNREFUSED);
	if (!strstr(ush_last_error(), dead))
		fail_msg("the error does not name %s: %s", dead,
			 ush_last_error());
	ush_reader *r;
	int ret = th_reader_open(&r, st, 1, 0, 0);
	if (!ret)
		ush_reader_free(r);
	assert_int_equal(ret, USH_ENOTCOMMITTED);
	th_job_free(&j);
	ush_worker_free(wk);
	th_rmrf(d);
}

/* A compaction of the commit log keeps every record appended before it,
 * the one whose append set it off included: that record used to be
 * appended, then the live state (which its caller had not yet updated)
 * written as the snapshot and the log truncated, so a commit or claim
 * acknowledged then was gone at the next restart. The log is padded to
 * just under the compaction size (1 MiB) with copies of real records,
 * which replay applies harmlessly; then shuffles are committed, never
 * dropped, so that every record is a claim or a commit, until the log
 * shrinks; after a restart every one of them reads back. */
#define COMPACT_SHUFFLES 200
static void compaction_keeps_the_last_record(void **state)
{
	(void)state;
	char d[512], a[64] = "", log[600];
	snprintf(d, sizeof(d), "%s", th_tmpdir("compact"));
	snprintf(log, sizeof(log), "%s/commit.log", d);
	ush_worker *wk = th_worker_embed(d, 1, a, sizeof(a));
	struct ush_status st0[1] = {{0}};
	struct th_job j0 = {.workers = a, .shuffle = 1000, .partitions = 2,
			    .maps = 1, .records = 10, .statuses = st0};
	th_ok(th_push_map(&j0, 0, 0, NULL));
	th_ok(ush_shuffle_drop(a, NULL, 1000, 0));
	th_job_free(&j0);
	ush_worker_free(wk);
	size_t n;
	uint8_t *recs = th_read_file(log, &n); /* claim, commit, drop */
	assert_true(n > 0);
	int fd = open(log, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	for (size_t have = n; have + n <= (1u << 20) - (8u << 10); have += n)
		assert_int_equal(write(fd, recs, n), (ssize_t)n);
	close(fd);
	free(recs);

	wk = th_worker_embed(d, 1, a, sizeof(a)); /* same port */
	static struct ush_status st[COMPACT_SHUFFLES];
	static struct th_job j[COMPACT_SHUFFLES];
	struct stat sb;
	assert_int_equal(stat(log, &sb), 0);
	off_t last = sb.st_size;
	bool compacted = false;
	unsigned k;
	for (k = 0; k < COMPACT_SHUFFLES && !compacted; k++) {
		st[k] = (struct ush_status){0};
		j[k] = (struct th_job){.workers = a, .shuffle = 1 + k,
			.partitions = 2, .maps = 1, .records = 10,
			.statuses = &st[k]};
		th_ok(th_push_map(&j[k], 0, 0, NULL));
		assert_int_equal(stat(log, &sb), 0);
		compacted = sb.st_size < last;
		last = sb.st_size;
	}
	if (!compacted)
		fail_msg("no compaction after %u shuffles past a log of "
			 "1 MiB - 8 KiB", k);
	ush_worker_free(wk);
	wk = th_worker_embed(d, 1, a, sizeof(a));
	for (unsigned i = 0; i < k; i++) {
		th_verify(&j[i]);
		th_job_free(&j[i]);
	}
	ush_worker_free(wk);
	th_rmrf(d);
}

/* Each worker connection holds an armed receive op for good: a ring
 * whose iodepth leaves no op for sends must be refused at open, not hang
 * the first send waiting for a reply that needs data first. */
static void iodepth_below_workers(void **state)
{
	(void)state;
	char d[512], a[64] = "";
	snprintf(d, sizeof(d), "%s", th_tmpdir("iodepth"));
	ush_worker *wk = th_worker_embed(d, 1, a, sizeof(a));
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.iodepth = 1;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 1,
		.partitions = 1, .target = USH_TARGET_NET, .workers = a,
		.timeout_ms = 2000};
	ush_writer *w = NULL;
	int ret = ush_writer_open(&w, ring, &wo);
	if (!ret) {
		ret = ush_writer_write(w, 0, "x", 1);
		if (!ret)
			ret = ush_writer_commit(w, NULL);
		ush_writer_free(w);
	}
	assert_int_equal(ret, -EINVAL);
	print_message("%s\n", ush_last_error());
	/* With one op to spare it works. */
	ush_ring_free(ring);
	ro.iodepth = 2;
	th_ok(ush_ring_create(&ring, &ro));
	th_ok(ush_writer_open(&w, ring, &wo));
	th_ok(ush_writer_write(w, 0, "x", 1));
	th_ok(ush_writer_commit(w, NULL));
	ush_writer_free(w);
	ush_ring_free(ring);
	ush_worker_free(wk);
	th_rmrf(d);
}

/* Two fake workers that never answer: the first holds its connection
 * until the second is dialled. */
struct stalled {
	int l1, l2;
	bool still_open; /* the first connection was open at the second */
};

static void *stalled_fakes(void *arg)
{
	struct stalled *st = arg;
	int c1 = accept(st->l1, NULL, NULL);
	struct pollfd p = {.fd = st->l2, .events = POLLIN};
	if (c1 < 0 || poll(&p, 1, 30000) != 1) {
		if (c1 >= 0)
			close(c1);
		return NULL;
	}
	int c2 = accept(st->l2, NULL, NULL);
	/* The client's HELLO is there to read: only a hang-up tells
	 * whether it gave up on the first worker already. */
	p = (struct pollfd){.fd = c1, .events = POLLIN | POLLRDHUP};
	st->still_open = poll(&p, 1, 0) >= 0 &&
			 !(p.revents & (POLLRDHUP | POLLHUP | POLLERR));
	close(c2);
	close(c1);
	return NULL;
}

/* A heartbeat (and a drop, the same path) asks every worker of the list
 * at once, with one deadline for the lot: the second worker is dialled
 * while the first, stalled, still holds the request. One at a time, the
 * second was dialled only once the first had timed out (20 s here), and
 * N stalled workers cost N timeouts. */
static void heartbeat_workers_at_once(void **state)
{
	(void)state;
	int p1, p2;
	struct stalled st = {.l1 = th_listen(&p1), .l2 = th_listen(&p2)};
	char list[64];
	snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", p1, p2);
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, stalled_fakes, &st), 0);
	int ret = ush_app_heartbeat(list, NULL, 20000);
	pthread_join(tid, NULL);
	assert_true(ret < 0); /* neither answered */
	assert_true(st.still_open);
	close(st.l1);
	close(st.l2);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(zc_stalled_worker),
		cmocka_unit_test(zc_commit_stalled),
		cmocka_unit_test(drop_reply_too_large),
		cmocka_unit_test(writer_reply_too_large),
		cmocka_unit_test(drop_after_second_worker),
		cmocka_unit_test(iodepth_below_workers),
		cmocka_unit_test(drop_past_dead_worker),
		cmocka_unit_test(heartbeat_workers_at_once),
		cmocka_unit_test(compaction_keeps_the_last_record),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
