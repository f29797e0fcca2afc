#define _GNU_SOURCE
#include "helpers.h"

#include "ushuffle/worker.h"

#include <errno.h>
#include <liburing.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

__attribute__((constructor)) static void th_secret_env(void)
{
	setenv("USHUFFLE_SECRET", TH_SECRET, 0);
}

/* USH_TEST_FILTER=pattern runs only the tests it names, and
 * USH_TEST_SKIP=pattern all but those, in every test program (cmocka's
 * filters: '*' and '?' match). */
__attribute__((constructor)) static void th_test_filter(void)
{
	const char *only = getenv("USH_TEST_FILTER");
	const char *skip = getenv("USH_TEST_SKIP");
	if (only)
		cmocka_set_test_filter(only);
	if (skip)
		cmocka_set_skip_filter(skip);
}

void th_worker_secret(struct ush_worker_opts *o)
{
	o->secret = getenv("USHUFFLE_SECRET");
	o->secret_len = strlen(o->secret);
}

const char *th_tmpdir(const char *tag)
{
	static char paths[16][512];
	static unsigned next;
	char *p = paths[next++ % 16];
	/* Absolute, as the disk writer stores a directory in its status
	 * and names it in its messages. */
	char base[PATH_MAX];
	if (!realpath(getenv("USH_TEST_DIR") ? getenv("USH_TEST_DIR") : ".",
		      base))
		fail_msg("USH_TEST_DIR: %s", strerror(errno));
	if (snprintf(p, 512, "%s/ush-%s-%d-%u", base, tag, (int)getpid(),
		     next) >= 512)
		fail_msg("scratch path under %s too long", base);
	th_rmrf(p);
	if (mkdir(p, 0755))
		fail_msg("mkdir %s failed", p);
	return p;
}

static const char *scratch;

const char *th_scratch(const char *tag)
{
	return scratch = th_tmpdir(tag);
}

int th_teardown(void **state)
{
	(void)state;
	if (scratch)
		th_rmrf(scratch);
	scratch = NULL;
	return 0;
}

void *th_read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail_msg("open %s: %s", path, strerror(errno));
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	size_t n = (size_t)st.st_size;
	uint8_t *p = malloc(n ? n : 1);
	assert_non_null(p);
	for (size_t got = 0; got < n;) {
		ssize_t r = pread(fd, p + got, n - got, (off_t)got);
		assert_true(r > 0);
		got += (size_t)r;
	}
	close(fd);
	*len = n;
	return p;
}

void th_write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		fail_msg("open %s: %s", path, strerror(errno));
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void th_rmrf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* nftw() passes no context: th_files_matching()'s, for its walk. */
static bool (*files_match)(const uint8_t *p, size_t n);
static unsigned files_matched;

static int match_one(const char *path, const struct stat *st, int type,
		     struct FTW *ftw)
{
	(void)ftw;
	if (type != FTW_F || !st->st_size)
		return 0;
	size_t n;
	uint8_t *b = th_read_file(path, &n);
	files_matched += files_match(b, n);
	free(b);
	return 0;
}

unsigned th_files_matching(const char *dir,
			   bool (*match)(const uint8_t *p, size_t n))
{
	files_match = match;
	files_matched = 0;
	assert_int_equal(nftw(dir, match_one, 16, FTW_PHYS), 0);
	return files_matched;
}

uint64_t th_rand(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

void th_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *b = buf;
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = th_rand(&s);
		size_t n = len - i < 8 ? len - i : 8;
		memcpy(b + i, &v, n);
	}
}

int th_check(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *b = buf;
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = th_rand(&s);
		size_t n = len - i < 8 ? len - i : 8;
		if (memcmp(b + i, &v, n))
			return 0;
	}
	return 1;
}

void th_status_copy(const ush_writer *w, struct ush_status *st)
{
	struct ush_status b;
	int ret = ush_writer_status(w, &b);
	if (ret)
		fail_msg("ush_writer_status = %d (%s): %s", ret,
			 ush_err_name(ret), ush_last_error());
	void *p = malloc(b.len);
	assert_non_null(p);
	memcpy(p, b.data, b.len);
	st->data = p;
	st->len = b.len;
}

int th_commit(ush_writer *w, struct ush_part_stats *parts,
	      struct ush_status *st)
{
	int ret = ush_writer_commit(w, parts);
	if (!ret && st)
		th_status_copy(w, st);
	return ret;
}

void th_status_free(struct ush_status *st)
{
	free((void *)st->data);
	st->data = NULL;
	st->len = 0;
}

