/* What a connection sends (out.c). */
#ifndef USHI_WK_OUT_H
#define USHI_WK_OUT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct wk_conn;
struct wk_thread;
struct ushi_buf;

/* An output whose ptr is its data holds one control frame, with room
 * for its tag: it is sealed (mac_seal()) as its send starts, so tags
 * count frames in the order they go out. A read's memory (a FETCH
 * stream's stored DATA frames) goes as it is, and so do a window's
 * frames from the memory of its reads (iov). */
struct wk_held {
	void *p;
	uint32_t cap; /* its size class (wk_hbuf_put()) */
};

struct wk_out {
	struct wk_out *next;
	uint32_t len;
	const uint8_t *ptr;     /* what to send: data, or a read's memory */
	struct ushi_buf *buf;   /* pool buffer to return after the send */
	void *heap;             /* memory to free after the send */
	uint32_t heap_cap;      /* its size class (wk_hbuf_put()) */
	bool sealed;            /* its MAC is on (conn.c, gather()) */
	/* Or what to send is niov pieces (len bytes in all) of the heap
	 * memory held, nheld buffers freed after the send; one allocation
	 * (iov) holds both arrays. */
	struct iovec *iov;
	struct wk_held *held;
	unsigned niov, nheld;
	uint8_t data[];
};

/* A connection's output queue, oldest first. */
struct wk_outq {
	struct wk_out *head, *tail;
	uint64_t stream; /* bytes of a FETCH stream's outputs queued */
	/* Its application's count of those (app.h, fetch_queued), or
	 * NULL: set while the connection holds the application. */
	atomic_uint_fast64_t *acct;
};

/* An empty output with room for cap bytes (a control frame's: its tag
 * included), or NULL. */
struct wk_out *wk_out_new(size_t cap);
/* Frees o and what it holds (a pool buffer goes back to t's pool). */
void wk_out_free(struct wk_thread *t, struct wk_out *o);
/* Appends o to q; q's connection owns it from here on. */
void wk_outq_add(struct wk_outq *q, struct wk_out *o);
/* Takes o, sent, off the head of q and frees it. */
void wk_outq_pop(struct wk_thread *t, struct wk_outq *q);
/* Frees what q holds (its connection sends nothing more). */
void wk_outq_free(struct wk_thread *t, struct wk_outq *q);
/* Queues a copy of the n-byte frame. */
void wk_conn_send(struct wk_conn *c, const uint8_t *frame, size_t n);
void wk_conn_fail(struct wk_conn *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* wk_conn_fail() for what is no fault of the peer's (a timeout, a
 * shutdown): the same ERROR and close, logged at info level. */
void wk_conn_close_with(struct wk_conn *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
