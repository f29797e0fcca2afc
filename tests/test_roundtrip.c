/*
 * Round trip: 2 threads, each with its own ring, write 3 map tasks each (6
 * maps) of 1,000 partitions concurrently, with records from 0 bytes to
 * above the push size, for every codec, with and without O_DIRECT. Every
 * partition read back must hold exactly the multiset of records written:
 * none missing, none duplicated, none altered. And a reader read on
 * threads other than the one that opened it.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 2
#define MAPS_PER_THREAD 3
#define NMAPS (NTHREADS * MAPS_PER_THREAD)
#define NPARTS 1000
#define SHUFFLE 11
#define PUSH (64u << 10)
#define REC_MAX (100u << 10)

/* Sizes around every boundary: empty, tiny, a 4 KiB buffer filled to the
 * byte (4096 - 48 - 4), push_size - 52 (the largest record a push buffer
 * holds), one more (goes out alone), the push size and far above it. */
static const uint32_t special_lens[] = {
	0, 1, 2, 3, 4, 5, 7, 8, 100, 1000, 3000, 4044, 4045, 8192, 12345,
	PUSH - 53, PUSH - 52, PUSH - 51, PUSH - 48, PUSH, PUSH + 1, REC_MAX,
	0, 1,
};
#define NSPECIAL (sizeof(special_lens) / sizeof(special_lens[0]))

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t mixed_seed(uint32_t map, uint32_t part, uint32_t i)
{
	return mix((uint64_t)map << 48 ^ (uint64_t)part << 24 ^ i);
}

/* A few partitions, one map each, carry the boundary sizes. */
static int special(uint32_t map, uint32_t part)
{
	return part % 97 == 0 && map == part / 97 % NMAPS;
}

/* Ten heavy partitions fill whole push buffers; the rest hold 0..8
 * records, so some (map, partition) pairs are empty. */
static uint32_t rec_count(uint32_t map, uint32_t part)
{
	uint64_t h = mixed_seed(map, part, UINT32_MAX);
	uint32_t n = part % 100 == 42 ? 300 + (uint32_t)(h % 50)
				      : (uint32_t)(h % 9);
	return n + (special(map, part) ? (uint32_t)NSPECIAL : 0);
}

static uint32_t rec_len(uint32_t map, uint32_t part, uint32_t i)
{
	if (special(map, part) && i < NSPECIAL)
		return special_lens[i];
	uint64_t h = mixed_seed(map, part, i);
	if (part % 100 == 42)
		return (uint32_t)(h >> 8) % 1200;
	return h % 16 == 0 ? 200 + (uint32_t)(h >> 8) % 4000
			   : (uint32_t)(h >> 8) % 160;
}

/* Record bytes: three in four repeat a 24-byte pattern, so batches do
 * compress; the others are incompressible. */
static void rec_fill(uint8_t *buf, uint32_t len, uint64_t seed)
{
	if (seed % 4 == 0) {
		th_fill(buf, len, seed);
		return;
	}
	uint32_t pat = len < 24 ? len : 24;
	th_fill(buf, pat, seed);
	for (uint32_t k = pat; k < len; k++)
		buf[k] = buf[k - pat];
}

