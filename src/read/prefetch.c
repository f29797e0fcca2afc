/* Read-ahead of a partition's frames in one map's data file; see
 * prefetch.h. */
#define _GNU_SOURCE
#include "read/prefetch.h"
#include "core/engine.h"

#include <errno.h>
#include <unistd.h>

int pread_all(int fd, void *p, size_t n, uint64_t off)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = pread(fd, b, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return USH_ECORRUPT; /* file shorter than its index */
		b += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

void prefetch_reset(struct prefetch *pf, int fd, int dfd,
		    const struct spill_entry *ents, size_t n)
{
	pf->fd = fd;
	pf->dfd = dfd;
	pf->ents = ents;
	pf->n = n;
	pf->next = 0;
	pf->ahead = 0;
}

/* An aligned buffer of at least n bytes in s (contents not kept). */
static int slot_room(struct prefetch_slot *s, size_t n)
{
	if (n <= s->cap)
		return 0;
	size_t cap = ALIGN_UP(n, (size_t)16 << 10);
	uint8_t *b = ushi_aligned_alloc(cap);
	if (!b)
		return -ENOMEM;
	ushi_free(s->buf);
	s->buf = b;
	s->cap = cap;
	return 0;
}

/* Issues entry pf->next into its slot: false when the slot's memory
 * cannot be had (the read is then done at take, by pread). */
static bool issue(struct prefetch *pf)
{
	const struct spill_entry *e = &pf->ents[pf->next];
	struct prefetch_slot *s = &pf->slot[pf->next % USHI_PREFETCH_DEPTH];
	s->direct = pf->dfd >= 0 && e->len >= USHI_PACK_MIN;
	s->off = s->direct ? e->off & ~(uint64_t)(USHI_ALIGN - 1) : e->off;
	s->skew = (uint32_t)(e->off - s->off);
	size_t len = s->direct ? ALIGN_UP(s->skew + (size_t)e->len,
					  (size_t)USHI_ALIGN) : e->len;
	struct io_uring_sqe *sqe = NULL;
	/* The SQE last: one taken is submitted, prepared or not. */
	if (slot_room(s, len) || !(sqe = io_uring_get_sqe(&pf->ring)))
		return false;
	s->len = (uint32_t)len;
	io_uring_prep_read(sqe, s->direct ? pf->dfd : pf->fd, s->buf,
			   (unsigned)len, s->off);
	io_uring_sqe_set_data64(sqe, pf->next % USHI_PREFETCH_DEPTH);
	s->busy = true;
	s->done = false;
	pf->inflight++;
	pf->ahead += len;
	pf->next++;
	return true;
}

/* Runs the completions there are, waiting for one when wait is set. */
static int reap(struct prefetch *pf, bool wait)
{
	struct io_uring_cqe *cqe;
	int ret = wait ? io_uring_wait_cqe(&pf->ring, &cqe) :
			 io_uring_peek_cqe(&pf->ring, &cqe);
	while (!ret) {
		struct prefetch_slot *s = &pf->slot[cqe->user_data];
		s->res = cqe->res;
		s->done = true;
		s->busy = false;
		pf->inflight--;
		io_uring_cqe_seen(&pf->ring, cqe);
		ret = io_uring_peek_cqe(&pf->ring, &cqe);
	}
	return ret == -EAGAIN || ret == -EINTR ? 0 : ret;
}

/* Frame i from its slot once read; a short read (the kernel may stop
 * at a page-cache boundary, or at the end of the file) is completed by
 * pread, which tells the end of the file from a pause. */
static int finish(struct prefetch *pf, size_t i, const uint8_t **frame)
{
	struct prefetch_slot *s = &pf->slot[i % USHI_PREFETCH_DEPTH];
	int ret = 0;
	while (!s->done && !ret)
		ret = reap(pf, true);
	if (ret)
		return ret;
	s->done = false;
	pf->ahead -= s->len;
	size_t need = s->skew + (size_t)pf->ents[i].len;
	if (s->res < 0 && s->direct) /* O_DIRECT refused after all */
		s->res = 0;
	if (s->res < 0)
		return s->res;
	if ((size_t)s->res < need)
		ret = pread_all(pf->fd, s->buf + s->res, need - (size_t)s->res,
				s->off + (uint64_t)s->res);
	*frame = s->buf + s->skew;
	return ret;
}

int prefetch_take(struct prefetch *pf, size_t i, const uint8_t **frame)
{
	const struct spill_entry *e = &pf->ents[i];
	/* A ring pays once a second frame is asked for: the first comes by
	 * pread, so a reader that wants one record sets nothing up. */
	if (!pf->state && i > 0 && USHI_PREFETCH_DEPTH > 1) {
		int ret = io_uring_queue_init(USHI_PREFETCH_DEPTH, &pf->ring, 0);
		if (ret)
			ushi_uring_refused(ret, "io_uring_setup");
		pf->state = ret ? -1 : 1;
	}
	if (pf->state > 0) {
		/* The slot of i - 1 is free now: its records were read. The
		 * window grows with the frames taken: 2, 3, … up to the
		 * depth, so a short read reads little ahead. */
		size_t win = i + 1 < USHI_PREFETCH_DEPTH ? i + 1 :
							   USHI_PREFETCH_DEPTH;
		bool queued = false;
		if (pf->next < i)
			pf->next = i; /* before the ring: read by pread */
		while (pf->next < pf->n && pf->next < i + win &&
		       (pf->next == i || pf->ahead < USHI_PREFETCH_BYTES) &&
		       issue(pf))
			queued = true;
		if (queued) {
			int ret = io_uring_submit(&pf->ring);
			if (ret < 0)
				return ret;
		}
		if (i < pf->next)
			return finish(pf, i, frame);
		/* Not issued (no memory): read here. */
	}
	int ret = ushi_grow(&pf->fbuf, &pf->fcap, e->len);
	if (!ret)
		ret = pread_all(pf->fd, pf->fbuf, e->len, e->off);
	if (pf->next <= i)
		pf->next = i + 1;
	*frame = pf->fbuf;
	return ret;
}

void prefetch_drain(struct prefetch *pf)
{
	while (pf->state > 0 && pf->inflight) {
		int ret = reap(pf, true);
		if (ret && ret != -EINTR)
			ushi_panic("prefetch: waiting for reads in flight: %d",
				   ret);
	}
	pf->n = pf->next = pf->ahead = 0;
	for (unsigned k = 0; k < USHI_PREFETCH_DEPTH; k++)
		pf->slot[k].done = false;
}

void prefetch_forget(struct prefetch *pf)
{
	pf->inflight = 0;
}

void prefetch_destroy(struct prefetch *pf)
{
	prefetch_drain(pf);
	if (pf->state > 0)
		io_uring_queue_exit(&pf->ring);
	pf->state = 0;
	for (unsigned k = 0; k < USHI_PREFETCH_DEPTH; k++)
		ushi_free(pf->slot[k].buf);
	ushi_free(pf->fbuf);
}
