/*
 * The net target: one TCP connection per worker, partition -> worker by
 * jump consistent hash. Frames go out on the writer's ring as SEND_ZC
 * from the registered pool (from zc_threshold bytes) or plain SEND; a
 * SEND_ZC buffer returns to the pool only after its notification. The
 * kernel's usage report is counted, and a connection whose zero-copy
 * sends keep coming back "copied" (loopback) stops paying for them.
 *
 * Flow control: a worker grants a window of bytes at HELLO and returns
 * credit (ACK) as it stores frames; a connection never has more than the
 * window unacknowledged, so a slow worker slows its writers instead of
 * growing memory anywhere. A worker that neither takes data nor returns
 * credit for timeout_ms, or that drops the connection, becomes a sticky
 * writer error naming it.
 */
#define _GNU_SOURCE
#include "net/net.h"
#include "write/writer.h"

#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define RBUF 4096u
#define ZC_DEFAULT_THRESHOLD (16u << 10)
/* Usage reports to see before judging whether zero-copy pays. */
#define ZC_SAMPLE 8u

struct conn {
	struct net *n;
	int fd;
	char peer[USHI_NET_PEER];
	uint32_t window, max_frame;
	uint64_t unacked;     /* DATA bytes sent, not yet credited */
	bool zc, closing, recv_armed, acked;
	/* Sends on one socket go one at a time: the kernel does not order
	 * concurrent sends, and a short one would interleave bytes. The next
	 * starts when the previous one's bytes are out (its first CQE), not
	 * at its zero-copy notification. Queued ops link by send.qnext. */
	bool busy;
	struct ushi_op *qhead, *qtail;
	int err, status;
	uint64_t zc_notifs, zc_copied;
	uint32_t rlen;
	uint8_t rbuf[RBUF];
};

struct net {
	struct ush_writer *w;
	struct conn *c;
	unsigned nc;
	unsigned ctrl_inflight; /* MAPPER_END sends */
	uint32_t timeout_ms, threshold;
	bool psync;             /* baseline: blocking send, no ring */
	struct ush_writer_stats *st; /* the writer's: net_* counted here */
};

static void parse(struct conn *c);
static void conn_dead(struct conn *c, int err, const char *what);

/* psync: reads replies, blocking (up to the socket's timeout) when
 * block, until done(c) or nothing more is waiting. */
static void psync_replies(struct conn *c, bool block,
			  bool (*done)(struct conn *, uint32_t), uint32_t arg)
{
	while (!c->err && !(done && done(c, arg))) {
		ssize_t r = recv(c->fd, c->rbuf + c->rlen, RBUF - c->rlen,
				 block ? 0 : MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN && !block)
			return;
		if (r <= 0) {
			conn_dead(c, r ? (errno == EAGAIN ? -ETIMEDOUT :
					  -errno) : -ECONNRESET,
				  r ? "no reply within the timeout (worker "
				      "stalled?)" : "closed the connection");
			return;
		}
		c->rlen += (uint32_t)r;
		parse(c);
	}
}

static void sent(struct ushi_op *op, int res);

/* Sends op on c now, or after the sends queued before it. */
static void conn_send(struct conn *c, struct ushi_op *op)
{
	op->send.sent_cb = sent;
	if (!c->busy) {
		c->busy = true;
		ring_start(c->n->w->ring, op);
		return;
	}
	op->send.qnext = NULL;
	if (c->qtail)
		c->qtail->send.qnext = op;
	else
		c->qhead = op;
	c->qtail = op;
}

static void sent(struct ushi_op *op, int res)
{
	struct conn *c = op->owner;
	struct ushi_op *next = c->qhead;
	(void)res; /* the op's own callback reports errors */
	/* Sent, but the kernel may still read the pages: the buffer goes
	 * idle only at the notification (data_done). */
	if (op->io.buf && op->send.notifs)
		buf_move(op->io.buf, BUF_INFLIGHT, BUF_ZC_PENDING);
	if (!next) {
		c->busy = false;
		return;
	}
	c->qhead = next->send.qnext;
	if (!c->qhead)
		c->qtail = NULL;
	/* Taking no op here: the next one was taken when it was queued. */
	ring_start(c->n->w->ring, next);
}

