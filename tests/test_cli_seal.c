/*
 * The CLI's --encrypt-key-file (docs/cli.md): a job written sealed to
 * its embedded worker reads back, verified, with the key; without it the
 * read fails naming the key id; a bad key file fails the job naming the
 * file and the line. Records filled with --buffer_pattern show in the
 * worker's files when written plain, and nowhere when sealed.
 */
#define _GNU_SOURCE
#include "cli_run.h"

#include <limits.h>

/* --buffer_pattern=0xC0FFEE42, three times in a row. */
static const uint8_t PATTERN[] = {0xc0, 0xff, 0xee, 0x42, 0xc0, 0xff,
				  0xee, 0x42, 0xc0, 0xff, 0xee, 0x42};

static bool holds_pattern(const uint8_t *p, size_t n)
{
	return memmem(p, n, PATTERN, sizeof(PATTERN)) != NULL;
}

/* Writes a job of pattern-filled records to the embedded worker under
 * dir (sealed with karg, unless NULL); how many of its files show them. */
static int pattern_job(const char *dir, const char *karg)
{
	char darg[PATH_MAX + 16], wdir[PATH_MAX + 16];
	snprintf(darg, sizeof(darg), "--dir=%s", dir);
	snprintf(wdir, sizeof(wdir), "%s/ushuffled", dir);
	th_rmrf(wdir);
	struct cli_out r = cli_run(NULL, "--name=pattern", darg, "--target=net",
				   "--rw=write", "--size=2m", "--codec=none",
				   "--buffer_pattern=0xC0FFEE42",
				   "--buffer_compress_percentage=100",
				   "--eta=never", karg ? karg : "--verify=crc32c");
	cli_expect(&r, 0);
	cli_free(&r);
	return th_files_matching(wdir, holds_pattern);
}

static void sealed_job_and_read_back(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("cliseal");
	char key[PATH_MAX], karg[PATH_MAX + 32], darg[PATH_MAX + 16];
	snprintf(key, sizeof(key), "%s/app.key", dir);
	const char *text = "# the application's data key\n9 "
			   "000102030405060708090a0b0c0d0e0f"
			   "101112131415161718191a1b1c1d1e1f\n";
	th_write_file(key, text, strlen(text));
	snprintf(karg, sizeof(karg), "--encrypt-key-file=%s", key);
	snprintf(darg, sizeof(darg), "--dir=%s", dir);
	struct cli_out r = cli_run(NULL, "--name=seal", darg, karg,
				   "--target=net", "--rw=write", "--size=4m",
				   "--eta=never");
	cli_expect(&r, 0);
	cli_free(&r);
	r = cli_run(NULL, "--name=seal", darg, karg, "--target=net",
		    "--rw=read", "--eta=never");
	cli_expect(&r, 0);
	cli_has(r.out, "0 errors (ok)");
	cli_free(&r);
	r = cli_run(NULL, "--name=seal", darg, "--target=net", "--rw=read",
		    "--eta=never");
	assert_int_not_equal(r.status, 0);
	cli_has(r.err, "sealed with key id 9");
	cli_free(&r);
	assert_true(pattern_job(dir, NULL) > 0);
	assert_int_equal(pattern_job(dir, karg), 0);
	text = "9 0001\n";
	th_write_file(key, text, strlen(text));
	r = cli_run(NULL, "--name=seal", darg, karg, "--target=disk",
		    "--rw=write", "--size=1m", "--eta=never");
	assert_int_not_equal(r.status, 0);
	cli_has(r.err, "app.key line 1: a key is 64 hex digits");
	cli_free(&r);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sealed_job_and_read_back),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
