/*
 * Map statuses and the library's commit contract on the disk target (issue
 * 9): the status format (at 10,000 partitions, and every corrupted byte
 * refused), a reader that reads exactly the attempts its statuses name and
 * checks each map's batches against them, a committed attempt that a
 * second writer cannot touch, sticky fdatasync errors, and a reader that
 * fails at open for what it cannot read.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/spill.h"
#include "core/status.h"
#include "write/writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHUFFLE 9
#define PARTS 16

/* Record i of (map, attempt), for partition p: 16 bytes naming it, then
 * filler. */
static size_t make_rec(uint8_t *b, uint32_t map, uint32_t attempt,
		       uint32_t i, uint32_t p)
{
	size_t len = 16 + i % 61;
	uint32_t h[4] = {map, attempt, i, p};
	memcpy(b, h, sizeof(h));
	th_fill(b + 16, len - 16, (uint64_t)map << 40 | (uint64_t)attempt << 32 | i);
	return len;
}

static ush_ring *ring_sized(size_t pool)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = pool;
	ush_ring *r;
	th_ok(ush_ring_create(&r, &ro));
	return r;
}

static ush_ring *ring_new(void)
{
	return ring_sized(4u << 20);
}

static struct ush_writer_opts wopts(const char *dir, uint32_t map,
				    uint32_t attempt, uint32_t parts)
{
	return (struct ush_writer_opts){.size = sizeof(struct ush_writer_opts),
		.shuffle = SHUFFLE, .map = map, .attempt = attempt,
		.partitions = parts, .target = USH_TARGET_DISK, .dir = dir};
}

/* Writes n records of (map, attempt) over parts partitions, commits and
 * returns a heap copy of the status. */
static struct ush_status put_map(ush_ring *ring, const char *dir,
				 uint32_t map, uint32_t attempt,
				 uint32_t parts, uint32_t n)
{
	struct ush_writer_opts o = wopts(dir, map, attempt, parts);
	ush_writer *w;
	uint8_t rec[128];
	th_ok(ush_writer_open(&w, ring, &o));
	for (uint32_t i = 0; i < n; i++)
		th_ok(ush_writer_write(w, i % parts, rec,
				       make_rec(rec, map, attempt, i,
							i % parts)));
	struct ush_status st;
	th_ok(ush_writer_commit(w, NULL));
	th_ok(ush_writer_status(w, &st));
	void *copy = malloc(st.len);
	memcpy(copy, st.data, st.len);
	ush_writer_free(w);
	return (struct ush_status){copy, st.len};
}

static int open_reader(ush_reader **r, const struct ush_status *st,
		       uint32_t n, uint32_t partition)
{
	struct ush_reader_opts o = {.size = sizeof(o), .partition = partition,
				    .statuses = st, .nstatuses = n};
	return ush_reader_open(r, &o);
}

/* Reads partition over the statuses; every record must be one of the
 * attempt its status names, intact. Returns the reader's final result
 * and the records in *count. */
static int read_part(const struct ush_status *st, uint32_t n,
		     uint32_t partition, uint64_t *count)
{
	ush_reader *r;
	*count = 0;
	int ret = open_reader(&r, st, n, partition);
	if (ret)
		return ret;
	const void *rec;
	size_t len;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		uint32_t h[4];
		uint8_t want[128];
		assert_true(len >= 16);
		memcpy(h, rec, sizeof(h));
		bool named = false;
		for (uint32_t k = 0; k < n; k++) {
			struct ush_status_info info;
			th_ok(ush_status_info(&st[k], &info));
			named |= info.map == h[0] && info.attempt == h[1];
		}
		assert_true(named);
		assert_int_equal(h[3], partition);
		assert_int_equal(make_rec(want, h[0], h[1], h[2], partition),
				 len);
		assert_memory_equal(want, rec, len);
		(*count)++;
	}
	ush_reader_free(r);
	return ret;
}

static void free_status(struct ush_status *st)
{
	free((void *)st->data);
	st->data = NULL;
}

/* ------------------------------------------------------------- format */

/* A status at 10,000 partitions: its size (docs/format.md quotes it),
 * every partition's count read back, and the reader at both ends. */
