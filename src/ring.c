/* io_uring setup with flag fallback, fixed buffers/files, op completion. */
#include "ring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#define USH_FILE_SLOTS 64

void ush_ring_opts_init(struct ush_ring_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->iodepth = 64;
	o->pool_bytes = 64u << 20;
	o->push_size = 64u << 10;
	o->fixedbufs = -1;
	o->codec = USH_CODEC_NONE;
	o->level = 1;
}

static int check_opts(const struct ush_ring_opts *o)
{
	if (o->iodepth < 1 || o->iodepth > 4096)
		return ush_fail(-EINVAL, "ring: iodepth %u out of range 1..4096",
				o->iodepth);
	if (o->push_size < USH_BUF_MIN || o->push_size > (64u << 20) ||
	    (o->push_size & (o->push_size - 1)))
		return ush_fail(-EINVAL, "ring: push size %zu is not a power "
				"of two in 4 KiB..64 MiB", o->push_size);
	if (o->pool_bytes < 2 * o->push_size || o->pool_bytes > (1u << 30))
		return ush_fail(-EINVAL, "ring: pool of %zu bytes must hold two "
				"push buffers (%zu) and stay within 1 GiB",
				o->pool_bytes, 2 * o->push_size);
	if (o->codec > USH_CODEC_ZSTD)
		return ush_fail(-EINVAL, "ring: unknown codec %d", o->codec);
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
		/* Two CQEs per op at most (SEND_ZC notif), plus slack. */
		p.cq_entries = 4 * r->opts.iodepth;
		p.sq_thread_idle = 100;
		ret = io_uring_queue_init_params(r->opts.iodepth, &r->uring, &p);
		if (ret == 0) {
			r->setup_flags = p.flags;
			return 0;
		}
		if (ret != -EINVAL)
			break;
	}
	return ush_fail(ret, "ring: io_uring_queue_init(%u entries%s)",
			r->opts.iodepth, r->opts.sqpoll ? ", SQPOLL" : "");
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
		return ush_fail(ret, "ring: registering a %zu KiB buffer pool "
				"failed (RLIMIT_MEMLOCK %llu KiB); %s",
				r->pool.bytes >> 10,
				(unsigned long long)rl.rlim_cur >> 10, fix);
	ush_warn("registering a %zu KiB buffer pool failed (%s, "
		 "RLIMIT_MEMLOCK %llu KiB): falling back to unregistered "
		 "buffers, which costs a page-pinning per I/O; to fix: %s",
		 r->pool.bytes >> 10, ush_strerror(ret),
		 (unsigned long long)rl.rlim_cur >> 10, fix);
	return 0;
}

int ush_ring_create(ush_ring **out, const struct ush_ring_opts *opts)
{
	struct ush_ring_opts defaults;
	*out = NULL;
	if (!opts) {
		ush_ring_opts_init(&defaults);
		opts = &defaults;
	}
	int ret = check_opts(opts);
	if (ret)
		return ret;
	struct ush_ring *r = ush_calloc(1, sizeof(*r));
	if (!r)
		return ush_fail(-ENOMEM, "ring: allocation");
	r->opts = *opts;
	r->opts.pool_bytes = ALIGN_UP(opts->pool_bytes, opts->push_size);
	r->uring.ring_fd = -1;
	ret = pool_init(&r->pool, r->opts.pool_bytes, r->opts.push_size);
	if (ret) {
		ush_fail(ret, "ring: mapping a %zu KiB pool",
			 r->opts.pool_bytes >> 10);
		goto fail;
	}
	ret = codec_init(&r->codec);
	if (ret) {
		ush_fail(ret, "ring: codec contexts");
		goto fail;
	}
	r->ops = ush_calloc(r->opts.iodepth, sizeof(*r->ops));
	if (!r->ops) {
		ret = ush_fail(-ENOMEM, "ring: %u ops", r->opts.iodepth);
		goto fail;
	}
	for (unsigned i = 0; i < r->opts.iodepth; i++) {
		r->ops[i].next_free = r->free_ops;
		r->free_ops = &r->ops[i];
	}
	ret = setup_uring(r);
	if (ret)
		goto fail;
	io_uring_register_ring_fd(&r->uring); /* an optimisation only */
	r->files = io_uring_register_files_sparse(&r->uring,
						  USH_FILE_SLOTS) == 0;
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
	if (r->uring.ring_fd >= 0) {
		/* Drain so no callback can fire into freed owners. */
		while (r->inflight && ring_reap(r, 1) == 0)
			;
		io_uring_queue_exit(&r->uring);
	}
	pool_destroy(&r->pool);
	codec_destroy(&r->codec);
	ush_free(r->ops);
	ush_free(r);
}

