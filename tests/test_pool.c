/*
 * The registered buffer pool: a buddy allocator over one arena with
 * per-class LIFO idle lists. Checked at the pool level (exact addresses,
 * split/merge, exhaustion) and through the writer (a swap never hands a
 * smaller buffer back; 10,000 partitions fit a 64 MiB pool).
 */
#include "helpers.h"
#include "core/pool.h"
#include "core/ring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB 1024u
#define MiB (1024u * 1024u)

/* Is a buffer of order or larger idle? */
static bool has_idle(const struct ushi_pool *p, unsigned order)
{
	for (unsigned o = order; o <= p->max_order; o++)
		if (p->idle[o])
			return true;
	return false;
}

static size_t off_of(const struct ushi_pool *p, const struct ushi_buf *b)
{
	return (size_t)(b->data - p->arena);
}

/* Walks idle list order, checking its links; returns its length. */
static unsigned idle_count(const struct ushi_pool *p, unsigned order)
{
	unsigned n = 0;
	const struct ushi_buf *prev = NULL;
	for (const struct ushi_buf *b = p->idle[order]; b; b = b->next) {
		assert_ptr_equal(b->prev, prev);
		assert_int_equal(b->state, BUF_IDLE);
		assert_int_equal(b->order, order);
		assert_int_equal(b->cap, USHI_BUF_MIN << order);
		prev = b;
		n++;
	}
	return n;
}

/* Sum of the idle lists; must match the pool's own count. */
static size_t idle_sum(const struct ushi_pool *p)
{
	size_t sum = 0;
	for (unsigned o = 0; o <= p->max_order; o++)
		sum += (size_t)idle_count(p, o) * (USHI_BUF_MIN << o);
	assert_int_equal(sum, p->idle_bytes);
	return sum;
}

/* Everything back: only whole push-size blocks on the idle lists. */
static void assert_fully_merged(const struct ushi_pool *p)
{
	for (unsigned o = 0; o < p->max_order; o++)
		assert_int_equal(idle_count(p, o), 0);
	assert_int_equal(idle_count(p, p->max_order),
			 p->bytes >> (12 + p->max_order));
	assert_int_equal(p->idle_bytes, p->bytes);
}

static struct ushi_buf *get_ok(struct ushi_pool *p, unsigned order)
{
	struct ushi_buf *b = pool_get(p, order);
	assert_non_null(b);
	assert_int_equal(b->state, BUF_WRITER);
	assert_int_equal(b->order, order);
	assert_int_equal(b->cap, USHI_BUF_MIN << order);
	/* Buddy blocks are aligned to their own size. */
	assert_int_equal(off_of(p, b) % b->cap, 0);
	return b;
}

static void pool_init_rejects_bad_geometry(void **state)
{
	(void)state;
	struct ushi_pool p;
	assert_int_equal(pool_init(&p, 64 * KiB, 48 * KiB), -EINVAL);
	assert_int_equal(pool_init(&p, 64 * KiB, 2048), -EINVAL);
	assert_int_equal(pool_init(&p, 32 * KiB, 64 * KiB), -EINVAL);
	assert_int_equal(pool_init(&p, 96 * KiB, 64 * KiB), -EINVAL);
	/* 4 KiB << 15 is one class above the largest. */
	assert_int_equal(pool_init(&p, 128 * MiB, 128 * MiB), -EINVAL);

	assert_int_equal(pool_init(&p, 256 * KiB, 64 * KiB), 0);
	assert_int_equal(p.bytes, 256 * KiB);
	assert_int_equal(p.max_order, 4);
	assert_int_equal((uintptr_t)p.arena % USHI_ALIGN, 0);
	assert_fully_merged(&p);
	/* The first buffer handed out starts the arena. */
	struct ushi_buf *b = get_ok(&p, 4);
	assert_ptr_equal(b->data, p.arena);
	pool_put(&p, b);
	assert_fully_merged(&p);
	pool_destroy(&p);

	/* One class only: the pool is all 4 KiB buffers. */
	assert_int_equal(pool_init(&p, 16 * KiB, 4 * KiB), 0);
	assert_int_equal(p.max_order, 0);
	assert_int_equal(idle_count(&p, 0), 4);
	pool_destroy(&p);
}

