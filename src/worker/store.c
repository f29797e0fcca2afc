/*
 * Shuffle logs: "<dir>/s<S>/t<T>.log" holds the DATA frames thread T
 * received for shuffle S, exactly as received and packed back to back;
 * "<dir>/s<S>/t<T>.idx" one fixed-size entry per frame (files.c,
 * docs/format.md). A log per (shuffle, thread) keeps appends
 * single-writer without locks, and its size independent of the number
 * of partitions: each frame is copied once, from the receive buffer into
 * the log's buffer of registered memory, and full buffers go out with
 * WRITE_FIXED at aligned offsets (O_DIRECT where the file system allows),
 * up to WK_LOG_QD at once. A sync writes the partial tail block padded
 * and keeps it, so the next write rewrites that block from its start:
 * padding never accumulates. The rewritten block's committed prefix is
 * the same bytes, so a torn rewrite cannot damage it.
 *
 * An index entry is written only once the log bytes it points at are
 * (in batches of WK_IDX_BATCH, and at every sync); a commit's sync round
 * writes the rest of the index and syncs the log and the index through
 * the ring, and the commit is logged only once both are durable. So
 * committed entries and frames are durable before their commit, and only
 * what follows the last commit can be torn by a crash: the repair at the
 * first open (files.c) cuts only that, never an extent of a committed
 * attempt. Commits that come while a round runs share the next one: a
 * round costs two syncs however many maps of the shuffle it covers.
 * With --sync=none a round ends once its writes are done: no sync
 * (wal.c says what a start after a host crash does then).
 *
 * Errors belong to the shuffle: a failed write or sync fails every later
 * commit of that shuffle on this thread (the log may hold a hole) until
 * it is dropped; other shuffles go on.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/files.h"
#include "worker/store.h"

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
	s->t = t;
	s->shuffle = shuffle;
	s->fd = s->slot = s->ifd = -1;
	size_t h = hash(shuffle, 0) & t->smask;
	s->hnext = t->stab[h];
	t->stab[h] = s;
	t->nshuf++;
	return s;
}

/* ------------------------------------------------------------ writes */

static uint32_t align_of(const struct wk_shuf *s)
{
	return s->direct ? USHI_ALIGN : 1;
}

static uint64_t align_down(const struct wk_shuf *s, uint64_t x)
{
	return x / align_of(s) * align_of(s);
}

/* Waits until none of s's writes is in flight. */
static int wait_writes(struct wk_thread *t, struct wk_shuf *s)
{
	while (s->writes) {
		int ret = ring_reap(t->ring, 1);
		if (ret)
			return ret;
	}
	return 0;
}

static void log_done(struct ushi_op *op, int res)
{
	struct wk_shuf *s = op->owner;
	struct wk_thread *t = s->t;
	if (res < 0)
		wk_shuf_fail(s, res, "write of the log", op->io.off);
	for (unsigned i = 0; i < s->wq_n; i++) {
		unsigned k = (s->wq_head + i) % WK_LOG_QD;
		if (s->wq[k].off == op->io.off && !s->wq[k].done) {
			s->wq[k].done = true;
			break;
		}
	}
	while (s->wq_n && s->wq[s->wq_head].done) {
		if (s->wq[s->wq_head].end > s->written)
			s->written = s->wq[s->wq_head].end;
		s->wq_head = (s->wq_head + 1) % WK_LOG_QD;
		s->wq_n--;
		s->wq_done++;
	}
	if (op == s->pad) {
		/* Its block's next write may go now (it takes no op: a
		 * callback may start one it holds). */
		s->pad = NULL;
		if (s->held.op)
			ring_write_at(t->ring, s->held.op, s->held.b,
				      s->held.mem, s->held.off, s->held.n,
				      s->fd, s->slot);
		s->held.op = NULL;
	}
	/* The log's own buffer (a tail write) stays with it. */
	if (op->io.buf && op->io.buf != s->buf)
		pool_put(ring_pool(t->ring), op->io.buf);
	else if (!op->io.buf)
		ushi_free((void *)op->io.addr);
	s->writes--;
	t->writes--;
}

