/*
 * A worker thread's shuffle logs (src/worker/store.c) on their own:
 * frames appended (packed into the log buffer, a full buffer written and
 * its tail carried over, a frame larger than the buffer), received
 * buffers written as they are (regions, their other bytes indexed as
 * holes, the packed tail before one sealed), and a log continued by the
 * next worker after a crash lost what was never synced. Each check reads
 * the files back and walks the log by its index.
 *
 * No loop runs: the worker is created and never started, and the test
 * gives its thread 0 a ring as the loop's setup does (loop.c), then calls
 * store.c as the loop would.
 */
#define _GNU_SOURCE
#include "helpers.h"
#include "core/frame.h"
#include "core/pool.h"
#include "worker/files.h"
#include "worker/state.h"
#include "worker/store.h"
#include "worker/thread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define POOL (1u << 20) /* log buffers of 256 KiB */

struct rig {
	ush_worker *wk;
	struct wk_thread *t;
};

static void rig_open(struct rig *r, const char *dir)
{
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	o.dir = dir;
	o.threads = 1;
	o.pool_bytes = POOL;
	o.log_level = 0;
	th_worker_secret(&o);
	th_ok(ush_worker_create(&r->wk, &o));
	r->t = &r->wk->threads[0];
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.iodepth = WK_IODEPTH;
	ro.push_size = r->wk->o.flush_size;
	ro.pool_bytes = POOL;
	th_ok(ush_ring_create(&r->t->ring, &ro));
	r->t->flush_order = ring_pool(r->t->ring)->max_order;
}

/* What the loop's teardown does: unsynced frames are lost. */
static void rig_close(struct rig *r)
{
	wk_store_close(r->t);
	ring_drain(r->t->ring);
	ush_ring_free(r->t->ring);
	r->t->ring = NULL;
	ush_worker_free(r->wk);
}

/* A frame the log must hold, in order. */
struct want {
	uint8_t *p;
	uint32_t len, partition, map, attempt;
	uint64_t at; /* its log offset, found by check_log() */
};

/* A DATA frame of payload n bytes (from seed) into a fresh want. */
static void make(struct want *w, uint32_t shuffle, uint32_t partition,
		 uint32_t map, uint32_t n, uint64_t seed)
{
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = shuffle,
			      .map = map, .partition = partition, .seq = seed,
			      .raw_len = n, .payload_len = n, .nrec = 1};
	w->len = USH_FRAME_HDR_SIZE + n;
	w->p = malloc(w->len);
	assert_non_null(w->p);
	th_fill(w->p + USH_FRAME_HDR_SIZE, n, seed);
	frame_encode(w->p, &f);
	w->partition = partition;
	w->map = map;
	w->attempt = 0;
}

static void append(struct rig *r, uint32_t shuffle, const struct want *w)
{
	struct ushi_frame f;
	assert_int_equal(frame_parse(w->p, &f), 0);
	assert_int_equal(f.shuffle, shuffle);
	th_ok(wk_store_append(r->t, &f, w->p));
}

/* A commit's sync of shuffle, as the loop runs it: a round asked for,
 * then taken on as its ops complete. */
static int sync_shuffle(struct rig *r, uint32_t shuffle)
{
	uint64_t ticket;
	int ret = wk_store_sync_begin(r->t, shuffle, &ticket);
	while (!ret && (ret = wk_store_sync_check(r->t, shuffle, ticket)) ==
			       -EINPROGRESS) {
		ret = ring_reap(r->t->ring, 1);
		wk_store_sync_pump(r->t);
	}
	return ret;
}

static void drop_wants(struct want *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(w[i].p);
}

/*
 * Walks s<shuffle>/t0.log by its index: the frames are w[0..n) in order,
 * byte for byte, and every other extent is a hole. Sets each want's log
 * offset; returns the hole entries.
 */
static unsigned check_log(const char *dir, uint32_t shuffle, struct want *w,
			  size_t n)
{
	char path[600];
	size_t llen, ilen;
	snprintf(path, sizeof(path), "%s/s%u/t0.log", dir, shuffle);
	uint8_t *log = th_read_file(path, &llen);
	snprintf(path, sizeof(path), "%s/s%u/t0.idx", dir, shuffle);
	uint8_t *idx = th_read_file(path, &ilen);
	assert_int_equal(ilen % WK_IDX_ENTRY, 0);
	uint64_t off = 0;
	size_t k = 0;
	unsigned holes = 0;
	for (size_t e = 0; e < ilen; e += WK_IDX_ENTRY) {
		uint32_t len, part, map, att;
		if (wk_idx_get(idx + e, off, &len, &part, &map, &att))
			fail_msg("index entry %zu (log offset %llu) does not "
				 "check", e / WK_IDX_ENTRY,
				 (unsigned long long)off);
		assert_true(off + len <= llen);
		if (part == WK_IDX_HOLE) {
			assert_int_equal(map, WK_IDX_HOLE);
			holes++;
		} else {
			if (k == n)
				fail_msg("a frame at %llu beyond the %zu written",
					 (unsigned long long)off, n);
			if (len != w[k].len)
				fail_msg("frame %zu at %llu: %u bytes, not %u", k,
					 (unsigned long long)off, len, w[k].len);
			assert_int_equal(part, w[k].partition);
			assert_int_equal(map, w[k].map);
			assert_int_equal(att, w[k].attempt);
			if (memcmp(log + off, w[k].p, len))
				fail_msg("frame %zu at %llu: other bytes", k,
					 (unsigned long long)off);
			w[k++].at = off;
		}
		off += len;
	}
	if (k != n)
		fail_msg("the index has %zu frames of %zu", k, n);
	free(log);
	free(idx);
	return holes;
}