static void status_at_10k_partitions(void **state)
{
	(void)state;
	const char *dir = th_scratch("status10k");
	ush_ring *ring = ring_sized(64u << 20); /* a 4 KiB batch each */
	struct ush_status st = put_map(ring, dir, 0, 0, 10000, 30000);
	struct ush_status_info info;
	th_ok(ush_status_info(&st, &info));
	assert_int_equal(info.shuffle, SHUFFLE);
	assert_int_equal(info.partitions, 10000);
	assert_int_equal(info.target, USH_TARGET_DISK);
	char abs[4096];
	assert_non_null(realpath(dir, abs));
	assert_int_equal(info.location_len, strlen(abs));
	assert_int_equal(info.batches, 10000); /* 3 small records each */
	print_message("map status at 10,000 partitions, one batch each: "
		      "%zu bytes (%.2f per partition)\n", st.len,
		      (double)st.len / 10000);
	/* Header + application ("default") + location + 157 blocks x 8 +
	 * one count and checksum per partition: nothing else. */
	assert_int_equal(st.len, 36 + 7 + strlen(abs) + 157 * 8 + 10000 * 5);
	struct status s;
	const char *why;
	th_ok(status_parse(st.data, st.len, &s, &why));
	for (uint32_t p = 0; p < 10000; p++) {
		uint64_t b;
		uint32_t sum;
		th_ok(status_part(&s, p, &b, &sum, NULL, &why));
		assert_int_equal(b, 1);
	}
	uint64_t n;
	th_ok(read_part(&st, 1, 0, &n));
	assert_int_equal(n, 3);
	th_ok(read_part(&st, 1, 9999, &n));
	assert_int_equal(n, 3);
	free_status(&st);
	ush_ring_free(ring);
}

/* Every flipped bit and every truncation of a status is refused, by the
 * info call (which walks every block) and by a reader. */
static void status_corruption_refused(void **state)
{
	(void)state;
	const char *dir = th_scratch("statusbad");
	ush_ring *ring = ring_new();
	struct ush_status st = put_map(ring, dir, 0, 0, 200, 1000);
	uint8_t *b = malloc(st.len);
	struct ush_status bad = {b, st.len};
	struct ush_status_info info;
	for (size_t i = 0; i < st.len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			memcpy(b, st.data, st.len);
			b[i] ^= (uint8_t)(1u << bit);
			int ret = ush_status_info(&bad, &info);
			if (ret != USH_ECORRUPT && ret != USH_EVERSION)
				fail_msg("byte %zu bit %d: %d", i, bit, ret);
		}
	}
	for (size_t n = 0; n < st.len; n++) {
		bad.len = n;
		memcpy(b, st.data, st.len);
		assert_int_equal(ush_status_info(&bad, &info), USH_ECORRUPT);
	}
	/* A reader refuses a corrupt status at open, naming it. */
	memcpy(b, st.data, st.len);
	b[st.len - 1] ^= 1; /* the last block */
	bad.len = st.len;
	ush_reader *r;
	struct ush_status two[2] = {st, bad};
	assert_int_equal(open_reader(&r, two, 2, 199), USH_ECORRUPT);
	assert_non_null(strstr(ush_last_error(), "map status 1"));
	assert_null(r);
	free(b);
	free_status(&st);
	ush_ring_free(ring);
}

static void entry_of(const void *arg, uint32_t p, uint64_t *batches,
		     uint32_t *sum)
{
	const char *why;
	th_ok(status_part(arg, p, batches, sum, NULL, &why));
}

/* s2, built from s, reads s's batches and sums at every step-th
 * partition; one with batches is held by s's holder mask (none without
 * masks), one without by none. */
static void same_parts(const struct status *s2, const struct status *s,
		       uint32_t step)
{
	const char *why;
	for (uint32_t p = 0; p < s->partitions; p += step) {
		uint64_t n, mask, n1;
		uint32_t sum, sum1;
		th_ok(status_part(s2, p, &n, &sum, &mask, &why));
		th_ok(status_part(s, p, &n1, &sum1, NULL, &why));
		assert_int_equal(n, n1);
		assert_int_equal(sum, sum1);
		assert_int_equal(mask, s->holders && n ? s->holders[p] : 0);
	}
}

/* Version 3 (sealed): key id and salt after the location, under the
 * header CRC, with or without holder masks; its flags byte must say
 * sealed, and earlier versions keep it zero. */
