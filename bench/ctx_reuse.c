/*
 * ush_bench_ctx_reuse: time per batch with a compression context reused
 * across batches against one created per batch (the Spark SPARK-3386
 * table), for 2 KiB and 64 KiB batches, calling lz4 and zstd directly the
 * way the library's codec.c does:
 *   lz4 compress     LZ4_compress_fast_extState() on one state, against a
 *                    state malloc'ed and freed around every batch;
 *   zstd compress    ZSTD_CCtx_reset(session) + ZSTD_compressCCtx() on one
 *                    CCtx, against ZSTD_createCCtx()/ZSTD_freeCCtx() per
 *                    batch (what ZSTD_compress() does inside);
 *   zstd decompress  ZSTD_decompressDCtx() on one DCtx, against a DCtx
 *                    created and freed per batch;
 *   lz4 decompress   LZ4_decompress_safe() has no context: one mode only,
 *                    listed for completeness;
 *   lz4 compress-stream  one mode only, what the library could do instead:
 *                    LZ4_resetStream_fast() + LZ4_compress_fast_continue()
 *                    on one LZ4_stream_t, an independent block per batch
 *                    without the full 16 KiB state wipe that extState does
 *                    on every call (the fastReset variant is not exported
 *                    by Debian's liblz4.so).
 * Rounds alternate reused, fresh, reused, ... after a discarded pair; the
 * figure is the median over rounds of (round time / batches). Batches
 * rotate over 16 different inputs so no call sees the previous one's data.
 *
 * Verification (the SPARK-7766 lesson): every input compressed with the
 * reused context, after all the others, must give exactly the bytes a fresh
 * context gives, and decompress to the input. Exit 1 if not.
 */
#define _GNU_SOURCE
#include <json-c/json.h>
#include <lz4.h>
#include <math.h>
#include <stdbool.h>
#include <zstd.h>

#include "heapcount.h"
#include "util.h"

#define PROG "ush_bench_ctx_reuse"
#define MAX_SIZES 8
#define NVAR 16

enum op { LZ4_C, ZSTD_C, ZSTD_D, LZ4_D, LZ4_S, NOPS };
static const char *const op_codec[] = {"lz4", "zstd", "zstd", "lz4", "lz4"};
static const char *const op_dir[] = {"compress", "compress", "decompress",
				     "decompress", "compress-stream"};
enum mode { REUSED, FRESH };
static const char *const mode_name[] = {"reused", "fresh"};

struct cfg {
	size_t sizes[MAX_SIZES];
	unsigned nsizes, rounds;
	size_t round_bytes;
	int level;
	bool json;
};

/* Inputs and their compressed forms for one batch size. */
struct data {
	size_t size, cap;
	uint8_t *raw[NVAR], *lz4[NVAR], *zstd[NVAR], *out;
	size_t lz4_len[NVAR], zstd_len[NVAR];
};

struct ctx {
	void *lz4_state;
	LZ4_stream_t *lz4_stream;
	ZSTD_CCtx *zc;
	ZSTD_DCtx *zd;
	int level;
};

struct figures {
	double med_ns, min_ns, max_ns, heap_bytes, heap_calls;
};

struct result {
	enum op op;
	size_t size, stored; /* batch bytes, mean compressed bytes */
	struct figures s[2];
	bool single; /* LZ4_D: no fresh mode */
};

static int failures;

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, PROG ": out of memory\n");
		exit(1);
	}
	return p;
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
 * Records of 40..200 bytes, each a 4-byte length then half words from a
 * small vocabulary (compressible, like keys and column values) and half
 * random bytes (like ids and measures): lz4 and zstd:1 shrink it to
 * roughly 55-65 %, a realistic middle rather than all-zero or all-noise.
 */