void th_statuses_free(struct ush_status *st, size_t n)
{
	for (size_t i = 0; i < n; i++)
		th_status_free(&st[i]);
}

ush_ring *th_ring(size_t pool_bytes, size_t push)
{
	struct ush_ring_opts o;
	ush_ring *ring;
	ush_ring_opts_init(&o);
	if (pool_bytes)
		o.pool_bytes = pool_bytes;
	if (push)
		o.push_size = push;
	th_ok(ush_ring_create(&ring, &o));
	return ring;
}

uint64_t th_rec_seed(uint32_t m, uint32_t part, uint32_t i)
{
	return (uint64_t)m << 40 | (uint64_t)part << 20 | i;
}

int th_range_open(ush_reader **r, const struct ush_status *st, uint32_t n,
		  uint32_t first, uint32_t count, uint32_t timeout_ms)
{
	struct ush_reader_opts ro;
	ush_reader_opts_init(&ro);
	ro.partition = first;
	ro.npartitions = count;
	ro.statuses = st;
	ro.nstatuses = n;
	ro.timeout_ms = timeout_ms;
	return ush_reader_open(r, &ro);
}

int th_reader_open(ush_reader **r, const struct ush_status *st, uint32_t n,
		   uint32_t partition, uint32_t timeout_ms)
{
	return th_range_open(r, st, n, partition, 1, timeout_ms);
}

int th_uring_refused(void)
{
	struct io_uring ring;
	int ret = io_uring_queue_init(1, &ring, 0);
	if (!ret)
		io_uring_queue_exit(&ring);
	return ret;
}

long th_vm_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	long kb = -1;
	size_t n = strlen(field);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) &&
		    sscanf(line + n, ": %ld kB", &kb) == 1)
			break;
	fclose(f);
	assert_true(kb > 0);
	return kb;
}


void th_note(struct th_part *pt, uint64_t seed, uint32_t len)
{
	if (pt->n == pt->cap) {
		pt->cap = pt->cap ? 2 * pt->cap : 8;
		pt->seed = realloc(pt->seed, pt->cap * sizeof(*pt->seed));
		pt->len = realloc(pt->len, pt->cap * sizeof(*pt->len));
		assert_non_null(pt->seed);
		assert_non_null(pt->len);
	}
	pt->seed[pt->n] = seed;
	pt->len[pt->n++] = len;
}

void th_swap_batch(ush_writer *w, void **buf, uint32_t p, struct th_part *pt,
		   uint64_t *seq)
{
	uint8_t *b = *buf;
	size_t off = 0;
	uint32_t k = 1 + (uint32_t)(*seq % 7);
	for (uint32_t i = 0; i < k; i++) {
		uint64_t seed = (uint64_t)p << 32 | (*seq)++;
		b[off] = 100;
		b[off + 1] = b[off + 2] = b[off + 3] = 0;
		th_fill(b + off + 4, 100, seed);
		off += 104;
		th_note(pt, seed, 100);
	}
	th_ok(ush_writer_swap(w, p, buf, off, k));
}

void th_part_check(const struct th_part *pt, uint32_t p, uint32_t i, int ret,
		   const void *rec, size_t len)
{
	if (ret != 1)
		fail_msg("partition %u record %u of %u: %d (%s)", p, i,
			 pt->n, ret, ush_last_error());
	if (len != pt->len[i] || !th_check(rec, len, pt->seed[i]))
		fail_msg("partition %u record %u: %zu bytes, wanted %u of "
			 "seed %llx", p, i, len, pt->len[i],
			 (unsigned long long)pt->seed[i]);
}

void th_parts_free(struct th_part *parts, uint32_t n)
{
	for (uint32_t p = 0; p < n; p++) {
		free(parts[p].seed);
		free(parts[p].len);
	}
	free(parts);
}

void th_mount_ext4(const char *dir, const char *opts)
{
	char img[64], cmd[1200];
	snprintf(img, sizeof(img), "/var/tmp/ush-ext4-%d.img", (int)getpid());
	snprintf(cmd, sizeof(cmd), "truncate -s 64M %s && mkfs.ext4 -q -F %s "
		 "&& mount -o loop%s%s %s %s", img, img, opts ? "," : "",
		 opts ? opts : "", img, dir);
	if (system(cmd)) {
		print_message("skipped: no ext4 on a loop device here (needs "
			      "root, mkfs.ext4, the loop driver)\n");
		unlink(img);
		skip();
	}
	assert_int_equal(unlink(img), 0);
}
