/*
 * Replicas (docs/design.md, "Replicas"): three real ushuffled on loopback,
 * replicas = 2. Each kill round SIGKILLs one worker at a random point of
 * the push, of the commit or of the fetch; the seed is the round number,
 * printed with the point it drew. Whatever the point, the checks are the
 * same: every map commits at its first attempt (no map reruns), every
 * record is read back exactly once and intact, and each status names for
 * every partition one or two workers, never a worker dead before the map
 * began. The killed worker restarts over its directory for the next round.
 */
#include "core/status.h"
#include "net/net.h"
#include "net_helpers.h"

#include <pthread.h>

#define NW 3
#define ROUNDS 24
#define MAPS 3
#define RECORDS 3000
/* Fetch rounds: two partitions of 6 MB, more than a stream has in
 * socket buffers when the worker serving it is killed early in it, so
 * the stream is cut and the reader resumes at another replica. */
#define FETCH_RECORDS 12000

static struct th_worker wk[NW];
static char list[512];

enum phase { PUSH, COMMIT, FETCH };
static const char *const phase_name[] = {"push", "commit", "fetch"};

/* The round's draw, and when its kill happened. */
static struct {
	enum phase phase;
	unsigned victim;
	uint64_t at;        /* push: record of all maps; fetch: record read */
	unsigned delay_us;  /* commit: after the last record */
	pthread_t killer;
	bool killing;       /* the killer thread runs */
	int dead_from_map;  /* maps from this one began with it dead */
	/* Over all rounds: workers the writers dropped in push rounds,
	 * readers' failovers and duplicates dropped in fetch rounds. */
	uint64_t push_failovers;
	struct ush_reader_stats fetch;
} draw;

static void spawn_all(void)
{
	th_workers_spawn(wk, NW, "replicas", list, sizeof(list));
}

static void stop_all(void)
{
	th_workers_stop(wk, NW);
}

static void *killer(void *arg)
{
	(void)arg;
	usleep(draw.delay_us);
	th_worker_kill(&wk[draw.victim]);
	return NULL;
}

static void pushed(const struct th_job *j, uint32_t m, uint32_t i)
{
	uint64_t n = (uint64_t)m * j->records + i;
	if (draw.phase == PUSH && n == draw.at) {
		th_worker_kill(&wk[draw.victim]);
		draw.dead_from_map = (int)m + 1;
	}
	if (draw.phase == COMMIT && m + 1 == j->maps && i + 1 == j->records &&
	    !pthread_create(&draw.killer, NULL, killer, NULL))
		draw.killing = true;
}

static void checked(const struct th_job *j, uint64_t n)
{
	(void)j;
	if (draw.phase == FETCH && n == draw.at + 1)
		th_worker_kill(&wk[draw.victim]);
}

static uint64_t holders(const struct ush_status *st, uint32_t p)
{
	return th_status_holders(st, p);
}

