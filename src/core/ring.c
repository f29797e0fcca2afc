/*
 * The ring: its pool, codec contexts and op records; ops by kind (writes,
 * sends, armed ops), each queued and completed in its own section; then
 * submission, reaping and dispatch. The engine (engine.h) carries the
 * ops to the kernel and brings every result back to ring_complete().
 */
#include "core/engine.h"
#include "core/codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct ush_ring {
	struct ushi_engine *eng;
	struct ushi_pool pool;
	struct ushi_codec_ctx codec;
	struct ush_ring_opts opts;
	pid_t owner;         /* the creator thread: the only one served */
	unsigned gen;        /* ushi_fork_gen at creation */
	unsigned writers;    /* open on it: each uses the pool */
	bool unbound;        /* a reader's: serves any thread (one at a time) */
	bool uring_tried;    /* unbound: ring_use_uring() was called */
	int refused;         /* -errno io_uring_setup gave: the sync engine */
	struct ushi_op *ops, *free_ops;
	unsigned inflight;   /* ops started, not completed */
	unsigned armed;      /* armed ops that wait for peers */
	/* The kind of op whose callback runs now, +1 (0: none): a reap
	 * inside a callback is a bug (ring.h, ushi_op_cb). */
	unsigned in_cb;
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

int ring_check_thread(const struct ush_ring *r, const char *who)
{
	if (likely((r->unbound || r->owner == ushi_tid()) &&
		   !ushi_forked(r->gen)))
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

bool ring_unbound(const struct ush_ring *r)
{
	return r->unbound;
}

void ring_writers(struct ush_ring *r, int n)
{
	r->writers += (unsigned)n;
}

/* io_uring, or the sync engine where the kernel refuses io_uring. There
 * nothing is registered: fixedbufs=1 cannot fail, since the log has
 * already said why nothing is. An unbound ring starts on the sync engine
 * (ring_use_uring()). */
static int engine_create(struct ush_ring *r)
{
	if (r->unbound)
		return ushi_engine_sync.create(r, &r->eng);
	int ret = ushi_engine_uring.create(r, &r->eng);
	if (ret > 0) {
		r->refused = -ret;
		ret = ushi_engine_sync.create(r, &r->eng);
	}
	return ret;
}

bool ring_use_uring(struct ush_ring *r)
{
	if (!r->unbound || r->uring_tried)
		return r->eng->ops == &ushi_engine_uring;
	r->uring_tried = true;
	if (r->inflight || r->armed)
		ushi_panic("ring: engine changed with %u ops in flight, %u armed",
			   r->inflight, r->armed);
	struct ushi_engine *e;
	int ret = ushi_engine_uring.create(r, &e);
	if (ret > 0)
		r->refused = -ret;
	if (ret)
		return false;
	r->eng->ops->destroy(r->eng);
	r->eng = e;
	return true;
}

/* The one constructor of rings: ush_ring_create()'s, and a reader's. */
static int ring_create(struct ush_ring **out, const struct ush_ring_opts *opts,
		       bool unbound)
{
	*out = NULL;
	int ret = check_opts(opts);
	if (ret)
		return ret;
	struct ush_ring *r = ushi_calloc(1, sizeof(*r));
	if (!r)
		return ushi_fail(-ENOMEM, "ring: allocation");
	r->unbound = unbound;
	r->owner = ushi_tid();
	r->gen = ushi_fork_gen;
	r->opts = *opts;
	r->opts.pool_bytes = unbound ? 0 : ALIGN_UP(opts->pool_bytes,
						     opts->push_size);
	ret = unbound ? 0 : pool_init(&r->pool, r->opts.pool_bytes,
				      r->opts.push_size);
	if (ret) {
		ushi_fail(ret, "ring: mapping a %zu KiB pool",
			 r->opts.pool_bytes >> 10);
		goto fail;
	}
	ret = codec_init(&r->codec);
	/* A writer's compressor now, not with its first batch; a reader's
	 * (unbound) ring makes the decompressor its frames name when the
	 * first comes. */
	if (!ret && !unbound)
		ret = codec_prepare(&r->codec, r->opts.codec);
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
	ret = engine_create(r);
	if (ret)
		goto fail;
	*out = r;
	return 0;
fail:
	ush_ring_free(r);
	return ret;
}

int ush_ring_create(ush_ring **out, const struct ush_ring_opts *opts)
{
	struct ush_ring_opts o;
	*out = NULL;
	int ret = ushi_opts_load(&o, &ring_defaults, sizeof(o), opts,
				 "ring options");
	return ret ? ret : ring_create(out, &o, false);
}

int ring_create_unbound(struct ush_ring **out, unsigned iodepth)
{
	struct ush_ring_opts o = ring_defaults;
	o.iodepth = iodepth;
	o.fixedbufs = 0;
	return ring_create(out, &o, true);
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
	/* Drain so no callback can fire into freed owners; armed ops are
	 * dropped with the engine. */
	if (r->eng) {
		if (!child)
			ring_drain(r);
		r->eng->ops->destroy(r->eng);
	}
	pool_destroy(&r->pool);
	codec_destroy(&r->codec);
	ushi_free(r->ops);
	ushi_free(r);
}

void ush_ring_info_size(const ush_ring *r, struct ush_ring_info *info,
			size_t size)
{
	struct ush_ring_info i = {
		.setup_flags = r->eng->setup_flags,
		.fixedbufs = r->eng->fixedbufs,
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

int ring_decompress(struct ush_ring *r, enum ush_codec codec, const void *src,
		    size_t n, void *dst, size_t raw)
{
	return codec_decompress(&r->codec, codec, src, n, dst, raw);
}

int ring_register_buf_ring(struct ush_ring *r, struct io_uring_buf_reg *reg)
{
	return r->eng->ops->buf_ring(r->eng, reg);
}

/* ------------------------------------------------------------- op records */

/* A completion callback never reaps (ring.h, ushi_op_cb): the CQEs that
 * its own reap is handing out are not consumed yet. */
static void check_not_in_cb(const struct ush_ring *r, const char *who)
{
	if (r->in_cb)
		ushi_panic("ring: %s inside the completion callback of an op of "
			  "kind %u: a completion callback must never reap (the "
			  "completions being handed out would run again)",
			  who, r->in_cb - 1);
}

int ring_op_get(struct ush_ring *r, struct ushi_op **op)
{
	if (!r->free_ops)
		check_not_in_cb(r, "ring_op_get() with no free op");
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

/* (Re)queues what is left of a write or a send; a blocking write runs
 * and completes now. */
static void queue(struct ush_ring *r, struct ushi_op *op)
{
	if (op->kind == OP_WRITE && op->io.blocking)
		ushi_sync_run(r, op);
	else
		r->eng->ops->queue(r->eng, op);
}

static void complete_write(struct ush_ring *r, struct ushi_op *op, int res)
{
	if (io_over(&op->io, &res))
		finish(r, op, res);
	else
		queue(r, op);
}

/* ------------------------------------------------------------------ sends */

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
		queue(r, op);
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
	case OP_SEND:
	case OP_SEND_ZC:
	case OP_FSYNC:
		queue(r, op);
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
	queue(r, op);
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

void ring_fsync(struct ush_ring *r, struct ushi_op *op, int fd, int slot)
{
	op->kind = OP_FSYNC;
	op->io.len = op->io.done = 0;
	op->io.fd = slot >= 0 ? slot : fd;
	op->io.fixed_file = slot >= 0;
	ring_start(r, op);
}

/* -------------------------------------------------------------- armed ops */

void ring_arm(struct ush_ring *r, struct ushi_op *op)
{
	if (op->kind < OP_RECV || op->kind > OP_WILLNEED)
		ushi_panic("ring: op kind %d cannot be armed", op->kind);
	r->armed++;
	queue(r, op);
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
	return r->eng->ops->submit(r->eng);
}

void ring_complete(struct ush_ring *r, struct ushi_op *op, int res,
		   unsigned flags)
{
	unsigned outer = r->in_cb; /* a blocking write's, in ring_start() */
	r->in_cb = (unsigned)op->kind + 1;
	switch (op->kind) {
	case OP_WRITE:
	case OP_FSYNC: /* a write of no bytes: retried on EINTR/EAGAIN */
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
	r->in_cb = outer;
}

int ring_reap_timeout(struct ush_ring *r, unsigned min, uint64_t timeout_ns)
{
	check_not_in_cb(r, "ring_reap_timeout()");
	return r->eng->ops->reap(r->eng, min, timeout_ns);
}

int ring_reap(struct ush_ring *r, unsigned min)
{
	check_not_in_cb(r, "ring_reap()");
	if (!r->inflight && !r->armed)
		return 0;
	return r->eng->ops->reap(r->eng, min, UINT64_MAX);
}

int ring_poll(struct ush_ring *r)
{
	check_not_in_cb(r, "ring_poll()");
	return r->eng->ops->poll(r->eng);
}

int ring_drain(struct ush_ring *r)
{
	check_not_in_cb(r, "ring_drain()");
	int ret = 0;
	while (r->inflight && !ret)
		ret = ring_reap(r, 1);
	return ret;
}

/* ------------------------------------------------------------- file table */

int ring_file_add(struct ush_ring *r, int fd)
{
	return r->eng->ops->file_add(r->eng, fd);
}

void ring_file_del(struct ush_ring *r, int slot)
{
	if (slot >= 0)
		r->eng->ops->file_del(r->eng, slot);
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
