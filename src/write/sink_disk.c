/*
 * The disk target: local spill of one map attempt. Frames go to the data
 * file with WRITE_FIXED at increasing offsets (O_DIRECT by default), small
 * ones packed into aligned writes; their index entries are kept in
 * memory. Commit syncs the data, writes the index grouped by partition
 * to a temporary file, syncs it and renames it into place without
 * replacing: the rename publishes the attempt atomically.
 *
 * An attempt has one writer: it holds an exclusive flock on the data
 * file from open to free. Only under the lock is the file truncated, so
 * a second writer of a committed or busy attempt touches nothing.
 */
#define _GNU_SOURCE
#include "core/spill.h"
#include "write/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * Small frames (spill_packed(): below 16 KiB, or padded by more than 1/8
 * under O_DIRECT) are copied into a pack buffer (a registered pool buffer
 * of the push size; psync: the private copy buffer), which goes out as
 * one write once full: a small frame costs no padding. A frame may span
 * two packs: the packs are the data file's bytes in order. Larger frames
 * are written in place from their own buffer, without a copy (copying a
 * 40 KiB frame cost 8% more CPU on a CPU-bound 64-partition spill); the
 * pack is written first, padded to USHI_ALIGN under O_DIRECT. So padding
 * costs at most 1/8 of a large frame plus 4 KiB per run of packs.
 *
 * The sink keeps the packs it took from the pool (at most USHI_PACKS,
 * and 1/64 of the pool): a finished pack write returns its buffer to the
 * sink, not to the pool, where partition buffers would fragment the
 * space back into small blocks. Up to that many pack writes fly at once.
 * While it holds none (a small pool), a pack is any buffer the pool has,
 * returned after its write.
 */
#define USHI_PACKS 8u

/*
 * Large frames of one partition go to runs: stretches of the file kept
 * for that partition, so a reader reads a partition's frames a run at a
 * time (prefetch.h) rather than one 64 KiB frame in every 64 at 64
 * partitions, which is a random read. A run is taken at the data offset
 * when the partition's last one is full: an eighth of what the partition
 * wrote so far, in whole push buffers, at most USHI_RUN_MAX (run_size()).
 * So the tails that stay empty (holes, or preallocated space: punching
 * them at commit would cost a call per partition) cost at most an eighth
 * of each partition's large frames, the writer holds no more memory than
 * before, and every write still goes out as its frame comes.
 */
#define USHI_RUN_MAX (1u << 20)

struct run {
	uint64_t off, end; /* where the next frame goes; the run's end */
	uint64_t bytes;    /* the partition's large frames so far */
};

int (*ushi_fdatasync)(int fd) = fdatasync;

struct disk {
	char data[PATH_MAX], itmp[PATH_MAX], index[PATH_MAX], sdir[PATH_MAX];
	int fd, ifd, slot;
	bool direct, locked, published;
	uint64_t off;      /* next data offset: the pack's start, if any */
	/* Every frame's entry in submission order, 16 B each, until the
	 * commit groups them by partition (docs/format.md §2.3). */
	struct spill_entry *ents;
	size_t ecap;       /* bytes, as ushi_grow() keeps it */
	uint64_t entries;
	/* The open pack: pool buffer pb (ring) or copy (psync). */
	struct ushi_buf *pb;
	struct ushi_buf *held[USHI_PACKS];  /* packs the sink holds */
	struct ushi_buf *pfree[USHI_PACKS]; /* those idle */
	unsigned nfree, nheld, maxheld;
	uint8_t *pack;     /* its bytes, NULL while none is open */
	uint32_t pcap, plen;
	uint8_t *copy;     /* psync: the pack and the private frame copy */
	size_t copy_cap;
	/* Staged writes: packs waiting for a ring op (len, offset in seq),
	 * started as ops come free, so a stage flush does not wait for
	 * the disk and the disk keeps writing while records are staged. */
	struct ushi_buf *bhead, *btail;
	bool prealloc;      /* O_DIRECT and the file system can fallocate */
	uint64_t alloc_end; /* bytes preallocated */
	struct run *runs;   /* per partition, made at the first large frame */
	struct run *last;   /* the run taken last: it may end the file */
};

static bool committed(struct ush_writer *w, struct disk *d)
{
	if (access(d->index, F_OK))
		return false;
	ushi_fail(USH_ECOMMITTED, "disk: map %u attempt %u is committed (%s "
		  "exists): a retry needs a new attempt number", w->o.map,
		  w->o.attempt, d->index);
	return true;
}

