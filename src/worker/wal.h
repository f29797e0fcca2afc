/* The commit log (wal.c): records and their files, nothing above. */
#ifndef USHI_WK_WAL_H
#define USHI_WK_WAL_H

#include "net/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ush_worker;
struct wk_thread;

/* A record of the worker's durable state. */
enum wk_rec_type {
	WK_REC_CLAIM = 1,  /* app claims shuffle */
	WK_REC_COMMIT = 2, /* (shuffle, map, attempt) committed */
	WK_REC_DROP = 3,   /* shuffle dropped */
};

struct wk_rec {
	uint8_t type;
	uint32_t shuffle, map, attempt;
	char app[USHI_PROTO_APP_MAX + 1];
};

/* The caller holds wk->lock around each of these but wk_log_open() and
 * wk_log_replay(). */
int wk_log_open(struct wk_thread *t);
/* What replay does with each record, in sequence order: 0 or -errno. */
typedef int (*wk_rec_fn)(struct ush_worker *wk, const struct wk_rec *r);
/* Reads the snapshot and every thread's log, skipping (and reporting)
 * corrupt records, and hands each record to apply. Returns 0 or the
 * first error. */
int wk_log_replay(struct ush_worker *wk, wk_rec_fn apply);
/* Appends the n records at r to t's log with one write and syncs it. */
int wk_log_append(struct wk_thread *t, const struct wk_rec *r, size_t n);
/* Whether most of the snapshot and logs is dead (lock held). */
bool wk_log_compact_due(const struct ush_worker *wk);
/* Writes the n records at r (the live state) as the snapshot and empties
 * every thread's log; a failure is logged and returned, and the logs
 * stand. Lock held. */
int wk_log_compact(struct ush_worker *wk, const struct wk_rec *r, size_t n);

#endif
