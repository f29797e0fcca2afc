/*
 * The operations surface of ushuffled (issue 14): --version and option
 * errors, one log prefix and the start-up line, --config files, the
 * Prometheus endpoint scraped with curl while a job runs (and the client
 * library's counters), and readiness and watchdog pings on a real
 * systemd notify socket.
 */
#include "net_helpers.h"

#include <poll.h>
#include <pthread.h>
#include <sys/un.h>
#include <time.h>

/* A worker whose stderr goes to <dir>.log (named in log), over w->dir
 * if set, else a fresh directory. */
static void spawn_logged(struct th_worker *w, char *log, size_t n,
			 const char *tag)
{
	if (!w->dir[0])
		snprintf(w->dir, sizeof(w->dir), "%s", th_tmpdir(tag));
	snprintf(log, n, "%s.log", w->dir);
	unlink(log);
	w->errlog = log;
	th_worker_spawn(w, "127.0.0.1", 0, 1);
}

/* The file at path as a string (freed by the caller). */
static char *slurp(const char *path)
{
	size_t len;
	char *p = th_read_file(path, &len);
	assert_non_null(p);
	char *s = realloc(p, len + 1);
	s[len] = '\0';
	return s;
}

/* "--dir=" a path in a fresh directory of this test's own (dir), so
 * absent whatever other tests create meanwhile; the daemon must not
 * create it when its options are refused. */
static const char *absent_dir_arg(const char *dir)
{
	static char arg[600];
	snprintf(arg, sizeof(arg), "--dir=%s/absent", dir);
	return arg;
}

