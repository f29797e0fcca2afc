/*
 * Staged writes to workers (src/write/stage.c, the net sink's packs in
 * src/write/sink_net.c): with a pool share per partition below the
 * packed-frame size a net writer stages records as a disk writer does,
 * and its frames go out packed, many to a send, from pool buffers. A
 * 4 MiB pool and 3,000 partitions make the stage flush many times.
 * Records of every size a stage takes, records above the push size
 * (sent alone: staged frames of their partition must go first) and
 * swapped batches are interleaved in the same partitions; a flush of
 * small records scatters them into span buffers, others gather into
 * packs, lz4 compresses into them. One real ushuffled, then three (each
 * partition's frames on its own worker: a span buffer is sent in runs to
 * several), then three with two replicas, then a credit window far
 * below what a flush hands over. Every record of every partition is
 * read back in order with a range reader.
 */
#include "net_helpers.h"

#define SHUFFLE 21
#define PUSH (64u << 10)
#define REC_MAX_STAGED (PUSH - 48 - 4) /* the largest record a batch holds */
#define NPARTS 3000u

static enum ush_codec codec = USH_CODEC_NONE;
static bool small_mix;
static uint32_t window; /* the writer's credit window, 0: the worker's */

/* Mostly records below 300 bytes, some of 8 KiB, a few of the largest
 * staged size and very few above the push size; with small_mix, records
 * of 0-40 bytes and some of 257-1,000: those flushes scatter. */
static uint32_t pick_len(uint64_t *rng)
{
	uint64_t x = th_rand(rng);
	if (x % 4096 == 1) /* sent alone, after the staged frames */
		return PUSH + (uint32_t)(x >> 12) % 5000;
	if (small_mix)
		return x % 64 == 0 ? 257 + (uint32_t)(x >> 8) % 744 :
				     (uint32_t)(x >> 8) % 41;
	switch (x % 64) {
	case 0:
		return REC_MAX_STAGED - (uint32_t)(x >> 8) % 3;
	case 1: case 2: case 3: case 4:
		return 8000 + (uint32_t)(x >> 8) % 300;
	default:
		return (uint32_t)(x >> 8) % 300;
	}
}

/* Writes map 0 to workers (replicas of each partition) and returns the
 * writer's stats; parts[] gets what each partition holds. */
static struct ush_writer_stats write_map(const char *workers,
					 unsigned replicas,
					 enum ush_ioengine eng,
					 struct th_part *parts,
					 struct ush_status *st)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = PUSH;
	ro.pool_bytes = 4u << 20;
	ro.codec = codec;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.shuffle = SHUFFLE;
	wo.partitions = NPARTS;
	wo.target = USH_TARGET_NET;
	wo.workers = workers;
	wo.replicas = replicas;
	wo.ioengine = eng;
	wo.window = window;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	uint8_t *rec = malloc(PUSH + 5000);
	assert_non_null(rec);
	void *sbuf;
	size_t scap;
	th_ok(ush_writer_acquire(w, &sbuf, &scap));
	uint64_t rng = 7, seq = 0;
	for (uint32_t i = 0; i < 40000; i++) {
		uint32_t p = (uint32_t)(th_rand(&rng) % NPARTS);
		if (i % 9973 == 0) {
			th_swap_batch(w, &sbuf, p, &parts[p], &seq);
			continue;
		}
		uint32_t len = pick_len(&rng);
		uint64_t seed = (uint64_t)p << 32 | seq++;
		th_fill(rec, len, seed);
		th_ok(ush_writer_write(w, p, rec, len));
		th_note(&parts[p], seed, len);
	}
	th_ok(ush_writer_release(w, sbuf));
	th_ok(th_commit(w, NULL, st));
	struct ush_writer_stats ws;
	ush_writer_stats(w, &ws);
	ush_writer_free(w);
	ush_ring_free(ring);
	free(rec);
	return ws;
}

/* Every partition, one after another through one range reader: each
 * record in the order written, nothing more. */
static void read_back(const struct ush_status *st, const struct th_part *parts)
{
	ush_reader *r;
	th_ok(th_range_open(&r, st, 1, 0, NPARTS, 0));
	const void *rec;
	size_t len;
	for (uint32_t p = 0; p < NPARTS; p++) {
		for (uint32_t i = 0; i < parts[p].n; i++) {
			int ret = ush_reader_next(r, &rec, &len);
			th_part_check(&parts[p], p, i, ret, rec, len);
			if (ush_reader_partition(r) != p)
				fail_msg("partition %u record %u of %u: the "
					 "reader is at partition %u", p, i,
					 parts[p].n, ush_reader_partition(r));
		}
	}
	int ret = ush_reader_next(r, &rec, &len);
	if (ret != 0)
		fail_msg("%d after the last partition's records (partition "
			 "%u)", ret, ush_reader_partition(r));
	ush_reader_free(r);
}

