/* Shared by the library's modules; never installed. */
#ifndef USHI_INTERNAL_H
#define USHI_INTERNAL_H

#include "core/prefix.h"

#define USH_BUILDING 1
#define USH_UNSTABLE_API 1
#include "ushuffle/ushuffle.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a) (((x) + (a)-1) & ~((__typeof__(x))(a)-1))

/* Every buffer address, size and file offset is a multiple of this, which
 * covers O_DIRECT on 512-byte and 4 KiB logical-block devices. */
#define USHI_ALIGN 4096u

/* Partitions of a shuffle: 1 .. this (ush_writer_opts.partitions). */
#define USHI_PARTS_MAX (1u << 24)

/* error.c: records the detailed message for ush_last_error(); returns err
 * so callers can `return ushi_fail(err, ...)`. */
int ushi_fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Same, with a message that already names the error. */
int ushi_fail_msg(int err, const char *msg);
/* Appends ": <ush_strerror(err)>" to the n bytes of msg (size bytes in
 * all), unless they end with it already (a worker's ERROR text, an
 * errno said by the caller): the cause once, never twice. */
static inline void ushi_add_cause(char *msg, size_t size, int n, int err)
{
	const char *why = ush_strerror(err);
	size_t k = strlen(why);
	if (n < 0 || (size_t)n >= size ||
	    ((size_t)n >= k && !strcmp(msg + n - k, why)))
		return;
	snprintf(msg + n, size - (size_t)n, ": %s", why);
}
void ushi_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Aborts with "ushuffle: BUG: <msg>": for ownership violations. */
_Noreturn void ushi_panic(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* fork.c: who calls. ushi_tid() is the calling thread's id. Each object
 * keeps ushi_fork_gen from its creation: a fork() child bumps it, so an
 * object of the parent is ushi_forked() there, and every call that could
 * reach its files, connections or ring returns ushi_fork_refused(who)
 * (-EPERM) instead, while its free releases only the child's memory and
 * descriptors. */
extern unsigned ushi_fork_gen;
extern _Thread_local pid_t ushi_tid_cache;
pid_t ushi_tid_slow(void);
int ushi_fork_refused(const char *who);
static inline pid_t ushi_tid(void)
{
	pid_t t = ushi_tid_cache;
	return likely(t) ? t : ushi_tid_slow();
}
static inline bool ushi_forked(unsigned gen)
{
	return unlikely(gen != ushi_fork_gen);
}

/* api.c: extensible structs (ushuffle.h). ushi_struct_init() copies the
 * first size bytes of defaults (ours bytes) to a caller's struct of size
 * bytes and sets its size field. ushi_opts_load() fills dst (ours bytes)
 * with defaults, then with the fields a caller's src has (NULL: none);
 * -EINVAL for a struct never initialised, -E2BIG when src sets fields
 * newer than this library. */
void ushi_struct_init(void *dst, size_t size, const void *defaults,
		      size_t ours);
int ushi_opts_load(void *dst, const void *defaults, size_t ours,
		   const void *src, const char *what);

/* stats.c: the process-wide counters of ush_lib_stats(). */
struct ushi_counters {
	atomic_uint_fast64_t writers_committed, writers_aborted, readers;
	atomic_uint_fast64_t records_written, bytes_written, bytes_stored;
	atomic_uint_fast64_t records_read, bytes_read;
	atomic_uint_fast64_t net_connects, net_connect_errors, net_reuses, errors;
	atomic_uint_fast64_t net_recv_bufs;
};
extern struct ushi_counters ushi_counters;
#define USHI_COUNT(field, n)                                                 \
	atomic_fetch_add_explicit(&ushi_counters.field, (n),                 \
				  memory_order_relaxed)
/* A writer's or reader's totals, added when it is freed. */
void ushi_count_writer(const struct ush_writer_stats *st, bool committed);
void ushi_count_reader(const struct ush_reader_stats *st);

/* alloc.c: counted heap allocation; every library allocation goes here. */
void *ushi_malloc(size_t n);
void *ushi_calloc(size_t n, size_t size);
void *ushi_aligned_alloc(size_t n); /* USHI_ALIGN-aligned */
char *ushi_strdup(const char *s);
void ushi_free(void *p);
/* Makes *p (of *cap bytes) hold n bytes, replacing it by a power-of-two
 * sized block when it is smaller; the contents are not kept. */
int ushi_grow(uint8_t **p, size_t *cap, size_t n);
/* Array p of *cap elements of size bytes, full: a copy of its elements
 * in one twice as large (64 for the first), p freed, *cap updated.
 * Returns the new array, or NULL (p untouched) when out of memory. */
void *ushi_array_grow(void *p, size_t *cap, size_t size);

static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}
static inline uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static inline uint64_t ushi_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* fileio.c: pwrite() of all n bytes at off (EINTR and short writes
 * resumed): 0 or -errno. */
int ushi_pwrite_all(int fd, const void *p, size_t n, uint64_t off);
/* pread() of all n bytes at off: 0, -errno, or USH_ECORRUPT where the
 * file ends first (it is shorter than its index says). */
int ushi_pread_all(int fd, void *p, size_t n, uint64_t off);
/* n random bytes from getrandom(): 0, or -errno failing with a message
 * naming what wanted them. */
int ushi_random(void *p, size_t n, const char *what);
/* Replaces name in directory dirfd by the n bytes at p, whole or not at
 * all: written to name.tmp, synced, renamed over name, and the directory
 * synced. 0 or -errno (the temporary removed where the rename was not
 * done). */
int ushi_replace_at(int dirfd, const char *name, const void *p, size_t n);
/* fsync() of the directory at path: 0 or -errno, the message saying
 * which of open and fsync failed, after "who: ". */
int ushi_sync_dir(const char *path, const char *who);

/* The index of the first of n structs of size bytes at base, sorted by
 * the uint32_t at offset off of each, whose key is >= key (n if none). */
static inline size_t ushi_lower_bound(const void *base, size_t n,
				      size_t size, size_t off, uint32_t key)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint32_t k;
		memcpy(&k, (const char *)base + mid * size + off, sizeof(k));
		if (k < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static inline size_t pow2_ceil(size_t v)
{
	return v <= 1 ? 1 : (size_t)1 << (64 - __builtin_clzl(v - 1));
}

#endif
