/*
 * The worker's storage as a long-lived service, against real ushuffled
 * processes:
 *  - open log files are a bounded cache: under a low RLIMIT_NOFILE a
 *    shuffle of 10,000 partitions (USH_TEST_PARTITIONS) commits and
 *    reads back, then 2,000 small shuffles (USH_TEST_SHUFFLES) come and
 *    go, 40 of them alive at a time (more logs than the budget holds
 *    open), and the worker's open fds stay below the limit throughout,
 *    its log files within their budget;
 *  - a failed write (ENOSPC on a small tmpfs mounted here; skipped where
 *    mount is not allowed) fails only its own shuffle: once space is
 *    free, other shuffles commit on the same thread;
 *  - a restart with other options (smaller --max-frame, --direct flipped,
 *    fewer --threads, a smaller --pool) serves everything stored before,
 *    and appends to the same logs;
 *  - junk after a log's and its index's last whole frame and entry (a
 *    kill -9 mid-write) is cut when appends start again;
 *  - a flipped bit in an index entry (and in its frame's header) never
 *    gets a committed frame cut: the entry is rebuilt from the frame, or
 *    the attempt reads USH_ECORRUPT naming it, and later maps append
 *    after it; a flipped bit in a claim record does not get the shuffle
 *    swept;
 *  - --dir with several directories: a restart with them in another
 *    order, or with one more, serves everything stored; two workers'
 *    directories in one list are refused;
 *  - one of two directories filling up mid-push, or made read-only by
 *    an ext4 error, is quarantined: the shuffle there fails naming it,
 *    later shuffles go to the other;
 *  - a kill -9 while eight writers commit at once (inside the
 *    committer's groups) loses no acknowledged commit;
 *  - eight shuffles pushed at once through one thread with four log
 *    buffers and one log's files open (buffers and files passed around);
 *  - six maps of one shuffle at once through a thread whose pool spares
 *    in-place receive buffers for some only: regions written as
 *    received and frames copied share one log, before and after a
 *    restart;
 *  - a shuffle of 100,000 partitions reads back, every record checked,
 *    and takes at most 1.2 times its frame bytes on disk;
 *  - symbolic links planted under --dir are not followed by writes,
 *    fetches or DROP, with openat2 and without (seccomp answers ENOSYS).
 *
 * USH_TEST_FILTER=name runs one test.
 */
#include "net_helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>

/* Maps map0 .. map0 + maps - 1 of one shuffle, records each, record i
 * to partition i % partitions. With big, every fourth record is
 * big + i bytes. */
struct job {
	const char *workers;
	uint32_t shuffle, partitions, map0, maps, records;
	size_t big;
	struct ush_status *st; /* maps of them, zeroed at first */
};

/* ush_last_error() of push()'s failure, per pushing thread */
static _Thread_local char last_msg[1024];

static size_t rec_len(const struct job *j, uint32_t m, uint32_t i)
{
	if (j->big && i % 4 == 0)
		return j->big + i;
	return 8 + (i * 37u + m * 11u) % 120u;
}

/* A record is 8 bytes of (map, i), then bytes seeded by them and the
 * shuffle. */
static uint64_t job_seed(const struct job *j, uint64_t id)
{
	return id * 2654435761u + j->shuffle;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Pushes map m (attempt a) of j on ring and commits; the status goes to
 * j->st[m - j->map0]. Returns the first error (its message in
 * last_msg). */
static int push_on(ush_ring *ring, const struct job *j, uint32_t m,
		   uint32_t a)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = j->shuffle,
		.map = m, .attempt = a, .partitions = j->partitions,
		.target = USH_TARGET_NET, .workers = j->workers,
		/* Generous: with far more partitions than open files, a
		 * frame may cost the worker an fdatasync (the file it
		 * closes to open another), and it credits a window of
		 * them at once. */
		.timeout_ms = 120000};
	ush_writer *w = NULL;
	uint8_t *buf = malloc(j->big + j->records + 128);
	assert_non_null(buf);
	int ret = ush_writer_open(&w, ring, &wo);
	for (uint32_t i = 0; !ret && i < j->records; i++) {
		size_t len = rec_len(j, m, i);
		uint64_t id = (uint64_t)m << 32 | i;
		memcpy(buf, &id, 8);
		th_fill(buf + 8, len - 8, job_seed(j, id));
		ret = ush_writer_write(w, i % j->partitions, buf, len);
	}
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	if (ret) {
		snprintf(last_msg, sizeof(last_msg), "%s", ush_last_error());
	} else {
		struct ush_status *st = &j->st[m - j->map0];
		th_status_free(st);
		th_status_copy(w, st);
	}
	ush_writer_free(w);
	free(buf);
	return ret;
}

/* push_on() a ring of its own. */
static int push(const struct job *j, uint32_t m, uint32_t a)
{
	ush_ring *ring = th_ring(8u << 20, 0);
	int ret = push_on(ring, j, m, a);
	ush_ring_free(ring);
	return ret;
}

static void push_all(const struct job *j)
{
	for (uint32_t m = j->map0; m < j->map0 + j->maps; m++) {
		int ret = push(j, m, 0);
		if (ret)
			fail_msg("push shuffle %u map %u: %s: %s", j->shuffle, m,
				 ush_err_name(ret), last_msg);
	}
}

/* What the readers of one verify() share. */
struct check {
	const struct job *jobs;
	unsigned n, nthreads;
	struct ush_status *st;
	uint32_t nst;
	uint8_t **seen; /* per job, per record: readers of different
			   partitions touch different bytes */
	atomic_ulong got;
	atomic_ulong stored; /* frame bytes read (ush_reader_stats) */
	atomic_int failed;
	char msg[1024]; /* the first failure */
	pthread_mutex_t lock;
};

static int check_fail(struct check *c, uint32_t p, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int check_fail(struct check *c, uint32_t p, const char *fmt, ...)
{
	pthread_mutex_lock(&c->lock);
	if (!atomic_load(&c->failed)) {
		va_list ap;
		va_start(ap, fmt);
		int k = snprintf(c->msg, sizeof(c->msg), "shuffle %u partition "
				 "%u: ", c->jobs[0].shuffle, p);
		vsnprintf(c->msg + k, sizeof(c->msg) - (size_t)k, fmt, ap);
		va_end(ap);
		atomic_store(&c->failed, 1);
	}
	pthread_mutex_unlock(&c->lock);
	return -1;
}

/* Reads partition p and checks each record: 0 or -1 (c->msg). */
static int check_partition(struct check *c, uint32_t p)
{
	ush_reader *r;
	int ret = th_reader_open(&r, c->st, c->nst, p, 20000);
	if (ret)
		return check_fail(c, p, "open: %s: %s", ush_err_name(ret),
				  ush_last_error());
	const void *rec;
	size_t len;
	uint32_t parts = c->jobs[0].partitions;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		uint64_t id = 0;
		if (len >= 8)
			memcpy(&id, rec, 8);
		uint32_t m = (uint32_t)(id >> 32), i = (uint32_t)id;
		unsigned k = 0;
		while (k < c->n && (m < c->jobs[k].map0 ||
				    m >= c->jobs[k].map0 + c->jobs[k].maps))
			k++;
		const struct job *j = &c->jobs[k];
		if (len < 8 || k == c->n || i >= j->records ||
		    i % parts != p || rec_len(j, m, i) != len ||
		    !th_check((const uint8_t *)rec + 8, len - 8,
			      job_seed(j, id)))
			break;
		uint8_t *s = &c->seen[k][(size_t)(m - j->map0) * j->records +
					 i];
		if (*s)
			break;
		*s = 1;
		atomic_fetch_add(&c->got, 1);
	}
	struct ush_reader_stats rs;
	ush_reader_stats(r, &rs);
	atomic_fetch_add(&c->stored, rs.stored_bytes);
	if (ret == 1)
		ret = check_fail(c, p, "a wrong or repeated record (%zu "
				 "bytes)", len);
	else if (ret)
		ret = check_fail(c, p, "%s: %s", ush_err_name(ret),
				 ush_last_error());
	ush_reader_free(r);
	return ret;
}

struct checker {
	struct check *c;
	unsigned k;
	pthread_t tid;
};

static void *check_some(void *arg)
{
	struct checker *t = arg;
	struct check *c = t->c;
	for (uint32_t p = t->k; p < c->jobs[0].partitions &&
	     !atomic_load(&c->failed); p += c->nthreads)
		check_partition(c, p);
	return NULL;
}

/* Reads every partition of the jobs (one shuffle, disjoint maps in
 * ascending order) with all their statuses and checks each record
 * exactly once; many partitions are read by several threads. Returns
 * the frame bytes read. */