static void status_version_3(void **state)
{
	(void)state;
	const char *dir = th_scratch("statusv3");
	ush_ring *ring = ring_new();
	struct ush_status v1 = put_map(ring, dir, 0, 0, 70, 1000);
	struct status s, s2;
	const char *why = "";
	th_ok(status_parse(v1.data, v1.len, &s, &why));
	static const uint8_t salt[16] = "0123456789abcdef";
	uint64_t h[70];
	for (uint32_t p = 0; p < 70; p++)
		h[p] = 1;
	for (int masks = 0; masks < 2; masks++) {
		s.sealed = true;
		s.seal_id = 0xfeedbeefu;
		s.salt = salt;
		s.holders = masks ? h : NULL;
		uint8_t *b;
		size_t len;
		th_ok(status_build(&b, &len, &s, entry_of, &s));
		th_ok(status_parse(b, len, &s2, &why));
		assert_int_equal(s2.version, 3);
		assert_true(s2.sealed);
		assert_int_equal(s2.masks, masks);
		assert_int_equal(s2.seal_id, 0xfeedbeefu);
		assert_memory_equal(s2.salt, salt, 16);
		same_parts(&s2, &s, 23);
		b[29] &= (uint8_t)~0x02u; /* not sealed: no version 3 */
		assert_int_equal(status_parse(b, len, &s2, &why),
				 USH_ECORRUPT);
		b[29] |= 0x06u; /* an unknown flag */
		assert_int_equal(status_parse(b, len, &s2, &why),
				 USH_ECORRUPT);
		free(b);
	}
	uint8_t *c = malloc(v1.len);
	memcpy(c, v1.data, v1.len);
	c[29] = 0x02; /* flags before version 3 */
	assert_int_equal(status_parse(c, v1.len, &s2, &why), USH_ECORRUPT);
	assert_non_null(strstr(why, "reserved"));
	free(c);
	th_status_free(&v1);
	ush_ring_free(ring);
}

/* Version 2 (replicas): each partition with batches names its holders;
 * version 1 stays readable; another version is refused, saying which it
 * reads; a partition with batches and no holder is corrupt. */
static void status_version_2(void **state)
{
	(void)state;
	const char *dir = th_scratch("statusv2");
	ush_ring *ring = ring_new();
	struct ush_status v1 = put_map(ring, dir, 0, 0, 70, 1000);
	struct status s, s2;
	const char *why = "";
	th_ok(status_parse(v1.data, v1.len, &s, &why));
	assert_int_equal(s.version, 1);
	uint64_t h[70];
	for (uint32_t p = 0; p < 70; p++)
		h[p] = p % 3 ? 5 : 1ull << 63;
	s.holders = h;
	uint8_t *b;
	size_t len;
	th_ok(status_build(&b, &len, &s, entry_of, &s));
	th_ok(status_parse(b, len, &s2, &why));
	assert_int_equal(s2.version, 2);
	same_parts(&s2, &s, 1);
	struct ush_status v2 = {b, len};
	struct ush_status_info info;
	th_ok(ush_status_info(&v2, &info));
	assert_int_equal(info.partitions, 70);
	b[4] = 4;
	assert_int_equal(ush_status_info(&v2, &info), USH_EVERSION);
	assert_non_null(strstr(ush_last_error(), "reads 1 to 3"));
	free(b);
	h[1] = 0; /* partition 1 has batches (1000 records over 70) */
	th_ok(status_build(&b, &len, &s, entry_of, &s));
	v2 = (struct ush_status){b, len};
	assert_int_equal(ush_status_info(&v2, &info), USH_ECORRUPT);
	assert_non_null(strstr(ush_last_error(), "held by no worker"));
	free(b);
	free_status(&v1);
	ush_ring_free(ring);
}

/* Holder masks a reader refuses at open (docs/format.md §5.2), before it
 * dials anyone: a worker beyond the list, more than 3 holders, and any
 * mask over more than 64 workers (a mask names at most 64, and a writer
 * with replicas takes at most 64) -- whichever worker is the partition's
 * first, instead of shifting the mask past 63 bits. */
