/* Which worker each --dir directory belongs to (dirid.c). */
#ifndef USHI_WK_DIRID_H
#define USHI_WK_DIRID_H

struct ush_worker;
struct wk_dir;

/* The identity marker in each directory (docs/protocol.md §4). */
#define WK_DIRID "ushuffled.id"

/*
 * Proves that --dir's directories (opened and locked) are one worker's
 * and finds its home (the commit log's), before anything there is read
 * or removed. Refuses, naming the directory: a list without the home or
 * without a directory that may hold shuffle logs (-EINVAL), another
 * worker's directory (-EINVAL), a marker that does not read
 * (USH_ECORRUPT). Adopts new empty directories and, where none has a
 * marker yet, an earlier version's directories. Moves the home to
 * wk->dirs[0] and writes every directory's marker, the home's first.
 */
int wk_dirid_check(struct ush_worker *wk);
/* Records in the home's marker that d may hold shuffle logs (synced),
 * before the first one is made there: a restart without d is refused
 * from then on. Returns 0 or -errno. */
int wk_dirid_hold(struct ush_worker *wk, struct wk_dir *d);

#endif