static uint64_t verify(const struct job *jobs, unsigned n)
{
	struct check c = {.jobs = jobs, .n = n};
	pthread_mutex_init(&c.lock, NULL);
	uint32_t parts = jobs[0].partitions;
	for (unsigned k = 0; k < n; k++)
		c.nst += jobs[k].maps;
	c.st = calloc(c.nst, sizeof(*c.st));
	c.seen = calloc(n, sizeof(*c.seen));
	assert_non_null(c.st);
	assert_non_null(c.seen);
	uint64_t want = 0;
	for (unsigned k = 0, i = 0; k < n; k++) {
		assert_int_equal(jobs[k].partitions, parts);
		for (uint32_t m = 0; m < jobs[k].maps; m++) {
			if (!jobs[k].st[m].data)
				fail_msg("shuffle %u map %u has no status",
					 jobs[k].shuffle, jobs[k].map0 + m);
			c.st[i++] = jobs[k].st[m];
		}
		c.seen[k] = calloc((size_t)jobs[k].maps * jobs[k].records, 1);
		assert_non_null(c.seen[k]);
		want += (uint64_t)jobs[k].maps * jobs[k].records;
	}
	struct checker t[4];
	c.nthreads = parts >= 1000 ? 4 : 1;
	for (unsigned k = 0; k < c.nthreads; k++) {
		t[k] = (struct checker){&c, k, 0};
		assert_int_equal(pthread_create(&t[k].tid, NULL, check_some,
						&t[k]), 0);
	}
	for (unsigned k = 0; k < c.nthreads; k++)
		pthread_join(t[k].tid, NULL);
	if (atomic_load(&c.failed))
		fail_msg("%s", c.msg);
	assert_int_equal(atomic_load(&c.got), want);
	for (unsigned k = 0; k < n; k++)
		free(c.seen[k]);
	free(c.seen);
	free(c.st);
	pthread_mutex_destroy(&c.lock);
	return atomic_load(&c.stored);
}

static void job_free(struct job *j)
{
	th_statuses_free(j->st, j->maps);
	free(j->st);
	j->st = NULL;
}

static struct ush_status *statuses(uint32_t n)
{
	struct ush_status *st = calloc(n, sizeof(*st));
	assert_non_null(st);
	return st;
}

/* ------------------------------------------------------ bounded fds */

/* Entries of /proc/PID/fd, or 0 when it cannot be read; in *data those
 * that are files under prefix (a shuffle directory's). */
static unsigned fd_count(pid_t pid, const char *prefix, unsigned *data)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (data)
		*data = 0;
	if (!d)
		return 0;
	unsigned n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		n++;
		char link[PATH_MAX];
		ssize_t k = data ? readlinkat(dirfd(d), de->d_name, link,
					      sizeof(link) - 1) : -1;
		if (k > 0) {
			link[k] = 0;
			*data += !strncmp(link, prefix, strlen(prefix));
		}
	}
	closedir(d);
	return n;
}

struct sampler {
	pid_t pid;
	char prefix[PATH_MAX + 8]; /* "<dir>/s" */
	atomic_int stop;
	atomic_uint max, max_data, samples;
	pthread_t tid;
};

static void *sample(void *arg)
{
	struct sampler *s = arg;
	while (!atomic_load(&s->stop)) {
		unsigned data, n = fd_count(s->pid, s->prefix, &data);
		if (n > atomic_load(&s->max))
			atomic_store(&s->max, n);
		if (data > atomic_load(&s->max_data))
			atomic_store(&s->max_data, data);
		atomic_fetch_add(&s->samples, 1);
		usleep(2000);
	}
	return NULL;
}

#define NOFILE 256u

static void scale_open_files_bounded(void **state)
{
	(void)state;
	struct th_worker w = {.nofile = NOFILE};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storefds"));
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	unsigned idle = fd_count(w.pid, NULL, NULL);
	struct sampler s = {.pid = w.pid};
	char abs[PATH_MAX];
	assert_non_null(realpath(w.dir, abs));
	snprintf(s.prefix, sizeof(s.prefix), "%s/s", abs);
	assert_int_equal(pthread_create(&s.tid, NULL, sample, &s), 0);

	const char *env = getenv("USH_TEST_PARTITIONS");
	uint32_t parts = env ? (uint32_t)atoi(env) : 10000;
	double t0 = now_s();
	struct job big = {.workers = w.addr, .shuffle = 1,
			  .partitions = parts, .maps = 1, .records = 2 * parts,
			  .st = statuses(1)};
	push_all(&big);
	double t1 = now_s();
	unsigned after_commit = fd_count(w.pid, NULL, NULL);
	verify(&big, 1);
	double t2 = now_s();
	/* Unlinking 100,000 files takes seconds on a disk, tens of them on
	 * a busy one. */
	th_ok(ush_shuffle_drop(w.addr, NULL, big.shuffle, 180000));
	job_free(&big);
	double t3 = now_s();
	print_message("%u partitions: push and commit %.1f s, read back "
		      "%.1f s, drop %.1f s; worker fds: %u idle, %u after "
		      "the commit\n", parts, t1 - t0, t2 - t1, t3 - t2, idle,
		      after_commit);

	env = getenv("USH_TEST_SHUFFLES");
	unsigned n = env ? (unsigned)atoi(env) : 2000;
	/* 40 alive at a time: 40 logs of 2 files on 2 threads, above the
	 * 32 files a thread keeps open. */
	for (unsigned i = 0; i < n + 40; i++) {
		if (i < n) {
			struct job j = {.workers = w.addr, .shuffle = 100 + i,
					.partitions = 16, .maps = 1,
					.records = 64, .st = statuses(1)};
			push_all(&j);
			verify(&j, 1);
			job_free(&j);
		}
		if (i >= 40)
			th_ok(ush_shuffle_drop(w.addr, NULL, 100 + i - 40, 0));
	}
	double t4 = now_s();
	unsigned end = fd_count(w.pid, NULL, NULL);
	atomic_store(&s.stop, 1);
	pthread_join(s.tid, NULL);
	print_message("%u small shuffles pushed, read and dropped in %.1f s; "
		      "worker fds: at most %u of RLIMIT_NOFILE %u, %u of them "
		      "shuffle files (%u samples), %u at the end\n", n, t4 - t3,
		      atomic_load(&s.max), NOFILE, atomic_load(&s.max_data),
		      atomic_load(&s.samples), end);
	/* Over thousands of shuffles a leak would reach the limit too. */
	assert_true(atomic_load(&s.max) < NOFILE);
	/* The default budget, a quarter of the limit, and one file per
	 * stream of the 4 reader threads verify() runs (FETCH opens its
	 * files outside the budget). */
	assert_true(atomic_load(&s.max_data) <= NOFILE / 4 + 4);
	th_worker_stop(&w);
	th_rmrf(w.dir);
}

/* ----------------------------------------------------- torn tails */

static void append_junk(const char *dir, const char *name, size_t n)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	assert_true(fd >= 0);
	uint8_t *b = malloc(n);
	assert_non_null(b);
	th_fill(b, n, 99);
	assert_int_equal(write(fd, b, n), (ssize_t)n);
	close(fd);
	free(b);
}

