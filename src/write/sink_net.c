/*
 * The net target: one TCP connection per worker, partition -> worker by
 * jump consistent hash. Each connection queues its frames in order and
 * keeps one send op going while any are queued: a SENDMSG gathering every
 * queued frame (up to SEND_IOV) in one op, so whatever the writer queued
 * between two ring entries reaches the socket in one go, or a SEND_ZC of
 * one frame from the registered pool (from zc_threshold bytes) while zero
 * copy pays. A send that comes back short releases the frames it covered
 * and resumes from the first byte not sent, gathering what queued since. A
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
 *
 * Stalls: each connection notes when it last made progress (bytes out,
 * a reply in) while it owed the writer something, and how long it
 * usually takes. With replicas, one that owes and has made no progress
 * for the stall window (net.h: a multiple of the usual gap of a replica
 * that kept up, at most 1.5 s) while another kept up is dropped as if it
 * had failed, unless it is the last live replica of a partition.
 *
 * Replicas: partition p goes to worker proto_worker_of(p) and its next
 * replicas-1 workers of the list, other host labels first. Each replica's
 * connection queues the same frame (pool buffer or heap frame), which
 * goes back to the writer after the last replica's send is done with it:
 * no copy per replica. With replicas >= 2 a failed worker is dropped,
 * not a writer error: the others carry on, the commit needs the ACKs of
 * the live ones and the map status names, per partition, the workers
 * that acknowledged it.
 *
 * Decommission: a worker that refuses the HELLO as decommissioning
 * (USH_EDRAINING) leaves this map's list. The map is placed on the
 * workers left, by the same hash and replica rule over that shorter list,
 * and its status names that list: readers find each partition where it
 * went, and the map keeps its replica count while enough workers remain.
 */
#define _GNU_SOURCE
#include "net/net.h"
#include "write/writer.h"

#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define RBUF 4096u
/* Frames a connection queues, and at most gathers into one SENDMSG. */
#define SEND_QUEUE 256u
#define SEND_IOV 64u
#define GATHER_MAX (16u << 20)
/* Held-back bytes that start a connection's send before the flush. */
#define GATHER_KICK (1u << 20)
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
	/*
	 * Sends on one socket go one op at a time: the kernel does not order
	 * concurrent sends, and a short one would interleave bytes. The next
	 * starts when the previous one's bytes are out (its first CQE), not
	 * at its zero-copy notification. The queue is a circular array of
	 * SEND_QUEUE frames from qhead; the first qsend of them are in the
	 * op going now, which has sent head_off bytes of the first.
	 */
	struct out {
		struct ushi_buf *buf; /* pool buffer, or NULL: heap addr */
		const uint8_t *addr;
		uint32_t len;
		bool ctrl;            /* MAPPER_END: freed, not the writer's */
		struct ushi_op *zc;   /* its SEND_ZC op, taken at submit */
		uint64_t t0;
	} q[SEND_QUEUE];
	unsigned qhead, qn, qsend;
	unsigned ncopy;         /* queued frames without a zc op */
	unsigned zc_out;        /* zc ops taken, data_done not yet called */
	uint64_t qbytes;        /* queued since the last kick */
	uint64_t qdata;         /* DATA bytes queued (unacked counts them) */
	uint32_t head_off;
	struct ushi_op *gather; /* this connection's SENDMSG op, kept */
	bool busy;              /* gather or a q[qhead].zc is in flight */
	bool starved;           /* frames wait for credit: an ACK kicks */
	struct iovec iov[SEND_IOV];
	struct msghdr msg;
	int err, status;
	char why[96];           /* what failed it (err) */
	struct ushi_mac mac;    /* its control frames' MACs */
	struct ushi_pace pace;  /* progress while owing (owes()) */
	uint64_t progress_ns;   /* the last progress: bytes out, a reply */
	bool ended;             /* MAPPER_END queued: its ACK is due */
	uint64_t zc_notifs, zc_copied;
	uint32_t rlen;
	uint8_t rbuf[RBUF];
};

/* A heap frame queued on several replicas: how many still hold it. */
struct heapref {
	const uint8_t *mem;
	unsigned refs;
	struct heapref *next;
};

/* An open pack of staged frames for one first worker (net_pack_add). */
struct npack {
	struct ushi_buf *b;   /* BUF_WRITER, or NULL: none open */
	uint32_t len, fmax;   /* its bytes, its largest frame's */
	uint32_t part;        /* a partition of its frames */
};

struct net {
	struct ush_writer *w;
	struct conn *c;
	unsigned nc;
	unsigned replicas;
	unsigned *place;        /* nc x replicas: the workers of each first */
	struct heapref *heap;   /* heap frames on several replicas */
	unsigned ctrl_inflight; /* MAPPER_END sends */
	uint32_t timeout_ms, threshold;
	const struct net_io *io; /* the writer's ioengine */
	struct ush_writer_stats *st; /* the writer's: net_* counted here */
	/* Staged writes: per first worker its open pack, and how many are
	 * open; the partition and bytes of the last span frame, which may
	 * run on into the next span buffer. */
	struct npack *pk;
	unsigned npk;
	uint32_t *ord;          /* partitions by first worker (part_order) */
	uint32_t carry_part, carry_flen;
	/* While staged frames are queued: the bytes they may queue beyond
	 * a worker's window (has_credit()); 0 otherwise. */
	uint64_t ahead;
};

/*
 * How frames and replies move, by the writer's ioengine: through the ring
 * (a queue of sends per connection and a receive armed for good) or, for
 * the psync baseline, with a blocking send per frame, reading replies
 * between sends and blocking for them only when credit or an ACK is due.
 */
struct net_io {
	/* After the handshake: what the connection needs to run. */
	int (*start)(struct net *n, struct conn *c);
	/* Handles what is there before a frame is sent (psync: the replies
	 * that came meanwhile); may fail c. */
	void (*update)(struct conn *c);
	/* Waits until done(c, arg) or c fails; returns c->err or an error
	 * of the ring. */
	int (*wait)(struct net *n, struct conn *c,
		    bool (*done)(struct conn *, uint32_t), uint32_t arg,
		    const char *what);
	/* Sends frame o (credit and queue room there): a DATA frame is the
	 * writer's until frame_done(), a control frame (o->ctrl) is freed.
	 * On error it is released and c may be failed. Counts the send. */
	int (*send)(struct net *n, struct conn *c, struct out *o);
	/* The writer submits: start what was held back. */
	int (*flush)(struct net *n);
};

static const struct net_io net_io_ring, net_io_psync;

static void parse(struct conn *c);
static void conn_dead(struct conn *c, int err, const char *what);
static void drop_stalled(struct net *n);

/* Waits for completions a tick at a time, so that stalls are seen. */
#define STALL_TICK_NS (USHI_STALL_MIN_MS * 1000000ull / 4)

/* Whether live c owes the writer something: frames to send or to have
 * notified, credit, the commit's ACK. */
static bool owes(const struct conn *c)
{
	return !c->err && (c->qn || c->zc_out || c->unacked ||
			   (c->ended && !c->acked));
}

/* Whether c's pace is kept: only drop_stalled() reads it, which watches
 * replicas alone; a single copy costs no clock read per send or reply. */
