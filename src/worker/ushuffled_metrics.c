/*
 * ushuffled --metrics=HOST:PORT: the worker's counters (ush_worker_stats)
 * in the Prometheus text format, served by one small thread of the daemon
 * with a minimal HTTP/1.0 responder: GET /metrics (or /), one request per
 * connection, answered and closed. Why not an HTTP library: a scrape is
 * one GET every few seconds from one or two collectors, which a poll()
 * loop over a few non-blocking connections serves in microseconds;
 * libmicrohttpd would add a dependency, its own threads and a large
 * parser to the daemon for no gain, and the worker's rings stay for the
 * shuffle traffic. A client that stalls is closed METRICS_IO_MS after it
 * connected, and meanwhile holds one of METRICS_CLIENTS slots, not the
 * thread.
 */
#define _GNU_SOURCE
#define USH_UNSTABLE_API /* ush_worker_dir() */
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
#include <time.h>
#include <unistd.h>

#define METRICS_IO_MS 2000
#define METRICS_MAX (16u << 10)
#define METRICS_CLIENTS 8

static const char *const error_kinds[] = {
#define USH_X(name, text) text,
	USH_WORKER_ERROR_KINDS(USH_X)
#undef USH_X
};

static unsigned worker_sync; /* the worker's --sync */

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

/* A label value as the text format wants it: backslash, double quote
 * and newline escaped. */
static void put_label(struct text *t, const char *v)
{
	for (; *v; v++)
		if (*v == '\\' || *v == '"')
			put(t, "\\%c", *v);
		else if (*v == '\n')
			put(t, "\\n");
		else
			put(t, "%c", *v);
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
	metric(&t, "received_in_place_bytes_total", "counter",
	       "DATA bytes written to the logs from the buffers they were "
	       "received in (not copied).", s.bytes_in_place);
	metric(&t, "sent_frames_total", "counter",
	       "DATA frames streamed to readers.", s.frames_out);
	metric(&t, "fetch_heap_buffers_total", "counter",
	       "FETCH read buffers allocated from the heap (the pool's share "
	       "taken); freed ones are kept for the next reads.",
	       s.fetch_heap_allocs);
	metric(&t, "fetch_reads_total", "counter",
	       "Reads of the logs for FETCH streams (adjacent frames, and a "
	       "window's small frames close in a log, are one read).",
	       s.fetch_reads);
	metric(&t, "connections_accepted_total", "counter",
	       "Connections accepted.", s.conns_accepted);
	metric(&t, "connections_refused_total", "counter",
	       "Connections refused at once (limit, shutdown).",
	       s.conns_refused);
	metric(&t, "connections", "gauge", "Connections held.", s.conns_open);
	metric(&t, "applications", "gauge", "Applications known.", s.apps);
	metric(&t, "shuffles", "gauge", "Shuffles held.", s.shuffles);
	metric(&t, "decommissioning", "gauge", "1 once decommissioned "
	       "(SIGUSR2): no new writers, exits when no shuffle is left.",
	       s.decommissioning);
	metric(&t, "commits_synced", "gauge", "1: a commit waits for its "
	       "data to be synced (--sync=full); 0: not (--sync=none: lost "
	       "at a host crash).", worker_sync != USH_WORKER_SYNC_NONE);
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
	put(&t, "# HELP ushuffled_dir_quarantined 1 for a --dir directory "
	    "taken out of placement (I/O error, read-only or full file "
	    "system).\n# TYPE ushuffled_dir_quarantined gauge\n");
	const char *path;
	int err;
	for (unsigned i = 0; !ush_worker_dir(w, i, &path, &err); i++) {
		put(&t, "ushuffled_dir_quarantined{dir=\"");
		put_label(&t, path);
		put(&t, "\"} %d\n", err != 0);
	}
	put(&t, "# HELP ushuffled_errors_total Failed connections and storage "
	    "errors, by kind.\n# TYPE ushuffled_errors_total counter\n");
	for (unsigned i = 0; i < USH_WORKER_ERR_KINDS; i++)
		put(&t, "ushuffled_errors_total{kind=\"%s\"} %llu\n",
		    error_kinds[i], (unsigned long long)s.errors[i]);
	return t.len;
}

/* A connection: its request head as read, then its answer as sent.
 * Closed at its deadline whatever it has done, so a client that sends
 * nothing, or a byte at a time, or does not read, holds a slot for
 * METRICS_IO_MS at most and never the others. */
struct client {
	int fd; /* -1: a free slot */
	uint64_t deadline;
	size_t got, sent, len;
	char *out; /* the answer (malloc), once the request is read */
	char req[2048];
};

