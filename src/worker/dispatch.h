/* Protocol dispatch: what each frame does (dispatch.c). */
#ifndef USHI_WK_DISPATCH_H
#define USHI_WK_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wk_conn;
struct ushi_frame;

/* Whether c may send a frame of this type now (its header is all that
 * came); fails c otherwise. */
bool wk_type_ok(struct wk_conn *c, unsigned type);
/* Checks and acts on the whole frame f at frame. Returns 1 for DATA the
 * writer may store (counted against its quota): the caller stores it
 * and reports with wk_data_stored(); 0 otherwise (done, or c failed). */
int wk_dispatch(struct wk_conn *c, const struct ushi_frame *f,
		const uint8_t *frame);
/* The DATA frame f that wk_dispatch() passed was stored (ret 0: credit
 * for the writer) or not (ret: c fails, its bytes leave the quota). */
void wk_data_stored(struct wk_conn *c, const struct ushi_frame *f, int ret);
/* Is c's attempt still its own (not dropped since)? */
bool wk_still_mine(struct wk_conn *c);
/* A commit's next steps: its record to the committer once its frames'
 * syncs have started, then its end once they are done and the record is
 * back (the loop calls it every pass). */
void wk_commit_pump(struct wk_conn *c);
/* The committer logged c's commit record (res 0) or failed to: once its
 * data is durable too, the attempt is committed and acknowledged, or c
 * fails. */
void wk_commit_logged(struct wk_conn *c, int res);
/* A closing writer's attempt, unless committed, becomes abandoned.
 * Returns false, and does nothing, while c's commit record is with the
 * committer: c must not close (nor be freed) before it is back. */
bool wk_conn_leave(struct wk_conn *c);

#endif
