/*
 * Zero heap allocations per batch in steady state. This binary interposes
 * the C allocator (malloc and friends, forwarded to glibc's __libc_*
 * entry points) and counts every call, the library's, its codecs' and
 * liburing's alike. After a warm-up, N more batches through every
 * hand-off (write, swap, copy), target (null, disk) and codec (none, lz4,
 * zstd) must make no allocation at all, and ush_alloc_count() must not
 * move either.
 *
 * Under AddressSanitizer or ThreadSanitizer the sanitizer owns malloc: an
 * interposer here would hand it memory it never saw. There only the
 * library's own counter (ush_alloc_count(), fed by every allocation the
 * library and its codec contexts make) is checked.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||   \
	__has_feature(memory_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define WARMUP 300
#define NBATCH 2000
#define PUSH (16u << 10)
#define NPARTS 16

static atomic_ulong heap_allocs, heap_frees;

#if !SANITIZED
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static void counted(void)
{
	atomic_fetch_add_explicit(&heap_allocs, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
	counted();
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	counted();
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	counted();
	return __libc_realloc(p, n);
}

void free(void *p)
{
	if (p)
		atomic_fetch_add_explicit(&heap_frees, 1, memory_order_relaxed);
	__libc_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	counted();
	if (!align || (align & (align - 1)) || align % sizeof(void *))
		return EINVAL;
	void *p = __libc_memalign(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
	counted();
	return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n)
{
	counted();
	return __libc_memalign(align, n);
}

void *valloc(size_t n)
{
	counted();
	return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), n);
}
#endif

static unsigned long allocs(void)
{
	return atomic_load(&heap_allocs);
}

static unsigned long frees(void)
{
	return atomic_load(&heap_frees);
}

enum mode { M_WRITE, M_SWAP, M_COPY };

/* Compressible record source: a repeated 64-byte pattern with a counter
 * stamped every 256 bytes, so batches shrink but are not all alike. */
static uint8_t src[PUSH];

static void make_src(void)
{
	th_fill(src, 64, 42);
	for (size_t k = 64; k < sizeof(src); k++)
		src[k] = src[k - 64];
	for (size_t k = 0; k + 4 <= sizeof(src); k += 256)
		memcpy(src + k, &k, 4);
}

/* Fills a batch of up to cap bytes with records from src. */
static size_t fill(uint8_t *b, size_t cap, uint32_t *nrec, unsigned salt)
{
	size_t off = 0;
	*nrec = 0;
	for (unsigned j = 0;; j++) {
		uint32_t len = 100 + (salt * 7 + j * 61) % 600;
		if (off + USH_RECORD_HDR_SIZE + len > cap)
			break;
		off += ush_record_put(b + off, src + (salt + j) % 512, len);
		(*nrec)++;
	}
	return off;
}

struct run {
	ush_writer *w;
	enum mode mode;
	void *buf;     /* swap: the buffer the caller holds */
	size_t cap;
	uint8_t *copy; /* copy: a prepared batch */
	size_t clen;
	uint32_t cnrec;
	unsigned salt;
	int err;
};

static uint64_t batches(ush_writer *w)
{
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	return st.batches;
}

/* Drives n more framed batches through the hand-off under test. No
 * cmocka call in here: a failed assertion would allocate. */
static void drive(struct run *r, uint64_t n)
{
	uint64_t end = batches(r->w) + n;
	while (!r->err && batches(r->w) < end) {
		unsigned s = r->salt++;
		uint32_t part = s % NPARTS, nrec;
		switch (r->mode) {
		case M_WRITE: {
			uint32_t len = 100 + (s * 37) % 900;
			r->err = ush_writer_write(r->w, part, src + s % 512,
						  len);
			break;
		}
		case M_SWAP: {
			size_t len = fill(r->buf, r->cap - s % 64, &nrec, s);
			r->err = ush_writer_swap(r->w, part, &r->buf, len,
						 nrec);
			break;
		}
		case M_COPY:
			r->err = ush_writer_copy(r->w, part, r->copy, r->clen,
						 r->cnrec);
			break;
		}
	}
}

