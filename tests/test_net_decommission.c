/*
 * Decommission (docs/operations.md, "Decommission"): real ushuffled on
 * loopback. A stream of shuffle jobs runs over three workers; in the
 * middle of a map, one worker gets SIGUSR2. Every map commits at its
 * first attempt and every job reads back intact; the map under way when
 * the drain began keeps its place on the drained worker, every later one
 * is placed on the two others (its status names only them, and no
 * shuffle directory appears on the drained worker); the drained worker
 * serves its old shuffles until they are dropped, then exits 0 on its
 * own. With replicas = 2, the maps placed after the drain keep both
 * replicas (ring and psync writers alike). Also: a drain of a worker
 * holding nothing exits at once, and when every worker drains a writer
 * fails with USH_EDRAINING naming them; and the CLI's shuffle jobs given
 * the drained worker in their list pass their verify without it.
 */
#include "cli_run.h"
#include "core/status.h"
#include "net_helpers.h"

#include <dirent.h>
#include <sys/stat.h>

#define NW 3
#define JOBS 3
#define MAPS 3
#define PARTS 8
#define RECORDS 300
#define DRAIN_JOB 1 /* the drain comes in this job's map 1 */

static struct th_worker wk[NW];
static char list[512], errlog[NW][600];
static const char *base; /* the test's scratch directory */

static void spawn_workers(unsigned n)
{
	int len = 0;
	base = th_scratch("decom"); /* th_teardown removes it */
	for (unsigned i = 0; i < n; i++) {
		wk[i] = (struct th_worker){0};
		snprintf(wk[i].dir, sizeof(wk[i].dir), "%s/w%u", base, i);
		snprintf(errlog[i], sizeof(errlog[i]), "%s/w%u.log", base, i);
		if (mkdir(wk[i].dir, 0755))
			fail_msg("mkdir %s: %s", wk[i].dir, strerror(errno));
		wk[i].errlog = errlog[i];
		th_worker_spawn(&wk[i], "127.0.0.1", 0, 1);
		len += snprintf(list + len, sizeof(list) - (size_t)len, "%s%s",
				i ? "," : "", wk[i].addr);
	}
}

static void cleanup(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		th_worker_stop(&wk[i]);
}

/* Whether worker i's log has a line containing what. */
static bool logged(unsigned i, const char *what)
{
	char line[1024];
	FILE *f = fopen(errlog[i], "r");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* SIGUSR2 to worker i; returns once it logged its drain (the signal
 * lands asynchronously: the test must not race it). */
static void drain(unsigned i)
{
	kill(wk[i].pid, SIGUSR2);
	for (unsigned t = 0; !logged(i, "decommission"); t++) {
		if (t == 3000)
			fail_msg("worker %u did not log its decommission", i);
		usleep(10000);
	}
}

/* Waits (30 s at most) for worker i to exit; asserts exit 0. */
static void exits_0(unsigned i)
{
	int st = 0;
	pid_t r = 0;
	for (unsigned t = 0; t < 3000 && !(r = waitpid(wk[i].pid, &st,
						       WNOHANG)); t++)
		usleep(10000);
	if (r != wk[i].pid)
		fail_msg("worker %u still runs 30 s after its last shuffle", i);
	th_track(wk[i].pid, 0);
	wk[i].pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("decommissioned worker exited with status 0x%x", st);
}

static bool names(const struct ush_status *st, const char *addr)
{
	struct status s;
	const char *why = "";
	th_ok(status_parse(st->data, st->len, &s, &why));
	char loc[USHI_STATUS_LOC_MAX + 1];
	memcpy(loc, s.loc, s.loc_len);
	loc[s.loc_len] = 0;
	return strstr(loc, addr) != NULL;
}

/* Every non-empty partition of st is held by `want` workers. */
static void holders(const struct ush_status *st, unsigned want)
{
	struct status s;
	const char *why = "";
	th_ok(status_parse(st->data, st->len, &s, &why));
	for (uint32_t p = 0; p < s.partitions; p++) {
		uint64_t batches, mask;
		uint32_t sum;
		th_ok(status_part(&s, p, &batches, &sum, &mask, &why));
		if (batches)
			assert_int_equal(__builtin_popcountll(mask), want);
	}
}

static bool has_dir(unsigned i, uint32_t shuffle)
{
	char path[700];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/s%u", wk[i].dir, shuffle);
	return !stat(path, &sb);
}

static unsigned drained_at; /* maps pushed when the drain began */
static unsigned pushed_maps;

static void pushed(const struct th_job *j, uint32_t m, uint32_t i)
{
	if (j->shuffle == DRAIN_JOB + 1 && m == 1 && i == RECORDS / 2) {
		drain(1);
		drained_at = pushed_maps;
	}
}

static void stream(uint32_t replicas, enum ush_ioengine io)
{
	spawn_workers(NW);
	struct ush_status st[JOBS][MAPS];
	memset(st, 0, sizeof(st));
	struct th_job job[JOBS];
	pushed_maps = 0;
	for (uint32_t s = 0; s < JOBS; s++) {
		job[s] = (struct th_job){.workers = list, .shuffle = s + 1,
			.partitions = PARTS, .maps = MAPS, .records = RECORDS,
			.replicas = replicas, .ioengine = io, .pushed = pushed,
			.statuses = st[s]};
		for (uint32_t m = 0; m < MAPS; m++, pushed_maps++) {
			th_ok(th_push_map(&job[s], m, 0, NULL));
			bool after = s > DRAIN_JOB ||
				     (s == DRAIN_JOB && m > 1);
			/* The map under way at the drain stays where it
			 * began; every later one avoids the drained worker,
			 * keeping its replicas. */
			assert_int_equal(names(&st[s][m], wk[1].addr), !after);
			if (replicas > 1)
				holders(&st[s][m], replicas);
		}
		/* Read while the drained worker holds a part of it. */
		th_verify(&job[s]);
		if (s > DRAIN_JOB)
			assert_false(has_dir(1, s + 1));
	}
	assert_int_equal(drained_at, DRAIN_JOB * MAPS + 1);
	/* It keeps serving its old shuffles until the last one goes.
	 * Newest first: the drop of its last shuffle (the oldest) is the
	 * last one to reach it before it exits (a drop that lists it after
	 * that gets no connection there: operations.md says to take it off
	 * the lists). */
	for (uint32_t s = JOBS; s-- > 0;) {
		assert_true(th_worker_alive(&wk[1]));
		if (s <= DRAIN_JOB) /* the jobs with maps on it */
			th_verify(&job[s]);
		th_ok(ush_shuffle_drop(list, NULL, s + 1, 0));
	}
	exits_0(1);
	assert_true(logged(1, "decommissioned: no shuffle left"));
	for (uint32_t s = 0; s < JOBS; s++)
		th_job_free(&job[s]);
	cleanup(NW);
}

static void stream_one_replica(void **state)
{
	(void)state;
	stream(1, USH_IOENGINE_URING);
}

static void stream_two_replicas(void **state)
{
	(void)state;
	stream(2, USH_IOENGINE_URING);
}

/* The psync baseline's writer places the same way. */
static void stream_psync(void **state)
{
	(void)state;
	stream(2, USH_IOENGINE_PSYNC);
}

/* A worker holding nothing exits as soon as it drains. */
static void empty_exits(void **state)
{
	(void)state;
	spawn_workers(1);
	drain(0);
	exits_0(0);
	cleanup(1);
}

/* The shuffle directories in worker i's --dir. */
static unsigned shuffle_dirs(unsigned i)
{
	DIR *d = opendir(wk[i].dir);
	unsigned n = 0;
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] == 's' && e->d_name[1] >= '0' &&
		     e->d_name[1] <= '9';
	closedir(d);
	return n;
}

