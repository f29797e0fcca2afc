/*
 * One io_uring per thread, with its buffer pool and codec contexts: the
 * one set of contexts, for both directions (a writer's sinks compress
 * with their ring's, a reader decompresses with its own ring's).
 * Operations are preallocated records (at most iodepth exist); each SQE's
 * user_data points at one. Writes and sends are started (ring_start()):
 * they are in flight until their callback, and the ring resubmits short
 * ones, retries EAGAIN/EINTR and reports any other result. Receives,
 * accepts and reads are armed (ring_arm()): they wait for peers, and
 * every CQE reaches the callback.
 *
 * An engine (engine.h) runs the ops: io_uring, or where io_uring is
 * refused, plain system calls, behind the same functions and callbacks.
 *
 * struct ush_ring is private to ring.c; other modules use the functions
 * below.
 */
#ifndef USHI_RING_H
#define USHI_RING_H

#include "core/pool.h"

#include <liburing.h>

struct ushi_op;
/*
 * res: bytes transferred (all of len) or a negative errno. The callback
 * owns the op's memory (io.buf, io.addr) from here on; the ring recycles
 * op itself afterwards (multishot ops: after the CQE without
 * IORING_CQE_F_MORE).
 *
 * A completion callback never reaps. Callbacks run inside a reap, and
 * the io_uring engine advances the CQ only once every callback of the
 * batch has returned (engine_uring.c, reap_cqes()), so a reap inside a
 * callback would hand the same CQEs out again. From a callback, call
 * neither ring_reap(), ring_reap_timeout(), ring_poll() nor ring_drain(),
 * and ring_op_get() only when ring_op_ready() (else it would reap); to
 * wait for more, return and let the caller's loop reap. Queueing is fine:
 * ring_start(), ring_arm(), ring_send_own(), ring_send_end() and
 * ring_submit() are safe in a callback. ring.c checks the rule in every
 * build: a reap inside a callback aborts, naming the reap and the op
 * kind whose callback made it.
 */
typedef void (*ushi_op_cb)(struct ushi_op *op, int res);

/* What an op does, and so which payload of struct ushi_op it uses;
 * OP_WRITE is the zero default. */
enum ushi_op_kind {
	OP_WRITE = 0,  /* io */
	OP_SEND,       /* io + send */
	OP_SEND_ZC,    /* io + send, zero-copy */
	OP_SENDMSG,    /* io + send: send.msg, io.len bytes in all */
	OP_RECV,       /* arm: single shot into addr/len */
	OP_RECV_MS,    /* arm: multishot (or once) from provided group bgid */
	OP_ACCEPT_MS,  /* arm: multishot accept */
	OP_READ,       /* arm: single shot into addr/len at off */
	OP_WILLNEED,   /* arm: the page cache to read [off, off + len) of fd
			  ahead (posix_fadvise WILLNEED), asynchronously */
	OP_FSYNC,      /* io: fdatasync of io.fd (no bytes): started */
};

/* liburing 2.3's header predates the zero-copy usage report (6.2). */
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

/* Writes and sends: len bytes at addr to fd. Set by the submitter, but
 * done and t0, which the ring keeps. */
struct ushi_io {
	struct ushi_buf *buf; /* pool buffer addr lies in, or NULL */
	const uint8_t *addr;  /* first byte to write */
	uint64_t off;         /* file offset (writes) */
	uint32_t len;
	uint32_t done;        /* ring: bytes transferred so far */
	int fd;
	bool fixed_file;      /* fd is a registered file slot */
	/* OP_WRITE: run at once with a blocking system call (the psync
	 * ioengine), whatever the ring's engine; the op is complete, its
	 * callback run, when ring_start() returns. fd is a plain one. */
	bool blocking;
	uint64_t t0;          /* ring: ushi_now_ns() at ring_start() */
};

/* What sends add to their io. */
struct ushi_send {
	uint32_t timeout_ms;  /* cancel after this long (0: never) */
	/* Called once all bytes are sent (or failed), before any zero-copy
	 * notification: the next send on the socket may start then. */
	ushi_op_cb sent_cb;
	/* The submitter's own link, for a queue of sends it holds back
	 * (one send at a time per socket); the ring never touches it. */
	struct ushi_op *qnext;
	/* OP_SENDMSG: what to send (its iovecs must stay put until the
	 * op's callback). */
	struct msghdr *msg;
	/* Sends driven by their submitter (ring_send_own()), which sees
	 * every result in own_cb and decides what comes next. */
	ushi_op_cb own_cb;
	/* The submitter's op, reused: ring_send_end() does not recycle it
	 * (nor calls cb); ring_op_put() returns it at last. */
	bool keep;
	/* Kept by the ring. */
	uint8_t notifs;       /* SEND_ZC notifications still due */
	bool sent;            /* SEND_ZC: data done, waiting for notifs */
	int res;              /* SEND_ZC: result held until the last notif */
	uint32_t zc_notifs, zc_copied; /* usage reports seen */
	struct __kernel_timespec ts;   /* the link timeout's */
};