static void gen_batch(uint8_t *b, size_t len, uint64_t seed)
{
	static const char *const words[] = {
		"customer", "order", "lineitem", "2024-01-", "shipped", "AIR",
		"RAIL", "TRUCK", "returned", "N", "R", "A", "urgent", "Europe",
		"Asia", "total_price", "0000", "supplier#", "part#", "quantity"};
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t n = 0;
	while (n < len) {
		size_t rec = 40 + rng(&s) % 161;
		if (n + 4 + rec > len)
			rec = len - n > 4 ? len - n - 4 : 0;
		if (n + 4 > len) { /* no room for a prefix: pad */
			memset(b + n, 0, len - n);
			break;
		}
		uint32_t l = (uint32_t)rec;
		memcpy(b + n, &l, 4);
		n += 4;
		size_t end = n + rec, half = n + rec / 2;
		while (n < half) {
			const char *w = words[rng(&s) % 20];
			size_t wl = strlen(w);
			if (wl > half - n)
				wl = half - n;
			memcpy(b + n, w, wl);
			n += wl;
		}
		while (n < end)
			b[n++] = (uint8_t)rng(&s);
	}
}

static void ctx_init(struct ctx *x, int level)
{
	x->lz4_state = xmalloc((size_t)LZ4_sizeofState());
	x->lz4_stream = LZ4_createStream();
	x->zc = ZSTD_createCCtx();
	x->zd = ZSTD_createDCtx();
	x->level = level;
	if (!x->zc || !x->zd) {
		fprintf(stderr, PROG ": cannot create zstd contexts\n");
		exit(1);
	}
}

static void ctx_free(struct ctx *x)
{
	free(x->lz4_state);
	LZ4_freeStream(x->lz4_stream);
	ZSTD_freeCCtx(x->zc);
	ZSTD_freeDCtx(x->zd);
}

/* One batch: returns the output length, or 0 on a codec error. */
static size_t do_op(struct ctx *x, enum op op, enum mode m,
		    const struct data *d, unsigned v, uint8_t *out)
{
	switch (op) {
	case LZ4_C: {
		void *st = m == REUSED ? x->lz4_state
				       : malloc((size_t)LZ4_sizeofState());
		int r = st ? LZ4_compress_fast_extState(st, (const char *)d->raw[v],
						     (char *)out, (int)d->size,
						     (int)d->cap, 1)
			   : 0;
		if (m == FRESH)
			free(st);
		return r > 0 ? (size_t)r : 0;
	}
	case ZSTD_C: {
		ZSTD_CCtx *zc = m == REUSED ? x->zc : ZSTD_createCCtx();
		size_t r = 0;
		if (zc) {
			if (m == REUSED)
				ZSTD_CCtx_reset(zc, ZSTD_reset_session_only);
			r = ZSTD_compressCCtx(zc, out, d->cap, d->raw[v],
					      d->size, x->level);
		}
		if (m == FRESH)
			ZSTD_freeCCtx(zc);
		return zc && !ZSTD_isError(r) ? r : 0;
	}
	case ZSTD_D: {
		ZSTD_DCtx *zd = m == REUSED ? x->zd : ZSTD_createDCtx();
		size_t r = 0;
		if (zd) {
			if (m == REUSED)
				ZSTD_DCtx_reset(zd, ZSTD_reset_session_only);
			r = ZSTD_decompressDCtx(zd, out, d->size, d->zstd[v],
						d->zstd_len[v]);
		}
		if (m == FRESH)
			ZSTD_freeDCtx(zd);
		return zd && !ZSTD_isError(r) ? r : 0;
	}
	case LZ4_S: {
		LZ4_resetStream_fast(x->lz4_stream);
		int r = LZ4_compress_fast_continue(x->lz4_stream,
						   (const char *)d->raw[v],
						   (char *)out, (int)d->size,
						   (int)d->cap, 1);
		return r > 0 ? (size_t)r : 0;
	}
	case LZ4_D: {
		int r = LZ4_decompress_safe((const char *)d->lz4[v],
					    (char *)out, (int)d->lz4_len[v],
					    (int)d->size);
		return r > 0 ? (size_t)r : 0;
	}
	default:
		return 0;
	}
}

static size_t expect_len(enum op op, const struct data *d, unsigned v)
{
	switch (op) {
	case LZ4_C:
		return d->lz4_len[v];
	case LZ4_S: /* valid, independent, but not byte-identical */
		return 0;
	case ZSTD_C:
		return d->zstd_len[v];
	default:
		return d->size;
	}
}