static void kill_round(unsigned round)
{
	uint64_t x = round + 1; /* xorshift: never 0 */
	draw.phase = (enum phase)(round % 3);
	draw.victim = (unsigned)(th_rand(&x) % NW);
	draw.at = th_rand(&x) % ((uint64_t)MAPS * RECORDS);
	uint32_t fp = (uint32_t)(th_rand(&x) % 2);
	if (draw.phase == FETCH) {
		/* The worker streaming partition fp, early in it. */
		draw.victim = ush_net_worker_of(fp, NW);
		draw.at = fp * (uint64_t)MAPS * FETCH_RECORDS / 2 +
			  draw.at % 400;
	}
	draw.delay_us = (unsigned)(th_rand(&x) % 3000);
	draw.dead_from_map = MAPS;
	draw.killing = false;
	printf("round %u (seed %u): SIGKILL worker %s during the %s, at %s "
	       "%llu\n", round, round, wk[draw.victim].addr,
	       phase_name[draw.phase], draw.phase == COMMIT ? "microsecond" :
	       "record", draw.phase == COMMIT ?
	       (unsigned long long)draw.delay_us : (unsigned long long)draw.at);
	struct ush_status st[MAPS] = {{0}};
	bool fetch = draw.phase == FETCH;
	struct th_job j = {.workers = list, .shuffle = 100 + round,
			   .partitions = fetch ? 2 : 8, .maps = MAPS,
			   .records = fetch ? FETCH_RECORDS : RECORDS,
			   .codec = round % 2 ? USH_CODEC_LZ4 : USH_CODEC_NONE,
			   .timeout_ms = 10000, .replicas = 2, .statuses = st,
			   .pushed = pushed, .checked = checked};
	if (fetch)
		j.rsum = &draw.fetch;
	for (uint32_t m = 0; m < MAPS; m++) {
		struct ush_writer_stats ws;
		int ret = th_push_map(&j, m, 0, &ws);
		if (ret)
			fail_msg("round %u map %u: %s", round, m,
				 ush_last_error());
		if (draw.phase == PUSH)
			draw.push_failovers += ws.net_failovers;
	}
	if (draw.killing)
		assert_int_equal(pthread_join(draw.killer, NULL), 0);
	for (uint32_t m = 0; m < MAPS; m++)
		for (uint32_t p = 0; p < j.partitions; p++) {
			uint64_t h = holders(&st[m], p);
			int n = __builtin_popcountll(h);
			assert_true(n == 1 || n == 2);
			if ((int)m >= draw.dead_from_map)
				assert_false(h >> draw.victim & 1);
		}
	th_verify(&j);
	assert_false(th_worker_alive(&wk[draw.victim]));
	th_job_free(&j);
	th_worker_restart(&wk[draw.victim], 1);
}

static void kill_rounds(void **state)
{
	(void)state;
	spawn_all();
	for (unsigned r = 0; r < ROUNDS; r++)
		kill_round(r);
	printf("%u rounds: writers dropped %llu workers in push rounds; "
	       "readers failed over %u times, resuming after %llu batches "
	       "verified and dropping %llu duplicates, in fetch rounds\n",
	       ROUNDS, (unsigned long long)draw.push_failovers,
	       draw.fetch.failovers,
	       (unsigned long long)draw.fetch.resumed_batches,
	       (unsigned long long)draw.fetch.dup_batches);
	/* Every push round lost a worker while writing. */
	assert_true(draw.push_failovers >= ROUNDS / 3);
	/* Streams were cut mid-partition, and the next replica sent only
	 * the batches after those verified: nothing twice. */
	assert_true(draw.fetch.failovers > 0);
	assert_true(draw.fetch.resumed_batches > 0);
	assert_int_equal(draw.fetch.dup_batches, 0);
	stop_all();
}

/* Both holders of a partition gone: the reader names the partition and
 * the workers it tried. */