static void status_v2_bad_holders(void **state)
{
	(void)state;
	const char *dir = th_scratch("statusv2w");
	ush_ring *ring = ring_new();
	struct ush_status v1 = put_map(ring, dir, 0, 0, 70, 1000);
	static const struct {
		unsigned workers;
		uint64_t mask;
		const char *want;
	} cases[] = {
		{70, 1, "holder mask 1 or worker list"},
		{3, 1 | 1u << 5, "holder mask 21 or worker list"},
		{5, 0xf, "holder mask f or worker list"},
	};
	for (unsigned c = 0; c < 3; c++) {
		struct status s;
		const char *why = "";
		th_ok(status_parse(v1.data, v1.len, &s, &why));
		char list[2048];
		int len = 0;
		for (unsigned i = 0; i < cases[c].workers; i++)
			len += snprintf(list + len, sizeof(list) - (size_t)len,
					"%s127.0.0.1:%u", i ? "," : "", i + 1);
		uint64_t h[70];
		for (uint32_t p = 0; p < 70; p++)
			h[p] = cases[c].mask;
		s.target = USH_TARGET_NET;
		s.loc = list;
		s.loc_len = (uint32_t)len;
		s.holders = h;
		uint8_t *b;
		size_t blen;
		th_ok(status_build(&b, &blen, &s, entry_of, &s));
		struct ush_status v2 = {b, blen};
		/* A partition with batches; over 70 workers, one whose
		 * first worker is past the 64th. */
		uint32_t p = 0, sum;
		uint64_t n = 0;
		while (p < 70 && ((cases[c].workers > 64 &&
				   ush_net_worker_of(p, 70) < 64) ||
				  status_part(&s, p, &n, &sum, NULL, &why) || !n))
			p++;
		assert_true(p < 70);
		ush_reader *r = NULL;
		assert_int_equal(open_reader(&r, &v2, 1, p), USH_ECORRUPT);
		assert_null(r);
		assert_non_null(strstr(ush_last_error(), cases[c].want));
		free(b);
	}
	free_status(&v1);
	ush_ring_free(ring);
}

/* ------------------------------------------------- the driver decides */

/* Two attempts of one map both commit; a reader reads the one whose
 * status it is given, never the other. */
static void reader_reads_the_attempt_named(void **state)
{
	(void)state;
	const char *dir = th_scratch("twoattempts");
	ush_ring *ring = ring_new();
	struct ush_status a0 = put_map(ring, dir, 0, 0, PARTS, 3000);
	struct ush_status a1 = put_map(ring, dir, 0, 1, PARTS, 1700);
	struct ush_status m1 = put_map(ring, dir, 1, 4, PARTS, 500);
	for (uint32_t p = 0; p < PARTS; p++) {
		uint64_t n;
		struct ush_status pick0[2] = {m1, a0}, pick1[2] = {a1, m1};
		th_ok(read_part(pick0, 2, p, &n));
		assert_int_equal(n, 3000 / PARTS + (p < 3000 % PARTS) +
					    500 / PARTS + (p < 500 % PARTS));
		th_ok(read_part(pick1, 2, p, &n));
		assert_int_equal(n, 1700 / PARTS + (p < 1700 % PARTS) +
					    500 / PARTS + (p < 500 % PARTS));
	}
	free_status(&a0);
	free_status(&a1);
	free_status(&m1);
	ush_ring_free(ring);
}

/* Partition 3's entry of a rebuilt status is off by these. */
static int64_t skew_batches;
static uint32_t skew_sum;

static void skewed(const void *arg, uint32_t p, uint64_t *batches,
		   uint32_t *sum)
{
	const char *why;
	th_ok(status_part(arg, p, batches, sum, NULL, &why));
	if (p == 3) {
		*batches += (uint64_t)skew_batches;
		*sum ^= skew_sum;
	}
}

/* A well-formed status (CRCs right) that disagrees with the data. */
static struct ush_status skew(const struct ush_status *st, int64_t batches,
			      uint32_t sum)
{
	struct status s;
	const char *why;
	th_ok(status_parse(st->data, st->len, &s, &why));
	skew_batches = batches;
	skew_sum = sum;
	uint8_t *b;
	size_t len;
	th_ok(status_build(&b, &len, &s, skewed, &s));
	return (struct ush_status){b, len};
}

