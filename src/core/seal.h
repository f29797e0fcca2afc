/*
 * Sealing: each DATA frame's stored payload encrypted and authenticated
 * with AES-256-GCM by its writer, opened by its reader; workers store and
 * forward the sealed bytes without a key (docs/security.md, "Sealed
 * frames"; layout in docs/format.md §1.6).
 *
 * Keys: the application data key (ush_seal_key) never seals a frame
 * itself. Each writer draws a 16-byte salt and derives its own subkey,
 * HKDF-SHA256(data key, salt, "ushuffle seal v1" ‖ app ‖ shuffle ‖ map ‖
 * attempt); the status carries key id and salt to readers. Nonce: the
 * frame's partition (4 bytes) and seq (8), which one writer never gives
 * two different frames: so a nonce is used once per subkey.
 */
#ifndef USHI_SEAL_H
#define USHI_SEAL_H

#include "core/frame.h"

#define USHI_SEAL_TAG 16
_Static_assert(USHI_SEAL_TRAILER == 4 + USHI_SEAL_TAG, "trailer layout");
#define USHI_SEAL_SALT 16

/* A writer's or a reader's cipher context, made once and reset per
 * frame (the codec-context rule). */
struct ushi_seal {
	void *ctx; /* EVP_CIPHER_CTX */
	/* The subkey ctx holds: a frame under the same one sets only its
	 * nonce, not the AES key schedule and GHASH key again. */
	const uint8_t *key;
};

int seal_init(struct ushi_seal *s);
void seal_fini(struct ushi_seal *s);

/* The subkey of one attempt's writer (see above): 0 or -EIO. */
int seal_derive(uint8_t sub[USH_SEAL_KEY_SIZE],
		const uint8_t key[USH_SEAL_KEY_SIZE],
		const uint8_t salt[USHI_SEAL_SALT], const char *app,
		uint32_t shuffle, uint32_t map, uint32_t attempt);

/*
 * Seals frame f in place: hdr holds its header (frame_put(), f->flags
 * SEALED, f->payload_len counting the trailer), then the stored payload,
 * then room for the trailer, which is written here. Returns 0 or -EIO.
 */
int seal_frame(struct ushi_seal *s, const uint8_t sub[USH_SEAL_KEY_SIZE],
	       uint32_t key_id, uint8_t *hdr, const struct ushi_frame *f);
/* The key id in a sealed frame's trailer. */
uint32_t seal_key_id(const uint8_t *frame, const struct ushi_frame *f);
/* Checks a sealed frame's tag and decrypts its stored payload into out
 * (f->payload_len - USHI_SEAL_TRAILER bytes): 0, or USH_ECORRUPT when it
 * does not authenticate under sub (altered, or another key). */
int seal_open(struct ushi_seal *s, const uint8_t sub[USH_SEAL_KEY_SIZE],
	      const uint8_t *frame, const struct ushi_frame *f, uint8_t *out);

#endif
