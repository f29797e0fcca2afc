/*
 * A connection's handshake: HELLO (version, role, application), the
 * AUTH exchange that proves the application's secret (protocol.md
 * §2.8), and what binds the connection to its application: its quotas,
 * and for a writer the claim of its shuffle and attempt.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"
#include "worker/attempt.h"
#include "worker/hello.h"
#include "worker/loop.h"
#include "worker/out.h"
#include "worker/state.h"
#include "net/auth.h"

#include <errno.h>

/*
 * Is shuffle c's application's? An unowned one is claimed for it when
 * claim is set (a writer's first HELLO: durable before it is answered).
 * Fails c with -EACCES for another application's shuffle. Lock held.
 */
int wk_own_shuffle(struct wk_conn *c, uint32_t shuffle, bool claim)
{
	struct ush_worker *wk = c->t->wk;
	const char *owner = wk_owner_of(wk, shuffle);
	if (owner && strcmp(owner, c->app)) {
		wk_conn_fail(c, -EACCES, "shuffle %u belongs to another "
			     "application than '%s'", shuffle, c->app);
		return -EACCES;
	}
	if (owner || !claim)
		return 0;
	if (c->appr->nshuffles >= wk->o.max_app_shuffles) {
		wk_conn_fail(c, -EDQUOT, "application '%s' owns %u shuffles "
			     "here, its quota (--max-app-shuffles): shuffle %u "
			     "refused; drop shuffles it no longer needs",
			     c->app, c->appr->nshuffles, shuffle);
		return -EDQUOT;
	}
	struct wk_rec r = {.type = WK_REC_CLAIM, .shuffle = shuffle};
	memcpy(r.app, c->app, sizeof(r.app));
	/* Counted against the quota while it is logged (the lock is
	 * released meanwhile). */
	c->appr->nshuffles++;
	int ret = wk_rec_log(wk, &r, 1);
	c->appr->nshuffles--;
	return ret ? ret : wk_rec_apply(wk, &r);
}

/* A writer's attempt: refused when committed, open on another
 * connection, or left behind by an earlier writer (its frames are in the
 * files: a reader could not tell them from the new ones). */
static int claim(struct wk_conn *c, const struct proto_hello *h)
{
	struct ush_worker *wk = c->t->wk;
	static const char *why[] = {
		[WK_OPEN] = "is being written by another connection",
		[WK_ABANDONED] = "has frames of an earlier writer that did "
				 "not commit",
		[WK_COMMITTED] = "is committed",
	};
	static const int code[] = {[WK_OPEN] = -EBUSY,
				   [WK_ABANDONED] = -EEXIST,
				   [WK_COMMITTED] = USH_ECOMMITTED};
	pthread_mutex_lock(&wk->lock);
	/* A claim or drop of the shuffle being logged ends first: a drop's
	 * files are removed before a new writer's are made. */
	wk_busy_wait(wk, h->shuffle);
	/* Under the lock: once thread 0 has seen no shuffle left here, no
	 * claim can add one (decommission_pass()). */
	if (atomic_load(&wk->decom)) {
		pthread_mutex_unlock(&wk->lock);
		wk_conn_close_with(c, USH_EDRAINING, "worker decommissioning: "
				   "it takes no new map output (shuffle %u map "
				   "%u attempt %u); place it on the other "
				   "workers", h->shuffle, h->map, h->attempt);
		return USH_EDRAINING;
	}
	unsigned natt = c->appr->natt;
	if (natt >= wk->o.max_app_attempts) {
		pthread_mutex_unlock(&wk->lock);
		wk_conn_fail(c, -EDQUOT, "application '%s' holds %u attempts "
			     "here that are open or were abandoned, its quota "
			     "(--max-app-attempts): shuffle %u map %u attempt "
			     "%u refused; drop shuffles it no longer needs",
			     c->app, natt, h->shuffle, h->map, h->attempt);
		return -EDQUOT;
	}
	int ret = wk_own_shuffle(c, h->shuffle, true);
	if (ret == -EDQUOT) {
		pthread_mutex_unlock(&wk->lock);
		return ret;
	}
	struct wk_attempt *e = ret ? NULL :
				     wk_attempt_find(wk, h->shuffle, h->map,
						     h->attempt);
	int state = e ? e->state : 0;
	if (!ret && !state)
		ret = wk_attempt_set(wk, h->shuffle, h->map, h->attempt,
				     WK_OPEN);
	if (!state && !ret)
		wk_attempt_find(wk, h->shuffle, h->map, h->attempt)->owner =
			c->id;
	c->att_epoch = atomic_load(&wk->drop_epoch);
	pthread_mutex_unlock(&wk->lock);
	/* This thread may still hold files of the shuffle from before a
	 * drop: they go before the new attempt's frames come. */
	wk_thread_check_drops(c->t);
	if (state) {
		wk_conn_fail(c, code[state], "shuffle %u map %u attempt %u %s "
			     "here: a retry needs a new attempt number",
			     h->shuffle, h->map, h->attempt, why[state]);
		return code[state];
	}
	if (ret) {
		if (ret != -EACCES)
			wk_conn_fail(c, ret, "claiming shuffle %u map %u attempt "
				     "%u: %s", h->shuffle, h->map, h->attempt,
				     ush_strerror(ret));
		return ret;
	}
	c->att = (struct wk_attempt){.shuffle = h->shuffle, .map = h->map,
				     .attempt = h->attempt, .state = WK_OPEN,
				     .owner = c->id};
	return 0;
}