static void pool_order_classes(void **state)
{
	(void)state;
	struct ushi_pool p;
	assert_int_equal(pool_init(&p, 128 * KiB, 64 * KiB), 0);
	assert_int_equal(pool_order(&p, 0), 0);
	assert_int_equal(pool_order(&p, 1), 0);
	assert_int_equal(pool_order(&p, 4096), 0);
	assert_int_equal(pool_order(&p, 4097), 1);
	assert_int_equal(pool_order(&p, 8192), 1);
	assert_int_equal(pool_order(&p, 8193), 2);
	assert_int_equal(pool_order(&p, 32 * KiB + 1), 4);
	assert_int_equal(pool_order(&p, 64 * KiB), 4);
	assert_int_equal(pool_order(&p, 64 * KiB + 1), -1);
	pool_destroy(&p);
}

/* One 64 KiB block split down to 4 KiB and merged back, address by
 * address. */
static void pool_split_and_merge(void **state)
{
	(void)state;
	struct ushi_pool p;
	assert_int_equal(pool_init(&p, 64 * KiB, 64 * KiB), 0);

	struct ushi_buf *a = get_ok(&p, 0);
	assert_int_equal(off_of(&p, a), 0);
	/* The upper halves stay idle, one per class. */
	for (unsigned o = 0; o < 4; o++) {
		assert_int_equal(idle_count(&p, o), 1);
		assert_int_equal(off_of(&p, p.idle[o]), (size_t)4 * KiB << o);
	}
	assert_int_equal(idle_count(&p, 4), 0);
	assert_int_equal(p.idle_bytes, 60 * KiB);
	assert_false(has_idle(&p, 4));
	assert_true(has_idle(&p, 3));
	assert_true(has_idle(&p, 0));

	struct ushi_buf *c16 = get_ok(&p, 2);
	assert_int_equal(off_of(&p, c16), 16 * KiB);
	struct ushi_buf *b = get_ok(&p, 0);
	assert_int_equal(off_of(&p, b), 4 * KiB);
	struct ushi_buf *c8 = get_ok(&p, 1);
	assert_int_equal(off_of(&p, c8), 8 * KiB);
	/* Nothing idle below 32 KiB: a 4 KiB get splits the 32 KiB block. */
	struct ushi_buf *d = get_ok(&p, 0);
	assert_int_equal(off_of(&p, d), 32 * KiB);
	assert_int_equal(off_of(&p, p.idle[0]), 36 * KiB);
	assert_int_equal(off_of(&p, p.idle[1]), 40 * KiB);
	assert_int_equal(off_of(&p, p.idle[2]), 48 * KiB);
	assert_null(p.idle[3]);
	assert_int_equal(idle_sum(&p), 28 * KiB);

	/* b's buddy a is held: b stays a 4 KiB idle block. */
	pool_put(&p, b);
	assert_int_equal(b->state, BUF_IDLE);
	assert_int_equal(idle_count(&p, 0), 2);
	/* c8's buddy (a + b) is not one idle 8 KiB block yet. */
	pool_put(&p, c8);
	assert_int_equal(idle_count(&p, 1), 2);
	/* a merges with b, then c8: one 16 KiB block at 0. */
	pool_put(&p, a);
	assert_int_equal(idle_count(&p, 0), 1);
	assert_int_equal(idle_count(&p, 1), 1);
	assert_int_equal(idle_count(&p, 2), 2);
	assert_ptr_equal(p.idle[2]->data, p.arena);
	/* c16 completes the lower 32 KiB. */
	pool_put(&p, c16);
	assert_int_equal(idle_count(&p, 2), 1);
	assert_int_equal(idle_count(&p, 3), 1);
	assert_ptr_equal(p.idle[3]->data, p.arena);
	assert_int_equal(idle_sum(&p), 60 * KiB);
	/* d closes the whole block again. */
	pool_put(&p, d);
	assert_fully_merged(&p);
	assert_ptr_equal(p.idle[4]->data, p.arena);
	pool_destroy(&p);
}

