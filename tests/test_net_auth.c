/*
 * Authentication and isolation against real ushuffled processes
 * (docs/security.md): a wrong secret, a replayed handshake, a connection
 * that tries to switch application, another application's FETCH, DROP,
 * commit hijack and frame injection, --insecure off loopback, and each
 * per-application quota. Every attack is refused with an ERROR naming
 * why, and honest jobs pushed meanwhile verify. Within one application,
 * a second frame of a batch with other contents fails the read with
 * USH_ECORRUPT naming both places; an identical resend is harmless.
 */
#include "net_helpers.h"
#include "core/status.h"
#include "net/auth.h"
#include "net/net.h"
#include "net/proto.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define SECRET_A "secret-of-application-A-0123456789"
#define SECRET_B "secret-of-application-B-9876543210"

/* A worker whose applications A and B have secrets of their own (files
 * in --secrets-dir); every other one shares TH_SECRET. */
static void spawn_apps(struct th_worker *w, const char *tag, const char *a,
		       const char *b)
{
	static char sdir[700], opt[720];
	snprintf(w->dir, sizeof(w->dir), "%s", th_tmpdir(tag));
	snprintf(sdir, sizeof(sdir), "%s.secrets", w->dir);
	th_rmrf(sdir);
	assert_int_equal(mkdir(sdir, 0700), 0);
	const char *ids[] = {"A", "B"}, *keys[] = {SECRET_A, SECRET_B};
	for (int i = 0; i < 2; i++) {
		char p[760];
		snprintf(p, sizeof(p), "%s/%s", sdir, ids[i]);
		int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		assert_true(fd >= 0);
		/* A trailing newline, as echo leaves it: not part of it. */
		assert_true(write(fd, keys[i], strlen(keys[i])) > 0);
		assert_int_equal(write(fd, "\n", 1), 1);
		close(fd);
	}
	snprintf(opt, sizeof(opt), "--secrets-dir=%s", sdir);
	w->extra = opt;
	w->more[0] = a;
	w->more[1] = a ? b : NULL;
	th_worker_spawn(w, "127.0.0.1", 0, 2);
	/* The library proves these for A and B. */
	th_ok(ush_auth_secret("A", SECRET_A, strlen(SECRET_A)));
	th_ok(ush_auth_secret("B", SECRET_B, strlen(SECRET_B)));
}

static void done(struct th_worker *w)
{
	assert_true(th_worker_alive(w));
	th_worker_stop(w);
	char sdir[700];
	snprintf(sdir, sizeof(sdir), "%s.secrets", w->dir);
	th_rmrf(sdir);
	th_rmrf(w->dir);
}

/* Reads frames until an ERROR (HELLO and ACK frames are skipped), which
 * must carry code and a message containing want. */
static void expect_refusal(int fd, int code, const char *want)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int type;
	while ((type = th_recv_frame(fd, b, sizeof(b), &f)) ==
		       USHI_FRAME_HELLO ||
	       type == USHI_FRAME_ACK)
		;
	if (type != USHI_FRAME_ERROR)
		fail_msg("expected ERROR '%s', got %s", want,
			 type < 0 ? "a bare close" : "another frame");
	char msg[600];
	int got = proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg,
				  sizeof(msg));
	print_message("refused: %s\n", msg);
	if (got != code || !strstr(msg, want))
		fail_msg("expected ERROR %d '%s', got %d '%s'", code, want, got,
			 msg);
	close(fd);
}

/* Reads the worker's HELLO answer; fails on an ERROR. */
static void expect_welcome(int fd)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	int type = th_recv_frame(fd, b, sizeof(b), &f);
	if (type == USHI_FRAME_ERROR) {
		char msg[600];
		proto_get_error(b + USH_FRAME_HDR_SIZE, f.payload_len, msg,
				sizeof(msg));
		fail_msg("expected the HELLO answer, got ERROR '%s'", msg);
	}
	assert_int_equal(type, USHI_FRAME_HELLO);
	struct proto_hello h;
	proto_get_hello(&f, b + USH_FRAME_HDR_SIZE, &h);
	assert_int_equal(h.flags, USHI_HELLO_AUTH);
}

