/*
 * What one job's threads share, below the phases that use it: the stop
 * flag (Ctrl-C, SIGTERM) and the first error, the barriers between the
 * phases, the clock and the shuffle id. job.c runs the threads; write.c,
 * read.c, eta.c and manifest.c call here, never back into job.c.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <ctype.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

atomic_int cli_stop;

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&cli_stop, 1);
}

void cli_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESETHAND | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* FNV-1a: a stable shuffle id per job name. */
uint32_t job_shuffle_id(const char *name)
{
	uint32_t h = 2166136261u;
	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	return h;
}

unsigned job_dir(const struct job_opts *o, unsigned i, char *buf, size_t n)
{
	unsigned count = 1;
	for (const char *p = o->dir; *p; p++)
		count += *p == ':';
	const char *p = o->dir;
	for (unsigned k = i % count; k; k--)
		p = strchr(p, ':') + 1;
	snprintf(buf, n, "%.*s", (int)strcspn(p, ":"), p);
	return count;
}

_Static_assert(CPU_LIST_MAX == CPU_SETSIZE, "CPU_LIST_MAX");

int cpu_list(const char *s, void *set, const char **at)
{
	if (set)
		CPU_ZERO((cpu_set_t *)set);
	while (*s) {
		char *end;
		unsigned long lo = strtoul(s, &end, 10), hi = lo;
		bool ok = isdigit((unsigned char)*s);
		if (ok && *end == '-') {
			ok = isdigit((unsigned char)end[1]);
			hi = strtoul(end + 1, &end, 10);
		}
		if (!ok || lo > hi || hi >= CPU_SETSIZE ||
		    (*end && *end != ',') || (*end == ',' && !end[1])) {
			*at = s;
			return -1;
		}
		for (unsigned long c = lo; set && c <= hi; c++)
			CPU_SET(c, (cpu_set_t *)set);
		s = *end ? end + 1 : end;
	}
	return 0;
}

bool job_stopping(const struct job_ctx *j)
{
	return atomic_load_explicit(&cli_stop, memory_order_relaxed) ||
	       atomic_load_explicit(&j->failed, memory_order_relaxed);
}

void job_fail(struct thread_ctx *t, int err, const char *fmt, ...)
{
	struct job_ctx *j = t->job;
	va_list ap;
	if (!t->res->err)
		t->res->err = err;
	atomic_store(&j->failed, 1);
	pthread_mutex_lock(&j->lock);
	if (!j->res->err) {
		j->res->err = err;
		va_start(ap, fmt);
		vsnprintf(j->res->errmsg, sizeof(j->res->errmsg), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&j->lock);
}

void phase_barrier(struct thread_ctx *t, unsigned mark)
{
	struct job_ctx *j = t->job;
	/* Twice: nobody works while the count is taken. */
	if (pthread_barrier_wait(&j->bar) == PTHREAD_BARRIER_SERIAL_THREAD) {
		/* Process-wide: the embedded worker allocates through
		 * libushuffle, so its allocations count here too. */
		j->alloc_at[mark] = ush_alloc_count();
		atomic_store(&j->phase, mark + 1);
	}
	pthread_barrier_wait(&j->bar);
}
