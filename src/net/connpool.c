/*
 * Idle reader connections, kept for the next FETCH to the same worker as
 * the same application (net.h). Reading a 10,000-partition shuffle one
 * partition at a time would otherwise pay a connect, a HELLO and an AUTH
 * challenge per partition and worker; the worker serves FETCH after
 * FETCH on one connection (protocol.md §3.2).
 *
 * One pool per process under a mutex: readers are not bound to a thread
 * (a reader may move between threads), and a thread that reads
 * partitions one after another takes back the connection it returned.
 * Bounded in count (the oldest closed first) and idle time, so that a
 * process holds few descriptors and never reuses one the worker is about
 * to close as idle (its --idle-timeout is 300 s by default; a shorter one
 * costs one redial, reader_net.c). The idle time is enforced when the
 * pool is next used, without a thread of its own: a process that stops
 * reading keeps its idle connections (USHI_NET_POOL_MAX at most) until
 * it exits, the worker closing its ends at its idle timeout.
 */
#define _GNU_SOURCE
#include "net/net.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static struct {
	pthread_mutex_t lock;
	struct net_conn *head; /* most recently returned first */
	unsigned n;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

void net_conn_free(struct net_conn *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	mac_free(&c->mac);
	ushi_free(c);
}

/* Whether an idle connection may still carry a FETCH: nothing arrived
 * on it (a worker sends nothing unasked between streams; an ERROR or an
 * end means it closed the connection). A close that races this check is
 * the caller's single redial. */
static bool alive(const struct net_conn *c)
{
	return net_idle_open(c->fd);
}

/* Unlinks and returns the connections idle too long (locked). */
static struct net_conn *expired(uint64_t now)
{
	struct net_conn *old = NULL, **pp = &pool.head;
	while (*pp) {
		struct net_conn *c = *pp;
		if (c->idle_since + USHI_NET_POOL_IDLE_MS * 1000000ull > now) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		pool.n--;
		c->next = old;
		old = c;
	}
	return old;
}

static void free_list(struct net_conn *c)
{
	while (c) {
		struct net_conn *nx = c->next;
		net_conn_free(c);
		c = nx;
	}
}

/* A fork() child has the parent's connections as copies: their streams
 * are the parent's. The child closes its copies (close(), never
 * shutdown(): the parent's connections stay as they are), so that it
 * holds no descriptor it cannot use and a connection the parent closes
 * reaches the worker as closed. fork() waits for the lock, so that the
 * child's list is whole (no thread of the parent was changing it). */
static void before_fork(void)
{
	pthread_mutex_lock(&pool.lock);
}

static void in_parent(void)
{
	pthread_mutex_unlock(&pool.lock);
}

static void in_child(void)
{
	struct net_conn *all = pool.head;
	pool.head = NULL;
	pool.n = 0;
	pthread_mutex_unlock(&pool.lock);
	free_list(all);
}

__attribute__((constructor)) static void connpool_init(void)
{
	pthread_atfork(before_fork, in_parent, in_child);
}

/* An idle connection to peer as app, unlinked, or NULL. */
static struct net_conn *take_idle(const char *peer, const char *app)
{
	pthread_mutex_lock(&pool.lock);
	struct net_conn *old = expired(ushi_now_ns()), *c = NULL;
	for (struct net_conn **pp = &pool.head; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->peer, peer) && !strcmp((*pp)->app, app)) {
			c = *pp;
			*pp = c->next;
			pool.n--;
			break;
		}
	pthread_mutex_unlock(&pool.lock);
	free_list(old);
	return c;
}

int net_conn_take(struct net_conn **out, const char *peer,
		  const struct proto_hello *hello, uint32_t timeout_ms,
		  bool pooled)
{
	*out = NULL;
	struct net_conn *c;
	while (pooled && (c = take_idle(peer, hello->app))) {
		if (!alive(c)) {
			net_conn_free(c);
			continue;
		}
		if (c->timeout_ms != timeout_ms)
			net_set_timeouts(c->fd, timeout_ms);
		c->timeout_ms = timeout_ms;
		c->reused = true;
		c->next = NULL;
		USHI_COUNT(net_reuses, 1);
		*out = c;
		return 0;
	}
	if (!(c = ushi_calloc(1, sizeof(*c))))
		return ushi_fail(-ENOMEM, "net: connection to worker %s", peer);
	struct proto_hello h;
	c->fd = net_dial(peer, hello, timeout_ms, &h, &c->mac);
	if (c->fd < 0) {
		int ret = c->fd;
		ushi_free(c);
		return ret;
	}
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	snprintf(c->app, sizeof(c->app), "%s", hello->app);
	c->timeout_ms = timeout_ms;
	*out = c;
	return 0;
}

void net_conn_put(struct net_conn *c)
{
	c->idle_since = ushi_now_ns();
	pthread_mutex_lock(&pool.lock);
	struct net_conn *old = expired(c->idle_since);
	c->next = pool.head;
	pool.head = c;
	if (++pool.n > USHI_NET_POOL_MAX) { /* the oldest goes */
		struct net_conn **pp = &pool.head;
		while ((*pp)->next)
			pp = &(*pp)->next;
		(*pp)->next = old;
		old = *pp;
		*pp = NULL;
		pool.n--;
	}
	pthread_mutex_unlock(&pool.lock);
	free_list(old);
}

void net_conn_drain(void)
{
	pthread_mutex_lock(&pool.lock);
	struct net_conn *all = pool.head;
	pool.head = NULL;
	pool.n = 0;
	pthread_mutex_unlock(&pool.lock);
	free_list(all);
}
