/*
 * How long a written shuffle lives, as a CLI user sees it (issue 39): a
 * write job says where its output is kept, until when, and how to keep
 * or drop it; a read of a shuffle its workers no longer have says
 * "expired" in one line; --hold keeps heartbeating after the job, so a
 * worker's --app-ttl does not drop the output.
 */
#include "cli_run.h"
#include "net_helpers.h"

#include <sys/stat.h>
#include <time.h>

static void write_says_how_long_output_lives(void **state)
{
	(void)state;
	const char *dir = th_scratch("clilife");
	struct th_worker wk = {0};
	snprintf(wk.dir, sizeof(wk.dir), "%.400s/worker", dir);
	assert_int_equal(mkdir(wk.dir, 0755), 0);
	th_worker_spawn(&wk, "127.0.0.1", 0, 1);
	char workers[128], want[200];
	snprintf(workers, sizeof(workers), "--workers=%s", wk.addr);
	struct cli_out r = cli_run(dir, "--target=net", workers, "--rw=write",
				   "--name=lw", "--size=64k", "--numjobs=1",
				   "--eta=never");
	cli_expect(&r, 0);
	cli_has(r.out, "  output       : kept on the workers while "
		"application 'default' is heard from, then for their "
		"--app-ttl (300 s by default): read it before, or hold it "
		"with --hold=SECONDS; --rw=read --unlink=1 drops it\n");
	cli_free(&r);
	r = cli_run(dir, "--target=net", workers, "--rw=write", "--name=lw",
		    "--size=64k", "--numjobs=1", "--eta=never",
		    "--output-format=json");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	cli_has(jstr(json_object_array_get_idx(jget(j, "jobs"), 0),
		     "output_lifetime"), "--app-ttl");
	json_object_put(j);
	cli_free(&r);
	/* on disk: until a read removes it */
	r = cli_run(dir, "--rw=write", "--name=ld", "--size=64k",
		    "--numjobs=1", "--eta=never");
	cli_expect(&r, 0);
	snprintf(want, sizeof(want), "  output       : kept in ./s%u until "
		 "--rw=read --unlink=1 removes it\n", cli_shuffle_id("ld"));
	cli_has(r.out, want);
	cli_free(&r);
	/* a shuffle keeps nothing, and says nothing of it */
	r = cli_run(dir, "--rw=shuffle", "--name=ls", "--size=64k",
		    "--numjobs=1", "--eta=never");
	cli_expect(&r, 0);
	assert_null(strstr(r.out, "output       :"));
	cli_free(&r);
	th_worker_stop(&wk);
	th_rmrf(dir);
}

/* The shuffle is gone from its worker (dropped here; an expiry is the
 * same to the reader): one line that says so, not one per partition. */
static void read_of_expired_shuffle_says_so(void **state)
{
	(void)state;
	const char *dir = th_scratch("cliexpired");
	struct th_worker wk = {0};
	snprintf(wk.dir, sizeof(wk.dir), "%.400s/worker", dir);
	assert_int_equal(mkdir(wk.dir, 0755), 0);
	th_worker_spawn(&wk, "127.0.0.1", 0, 1);
	char workers[128], sdir[700];
	snprintf(workers, sizeof(workers), "--workers=%s", wk.addr);
	snprintf(sdir, sizeof(sdir), "%s/s%u", dir, cli_shuffle_id("ex"));
	struct cli_out r = cli_run(dir, "--target=net", workers, "--rw=write",
				   "--name=ex", "--size=256k", "--numjobs=2",
				   "--eta=never");
	cli_expect(&r, 0);
	cli_free(&r);
	assert_int_equal(ush_shuffle_drop(wk.addr, "default",
					  cli_shuffle_id("ex"), 10000), 0);
	r = cli_run(dir, "--target=net", "--rw=read", "--name=ex",
		    "--eta=never");
	cli_expect(&r, 1);
	cli_has(r.err, "ushuffle: job 'ex': shuffle ");
	cli_has(r.err, " has expired on its workers (");
	cli_has(r.err, "or was dropped: workers drop an application's "
		"shuffles once it is silent for their --app-ttl (300 s by "
		"default); write it again, with --hold=SECONDS to keep it");
	if (strchr(r.err, '\n') != r.err + strlen(r.err) - 1)
		fail_msg("not one line:\n%s", r.err);
	cli_has(r.out, "(expired)");
	cli_free(&r);
	/* the stale manifest stays, until --unlink=1 */
	assert_int_equal(access(sdir, F_OK), 0);
	r = cli_run(dir, "--target=net", "--rw=read", "--name=ex",
		    "--unlink=1", "--eta=never");
	cli_expect(&r, 1);
	cli_free(&r);
	if (access(sdir, F_OK) == 0)
		fail_msg("%s is left after --unlink=1", sdir);
	th_worker_stop(&wk);
	th_rmrf(dir);
}

