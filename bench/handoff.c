/*
 * ush_bench_handoff: the cost of handing a full push buffer to the writer,
 * swap (give the buffer away, get an idle one back) against copy (the
 * writer copies a caller-owned buffer into a pool buffer), measured side by
 * side in one run on the null target (frames are built, then dropped: no
 * I/O), codec none, for 64 KiB and 256 KiB push buffers.
 *
 * Every call is timed alone with clock_gettime(CLOCK_MONOTONIC); filling
 * the buffer with records happens between calls and is not timed. Rounds
 * alternate swap, copy, swap, copy... (the machine is noisy), each on a
 * fresh writer, after one discarded warm-up pair per size.
 *
 * Two figures, because the writer defers work: a hand-off only queues the
 * buffer; every 16th one frames (header + CRC32C) and submits the 16
 * queued buffers inside that call.
 *   median, p90  the hand-off a caller waits for 15 times out of 16;
 *   amortized    the cost per buffer including the deferred framing and
 *                CRC32C: (15 x median of the queue-only calls + median of
 *                the flushing calls) / 16, robust to preemptions;
 *   mean         the same from all timed calls (sum / buffers): exact
 *                but moved by every interrupt and preemption;
 *   p99, max     the flushing calls (and noise).
 *
 * Public API only. Exits 1 if a check fails (every hand-off framed exactly
 * once, no buffer returned while still queued, no allocation per batch),
 * 2 if the figures are implausible (swap median not below copy median).
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define PROG "ush_bench_handoff"

#ifdef USH_BENCH_JSON
#include <json-c/json.h>
#endif

#define QUEUE_BATCH 16 /* the writer frames every 16 hand-offs (writer.c) */
#define MAX_SIZES 8
#define PARTITIONS 16

enum mode { SWAP, COPY };
static const char *const mode_name[] = {"swap", "copy"};

struct cfg {
	size_t sizes[MAX_SIZES];
	unsigned nsizes;
	unsigned rounds;  /* measured swap+copy pairs per size */
	unsigned buffers; /* timed hand-offs per round */
	unsigned warm;    /* untimed hand-offs opening each round */
	unsigned record;  /* record payload bytes */
	int cpu;
	bool json;
};

struct summary {
	double median, p90, p99, max, mean;
	double amort; /* robust amortized: (15 queue-only + 1 flush) / 16
			 medians; preemptions do not move it */
	double handoff_median; /* calls that only queued */
	double handoff_tmean;  /* their mean below their p99: finer than the
				  clock's ticks (10 ns on some VMs) */
	double flush_median;   /* calls that framed 16 buffers */
	double rmed_min, rmed_max; /* spread of the per-round medians */
};

struct result {
	size_t size, cap, len;
	uint32_t nrec;
	uint64_t *samples[2];
	struct summary s[2];
};

static int failures;

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ush_bench_handoff: FAIL: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	failures++;
}

