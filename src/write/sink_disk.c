/*
 * The disk target: local spill of one map attempt. Frames go to the data
 * file with WRITE_FIXED at increasing offsets (O_DIRECT by default, each
 * frame padded to USHI_ALIGN); their index entries stream to a temporary
 * index. Commit syncs the data, closes the index with its trailer, syncs
 * it and renames it into place without replacing: the rename publishes
 * the attempt atomically.
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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define ICHUNK_ENTRIES (USHI_ALIGN / USHI_INDEX_ENTRY)

int (*ushi_fdatasync)(int fd) = fdatasync;

struct disk {
	char data[PATH_MAX], itmp[PATH_MAX], index[PATH_MAX], sdir[PATH_MAX];
	int fd, ifd, slot;
	bool direct, locked, published;
	uint64_t off;      /* next data offset */
	uint64_t ioff;     /* bytes of index written */
	uint64_t entries;
	uint32_t icrc;     /* running CRC of the entries written */
	unsigned ichunk_n; /* entries in ichunk */
	uint8_t *copy;     /* psync: the private copy of each frame */
	size_t copy_cap;
	bool prealloc;      /* O_DIRECT and the file system can fallocate */
	uint64_t alloc_end; /* bytes preallocated */
	uint8_t ichunk[USHI_ALIGN];
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

static int disk_open(struct ush_writer *w)
{
	struct disk *d = ushi_calloc(1, sizeof(*d));
	if (!d)
		return ushi_fail(-ENOMEM, "disk: allocation");
	d->fd = d->ifd = d->slot = -1;
	d->icrc = 0xffffffffu;
	const struct ush_writer_opts *o = &w->o;
	spill_dir(d->sdir, sizeof(d->sdir), o->dir, o->shuffle);
	spill_data(d->data, sizeof(d->data), o->dir, o->shuffle, o->map,
		   o->attempt);
	spill_index(d->index, sizeof(d->index), o->dir, o->shuffle, o->map,
		    o->attempt);
	snprintf(d->itmp, sizeof(d->itmp), "%.*s.index.tmp",
		 (int)(strlen(d->data) - 5), d->data);
	w->sink_state = d;
	int ret = 0;
	if (committed(w, d))
		ret = USH_ECOMMITTED;
	else if (mkdir(o->dir, 0755) && errno != EEXIST)
		ret = ushi_fail(-errno, "disk: mkdir %s", o->dir);
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
	ushi_free(d->copy);
	ushi_free(d);
	w->sink_state = NULL;
}

