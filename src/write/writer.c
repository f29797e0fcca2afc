/*
 * The map-side writer: partitions records into pool buffers, hands full
 * buffers off (swap, never copy), frames and submits them in batches.
 *
 * A hand-off is O(1): the buffer joins the writer's queue and an idle one
 * comes back. Framing (codec, CRC32C) and SQE preparation happen when the
 * queue is flushed, once per USHI_QUEUE_BATCH buffers, so submissions are
 * batched and the hand-off cost does not grow with the buffer size. A
 * swapped batch's record prefixes are walked when it is framed, after
 * the CRC (or the codec) has brought its bytes into the cache, so a
 * batch no reader could parse never goes out; copy walks them at the
 * call, beside its memcpy.
 */
#include "core/status.h"
#include "net/net.h"
#include "write/writer.h"

#include <errno.h>
#include <stdio.h>

const char *ush_writer_error(const ush_writer *w)
{
	return w->err ? w->errmsg : NULL;
}

/* Returns the sticky error, also as this thread's last error. */
static int sticky(struct ush_writer *w)
{
	return ushi_fail_msg(w->err, w->errmsg);
}

static int check_open(struct ush_writer *w)
{
	int ret = ring_check_thread(w->ring, "writer");
	if (unlikely(ret))
		return ret;
	if (unlikely(w->err))
		return sticky(w);
	if (unlikely(w->state != W_OPEN))
		return ushi_fail(USH_ESTATE, "writer: map %u attempt %u is "
				"already %s", w->o.map, w->o.attempt,
				w->state == W_COMMITTED ? "committed" :
							  "aborted");
	return 0;
}

/* The DATA frame header of a batch of raw bytes, stored raw so far. */
static struct ushi_frame frame_of(const struct ush_writer *w,
				 uint32_t partition, uint64_t seq, uint32_t raw,
				 uint32_t nrec)
{
	return (struct ushi_frame){
		.type = USHI_FRAME_DATA,
		.codec = USH_CODEC_NONE,
		.shuffle = w->o.shuffle,
		.map = w->o.map,
		.attempt = w->o.attempt,
		.partition = partition,
		.seq = seq,
		.raw_len = raw,
		.payload_len = raw,
		.nrec = nrec,
	};
}

/*
 * Compresses the batch behind src's header room into dst's (cap bytes).
 * Returns true and updates f when it shrank; otherwise (or without a dst)
 * the batch is stored raw.
 */
static bool compress(struct ush_writer *w, struct ushi_frame *f,
		     const uint8_t *src, uint8_t *dst, size_t cap)
{
	long n = dst ? ring_compress(w->ring, src + USH_FRAME_HDR_SIZE,
				     f->raw_len, dst + USH_FRAME_HDR_SIZE, cap)
		     : 0;
	if (n <= 0) {
		w->st.stored_raw++;
		return false;
	}
	f->codec = (uint8_t)w->ropts->codec;
	f->payload_len = (uint32_t)n;
	return true;
}

/* Writes f's header at hdr, in front of its payload, sealing it (on
 * this thread) when the writer seals. */
static int put_header(struct ush_writer *w, struct ushi_frame *f, uint8_t *hdr)
{
	if (w->tail)
		return seal_put(&w->seal, w->seal_sub, w->seal_id, f, hdr);
	frame_encode(hdr, f);
	return 0;
}

/* Counts the frame whose header is written; returns its bytes. */
static uint32_t count_frame(struct ush_writer *w, const struct ushi_frame *f)
{
	struct ushi_part *p = &w->parts[f->partition];
	p->sum = status_sum_add(p->sum, f->crc);
	uint32_t flen = (uint32_t)ush_frame_size(f->payload_len);
	w->st.frame_bytes += flen;
	w->st.raw_bytes += f->raw_len;
	w->st.batches++;
	return flen;
}

/* put_header() and count_frame(): *flen gets the frame's bytes. */
static int encode(struct ush_writer *w, struct ushi_frame *f, uint8_t *hdr,
		  uint32_t *flen)
{
	int ret = put_header(w, f, hdr);
	if (!ret)
		*flen = count_frame(w, f);
	return ret;
}

/* A sink's error: it either failed through ushi_fail() or recorded why
 * as the writer's error (a worker's ERROR) without making it this
 * thread's last error: the sticky error is both. */
static int sink_failed(struct ush_writer *w, int ret)
{
	writer_error_keep(w, ret);
	return sticky(w);
}

/* Counts the frame f, whose header is written, and gives it (pool
 * buffer b or heap frame mem) to the sink. */
static int hand_over(struct ush_writer *w, const struct ushi_frame *f,
		     struct ushi_buf *b, uint8_t *mem)
{
	uint32_t flen = count_frame(w, f);
	w->inflight++;
	int ret = w->sink->submit(w, b, mem, flen, f->partition);
	return ret ? sink_failed(w, ret) : 0;
}

