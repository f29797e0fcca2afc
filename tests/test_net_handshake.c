/*
 * The worker's handshake against outsiders (docs/security.md, Bounds):
 * a connection that proved no secret can make the worker hold no more
 * than a HELLO's bytes, whatever its frame headers announce; a proven
 * one is refused a frame its role does not send from the header; and a
 * client that fails to authenticate (a wrong proof, a hang-up after the
 * worker's proof, silence) is counted and logged with its peer and
 * application. Memory is measured on a real ushuffled (/proc/PID/status);
 * no test asserts a duration.
 */
#include "net_helpers.h"
#include "net/proto.h"

#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>

/* Sets pid's VmHWM back to its VmRSS (proc(5), clear_refs "5"). */
static void reset_hwm(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs("5", f) >= 0);
	assert_int_equal(fclose(f), 0);
}

/* Reads the ERROR frame the worker answers fd with (30 s deadline: the
 * socket's); returns its code and its message in msg, or 1 for a close
 * without one. */
static int answer(int fd, char *msg, size_t n)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int type = th_recv_frame(fd, b, sizeof(b), &f);
	msg[0] = 0;
	if (type != USHI_FRAME_ERROR)
		return 1;
	return proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg, n);
}

/* The largest FETCH payload a header may announce: under 16 MiB. */
#define FETCH_MAX (USHI_PROTO_FETCH_LEN + USHI_PROTO_WANTS_MAX * \
		   USHI_PROTO_WANT_LEN)

/* A header announcing a frame of type with a payload of len bytes, and
 * the first bytes of that payload: the worker has them in hand. */
static size_t announce(uint8_t *b, size_t cap, uint8_t type, uint32_t len)
{
	struct ushi_frame f = {.type = type, .shuffle = 1, .nrec =
			       type == USHI_FRAME_DATA};
	frame_encode(b, &f);
	/* The lengths go in after the CRC: a frame that never ends needs
	 * none. */
	put_le32(b + 32, len);
	put_le32(b + 36, len);
	memset(b + USH_FRAME_HDR_SIZE, 'x', cap - USH_FRAME_HDR_SIZE);
	return cap;
}

/*
 * N connections (1,000, or what RLIMIT_NOFILE allows) that never say
 * HELLO each announce the largest frame a header may (a 64 MiB DATA frame
 * or a 16 MiB FETCH) and send 256 KiB of it. The worker refuses each at
 * its header (ERROR, "before HELLO") and keeps none of it: its peak
 * resident memory grows by less than 64 KiB per connection.
 */
#define OUTSIDERS 1000
#define SENT (256u << 10)
static void unauthenticated_memory_is_bounded(void **state)
{
	(void)state;
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = rl.rlim_max;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	int n = rl.rlim_cur > OUTSIDERS + 64 ? OUTSIDERS :
					       (int)rl.rlim_cur - 64;
	assert_true(n >= 100);
	struct th_worker w = {0};
	char log[700];
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("hs-outsiders"));
	snprintf(log, sizeof(log), "%s.log", w.dir);
	w.errlog = log; /* a thousand refusals: not in the test's output */
	w.extra = "--max-conns=1100";
	th_worker_spawn(&w, "127.0.0.1", 0, 2);
	/* One honest round trip first: the threads' setup is behind. */
	th_ok(ush_app_heartbeat(w.addr, "default", 10000));
	long rss0 = th_vm_kb(w.pid, "VmRSS");
	reset_hwm(w.pid);
	int *fd = calloc((size_t)n, sizeof(*fd));
	uint8_t *b = malloc(USH_FRAME_HDR_SIZE + SENT);
	assert_true(fd && b);
	for (int i = 0; i < n; i++) {
		bool data = i % 2 == 0;
		size_t k = announce(b, USH_FRAME_HDR_SIZE + SENT,
				    data ? USHI_FRAME_DATA : USHI_FRAME_FETCH,
				    data ? (64u << 20) - USH_FRAME_HDR_SIZE :
					   FETCH_MAX);
		fd[i] = th_raw_connect(w.port);
		/* A worker that refused the header may close before all of
		 * it is in: what was sent is not the point. */
		(void)!send(fd[i], b, k, MSG_NOSIGNAL);
	}
	int refused = 0;
	char msg[600], last[640] = "";
	for (int i = 0; i < n; i++) {
		int code = answer(fd[i], msg, sizeof(msg));
		if (code == -EPROTO && strstr(msg, "frame before HELLO"))
			refused++;
		else
			snprintf(last, sizeof(last), "%d '%s'", code, msg);
		close(fd[i]);
	}
	long hwm = th_vm_kb(w.pid, "VmHWM"), bound = (long)n * 64;
	print_message("%d connections that never authenticate, each "
		      "announcing a 64 MiB DATA or 16 MiB FETCH frame and "
		      "sending %u KiB of it: worker VmRSS %ld KiB before, peak "
		      "%ld KiB: +%ld KiB (bound +%ld KiB, 64 KiB each); %d "
		      "refused at the header\n", n, SENT >> 10, rss0, hwm,
		      hwm - rss0, bound, refused);
	if (hwm - rss0 > bound)
		fail_msg("the worker's peak VmRSS grew by %ld KiB for %d "
			 "unauthenticated connections", hwm - rss0, n);
	if (refused != n)
		fail_msg("%d of %d connections refused at the header; another "
			 "answer: %s", refused, n, last);
	/* The worker serves on. */
	th_ok(ush_app_heartbeat(w.addr, "default", 10000));
	free(fd);
	free(b);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	unlink(log);
}

