/*
 * The net source: the workers holding the partition, one FETCH stream
 * per distinct worker (reader_net.c), all opened before any is read and
 * read one after another. A stream that fails leaves its maps to their
 * next replicas, each resumed from its first batch not yet verified.
 */
#include "net/net.h"
#include "read/reader.h"
#include "read/reader_net.h"

#include <errno.h>
#include <stdio.h>

struct net_src {
	char **peers;        /* the workers the statuses name */
	uint32_t npeers;
	struct {             /* per source (r->srcs) */
		struct reader_net *s; /* its stream, once open */
		bool failed;          /* its maps went on elsewhere */
	} *str;
	uint32_t next;       /* the source being read */
	uint32_t timeout_ms;
};

/* Each map has at most USH_REPLICAS_MAX workers, and moves to each at
 * most once (a new source, at worst one per map). */
static int net_create(struct ush_reader *r, const struct ush_reader_opts *o)
{
	struct net_src *ns = ushi_calloc(1, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	r->source_state = ns;
	size_t n = (size_t)o->nstatuses * USH_REPLICAS_MAX;
	ns->peers = ushi_calloc(n, sizeof(*ns->peers));
	ns->str = ushi_calloc(n, sizeof(*ns->str));
	ns->timeout_ms = o->timeout_ms ? o->timeout_ms : USHI_NET_TIMEOUT_MS;
	return ns->peers && ns->str ? 0 : -ENOMEM;
}

static struct rmap *find_map(struct ush_reader *r, uint32_t map)
{
	size_t lo = ushi_lower_bound(r->maps, r->nmaps, sizeof(*r->maps),
				     offsetof(struct rmap, map), map);
	return lo < r->nmaps && r->maps[lo].map == map ? &r->maps[lo] : NULL;
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
	struct net_src *ns = r->source_state;
	char tried[512];
	int len = 0;
	for (unsigned k = 0; k < m->nholders && len < (int)sizeof(tried); k++)
		len += snprintf(tried + len, sizeof(tried) - (size_t)len,
				"%s%s", k ? ", " : "", ns->peers[m->holder[k]]);
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

/* Map m goes on at holder m->at: the source reading that worker in this
 * failover (from first), added if new. */
static int add_holder(struct ush_reader *r, uint32_t first, struct rmap *m)
{
	struct net_src *ns = r->source_state;
	const char *peer = ns->peers[m->holder[m->at]];
	int ret = reader_add_src(r, first, peer, strlen(peer), &m->src);
	return ret ? ushi_fail(ret, "reader: allocation") : 0;
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
	struct net_src *ns = r->source_state;
	char last[256];
	snprintf(last, sizeof(last), "%s", ush_last_error());
	reader_net_free(ns->str[s].s);
	ns->str[s].s = NULL;
	ns->str[s].failed = true;
	uint32_t first = r->nsrcs;
	for (uint32_t i = 0; i < r->nmaps; i++) {
		struct rmap *m = &r->maps[i];
		if (m->src != s)
			continue;
		if (m->got && m->got == m->expect) {
			/* Every batch verified: nothing left to read (a map
			 * of none still needs a holder to say it committed). */
			int ret = reader_check_map(r, m, r->srcs[s]);
			reader_map_done(m);
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
		int ret = add_holder(r, first, m);
		if (ret)
			return ret;
	}
	return 0;
}

/* Source s: a FETCH naming its maps' attempts, each from its first
 * batch not yet verified (after a failover, the rest of the map). */
static int net_open_src(struct ush_reader *r, uint32_t s, uint32_t timeout_ms)
{
	struct net_src *ns = r->source_state;
	struct proto_want *w = ushi_malloc(r->nmaps * sizeof(*w));
	if (!w)
		return ushi_fail(-ENOMEM, "reader: allocation");
	uint32_t n = 0;
	bool replica = true; /* every map has a holder left to go on at */
	for (uint32_t i = 0; i < r->nmaps; i++)
		if (r->maps[i].src == s) {
			w[n++] = (struct proto_want){r->maps[i].map,
						     r->maps[i].attempt,
						     r->maps[i].got};
			r->st.resumed_batches += r->maps[i].got;
			replica &= r->maps[i].at + 1u < r->maps[i].nholders;
		}
	int ret = reader_net_open(&ns->str[s].s, r->srcs[s], r->app,
				  r->shuffle, r->partition, w, n, timeout_ms,
				  replica);
	ushi_free(w);
	return ret;
}

/* The next batch from the workers: 1, 0 at the end of every stream, or
 * an error. A stream that fails goes on at another replica. */
static int net_next(struct ush_reader *r)
{
	struct net_src *ns = r->source_state;
	while (ns->next < r->nsrcs) {
		struct reader_net *s = ns->str[ns->next].s;
		struct ushi_frame f;
		const uint8_t *frame;
		uint64_t t0 = ushi_now_ns();
		if (ns->str[ns->next].failed) {
			ns->next++;
			continue;
		}
		int ret = s ? 0 : net_open_src(r, ns->next, ns->timeout_ms);
		if (!ret) {
			s = ns->str[ns->next].s;
			ret = reader_net_frame(s, &f, &frame);
		}
		if (ret < 0) {
			if ((ret = failover(r, ns->next, ret)))
				return ret;
			ns->next++;
			continue;
		}
		if (ret == 0) { /* FETCH_END: every map of it complete? */
			for (uint32_t i = 0; !ret && i < r->nmaps; i++)
				if (r->maps[i].src == ns->next) {
					reader_map_done(&r->maps[i]);
					ret = reader_check_map(r, &r->maps[i],
							reader_net_where(s));
				}
			if (ret)
				return ret;
			reader_net_free(s);
			ns->str[ns->next++].s = NULL;
			continue;
		}
		if (ret < 0)
			return ret;
		r->st.stored_bytes += proto_size(&f);
		struct rmap *m = find_map(r, f.map);
		if (!m || m->attempt != f.attempt || m->src != ns->next)
			return ushi_fail(USH_ECORRUPT, "reader: %s partition %u: "
					"frame of map %u attempt %u, which this "
					"reader did not ask for",
					reader_net_where(s), r->partition,
					f.map, f.attempt);
		ret = reader_take(r, m, &f, frame, reader_net_at(s), t0);
		if (ret)
			return ret;
	}
	return 0;
}

/* The index of worker peer in ns->peers, added if new. */
static int add_peer(struct ush_reader *r, const char *peer, uint32_t *idx)
{
	struct net_src *ns = r->source_state;
	for (uint32_t i = 0; i < ns->npeers; i++)
		if (!strcmp(ns->peers[i], peer)) {
			*idx = i;
			return 0;
		}
	if (!(ns->peers[ns->npeers] = ushi_strdup(peer)))
		return -ENOMEM;
	*idx = ns->npeers++;
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
	if (s->masks && n > 64)
		ret = -EINVAL; /* a mask names at most 64 workers */
	uint32_t first = ret > 0 ? proto_worker_of(partition, n) : 0;
	if (ret > 0 && (!s->masks || mask >> first & 1))
		ret = add_peer(r, peers[first], &m->holder[m->nholders++]);
	for (unsigned k = 1; ret >= 0 && s->masks && k < n; k++) {
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

/* Status s's map is read from the first of its holders. */
static int net_add(struct ush_reader *r, const struct status *s,
		   uint64_t mask, struct rmap *m)
{
	struct net_src *ns = r->source_state;
	int ret = holders(r, s, r->partition, mask, m);
	if (!ret && m->nholders)
		ret = reader_add_src(r, 0, ns->peers[m->holder[0]],
				     strlen(ns->peers[m->holder[0]]), &m->src);
	return ret;
}

/* One FETCH per worker, all open before any is read; a worker that
 * fails it leaves its maps to their next replicas. */
static int source_net_open(struct ush_reader *r)
{
	struct net_src *ns = r->source_state;
	int ret = 0;
	for (uint32_t s = 0; !ret && s < r->nsrcs; s++)
		if ((ret = net_open_src(r, s, ns->timeout_ms)) < 0)
			ret = failover(r, s, ret);
	return ret;
}

static void net_describe(struct ush_reader *r, uint64_t off, char *buf, size_t n)
{
	struct net_src *ns = r->source_state;
	snprintf(buf, n, "worker %s offset %llu",
		 reader_net_peer(ns->str[ns->next].s), (unsigned long long)off);
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
	ushi_free(ns->peers);
	ushi_free(ns->str);
	ushi_free(ns);
	r->source_state = NULL;
}

const struct ushi_source_ops ushi_source_net = {
	.name = "net",
	.create = net_create,
	.add = net_add,
	.open = source_net_open,
	.next = net_next,
	.describe = net_describe,
	.destroy = net_destroy,
};