/* A missing, extra or different batch, or a forged count, is
 * USH_ECORRUPT naming map, partition and file; the other partitions read
 * fine. (A map whose status says a partition is empty is not read for it
 * at all, as Spark skips empty blocks: partition 3 here has several
 * batches.) */
static void batches_checked_against_status(void **state)
{
	(void)state;
	const char *dir = th_scratch("skew");
	ush_ring *ring = ring_new();
	struct ush_status st = put_map(ring, dir, 2, 0, PARTS, 60000);
	struct {
		int64_t batches;
		uint32_t sum;
		const char *says;
	} cases[] = {
		{+1, 0, "status says"},      /* a batch missing */
		{-1, 0, "where none was due"}, /* an extra batch */
		{0, 0x10, "status says"},    /* a different batch */
		/* A forged count: the reader allocates for the batches
		 * that come, not 12 B for each one claimed (-ENOMEM). */
		{(int64_t)1 << 40, 0, "status says"},
	};
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		struct ush_status bad = skew(&st, cases[i].batches,
					     cases[i].sum);
		uint64_t n;
		int ret = read_part(&bad, 1, 3, &n);
		const char *e = ush_last_error();
		if (ret != USH_ECORRUPT)
			fail_msg("case %u: %d %s", i, ret, e);
		if (!strstr(e, cases[i].says) || !strstr(e, "map 2") ||
		    !strstr(e, "partition 3") || !strstr(e, "m2.a0.data"))
			fail_msg("case %u: %s", i, e);
		th_ok(read_part(&bad, 1, 4, &n));
		ushi_free((void *)bad.data);
	}
	free_status(&st);
	ush_ring_free(ring);
}

/* A relative dir is stored absolute: a reader in another working
 * directory finds the committed output (stored as given, it read as not
 * committed there). */
static void relative_dir_stored_absolute(void **state)
{
	(void)state;
	char cwd[4096], abs[4096], want[4200];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_non_null(realpath(th_scratch("reldir"), abs));
	assert_int_equal(chdir(abs), 0);
	ush_ring *ring = ring_new();
	struct ush_status st = put_map(ring, "out", 0, 0, PARTS, 800);
	assert_int_equal(chdir(cwd), 0);
	uint64_t total = 0;
	for (uint32_t p = 0; p < PARTS; p++) {
		uint64_t n;
		th_ok(read_part(&st, 1, p, &n));
		total += n;
	}
	assert_int_equal(total, 800);
	struct status s;
	const char *why;
	th_ok(status_parse(st.data, st.len, &s, &why));
	snprintf(want, sizeof(want), "%s/out", abs);
	assert_int_equal(s.loc_len, strlen(want));
	assert_memory_equal(s.loc, want, s.loc_len);
	free_status(&st);
	ush_ring_free(ring);
}

/* ------------------------------------------------ committed is final */

static void *file_bytes(const char *dir, uint32_t map, uint32_t attempt,
			bool index, size_t *len)
{
	char path[4096];
	if (index)
		spill_index(path, sizeof(path), dir, SHUFFLE, map, attempt);
	else
		spill_data(path, sizeof(path), dir, SHUFFLE, map, attempt);
	return th_read_file(path, len);
}

/* Finding 1: a second writer of a committed (map, attempt) fails at open
 * and touches nothing; the committed output still reads in full. */
static void reopen_committed_touches_nothing(void **state)
{
	(void)state;
	const char *dir = th_scratch("reopen");
	ush_ring *ring = ring_new();
	struct ush_status st = put_map(ring, dir, 0, 0, PARTS, 2000);
	size_t dlen, ilen, dlen2, ilen2;
	void *data = file_bytes(dir, 0, 0, false, &dlen);
	void *index = file_bytes(dir, 0, 0, true, &ilen);
	struct ush_writer_opts o = wopts(dir, 0, 0, PARTS);
	ush_writer *w = (ush_writer *)&o;
	assert_int_equal(ush_writer_open(&w, ring, &o), USH_ECOMMITTED);
	assert_null(w);
	assert_non_null(strstr(ush_last_error(), "new attempt number"));
	void *data2 = file_bytes(dir, 0, 0, false, &dlen2);
	void *index2 = file_bytes(dir, 0, 0, true, &ilen2);
	assert_int_equal(dlen, dlen2);
	assert_int_equal(ilen, ilen2);
	assert_memory_equal(data, data2, dlen);
	assert_memory_equal(index, index2, ilen);
	uint64_t total = 0;
	for (uint32_t p = 0; p < PARTS; p++) {
		uint64_t n;
		th_ok(read_part(&st, 1, p, &n));
		total += n;
	}
	assert_int_equal(total, 2000);
	free(data), free(data2), free(index), free(index2);
	free_status(&st);
	ush_ring_free(ring);
}