/* One client handshake, recorded byte for byte: the HELLO sent, the
 * worker's nonce and the client's AUTH. */
struct hs {
	uint8_t hello[USHI_PROTO_SMALL];
	size_t hn;
	uint8_t nw[USHI_AUTH_NONCE];
	uint8_t resp[USHI_PROTO_SMALL];
	size_t rn;
};

/* The client's side, proving key for app, in role (a writer names
 * shuffle s, map 0, attempt 0). The worker's proof is not required to
 * check out (an attacker would not check it); when it does, key is the
 * application's and fd's MACs are keyed, as the library's would be. */
static void handshake(int fd, uint32_t role, const char *app, uint32_t s,
		      const char *key, struct hs *rec)
{
	struct proto_hello h = {USHI_PROTO_VERSION, role, 0, 0, s, 0, 0, "",
				USHI_HELLO_AUTH, {0}};
	snprintf(h.app, sizeof(h.app), "%s", app);
	th_ok(auth_nonce(h.nonce));
	rec->hn = proto_put_hello(rec->hello, &h);
	th_send_all(fd, rec->hello, rec->hn);
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f), USHI_FRAME_AUTH);
	struct proto_auth a, r = {.step = USHI_AUTH_RESPONSE};
	proto_get_auth(b + USH_FRAME_HDR_SIZE, &a);
	memcpy(rec->nw, a.nonce, sizeof(rec->nw));
	const uint8_t *k = (const uint8_t *)key;
	th_ok(auth_mac(k, strlen(key), AUTH_CLIENT, rec->hello, rec->hn,
		       a.nonce, a.mac, r.mac));
	rec->rn = proto_put_auth(rec->resp, &r);
	th_send_all(fd, rec->resp, rec->rn);
	uint8_t pw[USHI_AUTH_MAC];
	mac_keys keys;
	th_ok(auth_mac(k, strlen(key), AUTH_WORKER, rec->hello, rec->hn,
		       a.nonce, NULL, pw));
	th_ok(mac_derive(k, strlen(key), rec->hello, rec->hn, a.nonce, keys));
	if (auth_mac_equal(pw, a.mac))
		th_ok(mac_start(th_mac(fd), keys, AUTH_CLIENT));
}

/* A small honest job of app on shuffle s, pushed and verified. */
static void honest(struct th_worker *w, const char *app, uint32_t s)
{
	struct ush_status st[2] = {{0}, {0}};
	struct th_job j = {.workers = w->addr, .shuffle = s, .partitions = 4,
			   .maps = 2, .records = 2000, .statuses = st,
			   .app = app};
	for (uint32_t m = 0; m < 2; m++)
		th_ok(th_push_map(&j, m, 0, NULL));
	th_verify(&j);
	th_job_free(&j);
}

/* A wrong secret fails both ways: the worker refuses a client that
 * proves another secret, and the library refuses a worker that cannot
 * prove the client's. A client with no secret is refused as well. */
static void wrong_secret(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-wrong", NULL, NULL);
	struct hs rec;
	int fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_READER, "A", 0, SECRET_B, &rec);
	expect_refusal(fd, -EACCES, "does not hold its secret");
	fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_READER, "A", 0, "a-wrong-secret-0123456789",
		  &rec);
	expect_refusal(fd, -EACCES, "does not hold its secret");
	/* No secret at all: refused at HELLO. */
	fd = th_raw_connect(w.port);
	uint8_t b[USHI_PROTO_SMALL];
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_READER, 0, 0, 0,
				0, 0, "A", 0, {0}};
	th_send_all(fd, b, proto_put_hello(b, &h));
	expect_refusal(fd, -EACCES, "authentication required");
	/* The library, holding the wrong secret for A: the worker's proof
	 * does not check out, and the client says so. */
	th_ok(ush_auth_secret("A", "a-wrong-secret-0123456789", 25));
	assert_int_equal(ush_app_heartbeat(w.addr, "A", 5000), -EACCES);
	print_message("%s\n", ush_last_error());
	assert_non_null(strstr(ush_last_error(), "failed to prove it holds "
				"the secret of application 'A'"));
	th_ok(ush_auth_secret("A", SECRET_A, strlen(SECRET_A)));
	th_ok(ush_app_heartbeat(w.addr, "A", 5000));
	honest(&w, "A", 1);
	done(&w);
}

