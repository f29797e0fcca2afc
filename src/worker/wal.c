/*
 * The worker's durable state: fixed-size 128-byte records (claim of a
 * shuffle by an application, commit of an attempt, drop of a shuffle),
 * each with its own CRC32C and a log sequence number. One committer
 * (group.c) appends them, a group at a time, to "<dir>/commit.log" and
 * syncs before any of the group is acknowledged.
 *
 * Fixed records make each one checkable on its own: a corrupt record is
 * skipped and reported, losing only itself; a partial record at the end
 * (a crash mid-append, never acknowledged) is cut. When more than half
 * of the snapshot and log is dead (records of dropped shuffles, drops,
 * records the snapshot holds again), the live state is written as a new
 * snapshot ("commit.snap", synced and renamed into place) and the log
 * starts over, so its size and restart time follow the live state
 * (bounded by the quotas), not the history. Replay reads the snapshot
 * and the log (and the per-thread logs "commit.t<N>.log" of earlier
 * versions, removed at the first compaction) and hands every record, in
 * sequence order, to the caller. This file knows records and files
 * only: the tables they rebuild are state.c's, which calls it.
 *
 * A commit record (version 2) is synced together with its data, not
 * after it: it names the data (struct wk_sum), and carries a watermark,
 * the highest sequence number below which every commit record of this
 * worker is known durable with its data. Replay trusts a commit record
 * that a durable record's watermark covers (or that is marked durable:
 * a snapshot's copy of an applied commit, or a record of version 1,
 * which earlier versions logged only once its data was synced), and
 * checks the others, the last groups' at most, against the files
 * (verify.c): one whose data is not whole is dropped, as if it had
 * never been logged, and the start then compacts the log so that no
 * later watermark can cover it.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/crash.h"
#include "worker/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC WK_REC_SIZE
#define REC_MAGIC 0x4c485355u /* "USHL" */
#define REC_VERSION 2
/* Records of 0.4.5 and before: commits logged after their data's sync,
 * without a sum; read and trusted, never written. */
#define REC_VERSION_1 1
/* OFF_FLAGS: the commit is known durable with its data. */
#define REC_DURABLE 1u
/* The snapshot and logs are compacted past this (a replay of it takes
 * milliseconds), once more than half of them is dead. */
#define COMPACT_MIN (256u << 10)

/* Record byte offsets. */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_TYPE = 5,
	OFF_APP_LEN = 6,
	OFF_FLAGS = 7, /* version 2 */
	OFF_LSN = 8,
	OFF_SHUFFLE = 16,
	OFF_MAP = 20,
	OFF_ATTEMPT = 24,
	OFF_APP = 28, /* 64 bytes */
	/* Version 2 (zeros in version 1): a commit's sum, the watermark. */
	OFF_THREAD = 92,
	OFF_FRAMES = 96,
	OFF_BYTES = 104,
	OFF_CRCS = 112,
	OFF_WM = 116,
	OFF_CRC = 124,
};
_Static_assert(OFF_APP + USHI_PROTO_APP_MAX <= OFF_THREAD, "record layout");
_Static_assert(OFF_WM + 8 == OFF_CRC, "record layout");
_Static_assert(OFF_CRC + 4 == REC, "record size");

static atomic_uint_fast64_t next_lsn = 1;

static uint32_t rec_crc(const uint8_t *b)
{
	return ~crc32_iscsi((unsigned char *)b, OFF_CRC, 0xffffffffu);
}

static void rec_put(uint8_t *b, const struct wk_rec *r, uint64_t lsn,
		    uint64_t wm, bool durable)
{
	size_t n = strnlen(r->app, USHI_PROTO_APP_MAX);
	memset(b, 0, REC);
	put_le32(b + OFF_MAGIC, REC_MAGIC);
	b[OFF_VERSION] = REC_VERSION;
	b[OFF_TYPE] = r->type;
	b[OFF_APP_LEN] = (uint8_t)n;
	b[OFF_FLAGS] = durable || r->durable ? REC_DURABLE : 0;
	put_le64(b + OFF_LSN, lsn);
	put_le32(b + OFF_SHUFFLE, r->shuffle);
	put_le32(b + OFF_MAP, r->map);
	put_le32(b + OFF_ATTEMPT, r->attempt);
	memcpy(b + OFF_APP, r->app, n);
	put_le32(b + OFF_THREAD, r->sum.thread);
	put_le64(b + OFF_FRAMES, r->sum.frames);
	put_le64(b + OFF_BYTES, r->sum.bytes);
	put_le32(b + OFF_CRCS, r->sum.crcs);
	put_le64(b + OFF_WM, wm);
	put_le32(b + OFF_CRC, rec_crc(b));
}