/* The last buffer returned is the first one handed out again. */
static void pool_lifo_reuse(void **state)
{
	(void)state;
	struct ushi_pool p;
	assert_int_equal(pool_init(&p, 256 * KiB, 64 * KiB), 0);

	struct ushi_buf *b[4];
	for (int i = 0; i < 4; i++) {
		b[i] = get_ok(&p, 0);
		assert_int_equal(off_of(&p, b[i]), (size_t)i * 4 * KiB);
	}
	/* b[0] and b[2] have held buddies: neither merges. */
	pool_put(&p, b[0]);
	pool_put(&p, b[2]);
	assert_int_equal(idle_count(&p, 0), 2);
	assert_ptr_equal(get_ok(&p, 0), b[2]);
	assert_ptr_equal(get_ok(&p, 0), b[0]);
	for (int i = 0; i < 4; i++)
		pool_put(&p, b[i]);
	assert_fully_merged(&p);

	/* Push-size blocks never merge further: pure LIFO. */
	struct ushi_buf *x = get_ok(&p, 4), *y = get_ok(&p, 4);
	assert_ptr_not_equal(x, y);
	pool_put(&p, x);
	pool_put(&p, y);
	assert_ptr_equal(get_ok(&p, 4), y);
	assert_ptr_equal(get_ok(&p, 4), x);
	pool_put(&p, y);
	pool_put(&p, x);
	assert_ptr_equal(get_ok(&p, 4), x);
	pool_put(&p, x);
	assert_fully_merged(&p);
	pool_destroy(&p);
}

/* An empty pool returns NULL; a pool with only smaller idle buffers does
 * not hand one of them out for a larger request. */
static void pool_exhaustion(void **state)
{
	(void)state;
	struct ushi_pool p;
	struct ushi_buf *b[64];
	assert_int_equal(pool_init(&p, 256 * KiB, 64 * KiB), 0);
	for (int i = 0; i < 64; i++)
		b[i] = get_ok(&p, 0);
	assert_int_equal(p.idle_bytes, 0);
	for (unsigned o = 0; o <= 4; o++) {
		assert_null(pool_get(&p, o));
		assert_false(has_idle(&p, o));
	}
	/* Every other 4 KiB block back: 128 KiB idle, none above 4 KiB. */
	for (int i = 0; i < 64; i++)
		if ((off_of(&p, b[i]) / (4 * KiB)) % 2 == 0)
			pool_put(&p, b[i]);
	assert_int_equal(idle_sum(&p), 128 * KiB);
	assert_int_equal(idle_count(&p, 0), 32);
	assert_true(has_idle(&p, 0));
	for (unsigned o = 1; o <= 4; o++) {
		assert_false(has_idle(&p, o));
		assert_null(pool_get(&p, o));
	}
	assert_int_equal(p.idle_bytes, 128 * KiB);
	for (int i = 0; i < 64; i++)
		if ((off_of(&p, b[i]) / (4 * KiB)) % 2 == 1)
			pool_put(&p, b[i]);
	assert_fully_merged(&p);

	/* Whole blocks: exactly bytes / push of them. */
	for (int i = 0; i < 4; i++)
		b[i] = get_ok(&p, 4);
	assert_null(pool_get(&p, 0));
	for (int i = 3; i >= 0; i--)
		pool_put(&p, b[i]);
	assert_fully_merged(&p);
	pool_destroy(&p);
}