/* Whether the file at path contains needle. */
static bool file_has(const char *path, const char *needle)
{
	size_t n;
	char *p = th_read_file(path, &n);
	char *s = realloc(p, n + 1);
	assert_non_null(s);
	s[n] = '\0';
	bool has = strstr(s, needle) != NULL;
	free(s);
	return has;
}

/* Waits (30 s at most) until the file at path contains needle. */
static void wait_for(const char *path, const char *needle)
{
	for (int i = 0; i < 3000; i++) {
		if (access(path, F_OK) == 0 && file_has(path, needle))
			return;
		nanosleep(&(struct timespec){0, 10000000}, NULL);
	}
	fail_msg("%s: no \"%s\" within 30 s", path, needle);
}

/* A worker with a 1 s --app-ttl: the application of a held write keeps
 * its shuffle, while another application's, written after the hold
 * began, expires (the worker's log says so) and reads as expired. */
static void hold_keeps_output_past_the_ttl(void **state)
{
	(void)state;
	const char *dir = th_scratch("clihold");
	char log[700], workers[128];
	struct th_worker wk = {.extra = "--app-ttl=3000"};
	snprintf(wk.dir, sizeof(wk.dir), "%.400s/worker", dir);
	snprintf(log, sizeof(log), "%s/worker.log", dir);
	wk.errlog = log;
	assert_int_equal(mkdir(wk.dir, 0755), 0);
	th_worker_spawn(&wk, "127.0.0.1", 0, 1);
	snprintf(workers, sizeof(workers), "--workers=%s", wk.addr);
	struct cli_proc held = cli_start(dir, (const char *const[]){
		"--target=net", workers, "--rw=write", "--name=held",
		"--app=held", "--size=256k", "--numjobs=2", "--eta=never",
		"--hold=600", NULL});
	/* its report is out once it holds */
	char err_path[64];
	snprintf(err_path, sizeof(err_path), "/proc/self/fd/%d",
		 fileno(held.err));
	wait_for(err_path, "holding its output on");
	struct cli_out r = cli_run(dir, "--target=net", workers, "--rw=write",
				   "--name=free", "--app=free", "--size=64k",
				   "--numjobs=1", "--eta=never");
	cli_expect(&r, 0);
	cli_free(&r);
	wait_for(log, "1 removed, 1 shuffles of theirs dropped");
	r = cli_run(dir, "--target=net", "--rw=read", "--name=free",
		    "--app=free", "--eta=never");
	cli_expect(&r, 1);
	cli_has(r.err, "has expired on its workers");
	cli_free(&r);
	r = cli_run(dir, "--target=net", "--rw=read", "--name=held",
		    "--app=held", "--eta=never");
	cli_expect(&r, 0);
	cli_has(r.out, "records checked, 0 errors (ok)");
	cli_free(&r);
	/* Ctrl-C ends the hold; the job had succeeded */
	kill(held.pid, SIGINT);
	r = cli_wait(&held);
	cli_expect(&r, 0);
	cli_has(r.err, "ushuffle: job 'held': holding its output on ");
	cli_has(r.err, " for 600 s (heartbeats for application 'held'); "
		"Ctrl-C ends the hold");
	cli_has(r.out, "held 600 s after this run (--hold)");
	cli_free(&r);
	th_worker_stop(&wk);
	th_rmrf(dir);
}

static void hold_needs_workers_and_kept_output(void **state)
{
	(void)state;
	struct cli_out r = cli_run(NULL, "--target=net", "--rw=write",
				   "--hold=10", "--eta=never");
	cli_expect(&r, 2);
	cli_has(r.err, "--hold=10: holds a kept output on --workers, and "
		"this job has no --workers (its embedded worker ends with the "
		"process); accepted: --hold with --target=net");
	cli_free(&r);
	r = cli_run(NULL, "--target=net", "--workers=127.0.0.1:9",
		    "--rw=shuffle", "--hold=10", "--eta=never");
	cli_expect(&r, 2);
	cli_has(r.err, "this job keeps none (a shuffle removes its output)");
	cli_free(&r);
}

/* Each test's scratch directory goes, failed or not. */
#define T(test) cmocka_unit_test_teardown(test, th_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(write_says_how_long_output_lives),
		T(read_of_expired_shuffle_says_so),
		T(hold_keeps_output_past_the_ttl),
		T(hold_needs_workers_and_kept_output),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
