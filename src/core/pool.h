/*
 * Registered buffer pool: one arena carved by a buddy allocator into
 * power-of-two buffers from USHI_BUF_MIN up to the push size. Idle buffers
 * sit on per-size-class LIFO lists. Every buffer has exactly one owner at a
 * time, tracked in its state; a wrong transition is a bug and aborts.
 */
#ifndef USHI_POOL_H
#define USHI_POOL_H

#include "core/internal.h"

#define USHI_BUF_MIN 4096u
#define USHI_POOL_ORDERS 15 /* 4 KiB << 14 = 64 MiB largest class */

enum ushi_buf_state {
	BUF_NONE = 0,   /* not a block head: inside a larger block */
	BUF_IDLE,       /* on the pool's idle list */
	BUF_WRITER,     /* a writer's open partition buffer */
	BUF_USER,       /* lent to the API caller (acquire/swap) */
	BUF_QUEUED,     /* handed off, waiting to be framed and submitted */
	BUF_SEALING,    /* framed, being sealed on the writer's sealer */
	BUF_INFLIGHT,   /* owned by the kernel */
	BUF_ZC_PENDING, /* send done, zero-copy notification outstanding */
};

struct ushi_buf {
	uint8_t *data;               /* header room, then payload */
	struct ushi_buf *next, *prev; /* idle list or hand-off queue */
	uint32_t cap;
	uint8_t order;               /* cap == USHI_BUF_MIN << order */
	uint8_t state;
	/* Set at hand-off, read when the batch is framed; swapped: the
	 * caller made it, so its record prefixes are walked then. */
	bool swapped;
	uint32_t part, len, nrec;
	/* In flight: the sends still holding it (net sink): one per
	 * replica, times the runs of staged frames it holds for different
	 * workers (up to one per 48-byte frame header). */
	uint32_t refs;
	uint64_t seq;
};

struct ushi_pool {
	uint8_t *arena;
	size_t bytes;
	unsigned max_order;
	struct ushi_buf *descs; /* one per USHI_BUF_MIN block */
	struct ushi_buf *idle[USHI_POOL_ORDERS];
	size_t idle_bytes;
};

/* Maps bytes (a multiple of max_cap) of arena; returns 0 or -errno. */
int pool_init(struct ushi_pool *p, size_t bytes, size_t max_cap);
void pool_destroy(struct ushi_pool *p);

/* Size class (order) holding at least n bytes, or -1 if above max. */
int pool_order(const struct ushi_pool *p, size_t n);
/* An idle buffer of exactly order, now BUF_WRITER; NULL if none is free. */
struct ushi_buf *pool_get(struct ushi_pool *p, unsigned order);
/* Returns b (in any owned state) to the idle lists. */
void pool_put(struct ushi_pool *p, struct ushi_buf *b);
/* The buffer whose data starts at ptr; aborts if ptr is none. */
struct ushi_buf *pool_lookup(struct ushi_pool *p, const void *ptr);

static inline void buf_move(struct ushi_buf *b, enum ushi_buf_state from,
			    enum ushi_buf_state to)
{
	if (unlikely(b->state != from))
		ushi_panic("buffer %p: expected state %d, found %d (double "
			  "release or use after hand-off?)",
			  (void *)b->data, from, b->state);
	b->state = (uint8_t)to;
}

#endif
