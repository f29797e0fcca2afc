/* The ring's plain-syscall backend; see ring_sync.h. */
#define _GNU_SOURCE /* accept4, ppoll */
#include "core/ring_sync.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

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

int sync_init(struct ushi_sync *s, unsigned iodepth)
{
	*s = (struct ushi_sync){.cap = iodepth};
	s->pend_tail = &s->pend;
	s->done_tail = &s->done;
	s->pfd = ushi_calloc(iodepth, sizeof(*s->pfd));
	s->pop = ushi_calloc(iodepth, sizeof(*s->pop));
	return s->pfd && s->pop ? 0 : -ENOMEM;
}

void sync_destroy(struct ushi_sync *s)
{
	ushi_free(s->pfd);
	ushi_free(s->pop);
	s->pfd = NULL;
	s->pop = NULL;
}

static void append(struct ushi_op ***tail, struct ushi_op *op)
{
	op->sync.next = NULL;
	**tail = op;
	*tail = &op->sync.next;
}

void sync_queue(struct ushi_sync *s, struct ushi_op *op)
{
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

int sync_buf_ring(struct ushi_sync *s, const struct io_uring_buf_reg *reg)
{
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
		default:
			ushi_panic("ring: op kind %d unknown", op->kind);
		}
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return (int)n;
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

void sync_issue(struct ushi_sync *s)
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

void sync_wait(struct ushi_sync *s, uint64_t end_ns)
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

struct ushi_op *sync_pop(struct ushi_sync *s, int *res, unsigned *flags)
{
	struct ushi_op *op = s->done;
	if (!op)
		return NULL;
	s->done = op->sync.next;
	if (!s->done)
		s->done_tail = &s->done;
	*res = op->sync.res;
	*flags = op->sync.flags;
	return op;
}
