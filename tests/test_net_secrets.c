/*
 * Secret files (docs/security.md, Secrets): a FIFO or a device in
 * --secrets-dir is refused without blocking the worker thread that a
 * HELLO naming it reaches, while other applications are served; a
 * secret file rewritten in place while it is read is read again, never
 * taken half; a rotation by rename takes effect at the next connection.
 */
#define _GNU_SOURCE
#include "net_helpers.h"
#include "net/auth.h"
#include "net/proto.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define SECRET_A "secret-of-application-A-0123456789"

/* --secrets-dir of w: <dir>.secrets, with A's secret in it. */
static void secrets_dir(struct th_worker *w, char *sdir, size_t n,
			char *opt, size_t on, const char *tag)
{
	snprintf(w->dir, sizeof(w->dir), "%s", th_tmpdir(tag));
	snprintf(sdir, n, "%s.secrets", w->dir);
	th_rmrf(sdir);
	assert_int_equal(mkdir(sdir, 0700), 0);
	char p[800];
	snprintf(p, sizeof(p), "%s/A", sdir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, SECRET_A, strlen(SECRET_A)),
			 (ssize_t)strlen(SECRET_A));
	close(fd);
	snprintf(opt, on, "--secrets-dir=%s", sdir);
	w->extra = opt;
}

/*
 * A FIFO (and, as root, a character device) in --secrets-dir, named by
 * an unauthenticated HELLO: refused ("no usable secret"), and the one
 * worker thread goes on serving application A's twenty connections.
 */
static void fifo_in_secrets_dir_does_not_block(void **state)
{
	(void)state;
	struct th_worker w = {0};
	char sdir[700], opt[720], p[800], msg[600];
	secrets_dir(&w, sdir, sizeof(sdir), opt, sizeof(opt), "sec-fifo");
	snprintf(p, sizeof(p), "%s/F", sdir);
	assert_int_equal(mkfifo(p, 0600), 0);
	snprintf(p, sizeof(p), "%s/D", sdir);
	bool dev = mknod(p, S_IFCHR | 0600, makedev(1, 3)) == 0;
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	th_ok(ush_auth_secret("A", SECRET_A, strlen(SECRET_A)));
	const char *bad[] = {"F", "D"};
	for (int i = 0; i < 1 + dev; i++) {
		int fd = th_raw_connect(w.port);
		struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER,
					0, 0, 0, 0, 0, "", 0, {0}};
		snprintf(h.app, sizeof(h.app), "%s", bad[i]);
		assert_int_equal(th_try_hello(fd, h, NULL, msg, sizeof(msg)),
				 -1);
		close(fd);
		print_message("HELLO for %s: '%s'\n", bad[i], msg);
		assert_non_null(strstr(msg, "no usable secret for application"));
	}
	for (int i = 0; i < 20; i++)
		th_ok(ush_app_heartbeat(w.addr, "A", 10000));
	th_ok(ush_auth_secret("A", NULL, 0));
	assert_true(th_worker_alive(&w));
	th_worker_stop(&w);
	th_rmrf(sdir);
	th_rmrf(w.dir);
}

/*
 * A rewrite in place that happens while the secret is read: this
 * program's fstat() passes through to the C library's, and, armed for
 * one file, takes the next step of a writer after each call on it (a
 * real write into the real file, at the moment a reader cannot choose):
 * step 1 writes the first part of the new secret, step 2 the rest.
 */
static struct {
	dev_t dev;
	ino_t ino;
	const char *path;
	const char *next; /* the new secret */
	size_t cut;       /* step 1 writes next[0..cut) */
	bool trunc;       /* step 1 truncates first */
	bool endless;     /* or: every call appends a byte */
	int step;
} rw;

int fstat(int fd, struct stat *st)
{
	static int (*real)(int, struct stat *);
	if (!real)
		real = (int (*)(int, struct stat *))dlsym(RTLD_NEXT, "fstat");
	int ret = real(fd, st);
	if (ret || !rw.path || (rw.step >= 2 && !rw.endless) ||
	    st->st_dev != rw.dev || st->st_ino != rw.ino)
		return ret;
	if (rw.endless) {
		int w = open(rw.path, O_WRONLY | O_APPEND);
		if (w < 0 || write(w, "x", 1) != 1)
			abort();
		close(w);
		rw.step++;
		return ret;
	}
	int w = open(rw.path, O_WRONLY | (rw.trunc && !rw.step ? O_TRUNC : 0));
	size_t len = strlen(rw.next), from = rw.step ? rw.cut : 0,
	       to = rw.step ? len : rw.cut;
	if (w < 0 || pwrite(w, rw.next + from, to - from, (off_t)from) !=
			     (ssize_t)(to - from))
		abort();
	close(w);
	rw.step++;
	return ret;
}

