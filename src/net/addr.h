/* Address tests shared by the client library and the worker (a header:
 * the worker reaches the client library's objects only through its
 * exported names). */
#ifndef USHI_ADDR_H
#define USHI_ADDR_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>

/* Whether a is a loopback address: 127/8, ::1 or ::ffff:127/104. */
static inline bool net_addr_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a;
		return ntohl(x->sin_addr.s_addr) >> 24 == 127;
	}
	if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a;
		return IN6_IS_ADDR_LOOPBACK(&x->sin6_addr) ||
		       (IN6_IS_ADDR_V4MAPPED(&x->sin6_addr) &&
			x->sin6_addr.s6_addr[12] == 127);
	}
	return false;
}

#endif
