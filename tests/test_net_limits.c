/*
 * The worker's limits against a real ushuffled: idle connections time
 * out, connections beyond --max-conns are refused with an ERROR, a frame
 * header cannot make the worker allocate what never arrives, log volume
 * stays bounded when accept fails, and SIGTERM, SIGHUP and --version
 * behave as a daemon's should. No test asserts a duration: waits have
 * generous deadlines and only events are checked.
 */
#include "net_helpers.h"
#include "net/proto.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* A writer's HELLO for shuffle s, map 0, attempt a, authenticated. */
static void writer_hello(int fd, uint32_t s, uint32_t a)
{
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				0, a, "default", 0, {0}};
	th_hello(fd, h);
}

/* The same without authentication: for connections the worker refuses
 * before any HELLO (at its connection limit). */
static void writer_hello_raw(int fd, uint32_t s, uint32_t a)
{
	uint8_t b[USHI_PROTO_SMALL];
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				0, a, "default", 0, {0}};
	th_send_all(fd, b, proto_put_hello(b, &h));
}

/* recv() of n bytes: returns n, fewer at EOF or a reset, or -1 when the
 * deadline passed. A signal is no end: io_uring task work of a ring this
 * thread freed interrupts a recv that has a timeout. */
static ssize_t recv_n(int fd, uint8_t *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(fd, b + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno != ECONNRESET)
			return -1;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Reads one whole frame (payload up to cap - 48 bytes) into b. Returns
 * its type, 0 at EOF or a reset, -1 when the deadline passed. */
static int read_frame(int fd, uint8_t *b, size_t cap, struct ushi_frame *f)
{
	ssize_t r = recv_n(fd, b, USH_FRAME_HDR_SIZE);
	if (r != USH_FRAME_HDR_SIZE)
		return r < 0 ? -1 : 0;
	const char *why;
	if (proto_header(b, f, 1u << 20, false, &why))
		fail_msg("worker sent a bad header: %s", why);
	assert_true(proto_size(f) <= cap);
	r = recv_n(fd, b + USH_FRAME_HDR_SIZE, f->payload_len);
	if (r != (ssize_t)f->payload_len)
		return r < 0 ? -1 : 0;
	th_open(fd, b, f);
	return f->type;
}

/* Reads until the HELLO reply; fails on anything else. */
static void expect_hello(int fd)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int type = read_frame(fd, b, sizeof(b), &f);
	if (type == USHI_FRAME_ERROR) {
		char msg[600];
		proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg,
				sizeof(msg));
		fail_msg("expected a HELLO reply, got ERROR '%s'", msg);
	}
	assert_int_equal(type, USHI_FRAME_HELLO);
}

/* Reads frames until an ERROR, which must carry code and a message with
 * want; then the worker must close the connection. Fails on a bare close
 * or reset, or when nothing comes before the deadline. */
static void expect_error(int fd, int code, const char *want)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int type;
	while ((type = read_frame(fd, b, sizeof(b), &f)) > 0 &&
	       type != USHI_FRAME_ERROR)
		;
	if (type < 0)
		fail_msg("the worker neither answered nor closed within the "
			 "deadline (expected an ERROR with '%s')", want);
	if (type == 0)
		fail_msg("the connection closed without an ERROR frame "
			 "(expected '%s')", want);
	char msg[600];
	int got = proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg,
				  sizeof(msg));
	if (got != code || !strstr(msg, want))
		fail_msg("expected ERROR %s '...%s...', got %s '%s'",
			 ush_err_name(code), want, ush_err_name(got), msg);
	ssize_t r = recv_n(fd, b, 1);
	if (r > 0)
		fail_msg("bytes after the ERROR frame");
	if (r < 0)
		fail_msg("no close after the ERROR frame: %s", strerror(errno));
	close(fd);
}

/* A worker of tag logging to <dir>.log, which log (n bytes) names; the
 * caller sets what else it needs, then spawns it. */
static void logged(struct th_worker *w, char *log, size_t n, const char *tag)
{
	memset(w, 0, sizeof(*w));
	snprintf(w->dir, sizeof(w->dir), "%s", th_tmpdir(tag));
	snprintf(log, n, "%s.log", w->dir);
	unlink(log);
	w->errlog = log;
}

