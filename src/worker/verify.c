/*
 * Replay's check of a commit record against its data (wal.c): a record
 * of the new commit order is synced while its data's syncs run, so a
 * crash may leave it durable with its data torn. Such a record names
 * what the worker had stored of the attempt (struct wk_sum: the thread's
 * log, the frames, their bytes and the sum of their CRC32C fields), and
 * the attempt counts as committed only if the log holds exactly that:
 * its index entries (read as the repair scan reads them) lead to frames
 * of the attempt whose own CRC32C checks, no damaged extent of it, and
 * the same count, bytes and sum. Anything else makes the commit one that
 * never happened: its writer was never acknowledged, and its driver runs
 * the map again.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/files.h"
#include "worker/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the files hold of the attempt. */
struct found {
	struct wk_sum sum;
	uint64_t bad_at;   /* the first frame that does not check, or ~0 */
	bool damaged;      /* a damaged extent of it */
};

/* Reads the frame of len bytes at off in lfd into *buf (grown) and
 * checks it is a DATA frame of r's attempt in the partition, whole. */
static bool frame_whole(int lfd, const struct wk_rec *r, uint32_t partition,
			uint64_t off, uint32_t len, uint8_t **buf,
			size_t *cap, uint32_t *crc)
{
	if (len < USH_FRAME_HDR_SIZE)
		return false;
	if (len > *cap) {
		uint8_t *b = ushi_malloc(len);
		if (!b)
			return false;
		ushi_free(*buf);
		*buf = b;
		*cap = len;
	}
	if (ushi_pread_all(lfd, *buf, len, off))
		return false;
	struct ushi_frame f;
	if (frame_decode(*buf, &f) || f.type != USHI_FRAME_DATA ||
	    f.shuffle != r->shuffle || f.map != r->map ||
	    f.attempt != r->attempt || f.partition != partition ||
	    proto_size(&f) != len || frame_check(*buf, &f))
		return false;
	*crc = f.crc;
	return true;
}

static int scan(const struct wk_rec *r, int ifd, int lfd, struct found *fd)
{
	struct stat is, ls;
	if (fstat(ifd, &is) || fstat(lfd, &ls))
		return -errno;
	struct wk_scan sc;
	int ret = wk_idx_scan(ifd, lfd, r->shuffle, (uint64_t)is.st_size,
			      (uint64_t)ls.st_size, &sc);
	if (ret)
		return ret;
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint64_t off = 0;
	for (uint64_t i = 0; i < sc.n; i++) {
		uint32_t len, part, map, att, crc;
		if (wk_idx_get(sc.ent + i * WK_IDX_ENTRY, off, &len, &part,
			       &map, &att))
			break;
		if (map == r->map && att == r->attempt && part == WK_IDX_BAD)
			fd->damaged = true;
		if (map == r->map && att == r->attempt && part < WK_IDX_BAD) {
			if (!frame_whole(lfd, r, part, off, len, &buf, &cap,
					 &crc)) {
				if (fd->bad_at == UINT64_MAX)
					fd->bad_at = off;
			} else {
				fd->sum.frames++;
				fd->sum.bytes += len;
				fd->sum.crcs += crc;
			}
		}
		off += len;
	}
	ushi_free(buf);
	ushi_free(sc.ent);
	return 0;
}

int wk_verify_commit(struct ush_worker *wk, const struct wk_rec *r)
{
	const struct wk_sum *want = &r->sum;
	char lpath[64], ipath[64];
	snprintf(lpath, sizeof(lpath), "s%u/t%u.log", r->shuffle, want->thread);
	snprintf(ipath, sizeof(ipath), "s%u/t%u.idx", r->shuffle, want->thread);
	struct found fd = {.bad_at = UINT64_MAX};
	struct wk_dir *d = wk_dir_with(wk, lpath);
	int ret = 0, ifd = -1, lfd = -1;
	if (d) {
		lfd = wk_open_beneath(d, lpath, O_RDONLY | O_CLOEXEC, 0);
		ifd = wk_open_beneath(d, ipath, O_RDONLY | O_CLOEXEC, 0);
		ret = lfd < 0 ? lfd : ifd < 0 ? ifd : 0;
		if (ret == -ENOENT)
			ret = 0; /* the index never made it: nothing found */
		else if (!ret)
			ret = scan(r, ifd, lfd, &fd);
	}
	if (lfd >= 0)
		close(lfd);
	if (ifd >= 0)
		close(ifd);
	bool whole = !ret && !fd.damaged && fd.bad_at == UINT64_MAX &&
		     fd.sum.frames == want->frames &&
		     fd.sum.bytes == want->bytes && fd.sum.crcs == want->crcs;
	if (whole)
		return 0;
	char why[160];
	if (ret)
		snprintf(why, sizeof(why), "reading it: %s", ush_strerror(ret));
	else if (fd.bad_at != UINT64_MAX)
		snprintf(why, sizeof(why), "a frame at offset %llu does not "
			 "check", (unsigned long long)fd.bad_at);
	else if (fd.damaged)
		snprintf(why, sizeof(why), "an extent of it is damaged");
	else
		snprintf(why, sizeof(why), "%llu of its %llu frames, %llu of "
			 "%llu bytes%s", (unsigned long long)fd.sum.frames,
			 (unsigned long long)want->frames,
			 (unsigned long long)fd.sum.bytes,
			 (unsigned long long)want->bytes,
			 fd.sum.frames == want->frames &&
			 fd.sum.bytes == want->bytes ? ", other CRCs" : "");
	wk_log(wk, 0, "commit of shuffle %u map %u attempt %u: its data in "
	       "%s/%s is not whole (%s): read as not committed (the worker "
	       "stopped before its data was synced; it was never "
	       "acknowledged)", r->shuffle, r->map, r->attempt,
	       d ? d->path : wk->dirlist, lpath, why);
	return ret ? ret : USH_ECORRUPT;
}