/* Writes n bytes at mem (in pool buffer b, or heap memory when b is
 * NULL) at log offset off; the frames in it end at data_end. The ring
 * owns the memory from here on, but s's own buffer; on an error it is
 * freed and the shuffle has failed. Returns the op (its write may be
 * held behind a round's padded tail block) through *opp when given. */
static int log_submit(struct wk_shuf *s, struct ushi_buf *b, uint8_t *mem,
		      uint32_t n, uint64_t off, uint64_t data_end,
		      struct ushi_op **opp)
{
	struct wk_thread *t = s->t;
	struct ushi_op *op = NULL;
	int ret = s->err;
	while (!ret && s->wq_n == WK_LOG_QD)
		ret = ring_reap(t->ring, 1);
	if (!ret && (ret = wk_shuf_open(t, s)))
		wk_shuf_fail(s, ret, "reopen", off);
	if (!ret && (ret = ring_op_get(t->ring, &op)))
		wk_shuf_fail(s, ret, "write of the log", off);
	if (ret) {
		if (b && b != s->buf)
			pool_put(ring_pool(t->ring), b);
		else if (!b)
			ushi_free(mem);
		return ret;
	}
	if (b && b != s->buf)
		buf_move(b, BUF_WRITER, BUF_INFLIGHT);
	unsigned k = (s->wq_head + s->wq_n++) % WK_LOG_QD;
	s->wq[k].off = off;
	s->wq[k].end = data_end;
	s->wq[k].done = false;
	op->cb = log_done;
	op->owner = s;
	/* Only the write after the padded one starts in its block: later
	 * ones start past it. */
	if (s->pad && off < s->pad->io.off + s->pad->io.len)
		s->held = (typeof(s->held)){op, b, mem, off, n};
	else
		ring_write_at(t->ring, op, b, mem, off, n, s->fd, s->slot);
	s->writes++;
	t->writes++;
	s->wq_sub++;
	s->unsynced = true;
	if (opp)
		*opp = op;
	return 0;
}

static void idx_done(struct ushi_op *op, int res)
{
	struct wk_shuf *s = op->owner;
	if (res < 0)
		wk_shuf_fail(s, res, "write of the index", op->io.off);
	ushi_free((void *)op->io.addr);
	s->iwrites--;
	s->writes--;
	s->t->writes--;
}

/* Writes the pending index entries whose frames are written. */
static int idx_flush(struct wk_shuf *s)
{
	struct wk_thread *t = s->t;
	/* The entries whose frames end at or below written. */
	size_t n = 0;
	uint64_t off = s->ioff;
	while (n < s->ilen && off + get_le32(s->ipend + n) <= s->written) {
		off += get_le32(s->ipend + n);
		n += WK_IDX_ENTRY;
	}
	if (!n)
		return s->err;
	struct ushi_op *op = NULL;
	uint8_t *m = ushi_malloc(n);
	int ret = s->err;
	if (!ret && !m)
		ret = -ENOMEM;
	if (!ret && (ret = wk_shuf_open(t, s)))
		wk_shuf_fail(s, ret, "reopen", s->iend);
	if (!ret && (ret = ring_op_get(t->ring, &op)))
		wk_shuf_fail(s, ret, "write of the index", s->iend);
	if (ret) {
		ushi_free(m);
		return ret;
	}
	memcpy(m, s->ipend, n);
	memmove(s->ipend, s->ipend + n, s->ilen - n);
	s->ilen -= n;
	s->ioff = off;
	op->cb = idx_done;
	op->owner = s;
	ring_write_at(t->ring, op, NULL, m, s->iend, (uint32_t)n, s->ifd, -1);
	s->iend += n;
	s->iwrites++;
	s->writes++;
	t->writes++;
	s->iunsynced = true;
	return 0;
}

