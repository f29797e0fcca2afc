/*
 * The worker's state as the commit log makes it durable: every change
 * (a claim, a commit, a drop) is logged first (wal.c), then applied to
 * the tables (app.c, attempt.c); replay applies the logged records
 * again at start. A shuffle's end is here too: a DROP, the expiry of a
 * silent application, the start-up sweep of what nobody owns, and the
 * files each leaves (store.c, files.c, fetch.c's cache). All functions
 * but wk_app_expire(), wk_drop_files() and wk_sweep() expect wk->lock.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"
#include "worker/attempt.h"
#include "worker/fetch.h"
#include "worker/group.h"
#include "worker/files.h"
#include "worker/state.h"
#include "worker/store.h"
#include "worker/wal.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>

/* Shuffles an expiry drops per tick at most, with one log write. */
#define EXPIRE_BATCH 4096u

int wk_rec_apply(struct ush_worker *wk, const struct wk_rec *r)
{
	switch (r->type) {
	case WK_REC_CLAIM:
		return wk_owner_set(wk, r->shuffle, r->app);
	case WK_REC_COMMIT:
		return wk_attempt_set(wk, r->shuffle, r->map, r->attempt,
				      WK_COMMITTED);
	default: /* WK_REC_DROP: allocates nothing, cannot fail */
		wk_attempt_drop(wk, r->shuffle);
		wk_owner_del(wk, r->shuffle);
		return 0;
	}
}

/* A commit of a shuffle no claim gave an owner (its claim record was
 * skipped as corrupt) gives it the application the commit names: the
 * writer that committed owned the shuffle then. Older records name none:
 * the shuffle stays unowned (the start-up sweep keeps it, wk_sweep). */
static int owner_from_commit(struct ush_worker *wk, const struct wk_rec *r)
{
	if (r->type != WK_REC_COMMIT || !proto_app_ok(r->app) ||
	    wk_owner_of(wk, r->shuffle))
		return 0;
	wk_log(wk, 0, "shuffle %u has a commit but no claim record (one "
	       "skipped as corrupt?): owned by application %s, which its "
	       "commit names", r->shuffle, r->app);
	return wk_owner_set(wk, r->shuffle, r->app);
}

int wk_rec_replay(struct ush_worker *wk, const struct wk_rec *r)
{
	int ret = wk_rec_apply(wk, r);
	return ret ? ret : owner_from_commit(wk, r);
}

/* Where shuffle's entry is, or goes, among those a claim or drop is
 * logging (sorted by shuffle). */
static size_t busy_at(const struct ush_worker *wk, uint32_t shuffle)
{
	return ushi_lower_bound(wk->busy, wk->nbusy, sizeof(*wk->busy),
				offsetof(struct wk_busy, shuffle), shuffle);
}

/* The shuffle's entry among those a claim or drop is logging, or NULL. */
static struct wk_busy *busy_find(struct ush_worker *wk, uint32_t shuffle)
{
	size_t i = busy_at(wk, shuffle);
	return i < wk->nbusy && wk->busy[i].shuffle == shuffle ?
		&wk->busy[i] : NULL;
}

bool wk_busy(struct ush_worker *wk, uint32_t shuffle)
{
	return busy_find(wk, shuffle) != NULL;
}

bool wk_dropping(struct ush_worker *wk, uint32_t shuffle)
{
	const struct wk_busy *b = busy_find(wk, shuffle);
	return b && b->drop;
}

void wk_busy_wait(struct ush_worker *wk, uint32_t shuffle)
{
	while (busy_find(wk, shuffle))
		pthread_cond_wait(&wk->busy_cv, &wk->lock);
}

/* Marks the shuffles of the n records (claims or drops, none busy)
 * busy while they are logged. */
static int busy_add(struct ush_worker *wk, const struct wk_rec *r, size_t n)
{
	while (wk->nbusy + n > wk->cbusy) {
		struct wk_busy *b = ushi_array_grow(wk->busy, &wk->cbusy,
						    sizeof(*b));
		if (!b)
			return -ENOMEM;
		wk->busy = b;
	}
	for (size_t i = 0; i < n; i++) {
		if (r[i].type != WK_REC_CLAIM && r[i].type != WK_REC_DROP)
			continue;
		assert(!busy_find(wk, r[i].shuffle));
		size_t j = busy_at(wk, r[i].shuffle);
		memmove(&wk->busy[j + 1], &wk->busy[j],
			(wk->nbusy - j) * sizeof(*wk->busy));
		wk->busy[j] = (struct wk_busy){.shuffle = r[i].shuffle,
					       .drop = r[i].type == WK_REC_DROP};
		memcpy(wk->busy[j].app, r[i].app, sizeof(wk->busy[j].app));
		wk->nbusy++;
		wk->nclaiming += r[i].type == WK_REC_CLAIM;
	}
	return 0;
}