static void version_and_option_errors(void **state)
{
	(void)state;
	char *out, *err;
	const char *dir = th_tmpdir("opsopts"), *absent = absent_dir_arg(dir);
	assert_int_equal(th_ushuffled_run((const char *[]){"--version", NULL},
				       &out, &err), 0);
	assert_string_equal(out, "ushuffled " USH_VERSION_STRING "\n");
	free(out), free(err);
	static const char *const bad[][2] = {
		{"--threads=0", "--threads=0: bad value; accepted: 1..1024"},
		{"--log-level=loud", "accepted: error, info or debug"},
		{"--max-conns=x", "--max-conns=x: bad value; accepted: 1..1572864"},
		{"--direct=2", "--direct=2: bad value; accepted: 0 or 1"},
		/* 2^34 + 1 gibibytes wrap to 1 GiB in 64 bits */
		{"--window=17179869185g", "--window=17179869185g: bad value"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int st = th_ushuffled_run((const char *[]){absent, bad[i][0],
							 NULL}, &out, &err);
		assert_int_equal(st, 2);
		if (!strstr(err, bad[i][1]))
			fail_msg("%s: \"%s\" missing in:\n%s", bad[i][0],
				 bad[i][1], err);
		free(out), free(err);
	}
	/* getaddrinfo() takes port 99999 and binds 34463: both addresses
	 * are checked with the options, before anything is bound. */
	assert_int_equal(th_ushuffled_run((const char *[]){absent,
		"--metrics=127.0.0.1:99999", "--listen=127.0.0.1:99999", NULL},
				       &out, &err), 2);
	assert_non_null(strstr(err, "--metrics=127.0.0.1:99999: bad value; "
				    "accepted: HOST:PORT, "));
	free(out), free(err);
	assert_int_equal(th_ushuffled_run((const char *[]){absent,
		"--listen=127.0.0.1:99999", NULL}, &out, &err), 2);
	assert_non_null(strstr(err, "--listen=127.0.0.1:99999: bad value; "
				    "accepted: HOST:PORT or [V6]:PORT, "));
	free(out), free(err);
	assert_int_equal(th_ushuffled_run((const char *[]){"--listen=x:1", NULL},
				       &out, &err), 2);
	assert_non_null(strstr(err, "--dir is required"));
	free(out), free(err);
	assert_int_equal(access(absent + strlen("--dir="), F_OK), -1);
	th_rmrf(dir);
}

/* Every line has one "ushuffled: " prefix; the start-up line says where
 * it serves and stores and its limits; at the default level (info) each
 * connection's HELLO is logged. */
static void one_prefix_startup_line_and_hello_at_info(void **state)
{
	(void)state;
	struct th_worker w = {0};
	char log[600];
	spawn_logged(&w, log, sizeof(log), "opslog");
	struct th_job j = {.workers = w.addr, .shuffle = 41, .partitions = 4,
			   .maps = 1, .records = 100};
	th_ok(th_push_map(&j, 0, 0, NULL));
	th_worker_stop(&w);
	char *text = slurp(log), want[700];
	snprintf(want, sizeof(want), "ushuffled: listening on %s with 1 "
		 "thread, dir %s; limits: 1024 connections, ", w.addr, w.dir);
	if (!strstr(text, want) || !strstr(text, "per application 512 "
					       "connections, 4096 shuffles"))
		fail_msg("no start-up line \"%s...\" in:\n%s", want, text);
	if (!strstr(text, "ushuffled: peer 127.0.0.1:") ||
	    !strstr(text, ": HELLO as writer of shuffle 41 map 0"))
		fail_msg("no HELLO line at the default level in:\n%s", text);
	for (char *l = text; *l; l = strchr(l, '\n') + 1) {
		if (strncmp(l, "ushuffled: ", 11) ||
		    !strncmp(l + 11, "ushuffle", 8))
			fail_msg("a line without exactly one prefix:\n%s", l);
		if (!strchr(l, '\n'))
			break;
	}
	free(text);
	th_rmrf(w.dir);
	unlink(log);
}

/* --config: an INI [ushuffled] section of long options under the
 * command line; mistakes in it exit 2 naming file, key and value. */
static void config_file_sets_options(void **state)
{
	(void)state;
	struct th_worker w = {0};
	char log[600], conf[600], arg[640];
	const char *dir = th_tmpdir("opsconf"), *absent = absent_dir_arg(dir);
	snprintf(conf, sizeof(conf), "%s.conf", dir);
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fputs("; as dist/ushuffled.conf.in\n[ushuffled]\nmax-conns = 7\n"
	      "max_app_shuffles = 9\nlisten = 127.0.0.1:1\n", f);
	fclose(f);
	snprintf(arg, sizeof(arg), "--config=%s", conf);
	w.more[0] = arg;
	spawn_logged(&w, log, sizeof(log), "opsconfw");
	th_worker_stop(&w);
	char *text = slurp(log);
	/* The file's values, and the command line's --listen over its own. */
	if (!strstr(text, "limits: 7 connections") ||
	    !strstr(text, "9 shuffles") || w.port == 1)
		fail_msg("the config file's settings are not in force:\n%s",
			 text);
	free(text);
	/* Each mistake exits 2 naming the file and line; a key set twice,
	 * a line longer than inih reads (it would cut the value and read
	 * the rest as a line of its own) and a directory (fopen() opens
	 * it, reads find nothing) are mistakes too. */
	char longline[300];
	snprintf(longline, sizeof(longline), "[ushuffled]\ndir = /var/tmp/%0250d"
		 "\n", 0);
	const char *const cases[][2] = {
		{"[ushuffled]\nmax-conns = many\n",
		 ":2: [ushuffled] --max-conns=many: bad value; accepted: "
		 "1..1572864"},
		{"[ushuffled]\nthreads = 2\n\nmax-cons = 3\n",
		 ":4: [ushuffled] max-cons=3: unknown key"},
		{"[ushuffled]\nthreads = 2\nthreads = 3\n",
		 ":3: [ushuffled] threads=3: set before, on line 2; accepted: "
		 "each key once"},
		{longline, ": line 2: too long; accepted: lines of at most"},
	};
	char *out, *err;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		f = fopen(conf, "w");
		fputs(cases[i][0], f);
		fclose(f);
		assert_int_equal(th_ushuffled_run((const char *[]){arg, absent,
					NULL}, &out, &err), 2);
		if (!strstr(err, conf) || !strstr(err, cases[i][1]))
			fail_msg("config error: \"%s\" missing in:\n%s",
				 cases[i][1], err);
		free(out), free(err);
	}
	snprintf(arg, sizeof(arg), "--config=%s", dir);
	assert_int_equal(th_ushuffled_run((const char *[]){arg, absent, NULL},
				       &out, &err), 2);
	if (!strstr(err, "cannot read it: Is a directory"))
		fail_msg("config error for a directory:\n%s", err);
	free(out), free(err);
	assert_int_equal(access(absent + strlen("--dir="), F_OK), -1);
	unlink(conf);
	unlink(log);
	th_rmrf(w.dir);
	th_rmrf(dir);
}