/* Armed ops: what each kind reads is listed in enum ushi_op_kind. */
struct ushi_armed {
	int fd;
	uint8_t *addr;
	uint32_t len;
	uint64_t off;
	uint16_t bgid;
	/* OP_READ: the pool buffer addr lies in, or NULL; with one, the
	 * read is a READ_FIXED from the registered pool. */
	struct ushi_buf *buf;
	/* OP_RECV_MS: one receive only, so that the owner may choose its
	 * next buffer itself (the worker's in-place receive). */
	bool once;
	/* OP_RECV/OP_READ: set by the callback to be armed again (with the
	 * fields it updated) instead of recycled. */
	bool rearm;
};

struct ushi_op {
	ushi_op_cb cb;
	void *owner;
	uint8_t kind;              /* enum ushi_op_kind: the live payload */
	uint32_t cqe_flags;        /* ring: the CQE's, for cb (armed ops) */
	struct ushi_op *next_free; /* ring-private: its free list */
	struct {                   /* the sync engine's (engine_sync.c) */
		struct ushi_op *next;  /* its queue or its results */
		uint64_t deadline;     /* a send's timeout (0: none) */
		int res;
		unsigned flags;
		bool ready;            /* may run: new, or poll() said so */
	} sync;
	union {
		struct {
			struct ushi_io io;     /* OP_WRITE, OP_SEND* */
			struct ushi_send send; /* OP_SEND* */
		};
		struct ushi_armed arm;         /* OP_RECV, OP_RECV_MS,
						  OP_ACCEPT_MS, OP_READ */
	};
};

/* Takes a free op, zeroed, reaping completions while all iodepth are in
 * use (so, in a completion callback, only when ring_op_ready()). Returns 0
 * and *op, or a negative error from io_uring_enter. */
int ring_op_get(struct ush_ring *r, struct ushi_op **op);
/*
 * Queues op (OP_WRITE, OP_SEND or OP_SEND_ZC) for its io.len bytes;
 * short ones are resubmitted. Writes and SEND_ZC from a pool buffer use
 * the registered pool. SEND_ZC reports usage, and its callback fires
 * only after every notification CQE, so io.buf may go back to the pool
 * then. With send.timeout_ms, a send that makes no progress for that
 * long fails with -ECANCELED. The SQEs go out with the next ring_submit()
 * or reap; a blocking write (io.blocking) is done, its callback run, on
 * return.
 */
void ring_start(struct ush_ring *r, struct ushi_op *op);
/*
 * Queues what is left of send op (io.len - io.done bytes; an OP_SENDMSG
 * sends send.msg as the submitter set it) and never resubmits anything
 * itself: own_cb gets every first CQE as the kernel gave it (with io.done
 * counting a positive res; a short send, EAGAIN, an error) and the
 * submitter calls this again for the rest, with whatever it adds, or ends
 * the op (ring_send_end()). Started (counted in flight, timed) on the
 * first call. Safe inside a completion callback.
 */
void ring_send_own(struct ush_ring *r, struct ushi_op *op, ushi_op_cb own_cb);
/* Ends an own send with res (bytes or an error): its callback runs now,
 * or after the zero-copy notifications still due; a kept op (send.keep)
 * just stops counting in flight. */
void ring_send_end(struct ush_ring *r, struct ushi_op *op, int res);
/* Returns an op taken with ring_op_get() and not in flight. */
void ring_op_put(struct ush_ring *r, struct ushi_op *op);
/* Submits and runs the completions available, without waiting; on a
 * DEFER_TASKRUN ring the kernel's deferred work (a send's retry once the
 * socket drains) runs only inside such an entry. What the callbacks
 * queue is submitted too. Returns 0 or -errno. */
int ring_poll(struct ush_ring *r);
/* ring_start() of op as a write of len bytes at addr (inside pool buffer
 * b, or NULL) to file offset off of fd, or of its registered slot when
 * slot >= 0. The caller has set op->cb and op->owner. */
void ring_write_at(struct ush_ring *r, struct ushi_op *op, struct ushi_buf *b,
		   const uint8_t *addr, uint64_t off, uint32_t len, int fd,
		   int slot);
/*
 * ring_start() of op as an fdatasync of fd (or of its registered slot
 * when slot >= 0): res 0 or -errno. It is ordered after nothing: start
 * it once the writes it must cover have completed. (A link to the last
 * write would not do: the ring resubmits a short write, and a short
 * write breaks an io_uring link, cancelling the sync.)
 */