/* Ends the busy marks of the n shuffles, and wakes their waiters. */
static void busy_del(struct ush_worker *wk, const uint32_t *shuffles,
		     size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct wk_busy *b = busy_find(wk, shuffles[i]);
		if (!b)
			continue;
		wk->nclaiming -= !b->drop;
		size_t at = (size_t)(b - wk->busy);
		memmove(b, b + 1, (wk->nbusy - at - 1) * sizeof(*b));
		wk->nbusy--;
	}
	if (n)
		pthread_cond_broadcast(&wk->busy_cv);
}

size_t wk_live_records(struct ush_worker *wk, struct wk_rec *out, size_t n)
{
	size_t k = 0;
	/* A drop being logged is in the log before this snapshot, as a
	 * claim being logged is: the snapshot holds the state after them. */
	for (size_t i = 0; i < wk->nowners; i++) {
		if (wk->nbusy && wk_dropping(wk, wk->owners[i].shuffle))
			continue;
		if (k < n) {
			out[k] = (struct wk_rec){.type = WK_REC_CLAIM,
				.shuffle = wk->owners[i].shuffle};
			memcpy(out[k].app, wk->owners[i].app,
			       sizeof(out[k].app));
		}
		k++;
	}
	for (size_t i = 0; i < wk->nbusy; i++) {
		if (wk->busy[i].drop)
			continue;
		if (k < n) {
			out[k] = (struct wk_rec){.type = WK_REC_CLAIM,
				.shuffle = wk->busy[i].shuffle};
			memcpy(out[k].app, wk->busy[i].app,
			       sizeof(out[k].app));
		}
		k++;
	}
	for (size_t i = 0; i < wk->acap; i++) {
		const struct wk_attempt *e = &wk->att[i];
		/* A commit whose record is queued before the snapshot's
		 * compaction: in the log the snapshot replaces, not yet
		 * applied. */
		if (e->state != WK_COMMITTED &&
		    !(e->state == WK_OPEN && e->logging))
			continue;
		if (wk->nbusy && wk_dropping(wk, e->shuffle))
			continue;
		const char *app = k < n ? wk_owner_of(wk, e->shuffle) : NULL;
		/* Applied: durable with its data. Logging: its data may
		 * not be yet, and the snapshot's copy names it (wal.c). */
		if (k < n && e->state == WK_OPEN)
			out[k] = *e->rec;
		else if (k < n)
			out[k] = (struct wk_rec){.type = WK_REC_COMMIT,
				.shuffle = e->shuffle, .map = e->map,
				.attempt = e->attempt, .durable = true};
		if (app)
			snprintf(out[k].app, sizeof(out[k].app), "%s", app);
		k++;
	}
	return k;
}

int wk_compact_torn(struct ush_worker *wk)
{
	/* No loop runs yet, and nothing is queued: the committer's log is
	 * this thread's for now. */
	size_t n = wk_live_records(wk, NULL, 0);
	struct wk_rec *r = ushi_malloc((n ? n : 1) * sizeof(*r));
	if (!r)
		return -ENOMEM;
	wk_live_records(wk, r, n);
	int ret = wk_log_compact(wk, r, n, wk_log_next_lsn() - 1);
	ushi_free(r);
	return ret ? ushi_fail(ret, "worker: the commit log of %s holds %zu "
			       "torn commits and could not be compacted "
			       "without them", wk->dir, wk->torn) : 0;
}

void wk_compact_maybe(struct ush_worker *wk)
{
	/* Commits logged and not yet applied are in the snapshot as
	 * committed (wk_live_records()), so it never waits for a moment
	 * without any: under steady commits there may be none. */
	if (atomic_load(&wk->compact_queued) || !wk_log_compact_due(wk))
		return;
	size_t n = wk_live_records(wk, NULL, 0);
	struct wk_rec *r = ushi_malloc((n ? n : 1) * sizeof(*r));
	if (!r) {
		wk_log(wk, 0, "compacting the commit log: %s (the log keeps "
		       "growing)", ush_strerror(-ENOMEM));
		return;
	}
	wk_live_records(wk, r, n);
	atomic_store(&wk->compact_queued, true);
	wk_group_compact(wk, r, n);
}

