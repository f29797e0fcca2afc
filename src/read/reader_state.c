/*
 * What a reader's sources report into: each frame they take, checked
 * against its map's status before a record of it is yielded, a map done,
 * and the locations they read from. Below both reader.c and the sources
 * (source_disk.c, source_net.c), so the reader calls its source and the
 * source reports here, and neither calls the other back.
 */
#define _GNU_SOURCE
#include "read/reader.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>

/* ----------------------------------------------------- checks of a map */

int reader_check_map(const struct ush_reader *r, const struct rmap *m,
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
void reader_map_done(struct rmap *m)
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
		     const struct ushi_frame *f, uint64_t off)
{
	if (m->crcs[f->seq] == f->crc) {
		r->st.dup_batches++;
		return 0;
	}
	char first[PATH_MAX + 64], now[PATH_MAX + 64];
	r->source->describe(r, m->offs[f->seq], first, sizeof(first));
	r->source->describe(r, off, now, sizeof(now));
	return ushi_fail(USH_ECORRUPT, "reader: shuffle %u map %u attempt %u "
			"partition %u seq %llu: two different frames, CRC "
			"%08x at %s and CRC %08x at %s", r->shuffle, m->map,
			m->attempt, r->partition, (unsigned long long)f->seq,
			m->crcs[f->seq], first, f->crc, now);
}

/*
 * Opens a sealed frame of map m into the reader's buffers: *payload
 * becomes its stored bytes, decrypted, once the tag authenticated them.
 * A frame sealed or not against its status, or under another key id, is
 * refused before any decryption. Returns 0 or an error, *what saying
 * why (in buf, n bytes).
 */
static int open_sealed(struct ush_reader *r, const struct rmap *m,
		       const struct ushi_frame *f, const uint8_t *frame,
		       const uint8_t **payload, const char **what, char *buf,
		       size_t n)
{
	bool sealed = f->flags & USHI_FRAME_SEALED;
	if (sealed != m->sealed) {
		*what = sealed ? "a sealed frame in a map whose status says "
				 "plain" :
				 "a plain frame in a map whose status says "
				 "sealed: not its writer's";
		return USH_ECORRUPT;
	}
	if (!sealed)
		return 0;
	uint32_t kid = seal_key_id(frame, f), len = frame_stored_len(f);
	if (kid != m->seal_id) {
		snprintf(buf, n, "seq %llu: sealed under another key id than "
			 "its map status names", (unsigned long long)f->seq);
		*what = buf;
		return USH_ECORRUPT;
	}
	bool raw = f->codec == USH_CODEC_NONE;
	uint8_t **dst = raw ? &r->rbuf : &r->sbuf;
	int ret = ushi_grow(dst, raw ? &r->rcap : &r->scap, len ? len : 1);
	if (ret) {
		*what = "allocation";
		return ret;
	}
	*payload = *dst;
	if (!seal_open(&r->seal, m->sub, frame, f, *dst))
		return 0;
	snprintf(buf, n, "seq %llu: the sealed frame does not authenticate "
		 "(altered, moved from another place, or sealed under another "
		 "key of the same id)", (unsigned long long)f->seq);
	*what = buf;
	return USH_ECORRUPT;
}

int reader_take(struct ush_reader *r, struct rmap *m,
		const struct ushi_frame *f, const uint8_t *frame,
		uint64_t off, uint64_t t0)
{
	if (f->seq < m->next_seq)
		return duplicate(r, m, f, off);
	const char *what = NULL;
	char buf[200];
	if (f->seq > m->next_seq || m->got == m->expect) {
		snprintf(buf, sizeof(buf), "batch %llu where %s was due",
			 (unsigned long long)f->seq,
			 m->got == m->expect ? "none" : "an earlier one");
		what = buf;
	}
	const uint8_t *payload = frame + USH_FRAME_HDR_SIZE;
	int ret = what ? USH_ECORRUPT : 0;
	if (!ret)
		ret = open_sealed(r, m, f, frame, &payload, &what, buf,
				  sizeof(buf));
	if (!ret && f->codec != USH_CODEC_NONE) {
		ret = ushi_grow(&r->rbuf, &r->rcap, f->raw_len ? f->raw_len : 1);
		if (!ret)
			ret = ring_decompress(r->ring, f->codec, payload,
					      frame_stored_len(f), r->rbuf,
					      f->raw_len);
		what = "decompressing the frame";
		payload = r->rbuf;
	}
	if (!ret && (ret = records_check(payload, f->raw_len, f->nrec)))
		what = "records of the frame";
	if (!ret && (ret = seen_room(m)))
		what = "allocation";
	if (ret) {
		char at[PATH_MAX + 64];
		r->source->describe(r, off, at, sizeof(at));
		return ushi_fail(ret, "reader: %s partition %u map %u attempt "
				"%u: %s", at, r->partition, m->map, m->attempt,
				what);
	}
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

/* ------------------------------------------------- source locations */

int reader_add_src(struct ush_reader *r, uint32_t first, const char *loc,
		   size_t n, uint32_t *idx)
{
	for (uint32_t i = first; i < r->nsrcs; i++)
		if (strlen(r->srcs[i]) == n && !memcmp(r->srcs[i], loc, n)) {
			*idx = i;
			return 0;
		}
	if (r->nsrcs == r->srcs_cap) {
		char **a = ushi_array_grow(r->srcs, &r->srcs_cap,
					   sizeof(*r->srcs));
		if (!a)
			return -ENOMEM;
		r->srcs = a;
	}
	char *s = ushi_malloc(n + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, loc, n);
	s[n] = 0;
	r->srcs[r->nsrcs] = s;
	*idx = r->nsrcs++;
	return 0;
}
