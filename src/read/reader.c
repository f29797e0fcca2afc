/*
 * The reduce-side reader. It reads exactly the attempts its map statuses
 * name, from where each status says: a spill directory (each map's index,
 * then the frames of the partition) or the worker that holds the
 * partition (one stream per distinct worker). Every frame is checked
 * (header, CRC32C, records) before a single record is yielded, and each
 * map's batches are checked against its status: their number, their
 * order and the checksum over their CRCs. A second frame of a batch is
 * compared with the first by CRC: a resend is dropped, another one is
 * corruption naming both places, whichever came first.
 */
#define _GNU_SOURCE
#include "core/codec.h"
#include "core/spill.h"
#include "core/status.h"
#include "net/net.h"
#include "read/prefetch.h"
#include "read/reader_net.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* One map: the attempt its status names and what it says of the
 * partition, then what was read. */
struct rmap {
	uint32_t map, attempt;
	uint32_t src;              /* where it lives: index into srcs, or
				      NO_SRC (an empty replicated one) */
	/* net: the workers holding it (into peers), tried in order; at:
	 * the one being read. */
	uint32_t holder[USH_REPLICAS_MAX];
	uint8_t nholders, at;
	uint8_t refused;           /* holders that said "not committed" */
	uint64_t expect;           /* batches, per the status */
	uint32_t want_sum;         /* their checksum, per the status */
	uint64_t got, next_seq;    /* batches read; lower seqs: duplicates */
	uint32_t sum;              /* running checksum of those read */
	/* Per batch taken (seq 0..got-1), to compare a duplicate with:
	 * its frame's CRC and offset in the file or the worker stream.
	 * 12 B per batch, grown as batches come (seen_room()), freed at
	 * the map's end. */
	uint64_t *offs;            /* NULL until its first batch */
	uint32_t *crcs;
	uint64_t seen_cap;         /* batches they have room for */
};

/* A place maps live: a spill directory, or the worker holding the
 * partition and its stream. */
struct rsrc {
	char *loc;
	struct reader_net *net;
	bool failed;               /* net: its maps went on elsewhere */
};

#define NO_SRC UINT32_MAX

struct ush_reader {
	uint32_t shuffle, partition, partitions;
	char **peers;              /* net: the workers of the statuses */
	uint32_t npeers;
	char app[USHI_STATUS_APP_MAX + 1]; /* the statuses' application */
	uint8_t target;
	struct rmap *maps;         /* ascending map ids */
	uint32_t nmaps;
	struct rsrc *srcs;
	uint32_t nsrcs;
	uint32_t next;             /* disk: next map; net: current source */
	uint32_t timeout_ms;       /* net */
	struct ushi_codec_ctx codec;
	/* disk: the map being read */
	struct rmap *cur;
	int fd, dfd;               /* its data file, buffered and O_DIRECT */
	struct prefetch pf;        /* the partition's frames read ahead */
	char path[PATH_MAX];
	struct spill_entry *ents;  /* this partition's entries of the map */
	size_t nents, ei, ecap;    /* ecap in bytes, as ushi_grow() keeps it */
	uint8_t *ibuf, *rbuf;      /* index, decompressed batch */
	size_t icap, rcap;
	const uint8_t *batch;      /* records being yielded */
	size_t blen, boff;
	int err;
	unsigned gen;              /* ushi_fork_gen at open */
	struct ush_reader_stats st;
	struct ush_lat load_lat;
};

/* ----------------------------------------------------- checks of a map */

static int check_map(const struct ush_reader *r, const struct rmap *m,
		     const char *where)
{
	if (m->got == m->expect && ~m->sum == m->want_sum)
		return 0;
	return ushi_fail(USH_ECORRUPT, "reader: %s partition %u map %u attempt "
			"%u: %llu batches with checksum %08x, its map status "
			"says %llu with %08x", where, r->partition, m->map,
			m->attempt, (unsigned long long)m->got, ~m->sum,
			(unsigned long long)m->expect, m->want_sum);
}

/* The place of a frame for a message, formatted only when one is made:
 * the worker stream net, or r->path at off. */
static const char *place(struct ush_reader *r, struct reader_net *net,
			 uint64_t off)
{
	static _Thread_local char buf[PATH_MAX + 32];
	if (net)
		return reader_net_where(net);
	snprintf(buf, sizeof(buf), "%s offset %llu", r->path,
		 (unsigned long long)off);
	return buf;
}

