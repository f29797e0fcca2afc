/*
 * no_uring COMMAND [ARG...]: runs COMMAND where io_uring is refused with
 * EPERM, as in a Docker container with the default seccomp profile
 * (no_uring.h), after checking that the filter refuses io_uring_setup
 * with EPERM and that the library's ring then reports the fallback.
 * tests/run.sh runs the whole test suite under it, which must pass on
 * the ring's plain-syscall backend.
 */
#include "no_uring.h"

#include <ushuffle/ushuffle.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: no_uring COMMAND [ARG...]\n");
		return 2;
	}
	int ret = no_uring_install();
	if (ret) {
		fprintf(stderr, "no_uring: installing the seccomp filter: %s\n",
			strerror(-ret));
		return 1;
	}
	/* The pass means nothing unless io_uring is refused as Docker
	 * refuses it: EPERM before the arguments are looked at (without the
	 * filter, NULL params give EFAULT). */
	if (syscall(__NR_io_uring_setup, 1, NULL) != -1 || errno != EPERM) {
		fprintf(stderr, "no_uring: io_uring_setup was not refused with "
			"EPERM (%s): the filter does not work here\n",
			strerror(errno));
		return 1;
	}
	/* And the library's ring must take its plain-syscall backend here,
	 * or the suite below would test nothing new. */
	ush_ring *ring;
	struct ush_ring_opts o;
	ush_ring_opts_init(&o);
	o.pool_bytes = 1u << 20;
	ret = ush_ring_create(&ring, &o);
	if (ret) {
		fprintf(stderr, "no_uring: a ring without io_uring: %s\n",
			ush_last_error());
		return 1;
	}
	struct ush_ring_info info;
	ush_ring_info(ring, &info);
	ush_ring_free(ring);
	if (info.uring_refused != -EPERM) {
		fprintf(stderr, "no_uring: the library's ring reports "
			"uring_refused %d, not -EPERM: it did not fall back "
			"to plain system calls\n", info.uring_refused);
		return 1;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_uring: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
