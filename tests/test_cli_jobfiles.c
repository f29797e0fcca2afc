/*
 * fio's job files as they are written (issue 39): bare flags, include,
 * ${VAR}, "-" for standard input, and "No job(s) defined" with exit 1;
 * every file of examples/jobs parses with --parse-only and runs; a read
 * job's --unlink=1 removes what it read.
 */
#include "cli_run.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

static const char *put(const char *dir, const char *name, const char *text)
{
	static char path[8][700];
	static unsigned k;
	char *p = path[k++ % 8];
	snprintf(p, 700, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return p;
}

/* ushuffle in cwd with standard input from the file at in. */
static struct cli_out run_stdin(const char *cwd, const char *in,
				const char *const *args)
{
	int fd = open(in, O_RDONLY);
	int saved = dup(0);
	assert_true(fd >= 0 && saved >= 0);
	dup2(fd, 0); /* the child inherits it */
	struct cli_proc p = cli_start(cwd, args);
	dup2(saved, 0);
	close(saved);
	close(fd);
	return cli_wait(&p);
}

static json_object *job_n(json_object *j, size_t i)
{
	json_object *a = jget(j, "jobs");
	assert_true(i < json_object_array_length(a));
	return json_object_array_get_idx(a, i);
}

/* Bare flags (indented too, with a comment), include (found beside the
 * including file, whatever the working directory), ${VAR} (unset: empty),
 * as fio reads them. */
static void fio_job_files_load(void **state)
{
	(void)state;
	const char *dir = th_scratch("clifio");
	char sub[600];
	snprintf(sub, sizeof(sub), "%s/inc", dir);
	assert_int_equal(mkdir(sub, 0755), 0);
	put(sub, "common.fio", "; shared\nnumjobs=1\ntarget=null\n"
	    "include more.fio\n");
	put(sub, "more.fio", "rw=write\n  group_reporting  ; as fio\n");
	const char *f = put(dir, "main.fio",
		"[global]\n"
		"include inc/common.fio\n"
		"size=${USH_TEST_SIZE}\n"
		"bs=${USH_TEST_UNSET}128k\n"
		"[first]\n"
		"time_based\n"
		"runtime=1\n"
		"\tstonewall\n"
		"[second]\n"
		"stonewall # a comment\n");
	setenv("USH_TEST_SIZE", "64k", 1);
	unsetenv("USH_TEST_UNSET");
	struct cli_out r = cli_run("/", f, "--output-format=json",
				   "--eta=never");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	assert_int_equal(json_object_array_length(jget(j, "jobs")), 2);
	static const char *const want[][3] = {
		/* jobname, time_based, groupid */
		{"first", "1", "1"}, {"second", "0", "2"}};
	for (size_t i = 0; i < 2; i++) {
		json_object *o = job_n(j, i);
		assert_string_equal(jstr(o, "jobname"), want[i][0]);
		assert_string_equal(jstr(o, "effective options/size"), "64k");
		assert_string_equal(jstr(o, "effective options/bs"), "128k");
		assert_string_equal(jstr(o, "effective options/rw"), "write");
		assert_string_equal(jstr(o, "effective options/numjobs"), "1");
		assert_string_equal(
			jstr(o, "effective options/group_reporting"), "1");
		assert_string_equal(jstr(o, "effective options/time_based"),
				    want[i][1]);
		assert_string_equal(jstr(o, "effective options/stonewall"),
				    "1");
	}
	json_object_put(j);
	cli_free(&r);

	/* "-": the job file on standard input, which includes from the
	 * working directory */
	const char *in = put(dir, "stdin.fio", "[global]\ninclude "
			     "inc/common.fio\nsize=64k\n[piped]\n");
	r = run_stdin(dir, in, (const char *const[]){"-",
		      "--output-format=json", "--eta=never", NULL});
	cli_expect(&r, 0);
	j = cli_json(&r);
	assert_string_equal(jstr(job_n(j, 0), "jobname"), "piped");
	assert_string_equal(jstr(job_n(j, 0), "effective options/rw"), "write");
	json_object_put(j);
	cli_free(&r);
	unsetenv("USH_TEST_SIZE");
	th_rmrf(dir);
}

/* fio: "No job(s) defined", exit 1, for a file without a job section. */
static void no_jobs_defined_exits_1(void **state)
{
	(void)state;
	const char *dir = th_scratch("clinojob");
	static const char *const texts[] = {
		"", "; only a comment\n", "[global]\nsize=1m\n",
		"[global]\n[global]\ngroup_reporting\n",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		const char *f = put(dir, "none.fio", texts[i]);
		struct cli_out r = cli_run(NULL, f, "--eta=never");
		cli_expect(&r, 1);
		cli_has(r.err, "No job(s) defined in ");
		cli_has(r.err, "none.fio: only [global] or nothing; accepted: "
			"a [JOBNAME] section per job, or --name=JOBNAME");
		assert_string_equal(r.out, "");
		cli_free(&r);
		r = cli_run(NULL, f, "--parse-only");
		cli_expect(&r, 1);
		cli_free(&r);
		r = run_stdin(NULL, f, (const char *const[]){"-",
			      "--eta=never", NULL});
		cli_expect(&r, 1);
		cli_has(r.err, "No job(s) defined in <stdin>");
		cli_free(&r);
	}
	/* a --name on the command line is a job */
	const char *f = put(dir, "g.fio", "[global]\nsize=64k\nnumjobs=1\n"
			    "target=null\nrw=write\n");
	struct cli_out r = cli_run(NULL, f, "--name=cmd", "--eta=never",
				   "--output-format=json");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	assert_string_equal(jstr(job_n(j, 0), "jobname"), "cmd");
	json_object_put(j);
	cli_free(&r);
	th_rmrf(dir);
}

/* What a fio-style file can still get wrong: one line, exit 2. */
static void fio_syntax_errors(void **state)
{
	(void)state;
	const char *dir = th_scratch("clifiobad");
	put(dir, "self.fio", "[a]\ninclude self.fio\n");
	put(dir, "two.fio", "[a]\ninclude x.fio y.fio\n");
	put(dir, "missing.fio", "[global]\n\ninclude nothere.fio\n");
	put(dir, "bare.fio", "[a]\nrw\n");
	put(dir, "words.fio", "[a]\nsize 1m\n");
	put(dir, "typo.fio", "[a]\ngroup_reportin\n");
	put(dir, "env.fio", "[a]\nsize=${USH_TEST_UNSET}\n");
	static const char *const cases[][2] = {
		{"self.fio", "self.fio:2: include "},
		{"self.fio", "files included 9 deep (one includes itself?); "
		 "accepted: at most 8"},
		{"two.fio", "two.fio:2: include x.fio y.fio: not one file "
		 "name; accepted: include FILE"},
		{"missing.fio", "missing.fio:3: include "},
		{"missing.fio", "nothere.fio: cannot read it: No such file or "
		 "directory"},
		{"bare.fio", "bare.fio:2: rw: needs a value; accepted: write, "
		 "read or shuffle"},
		{"words.fio", "words.fio:2: syntax error; accepted: [SECTION], "
		 "KEY=VALUE, a flag alone (time_based), include FILE or a "
		 "comment"},
		{"typo.fio", "typo.fio:2: group_reportin: unknown key (did you "
		 "mean group_reporting?)"},
		{"env.fio", "env.fio:2: size=: not a number"},
	};
	unsetenv("USH_TEST_UNSET");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char f[700];
		snprintf(f, sizeof(f), "%s/%s", dir, cases[i][0]);
		struct cli_out r = cli_run(NULL, f, "--eta=never");
		cli_expect(&r, 2);
		cli_has(r.err, cases[i][1]);
		if (strchr(r.err, '\n') != r.err + strlen(r.err) - 1)
			fail_msg("%s: not one line:\n%s", cases[i][0], r.err);
		cli_free(&r);
	}
	th_rmrf(dir);
}