static off_t file_size(const char *dir, const char *name)
{
	char path[700];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

/* Junk after the last whole index entry and after the log's frames: the
 * partial entry is cut at the next start of appends; the whole entry of
 * junk (not the zeros a crash leaves) is damage that committed frames
 * could lie behind, so the log's bytes after it are kept as a damaged
 * extent, not cut. Committed frames are all served, new ones land after
 * them. */
static void repair_torn_tail_cut(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storetorn"));
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct job a = {.workers = w.addr, .shuffle = 6, .partitions = 7,
			.maps = 1, .records = 3000, .st = statuses(1)};
	push_all(&a);
	th_worker_stop(&w);
	off_t idx = file_size(w.dir, "s6/t0.idx");
	assert_int_equal(idx % 20, 0);
	append_junk(w.dir, "s6/t0.idx", 30);
	append_junk(w.dir, "s6/t0.log", 5000);
	th_worker_spawn(&w, "127.0.0.1", w.port, 1);
	verify(&a, 1);
	struct job b = {.workers = w.addr, .shuffle = 6, .partitions = 7,
			.map0 = 1, .maps = 2, .records = 3000,
			.st = statuses(2)};
	push_all(&b);
	struct job ab[] = {a, b};
	verify(ab, 2);
	th_worker_stop(&w);
	assert_int_equal(file_size(w.dir, "s6/t0.idx") % 20, 0);
	assert_true(file_size(w.dir, "s6/t0.idx") > idx);
	th_worker_spawn(&w, "127.0.0.1", w.port, 1);
	verify(ab, 2);
	th_worker_stop(&w);
	job_free(&a);
	job_free(&b);
	th_rmrf(w.dir);
}

/* ------------------------------------------- repair keeps commits */

/* The log offset and index position of the entry of shuffle/thread 0's
 * log that want() picks: entries are summed in order (holes too). */
struct ent_at {
	uint64_t off; /* its frame's log offset */
	size_t pos;   /* its byte offset in the index */
	uint32_t len, map;
};

/* The first entry of map (first) or the last DATA entry (!first). */
static struct ent_at find_entry(const char *idx, uint32_t map, bool first)
{
	size_t n;
	uint8_t *b = th_read_file(idx, &n);
	struct ent_at at = {0}, cur = {0};
	bool found = false;
	for (size_t i = 0; i + 20 <= n; i += 20) {
		uint32_t len, part, m;
		memcpy(&len, b + i, 4);
		memcpy(&part, b + i + 4, 4);
		memcpy(&m, b + i + 8, 4);
		cur.pos = i;
		cur.len = len;
		cur.map = m;
		if (part != UINT32_MAX && (!first || (m == map && !found))) {
			at = cur;
			found = true;
		}
		cur.off += len;
	}
	free(b);
	assert_true(found);
	return at;
}

static void flip_at(const char *dir, const char *name, uint64_t off,
		    uint8_t mask)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	uint8_t c;
	assert_int_equal(pread(fd, &c, 1, (off_t)off), 1);
	c ^= mask;
	assert_int_equal(pwrite(fd, &c, 1, (off_t)off), 1);
	close(fd);
}

/* One map's job within a (committed) job of several. */
static struct job one_map(const struct job *j, uint32_t m)
{
	struct job o = *j;
	o.map0 = m;
	o.maps = 1;
	o.st = &j->st[m - j->map0];
	return o;
}

/* ---------------------------------------------------- many directories */

/* Whether dir/name exists. */
static bool has(const char *dir, const char *name)
{
	char path[300];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return !lstat(path, &st);
}

/* Shuffle logs s<S>/t<T>.log in dir. */
static unsigned logs_in(const char *dir)
{
	unsigned n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		unsigned s, t;
		char path[64];
		if (sscanf(de->d_name, "s%u", &s) != 1)
			continue;
		for (t = 0; t < 4; t++) {
			snprintf(path, sizeof(path), "s%u/t%u.log", s, t);
			n += has(dir, path);
		}
	}
	if (d)
		closedir(d);
	return n;
}

/* --dir=A:B spreads the logs over both, the commit log in A; restarted
 * as --dir=C:B:A (another order, one more) and then B:A:C, the worker
 * serves everything it stored, and what comes after too. */
static void dirs_reordered_or_added(void **state)
{
	(void)state;
	/* Short enough for three in w.dir. */
	char a[160], b[160], c[160];
	assert_true(snprintf(a, sizeof(a), "%s", th_tmpdir("dirs-a")) <
		    (int)sizeof(a));
	assert_true(snprintf(b, sizeof(b), "%s", th_tmpdir("dirs-b")) <
		    (int)sizeof(b));
	assert_true(snprintf(c, sizeof(c), "%s", th_tmpdir("dirs-c")) <
		    (int)sizeof(c));
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s:%s", a, b);
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct job j[3];
	for (uint32_t k = 0; k < 3; k++)
		j[k] = (struct job){.workers = w.addr, .shuffle = 30 + k,
				    .partitions = 6, .maps = 4,
				    .records = 1500, .st = statuses(4)};
	push_all(&j[0]);
	push_all(&j[1]);
	th_worker_stop(&w);
	assert_true(has(a, "commit.log"));
	assert_false(has(b, "commit.log"));
	assert_true(has(b, "ushuffled.lock"));
	/* Two shuffles, a log per thread that got maps of one: two to
	 * four, each in one of A and B (by the hash of shuffle and thread,
	 * which the restarts below must not depend on). */
	unsigned la = logs_in(a), lb = logs_in(b);
	print_message("logs: %u in A, %u in B\n", la, lb);
	assert_true(la + lb >= 2 && la + lb <= 4);
	snprintf(w.dir, sizeof(w.dir), "%s:%s:%s", c, b, a);
	th_worker_restart(&w, 2);
	for (uint32_t k = 0; k < 3; k++)
		j[k].workers = w.addr;
	verify(&j[0], 1);
	verify(&j[1], 1);
	push_all(&j[2]);
	verify(&j[2], 1);
	th_worker_stop(&w);
	assert_false(has(c, "commit.log"));
	snprintf(w.dir, sizeof(w.dir), "%s:%s:%s", b, a, c);
	th_worker_restart(&w, 2);
	for (uint32_t k = 0; k < 3; k++) {
		j[k].workers = w.addr;
		verify(&j[k], 1);
	}
	th_worker_stop(&w);
	for (uint32_t k = 0; k < 3; k++)
		job_free(&j[k]);
}

/* Two directories of two workers in one list are refused. */
static void dirs_of_two_workers_refused(void **state)
{
	(void)state;
	char a[160], b[160], err[400];
	assert_true(snprintf(a, sizeof(a), "%s", th_tmpdir("dirs2-a")) <
		    (int)sizeof(a));
	assert_true(snprintf(b, sizeof(b), "%s", th_tmpdir("dirs2-b")) <
		    (int)sizeof(b));
	for (int i = 0; i < 2; i++) {
		struct th_worker w = {0};
		snprintf(w.dir, sizeof(w.dir), "%s", i ? b : a);
		th_worker_spawn(&w, "127.0.0.1", 0, 1);
		th_worker_stop(&w);
	}
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	o.listen = "127.0.0.1:0";
	snprintf(err, sizeof(err), "%s:%s", a, b);
	o.dir = err;
	th_worker_secret(&o);
	ush_worker *wk;
	assert_int_equal(ush_worker_create(&wk, &o), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "belong to two workers"));
	snprintf(err, sizeof(err), "%s::%s", a, b);
	assert_int_equal(ush_worker_create(&wk, &o), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "an empty directory"));
}

/* ------------------------------------------------ a crash in a group */

#define CRASH_WRITERS 8
#define CRASH_ROUNDS 40

struct crash_writer {
	struct job *j;
	pthread_barrier_t *ready;
	unsigned k;
	atomic_uint *acked;
	pthread_t tid;
};

/* Maps k, k + CRASH_WRITERS, ... until a push fails (the kill), on one
 * ring, made before any writer starts: a ring mapped where another
 * thread's freed one was reads to TSan as shared memory (tsan.supp). */
static void *crash_push(void *arg)
{
	struct crash_writer *c = arg;
	ush_ring *ring = th_ring(8u << 20, 0);
	pthread_barrier_wait(c->ready);
	for (uint32_t m = c->k; m < c->j->maps; m += CRASH_WRITERS) {
		if (push_on(ring, c->j, m, 0))
			break;
		atomic_fetch_add(c->acked, 1);
	}
	ush_ring_free(ring);
	return NULL;
}

/* A kill -9 inside a group: eight writers commit maps of one shuffle at
 * once, so that their records share the committer's groups, and the
 * worker is killed while they do. After a restart every map whose
 * commit was acknowledged reads back whole: no acknowledgement went out
 * before its record was in the log, and a group cut by the kill costs
 * only commits nobody was told of. */
static void crash_inside_a_group(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storecrash"));
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct job j = {.workers = w.addr, .shuffle = 12, .partitions = 4,
			.maps = CRASH_WRITERS * CRASH_ROUNDS, .records = 300,
			.st = statuses(CRASH_WRITERS * CRASH_ROUNDS)};
	atomic_uint acked = 0;
	struct crash_writer c[CRASH_WRITERS];
	pthread_barrier_t ready;
	pthread_barrier_init(&ready, NULL, CRASH_WRITERS);
	for (unsigned k = 0; k < CRASH_WRITERS; k++) {
		c[k] = (struct crash_writer){&j, &ready, k, &acked, 0};
		assert_int_equal(pthread_create(&c[k].tid, NULL, crash_push,
						&c[k]), 0);
	}
	while (atomic_load(&acked) < 3 * CRASH_WRITERS)
		usleep(1000);
	th_worker_kill(&w);
	for (unsigned k = 0; k < CRASH_WRITERS; k++)
		pthread_join(c[k].tid, NULL);
	pthread_barrier_destroy(&ready);
	th_worker_restart(&w, 2);
	struct job one[CRASH_WRITERS * CRASH_ROUNDS];
	unsigned n = 0;
	for (uint32_t m = 0; m < j.maps; m++)
		if (j.st[m].data)
			one[n++] = one_map(&j, m);
	assert_int_equal(n, atomic_load(&acked));
	verify(one, n);
	th_worker_stop(&w);
	job_free(&j);
}