static void every_replica_gone(void **state)
{
	(void)state;
	spawn_all();
	struct ush_status st[1] = {{0}};
	/* The blocking baseline engine replicates too. */
	struct th_job j = {.workers = list, .shuffle = 7, .partitions = 12,
			   .maps = 1, .records = 2000, .replicas = 2,
			   .ioengine = USH_IOENGINE_PSYNC, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	/* Partitions whose first worker is 0 have their replica on 1. */
	uint32_t p = 0;
	while (ush_net_worker_of(p, NW) != 0)
		p++;
	assert_int_equal(holders(&st[0], p), 3);
	th_worker_kill(&wk[0]);
	th_worker_kill(&wk[1]);
	ush_reader *r;
	int ret = th_reader_open(&r, st, 1, p, 5000);
	assert_int_equal(ret, -EHOSTUNREACH);
	const char *msg = ush_last_error();
	char want[64];
	snprintf(want, sizeof(want), "partition %u ", p);
	printf("%s\n", msg);
	assert_non_null(strstr(msg, want));
	assert_non_null(strstr(msg, wk[0].addr));
	assert_non_null(strstr(msg, wk[1].addr));
	/* The writer too: a map whose partition lost both. */
	struct th_job j2 = j;
	struct ush_status st2[1] = {{0}};
	j2.shuffle = 8;
	j2.statuses = st2;
	ret = th_push_map(&j2, 0, 0, NULL);
	assert_true(ret < 0);
	msg = ush_last_error();
	printf("%s\n", msg);
	assert_non_null(strstr(msg, "every replica is gone"));
	assert_non_null(strstr(msg, wk[0].addr));
	th_job_free(&j);
	th_job_free(&j2);
	th_worker_stop(&wk[2]);
	for (unsigned i = 0; i < NW; i++)
		th_rmrf(wk[i].dir);
}

static void same_entry(const void *arg, uint32_t p, uint64_t *batches,
		       uint32_t *sum)
{
	const char *why = "";
	th_ok(status_part(arg, p, batches, sum, NULL, &why));
}

/* Status st re-encoded naming attempt a, holders and batches kept: what a
 * driver holds for an attempt whose writer then aborted. */
static struct ush_status restatus(const struct ush_status *st, uint32_t a)
{
	struct status s;
	const char *why = "";
	th_ok(status_parse(st->data, st->len, &s, &why));
	uint64_t *mask = calloc(s.partitions, sizeof(*mask));
	assert_non_null(mask);
	for (uint32_t p = 0; p < s.partitions; p++) {
		uint64_t b;
		uint32_t sum;
		th_ok(status_part(&s, p, &b, &sum, &mask[p], &why));
	}
	s.attempt = a;
	s.holders = mask;
	uint8_t *out;
	size_t len;
	th_ok(status_build(&out, &len, &s, same_entry, &s));
	free(mask);
	return (struct ush_status){out, len};
}

/* Reads partition p of the n statuses: the open's result, and the error
 * message in msg. */
static int read_fails(const struct ush_status *st, uint32_t n, uint32_t p,
		      char *msg, size_t len)
{
	ush_reader *r = NULL;
	int ret = th_reader_open(&r, st, n, p, 5000);
	snprintf(msg, len, "%s", ush_last_error());
	ush_reader_free(r);
	return ret;
}

/* Every replica answering "not committed" is USH_ENOTCOMMITTED, as with
 * one replica (the driver reruns the map), not -EHOSTUNREACH ("workers
 * down"): an attempt whose writer aborted, a dropped shuffle. A replica
 * that cannot answer keeps it -EHOSTUNREACH. */
static void not_committed_on_every_replica(void **state)
{
	(void)state;
	spawn_all();
	struct ush_status st[2] = {{0}};
	struct th_job j = {.workers = list, .shuffle = 60, .partitions = 6,
			   .maps = 2, .records = 3000, .replicas = 2,
			   .statuses = st};
	for (uint32_t m = 0; m < j.maps; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	/* Map 1 attempt 1: written, then aborted on both replicas. */
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, NULL));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 60,
		.map = 1, .attempt = 1, .partitions = 6,
		.target = USH_TARGET_NET, .workers = list, .replicas = 2};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	uint8_t buf[1024];
	for (uint32_t i = 0; i < 3000; i++)
		th_ok(ush_writer_write(w, i % 6, buf, th_rec(buf, 1, i)));
	th_ok(ush_writer_abort(w));
	ush_writer_free(w);
	ush_ring_free(ring);
	struct ush_status aborted[2] = {st[0], restatus(&st[1], 1)};
	char msg[1024];
	for (uint32_t p = 0; p < j.partitions; p++) {
		int ret = read_fails(aborted, 2, p, msg, sizeof(msg));
		printf("aborted, partition %u: %d %s\n", p, ret, msg);
		assert_int_equal(ret, USH_ENOTCOMMITTED);
	}
	free((void *)aborted[1].data);
	/* The shuffle dropped: every partition, every map. */
	th_ok(ush_shuffle_drop(list, NULL, 60, 5000));
	for (uint32_t p = 0; p < j.partitions; p++) {
		int ret = read_fails(st, 2, p, msg, sizeof(msg));
		printf("dropped, partition %u: %d %s\n", p, ret, msg);
		assert_int_equal(ret, USH_ENOTCOMMITTED);
	}
	/* Worker 0 down too: a partition it holds cannot be known to be
	 * not committed there. */
	th_worker_kill(&wk[0]);
	for (uint32_t p = 0; p < j.partitions; p++) {
		int ret = read_fails(st, 2, p, msg, sizeof(msg));
		bool down = (holders(&st[0], p) | holders(&st[1], p)) & 1;
		assert_int_equal(ret, down ? -EHOSTUNREACH : USH_ENOTCOMMITTED);
	}
	th_job_free(&j);
	stop_all();
}

