/*
 * Client side of the worker protocol shared by the net sink and the net
 * reader: worker lists, the HELLO handshake (net.c), and the blocking
 * socket calls under them and under the reader's FETCH streams (sock.c,
 * which says why they block; the writer's data path runs on its ring).
 */
#ifndef USHI_NET_H
#define USHI_NET_H

#include "net/mac.h"
#include "net/proto.h"

#define USHI_NET_TIMEOUT_MS 10000u
#define USHI_NET_PEER 280

/*
 * Stalled peers (docs/design.md, "Stalled peers"): where another replica
 * can carry on, a peer is given up after a window taken from the
 * progress observed, not after timeout_ms: STALL_GAPS times the usual
 * wait for the next piece of progress, within [STALL_MIN, STALL_MAX] ms
 * (and never past timeout_ms), so that noticing the stall and moving on
 * fit in 2 s. The usual wait is a moving average (1/8 weight per sample)
 * of the gaps a peer or its replica needed.
 */
#define USHI_STALL_MIN_MS 500u
#define USHI_STALL_MAX_MS 1500u
#define USHI_STALL_GAPS 8u

struct ushi_pace {
	uint64_t last_ns; /* the last progress, or when waiting began */
	uint64_t gap_ns;  /* the usual gap: a moving average, 0 unknown */
};

/* A gap of gap_ns was observed: into the average. */
static inline void pace_sample(struct ushi_pace *p, uint64_t gap_ns)
{
	p->gap_ns = p->gap_ns ? p->gap_ns - p->gap_ns / 8 + gap_ns / 8 : gap_ns;
}

/* The stall window (ms) for a usual gap of gap_ns, under timeout_ms. */
static inline uint32_t pace_window_ms(uint64_t gap_ns, uint32_t timeout_ms)
{
	uint64_t ms = gap_ns * USHI_STALL_GAPS / 1000000u;
	if (ms < USHI_STALL_MIN_MS)
		ms = USHI_STALL_MIN_MS;
	if (ms > USHI_STALL_MAX_MS)
		ms = USHI_STALL_MAX_MS;
	return ms < timeout_ms ? (uint32_t)ms : timeout_ms;
}

/* The longest stall window under timeout_ms: before anything is observed
 * (a dial), where another replica could take over. */
static inline uint32_t pace_longest_ms(uint32_t timeout_ms)
{
	return USHI_STALL_MAX_MS < timeout_ms ? USHI_STALL_MAX_MS : timeout_ms;
}

/* Splits a "HOST:PORT[@LABEL],..." list: returns the number of workers
 * (at most max) with each "HOST:PORT" copied into peers[i] (its label,
 * if any, after the NUL: net_peer_label()), or -EINVAL. */
int net_parse_workers(const char *list, char (*peers)[USHI_NET_PEER],
		      unsigned max);
/* The host label of a peer from net_parse_workers() into label (n
 * bytes): the one given, else its host (replicas spread over labels). */
void net_peer_label(const char *peer, char *label, size_t n);
/* Counts the entries of a worker list (0 when empty). */
unsigned net_count_workers(const char *list);
/*
 * Connects to peer ("HOST:PORT") within timeout_ms and says HELLO (its
 * role and, for a writer, the attempt; the version is filled in);
 * *reply gets the worker's HELLO. The socket is blocking with send and
 * receive timeouts of timeout_ms. With a secret for the HELLO's
 * application (net_secret()), the handshake is the mutual HMAC
 * challenge of docs/protocol.md §2.8: the worker proves the secret before
 * the client does, and *mac is keyed for the connection's control frames
 * (§2.9; the caller frees it with mac_free(), and seals every control
 * frame it sends with it, net_send_ctrl()); otherwise *mac is off.
 * Returns the fd or an error (a refusal carries the worker's ERROR
 * message; -EACCES for a failed authentication or a frame that failed
 * its MAC), *mac then off.
 */
int net_dial(const char *peer, const struct proto_hello *hello,
	     uint32_t timeout_ms, struct proto_hello *reply,
	     struct ushi_mac *mac);
/*
 * A reader's connection to a worker, pooled between FETCH streams
 * (connpool.c): the fd, and what the pool keys and ages it by.
 */
