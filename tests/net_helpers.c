/*
 * The test helper library's worker helpers (net_helpers.h).
 */
#define _GNU_SOURCE
#include "net_helpers.h"

/* Workers still running when the test exits (a failed assertion skips
 * its teardown) are killed then. */
static pid_t th_spawned[64];

static void th_kill_spawned(void)
{
	for (unsigned i = 0; i < 64; i++)
		if (th_spawned[i] > 0)
			kill(th_spawned[i], SIGKILL);
}

void th_track(pid_t old, pid_t pid)
{
	static int registered;
	if (!registered && (registered = 1))
		atexit(th_kill_spawned);
	for (unsigned i = 0; i < 64; i++)
		if (th_spawned[i] == old) {
			th_spawned[i] = pid;
			return;
		}
}

void th_worker_spawn(struct th_worker *w, const char *host, int port,
		     unsigned threads)
{
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	char listen[96], dir[600], thr[32];
	snprintf(listen, sizeof(listen), "--listen=%s:%d", host, port);
	snprintf(dir, sizeof(dir), "--dir=%s", w->dir);
	snprintf(thr, sizeof(thr), "--threads=%u", threads);
	const char *argv[16];
	unsigned n = 0;
	if (w->ns[0]) {
		argv[n++] = "ip";
		argv[n++] = "netns";
		argv[n++] = "exec";
		argv[n++] = w->ns;
		argv[n++] = USH_USHUFFLED_PATH;
	} else {
		argv[n++] = "ushuffled";
	}
	argv[n++] = listen;
	argv[n++] = dir;
	argv[n++] = thr;
	argv[n++] = "--log-level=info";
	if (w->extra)
		argv[n++] = w->extra;
	for (unsigned i = 0; i < 4 && w->more[i]; i++)
		argv[n++] = w->more[i];
	argv[n] = NULL;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		struct rlimit rl = {w->nofile, w->nofile};
		if (w->nofile && setrlimit(RLIMIT_NOFILE, &rl))
			_exit(126);
		int efd = w->errlog ? open(w->errlog, O_WRONLY | O_CREAT |
					   O_APPEND, 0644) : -1;
		if (w->errlog && (efd < 0 || dup2(efd, 2) < 0))
			_exit(126);
		if (efd > 2)
			close(efd);
		if (w->child_setup)
			w->child_setup();
		if (w->ns[0])
			execvp("ip", (char *const *)argv);
		else
			execv(USH_USHUFFLED_PATH, (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	FILE *f = fdopen(pfd[0], "r");
	char line[128] = "";
	int got = fgets(line, sizeof(line), f) &&
		  sscanf(line, "ushuffled: port %d", &w->port) == 1;
	fclose(f);
	if (!got) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail_msg("ushuffled did not start (line '%s')", line);
	}
	w->pid = pid;
	th_track(0, pid);
	snprintf(w->addr, sizeof(w->addr), "%s:%d", host, w->port);
}

void th_worker_fresh(struct th_worker *w, const char *tag, unsigned threads,
		     const char *extra, const char *more)
{
	*w = (struct th_worker){0};
	snprintf(w->dir, sizeof(w->dir), "%s", th_tmpdir(tag));
	w->extra = extra;
	w->more[0] = more;
	th_worker_spawn(w, "127.0.0.1", 0, threads);
}

int th_ushuffled_run(const char *const *args, char **out, char **err)
{
	FILE *o = tmpfile(), *e = tmpfile();
	const char *argv[16] = {"ushuffled"};
	for (unsigned i = 0; args[i] && i < 14; i++)
		argv[i + 1] = args[i];
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fileno(o), 1);
		dup2(fileno(e), 2);
		execv(USH_USHUFFLED_PATH, (char *const *)argv);
		_exit(127);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	char *bufs[2];
	FILE *fs[2] = {o, e};
	for (int i = 0; i < 2; i++) {
		long n = ftell(fs[i]);
		bufs[i] = calloc(1, (size_t)n + 1);
		rewind(fs[i]);
		assert_int_equal(fread(bufs[i], 1, (size_t)n, fs[i]), n);
		fclose(fs[i]);
	}
	*out = bufs[0];
	*err = bufs[1];
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void th_worker_stop(struct th_worker *w)
{
	int st;
	if (w->pid <= 0)
		return; /* never kill(0): that is our process group */
	kill(w->pid, SIGTERM);
	assert_int_equal(waitpid(w->pid, &st, 0), w->pid);
	th_track(w->pid, 0);
	w->pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("ushuffled exited with status 0x%x", st);
}

void th_worker_kill(struct th_worker *w)
{
	int st;
	if (w->pid <= 0)
		return;
	kill(w->pid, SIGKILL);
	waitpid(w->pid, &st, 0);
	th_track(w->pid, 0);
	w->pid = 0;
}

void th_worker_restart(struct th_worker *w, unsigned threads)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)w->port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	for (unsigned i = 0; i < 1000; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
		assert_true(fd >= 0);
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		int busy = bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
			   errno == EADDRINUSE;
		close(fd);
		if (!busy)
			break;
		usleep(10000);
	}
	th_worker_spawn(w, "127.0.0.1", w->port, threads);
}

