/*
 * The client's socket calls outside a ring, all of them: connect with a
 * deadline, reads and writes that run until done, a peer's silence or
 * its close (the blocking ones), and three that never wait (a receive
 * of what is there, a peek at an idle pooled connection, a reset). The
 * writer's psync ioengine (sink_net.c) sends and receives with these.
 * Everything else in the library does its socket I/O on a ring.
 *
 * Why these block: each serves an exchange of one thread with one peer
 * in which the thread has nothing else to do until the answer comes. A
 * connection's setup (connect, HELLO, the AUTH challenge: net.c), an
 * admin request (DROP, HEARTBEAT) and a reader's FETCH stream
 * (read/reader_net.c), whose reader yields nothing until the next frame
 * is in. A ring would add a submit and a reap per call, and the deadline
 * a cancel: a receive armed on a ring outlives the close of its socket
 * until cancelled, so a timeout could not simply close. The writer's
 * data path (sends, replies) and the worker run on rings.
 *
 * Every call is bounded, so a silent peer fails, never hangs: connect by
 * poll() until the deadline; reads and writes by the socket's timeouts
 * (SO_RCVTIMEO, SO_SNDTIMEO, set by net_connect() to the same deadline),
 * which bound each call's wait for progress, not the exchange: a FETCH
 * stream that keeps moving is never cut off, one that stalls fails after
 * timeout_ms with -ETIMEDOUT.
 */
#define _GNU_SOURCE
#include "net/addr.h"
#include "net/net.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int net_connect(const struct addrinfo *ai, uint32_t timeout_ms)
{
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC |
			SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	int ret = 0;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		ret = -errno;
		if (ret == -EINPROGRESS) {
			struct pollfd pfd = {fd, POLLOUT, 0};
			int n = poll(&pfd, 1, (int)timeout_ms);
			int err = 0;
			socklen_t el = sizeof(err);
			if (n == 0)
				ret = -ETIMEDOUT;
			else if (n < 0)
				ret = -errno;
			else
				ret = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err,
						 &el) ? -errno : -err;
		}
	}
	if (ret) {
		close(fd);
		return ret;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	net_set_timeouts(fd, timeout_ms);
	return fd;
}

void net_set_timeouts(int fd, uint32_t timeout_ms)
{
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Whether a is a loopback address, or the same address as b. */
static bool local_addr(const struct sockaddr_storage *a,
		       const struct sockaddr_storage *b)
{
	if (net_addr_loopback((const struct sockaddr *)a))
		return true;
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a,
					 *y = (const void *)b;
		return x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a,
					  *y = (const void *)b;
		return !memcmp(&x->sin6_addr, &y->sin6_addr,
			       sizeof(x->sin6_addr));
	}
	return false;
}

bool net_same_host(int fd)
{
	struct sockaddr_storage peer, me;
	socklen_t pl = sizeof(peer), ml = sizeof(me);
	if (getpeername(fd, (struct sockaddr *)&peer, &pl) ||
	    getsockname(fd, (struct sockaddr *)&me, &ml))
		return false;
	return local_addr(&peer, &me);
}

int net_recv(int fd, void *buf, size_t cap)
{
	ssize_t r;
	do
		r = recv(fd, buf, cap < INT_MAX ? cap : INT_MAX, 0);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return errno == EAGAIN ? -ETIMEDOUT : -errno;
	return r ? (int)r : -EPIPE;
}

int net_recv_ready(int fd, void *buf, size_t cap)
{
	ssize_t r;
	do
		r = recv(fd, buf, cap < INT_MAX ? cap : INT_MAX, MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return r ? (int)r : -EPIPE;
}

bool net_idle_open(int fd)
{
	char b;
	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
	       (errno == EAGAIN || errno == EWOULDBLOCK);
}

void net_reset(int fd)
{
	struct sockaddr sa = {.sa_family = AF_UNSPEC};
	connect(fd, &sa, sizeof(sa));
}

int net_read(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n) {
		int r = net_recv(fd, p, n);
		if (r < 0)
			return r;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int net_write(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}