/* Host labels: with two workers labelled a and one b, every partition
 * keeps a replica on b; replicas = 1 keeps version 1 statuses. */
static void labels_keep_replicas_apart(void **state)
{
	(void)state;
	spawn_all();
	char labelled[600];
	snprintf(labelled, sizeof(labelled), "%s@a,%s@a,%s@b", wk[0].addr,
		 wk[1].addr, wk[2].addr);
	struct ush_status st[1] = {{0}}, one[1] = {{0}};
	/* Zero copy forced: each buffer goes to the pool after both
	 * replicas' notifications. */
	struct th_job j = {.workers = labelled, .shuffle = 9, .partitions = 16,
			   .maps = 1, .records = 4000, .replicas = 2,
			   .send_zc = 1, .statuses = st};
	struct ush_writer_stats ws;
	th_ok(th_push_map(&j, 0, 0, &ws));
	for (uint32_t p = 0; p < j.partitions; p++) {
		uint64_t h = holders(&st[0], p);
		assert_int_equal(__builtin_popcountll(h), 2);
		assert_true(h >> 2 & 1);
	}
	/* The same buffer went to both: equal bytes, no failover. */
	assert_int_equal(ws.net_replica_bytes[0], ws.net_replica_bytes[1]);
	assert_int_equal(ws.net_replica_bytes[2], 0);
	assert_int_equal(ws.net_failovers, 0);
	assert_int_equal(ws.stored_bytes, 2 * ws.frame_bytes);
	th_verify(&j);
	struct th_job j1 = j;
	j1.shuffle = 10;
	j1.replicas = 1;
	j1.send_zc = 0;
	j1.statuses = one;
	th_ok(th_push_map(&j1, 0, 0, NULL));
	assert_int_equal(((const uint8_t *)one[0].data)[4], 1);
	th_verify(&j1);
	/* More replicas than workers, or than the format allows: refused. */
	j1.replicas = 4;
	assert_int_equal(th_push_map(&j1, 0, 1, NULL), -EINVAL);
	th_job_free(&j);
	th_job_free(&j1);
	stop_all();
}

/* A record larger than the push size goes out alone in a heap frame:
 * shared by both replicas too, freed after the second's send. */
static void oversized_record(void **state)
{
	(void)state;
	spawn_all();
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 11,
		.partitions = 4, .target = USH_TARGET_NET, .workers = list,
		.replicas = 3};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	size_t big = 300u << 10;
	uint8_t *rec = malloc(big);
	th_fill(rec, big, 42);
	th_ok(ush_writer_write(w, 1, rec, big));
	th_ok(ush_writer_write(w, 1, rec, 100));
	th_ok(ush_writer_commit(w, NULL));
	struct ush_writer_stats ws;
	ush_writer_stats(w, &ws);
	assert_int_equal(ws.net_replica_bytes[0], ws.net_replica_bytes[2]);
	struct ush_status st;
	th_ok(ush_writer_status(w, &st));
	assert_int_equal(holders(&st, 1), 7);
	th_worker_kill(&wk[ush_net_worker_of(1, NW)]);
	ush_reader *r;
	th_ok(th_reader_open(&r, &st, 1, 1, 5000));
	const void *got;
	size_t len;
	assert_int_equal(ush_reader_next(r, &got, &len), 1);
	assert_int_equal(len, big);
	assert_true(th_check(got, big, 42));
	assert_int_equal(ush_reader_next(r, &got, &len), 1);
	assert_int_equal(len, 100);
	assert_int_equal(ush_reader_next(r, &got, &len), 0);
	ush_reader_free(r);
	free(rec);
	ush_writer_free(w);
	ush_ring_free(ring);
	for (unsigned i = 0; i < NW; i++) {
		th_worker_stop(&wk[i]);
		th_rmrf(wk[i].dir);
	}
}

/* The worker SIGSTOPped at a record of the push: it accepted the
 * connection and stops taking anything. */
static struct {
	struct th_worker *w;
	uint32_t at;
} stall;

static void stop_at(const struct th_job *j, uint32_t m, uint32_t i)
{
	(void)j;
	(void)m;
	if (i == stall.at)
		kill(stall.w->pid, SIGSTOP);
}

