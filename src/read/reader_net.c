/*
 * The reader over the network: FETCH the partition from the worker that
 * stores it (the writers' hash over the same list), then read the stream
 * MANIFEST, DATA..., FETCH_END. Every DATA frame's CRC (the writer's,
 * end to end) and records are checked before any record is yielded;
 * frames of attempts that did not commit and duplicate batches are
 * dropped; at the end each map's batch count must equal its MAPPER_END.
 */
#include "core/codec.h"
#include "net/net.h"
#include "read/reader_net.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

struct reader_net {
	int fd;
	char peer[USHI_NET_PEER];
	uint32_t shuffle, partition, maps, max_frame;
	int64_t *attempt;     /* per map: committed attempt */
	uint64_t *expect;     /* per map: batches per MAPPER_END */
	uint64_t *got;        /* per map: distinct batches read */
	uint64_t *next_seq;   /* per map: lower sequences are duplicates */
	struct ushi_codec_ctx codec;
	uint8_t *fbuf, *rbuf;
	size_t fcap, rcap;
	const uint8_t *batch;
	size_t blen, boff;
	uint64_t off;         /* stream bytes read */
	uint64_t at;          /* stream offset of the last frame read */
	uint64_t frames;      /* DATA frames read; bytes: st.stored_bytes */
	bool ended;
	int err;
	struct ush_reader_stats st;
	struct ush_lat load_lat;
};

/* Reads one whole frame into fbuf, bounded before it is allocated. */
static int read_frame(struct reader_net *r, struct ushi_frame *f)
{
	const char *why = "";
	uint8_t h[USH_FRAME_HDR_SIZE];
	r->at = r->off;
	int ret = net_read(r->fd, h, USH_FRAME_HDR_SIZE);
	if (ret == -EPIPE)
		why = ": the worker closed the stream";
	if (!ret && (ret = proto_header(h, f, r->max_frame, false, &why)) == 0)
		ret = ushi_grow(&r->fbuf, &r->fcap, proto_size(f));
	if (!ret)
		memcpy(r->fbuf, h, USH_FRAME_HDR_SIZE);
	if (!ret)
		ret = net_read(r->fd, r->fbuf + USH_FRAME_HDR_SIZE,
			       f->payload_len);
	if (!ret && frame_check(r->fbuf, f))
		ret = USH_ECRC, why = "";
	if (ret)
		return ushi_fail(ret, "reader: worker %s offset %llu partition "
				"%u%s%s", r->peer, (unsigned long long)r->at,
				r->partition, *why && *why != ':' ? ": " : "",
				why);
	r->off += proto_size(f);
	return 0;
}

/* Fails on the frame last read, naming where it starts. */
static int fail_at(struct reader_net *r, int err, const char *what)
{
	return ushi_fail(err, "reader: worker %s offset %llu partition %u: %s",
			r->peer, (unsigned long long)r->at, r->partition,
			what);
}

static int manifest(struct reader_net *r)
{
	struct ushi_frame f;
	int ret = read_frame(r, &f);
	if (ret)
		return ret;
	if (f.type == USHI_FRAME_ERROR) {
		char msg[USHI_PROTO_ERRMSG_MAX];
		int code = proto_get_error(r->fbuf + USH_FRAME_HDR_SIZE,
					   f.payload_len, msg, sizeof(msg));
		return fail_at(r, code, msg);
	}
	if (f.type != USHI_FRAME_MANIFEST || f.shuffle != r->shuffle ||
	    f.partition != r->partition)
		return fail_at(r, -EPROTO, "expected the MANIFEST");
	for (uint32_t i = 0; i < f.seq; i++) {
		struct proto_manifest m;
		proto_get_manifest(r->fbuf + USH_FRAME_HDR_SIZE, i, &m);
		if (m.map >= r->maps)
			continue; /* a map this reader was not asked for */
		r->attempt[m.map] = m.attempt;
		r->expect[m.map] = m.batches;
	}
	for (uint32_t m = 0; m < r->maps; m++)
		if (r->attempt[m] < 0)
			return ushi_fail(USH_ENOTCOMMITTED, "reader: worker %s "
					"has no committed output of shuffle %u "
					"map %u", r->peer, r->shuffle, m);
	return 0;
}