static int open_data(struct ush_writer *w, struct disk *d)
{
	int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
	d->direct = w->o.direct != 0;
	d->fd = open(d->data, flags | (d->direct ? O_DIRECT : 0), 0644);
	if (d->fd < 0 && d->direct && errno == EINVAL) {
		ushi_warn("%s: the file system refuses O_DIRECT (tmpfs does); "
			 "spilling with buffered I/O", d->data);
		d->direct = false;
		d->fd = open(d->data, flags, 0644);
	}
	d->prealloc = d->direct;
	if (d->fd < 0)
		return ushi_fail(-errno, "disk: open %s", d->data);
	/* Checked again under the lock: a commit may have raced the open. */
	if (flock(d->fd, LOCK_EX | LOCK_NB))
		return errno == EWOULDBLOCK
			       ? ushi_fail(-EBUSY, "disk: map %u attempt %u "
					  "is open by another writer (%s is "
					  "locked)", w->o.map, w->o.attempt,
					  d->data)
			       : ushi_fail(-errno, "disk: flock %s", d->data);
	/* The lock is on the file we opened: a writer that held it before
	 * may have unlinked it (abort), and a third may have made a new one
	 * at the path. Only the file at the path counts. */
	struct stat a, b;
	if (fstat(d->fd, &a) || stat(d->data, &b) || a.st_ino != b.st_ino ||
	    a.st_dev != b.st_dev)
		return ushi_fail(-EBUSY, "disk: map %u attempt %u: %s was "
				"replaced while this writer opened it (another "
				"writer of the attempt)", w->o.map, w->o.attempt,
				d->data);
	if (committed(w, d))
		return USH_ECOMMITTED;
	/* Ours now: what a failed earlier writer of it left goes. */
	d->locked = true;
	if (ftruncate(d->fd, 0))
		return ushi_fail(-errno, "disk: truncate %s", d->data);
	return 0;
}

/*
 * Makes the spill directory, and a relative one absolute: the map status
 * names it, and a reader in another working directory (or this process
 * after a chdir) must find the same files.
 */
static int dir_make(struct ush_writer *w)
{
	char abs[PATH_MAX];
	if (mkdir(w->o.dir, 0755) && errno != EEXIST)
		return ushi_fail(-errno, "disk: mkdir %s", w->o.dir);
	if (w->o.dir[0] == '/')
		return 0;
	if (!realpath(w->o.dir, abs))
		return ushi_fail(-errno, "disk: realpath %s", w->o.dir);
	char *dir = ushi_strdup(abs);
	if (!dir)
		return ushi_fail(-ENOMEM, "disk: allocation");
	ushi_free((void *)w->o.dir);
	w->o.dir = dir;
	return 0;
}

static int disk_open(struct ush_writer *w)
{
	struct disk *d = ushi_calloc(1, sizeof(*d));
	if (!d)
		return ushi_fail(-ENOMEM, "disk: allocation");
	d->fd = d->ifd = d->slot = -1;
	w->sink_state = d;
	const struct ush_writer_opts *o = &w->o;
	int ret = dir_make(w);
	if (ret) {
		w->sink->abort(w);
		return ret;
	}
	spill_dir(d->sdir, sizeof(d->sdir), o->dir, o->shuffle);
	spill_data(d->data, sizeof(d->data), o->dir, o->shuffle, o->map,
		   o->attempt);
	spill_index(d->index, sizeof(d->index), o->dir, o->shuffle, o->map,
		    o->attempt);
	snprintf(d->itmp, sizeof(d->itmp), "%.*s.index.tmp",
		 (int)(strlen(d->data) - 5), d->data);
	if (committed(w, d))
		ret = USH_ECOMMITTED;
	else if (mkdir(d->sdir, 0755) && errno != EEXIST)
		ret = ushi_fail(-errno, "disk: mkdir %s", d->sdir);
	else if (!(ret = open_data(w, d))) {
		/* Made anew under the lock: never a file another writer of
		 * the attempt still writes into. */
		unlink(d->itmp);
		d->ifd = open(d->itmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
			      0644);
		if (d->ifd < 0)
			ret = ushi_fail(-errno, "disk: open %s", d->itmp);
	}
	if (ret) {
		w->sink->abort(w);
		return ret;
	}
	if (o->ioengine == USH_IOENGINE_PSYNC) {
		d->copy_cap = w->ropts->push_size;
		d->copy = ushi_aligned_alloc(d->copy_cap);
		if (!d->copy) {
			w->sink->abort(w);
			return ushi_fail(-ENOMEM, "disk: psync buffer");
		}
	} else {
		d->slot = ring_file_add(w->ring, d->fd);
		size_t bufs = w->ropts->pool_bytes / w->ropts->push_size;
		d->maxheld = bufs / 64 < USHI_PACKS ? (unsigned)(bufs / 64) :
						      USHI_PACKS;
	}
	return 0;
}