static _Noreturn void die(const char *what, int err)
{
	fprintf(stderr, PROG ": %s: %s (%s)\n", what,
		ush_last_error(), ush_err_name(err));
	exit(1);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The pct-th percentile of sorted v[0..n-1] (nearest rank). */
static double pctl(const uint64_t *v, size_t n, double pct)
{
	size_t rank = (size_t)ceil(pct / 100.0 * (double)n);
	return (double)v[rank ? rank - 1 : 0];
}

static double median_of(const uint64_t *v, size_t n, uint64_t *scratch)
{
	memcpy(scratch, v, n * sizeof(*v));
	qsort(scratch, n, sizeof(*v), cmp_u64);
	return pctl(scratch, n, 50);
}

/* Median cost of one clock_gettime pair: included in every figure. */
static double timer_overhead(void)
{
	enum { N = 100000 };
	static uint64_t v[N];
	for (unsigned i = 0; i < N; i++) {
		uint64_t t0 = now_ns();
		uint64_t t1 = now_ns();
		v[i] = t1 - t0;
	}
	qsort(v, N, sizeof(*v), cmp_u64);
	return pctl(v, N, 50);
}

/* A batch of records of rec bytes filling at most cap bytes. */
static uint8_t *make_template(size_t cap, unsigned rec, size_t *len,
			      uint32_t *nrec)
{
	uint8_t *t = aligned_alloc(4096, (cap + 4095) & ~(size_t)4095);
	uint8_t *payload = malloc(rec);
	if (!t || !payload) {
		fprintf(stderr, "ush_bench_handoff: out of memory\n");
		exit(1);
	}
	for (unsigned i = 0; i < rec; i++)
		payload[i] = (uint8_t)(i * 131u + 7u);
	size_t n = 0;
	uint32_t k = 0;
	while (n + USH_RECORD_HDR_SIZE + rec <= cap) {
		n += ush_record_put(t + n, payload, rec);
		k++;
	}
	free(payload);
	*len = n;
	*nrec = k;
	return t;
}

/* Untimed: the caller producing the next batch. The call number goes into
 * the first record so that no two batches are alike. */
static void fill(uint8_t *dst, const uint8_t *tmpl, size_t len, uint64_t i)
{
	memcpy(dst, tmpl, len);
	if (len >= USH_RECORD_HDR_SIZE + sizeof(i))
		memcpy(dst + USH_RECORD_HDR_SIZE, &i, sizeof(i));
}

static void check_stats(ush_writer *w, const struct result *res,
			enum mode m, uint64_t calls)
{
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	uint64_t flen = ush_frame_size(res->len);
	if (st.batches != calls)
		fail("%zu KiB %s: %llu hand-offs but %llu batches framed",
		     res->size >> 10, mode_name[m], (unsigned long long)calls,
		     (unsigned long long)st.batches);
	if (st.records != calls * res->nrec ||
	    st.raw_bytes != calls * res->len ||
	    st.frame_bytes != calls * flen || st.stored_bytes != calls * flen)
		fail("%zu KiB %s: stats disagree with %llu batches of %zu "
		     "bytes (records %llu raw %llu frame %llu stored %llu)",
		     res->size >> 10, mode_name[m], (unsigned long long)calls,
		     res->len, (unsigned long long)st.records,
		     (unsigned long long)st.raw_bytes,
		     (unsigned long long)st.frame_bytes,
		     (unsigned long long)st.stored_bytes);
	if (st.grows || st.stored_raw)
		fail("%zu KiB %s: %llu grows, %llu stored raw: expected none",
		     res->size >> 10, mode_name[m], (unsigned long long)st.grows,
		     (unsigned long long)st.stored_raw);
}

/* After call j (0-based) on a fresh writer, the frames built so far. */
static uint64_t expect_framed(uint64_t j)
{
	return (j + 1) / QUEUE_BATCH * QUEUE_BATCH;
}

/*
 * One round: a fresh writer, c->warm untimed hand-offs, then c->buffers
 * timed ones into out (NULL: a discarded warm-up round).
 */
static void run_round(ush_ring *ring, const struct cfg *c,
		      struct result *res, enum mode m, const uint8_t *tmpl,
		      uint8_t *src, uint64_t *out)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 1, .map = 0,
		.partitions = PARTITIONS, .target = USH_TARGET_NULL};
	ush_writer *w;
	int ret = ush_writer_open(&w, ring, &wo);
	if (ret)
		die("writer open", ret);
	void *buf = NULL, *queued[QUEUE_BATCH] = {0};
	size_t cap = 0;
	if (m == SWAP) {
		if ((ret = ush_writer_acquire(w, &buf, &cap)))
			die("acquire", ret);
		if (cap != res->cap)
			fail("acquire gave %zu bytes, expected %zu", cap,
			     res->cap);
	}
	uint64_t total = (uint64_t)c->warm + c->buffers;
	uint64_t allocs = ush_alloc_count();
	for (uint64_t j = 0; j < total; j++) {
		uint32_t part = (uint32_t)(j % PARTITIONS);
		void *old = buf;
		fill(m == SWAP ? buf : src, tmpl, res->len, j);
		uint64_t t0 = now_ns();
		if (m == SWAP)
			ret = ush_writer_swap(w, part, &buf, res->len,
					      res->nrec);
		else
			ret = ush_writer_copy(w, part, src, res->len,
					      res->nrec);
		uint64_t t1 = now_ns();
		if (ret)
			die(m == SWAP ? "swap" : "copy", ret);
		if (out && j >= c->warm)
			out[j - c->warm] = t1 - t0;
		if (m != SWAP)
			continue;
		/* The replacement must be none of the buffers handed off
		 * since the last flush: those are still queued. */
		unsigned q = (unsigned)(j % QUEUE_BATCH);
		queued[q] = old;
		for (unsigned k = 0; k <= q; k++)
			if (buf == queued[k])
				fail("%zu KiB swap %llu returned a buffer "
				     "still queued for framing", res->size >> 10,
				     (unsigned long long)j);
		if (q == QUEUE_BATCH - 1)
			memset(queued, 0, sizeof(queued));
		if (j == QUEUE_BATCH - 2 || j == QUEUE_BATCH - 1) {
			struct ush_writer_stats st;
			ush_writer_stats(w, &st);
			if (st.batches != expect_framed(j))
				fail("after hand-off %llu: %llu batches framed, "
				     "expected %llu (does the writer no longer "
				     "frame every %d hand-offs?)", (unsigned long long)j,
				     (unsigned long long)st.batches,
				     (unsigned long long)expect_framed(j),
				     QUEUE_BATCH);
		}
	}
	uint64_t dallocs = ush_alloc_count() - allocs;
	if (dallocs)
		fail("%zu KiB %s: %llu heap allocations in %llu hand-offs",
		     res->size >> 10, mode_name[m], (unsigned long long)dallocs,
		     (unsigned long long)total);
	if (buf && (ret = ush_writer_release(w, buf)))
		die("release", ret);
	check_stats(w, res, m, total);
	if ((ret = ush_writer_commit(w, NULL)))
		die("commit", ret);
	ush_writer_free(w);
}

