/*
 * The commit table and its logs. Each thread appends the MAPPER_END and
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

int64_t wk_committed(struct ush_worker *wk, uint32_t shuffle, uint32_t map)
{
	for (size_t i = 0; i < wk->ncommits; i++)
		if (wk->commits[i].shuffle == shuffle &&
		    wk->commits[i].map == map)
			return wk->commits[i].attempt;
	return -1;
}

static void drop_shuffle(struct ush_worker *wk, uint32_t shuffle)
{
	size_t j = 0;
	for (size_t i = 0; i < wk->ncommits; i++) {
		if (wk->commits[i].shuffle == shuffle)
			ushi_free(wk->commits[i].e);
		else
			wk->commits[j++] = wk->commits[i];
	}
	wk->ncommits = j;
}

int wk_commit_apply(struct ush_worker *wk, const struct ushi_frame *f,
		    const uint8_t *payload)
{
	if (f->type == USHI_FRAME_DROP) {
		drop_shuffle(wk, f->shuffle);
		return 0;
	}
	if (wk_committed(wk, f->shuffle, f->map) >= 0)
		return 0; /* the first attempt to commit wins */
	if (wk->ncommits == wk->ccap) {
		size_t c = wk->ccap ? 2 * wk->ccap : 64;
		struct wk_commit *n = ushi_malloc(c * sizeof(*n));
		if (!n)
			return -ENOMEM;
		if (wk->ncommits)
			memcpy(n, wk->commits, wk->ncommits * sizeof(*n));
		ushi_free(wk->commits);
		wk->commits = n;
		wk->ccap = c;
	}
	struct wk_commit *c = &wk->commits[wk->ncommits];
	c->shuffle = f->shuffle;
	c->map = f->map;
	c->attempt = f->attempt;
	c->n = (uint32_t)f->seq;
	c->e = ushi_malloc((c->n ? c->n : 1) * sizeof(*c->e));
	if (!c->e)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->n; i++)
		proto_get_count(payload, i, &c->e[i]);
	wk->ncommits++;
	return 0;
}

void wk_commit_free(struct ush_worker *wk)
{
	for (size_t i = 0; i < wk->ncommits; i++)
		ushi_free(wk->commits[i].e);
	ushi_free(wk->commits);
	ushi_free(wk->drops);
	wk->commits = NULL;
	wk->ncommits = wk->ccap = 0;
}

static uint64_t batches_of(const struct wk_commit *c, uint32_t partition)
{
	uint32_t lo = 0, hi = c->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (c->e[mid].partition < partition)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < c->n && c->e[lo].partition == partition ?
		       c->e[lo].batches : 0;
}

static int by_map(const void *a, const void *b)
{
	const struct proto_manifest *x = a, *y = b;
	return x->map < y->map ? -1 : x->map > y->map;
}

int wk_manifest(struct ush_worker *wk, uint32_t shuffle, uint32_t partition,
		struct proto_manifest **out, uint32_t *n)
{
	pthread_mutex_lock(&wk->lock);
	size_t cnt = 0;
	for (size_t i = 0; i < wk->ncommits; i++)
		cnt += wk->commits[i].shuffle == shuffle;
	struct proto_manifest *m = NULL;
	if (cnt > USHI_PROTO_ENTRIES_MAX ||
	    !(m = ushi_malloc((cnt ? cnt : 1) * sizeof(*m)))) {
		pthread_mutex_unlock(&wk->lock);
		return cnt > USHI_PROTO_ENTRIES_MAX ? -E2BIG : -ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < wk->ncommits; i++) {
		const struct wk_commit *c = &wk->commits[i];
		if (c->shuffle != shuffle)
			continue;
		m[k].map = c->map;
		m[k].attempt = c->attempt;
		m[k].batches = batches_of(c, partition);
		k++;
	}
	pthread_mutex_unlock(&wk->lock);
	if (k)
		qsort(m, k, sizeof(*m), by_map);
	*out = m;
	*n = (uint32_t)k;
	return 0;
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
		if (proto_header(h, &f, wk->o.max_frame, false, &why) ||
		    (f.type != USHI_FRAME_MAPPER_END &&
		     f.type != USHI_FRAME_DROP) ||
		    proto_size(&f) > n - off - LSN_LEN || frame_check(h, &f) ||
		    (f.type == USHI_FRAME_MAPPER_END &&
		     proto_check_mapper_end(h + USH_FRAME_HDR_SIZE, &f)))
			break;
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
		ret = wk_commit_apply(wk, &f, h + USH_FRAME_HDR_SIZE);
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
		       "outputs committed", nrec, wk->ncommits);
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
