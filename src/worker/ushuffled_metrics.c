/*
 * ushuffled --metrics=HOST:PORT: the worker's counters (ush_worker_stats)
 * in the Prometheus text format, served by one small thread of the daemon
 * with a minimal HTTP/1.0 responder: GET /metrics (or /), one request per
 * connection, answered and closed. Why not an HTTP library: a scrape is
 * one GET every few seconds from one or two collectors, which a blocking
 * accept-read-write loop serves in microseconds; libmicrohttpd would add
 * a dependency, its own threads and a large parser to the daemon for no
 * gain, and the worker's rings stay for the shuffle traffic. A client
 * that stalls holds the thread for at most METRICS_IO_MS.
 */
#define _GNU_SOURCE
#include "worker/ushuffled.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define METRICS_IO_MS 2000
#define METRICS_MAX (16u << 10)

static const char *const error_kinds[] = {
#define USH_X(name, text) text,
	USH_WORKER_ERROR_KINDS(USH_X)
#undef USH_X
};

struct text {
	char *p;
	size_t n, len;
};

static void put(struct text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(t->p + t->len, t->len < t->n ? t->n - t->len : 0,
			  fmt, ap);
	va_end(ap);
	t->len += k > 0 ? (size_t)k : 0;
}

/* One metric with its HELP and TYPE lines. */
static void metric(struct text *t, const char *name, const char *type,
		   const char *help, uint64_t v)
{
	put(t, "# HELP ushuffled_%s %s\n# TYPE ushuffled_%s %s\n"
	    "ushuffled_%s %llu\n", name, help, name, type, name,
	    (unsigned long long)v);
}

size_t metrics_text(ush_worker *w, char *buf, size_t n)
{
	struct ush_worker_stats s;
	struct text t = {buf, n, 0};
	ush_worker_stats(w, &s);
	put(&t, "# HELP ushuffled_build_info The version running.\n"
	    "# TYPE ushuffled_build_info gauge\n"
	    "ushuffled_build_info{version=\"%s\"} 1\n", ush_version_string());
	metric(&t, "received_bytes_total", "counter",
	       "Bytes received from clients.", s.bytes_in);
	metric(&t, "sent_bytes_total", "counter", "Bytes sent to clients.",
	       s.bytes_out);
	metric(&t, "received_frames_total", "counter",
	       "Frames received from clients.", s.frames_in);
	metric(&t, "sent_frames_total", "counter",
	       "DATA frames streamed to readers.", s.frames_out);
	metric(&t, "connections_accepted_total", "counter",
	       "Connections accepted.", s.conns_accepted);
	metric(&t, "connections_refused_total", "counter",
	       "Connections refused at once (limit, shutdown).",
	       s.conns_refused);
	metric(&t, "connections", "gauge", "Connections held.", s.conns_open);
	metric(&t, "applications", "gauge", "Applications known.", s.apps);
	metric(&t, "shuffles", "gauge", "Shuffles held.", s.shuffles);
	metric(&t, "stored_bytes", "gauge",
	       "DATA bytes stored for applications.", s.bytes_stored);
	metric(&t, "open_files", "gauge", "Log and index files open.",
	       s.open_files);
	metric(&t, "commits_total", "counter", "Map outputs committed.",
	       s.commits);
	metric(&t, "drops_total", "counter", "Shuffles dropped on request.",
	       s.drops);
	metric(&t, "expiries_total", "counter", "Shuffles dropped because "
	       "their application went silent (--app-ttl).", s.expiries);
	metric(&t, "stalled_seconds", "gauge", "Longest time a worker thread "
	       "has gone without a pass of its loop.", s.stalled_ms / 1000);
	put(&t, "# HELP ushuffled_commit_sync_seconds Time a commit waits for "
	    "its data to be durable.\n"
	    "# TYPE ushuffled_commit_sync_seconds histogram\n");
	for (unsigned i = 0; i < USH_WORKER_SYNC_BUCKETS; i++)
		put(&t, "ushuffled_commit_sync_seconds_bucket{le=\"%g\"} "
		    "%llu\n", USH_WORKER_SYNC_BUCKET_US(i) / 1e6,
		    (unsigned long long)s.sync_le[i]);
	put(&t, "ushuffled_commit_sync_seconds_bucket{le=\"+Inf\"} %llu\n"
	    "ushuffled_commit_sync_seconds_sum %.6f\n"
	    "ushuffled_commit_sync_seconds_count %llu\n",
	    (unsigned long long)s.sync_count, s.sync_ns / 1e9,
	    (unsigned long long)s.sync_count);
	put(&t, "# HELP ushuffled_errors_total Failed connections and storage "
	    "errors, by kind.\n# TYPE ushuffled_errors_total counter\n");
	for (unsigned i = 0; i < USH_WORKER_ERR_KINDS; i++)
		put(&t, "ushuffled_errors_total{kind=\"%s\"} %llu\n",
		    error_kinds[i], (unsigned long long)s.errors[i]);
	return t.len;
}

