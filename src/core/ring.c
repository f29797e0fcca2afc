/*
 * io_uring setup with flag fallback, fixed buffers and files; ops by
 * kind (writes, sends, armed ops), each prepared and completed in its own
 * section; then submission, reaping and dispatch. Where io_uring is
 * refused, every op goes to the plain-syscall backend (ring_sync.c)
 * where it would become an SQE, and its results come back through the
 * same dispatch as CQEs.
 */
#include "core/ring.h"
#include "core/codec.h"
#include "core/ring_sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define USHI_FILE_SLOTS 64
/* The whole pool is registered as one buffer (register_pool()), so every
 * fixed-buffer op names index 0. */
#define POOL_BUF_INDEX 0

struct ush_ring {
	struct io_uring uring;
	struct ushi_pool pool;
	struct ushi_codec_ctx codec;
	struct ush_ring_opts opts;
	unsigned setup_flags;
	pid_t owner;         /* the creator thread: the only one served */
	unsigned gen;        /* ushi_fork_gen at creation */
	unsigned writers;    /* open on it: each uses the pool */
	bool live;           /* io_uring set up: only then is it torn down */
	int refused;         /* -errno io_uring_setup gave: the sync backend */
	struct ushi_sync sync;
	bool fixedbufs;
	bool files;          /* sparse file table registered */
	uint64_t file_slots; /* bitmap of the 64 file slots in use */
	struct ushi_op *ops, *free_ops;
	unsigned inflight;   /* ops started, not completed */
	unsigned armed;      /* armed ops that wait for peers */
	unsigned unsubmitted;
};

static const struct ush_ring_opts ring_defaults = {
	.size = sizeof(struct ush_ring_opts),
	.iodepth = 64,
	.pool_bytes = 64u << 20,
	.push_size = 64u << 10,
	.fixedbufs = -1,
	.codec = USH_CODEC_NONE,
	.level = 1,
};

void ush_ring_opts_init_size(struct ush_ring_opts *o, size_t size)
{
	ushi_struct_init(o, size, &ring_defaults, sizeof(*o));
}

static int check_opts(const struct ush_ring_opts *o)
{
	if (o->iodepth < 1 || o->iodepth > 4096)
		return ushi_fail(-EINVAL, "ring: iodepth %u out of range 1..4096",
				o->iodepth);
	if (o->push_size < USHI_BUF_MIN || o->push_size > (64u << 20) ||
	    (o->push_size & (o->push_size - 1)))
		return ushi_fail(-EINVAL, "ring: push size %zu is not a power "
				"of two in 4 KiB..64 MiB", o->push_size);
	if (o->pool_bytes < 2 * o->push_size || o->pool_bytes > (1u << 30))
		return ushi_fail(-EINVAL, "ring: pool of %zu bytes must hold two "
				"push buffers (%zu) and stay within 1 GiB",
				o->pool_bytes, 2 * o->push_size);
	if (o->codec > USH_CODEC_ZSTD)
		return ushi_fail(-EINVAL, "ring: unknown codec %d", o->codec);
	return 0;
}

/* Tries the best flag set first and drops flags on -EINVAL, as fio does:
 * older kernels lack DEFER_TASKRUN (6.1) or SINGLE_ISSUER (6.0). */
static int setup_uring(struct ush_ring *r)
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
	const unsigned *sets = r->opts.sqpoll ? sqpoll : plain;
	size_t nsets = r->opts.sqpoll ? ARRAY_SIZE(sqpoll) : ARRAY_SIZE(plain);
	int ret = -EINVAL;
	for (size_t i = 0; i < nsets; i++) {
		struct io_uring_params p = {0};
		p.flags = sets[i] | IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
		/* Slack, not a bound: one SQE may post three CQEs (a
		 * SEND_ZC with a link timeout: result, timeout,
		 * notification) and a multishot op any number. Past the
		 * CQ's size the kernel holds CQEs back in its overflow
		 * list (IORING_FEAT_NODROP) until they are reaped. */
		p.cq_entries = 4 * r->opts.iodepth;
		p.sq_thread_idle = 100;
		/* Two SQEs per op: a send and its link timeout (get_sqe). */
		ret = io_uring_queue_init_params(2 * r->opts.iodepth, &r->uring,
						 &p);
		if (ret == 0) {
			r->setup_flags = p.flags;
			r->live = true;
			return 0;
		}
		if (ret != -EINVAL)
			break;
	}
	if (ushi_uring_refused(ret, "io_uring_setup")) {
		r->refused = ret;
		ret = sync_init(&r->sync, r->opts.iodepth);
		return ret ? ushi_fail(ret, "ring: %u ops", r->opts.iodepth) : 0;
	}
	return ushi_fail(ret, "ring: io_uring_queue_init(%u entries%s)",
			2 * r->opts.iodepth, r->opts.sqpoll ? ", SQPOLL" : "");
}

