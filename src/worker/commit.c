/*
 * The attempt table and the commit logs. The table holds every attempt a
 * writer opened (until its shuffle is dropped): open, abandoned (its
 * writer left without a commit) or committed. Only commits and drops
 * are durable: each thread appends the MAPPER_END and
 * DROP frames it accepts, exactly as received (so their CRC still
 * covers them), to its own log "<dir>/commit.t<N>.log", each preceded by
 * an 8-byte log sequence number shared by all threads, and syncs before
 * it acknowledges. Replay merges the logs in sequence order; a torn tail
 * (a crash mid-append, never acknowledged) is cut off.
 */
#define _GNU_SOURCE
#include "worker/wk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define LSN_LEN 8u

static atomic_uint_fast64_t next_lsn = 1;

static size_t slot_of(const struct ush_worker *wk, uint32_t shuffle,
		      uint32_t map, uint32_t attempt)
{
	uint64_t k = ((uint64_t)shuffle << 32 | map) * 0x9e3779b97f4a7c15ull;
	k ^= (attempt + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
	return (size_t)(k ^ k >> 29) & (wk->acap - 1);
}

struct wk_attempt *wk_attempt_find(struct ush_worker *wk, uint32_t shuffle,
				   uint32_t map, uint32_t attempt)
{
	if (!wk->acap)
		return NULL;
	for (size_t i = slot_of(wk, shuffle, map, attempt);;
	     i = (i + 1) & (wk->acap - 1)) {
		struct wk_attempt *e = &wk->att[i];
		if (!e->state)
			return NULL;
		if (e->shuffle == shuffle && e->map == map &&
		    e->attempt == attempt)
			return e;
	}
}

/* Places e in a table with room (no duplicate there). */
static void place(struct ush_worker *wk, const struct wk_attempt *e)
{
	size_t i = slot_of(wk, e->shuffle, e->map, e->attempt);
	while (wk->att[i].state)
		i = (i + 1) & (wk->acap - 1);
	wk->att[i] = *e;
	wk->natt++;
}

/* Rebuilds the table with cap slots, leaving out shuffle `drop` (-1:
 * none). */
static int rebuild(struct ush_worker *wk, size_t cap, int64_t drop)
{
	struct wk_attempt *old = wk->att;
	size_t ocap = wk->acap;
	struct wk_attempt *t = ushi_calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	wk->att = t;
	wk->acap = cap;
	wk->natt = 0;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].state && (int64_t)old[i].shuffle != drop)
			place(wk, &old[i]);
	ushi_free(old);
	return 0;
}

int wk_attempt_set(struct ush_worker *wk, uint32_t shuffle, uint32_t map,
		   uint32_t attempt, enum wk_attempt_state state)
{
	struct wk_attempt *e = wk_attempt_find(wk, shuffle, map, attempt);
	if (e) {
		e->state = (uint8_t)state;
		return 0;
	}
	/* At most half full: probes stay short. */
	if (2 * (wk->natt + 1) > wk->acap) {
		int ret = rebuild(wk, wk->acap ? 2 * wk->acap : 1024, -1);
		if (ret)
			return ret;
	}
	place(wk, &(struct wk_attempt){shuffle, map, attempt, (uint8_t)state,
				       0});
	return 0;
}

int wk_commit_apply(struct ush_worker *wk, const struct ushi_frame *f)
{
	if (f->type == USHI_FRAME_DROP)
		return wk->acap ? rebuild(wk, wk->acap, f->shuffle) : 0;
	return wk_attempt_set(wk, f->shuffle, f->map, f->attempt,
			      WK_COMMITTED);
}

void wk_commit_free(struct ush_worker *wk)
{
	ushi_free(wk->att);
	ushi_free(wk->drops);
	wk->att = NULL;
	wk->natt = wk->acap = 0;
}

struct rec {
	uint64_t lsn;
	size_t off; /* of the frame in its file's buffer */
	uint8_t *buf;
};

static int by_lsn(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;
	return x->lsn < y->lsn ? -1 : x->lsn > y->lsn;
}

static int read_file(const char *path, uint8_t **out, size_t *n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int ret = fstat(fd, &st) ? -errno : 0;
	uint8_t *b = ret ? NULL : ushi_malloc((size_t)st.st_size + 1);
	if (!ret && !b)
		ret = -ENOMEM;
	size_t got = 0;
	while (!ret && got < (size_t)st.st_size) {
		ssize_t r = pread(fd, b + got, (size_t)st.st_size - got,
				  (off_t)got);
		if (r <= 0)
			ret = r < 0 ? -errno : -EIO;
		else
			got += (size_t)r;
	}
	close(fd);
	if (ret) {
		ushi_free(b);
		return ret;
	}
	*out = b;
	*n = got;
	return 0;
}

