/*
 * Restart time against commit-log history: how long ush_worker_create()
 * (lock, bind, replay of the commit logs, sweep) and ush_worker_start()
 * (the threads' rings, pools and buffers) take on a directory whose
 * worker has run N shuffles, each committed and then dropped. The logs
 * are compacted as they grow, so a restart should cost what the live
 * state costs (none here), not what the history does.
 *
 * --history=N runs the N shuffles through a worker on --dir (client
 * threads in this process, a ring each: one map of --partitions
 * partitions, a record each, committed, then dropped) and stops it;
 * --restarts=R then times R restarts on that directory. bench/run builds
 * the directories for every N first, then alternates their restarts.
 *
 *   ush_bench_restart --dir=/var/tmp/r --history=10000 --restarts=0
 *   ush_bench_restart --dir=/var/tmp/r --restarts=5 --json
 */
#define _GNU_SOURCE
#include <ushuffle/worker.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

#define PROG "ush_bench_restart"
#define APP "bench-restart"
#define MAX_RESTARTS 100
#define MAX_CLIENTS 64

struct history {
	char workers[64];
	uint32_t parts, shuffle0;
	unsigned n;
	atomic_uint next;
	atomic_int err;
	char msg[512];
};

static void *client(void *arg)
{
	struct history *h = arg;
	ush_ring *ring = NULL;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 4u << 20;
	int ret = ush_ring_create(&ring, &ro);
	for (unsigned k; !ret && (k = atomic_fetch_add(&h->next, 1)) < h->n &&
			 !atomic_load(&h->err);) {
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = h->shuffle0 + k, .partitions = h->parts,
			.target = USH_TARGET_NET, .workers = h->workers,
			.app = APP};
		ush_writer *w = NULL;
		ret = ush_writer_open(&w, ring, &wo);
		for (uint32_t p = 0; !ret && p < h->parts; p++)
			ret = ush_writer_write(w, p, &k, sizeof(k));
		if (!ret)
			ret = ush_writer_commit(w, NULL);
		ush_writer_free(w);
		if (!ret)
			ret = ush_shuffle_drop(h->workers, APP, h->shuffle0 + k,
					       0);
	}
	if (ret) {
		int zero = 0;
		if (atomic_compare_exchange_strong(&h->err, &zero, ret))
			snprintf(h->msg, sizeof(h->msg), "%s",
				 ush_last_error());
	}
	ush_ring_free(ring);
	return NULL;
}

/* The worker and its clients share it, as in a deployment (auth on). */
static const char SECRET[] = "ush-bench-restart-secret-0123456789";

static ush_worker *worker_up(const char *dir, double *create_ms,
			     double *start_ms)
{
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	o.dir = dir;
	o.log_level = 0;
	o.secret = SECRET;
	o.secret_len = sizeof(SECRET) - 1;
	ush_worker *wk;
	uint64_t t0 = now_ns();
	if (ush_worker_create(&wk, &o)) {
		fprintf(stderr, "%s: %s\n", PROG, ush_worker_last_error());
		exit(1);
	}
	uint64_t t1 = now_ns();
	if (ush_worker_start(wk)) {
		fprintf(stderr, "%s: %s\n", PROG, ush_worker_last_error());
		exit(1);
	}
	uint64_t t2 = now_ns();
	if (create_ms)
		*create_ms = (double)(t1 - t0) / 1e6;
	if (start_ms)
		*start_ms = (double)(t2 - t1) / 1e6;
	return wk;
}

static void worker_down(ush_worker *wk)
{
	ush_worker_stop(wk);
	if (ush_worker_wait(wk)) {
		fprintf(stderr, "%s: %s\n", PROG, ush_worker_last_error());
		exit(1);
	}
	ush_worker_free(wk);
}

