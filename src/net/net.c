/* Worker lists, the HELLO handshake, admin requests; see net.h. The
 * blocking socket calls they make are in sock.c, which says why. */
#define _GNU_SOURCE
#include "net/net.h"
#include "net/auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

unsigned net_count_workers(const char *list)
{
	unsigned n = 0;
	for (const char *p = list; p && *p;) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		/* As net_parse_workers(): an entry of spaces is none. */
		if (strspn(p, " \t") < len)
			n++;
		p += len + (c ? 1 : 0);
	}
	return n;
}

/* One entry (HOST:PORT, maybe followed by @...): the length of its
 * HOST:PORT, or -EINVAL with *why. */
static int check_entry(const char *e, size_t len, const char **why)
{
	const char *at = memchr(e, '@', len);
	size_t hp = at ? (size_t)(at - e) : len;
	const char *colon = e + hp;
	while (colon > e && colon[-1] != ':')
		colon--;
	size_t pl = hp - (size_t)(colon - e);
	char port[8] = "", *end;
	if (pl < sizeof(port))
		memcpy(port, colon, pl), port[pl] = 0;
	long p = strtol(port, &end, 10);
	*why = NULL;
	if (colon == e)
		*why = "no :PORT";
	else if (colon - 1 == e || (colon - e == 3 && e[0] == '['))
		*why = "no HOST";
	else if (!pl || pl >= sizeof(port) || *end || port[0] < '0' ||
		 port[0] > '9' || p < 1 || p > 65535)
		*why = "PORT is not 1..65535";
	else if (len + 1 >= USHI_NET_PEER) /* and a NUL after the label */
		*why = "too long";
	return *why ? -EINVAL : (int)hp;
}

int net_parse_workers(const char *list, char (*peers)[USHI_NET_PEER],
		      unsigned max)
{
	unsigned n = 0;
	char msg[512];
	for (const char *p = list; p && *p;) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		const char *e = p, *why;
		p += len + (c ? 1 : 0);
		/* Spaces around an entry (a list written "a:1, b:2"). */
		while (len && (*e == ' ' || *e == '\t'))
			e++, len--;
		while (len && (e[len - 1] == ' ' || e[len - 1] == '\t'))
			len--;
		if (!len)
			continue;
		int hp = check_entry(e, len, &why);
		if (hp < 0)
			snprintf(msg, sizeof(msg), "worker '%.*s': %s; "
				 "accepted: HOST:PORT,... with PORT 1..65535",
				 (int)len, e, why);
		else if (n == max)
			snprintf(msg, sizeof(msg), "more than %u workers", max);
		for (unsigned i = 0; hp >= 0 && n < max && i < n; i++)
			if (!strncasecmp(peers[i], e, (size_t)hp) &&
			    (peers[i][hp] == 0 || peers[i][hp] == '@')) {
				snprintf(msg, sizeof(msg), "worker '%.*s' is "
					 "listed twice; accepted: each "
					 "HOST:PORT once", hp, e);
				hp = -EINVAL;
			}
		if (hp < 0 || n == max)
			return ushi_fail_msg(-EINVAL, msg);
		/* The label ("@LABEL") stays behind the peer's NUL, for
		 * net_peer_label(). */
		memcpy(peers[n], e, len);
		peers[n][len] = peers[n][len + 1] = 0;
		peers[n][hp] = 0;
		n++;
	}
	return n ? (int)n : ushi_fail_msg(-EINVAL, "no workers; accepted: "
					  "HOST:PORT,...");
}

void net_peer_label(const char *peer, char *label, size_t n)
{
	const char *l = peer + strlen(peer) + 1;
	size_t len = strlen(l);
	if (!len) { /* none given: the host, a v6 address unbracketed */
		l = peer + (peer[0] == '[');
		len = peer[0] == '[' ? strcspn(l, "]") :
				       (size_t)(strrchr(peer, ':') - peer);
	}
	if (len >= n)
		len = n - 1;
	memcpy(label, l, len);
	label[len] = 0;
}