/* Room to remember batch m->got (below the status's count: a batch
 * beyond it is refused first). The arrays double as batches come, up
 * to that count: a count the status claims costs nothing until its
 * batches arrive, so memory follows what the file or the stream holds
 * (at most twice 12 B per batch taken), never a forged claim. */
static int seen_room(struct rmap *m)
{
	if (m->got < m->seen_cap)
		return 0;
	uint64_t cap = m->seen_cap ? 2 * m->seen_cap : 64;
	if (cap > m->expect)
		cap = m->expect;
	uint64_t *offs = cap <= SIZE_MAX / 12 ? ushi_malloc((size_t)cap * 12) :
						NULL;
	if (!offs)
		return -ENOMEM;
	uint32_t *crcs = (uint32_t *)(offs + cap);
	if (m->got) {
		memcpy(offs, m->offs, m->got * sizeof(*offs));
		memcpy(crcs, m->crcs, m->got * sizeof(*crcs));
	}
	ushi_free(m->offs);
	m->offs = offs;
	m->crcs = crcs;
	m->seen_cap = cap;
	return 0;
}

/* The map's batches are all read (or the read failed): what was kept to
 * compare duplicates with goes. */
static void map_done(struct rmap *m)
{
	ushi_free(m->offs);
	m->offs = NULL;
	m->crcs = NULL;
	m->seen_cap = 0;
}

/*
 * A frame of an already taken seq: the same CRC is a resend, dropped;
 * another is a conflict, whichever came first (docs/format.md §4).
 */
static int duplicate(struct ush_reader *r, struct rmap *m,
		     const struct ushi_frame *f, struct reader_net *net,
		     uint64_t off)
{
	if (m->crcs[f->seq] == f->crc) {
		r->st.dup_batches++;
		return 0;
	}
	char first[PATH_MAX + 64];
	if (net)
		snprintf(first, sizeof(first), "worker %s offset %llu",
			 reader_net_peer(net),
			 (unsigned long long)m->offs[f->seq]);
	else
		snprintf(first, sizeof(first), "%s offset %llu", r->path,
			 (unsigned long long)m->offs[f->seq]);
	return ushi_fail(USH_ECORRUPT, "reader: shuffle %u map %u attempt %u "
			"partition %u seq %llu: two different frames, CRC "
			"%08x at %s and CRC %08x at %s", r->shuffle, m->map,
			m->attempt, r->partition, (unsigned long long)f->seq,
			m->crcs[f->seq], first, f->crc, place(r, net, off));
}

/*
 * Takes a frame of map m whose header and CRC were checked: an identical
 * duplicate is dropped, a different one, a gap or an extra batch is an
 * error; the batch is decompressed and its records checked. Returns 1
 * when r->batch is loaded, 0 for a duplicate, or an error naming the
 * frame's place: the worker stream net, or r->path, at off.
 */
static int take(struct ush_reader *r, struct rmap *m,
		const struct ushi_frame *f, const uint8_t *frame,
		struct reader_net *net, uint64_t off, uint64_t t0)
{
	if (f->seq < m->next_seq)
		return duplicate(r, m, f, net, off);
	const char *what = NULL;
	char buf[96];
	if (f->seq > m->next_seq || m->got == m->expect) {
		snprintf(buf, sizeof(buf), "batch %llu where %s was due",
			 (unsigned long long)f->seq,
			 m->got == m->expect ? "none" : "an earlier one");
		what = buf;
	}
	const uint8_t *payload = frame + USH_FRAME_HDR_SIZE;
	int ret = what ? USH_ECORRUPT : 0;
	if (!ret && f->codec != USH_CODEC_NONE) {
		ret = ushi_grow(&r->rbuf, &r->rcap, f->raw_len ? f->raw_len : 1);
		if (!ret)
			ret = codec_decompress(&r->codec, f->codec, payload,
					       f->payload_len, r->rbuf,
					       f->raw_len);
		what = "decompressing the frame";
		payload = r->rbuf;
	}
	if (!ret && (ret = records_check(payload, f->raw_len, f->nrec)))
		what = "records of the frame";
	if (!ret && (ret = seen_room(m)))
		what = "allocation";
	if (ret)
		return ushi_fail(ret, "reader: %s partition %u map %u attempt "
				"%u: %s", place(r, net, off), r->partition, m->map,
				m->attempt, what);
	m->offs[m->got] = off;
	m->crcs[m->got] = f->crc;
	m->next_seq = f->seq + 1;
	m->got++;
	m->sum = status_sum_add(m->sum, f->crc);
	r->st.batches++;
	r->st.raw_bytes += f->raw_len;
	ush_lat_add(&r->load_lat, ushi_now_ns() - t0);
	r->batch = payload;
	r->blen = f->raw_len;
	r->boff = 0;
	return 1;
}