static void done(struct th_worker *w)
{
	th_worker_stop(w);
	th_rmrf(w->dir);
}

/* Whether file path holds text (a missing file holds nothing). */
static int file_has(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char line[1024];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

/* Waits (30 s at most, then fails) until path holds text. */
static void wait_for_line(const char *path, const char *text)
{
	for (int i = 0; i < 1500; i++) {
		if (file_has(path, text))
			return;
		usleep(20000);
	}
	fail_msg("%s never got a line with '%s'", path, text);
}

static unsigned long count_lines(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[1024];
	unsigned long n = 0;
	while (fgets(line, sizeof(line), f))
		n += !text || strstr(line, text);
	fclose(f);
	return n;
}

/* One connection's round trip through the worker: when its HELLO reply
 * comes, a thread has passed through its loop since it was sent. */
static void round_trip(struct th_worker *w, uint32_t attempt)
{
	int fd = th_raw_connect(w->port);
	writer_hello(fd, 9, attempt);
	expect_hello(fd);
	close(fd);
}

/* A small job pushed through the library and read back: an honest
 * client, served. */
static void honest_client(struct th_worker *w, uint32_t shuffle)
{
	struct ush_status st[1] = {{0}};
	struct th_job j = {.workers = w->addr, .shuffle = shuffle,
			   .partitions = 3, .maps = 1, .records = 3000,
			   .statuses = st};
	th_ok(th_push_map(&j, 0, 0, NULL));
	th_verify(&j);
	th_job_free(&j);
}

/* A connection past HELLO that then says nothing (or stops in the middle
 * of a frame) is told so and closed; so is a reader. */
static void idle_connections_time_out(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "netlim-idle", 1, "--idle-timeout=500", NULL);
	int fd = th_raw_connect(w.port);
	writer_hello(fd, 1, 0);
	expect_hello(fd);
	expect_error(fd, -ETIMEDOUT, "idle for 500 ms");
	/* Half a frame, then silence. */
	fd = th_raw_connect(w.port);
	writer_hello(fd, 1, 1);
	expect_hello(fd);
	uint8_t b[USH_FRAME_HDR_SIZE + 100] = {0};
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = 1,
			      .attempt = 1, .raw_len = 100,
			      .payload_len = 100, .nrec = 1};
	frame_encode(b, &f);
	th_send_all(fd, b, USH_FRAME_HDR_SIZE + 10);
	expect_error(fd, -ETIMEDOUT, "idle for 500 ms");
	fd = th_raw_connect(w.port);
	struct proto_hello rh = {USHI_PROTO_VERSION, USHI_ROLE_READER, 0, 0,
				 0, 0, 0, "default", 0, {0}};
	th_hello(fd, rh);
	expect_hello(fd);
	expect_error(fd, -ETIMEDOUT, "idle for 500 ms");
	assert_true(th_worker_alive(&w));
	done(&w);
}

/* A reader's HELLO, answered: the connection is held by the worker. */
static int held_reader(int port)
{
	int fd = th_raw_connect(port);
	struct proto_hello rh = {USHI_PROTO_VERSION, USHI_ROLE_READER, 0, 0,
				 0, 0, 0, "default", 0, {0}};
	th_hello(fd, rh);
	expect_hello(fd);
	return fd;
}

/*
 * --max-conns held open: the next connection gets ERROR -EBUSY naming the
 * limit and is closed; once some are closed, an honest writer and reader
 * through the library are served.
 */