/* GET path from the metrics port with curl: its body (freed by the
 * caller), or NULL when curl failed (HTTP errors fail it too). */
static char *curl(int port, const char *path)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "curl -sSf --max-time 20 "
		 "http://127.0.0.1:%d%s 2>&1", port, path);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t cap = 1 << 16, n = 0;
	char *s = malloc(cap);
	while (n < cap - 1 && !feof(p))
		n += fread(s + n, 1, cap - 1 - n, p);
	s[n] = '\0';
	if (pclose(p)) {
		print_message("curl %s: %s\n", path, s);
		free(s);
		return NULL;
	}
	return s;
}

/* The value of the sample line that starts with name + " ". */
static uint64_t sample(const char *text, const char *name)
{
	char key[160];
	snprintf(key, sizeof(key), "\n%s ", name);
	const char *p = strstr(text, key);
	if (!p)
		fail_msg("no sample %s in:\n%s", name, text);
	return strtoull(p + strlen(key), NULL, 10);
}

/* A worker with --metrics on a port of its own: that port. */
static int spawn_metrics(struct th_worker *w, char *log, size_t n,
			 const char *tag)
{
	w->more[0] = "--metrics=127.0.0.1:0";
	spawn_logged(w, log, n, tag);
	char *text = slurp(log);
	const char *m = strstr(text, "GET /metrics");
	int port = 0;
	const char *pp = strstr(text, "(port ");
	assert_true(m && pp && sscanf(pp, "(port %d)", &port) == 1);
	free(text);
	return port;
}

/* Scrapes while a writer pushes (its connection is open) and after its
 * commit: the traffic, connection, commit and sync counters move. */
static void metrics_scraped_with_curl(void **state)
{
	(void)state;
	if (system("curl --version >/dev/null 2>&1"))
		fail_msg("curl is not installed: tests/bootstrap.sh installs "
			 "it; this test needs a real HTTP client");
	struct th_worker w = {0};
	char log[600];
	int port = spawn_metrics(&w, log, sizeof(log), "opsmetrics");
	char *before = curl(port, "/metrics");
	assert_non_null(before);
	assert_non_null(strstr(before, "# TYPE ushuffled_commit_sync_seconds "
				       "histogram"));
	assert_non_null(strstr(before, "ushuffled_errors_total{kind=\"auth\"} "
				       "0"));
	assert_int_equal(sample(before, "ushuffled_commits_total"), 0);
	struct ush_lib_stats c0, c1;
	ush_lib_stats(&c0);
	/* A job whose writer is open (connected, some batches sent) while
	 * we scrape, then commits. */
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 42,
		.partitions = 8, .target = USH_TARGET_NET, .workers = w.addr};
	ush_writer *wr;
	th_ok(ush_writer_open(&wr, ring, &wo));
	uint8_t buf[1024];
	const uint32_t records = 4000;
	for (uint32_t i = 0; i < records; i++)
		th_ok(ush_writer_write(wr, i % 8, buf, th_rec(buf, 0, i)));
	char *during = NULL;
	for (int i = 0; i < 30000; i++) {
		free(during);
		during = curl(port, "/metrics");
		assert_non_null(during);
		if (sample(during, "ushuffled_received_bytes_total") > 0)
			break;
		usleep(1000);
	}
	assert_int_equal(sample(during, "ushuffled_connections"), 1);
	assert_true(sample(during, "ushuffled_received_bytes_total") > 0);
	assert_int_equal(sample(during, "ushuffled_commits_total"), 0);
	th_ok(ush_writer_commit(wr, NULL));
	ush_writer_free(wr);
	ush_ring_free(ring);
	char *after = curl(port, "/metrics");
	assert_non_null(after);
	fprintf(stderr, "scrape after the job:\n%s", after);
	assert_true(sample(after, "ushuffled_received_bytes_total") >
		    sample(before, "ushuffled_received_bytes_total"));
	assert_true(sample(after, "ushuffled_received_frames_total") >
		    sample(before, "ushuffled_received_frames_total"));
	assert_true(sample(after, "ushuffled_sent_bytes_total") >
		    sample(before, "ushuffled_sent_bytes_total"));
	assert_true(sample(after, "ushuffled_connections_accepted_total") >
		    sample(before, "ushuffled_connections_accepted_total"));
	assert_int_equal(sample(after, "ushuffled_commits_total"), 1);
	assert_int_equal(sample(after, "ushuffled_commit_sync_seconds_count"),
			 1);
	assert_int_equal(sample(after, "ushuffled_commit_sync_seconds_bucket"
				       "{le=\"+Inf\"}"), 1);
	assert_int_equal(sample(after, "ushuffled_shuffles"), 1);
	assert_int_equal(sample(after, "ushuffled_applications"), 1);
	assert_true(sample(after, "ushuffled_stored_bytes") > 0);
	assert_true(sample(after, "ushuffled_open_files") >= 2);
	/* The client library counted the same job. */
	ush_lib_stats(&c1);
	assert_int_equal(c1.writers_committed, c0.writers_committed + 1);
	assert_int_equal(c1.records_written, c0.records_written + records);
	assert_true(c1.net_connects > c0.net_connects);
	assert_true(c1.bytes_stored > c0.bytes_stored);
	/* Other paths and methods are answered, not served. */
	char *none = curl(port, "/nothing");
	assert_null(none);
	free(before), free(during), free(after);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	unlink(log);
}

