/*
 * Staged writes, for many partitions (docs/design.md, "Staged writes").
 *
 * With thousands of partitions each partition buffer gets a few KiB of
 * the pool: every record is copied into a scattered buffer (a cache miss
 * per record), buffers grow by copying, and the small frames are copied
 * once more into the disk sink's packs. Staged, ush_writer_write()
 * appends each record in order to the stage (push-size pool buffers) and
 * notes its partition and position. When the stage is full, a counting
 * sort by partition orders the notes (stable: a partition's records keep
 * their order) and each partition's records are copied once into frames
 * built straight in the sink's open pack: sequential writes, no pack
 * copy. A frame that does not fit the pack's room is built in the scratch
 * frame and copied in across two packs: at most one per pack, and a
 * partition's records make as few frames as the push size allows. With
 * a codec the records are gathered in the scratch frame, compressed into
 * a second one and copied in. Without a codec or a seal, and where the
 * pool has the buffers, the flush scatters instead (span_flush below):
 * small records are copied in arrival order straight to their places in
 * the frames, and only the larger ones gathered.
 *
 * Chosen at open where it pays: a sink with packs and a pool whose share
 * per partition is below the packed-frame size (the frames would be
 * small and copied into packs anyway).
 */
#include "core/spill.h"
#include "write/writer.h"

#include <errno.h>

/* Push-size buffers kept out of the stage besides the packs' half:
 * swaps, a one-off frame. */
#define USHI_STAGE_SPARE 16u
/* One note per this many staged bytes at least; more records (smaller
 * than this on average) flush the stage early. */
#define USHI_STAGE_NOTE_BYTES 64u
/* The gather reads staged records in partition order, a cache miss
 * each: it prefetches this many records ahead. */
#define USHI_STAGE_AHEAD 32u
/* A flush whose records average at most USHI_STAGE_SMALL bytes (with
 * the prefix) scatters those of at most USHI_STAGE_SCATTER in arrival
 * order and gathers the rest; larger records gather faster into the
 * cache-warm packs than into the span's cold buffers
 * (docs/notes/partitions.md). */
#define USHI_STAGE_SMALL 64u
#define USHI_STAGE_SCATTER 256u
#define NOWHERE UINT64_MAX

/* Where a staged record lies (chunk << shift | offset) and its bytes
 * with the length prefix: the gather sizes frames from these alone and
 * reads the records themselves only to copy them. */
struct spot {
	uint32_t pos, need;
};

struct note {
	uint32_t part;
	struct spot at;
};

struct ushi_stage {
	struct ushi_buf **chunks; /* the stage's pool buffers, in order */
	uint32_t nchunks, maxchunks;
	unsigned shift;           /* log2 of a chunk's bytes */
	uint32_t used;            /* bytes used in the last chunk */
	struct note *notes;       /* one per staged record, in order */
	struct spot *sorted;      /* their spots by partition (flush) */
	uint32_t n, maxnotes;
	uint32_t *count;          /* per partition: records staged */
	/* Scattering (span_flush): per partition the place of its next
	 * record in the span, or NOWHERE where its records are gathered;
	 * the flush's buffers, the next one to hand over, and the frames
	 * that start in it. */
	uint64_t *cur;
	struct ushi_buf **span;
	uint32_t nspan, maxspan, nout, nsf, maxsf;
	struct ushi_span_frame *sf;
	/* The order partitions are framed in (the sink's part_order), or
	 * NULL: 0, 1, 2, ... (a flush's). */
	const uint32_t *ord;
	uint8_t *scratch;         /* a frame of up to push size */
	uint8_t *zbuf;            /* with a codec: its compressed form */
	const struct ushi_stage_ops *ops; /* the writer's, above */
};

static void drop(struct ush_writer *w, struct ushi_stage *s)
{
	while (s->nchunks)
		pool_put(w->pool, s->chunks[--s->nchunks]);
	s->used = 0;
	s->n = 0;
}

void stage_free(struct ush_writer *w)
{
	struct ushi_stage *s = w->stage;
	if (!s)
		return;
	drop(w, s);
	ushi_free(s->chunks);
	ushi_free(s->notes);
	ushi_free(s->sorted);
	ushi_free(s->count);
	ushi_free(s->cur);
	ushi_free(s->span);
	ushi_free(s->sf);
	ushi_free(s->scratch);
	ushi_free(s->zbuf);
	ushi_free(s);
	w->stage = NULL;
}

