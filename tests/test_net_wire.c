/*
 * The client's send and receive paths against a real worker through a
 * loopback proxy that reshapes the byte stream: the writer's bytes are
 * taken slowly through a tiny receive buffer, so its sends come back short
 * with several frames queued behind them; the worker's bytes reach the
 * reader (and the writer's replies) in pieces of one byte, then of random
 * sizes, so every frame header and payload is cut at many places. Also a
 * push and read with an SQPOLL ring. Every record is verified.
 */
#include "net_helpers.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>

/* ------------------------------------------------------------ the proxy */

struct proxy {
	int lfd, port, target;
	char addr[64];
	/* Writer -> worker: at most up_chunk bytes per read, a pause of
	 * up_pause_us after each (0: none); the socket's receive buffer is
	 * up_rcvbuf bytes (0: the default). */
	unsigned up_chunk, up_pause_us, up_rcvbuf;
	/* Worker -> client: the first down_bytes1 bytes of each connection
	 * one per send, with a pause of down_pause_us after each, then
	 * pieces of 1..down_chunk bytes (0: as read). */
	unsigned down_bytes1, down_pause_us, down_chunk;
	atomic_int stop;
	atomic_int pumps; /* pump threads not yet ended */
	pthread_t th;
};

struct pump {
	struct proxy *p;
	int cfd, wfd;
	unsigned seed;
};

static void pump_down(struct pump *u, const uint8_t *b, size_t n,
		      uint64_t *sent)
{
	struct proxy *p = u->p;
	size_t off = 0;
	while (off < n) {
		size_t k = n - off;
		if (*sent < p->down_bytes1)
			k = 1;
		else if (p->down_chunk)
			k = 1 + rand_r(&u->seed) % p->down_chunk;
		if (k > n - off)
			k = n - off;
		ssize_t r = send(u->cfd, b + off, k, MSG_NOSIGNAL);
		if (r <= 0)
			return; /* the client went away */
		off += (size_t)r;
		*sent += (uint64_t)r;
		if (*sent <= p->down_bytes1 && p->down_pause_us)
			usleep(p->down_pause_us);
	}
}

static void *pump_main(void *arg)
{
	struct pump *u = arg;
	struct proxy *p = u->p;
	static __thread uint8_t buf[64 << 10];
	uint64_t down = 0;
	bool up_open = true, down_open = true;
	while ((up_open || down_open) && !atomic_load(&p->stop)) {
		struct pollfd f[2] = {{u->cfd, up_open ? POLLIN : 0, 0},
				      {u->wfd, down_open ? POLLIN : 0, 0}};
		if (poll(f, 2, 100) <= 0)
			continue;
		if (f[0].revents) {
			size_t k = p->up_chunk ? p->up_chunk : sizeof(buf);
			ssize_t r = recv(u->cfd, buf, k, 0);
			if (r <= 0) {
				up_open = false;
				shutdown(u->wfd, SHUT_WR);
			} else {
				for (ssize_t o = 0, s; o < r; o += s)
					if ((s = send(u->wfd, buf + o,
						      (size_t)(r - o),
						      MSG_NOSIGNAL)) <= 0)
						break;
				if (p->up_pause_us)
					usleep(p->up_pause_us);
			}
		}
		if (f[1].revents) {
			ssize_t r = recv(u->wfd, buf, sizeof(buf), 0);
			if (r <= 0) {
				down_open = false;
				shutdown(u->cfd, SHUT_WR);
			} else {
				pump_down(u, buf, (size_t)r, &down);
			}
		}
	}
	close(u->cfd);
	close(u->wfd);
	free(u);
	/* Last: proxy_stop() waits for this before p's memory is reused. */
	atomic_fetch_sub(&p->pumps, 1);
	return NULL;
}

