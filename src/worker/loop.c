/*
 * A worker thread: its ring, its provided-buffer ring, multishot accept
 * on its own SO_REUSEPORT listener, a recv per connection (into a
 * provided buffer, or a writer's own: conn.c). The
 * loop reaps, then lets each connection parse what arrived and send what
 * it owes, and enforces the limits of docs/protocol.md §7: connections
 * held (refused beyond with an ERROR), HELLO and idle timeouts, accept
 * errors backed off. On stop it drains: no more accepts, connections
 * told the worker is shutting down once nothing is under way on them (or
 * at the drain's deadline), then flush buffers written, files synced.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/conn.h"
#include "worker/dispatch.h"
#include "worker/fetch.h"
#include "worker/inplace.h"
#include "worker/loop.h"
#include "worker/out.h"
#include "worker/state.h"
#include "worker/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define TICK_NS 100000000ull /* how soon a stop request is noticed */
#define MS 1000000ull

/* A connection over the limits gets an ERROR frame on its fresh socket
 * (which has room for it), what it already sent is read so that the
 * close is a FIN rather than a reset, and it is closed. */
static void refuse(struct wk_thread *t, int fd, int code, const char *msg)
{
	uint8_t frame[USHI_PROTO_ERROR_SIZE];
	send(fd, frame, proto_put_error(frame, code, msg),
	     MSG_DONTWAIT | MSG_NOSIGNAL);
	shutdown(fd, SHUT_WR);
	uint8_t sink[4096];
	for (int i = 0; i < 16 && recv(fd, sink, sizeof(sink),
				       MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
	WK_COUNT(t->wk, refused, 1);
	wk_count_error(t->wk, code);
	wk_log(t->wk, 1, "refused a connection: %s", msg);
}

/* Marks up to want of t's oldest connections that have not authenticated
 * (no HELLO accepted) to be closed (conn_reap() closes them): first those
 * that have not said HELLO (a flood's), then those challenged that have
 * not answered yet (an honest client's handshake is a round trip);
 * returns how many. */
static unsigned shed_oldest(struct wk_thread *t, unsigned want)
{
	unsigned k = 0;
	for (; k < want; k++) {
		/* The list is newest first: the last one is the oldest. */
		struct wk_conn *old = NULL, *old_hello = NULL;
		for (struct wk_conn *c = t->conns; c; c = c->next) {
			if (c->role || c->eof || c->closed || c->shed)
				continue;
			if (c->auth_wait)
				old_hello = c;
			else
				old = c;
		}
		old = old ? old : old_hello;
		if (!old)
			break;
		old->shed = old->eof = true;
		t->nshed++;
		atomic_fetch_add(&t->wk->nshed, 1);
	}
	WK_COUNT(t->wk, refused, k);
	return k;
}

/*
 * accept ran out of descriptors (what the budget leaves was taken by
 * something else): the thread closes a quarter of its connections that
 * have not authenticated, 1 to WK_SHED_MAX, so that clients that prove
 * their secret are served. Nothing more while those are still closing.
 * Returns how many it closes, -1 when some are still closing.
 */
static int shed(struct wk_thread *t)
{
	unsigned pre = 0;
	for (struct wk_conn *c = t->conns; c; c = c->next) {
		if (c->shed && !c->closed)
			return -1;
		pre += !c->role && !c->eof && !c->closed;
	}
	unsigned want = pre / 4 ? pre / 4 : pre;
	want = shed_oldest(t, want < WK_SHED_MAX ? want : WK_SHED_MAX);
	if (want)
		wk_log(t->wk, 0, "thread %u: out of descriptors: closing the %u "
		       "oldest of its %u connections that have not "
		       "authenticated", t->idx, want, pre);
	return (int)want;
}

/*
 * Past the descriptors the budget leaves for connections (wk->conn_fds),
 * a new connection takes the place of its thread's oldest one that has
 * not authenticated: a flood of silent connections cannot keep honest
 * clients out, nor take the descriptors log and index files need. A
 * thread can close only its own connections: one with none to close
 * still takes its share of the budget, since a flood past the budget on
 * the other threads is theirs to shed (as they accept it). Decided in
 * the loop, in the order of the accepts (an accept's burst may bring
 * many at once), so that the newest connection is the last to go. False:
 * the thread is past its share with nothing to close.
 */
static bool room_for_one(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	unsigned live = atomic_load(&wk->nconns) - atomic_load(&wk->nshed);
	if (live <= wk->conn_fds)
		return true;
	if (shed_oldest(t, 1)) {
		wk_log(wk, 1, "thread %u: past the %u connections the "
		       "descriptor limit leaves room for: closing the oldest "
		       "connection that has not authenticated", t->idx,
		       wk->conn_fds);
		return true;
	}
	return t->nconns - t->nshed < wk->conn_fds / wk->nthreads;
}

static void on_accept(struct ushi_op *op, int res)
{
	struct wk_thread *t = op->owner;
	struct ush_worker *wk = t->wk;
	if (!(op->cqe_flags & IORING_CQE_F_MORE))
		t->accept_armed = false;
	if (res == -EINVAL || res == -ECANCELED)
		return; /* the listener shut down: stopping */
	int gone = res == -EMFILE || res == -ENFILE ? shed(t) : 0;
	if (gone) {
		/* Accept again once the closes are done (a loop pass or
		 * two), without the backoff. */
		t->accept_resume = ushi_now_ns() + MS;
		return;
	}
	if (res < 0) {
		/* Out of descriptors or memory: accepting again at once
		 * fails again at once. A peer that gave up costs nothing. */
		unsigned b = t->accept_backoff_ms;
		if (res != -ECONNABORTED) {
			b = b ? 2 * b : WK_ACCEPT_BACKOFF_MIN_MS;
			b = b < WK_ACCEPT_BACKOFF_MAX_MS ? b :
							   WK_ACCEPT_BACKOFF_MAX_MS;
			t->accept_backoff_ms = b;
			t->accept_resume = ushi_now_ns() + b * MS;
		}
		wk_log(wk, 0, "thread %u: accept: %s; accepting again in %u ms",
		       t->idx, ush_strerror(res), b);
		return;
	}
	t->accept_backoff_ms = 0;
	char msg[96];
	unsigned n = atomic_fetch_add(&wk->nconns, 1);
	/* accepted[] holds thread_conns; those before accepted_next are
	 * set up (or refused) already. */
	if (n < wk->o.max_conns && t->naccepted < wk->thread_conns &&
	    t->nconns + t->naccepted - t->accepted_next < wk->thread_conns) {
		/* Set up in the loop: a callback never takes ops. */
		t->accepted[t->naccepted++] = res;
		WK_COUNT(wk, accepted, 1);
		return;
	}
	atomic_fetch_sub(&wk->nconns, 1);
	if (n >= wk->o.max_conns)
		snprintf(msg, sizeof(msg), "worker at its connection limit "
			 "(%u)", wk->o.max_conns);
	else
		snprintf(msg, sizeof(msg), "worker thread %u at its "
			 "connection limit (%u)", t->idx, wk->thread_conns);
	refuse(t, res, -EBUSY, msg);
}

static void on_recv(struct ushi_op *op, int res)
{
	struct wk_conn *c = op->owner;
	if (!(op->cqe_flags & IORING_CQE_F_MORE))
		c->recv_armed = false;
	if (res > 0 && op->kind == OP_RECV) {
		c->rlen += (uint32_t)res;
		c->rgot = true;
		WK_COUNT(c->t->wk, bytes_in, (unsigned)res);
	} else if (res > 0 && (op->cqe_flags & IORING_CQE_F_BUFFER)) {
		/* Input counts as activity when it is processed (the loop). */
		unsigned i = (c->qhead + c->qn) % WK_BUFS;
		c->q[i].bid = (uint16_t)(op->cqe_flags >> IORING_CQE_BUFFER_SHIFT);
		c->q[i].len = (uint32_t)res;
		c->qn++;
		WK_COUNT(c->t->wk, bytes_in, (unsigned)res);
	} else if (res == 0) {
		c->eof = true;
	} else if (res < 0 && res != -ENOBUFS) {
		/* -ENOBUFS: all buffers queued; re-armed once processed. */
		c->eof = true;
		c->rerr = res;
	}
}

/* The committer handed commits back (wk_group_take() reads them). */
static void on_wake(struct ushi_op *op, int res)
{
	op->arm.rearm = res > 0;
}

static int arm_wake(struct wk_thread *t)
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		       0, t->wake))
		return ushi_fail(-errno, "worker: socketpair");
	struct ushi_op *op;
	int ret = ring_op_get(t->ring, &op);
	if (ret)
		return ret;
	op->kind = OP_RECV;
	op->cb = on_wake;
	op->owner = t;
	op->arm.fd = t->wake[0];
	op->arm.addr = t->wake_buf;
	op->arm.len = sizeof(t->wake_buf);
	ring_arm(t->ring, op);
	return 0;
}

