/*
 * A read job whose secret the workers refuse stops at the first
 * authentication error: it tried every partition (10,000 refused
 * handshakes, 16 s and 10 CPU s at 10,000 partitions) before.
 */
#include "cli_run.h"
#include "net_helpers.h"

#include <sys/stat.h>

#define PARTS 512

static void read_stops_at_refused_secret(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("cliauth");
	struct th_worker wk = {0};
	char dirarg[600], warg[96], secret[600], sarg[640];
	snprintf(wk.dir, sizeof(wk.dir), "%.400s/worker", dir);
	assert_int_equal(mkdir(wk.dir, 0755), 0);
	th_worker_spawn(&wk, "127.0.0.1", 0, 1);
	snprintf(dirarg, sizeof(dirarg), "--dir=%.500s", dir);
	snprintf(warg, sizeof(warg), "--workers=%s", wk.addr);
	snprintf(secret, sizeof(secret), "%.500s/wrong.secret", dir);
	th_write_file(secret, "not-the-workers-secret-0123456789", 33);
	chmod(secret, 0600);
	snprintf(sarg, sizeof(sarg), "--secret-file=%s", secret);
	char parts[32];
	snprintf(parts, sizeof(parts), "--partitions=%d", PARTS);
	struct cli_out r = cli_run(NULL, "--name=auth", "--target=net", warg,
				   dirarg, "--size=1m", "--keep", parts,
				   "--eta=never");
	cli_expect(&r, 0);
	cli_free(&r);
	r = cli_run(NULL, "--name=auth", "--target=net", dirarg, "--rw=read",
		    sarg, "--numjobs=2", "--output-format=json",
		    "--eta=never");
	cli_expect(&r, 1);
	json_object *j = cli_json(&r);
	json_object *jobs = jget(j, "jobs");
	uint64_t errors = 0;
	for (size_t i = 0; i < json_object_array_length(jobs); i++)
		errors += jint(json_object_array_get_idx(jobs, i),
			       "verify/errors");
	print_message("%llu partitions refused of %d (2 threads)\n",
		      (unsigned long long)errors, PARTS);
	assert_true(errors >= 1 && errors <= 2);
	cli_has(r.err, "stopped at the first authentication error");
	json_object_put(j);
	cli_free(&r);
	th_worker_stop(&wk);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(read_stops_at_refused_secret),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