/* Whether dir holds anything but . and .. */
static bool dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *e;
	bool empty = true;
	while ((e = readdir(d)))
		empty &= !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	return empty;
}

/* examples/jobs: a dozen or more fio-style files, each parses with
 * --parse-only and runs, in a directory of its own. */
static void example_jobs_run(void **state)
{
	(void)state;
	DIR *d = opendir(USH_JOBS_DIR);
	assert_non_null(d);
	struct dirent *e;
	unsigned n = 0;
	setenv("SIZE", "1m", 1); /* env.fio */
	setenv("MAPS", "2", 1);
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len < 5 || strcmp(e->d_name + len - 4, ".fio"))
			continue;
		char f[600];
		snprintf(f, sizeof(f), USH_JOBS_DIR "/%s", e->d_name);
		const char *dir = th_scratch("clijobs");
		struct cli_out r = cli_run(dir, f, "--parse-only");
		if (r.status)
			fail_msg("%s: --parse-only: exit %d:\n%s", e->d_name,
				 r.status, r.err);
		assert_string_equal(r.out, "");
		cli_free(&r);
		r = cli_run(dir, f, "--output-format=json", "--eta=never");
		if (r.status)
			fail_msg("%s: exit %d:\n%s\n%s", e->d_name, r.status,
				 r.out, r.err);
		json_object *j = cli_json(&r);
		size_t jobs = json_object_array_length(jget(j, "jobs"));
		assert_true(jobs > 0);
		for (size_t i = 0; i < jobs; i++)
			if (jint(job_n(j, i), "error"))
				fail_msg("%s: job %zu: %s", e->d_name, i,
					 r.out);
		json_object_put(j);
		cli_free(&r);
		/* only pattern.fio keeps its output (unlink=0) */
		if (!strcmp(e->d_name, "pattern.fio"))
			assert_false(dir_empty(dir));
		else if (!dir_empty(dir))
			fail_msg("%s left files in %s", e->d_name, dir);
		th_rmrf(dir);
		n++;
	}
	closedir(d);
	unsetenv("SIZE");
	unsetenv("MAPS");
	assert_true(n >= 12);
}