static int register_pool(struct ush_ring *r)
{
	if (r->opts.fixedbufs == 0)
		return 0;
	struct iovec iov = {r->pool.arena, r->pool.bytes};
	int ret = io_uring_register_buffers(&r->uring, &iov, 1);
	if (ret == 0) {
		r->fixedbufs = true;
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
	if (r->opts.fixedbufs == 1)
		return ushi_fail(ret, "ring: registering a %zu KiB buffer pool "
				"failed (RLIMIT_MEMLOCK %llu KiB); %s",
				r->pool.bytes >> 10,
				(unsigned long long)rl.rlim_cur >> 10, fix);
	ushi_warn("registering a %zu KiB buffer pool failed (%s, "
		 "RLIMIT_MEMLOCK %llu KiB): falling back to unregistered "
		 "buffers, which costs a page-pinning per I/O; to fix: %s",
		 r->pool.bytes >> 10, ush_strerror(ret),
		 (unsigned long long)rl.rlim_cur >> 10, fix);
	return 0;
}

int ring_check_thread(const struct ush_ring *r, const char *who)
{
	if (likely(r->owner == ushi_tid() && !ushi_forked(r->gen)))
		return 0;
	if (ushi_forked(r->gen))
		return ushi_fork_refused(who);
	return ushi_fail(-EINVAL, "%s: ring used from a thread other than the "
			"one that created it (thread %d, creator %d); use one "
			"ring per thread", who, (int)ushi_tid(), (int)r->owner);
}

bool ring_forked(const struct ush_ring *r)
{
	return ushi_forked(r->gen);
}

void ring_writers(struct ush_ring *r, int n)
{
	r->writers += (unsigned)n;
}

int ush_ring_create(ush_ring **out, const struct ush_ring_opts *opts)
{
	struct ush_ring_opts o;
	*out = NULL;
	int ret = ushi_opts_load(&o, &ring_defaults, sizeof(o), opts,
				 "ring options");
	if (ret)
		return ret;
	opts = &o;
	ret = check_opts(opts);
	if (ret)
		return ret;
	struct ush_ring *r = ushi_calloc(1, sizeof(*r));
	if (!r)
		return ushi_fail(-ENOMEM, "ring: allocation");
	r->owner = ushi_tid();
	r->gen = ushi_fork_gen;
	r->opts = *opts;
	r->opts.pool_bytes = ALIGN_UP(opts->pool_bytes, opts->push_size);
	ret = pool_init(&r->pool, r->opts.pool_bytes, r->opts.push_size);
	if (ret) {
		ushi_fail(ret, "ring: mapping a %zu KiB pool",
			 r->opts.pool_bytes >> 10);
		goto fail;
	}
	ret = codec_init(&r->codec);
	if (ret) {
		ushi_fail(ret, "ring: codec contexts");
		goto fail;
	}
	if (r->opts.codec == USH_CODEC_ZSTD) {
		/* zstd sizes its workspace from each input's length and
		 * allocates a new one whenever a batch is longer than any
		 * before: size it for the largest batch now, from two idle
		 * (zeroed) pool buffers. */
		struct ushi_buf *a = pool_get(&r->pool, r->pool.max_order);
		struct ushi_buf *b = pool_get(&r->pool, r->pool.max_order);
		size_t n = r->opts.push_size - USH_FRAME_HDR_SIZE;
		long c = ring_compress(r, a->data, n, b->data, n);
		pool_put(&r->pool, b);
		pool_put(&r->pool, a);
		if (c < 0) {
			ret = ushi_fail((int)c, "ring: zstd level %d context",
				       r->opts.level);
			goto fail;
		}
	}
	r->ops = ushi_calloc(r->opts.iodepth, sizeof(*r->ops));
	if (!r->ops) {
		ret = ushi_fail(-ENOMEM, "ring: %u ops", r->opts.iodepth);
		goto fail;
	}
	for (unsigned i = 0; i < r->opts.iodepth; i++) {
		r->ops[i].next_free = r->free_ops;
		r->free_ops = &r->ops[i];
	}
	ret = setup_uring(r);
	if (ret)
		goto fail;
	if (r->refused) {
		/* Nothing to register: fixedbufs=1 cannot fail here, since the
		 * log has already said why nothing is registered. */
		*out = r;
		return 0;
	}
	io_uring_register_ring_fd(&r->uring); /* an optimisation only */
	r->files = io_uring_register_files_sparse(&r->uring,
						  USHI_FILE_SLOTS) == 0;
	ret = register_pool(r);
	if (ret)
		goto fail;
	*out = r;
	return 0;
fail:
	ush_ring_free(r);
	return ret;
}

void ush_ring_free(ush_ring *r)
{
	if (!r)
		return;
	/* A forked child's copy is unmapped and closed, never reaped: its
	 * ops are the parent's, and a reap would take the parent's CQEs
	 * from the ring both map. */
	bool child = ring_forked(r);
	/* Only the creator can reap what is in flight, and a free cannot
	 * fail: another thread here is a bug. */
	if (!child && ring_check_thread(r, "ush_ring_free"))
		ushi_panic("%s", ush_last_error());
	/* Their buffers are in the pool, their ops in the ring. */
	if (r->writers)
		ushi_panic("ush_ring_free: writers still open on the ring (%u): "
			   "free them first", r->writers);
	/* Drain so no callback can fire into freed owners; a refused ring's
	 * armed ops are dropped, as queue_exit does. */
	if (!child && (r->live || r->refused))
		ring_drain(r);
	/* Not ring_fd >= 0: liburing 2.5 on zeroes the ring before setup, so
	 * a failed one reads fd 0. In a child, the unregister of the ring fd
	 * that queue_exit makes is refused (SINGLE_ISSUER: another task) or,
	 * before Linux 6.0, acts on the child's table of registered rings,
	 * never on the parent's. */
	if (r->live)
		io_uring_queue_exit(&r->uring);
	sync_destroy(&r->sync);
	pool_destroy(&r->pool);
	codec_destroy(&r->codec);
	ushi_free(r->ops);
	ushi_free(r);
}

void ush_ring_info_size(const ush_ring *r, struct ush_ring_info *info,
			size_t size)
{
	struct ush_ring_info i = {
		.setup_flags = r->setup_flags,
		.fixedbufs = r->fixedbufs,
		.iodepth = r->opts.iodepth,
		.pool_bytes = r->pool.bytes,
		.push_size = r->opts.push_size,
		.pool_idle_bytes = r->pool.idle_bytes,
		.uring_refused = r->refused,
	};
	ushi_struct_init(info, size, &i, sizeof(i));
}

/* -------------------------------------------------------------- accessors */

unsigned ring_inflight(const struct ush_ring *r)
{
	return r->inflight;
}

bool ring_op_ready(const struct ush_ring *r)
{
	return r->free_ops != NULL;
}

unsigned ring_armed(const struct ush_ring *r)
{
	return r->armed;
}

const struct ush_ring_opts *ring_opts(const struct ush_ring *r)
{
	return &r->opts;
}

struct ushi_pool *ring_pool(struct ush_ring *r)
{
	return &r->pool;
}

long ring_compress(struct ush_ring *r, const void *src, size_t n, void *dst,
		   size_t cap)
{
	return codec_compress(&r->codec, r->opts.codec, r->opts.level, src, n,
			      dst, cap);
}

int ring_register_buf_ring(struct ush_ring *r, struct io_uring_buf_reg *reg)
{
	if (r->refused)
		return sync_buf_ring(&r->sync, reg);
	return io_uring_register_buf_ring(&r->uring, reg, 0);
}

/* ------------------------------------------------------- op records, SQEs */

int ring_op_get(struct ush_ring *r, struct ushi_op **op)
{
	while (!r->free_ops) {
		int ret = ring_reap(r, 1);
		if (ret)
			return ret;
	}
	struct ushi_op *o = r->free_ops;
	r->free_ops = o->next_free;
	memset(o, 0, sizeof(*o));
	*op = o;
	return 0;
}

static void recycle(struct ush_ring *r, struct ushi_op *op)
{
	op->next_free = r->free_ops;
	r->free_ops = op;
}

/* A started op is over: its callback, then back to the free list. */
static void finish(struct ush_ring *r, struct ushi_op *op, int res)
{
	r->inflight--;
	op->cb(op, res);
	recycle(r, op);
}

/*
 * The SQ has two entries per op (setup_uring), an op queues at most two
 * SQEs at a time (a send and its link timeout), and without SQPOLL they
 * leave the SQ inside the io_uring_enter() that precedes their CQEs: an
 * entry is always free. An SQPOLL thread, though, may post an op's CQE
 * before it moves the SQ head past the op's SQEs: wait for it then.
 * Never submits, so a send and its link timeout go out together.
 */
static struct io_uring_sqe *get_sqe(struct ush_ring *r)
{
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&r->uring)))
		io_uring_sqring_wait(&r->uring);
	return sqe;
}