/* A handshake recorded on one connection and replayed on another: the
 * worker's nonce is fresh, so the recorded proof fails. */
static void replayed_handshake(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-replay", NULL, NULL);
	struct hs rec;
	int fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_ADMIN, "A", 0, SECRET_A, &rec);
	expect_welcome(fd);
	close(fd);
	for (int i = 0; i < 3; i++) {
		fd = th_raw_connect(w.port);
		th_send_all(fd, rec.hello, rec.hn);
		uint8_t b[USHI_PROTO_ERROR_SIZE];
		struct ushi_frame f;
		assert_int_equal(th_recv_frame(fd, b, sizeof(b), &f),
				 USHI_FRAME_AUTH);
		struct proto_auth a;
		proto_get_auth(b + USH_FRAME_HDR_SIZE, &a);
		assert_memory_not_equal(a.nonce, rec.nw, sizeof(a.nonce));
		th_send_all(fd, rec.resp, rec.rn);
		expect_refusal(fd, -EACCES, "does not hold its secret");
	}
	honest(&w, "A", 2);
	done(&w);
}

/* Authenticated for A, a connection cannot become B's: a second HELLO
 * is refused, and a client holding A's secret cannot say HELLO as B. */
static void no_application_switch(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-switch", NULL, NULL);
	struct hs rec;
	int fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_READER, "A", 0, SECRET_A, &rec);
	expect_welcome(fd);
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_ADMIN, 0, 0, 0,
				0, 0, "B", 0, {0}};
	uint8_t b[USHI_PROTO_SMALL];
	th_send_ctrl(fd, b, proto_put_hello(b, &h));
	expect_refusal(fd, -EPROTO, "a second HELLO");
	/* A's secret, B's name. */
	fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_ADMIN, "B", 0, SECRET_A, &rec);
	expect_refusal(fd, -EACCES, "'B' does not hold its secret");
	honest(&w, "B", 3);
	done(&w);
}

/* B's shuffle, while B writes it and after B committed it: A (properly
 * authenticated as A) can neither fetch, drop, hijack its commit nor
 * inject frames into it, and B's readers get exactly B's records. */
static void other_application_refused(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-other", NULL, NULL);
	const uint32_t s = 40;
	struct ush_status st[2] = {{0}, {0}};
	struct th_job j = {.workers = w.addr, .shuffle = s, .partitions = 4,
			   .maps = 2, .records = 3000, .statuses = st,
			   .app = "B"};
	th_ok(th_push_map(&j, 0, 0, NULL));
	/* Commit hijack: A opens an attempt of B's shuffle, to commit
	 * its own data under it. */
	struct hs rec;
	int fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_WRITER, "A", s, SECRET_A, &rec);
	expect_refusal(fd, -EACCES, "belongs to another application");
	/* Frame injection: A's writer of its own shuffle 41 sends a DATA
	 * frame of B's shuffle (map 1, attempt 0, seq 0). */
	fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_WRITER, "A", 41, SECRET_A, &rec);
	expect_welcome(fd);
	uint8_t b[512] = {0};
	struct ushi_frame f = {.type = USHI_FRAME_DATA, .shuffle = s, .map = 1,
			      .partition = 0, .raw_len = 9, .payload_len = 9,
			      .nrec = 1};
	put_le32(b + USH_FRAME_HDR_SIZE, 5);
	memcpy(b + USH_FRAME_HDR_SIZE + 4, "EVIL!", 5);
	frame_encode(b, &f);
	th_send_all(fd, b, proto_size(&f));
	expect_refusal(fd, -EPROTO, "DATA frame of shuffle 40 map 1");
	/* FETCH and DROP of B's shuffle, as A. */
	fd = th_raw_connect(w.port);
	handshake(fd, USHI_ROLE_READER, "A", 0, SECRET_A, &rec);
	expect_welcome(fd);
	struct proto_want want = {0, 0, 0, 0};
	th_send_ctrl(fd, b, proto_put_fetch(b, s, 0, 1, 0, &want, 1));
	expect_refusal(fd, -EACCES, "belongs to another application");
	assert_int_equal(ush_shuffle_drop(w.addr, "A", s, 5000), -EACCES);
	print_message("%s\n", ush_last_error());
	/* B's map 1, then every record exactly once. */
	th_ok(th_push_map(&j, 1, 0, NULL));
	th_verify(&j);
	th_ok(ush_shuffle_drop(w.addr, "B", s, 5000));
	th_job_free(&j);
	done(&w);
}

