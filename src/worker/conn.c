/*
 * One connection, the top of its layers: what its receives brought is
 * reassembled into frames (recv.c) or parsed where it landed (inplace.c),
 * each frame is dispatched (dispatch.c, hello.c), and the output they
 * queued (out.c) is sent, one send at a time (gathering up to
 * WK_SEND_IOV outputs queued), with a FETCH stream's reads ahead of it. Malformed input gets an ERROR frame, one log line
 * and a closed connection; nothing else is touched. The layers below
 * report through return values and the output queue, never by calling
 * back up.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/conn.h"
#include "worker/fetch.h"
#include "worker/hello.h"
#include "worker/inplace.h"
#include "worker/out.h"
#include "worker/recv.h"

#include <errno.h>
#include <limits.h>

bool wk_conn_busy(const struct wk_conn *c)
{
	/* A writer's attempt open or committed: the writer finishes its
	 * push and commit, then closes (an ERROR between its commit ACK and
	 * its close could fail a commit that waits on other workers). */
	return c->out.head || c->sending || c->fetch || c->hlen || c->sneed ||
	       c->qn || c->rlen || (c->role == USHI_ROLE_WRITER && c->att.state);
}

static void send_done(struct ushi_op *op, int res)
{
	struct wk_conn *c = op->owner;
	for (; c->sn; c->sn--)
		wk_outq_pop(c->t, &c->out);
	c->sending = false;
	if (res > 0)
		WK_COUNT(c->t->wk, bytes_out, (unsigned)res);
	c->t_active = ushi_now_ns();
	if (res < 0 && !c->eof) {
		c->eof = true;
		c->rerr = res;
	}
}

/* A gathered send's result: the rest goes again (short, or EAGAIN)
 * until every byte is sent or it failed. */
static void gather_sent(struct ushi_op *op, int res)
{
	struct wk_conn *c = op->owner;
	struct msghdr *m = &c->smsg;
	if (res > 0 && op->io.done < op->io.len) {
		size_t n = (size_t)res;
		while (n >= m->msg_iov->iov_len) {
			n -= m->msg_iov->iov_len;
			m->msg_iov++;
			m->msg_iovlen--;
		}
		m->msg_iov->iov_base = (uint8_t *)m->msg_iov->iov_base + n;
		m->msg_iov->iov_len -= n;
	}
	if ((res > 0 && op->io.done < op->io.len) || res == -EAGAIN ||
	    res == -EINTR)
		ring_send_own(c->t->ring, op, gather_sent);
	else
		ring_send_end(c->t->ring, op, res < 0 ? res : (int)op->io.done);
}

/* The outputs queued first, up to WK_SEND_IOV, as c's gathered send:
 * their count (1 and no iov: a plain send will do). A window's output
 * (o->iov) goes alone, as its own pieces. */
static unsigned gather(struct wk_conn *c, uint32_t *len)
{
	unsigned n = 0;
	*len = 0;
	struct wk_out *h = c->out.head;
	if (h->iov) {
		c->smsg = (struct msghdr){.msg_iov = h->iov,
					  .msg_iovlen = h->niov};
		*len = h->len;
		return 1;
	}
	for (struct wk_out *o = h; o && !o->iov && n < WK_SEND_IOV &&
	     *len + (uint64_t)o->len <= INT32_MAX; o = o->next, n++) {
		/* A control frame is sealed as it first goes out, so the
		 * MACs count frames in send order; once only, as a short
		 * send gathers the rest again. */
		if (!o->sealed && o->ptr == o->data)
			o->len = (uint32_t)mac_seal(&c->mac, o->data, o->len);
		o->sealed = true;
		c->siov[n] = (struct iovec){(void *)o->ptr, o->len};
		*len += o->len;
	}
	c->smsg = (struct msghdr){.msg_iov = c->siov, .msg_iovlen = n};
	return n;
}

