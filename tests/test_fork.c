/*
 * A fork() child holds copies of its parent's rings, writers and readers.
 * Every call on them that could reach a file, a connection or the ring is
 * refused there (-EPERM), and freeing them touches nothing of the
 * parent's: the parent then commits and reads back every record. Real
 * fork(), real files, an embedded worker on loopback.
 */
#include "net_helpers.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARTS 4u
#define HALF 6000u /* records before the fork, and after it */

/* A ring with a small pool: a fork copies the registered (pinned) pages
 * at once. */
static int ring_create(ush_ring **ring)
{
	struct ush_ring_opts o;
	ush_ring_opts_init(&o);
	o.pool_bytes = 2u << 20;
	return ush_ring_create(ring, &o);
}

/* In the child (no cmocka there): a call that must be refused. */
static void refused(int ret, const char *what, int *bad)
{
	if (ret == -EPERM && strstr(ush_last_error(), "fork() child"))
		return;
	fprintf(stderr, "child: %s = %d (%s): %s\n", what, ret,
		ush_err_name(ret), ush_last_error());
	(*bad)++;
}

#define REFUSED(expr) refused((expr), #expr, &bad)

/* A child's own ring and writer serve it. */
static int own_ring_works(void)
{
	ush_ring *ring;
	ush_writer *w;
	struct ush_writer_opts wo = {.size = sizeof(wo), .partitions = PARTS,
		.target = USH_TARGET_NULL};
	int ret = ring_create(&ring);
	if (!ret) {
		ret = ush_writer_open(&w, ring, &wo);
		if (!ret)
			ret = ush_writer_write(w, 1, "mine", 4);
		if (!ret)
			ret = ush_writer_commit(w, NULL);
		ush_writer_free(w);
		ush_ring_free(ring);
	}
	if (ret)
		fprintf(stderr, "child: its own ring: %d: %s\n", ret,
			ush_last_error());
	return ret != 0;
}

/* Every call of the API on the parent's writer w (which has lent buffer
 * lent) and its ring, then both freed; returns the wrong answers. */
static int child_calls(ush_ring *ring, ush_writer *w, void *lent)
{
	int bad = 0;
	uint8_t batch[64];
	size_t len = ush_record_put(batch, "child", 5);
	void *buf;
	size_t cap;
	ush_writer *w2;
	struct ush_writer_opts wo = {.size = sizeof(wo), .partitions = PARTS,
		.target = USH_TARGET_NULL};
	REFUSED(ush_writer_write(w, 0, "child", 5));
	REFUSED(ush_writer_copy(w, 1, batch, len, 1));
	REFUSED(ush_writer_acquire(w, &buf, &cap));
	REFUSED(ush_writer_swap(w, 2, &lent, ush_record_put(lent, "c", 1), 1));
	REFUSED(ush_writer_release(w, lent));
	REFUSED(ush_writer_commit(w, NULL));
	REFUSED(ush_writer_abort(w));
	REFUSED(ush_writer_open(&w2, ring, &wo));
	ush_writer_free(w);
	ush_ring_free(ring);
	return bad + own_ring_works();
}

static void write_range(ush_writer *w, uint32_t from, uint32_t to)
{
	uint8_t buf[1024];
	for (uint32_t i = from; i < to; i++)
		th_ok(ush_writer_write(w, i % PARTS, buf, th_rec(buf, 0, i)));
}

static void child_wait(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail_msg("child: status 0x%x (its stderr says why)", st);
}

/* What the child does with its copies of the parent's ring and writer:
 * every call, then frees them; or only frees them, at once or once the
 * parent has committed. */
enum child { CALLS, FREE, FREE_AFTER_COMMIT };

/* A writer of map 0 to target at where (a directory or workers) with
 * HALF records written and a buffer lent, and a child that does what
 * child says. The parent writes HALF more, commits and reads all back. */
static void fork_writer(enum ush_target target, const char *where,
			enum child child)
{
	ush_ring *ring;
	ush_writer *w;
	struct ush_writer_opts wo = {.size = sizeof(wo), .partitions = PARTS,
		.target = target, .timeout_ms = 10000};
	if (target == USH_TARGET_DISK)
		wo.dir = where;
	else
		wo.workers = where;
	th_ok(ring_create(&ring));
	th_ok(ush_writer_open(&w, ring, &wo));
	write_range(w, 0, HALF);
	void *lent;
	size_t cap;
	th_ok(ush_writer_acquire(w, &lent, &cap));
	int go[2];
	assert_int_equal(pipe(go), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		close(go[1]);
		if (child == CALLS)
			_exit(child_calls(ring, w, lent));
		if (child == FREE_AFTER_COMMIT && read(go[0], &c, 1) != 1)
			_exit(3);
		ush_writer_free(w);
		ush_ring_free(ring);
		_exit(0);
	}
	close(go[0]);
	if (child != FREE_AFTER_COMMIT)
		child_wait(pid);
	th_ok(ush_writer_release(w, lent));
	write_range(w, HALF, 2 * HALF);
	struct ush_status st[1];
	th_ok(th_commit(w, NULL, st));
	if (child == FREE_AFTER_COMMIT) {
		assert_int_equal(write(go[1], "g", 1), 1);
		child_wait(pid);
	}
	close(go[1]);
	ush_writer_free(w);
	ush_ring_free(ring);
	struct th_job j = {.partitions = PARTS, .maps = 1,
		.records = 2 * HALF, .statuses = st};
	th_verify(&j);
	th_job_free(&j);
}

static void fork_disk_writer(void **state)
{
	(void)state;
	fork_writer(USH_TARGET_DISK, th_scratch("fork-disk"), CALLS);
}