/* The status of A's map 0 attempt 0 of shuffle s on w, one partition:
 * the batches whose CRCs are crc[0..n), as their writer would commit it. */
static void status_of(struct ush_status *st, const struct th_worker *w,
		      uint32_t s, const uint32_t *crc, uint32_t n)
{
	uint32_t sum = USHI_SUM_INIT;
	for (uint32_t i = 0; i < n; i++)
		sum = status_sum_add(sum, crc[i]);
	th_status_one_part(st, "A", w->addr, s, n, ~sum);
}

/* Reads frames until the commit ACK, which must be a success. */
static void wait_commit(int fd)
{
	uint8_t b[USHI_PROTO_ERROR_SIZE];
	struct ushi_frame f;
	for (;;) {
		int type = th_recv_frame(fd, b, sizeof(b), &f);
		if (type == USHI_FRAME_HELLO)
			continue;
		assert_int_equal(type, USHI_FRAME_ACK);
		struct proto_ack a;
		proto_get_ack(b + USH_FRAME_HDR_SIZE, &a);
		if (a.kind == USHI_ACK_COMMIT) {
			assert_int_equal(a.status, 0);
			return;
		}
	}
}

/* The place "CRC <crc> at worker <addr> offset N" names in msg: N. */
static unsigned long long place_of(const char *msg, uint32_t crc,
				   const char *addr)
{
	char want[160];
	snprintf(want, sizeof(want), "CRC %08x at worker %s offset ", crc,
		 addr);
	const char *at = strstr(msg, want);
	if (!at)
		fail_msg("\"%s\" lacks \"%s\"", msg, want);
	return strtoull(at + strlen(want), NULL, 10);
}

/*
 * A peer of the same application (it holds A's secret) pushes, into
 * the attempt of A's shuffle it writes, a second frame of map 0 attempt
 * 0 partition 0 seq 0 with other records: before the genuine one, then
 * after it. The status pins the genuine batches. Either way the read
 * ends with USH_ECORRUPT naming the batch and both places in the
 * worker's stream, never with success; which copy came first decides
 * nothing. (A second connection cannot reach an attempt that one is
 * writing: the worker refuses it; so the copies share one connection.)
 */
