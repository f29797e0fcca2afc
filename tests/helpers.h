/* Shared test helpers: scratch directories and deterministic records. */
#ifndef USH_TEST_HELPERS_H
#define USH_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include <ushuffle/ushuffle.h>
#include <ushuffle/worker.h>

/* Creates a fresh directory under $USH_TEST_DIR (default: the build
 * directory, a real disk; /tmp may be tmpfs) and returns its path
 * (static storage, one per call slot). */
const char *th_tmpdir(const char *tag);
/* The secret the tests' workers and clients share. Every test process
 * sets USHUFFLE_SECRET to it at start (unless already set), which the
 * library, the CLI and ushuffled read; embedded workers are given it
 * with th_worker_secret(). */
#define TH_SECRET "ushuffle-tests-shared-secret-0123456789"
struct ush_worker_opts;
void th_worker_secret(struct ush_worker_opts *o);
/* th_tmpdir() for the running test, removed by th_teardown() even when
 * the test fails: cmocka_unit_test_teardown(test, th_teardown). */
const char *th_scratch(const char *tag);
int th_teardown(void **state);
/* A whole file in malloc'd memory (the caller frees it); fails the test
 * if it cannot be read. */
void *th_read_file(const char *path, size_t *len);
/* Writes n bytes of p to path, replacing it (created mode 0600, as a
 * key file must be); fails the test if it cannot. */
void th_write_file(const char *path, const void *p, size_t n);
/* Removes path recursively. */
void th_rmrf(const char *path);
/* How many non-empty files under dir (links not followed) match: for
 * looking for plain bytes in a worker's directory. */
unsigned th_files_matching(const char *dir,
			   bool (*match)(const uint8_t *p, size_t n));
/* Fills buf with len bytes derived from seed (deterministic). */
void th_fill(void *buf, size_t len, uint64_t seed);
/* Checks buf against th_fill(seed); returns 1 if equal. */
int th_check(const void *buf, size_t len, uint64_t seed);
/* xorshift64* PRNG. */
uint64_t th_rand(uint64_t *state);
/*
 * Map statuses (0.3). A committed writer's status is borrowed until
 * ush_writer_free(); tests keep copies (malloc'd, th_status_free()).
 */
/* Copies w's map status into *st; fails the test if w has none. */
void th_status_copy(const ush_writer *w, struct ush_status *st);
/* Commits w (parts may be NULL); on success copies its status into *st
 * (st may be NULL). Returns the commit's result. */
int th_commit(ush_writer *w, struct ush_part_stats *parts,
	      struct ush_status *st);
/* Frees a copy (NULL data allowed) and zeroes it; n of them. */
void th_status_free(struct ush_status *st);
void th_statuses_free(struct ush_status *st, size_t n);
/* A status naming shuffle/map/attempt at loc (a directory or a worker
 * list) with no batches in any partition: what a driver could hold for an
 * attempt that never committed there. Built with the library's encoder. */
void th_status_forge(struct ush_status *st, enum ush_target target,
		     const char *loc, uint32_t shuffle, uint32_t map,
		     uint32_t attempt, uint32_t partitions);
/* The net status of map 0 attempt 0 of shuffle at loc for app, one
 * partition of `batches` batches with checksum sum (status.h), as a
 * writer would commit it. */
void th_status_one_part(struct ush_status *st, const char *app,
			const char *loc, uint32_t shuffle, uint64_t batches,
			uint32_t sum);
/* A ring of pool_bytes and push size push (either 0: the default),
 * failing the test if it cannot be made; free it with ush_ring_free(). */
ush_ring *th_ring(size_t pool_bytes, size_t push);
/* The seed of record i of partition part of map (or attempt) m, for
 * th_fill() and th_check(): distinct for m < 2^24, part < 2^20 and
 * i < 2^20. */
uint64_t th_rec_seed(uint32_t m, uint32_t part, uint32_t i);
/* ush_reader_open() of the count partitions from first over n statuses
 * (timeout_ms 0: the default); its result. */
int th_range_open(ush_reader **r, const struct ush_status *st, uint32_t n,
		  uint32_t first, uint32_t count, uint32_t timeout_ms);
/* th_range_open() of one partition. */
int th_reader_open(ush_reader **r, const struct ush_status *st, uint32_t n,
		   uint32_t partition, uint32_t timeout_ms);
/* 0 where this process may set up an io_uring, else the -errno the
 * kernel gave (-EPERM under tests/no_uring): the library's rings then
 * run on plain system calls, and tests check that mode's true values. */
int th_uring_refused(void);
/* Asserts ret == 0, printing ush_last_error() otherwise. */
#define th_ok(expr)                                                          \
	do {                                                                 \
		int th_ret_ = (expr);                                        \
		if (th_ret_ != 0)                                            \
			fail_msg("%s = %d (%s): %s", #expr, th_ret_,         \
				 ush_err_name(th_ret_), ush_last_error());   \
	} while (0)

/*
 * Spill index (docs/format.md §2.3), for tests that read or doctor one.
 * th_index_load: the header and every entry in index order (malloc'd),
 * failing the test unless the index and its directory parse.
 * th_index_store: writes an index of the n entries (grouped by
 * partition, stably) with header h (its entries and CRC set anew).
 */
struct spill_header;
struct spill_entry;
void th_index_load(const char *path, struct spill_header *h,
		   struct spill_entry **ents, size_t *n);
void th_index_store(const char *path, struct spill_header *h,
		    const struct spill_entry *ents, size_t n);

/*
 * What each partition of a map holds, in the order written (the staged
 * writers' tests): each record's th_fill() seed and length.
 */
struct th_part {
	uint64_t *seed;
	uint32_t *len;
	uint32_t n, cap;
};
/* Notes a record of len bytes from seed at the end of pt. */
void th_note(struct th_part *pt, uint64_t seed, uint32_t len);
/* Swaps in one batch of 1-7 records of 100 bytes for partition p (seeds
 * p << 32 | *seq, *seq advanced), noted in pt. */
void th_swap_batch(ush_writer *w, void **buf, uint32_t p, struct th_part *pt,
		   uint64_t *seq);
/* Checks what ush_reader_next() gave (ret, rec, len) against record i of
 * partition p (pt), failing the test with both when they differ. */
void th_part_check(const struct th_part *pt, uint32_t p, uint32_t i, int ret,
		   const void *rec, size_t len);
/* Frees n partitions' notes and the array. */
void th_parts_free(struct th_part *parts, uint32_t n);

/* Mounts a fresh 64 MiB ext4 at dir through a loop device, with mount
 * options opts (NULL: none); its image is unlinked at once (the mount
 * holds it). Skips the test where that cannot be done (not root, no
 * mkfs.ext4, no loop driver). The caller unmounts. */
void th_mount_ext4(const char *dir, const char *opts);

/* A field of /proc/<pid>/status ("VmRSS", "VmHWM", "VmData"), in KiB;
 * fails the test when it is missing. */
long th_vm_kb(pid_t pid, const char *field);

#endif