/* The CLI's shuffle jobs, given all three workers while one drains: they
 * verify, and none of their shuffles lands on the drained worker. */
static void cli_jobs(void **state)
{
	(void)state;
	spawn_workers(NW);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = list, .shuffle = 7, .partitions = 4,
			   .maps = 1, .records = 50, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL)); /* all three hold shuffle 7 */
	drain(1);
	char workers[600];
	snprintf(workers, sizeof(workers), "--workers=%s", list);
	const char *args[] = {"--name=decom", "--rw=shuffle", "--target=net",
			      workers, "--size=1m", "--numjobs=2",
			      "--partitions=16", "--verify=crc32c",
			      "--unlink=0", "--output-format=json", NULL};
	struct cli_out r = cli_runv(base, args);
	cli_expect(&r, 0);
	cli_free(&r);
	/* Kept (--unlink=0): the job's shuffle is on the others, and the
	 * drained worker holds shuffle 7 alone. */
	assert_int_equal(shuffle_dirs(0), 2);
	assert_int_equal(shuffle_dirs(1), 1);
	th_verify(&j);
	th_ok(ush_shuffle_drop(list, NULL, 7, 0));
	exits_0(1);
	th_job_free(&j);
	cleanup(NW);
}

/* Every worker draining: the writer fails, naming them all. */
static void all_draining(void **state)
{
	(void)state;
	spawn_workers(2);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = list, .shuffle = 7, .partitions = 4,
			   .maps = 1, .records = 50, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL)); /* both hold shuffle 7 */
	drain(0);
	drain(1);
	struct th_job k = j;
	k.shuffle = 8;
	k.statuses = NULL;
	assert_int_equal(th_push_map(&k, 0, 0, NULL), USH_EDRAINING);
	const char *msg = ush_last_error();
	if (!strstr(msg, wk[0].addr) || !strstr(msg, wk[1].addr) ||
	    !strstr(msg, "every worker is decommissioning"))
		fail_msg("the error names neither the cause nor both workers: "
			 "%s", msg);
	/* Shuffle 7 is still served, then dropped: both exit. */
	th_verify(&j);
	th_ok(ush_shuffle_drop(list, NULL, 7, 0));
	exits_0(0);
	exits_0(1);
	th_job_free(&j);
	cleanup(2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(stream_one_replica, th_teardown),
		cmocka_unit_test_teardown(stream_two_replicas, th_teardown),
		cmocka_unit_test_teardown(stream_psync, th_teardown),
		cmocka_unit_test_teardown(empty_exits, th_teardown),
		cmocka_unit_test_teardown(all_draining, th_teardown),
		cmocka_unit_test_teardown(cli_jobs, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