static void pool_lookup_finds_owner(void **state)
{
	(void)state;
	struct ushi_pool p;
	assert_int_equal(pool_init(&p, 128 * KiB, 64 * KiB), 0);
	struct ushi_buf *a = get_ok(&p, 4), *b = get_ok(&p, 2);
	assert_ptr_equal(pool_lookup(&p, a->data), a);
	assert_ptr_equal(pool_lookup(&p, b->data), b);
	b->state = BUF_INFLIGHT; /* any owned state is found */
	assert_ptr_equal(pool_lookup(&p, b->data), b);
	pool_put(&p, b);
	pool_put(&p, a);
	assert_fully_merged(&p);
	pool_destroy(&p);
}

/* Random gets and puts: buffers never overlap, the idle count is always
 * pool minus held, and everything merges back at the end. */
static void pool_random_stress(void **state)
{
	(void)state;
	enum { UNITS = 256 };
	struct ushi_pool p;
	struct ushi_buf *held[UNITS];
	uint8_t used[UNITS] = {0};
	unsigned nheld = 0;
	size_t held_bytes = 0;
	uint64_t rng = 42;
	assert_int_equal(pool_init(&p, UNITS * 4 * KiB, 64 * KiB), 0);
	for (int step = 0; step < 20000; step++) {
		uint64_t r = th_rand(&rng);
		if (nheld && (r & 1)) {
			unsigned i = (unsigned)((r >> 8) % nheld);
			struct ushi_buf *b = held[i];
			size_t u = off_of(&p, b) / USHI_BUF_MIN;
			for (size_t k = 0; k < b->cap / USHI_BUF_MIN; k++)
				used[u + k] = 0;
			held_bytes -= b->cap;
			held[i] = held[--nheld];
			pool_put(&p, b);
		} else {
			unsigned o = (unsigned)((r >> 8) % 5);
			struct ushi_buf *b = pool_get(&p, o);
			if (!b) {
				assert_false(has_idle(&p, o));
				continue;
			}
			assert_int_equal(b->cap, USHI_BUF_MIN << o);
			assert_int_equal(off_of(&p, b) % b->cap, 0);
			size_t u = off_of(&p, b) / USHI_BUF_MIN;
			for (size_t k = 0; k < b->cap / USHI_BUF_MIN; k++) {
				assert_int_equal(used[u + k], 0);
				used[u + k] = 1;
			}
			held_bytes += b->cap;
			held[nheld++] = b;
		}
		assert_int_equal(p.idle_bytes, p.bytes - held_bytes);
		if (step % 64 == 0)
			idle_sum(&p);
	}
	while (nheld)
		pool_put(&p, held[--nheld]);
	assert_fully_merged(&p);
	pool_destroy(&p);
}

/* -------------------------------------------------- through the writer */

static size_t idle_of(const ush_ring *ring)
{
	struct ush_ring_info info;
	ush_ring_info(ring, &info);
	return info.pool_idle_bytes;
}

static struct ushi_buf *buf_of(ush_ring *ring, void *payload)
{
	const uint8_t *data = (const uint8_t *)payload - USH_FRAME_HDR_SIZE;
	return pool_lookup(ring_pool(ring), data);
}

/* Fills a payload area with records of seeded bytes; returns the bytes
 * used and the record count in *nrec. */
static size_t fill_records(void *buf, size_t cap, uint64_t seed,
			   uint32_t *nrec)
{
	uint8_t rec[1000];
	size_t off = 0;
	*nrec = 0;
	while (cap - off >= USH_RECORD_HDR_SIZE + sizeof(rec)) {
		th_fill(rec, sizeof(rec), seed + *nrec);
		off += ush_record_put((uint8_t *)buf + off, rec, sizeof(rec));
		(*nrec)++;
	}
	return off;
}

/*
 * A 128 KiB pool of two 64 KiB buffers: the caller holds one, k partition
 * buffers of 4 KiB split the other, so the only idle memory is in buffers
 * smaller than the caller's. A swap (or acquire) must give back a buffer
 * of the caller's capacity or fail with USH_EPOOL; never a smaller one.
 */
