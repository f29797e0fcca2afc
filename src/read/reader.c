/*
 * The reduce-side reader. It reads exactly the attempts its map statuses
 * name, from where each status says, through its source (reader.h): a
 * spill directory or the workers that hold the partition. Every frame is
 * checked (header, CRC32C, records) before a single record is yielded,
 * and each map's batches are checked against its status: their number,
 * their order and the checksum over their CRCs (reader_state.c). A
 * second frame of a batch is compared with the first by CRC: a resend is
 * dropped, another one is corruption naming both places, whichever came
 * first.
 */
#define _GNU_SOURCE
#include "read/prefetch.h"
#include "read/reader.h"

#include <errno.h>
#include <stdlib.h>

static int part_begin(struct ush_reader *r);

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
		int ret = r->source->next(r);
		if (ret == 0 && r->partition + 1 - r->first < r->count) {
			r->partition++; /* every map of it checked */
			ret = part_begin(r);
			if (!ret)
				continue;
		}
		if (ret < 0)
			return r->err = ret;
		if (ret == 0)
			return 0;
	}
}

uint32_t ush_reader_partition(const ush_reader *r)
{
	return r->partition;
}

/* Every reader option's zero value is its default. */
static const struct ush_reader_opts reader_defaults = {
	.size = sizeof(struct ush_reader_opts),
};

void ush_reader_opts_init_size(struct ush_reader_opts *o, size_t size)
{
	ushi_struct_init(o, size, &reader_defaults, sizeof(*o));
}

static const char *target_name(uint8_t t)
{
	return t == USH_TARGET_NET ? "net" : "disk";
}

/* A sealed map's key from o's (by the id its status names) and its
 * writer's subkey (m->expect set); a plain map, unless sealing is
 * required. */
static int seal_map(struct ush_reader *r, const struct ush_reader_opts *o,
		    uint32_t i, const struct status *s, struct rmap *m)
{
	if (!s->sealed)
		return o->require_sealed ?
			ushi_fail(-EPERM, "reader: map status %u (map %u "
				  "attempt %u) is of plain frames, and the "
				  "reader requires sealed ones", i, s->map,
				  s->attempt) : 0;
	const struct ush_seal_key *k = NULL;
	for (uint32_t j = 0; !k && o->seal_keys && j < o->nseal_keys; j++)
		if (o->seal_keys[j].id == s->seal_id)
			k = &o->seal_keys[j];
	if (!k)
		return ushi_fail(-ENOKEY, "reader: map %u attempt %u is sealed "
				"with key id %u, and the reader was given %s: "
				"give it the writer's key file's keys "
				"(seal_keys, ush_seal_keys_load())",
				s->map, s->attempt, s->seal_id,
				o->nseal_keys ? "no key of that id" : "no key");
	m->sealed = true;
	m->seal_id = s->seal_id;
	/* A map with no batch in the partition has no frame to open
	 * (reader_take() refuses any): reading one partition of many, most
	 * maps may be such, and a subkey is an HKDF (microseconds). A range
	 * derives it once for all its partitions. */
	if (!m->expect && r->count == 1)
		return 0;
	int ret = seal_derive(m->sub, k->key, s->salt, r->app, s->shuffle,
			      s->map, s->attempt);
	if (!ret && !r->seal.ctx)
		ret = seal_init(&r->seal);
	return ret;
}

/* Status i parsed into map entry m (its map and attempt, its seal): of
 * the shuffle of status 0, and holding the range. A range reader reads
 * its statuses after open, from a copy; a reader of one partition is
 * done with them at open (a status of many partitions is tens of KiB). */
static int add_map(struct ush_reader *r, const struct ush_reader_opts *o,
		   uint32_t i, struct rmap *m)
{
	const struct ush_status *st = &o->statuses[i];
	const uint8_t *data = st->data;
	struct status *s = &m->st;
	const char *why;
	if (r->count > 1) {
		if (!(r->sdata[i] = ushi_malloc(st->len ? st->len : 1)))
			return ushi_fail(-ENOMEM, "reader: allocation");
		if (st->len)
			memcpy(r->sdata[i], st->data, st->len);
		data = r->sdata[i];
	}
	int ret = status_parse(data, st->len, s, &why);
	if (ret)
		return ushi_fail(ret, "reader: map status %u (%zu bytes): %s",
				i, st->len, why);
	if (!i) {
		r->shuffle = s->shuffle;
		r->target = s->target;
		r->partitions = s->partitions;
		memcpy(r->app, s->app, s->app_len);
		r->source = s->target == USH_TARGET_NET ? &ushi_source_net :
							  &ushi_source_disk;
		if ((ret = r->source->create(r, o)))
			return ushi_fail(ret, "reader: allocation for %u maps",
					o->nstatuses);
	}
	if (s->shuffle != r->shuffle || s->target != r->target ||
	    s->partitions != r->partitions || strlen(r->app) != s->app_len ||
	    memcmp(r->app, s->app, s->app_len))
		return ushi_fail(-EINVAL, "reader: map status %u is of shuffle "
				"%u of application '%.*s' with %u partitions on "
				"the %s target, status 0 of shuffle %u of '%s' "
				"with %u on the %s target: one reader reads one "
				"shuffle", i, s->shuffle, (int)s->app_len, s->app,
				s->partitions, target_name(s->target),
				r->shuffle, r->app, r->partitions,
				target_name(r->target));
	if ((uint64_t)r->first + r->count > s->partitions)
		return ushi_fail(-EINVAL, "reader: partition %llu%s out of "
				"range: shuffle %u has partitions 0..%u",
				(unsigned long long)r->first + r->count - 1,
				r->count > 1 ? " (the range's last)" : "",
				s->shuffle, s->partitions - 1);
	uint64_t mask;
	if ((ret = status_part(s, r->first, &m->expect, &m->want_sum, &mask,
			       &why)))
		return ushi_fail(ret, "reader: map status %u (map %u): %s", i,
				s->map, why);
	m->map = s->map;
	m->attempt = s->attempt;
	return seal_map(r, o, i, s, m);
}