void th_workers_spawn(struct th_worker *wk, unsigned n, const char *tag,
		      char *list, size_t len)
{
	int at = 0;
	for (unsigned i = 0; i < n; i++) {
		snprintf(wk[i].dir, sizeof(wk[i].dir), "%s", th_tmpdir(tag));
		th_worker_spawn(&wk[i], "127.0.0.1", 0, 1);
		at += snprintf(list + at, len - (size_t)at, "%s%s", i ? "," : "",
			       wk[i].addr);
	}
}

void th_workers_stop(struct th_worker *wk, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		th_worker_stop(&wk[i]);
		th_rmrf(wk[i].dir);
	}
}

void th_worker_sigstop(struct th_worker *w)
{
	int st;
	assert_int_equal(kill(w->pid, SIGSTOP), 0);
	assert_int_equal(waitpid(w->pid, &st, WUNTRACED), w->pid);
	assert_true(WIFSTOPPED(st));
}

int th_worker_alive(struct th_worker *w)
{
	int st;
	return w->pid > 0 && waitpid(w->pid, &st, WNOHANG) == 0;
}

ush_worker *th_worker_embed_pool(const char *dir, unsigned threads,
				 size_t pool, char *addr, size_t n)
{
	struct ush_worker_opts o;
	char listen[64];
	snprintf(listen, sizeof(listen), "%s", *addr ? addr : "127.0.0.1:0");
	ush_worker_opts_init(&o);
	o.listen = listen;
	o.dir = dir;
	o.threads = threads;
	o.pool_bytes = pool;
	o.log_level = 0;
	th_worker_secret(&o);
	ush_worker *wk;
	th_ok(ush_worker_create(&wk, &o));
	th_ok(ush_worker_start(wk));
	snprintf(addr, n, "127.0.0.1:%d", ush_worker_port(wk));
	return wk;
}

ush_worker *th_worker_embed(const char *dir, unsigned threads, char *addr,
			    size_t n)
{
	return th_worker_embed_pool(dir, threads, 0, addr, n);
}