/* Writes the partial tail of s's buffer padded to a whole block, waits
 * for it, and keeps the tail block at the start of the buffer. */
static int flush_tail(struct wk_thread *t, struct wk_shuf *s)
{
	struct ushi_buf *b = s->buf;
	if (!b || !s->len || s->err)
		return s->err;
	uint32_t len = s->len;
	uint32_t n = (uint32_t)ALIGN_UP((uint64_t)len, align_of(s));
	memset(b->data + len, 0, n - len);
	int ret = log_submit(s, b, b->data, n, s->base, s->base + len, NULL);
	if (!ret)
		ret = wait_writes(t, s);
	if (ret || s->err)
		return ret ? ret : s->err;
	uint32_t k = (uint32_t)align_down(s, len);
	memmove(b->data, b->data + k, len - k);
	s->base += k;
	s->len = len - k;
	return 0;
}

/* Frees a pool buffer: waits for writes, or parks the oldest log's
 * buffer when none is in flight (that log's failure is its shuffle's,
 * not the caller's). */
static int make_room(struct wk_thread *t, struct wk_shuf *keep)
{
	if (t->writes)
		return ring_reap(t->ring, 1);
	for (struct wk_link *l = t->bufq.head; l; l = l->next) {
		struct wk_shuf *s = WK_OF(l, struct wk_shuf, bufq);
		if (s == keep)
			continue;
		wk_log(t->wk, 2, "thread %u: shuffle %u's log gives its buffer "
		       "up", t->idx, s->shuffle);
		flush_tail(t, s);
		/* Its tail is on disk: read back when it next gets one. */
		wk_list_del(&t->bufq, &s->bufq);
		pool_put(ring_pool(t->ring), s->buf);
		s->buf = NULL;
		s->base += s->len;
		s->base = align_down(s, s->base);
		s->len = 0;
		return 0;
	}
	return ushi_fail(USH_EPOOL, "worker: no log buffer free");
}

int wk_store_reclaim(struct wk_thread *t)
{
	if (!t->writes && !t->bufq.head)
		return -EAGAIN;
	return make_room(t, NULL);
}

/* Gives s a buffer holding the log's partial tail block (read back
 * from the file when it is not in memory). */
static int ensure_buf(struct wk_thread *t, struct wk_shuf *s)
{
	while (!s->buf) {
		struct ushi_buf *b = pool_get(ring_pool(t->ring),
					      t->flush_order);
		if (!b) {
			int ret = make_room(t, s);
			if (ret)
				return ret;
			if (s->err)
				return s->err;
			continue;
		}
		uint32_t tail = (uint32_t)(s->end - s->base);
		/* make_room() may have closed s's files for another's. */
		int ret = tail ? wk_shuf_open(t, s) : 0;
		if (ret) {
			pool_put(ring_pool(t->ring), b);
			return ret;
		}
		if (tail) {
			ssize_t r = pread(s->fd, b->data, USHI_ALIGN,
					  (off_t)s->base);
			if (r < (ssize_t)tail) {
				pool_put(ring_pool(t->ring), b);
				wk_shuf_fail(s, r < 0 ? -errno : USH_ECORRUPT,
					     "reading back the tail", s->base);
				return s->err;
			}
		}
		s->buf = b;
		s->len = tail;
		wk_list_add(&t->bufq, &s->bufq);
	}
	return 0;
}

/* Writes the whole blocks of s's buffer (and with pad its partial tail
 * block, padded: a sync round's) and carries that partial block over
 * into another buffer, where the next appends go: the loop never waits
 * for the write. */
