/* Read-ahead of a partition's frames in one map's data file; see
 * prefetch.h. */
#include "read/prefetch.h"

#include <errno.h>
#include <stdatomic.h>

/*
 * Buffers of USHI_PREFETCH_READ bytes (reads of several frames) outlive
 * their reader, up to USHI_PREFETCH_DEPTH of them in the process: a
 * reader per partition would otherwise fault in up to 8 MiB of fresh
 * memory each (the C library gives a heap that shrinks that much back
 * to the kernel), 14 times the page faults and 1.7 times the system
 * time of reading a 64-partition spill 64 KiB at a time. Lock-free, so a
 * fork() child never finds the stash locked.
 */
static _Atomic(uint8_t *) stash[USHI_PREFETCH_DEPTH];

static uint8_t *stash_take(void)
{
	for (unsigned k = 0; k < USHI_PREFETCH_DEPTH; k++) {
		uint8_t *b = atomic_exchange(&stash[k], NULL);
		if (b)
			return b;
	}
	return NULL;
}

/* Keeps b (of USHI_PREFETCH_READ bytes) for another reader, or frees it. */
static void stash_put(uint8_t *b)
{
	for (unsigned k = 0; k < USHI_PREFETCH_DEPTH; k++) {
		uint8_t *none = NULL;
		if (atomic_compare_exchange_strong(&stash[k], &none, b))
			return;
	}
	ushi_free(b);
}

void prefetch_init(struct prefetch *pf, struct ush_ring *ring)
{
	pf->ring = ring;
	pf->fd = pf->dfd = -1;
	for (unsigned k = 0; k < USHI_PREFETCH_DEPTH; k++)
		pf->slot[k].pf = pf;
}

void prefetch_reset(struct prefetch *pf, int fd, int dfd,
		    const struct spill_entry *ents, size_t n)
{
	pf->fd = fd;
	pf->dfd = dfd;
	pf->ents = ents;
	pf->n = n;
	pf->next = pf->issued = pf->taken = 0;
	pf->ahead = 0;
}

static void slot_free(struct prefetch_slot *s)
{
	if (s->cap == USHI_PREFETCH_READ)
		stash_put(s->buf);
	else
		ushi_free(s->buf);
}

/* An aligned buffer of at least n bytes in s (contents not kept); one
 * for several frames is made as large as any such read at once, so
 * reads growing along a partition's runs allocate once per slot. */
static int slot_room(struct prefetch_slot *s, size_t n, size_t frames)
{
	if (n <= s->cap)
		return 0;
	size_t cap = ALIGN_UP(n, (size_t)16 << 10);
	if (frames > 1 && cap < USHI_PREFETCH_READ)
		cap = USHI_PREFETCH_READ;
	uint8_t *b = cap == USHI_PREFETCH_READ ? stash_take() : NULL;
	if (!b && !(b = ushi_aligned_alloc(cap)))
		return -ENOMEM;
	slot_free(s);
	s->buf = b;
	s->cap = cap;
	return 0;
}

/* Points op at what slot s still lacks, read from fd: an O_DIRECT read
 * asks for the whole aligned range, a buffered one up to the frame's
 * end. */
static void read_rest(struct prefetch_slot *s, struct ushi_op *op, int fd)
{
	uint32_t end = fd == s->pf->dfd ? s->len : s->need;
	op->arm.fd = fd;
	op->arm.addr = s->buf + s->got;
	op->arm.len = end - s->got;
	op->arm.off = s->off + s->got;
}

/*
 * A read of slot s came back. The rest of a short one is read through
 * the page cache, which tells the end of the file (a read of 0) from a
 * pause (the kernel may stop at a page-cache boundary); so is all of an
 * O_DIRECT read the file refused after all. A read that failed on
 * another thread than the one reaping it is read again: a reader moves
 * between threads, and io_uring fails what a thread that exits left in
 * flight (-ECANCELED, or -EFAULT for a read it was to finish).
 */
static void read_done(struct ushi_op *op, int res)
{
	struct prefetch_slot *s = op->owner;
	struct prefetch *pf = s->pf;
	if (res > 0)
		s->got += (uint32_t)res;
	bool direct = op->arm.fd == pf->dfd;
	bool orphan = res < 0 && s->tid != ushi_tid();
	s->tid = ushi_tid();
	if (res == -EINTR || res == -EAGAIN || (res < 0 && direct) || orphan ||
	    (res > 0 && s->got < s->need)) {
		read_rest(s, op, pf->fd);
		op->arm.rearm = true;
		return;
	}
	s->res = res < 0 ? res : s->got < s->need ? USH_ECORRUPT : 0;
	s->done = true;
	pf->inflight--;
}

static bool direct_read(const struct prefetch *pf, const struct spill_entry *e)
{
	return pf->dfd >= 0 && e->len >= USHI_PACK_MIN;
}

/* How many entries from pf->next one read takes: the frames after it
 * that start where the one before ends (or after its O_DIRECT padding),
 * read the same way, up to max bytes in all. */
