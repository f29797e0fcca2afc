/*
 * Partition files "<dir>/s<S>/p<P>.t<N>.data": the frames one thread
 * received for (shuffle S, partition P), stored exactly as received,
 * appended through a flush buffer of registered memory with WRITE_FIXED.
 * A file per thread keeps appends single-writer without locks.
 *
 * Committed frames always precede any hole or torn frame: a commit waits
 * for every write of its thread, so scanning a file from the start and
 * stopping at the first invalid header loses only uncommitted data. With
 * O_DIRECT, partial flushes are padded to the block size with a PAD frame.
 */
#define _GNU_SOURCE
#include "worker/wk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int wk_part_path(char *buf, size_t n, const char *dir, uint32_t shuffle,
		 uint32_t partition, unsigned thread)
{
	return snprintf(buf, n, "%s/s%u/p%u.t%u.data", dir, shuffle,
			partition, thread);
}

static size_t hash(uint32_t shuffle, uint32_t partition)
{
	uint64_t k = ((uint64_t)shuffle << 32 | partition) *
		     0x9e3779b97f4a7c15ull;
	return (size_t)(k >> 32);
}

static int table_grow(struct wk_thread *t)
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

/* The end of the valid frames of fd: torn or unwritten data after it was
 * never committed (see the top of this file). */
static uint64_t valid_end(struct wk_thread *t, int fd, uint64_t size)
{
	uint64_t off = 0;
	uint8_t h[USH_FRAME_HDR_SIZE];
	while (size - off >= USH_FRAME_HDR_SIZE) {
		struct ushi_frame f;
		const char *why;
		if (pread(fd, h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h) ||
		    proto_header(h, &f, t->wk->o.max_frame, true, &why) ||
		    (f.type != USHI_FRAME_DATA && f.type != USHI_FRAME_PAD) ||
		    proto_size(&f) > size - off)
			break;
		off += proto_size(&f);
	}
	return off;
}

static int open_file(struct wk_thread *t, struct wk_part *p)
{
	char path[4096];
	struct ush_worker *wk = t->wk;
	snprintf(path, sizeof(path), "%s/s%u", wk->dir, p->shuffle);
	if (mkdir(path, 0755) && errno != EEXIST)
		return ushi_fail(-errno, "worker: mkdir %s", path);
	wk_part_path(path, sizeof(path), wk->dir, p->shuffle, p->partition,
		     t->idx);
	int flags = O_RDWR | O_CREAT | O_CLOEXEC;
	p->fd = open(path, flags, 0644);
	if (p->fd < 0)
		return ushi_fail(-errno, "worker: open %s", path);
	struct stat st;
	if (fstat(p->fd, &st))
		return ushi_fail(-errno, "worker: stat %s", path);
	p->off = valid_end(t, p->fd, (uint64_t)st.st_size);
	if (p->off < (uint64_t)st.st_size) {
		wk_log(wk, 1, "%s: cutting %llu bytes of uncommitted tail",
		       path, (unsigned long long)st.st_size - p->off);
		if (ftruncate(p->fd, (off_t)p->off))
			return ushi_fail(-errno, "worker: truncate %s", path);
	}
	if (!st.st_size)
		p->created = t->dir_unsynced = true;
	/* O_DIRECT needs aligned offsets: a file left unaligned by a
	 * buffered run stays buffered. */
	if (wk->o.direct && !(p->off % USHI_ALIGN)) {
		int dfd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
		if (dfd >= 0) {
			close(p->fd);
			p->fd = dfd;
			p->direct = true;
		}
	}
	p->slot = ring_file_add(t->ring, p->fd);
	return 0;
}

static struct wk_part *part_get(struct wk_thread *t, uint32_t shuffle,
				uint32_t partition, int *err)
{
	if (t->ptab) {
		size_t h = hash(shuffle, partition) & t->pmask;
		for (struct wk_part *p = t->ptab[h]; p; p = p->hnext)
			if (p->shuffle == shuffle && p->partition == partition)
				return p;
	}
	if ((t->nparts + 1) * 2 > t->pmask + 1 && (*err = table_grow(t)))
		return NULL;
	struct wk_part *p = ushi_calloc(1, sizeof(*p));
	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	p->t = t;
	p->shuffle = shuffle;
	p->partition = partition;
	p->fd = p->slot = -1;
	if ((*err = open_file(t, p))) {
		if (p->fd >= 0)
			close(p->fd);
		ushi_free(p);
		return NULL;
	}
	size_t h = hash(shuffle, partition) & t->pmask;
	p->hnext = t->ptab[h];
	t->ptab[h] = p;
	t->nparts++;
	return p;
}

static void write_done(struct ushi_op *op, int res)
{
	struct wk_part *p = op->owner;
	struct wk_thread *t = p->t;
	if (res < 0 && !p->err) {
		p->err = res;
		wk_log(t->wk, 0, "write s%u/p%u.t%u offset %llu: %s", p->shuffle,
		       p->partition, t->idx, (unsigned long long)op->io.off,
		       ush_strerror(res));
	}
	if (op->io.buf)
		pool_put(ring_pool(t->ring), op->io.buf);
	else
		ushi_free((void *)op->io.addr);
	p->writes--;
	t->writes--;
}

