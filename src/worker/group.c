/*
 * Group commit: one committer thread appends the records of every
 * worker thread to the commit log. Threads queue requests and go on
 * serving; the committer takes the whole queue, writes its records with
 * one pwrite and one fdatasync, and hands each request back: a commit
 * to its thread's done stack (taken without a lock; the thread is woken
 * through its wake socket once per batch, and acknowledges then), a
 * claim or drop to its waiter. So a group costs one sync however many
 * threads and connections committed in it, every commit that came
 * during a sync shares the next one, and no thread waits on a sync to
 * serve pushes and fetches: the queue's lock is held only to link
 * requests, never across I/O or a system call.
 *
 * A commit's record is queued once its data's syncs have started, and
 * synced while they run (wal.c says why that is safe): the committer
 * notes each such record as unsettled until its thread has seen both
 * durable, and writes with every group the watermark below which none
 * is.
 *
 * Records reach the log in queue order, and a compaction is a request
 * in the same queue: the snapshot it writes holds every record queued
 * before it (wk_group_compact()'s caller put them in, the commits still
 * with the committer too), and the records queued after it go to the
 * emptied log; so it never waits for a moment without commits.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/crash.h"
#include "worker/group.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

/* The watermark for records numbered from now on: every commit record
 * of this worker numbered up to it is durable with its data. */
static uint64_t watermark(struct wk_group *g)
{
	pthread_mutex_lock(&g->lock);
	uint64_t wm = g->nuns ? g->uns[0].lsn - 1 : wk_log_next_lsn() - 1;
	pthread_mutex_unlock(&g->lock);
	return wm;
}

/* Notes the commits among the requests from req up to stop as
 * unsettled: 0 or -ENOMEM (then none is). */
static int unsettle(struct wk_group *g, struct wk_logreq *req,
		    struct wk_logreq *stop, size_t commits)
{
	int ret = 0;
	pthread_mutex_lock(&g->lock);
	if (g->nuns + commits > g->cuns) {
		size_t c = g->cuns ? 2 * g->cuns : 64;
		while (c < g->nuns + commits)
			c *= 2;
		struct wk_unsettled *u = ushi_malloc(c * sizeof(*u));
		if (u) {
			if (g->nuns)
				memcpy(u, g->uns, g->nuns * sizeof(*u));
			ushi_free(g->uns);
			g->uns = u;
			g->cuns = c;
		} else {
			ret = -ENOMEM;
		}
	}
	for (struct wk_logreq *q = req; !ret && q != stop; q = q->next)
		if (q->t)
			g->uns[g->nuns++] = (struct wk_unsettled){
				q->lsn, q->r[0].shuffle};
	pthread_mutex_unlock(&g->lock);
	return ret;
}

/* Encodes and writes the records of the requests from req up to stop
 * with one write and one sync; each gets the result. */
static void write_group(struct ush_worker *wk, struct wk_logreq *req,
			struct wk_logreq *stop)
{
	struct wk_group *g = &wk->grp;
	size_t n = 0, commits = 0;
	for (struct wk_logreq *q = req; q != stop; q = q->next) {
		n += q->n;
		commits += q->t != NULL;
	}
	if (!n)
		return;
	int ret = 0;
	if (n * WK_REC_SIZE > g->cap) {
		uint8_t *b = ushi_malloc(n * WK_REC_SIZE);
		if (b) {
			ushi_free(g->buf);
			g->buf = b;
			g->cap = n * WK_REC_SIZE;
		} else {
			ret = -ENOMEM;
		}
	}
	size_t at = 0;
	uint64_t wm = ret ? 0 : watermark(g);
	/* A waiter's records (claims, drops; commits in tests) were synced
	 * after their data. */
	for (struct wk_logreq *q = req; !ret && q != stop; q = q->next) {
		q->lsn = wk_log_encode(g->buf + at, q->r, q->n, wm, !q->t);
		at += q->n * WK_REC_SIZE;
	}
	if (!ret && commits)
		ret = unsettle(g, req, stop, commits);
	if (!ret)
		ret = wk_log_write(wk, g->buf, at, (unsigned)commits);
	if (!ret)
		wk_crash(wk, WK_CRASH_LOGGED, (unsigned)commits);
	g->commits_logged |= !ret && commits;
	if (ret)
		wk_log(wk, 0, "commit log %s/commit.log: appending %zu "
		       "records: %s (the log is compacted no more)", wk->dir,
		       n, ush_strerror(ret));
	g->failed |= ret != 0;
	for (struct wk_logreq *q = req; q != stop; q = q->next)
		q->res = ret;
}

