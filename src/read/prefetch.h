/*
 * Reads ahead in one map's data file: the frames of the partition, whose
 * entries the reader found in the index, several in flight as read ops
 * on the reader's ring (reader.h), each into its own aligned buffer.
 * Frames that lie one after the other in the file (the disk sink writes
 * a partition's large frames in runs, docs/format.md §2.2) are read
 * together, up to USHI_PREFETCH_READ bytes a read. A frame of at least
 * USHI_PACK_MIN bytes is read with O_DIRECT, the aligned range around it
 * (no page-cache copy); smaller frames are read through the page cache,
 * which serves the neighbours other partitions' readers will ask for.
 * Whatever engine runs the ring runs the reads: io_uring from the second
 * frame on (ring_use_uring()), or plain pread where the kernel refuses
 * io_uring.
 */
#ifndef USHI_PREFETCH_H
#define USHI_PREFETCH_H

#include "core/ring.h"
#include "core/spill.h"

#ifndef USHI_PREFETCH_DEPTH /* -DUSHI_PREFETCH_DEPTH=1: one read at a time */
#define USHI_PREFETCH_DEPTH 16u
#endif
#define USHI_PREFETCH_BYTES (8u << 20) /* most bytes read ahead */
/* Most bytes of adjacent frames read at once: as many reads of that
 * size as the depth hold no more than the bytes read ahead. */
#define USHI_PREFETCH_READ (USHI_PREFETCH_BYTES / USHI_PREFETCH_DEPTH)

struct prefetch;

struct prefetch_slot {
	struct prefetch *pf;
	uint8_t *buf;
	size_t cap;
	size_t first, count; /* the entries it holds */
	uint32_t skew; /* the first frame's offset in buf (O_DIRECT) */
	uint32_t len;  /* bytes asked for */
	uint32_t need; /* bytes the last frame ends at in buf */
	uint32_t got;  /* bytes read so far */
	uint64_t off;  /* file offset of buf[0] */
	int res;       /* once done: 0, -errno or USH_ECORRUPT */
	pid_t tid;     /* the thread that issued the read in flight */
	bool done;
};

struct prefetch {
	struct ush_ring *ring; /* the reader's: prefetch_init() */
	int fd, dfd;      /* the data file, buffered and O_DIRECT (or -1) */
	const struct spill_entry *ents;
	size_t n, next;   /* entries; next to issue */
	size_t issued, taken; /* reads issued; reads whose frames are all
				 taken (read k is in slot k % depth) */
	size_t ahead;     /* bytes issued and not yet taken */
	unsigned inflight;
	struct prefetch_slot slot[USHI_PREFETCH_DEPTH];
};

/* Reads go through ring (at least USHI_PREFETCH_DEPTH ops deep), which
 * outlives pf. */
void prefetch_init(struct prefetch *pf, struct ush_ring *ring);
/* A map's n entries (kept by the caller until the next reset) in its
 * data file fd; dfd: the same file opened O_DIRECT, or -1. Nothing of
 * the previous map may be in flight (prefetch_drain). */
void prefetch_reset(struct prefetch *pf, int fd, int dfd,
		    const struct spill_entry *ents, size_t n);
/* The frame of entry i, the one after the last taken: *frame points at
 * its e->len bytes, valid until the next call. Returns 0, -errno, or
 * USH_ECORRUPT when the file ends before the frame does. */
int prefetch_take(struct prefetch *pf, size_t i, const uint8_t **frame);
/* Waits for every read in flight (before fds or buffers go). */
void prefetch_drain(struct prefetch *pf);
/* In a fork() child: its reads in flight are the parent's, completing on
 * the ring both map, and are never waited for here (a reap would take
 * the parent's completions). Then drain and destroy only free. */
void prefetch_forget(struct prefetch *pf);
void prefetch_destroy(struct prefetch *pf);

#endif
