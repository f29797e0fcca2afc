/*
 * ushuffle's command line and job files: --help lists every option with
 * its default, every option parses (suffixes, ranges) and reaches the job,
 * job files layer under the command line, and each kind of bad input
 * exits 2 with one message naming the option (or file:line and key), the
 * value and what is accepted.
 */
#define _GNU_SOURCE /* memmem */
#include "cli_run.h"

#include <dirent.h>
#include <sys/stat.h>

/* The documented defaults (docs/cli.md). */
static const char *const defaults[][2] = {
	{"name", "ushuffle"},	  {"numjobs", "auto"},
	{"size", "256m"},	  {"runtime", "0"},
	{"time_based", "0"},	  {"group_reporting", "0"},
	{"rw", "shuffle"},	  {"keep", "0"},
	{"partitions", "64"},	  {"record-size", "100-1000"},
	{"bs", "64k"},		  {"codec", "lz4"},
	{"iodepth", "64"},	  {"direct", "1"},
	{"sqpoll", "0"},	  {"fixedbufs", "auto"},
	{"handoff", "swap"},	  {"ioengine", "io_uring"},
	{"target", "disk"},	  {"dir", "."},
	{"workers", "none"},	  {"verify", "crc32c"},
	{"buffer_compress_percentage", "50"}, {"pin", "1"},
	{"output-format", "normal"}, {"output", "-"},
	{"eta", "auto"},
};

static void help_lists_every_option(void **state)
{
	(void)state;
	struct cli_out r = cli_run(NULL, "--help");
	cli_expect(&r, 0);
	cli_has(r.out, "usage: ushuffle [options] [jobfile ...]");
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
		char opt[64], def[64];
		snprintf(opt, sizeof(opt), "\n  --%s", defaults[i][0]);
		snprintf(def, sizeof(def), "[%s]", defaults[i][1]);
		const char *p = strstr(r.out, opt);
		while (p && p[strlen(opt)] != '=' && p[strlen(opt)] != '[')
			p = strstr(p + 1, opt);
		if (!p)
			fail_msg("--help lacks --%s:\n%s", defaults[i][0],
				 r.out);
		const char *end = strstr(p + 1, "\n  --");
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (!memmem(p, n, def, strlen(def)))
			fail_msg("--help shows no default %s for --%s:\n%.*s",
				 def, defaults[i][0], (int)n, p);
	}
	cli_free(&r);
	r = cli_run(NULL, "--version");
	cli_expect(&r, 0);
	cli_has(r.out, "ushuffle-" USH_VERSION_STRING);
	cli_free(&r);
}

/* Runs args (a null, write-only job) and checks "job options" values. */
static void check_options(const char *const *args,
			  const char *const (*want)[2], size_t nwant)
{
	struct cli_out r = cli_runv(NULL, args);
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	json_object *job = json_object_array_get_idx(jget(j, "jobs"), 0);
	for (size_t i = 0; i < nwant; i++) {
		char path[96];
		snprintf(path, sizeof(path), "effective options/%s",
			 want[i][0]);
		const char *got = jstr(job, path);
		if (strcmp(got, want[i][1]))
			fail_msg("%s: got \"%s\", expected \"%s\"", want[i][0],
				 got, want[i][1]);
	}
	json_object_put(j);
	cli_free(&r);
}

