/*
 * Applications and the shuffles they own. The first writer of a shuffle
 * claims it for its application (a durable record); other applications
 * are refused it. An application is alive while it is heard of: a
 * HEARTBEAT, or any HELLO naming it. One that is silent for --app-ttl
 * loses its shuffles, as a DROP of each would (the Celeborn/Uniffle
 * application expiry: on explicit heartbeats, never on connection state,
 * which SPARK-12583 showed is not a sign of an application's end;
 * state.c drops them). After a restart every application gets a full TTL
 * again.
 *
 * Owners are kept sorted by shuffle; applications in a hash table by id,
 * their number bounded by --max-apps. All functions but wk_app_usage()
 * and wk_secret() expect wk->lock.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"
#include "net/auth.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Index of the first owner entry >= shuffle. */
static size_t owner_pos(const struct ush_worker *wk, uint32_t shuffle)
{
	return ushi_lower_bound(wk->owners, wk->nowners, sizeof(*wk->owners),
				offsetof(struct wk_owner, shuffle), shuffle);
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

/* SipHash-1-3 (Aumasson and Bernstein) of n bytes at p under key k: ids
 * are chosen by clients, which must not be able to pile them into one
 * chain without knowing the key. */
#define ROTL(x, b) ((x) << (b) | (x) >> (64 - (b)))

static void sipround(uint64_t *v)
{
	v[0] += v[1], v[1] = ROTL(v[1], 13), v[1] ^= v[0], v[0] = ROTL(v[0], 32);
	v[2] += v[3], v[3] = ROTL(v[3], 16), v[3] ^= v[2];
	v[0] += v[3], v[3] = ROTL(v[3], 21), v[3] ^= v[0];
	v[2] += v[1], v[1] = ROTL(v[1], 17), v[1] ^= v[2], v[2] = ROTL(v[2], 32);
}

static uint64_t siphash13(const uint64_t *k, const char *p, size_t n)
{
	uint64_t v[4] = {k[0] ^ 0x736f6d6570736575ull, k[1] ^ 0x646f72616e646f6dull,
			 k[0] ^ 0x6c7967656e657261ull, k[1] ^ 0x7465646279746573ull};
	uint64_t m, last = (uint64_t)n << 56;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		m = get_le64((const uint8_t *)p + i);
		v[3] ^= m;
		sipround(v);
		v[0] ^= m;
	}
	for (unsigned j = 0; i + j < n; j++)
		last |= (uint64_t)(uint8_t)p[i + j] << (8 * j);
	v[3] ^= last;
	sipround(v);
	v[0] ^= last;
	v[2] ^= 0xff;
	for (int r = 0; r < 3; r++)
		sipround(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

static struct wk_app **chain_of(struct ush_worker *wk, const char *app)
{
	uint64_t h = siphash13(wk->app_key, app, strlen(app));
	return &wk->apps[h & (wk->capps - 1)];
}

struct wk_app *wk_app_find(struct ush_worker *wk, const char *app)
{
	struct wk_app *a = wk->capps ? *chain_of(wk, app) : NULL;
	while (a && strcmp(a->id, app))
		a = a->hnext;
	return a;
}

/* Twice the chains (64 at first, with the key drawn then): at most one
 * application per chain on average. */
static int app_grow(struct ush_worker *wk)
{
	size_t ocap = wk->capps, cap = ocap ? 2 * ocap : 64;
	struct wk_app **old = wk->apps, **n = ushi_calloc(cap, sizeof(*n));
	if (!n)
		return -ENOMEM;
	if (!ocap && getrandom(wk->app_key, sizeof(wk->app_key), 0) !=
			     sizeof(wk->app_key)) {
		ushi_free(n);
		return -EIO;
	}
	wk->apps = n;
	wk->capps = cap;
	for (size_t i = 0; i < ocap; i++)
		for (struct wk_app *a = old[i], *next; a; a = next) {
			struct wk_app **c = chain_of(wk, a->id);
			next = a->hnext;
			a->hnext = *c;
			*c = a;
		}
	ushi_free(old);
	return 0;
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
		wk->owners[i].live = 0;
	} else {
		struct wk_app *old = wk_app_find(wk, wk->owners[i].app);
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
	struct wk_app *a = wk_app_find(wk, wk->owners[i].app);
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
	struct wk_app *a = wk_app_find(wk, app);
	if (a) {
		a->seen_ns = now;
		return a;
	}
	if (wk->napps == wk->capps && app_grow(wk))
		return NULL;
	a = ushi_calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	snprintf(a->id, sizeof(a->id), "%s", app);
	a->seen_ns = now;
	atomic_init(&a->bytes, 0);
	struct wk_app **c = chain_of(wk, app);
	a->hnext = *c;
	*c = a;
	wk->napps++;
	return a;
}

int wk_app_seen(struct ush_worker *wk, const char *app, struct wk_app **out)
{
	if (!wk_app_find(wk, app) && wk->napps >= wk->o.max_apps)
		return -EDQUOT;
	struct wk_app *a = wk_app_get(wk, app);
	if (out)
		*out = a;
	return a ? 0 : -ENOMEM;
}

uint64_t wk_app_bytes(struct ush_worker *wk)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < wk->capps; i++)
		for (struct wk_app *a = wk->apps[i]; a; a = a->hnext)
			sum += atomic_load(&a->bytes);
	return sum;
}