static void disk_close(struct ush_writer *w, struct disk *d)
{
	ring_file_del(w->ring, d->slot);
	if (d->fd >= 0)
		close(d->fd);
	if (d->ifd >= 0)
		close(d->ifd);
	if (d->pb) /* an open pack, never in flight */
		pool_put(w->pool, d->pb);
	while (d->bhead) { /* backlogged, never started (abort) */
		struct ushi_buf *b = d->bhead;
		d->bhead = b->next;
		pool_put(w->pool, b);
	}
	while (d->nfree)
		pool_put(w->pool, d->pfree[--d->nfree]);
	ushi_free(d->copy);
	ushi_free(d->ents);
	ushi_free(d->runs);
	ushi_free(d);
	w->sink_state = NULL;
}

/* A failed write is the writer's sticky error. */
static void write_failed(struct ushi_op *op, int res)
{
	struct ush_writer *w = op->owner;
	struct disk *d = w->sink_state;
	writer_error(w, res, "disk: write %s offset %llu (%u bytes)", d->data,
		     (unsigned long long)op->io.off, op->io.len);
}

static void disk_done(struct ushi_op *op, int res)
{
	if (res < 0)
		write_failed(op, res);
	writer_frame_done(op->owner, op->io.buf, op->io.addr, op->io.t0);
}

/* The psync copy buffer written: it stays the sink's. */
static void copy_done(struct ushi_op *op, int res)
{
	if (res < 0)
		write_failed(op, res);
}

static bool held(const struct disk *d, const struct ushi_buf *b)
{
	for (unsigned i = 0; i < d->nheld; i++)
		if (d->held[i] == b)
			return true;
	return false;
}

static void unhold(struct disk *d, const struct ushi_buf *b)
{
	for (unsigned i = 0; i < d->nheld; i++)
		if (d->held[i] == b) {
			d->held[i] = d->held[--d->nheld];
			return;
		}
}

/* A pack written: a held one goes back to the sink's idle packs, a
 * one-off to the pool. */
static void pack_done(struct ushi_op *op, int res)
{
	struct ush_writer *w = op->owner;
	struct disk *d = w->sink_state;
	struct ushi_buf *b = op->io.buf;
	if (res < 0)
		write_failed(op, res);
	if (!held(d, b)) {
		writer_frame_done(w, b, NULL, op->io.t0);
		return;
	}
	buf_move(b, BUF_INFLIGHT, BUF_WRITER);
	d->pfree[d->nfree++] = b;
	writer_frame_done(w, NULL, NULL, op->io.t0);
}

/*
 * O_DIRECT writes that extend a file are serialised (ext4 punts them to
 * io_uring's workers, one at a time under the inode lock): preallocate
 * ahead of the write offset so writes land inside the file. The step
 * grows with the file, as much again as is preallocated (1 MiB at first,
 * 64 MiB at most), so a writer holds at most max(1 MiB, min(its data,
 * 64 MiB)) it has not written: never 64 MiB for a small map, which failed
 * other writers' commits on a file system they fit. A file system that
 * refuses (ENOSPC, EOPNOTSUPP) gets appends: preallocation only speeds
 * writes up. A refused fallocate may keep part of what it asked for
 * (ext4 does), so the file is cut back at once to what it held before.
 * Commit trims the file to the bytes written; abort unlinks it.
 */
#define USHI_PREALLOC_MIN (1ull << 20)
#define USHI_PREALLOC_MAX (64ull << 20)

