/* The shuffle logs and their buffers (store.c). */
#ifndef USHI_WK_STORE_H
#define USHI_WK_STORE_H

#include "worker/files.h"

struct ushi_frame;

/* Index entries are written in batches of at least this many bytes
 * (and at every sync). */
#define WK_IDX_BATCH (64u << 10)

/* Copies frame (f, received whole) into its shuffle's log buffer. */
int wk_store_append(struct wk_thread *t, const struct ushi_frame *f,
		    const uint8_t *frame);
/* A DATA frame in a received buffer: its offset there and its entry. */
struct wk_rent {
	uint32_t rel, len, partition, map, attempt;
};
/*
 * Writes pool buffer b as it was received (conn.c's in-place receive) to
 * the log of shuffle at the next aligned offset: its first `have` bytes
 * hold the n DATA frames ents (in order) and other bytes around them,
 * which are indexed as holes. The ring owns b from here on, whatever the
 * result. Returns 0 or the shuffle's error.
 */
int wk_store_region(struct wk_thread *t, uint32_t shuffle, struct ushi_buf *b,
		    uint32_t have, const struct wk_rent *ents, size_t n);
/*
 * A commit's sync, through the ring: every frame of the shuffle received
 * so far on this thread is durable once its ticket is done. begin asks
 * for a round (the tail block written, the log synced, then its index
 * entries written and synced, then new directories) and returns its
 * ticket; commits that come while a round runs share the next one. The
 * loop calls pump every pass to take the rounds on as their ops
 * complete; check says 0 once the ticket is done, -EINPROGRESS before,
 * -ENOENT when the shuffle was dropped meanwhile, or the shuffle's
 * first failed write or sync here.
 */
int wk_store_sync_begin(struct wk_thread *t, uint32_t shuffle,
			uint64_t *ticket);
/* Like check, but 0 as soon as the ticket's syncs have started (its
 * frames and index entries are written): a commit's record is logged
 * from then on, in the same journal commit as its data where it can. */
int wk_store_sync_issued(struct wk_thread *t, uint32_t shuffle,
			 uint64_t ticket);
int wk_store_sync_check(struct wk_thread *t, uint32_t shuffle,
			uint64_t ticket);
void wk_store_sync_pump(struct wk_thread *t);
/* Syncs every shuffle, waiting (the thread's end); returns the first
 * failure that is new. */
int wk_store_sync(struct wk_thread *t);
/* The directory of shuffle's log on this thread (--dir's list when it
 * has none yet), for messages. */
const char *wk_store_dir(struct wk_thread *t, uint32_t shuffle);
void wk_store_drop(struct wk_thread *t, uint32_t shuffle);
void wk_store_close(struct wk_thread *t);
/* Frees a log buffer for someone else (a FETCH's read): waits for a
 * write, or parks the oldest idle log's buffer. Returns 0, or -EAGAIN
 * when there is nothing to free. */
int wk_store_reclaim(struct wk_thread *t);
/* How many thread numbers may have logs of shuffle here: this run's
 * threads and those of an earlier run with more (found by listing s<S>
 * once per thread and shuffle). Returns 0 or -errno. */
int wk_store_fetch_threads(struct wk_thread *t, uint32_t shuffle,
			   unsigned *n);

#endif