static void summarize(const struct cfg *c, uint64_t *v, struct summary *s)
{
	size_t n = (size_t)c->rounds * c->buffers;
	uint64_t *tmp = malloc(n * sizeof(*tmp));
	uint64_t *fl = malloc(n * sizeof(*fl)), *nf = malloc(n * sizeof(*nf));
	if (!tmp || !fl || !nf) {
		fprintf(stderr, "ush_bench_handoff: out of memory\n");
		exit(1);
	}
	s->rmed_min = INFINITY;
	s->rmed_max = 0;
	for (unsigned r = 0; r < c->rounds; r++) {
		double m = median_of(v + (size_t)r * c->buffers, c->buffers,
				     tmp);
		s->rmed_min = fmin(s->rmed_min, m);
		s->rmed_max = fmax(s->rmed_max, m);
	}
	/* warm is a multiple of QUEUE_BATCH, so timed call i flushes when
	 * (i + 1) % QUEUE_BATCH == 0 within its round. */
	size_t nfl = 0, nnf = 0;
	double sum = 0;
	for (size_t i = 0; i < n; i++) {
		size_t j = i % c->buffers;
		sum += (double)v[i];
		if ((j + 1) % QUEUE_BATCH == 0)
			fl[nfl++] = v[i];
		else
			nf[nnf++] = v[i];
	}
	memcpy(tmp, v, n * sizeof(*v));
	qsort(tmp, n, sizeof(*tmp), cmp_u64);
	s->median = pctl(tmp, n, 50);
	s->p90 = pctl(tmp, n, 90);
	s->p99 = pctl(tmp, n, 99);
	s->max = (double)tmp[n - 1];
	s->mean = sum / (double)n;
	qsort(fl, nfl, sizeof(*fl), cmp_u64);
	qsort(nf, nnf, sizeof(*nf), cmp_u64);
	s->flush_median = nfl ? pctl(fl, nfl, 50) : 0;
	s->handoff_median = nnf ? pctl(nf, nnf, 50) : 0;
	double tsum = 0, cut = nnf ? pctl(nf, nnf, 99) : 0;
	size_t k;
	for (k = 0; k < nnf && (double)nf[k] <= cut; k++)
		tsum += (double)nf[k];
	s->handoff_tmean = k ? tsum / (double)k : 0;
	s->amort = ((QUEUE_BATCH - 1) * s->handoff_median + s->flush_median) /
		   QUEUE_BATCH;
	free(tmp);
	free(fl);
	free(nf);
}

