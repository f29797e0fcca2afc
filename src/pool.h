/*
 * Registered buffer pool: one arena carved by a buddy allocator into
 * power-of-two buffers from USH_BUF_MIN up to the push size. Idle buffers
 * sit on per-size-class LIFO lists. Every buffer has exactly one owner at a
 * time, tracked in its state; a wrong transition is a bug and aborts.
 */
#ifndef USH_POOL_H
#define USH_POOL_H

#include "internal.h"

#define USH_BUF_MIN 4096u
#define USH_POOL_ORDERS 15 /* 4 KiB << 14 = 64 MiB largest class */

enum ush_buf_state {
	BUF_NONE = 0,   /* not a block head: inside a larger block */
	BUF_IDLE,       /* on the pool's idle list */
	BUF_WRITER,     /* a writer's open partition buffer */
	BUF_USER,       /* lent to the API caller (acquire/swap) */
	BUF_QUEUED,     /* handed off, waiting to be framed and submitted */
	BUF_INFLIGHT,   /* owned by the kernel */
	BUF_ZC_PENDING, /* send done, zero-copy notification outstanding */
};

struct ush_buf {
	uint8_t *data;               /* header room, then payload */
	struct ush_buf *next, *prev; /* idle list or hand-off queue */
	uint32_t cap;
	uint8_t order;               /* cap == USH_BUF_MIN << order */
	uint8_t state;
	uint16_t bufidx;             /* registered buffer index */
	/* Set at hand-off, read when the batch is framed. */
	uint32_t part, len, nrec;
	uint64_t seq;
};

struct ush_pool {
	uint8_t *arena;
	size_t bytes;
	unsigned max_order;
	struct ush_buf *descs; /* one per USH_BUF_MIN block */
	struct ush_buf *idle[USH_POOL_ORDERS];
	size_t idle_bytes;
};

/* Maps bytes (a multiple of max_cap) of arena; returns 0 or -errno. */
int pool_init(struct ush_pool *p, size_t bytes, size_t max_cap);
void pool_destroy(struct ush_pool *p);

/* Size class (order) holding at least n bytes, or -1 if above max. */
int pool_order(const struct ush_pool *p, size_t n);
/* An idle buffer of exactly order, now BUF_WRITER; NULL if none is free. */
struct ush_buf *pool_get(struct ush_pool *p, unsigned order);
/* Returns b (in any owned state) to the idle lists. */
void pool_put(struct ush_pool *p, struct ush_buf *b);
/* The buffer whose data starts at ptr; aborts if ptr is none. */
struct ush_buf *pool_lookup(struct ush_pool *p, const void *ptr);

static inline void buf_move(struct ush_buf *b, enum ush_buf_state from,
			    enum ush_buf_state to)
{
	if (unlikely(b->state != from))
		ush_panic("buffer %p: expected state %d, found %d (double "
			  "release or use after hand-off?)",
			  (void *)b->data, from, b->state);
	b->state = (uint8_t)to;
}

#endif
