/* --dir and the open files of the shuffle logs (files.c). */
#ifndef USHI_WK_FILES_H
#define USHI_WK_FILES_H

#include "worker/list.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct ush_worker;
struct wk_thread;
struct ushi_buf;

/* Log writes of one shuffle log in flight at once (store.c). */
#define WK_LOG_QD 8
/* An index entry's bytes (docs/format.md, "The worker's log"). */
#define WK_IDX_ENTRY 20u
/* Partition directories cached per worker, all threads together. */
#define WK_PDIR_BUDGET (64u << 20)

/*
 * A shuffle's log on one thread (store.c): "s<S>/t<T>.log", the DATA
 * frames the thread received for S packed back to back, and
 * "s<S>/t<T>.idx", one entry per frame. Frames are copied into buf (a
 * pool buffer whose first byte is at file offset base, aligned) and
 * written at aligned offsets; a sync writes the partial tail block
 * padded and keeps it in buf, so the next write rewrites that block
 * from its start. Its files may be closed (the open files are a
 * bounded cache): the rest stays.
 */
/* Sync rounds of one log whose syncs may be in flight at once: the next
 * round writes while the one before syncs. */
#define WK_SY_FLIGHT 2

struct wk_shuf {
	struct wk_shuf *hnext;
	struct wk_thread *t;
	uint32_t shuffle;
	struct wk_link lru;     /* t->lru while its files are open */
	struct wk_link bufq;    /* t->bufq while buf != NULL */
	struct wk_dir *dir;     /* where its files are (set at the first
				   open) */
	int fd, slot, ifd;      /* log (and its ring slot), index; or -1 */
	bool opened;            /* the files were opened once (and checked) */
	bool direct;            /* the log is O_DIRECT: aligned writes */
	bool unsynced, iunsynced; /* written since their last fdatasync */
	uint64_t end;           /* the log's logical end: the next frame */
	uint64_t base;          /* file offset of buf->data[0] */
	uint64_t written;       /* log bytes below it are written */
	struct ushi_buf *buf;   /* the log buffer, or NULL */
	uint32_t len;           /* bytes of buf in use: end - base */
	uint8_t *ipend;         /* index entries not yet written */
	size_t ilen, icap;
	uint64_t ioff;          /* log offset of the first one's frame */
	uint64_t iend;          /* the index file's end */
	struct { uint64_t off, end; bool done; } wq[WK_LOG_QD];
	unsigned wq_head, wq_n; /* log writes in flight, oldest first */
	uint64_t wq_sub, wq_done; /* log writes submitted; done, counted
				     as the oldest in flight completes */
	struct ushi_op *pad;    /* a round's write of the padded tail block,
				   in flight: the next write of that block
				   is held until it is done (the two could
				   land in either order) */
	struct { struct ushi_op *op; struct ushi_buf *b; uint8_t *mem;
		 uint64_t off; uint32_t n; } held;
	unsigned writes;        /* log and index writes (and syncs) in
				   flight */
	unsigned iwrites;       /* index writes in flight */
	/* Commits' sync rounds (store.c): asked for, started, done; the
	 * step of the round writing, the syncs in flight (all rounds), and
	 * the rounds syncing, oldest first: the tickets each covers, and
	 * its syncs. */
	uint64_t sy_req, sy_run, sy_done;
	uint64_t sy_issued;     /* rounds whose syncs have started */
	uint8_t sy_step;
	unsigned sy_ops;
	struct { uint64_t run; unsigned ops; } sy_fl[WK_SY_FLIGHT];
	unsigned sy_fl_head, sy_fl_n;
	uint64_t sy_wq;         /* the round's log writes: done once wq_done
				   reaches it */
	bool sy_log;            /* the round syncs the log */
	bool sy_queued;         /* on t->syncq */
	bool sy_final;          /* synced at the thread's end (it had not
				   failed before) */
	struct wk_link syl;
	unsigned fetch_threads; /* thread numbers whose logs fetch looks
				   for (0: not yet listed) */
	bool dir_made;          /* s<S> exists (mkdir done) */
	bool dir_unsynced;      /* s<S> has entries not yet synced */
	bool top_unsynced;      /* s<S>'s entry in dir not yet synced */
	int err; /* the first failed write or sync of the shuffle here:
		    every later commit of it here fails with it */
};

/* Splits --dir into its directories (made if missing, each locked and
 * opened), finds the home directory (the one with a commit log; the
 * first listed when none has one) and sets the open file budget. */
