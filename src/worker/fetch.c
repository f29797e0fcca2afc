/*
 * FETCH names the attempt of each map the reader was given. Each must be
 * committed here, or the answer is an ERROR (USH_ENOTCOMMITTED); then a
 * MANIFEST accepts, the frames of those attempts in every thread's log
 * follow exactly as stored (thread by thread, in log order within one:
 * so each map's frames come in the order its writer sent them), then
 * FETCH_END.
 *
 * Opening a partition is a lookup: a (shuffle, thread)'s index is read
 * once into a partition directory (its entries counting-sorted by
 * partition, log order kept within one), cached per thread within
 * wk->pdir_budget (least recently used out) and rebuilt when the index
 * has grown since. The stream's frames are read through the thread's
 * ring (READ_FIXED into pool buffers, adjacent frames of a log in one
 * read, WK_FETCH_READS reads and WK_FETCH_RUNS flush buffers' worth in
 * flight) and sent from those buffers; a slow reader holds at most those.
 * Small frames are read a window at a time, as runs of their log, and
 * sent in stream order from the runs' memory (fetch.h,
 * WK_FETCH_WIN_FRAMES).
 *
 * Files are opened beneath --dir without following links, and each log
 * is checked before MANIFEST so that a refusal comes first.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"
#include "worker/attempt.h"
#include "worker/fetch.h"
#include "worker/files.h"
#include "worker/out.h"
#include "worker/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define PDIR_MAX 1024 /* directories cached per thread */

/* One read of the n bytes still wanted (an armed read's length is 32
 * bits). */
static uint32_t read_len(uint64_t n)
{
	return n < (1u << 30) ? (uint32_t)n : 1u << 30;
}

/* A log or index file, beneath --dir and regular: an fd (*st its stat,
 * *dir the directory holding it) or -errno, with msg saying why not (a
 * link, a FIFO, ...). A FETCH opens a few per thread: with one --dir,
 * the open itself says whether the file is there. */
static int open_file(struct ush_worker *wk, const char *name, char *msg,
		     size_t n, struct stat *st, struct wk_dir **dir)
{
	/* O_NONBLOCK: a FIFO in a file's place must not block the thread. */
	struct wk_dir *d = wk->ndirs == 1 ? &wk->dirs[0] :
					    wk_dir_with(wk, name);
	int fd = d ? wk_open_beneath(d, name, O_RDONLY | O_NONBLOCK |
				     O_CLOEXEC, 0) : -ENOENT;
	*dir = d;
	if (fd >= 0 && fstat(fd, st)) {
		close(fd);
		fd = -errno;
	} else if (fd >= 0 && !S_ISREG(st->st_mode)) {
		close(fd);
		fd = -EINVAL;
		snprintf(msg, n, "%s/%s is not a regular file", d->path, name);
	}
	if (fd < 0 && !*msg)
		snprintf(msg, n, "%s/%s: %s", d ? d->path : wk->dirlist, name,
			 fd == -ELOOP ? "a symbolic link: not followed "
					"beneath the worker's --dir" :
			 fd == -EXDEV ? "outside the worker's --dir" :
					ush_strerror(fd));
	return fd;
}

/* Whether the range [first, first + count) is one a shuffle can have:
 * 0, or -EINVAL with msg saying why not. */
static int range_ok(uint32_t first, uint32_t count, uint32_t zero, char *msg,
		    size_t n)
{
	if (zero)
		snprintf(msg, n, "FETCH: bytes 12..15 are not zero");
	else if (!count)
		snprintf(msg, n, "FETCH of no partition (count 0)");
	else if ((uint64_t)first + count > USHI_PARTS_MAX)
		snprintf(msg, n, "FETCH of partitions %u..%llu: beyond the %u "
			 "partitions a shuffle may have", first,
			 (unsigned long long)first + count - 1,
			 USHI_PARTS_MAX);
	else
		return 0;
	return -EINVAL;
}

/* Entry i (w), after entry i - 1 (pw, or NULL): within the range, in
 * order. 0, or an error with msg set. */
static int entry_ok(const struct wk_fetch *fe, uint32_t i,
		    const struct proto_want *w, const struct proto_want *pw,
		    char *msg, size_t n)
{
	if (w->partition - fe->partition >= fe->count) {
		snprintf(msg, n, "FETCH entry %u names partition %u, outside "
			 "its range %u..%u", i, w->partition, fe->partition,
			 fe->partition + fe->count - 1);
		return -EINVAL;
	}
	if (pw && (w->partition < pw->partition ||
		   (w->partition == pw->partition && w->map <= pw->map))) {
		snprintf(msg, n, "FETCH entries not ascending (partition, "
			 "map) at entry %u", i);
		return USH_ECORRUPT;
	}
	return 0;
}

/* Counts n more bytes of fe's plan against its application's
 * --max-app-fetch-bytes: 0, or -EDQUOT with msg saying so. */
static int charge(struct wk_fetch *fe, uint64_t n, char *msg, size_t len)
{
	uint64_t max = fe->t->wk->o.max_app_fetch_bytes;
	if (!fe->app) /* its connection left */
		return -ECONNABORTED;
	uint64_t had = atomic_fetch_add(&fe->app->fetch_bytes, n);
	if (had + n <= max) {
		fe->charged += n;
		return 0;
	}
	atomic_fetch_sub(&fe->app->fetch_bytes, n);
	snprintf(msg, len, "application '%s' has FETCHes of %llu bytes "
		 "planned here, its quota is %llu (--max-app-fetch-bytes): "
		 "this one needs %llu more; read fewer partitions at once",
		 fe->app_id, (unsigned long long)had,
		 (unsigned long long)max, (unsigned long long)n);
	return -EDQUOT;
}

/* Gives n bytes of fe's plan back (memory it freed). */
static void uncharge(struct wk_fetch *fe, uint64_t n)
{
	if (fe->app)
		atomic_fetch_sub(&fe->app->fetch_bytes, n);
	fe->charged -= n;
}

/* n more (or, negative, fewer) bytes read ahead by fe's stream. */
static void queued(struct wk_fetch *fe, int64_t n)
{
	fe->rbytes += (uint64_t)n;
	if (fe->app)
		atomic_fetch_add(&fe->app->fetch_queued, (uint64_t)n);
}

void wk_fetch_unbill(struct wk_fetch *fe)
{
	if (!fe || !fe->app)
		return;
	atomic_fetch_sub(&fe->app->fetch_bytes, fe->charged);
	atomic_fetch_sub(&fe->app->fetch_queued, fe->rbytes);
	fe->app = NULL;
}

/* Reads the FETCH's range and entries (ascending (partition, map)), each
 * attempt committed here. Returns 0, or an error with msg set. */