static void conn_dead(struct conn *c, int err, const char *what)
{
	if (c->err)
		return;
	c->err = err;
	writer_error(c->n->w, err, "net: worker %s: %s", c->peer, what);
	/* Reset the connection now, keeping the fd (queued ops still name
	 * it; close_all closes it). Bytes a stalled worker never takes stay
	 * in the send queue, and with them the pages of zero-copy sends:
	 * their notifications, which drain() waits for, would never come.
	 * connect(AF_UNSPEC) is tcp_disconnect(): it purges the queue. */
	if (c->fd >= 0) {
		struct sockaddr sa = {.sa_family = AF_UNSPEC};
		connect(c->fd, &sa, sizeof(sa));
	}
}

static void handle(struct conn *c, const struct ushi_frame *f,
		   const uint8_t *payload)
{
	char msg[USHI_PROTO_ERRMSG_MAX], what[USHI_PROTO_ERRMSG_MAX + 16];
	if (f->type == USHI_FRAME_ACK) {
		struct proto_ack a;
		proto_get_ack(payload, &a);
		if (a.kind == USHI_ACK_CREDIT)
			c->unacked -= a.value < c->unacked ? a.value :
							     c->unacked;
		else if (a.kind == USHI_ACK_COMMIT && !c->acked) {
			c->acked = true;
			c->status = a.status;
		}
		return;
	}
	if (f->type == USHI_FRAME_ERROR) {
		int code = proto_get_error(payload, f->payload_len, msg,
					   sizeof(msg));
		snprintf(what, sizeof(what), "ERROR %s", msg);
		conn_dead(c, code, what);
		return;
	}
	snprintf(what, sizeof(what), "unexpected frame type %u from the "
		 "worker", f->type);
	conn_dead(c, -EPROTO, what);
}

/* Handles the complete replies in rbuf, keeping a partial one. */
static void parse(struct conn *c)
{
	size_t off = 0;
	while (c->rlen - off >= USH_FRAME_HDR_SIZE && !c->err) {
		struct ushi_frame f;
		const char *why;
		const uint8_t *h = c->rbuf + off;
		if (proto_header(h, &f, RBUF, false, &why)) {
			conn_dead(c, -EPROTO, why);
			return;
		}
		/* Control frames pass proto_header() up to 16 MiB. */
		if (proto_size(&f) > RBUF) {
			conn_dead(c, -EPROTO, "reply larger than any it may send");
			return;
		}
		if (c->rlen - off < proto_size(&f))
			break;
		if (frame_check(h, &f)) {
			conn_dead(c, USH_ECRC, "CRC32C mismatch in a reply");
			return;
		}
		handle(c, &f, h + USH_FRAME_HDR_SIZE);
		off += proto_size(&f);
	}
	memmove(c->rbuf, c->rbuf + off, c->rlen - off);
	c->rlen -= (uint32_t)off;
}

static void recv_done(struct ushi_op *op, int res)
{
	struct conn *c = op->owner;
	c->recv_armed = false;
	if (res <= 0) {
		if (!c->closing)
			conn_dead(c, res ? res : -ECONNRESET,
				  res ? "receive failed" :
					"closed the connection");
		return;
	}
	c->rlen += (uint32_t)res;
	parse(c);
	if (c->err || c->closing)
		return;
	op->arm.addr = c->rbuf + c->rlen;
	op->arm.len = RBUF - c->rlen;
	op->arm.rearm = true;
	c->recv_armed = true;
}

static int arm_recv(struct ush_ring *r, struct conn *c)
{
	struct ushi_op *op;
	int ret = ring_op_get(r, &op);
	if (ret)
		return ret;
	op->kind = OP_RECV;
	op->cb = recv_done;
	op->owner = c;
	op->arm.fd = c->fd;
	op->arm.addr = c->rbuf + c->rlen;
	op->arm.len = RBUF - c->rlen;
	ring_arm(r, op);
	c->recv_armed = true;
	return 0;
}

