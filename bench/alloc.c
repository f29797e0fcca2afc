/*
 * ush_bench_alloc: heap bytes allocated per batch, and the time to write a
 * batch, for payloads of about 1.4 KiB, 4.4 KiB, 15 KiB and 66 KiB (the
 * DataFusion Comet #6985 table) on the null target, codec none.
 *
 * Three ways to write one batch that the caller holds in its own memory,
 * measured side by side in alternating rounds (baseline, copy, swap,
 * baseline, ...) on fresh writers after an untimed warm-up:
 *   baseline  what Comet did: calloc a zeroed 1 MiB chunk, memcpy the batch
 *             into it, hand the chunk to ush_writer_copy(), free it;
 *   copy      ush_writer_copy(): the library copies into a pool buffer of
 *             the batch's own size class;
 *   swap      memcpy into the acquired push buffer, ush_writer_swap().
 * Each does one memcpy of the batch at least, so the times compare the
 * hand-off plus the memory management, nothing else.
 *
 * Heap bytes are counted by replacing malloc & co. in this binary
 * (heapcount.c): every allocation in the process counts, the library's,
 * libc's and the codecs' alike, not only the ones the library reports in
 * ush_alloc_count(). Time per batch is the round's loop time / batches
 * (the writer frames every 16th hand-off: timing one call would miss it).
 *
 * Public API only. Exit 1 if a check fails: a ushuffle mode allocating in
 * steady state, the baseline not seen allocating (a broken counter), or
 * writer statistics disagreeing with what was written.
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>

#include "heapcount.h"
#include "util.h"

#define PROG "ush_bench_alloc"
#define MAX_SIZES 8
#define PARTITIONS 16
#define CHUNK (1u << 20) /* Comet's fixed chunk */

enum mode { BASE, COPY, SWAP, NMODES };
static const char *const mode_name[] = {"baseline", "copy", "swap"};

struct cfg {
	size_t sizes[MAX_SIZES];
	unsigned nsizes, rounds, batches, warm, record;
	bool json;
};

struct round {
	double ns, bytes, calls; /* per batch */
};

struct result {
	size_t payload;
	uint32_t nrec;
	struct round *r[NMODES];
	double med_ns[NMODES], min_ns[NMODES], max_ns[NMODES];
	double max_bytes[NMODES], med_bytes[NMODES], max_calls[NMODES];
};

static int failures;

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(PROG ": FAIL: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	failures++;
}

static _Noreturn void die(const char *what, int err)
{
	fprintf(stderr, PROG ": %s: %s (%s)\n", what, ush_last_error(),
		ush_err_name(err));
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, PROG ": out of memory\n");
		exit(1);
	}
	return p;
}

/* A batch of exactly len bytes: records of `record` bytes, the last one
 * shorter so that the batch ends at len. */
static uint8_t *make_batch(size_t len, unsigned record, uint32_t *nrec)
{
	uint8_t *b = xmalloc(len), *rec = xmalloc(record);
	for (unsigned i = 0; i < record; i++)
		rec[i] = (uint8_t)(i * 131u + 7u);
	size_t n = 0;
	uint32_t k = 0;
	while (len - n > USH_RECORD_HDR_SIZE) {
		size_t room = len - n - USH_RECORD_HDR_SIZE;
		n += ush_record_put(b + n, rec,
				    (uint32_t)(room < record ? room : record));
		k++;
	}
	/* len - n is 0..4 here; the sizes used are such that it is 0. */
	if (n != len) {
		fprintf(stderr, PROG ": %zu bytes cannot be filled with "
			"records exactly\n", len);
		exit(1);
	}
	free(rec);
	*nrec = k;
	return b;
}

