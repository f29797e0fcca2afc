/*
 * FETCH names the attempt of each map the reader was given. Each must be
 * committed here, or the answer is an ERROR (USH_ENOTCOMMITTED); then a
 * MANIFEST accepts, the frames of those attempts in every thread's file
 * of the partition follow exactly as stored, then FETCH_END. The stream
 * is produced a chunk at a time, only when the previous send has
 * completed, so a slow reader costs one chunk of memory.
 *
 * Files are opened beneath --dir without following links, one at a time
 * and only while streamed, and read with the format's bounds: frames
 * stored under a larger max_frame than today's are served.
 */
#define _GNU_SOURCE
#include "worker/wk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

void wk_fetch_free(struct wk_fetch *fe)
{
	if (!fe)
		return;
	if (fe->fd >= 0)
		close(fe->fd);
	for (unsigned i = 0; i < fe->nfiles; i++)
		ushi_free(fe->files[i]);
	ushi_free(fe->files);
	ushi_free(fe->m);
	ushi_free(fe);
}

/* A partition file, beneath --dir and regular: an fd or -errno, with
 * msg saying why not (a link, a FIFO, ...). */
static int open_file(struct ush_worker *wk, const char *name, char *msg,
		     size_t n)
{
	/* O_NONBLOCK: a FIFO in a file's place must not block the thread. */
	int fd = wk_open_beneath(wk, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC,
				 0);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st)) {
		close(fd);
		fd = -errno;
	} else if (fd >= 0 && !S_ISREG(st.st_mode)) {
		close(fd);
		fd = -EINVAL;
		snprintf(msg, n, "%s is not a regular file", name);
	}
	if (fd < 0 && !*msg)
		snprintf(msg, n, "%s: %s", name,
			 fd == -ELOOP ? "a symbolic link: not followed "
					"beneath the worker's --dir" :
			 fd == -EXDEV ? "outside the worker's --dir" :
					ush_strerror(fd));
	return fd;
}

/* The partition's files: thread N's for every N that may have one.
 * Each is opened once here, so that a refusal comes before MANIFEST. */
static int list_files(struct wk_thread *t, struct wk_fetch *fe, char *msg,
		      size_t n)
{
	unsigned nthr;
	int ret = wk_store_fetch_threads(t, fe->shuffle, &nthr);
	if (ret) {
		snprintf(msg, n, "s%u: %s", fe->shuffle,
			 ret == -ELOOP ? "a symbolic link: not followed "
					 "beneath the worker's --dir" :
					 ush_strerror(ret));
		return ret;
	}
	fe->files = ushi_calloc(nthr, sizeof(*fe->files));
	if (!fe->files)
		return -ENOMEM;
	for (unsigned i = 0; i < nthr; i++) {
		char name[64];
		snprintf(name, sizeof(name), "s%u/p%u.t%u.data", fe->shuffle,
			 fe->partition, i);
		int fd = open_file(t->wk, name, msg, n);
		if (fd == -ENOENT) {
			*msg = 0;
			continue;
		}
		if (fd < 0)
			return fd;
		close(fd);
		if (!(fe->files[fe->nfiles] = ushi_strdup(name)))
			return -ENOMEM;
		fe->nfiles++;
	}
	return 0;
}

/* Reads the FETCH's attempts (ascending maps), each committed here.
 * Returns 0, or an error with msg set. */
static int wants(struct ush_worker *wk, struct wk_fetch *fe,
		 const struct ushi_frame *f, const uint8_t *payload,
		 char *msg, size_t n)
{
	fe->nm = proto_wants(f);
	fe->m = ushi_malloc(fe->nm * sizeof(*fe->m));
	if (!fe->m)
		return -ENOMEM;
	int ret = 0;
	pthread_mutex_lock(&wk->lock);
	for (uint32_t i = 0; !ret && i < fe->nm; i++) {
		struct proto_want *w = &fe->m[i];
		proto_get_want(payload, i, w);
		struct wk_attempt *e = wk_attempt_find(wk, f->shuffle, w->map,
						       w->attempt);
		if (i && w->map <= fe->m[i - 1].map) {
			snprintf(msg, n, "FETCH maps not ascending at entry %u",
				 i);
			ret = USH_ECORRUPT;
		} else if (!e || e->state != WK_COMMITTED) {
			snprintf(msg, n, "shuffle %u map %u attempt %u is not "
				 "committed on this worker (%s)", f->shuffle,
				 w->map, w->attempt,
				 !e ? "never written here, or dropped" :
				 e->state == WK_OPEN ? "still being written" :
						       "its writer failed");
			ret = USH_ENOTCOMMITTED;
		}
	}
	pthread_mutex_unlock(&wk->lock);
	return ret;
}

