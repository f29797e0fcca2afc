/*
 * One connection: reassembles frames from the recv chunks (or parses
 * them where they landed: a writer's in-place receive, below), checks
 * them (bounds before anything is allocated, then the CRC), and
 * dispatches them by type. Malformed input gets an ERROR frame, one log
 * line and a closed connection; nothing else is touched.
 */
#define _GNU_SOURCE
#include "worker/wk.h"
#include "net/auth.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *type_name(unsigned type)
{
	static const char *names[] = {"?", "DATA", "HELLO", "MAPPER_END",
				      "FETCH", "ACK", "ERROR", "DROP",
				      "MANIFEST", "FETCH_END", "PAD",
				      "HEARTBEAT", "AUTH"};
	return type < ARRAY_SIZE(names) ? names[type] : "unknown";
}

bool wk_conn_busy(const struct wk_conn *c)
{
	/* A writer's attempt open or committed: the writer finishes its
	 * push and commit, then closes (an ERROR between its commit ACK and
	 * its close could fail a commit that waits on other workers). */
	return c->out.head || c->sending || c->fetch || c->hlen || c->sneed ||
	       c->qn || c->rlen || (c->role == USHI_ROLE_WRITER && c->att.state);
}

static void send_done(struct ushi_op *op, int res)
{
	struct wk_conn *c = op->owner;
	struct wk_out *o = c->out.head;
	c->out.head = o->next;
	if (!c->out.head)
		c->out.tail = NULL;
	wk_out_free(c->t, o);
	c->sending = false;
	if (res > 0)
		WK_COUNT(c->t->wk, bytes_out, (unsigned)res);
	c->t_active = ushi_now_ns();
	if (res < 0 && !c->eof) {
		c->eof = true;
		c->rerr = res;
	}
}

/* Reads ahead and queues what the stream read; frees it once it ended. */
static void fetch_pump(struct wk_conn *c)
{
	struct wk_fetch *fe = c->fetch;
	int ret = wk_fetch_pump(fe, &c->out);
	if (ret > 0) {
		wk_fetch_free(fe);
		c->fetch = NULL;
	} else if (ret) {
		wk_conn_fail(c, ret, "FETCH of shuffle %u partition %u: %s",
			     fe->shuffle, fe->partition,
			     ret == USH_ECORRUPT ? "the log is shorter than its "
						   "index" : ush_strerror(ret));
	}
}

void wk_conn_pump(struct wk_conn *c)
{
	if (c->closed)
		return;
	/* A stream reads ahead while its output is sent. */
	if (c->fetch && !c->failed)
		fetch_pump(c);
	if (c->sending)
		return;
	if (!c->out.head && c->credit && !c->failed) {
		/* Credits coalesce while a send is in flight. */
		uint8_t b[USHI_PROTO_SMALL];
		struct proto_ack a = {USHI_ACK_CREDIT, 0, c->credit};
		c->credit = 0;
		wk_conn_send(c, b, proto_put_ack(b, 0, 0, 0, &a));
	}
	if (!c->out.head)
		return;
	struct ushi_op *op;
	if (ring_op_get(c->t->ring, &op)) {
		c->eof = true;
		return;
	}
	op->kind = OP_SEND;
	op->cb = send_done;
	op->owner = c;
	op->io.addr = c->out.head->ptr;
	op->io.len = c->out.head->len;
	op->io.fd = c->fd;
	op->send.timeout_ms = WK_SEND_TIMEOUT_MS;
	c->sending = true;
	ring_start(c->t->ring, op);
}

/*
 * Is shuffle c's application's? An unowned one is claimed for it when
 * claim is set (a writer's first HELLO: durable before it is answered).
 * Fails c with -EACCES for another application's shuffle. Lock held.
 */
static int own_shuffle(struct wk_conn *c, uint32_t shuffle, bool claim)
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
	int ret = wk_rec_log(c->t, &r, 1);
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
	int ret = own_shuffle(c, h->shuffle, true);
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
	c->att = (struct wk_attempt){h->shuffle, h->map, h->attempt, WK_OPEN,
				     c->id};
	return 0;
}

/* c's attempt in the table, if it is still the one c opened: a DROP
 * forgets it, and a later writer may then open it anew. Lock held. */