/* One batch, the caller's way: see the header comment. */
static inline int write_one(ush_writer *w, enum mode m, uint32_t part,
			    const uint8_t *batch, size_t len, uint32_t nrec,
			    void **buf)
{
	switch (m) {
	case BASE: {
		uint8_t *chunk = calloc(1, CHUNK);
		if (!chunk)
			return -ENOMEM;
		memcpy(chunk, batch, len);
		int ret = ush_writer_copy(w, part, chunk, len, nrec);
		free(chunk);
		return ret;
	}
	case COPY:
		return ush_writer_copy(w, part, batch, len, nrec);
	case SWAP:
		memcpy(*buf, batch, len);
		return ush_writer_swap(w, part, buf, len, nrec);
	default:
		return -EINVAL;
	}
}

static void run_round(ush_ring *ring, const struct cfg *c, struct result *res,
		      enum mode m, const uint8_t *batch, struct round *out)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 2, .map = 0,
		.partitions = PARTITIONS, .target = USH_TARGET_NULL};
	ush_writer *w;
	int ret = ush_writer_open(&w, ring, &wo);
	if (ret)
		die("writer open", ret);
	void *buf = NULL;
	size_t cap;
	if (m == SWAP && (ret = ush_writer_acquire(w, &buf, &cap)))
		die("acquire", ret);
	size_t len = res->payload;
	uint64_t j = 0;
	for (; j < c->warm; j++)
		if ((ret = write_one(w, m, (uint32_t)(j % PARTITIONS), batch,
				     len, res->nrec, &buf)))
			die(mode_name[m], ret);
	struct heapcount h0, h1;
	heapcount_get(&h0);
	uint64_t t0 = now_ns();
	for (uint64_t end = j + c->batches; j < end; j++)
		if ((ret = write_one(w, m, (uint32_t)(j % PARTITIONS), batch,
				     len, res->nrec, &buf)))
			die(mode_name[m], ret);
	uint64_t t1 = now_ns();
	heapcount_get(&h1);
	if (buf && (ret = ush_writer_release(w, buf)))
		die("release", ret);
	if ((ret = ush_writer_commit(w, NULL)))
		die("commit", ret);
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	if (st.batches != j || st.raw_bytes != j * len ||
	    st.records != j * res->nrec || st.frame_bytes != j * ush_frame_size(len))
		fail("%zu B %s: wrote %llu batches of %zu bytes, stats say "
		     "%llu batches, %llu raw bytes, %llu records, %llu frame "
		     "bytes", len, mode_name[m], (unsigned long long)j, len,
		     (unsigned long long)st.batches,
		     (unsigned long long)st.raw_bytes,
		     (unsigned long long)st.records,
		     (unsigned long long)st.frame_bytes);
	ush_writer_free(w);
	if (out) {
		out->ns = (double)(t1 - t0) / c->batches;
		out->bytes = (double)(h1.bytes - h0.bytes) / c->batches;
		out->calls = (double)(h1.calls - h0.calls) / c->batches;
	}
}

static void summarize(const struct cfg *c, struct result *res, enum mode m)
{
	double *v = xmalloc(c->rounds * sizeof(*v));
	double *b = xmalloc(c->rounds * sizeof(*b));
	res->min_ns[m] = INFINITY;
	for (unsigned i = 0; i < c->rounds; i++) {
		const struct round *r = &res->r[m][i];
		v[i] = r->ns;
		b[i] = r->bytes;
		res->min_ns[m] = fmin(res->min_ns[m], r->ns);
		res->max_ns[m] = fmax(res->max_ns[m], r->ns);
		res->max_bytes[m] = fmax(res->max_bytes[m], r->bytes);
		res->max_calls[m] = fmax(res->max_calls[m], r->calls);
	}
	res->med_ns[m] = median(v, c->rounds);
	res->med_bytes[m] = median(b, c->rounds);
	free(v);
	free(b);
}