static int flush_full(struct wk_thread *t, struct wk_shuf *s, bool pad)
{
	struct ushi_buf *b = s->buf;
	uint32_t len = s->len, k = (uint32_t)align_down(s, len);
	uint32_t tail = len - k;
	uint32_t n = pad ? (uint32_t)ALIGN_UP((uint64_t)len, align_of(s)) : k;
	if (!n)
		return 0;
	uint8_t keep[USHI_ALIGN];
	memcpy(keep, b->data + k, tail);
	if (n > len)
		memset(b->data + len, 0, n - len);
	wk_list_del(&t->bufq, &s->bufq);
	s->buf = NULL;
	uint64_t off = s->base;
	s->base += k;
	s->len = 0;
	struct ushi_op *op;
	int ret = log_submit(s, b, b->data, n, off, off + (pad ? len : k),
			     &op);
	if (!ret && n > k)
		s->pad = op;
	/* The tail is in memory: no read back. */
	uint64_t end = s->end;
	s->end = s->base;
	if (!ret)
		ret = ensure_buf(t, s);
	s->end = end;
	if (ret) {
		/* The tail's bytes are lost: the log has a hole. */
		wk_shuf_fail(s, ret, "log buffer", s->base);
		return ret;
	}
	memcpy(s->buf->data, keep, tail);
	s->len = tail;
	return 0;
}

/* A frame larger than a buffer: the buffer's bytes and the frame go out
 * from one heap copy; its partial tail block stays in the buffer. */
static int append_big(struct wk_shuf *s, const uint8_t *frame, uint32_t n)
{
	size_t tot = (size_t)s->len + n;
	uint8_t *m = ushi_aligned_alloc(ALIGN_UP(tot, (size_t)USHI_ALIGN));
	if (!m)
		return -ENOMEM;
	memcpy(m, s->buf->data, s->len);
	memcpy(m + s->len, frame, n);
	uint64_t k = align_down(s, tot);
	memcpy(s->buf->data, m + k, tot - k);
	uint64_t off = s->base;
	s->base += k;
	s->len = (uint32_t)(tot - k);
	return log_submit(s, NULL, m, (uint32_t)k, off, off + k, NULL);
}

static int ipend_grow(struct wk_shuf *s)
{
	size_t c = s->icap ? 2 * s->icap : 64 * WK_IDX_ENTRY;
	uint8_t *m = ushi_malloc(c);
	if (!m)
		return -ENOMEM;
	if (s->ilen)
		memcpy(m, s->ipend, s->ilen);
	ushi_free(s->ipend);
	s->ipend = m;
	s->icap = c;
	return 0;
}

/* Appends the index entry of len log bytes at off (which is s->end). */
static int idx_add(struct wk_shuf *s, uint64_t off, uint32_t len,
		   uint32_t partition, uint32_t map, uint32_t attempt)
{
	int ret;
	if (s->ilen + WK_IDX_ENTRY > s->icap && (ret = ipend_grow(s)))
		return ret;
	if (!s->ilen)
		s->ioff = off;
	wk_idx_set(s->ipend + s->ilen, off, len, partition, map, attempt);
	s->ilen += WK_IDX_ENTRY;
	return 0;
}

static int idx_hole(struct wk_shuf *s, uint64_t off, uint32_t len)
{
	return len ? idx_add(s, off, len, WK_IDX_HOLE, WK_IDX_HOLE,
			     WK_IDX_HOLE) : 0;
}

/* Ends the packed tail before a region: the log buffer goes out padded
 * (the region follows, so it is not kept to be rewritten), and the log's
 * end moves to the next block, the gap a hole. */
static int seal(struct wk_thread *t, struct wk_shuf *s)
{
	struct ushi_buf *b = s->buf;
	int ret = 0;
	if (b) {
		wk_list_del(&t->bufq, &s->bufq);
		s->buf = NULL;
		uint32_t n = (uint32_t)ALIGN_UP((uint64_t)s->len, align_of(s));
		memset(b->data + s->len, 0, n - s->len);
		if (n)
			ret = log_submit(s, b, b->data, n, s->base,
					 s->base + s->len, NULL);
		else
			pool_put(ring_pool(t->ring), b);
	}
	uint64_t end = ALIGN_UP(s->end, (uint64_t)align_of(s));
	if (!ret)
		ret = idx_hole(s, s->end, (uint32_t)(end - s->end));
	s->end = s->base = end;
	s->len = 0;
	return ret;
}

