/*
 * The disk source: each map's index in its spill directory (this
 * partition's entries, three small reads), then the frames of the
 * partition read ahead from its data file on the reader's ring
 * (prefetch.h), one map after another in ascending map order.
 */
#define _GNU_SOURCE
#include "core/spill.h"
#include "read/prefetch.h"
#include "read/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

struct disk_src {
	uint32_t next;             /* the next map to read */
	struct rmap *cur;          /* the map being read */
	int fd, dfd;               /* its data file, buffered and O_DIRECT */
	struct prefetch pf;        /* the partition's frames read ahead */
	char path[PATH_MAX];
	struct spill_entry *ents;  /* this partition's entries of the map */
	size_t nents, ei, ecap;    /* ecap in bytes, as ushi_grow() keeps it */
	uint8_t *ibuf;             /* index */
	size_t icap;
};

static int disk_create(struct ush_reader *r, const struct ush_reader_opts *o)
{
	(void)o;
	struct disk_src *d = ushi_calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->fd = d->dfd = -1;
	prefetch_init(&d->pf, r->ring);
	r->source_state = d;
	return 0;
}

/* Status s's map lives in its spill directory. */
static int disk_add(struct ush_reader *r, const struct status *s,
		    uint64_t mask, struct rmap *m)
{
	(void)mask;
	return reader_add_src(r, 0, s->loc, s->loc_len, &m->src);
}

static int index_path(char *buf, size_t n, const struct ush_reader *r,
		      const struct rmap *m)
{
	return spill_index(buf, n, r->srcs[m->src], r->shuffle, m->map,
			   m->attempt);
}

/* A header without the magic: is the index a version 1 one, whose
 * trailer is at its end? */
static bool index_v1(int fd, size_t size)
{
	uint8_t t[USHI_INDEX_V1_TRAILER];
	return size >= sizeof(t) &&
	       !ushi_pread_all(fd, t, sizeof(t), size - sizeof(t)) &&
	       spill_is_v1(t);
}

/*
 * Reads m's index header, the partition's directory slot and its entries
 * (docs/format.md §2.3): three small reads whatever the partition count.
 * Returns 0 with the entries in d->ents and h filled, or an error, *what
 * and *bad (the index offset) saying which check failed.
 */
static int index_lookup(struct ush_reader *r, const struct rmap *m, int fd,
			size_t size, struct spill_header *h,
			const char **what, uint64_t *bad)
{
	struct disk_src *d = r->source_state;
	uint8_t hdr[USHI_INDEX_HEADER], sl[2 * USHI_INDEX_SLOT];
	*what = "index shorter than its header";
	if (size < USHI_INDEX_HEADER)
		return USH_ECORRUPT;
	int ret = ushi_pread_all(fd, hdr, sizeof(hdr), 0);
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
	if ((ret = ushi_pread_all(fd, sl, sizeof(sl), *bad)))
		return ret;
	struct spill_slot s0, s1;
	spill_slot_get(sl, &s0);
	spill_slot_get(sl + USHI_INDEX_SLOT, &s1);
	*what = "directory slot out of range";
	if (s0.start > s1.start || s1.start > h->entries)
		return USH_ECORRUPT;
	size_t n = (size_t)(s1.start - s0.start);
	/* Buffers are kept across maps: no allocation per map opened. */
	if ((ret = ushi_grow(&d->ibuf, &d->icap, n * USHI_INDEX_ENTRY)) ||
	    (ret = ushi_grow((uint8_t **)&d->ents, &d->ecap,
			     n * sizeof(*d->ents))))
		return ret;
	*bad = spill_entry_off(h->partitions, s0.start);
	if ((ret = ushi_pread_all(fd, d->ibuf, n * USHI_INDEX_ENTRY, *bad)))
		return ret;
	*what = "directory slot CRC";
	*bad = spill_slot_off(r->partition);
	if (spill_slot_crc(s0.start, d->ibuf, n * USHI_INDEX_ENTRY) != s0.crc)
		return USH_ECRC;
	*what = "entry out of range or of another partition";
	for (size_t i = 0; i < n; i++) {
		struct spill_entry e;
		spill_entry_get(d->ibuf + i * USHI_INDEX_ENTRY, &e);
		*bad = spill_entry_off(h->partitions, s0.start + i);
		if (e.len < USH_FRAME_HDR_SIZE || e.off > h->data_bytes ||
		    e.len > h->data_bytes - e.off || e.partition != r->partition)
			return USH_ECORRUPT;
		d->ents[i] = e;
	}
	d->nents = n;
	return 0;
}

