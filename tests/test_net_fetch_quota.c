/*
 * What a logged-in reader's FETCHes make a worker hold, per connection
 * and per application (--max-app-fetch-bytes): the plan (the entries
 * asked for, the frames to stream) is refused beyond the quota with an
 * ERROR -EDQUOT, and is given back when the FETCH ends; a stream whose
 * reader does not read stops reading ahead at WK_FETCH_RUNS flush
 * buffers, and, past the quota over all the application's streams, at
 * one read.
 */
#include "net_helpers.h"

#include <sys/socket.h>

/* A reader connection of application "default" (HELLO answered). */
static int reader(int port)
{
	int fd = th_raw_connect(port);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER, 0, 0, 0,
				0, 0, "default", 0, {0}};
	th_hello(fd, h);
	uint8_t b[USHI_PROTO_SMALL];
	struct ushi_frame f;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_HELLO);
	return fd;
}

/* Sends a range FETCH of shuffle s over [first, first + n), one entry
 * (map 0, attempt 0) per partition. */
static void fetch_range(int fd, uint32_t s, uint32_t first, uint32_t n)
{
	struct proto_want *w = calloc(n, sizeof(*w));
	uint8_t *b = malloc(proto_fetch_size(n) + USHI_MAC_TAG);
	assert_true(w && b);
	for (uint32_t i = 0; i < n; i++)
		w[i] = (struct proto_want){first + i, 0, 0, 0};
	th_send_ctrl(fd, b, proto_put_fetch(b, s, first, n, 0, w, n));
	free(w);
	free(b);
}

/* The answer to a FETCH of partitions with no frame: 0 for MANIFEST
 * then FETCH_END, or the ERROR's code (its message in msg). */
static int answer(int fd, char *msg, size_t n)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int type = th_recv_frame(fd, b, sizeof(b), &f);
	if (type == USHI_FRAME_ERROR)
		return proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len,
				       msg, n);
	assert_int_equal(type, USHI_FRAME_MANIFEST);
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f),
			 USHI_FRAME_FETCH_END);
	return 0;
}

#define AT 10000u /* entries of 24 bytes: 240,000 bytes planned */

/* At the bound: a FETCH whose plan is the quota exactly is served, one
 * entry more is refused, and each served FETCH gives its plan back. */
static void plan_at_the_bound(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("fq-plan"));
	w.extra = "--max-app-fetch-bytes=240000";
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 2,
			   .partitions = 2 * AT, .maps = 1, .records = 80,
			   .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	char msg[USHI_PROTO_ERRMSG_MAX];
	/* Partitions from 1000 hold no frame: the plan is the entries. */
	for (int round = 0; round < 3; round++) {
		int fd = reader(w.port);
		fetch_range(fd, 2, 1000, AT);
		assert_int_equal(answer(fd, msg, sizeof(msg)), 0);
		fetch_range(fd, 2, 1000, AT); /* again on the same one */
		assert_int_equal(answer(fd, msg, sizeof(msg)), 0);
		close(fd);
		fd = reader(w.port);
		fetch_range(fd, 2, 1000, AT + 1);
		int code = answer(fd, msg, sizeof(msg));
		print_message("%u entries: %d %s\n", AT + 1, code, msg);
		assert_int_equal(code, -EDQUOT);
		assert_non_null(strstr(msg, "--max-app-fetch-bytes"));
		assert_non_null(strstr(msg, "application 'default'"));
		close(fd);
	}
	th_verify(&j); /* the application reads on */
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_job_free(&j);
}

#define STALLED 8
#define QUOTA_MIB 8

/* The worker's VmRSS once it stops moving (the streams read ahead as
 * far as they may): 20 readings 50 ms apart alike, within 60 s. */
static long settled_rss(pid_t pid)
{
	long last = -1;
	for (int same = 0, i = 0; same < 20 && i < 1200; i++) {
		long now = th_vm_kb(pid, "VmRSS");
		same = now == last ? same + 1 : 0;
		last = now;
		usleep(50000);
	}
	return last;
}

/* Eight readers of one application FETCH 32 MiB each and never read:
 * the worker's memory grows by at most the application's quota and a
 * read per stream, not by what the streams hold. */
static void stalled_streams_are_bounded(void **state)
{
	(void)state;
	struct th_worker w = {0};
	char quota[64];
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("fq-stall"));
	snprintf(quota, sizeof(quota), "--max-app-fetch-bytes=%um", QUOTA_MIB);
	w.extra = quota;
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = w.addr, .shuffle = 3, .partitions = 8,
			   .maps = 1, .records = 96000, .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	long rss0 = settled_rss(w.pid);
	int fd[STALLED];
	for (int i = 0; i < STALLED; i++) {
		fd[i] = reader(w.port);
		int small = 4096;
		setsockopt(fd[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
		fetch_range(fd[i], 3, 0, 8);
	}
	long rss = settled_rss(w.pid);
	/* The quota, a read of at most a flush buffer (1 MiB) per stream,
	 * and the sockets' receive buffers (the worker's own). */
	long bound = (QUOTA_MIB + STALLED + 8) * 1024L;
	print_message("%d stalled FETCHes of 32 MiB, --max-app-fetch-bytes="
		      "%um: worker VmRSS %ld KiB before, %ld KiB after: +%ld "
		      "KiB (bound +%ld KiB)\n", STALLED, QUOTA_MIB, rss0, rss,
		      rss - rss0, bound);
	if (rss - rss0 > bound)
		fail_msg("the worker's VmRSS grew by %ld KiB for %d stalled "
			 "FETCH streams", rss - rss0, STALLED);
	for (int i = 0; i < STALLED; i++)
		close(fd[i]);
	th_verify(&j); /* the quota given back: the streams run on */
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_job_free(&j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(plan_at_the_bound),
		cmocka_unit_test(stalled_streams_are_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