/* Scans one log into recs; cuts a torn tail. */
static int scan_log(struct ush_worker *wk, const char *path, uint8_t *b,
		    size_t n, struct rec **recs, size_t *nrec, size_t *cap)
{
	size_t off = 0;
	while (n - off >= LSN_LEN + USH_FRAME_HDR_SIZE) {
		struct ushi_frame f;
		const char *why;
		const uint8_t *h = b + off + LSN_LEN;
		/* Incomplete or failing its CRC: the torn tail. */
		if (frame_parse(h, &f) ||
		    f.payload_len > n - off - LSN_LEN - USH_FRAME_HDR_SIZE ||
		    frame_check(h, &f))
			break;
		/* Whole and intact, yet not a record this version writes:
		 * never cut it, refuse to start. */
		if (proto_header(h, &f, wk->o.max_frame, false, &why) ||
		    (f.type != USHI_FRAME_MAPPER_END &&
		     f.type != USHI_FRAME_DROP))
			return ushi_fail(USH_EVERSION, "worker: %s offset %zu: "
					"not a commit record of protocol "
					"version %u (%s): written by another "
					"ushuffled version?", path, off,
					USHI_PROTO_VERSION,
					proto_header(h, &f, wk->o.max_frame,
						     false, &why) ? why :
								   "its type");
		if (*nrec == *cap) {
			size_t c = *cap ? 2 * *cap : 256;
			struct rec *r = ushi_malloc(c * sizeof(*r));
			if (!r)
				return -ENOMEM;
			if (*nrec)
				memcpy(r, *recs, *nrec * sizeof(*r));
			ushi_free(*recs);
			*recs = r;
			*cap = c;
		}
		(*recs)[(*nrec)++] = (struct rec){get_le64(b + off), off, b};
		off += LSN_LEN + proto_size(&f);
	}
	if (off < n) {
		wk_log(wk, 0, "%s: cutting %zu bytes of torn tail at offset "
		       "%zu (never acknowledged)", path, n - off, off);
		if (truncate(path, (off_t)off))
			return -errno;
	}
	return 0;
}

int wk_commit_replay(struct ush_worker *wk)
{
	DIR *d = opendir(wk->dir);
	if (!d)
		return ushi_fail(-errno, "worker: opendir %s", wk->dir);
	uint8_t **bufs = NULL;
	size_t nbufs = 0, nrec = 0, cap = 0;
	struct rec *recs = NULL;
	int ret = 0;
	struct dirent *de;
	while (!ret && (de = readdir(d))) {
		unsigned t;
		char tail;
		if (sscanf(de->d_name, "commit.t%u.lo%c", &t, &tail) != 2 ||
		    tail != 'g')
			continue;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", wk->dir, de->d_name);
		uint8_t *b = NULL;
		size_t n = 0;
		uint8_t **nb = ushi_malloc((nbufs + 1) * sizeof(*nb));
		if (!nb) {
			ret = -ENOMEM;
			break;
		}
		if (nbufs)
			memcpy(nb, bufs, nbufs * sizeof(*nb));
		ushi_free(bufs);
		bufs = nb;
		ret = read_file(path, &b, &n);
		if (ret) {
			ushi_fail(ret, "worker: read %s", path);
			break;
		}
		bufs[nbufs++] = b;
		ret = scan_log(wk, path, b, n, &recs, &nrec, &cap);
	}
	closedir(d);
	if (nrec)
		qsort(recs, nrec, sizeof(*recs), by_lsn);
	uint64_t last = 0;
	for (size_t i = 0; !ret && i < nrec; i++) {
		struct ushi_frame f;
		const uint8_t *h = recs[i].buf + recs[i].off + LSN_LEN;
		frame_parse(h, &f);
		ret = wk_commit_apply(wk, &f);
		last = recs[i].lsn;
	}
	/* next_lsn is shared by every worker of the process: moving it
	 * back would let a later record of another worker sort before its
	 * earlier ones at replay (a DROP before the commits it undid). */
	uint_fast64_t cur = atomic_load(&next_lsn);
	while (cur < last + 1 &&
	       !atomic_compare_exchange_weak(&next_lsn, &cur, last + 1))
		;
	if (nrec)
		wk_log(wk, 1, "replayed %zu commit log records: %zu map "
		       "attempts committed", nrec, wk->natt);
	for (size_t i = 0; i < nbufs; i++)
		ushi_free(bufs[i]);
	ushi_free(bufs);
	ushi_free(recs);
	return ret < 0 && ret > -4000 ? ushi_fail(ret, "worker: commit log "
						 "replay") : ret;
}

int wk_log_open(struct wk_thread *t)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/commit.t%u.log", t->wk->dir, t->idx);
	t->log_fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (t->log_fd < 0)
		return ushi_fail(-errno, "worker: open %s", path);
	struct stat st;
	if (fstat(t->log_fd, &st))
		return ushi_fail(-errno, "worker: stat %s", path);
	t->log_off = (uint64_t)st.st_size;
	t->dir_unsynced = true;
	return 0;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t r = pwrite(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int wk_log_append(struct wk_thread *t, const uint8_t *frame, size_t n)
{
	uint8_t lsn[LSN_LEN];
	put_le64(lsn, atomic_fetch_add(&next_lsn, 1));
	int ret = pwrite_all(t->log_fd, lsn, LSN_LEN, t->log_off);
	if (!ret)
		ret = pwrite_all(t->log_fd, frame, n, t->log_off + LSN_LEN);
	if (!ret && fdatasync(t->log_fd))
		ret = -errno;
	if (!ret)
		t->log_off += LSN_LEN + n;
	return ret;
}
