/*
 * Short ushuffle runs, checked through the JSON report: every target x rw
 * mode x codec with --verify=crc32c, the A/B switches, the staging and
 * oversized-record paths, time-based runs, --keep, the normal report,
 * the status line, and Ctrl-C (exit 130, partial report, files removed).
 */
#define _GNU_SOURCE /* nftw */
#include "cli_run.h"
#include "net_helpers.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>

#define SIZE "192k"
#define SIZE_BYTES (192 * 1024)

static long data_bytes;

static int add_size(const char *path, const struct stat *st, int type,
		    struct FTW *ftw)
{
	size_t n = strlen(path);
	/* A shuffle's data: <dir>/s<S>/t<T>.log (not the commit log). */
	if (type == FTW_F && ftw->level == 2 && n > 4 &&
	    !strcmp(path + n - 4, ".log"))
		data_bytes += (long)st->st_size;
	return 0;
}

/* Waits until a shuffle's log under dir holds data: the writers have
 * pushed to that worker. Fails the test after 30 s. */
static void wait_for_data(const char *dir)
{
	for (int i = 0; i < 3000; i++) {
		data_bytes = 0;
		assert_int_equal(nftw(dir, add_size, 16, FTW_PHYS), 0);
		if (data_bytes > 0)
			return;
		usleep(10000);
	}
	fail_msg("no data reached the worker over %s in 30 s", dir);
}

/* Sums of the per-thread report objects. */
struct sums {
	uint64_t wrec, rrec, wbytes, rbytes, verified, errors;
	size_t jobs;
};

static void check_lat(json_object *dir, const char *name)
{
	char path[64];
	snprintf(path, sizeof(path), "%s/N", name);
	assert_true(jint(dir, path) > 0);
	snprintf(path, sizeof(path), "%s/percentile/99.000000", name);
	uint64_t p99 = jint(dir, path);
	snprintf(path, sizeof(path), "%s/percentile/1.000000", name);
	assert_true(jint(dir, path) <= p99);
	snprintf(path, sizeof(path), "%s/max", name);
	assert_true(p99 <= jint(dir, path));
	snprintf(path, sizeof(path), "%s/percentile/99.990000", name);
	jget(dir, path);
}

static struct sums summarize(json_object *j)
{
	struct sums s = {0};
	json_object *jobs = jget(j, "jobs");
	s.jobs = json_object_array_length(jobs);
	for (size_t i = 0; i < s.jobs; i++) {
		json_object *o = json_object_array_get_idx(jobs, i);
		assert_int_equal(jint(o, "error"), 0);
		s.wrec += jint(o, "write/records");
		s.rrec += jint(o, "read/records");
		s.wbytes += jint(o, "write/io_bytes");
		s.rbytes += jint(o, "read/io_bytes");
		s.verified += jint(o, "verify/records");
		s.errors += jint(o, "verify/errors");
		jget(o, "usr_cpu");
		jget(o, "sys_cpu");
		if (jint(o, "write/records")) {
			assert_true(jint(o, "write/total_ios") > 0);
			assert_true(jint(o, "write/bw_bytes") > 0);
			check_lat(jget(o, "write"), "handoff_ns");
		}
		if (jint(o, "read/records")) {
			assert_true(jint(o, "read/total_ios") > 0);
			check_lat(jget(o, "read"), "clat_ns");
		}
	}
	return s;
}

static bool dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	bool empty = true;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			empty = false;
	if (d)
		closedir(d);
	return empty;
}