#define MAXC 16
static void connection_limit_refuses_with_an_error(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "netlim-max", 2, "--max-conns=16", NULL);
	int fd[MAXC];
	for (int i = 0; i < MAXC; i++)
		fd[i] = held_reader(w.port);
	for (int k = 0; k < 3; k++) {
		int x = th_raw_connect(w.port);
		writer_hello_raw(x, 2, (uint32_t)k);
		expect_error(x, -EBUSY, "worker at its connection limit (16)");
	}
	assert_true(th_worker_alive(&w));
	for (int i = 0; i < MAXC / 2; i++)
		close(fd[i]);
	/* The worker frees a slot when it sees a close: until a probe is
	 * served, it may still refuse one (deadline: expect_error's). */
	for (int served = 0; !served;) {
		int x = th_raw_connect(w.port);
		struct proto_hello rh = {USHI_PROTO_VERSION, USHI_ROLE_READER,
					 0, 0, 0, 0, 0, "default", 0, {0}};
		uint8_t b[USHI_PROTO_ERROR_SIZE];
		struct ushi_frame f;
		int type = th_try_hello(x, rh, NULL, NULL, 0) ?
				   USHI_FRAME_ERROR :
				   read_frame(x, b, sizeof(b), &f);
		assert_true(type == USHI_FRAME_HELLO ||
			    type == USHI_FRAME_ERROR);
		served = type == USHI_FRAME_HELLO;
		close(x);
	}
	honest_client(&w, 3);
	for (int i = MAXC / 2; i < MAXC; i++)
		close(fd[i]);
	done(&w);
}

/*
 * N connections each announce a DATA frame of the largest size the
 * worker takes (64 MiB by default) and send a few bytes of it, then hold.
 * The worker may reserve a window for each (a frame of that size comes
 * without waiting), and beyond that only what arrived: its memory, both
 * resident and reserved (VmData: the commit charge, which an announced
 * frame used to take whole), stays below start + N x window + slack.
 */
#define HOLDERS 12
static void header_cannot_reserve_memory(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "netlim-rss", 1, NULL, NULL);
	round_trip(&w, 1000);
	long rss0 = th_vm_kb(w.pid, "VmRSS"), data0 = th_vm_kb(w.pid, "VmData");
	int fd[HOLDERS];
	uint8_t b[USH_FRAME_HDR_SIZE + 4096] = {0};
	for (int i = 0; i < HOLDERS; i++) {
		fd[i] = th_raw_connect(w.port);
		writer_hello(fd[i], 8, (uint32_t)i);
		expect_hello(fd[i]);
		struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = 8,
				      .attempt = (uint32_t)i, .nrec = 1};
		frame_encode(b, &f);
		/* The lengths go in after the CRC: a frame that never ends
		 * needs none. */
		uint32_t len = (64u << 20) - USH_FRAME_HDR_SIZE;
		put_le32(b + 32, len);
		put_le32(b + 36, len);
		memset(b + USH_FRAME_HDR_SIZE, 'x', 4096);
		th_send_all(fd[i], b, sizeof(b));
	}
	round_trip(&w, 1001);
	long rss = th_vm_kb(w.pid, "VmRSS"), data = th_vm_kb(w.pid, "VmData");
	/* The window is 4 MiB by default; slack for the allocator. */
	long slack = 16384, window = 4096;
	print_message("worker memory with %d connections announcing 64 MiB "
		      "frames: VmRSS %ld -> %ld KiB, VmData %ld -> %ld KiB; "
		      "bound: start + %ld KiB\n", HOLDERS, rss0, rss, data0,
		      data, HOLDERS * window + slack);
	if (rss > rss0 + HOLDERS * window + slack)
		fail_msg("VmRSS grew from %ld to %ld KiB", rss0, rss);
	if (data > data0 + HOLDERS * window + slack)
		fail_msg("VmData grew from %ld to %ld KiB", data0, data);
	for (int i = 0; i < HOLDERS; i++)
		close(fd[i]);
	assert_true(th_worker_alive(&w));
	done(&w);
}

/*
 * Frames above the window are legitimate: a writer sends a record larger
 * than its push buffer as one frame once nothing else is unacknowledged.
 * The worker stages such a frame as it arrives (not all at its header)
 * and stores it whole.
 */
