/*
 * What a copy into memory costs right after that memory was the source
 * of an O_DIRECT write (docs/performance.md §11): 1 GiB copied in 1 MiB
 * pieces into a ring of huge-page memory, each piece then written to a
 * file under DIR with O_DIRECT; and the same copies without the writes.
 * On this project's VMs the first runs at a fraction of the second's
 * speed, and varies from run to run: whoever copies into buffers the disk
 * just read (the worker's receive) pays it.
 *
 *   ush_bench_dma_touch DIR [RING_MIB]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PIECE (1u << 20)
#define TOTAL (1ull << 30)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Seconds spent copying TOTAL bytes into ring (writing each piece to fd
 * after its copy when fd >= 0). */
static double copy_s(uint8_t *ring, size_t n, const uint8_t *src, int fd)
{
	double t = 0;
	size_t off = 0;
	for (unsigned long long d = 0; d < TOTAL; d += PIECE) {
		double t0 = now();
		memcpy(ring + off, src, PIECE);
		t += now() - t0;
		if (fd >= 0 && pwrite(fd, ring + off, PIECE, (off_t)d) != PIECE) {
			perror("pwrite");
			exit(1);
		}
		off = off + PIECE < n ? off + PIECE : 0;
	}
	return t;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR [RING_MIB]\n", argv[0]);
		return 2;
	}
	size_t n = (size_t)(argc > 2 ? atoi(argv[2]) : 8) << 20;
	if (n < PIECE) {
		fprintf(stderr, "RING_MIB: 1 or more\n");
		return 2;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/dma_touch.%d", argv[1], (int)getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT, 0600);
	uint8_t *src = malloc(PIECE);
	uint8_t *ring = mmap(NULL, n, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fd < 0 || !src || ring == MAP_FAILED) {
		perror(path);
		return 1;
	}
	unlink(path);
	madvise(ring, n, MADV_HUGEPAGE);
	memset(ring, 0, n);
	memset(src, 7, PIECE);
	double alone = copy_s(ring, n, src, -1);
	double after = copy_s(ring, n, src, fd);
	printf("copy into a %zu MiB ring: %.1f GB/s alone, %.1f GB/s after "
	       "O_DIRECT writes of it (%.2fx the time)\n", n >> 20,
	       TOTAL / alone / 1e9, TOTAL / after / 1e9, after / alone);
	close(fd);
	return 0;
}