/* A reader's or writer's HELLO, proven and answered. */
static int proven(int port, uint32_t role)
{
	int fd = th_raw_connect(port);
	struct proto_hello h = {USHI_PROTO_VERSION, role, 0, 0, 5, 0, 0,
				"default", 0, {0}};
	th_hello(fd, h);
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_HELLO);
	return fd;
}

/* After the handshake, a frame the connection's role does not send is
 * refused from its header, before its payload comes: a reader's 64 MiB
 * DATA frame, a writer's 16 MiB FETCH, an admin's either. */
static void role_frames_refused_at_header(void **state)
{
	(void)state;
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("hs-roles"));
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	static const struct {
		uint32_t role;
		uint8_t type;
		const char *want;
	} cases[] = {
		{USHI_ROLE_READER, USHI_FRAME_DATA, "unexpected DATA frame"},
		{USHI_ROLE_WRITER, USHI_FRAME_FETCH, "unexpected FETCH frame"},
		{USHI_ROLE_ADMIN, USHI_FRAME_DATA, "unexpected DATA frame"},
		{USHI_ROLE_ADMIN, USHI_FRAME_FETCH, "unexpected FETCH frame"},
	};
	uint8_t b[USH_FRAME_HDR_SIZE + 4096];
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int fd = proven(w.port, cases[i].role);
		size_t k = announce(b, sizeof(b), cases[i].type,
				    cases[i].type == USHI_FRAME_DATA ?
					    (64u << 20) - USH_FRAME_HDR_SIZE :
					    FETCH_MAX);
		th_send_all(fd, b, k);
		char msg[600];
		int code = answer(fd, msg, sizeof(msg));
		print_message("role %u, %s header: %d '%s'\n", cases[i].role,
			      cases[i].want, code, msg);
		if (code != -EPROTO || !strstr(msg, cases[i].want))
			fail_msg("expected ERROR -EPROTO '%s', got %d '%s'",
				 cases[i].want, code, msg);
		close(fd);
	}
	assert_true(th_worker_alive(&w));
	th_worker_stop(&w);
	th_rmrf(w.dir);
}

/* ------------------------------------------- failed authentication */

/* The worker's log lines, as ush_worker_set_log() hands them over. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[1 << 16];

static void log_line(void *arg, const char *msg)
{
	(void)arg;
	pthread_mutex_lock(&log_lock);
	size_t n = strlen(logged);
	snprintf(logged + n, sizeof(logged) - n, "%s\n", msg);
	pthread_mutex_unlock(&log_lock);
}

/* Waits (30 s at most, then fails) until wk counted `want` failed
 * authentications; then the log has a line with each of the texts. */
