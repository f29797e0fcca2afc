/*
 * What a connection sends: its output queue (frames copied into it, or
 * memory lent by a FETCH stream's reads, each freed after its send) and
 * the ERROR frame that fails it. The layers above queue here; conn.c
 * sends.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/fetch.h"
#include "worker/out.h"

#include <stdarg.h>
#include <stdio.h>

struct wk_out *wk_out_new(size_t cap)
{
	struct wk_out *o = ushi_malloc(sizeof(*o) + cap);
	if (o) {
		o->next = NULL;
		o->len = 0;
		o->ptr = o->data;
		o->buf = NULL;
		o->heap = NULL;
		o->heap_cap = 0;
		o->sealed = false;
		o->iov = NULL;
		o->held = NULL;
		o->niov = o->nheld = 0;
	}
	return o;
}

void wk_out_free(struct wk_thread *t, struct wk_out *o)
{
	if (o->buf) {
		t->fetch_pool -= o->buf->cap;
		pool_put(ring_pool(t->ring), o->buf);
	}
	wk_hbuf_put(t, o->heap, o->heap_cap);
	for (unsigned i = 0; i < o->nheld; i++)
		wk_hbuf_put(t, o->held[i].p, o->held[i].cap);
	ushi_free(o->iov);
	ushi_free(o);
}

void wk_outq_add(struct wk_outq *q, struct wk_out *o)
{
	if (o->ptr != o->data) {
		q->stream += o->len;
		if (q->acct)
			atomic_fetch_add(q->acct, o->len);
	}
	if (q->tail)
		q->tail->next = o;
	else
		q->head = o;
	q->tail = o;
}

void wk_outq_pop(struct wk_thread *t, struct wk_outq *q)
{
	struct wk_out *o = q->head;
	q->head = o->next;
	if (!q->head)
		q->tail = NULL;
	if (o->ptr != o->data) {
		q->stream -= o->len;
		if (q->acct)
			atomic_fetch_sub(q->acct, o->len);
	}
	wk_out_free(t, o);
}

void wk_outq_free(struct wk_thread *t, struct wk_outq *q)
{
	while (q->head)
		wk_outq_pop(t, q);
}

void wk_conn_send(struct wk_conn *c, const uint8_t *frame, size_t n)
{
	struct wk_out *o = wk_out_new(n + USHI_MAC_TAG);
	if (!o) {
		c->eof = true; /* cannot answer: drop the connection */
		return;
	}
	o->len = (uint32_t)n;
	memcpy(o->data, frame, n);
	wk_outq_add(&c->out, o);
}

static void conn_fail_v(struct wk_conn *c, int level, int code,
			const char *fmt, va_list ap)
{
	if (c->failed)
		return;
	char msg[USHI_PROTO_ERRMSG_MAX];
	uint8_t frame[USHI_PROTO_ERROR_SIZE];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	wk_count_error(c->t->wk, code);
	/* One format per level: the log's rate limit counts formats. */
	if (level)
		wk_log(c->t->wk, 1, "peer %s: %s (%s); closing the connection",
		       c->peer, msg, ush_err_name(code));
	else
		wk_log(c->t->wk, 0, "peer %s: %s (%s); closing the "
		       "connection", c->peer, msg, ush_err_name(code));
	c->failed = true;
	c->credit = 0;
	wk_conn_send(c, frame, proto_put_error(frame, code, msg));
}

void wk_conn_fail(struct wk_conn *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	conn_fail_v(c, 0, code, fmt, ap);
	va_end(ap);
}

void wk_conn_close_with(struct wk_conn *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	conn_fail_v(c, 1, code, fmt, ap);
	va_end(ap);
}