static void every_target_rw_codec(void **state)
{
	(void)state;
	static const char *const codecs[] = {"none", "lz4", "zstd"};
	/* net: no --workers, so each job runs an embedded worker */
	static const char *const targets[] = {"null", "disk", "net"};
	static const char *const rws[] = {"write", "read", "shuffle"};
	const char *dir = th_tmpdir("climatrix");
	char dirarg[600], name[64], sdir[600], sdirarg[640];
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	snprintf(sdir, sizeof(sdir), "%s/shuffles", dir);
	snprintf(sdirarg, sizeof(sdirarg), "--dir=%s", sdir);
	assert_int_equal(mkdir(sdir, 0755), 0); /* --dir must exist */
	for (size_t c = 0; c < 3; c++)
	for (size_t t = 0; t < 3; t++) {
		uint64_t written = 0;
		for (size_t m = 0; m < 3; m++) {
			char codec[32], target[32], rw[32];
			snprintf(name, sizeof(name), "--name=m-%s-%s",
				 targets[t], codecs[c]);
			snprintf(codec, sizeof(codec), "--codec=%s", codecs[c]);
			snprintf(target, sizeof(target), "--target=%s",
				 targets[t]);
			snprintf(rw, sizeof(rw), "--rw=%s", rws[m]);
			bool shuffle = m == 2;
			struct cli_out r = cli_run(
				NULL, name, codec, target, rw,
				shuffle ? sdirarg : dirarg, "--size=" SIZE,
				"--numjobs=2", "--partitions=8",
				"--verify=crc32c", "--output-format=json",
				"--eta=never");
			if (t == 0 && m == 1) { /* nothing to read back */
				cli_expect(&r, 2);
				cli_has(r.err, "--rw=read with --target=null");
				cli_free(&r);
				continue;
			}
			cli_expect(&r, 0);
			json_object *j = cli_json(&r);
			struct sums s = summarize(j);
			assert_int_equal(s.jobs, 2);
			assert_int_equal(s.errors, 0);
			json_object *j0 = json_object_array_get_idx(
				jget(j, "jobs"), 0);
			const char *vs = jstr(j0, "verify/status");
			bool reads = t >= 1 && m > 0;
			assert_string_equal(vs, reads ? "ok" : "not-read");
			if (m != 1) { /* it wrote */
				assert_true(s.wbytes >= 2 * SIZE_BYTES);
				uint64_t raw = jint(j0, "write/raw_bytes");
				uint64_t frames = jint(j0, "write/frame_bytes");
				if (c == 0)
					assert_true(frames > raw);
				else /* half of each record compresses */
					assert_true(frames < raw * 9 / 10);
			}
			if (m == 0)
				written = s.wrec;
			if (reads) {
				uint64_t want = m == 1 ? written : s.wrec;
				assert_int_equal(s.rrec, want);
				assert_int_equal(s.verified, want);
				if (m == 2)
					assert_int_equal(s.rbytes, s.wbytes);
			} else {
				assert_int_equal(s.rrec, 0);
			}
			json_object_put(j);
			cli_free(&r);
		}
	}
	/* shuffles remove their files; write jobs leave theirs */
	assert_true(dir_is_empty(sdir));
	assert_false(dir_is_empty(dir));
	/* A read finds the data where the write put it: the manifest names
	 * the embedded worker, started again without --target=net. */
	struct cli_out rd = cli_run(NULL, "--name=m-net-zstd", dirarg,
				    "--rw=read", "--output-format=json",
				    "--eta=never");
	cli_expect(&rd, 0);
	json_object *jr = cli_json(&rd);
	json_object *jr0 = json_object_array_get_idx(jget(jr, "jobs"), 0);
	assert_string_equal(jstr(jr0, "verify/status"), "ok");
	assert_string_equal(jstr(jr0, "effective options/target"), "net");
	json_object_put(jr);
	cli_free(&rd);
	/* a worker that is not there: a run-time error naming it */
	struct cli_out r = cli_run(NULL, "--target=net", dirarg, "--size=1m",
				   "--workers=127.0.0.1:1", "--eta=never");
	cli_expect(&r, 1);
	cli_has(r.err, "127.0.0.1:1");
	cli_free(&r);
	th_rmrf(dir);
}

/* write/allocs of one map of 8 partitions pushed to workers (NULL: an
 * embedded one). */
static uint64_t net_write_allocs(const char *dir, const char *workers)
{
	char dirarg[600], warg[96] = "--eta=never";
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	if (workers)
		snprintf(warg, sizeof(warg), "--workers=%s", workers);
	struct cli_out r = cli_run(NULL, "--name=allocs", "--target=net",
				   "--rw=write", dirarg, "--size=4m",
				   "--numjobs=1", "--partitions=8",
				   "--output-format=json", "--eta=never", warg);
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	json_object *j0 = json_object_array_get_idx(jget(j, "jobs"), 0);
	uint64_t n = jint(j0, "write/allocs");
	json_object_put(j);
	cli_free(&r);
	return n;
}

