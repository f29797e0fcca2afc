/* Worker protocol frames: bounds, encoders, decoders; see proto.h. */
#include "net/proto.h"

#include <errno.h>
#include <stdio.h>

_Static_assert(USH_FRAME_HDR_SIZE + USHI_PROTO_HELLO_LEN + USHI_MAC_TAG <=
		       USHI_PROTO_SMALL,
	       "a sealed HELLO fits the small buffers");

static int bad(const char **why, const char *rule)
{
	*why = rule;
	return USH_ECORRUPT;
}

/* Payload bounds of control frame f, or a reason. */
static int check_ctrl(const struct ushi_frame *f, const char **why)
{
	uint32_t n = f->payload_len;
	if (f->codec || (f->flags & ~USHI_FLAG_MAC) || f->nrec ||
	    f->raw_len != n)
		return bad(why, "control frame with codec, flags, records or "
			   "a raw length");
	if (f->flags && n < USHI_MAC_TAG)
		return bad(why, "control frame shorter than its MAC");
	if (f->flags)
		n -= USHI_MAC_TAG; /* the payload's bounds, before its tag */
	switch (f->type) {
	case USHI_FRAME_HELLO:
		/* Version 3's length too: its sender is told the version
		 * is not spoken rather than that its frame is malformed. */
		return n == USHI_PROTO_HELLO_LEN || n == USHI_PROTO_HELLO_V3_LEN ?
			0 : bad(why, "HELLO length");
	case USHI_FRAME_AUTH:
		return n == USHI_PROTO_AUTH_LEN ? 0 : bad(why, "AUTH length");
	case USHI_FRAME_ACK:
		return n == USHI_PROTO_ACK_LEN ? 0 : bad(why, "ACK length");
	case USHI_FRAME_FETCH:
		return n > USHI_PROTO_FETCH_LEN && n <= USHI_PROTO_CTRL_MAX &&
				       (n - USHI_PROTO_FETCH_LEN) %
						       USHI_PROTO_WANT_LEN ==
					       0 ? 0 :
			bad(why, "FETCH length (16 bytes, then 24 per "
			    "entry)");
	case USHI_FRAME_FETCH_END:
		return n == USHI_PROTO_FETCH_END_LEN ? 0 :
			bad(why, "FETCH_END length");
	case USHI_FRAME_DROP:
	case USHI_FRAME_MAPPER_END:
	case USHI_FRAME_MANIFEST:
	case USHI_FRAME_HEARTBEAT:
		return n == 0 ? 0 : bad(why, "non-empty DROP, MAPPER_END, "
					     "MANIFEST or HEARTBEAT");
	case USHI_FRAME_ERROR:
		return n >= 8 && n <= 8 + USHI_PROTO_ERRMSG_MAX ? 0 :
			bad(why, "ERROR length");
	}
	return bad(why, "unknown frame type");
}

int proto_header(const uint8_t *hdr, struct ushi_frame *f, uint32_t max_frame,
		 bool pad_ok, const char **why)
{
	int ret = frame_parse(hdr, f);
	if (ret)
		return bad(why, ret == USH_EVERSION ? "frame format version" :
			   "bad magic");
	if (f->type == USHI_FRAME_DATA) {
		if (frame_decode(hdr, f))
			return bad(why, "DATA header out of bounds");
		if (f->payload_len > max_frame - USH_FRAME_HDR_SIZE)
			return bad(why, "DATA frame above the maximum size");
		return 0;
	}
	if (f->type == USHI_FRAME_PAD)
		return pad_ok && !f->codec && !f->nrec ? 0 :
			bad(why, "PAD frame");
	return check_ctrl(f, why);
}

/* Encodes header fields around a payload already at buf + 48. */
static size_t put_ctrl(uint8_t *buf, uint8_t type, uint32_t shuffle,
		       uint32_t map, uint32_t attempt, uint32_t partition,
		       uint64_t seq, uint32_t len)
{
	struct ushi_frame f = {
		.type = type,
		.shuffle = shuffle,
		.map = map,
		.attempt = attempt,
		.partition = partition,
		.seq = seq,
		.raw_len = len,
		.payload_len = len,
	};
	frame_encode(buf, &f);
	return USH_FRAME_HDR_SIZE + len;
}