static void steady_state(enum ush_target target, enum ush_codec codec,
			 enum mode mode)
{
	const char *dir = th_scratch("alloc");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = PUSH;
	ro.pool_bytes = 4u << 20;
	ro.codec = codec;
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 1, .map = 0,
		.partitions = NPARTS, .target = target, .dir = dir,
		.direct = 1};
	ush_ring *ring;
	struct run r = {.mode = mode};

	/* The interposer sees the library's setup allocations. */
	unsigned long a0 = allocs();
	uint64_t u0 = ush_alloc_count();
	th_ok(ush_ring_create(&ring, &ro));
	th_ok(ush_writer_open(&r.w, ring, &wo));
	uint64_t setup = ush_alloc_count() - u0;
	assert_true(setup >= 3); /* ring, pool descriptors, writer, ... */
	if (!SANITIZED)
		assert_true(allocs() - a0 >= setup);

	if (mode == M_SWAP)
		th_ok(ush_writer_acquire(r.w, &r.buf, &r.cap));
	if (mode == M_COPY) {
		r.copy = malloc(PUSH);
		assert_non_null(r.copy);
		r.clen = fill(r.copy, PUSH - USH_FRAME_HDR_SIZE, &r.cnrec, 3);
	}
	drive(&r, WARMUP);
	th_ok(r.err);

	uint64_t b0 = batches(r.w);
	u0 = ush_alloc_count();
	a0 = allocs();
	unsigned long f0 = frees();
	drive(&r, NBATCH);
	unsigned long da = allocs() - a0, df = frees() - f0;
	uint64_t du = ush_alloc_count() - u0;
	uint64_t nb = batches(r.w) - b0;
	th_ok(r.err);

	assert_true(nb >= NBATCH);
	if (du || (!SANITIZED && (da || df)))
		fail_msg("%s target, codec %s, %s hand-off: %llu batches made "
			 "%lu heap allocations and %lu frees (library count "
			 "%llu)",
			 target == USH_TARGET_DISK ? "disk" : "null",
			 ush_codec_name(codec),
			 mode == M_WRITE  ? "write"
			 : mode == M_SWAP ? "swap"
					  : "copy",
			 (unsigned long long)nb, da, df,
			 (unsigned long long)du);

	/* The codec ran on these batches; they were not stored raw. */
	struct ush_writer_stats st;
	ush_writer_stats(r.w, &st);
	if (codec != USH_CODEC_NONE)
		assert_true(st.stored_raw == 0 &&
			    st.frame_bytes < st.raw_bytes);

	if (mode == M_SWAP)
		th_ok(ush_writer_release(r.w, r.buf));
	th_ok(ush_writer_commit(r.w, NULL));
	ush_writer_free(r.w);
	ush_ring_free(ring);
	free(r.copy);
	th_rmrf(dir);
}

static void all_modes(enum ush_target target, enum ush_codec codec)
{
	steady_state(target, codec, M_WRITE);
	steady_state(target, codec, M_SWAP);
	steady_state(target, codec, M_COPY);
}

/* The counter itself works: an allocation here is seen. */
static void interposer_counts(void **state)
{
	(void)state;
	if (SANITIZED) {
		/* The sanitizer owns malloc here; see the top comment. */
		uint64_t u0 = ush_alloc_count();
		ush_ring *ring;
		th_ok(ush_ring_create(&ring, NULL));
		ush_ring_free(ring);
		assert_true(ush_alloc_count() > u0);
		return;
	}
	void *(*volatile m)(size_t) = malloc;
	unsigned long a0 = allocs(), f0 = frees();
	void *p = m(24);
	assert_non_null(p);
	free(p);
	assert_int_equal(allocs() - a0, 1);
	assert_int_equal(frees() - f0, 1);
}

#define STEADY(name, target, codec)                                          \
	static void name(void **state)                                       \
	{                                                                    \
		(void)state;                                                 \
		all_modes(target, codec);                                    \
	}
STEADY(null_none, USH_TARGET_NULL, USH_CODEC_NONE)
STEADY(null_lz4, USH_TARGET_NULL, USH_CODEC_LZ4)
STEADY(null_zstd, USH_TARGET_NULL, USH_CODEC_ZSTD)
STEADY(disk_none, USH_TARGET_DISK, USH_CODEC_NONE)
STEADY(disk_lz4, USH_TARGET_DISK, USH_CODEC_LZ4)
STEADY(disk_zstd, USH_TARGET_DISK, USH_CODEC_ZSTD)

int main(void)
{
	make_src();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(interposer_counts, th_teardown),
		cmocka_unit_test_teardown(null_none, th_teardown),
		cmocka_unit_test_teardown(null_lz4, th_teardown),
		cmocka_unit_test_teardown(null_zstd, th_teardown),
		cmocka_unit_test_teardown(disk_none, th_teardown),
		cmocka_unit_test_teardown(disk_lz4, th_teardown),
		cmocka_unit_test_teardown(disk_zstd, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