int wk_store_region(struct wk_thread *t, uint32_t shuffle, struct ushi_buf *b,
		    uint32_t have, const struct wk_rent *ents, size_t n)
{
	int ret = 0;
	struct wk_shuf *s = shuf_get(t, shuffle, &ret);
	if (s && !(ret = s->err) && !(ret = wk_shuf_open(t, s)) &&
	    (s->buf || s->end % align_of(s)))
		ret = seal(t, s);
	if (ret) {
		pool_put(ring_pool(t->ring), b);
		return ret;
	}
	uint64_t off = s->end;
	uint32_t pos = 0;
	uint64_t data = 0;
	for (size_t i = 0; !ret && i < n; i++) {
		const struct wk_rent *e = &ents[i];
		data += e->len;
		ret = idx_hole(s, off + pos, e->rel - pos);
		if (!ret)
			ret = idx_add(s, off + e->rel, e->len, e->partition,
				      e->map, e->attempt);
		pos = e->rel + e->len;
	}
	uint32_t len = (uint32_t)ALIGN_UP((uint64_t)pos, align_of(s));
	if (have < len)
		memset(b->data + have, 0, len - have);
	if (!ret)
		ret = idx_hole(s, off + pos, len - pos);
	s->end = s->base = off + len;
	if (ret) {
		wk_shuf_fail(s, ret, "index entries", off);
		pool_put(ring_pool(t->ring), b);
		return ret;
	}
	ret = log_submit(s, b, b->data, len, off, off + len, NULL);
	if (!ret)
		WK_COUNT(t->wk, bytes_in_place, data);
	if (!ret && s->ilen >= WK_IDX_BATCH)
		ret = idx_flush(s);
	return ret ? ret : s->err;
}

int wk_store_append(struct wk_thread *t, const struct ushi_frame *f,
		    const uint8_t *frame)
{
	int ret = 0;
	struct wk_shuf *s = shuf_get(t, f->shuffle, &ret);
	if (!s)
		return ret;
	if (s->err)
		return s->err;
	if ((ret = wk_shuf_open(t, s)) || (ret = ensure_buf(t, s)))
		return ret;
	uint32_t n = (uint32_t)proto_size(f);
	uint32_t cap = s->buf->cap;
	if (s->len + n > cap && (ret = flush_full(t, s, false)))
		return ret;
	if ((ret = idx_add(s, s->end, n, f->partition, f->map, f->attempt)))
		return ret;
	s->end += n;
	if (s->len + n > cap) {
		ret = append_big(s, frame, n);
	} else {
		memcpy(s->buf->data + s->len, frame, n);
		s->len += n;
	}
	if (!ret && s->ilen >= WK_IDX_BATCH)
		ret = idx_flush(s);
	return ret ? ret : s->err;
}

/* ------------------------------------------------------------ sync */

/* The steps of a sync round until its syncs start (see round_start()). */
enum { SY_IDLE, SY_WRITES, SY_IDX };

/* One of a round's syncs is done (op->io.off: the round's ticket); the
 * rounds whose syncs are all done are, in order. */
static void synced(struct wk_shuf *s, const struct ushi_op *op)
{
	for (unsigned i = 0; i < s->sy_fl_n; i++) {
		unsigned k = (s->sy_fl_head + i) % WK_SY_FLIGHT;
		if (s->sy_fl[k].run == op->io.off && s->sy_fl[k].ops) {
			s->sy_fl[k].ops--;
			break;
		}
	}
	while (s->sy_fl_n && !s->sy_fl[s->sy_fl_head].ops) {
		s->sy_done = s->sy_fl[s->sy_fl_head].run;
		s->sy_fl_head = (s->sy_fl_head + 1) % WK_SY_FLIGHT;
		s->sy_fl_n--;
	}
	s->sy_ops--;
	s->writes--;
	s->t->writes--;
}

