/* Crash points of the commit order, for the kill -9 tests only
 * (USHUFFLED_TEST_CRASH=step:n, read at ush_worker_create()). */
#ifndef USHI_WK_CRASH_H
#define USHI_WK_CRASH_H

#include "worker/thread.h"

#include <signal.h>

/* The steps of a commit (docs/design.md, "Group commit"). */
enum wk_crash_step {
	WK_CRASH_ISSUED = 1, /* the data's syncs started, record not queued */
	WK_CRASH_WRITTEN,    /* the record written to the log, not synced */
	WK_CRASH_LOGGED,     /* the record synced, not handed back */
	WK_CRASH_DATA,       /* the thread saw the data synced */
	WK_CRASH_ACKED,      /* both durable, the ACK not yet sent */
};

/* Parses "step:n" (n from 1): 0, or -EINVAL. */
int wk_crash_parse(struct ush_worker *wk, const char *spec);

/* k more commits reached step: the process dies at the n-th. */
static inline void wk_crash(struct ush_worker *wk, int step, unsigned k)
{
	if (wk->crash_step != step || !k)
		return;
	unsigned before = atomic_fetch_add(&wk->crash_seen, k);
	if (before < wk->crash_n && before + k >= wk->crash_n)
		raise(SIGKILL);
}

#endif
