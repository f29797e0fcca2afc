/*
 * The net source: the workers holding the range's partitions, one FETCH
 * stream per distinct worker for the whole range (reader_net.c), all
 * opened before any is read. Each partition is read from every stream
 * holding a map of it, one stream after another; a stream's frames come
 * partition after partition, so its part of a partition ends at the
 * first frame of a later one (kept for that partition) or at its end.
 *
 * Which worker each (partition, map) is read from is planned once for
 * the range (struct rent): a status names each partition's holders, and
 * they differ per partition. A stream that fails leaves each of its
 * entries not yet read whole to its next holder, one new stream per
 * worker, read after the others: the partition being read resumes from
 * each map's first batch not yet verified, the later ones from their
 * start.
 */
#include "net/net.h"
#include "read/reader.h"
#include "read/reader_net.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>

/* A (partition, map) of the range: the source (r->srcs) it is read
 * from (NO_SRC: none, replicated and empty), the holder being read, its
 * holders and how many refused it as not committed. */
struct rent {
	uint32_t src;
	uint8_t at, n, refused;
	bool gone; /* every holder failed while an earlier partition was
		      read: the error comes when this one is reached */
};

_Static_assert(USH_READER_RANGE_MAX == USHI_PROTO_WANTS_MAX,
	       "a range reader's entries fit one FETCH");

struct net_src {
	char **peers;        /* the workers the statuses name */
	uint32_t npeers;
	size_t peers_cap;
	uint32_t **list;     /* per map: its status's workers, as peers */
	uint32_t *nlist;
	struct {             /* per source (r->srcs) */
		struct reader_net *s; /* its stream, once open */
		bool failed;          /* its entries went on elsewhere */
		bool done;            /* its stream ended */
	} *str;
	size_t str_cap;
	struct rent *ent;    /* [(partition - first) * nmaps + map index] */
	uint32_t next;       /* the source being read */
	uint32_t timeout_ms;
	int gone_err;        /* the first failure that left an entry of a
				later partition gone, and its message */
	char gone_msg[256];
};

