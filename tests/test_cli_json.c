/*
 * The JSON report in fio's schema (issue 39): fio's own tools read it
 * (fio_jsonplus_clat2csv, shipped with fio), every key fio's report has
 * is in ushuffle's, "job options" and "global options" hold what was
 * given, as fio's do, and "error" is fio's positive errno.
 */
#include "cli_run.h"

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

/* Whether prog is on PATH. */
static bool have(const char *prog)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

/* ushuffle's json+ report of a write job and a shuffle job, in dir. */
static void report_to(const char *dir, const char *file)
{
	char out[700];
	snprintf(out, sizeof(out), "--output=%s/%s", dir, file);
	struct cli_out r = cli_run(dir, "--size=1m", "--numjobs=2",
				   "--output-format=json+", "--eta=never", out,
				   "--name=w", "--rw=write", "--unlink=1",
				   "--name=s", "--rw=shuffle", "--stonewall");
	cli_expect(&r, 0);
	cli_free(&r);
}

static void fio_jsonplus_clat2csv_reads_it(void **state)
{
	(void)state;
	if (!have("fio_jsonplus_clat2csv")) {
		print_message("skipped: fio_jsonplus_clat2csv is not installed "
			      "(Debian's fio package; tests/bootstrap.sh)\n");
		skip();
	}
	const char *dir = th_scratch("clijsonfio");
	report_to(dir, "plus.json");
	char cmd[1600], csv[700];
	snprintf(cmd, sizeof(cmd), "cd '%s' && fio_jsonplus_clat2csv "
		 "plus.json lat.csv >out.txt 2>&1 && fio_jsonplus_clat2csv "
		 "plus.json lat.csv --validate >>out.txt 2>&1", dir);
	int st = system(cmd);
	char path[700];
	snprintf(path, sizeof(path), "%s/out.txt", dir);
	char *said = text_of(path);
	if (st)
		fail_msg("fio_jsonplus_clat2csv: status %d:\n%s", st, said);
	/* one CSV per thread (two jobs of two threads), each validated
	 * against the report's bins */
	for (int i = 0; i < 4; i++) {
		char want[64];
		snprintf(want, sizeof(want), "lat_job%d.csv validated", i);
		cli_has(said, want);
		snprintf(csv, sizeof(csv), "%s/lat_job%d.csv", dir, i);
		char *text = text_of(csv);
		/* the write side's completion latencies are rows */
		cli_has(text, "nsec, read_slat_ns_count");
		assert_non_null(strchr(strchr(text, '\n') + 1, ','));
		free(text);
	}
	free(said);
	th_rmrf(dir);
}

/* Every key of b's objects (fio's) is in a's (ushuffle's), recursively;
 * fio's option maps and percentile keys depend on the job. */
static void has_fio_keys(json_object *ours, json_object *fio, const char *at)
{
	if (!json_object_is_type(fio, json_type_object)) {
		if (json_object_is_type(fio, json_type_array) &&
		    json_object_array_length(fio) &&
		    json_object_array_length(ours))
			has_fio_keys(json_object_array_get_idx(ours, 0),
				     json_object_array_get_idx(fio, 0), at);
		return;
	}
	if (!json_object_is_type(ours, json_type_object))
		fail_msg("%s: an object in fio's report, not in ushuffle's",
			 at);
	json_object_object_foreach(fio, k, v) {
		char path[512];
		json_object *mine;
		snprintf(path, sizeof(path), "%s/%s", at, k);
		if (!json_object_object_get_ex(ours, k, &mine))
			fail_msg("fio's %s is missing", path);
		if (strcmp(k, "job options") && strcmp(k, "global options") &&
		    strcmp(k, "percentile") && strcmp(k, "bins"))
			has_fio_keys(mine, v, path);
	}
}

static json_object *load(const char *path)
{
	json_object *j = json_object_from_file(path);
	if (!j)
		fail_msg("%s: not JSON", path);
	return j;
}

