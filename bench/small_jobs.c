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
 * Authentication: the jobs prove --secret-file's secret (else
 * $USHUFFLE_SECRET's), or none with --auth=off. --handshakes=N times N
 * connections that only say HELLO (authenticated or not) and HEARTBEAT:
 * the cost of a connection's setup. --auth=compare alternates rounds with
 * and without the secret against one worker run --insecure with the
 * secret (it serves both), and reports each side by side.
 *
 *   ushuffled --dir=/var/tmp/w --listen=127.0.0.1:7400 --secret-file=S &
 *   ush_bench_small_jobs --workers=127.0.0.1:7400 --jobs=1000 \
 *           --secret-file=S --json
 *   ushuffled --dir=/var/tmp/w --listen=127.0.0.1:7400 --secret-file=S \
 *           --insecure &
 *   ush_bench_small_jobs --workers=127.0.0.1:7400 --secret-file=S \
 *           --auth=compare --rounds=5 --json
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <stdio.h>
#include <errno.h>
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

/* What one round measured. */
struct round {
	double secs, cpu, per_s, p50_us, p99_us, hs_us;
	uint64_t checked, heartbeats;
};

/* n connections that say HELLO and HEARTBEAT, then jobs small jobs.
 * Returns 0 or 1 (the error on stderr). */
static int measure(ush_ring *ring, const struct cfg *c, unsigned jobs,
		   unsigned j0, unsigned hb_every, unsigned n,
		   struct round *r)
{
	struct ush_lat lat;
	ush_lat_init(&lat);
	*r = (struct round){0};
	uint64_t h0 = now_ns();
	for (unsigned i = 0; i < n; i++)
		if (ush_app_heartbeat(c->workers, APP, 0))
			return fprintf(stderr, "%s: %s\n", PROG,
				       ush_last_error()), 1;
	r->hs_us = n ? (double)(now_ns() - h0) / 1e3 / n : 0;
	double c0 = cpu_s();
	uint64_t t0 = now_ns();
	for (unsigned j = j0; j < j0 + jobs; j++) {
		uint64_t t = now_ns();
		if (hb_every && j % hb_every == 0) {
			if (ush_app_heartbeat(c->workers, APP, 0))
				return fprintf(stderr, "%s: %s\n", PROG,
					       ush_last_error()), 1;
			r->heartbeats++;
		}
		if (job(ring, c, j, &r->checked))
			return 1;
		ush_lat_add(&lat, now_ns() - t);
	}
	r->secs = (double)(now_ns() - t0) / 1e9;
	r->cpu = cpu_s() - c0;
	r->per_s = jobs / r->secs;
	r->p50_us = ush_lat_percentile(&lat, 50) / 1e3;
	r->p99_us = ush_lat_percentile(&lat, 99) / 1e3;
	return 0;
}

/* The secret: --secret-file's, else $USHUFFLE_SECRET's, which the
 * library would read by itself; taken out of the environment so that
 * --auth=off and compare's insecure rounds prove none. */
static int load_secret(const char *file, uint8_t *key, size_t *len)
{
	const char *env = getenv("USHUFFLE_SECRET");
	*len = 0;
	if (file) {
		FILE *f = fopen(file, "rb");
		if (!f)
			return -errno;
		*len = fread(key, 1, 4096, f);
		fclose(f);
		if (*len && key[*len - 1] == '\n')
			(*len)--;
	} else if (env) {
		*len = strlen(env) < 4096 ? strlen(env) : 4096;
		memcpy(key, env, *len);
	}
	unsetenv("USHUFFLE_SECRET");
	return 0;
}

static int auth_mode(bool on, const uint8_t *key, size_t len)
{
	int ret = ush_auth_secret(APP, on ? key : NULL, on ? len : 0);
	if (ret)
		fprintf(stderr, "%s: %s\n", PROG, ush_last_error());
	return ret;
}

