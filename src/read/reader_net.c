/*
 * One worker's stream: FETCH with the attempts wanted, then MANIFEST (or
 * an ERROR refusing), DATA..., FETCH_END. Frames are bounded before
 * anything is allocated and their CRC (the writer's, end to end) checked
 * here; the reader checks everything else against its map statuses.
 *
 * The stream is received in large blocking receives (net/sock.c says
 * why they block) into one buffer and frames are
 * parsed where they lie: the caller gets a pointer into it, valid until
 * the next call. Only the start of a frame that the buffer's end cut off
 * moves to the front (at most one frame per RECV_BUF received).
 *
 * A stream whose maps all have another replica to go on at waits for the
 * worker only for the stall window (net.h), from the time its receives
 * usually wait, not for timeout_ms: the socket's receive timeout follows
 * the window.
 *
 * The connection comes from the pool of idle ones (net/connpool.c) and
 * returns to it after FETCH_END, so that reading partition after
 * partition pays one handshake per worker, not one per partition.
 */
#include "net/net.h"
#include "read/reader_net.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

/* Receive buffer while the stream is read; a larger frame grows it to
 * the frame's size. All of a reader's streams are open at once but read
 * one after another: until its turn a stream holds a small one. */
#define RECV_BUF (2u << 20)
#define RECV_BUF_OPEN 4096u
/* Receive buffers of RECV_BUF bytes kept for the next stream when one
 * ends: reading partition after partition, one reader each, a process
 * would otherwise allocate (and fault in) a new one per partition. */
#define RECV_KEEP 4u

static struct {
	pthread_mutex_t lock;
	uint8_t *b[RECV_KEEP];
	unsigned n;
} kept = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A RECV_BUF buffer: one kept, or a new one (counted). The lock is only
 * tried: a fork() child whose parent held it, or a busy moment, just
 * allocates (or frees, below). */
static uint8_t *recv_take(void)
{
	uint8_t *b = NULL;
	if (!pthread_mutex_trylock(&kept.lock)) {
		if (kept.n)
			b = kept.b[--kept.n];
		pthread_mutex_unlock(&kept.lock);
	}
	if (!b && (b = ushi_malloc(RECV_BUF)))
		USHI_COUNT(net_recv_bufs, 1);
	return b;
}

/* Buffer b of cap bytes is free: kept if it is a RECV_BUF one and there
 * is room. */
static void recv_give(uint8_t *b, size_t cap)
{
	if (b && cap == RECV_BUF && !pthread_mutex_trylock(&kept.lock)) {
		if (kept.n < RECV_KEEP) {
			kept.b[kept.n++] = b;
			b = NULL;
		}
		pthread_mutex_unlock(&kept.lock);
	}
	ushi_free(b);
}

struct reader_net {
	struct net_conn *conn; /* until the stream ended: then pooled */
	int refused;           /* the worker's ERROR code answering FETCH */
	char peer[USHI_NET_PEER];
	char where[USHI_NET_PEER + 48];
	uint32_t shuffle, partition, count; /* [partition, +count) */
	uint8_t *buf;   /* received bytes: [pos, len) not yet parsed */
	size_t cap, pos, len;
	uint64_t off;    /* stream bytes read */
	uint64_t at;     /* stream offset of the last frame read */
	uint64_t frames; /* DATA frames read */
	uint64_t bytes;  /* ... and their bytes */
	struct ushi_frame held; /* the frame ungot, while held */
	const uint8_t *held_at;
	bool hold, ended;
	bool replica;    /* another replica can go on: stall window */
	uint32_t timeout_ms, rcv_ms; /* the socket's receive timeout */
	struct ushi_pace pace;       /* how long receives wait */
};

const char *reader_net_where(struct reader_net *r)
{
	snprintf(r->where, sizeof(r->where), "worker %s offset %llu", r->peer,
		 (unsigned long long)r->at);
	return r->where;
}

const char *reader_net_peer(const struct reader_net *r)
{
	return r->peer;
}

uint64_t reader_net_at(const struct reader_net *r)
{
	return r->at;
}

/* Fails on the frame last read, naming where it starts. */
static int fail_at(struct reader_net *r, int err, const char *what)
{
	if (r->count == 1)
		return ushi_fail(err, "reader: %s partition %u: %s",
				reader_net_where(r), r->partition, what);
	return ushi_fail(err, "reader: %s partitions %u..%u: %s",
			reader_net_where(r), r->partition,
			r->partition + r->count - 1, what);
}

/* A buffer of cap bytes with the unparsed bytes at its front. */
static int resize(struct reader_net *r, size_t cap)
{
	size_t have = r->len - r->pos;
	uint8_t *b = cap == RECV_BUF ? recv_take() : ushi_malloc(cap);
	if (!b)
		return -ENOMEM;
	memcpy(b, r->buf + r->pos, have);
	recv_give(r->buf, r->cap);
	r->buf = b;
	r->cap = cap;
	r->pos = 0;
	r->len = have;
	return 0;
}