/* Writes f's header in front of its payload (pool buffer b or heap
 * frame mem) and gives the frame to the sink. */
static int submit(struct ush_writer *w, struct ushi_frame *f,
		  struct ushi_buf *b, uint8_t *mem)
{
	int ret = put_header(w, f, b ? b->data : mem);
	if (ret) {
		writer_error_keep(w, ret);
		if (b)
			pool_put(w->pool, b);
		else
			ushi_free(mem);
		return ret;
	}
	return hand_over(w, f, b, mem);
}

/* The stage's build_frame: see struct ushi_stage_ops. */
static int build_frame(struct ush_writer *w, uint32_t partition,
		       uint8_t **hdr, uint32_t raw, uint32_t nrec,
		       uint8_t *zbuf, uint32_t *flen)
{
	struct ushi_part *p = &w->parts[partition];
	struct ushi_frame f = frame_of(w, partition, p->seq++, raw, nrec);
	p->st.batches++;
	if (zbuf && raw && compress(w, &f, *hdr, zbuf, writer_room(w)))
		*hdr = zbuf;
	int ret = encode(w, &f, *hdr, flen);
	if (ret)
		writer_error_keep(w, ret);
	return ret;
}

/* The stage's pack_frame: see struct ushi_stage_ops. */
static int pack_frame(struct ush_writer *w, uint32_t partition, uint8_t *hdr,
		      uint32_t raw, uint32_t nrec, uint8_t *zbuf)
{
	uint32_t flen;
	int ret = build_frame(w, partition, &hdr, raw, nrec, zbuf, &flen);
	if (!ret && (ret = w->sink->pack_add(w, hdr, flen, partition)))
		ret = sink_failed(w, ret);
	return ret;
}

/*
 * A caller-made batch must be exactly nrec records whose prefixes end at
 * len: readers reject any other frame. One walk over the prefixes.
 */
static int check_batch(uint32_t partition, const uint8_t *batch, size_t len,
		       uint32_t nrec)
{
	size_t off = 0, n;
	const void *rec;
	if (!batch && len)
		return ushi_fail(-EINVAL, "writer: partition %u: batch of %zu "
				"bytes at NULL", partition, len);
	for (uint32_t i = 0; i < nrec; i++) {
		int ret = records_next(batch, len, &off, &rec, &n);
		if (ret == 0)
			return ushi_fail(-EINVAL, "writer: partition %u: batch "
					"of %zu bytes ends after %u of its %u "
					"records", partition, len, i, nrec);
		if (ret < 0)
			return ushi_fail(-EINVAL, "writer: partition %u: batch "
					"of %zu bytes: record %u of %u, at offset "
					"%zu, runs past the end", partition, len,
					i, nrec, off);
	}
	if (off != len)
		return ushi_fail(-EINVAL, "writer: partition %u: batch of %zu "
				"bytes holds %u records whose prefixes end at "
				"%zu, not %zu", partition, len, nrec, off, len);
	return 0;
}

static int check_swapped(const struct ushi_buf *b)
{
	return check_batch(b->part, b->data + USH_FRAME_HDR_SIZE, b->len,
			   b->nrec);
}

/* Unlinks the queue's first buffer. qtail stays valid whatever the
 * caller does with it next: b is off the queue, and the next handoff
 * must not link behind it. */
static struct ushi_buf *queue_pop(struct ush_writer *w)
{
	struct ushi_buf *b = w->qhead;
	w->qhead = b->next;
	if (!w->qhead)
		w->qtail = NULL;
	w->qlen--;
	b->next = NULL;
	return b;
}

/*
 * Makes one handed-off buffer b a frame: compressed into a buffer of the
 * same class when the codec shrinks it (b goes back to the pool then),
 * its prefixes walked if it was swapped, its header written, sealed
 * unless seal_later. *out and *f get the frame; on error its buffers are
 * back in the pool and the error is sticky.
 *
 * The prefixes are walked after the compressor or the CRC has read the
 * whole batch: walked first, each prefix was a dependent cache miss, a
 * fifth of a 64-partition spill's CPU. A batch sealed in place is walked
 * before, while it is plain.
 */
