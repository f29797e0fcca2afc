/*
 * The worker protocol (docs/protocol.md): control messages are frames of
 * their own types with the same 48-byte header and CRC32C as DATA frames,
 * so one parser bounds every length before anything is allocated.
 */
#ifndef USHI_PROTO_H
#define USHI_PROTO_H

#include "core/frame.h"

#define USHI_PROTO_VERSION 7
/* Control payloads are small except FETCH, which names one attempt per
 * map; this bounds them. */
#define USHI_PROTO_CTRL_MAX (16u << 20)
/* The largest DATA frame the format allows (frame_decode()'s bounds):
 * what stored files and fetch streams are read with, whatever a worker's
 * max_frame is now (it bounds what the worker accepts from writers, and
 * may have been larger when the frames were stored). */
#define USHI_FRAME_MAX                                                        \
	(USH_FRAME_HDR_SIZE + USH_RECORD_HDR_SIZE + USH_RECORD_MAX +           \
	 USHI_SEAL_TRAILER)
#define USHI_PROTO_ERRMSG_MAX 512u
#define USHI_PROTO_APP_MAX 64u /* application id bytes */
#define USHI_PROTO_NONCE 32u   /* auth.h's USHI_AUTH_NONCE */
#define USHI_PROTO_MAC 32u     /* auth.h's USHI_AUTH_MAC */
#define USHI_PROTO_HELLO_LEN (24u + USHI_PROTO_APP_MAX + USHI_PROTO_NONCE)
#define USHI_PROTO_HELLO_V3_LEN (16u + USHI_PROTO_APP_MAX)
#define USHI_PROTO_AUTH_LEN (8u + USHI_PROTO_NONCE + USHI_PROTO_MAC)
#define USHI_PROTO_ACK_LEN 16u
/* FETCH: the offset and the range's partition count; then the entries */
#define USHI_PROTO_FETCH_LEN 16u
/* FETCH entry: partition, map, attempt, zero, skip */
#define USHI_PROTO_WANT_LEN 24u
#define USHI_PROTO_WANTS_MAX                                                  \
	((USHI_PROTO_CTRL_MAX - USHI_PROTO_FETCH_LEN) / USHI_PROTO_WANT_LEN)
#define USHI_PROTO_FETCH_END_LEN 8u
/* A sealed control frame (net/mac.h): the header flag, and the tag at
 * the end of its payload, counted in its lengths. */
#define USHI_FLAG_MAC 0x80u
#define USHI_MAC_TAG 16u
/* Bytes a control frame may take, its tag included, rounded for small
 * stack buffers. */
#define USHI_PROTO_SMALL 192u
#define USHI_PROTO_ERROR_SIZE                                                 \
	(USH_FRAME_HDR_SIZE + 8u + USHI_PROTO_ERRMSG_MAX + USHI_MAC_TAG)

enum ushi_proto_type {
	USHI_FRAME_HELLO = 2,
	USHI_FRAME_MAPPER_END = 3,
	USHI_FRAME_FETCH = 4,
	USHI_FRAME_ACK = 5,
	USHI_FRAME_ERROR = 6,
	USHI_FRAME_DROP = 7,
	USHI_FRAME_MANIFEST = 8,
	USHI_FRAME_FETCH_END = 9,
	USHI_FRAME_PAD = 10, /* worker files only: O_DIRECT padding */
	USHI_FRAME_HEARTBEAT = 11,
	USHI_FRAME_AUTH = 12,
};

/* HELLO flags. */
#define USHI_HELLO_AUTH 1u /* request: the client holds a secret and asks
			      for the challenge; reply: authenticated */

/* AUTH steps: the worker's challenge and proof, the client's proof. */
enum ushi_proto_auth {
	USHI_AUTH_CHALLENGE = 1,
	USHI_AUTH_RESPONSE = 2,
};

enum ushi_proto_role {
	USHI_ROLE_WRITER = 1,
	USHI_ROLE_READER = 2,
	USHI_ROLE_ADMIN = 3,
};

enum ushi_proto_ack {
	USHI_ACK_CREDIT = 1, /* value: DATA bytes consumed */
	USHI_ACK_COMMIT = 2, /* status: 0 or USH_ECOMMITTED */
	USHI_ACK_DROP = 3,
	USHI_ACK_HEARTBEAT = 4,
};

/* Every HELLO names the client's application (its shuffles' owner); a
 * writer's names the attempt it writes in the header's shuffle, map and
 * attempt fields. */