#define BIG 300000u
static void frames_above_the_window_are_served(void **state)
{
	(void)state;
	struct th_worker w;
	th_worker_fresh(&w, "netlim-big", 1, "--window=65536", NULL);
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 8u << 20;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 7,
		.partitions = 2, .target = USH_TARGET_NET,
		.workers = w.addr};
	ush_writer *wr;
	th_ok(ush_writer_open(&wr, ring, &wo));
	uint8_t *rec = malloc(BIG);
	assert_non_null(rec);
	for (uint32_t i = 0; i < 6; i++) {
		th_fill(rec, BIG - i, i);
		th_ok(ush_writer_write(wr, i % 2, rec, BIG - i));
	}
	struct ush_status st;
	th_ok(th_commit(wr, NULL, &st));
	ush_writer_free(wr);
	ush_ring_free(ring);
	for (uint32_t p = 0; p < 2; p++) {
		ush_reader *r;
		th_ok(th_reader_open(&r, &st, 1, p, 0));
		const void *got;
		size_t len;
		for (uint32_t i = p; i < 6; i += 2) {
			assert_int_equal(ush_reader_next(r, &got, &len), 1);
			assert_int_equal(len, BIG - i);
			assert_true(th_check(got, len, i));
		}
		assert_int_equal(ush_reader_next(r, &got, &len), 0);
		ush_reader_free(r);
	}
	th_status_free(&st);
	free(rec);
	done(&w);
}

/* How many lines "... suppressed N similar lines" report for the kind of
 * line whose format starts with fmt (in the report, quoted). */
static unsigned long count_suppressed(const char *path, const char *fmt)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[1024], kind[128];
	unsigned long n = 0, k;
	snprintf(kind, sizeof(kind), "lines (\"%s", fmt);
	while (fgets(line, sizeof(line), f)) {
		const char *s = strstr(line, "suppressed ");
		if (s && strstr(line, kind) &&
		    sscanf(s, "suppressed %lu similar", &k) == 1)
			n += k;
	}
	fclose(f);
	return n;
}

/* Descriptors open in process pid below limit (it may have inherited
 * some above). */
static unsigned fds_below(pid_t pid, int limit)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	assert_non_null(d);
	unsigned n = 0;
	for (struct dirent *de; (de = readdir(d));)
		n += de->d_name[0] != '.' && atoi(de->d_name) < limit;
	closedir(d);
	return n;
}

/*
 * A worker with few descriptors, all taken by connections that
 * authenticated, then flooded with more: accept fails (EMFILE), nothing
 * can be shed (see honest_client_during_flood), and it backs off instead
 * of spinning; it keeps running, and once the flood is gone an honest
 * client is served. The backoff is checked by count, whatever the
 * machine's speed: each failure's pause doubles from 10 ms to 1 s (a
 * successful accept starts over at 10), so fewer than WK_LOG_BURST (10)
 * failures fall in any second and none of their lines is ever
 * suppressed; a worker that retried at once would fail thousands of
 * times a second.
 */
#define FLOOD 200
#define NOFILE_FEW 24 /* below the 12 it starts with + the floor of 16 */
static void accept_errors_back_off(void **state)
{
	(void)state;
	struct th_worker w;
	char log[600];
	logged(&w, log, sizeof(log), "netlim-emfile");
	w.nofile = NOFILE_FEW;
	/* No timeout frees a descriptor (and restarts the backoff) during
	 * the flood. */
	w.extra = "--hello-timeout=3600000";
	w.more[0] = "--idle-timeout=3600000";
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	int *fd = calloc(FLOOD + NOFILE_FEW, sizeof(*fd));
	assert_non_null(fd);
	int n = 0;
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_ADMIN, 0, 0, 0,
				0, 0, "default", 0, {0}};
	uint8_t b[USHI_PROTO_SMALL];
	struct ushi_frame fr;
	while (fds_below(w.pid, NOFILE_FEW) < NOFILE_FEW) {
		fd[n] = th_raw_connect(w.port);
		th_hello(fd[n], h);
		assert_int_equal(th_recv_frame(fd[n++], b, sizeof(b), &fr),
				 USHI_FRAME_HELLO);
	}
	for (int i = 0; i < FLOOD; i++)
		fd[n++] = th_raw_connect(w.port);
	/* The pause reaches its cap after 7 failures (10 ms ... 1 s). */
	wait_for_line(log, "accepting again in 1000 ms");
	/* The log of the flood, once a report of lines suppressed in its
	 * last second would be out: the closes below start a drain of the
	 * backlog, each accept of which starts the pause over. */
	sleep(2);
	char snap[700];
	snprintf(snap, sizeof(snap), "%s.flood", log);
	size_t len;
	char *text = th_read_file(log, &len);
	FILE *sf = fopen(snap, "w");
	assert_non_null(sf);
	assert_int_equal(fwrite(text, 1, len, sf), len);
	fclose(sf);
	free(text);
	for (int i = 0; i < n; i++)
		close(fd[i]);
	free(fd);
	assert_true(th_worker_alive(&w));
	honest_client(&w, 4);
	done(&w);
	/* One thread: its lines are in the order of its failures. */
	FILE *f = fopen(snap, "r");
	assert_non_null(f);
	char line[1024], why[128];
	unsigned prev = 0, ms, fails = 0;
	while (fgets(line, sizeof(line), f)) {
		const char *s = strstr(line, "accept: ");
		if (!s || sscanf(s, "accept: %127[^;]; accepting again in %u ms",
				 why, &ms) != 2)
			continue;
		if (strstr(why, ush_strerror(-ECONNABORTED)))
			continue; /* a peer gone: no pause, none needed */
		unsigned next = !prev ? 10 : 2 * prev < 1000 ? 2 * prev : 1000;
		if (ms != 10 && ms != next)
			fail_msg("accept failure %u: paused %u ms after %u ms",
				 fails, ms, prev);
		prev = ms;
		fails++;
	}
	fclose(f);
	unsigned long hidden = count_suppressed(snap, "thread %u: accept");
	print_message("%u accept failures logged, %lu suppressed\n", fails,
		      hidden);
	assert_true(fails >= 7);
	assert_int_equal(hidden, 0);
	unlink(snap);
	unlink(log);
}