static void swap_never_smaller(void **state)
{
	(void)state;
	ush_ring *ring = th_ring(128 * KiB, 64 * KiB);
	const size_t cap_full = 64 * KiB - USH_FRAME_HDR_SIZE;
	assert_int_equal(idle_of(ring), 128 * KiB);
	for (uint32_t k = 1; k < 16; k++) {
		struct ush_writer_opts wo = {.size = sizeof(wo), .map = k,
			.partitions = 16, .target = USH_TARGET_NULL};
		ush_writer *w;
		void *buf, *old;
		size_t cap;
		uint32_t nrec;
		th_ok(ush_writer_open(&w, ring, &wo));
		th_ok(ush_writer_acquire(w, &buf, &cap));
		assert_int_equal(cap, cap_full);
		assert_int_equal(buf_of(ring, buf)->cap, 64 * KiB);
		for (uint32_t i = 0; i < k; i++)
			th_ok(ush_writer_write(w, i, "small record", 12));
		assert_int_equal(idle_of(ring), 64 * KiB - k * 4 * KiB);

		size_t len = fill_records(buf, cap, k, &nrec);
		old = buf;
		int ret = ush_writer_swap(w, 0, &buf, len, nrec);
		if (ret == 0) {
			/* Got one: it must be a whole push buffer. */
			assert_ptr_not_equal(buf, old);
			assert_int_equal(buf_of(ring, buf)->cap, 64 * KiB);
			assert_int_equal(buf_of(ring, buf)->state, BUF_USER);
		} else {
			/* Refused: nothing was handed over. */
			assert_int_equal(ret, USH_EPOOL);
			assert_ptr_equal(buf, old);
			assert_int_equal(buf_of(ring, buf)->state, BUF_USER);
			assert_non_null(strstr(ush_last_error(), "pool"));
			assert_int_equal(idle_of(ring),
					 64 * KiB - k * 4 * KiB);
		}
		/* A second caller buffer: same rule for acquire. */
		void *b2;
		size_t cap2 = 0;
		ret = ush_writer_acquire(w, &b2, &cap2);
		if (ret == 0) {
			assert_int_equal(cap2, cap_full);
			assert_int_equal(buf_of(ring, b2)->cap, 64 * KiB);
			th_ok(ush_writer_release(w, b2));
		} else {
			assert_int_equal(ret, USH_EPOOL);
		}
		th_ok(ush_writer_release(w, buf));
		struct ush_part_stats parts[16];
		th_ok(ush_writer_commit(w, parts));
		for (uint32_t i = 0; i < k; i++) {
			assert_int_equal(parts[i].records,
					 i == 0 && buf != old ? 1 + nrec : 1);
			assert_int_equal(parts[i].bytes,
					 i == 0 && buf != old ? 12 + 1000 * nrec
							      : 12);
		}
		ush_writer_free(w);
		assert_int_equal(idle_of(ring), 128 * KiB);
	}
	ush_ring_free(ring);
}

/*
 * Disk target, three 64 KiB buffers: the caller holds one, a partition
 * splits the second, so every other swap finds no idle 64 KiB buffer and
 * must wait for the write of the previous one, not take a smaller one.
 */
