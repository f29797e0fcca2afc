/*
 * A claim or a drop waits for the commit log's sync without the worker's
 * table lock. The home directory is an ext4 on a loop device, frozen
 * (FIFREEZE) while a DROP is logged: the committer cannot write, so the
 * drop waits; heartbeats on the worker's other threads are answered
 * meanwhile. Before, the drop held the table lock across the wait, and
 * every thread that needed it (a heartbeat, a FETCH, a commit, a HELLO)
 * waited for the file system: none of 8 heartbeats was answered.
 */
#include "net_helpers.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define CONNS 8

static char mounted[512];
static pid_t guard = -1; /* thaws the file system should the test die */

static void thaw(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		ioctl(fd, FITHAW, 0); /* EINVAL when not frozen */
		close(fd);
	}
}

static int teardown(void **state)
{
	(void)state;
	if (mounted[0]) {
		thaw(mounted);
		umount2(mounted, MNT_DETACH);
	}
	mounted[0] = 0;
	if (guard > 0) {
		kill(guard, SIGKILL);
		waitpid(guard, NULL, 0);
	}
	guard = -1;
	return 0;
}

/* Freezes dir's file system, with a child that thaws it in 60 s should
 * this process die first (a frozen file system holds its writers for
 * good). Skips where freezing is refused. */
static void freeze(const char *dir)
{
	guard = fork();
	assert_true(guard >= 0);
	if (!guard) {
		sleep(60);
		thaw(dir);
		_exit(0);
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	int ret = ioctl(fd, FIFREEZE, 0);
	int err = errno;
	close(fd);
	if (ret) {
		print_message("skipped: FIFREEZE %s: %s\n", dir, strerror(err));
		skip();
	}
}

/* The next frame on fd is an ACK of kind. */
static void expect_ack(int fd, uint32_t kind)
{
	uint8_t b[USHI_PROTO_SMALL];
	struct ushi_frame f;
	struct proto_ack a;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_ACK);
	proto_get_ack(b + USH_FRAME_HDR_SIZE, &a);
	assert_int_equal(a.kind, kind);
	assert_int_equal(a.status, 0);
}

static void heartbeats_answered_while_a_drop_waits(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("busy"));
	th_mount_ext4(w.dir, NULL);
	snprintf(mounted, sizeof(mounted), "%s", w.dir);
	th_worker_spawn(&w, "127.0.0.1", 0, 4);
	struct ush_status st[1] = {{0}};
	struct th_job job = {.workers = w.addr, .shuffle = 50,
			     .partitions = 4, .maps = 1, .records = 100,
			     .statuses = st};
	th_ok(th_push_map(&job, 0, 0, NULL));
	/* An admin connection to drop with, and CONNS to send heartbeats
	 * on (spread over the worker's 4 threads by SO_REUSEPORT). */
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_ADMIN, 0, 0, 0,
				0, 0, "default", 0, {0}};
	uint8_t b[USHI_PROTO_SMALL];
	struct ushi_frame f;
	int fds[CONNS + 1];
	for (int i = 0; i <= CONNS; i++) {
		fds[i] = th_raw_connect(w.port);
		th_hello(fds[i], h);
		assert_int_equal(th_recv_frame(fds[i], b, sizeof(b), &f),
				 USHI_FRAME_HELLO);
	}
	freeze(w.dir);
	th_send_ctrl(fds[CONNS], b, proto_put_drop(b, job.shuffle));
	for (int i = 0; i < CONNS; i++)
		th_send_ctrl(fds[i], b, proto_put_heartbeat(b));
	/* Some heartbeat is answered while the file system is frozen
	 * (the drop cannot be logged until it thaws). */
	struct pollfd p[CONNS];
	for (int i = 0; i < CONNS; i++)
		p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
	int n = poll(p, CONNS, 20000);
	assert_true(n > 0);
	int answered = -1;
	for (int i = 0; i < CONNS && answered < 0; i++)
		if (p[i].revents & POLLIN)
			answered = i;
	expect_ack(fds[answered], USHI_ACK_HEARTBEAT);
	thaw(w.dir);
	expect_ack(fds[CONNS], USHI_ACK_DROP);
	for (int i = 0; i < CONNS; i++)
		if (i != answered)
			expect_ack(fds[i], USHI_ACK_HEARTBEAT);
	for (int i = 0; i <= CONNS; i++)
		close(fds[i]);
	th_worker_stop(&w);
	char name[600];
	snprintf(name, sizeof(name), "%s/s%u", w.dir, job.shuffle);
	assert_int_equal(access(name, F_OK), -1); /* dropped */
	teardown(NULL);
	th_rmrf(w.dir);
	th_job_free(&job);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(heartbeats_answered_while_a_drop_waits,
					  teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