int reader_net_open(struct reader_net **out, const struct ush_reader_opts *o)
{
	*out = NULL;
	unsigned nw = net_count_workers(o->workers);
	if (!nw || !o->maps)
		return ushi_fail(-EINVAL, "reader: needs workers and at least "
				"one map");
	char (*peers)[USHI_NET_PEER] = ushi_calloc(nw, USHI_NET_PEER);
	struct reader_net *r = ushi_calloc(1, sizeof(*r));
	if (!peers || !r) {
		ushi_free(peers);
		ushi_free(r);
		return ushi_fail(-ENOMEM, "reader: allocation");
	}
	r->fd = -1;
	ush_lat_init(&r->load_lat);
	r->shuffle = o->shuffle;
	r->partition = o->partition;
	r->maps = o->maps;
	int ret = net_parse_workers(o->workers, peers, nw);
	if (ret < 0) {
		ushi_fail(ret, "reader: bad worker list '%s'", o->workers);
		goto fail;
	}
	memcpy(r->peer, peers[proto_worker_of(o->partition, nw)],
	       USHI_NET_PEER);
	r->attempt = ushi_malloc(o->maps * sizeof(*r->attempt));
	r->expect = ushi_calloc(o->maps, sizeof(*r->expect));
	r->got = ushi_calloc(o->maps, sizeof(*r->got));
	r->next_seq = ushi_calloc(o->maps, sizeof(*r->next_seq));
	ret = r->attempt && r->expect && r->got && r->next_seq ?
		      codec_init(&r->codec) : -ENOMEM;
	if (ret) {
		ushi_fail(ret, "reader: allocation");
		goto fail;
	}
	for (uint32_t m = 0; m < o->maps; m++)
		r->attempt[m] = -1;
	struct proto_hello h;
	ret = net_dial(r->peer, USHI_ROLE_READER,
		       o->timeout_ms ? o->timeout_ms : USHI_NET_TIMEOUT_MS, &h);
	if (ret < 0)
		goto fail;
	r->fd = ret;
	r->max_frame = h.max_frame;
	uint8_t b[USHI_PROTO_SMALL];
	ret = net_write(r->fd, b, proto_put_fetch(b, o->shuffle, o->partition,
						  0));
	if (ret)
		ushi_fail(ret, "reader: worker %s: sending FETCH", r->peer);
	else
		ret = manifest(r);
	if (ret)
		goto fail;
	ushi_free(peers);
	*out = r;
	return 0;
fail:
	ushi_free(peers);
	reader_net_free(r);
	return ret;
}

static int end(struct reader_net *r, const struct ushi_frame *f)
{
	uint64_t bytes = get_le64(r->fbuf + USH_FRAME_HDR_SIZE);
	if (f->seq != r->frames || bytes != r->st.stored_bytes)
		return fail_at(r, USH_ECORRUPT, "FETCH_END disagrees with the "
			       "frames received");
	for (uint32_t m = 0; m < r->maps; m++)
		if (r->got[m] != r->expect[m])
			return ushi_fail(USH_ECORRUPT, "reader: worker %s "
					"partition %u: map %u has %llu batches, "
					"its MAPPER_END says %llu", r->peer,
					r->partition, m,
					(unsigned long long)r->got[m],
					(unsigned long long)r->expect[m]);
	r->ended = true;
	return 0;
}

/* Loads the next batch to yield: 1, 0 at the end, or an error. */
static int load(struct reader_net *r)
{
	for (;;) {
		struct ushi_frame f;
		uint64_t t0 = ushi_now_ns();
		int ret = read_frame(r, &f);
		if (ret)
			return ret;
		if (f.type == USHI_FRAME_FETCH_END)
			return end(r, &f);
		if (f.type != USHI_FRAME_DATA) {
			char what[40];
			snprintf(what, sizeof(what), "unexpected frame type %u",
				 f.type);
			return fail_at(r, -EPROTO, what);
		}
		r->frames++;
		r->st.stored_bytes += proto_size(&f);
		if (f.shuffle != r->shuffle || f.partition != r->partition)
			return fail_at(r, USH_ECORRUPT, "frame of another "
				       "shuffle or partition");
		if (f.map >= r->maps || r->attempt[f.map] != f.attempt)
			continue; /* not a committed attempt */
		if (f.seq < r->next_seq[f.map]) {
			r->st.dup_batches++;
			continue; /* a duplicate batch */
		}
		r->next_seq[f.map] = f.seq + 1;
		r->got[f.map]++;
		const uint8_t *payload = r->fbuf + USH_FRAME_HDR_SIZE;
		if (f.codec != USH_CODEC_NONE) {
			ret = ushi_grow(&r->rbuf, &r->rcap, f.raw_len ? f.raw_len : 1);
			if (!ret)
				ret = codec_decompress(&r->codec, f.codec,
						       payload, f.payload_len,
						       r->rbuf, f.raw_len);
			if (ret)
				return fail_at(r, ret, "decompressing frame");
			payload = r->rbuf;
		}
		if (records_check(payload, f.raw_len, f.nrec))
			return fail_at(r, USH_ECORRUPT, "records of frame");
		r->batch = payload;
		r->blen = f.raw_len;
		r->boff = 0;
		r->st.batches++;
		r->st.raw_bytes += f.raw_len;
		ush_lat_add(&r->load_lat, ushi_now_ns() - t0);
		return 1;
	}
}

int reader_net_next(struct reader_net *r, const void **rec, size_t *len)
{
	if (r->err)
		return r->err;
	for (;;) {
		if (r->batch) {
			if (records_next(r->batch, r->blen, &r->boff, rec,
					 len) == 1)
				return 1; /* checked by records_check() */
			r->batch = NULL;
		}
		if (r->ended)
			return 0;
		int ret = load(r);
		if (ret < 0)
			return r->err = ret;
		if (ret == 0)
			return 0;
	}
}

void reader_net_stats(const struct reader_net *r, struct ush_reader_stats *st)
{
	*st = r->st;
}

const struct ush_lat *reader_net_load_lat(const struct reader_net *r)
{
	return &r->load_lat;
}

void reader_net_free(struct reader_net *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	codec_destroy(&r->codec);
	ushi_free(r->attempt);
	ushi_free(r->expect);
	ushi_free(r->got);
	ushi_free(r->next_seq);
	ushi_free(r->fbuf);
	ushi_free(r->rbuf);
	ushi_free(r);
}