struct net_conn {
	int fd;
	struct ushi_mac mac;  /* its control frames' MACs, both ways */
	bool reused;          /* taken from the pool, not dialled now */
	uint32_t timeout_ms;  /* its send and receive timeouts; 0: unknown
				 (a reader moved its receive timeout) */
	char peer[USHI_NET_PEER];
	char app[USHI_PROTO_APP_MAX + 1];
	uint64_t idle_since;  /* ushi_now_ns() when returned */
	struct net_conn *next;
};
/* Idle connections kept per process, and for how long at most. */
#define USHI_NET_POOL_MAX 128u
#define USHI_NET_POOL_IDLE_MS 30000u
/*
 * A connection to peer that said hello (a reader's): with pooled, an
 * idle one of the same peer and application that the worker has not
 * closed (counted in ush_lib_stats' net_reuses), else a new one
 * (net_dial()). Returns 0 with *out, or net_dial()'s errors. The caller
 * owns *out: net_conn_put() or net_conn_free().
 */
int net_conn_take(struct net_conn **out, const char *peer,
		  const struct proto_hello *hello, uint32_t timeout_ms,
		  bool pooled);
/* Returns c, between streams (nothing unread, nothing owed), to the
 * pool; the caller must not touch it again. */
void net_conn_put(struct net_conn *c);
/* Closes c; NULL is ignored. */
void net_conn_free(struct net_conn *c);
/* Closes every idle connection of the pool (tests: what a worker still
 * holds after it is what the worker keeps, not what readers kept). */
void net_conn_drain(void);
/* Sends the control frame of n bytes at frame (room for USHI_MAC_TAG
 * more) sealed with mac: net_write()'s result. */
int net_send_ctrl(int fd, struct ushi_mac *mac, uint8_t *frame, size_t n);
/* The application of clients that name none. */
#define USHI_APP_DEFAULT "default"
/* Sets h->app to app (NULL: the default) if it is a valid id; else
 * -EINVAL with a message. */
int net_app(struct proto_hello *h, const char *app);
/* The secret the client proves for app (auth.h): the one given for app,
 * else the one given for every application, else $USHUFFLE_SECRET.
 * Copies it to key (USHI_SECRET_MAX bytes) and returns its length, 0
 * when there is none (the HELLO asks for no authentication), or -EINVAL
 * for a bad $USHUFFLE_SECRET. */
int net_secret(const char *app, uint8_t *key);
/* ------------- the client's socket calls outside a ring (sock.c), all */

struct addrinfo;
/* A TCP connection to ai within timeout_ms: the fd, blocking, with
 * TCP_NODELAY and send and receive timeouts of timeout_ms; or -errno
 * (-ETIMEDOUT when the deadline passed). */
int net_connect(const struct addrinfo *ai, uint32_t timeout_ms);
/* Sets fd's send and receive timeouts (a blocking call's wait for
 * progress) to timeout_ms. */
void net_set_timeouts(int fd, uint32_t timeout_ms);
/* Whether fd's peer is on this host (a loopback address, or fd's own
 * address): the kernel copies what SEND_ZC sends there, and a zero-copy
 * notification waits for the receiver to take the data. */
bool net_same_host(int fd);
/* Receives what the socket holds, up to cap bytes, waiting for at least
 * one: the count, -ETIMEDOUT after the socket's timeout, -EPIPE at EOF,
 * or -errno. */
int net_recv(int fd, void *buf, size_t cap);
/* net_recv() without waiting: -EAGAIN when the socket holds nothing. */
int net_recv_ready(int fd, void *buf, size_t cap);
/* Whether an idle connection is still usable: its peer has neither sent
 * anything nor closed it (a peek, without waiting). */
bool net_idle_open(int fd);
/* Resets fd's connection, keeping fd: what its send queue holds, and
 * the pages of zero-copy sends with it, is dropped (connect(AF_UNSPEC),
 * the kernel's tcp_disconnect()). Does not wait. */
void net_reset(int fd);
/* Reads exactly n bytes: 0, or net_recv()'s errors. */
int net_read(int fd, void *buf, size_t n);
/* Sends all n bytes: 0, -ETIMEDOUT after the socket's timeout, or
 * -errno. */
int net_write(int fd, const void *buf, size_t n);

#endif
