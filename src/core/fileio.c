/* The blocking file calls that more than one module needs whole: a
 * write and a read that survive short transfers and EINTR, a directory's
 * fsync (what makes a create, rename or unlink in it durable), a file
 * replaced whole or not at all. */
#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

int ushi_pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t r = pwrite(fd, b, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		b += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int ushi_pread_all(int fd, void *p, size_t n, uint64_t off)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = pread(fd, b, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return USH_ECORRUPT; /* shorter than its index says */
		b += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int ushi_sync_dir(const char *path, const char *who)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return ushi_fail(-errno, "%s: open %s (to sync it)", who, path);
	int ret = fsync(fd) ? -errno : 0;
	close(fd);
	return ret ? ushi_fail(ret, "%s: fsync %s", who, path) : 0;
}

int ushi_replace_at(int dirfd, const char *name, const void *p, size_t n)
{
	char tmp[4096];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= sizeof(tmp))
		return -ENAMETOOLONG;
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
			O_CLOEXEC, 0644);
	int ret = fd < 0 ? -errno : ushi_pwrite_all(fd, p, n, 0);
	if (!ret && fdatasync(fd))
		ret = -errno;
	if (fd >= 0)
		close(fd);
	if (!ret && renameat(dirfd, tmp, dirfd, name))
		ret = -errno;
	if (ret && fd >= 0) /* no stale temporary left for the next run */
		unlinkat(dirfd, tmp, 0);
	if (!ret && fsync(dirfd))
		ret = -errno;
	return ret;
}

int ushi_random(void *p, size_t n, const char *what)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom((uint8_t *)p + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return ushi_fail(-errno, "%s: getrandom", what);
		got += (size_t)r;
	}
	return 0;
}