/* Reads every partition of map m with its status alone: the first error
 * must be USH_ECORRUPT and its message must name the map. */
static void expect_corrupt(const struct job *j, uint32_t m)
{
	char want[32], where[32];
	snprintf(want, sizeof(want), "map %u", m);
	/* A worker's "are damaged" names the log in its directory. */
	snprintf(where, sizeof(where), "/s%u/t", j->shuffle);
	int bad = 0;
	for (uint32_t p = 0; p < j->partitions; p++) {
		ush_reader *r;
		int ret = th_reader_open(&r, &j->st[m - j->map0], 1, p, 20000);
		if (!ret) {
			const void *rec;
			size_t len;
			while ((ret = ush_reader_next(r, &rec, &len)) == 1)
				;
			ush_reader_free(r);
		}
		if (!ret)
			continue;
		print_message("partition %u: %s: %s\n", p, ush_err_name(ret),
			      ush_last_error());
		assert_int_equal(ret, USH_ECORRUPT);
		if (!strstr(ush_last_error(), want) ||
		    (strstr(ush_last_error(), "are damaged") &&
		     !strstr(ush_last_error(), where)))
			fail_msg("the error does not name %s and %s: %s", want,
				 where, ush_last_error());
		bad++;
	}
	assert_true(bad > 0);
}

/* Maps 0 and 1 committed into one log, then damage to it (the worker
 * stopped): a flipped bit in one index entry (of map 0's first frame, in
 * its len, partition, map or CRC; or of the log's last frame), with or
 * without a flipped bit in the frame's header. At the next start of
 * appends the repair never cuts a committed frame: map 2 is appended
 * after them, and every committed map reads back intact, before and
 * after another restart; but a map whose frame and index entry are both
 * damaged, which fails with USH_ECORRUPT naming it. */
static void repair_keeps_committed(void **state)
{
	(void)state;
	static const struct {
		bool last;      /* the last frame's entry, else map 0's first */
		int field;      /* byte of the entry flipped, -1: none */
		bool header;    /* the frame's header flipped too */
	} cases[] = {
		{false, 1, false}, {false, 5, false}, {false, 8, false},
		{false, 17, false}, {true, 1, false}, {true, 12, false},
		{false, 1, true}, {true, -1, true},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct th_worker w = {0};
		snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storerepair"));
		th_worker_spawn(&w, "127.0.0.1", 0, 1);
		struct job a = {.workers = w.addr, .shuffle = 8,
				.partitions = 5, .maps = 2, .records = 2000,
				.st = statuses(2)};
		push_all(&a);
		th_worker_stop(&w);
		char idx[700];
		snprintf(idx, sizeof(idx), "%s/s8/t0.idx", w.dir);
		struct ent_at at = find_entry(idx, 0, !cases[k].last);
		print_message("case %zu: entry at index byte %zu (map %u, log "
			      "offset %llu), byte %d%s\n", k, at.pos, at.map,
			      (unsigned long long)at.off, cases[k].field,
			      cases[k].header ? ", and its frame's header" :
						"");
		if (cases[k].field >= 0)
			flip_at(w.dir, "s8/t0.idx",
				at.pos + (size_t)cases[k].field, 0x02);
		if (cases[k].header) /* the magic */
			flip_at(w.dir, "s8/t0.log", at.off, 0x10);
		th_worker_spawn(&w, "127.0.0.1", w.port, 1);
		struct job b = {.workers = w.addr, .shuffle = 8,
				.partitions = 5, .map0 = 2, .maps = 1,
				.records = 2000, .st = statuses(1)};
		push_all(&b);
		for (unsigned pass = 0; pass < 2; pass++) {
			if (cases[k].header) {
				uint32_t good = at.map ? 0 : 1;
				struct job g[] = {one_map(&a, good), b};
				expect_corrupt(&a, at.map);
				verify(g, 2);
			} else {
				struct job ab[] = {a, b};
				verify(ab, 2);
			}
			th_worker_stop(&w);
			if (!pass)
				th_worker_spawn(&w, "127.0.0.1", w.port, 1);
		}
		job_free(&a);
		job_free(&b);
		th_rmrf(w.dir);
	}
}

/* Two index entries in a row damaged (map 0's first two, in their
 * lengths): the repair cannot tell where the frames after them begin,
 * and whatever follows may be committed, so it cuts nothing: the log
 * keeps every byte, the unreadable part is a damaged extent, map 0 reads
 * as USH_ECORRUPT naming it, and map 2 is appended after it and reads
 * back, before and after another restart. */
static void repair_keeps_unreadable(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storeunread"));
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct job a = {.workers = w.addr, .shuffle = 8, .partitions = 5,
			.maps = 2, .records = 2000, .st = statuses(2)};
	push_all(&a);
	th_worker_stop(&w);
	char idx[700];
	snprintf(idx, sizeof(idx), "%s/s8/t0.idx", w.dir);
	struct ent_at at = find_entry(idx, 0, true);
	flip_at(w.dir, "s8/t0.idx", at.pos + 1, 0x02);
	flip_at(w.dir, "s8/t0.idx", at.pos + 20 + 1, 0x02);
	off_t log = file_size(w.dir, "s8/t0.log");
	th_worker_spawn(&w, "127.0.0.1", w.port, 1);
	struct job b = {.workers = w.addr, .shuffle = 8, .partitions = 5,
			.map0 = 2, .maps = 1, .records = 2000,
			.st = statuses(1)};
	push_all(&b);
	for (unsigned pass = 0; pass < 2; pass++) {
		assert_true(file_size(w.dir, "s8/t0.log") > log);
		expect_corrupt(&a, 0);
		verify(&b, 1);
		th_worker_stop(&w);
		if (!pass)
			th_worker_spawn(&w, "127.0.0.1", w.port, 1);
	}
	job_free(&a);
	job_free(&b);
	th_rmrf(w.dir);
}

/* A flipped bit in a shuffle's claim record (the commit log's first
 * record: its application id) skips that record at the next start; the
 * start-up sweep must not take the shuffle for one nobody owns and
 * delete it: its owner comes from its commit records, it serves every
 * committed map and takes more, restart after restart. */
static void repair_corrupt_claim_kept(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storeclaim"));
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct job a = {.workers = w.addr, .shuffle = 9, .partitions = 5,
			.maps = 2, .records = 1000, .st = statuses(2)};
	push_all(&a);
	th_worker_stop(&w);
	flip_at(w.dir, "commit.log", 28, 0x01);
	th_worker_spawn(&w, "127.0.0.1", w.port, 1);
	verify(&a, 1);
	struct job b = {.workers = w.addr, .shuffle = 9, .partitions = 5,
			.map0 = 2, .maps = 1, .records = 1000,
			.st = statuses(1)};
	push_all(&b);
	th_worker_stop(&w);
	th_worker_spawn(&w, "127.0.0.1", w.port, 1);
	struct job ab[] = {a, b};
	verify(ab, 2);
	th_worker_stop(&w);
	job_free(&a);
	job_free(&b);
	th_rmrf(w.dir);
}

/* ------------------------------------------- few buffers, few fds */

struct pusher {
	struct job *j;
	int ret;
	pthread_t tid;
};

static void *push_one(void *arg)
{
	struct pusher *p = arg;
	p->ret = push(p->j, 0, 0);
	return NULL;
}

/* Eight shuffles pushed at once into one thread with four log buffers
 * and one log's files open: logs give their buffers up (their tail block
 * written padded, read back later) and their files (synced, reopened)
 * to each other, and every record reads back. */
