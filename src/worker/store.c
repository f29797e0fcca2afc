/*
 * Partition files "<dir>/s<S>/p<P>.t<N>.data": the frames one thread
 * received for (shuffle S, partition P), stored exactly as received,
 * appended through a flush buffer of registered memory with WRITE_FIXED.
 * A file per thread keeps appends single-writer without locks.
 *
 * Committed frames always precede any hole or torn frame: a commit waits
 * for every write to the files of its shuffle, so scanning a file from
 * the start and stopping at the first invalid header loses only
 * uncommitted data. With O_DIRECT, partial flushes are padded to the
 * block size with a PAD frame. Files are scanned with the format's
 * bounds (USHI_FRAME_MAX), not today's max_frame: frames stored under a
 * larger one stay.
 *
 * Open files are a bounded cache: a thread keeps at most wk->open_max
 * open, and closes the least recently written idle one to open another.
 * A partition whose file is closed keeps its offset, flush buffer and
 * error, and reopens at its next write. A file is closed only once
 * synced (an eviction syncs it first): an fdatasync on a later fd might
 * miss a writeback error reported to the closed one.
 *
 * Errors belong to the shuffle: a failed write or sync fails every later
 * commit of that shuffle on this thread (the file may hold a hole that
 * would hide later frames) until it is dropped; other shuffles go on.
 *
 * Every path is resolved beneath --dir (wk->dirfd) without following a
 * symbolic link.
 */
#define _GNU_SOURCE
#include "worker/wk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PART_OF(link, field)                                                 \
	((struct wk_part *)(void *)((char *)(link) -                         \
				    offsetof(struct wk_part, field)))

