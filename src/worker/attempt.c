/*
 * The attempt table: every attempt a writer opened, until its shuffle is
 * dropped: open, abandoned (its writer left without a commit) or
 * committed (durable: wal.c). Open addressing keyed by (shuffle, map,
 * attempt), at most half full; a drop marks its entries gone in place,
 * and growth rebuilds the table without them. Each application's
 * attempts are counted for its quotas as they change state.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"
#include "worker/attempt.h"

#include <errno.h>
#include <stdio.h>

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
		if (e->state != WK_GONE && e->shuffle == shuffle &&
		    e->map == map && e->attempt == attempt)
			return e;
	}
}

/* Counts d more attempts in state of shuffle's application. */
static void count(struct ush_worker *wk, uint32_t shuffle, uint8_t state,
		  int d)
{
	const char *id = wk_owner_of(wk, shuffle);
	struct wk_app *a = id ? wk_app_find(wk, id) : NULL;
	if (state == WK_COMMITTED)
		wk->ncommits += (size_t)d;
	if (a)
		*(state == WK_COMMITTED ? &a->ncommits : &a->natt) +=
			(unsigned)d;
}

/* Counts d more attempts open or committed (state) of shuffle in its
 * owner's live count. */
static void live(struct ush_worker *wk, uint32_t shuffle, uint8_t state,
		 int d)
{
	struct wk_owner *o = state == WK_OPEN || state == WK_COMMITTED ?
		wk_owner_find(wk, shuffle) : NULL;
	if (o)
		o->live += (unsigned)d;
}

void wk_attempt_mark(struct ush_worker *wk, struct wk_attempt *e,
		     enum wk_attempt_state state)
{
	count(wk, e->shuffle, e->state, -1);
	count(wk, e->shuffle, (uint8_t)state, 1);
	live(wk, e->shuffle, e->state, -1);
	live(wk, e->shuffle, (uint8_t)state, 1);
	e->state = (uint8_t)state;
}

void wk_attempt_live(struct ush_worker *wk)
{
	for (size_t i = 0; i < wk->nowners; i++)
		wk->owners[i].live = 0;
	for (size_t i = 0; i < wk->acap; i++)
		live(wk, wk->att[i].shuffle, wk->att[i].state, 1);
}

/* Places e in a table with room (no duplicate there). */
static void slot_put(struct ush_worker *wk, const struct wk_attempt *e)
{
	size_t i = slot_of(wk, e->shuffle, e->map, e->attempt);
	while (wk->att[i].state)
		i = (i + 1) & (wk->acap - 1);
	wk->att[i] = *e;
	wk->nslots++;
}

int wk_attempt_set(struct ush_worker *wk, uint32_t shuffle, uint32_t map,
		   uint32_t attempt, enum wk_attempt_state state)
{
	struct wk_attempt *e = wk_attempt_find(wk, shuffle, map, attempt);
	if (e) {
		wk_attempt_mark(wk, e, state);
		return 0;
	}
	/* At most half the slots used (dropped ones too): probes stay
	 * short. The new table has room for four times the live ones. */
	if (2 * (wk->nslots + 1) > wk->acap) {
		size_t cap = 1024;
		while (cap < 4 * (wk->natt + 1))
			cap *= 2;
		struct wk_attempt *old = wk->att, *t;
		size_t ocap = wk->acap;
		if (!(t = ushi_calloc(cap, sizeof(*t))))
			return -ENOMEM;
		wk->att = t;
		wk->acap = cap;
		wk->nslots = 0;
		for (size_t i = 0; i < ocap; i++)
			if (old[i].state && old[i].state != WK_GONE)
				slot_put(wk, &old[i]);
		ushi_free(old);
	}
	slot_put(wk, &(struct wk_attempt){.shuffle = shuffle, .map = map,
					  .attempt = attempt,
					  .state = (uint8_t)state});
	wk->natt++;
	count(wk, shuffle, (uint8_t)state, 1);
	live(wk, shuffle, (uint8_t)state, 1);
	return 0;
}

/* In place, allocating nothing: a logged drop always takes effect. */
void wk_attempt_drop(struct ush_worker *wk, uint32_t shuffle)
{
	int open = 0, done = 0;
	for (size_t i = 0; i < wk->acap; i++) {
		struct wk_attempt *e = &wk->att[i];
		if (!e->state || e->state == WK_GONE || e->shuffle != shuffle)
			continue;
		e->state == WK_COMMITTED ? done++ : open++;
		e->state = WK_GONE;
		wk->natt--;
	}
	count(wk, shuffle, WK_OPEN, -open);
	count(wk, shuffle, WK_COMMITTED, -done);
}

void wk_attempt_free(struct ush_worker *wk)
{
	ushi_free(wk->att);
	wk->att = NULL;
	wk->natt = wk->nslots = wk->acap = 0;
}