static void many_logs_few_buffers(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storefew"));
	w.more[0] = "--pool=1M";
	w.more[1] = "--max-open-files=2";
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct job j[8];
	struct pusher p[8];
	for (unsigned i = 0; i < 8; i++) {
		j[i] = (struct job){.workers = w.addr, .shuffle = 20 + i,
				    .partitions = 50, .maps = 1,
				    .records = 20000, .st = statuses(1)};
		p[i] = (struct pusher){.j = &j[i]};
		assert_int_equal(pthread_create(&p[i].tid, NULL, push_one,
						&p[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++) {
		pthread_join(p[i].tid, NULL);
		if (p[i].ret)
			fail_msg("push of shuffle %u: %s", j[i].shuffle,
				 ush_err_name(p[i].ret));
	}
	for (unsigned i = 0; i < 8; i++)
		verify(&j[i], 1);
	th_worker_stop(&w);
	th_worker_spawn(&w, "127.0.0.1", w.port, 1);
	for (unsigned i = 0; i < 8; i++) {
		verify(&j[i], 1);
		job_free(&j[i]);
	}
	th_worker_stop(&w);
	th_rmrf(w.dir);
}

/* --------------------------------------------- in-place receive */

static void embedded_free(ush_worker *wk)
{
	ush_worker_stop(wk);
	th_ok(ush_worker_wait(wk));
	ush_worker_free(wk);
}

/* Six maps of one shuffle written at once (their records interleaved,
 * all committed at the end) into a thread whose 1 MiB pool spares
 * in-place receive buffers for some connections only: the others copy
 * into the log's buffer between the regions written in place (the log
 * seals its packed tail before each region). Then a map whose frames
 * are larger than a buffer: they leave the in-place path for the copy.
 * Every record reads back, after a restart too (the index's holes
 * skipped), and maps appended after the restart read back with them. */
static void in_place_and_copied(void **state)
{
	(void)state;
	char dir[512], addr[64] = "127.0.0.1:0";
	snprintf(dir, sizeof(dir), "%s", th_tmpdir("storeinplace"));
	ush_worker *wk = th_worker_embed_pool(dir, 1, 1u << 20, addr,
					      sizeof(addr));
	enum { MAPS = 6 };
	struct job j = {.workers = addr, .shuffle = 41, .partitions = 7,
			.maps = MAPS, .records = 400, .big = 100000,
			.st = statuses(MAPS)};
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 16u << 20;
	th_ok(ush_ring_create(&ring, &ro));
	ush_writer *w[MAPS];
	for (uint32_t m = 0; m < MAPS; m++) {
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = j.shuffle, .map = m,
			.partitions = j.partitions, .target = USH_TARGET_NET,
			.workers = addr, .timeout_ms = 120000};
		th_ok(ush_writer_open(&w[m], ring, &wo));
	}
	uint8_t *buf = malloc(j.big + j.records + 128);
	assert_non_null(buf);
	for (uint32_t i = 0; i < j.records; i++)
		for (uint32_t m = 0; m < MAPS; m++) {
			size_t len = rec_len(&j, m, i);
			uint64_t id = (uint64_t)m << 32 | i;
			memcpy(buf, &id, 8);
			th_fill(buf + 8, len - 8, job_seed(&j, id));
			th_ok(ush_writer_write(w[m], i % j.partitions, buf,
					       len));
		}
	for (uint32_t m = 0; m < MAPS; m++) {
		th_ok(ush_writer_commit(w[m], NULL));
		th_status_copy(w[m], &j.st[m]);
		ush_writer_free(w[m]);
	}
	free(buf);
	ush_ring_free(ring);
	/* A map whose frames do not fit a receive buffer (256 KiB here):
	 * the first goes to the copying parser from the buffer it began
	 * in. */
	struct job o = {.workers = addr, .shuffle = 42, .partitions = 3,
			.maps = 1, .records = 40, .big = 400000,
			.st = statuses(1)};
	push_all(&o);
	verify(&j, 1);
	verify(&o, 1);
	struct ush_worker_stats ws;
	ush_worker_stats(wk, &ws);
	/* Both paths ran: frames above a buffer are always copied. */
	assert_true(ws.bytes_in_place > 0);
	assert_true(ws.bytes_in_place < ws.bytes_stored);
	embedded_free(wk);
	wk = th_worker_embed_pool(dir, 1, 1u << 20, addr, sizeof(addr));
	verify(&j, 1);
	verify(&o, 1);
	struct job k = {.workers = addr, .shuffle = 41, .partitions = 7,
			.map0 = MAPS, .maps = 2, .records = 3000,
			.st = statuses(2)};
	push_all(&k);
	struct job jk[] = {j, k};
	verify(jk, 2);
	embedded_free(wk);
	job_free(&j);
	job_free(&k);
	job_free(&o);
	th_rmrf(dir);
}

/* Eight maps of one shuffle written at once through a thread whose pool
 * spares in-place buffers for some only, each map committed as soon as
 * its last record is written while the others go on writing: rounds
 * start among appends and regions, and the next round among the
 * syncs of the one before. Every record reads back, after a restart
 * too. */
static void commits_among_appends(void **state)
{
	(void)state;
	char dir[512], addr[64] = "127.0.0.1:0";
	snprintf(dir, sizeof(dir), "%s", th_tmpdir("storecommitsamong"));
	ush_worker *wk = th_worker_embed_pool(dir, 1, 1u << 20, addr,
					      sizeof(addr));
	enum { MAPS = 8, STRIDE = 2500 };
	struct job j = {.workers = addr, .shuffle = 43, .partitions = 5,
			.maps = MAPS, .records = 20000, .st = statuses(MAPS)};
	ush_ring *ring = th_ring(8u << 20, 0);
	ush_writer *w[MAPS];
	for (uint32_t m = 0; m < MAPS; m++) {
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = j.shuffle, .map = m,
			.partitions = j.partitions, .target = USH_TARGET_NET,
			.workers = addr, .timeout_ms = 120000};
		th_ok(ush_writer_open(&w[m], ring, &wo));
	}
	uint8_t buf[256];
	for (uint32_t g = 0; g < j.records + (MAPS - 1) * STRIDE; g++)
		for (uint32_t m = 0; m < MAPS; m++) {
			if (g < m * STRIDE || g - m * STRIDE >= j.records)
				continue;
			uint32_t i = g - m * STRIDE;
			size_t len = rec_len(&j, m, i);
			uint64_t id = (uint64_t)m << 32 | i;
			memcpy(buf, &id, 8);
			th_fill(buf + 8, len - 8, job_seed(&j, id));
			th_ok(ush_writer_write(w[m], i % j.partitions, buf,
					       len));
			if (i + 1 < j.records)
				continue;
			th_ok(ush_writer_commit(w[m], NULL));
			th_status_copy(w[m], &j.st[m]);
			ush_writer_free(w[m]);
		}
	ush_ring_free(ring);
	verify(&j, 1);
	embedded_free(wk);
	wk = th_worker_embed_pool(dir, 1, 1u << 20, addr, sizeof(addr));
	verify(&j, 1);
	embedded_free(wk);
	job_free(&j);
	th_rmrf(dir);
}

/* A raw writer of shuffle s map m on port: its HELLO answered. */
static int raw_writer(int port, uint32_t s, uint32_t m)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				m, 0, "default", 0, {0}};
	int fd = th_raw_connect(port);
	th_hello(fd, h);
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f),
			 USHI_FRAME_HELLO);
	return fd;
}

/* Waits on a raw writer for its commit's ACK, which must say success. */
static void commit_acked(int fd)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	for (;;) {
		struct ushi_frame f;
		int type = th_recv_frame(fd, b, sizeof(b), &f);
		char msg[600] = "";
		if (type == USHI_FRAME_ERROR)
			proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len,
					msg, sizeof(msg));
		if (type == USHI_FRAME_ERROR || type < 0)
			fail_msg("the writer's commit: %s",
				 type < 0 ? "closed" : msg);
		struct proto_ack a;
		if (type != USHI_FRAME_ACK)
			continue;
		proto_get_ack(b + USH_FRAME_HDR_SIZE, &a);
		if (a.kind == USHI_ACK_COMMIT) {
			assert_int_equal(a.status, 0);
			return;
		}
	}
}

/* Writers that close (or reset) their connection right after their
 * MAPPER_END, at delays that spread the close over the commit's steps:
 * its sync round, and its record with the committer, which hands the
 * record back to the loop after the close. The connection waits for it
 * (a freed one would be written by the loop: ASan's to see); the worker
 * goes on committing, stops cleanly and replays its log. */
static void commit_then_close(void **state)
{
	(void)state;
	char dir[512], addr[64] = "127.0.0.1:0";
	snprintf(dir, sizeof(dir), "%s", th_tmpdir("storecommitclose"));
	ush_worker *wk = th_worker_embed(dir, 2, addr, sizeof(addr));
	int port = ush_worker_port(wk);
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	uint32_t crc;
	for (uint32_t i = 0; i < 100; i++) {
		uint32_t s = 300 + i;
		int fd = raw_writer(port, s, 0);
		th_send_all(fd, b, th_rec_frame(b, s, 0, "closing", &crc));
		th_send_ctrl(fd, b, proto_put_mapper_end(b, s, 0, 0));
		usleep((i % 50) * 60);
		if (i % 2) { /* a reset rather than a FIN */
			struct linger l = {1, 0};
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
		}
		close(fd);
	}
	int fd = raw_writer(port, 500, 0);
	th_send_all(fd, b, th_rec_frame(b, 500, 0, "kept", &crc));
	th_send_ctrl(fd, b, proto_put_mapper_end(b, 500, 0, 0));
	commit_acked(fd);
	close(fd);
	struct ush_worker_stats ws;
	ush_worker_stats(wk, &ws);
	assert_true(ws.commits >= 1 && ws.commits <= 101);
	embedded_free(wk);
	wk = th_worker_embed(dir, 2, addr, sizeof(addr));
	embedded_free(wk);
	th_rmrf(dir);
}

