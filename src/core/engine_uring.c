/*
 * The io_uring engine: setup with flag fallback, the pool registered as
 * one fixed buffer, a sparse file table; each op becomes an SQE (a send
 * with a timeout, two: the send and its link timeout) and each CQE goes
 * to ring_complete().
 */
#include "core/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define USHI_FILE_SLOTS 64
/* The whole pool is registered as one buffer (register_pool()), so every
 * fixed-buffer op names index 0. */
#define POOL_BUF_INDEX 0

struct uring {
	struct ushi_engine e;
	struct io_uring uring;
	bool files;          /* sparse file table registered */
	uint64_t file_slots; /* bitmap of the 64 file slots in use */
	unsigned unsubmitted;
};

static struct uring *of(struct ushi_engine *e)
{
	return (struct uring *)e;
}

/* Tries the best flag set first and drops flags on -EINVAL, as fio does:
 * older kernels lack DEFER_TASKRUN (6.1) or SINGLE_ISSUER (6.0). */
static int setup(struct uring *u, const struct ush_ring_opts *o)
{
	static const unsigned plain[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
		IORING_SETUP_COOP_TASKRUN,
		0,
	};
	/* SQPOLL is refused together with DEFER_TASKRUN and COOP_TASKRUN. */
	static const unsigned sqpoll[] = {
		IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER,
		IORING_SETUP_SQPOLL,
	};
	/* An unbound ring (ring.h) may be entered by any thread: none of
	 * the flags that tie completions to the submitter. */
	static const unsigned unbound[] = {0};
	const unsigned *sets = o->sqpoll ? sqpoll : plain;
	size_t nsets = o->sqpoll ? ARRAY_SIZE(sqpoll) : ARRAY_SIZE(plain);
	if (ring_unbound(u->e.ring)) {
		sets = unbound;
		nsets = ARRAY_SIZE(unbound);
	}
	int ret = -EINVAL;
	for (size_t i = 0; i < nsets; i++) {
		struct io_uring_params p = {0};
		p.flags = sets[i] | IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
		/* Slack, not a bound: one SQE may post three CQEs (a
		 * SEND_ZC with a link timeout: result, timeout,
		 * notification) and a multishot op any number. Past the
		 * CQ's size the kernel holds CQEs back in its overflow
		 * list (IORING_FEAT_NODROP) until they are reaped. */
		p.cq_entries = 4 * o->iodepth;
		p.sq_thread_idle = 100;
		/* Two SQEs per op: a send and its link timeout (get_sqe). */
		ret = io_uring_queue_init_params(2 * o->iodepth, &u->uring, &p);
		if (ret == 0) {
			u->e.setup_flags = p.flags;
			return 0;
		}
		if (ret != -EINVAL)
			break;
	}
	if (ushi_uring_refused(ret, "io_uring_setup"))
		return -ret;
	return ushi_fail(ret, "ring: io_uring_queue_init(%u entries%s)",
			2 * o->iodepth, o->sqpoll ? ", SQPOLL" : "");
}

static int register_pool(struct uring *u, const struct ush_ring_opts *o,
			 const struct ushi_pool *pool)
{
	if (o->fixedbufs == 0)
		return 0;
	struct iovec iov = {pool->arena, pool->bytes};
	int ret = io_uring_register_buffers(&u->uring, &iov, 1);
	if (ret == 0) {
		u->e.fixedbufs = true;
		return 0;
	}
	struct rlimit rl = {0};
	getrlimit(RLIMIT_MEMLOCK, &rl);
	const char *fix =
		ret == -ENOMEM || ret == -EPERM
			? "raise the locked-memory limit (ulimit -l, or "
			  "LimitMEMLOCK= for a service) above the pool size, "
			  "grant CAP_IPC_LOCK, or use fixedbufs=0"
			: "use fixedbufs=0";
	if (o->fixedbufs == 1)
		return ushi_fail(ret, "ring: registering a %zu KiB buffer pool "
				"failed (RLIMIT_MEMLOCK %llu KiB); %s",
				pool->bytes >> 10,
				(unsigned long long)rl.rlim_cur >> 10, fix);
	/* Said once per process: every ring of a process (one per
	 * thread) meets the same limit, and the fix is the same. */
	static atomic_bool warned;
	if (atomic_exchange(&warned, true))
		return 0;
	ushi_warn("registering a %zu KiB buffer pool failed (%s, "
		 "RLIMIT_MEMLOCK %llu KiB): falling back to unregistered "
		 "buffers, which costs a page-pinning per I/O; to fix: %s",
		 pool->bytes >> 10, ush_strerror(ret),
		 (unsigned long long)rl.rlim_cur >> 10, fix);
	return 0;
}