static void make_data(struct data *d, size_t size, int level, unsigned idx)
{
	d->size = size;
	d->cap = (size_t)LZ4_compressBound((int)size);
	if (ZSTD_compressBound(size) > d->cap)
		d->cap = ZSTD_compressBound(size);
	d->out = xmalloc(d->cap);
	for (unsigned v = 0; v < NVAR; v++) {
		d->raw[v] = xmalloc(size);
		d->lz4[v] = xmalloc(d->cap);
		d->zstd[v] = xmalloc(d->cap);
		gen_batch(d->raw[v], size, (uint64_t)idx * NVAR + v + 1);
		/* The reference outputs come from fresh contexts. */
		d->lz4_len[v] = (size_t)LZ4_compress_default(
			(const char *)d->raw[v], (char *)d->lz4[v], (int)size,
			(int)d->cap);
		d->zstd_len[v] = ZSTD_compress(d->zstd[v], d->cap, d->raw[v],
					       size, level);
		if (!d->lz4_len[v] || ZSTD_isError(d->zstd_len[v])) {
			fprintf(stderr, PROG ": reference compression failed\n");
			exit(1);
		}
	}
}

static void free_data(struct data *d)
{
	for (unsigned v = 0; v < NVAR; v++) {
		free(d->raw[v]);
		free(d->lz4[v]);
		free(d->zstd[v]);
	}
	free(d->out);
}

/*
 * Reused contexts, having just worked on other inputs, must produce what
 * fresh ones produce, and decompression must restore the input.
 */
static void verify(struct ctx *x, const struct data *d)
{
	for (unsigned v = 0; v < NVAR; v++) {
		unsigned w = (v * 7 + 3) % NVAR; /* a different order */
		size_t n = do_op(x, LZ4_C, REUSED, d, w, d->out);
		if (n != d->lz4_len[w] || memcmp(d->out, d->lz4[w], n)) {
			fprintf(stderr, PROG ": FAIL: %zu B input %u: reused "
				"LZ4 state output differs from a fresh one\n",
				d->size, w);
			failures++;
		}
		/* A reset stream may pick other matches (stale table
		 * entries are skipped, not wiped) but its block must decode
		 * alone, with no dictionary. */
		n = do_op(x, LZ4_S, REUSED, d, w, d->out);
		uint8_t *back = xmalloc(d->size);
		if (!n || LZ4_decompress_safe((const char *)d->out,
					      (char *)back, (int)n,
					      (int)d->size) != (int)d->size ||
		    memcmp(back, d->raw[w], d->size)) {
			fprintf(stderr, PROG ": FAIL: %zu B input %u: reset "
				"LZ4 stream block does not decode alone\n",
				d->size, w);
			failures++;
		}
		free(back);
		n = do_op(x, ZSTD_C, REUSED, d, w, d->out);
		if (n != d->zstd_len[w] || memcmp(d->out, d->zstd[w], n)) {
			fprintf(stderr, PROG ": FAIL: %zu B input %u: reused "
				"ZSTD_CCtx output differs from a fresh one\n",
				d->size, w);
			failures++;
		}
		for (enum op op = ZSTD_D; op <= LZ4_D; op++) {
			n = do_op(x, op, REUSED, d, w, d->out);
			if (n != d->size || memcmp(d->out, d->raw[w], n)) {
				fprintf(stderr, PROG ": FAIL: %zu B input %u: "
					"%s does not restore the input\n",
					d->size, w, op_codec[op]);
				failures++;
			}
		}
	}
}

struct round {
	double ns, bytes, calls;
};

static void run_round(struct ctx *x, enum op op, enum mode m,
		      const struct data *d, unsigned batches, struct round *out)
{
	struct heapcount h0, h1;
	heapcount_get(&h0);
	uint64_t t0 = now_ns();
	for (unsigned i = 0; i < batches; i++) {
		unsigned v = i % NVAR;
		size_t n = do_op(x, op, m, d, v, d->out);
		size_t want = expect_len(op, d, v);
		if (want ? n != want : !n) {
			fprintf(stderr, PROG ": FAIL: %s %s %s %zu B: got %zu "
				"bytes, expected %zu\n", op_codec[op],
				op_dir[op], mode_name[m], d->size, n,
				expect_len(op, d, v));
			exit(1);
		}
	}
	uint64_t t1 = now_ns();
	heapcount_get(&h1);
	if (out) {
		out->ns = (double)(t1 - t0) / batches;
		out->bytes = (double)(h1.bytes - h0.bytes) / batches;
		out->calls = (double)(h1.calls - h0.calls) / batches;
	}
}