static void run_size(const struct cfg *c, struct result *res)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = res->size;
	ro.codec = USH_CODEC_NONE;
	/* The null target does no I/O: registration would change nothing
	 * here and only needs RLIMIT_MEMLOCK. */
	ro.fixedbufs = 0;
	if (ro.pool_bytes < 32 * res->size)
		ro.pool_bytes = 32 * res->size;
	ush_ring *ring;
	int ret = ush_ring_create(&ring, &ro);
	if (ret)
		die("ring create", ret);
	res->cap = res->size - USH_FRAME_HDR_SIZE;
	uint8_t *tmpl = make_template(res->cap, c->record, &res->len,
				      &res->nrec);
	uint8_t *src = aligned_alloc(4096, res->size);
	size_t n = (size_t)c->rounds * c->buffers;
	res->samples[SWAP] = malloc(n * sizeof(uint64_t));
	res->samples[COPY] = malloc(n * sizeof(uint64_t));
	if (!src || !res->samples[SWAP] || !res->samples[COPY]) {
		fprintf(stderr, "ush_bench_handoff: out of memory\n");
		exit(1);
	}
	/* One discarded warm-up pair, then A B A B ... */
	run_round(ring, c, res, SWAP, tmpl, src, NULL);
	run_round(ring, c, res, COPY, tmpl, src, NULL);
	for (unsigned r = 0; r < c->rounds; r++)
		for (int m = SWAP; m <= COPY; m++)
			run_round(ring, c, res, (enum mode)m, tmpl, src,
				  res->samples[m] + (size_t)r * c->buffers);
	struct ush_ring_info info;
	ush_ring_info(ring, &info);
	if (info.pool_idle_bytes != info.pool_bytes)
		fail("%zu KiB: %zu of %zu pool bytes not back on the idle "
		     "lists after the rounds", res->size >> 10,
		     info.pool_bytes - info.pool_idle_bytes, info.pool_bytes);
	ush_ring_free(ring);
	summarize(c, res->samples[SWAP], &res->s[SWAP]);
	summarize(c, res->samples[COPY], &res->s[COPY]);
	free(tmpl);
	free(src);
}

/* ns as " 1.23 us" / " 45 ns" right-aligned in w columns, one a space. */
static void put_time(double ns, int w)
{
	char b[32];
	if (ns >= 1e6)
		snprintf(b, sizeof(b), "%.2f ms", ns / 1e6);
	else if (ns >= 1000)
		snprintf(b, sizeof(b), "%.2f us", ns / 1000);
	else
		snprintf(b, sizeof(b), "%.0f ns", ns);
	printf(" %*s", w > 1 ? w - 1 : 0, b);
}

static const struct {
	size_t size;
	double copy_us, swap_us;
} celeborn[] = {{64 << 10, 4.1, 1.6}, {256 << 10, 25.0, 1.9}};

static void print_table(const struct cfg *c, const struct result *res,
			double tover)
{
	printf("ush_bench_handoff: null target, codec none, %u rounds x %u "
	       "hand-offs per mode and size (A B A B),\n%u-byte records; "
	       "every figure includes one clock_gettime pair (%.0f ns here)\n\n",
	       c->rounds, c->buffers, c->record, tover);
	printf("per-buffer hand-off cost  median:    what a call costs 15 "
	       "times out of 16\n"
	       "                          amortized: incl. the framing + "
	       "CRC32C done every 16th call,\n"
	       "                                     (15 x queue-only median "
	       "+ flush-call median) / 16\n\n");
	printf("%-9s %10s %10s %8s | %11s %11s %8s | %s\n", "buffer",
	       "copy med", "swap med", "ratio", "copy amort", "swap amort",
	       "ratio", "Celeborn copy->swap");
	for (unsigned i = 0; i < c->nsizes; i++) {
		const struct result *r = &res[i];
		const struct summary *cp = &r->s[COPY], *sw = &r->s[SWAP];
		char sz[32];
		snprintf(sz, sizeof(sz), "%zu KiB", r->size >> 10);
		printf("%-9s", sz);
		put_time(cp->median, 11);
		put_time(sw->median, 11);
		printf(" %7.1fx |", cp->median / sw->median);
		put_time(cp->amort, 12);
		put_time(sw->amort, 12);
		printf(" %7.2fx |", cp->amort / sw->amort);
		bool found = false;
		for (size_t k = 0; k < sizeof(celeborn) / sizeof(*celeborn); k++)
			if (celeborn[k].size == r->size) {
				printf(" %.1f -> %.1f us (%.1fx)",
				       celeborn[k].copy_us, celeborn[k].swap_us,
				       celeborn[k].copy_us / celeborn[k].swap_us);
				found = true;
			}
		if (!found)
			printf(" -");
		printf("\n");
	}
	printf("\n%-9s %-4s %9s %9s %9s %9s %9s %10s %11s %9s  %s\n", "buffer",
	       "mode", "median", "p90", "p99", "max", "mean", "queue-only",
	       "flush call", "flush/16", "round medians");
	for (unsigned i = 0; i < c->nsizes; i++) {
		for (int m = SWAP; m <= COPY; m++) {
			const struct summary *s = &res[i].s[m];
			char sz[32];
			snprintf(sz, sizeof(sz), "%zu KiB", res[i].size >> 10);
			printf("%-9s %-4s", sz, mode_name[m]);
			put_time(s->median, 10);
			put_time(s->p90, 10);
			put_time(s->p99, 10);
			put_time(s->max, 10);
			put_time(s->mean, 10);
			put_time(s->handoff_median, 11);
			put_time(s->flush_median, 12);
			put_time(s->flush_median / QUEUE_BATCH, 10);
			printf(" ");
			put_time(s->rmed_min, 0);
			printf(" ..");
			put_time(s->rmed_max, 0);
			printf("\n");
		}
	}
	printf("\nqueue-only: median of the calls that only queued the "
	       "buffer; flush call: median of the calls\nthat framed and "
	       "submitted the 16 queued buffers; flush/16: that per "
	       "buffer; mean: sum of all\ntimed calls / buffers (amortized "
	       "too, but moved by preemptions).\n");
}