/* Map m's part of partition r->partition: its status's count and
 * checksum, and where it is read from. */
static int part_map(struct ush_reader *r, struct rmap *m)
{
	const char *why;
	uint64_t mask;
	reader_map_done(m);
	m->got = m->next_seq = 0;
	m->nholders = m->at = m->refused = 0;
	int ret = status_part(&m->st, r->partition, &m->expect, &m->want_sum,
			      &mask, &why);
	if (ret)
		return ushi_fail(ret, "reader: map status of map %u: %s",
				m->map, why);
	m->sum = USHI_SUM_INIT;
	m->src = NO_SRC; /* replicated and empty: nothing to read */
	if ((ret = r->source->add(r, &m->st, mask, m)) == -EINVAL)
		return ushi_fail(USH_ECORRUPT, "reader: map status of map %u: "
				"bad holder mask %llx or worker list '%.*s'",
				m->map, (unsigned long long)mask,
				(int)m->st.loc_len, m->st.loc);
	/* Other errors (a map whose holders failed before its partition
	 * was reached) carry their own message. */
	return ret == -ENOMEM ? ushi_fail(ret, "reader: allocation") : ret;
}

/* Partition r->partition: every map's part of it, then the source. */
static int part_begin(struct ush_reader *r)
{
	int ret = 0;
	for (uint32_t i = 0; !ret && i < r->nmaps; i++)
		ret = part_map(r, &r->maps[i]);
	return ret ? ret : r->source->open(r);
}

static int by_map(const void *a, const void *b)
{
	const struct rmap *x = a, *y = b;
	return x->map < y->map ? -1 : x->map > y->map;
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
	/* Whatever the source: a disk reader keeps the bound a net reader's
	 * one FETCH per worker sets, before it opens a file. */
	uint64_t entries = (uint64_t)(o.npartitions > 1 ? o.npartitions : 1) *
			   o.nstatuses;
	if (entries > USH_READER_RANGE_MAX)
		return ushi_fail(-E2BIG, "reader: %u partitions of %u maps "
				"are %llu entries, beyond USH_READER_RANGE_MAX "
				"(%u): read fewer partitions at once",
				o.npartitions, o.nstatuses,
				(unsigned long long)entries,
				USH_READER_RANGE_MAX);
	struct ush_reader *r = ushi_calloc(1, sizeof(*r));
	if (!r)
		return ushi_fail(-ENOMEM, "reader: allocation");
	r->gen = ushi_fork_gen;
	r->partition = r->first = o.partition;
	r->count = o.npartitions > 1 ? o.npartitions : 1;
	ush_lat_init(&r->load_lat);
	r->maps = ushi_calloc(o.nstatuses, sizeof(*r->maps));
	r->sdata = ushi_calloc(o.nstatuses, sizeof(*r->sdata));
	ret = r->maps && r->sdata ? 0 : -ENOMEM;
	if (ret)
		ushi_fail(ret, "reader: allocation for %u maps", o.nstatuses);
	else /* as deep as the disk source reads ahead */
		ret = ring_create_unbound(&r->ring, USHI_PREFETCH_DEPTH);
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
	if (!ret && r->source->plan)
		ret = r->source->plan(r);
	if (!ret)
		ret = part_begin(r);
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
	if (ushi_forked(r->gen) && r->source && r->source->forget)
		r->source->forget(r);
	ushi_count_reader(&r->st);
	if (r->source)
		r->source->destroy(r);
	for (uint32_t i = 0; r->srcs && i < r->nsrcs; i++)
		ushi_free(r->srcs[i]);
	ush_ring_free(r->ring);
	for (uint32_t i = 0; r->maps && i < r->nmaps; i++) {
		reader_map_done(&r->maps[i]);
		explicit_bzero(r->maps[i].sub, sizeof(r->maps[i].sub));
	}
	seal_fini(&r->seal);
	for (uint32_t i = 0; r->sdata && i < r->nmaps; i++)
		ushi_free(r->sdata[i]);
	ushi_free(r->sdata);
	ushi_free(r->srcs);
	ushi_free(r->maps);
	ushi_free(r->rbuf);
	ushi_free(r->sbuf);
	ushi_free(r);
}