static void measure(const struct cfg *c, struct ctx *x, const struct data *d,
		    struct result *res)
{
	unsigned batches = (unsigned)(c->round_bytes / d->size);
	if (batches < 2 * NVAR)
		batches = 2 * NVAR;
	int nm = res->single ? 1 : 2;
	struct round *r = xmalloc(2 * c->rounds * sizeof(*r));
	double *v = xmalloc(c->rounds * sizeof(*v));
	for (int m = 0; m < nm; m++)
		run_round(x, res->op, (enum mode)m, d, batches, NULL);
	for (unsigned i = 0; i < c->rounds; i++)
		for (int m = 0; m < nm; m++)
			run_round(x, res->op, (enum mode)m, d, batches,
				  &r[2 * i + m]);
	for (int m = 0; m < nm; m++) {
		struct figures *s = &res->s[m];
		s->min_ns = INFINITY;
		for (unsigned i = 0; i < c->rounds; i++) {
			const struct round *q = &r[2 * i + m];
			v[i] = q->ns;
			s->min_ns = fmin(s->min_ns, q->ns);
			s->max_ns = fmax(s->max_ns, q->ns);
			s->heap_bytes = fmax(s->heap_bytes, q->bytes);
			s->heap_calls = fmax(s->heap_calls, q->calls);
		}
		s->med_ns = median(v, c->rounds);
	}
	free(r);
	free(v);
}

static json_object *jstat(const struct figures *s)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "median_ns_per_batch",
			       json_object_new_double(s->med_ns));
	json_object_object_add(o, "min_round_ns_per_batch",
			       json_object_new_double(s->min_ns));
	json_object_object_add(o, "max_round_ns_per_batch",
			       json_object_new_double(s->max_ns));
	json_object_object_add(o, "heap_bytes_per_batch",
			       json_object_new_double(s->heap_bytes));
	json_object_object_add(o, "heap_calls_per_batch",
			       json_object_new_double(s->heap_calls));
	return o;
}

static void print_json(const struct cfg *c, const struct result *res,
		       unsigned n)
{
	json_object *root = json_object_new_object();
	json_object_object_add(root, "bench", json_object_new_string("ctx_reuse"));
	json_object_object_add(root, "lz4_version",
			       json_object_new_string(LZ4_versionString()));
	json_object_object_add(root, "zstd_version",
			       json_object_new_string(ZSTD_versionString()));
	json_object_object_add(root, "zstd_level", json_object_new_int(c->level));
	json_object_object_add(root, "rounds", json_object_new_int((int)c->rounds));
	json_object *arr = json_object_new_array();
	for (unsigned i = 0; i < n; i++) {
		const struct result *r = &res[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "codec",
				       json_object_new_string(op_codec[r->op]));
		json_object_object_add(o, "op",
				       json_object_new_string(op_dir[r->op]));
		json_object_object_add(o, "batch_bytes",
				       json_object_new_int64((int64_t)r->size));
		json_object_object_add(o, "compressed_bytes_mean",
				       json_object_new_int64((int64_t)r->stored));
		json_object_object_add(o, "reused", jstat(&r->s[REUSED]));
		if (r->single) {
			json_object_object_add(o, "note", json_object_new_string(
				r->op == LZ4_D ? "LZ4_decompress_safe takes no context"
					       : "LZ4_resetStream_fast + "
						 "LZ4_compress_fast_continue"));
		} else {
			json_object_object_add(o, "fresh", jstat(&r->s[FRESH]));
			json_object_object_add(o, "ratio_fresh_reused",
				json_object_new_double(r->s[FRESH].med_ns /
						       r->s[REUSED].med_ns));
		}
		json_object_array_add(arr, o);
	}
	json_object_object_add(root, "results", arr);
	json_object_object_add(root, "checks_failed",
			       json_object_new_int(failures));
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
	json_object_put(root);
}