/*
 * Scattering needs a sink that takes whole buffers of frames, raw
 * unsealed frames (built in place), and per flush at most the stage's
 * bytes plus a header per frame in buffers: a frame per partition and
 * one more per half push size of records.
 */
static int span_open(struct ush_writer *w, struct ushi_stage *s)
{
	uint32_t np = w->o.partitions;
	uint64_t bytes = ((uint64_t)s->maxchunks << s->shift) +
			 (uint64_t)(np + 2 * s->maxchunks + 1) *
				 USH_FRAME_HDR_SIZE;
	s->maxspan = (uint32_t)(bytes >> s->shift) + 1;
	s->maxsf = ((1u << s->shift) / USH_FRAME_HDR_SIZE) + 1;
	s->cur = ushi_malloc((size_t)np * sizeof(*s->cur));
	s->span = ushi_calloc(s->maxspan, sizeof(*s->span));
	s->sf = ushi_malloc((size_t)s->maxsf * sizeof(*s->sf));
	if (!s->cur || !s->span || !s->sf)
		return -ENOMEM;
	memset(s->cur, 0xff, (size_t)np * sizeof(*s->cur));
	return 0;
}

int stage_open(struct ush_writer *w, const struct ushi_stage_ops *ops)
{
	const struct ush_ring_opts *ro = w->ropts;
	size_t chunk = (size_t)USHI_BUF_MIN << w->push_order;
	uint64_t bufs = w->pool->bytes / chunk;
	if (!w->sink->pack_room ||
	    w->pool->bytes / w->o.partitions >= USHI_PACK_MIN ||
	    bufs < 2 * USHI_STAGE_SPARE)
		return 0;
	struct ushi_stage *s = ushi_calloc(1, sizeof(*s));
	if (!s)
		return ushi_fail(-ENOMEM, "writer: stage");
	w->stage = s;
	s->ops = ops;
	s->shift = (unsigned)__builtin_ctz(USHI_BUF_MIN) + w->push_order;
	/* Half the pool: the other half holds the last flush's packs while
	 * the disk writes them and the stage fills again. */
	s->maxchunks = (uint32_t)((bufs - USHI_STAGE_SPARE) / 2);
	s->maxnotes = (uint32_t)((uint64_t)s->maxchunks * chunk /
				 USHI_STAGE_NOTE_BYTES);
	s->chunks = ushi_calloc(s->maxchunks, sizeof(*s->chunks));
	s->notes = ushi_malloc((size_t)s->maxnotes * sizeof(*s->notes));
	s->sorted = ushi_malloc((size_t)s->maxnotes * sizeof(*s->sorted));
	s->count = ushi_calloc(w->o.partitions, sizeof(*s->count));
	s->scratch = ushi_aligned_alloc(ro->push_size);
	if (ro->codec != USH_CODEC_NONE)
		s->zbuf = ushi_aligned_alloc(ro->push_size);
	int ret = s->zbuf || w->tail || !w->sink->span_put ? 0 :
		  span_open(w, s);
	if (ret || !s->chunks || !s->notes || !s->sorted || !s->count ||
	    !s->scratch || (ro->codec != USH_CODEC_NONE && !s->zbuf)) {
		stage_free(w);
		return ushi_fail(-ENOMEM, "writer: stage of %u MiB for %u "
				"partitions", (unsigned)(bufs * chunk >> 20),
				w->o.partitions);
	}
	return 0;
}

/* Makes ret sticky and returns the sticky error with its message as
 * this thread's last error: a sink may return the error a completion
 * recorded (w->err) without setting it. */
static int failed(struct ush_writer *w, int ret)
{
	writer_error_keep(w, ret);
	return ushi_fail_msg(w->err, w->errmsg);
}

bool stage_pending(const struct ush_writer *w)
{
	return w->stage && w->stage->nchunks;
}

bool stage_holds(const struct ush_writer *w, uint32_t partition)
{
	return w->stage && w->stage->count[partition];
}

static const uint8_t *rec_at(const struct ushi_stage *s, uint32_t pos)
{
	return s->chunks[pos >> s->shift]->data +
	       (pos & ((1u << s->shift) - 1));
}

