/* HMAC-SHA256 proofs, nonces and secret files; see auth.h. */
#define _GNU_SOURCE
#include "net/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int auth_nonce(uint8_t *n)
{
	size_t got = 0;
	while (got < USHI_AUTH_NONCE) {
		ssize_t r = getrandom(n + got, USHI_AUTH_NONCE - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ushi_fail(-errno, "auth: getrandom");
		got += (size_t)r;
	}
	return 0;
}

int auth_mac(const uint8_t *secret, size_t slen, enum auth_side side,
	     const uint8_t *hello, size_t hlen, const uint8_t *nw,
	     const uint8_t *pw, uint8_t *mac)
{
	static const char wlabel[] = "ushuffle-auth-v4 worker";
	static const char clabel[] = "ushuffle-auth-v4 client";
	/* The transcript is small (a HELLO frame and two 32-byte values):
	 * one buffer and OpenSSL's one-shot HMAC(). */
	uint8_t t[sizeof(wlabel) + 256 + 2 * USHI_AUTH_MAC];
	size_t n = 0;
	if (hlen > 256)
		return ushi_fail(-EINVAL, "auth: HELLO of %zu bytes", hlen);
	const char *label = side == AUTH_WORKER ? wlabel : clabel;
	memcpy(t, label, sizeof(wlabel)); /* with its NUL: a separator */
	n += sizeof(wlabel);
	memcpy(t + n, hello, hlen);
	n += hlen;
	memcpy(t + n, nw, USHI_AUTH_NONCE);
	n += USHI_AUTH_NONCE;
	if (side == AUTH_CLIENT) {
		memcpy(t + n, pw, USHI_AUTH_MAC);
		n += USHI_AUTH_MAC;
	}
	unsigned len = 0;
	if (!HMAC(EVP_sha256(), secret, (int)slen, t, n, mac, &len) ||
	    len != USHI_AUTH_MAC)
		return ushi_fail(-EIO, "auth: HMAC-SHA256 failed (libcrypto)");
	return 0;
}

bool auth_mac_equal(const uint8_t *a, const uint8_t *b)
{
	return CRYPTO_memcmp(a, b, USHI_AUTH_MAC) == 0;
}

int auth_secret_len_ok(size_t len, const char *what)
{
	if (len < USHI_SECRET_MIN || len > USHI_SECRET_MAX)
		return ushi_fail(-EINVAL, "auth: the secret %s has %zu bytes; "
				"a secret has %u to %u (e.g. 32 random bytes, "
				"hex: openssl rand -hex 32)", what, len,
				USHI_SECRET_MIN, USHI_SECRET_MAX);
	return 0;
}

int auth_read_secret(int dirfd, const char *path, bool nofollow,
		     uint8_t *buf, bool *loose)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY |
			(nofollow ? O_NOFOLLOW : 0));
	if (fd < 0)
		return ushi_fail(-errno, "auth: secret file %s: %s", path,
				strerror(errno));
	struct stat st;
	int ret = 0;
	if (fstat(fd, &st))
		ret = -errno;
	else if (!S_ISREG(st.st_mode))
		ret = -EINVAL;
	if (ret) {
		close(fd);
		return ushi_fail(ret, "auth: secret file %s is not a regular "
				"file", path);
	}
	*loose = (st.st_mode & 077) != 0;
	/* Room for the longest secret, its "\r\n" and one byte more: a
	 * file that fills it is too long, whatever follows. */
	uint8_t tmp[USHI_SECRET_MAX + 3];
	size_t n = 0;
	while (n < sizeof(tmp)) {
		ssize_t r = read(fd, tmp + n, sizeof(tmp) - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = ushi_fail(-errno, "auth: reading secret file %s",
				       path);
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (ret)
		return ret;
	if (n && tmp[n - 1] == '\n')
		n -= n >= 2 && tmp[n - 2] == '\r' ? 2 : 1;
	if (n > USHI_SECRET_MAX)
		return ushi_fail(-EINVAL, "auth: the secret in %s is longer than "
				"%u bytes", path, USHI_SECRET_MAX);
	memcpy(buf, tmp, n);
	explicit_bzero(tmp, sizeof(tmp));
	char what[300];
	snprintf(what, sizeof(what), "in %.280s", path);
	ret = auth_secret_len_ok(n, what);
	return ret ? ret : (int)n;
}