static void swap_waits_for_same_size(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("pool-swap");
	ush_ring *ring = th_ring(192 * KiB, 64 * KiB);
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 1,
		.partitions = 2, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 1};
	ush_writer *w;
	void *buf;
	size_t cap;
	uint32_t nrec = 0, total = 0;
	enum { SWAPS = 20 };
	th_ok(ush_writer_open(&w, ring, &wo));
	th_ok(ush_writer_acquire(w, &buf, &cap));
	th_ok(ush_writer_write(w, 1, "p1", 2));
	for (int i = 0; i < SWAPS; i++) {
		size_t len = fill_records(buf, cap, (uint64_t)i << 20, &nrec);
		void *old = buf;
		th_ok(ush_writer_swap(w, 0, &buf, len, nrec));
		assert_ptr_not_equal(buf, old);
		assert_int_equal(buf_of(ring, buf)->cap, 64 * KiB);
		assert_int_equal(buf_of(ring, buf)->state, BUF_USER);
		total += nrec;
	}
	th_ok(ush_writer_release(w, buf));
	struct ush_part_stats parts[2];
	struct ush_status st;
	th_ok(th_commit(w, parts, &st));
	assert_int_equal(parts[0].records, total);
	assert_int_equal(parts[0].batches, SWAPS);
	assert_int_equal(parts[1].records, 1);
	ush_writer_free(w);
	assert_int_equal(idle_of(ring), 192 * KiB);
	ush_ring_free(ring);

	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(th_reader_open(&r, &st, 1, 0, 0));
	for (int i = 0; i < SWAPS; i++)
		for (uint32_t j = 0; j < nrec; j++) {
			uint64_t seed = ((uint64_t)i << 20) + j;
			assert_int_equal(ush_reader_next(r, &rec, &len), 1);
			assert_int_equal(len, 1000);
			assert_true(th_check(rec, len, seed));
		}
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	th_status_free(&st);
	th_rmrf(dir);
}

/* ------------------------------------------- 10,000 partitions, 64 MiB */

#define NPARTS 10000u
#define NROUNDS 50u      /* rounds 20 and 21 carry only the big records */
#define BIG_MID 60000u   /* needs a whole push buffer */
#define BIG_HUGE 100000u /* above the push size: goes out alone */

/*
 * The record stream, identical for writer and reader: round i gives
 * partition p one record of plan_len(p, i) bytes (0: none). 48 rounds of
 * ~100 bytes are ~4.8 KiB per partition: more than the 4 KiB buffers
 * 10,000 partitions get, so the pool runs dry and partitions hand off.
 */
static size_t plan_len(uint32_t p, uint32_t i)
{
	if (i == 20)
		return p % 1000 == 7 ? BIG_MID : 0;
	if (i == 21)
		return p % 2500 == 11 ? BIG_HUGE : 0;
	return 80 + (p * 7 + i * 13) % 41;
}

static uint64_t plan_seed(uint32_t p, uint32_t i)
{
	return (uint64_t)p << 32 | i;
}

static void write_plan(ush_writer *w, uint8_t *rec)
{
	for (uint32_t i = 0; i < NROUNDS; i++)
		for (uint32_t p = 0; p < NPARTS; p++) {
			size_t len = plan_len(p, i);
			if (!len)
				continue;
			th_fill(rec, len, plan_seed(p, i));
			th_ok(ush_writer_write(w, p, rec, len));
		}
}

