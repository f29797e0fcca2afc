/* The writer and the sink backends it drives (one ops table per target). */
#ifndef USHI_WRITER_H
#define USHI_WRITER_H

#include "core/frame.h"
#include "core/ring.h"
#include "core/seal.h"

#include <stdio.h>

struct ush_writer;

/* Handed-off buffers are framed and submitted this many at a time. */
#define USHI_QUEUE_BATCH 16

/* A frame in a buffer of staged frames: its offset there, its bytes
 * and partition (span_put below). */
struct ushi_span_frame {
	uint32_t at, flen, part;
};

struct ushi_sink_ops {
	const char *name;
	int (*open)(struct ush_writer *w);
	/*
	 * Takes ownership of one frame of flen bytes: in pool buffer b
	 * (state BUF_INFLIGHT), or, when b is NULL, in heap memory mem that
	 * the sink frees. On error the sink has released the frame already
	 * (writer_frame_done) and the error becomes sticky on the writer.
	 */
	int (*submit)(struct ush_writer *w, struct ushi_buf *b, uint8_t *mem,
		      uint32_t flen, uint32_t partition);
	/* Everything submitted has completed without error: publish. */
	int (*commit)(struct ush_writer *w);
	/* Nothing is in flight: drop partial output. */
	void (*abort)(struct ush_writer *w);
	/* In a fork() child (ring_forked()), at free: closes the sink's
	 * copies of its descriptors and frees its memory, and does nothing
	 * else: the files, connections and ops in flight are the parent's.
	 * Called with or without sink state. */
	void (*release)(struct ush_writer *w);
	/* Optional: waits until w->inflight is 0 (called only while it is
	 * not), for sinks whose completions a stalled peer can withhold.
	 * Returns 0 or a ring error. Without it the writer reaps. */
	int (*drain)(struct ush_writer *w);
	/* Optional: the writer handed off what it had and submits next; a
	 * sink that holds frames back to send them together starts them.
	 * Returns 0 or a ring error. */
	int (*flush)(struct ush_writer *w);
	/* Optional: the writer waits for an idle buffer; waits for a
	 * completion, or a moment for sinks that watch their peers for
	 * stalls meanwhile. Returns 0 or a ring error. Without it the
	 * writer reaps. */
	int (*reap)(struct ush_writer *w);
	/*
	 * Optional, both or neither: staged writes (stage.c) build frames
	 * straight into the sink's open pack for partition (the disk's one
	 * pack; the net sink's pack for partition's workers). pack_room
	 * sets *p to that pack's free bytes and *room to their count,
	 * opening a pack if none is (*room 0: none could be had). pack_add
	 * takes the next frame of partition, flen bytes at p: built in
	 * place at *p (flen <= room) or, from anywhere else, copied in
	 * across packs. p stays the caller's; a full pack goes out. Packs
	 * not full go out at the sink's flush. Returns 0 or an error.
	 */
	int (*pack_room)(struct ush_writer *w, uint32_t partition, uint8_t **p,
			 uint32_t *room);
	int (*pack_add)(struct ush_writer *w, const uint8_t *p, uint32_t flen,
			uint32_t partition);
	/*
	 * Optional: staged writes scatter a flush's records straight into
	 * pool buffers of the push size (stage.c); span_put takes the next
	 * one, len bytes (full but for the flush's last), with the nfr
	 * frames that start in it (a frame may run on into the next
	 * buffer). The span follows what the sink was given before. b is
	 * the sink's (state BUF_WRITER), on error too.
	 */
	int (*span_put)(struct ush_writer *w, struct ushi_buf *b, uint32_t len,
			const struct ushi_span_frame *fr, uint32_t nfr);
	/*
	 * Optional, with staged writes: the order a flush frames partitions
	 * in (a permutation of 0..partitions-1, the sink's, valid while it
	 * is open), or NULL for 0, 1, 2...: the net sink puts partitions of
	 * the same workers together, so that packs and span buffers go to
	 * one worker at a time.
	 */
	const uint32_t *(*part_order)(struct ush_writer *w);
};