/* 0, or why the record is not one this version reads whole. */
static const char *rec_get(const uint8_t *b, struct wk_rec *r, uint64_t *lsn,
			   uint64_t *wm)
{
	if (get_le32(b + OFF_MAGIC) != REC_MAGIC)
		return "bad magic";
	if (rec_crc(b) != get_le32(b + OFF_CRC))
		return "CRC32C mismatch";
	if (b[OFF_VERSION] != REC_VERSION && b[OFF_VERSION] != REC_VERSION_1)
		return "unknown version";
	memset(r, 0, sizeof(*r));
	r->type = b[OFF_TYPE];
	*lsn = get_le64(b + OFF_LSN);
	*wm = 0;
	if (b[OFF_VERSION] == REC_VERSION_1) {
		r->durable = true;
	} else {
		r->durable = b[OFF_FLAGS] & REC_DURABLE;
		r->sum.thread = get_le32(b + OFF_THREAD);
		r->sum.frames = get_le64(b + OFF_FRAMES);
		r->sum.bytes = get_le64(b + OFF_BYTES);
		r->sum.crcs = get_le32(b + OFF_CRCS);
		*wm = get_le64(b + OFF_WM);
	}
	r->shuffle = get_le32(b + OFF_SHUFFLE);
	r->map = get_le32(b + OFF_MAP);
	r->attempt = get_le32(b + OFF_ATTEMPT);
	size_t n = b[OFF_APP_LEN];
	if (n > USHI_PROTO_APP_MAX)
		return "application id too long";
	memcpy(r->app, b + OFF_APP, n);
	if (r->type < WK_REC_CLAIM || r->type > WK_REC_MARK ||
	    (r->type == WK_REC_CLAIM && !proto_app_ok(r->app)))
		return "unknown type or bad application id";
	return NULL;
}

int wk_log_open(struct ush_worker *wk)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/" WK_LOG_FILE, wk->dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return ushi_fail(-errno, "worker: open %s", path);
	struct stat st;
	if (fstat(fd, &st)) {
		close(fd);
		return ushi_fail(-errno, "worker: stat %s", path);
	}
	wk->log_fd = fd;
	wk->log_off = (uint64_t)st.st_size;
	return ushi_sync_dir(wk->dir, "worker");
}

/* Whether name is a log of an earlier version: one per thread. */
static bool legacy_log(const char *name)
{
	unsigned t;
	char tail;
	return sscanf(name, "commit.t%u.lo%c", &t, &tail) == 2 &&
	       tail == 'g';
}

/* Removes the logs of an earlier version (their records are in the
 * snapshot just published). */
static void legacy_unlink(struct ush_worker *wk)
{
	DIR *d = opendir(wk->dir);
	struct dirent *de;
	char path[4096];
	while (d && (de = readdir(d)))
		if (legacy_log(de->d_name)) {
			snprintf(path, sizeof(path), "%s/%s", wk->dir,
				 de->d_name);
			unlink(path);
		}
	if (d)
		closedir(d);
}

/* ------------------------------------------------------- --sync=none */

#define BOOT_ID_LEN 36 /* a UUID */

/* This boot's id, which the kernel draws anew at each boot. */
static int boot_id(char id[BOOT_ID_LEN + 1])
{
	const char *path = "/proc/sys/kernel/random/boot_id";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, id, BOOT_ID_LEN);
	int err = n < 0 ? errno : EIO;
	if (fd >= 0)
		close(fd);
	if (n != BOOT_ID_LEN)
		return ushi_fail(-err, "worker: reading %s (--sync=none tells "
				 "a restart of the worker from one of the host "
				 "by it)", path);
	id[BOOT_ID_LEN] = 0;
	return 0;
}

