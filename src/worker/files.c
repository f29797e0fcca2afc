/*
 * The worker's files beneath --dir: path resolution that follows no
 * symbolic link, the bounded cache of open log files, the index entry
 * format, and the removal of a dropped shuffle's directory.
 *
 * Each of --dir's directories is opened once (wk->dirs, the home with
 * the commit log first); every shuffle directory and log file is opened
 * relative to its directory with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), or with O_NOFOLLOW at each component where the
 * kernel lacks openat2. A link planted under --dir is never followed.
 * A log stays in the directory it was made in; new ones are placed by
 * (shuffle, thread) (place()).
 *
 * Open logs are a bounded cache: a thread keeps at most wk->open_max
 * files open (a log and its index are two), and closes the least
 * recently written idle log to open another. A log whose files are
 * closed keeps its offsets, buffer, pending entries and error, and
 * reopens at its next write. Files are closed only once synced (an
 * eviction syncs them first): an fdatasync on a later fd might miss a
 * writeback error reported to the closed one. At the first open the
 * index is repaired: damaged entries rebuilt from the log or marked
 * damaged, the torn tail cut back to the last frame that is there or is
 * committed (docs/format.md §6).
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/attempt.h"
#include "worker/dirid.h"
#include "worker/files.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <isa-l/crc.h>

/* ------------------------------------------------------------ paths */

/* openat with O_NOFOLLOW at every component, for kernels before
 * openat2 (5.6). */
static int open_nofollow(int dirfd, const char *path, int flags, mode_t mode)
{
	int cur = dirfd;
	for (;;) {
		const char *slash = strchr(path, '/');
		size_t n = slash ? (size_t)(slash - path) : strlen(path);
		char comp[NAME_MAX + 1];
		if (!n || n > NAME_MAX || (n == 2 && !memcmp(path, "..", 2))) {
			if (cur != dirfd)
				close(cur);
			return -EXDEV;
		}
		memcpy(comp, path, n);
		comp[n] = 0;
		int fd = slash ? openat(cur, comp, O_RDONLY | O_DIRECTORY |
					O_NOFOLLOW | O_CLOEXEC) :
				 openat(cur, comp, flags | O_NOFOLLOW, mode);
		int err = errno;
		struct stat st;
		/* A link where a directory is wanted is ENOTDIR: say ELOOP
		 * as openat2 does. */
		if (fd < 0 && err == ENOTDIR &&
		    !fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISLNK(st.st_mode))
			err = ELOOP;
		if (cur != dirfd)
			close(cur);
		if (fd < 0)
			return -err;
		if (!slash)
			return fd;
		cur = fd;
		path = slash + 1;
	}
}

int wk_open_beneath(const struct wk_dir *d, const char *path, int flags,
		    mode_t mode)
{
	static atomic_int no_openat2;
	if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
		struct open_how how = {
			.flags = (uint64_t)flags,
			.mode = flags & O_CREAT ? mode : 0,
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
				   RESOLVE_NO_MAGICLINKS,
		};
		long fd = syscall(SYS_openat2, d->fd, path, &how,
				  sizeof(how));
		if (fd >= 0)
			return (int)fd;
		/* ENOSYS: an older kernel; EPERM: a seccomp filter that
		 * does not know the call. */
		if (errno != ENOSYS && errno != EPERM)
			return -errno;
		atomic_store(&no_openat2, 1);
	}
	return open_nofollow(d->fd, path, flags, mode);
}

struct wk_dir *wk_dir_with(struct ush_worker *wk, const char *path)
{
	struct stat st;
	for (unsigned i = 0; i < wk->ndirs; i++)
		if (!fstatat(wk->dirs[i].fd, path, &st, AT_SYMLINK_NOFOLLOW))
			return &wk->dirs[i];
	return NULL;
}

void wk_dir_fail(struct ush_worker *wk, struct wk_dir *d, int err,
		 const char *what)
{
	int none = 0;
	if ((err != -EIO && err != -EROFS && err != -ENOSPC &&
	     err != -EDQUOT) || !atomic_compare_exchange_strong(&d->err, &none,
								 err))
		return;
	WK_COUNT(wk, errors[USH_WORKER_ERR_STORAGE], 1);
	unsigned healthy = 0;
	for (unsigned i = 0; i < wk->ndirs; i++)
		healthy += !atomic_load(&wk->dirs[i].err);
	/* place() uses a quarantined directory when none is healthy */
	wk_log(wk, 0, "directory %s quarantined: %s: %s; %s, the shuffles "
	       "stored here fail as their files do (until the worker "
	       "restarts)", d->path, what, ush_strerror(err), healthy ?
	       "new shuffle logs go to the other directories" :
	       wk->ndirs == 1 ? "it is the worker's only directory: new "
	       "shuffle logs still go to it, and succeed once it takes "
	       "writes again" : "no directory is healthy: new shuffle logs "
	       "still go to them all, and succeed where one takes writes "
	       "again");
}