static bool paced(const struct conn *c)
{
	return c->n->replicas > 1;
}

/* c is given work at now: if it owed nothing, waiting for progress
 * starts then. */
static void given(struct conn *c, uint64_t now)
{
	if (paced(c) && !owes(c))
		c->pace.last_ns = now;
}

/* c made progress: bytes went out, a reply came. */
static void progressed(struct conn *c)
{
	if (!paced(c))
		return;
	uint64_t now = ushi_now_ns();
	if (c->pace.last_ns)
		pace_sample(&c->pace, now - c->pace.last_ns);
	c->pace.last_ns = c->progress_ns = now;
}

/* The workers holding partition p, first replica first. */
static const unsigned *replicas_of(const struct net *n, uint32_t p)
{
	return n->place + proto_worker_of(p, n->nc) * n->replicas;
}

/* A frame about to be queued on every replica: each one's send holds it. */
static int frame_hold(struct net *n, struct ushi_buf *b, const uint8_t *mem)
{
	if (b) {
		b->refs = n->replicas;
		return 0;
	}
	if (n->replicas == 1)
		return 0;
	struct heapref *h = ushi_malloc(sizeof(*h));
	if (!h)
		return ushi_fail(-ENOMEM, "net: replicas of a frame");
	*h = (struct heapref){mem, n->replicas, n->heap};
	n->heap = h;
	return 0;
}

/* One replica is done with heap frame mem: the replicas left. */
static unsigned heap_unref(struct net *n, const uint8_t *mem)
{
	for (struct heapref **p = &n->heap; *p; p = &(*p)->next) {
		struct heapref *h = *p;
		if (h->mem != mem)
			continue;
		if (--h->refs)
			return h->refs;
		*p = h->next;
		ushi_free(h);
		return 0;
	}
	return 0; /* one replica: never listed */
}

/* One replica's send of a frame is done with (sent, dropped or failed):
 * the frame goes back to the writer with the last one. */
static void frame_done(struct net *n, struct ushi_buf *b, const uint8_t *mem,
		       uint64_t t0)
{
	if (b ? --b->refs : heap_unref(n, mem))
		return;
	writer_frame_done(n->w, b, mem, t0);
}

static void kick(struct conn *c);
static void kick_all(struct net *n);

/* The frame at the head of c's queue is done with: sent, or dropped after
 * the connection failed (which conn_dead reported). */
static void out_pop(struct conn *c)
{
	struct out *o = &c->q[c->qhead];
	struct net *n = c->n;
	c->qhead = (c->qhead + 1) % SEND_QUEUE;
	c->qn--;
	c->head_off = 0;
	if (!o->ctrl)
		c->qdata -= o->len;
	if (o->zc)
		return; /* its op's callback (data_done) releases it */
	c->ncopy--;
	if (o->ctrl) {
		n->ctrl_inflight--;
		ushi_free((void *)o->addr);
		return;
	}
	frame_done(n, o->buf, o->buf ? NULL : o->addr, o->t0);
}

/* The gather op back to the ring once no queued frame needs it. */
static void gather_put(struct conn *c)
{
	if (c->gather && !c->busy && !c->ncopy) {
		ring_op_put(c->n->w->ring, c->gather);
		c->gather = NULL;
	}
}

static void gather_sent(struct ushi_op *op, int res);

/*
 * DATA bytes c may start sending now: the window less what was sent and
 * not credited yet. Staged frames are queued ahead of the window
 * (has_credit()), so the window is kept here, when a send starts: the
 * worker never holds more than the window unacknowledged. Called only
 * while no send of c is going: every queued byte is unsent but the
 * head's first head_off.
 */
static uint64_t credit_left(const struct conn *c)
{
	bool data = c->qn && !c->q[c->qhead].ctrl;
	uint64_t unsent = c->qdata - (data ? c->head_off : 0);
	uint64_t flying = c->unacked > unsent ? c->unacked - unsent : 0;
	return flying < c->window ? c->window - flying : 0;
}

/* Whether queued frame o (the i-th from the head) may start with left
 * bytes of credit and sent bytes already chosen: a control frame takes
 * none, a frame begun must end, and one larger than the window goes
 * alone when nothing is in flight. */
static bool credit_for(const struct conn *c, const struct out *o, unsigned i,
		       uint64_t left, uint64_t chosen)
{
	if (o->ctrl || (!i && c->head_off))
		return true;
	return chosen + o->len <= left ||
	       (!i && left >= c->window); /* nothing in flight */
}

/* Sends the queued frames from the head up to the first zero-copy one
 * (SEND_IOV, GATHER_MAX bytes, the credit at most) in one SENDMSG.
 * false when none may go: credit returning kicks c again. */
static bool gather_start(struct conn *c)
{
	uint64_t len = 0, data = 0, left = credit_left(c);
	unsigned n = 0;
	for (unsigned i = 0; i < c->qn && n < SEND_IOV; i++) {
		const struct out *o = &c->q[(c->qhead + i) % SEND_QUEUE];
		uint32_t skip = i ? 0 : c->head_off;
		if (o->zc || (n && len + o->len > GATHER_MAX) ||
		    !credit_for(c, o, i, left, data))
			break;
		c->iov[n].iov_base = (void *)(o->addr + skip);
		c->iov[n++].iov_len = o->len - skip;
		len += o->len - skip;
		data += o->ctrl ? 0 : o->len - skip;
	}
	if (!n) {
		c->starved = true;
		return false;
	}
	c->qsend = n;
	c->msg = (struct msghdr){.msg_iov = c->iov, .msg_iovlen = n};
	c->gather->io.len = (uint32_t)len;
	c->gather->io.done = 0;
	c->n->st->net_send_ops++;
	ring_send_own(c->n->w->ring, c->gather, gather_sent);
	return true;
}

static void gather_sent(struct ushi_op *op, int res)
{
	struct conn *c = op->owner;
	struct ush_ring *r = c->n->w->ring;
	if (res > 0)
		progressed(c);
	/* The frames it covered are out: release them as they complete,
	 * remembering how far into the next one it got. */
	for (uint64_t got = res > 0 ? (uint64_t)res : 0; got && c->qsend;) {
		uint32_t left = c->q[c->qhead].len - c->head_off;
		if (got < left) {
			c->head_off += (uint32_t)got;
			break;
		}
		got -= left;
		c->qsend--;
		out_pop(c);
	}
	bool again = res == -EAGAIN || res == -EINTR || (res > 0 && c->qsend);
	/* Short (the socket's buffer filled): the rest, from the first
	 * byte not sent, and what queued meanwhile. */
	c->n->st->net_short_sends += again && res > 0;
	if (again && !c->err && gather_start(c))
		return;
	ring_send_end(r, op, res);
	c->busy = false;
	if (res <= 0 && !again)
		conn_dead(c, res == -ECANCELED ? -ETIMEDOUT : res ? res : -EIO,
			  res == -ECANCELED ? "send stalled past the timeout" :
					      "send failed");
	kick(c);
}

