/*
 * The CLI's --encrypt-key-file (docs/cli.md): a job written sealed to
 * its embedded worker reads back, verified, with the key; without it the
 * read fails naming the key id; a bad key file fails the job naming the
 * file and the line.
 */
#include "cli_run.h"

#include <fcntl.h>
#include <limits.h>

static void write_key(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void sealed_job_and_read_back(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("cliseal");
	char key[PATH_MAX], karg[PATH_MAX + 32], darg[PATH_MAX + 16];
	snprintf(key, sizeof(key), "%s/app.key", dir);
	write_key(key, "# the application's data key\n9 "
		       "000102030405060708090a0b0c0d0e0f"
		       "101112131415161718191a1b1c1d1e1f\n");
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
	write_key(key, "9 0001\n");
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