static void same_app_conflicting_frames(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-conflict", NULL, NULL);
	for (uint32_t k = 0; k < 2; k++) {
		const uint32_t s = 70 + k;
		struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0,
					0, s, 0, 0, "A", 0, {0}};
		int fd = th_raw_connect(w.port);
		th_hello_secret(fd, h, SECRET_A);
		expect_welcome(fd); /* the attempt is claimed */
		uint8_t b[256];
		uint32_t good[2], evil;
		size_t ng = th_rec_frame(b, s, 0, "good0", &good[0]);
		size_t ne = th_rec_frame(b, s, 0, "EVIL!", &evil);
		if (k == 1) {
			/* The peer's second connection to the attempt. */
			struct hs rec;
			int x = th_raw_connect(w.port);
			handshake(x, USHI_ROLE_WRITER, "A", s, SECRET_A, &rec);
			expect_refusal(x, -EBUSY, "is being written by another "
						  "connection");
		}
		const char *first = k ? "good0" : "EVIL!";
		const char *second = k ? "EVIL!" : "good0";
		uint32_t c;
		th_send_all(fd, b, th_rec_frame(b, s, 0, first, &c));
		th_send_all(fd, b, th_rec_frame(b, s, 0, second, &c));
		th_send_all(fd, b, th_rec_frame(b, s, 1, "good1", &good[1]));
		th_send_ctrl(fd, b, proto_put_mapper_end(b, s, 0, 0));
		wait_commit(fd);
		close(fd);
		struct ush_status st;
		status_of(&st, &w, s, good, 2);
		ush_reader *r;
		const void *rec;
		size_t len;
		int ret, recs = 0;
		th_ok(th_reader_open(&r, &st, 1, 0, 20000));
		while ((ret = ush_reader_next(r, &rec, &len)) == 1)
			recs++;
		const char *msg = ush_last_error();
		print_message("%s\n", msg);
		if (ret != USH_ECORRUPT)
			fail_msg("injected %s the genuine frame: %d after %d "
				 "records, expected USH_ECORRUPT: %s",
				 k ? "after" : "before", ret, recs, msg);
		char want[96];
		snprintf(want, sizeof(want), "shuffle %u map 0 attempt 0 "
			 "partition 0 seq 0: two different frames", s);
		if (!strstr(msg, want))
			fail_msg("\"%s\" lacks \"%s\"", msg, want);
		/* Both places: the copy read first, then the other, right
		 * behind it in the stream. */
		unsigned long long a = place_of(msg, k ? good[0] : evil,
						w.addr);
		unsigned long long z = place_of(msg, k ? evil : good[0],
						w.addr);
		assert_int_equal(z, a + (k ? ng : ne));
		assert_int_equal(ush_reader_next(r, &rec, &len), USH_ECORRUPT);
		ush_reader_free(r);
		th_status_free(&st);
	}
	honest(&w, "A", 72);
	done(&w);
}

/* An identical resend of a genuine frame (the same bytes again) is
 * harmless: every record comes back once, the copy counted as a
 * duplicate. */
static void same_app_identical_resend(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-resend", NULL, NULL);
	const uint32_t s = 80;
	struct proto_hello h = {USHI_PROTO_VERSION, USHI_ROLE_WRITER, 0, 0, s,
				0, 0, "A", 0, {0}};
	int fd = th_raw_connect(w.port);
	th_hello_secret(fd, h, SECRET_A);
	expect_welcome(fd);
	uint8_t b[256];
	uint32_t crc[2];
	size_t n = th_rec_frame(b, s, 0, "good0", &crc[0]);
	th_send_all(fd, b, n);
	th_send_all(fd, b, n);
	th_send_all(fd, b, th_rec_frame(b, s, 1, "good1", &crc[1]));
	th_send_all(fd, b, th_rec_frame(b, s, 1, "good1", &crc[1]));
	th_send_ctrl(fd, b, proto_put_mapper_end(b, s, 0, 0));
	wait_commit(fd);
	close(fd);
	struct ush_status st;
	status_of(&st, &w, s, crc, 2);
	ush_reader *r;
	const void *rec;
	size_t len;
	th_ok(th_reader_open(&r, &st, 1, 0, 20000));
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_int_equal(len, 5);
	assert_memory_equal(rec, "good0", 5);
	assert_int_equal(ush_reader_next(r, &rec, &len), 1);
	assert_int_equal(len, 5);
	assert_memory_equal(rec, "good1", 5);
	th_ok(ush_reader_next(r, &rec, &len));
	struct ush_reader_stats rs;
	ush_reader_stats(r, &rs);
	assert_int_equal(rs.batches, 2);
	assert_int_equal(rs.dup_batches, 2);
	ush_reader_free(r);
	th_status_free(&st);
	done(&w);
}

/* Runs ushuffled with args (NULL-terminated), without USHUFFLE_SECRET in
 * its environment; returns its exit status after at most 10 s, with its
 * stderr in err. A worker that starts is stopped (status 0). */