static uint64_t rec_hash(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t h = mix(len);
	size_t k = 0;
	for (; k + 8 <= len; k += 8) {
		uint64_t v;
		memcpy(&v, b + k, 8);
		h = (h ^ v) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	for (; k < len; k++)
		h = (h ^ b[k]) * 0x100000001b3ull;
	return mix(h);
}

struct job {
	int tid;
	enum ush_codec codec;
	int direct;
	const char *dir;
	struct ush_status *statuses; /* NMAPS, by map: copies, filled here */
	pthread_barrier_t *bar;
	int err;
	char msg[600];
	struct ush_writer_stats st;
};

static void job_fail(struct job *j, int err, const char *what)
{
	if (j->err)
		return;
	j->err = err ? err : -1;
	snprintf(j->msg, sizeof(j->msg), "thread %d: %s = %d (%s): %s", j->tid,
		 what, err, ush_err_name(err), ush_last_error());
}

static void *writer_thread(void *arg)
{
	struct job *j = arg;
	ush_ring *ring = NULL;
	ush_writer *w[MAPS_PER_THREAD] = {0};
	uint8_t *rec = malloc(REC_MAX);
	struct ush_part_stats *parts = calloc(NPARTS, sizeof(*parts));
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = PUSH;
	ro.codec = j->codec;
	int ret = rec && parts ? ush_ring_create(&ring, &ro) : -12;
	if (ret)
		job_fail(j, ret, "ush_ring_create");
	for (uint32_t k = 0; !j->err && k < MAPS_PER_THREAD; k++) {
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = SHUFFLE,
			.map = (uint32_t)j->tid * MAPS_PER_THREAD + k,
			.partitions = NPARTS, .target = USH_TARGET_DISK,
			.dir = j->dir, .direct = j->direct};
		ret = ush_writer_open(&w[k], ring, &wo);
		if (ret)
			job_fail(j, ret, "ush_writer_open");
	}
	/* Both threads write at the same time. */
	pthread_barrier_wait(j->bar);
	/* Round-robin over partitions and maps: every partition buffer of
	 * the three writers is open at once on one ring. */
	for (uint32_t r = 0, more = 1; !j->err && more; r++) {
		more = 0;
		for (uint32_t p = 0; !j->err && p < NPARTS; p++) {
			for (uint32_t k = 0; k < MAPS_PER_THREAD; k++) {
				uint32_t map = (uint32_t)j->tid *
						       MAPS_PER_THREAD + k;
				if (r >= rec_count(map, p))
					continue;
				more = 1;
				uint32_t len = rec_len(map, p, r);
				rec_fill(rec, len, mixed_seed(map, p, r));
				ret = ush_writer_write(w[k], p, rec, len);
				if (ret) {
					job_fail(j, ret, "ush_writer_write");
					break;
				}
			}
		}
	}
	for (uint32_t k = 0; !j->err && k < MAPS_PER_THREAD; k++) {
		uint32_t map = (uint32_t)j->tid * MAPS_PER_THREAD + k;
		ret = ush_writer_commit(w[k], parts);
		if (ret) {
			job_fail(j, ret, "ush_writer_commit");
			break;
		}
		/* The map status, copied out before the writer is freed (no
		 * cmocka assertion in this thread). */
		struct ush_status bst;
		ret = ush_writer_status(w[k], &bst);
		void *copy = ret ? NULL : malloc(bst.len);
		if (!copy) {
			job_fail(j, ret, "ush_writer_status");
			break;
		}
		memcpy(copy, bst.data, bst.len);
		j->statuses[map] = (struct ush_status){copy, bst.len};
		for (uint32_t p = 0; p < NPARTS; p++) {
			uint64_t bytes = 0, n = rec_count(map, p);
			for (uint32_t i = 0; i < n; i++)
				bytes += rec_len(map, p, i);
			if (parts[p].records != n || parts[p].bytes != bytes) {
				j->err = -1;
				snprintf(j->msg, sizeof(j->msg), "map %u part "
					 "%u: stats %llu records %llu bytes, "
					 "wrote %llu %llu", map, p,
					 (unsigned long long)parts[p].records,
					 (unsigned long long)parts[p].bytes,
					 (unsigned long long)n,
					 (unsigned long long)bytes);
				break;
			}
		}
		struct ush_writer_stats st;
		ush_writer_stats(w[k], &st);
		j->st.batches += st.batches;
		j->st.records += st.records;
		j->st.raw_bytes += st.raw_bytes;
		j->st.frame_bytes += st.frame_bytes;
		j->st.stored_raw += st.stored_raw;
	}
	for (uint32_t k = 0; k < MAPS_PER_THREAD; k++)
		ush_writer_free(w[k]);
	ush_ring_free(ring);
	free(parts);
	free(rec);
	return NULL;
}

struct want {
	uint64_t hash;
	uint32_t len, map, idx, used;
};

static int want_cmp(const void *a, const void *b)
{
	const struct want *x = a, *y = b;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->len < y->len ? -1 : x->len > y->len;
}

/* Reads partition back and matches every record against the written
 * multiset, byte for byte. Returns the record count. */
