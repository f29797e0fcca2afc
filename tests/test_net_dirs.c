/*
 * --dir's directories as one worker's (src/worker/dirid.c: each holds a
 * marker, ushuffled.id), against real ushuffled processes:
 *  - a restart without the home directory, or without a directory that
 *    holds shuffle logs, is refused (exit 2, naming it; a new empty
 *    directory at its path is called out), deletes nothing, and the
 *    whole list afterwards, in another order, serves everything (its
 *    markers, which say the same, not rewritten);
 *  - a directory added empty may leave the list again and come back;
 *  - two workers' directories in one list are refused, marked or of an
 *    earlier version, and so is one directory given twice (under two
 *    names, or through a symbolic link);
 *  - a damaged or truncated marker is refused naming the file (exit 1),
 *    and the worker serves everything once it is put back;
 *  - an earlier version's directories (no markers) are adopted, except
 *    shuffle logs without the directory of their commit log.
 *
 * USH_TEST_FILTER=name runs one test.
 */
#include "net_helpers.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>

#define THREADS 1
#define MAPS 1
#define JOBS 9

/* Short enough for three in a th_worker's dir. */
struct dirs {
	char a[160], b[160], c[160];
	char list[600];
};

static void dirs_make(struct dirs *d)
{
	const char *root = th_scratch("dirs");
	assert_true(strlen(root) < 150);
	snprintf(d->a, sizeof(d->a), "%.150s/a", root);
	snprintf(d->b, sizeof(d->b), "%.150s/b", root);
	snprintf(d->c, sizeof(d->c), "%.150s/c", root);
}

/* "--dir=" followed by the directories given, ':'-separated. */
static const char *dir_arg(struct dirs *d, const char *x, const char *y,
			   const char *z)
{
	snprintf(d->list, sizeof(d->list), "--dir=%s%s%s%s%s", x, y ? ":" : "",
		 y ? y : "", z ? ":" : "", z ? z : "");
	return d->list;
}

/* Starts ushuffled over list (a "--dir=" argument) and expects it to
 * refuse with status rc and a message holding want and, if set, also. */
static void refused(const char *list, int rc, const char *want,
		    const char *also)
{
	char *out, *err;
	int st = th_ushuffled_run((const char *[]){"--listen=127.0.0.1:0",
						   "--threads=1", list, NULL},
				  &out, &err);
	print_message("%s: %d: %s", list, st, err);
	assert_int_equal(st, rc);
	assert_non_null(strstr(err, want));
	if (also)
		assert_non_null(strstr(err, also));
	free(out);
	free(err);
}

static struct th_job job(const struct th_worker *w, uint32_t shuffle)
{
	struct th_job j = {.workers = w->addr, .shuffle = shuffle,
			   .partitions = 6, .maps = MAPS, .records = 300,
			   .statuses = calloc(MAPS, sizeof(struct ush_status))};
	assert_non_null(j.statuses);
	for (uint32_t m = 0; m < MAPS; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	return j;
}

/* Restarts w over w->dir and reads every job back. */
static void serves(struct th_worker *w, struct th_job *j, unsigned n)
{
	th_worker_restart(w, THREADS);
	for (unsigned k = 0; k < n; k++)
		th_verify(&j[k]);
	th_worker_stop(w);
}

static void jobs_free(struct th_job *j, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		th_job_free(&j[k]);
		free(j[k].statuses);
	}
}

/* Whether dir holds a shuffle directory s<S>. */
static bool holds_logs(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool found = false;
	while (d && !found && (de = readdir(d)))
		found = de->d_name[0] == 's' && de->d_name[1] >= '0' &&
			de->d_name[1] <= '9';
	if (d)
		closedir(d);
	return found;
}

static uint64_t fp_sum;