static void accept_hello(struct wk_conn *c, const struct proto_hello *h);

/* Fails c for wk_app_seen()'s error. */
void wk_app_refused(struct wk_conn *c, int ret)
{
	if (ret == -EDQUOT)
		wk_conn_fail(c, ret, "the worker holds %u applications, its "
			     "limit (--max-apps): application '%s' refused; an "
			     "application not heard of for --app-ttl is "
			     "removed", c->t->wk->o.max_apps, c->app);
	else
		wk_conn_fail(c, ret, "application table: %s",
			     ush_strerror(ret));
}

/* A HELLO that asks for authentication: the worker proves the secret of
 * its application first (protocol.md §2.8) and waits for the client's
 * proof, computed now so that the secret is not kept. */
static void challenge(struct wk_conn *c, const struct proto_hello *h,
		      const uint8_t *frame)
{
	uint8_t key[USHI_SECRET_MAX];
	size_t hn = USH_FRAME_HDR_SIZE + USHI_PROTO_HELLO_LEN;
	struct proto_auth a = {.step = USHI_AUTH_CHALLENGE};
	int n = wk_secret(c->t->wk, c->app, key);
	if (n <= 0) {
		if (n < 0)
			wk_log(c->t->wk, 0, "secret of application %s: %s",
			       c->app, ush_last_error());
		wk_conn_fail(c, -EACCES, "no %ssecret for application '%s' on "
			     "this worker", n < 0 ? "usable " : "", c->app);
		return;
	}
	int ret = auth_nonce(a.nonce);
	if (!ret)
		ret = auth_mac(key, (size_t)n, AUTH_WORKER, frame, hn, a.nonce,
			       NULL, a.mac);
	if (!ret)
		ret = auth_mac(key, (size_t)n, AUTH_CLIENT, frame, hn, a.nonce,
			       a.mac, c->expect);
	if (!ret)
		ret = mac_derive(key, (size_t)n, frame, hn, a.nonce, c->keys);
	explicit_bzero(key, (size_t)n);
	if (ret) {
		wk_conn_fail(c, ret, "authentication: %s", ush_last_error());
		return;
	}
	c->pending = *h;
	c->auth_wait = true;
	uint8_t b[USHI_PROTO_SMALL];
	wk_conn_send(c, b, proto_put_auth(b, &a));
}

/* The client's proof. Once it checks out, every frame after it, both
 * ways, is sealed (protocol.md §2.9); the ERROR refusing a wrong one
 * is not: its sender would not have the keys to open it. */
void wk_auth(struct wk_conn *c, const uint8_t *payload)
{
	struct proto_auth a;
	proto_get_auth(payload, &a);
	c->auth_wait = false;
	if (a.step != USHI_AUTH_RESPONSE) {
		wk_conn_fail(c, -EPROTO, "AUTH step %u where the client's "
			     "response was due", a.step);
		return;
	}
	if (!auth_mac_equal(a.mac, c->expect)) {
		wk_conn_fail(c, -EACCES, "authentication failed: the client "
			     "of application '%s' does not hold its secret",
			     c->app);
		return;
	}
	int ret = mac_start(&c->mac, c->keys, AUTH_WORKER);
	if (ret) {
		wk_conn_fail(c, ret, "authentication: %s", ush_last_error());
		return;
	}
	c->authed = true;
	accept_hello(c, &c->pending);
}

