/*
 * Ownership violations are bugs in the caller: the library aborts with a
 * clear message instead of corrupting the pool. Each case runs in a
 * forked child whose stderr comes back through a pipe; the child must die
 * of SIGABRT and say what went wrong.
 */
#include "helpers.h"
#include "core/pool.h"
#include "core/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB 1024u

/* In the child: cmocka must not run there, so failures just exit. */
#define CHILD_OK(expr)                                                       \
	do {                                                                 \
		int r_ = (expr);                                             \
		if (r_) {                                                    \
			fprintf(stderr, "child: %s = %d: %s\n", #expr, r_,   \
				ush_last_error());                           \
			_exit(2);                                            \
		}                                                            \
	} while (0)

/* Runs fn in a child; asserts it aborted and printed want. */
static void expect_abort(void (*fn)(void), const char *want)
{
	int pfd[2], status;
	char out[8192];
	size_t n = 0;
	assert_int_equal(pipe(pfd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core); /* an abort is expected */
		signal(SIGABRT, SIG_DFL);
		close(pfd[0]);
		dup2(pfd[1], STDERR_FILENO);
		close(pfd[1]);
		fn();
		fprintf(stderr, "child: survived the misuse\n");
		_exit(0);
	}
	close(pfd[1]);
	for (;;) {
		ssize_t r = read(pfd[0], out + n, sizeof(out) - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	out[n] = '\0';
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0)
		assert_int_equal(errno, EINTR);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
		fail_msg("child did not abort (status 0x%x); stderr:\n%s",
			 status, out);
	if (!strstr(out, "ushuffle: BUG: ") || !strstr(out, want))
		fail_msg("abort message lacks \"%s\":\n%s", want, out);
}

/* A small ring and a null-target writer, made in the child. */
static ush_ring *ring;
static ush_writer *w;

static void child_open(void)
{
	struct ush_ring_opts o;
	ush_ring_opts_init(&o);
	o.pool_bytes = 2048 * KiB;
	o.push_size = 64 * KiB;
	CHILD_OK(ush_ring_create(&ring, &o));
	struct ush_writer_opts wo = {.size = sizeof(wo), .partitions = 4,
		.target = USH_TARGET_NULL};
	CHILD_OK(ush_writer_open(&w, ring, &wo));
}

/* One record filling a few bytes of buf: a valid batch. */
static size_t one_record(void *buf)
{
	return ush_record_put(buf, "record", 6);
}

static void release_twice(void)
{
	void *buf;
	size_t cap;
	child_open();
	CHILD_OK(ush_writer_acquire(w, &buf, &cap));
	CHILD_OK(ush_writer_release(w, buf));
	ush_writer_release(w, buf);
}

static void misuse_release_twice(void **state)
{
	(void)state;
	expect_abort(release_twice, "not owned");
}

/* The old pointer is still queued for framing. */
static void swap_old_pointer(void)
{
	void *buf, *old;
	size_t cap;
	child_open();
	CHILD_OK(ush_writer_acquire(w, &buf, &cap));
	old = buf;
	CHILD_OK(ush_writer_swap(w, 0, &buf, one_record(buf), 1));
	ush_writer_swap(w, 1, &old, 10, 1);
}

static void misuse_swap_old_pointer(void **state)
{
	(void)state;
	expect_abort(swap_old_pointer, "not owned");
}

/* The old pointer went out, came back to the pool and sits idle. */
static void swap_old_pointer_idle(void)
{
	void *buf, *old;
	size_t cap;
	child_open();
	CHILD_OK(ush_writer_acquire(w, &buf, &cap));
	old = buf;
	for (int i = 0; i < 20; i++)
		CHILD_OK(ush_writer_swap(w, 0, &buf, one_record(buf), 1));
	if (buf == old) {
		fprintf(stderr, "child: the old buffer came back to us\n");
		_exit(3);
	}
	ush_writer_swap(w, 0, &old, 10, 1);
}

static void misuse_swap_old_pointer_idle(void **state)
{
	(void)state;
	expect_abort(swap_old_pointer_idle, "not owned");
}

static void release_after_swap(void)
{
	void *buf, *old;
	size_t cap;
	child_open();
	CHILD_OK(ush_writer_acquire(w, &buf, &cap));
	old = buf;
	CHILD_OK(ush_writer_swap(w, 2, &buf, one_record(buf), 1));
	ush_writer_release(w, old);
}

static void misuse_release_after_swap(void **state)
{
	(void)state;
	expect_abort(release_after_swap, "not owned");
}

static void swap_stack_pointer(void)
{
	uint8_t mine[4096];
	void *p = mine + 64;
	child_open();
	one_record(p);
	ush_writer_swap(w, 0, &p, 10, 1);
}

static void swap_heap_pointer(void)
{
	void *p = malloc(64 * KiB);
	child_open();
	one_record(p);
	ush_writer_swap(w, 0, &p, 10, 1);
}

/* Inside the arena but not where any buffer's payload starts. */
static void swap_inside_buffer(void)
{
	void *buf, *p;
	size_t cap;
	child_open();
	CHILD_OK(ush_writer_acquire(w, &buf, &cap));
	p = (uint8_t *)buf + 1;
	ush_writer_swap(w, 0, &p, 10, 1);
}

/* A 4 KiB-aligned address inside the caller's 64 KiB buffer: a pool
 * block, but not the head of any buffer. */
static void swap_inside_block(void)
{
	void *buf, *p;
	size_t cap;
	child_open();
	CHILD_OK(ush_writer_acquire(w, &buf, &cap));
	p = (uint8_t *)buf + 8 * KiB;
	ush_writer_swap(w, 0, &p, 10, 1);
}

static void misuse_swap_foreign_pointer(void **state)
{
	(void)state;
	expect_abort(swap_stack_pointer, "not a pool buffer");
	expect_abort(swap_heap_pointer, "not a pool buffer");
	expect_abort(swap_inside_buffer, "not a pool buffer");
	expect_abort(swap_inside_block, "not owned");
}

static void release_foreign_pointer(void)
{
	char mine[64];
	child_open();
	ush_writer_release(w, mine);
}

static void misuse_release_foreign_pointer(void **state)
{
	(void)state;
	expect_abort(release_foreign_pointer, "not a pool buffer");
}

/* Only the creator thread can reap a ring, and a free cannot fail. */
static void *free_writer(void *arg)
{
	(void)arg;
	ush_writer_free(w);
	return NULL;
}

static void *free_ring(void *arg)
{
	(void)arg;
	ush_ring_free(ring);
	return NULL;
}

static void free_from_thread(void *(*fn)(void *))
{
	pthread_t t;
	child_open();
	if (pthread_create(&t, NULL, fn, NULL) == 0)
		pthread_join(t, NULL);
}

static void writer_free_other_thread(void)
{
	free_from_thread(free_writer);
}

static void ring_free_other_thread(void)
{
	free_from_thread(free_ring);
}

static void misuse_free_from_other_thread(void **state)
{
	(void)state;
	expect_abort(writer_free_other_thread, "ush_writer_free: ring used "
		     "from a thread other than the one that created it");
	expect_abort(ring_free_other_thread, "ush_ring_free: ring used from "
		     "a thread other than the one that created it");
}

/* The writer's buffers are in the ring's pool, its ops in the ring: a
 * free of the ring under it was a use after free. */
static void ring_free_with_writer(void)
{
	child_open();
	CHILD_OK(ush_writer_write(w, 0, "record", 6));
	ush_ring_free(ring);
}

static void misuse_ring_free_with_writer(void **state)
{
	(void)state;
	expect_abort(ring_free_with_writer, "ush_ring_free: writers still "
		     "open on the ring (1): free them first");
}

/* ------------------------------------------------------- pool level */

static struct ushi_pool pool;

/* The buddy is held: the freed block stays idle on its own. */
static void pool_put_twice_idle(void)
{
	CHILD_OK(pool_init(&pool, 256 * KiB, 64 * KiB));
	struct ushi_buf *a = pool_get(&pool, 0), *b = pool_get(&pool, 0);
	if (!a || !b)
		_exit(2);
	pool_put(&pool, a);
	pool_put(&pool, a);
}

/* Nothing else held: the freed block merges into a larger one. */
static void pool_put_twice_merged(void)
{
	CHILD_OK(pool_init(&pool, 256 * KiB, 64 * KiB));
	struct ushi_buf *a = pool_get(&pool, 1);
	if (!a)
		_exit(2);
	pool_put(&pool, a);
	pool_put(&pool, a);
}

/* A whole push-size buffer (no merging above it). */
static void pool_put_twice_top(void)
{
	CHILD_OK(pool_init(&pool, 256 * KiB, 64 * KiB));
	struct ushi_buf *a = pool_get(&pool, 4);
	if (!a)
		_exit(2);
	pool_put(&pool, a);
	pool_put(&pool, a);
}

static void misuse_pool_put_twice(void **state)
{
	(void)state;
	expect_abort(pool_put_twice_idle, "released twice");
	expect_abort(pool_put_twice_merged, "released twice");
	expect_abort(pool_put_twice_top, "released twice");
}

/* A buffer moved from a state it is not in: use after hand-off. */
static void pool_wrong_transition(void)
{
	CHILD_OK(pool_init(&pool, 256 * KiB, 64 * KiB));
	struct ushi_buf *a = pool_get(&pool, 4);
	if (!a)
		_exit(2);
	buf_move(a, BUF_WRITER, BUF_INFLIGHT);
	buf_move(a, BUF_WRITER, BUF_INFLIGHT);
}

static void misuse_wrong_transition(void **state)
{
	(void)state;
	expect_abort(pool_wrong_transition, "use after hand-off");
}

/* A completion callback that reaps would see its own reap's CQEs again
 * (ring.h, ushi_op_cb): each way to reap aborts there, naming itself. */
static int reaps_in_cb;

static void reaping_cb(struct ushi_op *op, int res)
{
	(void)op;
	if (res != 6)
		_exit(3);
	struct ushi_op *more;
	switch (reaps_in_cb) {
	case 0:
		ring_reap(ring, 0);
		break;
	case 1:
		ring_poll(ring);
		break;
	case 2:
		ring_drain(ring);
		break;
	default:
		/* Every op in use: taking one would reap. */
		ring_op_get(ring, &more);
	}
}

static void reap_in_callback(void)
{
	struct ush_ring_opts o;
	ush_ring_opts_init(&o);
	o.iodepth = 1;
	CHILD_OK(ush_ring_create(&ring, &o));
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		_exit(2);
	struct ushi_op *op;
	CHILD_OK(ring_op_get(ring, &op));
	op->cb = reaping_cb;
	ring_write_at(ring, op, NULL, (const uint8_t *)"record", 0, 6, fd, -1);
	CHILD_OK(ring_drain(ring));
}

static void misuse_reap_in_callback(void **state)
{
	(void)state;
	for (reaps_in_cb = 0; reaps_in_cb < 4; reaps_in_cb++)
		expect_abort(reap_in_callback, "a completion callback must never reap");
}

/* The harness itself: a child that does nothing wrong must not pass. */
static void behave(void)
{
	void *buf;
	size_t cap;
	child_open();
	CHILD_OK(ush_writer_acquire(w, &buf, &cap));
	CHILD_OK(ush_writer_release(w, buf));
	CHILD_OK(ush_writer_commit(w, NULL));
}

static void harness_sees_survivors(void **state)
{
	(void)state;
	int pfd[2], status;
	assert_int_equal(pipe(pfd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		dup2(pfd[1], STDERR_FILENO);
		behave();
		_exit(0);
	}
	close(pfd[1]);
	/* Open until the child is gone: a log line (the io_uring fallback's)
	 * must not kill it with SIGPIPE. */
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(pfd[0]);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(harness_sees_survivors),
		cmocka_unit_test(misuse_release_twice),
		cmocka_unit_test(misuse_swap_old_pointer),
		cmocka_unit_test(misuse_swap_old_pointer_idle),
		cmocka_unit_test(misuse_release_after_swap),
		cmocka_unit_test(misuse_swap_foreign_pointer),
		cmocka_unit_test(misuse_release_foreign_pointer),
		cmocka_unit_test(misuse_free_from_other_thread),
		cmocka_unit_test(misuse_ring_free_with_writer),
		cmocka_unit_test(misuse_pool_put_twice),
		cmocka_unit_test(misuse_wrong_transition),
		cmocka_unit_test(misuse_reap_in_callback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
