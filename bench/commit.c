/*
 * Commit rate of a worker: --writers threads, each with its own ring,
 * write maps of --map-kib KiB (records of --record-size bytes over
 * --partitions partitions) to running ushuffled workers and commit each;
 * --maps maps in all, of one shuffle. Reports commits per second over
 * the run and the latency of ush_writer_commit() (flush, the worker's
 * syncs and commit record, its ACK): what map tasks that commit small
 * outputs at once see.
 *
 *   ushuffled --dir=/var/tmp/w --listen=127.0.0.1:7400 &
 *   ush_bench_commit --workers=127.0.0.1:7400 --writers=8 --maps=2000 \
 *           --map-kib=256 --json
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define PROG "ush_bench_commit"
#define WRITERS_MAX 256

struct cfg {
	const char *workers;
	unsigned writers, maps, parts;
	size_t map_bytes, rec_len;
	uint32_t shuffle;
	int send_zc;
};

struct writer {
	const struct cfg *c;
	unsigned k;
	struct ush_lat lat; /* its commits' latencies */
	int err;
	pthread_t tid;
};

/* One map: written, then committed (timed). */
static int one_map(ush_ring *ring, const struct cfg *c, uint32_t m,
		   uint8_t *rec, struct ush_lat *lat)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = c->shuffle,
		.map = m, .partitions = c->parts, .target = USH_TARGET_NET,
		.workers = c->workers, .send_zc = c->send_zc};
	ush_writer *w = NULL;
	int ret = ush_writer_open(&w, ring, &wo);
	size_t nrec = c->map_bytes / c->rec_len;
	for (size_t i = 0; !ret && i < nrec; i++) {
		memcpy(rec, &i, sizeof(i));
		ret = ush_writer_write(w, (uint32_t)(i % c->parts), rec,
				       c->rec_len);
	}
	uint64_t t0 = now_ns();
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	ush_lat_add(lat, now_ns() - t0);
	if (ret)
		fprintf(stderr, "%s: map %u: %s\n", PROG, m, ush_last_error());
	ush_writer_free(w);
	return ret;
}

static void *writer_main(void *arg)
{
	struct writer *wr = arg;
	const struct cfg *c = wr->c;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 8u << 20;
	ush_ring *ring;
	uint8_t *rec = calloc(1, c->rec_len);
	if (!rec || ush_ring_create(&ring, &ro)) {
		fprintf(stderr, "%s: %s\n", PROG, rec ? ush_last_error() :
			"out of memory");
		free(rec);
		wr->err = 1;
		return NULL;
	}
	for (uint32_t m = wr->k; m < c->maps && !wr->err; m += c->writers)
		wr->err = one_map(ring, c, m, rec, &wr->lat) != 0;
	ush_ring_free(ring);
	free(rec);
	return NULL;
}

int main(int argc, char **argv)
{
	struct cfg c = {.writers = 8, .maps = 2000, .parts = 16,
			.map_bytes = 256u << 10, .rec_len = 4096,
			.shuffle = (uint32_t)time(NULL) * 1000u + (uint32_t)getpid()};
	size_t map_kib = 256;
	unsigned zc = 2; /* auto, on, off */
	bool json = false;
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"workers", "H:P,...", "the ushuffled workers (required)",
		 BENCH_STR, &c.workers},
		{"writers", "N", "concurrent writers, each a thread and ring "
		 "(default 8)", BENCH_COUNT, &c.writers},
		{"maps", "N", "maps committed in all (default 2000)",
		 BENCH_COUNT, &c.maps},
		{"map-kib", "K", "KiB per map (default 256)", BENCH_SIZE,
		 &map_kib},
		{"partitions", "N", "partitions (default 16)", BENCH_COUNT,
		 &c.parts},
		{"record-size", "B", "bytes per record, 8..65536 (default "
		 "4096)", BENCH_SIZE, &c.rec_len},
		{"send-zc", "auto|on|off", "zero-copy sends (default off: "
		 "on loopback the kernel copies anyway, and a map's last\n"
		 "zero-copy sends can wait for the worker's reads)",
		 BENCH_CHOICE, &zc},
		{"json", NULL, "one JSON object on stdout", BENCH_FLAG, &json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	if (!c.workers)
		bench_bad(PROG, "--workers is required");
	if (c.writers > WRITERS_MAX)
		bench_bad(PROG, "--writers=%u: at most %u", c.writers,
			  WRITERS_MAX);
	if (c.rec_len < 8 || c.rec_len > 65536)
		bench_bad(PROG, "--record-size=%zu: not in 8..65536", c.rec_len);
	c.map_bytes = map_kib << 10;
	c.send_zc = zc == 0 ? 0 : zc == 1 ? 1 : -1;
	if (c.map_bytes < c.rec_len)
		bench_bad(PROG, "--map-kib=%zu: less than one record", map_kib);
	static struct writer w[WRITERS_MAX];
	uint64_t t0 = now_ns();
	for (unsigned k = 0; k < c.writers; k++) {
		w[k] = (struct writer){.c = &c, .k = k};
		ush_lat_init(&w[k].lat);
		if (pthread_create(&w[k].tid, NULL, writer_main, &w[k]))
			return fprintf(stderr, "%s: pthread_create\n", PROG), 1;
	}
	int err = 0;
	struct ush_lat lat;
	ush_lat_init(&lat);
	for (unsigned k = 0; k < c.writers; k++) {
		pthread_join(w[k].tid, NULL);
		err |= w[k].err;
		ush_lat_merge(&lat, &w[k].lat);
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	if (err)
		return 1;
	double per_s = c.maps / secs,
	       p50 = (double)ush_lat_percentile(&lat, 50) / 1e3,
	       p99 = (double)ush_lat_percentile(&lat, 99) / 1e3;
	if (json)
		printf("{\"bench\": \"commit\", \"writers\": %u, \"maps\": %u, "
		       "\"map_bytes\": %zu, \"partitions\": %u, "
		       "\"record_size\": %zu, \"seconds\": %.3f, "
		       "\"commits_per_s\": %.2f, \"commit_p50_us\": %.1f, "
		       "\"commit_p99_us\": %.1f}\n", c.writers, c.maps,
		       c.map_bytes, c.parts, c.rec_len, secs, per_s, p50, p99);
	else
		printf("%u maps of %zu KiB by %u writers in %.2f s: %.1f "
		       "commits/s, commit p50 %.0f us, p99 %.0f us\n", c.maps,
		       map_kib, c.writers, secs, per_s, p50, p99);
	return 0;
}