static struct wk_attempt *mine(struct wk_conn *c)
{
	struct wk_attempt *e = wk_attempt_find(c->t->wk, c->att.shuffle,
					       c->att.map, c->att.attempt);
	return e && e->state == WK_OPEN && e->owner == c->id ? e : NULL;
}

/* The DATA bytes c stored for its attempt join its shuffle's count
 * (kept: the attempt is still c's, so the shuffle was not dropped), or
 * leave its application's (the shuffle was dropped with them). Lock
 * held. */
static void settle(struct wk_conn *c, bool kept)
{
	if (!c->att_bytes)
		return;
	struct wk_owner *o = kept ? wk_owner_find(c->t->wk, c->att.shuffle) :
				    NULL;
	if (o)
		o->bytes += c->att_bytes;
	else
		atomic_fetch_sub(&c->appr->bytes, c->att_bytes);
	c->att_bytes = 0;
}

void wk_conn_leave(struct wk_conn *c)
{
	struct ush_worker *wk = c->t->wk;
	if (!c->appr)
		return;
	pthread_mutex_lock(&wk->lock);
	struct wk_attempt *e = c->att.state == WK_OPEN ? mine(c) : NULL;
	if (e)
		wk_attempt_mark(wk, e, WK_ABANDONED);
	settle(c, e != NULL);
	c->appr->nconns--;
	c->appr = NULL;
	pthread_mutex_unlock(&wk->lock);
	c->att.state = 0;
}

static void accept_hello(struct wk_conn *c, const struct proto_hello *h);

/* Fails c for wk_app_seen()'s error. */
static void app_refused(struct wk_conn *c, int ret)
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

/* The client's proof. */
static void auth(struct wk_conn *c, const uint8_t *payload)
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
	c->authed = true;
	accept_hello(c, &c->pending);
}

/* A client that hangs up after the worker's proof without its own:
 * one that holds another secret (it found the worker's proof wrong),
 * as in a rotation half done. A failure as a wrong proof is. */
static void auth_abandoned(struct wk_conn *c)
{
	c->auth_wait = false;
	wk_count_error(c->t->wk, -EACCES);
	wk_log(c->t->wk, 0, "peer %s: authentication failed: the client of "
	       "application '%s' closed the connection after the worker's "
	       "proof, without its own (does it hold another secret?)",
	       c->peer, c->app);
}