/* The disk sink's fdatasync: a seam for tests, which make it fail the
 * way Linux does (a writeback error reported to one call only). */
extern int (*ushi_fdatasync)(int fd);

extern const struct ushi_sink_ops ushi_sink_null;
extern const struct ushi_sink_ops ushi_sink_disk;
extern const struct ushi_sink_ops ushi_sink_net;

/* What ush_writer_write() touches per record is here, in one 64-byte
 * line: at 10,000 partitions a record's partition is a cache miss, and
 * reaching the open batch through buf would be a second one. */
struct ushi_part {
	struct ushi_buf *buf; /* open batch, or NULL */
	uint8_t *room;       /* buf's payload (past the frame header) */
	uint32_t cap;        /* its payload capacity; 0 without buf */
	uint32_t len, nrec;  /* bytes and records in the open batch */
	uint32_t sum;        /* running checksum of its frame CRCs */
	uint64_t seq;        /* next batch sequence number */
	struct ush_part_stats st;
};

enum ushi_writer_state { W_OPEN, W_COMMITTED, W_ABORTED };

struct ush_writer {
	struct ush_ring *ring;
	/* Borrowed from ring for the hot paths: its pool and options. */
	struct ushi_pool *pool;
	const struct ush_ring_opts *ropts;
	struct ush_writer_opts o;
	const struct ushi_sink_ops *sink;
	void *sink_state;
	struct ushi_part *parts;
	struct ushi_stage *stage; /* staged writes (stage.c), or NULL */
	struct ushi_buf *qhead, *qtail; /* handed off, not yet framed */
	/* Sentinel of the circular list (next/prev) of the buffers lent to
	 * the caller, which ush_writer_free() takes back. Circular, so a
	 * buffer leaves it without knowing which writer lent it. */
	struct ushi_buf lent;
	unsigned qlen;
	unsigned inflight; /* this writer's ops in the ring */
	unsigned push_order;
	enum ushi_writer_state state;
	int err; /* sticky */
	char errmsg[256];
	struct ush_writer_stats st;
	struct ush_lat complete_lat;
	uint8_t *status;   /* the map status, after commit */
	size_t status_len;
	/* Sealing (core/seal.h), when opened with a seal_key: the frames'
	 * trailer room (tail: 0 when plain), the cipher context, this
	 * writer's subkey and what the status tells readers of it. */
	uint32_t tail;
	uint32_t seal_id;
	struct ushi_seal seal;
	uint8_t seal_sub[USH_SEAL_KEY_SIZE];
	uint8_t seal_salt[USHI_SEAL_SALT];
	/* With several CPUs, handed-off batches are sealed on a thread of
	 * their own (sealer.c); sealing: the jobs it holds, 0 when none. */
	struct ushi_sealer *sealer;
	unsigned sealing;
};

/* The most batch bytes a push buffer holds: its header room and, when
 * sealing, the trailer's are kept free. */
static inline uint32_t writer_room(const struct ush_writer *w)
{
	return (uint32_t)w->ropts->push_size - USH_FRAME_HDR_SIZE - w->tail;
}

/* The batch bytes buffer b holds (writer_room() for one of the push
 * size). */
static inline uint32_t writer_buf_room(const struct ush_writer *w,
				       const struct ushi_buf *b)
{
	return b->cap - USH_FRAME_HDR_SIZE - w->tail;
}

