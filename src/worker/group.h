/* The commit log's group commit (group.c). */
#ifndef USHI_WK_GROUP_H
#define USHI_WK_GROUP_H

#include "worker/wal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct ush_worker;
struct wk_thread;

/* A request to the committer: n records to append, or (compact) the
 * live state to write as the snapshot. */
struct wk_logreq {
	struct wk_logreq *next;
	const struct wk_rec *r;
	size_t n;
	bool compact;          /* r is ushi_malloc()ed: the committer frees
				  it */
	struct wk_thread *t;   /* handed back to t's loop (wk_group_take());
				  NULL: a waiter (wk_group_log()), or a
				  compaction nobody waits for */
	void *owner;           /* the submitter's */
	int res;               /* 0 once durable, or -errno */
	bool done;
	uint64_t lsn;          /* its first record's sequence number */
};

/* A commit record logged before its data was known durable (the
 * committer adds it, its thread settles it): the watermark of the
 * records after it stays below it. */
struct wk_unsettled {
	uint64_t lsn;
	uint32_t shuffle;
};

/* The committer and its queue (in struct ush_worker). */
struct wk_group {
	pthread_t tid;
	bool running, stop;
	pthread_mutex_t lock;  /* the queue, never held across I/O */
	pthread_cond_t work, done;
	struct wk_logreq *head, **tail;
	uint8_t *buf;          /* a group's encoded records */
	size_t cap;
	bool failed;           /* an append failed (the committer's) */
	bool commits_logged;   /* this run logged commit records */
	struct wk_unsettled *uns; /* ascending lsn (under lock) */
	size_t nuns, cuns;
};

void wk_group_init(struct wk_group *g);
void wk_group_fini(struct wk_group *g);
/* Opens the commit log and starts the committer: 0 or -errno. */
int wk_group_start(struct ush_worker *wk);
/* Logs what is queued, then stops the committer (no-op if none). */
void wk_group_stop(struct ush_worker *wk);
/* Queues req (with req->t set): t's loop gets it back from
 * wk_group_take() once its records are durable or have failed, and is
 * woken for it. The caller keeps req and its records until then. */
void wk_group_submit(struct ush_worker *wk, struct wk_logreq *req);
/* Appends the n records and waits until they are durable: 0 or -errno.
 * Blocks the caller: at start, not on a loop. */
int wk_group_log(struct ush_worker *wk, const struct wk_rec *r, size_t n);
/* wk_group_log() in two steps, so that a caller queues its records
 * under wk->lock (in order with the tables and the compactions) and
 * waits without it: queues req (req->r and req->n set; req->t is made
 * NULL), then wk_group_wait() returns once they are durable: 0 or
 * -errno. req and its records stay the caller's until then. */
void wk_group_queue(struct ush_worker *wk, struct wk_logreq *req);
int wk_group_wait(struct ush_worker *wk, struct wk_logreq *req);
/* Queues a compaction with the live state r (n records, ushi_malloc()ed,
 * the committer's from here on). The caller holds wk->lock, has put in
 * r every record queued so far (applied to the tables, or a commit
 * still with the committer), and has set wk->compact_queued, which is
 * cleared once the compaction ran (or could not be queued). After an
 * append failed, none runs: r could name the commit that failed. */
void wk_group_compact(struct ush_worker *wk, struct wk_rec *r, size_t n);
/* The commit record numbered lsn is durable with its data: the
 * watermark may pass it. A commit whose data failed is never settled
 * (replay checks it), until its shuffle is dropped. */
void wk_group_settle(struct ush_worker *wk, uint64_t lsn);
/* The shuffle's drop is logged: its unsettled commits no longer hold
 * the watermark back (replay drops them with it). */
void wk_group_forget(struct ush_worker *wk, uint32_t shuffle);
/* t's requests that are done, in the order they were logged (NULL:
 * none); takes no lock. t's loop only. */
struct wk_logreq *wk_group_take(struct wk_thread *t);
/* Waits until none of t's requests is with the committer. */
void wk_group_quiesce(struct wk_thread *t);

#endif
