/*
 * The ring's second backend, for where io_uring cannot be set up (a
 * seccomp filter such as Docker's default profile, the io_uring_disabled
 * sysctl, a kernel without it): the same ops done with plain system
 * calls. ring.c queues an op here where it would prepare an SQE; the
 * backend runs its syscall once it can proceed without blocking (files
 * at once, sockets when poll() says so) and holds the result as a CQE
 * would be held; ring.c takes the results and dispatches them exactly
 * as it dispatches CQEs, so nothing above the ring knows which backend
 * runs. Multishot recv takes its buffers from the caller's provided-
 * buffer ring in user memory, as the kernel would.
 */
#ifndef USHI_RING_SYNC_H
#define USHI_RING_SYNC_H

#include "core/ring.h"

#include <poll.h>

#define USHI_SYNC_BUF_RINGS 4

struct ushi_sync {
	struct ushi_op *pend, **pend_tail; /* queued: syscall still to run */
	struct ushi_op *done, **done_tail; /* results not yet dispatched */
	struct pollfd *pfd;                /* one per op (iodepth) */
	struct ushi_op **pop;              /* the op of each pfd */
	unsigned cap;
	struct ushi_sync_br {
		struct io_uring_buf_ring *br;
		uint16_t mask, head, bgid;
	} br[USHI_SYNC_BUF_RINGS];
	unsigned nbr;
};

/* True for the errors that mean "no io_uring here" (EPERM, EACCES,
 * ENOSYS); logs why, once per process, the first time. what names the
 * call that failed. */
bool ushi_uring_refused(int err, const char *what);

/* Room for iodepth ops: 0 or -ENOMEM. */
int sync_init(struct ushi_sync *s, unsigned iodepth);
void sync_destroy(struct ushi_sync *s);
/* Queues op (any kind, as ring.c would prepare it); a send with a
 * timeout fails with -ECANCELED if it cannot proceed for that long. */
void sync_queue(struct ushi_sync *s, struct ushi_op *op);
/* The equivalent of io_uring_register_buf_ring(): 0 or -errno. */
int sync_buf_ring(struct ushi_sync *s, const struct io_uring_buf_reg *reg);
/* Runs the syscalls of the queued ops that can proceed now; never runs
 * a callback. */
void sync_issue(struct ushi_sync *s);
/* Waits until a queued op can proceed, a send's timeout passes, or the
 * clock reaches end_ns; returns at once when a result is held. */
void sync_wait(struct ushi_sync *s, uint64_t end_ns);
/* The oldest result held: its op (NULL: none), *res and the CQE flags
 * io_uring would have set. */
struct ushi_op *sync_pop(struct ushi_sync *s, int *res, unsigned *flags);

#endif
