/*
 * Frame reassembly: the bytes of a connection's recv chunks become whole
 * frames, checked at the header (bounds before anything is allocated)
 * and staged when one spans chunks, then dispatched.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/dispatch.h"
#include "worker/out.h"
#include "worker/recv.h"
#include "worker/store.h"

#include <errno.h>

/* Parses a complete header; fails the connection if it breaks a rule
 * or names a frame c may not send now. */
bool wk_header_ok(struct wk_conn *c, const uint8_t *h)
{
	const char *why;
	int ret = proto_header(h, &c->f, c->t->wk->o.max_frame, false, &why);
	if (ret)
		wk_conn_fail(c, ret, "bad frame header: %s", why);
	return !ret && wk_type_ok(c, c->f.type);
}

/* Makes the stage hold n bytes, keeping the first c->sgot. */
static bool reasm_grow(struct wk_conn *c, size_t n)
{
	if (n <= c->scap)
		return true;
	size_t cap = pow2_ceil(n);
	cap = cap < c->sneed ? cap : c->sneed;
	uint8_t *p = ushi_malloc(cap);
	if (!p) {
		wk_conn_fail(c, -ENOMEM, "no memory for %zu bytes of a %zu-byte "
			     "frame", cap, c->sneed);
		return false;
	}
	if (c->sgot)
		memcpy(p, c->stage, c->sgot);
	ushi_free(c->stage);
	c->stage = p;
	c->scap = cap;
	return true;
}

/*
 * A frame that did not come whole in one chunk. Its header alone may
 * reserve up to the window (what a writer may have unacknowledged, so a
 * frame a writer sends without waiting); a larger frame (a record above
 * the window, sent once nothing else is unacknowledged) grows its stage
 * as its bytes arrive. So an announced length costs nothing that does
 * not come (proto_header bounds it by max_frame or the control limit).
 */
static bool reasm_start(struct wk_conn *c, const uint8_t *h, size_t avail)
{
	size_t need = proto_size(&c->f), window = c->t->wk->o.window;
	size_t first = need <= window ? need : USH_FRAME_HDR_SIZE + avail;
	c->sneed = need;
	c->sgot = 0;
	if (!reasm_grow(c, first))
		return false;
	memcpy(c->stage, h, USH_FRAME_HDR_SIZE);
	c->sgot = USH_FRAME_HDR_SIZE;
	return true;
}

/* After a frame: a stage above the window (an outsized frame's) is not
 * kept for a connection that may stay quiet for long. */
static void reasm_done(struct wk_conn *c)
{
	if (c->scap > c->t->wk->o.window) {
		ushi_free(c->stage);
		c->stage = NULL;
		c->scap = 0;
	}
}

/* A whole frame (c->f): dispatched, and stored (a copy) if it is DATA
 * the writer may send. */
static void frame_in(struct wk_conn *c, const uint8_t *frame)
{
	if (wk_dispatch(c, &c->f, frame) > 0)
		wk_data_stored(c, &c->f, wk_store_append(c->t, &c->f, frame));
}

/* Consumes n bytes of the stream. */
void wk_feed(struct wk_conn *c, const uint8_t *p, size_t n)
{
	while (n && !c->failed) {
		if (c->sneed) {
			size_t k = c->sneed - c->sgot;
			k = k < n ? k : n;
			if (!reasm_grow(c, c->sgot + k))
				return;
			memcpy(c->stage + c->sgot, p, k);
			c->sgot += k;
			p += k;
			n -= k;
			if (c->sgot == c->sneed) {
				c->sneed = 0;
				frame_in(c, c->stage);
				reasm_done(c);
			}
			continue;
		}
		const uint8_t *h = p;
		if (c->hlen || n < USH_FRAME_HDR_SIZE) {
			size_t k = USH_FRAME_HDR_SIZE - c->hlen;
			k = k < n ? k : n;
			memcpy(c->hdr + c->hlen, p, k);
			c->hlen += (uint32_t)k;
			p += k;
			n -= k;
			if (c->hlen < USH_FRAME_HDR_SIZE)
				return;
			c->hlen = 0;
			h = c->hdr;
		} else {
			p += USH_FRAME_HDR_SIZE;
			n -= USH_FRAME_HDR_SIZE;
		}
		if (!wk_header_ok(c, h))
			return;
		size_t plen = c->f.payload_len;
		if (h != c->hdr && plen <= n) {
			/* The whole frame is in this chunk: no staging. */
			frame_in(c, h);
			p += plen;
			n -= plen;
		} else if (!plen) {
			frame_in(c, h);
		} else if (!reasm_start(c, h, n)) {
			return;
		}
	}
}