const char *wk_why_open(int err)
{
	return err == -ELOOP ? "a symbolic link: not followed beneath --dir" :
	       err == -EXDEV ? "outside --dir" :
			       ush_strerror(err);
}

#define LOCK_FILE "ushuffled.lock"

/* One worker per directory: two would interleave their logs and files.
 * The lock file holds the owner's pid, to name it. */
static int dir_lock(struct wk_dir *d)
{
	char path[4096], pid[32] = "";
	snprintf(path, sizeof(path), "%s/" LOCK_FILE, d->path);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return ushi_fail(-errno, "worker: open %s", path);
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		int e = errno;
		ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		close(fd);
		return e == EWOULDBLOCK
			       ? ushi_fail(-EBUSY, "worker: %s is in use by "
					  "another worker (pid %s)", d->path,
					  *pid ? pid : "?")
			       : ushi_fail(-e, "worker: flock %s", path);
	}
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) || pwrite(fd, pid, (size_t)n, 0) != n) {
		int e = -errno;
		close(fd);
		return ushi_fail(e, "worker: write %s", path);
	}
	d->lock = fd;
	return 0;
}

/* Makes, locks and opens directory i of --dir; refuses one given
 * twice (under two names), whose lock would name this very worker. */
static int dir_open(struct ush_worker *wk, unsigned i)
{
	struct wk_dir *d = &wk->dirs[i];
	struct stat st, o;
	d->made = !mkdir(d->path, 0755);
	if (!d->made && errno != EEXIST)
		return ushi_fail(-errno, "worker: mkdir %s", d->path);
	if (stat(d->path, &st))
		return ushi_fail(-errno, "worker: stat %s", d->path);
	for (unsigned k = 0; k < i; k++)
		if (!fstat(wk->dirs[k].fd, &o) && o.st_dev == st.st_dev &&
		    o.st_ino == st.st_ino)
			return wk_refuse(-EINVAL, "worker: --dir: %s and %s are "
					"the same directory, given twice",
					wk->dirs[k].path, d->path);
	int ret = dir_lock(d);
	if (ret)
		return ret;
	d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return d->fd < 0 ? ushi_fail(-errno, "worker: open %s", d->path) : 0;
}

/* --dir's directories, fio's way: "D0:D1:...". */
static int dirs_parse(struct ush_worker *wk)
{
	const char *list = wk->dirlist;
	unsigned n = 1;
	for (const char *p = list; *p; p++)
		n += *p == ':';
	wk->dirs = ushi_calloc(n, sizeof(*wk->dirs));
	if (!wk->dirs)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++)
		wk->dirs[i].fd = wk->dirs[i].lock = -1;
	for (const char *p = list;; p++) {
		size_t len = strcspn(p, ":");
		if (!len)
			return wk_refuse(-EINVAL, "worker: --dir=%s: an empty "
					"directory in the list (directories "
					"are separated by ':')", list);
		for (unsigned i = 0; i < wk->ndirs; i++)
			if (strlen(wk->dirs[i].path) == len &&
			    !strncmp(wk->dirs[i].path, p, len))
				return wk_refuse(-EINVAL, "worker: --dir=%s: "
						"%s is given twice", list,
						wk->dirs[i].path);
		char *d = ushi_malloc(len + 1);
		if (!d)
			return -ENOMEM;
		memcpy(d, p, len);
		d[len] = 0;
		wk->dirs[wk->ndirs++].path = d;
		p += len;
		if (!*p)
			return 0;
	}
}

/* A refused start leaves no directory it made (a mount point's stand-in,
 * say) behind. */
static void unmake(struct ush_worker *wk)
{
	for (unsigned i = 0; i < wk->ndirs; i++) {
		const struct wk_dir *d = &wk->dirs[i];
		if (!d->made)
			continue;
		if (d->fd >= 0) {
			unlinkat(d->fd, WK_DIRID, 0);
			unlinkat(d->fd, WK_DIRID ".tmp", 0);
		}
		char path[4096];
		snprintf(path, sizeof(path), "%s/" LOCK_FILE, d->path);
		unlink(path);
		rmdir(d->path);
	}
}