static void zc_sent(struct ushi_op *op, int res)
{
	struct conn *c = op->owner;
	struct ush_ring *r = c->n->w->ring;
	bool again = res == -EAGAIN || res == -EINTR ||
		     (res > 0 && op->io.done < op->io.len);
	if (res > 0)
		progressed(c);
	if (again && !c->err) {
		c->n->st->net_short_sends += res > 0;
		c->n->st->net_send_ops++;
		ring_send_own(r, op, zc_sent); /* the rest */
		return;
	}
	out_pop(c);
	c->busy = false;
	/* Sent, but the kernel may still read the pages: the buffer goes
	 * idle only at the notification (data_done). */
	if (op->io.buf && op->send.notifs && op->io.buf->refs == 1)
		buf_move(op->io.buf, BUF_INFLIGHT, BUF_ZC_PENDING);
	ring_send_end(r, op, op->io.done == op->io.len ? (int)op->io.len :
			     res < 0 && !again ? res : -EIO);
	kick(c);
}

/* Starts sending c's queue unless a send is going. On a failed
 * connection the queued frames are dropped instead. */
static void kick(struct conn *c)
{
	struct ush_ring *r = c->n->w->ring;
	if (c->busy)
		return;
	while (c->err && c->qn) {
		struct ushi_op *zc = c->q[c->qhead].zc;
		out_pop(c);
		if (zc) {
			/* Taken, never started: release it as data_done does. */
			c->zc_out--;
			frame_done(c->n, zc->io.buf, zc->io.buf ?
				   NULL : zc->io.addr, 0);
			ring_op_put(r, zc);
		}
	}
	c->qbytes = 0; /* counts what queued since the last start */
	if (c->qn && c->q[c->qhead].zc) {
		if (credit_for(c, &c->q[c->qhead], 0, credit_left(c), 0)) {
			c->busy = true;
			c->n->st->net_send_ops++;
			ring_send_own(r, c->q[c->qhead].zc, zc_sent);
		} else {
			c->starved = true;
		}
	} else if (c->qn) {
		c->busy = gather_start(c);
	}
	gather_put(c);
}

/* Queues a frame on c (room checked by the caller); net_flush() or a
 * full gather starts it. A copied frame needs the gather op: taken here,
 * outside any completion callback, since taking may reap (and before
 * that, what was held back starts, so there is something to reap). */
static int conn_queue(struct conn *c, const struct out *o)
{
	if (!o->zc && !c->gather) {
		struct ushi_op *op;
		kick_all(c->n);
		int ret = ring_op_get(c->n->w->ring, &op);
		if (ret)
			return ret;
		op->kind = OP_SENDMSG;
		op->owner = c;
		op->io.fd = c->fd;
		op->send.msg = &c->msg;
		op->send.keep = true;
		op->send.timeout_ms = c->n->timeout_ms;
		c->gather = op;
	}
	c->q[(c->qhead + c->qn++) % SEND_QUEUE] = *o;
	c->qbytes += o->len;
	c->qdata += o->ctrl ? 0 : o->len;
	if (!o->zc)
		c->ncopy++;
	if (o->zc || c->qn >= SEND_IOV || c->qbytes >= GATHER_KICK)
		kick(c);
	return 0;
}

/* Starts every connection's queue where nothing is going. */
static void kick_all(struct net *n)
{
	for (unsigned i = 0; i < n->nc; i++)
		kick(&n->c[i]);
}

/* The writer submits: start what was held back, submit, and let the
 * kernel move sends along (on a DEFER_TASKRUN ring a send waiting for
 * socket room is retried only inside an entry), starting the next of
 * each connection as soon as the last is done. */
static int ring_flush(struct net *n)
{
	drop_stalled(n);
	kick_all(n);
	return ring_poll(n->w->ring);
}

static int packs_send(struct net *n);

/* The writer submits: the packs not full go too (the end of a stage
 * flush). */
static int net_flush(struct ush_writer *w)
{
	struct net *n = w->sink_state;
	int ret = packs_send(n);
	return ret ? ret : n->io->flush(n);
}

static void conn_dead(struct conn *c, int err, const char *what)
{
	if (c->err)
		return;
	c->err = err;
	/* A long cause is cut: the message names the worker anyway. */
	snprintf(c->why, sizeof(c->why), "%.*s", (int)sizeof(c->why) - 1,
		 what);
	/* With replicas the others carry on: a partition fails only when
	 * every replica of it is gone (gone()). */
	if (c->n->replicas > 1)
		c->n->st->net_failovers++;
	else
		writer_error(c->n->w, err, "net: worker %s: %s", c->peer, what);
	/* Reset the connection now, keeping the fd (queued ops still name
	 * it; close_all closes it). Bytes a stalled worker never takes stay
	 * in the send queue, and with them the pages of zero-copy sends:
	 * their notifications, which drain() waits for, would never come.
	 * connect(AF_UNSPEC) is tcp_disconnect(): it purges the queue. */
	if (c->fd >= 0)
		net_reset(c->fd);
}

/* Whether every partition that c holds has a live replica besides c. */
static bool others_hold(const struct net *n, const struct conn *c)
{
	unsigned me = (unsigned)(c - n->c);
	for (unsigned f = 0; f < n->nc; f++) {
		const unsigned *pl = n->place + f * n->replicas;
		bool mine = false, other = false;
		for (unsigned k = 0; k < n->replicas; k++) {
			mine |= pl[k] == me;
			other |= pl[k] != me && !n->c[pl[k]].err;
		}
		if (mine && !other)
			return false;
	}
	return true;
}

/* The stall window (ms) of c: from the usual gap of the workers that
 * kept up while c did not, the one named in *up; 0 when none did. One
 * kept up that owes nothing (it took all it was given: the writer may be
 * waiting for buffers that c holds), or that made progress since c's last
 * and is not overdue itself. */
static uint32_t stall_window(const struct net *n, const struct conn *c,
			     uint64_t now, const struct conn **up)
{
	uint32_t win = 0;
	for (unsigned i = 0; i < n->nc; i++) {
		const struct conn *o = &n->c[i];
		uint32_t ow = pace_window_ms(o->pace.gap_ns, n->timeout_ms);
		if (o == c || o->err || !o->progress_ns ||
		    (owes(o) && (o->progress_ns <= c->pace.last_ns ||
				 now - o->pace.last_ns >= ow * 1000000ull)))
			continue;
		if (ow > win) {
			win = ow;
			*up = o;
		}
	}
	return win;
}

/*
 * With replicas: a worker that owes the writer something and has made no
 * progress for its stall window while another kept up is dropped, as if
 * it had failed (the status will not name it), unless it is the last
 * live replica of a partition: that one keeps timeout_ms.
 */
static void drop_stalled(struct net *n)
{
	if (n->replicas < 2)
		return;
	uint64_t now = ushi_now_ns();
	/* No window is shorter: most connections are passed over in O(1),
	 * as this runs at every flush. */
	uint64_t shortest = pace_window_ms(0, n->timeout_ms) * 1000000ull;
	for (unsigned i = 0; i < n->nc; i++) {
		struct conn *c = &n->c[i];
		const struct conn *up = NULL;
		if (!owes(c) || now - c->pace.last_ns < shortest)
			continue;
		uint32_t win = stall_window(n, c, now, &up);
		if (!win || now - c->pace.last_ns < win * 1000000ull ||
		    !others_hold(n, c))
			continue;
		char what[128]; /* cut to why[] by conn_dead */
		snprintf(what, sizeof(what), "stalled: no progress in %u ms "
			 "while worker %.40s kept up", win, up->peer);
		conn_dead(c, -ETIMEDOUT, what);
		kick(c); /* drops what is queued, unless a send is going */
	}
}

