/*
 * The worker's files beneath --dir: path resolution that follows no
 * symbolic link, the bounded cache of open partition files, and the
 * removal of a dropped shuffle's directory.
 *
 * --dir is opened once (wk->dirfd); every shuffle directory and
 * partition file is opened relative to it with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), or with O_NOFOLLOW at each component where the
 * kernel lacks openat2. A link planted under --dir is never followed.
 *
 * Open partition files are a bounded cache: a thread keeps at most
 * wk->open_max open, and closes the least recently written idle one to
 * open another. A partition whose file is closed keeps its offset, flush
 * buffer and error, and reopens at its next write. A file is closed only
 * once synced (an eviction syncs it first): an fdatasync on a later fd
 * might miss a writeback error reported to the closed one. Files are
 * scanned at their first open with the format's bounds (USHI_FRAME_MAX),
 * not today's max_frame: frames stored under a larger one stay.
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

static const char *why_open(int err)
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
	wk->open_max = max < 1 ? 1 : max > (1u << 30) ? 1u << 30 :
							(unsigned)max;
	wk_log(wk, 1, "at most %u partition files open per thread",
	       wk->open_max);
	return 0;
}

void wk_store_fini(struct ush_worker *wk)
{
	if (wk->dirfd >= 0)
		close(wk->dirfd);
	wk->dirfd = -1;
}

/* --------------------------------------------------- the file cache */

/* The shuffle's first failure (of what, at offset off): it commits no
 * more here. */
void wk_part_fail(struct wk_part *p, int err, const char *what,
		      uint64_t off)
{
	if (!p->err) {
		p->err = err;
		wk_log(p->t->wk, 0, "%s s%u/p%u.t%u at offset %llu: %s; shuffle "
		       "%u commits no more on thread %u until dropped", what,
		       p->shuffle, p->partition, p->t->idx,
		       (unsigned long long)off, why_open(err), p->shuffle,
		       p->t->idx);
	}
	if (!p->s->err)
		p->s->err = err;
}

void wk_part_sync(struct wk_part *p)
{
	if (!p->unsynced)
		return;
	if (fdatasync(p->fd))
		wk_part_fail(p, -errno, "fdatasync", p->off);
	/* Failed or not: a retry could report success without the data
	 * (the kernel reports a writeback error once); the shuffle holds
	 * the error. */
	p->unsynced = false;
}

void wk_part_close(struct wk_thread *t, struct wk_part *p)
{
	ring_file_del(t->ring, p->slot);
	p->slot = -1;
	close(p->fd);
	p->fd = -1;
	wk_list_del(&t->lru, &p->lru);
	t->nopen--;
}

/* Closes an idle file, the least recently written one, preferring one
 * already synced among the oldest; waits for a write when every open
 * file has one in flight. */
static int evict(struct wk_thread *t)
{
	for (;;) {
		struct wk_part *victim = NULL;
		unsigned idle = 0;
		for (struct wk_link *l = t->lru.head; l && idle < 16;
		     l = l->next) {
			struct wk_part *p = WK_PART_OF(l, lru);
			if (p->writes)
				continue;
			idle++;
			if (!victim)
				victim = p;
			if (!p->unsynced) {
				victim = p;
				break;
			}
		}
		if (victim) {
			wk_part_sync(victim);
			wk_part_close(t, victim);
			return 0;
		}
		if (!t->nopen)
			return -EMFILE;
		int ret = ring_reap(t->ring, 1);
		if (ret)
			return ret;
	}
}

/* wk_open_beneath() within the thread's share of open files (and the
 * process's limit: EMFILE closes one of ours too). */
static int open_counted(struct wk_thread *t, const char *path, int flags,
			mode_t mode)
{
	for (;;) {
		int fd = -EMFILE;
		if (t->nopen < t->wk->open_max)
			fd = wk_open_beneath(t->wk, path, flags, mode);
		if ((fd != -EMFILE && fd != -ENFILE) || !t->nopen)
			return fd;
		int ret = evict(t);
		if (ret)
			return ret;
	}
}

static void part_name(char *buf, size_t n, const struct wk_part *p)
{
	snprintf(buf, n, "s%u/p%u.t%u.data", p->shuffle, p->partition,
		 p->t->idx);
}