/* A replica that stalls (SIGSTOP) at the last record or at the first
 * (then zero-copy sends to it wait for notifications that never come
 * when the writer drains): the writer gives up on it once the other
 * replica keeps going without it (the stall window), and commits on the
 * other replicas, which stay holders, instead of dropping every worker.
 * The timeout is only what a replica that is slow, not stopped, gets (a
 * commit's syncs on a busy disk). */
static void stalled_replica(void **state)
{
	(void)state;
	spawn_all();
	for (unsigned round = 0; round < 3; round++) {
		struct ush_status st[1] = {{0}};
		/* Round 2: the blocking baseline engine. */
		struct th_job j = {.workers = list, .shuffle = 20 + round,
				   .partitions = 8, .maps = 1, .records = 6000,
				   .replicas = 2, .send_zc = 1,
				   .ioengine = round == 2 ? USH_IOENGINE_PSYNC :
				   USH_IOENGINE_URING,
				   .timeout_ms = 5000, .statuses = st,
				   .pushed = stop_at};
		stall.w = &wk[1];
		stall.at = round ? 0 : j.records - 1;
		struct ush_writer_stats ws;
		int ret = th_push_map(&j, 0, 0, &ws);
		kill(wk[1].pid, SIGCONT);
		if (ret)
			fail_msg("round %u: %s", round, ush_last_error());
		assert_int_equal(ws.net_failovers, 1);
		for (uint32_t p = 0; p < j.partitions; p++) {
			uint64_t h = holders(&st[0], p);
			assert_false(h >> 1 & 1);
			uint32_t f = ush_net_worker_of(p, NW);
			assert_int_equal(h, (1u << f | 1u << (f + 1) % NW) &
					    ~2u);
		}
		th_verify(&j);
		th_job_free(&j);
	}
	stop_all();
}

/* A stream cut after one of its maps was read whole: that map is done,
 * not moved to its next holder (dead here), and the map still being
 * read resumes at its third replica. */
static void failover_after_a_map_complete(void **state)
{
	(void)state;
	spawn_all();
	struct ush_status st[2] = {{0}};
	/* One partition: map 0 (2 replicas, small) streams before map 1
	 * (3 replicas, more than the sockets buffer). */
	struct th_job a = {.workers = list, .shuffle = 30, .partitions = 1,
			   .maps = 2, .records = 2000, .replicas = 2,
			   .statuses = st};
	struct th_job b = a;
	b.records = 40000;
	b.replicas = 3;
	th_ok(th_push_map(&a, 0, 0, NULL));
	th_ok(th_push_map(&b, 1, 0, NULL));
	uint32_t x = ush_net_worker_of(0, NW), y = (x + 1) % NW;
	assert_int_equal(holders(&st[0], 0), 1u << x | 1u << y);
	th_worker_kill(&wk[y]);
	ush_reader *r;
	th_ok(th_reader_open(&r, st, 2, 0, 5000));
	uint64_t got[2] = {0};
	uint8_t exp[1024];
	const void *rec;
	size_t len;
	int ret;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		uint64_t id;
		memcpy(&id, rec, 8);
		uint32_t m = (uint32_t)(id >> 32), i = (uint32_t)id;
		assert_true(m < 2);
		assert_int_equal(i, got[m]);
		assert_int_equal(th_rec(exp, m, i), len);
		assert_memory_equal(exp, rec, len);
		if (++got[m] == a.records && !m)
			th_worker_kill(&wk[x]);
	}
	if (ret)
		fail_msg("%d %s: %s", ret, ush_err_name(ret), ush_last_error());
	assert_int_equal(got[0], a.records);
	assert_int_equal(got[1], b.records);
	struct ush_reader_stats rs;
	ush_reader_stats(r, &rs);
	/* Map 1 from x to y (refused), then to the third. */
	assert_int_equal(rs.failovers, 2);
	ush_reader_free(r);
	th_job_free(&a);
	stop_all(); /* the killed ones are left alone */
}

/* Workers killed with zero-copy sends in flight to them, the writer then
 * committed or aborted, round after round on one ring: every pool
 * buffer comes back each time (none kept by a dropped replica). */
