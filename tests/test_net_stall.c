/*
 * Stalled replicas (docs/design.md, "Stalled peers"): two real ushuffled
 * on loopback, replicas = 2, so each holds every partition. Each round
 * SIGSTOPs one of them at a point of the push, at the commit or at a
 * point of the fetch, and SIGCONTs it after: every record is read back
 * exactly once and intact, and the stopped worker is the one dropped (the
 * writer's status names only the other; the reader failed over once,
 * resuming after the batches it verified, unless the rest of the stream
 * was in socket buffers already). How long each stall cost is printed
 * (min / median / max per phase), never asserted.
 *
 * USH_STALL_ROUNDS=N runs N rounds per phase instead of 20, and
 * USH_TEST_FILTER=PATTERN only the tests it names (to measure an older
 * build, where each stall costs the whole timeout).
 */
#include "net_helpers.h"

#include <pthread.h>
#include <time.h>

#define NW 2
#define ROUNDS 20
#define RECORDS 4000
/* Fetch: two partitions of ~6 MB, more than a stream's socket buffers
 * usually hold, so the stream stalls mid-partition (autotuned buffers
 * may take it all: then the reader never waits). */
#define FETCH_MAPS 2
#define FETCH_RECORDS 24000

static struct th_worker wk[NW];
static char list[512];

/* The round's stop: of worker victim, at record `at` of the push or of
 * the fetch (resumed at record `until` of the fetch, if not 0); when it
 * happened and the longest pause of the fetch after. */
static struct {
	unsigned victim;
	uint64_t at, until;
	bool stopped;
	uint64_t t_stop, t_last, gap;
} stall;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned rounds(void)
{
	const char *e = getenv("USH_STALL_ROUNDS");
	return e && atoi(e) > 0 ? (unsigned)atoi(e) : ROUNDS;
}


static void stop_victim(void)
{
	th_worker_sigstop(&wk[stall.victim]);
	stall.stopped = true;
	stall.t_stop = stall.t_last = now_ns();
	stall.gap = 0;
}

static void resume_victim(void)
{
	assert_int_equal(kill(wk[stall.victim].pid, SIGCONT), 0);
	stall.stopped = false;
}

static void pushed(const struct th_job *j, uint32_t m, uint32_t i)
{
	(void)j;
	if (!stall.stopped && m == 0 && i == stall.at)
		stop_victim();
}

static void checked(const struct th_job *j, uint64_t n)
{
	(void)j;
	uint64_t now = now_ns();
	if (stall.stopped) {
		if (now - stall.t_last > stall.gap)
			stall.gap = now - stall.t_last;
		stall.t_last = now;
		if (n == stall.until) /* before the other partition opens */
			resume_victim();
	} else if (n == stall.at) {
		stop_victim();
	}
}

static int cmp_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void report(const char *phase, double *ms, unsigned n)
{
	if (!n)
		return;
	qsort(ms, n, sizeof(*ms), cmp_ms);
	printf("%s: %u stalls cost min %.0f ms, median %.0f ms, max %.0f ms\n",
	       phase, n, ms[0], ms[n / 2], ms[n - 1]);
}

/* One map written with the victim stopped at record at (at the last
 * record: the stall meets the commit): the map commits on the other
 * worker alone. Returns how long the stop cost (ms). */
static double push_round(unsigned round, bool commit)
{
	uint64_t x = round + 1;
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = list, .shuffle = (commit ? 200 : 100) +
				  round, .partitions = 8, .maps = 1,
			   .records = RECORDS - (uint32_t)(th_rand(&x) % 1000),
			   .codec = round % 2 ? USH_CODEC_LZ4 : USH_CODEC_NONE,
			   .send_zc = round % 3 == 0, .replicas = 2,
			   .statuses = st, .pushed = pushed};
	stall.victim = round % NW;
	stall.at = commit ? j.records - 1 : th_rand(&x) % j.records;
	struct ush_writer_stats ws;
	int ret = th_push_map(&j, 0, 0, &ws);
	double ms = (double)(now_ns() - stall.t_stop) / 1e6;
	resume_victim();
	if (ret)
		fail_msg("round %u: %s", round, ush_last_error());
	printf("%s round %u: worker %s stopped at record %llu of %u: "
	       "%.0f ms\n", commit ? "commit" : "push", round,
	       wk[stall.victim].addr, (unsigned long long)stall.at,
	       j.records, ms);
	/* The stopped worker dropped, the other holds everything. */
	assert_int_equal(ws.net_failovers, 1);
	for (uint32_t p = 0; p < j.partitions; p++)
		assert_int_equal(th_status_holders(&st[0], p),
				 1u << (1 - stall.victim));
	th_verify(&j);
	th_job_free(&j);
	return ms;
}