/*
 * allocs/batch is process-wide: an embedded worker lives in its own
 * library (libushuffle_worker, with its own counter), and what it
 * allocates while storing (partitions, the commit) counts in the write
 * phase, which ends after the commit. The same job against a worker in
 * another process counts the client alone.
 */
static void embedded_worker_allocations_count(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("cliallocs");
	struct th_worker wk = {0};
	snprintf(wk.dir, sizeof(wk.dir), "%.400s/worker", dir);
	assert_int_equal(mkdir(wk.dir, 0755), 0);
	th_worker_spawn(&wk, "127.0.0.1", 0, 1);
	uint64_t client = net_write_allocs(dir, wk.addr);
	th_worker_stop(&wk);
	uint64_t both = net_write_allocs(dir, NULL);
	assert_true(client > 0); /* the commit's tables */
	assert_true(both > client);
	th_rmrf(dir);
}

/* --replicas=2 over three workers with host labels: every record read
 * back and verified, both replicas sent the same bytes, and the normal
 * report says so. */
static void replicas_shuffle(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("clireplicas");
	struct th_worker wk[3] = {{0}};
	char list[300], dirarg[600];
	int len = 0;
	for (int i = 0; i < 3; i++) {
		snprintf(wk[i].dir, sizeof(wk[i].dir), "%.400s/w%d", dir, i);
		assert_int_equal(mkdir(wk[i].dir, 0755), 0);
		th_worker_spawn(&wk[i], "127.0.0.1", 0, 1);
		len += snprintf(list + len, sizeof(list) - (size_t)len,
				"%s%s@h%d", i ? "," : "--workers=", wk[i].addr,
				i / 2);
	}
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	struct cli_out r = cli_run(NULL, "--name=rep", "--target=net",
				   "--rw=shuffle", dirarg, "--size=4m",
				   "--numjobs=2", "--replicas=2", list,
				   "--output-format=json", "--eta=never");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	struct sums s = summarize(j);
	assert_true(s.wrec > 0);
	assert_int_equal(s.verified, s.wrec);
	assert_int_equal(s.errors, 0);
	json_object *j0 = json_object_array_get_idx(jget(j, "jobs"), 0);
	json_object *rb = jget(j0, "write/replica_bytes");
	uint64_t first = (uint64_t)json_object_get_int64(
		json_object_array_get_idx(rb, 0));
	assert_true(first > 0);
	assert_int_equal(json_object_get_int64(json_object_array_get_idx(rb,
									 1)),
			 first);
	assert_int_equal(jint(j0, "write/failovers"), 0);
	json_object_put(j);
	cli_free(&r);
	r = cli_run(NULL, "--name=rep", "--target=net", "--rw=shuffle",
		    dirarg, "--size=1m", "--numjobs=1", "--replicas=2", list,
		    "--eta=never");
	cli_expect(&r, 0);
	cli_has(r.out, "replicas     : sent=");
	cli_free(&r);
	/* One worker dead: the writers fail over and the job is its data's;
	 * the drops before and after it, which cannot reach that worker,
	 * only warn (its copy expires with the application). */
	th_worker_kill(&wk[2]);
	r = cli_run(NULL, "--name=rep", "--target=net", "--rw=shuffle",
		    dirarg, "--size=1m", "--numjobs=1", "--replicas=2", list,
		    "--app=rep-test", "--output-format=json", "--eta=never");
	cli_expect(&r, 0);
	cli_has(r.err, "warning: job 'rep': dropping shuffle");
	cli_has(r.err, wk[2].addr);
	j = cli_json(&r);
	s = summarize(j);
	assert_true(s.wrec > 0);
	assert_int_equal(s.verified, s.wrec);
	j0 = json_object_array_get_idx(jget(j, "jobs"), 0);
	cli_has(jstr(j0, "warning"), "application 'rep-test'");
	assert_string_equal(jstr(j0, "error_message"), "");
	json_object_put(j);
	cli_free(&r);
	for (int i = 0; i < 3; i++)
		th_worker_stop(&wk[i]);
	th_rmrf(dir);
}