/* Finds this partition's entries in m's index, opens m's data file. */
static int load_index(struct ush_reader *r, const struct rmap *m)
{
	struct disk_src *d = r->source_state;
	char ipath[PATH_MAX];
	struct stat st = {0};
	struct spill_header h;
	index_path(ipath, sizeof(ipath), r, m);
	int fd = open(ipath, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ushi_fail(-errno, "reader: open %s", ipath);
	const char *what = "read";
	uint64_t bad = 0; /* index offset named in an error */
	d->nents = d->ei = 0;
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
	spill_data(d->path, sizeof(d->path), r->srcs[m->src], r->shuffle,
		   m->map, m->attempt);
	d->fd = open(d->path, O_RDONLY | O_CLOEXEC);
	if (d->fd < 0)
		return ushi_fail(-errno, "reader: open %s (map %u partition %u)",
				d->path, m->map, r->partition);
	if (fstat(d->fd, &st))
		return ushi_fail(-errno, "reader: stat %s", d->path);
	if ((uint64_t)st.st_size < h.data_bytes)
		return ushi_fail(USH_ECORRUPT, "reader: %s offset %lld "
				"partition %u: data file truncated (index "
				"expects %llu bytes)",
				d->path, (long long)st.st_size, r->partition,
				(unsigned long long)h.data_bytes);
	/* Large frames are read around the page cache (prefetch.h); a
	 * file system that refuses O_DIRECT reads through it. */
	for (size_t i = 0; d->dfd < 0 && i < d->nents; i++)
		if (d->ents[i].len >= USHI_PACK_MIN)
			d->dfd = open(d->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
	prefetch_reset(&d->pf, d->fd, d->dfd, d->ents, d->nents);
	return 0;
}

/* The next batch of the current map's file: 1, 0 at its end, or an
 * error. */
static int disk_frame(struct ush_reader *r)
{
	struct disk_src *d = r->source_state;
	struct rmap *m = d->cur;
	while (d->ei < d->nents) {
		const struct spill_entry *e = &d->ents[d->ei];
		uint64_t t0 = ushi_now_ns();
		struct ushi_frame f;
		const char *what = "frame";
		const uint8_t *frame = NULL;
		int ret = prefetch_take(&d->pf, d->ei++, &frame);
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
					"%u: %s", d->path,
					(unsigned long long)e->off,
					r->partition, what);
		r->st.stored_bytes += e->len;
		ret = reader_take(r, m, &f, frame, e->off, t0);
		if (ret)
			return ret;
	}
	reader_map_done(m);
	return reader_check_map(r, m, d->path);
}

/* Closes the current map's data file, nothing in flight on it. */
static void close_data(struct ush_reader *r)
{
	struct disk_src *d = r->source_state;
	prefetch_drain(&d->pf);
	if (d->fd >= 0)
		close(d->fd);
	if (d->dfd >= 0)
		close(d->dfd);
	d->fd = d->dfd = -1;
}

/* The next batch from disk: 1, 0 at the end of every map, or an error. */
static int disk_next(struct ush_reader *r)
{
	struct disk_src *d = r->source_state;
	for (;;) {
		int ret = d->cur ? disk_frame(r) : 0;
		if (ret)
			return ret;
		close_data(r);
		d->cur = NULL;
		/* A map without batches of this partition has no file to
		 * read: its status says so, under its CRC. */
		while (d->next < r->nmaps && !r->maps[d->next].expect)
			d->next++;
		if (d->next == r->nmaps)
			return 0;
		d->cur = &r->maps[d->next++];
		if ((ret = load_index(r, d->cur)))
			return ret;
	}
}

/* Every attempt's index must be in place (its commit). */
static int disk_open(struct ush_reader *r)
{
	((struct disk_src *)r->source_state)->next = 0; /* a range's next */
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

static void disk_describe(struct ush_reader *r, uint64_t off, char *buf, size_t n)
{
	struct disk_src *d = r->source_state;
	snprintf(buf, n, "%s offset %llu", d->path, (unsigned long long)off);
}

static void disk_forget(struct ush_reader *r)
{
	struct disk_src *d = r->source_state;
	prefetch_forget(&d->pf);
}

static void disk_destroy(struct ush_reader *r)
{
	struct disk_src *d = r->source_state;
	if (!d)
		return;
	close_data(r);
	prefetch_destroy(&d->pf);
	ushi_free(d->ents);
	ushi_free(d->ibuf);
	ushi_free(d);
	r->source_state = NULL;
}

const struct ushi_source_ops ushi_source_disk = {
	.name = "disk",
	.create = disk_create,
	.add = disk_add,
	.open = disk_open,
	.next = disk_next,
	.describe = disk_describe,
	.forget = disk_forget,
	.destroy = disk_destroy,
};