static void ten_thousand_partitions(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("pool-10k");
	ush_ring *ring = th_ring(64 * MiB, 64 * KiB);
	struct ush_ring_info info;
	ush_ring_info(ring, &info);
	assert_int_equal(info.pool_bytes, 64 * MiB);
	assert_int_equal(info.pool_idle_bytes, 64 * MiB);

	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 9,
		.partitions = NPARTS, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 1};
	ush_writer *w;
	uint8_t *rec = malloc(BIG_HUGE);
	struct ush_part_stats *parts = calloc(NPARTS, sizeof(*parts));
	assert_non_null(rec);
	assert_non_null(parts);
	th_ok(ush_writer_open(&w, ring, &wo));
	write_plan(w, rec);
	struct ush_status st;
	th_ok(th_commit(w, parts, &st));
	ush_writer_free(w);
	/* Every buffer came back, and merged into whole blocks. */
	assert_int_equal(idle_of(ring), 64 * MiB);
	assert_fully_merged(ring_pool(ring));
	ush_ring_free(ring);

	for (uint32_t p = 0; p < NPARTS; p++) {
		uint64_t bytes = 0, n = 0;
		for (uint32_t i = 0; i < NROUNDS; i++) {
			bytes += plan_len(p, i);
			n += plan_len(p, i) != 0;
		}
		assert_int_equal(parts[p].records, n);
		assert_int_equal(parts[p].bytes, bytes);
	}

	/* Read a sample back, including every partition with big records. */
	for (uint32_t p = 0; p < NPARTS; p++) {
		if (p % 97 && p % 1000 != 7 && p % 2500 != 11 &&
		    p != NPARTS - 1)
			continue;
		ush_reader *r;
		const void *got;
		size_t len;
		th_ok(th_reader_open(&r, &st, 1, p, 0));
		for (uint32_t i = 0; i < NROUNDS; i++) {
			if (!plan_len(p, i))
				continue;
			int ret = ush_reader_next(r, &got, &len);
			if (ret != 1)
				fail_msg("partition %u record %u: %d %s", p, i,
					 ret, ush_last_error());
			if (len != plan_len(p, i))
				fail_msg("partition %u record %u: %zu bytes, "
					 "expected %zu", p, i, len,
					 plan_len(p, i));
			if (!th_check(got, len, plan_seed(p, i)))
				fail_msg("partition %u record %u differs", p,
					 i);
		}
		assert_int_equal(ush_reader_next(r, &got, &len), 0);
		ush_reader_free(r);
	}
	th_status_free(&st);
	free(parts);
	free(rec);
	th_rmrf(dir);
}

/*
 * A pool smaller than partitions x 4 KiB: open batches are evicted (sent
 * early) instead of failing, and every record still arrives exactly once.
 */
static void pool_smaller_than_partitions(void **state)
{
	(void)state;
	enum { PARTS = 2000, ROUNDS = 6 };
	const char *dir = th_tmpdir("pool-evict");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 1u << 20; /* 256 x 4 KiB for 2,000 partitions */
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 9,
		.partitions = PARTS, .target = USH_TARGET_DISK, .dir = dir};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	uint8_t rec[200];
	for (uint32_t round = 0; round < ROUNDS; round++)
		for (uint32_t p = 0; p < PARTS; p++) {
			size_t len = 1 + (p * 7 + round * 13) % sizeof(rec);
			th_fill(rec, len, (uint64_t)p << 8 | round);
			th_ok(ush_writer_write(w, p, rec, len));
		}
	struct ush_status st;
	th_ok(th_commit(w, NULL, &st));
	struct ush_ring_info info;
	ush_ring_info(ring, &info);
	assert_int_equal(info.pool_idle_bytes, info.pool_bytes);
	ush_writer_free(w);
	ush_ring_free(ring);

	for (uint32_t p = 0; p < PARTS; p += 37) {
		ush_reader *r;
		const void *data;
		size_t len;
		uint32_t round = 0;
		th_ok(th_reader_open(&r, &st, 1, p, 0));
		while (ush_reader_next(r, &data, &len) == 1) {
			assert_true(round < ROUNDS);
			assert_int_equal(len, 1 + (p * 7 + round * 13) % sizeof(rec));
			assert_true(th_check(data, len, (uint64_t)p << 8 | round));
			round++;
		}
		assert_int_equal(round, ROUNDS);
		ush_reader_free(r);
	}
	th_status_free(&st);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pool_init_rejects_bad_geometry),
		cmocka_unit_test(pool_order_classes),
		cmocka_unit_test(pool_split_and_merge),
		cmocka_unit_test(pool_lifo_reuse),
		cmocka_unit_test(pool_exhaustion),
		cmocka_unit_test(pool_lookup_finds_owner),
		cmocka_unit_test(pool_random_stress),
		cmocka_unit_test(swap_never_smaller),
		cmocka_unit_test(swap_waits_for_same_size),
		cmocka_unit_test(ten_thousand_partitions),
		cmocka_unit_test(pool_smaller_than_partitions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