static void prealloc(struct ush_writer *w, struct disk *d, uint32_t len)
{
	while (d->prealloc && d->off + len > d->alloc_end) {
		uint64_t step = d->alloc_end < USHI_PREALLOC_MIN ?
					USHI_PREALLOC_MIN :
				d->alloc_end < USHI_PREALLOC_MAX ?
					d->alloc_end : USHI_PREALLOC_MAX;
		if (!fallocate(d->fd, 0, (off_t)d->alloc_end, (off_t)step)) {
			d->alloc_end += step;
			continue;
		}
		d->prealloc = false;
		if (ftruncate(d->fd, (off_t)d->alloc_end))
			writer_error(w, -errno, "disk: truncate %s to %llu "
				     "bytes after a refused fallocate", d->data,
				     (unsigned long long)d->alloc_end);
	}
}

/* Pads n bytes at p under O_DIRECT (pool buffers, packs and heap frames
 * are allocated in USHI_ALIGN units, so the padding fits; zeroed rather
 * than leaking old bytes): returns the bytes to write. */
static uint32_t pad(const struct disk *d, uint8_t *p, uint32_t n)
{
	uint32_t len = d->direct ? ALIGN_UP(n, USHI_ALIGN) : n;
	memset(p + n, 0, len - n);
	return len;
}

/* Pads n bytes at p and gives them the next place in the file: returns
 * its offset and sets *len to the bytes to write. */
static uint64_t frame_slot(struct ush_writer *w, struct disk *d, uint8_t *p,
		      uint32_t n, uint32_t *len)
{
	*len = pad(d, p, n);
	prealloc(w, d, *len);
	uint64_t off = d->off;
	d->off += *len;
	writer_stored(w, *len);
	return off;
}

/*
 * Starts the write of len bytes at p (in b, or heap frame mem = p, or
 * the psync copy buffer) to off; on error b/p go back at once. The
 * psync ioengine's writes block: done, and their callback run, on
 * return, which returns their error.
 */
static int write_op(struct ush_writer *w, struct disk *d, struct ushi_buf *b,
		    uint8_t *p, uint64_t off, uint32_t len, ushi_op_cb cb)
{
	struct ushi_op *op;
	int ret = ring_op_get(w->ring, &op);
	if (ret) {
		if (cb == pack_done)
			unhold(d, b); /* back to the pool */
		if (p != d->copy)
			writer_frame_done(w, b, p, 0);
		return ret;
	}
	op->cb = p == d->copy ? copy_done : cb;
	op->owner = w;
	op->io.blocking = d->copy != NULL;
	ring_write_at(w->ring, op, b, p, off, len, d->fd, d->slot);
	return d->copy ? w->err : 0;
}

/* Writes n bytes at p (as write_op()) at the data offset, padded under
 * O_DIRECT; b/mem go back on completion, counted out of w->inflight,
 * where the caller counted them. */
static int data_write(struct ush_writer *w, struct disk *d,
		      struct ushi_buf *b, uint8_t *p, uint32_t n, ushi_op_cb cb)
{
	uint32_t len;
	uint64_t off = frame_slot(w, d, p, n, &len);
	return write_op(w, d, b, p, off, len, cb);
}

/* Starts backlogged packs while ring ops are free, or all (wait). */
static int backlog_start(struct ush_writer *w, struct disk *d, bool wait)
{
	int ret = 0;
	while (d->bhead && (wait || ring_op_ready(w->ring))) {
		struct ushi_buf *b = d->bhead;
		d->bhead = b->next;
		b->next = NULL;
		if (!ret)
			ret = write_op(w, d, b, b->data, b->seq, b->len,
				       pack_done);
		else { /* after a failure the rest goes back unwritten */
			unhold(d, b);
			writer_frame_done(w, b, NULL, 0);
		}
	}
	return ret;
}

/* Writes the open pack, if any (padded: it ends the packed run). */
static int pack_flush(struct ush_writer *w, struct disk *d)
{
	if (!d->pack)
		return 0;
	struct ushi_buf *b = d->pb;
	uint8_t *p = d->pack;
	uint32_t n = d->plen;
	d->pb = NULL;
	d->pack = NULL;
	d->plen = 0;
	if (!n) {
		if (b && held(d, b))
			d->pfree[d->nfree++] = b;
		else if (b)
			pool_put(w->pool, b);
		return 0;
	}
	if (b) {
		buf_move(b, BUF_WRITER, BUF_INFLIGHT);
		w->inflight++; /* a frame of its own for the writer */
	}
	if (b && w->stage && !ring_op_ready(w->ring)) {
		b->seq = frame_slot(w, d, p, n, &b->len);
		if (d->bhead)
			d->btail->next = b;
		else
			d->bhead = b;
		d->btail = b;
		b->next = NULL;
		return 0;
	}
	return data_write(w, d, b, p, n, pack_done);
}