static void *proxy_main(void *arg)
{
	struct proxy *p = arg;
	unsigned seed = 1;
	while (!atomic_load(&p->stop)) {
		struct pollfd f = {p->lfd, POLLIN, 0};
		if (poll(&f, 1, 100) <= 0)
			continue;
		int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			continue;
		int one = 1;
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		int wfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons((uint16_t)p->target)};
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		if (wfd < 0 || connect(wfd, (struct sockaddr *)&a, sizeof(a))) {
			close(cfd);
			if (wfd >= 0)
				close(wfd);
			continue;
		}
		struct pump *u = malloc(sizeof(*u));
		*u = (struct pump){p, cfd, wfd, seed++};
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		atomic_fetch_add(&p->pumps, 1);
		if (pthread_create(&t, &at, pump_main, u)) {
			atomic_fetch_sub(&p->pumps, 1);
			close(cfd);
			close(wfd);
			free(u);
		}
		pthread_attr_destroy(&at);
	}
	return NULL;
}

static void proxy_start(struct proxy *p, int target)
{
	p->target = target;
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(p->lfd >= 0);
	/* Set on the listener, so accepted sockets start with it (and
	 * advertise a window to match). */
	if (p->up_rcvbuf)
		setsockopt(p->lfd, SOL_SOCKET, SO_RCVBUF, &p->up_rcvbuf,
			   sizeof(p->up_rcvbuf));
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	socklen_t len = sizeof(a);
	assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(p->lfd, 64), 0);
	assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &len), 0);
	p->port = ntohs(a.sin_port);
	snprintf(p->addr, sizeof(p->addr), "127.0.0.1:%d", p->port);
	atomic_store(&p->stop, 0);
	atomic_store(&p->pumps, 0);
	assert_int_equal(pthread_create(&p->th, NULL, proxy_main, p), 0);
}

/* Stops accepting and waits for every pump to end (each sees stop
 * within its 100 ms poll): none may touch p once the caller reuses it. */
static void proxy_stop(struct proxy *p)
{
	atomic_store(&p->stop, 1);
	pthread_join(p->th, NULL);
	close(p->lfd);
	while (atomic_load(&p->pumps))
		usleep(1000);
}

/* ------------------------------------------------------------ the jobs */

struct push {
	const char *workers;
	uint32_t shuffle;
	uint32_t partitions, records;
	size_t push_size;
	int sqpoll;
	int send_zc;
	uint32_t zc_threshold;
	unsigned iodepth;
};

/* Pushes map m of records th_rec(m, i) to partition i % partitions;
 * the commit's status goes to *st (malloc'd). */
static void push_map(const struct push *u, uint32_t m, struct ush_status *st,
		     struct ush_writer_stats *ws)
{
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 8u << 20;
	ro.push_size = u->push_size ? u->push_size : ro.push_size;
	ro.sqpoll = u->sqpoll;
	ro.iodepth = u->iodepth ? u->iodepth : ro.iodepth;
	int ret = ush_ring_create(&ring, &ro);
	if (u->sqpoll && (ret == -EPERM || ret == -EINVAL)) {
		print_message("SQPOLL refused here: %s\n", ush_last_error());
		skip();
	}
	th_ok(ret);
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = u->shuffle,
		.map = m, .partitions = u->partitions,
		.target = USH_TARGET_NET, .workers = u->workers,
		.send_zc = u->send_zc, .zc_threshold = u->zc_threshold};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	uint8_t buf[1024];
	for (uint32_t i = 0; i < u->records; i++)
		th_ok(ush_writer_write(w, i % u->partitions, buf,
				       th_rec(buf, m, i)));
	th_ok(ush_writer_commit(w, NULL));
	struct ush_status s;
	th_ok(ush_writer_status(w, &s));
	void *copy = malloc(s.len);
	assert_non_null(copy);
	memcpy(copy, s.data, s.len);
	*st = (struct ush_status){copy, s.len};
	ush_writer_stats(w, ws);
	ush_writer_free(w);
	ush_ring_free(ring);
}