struct proto_hello {
	uint32_t version, role, window, max_frame;
	uint32_t shuffle, map, attempt;
	char app[USHI_PROTO_APP_MAX + 1]; /* NUL-terminated */
	uint32_t flags;                   /* USHI_HELLO_* */
	uint8_t nonce[USHI_PROTO_NONCE];  /* the client's, with
					     USHI_HELLO_AUTH */
};

/* AUTH: a challenge carries the worker's nonce and proof, a response the
 * client's proof (nonce zero). */
struct proto_auth {
	uint32_t step;
	uint8_t nonce[USHI_PROTO_NONCE];
	uint8_t mac[USHI_PROTO_MAC];
};

/* Is app a valid application id: 1..64 bytes of [A-Za-z0-9._:-]? */
bool proto_app_ok(const char *app);

struct proto_ack {
	uint32_t kind;
	int32_t status;
	uint64_t value;
};

/* A FETCH names a range of partitions and, per partition of it that the
 * reader wants from this worker, the attempt of each map to stream,
 * ascending (partition, map), and how many of its first batches to leave
 * out: those a reader failing over from another replica has verified
 * already. */
struct proto_want {
	uint32_t partition, map, attempt;
	uint64_t skip;
};

/*
 * Parses a header and bounds it by type: DATA frames as frame_decode()
 * and at most max_frame bytes in all; control frames codec 0, no
 * records and an exact or bounded payload length, plus the tag when
 * their flags are USHI_FLAG_MAC (whether one is due, mac_open() says).
 * PAD is refused unless pad_ok (it never travels). Returns 0 or USH_ECORRUPT /
 * USH_EVERSION with *why naming the broken rule.
 */
int proto_header(const uint8_t *hdr, struct ushi_frame *f, uint32_t max_frame,
		 bool pad_ok, const char **why);
/* Frame size on the wire: header + payload. */
static inline size_t proto_size(const struct ushi_frame *f)
{
	return USH_FRAME_HDR_SIZE + (size_t)f->payload_len;
}

/* Encoders: write a whole frame at buf and return its size. */
size_t proto_put_hello(uint8_t *buf, const struct proto_hello *h);
size_t proto_put_auth(uint8_t *buf, const struct proto_auth *a);
size_t proto_put_ack(uint8_t *buf, uint32_t shuffle, uint32_t map,
		     uint32_t attempt, const struct proto_ack *a);
size_t proto_put_error(uint8_t *buf, int code, const char *msg);
size_t proto_fetch_size(uint32_t n);
/* FETCH of partitions [first, first + count): the n entries w. */
size_t proto_put_fetch(uint8_t *buf, uint32_t shuffle, uint32_t first,
		       uint32_t count, uint64_t offset,
		       const struct proto_want *w, uint32_t n);
size_t proto_put_fetch_end(uint8_t *buf, uint32_t shuffle,
			   uint32_t partition, uint64_t frames,
			   uint64_t bytes);
size_t proto_put_drop(uint8_t *buf, uint32_t shuffle);
size_t proto_put_heartbeat(uint8_t *buf);
/* total >= USH_FRAME_HDR_SIZE; the payload bytes are zeroed. */
size_t proto_put_pad(uint8_t *buf, uint32_t total);
size_t proto_put_mapper_end(uint8_t *buf, uint32_t shuffle, uint32_t map,
			    uint32_t attempt);
/* MANIFEST: the FETCH is accepted (every attempt it names is committed
 * here); the stream follows. */
size_t proto_put_manifest(uint8_t *buf, uint32_t shuffle, uint32_t partition);

/* Decoders of payloads whose length proto_header() checked. FETCH and
 * FETCH_END payloads start with one get_le64() value (offset, bytes). */
void proto_get_hello(const struct ushi_frame *f, const uint8_t *p,
		     struct proto_hello *h);
void proto_get_auth(const uint8_t *p, struct proto_auth *a);
void proto_get_ack(const uint8_t *p, struct proto_ack *a);
/* Copies the message (NUL-terminated, at most n - 1 bytes) into msg and
 * returns the code: a negative errno or USH_E* value, or -EPROTO when the
 * peer sent anything else. */
int proto_get_error(const uint8_t *p, uint32_t len, char *msg, size_t n);
/* The FETCH's entries: their number, and entry i. Its range's partition
 * count is get_le32(payload + 8). */
uint32_t proto_wants(const struct ushi_frame *f);
/* 0, or -EINVAL when the entry's zero field is not. */
int proto_get_want(const uint8_t *p, uint32_t i, struct proto_want *w);

/* Partition -> worker: jump consistent hash (Lamping & Veach) of a mixed
 * partition number, stable when workers are appended to the list. */
uint32_t proto_worker_of(uint32_t partition, uint32_t nworkers);

#endif