struct server {
	int fd;
	ush_worker *w;
	pthread_t tid;
	atomic_bool stop;
	char *buf; /* the text, METRICS_MAX bytes */
	struct client c[METRICS_CLIENTS];
};

static struct server srv = {.fd = -1};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void drop(struct client *c)
{
	close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
}

static void answer(struct client *c, const char *status, const char *type,
		   const char *body, size_t n)
{
	char head[256];
	int k = snprintf(head, sizeof(head), "HTTP/1.0 %s\r\nContent-Type: "
			 "%s\r\nContent-Length: %zu\r\nConnection: close\r\n"
			 "\r\n", status, type, n);
	c->out = malloc((size_t)k + n);
	if (!c->out)
		return;
	memcpy(c->out, head, (size_t)k);
	memcpy(c->out + k, body, n);
	c->len = (size_t)k + n;
	c->sent = 0;
}

/* The answer to a whole request head (or as much as fits in req):
 * GET /metrics and GET / are served. */
static void respond(struct client *c)
{
	const char *req = c->req;
	static const char text[] = "text/plain; charset=utf-8";
	if (strncmp(req, "GET ", 4)) {
		answer(c, "405 Method Not Allowed", text, "GET only\n", 9);
		return;
	}
	size_t pl = strcspn(req + 4, " \r\n?");
	if ((pl != 8 || strncmp(req + 4, "/metrics", 8)) &&
	    (pl != 1 || req[4] != '/')) {
		answer(c, "404 Not Found", text, "see /metrics\n", 13);
		return;
	}
	size_t n = metrics_text(srv.w, srv.buf, METRICS_MAX);
	answer(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8",
	       srv.buf, n < METRICS_MAX ? n : METRICS_MAX - 1);
}

/* What poll() said c's socket is ready for: reads the request, then
 * sends the answer; drops c when done or failed. Never blocks. */
static void step(struct client *c)
{
	ssize_t k;
	if (!c->out) {
		k = recv(c->fd, c->req + c->got, sizeof(c->req) - 1 - c->got,
			 MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k <= 0) {
			drop(c);
			return;
		}
		c->got += (size_t)k;
		c->req[c->got] = '\0';
		if (c->got < sizeof(c->req) - 1 &&
		    !strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n"))
			return;
		respond(c);
		if (!c->out) {
			drop(c); /* no memory for the answer */
			return;
		}
	}
	k = send(c->fd, c->out + c->sent, c->len - c->sent,
		 MSG_DONTWAIT | MSG_NOSIGNAL);
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k > 0)
		c->sent += (size_t)k;
	if (k <= 0 || c->sent == c->len)
		drop(c);
}

static void *metrics_main(void *arg)
{
	(void)arg;
	struct pollfd p[METRICS_CLIENTS + 1];
	struct client *of[METRICS_CLIENTS];
	while (!atomic_load(&srv.stop)) {
		uint64_t now = now_ns();
		struct client *idle = NULL;
		nfds_t n = 0;
		for (unsigned i = 0; i < METRICS_CLIENTS; i++) {
			struct client *c = &srv.c[i];
			if (c->fd >= 0 && now >= c->deadline)
				drop(c);
			if (c->fd < 0) {
				idle = c;
				continue;
			}
			p[n] = (struct pollfd){c->fd, c->out ? POLLOUT : POLLIN, 0};
			of[n++] = c;
		}
		/* With every slot taken, new connections wait in the
		 * backlog until one is freed (at a deadline at the latest). */
		if (idle)
			p[n] = (struct pollfd){srv.fd, POLLIN, 0};
		if (poll(p, n + (idle != NULL), 200) <= 0)
			continue;
		for (nfds_t i = 0; i < n; i++)
			if (p[i].revents)
				step(of[i]);
		if (!idle || !p[n].revents)
			continue;
		int fd = accept4(srv.fd, NULL, NULL,
				 SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0)
			*idle = (struct client){.fd = fd,
				.deadline = now_ns() + METRICS_IO_MS * 1000000ull};
	}
	for (unsigned i = 0; i < METRICS_CLIENTS; i++)
		if (srv.c[i].fd >= 0)
			drop(&srv.c[i]);
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
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			0), one = 1;
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

int metrics_start(ush_worker *w, unsigned sync)
{
	if (srv.fd < 0)
		return 0;
	srv.buf = malloc(METRICS_MAX);
	if (!srv.buf)
		return -ENOMEM;
	for (unsigned i = 0; i < METRICS_CLIENTS; i++)
		srv.c[i].fd = -1;
	srv.w = w;
	worker_sync = sync;
	int r = pthread_create(&srv.tid, NULL, metrics_main, NULL);
	if (r) {
		srv.w = NULL;
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
	free(srv.buf);
	srv.buf = NULL;
}