static void every_option_parses(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("cliopt");
	char dirarg[600];
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	const char *const a1[] = {
		"--name=opts", "--numjobs=1", "--size=96k", "--runtime=1m",
		"--time_based=0", "--group_reporting", "--rw=write", "--keep=1",
		"--partitions=7", "--record-size=20-2k", "--bs=128k",
		"--codec=zstd:3", "--iodepth=8", "--direct=0", "--sqpoll=0",
		"--fixedbufs=0", "--handoff=copy", "--ioengine=psync",
		"--target=null", dirarg, "--verify=none",
		"--buffer_compress_percentage=10", "--pin=0",
		"--output-format=json", "--eta=never", NULL};
	const char *const w1[][2] = {
		{"name", "opts"}, {"numjobs", "1"}, {"size", "96k"},
		{"runtime", "60"}, {"time_based", "0"},
		{"group_reporting", "1"}, {"rw", "write"}, {"keep", "1"},
		{"partitions", "7"}, {"record-size", "20-2k"}, {"bs", "128k"},
		{"codec", "zstd:3"}, {"iodepth", "8"}, {"direct", "0"},
		{"sqpoll", "0"}, {"fixedbufs", "0"}, {"handoff", "copy"},
		{"ioengine", "psync"}, {"target", "null"}, {"dir", dir},
		{"verify", "none"},
		{"buffer_compress_percentage", "10"}, {"pin", "0"}};
	check_options(a1, w1, sizeof(w1) / sizeof(w1[0]));
	/* The other values, and suffixes: k/m/g/t, KiB, kb, plain bytes. */
	const char *const a2[] = {
		"--numjobs=auto", "--size=2048", "--record-size=1KiB",
		"--bs=4k", "--codec=none", "--fixedbufs=1", "--direct=1",
		"--sqpoll=1", "--handoff=swap", "--ioengine=io_uring",
		"--rw=shuffle", "--target=null", "--runtime=90s",
		"--verify=crc32c", "--pin=1", "--output-format=json", NULL};
	const char *const w2[][2] = {
		{"size", "2k"}, {"record-size", "1k"}, {"bs", "4k"},
		{"codec", "none"}, {"fixedbufs", "1"}, {"direct", "1"},
		{"sqpoll", "1"}, {"handoff", "swap"}, {"ioengine", "io_uring"},
		{"rw", "shuffle"}, {"runtime", "90"}, {"verify", "crc32c"},
		{"pin", "1"}};
	check_options(a2, w2, sizeof(w2) / sizeof(w2[0]));
	const char *const a3[] = {
		"--size=3kb", "--record-size=16-64K", "--codec=lz4", "--bs=1M",
		"--fixedbufs=auto", "--runtime=1h", "--target=null",
		"--numjobs=1", "--output-format=json", NULL};
	const char *const w3[][2] = {
		{"size", "3k"}, {"record-size", "16-64k"}, {"codec", "lz4"},
		{"bs", "1m"},
		{"fixedbufs", "auto"}, {"runtime", "3600"}};
	check_options(a3, w3, sizeof(w3) / sizeof(w3[0]));
	/* t: a huge size, capped by a short run time ("g": the errors) */
	const char *const a5[] = {"--size=1t", "--rw=write", "--target=null",
				  "--numjobs=1", "--runtime=1",
				  "--output-format=json", NULL};
	const char *const w5[][2] = {{"size", "1t"}, {"runtime", "1"}};
	check_options(a5, w5, 2);
	th_rmrf(dir);
}

/* Exit 2, nothing on stdout, one line on stderr holding both texts;
 * frees r. */
static void expect_usage_error(struct cli_out *r, const char *arg,
			       const char *text1, const char *text2)
{
	cli_expect(r, 2);
	cli_has(r->err, text1);
	cli_has(r->err, text2);
	if (strchr(r->err, '\n') != r->err + strlen(r->err) - 1)
		fail_msg("%s: not one line:\n%s", arg, r->err);
	assert_string_equal(r->out, "");
	cli_free(r);
}

/* s with "/nonexistent" made a path of this run's own at the root
 * ("/ush-missing-PID"): another program (a worker started with
 * --dir=/nonexistent) may have made /nonexistent itself. The result
 * lives until the next 16 calls. */
static const char *missing(const char *s)
{
	static char bufs[16][256];
	static unsigned next;
	char *b = bufs[next++ % 16], name[64];
	snprintf(name, sizeof(name), "/ush-missing-%d", (int)getpid());
	size_t n = 0;
	while (*s && n + strlen(name) + 1 < sizeof(bufs[0])) {
		if (!strncmp(s, "/nonexistent", 12)) {
			n += (size_t)snprintf(b + n, sizeof(bufs[0]) - n, "%s",
					      name);
			s += 12;
		} else {
			b[n++] = *s++;
		}
	}
	b[n] = '\0';
	return b;
}