/*
 * A flood of connections that never say HELLO holds a worker at its
 * descriptor limit (RLIMIT_NOFILE 256), and stays: with --hello-timeout
 * at an hour nothing frees a descriptor on its own. The worker closes its
 * oldest connections that have not authenticated when accept runs out of
 * descriptors, so an honest client is served during the flood. Before,
 * its connection waited in the backlog until the flood's HELLO timeouts
 * (16.9 s with the default 10 s), here for good: its push timed out.
 * USH_FLOOD_HELLO_TIMEOUT (ms) sets the worker's HELLO timeout instead,
 * to measure the default's case; the honest client's time is printed.
 * On two threads and a loaded machine, the worker once shed the honest
 * connection in 1 run of 8: it set up an accept's burst newest first, so
 * the honest connection went in before older flood ones that then shed
 * it; and a thread whose flood had gone to the other had nothing of its
 * own to close and refused it (now it takes up to its share).
 */
#define FLOOD_SILENT 600
static void honest_client_during_flood(void **state)
{
	(void)state;
	struct th_worker w;
	char log[600], opt[64];
	logged(&w, log, sizeof(log), "netlim-shed");
	w.nofile = 256;
	const char *ht = getenv("USH_FLOOD_HELLO_TIMEOUT");
	snprintf(opt, sizeof(opt), "--hello-timeout=%s", ht ? ht : "3600000");
	w.extra = opt;
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	int fd[FLOOD_SILENT];
	for (int i = 0; i < FLOOD_SILENT; i++)
		fd[i] = th_raw_connect(w.port);
	uint64_t t0 = ushi_now_ns();
	honest_client(&w, 5);
	print_message("honest client served in %.1f ms during a flood of %d "
		      "silent connections\n",
		      (double)(ushi_now_ns() - t0) / 1e6, FLOOD_SILENT);
	assert_true(file_has(log, "closing the oldest connection that has "
			     "not authenticated"));
	for (int i = 0; i < FLOOD_SILENT; i++)
		close(fd[i]);
	done(&w);
	unlink(log);
}

/*
 * The same line over and over (bad input from many peers) is printed at
 * most WK_LOG_BURST (10) times a second, then counted as suppressed and
 * reported once the second is over. The bad connections wait in the
 * kernel while the worker is stopped (SIGSTOP), so that it meets them in
 * one burst on any machine; every one of them is then either a printed
 * line or counted in a report.
 */
