/*
 * A sealing writer's sealer thread: AES-256-GCM and the CRC over the
 * sealed bytes of one batch of handed-off buffers, while the writer's
 * thread fills the next batch. Sealing inline cost the push about a
 * third of its rate (performance.md §17); here it overlaps the fill on a
 * second CPU.
 *
 * One batch at a time, handed over whole: the writer fills jobs[] and
 * posts; the thread seals them all and signals; the writer waits, then
 * gives the frames to its sink on its own thread (the ring has one). The
 * thread touches nothing but the jobs' bytes and its own cipher context.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include "write/writer.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

/* The sealer thread's stack (sealer_post()). */
#define SEALER_STACK (1u << 20)

struct ushi_sealer {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started;
	bool posted; /* jobs[0..n) are the thread's until it clears this */
	bool quit;
	unsigned n;
	int err; /* the batch's first error, errmsg its message */
	char errmsg[256];
	/* Read-only while the writer lives: its subkey and key id. */
	const uint8_t *sub;
	uint32_t key_id;
	struct ushi_seal seal; /* the thread's own: a context is not shared */
	struct ushi_seal_job jobs[USHI_QUEUE_BATCH];
};

int seal_put(struct ushi_seal *s, const uint8_t *sub, uint32_t key_id,
	     struct ushi_frame *f, uint8_t *hdr)
{
	f->flags |= USHI_FRAME_SEALED;
	f->payload_len += USHI_SEAL_TRAILER;
	frame_put(hdr, f);
	int ret = seal_frame(s, sub, key_id, hdr, f);
	frame_put_crc(hdr, f);
	return ret;
}

/* Seals jobs[0..n): the first error (its message in s->errmsg), or 0. */
static int seal_jobs(struct ushi_sealer *s, unsigned n)
{
	int err = 0;
	for (unsigned i = 0; i < n; i++) {
		struct ushi_seal_job *j = &s->jobs[i];
		int ret = seal_put(&s->seal, s->sub, s->key_id, &j->f,
				   j->b->data);
		if (ret && !err) {
			err = ret;
			snprintf(s->errmsg, sizeof(s->errmsg), "%s",
				 ush_last_error());
		}
	}
	return err;
}

static void *sealer_main(void *arg)
{
	struct ushi_sealer *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->posted && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->quit)
			break;
		unsigned n = s->n;
		pthread_mutex_unlock(&s->mu);
		int err = seal_jobs(s, n);
		pthread_mutex_lock(&s->mu);
		s->err = err;
		s->posted = false;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Whether this process may run on more than one CPU: on one, a thread
 * only adds its switches to the same work. */
static bool several_cpus(void)
{
	cpu_set_t set;
	return sched_getaffinity(0, sizeof(set), &set) == 0 &&
	       CPU_COUNT(&set) > 1;
}

int sealer_open(struct ushi_sealer **out, const uint8_t *sub,
		uint32_t key_id)
{
	*out = NULL;
	if (!several_cpus())
		return 0;
	struct ushi_sealer *s = ushi_calloc(1, sizeof(*s));
	if (!s)
		return ushi_fail(-ENOMEM, "writer: sealer");
	int ret = seal_init(&s->seal);
	if (ret) {
		ushi_free(s);
		return ret;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->sub = sub;
	s->key_id = key_id;
	*out = s;
	return 0;
}

struct ushi_seal_job *sealer_jobs(struct ushi_sealer *s)
{
	return s->jobs;
}

int sealer_post(struct ushi_sealer *s, unsigned n)
{
	if (!s->started) {
		/* AES-GCM needs little stack: many sealing writers at once
		 * need not reserve 8 MiB each. */
		pthread_attr_t attr;
		int ai = pthread_attr_init(&attr);
		bool small = !ai && !pthread_attr_setstacksize(&attr,
							       SEALER_STACK);
		s->started = !pthread_create(&s->thread, small ? &attr : NULL,
					     sealer_main, s);
		if (!ai)
			pthread_attr_destroy(&attr);
	}
	if (!s->started) {
		/* No thread (RLIMIT_NPROC, a pids cgroup): sealed here, as
		 * on one CPU; sealer_wait() gives the result. */
		s->err = seal_jobs(s, n);
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	s->n = n;
	s->err = 0;
	s->posted = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

bool sealer_done(struct ushi_sealer *s)
{
	pthread_mutex_lock(&s->mu);
	bool done = !s->posted;
	pthread_mutex_unlock(&s->mu);
	return done;
}

int sealer_wait(struct ushi_sealer *s)
{
	pthread_mutex_lock(&s->mu);
	while (s->posted)
		pthread_cond_wait(&s->cv, &s->mu);
	int err = s->err;
	pthread_mutex_unlock(&s->mu);
	return err ? ushi_fail_msg(err, s->errmsg) : 0;
}

void sealer_free(struct ushi_sealer *s, bool child)
{
	if (!s)
		return;
	/* A fork() child has no such thread, and the lock may be held in
	 * its copy: memory only. */
	if (!child) {
		if (s->started) {
			pthread_mutex_lock(&s->mu);
			s->quit = true;
			pthread_cond_signal(&s->cv);
			pthread_mutex_unlock(&s->mu);
			pthread_join(s->thread, NULL);
		}
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
	}
	seal_fini(&s->seal);
	ushi_free(s);
}