int wk_store_init(struct ush_worker *wk);
void wk_store_fini(struct ush_worker *wk);
/* Opens path, relative to directory d, beneath it without following any
 * symbolic link (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or
 * O_NOFOLLOW at each component where the kernel lacks openat2).
 * Returns an fd or -errno: -ELOOP for a link, -EXDEV for a path that
 * leaves d. */
int wk_open_beneath(const struct wk_dir *d, const char *path, int flags,
		    mode_t mode);
/* The first directory that has an entry at path (a restart may list the
 * directories in another order, or one more), or NULL. */
struct wk_dir *wk_dir_with(struct ush_worker *wk, const char *path);
/* Takes d out of placement when err says its file system failed (EIO,
 * EROFS, ENOSPC, EDQUOT), logged once with what failed: logs already
 * there stay, and their shuffles fail as their files do. */
void wk_dir_fail(struct ush_worker *wk, struct wk_dir *d, int err,
		 const char *what);
/* What a failed wk_open_beneath() means, for a message. */
const char *wk_why_open(int err);
/* Makes s's log and index open (created, or checked and cut after the
 * last valid entry at the first open; reopened after an eviction) and
 * the most recently used, closing another's when the thread is at its
 * budget. Returns 0 or -errno. */
int wk_shuf_open(struct wk_thread *t, struct wk_shuf *s);
/* Closes s's files (synced or not: a dropped shuffle's). */
void wk_shuf_close(struct wk_thread *t, struct wk_shuf *s);
/* Records s's failure (of what, at offset off) as its error on this
 * thread, logged once. */
void wk_shuf_fail(struct wk_shuf *s, int err, const char *what,
		  uint64_t off);
/* Removes s<S> and the files in it from every directory; a link in its
 * place is removed, never followed. */
void wk_store_unlink(struct ush_worker *wk, uint32_t shuffle);
/* An index entry's partition for a gap in the log (control frames, the
 * padding before an aligned write): no frame, never fetched. DATA frames
 * have partitions below USHI_PARTS_MAX. */
#define WK_IDX_HOLE UINT32_MAX
/* An index entry's partition for an extent of a committed attempt that
 * the repair found damaged (its map and attempt kept): never served, and
 * a FETCH of that attempt fails with USH_ECORRUPT. Map and attempt
 * WK_IDX_HOLE: log bytes after an unreadable entry, of no known map. */
#define WK_IDX_BAD (UINT32_MAX - 1)
/* An index as the repair scan reads it. */
struct wk_scan {
	uint8_t *ent;   /* its readable entries, damaged ones rewritten in
			   memory (ushi_free) */
	uint64_t n;     /* how many: the rest is unreadable */
	uint64_t end;   /* the log offset after them */
	uint64_t fixed; /* the first entry rewritten (n: none) */
	bool stuck;     /* stopped at an entry that is not zeros */
};
/* Reads the index (ifd, isize bytes) of shuffle's log (lfd, lsize bytes)
 * up to the first entry it cannot place: an entry whose CRC or bounds
 * fail, when the next entry checks after it, is rebuilt from the frame
 * header at its offset, or made a hole or a damaged extent (WK_IDX_BAD,
 * of the attempt it names). Returns 0 or -errno. */
int wk_idx_scan(int ifd, int lfd, uint32_t shuffle, uint64_t isize,
		uint64_t lsize, struct wk_scan *sc);
/* wk_idx_scan() of the got index bytes already read into b (ushi_malloc
 * memory, which becomes sc->ent; NULL when got is 0). */
void wk_idx_parse(uint8_t *b, uint64_t got, int lfd, uint32_t shuffle,
		  uint64_t lsize, struct wk_scan *sc);
/* Whether the attempt is committed here (takes wk->lock). */
bool wk_committed(struct ush_worker *wk, uint32_t shuffle, uint32_t map,
		  uint32_t attempt);
/* Writes the index entry of len log bytes at offset off to e. */
void wk_idx_set(uint8_t *e, uint64_t off, uint32_t len, uint32_t partition,
		uint32_t map, uint32_t attempt);
/* Checks the index entry at e, of the frame at log offset off (its
 * CRC): 0, or USH_ECORRUPT. Fills len and the fields given (NULL: not
 * wanted). */
int wk_idx_get(const uint8_t *e, uint64_t off, uint32_t *len,
	       uint32_t *partition, uint32_t *map, uint32_t *attempt);

#endif