int wk_store_init(struct ush_worker *wk)
{
	int ret = dirs_parse(wk);
	for (unsigned i = 0; !ret && i < wk->ndirs; i++)
		ret = dir_open(wk, i);
	if (!ret)
		ret = wk_dirid_check(wk);
	if (ret)
		unmake(wk);
	if (ret)
		return ret == -ENOMEM ? ushi_fail(ret, "worker: allocation") :
					ret;
	uint64_t max = wk->o.max_open_files;
	struct rlimit rl;
	if (!max)
		max = getrlimit(RLIMIT_NOFILE, &rl) ||
		      rl.rlim_cur == RLIM_INFINITY ? 256 : rl.rlim_cur / 4;
	max /= wk->nthreads;
	/* A log is two files: at least one log open per thread. */
	wk->open_max = max < 2 ? 2 : max > (1u << 30) ? 1u << 30 :
							(unsigned)max;
	wk->pdir_budget = WK_PDIR_BUDGET / wk->nthreads;
	/* Connections get what the files and a margin leave. */
	wk->conn_fds = UINT_MAX;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY) {
		uint64_t keep = (uint64_t)wk->open_max * wk->nthreads +
				WK_FD_MARGIN;
		uint64_t left = rl.rlim_cur > keep + 16 ? rl.rlim_cur - keep :
							  16;
		wk->conn_fds = left < UINT_MAX ? (unsigned)left : UINT_MAX;
	}
	return 0;
}

void wk_store_fini(struct ush_worker *wk)
{
	for (unsigned i = 0; wk->dirs && i < wk->ndirs; i++) {
		struct wk_dir *d = &wk->dirs[i];
		if (d->fd >= 0)
			close(d->fd);
		if (d->lock >= 0)
			close(d->lock);
		ushi_free(d->path);
	}
	ushi_free(wk->dirs);
	wk->dirs = NULL;
	wk->ndirs = 0;
	wk->dir = NULL;
}

/* ------------------------------------------------------ index entries */

/* The CRC of an entry covers its 16 bytes and the log offset of its
 * frame (the sum of the lengths before it, not stored): an entry read at
 * another place than it was written at does not check. */
static uint32_t entry_crc(const uint8_t *e, uint64_t off)
{
	uint8_t o[8];
	put_le64(o, off);
	uint32_t c = crc32_iscsi(o, 8, 0xffffffffu);
	return ~crc32_iscsi((unsigned char *)e, 16, c);
}

int wk_idx_get(const uint8_t *e, uint64_t off, uint32_t *len,
	       uint32_t *partition, uint32_t *map, uint32_t *attempt)
{
	if (get_le32(e + 16) != entry_crc(e, off))
		return USH_ECORRUPT;
	*len = get_le32(e);
	if (partition)
		*partition = get_le32(e + 4);
	if (map)
		*map = get_le32(e + 8);
	if (attempt)
		*attempt = get_le32(e + 12);
	return 0;
}

void wk_idx_set(uint8_t *e, uint64_t off, uint32_t len, uint32_t partition,
		uint32_t map, uint32_t attempt)
{
	put_le32(e, len);
	put_le32(e + 4, partition);
	put_le32(e + 8, map);
	put_le32(e + 12, attempt);
	put_le32(e + 16, entry_crc(e, off));
}

/* --------------------------------------------------- the file cache */

void wk_shuf_fail(struct wk_shuf *s, int err, const char *what, uint64_t off)
{
	if (!s->err) {
		s->err = err;
		WK_COUNT(s->t->wk, errors[USH_WORKER_ERR_STORAGE], 1);
		wk_log(s->t->wk, 0, "%s %s/s%u/t%u at offset %llu: %s; "
		       "shuffle %u commits no more on thread %u until dropped",
		       what, s->dir ? s->dir->path : "?", s->shuffle,
		       s->t->idx, (unsigned long long)off, wk_why_open(err),
		       s->shuffle, s->t->idx);
	}
	if (s->dir)
		wk_dir_fail(s->t->wk, s->dir, err, what);
}

/* fdatasyncs s's open files that have unsynced writes: the log first. */
static void shuf_fsync(struct wk_shuf *s)
{
	/* Failed or not, the flag goes: a retry could report success
	 * without the data (the kernel reports a writeback error once);
	 * the shuffle holds the error. */
	if (s->unsynced && fdatasync(s->fd))
		wk_shuf_fail(s, -errno, "fdatasync of the log", s->end);
	s->unsynced = false;
	if (s->iunsynced && fdatasync(s->ifd))
		wk_shuf_fail(s, -errno, "fdatasync of the index", s->iend);
	s->iunsynced = false;
}

