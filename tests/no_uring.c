/*
 * no_uring COMMAND [ARG...]: runs COMMAND where io_uring is refused with
 * EPERM, as in a Docker container with the default seccomp profile
 * (no_uring.h). tests/run.sh runs the whole test suite under it, which
 * must pass on the ring's plain-syscall backend.
 */
#include "no_uring.h"

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
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_uring: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