int wk_rec_log(struct ush_worker *wk, const struct wk_rec *r, size_t n)
{
	/* A compaction queued before these records holds the state of
	 * every record before them; one queued while they are with the
	 * committer holds them too, as the busy marks say
	 * (wk_live_records()). */
	wk_compact_maybe(wk);
	int ret = busy_add(wk, r, n);
	if (ret)
		return ret;
	struct wk_logreq req = {.r = r, .n = n};
	wk_group_queue(wk, &req);
	/* The table lock is not held across the sync: pushes, commits and
	 * fetches of other shuffles go on; a claim or drop of these
	 * shuffles waits for their marks (wk_busy_wait()). */
	pthread_mutex_unlock(&wk->lock);
	ret = wk_group_wait(wk, &req);
	pthread_mutex_lock(&wk->lock);
	/* A claim's mark ends here: its caller applies it before it lets
	 * the lock go, so a waiter sees it applied. A drop's stays until
	 * its files are gone (wk_drop_finish()). */
	for (size_t i = 0; i < n; i++)
		if (ret || r[i].type == WK_REC_CLAIM)
			busy_del(wk, &r[i].shuffle, 1);
	return ret;
}

/* How many of the last drops some thread has not seen yet: the rest of
 * wk->drops can go, so that it stays as short as the threads' lag. */
static size_t drops_unseen(struct ush_worker *wk)
{
	unsigned e = atomic_load(&wk->drop_epoch);
	size_t keep = 0;
	for (unsigned i = 0; i < wk->nthreads; i++) {
		size_t lag = e - atomic_load(&wk->threads[i].drop_seen);
		keep = lag > keep ? lag : keep;
	}
	return keep < wk->ndrops ? keep : wk->ndrops;
}

int wk_drop_locked(struct wk_thread *t, const uint32_t *shuffles, size_t n)
{
	struct ush_worker *wk = t->wk;
	/* What can fail without side effects first: the records and the
	 * drop list; then the log makes the drops durable (one write, one
	 * sync, the lock not held), then memory follows. */
	size_t cap = wk->ndrops + n;
	uint32_t *d = ushi_malloc(cap * sizeof(*d));
	struct wk_rec *r = ushi_calloc(n, sizeof(*r));
	int ret = d && r ? 0 : -ENOMEM;
	for (size_t i = 0; !ret && i < n; i++)
		r[i] = (struct wk_rec){.type = WK_REC_DROP,
				       .shuffle = shuffles[i]};
	if (!ret)
		ret = wk_rec_log(wk, r, n);
	for (size_t i = 0; !ret && i < n; i++) {
		wk_rec_apply(wk, &r[i]); /* a drop cannot fail */
		wk_group_forget(wk, shuffles[i]);
	}
	ushi_free(r);
	if (ret) {
		ushi_free(d);
		return ret;
	}
	/* Other drops may have come while the lock was not held. */
	size_t keep = drops_unseen(wk);
	if (keep + n > cap) {
		ushi_free(d);
		if (!(d = ushi_malloc((keep + n) * sizeof(*d)))) {
			wk_log(wk, 0, "dropping %zu shuffles: the list the "
			       "other threads read: %s (their open files of "
			       "them stay open until the stop)", n,
			       ush_strerror(-ENOMEM));
			return 0;
		}
	}
	if (keep)
		memcpy(d, wk->drops + wk->ndrops - keep, keep * sizeof(*d));
	memcpy(d + keep, shuffles, n * sizeof(*d));
	wk->drops_base += (unsigned)(wk->ndrops - keep);
	wk->ndrops = keep + n;
	ushi_free(wk->drops);
	wk->drops = d;
	atomic_fetch_add(&wk->drop_epoch, (unsigned)n);
	return 0;
}

void wk_drop_files(struct wk_thread *t, uint32_t shuffle)
{
	wk_store_drop(t, shuffle);
	wk_pdir_drop(t, shuffle);
	wk_store_unlink(t->wk, shuffle);
}

void wk_drop_end(struct ush_worker *wk, const uint32_t *shuffles, size_t n)
{
	pthread_mutex_lock(&wk->lock);
	busy_del(wk, shuffles, n);
	pthread_mutex_unlock(&wk->lock);
}

void wk_drop_finish(struct wk_thread *t, const uint32_t *shuffles, size_t n)
{
	for (size_t i = 0; i < n; i++)
		wk_drop_files(t, shuffles[i]);
	wk_drop_end(t->wk, shuffles, n);
}