void wk_shuf_close(struct wk_thread *t, struct wk_shuf *s)
{
	ring_file_del(t->ring, s->slot);
	s->slot = -1;
	close(s->fd);
	close(s->ifd);
	s->fd = s->ifd = -1;
	wk_list_del(&t->lru, &s->lru);
	t->nopen -= 2;
}

/* Closes an idle log's files, the least recently written one, preferring
 * one already synced among the oldest; waits for a write when every open
 * log has one in flight. */
static int evict(struct wk_thread *t, struct wk_shuf *keep)
{
	for (;;) {
		struct wk_shuf *victim = NULL;
		unsigned idle = 0;
		for (struct wk_link *l = t->lru.head; l && idle < 16;
		     l = l->next) {
			struct wk_shuf *s = WK_OF(l, struct wk_shuf, lru);
			if (s->writes || s == keep)
				continue;
			idle++;
			if (!victim)
				victim = s;
			if (!s->unsynced && !s->iunsynced) {
				victim = s;
				break;
			}
		}
		if (victim) {
			shuf_fsync(victim);
			wk_shuf_close(t, victim);
			return 0;
		}
		if (!t->writes)
			return -EMFILE;
		int ret = ring_reap(t->ring, 1);
		if (ret)
			return ret;
	}
}

/* wk_open_beneath() within the thread's share of open files (and the
 * process's limit: EMFILE closes one of ours too). */
static int open_counted(struct wk_thread *t, struct wk_shuf *s,
			const char *path, int flags, unsigned need)
{
	for (;;) {
		int fd = -EMFILE;
		if (t->nopen + need <= t->wk->open_max)
			fd = wk_open_beneath(s->dir, path, flags, 0644);
		if ((fd != -EMFILE && fd != -ENFILE) || !t->nopen)
			return fd;
		int ret = evict(t, s);
		if (ret)
			return ret;
	}
}

/* The size of the DATA frame of shuffle whose header is at log offset
 * at, or 0 when none is there (within lsize). */
static uint64_t frame_at(int lfd, uint32_t shuffle, uint64_t at,
			 uint64_t lsize)
{
	uint8_t h[USH_FRAME_HDR_SIZE];
	struct ushi_frame f;
	if (at + sizeof(h) > lsize || ushi_pread_all(lfd, h, sizeof(h), at) ||
	    frame_decode(h, &f) || f.shuffle != shuffle ||
	    at + proto_size(&f) > lsize)
		return 0;
	return proto_size(&f);
}

static bool entry_ok(const uint8_t *e, uint64_t off)
{
	uint32_t len, part;
	return !wk_idx_get(e, off, &len, &part, NULL, NULL) &&
	       (part >= WK_IDX_BAD || len >= USH_FRAME_HDR_SIZE);
}

/* Rewrites the damaged entry e (at log offset at, len bytes: the next
 * entry checks after them) from what the log holds there: the DATA frame
 * whose header says so; else a hole, when two of its partition, map and
 * attempt fields still say hole (one flipped bit changes one field);
 * else a damaged extent of the map and attempt it names. */
static void entry_rebuild(int lfd, uint32_t shuffle, uint8_t *e, uint64_t at,
			  uint32_t len, uint64_t lsize)
{
	uint8_t h[USH_FRAME_HDR_SIZE];
	struct ushi_frame f;
	uint32_t part = get_le32(e + 4), map = get_le32(e + 8),
		 att = get_le32(e + 12);
	if (frame_at(lfd, shuffle, at, lsize) == len &&
	    !ushi_pread_all(lfd, h, sizeof(h), at) && !frame_decode(h, &f))
		wk_idx_set(e, at, len, f.partition, f.map, f.attempt);
	else if ((part == WK_IDX_HOLE) + (map == WK_IDX_HOLE) +
		 (att == WK_IDX_HOLE) >= 2 || len < USH_FRAME_HDR_SIZE)
		wk_idx_set(e, at, len, WK_IDX_HOLE, WK_IDX_HOLE, WK_IDX_HOLE);
	else
		wk_idx_set(e, at, len, WK_IDX_BAD, map, att);
}

/* The length of damaged entry i at log offset at: the one after which
 * entry i + 1 checks, among its stored len with at most one bit flipped
 * and the size of the frame at that offset; for the last entry, that
 * frame's size. 0 when none fits. */