static int uring_create(struct ush_ring *r, struct ushi_engine **out)
{
	const struct ush_ring_opts *o = ring_opts(r);
	struct uring *u = ushi_calloc(1, sizeof(*u));
	if (!u)
		return ushi_fail(-ENOMEM, "ring: allocation");
	u->e = (struct ushi_engine){.ops = &ushi_engine_uring, .ring = r};
	int ret = setup(u, o);
	if (ret) {
		ushi_free(u);
		return ret;
	}
	/* Optimisations only; a registered ring fd is the registering
	 * thread's, and an unbound ring's users need no file slots. */
	if (!ring_unbound(r)) {
		io_uring_register_ring_fd(&u->uring);
		u->files = io_uring_register_files_sparse(&u->uring,
							  USHI_FILE_SLOTS) == 0;
	}
	ret = register_pool(u, o, ring_pool(r));
	if (ret) {
		io_uring_queue_exit(&u->uring);
		ushi_free(u);
		return ret;
	}
	*out = &u->e;
	return 0;
}

/* In a fork() child, the unregister of the ring fd that queue_exit makes
 * is refused (SINGLE_ISSUER: another task) or, before Linux 6.0, acts on
 * the child's table of registered rings, never on the parent's. */
static void uring_destroy(struct ushi_engine *e)
{
	io_uring_queue_exit(&of(e)->uring);
	ushi_free(e);
}

/*
 * The SQ has two entries per op (setup()), an op queues at most two
 * SQEs at a time (a send and its link timeout), and without SQPOLL they
 * leave the SQ inside the io_uring_enter() that precedes their CQEs: an
 * entry is always free. An SQPOLL thread, though, may post an op's CQE
 * before it moves the SQ head past the op's SQEs: wait for it then.
 * Never submits, so a send and its link timeout go out together.
 */
static struct io_uring_sqe *get_sqe(struct uring *u)
{
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&u->uring)))
		io_uring_sqring_wait(&u->uring);
	return sqe;
}

/* The part of every SQE: file slot, op, count. */
static void sqe_done(struct uring *u, struct io_uring_sqe *sqe,
		     struct ushi_op *op, bool fixed_file)
{
	if (fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, op);
	u->unsubmitted++;
}

static void prep_write(struct uring *u, struct ushi_op *op)
{
	struct ushi_io *io = &op->io;
	struct io_uring_sqe *sqe = get_sqe(u);
	const uint8_t *a = io->addr + io->done;
	unsigned n = io->len - io->done;
	if (io->buf && u->e.fixedbufs)
		io_uring_prep_write_fixed(sqe, io->fd, a, n, io->off + io->done,
					  POOL_BUF_INDEX);
	else
		io_uring_prep_write(sqe, io->fd, a, n, io->off + io->done);
	sqe_done(u, sqe, op, io->fixed_file);
}

static void prep_fsync(struct uring *u, struct ushi_op *op)
{
	struct io_uring_sqe *sqe = get_sqe(u);
	io_uring_prep_fsync(sqe, op->io.fd, IORING_FSYNC_DATASYNC);
	sqe_done(u, sqe, op, op->io.fixed_file);
}

/* The user_data of link timeouts: their CQEs carry no news of their own
 * (the send they guard completes with -ECANCELED). */
static char link_ud;

/* The SQE for what is left of a send, and its link timeout. */
static void prep_send(struct uring *u, struct ushi_op *op)
{
	struct ushi_io *io = &op->io;
	struct ushi_send *s = &op->send;
	struct io_uring_sqe *sqe = get_sqe(u);
	const uint8_t *a = io->addr + io->done;
	size_t n = io->len - io->done;
	int flags = MSG_NOSIGNAL;
	if (op->kind == OP_SENDMSG)
		io_uring_prep_sendmsg(sqe, io->fd, s->msg, (unsigned)flags);
	else if (op->kind == OP_SEND_ZC && io->buf && u->e.fixedbufs)
		io_uring_prep_send_zc_fixed(sqe, io->fd, a, n, flags,
					    IORING_SEND_ZC_REPORT_USAGE,
					    POOL_BUF_INDEX);
	else if (op->kind == OP_SEND_ZC)
		io_uring_prep_send_zc(sqe, io->fd, a, n, flags,
				      IORING_SEND_ZC_REPORT_USAGE);
	else
		io_uring_prep_send(sqe, io->fd, a, n, flags);
	sqe_done(u, sqe, op, io->fixed_file);
	if (!s->timeout_ms)
		return;
	sqe->flags |= IOSQE_IO_LINK;
	s->ts.tv_sec = s->timeout_ms / 1000;
	s->ts.tv_nsec = (long long)(s->timeout_ms % 1000) * 1000000;
	sqe = get_sqe(u);
	io_uring_prep_link_timeout(sqe, &s->ts, 0);
	io_uring_sqe_set_data(sqe, &link_ud);
	u->unsubmitted++;
}