static int wants(struct ush_worker *wk, struct wk_fetch *fe,
		 const struct ushi_frame *f, const uint8_t *payload,
		 char *msg, size_t n)
{
	fe->count = get_le32(payload + 8);
	int ret = range_ok(f->partition, fe->count, get_le32(payload + 12),
			   msg, n);
	if (ret)
		return ret;
	fe->nm = proto_wants(f);
	ret = charge(fe, (uint64_t)fe->nm * sizeof(*fe->m), msg, n);
	if (ret)
		return ret;
	fe->m = ushi_malloc(fe->nm * sizeof(*fe->m));
	if (!fe->m)
		return -ENOMEM;
	const struct proto_want *ok = NULL; /* the last attempt found */
	pthread_mutex_lock(&wk->lock);
	for (uint32_t i = 0; !ret && i < fe->nm; i++) {
		struct proto_want *w = &fe->m[i];
		if (proto_get_want(payload, i, w)) {
			snprintf(msg, n, "FETCH entry %u: bytes 12..15 are not "
				 "zero", i);
			ret = -EINVAL;
			break;
		}
		if ((ret = entry_ok(fe, i, w, i ? w - 1 : NULL, msg, n)))
			break;
		/* A range names each map once per partition: the attempt
		 * found for the entry before is most often this one. */
		if (ok && ok->map == w->map && ok->attempt == w->attempt)
			continue;
		struct wk_attempt *e = wk_attempt_find(wk, f->shuffle, w->map,
						       w->attempt);
		if (!e || e->state != WK_COMMITTED) {
			snprintf(msg, n, "shuffle %u map %u attempt %u is not "
				 "committed on this worker (%s)", f->shuffle,
				 w->map, w->attempt,
				 !e ? "never written here, or dropped" :
				 e->state == WK_OPEN ? "still being written" :
						       "its writer failed");
			ret = USH_ENOTCOMMITTED;
		}
		ok = w;
	}
	pthread_mutex_unlock(&wk->lock);
	return ret;
}

/* The entry of (map, attempt) among the entries [lo, hi) of one
 * partition, or NULL when not asked for. */
static struct proto_want *wanted(struct wk_fetch *fe, uint32_t lo,
				 uint32_t hi, uint32_t map, uint32_t attempt)
{
	size_t i = lo + ushi_lower_bound(fe->m + lo, hi - lo, sizeof(*fe->m),
					 offsetof(struct proto_want, map), map);
	return i < hi && fe->m[i].map == map && fe->m[i].attempt == attempt ?
		       &fe->m[i] : NULL;
}

/* Whether an entry asks for (map, attempt), in any partition. */
static bool asks(const struct wk_fetch *fe, uint32_t map, uint32_t attempt)
{
	for (uint32_t i = 0; i < fe->nm; i++)
		if (fe->m[i].map == map && fe->m[i].attempt == attempt)
			return true;
	return false;
}

/* ------------------------------------------------ partition directories */

static void pdir_free(struct wk_thread *t, struct wk_pdir *d)
{
	wk_list_del(&t->pdirs, &d->lru);
	t->pdir_bytes -= d->bytes;
	ushi_free(d->ent);
	ushi_free(d->start);
	ushi_free(d->bad);
	ushi_free(d);
}

void wk_pdir_drop(struct wk_thread *t, uint32_t shuffle)
{
	for (struct wk_link *l = t->pdirs.head, *nx; l; l = nx) {
		nx = l->next;
		struct wk_pdir *d = WK_OF(l, struct wk_pdir, lru);
		if (d->shuffle == shuffle)
			pdir_free(t, d);
	}
}

void wk_pdir_close(struct wk_thread *t)
{
	while (t->pdirs.head)
		pdir_free(t, WK_OF(t->pdirs.head, struct wk_pdir, lru));
}