/* A --dir whose path holds a backslash, a double quote and a newline
 * is a label value escaped as the text format wants it. */
static void metrics_dir_label_escaped(void **state)
{
	(void)state;
	if (system("curl --version >/dev/null 2>&1"))
		fail_msg("curl is not installed: tests/bootstrap.sh installs "
			 "it; this test needs a real HTTP client");
	const char *root = th_scratch("opslabel");
	struct th_worker w = {0};
	char log[600], want[700];
	snprintf(w.dir, sizeof(w.dir), "%.400s/a\"b\\c\nd", root);
	int port = spawn_metrics(&w, log, sizeof(log), NULL);
	char *text = curl(port, "/metrics");
	assert_non_null(text);
	snprintf(want, sizeof(want), "ushuffled_dir_quarantined{dir=\"%.400s"
		 "/a\\\"b\\\\c\\nd\"} 0\n", root);
	if (!strstr(text, want))
		fail_msg("no line %s in\n%s", want, text);
	free(text);
	th_worker_stop(&w);
}

/* Why the commit-sync histogram in s breaks Prometheus' invariants
 * (buckets cumulative, none above the count, which is the +Inf bucket;
 * the sum within the bounds of the buckets its syncs are counted in,
 * give or take slack_ns), or NULL when it holds. */
static const char *sync_histogram_broken(const struct ush_worker_stats *s,
					 uint64_t slack_ns)
{
	const unsigned nb = USH_WORKER_SYNC_BUCKETS;
	uint64_t lo = 0, hi = 0, prev = 0;
	for (unsigned i = 0; i < nb; i++) {
		if (s->sync_le[i] < prev)
			return "a bucket below the one before it";
		uint64_t n = s->sync_le[i] - prev;
		lo += n * (i ? USH_WORKER_SYNC_BUCKET_US(i - 1) * 1000 : 0);
		hi += n * USH_WORKER_SYNC_BUCKET_US(i) * 1000;
		prev = s->sync_le[i];
	}
	if (prev > s->sync_count)
		return "a bucket above the count";
	uint64_t over = s->sync_count - prev; /* above the last bound */
	lo += over * USH_WORKER_SYNC_BUCKET_US(nb - 1) * 1000;
	if (s->sync_ns + slack_ns < lo)
		return "a sum below what its buckets hold";
	if (!over && s->sync_ns > hi + slack_ns)
		return "a sum above what its buckets hold";
	return NULL;
}