#ifdef USH_BENCH_JSON
static json_object *jsummary(const struct summary *s)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "median_ns", json_object_new_double(s->median));
	json_object_object_add(o, "p90_ns", json_object_new_double(s->p90));
	json_object_object_add(o, "p99_ns", json_object_new_double(s->p99));
	json_object_object_add(o, "max_ns", json_object_new_double(s->max));
	json_object_object_add(o, "amortized_ns",
			       json_object_new_double(s->amort));
	json_object_object_add(o, "mean_ns", json_object_new_double(s->mean));
	json_object_object_add(o, "queue_only_median_ns",
			       json_object_new_double(s->handoff_median));
	json_object_object_add(o, "queue_only_trimmed_mean_ns",
			       json_object_new_double(s->handoff_tmean));
	json_object_object_add(o, "flush_call_median_ns",
			       json_object_new_double(s->flush_median));
	json_object_object_add(o, "flush_per_buffer_ns",
			       json_object_new_double(s->flush_median /
						      QUEUE_BATCH));
	json_object_object_add(o, "round_median_min_ns",
			       json_object_new_double(s->rmed_min));
	json_object_object_add(o, "round_median_max_ns",
			       json_object_new_double(s->rmed_max));
	return o;
}

static void print_json(const struct cfg *c, const struct result *res,
		       double tover)
{
	json_object *root = json_object_new_object();
	json_object_object_add(root, "bench", json_object_new_string("handoff"));
	json_object_object_add(root, "version",
			       json_object_new_string(USH_VERSION_STRING));
	json_object_object_add(root, "target", json_object_new_string("null"));
	json_object_object_add(root, "codec", json_object_new_string("none"));
	json_object_object_add(root, "rounds", json_object_new_int((int)c->rounds));
	json_object_object_add(root, "buffers_per_round",
			       json_object_new_int((int)c->buffers));
	json_object_object_add(root, "record_bytes",
			       json_object_new_int((int)c->record));
	json_object_object_add(root, "queue_batch",
			       json_object_new_int(QUEUE_BATCH));
	json_object_object_add(root, "timer_pair_ns",
			       json_object_new_double(tover));
	json_object *arr = json_object_new_array();
	for (unsigned i = 0; i < c->nsizes; i++) {
		const struct result *r = &res[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "buffer_bytes",
				       json_object_new_int64((int64_t)r->size));
		json_object_object_add(o, "batch_bytes",
				       json_object_new_int64((int64_t)r->len));
		json_object_object_add(o, "records_per_batch",
				       json_object_new_int64(r->nrec));
		json_object_object_add(o, "swap", jsummary(&r->s[SWAP]));
		json_object_object_add(o, "copy", jsummary(&r->s[COPY]));
		json_object_object_add(o, "median_ratio_copy_swap",
			json_object_new_double(r->s[COPY].median /
					       r->s[SWAP].median));
		json_object_object_add(o, "amortized_ratio_copy_swap",
			json_object_new_double(r->s[COPY].amort /
					       r->s[SWAP].amort));
		json_object_object_add(o, "mean_ratio_copy_swap",
			json_object_new_double(r->s[COPY].mean /
					       r->s[SWAP].mean));
		json_object_array_add(arr, o);
	}
	json_object_object_add(root, "results", arr);
	json_object_object_add(root, "checks_failed",
			       json_object_new_int(failures));
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
	json_object_put(root);
}
#endif

