/*
 * Protocol dispatch: which frames a connection may send now (decided at
 * the header), and what each complete, checked frame does: a writer's
 * DATA (checked against its attempt and its application's quota; the
 * receive path stores it), MAPPER_END (sync, log, ACK), DROP,
 * HEARTBEAT, and a reader's FETCH. The first frames go to the
 * handshake (hello.c).
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"
#include "worker/attempt.h"
#include "worker/crash.h"
#include "worker/dispatch.h"
#include "worker/fetch.h"
#include "worker/group.h"
#include "worker/hello.h"
#include "worker/out.h"
#include "worker/state.h"
#include "worker/store.h"

#include <errno.h>

static const char *type_name(unsigned type)
{
	static const char *names[] = {"?", "DATA", "HELLO", "MAPPER_END",
				      "FETCH", "ACK", "ERROR", "DROP",
				      "MANIFEST", "FETCH_END", "PAD",
				      "HEARTBEAT", "AUTH"};
	return type < ARRAY_SIZE(names) ? names[type] : "unknown";
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

bool wk_conn_leave(struct wk_conn *c)
{
	struct ush_worker *wk = c->t->wk;
	/* The committer hands c->cm_req back to the loop, which applies it
	 * to c: c stays until then. */
	if (c->cm_step == WK_CM_LOG)
		return false;
	if (!c->appr)
		return true;
	pthread_mutex_lock(&wk->lock);
	struct wk_attempt *e = c->att.state == WK_OPEN ? mine(c) : NULL;
	if (e)
		wk_attempt_mark(wk, e, WK_ABANDONED);
	settle(c, e != NULL);
	/* The attempt abandoned was its shuffle's last open or committed
	 * one: the files hold nothing a reader may ask for, so they go now,
	 * not when the application drops the shuffle or expires. */
	struct wk_owner *o = e ? wk_owner_find(wk, c->att.shuffle) : NULL;
	/* Not when a drop of it is under way already. */
	if (o && (o->live || wk_busy(wk, c->att.shuffle)))
		o = NULL;
	uint64_t freed = o ? o->bytes : 0;
	int dropped = 0; /* 1: dropped, or the error */
	if (o) {
		int ret = wk_drop_locked(c->t, &c->att.shuffle, 1);
		dropped = ret ? ret : 1;
	}
	wk_fetch_unbill(c->fetch);
	if (c->out.acct)
		atomic_fetch_sub(c->out.acct, c->out.stream);
	c->out.acct = NULL;
	c->appr->nconns--;
	c->appr = NULL;
	pthread_mutex_unlock(&wk->lock);
	if (dropped == 1) {
		wk_drop_finish(c->t, &c->att.shuffle, 1);
		WK_COUNT(wk, drops, 1);
		wk_log(wk, 1, "peer %s: shuffle %u map %u attempt %u left "
		       "uncommitted, the shuffle's last attempt here: shuffle "
		       "dropped (%llu bytes)", c->peer, c->att.shuffle,
		       c->att.map, c->att.attempt, (unsigned long long)freed);
	} else if (dropped) {
		wk_log(wk, 0, "peer %s: dropping shuffle %u, whose last "
		       "attempt was left uncommitted: %s", c->peer,
		       c->att.shuffle, ush_strerror(dropped));
	}
	c->att.state = 0;
	c->cm_step = 0; /* a sync round's ticket: nothing to give back */
	return true;
}

/* Is c's attempt still its own? Only a DROP since it was last known
 * can have taken it, so the lock is taken only then. */