/* The histogram of a scrape's text in s; its +Inf bucket must be its
 * count. The sum is in microseconds (%.6f s): slack 1 us. */
static void scraped_histogram(const char *text, struct ush_worker_stats *s)
{
	char name[128];
	for (unsigned i = 0; i < USH_WORKER_SYNC_BUCKETS; i++) {
		snprintf(name, sizeof(name), "ushuffled_commit_sync_seconds_"
			 "bucket{le=\"%g\"}", USH_WORKER_SYNC_BUCKET_US(i) / 1e6);
		s->sync_le[i] = sample(text, name);
	}
	s->sync_count = sample(text, "ushuffled_commit_sync_seconds_count");
	if (sample(text, "ushuffled_commit_sync_seconds_bucket{le=\"+Inf\"}")
	    != s->sync_count)
		fail_msg("+Inf bucket is not the count in:\n%s", text);
	const char *sum = "\nushuffled_commit_sync_seconds_sum ";
	const char *p = strstr(text, sum);
	assert_non_null(p);
	s->sync_ns = (uint64_t)(strtod(p + strlen(sum), NULL) * 1e9 + 0.5);
}

/* Pushes maps 0..j.maps-1 of j in a thread of its own, then sets done. */
struct pusher {
	struct th_job j;
	pthread_t tid;
	atomic_int done;
	int ret;
};

static void *push_maps(void *arg)
{
	struct pusher *p = arg;
	for (uint32_t m = 0; m < p->j.maps && !p->ret; m++)
		p->ret = th_push_map(&p->j, m, 0, NULL);
	atomic_store(&p->done, 1);
	return NULL;
}

/* Scrapes while a job commits map after map: every scrape's histogram
 * holds together. ush_worker_stats() read back to back (a daemon's
 * scrape is far slower, so far less likely to fall between a sync's
 * counter updates), then the daemon's text through curl. */
static void sync_histogram_whole_on_every_scrape(void **state)
{
	(void)state;
	const char *dir = th_tmpdir("opshist");
	char addr[64] = "";
	ush_worker *wk = th_worker_embed(dir, 2, addr, sizeof(addr));
	struct pusher p = {.j = {.workers = addr, .shuffle = 43,
				 .partitions = 4, .maps = 200, .records = 20}};
	assert_int_equal(pthread_create(&p.tid, NULL, push_maps, &p), 0);
	struct ush_worker_stats s;
	unsigned long reads = 0;
	while (!atomic_load(&p.done)) {
		ush_worker_stats(wk, &s);
		const char *why = sync_histogram_broken(&s, 0);
		if (why)
			fail_msg("read %lu: %s: count %llu, +Inf bucket %llu",
				 reads, why, (unsigned long long)s.sync_count,
				 (unsigned long long)s.sync_le[
					 USH_WORKER_SYNC_BUCKETS - 1]);
		reads++;
	}
	pthread_join(p.tid, NULL);
	th_ok(p.ret);
	ush_worker_stats(wk, &s);
	assert_int_equal(s.sync_count, p.j.maps);
	assert_null(sync_histogram_broken(&s, 0));
	ush_worker_free(wk);
	th_rmrf(dir);

	struct th_worker w = {0};
	char log[600];
	int port = spawn_metrics(&w, log, sizeof(log), "opshistd");
	struct pusher pd = {.j = {.workers = w.addr, .shuffle = 44,
				  .partitions = 4, .maps = 40, .records = 20}};
	assert_int_equal(pthread_create(&pd.tid, NULL, push_maps, &pd), 0);
	for (int last = 0; !last;) {
		last = atomic_load(&pd.done);
		char *text = curl(port, "/metrics");
		assert_non_null(text);
		scraped_histogram(text, &s);
		const char *why = sync_histogram_broken(&s, 1000);
		if (why)
			fail_msg("%s in:\n%s", why, text);
		if (last)
			assert_int_equal(s.sync_count, pd.j.maps);
		free(text);
	}
	pthread_join(pd.tid, NULL);
	th_ok(pd.ret);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	unlink(log);
}

/* A client that connects and sends nothing, and one that sends its
 * request a byte every 100 ms (each read used to wait 2 s afresh, so it
 * held the endpoint's only thread as long as it kept trickling): a curl
 * scrape is answered meanwhile, and the trickler is cut off long before
 * its 100 bytes are out. */