/* ------------------------------------------------------------- disk */

static int index_path(char *buf, size_t n, const struct ush_reader *r,
		      const struct rmap *m)
{
	return spill_index(buf, n, r->srcs[m->src].loc, r->shuffle, m->map,
			   m->attempt);
}

/* A header without the magic: is the index a version 1 one, whose
 * trailer is at its end? */
static bool index_v1(int fd, size_t size)
{
	uint8_t t[USHI_INDEX_V1_TRAILER];
	return size >= sizeof(t) && !pread_all(fd, t, sizeof(t),
					      size - sizeof(t)) &&
	       spill_is_v1(t);
}

/*
 * Reads m's index header, the partition's directory slot and its entries
 * (docs/format.md §2.3): three small reads whatever the partition count.
 * Returns 0 with the entries in r->ents and h filled, or an error, *what
 * and *bad (the index offset) saying which check failed.
 */
static int index_lookup(struct ush_reader *r, const struct rmap *m, int fd,
			size_t size, struct spill_header *h,
			const char **what, uint64_t *bad)
{
	uint8_t hdr[USHI_INDEX_HEADER], sl[2 * USHI_INDEX_SLOT];
	*what = "index shorter than its header";
	if (size < USHI_INDEX_HEADER)
		return USH_ECORRUPT;
	int ret = pread_all(fd, hdr, sizeof(hdr), 0);
	if (ret)
		return ret;
	*what = "index header";
	ret = spill_header_get(hdr, h);
	if (ret == USH_ECORRUPT && get_le32(hdr) != USHI_INDEX_MAGIC &&
	    index_v1(fd, size))
		ret = USH_EVERSION;
	if (ret == USH_EVERSION)
		*what = "index of another version: this reader reads "
			"version 2 (docs/format.md §2.3)";
	if (ret)
		return ret;
	*what = "index header names another map output";
	if (h->shuffle != r->shuffle || h->map != m->map ||
	    h->attempt != m->attempt || h->partitions != r->partitions)
		return USH_ECORRUPT;
	*what = "index size disagrees with its header";
	if (size < spill_index_size(h->partitions, 0) ||
	    h->entries != (size - spill_index_size(h->partitions, 0)) /
				  USHI_INDEX_ENTRY ||
	    size != spill_index_size(h->partitions, h->entries))
		return USH_ECORRUPT;
	*bad = spill_slot_off(r->partition);
	if ((ret = pread_all(fd, sl, sizeof(sl), *bad)))
		return ret;
	struct spill_slot s0, s1;
	spill_slot_get(sl, &s0);
	spill_slot_get(sl + USHI_INDEX_SLOT, &s1);
	*what = "directory slot out of range";
	if (s0.start > s1.start || s1.start > h->entries)
		return USH_ECORRUPT;
	size_t n = (size_t)(s1.start - s0.start);
	/* Buffers are kept across maps: no allocation per map opened. */
	if ((ret = ushi_grow(&r->ibuf, &r->icap, n * USHI_INDEX_ENTRY)) ||
	    (ret = ushi_grow((uint8_t **)&r->ents, &r->ecap,
			     n * sizeof(*r->ents))))
		return ret;
	*bad = spill_entry_off(h->partitions, s0.start);
	if ((ret = pread_all(fd, r->ibuf, n * USHI_INDEX_ENTRY, *bad)))
		return ret;
	*what = "directory slot CRC";
	*bad = spill_slot_off(r->partition);
	if (spill_slot_crc(s0.start, r->ibuf, n * USHI_INDEX_ENTRY) != s0.crc)
		return USH_ECRC;
	*what = "entry out of range or of another partition";
	for (size_t i = 0; i < n; i++) {
		struct spill_entry e;
		spill_entry_get(r->ibuf + i * USHI_INDEX_ENTRY, &e);
		*bad = spill_entry_off(h->partitions, s0.start + i);
		if (e.len < USH_FRAME_HDR_SIZE || e.off > h->data_bytes ||
		    e.len > h->data_bytes - e.off || e.partition != r->partition)
			return USH_ECORRUPT;
		r->ents[i] = e;
	}
	r->nents = n;
	return 0;
}