/* Appended frames are packed back to back: buffers that fill are
 * written and their tails carried over, a frame larger than a buffer
 * goes out on its own; each shuffle has its log. After a sync the index
 * walks every frame, with no hole. */
#define NAPP 400
static void appends_are_packed_and_indexed(void **state)
{
	(void)state;
	const char *dir = th_scratch("store-append");
	struct rig r;
	rig_open(&r, dir);
	static struct want a[NAPP], b[NAPP / 4];
	size_t na = 0, nb = 0;
	for (uint32_t i = 0; i < NAPP; i++) {
		/* 60 bytes to 5 KiB, and once 300 KiB (> a buffer). */
		uint32_t n = i == 150 ? 300u << 10 : 12 + (i * 997u) % 5000;
		make(&a[na], 3, i % 7, i % 3, n, i);
		append(&r, 3, &a[na++]);
		if (i % 4 == 0) {
			make(&b[nb], 4, i % 5, 1, 100 + i, 1000 + i);
			append(&r, 4, &b[nb++]);
		}
	}
	th_ok(sync_shuffle(&r, 3));
	th_ok(wk_store_sync(r.t));
	assert_int_equal(check_log(dir, 3, a, na), 0);
	assert_int_equal(check_log(dir, 4, b, nb), 0);
	rig_close(&r);
	drop_wants(a, na);
	drop_wants(b, nb);
}

/* A commit's round writes the log buffer with its partial tail block
 * padded and does not wait: frames appended at once (more than a
 * buffer) rewrite that block, and that write waits for the padded one
 * (two writes of one block in flight could land in either order). The
 * log holds every frame in order after the next sync. */
static void round_tail_rewritten_in_order(void **state)
{
	(void)state;
	const char *dir = th_scratch("store-round-tail");
	struct rig r;
	rig_open(&r, dir);
	static struct want a[100];
	size_t n = 0;
	for (uint32_t i = 0; i < 5; i++) {
		make(&a[n], 5, i % 3, 0, 1000 + i, i);
		append(&r, 5, &a[n++]);
	}
	uint64_t ticket;
	th_ok(wk_store_sync_begin(r.t, 5, &ticket));
	for (uint32_t i = 0; i < 80; i++) {
		make(&a[n], 5, i % 3, 1, 4000 + i, 100 + i);
		append(&r, 5, &a[n++]);
	}
	th_ok(sync_shuffle(&r, 5));
	assert_int_equal(wk_store_sync_check(r.t, 5, ticket), 0);
	th_ok(wk_store_sync(r.t));
	assert_int_equal(check_log(dir, 5, a, n), 0);
	rig_close(&r);
	drop_wants(a, n);
}

/* A received buffer: junk bytes (a control frame, say) at 0, frames at
 * rel[i], junk after them; returns the bytes it holds. */
static uint32_t region(struct rig *r, uint32_t shuffle, struct want *w,
		       const uint32_t *rel, size_t n, uint32_t tail)
{
	struct ushi_buf *b = pool_get(ring_pool(r->t->ring), r->t->flush_order);
	assert_non_null(b);
	struct wk_rent ents[4];
	assert_true(n <= 4);
	uint32_t end = 0;
	memset(b->data, 0xee, b->cap);
	for (size_t i = 0; i < n; i++) {
		memcpy(b->data + rel[i], w[i].p, w[i].len);
		ents[i] = (struct wk_rent){rel[i], w[i].len, w[i].partition,
					   w[i].map, w[i].attempt};
		end = rel[i] + w[i].len;
	}
	th_ok(wk_store_region(r->t, shuffle, b, end + tail, ents, n));
	return end + tail;
}

/*
 * Regions go to the log as received: their frames where they lie, the
 * bytes around them indexed as holes. Frames appended before a region
 * are sealed (written padded, the gap a hole); frames appended after it
 * start the next block.
 */