/*
 * memcpy of n bytes, inline where n is at most 64: two fixed-size copies
 * from either end, overlapping in the middle. At tens of bytes per
 * record a call to libc's memcpy and its size dispatch cost more than
 * the copy itself.
 */
static inline void copy(uint8_t *d, const uint8_t *s, size_t n)
{
	if (n >= 32 && n <= 64) {
		memcpy(d, s, 32);
		memcpy(d + n - 32, s + n - 32, 32);
	} else if (n >= 16 && n < 32) {
		memcpy(d, s, 16);
		memcpy(d + n - 16, s + n - 16, 16);
	} else if (n) {
		memcpy(d, s, n);
	}
}

/* Asks for the staged record at sp: its first line, and its last one
 * where it straddles a line boundary. */
static void prefetch(const struct ushi_stage *s, const struct spot *sp)
{
	const uint8_t *r = rec_at(s, sp->pos);
	__builtin_prefetch(r);
	if (((uintptr_t)r & 63) + sp->need > 64)
		__builtin_prefetch(r + sp->need - 1);
}

/* Copies sorted record i to o, asking for the one USHI_STAGE_AHEAD on
 * (across partitions: the sort made them one run). */
static void gather(const struct ushi_stage *s, uint32_t i, uint8_t *o)
{
	const struct spot *sp = &s->sorted[i];
	if (i + USHI_STAGE_AHEAD < s->n)
		prefetch(s, &sp[USHI_STAGE_AHEAD]);
	copy(o, rec_at(s, sp->pos), sp->need);
}

/* How many of the records from a on, up to b, fit a batch of cap bytes
 * (at least one: ush_writer_write() stages only records of at most push
 * size - 52 bytes); *raw becomes their bytes. */
static uint32_t batch_of(const struct ushi_stage *s, uint32_t a, uint32_t b,
			 uint32_t cap, uint32_t *raw)
{
	uint32_t n = 0, len = 0;
	for (; a + n < b; n++) {
		if (len + s->sorted[a + n].need > cap)
			break;
		len += s->sorted[a + n].need;
	}
	*raw = len;
	return n;
}

/*
 * Frames partition's staged records [a, b) (positions in s->sorted),
 * as few frames as the push size allows: each is built in the sink's
 * open pack where it fits the room, else in the scratch frame and
 * copied in across two packs (with a codec: always gathered there and
 * compressed).
 */
static int frame_part(struct ush_writer *w, struct ushi_stage *s,
		      uint32_t partition, uint32_t a, uint32_t b)
{
	const uint32_t cap = writer_room(w);
	struct ush_part_stats *st = &w->parts[partition].st;
	st->records += b - a;
	while (a < b) {
		uint32_t raw, room = 0;
		uint32_t nrec = batch_of(s, a, b, cap, &raw);
		uint8_t *dst = s->scratch, *pack;
		int ret = s->zbuf ? 0 :
			  w->sink->pack_room(w, partition, &pack, &room);
		if (ret)
			return ret;
		if (USH_FRAME_HDR_SIZE + raw + w->tail <= room)
			dst = pack;
		uint8_t *o = dst + USH_FRAME_HDR_SIZE;
		for (uint32_t i = a; i < a + nrec; i++) {
			gather(s, i, o);
			o += s->sorted[i].need;
		}
		a += nrec;
		st->bytes += raw - nrec * USH_RECORD_HDR_SIZE;
		if ((ret = s->ops->pack_frame(w, partition, dst, raw, nrec,
					      s->zbuf)))
			return ret;
	}
	return 0;
}

/* The i-th partition in the order the flush frames them. */
static inline uint32_t nth(const struct ushi_stage *s, uint32_t i)
{
	return s->ord ? s->ord[i] : i;
}

/* Whether waiting brings buffers back: ops in the ring, or frames the
 * sink holds (a net sink queues staged frames until credit returns,
 * with no op in the ring meanwhile). */
static bool waiting(const struct ush_writer *w)
{
	return ring_inflight(w->ring) || w->inflight;
}