void wk_app_expire(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	uint32_t *gone = NULL;
	size_t more;
	pthread_mutex_lock(&wk->lock);
	/* Read under the lock: a HELLO that another thread handled while
	 * this one waited for it stamps a later time than a clock read
	 * before, and the difference must not wrap into "expired". */
	uint64_t now = ushi_now_ns();
	/* Every silent application's shuffles are dropped with one log
	 * write, up to a batch per tick: the lock is shared with every
	 * thread. */
	size_t ngone = wk_app_silent_shuffles(wk, now, EXPIRE_BATCH, &gone,
					     &more);
	/* One another thread is dropping is not this one's to drop. */
	size_t k = 0;
	for (size_t i = 0; i < ngone; i++)
		if (!wk_busy(wk, gone[i]))
			gone[k++] = gone[i];
	ngone = k;
	int err = ngone ? wk_drop_locked(t, gone, ngone) : 0;
	if (err)
		ngone = 0;
	/* Again: the lock was released while the drops were logged. */
	now = ushi_now_ns();
	size_t napps = wk_app_free_silent(wk, now);
	/* Counted with the drops, under the lock that a scrape takes for
	 * the applications and shuffles: one that sees them gone sees
	 * their expiries too (test_net_tenants read it in between). */
	WK_COUNT(wk, expiries, ngone);
	pthread_mutex_unlock(&wk->lock);
	wk_drop_finish(t, gone, ngone);
	ushi_free(gone);
	if (ngone || napps || err)
		wk_log(wk, err ? 0 : 1, "applications not heard of for %u ms: "
		       "%zu removed, %zu shuffles of theirs dropped%s%s%s",
		       wk->o.app_ttl_ms, napps, ngone,
		       more ? ", more next time" : "", err ? ": " : "",
		       err ? ush_strerror(err) : "");
}

void wk_decommission_pass(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	pthread_mutex_lock(&wk->lock);
	/* A claim being logged counts: it adds a shuffle once logged. */
	size_t left = wk->nowners + wk->nclaiming;
	pthread_mutex_unlock(&wk->lock);
	if (left == wk->decom_left)
		return;
	wk->decom_left = left;
	if (left) {
		wk_log(wk, 1, "decommissioning: %zu shuffle%s left; new "
		       "writers are refused, reads, drops and heartbeats "
		       "served", left, left == 1 ? "" : "s");
		return;
	}
	wk_log(wk, 1, "decommissioned: no shuffle left; exiting");
	atomic_store(&wk->stop, 1);
}

int wk_drop_uncommitted(struct ush_worker *wk)
{
	wk_attempt_live(wk); /* none is open: all are committed */
	size_t n = 0;
	for (size_t i = 0; i < wk->nowners; i++)
		n += !wk->owners[i].live;
	if (!n)
		return 0;
	uint32_t *gone = ushi_malloc(n * sizeof(*gone));
	if (!gone)
		return -ENOMEM;
	n = 0;
	for (size_t i = 0; i < wk->nowners; i++)
		if (!wk->owners[i].live) {
			wk_log(wk, 1, "shuffle %u of application %s has no "
			       "attempt committed (its writers left "
			       "before the stop): dropped",
			       wk->owners[i].shuffle, wk->owners[i].app);
			gone[n++] = wk->owners[i].shuffle;
		}
	struct wk_thread t = {.wk = wk};
	pthread_mutex_lock(&wk->lock);
	int ret = wk_drop_locked(&t, gone, n);
	pthread_mutex_unlock(&wk->lock);
	if (!ret)
		wk_drop_finish(&t, gone, n);
	ushi_free(gone);
	return ret;
}

static bool has_commits(struct ush_worker *wk, uint32_t shuffle)
{
	for (size_t i = 0; i < wk->acap; i++)
		if (wk->att[i].state == WK_COMMITTED &&
		    wk->att[i].shuffle == shuffle)
			return true;
	return false;
}

/* Sweeps the shuffle directories in d that no application owns. */
static void dir_sweep(struct ush_worker *wk, const struct wk_dir *dd)
{
	DIR *d = opendir(dd->path);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		unsigned s;
		char extra;
		if (sscanf(de->d_name, "s%u%c", &s, &extra) != 1 ||
		    wk_owner_of(wk, s))
			continue;
		if (has_commits(wk, s)) {
			wk_log(wk, 0, "%s/%s: shuffle %u has commits but no "
			       "owner (its claim record lost, and no commit "
			       "names its application): kept, unowned",
			       dd->path, de->d_name, s);
			continue;
		}
		/* No application owns it: a drop whose files outlived a
		 * crash, or data of writers that never claimed it. */
		struct wk_thread t = {.wk = wk};
		wk_log(wk, 1, "sweeping %s/%s: no application owns shuffle %u",
		       dd->path, de->d_name, s);
		wk_drop_files(&t, s);
	}
	closedir(d);
}

void wk_sweep(struct ush_worker *wk)
{
	for (unsigned i = 0; i < wk->ndirs; i++)
		dir_sweep(wk, &wk->dirs[i]);
}

