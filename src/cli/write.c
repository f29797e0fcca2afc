/*
 * The map phase of one thread: one ring, one writer (map id = thread
 * index), records generated straight into push buffers it fills.
 *
 * Both hand-offs fill buffers the same way, so --handoff is a clean A/B:
 * swap fills ush_writer_acquire() buffers and gives each away full with
 * ush_writer_swap(); copy fills private buffers of the same size and
 * hands them over with ush_writer_copy(). The hand-off latency is timed
 * around that one call.
 *
 * Filling is bounded: at most FILL_BYTES of buffers (at least 8), one per
 * partition. With more partitions than that, filling whole push buffers
 * would hand most of them off nearly empty, so every record goes through
 * ush_writer_write() instead: the library keeps small, growing partition
 * buffers within its pool, or stages the records (the hand-off timed is
 * then that call, one in LAT_SAMPLE: two clock reads and a histogram
 * update per record cost a fifth of a 100-byte record's path). A record
 * that does not fit an empty buffer goes out alone through
 * ush_writer_write(), after its partition's filled records, so each
 * partition's order holds.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define FILL_BYTES (64ull << 20)
#define POOL_MAX (1ull << 30)
#define QUEUE 16 /* the writer frames hand-offs in batches of up to 16 */
/* Records through ush_writer_write() timed: one in this many. */
#define LAT_SAMPLE 16u
#define CHECK_BYTES (256u << 10) /* poll time and Ctrl-C this often */

struct slot {
	uint8_t *buf;
	size_t used;
	uint32_t nrec, part;
};

struct fill {
	ush_writer *w;
	bool swap;
	size_t cap;
	struct slot *slots;
	uint32_t nslots, nused, hand;
	int32_t *slot_of; /* per partition: its slot, or -1 */
	uint8_t *big;     /* a record above cap, or any record when through */
	bool through;     /* more partitions than slots: ush_writer_write() */
	bool oom;         /* a private buffer could not be allocated */
	uint32_t untimed; /* through: records since the last one timed */
	struct ush_lat *lat;
};

static int handoff(struct fill *s, struct slot *sl)
{
	if (!sl->used)
		return 0;
	uint64_t t0 = now_ns();
	int ret = s->swap ? ush_writer_swap(s->w, sl->part, (void **)&sl->buf,
					    sl->used, sl->nrec)
			  : ush_writer_copy(s->w, sl->part, sl->buf, sl->used,
					    sl->nrec);
	ush_lat_add(s->lat, now_ns() - t0);
	sl->used = 0;
	sl->nrec = 0;
	return ret;
}

static int get_slot(struct fill *s, uint32_t part, struct slot **out)
{
	int32_t i = s->slot_of[part];
	if (i < 0) {
		if (s->nused < s->nslots) {
			i = (int32_t)s->nused++;
		} else {
			i = (int32_t)s->hand;
			s->hand = (s->hand + 1) % s->nslots;
			int ret = handoff(s, &s->slots[i]);
			if (ret)
				return ret;
			s->slot_of[s->slots[i].part] = -1;
		}
		struct slot *sl = &s->slots[i];
		if (!sl->buf && s->swap) {
			size_t cap;
			int ret = ush_writer_acquire(s->w, (void **)&sl->buf,
						     &cap);
			if (ret)
				return ret;
		} else if (!sl->buf && !(sl->buf = malloc(s->cap))) {
			s->oom = true;
			return -ENOMEM;
		}
		sl->part = part;
		s->slot_of[part] = i;
	}
	*out = &s->slots[i];
	return 0;
}

static int put_record(struct fill *s, const struct rec_gen *g, uint32_t map,
		      uint64_t seq, uint32_t *lenp)
{
	uint64_t h = rec_hash(g, map, seq);
	uint32_t part = rec_part(g, h), len = rec_len(g, h);
	*lenp = len;
	size_t need = USH_RECORD_HDR_SIZE + (size_t)len;
	struct slot *sl;
	int ret;
	if (need > s->cap || s->through) {
		int32_t i = s->slot_of[part];
		if (i >= 0 && (ret = handoff(s, &s->slots[i])))
			return ret;
		rec_fill(g, map, seq, h, s->big, len);
		if (s->through && ++s->untimed < LAT_SAMPLE)
			return ush_writer_write(s->w, part, s->big, len);
		s->untimed = 0;
		uint64_t t0 = now_ns();
		ret = ush_writer_write(s->w, part, s->big, len);
		ush_lat_add(s->lat, now_ns() - t0);
		return ret;
	}
	if ((ret = get_slot(s, part, &sl)))
		return ret;
	if (sl->used + need > s->cap && (ret = handoff(s, sl)))
		return ret;
	uint8_t *d = sl->buf + sl->used;
	put_le32(d, len);
	rec_fill(g, map, seq, h, d + USH_RECORD_HDR_SIZE, len);
	sl->used += need;
	sl->nrec++;
	return 0;
}