static bool silent(const struct wk_app *a, uint64_t now, uint64_t ttl)
{
	return now > a->seen_ns && now - a->seen_ns > ttl;
}

size_t wk_app_silent_shuffles(struct ush_worker *wk, uint64_t now,
			      size_t batch, uint32_t **gone, size_t *more)
{
	uint64_t ttl = wk->o.app_ttl_ms * 1000000ull;
	size_t n = 0;
	*more = 0;
	for (size_t i = 0; i < wk->nowners; i++) {
		struct wk_app *a = wk_app_find(wk, wk->owners[i].app);
		if (!a || !silent(a, now, ttl))
			continue;
		if (!*gone && !(*gone = ushi_malloc(batch *
						    sizeof(**gone))))
			return 0; /* next time */
		if (n < batch)
			(*gone)[n++] = wk->owners[i].shuffle;
		else
			(*more)++;
	}
	return n;
}

size_t wk_app_free_silent(struct ush_worker *wk, uint64_t now)
{
	uint64_t ttl = wk->o.app_ttl_ms * 1000000ull;
	size_t n = 0;
	for (size_t i = 0; i < wk->capps; i++)
		for (struct wk_app **p = &wk->apps[i], *a; (a = *p);) {
			if (!silent(a, now, ttl) || a->nshuffles) {
				p = &a->hnext;
			} else if (a->nconns) {
				/* Connections still point at it: kept, with
				 * a new TTL (it owns nothing now). */
				a->seen_ns = now;
				p = &a->hnext;
			} else {
				*p = a->hnext;
				ushi_free(a);
				wk->napps--;
				n++;
			}
		}
	return n;
}

void wk_app_free(struct ush_worker *wk)
{
	for (size_t i = 0; i < wk->capps; i++)
		for (struct wk_app *a = wk->apps[i], *next; a; a = next) {
			next = a->hnext;
			ushi_free(a);
		}
	ushi_free(wk->apps);
	ushi_free(wk->owners);
	ushi_free(wk->drops);
	wk->apps = NULL;
	wk->owners = NULL;
	wk->drops = NULL;
	wk->napps = wk->capps = wk->nowners = wk->ndrops = 0;
}

/* The bytes of the files of shuffle (named) in directory d, into *sum.
 * Refuses (USH_EVERSION) a layout this version does not read. */
static int dir_usage(const struct wk_dir *dd,
		     const char *name, uint32_t shuffle, uint64_t *sum)
{
	int fd = openat(dd->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	struct dirent *de;
	struct stat st;
	unsigned p, t;
	char c;
	while ((de = readdir(d))) {
		/* A 0.3 worker's partition file: that layout is not
		 * served, so starting would lose the shuffle. */
		if (sscanf(de->d_name, "p%u.t%u.dat%c", &p, &t, &c) == 3) {
			int ret = ushi_fail(USH_EVERSION, "worker: %s/%s/%s is "
					"a partition file of ushuffled 0.3, "
					"whose layout this version does not "
					"read: drain the worker with the old "
					"version (or drop shuffle %u) before "
					"upgrading", dd->path, name,
					de->d_name, shuffle);
			closedir(d); /* de is d's */
			return ret;
		}
		if (!fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISREG(st.st_mode))
			*sum += (uint64_t)st.st_size;
	}
	closedir(d);
	return 0;
}

int wk_app_usage(struct ush_worker *wk)
{
	for (size_t i = 0; i < wk->nowners; i++) {
		char name[16];
		uint32_t shuffle = wk->owners[i].shuffle;
		snprintf(name, sizeof(name), "s%u", shuffle);
		uint64_t sum = 0;
		for (unsigned k = 0; k < wk->ndirs; k++) {
			int ret = dir_usage(&wk->dirs[k], name, shuffle,
					    &sum);
			if (ret)
				return ret;
		}
		wk->owners[i].bytes = sum;
		struct wk_app *a = wk_app_find(wk, wk->owners[i].app);
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