static void stall_at(bool commit)
{
	th_workers_spawn(wk, NW, "stall", list, sizeof(list));
	unsigned n = rounds();
	double *ms = calloc(n, sizeof(*ms));
	for (unsigned r = 0; r < n; r++)
		ms[r] = push_round(r, commit);
	report(commit ? "commit" : "push", ms, n);
	free(ms);
	th_workers_stop(wk, NW);
}

static void stall_at_push(void **state)
{
	(void)state;
	stall_at(false);
}

static void stall_at_commit(void **state)
{
	(void)state;
	stall_at(true);
}

/*
 * Both workers hold both partitions; each round reads them all again
 * with the worker streaming partition fp stopped early in it, or (every
 * other round of partition 1) before its stream opens: the reader moves
 * to the other worker and resumes after the batches it verified. A stop
 * before the open always moves it; one in the stream moves it unless
 * the rest was in the sockets already, and over the rounds some do.
 */
static void stall_at_fetch(void **state)
{
	(void)state;
	th_workers_spawn(wk, NW, "stall", list, sizeof(list));
	struct ush_status st[FETCH_MAPS] = {{0}};
	struct ush_reader_stats sum = {0};
	struct th_job j = {.workers = list, .shuffle = 300, .partitions = 2,
			   .maps = FETCH_MAPS, .records = FETCH_RECORDS,
			   .replicas = 2, .statuses = st, .checked = checked,
			   .rsum = &sum};
	for (uint32_t m = 0; m < j.maps; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	uint64_t half = (uint64_t)FETCH_MAPS * FETCH_RECORDS / 2;
	unsigned n = rounds(), moved = 0;
	double *ms = calloc(n, sizeof(*ms));
	for (unsigned r = 0; r < n; r++) {
		uint64_t x = r + 1;
		uint32_t fp = r % 2;
		bool at_open = fp == 1 && r / 2 % 2;
		stall.victim = ush_net_worker_of(fp, NW);
		stall.at = at_open ? half : fp * half + 1 + th_rand(&x) % 400;
		stall.until = fp ? 0 : half;
		uint32_t before = sum.failovers;
		uint64_t dups = sum.dup_batches;
		th_verify(&j);
		if (stall.stopped)
			resume_victim();
		/* At open, the wait for the first record counts too. */
		printf("fetch round %u: worker %s stopped at record %llu%s: "
		       "%u failover, longest pause %.0f ms\n", r,
		       wk[stall.victim].addr, (unsigned long long)stall.at,
		       at_open ? " (before partition 1's stream opens)" : "",
		       sum.failovers - before, (double)stall.gap / 1e6);
		if (at_open || sum.failovers != before)
			assert_int_equal(sum.failovers, before + 1);
		if (sum.failovers != before)
			ms[moved++] = (double)stall.gap / 1e6;
		assert_int_equal(sum.dup_batches, dups);
	}
	report("fetch", ms, moved);
	printf("readers resumed after %llu batches verified\n",
	       (unsigned long long)sum.resumed_batches);
	/* Some moved in the middle of a stream. */
	assert_true(sum.resumed_batches > 0);
	free(ms);
	th_job_free(&j);
	th_workers_stop(wk, NW);
}

/* One replica, stopped: no other to go on at, so the reader waits its
 * timeout_ms and the error names the worker. */
static void one_replica_names_worker(void **state)
{
	(void)state;
	th_workers_spawn(wk, NW, "stall", list, sizeof(list));
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = wk[0].addr, .shuffle = 400,
			   .partitions = 2, .maps = 1, .records = 500,
			   .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	stall.victim = 0;
	stop_victim();
	ush_reader *r = NULL;
	int ret = th_reader_open(&r, st, 1, 0, 1500);
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", ush_last_error());
	resume_victim();
	printf("%d %s\n", ret, msg);
	assert_int_equal(ret, -ETIMEDOUT);
	assert_non_null(strstr(msg, wk[0].addr));
	ush_reader_free(r);
	th_job_free(&j);
	th_workers_stop(wk, NW);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stall_at_push),
		cmocka_unit_test(stall_at_commit),
		cmocka_unit_test(stall_at_fetch),
		cmocka_unit_test(one_replica_names_worker),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