/* --replicas=2 over two workers, one SIGSTOPped in the middle of a job
 * long enough for the application heartbeat (every 10 s): the writers
 * drop it and go on with the other, which holds everything; the
 * heartbeat and the drop that cannot reach it only warn. The job
 * succeeds. */
static void stalled_replica_heartbeat(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("clistall");
	struct th_worker wk[2] = {{0}};
	char list[300];
	int len = 0;
	for (int i = 0; i < 2; i++) {
		snprintf(wk[i].dir, sizeof(wk[i].dir), "%.400s/w%d", dir, i);
		assert_int_equal(mkdir(wk[i].dir, 0755), 0);
		th_worker_spawn(&wk[i], "127.0.0.1", 0, 1);
		len += snprintf(list + len, sizeof(list) - (size_t)len,
				"%s%s", i ? "," : "--workers=", wk[i].addr);
	}
	struct cli_proc p = cli_start(NULL, (const char *const[]){
		"--name=hb", "--target=net", "--rw=write", "--time_based",
		"--runtime=12", "--size=16m", "--numjobs=1", "--replicas=2",
		list, "--app=stall-test", "--output-format=json",
		"--eta=never", NULL});
	/* Stopped once the writers push to it, before the heartbeat (at
	 * 10 s of the 12 s run): its data on disk says they reached it. */
	wait_for_data(wk[1].dir);
	th_worker_sigstop(&wk[1]);
	struct cli_out r = cli_wait(&p);
	assert_int_equal(kill(wk[1].pid, SIGCONT), 0);
	printf("%s", r.err);
	cli_expect(&r, 0);
	cli_has(r.err, wk[1].addr);
	json_object *j = cli_json(&r);
	json_object *j0 = json_object_array_get_idx(jget(j, "jobs"), 0);
	assert_string_equal(jstr(j0, "error_message"), "");
	assert_int_equal(jint(j0, "write/failovers"), 1);
	json_object_put(j);
	cli_free(&r);
	for (int i = 0; i < 2; i++)
		th_worker_stop(&wk[i]);
	th_rmrf(dir);
}

/* fio's --directory list: map i spills to the i-th directory, a read
 * finds every map, with the list in either order, --unlink=1 removes even
 * a write's output; --cpus_allowed confines the threads. */
static void directory_list_and_unlink(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("clidirs");
	char d[2][600], arg[1300];
	for (int i = 0; i < 2; i++) {
		snprintf(d[i], sizeof(d[i]), "%s/d%d", dir, i);
		assert_int_equal(mkdir(d[i], 0755), 0);
	}
	snprintf(arg, sizeof(arg), "--directory=%s:%s", d[0], d[1]);
	struct cli_out r = cli_run(NULL, "--name=dirs", arg, "--rw=write",
				   "--numjobs=2", "--size=" SIZE,
				   "--cpus_allowed=0", "--eta=never");
	cli_expect(&r, 0);
	cli_free(&r);
	/* Map i's spill file in directory i. */
	char spill[1300];
	for (int i = 0; i < 2; i++) {
		snprintf(spill, sizeof(spill), "%s/s%u/m%d.a0.data", d[i],
			 cli_shuffle_id("dirs"), i);
		assert_int_equal(access(spill, F_OK), 0);
	}
	char rev[1300];
	snprintf(rev, sizeof(rev), "--dir=%s:%s", d[1], d[0]);
	for (int k = 0; k < 2; k++) {
		r = cli_run(NULL, "--name=dirs", k ? rev : arg, "--rw=read",
			    "--numjobs=1", "--output-format=json",
			    "--eta=never");
		cli_expect(&r, 0);
		json_object *j = cli_json(&r);
		struct sums s = summarize(j);
		assert_true(s.verified > 0);
		assert_string_equal(jstr(json_object_array_get_idx(
					    jget(j, "jobs"), 0),
					 "verify/status"), "ok");
		json_object_put(j);
		cli_free(&r);
	}
	r = cli_run(NULL, "--name=dirs", arg, "--rw=write", "--unlink=1",
		    "--numjobs=2", "--size=" SIZE, "--eta=never");
	cli_expect(&r, 0);
	cli_free(&r);
	for (int i = 0; i < 2; i++)
		assert_true(dir_is_empty(d[i]));
	th_rmrf(dir);
}

