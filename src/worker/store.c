/*
 * Partition files "<dir>/s<S>/p<P>.t<N>.data": the frames one thread
 * received for (shuffle S, partition P), stored exactly as received,
 * appended through a flush buffer of registered memory with WRITE_FIXED.
 * A file per thread keeps appends single-writer without locks. Opening,
 * closing and syncing the files is files.c's: at most wk->open_max of a
 * thread's are open at once.
 *
 * Committed frames always precede any hole or torn frame: a commit waits
 * for every write to the files of its shuffle, so scanning a file from
 * the start and stopping at the first invalid header loses only
 * uncommitted data. With O_DIRECT, partial flushes are padded to the
 * block size with a PAD frame.
 *
 * Errors belong to the shuffle: a failed write or sync fails every later
 * commit of that shuffle on this thread (the file may hold a hole that
 * would hide later frames) until it is dropped; other shuffles go on.
 */
#define _GNU_SOURCE
#include "worker/wk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

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
	if ((*err = wk_part_open(t, p))) {
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
		wk_part_fail(p, res, "write", op->io.off);
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
	if (!ret && (ret = wk_part_open(t, p)))
		wk_part_fail(p, ret, "reopen", p->off);
	if (!ret && (ret = ring_op_get(t->ring, &op)))
		wk_part_fail(p, ret, "write", p->off);
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
	wk_list_del(&p->t->bufq, &p->bufq);
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
		flush_part(WK_PART_OF(t->bufq.head, bufq));
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
		wk_list_add(&p->s->dirty, &p->dirty);
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
			wk_list_add(&t->bufq, &p->bufq);
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
		flush_part(WK_PART_OF(l, dirty));
	while (s->writes) {
		int ret = ring_reap(t->ring, 1);
		if (ret)
			return ret;
	}
	if (s->err)
		return s->err;
	while (s->dirty.head && !s->err) {
		struct wk_part *p = WK_PART_OF(s->dirty.head, dirty);
		/* Only synced files are closed: an unsynced one is open
		 * (reopened here only should that ever change). */
		int ret = p->unsynced ? wk_part_open(t, p) : 0;
		if (ret)
			wk_part_fail(p, ret, "reopen", p->off);
		else
			wk_part_sync(p);
		wk_list_del(&s->dirty, &p->dirty);
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
		wk_part_close(t, p);
	if (p->buf) {
		wk_list_del(&t->bufq, &p->bufq);
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