/* The end of the valid frames of fd: torn or unwritten data after it was
 * never committed (see the top of this file). */
static uint64_t valid_end(int fd, uint64_t size)
{
	uint64_t off = 0;
	uint8_t h[USH_FRAME_HDR_SIZE];
	while (size - off >= USH_FRAME_HDR_SIZE) {
		struct ushi_frame f;
		const char *why;
		if (pread(fd, h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h) ||
		    proto_header(h, &f, USHI_FRAME_MAX, true, &why) ||
		    (f.type != USHI_FRAME_DATA && f.type != USHI_FRAME_PAD) ||
		    proto_size(&f) > size - off)
			break;
		off += proto_size(&f);
	}
	return off;
}

/* The first open: creates the file (and s<S>), or cuts an existing
 * one's uncommitted tail and appends after its frames. */
static int file_create(struct wk_thread *t, struct wk_part *p)
{
	struct ush_worker *wk = t->wk;
	char path[64];
	if (!p->s->dir_made) {
		snprintf(path, sizeof(path), "s%u", p->shuffle);
		if (mkdirat(wk->dirfd, path, 0755) && errno != EEXIST)
			return ushi_fail(-errno, "worker: mkdir %s/%s",
					wk->dir, path);
		/* Made here or by another thread whose commit may never
		 * come: this thread's commits sync its entry too. */
		t->dir_unsynced = true;
		p->s->dir_made = true;
	}
	part_name(path, sizeof(path), p);
	int fd = open_counted(t, path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		wk_log(wk, 0, "open %s/%s: %s", wk->dir, path, why_open(fd));
		return ushi_fail(fd, "worker: open %s/%s: %s", wk->dir, path,
				why_open(fd));
	}
	p->fd = fd;
	struct stat st;
	if (fstat(fd, &st))
		return ushi_fail(-errno, "worker: stat %s/%s", wk->dir, path);
	if (!S_ISREG(st.st_mode)) {
		wk_log(wk, 0, "%s/%s: not a regular file", wk->dir, path);
		return ushi_fail(-EINVAL, "worker: %s/%s: not a regular file",
				wk->dir, path);
	}
	p->off = valid_end(fd, (uint64_t)st.st_size);
	if (p->off < (uint64_t)st.st_size) {
		wk_log(wk, 1, "%s/%s: cutting %llu bytes of uncommitted tail",
		       wk->dir, path,
		       (unsigned long long)st.st_size - p->off);
		if (ftruncate(fd, (off_t)p->off))
			return ushi_fail(-errno, "worker: truncate %s/%s",
					wk->dir, path);
	}
	if (!st.st_size)
		p->s->dir_unsynced = true;
	/* O_DIRECT needs aligned offsets: a file left unaligned by a
	 * buffered run stays buffered. */
	if (wk->o.direct && !(p->off % USHI_ALIGN))
		p->direct = !fcntl(fd, F_SETFL, O_DIRECT);
	p->opened = true;
	return 0;
}

/* Makes p's file open (reopening a closed one) and the most recently
 * used. */
int wk_part_open(struct wk_thread *t, struct wk_part *p)
{
	if (p->fd >= 0) {
		wk_list_del(&t->lru, &p->lru);
		wk_list_add(&t->lru, &p->lru);
		return 0;
	}
	int ret;
	if (!p->opened) {
		ret = file_create(t, p);
	} else {
		char path[64];
		part_name(path, sizeof(path), p);
		/* No O_CREAT: a file gone since (its shuffle dropped) is
		 * not made again. */
		ret = open_counted(t, path, O_RDWR | O_CLOEXEC, 0);
		if (ret >= 0) {
			p->fd = ret;
			ret = 0;
			if (p->direct)
				fcntl(p->fd, F_SETFL, O_DIRECT);
		}
	}
	if (ret) {
		if (p->fd >= 0)
			close(p->fd);
		p->fd = -1;
		return ret;
	}
	p->slot = ring_file_add(t->ring, p->fd);
	wk_list_add(&t->lru, &p->lru);
	t->nopen++;
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
		       "entry only", wk->dir, name, why_open(fd));
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