struct server {
	int fd;
	ush_worker *w;
	pthread_t tid;
	atomic_bool stop;
};

static struct server srv = {.fd = -1};

static void send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k <= 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

static void answer(int fd, const char *status, const char *type,
		   const char *body, size_t n)
{
	char head[256];
	int k = snprintf(head, sizeof(head), "HTTP/1.0 %s\r\nContent-Type: "
			 "%s\r\nContent-Length: %zu\r\nConnection: close\r\n"
			 "\r\n", status, type, n);
	send_all(fd, head, (size_t)k);
	send_all(fd, body, n);
}

/* Reads the request head; serves GET /metrics and GET /. */
static void serve(int fd, char *buf)
{
	char req[2048];
	size_t got = 0;
	struct timeval tv = {METRICS_IO_MS / 1000, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (got < sizeof(req) - 1) {
		ssize_t k = recv(fd, req + got, sizeof(req) - 1 - got, 0);
		if (k <= 0)
			return;
		got += (size_t)k;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	static const char text[] = "text/plain; charset=utf-8";
	if (strncmp(req, "GET ", 4)) {
		answer(fd, "405 Method Not Allowed", text, "GET only\n", 9);
		return;
	}
	size_t pl = strcspn(req + 4, " \r\n?");
	if ((pl != 8 || strncmp(req + 4, "/metrics", 8)) &&
	    (pl != 1 || req[4] != '/')) {
		answer(fd, "404 Not Found", text, "see /metrics\n", 13);
		return;
	}
	size_t n = metrics_text(srv.w, buf, METRICS_MAX);
	answer(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", buf,
	       n < METRICS_MAX ? n : METRICS_MAX - 1);
}

static void *metrics_main(void *arg)
{
	char *buf = arg;
	while (!atomic_load(&srv.stop)) {
		struct pollfd p = {srv.fd, POLLIN, 0};
		if (poll(&p, 1, 200) <= 0)
			continue;
		int fd = accept4(srv.fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve(fd, buf);
		close(fd);
	}
	free(buf);
	return NULL;
}

int metrics_listen(const char *arg, char *err, size_t n)
{
	const char *hostport = arg;
	char host[256];
	const char *colon = strrchr(hostport, ':');
	size_t hl = colon ? (size_t)(colon - hostport) : 0;
	if (hl && hostport[0] == '[' && hostport[hl - 1] == ']')
		hostport++, hl -= 2;
	if (!colon || !colon[1] || hl >= sizeof(host)) {
		snprintf(err, n, "--metrics=%s: not HOST:PORT; accepted: "
			 "HOST:PORT, [V6]:PORT or :PORT (every address)", arg);
		return -1;
	}
	memcpy(host, hostport, hl);
	host[hl] = '\0';
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
			*ai;
	int r = getaddrinfo(hl ? host : NULL, colon + 1, &hints, &ai);
	if (r) {
		snprintf(err, n, "--metrics=%s: %s", arg, gai_strerror(r));
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) ||
	    listen(fd, 16)) {
		snprintf(err, n, "--metrics=%s: %s", arg, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	srv.fd = fd;
	return 0;
}

int metrics_port(void)
{
	struct sockaddr_storage a;
	socklen_t l = sizeof(a);
	if (srv.fd < 0 || getsockname(srv.fd, (struct sockaddr *)&a, &l))
		return -1;
	char port[16];
	if (getnameinfo((struct sockaddr *)&a, l, NULL, 0, port, sizeof(port),
			NI_NUMERICSERV))
		return -1;
	return atoi(port);
}

int metrics_start(ush_worker *w)
{
	char *buf = malloc(METRICS_MAX);
	if (srv.fd < 0 || !buf) {
		free(buf);
		return srv.fd < 0 ? 0 : -ENOMEM;
	}
	srv.w = w;
	int r = pthread_create(&srv.tid, NULL, metrics_main, buf);
	if (r) {
		free(buf);
		return -r;
	}
	return 0;
}

void metrics_stop(void)
{
	if (srv.fd < 0)
		return;
	if (srv.w) {
		atomic_store(&srv.stop, true);
		pthread_join(srv.tid, NULL);
	}
	close(srv.fd);
	srv.fd = -1;
}