/* A pack without waiting: an idle held one, a new held one while the
 * sink holds fewer than maxheld, or, while it holds none or stages (no
 * partition buffers fragment the pool then), a one-off of any size the
 * pool has. */
static struct ushi_buf *pack_get(struct ush_writer *w, struct disk *d)
{
	if (d->nfree)
		return d->pfree[--d->nfree];
	struct ushi_buf *b = NULL;
	if (d->nheld < d->maxheld &&
	    (b = pool_get(w->pool, w->push_order)))
		d->held[d->nheld++] = b;
	for (unsigned o = w->push_order + 1; !b && (!d->nheld || w->stage) &&
					    o-- > 0;)
		b = pool_get(w->pool, o);
	return b;
}

/*
 * Opens a pack at the data offset: psync has its buffer; the ring waits
 * for one while writes are in flight (a pack just written comes back).
 * Returns false when there is none: the frame is then written in place.
 */
static bool pack_open(struct ush_writer *w, struct disk *d)
{
	if (d->copy) {
		d->pack = d->copy;
		d->pcap = (uint32_t)d->copy_cap;
		return true;
	}
	struct ushi_buf *b;
	while (!(b = pack_get(w, d)) && !w->err &&
	       !backlog_start(w, d, false) && ring_inflight(w->ring) &&
	       !ring_reap(w->ring, 1))
		;
	if (!b)
		return false;
	d->pb = b;
	d->pack = b->data;
	d->pcap = b->cap;
	return true;
}

/* Copies a small frame into the open pack and those after it, writing
 * each as it fills. */
