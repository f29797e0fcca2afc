/*
 * The worker's log lines and counters (log.c): the bottom layer, which
 * every other one calls and which calls none.
 */
#ifndef USHI_WK_LOG_H
#define USHI_WK_LOG_H

#include "ushuffle/worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct ush_worker;

/* Log lines per second of one kind (one format string), beyond which
 * they are counted and reported as suppressed. */
#define WK_LOG_BURST 10u
#define WK_LOG_KINDS 64u

/* A kind of log line (its format string) and its rate this second. */
struct wk_log_kind {
	const char *fmt;
	uint64_t second;      /* ushi_now_ns() / 1e9 of the current window */
	unsigned lines;       /* printed in it */
	unsigned long suppressed; /* not printed since the last report */
};

/* The counters behind ush_worker_stats() (worker.c): relaxed atomics,
 * bumped where the event happens, but the histogram, under its lock;
 * the gauges are computed when read. */
struct wk_metrics {
	atomic_uint_fast64_t bytes_in, bytes_out, frames_in, frames_out;
	atomic_uint_fast64_t bytes_in_place, fetch_heap_allocs, fetch_reads;
	atomic_uint_fast64_t accepted, refused, commits, drops, expiries;
	/* A scrape must see count, sum and buckets of the same syncs
	 * (count == +Inf bucket, sum within the buckets' bounds), which
	 * counters loaded one by one do not give; one sync a commit is
	 * rare enough for a lock. */
	pthread_mutex_t sync_lock;
	uint64_t sync_count, sync_ns;
	uint64_t sync_bucket[USH_WORKER_SYNC_BUCKETS];
	atomic_uint_fast64_t errors[USH_WORKER_ERR_KINDS];
};

#define WK_COUNT(wk, field, n)                                               \
	atomic_fetch_add_explicit(&(wk)->m.field, (n), memory_order_relaxed)


/* Logs at level (0 error, 1 info, 2 debug) unless the worker's level is
 * lower. At most WK_LOG_BURST lines of one fmt per second are printed;
 * the rest are counted, and wk_log_flush() reports them. */
void wk_log(struct ush_worker *wk, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Counts an error of the kind that code (an errno or USH_E*) means. */
void wk_count_error(struct ush_worker *wk, int code);
/* Counts a commit's sync time in the histogram. */
void wk_count_sync(struct ush_worker *wk, uint64_t ns);
/* Fails with err, the message fmt as it is: a refused setting says what
 * is wrong and what is accepted, so no ": Invalid argument" is added
 * (as ushi_fail() does). Returns err. */
int wk_refuse(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Reports lines suppressed in seconds that have ended. Cheap when none. */
void wk_log_flush(struct ush_worker *wk);

#endif
