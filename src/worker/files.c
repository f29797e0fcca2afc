/*
 * The worker's files beneath --dir: path resolution that follows no
 * symbolic link, the bounded cache of open log files, the index entry
 * format, and the removal of a dropped shuffle's directory.
 *
 * --dir is opened once (wk->dirfd); every shuffle directory and log
 * file is opened relative to it with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), or with O_NOFOLLOW at each component where the
 * kernel lacks openat2. A link planted under --dir is never followed.
 *
 * Open logs are a bounded cache: a thread keeps at most wk->open_max
 * files open (a log and its index are two), and closes the least
 * recently written idle log to open another. A log whose files are
 * closed keeps its offsets, buffer, pending entries and error, and
 * reopens at its next write. Files are closed only once synced (an
 * eviction syncs them first): an fdatasync on a later fd might miss a
 * writeback error reported to the closed one. At the first open the
 * index is checked entry by entry and cut after the last valid one.
 */
#define _GNU_SOURCE
#include "worker/wk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
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

int wk_open_beneath(struct ush_worker *wk, const char *path, int flags,
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
		long fd = syscall(SYS_openat2, wk->dirfd, path, &how,
				  sizeof(how));
		if (fd >= 0)
			return (int)fd;
		/* ENOSYS: an older kernel; EPERM: a seccomp filter that
		 * does not know the call. */
		if (errno != ENOSYS && errno != EPERM)
			return -errno;
		atomic_store(&no_openat2, 1);
	}
	return open_nofollow(wk->dirfd, path, flags, mode);
}

const char *wk_why_open(int err)
{
	return err == -ELOOP ? "a symbolic link: not followed beneath --dir" :
	       err == -EXDEV ? "outside --dir" :
			       ush_strerror(err);
}

int wk_store_init(struct ush_worker *wk)
{
	wk->dirfd = open(wk->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (wk->dirfd < 0)
		return ushi_fail(-errno, "worker: open %s", wk->dir);
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
	return 0;
}

void wk_store_fini(struct ush_worker *wk)
{
	if (wk->dirfd >= 0)
		close(wk->dirfd);
	wk->dirfd = -1;
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
		wk_log(s->t->wk, 0, "%s s%u/t%u at offset %llu: %s; shuffle %u "
		       "commits no more on thread %u until dropped", what,
		       s->shuffle, s->t->idx, (unsigned long long)off,
		       wk_why_open(err), s->shuffle, s->t->idx);
	}
}

void wk_shuf_fsync(struct wk_shuf *s)
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
			wk_shuf_fsync(victim);
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
			fd = wk_open_beneath(t->wk, path, flags, 0644);
		if ((fd != -EMFILE && fd != -ENFILE) || !t->nopen)
			return fd;
		int ret = evict(t, s);
		if (ret)
			return ret;
	}
}