static int pack_frame(struct ush_writer *w, struct disk *d, const uint8_t *p,
		      uint32_t flen)
{
	while (flen) {
		/* A full pack just went out: reaping brings a buffer back,
		 * unless an error stopped the ring. */
		if (!d->pack && !pack_open(w, d))
			return w->err ? w->err :
			       ushi_fail(-ENOMEM, "disk: no pack buffer");
		uint32_t n = d->pcap - d->plen < flen ? d->pcap - d->plen : flen;
		memcpy(d->pack + d->plen, p, n);
		d->plen += n;
		p += n;
		flen -= n;
		if (d->plen == d->pcap) {
			int ret = pack_flush(w, d);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* Room for one more entry: doubling, contents kept. */
static int ents_room(struct disk *d)
{
	if ((d->entries + 1) * sizeof(*d->ents) <= d->ecap)
		return 0;
	size_t cap = d->ecap ? 2 * d->ecap : 4096 * sizeof(*d->ents);
	struct spill_entry *e = ushi_malloc(cap);
	if (!e)
		return ushi_fail(-ENOMEM, "disk: index of %llu frames",
				(unsigned long long)d->entries + 1);
	if (d->entries)
		memcpy(e, d->ents, d->entries * sizeof(*e));
	ushi_free(d->ents);
	d->ents = e;
	d->ecap = cap;
	return 0;
}

/* A new run for a frame of len bytes: the frame alone while an eighth
 * of the partition's bytes is less than a push buffer, else whole push
 * buffers (frames of full ones fit them to the byte, others of any size
 * leave less than one), at most USHI_RUN_MAX. */
static uint64_t run_size(const struct ush_writer *w, const struct run *r,
			 uint32_t len)
{
	uint64_t unit = ALIGN_UP((uint64_t)w->ropts->push_size, USHI_ALIGN);
	uint64_t n = r->bytes / 8 / unit, most = USHI_RUN_MAX / unit;
	if (!n || len > unit)
		return len;
	if (most < 1) /* push buffers above USHI_RUN_MAX: one each */
		most = 1;
	return unit * (n < most ? n : most);
}

/*
 * The place of a large frame of partition (n bytes at p, padded under
 * O_DIRECT to *len): the rest of the partition's run, or a new run at
 * the data offset, after the open pack (written first, as it lies
 * there).
 */
static int run_slot(struct ush_writer *w, struct disk *d, uint32_t partition,
		    uint8_t *p, uint32_t n, uint32_t *len, uint64_t *off)
{
	if (!d->runs &&
	    !(d->runs = ushi_calloc(w->o.partitions, sizeof(*d->runs))))
		return ushi_fail(-ENOMEM, "disk: runs of %u partitions",
				w->o.partitions);
	struct run *r = &d->runs[partition];
	*len = pad(d, p, n);
	if (r->end - r->off < *len) {
		int ret = pack_flush(w, d);
		if (ret)
			return ret;
		uint64_t size = run_size(w, r, *len);
		prealloc(w, d, (uint32_t)size);
		r->off = d->off;
		r->end = d->off += size;
		d->last = r;
	}
	writer_stored(w, *len);
	*off = r->off;
	r->off += *len;
	r->bytes += *len;
	return 0;
}

static int disk_submit(struct ush_writer *w, struct ushi_buf *b, uint8_t *mem,
		       uint32_t flen, uint32_t partition)
{
	struct disk *d = w->sink_state;
	uint8_t *p = b ? b->data : mem;
	int ret = ents_room(d);
	if (ret) {
		writer_frame_done(w, b, mem, 0);
		return ret;
	}
	if (spill_packed(flen) && (d->pack || pack_open(w, d))) {
		/* Where the data continues: inside the open pack. */
		d->ents[d->entries++] = (struct spill_entry){
			d->off + d->plen, flen, partition};
		ret = pack_frame(w, d, p, flen);
		writer_frame_done(w, b, mem, 0);
		return ret;
	}
	uint32_t len = 0;
	uint64_t off = 0;
	/* psync's copy buffer is its pack too: the pack goes first. */
	if ((d->copy && (ret = pack_flush(w, d))) ||
	    (ret = run_slot(w, d, partition, p, flen, &len, &off))) {
		writer_frame_done(w, b, mem, 0);
		return ret;
	}
	d->ents[d->entries++] = (struct spill_entry){off, flen, partition};
	if (d->copy && flen <= d->copy_cap) {
		memcpy(d->copy, p, len); /* psync: the private copy */
		writer_frame_done(w, b, mem, ushi_now_ns());
		return write_op(w, d, NULL, d->copy, off, len, disk_done);
	}
	return write_op(w, d, b, p, off, len, disk_done);
}

/* The writer submits: backlogged packs take the ring ops that are free. */
static int disk_flush(struct ush_writer *w)
{
	return backlog_start(w, w->sink_state, false);
}

/* Waits for the writer's frames, backlogged packs too. */
static int disk_drain(struct ush_writer *w)
{
	int ret = backlog_start(w, w->sink_state, true);
	return ret ? ret : ring_reap(w->ring, 1);
}

/* Staged frames (stage.c) are built in the open pack. */
static int disk_pack_room(struct ush_writer *w, uint32_t partition,
			  uint8_t **p, uint32_t *room)
{
	(void)partition; /* one pack: the index finds the frames */
	struct disk *d = w->sink_state;
	bool open = d->pack || pack_open(w, d);
	*p = open ? d->pack + d->plen : NULL;
	*room = open ? d->pcap - d->plen : 0;
	return w->err;
}

static int disk_pack_add(struct ush_writer *w, const uint8_t *p, uint32_t flen,
			 uint32_t partition)
{
	struct disk *d = w->sink_state;
	int ret = ents_room(d);
	if (ret)
		return ret;
	if (!d->pack && !pack_open(w, d))
		return w->err ? w->err : ushi_fail(-ENOMEM, "disk: no pack "
						  "buffer");
	d->ents[d->entries++] = (struct spill_entry){d->off + d->plen, flen,
						      partition};
	if (p != d->pack + d->plen)
		return pack_frame(w, d, p, flen);
	d->plen += flen;
	return d->plen == d->pcap ? pack_flush(w, d) : 0;
}

/* A buffer of staged frames is written as a pack: after the open one,
 * which goes out first (padded), so the span's bytes follow it. */
static int disk_span_put(struct ush_writer *w, struct ushi_buf *b, uint32_t len,
			 const struct ushi_span_frame *fr, uint32_t nfr)
{
	struct disk *d = w->sink_state;
	int ret = pack_flush(w, d);
	for (uint32_t i = 0; !ret && i < nfr; i++)
		if (!(ret = ents_room(d)))
			d->ents[d->entries++] = (struct spill_entry){
				d->off + fr[i].at, fr[i].flen, fr[i].part};
	if (ret) {
		pool_put(w->pool, b);
		return ret;
	}
	d->pb = b;
	d->pack = b->data;
	d->pcap = b->cap;
	d->plen = len;
	return pack_flush(w, d);
}

/* Writes the last pack and waits for every data write. */
static int data_finish(struct ush_writer *w, struct disk *d)
{
	int ret = pack_flush(w, d);
	if (!ret)
		ret = backlog_start(w, d, true);
	unsigned fails = 0;
	while (w->inflight) {
		int r = ring_reap(w->ring, 1);
		if (r)
			writer_error(w, r, "disk: reap");
		ring_teardown_failed(r, &fails);
	}
	if (w->err)
		return ushi_fail_msg(w->err, w->errmsg);
	return ret;
}

/* Syncs the data, writes and syncs the index, publishes it. */
static int publish(struct ush_writer *w, struct disk *d)
{
	int ret = data_finish(w, d);
	if (ret)
		return ret;
	/* The last run's empty tail, when it ends the file, and O_DIRECT's
	 * preallocation past the end go; tails inside the file stay
	 * (data_bytes counts them). */
	if (d->last && d->last->end == d->off)
		d->off = d->last->off;
	if (ftruncate(d->fd, (off_t)d->off))
		return ushi_fail(-errno, "disk: truncate %s to %llu bytes",
				d->data, (unsigned long long)d->off);
	if (ushi_fdatasync(d->fd))
		return ushi_fail(-errno, "disk: fdatasync %s", d->data);
	uint8_t *img;
	size_t len;
	struct spill_header h = {
		.flags = d->direct ? USHI_INDEX_DIRECT : 0,
		.shuffle = w->o.shuffle,
		.map = w->o.map,
		.attempt = w->o.attempt,
		.partitions = w->o.partitions,
		.data_bytes = d->off,
	};
	if (spill_index_build(d->ents, d->entries, &h, &img, &len))
		return ushi_fail(-ENOMEM, "disk: index of %llu frames, %u "
				"partitions", (unsigned long long)d->entries,
				w->o.partitions);
	ret = ushi_pwrite_all(d->ifd, img, len, 0);
	if (ret)
		ret = ushi_fail(ret, "disk: write %s", d->itmp);
	ushi_free(img);
	if (ret)
		return ret;
	if (ushi_fdatasync(d->ifd))
		return ushi_fail(-errno, "disk: fdatasync %s", d->itmp);
	if (renameat2(AT_FDCWD, d->itmp, AT_FDCWD, d->index,
		      RENAME_NOREPLACE))
		return ushi_fail(errno == EEXIST ? USH_ECOMMITTED : -errno,
				"disk: rename %s to %s", d->itmp, d->index);
	d->published = true; /* the data is the index's from here on */
	ret = ushi_sync_dir(d->sdir, "disk");
	/* The shuffle directory may be new (this writer's mkdir or another
	 * one's): its entry must be durable too, or a crash loses it. */
	return ret ? ret : ushi_sync_dir(w->o.dir, "disk");
}

/*
 * Every failure is sticky: Linux reports a writeback error to one
 * fdatasync only, so a retried commit must not sync again and publish
 * data that never reached the disk.
 */
static int disk_commit(struct ush_writer *w)
{
	struct disk *d = w->sink_state;
	int ret = publish(w, d);
	if (ret) {
		writer_error_keep(w, ret);
		return ret;
	}
	disk_close(w, d);
	return 0;
}

static void disk_abort(struct ush_writer *w)
{
	struct disk *d = w->sink_state;
	if (!d)
		return;
	/* Never another writer's files, nor data a visible index names. */
	if (d->locked && !d->published) {
		unlink(d->data);
		unlink(d->itmp);
	}
	disk_close(w, d);
}

/* The lock goes with the parent's descriptor of the same open file. */
static void disk_release(struct ush_writer *w)
{
	if (w->sink_state)
		disk_close(w, w->sink_state);
}

const struct ushi_sink_ops ushi_sink_disk = {
	.name = "disk",
	.open = disk_open,
	.submit = disk_submit,
	.commit = disk_commit,
	.abort = disk_abort,
	.release = disk_release,
	.drain = disk_drain,
	.flush = disk_flush,
	.pack_room = disk_pack_room,
	.pack_add = disk_pack_add,
	.span_put = disk_span_put,
};