static void list_add(struct wk_list *l, struct wk_link *n)
{
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

static void list_del(struct wk_list *l, struct wk_link *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

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

/* ----------------------------------------------------------- tables */

static size_t hash(uint32_t shuffle, uint32_t partition)
{
	uint64_t k = ((uint64_t)shuffle << 32 | partition) *
		     0x9e3779b97f4a7c15ull;
	return (size_t)(k >> 32);
}

static int ptab_grow(struct wk_thread *t)
{
	size_t n = t->pmask ? 2 * (t->pmask + 1) : 256;
	struct wk_part **tab = ushi_calloc(n, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; t->ptab && i <= t->pmask; i++) {
		struct wk_part *p = t->ptab[i], *nx;
		for (; p; p = nx) {
			nx = p->hnext;
			size_t h = hash(p->shuffle, p->partition) & (n - 1);
			p->hnext = tab[h];
			tab[h] = p;
		}
	}
	ushi_free(t->ptab);
	t->ptab = tab;
	t->pmask = n - 1;
	return 0;
}

static int stab_grow(struct wk_thread *t)
{
	size_t n = t->smask ? 2 * (t->smask + 1) : 16;
	struct wk_shuf **tab = ushi_calloc(n, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; t->stab && i <= t->smask; i++) {
		struct wk_shuf *s = t->stab[i], *nx;
		for (; s; s = nx) {
			nx = s->hnext;
			size_t h = hash(s->shuffle, 0) & (n - 1);
			s->hnext = tab[h];
			tab[h] = s;
		}
	}
	ushi_free(t->stab);
	t->stab = tab;
	t->smask = n - 1;
	return 0;
}

static struct wk_shuf *shuf_find(struct wk_thread *t, uint32_t shuffle)
{
	if (!t->stab)
		return NULL;
	struct wk_shuf *s = t->stab[hash(shuffle, 0) & t->smask];
	while (s && s->shuffle != shuffle)
		s = s->hnext;
	return s;
}

static struct wk_shuf *shuf_get(struct wk_thread *t, uint32_t shuffle,
				int *err)
{
	struct wk_shuf *s = shuf_find(t, shuffle);
	if (s)
		return s;
	if ((t->nshuf + 1) * 2 > t->smask + 1 && (*err = stab_grow(t)))
		return NULL;
	s = ushi_calloc(1, sizeof(*s));
	if (!s) {
		*err = -ENOMEM;
		return NULL;
	}
	s->shuffle = shuffle;
	size_t h = hash(shuffle, 0) & t->smask;
	s->hnext = t->stab[h];
	t->stab[h] = s;
	t->nshuf++;
	return s;
}

/* --------------------------------------------------- the file cache */

/* The shuffle's first failure (of what, at offset off): it commits no
 * more here. */
static void part_fail(struct wk_part *p, int err, const char *what,
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

static void file_sync(struct wk_part *p)
{
	if (!p->unsynced)
		return;
	if (fdatasync(p->fd))
		part_fail(p, -errno, "fdatasync", p->off);
	/* Failed or not: a retry could report success without the data
	 * (the kernel reports a writeback error once); the shuffle holds
	 * the error. */
	p->unsynced = false;
}

static void file_close(struct wk_thread *t, struct wk_part *p)
{
	ring_file_del(t->ring, p->slot);
	p->slot = -1;
	close(p->fd);
	p->fd = -1;
	list_del(&t->lru, &p->lru);
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
			struct wk_part *p = PART_OF(l, lru);
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
			file_sync(victim);
			file_close(t, victim);
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
static int part_open(struct wk_thread *t, struct wk_part *p)
{
	if (p->fd >= 0) {
		list_del(&t->lru, &p->lru);
		list_add(&t->lru, &p->lru);
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
	list_add(&t->lru, &p->lru);
	t->nopen++;
	return 0;
}

/* -------------------------------------------------------- partitions */

static struct wk_part *part_get(struct wk_thread *t, uint32_t shuffle,
				uint32_t partition, int *err)
{
	if (t->ptab) {
		size_t h = hash(shuffle, partition) & t->pmask;
		for (struct wk_part *p = t->ptab[h]; p; p = p->hnext)
			if (p->shuffle == shuffle && p->partition == partition)
				return p;
	}
	if ((t->nparts + 1) * 2 > t->pmask + 1 && (*err = ptab_grow(t)))
		return NULL;
	struct wk_shuf *s = shuf_get(t, shuffle, err);
	struct wk_part *p = s ? ushi_calloc(1, sizeof(*p)) : NULL;
	if (!p) {
		if (s)
			*err = -ENOMEM;
		return NULL;
	}
	p->t = t;
	p->s = s;
	p->shuffle = shuffle;
	p->partition = partition;
	p->fd = p->slot = -1;
	if ((*err = part_open(t, p))) {
		ushi_free(p);
		return NULL;
	}
	size_t h = hash(shuffle, partition) & t->pmask;
	p->hnext = t->ptab[h];
	t->ptab[h] = p;
	p->snext = s->parts;
	s->parts = p;
	t->nparts++;
	return p;
}

static void write_done(struct ushi_op *op, int res)
{
	struct wk_part *p = op->owner;
	struct wk_thread *t = p->t;
	if (res < 0)
		part_fail(p, res, "write", op->io.off);
	if (op->io.buf)
		pool_put(ring_pool(t->ring), op->io.buf);
	else
		ushi_free((void *)op->io.addr);
	p->writes--;
	p->s->writes--;
	t->writes--;
}

/* Submits n bytes at data (pool buffer b, or heap memory when b is NULL)
 * at the part's end. The ring owns the memory from here on; on an error
 * it is freed and the shuffle has failed. */
static int submit(struct wk_part *p, struct ushi_buf *b, uint8_t *data,
		  uint32_t n)
{
	struct wk_thread *t = p->t;
	struct ushi_op *op = NULL;
	if (p->direct && n % USHI_ALIGN) {
		/* Pad with a PAD frame; a gap under a header takes a block
		 * more. Callers leave USHI_ALIGN + header bytes of room. */
		uint32_t gap = ALIGN_UP(n, USHI_ALIGN) - n;
		if (gap < USH_FRAME_HDR_SIZE)
			gap += USHI_ALIGN;
		proto_put_pad(data + n, gap);
		n += gap;
	}
	int ret = p->err;
	if (!ret && (ret = part_open(t, p)))
		part_fail(p, ret, "reopen", p->off);
	if (!ret && (ret = ring_op_get(t->ring, &op)))
		part_fail(p, ret, "write", p->off);
	if (ret) {
		if (b)
			pool_put(ring_pool(t->ring), b);
		else
			ushi_free(data);
		return ret;
	}
	if (b)
		buf_move(b, BUF_WRITER, BUF_INFLIGHT);
	op->cb = write_done;
	op->owner = p;
	ring_write_at(t->ring, op, b, data, p->off, n, p->fd, p->slot);
	p->off += n;
	p->writes++;
	p->s->writes++;
	t->writes++;
	p->unsynced = true;
	return 0;
}

static int flush_part(struct wk_part *p)
{
	struct ushi_buf *b = p->buf;
	if (!b)
		return 0;
	list_del(&p->t->bufq, &p->bufq);
	p->buf = NULL;
	uint32_t n = p->len;
	p->len = 0;
	if (!n) {
		pool_put(ring_pool(p->t->ring), b);
		return 0;
	}
	return submit(p, b, b->data, n);
}

/* Frees a pool buffer: waits for writes, or writes the oldest partial
 * buffer when none is in flight. That part's failure is its shuffle's,
 * not the caller's. */
static int make_room(struct wk_thread *t)
{
	if (t->writes)
		return ring_reap(t->ring, 1);
	if (t->bufq.head) {
		flush_part(PART_OF(t->bufq.head, bufq));
		return 0;
	}
	return ushi_fail(USH_EPOOL, "worker: no flush buffer free");
}

/* Room in a flush buffer beyond what frames may fill: a PAD frame. */
static uint32_t reserve(const struct wk_part *p)
{
	return p->direct ? USHI_ALIGN + USH_FRAME_HDR_SIZE : 0;
}

int wk_store_append(struct wk_thread *t, const struct ushi_frame *f,
		    const uint8_t *frame)
{
	int ret = 0;
	struct wk_part *p = part_get(t, f->shuffle, f->partition, &ret);
	if (!p)
		return ret;
	if (p->s->err)
		return p->s->err;
	if (!p->in_dirty) {
		list_add(&p->s->dirty, &p->dirty);
		p->in_dirty = true;
	}
	uint32_t n = (uint32_t)proto_size(f);
	uint32_t cap = t->wk->o.flush_size;
	if (n + reserve(p) > cap) {
		/* Larger than a flush buffer: its own aligned heap copy. */
		if ((ret = flush_part(p)))
			return ret;
		uint8_t *m = ushi_aligned_alloc(n + reserve(p));
		if (!m)
			return -ENOMEM;
		memcpy(m, frame, n);
		return submit(p, NULL, m, n);
	}
	if (p->buf && p->len + n + reserve(p) > cap && (ret = flush_part(p)))
		return ret;
	while (!p->buf) {
		struct ushi_buf *b = pool_get(ring_pool(t->ring),
					      t->flush_order);
		if (b) {
			p->buf = b;
			list_add(&t->bufq, &p->bufq);
		} else if ((ret = make_room(t))) {
			return ret;
		}
		if (p->s->err)
			return p->s->err;
	}
	memcpy(p->buf->data + p->len, frame, n);
	p->len += n;
	return 0;
}

/* ------------------------------------------------------------ sync */

static int sync_dir(struct ush_worker *wk, uint32_t shuffle)
{
	char path[16];
	snprintf(path, sizeof(path), "s%u", shuffle);
	int fd = wk_open_beneath(wk, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				 0);
	if (fd < 0)
		return fd;
	int ret = fsync(fd) ? -errno : 0;
	close(fd);
	return ret;
}

/* The top directory: new shuffle directories and commit logs. */
static int top_sync(struct wk_thread *t)
{
	if (t->dir_unsynced) {
		if (fsync(t->wk->dirfd))
			return -errno;
		t->dir_unsynced = false;
	}
	return 0;
}

static int shuf_sync(struct wk_thread *t, struct wk_shuf *s)
{
	for (struct wk_link *l = s->dirty.head; l && !s->err; l = l->next)
		flush_part(PART_OF(l, dirty));
	while (s->writes) {
		int ret = ring_reap(t->ring, 1);
		if (ret)
			return ret;
	}
	if (s->err)
		return s->err;
	while (s->dirty.head && !s->err) {
		struct wk_part *p = PART_OF(s->dirty.head, dirty);
		/* Only synced files are closed: an unsynced one is open
		 * (reopened here only should that ever change). */
		int ret = p->unsynced ? part_open(t, p) : 0;
		if (ret)
			part_fail(p, ret, "reopen", p->off);
		else
			file_sync(p);
		list_del(&s->dirty, &p->dirty);
		p->in_dirty = false;
	}
	if (s->err)
		return s->err;
	if (s->dir_unsynced) {
		/* New files and shuffle directories must survive a crash. */
		int ret = sync_dir(t->wk, s->shuffle);
		if (ret)
			return ret;
		s->dir_unsynced = false;
	}
	return top_sync(t);
}

int wk_store_sync_shuffle(struct wk_thread *t, uint32_t shuffle)
{
	struct wk_shuf *s = shuf_find(t, shuffle);
	return s ? shuf_sync(t, s) : top_sync(t);
}

int wk_store_sync(struct wk_thread *t)
{
	int ret = 0;
	for (size_t i = 0; t->stab && i <= t->smask; i++)
		for (struct wk_shuf *s = t->stab[i]; s; s = s->hnext) {
			if (s->err) /* reported when it happened */
				continue;
			int r = shuf_sync(t, s);
			if (r && !ret)
				ret = r;
		}
	return ret ? ret : top_sync(t);
}

/* ------------------------------------------------- drop and teardown */

static void part_free(struct wk_thread *t, struct wk_part *p)
{
	if (p->fd >= 0)
		file_close(t, p);
	if (p->buf) {
		list_del(&t->bufq, &p->bufq);
		pool_put(ring_pool(t->ring), p->buf);
	}
	size_t h = hash(p->shuffle, p->partition) & t->pmask;
	struct wk_part **pp = &t->ptab[h];
	while (*pp != p)
		pp = &(*pp)->hnext;
	*pp = p->hnext;
	ushi_free(p);
	t->nparts--;
}

/* Frees s and its parts once none has a write in flight. */
static void shuf_free(struct wk_thread *t, struct wk_shuf *s)
{
	while (s->writes && ring_reap(t->ring, 1) == 0)
		;
	for (struct wk_part *p = s->parts, *nx; p; p = nx) {
		nx = p->snext;
		part_free(t, p);
	}
	struct wk_shuf **sp = &t->stab[hash(s->shuffle, 0) & t->smask];
	while (*sp != s)
		sp = &(*sp)->hnext;
	*sp = s->hnext;
	ushi_free(s);
	t->nshuf--;
}

void wk_store_drop(struct wk_thread *t, uint32_t shuffle)
{
	struct wk_shuf *s = shuf_find(t, shuffle);
	if (s)
		shuf_free(t, s);
}

void wk_store_close(struct wk_thread *t)
{
	for (size_t i = 0; t->stab && i <= t->smask; i++)
		while (t->stab[i])
			shuf_free(t, t->stab[i]);
	ushi_free(t->ptab);
	ushi_free(t->stab);
	t->ptab = NULL;
	t->stab = NULL;
	t->pmask = t->smask = 0;
}

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

int wk_store_fetch_threads(struct wk_thread *t, uint32_t shuffle,
			   unsigned *n)
{
	int ret = 0;
	struct wk_shuf *s = shuf_get(t, shuffle, &ret);
	if (!s)
		return ret;
	if (!s->fetch_threads) {
		unsigned max = t->wk->nthreads;
		char name[16];
		snprintf(name, sizeof(name), "s%u", shuffle);
		int fd = wk_open_beneath(t->wk, name, O_RDONLY | O_DIRECTORY |
					 O_NONBLOCK | O_CLOEXEC, 0);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		if (fd >= 0 && !d) {
			ret = -errno;
			close(fd);
			return ret;
		}
		if (fd < 0 && fd != -ENOENT)
			return fd;
		struct dirent *de;
		while (d && (de = readdir(d))) {
			unsigned p, k;
			char tail[8];
			/* 1024 threads at most: a larger number is not ours. */
			if (sscanf(de->d_name, "p%u.t%u.%7s", &p, &k,
				   tail) == 3 && !strcmp(tail, "data") &&
			    k < 1024 && k >= max)
				max = k + 1;
		}
		if (d)
			closedir(d);
		s->fetch_threads = max;
	}
	*n = s->fetch_threads;
	return 0;
}