static int split(const char *peer, char *host, size_t hn, char *port,
		 size_t pn)
{
	const char *colon = strrchr(peer, ':');
	if (!colon)
		return -EINVAL;
	size_t hl = (size_t)(colon - peer);
	if (peer[0] == '[' && hl >= 2 && peer[hl - 1] == ']') {
		peer++;
		hl -= 2;
	}
	if (hl >= hn || strlen(colon + 1) >= pn || !colon[1])
		return -EINVAL;
	memcpy(host, peer, hl);
	host[hl] = 0;
	strcpy(port, colon + 1);
	return 0;
}

int ush_workers_check(const char *list, int resolve)
{
	unsigned nw = list ? net_count_workers(list) : 0;
	char (*peers)[USHI_NET_PEER] = nw ? ushi_calloc(nw, USHI_NET_PEER) :
					    NULL;
	if (nw && !peers)
		return ushi_fail(-ENOMEM, "net: %u workers", nw);
	int n = net_parse_workers(list, peers, nw);
	for (int i = 0; resolve && i < n; i++) {
		char host[USHI_NET_PEER], port[16], msg[600];
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
					 .ai_flags = AI_NUMERICSERV}, *ai;
		char *at = strchr(peers[i], '@');
		if (at)
			*at = 0;
		split(peers[i], host, sizeof(host), port, sizeof(port));
		int r = getaddrinfo(host, port, &hints, &ai);
		if (!r) {
			freeaddrinfo(ai);
			continue;
		}
		snprintf(msg, sizeof(msg), "worker '%s': unknown host '%s' "
			 "(%s); accepted: a host name or address the resolver "
			 "knows", peers[i], host, gai_strerror(r));
		n = ushi_fail_msg(-EHOSTUNREACH, msg);
	}
	ushi_free(peers);
	return n;
}

/*
 * Reads the worker's answer to req into b (USHI_PROTO_ERROR_SIZE bytes):
 * a frame of type want, or an ERROR, which becomes the error returned;
 * opened with mac (its lengths in *f without the tag).
 * b holds an ERROR at most: control frames such as MANIFEST pass
 * proto_header() with payloads of up to USHI_PROTO_CTRL_MAX, so any other
 * type is refused before its payload is read.
 */
static int read_reply(int fd, const char *peer, const char *req,
		      unsigned want, struct ushi_mac *mac, uint8_t *b,
		      struct ushi_frame *f)
{
	const char *why = "";
	int ret = net_read(fd, b, USH_FRAME_HDR_SIZE);
	if (ret)
		return ushi_fail(ret, "net: worker %s: no reply to %s", peer,
				req);
	ret = proto_header(b, f, USHI_PROTO_ERROR_SIZE, false, &why);
	if (!ret && want == USHI_FRAME_AUTH && f->type == USHI_FRAME_HELLO)
		return ushi_fail(-EACCES, "net: worker %s did not authenticate: "
				"it answered HELLO without a challenge (a worker "
				"run --insecure, without this application's "
				"secret?); a client that holds a secret talks "
				"only to workers that prove it", peer);
	if (!ret && f->type != want && f->type != USHI_FRAME_ERROR)
		ret = USH_ECORRUPT, why = "unexpected frame type";
	if (!ret)
		ret = net_read(fd, b + USH_FRAME_HDR_SIZE, f->payload_len);
	if (!ret && frame_check(b, f))
		ret = USH_ECRC, why = "CRC32C mismatch";
	if (!ret)
		ret = mac_open(mac, b, f, &why);
	if (ret)
		return ushi_fail(ret, "net: worker %s: bad reply to %s%s%s", peer,
				req, *why ? ": " : "", why);
	if (f->type == USHI_FRAME_ERROR) {
		char msg[USHI_PROTO_ERRMSG_MAX];
		int code = proto_get_error(b + USH_FRAME_HDR_SIZE,
					   f->payload_len, msg, sizeof(msg));
		return ushi_fail(code, "net: worker %s refused %s: %s", peer, req,
				msg);
	}
	return 0;
}