/* Runs one disk shuffle with extra arguments; all records verified. */
static void shuffle_ok(const char *dir, const char *const *extra)
{
	const char *args[48] = {"--rw=shuffle", "--target=disk", "--numjobs=2",
				"--verify=crc32c", "--output-format=json",
				"--eta=never"};
	char dirarg[600];
	size_t n = 6;
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	args[n++] = dirarg;
	while (*extra && n < 46)
		args[n++] = *extra++;
	args[n] = NULL;
	struct cli_out r = cli_runv(NULL, args);
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	struct sums s = summarize(j);
	assert_true(s.wrec > 0);
	assert_int_equal(s.rrec, s.wrec);
	assert_int_equal(s.verified, s.wrec);
	assert_int_equal(s.errors, 0);
	assert_string_equal(jstr(json_object_array_get_idx(jget(j, "jobs"), 0),
				 "verify/status"), "ok");
	json_object_put(j);
	cli_free(&r);
	assert_true(dir_is_empty(dir));
}

static void ab_switches_and_paths(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("cliab");
	static const char *const runs[][8] = {
		{"--handoff=copy", "--size=256k", NULL},
		{"--ioengine=psync", "--size=256k", NULL},
		{"--ioengine=psync", "--handoff=copy", "--codec=zstd:5",
		 "--size=256k", NULL},
		{"--direct=0", "--fixedbufs=0", "--size=256k", NULL},
		{"--sqpoll=1", "--iodepth=4", "--size=256k", NULL},
		/* more partitions than staged buffers: round-robin eviction */
		{"--bs=8m", "--partitions=50", "--iodepth=4", "--fixedbufs=0",
		 "--size=2m", NULL},
		/* records above the push buffer go out alone, in order */
		{"--record-size=16-200k", "--bs=64k", "--size=2m",
		 "--partitions=4", NULL},
		{"--record-size=16", "--bs=4k", "--size=128k", NULL},
		{"--group_reporting", "--size=128k", "--numjobs=3", NULL},
		{"--buffer_compress_percentage=0", "--size=128k", NULL},
		{"--buffer_compress_percentage=100", "--size=128k", NULL},
	};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
		shuffle_ok(dir, runs[i]);
	th_rmrf(dir);
}

static void time_based_keep_and_grouping(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("clitime");
	char dirarg[600];
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	/* --time_based writes past --size until --runtime is up */
	struct cli_out r = cli_run(NULL, "--target=null", "--size=64k",
				   "--runtime=1", "--time_based", "--numjobs=2",
				   "--group_reporting", "--output-format=json");
	cli_expect(&r, 0);
	json_object *j = cli_json(&r);
	struct sums s = summarize(j);
	assert_int_equal(s.jobs, 1);
	assert_int_equal(jint(json_object_array_get_idx(jget(j, "jobs"), 0),
			      "threads"), 2);
	assert_true(s.wbytes > 4 * 64 * 1024);
	json_object_put(j);
	cli_free(&r);
	/* --keep: a shuffle leaves its output, a later read checks it */
	r = cli_run(NULL, "--name=kept", dirarg, "--size=128k", "--keep",
		    "--numjobs=2", "--output-format=json");
	cli_expect(&r, 0);
	j = cli_json(&r);
	uint64_t wrec = summarize(j).wrec;
	json_object_put(j);
	cli_free(&r);
	assert_false(dir_is_empty(dir));
	r = cli_run(NULL, "--name=kept", dirarg, "--rw=read", "--numjobs=3",
		    "--output-format=json");
	cli_expect(&r, 0);
	j = cli_json(&r);
	s = summarize(j);
	assert_int_equal(s.jobs, 3);
	assert_int_equal(s.rrec, wrec);
	assert_int_equal(s.verified, wrec);
	json_object_put(j);
	cli_free(&r);
	/* a read of a job nobody wrote: run-time failure, not bad input */
	r = cli_run(NULL, "--name=never-written", dirarg, "--rw=read");
	cli_expect(&r, 1);
	cli_has(r.err, "no output of job 'never-written'");
	cli_free(&r);
	th_rmrf(dir);
}