void ush_ring_info(const ush_ring *r, struct ush_ring_info *info)
{
	info->setup_flags = r->setup_flags;
	info->fixedbufs = r->fixedbufs;
	info->iodepth = r->opts.iodepth;
	info->pool_bytes = r->pool.bytes;
	info->push_size = r->opts.push_size;
	info->pool_idle_bytes = r->pool.idle_bytes;
}

int ring_op_get(struct ush_ring *r, struct ush_op **op)
{
	while (!r->free_ops) {
		int ret = ring_reap(r, 1);
		if (ret)
			return ret;
	}
	struct ush_op *o = r->free_ops;
	r->free_ops = o->next_free;
	memset(o, 0, sizeof(*o));
	*op = o;
	return 0;
}

static struct io_uring_sqe *get_sqe(struct ush_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
	if (!sqe) {
		/* The SQ holds iodepth entries and at most iodepth ops
		 * exist, so one submit always frees a slot. */
		ring_submit(r);
		sqe = io_uring_get_sqe(&r->uring);
		if (!sqe)
			ush_panic("ring: no SQE after submit");
	}
	return sqe;
}

static void prep_write(struct ush_ring *r, struct ush_op *op)
{
	struct io_uring_sqe *sqe = get_sqe(r);
	const uint8_t *a = op->addr + op->done;
	unsigned n = op->len - op->done;
	if (op->buf && r->fixedbufs)
		io_uring_prep_write_fixed(sqe, op->fd, a, n, op->off + op->done,
					  op->buf->bufidx);
	else
		io_uring_prep_write(sqe, op->fd, a, n, op->off + op->done);
	if (op->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, op);
	r->unsubmitted++;
}

void ring_write(struct ush_ring *r, struct ush_op *op)
{
	r->inflight++;
	op->t0 = ush_now_ns();
	prep_write(r, op);
}

int ring_submit(struct ush_ring *r)
{
	if (!r->unsubmitted)
		return 0;
	int ret;
	do
		ret = io_uring_submit(&r->uring);
	while (ret == -EINTR);
	if (ret < 0)
		return ush_fail(ret, "ring: io_uring_submit");
	r->unsubmitted = 0;
	return 0;
}

static void complete(struct ush_ring *r, struct ush_op *op, int res)
{
	if (res == -EAGAIN || res == -EINTR) {
		prep_write(r, op);
		return;
	}
	if (res > 0) {
		op->done += (uint32_t)res;
		if (op->done < op->len) {
			prep_write(r, op); /* short write: the rest */
			return;
		}
		res = (int)op->done;
	} else if (res == 0 && op->len) {
		res = -EIO; /* no progress: treat like a failed write */
	}
	r->inflight--;
	op->cb(op, res);
	op->next_free = r->free_ops;
	r->free_ops = op;
}

int ring_reap(struct ush_ring *r, unsigned min)
{
	if (!r->inflight)
		return 0;
	int ret;
	do
		ret = io_uring_submit_and_wait(&r->uring, min);
	while (ret == -EINTR);
	if (ret < 0 && ret != -EBUSY && ret != -ETIME)
		return ush_fail(ret, "ring: io_uring_submit_and_wait");
	r->unsubmitted = 0;
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	io_uring_for_each_cqe(&r->uring, head, cqe)
	{
		seen++;
		complete(r, io_uring_cqe_get_data(cqe), cqe->res);
	}
	io_uring_cq_advance(&r->uring, seen);
	return 0;
}

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
	io_uring_register_files_update(&r->uring, (unsigned)slot, &none, 1);
	r->file_slots &= ~(1ull << slot);
}