static void metrics_outlive_idle_and_trickling_clients(void **state)
{
	(void)state;
	if (system("curl --version >/dev/null 2>&1"))
		fail_msg("curl is not installed: tests/bootstrap.sh installs it");
	struct th_worker w = {0};
	char log[600];
	int port = spawn_metrics(&w, log, sizeof(log), "opsslow");
	int idle = th_tcp_connect(port);
	pid_t trickler = fork();
	assert_true(trickler >= 0);
	if (trickler == 0) {
		int fd = th_tcp_connect(port);
		static const char req[] = "GET /metrics HTTP/1.0\r\nX-Pad: ";
		for (int i = 0; i < 100; i++) {
			char c = i < (int)sizeof(req) - 1 ? req[i] : 'a', b;
			if (send(fd, &c, 1, MSG_NOSIGNAL) != 1 ||
			    recv(fd, &b, 1, MSG_DONTWAIT) == 0)
				_exit(0); /* cut off */
			usleep(100000);
		}
		_exit(1); /* still served after 100 bytes and 10 s */
	}
	char *text = curl(port, "/metrics");
	assert_non_null(text);
	assert_non_null(strstr(text, "\nushuffled_connections "));
	free(text);
	int st;
	assert_int_equal(waitpid(trickler, &st, 0), trickler);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail_msg("a client sending a byte every 100 ms was served on");
	char b;
	assert_int_equal(recv(idle, &b, 1, 0), 0); /* closed, not kept */
	close(idle);
	th_worker_stop(&w);
	th_rmrf(w.dir);
	unlink(log);
}

static char notify_env[160];
static const char *watchdog_env = "400000";

static void set_notify_env(void)
{
	putenv(notify_env);
	setenv("WATCHDOG_USEC", watchdog_env, 1);
}

/* Skips the test when ushuffled was built without libsystemd. */
static void need_systemd(void)
{
	char *out, *err;
	th_ushuffled_run((const char *[]){"--help", NULL}, &out, &err);
	int built = !strstr(out, "not in this build");
	free(out), free(err);
	if (!built) {
		print_message("SKIPPED: ushuffled was built without "
			      "libsystemd: readiness NOT tested\n");
		skip();
	}
}

/* A datagram socket at a, a path of this process's, which notify_env
 * names to the daemons set_notify_env() starts. */
static int notify_socket(struct sockaddr_un *a)
{
	*a = (struct sockaddr_un){.sun_family = AF_UNIX};
	snprintf(a->sun_path, sizeof(a->sun_path), "/tmp/ush-notify-%d",
		 (int)getpid());
	unlink(a->sun_path);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)a, sizeof(*a)), 0);
	snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s",
		 a->sun_path);
	return fd;
}

/* Waits (30 s at most) for a datagram holding text on fd. */
static void expect_notify(int fd, const char *text)
{
	char buf[512];
	for (int i = 0; i < 100; i++) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 300) <= 0)
			continue;
		ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if (strstr(buf, text))
			return;
	}
	fail_msg("no \"%s\" on the notify socket in 30 s", text);
}

/* systemd's protocol with a real socket: READY=1 once serving, then
 * WATCHDOG=1 pings (WatchdogSec= sets WATCHDOG_USEC), STOPPING=1. */
static void notify_socket_gets_ready_and_watchdog(void **state)
{
	(void)state;
	need_systemd();
	const char *dir = th_tmpdir("opsnotify");
	struct sockaddr_un a;
	int fd = notify_socket(&a);
	watchdog_env = "400000";
	struct th_worker w = {0};
	snprintf(w.dir, sizeof(w.dir), "%s/w", dir);
	w.child_setup = set_notify_env;
	th_worker_spawn(&w, "127.0.0.1", 0, 1);
	expect_notify(fd, "READY=1");
	expect_notify(fd, "WATCHDOG=1");
	expect_notify(fd, "WATCHDOG=1");
	kill(w.pid, SIGTERM);
	expect_notify(fd, "STOPPING=1");
	th_worker_stop(&w);
	close(fd);
	unlink(a.sun_path);
	th_rmrf(dir);
}