/* Writes and reads back through nw fresh workers; checks that the
 * writer staged and packed its frames. */
static void run(unsigned nw, unsigned replicas, enum ush_ioengine eng)
{
	struct th_worker wk[3] = {0};
	char list[256];
	assert_true(nw <= 3);
	th_workers_spawn(wk, nw, "netstage", list, sizeof(list));
	struct th_part *parts = calloc(NPARTS, sizeof(*parts));
	assert_non_null(parts);
	struct ush_status st = {0};
	struct ush_writer_stats ws = write_map(list, replicas, eng, parts,
					       &st);
	print_message("%u workers, %u replicas: %llu stage flushes, %llu "
		      "batches in %llu sends\n", nw, replicas,
		      (unsigned long long)ws.staged_flushes,
		      (unsigned long long)ws.batches,
		      (unsigned long long)(ws.net_sends + ws.net_zc_sends));
	read_back(&st, parts);
	/* The bytes fill the 1.5 MiB stage many times. */
	assert_true(ws.staged_flushes >= 10);
	assert_int_equal(ws.grows, 0);
	/* Packed: a send carries many frames (unstaged, each went alone);
	 * with replicas each goes to two workers. The stage frames the
	 * partitions of one worker together, so a span buffer goes out in
	 * one or two runs, not in a run per frame. */
	if ((ws.net_sends + ws.net_zc_sends) * 4 > ws.batches * replicas)
		fail_msg("%llu batches in %llu sends: not packed",
			 (unsigned long long)ws.batches,
			 (unsigned long long)(ws.net_sends + ws.net_zc_sends));
	th_status_free(&st);
	th_parts_free(parts, NPARTS);
	th_workers_stop(wk, nw);
}

static void one_worker(void **state)
{
	(void)state;
	run(1, 1, USH_IOENGINE_URING);
}

/* Small records: the flushes scatter into span buffers. */
static void one_worker_scatter(void **state)
{
	(void)state;
	small_mix = true;
	run(1, 1, USH_IOENGINE_URING);
	small_mix = false;
}

static void one_worker_psync(void **state)
{
	(void)state;
	run(1, 1, USH_IOENGINE_PSYNC);
	small_mix = true;
	run(1, 1, USH_IOENGINE_PSYNC);
	small_mix = false;
}

/* Gathered, compressed in the scratch frame and copied into the packs. */
static void one_worker_lz4(void **state)
{
	(void)state;
	codec = USH_CODEC_LZ4;
	run(1, 1, USH_IOENGINE_URING);
	codec = USH_CODEC_NONE;
}

/* A pack per worker; a span buffer that holds the frames of two
 * workers goes out in two runs from the same buffer. */
static void three_workers(void **state)
{
	(void)state;
	run(3, 1, USH_IOENGINE_URING);
	small_mix = true;
	run(3, 1, USH_IOENGINE_URING);
	small_mix = false;
}

/* Each pack and run to two workers; the buffer goes back after both.
 * Packs of different first workers share workers here: a frame split
 * across two packs would have another pack's bytes sent in its middle. */
static void three_workers_replicas(void **state)
{
	(void)state;
	run(3, 2, USH_IOENGINE_URING);
	run(2, 2, USH_IOENGINE_PSYNC);
	small_mix = true;
	run(3, 2, USH_IOENGINE_URING);
	small_mix = false;
}

/* A window of 16 KiB, far below a flush (1.5 MiB) and below the packs
 * and the largest frames (64 KiB): staged frames queue beyond it and
 * start as credit returns, a frame larger than the window goes alone
 * once nothing is in flight, and every byte arrives in order. */
static void small_window(void **state)
{
	(void)state;
	window = 16u << 10;
	run(1, 1, USH_IOENGINE_URING);
	small_mix = true;
	run(3, 2, USH_IOENGINE_URING);
	small_mix = false;
	run(1, 1, USH_IOENGINE_PSYNC);
	window = 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(one_worker, th_teardown),
		cmocka_unit_test_teardown(one_worker_scatter, th_teardown),
		cmocka_unit_test_teardown(one_worker_psync, th_teardown),
		cmocka_unit_test_teardown(one_worker_lz4, th_teardown),
		cmocka_unit_test_teardown(three_workers, th_teardown),
		cmocka_unit_test_teardown(three_workers_replicas, th_teardown),
		cmocka_unit_test_teardown(small_window, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