/* Reads the worker's answer to HELLO: its HELLO or an ERROR. */
static int hello_reply(int fd, const char *peer, struct ushi_mac *mac,
		       struct proto_hello *h)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int ret = read_reply(fd, peer, "HELLO", USHI_FRAME_HELLO, mac, b, &f);
	if (ret)
		return ret;
	proto_get_hello(&f, b + USH_FRAME_HDR_SIZE, h);
	if (h->version != USHI_PROTO_VERSION)
		return ushi_fail(USH_EVERSION, "net: worker %s speaks protocol "
				"version %u, this library %u", peer,
				h->version, USHI_PROTO_VERSION);
	if (h->window < 4096 || h->max_frame < 4096)
		return ushi_fail(-EPROTO, "net: worker %s offers a window of %u "
				"and frames of %u bytes", peer, h->window,
				h->max_frame);
	return 0;
}

/* The client's half of the challenge (protocol.md §2.8): hello is the
 * HELLO frame sent (hn bytes). Reads the worker's AUTH, checks its proof,
 * sends the client's, and keys mac for what follows (§2.9). */
static int auth_client(int fd, const char *peer, const char *app,
		       const uint8_t *key, size_t klen, const uint8_t *hello,
		       size_t hn, struct ushi_mac *mac)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int ret = read_reply(fd, peer, "HELLO", USHI_FRAME_AUTH, mac, b, &f);
	if (ret)
		return ret;
	struct proto_auth a, r = {.step = USHI_AUTH_RESPONSE};
	uint8_t pw[USHI_AUTH_MAC];
	proto_get_auth(b + USH_FRAME_HDR_SIZE, &a);
	if (a.step != USHI_AUTH_CHALLENGE)
		return ushi_fail(-EPROTO, "net: worker %s sent AUTH step %u, "
				"not a challenge", peer, a.step);
	ret = auth_mac(key, klen, AUTH_WORKER, hello, hn, a.nonce, NULL, pw);
	if (ret)
		return ret;
	if (!auth_mac_equal(pw, a.mac))
		return ushi_fail(-EACCES, "net: worker %s failed to prove it "
				"holds the secret of application '%s' (another "
				"secret there, or not a ushuffle worker)", peer,
				app);
	ret = auth_mac(key, klen, AUTH_CLIENT, hello, hn, a.nonce, a.mac,
		       r.mac);
	mac_keys keys;
	if (!ret)
		ret = mac_derive(key, klen, hello, hn, a.nonce, keys);
	if (!ret && (ret = net_write(fd, b, proto_put_auth(b, &r))))
		ushi_fail(ret, "net: worker %s: sending AUTH", peer);
	if (!ret)
		return mac_start(mac, keys, AUTH_CLIENT);
	explicit_bzero(keys, sizeof(keys));
	return ret;
}