static void push_and_verify(const struct push *u, uint32_t maps,
			    struct ush_writer_stats *total)
{
	struct ush_status *st = calloc(maps, sizeof(*st));
	assert_non_null(st);
	memset(total, 0, sizeof(*total));
	for (uint32_t m = 0; m < maps; m++) {
		struct ush_writer_stats ws;
		push_map(u, m, &st[m], &ws);
		assert_int_equal(ws.net_sends + ws.net_zc_sends, ws.batches);
		total->batches += ws.batches;
		total->net_send_ops += ws.net_send_ops;
		total->net_short_sends += ws.net_short_sends;
		total->net_zc_sends += ws.net_zc_sends;
	}
	struct th_job j = {.workers = u->workers, .shuffle = u->shuffle,
			   .partitions = u->partitions, .maps = maps,
			   .records = u->records, .statuses = st};
	th_verify(&j);
	th_job_free(&j);
	free(st);
}

static struct th_worker wk;

static int setup(void **state)
{
	(void)state;
	memset(&wk, 0, sizeof(wk));
	snprintf(wk.dir, sizeof(wk.dir), "%s", th_tmpdir("wire"));
	/* A window above what a socket buffers (4 MiB at most by default):
	 * the writer's sends, not its credit, wait for the slow proxy. */
	wk.extra = "--window=67108864";
	th_worker_spawn(&wk, "127.0.0.1", 0, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	th_worker_stop(&wk);
	th_rmrf(wk.dir);
	return 0;
}

/*
 * The worker's side reads slowly through a 4 KiB receive buffer: the
 * writer's gathered sends fill the socket and come back short while more
 * frames queue behind them; each resumes from the first byte not sent.
 * Some frames go as SEND_ZC (send_zc=1), which must stay in order with the
 * gathered ones.
 */
static void short_sends_with_frames_queued(void **state)
{
	(void)state;
	struct proxy p = {.up_chunk = 1500, .up_pause_us = 20,
			  .up_rcvbuf = 65536};
	proxy_start(&p, wk.port);
	struct ush_writer_stats t;
	struct push u = {.workers = p.addr, .shuffle = 1, .partitions = 7,
			 .records = 40000, .send_zc = -1};
	push_and_verify(&u, 1, &t);
	print_message("copied: %llu frames, %llu send ops, %llu short\n",
		      (unsigned long long)t.batches,
		      (unsigned long long)t.net_send_ops,
		      (unsigned long long)t.net_short_sends);
	assert_true(t.net_short_sends > 0);
	/* Gathering: fewer send operations than frames. */
	assert_true(t.net_send_ops < t.batches + t.net_short_sends);
	proxy_stop(&p);
	/* Zero-copy skbs overrun a receive buffer this small (their
	 * truesize counts whole pages), and TCP then recovers only by
	 * retransmission, a few a second: the default one here. */
	p.up_rcvbuf = 0;
	proxy_start(&p, wk.port);
	u.workers = p.addr;
	u.send_zc = 1;
	u.shuffle = 2;
	push_and_verify(&u, 1, &t);
	print_message("zero-copy: %llu frames, %llu send ops, %llu short\n",
		      (unsigned long long)t.batches,
		      (unsigned long long)t.net_send_ops,
		      (unsigned long long)t.net_short_sends);
	assert_int_equal(t.net_zc_sends, t.batches);
	proxy_stop(&p);
}

/*
 * The worker's replies reach the reader (and the writer's ACKs reach the
 * writer) one byte per send for the first 20,000 bytes of each stream,
 * then in pieces of 1..97 bytes: with 8 KiB push buffers every frame
 * header and payload is received in many pieces, cut at many offsets.
 */
static void reader_takes_frames_in_pieces(void **state)
{
	(void)state;
	struct proxy p = {.down_bytes1 = 20000, .down_pause_us = 5,
			  .down_chunk = 97};
	proxy_start(&p, wk.port);
	struct ush_writer_stats t;
	struct push u = {.workers = p.addr, .shuffle = 3, .partitions = 3,
			 .records = 1500, .push_size = 8u << 10};
	push_and_verify(&u, 2, &t);
	proxy_stop(&p);
}

/*
 * Frames above the reader's 2 MiB receive buffer (a record above the push
 * size goes out alone) between small ones, all received in pieces: the
 * buffer grows to the frame and the records around it stay intact.
 */
static void reader_takes_a_frame_above_its_buffer(void **state)
{
	(void)state;
	struct proxy p = {.down_bytes1 = 4096, .down_chunk = 4000};
	proxy_start(&p, wk.port);
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 7,
		.partitions = 1, .target = USH_TARGET_NET, .workers = p.addr};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	enum { BIG = 3 << 20, N = 7 };
	uint8_t *big = malloc(BIG);
	assert_non_null(big);
	size_t lens[N];
	for (uint32_t i = 0; i < N; i++) {
		lens[i] = i % 3 == 1 ? BIG - i : 100 + i;
		th_fill(big, lens[i], i + 1);
		th_ok(ush_writer_write(w, 0, big, lens[i]));
	}
	th_ok(ush_writer_commit(w, NULL));
	struct ush_status st;
	th_ok(ush_writer_status(w, &st));
	ush_reader *r;
	th_ok(th_reader_open(&r, &st, 1, 0, 20000));
	const void *rec;
	size_t len;
	uint8_t *exp = malloc(BIG);
	assert_non_null(exp);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(ush_reader_next(r, &rec, &len), 1);
		assert_int_equal(len, lens[i]);
		th_fill(exp, lens[i], i + 1);
		assert_memory_equal(rec, exp, len);
	}
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	ush_writer_free(w);
	ush_ring_free(ring);
	free(big);
	free(exp);
	proxy_stop(&p);
}

