/*
 * The messages of issue 39 (item 4), each by its text: the cause said
 * once (a worker's ENOSPC), no ": Invalid argument" after a refused
 * start, a one-directory worker's quarantine saying what happens next,
 * sizes in the start line for a person, the locked-memory warning once a
 * process, no second warning after a refused connection, and a later
 * group's error after the report of the groups before it.
 */
#define _GNU_SOURCE /* mount */
#include "cli_run.h"
#include "net_helpers.h"

#include <sys/mount.h>
#include <sys/stat.h>

/* The text of the file at path, NUL-terminated. */
static char *text_of(const char *path)
{
	size_t n;
	char *p = th_read_file(path, &n);
	char *s = realloc(p, n + 1);
	assert_non_null(s);
	s[n] = '\0';
	return s;
}

static size_t count_of(const char *s, const char *needle)
{
	size_t n = 0;
	for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Runs the shell command cmd with stdout and stderr into one file, as a
 * terminal sees them; returns that text. */
static char *run_merged(const char *dir, const char *cmd)
{
	char line[2048], path[700];
	snprintf(path, sizeof(path), "%s/merged.txt", dir);
	snprintf(line, sizeof(line), "cd '%s' && %s >'%s' 2>&1", dir, cmd,
		 path);
	int st = system(line);
	(void)st;
	return text_of(path);
}

static void refused_connection_said_once(void **state)
{
	(void)state;
	const char *dir = th_scratch("climsgref");
	/* port 9 (discard) on loopback: nothing listens there */
	struct cli_out r = cli_run(dir, "--target=net",
				   "--workers=127.0.0.1:9", "--rw=write",
				   "--size=64k", "--numjobs=1", "--eta=never");
	cli_expect(&r, 1);
	cli_has(r.err, "connect to worker 127.0.0.1:9: Connection refused");
	assert_int_equal(count_of(r.err, "Connection refused"), 1);
	assert_null(strstr(r.err, "warning"));
	cli_free(&r);
	th_rmrf(dir);
}

static void later_error_after_earlier_report(void **state)
{
	(void)state;
	const char *dir = th_scratch("climsgorder");
	char *text = run_merged(dir, USH_CLI_PATH " --size=64k --numjobs=1 "
				"--eta=never --target=null --name=a "
				"--name=r --rw=read --target=disk "
				"--stonewall");
	const char *report = strstr(text, "Run status group 0");
	const char *err = strstr(text, "ushuffle: job 'r': no output of job "
				 "'r'");
	if (!report || !err || err < report)
		fail_msg("the error is not after group 0's report:\n%s", text);
	free(text);
	th_rmrf(dir);
}

/* A refused start: the message says what is wrong and what to do, no
 * errno text after it. */
static void refused_start_without_errno_text(void **state)
{
	(void)state;
	const char *dir = th_scratch("climsgstart");
	char arg[600];
	snprintf(arg, sizeof(arg), "--dir=%s", dir);
	char *out, *err;
	unsetenv("USHUFFLE_SECRET");
	int st = th_ushuffled_run((const char *[]){arg,
				  "--listen=127.0.0.1:0", NULL}, &out, &err);
	setenv("USHUFFLE_SECRET", TH_SECRET, 1);
	assert_int_not_equal(st, 0);
	cli_has(err, "ushuffled: worker: no secret: give --secret-file, "
		"--secrets-dir or $USHUFFLE_SECRET (docs/security.md), or "
		"--insecure on a loopback address\n");
	assert_null(strstr(err, "Invalid argument"));
	free(out), free(err);
	st = th_ushuffled_run((const char *[]){arg, "--insecure",
			      "--listen=0.0.0.0:0", NULL}, &out, &err);
	assert_int_not_equal(st, 0);
	cli_has(err, "ushuffled: worker: --insecure on 0.0.0.0");
	assert_null(strstr(err, "Invalid argument"));
	free(out), free(err);
	th_rmrf(dir);
}

static void start_line_sizes_for_a_person(void **state)
{
	(void)state;
	const char *dir = th_scratch("climsgline");
	char log[600];
	struct th_worker w = {.extra = "--max-app-bytes=3g"};
	snprintf(w.dir, sizeof(w.dir), "%.400s/w", dir);
	snprintf(log, sizeof(log), "%s/worker.log", dir);
	w.errlog = log;
	assert_int_equal(mkdir(w.dir, 0755), 0);
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	th_worker_stop(&w);
	char *text = text_of(log);
	cli_has(text, ", window 4 MiB, max frame 64 MiB, ");
	cli_has(text, ", 4096 shuffles, 3 GiB stored, ");
	free(text);
	th_rmrf(dir);
}

/* full_only_directory's tmpfs, unmounted even when it failed (lazily:
 * a worker it left may hold it). */
static char mounted[512];

static int unmount_teardown(void **state)
{
	if (mounted[0] && umount2(mounted, MNT_DETACH))
		fail_msg("umount %s: %s", mounted, strerror(errno));
	mounted[0] = '\0';
	return th_teardown(state);
}

/* A worker whose one directory fills up: the writer's error says "No
 * space left on device" once, and the quarantine says the directory
 * still takes the new shuffles (it is the only one). */
static void full_only_directory(void **state)
{
	(void)state;
	const char *dir = th_scratch("climsgfull");
	char log[600], workers[128];
	struct th_worker w = {.extra = "--max-app-bytes=1g",
			      .more = {"--direct=0"}};
	snprintf(w.dir, sizeof(w.dir), "%.400s/w", dir);
	snprintf(log, sizeof(log), "%s/worker.log", dir);
	w.errlog = log;
	assert_int_equal(mkdir(w.dir, 0755), 0);
	if (mount("tmpfs", w.dir, "tmpfs", 0, "size=1m,mode=0755")) {
		print_message("skipped: cannot mount a 1 MiB tmpfs at %s (%s): "
			      "needs CAP_SYS_ADMIN\n", w.dir, strerror(errno));
		skip();
	}
	snprintf(mounted, sizeof(mounted), "%s", w.dir);
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	snprintf(workers, sizeof(workers), "--workers=%s", w.addr);
	struct cli_out r = cli_run(dir, "--target=net", workers, "--rw=write",
				   "--size=8m", "--numjobs=1", "--eta=never",
				   "--name=full");
	cli_expect(&r, 1);
	cli_has(r.err, "No space left on device");
	assert_int_equal(count_of(r.err, "No space left on device"), 1);
	cli_free(&r);
	th_worker_stop(&w);
	char *text = text_of(log);
	cli_has(text, "quarantined: ");
	cli_has(text, "; it is the worker's only directory: new shuffle logs "
		"still go to it, and succeed once it takes writes again");
	assert_null(strstr(text, "go to the other directories"));
	free(text);
	assert_int_equal(umount2(w.dir, 0), 0);
	mounted[0] = '\0';
	th_rmrf(dir);
}

/* Two jobs side by side, their pools of two sizes, under a 64 KiB
 * locked-memory limit: one warning for the process. */
static void memlock_warning_once(void **state)
{
	(void)state;
	if (geteuid() == 0 && system("command -v setpriv >/dev/null 2>&1")) {
		print_message("skipped: root has CAP_IPC_LOCK, and setpriv to "
			      "drop it is missing\n");
		skip();
	}
	const char *dir = th_scratch("climsgmemlock");
	assert_int_equal(chmod(dir, 0777), 0);
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "ulimit -l 64 && %s " USH_CLI_PATH
		 " --size=1m --numjobs=2 --eta=never --unlink=1 --rw=write "
		 "--name=a --bs=64k --name=b --bs=256k",
		 geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 "
		 "--clear-groups" : "");
	char *text = run_merged(dir, cmd);
	if (!strstr(text, "registering a"))
		fail_msg("no warning for a 64 KiB locked-memory limit:\n%s",
			 text);
	assert_int_equal(count_of(text, "RLIMIT_MEMLOCK 64 KiB"), 1);
	free(text);
	th_rmrf(dir);
}

/* Each test's scratch directory goes, failed or not. */
#define T(test) cmocka_unit_test_teardown(test, th_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(refused_connection_said_once),
		T(later_error_after_earlier_report),
		T(refused_start_without_errno_text),
		T(start_line_sizes_for_a_person),
		cmocka_unit_test_teardown(full_only_directory,
					  unmount_teardown),
		T(memlock_warning_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
