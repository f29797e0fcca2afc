/*
 * Authentication of the worker protocol (docs/protocol.md §2.8,
 * docs/security.md): a mutual HMAC-SHA256 challenge-response over a
 * secret shared per application. Both sides pick a fresh random nonce per
 * connection and every MAC covers the client's HELLO frame, byte for
 * byte, and the worker's nonce, so a recorded handshake proves nothing on
 * another connection. Shared by the client library and the worker.
 */
#ifndef USHI_AUTH_H
#define USHI_AUTH_H

#include "core/internal.h"

#define USHI_AUTH_NONCE 32u
#define USHI_AUTH_MAC 32u /* HMAC-SHA256 */
/* Secrets: 16 bytes at least (Spark generates 32), 4 KiB at most. */
#define USHI_SECRET_MIN 16u
#define USHI_SECRET_MAX 4096u
/* The environment variable the library, the CLI and ushuffled read. */
#define USHI_SECRET_ENV "USHUFFLE_SECRET"

/* Whose proof auth_mac() computes; or, for the session keys of
 * control-frame MACs (mac.h), which direction's key. */
enum auth_side {
	AUTH_WORKER = 1,
	AUTH_CLIENT = 2,
	AUTH_KEY_WORKER = 3, /* the key of what the worker sends */
	AUTH_KEY_CLIENT = 4, /* the key of what the client sends */
};

/* Fills n with USHI_AUTH_NONCE random bytes (getrandom). Returns 0 or
 * -errno. */
int auth_nonce(uint8_t *n);
/*
 * The proof of side: HMAC-SHA256(secret, label || hello || nw [|| pw]),
 * label "ushuffle-auth-v4 worker" or "ushuffle-auth-v4 client" (so one
 * side's proof is never the other's), hello the client's HELLO frame as
 * sent (header and payload), nw the worker's nonce and, for the client's
 * proof only, pw the worker's proof. A session key (AUTH_KEY_*) is the
 * same MAC under label "ushuffle-mac-v6 worker" or "ushuffle-mac-v6
 * client", without pw: a pseudo-random function of the secret and both
 * nonces, never equal to a proof sent in the clear. Returns 0 or -EIO.
 */
int auth_mac(const uint8_t *secret, size_t slen, enum auth_side side,
	     const uint8_t *hello, size_t hlen, const uint8_t *nw,
	     const uint8_t *pw, uint8_t *mac);
/* Constant-time comparison of two MACs (CRYPTO_memcmp). */
bool auth_mac_equal(const uint8_t *a, const uint8_t *b);
/*
 * Reads a secret from path (relative to dirfd, or AT_FDCWD; a symbolic
 * link is not followed when nofollow): the whole file, one trailing
 * newline ("\n" or "\r\n") removed, USHI_SECRET_MIN..MAX bytes, into buf
 * (USHI_SECRET_MAX bytes). Never blocks on the open: only a regular file
 * is read (-EINVAL for a FIFO, a device, a directory). A file that
 * changes while it is read (written in place) is read again, a few
 * times, then refused with -EAGAIN; never taken half. Returns the length
 * or an error with a message naming the file (-ENOENT when it does not
 * exist, -EINVAL for a bad length). *loose is set when the file is
 * readable by group or others.
 */
int auth_read_secret(int dirfd, const char *path, bool nofollow,
		     uint8_t *buf, bool *loose);
/* auth_read_secret()'s reading: the whole regular file path, into tmp
 * (n bytes at most; a longer file fills it), with the same checks;
 * messages start with what ("auth: secret file"). Returns its length or
 * an error. */
int auth_read_file(int dirfd, const char *path, bool nofollow, uint8_t *tmp,
		   size_t n, bool *loose, const char *what);
/* A secret's length is acceptable. Fails with a message naming what. */
int auth_secret_len_ok(size_t len, const char *what);

#endif