#define BAD 300
static void repeated_log_lines_are_suppressed(void **state)
{
	(void)state;
	struct th_worker w;
	char log[600];
	logged(&w, log, sizeof(log), "netlim-lograte");
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	uint8_t junk[256];
	th_fill(junk, sizeof(junk), 7);
	int *fd = calloc(BAD, sizeof(*fd));
	assert_non_null(fd);
	assert_int_equal(kill(w.pid, SIGSTOP), 0);
	for (int i = 0; i < BAD; i++) {
		fd[i] = th_raw_connect(w.port); /* the backlog holds 1024 */
		th_send_all(fd[i], junk, sizeof(junk));
	}
	assert_int_equal(kill(w.pid, SIGCONT), 0);
	for (int i = 0; i < BAD; i++)
		expect_error(fd[i], USH_ECORRUPT, "bad frame");
	free(fd);
	/* The loop reports what a second suppressed once it is over. */
	const char *kind = "peer %s: %s (%s); closing";
	unsigned long lines = 0, hidden = 0;
	for (int i = 0; i < 1500 && lines + hidden < BAD; i++) {
		if (i)
			usleep(20000);
		lines = count_lines(log, "bad frame header");
		hidden = count_suppressed(log, kind);
	}
	print_message("%d bad connections in one burst: %lu lines printed, "
		      "%lu suppressed\n", BAD, lines, hidden);
	assert_int_equal(lines + hidden, BAD);
	if (!hidden)
		fail_msg("no line of %d in one burst suppressed", BAD);
	assert_true(lines >= 10);
	assert_true(th_worker_alive(&w));
	done(&w);
	unlink(log);
}

/* A writer that stops at a gate (after GATE records) until told to go on,
 * then writes `records` in all and commits (or writes until an error when
 * records is 0). */
#define GATE 20000
struct gated {
	struct th_job j;
	atomic_int at_gate, go;
	int ret;
	char err[600];
};

static void *gated_writer(void *p)
{
	struct gated *g = p;
	const struct th_job *j = &g->j;
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 8u << 20;
	int ret = ush_ring_create(&ring, &ro);
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = j->shuffle,
		.partitions = j->partitions, .target = USH_TARGET_NET,
		.workers = j->workers};
	ush_writer *w = NULL;
	if (!ret)
		ret = ush_writer_open(&w, ring, &wo);
	uint8_t buf[1024];
	for (uint32_t i = 0; !ret && (!j->records || i < j->records); i++) {
		if (i == GATE) {
			atomic_store(&g->at_gate, 1);
			while (!atomic_load(&g->go))
				usleep(1000);
		}
		ret = ush_writer_write(w, i % j->partitions, buf,
				       th_rec(buf, 0, i));
	}
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	struct ush_status st;
	if (!ret && !(ret = ush_writer_status(w, &st))) {
		void *copy = malloc(st.len);
		memcpy(copy, st.data, st.len);
		j->statuses[0] = (struct ush_status){copy, st.len};
	}
	snprintf(g->err, sizeof(g->err), "%s", ret ? ush_last_error() : "");
	g->ret = ret;
	atomic_store(&g->at_gate, 1);
	ush_writer_free(w);
	if (ring)
		ush_ring_free(ring);
	return NULL;
}

/* Waits for the worker to exit; asserts it exited 0. */
static void wait_exit0(struct th_worker *w)
{
	int st;
	assert_int_equal(waitpid(w->pid, &st, 0), w->pid);
	th_track(w->pid, 0);
	w->pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("ushuffled exited with status 0x%x", st);
}

/*
 * SIGTERM while a writer is in the middle of its push: the worker stops
 * accepting, tells an idle connection it is shutting down, lets the push
 * finish and commit, and exits 0; the commit is served after a restart.
 */
static void sigterm_lets_a_push_commit(void **state)
{
	(void)state;
	struct th_worker w;
	char log[600];
	logged(&w, log, sizeof(log), "netlim-term");
	w.extra = "--drain-timeout=120000";
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct ush_status st[1] = {{0}};
	struct gated g = {.j = {.workers = w.addr, .shuffle = 5,
				.partitions = 4, .maps = 1,
				.records = 3 * GATE, .statuses = st}};
	int idle = held_reader(w.port);
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, gated_writer, &g), 0);
	while (!atomic_load(&g.at_gate))
		usleep(1000);
	kill(w.pid, SIGTERM);
	wait_for_line(log, "shutting down");
	expect_error(idle, -ESHUTDOWN, "worker shutting down");
	atomic_store(&g.go, 1);
	pthread_join(tid, NULL);
	if (g.ret)
		fail_msg("the push under way at SIGTERM failed: %s", g.err);
	wait_exit0(&w);
	th_worker_spawn(&w, "127.0.0.1", w.port, 2);
	th_verify(&g.j);
	th_job_free(&g.j);
	done(&w);
	unlink(log);
}

