/*
 * What one tenant can make a worker hold (issue 22): an embedded worker,
 * driven through the public API as a client would.
 *
 * Commit log: one application makes --commits empty commits and
 * --abandoned abandoned attempts (a writer opened and freed without a
 * commit) in one shuffle it keeps, then runs --cycles shuffles each
 * committed and dropped; prints the commit log's bytes (snapshot and
 * logs) after each phase and the most seen during the cycles.
 *
 * Applications: mints --apps application ids by heartbeat, then times
 * --probe heartbeats of new ids and of an id already known (the lookup
 * of an application is on every HELLO and heartbeat).
 *
 *   ush_bench_tenants --dir=/var/tmp/t --commits=10000 --abandoned=10000
 *   ush_bench_tenants --dir=/var/tmp/t --apps=100000 --probe=1000
 */
#define _GNU_SOURCE
#include <ushuffle/worker.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

#define PROG "ush_bench_tenants"
#define APP "bench-tenant"

static const char SECRET[] = "ush-bench-tenants-secret-0123456789";
static char workers[64];

static void check(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, "%s: %s: %s\n", PROG, what, ush_last_error());
		exit(1);
	}
}

/* Bytes of the commit logs and their snapshot in dir. */
static uint64_t log_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	uint64_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (!strncmp(de->d_name, "commit.", 7) && !stat(path, &st))
			n += (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
	return n;
}

/* A writer of (shuffle, map) with no records: committed if commit. */
static void attempt(ush_ring *ring, uint32_t shuffle, uint32_t map,
		    bool commit)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = shuffle,
		.map = map, .partitions = 1, .target = USH_TARGET_NET,
		.workers = workers, .app = APP};
	ush_writer *w = NULL;
	check(ush_writer_open(&w, ring, &wo), "writer open");
	if (commit)
		check(ush_writer_commit(w, NULL), "commit");
	ush_writer_free(w);
}

static void log_phase(const char *dir, unsigned commits, unsigned abandoned,
		      unsigned cycles)
{
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 4u << 20;
	check(ush_ring_create(&ring, &ro), "ring");
	printf("commit log at start: %llu bytes\n",
	       (unsigned long long)log_bytes(dir));
	for (unsigned m = 0; m < commits; m++)
		attempt(ring, 1, m, true);
	printf("after %u empty commits: %llu bytes\n", commits,
	       (unsigned long long)log_bytes(dir));
	for (unsigned m = 0; m < abandoned; m++)
		attempt(ring, 1, commits + m, false);
	printf("after %u abandoned attempts: %llu bytes\n", abandoned,
	       (unsigned long long)log_bytes(dir));
	uint64_t most = 0;
	for (unsigned s = 2; s < 2 + cycles; s++) {
		attempt(ring, s, 0, true);
		check(ush_shuffle_drop(workers, APP, s, 0), "drop");
		uint64_t n = log_bytes(dir);
		most = n > most ? n : most;
	}
	printf("%u shuffles committed and dropped: at most %llu bytes, "
	       "%llu at the end\n", cycles, (unsigned long long)most,
	       (unsigned long long)log_bytes(dir));
	ush_ring_free(ring);
}

/* Mean microseconds of n heartbeats of ids prefix<from>.. (or n of
 * prefix<from> if same). */
static double heartbeats(const char *prefix, unsigned from, unsigned n,
			 bool same)
{
	char id[64];
	uint64_t t0 = now_ns();
	for (unsigned i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "%s%u", prefix, from + (same ? 0 : i));
		check(ush_app_heartbeat(workers, id, 0), id);
	}
	return n ? (double)(now_ns() - t0) / 1e3 / n : 0;
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	unsigned commits = 0, abandoned = 0, cycles = 0, apps = 0, probe = 1000;
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"dir", "PATH", "the worker's directory (required)", BENCH_STR,
		 &dir},
		{"commits", "N", "empty commits in the kept shuffle (0)",
		 BENCH_UINT, &commits},
		{"abandoned", "N", "abandoned attempts in it (0)", BENCH_UINT,
		 &abandoned},
		{"cycles", "N", "shuffles committed and dropped then (0)",
		 BENCH_UINT, &cycles},
		{"apps", "N", "application ids to mint (0)", BENCH_UINT, &apps},
		{"probe", "N", "heartbeats timed after them (1000)", BENCH_UINT,
		 &probe},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	if (!dir)
		bench_bad(PROG, "--dir is required");
	check(ush_auth_secret(NULL, SECRET, sizeof(SECRET) - 1), "secret");
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	o.dir = dir;
	o.log_level = 0;
	o.secret = SECRET;
	o.secret_len = sizeof(SECRET) - 1;
	o.max_apps = apps + 2 * probe + 1;
	ush_worker *wk;
	if (ush_worker_create(&wk, &o) || ush_worker_start(wk)) {
		fprintf(stderr, "%s: %s\n", PROG, ush_worker_last_error());
		return 1;
	}
	snprintf(workers, sizeof(workers), "127.0.0.1:%d", ush_worker_port(wk));
	if (commits || abandoned || cycles)
		log_phase(dir, commits, abandoned, cycles);
	if (apps || probe) {
		double before = heartbeats("new", 0, probe, false);
		uint64_t t0 = now_ns();
		heartbeats("app", 0, apps, false);
		printf("%u applications minted in %.1f s\n", apps,
		       (double)(now_ns() - t0) / 1e9);
		printf("heartbeat of a new application: %.1f us with none "
		       "known, %.1f us with %u\n", before,
		       heartbeats("late", 0, probe, false), apps);
		printf("heartbeat of the last known application with %u: "
		       "%.1f us\n", apps,
		       heartbeats("app", apps ? apps - 1 : 0, probe, true));
	}
	ush_worker_free(wk);
	return 0;
}