static int fp_one(const char *path, const struct stat *st, int type,
		  struct FTW *f)
{
	(void)st;
	if (type != FTW_F || !strcmp(path + f->base, "ushuffled.lock"))
		return 0;
	size_t len;
	uint8_t *b = th_read_file(path, &len);
	uint64_t h = 1469598103934665603ull;
	for (const char *p = path; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	free(b);
	fp_sum += h;
	return 0;
}

/* A fingerprint of every file under the directories (paths and bytes),
 * the lock files aside: a start writes its pid there. */
static uint64_t fingerprint(const struct dirs *d)
{
	fp_sum = 0;
	nftw(d->a, fp_one, 16, FTW_PHYS);
	nftw(d->b, fp_one, 16, FTW_PHYS);
	return fp_sum;
}

/* Shuffles 40, 41, ... over a:b until both hold logs (placement
 * spreads shuffles over the directories by number); returns how many. */
static unsigned shuffles(struct dirs *d, struct th_worker *w,
			 struct th_job *j)
{
	unsigned n = 0;
	snprintf(w->dir, sizeof(w->dir), "%s:%s", d->a, d->b);
	th_worker_spawn(w, "127.0.0.1", 0, THREADS);
	while (n < JOBS - 1 && (!n || !holds_logs(d->a) ||
				!holds_logs(d->b))) {
		j[n] = job(w, 40 + n);
		n++;
	}
	th_worker_stop(w);
	assert_true(holds_logs(d->a) && holds_logs(d->b));
	return n;
}

/* A list without the home, or without a directory holding logs, is
 * refused before anything is read or removed; the whole list, in
 * another order, serves everything. */
static void missing_dir_refused(void **state)
{
	(void)state;
	struct dirs d;
	struct th_worker w = {0};
	struct th_job j[JOBS];
	dirs_make(&d);
	unsigned n = shuffles(&d, &w, j);
	uint64_t fp = fingerprint(&d);
	refused(dir_arg(&d, d.b, NULL, NULL), 2, "lacks", "home");
	refused(dir_arg(&d, d.c, d.b, NULL), 2, d.a, "home");
	/* c, made by the refused start, is removed again. */
	assert_int_equal(access(d.c, F_OK), -1);
	refused(dir_arg(&d, d.a, NULL, NULL), 2, d.b,
		"may hold shuffle logs");
	/* b's disk not mounted: a new empty directory in its place. */
	char gone[200];
	snprintf(gone, sizeof(gone), "%s.gone", d.b);
	assert_int_equal(rename(d.b, gone), 0);
	refused(dir_arg(&d, d.a, d.b, NULL), 2, "is its disk mounted?", d.b);
	assert_int_equal(rename(gone, d.b), 0);
	assert_true(fp == fingerprint(&d));
	/* The list in another order: the markers say the same (the home
	 * first), so they are not rewritten (no space needed). */
	struct stat st0, st1;
	char id[200];
	snprintf(id, sizeof(id), "%s/ushuffled.id", d.a);
	assert_int_equal(stat(id, &st0), 0);
	snprintf(w.dir, sizeof(w.dir), "%s:%s", d.b, d.a);
	serves(&w, j, n);
	assert_int_equal(stat(id, &st1), 0);
	assert_true(st0.st_ino == st1.st_ino);
	jobs_free(j, n);
}

/* In another order with one more, everything is served and new logs
 * spread to the new one; a directory that joined and got no logs may
 * leave the list, and come back. */
static void reordered_added_left(void **state)
{
	(void)state;
	struct dirs d;
	struct th_worker w = {0};
	struct th_job j[JOBS];
	dirs_make(&d);
	unsigned n = shuffles(&d, &w, j);
	snprintf(w.dir, sizeof(w.dir), "%s:%s:%s", d.c, d.b, d.a);
	serves(&w, j, n);
	assert_false(holds_logs(d.c));
	snprintf(w.dir, sizeof(w.dir), "%s:%s", d.b, d.a);
	serves(&w, j, n);
	snprintf(w.dir, sizeof(w.dir), "%s:%s:%s", d.a, d.c, d.b);
	th_worker_restart(&w, THREADS);
	j[n] = job(&w, 40 + n);
	th_worker_stop(&w);
	snprintf(w.dir, sizeof(w.dir), "%s:%s:%s", d.b, d.c, d.a);
	serves(&w, j, n + 1);
	jobs_free(j, n + 1);
}

/* Another worker's directory, marked or of an earlier version, and one
 * directory given twice are refused, each for what it is. */
static void others_or_twice_refused(void **state)
{
	(void)state;
	struct dirs d;
	dirs_make(&d);
	for (int i = 0; i < 2; i++) {
		struct th_worker w = {0};
		snprintf(w.dir, sizeof(w.dir), "%s", i ? d.b : d.a);
		th_worker_spawn(&w, "127.0.0.1", 0, 1);
		th_worker_stop(&w);
	}
	refused(dir_arg(&d, d.a, d.b, NULL), 2, "belong to two workers", d.b);
	char link[200], other[200];
	snprintf(link, sizeof(link), "%s.link", d.a);
	snprintf(other, sizeof(other), "%s/", d.a);
	assert_int_equal(symlink(d.a, link), 0);
	refused(dir_arg(&d, d.a, link, NULL), 2, "given twice", link);
	refused(dir_arg(&d, d.c, other, d.a), 2, "given twice", other);
	refused(dir_arg(&d, d.a, d.a, NULL), 2, "given twice", NULL);
	snprintf(other, sizeof(other), "%s/ushuffled.id", d.b);
	assert_int_equal(unlink(other), 0);
	refused(dir_arg(&d, d.a, d.b, NULL), 2, "holds a commit log but no "
		"ushuffled.id", d.b);
	unlink(link);
}

/* A marker that does not read (a flipped bit, cut short) is refused
 * naming it; put back, the worker serves everything. */
static void damaged_marker_refused(void **state)
{
	(void)state;
	struct dirs d;
	struct th_worker w = {0};
	struct th_job j[JOBS];
	dirs_make(&d);
	unsigned n = shuffles(&d, &w, j);
	char path[200];
	snprintf(path, sizeof(path), "%s/ushuffled.id", d.b);
	size_t len;
	char *orig = th_read_file(path, &len);
	char *bad = malloc(len);
	assert_non_null(bad);
	memcpy(bad, orig, len);
	bad[40] ^= 0x04;
	const char *list = dir_arg(&d, d.a, d.b, NULL);
	th_write_file(path, bad, len);
	refused(list, 1, path, "crc32c does not match");
	th_write_file(path, orig, len / 2);
	refused(list, 1, path, "truncated");
	th_write_file(path, orig, len);
	free(orig);
	free(bad);
	serves(&w, j, n);
	jobs_free(j, n);
}

/* Directories of an earlier version (no markers): shuffle logs whose
 * commit log is not listed are refused, nothing removed; with the home
 * they are adopted and served. */
static void earlier_version_adopted(void **state)
{
	(void)state;
	struct dirs d;
	struct th_worker w = {0};
	struct th_job j[JOBS];
	char path[200];
	dirs_make(&d);
	unsigned n = shuffles(&d, &w, j);
	snprintf(path, sizeof(path), "%s/ushuffled.id", d.a);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/ushuffled.id", d.b);
	assert_int_equal(unlink(path), 0);
	uint64_t fp = fingerprint(&d);
	refused(dir_arg(&d, d.b, NULL, NULL), 2, "holds shuffle logs but no "
		"directory listed holds their commit log", d.b);
	assert_true(fp == fingerprint(&d));
	snprintf(w.dir, sizeof(w.dir), "%s:%s", d.b, d.a);
	serves(&w, j, n);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	refused(dir_arg(&d, d.b, NULL, NULL), 2, "lacks", d.a);
	jobs_free(j, n);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(missing_dir_refused, th_teardown),
		cmocka_unit_test_teardown(reordered_added_left, th_teardown),
		cmocka_unit_test_teardown(others_or_twice_refused,
					  th_teardown),
		cmocka_unit_test_teardown(damaged_marker_refused,
					  th_teardown),
		cmocka_unit_test_teardown(earlier_version_adopted,
					  th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