static void pool_back_after_losses(void **state)
{
	(void)state;
	spawn_all();
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 4u << 20;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_ring_info ri;
	ush_ring_info(ring, &ri);
	size_t idle = ri.pool_idle_bytes;
	uint8_t buf[1024];
	for (unsigned round = 0; round < 6; round++) {
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = 40 + round, .partitions = 8,
			.target = USH_TARGET_NET, .workers = list,
			.replicas = 2, .send_zc = 1, .timeout_ms = 5000};
		ush_writer *w;
		th_ok(ush_writer_open(&w, ring, &wo));
		unsigned victim = round % NW;
		int ret = 0;
		for (uint32_t i = 0; !ret && i < 20000; i++) {
			ret = ush_writer_write(w, i % 8, buf,
					       th_rec(buf, 0, i));
			if (i == 10000)
				th_worker_kill(&wk[victim]);
		}
		if (ret)
			fail_msg("round %u: %s", round, ush_last_error());
		if (round % 2)
			th_ok(ush_writer_abort(w));
		else
			th_ok(ush_writer_commit(w, NULL));
		struct ush_writer_stats ws;
		ush_writer_stats(w, &ws);
		assert_int_equal(ws.net_failovers, 1);
		ush_writer_free(w);
		ush_ring_info(ring, &ri);
		assert_int_equal(ri.pool_idle_bytes, idle);
		th_worker_restart(&wk[victim], 1);
	}
	ush_ring_free(ring);
	stop_all();
}

/* A worker down before the writer opens: replicas 2 and 3 commit on the
 * others (every worker on one label: the label cannot keep replicas
 * apart, the list order still does); the status never names it. */
static void dead_at_open(void **state)
{
	(void)state;
	spawn_all();
	char same[600];
	snprintf(same, sizeof(same), "%s@h,%s@h,%s@h", wk[0].addr, wk[1].addr,
		 wk[2].addr);
	th_worker_kill(&wk[1]);
	for (uint32_t rep = 2; rep <= 3; rep++) {
		struct ush_status st[2] = {{0}};
		struct th_job j = {.workers = same, .shuffle = 50 + rep,
				   .partitions = 6, .maps = 2, .records = 3000,
				   .replicas = rep, .statuses = st};
		for (uint32_t m = 0; m < j.maps; m++) {
			struct ush_writer_stats ws;
			th_ok(th_push_map(&j, m, 0, &ws));
			assert_int_equal(ws.net_failovers, 1);
		}
		for (uint32_t p = 0; p < j.partitions; p++) {
			uint64_t h = holders(&st[0], p);
			uint32_t f = ush_net_worker_of(p, NW);
			uint64_t want = rep == 3 ? 7 : 1u << f | 1u << (f + 1) % NW;
			assert_int_equal(h, want & ~2u);
		}
		th_verify(&j);
		th_job_free(&j);
	}
	stop_all();
}

/* HOST:PORT@LABEL: the peer without the label, the label (default: the
 * host, a v6 address unbracketed) behind it. */
static void worker_list_labels(void **state)
{
	(void)state;
	char peers[4][USHI_NET_PEER], l[64];
	assert_int_equal(net_parse_workers("a:1@rack1,b:2,[::1]:3,c:4@",
					   peers, 4), 4);
	const char *want[4][2] = {{"a:1", "rack1"}, {"b:2", "b"},
				  {"[::1]:3", "::1"}, {"c:4", "c"}};
	for (int i = 0; i < 4; i++) {
		assert_string_equal(peers[i], want[i][0]);
		net_peer_label(peers[i], l, sizeof(l));
		assert_string_equal(l, want[i][1]);
	}
	assert_int_equal(net_parse_workers("nohost@x", peers, 4), -EINVAL);
	assert_int_equal(net_parse_workers("h@x:1", peers, 4), -EINVAL);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(worker_list_labels),
		cmocka_unit_test(labels_keep_replicas_apart),
		cmocka_unit_test(every_replica_gone),
		cmocka_unit_test(not_committed_on_every_replica),
		cmocka_unit_test(oversized_record),
		cmocka_unit_test(stalled_replica),
		cmocka_unit_test(failover_after_a_map_complete),
		cmocka_unit_test(pool_back_after_losses),
		cmocka_unit_test(dead_at_open),
		cmocka_unit_test(kill_rounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