/* Finds this partition's entries in m's index, opens m's data file. */
static int load_index(struct ush_reader *r, const struct rmap *m)
{
	char ipath[PATH_MAX];
	struct stat st = {0};
	struct spill_header h;
	index_path(ipath, sizeof(ipath), r, m);
	int fd = open(ipath, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ushi_fail(-errno, "reader: open %s", ipath);
	const char *what = "read";
	uint64_t bad = 0; /* index offset named in an error */
	r->nents = r->ei = 0;
	int ret = fstat(fd, &st) ? -errno : 0;
	if (!ret)
		ret = index_lookup(r, m, fd, (size_t)st.st_size, &h, &what,
				   &bad);
	close(fd);
	if (ret)
		return ushi_fail(ret, "reader: index %s offset %llu partition "
				"%u map %u attempt %u: %s", ipath,
				(unsigned long long)bad, r->partition, m->map,
				m->attempt, what);
	spill_data(r->path, sizeof(r->path), r->srcs[m->src].loc, r->shuffle,
		   m->map, m->attempt);
	r->fd = open(r->path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0)
		return ushi_fail(-errno, "reader: open %s (map %u partition %u)",
				r->path, m->map, r->partition);
	if (fstat(r->fd, &st))
		return ushi_fail(-errno, "reader: stat %s", r->path);
	if ((uint64_t)st.st_size < h.data_bytes)
		return ushi_fail(USH_ECORRUPT, "reader: %s offset %lld "
				"partition %u: data file truncated (index "
				"expects %llu bytes)",
				r->path, (long long)st.st_size, r->partition,
				(unsigned long long)h.data_bytes);
	/* Large frames are read around the page cache (prefetch.h); a
	 * file system that refuses O_DIRECT reads through it. */
	for (size_t i = 0; r->dfd < 0 && i < r->nents; i++)
		if (r->ents[i].len >= USHI_PACK_MIN)
			r->dfd = open(r->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	prefetch_reset(&r->pf, r->fd, r->dfd, r->ents, r->nents);
	return 0;
}

/* The next batch of the current map's file: 1, 0 at its end, or an
 * error. */
static int disk_frame(struct ush_reader *r)
{
	struct rmap *m = r->cur;
	while (r->ei < r->nents) {
		const struct spill_entry *e = &r->ents[r->ei];
		uint64_t t0 = ushi_now_ns();
		struct ushi_frame f;
		const char *what = "frame";
		const uint8_t *frame = NULL;
		int ret = prefetch_take(&r->pf, r->ei++, &frame);
		if (!ret && (ret = frame_decode(frame, &f)))
			what = "frame header";
		if (!ret && (ush_frame_size(f.payload_len) != e->len ||
			     f.shuffle != r->shuffle || f.map != m->map ||
			     f.attempt != m->attempt ||
			     f.partition != r->partition)) {
			ret = USH_ECORRUPT;
			what = "frame header disagrees with the index";
		}
		if (!ret && (ret = frame_check(frame, &f)))
			what = "frame";
		if (ret)
			return ushi_fail(ret, "reader: %s offset %llu partition "
					"%u: %s", r->path,
					(unsigned long long)e->off,
					r->partition, what);
		r->st.stored_bytes += e->len;
		ret = take(r, m, &f, frame, NULL, e->off, t0);
		if (ret)
			return ret;
	}
	map_done(m);
	return check_map(r, m, r->path);
}

/* Closes the current map's data file, nothing in flight on it. */
static void close_data(struct ush_reader *r)
{
	prefetch_drain(&r->pf);
	if (r->fd >= 0)
		close(r->fd);
	if (r->dfd >= 0)
		close(r->dfd);
	r->fd = r->dfd = -1;
}

/* The next batch from disk: 1, 0 at the end of every map, or an error. */
static int disk_next(struct ush_reader *r)
{
	for (;;) {
		int ret = r->cur ? disk_frame(r) : 0;
		if (ret)
			return ret;
		close_data(r);
		r->cur = NULL;
		/* A map without batches of this partition has no file to
		 * read: its status says so, under its CRC. */
		while (r->next < r->nmaps && !r->maps[r->next].expect)
			r->next++;
		if (r->next == r->nmaps)
			return 0;
		r->cur = &r->maps[r->next++];
		if ((ret = load_index(r, r->cur)))
			return ret;
	}
}

/* ------------------------------------------------------------- net */

static struct rmap *find_map(struct ush_reader *r, uint32_t map)
{
	uint32_t lo = 0, hi = r->nmaps;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (r->maps[mid].map < map)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->nmaps && r->maps[lo].map == map ? &r->maps[lo] : NULL;
}

/* The source reading worker peer in this failover (from first), added
 * if new. */
static int failover_src(struct ush_reader *r, uint32_t first, const char *peer,
			uint32_t *idx)
{
	for (uint32_t i = first; i < r->nsrcs; i++)
		if (!strcmp(r->srcs[i].loc, peer)) {
			*idx = i;
			return 0;
		}
	char *loc = ushi_strdup(peer);
	if (!loc)
		return ushi_fail(-ENOMEM, "reader: allocation");
	r->srcs[r->nsrcs] = (struct rsrc){loc, NULL, false};
	*idx = r->nsrcs++;
	return 0;
}

/*
 * Every replica of map m was tried: an error naming them. When each one
 * answered that an attempt it was asked for is not committed (a dropped
 * shuffle, an aborted attempt), that is the answer, USH_ENOTCOMMITTED:
 * the driver reruns the map. Only a replica that could not answer (down,
 * unreachable, a broken stream) makes it -EHOSTUNREACH.
 */
static int all_gone(struct ush_reader *r, const struct rmap *m,
		    const char *last)
{
	char tried[512];
	int len = 0;
	for (unsigned k = 0; k < m->nholders && len < (int)sizeof(tried); k++)
		len += snprintf(tried + len, sizeof(tried) - (size_t)len,
				"%s%s", k ? ", " : "", r->peers[m->holder[k]]);
	if (m->refused == m->nholders)
		return ushi_fail(USH_ENOTCOMMITTED, "reader: partition %u map "
				"%u attempt %u: every replica refused its "
				"FETCH, an attempt asked for is not committed "
				"there, worker %s (last: %s)", r->partition,
				m->map, m->attempt, tried, last);
	return ushi_fail(-EHOSTUNREACH, "reader: partition %u map %u attempt "
			"%u: no replica left, tried worker %s (last: %s)",
			r->partition, m->map, m->attempt, tried, last);
}

/*
 * Source s failed (the last error says why): each of its maps goes on
 * at its next holder, one new source per worker, read after the others.
 * Their FETCH asks each map from its first batch not yet verified, so the
 * records resume after the last one taken (a batch that comes again all
 * the same is dropped as a duplicate: same seq, same CRC); a map read
 * whole is done. Returns 0, or an error when a map has no holder left:
 * err itself for a map without replicas.
 */
static int failover(struct ush_reader *r, uint32_t s, int err)
{
	char last[256];
	snprintf(last, sizeof(last), "%s", ush_last_error());
	reader_net_free(r->srcs[s].net);
	r->srcs[s].net = NULL;
	r->srcs[s].failed = true;
	uint32_t first = r->nsrcs;
	for (uint32_t i = 0; i < r->nmaps; i++) {
		struct rmap *m = &r->maps[i];
		if (m->src != s)
			continue;
		if (m->got && m->got == m->expect) {
			/* Every batch verified: nothing left to read (a map
			 * of none still needs a holder to say it committed). */
			int ret = check_map(r, m, r->srcs[s].loc);
			map_done(m);
			m->src = NO_SRC;
			if (ret)
				return ret;
			continue;
		}
		if (m->nholders == 1)
			return err;
		m->refused += err == USH_ENOTCOMMITTED;
		if (++m->at >= m->nholders)
			return all_gone(r, m, last);
		r->st.failovers += r->nsrcs == first;
		int ret = failover_src(r, first, r->peers[m->holder[m->at]],
				       &m->src);
		if (ret)
			return ret;
	}
	return 0;
}

static int net_open_src(struct ush_reader *r, uint32_t s, uint32_t timeout_ms);

/* The next batch from the workers: 1, 0 at the end of every stream, or
 * an error. A stream that fails goes on at another replica. */
static int net_next(struct ush_reader *r)
{
	while (r->next < r->nsrcs) {
		struct reader_net *s = r->srcs[r->next].net;
		struct ushi_frame f;
		const uint8_t *frame;
		uint64_t t0 = ushi_now_ns();
		if (r->srcs[r->next].failed) {
			r->next++;
			continue;
		}
		int ret = s ? 0 : net_open_src(r, r->next, r->timeout_ms);
		if (!ret) {
			s = r->srcs[r->next].net;
			ret = reader_net_frame(s, &f, &frame);
		}
		if (ret < 0) {
			if ((ret = failover(r, r->next, ret)))
				return ret;
			r->next++;
			continue;
		}
		if (ret == 0) { /* FETCH_END: every map of it complete? */
			for (uint32_t i = 0; !ret && i < r->nmaps; i++)
				if (r->maps[i].src == r->next) {
					map_done(&r->maps[i]);
					ret = check_map(r, &r->maps[i],
							reader_net_where(s));
				}
			if (ret)
				return ret;
			reader_net_free(s);
			r->srcs[r->next++].net = NULL;
			continue;
		}
		if (ret < 0)
			return ret;
		r->st.stored_bytes += proto_size(&f);
		struct rmap *m = find_map(r, f.map);
		if (!m || m->attempt != f.attempt || m->src != r->next)
			return ushi_fail(USH_ECORRUPT, "reader: %s partition %u: "
					"frame of map %u attempt %u, which this "
					"reader did not ask for",
					reader_net_where(s), r->partition,
					f.map, f.attempt);
		ret = take(r, m, &f, frame, s, reader_net_at(s), t0);
		if (ret)
			return ret;
	}
	return 0;
}

/* ------------------------------------------------------------- API */

int ush_reader_next(ush_reader *r, const void **rec, size_t *len)
{
	/* A child's reads would take the bytes of the parent's streams. */
	if (ushi_forked(r->gen))
		return ushi_fork_refused("reader");
	if (r->err)
		return r->err;
	for (;;) {
		if (r->batch) {
			if (records_next(r->batch, r->blen, &r->boff, rec,
					 len) == 1) {
				r->st.records++;
				return 1; /* checked by records_check() */
			}
			r->batch = NULL;
		}
		int ret = r->target == USH_TARGET_NET ? net_next(r) :
							disk_next(r);
		if (ret < 0)
			return r->err = ret;
		if (ret == 0)
			return 0;
	}
}

/* Every reader option's zero value is its default. */
static const struct ush_reader_opts reader_defaults = {
	.size = sizeof(struct ush_reader_opts),
};

void ush_reader_opts_init_size(struct ush_reader_opts *o, size_t size)
{
	ushi_struct_init(o, size, &reader_defaults, sizeof(*o));
}

/* The source index of location loc (n bytes), added if new. */
static int add_src(struct ush_reader *r, const char *loc, size_t n,
		   uint32_t *idx)
{
	for (uint32_t i = 0; i < r->nsrcs; i++)
		if (strlen(r->srcs[i].loc) == n && !memcmp(r->srcs[i].loc, loc, n)) {
			*idx = i;
			return 0;
		}
	char *s = ushi_malloc(n + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, loc, n);
	s[n] = 0;
	r->srcs[r->nsrcs] = (struct rsrc){s, NULL, false};
	*idx = r->nsrcs++;
	return 0;
}

/* The index of worker peer in r->peers, added if new. */
static int add_peer(struct ush_reader *r, const char *peer, uint32_t *idx)
{
	for (uint32_t i = 0; i < r->npeers; i++)
		if (!strcmp(r->peers[i], peer)) {
			*idx = i;
			return 0;
		}
	if (!(r->peers[r->npeers] = ushi_strdup(peer)))
		return -ENOMEM;
	*idx = r->npeers++;
	return 0;
}

/* The workers of a status's list that hold the partition into m: the
 * first by placement (version 1), else those of its holder mask, from
 * the first by placement on. -EINVAL for a bad list or mask. */
static int holders(struct ush_reader *r, const struct status *s,
		   uint32_t partition, uint64_t mask, struct rmap *m)
{
	char list[USHI_STATUS_LOC_MAX + 1];
	memcpy(list, s->loc, s->loc_len);
	list[s->loc_len] = 0;
	unsigned n = net_count_workers(list);
	char (*peers)[USHI_NET_PEER] = n ? ushi_calloc(n, USHI_NET_PEER) : NULL;
	int ret = peers ? net_parse_workers(list, peers, n) : -EINVAL;
	if (s->version >= 2 && n > 64)
		ret = -EINVAL; /* a mask names at most 64 workers */
	uint32_t first = ret > 0 ? proto_worker_of(partition, n) : 0;
	if (ret > 0 && (s->version < 2 || mask >> first & 1))
		ret = add_peer(r, peers[first], &m->holder[m->nholders++]);
	for (unsigned k = 1; ret >= 0 && s->version >= 2 && k < n; k++) {
		unsigned w = (first + k) % n;
		if (!(mask >> w & 1))
			continue;
		ret = m->nholders < USH_REPLICAS_MAX ?
			      add_peer(r, peers[w], &m->holder[m->nholders++]) :
			      -EINVAL;
	}
	if (ret >= 0 && n < 64 && mask >> n)
		ret = -EINVAL; /* a worker beyond the list */
	ushi_free(peers);
	return ret < 0 ? ret : 0;
}

static const char *target_name(uint8_t t)
{
	return t == USH_TARGET_NET ? "net" : "disk";
}

/* Status i into map entry m. */
static int add_map(struct ush_reader *r, const struct ush_reader_opts *o,
		   uint32_t i, struct rmap *m)
{
	const struct ush_status *st = &o->statuses[i];
	struct status s;
	const char *why;
	int ret = status_parse(st->data, st->len, &s, &why);
	if (ret)
		return ushi_fail(ret, "reader: map status %u (%zu bytes): %s",
				i, st->len, why);
	if (!i) {
		r->shuffle = s.shuffle;
		r->target = s.target;
		r->partitions = s.partitions;
		memcpy(r->app, s.app, s.app_len);
	}
	if (s.shuffle != r->shuffle || s.target != r->target ||
	    s.partitions != r->partitions || strlen(r->app) != s.app_len ||
	    memcmp(r->app, s.app, s.app_len))
		return ushi_fail(-EINVAL, "reader: map status %u is of shuffle "
				"%u of application '%.*s' with %u partitions on "
				"the %s target, status 0 of shuffle %u of '%s' "
				"with %u on the %s target: one reader reads one "
				"shuffle", i, s.shuffle, (int)s.app_len, s.app,
				s.partitions, target_name(s.target),
				r->shuffle, r->app, r->partitions,
				target_name(r->target));
	if (o->partition >= s.partitions)
		return ushi_fail(-EINVAL, "reader: partition %u out of range: "
				"shuffle %u has partitions 0..%u",
				o->partition, s.shuffle, s.partitions - 1);
	uint64_t mask;
	if ((ret = status_part(&s, o->partition, &m->expect, &m->want_sum,
			       &mask, &why)))
		return ushi_fail(ret, "reader: map status %u (map %u): %s", i,
				s.map, why);
	m->map = s.map;
	m->attempt = s.attempt;
	m->sum = USHI_SUM_INIT;
	m->src = NO_SRC; /* replicated and empty: nothing to read */
	if (s.target == USH_TARGET_DISK)
		ret = add_src(r, s.loc, s.loc_len, &m->src);
	else if ((ret = holders(r, &s, o->partition, mask, m)) == -EINVAL)
		return ushi_fail(USH_ECORRUPT, "reader: map status %u: bad "
				"holder mask %llx or worker list '%.*s'", i,
				(unsigned long long)mask, (int)s.loc_len, s.loc);
	else if (!ret && m->nholders)
		ret = add_src(r, r->peers[m->holder[0]],
			      strlen(r->peers[m->holder[0]]), &m->src);
	return ret ? ushi_fail(ret, "reader: allocation") : 0;
}

static int by_map(const void *a, const void *b)
{
	const struct rmap *x = a, *y = b;
	return x->map < y->map ? -1 : x->map > y->map;
}

/* Disk: every attempt's index must be in place (its commit). */
static int disk_open(struct ush_reader *r)
{
	for (uint32_t i = 0; i < r->nmaps; i++) {
		char ipath[PATH_MAX];
		index_path(ipath, sizeof(ipath), r, &r->maps[i]);
		if (access(ipath, F_OK))
			return errno == ENOENT
				       ? ushi_fail(USH_ENOTCOMMITTED, "reader: "
						  "%s missing: map %u attempt "
						  "%u is not committed there",
						  ipath, r->maps[i].map,
						  r->maps[i].attempt)
				       : ushi_fail(-errno, "reader: %s", ipath);
	}
	return 0;
}

/* Source s: a FETCH naming its maps' attempts, each from its first
 * batch not yet verified (after a failover, the rest of the map). */
static int net_open_src(struct ush_reader *r, uint32_t s, uint32_t timeout_ms)
{
	struct proto_want *w = ushi_malloc(r->nmaps * sizeof(*w));
	if (!w)
		return ushi_fail(-ENOMEM, "reader: allocation");
	uint32_t n = 0;
	for (uint32_t i = 0; i < r->nmaps; i++)
		if (r->maps[i].src == s) {
			w[n++] = (struct proto_want){r->maps[i].map,
						     r->maps[i].attempt,
						     r->maps[i].got};
			r->st.resumed_batches += r->maps[i].got;
		}
	int ret = reader_net_open(&r->srcs[s].net, r->srcs[s].loc, r->app,
				  r->shuffle, r->partition, w, n, timeout_ms);
	ushi_free(w);
	return ret;
}

/* Net: one FETCH per worker, all open before any is read; a worker that
 * fails it leaves its maps to their next replicas. */
static int net_open(struct ush_reader *r)
{
	int ret = 0;
	for (uint32_t s = 0; !ret && s < r->nsrcs; s++)
		if ((ret = net_open_src(r, s, r->timeout_ms)) < 0)
			ret = failover(r, s, ret);
	return ret;
}

int ush_reader_open(ush_reader **out, const struct ush_reader_opts *opts)
{
	struct ush_reader_opts o;
	*out = NULL;
	int ret = ushi_opts_load(&o, &reader_defaults, sizeof(o), opts,
				 "reader options");
	if (ret)
		return ret;
	if (!o.statuses || !o.nstatuses)
		return ushi_fail(-EINVAL, "reader: no map statuses: a reader "
				"reads the attempts its statuses name");
	struct ush_reader *r = ushi_calloc(1, sizeof(*r));
	if (!r)
		return ushi_fail(-ENOMEM, "reader: allocation");
	r->fd = r->dfd = -1;
	r->gen = ushi_fork_gen;
	r->partition = o.partition;
	ush_lat_init(&r->load_lat);
	r->timeout_ms = o.timeout_ms ? o.timeout_ms : USHI_NET_TIMEOUT_MS;
	r->maps = ushi_calloc(o.nstatuses, sizeof(*r->maps));
	/* Each map has at most USH_REPLICAS_MAX workers, and moves to each
	 * at most once (a new source, at worst one per map). */
	r->srcs = ushi_calloc((size_t)o.nstatuses * USH_REPLICAS_MAX,
			      sizeof(*r->srcs));
	r->peers = ushi_calloc((size_t)o.nstatuses * USH_REPLICAS_MAX,
			       sizeof(*r->peers));
	ret = r->maps && r->srcs && r->peers ? codec_init(&r->codec) : -ENOMEM;
	if (ret)
		ushi_fail(ret, "reader: allocation for %u maps", o.nstatuses);
	for (uint32_t i = 0; !ret && i < o.nstatuses; i++)
		ret = add_map(r, &o, i, &r->maps[i]);
	r->nmaps = o.nstatuses;
	if (!ret)
		qsort(r->maps, r->nmaps, sizeof(*r->maps), by_map);
	for (uint32_t i = 1; !ret && i < r->nmaps; i++)
		if (r->maps[i].map == r->maps[i - 1].map)
			ret = ushi_fail(-EINVAL, "reader: map %u named twice "
				       "(attempts %u and %u): the driver "
				       "chooses one", r->maps[i].map,
				       r->maps[i - 1].attempt,
				       r->maps[i].attempt);
	if (!ret)
		ret = r->target == USH_TARGET_NET ? net_open(r) : disk_open(r);
	if (ret) {
		ush_reader_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void ush_reader_stats_size(const ush_reader *r, struct ush_reader_stats *st,
			   size_t size)
{
	ushi_struct_init(st, size, &r->st, sizeof(r->st));
}

const struct ush_lat *ush_reader_load_lat(const ush_reader *r)
{
	return &r->load_lat;
}

void ush_reader_free(ush_reader *r)
{
	if (!r)
		return;
	if (ushi_forked(r->gen))
		prefetch_forget(&r->pf);
	ushi_count_reader(&r->st);
	close_data(r);
	prefetch_destroy(&r->pf);
	for (uint32_t i = 0; r->srcs && i < r->nsrcs; i++) {
		reader_net_free(r->srcs[i].net);
		ushi_free(r->srcs[i].loc);
	}
	codec_destroy(&r->codec);
	for (uint32_t i = 0; r->maps && i < r->nmaps; i++)
		map_done(&r->maps[i]);
	for (uint32_t i = 0; r->peers && i < r->npeers; i++)
		ushi_free(r->peers[i]);
	ushi_free(r->peers);
	ushi_free(r->srcs);
	ushi_free(r->maps);
	ushi_free(r->ents);
	ushi_free(r->ibuf);
	ushi_free(r->rbuf);
	ushi_free(r);
}