static int run_worker(const char **args, char *err, size_t n)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/err", th_tmpdir("auth-start"));
	const char *argv[16] = {"ushuffled"};
	unsigned k = 1;
	for (; args[k - 1]; k++)
		argv[k] = args[k - 1];
	argv[k] = NULL;
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int efd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(efd, 2);
		dup2(pfd[1], 1);
		close(pfd[0]);
		unsetenv("USHUFFLE_SECRET");
		execv(USH_USHUFFLED_PATH, (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	char line[128] = "";
	FILE *f = fdopen(pfd[0], "r");
	if (fgets(line, sizeof(line), f) && strstr(line, "port"))
		kill(pid, SIGTERM);
	fclose(f);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	FILE *e = fopen(path, "r");
	size_t got = e ? fread(err, 1, n - 1, e) : 0;
	err[got] = 0;
	if (e)
		fclose(e);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* --insecure is for loopback: elsewhere ushuffled refuses to start
 * unless --insecure-non-loopback forces it; and with neither a secret
 * nor --insecure it refuses too. On loopback, --insecure serves clients
 * without a secret, and a client with one refuses such a worker. */
static void insecure_rules(void **state)
{
	(void)state;
	char err[2048], dir[600], d[620];
	snprintf(dir, sizeof(dir), "%s", th_tmpdir("auth-insecure"));
	snprintf(d, sizeof(d), "--dir=%s", dir);
	const char *any[] = {"--listen=0.0.0.0:0", d, "--insecure", NULL};
	/* Exit 2, as any option the worker refuses. */
	assert_int_equal(run_worker(any, err, sizeof(err)), 2);
	print_message("%s", err);
	assert_non_null(strstr(err, "not a loopback address"));
	const char *forced[] = {"--listen=0.0.0.0:0", d, "--insecure",
				"--insecure-non-loopback", NULL};
	assert_int_equal(run_worker(forced, err, sizeof(err)), 0);
	const char *none[] = {"--listen=127.0.0.1:0", d, NULL};
	assert_int_equal(run_worker(none, err, sizeof(err)), 2);
	print_message("%s", err);
	assert_non_null(strstr(err, "no secret"));
	/* A loopback --insecure worker without a secret (its environment
	 * has none): a client without a secret is served... */
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("auth-insec"));
	w.extra = "--insecure";
	char *saved = strdup(getenv("USHUFFLE_SECRET"));
	unsetenv("USHUFFLE_SECRET");
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	honest(&w, "C", 5);
	/* ...and a client holding one refuses it: it cannot prove it. */
	th_ok(ush_auth_secret("C", SECRET_A, strlen(SECRET_A)));
	assert_int_equal(ush_app_heartbeat(w.addr, "C", 5000), -EACCES);
	print_message("%s\n", ush_last_error());
	th_ok(ush_auth_secret("C", NULL, 0));
	setenv("USHUFFLE_SECRET", saved, 1);
	free(saved);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_rmrf(dir);
}

/* A worker impostor that recorded a genuine worker's challenge on one
 * connection (it held the secret then) and replays it on the next. */
struct replayer {
	int lfd, port;
};

static void *replayer_main(void *arg)
{
	struct replayer *rp = arg;
	uint8_t in[USHI_PROTO_SMALL], saved[USHI_PROTO_SMALL], out[256];
	size_t hn = USH_FRAME_HDR_SIZE + USHI_PROTO_HELLO_LEN, sn = 0;
	struct ushi_mac mac = {0};
	for (int i = 0; i < 2; i++) {
		int fd = accept(rp->lfd, NULL, NULL);
		if (fd < 0 || net_read(fd, in, hn))
			return NULL;
		if (i == 0) {
			struct proto_auth a = {.step = USHI_AUTH_CHALLENGE};
			auth_nonce(a.nonce);
			auth_mac((const uint8_t *)SECRET_A, strlen(SECRET_A),
				 AUTH_WORKER, in, hn, a.nonce, NULL, a.mac);
			sn = proto_put_auth(saved, &a);
			struct proto_hello h = {USHI_PROTO_VERSION,
				USHI_ROLE_ADMIN, 4u << 20, 64u << 20, 0, 0, 0,
				"", USHI_HELLO_AUTH, {0}};
			struct proto_ack ack = {USHI_ACK_HEARTBEAT, 0, 0};
			net_write(fd, saved, sn);
			th_worker_mac(&mac, SECRET_A, in, a.nonce);
			net_read(fd, in, USH_FRAME_HDR_SIZE + USHI_PROTO_AUTH_LEN);
			net_write(fd, out, mac_seal(&mac, out,
						    proto_put_hello(out, &h)));
			/* The HEARTBEAT, sealed. */
			net_read(fd, in, USH_FRAME_HDR_SIZE + USHI_MAC_TAG);
			net_write(fd, out, mac_seal(&mac, out,
						    proto_put_ack(out, 0, 0, 0,
								  &ack)));
			mac_free(&mac);
		} else {
			net_write(fd, saved, sn);
		}
		/* Until the client closes. */
		while (recv(fd, in, sizeof(in), 0) > 0)
			;
		close(fd);
	}
	return NULL;
}

/* The other direction of a replay: a recorded worker challenge does not
 * prove the secret to a client, whose nonce is fresh per connection. */
static void replayed_challenge(void **state)
{
	(void)state;
	struct replayer rp;
	rp.lfd = th_listen(&rp.port);
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", rp.port);
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, replayer_main, &rp), 0);
	th_ok(ush_auth_secret("R", SECRET_A, strlen(SECRET_A)));
	th_ok(ush_app_heartbeat(addr, "R", 5000)); /* the genuine one */
	assert_int_equal(ush_app_heartbeat(addr, "R", 5000), -EACCES);
	print_message("%s\n", ush_last_error());
	assert_non_null(strstr(ush_last_error(), "failed to prove it holds "
				"the secret of application 'R'"));
	pthread_join(tid, NULL);
	close(rp.lfd);
}