/* 1 and the marker's contents in id (whatever they are: a boot id, or
 * not one), 0 without a marker, or an error. */
static int marker_read(struct ush_worker *wk, char id[BOOT_ID_LEN + 2])
{
	int fd = openat(wk->dirs[0].fd, WK_UNSYNCED_FILE,
			O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n = fd < 0 ? 0 : read(fd, id, BOOT_ID_LEN + 1);
	int err = errno;
	if (fd >= 0)
		close(fd);
	if ((fd < 0 && err != ENOENT) || n < 0)
		return ushi_fail(-err, "worker: reading %s/" WK_UNSYNCED_FILE,
				 wk->dir);
	id[n] = 0;
	return fd >= 0;
}

/* Removes the marker, once what the unsynced run wrote is durable. */
static int unmark(struct ush_worker *wk)
{
	for (unsigned i = 0; i < wk->ndirs; i++)
		if (syncfs(wk->dirs[i].fd))
			return ushi_fail(-errno, "worker: syncfs of %s",
					 wk->dirs[i].path);
	if (unlinkat(wk->dirs[0].fd, WK_UNSYNCED_FILE, 0) && errno != ENOENT)
		return ushi_fail(-errno, "worker: removing %s/"
				 WK_UNSYNCED_FILE, wk->dir);
	return ushi_sync_dir(wk->dir, "worker");
}

/* The host restarted since a --sync=none run: its commit records may
 * have reached the disk without the data they name, or torn logs and
 * indexes hold blocks of zeros or stale bytes in any order. None of it
 * is trusted: the records go, and the sweep then removes every shuffle
 * directory (no application owns one any more). */
static int forget(struct ush_worker *wk, const char *now)
{
	wk_log(wk, 0, "%s/" WK_UNSYNCED_FILE ": the host restarted (boot "
	       "id now %s, another before) since ushuffled ran here with "
	       "--sync=none, which does not sync: every shuffle in %s is "
	       "dropped (its readers get USH_ENOTCOMMITTED, and their "
	       "drivers rerun the maps)", wk->dir, now, wk->dirlist);
	static const char *const files[] = {WK_SNAP_FILE, WK_LOG_FILE};
	for (size_t i = 0; i < 2; i++)
		if (unlinkat(wk->dirs[0].fd, files[i], 0) && errno != ENOENT)
			return ushi_fail(-errno, "worker: removing %s/%s",
					 wk->dir, files[i]);
	legacy_unlink(wk);
	return ushi_sync_dir(wk->dir, "worker");
}

int wk_log_sync_mode(struct ush_worker *wk)
{
	char was[BOOT_ID_LEN + 2], now[BOOT_ID_LEN + 1];
	bool none = wk->o.sync == USH_WORKER_SYNC_NONE;
	int marked = marker_read(wk, was), ret;
	if (marked < 0 || (!none && !marked))
		return marked < 0 ? marked : 0;
	if ((ret = boot_id(now)))
		return ret;
	bool host_restarted = marked && strcmp(was, now);
	if (host_restarted && (ret = forget(wk, now)))
		return ret;
	if (!none) /* a durable run after an unsynced one */
		return unmark(wk);
	if (marked && !host_restarted)
		return 0;
	ret = ushi_replace_at(wk->dirs[0].fd, WK_UNSYNCED_FILE, now,
			      BOOT_ID_LEN);
	return ret ? ushi_fail(ret, "worker: writing %s/" WK_UNSYNCED_FILE,
			       wk->dir) : 0;
}

bool wk_log_compact_due(const struct ush_worker *wk)
{
	uint64_t live = REC * (uint64_t)(wk->ncommits + wk->nowners);
	uint64_t total = wk->snap_bytes + wk->log_bytes;
	return total > COMPACT_MIN && total > 2 * live;
}

int wk_log_compact(struct ush_worker *wk, const struct wk_rec *r, size_t n,
		   uint64_t wm)
{
	uint8_t *b = ushi_malloc((n ? n : 1) * REC);
	int ret = b ? 0 : -ENOMEM;
	for (size_t i = 0; !ret && i < n; i++)
		rec_put(b + i * REC, &r[i], atomic_fetch_add(&next_lsn, 1), wm,
			false);
	/* wk->dirs[0] is the home, wk->dir's (wk_dirid_check()). */
	if (!ret)
		ret = ushi_replace_at(wk->dirs[0].fd, WK_SNAP_FILE, b, n * REC);
	/* Published: the log's records are all in it or older than it. */
	if (!ret && wk->log_fd >= 0 && ftruncate(wk->log_fd, 0) == 0)
		wk->log_off = 0;
	if (!ret)
		legacy_unlink(wk);
	ushi_free(b);
	if (ret) {
		wk_log(wk, 0, "compacting the commit log into %s/" WK_SNAP_FILE
		       ": %s (the logs keep growing)", wk->dir,
		       ush_strerror(ret));
		return ret;
	}
	wk->log_bytes = 0;
	wk->snap_bytes = n * REC;
	wk_log(wk, 1, "commit log compacted: %zu live records", n);
	return 0;
}

uint64_t wk_log_next_lsn(void)
{
	return atomic_load(&next_lsn);
}

uint64_t wk_log_encode(uint8_t *b, const struct wk_rec *r, size_t n,
		       uint64_t wm, bool durable)
{
	uint64_t lsn = atomic_fetch_add(&next_lsn, n);
	for (size_t i = 0; i < n; i++)
		rec_put(b + i * WK_REC_SIZE, &r[i], lsn + i, wm, durable);
	return lsn;
}

int wk_log_write(struct ush_worker *wk, const uint8_t *b, size_t len,
		 unsigned commits)
{
	int ret = ushi_pwrite_all(wk->log_fd, b, len, wk->log_off);
	if (!ret)
		wk_crash(wk, WK_CRASH_WRITTEN, commits);
	bool sync = wk->o.sync != USH_WORKER_SYNC_NONE;
	if (!ret && sync && fdatasync(wk->log_fd))
		ret = -errno;
	if (ret)
		return ret;
	wk->log_off += len;
	wk->log_bytes += len;
	return 0;
}

/* ---------------------------------------------------------------- replay */

struct item {
	uint64_t lsn, wm;
	struct wk_rec r;
};

static int by_lsn(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

/* Reads path's records into *items; reports and skips corrupt ones and
 * cuts a partial tail (cut: a log, not the snapshot). */
static int read_log(struct ush_worker *wk, const char *path, bool cut,
		    struct item **items, size_t *n, size_t *cap,
		    size_t *bad)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : ushi_fail(-errno, "worker: open %s",
						       path);
	struct stat st;
	int ret = fstat(fd, &st) ? -errno : 0;
	size_t size = ret ? 0 : (size_t)st.st_size, good = 0;
	uint8_t b[REC];
	for (size_t off = 0; !ret && size - off >= REC; off += REC) {
		if (pread(fd, b, REC, (off_t)off) != REC) {
			ret = -EIO;
			break;
		}
		struct item it;
		const char *why = rec_get(b, &it.r, &it.lsn, &it.wm);
		if (why) {
			wk_log(wk, 0, "%s offset %zu: record skipped (%s)",
			       path, off, why);
			(*bad)++;
			continue;
		}
		if (*n == *cap) {
			size_t c = *cap ? 2 * *cap : 1024;
			struct item *m = ushi_malloc(c * sizeof(*m));
			if (!m) {
				ret = -ENOMEM;
				break;
			}
			if (*n)
				memcpy(m, *items, *n * sizeof(*m));
			ushi_free(*items);
			*items = m;
			*cap = c;
		}
		(*items)[(*n)++] = it;
		good++;
	}
	close(fd);
	if (ret)
		return ushi_fail(ret, "worker: read %s", path);
	if (size && !good)
		return ushi_fail(USH_EVERSION, "worker: %s holds no record of "
				"this version (%zu bytes): written by another "
				"ushuffled version?", path, size);
	if (cut && size % REC) {
		wk_log(wk, 0, "%s: cutting %zu bytes of torn tail (never "
		       "acknowledged)", path, size % REC);
		if (truncate(path, (off_t)(size - size % REC)))
			return ushi_fail(-errno, "worker: truncate %s", path);
	}
	return 0;
}

/* Drops (marks type 0) the commits among the n items that may have
 * reached the disk before their data and whose data is not whole. */
static void check_unsure(struct ush_worker *wk, struct item *items, size_t n,
			 wk_rec_check_fn check)
{
	uint64_t wm = 0;
	for (size_t i = 0; i < n; i++)
		wm = items[i].wm > wm ? items[i].wm : wm;
	for (size_t i = 0; i < n; i++) {
		struct item *it = &items[i];
		if (it->r.type != WK_REC_COMMIT || it->r.durable ||
		    it->lsn <= wm)
			continue;
		wk->unsure++;
		if (check(wk, &it->r)) {
			it->r.type = 0;
			wk->torn++;
		}
	}
}

int wk_log_replay(struct ush_worker *wk, wk_rec_fn apply,
		  wk_rec_check_fn check)
{
	struct item *items = NULL;
	size_t n = 0, cap = 0, bad = 0;
	char path[4096];
	snprintf(path, sizeof(path), "%s/" WK_SNAP_FILE, wk->dir);
	int ret = read_log(wk, path, false, &items, &n, &cap, &bad);
	struct stat st;
	if (!ret && !stat(path, &st))
		wk->snap_bytes = (uint64_t)st.st_size;
	DIR *d = ret ? NULL : opendir(wk->dir);
	if (!ret && !d)
		ret = ushi_fail(-errno, "worker: opendir %s", wk->dir);
	struct dirent *de;
	while (!ret && (de = readdir(d))) {
		if (strcmp(de->d_name, WK_LOG_FILE) && !legacy_log(de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", wk->dir, de->d_name);
		if (!stat(path, &st))
			wk->log_bytes += (uint64_t)st.st_size;
		ret = read_log(wk, path, true, &items, &n, &cap, &bad);
	}
	if (d)
		closedir(d);
	if (n)
		qsort(items, n, sizeof(*items), by_lsn);
	if (!ret && check)
		check_unsure(wk, items, n, check);
	for (size_t i = 0; !ret && i < n; i++)
		if (items[i].r.type && items[i].r.type != WK_REC_MARK &&
		    (ret = apply(wk, &items[i].r)))
			ushi_fail(ret, "worker: replay");
	/* next_lsn is shared by every worker of the process: moving it back
	 * would let a later record sort before earlier ones at replay. */
	uint64_t last = n ? items[n - 1].lsn : 0;
	uint_fast64_t cur = atomic_load(&next_lsn);
	while (cur < last + 1 &&
	       !atomic_compare_exchange_weak(&next_lsn, &cur, last + 1))
		;
	ushi_free(items);
	if (!ret && (n || bad))
		wk_log(wk, 1, "replayed %zu commit log records (%zu corrupt, "
		       "skipped), %zu commits checked against their data "
		       "(%zu torn, dropped): %zu attempts committed, %zu "
		       "shuffles", n, bad, wk->unsure, wk->torn, wk->ncommits,
		       wk->nowners);
	return ret;
}

/* ------------------------------------------------------- crash points */

int wk_crash_parse(struct ush_worker *wk, const char *spec)
{
	static const char *const names[] = {
		[WK_CRASH_ISSUED] = "issued", [WK_CRASH_WRITTEN] = "written",
		[WK_CRASH_LOGGED] = "logged", [WK_CRASH_DATA] = "data",
		[WK_CRASH_ACKED] = "acked",
	};
	const char *colon = spec ? strchr(spec, ':') : NULL;
	for (int i = WK_CRASH_ISSUED; colon && i <= WK_CRASH_ACKED; i++)
		if (strlen(names[i]) == (size_t)(colon - spec) &&
		    !strncmp(spec, names[i], (size_t)(colon - spec))) {
			wk->crash_step = i;
			wk->crash_n = (unsigned)strtoul(colon + 1, NULL, 10);
			return wk->crash_n ? 0 : -EINVAL;
		}
	return -EINVAL;
}