static void fio_schema_kept(void **state)
{
	(void)state;
	if (!have("fio")) {
		print_message("skipped: fio is not installed (tests/bootstrap.sh "
			      "installs it)\n");
		skip();
	}
	const char *dir = th_scratch("clijsonkeys");
	report_to(dir, "ours.json");
	char cmd[1200], path[700];
	/* fio's null engine: no files, no devices */
	snprintf(cmd, sizeof(cmd), "cd '%s' && fio --ioengine=null --size=1m "
		 "--output-format=json+ --output=fio.json --name=w --rw=write "
		 "--name=r --rw=read >/dev/null 2>&1", dir);
	if (system(cmd))
		fail_msg("fio --ioengine=null failed");
	snprintf(path, sizeof(path), "%s/fio.json", dir);
	json_object *fio = load(path);
	snprintf(path, sizeof(path), "%s/ours.json", dir);
	json_object *ours = load(path);
	has_fio_keys(ours, fio, "");
	json_object_put(fio);
	json_object_put(ours);
	th_rmrf(dir);
}

/* fio's "global options": the command line before the first --name;
 * "job options": the job's own (section or --name part); ushuffle's
 * every effective value beside them. "error" a positive errno. */
static void fio_fields_mean_what_fio_says(void **state)
{
	(void)state;
	const char *dir = th_scratch("clijsonopts");
	struct cli_out r = cli_run(dir, "--size=64k", "--target=null",
				   "--numjobs=1", "--output-format=json",
				   "--eta=never", "--name=a", "--rw=write",
				   "--bs=128k");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	json_object *g = jget(j, "global options");
	assert_int_equal(json_object_object_length(g), 5);
	assert_string_equal(jstr(g, "size"), "64k");
	assert_string_equal(jstr(j, "fio version"), "ushuffle-"
			    USH_VERSION_STRING);
	json_object *o = json_object_array_get_idx(jget(j, "jobs"), 0);
	json_object *own = jget(o, "job options");
	assert_int_equal(json_object_object_length(own), 3);
	assert_string_equal(jstr(own, "name"), "a");
	assert_string_equal(jstr(own, "rw"), "write");
	assert_string_equal(jstr(own, "bs"), "128k");
	assert_string_equal(jstr(o, "effective options/size"), "64k");
	assert_string_equal(jstr(o, "effective options/iodepth"), "64");
	assert_int_equal(jint(o, "write/slat_ns/N"),
			 jint(o, "write/handoff_ns/N"));
	assert_int_equal(jint(o, "trim/total_ios"), 0);
	json_object_put(j);
	cli_free(&r);

	/* a job file: [global] is not the job's own */
	char f[700];
	snprintf(f, sizeof(f), "%s/j.fio", dir);
	FILE *fp = fopen(f, "w");
	assert_non_null(fp);
	fputs("[global]\nsize=64k\ntarget=null\nnumjobs=1\n[b]\nrw=write\n"
	      "iodepth=8\n", fp);
	fclose(fp);
	r = cli_run(dir, f, "--output-format=json", "--eta=never");
	cli_expect(&r, 0);
	j = cli_json(&r);
	o = json_object_array_get_idx(jget(j, "jobs"), 0);
	own = jget(o, "job options");
	assert_int_equal(json_object_object_length(own), 2);
	assert_string_equal(jstr(own, "iodepth"), "8");
	assert_string_equal(jstr(own, "rw"), "write");
	json_object_put(j);
	cli_free(&r);

	/* a read with nothing to read: fio's error sign, and its name */
	r = cli_run(dir, "--rw=read", "--name=none", "--output-format=json",
		    "--eta=never");
	cli_expect(&r, 1);
	j = cli_json(&r);
	o = json_object_array_get_idx(jget(j, "jobs"), 0);
	assert_int_equal(json_object_get_int(jget(o, "error")), ENOENT);
	assert_string_equal(jstr(o, "error_name"), "ENOENT");
	json_object_put(j);
	cli_free(&r);
	th_rmrf(dir);
}

/* Each test's scratch directory goes, failed or not. */
#define T(test) cmocka_unit_test_teardown(test, th_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(fio_jsonplus_clat2csv_reads_it),
		T(fio_schema_kept),
		T(fio_fields_mean_what_fio_says),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
