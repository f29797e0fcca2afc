/*
 * The API contract where it is easy to break (issue 9): teardown with
 * operations in flight, the creator-thread rule, buffers the caller never
 * released, lengths checked before arithmetic, ring setup failures and
 * SQ sizing. Real rings, real files, real workers on loopback.
 *
 * Faults the kernel will not produce on demand are injected at the
 * liburing boundary: the library is linked statically into this program,
 * so the liburing functions defined below take the place of liburing's
 * for it (and call through to them).
 */
#define _GNU_SOURCE
#include "net_helpers.h"

#include "core/pool.h"
#include "core/ring.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define THREAD_MSG "used from a thread other than the one that created it"

/* ----------------------------------------------------------- helpers */

static ush_ring *ring_of(size_t pool, unsigned iodepth, int sqpoll)
{
	struct ush_ring_opts o;
	ush_ring_opts_init(&o);
	o.pool_bytes = pool;
	o.iodepth = iodepth;
	o.sqpoll = sqpoll;
	ush_ring *r;
	th_ok(ush_ring_create(&r, &o));
	return r;
}

static ush_writer *disk_writer(ush_ring *r, const char *dir, uint32_t map)
{
	struct ush_writer_opts o = {.size = sizeof(o), .shuffle = 1,
		.map = map, .partitions = 8, .target = USH_TARGET_DISK,
		.dir = dir, .direct = 1};
	ush_writer *w;
	th_ok(ush_writer_open(&w, r, &o));
	return w;
}

/* A batch of nrec records of len bytes each (byte i of record j is
 * i + j); returns its length. */
static size_t batch_of(uint8_t *buf, uint32_t nrec, uint32_t len)
{
	uint8_t rec[256];
	size_t off = 0;
	assert_true(len <= sizeof(rec));
	for (uint32_t j = 0; j < nrec; j++) {
		for (uint32_t i = 0; i < len; i++)
			rec[i] = (uint8_t)(i + j);
		off += ush_record_put(buf + off, rec, len);
	}
	return off;
}