/* A receive waited waited_ns for data: the receive timeout follows the
 * stall window, set again when it moved by 100 ms or more. */
static void pace(struct reader_net *r, uint64_t waited_ns)
{
	pace_sample(&r->pace, waited_ns);
	uint32_t ms = pace_window_ms(r->pace.gap_ns, r->timeout_ms);
	if (ms + 100 > r->rcv_ms && ms < r->rcv_ms + 100)
		return;
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	if (!setsockopt(r->conn->fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
			sizeof(tv)))
		r->rcv_ms = ms;
	r->conn->timeout_ms = 0; /* the next reader sets its own */
}

/* Makes [pos, pos + n) received: moves the unparsed bytes to the front
 * when n does not fit behind pos, grows the buffer when n exceeds it,
 * and receives as much as the socket holds, at least up to n. */
static int fill(struct reader_net *r, size_t n)
{
	if (r->len - r->pos >= n)
		return 0;
	if (n > r->cap) {
		int ret = resize(r, n);
		if (ret)
			return ret;
	} else if (r->cap - r->pos < n) {
		r->len -= r->pos;
		memmove(r->buf, r->buf + r->pos, r->len);
		r->pos = 0;
	}
	while (r->len - r->pos < n) {
		uint64_t t0 = r->replica ? ushi_now_ns() : 0;
		int got = net_recv(r->conn->fd, r->buf + r->len,
				   r->cap - r->len);
		if (got < 0)
			return got;
		if (r->replica)
			pace(r, ushi_now_ns() - t0);
		r->len += (size_t)got;
	}
	return 0;
}

/* Parses the next whole frame in place, bounded before anything is
 * allocated: by the format's limit, not the worker's max_frame, which
 * bounds what it accepts now and may have been larger when the frames
 * were stored. */
static int read_frame(struct reader_net *r, struct ushi_frame *f,
		      const uint8_t **frame)
{
	const char *why = "";
	r->at = r->off;
	int ret = fill(r, USH_FRAME_HDR_SIZE);
	if (!ret)
		ret = proto_header(r->buf + r->pos, f, USHI_FRAME_MAX, false,
				   &why);
	if (!ret)
		ret = fill(r, proto_size(f));
	if (ret == -EPIPE)
		why = "the worker closed the stream";
	if (ret == -ETIMEDOUT)
		why = r->replica ? "the worker sent nothing in the stall "
				   "window (stalled?)" :
				   "the worker sent nothing within the timeout";
	if (!ret && frame_check(r->buf + r->pos, f))
		ret = USH_ECRC, why = "frame CRC32C mismatch";
	size_t size = ret ? 0 : proto_size(f);
	if (!ret)
		ret = mac_open(&r->conn->mac, r->buf + r->pos, f, &why);
	if (ret)
		return fail_at(r, ret, *why ? why : ush_strerror(ret));
	*frame = r->buf + r->pos;
	r->pos += size;
	r->off += size;
	return 0;
}

/* The worker's ERROR frame: its code, the stream failed with its
 * message. */
static int worker_error(struct reader_net *r, const struct ushi_frame *f,
			const uint8_t *frame)
{
	char msg[USHI_PROTO_ERRMSG_MAX];
	int code = proto_get_error(frame + USH_FRAME_HDR_SIZE, f->payload_len,
				   msg, sizeof(msg));
	return fail_at(r, code, msg);
}

/* The worker's answer to FETCH: MANIFEST, or an ERROR saying why not. */
static int accepted(struct reader_net *r)
{
	struct ushi_frame f;
	const uint8_t *frame;
	int ret = read_frame(r, &f, &frame);
	if (ret)
		return ret;
	if (f.type == USHI_FRAME_ERROR)
		return r->refused = worker_error(r, &f, frame);
	if (f.type != USHI_FRAME_MANIFEST || f.shuffle != r->shuffle ||
	    f.partition != r->partition)
		return fail_at(r, -EPROTO, "expected the MANIFEST");
	return 0;
}

/*
 * Whether FETCH failed on a pooled connection that the worker had closed
 * meanwhile (its idle timeout, its shutdown, a restart): no answer, or
 * the ERROR of that close, rather than an answer to the FETCH. Then the
 * FETCH goes once more on a new connection.
 */
static bool stale(const struct reader_net *r, int err)
{
	if (!r->conn->reused)
		return false;
	if (r->refused)
		return r->refused == -ETIMEDOUT || r->refused == -ESHUTDOWN;
	return err == -EPIPE || err == -ECONNRESET;
}

