/*
 * The plain-syscall engine, for where io_uring cannot be set up (a
 * seccomp filter such as Docker's default profile, the io_uring_disabled
 * sysctl, a kernel without it): the same ops done with system calls. An
 * op queued here runs its syscall once it can proceed without blocking
 * (files at once, sockets when poll() says so), and its result is held
 * as a CQE would be until the reap hands it to ring_complete(). Multishot
 * recv takes its buffers from the caller's provided-buffer ring in user
 * memory, as the kernel would.
 */
#define _GNU_SOURCE /* accept4, ppoll */
#include "core/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define USHI_SYNC_BUF_RINGS 4

struct ushi_sync {
	struct ushi_engine e;
	struct ushi_op *pend, **pend_tail; /* queued: syscall still to run */
	struct ushi_op *done, **done_tail; /* results not yet dispatched */
	struct pollfd *pfd;                /* one per op (iodepth) */
	struct ushi_op **pop;              /* the op of each pfd */
	unsigned cap;
	/* pop[cap], then pfd[cap], follow in the same allocation: a reader
	 * opens a ring per partition, so one allocation, not three. */
	struct ushi_sync_br {
		struct io_uring_buf_ring *br;
		uint16_t mask, head, bgid;
	} br[USHI_SYNC_BUF_RINGS];
	unsigned nbr;
};

static struct ushi_sync *of(struct ushi_engine *e)
{
	return (struct ushi_sync *)e;
}

/* Why io_uring_setup was refused, as far as the system tells. */
static const char *refusal_cause(int err, char *buf, size_t n)
{
	if (err == -ENOSYS)
		return "a kernel built without io_uring, or a seccomp filter";
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	int v = 0;
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	if (v) {
		snprintf(buf, n, "sysctl kernel.io_uring_disabled=%d", v);
		return buf;
	}
	return "a seccomp filter, such as Docker's default profile";
}

bool ushi_uring_refused(int err, const char *what)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	if (err != -EPERM && err != -EACCES && err != -ENOSYS)
		return false;
	if (!atomic_flag_test_and_set(&said)) {
		char buf[64];
		ushi_warn("io_uring is unavailable (%s: %s; %s): running on "
			  "plain system calls (pwrite, send, poll) instead, "
			  "without registered buffers, zero-copy sends or "
			  "batched submission", what, ush_strerror(err),
			  refusal_cause(err, buf, sizeof(buf)));
	}
	return true;
}

static void sync_destroy(struct ushi_engine *e)
{
	ushi_free(of(e));
}

/* Room for iodepth ops. */
static int sync_create(struct ush_ring *r, struct ushi_engine **out)
{
	unsigned iodepth = ring_opts(r)->iodepth;
	struct ushi_sync *s = ushi_calloc(1, sizeof(*s) + iodepth *
					  (sizeof(*s->pop) + sizeof(*s->pfd)));
	if (!s)
		return ushi_fail(-ENOMEM, "ring: %u ops", iodepth);
	*s = (struct ushi_sync){
		.e = {.ops = &ushi_engine_sync, .ring = r},
		.cap = iodepth,
	};
	s->pend_tail = &s->pend;
	s->done_tail = &s->done;
	/* Pointers first, then the pollfds: both stay aligned. */
	s->pop = (struct ushi_op **)(s + 1);
	s->pfd = (struct pollfd *)(s->pop + iodepth);
	*out = &s->e;
	return 0;
}

static void append(struct ushi_op ***tail, struct ushi_op *op)
{
	op->sync.next = NULL;
	**tail = op;
	*tail = &op->sync.next;
}

/* A send with a timeout fails with -ECANCELED if it cannot proceed for
 * that long. */
static void sync_queue(struct ushi_engine *e, struct ushi_op *op)
{
	struct ushi_sync *s = of(e);
	bool send = op->kind == OP_SEND || op->kind == OP_SEND_ZC ||
		    op->kind == OP_SENDMSG;
	op->sync.ready = true; /* tried at once, polled once it would block */
	op->sync.deadline = send && op->send.timeout_ms ?
		ushi_now_ns() + op->send.timeout_ms * 1000000ull : 0;
	/* io_uring waits for a connection without blocking the thread; here
	 * accept4 runs only once poll() saw one, and must not block if the
	 * peer went away in between. */
	if (op->kind == OP_ACCEPT_MS) {
		int fl = fcntl(op->arm.fd, F_GETFL);
		if (fl >= 0 && !(fl & O_NONBLOCK))
			fcntl(op->arm.fd, F_SETFL, fl | O_NONBLOCK);
	}
	append(&s->pend_tail, op);
}