static void normal_report_to_file(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("clinormal");
	char dirarg[600], out[600], outarg[640];
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	snprintf(out, sizeof(out), "%s/report.txt", dir);
	snprintf(outarg, sizeof(outarg), "--output=%s", out);
	struct cli_out r = cli_run(NULL, dirarg, outarg, "--size=256k",
				   "--numjobs=2", "--eta=never");
	cli_expect(&r, 0);
	assert_string_equal(r.out, "");
	cli_free(&r);
	FILE *f = fopen(out, "r");
	assert_non_null(f);
	static char text[1 << 16];
	text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
	fclose(f);
	static const char *const want[] = {
		"ushuffle: (g=0): rw=shuffle", "Starting 2 threads",
		"ushuffle thread 0: (groupid=0, jobs=1): err= 0",
		"ushuffle thread 1: (groupid=0, jobs=1): err= 0",
		"  write: batches/s=", "  read: batches/s=", "MiB/s (",
		"MB/s)", "records/s=", "    handoff (", "handoff percentiles",
		"    clat (", "clat percentiles", " 1.00th=[", "99.50th=[",
		"99.99th=[", "    bytes        : logical=", "stored=",
		"(ratio ", "  WRITE: allocs/batch=", "  READ: allocs/batch=",
		"  cpu          : usr=",
		"sys=", "ctx=", "  verify       : crc32c: ", "errors (ok)",
		"Run status group 0 (all jobs):", "WRITE: bw=", "READ: bw="};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cli_has(text, want[i]);
	/* The process-wide allocation count is said once per phase. */
	const char *first = strstr(text, "WRITE: allocs/batch=");
	assert_null(strstr(first + 1, "WRITE: allocs/batch="));
	unlink(out);
	assert_true(dir_is_empty(dir));
	th_rmrf(dir);
}

static void status_line_and_ctrl_c(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("cliint");
	char dirarg[600];
	snprintf(dirarg, sizeof(dirarg), "--dir=%s", dir);
	struct cli_proc p = cli_start(NULL, (const char *const[]){
		dirarg, "--runtime=60", "--time_based", "--numjobs=2",
		"--eta=always", "--group_reporting", NULL});
	/* wait for the first status line, then interrupt */
	for (int i = 0; i < 200; i++) {
		char buf[4096] = "";
		fflush(p.err);
		ssize_t n = pread(fileno(p.err), buf, sizeof(buf) - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		if (strstr(buf, "[eta "))
			break;
		nanosleep(&(struct timespec){0, 50000000}, NULL);
	}
	kill(p.pid, SIGINT);
	struct cli_out r = cli_wait(&p);
	cli_expect(&r, 130);
	cli_has(r.err, "Jobs: 2 (f=2): [W(2)][");
	cli_has(r.err, "%][w=");
	cli_has(r.err, "interrupted; the report is partial");
	cli_has(r.out, "  write: batches/s=");
	cli_has(r.out, "(partial)");
	cli_free(&r);
	assert_true(dir_is_empty(dir)); /* no spill file left behind */
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_target_rw_codec),
		cmocka_unit_test(embedded_worker_allocations_count),
		cmocka_unit_test(replicas_shuffle),
		cmocka_unit_test(stalled_replica_heartbeat),
		cmocka_unit_test(directory_list_and_unlink),
		cmocka_unit_test(ab_switches_and_paths),
		cmocka_unit_test(time_based_keep_and_grouping),
		cmocka_unit_test(normal_report_to_file),
		cmocka_unit_test(status_line_and_ctrl_c),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