static void log_synced(struct ushi_op *op, int res)
{
	struct wk_shuf *s = op->owner;
	if (res < 0)
		wk_shuf_fail(s, res, "fdatasync of the log", s->end);
	synced(s, op);
}

static void idx_synced(struct ushi_op *op, int res)
{
	struct wk_shuf *s = op->owner;
	if (res < 0)
		wk_shuf_fail(s, res, "fdatasync of the index", s->iend);
	synced(s, op);
}

static void dir_synced(struct ushi_op *op, int res)
{
	struct wk_shuf *s = op->owner;
	bool top = op->io.fd == s->dir->fd;
	if (res < 0) {
		/* Named, as the log's path follows it. */
		char what[PATH_MAX + 64];
		if (top)
			snprintf(what, sizeof(what), "fsync of directory %s, "
				 "above", s->dir->path);
		else
			snprintf(what, sizeof(what), "fsync of directory "
				 "%s/s%u, above", s->dir->path, s->shuffle);
		wk_shuf_fail(s, res, what, 0);
	}
	if (!top)
		close(op->io.fd);
	synced(s, op);
}

/* Starts an fdatasync of fd (or of its slot) for s's newest round. */
static int sync_start(struct wk_shuf *s, int fd, int slot, ushi_op_cb cb)
{
	struct wk_thread *t = s->t;
	struct ushi_op *op;
	int ret = ring_op_get(t->ring, &op);
	if (ret)
		return ret;
	op->cb = cb;
	op->owner = s;
	/* A sync has no offset: the field carries its round. */
	op->io.off = s->sy_run;
	s->sy_fl[(s->sy_fl_head + s->sy_fl_n - 1) % WK_SY_FLIGHT].ops++;
	s->sy_ops++;
	s->writes++;
	t->writes++;
	ring_fsync(t->ring, op, fd, slot);
	return 0;
}

/* New files and shuffle directories must survive a crash: s<S> and the
 * directory above it, when they have entries not yet synced. */
static int sync_dirs(struct wk_shuf *s)
{
	int ret = 0;
	if (s->dir_unsynced) {
		char path[16];
		snprintf(path, sizeof(path), "s%u", s->shuffle);
		int fd = wk_open_beneath(s->dir, path, O_RDONLY |
					 O_DIRECTORY | O_CLOEXEC, 0);
		ret = fd < 0 ? fd : sync_start(s, fd, -1, dir_synced);
		if (fd >= 0 && ret)
			close(fd);
		s->dir_unsynced = ret != 0;
	}
	if (!ret && s->top_unsynced) {
		ret = sync_start(s, s->dir->fd, -1, dir_synced);
		s->top_unsynced = ret != 0;
	}
	return ret;
}

/*
 * A round: what the log buffer holds written (its partial tail block
 * padded; the appends that follow go to another buffer), then, once the
 * log's writes up to here are done, the index entries of the frames
 * written so far; once those are done too, the syncs of the log, the
 * index and new directories start together: an entry made durable
 * before its frame is only ever one after the last commit, which the
 * repair at the next open cuts (files.c), and the commit is logged only
 * once every sync is done. No step waits: each starts in the loop pass
 * that finds the one before done. Once a round's syncs are started, the
 * next round may start (WK_SY_FLIGHT rounds syncing at most): commits
 * that came meanwhile wait for their own round's syncs, not for the end
 * of the one before too, and a round is done once every round before
 * it is.
 */