static int cmp_pent(const void *a, const void *b)
{
	const struct wk_pent *x = a, *y = b;
	if (x->partition != y->partition)
		return x->partition < y->partition ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Sorts d->ent by partition, log order kept: a counting sort with a
 * start array where partitions are dense enough, else a sort by
 * (partition, offset) and binary search. */
static int pdir_sort(struct wk_pdir *d, uint32_t maxp)
{
	uint64_t n = d->nent;
	if (!n)
		return 0;
	if ((uint64_t)maxp > 4 * n + 65536) {
		qsort(d->ent, n, sizeof(*d->ent), cmp_pent);
		return 0;
	}
	d->nparts = maxp + 1;
	d->start = ushi_calloc((size_t)d->nparts + 1, sizeof(*d->start));
	uint32_t *pos = ushi_malloc(((size_t)d->nparts + 1) * sizeof(*pos));
	struct wk_pent *out = ushi_malloc(n * sizeof(*out));
	if (!d->start || !pos || !out) {
		ushi_free(pos);
		ushi_free(out);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++)
		d->start[d->ent[i].partition + 1]++;
	for (uint32_t p = 0; p < d->nparts; p++)
		d->start[p + 1] += d->start[p];
	memcpy(pos, d->start, ((size_t)d->nparts + 1) * sizeof(*pos));
	for (uint64_t i = 0; i < n; i++)
		out[pos[d->ent[i].partition]++] = d->ent[i];
	ushi_free(pos);
	ushi_free(d->ent);
	d->ent = out;
	return 0;
}

/* Builds a directory from the got bytes idx (taken) read of an index of
 * size bytes (of log lfd, lsize bytes): the entries the repair scan reads
 * (torn or being written: the rest), damaged extents apart. */
static int pdir_build(struct wk_pdir *d, uint8_t *idx, uint64_t got, int lfd,
		      uint64_t size, uint64_t lsize)
{
	struct wk_scan sc;
	wk_idx_parse(idx, got, lfd, d->shuffle, lsize, &sc);
	uint64_t cnt = sc.n < UINT32_MAX ? sc.n : UINT32_MAX;
	d->ent = cnt ? ushi_malloc(cnt * sizeof(*d->ent)) : NULL;
	if (cnt && !d->ent) {
		ushi_free(sc.ent);
		return -ENOMEM;
	}
	uint64_t end = 0;
	uint32_t maxp = 0, n = 0;
	size_t bcap = 0;
	for (uint64_t i = 0; i < cnt; i++) {
		struct wk_pent *e = &d->ent[n];
		e->off = end;
		wk_idx_get(sc.ent + i * WK_IDX_ENTRY, end, &e->len,
			   &e->partition, &e->map, &e->attempt);
		end = e->off + e->len;
		if (e->partition == WK_IDX_BAD) {
			struct wk_pent *b = d->nbad < bcap ? d->bad :
				ushi_array_grow(d->bad, &bcap, sizeof(*b));
			if (!b) {
				ushi_free(sc.ent);
				return -ENOMEM;
			}
			d->bad = b;
			d->bad[d->nbad++] = *e;
		}
		if (e->partition >= WK_IDX_BAD)
			continue;
		maxp = e->partition > maxp ? e->partition : maxp;
		n++;
	}
	ushi_free(sc.ent);
	d->nent = n;
	d->idx_size = size;
	int ret = pdir_sort(d, maxp);
	d->bytes = sizeof(*d) + (size_t)(n + d->nbad) * sizeof(*d->ent) +
		   (d->start ? ((size_t)d->nparts + 1) * sizeof(*d->start) : 0);
	return ret;
}

/* The cached directory of (shuffle, thread) for an index of size bytes,
 * or NULL (one of an index that grew since is freed). */
static struct wk_pdir *pdir_find(struct wk_thread *t, uint32_t shuffle,
				 uint32_t thread, uint64_t size)
{
	for (struct wk_link *l = t->pdirs.head, *nx; l; l = nx) {
		nx = l->next;
		struct wk_pdir *d = WK_OF(l, struct wk_pdir, lru);
		if (d->shuffle != shuffle || d->thread != thread)
			continue;
		if (d->idx_size == size) {
			wk_list_del(&t->pdirs, &d->lru);
			wk_list_add(&t->pdirs, &d->lru);
			return d;
		}
		pdir_free(t, d); /* the index grew: rebuilt */
	}
	return NULL;
}

/* The directory of (shuffle, thread) built from the got bytes b (taken)
 * of its index, size bytes, and cached (others evicted to keep the
 * budget). Returns NULL when out of memory. */
static struct wk_pdir *pdir_add(struct wk_thread *t, uint32_t shuffle,
				uint32_t thread, uint8_t *b, uint64_t got,
				uint64_t size, int lfd, uint64_t lsize)
{
	unsigned n = 0;
	for (struct wk_link *l = t->pdirs.head; l; l = l->next)
		n++;
	struct wk_pdir *d = ushi_calloc(1, sizeof(*d));
	if (!d) {
		ushi_free(b);
		return NULL;
	}
	d->shuffle = shuffle;
	d->thread = thread;
	if (pdir_build(d, b, got, lfd, size, lsize)) {
		ushi_free(d->ent);
		ushi_free(d->start);
		ushi_free(d->bad);
		ushi_free(d);
		return NULL;
	}
	while (t->pdirs.head && (n >= PDIR_MAX ||
				 t->pdir_bytes + d->bytes > t->wk->pdir_budget)) {
		pdir_free(t, WK_OF(t->pdirs.head, struct wk_pdir, lru));
		n--;
	}
	wk_list_add(&t->pdirs, &d->lru);
	t->pdir_bytes += d->bytes;
	return d;
}

/* The entries of partition p in d: [*lo, *hi). */
static void pdir_range(const struct wk_pdir *d, uint32_t p, uint32_t *lo,
		       uint32_t *hi)
{
	if (d->start) {
		*lo = *hi = 0;
		if (p < d->nparts) {
			*lo = d->start[p];
			*hi = d->start[p + 1];
		}
		return;
	}
	uint32_t a = 0, b = d->nent;
	while (a < b) {
		uint32_t mid = a + (b - a) / 2;
		if (d->ent[mid].partition < p)
			a = mid + 1;
		else
			b = mid;
	}
	*lo = *hi = a;
	while (*hi < d->nent && d->ent[*hi].partition == p)
		++*hi;
}

/* ------------------------------------------------------------ planning */

static void iread_close(struct wk_iread *ir)
{
	if (ir->ifd >= 0)
		close(ir->ifd);
	if (ir->lfd >= 0)
		close(ir->lfd);
	ushi_free(ir->mem);
	*ir = (struct wk_iread){.ifd = -1, .lfd = -1};
}

/* Frees the oldest queued read: its bytes went out, or never will. */
static void read_pop(struct wk_fetch *fe)
{
	struct wk_fread *r = &fe->rd[fe->rhead];
	if (r->buf) {
		fe->t->fetch_pool -= r->buf->cap;
		pool_put(ring_pool(fe->t->ring), r->buf);
	} else {
		wk_hbuf_put(fe->t, r->mem, r->hcap);
	}
	fe->rhead = (fe->rhead + 1) % WK_FETCH_READS;
	fe->rn--;
	queued(fe, -(int64_t)r->need);
}

void wk_fetch_free(struct wk_fetch *fe)
{
	if (!fe)
		return;
	while (fe->rn)
		read_pop(fe);
	for (unsigned k = 0; fe->logs && k < fe->nthr; k++) {
		if (fe->logs[k].fd >= 0)
			close(fe->logs[k].fd);
		if (fe->logs[k].dfd >= 0)
			close(fe->logs[k].dfd);
	}
	ushi_free(fe->logs);
	iread_close(&fe->ir);
	ushi_free(fe->ent);
	for (unsigned i = 0; i < WK_FETCH_WINS; i++)
		ushi_free(fe->win[i].wrun);
	ushi_free(fe->m);
	wk_fetch_unbill(fe);
	ushi_free(fe);
}

bool wk_fetch_busy(const struct wk_fetch *fe)
{
	return fe && fe->inflight;
}

bool wk_fetch_first(const struct wk_fetch *fe)
{
	/* A window goes out alone (conn.c, gather()): nothing to wait for. */
	return fe->planned && !fe->frames && fe->rn &&
	       !fe->rd[fe->rhead].done && !fe->rd[fe->rhead].runs;
}

static char *file_name(char *b, size_t n, const struct wk_fetch *fe,
		       unsigned thread, const char *ext)
{
	snprintf(b, n, "s%u/t%u.%s", fe->shuffle, thread, ext);
	return b;
}

/* The index read ended (res: its last result). */
static void iread_done(struct ushi_op *op, int res)
{
	struct wk_fetch *fe = op->owner;
	struct wk_iread *ir = &fe->ir;
	if (res == -EAGAIN || res == -EINTR) {
		op->arm.rearm = true;
		return;
	}
	if (res > 0) {
		ir->got += (uint64_t)res;
		if (ir->got < ir->isize) { /* short: the rest */
			op->arm.addr += res;
			op->arm.off += (uint64_t)res;
			op->arm.len = read_len(ir->isize - ir->got);
			op->arm.rearm = true;
			return;
		}
	}
	/* The end of the file before isize: an index cut by the owner's
	 * repair meanwhile; what was there is used. */
	ir->res = res < 0 ? res : 0;
	ir->inflight = false;
	ir->done = true;
	fe->inflight--;
}

/* Reads thread k's index (ifd, isize bytes; its log lfd, lsize bytes)
 * on the ring, so that a FETCH never blocks the thread on an index read
 * (a large one, or one from a slow disk). The fds are the read's now. */
static int iread_start(struct wk_fetch *fe, int ifd, uint64_t isize,
		       int lfd, struct wk_dir *dir, uint64_t lsize)
{
	struct wk_iread *ir = &fe->ir;
	struct ushi_op *op;
	*ir = (struct wk_iread){.ifd = ifd, .lfd = lfd, .dir = dir,
				.isize = isize, .lsize = lsize,
				.inflight = true};
	fcntl(ifd, F_SETFL, 0); /* blocking reads: not a FIFO */
	int ret = (ir->mem = ushi_malloc(isize)) ? 0 : -ENOMEM;
	if (!ret)
		ret = ring_op_get(fe->t->ring, &op);
	if (ret) {
		iread_close(ir);
		return ret;
	}
	op->kind = OP_READ;
	op->cb = iread_done;
	op->owner = fe;
	op->arm = (struct ushi_armed){.fd = ifd, .addr = ir->mem,
		.len = read_len(isize), .off = 0};
	ring_arm(fe->t->ring, op);
	fe->inflight++;
	return 1;
}

/* Thread k's directory: cached, or built from its index, which is read
 * on the ring first (1: the read is under way, planning waits for it).
 * *out is NULL for a thread without a log; *lfd is its log's fd (the
 * caller's), or -1, in directory *ldir. */
static int plan_dir(struct wk_thread *t, struct wk_fetch *fe, unsigned k,
		    struct wk_pdir **out, int *lfd, struct wk_dir **ldir,
		    char *msg, size_t n)
{
	struct wk_iread *ir = &fe->ir;
	*out = NULL;
	*lfd = -1;
	if (ir->done) { /* k's index was read */
		int ret = ir->res;
		char name[48];
		if (ret)
			snprintf(msg, n, "reading %s/%s: %s", ir->dir->path,
				 file_name(name, sizeof(name), fe, k, "idx"),
				 ush_strerror(ret));
		struct wk_pdir *d = ret ? NULL :
			pdir_find(t, fe->shuffle, k, ir->isize);
		if (!ret && !d) {
			d = pdir_add(t, fe->shuffle, k, ir->mem, ir->got,
				     ir->isize, ir->lfd, ir->lsize);
			ir->mem = NULL;
			ret = d ? 0 : -ENOMEM;
		}
		*lfd = ir->lfd;
		*ldir = ir->dir;
		ir->lfd = -1;
		iread_close(ir);
		*out = d;
		return ret;
	}
	char name[48];
	struct stat st, lst;
	struct wk_dir *dir;
	int fd = open_file(t->wk, file_name(name, sizeof(name), fe, k, "log"),
			   msg, n, &lst, ldir);
	int ifd = fd < 0 ? fd : open_file(t->wk, file_name(name, sizeof(name),
							  fe, k, "idx"),
					  msg, n, &st, &dir);
	if (ifd == -ENOENT)
		*msg = 0;
	if (ifd < 0) {
		if (fd >= 0)
			close(fd);
		return ifd == -ENOENT ? 0 : ifd;
	}
	uint64_t isize = (uint64_t)st.st_size;
	struct wk_pdir *d = pdir_find(t, fe->shuffle, k, isize);
	if (!d && isize)
		return iread_start(fe, ifd, isize, fd, *ldir,
				   (uint64_t)lst.st_size);
	if (!d)
		d = pdir_add(t, fe->shuffle, k, NULL, 0, 0, fd, 0);
	close(ifd);
	*lfd = fd;
	*out = d;
	return d ? 0 : -ENOMEM;
}

/* Keeps lfd, thread k's log in dir, to read from when the stream has
 * frames of it (so each log is opened once per FETCH, whatever the
 * number of partitions), else closes it. */
static void plan_keep_log(struct wk_fetch *fe, unsigned k, int lfd,
			  struct wk_dir *dir, uint32_t had)
{
	if (lfd >= 0 && fe->nent > had && !fcntl(lfd, F_SETFL, 0)) {
		/* blocking reads: not a FIFO */
		fe->logs[k] = (struct wk_flog){.fd = lfd, .dfd = -1,
					       .dir = dir};
		return;
	}
	if (lfd >= 0)
		close(lfd);
}

/* Adds the frames of the entries [lo, hi) of one partition in d to
 * fe->ent, from thread k's log. */
static int plan_part(struct wk_fetch *fe, const struct wk_pdir *d,
		     unsigned k, uint32_t lo, uint32_t hi, char *msg, size_t n)
{
	uint32_t a, b, p = fe->m[lo].partition;
	pdir_range(d, p, &a, &b);
	for (uint32_t i = a; i < b; i++) {
		const struct wk_pent *e = &d->ent[i];
		struct proto_want *w = wanted(fe, lo, hi, e->map, e->attempt);
		/* An attempt's frames of a partition are in one log, in
		 * batch order: its first skip entries are the batches the
		 * reader has (a stored resend only makes it skip fewer). */
		if (!w)
			continue;
		if (w->skip) {
			w->skip--;
			continue;
		}
		if (fe->nent == fe->cap) {
			size_t had = fe->cap;
			int ret = charge(fe, (had ? had : 64) * sizeof(*fe->ent),
					 msg, n);
			if (ret)
				return ret;
			struct wk_fent *ne = ushi_array_grow(fe->ent, &fe->cap,
							     sizeof(*ne));
			if (!ne)
				return -ENOMEM;
			fe->ent = ne;
		}
		fe->ent[fe->nent++] = (struct wk_fent){e->off, e->len, p,
						       (uint16_t)k};
	}
	return 0;
}

/* Adds the wanted frames of every partition of the range in thread k's
 * directory d (its log in dir; NULL: the one --dir) to fe->ent, partition
 * after partition. */
static int plan_thread(struct wk_fetch *fe, const struct wk_pdir *d,
		       unsigned k, const struct wk_dir *dir, char *msg,
		       size_t n)
{
	for (uint32_t i = 0; i < d->nbad; i++)
		if (asks(fe, d->bad[i].map, d->bad[i].attempt)) {
			char name[48];
			snprintf(msg, n, "shuffle %u map %u attempt %u: %u "
				 "bytes of its frames at %s/%s offset %llu "
				 "are damaged", fe->shuffle, d->bad[i].map,
				 d->bad[i].attempt, d->bad[i].len,
				 dir ? dir->path : fe->t->wk->dirlist,
				 file_name(name, sizeof(name), fe, k, "log"),
				 (unsigned long long)d->bad[i].off);
			return USH_ECORRUPT;
		}
	for (uint32_t lo = 0, hi; lo < fe->nm; lo = hi) {
		for (hi = lo + 1; hi < fe->nm &&
				  fe->m[hi].partition == fe->m[lo].partition;
		     hi++)
			;
		int ret = plan_part(fe, d, k, lo, hi, msg, n);
		if (ret)
			return ret;
	}
	return 0;
}

static int cmp_fent(const void *a, const void *b)
{
	const struct wk_fent *x = a, *y = b;
	if (x->partition != y->partition)
		return x->partition < y->partition ? -1 : 1;
	if (x->thread != y->thread)
		return x->thread < y->thread ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Advice holds nothing of the stream, which may end (its files closed)
 * first: advice on a descriptor closed, or reused meanwhile, only reads
 * nothing or some other file ahead; a refusal leaves the reads cold. */
static void ahead_done(struct ushi_op *op, int res)
{
	(void)op;
	(void)res;
}

/* The extent [lo, hi) of thread k's log that the stream reads, and the
 * bytes it reads there. */
struct extent {
	uint64_t lo, hi, bytes, n;
};

/* Whether the stream reads half or more of the extent x where the
 * worker writes O_DIRECT: its windows' runs are then long, and read
 * O_DIRECT, so the page cache would hold the extent for nothing. */
static bool dense(const struct wk_fetch *fe, const struct extent *x)
{
	return fe->t->wk->o.direct && 2 * x->bytes >= x->hi - x->lo;
}

/*
 * A range of small partitions reads a frame or two of each, scattered
 * over the log where the writer sent them: from a cold page cache, as
 * many small random reads. Where the stream's frames are small and fill
 * a good part of a log's extent (but not half of it where the worker
 * writes O_DIRECT: see dense()), the page cache is asked to read that
 * extent ahead (OP_WILLNEED, asynchronous: the kernel reads it in large
 * sequential requests), and the stream's reads find it there.
 */
static void ahead(struct wk_fetch *fe)
{
	struct extent *x = ushi_calloc(fe->nthr, sizeof(*x));
	if (!x)
		return;
	for (uint32_t i = 0; i < fe->nent; i++) {
		const struct wk_fent *e = &fe->ent[i];
		struct extent *t = &x[e->thread];
		t->lo = t->n && t->lo < e->off ? t->lo : e->off;
		t->hi = t->hi > e->off + e->len ? t->hi : e->off + e->len;
		t->bytes += e->len;
		t->n++;
	}
	for (unsigned k = 0; k < fe->nthr; k++) {
		const struct extent *t = &x[k];
		struct ushi_op *op;
		if (!t->n || fe->logs[k].fd < 0 ||
		    t->bytes / t->n >= WK_FETCH_DIRECT_MIN || dense(fe, t) ||
		    t->hi - t->lo > WK_FETCH_AHEAD_MAX ||
		    t->hi - t->lo > WK_FETCH_AHEAD_SPAN * t->bytes ||
		    ring_op_get(fe->t->ring, &op))
			continue;
		op->kind = OP_WILLNEED;
		op->cb = ahead_done;
		op->arm = (struct ushi_armed){.fd = fe->logs[k].fd,
			.off = t->lo, .len = (uint32_t)(t->hi - t->lo)};
		ring_arm(fe->t->ring, op);
	}
	ushi_free(x);
}

/* The frames to stream, thread by thread: every thread's, the first
 * skip bytes left out (whole frames: an offset inside one is an error).
 * Returns 0 once planned, 1 while it waits for an index read, or an
 * error. */
static int plan(struct wk_thread *t, struct wk_fetch *fe, char *msg, size_t n)
{
	int ret = fe->nthr ? 0 : wk_store_fetch_threads(t, fe->shuffle,
							&fe->nthr);
	if (ret) {
		snprintf(msg, n, "s%u: %s", fe->shuffle,
			 ret == -ELOOP ? "a symbolic link: not followed "
					 "beneath the worker's --dir" :
					 ush_strerror(ret));
		return ret;
	}
	if (!fe->logs && fe->nthr) {
		fe->logs = ushi_malloc(fe->nthr * sizeof(*fe->logs));
		if (!fe->logs)
			return -ENOMEM;
		for (unsigned k = 0; k < fe->nthr; k++)
			fe->logs[k] = (struct wk_flog){.fd = -1, .dfd = -1};
	}
	for (; fe->plan_k < fe->nthr; fe->plan_k++) {
		struct wk_pdir *d;
		uint32_t had = fe->nent;
		int lfd;
		struct wk_dir *dir = NULL;
		ret = plan_dir(t, fe, fe->plan_k, &d, &lfd, &dir, msg, n);
		if (!ret && d)
			ret = plan_thread(fe, d, fe->plan_k, dir, msg, n);
		plan_keep_log(fe, fe->plan_k, lfd, dir, had);
		if (ret)
			return ret;
	}
	/* Thread by thread, each in partition order: the stream goes
	 * partition after partition, each thread's frames in log order.
	 * No frame planned (skips covering every batch, no entry): fe->ent
	 * may be NULL, which qsort() must not be given even for 0. */
	if (fe->nthr > 1 && fe->count > 1 && fe->nent > 1)
		qsort(fe->ent, fe->nent, sizeof(*fe->ent), cmp_fent);
	ahead(fe);
	while (fe->skip && fe->next < fe->nent) {
		uint32_t len = fe->ent[fe->next].len;
		if (fe->skip < len) {
			snprintf(msg, n, "skip offset inside a frame");
			return -EINVAL;
		}
		fe->skip -= len;
		fe->next++;
	}
	return 0;
}

/* Planned: the MANIFEST accepts the FETCH. */
static int manifest(struct wk_fetch *fe, struct wk_outq *q)
{
	struct wk_out *o = wk_out_new(USHI_PROTO_SMALL);
	if (!o)
		return -ENOMEM;
	/* The entries asked for were only the plan's: a stream waiting on
	 * a slow reader holds its frames alone. */
	ushi_free(fe->m);
	fe->m = NULL;
	uncharge(fe, (uint64_t)fe->nm * sizeof(struct proto_want));
	o->len = (uint32_t)proto_put_manifest(o->data, fe->shuffle,
					      fe->partition);
	wk_outq_add(q, o);
	fe->planned = true;
	wk_log(fe->t->wk, 2, "peer %s: FETCH shuffle %u partitions %u..%u: "
	       "%u entries, %u frames", fe->peer, fe->shuffle, fe->partition,
	       fe->partition + fe->count - 1, fe->nm, fe->nent);
	return 0;
}

int wk_fetch_start(struct wk_thread *t, const struct ushi_frame *f,
		   const uint8_t *payload, const char *peer,
		   struct wk_app *app, const char *app_id, struct wk_outq *q,
		   struct wk_fetch **out, char *msg, size_t n)
{
	struct wk_fetch *fe = ushi_calloc(1, sizeof(*fe));
	if (!fe)
		return -ENOMEM;
	fe->t = t;
	fe->peer = peer;
	fe->app = app;
	fe->app_id = app_id;
	fe->ir = (struct wk_iread){.ifd = -1, .lfd = -1};
	fe->shuffle = f->shuffle;
	fe->partition = f->partition;
	fe->skip = get_le64(payload);
	int ret = wants(t->wk, fe, f, payload, msg, n);
	if (!ret)
		ret = plan(t, fe, msg, n);
	if (!ret)
		ret = manifest(fe, q);
	if (ret < 0) {
		wk_fetch_free(fe);
		return ret;
	}
	*out = fe;
	return 0;
}

/* ------------------------------------------------------------ reading */

/* The size class of a heap read buffer of n bytes: its order above
 * USHI_BUF_MIN, or -1 beyond the largest kept (allocated exactly). */
static int hbuf_order(size_t n)
{
	int o = 0;
	while ((size_t)USHI_BUF_MIN << o < n)
		o++;
	return o < WK_HBUF_ORDERS ? o : -1;
}

void *wk_hbuf_get(struct wk_thread *t, size_t need, uint32_t *cap)
{
	int o = hbuf_order(need);
	if (o < 0) {
		*cap = 0;
		WK_COUNT(t->wk, fetch_heap_allocs, 1);
		return ushi_aligned_alloc(need);
	}
	/* A larger one kept will do: its pages are already there. */
	for (int k = o; k < WK_HBUF_ORDERS; k++) {
		void *p = t->hfree[k];
		if (p) {
			memcpy(&t->hfree[k], p, sizeof(void *));
			*cap = USHI_BUF_MIN << k;
			t->hfree_bytes -= *cap;
			return p;
		}
	}
	*cap = USHI_BUF_MIN << o;
	WK_COUNT(t->wk, fetch_heap_allocs, 1);
	return ushi_aligned_alloc(*cap);
}

void wk_hbuf_put(struct wk_thread *t, void *p, uint32_t cap)
{
	if (!p)
		return;
	if (!cap || t->hfree_bytes + cap > WK_HBUF_KEEP * t->wk->o.flush_size) {
		ushi_free(p);
		return;
	}
	int o = hbuf_order(cap);
	memcpy(p, &t->hfree[o], sizeof(void *));
	t->hfree[o] = p;
	t->hfree_bytes += cap;
}

void wk_hbuf_close(struct wk_thread *t)
{
	for (int o = 0; o < WK_HBUF_ORDERS; o++)
		while (t->hfree[o]) {
			void *p = t->hfree[o];
			memcpy(&t->hfree[o], p, sizeof(void *));
			ushi_free(p);
		}
	t->hfree_bytes = 0;
}

static void read_done(struct ushi_op *op, int res)
{
	struct wk_fread *r = op->owner;
	if (res == -EAGAIN || res == -EINTR) {
		op->arm.rearm = true;
		return;
	}
	if (res > 0) {
		r->got += (uint32_t)res;
		if (r->got < r->lead + r->len && r->got < r->need) {
			/* Short, before the end of the file: the rest. */
			op->arm.addr += res;
			op->arm.off += (uint64_t)res;
			op->arm.len -= (uint32_t)res;
			op->arm.rearm = true;
			return;
		}
	}
	if (res < 0)
		r->res = res;
	else if (r->got < r->lead + r->len)
		r->res = USH_ECORRUPT; /* the log is shorter than its index */
	r->inflight = false;
	r->done = true;
	r->fe->inflight--;
	r->fe->t->fetch_reads--;
}

/* Opens thread k's log for reading: buffered, and with O_DIRECT too
 * (direct) for long runs where the worker writes O_DIRECT. Small runs
 * read through the page cache, which reads ahead for the neighbouring
 * partitions' frames. */
static int log_open(struct wk_fetch *fe, unsigned k, bool direct)
{
	struct wk_flog *l = &fe->logs[k];
	char name[48], msg[1] = "";
	struct stat st;
	struct wk_dir *dir;
	file_name(name, sizeof(name), fe, k, "log");
	if (l->fd < 0) {
		int fd = open_file(fe->t->wk, name, msg, 0, &st, &l->dir);
		if (fd < 0)
			return fd;
		l->fd = fd;
		fcntl(fd, F_SETFL, 0); /* blocking reads: not a FIFO */
	}
	fe->dir = l->dir;
	if (direct && fe->t->wk->o.direct && l->dfd == -1) {
		int fd = open_file(fe->t->wk, name, msg, 0, &st, &dir);
		if (fd >= 0 && fcntl(fd, F_SETFL, O_DIRECT)) {
			close(fd); /* refused: buffered it is */
			fd = -1;
		}
		l->dfd = fd < 0 ? -2 : fd;
	}
	return 0;
}

/*
 * Starts a read of thread k's log, bytes [start, end): frames frames of
 * the stream (0 for a window's run, counted when the window goes out).
 * Pool memory when it may (never with heap_only), else heap memory.
 * Returns 1 when started, 0 when it must wait for a pool buffer, or an
 * error.
 */
static int read_issue(struct wk_fetch *fe, unsigned k, uint64_t start,
		      uint64_t end, uint32_t frames, bool heap_only)
{
	struct wk_thread *t = fe->t;
	struct ushi_pool *pool = ring_pool(t->ring);
	uint64_t a = start / USHI_ALIGN * USHI_ALIGN;
	uint64_t need = ALIGN_UP(end, (uint64_t)USHI_ALIGN) - a;
	int ret = log_open(fe, k, need >= WK_FETCH_DIRECT_MIN);
	if (ret)
		return ret;
	const struct wk_flog *l = &fe->logs[k];
	int fd = need >= WK_FETCH_DIRECT_MIN && l->dfd >= 0 ? l->dfd : l->fd;
	/* Only O_DIRECT needs an aligned read: through the page cache the
	 * frames' own bytes are read, not the blocks around them (a frame of
	 * a few KiB straddles two or three). */
	if (fd == l->fd) {
		a = start;
		need = end - start;
	}
	struct ushi_buf *b = NULL;
	uint8_t *mem = NULL;
	uint32_t hcap = 0;
	/* Pool memory up to half the pool for all streams of the thread,
	 * so that log writes always find some (a log buffer's worth stays
	 * idle); heap memory beyond. */
	int order = heap_only ? -1 : pool_order(pool, need);
	if (order >= 0 && t->fetch_pool + (USHI_BUF_MIN << order) <=
			  pool->bytes / 2) {
		while (!(b = pool_get(pool, (unsigned)order)) && !fe->rn &&
		       !wk_store_reclaim(t))
			;
		/* Writers' in-place receive buffers may hold the rest of
		 * the pool (conn.c). */
		if (b && pool->idle_bytes < t->wk->o.flush_size) {
			pool_put(pool, b);
			b = NULL;
		} else if (!b && fe->rn) {
			return 0; /* a buffer comes back with a send */
		}
		if (b)
			t->fetch_pool += b->cap;
	}
	if (!b && !(mem = wk_hbuf_get(t, need, &hcap)))
		return -ENOMEM;
	struct ushi_op *op;
	if ((ret = ring_op_get(t->ring, &op))) {
		if (b) {
			t->fetch_pool -= b->cap;
			pool_put(pool, b);
		}
		wk_hbuf_put(t, mem, hcap);
		return ret;
	}
	struct wk_fread *r = &fe->rd[(fe->rhead + fe->rn++) % WK_FETCH_READS];
	queued(fe, (int64_t)need);
	*r = (struct wk_fread){.fe = fe, .dir = l->dir, .buf = b,
		.mem = b ? b->data : mem,
		.off = a, .need = (uint32_t)need, .hcap = hcap,
		.lead = (uint32_t)(start - a), .len = (uint32_t)(end - start),
		.frames = frames, .inflight = true};
	op->kind = OP_READ;
	op->cb = read_done;
	op->owner = r;
	op->arm = (struct ushi_armed){.fd = fd, .addr = r->mem,
		.len = r->need, .off = a, .buf = b};
	ring_arm(t->ring, op);
	fe->inflight++;
	t->fetch_reads++;
	WK_COUNT(t->wk, fetch_reads, 1);
	return 1;
}

/* ------------------------------------------------------------ windows */

/* The reads fe may start now: up to WK_FETCH_READS queued, WK_FETCH_RUNS
 * of them whatever the thread holds, more while its thread's streams
 * hold under half its ring's ops (the rest are the log writes'). */
static unsigned read_room(const struct wk_fetch *fe)
{
	unsigned own = fe->rn < WK_FETCH_RUNS ? WK_FETCH_RUNS - fe->rn : 0;
	unsigned spare = fe->t->fetch_reads < WK_IODEPTH / 2 ?
			 WK_IODEPTH / 2 - fe->t->fetch_reads : 0;
	unsigned room = own > spare ? own : spare;
	return room < WK_FETCH_READS - fe->rn ? room : WK_FETCH_READS - fe->rn;
}

/* A window's run being grouped: thread k's log, bytes [lo, end), want
 * of them frames of the window. */
struct wrun {
	uint64_t lo, end, want;
	unsigned k;
};

/* Whether entry e goes on run r: after its end, across a gap of at most
 * WK_FETCH_WIN_GAP, within span bytes, and the run stays at least half
 * frames of the window (or two blocks more: a few bytes of frames far
 * apart are no run). */
static bool joins(const struct wrun *r, const struct wk_fent *e,
		  uint64_t span)
{
	uint64_t len = e->off + e->len - r->lo;
	return e->thread == r->k && e->off >= r->end &&
	       e->off <= r->end + WK_FETCH_WIN_GAP && len <= span &&
	       len <= 2 * (r->want + e->len + USHI_ALIGN);
}

/*
 * Starts a window at fe->next: the small frames that follow, up to a
 * flush buffer's worth, as runs of their logs (at most those rd[] has
 * room for). Each frame, in stream order, goes on the run it follows in
 * its log (the one the frame before it in its partition went to, then
 * the next run: where the frames of neighbouring partitions lie side by
 * side, the i-th frame of each partition goes on the i-th run), or
 * starts one. Returns 1 when started, 0 when it must wait for room, or
 * an error (the runs started are freed with the stream).
 */
static int win_start(struct wk_fetch *fe)
{
	struct wk_thread *t = fe->t;
	uint32_t flush = t->wk->o.flush_size;
	unsigned room = read_room(fe);
	if (fe->wn == WK_FETCH_WINS || !room)
		return 0;
	struct wk_fwin *w = &fe->win[(fe->whead + fe->wn) % WK_FETCH_WINS];
	if (!w->wrun && !(w->wrun = ushi_malloc(WK_FETCH_WIN_FRAMES)))
		return -ENOMEM;
	/* A run's read, aligned, stays within a kept heap buffer. */
	uint64_t span = flush > 4 * USHI_ALIGN ? flush - 2 * USHI_ALIGN :
						 flush;
	struct wrun run[WK_FETCH_READS];
	unsigned nr = 0, at = 0;
	/* Frame bytes up to a flush buffer, and what the runs read (gaps
	 * and aligned ends) up to two. */
	uint64_t bytes = 0, reads = 0;
	uint32_t a = fe->next, b = a;
	for (; b < fe->nent && b - a < WK_FETCH_WIN_FRAMES; b++) {
		const struct wk_fent *e = &fe->ent[b];
		if (b > a && (e->len >= WK_FETCH_DIRECT_MIN ||
			      bytes + e->len > flush))
			break;
		unsigned i = 0;
		while (i < nr && !joins(&run[(at + i) % nr], e, span))
			i++;
		uint64_t grow = i < nr ? e->off + e->len - run[(at + i) % nr].end :
					 e->len + 2 * USHI_ALIGN;
		if (b > a && reads + grow > 2ull * flush)
			break;
		if (i < nr) {
			at = (at + i) % nr;
		} else if (nr < room) {
			at = nr++;
			run[at] = (struct wrun){.lo = e->off, .k = e->thread};
		} else {
			break;
		}
		reads += grow;
		run[at].end = e->off + e->len;
		run[at].want += e->len;
		w->wrun[b - a] = (uint8_t)at;
		bytes += e->len;
		at = (at + 1) % nr; /* the next partition's frame, likely */
	}
	w->a = a;
	w->b = fe->next = b;
	fe->wn++;
	struct wk_fread *first = &fe->rd[(fe->rhead + fe->rn) % WK_FETCH_READS];
	for (unsigned r = 0; r < nr; r++) {
		int ret = read_issue(fe, run[r].k, run[r].lo, run[r].end, 0,
				     true);
		/* The runs started are the window's, even on an error. */
		first->runs = (uint8_t)(r + (ret == 1));
		if (ret < 0)
			return ret;
	}
	return 1;
}

/* The window whose first run is the oldest read: whether its runs are
 * all read, and the first that failed (or NULL). */
static bool win_read(const struct wk_fetch *fe, const struct wk_fread **bad)
{
	unsigned n = fe->rd[fe->rhead].runs;
	*bad = NULL;
	for (unsigned i = 0; i < n; i++) {
		const struct wk_fread *r =
			&fe->rd[(fe->rhead + i) % WK_FETCH_READS];
		if (!r->done)
			return false;
		if (r->res && !*bad)
			*bad = r;
	}
	return true;
}

/* The oldest window, read (none failed): its frames go out in stream
 * order from its runs' memory, which its output takes over (one sendmsg
 * of a piece per frame, frames adjacent in a run one piece). 0, or an
 * error. */
static int win_out(struct wk_fetch *fe, struct wk_outq *q)
{
	const struct wk_fwin *w = &fe->win[fe->whead];
	unsigned runs = fe->rd[fe->rhead].runs;
	uint32_t n = w->b - w->a;
	struct wk_out *o = wk_out_new(0);
	void *mem = ushi_malloc(n * sizeof(struct iovec) +
				runs * sizeof(struct wk_held));
	if (!o || !mem) {
		ushi_free(o);
		ushi_free(mem);
		return -ENOMEM;
	}
	o->iov = mem;
	o->held = (struct wk_held *)(o->iov + n);
	uint64_t bytes = 0;
	for (uint32_t i = w->a; i < w->b; i++) {
		const struct wk_fent *e = &fe->ent[i];
		const struct wk_fread *r =
			&fe->rd[(fe->rhead + w->wrun[i - w->a]) %
				WK_FETCH_READS];
		uint8_t *at = r->mem + (e->off - r->off);
		struct iovec *v = o->niov ? &o->iov[o->niov - 1] : NULL;
		if (v && (uint8_t *)v->iov_base + v->iov_len == at)
			v->iov_len += e->len;
		else
			o->iov[o->niov++] = (struct iovec){at, e->len};
		bytes += e->len;
	}
	for (; runs; runs--) {
		struct wk_fread *r = &fe->rd[fe->rhead];
		o->held[o->nheld++] = (struct wk_held){r->mem, r->hcap};
		r->mem = NULL; /* the output's now */
		read_pop(fe);
	}
	o->ptr = o->iov[0].iov_base;
	o->len = (uint32_t)bytes;
	fe->frames += n;
	WK_COUNT(fe->t->wk, frames_out, n);
	fe->bytes += bytes;
	fe->whead = (fe->whead + 1) % WK_FETCH_WINS;
	fe->wn--;
	wk_outq_add(q, o);
	return 0;
}

/* Starts the next read: a run of adjacent frames of one log, as many as
 * a pool buffer holds (a larger frame alone, into heap memory), or a
 * window where small frames follow. Returns 1 when started, 0 when it
 * must wait (for buffers, or for the reads before a window), or an
 * error. */
static int read_next(struct wk_fetch *fe)
{
	const struct wk_fent *e = &fe->ent[fe->next];
	uint32_t cap = fe->t->wk->o.flush_size, frames = 1;
	uint64_t start = e->off, end = e->off + e->len;
	uint64_t a = start / USHI_ALIGN * USHI_ALIGN;
	uint32_t j = fe->next + 1;
	while (j < fe->nent && fe->ent[j].thread == e->thread &&
	       fe->ent[j].off == end &&
	       ALIGN_UP(end + fe->ent[j].len, (uint64_t)USHI_ALIGN) - a <= cap) {
		end += fe->ent[j++].len;
		frames++;
	}
	if (end - start < WK_FETCH_DIRECT_MIN && j < fe->nent &&
	    fe->ent[j].len < WK_FETCH_DIRECT_MIN)
		return win_start(fe);
	int ret = read_issue(fe, e->thread, start, end, frames, false);
	if (ret == 1)
		fe->next = j;
	return ret;
}

/* Whether fe may start another read now: what it reads ahead and what
 * its connection has not sent yet (q, a reader that does not read) stay
 * below WK_FETCH_RUNS flush buffers together, and, past the
 * application's --max-app-fetch-bytes over all its streams, below one
 * read (so each of its streams still goes on, a run at a time). */
static bool more(const struct wk_fetch *fe, const struct wk_outq *q)
{
	const struct wk_thread *t = fe->t;
	uint64_t most = (uint64_t)WK_FETCH_RUNS * t->wk->o.flush_size;
	if (fe->app && fe->rbytes + q->stream &&
	    atomic_load(&fe->app->fetch_queued) >= t->wk->o.max_app_fetch_bytes)
		return false;
	return fe->next < fe->nent && fe->rbytes + q->stream < most &&
	       read_room(fe);
}

int wk_fetch_pump(struct wk_fetch *fe, struct wk_outq *q)
{
	int ret = 0;
	if (!fe->planned) {
		if (fe->ir.inflight)
			return 0;
		ret = plan(fe->t, fe, fe->msg, sizeof(fe->msg));
		if (ret == 1)
			return 0;
		if (!ret)
			ret = manifest(fe, q);
		if (ret) {
			fe->next = fe->nent;
			return ret;
		}
	}
	for (;;) {
		while (!ret && more(fe, q) && (ret = read_next(fe)) == 1)
			ret = 0;
		if (ret > 0)
			ret = 0;
		if (ret || !fe->rn)
			break;
		/* The oldest read (or window) is done: its frames go out,
		 * in order. */
		struct wk_fread *r = &fe->rd[fe->rhead];
		struct wk_out *o = NULL;
		const struct wk_fread *bad = r->res ? r : NULL;
		if (r->runs ? !win_read(fe, &bad) : !r->done)
			break;
		ret = bad ? bad->res : 0;
		if (ret < 0) { /* an I/O error takes its directory out */
			fe->dir = bad->dir;
			wk_dir_fail(fe->t->wk, fe->dir, ret, "read");
		}
		if (!ret && r->runs && !(ret = win_out(fe, q)))
			continue;
		if (ret)
			break;
		if (!(o = wk_out_new(0))) {
			ret = -ENOMEM;
			break;
		}
		o->ptr = r->mem + r->lead;
		o->len = r->len;
		o->buf = r->buf;
		o->heap = r->buf ? NULL : r->mem;
		o->heap_cap = r->hcap;
		fe->frames += r->frames;
		WK_COUNT(fe->t->wk, frames_out, r->frames);
		fe->bytes += r->len;
		r->buf = NULL; /* the output's now */
		r->mem = NULL;
		read_pop(fe);
		wk_outq_add(q, o);
	}
	if (!ret && !fe->rn && fe->next == fe->nent) {
		struct wk_out *o = wk_out_new(USHI_PROTO_SMALL);
		if (o) {
			o->len = (uint32_t)proto_put_fetch_end(
				o->data, fe->shuffle, fe->partition,
				fe->frames, fe->bytes);
			wk_outq_add(q, o);
			return 1;
		}
		ret = -ENOMEM;
	}
	if (ret)
		/* Its reads end before it is freed (conn_reap waits for
		 * them). */
		fe->next = fe->nent;
	return ret;
}