/* Entries of directory path, . and .. aside. */
static int dir_entries(const char *path)
{
	DIR *d = opendir(path);
	assert_non_null(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

/* An embedded worker on loopback with one thread and a small pool. */
static ush_worker *worker_on(const char *dir, char *addr, size_t n)
{
	*addr = 0;
	return th_worker_embed_pool(dir, 1, 1 * MiB, addr, n);
}

/* ------------------------------------------- 1. teardown in flight */

/* The next n waits for completions on this thread fail with -ENOMEM, as
 * io_uring_enter may when the kernel is short of memory. Per thread, so
 * an embedded worker's threads never see them. */
static _Thread_local int fail_waits;

int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
	static int (*real)(struct io_uring *, unsigned);
	if (!real)
		real = (int (*)(struct io_uring *, unsigned))dlsym(
			RTLD_NEXT, "io_uring_submit_and_wait");
	if (fail_waits > 0) {
		fail_waits--;
		return -ENOMEM;
	}
	return real(ring, wait_nr);
}

int io_uring_submit_and_wait_timeout(struct io_uring *ring,
				     struct io_uring_cqe **cqe,
				     unsigned wait_nr,
				     struct __kernel_timespec *ts,
				     sigset_t *sigmask)
{
	static int (*real)(struct io_uring *, struct io_uring_cqe **,
			   unsigned, struct __kernel_timespec *, sigset_t *);
	if (!real)
		real = (int (*)(struct io_uring *, struct io_uring_cqe **,
				unsigned, struct __kernel_timespec *,
				sigset_t *))dlsym(
			RTLD_NEXT, "io_uring_submit_and_wait_timeout");
	if (fail_waits > 0) {
		fail_waits--;
		return -ENOMEM;
	}
	return real(ring, cqe, wait_nr, ts, sigmask);
}

/*
 * Writes past RLIMIT_FSIZE fail (EFBIG) in flight; then the first wait
 * of the teardown fails. Freeing the writer must still reap every write
 * before its state goes: their completions write into it.
 */
static void teardown_reaps_after_error(void **state)
{
	(void)state;
	const char *dir = th_scratch("teardown");
	ush_ring *r = ring_of(8 * MiB, 64, 0);
	ush_writer *w = disk_writer(r, dir, 0);
	static uint8_t batch[60 * KiB];
	/* 60 KiB batches: two flushes of 16 writes, most past the limit. */
	size_t len = batch_of(batch, 240, 252);
	struct rlimit old, small = {256 * KiB, 0};
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small.rlim_max = old.rlim_max;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	for (int i = 0; i < 32; i++)
		th_ok(ush_writer_copy(w, (uint32_t)i % 8, batch, len, 240));
	assert_true(ring_inflight(r) > 0);
	fail_waits = 1;
	ush_writer_free(w);
	fail_waits = 0;
	unsigned left = ring_inflight(r);
	ush_ring_free(r); /* reaps what is left: into freed memory, if any */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_int_equal(left, 0);
	char sdir[600];
	snprintf(sdir, sizeof(sdir), "%s/s1", dir);
	assert_false(dir_entries(sdir)); /* the abort removed its files */
}

/* The net sink's receives stay armed until its teardown reaps them. */
static void teardown_net_reaps_after_error(void **state)
{
	(void)state;
	char addr[64];
	const char *wdir = th_scratch("teardown-net");
	ush_worker *wk = worker_on(wdir, addr, sizeof(addr));
	ush_ring *r = ring_of(8 * MiB, 64, 0);
	struct ush_writer_opts o = {.size = sizeof(o), .shuffle = 1,
		.partitions = 4, .target = USH_TARGET_NET, .workers = addr};
	ush_writer *w;
	th_ok(ush_writer_open(&w, r, &o));
	uint8_t rec[100] = {0};
	for (int i = 0; i < 100; i++)
		th_ok(ush_writer_write(w, (uint32_t)i % 4, rec, sizeof(rec)));
	assert_int_equal(ring_armed(r), 1);
	fail_waits = 1;
	ush_writer_free(w);
	fail_waits = 0;
	unsigned armed = ring_armed(r), inflight = ring_inflight(r);
	ush_ring_free(r);
	ush_worker_free(wk);
	assert_int_equal(armed, 0);
	assert_int_equal(inflight, 0);
}

/* ------------------------------------------------- 2. creator thread */

/* Reads partition p of committed writer w back; returns the records,
 * asserting each has len bytes. */
static uint64_t read_back(const ush_writer *w, uint32_t p, size_t len)
{
	struct ush_status st;
	th_ok(ush_writer_status(w, &st));
	ush_reader *r;
	th_ok(th_reader_open(&r, &st, 1, p, 0));
	const void *rec;
	size_t n;
	uint64_t count = 0;
	int ret;
	while ((ret = ush_reader_next(r, &rec, &n)) == 1) {
		assert_int_equal(n, len);
		count++;
	}
	th_ok(ret);
	ush_reader_free(r);
	return count;
}

struct other {
	ush_ring *ring;
	ush_writer *w;
	void *lent;
	int ret[8];
	char msg[8][512];
};

static void *other_thread(void *arg)
{
	struct other *o = arg;
	uint8_t batch[64];
	size_t len = batch_of(batch, 1, 10);
	void *buf;
	size_t cap;
	ush_writer *w2 = NULL;
	struct ush_writer_opts wo = {.size = sizeof(wo), .partitions = 1};
	int n = 0;
#define CALL(expr)                                                           \
	do {                                                                 \
		o->ret[n] = (expr);                                          \
		snprintf(o->msg[n++], sizeof(o->msg[0]), "%s: %s", #expr,    \
			 ush_last_error());                                  \
	} while (0)
	CALL(ush_writer_write(o->w, 0, "x", 1));
	CALL(ush_writer_copy(o->w, 0, batch, len, 1));
	CALL(ush_writer_acquire(o->w, &buf, &cap));
	CALL(ush_writer_swap(o->w, 0, &o->lent, len, 1));
	CALL(ush_writer_release(o->w, o->lent));
	CALL(ush_writer_commit(o->w, NULL));
	CALL(ush_writer_abort(o->w));
	CALL(ush_writer_open(&w2, o->ring, &wo));
#undef CALL
	return NULL;
}

/* Another thread is refused with -EINVAL and a message, and the writer
 * goes on working for its creator. With writes in flight: its commit
 * drained them first, and aborted the process once the reap from the
 * wrong thread had failed 1000 times. */
static void other_thread_refused(void **state)
{
	(void)state;
	const char *dir = th_scratch("thread");
	ush_ring *r = ring_of(4 * MiB, 64, 0);
	ush_writer *w = disk_writer(r, dir, 0);
	uint8_t rec[100] = {1};
	for (int i = 0; i < 20000; i++) /* 2 MB: 30 frames */
		th_ok(ush_writer_write(w, 1, rec, sizeof(rec)));
	th_ok(ush_writer_write(w, 0, rec, sizeof(rec)));
	struct other o = {.ring = r, .w = w};
	size_t cap;
	th_ok(ush_writer_acquire(w, &o.lent, &cap));
	void *lent = o.lent;
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	for (int i = 0; i < 8; i++) {
		print_message("%s\n", o.msg[i]);
		assert_int_equal(o.ret[i], -EINVAL);
		assert_non_null(strstr(o.msg[i], THREAD_MSG));
	}
	assert_ptr_equal(o.lent, lent); /* not swapped: still the caller's */
	size_t len = batch_of(lent, 3, 100);
	th_ok(ush_writer_swap(w, 0, &lent, len, 3));
	th_ok(ush_writer_release(w, lent));
	th_ok(ush_writer_write(w, 0, rec, sizeof(rec)));
	th_ok(ush_writer_commit(w, NULL));
	assert_int_equal(read_back(w, 0, 100), 5);
	ush_writer_free(w);
	ush_ring_free(r);
}

/* ---------------------------------------------------- 3. lent buffers */

static size_t idle_bytes(const ush_ring *r)
{
	struct ush_ring_info i;
	ush_ring_info(r, &i);
	return i.pool_idle_bytes;
}

/* Buffers the caller never released go back to the pool at free. */
static void lent_buffers_return_at_free(void **state)
{
	(void)state;
	const char *dir = th_scratch("lent");
	ush_ring *r = ring_of(1 * MiB, 64, 0); /* 16 push buffers */
	size_t start = idle_bytes(r);
	for (uint32_t i = 0; i < 1000; i++) {
		ush_writer *w = disk_writer(r, dir, i);
		void *buf[3];
		size_t cap;
		for (int j = 0; j < 3; j++)
			th_ok(ush_writer_acquire(w, &buf[j], &cap));
		/* The swap lends a new buffer for the one handed over. */
		size_t len = batch_of(buf[1], 2, 50);
		th_ok(ush_writer_swap(w, i % 8, &buf[1], len, 2));
		if (i % 100 == 0) {
			th_ok(ush_writer_commit(w, NULL));
			assert_int_equal(read_back(w, i % 8, 50), 2);
		}
		ush_writer_free(w);
	}
	assert_int_equal(idle_bytes(r), start);
	ush_ring_free(r);
}

/* ------------------------------------------------------ 4. lengths */

/* A copy's length is bounded before header + len is computed. */
static void copy_length_checked(void **state)
{
	(void)state;
	ush_ring *r = ring_of(1 * MiB, 64, 0);
	struct ush_writer_opts o = {.size = sizeof(o), .partitions = 1};
	ush_writer *w;
	th_ok(ush_writer_open(&w, r, &o));
	uint8_t batch[64];
	size_t len = batch_of(batch, 1, 10);
	size_t huge[] = {SIZE_MAX, SIZE_MAX - 10, SIZE_MAX - 47,
			 (size_t)1 << 32, 64 * KiB - USH_FRAME_HDR_SIZE + 1};
	for (size_t i = 0; i < ARRAY_SIZE(huge); i++) {
		int ret = ush_writer_copy(w, 0, batch, huge[i], 1);
		print_message("%zu: %s\n", huge[i], ush_last_error());
		assert_true(ret == -EINVAL || ret == -EMSGSIZE);
	}
	assert_int_equal(ush_writer_copy(w, 0, NULL, 8, 1), -EINVAL);
	th_ok(ush_writer_copy(w, 0, NULL, 0, 0));
	th_ok(ush_writer_copy(w, 0, batch, len, 1));
	th_ok(ush_writer_commit(w, NULL));
	ush_writer_free(w);
	ush_ring_free(r);
}

/* Size classes are USHI_BUF_MIN << order: sizes from 2 GiB up must be
 * refused or sized, never shifted past the type. */
static void pool_sizes_above_2g(void **state)
{
	(void)state;
	struct ushi_pool p;
	size_t caps[] = {(size_t)1 << 31, (size_t)1 << 32, (size_t)1 << 40,
			 SIZE_MAX, SIZE_MAX - 4095, (size_t)3 << 30};
	for (size_t i = 0; i < ARRAY_SIZE(caps); i++)
		assert_int_equal(pool_init(&p, caps[i], caps[i]), -EINVAL);
	assert_int_equal(pool_init(&p, SIZE_MAX, 64 * MiB), -EINVAL);
	/* A 2 GiB pool of 64 MiB buffers is fine (mapped, not touched). */
	th_ok(pool_init(&p, (size_t)2 << 30, 64 * MiB));
	assert_int_equal(p.idle_bytes, (size_t)2 << 30);
	assert_int_equal(pool_order(&p, 64 * MiB), 14);
	assert_int_equal(pool_order(&p, 64 * MiB + 1), -1);
	assert_int_equal(pool_order(&p, (size_t)1 << 31), -1);
	assert_int_equal(pool_order(&p, SIZE_MAX), -1);
	struct ushi_buf *b = pool_get(&p, 14);
	assert_non_null(b);
	assert_int_equal(b->cap, 64 * MiB);
	pool_put(&p, b);
	pool_destroy(&p);
	/* The ring refuses them before the pool sees them. */
	struct ush_ring_opts o;
	ush_ring_opts_init(&o);
	ush_ring *r;
	o.pool_bytes = SIZE_MAX;
	assert_int_equal(ush_ring_create(&r, &o), -EINVAL);
	o.pool_bytes = 64 * MiB;
	o.push_size = (size_t)1 << 31;
	assert_int_equal(ush_ring_create(&r, &o), -EINVAL);
}

/* A zero-length record may come without a pointer; a longer one not. */
static void write_null_record(void **state)
{
	(void)state;
	const char *dir = th_scratch("null");
	ush_ring *r = ring_of(1 * MiB, 64, 0);
	ush_writer *w = disk_writer(r, dir, 0);
	th_ok(ush_writer_write(w, 0, NULL, 0));
	assert_int_equal(ush_writer_write(w, 0, NULL, 5), -EINVAL);
	print_message("%s\n", ush_last_error());
	assert_int_equal(ush_writer_write(w, 0, NULL, 1u << 20), -EINVAL);
	th_ok(ush_writer_write(w, 0, NULL, 0));
	th_ok(ush_writer_commit(w, NULL));
	assert_int_equal(read_back(w, 0, 0), 2);
	ush_writer_free(w);
	ush_ring_free(r);
}

/* Expects ret == -EINVAL with a message holding want. */
static void refused(int ret, const char *want)
{
	print_message("%s\n", ush_last_error());
	assert_int_equal(ret, -EINVAL);
	if (!strstr(ush_last_error(), want))
		fail_msg("message lacks \"%s\": %s", want, ush_last_error());
}

/* Record prefixes must add up to the batch: checked at hand-off, when the
 * caller still owns the buffer. */
static void batch_prefixes_checked(void **state)
{
	(void)state;
	const char *dir = th_scratch("batch");
	ush_ring *r = ring_of(1 * MiB, 64, 0);
	ush_writer *w = disk_writer(r, dir, 0);
	void *buf;
	size_t cap;
	th_ok(ush_writer_acquire(w, &buf, &cap));
	void *lent = buf;
	/* 3 records of 28 bytes end at 96; 4 bytes of garbage follow. */
	size_t len = batch_of(buf, 3, 28);
	assert_int_equal(len, 96);
	memset((uint8_t *)buf + 96, 0xff, 4);
	/* copy walks the prefixes at the call, beside its memcpy. */
	refused(ush_writer_copy(w, 7, buf, 100, 3), "writer: partition 7: "
		"batch of 100 bytes holds 3 records whose prefixes end at 96, "
		"not 100");
	refused(ush_writer_copy(w, 6, buf, 100, 4), "partition 6");
	refused(ush_writer_copy(w, 5, buf, 96, 2), "prefixes end at 64, not 96");
	/* swap stays O(1): only what needs no walk is refused at the call. */
	refused(ush_writer_copy(w, 5, buf, 8, 3), "partition 5");
	refused(ush_writer_swap(w, 5, &buf, 8, 3), "partition 5");
	assert_ptr_equal(buf, lent); /* nothing was handed over */
	th_ok(ush_writer_copy(w, 0, buf, 96, 3));
	th_ok(ush_writer_swap(w, 0, &buf, 96, 3));
	assert_ptr_not_equal(buf, lent);
	th_ok(ush_writer_swap(w, 0, &buf, 0, 0));
	th_ok(ush_writer_release(w, buf));
	th_ok(ush_writer_commit(w, NULL));
	assert_int_equal(read_back(w, 0, 28), 6);
	for (uint32_t p = 1; p < 8; p++)
		assert_int_equal(read_back(w, p, 28), 0);
	ush_writer_free(w);

	/* A swapped batch is walked when it is framed: the error is sticky,
	 * names the partition, and nothing is published. */
	w = disk_writer(r, dir, 1);
	th_ok(ush_writer_acquire(w, &buf, &cap));
	batch_of(buf, 3, 28);
	memset((uint8_t *)buf + 96, 0xff, 4);
	th_ok(ush_writer_swap(w, 7, &buf, 100, 3));
	th_ok(ush_writer_release(w, buf));
	refused(ush_writer_commit(w, NULL), "writer: partition 7: batch of "
		"100 bytes holds 3 records whose prefixes end at 96, not 100");
	refused(ush_writer_write(w, 0, "x", 1), "partition 7");
	struct ush_status st;
	assert_int_equal(ush_writer_status(w, &st), USH_ESTATE);
	ush_writer_free(w);
	ush_ring_free(r);
}

/* A swapped batch is walked after the codec or the CRC has read it, or,
 * sealed in place, before: each way a bad one is refused at commit and
 * a good one comes back whole. */
static void swapped_batch_checked_codec_seal(void **state)
{
	(void)state;
	static const struct ush_seal_key key = {.id = 7, .key = {1, 2, 3}};
	const char *dir = th_scratch("batch_codec");
	for (int way = 0; way < 3; way++) {
		struct ush_ring_opts ro;
		ush_ring_opts_init(&ro);
		ro.pool_bytes = 1 * MiB;
		ro.codec = way == 1 ? USH_CODEC_LZ4 : USH_CODEC_NONE;
		ush_ring *r;
		th_ok(ush_ring_create(&r, &ro));
		struct ush_writer_opts o = {.size = sizeof(o), .shuffle = 1,
			.map = (uint32_t)way, .partitions = 8,
			.target = USH_TARGET_DISK, .dir = dir, .direct = 1,
			.seal_key = way == 2 ? &key : NULL};
		ush_writer *w;
		th_ok(ush_writer_open(&w, r, &o));
		void *buf;
		size_t cap;
		th_ok(ush_writer_acquire(w, &buf, &cap));
		/* 200 records of 28 bytes, alike enough for lz4 to shrink. */
		size_t len = batch_of(buf, 200, 28);
		if (way != 2) { /* reading back needs no key */
			th_ok(ush_writer_swap(w, 0, &buf, len, 200));
			len = batch_of(buf, 200, 28);
		}
		memset((uint8_t *)buf + len, 0xff, 4);
		th_ok(ush_writer_swap(w, 3, &buf, len + 4, 200));
		th_ok(ush_writer_release(w, buf));
		refused(ush_writer_commit(w, NULL), "writer: partition 3: "
			"batch of 6404 bytes holds 200 records whose prefixes "
			"end at 6400, not 6404");
		ush_writer_free(w);
		if (way != 2) { /* the good batch alone */
			o.map += 10;
			th_ok(ush_writer_open(&w, r, &o));
			th_ok(ush_writer_acquire(w, &buf, &cap));
			len = batch_of(buf, 200, 28);
			th_ok(ush_writer_swap(w, 0, &buf, len, 200));
			th_ok(ush_writer_release(w, buf));
			th_ok(ush_writer_commit(w, NULL));
			assert_int_equal(read_back(w, 0, 28), 200);
			struct ush_writer_stats st;
			ush_writer_stats(w, &st);
			if (way == 1) /* the codec's path was taken */
				assert_true(st.frame_bytes < st.raw_bytes);
			ush_writer_free(w);
		}
		ush_ring_free(r);
	}
}

/* ----------------------------------------------------- 5. ring setup */

/* liburing 2.5 and later zero the ring before io_uring_setup, so a
 * failed setup leaves ring_fd 0; 2.3 (Debian 12) leaves it untouched.
 * Behave as the newer ones do. */
int io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
			       struct io_uring_params *p)
{
	static int (*real)(unsigned, struct io_uring *,
			   struct io_uring_params *);
	if (!real)
		real = (int (*)(unsigned, struct io_uring *,
				struct io_uring_params *))dlsym(
			RTLD_NEXT, "io_uring_queue_init_params");
	memset(ring, 0, sizeof(*ring));
	return real(entries, ring, p);
}

