/*
 * A seccomp filter that refuses io_uring as Docker's default profile
 * does: io_uring_setup, io_uring_enter and io_uring_register fail with
 * EPERM; every other call is allowed. Installed with no_new_privs, so an
 * unprivileged process may install it, and inherited by every child it
 * forks and execs from then on (seccomp filters cannot be removed).
 */
#ifndef USH_TEST_NO_URING_H
#define USH_TEST_NO_URING_H

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define NO_URING_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NO_URING_ARCH AUDIT_ARCH_AARCH64
#else
#error "no_uring: add this architecture's AUDIT_ARCH"
#endif

/* Returns 0, or -errno when the filter could not be installed. */
static inline int no_uring_install(void)
{
#define NR_IS(nr, skip) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), (skip), 0)
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, arch)),
		/* Another ABI's numbers mean other calls: allow. */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NO_URING_ARCH, 0, 4),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		NR_IS(__NR_io_uring_setup, 3),
		NR_IS(__NR_io_uring_enter, 2),
		NR_IS(__NR_io_uring_register, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
	};
#undef NR_IS
	struct sock_fprog prog = {
		.len = (unsigned short)(sizeof(f) / sizeof(f[0])),
		.filter = f,
	};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return -errno;
	return 0;
}

#endif