/* Each bad input: exit 2, one line naming option and value, "accepted". */
static void bad_input_exits_2(void **state)
{
	(void)state;
	static const char *const cases[][3] = {
		/* argument, text expected in the message, and more */
		{"--foo=1", "--foo=1: unknown option", "accepted"},
		{"-v", "-v: unknown option", "accepted"},
		{"--iodepth=0", "--iodepth=0: out of range", "1..4096"},
		{"--iodepth=5000", "--iodepth=5000: out of range", "1..4096"},
		{"--iodepth=x", "--iodepth=x: not a number", "1..4096"},
		{"--numjobs=0", "--numjobs=0: out of range", "or auto"},
		{"--partitions=16777217", "out of range", "1..16777216"},
		{"--size=0", "--size=0: out of range", "1..1024t"},
		{"--size=10x", "--size=10x: bad suffix 'x'", "k, m, g or t"},
		{"--size=1.5m", "--size=1.5m: bad suffix '.5m'", "accepted"},
		{"--size=2048t", "--size=2048t: out of range", "1..1024t"},
		{"--size=99999999999999999999", "out of range", "accepted"},
		{"--size", "--size: needs a value", "accepted"},
		{"--bs=3000", "--bs=3000: out of range", "a power of two"},
		{"--bs=12k", "--bs=12k: not a power of two", "4k..64m"},
		{"--bs=1g", "--bs=1g: out of range", "4k..64m"},
		{"--record-size=1g", "--record-size=1g: out of range",
		 "0..64m"},
		{"--record-size=9-3", "MIN above MAX", "MIN-MAX"},
		{"--record-size=8", "--record-size=8: --verify=crc32c needs",
		 "--verify=none"},
		{"--runtime=5x", "--runtime=5x: bad suffix 'x'", "s, m or h"},
		{"--runtime=9999999h", "--runtime=9999999h: out of range",
		 "accepted"},
		{"--time_based", "--time_based: needs --runtime", "accepted"},
		{"--time_based=2", "--time_based=2: not a boolean", "0 or 1"},
		{"--direct=yes", "--direct=yes: not a boolean", "0 or 1"},
		{"--rw=append", "--rw=append: unknown value",
		 "write, read or shuffle"},
		{"--codec=gzip", "--codec=gzip: unknown codec", "zstd:LEVEL"},
		{"--codec=zstd:99", "--codec=zstd:99", "zstd:LEVEL"},
		{"--handoff=move", "--handoff=move: unknown value",
		 "swap or copy"},
		{"--ioengine=libaio", "unknown value", "io_uring or psync"},
		{"--fixedbufs=2", "--fixedbufs=2: unknown value",
		 "0, 1 or auto"},
		{"--verify=md5", "--verify=md5: records are checked with CRC32C "
		 "only", "crc32c, none or 0"},
		{"--nmae=x", "--nmae=x: unknown option (did you mean --name?)",
		 "accepted"},
		{"--blocksze=4k", "--blocksze=4k: unknown option (did you mean "
		 "--blocksize?)", "accepted"},
		{"--output-format=xml", "unknown value",
		 "normal, json, json+ or terse"},
		{"--filename=/dev/nvme0n1", "a shuffle has no one file",
		 "--directory=DIR1:DIR2"},
		{"--cpus_allowed=0-x", "not a CPU list at '0-x'", "N or N-M"},
		{"--cpus_allowed=3-1", "not a CPU list", "comma-separated"},
		{"--loops=0", "out of range", "1..1000"},
		{"--eta=sometimes", "unknown value", "auto, always or never"},
		{"--buffer_compress_percentage=101", "out of range", "0..100"},
		{"--name=", "--name=: empty", "non-empty string"},
		{"--target=ftp", "--target=ftp: unknown value",
		 "null, disk or net"},
		{"--output=/nonexistent/dir/x", "--output=/nonexistent/dir/x",
		 "accepted"},
		{"/nonexistent/job.ini", "/nonexistent/job.ini: cannot read",
		 "No such file"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cli_out r = cli_run(NULL, missing(cases[i][0]),
					   "--eta=never");
		expect_usage_error(&r, missing(cases[i][0]),
				   missing(cases[i][1]), cases[i][2]);
	}
	struct cli_out r = cli_run(NULL, "--rw=read", "--target=null");
	cli_expect(&r, 2);
	cli_has(r.err, "--rw=read with --target=null");
	cli_has(r.err, "accepted: --rw=read with --target=disk or --target=net");
	cli_free(&r);
}

/* The configuration mistakes of issue 14: each exits 2 before any I/O
 * (no file appears in the working directory, no worker is dialled) with
 * one message naming the option, the value and what is accepted. */
static void config_mistakes_exit_2(void **state)
{
	(void)state;
	const char *cwd = th_tmpdir("climistake");
	static const char *const cases[][4] = {
		/* arguments, then two texts the message holds */
		{"--target=net", "--workers=127.0.0.1:99999",
		 "--workers=127.0.0.1:99999: worker '127.0.0.1:99999': PORT "
		 "is not 1..65535", "accepted: HOST:PORT"},
		{"--target=net", "--workers=127.0.0.1",
		 "--workers=127.0.0.1: worker '127.0.0.1': no :PORT",
		 "accepted: HOST:PORT"},
		{"--target=net", "--workers=127.0.0.1:7,127.0.0.1:7",
		 "worker '127.0.0.1:7' is listed twice",
		 "accepted: each HOST:PORT once"},
		{"--target=disk", "--workers=127.0.0.1:7",
		 "--workers=127.0.0.1:7: used only by --target=net",
		 "accepted: --workers with --target=net"},
		{"--target=net", "--workers=no-such-host.invalid:7",
		 "unknown host 'no-such-host.invalid'", "accepted: a host"},
		{"--target=net", "--workers=:7", "worker ':7': no HOST",
		 "accepted: HOST:PORT"},
		{"--target=disk", "--dir=/nonexistent/sub",
		 "--dir=/nonexistent/sub: No such file or directory",
		 "accepted: an existing directory"},
		{"--target=disk", "--dir=/nonexistent",
		 "--dir=/nonexistent: No such file or directory",
		 "accepted: an existing directory"},
		{"--target=net", "--dir=/nonexistent",
		 "--dir=/nonexistent: No such file or directory",
		 "accepted: an existing directory"},
		/* A list names the directory after the list. */
		{"--target=disk", "--dir=.:/nonexistent",
		 "--dir=.:/nonexistent: /nonexistent: No such file or "
		 "directory", "accepted: an existing directory"},
		{"--target=disk", "--dir=.::.",
		 "--dir=.::.: an empty directory in the list (directories "
		 "are separated by ':')", "accepted: DIR[:DIR...]"},
		{"--target=disk", "--dir=.:",
		 "--dir=.:: an empty directory in the list",
		 "accepted: DIR[:DIR...]"},
		{"--target=disk", "--iodepht=4",
		 "--iodepht=4: unknown option (did you mean --iodepth?)",
		 "accepted: the options"},
		{"--target=disk", "--partition=4",
		 "(did you mean --partitions?)", "accepted"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cli_out r = cli_run(cwd, cases[i][0],
					   missing(cases[i][1]), "--size=64k",
					   "--eta=never");
		expect_usage_error(&r, missing(cases[i][1]),
				   missing(cases[i][2]), cases[i][3]);
	}
	/* Nothing was written: not in the working directory, nor at /. */
	DIR *d = opendir(cwd);
	assert_non_null(d);
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			fail_msg("%s/%s was left by a refused job", cwd,
				 e->d_name);
	closedir(d);
	assert_int_equal(access(missing("/nonexistent"), F_OK), -1);
	/* A job file's unknown key gets the suggestion too. */
	char path[600];
	snprintf(path, sizeof(path), "%s/typo.ini", cwd);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("[job]\nrecord_sise=100\n", f);
	fclose(f);
	struct cli_out r = cli_run(NULL, path);
	cli_expect(&r, 2);
	cli_has(r.err, "record_sise=100: unknown key (did you mean "
		"record-size?)");
	cli_free(&r);
	unlink(path);
	th_rmrf(cwd);
}

static const char *write_file(const char *dir, const char *name,
			      const char *text)
{
	static char path[8][600];
	static unsigned k;
	char *p = path[k++ % 8];
	snprintf(p, 600, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return p;
}

/* A job's effective value of option key. */
static const char *eff(json_object *job, const char *key)
{
	char path[128];
	snprintf(path, sizeof(path), "effective options/%s", key);
	return jstr(job, path);
}

static json_object *job_n(json_object *j, size_t i)
{
	json_object *a = jget(j, "jobs");
	assert_true(i < json_object_array_length(a));
	return json_object_array_get_idx(a, i);
}

static void job_files_layer_under_the_command_line(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("clijob");
	const char *f = write_file(dir, "ab.ini",
		"; an A/B job file\n"
		"[global]\n"
		"size=64k\n"
		"numjobs=1\n"
		"target=null\n"
		"rw=write\n"
		"bs=128k\n"
		"output-format=json\n"
		"record_size=16-512   ; '_' matches '-'\n"
		"\n"
		"[swap]\n"
		"handoff=swap\n"
		"bs=256k\n"
		"[empty]\n"
		"[global]\n"
		"iodepth=8\n"
		"[copy]\n"
		"handoff=copy\n"
		"name=renamed\n");
	struct cli_out r = cli_run(NULL, f, "--partitions=9", "--eta=never");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	assert_int_equal(json_object_array_length(jget(j, "jobs")), 3);
	static const char *const want[][6] = {
		/* jobname, handoff, bs, iodepth, partitions, record-size */
		{"swap", "swap", "256k", "64", "9", "16-512"},
		{"empty", "swap", "128k", "64", "9", "16-512"},
		{"renamed", "copy", "128k", "8", "9", "16-512"},
	};
	for (size_t i = 0; i < 3; i++) {
		json_object *o = job_n(j, i);
		assert_string_equal(jstr(o, "jobname"), want[i][0]);
		assert_string_equal(eff(o, "handoff"), want[i][1]);
		assert_string_equal(eff(o, "bs"), want[i][2]);
		assert_string_equal(eff(o, "iodepth"), want[i][3]);
		assert_string_equal(eff(o, "partitions"),
				    want[i][4]);
		assert_string_equal(eff(o, "record-size"),
				    want[i][5]);
		assert_int_equal(jint(o, "write/io_bytes") >= 64 * 1024, 1);
	}
	assert_string_equal(jstr(j, "global options/partitions"), "9");
	json_object_put(j);
	cli_free(&r);

	/* The command line overrides a job's own section; two files. */
	const char *g = write_file(dir, "two.ini",
		"[global]\ntarget=null\nsize=32k\nnumjobs=1\n"
		"[second]\nbs=1m\n");
	r = cli_run(NULL, f, g, "--bs=64k", "--output-format=json");
	cli_expect(&r, 0);
	j = cli_json(&r);
	assert_int_equal(json_object_array_length(jget(j, "jobs")), 4);
	for (size_t i = 0; i < 4; i++)
		assert_string_equal(eff(job_n(j, i), "bs"), "64k");
	assert_string_equal(jstr(job_n(j, 3), "jobname"), "second");
	assert_string_equal(eff(job_n(j, 3), "size"), "32k");
	json_object_put(j);
	cli_free(&r);
	th_rmrf(dir);
}

/* As in fio, each --name starts a job, the options before the first one
 * are every job's, and jobs run side by side unless --stonewall makes one
 * wait (a new group); each job reports in its own blocks. */
static void name_starts_a_job(void **state)
{
	(void)state;
	struct cli_out r = cli_run(NULL, "--size=64k", "--numjobs=1",
				   "--target=null", "--name=a", "--rw=write",
				   "--name=b", "--bs=128k", "--name=c",
				   "--stonewall", "--output-format=json",
				   "--eta=never");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	assert_int_equal(json_object_array_length(jget(j, "jobs")), 3);
	static const char *const want[][4] = {
		/* jobname, rw, bs, groupid */
		{"a", "write", "64k", "0"},
		{"b", "shuffle", "128k", "0"},
		{"c", "shuffle", "64k", "1"},
	};
	for (size_t i = 0; i < 3; i++) {
		json_object *o = job_n(j, i);
		assert_string_equal(jstr(o, "jobname"), want[i][0]);
		assert_string_equal(eff(o, "rw"), want[i][1]);
		assert_string_equal(eff(o, "bs"), want[i][2]);
		assert_string_equal(eff(o, "size"), "64k");
		assert_int_equal(jint(o, "groupid"), want[i][3][0] - '0');
		assert_true(jint(o, "write/io_bytes") >= 64 * 1024);
	}
	assert_string_equal(jstr(j, "global options/size"), "64k");
	json_object *g;
	assert_false(json_object_object_get_ex(jget(j, "global options"),
					       "bs", &g));
	json_object_put(j);
	cli_free(&r);

	r = cli_run(NULL, "--size=64k", "--numjobs=1", "--target=null",
		    "--name=a", "--name=b", "--stonewall", "--eta=never");
	cli_expect(&r, 0);
	cli_has(r.out, "a: (g=0): rw=shuffle");
	cli_has(r.out, "b: (g=1): rw=shuffle");
	cli_has(r.out, "a thread 0: (groupid=0");
	cli_has(r.out, "b thread 0: (groupid=1");
	cli_has(r.out, "Run status group 1 (all jobs)");
	cli_free(&r);

	/* Side by side, one name is one shuffle: refused before any I/O. */
	r = cli_run(NULL, "--target=null", "--name=a", "--rw=write",
		    "--name=a");
	cli_expect(&r, 2);
	cli_has(r.err, "jobs 'a' and 'a' run at the same time");
	cli_has(r.err, "--stonewall");
	cli_free(&r);
}

/* The fio names that mean the same here; fio's terse and json+ reports;
 * --loops; --parse-only. */
static void fio_names(void **state)
{
	(void)state;
	struct cli_out r = cli_run(NULL, "--blocksize=128k", "--readwrite=write",
				   "--thread", "--size=64k", "--numjobs=1",
				   "--target=null", "--loops=2",
				   "--output-format=json+", "--eta=never");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	assert_int_equal(json_object_array_length(jget(j, "jobs")), 2);
	for (size_t i = 0; i < 2; i++) {
		json_object *o = job_n(j, i);
		assert_string_equal(eff(o, "bs"), "128k");
		assert_string_equal(eff(o, "rw"), "write");
		assert_int_equal(jint(o, "loop"), i);
		assert_int_equal(jint(o, "groupid"), 0);
		/* json+: the handoff histogram's buckets add up to N */
		json_object *bins = jget(o, "write/handoff_ns/bins");
		uint64_t n = 0;
		json_object_object_foreach(bins, k, v) {
			assert_true(strtoull(k, NULL, 10) > 0);
			n += json_object_get_uint64(v);
		}
		assert_int_equal(n, jint(o, "write/handoff_ns/N"));
	}
	json_object_put(j);
	cli_free(&r);

	/* terse, version 3: fio's field count (no disk utilisation) */
	r = cli_run(NULL, "--minimal", "--size=64k", "--numjobs=1",
		    "--target=null", "--name=t1", "--name=t2", "--eta=never");
	cli_expect(&r, 0);
	size_t seps = 0, lines = 0;
	for (const char *p = r.out; *p; p++) {
		seps += *p == ';';
		lines += *p == '\n';
	}
	assert_int_equal(lines, 2);
	assert_int_equal(seps, 2 * (121 - 1)); /* 121 fields a line */
	assert_true(!strncmp(r.out, "3;ushuffle-", 11));
	cli_has(r.out, ";t2;0;0;");
	cli_free(&r);

	/* A 3 s time-based run: the status line ends with a new line at
	 * 1 s (--eta-newline), and at 2 s stands as a line of its own,
	 * naming its job (--status-interval). */
	r = cli_run(NULL, "--target=null", "--numjobs=1", "--name=st",
		    "--runtime=3", "--time_based", "--eta=always",
		    "--eta-newline=1", "--status-interval=2");
	cli_expect(&r, 0);
	cli_has(r.err, "\rJobs: 1 (f=1): [W(1)][");
	cli_has(r.err, "s]\n");
	cli_has(r.err, "\nst: Jobs: 1 (f=1)");
	cli_free(&r);

	r = cli_run(NULL, "--parse-only", "--size=1z");
	cli_expect(&r, 2);
	cli_free(&r);
	r = cli_run(NULL, "--parse-only", "--target=null", "--size=1t");
	cli_expect(&r, 0);
	assert_string_equal(r.out, "");
	cli_free(&r);
}

/* Count of needle in s. */
static size_t count_of(const char *s, const char *needle)
{
	size_t n = 0;
	for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Issue 39's small fio differences: --verify=0 is off, --output-format
 * takes fio's comma list, --loops describes its job once. */
static void fio_differences(void **state)
{
	(void)state;
	struct cli_out r = cli_run(NULL, "--verify=0", "--size=64k",
				   "--numjobs=1", "--target=null",
				   "--output-format=json", "--eta=never");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	assert_string_equal(eff(job_n(j, 0), "verify"),
			    "none");
	json_object_put(j);
	cli_free(&r);

	/* normal, then terse, then JSON, whatever the list's order */
	r = cli_run(NULL, "--output-format=json,terse,normal", "--size=64k",
		    "--numjobs=1", "--target=null", "--eta=never",
		    "--name=l1");
	cli_expect(&r, 0);
	const char *normal = strstr(r.out, "Run status group 0");
	const char *terse = strstr(r.out, "\n3;ushuffle-");
	const char *json = strstr(r.out, "\n{\n");
	if (!normal || !terse || !json || normal > terse || terse > json)
		fail_msg("not normal, terse, JSON in that order:\n%s", r.out);
	j = json_tokener_parse(json);
	assert_non_null(j);
	assert_string_equal(jstr(j, "global options/output-format"),
			    "json,terse,normal");
	json_object_put(j);
	cli_free(&r);
	r = cli_run(NULL, "--output-format=json,", "--eta=never");
	expect_usage_error(&r, "--output-format=json,", "unknown value ''",
			   "or a comma list of them");

	/* one description and one thread count for both runs */
	r = cli_run(NULL, "--loops=2", "--size=64k", "--numjobs=1",
		    "--target=null", "--eta=never", "--name=lp");
	cli_expect(&r, 0);
	assert_int_equal(count_of(r.out, "lp: (g=0): rw=shuffle"), 1);
	assert_int_equal(count_of(r.out, "Starting "), 1);
	cli_has(r.out, "Starting 1 thread\n");
	cli_has(r.out, "lp loop 1 thread 0: (groupid=0");
	cli_free(&r);
}

static void job_file_errors_exit_2(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("clijobbad");
	static const char *const cases[][3] = {
		/* file text, then two texts expected in the message */
		{"[global]\nsize=1m\n\n[a]\niodepth=0\n", ":5: iodepth=0: "
		 "out of range", "accepted: 1..4096"},
		{"[global]\n[a]\nbogus=1\n", ":3: bogus=1: unknown key",
		 "accepted"},
		{"[a]\nbs=3k\n", ":2: bs=3k: out of range", "power of two"},
		{"[a]\nsize=1z\n", ":2: size=1z: bad suffix 'z'", "accepted"},
		{"[global]\n[two words]\n", ":2: section [two words]: not a "
		 "job name", "accepted: [global] or [NAME]"},
		{"[-x]\n", ":1: section [-x]: not a job name", "accepted"},
		{"size=1m\n[a]\n", ":1: size=1m: key outside a section",
		 "accepted"},
		{"[global]\n\nrw\n", ":3: rw: needs a value",
		 "accepted: write, read or shuffle"},
		{"[a]\nsize=1m\n[b\n", ":3: syntax error", "accepted"},
		{"[global]\n[a]\neta=never\n", ":3: eta=never: a global option",
		 "accepted: in [global] or on the command line"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[32], want[160];
		snprintf(name, sizeof(name), "bad%zu.ini", i);
		const char *f = write_file(dir, name, cases[i][0]);
		struct cli_out r = cli_run(NULL, f);
		cli_expect(&r, 2);
		if (cases[i][1][0] == ':') {
			snprintf(want, sizeof(want), "%s%s", name, cases[i][1]);
			cli_has(r.err, want);
		} else {
			cli_has(r.err, cases[i][1]);
		}
		cli_has(r.err, cases[i][2]);
		if (strchr(r.err, '\n') != r.err + strlen(r.err) - 1)
			fail_msg("case %zu: not one line:\n%s", i, r.err);
		cli_free(&r);
	}
	/* a directory is not a readable job file */
	struct cli_out r = cli_run(NULL, dir);
	cli_expect(&r, 2);
	cli_has(r.err, "cannot read the job file");
	cli_free(&r);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(help_lists_every_option),
		cmocka_unit_test(every_option_parses),
		cmocka_unit_test(bad_input_exits_2),
		cmocka_unit_test(config_mistakes_exit_2),
		cmocka_unit_test(job_files_layer_under_the_command_line),
		cmocka_unit_test(name_starts_a_job),
		cmocka_unit_test(fio_names),
		cmocka_unit_test(job_file_errors_exit_2),
		cmocka_unit_test(fio_differences),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