static uint64_t check_partition(const struct ush_status *statuses,
				uint32_t part, uint8_t *tmp, struct want *ws)
{
	size_t n = 0;
	for (uint32_t m = 0; m < NMAPS; m++) {
		uint32_t c = rec_count(m, part);
		for (uint32_t i = 0; i < c; i++) {
			uint32_t len = rec_len(m, part, i);
			rec_fill(tmp, len, mixed_seed(m, part, i));
			ws[n++] = (struct want){rec_hash(tmp, len), len, m, i,
						0};
		}
	}
	qsort(ws, n, sizeof(*ws), want_cmp);

	ush_reader *r;
	th_ok(th_reader_open(&r, statuses, NMAPS, part, 0));
	const void *rec;
	size_t len, got = 0;
	int ret;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		struct want key = {.hash = rec_hash(rec, len),
				   .len = (uint32_t)len};
		size_t lo = 0, hi = n;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (want_cmp(&ws[mid], &key) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		int found = 0;
		for (size_t k = lo; k < n && !want_cmp(&ws[k], &key); k++) {
			if (ws[k].used)
				continue;
			rec_fill(tmp, ws[k].len,
				 mixed_seed(ws[k].map, part, ws[k].idx));
			if (memcmp(tmp, rec, len))
				continue;
			ws[k].used = 1;
			found = 1;
			break;
		}
		if (!found)
			fail_msg("partition %u: record #%zu (%zu bytes) was "
				 "not written, or is returned twice", part, got,
				 len);
		got++;
	}
	if (ret)
		fail_msg("partition %u: ush_reader_next = %d: %s", part, ret,
			 ush_last_error());
	ush_reader_free(r);
	for (size_t k = 0; k < n; k++)
		if (!ws[k].used)
			fail_msg("partition %u: record %u of map %u (%u bytes) "
				 "missing", part, ws[k].idx, ws[k].map,
				 ws[k].len);
	assert_int_equal(got, n);
	return got;
}

static void roundtrip(enum ush_codec codec, int direct)
{
	const char *dir = th_scratch("roundtrip");
	pthread_barrier_t bar;
	pthread_t th[NTHREADS];
	struct job jobs[NTHREADS];
	struct ush_status statuses[NMAPS] = {{0}};
	assert_int_equal(pthread_barrier_init(&bar, NULL, NTHREADS), 0);
	for (int t = 0; t < NTHREADS; t++) {
		jobs[t] = (struct job){.tid = t, .codec = codec,
				       .direct = direct, .dir = dir,
				       .statuses = statuses, .bar = &bar};
		assert_int_equal(pthread_create(&th[t], NULL, writer_thread,
						&jobs[t]),
				 0);
	}
	for (int t = 0; t < NTHREADS; t++)
		assert_int_equal(pthread_join(th[t], NULL), 0);
	pthread_barrier_destroy(&bar);
	struct ush_writer_stats st = {0};
	for (int t = 0; t < NTHREADS; t++) {
		if (jobs[t].err)
			fail_msg("%s", jobs[t].msg);
		st.batches += jobs[t].st.batches;
		st.records += jobs[t].st.records;
		st.raw_bytes += jobs[t].st.raw_bytes;
		st.frame_bytes += jobs[t].st.frame_bytes;
		st.stored_raw += jobs[t].st.stored_raw;
	}
	/* The codec really ran: most batches shrank. Without one, every
	 * frame is header + raw batch. */
	if (codec == USH_CODEC_NONE) {
		assert_int_equal(st.frame_bytes, st.raw_bytes +
				 st.batches * USH_FRAME_HDR_SIZE);
	} else {
		assert_true(st.stored_raw < st.batches / 2);
		assert_true(st.frame_bytes < st.raw_bytes);
	}

	uint64_t nrec = 0, maxn = 0;
	for (uint32_t p = 0; p < NPARTS; p++) {
		uint64_t n = 0;
		for (uint32_t m = 0; m < NMAPS; m++)
			n += rec_count(m, p);
		maxn = n > maxn ? n : maxn;
	}
	uint8_t *tmp = malloc(REC_MAX);
	struct want *ws = malloc(maxn * sizeof(*ws));
	assert_non_null(tmp);
	assert_non_null(ws);
	for (uint32_t p = 0; p < NPARTS; p++)
		nrec += check_partition(statuses, p, tmp, ws);
	assert_int_equal(nrec, st.records);
	th_statuses_free(statuses, NMAPS);
	free(ws);
	free(tmp);
	th_rmrf(dir);
}