int wk_fetch_start(struct wk_conn *c, const struct ushi_frame *f,
		   const uint8_t *payload)
{
	struct ush_worker *wk = c->t->wk;
	struct wk_fetch *fe = ushi_calloc(1, sizeof(*fe));
	if (!fe)
		return -ENOMEM;
	fe->fd = -1;
	fe->shuffle = f->shuffle;
	fe->partition = f->partition;
	fe->skip = get_le64(payload);
	char msg[256] = "";
	int ret = wants(wk, fe, f, payload, msg, sizeof(msg));
	if (!ret)
		ret = list_files(c->t, fe, msg, sizeof(msg));
	struct wk_out *o = ret ? NULL : wk_out_new(USHI_PROTO_SMALL);
	if (!ret && !o)
		ret = -ENOMEM;
	if (ret) {
		wk_fetch_free(fe);
		if (*msg) {
			wk_conn_fail(c, ret, "FETCH of partition %u: %s",
				     f->partition, msg);
			return 0;
		}
		return ret;
	}
	o->len = (uint32_t)proto_put_manifest(o->data, f->shuffle,
					      f->partition);
	wk_conn_queue(c, o);
	c->fetch = fe;
	wk_log(wk, 2, "peer %s: FETCH shuffle %u partition %u: %u attempts, "
	       "%u files", c->peer, f->shuffle, f->partition, fe->nm,
	       fe->nfiles);
	return 0;
}

static bool wanted(const struct wk_fetch *fe, const struct ushi_frame *f)
{
	uint32_t lo = 0, hi = fe->nm;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (fe->m[mid].map < f->map)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < fe->nm && fe->m[lo].map == f->map &&
	       fe->m[lo].attempt == f->attempt;
}

static int read_at(int fd, void *p, size_t n, uint64_t off)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = pread(fd, b, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : USH_ECORRUPT;
		b += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* The next committed frame's header into *f, or 0 at the end of all
 * files. Returns 1, 0 or an error. */
static int next_frame(struct ush_worker *wk, struct wk_fetch *fe,
		      struct ushi_frame *f)
{
	uint8_t h[USH_FRAME_HDR_SIZE];
	const char *why;
	for (;;) {
		if (fe->fd < 0) {
			char msg[1] = "";
			if (fe->fi == fe->nfiles)
				return 0;
			fe->fd = open_file(wk, fe->files[fe->fi++], msg, 0);
			if (fe->fd < 0)
				return fe->fd;
			fe->off = 0;
			/* Committed frames are all below the size now: the
			 * attempt table was read before the file opened. */
			struct stat st;
			if (fstat(fe->fd, &st))
				return -errno;
			fe->size = (uint64_t)st.st_size;
		}
		if (fe->size - fe->off < USH_FRAME_HDR_SIZE ||
		    read_at(fe->fd, h, sizeof(h), fe->off) ||
		    proto_header(h, f, USHI_FRAME_MAX, true, &why) ||
		    proto_size(f) > fe->size - fe->off) {
			/* The end of this file's complete frames. */
			close(fe->fd);
			fe->fd = -1;
			continue;
		}
		if (f->type == USHI_FRAME_DATA && wanted(fe, f))
			return 1;
		fe->off += proto_size(f);
	}
}

void wk_fetch_pump(struct wk_conn *c)
{
	struct ush_worker *wk = c->t->wk;
	struct wk_fetch *fe = c->fetch;
	struct wk_out *o = NULL;
	size_t cap = 0;
	int ret = 0;
	while (!fe->done) {
		struct ushi_frame f;
		ret = next_frame(wk, fe, &f);
		if (ret < 0)
			break;
		size_t n = ret ? proto_size(&f) : USHI_PROTO_SMALL;
		if (ret && fe->skip) {
			if (fe->skip < n) {
				ret = -EINVAL;
				break;
			}
			fe->skip -= n;
			fe->off += n;
			continue;
		}
		if (o && o->len + n > cap)
			break;
		if (!o) {
			cap = n > WK_FETCH_CHUNK ? n : WK_FETCH_CHUNK;
			o = wk_out_new(cap + USHI_PROTO_SMALL);
			if (!o) {
				ret = -ENOMEM;
				break;
			}
		}
		if (!ret) {
			o->len += (uint32_t)proto_put_fetch_end(
				o->data + o->len, fe->shuffle, fe->partition,
				fe->frames, fe->bytes);
			fe->done = true;
			break;
		}
		ret = read_at(fe->fd, o->data + o->len, n, fe->off);
		if (ret)
			break;
		o->len += (uint32_t)n;
		fe->off += n;
		fe->frames++;
		fe->bytes += n;
	}
	if (ret < 0) {
		ushi_free(o);
		wk_conn_fail(c, ret, "FETCH of shuffle %u partition %u: %s",
			     fe->shuffle, fe->partition,
			     ret == -EINVAL ? "offset inside a frame" :
			     ush_strerror(ret));
		return;
	}
	if (o)
		wk_conn_queue(c, o);
	if (fe->done) {
		wk_fetch_free(fe);
		c->fetch = NULL;
	}
}