/* Arms the writer for path (holding old), to write next in place. */
static void arm(const char *path, const char *old, const char *next,
		size_t cut, bool trunc)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs(old, f) >= 0);
	assert_int_equal(fclose(f), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	rw.dev = st.st_dev;
	rw.ino = st.st_ino;
	rw.next = next;
	rw.cut = cut;
	rw.trunc = trunc;
	rw.endless = false;
	rw.step = 0;
	rw.path = path;
}

/*
 * The secret file is rewritten in place while it is read: truncated and
 * written in two parts (the first part alone is a valid secret), or
 * overwritten in two parts at the same size (old and new bytes mixed).
 * The reader reads it again and takes the whole new secret; never the
 * part, never the mix. One that changes at every look is refused.
 */
static void secret_rewritten_while_read(void **state)
{
	(void)state;
	char path[700];
	snprintf(path, sizeof(path), "%s/S", th_scratch("sec-inplace"));
	static const struct {
		const char *old, *next;
		size_t cut;
		bool trunc;
	} cases[] = {
		{"the-old-secret-0123456789abcdef",
		 "a-new-secret-0123456789-and-its-second-half", 24, true},
		{"OLD-SECRET-OLD-SECRET-OLD-SECRET",
		 "new-secret-new-secret-new-secret", 16, false},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		uint8_t key[USHI_SECRET_MAX];
		bool loose;
		arm(path, cases[i].old, cases[i].next, cases[i].cut,
		    cases[i].trunc);
		int n = auth_read_secret(AT_FDCWD, path, false, key, &loose);
		int steps = rw.step;
		rw.path = NULL;
		print_message("case %zu: read %d bytes '%.*s'\n", i, n,
			      n > 0 ? n : 0, (const char *)key);
		if (n != (int)strlen(cases[i].next) ||
		    memcmp(key, cases[i].next, (size_t)n))
			fail_msg("took '%.*s', not the new secret '%s'",
				 n > 0 ? n : 0, (const char *)key,
				 cases[i].next);
		assert_int_equal(steps, 2); /* the writer did finish */
	}
	/* A file that changes at every look is refused after a few. */
	uint8_t key[USHI_SECRET_MAX];
	bool loose;
	arm(path, cases[0].old, cases[0].next, 0, false);
	rw.endless = true;
	int n = auth_read_secret(AT_FDCWD, path, false, key, &loose);
	rw.path = NULL;
	print_message("always changing: %d %s\n", n, ush_last_error());
	assert_int_equal(n, -EAGAIN);
	assert_non_null(strstr(ush_last_error(), "changed while it was read"));
}

/* A rename over the secret file (the documented rotation) takes effect
 * at the next connection; the old secret is refused from then on. */
static void rotation_by_rename(void **state)
{
	(void)state;
	struct th_worker w = {0};
	char sdir[700], opt[720], p[800], tmp[800];
	secrets_dir(&w, sdir, sizeof(sdir), opt, sizeof(opt), "sec-rename");
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	th_ok(ush_auth_secret("A", SECRET_A, strlen(SECRET_A)));
	th_ok(ush_app_heartbeat(w.addr, "A", 10000));
	static const char next[] = "the-rotated-secret-of-A-0123456789\n";
	snprintf(tmp, sizeof(tmp), "%s/.A.new", sdir);
	snprintf(p, sizeof(p), "%s/A", sdir);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, next, strlen(next)), (ssize_t)strlen(next));
	close(fd);
	assert_int_equal(rename(tmp, p), 0);
	assert_int_equal(ush_app_heartbeat(w.addr, "A", 10000), -EACCES);
	th_ok(ush_auth_secret("A", next, strlen(next) - 1));
	th_ok(ush_app_heartbeat(w.addr, "A", 10000));
	th_ok(ush_auth_secret("A", NULL, 0));
	th_worker_stop(&w);
	th_rmrf(sdir);
	th_rmrf(w.dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fifo_in_secrets_dir_does_not_block),
		cmocka_unit_test_teardown(secret_rewritten_while_read,
					  th_teardown),
		cmocka_unit_test(rotation_by_rename),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