void ring_fsync(struct ush_ring *r, struct ushi_op *op, int fd, int slot);
/*
 * Arms op (OP_RECV, OP_RECV_MS, OP_ACCEPT_MS or OP_READ). Armed ops wait
 * for peers, so they count in ring_armed() rather than ring_inflight().
 * The callback sees op->cqe_flags; a multishot op ends with a CQE that
 * lacks IORING_CQE_F_MORE, after which the op is recycled.
 */
void ring_arm(struct ush_ring *r, struct ushi_op *op);
int ring_submit(struct ush_ring *r);
/* Like ring_reap(), but gives up after timeout_ns; returns 0 or -errno
 * (-ETIME when nothing completed in time). */
int ring_reap_timeout(struct ush_ring *r, unsigned min, uint64_t timeout_ns);
/* Submits, waits for at least min completions (if any are in flight), and
 * runs the callbacks of all available ones. Returns 0 or -errno. */
int ring_reap(struct ush_ring *r, unsigned min);
/* For teardown loops that must not free what the kernel may still write:
 * counts a failed reap in *fails (a success resets it) and aborts once
 * failures persist, rather than spin forever or free early. */
void ring_teardown_failed(int err, unsigned *fails);
/* Reaps until no started op is in flight (armed ones may stay armed).
 * Returns 0 or the reap's error. */
int ring_drain(struct ush_ring *r);

/* 0 when the calling thread created r (or r is unbound), else -EINVAL
 * with a message naming who (-EPERM in a fork() child of r's process). A
 * ring and all on it serve their creator thread only (io_uring
 * SINGLE_ISSUER, and nothing here is locked), so every entry point that
 * may submit or touch the pool checks first. */
int ring_check_thread(const struct ush_ring *r, const char *who);
/* Whether r is a fork() child's copy of its parent's ring (fork.c):
 * ring_check_thread() refuses every call then, and teardown touches
 * nothing the parent's ring still uses. */
bool ring_forked(const struct ush_ring *r);
/*
 * A reader's ring (reader.h), made by ush_ring_create()'s constructor:
 * iodepth ops and codec contexts, but no pool (a reader reads into
 * buffers of its own: a frame may exceed any push size). A reader is not
 * bound to a thread, so neither is its ring: it serves whichever thread
 * holds the reader, one at a time; ring_check_thread() passes for any
 * thread. It starts on the sync engine: an io_uring's setup and teardown
 * cost more than reading a small partition (a few hundred µs), so a
 * reader that reads one frame makes none. Returns 0 and *out (freed with
 * ush_ring_free()), or -errno.
 */
int ring_create_unbound(struct ush_ring **out, unsigned iodepth);
bool ring_unbound(const struct ush_ring *r);
/*
 * Moves an unbound ring, with nothing in flight or armed, onto io_uring,
 * once: set up without SINGLE_ISSUER (nor DEFER_TASKRUN or COOP_TASKRUN,
 * whose completions wait for the submitting thread) and without a
 * registered ring fd (registered per thread). Where the kernel refuses
 * io_uring, or where the setup fails otherwise, the ring stays on the
 * sync engine. True when r's ops run on io_uring after the call.
 */
bool ring_use_uring(struct ush_ring *r);
/* Counts n writers opened on r (negative: freed); ush_ring_free() of a
 * ring with writers open is a bug. */
void ring_writers(struct ush_ring *r, int n);

/* Ops started and not yet completed; ops armed and not yet ended. */
unsigned ring_inflight(const struct ush_ring *r);
unsigned ring_armed(const struct ush_ring *r);
/* Whether ring_op_get() would return an op without reaping. */
bool ring_op_ready(const struct ush_ring *r);
/* The options the ring runs with (pool_bytes rounded up to push_size). */
const struct ush_ring_opts *ring_opts(const struct ush_ring *r);
struct ushi_pool *ring_pool(struct ush_ring *r);
/* codec_compress() with the ring's codec, level and reused context. */
long ring_compress(struct ush_ring *r, const void *src, size_t n, void *dst,
		   size_t cap);
/* codec_decompress() with the ring's reused context. */
int ring_decompress(struct ush_ring *r, enum ush_codec codec, const void *src,
		    size_t n, void *dst, size_t raw);
/* io_uring_register_buf_ring() on the ring: returns 0 or -errno. */
int ring_register_buf_ring(struct ush_ring *r, struct io_uring_buf_reg *reg);
/* Registers fd in the ring's file table: returns the slot, or -1 when the
 * caller should use the plain fd. */
int ring_file_add(struct ush_ring *r, int fd);
void ring_file_del(struct ush_ring *r, int slot);

#endif