/* One writer per attempt: a second one while the first is open is
 * -EBUSY and leaves the first's files alone; an attempt whose writer
 * aborted may be written again. */
static void one_writer_per_attempt(void **state)
{
	(void)state;
	const char *dir = th_scratch("busy");
	ush_ring *ring = ring_new();
	struct ush_writer_opts o = wopts(dir, 5, 2, PARTS);
	ush_writer *a, *b;
	uint8_t rec[128];
	th_ok(ush_writer_open(&a, ring, &o));
	for (uint32_t i = 0; i < 100; i++)
		th_ok(ush_writer_write(a, i % PARTS, rec, make_rec(rec, 5, 2, i,
							       i % PARTS)));
	assert_int_equal(ush_writer_open(&b, ring, &o), -EBUSY);
	assert_non_null(strstr(ush_last_error(), "another writer"));
	th_ok(ush_writer_commit(a, NULL));
	struct ush_status st;
	th_ok(ush_writer_status(a, &st));
	uint64_t n, total = 0;
	for (uint32_t p = 0; p < PARTS; p++) {
		th_ok(read_part(&st, 1, p, &n));
		total += n;
	}
	assert_int_equal(total, 100);
	ush_writer_free(a);
	/* Aborted: its number may be used again. */
	o.attempt = 3;
	th_ok(ush_writer_open(&a, ring, &o));
	th_ok(ush_writer_write(a, 0, rec, make_rec(rec, 5, 3, 0, 0)));
	th_ok(ush_writer_abort(a));
	ush_writer_free(a);
	struct ush_status again = put_map(ring, dir, 5, 3, PARTS, 300);
	th_ok(read_part(&again, 1, 0, &n));
	assert_int_equal(n, 300 / PARTS + (300 % PARTS > 0));
	free_status(&again);
	ush_ring_free(ring);
}

/* ---------------------------------------------------- sticky fdatasync */

static int sync_calls;

/* Linux reports a writeback error to one fdatasync, then forgets it. */
static int fail_once(int fd)
{
	if (sync_calls++ == 0) {
		errno = EIO;
		return -1;
	}
	return fdatasync(fd);
}

/* Finding 3: a failed fdatasync stays failed; nothing is published. */
static void fdatasync_error_is_sticky(void **state)
{
	(void)state;
	const char *dir = th_scratch("fsync");
	ush_ring *ring = ring_new();
	struct ush_writer_opts o = wopts(dir, 0, 0, PARTS);
	ush_writer *w;
	uint8_t rec[128];
	th_ok(ush_writer_open(&w, ring, &o));
	for (uint32_t i = 0; i < 500; i++)
		th_ok(ush_writer_write(w, i % PARTS, rec, make_rec(rec, 0, 0, i,
							       i % PARTS)));
	sync_calls = 0;
	ushi_fdatasync = fail_once;
	assert_int_equal(ush_writer_commit(w, NULL), -EIO);
	assert_int_equal(ush_writer_commit(w, NULL), -EIO);
	assert_non_null(strstr(ush_last_error(), "fdatasync"));
	ushi_fdatasync = fdatasync;
	struct ush_status st;
	assert_int_equal(ush_writer_status(w, &st), USH_ESTATE);
	char path[4096];
	spill_index(path, sizeof(path), dir, SHUFFLE, 0, 0);
	assert_int_equal(access(path, F_OK), -1);
	ush_writer_free(w);
	/* The retry is a new attempt, and it publishes. */
	struct ush_status ok = put_map(ring, dir, 0, 1, PARTS, 500);
	uint64_t n;
	th_ok(read_part(&ok, 1, 1, &n));
	assert_int_equal(n, 500 / PARTS + 1); /* 500 % 16 = 4 get one more */
	free_status(&ok);
	ush_ring_free(ring);
}