static void run_size(ush_ring *ring, const struct cfg *c, struct result *res)
{
	uint8_t *batch = make_batch(res->payload, c->record, &res->nrec);
	for (int m = 0; m < NMODES; m++)
		res->r[m] = xmalloc(c->rounds * sizeof(struct round));
	/* One discarded round of each, then baseline, copy, swap, ... */
	for (int m = 0; m < NMODES; m++)
		run_round(ring, c, res, (enum mode)m, batch, NULL);
	for (unsigned i = 0; i < c->rounds; i++)
		for (int m = 0; m < NMODES; m++)
			run_round(ring, c, res, (enum mode)m, batch,
				  &res->r[m][i]);
	for (int m = 0; m < NMODES; m++)
		summarize(c, res, (enum mode)m);
	if (res->max_bytes[COPY] || res->max_bytes[SWAP])
		fail("%zu B: steady state allocates: copy %.1f B/batch, swap "
		     "%.1f B/batch (worst round)", res->payload,
		     res->max_bytes[COPY], res->max_bytes[SWAP]);
	if (res->med_bytes[BASE] < CHUNK)
		fail("%zu B: the baseline's 1 MiB calloc was not counted "
		     "(%.0f B/batch): is malloc interposed?", res->payload,
		     res->med_bytes[BASE]);
	free(batch);
}

static void print_table(const struct cfg *c, const struct result *res)
{
	printf(PROG ": null target, codec none, %u rounds x %u batches per "
	       "mode (alternating), medians\n\n", c->rounds, c->batches);
	printf("%-9s | %14s %14s %14s | %11s %11s %11s | %7s %7s\n",
	       "payload", "base B/batch", "copy B/batch", "swap B/batch",
	       "base ns", "copy ns", "swap ns", "b/copy", "b/swap");
	for (unsigned i = 0; i < c->nsizes; i++) {
		const struct result *r = &res[i];
		printf("%-9zu | %14.0f %14.1f %14.1f | %11.0f %11.0f %11.0f | "
		       "%6.2fx %6.2fx\n", r->payload, r->med_bytes[BASE],
		       r->max_bytes[COPY], r->max_bytes[SWAP], r->med_ns[BASE],
		       r->med_ns[COPY], r->med_ns[SWAP],
		       r->med_ns[BASE] / r->med_ns[COPY],
		       r->med_ns[BASE] / r->med_ns[SWAP]);
	}
	printf("\nB/batch: heap bytes requested per batch (ushuffle modes: "
	       "worst round); ns: median time per batch.\n");
}

static json_object *jmode(const struct result *r, enum mode m)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "median_ns_per_batch",
			       json_object_new_double(r->med_ns[m]));
	json_object_object_add(o, "min_round_ns_per_batch",
			       json_object_new_double(r->min_ns[m]));
	json_object_object_add(o, "max_round_ns_per_batch",
			       json_object_new_double(r->max_ns[m]));
	json_object_object_add(o, "heap_bytes_per_batch_median",
			       json_object_new_double(r->med_bytes[m]));
	json_object_object_add(o, "heap_bytes_per_batch_max",
			       json_object_new_double(r->max_bytes[m]));
	json_object_object_add(o, "heap_calls_per_batch_max",
			       json_object_new_double(r->max_calls[m]));
	return o;
}

static void print_json(const struct cfg *c, const struct result *res)
{
	json_object *root = json_object_new_object();
	json_object_object_add(root, "bench", json_object_new_string("alloc"));
	json_object_object_add(root, "version",
			       json_object_new_string(USH_VERSION_STRING));
	json_object_object_add(root, "target", json_object_new_string("null"));
	json_object_object_add(root, "codec", json_object_new_string("none"));
	json_object_object_add(root, "rounds", json_object_new_int((int)c->rounds));
	json_object_object_add(root, "batches_per_round",
			       json_object_new_int((int)c->batches));
	json_object_object_add(root, "baseline_chunk_bytes",
			       json_object_new_int(CHUNK));
	json_object *arr = json_object_new_array();
	for (unsigned i = 0; i < c->nsizes; i++) {
		const struct result *r = &res[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "payload_bytes",
				       json_object_new_int64((int64_t)r->payload));
		json_object_object_add(o, "records_per_batch",
				       json_object_new_int64(r->nrec));
		for (int m = 0; m < NMODES; m++)
			json_object_object_add(o, mode_name[m],
					       jmode(r, (enum mode)m));
		json_object_object_add(o, "time_ratio_baseline_copy",
			json_object_new_double(r->med_ns[BASE] / r->med_ns[COPY]));
		json_object_object_add(o, "time_ratio_baseline_swap",
			json_object_new_double(r->med_ns[BASE] / r->med_ns[SWAP]));
		json_object_array_add(arr, o);
	}
	json_object_object_add(root, "results", arr);
	json_object_object_add(root, "checks_failed",
			       json_object_new_int(failures));
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
	json_object_put(root);
}