static int pwrite_all(int fd, const void *p, size_t n, uint64_t off,
		      const char *path)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t r = pwrite(fd, b, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return ushi_fail(r < 0 ? -errno : -EIO,
					"disk: write %s offset %llu", path,
					(unsigned long long)off);
		b += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* The index is small (16 bytes per frame) and buffered by the page
 * cache: a plain pwrite per 256 entries costs less than a ring op. */
static int flush_index(struct disk *d)
{
	size_t n = d->ichunk_n * USHI_INDEX_ENTRY;
	int ret = pwrite_all(d->ifd, d->ichunk, n, d->ioff, d->itmp);
	if (ret)
		return ret;
	d->icrc = spill_crc(d->icrc, d->ichunk, n);
	d->ioff += n;
	d->ichunk_n = 0;
	return 0;
}

static void disk_done(struct ushi_op *op, int res)
{
	struct ush_writer *w = op->owner;
	struct disk *d = w->sink_state;
	if (res < 0)
		writer_error(w, res, "disk: write %s offset %llu (%u bytes)",
			     d->data, (unsigned long long)op->io.off,
			     op->io.len);
	writer_frame_done(w, op->io.buf, op->io.addr, op->io.t0);
}

/* The baseline engine, like fio's psync: a private copy of each frame,
 * then a blocking pwrite; no ring, no registered buffers. */
static int psync_write(struct ush_writer *w, struct disk *d,
		       struct ushi_buf *b, uint8_t *mem, uint32_t len)
{
	const uint8_t *src = b ? b->data : mem;
	uint64_t t0 = ushi_now_ns();
	if (len <= d->copy_cap) {
		memcpy(d->copy, src, len);
		src = d->copy;
	}
	int ret = pwrite_all(d->fd, src, len, d->off, d->data);
	writer_frame_done(w, b, mem, t0);
	if (ret)
		return ret;
	d->off += len;
	writer_stored(w, len);
	return 0;
}

/*
 * O_DIRECT writes that extend a file are serialised (ext4 punts them to
 * io_uring's workers, one at a time under the inode lock): preallocate
 * ahead of the write offset so writes land inside the file, and trim to
 * the bytes written at commit. A file system without fallocate just
 * appends.
 */
#define USHI_PREALLOC (64ull << 20)

static void prealloc(struct disk *d, uint32_t len)
{
	while (d->prealloc && d->off + len > d->alloc_end) {
		if (fallocate(d->fd, 0, (off_t)d->alloc_end, USHI_PREALLOC)) {
			d->prealloc = false;
			return;
		}
		d->alloc_end += USHI_PREALLOC;
	}
}

static int disk_submit(struct ush_writer *w, struct ushi_buf *b, uint8_t *mem,
		       uint32_t flen, uint32_t partition)
{
	struct disk *d = w->sink_state;
	uint8_t *p = b ? b->data : mem;
	uint32_t len = d->direct ? ALIGN_UP(flen, USHI_ALIGN) : flen;
	prealloc(d, len);
	struct ushi_op *op = NULL;
	int ret = d->ichunk_n == ICHUNK_ENTRIES ? flush_index(d) : 0;
	if (!ret && !d->copy)
		ret = ring_op_get(w->ring, &op);
	if (ret) {
		writer_frame_done(w, b, mem, 0);
		return ret;
	}
	/* Pool buffers and heap frames are allocated in USHI_ALIGN units,
	 * so the padding fits; zero it rather than leak old bytes. */
	memset(p + flen, 0, len - flen);
	struct spill_entry e = {d->off, flen, partition};
	spill_entry_put(d->ichunk + d->ichunk_n++ * USHI_INDEX_ENTRY, &e);
	d->entries++;
	if (d->copy)
		return psync_write(w, d, b, mem, len);
	op->cb = disk_done;
	op->owner = w;
	ring_write_at(w->ring, op, b, p, d->off, len, d->fd, d->slot);
	d->off += len;
	writer_stored(w, len);
	return 0;
}

static int sync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return ushi_fail(-errno, "disk: open %s", path);
	int ret = fsync(fd) ? ushi_fail(-errno, "disk: fsync %s", path) : 0;
	close(fd);
	return ret;
}

/* Syncs the data, writes and syncs the index, publishes it. */
static int publish(struct ush_writer *w, struct disk *d)
{
	if (d->alloc_end && ftruncate(d->fd, (off_t)d->off))
		return ushi_fail(-errno, "disk: truncate %s to %llu bytes",
				d->data, (unsigned long long)d->off);
	if (ushi_fdatasync(d->fd))
		return ushi_fail(-errno, "disk: fdatasync %s", d->data);
	int ret = flush_index(d);
	if (ret)
		return ret;
	uint8_t tr[USHI_INDEX_TRAILER];
	struct spill_trailer t = {
		.flags = d->direct ? USHI_INDEX_PADDED : 0,
		.shuffle = w->o.shuffle,
		.map = w->o.map,
		.attempt = w->o.attempt,
		.partitions = w->o.partitions,
		.entries = d->entries,
		.data_bytes = d->off,
	};
	spill_trailer_put(tr, &t, d->icrc);
	ret = pwrite_all(d->ifd, tr, sizeof(tr), d->ioff, d->itmp);
	if (ret)
		return ret;
	if (ushi_fdatasync(d->ifd))
		return ushi_fail(-errno, "disk: fdatasync %s", d->itmp);
	if (renameat2(AT_FDCWD, d->itmp, AT_FDCWD, d->index,
		      RENAME_NOREPLACE))
		return ushi_fail(errno == EEXIST ? USH_ECOMMITTED : -errno,
				"disk: rename %s to %s", d->itmp, d->index);
	d->published = true; /* the data is the index's from here on */
	ret = sync_dir(d->sdir);
	/* The shuffle directory may be new (this writer's mkdir or another
	 * one's): its entry must be durable too, or a crash loses it. */
	return ret ? ret : sync_dir(w->o.dir);
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

const struct ushi_sink_ops ushi_sink_disk = {
	.name = "disk",
	.open = disk_open,
	.submit = disk_submit,
	.commit = disk_commit,
	.abort = disk_abort,
};