/* A whole shuffle through an SQPOLL ring and a real worker: pushed,
 * committed and every record read back. */
static void sqpoll_push_and_read(void **state)
{
	(void)state;
	struct ush_writer_stats t;
	struct push u = {.workers = wk.addr, .shuffle = 4, .partitions = 9,
			 .records = 20000, .sqpoll = 1};
	push_and_verify(&u, 3, &t);
	/* And with the worker's side slow, so sends come back short and
	 * are resumed while the SQPOLL thread runs. Copied sends: through
	 * this proxy a zero-copy send stalls past the timeout in about 1 run
	 * in 5, with or without SQPOLL (design.md, known gaps); zero-copy
	 * short sends are covered by short_sends_with_frames_queued. */
	struct proxy p = {.up_chunk = 1500, .up_pause_us = 20};
	proxy_start(&p, wk.port);
	u.workers = p.addr;
	u.send_zc = -1;
	u.shuffle = 5;
	u.records = 40000;
	push_and_verify(&u, 1, &t);
	proxy_stop(&p);
}

/*
 * Two workers and an iodepth of 3: two receives stay armed and one op is
 * left. Frames above 65,000 bytes go zero-copy (forced: auto sends none
 * to this host), an op each; the others
 * are gathered (the connection's one SENDMSG op): a frame must never wait
 * for an op that a frame held back for the next gather keeps.
 */
static void zero_copy_and_gathers_share_one_op(void **state)
{
	(void)state;
	struct th_worker w2 = {0};
	snprintf(w2.dir, sizeof(w2.dir), "%s", th_tmpdir("wire2"));
	th_worker_spawn(&w2, "127.0.0.1", 0, 1);
	char list[160];
	snprintf(list, sizeof(list), "%s,%s", wk.addr, w2.addr);
	struct ush_writer_stats t;
	struct push u = {.workers = list, .shuffle = 6, .partitions = 4,
			 .records = 20000, .iodepth = 3, .send_zc = 1,
			 .zc_threshold = 65000};
	push_and_verify(&u, 2, &t);
	print_message("%llu frames, %llu zero-copy\n",
		      (unsigned long long)t.batches,
		      (unsigned long long)t.net_zc_sends);
	assert_true(t.net_zc_sends > 0 && t.net_zc_sends < t.batches);
	th_worker_stop(&w2);
	th_rmrf(w2.dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(short_sends_with_frames_queued,
						setup, teardown),
		cmocka_unit_test_setup_teardown(reader_takes_frames_in_pieces,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			reader_takes_a_frame_above_its_buffer, setup, teardown),
		cmocka_unit_test_setup_teardown(sqpoll_push_and_read, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			zero_copy_and_gathers_share_one_op, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
