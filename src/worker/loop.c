/*
 * A worker thread: its ring, its provided-buffer ring, multishot accept
 * on its own SO_REUSEPORT listener, multishot recv per connection. The
 * loop reaps, then lets each connection parse what arrived and send what
 * it owes. On stop: no more accepts, connections closed, flush buffers
 * written, files synced.
 */
#define _GNU_SOURCE
#include "worker/wk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define TICK_NS 100000000ull /* how soon a stop request is noticed */

static void on_accept(struct ushi_op *op, int res)
{
	struct wk_thread *t = op->owner;
	if (!(op->cqe_flags & IORING_CQE_F_MORE))
		t->accept_armed = false;
	if (res < 0) {
		if (res != -EINVAL && res != -ECANCELED)
			wk_log(t->wk, 1, "accept: %s", ush_strerror(res));
		return;
	}
	/* Set up in the loop: a callback never takes ops. */
	if (t->naccepted + t->nconns < WK_MAX_CONNS) {
		t->accepted[t->naccepted++] = res;
	} else {
		wk_log(t->wk, 0, "thread %u: %u connections, refusing more",
		       t->idx, WK_MAX_CONNS);
		close(res);
	}
}

static void on_recv(struct ushi_op *op, int res)
{
	struct wk_conn *c = op->owner;
	if (!(op->cqe_flags & IORING_CQE_F_MORE))
		c->recv_armed = false;
	if (res > 0 && (op->cqe_flags & IORING_CQE_F_BUFFER)) {
		unsigned i = (c->qhead + c->qn) % WK_BUFS;
		c->q[i].bid = (uint16_t)(op->cqe_flags >> IORING_CQE_BUFFER_SHIFT);
		c->q[i].len = (uint32_t)res;
		c->qn++;
	} else if (res == 0) {
		c->eof = true;
	} else if (res < 0 && res != -ENOBUFS) {
		/* -ENOBUFS: all buffers queued; re-armed once processed. */
		c->eof = true;
		c->rerr = res;
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
	op->kind = OP_RECV_MS;
	op->cb = on_recv;
	op->owner = c;
	op->arm.fd = c->fd;
	op->arm.bgid = WK_BGID;
	ring_arm(c->t->ring, op);
	c->recv_armed = true;
	return 0;
}

static void conn_new(struct wk_thread *t, int fd)
{
	struct wk_conn *c = ushi_calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->t = t;
	c->fd = fd;
	c->id = atomic_fetch_add(&t->wk->next_conn_id, 1) + 1;
	c->t_accept = ushi_now_ns();
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
		return;
	}
	c->next = t->conns;
	t->conns = c;
	t->nconns++;
	wk_log(t->wk, 2, "peer %s: connected (thread %u)", c->peer, t->idx);
}

/* Closes finished connections; frees them once no op refers to them. */
static void conn_reap(struct wk_thread *t)
{
	for (struct wk_conn **cp = &t->conns; *cp;) {
		struct wk_conn *c = *cp;
		bool done = c->eof || (c->failed && !c->out && !c->sending);
		if (done && !c->closed) {
			shutdown(c->fd, SHUT_RDWR);
			c->closed = true;
			wk_conn_leave(c);
		}
		if (!c->closed || c->recv_armed || c->sending || c->qn) {
			cp = &c->next;
			continue;
		}
		*cp = c->next;
		close(c->fd);
		while (c->out) {
			struct wk_out *o = c->out;
			c->out = o->next;
			ushi_free(o);
		}
		wk_fetch_free(c->fetch);
		ushi_free(c->stage);
		ushi_free(c);
		t->nconns--;
	}
}

static int setup(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.iodepth = WK_IODEPTH;
	ro.push_size = wk->o.flush_size;
	ro.pool_bytes = ALIGN_UP(wk->o.pool_bytes, (size_t)wk->o.flush_size);
	int ret = ush_ring_create(&t->ring, &ro);
	if (ret)
		return ret;
	t->flush_order = ring_pool(t->ring)->max_order;
	t->accepted = ushi_calloc(WK_MAX_CONNS, sizeof(*t->accepted));
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
	ret = wk_log_open(t);
	if (!ret)
		ret = arm_accept(t);
	t->drop_seen = atomic_load(&wk->drop_epoch);
	return ret;
}

static void teardown(struct wk_thread *t)
{
	if (t->ring) {
		wk_store_close(t);
		ring_drain(t->ring);
		ush_ring_free(t->ring);
		t->ring = NULL;
	}
	if (t->br)
		munmap(t->br, t->br_bytes);
	ushi_free(t->bufs);
	ushi_free(t->accepted);
}

/* Drops other threads' shuffles from this thread's open files. */
static void check_drops(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	unsigned e = atomic_load(&wk->drop_epoch);
	while (t->drop_seen != e) {
		pthread_mutex_lock(&wk->lock);
		uint32_t s = wk->drops[t->drop_seen];
		pthread_mutex_unlock(&wk->lock);
		wk_store_drop(t, s);
		t->drop_seen++;
	}
}

static bool drained(struct wk_thread *t)
{
	return !t->conns && !t->accept_armed && !t->naccepted;
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
	bool stopping = false;
	unsigned stop_ticks = 0;
	while (!ret) {
		if (!stopping && atomic_load(&wk->stop)) {
			stopping = true;
			/* Wakes the armed accept with -EINVAL. */
			shutdown(t->lfd, SHUT_RDWR);
			for (struct wk_conn *c = t->conns; c; c = c->next)
				c->eof = true;
		}
		int r = ring_reap_timeout(t->ring, 1, TICK_NS);
		if (r && r != -ETIME) {
			ret = r;
			break;
		}
		check_drops(t);
		/* One thread checks the applications' TTLs, once a second. */
		if (t->idx == 0 && !stopping &&
		    ushi_now_ns() - t->expire_ns > 1000000000ull) {
			t->expire_ns = ushi_now_ns();
			wk_app_expire(t);
		}
		while (t->naccepted) {
			int fd = t->accepted[--t->naccepted];
			if (stopping)
				close(fd);
			else
				conn_new(t, fd);
		}
		uint64_t now = ushi_now_ns();
		uint64_t hello_ns = wk->o.hello_timeout_ms * 1000000ull;
		for (struct wk_conn *c = t->conns; c; c = c->next) {
			wk_conn_process(c);
			/* Silent connections must not pin a recv op forever. */
			if (!c->role && !c->failed && !c->eof &&
			    now - c->t_accept > hello_ns)
				wk_conn_fail(c, -ETIMEDOUT, "no HELLO within "
					     "%u ms", wk->o.hello_timeout_ms);
			if (stopping)
				c->eof = true;
			if (!c->recv_armed && !c->eof && !c->failed &&
			    !c->closed && arm_recv(c))
				c->eof = true;
			wk_conn_pump(c);
		}
		conn_reap(t);
		if (!stopping && !t->accept_armed)
			ret = arm_accept(t);
		if (stopping && drained(t))
			break;
		/* A listener whose accept does not wake on shutdown must not
		 * hold the exit up: the ring's exit cancels it. */
		if (stopping && !t->conns && ++stop_ticks > 20)
			break;
	}
	if (ret)
		wk_log(wk, 0, "thread %u: %s", t->idx, ush_last_error());
	int sret = t->ring ? wk_store_sync(t) : 0;
	if (sret && !ret)
		wk_log(wk, 0, "thread %u: final sync: %s", t->idx,
		       ush_strerror(sret));
	t->err = ret ? ret : sret;
	teardown(t);
	return NULL;
}
