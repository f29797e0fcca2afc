/*
 * Sealed frames through a real ushuffled (docs/security.md, "Sealed
 * frames"): maps pushed under a data key through a recording proxy and
 * read back through it. Neither what went over the wire, both ways, nor
 * any file in the worker's directory holds a plain record; the same job
 * pushed plain shows them in both, so the search can fail. One worker
 * serves a sealed and a plain shuffle side by side.
 */
#define _GNU_SOURCE
#include "net_helpers.h"

#include <poll.h>
#include <pthread.h>

static const struct ush_seal_key KEY = {
	.id = 3,
	.key = "a data key workers never hold..",
};

/* ------------------------------------------------ a recording proxy */

struct proxy {
	int lfd, port, to;  /* listener, its port, the worker's port */
	pthread_mutex_t lock;
	uint8_t *cap;       /* every byte forwarded, both ways */
	size_t len, room;
	atomic_int live;    /* connection threads running */
	int conns[64];      /* their library-side sockets (under lock) */
	pthread_t acceptor;
};

struct pipe_pair {
	struct proxy *p;
	int a, b;
};

static void record(struct proxy *p, const uint8_t *b, size_t n)
{
	pthread_mutex_lock(&p->lock);
	if (p->len + n > p->room) {
		p->room = 2 * (p->len + n);
		p->cap = realloc(p->cap, p->room);
		if (!p->cap)
			abort();
	}
	memcpy(p->cap + p->len, b, n);
	p->len += n;
	pthread_mutex_unlock(&p->lock);
}

/* Forwards both ways until either side ends. */
static void *forward(void *arg)
{
	struct pipe_pair *pp = arg;
	uint8_t buf[65536];
	struct pollfd fds[2] = {{pp->a, POLLIN, 0}, {pp->b, POLLIN, 0}};
	for (bool done = false; !done;) {
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		for (int k = 0; k < 2 && !done; k++) {
			if (!fds[k].revents)
				continue;
			ssize_t n = read(fds[k].fd, buf, sizeof(buf));
			if (n <= 0) {
				done = true;
				break;
			}
			record(pp->p, buf, (size_t)n);
			for (ssize_t off = 0; off < n;) {
				ssize_t w = write(fds[!k].fd, buf + off,
						  (size_t)(n - off));
				if (w <= 0) {
					done = true;
					break;
				}
				off += w;
			}
		}
	}
	pthread_mutex_lock(&pp->p->lock);
	for (int i = 0; i < 64; i++)
		if (pp->p->conns[i] == pp->a)
			pp->p->conns[i] = -1;
	pthread_mutex_unlock(&pp->p->lock);
	close(pp->a);
	close(pp->b);
	atomic_fetch_sub(&pp->p->live, 1);
	free(pp);
	return NULL;
}

static void *acceptor(void *arg)
{
	struct proxy *p = arg;
	for (;;) {
		int c = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			return NULL; /* the listener was shut down */
		struct pipe_pair *pp = malloc(sizeof(*pp));
		if (!pp)
			abort();
		*pp = (struct pipe_pair){p, c, th_tcp_connect(p->to)};
		atomic_fetch_add(&p->live, 1);
		pthread_mutex_lock(&p->lock);
		for (int i = 0; i < 64; i++)
			if (p->conns[i] < 0) {
				p->conns[i] = c;
				break;
			}
		pthread_mutex_unlock(&p->lock);
		pthread_t t;
		if (pthread_create(&t, NULL, forward, pp))
			abort();
		pthread_detach(t);
	}
}

static void proxy_start(struct proxy *p, int to)
{
	memset(p, 0, sizeof(*p));
	p->to = to;
	for (int i = 0; i < 64; i++)
		p->conns[i] = -1;
	pthread_mutex_init(&p->lock, NULL);
	p->lfd = th_listen(&p->port);
	assert_int_equal(pthread_create(&p->acceptor, NULL, acceptor, p), 0);
}

/* Stops accepting, ends the connections the library keeps (a reader's
 * between streams: its stream is over) and waits, 30 s at most, for
 * every connection to end. The capture stays: free p->cap. */
static void proxy_stop(struct proxy *p)
{
	shutdown(p->lfd, SHUT_RDWR);
	pthread_join(p->acceptor, NULL);
	close(p->lfd);
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < 64; i++)
		if (p->conns[i] >= 0)
			shutdown(p->conns[i], SHUT_RDWR);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; atomic_load(&p->live) && i < 3000; i++)
		usleep(10000);
	assert_int_equal(atomic_load(&p->live), 0);
	pthread_mutex_destroy(&p->lock);
}

/* ------------------------------------------ looking for plain records */

#define MAPS 3
#define RECORDS 2000
#define NEEDLE 64

/* Does p hold 64 bytes of a record (after its 8-byte id) of the job? */
static bool holds_records(const uint8_t *p, size_t n)
{
	uint8_t rec[1024];
	for (uint32_t m = 0; m < MAPS; m++)
		for (uint32_t i = 0; i < RECORDS; i += 97)
			if (th_rec(rec, m, i) >= 8 + NEEDLE &&
			    memmem(p, n, rec + 8, NEEDLE))
				return true;
	return false;
}

/* Pushes and reads shuffle (sealed under key, or plain) through the
 * proxy in front of worker w; says whether the wire and w's directory
 * showed plain records. */
static void run(struct th_worker *w, uint32_t shuffle,
		const struct ush_seal_key *key, enum ush_codec codec,
		bool *wire, bool *disk)
{
	struct proxy p;
	proxy_start(&p, w->port);
	char list[64];
	snprintf(list, sizeof(list), "127.0.0.1:%d", p.port);
	struct ush_status st[MAPS] = {{0}};
	struct th_job j = {.workers = list, .shuffle = shuffle,
			   .partitions = 7, .maps = MAPS, .records = RECORDS,
			   .codec = codec, .statuses = st, .seal_key = key};
	for (uint32_t m = 0; m < MAPS; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	th_verify(&j);
	proxy_stop(&p); /* the job is read: nothing more to capture */
	th_job_free(&j);
	*wire = holds_records(p.cap, p.len);
	free(p.cap);
	*disk = th_files_matching(w->dir, holds_records) > 0;
}

/* The worker stores and serves sealed frames it cannot read, and the
 * wire carries them so; the same job plain shows its records in both. */
static void sealed_push_shows_nothing(void **state)
{
	(void)state;
	static const enum ush_codec codecs[] = {USH_CODEC_NONE, USH_CODEC_LZ4};
	for (size_t c = 0; c < 2; c++) {
		struct th_worker w = {0};
		snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("netseal"));
		th_worker_spawn(&w, "127.0.0.1", 0, 2);
		bool wire, disk;
		run(&w, 11, &KEY, codecs[c], &wire, &disk);
		assert_false(wire);
		assert_false(disk);
		/* Side by side: a plain shuffle on the same worker. */
		run(&w, 12, NULL, codecs[c], &wire, &disk);
		assert_true(wire);
		assert_true(disk);
		th_worker_stop(&w);
		th_rmrf(w.dir);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sealed_push_shows_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
