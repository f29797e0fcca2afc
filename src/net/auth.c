/* HMAC-SHA256 proofs, nonces and secret files; see auth.h. */
#define _GNU_SOURCE
#include "net/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

int auth_nonce(uint8_t *n)
{
	return ushi_random(n, USHI_AUTH_NONCE, "auth");
}

int auth_mac(const uint8_t *secret, size_t slen, enum auth_side side,
	     const uint8_t *hello, size_t hlen, const uint8_t *nw,
	     const uint8_t *pw, uint8_t *mac)
{
	/* Room for each label and its NUL (a label stays under 32 bytes),
	 * which bounds the transcript's buffer. */
	static const char labels[][32] = {
		[AUTH_WORKER] = "ushuffle-auth-v4 worker",
		[AUTH_CLIENT] = "ushuffle-auth-v4 client",
		[AUTH_KEY_WORKER] = "ushuffle-mac-v6 worker",
		[AUTH_KEY_CLIENT] = "ushuffle-mac-v6 client",
	};
	/* The transcript is small (a HELLO frame and two 32-byte values):
	 * one buffer and OpenSSL's one-shot HMAC(). */
	uint8_t t[sizeof(labels[0]) + 256 + 2 * USHI_AUTH_MAC];
	if (hlen > 256)
		return ushi_fail(-EINVAL, "auth: HELLO of %zu bytes", hlen);
	size_t n = strlen(labels[side]) + 1; /* with its NUL: a separator */
	memcpy(t, labels[side], n);
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

/* One read of the whole file open at fd (a regular file, *st its state
 * when opened) into tmp (n bytes at most): its length, or -EAGAIN when
 * the file changed meanwhile (a write in place: its size or times moved,
 * or the bytes read are not its size), or -errno. */
static int read_whole(int fd, const struct stat *st, uint8_t *tmp, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, tmp + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	struct stat now;
	if (fstat(fd, &now))
		return -errno;
	if ((got < n && (off_t)got != st->st_size) ||
	    now.st_size != st->st_size ||
	    now.st_mtim.tv_sec != st->st_mtim.tv_sec ||
	    now.st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
	    now.st_ctim.tv_sec != st->st_ctim.tv_sec ||
	    now.st_ctim.tv_nsec != st->st_ctim.tv_nsec)
		return -EAGAIN;
	return (int)got;
}

/* Tries before a file that keeps changing as it is read is refused. */
#define READ_TRIES 4

/*
 * Opens path without blocking (a FIFO or a device there must not stall
 * a worker thread: only a regular file is read) and reads it whole into
 * tmp; a file that changes while it is read is read again from a new
 * open, READ_TRIES times at most, and never taken half.
 */
int auth_read_file(int dirfd, const char *path, bool nofollow, uint8_t *tmp,
		   size_t n, bool *loose, const char *what)
{
	int ret = -EAGAIN;
	for (int i = 0; i < READ_TRIES && ret == -EAGAIN; i++) {
		int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY |
				O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
		if (fd < 0)
			return ushi_fail(-errno, "%s %s: %s", what, path,
					strerror(errno));
		struct stat st;
		ret = fstat(fd, &st) ? -errno : 0;
		if (!ret && !S_ISREG(st.st_mode)) {
			close(fd);
			return ushi_fail(-EINVAL, "%s %s is not a regular "
					"file", what, path);
		}
		if (!ret) {
			*loose = (st.st_mode & 077) != 0;
			ret = read_whole(fd, &st, tmp, n);
		}
		close(fd);
	}
	if (ret == -EAGAIN)
		return ushi_fail(ret, "%s %s changed while it was read, %d "
				"times in a row: write a new file and rename "
				"it over the old one", what, path, READ_TRIES);
	if (ret < 0)
		return ushi_fail(ret, "%s %s: reading: %s", what, path,
				strerror(-ret));
	return ret;
}

int auth_read_secret(int dirfd, const char *path, bool nofollow,
		     uint8_t *buf, bool *loose)
{
	/* Room for the longest secret, its "\r\n" and one byte more: a
	 * file that fills it is too long, whatever follows. */
	uint8_t tmp[USHI_SECRET_MAX + 3];
	int ret = auth_read_file(dirfd, path, nofollow, tmp, sizeof(tmp), loose,
				 "auth: secret file");
	size_t n = ret > 0 ? (size_t)ret : 0;
	if (n && tmp[n - 1] == '\n')
		n -= n >= 2 && tmp[n - 2] == '\r' ? 2 : 1;
	char what[300];
	snprintf(what, sizeof(what), "in %.280s", path);
	if (ret >= 0 && n > USHI_SECRET_MAX)
		ret = ushi_fail(-EINVAL, "auth: the secret in %s is longer than "
				"%u bytes", path, USHI_SECRET_MAX);
	else if (ret >= 0 && !(ret = auth_secret_len_ok(n, what)))
		memcpy(buf, tmp, n);
	explicit_bzero(tmp, sizeof(tmp));
	return ret ? ret : (int)n;
}
