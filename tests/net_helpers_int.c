/*
 * The worker helpers that reach the library's internals (net_helpers.h):
 * map status parsing, raw protocol frames, their MACs. Only in the
 * internal tests' helper library (tests/CMakeLists.txt).
 */
#define _GNU_SOURCE
#include "net_helpers.h"
#include "core/status.h"

uint64_t th_status_holders(const struct ush_status *st, uint32_t p)
{
	struct status s;
	const char *why = "";
	uint64_t batches, mask;
	uint32_t sum;
	th_ok(status_parse(st->data, st->len, &s, &why));
	assert_int_equal(s.version, 2);
	th_ok(status_part(&s, p, &batches, &sum, &mask, &why));
	return mask;
}

/* Raw connections' MACs, by descriptor. */
static struct ushi_mac th_macs[1024];

struct ushi_mac *th_mac(int fd)
{
	assert_true(fd >= 0 && (size_t)fd < ARRAY_SIZE(th_macs));
	return &th_macs[fd];
}

size_t th_seal(int fd, uint8_t *b, size_t n)
{
	size_t off = 0;
	while (off < n) {
		struct ushi_frame f;
		assert_int_equal(frame_parse(b + off, &f), 0);
		size_t len = proto_size(&f);
		assert_true(off + len <= n);
		if (f.type != USHI_FRAME_DATA && mac_on(th_mac(fd))) {
			memmove(b + off + len + USHI_MAC_TAG, b + off + len,
				n - off - len);
			len = mac_seal(th_mac(fd), b + off, len);
			n += USHI_MAC_TAG;
		}
		off += len;
	}
	return n;
}

void th_send_ctrl(int fd, uint8_t *b, size_t n)
{
	th_send_all(fd, b, th_seal(fd, b, n));
}

void th_open(int fd, const uint8_t *frame, struct ushi_frame *f)
{
	const char *why;
	if (mac_open(th_mac(fd), frame, f, &why))
		fail_msg("frame of type %u from the worker: %s", f->type, why);
}

int th_worker_mac(struct ushi_mac *m, const char *secret,
		  const uint8_t *hello, const uint8_t *nw)
{
	mac_keys keys;
	int ret = mac_derive((const uint8_t *)secret, strlen(secret), hello,
			     USH_FRAME_HDR_SIZE + USHI_PROTO_HELLO_LEN, nw, keys);
	return ret ? ret : mac_start(m, keys, AUTH_WORKER);
}

int th_raw_connect(int port)
{
	int fd = th_tcp_connect(port);
	mac_free(th_mac(fd)); /* an earlier connection's, if any */
	return fd;
}

int th_recv_frame(int fd, uint8_t *buf, size_t cap, struct ushi_frame *f)
{
	const char *why = "";
	if (th_recv_n(fd, buf, USH_FRAME_HDR_SIZE))
		return -1;
	if (proto_header(buf, f, 1u << 20, false, &why))
		fail_msg("bad frame header from the worker: %s", why);
	assert_true(proto_size(f) <= cap);
	if (th_recv_n(fd, buf + USH_FRAME_HDR_SIZE, f->payload_len))
		return -1;
	th_open(fd, buf, f);
	return f->type;
}

int th_try_hello(int fd, struct proto_hello h, const char *secret,
		 char *msg, size_t n)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE], hb[USHI_PROTO_SMALL];
	const uint8_t *key = (const uint8_t *)(secret ? secret : TH_SECRET);
	size_t klen = strlen((const char *)key);
	h.version = USHI_PROTO_VERSION;
	h.flags = USHI_HELLO_AUTH;
	th_ok(auth_nonce(h.nonce));
	size_t hn = proto_put_hello(hb, &h);
	th_send_all(fd, hb, hn);
	struct ushi_frame f;
	int type = th_recv_frame(fd, b, sizeof(b), &f);
	if (msg)
		msg[0] = 0;
	if (type == USHI_FRAME_ERROR && msg)
		proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg, n);
	if (type != USHI_FRAME_AUTH)
		return -1;
	struct proto_auth a, r = {.step = USHI_AUTH_RESPONSE};
	uint8_t pw[USHI_AUTH_MAC];
	proto_get_auth(b + USH_FRAME_HDR_SIZE, &a);
	assert_int_equal(a.step, USHI_AUTH_CHALLENGE);
	th_ok(auth_mac(key, klen, AUTH_WORKER, hb, hn, a.nonce, NULL, pw));
	assert_true(auth_mac_equal(pw, a.mac));
	th_ok(auth_mac(key, klen, AUTH_CLIENT, hb, hn, a.nonce, a.mac,
		       r.mac));
	mac_keys keys;
	th_ok(mac_derive(key, klen, hb, hn, a.nonce, keys));
	th_send_all(fd, b, proto_put_auth(b, &r));
	mac_free(th_mac(fd));
	th_ok(mac_start(th_mac(fd), keys, AUTH_CLIENT));
	return 0;
}

void th_hello_secret(int fd, struct proto_hello h, const char *secret)
{
	char msg[600];
	if (th_try_hello(fd, h, secret, msg, sizeof(msg)))
		fail_msg("HELLO refused before the challenge: '%s'", msg);
}

void th_hello(int fd, struct proto_hello h)
{
	th_hello_secret(fd, h, NULL);
}


size_t th_rec_frame(uint8_t *b, uint32_t s, uint64_t seq, const char *r,
		    uint32_t *crc)
{
	uint32_t n = (uint32_t)strlen(r);
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = s,
			      .seq = seq, .raw_len = 4 + n,
			      .payload_len = 4 + n, .nrec = 1};
	put_le32(b + USH_FRAME_HDR_SIZE, n);
	memcpy(b + USH_FRAME_HDR_SIZE + 4, r, n);
	frame_encode(b, &f);
	*crc = f.crc;
	return USH_FRAME_HDR_SIZE + 4 + n;
}