/* Commits back from the committer: acknowledged, or failed. */
static void commits_logged(struct wk_thread *t)
{
	struct wk_logreq *q = wk_group_take(t), *next;
	for (; q; q = next) {
		next = q->next;
		wk_commit_logged(q->owner, q->res);
	}
}

static int arm_accept(struct wk_thread *t)
{
	struct ushi_op *op;
	int ret = ring_op_get(t->ring, &op);
	if (ret)
		return ret;
	op->kind = OP_ACCEPT_MS;
	op->cb = on_accept;
	op->owner = t;
	op->arm.fd = t->lfd;
	ring_arm(t->ring, op);
	t->accept_armed = true;
	return 0;
}

static int arm_recv(struct wk_conn *c)
{
	struct ushi_op *op;
	int ret = ring_op_get(c->t->ring, &op);
	if (ret)
		return ret;
	wk_conn_rb_arm(c);
	op->cb = on_recv;
	op->owner = c;
	op->arm.fd = c->fd;
	if (c->rb) {
		op->kind = OP_RECV;
		op->arm.addr = c->rb->data + c->rlen;
		op->arm.len = c->rb->cap - c->rlen;
	} else {
		/* A reader's stays armed; one that may become a writer's
		 * (or gets a buffer later) receives once at a time. */
		op->kind = OP_RECV_MS;
		op->arm.bgid = WK_BGID;
		op->arm.once = c->role != USHI_ROLE_READER &&
			       c->role != USHI_ROLE_ADMIN;
	}
	ring_arm(c->t->ring, op);
	c->recv_armed = true;
	return 0;
}