/* Runs a batch taken from the queue, in order: records in groups, a
 * compaction between them. */
static void run(struct ush_worker *wk, struct wk_logreq *batch)
{
	struct wk_logreq *from = batch;
	for (struct wk_logreq *q = batch;; q = q->next) {
		if (q && !q->compact)
			continue;
		write_group(wk, from, q);
		if (!q)
			return;
		q->res = wk->grp.failed ? -EIO :
			 wk_log_compact(wk, q->r, q->n, watermark(&wk->grp));
		atomic_store(&wk->compact_queued, false);
		ushi_free((void *)q->r);
		q->r = NULL;
		from = q->next;
	}
}

/* Gives q to its thread's loop: pushed on the thread's done stack (the
 * loop takes the whole stack with one exchange, no lock), and the loop
 * woken unless a wake-up is already on its way. */
static void give(struct wk_logreq *q)
{
	struct wk_thread *t = q->t;
	q->next = atomic_load(&t->cm_done);
	while (!atomic_compare_exchange_weak(&t->cm_done, &q->next, q))
		;
	if (!atomic_exchange(&t->cm_woken, true))
		send(t->wake[1], "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Hands the batch's requests back: commits to their threads (outside
 * the lock, one wake-up per thread at most), then waiters and counts
 * under the lock. */
static void hand_back(struct wk_group *g, struct wk_logreq *q)
{
	unsigned commits = 0;
	struct wk_logreq *rest = NULL, *next;
	for (; q; q = next) {
		next = q->next;
		if (q->t) {
			/* Counted once given (the loop may free q as soon
			 * as it has it): its thread's teardown waits. */
			struct wk_thread *t = q->t;
			give(q);
			atomic_fetch_sub(&t->cm_out, 1);
			commits++;
		} else {
			q->next = rest;
			rest = q;
		}
	}
	pthread_mutex_lock(&g->lock);
	for (q = rest; q; q = next) {
		next = q->next;
		if (q->compact)
			ushi_free(q);
		else
			q->done = true;
	}
	/* Waiters, and wk_group_quiesce() for the counts. */
	if (rest || commits)
		pthread_cond_broadcast(&g->done);
	pthread_mutex_unlock(&g->lock);
}

/* At a clean stop: a record that carries the watermark alone, so that
 * the next start trusts the last groups' commits instead of checking
 * them against their data (unsettled ones, failed, stay below it). */
static void write_mark(struct ush_worker *wk)
{
	struct wk_group *g = &wk->grp;
	uint8_t b[WK_REC_SIZE];
	struct wk_rec r = {.type = WK_REC_MARK};
	if (g->failed || wk->log_fd < 0 || !g->commits_logged)
		return;
	wk_log_encode(b, &r, 1, watermark(g), true);
	int ret = wk_log_write(wk, b, sizeof(b), 0);
	if (ret)
		wk_log(wk, 0, "commit log %s/commit.log: the watermark at the "
		       "stop: %s (the next start checks the last commits "
		       "against their data)", wk->dir, ush_strerror(ret));
}

static void *committer(void *arg)
{
	struct ush_worker *wk = arg;
	struct wk_group *g = &wk->grp;
	pthread_mutex_lock(&g->lock);
	for (;;) {
		while (!g->head && !g->stop)
			pthread_cond_wait(&g->work, &g->lock);
		struct wk_logreq *batch = g->head;
		if (!batch)
			break;
		g->head = NULL;
		g->tail = &g->head;
		pthread_mutex_unlock(&g->lock);
		run(wk, batch);
		hand_back(g, batch);
		pthread_mutex_lock(&g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	write_mark(wk);
	return NULL;
}

void wk_group_init(struct wk_group *g)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->work, NULL);
	pthread_cond_init(&g->done, NULL);
	g->tail = &g->head;
}

void wk_group_fini(struct wk_group *g)
{
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->work);
	pthread_cond_destroy(&g->done);
}

int wk_group_start(struct ush_worker *wk)
{
	struct wk_group *g = &wk->grp;
	int ret = wk_log_open(wk);
	if (ret)
		return ret;
	ret = -pthread_create(&g->tid, NULL, committer, wk);
	if (ret)
		return ushi_fail(ret, "worker: committer thread");
	g->running = true;
	return 0;
}