size_t proto_put_hello(uint8_t *buf, const struct proto_hello *h)
{
	uint8_t *p = buf + USH_FRAME_HDR_SIZE;
	put_le32(p, h->version);
	put_le32(p + 4, h->role);
	put_le32(p + 8, h->window);
	put_le32(p + 12, h->max_frame);
	memset(p + 16, 0, USHI_PROTO_APP_MAX);
	memcpy(p + 16, h->app, strnlen(h->app, USHI_PROTO_APP_MAX));
	put_le32(p + 80, h->flags);
	put_le32(p + 84, 0);
	memcpy(p + 88, h->nonce, USHI_PROTO_NONCE);
	return put_ctrl(buf, USHI_FRAME_HELLO, h->shuffle, h->map, h->attempt,
			0, 0, USHI_PROTO_HELLO_LEN);
}

size_t proto_put_auth(uint8_t *buf, const struct proto_auth *a)
{
	uint8_t *p = buf + USH_FRAME_HDR_SIZE;
	put_le32(p, a->step);
	put_le32(p + 4, 0);
	memcpy(p + 8, a->nonce, USHI_PROTO_NONCE);
	memcpy(p + 8 + USHI_PROTO_NONCE, a->mac, USHI_PROTO_MAC);
	return put_ctrl(buf, USHI_FRAME_AUTH, 0, 0, 0, 0, 0,
			USHI_PROTO_AUTH_LEN);
}

size_t proto_put_ack(uint8_t *buf, uint32_t shuffle, uint32_t map,
		     uint32_t attempt, const struct proto_ack *a)
{
	uint8_t *p = buf + USH_FRAME_HDR_SIZE;
	put_le32(p, a->kind);
	put_le32(p + 4, (uint32_t)a->status);
	put_le64(p + 8, a->value);
	return put_ctrl(buf, USHI_FRAME_ACK, shuffle, map, attempt, 0, 0,
			USHI_PROTO_ACK_LEN);
}

size_t proto_put_error(uint8_t *buf, int code, const char *msg)
{
	uint8_t *p = buf + USH_FRAME_HDR_SIZE;
	size_t n = strnlen(msg, USHI_PROTO_ERRMSG_MAX);
	put_le32(p, (uint32_t)code);
	put_le32(p + 4, (uint32_t)n);
	memcpy(p + 8, msg, n);
	return put_ctrl(buf, USHI_FRAME_ERROR, 0, 0, 0, 0, 0,
			8 + (uint32_t)n);
}

size_t proto_fetch_size(uint32_t n)
{
	return USH_FRAME_HDR_SIZE + USHI_PROTO_FETCH_LEN +
	       (size_t)n * USHI_PROTO_WANT_LEN;
}

size_t proto_put_fetch(uint8_t *buf, uint32_t shuffle, uint32_t first,
		       uint32_t count, uint64_t offset,
		       const struct proto_want *w, uint32_t n)
{
	uint8_t *p = buf + USH_FRAME_HDR_SIZE;
	put_le64(p, offset);
	put_le32(p + 8, count);
	put_le32(p + 12, 0);
	p += USHI_PROTO_FETCH_LEN;
	for (uint32_t i = 0; i < n; i++, p += USHI_PROTO_WANT_LEN) {
		put_le32(p, w[i].partition);
		put_le32(p + 4, w[i].map);
		put_le32(p + 8, w[i].attempt);
		put_le32(p + 12, 0);
		put_le64(p + 16, w[i].skip);
	}
	return put_ctrl(buf, USHI_FRAME_FETCH, shuffle, 0, 0, first, 0,
			(uint32_t)(proto_fetch_size(n) - USH_FRAME_HDR_SIZE));
}

size_t proto_put_fetch_end(uint8_t *buf, uint32_t shuffle,
			   uint32_t partition, uint64_t frames,
			   uint64_t bytes)
{
	put_le64(buf + USH_FRAME_HDR_SIZE, bytes);
	return put_ctrl(buf, USHI_FRAME_FETCH_END, shuffle, 0, 0, partition,
			frames, USHI_PROTO_FETCH_END_LEN);
}

size_t proto_put_drop(uint8_t *buf, uint32_t shuffle)
{
	return put_ctrl(buf, USHI_FRAME_DROP, shuffle, 0, 0, 0, 0, 0);
}

size_t proto_put_heartbeat(uint8_t *buf)
{
	return put_ctrl(buf, USHI_FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0);
}

