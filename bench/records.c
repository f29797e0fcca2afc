/*
 * The record path alone: ush_writer_write() into the null target (frames
 * are built, CRC'd and dropped; no I/O), in ns per record, for records of
 * --sizes bytes at --partitions partitions, beside its floor: the same
 * records, each with its 4-byte length prefix, memcpy'd in order into one
 * buffer of the pool's size, in the same round. Times are the thread's
 * CPU time, not wall-clock: on a shared machine other processes' load
 * would otherwise count. The writer's time runs from the first write to
 * the end of its commit (staged records are framed there). Partitions are uniform random, drawn before the clock
 * starts; record bytes are read in order from a source buffer, as a
 * caller's rows would be.
 *
 * The goals (docs/performance.md, "The record path"): at 10,000
 * partitions at most 1.5x the 64-partition cost per record, and at most
 * 3x the memcpy floor at 100 bytes.
 *
 *   ush_bench_records --mib=256 --rounds=3 --json
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PROG "ush_bench_records"
#define MAXV 8
#define SRC_BYTES (16u << 20)

struct cfg {
	size_t sizes[MAXV], parts[MAXV];
	unsigned nsizes, nparts, rounds;
	size_t mib;
	bool json;
};

struct input {
	uint8_t *src, *dst;  /* record bytes; the floor's buffer */
	size_t dst_bytes;
	uint32_t *part;      /* each record's partition */
	size_t n, len;       /* records, bytes each */
};

/* The calling thread's CPU time in ns. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 32);
}

/* Record i's bytes: in order through the source, wrapping. */
static const uint8_t *rec_at(const struct input *in, size_t i)
{
	return in->src + (i * in->len) % (SRC_BYTES - in->len);
}

static double floor_ns(const struct input *in)
{
	size_t at = 0, need = 4 + in->len;
	uint64_t t0 = cpu_ns();
	for (size_t i = 0; i < in->n; i++) {
		if (at + need > in->dst_bytes)
			at = 0;
		uint32_t l = (uint32_t)in->len;
		memcpy(in->dst + at, &l, 4);
		memcpy(in->dst + at + 4, rec_at(in, i), in->len);
		at += need;
	}
	uint64_t t = cpu_ns() - t0;
	/* Keep the copies: the compiler may not drop what is read. */
	__asm__ volatile("" : : "r"(in->dst) : "memory");
	return (double)t / (double)in->n;
}

/* One writer over the input: ns per record; *frames its batches. */
static int writer_ns(ush_ring *ring, const struct input *in, uint32_t parts,
		     uint32_t map, double *ns, uint64_t *frames)
{
	struct ush_writer_opts o;
	ush_writer_opts_init(&o);
	o.shuffle = 1;
	o.map = map;
	o.partitions = parts;
	o.target = USH_TARGET_NULL;
	ush_writer *w;
	int ret = ush_writer_open(&w, ring, &o);
	if (ret)
		return ret;
	uint64_t t0 = cpu_ns();
	for (size_t i = 0; i < in->n && !ret; i++)
		ret = ush_writer_write(w, in->part[i], rec_at(in, i), in->len);
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	uint64_t t = cpu_ns() - t0;
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	ush_writer_free(w);
	*ns = (double)t / (double)in->n;
	*frames = st.batches;
	return ret;
}

struct point {
	size_t len, parts;
	double ns, floor, frames_per_mib;
};

static int measure(ush_ring *ring, struct input *in, const struct cfg *c,
		   size_t parts, struct point *pt)
{
	double ns[16], fl[16];
	uint64_t frames = 0;
	for (size_t i = 0; i < in->n; i++)
		in->part[i] = next_rand() % (uint32_t)parts;
	for (unsigned r = 0; r < c->rounds; r++) {
		/* Alternate which goes first: the machine is noisy. */
		if (r & 1)
			fl[r] = floor_ns(in);
		int ret = writer_ns(ring, in, (uint32_t)parts, r, &ns[r],
				    &frames);
		if (ret)
			return ret;
		if (!(r & 1))
			fl[r] = floor_ns(in);
	}
	*pt = (struct point){
		.len = in->len,
		.parts = parts,
		.ns = median(ns, c->rounds),
		.floor = median(fl, c->rounds),
		.frames_per_mib = (double)frames /
				  ((double)in->n * (double)(4 + in->len) /
				   (1 << 20)),
	};
	return 0;
}