int net_dial(const char *peer, const struct proto_hello *hello,
	     uint32_t timeout_ms, struct proto_hello *reply,
	     struct ushi_mac *mac)
{
	*mac = (struct ushi_mac){0};
	char host[USHI_NET_PEER], port[16];
	if (split(peer, host, sizeof(host), port, sizeof(port)))
		return ushi_fail(-EINVAL, "net: worker %s is not HOST:PORT",
				peer);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV},
			*ai;
	int ret = getaddrinfo(host, port, &hints, &ai);
	if (ret) {
		char msg[512];
		snprintf(msg, sizeof(msg), "net: worker %s: unknown host '%s' "
			 "(%s)", peer, host, gai_strerror(ret));
		return ushi_fail_msg(-EHOSTUNREACH, msg);
	}
	int fd = -ENOENT;
	for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next)
		fd = net_connect(a, timeout_ms);
	freeaddrinfo(ai);
	USHI_COUNT(net_connects, 1);
	if (fd < 0) {
		USHI_COUNT(net_connect_errors, 1);
		return ushi_fail(fd, "net: connect to worker %s", peer);
	}
	uint8_t b[USHI_PROTO_SMALL], key[USHI_SECRET_MAX];
	struct proto_hello h = *hello;
	h.version = USHI_PROTO_VERSION;
	int klen = net_secret(h.app, key);
	h.flags = klen > 0 ? USHI_HELLO_AUTH : 0;
	ret = klen < 0 ? klen : klen ? auth_nonce(h.nonce) : 0;
	size_t hn = proto_put_hello(b, &h);
	if (!ret && (ret = net_write(fd, b, hn)))
		ushi_fail(ret, "net: worker %s: sending HELLO", peer);
	if (!ret && klen > 0)
		ret = auth_client(fd, peer, h.app, key, (size_t)klen, b, hn,
				  mac);
	if (klen > 0)
		explicit_bzero(key, (size_t)klen);
	if (!ret)
		ret = hello_reply(fd, peer, mac, reply);
	if (ret) {
		mac_free(mac);
		close(fd);
		return ret;
	}
	return fd;
}

int net_send_ctrl(int fd, struct ushi_mac *mac, uint8_t *frame, size_t n)
{
	return net_write(fd, frame, mac_seal(mac, frame, n));
}

/* Admin requests go to this many workers at once, at most. */
#define ADMIN_THREADS 64u
#define ADMIN_STACK (1u << 20)

/* One admin request to every worker of a list, shared by its threads. */
struct admin {
	char (*peers)[USHI_NET_PEER];
	unsigned n;
	atomic_uint next;       /* the next worker a thread takes */
	struct proto_hello hello;
	const uint8_t *req;
	size_t len;
	const char *what;
	uint64_t deadline;      /* ushi_now_ns(): one for the lot */
	int *res;               /* each worker's result */
	char (*msg)[512];       /* and its message, when it failed */
};

/* Sends the request to one worker and reads its ACK, within what is left
 * of the deadline: 0 or -errno (the message in ush_last_error()). */
/* Milliseconds left before ad's deadline (0: passed). */
static uint32_t admin_left(const struct admin *ad)
{
	uint64_t now = ushi_now_ns();
	return ad->deadline > now ? (uint32_t)((ad->deadline - now) /
					       1000000u) : 0;
}

static int admin_one(const struct admin *ad, const char *peer)
{
	uint32_t left = admin_left(ad);
	if (!left)
		return ushi_fail(-ETIMEDOUT, "net: worker %s: %s not sent: "
				 "its deadline passed", peer, ad->what);
	struct proto_hello h;
	struct ushi_mac mac;
	int fd = net_dial(peer, &ad->hello, left, &h, &mac);
	if (fd < 0)
		return fd;
	/* The ACK waits only for what the handshake left of the deadline
	 * (0 would be no timeout). */
	left = admin_left(ad);
	net_set_timeouts(fd, left ? left : 1);
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	memcpy(b, ad->req, ad->len); /* sealed per connection */
	int r = net_send_ctrl(fd, &mac, b, ad->len);
	if (r)
		ushi_fail(r, "net: worker %s: sending %s", peer, ad->what);
	else
		r = read_reply(fd, peer, ad->what, USHI_FRAME_ACK, &mac, b, &f);
	mac_free(&mac);
	close(fd);
	return r;
}

static void *admin_thread(void *arg)
{
	struct admin *ad = arg;
	for (unsigned i; (i = atomic_fetch_add(&ad->next, 1)) < ad->n;) {
		ad->res[i] = admin_one(ad, ad->peers[i]);
		if (ad->res[i])
			snprintf(ad->msg[i], sizeof(ad->msg[i]), "%s",
				 ush_last_error());
	}
	return NULL;
}

/* Sends one admin request (frame req of n bytes, named what) to every
 * worker of the list as app, and waits for each one's ACK. The workers
 * are asked at once (up to ADMIN_THREADS threads, joined before the
 * return), within one deadline for the lot: a stalled worker costs the
 * others nothing. A worker that fails does not keep the request from the
 * others (a heartbeat that stopped at a dead worker would let the live
 * ones expire the application); the first error in the list's order is
 * returned, and its message kept. */