/*
 * Scattered flushes. The gather above loads each staged record in
 * partition order: a cache miss per record in a stage larger than the
 * cache. Here the flush's frames are laid out first (in the sink's order
 * of partitions, nth(); sizes from the sorted notes), in pool buffers of
 * the push size taken for the whole flush (the span); one pass over the
 * stage in arrival order (sequential loads) copies each record of at most
 * USHI_STAGE_SCATTER bytes to its place; then, in that order, the
 * larger records are gathered into place and each frame gets its header
 * and CRC, and every buffer goes to the sink as it is done. A frame that
 * would straddle two buffers, or a partition of more than one frame, is
 * gathered in the scratch frame and copied in, as few as one per buffer.
 */
static uint8_t *span_at(const struct ushi_stage *s, uint64_t off)
{
	return s->span[off >> s->shift]->data +
	       (off & ((1u << s->shift) - 1));
}

/* Copies a frame built elsewhere to off, across buffers. */
static void span_copy(const struct ushi_stage *s, uint64_t off,
		      const uint8_t *p, uint32_t n)
{
	const uint32_t size = 1u << s->shift;
	while (n) {
		uint32_t room = size - (uint32_t)(off & (size - 1));
		uint32_t k = n < room ? n : room;
		memcpy(span_at(s, off), p, k);
		off += k;
		p += k;
		n -= k;
	}
}

/* Bytes of the frames of sorted records [a, b) at cap bytes of batch
 * each, as frame_part() and span_part() make them. */
static uint64_t frames_bytes(const struct ushi_stage *s, uint32_t a,
			     uint32_t b, uint32_t cap)
{
	uint64_t bytes = 0;
	while (a < b) {
		uint32_t raw;
		a += batch_of(s, a, b, cap, &raw);
		bytes += USH_FRAME_HDR_SIZE + raw;
	}
	return bytes;
}

/* Lays the flush's frames out: the span's bytes; cur[p] gets the place
 * of partition p's first record where it is one frame inside one
 * buffer, which its records are scattered to. */
static uint64_t span_layout(struct ush_writer *w, struct ushi_stage *s)
{
	const uint32_t cap = writer_room(w), size = 1u << s->shift;
	uint64_t pos = 0;
	uint32_t a = 0;
	for (uint32_t i = 0; i < w->o.partitions; i++) {
		uint32_t p = nth(s, i), b = s->count[p];
		uint64_t f = a < b ? frames_bytes(s, a, b, cap) : 0;
		if (f && f - USH_FRAME_HDR_SIZE <= cap &&
		    (pos & (size - 1)) + f <= size)
			s->cur[p] = pos + USH_FRAME_HDR_SIZE;
		pos += f;
		a = b;
	}
	return pos;
}

/* The span's n buffers: while the pool has none, the last flush's
 * writes are waited for. 1 when none can come (nothing in flight):
 * the flush gathers then. */
static int span_get(struct ush_writer *w, struct ushi_stage *s, uint32_t n)
{
	while (s->nspan < n) {
		struct ushi_buf *b = pool_get(w->pool, w->push_order);
		if (b) {
			s->span[s->nspan++] = b;
			continue;
		}
		if (!waiting(w))
			return 1;
		int ret = writer_reap(w);
		if (!ret && w->sink->flush)
			ret = w->sink->flush(w);
		if (!ret)
			ret = ring_submit(w->ring);
		if (ret || w->err)
			return ret ? ret : w->err;
	}
	return 0;
}

/* Hands the buffers below upto to the sink, with the frames noted. */
static int span_out(struct ush_writer *w, struct ushi_stage *s, uint64_t upto)
{
	int ret = 0;
	while (!ret && s->nout < upto >> s->shift) {
		struct ushi_buf *b = s->span[s->nout];
		s->span[s->nout++] = NULL;
		ret = w->sink->span_put(w, b, 1u << s->shift, s->sf, s->nsf);
		s->nsf = 0;
	}
	return ret;
}

/* Notes the frame of flen bytes at off, after handing over the buffers
 * before it. */
static int span_note(struct ush_writer *w, struct ushi_stage *s, uint64_t off,
		     uint32_t flen, uint32_t partition)
{
	int ret = span_out(w, s, off);
	s->sf[s->nsf++] = (struct ushi_span_frame){
		(uint32_t)(off & ((1u << s->shift) - 1)), flen, partition};
	return ret;
}