int th_listen(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	socklen_t al = sizeof(a);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

int th_tcp_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	struct timeval tv = {30, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

void th_send_all(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

int th_recv_n(int fd, uint8_t *b, size_t n)
{
	/* A signal is no end (io_uring task work of a ring the thread
	 * freed interrupts a recv that has a timeout); the socket's
	 * deadline fails the test. */
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(fd, b + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return -1;
		if (r < 0)
			fail_msg("worker neither answered nor closed: %s",
				 strerror(errno));
		got += (size_t)r;
	}
	return 0;
}

size_t th_rec(uint8_t *buf, uint32_t m, uint32_t i)
{
	size_t len = 8 + (i * 37u + m * 11u) % 700u;
	uint64_t id = (uint64_t)m << 32 | i;
	memcpy(buf, &id, 8);
	th_fill(buf + 8, len - 8, id * 2654435761u + 1);
	return len;
}

int th_push_until_error(ush_writer *w, atomic_ulong *records)
{
	uint8_t buf[1024];
	int ret = 0;
	for (uint32_t i = 0; !ret; i++) {
		ret = ush_writer_write(w, i % 8, buf, th_rec(buf, 0, i));
		atomic_fetch_add(records, 1);
	}
	return ret;
}

void th_job_free(struct th_job *j)
{
	if (j->statuses)
		th_statuses_free(j->statuses, j->maps);
}

int th_push_map(const struct th_job *j, uint32_t m, uint32_t a,
		struct ush_writer_stats *st)
{
	ush_ring *ring;
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.codec = j->codec;
	ro.pool_bytes = 8u << 20;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = j->shuffle,
		.map = m, .attempt = a, .partitions = j->partitions,
		.target = USH_TARGET_NET, .workers = j->workers,
		.timeout_ms = j->timeout_ms, .send_zc = j->send_zc,
		.ioengine = j->ioengine, .app = j->app,
		.replicas = j->replicas, .seal_key = j->seal_key};
	ush_writer *w;
	int ret = ush_writer_open(&w, ring, &wo);
	uint8_t buf[1024];
	for (uint32_t i = 0; !ret && i < j->records; i++) {
		size_t len = th_rec(buf, m, i);
		ret = ush_writer_write(w, i % j->partitions, buf, len);
		if (j->pushed)
			j->pushed(j, m, i);
	}
	if (!ret)
		ret = ush_writer_commit(w, NULL);
	struct ush_status bst;
	if (!ret && j->statuses && !(ret = ush_writer_status(w, &bst))) {
		void *copy = malloc(bst.len);
		if (copy) {
			memcpy(copy, bst.data, bst.len);
			free((void *)j->statuses[m].data);
			j->statuses[m] = (struct ush_status){copy, bst.len};
		} else {
			ret = -ENOMEM;
		}
	}
	if (st && w)
		ush_writer_stats(w, st);
	ush_writer_free(w);
	ush_ring_free(ring);
	return ret;
}

void th_verify(const struct th_job *j)
{
	uint64_t total = 0;
	uint8_t exp[1024];
	uint8_t *seen = calloc((size_t)j->maps * j->records, 1);
	assert_non_null(j->statuses);
	for (uint32_t m = 0; m < j->maps; m++)
		if (!j->statuses[m].data)
			fail_msg("map %u has no status: not committed", m);
	uint32_t step = j->range ? j->range : 1;
	for (uint32_t p = 0; p < j->partitions; p += step) {
		ush_reader *r;
		struct ush_reader_opts ro;
		ush_reader_opts_init(&ro);
		ro.partition = p;
		ro.npartitions = j->partitions - p < step ? j->partitions - p :
							    step;
		ro.statuses = j->statuses;
		ro.nstatuses = j->maps;
		ro.timeout_ms = 20000;
		ro.seal_keys = j->seal_key;
		ro.nseal_keys = j->seal_key != NULL;
		ro.require_sealed = j->seal_key != NULL;
		th_ok(ush_reader_open(&r, &ro));
		const void *rec;
		size_t len;
		int ret;
		uint32_t last = p;
		while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
			uint64_t id;
			assert_true(len >= 8);
			memcpy(&id, rec, 8);
			uint32_t m = (uint32_t)(id >> 32), i = (uint32_t)id;
			assert_true(m < j->maps && i < j->records);
			assert_int_equal(i % j->partitions,
					 ush_reader_partition(r));
			assert_true(ush_reader_partition(r) >= last);
			last = ush_reader_partition(r);
			assert_int_equal(th_rec(exp, m, i), len);
			assert_memory_equal(exp, rec, len);
			assert_int_equal(seen[(size_t)m * j->records + i], 0);
			seen[(size_t)m * j->records + i] = 1;
			total++;
			if (j->checked)
				j->checked(j, total);
		}
		if (ret)
			fail_msg("reader partition %u: %d %s: %s", p, ret,
				 ush_err_name(ret), ush_last_error());
		if (j->rsum) {
			struct ush_reader_stats rs;
			ush_reader_stats(r, &rs);
			j->rsum->failovers += rs.failovers;
			j->rsum->dup_batches += rs.dup_batches;
			j->rsum->resumed_batches += rs.resumed_batches;
		}
		ush_reader_free(r);
	}
	free(seen);
	assert_int_equal(total, (uint64_t)j->maps * j->records);
}
