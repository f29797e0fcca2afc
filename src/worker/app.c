/*
 * Applications and the shuffles they own. The first writer of a shuffle
 * claims it for its application (a durable record); other applications
 * are refused it. An application is alive while it is heard of: a
 * HEARTBEAT, or any HELLO naming it. One that is silent for --app-ttl
 * loses its shuffles, as a DROP of each would (the Celeborn/Uniffle
 * application expiry: on explicit heartbeats, never on connection state,
 * which SPARK-12583 showed is not a sign of an application's end).
 * After a restart every application gets a full TTL again.
 *
 * Owners are kept sorted by shuffle; applications in a small array. All
 * functions but wk_app_expire() and wk_drop_files() expect wk->lock.
 */
#define _GNU_SOURCE
#include "worker/wk.h"
#include "net/auth.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* Index of the first owner entry >= shuffle. */
static size_t owner_pos(const struct ush_worker *wk, uint32_t shuffle)
{
	size_t lo = 0, hi = wk->nowners;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (wk->owners[mid].shuffle < shuffle)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct wk_owner *wk_owner_find(struct ush_worker *wk, uint32_t shuffle)
{
	size_t i = owner_pos(wk, shuffle);
	return i < wk->nowners && wk->owners[i].shuffle == shuffle ?
		       &wk->owners[i] : NULL;
}

const char *wk_owner_of(struct ush_worker *wk, uint32_t shuffle)
{
	struct wk_owner *o = wk_owner_find(wk, shuffle);
	return o ? o->app : NULL;
}

static struct wk_app *app_find(struct ush_worker *wk, const char *app)
{
	for (size_t i = 0; i < wk->napps; i++)
		if (!strcmp(wk->apps[i]->id, app))
			return wk->apps[i];
	return NULL;
}

int wk_owner_set(struct ush_worker *wk, uint32_t shuffle, const char *app)
{
	struct wk_app *a = wk_app_get(wk, app);
	if (!a)
		return -ENOMEM;
	size_t i = owner_pos(wk, shuffle);
	if (i == wk->nowners || wk->owners[i].shuffle != shuffle) {
		if (wk->nowners == wk->cowners) {
			struct wk_owner *n = ushi_array_grow(
				wk->owners, &wk->cowners, sizeof(*n));
			if (!n)
				return -ENOMEM;
			wk->owners = n;
		}
		memmove(&wk->owners[i + 1], &wk->owners[i],
			(wk->nowners - i) * sizeof(*wk->owners));
		wk->nowners++;
		wk->owners[i].shuffle = shuffle;
		wk->owners[i].bytes = 0;
	} else {
		struct wk_app *old = app_find(wk, wk->owners[i].app);
		if (old) /* a claim replayed over an older one */
			old->nshuffles--;
	}
	a->nshuffles++;
	snprintf(wk->owners[i].app, sizeof(wk->owners[i].app), "%s", app);
	return 0;
}

void wk_owner_del(struct ush_worker *wk, uint32_t shuffle)
{
	size_t i = owner_pos(wk, shuffle);
	if (i == wk->nowners || wk->owners[i].shuffle != shuffle)
		return;
	struct wk_app *a = app_find(wk, wk->owners[i].app);
	if (a) {
		a->nshuffles--;
		uint64_t b = atomic_load(&a->bytes), d = wk->owners[i].bytes;
		atomic_fetch_sub(&a->bytes, d < b ? d : b);
	}
	memmove(&wk->owners[i], &wk->owners[i + 1],
		(wk->nowners - i - 1) * sizeof(*wk->owners));
	wk->nowners--;
}

struct wk_app *wk_app_get(struct ush_worker *wk, const char *app)
{
	uint64_t now = ushi_now_ns();
	struct wk_app *a = app_find(wk, app);
	if (a) {
		a->seen_ns = now;
		return a;
	}
	if (wk->napps == wk->capps) {
		size_t c = wk->capps ? 2 * wk->capps : 16;
		struct wk_app **n = ushi_malloc(c * sizeof(*n));
		if (!n)
			return NULL;
		if (wk->napps)
			memcpy(n, wk->apps, wk->napps * sizeof(*n));
		ushi_free(wk->apps);
		wk->apps = n;
		wk->capps = c;
	}
	a = ushi_calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	snprintf(a->id, sizeof(a->id), "%s", app);
	a->seen_ns = now;
	atomic_init(&a->bytes, 0);
	wk->apps[wk->napps++] = a;
	return a;
}

int wk_app_seen(struct ush_worker *wk, const char *app)
{
	return wk_app_get(wk, app) ? 0 : -ENOMEM;
}

int wk_drop_locked(struct wk_thread *t, uint32_t shuffle)
{
	struct ush_worker *wk = t->wk;
	/* What can fail without side effects first: the new drop list; then
	 * the log makes the drop durable, then memory follows. */
	uint32_t *d = ushi_malloc((wk->ndrops + 1) * sizeof(*d));
	if (!d)
		return -ENOMEM;
	struct wk_rec r = {.type = WK_REC_DROP, .shuffle = shuffle};
	int ret = wk_log_append(t, &r);
	if (!ret)
		ret = wk_rec_apply(wk, &r);
	if (ret) {
		ushi_free(d);
		return ret;
	}
	if (wk->ndrops)
		memcpy(d, wk->drops, wk->ndrops * sizeof(*d));
	d[wk->ndrops++] = shuffle;
	ushi_free(wk->drops);
	wk->drops = d;
	atomic_fetch_add(&wk->drop_epoch, 1);
	return 0;
}

void wk_drop_files(struct wk_thread *t, uint32_t shuffle)
{
	wk_store_drop(t, shuffle);
	wk_store_unlink(t->wk, shuffle);
}

void wk_app_expire(struct wk_thread *t)
{
	struct ush_worker *wk = t->wk;
	uint64_t ttl = wk->o.app_ttl_ms * 1000000ull;
	uint32_t gone[64];
	size_t ngone = 0;
	char app[USHI_PROTO_APP_MAX + 1] = "";
	pthread_mutex_lock(&wk->lock);
	/* Read under the lock: a HELLO that another thread handled while
	 * this one waited for it stamps a later time than a clock read
	 * before, and the difference must not wrap into "expired". */
	uint64_t now = ushi_now_ns();
	for (size_t i = 0; i < wk->napps && !*app; i++)
		if (now > wk->apps[i]->seen_ns &&
		    now - wk->apps[i]->seen_ns > ttl)
			memcpy(app, wk->apps[i]->id, sizeof(app));
	/* A bounded batch per tick: the lock is shared with every thread. */
	int err = 0;
	for (size_t i = 0; *app && !err && i < wk->nowners && ngone < 64;) {
		uint32_t s = wk->owners[i].shuffle;
		if (strcmp(wk->owners[i].app, app))
			i++; /* a drop removes entry i: no i++ then */
		else if (!(err = wk_drop_locked(t, s)))
			gone[ngone++] = s;
	}
	bool done = *app && !err && ngone < 64;
	for (size_t i = 0; done && i < wk->napps; i++) {
		struct wk_app *a = wk->apps[i];
		if (strcmp(a->id, app))
			continue;
		if (a->nconns) {
			/* Connections still point at it: kept, with a new
			 * TTL (it owns nothing now). */
			a->seen_ns = now;
		} else {
			wk->apps[i] = wk->apps[--wk->napps];
			ushi_free(a);
		}
		break;
	}
	pthread_mutex_unlock(&wk->lock);
	for (size_t i = 0; i < ngone; i++)
		wk_drop_files(t, gone[i]);
	WK_COUNT(wk, expiries, ngone);
	if (ngone || err)
		wk_log(wk, err ? 0 : 1, "application %s: no heartbeat for %u "
		       "ms: %zu shuffles dropped%s%s%s", app,
		       wk->o.app_ttl_ms, ngone, done ? "" : ", more next time",
		       err ? ": " : "", err ? ush_strerror(err) : "");
}

void wk_app_free(struct ush_worker *wk)
{
	for (size_t i = 0; i < wk->napps; i++)
		ushi_free(wk->apps[i]);
	ushi_free(wk->apps);
	ushi_free(wk->owners);
	ushi_free(wk->drops);
	wk->apps = NULL;
	wk->owners = NULL;
	wk->drops = NULL;
	wk->napps = wk->nowners = wk->ndrops = 0;
}

static bool has_commits(struct ush_worker *wk, uint32_t shuffle)
{
	for (size_t i = 0; i < wk->acap; i++)
		if (wk->att[i].state == WK_COMMITTED &&
		    wk->att[i].shuffle == shuffle)
			return true;
	return false;
}

void wk_sweep(struct ush_worker *wk)
{
	DIR *d = opendir(wk->dir);
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
			       wk->dir, de->d_name, s);
			continue;
		}
		/* No application owns it: a drop whose files outlived a
		 * crash, or data of writers that never claimed it. */
		struct wk_thread t = {.wk = wk};
		wk_log(wk, 1, "sweeping %s/%s: no application owns shuffle %u",
		       wk->dir, de->d_name, s);
		wk_drop_files(&t, s);
	}
	closedir(d);
}

