/* Who calls: the calling thread's id, and whether the process is a
 * forked child of the one that created an object. */
#define _GNU_SOURCE /* gettid */
#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

unsigned ushi_fork_gen;
_Thread_local pid_t ushi_tid_cache;

/* Runs in the child, where only the forking thread lives: its cached id
 * is its parent's thread's, and every object the parent made is now a
 * copy whose I/O belongs to the parent. */
static void in_child(void)
{
	ushi_fork_gen++;
	ushi_tid_cache = 0;
}

/* At load, before any object exists: a handler registered at the first
 * ring would race a fork() of another thread. */
__attribute__((constructor)) static void fork_init(void)
{
	pthread_atfork(NULL, NULL, in_child);
}

pid_t ushi_tid_slow(void)
{
	return ushi_tid_cache = gettid();
}

int ushi_fork_refused(const char *who)
{
	return ushi_fail(-EPERM, "%s: called in process %d, a fork() child of "
			 "the process that created the object: a child "
			 "creates its own rings, writers and readers, and may "
			 "only free its copies (which leaves the parent's "
			 "files, connections and ring alone)", who,
			 (int)getpid());
}