/* An authenticated reader connection of app, held. */
static int held(struct th_worker *w, const char *app, const char *key)
{
	struct hs rec;
	int fd = th_raw_connect(w->port);
	handshake(fd, USHI_ROLE_READER, app, 0, key, &rec);
	return fd;
}

/* Each quota refuses A with -EDQUOT naming it, while B's jobs verify and
 * A's committed data stays readable. */
static void quotas(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-quota", "--max-app-conns=3",
		   "--max-app-shuffles=2");
	/* Connections: three held, the fourth refused. */
	int fd[3];
	for (int i = 0; i < 3; i++) {
		fd[i] = held(&w, "A", SECRET_A);
		expect_welcome(fd[i]);
	}
	int x = held(&w, "A", SECRET_A);
	expect_refusal(x, -EDQUOT, "connections here, its quota "
				   "(--max-app-conns)");
	honest(&w, "B", 10);
	for (int i = 0; i < 3; i++)
		close(fd[i]);
	/* Shuffles: two owned, the third refused at its writer's open. */
	struct ush_status s1[2] = {{0}, {0}};
	struct th_job j1 = {.workers = w.addr, .shuffle = 11, .partitions = 4,
			    .maps = 2, .records = 2000, .statuses = s1,
			    .app = "A"};
	/* The worker frees a connection slot when it sees the close: until
	 * then an open may still be refused. */
	int ret;
	while ((ret = th_push_map(&j1, 0, 0, NULL)) == -EDQUOT)
		usleep(10000);
	th_ok(ret);
	th_ok(th_push_map(&j1, 1, 0, NULL));
	honest(&w, "A", 12);
	struct th_job j3 = {.workers = w.addr, .shuffle = 13, .partitions = 4,
			    .maps = 1, .records = 10};
	j3.app = "A";
	assert_int_equal(th_push_map(&j3, 0, 0, NULL), -EDQUOT);
	print_message("%s\n", ush_last_error());
	assert_non_null(strstr(ush_last_error(), "(--max-app-shuffles)"));
	honest(&w, "B", 14);
	th_verify(&j1); /* committed data still readable */
	th_ok(ush_shuffle_drop(w.addr, "A", 12, 5000));
	th_ok(th_push_map(&j3, 0, 0, NULL)); /* room again */
	th_job_free(&j1);
	done(&w);
}

/* Bytes stored: A's writer is refused past --max-app-bytes; B is not;
 * A's committed shuffle stays readable, and a drop makes room again. */
