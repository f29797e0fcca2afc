/*
 * One io_uring per thread, with its buffer pool and codec contexts.
 * Operations are preallocated records (at most iodepth in flight); each
 * SQE's user_data points at one. The ring resubmits short writes, retries
 * EAGAIN/EINTR, and reports any other result to the operation's callback.
 */
#ifndef USH_RING_H
#define USH_RING_H

#include "codec.h"
#include "pool.h"

#include <liburing.h>

struct ush_op;
/* res: bytes transferred (all of len) or a negative errno. The callback
 * owns op->buf from here on; the ring recycles op itself afterwards. */
typedef void (*ush_op_cb)(struct ush_op *op, int res);

struct ush_op {
	ush_op_cb cb;
	void *owner;
	struct ush_buf *buf; /* pool buffer written from, or NULL */
	const uint8_t *addr; /* first byte to write */
	uint64_t off;
	uint32_t len, done;
	int fd;
	bool fixed_file;     /* fd is a registered file slot */
	uint64_t t0;         /* ush_now_ns() at submission */
	struct ush_op *next_free;
};

struct ush_ring {
	struct io_uring uring;
	struct ush_pool pool;
	struct ush_codec_ctx codec;
	struct ush_ring_opts opts;
	unsigned setup_flags;
	bool fixedbufs;
	bool files;          /* sparse file table registered */
	uint64_t file_slots; /* bitmap of the 64 file slots in use */
	struct ush_op *ops, *free_ops;
	unsigned inflight;   /* ops submitted or queued, not completed */
	unsigned unsubmitted;
};

/* Takes a free op, reaping completions while all iodepth are in flight.
 * Returns 0 and *op, or a negative error from io_uring_enter. */
int ring_op_get(struct ush_ring *r, struct ush_op **op);
/* Queues op as a write (fixed-buffer when op->buf is registered). The
 * SQE is submitted by the next ring_submit() or ring_reap(). */
void ring_write(struct ush_ring *r, struct ush_op *op);
int ring_submit(struct ush_ring *r);
/* Submits, waits for at least min completions (if any are in flight), and
 * runs the callbacks of all available ones. Returns 0 or -errno. */
int ring_reap(struct ush_ring *r, unsigned min);
/* Registers fd in the ring's file table: returns the slot, or -1 when the
 * caller should use the plain fd. */
int ring_file_add(struct ush_ring *r, int fd);
void ring_file_del(struct ush_ring *r, int slot);

#endif
