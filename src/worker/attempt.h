/* The shared attempt table (attempt.c). */
#ifndef USHI_WK_ATTEMPT_H
#define USHI_WK_ATTEMPT_H

#include <stdbool.h>
#include <stdint.h>

struct ush_worker;
struct wk_rec;

/* An attempt a writer opened here, in the table until its shuffle is
 * dropped. Workers elect no winner: readers ask for the attempts their
 * map statuses name. */
enum wk_attempt_state {
	WK_OPEN = 1,   /* a connection is writing it */
	WK_ABANDONED,  /* its writer left without a commit */
	WK_COMMITTED,  /* synced and logged (MAPPER_END) */
	WK_GONE,       /* dropped: a tombstone until the table grows */
};

struct wk_attempt {
	uint32_t shuffle, map, attempt;
	uint8_t state;  /* enum wk_attempt_state; 0: a free slot */
	bool logging;   /* WK_OPEN: its commit record is with the
			   committer (a snapshot counts it committed) */
	const struct wk_rec *rec; /* while logging: that record (its
				     connection's) */
	uint64_t owner; /* WK_OPEN: the id of the connection writing it */
};

/* The caller holds wk->lock around each of these. */
struct wk_attempt *wk_attempt_find(struct ush_worker *wk, uint32_t shuffle,
				   uint32_t map, uint32_t attempt);
int wk_attempt_set(struct ush_worker *wk, uint32_t shuffle, uint32_t map,
		   uint32_t attempt, enum wk_attempt_state state);
/* Recounts every owner's live attempts (wk_owner.live) from the table:
 * at start, once the commit log is replayed. */
void wk_attempt_live(struct ush_worker *wk);
/* Moves e (in the table) to state, counting it for its application. */
void wk_attempt_mark(struct ush_worker *wk, struct wk_attempt *e,
		     enum wk_attempt_state state);
/* Forgets the shuffle's attempts; call it before wk_owner_del(), which
 * ends the application's claim its attempts are counted against. */
void wk_attempt_drop(struct ush_worker *wk, uint32_t shuffle);
void wk_attempt_free(struct ush_worker *wk);

#endif