static int frame_make(struct ush_writer *w, struct ushi_buf *b,
		      bool seal_later, struct ushi_frame *f,
		      struct ushi_buf **out)
{
	struct ushi_pool *pool = w->pool;
	struct ushi_buf *c = NULL;
	*f = frame_of(w, b->part, b->seq, b->len, b->nrec);
	*out = b;
	if (w->ropts->codec != USH_CODEC_NONE && b->len) {
		/* No idle buffer of the class: store raw. */
		c = pool_get(pool, b->order);
		if (compress(w, f, b->data, c ? c->data : NULL,
			     writer_buf_room(w, b)))
			*out = c;
	}
	bool first = w->tail && *out == b;
	int ret = b->swapped && first ? check_swapped(b) : 0;
	if (!ret && !seal_later)
		ret = put_header(w, f, (*out)->data);
	if (!ret && b->swapped && !first)
		ret = check_swapped(b);
	if (c && c != *out)
		pool_put(pool, c);
	if (b != *out)
		pool_put(pool, b);
	if (ret) {
		writer_error_keep(w, ret);
		pool_put(pool, *out);
	}
	return ret;
}

/* Frames one handed-off buffer on this thread and gives it to the sink. */
static int frame_submit(struct ush_writer *w, struct ushi_buf *b)
{
	struct ushi_frame f;
	struct ushi_buf *out;
	int ret = frame_make(w, b, false, &f, &out);
	if (ret)
		return ret;
	buf_move(out, out == b ? BUF_QUEUED : BUF_WRITER, BUF_INFLIGHT);
	return hand_over(w, &f, out, NULL);
}

/* Takes the batch the sealer holds, waiting for it, and gives its frames
 * to the sink in order; after an error they go back to the pool. */
static int seal_collect(struct ush_writer *w)
{
	if (!w->sealing)
		return 0;
	struct ushi_seal_job *j = sealer_jobs(w->sealer);
	unsigned n = w->sealing;
	int ret = sealer_wait(w->sealer);
	w->sealing = 0;
	if (ret)
		writer_error_keep(w, ret);
	for (unsigned i = 0; i < n; i++) {
		buf_move(j[i].b, BUF_SEALING, BUF_INFLIGHT);
		if (!ret && !w->err)
			ret = hand_over(w, &j[i].f, j[i].b, NULL);
		else
			pool_put(w->pool, j[i].b);
	}
	return ret ? ret : w->err ? sticky(w) : 0;
}

/* Hands the queue to the sealer (its first USHI_QUEUE_BATCH, all the
 * sealer takes), once the batch before it is collected: the fill of the
 * next batch overlaps its sealing. After an error nothing is handed
 * off: the queue stays for abort or free to give back. */
static int seal_queue(struct ush_writer *w)
{
	int ret = w->err ? sticky(w) : seal_collect(w);
	struct ushi_seal_job *j = sealer_jobs(w->sealer);
	unsigned n = 0;
	while (!ret && w->qhead && n < USHI_QUEUE_BATCH) {
		struct ushi_buf *b = queue_pop(w);
		ret = frame_make(w, b, true, &j[n].f, &j[n].b);
		if (!ret)
			buf_move(j[n].b, j[n].b == b ? BUF_QUEUED : BUF_WRITER,
				 BUF_SEALING);
		n += !ret;
	}
	if (n && !ret && (ret = sealer_post(w->sealer, n)))
		writer_error_keep(w, ret);
	else if (n && !ret)
		w->sealing = n;
	for (unsigned i = 0; i < n && ret; i++)
		pool_put(w->pool, j[i].b);
	return ret;
}

/* Submits what the sink was given: its flush, then the ring's SQEs. */
static int sink_submit(struct ush_writer *w)
{
	int ret = w->sink->flush ? w->sink->flush(w) : 0;
	return ret ? sink_failed(w, ret) : ring_submit(w->ring);
}

/* sink_submit(), its error sticky. */
static int submit_given(struct ush_writer *w)
{
	int ret = sink_submit(w);
	if (ret)
		writer_error(w, ret, "writer: submit");
	return w->err ? sticky(w) : 0;
}

static int flush_queue(struct ush_writer *w)
{
	int ret = 0;
	if (w->sealer)
		ret = seal_queue(w);
	else
		while (!ret && w->qhead)
			ret = frame_submit(w, queue_pop(w));
	return ret ? ret : submit_given(w);
}

/* Everything handed off reaches the sink, what the sealer holds too:
 * before a frame that must follow them. */
static int flush_all(struct ush_writer *w)
{
	int ret = w->qhead ? flush_queue(w) : 0;
	if (w->sealing) {
		/* Even after an error: the buffers come back then. */
		int r = seal_collect(w);
		if (!ret && !(ret = r))
			ret = submit_given(w);
	}
	return ret;
}