/* Writers holding in-place receive buffers (all the pool spares them)
 * while a reader that stopped reading holds what FETCH took: a writer
 * left to copy still finds a log buffer, and commits. */
static void in_place_leaves_logs_a_buffer(void **state)
{
	(void)state;
	char dir[512], addr[64] = "127.0.0.1:0";
	snprintf(dir, sizeof(dir), "%s", th_tmpdir("storeinplacefetch"));
	ush_worker *wk = th_worker_embed_pool(dir, 1, 4u << 20, addr,
					     sizeof(addr));
	struct job j = {.workers = addr, .shuffle = 1, .partitions = 1,
			.maps = 1, .records = 320, .big = 512 << 10,
			.st = statuses(1)};
	push_all(&j);
	/* Restarted: no log holds a buffer. */
	embedded_free(wk);
	wk = th_worker_embed_pool(dir, 1, 4u << 20, addr, sizeof(addr));
	int port = ush_worker_port(wk), w[3];
	for (uint32_t m = 0; m < 3; m++)
		w[m] = raw_writer(port, 2, m);
	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(th_reader_open(&r, j.st, 1, 0, 0));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	/* Until the worker's sends to the reader stop. */
	struct ush_worker_stats ws;
	uint64_t last = 0;
	for (unsigned same = 0, k = 0; same < 5 && k < 300; k++) {
		usleep(200000);
		ush_worker_stats(wk, &ws);
		same = ws.bytes_out == last ? same + 1 : 0;
		last = ws.bytes_out;
	}
	int fd = raw_writer(port, 3, 0);
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	uint32_t crc;
	th_send_all(fd, b, th_rec_frame(b, 3, 0, "copied", &crc));
	th_send_ctrl(fd, b, proto_put_mapper_end(b, 3, 0, 0));
	commit_acked(fd);
	close(fd);
	for (unsigned m = 0; m < 3; m++)
		close(w[m]);
	ush_reader_free(r);
	embedded_free(wk);
	job_free(&j);
	th_rmrf(dir);
}

/* ------------------------------------------------ many partitions */

/* Bytes s<shuffle>'s files take on disk (allocated blocks), and in
 * *logs those of its logs alone. */
static uint64_t disk_bytes(const char *dir, uint32_t shuffle, uint64_t *logs)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/s%u", dir, shuffle);
	DIR *d = opendir(path);
	assert_non_null(d);
	uint64_t n = 0;
	*logs = 0;
	struct dirent *de;
	struct stat st;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' &&
		    !fstatat(dirfd(d), de->d_name, &st, 0)) {
			uint64_t b = (uint64_t)st.st_blocks * 512;
			n += b;
			if (strstr(de->d_name, ".log"))
				*logs += b;
		}
	closedir(d);
	return n;
}

/* A shuffle of 100,000 partitions (USH_TEST_PARTITIONS) from two maps,
 * small frames: every partition reads back with every record checked,
 * and the worker's files take at most 1.2 times the frames' bytes (the
 * frames are packed, not each padded to a block). */
static void scale_many_partitions_packed(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storemany"));
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	const char *env = getenv("USH_TEST_PARTITIONS");
	uint32_t parts = env ? (uint32_t)atoi(env) : 100000;
	/* Three records a partition a map: frames of about 270 bytes. */
	struct job j = {.workers = w.addr, .shuffle = 5, .partitions = parts,
			.maps = 2, .records = 3 * parts, .st = statuses(2)};
	double t0 = now_s();
	push_all(&j);
	double t1 = now_s();
	uint64_t frames = verify(&j, 1);
	double t2 = now_s();
	uint64_t logs, disk = disk_bytes(w.dir, j.shuffle, &logs);
	print_message("%u partitions, 2 maps: push %.1f s, read back %.1f s; "
		      "%llu frame bytes, on disk %llu (logs %llu, indexes "
		      "%llu): %.3fx\n", parts, t1 - t0, t2 - t1,
		      (unsigned long long)frames, (unsigned long long)disk,
		      (unsigned long long)logs,
		      (unsigned long long)(disk - logs),
		      (double)disk / (double)frames);
	assert_true(frames > 0);
	if (disk * 5 > frames * 6)
		fail_msg("%llu bytes on disk for %llu frame bytes: more than "
			 "1.2x", (unsigned long long)disk,
			 (unsigned long long)frames);
	th_ok(ush_shuffle_drop(w.addr, NULL, j.shuffle, 60000));
	job_free(&j);
	th_worker_stop(&w);
	th_rmrf(w.dir);
}

/* ------------------------------------------------- a failed write */

static void write_file(const char *path, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	uint8_t *b = calloc(1, n);
	assert_non_null(b);
	assert_int_equal(write(fd, b, n), (ssize_t)n);
	close(fd);
	free(b);
}

static char mounted[512];

static int unmount(void **state)
{
	(void)state;
	if (mounted[0])
		umount2(mounted, MNT_DETACH);
	mounted[0] = 0;
	return 0;
}

static void failed_write_scoped(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storefull"));
	if (mount("tmpfs", w.dir, "tmpfs", 0, "size=2m,mode=0755")) {
		print_message("skipped: cannot mount a 2 MiB tmpfs at %s "
			      "(%s): needs CAP_SYS_ADMIN\n", w.dir,
			      strerror(errno));
		th_rmrf(w.dir);
		skip();
	}
	snprintf(mounted, sizeof(mounted), "%s", w.dir);
	/* Ballast leaves about half a MiB free. */
	char ballast[600];
	snprintf(ballast, sizeof(ballast), "%s/ballast", w.dir);
	write_file(ballast, 1536u << 10);
	/* One thread: every shuffle shares its files' thread. The bytes
	 * quota (half of this file system by default) would refuse the
	 * push before the file system does. */
	w.extra = "--max-app-bytes=1g";
	th_worker_spawn(&w, "127.0.0.1", 0, 1);

	struct job full = {.workers = w.addr, .shuffle = 1, .partitions = 4,
			   .maps = 2, .records = 100, .st = statuses(2)};
	/* A committed map keeps shuffle 1 past the failure below (one left
	 * with no attempt open or committed goes at once, its files with
	 * it: test_net_abandoned). */
	th_ok(push(&full, 1, 0));
	full.records = 20000;
	int ret = push(&full, 0, 0);
	print_message("shuffle 1 on a full file system: %s: %s\n",
		      ush_err_name(ret), last_msg);
	assert_int_not_equal(ret, 0);
	if (!strstr(last_msg, "No space left on device"))
		fail_msg("the error does not say why: %s", last_msg);

	/* Space freed, shuffle 1 still there (not dropped): other
	 * shuffles commit on the same thread. */
	assert_int_equal(unlink(ballast), 0);
	struct job other = {.workers = w.addr, .shuffle = 2, .partitions = 4,
			    .maps = 2, .records = 2000, .st = statuses(2)};
	push_all(&other);
	verify(&other, 1);

	/* Shuffle 1's files have a failed write: it commits no more on
	 * this thread, until it is dropped. */
	ret = push(&full, 0, 1);
	print_message("shuffle 1 again: %s: %s\n", ush_err_name(ret),
		      last_msg);
	assert_int_not_equal(ret, 0);
	th_ok(ush_shuffle_drop(w.addr, NULL, full.shuffle, 0));
	full.records = 2000;
	push_all(&full);
	verify(&full, 1);
	verify(&other, 1);
	job_free(&full);
	job_free(&other);
	th_worker_stop(&w);
	if (umount2(w.dir, 0))
		fail_msg("umount %s: %s", w.dir, strerror(errno));
	mounted[0] = 0;
	th_rmrf(w.dir);
}

/* Pushes new shuffles of j to wk, numbered from `from`, until one is
 * refused (shuffles are placed by a hash of their number: one lands on
 * bad within 32), its error naming bad and why; wk's directory 1, bad,
 * is then quarantined with err. */