/* io_uring_setup fails for real (no fd left under RLIMIT_NOFILE): the
 * failed ring must not be torn down as a live one, which closes fd 0.
 * Where io_uring is refused, the ring needs no fd and is made. */
static void failed_setup_keeps_fd0(void **state)
{
	(void)state;
	if (fcntl(0, F_GETFD) < 0)
		assert_int_equal(open("/dev/null", O_RDONLY), 0);
	struct stat before, after;
	assert_int_equal(fstat(0, &before), 0);
	int lowest = dup(0);
	assert_true(lowest > 0);
	close(lowest);
	struct rlimit old, none;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	none = (struct rlimit){(rlim_t)lowest, old.rlim_max};
	struct ush_ring_opts o;
	ush_ring_opts_init(&o);
	o.pool_bytes = 1 * MiB;
	ush_ring *r;
	int refused = th_uring_refused();
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &none), 0);
	int ret = ush_ring_create(&r, &o);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	print_message("%s\n", ush_last_error());
	assert_int_equal(ret, refused ? 0 : -EMFILE);
	if (!ret)
		ush_ring_free(r);
	assert_int_not_equal(fcntl(0, F_GETFD), -1);
	assert_int_equal(fstat(0, &after), 0);
	assert_int_equal(before.st_ino, after.st_ino);
	/* And a ring still works. */
	ush_ring_free(ring_of(1 * MiB, 64, 0));
}