/* Reads ahead and queues what the stream read; frees it once it ended. */
static void fetch_pump(struct wk_conn *c)
{
	struct wk_fetch *fe = c->fetch;
	int ret = wk_fetch_pump(fe, &c->out);
	if (ret > 0) {
		wk_fetch_free(fe);
		c->fetch = NULL;
	} else if (ret && *fe->msg) {
		wk_conn_fail(c, ret, "FETCH of shuffle %u partition %u: %s",
			     fe->shuffle, fe->partition, fe->msg);
	} else if (ret) {
		wk_conn_fail(c, ret, "FETCH of shuffle %u partition %u (in "
			     "%s): %s", fe->shuffle, fe->partition,
			     fe->dir ? fe->dir->path : c->t->wk->dirlist,
			     ret == USH_ECORRUPT ? "the log is shorter than its "
						   "index" : ush_strerror(ret));
	}
}

void wk_conn_pump(struct wk_conn *c)
{
	if (c->closed)
		return;
	/* A stream reads ahead while its output is sent. */
	if (c->fetch && !c->failed)
		fetch_pump(c);
	if (c->sending)
		return;
	/* A MANIFEST alone waits for the stream's first frames: a small
	 * FETCH is answered in one send, which its reader takes in one
	 * receive. */
	if (c->fetch && !c->failed && c->out.head == c->out.tail &&
	    wk_fetch_first(c->fetch))
		return;
	if (!c->out.head && c->credit && !c->failed) {
		/* Credits coalesce while a send is in flight. */
		uint8_t b[USHI_PROTO_SMALL];
		struct proto_ack a = {USHI_ACK_CREDIT, 0, c->credit};
		c->credit = 0;
		wk_conn_send(c, b, proto_put_ack(b, 0, 0, 0, &a));
	}
	if (!c->out.head)
		return;
	struct ushi_op *op;
	if (ring_op_get(c->t->ring, &op)) {
		c->eof = true;
		return;
	}
	uint32_t len;
	c->sn = (uint8_t)gather(c, &len);
	op->cb = send_done;
	op->owner = c;
	op->io.fd = c->fd;
	op->send.timeout_ms = WK_SEND_TIMEOUT_MS;
	c->sending = true;
	if (c->sn > 1 || c->out.head->iov) {
		op->kind = OP_SENDMSG;
		op->io.len = len;
		op->send.msg = &c->smsg;
		ring_send_own(c->t->ring, op, gather_sent);
		return;
	}
	op->kind = OP_SEND;
	op->io.addr = c->out.head->ptr;
	op->io.len = c->out.head->len;
	ring_start(c->t->ring, op);
}

static void give_back(struct wk_thread *t, uint16_t bid)
{
	io_uring_buf_ring_add(t->br, t->bufs + (size_t)bid * WK_BUF_SIZE,
			      WK_BUF_SIZE, bid, io_uring_buf_ring_mask(WK_BUFS),
			      0);
	io_uring_buf_ring_advance(t->br, 1);
}

void wk_conn_process(struct wk_conn *c)
{
	struct wk_thread *t = c->t;
	if (c->rgot) {
		c->rgot = false;
		if (!c->failed && !c->closed)
			wk_rb_parse(c);
		else
			c->rlen = c->rpos = 0; /* read on and dropped */
	}
	while (c->qn) {
		struct wk_chunk ch = c->q[c->qhead];
		c->qhead = (c->qhead + 1) % WK_BUFS;
		c->qn--;
		if (!c->failed && !c->closed)
			wk_feed(c, t->bufs + (size_t)ch.bid * WK_BUF_SIZE, ch.len);
		give_back(t, ch.bid);
	}
	if (c->eof && c->auth_wait && !c->failed)
		wk_auth_abandoned(c);
	else if (c->eof && c->rerr && c->rerr != -ECONNRESET && !c->failed)
		wk_log(t->wk, 1, "peer %s: %s", c->peer, ush_strerror(c->rerr));
	else if (c->eof && (c->hlen || c->sneed || c->rlen > c->rpos) &&
		 !c->failed)
		wk_log(t->wk, 1, "peer %s: closed in the middle of a frame",
		       c->peer);
	if (c->eof)
		c->rerr = 0, c->hlen = 0, c->sneed = 0;
}