static void print(const struct point *p, size_t np, bool json,
		  const struct cfg *c)
{
	if (json) {
		printf("{\"bench\": \"records\", \"mib\": %zu, \"rounds\": %u, "
		       "\"points\": [", c->mib, c->rounds);
		for (size_t i = 0; i < np; i++)
			printf("%s{\"record_bytes\": %zu, \"partitions\": %zu, "
			       "\"ns_per_record\": %.2f, \"floor_ns\": %.2f, "
			       "\"frames_per_mib\": %.2f}", i ? ", " : "",
			       p[i].len, p[i].parts, p[i].ns, p[i].floor,
			       p[i].frames_per_mib);
		printf("]}\n");
		return;
	}
	printf("%8s %11s %10s %10s %8s %12s\n", "record", "partitions",
	       "ns/record", "memcpy ns", "ratio", "frames/MiB");
	for (size_t i = 0; i < np; i++)
		printf("%8zu %11zu %10.1f %10.1f %7.2fx %12.1f\n", p[i].len,
		       p[i].parts, p[i].ns, p[i].floor, p[i].ns / p[i].floor,
		       p[i].frames_per_mib);
}

int main(int argc, char **argv)
{
	struct cfg c = {.sizes = {16, 100, 1000}, .nsizes = 3,
			.parts = {64, 1000, 10000, 100000}, .nparts = 4,
			.rounds = 3, .mib = 256};
	const struct bench_opt opts[] = {
		{"sizes", "B,B,..", "record bytes (default 16,100,1000)",
		 BENCH_LIST, &(struct bench_list){c.sizes, &c.nsizes, MAXV}},
		{"partitions", "N,N,..", "partition counts (default "
		 "64,1000,10000,100000)", BENCH_LIST,
		 &(struct bench_list){c.parts, &c.nparts, MAXV}},
		{"mib", "MIB", "record bytes per writer run (default 256)",
		 BENCH_SIZE, &c.mib},
		{"rounds", "N", "rounds, median taken (default 3, at most 16)",
		 BENCH_COUNT, &c.rounds},
		{"json", NULL, "one JSON object on stdout", BENCH_FLAG,
		 &c.json},
		{0},
	};
	bench_parse(argc, argv, &(struct bench_cmd){PROG, NULL, NULL}, opts);
	if (c.rounds > 16)
		bench_bad(PROG, "--rounds=%u: at most 16", c.rounds);
	if (!c.mib)
		bench_bad(PROG, "--mib=0: at least 1");
	for (unsigned i = 0; i < c.nsizes; i++)
		if (!c.sizes[i] || c.sizes[i] > 60000)
			bench_bad(PROG, "--sizes: %zu is not in 1..60000",
				  c.sizes[i]);
	for (unsigned i = 0; i < c.nparts; i++)
		if (!c.parts[i] || c.parts[i] > (1u << 24))
			bench_bad(PROG, "--partitions: %zu is not in 1..16M",
				  c.parts[i]);
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ush_ring *ring;
	if (ush_ring_create(&ring, &ro))
		return fprintf(stderr, "%s: %s\n", PROG, ush_last_error()), 1;
	struct input in = {.dst_bytes = ro.pool_bytes};
	in.src = malloc(SRC_BYTES);
	in.dst = malloc(in.dst_bytes);
	struct point *pts = calloc(c.nsizes * c.nparts, sizeof(*pts));
	if (!in.src || !in.dst || !pts)
		return fprintf(stderr, "%s: out of memory\n", PROG), 1;
	for (size_t i = 0; i < SRC_BYTES; i++)
		in.src[i] = (uint8_t)next_rand();
	memset(in.dst, 1, in.dst_bytes);
	size_t np = 0;
	int ret = 0;
	for (unsigned s = 0; s < c.nsizes && !ret; s++) {
		in.len = c.sizes[s];
		in.n = (c.mib << 20) / (4 + in.len);
		free(in.part);
		if (!(in.part = malloc(in.n * sizeof(*in.part))))
			return fprintf(stderr, "%s: out of memory\n", PROG), 1;
		for (unsigned p = 0; p < c.nparts && !ret; p++)
			ret = measure(ring, &in, &c, c.parts[p], &pts[np++]);
	}
	if (ret)
		return fprintf(stderr, "%s: %s\n", PROG, ush_last_error()), 1;
	print(pts, np, c.json, &c);
	free(in.part);
	free(in.src);
	free(in.dst);
	free(pts);
	ush_ring_free(ring);
	return 0;
}