static size_t run_len(const struct prefetch *pf, size_t max)
{
	const struct spill_entry *e = &pf->ents[pf->next];
	bool direct = direct_read(pf, e);
	uint64_t end = e->off + e->len;
	size_t k = 1;
	for (; pf->next + k < pf->n; k++) {
		const struct spill_entry *f = &pf->ents[pf->next + k];
		if (direct_read(pf, f) != direct || f->off < end ||
		    f->off - end >= USHI_ALIGN ||
		    f->off + f->len - e->off > max)
			break;
		end = f->off + f->len;
	}
	return k;
}

/* Issues the read of entry pf->next and those adjacent to it (up to max
 * bytes) into the next slot: 0, or -ENOMEM when the slot's memory cannot
 * be had, or the ring's error. */
static int issue(struct prefetch *pf, size_t max)
{
	const struct spill_entry *e = &pf->ents[pf->next];
	struct prefetch_slot *s = &pf->slot[pf->issued % USHI_PREFETCH_DEPTH];
	size_t k = run_len(pf, max);
	const struct spill_entry *last = &pf->ents[pf->next + k - 1];
	bool direct = direct_read(pf, e);
	uint64_t off = direct ? e->off & ~(uint64_t)(USHI_ALIGN - 1) : e->off;
	size_t need = (size_t)(last->off + last->len - off);
	size_t len = direct ? ALIGN_UP(need, (size_t)USHI_ALIGN) : need;
	struct ushi_op *op;
	int ret = slot_room(s, len, k);
	if (!ret)
		ret = ring_op_get(pf->ring, &op);
	if (ret)
		return ret;
	s->first = pf->next;
	s->count = k;
	s->off = off;
	s->skew = (uint32_t)(e->off - off);
	s->len = (uint32_t)len;
	s->need = (uint32_t)need;
	s->got = 0;
	s->tid = ushi_tid();
	s->done = false;
	op->kind = OP_READ;
	op->cb = read_done;
	op->owner = s;
	read_rest(s, op, direct ? pf->dfd : pf->fd);
	ring_arm(pf->ring, op);
	pf->inflight++;
	pf->ahead += len;
	pf->next += k;
	pf->issued++;
	return 0;
}

/* The reads whose frames all come before entry i are done with: their
 * slots are free. */
static void release(struct prefetch *pf, size_t i)
{
	while (pf->taken < pf->issued) {
		struct prefetch_slot *s =
			&pf->slot[pf->taken % USHI_PREFETCH_DEPTH];
		if (s->first + s->count > i)
			return;
		s->done = false;
		pf->ahead -= s->len;
		pf->taken++;
	}
}

/* Frame i from the read holding it (the oldest one kept) once read. */
static int finish(struct prefetch *pf, size_t i, const uint8_t **frame)
{
	struct prefetch_slot *s = &pf->slot[pf->taken % USHI_PREFETCH_DEPTH];
	int ret = 0;
	while (!s->done && !ret)
		ret = ring_reap(pf->ring, 1);
	if (ret)
		return ret;
	*frame = s->buf + s->skew + (pf->ents[i].off - pf->ents[s->first].off);
	return s->res;
}

int prefetch_take(struct prefetch *pf, size_t i, const uint8_t **frame)
{
	/* An io_uring pays once a second frame is asked for: the first
	 * comes through the sync engine, alone, so a reader that wants one
	 * record sets none up and reads one frame. On the sync engine
	 * (io_uring refused) a read ahead would only read sooner what is
	 * read anyway, so the window stays 1 read. The reads before i's are
	 * free now: their records were read. The window grows with the
	 * frames taken: 1, 2, … reads up to the depth, so a short read
	 * reads little ahead. A read ahead that cannot be issued is issued
	 * again when its frame is due. */
	bool ahead = i > 0 && USHI_PREFETCH_DEPTH > 1 &&
		     ring_use_uring(pf->ring);
	size_t win = !ahead ? 1 : i + 1 < USHI_PREFETCH_DEPTH ?
		     i + 1 : USHI_PREFETCH_DEPTH;
	size_t max = i ? USHI_PREFETCH_READ : 0;
	bool queued = false;
	int ret = 0;
	release(pf, i);
	while (!ret && pf->next < pf->n && pf->issued - pf->taken < win &&
	       (pf->next <= i || pf->ahead < USHI_PREFETCH_BYTES))
		queued |= !(ret = issue(pf, max));
	if (pf->next <= i)
		return ret;
	if (queued && (ret = ring_submit(pf->ring)))
		return ret;
	return finish(pf, i, frame);
}

void prefetch_drain(struct prefetch *pf)
{
	unsigned fails = 0;
	while (pf->inflight)
		ring_teardown_failed(ring_reap(pf->ring, 1), &fails);
	pf->n = pf->next = pf->ahead = pf->issued = pf->taken = 0;
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
	for (unsigned k = 0; k < USHI_PREFETCH_DEPTH; k++)
		slot_free(&pf->slot[k]);
}
