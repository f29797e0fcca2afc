/*
 * no_uring COMMAND [ARG...]: runs COMMAND where io_uring is refused with
 * EPERM, as in a Docker container with the default seccomp profile
 * (no_uring.h). tests/run.sh runs the whole test suite under it, which
 * must pass on the ring's plain-syscall backend.
 */
#include "no_uring.h"

#include <stdio.h>
#include <string.h>
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
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_uring: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