static uint32_t resync(int lfd, uint32_t shuffle, const uint8_t *b,
		       uint64_t i, uint64_t cnt, uint64_t at, uint64_t lsize)
{
	uint32_t stored = get_le32(b + i * WK_IDX_ENTRY);
	uint64_t fsize = frame_at(lfd, shuffle, at, lsize);
	if (i + 1 == cnt)
		return (uint32_t)fsize;
	const uint8_t *next = b + (i + 1) * WK_IDX_ENTRY;
	for (int k = -1; k <= 32; k++) {
		uint64_t len = k < 0 ? stored : k < 32 ? stored ^ 1u << k :
							  fsize;
		if (len && len <= UINT32_MAX && entry_ok(next, at + len))
			return (uint32_t)len;
	}
	return 0;
}

int wk_idx_scan(int ifd, int lfd, uint32_t shuffle, uint64_t isize,
		uint64_t lsize, struct wk_scan *sc)
{
	uint64_t cnt = isize / WK_IDX_ENTRY;
	*sc = (struct wk_scan){0};
	if (!cnt)
		return 0;
	uint8_t *b = ushi_malloc(cnt * WK_IDX_ENTRY);
	if (!b)
		return -ENOMEM;
	/* A reader may race the owner's repair: what is there is used. */
	uint64_t got = 0;
	ssize_t r = 1;
	while (got < cnt * WK_IDX_ENTRY && (r > 0 || (r < 0 && errno == EINTR)))
		if ((r = pread(ifd, b + got, cnt * WK_IDX_ENTRY - got,
			       (off_t)got)) > 0)
			got += (uint64_t)r;
	if (r < 0) {
		int ret = -errno;
		ushi_free(b);
		return ret;
	}
	wk_idx_parse(b, got, lfd, shuffle, lsize, sc);
	return 0;
}

void wk_idx_parse(uint8_t *b, uint64_t got, int lfd, uint32_t shuffle,
		  uint64_t lsize, struct wk_scan *sc)
{
	uint64_t cnt = got / WK_IDX_ENTRY, e = 0, i = 0;
	*sc = (struct wk_scan){.fixed = cnt};
	for (; i < cnt; i++) {
		uint8_t *ent = b + i * WK_IDX_ENTRY;
		if (!entry_ok(ent, e)) {
			uint32_t len = resync(lfd, shuffle, b, i, cnt, e, lsize);
			if (!len)
				break;
			entry_rebuild(lfd, shuffle, ent, e, len, lsize);
			sc->fixed = sc->fixed < i ? sc->fixed : i;
		}
		e += get_le32(ent);
	}
	sc->ent = b;
	sc->n = i;
	sc->end = e;
	/* Zeros are entries never written (a crash's torn tail); anything
	 * else is damage that whatever follows may be committed behind. */
	for (uint64_t k = i * WK_IDX_ENTRY; k < cnt * WK_IDX_ENTRY; k++)
		sc->stuck |= b[k] != 0;
}

bool wk_committed(struct ush_worker *wk, uint32_t shuffle, uint32_t map,
		  uint32_t attempt)
{
	pthread_mutex_lock(&wk->lock);
	struct wk_attempt *a = wk_attempt_find(wk, shuffle, map, attempt);
	bool yes = a && a->state == WK_COMMITTED;
	pthread_mutex_unlock(&wk->lock);
	return yes;
}

/* Cuts the extents at the end of the scan whose log bytes were never
 * written (past the log's end, or no frame header where their entry
 * says), back to the last frame that is there: a crash's torn tail. An
 * attempt committed here is never cut: its damaged frame is marked so
 * (readers of it get USH_ECORRUPT), and appends go after it. */
static void cut_torn_tail(struct wk_shuf *s, struct wk_scan *sc,
			  uint64_t lsize)
{
	for (uint64_t k = sc->n, fe = sc->end; k; k--) {
		uint8_t *ent = sc->ent + (k - 1) * WK_IDX_ENTRY;
		uint32_t len = get_le32(ent), part = get_le32(ent + 4),
			 map = get_le32(ent + 8), att = get_le32(ent + 12);
		uint64_t at = fe - len;
		fe = at;
		if (part == WK_IDX_HOLE)
			continue;
		if (part == WK_IDX_BAD ||
		    frame_at(s->fd, s->shuffle, at, lsize) == len)
			return;
		if (wk_committed(s->t->wk, s->shuffle, map, att)) {
			wk_idx_set(ent, at, len, WK_IDX_BAD, map, att);
			sc->fixed = sc->fixed < k - 1 ? sc->fixed : k - 1;
			return;
		}
		sc->n = k - 1;
		sc->end = at;
		sc->fixed = sc->fixed < sc->n ? sc->fixed : sc->n;
	}
}

/* The scan stopped at an entry it could not read, with log bytes after
 * it that may hold committed frames: they are kept, listed as damaged
 * extents of no map (a reader of a map whose frames lie there misses
 * batches: USH_ECORRUPT naming it), and appends go after them. */
