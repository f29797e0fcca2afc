/* Session MACs of control frames; see mac.h and docs/protocol.md §2.9. */
#define _GNU_SOURCE
#include "net/mac.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

/* The header up to its CRC field (its last): the CRC is computed after
 * the tag, over it, so the tag cannot cover the CRC. */
#define HDR_SIGNED (USH_FRAME_HDR_SIZE - 4u)

int mac_derive(const uint8_t *secret, size_t slen, const uint8_t *hello,
	       size_t hlen, const uint8_t *nw, mac_keys keys)
{
	int ret = auth_mac(secret, slen, AUTH_KEY_WORKER, hello, hlen, nw,
			   NULL, keys[0]);
	return ret ? ret : auth_mac(secret, slen, AUTH_KEY_CLIENT, hello,
				    hlen, nw, NULL, keys[1]);
}

/* An HMAC-SHA256 context keyed once: each tag re-initialises it with
 * the key's state kept (EVP_MAC_init() with no key), so a frame costs
 * no key schedule and no allocation. */
static EVP_MAC_CTX *keyed(const uint8_t *key)
{
	EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
	EVP_MAC_free(hmac); /* the context holds its own reference */
	char digest[] = "SHA256";
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest,
						 0),
		OSSL_PARAM_construct_end(),
	};
	if (ctx && !EVP_MAC_init(ctx, key, USHI_AUTH_MAC, p)) {
		EVP_MAC_CTX_free(ctx);
		ctx = NULL;
	}
	return ctx;
}

int mac_start(struct ushi_mac *m, mac_keys keys, enum auth_side me)
{
	bool worker = me == AUTH_WORKER;
	m->tx = keyed(keys[worker ? 0 : 1]);
	m->rx = keyed(keys[worker ? 1 : 0]);
	m->txn = m->rxn = 0;
	explicit_bzero(keys, sizeof(mac_keys));
	if (m->tx && m->rx)
		return 0;
	mac_free(m);
	return ushi_fail(-ENOMEM, "auth: HMAC-SHA256 context (libcrypto)");
}

void mac_free(struct ushi_mac *m)
{
	EVP_MAC_CTX_free(m->tx);
	EVP_MAC_CTX_free(m->rx);
	*m = (struct ushi_mac){0};
}

/* The tag of frame number seq: HMAC-SHA256 over seq (le64), the header
 * up to its CRC and the body bytes of payload before the tag, truncated
 * to USHI_MAC_TAG bytes. Returns 0 or -EIO. */
static int tag(EVP_MAC_CTX *ctx, uint64_t seq, const uint8_t *frame,
	       size_t body, uint8_t *out)
{
	uint8_t s[8], full[USHI_AUTH_MAC];
	size_t n = 0;
	put_le64(s, seq);
	if (!EVP_MAC_init(ctx, NULL, 0, NULL) ||
	    !EVP_MAC_update(ctx, s, sizeof(s)) ||
	    !EVP_MAC_update(ctx, frame, HDR_SIGNED) ||
	    !EVP_MAC_update(ctx, frame + USH_FRAME_HDR_SIZE, body) ||
	    !EVP_MAC_final(ctx, full, &n, sizeof(full)) || n != sizeof(full))
		return -EIO;
	memcpy(out, full, USHI_MAC_TAG);
	return 0;
}

size_t mac_seal(struct ushi_mac *m, uint8_t *frame, size_t len)
{
	struct ushi_frame f;
	if (!mac_on(m) || frame_parse(frame, &f) || f.type == USHI_FRAME_DATA)
		return len;
	size_t body = f.payload_len;
	f.flags |= USHI_FLAG_MAC;
	f.payload_len += USHI_MAC_TAG;
	f.raw_len = f.payload_len;
	/* Once for the fields the tag covers, once more for the CRC over
	 * the tag (mac.h: a tag libcrypto could not make stays zero). */
	frame_encode(frame, &f);
	uint8_t *t = frame + USH_FRAME_HDR_SIZE + body;
	if (tag(m->tx, m->txn++, frame, body, t))
		memset(t, 0, USHI_MAC_TAG);
	frame_encode(frame, &f);
	return len + USHI_MAC_TAG;
}

static int refuse(const char **why, const char *rule)
{
	*why = rule;
	return -EACCES;
}

int mac_open(struct ushi_mac *m, const uint8_t *frame, struct ushi_frame *f,
	     const char **why)
{
	bool has = f->flags & USHI_FLAG_MAC;
	if (f->type == USHI_FRAME_DATA)
		return 0;
	if (!mac_on(m))
		return has ? refuse(why, "a control frame with a MAC where "
				    "none is due (before the handshake ended, "
				    "or without a secret)") : 0;
	if (!has)
		return refuse(why, "a control frame without its MAC "
			      "(injected into the connection?)");
	size_t body = f->payload_len - USHI_MAC_TAG; /* proto_header() */
	uint8_t t[USHI_MAC_TAG];
	if (tag(m->rx, m->rxn, frame, body, t) ||
	    CRYPTO_memcmp(t, frame + USH_FRAME_HDR_SIZE + body, sizeof(t)))
		return refuse(why, "a control frame failed its MAC (altered, "
			      "injected, replayed or out of order)");
	m->rxn++;
	f->flags &= (uint8_t)~USHI_FLAG_MAC;
	f->payload_len = f->raw_len = (uint32_t)body;
	return 0;
}