/* Frames partition's sorted records [a, b) at *pos in the span. */
static int span_part(struct ush_writer *w, struct ushi_stage *s,
		     uint32_t partition, uint32_t a, uint32_t b, uint64_t *pos)
{
	struct ush_part_stats *st = &w->parts[partition].st;
	const uint32_t cap = writer_room(w), nrec = b - a;
	st->records += nrec;
	if (s->cur[partition] == NOWHERE) {
		while (a < b) {
			uint32_t raw, n = batch_of(s, a, b, cap, &raw), flen;
			uint8_t *hdr = s->scratch, *o = hdr + USH_FRAME_HDR_SIZE;
			for (uint32_t i = a; i < a + n; i++) {
				gather(s, i, o);
				o += s->sorted[i].need;
			}
			st->bytes += raw - n * USH_RECORD_HDR_SIZE;
			int ret = s->ops->build_frame(w, partition, &hdr, raw,
						      n, NULL, &flen);
			if (!ret)
				ret = span_note(w, s, *pos, flen, partition);
			if (ret)
				return ret;
			span_copy(s, *pos, hdr, flen);
			*pos += flen;
			a += n;
		}
		return 0;
	}
	s->cur[partition] = NOWHERE;
	uint8_t *hdr = span_at(s, *pos), *o = hdr + USH_FRAME_HDR_SIZE;
	for (uint32_t i = a; i < b; i++) {
		if (s->sorted[i].need > USHI_STAGE_SCATTER)
			gather(s, i, o);
		o += s->sorted[i].need;
	}
	uint32_t raw = (uint32_t)(o - hdr) - USH_FRAME_HDR_SIZE, flen;
	st->bytes += raw - nrec * USH_RECORD_HDR_SIZE;
	int ret = s->ops->build_frame(w, partition, &hdr, raw, nrec, NULL,
				      &flen);
	if (!ret)
		ret = span_note(w, s, *pos, flen, partition);
	*pos += flen;
	return ret;
}

/* Scatters, frames and hands over every staged record (count[p] is the
 * end of p's sorted records). 1 when it cannot: no buffers for the span. */
static int span_flush(struct ush_writer *w, struct ushi_stage *s)
{
	uint64_t bytes = span_layout(w, s), pos = 0;
	uint64_t n = (bytes + (1u << s->shift) - 1) >> s->shift;
	/* Beside the stage the pool has half its buffers, less spares:
	 * short of them (a header per frame at 100,000 partitions), the
	 * flush gathers. */
	int ret = n > s->maxspan ||
			  n + s->nchunks > w->pool->bytes >> s->shift ? 1 :
		  span_get(w, s, (uint32_t)n);
	for (uint32_t i = 0; !ret && i < s->n; i++) {
		const struct note *nt = &s->notes[i];
		uint64_t c = s->cur[nt->part];
		if (c == NOWHERE)
			continue;
		s->cur[nt->part] = c + nt->at.need;
		if (nt->at.need <= USHI_STAGE_SCATTER)
			copy(span_at(s, c), rec_at(s, nt->at.pos), nt->at.need);
	}
	uint32_t a = 0;
	for (uint32_t i = 0; !ret && i < w->o.partitions; i++) {
		uint32_t p = nth(s, i), b = s->count[p];
		if (b > a)
			ret = span_part(w, s, p, a, b, &pos);
		a = b;
	}
	uint32_t last = (uint32_t)(bytes & ((1u << s->shift) - 1));
	if (!ret)
		ret = span_out(w, s, bytes);
	if (!ret && last) {
		struct ushi_buf *b = s->span[s->nout];
		s->span[s->nout++] = NULL;
		ret = w->sink->span_put(w, b, last, s->sf, s->nsf);
	}
	/* After an error (or with no span: 1) what is left goes back. */
	for (uint32_t p = 0; ret && p < w->o.partitions; p++)
		s->cur[p] = NOWHERE;
	while (s->nout < s->nspan)
		if (s->span[s->nout++])
			pool_put(w->pool, s->span[s->nout - 1]);
	s->nspan = s->nout = s->nsf = 0;
	return ret;
}