/* Queues b (state from) as the next batch of partition. O(1). */
static int handoff(struct ush_writer *w, struct ushi_buf *b,
		   enum ushi_buf_state from, uint32_t partition, uint32_t len,
		   uint32_t nrec)
{
	struct ushi_part *p = &w->parts[partition];
	buf_move(b, from, BUF_QUEUED);
	b->swapped = from == BUF_USER;
	b->part = partition;
	b->len = len;
	b->nrec = nrec;
	b->seq = p->seq++;
	b->next = NULL;
	if (w->qtail)
		w->qtail->next = b;
	else
		w->qhead = b;
	w->qtail = b;
	p->st.batches++;
	/* b is handed over whatever the flush does: its errors are sticky
	 * and surface on the next call. */
	if (++w->qlen >= USHI_QUEUE_BATCH)
		flush_queue(w);
	return 0;
}

static int close_part(struct ush_writer *w, uint32_t partition);

/* Makes b (or none) partition p's open batch. */
static void part_set(const struct ush_writer *w, struct ushi_part *p,
		     struct ushi_buf *b)
{
	p->buf = b;
	p->room = b ? b->data + USH_FRAME_HDR_SIZE : NULL;
	p->cap = b ? writer_buf_room(w, b) : 0;
}

/*
 * Under memory pressure open batches go out early, so a pool smaller than
 * partitions x 4 KiB still makes progress: every batch at least as full as
 * the average open one, so frames stay as large as memory allows and one
 * scan pays for many evictions. Returns false if no batch is open.
 */
static bool evict(struct ush_writer *w)
{
	uint64_t total = 0, open = 0;
	for (uint32_t i = 0; i < w->o.partitions; i++)
		if (w->parts[i].buf) {
			total += w->parts[i].len;
			open++;
		}
	for (uint32_t i = 0; open && i < w->o.partitions; i++)
		if (w->parts[i].buf && w->parts[i].len >= total / open)
			close_part(w, i);
	return open > 0;
}

/*
 * An idle buffer of order, waiting for completions while any are due.
 * When nothing is in flight and the pool is fragmented by partition
 * buffers, a smaller one down to min_order will do.
 */
static int get_buf(struct ush_writer *w, unsigned order, unsigned min_order,
		   struct ushi_buf **out)
{
	struct ush_ring *r = w->ring;
	for (;;) {
		/* After an error nothing may be handed off (evict). */
		if (w->err)
			return sticky(w);
		struct ushi_buf *b = pool_get(w->pool, order);
		for (unsigned o = order; !b && o > min_order && !w->qhead &&
					 !w->sealing && !ring_inflight(r);)
			b = pool_get(w->pool, --o);
		if (b) {
			*out = b;
			return 0;
		}
		/* Each step may free memory: retry after each. */
		int ret = 0;
		if (w->qhead)
			ret = flush_queue(w);
		else if (w->sealing &&
			 (!ring_inflight(r) || sealer_done(w->sealer)))
			ret = flush_all(w);
		else if (ring_inflight(r))
			ret = writer_reap(w);
		else if (stage_pending(w))
			ret = stage_flush(w);
		else if (!evict(w))
			return ushi_fail(USH_EPOOL, "writer: the %zu KiB pool "
					"has no idle %u KiB buffer, nothing in "
					"flight and no open batch to send: "
					"release buffers taken with "
					"ush_writer_acquire() or raise "
					"ush_ring_opts.pool_bytes",
					w->ropts->pool_bytes >> 10,
					(USHI_BUF_MIN << min_order) >> 10);
		if (ret)
			return ret;
		if (w->err)
			return sticky(w);
	}
}

static int stage_get_buf(struct ush_writer *w, unsigned order,
			 struct ushi_buf **b)
{
	return get_buf(w, order, order, b);
}

/* What the stage, below the writer, asks of it. */
static const struct ushi_stage_ops stage_ops = {
	.get_buf = stage_get_buf,
	.flush_queue = flush_all,
	.pack_frame = pack_frame,
	.build_frame = build_frame,
};

/* Hands partition's open batch off if it holds records, else frees it. */
static int close_part(struct ush_writer *w, uint32_t partition)
{
	struct ushi_part *p = &w->parts[partition];
	struct ushi_buf *b = p->buf;
	if (!b)
		return 0;
	part_set(w, p, NULL);
	if (!p->len) {
		pool_put(w->pool, b);
		return 0;
	}
	uint32_t len = p->len, nrec = p->nrec;
	p->len = p->nrec = 0;
	return handoff(w, b, BUF_WRITER, partition, len, nrec);
}

/*
 * Makes room for need more bytes in partition's batch: grow the buffer by
 * one copy while it is below the push size, or hand it off and start anew.
 */