int main(int argc, char **argv)
{
	struct cfg c = {.parts = 16, .records = 64, .rec_len = 100,
			.shuffle0 = (uint32_t)time(NULL)};
	unsigned jobs = 1000, hb_every = 0, handshakes = 0, rounds = 3;
	unsigned auth = 0; /* on, off, compare */
	const char *secret_file = NULL;
	bool json = false;
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"workers", "H:P,...", "the ushuffled workers (required)",
		 BENCH_STR, &c.workers},
		{"jobs", "N", "shuffles to run (default 1000; per round "
		 "with --auth=compare)", BENCH_COUNT, &jobs},
		{"partitions", "N", "partitions per shuffle (default 16)",
		 BENCH_COUNT, &c.parts},
		{"records", "N", "records per shuffle (default 64)",
		 BENCH_UINT, &c.records},
		{"record-size", "B", "bytes per record, 8..4096 (default 100)",
		 BENCH_SIZE, &c.rec_len},
		{"heartbeat-every", "K", "heartbeat before every K-th job "
		 "(default 0: never)", BENCH_UINT, &hb_every},
		{"secret-file", "PATH", "the application's secret (default: "
		 "$USHUFFLE_SECRET)", BENCH_STR, &secret_file},
		{"auth", "on|off|compare", "prove the secret, prove none, or "
		 "alternate rounds of both (default on)", BENCH_CHOICE, &auth},
		{"handshakes", "N", "time N bare connections (HELLO + "
		 "HEARTBEAT) first (default 0)", BENCH_UINT, &handshakes},
		{"rounds", "N", "--auth=compare: rounds of each (default 3)",
		 BENCH_COUNT, &rounds},
		{"json", NULL, "one JSON object on stdout", BENCH_FLAG, &json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	if (!c.workers)
		bench_bad(PROG, "--workers is required");
	if (c.rec_len < 8 || c.rec_len > 4096)
		bench_bad(PROG, "--record-size=%zu: not in 8..4096", c.rec_len);
	static uint8_t key[4096];
	size_t klen;
	if (load_secret(secret_file, key, &klen))
		bench_bad(PROG, "--secret-file=%s: cannot read it", secret_file);
	if (auth != 1 && !klen)
		bench_bad(PROG, "no secret: --secret-file or $USHUFFLE_SECRET "
			  "(or --auth=off against an --insecure worker)");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 8u << 20;
	ush_ring *ring;
	if (ush_ring_create(&ring, &ro))
		return fprintf(stderr, "%s: %s\n", PROG, ush_last_error()), 1;
	if (auth == 2) {
		/* Side by side, alternating which goes first. */
		enum { NR = 64 };
		double per_s[2][NR], hs[2][NR], p99[2][NR];
		rounds = rounds < NR ? rounds : NR;
		unsigned j0 = 0;
		for (unsigned r = 0; r < rounds; r++)
			for (unsigned k = 0; k < 2; k++) {
				unsigned on = (r + k) % 2 == 0;
				struct round x;
				if (auth_mode(on, key, klen) ||
				    measure(ring, &c, jobs, j0, hb_every,
					    handshakes ? handshakes : 200, &x))
					return 1;
				j0 += jobs;
				per_s[on][r] = x.per_s;
				hs[on][r] = x.hs_us;
				p99[on][r] = x.p99_us;
				if (!json)
					printf("round %u %s: %.1f shuffles/s, "
					       "connection %.1f us\n", r + 1,
					       on ? "auth" : "insecure",
					       x.per_s, x.hs_us);
			}
		ush_ring_free(ring);
		double a = median(per_s[1], rounds), i = median(per_s[0], rounds);
		double ha = median(hs[1], rounds), hi = median(hs[0], rounds);
		if (json)
			printf("{\"bench\": \"small_jobs_auth\", \"jobs\": %u, "
			       "\"rounds\": %u, \"partitions\": %u, "
			       "\"records\": %u, \"record_size\": %zu, "
			       "\"shuffles_per_s\": {\"auth\": %.3f, "
			       "\"insecure\": %.3f}, \"connection_us\": "
			       "{\"auth\": %.1f, \"insecure\": %.1f}, "
			       "\"handshake_cost_us\": %.1f, \"job_p99_us\": "
			       "{\"auth\": %.1f, \"insecure\": %.1f}}\n",
			       jobs, rounds, c.parts, c.records, c.rec_len, a,
			       i, ha, hi, ha - hi, median(p99[1], rounds),
			       median(p99[0], rounds));
		else
			printf("median of %u rounds: %.1f shuffles/s with auth, "
			       "%.1f insecure (ratio %.3f); a connection (HELLO "
			       "+ HEARTBEAT) %.1f us with auth, %.1f insecure: "
			       "the challenge costs %.1f us\n", rounds, a, i,
			       a / i, ha, hi, ha - hi);
		return 0;
	}
	if (auth_mode(auth == 0, key, klen))
		return 1;
	struct round x;
	if (measure(ring, &c, jobs, 0, hb_every, handshakes, &x))
		return 1;
	ush_ring_free(ring);
	if (json)
		printf("{\"bench\": \"small_jobs\", \"jobs\": %u, "
		       "\"partitions\": %u, \"records\": %u, "
		       "\"record_size\": %zu, \"heartbeat_every\": %u, "
		       "\"heartbeats\": %llu, \"seconds\": %.6f, "
		       "\"shuffles_per_s\": %.3f, \"job_p50_us\": %.1f, "
		       "\"job_p99_us\": %.1f, \"cpu_s\": %.6f, "
		       "\"records_checked\": %llu, \"auth\": %s, "
		       "\"connection_us\": %.1f}\n", jobs, c.parts,
		       c.records, c.rec_len, hb_every,
		       (unsigned long long)x.heartbeats, x.secs, x.per_s,
		       x.p50_us, x.p99_us, x.cpu,
		       (unsigned long long)x.checked,
		       auth == 0 ? "true" : "false", x.hs_us);
	else
		printf("%u shuffles of %u partitions in %.2f s: %.1f "
		       "shuffles/s (job p50 %.0f us, p99 %.0f us), client "
		       "CPU %.0f us per shuffle, %llu heartbeats, %llu "
		       "records checked, auth %s\n", jobs, c.parts, x.secs,
		       x.per_s, x.p50_us, x.p99_us, x.cpu * 1e6 / jobs,
		       (unsigned long long)x.heartbeats,
		       (unsigned long long)x.checked,
		       auth == 0 ? "on" : "off");
	return 0;
}