int stage_flush(struct ush_writer *w)
{
	struct ushi_stage *s = w->stage;
	if (!s || !s->nchunks)
		return 0;
	/* Batches handed off before these records carry lower sequence
	 * numbers: they reach the sink first. */
	int ret = s->ops->flush_queue(w);
	/* Counting sort, in the sink's order of partitions: count[p]
	 * becomes the end of p's positions. */
	s->ord = w->sink->part_order ? w->sink->part_order(w) : NULL;
	uint32_t at = 0, p, i;
	for (i = 0; i < w->o.partitions; i++) {
		p = nth(s, i);
		uint32_t c = s->count[p];
		s->count[p] = at;
		at += c;
	}
	for (i = 0; i < s->n; i++)
		s->sorted[s->count[s->notes[i].part]++] = s->notes[i].at;
	/* Small records scattered where they can be (1: not), else
	 * gathered. */
	uint64_t bytes = ((uint64_t)(s->nchunks - 1) << s->shift) + s->used;
	int rest = ret || !s->cur || bytes > (uint64_t)s->n * USHI_STAGE_SMALL ?
			   1 : span_flush(w, s);
	if (rest <= 0)
		ret = rest;
	uint32_t a = 0;
	for (i = 0; i < w->o.partitions; i++) {
		p = nth(s, i);
		uint32_t b = s->count[p];
		s->count[p] = 0;
		if (!ret && rest == 1 && b > a)
			ret = frame_part(w, s, p, a, b);
		a = b;
	}
	drop(w, s);
	w->st.staged_flushes++;
	if (!ret && w->sink->flush)
		ret = w->sink->flush(w);
	if (!ret)
		ret = ring_submit(w->ring);
	return ret ? failed(w, ret) : 0;
}

/*
 * While records are staged, the last flush's packs go on being written:
 * completions free ring ops and buffers, the sink's waiting packs take
 * the ops (sink flush). Once per chunk.
 */
static int stage_poll(struct ush_writer *w)
{
	if (!waiting(w))
		return 0;
	int ret = ring_poll(w->ring);
	if (!ret && w->sink->flush)
		ret = w->sink->flush(w);
	return ret ? ret : ring_submit(w->ring);
}

/* Room for need more bytes and one more note: a new chunk, after
 * flushing the stage when it is full. */
static int stage_room(struct ush_writer *w, struct ushi_stage *s,
		      uint32_t need)
{
	bool fits = s->nchunks && s->used + need <= (1u << s->shift);
	int ret = 0;
	if (s->n == s->maxnotes || (!fits && s->nchunks == s->maxchunks))
		ret = stage_flush(w);
	else if (fits)
		return 0;
	struct ushi_buf *b;
	if (!ret)
		ret = stage_poll(w);
	/* The pool is the ring's: its other writers' stages may hold it.
	 * This stage's flush needs packs: below a reserve of idle buffers
	 * it waits for writes in flight, else flushes, rather than take
	 * them (three staged writers on one ring failed, no pack buffer). */
	const size_t reserve = (size_t)USHI_STAGE_SPARE << s->shift;
	while (!ret && s->nchunks && w->pool->idle_bytes < reserve) {
		if (!waiting(w))
			ret = stage_flush(w);
		else if (!(ret = writer_reap(w)) && w->sink->flush &&
			 !(ret = w->sink->flush(w))) /* backlogged packs */
			ret = ring_submit(w->ring);
	}
	/* The pool short (packs in flight, swaps): it waits for them, or
	 * flushes the stage. */
	if (!ret)
		ret = s->ops->get_buf(w, w->push_order, &b);
	if (ret)
		return failed(w, ret);
	s->chunks[s->nchunks++] = b;
	s->used = 0;
	return 0;
}

int stage_write(struct ush_writer *w, uint32_t partition, const void *rec,
		size_t len)
{
	struct ushi_stage *s = w->stage;
	uint32_t need = USH_RECORD_HDR_SIZE + (uint32_t)len;
	if (unlikely(s->n == s->maxnotes || !s->nchunks ||
		     s->used + need > (1u << s->shift))) {
		int ret = stage_room(w, s, need);
		if (ret)
			return ret;
	}
	uint32_t pos = (s->nchunks - 1) << s->shift | s->used;
	uint8_t *d = s->chunks[s->nchunks - 1]->data + s->used;
	put_le32(d, (uint32_t)len);
	copy(d + USH_RECORD_HDR_SIZE, rec, len); /* rec may be NULL if 0 */
	s->used += need;
	s->notes[s->n++] = (struct note){partition, {pos, need}};
	s->count[partition]++;
	return 0;
}