bool wk_still_mine(struct wk_conn *c)
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
	if (c->att.state == WK_OPEN && !c->cm_step &&
	    f->shuffle == c->att.shuffle &&
	    f->map == c->att.map && f->attempt == c->att.attempt &&
	    wk_still_mine(c))
		return true;
	wk_conn_fail(c, -EPROTO, "%s frame of shuffle %u map %u attempt %u "
		     "from the writer of shuffle %u map %u attempt %u%s",
		     f->type == USHI_FRAME_DATA ? "DATA" : "MAPPER_END",
		     f->shuffle, f->map, f->attempt, c->att.shuffle,
		     c->att.map, c->att.attempt,
		     c->att.state == WK_COMMITTED ? " (committed)" :
		     c->cm_step ? " (after its MAPPER_END)" :
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

/* A commit that cannot be: c fails with why (ret). */
static void commit_fail(struct wk_conn *c, int ret, unsigned ncommits)
{
	const struct wk_rec *r = &c->cm_rec;
	if (ret == -EDQUOT)
		wk_conn_fail(c, ret, "application '%s' has %u attempts "
			     "committed here, its quota (--max-app-commits): "
			     "the commit of shuffle %u map %u attempt %u "
			     "refused; drop shuffles it no longer needs",
			     c->app, ncommits, r->shuffle, r->map, r->attempt);
	else
		wk_conn_fail(c, ret, "commit of shuffle %u map %u attempt %u: "
			     "%s", r->shuffle, r->map, r->attempt,
			     ret == -ENOENT ? "the shuffle was dropped" :
					      ush_strerror(ret));
}

/* The commit's frames could not be made durable: the error names the
 * directory of the log that failed. */
static void sync_fail(struct wk_conn *c, int ret)
{
	const struct wk_rec *r = &c->cm_rec;
	wk_conn_fail(c, ret, "syncing before the commit of shuffle %u map %u "
		     "attempt %u (in %s): %s", r->shuffle, r->map, r->attempt,
		     wk_store_dir(c->t, r->shuffle), ush_strerror(ret));
}

/*
 * MAPPER_END: a sync round of the shuffle's log here (through the ring)
 * writes the attempt's frames and index entries and starts their syncs;
 * from then on its record (naming the data: frames, bytes, the sum of
 * their CRCs) goes to the committer, whose group syncs it while the
 * data's syncs run, in the same journal commit where the file system
 * shares one; the ACK goes once both are durable. Each step starts in a
 * loop pass once the one before it is done (wk_commit_pump(),
 * wk_commit_logged()): the loop never waits on a commit's sync. A crash
 * between the two leaves a record whose data may not be whole: replay
 * checks it (verify.c) and drops it then.
 */
static void commit(struct wk_conn *c, const struct ushi_frame *f)
{
	if (!own_attempt(c, f))
		return;
	c->cm_t0 = ushi_now_ns();
	/* The application too: should the shuffle's claim record be
	 * damaged, a replay takes its owner from here (wal.c). */
	c->cm_rec = (struct wk_rec){.type = WK_REC_COMMIT,
				    .shuffle = f->shuffle, .map = f->map,
				    .attempt = f->attempt};
	memcpy(c->cm_rec.app, c->app, sizeof(c->cm_rec.app));
	c->cm_rec.sum = c->cm_sum;
	c->cm_rec.sum.thread = c->t->idx;
	int ret = wk_store_sync_begin(c->t, f->shuffle, &c->cm_ticket);
	if (ret)
		sync_fail(c, ret);
	else
		c->cm_step = WK_CM_SYNC;
}

/* The frames are written and their syncs started: the record goes to
 * the committer, queued under the lock after the checks, so that a drop
 * logged after them is logged after it too. */
static void commit_log(struct wk_conn *c)
{
	struct ush_worker *wk = c->t->wk;
	pthread_mutex_lock(&wk->lock);
	struct wk_attempt *e = mine(c);
	/* A drop being logged: its record is ahead of this one, which must
	 * not follow it (a replay would revive the shuffle). */
	if (e && wk_dropping(wk, c->att.shuffle))
		e = NULL;
	unsigned ncommits = c->appr->ncommits;
	int ret = !e ? -ENOENT : ncommits >= wk->o.max_app_commits ? -EDQUOT :
								    0;
	if (!e) /* dropped meanwhile */
		settle(c, false);
	if (!ret) {
		e->logging = true;
		e->rec = &c->cm_rec;
		c->cm_req = (struct wk_logreq){.r = &c->cm_rec, .n = 1,
					       .t = c->t, .owner = c};
		c->cm_step = WK_CM_LOG;
		c->cm_logged = c->cm_synced = false;
		wk_group_submit(wk, &c->cm_req);
	}
	pthread_mutex_unlock(&wk->lock);
	if (ret) {
		c->cm_step = 0;
		commit_fail(c, ret, ncommits);
	}
}

/* Both the record and the data are back: the commit is applied and
 * acknowledged, or fails with the first error. */
static void commit_done(struct wk_conn *c)
{
	struct ush_worker *wk = c->t->wk;
	const struct wk_rec *r = &c->cm_rec;
	int res = c->cm_logres ? c->cm_logres : c->cm_syncres;
	c->cm_step = 0;
	/* Durable with its data: the watermark may pass it. Otherwise a
	 * restart checks it against its data (wal.c). */
	if (!res)
		wk_group_settle(wk, c->cm_req.lsn);
	pthread_mutex_lock(&wk->lock);
	struct wk_attempt *e = mine(c);
	if (e) {
		e->logging = false;
		e->rec = NULL;
	}
	e = res ? NULL : e;
	if (e)
		wk_attempt_mark(wk, e, WK_COMMITTED);
	if (!res) /* dropped meanwhile, after its record: the drop's
		     record follows it in the log */
		settle(c, e != NULL);
	if (!res && !e)
		res = -ENOENT;
	wk_compact_maybe(wk);
	pthread_mutex_unlock(&wk->lock);
	if (res && !c->cm_logres && res != -ENOENT) {
		sync_fail(c, res);
		return;
	}
	if (res) {
		commit_fail(c, res, 0);
		return;
	}
	wk_crash(wk, WK_CRASH_ACKED, 1);
	c->att.state = WK_COMMITTED;
	wk_count_sync(wk, ushi_now_ns() - c->cm_t0);
	WK_COUNT(wk, commits, 1);
	wk_log(wk, 2, "peer %s: shuffle %u map %u attempt %u committed",
	       c->peer, r->shuffle, r->map, r->attempt);
	struct ushi_frame f = {.shuffle = r->shuffle, .map = r->map,
			       .attempt = r->attempt};
	ack(c, &f, USHI_ACK_COMMIT, 0);
}

void wk_commit_pump(struct wk_conn *c)
{
	const struct wk_rec *r = &c->cm_rec;
	if (c->cm_step == WK_CM_SYNC) {
		int ret = wk_store_sync_issued(c->t, r->shuffle, c->cm_ticket);
		if (ret == -EINPROGRESS)
			return;
		if (!ret) {
			wk_crash(c->t->wk, WK_CRASH_ISSUED, 1);
			commit_log(c);
		} else {
			c->cm_step = 0;
			if (ret == -ENOENT)
				commit_fail(c, ret, 0);
			else
				sync_fail(c, ret);
			return;
		}
	}
	if (c->cm_step != WK_CM_LOG || c->cm_synced)
		return;
	int ret = wk_store_sync_check(c->t, r->shuffle, c->cm_ticket);
	if (ret == -EINPROGRESS)
		return;
	if (!ret)
		wk_crash(c->t->wk, WK_CRASH_DATA, 1);
	c->cm_synced = true;
	c->cm_syncres = ret;
	if (c->cm_logged)
		commit_done(c);
}

void wk_commit_logged(struct wk_conn *c, int res)
{
	c->cm_logged = true;
	c->cm_logres = res;
	if (c->cm_synced)
		commit_done(c);
}

static void drop(struct wk_conn *c, const struct ushi_frame *f)
{
	struct wk_thread *t = c->t;
	struct ush_worker *wk = t->wk;
	pthread_mutex_lock(&wk->lock);
	/* After a claim or drop of it being logged. */
	wk_busy_wait(wk, f->shuffle);
	int ret = wk_own_shuffle(c, f->shuffle, false);
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
	if (owned)
		wk_drop_finish(t, &f->shuffle, 1);
	else /* nothing durable to forget, files only (if any) */
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
		wk_app_refused(c, ret);
	else
		ack(c, f, USHI_ACK_HEARTBEAT, 0);
}

/* A reader fetches only its application's shuffles. */
static int fetch(struct wk_conn *c, const struct ushi_frame *f,
		 const uint8_t *payload)
{
	struct ush_worker *wk = c->t->wk;
	pthread_mutex_lock(&wk->lock);
	int ret = wk_own_shuffle(c, f->shuffle, false);
	pthread_mutex_unlock(&wk->lock);
	if (ret)
		return 0;
	char msg[256] = "";
	c->out.acct = &c->appr->fetch_queued;
	ret = wk_fetch_start(c->t, f, payload, c->peer, c->appr, c->app,
			     &c->out, &c->fetch, msg, sizeof(msg));
	if (ret && *msg) {
		wk_conn_fail(c, ret, "FETCH of shuffle %u partition %u: %s",
			     f->shuffle, f->partition, msg);
		return 0;
	}
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
bool wk_type_ok(struct wk_conn *c, unsigned type)
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

int wk_dispatch(struct wk_conn *c, const struct ushi_frame *f,
		const uint8_t *frame)
{
	WK_COUNT(c->t->wk, frames_in, 1);
	c->flast = (uint32_t)proto_size(f);
	if (frame_check(frame, f)) {
		wk_conn_fail(c, USH_ECRC, "%s frame (shuffle %u partition %u "
			     "seq %llu): CRC32C mismatch", type_name(f->type),
			     f->shuffle, f->partition,
			     (unsigned long long)f->seq);
		return 0;
	}
	/* Its tag, if one is due, before anything acts on it; from here
	 * on, f's lengths are those of the payload that was sealed. */
	struct ushi_frame opened = *f;
	const char *why;
	if (mac_open(&c->mac, frame, &opened, &why)) {
		wk_conn_fail(c, -EACCES, "%s frame: %s", type_name(f->type),
			     why);
		return 0;
	}
	f = &opened;
	/* wk_type_ok() let this type through at its header. */
	const uint8_t *payload = frame + USH_FRAME_HDR_SIZE;
	if (c->auth_wait) {
		wk_auth(c, payload);
		return 0;
	}
	if (!c->role) {
		wk_hello(c, f, frame);
		return 0;
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
		return 1;
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
	return 0;
}

void wk_data_stored(struct wk_conn *c, const struct ushi_frame *f, int ret)
{
	if (ret)
		wk_conn_fail(c, ret, "storing shuffle %u partition %u (in "
			     "%s): %s", f->shuffle, f->partition,
			     wk_store_dir(c->t, f->shuffle), ush_strerror(ret));
	else
		c->credit += proto_size(f), c->att_bytes += proto_size(f);
	/* What its commit record names (wal.h). */
	if (!ret) {
		c->cm_sum.frames++;
		c->cm_sum.bytes += proto_size(f);
		c->cm_sum.crcs += f->crc;
	}
	if (ret)
		atomic_fetch_sub(&c->appr->bytes, proto_size(f));
}
