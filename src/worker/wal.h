/* The commit log (wal.c): records and their files, nothing above. */
#ifndef USHI_WK_WAL_H
#define USHI_WK_WAL_H

#include "net/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ush_worker;

/* A record of the worker's durable state. */
enum wk_rec_type {
	WK_REC_CLAIM = 1,  /* app claims shuffle */
	WK_REC_COMMIT = 2, /* (shuffle, map, attempt) committed */
	WK_REC_DROP = 3,   /* shuffle dropped */
	WK_REC_MARK = 4,   /* a watermark alone (version 2): written at a
			      clean stop, never applied */
};

/* A commit's data, as its record names it (format version 2): what the
 * worker stored of the attempt, which replay checks against the files
 * when the record may have reached the disk before its data did. */
struct wk_sum {
	uint32_t thread;  /* the log "s<S>/t<thread>.log" holding it */
	uint32_t crcs;    /* the sum of its frames' CRC32C fields, mod 2^32 */
	uint64_t frames;  /* DATA frames stored */
	uint64_t bytes;   /* their bytes, headers included */
};

struct wk_rec {
	uint8_t type;
	uint32_t shuffle, map, attempt;
	char app[USHI_PROTO_APP_MAX + 1];
	/* Commits: the data the record stands for (sum) and whether it is
	 * known durable: a record of version 1 (logged after its data's
	 * sync) or a snapshot's copy of an applied commit. Replay checks a
	 * commit that is not, and that no later record's watermark covers,
	 * against its data (verify.c). */
	struct wk_sum sum;
	bool durable;
};

/* A record's bytes in the log (docs/format.md). */
#define WK_REC_SIZE 128u

/* The files in the home directory: the log, its snapshot, and the first
 * of an earlier version's per-thread logs (any of them marks a home). */
#define WK_LOG_FILE "commit.log"
#define WK_SNAP_FILE "commit.snap"
#define WK_LOG_T0_FILE "commit.t0.log"
/* Present while a --sync=none worker may have left unsynced data here
 * (it stays after the worker exits): the boot id it ran under. */
#define WK_UNSYNCED_FILE "unsynced"

/* The log, its records and its snapshot: only the committer (group.c)
 * calls these once the worker is created. */
/* Opens <dir>/commit.log for appending (wk->log_fd). */
int wk_log_open(struct ush_worker *wk);
/* What replay does with each record, in sequence order: 0 or -errno. */
typedef int (*wk_rec_fn)(struct ush_worker *wk, const struct wk_rec *r);
/* Whether a commit record's data is whole in the files: 0, or why not
 * (a negative code; the function logs what it found). */
typedef int (*wk_rec_check_fn)(struct ush_worker *wk, const struct wk_rec *r);
/* Reads the snapshot and the logs, skipping (and reporting) corrupt
 * records, hands each commit record that may have reached the disk
 * before its data to check (dropping, and counting in wk->torn, those
 * that fail), and each record kept to apply. Returns 0 or the first
 * error. */
int wk_log_replay(struct ush_worker *wk, wk_rec_fn apply,
		  wk_rec_check_fn check);
/* The sequence number the next record gets: every record numbered before
 * it is below. */
uint64_t wk_log_next_lsn(void);
/* Writes the n records at r, numbered in order, to b (n * WK_REC_SIZE
 * bytes), each with watermark wm: every commit record of this worker
 * numbered up to wm is durable with its data. durable: the records'
 * commits are (their callers synced the data before). Returns the first
 * record's number. */
uint64_t wk_log_encode(uint8_t *b, const struct wk_rec *r, size_t n,
		       uint64_t wm, bool durable);
/* Appends len bytes of encoded records at b (commits of them commit
 * records) with one write and syncs the log. Returns 0 or -errno
 * (nothing counts as appended then). */
int wk_log_write(struct ush_worker *wk, const uint8_t *b, size_t len,
		 unsigned commits);
/* Before replay: a start after a host crash that followed a --sync=none
 * run empties the log (wal.c, forget()); a --sync=none start leaves the
 * marker, a durable one syncs what an earlier unsynced run of this boot
 * wrote and removes it. 0 or an error. */
int wk_log_sync_mode(struct ush_worker *wk);
/* Whether most of the snapshot and log is dead (wk->lock held). */
bool wk_log_compact_due(const struct ush_worker *wk);
/* Writes the n records at r (the live state) as the snapshot, with
 * watermark wm, and empties the log; a failure is logged and returned,
 * and the log stands. */
int wk_log_compact(struct ush_worker *wk, const struct wk_rec *r, size_t n,
		   uint64_t wm);

#endif