static void close_all(struct net *n)
{
	struct ush_ring *r = n->w->ring;
	for (unsigned i = 0; i < n->nc; i++) {
		n->c[i].closing = true;
		if (n->c[i].fd >= 0)
			shutdown(n->c[i].fd, SHUT_RDWR);
	}
	/* Shutdown completes the recvs and any send still waiting. Their
	 * callbacks use n and c: reap them all, retrying a failed wait. */
	for (unsigned fails = 0;;) {
		bool busy = n->ctrl_inflight > 0;
		for (unsigned i = 0; i < n->nc; i++)
			busy |= n->c[i].recv_armed || n->c[i].busy;
		if (!busy)
			break;
		ring_teardown_failed(ring_reap(r, 1), &fails);
	}
	for (unsigned i = 0; i < n->nc; i++)
		if (n->c[i].fd >= 0)
			close(n->c[i].fd);
	ushi_free(n->c);
	ushi_free(n);
}

static int net_open(struct ush_writer *w)
{
	const struct ush_writer_opts *o = &w->o;
	unsigned nc = net_count_workers(o->workers);
	if (!nc)
		return ushi_fail(-EINVAL, "net: no workers given");
	/* Each connection keeps a receive op armed for good; with no op
	 * left over, the first send would wait for one forever. */
	struct ush_ring *r = w->ring;
	if (o->ioengine != USH_IOENGINE_PSYNC &&
	    ring_armed(r) + nc >= ring_opts(r)->iodepth)
		return ushi_fail(-EINVAL, "net: %u workers need an iodepth "
				"above %u (each holds a receive), this ring "
				"has %u", nc, ring_armed(r) + nc,
				ring_opts(r)->iodepth);
	struct net *n = ushi_calloc(1, sizeof(*n));
	struct conn *c = n ? ushi_calloc(nc, sizeof(*c)) : NULL;
	char (*peers)[USHI_NET_PEER] = ushi_calloc(nc, USHI_NET_PEER);
	if (!n || !c || !peers) {
		ushi_free(n);
		ushi_free(c);
		ushi_free(peers);
		return ushi_fail(-ENOMEM, "net: %u workers", nc);
	}
	n->w = w;
	n->st = writer_counters(w);
	n->c = c;
	n->timeout_ms = o->timeout_ms ? o->timeout_ms : USHI_NET_TIMEOUT_MS;
	n->threshold = o->zc_threshold ? o->zc_threshold :
					 ZC_DEFAULT_THRESHOLD;
	n->psync = o->ioengine == USH_IOENGINE_PSYNC;
	for (unsigned i = 0; i < nc; i++)
		c[i].fd = -1;
	int ret = net_parse_workers(o->workers, peers, nc);
	if (ret < 0) {
		ushi_fail(ret, "net: bad worker list '%s' (HOST:PORT,...)",
			 o->workers);
		nc = 0;
	} else {
		ret = 0;
	}
	n->nc = nc;
	w->sink_state = n;
	n->st->net_workers = nc;
	for (unsigned i = 0; !ret && i < nc; i++) {
		struct proto_hello h, me = {.role = USHI_ROLE_WRITER,
					    .shuffle = o->shuffle,
					    .map = o->map,
					    .attempt = o->attempt};
		snprintf(me.app, sizeof(me.app), "%s", o->app);
		c[i].n = n;
		snprintf(c[i].peer, sizeof(c[i].peer), "%s", peers[i]);
		int fd = net_dial(peers[i], &me, n->timeout_ms, &h);
		if (fd < 0) {
			ret = fd;
			break;
		}
		c[i].fd = fd;
		c[i].window = o->window && o->window < h.window ? o->window :
								    h.window;
		c[i].max_frame = h.max_frame;
		c[i].zc = o->send_zc >= 0;
		if (!n->psync)
			ret = arm_recv(w->ring, &c[i]);
	}
	ushi_free(peers);
	if (ret) {
		close_all(n);
		w->sink_state = NULL;
	}
	return ret;
}

static void data_done(struct ushi_op *op, int res)
{
	struct conn *c = op->owner;
	struct ush_writer *w = c->n->w;
	c->zc_notifs += op->send.zc_notifs;
	c->zc_copied += op->send.zc_copied;
	c->n->st->net_zc_notifs += op->send.zc_notifs;
	c->n->st->net_zc_copied += op->send.zc_copied;
	if (c->zc && w->o.send_zc == 0 && c->zc_notifs >= ZC_SAMPLE &&
	    c->zc_copied * 2 > c->zc_notifs) {
		/* The kernel copied anyway (loopback does): plain SEND
		 * costs less than pinning plus a deferred copy. */
		c->zc = false;
		c->n->st->net_zc_off++;
	}
	if (res < 0)
		conn_dead(c, res == -ECANCELED ? -ETIMEDOUT : res,
			  res == -ECANCELED ? "send stalled past the timeout" :
					      "send failed");
	writer_frame_done(w, op->io.buf, op->io.buf ? NULL : op->io.addr,
			  op->io.t0);
}

