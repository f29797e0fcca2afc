/*
 * One io_uring per thread, with its buffer pool and codec contexts.
 * Operations are preallocated records (at most iodepth in flight); each
 * SQE's user_data points at one. The ring resubmits short writes, retries
 * EAGAIN/EINTR, and reports any other result to the operation's callback.
 */
#ifndef USHI_RING_H
#define USHI_RING_H

#include "core/codec.h"
#include "core/pool.h"

#include <liburing.h>

struct ushi_op;
/* res: bytes transferred (all of len) or a negative errno. The callback
 * owns op->buf from here on; the ring recycles op itself afterwards
 * (multishot ops: after the CQE without IORING_CQE_F_MORE). */
typedef void (*ushi_op_cb)(struct ushi_op *op, int res);

/* What an op does; OP_WRITE is the zero default. Sends and single-shot
 * recvs are network ops (src/sink_net.c, src/worker/); the multishot
 * kinds stay armed across many CQEs (see ring_arm()). */
enum ushi_op_kind {
	OP_WRITE = 0,
	OP_SEND,
	OP_SEND_ZC,
	OP_RECV,       /* single shot into addr/len; armed, not inflight */
	OP_RECV_MS,    /* multishot recv from a provided buffer group */
	OP_ACCEPT_MS,  /* multishot accept */
	OP_READ,       /* single shot read into addr/len at off */
};

/* liburing 2.3's header predates the zero-copy usage report (6.2). */
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

struct ushi_op {
	ushi_op_cb cb;
	void *owner;
	struct ushi_buf *buf; /* pool buffer written from, or NULL */
	const uint8_t *addr; /* first byte to write */
	uint64_t off;
	uint32_t len, done;
	int fd;
	bool fixed_file;     /* fd is a registered file slot */
	uint64_t t0;         /* ushi_now_ns() at submission */
	struct ushi_op *next_free;
	uint8_t kind;        /* enum ushi_op_kind */
	uint8_t notifs;      /* SEND_ZC notifications still due */
	bool sent;           /* SEND_ZC: data done, waiting for notifs */
	uint16_t bgid;       /* OP_RECV_MS: provided buffer group */
	uint32_t cqe_flags;  /* flags of the CQE passed to cb (multishot) */
	uint32_t zc_notifs, zc_copied; /* usage reports seen */
	int res;             /* SEND_ZC: result held until the last notif */
	uint32_t timeout_ms; /* sends: cancel after this long (0: never) */
	ushi_op_cb sent_cb;   /* sends: called once all bytes are sent (or
				failed), before any zero-copy notification:
				the next send on the socket may start then */
	bool rearm;          /* OP_RECV/OP_READ: set by the callback to be
				armed again (with its updated fields)
				instead of recycled */
	struct __kernel_timespec ts;
};

struct ush_ring {
	struct io_uring uring;
	struct ushi_pool pool;
	struct ushi_codec_ctx codec;
	struct ush_ring_opts opts;
	unsigned setup_flags;
	bool fixedbufs;
	bool files;          /* sparse file table registered */
	uint64_t file_slots; /* bitmap of the 64 file slots in use */
	struct ushi_op *ops, *free_ops;
	unsigned inflight;   /* ops submitted or queued, not completed */
	unsigned armed;      /* recv/accept ops that wait for peers */
	unsigned unsubmitted;
};

/* Takes a free op, reaping completions while all iodepth are in flight.
 * Returns 0 and *op, or a negative error from io_uring_enter. */
int ring_op_get(struct ush_ring *r, struct ushi_op **op);
/* Queues op as a write (fixed-buffer when op->buf is registered). The
 * SQE is submitted by the next ring_submit() or ring_reap(). */
void ring_write(struct ush_ring *r, struct ushi_op *op);
int ring_submit(struct ush_ring *r);
/*
 * Queues op (kind OP_SEND or OP_SEND_ZC) as a send of len bytes at addr on
 * socket fd; short sends are resubmitted. SEND_ZC reports usage and its
 * callback fires only after every notification CQE, so op->buf may go
 * back to the pool then. With timeout_ms, a send that makes no progress
 * for that long fails with -ECANCELED.
 */
void ring_send(struct ush_ring *r, struct ushi_op *op);
/*
 * Arms op (OP_RECV, OP_RECV_MS, OP_ACCEPT_MS or OP_READ). Armed ops wait
 * for peers, so they count in r->armed rather than r->inflight. The
 * callback sees op->cqe_flags; a multishot op ends with a CQE that lacks
 * IORING_CQE_F_MORE, after which the op is recycled.
 */
void ring_arm(struct ush_ring *r, struct ushi_op *op);
/* Like ring_reap(), but gives up after timeout_ns; returns 0 or -errno
 * (-ETIME when nothing completed in time). */
int ring_reap_timeout(struct ush_ring *r, unsigned min, uint64_t timeout_ns);
/* Submits, waits for at least min completions (if any are in flight), and
 * runs the callbacks of all available ones. Returns 0 or -errno. */
int ring_reap(struct ush_ring *r, unsigned min);
/* Registers fd in the ring's file table: returns the slot, or -1 when the
 * caller should use the plain fd. */
int ring_file_add(struct ush_ring *r, int fd);
void ring_file_del(struct ush_ring *r, int slot);

#endif