#ifdef USH_BENCH_JSON
#define JSON_HELP "JSON report on stdout"
#else
#define JSON_HELP "JSON report on stdout (not built: no json-c)"
#endif
#define STR_(x) #x
#define STR(x) STR_(x)

static void parse(int argc, char **argv, struct cfg *c)
{
	*c = (struct cfg){.sizes = {64, 256}, .nsizes = 2, .rounds = 16,
			  .buffers = 8192, .warm = 256, .record = 100,
			  .cpu = -1};
	struct bench_list sizes = {c->sizes, &c->nsizes, MAX_SIZES};
	static const struct bench_cmd cmd = {PROG, NULL,
		"Exit status: 0 ok, 1 a check failed, 2 implausible figures "
		"or a bad option."};
	const struct bench_opt opts[] = {
		{"sizes", "K[,K...]", "push buffer sizes in KiB (default "
		 "64,256)", BENCH_LIST, &sizes},
		{"rounds", "N", "measured swap/copy round pairs (default 16)",
		 BENCH_COUNT, &c->rounds},
		{"buffers", "N", "timed hand-offs per round (default 8192;\n"
		 "rounded up to a multiple of " STR(QUEUE_BATCH) ")",
		 BENCH_COUNT, &c->buffers},
		{"warmup", "N", "untimed hand-offs opening each round\n"
		 "(default 256; a multiple of " STR(QUEUE_BATCH) ")",
		 BENCH_UINT, &c->warm},
		{"record-size", "B", "record payload bytes (default 100)",
		 BENCH_UINT, &c->record},
		{"cpu", "N", "pin to CPU N", BENCH_INT, &c->cpu},
		{"json", NULL, JSON_HELP, BENCH_FLAG, &c->json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
#ifndef USH_BENCH_JSON
	if (c->json)
		bench_bad(PROG, "--json: built without json-c");
#endif
	for (unsigned i = 0; i < c->nsizes; i++) {
		size_t k = c->sizes[i];
		if (k < 4 || (k & (k - 1)) || k > (64 << 10))
			bench_bad(PROG, "--sizes: %zu is not a power of two "
				  "4..65536 (KiB)", k);
		c->sizes[i] = k << 10;
	}
	c->buffers = (c->buffers + QUEUE_BATCH - 1) / QUEUE_BATCH * QUEUE_BATCH;
	c->warm = (c->warm + QUEUE_BATCH - 1) / QUEUE_BATCH * QUEUE_BATCH;
}

int main(int argc, char **argv)
{
	struct cfg c;
	parse(argc, argv, &c);
	if (c.cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(c.cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			perror("ush_bench_handoff: sched_setaffinity");
	}
	double tover = timer_overhead();
	struct result res[MAX_SIZES] = {0};
	for (unsigned i = 0; i < c.nsizes; i++) {
		res[i].size = c.sizes[i];
		run_size(&c, &res[i]);
	}
	int status = failures ? 1 : 0;
	for (unsigned i = 0; !status && i < c.nsizes; i++)
		if (res[i].s[SWAP].median >= res[i].s[COPY].median) {
			fprintf(stderr, "ush_bench_handoff: IMPLAUSIBLE: %zu "
				"KiB swap median %.0f ns is not below copy "
				"median %.0f ns\n", res[i].size >> 10,
				res[i].s[SWAP].median, res[i].s[COPY].median);
			status = 2;
		}
#ifdef USH_BENCH_JSON
	if (c.json)
		print_json(&c, res, tover);
	else
#endif
		print_table(&c, res, tover);
	if (failures)
		fprintf(stderr, "ush_bench_handoff: %d check(s) failed\n",
			failures);
	for (unsigned i = 0; i < c.nsizes; i++) {
		free(res[i].samples[SWAP]);
		free(res[i].samples[COPY]);
	}
	return status;
}