/* Sends FETCH of the n attempts w (b: room for it and its tag) on a
 * pooled connection or a new one, and reads the worker's answer; a pooled
 * one found closed is replaced once. The frame is encoded per connection:
 * its MAC is that connection's. */
static int fetch(struct reader_net *r, const char *app, uint8_t *b,
		 const struct proto_want *w, uint32_t n)
{
	struct proto_hello me = {.role = USHI_ROLE_READER};
	snprintf(me.app, sizeof(me.app), "%s", app);
	for (bool pooled = true;; pooled = false) {
		int ret = net_conn_take(&r->conn, r->peer, &me, r->rcv_ms,
					pooled);
		if (ret)
			return ret;
		size_t len = proto_put_fetch(b, r->shuffle, r->partition,
					     r->count, 0, w, n);
		ret = net_send_ctrl(r->conn->fd, &r->conn->mac, b, len);
		if (ret)
			ret = fail_at(r, ret, "sending FETCH");
		else
			ret = accepted(r);
		if (!ret || !stale(r, ret))
			return ret;
		net_conn_free(r->conn);
		r->conn = NULL;
		r->refused = 0;
		r->pos = r->len = 0;
		r->off = r->at = 0;
	}
}

int reader_net_open(struct reader_net **out, const char *peer,
		    const char *app, uint32_t shuffle, uint32_t first,
		    uint32_t count, const struct proto_want *w, uint32_t n,
		    uint32_t timeout_ms, bool replica)
{
	*out = NULL;
	if (n > USHI_PROTO_WANTS_MAX)
		return ushi_fail(-E2BIG, "reader: %u maps from worker %s "
				"exceed one FETCH (%u)", n, peer,
				(unsigned)USHI_PROTO_WANTS_MAX);
	struct reader_net *r = ushi_calloc(1, sizeof(*r));
	uint8_t *b = ushi_malloc(proto_fetch_size(n) + USHI_MAC_TAG);
	if (r) {
		r->cap = RECV_BUF_OPEN;
		r->buf = ushi_malloc(r->cap);
	}
	if (!r || !b || !r->buf) {
		reader_net_free(r);
		ushi_free(b);
		return ushi_fail(-ENOMEM, "reader: FETCH of %u maps", n);
	}
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	r->shuffle = shuffle;
	r->partition = first;
	r->count = count;
	r->replica = replica;
	r->timeout_ms = timeout_ms;
	/* Nothing observed yet: the longest stall window. */
	r->rcv_ms = replica ? pace_longest_ms(timeout_ms) : timeout_ms;
	int ret = fetch(r, app, b, w, n);
	ushi_free(b);
	if (ret < 0) {
		reader_net_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

int reader_net_frame(struct reader_net *r, struct ushi_frame *f,
		     const uint8_t **frame)
{
	if (r->hold) {
		r->hold = false;
		*f = r->held;
		*frame = r->held_at;
		return 1;
	}
	if (r->ended)
		return 0;
	int ret = r->cap < RECV_BUF ? resize(r, RECV_BUF) : 0;
	if (ret)
		return fail_at(r, ret, "receive buffer");
	ret = read_frame(r, f, frame);
	if (ret)
		return ret;
	if (f->type == USHI_FRAME_FETCH_END) {
		uint64_t bytes = get_le64(*frame + USH_FRAME_HDR_SIZE);
		if (f->seq != r->frames || bytes != r->bytes)
			return fail_at(r, USH_ECORRUPT, "FETCH_END disagrees "
				       "with the frames received");
		/* The stream is over and nothing follows it: the
		 * connection can carry the next FETCH. */
		if (r->pos == r->len)
			net_conn_put(r->conn);
		else
			net_conn_free(r->conn);
		r->conn = NULL;
		r->ended = true;
		return 0;
	}
	/* A stream the worker fails (a read error, a log cut short). */
	if (f->type == USHI_FRAME_ERROR)
		return worker_error(r, f, *frame);
	if (f->type != USHI_FRAME_DATA) {
		char what[40];
		snprintf(what, sizeof(what), "unexpected frame type %u",
			 f->type);
		return fail_at(r, -EPROTO, what);
	}
	r->frames++;
	r->bytes += proto_size(f);
	if (f->shuffle != r->shuffle || f->partition - r->partition >= r->count)
		return fail_at(r, USH_ECORRUPT, "frame of another shuffle or "
			       "partition");
	r->held = *f;
	r->held_at = *frame;
	return 1;
}

void reader_net_unget(struct reader_net *r)
{
	r->hold = true;
}

void reader_net_free(struct reader_net *r)
{
	if (!r)
		return;
	/* Freed before its FETCH_END: the rest of the stream is on its
	 * way, the connection is not reused. */
	net_conn_free(r->conn);
	recv_give(r->buf, r->cap);
	ushi_free(r);
}