#define RT(name, codec, direct)                                              \
	static void name(void **state)                                       \
	{                                                                    \
		(void)state;                                                 \
		roundtrip(codec, direct);                                    \
	}
RT(none_buffered, USH_CODEC_NONE, 0)
RT(none_direct, USH_CODEC_NONE, 1)
RT(lz4_buffered, USH_CODEC_LZ4, 0)
RT(lz4_direct, USH_CODEC_LZ4, 1)
RT(zstd_buffered, USH_CODEC_ZSTD, 0)
RT(zstd_direct, USH_CODEC_ZSTD, 1)

/* --------------------------------------- a reader moves between threads */

#define HOP_RECS 2000
#define HOP_LEN 1000

struct hop {
	ush_reader *r;
	uint32_t part, next; /* records checked so far */
	int ret;
};

/* Partition 0's records compress (a pattern), partition 1's do not. */
static uint64_t hop_seed(uint32_t part, uint32_t i)
{
	return part ? mixed_seed(99, 1, i) : 0;
}

static void hop_fill(uint8_t *buf, uint32_t part, uint32_t i)
{
	if (part)
		th_fill(buf, HOP_LEN, hop_seed(part, i));
	else
		memset(buf, 'a' + (int)(i % 26), HOP_LEN);
}

/* Checks up to n more records of the hop's partition, in write order. */
static void *hop_read(void *arg)
{
	struct hop *h = arg;
	uint8_t want[HOP_LEN];
	const void *rec;
	size_t len;
	for (uint32_t end = h->next + HOP_RECS / 2; h->next < end; h->next++) {
		h->ret = ush_reader_next(h->r, &rec, &len);
		hop_fill(want, h->part, h->next);
		if (h->ret != 1 || len != HOP_LEN || memcmp(rec, want, len)) {
			h->ret = h->ret == 1 ? -1 : h->ret;
			break;
		}
		h->ret = 0;
	}
	return NULL;
}

/* A reader serves any thread, one at a time (ushuffle.h): opened here,
 * half read on a second thread with reads ahead still in flight, the
 * rest on a third, freed here; through its ring's io_uring from the
 * second frame on, or the sync engine where io_uring is refused. */
static void reader_moves_between_threads(void **state)
{
	(void)state;
	const char *dir = th_scratch("hop");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.codec = USH_CODEC_LZ4;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = SHUFFLE,
		.partitions = 2, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 1};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	uint8_t rec[HOP_LEN];
	for (uint32_t i = 0; i < HOP_RECS; i++)
		for (uint32_t p = 0; p < 2; p++) {
			hop_fill(rec, p, i);
			th_ok(ush_writer_write(w, p, rec, HOP_LEN));
		}
	struct ush_part_stats parts[2];
	struct ush_status st;
	th_ok(th_commit(w, parts, &st));
	ush_writer_free(w);
	ush_ring_free(ring);
	assert_true(parts[1].batches > 16); /* more than one window */
	for (uint32_t p = 0; p < 2; p++) {
		struct hop h = {.part = p};
		th_ok(th_reader_open(&h.r, &st, 1, p, 0));
		for (int k = 0; k < 2; k++) {
			pthread_t t;
			assert_int_equal(pthread_create(&t, NULL, hop_read, &h),
					 0);
			assert_int_equal(pthread_join(t, NULL), 0);
			if (h.ret)
				fail_msg("partition %u record %u: %d: %s", p,
					 h.next, h.ret, ush_last_error());
		}
		const void *end;
		size_t len;
		assert_int_equal(ush_reader_next(h.r, &end, &len), 0);
		ush_reader_free(h.r);
	}
	th_status_free(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(none_buffered, th_teardown),
		cmocka_unit_test_teardown(none_direct, th_teardown),
		cmocka_unit_test_teardown(lz4_buffered, th_teardown),
		cmocka_unit_test_teardown(lz4_direct, th_teardown),
		cmocka_unit_test_teardown(zstd_buffered, th_teardown),
		cmocka_unit_test_teardown(zstd_direct, th_teardown),
		cmocka_unit_test_teardown(reader_moves_between_threads,
					  th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