bool proto_app_ok(const char *app)
{
	size_t n = strnlen(app, USHI_PROTO_APP_MAX + 1);
	if (!n || n > USHI_PROTO_APP_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = app[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == ':' || c == '-'))
			return false;
	}
	return true;
}

size_t proto_put_pad(uint8_t *buf, uint32_t total)
{
	uint32_t n = total - USH_FRAME_HDR_SIZE;
	memset(buf + USH_FRAME_HDR_SIZE, 0, n);
	return put_ctrl(buf, USHI_FRAME_PAD, 0, 0, 0, 0, 0, n);
}

size_t proto_put_mapper_end(uint8_t *buf, uint32_t shuffle, uint32_t map,
			    uint32_t attempt)
{
	return put_ctrl(buf, USHI_FRAME_MAPPER_END, shuffle, map, attempt, 0, 0,
			0);
}

size_t proto_put_manifest(uint8_t *buf, uint32_t shuffle, uint32_t partition)
{
	return put_ctrl(buf, USHI_FRAME_MANIFEST, shuffle, 0, 0, partition, 0,
			0);
}

void proto_get_hello(const struct ushi_frame *f, const uint8_t *p,
		     struct proto_hello *h)
{
	h->shuffle = f->shuffle;
	h->map = f->map;
	h->attempt = f->attempt;
	h->version = get_le32(p);
	h->role = get_le32(p + 4);
	h->window = get_le32(p + 8);
	h->max_frame = get_le32(p + 12);
	memcpy(h->app, p + 16, USHI_PROTO_APP_MAX);
	h->app[USHI_PROTO_APP_MAX] = 0;
	h->flags = 0;
	memset(h->nonce, 0, USHI_PROTO_NONCE);
	if (f->payload_len < USHI_PROTO_HELLO_LEN)
		return; /* version 3's: refused for its version */
	h->flags = get_le32(p + 80);
	memcpy(h->nonce, p + 88, USHI_PROTO_NONCE);
}

void proto_get_auth(const uint8_t *p, struct proto_auth *a)
{
	a->step = get_le32(p);
	memcpy(a->nonce, p + 8, USHI_PROTO_NONCE);
	memcpy(a->mac, p + 8 + USHI_PROTO_NONCE, USHI_PROTO_MAC);
}

void proto_get_ack(const uint8_t *p, struct proto_ack *a)
{
	a->kind = get_le32(p);
	a->status = (int32_t)get_le32(p + 4);
	a->value = get_le64(p + 8);
}

int proto_get_error(const uint8_t *p, uint32_t len, char *msg, size_t n)
{
	uint32_t mlen = get_le32(p + 4);
	if (mlen != len - 8)
		mlen = 0; /* inconsistent: keep the code, drop the text */
	if (mlen >= n)
		mlen = (uint32_t)n - 1;
	memcpy(msg, p + 8, mlen);
	msg[mlen] = 0;
	/* The text came from a peer: keep it printable for log lines. */
	for (uint32_t i = 0; i < mlen; i++)
		if (msg[i] < 0x20 || msg[i] > 0x7e)
			msg[i] = '?';
	int code = (int)get_le32(p);
	return code < 0 && code > -5000 ? code : -EPROTO;
}

uint32_t proto_wants(const struct ushi_frame *f)
{
	return (f->payload_len - USHI_PROTO_FETCH_LEN) / USHI_PROTO_WANT_LEN;
}

int proto_get_want(const uint8_t *p, uint32_t i, struct proto_want *w)
{
	p += USHI_PROTO_FETCH_LEN + (size_t)i * USHI_PROTO_WANT_LEN;
	w->partition = get_le32(p);
	w->map = get_le32(p + 4);
	w->attempt = get_le32(p + 8);
	w->skip = get_le64(p + 16);
	return get_le32(p + 12) ? -EINVAL : 0;
}

uint32_t proto_worker_of(uint32_t partition, uint32_t nworkers)
{
	/* splitmix64 finaliser: jump hash wants well-spread keys. */
	uint64_t key = partition + 0x9e3779b97f4a7c15ull;
	key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
	key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
	key ^= key >> 31;
	int64_t b = -1, j = 0;
	while (j < (int64_t)nworkers) {
		b = j;
		key = key * 2862933555777941143ull + 1;
		j = (int64_t)((double)(b + 1) *
			      ((double)(1ll << 31) / (double)((key >> 33) + 1)));
	}
	return (uint32_t)b;
}