static void hello(struct wk_conn *c, const struct ushi_frame *f,
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
		app_refused(c, ret);
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

/* Is c's attempt still its own? Only a DROP since it was last known
 * can have taken it, so the lock is taken only then. */
static bool still_mine(struct wk_conn *c)
{
	struct ush_worker *wk = c->t->wk;
	unsigned epoch = atomic_load(&wk->drop_epoch);
	if (epoch == c->att_epoch)
		return true;
	pthread_mutex_lock(&wk->lock);
	bool ok = mine(c) != NULL;
	pthread_mutex_unlock(&wk->lock);
	c->att_epoch = epoch;
	if (!ok)
		c->att.state = 0;
	return ok;
}

/* A writer's frames belong to the attempt it named at HELLO, while that
 * attempt is still its own. */
static bool own_attempt(struct wk_conn *c, const struct ushi_frame *f)
{
	if (c->att.state == WK_OPEN && f->shuffle == c->att.shuffle &&
	    f->map == c->att.map && f->attempt == c->att.attempt &&
	    still_mine(c))
		return true;
	wk_conn_fail(c, -EPROTO, "%s frame of shuffle %u map %u attempt %u "
		     "from the writer of shuffle %u map %u attempt %u%s",
		     f->type == USHI_FRAME_DATA ? "DATA" : "MAPPER_END",
		     f->shuffle, f->map, f->attempt, c->att.shuffle,
		     c->att.map, c->att.attempt,
		     c->att.state == WK_COMMITTED ? " (committed)" :
		     c->att.state ? "" : " (dropped since)");
	return false;
}

static void ack(struct wk_conn *c, const struct ushi_frame *f, uint32_t kind,
		int status)
{
	uint8_t b[USHI_PROTO_SMALL];
	struct proto_ack a = {kind, status, 0};
	wk_conn_send(c, b, proto_put_ack(b, f->shuffle, f->map, f->attempt,
					 &a));
}

/* MAPPER_END: make the attempt's frames durable, log, then ACK. */
static void commit(struct wk_conn *c, const struct ushi_frame *f)
{
	struct wk_thread *t = c->t;
	struct ush_worker *wk = t->wk;
	if (!own_attempt(c, f))
		return;
	uint64_t t0 = ushi_now_ns();
	int ret = wk_store_sync_shuffle(t, f->shuffle);
	if (ret) {
		wk_conn_fail(c, ret, "syncing before the commit of shuffle "
			     "%u map %u attempt %u: %s", f->shuffle, f->map,
			     f->attempt, ush_strerror(ret));
		return;
	}
	/* The application too: should the shuffle's claim record be
	 * damaged, a replay takes its owner from here (wal.c). */
	struct wk_rec r = {.type = WK_REC_COMMIT, .shuffle = f->shuffle,
			   .map = f->map, .attempt = f->attempt};
	memcpy(r.app, c->app, sizeof(r.app));
	pthread_mutex_lock(&wk->lock);
	struct wk_attempt *e = mine(c);
	unsigned ncommits = c->appr->ncommits;
	if (!e) /* dropped meanwhile */
		ret = -ENOENT;
	else if (ncommits >= wk->o.max_app_commits)
		ret = -EDQUOT;
	else if (!(ret = wk_rec_log(t, &r, 1)))
		wk_attempt_mark(wk, e, WK_COMMITTED);
	if (!ret || !e)
		settle(c, e != NULL);
	pthread_mutex_unlock(&wk->lock);
	if (ret == -EDQUOT) {
		wk_conn_fail(c, ret, "application '%s' has %u attempts "
			     "committed here, its quota (--max-app-commits): "
			     "the commit of shuffle %u map %u attempt %u "
			     "refused; drop shuffles it no longer needs",
			     c->app, ncommits, f->shuffle, f->map, f->attempt);
		return;
	}
	if (ret) {
		wk_conn_fail(c, ret, "commit of shuffle %u map %u attempt %u: "
			     "%s", f->shuffle, f->map, f->attempt,
			     ret == -ENOENT ? "the shuffle was dropped" :
					      ush_strerror(ret));
		return;
	}
	c->att.state = WK_COMMITTED;
	wk_count_sync(wk, ushi_now_ns() - t0);
	WK_COUNT(wk, commits, 1);
	wk_log(wk, 2, "peer %s: shuffle %u map %u attempt %u committed",
	       c->peer, f->shuffle, f->map, f->attempt);
	ack(c, f, USHI_ACK_COMMIT, 0);
}

static void drop(struct wk_conn *c, const struct ushi_frame *f)
{
	struct wk_thread *t = c->t;
	struct ush_worker *wk = t->wk;
	pthread_mutex_lock(&wk->lock);
	int ret = own_shuffle(c, f->shuffle, false);
	bool owned = !ret && wk_owner_of(wk, f->shuffle);
	if (owned)
		ret = wk_drop_locked(t, &f->shuffle, 1);
	pthread_mutex_unlock(&wk->lock);
	if (ret == -EACCES)
		return;
	if (ret) {
		wk_conn_fail(c, ret, "DROP of shuffle %u: %s", f->shuffle,
			     ush_strerror(ret));
		return;
	}
	/* Unowned: nothing durable to forget, files only (if any). */
	wk_drop_files(t, f->shuffle);
	WK_COUNT(wk, drops, owned);
	if (owned)
		wk_log(wk, 1, "peer %s: application %s dropped shuffle %u",
		       c->peer, c->app, f->shuffle);
	ack(c, f, USHI_ACK_DROP, 0);
}

static void heartbeat(struct wk_conn *c, const struct ushi_frame *f)
{
	struct ush_worker *wk = c->t->wk;
	pthread_mutex_lock(&wk->lock);
	int ret = wk_app_seen(wk, c->app, NULL);
	pthread_mutex_unlock(&wk->lock);
	if (ret)
		app_refused(c, ret);
	else
		ack(c, f, USHI_ACK_HEARTBEAT, 0);
}

/* A reader fetches only its application's shuffles. */
static int fetch(struct wk_conn *c, const struct ushi_frame *f,
		 const uint8_t *payload)
{
	struct ush_worker *wk = c->t->wk;
	pthread_mutex_lock(&wk->lock);
	int ret = own_shuffle(c, f->shuffle, false);
	pthread_mutex_unlock(&wk->lock);
	if (ret)
		return 0;
	char msg[256] = "";
	ret = wk_fetch_start(c->t, f, payload, &c->out, &c->fetch, msg,
			     sizeof(msg));
	if (ret && *msg) {
		wk_conn_fail(c, ret, "FETCH of partition %u: %s", f->partition,
			     msg);
		return 0;
	}
	if (!ret)
		wk_log(wk, 2, "peer %s: FETCH shuffle %u partition %u: %u "
		       "attempts, %u frames", c->peer, f->shuffle,
		       f->partition, c->fetch->nm, c->fetch->nent);
	return ret;
}

/* Counts n more bytes stored for c's application, within its quota. */
static bool take_bytes(struct wk_conn *c, uint64_t n)
{
	uint64_t max = c->t->wk->o.max_app_bytes;
	uint64_t had = atomic_fetch_add(&c->appr->bytes, n);
	if (had + n <= max)
		return true;
	atomic_fetch_sub(&c->appr->bytes, n);
	wk_conn_fail(c, -EDQUOT, "application '%s' stores %llu bytes here, "
		     "its quota is %llu (--max-app-bytes): a frame of %llu "
		     "bytes of shuffle %u refused; drop shuffles it no longer "
		     "needs", c->app, (unsigned long long)had,
		     (unsigned long long)max, (unsigned long long)n,
		     c->att.shuffle);
	return false;
}

/* The frames a connection of role may send once it said HELLO. */
static bool role_sends(uint32_t role, unsigned type)
{
	switch (type) {
	case USHI_FRAME_DATA:
	case USHI_FRAME_MAPPER_END:
		return role == USHI_ROLE_WRITER;
	case USHI_FRAME_FETCH:
		return role == USHI_ROLE_READER;
	case USHI_FRAME_DROP:
		return role == USHI_ROLE_WRITER || role == USHI_ROLE_ADMIN;
	case USHI_FRAME_HEARTBEAT:
		return true;
	}
	return false;
}

/*
 * Whether c may send a frame of this type now, decided from its header,
 * before any of its payload is kept: until the client proved its secret
 * only a HELLO, then the AUTH it asked for (fixed, small lengths), so a
 * connection that proved nothing holds no more than those; after it,
 * only what its role sends. Fails c otherwise.
 */
static bool type_ok(struct wk_conn *c, unsigned type)
{
	if (c->auth_wait) {
		if (type == USHI_FRAME_AUTH)
			return true;
		wk_conn_fail(c, -EPROTO, "%s frame where the client's AUTH was "
			     "due", type_name(type));
	} else if (!c->role) {
		if (type == USHI_FRAME_HELLO)
			return true;
		wk_conn_fail(c, -EPROTO, "%s frame before HELLO",
			     type_name(type));
	} else if (type == USHI_FRAME_HELLO) {
		wk_conn_fail(c, -EPROTO, "a second HELLO: a connection stays "
			     "with the application it said HELLO for ('%s')",
			     c->app);
	} else if (!role_sends(c->role, type)) {
		wk_conn_fail(c, -EPROTO, "unexpected %s frame",
			     type_name(type));
	} else {
		return true;
	}
	return false;
}

static int rb_note(struct wk_conn *c, const struct ushi_frame *f,
		   const uint8_t *frame);

static void dispatch(struct wk_conn *c, const struct ushi_frame *f,
		     const uint8_t *frame)
{
	WK_COUNT(c->t->wk, frames_in, 1);
	c->flast = (uint32_t)proto_size(f);
	if (frame_check(frame, f)) {
		wk_conn_fail(c, USH_ECRC, "%s frame (shuffle %u partition %u "
			     "seq %llu): CRC32C mismatch", type_name(f->type),
			     f->shuffle, f->partition,
			     (unsigned long long)f->seq);
		return;
	}
	/* type_ok() let this type through at its header. */
	const uint8_t *payload = frame + USH_FRAME_HDR_SIZE;
	if (c->auth_wait) {
		auth(c, payload);
		return;
	}
	if (!c->role) {
		hello(c, f, frame);
		return;
	}
	int ret;
	switch (f->type) {
	case USHI_FRAME_DATA:
		if (f->partition >= USHI_PARTS_MAX) {
			wk_conn_fail(c, -EPROTO, "DATA frame of partition %u: "
				     "partitions are below %u", f->partition,
				     USHI_PARTS_MAX);
			break;
		}
		if (!own_attempt(c, f) || !take_bytes(c, proto_size(f)))
			break;
		ret = c->rb ? rb_note(c, f, frame) :
			      wk_store_append(c->t, f, frame);
		if (ret)
			wk_conn_fail(c, ret, "storing shuffle %u partition %u: "
				     "%s", f->shuffle, f->partition,
				     ush_strerror(ret));
		else
			c->credit += proto_size(f), c->att_bytes += proto_size(f);
		if (ret)
			atomic_fetch_sub(&c->appr->bytes, proto_size(f));
		break;
	case USHI_FRAME_MAPPER_END:
		commit(c, f);
		break;
	case USHI_FRAME_FETCH:
		if (c->fetch) {
			wk_conn_fail(c, -EPROTO, "unexpected FETCH frame: one "
				     "is being served");
			break;
		}
		ret = fetch(c, f, payload);
		if (ret)
			wk_conn_fail(c, ret, "FETCH of shuffle %u partition "
				     "%u: %s", f->shuffle, f->partition,
				     ush_strerror(ret));
		break;
	case USHI_FRAME_DROP:
		drop(c, f);
		break;
	case USHI_FRAME_HEARTBEAT:
		heartbeat(c, f);
		break;
	}
}

/* Parses a complete header; fails the connection if it breaks a rule
 * or names a frame c may not send now. */
static bool header_ok(struct wk_conn *c, const uint8_t *h)
{
	const char *why;
	int ret = proto_header(h, &c->f, c->t->wk->o.max_frame, false, &why);
	if (ret)
		wk_conn_fail(c, ret, "bad frame header: %s", why);
	return !ret && type_ok(c, c->f.type);
}

/* Makes the stage hold n bytes, keeping the first c->sgot. */
static bool stage_grow(struct wk_conn *c, size_t n)
{
	if (n <= c->scap)
		return true;
	size_t cap = pow2_ceil(n);
	cap = cap < c->sneed ? cap : c->sneed;
	uint8_t *p = ushi_malloc(cap);
	if (!p) {
		wk_conn_fail(c, -ENOMEM, "no memory for %zu bytes of a %zu-byte "
			     "frame", cap, c->sneed);
		return false;
	}
	if (c->sgot)
		memcpy(p, c->stage, c->sgot);
	ushi_free(c->stage);
	c->stage = p;
	c->scap = cap;
	return true;
}

/*
 * A frame that did not come whole in one chunk. Its header alone may
 * reserve up to the window (what a writer may have unacknowledged, so a
 * frame a writer sends without waiting); a larger frame (a record above
 * the window, sent once nothing else is unacknowledged) grows its stage
 * as its bytes arrive. So an announced length costs nothing that does
 * not come (proto_header bounds it by max_frame or the control limit).
 */
static bool stage_start(struct wk_conn *c, const uint8_t *h, size_t avail)
{
	size_t need = proto_size(&c->f), window = c->t->wk->o.window;
	size_t first = need <= window ? need : USH_FRAME_HDR_SIZE + avail;
	c->sneed = need;
	c->sgot = 0;
	if (!stage_grow(c, first))
		return false;
	memcpy(c->stage, h, USH_FRAME_HDR_SIZE);
	c->sgot = USH_FRAME_HDR_SIZE;
	return true;
}

/* After a frame: a stage above the window (an outsized frame's) is not
 * kept for a connection that may stay quiet for long. */
static void stage_done(struct wk_conn *c)
{
	if (c->scap > c->t->wk->o.window) {
		ushi_free(c->stage);
		c->stage = NULL;
		c->scap = 0;
	}
}

/* Consumes n bytes of the stream. */
static void feed(struct wk_conn *c, const uint8_t *p, size_t n)
{
	while (n && !c->failed) {
		if (c->sneed) {
			size_t k = c->sneed - c->sgot;
			k = k < n ? k : n;
			if (!stage_grow(c, c->sgot + k))
				return;
			memcpy(c->stage + c->sgot, p, k);
			c->sgot += k;
			p += k;
			n -= k;
			if (c->sgot == c->sneed) {
				c->sneed = 0;
				dispatch(c, &c->f, c->stage);
				stage_done(c);
			}
			continue;
		}
		const uint8_t *h = p;
		if (c->hlen || n < USH_FRAME_HDR_SIZE) {
			size_t k = USH_FRAME_HDR_SIZE - c->hlen;
			k = k < n ? k : n;
			memcpy(c->hdr + c->hlen, p, k);
			c->hlen += (uint32_t)k;
			p += k;
			n -= k;
			if (c->hlen < USH_FRAME_HDR_SIZE)
				return;
			c->hlen = 0;
			h = c->hdr;
		} else {
			p += USH_FRAME_HDR_SIZE;
			n -= USH_FRAME_HDR_SIZE;
		}
		if (!header_ok(c, h))
			return;
		size_t plen = c->f.payload_len;
		if (h != c->hdr && plen <= n) {
			/* The whole frame is in this chunk: no staging. */
			dispatch(c, &c->f, h);
			p += plen;
			n -= plen;
		} else if (!plen) {
			dispatch(c, &c->f, h);
		} else if (!stage_start(c, h, n)) {
			return;
		}
	}
}

static void give_back(struct wk_thread *t, uint16_t bid)
{
	io_uring_buf_ring_add(t->br, t->bufs + (size_t)bid * WK_BUF_SIZE,
			      WK_BUF_SIZE, bid, io_uring_buf_ring_mask(WK_BUFS),
			      0);
	io_uring_buf_ring_advance(t->br, 1);
}

/* ------------------------------------------------- in-place receive */

/* A flush-size buffer, if the pool keeps a quarter for the logs' own
 * buffers and FETCH reads after it; wait: for one of the writes in
 * flight to give one back. */
static struct ushi_buf *rb_take(struct wk_thread *t, bool wait)
{
	struct ushi_pool *p = ring_pool(t->ring);
	for (;;) {
		struct ushi_buf *b =
			p->idle_bytes >= p->bytes / 4 + t->wk->o.flush_size ?
			pool_get(p, t->flush_order) : NULL;
		if (b || !wait || !t->writes || ring_reap(t->ring, 1))
			return b;
	}
}

/* DATA frame f lies at frame in rb: noted, written with rb. */
static int rb_note(struct wk_conn *c, const struct ushi_frame *f,
		   const uint8_t *frame)
{
	if (c->rn == c->rcap) {
		struct wk_rent *e = ushi_array_grow(c->rent, &c->rcap,
						    sizeof(*e));
		if (!e)
			return -ENOMEM;
		c->rent = e;
	}
	c->rent[c->rn++] = (struct wk_rent){
		.rel = (uint32_t)(frame - c->rb->data),
		.len = (uint32_t)proto_size(f),
		.partition = f->partition,
		.map = f->map,
		.attempt = f->attempt,
	};
	return 0;
}

/* Hands b (which held the c->rlen bytes of rb) to the log with the DATA
 * frames noted in it, or back to the pool when it holds none, or when
 * the attempt was dropped since (its frames go with it). */
static void rb_write(struct wk_conn *c, struct ushi_buf *b)
{
	int ret = 0;
	if (c->rn && still_mine(c))
		ret = wk_store_region(c->t, c->att.shuffle, b, c->rlen,
				      c->rent, c->rn);
	else
		pool_put(ring_pool(c->t->ring), b);
	c->rn = 0;
	if (ret)
		wk_conn_fail(c, ret, "storing shuffle %u: %s", c->att.shuffle,
			     ush_strerror(ret));
}

/* Back to copying (a frame larger than rb, or no buffer to go on in):
 * rb's frames are written, the bytes after them fed from a copy. */
static void rb_leave(struct wk_conn *c)
{
	uint32_t tail = c->rlen - c->rpos;
	uint8_t *m = tail ? ushi_malloc(tail) : NULL;
	if (tail && !m) {
		wk_conn_fail(c, -ENOMEM, "no memory for %u bytes received",
			     tail);
		return;
	}
	if (tail)
		memcpy(m, c->rb->data + c->rpos, tail);
	struct ushi_buf *b = c->rb;
	c->rb = NULL;
	rb_write(c, b);
	c->rlen = c->rpos = 0;
	feed(c, m, tail);
	ushi_free(m);
}

/* Writes rb's frames where they lie and goes on in another buffer with
 * the bytes not yet parsed (a copy of less than a frame), or moves those
 * to rb's start when it holds no frame to write. */
static void rb_flush(struct wk_conn *c)
{
	struct ushi_buf *b = c->rb, *nb;
	uint32_t tail = c->rlen - c->rpos;
	if (!c->rn) {
		memmove(b->data, b->data + c->rpos, tail);
	} else if ((nb = rb_take(c->t, true))) {
		memcpy(nb->data, b->data + c->rpos, tail);
		c->rb = nb;
		rb_write(c, b);
	} else {
		rb_leave(c);
		return;
	}
	c->rpos = 0;
	c->rlen = tail;
}

/* Parses the frames that arrived whole in rb, where they lie. */
static void rb_parse(struct wk_conn *c)
{
	while (c->rb && !c->failed) {
		uint8_t *p = c->rb->data + c->rpos;
		uint32_t avail = c->rlen - c->rpos, cap = c->rb->cap;
		if (avail < USH_FRAME_HDR_SIZE) {
			if (c->rlen == cap)
				rb_flush(c);
			return;
		}
		if (!header_ok(c, p))
			return;
		size_t need = proto_size(&c->f);
		if (need > cap) {
			rb_leave(c);
			return;
		}
		if (avail < need) {
			if (c->rpos + need > cap)
				rb_flush(c);
			return;
		}
		/* The attempt's frames are written before it commits. */
		if (c->f.type == USHI_FRAME_MAPPER_END && c->rn) {
			rb_flush(c);
			continue;
		}
		dispatch(c, &c->f, p);
		c->rpos += (uint32_t)need;
		if (c->rpos == c->rlen && !c->rn)
			c->rpos = c->rlen = 0;
	}
}

void wk_conn_rb_free(struct wk_conn *c)
{
	if (c->rb)
		pool_put(ring_pool(c->t->ring), c->rb);
	c->rb = NULL;
	c->rlen = c->rpos = 0;
	c->rn = 0;
}

void wk_conn_rb_arm(struct wk_conn *c)
{
	bool writing = c->role == USHI_ROLE_WRITER &&
		       c->att.state == WK_OPEN && !c->failed && !c->eof;
	/* The start of a frame after a commit goes on in the copy. */
	if (c->rb && !writing && !c->failed && !c->eof &&
	    c->rlen > c->rpos)
		rb_leave(c);
	else if (c->rb && !writing)
		wk_conn_rb_free(c);
	else if (!c->rb && writing && !c->hlen && !c->sneed && !c->qn &&
		 /* Not for a stream of frames a buffer barely holds. */
		 (size_t)c->flast * 2 <= c->t->wk->o.flush_size)
		c->rb = rb_take(c->t, false);
}

void wk_conn_process(struct wk_conn *c)
{
	struct wk_thread *t = c->t;
	if (c->rgot) {
		c->rgot = false;
		if (!c->failed && !c->closed)
			rb_parse(c);
		else
			c->rlen = c->rpos = 0; /* read on and dropped */
	}
	while (c->qn) {
		struct wk_chunk ch = c->q[c->qhead];
		c->qhead = (c->qhead + 1) % WK_BUFS;
		c->qn--;
		if (!c->failed && !c->closed)
			feed(c, t->bufs + (size_t)ch.bid * WK_BUF_SIZE, ch.len);
		give_back(t, ch.bid);
	}
	if (c->eof && c->auth_wait && !c->failed)
		auth_abandoned(c);
	else if (c->eof && c->rerr && c->rerr != -ECONNRESET && !c->failed)
		wk_log(t->wk, 1, "peer %s: %s", c->peer, ush_strerror(c->rerr));
	else if (c->eof && (c->hlen || c->sneed || c->rlen > c->rpos) &&
		 !c->failed)
		wk_log(t->wk, 1, "peer %s: closed in the middle of a frame",
		       c->peer);
	if (c->eof)
		c->rerr = 0, c->hlen = 0, c->sneed = 0;
}