/* The next datagram holding WATCHDOG=1 on fd (30 s at most), as the
 * kernel's receive time in ns: when the daemon sent it, however late
 * this process reads it. */
static uint64_t next_ping_ns(int fd)
{
	for (int i = 0; i < 100; i++) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 300) <= 0)
			continue;
		char buf[512], cbuf[CMSG_SPACE(sizeof(struct timespec))];
		struct iovec iov = {buf, sizeof(buf) - 1};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1,
				   .msg_control = cbuf,
				   .msg_controllen = sizeof(cbuf)};
		ssize_t n = recvmsg(fd, &m, 0);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		if (!strstr(buf, "WATCHDOG=1") || !c ||
		    c->cmsg_type != SCM_TIMESTAMPNS)
			continue;
		struct timespec ts;
		memcpy(&ts, CMSG_DATA(c), sizeof(ts));
		return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
	fail_msg("no WATCHDOG=1 on the notify socket in 30 s");
	return 0;
}

/* WATCHDOG_USEC=1 (half of it rounded to 0, and the ping loop spun)
 * and values systemd refuses: the daemon serves on and says why; it
 * pings as for the shortest period kept (400 ms): each ping follows a
 * 200 ms sleep, so the kernel's receive times of three pings in a row
 * lie at least that far apart, however slow the machine (a spinning
 * loop sends them microseconds apart); or it does not ping at all. */
static void watchdog_period_too_short_or_refused(void **state)
{
	(void)state;
	need_systemd();
	static const char *const cases[][2] = {
		{"1", "WATCHDOG_USEC=1 is below 400000 (worker threads pass "
		      "every 100 ms): pinging as for 400000, every 200000 us"},
		{"junk", "WATCHDOG_USEC=junk: Invalid argument; accepted: "},
		{"0", "WATCHDOG_USEC=0: Invalid argument; accepted: "},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sockaddr_un a;
		int fd = notify_socket(&a);
		int on = 1;
		assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS,
					    &on, sizeof(on)), 0);
		watchdog_env = cases[i][0];
		struct th_worker w = {.child_setup = set_notify_env};
		char log[600], buf[512];
		spawn_logged(&w, log, sizeof(log), "opswd");
		expect_notify(fd, "READY=1");
		if (i == 0) {
			uint64_t t = next_ping_ns(fd);
			for (int k = 0; k < 2; k++) {
				uint64_t next = next_ping_ns(fd);
				if (next - t < 200000000u)
					fail_msg("WATCHDOG_USEC=1: pings %llu us "
						 "apart",
						 (unsigned long long)
						 (next - t) / 1000);
				t = next;
			}
		} else {
			/* Five of the daemon's 200 ms steps: no ping. */
			struct pollfd p = {fd, POLLIN, 0};
			while (poll(&p, 1, 1000) > 0) {
				ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
				buf[n > 0 ? n : 0] = '\0';
				if (strstr(buf, "WATCHDOG=1"))
					fail_msg("WATCHDOG_USEC=%s: pinged",
						 cases[i][0]);
			}
		}
		assert_true(th_worker_alive(&w));
		th_worker_stop(&w);
		char *text = slurp(log);
		if (!strstr(text, cases[i][1]))
			fail_msg("WATCHDOG_USEC=%s: \"%s\" missing in:\n%s",
				 cases[i][0], cases[i][1], text);
		free(text);
		close(fd);
		unlink(a.sun_path);
		th_rmrf(w.dir);
		unlink(log);
	}
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(version_and_option_errors),
		cmocka_unit_test(one_prefix_startup_line_and_hello_at_info),
		cmocka_unit_test(config_file_sets_options),
		cmocka_unit_test(metrics_scraped_with_curl),
		cmocka_unit_test_teardown(metrics_dir_label_escaped,
					  th_teardown),
		cmocka_unit_test(metrics_outlive_idle_and_trickling_clients),
		cmocka_unit_test(sync_histogram_whole_on_every_scrape),
		cmocka_unit_test(notify_socket_gets_ready_and_watchdog),
		cmocka_unit_test(watchdog_period_too_short_or_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
