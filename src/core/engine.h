/*
 * I/O engines: what runs a ring's ops. The ring (ring.c) owns the op
 * records and their life (short transfers resubmitted, zero-copy
 * notifications awaited, multishot ops ended, callbacks run); an engine
 * only carries ops to the kernel and brings their results back, each
 * through ring_complete() exactly as a CQE would report it. So nothing
 * above the ring knows which engine runs, and a second engine is one
 * file, not a branch in every caller (fio's ioengine_ops).
 *
 *   engine_uring.c  io_uring: SQEs, registered buffers and files, link
 *                   timeouts, CQEs
 *   engine_sync.c   plain system calls (pwrite, pread, send, recv,
 *                   poll), for where io_uring is refused: a seccomp
 *                   filter, the io_uring_disabled sysctl, a kernel
 *                   without it
 *
 * A ring tries io_uring first; where the kernel refuses it, it runs the
 * sync engine instead (ring.c, engine_create()). A reader's ring starts
 * on the sync engine and moves to io_uring once it reads ahead
 * (ring_use_uring()).
 */
#ifndef USHI_ENGINE_H
#define USHI_ENGINE_H

#include "core/ring.h"

/* What every engine keeps; each embeds it first. */
struct ushi_engine {
	const struct ushi_engine_ops *ops;
	struct ush_ring *ring;
	unsigned setup_flags; /* io_uring's, as set up (0: none) */
	bool fixedbufs;       /* the pool is registered */
};

struct ushi_engine_ops {
	const char *name;
	/* Sets the engine up for ring r (ring_opts(), ring_pool() ready).
	 * Returns 0 and *out, -errno, or a positive errno where the kernel
	 * refuses the engine (the ring then runs the next one). */
	int (*create)(struct ush_ring *r, struct ushi_engine **out);
	/* Frees what create made; the ring has drained its ops first
	 * (but in a fork() child: ring_forked()). */
	void (*destroy)(struct ushi_engine *e);
	/* Queues what is left of op (writes and sends from io.done; armed
	 * ops as they are set): it goes out with the next submit or reap. */
	void (*queue)(struct ushi_engine *e, struct ushi_op *op);
	/* Sends what was queued on its way: 0 or -errno. */
	int (*submit)(struct ushi_engine *e);
	/* Submits, waits until at least min results came back or
	 * timeout_ns passed (UINT64_MAX: no limit), and hands every result
	 * available to ring_complete(). Returns 0, -ETIME when a timeout
	 * passed without a result, or -errno. */
	int (*reap)(struct ushi_engine *e, unsigned min, uint64_t timeout_ns);
	/* Submits and hands over the results available without waiting,
	 * then once more for what their callbacks queued. 0 or -errno. */
	int (*poll)(struct ushi_engine *e);
	/* io_uring_register_buf_ring() or its equivalent: 0 or -errno. */
	int (*buf_ring)(struct ushi_engine *e, struct io_uring_buf_reg *reg);
	/* A registered file slot for fd, or -1: use the fd. */
	int (*file_add)(struct ushi_engine *e, int fd);
	void (*file_del)(struct ushi_engine *e, int slot);
};

extern const struct ushi_engine_ops ushi_engine_uring;
extern const struct ushi_engine_ops ushi_engine_sync;

/* The engines' way back: one result of op, with the CQE flags io_uring
 * would set (IORING_CQE_F_MORE, _NOTIF, _BUFFER). */
void ring_complete(struct ush_ring *r, struct ushi_op *op, int res,
		   unsigned flags);

/* Runs a blocking write (io.blocking) now with pwrite, on whatever
 * engine the ring has, and hands its result to ring_complete(). */
void ushi_sync_run(struct ush_ring *r, struct ushi_op *op);

/* True for the errors that mean "no io_uring here" (EPERM, EACCES,
 * ENOSYS); logs why, once per process, the first time. what names the
 * call that failed. */
bool ushi_uring_refused(int err, const char *what);

#endif