static void quarantined(ush_worker *wk, struct job *j, uint32_t from,
			const char *bad, const char *why, int err)
{
	int ret = 0;
	for (j->shuffle = from; j->shuffle < from + 32 && !ret; j->shuffle++)
		ret = push(j, 0, 0);
	print_message("shuffle %u: %s: %s\n", j->shuffle - 1,
		      ush_err_name(ret), last_msg);
	assert_int_not_equal(ret, 0);
	if (!strstr(last_msg, bad) || !strstr(last_msg, why))
		fail_msg("the error does not name %s and why: %s", bad,
			 last_msg);
	const char *path;
	int derr;
	th_ok(ush_worker_dir(wk, 1, &path, &derr));
	assert_string_equal(path, bad);
	assert_int_equal(derr, err);
}

/* Six shuffles numbered from `from` pushed to the worker at addr commit,
 * read back, all in good and none in the quarantined bad. */
static void committed_in(const char *addr, uint32_t from, const char *good,
			 const char *bad)
{
	for (uint32_t k = 0; k < 6; k++) {
		struct job o = {.workers = addr, .shuffle = from + k,
				.partitions = 4, .maps = 2, .records = 2000,
				.st = statuses(2)};
		push_all(&o);
		verify(&o, 1);
		char name[32];
		snprintf(name, sizeof(name), "s%u", o.shuffle);
		assert_true(has(good, name));
		assert_false(has(bad, name));
		job_free(&o);
	}
}

/*
 * One of two directories fills up mid-push (a 2 MiB tmpfs with ballast):
 * the shuffle stored there fails, its error naming the directory; the
 * directory is quarantined (ush_worker_dir(), the metric's source) and
 * every later shuffle goes to the other directory and commits.
 */
static void full_dir_quarantined(void **state)
{
	(void)state;
	char good[160], bad[160], list[400], addr[64] = "";
	assert_true(snprintf(good, sizeof(good), "%s",
			     th_tmpdir("quar-good")) < (int)sizeof(good));
	assert_true(snprintf(bad, sizeof(bad), "%s", th_tmpdir("quar-bad")) <
		    (int)sizeof(bad));
	if (mount("tmpfs", bad, "tmpfs", 0, "size=2m,mode=0755")) {
		print_message("skipped: cannot mount a 2 MiB tmpfs at %s "
			      "(%s): needs CAP_SYS_ADMIN\n", bad,
			      strerror(errno));
		skip();
	}
	snprintf(mounted, sizeof(mounted), "%s", bad);
	char ballast[300];
	snprintf(ballast, sizeof(ballast), "%s/ballast", bad);
	write_file(ballast, 1536u << 10);
	snprintf(list, sizeof(list), "%s:%s", good, bad);
	ush_worker *wk = th_worker_embed(list, 1, addr, sizeof(addr));
	struct job j = {.workers = addr, .partitions = 4, .maps = 1,
			.records = 20000, .st = statuses(1)};
	quarantined(wk, &j, 40, bad, "No space left", -ENOSPC);
	const char *path;
	int err;
	th_ok(ush_worker_dir(wk, 0, &path, &err));
	assert_int_equal(err, 0);
	assert_int_equal(ush_worker_dir(wk, 2, &path, &err), -ENOENT);
	/* Out of placement: the next shuffles all go to the good one. */
	committed_in(addr, 100, good, bad);
	ush_worker_free(wk);
	job_free(&j);
	if (umount2(bad, 0))
		fail_msg("umount %s: %s", bad, strerror(errno));
	mounted[0] = 0;
}

/* Turns the ext4 mounted at dir read-only as an error does under
 * errors=remount-ro: its error triggered through sysfs. */
static void ext4_fail(const char *dir)
{
	struct stat st;
	char link[128], target[256], path[300];
	assert_int_equal(stat(dir, &st), 0);
	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(st.st_dev),
		 minor(st.st_dev));
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	assert_true(n > 0);
	target[n] = 0;
	snprintf(path, sizeof(path), "/sys/fs/ext4/%s/trigger_fs_error",
		 strrchr(target, '/') + 1);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_true(write(fd, "ushuffle test", 13) == 13);
	close(fd);
}

/*
 * One of two directories becomes read-only mid-stream, as ext4 makes
 * itself on an error with errors=remount-ro (an ext4 on a loop device,
 * its error triggered through sysfs): a new shuffle placed there fails
 * naming the directory, which is quarantined; later shuffles commit in
 * the other; a shuffle committed there before is still read back.
 */
static void ro_dir_quarantined(void **state)
{
	(void)state;
	char good[160], bad[160], list[400], addr[64] = "";
	assert_true(snprintf(good, sizeof(good), "%s",
			     th_tmpdir("ro-good")) < (int)sizeof(good));
	assert_true(snprintf(bad, sizeof(bad), "%s", th_tmpdir("ro-bad")) <
		    (int)sizeof(bad));
	th_mount_ext4(bad, "errors=remount-ro");
	snprintf(mounted, sizeof(mounted), "%s", bad);
	if (access("/sys/fs/ext4", F_OK)) {
		print_message("skipped: no /sys/fs/ext4 to raise an error "
			      "through\n");
		skip();
	}
	snprintf(list, sizeof(list), "%s:%s", good, bad);
	ush_worker *wk = th_worker_embed(list, 1, addr, sizeof(addr));
	/* A shuffle committed in the directory before it fails. */
	struct job old = {.workers = addr, .partitions = 4, .maps = 1,
			  .records = 2000, .st = statuses(1)};
	char name[32] = "";
	for (old.shuffle = 40; old.shuffle < 72; old.shuffle++) {
		push_all(&old);
		snprintf(name, sizeof(name), "s%u", old.shuffle);
		if (has(bad, name))
			break;
	}
	assert_true(has(bad, name));
	ext4_fail(bad);
	struct job j = {.workers = addr, .partitions = 4, .maps = 1,
			.records = 2000, .st = statuses(1)};
	quarantined(wk, &j, 200, bad, "Read-only", -EROFS);
	committed_in(addr, 300, good, bad);
	verify(&old, 1);
	ush_worker_free(wk);
	job_free(&old);
	job_free(&j);
	if (umount2(bad, 0))
		fail_msg("umount %s: %s", bad, strerror(errno));
	mounted[0] = 0;
}

/* ------------------------------------------- restart, other options */

/* Logs of s<shuffle> written by a thread numbered from `from` up. */
static unsigned files_of_threads(const char *dir, uint32_t shuffle,
				 unsigned from)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/s%u", dir, shuffle);
	DIR *d = opendir(path);
	assert_non_null(d);
	unsigned n = 0, t;
	char c;
	struct dirent *de;
	while ((de = readdir(d)))
		if (sscanf(de->d_name, "t%u.lo%c", &t, &c) == 2 && c == 'g' &&
		    t >= from)
			n++;
	closedir(d);
	return n;
}

/* Logs of s<shuffle> whose size is a multiple of 4 KiB. */
static unsigned aligned_files(const char *dir, uint32_t shuffle)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/s%u", dir, shuffle);
	DIR *d = opendir(path);
	assert_non_null(d);
	unsigned n = 0;
	struct dirent *de;
	struct stat st;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".log") &&
		    !fstatat(dirfd(d), de->d_name, &st, 0) &&
		    st.st_size % 4096 == 0)
			n++;
	closedir(d);
	return n;
}

