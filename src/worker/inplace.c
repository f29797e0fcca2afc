/*
 * A writer's in-place receive, once the pool can spare a buffer: bytes
 * land in rb, frames are parsed where they lie, and rb goes to the log
 * as it is (wk_store_region): no copy. A frame larger than rb, or no
 * buffer to go on in, goes back to reassembly (recv.c).
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/dispatch.h"
#include "worker/inplace.h"
#include "worker/out.h"
#include "worker/recv.h"
#include "worker/store.h"

#include <errno.h>

/* A flush-size buffer, if the pool keeps a quarter for the logs' own
 * buffers and FETCH reads after it; wait: for one of the writes in
 * flight to give one back. */
static struct ushi_buf *rb_take(struct wk_thread *t, bool wait)
{
	struct ushi_pool *p = ring_pool(t->ring);
	for (;;) {
		struct ushi_buf *b =
			p->idle_bytes >= p->bytes / 4 + t->wk->o.flush_size ?
			pool_get(p, t->flush_order) : NULL;
		if (b || !wait || !t->writes || ring_reap(t->ring, 1))
			return b;
	}
}

/* DATA frame f lies at frame in rb: noted, written with rb. */
static int rb_note(struct wk_conn *c, const struct ushi_frame *f,
		   const uint8_t *frame)
{
	if (c->rn == c->rcap) {
		struct wk_rent *e = ushi_array_grow(c->rent, &c->rcap,
						    sizeof(*e));
		if (!e)
			return -ENOMEM;
		c->rent = e;
	}
	c->rent[c->rn++] = (struct wk_rent){
		.rel = (uint32_t)(frame - c->rb->data),
		.len = (uint32_t)proto_size(f),
		.partition = f->partition,
		.map = f->map,
		.attempt = f->attempt,
	};
	return 0;
}

/* Hands b (which held the c->rlen bytes of rb) to the log with the DATA
 * frames noted in it, or back to the pool when it holds none, or when
 * the attempt was dropped since (its frames go with it). */
static void rb_write(struct wk_conn *c, struct ushi_buf *b)
{
	int ret = 0;
	if (c->rn && wk_still_mine(c))
		ret = wk_store_region(c->t, c->att.shuffle, b, c->rlen,
				      c->rent, c->rn);
	else
		pool_put(ring_pool(c->t->ring), b);
	c->rn = 0;
	if (ret)
		wk_conn_fail(c, ret, "storing shuffle %u (in %s): %s",
			     c->att.shuffle, wk_store_dir(c->t, c->att.shuffle),
			     ush_strerror(ret));
}

/* Back to copying (a frame larger than rb, or no buffer to go on in):
 * rb's frames are written, the bytes after them fed from a copy. */
static void rb_leave(struct wk_conn *c)
{
	uint32_t tail = c->rlen - c->rpos;
	uint8_t *m = tail ? ushi_malloc(tail) : NULL;
	if (tail && !m) {
		wk_conn_fail(c, -ENOMEM, "no memory for %u bytes received",
			     tail);
		return;
	}
	if (tail)
		memcpy(m, c->rb->data + c->rpos, tail);
	struct ushi_buf *b = c->rb;
	c->rb = NULL;
	rb_write(c, b);
	c->rlen = c->rpos = 0;
	wk_feed(c, m, tail);
	ushi_free(m);
}

/* Writes rb's frames where they lie and goes on in another buffer with
 * the bytes not yet parsed (a copy of less than a frame), or moves those
 * to rb's start when it holds no frame to write. */
static void rb_flush(struct wk_conn *c)
{
	struct ushi_buf *b = c->rb, *nb;
	uint32_t tail = c->rlen - c->rpos;
	if (!c->rn) {
		memmove(b->data, b->data + c->rpos, tail);
	} else if ((nb = rb_take(c->t, true))) {
		memcpy(nb->data, b->data + c->rpos, tail);
		c->rb = nb;
		rb_write(c, b);
	} else {
		rb_leave(c);
		return;
	}
	c->rpos = 0;
	c->rlen = tail;
}

/* Parses the frames that arrived whole in rb, where they lie. */
void wk_rb_parse(struct wk_conn *c)
{
	while (c->rb && !c->failed) {
		uint8_t *p = c->rb->data + c->rpos;
		uint32_t avail = c->rlen - c->rpos, cap = c->rb->cap;
		if (avail < USH_FRAME_HDR_SIZE) {
			if (c->rlen == cap)
				rb_flush(c);
			return;
		}
		if (!wk_header_ok(c, p))
			return;
		size_t need = proto_size(&c->f);
		if (need > cap) {
			rb_leave(c);
			return;
		}
		if (avail < need) {
			if (c->rpos + need > cap)
				rb_flush(c);
			return;
		}
		/* The attempt's frames are written before it commits. */
		if (c->f.type == USHI_FRAME_MAPPER_END && c->rn) {
			rb_flush(c);
			continue;
		}
		if (wk_dispatch(c, &c->f, p) > 0)
			wk_data_stored(c, &c->f, rb_note(c, &c->f, p));
		c->rpos += (uint32_t)need;
		if (c->rpos == c->rlen && !c->rn)
			c->rpos = c->rlen = 0;
	}
}

void wk_conn_rb_free(struct wk_conn *c)
{
	if (c->rb)
		pool_put(ring_pool(c->t->ring), c->rb);
	c->rb = NULL;
	c->rlen = c->rpos = 0;
	c->rn = 0;
}

void wk_conn_rb_arm(struct wk_conn *c)
{
	bool writing = c->role == USHI_ROLE_WRITER &&
		       c->att.state == WK_OPEN && !c->failed && !c->eof;
	/* The start of a frame after a commit goes on in the copy. */
	if (c->rb && !writing && !c->failed && !c->eof &&
	    c->rlen > c->rpos)
		rb_leave(c);
	else if (c->rb && !writing)
		wk_conn_rb_free(c);
	else if (!c->rb && writing && !c->hlen && !c->sneed && !c->qn &&
		 /* Not for a stream of frames a buffer barely holds. */
		 (size_t)c->flast * 2 <= c->t->wk->o.flush_size)
		c->rb = rb_take(c->t, false);
}
