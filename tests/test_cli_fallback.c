/*
 * Where io_uring is refused (here: the seccomp filter of no_uring.h, as
 * Docker's default profile; installed in this process at start, so every
 * ushuffle it runs inherits it), the library falls back to plain system
 * calls by itself: rings are made, and shuffle jobs to disk and through
 * an embedded worker succeed with every record verified, with one log
 * line, once per process, saying why.
 */
#include "cli_run.h"
#include "no_uring.h"

#define MARK "io_uring is unavailable"

static unsigned nlogs;
static char last_log[512];

static void count_log(void *arg, const char *msg)
{
	(void)arg;
	if (strstr(msg, MARK))
		nlogs++;
	snprintf(last_log, sizeof(last_log), "%s", msg);
}

static unsigned count(const char *s, const char *needle)
{
	unsigned n = 0;
	for (const char *p = s; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* Two rings, one asking for registered buffers: both made, on plain
 * system calls, and the reason logged once. */
static void rings_fall_back(void **state)
{
	(void)state;
	assert_int_equal(th_uring_refused(), -EPERM);
	ush_set_log(count_log, NULL);
	ush_ring *r[2];
	for (int i = 0; i < 2; i++) {
		struct ush_ring_opts o;
		ush_ring_opts_init(&o);
		o.pool_bytes = 1u << 20;
		o.fixedbufs = i;
		th_ok(ush_ring_create(&r[i], &o));
		struct ush_ring_info info;
		ush_ring_info(r[i], &info);
		assert_int_equal(info.uring_refused, -EPERM);
		assert_int_equal(info.fixedbufs, 0);
		assert_int_equal(info.setup_flags, 0);
	}
	ush_ring_free(r[0]);
	ush_ring_free(r[1]);
	ush_set_log(NULL, NULL);
	if (nlogs != 1)
		fail_msg("%u fallback log lines, expected 1; last: %s", nlogs,
			 last_log);
	cli_has(last_log, "Operation not permitted");
	cli_has(last_log, "seccomp");
}

/* A two-thread shuffle job with target (disk: in dir; net: an embedded
 * worker): exit 0, every record written is read back and verified, and
 * stderr holds the fallback's line once. */
static void job(const char *target, const char *dir)
{
	char t[32];
	snprintf(t, sizeof(t), "--target=%s", target);
	struct cli_out r = cli_run(dir, t, "--dir=.", "--numjobs=2", "--size=8m",
				   "--output-format=json");
	cli_expect(&r, 0);
	if (count(r.err, MARK) != 1)
		fail_msg("expected one \"%s\" line in stderr:\n%s", MARK, r.err);
	json_object *j = cli_json(&r);
	json_object *jobs = jget(j, "jobs");
	size_t n = json_object_array_length(jobs);
	assert_true(n > 0);
	uint64_t w = 0, rd = 0, v = 0;
	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_array_get_idx(jobs, i);
		assert_int_equal(jint(o, "error"), 0);
		assert_int_equal(jint(o, "verify/errors"), 0);
		assert_int_equal(jint(o, "ring/fixedbufs"), 0);
		assert_int_equal(jint(o, "ring/setup_flags"), 0);
		assert_int_equal(json_object_get_int(jget(o, "ring/uring_refused")),
				 -EPERM);
		w += jint(o, "write/records");
		rd += jint(o, "read/records");
		v += jint(o, "verify/records");
	}
	/* Each thread reads other threads' partitions too: compare sums. */
	assert_true(w > 0);
	assert_int_equal(rd, w);
	assert_int_equal(v, w);
	json_object_put(j);
	cli_free(&r);
}

static void disk_job(void **state)
{
	(void)state;
	job("disk", th_scratch("fallback-disk"));
}

static void net_job(void **state)
{
	(void)state;
	job("net", th_scratch("fallback-net"));
}

int main(void)
{
	int ret = no_uring_install();
	if (ret) {
		fprintf(stderr, "installing the seccomp filter: %s\n",
			strerror(-ret));
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rings_fall_back),
		cmocka_unit_test_teardown(disk_job, th_teardown),
		cmocka_unit_test_teardown(net_job, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