static int make_room(struct ush_writer *w, uint32_t partition, size_t need)
{
	struct ushi_pool *pool = w->pool;
	struct ushi_part *p = &w->parts[partition];
	struct ushi_buf *b = p->buf;
	size_t want = USH_FRAME_HDR_SIZE + p->len + need + w->tail;
	int o = pool_order(pool, want); /* -1: not even at the push size */
	if (b && o > b->order) {
		struct ushi_buf *nb = pool_get(pool, (unsigned)o);
		if (nb) {
			memcpy(nb->data + USH_FRAME_HDR_SIZE,
			       b->data + USH_FRAME_HDR_SIZE, p->len);
			pool_put(pool, b);
			part_set(w, p, nb);
			w->st.grows++;
			return 0;
		}
	}
	/* Full at the push size, or no memory to grow: hand it off. A
	 * full push-size buffer is swapped for one of the same size. */
	unsigned min = (unsigned)pool_order(pool, USH_FRAME_HDR_SIZE + need +
						  w->tail);
	unsigned order = b && b->order == w->push_order ? w->push_order : min;
	int ret = close_part(w, partition);
	struct ushi_buf *nb = NULL;
	if (!ret)
		ret = get_buf(w, order, min, &nb);
	part_set(w, p, nb);
	return ret;
}

/* A record above the push size goes out alone, from heap memory. */
static int write_alone(struct ush_writer *w, uint32_t partition,
		       const void *rec, size_t len)
{
	size_t raw = USH_RECORD_HDR_SIZE + len;
	/* Records written before this one come back before it: the open
	 * batch takes the lower sequence number. Queued batches of this
	 * partition carry lower sequence numbers and must reach the sink
	 * first: readers drop out-of-order sequences. So do staged ones. */
	int ret = close_part(w, partition);
	if (!ret && stage_holds(w, partition))
		ret = stage_flush(w);
	if (!ret)
		ret = flush_all(w);
	if (ret)
		return ret;
	uint8_t *m = ushi_aligned_alloc(USH_FRAME_HDR_SIZE + raw + w->tail);
	if (!m)
		return ushi_fail(-ENOMEM, "writer: %zu-byte record", len);
	put_le32(m + USH_FRAME_HDR_SIZE, (uint32_t)len);
	memcpy(m + USH_FRAME_HDR_SIZE + USH_RECORD_HDR_SIZE, rec, len);
	struct ushi_part *p = &w->parts[partition];
	struct ushi_frame f = frame_of(w, partition, p->seq++, (uint32_t)raw, 1);
	p->st.batches++;
	if (w->ropts->codec != USH_CODEC_NONE) {
		uint8_t *c = ushi_aligned_alloc(USH_FRAME_HDR_SIZE + raw +
						w->tail);
		if (compress(w, &f, m, c, raw)) {
			ushi_free(m);
			m = c;
		} else {
			ushi_free(c);
		}
	}
	ret = submit(w, &f, NULL, m);
	return ret ? ret : sink_submit(w);
}

static int check_part(struct ush_writer *w, uint32_t partition)
{
	if (unlikely(partition >= w->o.partitions))
		return ushi_fail(-EINVAL, "writer: partition %u out of range "
				"0..%u", partition, w->o.partitions - 1);
	return check_open(w);
}

int ush_writer_write(ush_writer *w, uint32_t partition, const void *rec,
		     size_t len)
{
	int ret = check_part(w, partition);
	if (ret)
		return ret;
	if (unlikely(len > USH_RECORD_MAX))
		return ushi_fail(-EMSGSIZE, "writer: record of %zu bytes "
				"exceeds the %u-byte limit", len,
				USH_RECORD_MAX);
	if (unlikely(!rec && len))
		return ushi_fail(-EINVAL, "writer: partition %u: record of "
				"%zu bytes at NULL", partition, len);
	size_t need = USH_RECORD_HDR_SIZE + len;
	struct ushi_part *p = &w->parts[partition];
	if (need > writer_room(w)) {
		ret = write_alone(w, partition, rec, len);
	} else if (w->stage) {
		/* Counted per partition when framed: p stays untouched. */
		ret = stage_write(w, partition, rec, len);
		if (!ret)
			w->st.records++;
		return ret;
	} else {
		if (p->len + need > p->cap)
			ret = make_room(w, partition, need);
		if (!ret) {
			uint8_t *d = p->room + p->len;
			put_le32(d, (uint32_t)len);
			if (len) /* rec may be NULL then */
				memcpy(d + USH_RECORD_HDR_SIZE, rec, len);
			p->len += (uint32_t)need;
			p->nrec++;
		}
	}
	if (ret)
		return ret;
	p->st.records++;
	p->st.bytes += len;
	w->st.records++;
	return 0;
}

/* Lends b to the caller until it is swapped, released or the writer is
 * freed; returns its payload. */
static void *lend(struct ush_writer *w, struct ushi_buf *b)
{
	buf_move(b, BUF_WRITER, BUF_USER);
	b->prev = &w->lent;
	b->next = w->lent.next;
	b->next->prev = b;
	w->lent.next = b;
	return b->data + USH_FRAME_HDR_SIZE;
}