/* The part of every SQE the ring queues: file slot, op, count. */
static void sqe_done(struct ush_ring *r, struct io_uring_sqe *sqe,
		     struct ushi_op *op, bool fixed_file)
{
	if (fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, op);
	r->unsubmitted++;
}

/* ----------------------------------------------------------------- writes */

/*
 * Counts res into a write's or send's io. Returns false when the rest is
 * still to go (short transfer, EAGAIN, EINTR): the caller requeues it.
 * Otherwise true, with *res the final result: all len bytes, or an error.
 */
static bool io_over(struct ushi_io *io, int *res)
{
	if (*res == -EAGAIN || *res == -EINTR)
		return false;
	if (*res > 0) {
		io->done += (uint32_t)*res;
		if (io->done < io->len)
			return false; /* short: the rest */
		*res = (int)io->done;
	} else if (*res == 0 && io->len) {
		*res = -EIO; /* no progress: treat like a failed write */
	}
	return true;
}

/* (Re)queues the SQE for what is left of a write. */
static void prep_write(struct ush_ring *r, struct ushi_op *op)
{
	struct ushi_io *io = &op->io;
	if (r->refused) {
		sync_queue(&r->sync, op);
		return;
	}
	struct io_uring_sqe *sqe = get_sqe(r);
	const uint8_t *a = io->addr + io->done;
	unsigned n = io->len - io->done;
	if (io->buf && r->fixedbufs)
		io_uring_prep_write_fixed(sqe, io->fd, a, n, io->off + io->done,
					  POOL_BUF_INDEX);
	else
		io_uring_prep_write(sqe, io->fd, a, n, io->off + io->done);
	sqe_done(r, sqe, op, io->fixed_file);
}