/*
 * SIGTERM with a push that does not end within --drain-timeout: the
 * writer gets an error naming the shutdown (never a bare reset), and the
 * worker exits 0.
 */
static void sigterm_past_the_drain_tells_the_writer(void **state)
{
	(void)state;
	struct th_worker w;
	char log[600];
	logged(&w, log, sizeof(log), "netlim-term2");
	w.extra = "--drain-timeout=300";
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	struct ush_status st[1] = {{0}};
	struct gated g = {.j = {.workers = w.addr, .shuffle = 6,
				.partitions = 4, .maps = 1, .records = 0,
				.statuses = st}};
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, gated_writer, &g), 0);
	while (!atomic_load(&g.at_gate))
		usleep(1000);
	kill(w.pid, SIGTERM);
	wait_for_line(log, "shutting down");
	atomic_store(&g.go, 1);
	pthread_join(tid, NULL);
	print_message("the writer's error: %s\n", g.err);
	if (g.ret != -ESHUTDOWN || !strstr(g.err, "worker shutting down"))
		fail_msg("expected ESHUTDOWN 'worker shutting down', got %s: "
			 "%s", ush_err_name(g.ret), g.err);
	wait_exit0(&w);
	th_job_free(&g.j);
	th_rmrf(w.dir);
	unlink(log);
}

/* SIGHUP reopens --log-file (logrotate renames it first) and does not
 * stop the worker. */
static void sighup_reopens_the_log_file(void **state)
{
	(void)state;
	struct th_worker w;
	char log[600], old[620], opt[640];
	memset(&w, 0, sizeof(w));
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("netlim-hup"));
	snprintf(log, sizeof(log), "%s.log", w.dir);
	snprintf(old, sizeof(old), "%s.1", log);
	snprintf(opt, sizeof(opt), "--log-file=%s", log);
	unlink(log);
	unlink(old);
	w.extra = opt;
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	wait_for_line(log, "listening on");
	assert_int_equal(rename(log, old), 0);
	kill(w.pid, SIGHUP);
	wait_for_line(log, "log file reopened");
	uint8_t junk[256];
	th_fill(junk, sizeof(junk), 9);
	int x = th_raw_connect(w.port);
	th_send_all(x, junk, sizeof(junk));
	expect_error(x, USH_ECORRUPT, "bad frame");
	wait_for_line(log, "bad frame header");
	assert_false(file_has(old, "bad frame header"));
	assert_true(file_has(old, "listening on"));
	assert_true(th_worker_alive(&w));
	done(&w);
	unlink(log);
	unlink(old);
}

/* ushuffled --version prints the library's version and exits 0. */
static void version_prints_and_exits(void **state)
{
	(void)state;
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execl(USH_USHUFFLED_PATH, "ushuffled", "--version",
		      (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	char out[256] = "";
	ssize_t n = read(pfd[0], out, sizeof(out) - 1);
	close(pfd[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	char want[64];
	snprintf(want, sizeof(want), "ushuffled %s\n", ush_version_string());
	assert_true(n > 0);
	assert_string_equal(out, want);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(idle_connections_time_out),
		cmocka_unit_test(connection_limit_refuses_with_an_error),
		cmocka_unit_test(header_cannot_reserve_memory),
		cmocka_unit_test(frames_above_the_window_are_served),
		cmocka_unit_test(accept_errors_back_off),
		cmocka_unit_test(honest_client_during_flood),
		cmocka_unit_test(repeated_log_lines_are_suppressed),
		cmocka_unit_test(sigterm_lets_a_push_commit),
		cmocka_unit_test(sigterm_past_the_drain_tells_the_writer),
		cmocka_unit_test(sighup_reopens_the_log_file),
		cmocka_unit_test(version_prints_and_exits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