static void regions_are_written_as_received(void **state)
{
	(void)state;
	const char *dir = th_scratch("store-region");
	struct rig r;
	rig_open(&r, dir);
	struct want w[9];
	size_t n = 0;
	for (uint32_t i = 0; i < 3; i++) {
		make(&w[n], 5, i, 0, 200 + i, i);
		append(&r, 5, &w[n++]);
	}
	/* Region 1: 48 junk bytes, two frames back to back, 30 junk. */
	make(&w[3], 5, 1, 2, 7000, 10);
	make(&w[4], 5, 2, 2, 9000, 11);
	uint32_t rel1[2] = {48, 48 + w[3].len};
	region(&r, 5, &w[3], rel1, 2, 30);
	n = 5;
	for (uint32_t i = 0; i < 2; i++) {
		make(&w[n], 5, i, 3, 300 + i, 20 + i);
		append(&r, 5, &w[n++]);
	}
	/* Region 2: one frame at its start, nothing after it. */
	make(&w[n], 5, 6, 4, 12000, 30);
	uint32_t rel2[1] = {0};
	region(&r, 5, &w[n++], rel2, 1, 0);
	make(&w[n], 5, 0, 5, 50, 40);
	append(&r, 5, &w[n++]);
	th_ok(sync_shuffle(&r, 5));
	unsigned holes = check_log(dir, 5, w, n);
	/* The junk before region 1's frames is on disk as received, in
	 * a hole of its own right before them. */
	char path[600];
	size_t llen;
	snprintf(path, sizeof(path), "%s/s5/t0.log", dir);
	uint8_t *log = th_read_file(path, &llen);
	assert_true(w[3].at >= 48);
	for (unsigned i = 1; i <= 48; i++)
		assert_int_equal(log[w[3].at - i], 0xee);
	assert_int_equal(w[4].at, w[3].at + w[3].len);
	free(log);
	/* Junk around region 1 at least; seal padding where aligned. */
	assert_true(holes >= 2);
	assert_int_equal(atomic_load(&r.wk->m.bytes_in_place),
			 w[3].len + w[4].len + w[7].len);
	rig_close(&r);
	drop_wants(w, n);
}

/* Shuffle claimed by app in the commit log, with map 0 attempt 0
 * committed: a worker at start removes the shuffle directories no
 * application owns, and drops the shuffles with no attempt committed. */
static void claim(struct rig *r, uint32_t shuffle, const char *app)
{
	struct wk_rec rec = {.shuffle = shuffle};
	snprintf(rec.app, sizeof(rec.app), "%s", app);
	for (int k = 0; k < 2; k++) {
		rec.type = k ? WK_REC_COMMIT : WK_REC_CLAIM;
		pthread_mutex_lock(&r->wk->lock);
		int ret = wk_rec_log(r->wk, &rec, 1);
		if (!ret)
			ret = wk_rec_apply(r->wk, &rec);
		pthread_mutex_unlock(&r->wk->lock);
		th_ok(ret);
	}
}

/*
 * A crash loses what was never synced: the next worker's first open of
 * the log cuts it after the last indexed frame, and its appends follow
 * the synced ones.
 */
static void next_worker_continues_after_the_synced_frames(void **state)
{
	(void)state;
	const char *dir = th_scratch("store-reopen");
	struct rig r;
	rig_open(&r, dir);
	claim(&r, 6, "app");
	struct want w[60], lost;
	size_t n = 0;
	for (uint32_t i = 0; i < 30; i++) {
		make(&w[n], 6, i % 4, 0, 3000 + i, i);
		append(&r, 6, &w[n++]);
	}
	th_ok(sync_shuffle(&r, 6));
	/* More than a buffer, never synced: whole blocks of it reach the
	 * log, no index entry does. */
	for (uint32_t i = 0; i < 40; i++) {
		make(&lost, 6, 0, 1, 9000, 100 + i);
		append(&r, 6, &lost);
		free(lost.p);
	}
	rig_close(&r);
	char path[600];
	struct stat st;
	snprintf(path, sizeof(path), "%s/s6/t0.log", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_size >= (off_t)(256u << 10));
	rig_open(&r, dir);
	for (uint32_t i = 0; i < 30; i++) {
		make(&w[n], 6, i % 4, 2, 2000 + i, 200 + i);
		append(&r, 6, &w[n++]);
	}
	th_ok(sync_shuffle(&r, 6));
	check_log(dir, 6, w, n);
	rig_close(&r);
	drop_wants(w, n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(round_tail_rewritten_in_order,
					  th_teardown),
		cmocka_unit_test_teardown(appends_are_packed_and_indexed,
					  th_teardown),
		cmocka_unit_test_teardown(regions_are_written_as_received,
					  th_teardown),
		cmocka_unit_test_teardown(
			next_worker_continues_after_the_synced_frames,
			th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