/*
 * SQPOLL, iodepth 8 and 7 workers: 7 receives stay armed, and each send
 * takes two SQEs (the send and its link timeout) while the SQPOLL thread
 * consumes them in its own time.
 */
static void sqpoll_small_iodepth(void **state)
{
	(void)state;
	enum { NW = 7 };
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.sqpoll = 1;
	ro.iodepth = 8;
	ro.pool_bytes = 4 * MiB;
	ush_ring *r;
	int ret = ush_ring_create(&r, &ro);
	if (ret == -EPERM || ret == -EINVAL) {
		print_message("SQPOLL refused here: %s\n", ush_last_error());
		skip();
	}
	th_ok(ret);
	const char *base = th_scratch("sqpoll");
	ush_worker *wk[NW];
	char list[NW * 24] = "", addr[64], dirs[NW][600];
	for (int i = 0; i < NW; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "%s/w%d", base, i);
		wk[i] = worker_on(dirs[i], addr, sizeof(addr));
		if (i)
			strcat(list, ",");
		strcat(list, addr);
	}
	/* Each writer arms its receives anew: ten rounds of them, and of
	 * the sends that follow. The last one commits, and every record of
	 * it reads back, in order, from its partition. */
	uint8_t rec[700];
	th_fill(rec, sizeof(rec), 1);
	struct ush_status st;
	for (uint32_t m = 0; m < 10; m++) {
		struct ush_writer_opts o = {.size = sizeof(o), .shuffle = 1,
			.map = m, .partitions = 2 * NW,
			.target = USH_TARGET_NET, .workers = list};
		ush_writer *w;
		th_ok(ush_writer_open(&w, r, &o));
		for (uint32_t i = 0; i < 4000; i++)
			th_ok(ush_writer_write(w, i % (2 * NW), rec,
					       8 + i % (sizeof(rec) - 8)));
		if (m == 9)
			th_ok(th_commit(w, NULL, &st));
		ush_writer_free(w);
	}
	ush_ring_free(r);
	uint32_t n = 0;
	for (uint32_t p = 0; p < 2 * NW; p++) {
		ush_reader *rd;
		const void *got;
		size_t len;
		th_ok(th_reader_open(&rd, &st, 1, p, 0));
		for (uint32_t i = p; i < 4000; i += 2 * NW, n++) {
			assert_int_equal(ush_reader_next(rd, &got, &len), 1);
			assert_int_equal(len, 8 + i % (sizeof(rec) - 8));
			assert_memory_equal(got, rec, len);
		}
		assert_int_equal(ush_reader_next(rd, &got, &len), 0);
		ush_reader_free(rd);
	}
	assert_int_equal(n, 4000);
	th_status_free(&st);
	for (int i = 0; i < NW; i++)
		ush_worker_free(wk[i]);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(teardown_reaps_after_error,
					  th_teardown),
		cmocka_unit_test_teardown(teardown_net_reaps_after_error,
					  th_teardown),
		cmocka_unit_test_teardown(other_thread_refused, th_teardown),
		cmocka_unit_test_teardown(lent_buffers_return_at_free,
					  th_teardown),
		cmocka_unit_test(copy_length_checked),
		cmocka_unit_test(pool_sizes_above_2g),
		cmocka_unit_test_teardown(write_null_record, th_teardown),
		cmocka_unit_test_teardown(batch_prefixes_checked, th_teardown),
		cmocka_unit_test_teardown(swapped_batch_checked_codec_seal,
					  th_teardown),
		cmocka_unit_test(failed_setup_keeps_fd0),
		cmocka_unit_test_teardown(sqpoll_small_iodepth, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