/* Bytes of the commit logs and their snapshot in dir. */
static uint64_t log_bytes(const char *dir, uint64_t *snap)
{
	DIR *d = opendir(dir);
	uint64_t n = 0;
	struct dirent *de;
	*snap = 0;
	while (d && (de = readdir(d))) {
		char path[4096];
		struct stat st;
		if (strncmp(de->d_name, "commit.", 7))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (stat(path, &st))
			continue;
		if (!strcmp(de->d_name, "commit.snap"))
			*snap = (uint64_t)st.st_size;
		else
			n += (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	const char *dir = NULL;
	unsigned n = 0, restarts = 5, clients = 2;
	uint32_t parts = 4;
	bool json = false;
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"dir", "PATH", "the worker's directory (required)", BENCH_STR,
		 &dir},
		{"history", "N", "shuffles to run first (default 0)",
		 BENCH_UINT, &n},
		{"partitions", "N", "partitions per shuffle (default 4)",
		 BENCH_COUNT, &parts},
		{"clients", "N", "client threads (default 2)", BENCH_COUNT,
		 &clients},
		{"restarts", "R", "restarts to time (default 5)", BENCH_UINT,
		 &restarts},
		{"json", NULL, "one JSON object on stdout", BENCH_FLAG, &json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	if (ush_auth_secret(NULL, SECRET, sizeof(SECRET) - 1))
		return fprintf(stderr, "%s: %s\n", PROG, ush_last_error()), 1;
	if (!dir)
		bench_bad(PROG, "--dir is required");
	if (restarts > MAX_RESTARTS || clients > MAX_CLIENTS)
		bench_bad(PROG, "at most %d restarts and %d clients",
			  MAX_RESTARTS, MAX_CLIENTS);
	double hist_s = 0;
	if (n) {
		static struct history h;
		h.parts = parts;
		h.n = n;
		h.shuffle0 = 1;
		ush_worker *wk = worker_up(dir, NULL, NULL);
		snprintf(h.workers, sizeof(h.workers), "127.0.0.1:%d",
			 ush_worker_port(wk));
		pthread_t t[MAX_CLIENTS];
		uint64_t t0 = now_ns();
		for (unsigned i = 0; i < clients; i++)
			if (pthread_create(&t[i], NULL, client, &h))
				return fprintf(stderr, "%s: pthread_create\n",
					       PROG), 1;
		for (unsigned i = 0; i < clients; i++)
			pthread_join(t[i], NULL);
		hist_s = (double)(now_ns() - t0) / 1e9;
		if (atomic_load(&h.err))
			return fprintf(stderr, "%s: %s\n", PROG, h.msg), 1;
		worker_down(wk);
	}
	uint64_t snap, logs = log_bytes(dir, &snap);
	double cr[MAX_RESTARTS], st[MAX_RESTARTS], tot[MAX_RESTARTS];
	for (unsigned i = 0; i < restarts; i++) {
		ush_worker *wk = worker_up(dir, &cr[i], &st[i]);
		tot[i] = cr[i] + st[i];
		worker_down(wk);
	}
	double mc = median(cr, restarts), ms = median(st, restarts),
	       mt = median(tot, restarts);
	if (json)
		printf("{\"bench\": \"restart\", \"history\": %u, "
		       "\"partitions\": %u, \"history_s\": %.3f, "
		       "\"log_bytes\": %llu, \"snap_bytes\": %llu, "
		       "\"restarts\": %u, \"create_ms_median\": %.3f, "
		       "\"start_ms_median\": %.3f, "
		       "\"total_ms_median\": %.3f}\n",
		       n, parts, hist_s, (unsigned long long)logs,
		       (unsigned long long)snap, restarts, mc, ms, mt);
	else
		printf("history %u shuffles (%.1f s); logs %llu B, snapshot "
		       "%llu B; %u restarts: create (replay) %.2f ms, start "
		       "%.2f ms, total %.2f ms (medians)\n", n, hist_s,
		       (unsigned long long)logs, (unsigned long long)snap,
		       restarts, mc, ms, mt);
	return 0;
}