/* Waits on the ring until done(c) or c fails; the deadline restarts
 * whenever the worker shows progress (credit, replies). */
static int wait_for(struct net *n, struct conn *c,
		    bool (*done)(struct conn *, uint32_t), uint32_t arg,
		    const char *what)
{
	struct ush_ring *r = n->w->ring;
	uint64_t limit = (uint64_t)n->timeout_ms * 1000000u;
	uint64_t start = ushi_now_ns();
	uint64_t seen = c->unacked;
	while (!c->err && !done(c, arg)) {
		uint64_t now = ushi_now_ns();
		if (c->unacked != seen) {
			seen = c->unacked;
			start = now;
		}
		if (now - start >= limit) {
			conn_dead(c, -ETIMEDOUT, what);
			break;
		}
		int ret = ring_reap_timeout(r, 1, limit - (now - start));
		if (ret && ret != -ETIME)
			return ret;
	}
	return c->err;
}

/*
 * Waits until none of the writer's frames is in flight. A zero-copy send
 * is complete only at its notification, which comes once the worker has
 * taken the bytes: a worker that takes nothing for timeout_ms has its
 * connection reset (conn_dead), which releases the pages.
 */
static int net_drain(struct ush_writer *w)
{
	struct net *n = w->sink_state;
	struct ush_ring *r = w->ring;
	uint64_t limit = (uint64_t)n->timeout_ms * 1000000u;
	uint64_t start = ushi_now_ns();
	unsigned seen = w->inflight;
	while (w->inflight) {
		uint64_t now = ushi_now_ns();
		if (w->inflight != seen) {
			seen = w->inflight;
			start = now;
		}
		if (now - start >= limit) {
			for (unsigned i = 0; i < n->nc; i++)
				conn_dead(&n->c[i], -ETIMEDOUT, "sends not taken "
					  "within the timeout (worker stalled?)");
			start = now;
			continue;
		}
		int ret = ring_reap_timeout(r, 1, limit - (now - start));
		if (ret && ret != -ETIME)
			return ret;
	}
	return 0;
}

static bool has_credit(struct conn *c, uint32_t flen)
{
	return !c->unacked || c->unacked + flen <= c->window;
}

static int net_submit(struct ush_writer *w, struct ushi_buf *b, uint8_t *mem,
		      uint32_t flen, uint32_t partition)
{
	struct net *n = w->sink_state;
	struct conn *c = &n->c[proto_worker_of(partition, n->nc)];
	struct ushi_op *op = NULL;
	int ret = c->err;
	if (!ret && flen > c->max_frame)
		ret = ushi_fail(-EMSGSIZE, "net: worker %s takes frames up to "
			       "%u bytes, not %u", c->peer, c->max_frame, flen);
	if (n->psync && !ret) {
		/* The baseline: a blocking send per frame, no ring. */
		psync_replies(c, false, NULL, 0);
		if (!has_credit(c, flen)) {
			n->st->net_credit_waits++;
			psync_replies(c, true, has_credit, flen);
		}
		uint64_t t0 = ushi_now_ns();
		ret = c->err ? c->err : net_write(c->fd, b ? b->data : mem, flen);
		if (ret)
			conn_dead(c, ret, "send failed");
		writer_frame_done(w, b, mem, t0);
		if (ret)
			return ret;
		c->unacked += flen;
		writer_stored(w, flen);
		n->st->net_sends++;
		return 0;
	}
	if (!ret && !has_credit(c, flen)) {
		n->st->net_credit_waits++;
		ret = wait_for(n, c, has_credit, flen, "no credit returned "
			       "within the timeout (worker stalled?)");
	}
	if (!ret)
		ret = ring_op_get(w->ring, &op);
	if (ret) {
		writer_frame_done(w, b, mem, 0);
		return c->err ? c->err : ret;
	}
	bool zc = w->o.send_zc == 1 || (c->zc && flen >= n->threshold);
	op->kind = zc ? OP_SEND_ZC : OP_SEND;
	op->cb = data_done;
	op->owner = c;
	op->io.buf = b;
	op->io.addr = b ? b->data : mem;
	op->io.len = flen;
	op->io.fd = c->fd;
	op->send.timeout_ms = n->timeout_ms;
	conn_send(c, op);
	c->unacked += flen;
	writer_stored(w, flen);
	if (zc)
		n->st->net_zc_sends++;
	else
		n->st->net_sends++;
	return 0;
}