static int admin_all(const char *workers, const char *app,
		     const uint8_t *req, size_t n, const char *what,
		     uint32_t timeout_ms)
{
	unsigned nw = workers ? net_count_workers(workers) : 0;
	struct admin ad = {
		.n = nw, .req = req, .len = n, .what = what,
		.hello = {.role = USHI_ROLE_ADMIN},
		.deadline = ushi_now_ns() +
			    (uint64_t)(timeout_ms ? timeout_ms :
					      USHI_NET_TIMEOUT_MS) * 1000000u,
	};
	if (!nw)
		return ushi_fail(-EINVAL, "net: %s: no workers given", what);
	ad.peers = ushi_calloc(nw, USHI_NET_PEER);
	ad.res = ushi_calloc(nw, sizeof(*ad.res));
	ad.msg = ushi_calloc(nw, sizeof(*ad.msg));
	int ret = ad.peers && ad.res && ad.msg ? 0 :
		  ushi_fail(-ENOMEM, "net: %s: %u workers", what, nw);
	if (!ret)
		ret = net_app(&ad.hello, app);
	if (!ret && (ret = net_parse_workers(workers, ad.peers, nw)) < 0)
		ushi_fail(ret, "net: bad worker list '%s' (HOST:PORT,...)",
			 workers);
	else if (ret >= 0)
		ret = 0;
	if (!ret) {
		unsigned nt = nw < ADMIN_THREADS ? nw : ADMIN_THREADS, k = 0;
		pthread_t tid[ADMIN_THREADS];
		/* This thread asks too; threads that cannot start leave
		 * their share to the others. A dial and a reply need little
		 * stack (1 MiB leaves room for the resolver's NSS modules):
		 * 64 threads with the default 8 MiB would commit half a GiB
		 * for a heartbeat, which strict overcommit may refuse. */
		pthread_attr_t attr;
		int ai = pthread_attr_init(&attr);
		bool small = !ai && !pthread_attr_setstacksize(&attr,
							       ADMIN_STACK);
		while (k + 1 < nt &&
		       !pthread_create(&tid[k], small ? &attr : NULL,
				       admin_thread, &ad))
			k++;
		if (!ai)
			pthread_attr_destroy(&attr);
		admin_thread(&ad);
		while (k)
			pthread_join(tid[--k], NULL);
		for (unsigned i = 0; !ret && i < nw; i++)
			if ((ret = ad.res[i]))
				ushi_fail_msg(ret, ad.msg[i]); /* names it */
	}
	ushi_free(ad.peers);
	ushi_free(ad.res);
	ushi_free(ad.msg);
	return ret;
}

int ush_shuffle_drop(const char *workers, const char *app, uint32_t shuffle,
		     uint32_t timeout_ms)
{
	uint8_t b[USHI_PROTO_SMALL];
	return admin_all(workers, app, b, proto_put_drop(b, shuffle), "DROP",
			 timeout_ms);
}

int ush_app_heartbeat(const char *workers, const char *app,
		      uint32_t timeout_ms)
{
	uint8_t b[USHI_PROTO_SMALL];
	return admin_all(workers, app, b, proto_put_heartbeat(b), "HEARTBEAT",
			 timeout_ms);
}

int net_app(struct proto_hello *h, const char *app)
{
	if (!app)
		app = USHI_APP_DEFAULT;
	if (!proto_app_ok(app))
		return ushi_fail(-EINVAL, "net: application id '%.80s' is not "
				"1..64 characters of A-Z a-z 0-9 . _ : -", app);
	snprintf(h->app, sizeof(h->app), "%s", app);
	return 0;
}

uint32_t ush_net_worker_of(uint32_t partition, uint32_t nworkers)
{
	return proto_worker_of(partition, nworkers);
}