/* Submits n bytes at data (pool buffer b, or heap memory when b is NULL)
 * at the part's end. The ring owns the memory from here on. */
static int submit(struct wk_part *p, struct ushi_buf *b, uint8_t *data,
		  uint32_t n)
{
	struct wk_thread *t = p->t;
	struct ushi_op *op;
	if (p->direct && n % USHI_ALIGN) {
		/* Pad with a PAD frame; a gap under a header takes a block
		 * more. Callers leave USHI_ALIGN + header bytes of room. */
		uint32_t gap = ALIGN_UP(n, USHI_ALIGN) - n;
		if (gap < USH_FRAME_HDR_SIZE)
			gap += USHI_ALIGN;
		proto_put_pad(data + n, gap);
		n += gap;
	}
	int ret = ring_op_get(t->ring, &op);
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
	t->writes++;
	p->unsynced = true;
	return 0;
}

static int flush_part(struct wk_part *p)
{
	struct ushi_buf *b = p->buf;
	if (!b)
		return 0;
	p->buf = NULL;
	if (!p->len) {
		pool_put(ring_pool(p->t->ring), b);
		return 0;
	}
	uint32_t n = p->len;
	p->len = 0;
	return submit(p, b, b->data, n);
}

/* Frees a pool buffer: waits for writes, or writes another part's
 * partial buffer when none is in flight. */
static int make_room(struct wk_thread *t)
{
	if (t->writes)
		return ring_reap(t->ring, 1);
	for (size_t i = 0; i <= t->pmask; i++)
		for (struct wk_part *p = t->ptab[i]; p; p = p->hnext)
			if (p->buf)
				return flush_part(p);
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
	if (p->err)
		return p->err;
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
		p->buf = pool_get(ring_pool(t->ring), t->flush_order);
		if (!p->buf && (ret = make_room(t)))
			return ret;
		if (p->err)
			return p->err;
	}
	memcpy(p->buf->data + p->len, frame, n);
	p->len += n;
	return 0;
}

static int sync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int ret = fsync(fd) ? -errno : 0;
	close(fd);
	return ret;
}

int wk_store_sync(struct wk_thread *t)
{
	int ret = 0;
	for (size_t i = 0; t->ptab && i <= t->pmask; i++)
		for (struct wk_part *p = t->ptab[i]; p; p = p->hnext)
			if (!ret)
				ret = flush_part(p);
	while (t->writes) {
		int r = ring_reap(t->ring, 1);
		if (r)
			return r;
	}
	for (size_t i = 0; !ret && t->ptab && i <= t->pmask; i++)
		for (struct wk_part *p = t->ptab[i]; p; p = p->hnext) {
			if (p->err && !ret)
				ret = p->err;
			if (!p->unsynced || ret)
				continue;
			if (fdatasync(p->fd))
				ret = -errno;
			p->unsynced = false;
		}
	if (ret)
		return ret;
	if (t->dir_unsynced) {
		/* New files and shuffle directories must survive a crash. */
		char path[4096];
		for (size_t i = 0; !ret && t->ptab && i <= t->pmask; i++)
			for (struct wk_part *p = t->ptab[i]; p; p = p->hnext) {
				if (!p->created)
					continue;
				snprintf(path, sizeof(path), "%s/s%u",
					 t->wk->dir, p->shuffle);
				sync_dir(path);
				p->created = false;
			}
		ret = sync_dir(t->wk->dir);
		t->dir_unsynced = ret != 0;
	}
	return ret;
}

static void part_free(struct wk_thread *t, struct wk_part *p)
{
	ring_file_del(t->ring, p->slot);
	if (p->fd >= 0)
		close(p->fd);
	if (p->buf)
		pool_put(ring_pool(t->ring), p->buf);
	ushi_free(p);
	t->nparts--;
}

void wk_store_drop(struct wk_thread *t, uint32_t shuffle)
{
	for (size_t i = 0; t->ptab && i <= t->pmask; i++) {
		struct wk_part **pp = &t->ptab[i];
		while (*pp) {
			struct wk_part *p = *pp;
			if (p->shuffle != shuffle) {
				pp = &p->hnext;
				continue;
			}
			while (p->writes && ring_reap(t->ring, 1) == 0)
				;
			*pp = p->hnext;
			part_free(t, p);
		}
	}
}

void wk_store_close(struct wk_thread *t)
{
	for (size_t i = 0; t->ptab && i <= t->pmask; i++) {
		struct wk_part *p = t->ptab[i], *nx;
		for (; p; p = nx) {
			nx = p->hnext;
			part_free(t, p);
		}
	}
	ushi_free(t->ptab);
	t->ptab = NULL;
	t->pmask = 0;
}