static void unlend(struct ushi_buf *b)
{
	b->prev->next = b->next;
	b->next->prev = b->prev;
}

int ush_writer_acquire(ush_writer *w, void **buf, size_t *cap)
{
	struct ushi_buf *b;
	int ret = check_open(w);
	if (!ret)
		ret = get_buf(w, w->push_order, w->push_order, &b);
	if (ret)
		return ret;
	*buf = lend(w, b);
	*cap = writer_buf_room(w, b);
	return 0;
}

/* Counts a caller-made batch, then queues it (swap and copy). */
static int handoff_batch(struct ush_writer *w, struct ushi_buf *b,
			 enum ushi_buf_state from, uint32_t partition,
			 size_t len, uint32_t nrecords)
{
	/* Records of partition written before this batch, in its open
	 * batch or staged, take the lower sequence numbers. */
	int ret = close_part(w, partition);
	if (!ret && stage_holds(w, partition))
		ret = stage_flush(w);
	if (ret) {
		pool_put(w->pool, b);
		return ret;
	}
	struct ush_part_stats *st = &w->parts[partition].st;
	st->records += nrecords;
	st->bytes += len - (size_t)nrecords * USH_RECORD_HDR_SIZE;
	w->st.records += nrecords;
	return handoff(w, b, from, partition, (uint32_t)len, nrecords);
}

static struct ushi_buf *user_buf(struct ush_writer *w, const void *payload)
{
	struct ushi_buf *b = pool_lookup(w->pool,
					(const uint8_t *)payload -
						USH_FRAME_HDR_SIZE);
	if (unlikely(b->state != BUF_USER))
		ushi_panic("buffer %p is not owned by the caller (state %d): "
			  "swapped or released already?", payload, b->state);
	return b;
}

int ush_writer_release(ush_writer *w, void *buf)
{
	int ret = ring_check_thread(w->ring, "writer");
	if (ret)
		return ret;
	struct ushi_buf *b = user_buf(w, buf);
	unlend(b);
	pool_put(w->pool, b);
	return 0;
}

int ush_writer_swap(ush_writer *w, uint32_t partition, void **buf,
		    size_t len, uint32_t nrecords)
{
	int ret = check_part(w, partition);
	if (ret)
		return ret;
	struct ushi_buf *b = user_buf(w, *buf), *nb;
	if (len > writer_buf_room(w, b))
		return ushi_fail(-EINVAL, "writer: swap of %zu bytes into a "
				"buffer that holds %u (the cap "
				"ush_writer_acquire() gave)", len,
				writer_buf_room(w, b));
	/* O(1) here; the prefixes are walked when the batch is framed. */
	if ((uint64_t)nrecords * USH_RECORD_HDR_SIZE > len)
		return ushi_fail(-EINVAL, "writer: partition %u: %u records "
				"cannot fit in %zu bytes", partition, nrecords,
				len);
	/* Take the replacement first: on error nothing was handed over. */
	if ((ret = get_buf(w, b->order, b->order, &nb)))
		return ret;
	*buf = lend(w, nb);
	unlend(b);
	return handoff_batch(w, b, BUF_USER, partition, len, nrecords);
}

int ush_writer_copy(ush_writer *w, uint32_t partition, const void *batch,
		    size_t len, uint32_t nrecords)
{
	struct ushi_buf *b;
	int ret = check_part(w, partition);
	if (ret)
		return ret;
	/* Bounded before header + len is computed: it could wrap. */
	if (len > writer_room(w))
		return ushi_fail(-EINVAL, "writer: copy of %zu bytes exceeds "
				"the push size", len);
	unsigned order = (unsigned)pool_order(w->pool, USH_FRAME_HDR_SIZE +
							      len + w->tail);
	if ((ret = check_batch(partition, batch, len, nrecords)) ||
	    (ret = get_buf(w, order, order, &b)))
		return ret;
	if (len) /* batch may be NULL then */
		memcpy(b->data + USH_FRAME_HDR_SIZE, batch, len);
	return handoff_batch(w, b, BUF_WRITER, partition, len, nrecords);
}

/*
 * Waits until none of this writer's operations is in flight. Completions
 * write into the writer and its sink's state, so teardown must not pass
 * this point early: a failed wait is retried, and its error made sticky.
 */
static int drain(struct ush_writer *w)
{
	int ret = flush_all(w);
	unsigned fails = 0;
	while (w->inflight) {
		int r = w->sink->drain ? w->sink->drain(w) :
					 ring_reap(w->ring, 1);
		if (r) {
			writer_error(w, r, "writer: reap");
			ret = ret ? ret : r;
		}
		ring_teardown_failed(r, &fails);
	}
	return ret;
}