static void prep_armed(struct uring *u, struct ushi_op *op)
{
	struct ushi_armed *a = &op->arm;
	struct io_uring_sqe *sqe = get_sqe(u);
	switch (op->kind) {
	case OP_RECV:
		io_uring_prep_recv(sqe, a->fd, a->addr, a->len, 0);
		break;
	case OP_RECV_MS:
		if (a->once)
			io_uring_prep_recv(sqe, a->fd, NULL, 0, 0);
		else
			io_uring_prep_recv_multishot(sqe, a->fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = a->bgid;
		break;
	case OP_ACCEPT_MS:
		io_uring_prep_multishot_accept(sqe, a->fd, NULL, NULL,
					       SOCK_CLOEXEC);
		break;
	case OP_READ:
		if (a->buf && u->e.fixedbufs)
			io_uring_prep_read_fixed(sqe, a->fd, a->addr, a->len,
						 a->off, POOL_BUF_INDEX);
		else
			io_uring_prep_read(sqe, a->fd, a->addr, a->len, a->off);
		break;
	case OP_WILLNEED:
		io_uring_prep_fadvise(sqe, a->fd, a->off, a->len,
				      POSIX_FADV_WILLNEED);
		break;
	}
	sqe_done(u, sqe, op, false);
}

static void uring_queue(struct ushi_engine *e, struct ushi_op *op)
{
	switch (op->kind) {
	case OP_WRITE:
		prep_write(of(e), op);
		break;
	case OP_SEND:
	case OP_SEND_ZC:
	case OP_SENDMSG:
		prep_send(of(e), op);
		break;
	case OP_FSYNC:
		prep_fsync(of(e), op);
		break;
	default:
		prep_armed(of(e), op);
	}
}

static int uring_submit(struct ushi_engine *e)
{
	struct uring *u = of(e);
	if (!u->unsubmitted)
		return 0;
	int ret;
	do
		ret = io_uring_submit(&u->uring);
	while (ret == -EINTR);
	if (ret < 0)
		return ushi_fail(ret, "ring: io_uring_submit");
	u->unsubmitted = 0;
	return 0;
}

static unsigned reap_cqes(struct uring *u)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	io_uring_for_each_cqe(&u->uring, head, cqe)
	{
		void *op = io_uring_cqe_get_data(cqe);
		seen++;
		if (op != &link_ud)
			ring_complete(u->e.ring, op, cqe->res, cqe->flags);
	}
	io_uring_cq_advance(&u->uring, seen);
	return seen;
}

static int uring_reap(struct ushi_engine *e, unsigned min, uint64_t timeout_ns)
{
	struct uring *u = of(e);
	struct __kernel_timespec ts = {
		.tv_sec = (long long)(timeout_ns / 1000000000u),
		.tv_nsec = (long long)(timeout_ns % 1000000000u),
	};
	struct io_uring_cqe *cqe;
	bool timed = timeout_ns != UINT64_MAX;
	int ret;
	do
		ret = timed ? io_uring_submit_and_wait_timeout(&u->uring, &cqe,
							       min, &ts, NULL)
			    : io_uring_submit_and_wait(&u->uring, min);
	while (ret == -EINTR);
	if (ret < 0 && ret != -EBUSY && ret != -ETIME)
		return ushi_fail(ret, "ring: io_uring_submit_and_wait%s",
				timed ? "_timeout" : "");
	u->unsubmitted = 0;
	unsigned seen = reap_cqes(u);
	return timed && !seen && ret == -ETIME ? -ETIME : 0;
}

/* On a DEFER_TASKRUN ring the kernel's deferred work (a send's retry once
 * the socket drains) runs only inside such an entry. */
static int uring_poll(struct ushi_engine *e)
{
	struct uring *u = of(e);
	for (int i = 0; i < 2; i++) {
		int ret;
		do
			ret = io_uring_submit_and_get_events(&u->uring);
		while (ret == -EINTR);
		if (ret < 0 && ret != -EBUSY)
			return ushi_fail(ret, "ring: io_uring_submit_and_get_"
					"events");
		u->unsubmitted = 0;
		if (!reap_cqes(u) || !u->unsubmitted)
			break;
	}
	return 0;
}

static int uring_buf_ring(struct ushi_engine *e, struct io_uring_buf_reg *reg)
{
	return io_uring_register_buf_ring(&of(e)->uring, reg, 0);
}

static int uring_file_add(struct ushi_engine *e, int fd)
{
	struct uring *u = of(e);
	if (!u->files || u->file_slots == UINT64_MAX)
		return -1;
	int slot = __builtin_ctzll(~u->file_slots);
	if (io_uring_register_files_update(&u->uring, (unsigned)slot, &fd,
					   1) != 1)
		return -1;
	u->file_slots |= 1ull << slot;
	return slot;
}

static void uring_file_del(struct ushi_engine *e, int slot)
{
	struct uring *u = of(e);
	int none = -1;
	/* In a forked child the table is the parent's. */
	if (!ring_forked(e->ring))
		io_uring_register_files_update(&u->uring, (unsigned)slot,
					       &none, 1);
	u->file_slots &= ~(1ull << slot);
}

const struct ushi_engine_ops ushi_engine_uring = {
	.name = "io_uring",
	.create = uring_create,
	.destroy = uring_destroy,
	.queue = uring_queue,
	.submit = uring_submit,
	.reap = uring_reap,
	.poll = uring_poll,
	.buf_ring = uring_buf_ring,
	.file_add = uring_file_add,
	.file_del = uring_file_del,
};