static void fill_free(struct fill *s)
{
	for (uint32_t i = 0; s->slots && i < s->nslots; i++) {
		if (s->swap && s->slots[i].buf)
			ush_writer_release(s->w, s->slots[i].buf);
		else if (!s->swap)
			free(s->slots[i].buf);
	}
	free(s->slots);
	free(s->slot_of);
	free(s->big);
}

static void ring_opts(const struct job_opts *o, uint32_t slots,
		      struct ush_ring_opts *ro)
{
	ush_ring_opts_init(ro);
	uint64_t bufs = QUEUE * 2 + o->iodepth + 2;
	if (o->handoff == HANDOFF_SWAP || o->partitions > slots)
		bufs += slots; /* staged buffers, or the library's partitions */
	ro->iodepth = (unsigned)o->iodepth;
	ro->push_size = o->bs;
	ro->pool_bytes = bufs * o->bs > POOL_MAX ? POOL_MAX : bufs * o->bs;
	ro->sqpoll = o->sqpoll;
	ro->fixedbufs = o->fixedbufs;
	ro->codec = (enum ush_codec)o->codec.codec;
	ro->level = o->codec.level;
}

/* Generates and hands off this thread's records until done. */
static int produce(struct thread_ctx *t, struct fill *s, uint64_t t0)
{
	struct job_ctx *j = t->job;
	const struct job_opts *o = j->o;
	struct dir_stats *d = &t->res->w;
	uint64_t deadline = o->runtime_ms ? t0 + o->runtime_ms * 1000000
					  : UINT64_MAX;
	uint64_t seq = 0, next_check = 0, reported = 0;
	int ret = 0;
	for (;;) {
		if (d->bytes >= next_check) {
			atomic_fetch_add(&j->wbytes, d->bytes - reported);
			reported = d->bytes;
			next_check = d->bytes + CHECK_BYTES;
			if (job_stopping(j) || now_ns() >= deadline)
				break;
		}
		if (!o->time_based && d->bytes >= o->size)
			break;
		uint32_t len;
		if ((ret = put_record(s, &j->gen, t->index, seq, &len)))
			break;
		d->bytes += len;
		d->records++;
		seq++;
	}
	for (uint32_t i = 0; !ret && i < s->nused; i++)
		ret = handoff(s, &s->slots[i]);
	atomic_fetch_add(&j->wbytes, d->bytes - reported);
	return ret;
}

/* sealed: w seals its frames, so each batch leaves the trailer's room. */
static int fill_init(struct fill *s, const struct job_opts *o,
		     uint32_t slots, ush_writer *w, bool sealed,
		     struct ush_lat *lat)
{
	memset(s, 0, sizeof(*s));
	s->w = w;
	s->swap = o->handoff == HANDOFF_SWAP;
	s->cap = o->bs - USH_FRAME_HDR_SIZE -
		 (sealed ? USH_SEAL_TRAILER_SIZE : 0);
	s->nslots = slots;
	s->through = o->partitions > slots;
	s->lat = lat;
	s->slots = calloc(slots, sizeof(*s->slots));
	s->slot_of = malloc(o->partitions * sizeof(*s->slot_of));
	s->big = malloc(o->record_size[1] ? o->record_size[1] : 1);
	if (!s->slots || !s->slot_of || !s->big)
		return -ENOMEM;
	memset(s->slot_of, 0xff, o->partitions * sizeof(*s->slot_of));
	return 0;
}