static void complete_write(struct ush_ring *r, struct ushi_op *op, int res)
{
	if (io_over(&op->io, &res))
		finish(r, op, res);
	else
		prep_write(r, op);
}

/* ------------------------------------------------------------------ sends */

/* The user_data of link timeouts: their CQEs carry no news of their own
 * (the send they guard completes with -ECANCELED). */
static char link_ud;

/* (Re)queues the SQE for what is left of a send, and its link timeout. */
static void prep_send(struct ush_ring *r, struct ushi_op *op)
{
	struct ushi_io *io = &op->io;
	struct ushi_send *s = &op->send;
	if (r->refused) {
		sync_queue(&r->sync, op);
		return;
	}
	struct io_uring_sqe *sqe = get_sqe(r);
	const uint8_t *a = io->addr + io->done;
	size_t n = io->len - io->done;
	int flags = MSG_NOSIGNAL;
	if (op->kind == OP_SENDMSG)
		io_uring_prep_sendmsg(sqe, io->fd, s->msg, (unsigned)flags);
	else if (op->kind == OP_SEND_ZC && io->buf && r->fixedbufs)
		io_uring_prep_send_zc_fixed(sqe, io->fd, a, n, flags,
					    IORING_SEND_ZC_REPORT_USAGE,
					    POOL_BUF_INDEX);
	else if (op->kind == OP_SEND_ZC)
		io_uring_prep_send_zc(sqe, io->fd, a, n, flags,
				      IORING_SEND_ZC_REPORT_USAGE);
	else
		io_uring_prep_send(sqe, io->fd, a, n, flags);
	sqe_done(r, sqe, op, io->fixed_file);
	if (!s->timeout_ms)
		return;
	sqe->flags |= IOSQE_IO_LINK;
	s->ts.tv_sec = s->timeout_ms / 1000;
	s->ts.tv_nsec = (long long)(s->timeout_ms % 1000) * 1000000;
	sqe = get_sqe(r);
	io_uring_prep_link_timeout(sqe, &s->ts, 0);
	io_uring_sqe_set_data(sqe, &link_ud);
	r->unsubmitted++;
}