static int keep_unread(struct wk_shuf *s, struct wk_scan *sc, uint64_t lsize)
{
	const uint64_t chunk = 1u << 30; /* an entry's length is 32 bits */
	uint64_t extra = (lsize - sc->end + chunk - 1) / chunk;
	uint8_t *b = ushi_malloc((sc->n + extra) * WK_IDX_ENTRY);
	if (!b)
		return -ENOMEM;
	memcpy(b, sc->ent, sc->n * WK_IDX_ENTRY);
	ushi_free(sc->ent);
	sc->ent = b;
	wk_log(s->t->wk, 0, "%s/s%u/t%u.idx: entry %llu is unreadable: the "
	       "log's %llu bytes from offset %llu are kept as damaged: a "
	       "committed map with frames there reads as USH_ECORRUPT and "
	       "is rerun by its driver (docs/operations.md, 'A damaged log "
	       "or index')",
	       s->dir->path, s->shuffle, s->t->idx,
	       (unsigned long long)sc->n,
	       (unsigned long long)(lsize - sc->end),
	       (unsigned long long)sc->end);
	sc->fixed = sc->fixed < sc->n ? sc->fixed : sc->n;
	while (sc->end < lsize) {
		uint64_t len = lsize - sc->end < chunk ? lsize - sc->end : chunk;
		wk_idx_set(b + sc->n++ * WK_IDX_ENTRY, sc->end, (uint32_t)len,
			   WK_IDX_BAD, WK_IDX_HOLE, WK_IDX_HOLE);
		sc->end += len;
	}
	return 0;
}

/* Logs each extent the repair marked damaged: whose it is and where. */
static void report_bad(struct wk_shuf *s, const struct wk_scan *sc)
{
	uint64_t at = 0;
	for (uint64_t i = 0; i < sc->n; i++) {
		const uint8_t *ent = sc->ent + i * WK_IDX_ENTRY;
		if (i >= sc->fixed && get_le32(ent + 4) == WK_IDX_BAD &&
		    get_le32(ent + 8) != WK_IDX_HOLE)
			wk_log(s->t->wk, 0, "%s/s%u/t%u.log offset %llu: %u "
			       "bytes of shuffle %u map %u attempt %u are "
			       "damaged (index entry %llu): its readers get "
			       "USH_ECORRUPT", s->dir->path, s->shuffle,
			       s->t->idx, (unsigned long long)at,
			       get_le32(ent), s->shuffle, get_le32(ent + 8),
			       get_le32(ent + 12), (unsigned long long)i);
		at += get_le32(ent);
	}
}

/* The repair at the first open: damaged entries rewritten (rebuilt from
 * the log, or marked damaged), the torn tail cut, never a committed
 * frame. Sets *n and *end, the index's entries and the log's end. */
static int repair(struct wk_shuf *s, const char *ipath, uint64_t isize,
		  uint64_t lsize, uint64_t *n, uint64_t *end)
{
	struct ush_worker *wk = s->t->wk;
	struct wk_scan sc;
	int ret = wk_idx_scan(s->ifd, s->fd, s->shuffle, isize, lsize, &sc);
	if (ret)
		return ushi_fail(ret, "worker: reading %s/%s", s->dir->path, ipath);
	if (sc.stuck && sc.end < lsize)
		ret = keep_unread(s, &sc, lsize);
	else
		cut_torn_tail(s, &sc, lsize);
	if (ret) {
		ushi_free(sc.ent);
		return ushi_fail(ret, "worker: repairing %s/%s", s->dir->path, ipath);
	}
	*n = sc.n;
	*end = sc.end;
	if (sc.fixed < sc.n) {
		report_bad(s, &sc);
		wk_log(wk, 0, "%s/%s: damaged at entry %llu: rewritten from "
		       "there (entries rebuilt from the log's frame headers, "
		       "or marked damaged)", s->dir->path, ipath,
		       (unsigned long long)sc.fixed);
		uint64_t off = sc.fixed * WK_IDX_ENTRY;
		ret = pwrite(s->ifd, sc.ent + off, (sc.n - sc.fixed) *
			     WK_IDX_ENTRY, (off_t)off) < 0 ? -errno : 0;
	}
	ushi_free(sc.ent);
	uint64_t isz = sc.n * WK_IDX_ENTRY;
	if (!ret && (isz != isize || sc.end != lsize)) {
		/* Index and log shrink only by a torn tail; they grow to
		 * hold extents kept as damaged (a committed frame past the
		 * log's end, or bytes after an unreadable entry). */
		if (isz < isize || sc.end < lsize)
			wk_log(wk, 1, "%s/s%u/t%u: cutting %llu bytes of "
			       "uncommitted index and %llu of log", s->dir->path,
			       s->shuffle, s->t->idx,
			       (unsigned long long)(isize > isz ? isize - isz :
								  0),
			       (unsigned long long)(lsize > sc.end ?
						    lsize - sc.end : 0));
		if (ftruncate(s->ifd, (off_t)isz) ||
		    ftruncate(s->fd, (off_t)sc.end))
			ret = -errno;
	}
	if (!ret && sc.fixed < sc.n && fdatasync(s->ifd))
		ret = -errno;
	return ret ? ushi_fail(ret, "worker: repairing %s/%s", s->dir->path,
			       ipath) : 0;
}