static void publish(struct thread_ctx *t, ush_writer *w,
		    const struct ush_part_stats *parts)
{
	struct job_ctx *j = t->job;
	struct dir_stats *d = &t->res->w;
	struct ush_writer_stats st;
	ush_writer_stats(w, &st);
	d->batches = st.batches;
	d->raw_bytes = st.raw_bytes;
	d->frame_bytes = st.frame_bytes;
	d->stored_bytes = st.stored_bytes;
	for (unsigned k = 0; k < USH_REPLICAS_MAX; k++)
		d->replica_bytes[k] = st.net_replica_bytes[k];
	d->failovers = st.net_failovers;
	ush_lat_merge(&d->clat, ush_writer_complete_lat(w));
	for (uint32_t p = 0; parts && p < j->partitions; p++) {
		size_t k = (size_t)t->index * j->partitions + p;
		j->expect.records[k] = parts[p].records;
		j->expect.bytes[k] = parts[p].bytes;
	}
	/* The driver keeps each map's status: the attempt its reads read. */
	struct ush_status ms;
	if (parts && !ush_writer_status(w, &ms)) {
		void *copy = malloc(ms.len);
		if (copy)
			j->expect.status[t->index] = (struct ush_status){
				memcpy(copy, ms.data, ms.len), ms.len};
		else
			job_fail(t, -ENOMEM, "map %u: out of memory for its "
				 "status", t->index);
	}
}

void write_phase(struct thread_ctx *t)
{
	struct job_ctx *j = t->job;
	const struct job_opts *o = j->o;
	struct dir_stats *d = &t->res->w;
	uint64_t slots = FILL_BYTES / o->bs;
	slots = slots < 8 ? 8 : slots;
	slots = slots > o->partitions ? o->partitions : slots;
	if (o->handoff == HANDOFF_SWAP && slots > POOL_MAX / o->bs / 2)
		slots = POOL_MAX / o->bs / 2;
	struct ush_ring_opts ro;
	ring_opts(o, (uint32_t)slots, &ro);
	char dir[PATH_MAX]; /* --dir's maps go round its directories */
	job_dir(o, t->index, dir, sizeof(dir));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = j->shuffle,
		.map = t->index, .partitions = j->partitions,
		.target = o->target == TARGET_DISK  ? USH_TARGET_DISK : o->target == TARGET_NET ? USH_TARGET_NET : USH_TARGET_NULL,
		.dir = dir, .direct = o->direct,
		.workers = j->workers[0] ? j->workers : NULL,
		.replicas = (uint32_t)o->replicas, .app = o->app,
		.ioengine = (enum ush_ioengine)o->ioengine,
		.seal_key = j->nkeys ? &j->keys[0] : NULL};
	ush_ring *ring = NULL;
	ush_writer *w = NULL;
	struct fill s = {0};
	struct ush_part_stats *parts = calloc(j->partitions, sizeof(*parts));
	int ret = parts ? ush_ring_create(&ring, &ro) : -ENOMEM;
	if (!ret) {
		struct ush_ring_info info;
		ush_ring_info(ring, &info);
		t->res->fixedbufs = info.fixedbufs;
		t->res->setup_flags = info.setup_flags;
		t->res->uring_refused = info.uring_refused;
		ret = ush_writer_open(&w, ring, &wo);
	}
	bool oom = !parts;
	if (!ret && (ret = fill_init(&s, o, (uint32_t)slots, w,
				     wo.seal_key != NULL, &d->handoff)))
		oom = true;
	if (ret)
		job_fail(t, ret, "map %u setup: %s", t->index,
			 oom ? "out of memory" : ush_last_error());
	phase_barrier(t, 0);
	uint64_t t0 = now_ns();
	if (!ret && (ret = produce(t, &s, t0)))
		job_fail(t, ret, "map %u: %s", t->index,
			 s.oom ? "out of memory" : ush_last_error());
	fill_free(&s);
	if (w && !ret && !job_stopping(j)) {
		if ((ret = ush_writer_commit(w, parts)))
			job_fail(t, ret, "map %u commit: %s", t->index,
				 ush_last_error());
	} else if (w) {
		ush_writer_abort(w);
	}
	d->runtime_ns = now_ns() - t0;
	/*
	 * The phase ends after the commit, as its runtime does: a worker
	 * stores asynchronously, and only its commit reply says it is done.
	 */
	phase_barrier(t, 1);
	if (w)
		publish(t, w, ret ? NULL : parts);
	ush_writer_free(w);
	ush_ring_free(ring);
	free(parts);
}