/* ----------------------------------------------------- reader contract */

/* Finding 8: the reader fails at open, yielding nothing, for an attempt
 * not committed where its status says, and refuses bad arguments. */
static void reader_fails_at_open(void **state)
{
	(void)state;
	const char *dir = th_scratch("readeropen");
	ush_ring *ring = ring_new();
	struct ush_status st[2] = {put_map(ring, dir, 0, 0, PARTS, 800),
				   put_map(ring, dir, 1, 0, PARTS, 800)};
	ush_reader *r = NULL;
	/* The index of map 1 gone: not committed there. */
	char path[4096], moved[4200];
	spill_index(path, sizeof(path), dir, SHUFFLE, 1, 0);
	snprintf(moved, sizeof(moved), "%s.away", path);
	assert_int_equal(rename(path, moved), 0);
	assert_int_equal(open_reader(&r, st, 2, 0), USH_ENOTCOMMITTED);
	assert_null(r);
	assert_non_null(strstr(ush_last_error(), "m1.a0.index"));
	assert_int_equal(rename(moved, path), 0);
	th_ok(open_reader(&r, st, 2, 0));
	ush_reader_free(r);
	/* The whole directory elsewhere. */
	snprintf(moved, sizeof(moved), "%s.away", dir);
	assert_int_equal(rename(dir, moved), 0);
	assert_int_equal(open_reader(&r, st, 2, 3), USH_ENOTCOMMITTED);
	assert_int_equal(rename(moved, dir), 0);
	/* Bad arguments. */
	assert_int_equal(open_reader(&r, st, 2, PARTS), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "out of range"));
	assert_int_equal(open_reader(&r, st, 0, 0), -EINVAL);
	assert_int_equal(open_reader(&r, NULL, 2, 0), -EINVAL);
	struct ush_status twice[2] = {st[0], st[0]};
	assert_int_equal(open_reader(&r, twice, 2, 0), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "named twice"));
	struct ush_writer_opts o = wopts(dir, 2, 0, PARTS);
	o.shuffle = SHUFFLE + 1;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &o));
	th_ok(ush_writer_commit(w, NULL));
	struct ush_status other[2] = {st[0]};
	th_ok(ush_writer_status(w, &other[1]));
	assert_int_equal(open_reader(&r, other, 2, 0), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "one shuffle"));
	ush_writer_free(w);
	free_status(&st[0]);
	free_status(&st[1]);
	ush_ring_free(ring);
}

/* The null target stores nothing: no status. */
static void null_target_has_no_status(void **state)
{
	(void)state;
	ush_ring *ring = ring_new();
	struct ush_writer_opts o = wopts(NULL, 0, 0, 4);
	o.target = USH_TARGET_NULL;
	ush_writer *w;
	struct ush_status st;
	th_ok(ush_writer_open(&w, ring, &o));
	assert_int_equal(ush_writer_status(w, &st), USH_ESTATE);
	th_ok(ush_writer_commit(w, NULL));
	assert_int_equal(ush_writer_status(w, &st), USH_ESTATE);
	assert_non_null(strstr(ush_last_error(), "null target"));
	ush_writer_free(w);
	ush_ring_free(ring);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(status_version_3, th_teardown),
		cmocka_unit_test_teardown(status_at_10k_partitions,
					  th_teardown),
		cmocka_unit_test_teardown(status_corruption_refused,
					  th_teardown),
		cmocka_unit_test_teardown(reader_reads_the_attempt_named,
					  th_teardown),
		cmocka_unit_test_teardown(batches_checked_against_status,
					  th_teardown),
		cmocka_unit_test_teardown(relative_dir_stored_absolute,
					  th_teardown),
		cmocka_unit_test_teardown(reopen_committed_touches_nothing,
					  th_teardown),
		cmocka_unit_test_teardown(one_writer_per_attempt, th_teardown),
		cmocka_unit_test_teardown(fdatasync_error_is_sticky,
					  th_teardown),
		cmocka_unit_test_teardown(reader_fails_at_open, th_teardown),
		cmocka_unit_test(null_target_has_no_status),
		cmocka_unit_test_teardown(status_version_2, th_teardown),
		cmocka_unit_test_teardown(status_v2_bad_holders,
					  th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