static int sync_buf_ring(struct ushi_engine *e, struct io_uring_buf_reg *reg)
{
	struct ushi_sync *s = of(e);
	if (s->nbr == USHI_SYNC_BUF_RINGS)
		return -ENOSPC;
	if (!reg->ring_entries || (reg->ring_entries & (reg->ring_entries - 1)))
		return -EINVAL;
	s->br[s->nbr++] = (struct ushi_sync_br){
		.br = (struct io_uring_buf_ring *)(uintptr_t)reg->ring_addr,
		.mask = (uint16_t)(reg->ring_entries - 1),
		.bgid = reg->bgid,
	};
	return 0;
}

/* A multishot recv: into the next provided buffer of the op's group,
 * consumed only when data came. With none left it fails with -ENOBUFS
 * as io_uring's does: when data arrives, not before. */
static ssize_t recv_provided(struct ushi_sync *s, struct ushi_op *op,
			     unsigned *flags)
{
	struct ushi_sync_br *b = NULL;
	for (unsigned i = 0; i < s->nbr && !b; i++)
		if (s->br[i].bgid == op->arm.bgid)
			b = &s->br[i];
	uint16_t tail = b ? __atomic_load_n(&b->br->tail, __ATOMIC_ACQUIRE) : 0;
	if (!b || b->head == tail) {
		char c;
		ssize_t n = recv(op->arm.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n > 0) {
			errno = ENOBUFS;
			return -1;
		}
		return n;
	}
	const struct io_uring_buf *buf = &b->br->bufs[b->head & b->mask];
	ssize_t n = recv(op->arm.fd, (void *)(uintptr_t)buf->addr, buf->len,
			 MSG_DONTWAIT);
	if (n > 0) {
		b->head++;
		*flags = (op->arm.once ? 0 : IORING_CQE_F_MORE) |
			 IORING_CQE_F_BUFFER |
			 ((unsigned)buf->bid << IORING_CQE_BUFFER_SHIFT);
	}
	return n;
}

/* The op's syscall, never blocking: its result (-EAGAIN: not yet) and
 * the CQE flags io_uring would have set. */