static int check_regular(struct ush_worker *wk, const char *dir, int fd,
			 const char *path, struct stat *st)
{
	if (fstat(fd, st))
		return ushi_fail(-errno, "worker: stat %s/%s", dir, path);
	if (!S_ISREG(st->st_mode)) {
		wk_log(wk, 0, "%s/%s: not a regular file", dir, path);
		return wk_refuse(-EINVAL, "worker: %s/%s: not a regular file",
				dir, path);
	}
	return 0;
}

/* Opens one of s's files (the log needs room for its index too). */
static int open_one(struct wk_thread *t, struct wk_shuf *s, const char *path,
		    int flags, struct stat *st)
{
	struct ush_worker *wk = t->wk;
	int fd = open_counted(t, s, path, flags, s->fd < 0 ? 2 : 1);
	if (fd < 0)
		wk_dir_fail(wk, s->dir, fd, "open");
	if (fd < 0) {
		wk_log(wk, 0, "open %s/%s: %s", s->dir->path, path,
		       wk_why_open(fd));
		return ushi_fail(fd, "worker: open %s/%s: %s", s->dir->path, path,
				wk_why_open(fd));
	}
	t->nopen++;
	int ret = st ? check_regular(wk, s->dir->path, fd, path, st) : 0;
	if (ret) {
		close(fd);
		t->nopen--;
		return ret;
	}
	return fd;
}

/* Where the log of shuffle on thread idx goes: where it is (a restart
 * may list the directories in another order, or one more), else by a
 * hash of (shuffle, thread) over the directories not quarantined: the
 * logs of a shuffle spread over them by thread, and shuffles over them
 * by their numbers. */
static struct wk_dir *place(struct ush_worker *wk, uint32_t shuffle,
			    unsigned idx)
{
	char path[48];
	snprintf(path, sizeof(path), "s%u/t%u.log", shuffle, idx);
	struct wk_dir *d = wk_dir_with(wk, path);
	if (d)
		return d;
	uint64_t h = ((uint64_t)shuffle * 0x9e3779b97f4a7c15ull >> 32) + idx;
	/* The healthy ones; all of them when none is. */
	unsigned ok = 0;
	for (unsigned i = 0; i < wk->ndirs; i++)
		ok += !atomic_load(&wk->dirs[i].err);
	for (unsigned i = 0, k = 0; ok && i < wk->ndirs; i++)
		if (!atomic_load(&wk->dirs[i].err) && k++ == h % ok)
			return &wk->dirs[i];
	return &wk->dirs[h % wk->ndirs];
}

/* The first open: creates the files (and s<S>), or cuts an existing
 * log's uncommitted tail and appends after its frames. */