/* The child's free used to abort the writer: it unlinked the files, and
 * the parent's commit failed (ENOENT) or, after it, the committed data
 * was gone. */
static void fork_disk_writer_free(void **state)
{
	(void)state;
	fork_writer(USH_TARGET_DISK, th_scratch("fork-diskf"), FREE);
	fork_writer(USH_TARGET_DISK, th_scratch("fork-diskc"),
		    FREE_AFTER_COMMIT);
}

static void fork_net_writer(void **state)
{
	(void)state;
	char addr[64] = "";
	ush_worker *wk = th_worker_embed(th_scratch("fork-net"), 1, addr,
					 sizeof(addr));
	fork_writer(USH_TARGET_NET, addr, CALLS);
	ush_worker_free(wk);
}

/* The child's free used to shut the parent's connections down: its
 * commit failed (ECONNRESET). */
static void fork_net_writer_free(void **state)
{
	(void)state;
	char addr[64] = "";
	ush_worker *wk = th_worker_embed(th_scratch("fork-netf"), 1, addr,
					 sizeof(addr));
	fork_writer(USH_TARGET_NET, addr, FREE);
	ush_worker_free(wk);
}

/* 2 * HALF records of map 0 written with wo and committed: *st. */
static void write_committed(const struct ush_writer_opts *wo,
			    struct ush_status *st)
{
	ush_ring *ring;
	ush_writer *w;
	th_ok(ring_create(&ring));
	th_ok(ush_writer_open(&w, ring, wo));
	write_range(w, 0, 2 * HALF);
	th_ok(th_commit(w, NULL, st));
	ush_writer_free(w);
	ush_ring_free(ring);
}

/* Partition 0 of map 0, 2 * HALF records, written to target at where;
 * a reader of it takes a third of its records, the child tries the next
 * and frees the reader, the parent reads on to the end. */
static void fork_reader(enum ush_target target, const char *where)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .partitions = PARTS,
		.target = target};
	if (target == USH_TARGET_DISK)
		wo.dir = where;
	else
		wo.workers = where;
	struct ush_status st;
	write_committed(&wo, &st);
	ush_reader *r;
	th_ok(th_reader_open(&r, &st, 1, 0, 10000));
	const void *rec;
	size_t len;
	uint8_t exp[1024];
	uint32_t i = 0;
	for (; i < 2 * HALF / 3; i += PARTS) {
		assert_int_equal(ush_reader_next(r, &rec, &len), 1);
		assert_int_equal(th_rec(exp, 0, i), len);
		assert_memory_equal(exp, rec, len);
	}
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int bad = 0;
		REFUSED(ush_reader_next(r, &rec, &len));
		ush_reader_free(r);
		_exit(bad);
	}
	child_wait(pid);
	for (; i < 2 * HALF; i += PARTS) {
		assert_int_equal(ush_reader_next(r, &rec, &len), 1);
		assert_int_equal(th_rec(exp, 0, i), len);
		assert_memory_equal(exp, rec, len);
	}
	assert_int_equal(ush_reader_next(r, &rec, &len), 0);
	ush_reader_free(r);
	th_status_free(&st);
}

/* Reads partition 0 of st to its end: its record count, or -1. */
static long read_all(const struct ush_status *st)
{
	ush_reader *r = NULL;
	const void *rec;
	size_t len;
	long n = 0;
	int ret = th_reader_open(&r, st, 1, 0, 10000);
	while (!ret && (ret = ush_reader_next(r, &rec, &len)) == 1)
		n++, ret = 0;
	ush_reader_free(r);
	return ret ? -1 : n;
}

/* Descriptors open in this process. */
static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* A connection the parent's reader left for the next one: the child
 * closes its copy at once and dials its own (the parent's stream is not
 * the child's to read), and the parent's kept connection still serves
 * the parent after it. */
static void fork_kept_connection(const char *addr)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .partitions = PARTS,
		.target = USH_TARGET_NET, .workers = addr, .shuffle = 7};
	struct ush_status st;
	write_committed(&wo, &st);
	long n = read_all(&st);
	assert_true(n > 0);
	fflush(NULL);
	unsigned fds = open_fds();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct ush_lib_stats a, b;
		/* The kept connection's copy at least (earlier tests may
		 * have left more in the pool) is closed in the child. */
		bool kept = open_fds() >= fds;
		ush_lib_stats(&a);
		long got = read_all(&st);
		ush_lib_stats(&b);
		_exit(kept || got != n || b.net_reuses != a.net_reuses ||
		      b.net_connects != a.net_connects + 1);
	}
	child_wait(pid);
	struct ush_lib_stats a, b;
	ush_lib_stats(&a);
	assert_int_equal(read_all(&st), n);
	ush_lib_stats(&b);
	assert_int_equal(b.net_reuses, a.net_reuses + 1);
	assert_int_equal(b.net_connects, a.net_connects);
	th_status_free(&st);
}

static void fork_disk_reader(void **state)
{
	(void)state;
	fork_reader(USH_TARGET_DISK, th_scratch("fork-rdisk"));
}

static void fork_net_reader(void **state)
{
	(void)state;
	char addr[64] = "";
	ush_worker *wk = th_worker_embed(th_scratch("fork-rnet"), 1, addr,
					 sizeof(addr));
	fork_reader(USH_TARGET_NET, addr);
	fork_kept_connection(addr);
	ush_worker_free(wk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(fork_disk_writer, th_teardown),
		cmocka_unit_test_teardown(fork_disk_writer_free, th_teardown),
		cmocka_unit_test_teardown(fork_net_writer, th_teardown),
		cmocka_unit_test_teardown(fork_net_writer_free, th_teardown),
		cmocka_unit_test_teardown(fork_disk_reader, th_teardown),
		cmocka_unit_test_teardown(fork_net_reader, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