/* fio's unlink=1 on a read job: what it read is removed (spill files
 * and manifest; on a worker, the shuffle is dropped), so a second read
 * finds nothing. Without it, the output stays for another read. */
static void read_unlink_removes_what_it_read(void **state)
{
	(void)state;
	static const char *const targets[] = {"--target=disk",
					      "--target=net"};
	for (size_t t = 0; t < 2; t++) {
		const char *dir = th_scratch("cliunlink");
		char sdir[700];
		snprintf(sdir, sizeof(sdir), "%s/s%u", dir,
			 cli_shuffle_id("ul"));
		struct cli_out r = cli_run(dir, targets[t], "--name=ul",
					   "--rw=write", "--size=256k",
					   "--numjobs=2", "--eta=never");
		cli_expect(&r, 0);
		cli_free(&r);
		r = cli_run(dir, targets[t], "--name=ul", "--rw=read",
			    "--eta=never");
		cli_expect(&r, 0);
		cli_free(&r);
		assert_int_equal(access(sdir, F_OK), 0); /* kept */
		r = cli_run(dir, targets[t], "--name=ul", "--rw=read",
			    "--unlink=1", "--eta=never");
		cli_expect(&r, 0);
		cli_free(&r);
		if (access(sdir, F_OK) == 0)
			fail_msg("%s: %s is left after --unlink=1", targets[t],
				 sdir);
		r = cli_run(dir, targets[t], "--name=ul", "--rw=read",
			    "--eta=never");
		cli_expect(&r, 1);
		cli_has(r.err, "no output of job 'ul'");
		cli_free(&r);
		th_rmrf(dir);
	}
}

/* Each test's scratch directory goes, failed or not. */
#define T(test) cmocka_unit_test_teardown(test, th_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(fio_job_files_load),
		T(no_jobs_defined_exits_1),
		T(fio_syntax_errors),
		T(example_jobs_run),
		T(read_unlink_removes_what_it_read),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