static void conn_new(struct wk_thread *t, int fd)
{
	struct wk_conn *c = ushi_calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		atomic_fetch_sub(&t->wk->nconns, 1);
		return;
	}
	c->t = t;
	c->fd = fd;
	c->id = atomic_fetch_add(&t->wk->next_conn_id, 1) + 1;
	c->t_accept = c->t_active = ushi_now_ns();
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;
	if (!getpeername(fd, (struct sockaddr *)&ss, &sl)) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *a = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
			port = ntohs(a->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
			port = ntohs(a->sin6_port);
		}
	}
	snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (arm_recv(c)) {
		close(fd);
		ushi_free(c);
		atomic_fetch_sub(&t->wk->nconns, 1);
		return;
	}
	c->next = t->conns;
	t->conns = c;
	t->nconns++;
	wk_log(t->wk, 2, "peer %s: connected (thread %u)", c->peer, t->idx);
}

/* Closes finished connections; frees them once no op refers to them. A
 * failed one, once its ERROR is out, half-closes and lingers: it reads
 * until the peer closes, or for WK_LINGER_MS. */
static void conn_reap(struct wk_thread *t, uint64_t now)
{
	for (struct wk_conn **cp = &t->conns; *cp;) {
		struct wk_conn *c = *cp;
		bool sent = c->failed && !c->out.head && !c->sending;
		if (sent && !c->t_linger && !c->eof) {
			shutdown(c->fd, SHUT_WR);
			c->t_linger = now + WK_LINGER_MS * MS;
		}
		bool done = c->eof || (sent && now > c->t_linger);
		/* A commit with the committer keeps c until it is back. */
		if (done && !c->closed && wk_conn_leave(c)) {
			shutdown(c->fd, SHUT_RDWR);
			c->closed = true;
		}
		if (!c->closed || c->recv_armed || c->sending || c->qn ||
		    wk_fetch_busy(c->fetch)) {
			cp = &c->next;
			continue;
		}
		*cp = c->next;
		close(c->fd);
		wk_outq_free(t, &c->out);
		wk_fetch_free(c->fetch);
		wk_conn_rb_free(c);
		ushi_free(c->rent);
		ushi_free(c->stage);
		mac_free(&c->mac);
		explicit_bzero(c->keys, sizeof(c->keys));
		t->nshed -= c->shed;
		atomic_fetch_sub(&t->wk->nshed, c->shed);
		ushi_free(c);
		t->nconns--;
		atomic_fetch_sub(&t->wk->nconns, 1);
	}
}