/* A SEND_ZC notification: the kernel is done with one send's pages. */
static void zc_notif(struct ush_ring *r, struct ushi_op *op, int res)
{
	struct ushi_send *s = &op->send;
	s->zc_notifs++;
	if ((unsigned)res & IORING_NOTIF_USAGE_ZC_COPIED)
		s->zc_copied++;
	if (--s->notifs == 0 && s->sent)
		finish(r, op, s->res);
}

/* A send's bytes are out (or it failed): tell the sender, then finish,
 * or wait for its zero-copy notifications first. */
static void send_done(struct ush_ring *r, struct ushi_op *op, int res)
{
	struct ushi_send *s = &op->send;
	if (s->sent_cb)
		s->sent_cb(op, res);
	if (s->notifs) {
		s->sent = true;
		s->res = res;
		return;
	}
	finish(r, op, res);
}

static void complete_send(struct ush_ring *r, struct ushi_op *op, int res,
			  unsigned flags)
{
	struct ushi_send *s = &op->send;
	if (op->kind == OP_SEND_ZC) {
		/* The buffer is the kernel's until the notification, even
		 * when the send itself failed: check the flag, not res. */
		if (flags & IORING_CQE_F_NOTIF) {
			zc_notif(r, op, res);
			return;
		}
		if (flags & IORING_CQE_F_MORE)
			s->notifs++;
	}
	if (s->own_cb) {
		if (res > 0)
			op->io.done += (uint32_t)res;
		s->own_cb(op, res);
		return;
	}
	if (!io_over(&op->io, &res)) {
		prep_send(r, op);
		return;
	}
	send_done(r, op, res);
}

/* Starts a write or a send: the two kinds that count as in flight. */
void ring_start(struct ush_ring *r, struct ushi_op *op)
{
	r->inflight++;
	op->io.t0 = ushi_now_ns();
	switch (op->kind) {
	case OP_WRITE:
		prep_write(r, op);
		break;
	case OP_SEND:
	case OP_SEND_ZC:
		prep_send(r, op);
		break;
	default:
		ushi_panic("ring: op kind %d cannot be started", op->kind);
	}
}

void ring_send_own(struct ush_ring *r, struct ushi_op *op, ushi_op_cb own_cb)
{
	if (op->kind != OP_SEND && op->kind != OP_SEND_ZC &&
	    op->kind != OP_SENDMSG)
		ushi_panic("ring: op kind %d is not a send", op->kind);
	if (!op->send.own_cb) {
		r->inflight++;
		op->io.t0 = ushi_now_ns();
	}
	op->send.own_cb = own_cb;
	prep_send(r, op);
}

void ring_send_end(struct ush_ring *r, struct ushi_op *op, int res)
{
	struct ushi_send *s = &op->send;
	if (s->keep) {
		if (s->notifs)
			ushi_panic("ring: a kept send ended before its "
				  "notifications");
		r->inflight--;
		s->own_cb = NULL;
		return;
	}
	send_done(r, op, res);
}