int ush_writer_status(const ush_writer *w, struct ush_status *st)
{
	if (w->state != W_COMMITTED || !w->status)
		return ushi_fail(USH_ESTATE, "writer: map %u attempt %u has no "
				"status: %s", w->o.map, w->o.attempt,
				w->state != W_COMMITTED ? "not committed" :
				"the null target stores nothing");
	st->data = w->status;
	st->len = w->status_len;
	return 0;
}

int ush_writer_commit(ush_writer *w, struct ush_part_stats *parts)
{
	/* Not even the drain below: it would reap another's ring. */
	int ret = ring_check_thread(w->ring, "writer");
	if (ret)
		return ret;
	ret = check_open(w);
	if (!ret)
		ret = stage_flush(w);
	for (uint32_t i = 0; !ret && i < w->o.partitions; i++)
		ret = close_part(w, i);
	int dret = drain(w);
	if (!ret)
		ret = dret;
	if (!ret && w->err)
		ret = sticky(w);
	/* The status first: once the sink has published, nothing may fail
	 * and leave a retry to a sink that is gone. */
	if (!ret)
		ret = writer_build_status(w, NULL);
	if (!ret)
		ret = w->sink->commit(w);
	if (ret)
		return ret;
	w->state = W_COMMITTED;
	if (parts)
		for (uint32_t i = 0; i < w->o.partitions; i++)
			parts[i] = w->parts[i].st;
	return 0;
}

int ush_writer_abort(ush_writer *w)
{
	int ret = ring_check_thread(w->ring, "writer");
	if (ret)
		return ret;
	if (w->state != W_OPEN)
		return ushi_fail(USH_ESTATE, "writer: abort after %s",
				w->state == W_COMMITTED ? "commit" : "abort");
	/* Queued buffers go back unframed, sealed ones unsent; in-flight
	 * ones on completion. */
	if (w->sealing) {
		struct ushi_seal_job *j = sealer_jobs(w->sealer);
		(void)sealer_wait(w->sealer);
		for (unsigned i = 0; i < w->sealing; i++)
			pool_put(w->pool, j[i].b);
		w->sealing = 0;
	}
	while (w->qhead) {
		struct ushi_buf *b = w->qhead;
		w->qhead = b->next;
		pool_put(w->pool, b);
	}
	w->qtail = NULL;
	w->qlen = 0;
	for (uint32_t i = 0; i < w->o.partitions; i++) {
		struct ushi_part *p = &w->parts[i];
		if (p->buf)
			pool_put(w->pool, p->buf);
		part_set(w, p, NULL);
	}
	stage_free(w);
	drain(w);
	w->sink->abort(w);
	w->state = W_ABORTED;
	return 0;
}

void ush_writer_stats_size(const ush_writer *w, struct ush_writer_stats *st,
			   size_t size)
{
	ushi_struct_init(st, size, &w->st, sizeof(w->st));
}

const struct ush_lat *ush_writer_complete_lat(const ush_writer *w)
{
	return &w->complete_lat;
}

/* Every writer option's zero value is its default (the net sink reads
 * timeout_ms and zc_threshold 0 as theirs). */
static const struct ush_writer_opts writer_defaults = {
	.size = sizeof(struct ush_writer_opts),
};

void ush_writer_opts_init_size(struct ush_writer_opts *o, size_t size)
{
	ushi_struct_init(o, size, &writer_defaults, sizeof(*o));
}

/* Sets w up to seal its frames under key: a fresh salt, the subkey
 * derived from both, a cipher context. */
static int seal_open_writer(struct ush_writer *w,
			    const struct ush_seal_key *key)
{
	int ret = ushi_random(w->seal_salt, sizeof(w->seal_salt), "seal");
	if (!ret)
		ret = seal_derive(w->seal_sub, key->key, w->seal_salt, w->o.app,
				  w->o.shuffle, w->o.map, w->o.attempt);
	if (!ret)
		ret = seal_init(&w->seal);
	if (!ret)
		ret = sealer_open(&w->sealer, w->seal_sub, key->id);
	if (ret)
		return ret;
	w->seal_id = key->id;
	w->tail = USHI_SEAL_TRAILER;
	return 0;
}

