/* The durable state (state.c): changes logged, then applied. */
#ifndef USHI_WK_STATE_H
#define USHI_WK_STATE_H

#include "worker/wal.h"

#include <stdbool.h>

/* The caller holds wk->lock around each of these but wk_app_expire(),
 * wk_drop_files() and wk_sweep(). */
/* Applies a logged record to the tables. */
int wk_rec_apply(struct ush_worker *wk, const struct wk_rec *r);
/* Replay's apply: wk_rec_apply(), and a commit gives an unowned shuffle
 * its application. */
int wk_rec_replay(struct ush_worker *wk, const struct wk_rec *r);
/* The records that rebuild the live state (claims, then commits, those
 * whose record is with the committer included): fills out (room for n)
 * and returns how many there are. */
size_t wk_live_records(struct ush_worker *wk, struct wk_rec *out, size_t n);
/* Logs the n records (claims or drops of shuffles none of which is
 * busy; one group, waited for), compacting first when most of the log
 * is dead. wk->lock is released while the committer syncs and held
 * again on return, so the caller rereads what it read before, and
 * applies the records before it releases the lock. Their shuffles are
 * busy meanwhile: a claim or drop of one waits (wk_busy_wait()). A
 * dropped shuffle stays busy until wk_drop_finish(). */
int wk_rec_log(struct ush_worker *wk, const struct wk_rec *r, size_t n);
/* Is a claim or drop of the shuffle being logged (and, for a drop, its
 * files removed)? wk_dropping(): a drop. */
bool wk_busy(struct ush_worker *wk, uint32_t shuffle);
bool wk_dropping(struct ush_worker *wk, uint32_t shuffle);
/* Waits (wk->lock released meanwhile) until the shuffle is not busy. */
void wk_busy_wait(struct ush_worker *wk, uint32_t shuffle);

/* Queues a compaction of the log when most of it is dead and every
 * record logged so far is applied. */
void wk_compact_maybe(struct ush_worker *wk);
/* At start, after a replay that dropped torn commits (wk->torn): the
 * live state becomes the snapshot and the log is emptied, so that no
 * later record's watermark covers a torn record. 0 or an error. */
int wk_compact_torn(struct ush_worker *wk);
/* Logs (one write, wk->lock released meanwhile as in wk_rec_log()) and
 * applies the drops of the n shuffles, none of them busy. On success the
 * caller releases the lock and calls wk_drop_finish(): until then the
 * shuffles stay busy, so that a new claim of one waits instead of
 * writing files the drop then removes. */
int wk_drop_locked(struct wk_thread *t, const uint32_t *shuffles, size_t n);
/* Removes the shuffle's files (those of a shuffle never owned too). */
void wk_drop_files(struct wk_thread *t, uint32_t shuffle);
/* Without wk->lock: wk_drop_files() for each of the n shuffles, then
 * wk_drop_end(), which takes the lock to end their busy marks. */
void wk_drop_finish(struct wk_thread *t, const uint32_t *shuffles, size_t n);
void wk_drop_end(struct ush_worker *wk, const uint32_t *shuffles, size_t n);
/* Drops the shuffles of every application silent for the TTL, and
 * removes those applications. */
void wk_app_expire(struct wk_thread *t);
/* Thread 0, each pass while decommissioning (takes wk->lock): logs the
 * shuffles left when their number changes, and stops the worker once
 * none is. A claim checks wk->decom under the lock, and one being
 * logged counts as a shuffle left, so none can follow a pass that saw
 * nothing left. */
void wk_decommission_pass(struct wk_thread *t);
/* At start, the commit log replayed and the committer running: drops
 * every owned shuffle with no attempt committed (its writers left before
 * the stop: nothing in it can be read), as one logged drop; 0 or an
 * error. */
int wk_drop_uncommitted(struct ush_worker *wk);
/* At start: removes shuffle directories no application owns. */
void wk_sweep(struct ush_worker *wk);

#endif