static void restart_other_options(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storeopts"));
	th_worker_spawn(&w, "127.0.0.1", 0, 4);
	/* Frames over 1 MiB, from 8 writers: some land on threads 1-3. */
	struct job a = {.workers = w.addr, .shuffle = 3, .partitions = 5,
			.map0 = 0, .maps = 8, .records = 12,
			.big = 1100u << 10, .st = statuses(8)};
	push_all(&a);
	verify(&a, 1);
	th_worker_stop(&w);
	unsigned high = files_of_threads(w.dir, a.shuffle, 1);
	print_message("%u logs of threads 1-3\n", high);
	assert_true(high > 0);

	/* One thread, frames up to 1 MiB, buffered, a 1 MiB pool. */
	int port = w.port;
	w.more[0] = "--max-frame=1M";
	w.more[1] = "--direct=0";
	w.more[2] = "--pool=1M";
	th_worker_spawn(&w, "127.0.0.1", port, 1);
	verify(&a, 1);
	struct job b = {.workers = w.addr, .shuffle = 3, .partitions = 5,
			.map0 = 8, .maps = 2, .records = 3000,
			.st = statuses(2)};
	push_all(&b);
	struct job ab[] = {a, b};
	verify(ab, 2);
	/* A shuffle whose log is new: buffered from the start, its end
	 * not block-aligned. */
	struct job d = {.workers = w.addr, .shuffle = 4, .partitions = 3,
			.map0 = 0, .maps = 1, .records = 500,
			.st = statuses(1)};
	push_all(&d);
	th_worker_stop(&w);
	print_message("s4 after the buffered run: %u of %u logs of a whole "
		      "number of 4 KiB blocks\n", aligned_files(w.dir, 4),
		      files_of_threads(w.dir, 4, 0));

	/* Back to the defaults, two threads. */
	memset(w.more, 0, sizeof(w.more));
	th_worker_spawn(&w, "127.0.0.1", port, 2);
	verify(ab, 2);
	struct job c = {.workers = w.addr, .shuffle = 3, .partitions = 5,
			.map0 = 10, .maps = 2, .records = 8,
			.big = 1100u << 10, .st = statuses(2)};
	push_all(&c);
	struct job abc[] = {a, b, c};
	verify(abc, 3);
	/* O_DIRECT appends after a buffered log's unaligned end: its
	 * tail block is read back and rewritten. */
	verify(&d, 1);
	struct job d1 = d;
	d1.workers = w.addr;
	d1.map0 = 1;
	d1.st = statuses(1);
	push_all(&d1);
	struct job dd[] = {d, d1};
	verify(dd, 2);
	th_worker_stop(&w);
	job_free(&a);
	job_free(&b);
	job_free(&c);
	job_free(&d);
	job_free(&d1);
	th_rmrf(w.dir);
}

/* ------------------------------------------------------- symlinks */

static unsigned entries(const char *path)
{
	DIR *d = opendir(path);
	assert_non_null(d);
	unsigned n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static void expect_refusal(int ret, const char *msg, const char *what)
{
	print_message("%s: %s: %s\n", what, ush_err_name(ret), msg);
	if (!ret)
		fail_msg("%s succeeded through a symbolic link", what);
	if (!strstr(msg, "symbolic link"))
		fail_msg("%s: the error does not say why: %s", what, msg);
}

/* A stream may fail at its first frame rather than at the open: its
 * error, or 0. */
static int first_record(ush_reader *r)
{
	const void *rec;
	size_t len;
	int ret = ush_reader_next(r, &rec, &len);
	return ret < 0 ? ret : 0;
}

/* A worker whose kernel lacks openat2: seccomp answers ENOSYS. */
static void no_openat2(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		_exit(125);
}

static void symlinks(void (*child_setup)(void))
{
	char out[PATH_MAX], path[PATH_MAX + 100], target[PATH_MAX + 100];
	/* Links need absolute targets: th_tmpdir() may be relative. */
	assert_non_null(realpath(th_tmpdir("outside"), out));
	snprintf(path, sizeof(path), "%s/canary", out);
	write_file(path, 100);
	struct th_worker w = {.child_setup = child_setup};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("storelink"));
	th_worker_spawn(&w, "127.0.0.1", 0, 1);

	/* A shuffle directory that is a link elsewhere: writes refused,
	 * DROP deletes nothing there. */
	snprintf(path, sizeof(path), "%s/s7", w.dir);
	assert_int_equal(symlink(out, path), 0);
	struct job j7 = {.workers = w.addr, .shuffle = 7, .partitions = 2,
			 .maps = 1, .records = 100, .st = statuses(1)};
	expect_refusal(push(&j7, 0, 0), last_msg, "a push into s7 -> outside");
	assert_int_equal(entries(out), 1);
	th_ok(ush_shuffle_drop(w.addr, NULL, 7, 0));
	assert_int_equal(entries(out), 1);
	job_free(&j7);

	/* Committed shuffles 8 and 9, then, with the worker down, s8
	 * moved out and linked back, and s9's log replaced by a link to a
	 * file outside. */
	struct job j8 = {.workers = w.addr, .shuffle = 8, .partitions = 2,
			 .maps = 1, .records = 100, .st = statuses(1)};
	struct job j9 = j8;
	j9.shuffle = 9;
	j9.maps = 2;
	j9.st = statuses(2);
	push_all(&j8);
	j9.maps = 1;
	push_all(&j9);
	j9.maps = 2;
	th_worker_stop(&w);
	snprintf(path, sizeof(path), "%s/s8", w.dir);
	snprintf(target, sizeof(target), "%s/s8", out);
	assert_int_equal(rename(path, target), 0);
	assert_int_equal(symlink(target, path), 0);
	unsigned n8 = entries(target);
	snprintf(target, sizeof(target), "%s/victim", out);
	write_file(target, 4096);
	snprintf(path, sizeof(path), "%s/s9/t0.log", w.dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(symlink(target, path), 0);
	th_worker_spawn(&w, "127.0.0.1", w.port, 1);

	ush_reader *r = NULL;
	int ret = th_reader_open(&r, j8.st, 1, 0, 0);
	if (!ret)
		ret = first_record(r);
	expect_refusal(ret, ush_last_error(), "a read of s8 -> outside");
	ush_reader_free(r);
	r = NULL;
	ret = th_reader_open(&r, j9.st, 1, 0, 0);
	if (!ret)
		ret = first_record(r);
	expect_refusal(ret, ush_last_error(),
		       "a read of s9/t0.log -> outside");
	ush_reader_free(r);
	r = NULL;
	ret = th_reader_open(&r, j9.st, 1, 1, 0);
	if (!ret)
		ret = first_record(r);
	expect_refusal(ret, ush_last_error(),
		       "a read of s9 partition 1 (s9/t0.log -> outside)");
	ush_reader_free(r);
	expect_refusal(push(&j9, 1, 0), last_msg,
		       "a push into s9/t0.log -> outside");
	struct stat st;
	assert_int_equal(stat(target, &st), 0);
	assert_int_equal(st.st_size, 4096);

	/* Shuffle 10, plain files: served. */
	struct job j10 = j8;
	j10.shuffle = 10;
	j10.st = statuses(1);
	push_all(&j10);
	verify(&j10, 1);
	job_free(&j10);

	th_ok(ush_shuffle_drop(w.addr, NULL, 8, 0));
	th_ok(ush_shuffle_drop(w.addr, NULL, 9, 0));
	snprintf(path, sizeof(path), "%s/s8", out);
	assert_int_equal(entries(path), n8);
	assert_int_equal(stat(target, &st), 0);
	assert_int_equal(st.st_size, 4096);
	snprintf(path, sizeof(path), "%s/canary", out);
	assert_int_equal(stat(path, &st), 0);
	job_free(&j8);
	job_free(&j9);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_rmrf(out);
}

static void symlinks_not_followed(void **state)
{
	(void)state;
	symlinks(NULL);
}

/* The same where the worker falls back to O_NOFOLLOW at each step. */
static void symlinks_not_followed_without_openat2(void **state)
{
	(void)state;
	symlinks(no_openat2);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(symlinks_not_followed),
		cmocka_unit_test(symlinks_not_followed_without_openat2),
		cmocka_unit_test(restart_other_options),
		cmocka_unit_test(repair_torn_tail_cut),
		cmocka_unit_test(repair_keeps_committed),
		cmocka_unit_test(repair_keeps_unreadable),
		cmocka_unit_test(repair_corrupt_claim_kept),
		cmocka_unit_test(crash_inside_a_group),
		cmocka_unit_test(dirs_reordered_or_added),
		cmocka_unit_test(dirs_of_two_workers_refused),
		cmocka_unit_test(many_logs_few_buffers),
		cmocka_unit_test(in_place_and_copied),
		cmocka_unit_test(in_place_leaves_logs_a_buffer),
		cmocka_unit_test(commit_then_close),
		cmocka_unit_test(commits_among_appends),
		cmocka_unit_test(scale_many_partitions_packed),
		cmocka_unit_test_teardown(failed_write_scoped, unmount),
		cmocka_unit_test_teardown(full_dir_quarantined, unmount),
		cmocka_unit_test_teardown(ro_dir_quarantined, unmount),
		cmocka_unit_test(scale_open_files_bounded),
	};
	/* ctest runs this program twice so that neither half runs for
	 * minutes under ASan: USH_TEST_GROUP=scale_ runs the tests of that
	 * prefix, =!scale_ the others; unset, it runs all. */
	const char *group = getenv("USH_TEST_GROUP");
	bool not = group && *group == '!';
	struct CMUnitTest sel[sizeof(tests) / sizeof(tests[0])];
	size_t n = 0;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (!group || not != !strncmp(tests[i].name, group + not,
					      strlen(group + not)))
			sel[n++] = tests[i];
	return _cmocka_run_group_tests("test_net_store", sel, n, NULL, NULL);
}