static int net_create(struct ush_reader *r, const struct ush_reader_opts *o)
{
	struct net_src *ns = ushi_calloc(1, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	r->source_state = ns;
	ns->list = ushi_calloc(o->nstatuses, sizeof(*ns->list));
	ns->nlist = ushi_calloc(o->nstatuses, sizeof(*ns->nlist));
	ns->timeout_ms = o->timeout_ms ? o->timeout_ms : USHI_NET_TIMEOUT_MS;
	return ns->list && ns->nlist ? 0 : -ENOMEM;
}

static struct rent *ent(struct ush_reader *r, uint32_t p, uint32_t i)
{
	struct net_src *ns = r->source_state;
	return &ns->ent[(size_t)(p - r->first) * r->nmaps + i];
}

static struct rmap *find_map(struct ush_reader *r, uint32_t map)
{
	size_t lo = ushi_lower_bound(r->maps, r->nmaps, sizeof(*r->maps),
				     offsetof(struct rmap, map), map);
	return lo < r->nmaps && r->maps[lo].map == map ? &r->maps[lo] : NULL;
}

/* The index of worker peer in ns->peers, added if new. */
static int add_peer(struct net_src *ns, const char *peer, uint32_t *idx)
{
	for (uint32_t i = 0; i < ns->npeers; i++)
		if (!strcmp(ns->peers[i], peer)) {
			*idx = i;
			return 0;
		}
	if (ns->npeers == ns->peers_cap) {
		char **a = ushi_array_grow(ns->peers, &ns->peers_cap,
					   sizeof(*a));
		if (!a)
			return -ENOMEM;
		ns->peers = a;
	}
	if (!(ns->peers[ns->npeers] = ushi_strdup(peer)))
		return -ENOMEM;
	*idx = ns->npeers++;
	return 0;
}

/* Map i's worker list, as peers. -EINVAL for a bad list. */
static int parse_list(struct net_src *ns, const struct status *s, uint32_t i)
{
	char list[USHI_STATUS_LOC_MAX + 1];
	memcpy(list, s->loc, s->loc_len);
	list[s->loc_len] = 0;
	unsigned n = net_count_workers(list);
	char (*peers)[USHI_NET_PEER] = n ? ushi_calloc(n, USHI_NET_PEER) : NULL;
	int ret = peers ? net_parse_workers(list, peers, n) : -EINVAL;
	if (ret > 0 && !(ns->list[i] = ushi_calloc(n, sizeof(uint32_t))))
		ret = -ENOMEM;
	for (unsigned k = 0; ret > 0 && k < n; k++) {
		int err = add_peer(ns, peers[k], &ns->list[i][k]);
		if (err)
			ret = err;
	}
	if (ret > 0)
		ns->nlist[i] = n;
	ushi_free(peers);
	return ret < 0 ? ret : 0;
}

/* The workers of map i's list that hold partition p (mask: its holder
 * mask) into h (*n of them): the first by placement (version 1), else
 * those of its mask, from the first by placement on. -EINVAL for a bad
 * mask. */
static int holders(struct ush_reader *r, uint32_t i, uint32_t p,
		   uint64_t mask, uint32_t *h, uint8_t *n)
{
	struct net_src *ns = r->source_state;
	const struct status *s = &r->maps[i].st;
	uint32_t nw = ns->nlist[i];
	*n = 0;
	if ((s->masks && nw > 64) || (nw < 64 && mask >> nw))
		return -EINVAL; /* a mask names at most 64 workers */
	uint32_t first = proto_worker_of(p, nw);
	if (!s->masks || mask >> first & 1)
		h[(*n)++] = ns->list[i][first];
	for (unsigned k = 1; s->masks && k < nw; k++) {
		unsigned w = (first + k) % nw;
		if (!(mask >> w & 1))
			continue;
		if (*n == USH_REPLICAS_MAX)
			return -EINVAL;
		h[(*n)++] = ns->list[i][w];
	}
	return 0;
}

/* A stream slot for every source (a new one zeroed: not open). */
static int str_room(struct ush_reader *r)
{
	struct net_src *ns = r->source_state;
	if (r->nsrcs <= ns->str_cap)
		return 0;
	size_t had = ns->str_cap;
	void *a = ushi_array_grow(ns->str, &ns->str_cap, sizeof(*ns->str));
	if (!a)
		return -ENOMEM;
	ns->str = a;
	memset(&ns->str[had], 0, (ns->str_cap - had) * sizeof(*ns->str));
	return 0;
}

/* The holders of map i in partition p into h (*n of them): the
 * partition being read's as its map has them (a reader of one partition
 * reads its statuses at open only), a later one's from its status. */
static int entry_holders(struct ush_reader *r, uint32_t p, uint32_t i,
			 uint32_t *h, uint8_t *n)
{
	const struct rmap *m = &r->maps[i];
	uint64_t mask, expect;
	uint32_t sum;
	const char *why;
	if (p == r->partition) {
		memcpy(h, m->holder, sizeof(m->holder));
		*n = m->nholders;
		return 0;
	}
	int ret = status_part(&m->st, p, &expect, &sum, &mask, &why);
	if (!ret)
		ret = holders(r, i, p, mask, h, n);
	return ret ? ushi_fail(USH_ECORRUPT, "reader: map %u partition %u: "
			       "bad holder mask or worker list", m->map, p) :
		     0;
}

/* Entry e, of map i in partition p, goes on at holder e->at: the source
 * reading that worker in this failover (from first), added if new. */
static int add_holder(struct ush_reader *r, uint32_t first, uint32_t p,
		      uint32_t i, struct rent *e)
{
	struct net_src *ns = r->source_state;
	uint32_t h[USH_REPLICAS_MAX];
	uint8_t n;
	int ret = entry_holders(r, p, i, h, &n);
	if (ret)
		return ret;
	const char *peer = ns->peers[h[e->at]];
	ret = reader_add_src(r, first, peer, strlen(peer), &e->src);
	if (!ret)
		ret = str_room(r);
	return ret ? ushi_fail(ret, "reader: allocation") : 0;
}

/* Plans the range: each map's worker list, then per (partition, map)
 * its holders and the worker it is read from first. */
static int net_plan(struct ush_reader *r)
{
	struct net_src *ns = r->source_state;
	/* ush_reader_open() refused a range of more entries than one FETCH
	 * holds (USH_READER_RANGE_MAX, for every source). */
	assert((uint64_t)r->count * r->nmaps <= USHI_PROTO_WANTS_MAX);
	for (uint32_t i = 0; i < r->nmaps; i++) {
		int ret = parse_list(ns, &r->maps[i].st, i);
		if (ret == -EINVAL)
			return ushi_fail(USH_ECORRUPT, "reader: map %u: bad "
					"worker list '%.*s'", r->maps[i].map,
					(int)r->maps[i].st.loc_len,
					r->maps[i].st.loc);
		if (ret)
			return ushi_fail(ret, "reader: allocation");
	}
	ns->ent = ushi_calloc((size_t)r->count * r->nmaps, sizeof(*ns->ent));
	if (!ns->ent)
		return ushi_fail(-ENOMEM, "reader: allocation for %u "
				"partitions of %u maps", r->count, r->nmaps);
	for (uint32_t p = r->first; p - r->first < r->count; p++)
		for (uint32_t i = 0; i < r->nmaps; i++) {
			struct rent *e = ent(r, p, i);
			uint32_t h[USH_REPLICAS_MAX];
			uint64_t mask, expect;
			uint32_t sum;
			const char *why;
			int ret = status_part(&r->maps[i].st, p, &expect, &sum,
					      &mask, &why);
			if (ret)
				return ushi_fail(ret, "reader: map %u: %s",
						r->maps[i].map, why);
			if (holders(r, i, p, mask, h, &e->n))
				return ushi_fail(USH_ECORRUPT, "reader: map %u "
						"partition %u: bad holder mask "
						"%llx or worker list '%.*s'",
						r->maps[i].map, p,
						(unsigned long long)mask,
						(int)r->maps[i].st.loc_len,
						r->maps[i].st.loc);
			e->src = NO_SRC;
			if (!e->n)
				continue;
			const char *peer = ns->peers[h[0]];
			ret = reader_add_src(r, 0, peer, strlen(peer), &e->src);
			if (!ret)
				ret = str_room(r);
			if (ret)
				return ushi_fail(ret, "reader: allocation");
		}
	return 0;
}

static int all_gone(struct ush_reader *r, uint32_t p, uint32_t i,
		    const struct rent *e, const char *last);

/* Map m, for partition r->partition: its holders, and where the plan
 * (or a failover since) reads it. */
static int net_add(struct ush_reader *r, const struct status *s,
		   uint64_t mask, struct rmap *m)
{
	(void)s;
	uint32_t i = (uint32_t)(m - r->maps);
	const struct rent *e = ent(r, r->partition, i);
	struct net_src *ns = r->source_state;
	if (e->gone && e->n > 1)
		return all_gone(r, r->partition, i, e, ns->gone_msg);
	if (e->gone)
		return ushi_fail(ns->gone_err, "reader: partition %u map %u "
				 "attempt %u: its one worker failed before this "
				 "partition was reached (the reader's first such "
				 "failure: %s)", r->partition,
				 m->map, m->attempt, ns->gone_msg);
	int ret = holders(r, i, r->partition, mask, m->holder, &m->nholders);
	m->at = e->at;
	m->refused = e->refused;
	m->src = e->src;
	return ret;
}

/*
 * Every replica of map i in partition p was tried: an error naming
 * them. When each one answered that an attempt it was asked for is not
 * committed (a dropped shuffle, an aborted attempt), that is the answer,
 * USH_ENOTCOMMITTED: the driver reruns the map. Only a replica that
 * could not answer (down, unreachable, a broken stream) makes it
 * -EHOSTUNREACH.
 */
static int all_gone(struct ush_reader *r, uint32_t p, uint32_t i,
		    const struct rent *e, const char *last)
{
	struct net_src *ns = r->source_state;
	const struct rmap *m = &r->maps[i];
	uint32_t h[USH_REPLICAS_MAX];
	uint8_t n = 0;
	if (entry_holders(r, p, i, h, &n))
		n = 0;
	char tried[512];
	int len = 0;
	for (unsigned k = 0; k < n && len < (int)sizeof(tried); k++)
		len += snprintf(tried + len, sizeof(tried) - (size_t)len,
				"%s%s", k ? ", " : "", ns->peers[h[k]]);
	if (e->refused == e->n)
		return ushi_fail(USH_ENOTCOMMITTED, "reader: partition %u map "
				"%u attempt %u: every replica refused its "
				"FETCH, an attempt asked for is not committed "
				"there, worker %s (last: %s)", p, m->map,
				m->attempt, tried, last);
	return ushi_fail(-EHOSTUNREACH, "reader: partition %u map %u attempt "
			"%u: no replica left, tried worker %s (last: %s)", p,
			m->map, m->attempt, tried, last);
}

/* Entry e (partition p, map i), read from a source that failed with
 * err, goes on at its next holder (a source from first on). */
static int move(struct ush_reader *r, uint32_t first, uint32_t p, uint32_t i,
		struct rent *e, int err, const char *last)
{
	if (e->n == 1)
		return err;
	e->refused += err == USH_ENOTCOMMITTED;
	if (++e->at >= e->n)
		return all_gone(r, p, i, e, last);
	r->st.failovers += r->nsrcs == first;
	return add_holder(r, first, p, i, e);
}

/*
 * Source s failed (the last error says why): each of its entries goes on
 * at its next holder, one new source per worker, read after the others.
 * Their FETCH asks each map of the partition being read from its first
 * batch not yet verified, so the records resume after the last one taken
 * (a batch that comes again all the same is dropped as a duplicate: same
 * seq, same CRC); a map read whole is done. Returns 0, or an error when
 * an entry has no holder left: err itself for a map without replicas.
 */
static int failover(struct ush_reader *r, uint32_t s, int err)
{
	struct net_src *ns = r->source_state;
	char last[256];
	snprintf(last, sizeof(last), "%s", ush_last_error());
	reader_net_free(ns->str[s].s);
	ns->str[s].s = NULL;
	ns->str[s].failed = true;
	uint32_t first = r->nsrcs;
	for (uint32_t p = r->partition; p - r->first < r->count; p++)
		for (uint32_t i = 0; i < r->nmaps; i++) {
			struct rent *e = ent(r, p, i);
			struct rmap *m = &r->maps[i];
			if (e->src != s)
				continue;
			if (p == r->partition && m->got && m->got == m->expect) {
				/* Every batch verified: nothing left to read
				 * (a map of none still needs a holder to say
				 * it committed). */
				int ret = reader_check_map(r, m, r->srcs[s]);
				reader_map_done(m);
				m->src = e->src = NO_SRC;
				if (ret)
					return ret;
				continue;
			}
			int ret = move(r, first, p, i, e, err, last);
			if (ret && p != r->partition) {
				/* Its partition is not being read: it fails
				 * when it is (net_add()), not now. */
				if (!ns->gone_err) {
					ns->gone_err = ret;
					snprintf(ns->gone_msg,
						 sizeof(ns->gone_msg), "%s",
						 ush_last_error());
				}
				e->gone = true;
				e->src = NO_SRC;
				continue;
			}
			if (ret)
				return ret;
			if (p == r->partition) {
				m->at = e->at;
				m->refused = e->refused;
				m->src = e->src;
			}
		}
	return 0;
}

/* Source s: a FETCH of its entries from the partition being read on,
 * those of that partition each from its first batch not yet verified
 * (after a failover, the rest of the map). A source left with none is
 * done without a request. */
static int net_open_src(struct ush_reader *r, uint32_t s)
{
	struct net_src *ns = r->source_state;
	uint32_t from = r->partition, count = r->count - (from - r->first);
	struct proto_want *w = ushi_malloc((size_t)count * r->nmaps *
					   sizeof(*w));
	if (!w)
		return ushi_fail(-ENOMEM, "reader: allocation");
	uint32_t n = 0;
	bool replica = true; /* every entry has a holder left to go on at */
	for (uint32_t p = from; p - r->first < r->count; p++)
		for (uint32_t i = 0; i < r->nmaps; i++) {
			const struct rent *e = ent(r, p, i);
			if (e->src != s)
				continue;
			uint64_t got = p == from ? r->maps[i].got : 0;
			w[n++] = (struct proto_want){p, r->maps[i].map,
						     r->maps[i].attempt, got};
			r->st.resumed_batches += got;
			replica &= e->at + 1u < e->n;
		}
	int ret = 0;
	if (n)
		ret = reader_net_open(&ns->str[s].s, r->srcs[s], r->app,
				      r->shuffle, from, count, w, n,
				      ns->timeout_ms, replica);
	else
		ns->str[s].done = true;
	ushi_free(w);
	return ret;
}

/* Whether a map of the partition being read is read from source s. */
static bool reads(const struct ush_reader *r, uint32_t s)
{
	for (uint32_t i = 0; i < r->nmaps; i++)
		if (r->maps[i].src == s)
			return true;
	return false;
}

/* Source s holds no more of the partition being read: its maps of it
 * are complete? Its stream, at its end, goes (its connection pooled). */
static int part_end(struct ush_reader *r, uint32_t s, bool end)
{
	struct net_src *ns = r->source_state;
	char where[USHI_NET_PEER + 48];
	snprintf(where, sizeof(where), "%s", ns->str[s].s ?
		 reader_net_where(ns->str[s].s) : r->srcs[s]);
	if (end) {
		reader_net_free(ns->str[s].s);
		ns->str[s].s = NULL;
		ns->str[s].done = true;
	}
	int ret = 0;
	for (uint32_t i = 0; !ret && i < r->nmaps; i++)
		if (r->maps[i].src == s) {
			reader_map_done(&r->maps[i]);
			ret = reader_check_map(r, &r->maps[i], where);
		}
	return ret;
}

/* The next frame of source s for the partition being read: 1 with *f
 * and *frame, 0 when s holds no more of it (*end: its stream ended), or
 * an error. */
static int src_frame(struct ush_reader *r, uint32_t s, struct ushi_frame *f,
		     const uint8_t **frame, bool *end)
{
	struct net_src *ns = r->source_state;
	int ret = 0;
	*end = false;
	if (!ns->str[s].s && !ns->str[s].done)
		ret = net_open_src(r, s);
	if (ret)
		return ret;
	struct reader_net *st = ns->str[s].s;
	if (!st)
		return 0;
	if ((ret = reader_net_frame(st, f, frame)) == 0)
		*end = true;
	if (ret == 1 && f->partition > r->partition) {
		reader_net_unget(st); /* a later partition's */
		return 0;
	}
	if (ret == 1 && f->partition < r->partition)
		return ushi_fail(USH_ECORRUPT, "reader: %s: frame of partition "
				"%u after frames of partition %u",
				reader_net_where(st), f->partition,
				r->partition);
	return ret;
}

/* The next batch of the partition from the workers: 1, 0 at the end of
 * its part of every stream, or an error. A stream that fails goes on at
 * another replica. */
static int net_next(struct ush_reader *r)
{
	struct net_src *ns = r->source_state;
	while (ns->next < r->nsrcs) {
		uint32_t s = ns->next;
		struct ushi_frame f;
		const uint8_t *frame;
		uint64_t t0 = ushi_now_ns();
		bool end;
		if (ns->str[s].failed || !reads(r, s)) {
			ns->next++;
			continue;
		}
		int ret = src_frame(r, s, &f, &frame, &end);
		if (ret < 0) {
			if ((ret = failover(r, s, ret)))
				return ret;
			ns->next++;
			continue;
		}
		if (ret == 0) {
			if ((ret = part_end(r, s, end)))
				return ret;
			ns->next++;
			continue;
		}
		struct reader_net *st = ns->str[s].s;
		r->st.stored_bytes += proto_size(&f);
		struct rmap *m = find_map(r, f.map);
		if (!m || m->attempt != f.attempt || m->src != s)
			return ushi_fail(USH_ECORRUPT, "reader: %s partition %u: "
					"frame of map %u attempt %u, which this "
					"reader did not ask for",
					reader_net_where(st), r->partition,
					f.map, f.attempt);
		if ((ret = reader_take(r, m, &f, frame, reader_net_at(st), t0)))
			return ret;
	}
	return 0;
}

/* Partition r->partition begins: its streams are read from the first.
 * At the range's first, one FETCH per worker, all open before any is
 * read; a worker that fails it leaves its entries to their next
 * replicas. */
static int source_net_open(struct ush_reader *r)
{
	struct net_src *ns = r->source_state;
	int ret = 0;
	ns->next = 0;
	if (r->partition != r->first)
		return 0;
	for (uint32_t s = 0; !ret && s < r->nsrcs; s++)
		if ((ret = net_open_src(r, s)) < 0)
			ret = failover(r, s, ret);
	return ret;
}

static void net_describe(struct ush_reader *r, uint64_t off, char *buf, size_t n)
{
	struct net_src *ns = r->source_state;
	snprintf(buf, n, "worker %s offset %llu", r->srcs[ns->next],
		 (unsigned long long)off);
}

static void net_destroy(struct ush_reader *r)
{
	struct net_src *ns = r->source_state;
	if (!ns)
		return;
	for (uint32_t i = 0; ns->str && i < r->nsrcs; i++)
		reader_net_free(ns->str[i].s);
	for (uint32_t i = 0; ns->peers && i < ns->npeers; i++)
		ushi_free(ns->peers[i]);
	for (uint32_t i = 0; ns->list && i < r->nmaps; i++)
		ushi_free(ns->list[i]);
	ushi_free(ns->peers);
	ushi_free(ns->list);
	ushi_free(ns->nlist);
	ushi_free(ns->str);
	ushi_free(ns->ent);
	ushi_free(ns);
	r->source_state = NULL;
}

const struct ushi_source_ops ushi_source_net = {
	.name = "net",
	.create = net_create,
	.plan = net_plan,
	.add = net_add,
	.open = source_net_open,
	.next = net_next,
	.describe = net_describe,
	.destroy = net_destroy,
};