static int setup(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.iodepth = WK_IODEPTH + 2 * wk->thread_conns;
	ro.push_size = wk->o.flush_size;
	ro.pool_bytes = ALIGN_UP(wk->o.pool_bytes, (size_t)wk->o.flush_size);
	int ret = ush_ring_create(&t->ring, &ro);
	if (ret)
		return ret;
	t->flush_order = ring_pool(t->ring)->max_order;
	t->accepted = ushi_calloc(wk->thread_conns, sizeof(*t->accepted));
	/* The provided buffers and the ring of their descriptors. */
	t->br_bytes = WK_BUFS * sizeof(struct io_uring_buf);
	t->br = mmap(NULL, t->br_bytes, PROT_READ | PROT_WRITE,
		     MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	t->bufs = ushi_aligned_alloc((size_t)WK_BUFS * WK_BUF_SIZE);
	if (t->br == MAP_FAILED || !t->bufs || !t->accepted) {
		if (t->br == MAP_FAILED)
			t->br = NULL;
		return ushi_fail(-ENOMEM, "worker: recv buffers");
	}
	struct io_uring_buf_reg reg = {
		.ring_addr = (unsigned long)t->br,
		.ring_entries = WK_BUFS,
		.bgid = WK_BGID,
	};
	ret = ring_register_buf_ring(t->ring, &reg);
	if (ret)
		return ushi_fail(ret, "worker: io_uring_register_buf_ring");
	io_uring_buf_ring_init(t->br);
	for (unsigned i = 0; i < WK_BUFS; i++)
		io_uring_buf_ring_add(t->br, t->bufs + (size_t)i * WK_BUF_SIZE,
				      WK_BUF_SIZE, (unsigned short)i,
				      io_uring_buf_ring_mask(WK_BUFS), (int)i);
	io_uring_buf_ring_advance(t->br, WK_BUFS);
	ret = arm_wake(t);
	if (!ret)
		ret = arm_accept(t);
	atomic_store(&t->drop_seen, atomic_load(&wk->drop_epoch));
	return ret;
}

static void teardown(struct wk_thread *t)
{
	/* The committer may still hold requests that point into this
	 * thread's connections. */
	wk_group_quiesce(t);
	if (t->ring) {
		wk_store_close(t);
		wk_pdir_close(t);
		ring_drain(t->ring);
		ush_ring_free(t->ring);
		t->ring = NULL;
	}
	if (t->br)
		munmap(t->br, t->br_bytes);
	ushi_free(t->bufs);
	ushi_free(t->accepted);
	wk_hbuf_close(t); /* after the ring: no read or send holds one */
	for (int i = 0; i < 2; i++)
		if (t->wake[i] >= 0)
			close(t->wake[i]);
}

void wk_thread_check_drops(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	unsigned e = atomic_load(&wk->drop_epoch), seen;
	while ((seen = atomic_load(&t->drop_seen)) != e) {
		pthread_mutex_lock(&wk->lock);
		uint32_t s = wk->drops[seen - wk->drops_base];
		pthread_mutex_unlock(&wk->lock);
		wk_store_drop(t, s);
		wk_pdir_drop(t, s);
		atomic_store(&t->drop_seen, seen + 1);
	}
}

static bool drained(struct wk_thread *t)
{
	return !t->conns && !t->accept_armed && !t->naccepted;
}

/* ush_worker_stop(): no more accepts; conn_timeouts() does the rest. */
static void drain_start(struct wk_thread *t, uint64_t now)
{
	struct ush_worker *wk = t->wk;
	t->stopping = true;
	t->drain_end = now + wk->o.drain_timeout_ms * MS;
	shutdown(t->lfd, SHUT_RDWR); /* wakes the armed accept: -EINVAL */
	unsigned busy = 0;
	for (struct wk_conn *c = t->conns; c; c = c->next)
		busy += !c->failed && !c->eof && wk_conn_busy(c);
	wk_log(wk, 1, "thread %u: shutting down: %u of %u connections "
	       "under way may finish within %u ms", t->idx, busy, t->nconns,
	       wk->o.drain_timeout_ms);
}

/* What a connection may not outlast: the HELLO and idle timeouts, and a
 * drain. Silent connections must not pin a recv op and a slot forever;
 * one with output pending is not idle (the send's own timeout bounds a
 * peer that stops reading). */
static void conn_timeouts(struct wk_thread *t, struct wk_conn *c, uint64_t now)
{
	const struct ush_worker_opts *o = &t->wk->o;
	if (t->stopping && now > t->drain_end + 2 * WK_LINGER_MS * MS)
		c->eof = true; /* told, and lingered: close whatever is left */
	if (c->failed || c->eof)
		return;
	if (t->stopping && (now >= t->drain_end || !wk_conn_busy(c)))
		wk_conn_close_with(c, -ESHUTDOWN, "worker shutting down");
	else if (!c->role && c->t_accept + o->hello_timeout_ms * MS < now &&
		 c->auth_wait) /* challenged: it did not prove its secret */
		wk_conn_fail(c, -EACCES, "authentication failed: the client of "
			     "application '%s' sent no AUTH within %u ms",
			     c->app, o->hello_timeout_ms);
	else if (!c->role && c->t_accept + o->hello_timeout_ms * MS < now)
		wk_conn_fail(c, -ETIMEDOUT, "no HELLO within %u ms",
			     o->hello_timeout_ms);
	else if (c->role && !c->out.head && !c->sending && !c->fetch &&
		 !c->cm_step && c->t_active + o->idle_timeout_ms * MS < now)
		wk_conn_close_with(c, -ETIMEDOUT, "idle for %u ms",
				   o->idle_timeout_ms);
}

void *wk_thread_main(void *arg)
{
	struct wk_thread *t = arg;
	struct ush_worker *wk = t->wk;
	int ret = setup(t);
	if (ret)
		snprintf(t->errmsg, sizeof(t->errmsg), "%s", ush_last_error());
	t->err = ret;
	atomic_store(&t->ready, ret ? -1 : 1);
	unsigned stop_ticks = 0;
	while (!ret) {
		uint64_t now = ushi_now_ns();
		atomic_store_explicit(&t->pass_ns, now, memory_order_relaxed);
		if (!t->stopping && atomic_load(&wk->stop))
			drain_start(t, now);
		/* An accept that backs off wakes the loop when it may resume. */
		uint64_t wait = TICK_NS;
		if (!t->stopping && !t->accept_armed && t->accept_resume > now &&
		    t->accept_resume - now < wait)
			wait = t->accept_resume - now;
		int r = ring_reap_timeout(t->ring, 1, wait);
		if (r && r != -ETIME) {
			ret = r;
			break;
		}
		wk_thread_check_drops(t);
		wk_store_sync_pump(t);
		commits_logged(t);
		/* One thread checks the applications' TTLs, once a second. */
		if (t->idx == 0 && !t->stopping &&
		    ushi_now_ns() - t->expire_ns > 1000000000ull) {
			t->expire_ns = ushi_now_ns();
			wk_app_expire(t);
		}
		if (t->idx == 0 && !t->stopping && atomic_load(&wk->decom))
			wk_decommission_pass(t);
		for (; t->accepted_next < t->naccepted; t->accepted_next++) {
			int fd = t->accepted[t->accepted_next];
			if (!t->stopping && room_for_one(t)) {
				conn_new(t, fd);
				continue;
			}
			char msg[160] = "worker shutting down";
			if (!t->stopping)
				snprintf(msg, sizeof(msg), "worker thread %u at "
					 "its share of the %u connections "
					 "RLIMIT_NOFILE leaves room for, all "
					 "authenticated (raise the worker's "
					 "LimitNOFILE)", t->idx, wk->conn_fds);
			atomic_fetch_sub(&wk->nconns, 1);
			refuse(t, fd, t->stopping ? -ESHUTDOWN : -EBUSY, msg);
		}
		t->naccepted = t->accepted_next = 0;
		now = ushi_now_ns();
		for (struct wk_conn *c = t->conns; c; c = c->next) {
			if (c->qn || c->rgot)
				c->t_active = now;
			wk_commit_pump(c);
			wk_conn_process(c);
			conn_timeouts(t, c, now);
			/* A failed connection reads on (and drops) until its
			 * peer closes: see conn_reap(). */
			if (!c->recv_armed && !c->eof && !c->closed &&
			    arm_recv(c))
				c->eof = true;
			wk_conn_pump(c);
		}
		conn_reap(t, now);
		wk_log_flush(wk);
		if (!t->stopping && !t->accept_armed && now >= t->accept_resume)
			ret = arm_accept(t);
		if (t->stopping && drained(t))
			break;
		/* A listener whose accept does not wake on shutdown must not
		 * hold the exit up: the ring's exit cancels it. */
		if (t->stopping && !t->conns && ++stop_ticks > 20)
			break;
	}
	if (ret) {
		wk_log(wk, 0, "thread %u: %s; the thread stops", t->idx,
		       ush_last_error());
		wk_count_error(wk, ret);
	}
	int sret = t->ring ? wk_store_sync(t) : 0;
	if (sret && !ret)
		wk_log(wk, 0, "thread %u: final sync: %s", t->idx,
		       ush_strerror(sret));
	t->err = ret ? ret : sret;
	teardown(t);
	return NULL;
}