static void handle(struct conn *c, const struct ushi_frame *f,
		   const uint8_t *payload)
{
	char msg[USHI_PROTO_ERRMSG_MAX], what[USHI_PROTO_ERRMSG_MAX + 16];
	if (f->type == USHI_FRAME_ACK) {
		struct proto_ack a;
		progressed(c);
		proto_get_ack(payload, &a);
		if (a.kind == USHI_ACK_CREDIT) {
			c->unacked -= a.value < c->unacked ? a.value :
							     c->unacked;
			if (c->starved) { /* frames queued beyond the window */
				c->starved = false;
				kick(c);
			}
		}
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
		size_t size = proto_size(&f);
		if (mac_open(&c->mac, h, &f, &why)) {
			conn_dead(c, -EACCES, why);
			return;
		}
		handle(c, &f, h + USH_FRAME_HDR_SIZE);
		off += size;
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

/* Closes the sockets, after shutdown() or, in a fork() child, without:
 * a close is no FIN while the parent's descriptor of the socket stays
 * open. A child's frames still queued or in flight at the fork stay
 * allocated: their completions are the parent's. */
static void net_free(struct net *n)
{
	for (unsigned i = 0; i < n->nc; i++) {
		if (n->c[i].fd >= 0)
			close(n->c[i].fd);
		mac_free(&n->c[i].mac);
	}
	ushi_free(n->place);
	ushi_free(n->pk);
	ushi_free(n->ord);
	ushi_free(n->c);
	ushi_free(n);
}

static void close_all(struct net *n)
{
	struct ush_ring *r = n->w->ring;
	/* Packs never sent (an abort) go back. */
	for (unsigned g = 0; n->pk && n->npk && g < n->nc; g++)
		if (n->pk[g].b) {
			pool_put(n->w->pool, n->pk[g].b);
			n->pk[g].b = NULL;
			n->npk--;
		}
	for (unsigned i = 0; i < n->nc; i++) {
		n->c[i].closing = true;
		if (n->c[i].fd >= 0)
			shutdown(n->c[i].fd, SHUT_RDWR);
	}
	/* Shutdown completes the recvs and any send still waiting. Their
	 * callbacks use n and c: reap them all, retrying a failed wait. */
	for (unsigned fails = 0;;) {
		bool busy = n->ctrl_inflight > 0;
		kick_all(n);
		for (unsigned i = 0; i < n->nc; i++)
			busy |= n->c[i].recv_armed || n->c[i].busy ||
				n->c[i].qn || n->c[i].gather;
		if (!busy)
			break;
		ring_teardown_failed(ring_reap(r, 1), &fails);
	}
	net_free(n);
}

/* Whether a worker of pl[0..k) has label l. */
static bool label_taken(char (*labels)[USHI_NET_PEER], const unsigned *pl,
			unsigned k, const char *l)
{
	for (unsigned i = 0; i < k; i++)
		if (!strcmp(labels[pl[i]], l))
			return true;
	return false;
}

/* The replicas of each first worker: the next workers of the list whose
 * label none has yet, then the next of any. Deterministic, so a rerun
 * (or a reader) given the same list finds the same places. */
static int place_replicas(struct net *n, char (*peers)[USHI_NET_PEER])
{
	unsigned nc = n->nc, k, R = n->replicas;
	char (*labels)[USHI_NET_PEER] = ushi_calloc(nc, USHI_NET_PEER);
	n->place = ushi_calloc((size_t)nc * R, sizeof(*n->place));
	if (!labels || !n->place) {
		ushi_free(labels);
		return ushi_fail(-ENOMEM, "net: placement of %u workers", nc);
	}
	for (unsigned i = 0; i < nc; i++)
		net_peer_label(peers[i], labels[i], USHI_NET_PEER);
	for (unsigned first = 0; first < nc; first++) {
		unsigned *pl = n->place + first * R;
		pl[0] = first;
		k = 1;
		for (unsigned pass = 0; pass < 2; pass++)
			for (unsigned j = 1; j < nc && k < R; j++) {
				unsigned c = (first + j) % nc;
				bool taken = false;
				for (unsigned i = 0; i < k; i++)
					taken |= pl[i] == c;
				if (!taken && (pass || !label_taken(labels, pl, k,
								    labels[c])))
					pl[k++] = c;
			}
	}
	ushi_free(labels);
	return 0;
}

/* The list of peers[0..n), labels kept ("HOST:PORT@LABEL,..."), on the
 * heap. */
static char *peer_list(char (*peers)[USHI_NET_PEER], unsigned n)
{
	char *list = ushi_malloc((size_t)n * (USHI_NET_PEER + 1) + 1);
	size_t len = 0;
	for (unsigned i = 0; list && i < n; i++) {
		const char *label = peers[i] + strlen(peers[i]) + 1;
		len += (size_t)sprintf(list + len, "%s%s%s%s", i ? "," : "",
				       peers[i], *label ? "@" : "", label);
	}
	if (list)
		list[len] = 0;
	return list;
}

/* Leaves the workers that refused as decommissioning (c->err
 * USH_EDRAINING) out of the map's list, which becomes the writer's
 * location (its map status names it); the replicas are cut to the
 * workers left, with a warning. Fails when none is left. */
static int skip_draining(struct net *n, char (*peers)[USHI_NET_PEER])
{
	struct ush_writer *w = n->w;
	char names[512];
	int len = 0;
	unsigned k = 0;
	for (unsigned i = 0; i < n->nc; i++) {
		if (n->c[i].err == USH_EDRAINING) {
			if (len < (int)sizeof(names))
				len += snprintf(names + len,
						sizeof(names) - (size_t)len,
						"%s%s", len ? ", " : "",
						peers[i]);
			continue;
		}
		if (k != i) {
			n->c[k] = n->c[i];
			memcpy(peers[k], peers[i], USHI_NET_PEER);
		}
		k++;
	}
	if (k == n->nc)
		return 0;
	if (!k)
		return ushi_fail(USH_EDRAINING, "net: every worker is "
				"decommissioning (%s): none takes map %u of "
				"shuffle %u", names, w->o.map, w->o.shuffle);
	char *list = peer_list(peers, k);
	if (!list)
		return ushi_fail(-ENOMEM, "net: worker list");
	ushi_free((void *)w->o.workers);
	w->o.workers = list;
	n->nc = k;
	n->st->net_workers = k;
	if (n->replicas > k) {
		ushi_warn("net: map %u of shuffle %u: %u replicas asked, %u "
			  "workers left taking data (%s decommissioning): %u "
			  "replicas", w->o.map, w->o.shuffle, n->replicas, k,
			  names, k);
		n->replicas = k;
	}
	return 0;
}

/* n->ord: the partitions by first worker, with more than one. */
static int order_parts(struct net *n)
{
	uint32_t np = n->w->o.partitions;
	if (n->nc < 2)
		return 0;
	uint32_t *at = ushi_calloc(n->nc + 1, sizeof(*at));
	n->ord = ushi_malloc((size_t)np * sizeof(*n->ord));
	if (!at || !n->ord) {
		ushi_free(at);
		return ushi_fail(-ENOMEM, "net: the order of %u partitions",
				np);
	}
	for (uint32_t p = 0; p < np; p++)
		at[proto_worker_of(p, n->nc) + 1]++;
	for (unsigned g = 0; g < n->nc; g++)
		at[g + 1] += at[g];
	for (uint32_t p = 0; p < np; p++)
		n->ord[at[proto_worker_of(p, n->nc)]++] = p;
	ushi_free(at);
	return 0;
}

static int sink_net_open(struct ush_writer *w)
{
	const struct ush_writer_opts *o = &w->o;
	unsigned nc = net_count_workers(o->workers);
	unsigned R = o->replicas ? o->replicas : 1;
	if (!nc)
		return ushi_fail(-EINVAL, "net: no workers given");
	if (R > USH_REPLICAS_MAX || R > nc || (R > 1 && nc > 64))
		return ushi_fail(-EINVAL, "net: %u replicas of %u workers: "
				"replicas go to distinct workers, 1..%u, and "
				"with 2 or more to at most 64 workers", R, nc,
				USH_REPLICAS_MAX);
	/* Each connection keeps a receive op armed for good; with no op
	 * left over, the first send would wait for one forever. */
	struct ush_ring *r = w->ring;
	const struct net_io *io = o->ioengine == USH_IOENGINE_PSYNC ?
		&net_io_psync : &net_io_ring;
	if (io == &net_io_ring && ring_armed(r) + nc >= ring_opts(r)->iodepth)
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
	n->st = &w->st; /* its net_* counters */
	n->c = c;
	n->timeout_ms = o->timeout_ms ? o->timeout_ms : USHI_NET_TIMEOUT_MS;
	/* Forced zero copy: every frame, unless a threshold is given. */
	n->threshold = o->zc_threshold ? o->zc_threshold :
		       o->send_zc == 1 ? 0 : ZC_DEFAULT_THRESHOLD;
	n->io = io;
	for (unsigned i = 0; i < nc; i++) {
		c[i].n = n;
		c[i].fd = -1;
	}
	int ret = net_parse_workers(o->workers, peers, nc);
	if (ret < 0) {
		ushi_fail(ret, "net: bad worker list '%s' (HOST:PORT,...)",
			 o->workers);
		nc = 0;
	} else {
		ret = 0;
	}
	n->nc = nc;
	n->replicas = R;
	w->sink_state = n;
	n->st->net_workers = nc;
	for (unsigned i = 0; !ret && i < nc; i++) {
		struct proto_hello h, me = {.role = USHI_ROLE_WRITER,
					    .shuffle = o->shuffle,
					    .map = o->map,
					    .attempt = o->attempt};
		snprintf(me.app, sizeof(me.app), "%s", o->app);
		snprintf(c[i].peer, sizeof(c[i].peer), "%s", peers[i]);
		/* With replicas a worker that does not answer within the
		 * longest stall window is left to the others. */
		int fd = net_dial(peers[i], &me, R > 1 ?
				  pace_longest_ms(n->timeout_ms) :
				  n->timeout_ms, &h, &c[i].mac);
		if (fd == USH_EDRAINING) {
			c[i].err = fd; /* skip_draining() */
			continue;
		}
		if (fd < 0 && R > 1) {
			/* Down already: its partitions go to the others. */
			conn_dead(&c[i], fd, ush_last_error());
			continue;
		}
		if (fd < 0) {
			ret = fd;
			break;
		}
		c[i].fd = fd;
		c[i].window = o->window && o->window < h.window ? o->window :
								    h.window;
		c[i].max_frame = h.max_frame;
		/* Auto: zero copy to other hosts only (net.h says why). */
		c[i].zc = o->send_zc > 0 ||
			  (!o->send_zc && !net_same_host(fd));
	}
	if (!ret)
		ret = skip_draining(n, peers);
	if (!ret)
		ret = place_replicas(n, peers);
	if (!ret && !(n->pk = ushi_calloc(n->nc, sizeof(*n->pk))))
		ret = ushi_fail(-ENOMEM, "net: packs for %u workers", n->nc);
	if (!ret)
		ret = order_parts(n);
	for (unsigned i = 0; !ret && i < n->nc; i++)
		if (c[i].fd >= 0)
			ret = io->start(n, &c[i]);
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
	c->zc_out--;
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
	frame_done(c->n, op->io.buf, op->io.buf ? NULL : op->io.addr,
		   op->io.t0);
}

/* Reaps completions for a tick at most (left_ns if shorter), then drops
 * the replicas that stalled meanwhile: 0 or a ring error. */
static int reap_tick(struct net *n, uint64_t left_ns)
{
	int ret = ring_reap_timeout(n->w->ring, 1, left_ns < STALL_TICK_NS ?
				    left_ns : STALL_TICK_NS);
	if (ret && ret != -ETIME)
		return ret;
	drop_stalled(n);
	return 0;
}

/* Waits on the ring until done(c) or c fails; the deadline restarts
 * whenever the worker shows progress (credit, replies). */
static int ring_wait(struct net *n, struct conn *c,
		     bool (*done)(struct conn *, uint32_t), uint32_t arg,
		     const char *what)
{
	uint64_t limit = (uint64_t)n->timeout_ms * 1000000u;
	uint64_t start = ushi_now_ns();
	uint64_t seen = c->unacked;
	kick_all(n);
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
		int ret = reap_tick(n, limit - (now - start));
		if (ret)
			return ret;
	}
	return c->err;
}

/* Whether c still holds frames of the writer: queued, or sent zero-copy
 * and waiting for the notification. */
static bool holds_frames(const struct conn *c)
{
	return c->qn || c->zc_out;
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
	uint64_t limit = (uint64_t)n->timeout_ms * 1000000u;
	uint64_t start = ushi_now_ns();
	unsigned seen = w->inflight;
	kick_all(n);
	while (w->inflight) {
		uint64_t now = ushi_now_ns();
		if (w->inflight != seen) {
			seen = w->inflight;
			start = now;
		}
		if (now - start >= limit) {
			/* Only the workers holding frames: with replicas,
			 * the others are live copies. */
			bool any = false;
			for (unsigned i = 0; i < n->nc; i++)
				any |= holds_frames(&n->c[i]);
			for (unsigned i = 0; i < n->nc; i++)
				if (!any || holds_frames(&n->c[i]))
					conn_dead(&n->c[i], -ETIMEDOUT, "sends not "
						  "taken within the timeout "
						  "(worker stalled?)");
			start = now;
			continue;
		}
		int ret = reap_tick(n, limit - (now - start));
		if (ret)
			return ret;
	}
	return 0;
}

/* The writer waits for an idle buffer: a completion, or a tick in which
 * stalled replicas are looked for (their sends hold the buffers). */
static int net_reap(struct ush_writer *w)
{
	return reap_tick(w->sink_state, STALL_TICK_NS);
}

static bool has_room(struct conn *c, uint32_t unused)
{
	(void)unused;
	return c->qn < SEND_QUEUE;
}

/* Room in c's window for flen more bytes; staged frames may queue
 * n->ahead bytes beyond it, sent as credit returns (gather_start()). */
static bool has_credit(struct conn *c, uint32_t flen)
{
	return !c->unacked ||
	       c->unacked + flen <= c->window + c->n->ahead;
}

/* ------------------------------------------------------- ring sends */

/* Whether frame o goes zero-copy on c. */
static bool zc_pays(const struct net *n, const struct conn *c,
		    const struct out *o)
{
	return !o->ctrl && c->zc && o->len >= n->threshold;
}

/* Queues o on c; a frame where zero copy pays gets its SEND_ZC op. */
static int ring_send(struct net *n, struct conn *c, struct out *o)
{
	struct ush_ring *r = n->w->ring;
	int ret = 0;
	if (zc_pays(n, c, o)) {
		/* Taking may reap: what was held back must be going. */
		kick_all(n);
		ret = ring_op_get(r, &o->zc);
	}
	if (o->zc) {
		struct ushi_op *op = o->zc;
		op->kind = OP_SEND_ZC;
		op->cb = data_done;
		op->owner = c;
		op->io.buf = o->buf;
		op->io.addr = o->addr;
		op->io.len = o->len;
		op->io.fd = c->fd;
		op->send.timeout_ms = n->timeout_ms;
	}
	if (!ret) {
		/* Before queueing: a failed c drops it at once. */
		c->zc_out += o->zc != NULL;
		ret = conn_queue(c, o);
	}
	if (ret) {
		if (o->zc)
			ring_op_put(r, o->zc);
		if (o->ctrl)
			ushi_free((void *)o->addr);
		else
			frame_done(n, o->buf, o->buf ? NULL : o->addr, 0);
		return c->err ? c->err : ret;
	}
	if (o->ctrl)
		n->ctrl_inflight++;
	else if (o->zc)
		n->st->net_zc_sends++;
	else
		n->st->net_sends++;
	return 0;
}

static int ring_start_conn(struct net *n, struct conn *c)
{
	return arm_recv(n->w->ring, c);
}

/* Replies come through the receive armed on the ring. */
static void ring_update(struct conn *c)
{
	(void)c;
}

static const struct net_io net_io_ring = {
	.start = ring_start_conn,
	.update = ring_update,
	.wait = ring_wait,
	.send = ring_send,
	.flush = ring_flush,
};

/* ----------------------------------------------------------------- psync */

/* psync: reads replies, blocking (up to the socket's timeout) when
 * block, until done(c) or nothing more is waiting. */
static void psync_replies(struct conn *c, bool block,
			  bool (*done)(struct conn *, uint32_t), uint32_t arg)
{
	while (!c->err && !(done && done(c, arg))) {
		int r = block ? net_recv(c->fd, c->rbuf + c->rlen,
					 RBUF - c->rlen) :
				net_recv_ready(c->fd, c->rbuf + c->rlen,
					       RBUF - c->rlen);
		if (r == -EAGAIN && !block)
			return;
		if (r < 0) {
			conn_dead(c, r == -EPIPE ? -ECONNRESET : r,
				  r == -EPIPE ? "closed the connection" :
				  "no reply within the timeout (worker "
				  "stalled?)");
			return;
		}
		c->rlen += (uint32_t)r;
		parse(c);
	}
}

/* The blocking sends and replies wait timeout_ms for progress, not the
 * dial's deadline (shorter with replicas). */
static int psync_start(struct net *n, struct conn *c)
{
	net_set_timeouts(c->fd, n->timeout_ms);
	return 0;
}

static void psync_update(struct conn *c)
{
	psync_replies(c, false, NULL, 0);
}

static int psync_wait(struct net *n, struct conn *c,
		      bool (*done)(struct conn *, uint32_t), uint32_t arg,
		      const char *what)
{
	(void)n;
	(void)what; /* psync_replies() says what failed */
	psync_replies(c, true, done, arg);
	return c->err;
}

/* The baseline: a blocking send per frame, no ring. net_write() is the
 * handshake's blocking send (up to the socket's timeout). */
static int psync_send(struct net *n, struct conn *c, struct out *o)
{
	int ret = c->err ? c->err : net_write(c->fd, o->addr, o->len);
	if (ret)
		conn_dead(c, ret, o->ctrl ? "sending MAPPER_END" :
				  "send failed");
	if (o->ctrl)
		ushi_free((void *)o->addr);
	else
		frame_done(n, o->buf, o->buf ? NULL : o->addr, o->t0);
	if (!ret && !o->ctrl)
		n->st->net_sends++;
	return ret;
}

/* Nothing is held back. */
static int psync_flush(struct net *n)
{
	(void)n;
	return 0;
}

static const struct net_io net_io_psync = {
	.start = psync_start,
	.update = psync_update,
	.wait = psync_wait,
	.send = psync_send,
	.flush = psync_flush,
};

/* 0 when worker c takes frames of flen bytes, else -EMSGSIZE saying
 * so. */
static int too_big(const struct conn *c, uint32_t flen)
{
	return flen <= c->max_frame ? 0 :
	       ushi_fail(-EMSGSIZE, "net: worker %s takes frames up to %u "
			 "bytes, not %u", c->peer, c->max_frame, flen);
}

/* Queues flen bytes on replica c: a frame, or a run of staged frames
 * (at addr in pool buffer b, the largest fmax bytes); or releases c's
 * hold on them and returns the error. */
static int replica_submit(struct net *n, struct conn *c, struct ushi_buf *b,
			  const uint8_t *mem, uint32_t flen, uint32_t fmax)
{
	int ret = c->err ? c->err : too_big(c, fmax);
	if (!ret)
		n->io->update(c);
	if (!ret && !has_credit(c, flen)) {
		n->st->net_credit_waits++;
		ret = n->io->wait(n, c, has_credit, flen, "no credit returned "
				  "within the timeout (worker stalled?)");
	}
	if (!ret && c->qn == SEND_QUEUE)
		ret = n->io->wait(n, c, has_room, 0, "sends not taken within "
				  "the timeout (worker stalled?)");
	if (ret) {
		frame_done(n, b, b ? NULL : mem, 0);
		return c->err ? c->err : ret;
	}
	struct out o = {.buf = b, .addr = mem ? mem : b->data, .len = flen,
			.t0 = ushi_now_ns()};
	given(c, o.t0);
	/* Counted before: queueing may start the send, whose credit
	 * (credit_left()) counts the frame as unsent but unacknowledged. */
	c->unacked += flen;
	ret = n->io->send(n, c, &o);
	if (ret) {
		c->unacked -= flen;
		return ret;
	}
	writer_stored(n->w, flen);
	return 0;
}

/* Every replica of partition is gone: an error naming them and why. */
static int gone(struct net *n, uint32_t partition)
{
	char msg[512];
	const unsigned *pl = replicas_of(n, partition);
	int len = snprintf(msg, sizeof(msg), "net: partition %u: every "
			   "replica is gone:", partition);
	for (unsigned k = 0; k < n->replicas && len < (int)sizeof(msg); k++)
		len += snprintf(msg + len, sizeof(msg) - (size_t)len, "%s "
				"worker %s (%s)", k ? "," : "",
				n->c[pl[k]].peer, n->c[pl[k]].why);
	return ushi_fail_msg(n->c[pl[0]].err ? n->c[pl[0]].err : -EIO, msg);
}

/* flen bytes at mem (in b, or a heap frame) to every live replica of
 * partition: one frame, or a run of staged frames of partitions with the
 * same workers, the largest fmax bytes; each replica's send holds it
 * already. An error that is not a lost replica (a frame too large, the
 * ring) fails the writer; so does losing the last replica of the
 * partition. */
static int replicas_submit(struct net *n, struct ushi_buf *b,
			   const uint8_t *mem, uint32_t flen, uint32_t fmax,
			   uint32_t partition)
{
	const unsigned *pl = replicas_of(n, partition);
	unsigned taken = 0;
	int ret = 0;
	for (unsigned k = 0; k < n->replicas; k++) {
		struct conn *c = &n->c[pl[k]];
		int r = replica_submit(n, c, b, mem, flen, fmax);
		if (!r) {
			taken++;
			n->st->net_replica_bytes[k] += flen;
		} else if (!ret && (n->replicas == 1 || !c->err)) {
			ret = r;
		}
	}
	return ret ? ret : taken ? 0 : gone(n, partition);
}

/* The frame to every live replica of its partition. A staged frame of
 * the partition may wait in a pack: the packs go first, so that the
 * partition's batches reach its workers in order. */
static int net_submit(struct ush_writer *w, struct ushi_buf *b, uint8_t *mem,
		      uint32_t flen, uint32_t partition)
{
	struct net *n = w->sink_state;
	int ret = packs_send(n);
	if (!ret)
		ret = frame_hold(n, b, mem);
	if (ret) {
		writer_frame_done(w, b, mem, 0);
		return ret;
	}
	return replicas_submit(n, b, b ? NULL : mem, flen, flen, partition);
}

/*
 * Staged writes (stage.c): frames of many partitions built side by side
 * in pool buffers of the push size, sent whole, as the disk sink writes
 * its packs: a send per 64 KiB rather than per frame of a few KiB. A pack
 * holds the frames of partitions with the same workers (the same first
 * worker): one open pack per first worker, sent when full, when the next
 * frame does not fit, and at the writer's flush (the end of a stage
 * flush). A frame never runs on into the next pack: with replicas, packs
 * of other first workers go to the same worker in between. A buffer of
 * the stage's span holds frames of every worker in partition order: each
 * run of frames for the same workers goes to them as a send of its own
 * from the same buffer, which returns to the pool after the last
 * (b->refs). A span frame may run on into the next span buffer: nothing
 * is sent between the two (no pack is open in a scattered flush).
 */
static unsigned first_of(const struct net *n, uint32_t partition)
{
	return proto_worker_of(partition, n->nc);
}

/* Whether a frame of flen bytes for partition's workers fits what each
 * takes; else the error, naming the worker. */
static int frame_fits(struct net *n, uint32_t partition, uint32_t flen)
{
	const unsigned *pl = replicas_of(n, partition);
	for (unsigned k = 0; k < n->replicas; k++) {
		const struct conn *c = &n->c[pl[k]];
		int ret = c->err ? 0 : too_big(c, flen);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Staged frames to partition's workers. A stage flush hands over up to
 * half the pool at once, many times a worker's window: waiting for
 * credit there would keep the worker idle while the stage fills and the
 * writer idle while the worker stores. They queue up to that much beyond
 * the window instead (the pool bounds them), and go out as credit comes
 * back, while the next records are staged. psync sends as it queues:
 * it waits for credit.
 */
static int staged_submit(struct net *n, struct ushi_buf *b, const uint8_t *at,
			 uint32_t len, uint32_t fmax, uint32_t partition)
{
	n->ahead = n->io == &net_io_ring ? n->w->pool->bytes / 2 : 0;
	int ret = replicas_submit(n, b, at, len, fmax, partition);
	n->ahead = 0;
	return ret;
}

/* Sends first worker g's pack, if it holds frames (else it goes idle). */
static int pack_send(struct net *n, unsigned g)
{
	struct npack *k = &n->pk[g];
	struct ushi_buf *b = k->b;
	if (!b)
		return 0;
	k->b = NULL;
	n->npk--;
	if (!k->len) {
		pool_put(n->w->pool, b);
		return 0;
	}
	buf_move(b, BUF_WRITER, BUF_INFLIGHT);
	n->w->inflight++;
	b->refs = n->replicas;
	return staged_submit(n, b, b->data, k->len, k->fmax, k->part);
}

/* Every open pack goes out. */
static int packs_send(struct net *n)
{
	int ret = 0;
	for (unsigned g = 0; n->npk && g < n->nc && !ret; g++)
		ret = pack_send(n, g);
	return ret;
}

/* Opens first worker g's pack for partition: waits for a buffer while
 * sends are in flight (a pack sent comes back). */
static int pack_open(struct net *n, unsigned g, uint32_t partition)
{
	struct ush_writer *w = n->w;
	struct ushi_buf *b;
	while (!(b = pool_get(w->pool, w->push_order))) {
		if (w->err)
			return w->err;
		if (!w->inflight) /* frames queued or sent come back */
			return ushi_fail(-ENOMEM, "net: the %zu KiB pool has "
					"no idle buffer to pack frames in and "
					"nothing in flight: release buffers "
					"taken with ush_writer_acquire() or "
					"raise ush_ring_opts.pool_bytes",
					w->pool->bytes >> 10);
		kick_all(n);
		int ret = reap_tick(n, STALL_TICK_NS);
		if (ret)
			return ret;
	}
	n->pk[g] = (struct npack){.b = b, .part = partition};
	n->npk++;
	return 0;
}

/* The stage's order of partitions (part_order): by first worker, in
 * partition order within each, so that a flush's frames for one worker
 * are built one after another (one open pack at a time, a span buffer
 * in few runs). One worker: NULL, partition order. */
static const uint32_t *net_part_order(struct ush_writer *w)
{
	return ((const struct net *)w->sink_state)->ord;
}

static int net_pack_room(struct ush_writer *w, uint32_t partition,
			 uint8_t **p, uint32_t *room)
{
	struct net *n = w->sink_state;
	unsigned g = first_of(n, partition);
	int ret = n->pk[g].b ? 0 : pack_open(n, g, partition);
	struct npack *k = &n->pk[g];
	*p = ret ? NULL : k->b->data + k->len;
	*room = ret ? 0 : k->b->cap - k->len;
	return ret;
}

static int net_pack_add(struct ush_writer *w, const uint8_t *p, uint32_t flen,
			uint32_t partition)
{
	struct net *n = w->sink_state;
	unsigned g = first_of(n, partition);
	struct npack *k = &n->pk[g];
	int ret = frame_fits(n, partition, flen);
	/* Built elsewhere and too large for the room left: the pack goes
	 * as it is, the frame starts the next one. */
	if (!ret && k->b && p != k->b->data + k->len &&
	    flen > k->b->cap - k->len)
		ret = pack_send(n, g);
	if (!ret && !k->b)
		ret = pack_open(n, g, partition);
	if (!ret && flen > k->b->cap - k->len)
		ret = ushi_fail(-EMSGSIZE, "net: a staged frame of %u bytes "
			       "in a pack of %u", flen, k->b->cap);
	if (ret)
		return ret;
	if (p != k->b->data + k->len)
		memcpy(k->b->data + k->len, p, flen);
	k->len += flen;
	k->fmax = flen > k->fmax ? flen : k->fmax;
	return k->len == k->b->cap ? pack_send(n, g) : 0;
}

/* Span buffer b's bytes [from, to) to first worker g, for partition:
 * its hold on b (b->refs) is released on error too. */
static int run_send(struct net *n, struct ushi_buf *b, uint32_t from,
		    uint32_t to, uint32_t fmax, uint32_t partition)
{
	return staged_submit(n, b, b->data + from, to - from, fmax,
			     partition);
}

static int net_span_put(struct ush_writer *w, struct ushi_buf *b, uint32_t len,
			const struct ushi_span_frame *fr, uint32_t nfr)
{
	struct net *n = w->sink_state;
	/* The packs hold earlier frames: they go first. */
	int ret = packs_send(n);
	for (uint32_t i = 0; !ret && i < nfr; i++)
		ret = frame_fits(n, fr[i].part, fr[i].flen);
	if (ret) {
		pool_put(w->pool, b);
		return ret;
	}
	/* Runs: the bytes before the first frame (the rest of the last
	 * buffer's last frame), then each frame of other workers than the
	 * one before it starts one. */
	uint32_t runs = nfr ? fr[0].at > 0 : 1;
	for (uint32_t i = 0; i < nfr; i++)
		runs += !i || first_of(n, fr[i].part) !=
			      first_of(n, fr[i - 1].part);
	buf_move(b, BUF_WRITER, BUF_INFLIGHT);
	w->inflight++;
	b->refs = runs * n->replicas;
	uint32_t from = 0, i = 0;
	if (!nfr || fr[0].at > 0) {
		uint32_t to = nfr ? fr[0].at : len;
		ret = run_send(n, b, 0, to, n->carry_flen, n->carry_part);
		from = to;
	}
	while (i < nfr) {
		unsigned g = first_of(n, fr[i].part);
		uint32_t j = i, fmax = 0;
		for (; j < nfr && first_of(n, fr[j].part) == g; j++)
			fmax = fr[j].flen > fmax ? fr[j].flen : fmax;
		uint32_t to = j < nfr ? fr[j].at : len;
		n->carry_part = fr[j - 1].part;
		n->carry_flen = fr[j - 1].flen;
		if (!ret)
			ret = run_send(n, b, from, to, fmax, fr[i].part);
		else /* not sent: each replica's hold goes */
			for (unsigned k = 0; k < n->replicas; k++)
				frame_done(n, b, NULL, 0);
		from = to;
		i = j;
	}
	return ret;
}

/* MAPPER_END to connection c, behind its data: the attempt is complete. */
static int send_mapper_end(struct net *n, struct conn *c)
{
	struct ush_writer *w = n->w;
	uint8_t *m = ushi_malloc(USHI_PROTO_SMALL);
	int ret = m ? 0 : -ENOMEM;
	size_t len = m ? proto_put_mapper_end(m, w->o.shuffle, w->o.map,
					      w->o.attempt) : 0;
	len = m ? mac_seal(&c->mac, m, len) : 0;
	if (!ret && c->qn == SEND_QUEUE)
		ret = n->io->wait(n, c, has_room, 0, "sends not taken within the "
			       "timeout (worker stalled?)");
	if (!ret)
		ret = c->err;
	if (ret) {
		ushi_free(m);
		return ushi_fail(ret, "net: worker %s: MAPPER_END", c->peer);
	}
	struct out o = {.addr = m, .len = (uint32_t)len, .ctrl = true};
	given(c, ushi_now_ns());
	ret = n->io->send(n, c, &o);
	if (ret)
		return ushi_fail(ret, "net: worker %s: MAPPER_END", c->peer);
	c->ended = true;
	return 0;
}

static bool acked(struct conn *c, uint32_t unused)
{
	(void)unused;
	return c->acked;
}

/* With replicas: the map status names, per partition, the workers that
 * acknowledged the commit; a partition with batches needs one. */
static int commit_holders(struct net *n)
{
	struct ush_writer *w = n->w;
	uint64_t *h = ushi_calloc(w->o.partitions, sizeof(*h));
	if (!h)
		return ushi_fail(-ENOMEM, "net: map status of %u partitions",
				w->o.partitions);
	int ret = 0;
	for (uint32_t p = 0; !ret && p < w->o.partitions; p++) {
		const unsigned *pl = replicas_of(n, p);
		for (unsigned k = 0; k < n->replicas; k++)
			if (n->c[pl[k]].acked)
				h[p] |= 1ull << pl[k];
		if (!h[p] && w->parts[p].st.batches)
			ret = gone(n, p);
	}
	if (!ret && writer_build_status(w, h))
		ret = ushi_fail(-ENOMEM, "writer: map status of %u partitions",
			       w->o.partitions);
	ushi_free(h);
	return ret;
}

static int net_commit(struct ush_writer *w)
{
	struct net *n = w->sink_state;
	bool rep = n->replicas > 1;
	int ret = packs_send(n); /* none open after the writer's flush */
	/* Every worker learns of the commit, even one without data of
	 * this map: a reader asks each for the attempt it was given. With
	 * replicas, a worker lost before or during the commit is skipped:
	 * the status will not name it. */
	for (unsigned i = 0; !ret && i < n->nc; i++) {
		struct conn *c = &n->c[i];
		int r = c->err ? c->err : send_mapper_end(n, c);
		if (!rep || !c->err)
			ret = r;
	}
	if (!ret)
		ret = ring_submit(w->ring);
	for (unsigned i = 0; !ret && i < n->nc; i++) {
		struct conn *c = &n->c[i];
		int r = n->io->wait(n, c, acked, 0, "no commit ACK within "
				    "the timeout (worker stalled?)");
		if (!rep || !c->err)
			ret = r;
	}
	for (unsigned i = 0; !ret && i < n->nc; i++) {
		if (!n->c[i].acked && rep)
			continue;
		if (n->c[i].status == USH_ECOMMITTED)
			ret = ushi_fail(USH_ECOMMITTED, "net: worker %s: map %u "
				       "attempt %u is committed already",
				       n->c[i].peer, w->o.map, w->o.attempt);
		else if (n->c[i].status)
			ret = ushi_fail(-EPROTO, "net: worker %s: commit ACK of "
				       "map %u with unknown status %d",
				       n->c[i].peer, w->o.map, n->c[i].status);
	}
	if (!ret && rep)
		ret = commit_holders(n);
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

static void net_release(struct ush_writer *w)
{
	if (w->sink_state)
		net_free(w->sink_state);
	w->sink_state = NULL;
}

const struct ushi_sink_ops ushi_sink_net = {
	.name = "net",
	.open = sink_net_open,
	.submit = net_submit,
	.commit = net_commit,
	.abort = net_abort,
	.release = net_release,
	.drain = net_drain,
	.flush = net_flush,
	.reap = net_reap,
	.pack_room = net_pack_room,
	.pack_add = net_pack_add,
	.span_put = net_span_put,
	.part_order = net_part_order,
};