static int round_start(struct wk_thread *t, struct wk_shuf *s)
{
	s->sy_run = s->sy_req;
	s->sy_step = SY_IDX;
	if (!s->len && !s->ilen && !s->unsynced && !s->iunsynced)
		return 0;
	/* Only synced files are closed: reopened here only should that
	 * ever change. */
	int ret = wk_shuf_open(t, s);
	if (ret)
		wk_shuf_fail(s, ret, "reopen", s->end);
	if (!ret && s->buf && s->len)
		ret = flush_full(t, s, true);
	/* Writes from here on set it again: they need the next round. */
	s->sy_log = s->unsynced;
	s->unsynced = false;
	s->sy_wq = s->wq_sub;
	s->sy_step = SY_WRITES;
	return ret;
}

/* The round's writes are done: its syncs start together, so that a
 * file system that commits a journal for them commits one. */
static int round_sync(struct wk_thread *t, struct wk_shuf *s)
{
	s->sy_step = SY_IDLE;
	s->sy_issued = s->sy_run;
	unsigned k = (s->sy_fl_head + s->sy_fl_n++) % WK_SY_FLIGHT;
	s->sy_fl[k].run = s->sy_run;
	s->sy_fl[k].ops = 0;
	bool log = s->sy_log, idx = s->iunsynced;
	s->iunsynced = false;
	/* --sync=none: written (to the page cache) is as far as it goes. */
	bool none = t->wk->o.sync == USH_WORKER_SYNC_NONE;
	if (none)
		log = idx = s->dir_unsynced = s->top_unsynced = false;
	/* An idle log may have been closed (evict()) since. */
	int ret = log || idx ? wk_shuf_open(t, s) : 0;
	if (!ret && log)
		ret = sync_start(s, s->fd, s->slot, log_synced);
	if (!ret && idx)
		ret = sync_start(s, s->ifd, -1, idx_synced);
	if (!ret && !none)
		ret = sync_dirs(s);
	/* None to wait for: done once the rounds before it are. */
	if (!s->sy_fl[k].ops && s->sy_fl_n == 1) {
		s->sy_done = s->sy_run;
		s->sy_fl_n = 0;
	}
	return ret;
}

/* Takes s's round as far as it goes without waiting. */
static void sync_step(struct wk_thread *t, struct wk_shuf *s)
{
	int ret = 0;
	while (!ret && !s->err) {
		switch (s->sy_step) {
		case SY_IDLE:
			/* Done once the syncs of every round are. */
			if (s->sy_run >= s->sy_req && !s->sy_fl_n) {
				wk_list_del(&t->syncq, &s->syl);
				s->sy_queued = false;
				return;
			}
			if (s->sy_run >= s->sy_req ||
			    s->sy_fl_n == WK_SY_FLIGHT)
				return;
			ret = round_start(t, s);
			break;
		case SY_WRITES:
			if (s->wq_done < s->sy_wq)
				return;
			s->sy_step = SY_IDX;
			if (s->ilen)
				ret = idx_flush(s);
			break;
		case SY_IDX:
			if (s->iwrites)
				return;
			ret = round_sync(t, s);
			break;
		}
	}
	if (ret)
		wk_shuf_fail(s, ret, "sync", s->end);
	if (s->err && !s->sy_ops) {
		/* Its commits fail with s->err; no round runs again. */
		s->sy_step = SY_IDLE;
		s->sy_fl_n = 0;
		wk_list_del(&t->syncq, &s->syl);
		s->sy_queued = false;
	}
}

const char *wk_store_dir(struct wk_thread *t, uint32_t shuffle)
{
	struct wk_shuf *s = shuf_find(t, shuffle);
	return s && s->dir ? s->dir->path : t->wk->dirlist;
}

int wk_store_sync_begin(struct wk_thread *t, uint32_t shuffle,
			uint64_t *ticket)
{
	int ret = 0;
	struct wk_shuf *s = shuf_get(t, shuffle, &ret);
	if (!s)
		return ret;
	if (s->err)
		return s->err;
	*ticket = ++s->sy_req;
	if (!s->sy_queued) {
		wk_list_add(&t->syncq, &s->syl);
		s->sy_queued = true;
	}
	sync_step(t, s);
	return 0;
}