static void expect_auth_failures(ush_worker *wk, uint64_t want,
				 const char *peer, const char *app,
				 const char *why)
{
	struct ush_worker_stats st;
	for (int i = 0; i < 3000; i++) {
		ush_worker_stats(wk, &st);
		if (st.errors[USH_WORKER_ERR_AUTH] >= want)
			break;
		usleep(10000);
	}
	print_message("errors{kind=\"auth\"} %llu\n",
		      (unsigned long long)st.errors[USH_WORKER_ERR_AUTH]);
	assert_int_equal(st.errors[USH_WORKER_ERR_AUTH], want);
	pthread_mutex_lock(&log_lock);
	const char *line = strstr(logged, why);
	while (line && line > logged && line[-1] != '\n')
		line--;
	bool ok = line && strstr(line, peer) && strstr(line, app);
	if (!ok)
		print_message("log:\n%s", logged);
	logged[0] = 0;
	pthread_mutex_unlock(&log_lock);
	if (!ok)
		fail_msg("no log line with '%s', '%s' and '%s'", why, peer,
			 app);
}

/* This side's address of fd, as the worker names its peer. */
static void local_addr(int fd, char *s, size_t n)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
	snprintf(s, n, "%s:%u", ip, ntohs(a.sin_port));
}

/* Says HELLO for app asking for the challenge and reads it; then, with
 * proof set, answers with a proof of no secret. Returns the socket. */
static int challenged(int port, const char *app, bool proof, char *peer,
		      size_t n)
{
	int fd = th_raw_connect(port);
	local_addr(fd, peer, n);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER, 0, 0, 0,
				0, 0, "", USHI_HELLO_AUTH, {0}};
	snprintf(h.app, sizeof(h.app), "%s", app);
	th_ok(auth_nonce(h.nonce));
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	th_send_all(fd, b, proto_put_hello(b, &h));
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_AUTH);
	struct proto_auth r = {.step = USHI_AUTH_RESPONSE};
	if (proof)
		th_send_all(fd, b, proto_put_auth(b, &r));
	return fd;
}

/*
 * A client holding another secret hangs up after the worker's proof (the
 * library does: that proof does not check out), one sends a wrong proof,
 * one stays silent after the challenge: each is counted as an auth error
 * and logged with its peer and application, so the alert of
 * docs/operations.md fires on a rotation half done.
 */
static void auth_failures_are_counted_and_logged(void **state)
{
	(void)state;
	struct ush_worker_opts o;
	char listen[] = "127.0.0.1:0", addr[64], peer[64], msg[600];
	ush_worker_opts_init(&o);
	o.listen = listen;
	o.dir = th_tmpdir("hs-authfail");
	o.threads = 1;
	o.hello_timeout_ms = 500;
	th_worker_secret(&o);
	ush_worker_set_log(log_line, NULL);
	ush_worker *wk;
	th_ok(ush_worker_create(&wk, &o));
	th_ok(ush_worker_start(wk));
	int port = ush_worker_port(wk);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	/* The library with another secret for application R. */
	th_ok(ush_auth_secret("R", "a-rotated-secret-0123456789", 27));
	assert_int_equal(ush_app_heartbeat(addr, "R", 10000), -EACCES);
	th_ok(ush_auth_secret("R", NULL, 0));
	expect_auth_failures(wk, 1, "peer 127.0.0.1:", "application 'R'",
			     "closed the connection after the worker's proof");
	/* The same by hand, which knows its peer address. */
	close(challenged(port, "S", false, peer, sizeof(peer)));
	expect_auth_failures(wk, 2, peer, "application 'S'",
			     "closed the connection after the worker's proof");
	/* A wrong proof. */
	int fd = challenged(port, "T", true, peer, sizeof(peer));
	assert_int_equal(answer(fd, msg, sizeof(msg)), -EACCES);
	close(fd);
	expect_auth_failures(wk, 3, peer, "application 'T'",
			     "does not hold its secret");
	/* Silence after the challenge, past the HELLO timeout. */
	fd = challenged(port, "U", false, peer, sizeof(peer));
	assert_int_equal(answer(fd, msg, sizeof(msg)), -EACCES);
	close(fd);
	expect_auth_failures(wk, 4, peer, "application 'U'",
			     "sent no AUTH within 500 ms");
	/* An honest client is served. */
	th_ok(ush_app_heartbeat(addr, "R", 10000));
	ush_worker_free(wk);
	ush_worker_set_log(NULL, NULL);
	th_rmrf(o.dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unauthenticated_memory_is_bounded),
		cmocka_unit_test(role_frames_refused_at_header),
		cmocka_unit_test(auth_failures_are_counted_and_logged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