static int files_create(struct wk_thread *t, struct wk_shuf *s)
{
	struct ush_worker *wk = t->wk;
	char lpath[48], ipath[48];
	if (!s->dir)
		s->dir = place(wk, s->shuffle, t->idx);
	if (!s->dir_made) {
		int ret = wk_dirid_hold(wk, s->dir);
		if (ret) {
			wk_dir_fail(wk, &wk->dirs[0], ret, "writing its "
				    WK_DIRID);
			return ret;
		}
		snprintf(lpath, sizeof(lpath), "s%u", s->shuffle);
		if (mkdirat(s->dir->fd, lpath, 0755) && errno != EEXIST) {
			ret = -errno;
			wk_dir_fail(wk, s->dir, ret, "mkdir");
			return ushi_fail(ret, "worker: mkdir %s/%s",
					s->dir->path, lpath);
		}
		/* Made here or by another thread whose commit may never
		 * come: this thread's commits sync its entry too. */
		s->top_unsynced = true;
		s->dir_made = true;
	}
	snprintf(lpath, sizeof(lpath), "s%u/t%u.log", s->shuffle, t->idx);
	snprintf(ipath, sizeof(ipath), "s%u/t%u.idx", s->shuffle, t->idx);
	struct stat lst, ist;
	int ret = open_one(t, s, lpath, O_RDWR | O_CREAT | O_CLOEXEC, &lst);
	if (ret < 0)
		return ret;
	s->fd = ret;
	ret = open_one(t, s, ipath, O_RDWR | O_CREAT | O_CLOEXEC, &ist);
	if (ret < 0)
		return ret;
	s->ifd = ret;
	uint64_t n = 0, end = 0;
	ret = repair(s, ipath, (uint64_t)ist.st_size, (uint64_t)lst.st_size,
		     &n, &end);
	if (ret)
		return ret;
	if (!lst.st_size || !ist.st_size)
		s->dir_unsynced = true;
	s->end = s->written = end;
	s->iend = n * WK_IDX_ENTRY;
	s->direct = wk->o.direct && !fcntl(s->fd, F_SETFL, O_DIRECT);
	/* Said once: the file system refuses it for every log alike. */
	if (wk->o.direct && !s->direct &&
	    !atomic_exchange(&wk->direct_refused, true))
		wk_log(wk, 0, "%s: O_DIRECT refused (%s): logs are written "
		       "buffered", s->dir->path, strerror(errno));
	/* The buffer starts at the block of the end: its tail is read back
	 * when a buffer is taken. */
	s->base = s->direct ? end / USHI_ALIGN * USHI_ALIGN : end;
	s->opened = true;
	return 0;
}

int wk_shuf_open(struct wk_thread *t, struct wk_shuf *s)
{
	if (s->fd >= 0) {
		wk_list_del(&t->lru, &s->lru);
		wk_list_add(&t->lru, &s->lru);
		return 0;
	}
	int ret;
	if (!s->opened) {
		ret = files_create(t, s);
	} else {
		char path[48];
		/* No O_CREAT: files gone since (their shuffle dropped) are
		 * not made again. */
		snprintf(path, sizeof(path), "s%u/t%u.log", s->shuffle,
			 t->idx);
		ret = open_one(t, s, path, O_RDWR | O_CLOEXEC, NULL);
		if (ret >= 0) {
			s->fd = ret;
			if (s->direct)
				fcntl(s->fd, F_SETFL, O_DIRECT);
			snprintf(path, sizeof(path), "s%u/t%u.idx",
				 s->shuffle, t->idx);
			ret = open_one(t, s, path, O_RDWR | O_CLOEXEC, NULL);
			if (ret >= 0)
				s->ifd = ret;
		}
		ret = ret < 0 ? ret : 0;
	}
	if (ret) {
		if (s->fd >= 0) {
			close(s->fd);
			t->nopen--;
		}
		if (s->ifd >= 0) {
			close(s->ifd);
			t->nopen--;
		}
		s->fd = s->ifd = -1;
		return ret;
	}
	s->slot = ring_file_add(t->ring, s->fd);
	wk_list_add(&t->lru, &s->lru);
	return 0;
}

/* ------------------------------------------------------------ drop */

static void dir_unlink(struct ush_worker *wk, const struct wk_dir *dir,
		       const char *name)
{
	int fd = wk_open_beneath(dir, name, O_RDONLY | O_DIRECTORY |
				 O_NONBLOCK | O_CLOEXEC, 0);
	if (fd == -ELOOP || fd == -ENOTDIR) {
		/* Something else in the shuffle's place: remove the entry
		 * itself (a link is removed, not followed). */
		wk_log(wk, 0, "%s/%s is not a directory (%s): removing the "
		       "entry only", dir->path, name, wk_why_open(fd));
		unlinkat(dir->fd, name, 0);
		return;
	}
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		if (fd != -ENOENT)
			wk_log(wk, 0, "drop: open %s/%s: %s", dir->path, name,
			       ush_strerror(fd < 0 ? fd : -errno));
		return;
	}
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    unlinkat(dirfd(d), de->d_name, 0))
			wk_log(wk, 0, "drop: unlink %s/%s/%s: %s", dir->path,
			       name, de->d_name, ush_strerror(-errno));
	closedir(d);
	if (unlinkat(dir->fd, name, AT_REMOVEDIR) && errno != ENOENT)
		wk_log(wk, 0, "drop: rmdir %s/%s: %s", dir->path, name,
		       ush_strerror(-errno));
}

void wk_store_unlink(struct ush_worker *wk, uint32_t shuffle)
{
	char name[16];
	snprintf(name, sizeof(name), "s%u", shuffle);
	for (unsigned i = 0; i < wk->ndirs; i++)
		dir_unlink(wk, &wk->dirs[i], name);
}
