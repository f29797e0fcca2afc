/* Applications and the shuffles they own (app.c). */
#ifndef USHI_WK_APP_H
#define USHI_WK_APP_H

#include "net/proto.h"

#include <stdatomic.h>
#include <stdint.h>

struct ush_worker;

/* An application: its last sign of life and what it holds against its
 * quotas. Allocated one by one, so a connection may keep a pointer to its
 * own; freed only when it has no connection and no shuffle left. */
struct wk_app {
	struct wk_app *hnext; /* its chain in wk->apps */
	char id[USHI_PROTO_APP_MAX + 1];
	uint64_t seen_ns;   /* last heard of */
	unsigned nconns;    /* connections past HELLO (lock) */
	unsigned nshuffles; /* shuffles it owns (lock) */
	unsigned natt;      /* attempts of its shuffles open or abandoned
			       (lock) */
	unsigned ncommits;  /* attempts of its shuffles committed (lock) */
	/* DATA bytes stored here for it: its writers add each frame as it
	 * is taken (no lock: an atomic on the data path); a drop takes its
	 * shuffle's bytes off. */
	atomic_uint_fast64_t bytes;
	/* Bytes its FETCHes hold while planned (fetch.c; no lock: each
	 * thread's FETCHes add and take theirs back). */
	atomic_uint_fast64_t fetch_bytes;
	/* Bytes its FETCH streams read ahead or queue to send (fetch.c,
	 * out.c): past --max-app-fetch-bytes its streams read one run at a
	 * time. */
	atomic_uint_fast64_t fetch_queued;
};

struct wk_owner {
	uint32_t shuffle;
	char app[USHI_PROTO_APP_MAX + 1];
	uint64_t bytes; /* DATA bytes of the shuffle settled by its writers
			   (at commit or close), or found at start */
	unsigned live;  /* its attempts open or committed (attempt.c): none
			   left, its files hold nothing a reader may ask
			   for */
};

/* The caller holds wk->lock around each of these but wk_app_usage() (at
 * start) and wk_secret(). */
const char *wk_owner_of(struct ush_worker *wk, uint32_t shuffle);
int wk_owner_set(struct ush_worker *wk, uint32_t shuffle, const char *app);
void wk_owner_del(struct ush_worker *wk, uint32_t shuffle);
/* The application is alive now: its entry in *out (if out), made if new
 * while the worker holds fewer than --max-apps. Returns 0, -EDQUOT
 * (that limit) or -ENOMEM. */
int wk_app_seen(struct ush_worker *wk, const char *app, struct wk_app **out);
/* The DATA bytes stored for all applications. */
uint64_t wk_app_bytes(struct ush_worker *wk);
/* The application's entry (made if new, whatever --max-apps says: a
 * claim, replayed or by a connection of an application held; alive
 * now), or NULL. */
struct wk_app *wk_app_get(struct ush_worker *wk, const char *app);
/* The application's entry, or NULL; changes nothing. */
struct wk_app *wk_app_find(struct ush_worker *wk, const char *app);
struct wk_owner *wk_owner_find(struct ush_worker *wk, uint32_t shuffle);
/* At start: the bytes each owned shuffle holds in --dir. Fails with
 * USH_EVERSION for a shuffle stored in an older worker's layout. */
int wk_app_usage(struct ush_worker *wk);
/* The secret of app (its file in secrets_dir, else the shared one) into
 * key (USHI_SECRET_MAX bytes): its length, 0 for none, or an error. No
 * lock needed. */
int wk_secret(struct ush_worker *wk, const char *app, uint8_t *key);
/* The shuffles of applications silent at now for the TTL, up to batch,
 * into *gone (allocated here); returns how many, and *more those left
 * over. */
size_t wk_app_silent_shuffles(struct ush_worker *wk, uint64_t now,
			      size_t batch, uint32_t **gone, size_t *more);
/* Frees every application silent at now that owns nothing (the drops
 * before took what they owned); returns how many. */
size_t wk_app_free_silent(struct ush_worker *wk, uint64_t now);
void wk_app_free(struct ush_worker *wk);

#endif