/* A client that hangs up after the worker's proof without its own:
 * one that holds another secret (it found the worker's proof wrong),
 * as in a rotation half done. A failure as a wrong proof is. */
void wk_auth_abandoned(struct wk_conn *c)
{
	c->auth_wait = false;
	wk_count_error(c->t->wk, -EACCES);
	wk_log(c->t->wk, 0, "peer %s: authentication failed: the client of "
	       "application '%s' closed the connection after the worker's "
	       "proof, without its own (does it hold another secret?)",
	       c->peer, c->app);
}

void wk_hello(struct wk_conn *c, const struct ushi_frame *f,
		  const uint8_t *frame)
{
	const uint8_t *payload = frame + USH_FRAME_HDR_SIZE;
	struct ush_worker *wk = c->t->wk;
	struct proto_hello h;
	proto_get_hello(f, payload, &h);
	if (h.version != USHI_PROTO_VERSION) {
		wk_conn_fail(c, USH_EVERSION, "protocol version %u is not "
			     "supported; this worker speaks version %u",
			     h.version, USHI_PROTO_VERSION);
		return;
	}
	if (f->payload_len != USHI_PROTO_HELLO_LEN) {
		/* Version 3's length, with this version in it. */
		wk_conn_fail(c, -EPROTO, "HELLO of %u bytes (version %u's has "
			     "%u)", f->payload_len, USHI_PROTO_VERSION,
			     USHI_PROTO_HELLO_LEN);
		return;
	}
	if (h.role < USHI_ROLE_WRITER || h.role > USHI_ROLE_ADMIN) {
		wk_conn_fail(c, -EPROTO, "HELLO with unknown role %u", h.role);
		return;
	}
	if (!proto_app_ok(h.app)) {
		wk_conn_fail(c, -EINVAL, "HELLO with a bad application id (not "
			     "1..64 characters of A-Z a-z 0-9 . _ : -)");
		return;
	}
	memcpy(c->app, h.app, sizeof(c->app));
	if (h.flags & ~USHI_HELLO_AUTH) {
		wk_conn_fail(c, -EPROTO, "HELLO with unknown flags 0x%x",
			     h.flags);
		return;
	}
	if (h.flags & USHI_HELLO_AUTH) {
		challenge(c, &h, frame);
		return;
	}
	if (!wk->o.insecure) {
		wk_conn_fail(c, -EACCES, "authentication required: the client "
			     "of application '%s' proves no secret (give it the "
			     "application's secret: USHUFFLE_SECRET, "
			     "--secret-file or ush_auth_secret())", c->app);
		return;
	}
	accept_hello(c, &h);
}

/* The client proved the secret (or the worker is --insecure): c is bound
 * to h's application from now on, within its quotas. */
static void accept_hello(struct wk_conn *c, const struct proto_hello *hp)
{
	struct ush_worker *wk = c->t->wk;
	struct proto_hello h = *hp;
	pthread_mutex_lock(&wk->lock);
	struct wk_app *a = NULL;
	int ret = wk_app_seen(wk, c->app, &a);
	unsigned n = a ? a->nconns : 0;
	if (a && n < wk->o.max_app_conns) {
		a->nconns++;
		c->appr = a;
	}
	pthread_mutex_unlock(&wk->lock);
	if (ret) {
		wk_app_refused(c, ret);
		return;
	}
	if (!c->appr) {
		wk_conn_fail(c, -EDQUOT, "application '%s' holds %u "
			     "connections here, its quota (--max-app-conns): "
			     "connection refused", c->app, n);
		return;
	}
	if (h.role == USHI_ROLE_WRITER && claim(c, &h))
		return;
	c->role = h.role;
	struct proto_hello r = {USHI_PROTO_VERSION, h.role, wk->o.window,
				wk->o.max_frame, 0, 0, 0, "",
				c->authed ? USHI_HELLO_AUTH : 0, {0}};
	uint8_t b[USHI_PROTO_SMALL];
	wk_conn_send(c, b, proto_put_hello(b, &r));
	if (h.role == USHI_ROLE_WRITER)
		wk_log(wk, 1, "peer %s: HELLO as writer of shuffle %u map %u "
		       "attempt %u of application %s", c->peer, h.shuffle,
		       h.map, h.attempt, c->app);
	else
		wk_log(wk, 1, "peer %s: HELLO as %s of application %s",
		       c->peer, h.role == USHI_ROLE_READER ? "reader" : "admin",
		       c->app);
}