/* Whether shuffle's syncs up to ticket are issued (or done), or done:
 * 0, -EINPROGRESS, its sticky error, or -ENOENT. A sync is done only
 * after it was issued. */
static int sync_reached(struct wk_thread *t, uint32_t shuffle,
			uint64_t ticket, bool issued)
{
	struct wk_shuf *s = shuf_find(t, shuffle);
	if (!s)
		return -ENOENT;
	if (s->err)
		return s->err;
	return (issued ? s->sy_issued : s->sy_done) >= ticket ? 0 :
								 -EINPROGRESS;
}

int wk_store_sync_issued(struct wk_thread *t, uint32_t shuffle,
			 uint64_t ticket)
{
	return sync_reached(t, shuffle, ticket, true);
}

int wk_store_sync_check(struct wk_thread *t, uint32_t shuffle,
			uint64_t ticket)
{
	return sync_reached(t, shuffle, ticket, false);
}

void wk_store_sync_pump(struct wk_thread *t)
{
	struct wk_link *l = t->syncq.head, *next;
	for (; l; l = next) {
		next = l->next;
		sync_step(t, WK_OF(l, struct wk_shuf, syl));
	}
}

int wk_store_sync(struct wk_thread *t)
{
	uint64_t ticket;
	int ret = 0;
	for (size_t i = 0; t->stab && i <= t->smask; i++)
		for (struct wk_shuf *s = t->stab[i]; s; s = s->hnext) {
			/* A failure of before was reported then. */
			s->sy_final = !s->err;
			if (s->sy_final)
				wk_store_sync_begin(t, s->shuffle, &ticket);
		}
	while (!ret && t->syncq.head) {
		wk_store_sync_pump(t);
		if (t->syncq.head)
			ret = ring_reap(t->ring, 1);
	}
	for (size_t i = 0; !ret && t->stab && i <= t->smask; i++)
		for (struct wk_shuf *s = t->stab[i]; !ret && s; s = s->hnext)
			ret = s->sy_final ? s->err : 0;
	return ret;
}

/* ------------------------------------------------- drop and teardown */

/* Frees s once none of its writes is in flight. */
static void shuf_free(struct wk_thread *t, struct wk_shuf *s)
{
	while (s->writes && ring_reap(t->ring, 1) == 0)
		;
	if (s->sy_queued)
		wk_list_del(&t->syncq, &s->syl);
	if (s->fd >= 0)
		wk_shuf_close(t, s);
	if (s->buf) {
		wk_list_del(&t->bufq, &s->bufq);
		pool_put(ring_pool(t->ring), s->buf);
	}
	ushi_free(s->ipend);
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
	ushi_free(t->stab);
	t->stab = NULL;
	t->smask = 0;
}

/* The largest thread number + 1 of a log of shuffle (named) in d, at
 * least max. */
static int max_thread(const struct wk_dir *d, const char *name,
		      unsigned *max)
{
	int fd = wk_open_beneath(d, name, O_RDONLY | O_DIRECTORY |
				 O_NONBLOCK | O_CLOEXEC, 0);
	if (fd == -ENOENT)
		return 0;
	DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dd) {
		int ret = fd < 0 ? fd : -errno;
		if (fd >= 0)
			close(fd);
		return ret;
	}
	struct dirent *de;
	while ((de = readdir(dd))) {
		unsigned k;
		char tail[8];
		/* 1024 threads at most: a larger number is not ours. */
		if (sscanf(de->d_name, "t%u.%7s", &k, tail) == 2 &&
		    !strcmp(tail, "log") && k < 1024 && k >= *max)
			*max = k + 1;
	}
	closedir(dd);
	return 0;
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
		for (unsigned i = 0; !ret && i < t->wk->ndirs; i++)
			ret = max_thread(&t->wk->dirs[i], name, &max);
		if (ret)
			return ret;
		s->fetch_threads = max;
	}
	*n = s->fetch_threads;
	return 0;
}