static void ctrl_done(struct ushi_op *op, int res)
{
	struct conn *c = op->owner;
	c->n->ctrl_inflight--;
	if (res < 0)
		conn_dead(c, res == -ECANCELED ? -ETIMEDOUT : res,
			  "sending MAPPER_END");
	ushi_free((void *)op->io.addr);
}

/* MAPPER_END to connection c: the attempt is complete. */
static int send_mapper_end(struct net *n, struct conn *c)
{
	struct ush_writer *w = n->w;
	uint8_t *m = ushi_malloc(USHI_PROTO_SMALL);
	struct ushi_op *op = NULL;
	int ret = m ? 0 : -ENOMEM;
	if (!ret && !n->psync)
		ret = ring_op_get(w->ring, &op);
	if (ret) {
		ushi_free(m);
		return ushi_fail(ret, "net: worker %s: MAPPER_END", c->peer);
	}
	size_t len = proto_put_mapper_end(m, w->o.shuffle, w->o.map,
					  w->o.attempt);
	if (n->psync) {
		ret = net_write(c->fd, m, len);
		ushi_free(m);
		if (ret)
			conn_dead(c, ret, "sending MAPPER_END");
		return c->err;
	}
	op->kind = OP_SEND;
	op->cb = ctrl_done;
	op->owner = c;
	op->io.addr = m;
	op->io.len = (uint32_t)len;
	op->io.fd = c->fd;
	op->send.timeout_ms = n->timeout_ms;
	n->ctrl_inflight++;
	conn_send(c, op);
	return 0;
}

static bool acked(struct conn *c, uint32_t unused)
{
	(void)unused;
	return c->acked;
}

static int net_commit(struct ush_writer *w)
{
	struct net *n = w->sink_state;
	int ret = 0;
	/* Every worker learns of the commit, even one without data of
	 * this map: a reader asks each for the attempt it was given. */
	for (unsigned i = 0; !ret && i < n->nc; i++)
		ret = n->c[i].err ? n->c[i].err : send_mapper_end(n, &n->c[i]);
	if (!ret)
		ret = ring_submit(w->ring);
	for (unsigned i = 0; !ret && i < n->nc; i++) {
		if (n->psync)
			psync_replies(&n->c[i], true, acked, 0);
		ret = n->psync ? n->c[i].err :
			wait_for(n, &n->c[i], acked, 0, "no commit ACK "
				 "within the timeout (worker stalled?)");
	}
	for (unsigned i = 0; !ret && i < n->nc; i++) {
		if (n->c[i].status == USH_ECOMMITTED)
			ret = ushi_fail(USH_ECOMMITTED, "net: worker %s: map %u "
				       "attempt %u is committed already",
				       n->c[i].peer, w->o.map, w->o.attempt);
		else if (n->c[i].status)
			ret = ushi_fail(-EPROTO, "net: worker %s: commit ACK of "
				       "map %u with unknown status %d",
				       n->c[i].peer, w->o.map, n->c[i].status);
	}
	if (ret)
		return w->err && ret != USH_ECOMMITTED ?
			       ushi_fail_msg(w->err, w->errmsg) : ret;
	close_all(n);
	w->sink_state = NULL;
	return 0;
}

static void net_abort(struct ush_writer *w)
{
	if (w->sink_state)
		close_all(w->sink_state);
	w->sink_state = NULL;
}

const struct ushi_sink_ops ushi_sink_net = {
	.name = "net",
	.open = net_open,
	.submit = net_submit,
	.commit = net_commit,
	.abort = net_abort,
	.drain = net_drain,
};