/* Records a sticky error (first one wins) from a completion or sink. */
void writer_error(struct ush_writer *w, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Makes err, whose message is this thread's last error, sticky. */
static inline void writer_error_keep(struct ush_writer *w, int err)
{
	if (!w->err) {
		w->err = err;
		snprintf(w->errmsg, sizeof(w->errmsg), "%s", ush_last_error());
	}
}
/* Waits for a completion: the sink's reap, else the ring's. */
static inline int writer_reap(struct ush_writer *w)
{
	return w->sink->reap ? w->sink->reap(w) : ring_reap(w->ring, 1);
}
/* Sinks count the bytes they stored on the target through it. */
static inline void writer_stored(struct ush_writer *w, uint64_t bytes)
{
	w->st.stored_bytes += bytes;
}
/* (Re)builds the map status; holders: per partition the mask of the
 * workers holding it (a version 2 status), or NULL. 0 or -ENOMEM. */
int writer_build_status(struct ush_writer *w, const uint64_t *holders);
/* A submitted frame is done with (written, dropped or failed): returns
 * pool buffer b, or frees heap frame mem, and counts it out of flight.
 * t0, its ushi_now_ns() at submission, times its completion; 0 for a
 * frame that never reached the target. */
void writer_frame_done(struct ush_writer *w, struct ushi_buf *b,
		       const uint8_t *mem, uint64_t t0);

/* What the stage asks of the writer above it (writer.c gives it at
 * stage_open), so that the stage never calls back into writer.c. */
struct ushi_stage_ops {
	/* An idle pool buffer of order, waiting, flushing (the stage too)
	 * or evicting as needed. */
	int (*get_buf)(struct ush_writer *w, unsigned order,
		       struct ushi_buf **b);
	/* Everything handed off, queued or being sealed, framed and
	 * given to the sink: staged frames follow it. */
	int (*flush_queue)(struct ush_writer *w);
	/* Frames payload raw bytes of nrec records at hdr + 48 as
	 * partition's next batch, counts it and gives it to the sink's
	 * pack_add; with zbuf (push size bytes), compressed there with the
	 * ring's codec if it shrinks. */
	int (*pack_frame)(struct ush_writer *w, uint32_t partition,
			  uint8_t *hdr, uint32_t raw, uint32_t nrec,
			  uint8_t *zbuf);
	/* pack_frame() without the sink: the frame stays at *hdr (zbuf
	 * when compressed there), *flen its bytes. */
	int (*build_frame)(struct ush_writer *w, uint32_t partition,
			   uint8_t **hdr, uint32_t raw, uint32_t nrec,
			   uint8_t *zbuf, uint32_t *flen);
};

/* Staged writes, for many partitions (stage.c). stage_open() decides at
 * writer open whether w stages: 0 or -ENOMEM. stage_write() appends one
 * record of at most push size - 52 bytes. stage_flush() frames and hands
 * over every staged record; a no-op when none is staged. stage_free()
 * drops what is staged (abort) and frees the stage. */
int stage_open(struct ush_writer *w, const struct ushi_stage_ops *ops);
int stage_write(struct ush_writer *w, uint32_t partition, const void *rec,
		size_t len);
int stage_flush(struct ush_writer *w);
/* Whether anything is staged; whether a record of partition is. */
bool stage_pending(const struct ush_writer *w);
bool stage_holds(const struct ush_writer *w, uint32_t partition);
void stage_free(struct ush_writer *w);

/* Seals frame f, raw so far, in place at hdr: header, AES-256-GCM and
 * its trailer, then the CRC over the sealed bytes (what workers check
 * without the key). 0 or -EIO. */
int seal_put(struct ushi_seal *s, const uint8_t *sub, uint32_t key_id,
	     struct ushi_frame *f, uint8_t *hdr);

/*
 * The sealer (sealer.c). sealer_open() sets *s to NULL where the process
 * runs on one CPU (seal inline then): 0 or -ENOMEM. The writer fills
 * sealer_jobs() (buffers in state BUF_SEALING) and sealer_post()s n of
 * them; they are the thread's until sealer_wait() returns (0, or the
 * first job's error with its message). sealer_done() tells without
 * waiting. sealer_free() joins the thread: nothing may be posted; child:
 * in a fork() child, frees memory only.
 */
struct ushi_seal_job {
	struct ushi_buf *b;
	struct ushi_frame f;
};
struct ushi_sealer;
int sealer_open(struct ushi_sealer **s, const uint8_t *sub,
		uint32_t key_id);
struct ushi_seal_job *sealer_jobs(struct ushi_sealer *s);
int sealer_post(struct ushi_sealer *s, unsigned n);
bool sealer_done(struct ushi_sealer *s);
int sealer_wait(struct ushi_sealer *s);
void sealer_free(struct ushi_sealer *s, bool child);

#endif