static int read_all(int fd, uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : USH_ECORRUPT;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* The end of the valid entries of the index (CRC, packed frames inside
 * the log, the last one's header): what follows was never committed (a
 * commit syncs the log, then the index). Sets *end, the log's end. */
static int valid_entries(struct wk_shuf *s, uint64_t isize, uint64_t lsize,
			 uint64_t *n, uint64_t *end)
{
	uint64_t cnt = isize / WK_IDX_ENTRY, e = 0, i = 0;
	*n = *end = 0;
	if (!cnt)
		return 0;
	uint8_t *b = ushi_malloc(cnt * WK_IDX_ENTRY);
	if (!b)
		return -ENOMEM;
	int ret = read_all(s->ifd, b, cnt * WK_IDX_ENTRY, 0);
	for (; !ret && i < cnt; i++) {
		uint32_t len, part;
		if (wk_idx_get(b + i * WK_IDX_ENTRY, e, &len, &part, NULL,
			       NULL) ||
		    (part != WK_IDX_HOLE && len < USH_FRAME_HDR_SIZE) ||
		    e + len > lsize)
			break;
		e += len;
	}
	/* The last frame's header where its entry says: its log bytes were
	 * written before it (else the tail is cut before it). A hole after
	 * it holds no frame to look at. The lengths are known valid. */
	for (uint64_t k = i, fe = e; !ret && k; k--) {
		const uint8_t *ent = b + (k - 1) * WK_IDX_ENTRY;
		uint64_t at = fe - get_le32(ent);
		uint8_t h[USH_FRAME_HDR_SIZE];
		struct ushi_frame f;
		if (get_le32(ent + 4) != WK_IDX_HOLE) {
			if (!read_all(s->fd, h, sizeof(h), at) &&
			    !frame_decode(h, &f) && at + proto_size(&f) == fe)
				break;
			i = k - 1;
			e = at;
		}
		fe = at;
	}
	ushi_free(b);
	*n = i;
	*end = e;
	return ret;
}

static int check_regular(struct ush_worker *wk, int fd, const char *path,
			 struct stat *st)
{
	if (fstat(fd, st))
		return ushi_fail(-errno, "worker: stat %s/%s", wk->dir, path);
	if (!S_ISREG(st->st_mode)) {
		wk_log(wk, 0, "%s/%s: not a regular file", wk->dir, path);
		return ushi_fail(-EINVAL, "worker: %s/%s: not a regular file",
				wk->dir, path);
	}
	return 0;
}

/* Opens one of s's files (the log needs room for its index too). */
static int open_one(struct wk_thread *t, struct wk_shuf *s, const char *path,
		    int flags, struct stat *st)
{
	struct ush_worker *wk = t->wk;
	int fd = open_counted(t, s, path, flags, s->fd < 0 ? 2 : 1);
	if (fd < 0) {
		wk_log(wk, 0, "open %s/%s: %s", wk->dir, path,
		       wk_why_open(fd));
		return ushi_fail(fd, "worker: open %s/%s: %s", wk->dir, path,
				wk_why_open(fd));
	}
	t->nopen++;
	int ret = st ? check_regular(wk, fd, path, st) : 0;
	if (ret) {
		close(fd);
		t->nopen--;
		return ret;
	}
	return fd;
}

/* The first open: creates the files (and s<S>), or cuts an existing
 * log's uncommitted tail and appends after its frames. */
static int files_create(struct wk_thread *t, struct wk_shuf *s)
{
	struct ush_worker *wk = t->wk;
	char lpath[48], ipath[48];
	if (!s->dir_made) {
		snprintf(lpath, sizeof(lpath), "s%u", s->shuffle);
		if (mkdirat(wk->dirfd, lpath, 0755) && errno != EEXIST)
			return ushi_fail(-errno, "worker: mkdir %s/%s",
					wk->dir, lpath);
		/* Made here or by another thread whose commit may never
		 * come: this thread's commits sync its entry too. */
		t->dir_unsynced = true;
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
	uint64_t n, end;
	ret = valid_entries(s, (uint64_t)ist.st_size, (uint64_t)lst.st_size,
			    &n, &end);
	if (ret)
		return ushi_fail(ret, "worker: reading %s/%s", wk->dir, ipath);
	if (n * WK_IDX_ENTRY < (uint64_t)ist.st_size ||
	    end < (uint64_t)lst.st_size) {
		wk_log(wk, 1, "%s/s%u/t%u: cutting %llu bytes of uncommitted "
		       "index and %llu of log", wk->dir, s->shuffle, t->idx,
		       (unsigned long long)ist.st_size - n * WK_IDX_ENTRY,
		       (unsigned long long)lst.st_size - end);
		if (ftruncate(s->ifd, (off_t)(n * WK_IDX_ENTRY)) ||
		    ftruncate(s->fd, (off_t)end))
			return ushi_fail(-errno, "worker: truncate %s/%s",
					wk->dir, lpath);
	}
	if (!lst.st_size || !ist.st_size)
		s->dir_unsynced = true;
	s->end = s->written = end;
	s->iend = n * WK_IDX_ENTRY;
	s->direct = wk->o.direct && !fcntl(s->fd, F_SETFL, O_DIRECT);
	/* Said once: the file system refuses it for every log alike. */
	if (wk->o.direct && !s->direct &&
	    !atomic_exchange(&wk->direct_refused, true))
		wk_log(wk, 0, "%s: O_DIRECT refused (%s): logs are written "
		       "buffered", wk->dir, strerror(errno));
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

void wk_store_unlink(struct ush_worker *wk, uint32_t shuffle)
{
	char name[16];
	snprintf(name, sizeof(name), "s%u", shuffle);
	int fd = wk_open_beneath(wk, name, O_RDONLY | O_DIRECTORY |
				 O_NONBLOCK | O_CLOEXEC, 0);
	if (fd == -ELOOP || fd == -ENOTDIR) {
		/* Something else in the shuffle's place: remove the entry
		 * itself (a link is removed, not followed). */
		wk_log(wk, 0, "%s/%s is not a directory (%s): removing the "
		       "entry only", wk->dir, name, wk_why_open(fd));
		unlinkat(wk->dirfd, name, 0);
		return;
	}
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		if (fd != -ENOENT)
			wk_log(wk, 0, "drop: open %s/%s: %s", wk->dir, name,
			       ush_strerror(fd < 0 ? fd : -errno));
		return;
	}
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    unlinkat(dirfd(d), de->d_name, 0))
			wk_log(wk, 0, "drop: unlink %s/%s/%s: %s", wk->dir,
			       name, de->d_name, ush_strerror(-errno));
	closedir(d);
	if (unlinkat(wk->dirfd, name, AT_REMOVEDIR) && errno != ENOENT)
		wk_log(wk, 0, "drop: rmdir %s/%s: %s", wk->dir, name,
		       ush_strerror(-errno));
}