void ring_op_put(struct ush_ring *r, struct ushi_op *op)
{
	recycle(r, op);
}

void ring_write_at(struct ush_ring *r, struct ushi_op *op, struct ushi_buf *b,
		   const uint8_t *addr, uint64_t off, uint32_t len, int fd,
		   int slot)
{
	op->kind = OP_WRITE;
	op->io.buf = b;
	op->io.addr = addr;
	op->io.off = off;
	op->io.len = len;
	op->io.fd = slot >= 0 ? slot : fd;
	op->io.fixed_file = slot >= 0;
	ring_start(r, op);
}

/* -------------------------------------------------------------- armed ops */

void ring_arm(struct ush_ring *r, struct ushi_op *op)
{
	struct ushi_armed *a = &op->arm;
	if (op->kind < OP_RECV || op->kind > OP_READ)
		ushi_panic("ring: op kind %d cannot be armed", op->kind);
	r->armed++;
	if (r->refused) {
		sync_queue(&r->sync, op);
		return;
	}
	struct io_uring_sqe *sqe = get_sqe(r);
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
		if (a->buf && r->fixedbufs)
			io_uring_prep_read_fixed(sqe, a->fd, a->addr, a->len,
						 a->off, POOL_BUF_INDEX);
		else
			io_uring_prep_read(sqe, a->fd, a->addr, a->len, a->off);
		break;
	}
	sqe_done(r, sqe, op, false);
}

/* Armed ops report every CQE; only the last one recycles the op. */
static void complete_armed(struct ush_ring *r, struct ushi_op *op, int res,
			   unsigned flags)
{
	bool multi = op->kind == OP_RECV_MS || op->kind == OP_ACCEPT_MS;
	bool more = multi && (flags & IORING_CQE_F_MORE);
	op->cqe_flags = flags;
	if (!more)
		r->armed--;
	op->arm.rearm = false;
	op->cb(op, res);
	/* Re-arming here spares the callback from taking an op, which
	 * could reap and so re-enter this CQE loop. */
	if (!more && op->arm.rearm)
		ring_arm(r, op);
	else if (!more)
		recycle(r, op);
}

/* ------------------------------------------------- submission and reaping */

int ring_submit(struct ush_ring *r)
{
	if (r->refused)
		sync_issue(&r->sync);
	if (!r->unsubmitted)
		return 0;
	int ret;
	do
		ret = io_uring_submit(&r->uring);
	while (ret == -EINTR);
	if (ret < 0)
		return ushi_fail(ret, "ring: io_uring_submit");
	r->unsubmitted = 0;
	return 0;
}

static void complete(struct ush_ring *r, struct ushi_op *op, int res,
		     unsigned flags)
{
	if ((void *)op == &link_ud)
		return;
	switch (op->kind) {
	case OP_WRITE:
		complete_write(r, op, res);
		break;
	case OP_SEND:
	case OP_SEND_ZC:
	case OP_SENDMSG:
		complete_send(r, op, res, flags);
		break;
	default:
		complete_armed(r, op, res, flags);
	}
}

static unsigned reap_cqes(struct ush_ring *r)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	io_uring_for_each_cqe(&r->uring, head, cqe)
	{
		seen++;
		complete(r, io_uring_cqe_get_data(cqe), cqe->res, cqe->flags);
	}
	io_uring_cq_advance(&r->uring, seen);
	return seen;
}

/*
 * The sync backend's results, dispatched as CQEs are. A multishot op
 * that goes on is queued again; a SEND_ZC's data was copied, so its
 * notification (usage: copied) follows at once.
 */
static unsigned sync_dispatch(struct ush_ring *r)
{
	unsigned seen = 0, flags;
	int res;
	struct ushi_op *op;
	while ((op = sync_pop(&r->sync, &res, &flags))) {
		bool multi = op->kind == OP_RECV_MS || op->kind == OP_ACCEPT_MS;
		bool more = flags & IORING_CQE_F_MORE;
		seen++;
		complete(r, op, res, flags);
		if (more && multi)
			sync_queue(&r->sync, op);
		else if (more)
			complete(r, op, (int)IORING_NOTIF_USAGE_ZC_COPIED,
				 IORING_CQE_F_NOTIF);
	}
	return seen;
}