static void print_table(const struct cfg *c, const struct result *res,
			unsigned n)
{
	printf(PROG ": lz4 %s, zstd %s level %d; %u alternating rounds, "
	       "medians\n\n", LZ4_versionString(), ZSTD_versionString(),
	       c->level, c->rounds);
	printf("%-5s %-15s %7s | %11s %11s %7s | %12s %12s\n", "codec", "op",
	       "batch", "reused ns", "fresh ns", "ratio", "reused B/b",
	       "fresh B/b");
	for (unsigned i = 0; i < n; i++) {
		const struct result *r = &res[i];
		printf("%-5s %-15s %7zu | %11.0f", op_codec[r->op],
		       op_dir[r->op], r->size, r->s[REUSED].med_ns);
		if (r->single)
			printf(" %11s %7s | %12.0f %12s\n", "-", "-",
			       r->s[REUSED].heap_bytes, "-");
		else
			printf(" %11.0f %6.2fx | %12.0f %12.0f\n",
			       r->s[FRESH].med_ns,
			       r->s[FRESH].med_ns / r->s[REUSED].med_ns,
			       r->s[REUSED].heap_bytes, r->s[FRESH].heap_bytes);
	}
	printf("\nratio: fresh / reused time per batch; B/b: heap bytes "
	       "allocated per batch (worst round).\n");
}

static void parse(int argc, char **argv, struct cfg *c)
{
	*c = (struct cfg){.sizes = {2048, 65536}, .nsizes = 2, .rounds = 11,
			  .level = 1};
	size_t round_kib = 8192;
	struct bench_list sizes = {c->sizes, &c->nsizes, MAX_SIZES};
	static const struct bench_cmd cmd = {PROG, NULL,
		"Exit status: 0 ok, 1 a check failed, 2 a bad option."};
	const struct bench_opt opts[] = {
		{"sizes", "B[,B...]", "batch bytes (default 2048,65536)",
		 BENCH_LIST, &sizes},
		{"rounds", "N", "rounds per mode (default 11)", BENCH_COUNT,
		 &c->rounds},
		{"round-kib", "N", "input KiB per round (default 8192)",
		 BENCH_SIZE, &round_kib},
		{"level", "N", "zstd level (default 1, as --codec=zstd:1)",
		 BENCH_INT, &c->level},
		{"json", NULL, "JSON report on stdout", BENCH_FLAG, &c->json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	c->round_bytes = round_kib << 10;
	for (unsigned i = 0; i < c->nsizes; i++)
		if (c->sizes[i] < 64 || c->sizes[i] > (64u << 20))
			bench_bad(PROG, "--sizes: %zu is not in 64 B .. 64 MiB",
				  c->sizes[i]);
}

int main(int argc, char **argv)
{
	struct cfg c;
	parse(argc, argv, &c);
	struct ctx x;
	ctx_init(&x, c.level);
	struct result res[MAX_SIZES * NOPS] = {0};
	unsigned n = 0;
	for (unsigned i = 0; i < c.nsizes; i++) {
		struct data d;
		make_data(&d, c.sizes[i], c.level, i);
		verify(&x, &d);
		for (enum op op = 0; op < NOPS; op++) {
			struct result *r = &res[n++];
			r->op = op;
			r->size = d.size;
			r->single = op == LZ4_D || op == LZ4_S;
			size_t sum = 0;
			for (unsigned v = 0; v < NVAR; v++)
				sum += op == ZSTD_C || op == ZSTD_D
					       ? d.zstd_len[v]
					       : d.lz4_len[v];
			r->stored = sum / NVAR;
			measure(&c, &x, &d, r);
		}
		verify(&x, &d); /* again, after thousands of reuses */
		free_data(&d);
	}
	ctx_free(&x);
	if (c.json)
		print_json(&c, res, n);
	else
		print_table(&c, res, n);
	if (failures)
		fprintf(stderr, PROG ": %d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