static void parse(int argc, char **argv, struct cfg *c)
{
	/* About 1.4, 4.4, 15 and 66 KiB, each a whole number of 104-byte
	 * records, the last one shorter. */
	*c = (struct cfg){.sizes = {1436, 4508, 15360, 67584}, .nsizes = 4,
			  .rounds = 11, .batches = 4096, .warm = 256,
			  .record = 100};
	struct bench_list sizes = {c->sizes, &c->nsizes, MAX_SIZES};
	static const struct bench_cmd cmd = {PROG, NULL,
		"Exit status: 0 ok, 1 a check failed, 2 a bad option."};
	const struct bench_opt opts[] = {
		{"sizes", "B[,B...]", "batch payload bytes (default "
		 "1436,4508,15360,67584)", BENCH_LIST, &sizes},
		{"rounds", "N", "measured rounds per mode (default 11)",
		 BENCH_COUNT, &c->rounds},
		{"batches", "N", "timed batches per round (default 4096)",
		 BENCH_COUNT, &c->batches},
		{"warmup", "N", "untimed batches opening each round "
		 "(default 256)", BENCH_UINT, &c->warm},
		{"record-size", "B", "record payload bytes (default 100)",
		 BENCH_COUNT, &c->record},
		{"json", NULL, "JSON report on stdout", BENCH_FLAG, &c->json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	for (unsigned i = 0; i < c->nsizes; i++)
		if (c->sizes[i] <= USH_RECORD_HDR_SIZE ||
		    c->sizes[i] > (128u << 10) - USH_FRAME_HDR_SIZE)
			bench_bad(PROG, "--sizes: %zu is not in %u..%u",
				  c->sizes[i], USH_RECORD_HDR_SIZE + 1,
				  (128u << 10) - USH_FRAME_HDR_SIZE);
}

int main(int argc, char **argv)
{
	struct cfg c;
	parse(argc, argv, &c);
	/* 128 KiB push buffers so that a 66 KiB batch is one batch; copy
	 * still takes the batch's own size class (4 KiB for 1.4 KiB). */
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = 128 << 10;
	ro.codec = USH_CODEC_NONE;
	ro.fixedbufs = 0; /* the null target does no I/O */
	ush_ring *ring;
	int ret = ush_ring_create(&ring, &ro);
	if (ret)
		die("ring create", ret);
	struct result res[MAX_SIZES] = {0};
	for (unsigned i = 0; i < c.nsizes; i++) {
		res[i].payload = c.sizes[i];
		run_size(ring, &c, &res[i]);
	}
	struct ush_ring_info info;
	ush_ring_info(ring, &info);
	if (info.pool_idle_bytes != info.pool_bytes)
		fail("%zu of %zu pool bytes not idle after the rounds",
		     info.pool_bytes - info.pool_idle_bytes, info.pool_bytes);
	ush_ring_free(ring);
	if (c.json)
		print_json(&c, res);
	else
		print_table(&c, res);
	for (unsigned i = 0; i < c.nsizes; i++)
		for (int m = 0; m < NMODES; m++)
			free(res[i].r[m]);
	if (failures)
		fprintf(stderr, PROG ": %d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
