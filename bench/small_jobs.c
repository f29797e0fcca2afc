/*
 * Small-job throughput against running ushuffled workers: shuffles per
 * second when every shuffle is small, so that the fixed costs of one
 * (connections, the claim and commit records, file creation and syncs,
 * a reader per partition, the drop) are all there is. Each job: one map
 * of --partitions partitions written and committed, every partition read
 * back and checked (records and bytes), the shuffle dropped. With
 * --heartbeat-every=K the application is heartbeated before every K-th
 * job, as a driver that heartbeats per task would.
 *
 *   ushuffled --dir=/var/tmp/w --listen=127.0.0.1:7400 &
 *   ush_bench_small_jobs --workers=127.0.0.1:7400 --jobs=1000 --json
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "util.h"

#define PROG "ush_bench_small_jobs"
#define APP "bench-small-jobs"

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Record i of a job: its index, then bytes derived from it. */
static size_t rec_of(uint8_t *b, uint32_t job, uint32_t i, size_t len)
{
	uint32_t h[2] = {job, i};
	memcpy(b, h, sizeof(h));
	for (size_t k = sizeof(h); k < len; k++)
		b[k] = (uint8_t)(job * 31u + i * 7u + k);
	return len;
}

struct cfg {
	const char *workers;
	uint32_t parts, records, shuffle0;
	size_t rec_len;
};

/* One job; returns 0, or 1 with the error on stderr. */
static int job(ush_ring *ring, const struct cfg *c, uint32_t j,
	       uint64_t *checked)
{
	uint32_t shuffle = c->shuffle0 + j;
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = shuffle,
		.partitions = c->parts, .target = USH_TARGET_NET,
		.workers = c->workers, .app = APP};
	ush_writer *w = NULL;
	uint8_t b[4096], exp[4096];
	int ret = ush_writer_open(&w, ring, &wo);
	for (uint32_t i = 0; !ret && i < c->records; i++)
		ret = ush_writer_write(w, i % c->parts, b,
				       rec_of(b, j, i, c->rec_len));
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	struct ush_status bst, st = {NULL, 0};
	if (!ret && !(ret = ush_writer_status(w, &bst))) {
		st.data = malloc(bst.len);
		if (!st.data)
			ret = -1;
		else
			memcpy((void *)st.data, bst.data, st.len = bst.len);
	}
	ush_writer_free(w);
	uint64_t n = 0;
	for (uint32_t p = 0; !ret && p < c->parts; p++) {
		struct ush_reader_opts ro = {.size = sizeof(ro), .partition = p,
			.statuses = &st, .nstatuses = 1};
		ush_reader *r;
		const void *rec;
		size_t len;
		if ((ret = ush_reader_open(&r, &ro)))
			break;
		while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
			uint32_t h[2];
			memcpy(h, rec, sizeof(h));
			if (len != c->rec_len || h[0] != j ||
			    h[1] % c->parts != p ||
			    memcmp(rec, exp, rec_of(exp, j, h[1], len))) {
				fprintf(stderr, "%s: job %u partition %u: a "
					"record differs\n", PROG, j, p);
				ush_reader_free(r);
				free((void *)st.data);
				return 1;
			}
			n++;
		}
		ush_reader_free(r);
	}
	free((void *)st.data);
	if (!ret && n != c->records) {
		fprintf(stderr, "%s: job %u: %llu records read, %u written\n",
			PROG, j, (unsigned long long)n, c->records);
		return 1;
	}
	if (!ret)
		ret = ush_shuffle_drop(c->workers, APP, shuffle, 0);
	if (ret) {
		fprintf(stderr, "%s: job %u: %s\n", PROG, j, ush_last_error());
		return 1;
	}
	*checked += n;
	return 0;
}

int main(int argc, char **argv)
{
	struct cfg c = {.parts = 16, .records = 64, .rec_len = 100,
			.shuffle0 = (uint32_t)time(NULL)};
	unsigned jobs = 1000, hb_every = 0;
	bool json = false;
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"workers", "H:P,...", "the ushuffled workers (required)",
		 BENCH_STR, &c.workers},
		{"jobs", "N", "shuffles to run (default 1000)", BENCH_COUNT,
		 &jobs},
		{"partitions", "N", "partitions per shuffle (default 16)",
		 BENCH_COUNT, &c.parts},
		{"records", "N", "records per shuffle (default 64)",
		 BENCH_UINT, &c.records},
		{"record-size", "B", "bytes per record, 8..4096 (default 100)",
		 BENCH_SIZE, &c.rec_len},
		{"heartbeat-every", "K", "heartbeat before every K-th job "
		 "(default 0: never)", BENCH_UINT, &hb_every},
		{"json", NULL, "one JSON object on stdout", BENCH_FLAG, &json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	if (!c.workers)
		bench_bad(PROG, "--workers is required");
	if (c.rec_len < 8 || c.rec_len > 4096)
		bench_bad(PROG, "--record-size=%zu: not in 8..4096", c.rec_len);
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 8u << 20;
	ush_ring *ring;
	if (ush_ring_create(&ring, &ro))
		return fprintf(stderr, "%s: %s\n", PROG, ush_last_error()), 1;
	struct ush_lat lat;
	ush_lat_init(&lat);
	uint64_t checked = 0, heartbeats = 0;
	double c0 = cpu_s();
	uint64_t t0 = now_ns();
	for (unsigned j = 0; j < jobs; j++) {
		uint64_t t = now_ns();
		if (hb_every && j % hb_every == 0) {
			if (ush_app_heartbeat(c.workers, APP, 0))
				return fprintf(stderr, "%s: %s\n", PROG,
					       ush_last_error()), 1;
			heartbeats++;
		}
		if (job(ring, &c, j, &checked))
			return 1;
		ush_lat_add(&lat, now_ns() - t);
	}
	double secs = (double)(now_ns() - t0) / 1e9, cpu = cpu_s() - c0;
	ush_ring_free(ring);
	if (json)
		printf("{\"bench\": \"small_jobs\", \"jobs\": %u, "
		       "\"partitions\": %u, \"records\": %u, "
		       "\"record_size\": %zu, \"heartbeat_every\": %u, "
		       "\"heartbeats\": %llu, \"seconds\": %.6f, "
		       "\"shuffles_per_s\": %.3f, \"job_p50_us\": %.1f, "
		       "\"job_p99_us\": %.1f, \"cpu_s\": %.6f, "
		       "\"records_checked\": %llu}\n", jobs, c.parts,
		       c.records, c.rec_len, hb_every,
		       (unsigned long long)heartbeats, secs, jobs / secs,
		       ush_lat_percentile(&lat, 50) / 1e3,
		       ush_lat_percentile(&lat, 99) / 1e3, cpu,
		       (unsigned long long)checked);
	else
		printf("%u shuffles of %u partitions in %.2f s: %.1f "
		       "shuffles/s (job p50 %.0f us, p99 %.0f us), client "
		       "CPU %.0f us per shuffle, %llu heartbeats, %llu "
		       "records checked\n", jobs, c.parts, secs, jobs / secs,
		       ush_lat_percentile(&lat, 50) / 1e3,
		       ush_lat_percentile(&lat, 99) / 1e3, cpu * 1e6 / jobs,
		       (unsigned long long)heartbeats,
		       (unsigned long long)checked);
	return 0;
}