/* ring_reap() on the sync backend, up to end_ns (UINT64_MAX: no end). */
static int sync_reap(struct ush_ring *r, unsigned min, uint64_t end_ns)
{
	for (unsigned seen = 0;;) {
		sync_issue(&r->sync);
		seen += sync_dispatch(r);
		if (seen >= min || (!r->inflight && !r->armed))
			return 0;
		if (ushi_now_ns() >= end_ns)
			return seen ? 0 : -ETIME;
		sync_wait(&r->sync, end_ns);
	}
}

int ring_reap_timeout(struct ush_ring *r, unsigned min, uint64_t timeout_ns)
{
	if (r->refused)
		return sync_reap(r, min, ushi_now_ns() + timeout_ns);
	struct __kernel_timespec ts = {
		.tv_sec = (long long)(timeout_ns / 1000000000u),
		.tv_nsec = (long long)(timeout_ns % 1000000000u),
	};
	struct io_uring_cqe *cqe;
	int ret;
	do
		ret = io_uring_submit_and_wait_timeout(&r->uring, &cqe, min,
						       &ts, NULL);
	while (ret == -EINTR);
	if (ret < 0 && ret != -EBUSY && ret != -ETIME)
		return ushi_fail(ret, "ring: io_uring_submit_and_wait_timeout");
	r->unsubmitted = 0;
	unsigned seen = reap_cqes(r);
	return !seen && ret == -ETIME ? -ETIME : 0;
}

int ring_reap(struct ush_ring *r, unsigned min)
{
	if (!r->inflight && !r->armed)
		return 0;
	if (r->refused)
		return sync_reap(r, min, UINT64_MAX);
	int ret;
	do
		ret = io_uring_submit_and_wait(&r->uring, min);
	while (ret == -EINTR);
	if (ret < 0 && ret != -EBUSY && ret != -ETIME)
		return ushi_fail(ret, "ring: io_uring_submit_and_wait");
	r->unsubmitted = 0;
	reap_cqes(r);
	return 0;
}

int ring_poll(struct ush_ring *r)
{
	/* Twice at most: what the first round's callbacks queued (the next
	 * send on a socket) goes out now rather than at the next entry. */
	for (int i = 0; r->refused && i < 2; i++) {
		sync_issue(&r->sync);
		if (!sync_dispatch(r) || !r->sync.pend)
			break;
	}
	for (int i = 0; !r->refused && i < 2; i++) {
		int ret;
		do
			ret = io_uring_submit_and_get_events(&r->uring);
		while (ret == -EINTR);
		if (ret < 0 && ret != -EBUSY)
			return ushi_fail(ret, "ring: io_uring_submit_and_get_"
					"events");
		r->unsubmitted = 0;
		if (!reap_cqes(r) || !r->unsubmitted)
			break;
	}
	return 0;
}

int ring_drain(struct ush_ring *r)
{
	int ret = 0;
	while (r->inflight && !ret)
		ret = ring_reap(r, 1);
	return ret;
}

/* ------------------------------------------------------------- file table */

int ring_file_add(struct ush_ring *r, int fd)
{
	if (!r->files || r->file_slots == UINT64_MAX)
		return -1;
	int slot = __builtin_ctzll(~r->file_slots);
	if (io_uring_register_files_update(&r->uring, (unsigned)slot, &fd,
					   1) != 1)
		return -1;
	r->file_slots |= 1ull << slot;
	return slot;
}

void ring_file_del(struct ush_ring *r, int slot)
{
	int none = -1;
	if (slot < 0)
		return;
	/* In a forked child the table is the parent's. */
	if (!ring_forked(r))
		io_uring_register_files_update(&r->uring, (unsigned)slot,
					       &none, 1);
	r->file_slots &= ~(1ull << slot);
}

void ring_teardown_failed(int err, unsigned *fails)
{
	if (!err) {
		*fails = 0;
		return;
	}
	if (++*fails >= 1000)
		ushi_panic("ring: reaping in-flight operations failed %u times "
			  "in a row (%s): their memory cannot be freed safely",
			  *fails, ush_strerror(err));
}
