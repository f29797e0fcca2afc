/*
 * Session MACs of control frames (docs/protocol.md §2.9): after the AUTH
 * exchange every frame of an authenticated connection except DATA
 * carries a 16-byte tag, HMAC-SHA256 under a key of its direction
 * derived from the handshake, over an implicit sequence number, the
 * header and the payload. A frame injected, altered, replayed, dropped
 * or reordered fails its check. Shared by the client library and the
 * worker.
 */
#ifndef USHI_MAC_H
#define USHI_MAC_H

#include "net/auth.h"
#include "net/proto.h"

/* The state of one connection's MACs: none (zeroed: an --insecure
 * connection, or before the handshake ends), or a keyed context and a
 * count of frames per direction. */
struct ushi_mac {
	struct evp_mac_ctx_st *tx, *rx;
	uint64_t txn, rxn; /* frames sealed, frames opened */
};

/* The two session keys of a connection: keys[0] for what the worker
 * sends, keys[1] for what the client sends. */
typedef uint8_t mac_keys[2][USHI_AUTH_MAC];
/*
 * Derives a connection's session keys from the application's secret and
 * the handshake's transcript (auth_mac() with AUTH_KEY_*): the client's
 * HELLO frame of hlen bytes, with the client's nonce, and the worker's
 * nonce nw. Returns 0 or -EIO.
 */
int mac_derive(const uint8_t *secret, size_t slen, const uint8_t *hello,
	       size_t hlen, const uint8_t *nw, mac_keys keys);
/* Keys m (zeroed or freed) for side me (AUTH_WORKER or AUTH_CLIENT):
 * from now on it seals what me sends and opens what it receives. Wipes
 * keys. Returns 0 or -ENOMEM (m stays off). */
int mac_start(struct ushi_mac *m, mac_keys keys, enum auth_side me);
/* Frees m's contexts and zeroes it (NULL contexts: nothing to free). */
void mac_free(struct ushi_mac *m);
/* Does m protect its connection? */
static inline bool mac_on(const struct ushi_mac *m)
{
	return m->tx != NULL;
}
/*
 * Seals the whole frame of len bytes at frame, which has room for
 * USHI_MAC_TAG bytes more: a control frame gets the MAC flag, the tag
 * behind its payload (counted in its lengths) and a new CRC. Returns its
 * new length; len for DATA or when m is off. Never fails: should
 * libcrypto fail, the tag is left zero and the peer refuses the frame,
 * which ends the connection as an error here would.
 */
size_t mac_seal(struct ushi_mac *m, uint8_t *frame, size_t len);
/*
 * Checks the tag of a received frame (its header parsed into f, its CRC
 * checked): with m on, every frame but DATA must carry the next tag of
 * its direction; with m off, none may. On success f's lengths no longer
 * count the tag, so the payload decoders see what was sealed. Returns
 * 0, or -EACCES with *why naming the broken rule.
 */
int mac_open(struct ushi_mac *m, const uint8_t *frame, struct ushi_frame *f,
	     const char **why);

#endif