int ush_writer_open(ush_writer **out, ush_ring *ring,
		    const struct ush_writer_opts *opts)
{
	struct ush_writer_opts copy;
	*out = NULL;
	int ret = ring_check_thread(ring, "writer");
	if (ret)
		return ret;
	ret = ushi_opts_load(&copy, &writer_defaults, sizeof(copy), opts,
				 "writer options");
	if (ret)
		return ret;
	const struct ush_writer_opts *o = &copy;
	if (o->partitions < 1 || o->partitions > USHI_PARTS_MAX)
		return ushi_fail(-EINVAL, "writer: %u partitions, accepted "
				"1..%u", o->partitions, USHI_PARTS_MAX);
	const struct ushi_sink_ops *sink;
	switch (o->target) {
	case USH_TARGET_NULL:
		sink = &ushi_sink_null;
		break;
	case USH_TARGET_DISK:
		sink = &ushi_sink_disk;
		if (!o->dir)
			return ushi_fail(-EINVAL, "writer: disk target needs "
					"a directory");
		break;
	case USH_TARGET_NET:
		sink = &ushi_sink_net;
		if (!o->workers || !*o->workers)
			return ushi_fail(-EINVAL, "writer: net target needs "
					"workers (HOST:PORT,...)");
		break;
	default:
		return ushi_fail(-EINVAL, "writer: unknown target %d",
				o->target);
	}
	size_t loc = o->target == USH_TARGET_DISK ? strlen(o->dir) :
		     o->target == USH_TARGET_NET ? strlen(o->workers) : 0;
	if (loc > USHI_STATUS_LOC_MAX)
		return ushi_fail(-ENAMETOOLONG, "writer: %s of %zu bytes, "
				"the map status holds at most %u",
				o->target == USH_TARGET_DISK ? "directory" :
							       "worker list",
				loc, USHI_STATUS_LOC_MAX);
	if (o->app && !proto_app_ok(o->app))
		return ushi_fail(-EINVAL, "writer: application id '%.80s' is "
				"not 1..64 characters of A-Z a-z 0-9 . _ : -",
				o->app);
	if (o->ioengine != USH_IOENGINE_URING &&
	    o->ioengine != USH_IOENGINE_PSYNC)
		return ushi_fail(-EINVAL, "writer: unknown ioengine %d",
				o->ioengine);
	struct ush_writer *w = ushi_calloc(1, sizeof(*w));
	if (!w)
		return ushi_fail(-ENOMEM, "writer: allocation");
	w->lent.next = w->lent.prev = &w->lent;
	w->parts = ushi_calloc(o->partitions, sizeof(*w->parts));
	w->o = *o;
	w->o.dir = o->dir ? ushi_strdup(o->dir) : NULL;
	w->o.workers = o->workers ? ushi_strdup(o->workers) : NULL;
	w->o.app = ushi_strdup(o->app ? o->app : USHI_APP_DEFAULT);
	w->o.seal_key = NULL; /* borrowed: what it holds is in w */
	if (!w->parts || (o->dir && !w->o.dir) ||
	    (o->workers && !w->o.workers) || !w->o.app) {
		ush_writer_free(w);
		return ushi_fail(-ENOMEM, "writer: %u partitions",
				o->partitions);
	}
	w->ropts = ring_opts(ring);
	if (o->seal_key && (ret = seal_open_writer(w, o->seal_key))) {
		ush_writer_free(w);
		return ret;
	}
	for (uint32_t i = 0; i < o->partitions; i++)
		w->parts[i].sum = USHI_SUM_INIT;
	ush_lat_init(&w->complete_lat);
	w->ring = ring;
	w->sink = sink;
	w->pool = ring_pool(ring);
	w->push_order = w->pool->max_order;
	ret = sink->open(w);
	if (!ret && (ret = stage_open(w, &stage_ops)))
		sink->abort(w);
	if (ret) {
		w->sink = NULL;
		ush_writer_free(w);
		return ret;
	}
	ring_writers(ring, 1);
	*out = w;
	return 0;
}

void ush_writer_free(ush_writer *w)
{
	if (!w)
		return;
	/* A fork() child's copy is released, not aborted: the files and
	 * connections an abort would drop are the parent's. */
	bool child = w->sink && ring_forked(w->ring);
	/* As in ush_ring_free(): only the creator can reap. */
	if (w->sink && !child && ring_check_thread(w->ring, "ush_writer_free"))
		ushi_panic("%s", ush_last_error());
	if (child)
		w->sink->release(w);
	else if (w->sink && w->state == W_OPEN)
		ush_writer_abort(w);
	if (w->sink && !child)
		ushi_count_writer(&w->st, w->state == W_COMMITTED);
	if (w->sink)
		ring_writers(w->ring, -1);
	/* What the caller never released; its pointers die here. */
	while (w->lent.next != &w->lent) {
		struct ushi_buf *b = w->lent.next;
		unlend(b);
		pool_put(w->pool, b);
	}
	stage_free(w);
	ushi_free((void *)w->o.dir);
	ushi_free((void *)w->o.workers);
	ushi_free((void *)w->o.app);
	ushi_free(w->status);
	ushi_free(w->parts);
	sealer_free(w->sealer, child);
	seal_fini(&w->seal);
	explicit_bzero(w->seal_sub, sizeof(w->seal_sub));
	ushi_free(w);
}
