/*
 * Push throughput and writer CPU per GiB to running ushuffled workers:
 * full push buffers handed off with ush_writer_swap (no record copying),
 * so the figures are the transport's. Compare --engine=uring|psync and
 * --zc=auto|on|off at several --push sizes side by side in one run.
 * --replicas=2 sends every buffer to two workers; --kill=PID SIGKILLs a
 * worker half-way and reports how long the writer took to notice and
 * its longest swap after the kill (the time from the death to going on).
 *
 *   ushuffled --dir=/dev/shm/w --threads=1 --listen=127.0.0.1:7400 &
 *   ush_bench_net_push --workers=127.0.0.1:7400 --push=64 --zc=on
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "util.h"

#define PROG "ush_bench_net_push"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* This process's CPU seconds: user + system, or user alone (what the
 * library itself spends, without the kernel's copies). */
static double cpu_of(bool user_only)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double u = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
	return user_only ? u : u + (double)ru.ru_stime.tv_sec +
				       (double)ru.ru_stime.tv_usec / 1e6;
}

static double cpu(void)
{
	return cpu_of(false);
}

int main(int argc, char **argv)
{
	static const int send_zc[] = {0, 1, -1}; /* by --zc */
	const char *workers = NULL;
	size_t push_kib = 64, total_mib = 2048;
	unsigned zc = 0, psync = 0, replicas = 1, victim = 0;
	bool readback = false;
	uint32_t parts = 64, shuffle = (uint32_t)time(NULL);
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"workers", "H:P,...", "the ushuffled workers (required)",
		 BENCH_STR, &workers},
		{"push", "KiB", "push buffer size (default 64)", BENCH_SIZE,
		 &push_kib},
		{"size", "MiB", "bytes to push (default 2048)", BENCH_SIZE,
		 &total_mib},
		{"partitions", "N", "partitions (default 64)", BENCH_UINT,
		 &parts},
		{"zc", "auto|on|off", "SEND_ZC (default auto)", BENCH_CHOICE,
		 &zc},
		{"engine", "uring|psync", "I/O engine (default uring)",
		 BENCH_CHOICE, &psync},
		{"read", NULL, "then read every partition back", BENCH_FLAG,
		 &readback},
		{"replicas", "N", "workers each buffer goes to (default 1)",
		 BENCH_COUNT, &replicas},
		{"kill", "PID", "SIGKILL this worker half-way (replicas >= 2)",
		 BENCH_UINT, &victim},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	if (!workers)
		bench_bad(PROG, "--workers is required");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = push_kib << 10;
	ro.pool_bytes = 64u << 20;
	ro.iodepth = 256;
	ush_ring *ring;
	if (ush_ring_create(&ring, &ro))
		return fprintf(stderr, "%s\n", ush_last_error()), 1;
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = shuffle,
		.partitions = parts, .target = USH_TARGET_NET,
		.workers = workers, .send_zc = send_zc[zc], .replicas = replicas,
		.ioengine = psync ? USH_IOENGINE_PSYNC : USH_IOENGINE_URING};
	ush_writer *w;
	if (ush_writer_open(&w, ring, &wo))
		return fprintf(stderr, "%s\n", ush_last_error()), 1;
	void *buf;
	size_t cap;
	int ret = ush_writer_acquire(w, &buf, &cap);
	uint64_t n = ((uint64_t)total_mib << 20) / cap;
	/* Whole buffers of 1 KiB records. A swap checks the record prefixes
	 * (a fresh pool buffer holds zeros), so every buffer gets them; with
	 * --read the record bytes too, which the push figures then include. */
	uint32_t nrec = 0;
	size_t len = 0;
	static char rec[1020];
	static const uint8_t prefix[4] = {sizeof(rec) & 0xff, sizeof(rec) >> 8};
	while (len + 4 + sizeof(rec) <= cap)
		len += ush_record_put((char *)buf + len, rec, sizeof(rec)),
			nrec++;
	double t0 = now(), c0 = cpu(), u0 = cpu_of(true);
	/* After the kill: when the writer noticed (a worker dropped), and
	 * its longest swap, the stall a death costs the map. */
	double killed = 0, noticed = 0, stall = 0;
	for (uint64_t i = 0; !ret && i < n; i++) {
		if (victim && i == n / 2) {
			kill((pid_t)victim, SIGKILL);
			killed = now();
		}
		double s0 = killed ? now() : 0;
		ret = ush_writer_swap(w, (uint32_t)(i % parts), &buf, len, nrec);
		if (killed) {
			double s1 = now();
			stall = s1 - s0 > stall ? s1 - s0 : stall;
			struct ush_writer_stats ks;
			ush_writer_stats(w, &ks);
			if (!noticed && ks.net_failovers)
				noticed = s1;
		}
		for (size_t o = 0; !ret && o < len; o += 4 + sizeof(rec)) {
			if (readback)
				ush_record_put((char *)buf + o, rec, sizeof(rec));
			else
				memcpy((char *)buf + o, prefix, 4);
		}
	}
	if (!ret) {
		ush_writer_release(w, buf);
		ret = ush_writer_commit(w, NULL);
	}
	double t = now() - t0, c = cpu() - c0, u = cpu_of(true) - u0;
	if (ret)
		return fprintf(stderr, "%s\n", ush_last_error()), 1;
	/* The map status the reader is opened with, copied: the writer's
	 * is borrowed until ush_writer_free(). */
	struct ush_status bst, status = {NULL, 0};
	if (ush_writer_status(w, &bst) || !(status.data = malloc(bst.len)))
		return fprintf(stderr, "%s\n", ush_last_error()), 1;
	memcpy((void *)status.data, bst.data, bst.len);
	status.len = bst.len;
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	double gib = (double)st.frame_bytes / (1u << 30);
	printf("engine=%s zc=%s push=%zuKiB: %.2f GiB in %.2f s = %.2f GiB/s,"
	       " writer CPU %.3f s/GiB (user %.3f); sends %llu zc %llu notifs %llu "
	       "copied %llu zc_off %u credit_waits %llu send_ops %llu short %llu\n",
	       psync ? "psync" : "uring",
	       zc == 1 ? "on" : zc == 2 ? "off" : "auto", push_kib, gib, t,
	       gib / t, c / gib, u / gib, (unsigned long long)st.net_sends,
	       (unsigned long long)st.net_zc_sends,
	       (unsigned long long)st.net_zc_notifs,
	       (unsigned long long)st.net_zc_copied, st.net_zc_off,
	       (unsigned long long)st.net_credit_waits,
	       (unsigned long long)st.net_send_ops,
	       (unsigned long long)st.net_short_sends);
	if (replicas > 1)
		printf("replicas=%u: frame bytes sent first %llu second %llu "
		       "third %llu, workers dropped %u\n", replicas,
		       (unsigned long long)st.net_replica_bytes[0],
		       (unsigned long long)st.net_replica_bytes[1],
		       (unsigned long long)st.net_replica_bytes[2],
		       st.net_failovers);
	if (killed)
		printf("kill: writer noticed after %.3f ms, longest swap after "
		       "the kill %.3f ms\n", noticed ? (noticed - killed) * 1e3 :
		       -1.0, stall * 1e3);
	ush_writer_free(w);
	ush_ring_free(ring);
	if (readback) {
		/* Fetch every partition back: the reduce side's throughput. */
		uint64_t bytes = 0;
		t0 = now();
		c0 = cpu();
		for (uint32_t p = 0; p < parts; p++) {
			struct ush_reader_opts rdo = {.size = sizeof(rdo),
				.partition = p, .statuses = &status,
				.nstatuses = 1};
			ush_reader *r;
			const void *got;
			size_t glen;
			if (ush_reader_open(&r, &rdo))
				return fprintf(stderr, "%s\n",
					       ush_last_error()), 1;
			while ((ret = ush_reader_next(r, &got, &glen)) == 1)
				bytes += glen;
			ush_reader_free(r);
			if (ret)
				return fprintf(stderr, "%s\n",
					       ush_last_error()), 1;
		}
		t = now() - t0;
		c = cpu() - c0;
		printf("read back %.2f GiB of records in %.2f s = %.2f GiB/s, "
		       "reader CPU %.3f s/GiB\n", (double)bytes / (1u << 30),
		       t, (double)bytes / (1u << 30) / t,
		       c / ((double)bytes / (1u << 30)));
	}
	free((void *)status.data);
	ush_shuffle_drop(workers, NULL, shuffle, 0);
	return 0;
}