void wk_group_stop(struct ush_worker *wk)
{
	struct wk_group *g = &wk->grp;
	if (!g->running)
		return;
	pthread_mutex_lock(&g->lock);
	g->stop = true;
	pthread_cond_signal(&g->work);
	pthread_mutex_unlock(&g->lock);
	pthread_join(g->tid, NULL);
	g->running = false;
	ushi_free(g->buf);
	g->buf = NULL;
	g->cap = 0;
	ushi_free(g->uns);
	g->uns = NULL;
	g->nuns = g->cuns = 0;
}

void wk_group_settle(struct ush_worker *wk, uint64_t lsn)
{
	struct wk_group *g = &wk->grp;
	pthread_mutex_lock(&g->lock);
	for (size_t i = 0; i < g->nuns; i++)
		if (g->uns[i].lsn == lsn) {
			memmove(g->uns + i, g->uns + i + 1,
				(g->nuns - i - 1) * sizeof(*g->uns));
			g->nuns--;
			break;
		}
	pthread_mutex_unlock(&g->lock);
}

void wk_group_forget(struct ush_worker *wk, uint32_t shuffle)
{
	struct wk_group *g = &wk->grp;
	pthread_mutex_lock(&g->lock);
	size_t k = 0;
	for (size_t i = 0; i < g->nuns; i++)
		if (g->uns[i].shuffle != shuffle)
			g->uns[k++] = g->uns[i];
	g->nuns = k;
	pthread_mutex_unlock(&g->lock);
}

static void enqueue(struct wk_group *g, struct wk_logreq *req)
{
	req->next = NULL;
	req->done = false;
	*g->tail = req;
	g->tail = &req->next;
	pthread_cond_signal(&g->work);
}

void wk_group_submit(struct ush_worker *wk, struct wk_logreq *req)
{
	struct wk_group *g = &wk->grp;
	atomic_fetch_add(&req->t->cm_out, 1);
	pthread_mutex_lock(&g->lock);
	enqueue(g, req);
	pthread_mutex_unlock(&g->lock);
}

void wk_group_queue(struct ush_worker *wk, struct wk_logreq *req)
{
	struct wk_group *g = &wk->grp;
	req->t = NULL;
	pthread_mutex_lock(&g->lock);
	enqueue(g, req);
	pthread_mutex_unlock(&g->lock);
}

int wk_group_wait(struct ush_worker *wk, struct wk_logreq *req)
{
	struct wk_group *g = &wk->grp;
	pthread_mutex_lock(&g->lock);
	while (!req->done)
		pthread_cond_wait(&g->done, &g->lock);
	pthread_mutex_unlock(&g->lock);
	return req->res;
}

int wk_group_log(struct ush_worker *wk, const struct wk_rec *r, size_t n)
{
	struct wk_logreq req = {.r = r, .n = n};
	wk_group_queue(wk, &req);
	return wk_group_wait(wk, &req);
}

void wk_group_compact(struct ush_worker *wk, struct wk_rec *r, size_t n)
{
	struct wk_group *g = &wk->grp;
	struct wk_logreq *req = ushi_calloc(1, sizeof(*req));
	if (!req) {
		ushi_free(r);
		/* The log keeps growing until the next try. */
		atomic_store(&wk->compact_queued, false);
		return;
	}
	req->r = r;
	req->n = n;
	req->compact = true;
	pthread_mutex_lock(&g->lock);
	enqueue(g, req);
	pthread_mutex_unlock(&g->lock);
}

struct wk_logreq *wk_group_take(struct wk_thread *t)
{
	if (!atomic_load_explicit(&t->cm_done, memory_order_relaxed))
		return NULL;
	/* Cleared first: a request given after the exchange wakes again. */
	atomic_store(&t->cm_woken, false);
	struct wk_logreq *q = atomic_exchange(&t->cm_done, NULL), *prev = NULL;
	while (q) { /* the stack is newest first */
		struct wk_logreq *next = q->next;
		q->next = prev;
		prev = q;
		q = next;
	}
	return prev;
}

void wk_group_quiesce(struct wk_thread *t)
{
	struct wk_group *g = &t->wk->grp;
	pthread_mutex_lock(&g->lock);
	while (atomic_load(&t->cm_out))
		pthread_cond_wait(&g->done, &g->lock);
	pthread_mutex_unlock(&g->lock);
}