static int try_op(struct ushi_sync *s, struct ushi_op *op, unsigned *flags)
{
	const struct ushi_io *io = &op->io;
	const struct ushi_armed *a = &op->arm;
	const int nb = MSG_DONTWAIT | MSG_NOSIGNAL;
	ssize_t n;
	*flags = 0;
	do {
		switch (op->kind) {
		case OP_WRITE:
			n = pwrite(io->fd, io->addr + io->done,
				   io->len - io->done,
				   (off_t)(io->off + io->done));
			break;
		case OP_SEND:
		case OP_SEND_ZC:
			n = send(io->fd, io->addr + io->done,
				 io->len - io->done, nb);
			/* The data was copied: its "notification" follows. */
			if (n > 0 && op->kind == OP_SEND_ZC)
				*flags = IORING_CQE_F_MORE;
			break;
		case OP_SENDMSG:
			n = sendmsg(io->fd, op->send.msg, nb);
			break;
		case OP_RECV:
			n = recv(a->fd, a->addr, a->len, MSG_DONTWAIT);
			break;
		case OP_RECV_MS:
			n = recv_provided(s, op, flags);
			break;
		case OP_ACCEPT_MS:
			n = accept4(a->fd, NULL, NULL, SOCK_CLOEXEC);
			if (n >= 0)
				*flags = IORING_CQE_F_MORE;
			break;
		case OP_READ:
			n = pread(a->fd, a->addr, a->len, (off_t)a->off);
			break;
		case OP_WILLNEED:
			errno = posix_fadvise(a->fd, (off_t)a->off, a->len,
					      POSIX_FADV_WILLNEED);
			n = errno ? -1 : 0;
			break;
		case OP_FSYNC:
			/* The one blocking call here: a file is always
			 * ready, and there is no thread to hand it to. */
			n = fdatasync(io->fd);
			break;
		default:
			ushi_panic("ring: op kind %d unknown", op->kind);
		}
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return (int)n;
}

void ushi_sync_run(struct ush_ring *r, struct ushi_op *op)
{
	unsigned flags;
	if (op->kind != OP_WRITE)
		ushi_panic("ring: op kind %d cannot block", op->kind);
	int res = try_op(NULL, op, &flags);
	ring_complete(r, op, res, flags);
}

/* Polls the queued ops that wait for their socket, for up to timeout_ns
 * (0: a look only), and marks those it can run. */
static void refresh(struct ushi_sync *s, uint64_t timeout_ns)
{
	nfds_t n = 0;
	for (struct ushi_op *op = s->pend; op; op = op->sync.next) {
		if (op->sync.ready)
			continue;
		bool out = op->kind == OP_WRITE || op->kind == OP_SEND ||
			   op->kind == OP_SEND_ZC || op->kind == OP_SENDMSG;
		s->pfd[n] = (struct pollfd){
			.fd = out ? op->io.fd : op->arm.fd,
			.events = out ? POLLOUT : POLLIN,
		};
		s->pop[n++] = op;
	}
	if (!n && !timeout_ns)
		return;
	struct timespec ts = {
		.tv_sec = (time_t)(timeout_ns / 1000000000u),
		.tv_nsec = (long)(timeout_ns % 1000000000u),
	};
	bool forever = timeout_ns == UINT64_MAX;
	if (ppoll(s->pfd, n, forever ? NULL : &ts, NULL) <= 0)
		return; /* nothing yet, or EINTR: the caller looks again */
	for (nfds_t i = 0; i < n; i++)
		if (s->pfd[i].revents)
			s->pop[i]->sync.ready = true;
}

/* Runs the syscalls of the queued ops that can proceed now; never runs
 * a callback. */
static void sync_issue(struct ushi_sync *s)
{
	if (!s->pend)
		return;
	refresh(s, 0);
	struct ushi_op *op = s->pend;
	s->pend = NULL;
	s->pend_tail = &s->pend;
	uint64_t now = ushi_now_ns();
	while (op) {
		struct ushi_op *next = op->sync.next;
		unsigned flags = 0;
		int res = op->sync.ready ? try_op(s, op, &flags) : -EAGAIN;
		if (res == -EAGAIN && op->sync.deadline &&
		    now >= op->sync.deadline)
			res = -ECANCELED; /* as io_uring's link timeout */
		if (res == -EAGAIN) {
			op->sync.ready = false;
			append(&s->pend_tail, op);
		} else {
			op->sync.res = res;
			op->sync.flags = flags;
			append(&s->done_tail, op);
		}
		op = next;
	}
}

/* Waits until a queued op can proceed, a send's timeout passes, or the
 * clock reaches end_ns; returns at once when a result is held. */
static void sync_wait(struct ushi_sync *s, uint64_t end_ns)
{
	if (s->done)
		return;
	uint64_t until = end_ns;
	bool waiting = false;
	for (struct ushi_op *op = s->pend; op; op = op->sync.next) {
		if (op->sync.ready)
			return; /* queued since the last issue: run it first */
		waiting = true;
		if (op->sync.deadline && op->sync.deadline < until)
			until = op->sync.deadline;
	}
	if (!waiting && end_ns == UINT64_MAX)
		return; /* nothing can come: never sleep forever */
	uint64_t now = ushi_now_ns();
	refresh(s, until == UINT64_MAX ? until : until > now ? until - now : 0);
}

/*
 * The results held, dispatched as CQEs are. A multishot op that goes on
 * is queued again; a SEND_ZC's data was copied, so its notification
 * (usage: copied) follows at once.
 */
static unsigned dispatch(struct ushi_sync *s)
{
	unsigned seen = 0;
	struct ushi_op *op;
	while ((op = s->done)) {
		s->done = op->sync.next;
		if (!s->done)
			s->done_tail = &s->done;
		bool multi = op->kind == OP_RECV_MS || op->kind == OP_ACCEPT_MS;
		bool more = op->sync.flags & IORING_CQE_F_MORE;
		seen++;
		ring_complete(s->e.ring, op, op->sync.res, op->sync.flags);
		if (more && multi)
			sync_queue(&s->e, op);
		else if (more)
			ring_complete(s->e.ring, op,
				      (int)IORING_NOTIF_USAGE_ZC_COPIED,
				      IORING_CQE_F_NOTIF);
	}
	return seen;
}

static int sync_submit(struct ushi_engine *e)
{
	sync_issue(of(e));
	return 0;
}

static int sync_reap(struct ushi_engine *e, unsigned min, uint64_t timeout_ns)
{
	struct ushi_sync *s = of(e);
	uint64_t end = timeout_ns == UINT64_MAX ? UINT64_MAX :
					       ushi_now_ns() + timeout_ns;
	for (unsigned seen = 0;;) {
		sync_issue(s);
		seen += dispatch(s);
		if (seen >= min || (!ring_inflight(e->ring) &&
				    !ring_armed(e->ring)))
			return 0;
		if (ushi_now_ns() >= end)
			return seen ? 0 : -ETIME;
		sync_wait(s, end);
	}
}

static int sync_poll(struct ushi_engine *e)
{
	struct ushi_sync *s = of(e);
	for (int i = 0; i < 2; i++) {
		sync_issue(s);
		if (!dispatch(s) || !s->pend)
			break;
	}
	return 0;
}

/* No registered files here: ops name the fd. */
static int sync_file_add(struct ushi_engine *e, int fd)
{
	(void)e;
	(void)fd;
	return -1;
}

static void sync_file_del(struct ushi_engine *e, int slot)
{
	(void)e;
	(void)slot;
}

const struct ushi_engine_ops ushi_engine_sync = {
	.name = "sync",
	.create = sync_create,
	.destroy = sync_destroy,
	.queue = sync_queue,
	.submit = sync_submit,
	.reap = sync_reap,
	.poll = sync_poll,
	.buf_ring = sync_buf_ring,
	.file_add = sync_file_add,
	.file_del = sync_file_del,
};