static void bytes_quota(void **state)
{
	(void)state;
	struct th_worker w = {0};
	spawn_apps(&w, "auth-bytes", "--max-app-bytes=4m", NULL);
	struct ush_status s1[1] = {{0}};
	struct th_job j1 = {.workers = w.addr, .shuffle = 21, .partitions = 4,
			    .maps = 1, .records = 200, .statuses = s1,
			    .app = "A"};
	th_ok(th_push_map(&j1, 0, 0, NULL));
	/* ~5.8 MB of records: past the quota (B's honest job is ~1.5). */
	struct th_job big = {.workers = w.addr, .shuffle = 22, .partitions = 4,
			     .maps = 1, .records = 16000, .app = "A"};
	int ret = th_push_map(&big, 0, 0, NULL);
	assert_int_equal(ret, -EDQUOT);
	print_message("%s\n", ush_last_error());
	assert_non_null(strstr(ush_last_error(), "(--max-app-bytes)"));
	honest(&w, "B", 23);
	th_verify(&j1);
	/* The refused writer's shuffle held nothing else: it went with its
	 * bytes (test_net_abandoned); a drop of it is no error, and the
	 * quota has room for the job again. */
	th_ok(ush_shuffle_drop(w.addr, "A", 22, 5000));
	big.shuffle = 24;
	big.records = 6000;
	th_ok(th_push_map(&big, 0, 0, NULL));
	/* After a restart, what A stores (~2.3 MB) is counted from its
	 * files: as much again does not fit. */
	int port = w.port; /* the statuses name it */
	th_worker_stop(&w);
	th_worker_spawn(&w, "127.0.0.1", port, 2);
	big.shuffle = 25;
	assert_int_equal(th_push_map(&big, 0, 0, NULL), -EDQUOT);
	th_verify(&j1);
	th_job_free(&j1);
	done(&w);
}

/* Runs the CLI (cmd: its options) without USHUFFLE_SECRET in its
 * environment; returns its exit status, its output in out. */
static int run_cli(const char *cmd, char *out, size_t n)
{
	char line[2048];
	snprintf(line, sizeof(line), "env -u USHUFFLE_SECRET %s %s 2>&1",
		 USH_CLI_PATH, cmd);
	FILE *p = popen(line, "r");
	assert_non_null(p);
	size_t got = fread(out, 1, n - 1, p);
	out[got] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The CLI: its embedded worker (the README's main job) runs with a
 * secret made up for the job; against a worker of its own, it proves
 * --secret-file, and without a secret it is refused, saying why. */
static void cli_secrets(void **state)
{
	(void)state;
	static char out[65536];
	char cmd[1500], dir[600], file[700];
	snprintf(dir, sizeof(dir), "%s", th_tmpdir("auth-cli"));
	snprintf(cmd, sizeof(cmd), "--target=net --size=2m --numjobs=1 "
		 "--partitions=8 --dir=%s", dir);
	assert_int_equal(run_cli(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "0 errors (ok)"));
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s", th_tmpdir("auth-cliw"));
	th_worker_spawn(&w, "127.0.0.1", 0, 1); /* secret: TH_SECRET */
	snprintf(cmd, sizeof(cmd), "--target=net --size=2m --numjobs=1 "
		 "--partitions=8 --dir=%s --workers=%s", dir, w.addr);
	assert_int_equal(run_cli(cmd, out, sizeof(out)), 1);
	print_message("%s", out);
	assert_non_null(strstr(out, "authentication required"));
	snprintf(file, sizeof(file), "%s/secret", dir);
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_true(write(fd, TH_SECRET, strlen(TH_SECRET)) > 0);
	close(fd);
	snprintf(cmd, sizeof(cmd), "--target=net --size=2m --numjobs=1 "
		 "--partitions=8 --dir=%s --workers=%s --secret-file=%s", dir,
		 w.addr, file);
	assert_int_equal(run_cli(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "0 errors (ok)"));
	th_worker_stop(&w);
	th_rmrf(w.dir);
	th_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wrong_secret),
		cmocka_unit_test(replayed_handshake),
		cmocka_unit_test(replayed_challenge),
		cmocka_unit_test(no_application_switch),
		cmocka_unit_test(other_application_refused),
		cmocka_unit_test(same_app_conflicting_frames),
		cmocka_unit_test(same_app_identical_resend),
		cmocka_unit_test(insecure_rules),
		cmocka_unit_test(quotas),
		cmocka_unit_test(bytes_quota),
		cmocka_unit_test(cli_secrets),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