int wk_app_usage(struct ush_worker *wk)
{
	for (size_t i = 0; i < wk->nowners; i++) {
		char name[16];
		snprintf(name, sizeof(name), "s%u", wk->owners[i].shuffle);
		int fd = openat(wk->dirfd, name, O_RDONLY | O_DIRECTORY |
				O_NOFOLLOW | O_CLOEXEC);
		DIR *d = fd < 0 ? NULL : fdopendir(fd);
		if (!d) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		uint64_t sum = 0;
		struct dirent *de;
		struct stat st;
		unsigned p, t;
		char c;
		while ((de = readdir(d))) {
			/* A 0.3 worker's partition file: that layout is not
			 * served, so starting would lose the shuffle. */
			if (sscanf(de->d_name, "p%u.t%u.dat%c", &p, &t, &c) == 3) {
				int ret = ushi_fail(USH_EVERSION, "worker: "
						"%s/%s/%s is a partition file of "
						"ushuffled 0.3, whose layout this "
						"version does not read: drain the "
						"worker with the old version (or "
						"drop shuffle %u) before upgrading",
						wk->dir, name, de->d_name,
						wk->owners[i].shuffle);
				closedir(d); /* de is d's */
				return ret;
			}
			if (!fstatat(dirfd(d), de->d_name, &st,
				     AT_SYMLINK_NOFOLLOW) &&
			    S_ISREG(st.st_mode))
				sum += (uint64_t)st.st_size;
		}
		closedir(d);
		wk->owners[i].bytes = sum;
		struct wk_app *a = app_find(wk, wk->owners[i].app);
		if (a)
			atomic_fetch_add(&a->bytes, sum);
	}
	return 0;
}

int wk_secret(struct ush_worker *wk, const char *app, uint8_t *key)
{
	if (wk->secrets_dirfd >= 0) {
		bool loose;
		int n = auth_read_secret(wk->secrets_dirfd, app, true, key,
					 &loose);
		if (n != -ENOENT)
			return n;
	}
	if (!wk->secret)
		return 0;
	memcpy(key, wk->secret, wk->secret_len);
	return (int)wk->secret_len;
}
