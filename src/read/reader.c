/*
 * The reduce-side reader over local spill files. For each map it reads the
 * committed index (which names the winning attempt), keeps the entries of
 * its partition, then reads each frame, checks header against index, the
 * CRC32C and the record structure before yielding a single record.
 */
#include "core/codec.h"
#include "core/frame.h"
#include "core/spill.h"
#include "read/reader_net.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

struct ush_reader {
	struct ush_reader_opts o;
	struct ushi_codec_ctx codec;
	uint32_t map;              /* next map to open */
	int fd;                    /* current map's data file */
	char path[PATH_MAX];
	struct spill_trailer t;
	struct spill_entry *ents;  /* this partition's entries of the map */
	size_t nents, ei, ecap;    /* ecap in bytes, as ushi_grow() keeps it */
	uint64_t next_seq;         /* lower sequence numbers are duplicates */
	struct reader_net *net;    /* reading from a worker instead */
	uint8_t *fbuf, *rbuf;      /* frame and decompressed batch */
	uint8_t *ibuf;             /* the map's index file */
	size_t fcap, rcap, icap;
	const uint8_t *batch;      /* records being yielded */
	size_t blen, boff;
	int err;
	struct ush_reader_stats st;
	struct ush_lat load_lat;
};

static int read_all(int fd, void *p, size_t n, uint64_t off)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = pread(fd, b, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return USH_ECORRUPT; /* file shorter than its index */
		b += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Reads map's committed index and keeps this partition's entries. */
static int load_index(struct ush_reader *r, uint32_t map)
{
	const struct ush_reader_opts *o = &r->o;
	char ipath[PATH_MAX];
	struct stat st = {0};
	spill_index(ipath, sizeof(ipath), o->dir, o->shuffle, map);
	int fd = open(ipath, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT
			       ? ushi_fail(USH_ENOTCOMMITTED, "reader: %s "
					  "missing: map %u has no committed "
					  "output (not committed yet, or another "
					  "dir or shuffle id than its writer's)",
					  ipath, map)
			       : ushi_fail(-errno, "reader: open %s", ipath);
	int ret = fstat(fd, &st) ? -errno : 0;
	size_t size = (size_t)st.st_size;
	size_t bad = size; /* index offset named in an error */
	if (!ret && (size < USHI_INDEX_TRAILER ||
		     (size - USHI_INDEX_TRAILER) % USHI_INDEX_ENTRY))
		ret = USH_ECORRUPT;
	size_t n = ret ? 0 : (size - USHI_INDEX_TRAILER) / USHI_INDEX_ENTRY;
	/* Buffers are kept across maps: no allocation per map opened. */
	if (!ret)
		ret = ushi_grow(&r->ibuf, &r->icap, size);
	if (!ret)
		ret = ushi_grow((uint8_t **)&r->ents, &r->ecap,
			       n * sizeof(*r->ents));
	const uint8_t *buf = r->ibuf;
	if (!ret)
		ret = read_all(fd, r->ibuf, size, 0);
	close(fd);
	if (!ret) {
		bad = n * USHI_INDEX_ENTRY; /* the trailer */
		uint32_t crc = spill_crc(0xffffffffu, buf, n * USHI_INDEX_ENTRY);
		ret = spill_trailer_get(buf + n * USHI_INDEX_ENTRY, &r->t, crc);
	}
	if (!ret && (r->t.entries != n || r->t.shuffle != o->shuffle ||
		     r->t.map != map || o->partition >= r->t.partitions))
		ret = USH_ECORRUPT;
	r->nents = r->ei = 0;
	for (size_t i = 0; !ret && i < n; i++) {
		struct spill_entry e;
		spill_entry_get(buf + i * USHI_INDEX_ENTRY, &e);
		if (e.len < USH_FRAME_HDR_SIZE || e.off > r->t.data_bytes ||
		    e.len > r->t.data_bytes - e.off) {
			ret = USH_ECORRUPT;
			bad = i * USHI_INDEX_ENTRY;
			break;
		}
		if (e.partition == o->partition)
			r->ents[r->nents++] = e;
	}
	if (ret)
		return ushi_fail(ret, "reader: index %s offset %zu partition %u",
				ipath, bad, o->partition);
	return 0;
}

static int open_map(struct ush_reader *r, uint32_t map)
{
	int ret = load_index(r, map);
	if (ret)
		return ret;
	spill_data(r->path, sizeof(r->path), r->o.dir, r->o.shuffle, map,
		   r->t.attempt);
	r->fd = open(r->path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0)
		return ushi_fail(-errno, "reader: open %s (map %u partition %u)",
				r->path, map, r->o.partition);
	struct stat st;
	if (fstat(r->fd, &st))
		return ushi_fail(-errno, "reader: stat %s", r->path);
	if ((uint64_t)st.st_size < r->t.data_bytes)
		return ushi_fail(USH_ECORRUPT, "reader: %s offset %lld "
				"partition %u: data file truncated (index "
				"expects %llu bytes)",
				r->path, (long long)st.st_size, r->o.partition,
				(unsigned long long)r->t.data_bytes);
	r->next_seq = 0;
	return 0;
}

/* Validates the records of a batch before any is yielded. */
/* Loads the next frame of the current map into r->batch. Returns 1 when
 * loaded, 0 when the map has no more, or an error. */
static int load_frame(struct ush_reader *r)
{
	while (r->ei < r->nents) {
		const struct spill_entry *e = &r->ents[r->ei++];
		uint64_t t0 = ushi_now_ns();
		struct ushi_frame f;
		const char *what = "frame";
		int ret = ushi_grow(&r->fbuf, &r->fcap, e->len);
		if (!ret)
			ret = read_all(r->fd, r->fbuf, e->len, e->off);
		if (!ret && (ret = frame_decode(r->fbuf, &f)))
			what = "frame header";
		if (!ret && (ush_frame_size(f.payload_len) != e->len ||
			     f.shuffle != r->o.shuffle || f.map != r->t.map ||
			     f.attempt != r->t.attempt ||
			     f.partition != r->o.partition)) {
			ret = USH_ECORRUPT;
			what = "frame header disagrees with the index";
		}
		if (!ret && (ret = frame_check(r->fbuf, &f)))
			what = "frame";
		const uint8_t *payload = r->fbuf + USH_FRAME_HDR_SIZE;
		if (!ret && f.codec != USH_CODEC_NONE) {
			ret = ushi_grow(&r->rbuf, &r->rcap, f.raw_len ? f.raw_len : 1);
			if (!ret)
				ret = codec_decompress(&r->codec, f.codec,
						       payload, f.payload_len,
						       r->rbuf, f.raw_len);
			what = "decompressing frame";
			payload = r->rbuf;
		}
		if (!ret && (ret = records_check(payload, f.raw_len, f.nrec)))
			what = "records of frame";
		if (ret)
			return ushi_fail(ret, "reader: %s offset %llu partition "
					"%u: %s", r->path,
					(unsigned long long)e->off,
					r->o.partition, what);
		r->st.stored_bytes += e->len;
		if (f.seq < r->next_seq) {
			r->st.dup_batches++;
			continue; /* a duplicate batch: already yielded */
		}
		/* A committed map numbers each partition's batches 0, 1, ...
		 * in file order: a gap is a lost or reordered batch, which
		 * must not pass as a short partition. */
		if (f.seq > r->next_seq)
			return ushi_fail(USH_ECORRUPT, "reader: %s offset %llu "
					"partition %u: batch %llu where %llu "
					"was due", r->path,
					(unsigned long long)e->off,
					r->o.partition,
					(unsigned long long)f.seq,
					(unsigned long long)r->next_seq);
		r->next_seq = f.seq + 1;
		r->st.batches++;
		r->st.raw_bytes += f.raw_len;
		ush_lat_add(&r->load_lat, ushi_now_ns() - t0);
		r->batch = payload;
		r->blen = f.raw_len;
		r->boff = 0;
		return 1;
	}
	return 0;
}

int ush_reader_next(ush_reader *r, const void **rec, size_t *len)
{
	if (r->net) {
		int ret = reader_net_next(r->net, rec, len);
		r->st.records += ret == 1;
		return ret;
	}
	if (r->err)
		return r->err;
	for (;;) {
		if (r->batch) {
			int ret = records_next(r->batch, r->blen, &r->boff, rec,
					       len);
			if (ret == 1) {
				r->st.records++;
				return 1; /* checked in check_records */
			}
			r->batch = NULL;
		}
		int ret = r->fd >= 0 ? load_frame(r) : 0;
		if (ret == 1)
			continue;
		if (ret == 0 && r->fd >= 0) {
			close(r->fd);
			r->fd = -1;
		}
		if (ret == 0 && r->map < r->o.maps)
			ret = open_map(r, r->map++);
		else if (ret == 0)
			return 0;
		if (ret < 0)
			return r->err = ret;
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

int ush_reader_open(ush_reader **out, const struct ush_reader_opts *opts)
{
	struct ush_reader_opts copy;
	*out = NULL;
	int ret = ushi_opts_load(&copy, &reader_defaults, sizeof(copy), opts,
				 "reader options");
	if (ret)
		return ret;
	const struct ush_reader_opts *o = &copy;
	if (o->workers && *o->workers) {
		struct reader_net *net;
		ret = reader_net_open(&net, o);
		if (ret)
			return ret;
		struct ush_reader *r = ushi_calloc(1, sizeof(*r));
		if (!r) {
			reader_net_free(net);
			return ushi_fail(-ENOMEM, "reader: allocation");
		}
		r->fd = -1;
		r->net = net;
		*out = r;
		return 0;
	}
	if (!o->dir || !o->maps)
		return ushi_fail(-EINVAL, "reader: needs a directory and at "
				"least one map");
	struct ush_reader *r = ushi_calloc(1, sizeof(*r));
	if (!r)
		return ushi_fail(-ENOMEM, "reader: allocation");
	r->fd = -1;
	ush_lat_init(&r->load_lat);
	r->o = *o;
	r->o.dir = ushi_strdup(o->dir);
	ret = r->o.dir ? codec_init(&r->codec) : -ENOMEM;
	if (ret) {
		ush_reader_free(r);
		return ushi_fail(ret, "reader: allocation");
	}
	*out = r;
	return 0;
}

void ush_reader_stats_size(const ush_reader *r, struct ush_reader_stats *st,
			   size_t size)
{
	struct ush_reader_stats s = r->st;
	if (r->net) {
		reader_net_stats(r->net, &s);
		s.records = r->st.records;
	}
	ushi_struct_init(st, size, &s, sizeof(s));
}

const struct ush_lat *ush_reader_load_lat(const ush_reader *r)
{
	return r->net ? reader_net_load_lat(r->net) : &r->load_lat;
}

void ush_reader_free(ush_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	reader_net_free(r->net);
	codec_destroy(&r->codec);
	ushi_free(r->ents);
	ushi_free(r->ibuf);
	ushi_free(r->fbuf);
	ushi_free(r->rbuf);
	ushi_free((void *)r->o.dir);
	ushi_free(r);
}
