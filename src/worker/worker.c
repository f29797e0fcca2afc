/* The worker object: options, listeners, threads; see worker.h. */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"
#include "worker/attempt.h"
#include "worker/files.h"
#include "worker/group.h"
#include "worker/loop.h"
#include "worker/state.h"
#include "worker/verify.h"
#include "worker/wal.h"
#include "worker/crash.h"
#include "net/addr.h"
#include "net/auth.h"

#include <arpa/inet.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static const struct ush_worker_opts worker_defaults = {
	.size = sizeof(struct ush_worker_opts),
	.listen = "127.0.0.1:7337",
	.log_level = 1,
	.window = 4u << 20,
	.max_frame = 64u << 20,
	.pool_bytes = 32u << 20,
	.direct = 1,
	.hello_timeout_ms = 10000,
	.app_ttl_ms = 300000,
	.idle_timeout_ms = 300000,
	.max_conns = 1024,
	.drain_timeout_ms = 20000,
	.max_app_conns = 512,
	.max_app_shuffles = 4096,
	.max_app_attempts = 65536,
	.max_app_commits = 262144,
	.max_apps = 16384,
	.max_app_fetch_bytes = 256u << 20,
};

void ush_worker_opts_init_size(struct ush_worker_opts *o, size_t size)
{
	ushi_struct_init(o, size, &worker_defaults, sizeof(*o));
}

/* Since the worker links libushuffle, the core's state is one per
 * process: these are libushuffle's, kept for callers built against 0.4. */
const char *ush_worker_last_error(void)
{
	return ush_last_error();
}

void ush_worker_set_log(ush_log_fn fn, void *arg)
{
	ush_set_log(fn, arg);
}

uint64_t ush_worker_alloc_count(void)
{
	return ush_alloc_count();
}

#define LOAD(a) atomic_load_explicit(&(a), memory_order_relaxed)

void ush_worker_stats_size(const ush_worker *cw, struct ush_worker_stats *st,
			   size_t size)
{
	struct ush_worker *wk = (struct ush_worker *)cw; /* its locks */
	const struct wk_metrics *m = &wk->m;
	struct ush_worker_stats s = {.size = sizeof(s)};
	s.bytes_in = LOAD(m->bytes_in), s.bytes_out = LOAD(m->bytes_out);
	s.frames_in = LOAD(m->frames_in), s.frames_out = LOAD(m->frames_out);
	s.conns_accepted = LOAD(m->accepted), s.conns_refused = LOAD(m->refused);
	s.conns_open = LOAD(wk->nconns);
	s.commits = LOAD(m->commits), s.drops = LOAD(m->drops);
	s.bytes_in_place = LOAD(m->bytes_in_place);
	s.fetch_heap_allocs = LOAD(m->fetch_heap_allocs);
	s.fetch_reads = LOAD(m->fetch_reads);
	pthread_mutex_lock(&wk->m.sync_lock);
	s.sync_count = m->sync_count, s.sync_ns = m->sync_ns;
	uint64_t sum = 0;
	for (unsigned i = 0; i < USH_WORKER_SYNC_BUCKETS; i++)
		s.sync_le[i] = sum += m->sync_bucket[i];
	pthread_mutex_unlock(&wk->m.sync_lock);
	for (unsigned i = 0; i < USH_WORKER_ERR_KINDS; i++)
		s.errors[i] = LOAD(m->errors[i]);
	uint64_t now = ushi_now_ns();
	for (unsigned i = 0; i < wk->nthreads; i++) { /* 0 before start */
		struct wk_thread *t = &wk->threads[i];
		uint64_t pass = LOAD(t->pass_ns);
		s.open_files += LOAD(t->nopen);
		if (pass && now > pass && (now - pass) / 1000000 > s.stalled_ms)
			s.stalled_ms = (now - pass) / 1000000;
	}
	pthread_mutex_lock(&wk->lock);
	s.expiries = LOAD(m->expiries); /* with the drops it counts */
	s.apps = wk->napps;
	s.shuffles = wk->nowners;
	s.decommissioning = atomic_load(&wk->decom);
	s.bytes_stored = wk_app_bytes(wk);
	pthread_mutex_unlock(&wk->lock);
	ushi_struct_init(st, size, &s, sizeof(s));
}

/* "4 MiB", "126.0 GiB": bytes for a person, in powers of 1024. */
static const char *fmt_bytes(char *b, size_t n, uint64_t v)
{
	static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB",
					   "TiB", "PiB"};
	unsigned i = 0;
	double d = (double)v;
	while (d >= 1024 && i < 5)
		d /= 1024, i++;
	if (!i)
		snprintf(b, n, "%llu bytes", (unsigned long long)v);
	else
		snprintf(b, n, v % (1ull << (10 * i)) ? "%.1f %s" : "%.0f %s",
			 d, unit[i]);
	return b;
}

/* One line with what an operator checks first: where it serves and
 * stores, and the limits in force (after defaults were resolved). */
static void log_start(struct ush_worker *wk)
{
	const struct ush_worker_opts *o = &wk->o;
	char win[32], frame[32], bytes[32], fetch[32];
	wk_log(wk, 1, "listening on %s:%d with %u thread%s, dir %s; limits: "
	       "%u connections, %u open log files per thread, window %s, "
	       "max frame %s, %u applications, per application %u "
	       "connections, %u shuffles, %s stored, %u attempts, %u "
	       "commits, %s of FETCH plans; app ttl %u ms; auth %s; "
	       "commits %s", wk->host,
	       wk->port, wk->nthreads, wk->nthreads == 1 ? "" : "s",
	       wk->dirlist, o->max_conns, wk->open_max,
	       fmt_bytes(win, sizeof(win), o->window),
	       fmt_bytes(frame, sizeof(frame), o->max_frame),
	       o->max_apps, o->max_app_conns, o->max_app_shuffles,
	       fmt_bytes(bytes, sizeof(bytes), o->max_app_bytes),
	       o->max_app_attempts, o->max_app_commits,
	       fmt_bytes(fetch, sizeof(fetch), o->max_app_fetch_bytes),
	       o->app_ttl_ms,
	       wk->secret || wk->secrets_dirfd >= 0 ?
		       (o->insecure ? "optional (--insecure)" : "required") :
		       "none (--insecure)",
	       o->sync == USH_WORKER_SYNC_NONE ?
		       "unsynced (--sync=none: lost at a host crash)" :
		       "synced (--sync=full)");
}

/* Splits "HOST:PORT" ("[v6]:PORT" too) into host and port. */
static int split_hostport(const char *s, char *host, size_t n, int *port)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s)
		return -EINVAL;
	size_t hl = (size_t)(colon - s);
	if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') {
		s++;
		hl -= 2;
	}
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (hl >= n || *end || end == colon + 1 || p < 0 || p > 65535)
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = 0;
	*port = (int)p;
	return 0;
}

static int listen_one(const struct addrinfo *ai, int port)
{
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) {
		int e = -errno;
		close(fd);
		return e;
	}
	struct sockaddr_storage ss;
	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port =
			htons((uint16_t)port);
	if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) ||
	    listen(fd, 1024)) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

/* Binds one listener per thread on the same port; the first one picks
 * the port when it is 0. */
static int bind_all(struct ush_worker *wk, int port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
			*ai;
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	int ret = getaddrinfo(wk->host, ps, &hints, &ai);
	if (ret)
		return wk_refuse(-EINVAL, "worker: resolve %s: %s", wk->host,
				gai_strerror(ret));
	for (unsigned i = 0; i < wk->nthreads; i++) {
		int fd = listen_one(ai, port);
		if (fd < 0) {
			freeaddrinfo(ai);
			return ushi_fail(fd, "worker: listen on %s:%d", wk->host,
					port);
		}
		wk->threads[i].lfd = fd;
		if (port == 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			getsockname(fd, (struct sockaddr *)&ss, &sl);
			port = ntohs(ss.ss_family == AF_INET ?
				     ((struct sockaddr_in *)&ss)->sin_port :
				     ((struct sockaddr_in6 *)&ss)->sin6_port);
		}
	}
	freeaddrinfo(ai);
	wk->port = port;
	return 0;
}

/* The inode of a socket listening on port, from /proc/net/tcp{,6}. */
static unsigned long listen_inode(int port)
{
	static const char *tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	unsigned long inode = 0;
	for (unsigned i = 0; !inode && i < 2; i++) {
		FILE *f = fopen(tables[i], "r");
		char line[512];
		while (f && !inode && fgets(line, sizeof(line), f)) {
			char local[80];
			unsigned st;
			unsigned long ino;
			if (sscanf(line, "%*d: %79s %*s %x %*s %*s %*s %*s %*s "
				   "%lu", local, &st, &ino) != 3 || st != 0x0a)
				continue;
			const char *c = strrchr(local, ':');
			if (c && strtol(c + 1, NULL, 16) == port)
				inode = ino;
		}
		if (f)
			fclose(f);
	}
	return inode;
}

/* "pid N (comm)" of the process listening on port, as far as /proc
 * lets us see, or "another process" (returns false then). */
static bool port_holder(int port, char *who, size_t n)
{
	snprintf(who, n, "another process");
	unsigned long inode = listen_inode(port);
	char want[64], path[300], link[64];
	snprintf(want, sizeof(want), "socket:[%lu]", inode);
	DIR *proc = inode ? opendir("/proc") : NULL;
	struct dirent *p;
	while (proc && (p = readdir(proc))) {
		int pid = atoi(p->d_name);
		snprintf(path, sizeof(path), "/proc/%s/fd", p->d_name);
		DIR *fds = pid > 0 ? opendir(path) : NULL;
		struct dirent *fd;
		bool found = false;
		while (fds && !found && (fd = readdir(fds))) {
			snprintf(path, sizeof(path), "/proc/%d/fd/%s", pid,
				 fd->d_name);
			ssize_t k = readlink(path, link, sizeof(link) - 1);
			found = k > 0 && (link[k] = 0, !strcmp(link, want));
		}
		if (fds)
			closedir(fds);
		if (found) {
			char comm[64] = "?";
			snprintf(path, sizeof(path), "/proc/%d/comm", pid);
			FILE *f = fopen(path, "r");
			if (f && fgets(comm, sizeof(comm), f))
				comm[strcspn(comm, "\n")] = 0;
			if (f)
				fclose(f);
			snprintf(who, n, "pid %d (%s)", pid, comm);
			break;
		}
	}
	if (proc)
		closedir(proc);
	return strcmp(who, "another process") != 0;
}

#define PORT_WAIT_MS 10000u

/* The listeners share their port with SO_REUSEPORT, which the kernel
 * also grants another process of the same user: it would then split the
 * connections. A plain bind first tells whether anyone listens there. */
static int port_free(struct ush_worker *wk, int port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
			*ai;
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(wk->host, ps, &hints, &ai))
		return 0; /* bind_all reports it */
	char who[128];
	int e = EADDRINUSE;
	/* A listener no process holds belongs to a worker that was killed
	 * with this --dir (its lock is ours now): its rings give their
	 * sockets back once their last I/O ends. Wait for that, a while. */
	for (unsigned i = 0; e == EADDRINUSE; i++) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int one = 1;
		e = 0;
		if (fd >= 0) {
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
				   sizeof(one));
			if (bind(fd, ai->ai_addr, ai->ai_addrlen))
				e = errno;
			close(fd);
		}
		if (e != EADDRINUSE || port_holder(port, who, sizeof(who)) ||
		    i == PORT_WAIT_MS / 50)
			break;
		if (!i)
			wk_log(wk, 0, "%s:%d is still held by a stopped "
			       "worker's sockets: waiting up to %u ms",
			       wk->host, port, PORT_WAIT_MS);
		usleep(50000);
	}
	freeaddrinfo(ai);
	if (e != EADDRINUSE)
		return 0;
	return ushi_fail(-EADDRINUSE, "worker: %s:%d is in use by %s",
			wk->host, port, who);
}

/* Is every address host names a loopback one (net_addr_loopback())? */
static bool loopback_only(const char *host)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	if (!*host || getaddrinfo(host, "0", &hints, &ai))
		return false; /* "" is every interface */
	bool lo = true;
	for (struct addrinfo *a = ai; a && lo; a = a->ai_next)
		lo = net_addr_loopback(a->ai_addr);
	freeaddrinfo(ai);
	return lo;
}

/* The secrets (options secret_file, secret, secrets_dir) and the rules
 * of --insecure. */
static int auth_setup(struct ush_worker *wk, const char *host)
{
	const struct ush_worker_opts *o = &wk->o;
	uint8_t key[USHI_SECRET_MAX];
	int n = 0;
	if (o->insecure && !o->insecure_non_loopback && !loopback_only(host))
		return wk_refuse(-EINVAL, "worker: --insecure on %s, which is not "
				"a loopback address: anyone who reaches it could "
				"read, inject and drop every application's "
				"shuffles. Give a secret (docs/security.md), or "
				"add --insecure-non-loopback if the network is "
				"trusted", host);
	if (o->secret_file) {
		bool loose;
		n = auth_read_secret(AT_FDCWD, o->secret_file, false, key,
				     &loose);
		if (n < 0)
			return n;
		if (loose)
			wk_log(wk, 0, "secret file %s is readable by group or "
			       "others: chmod 600 it", o->secret_file);
	} else if (o->secret || o->secret_len) {
		int ret = o->secret ? auth_secret_len_ok(o->secret_len,
							 "given") :
				      wk_refuse(-EINVAL, "worker: NULL secret");
		if (ret)
			return ret;
		memcpy(key, o->secret, o->secret_len);
		n = (int)o->secret_len;
	}
	if (n) {
		wk->secret = ushi_malloc((size_t)n);
		if (!wk->secret)
			return ushi_fail(-ENOMEM, "worker: allocation");
		memcpy(wk->secret, key, (size_t)n);
		wk->secret_len = (size_t)n;
		explicit_bzero(key, sizeof(key));
	}
	if (o->secrets_dir) {
		wk->secrets_dirfd = open(o->secrets_dir, O_RDONLY | O_DIRECTORY |
					 O_CLOEXEC);
		if (wk->secrets_dirfd < 0)
			return ushi_fail(-errno, "worker: --secrets-dir=%s",
					o->secrets_dir);
	}
	if (!wk->secret && wk->secrets_dirfd < 0 && !o->insecure)
		return wk_refuse(-EINVAL, "worker: no secret: give "
				"--secret-file, --secrets-dir or $USHUFFLE_SECRET "
				"(docs/security.md), or --insecure on a loopback "
				"address");
	return 0;
}

/* The default bytes quota of an application: half of the directories'
 * file systems (unbounded where statvfs fails). */
static uint64_t half_fs(struct ush_worker *wk)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < wk->ndirs; i++) {
		struct statvfs sv;
		if (fstatvfs(wk->dirs[i].fd, &sv))
			return UINT64_MAX;
		sum += (uint64_t)sv.f_blocks * sv.f_frsize / 2;
	}
	return sum;
}

int ush_worker_create(ush_worker **out, const struct ush_worker_opts *opts)
{
	const struct ush_worker_opts *def = &worker_defaults;
	struct ush_worker_opts o;
	*out = NULL;
	int ret = ushi_opts_load(&o, def, sizeof(o), opts, "worker options");
	if (ret)
		return ret;
	opts = &o;
	struct ush_worker *wk = ushi_calloc(1, sizeof(*wk));
	if (!wk)
		return ushi_fail(-ENOMEM, "worker: allocation");
	wk->o = o;
	/* Zero fields take the defaults. */
#define TAKE_DEFAULT(f) (wk->o.f = wk->o.f ? wk->o.f : def->f)
	TAKE_DEFAULT(listen);
	TAKE_DEFAULT(window);
	TAKE_DEFAULT(max_frame);
	TAKE_DEFAULT(pool_bytes);
	TAKE_DEFAULT(hello_timeout_ms);
	TAKE_DEFAULT(app_ttl_ms);
	TAKE_DEFAULT(idle_timeout_ms);
	TAKE_DEFAULT(max_conns);
	TAKE_DEFAULT(drain_timeout_ms);
	TAKE_DEFAULT(max_app_conns);
	TAKE_DEFAULT(max_app_shuffles);
	TAKE_DEFAULT(max_app_attempts);
	TAKE_DEFAULT(max_app_commits);
	TAKE_DEFAULT(max_apps);
	TAKE_DEFAULT(max_app_fetch_bytes);
#undef TAKE_DEFAULT
	/* Log buffers of 1 MiB, or a quarter of a smaller pool. */
	for (uint32_t fs = 1u << 20; !wk->o.flush_size; fs /= 2)
		if (fs <= 16384 || (size_t)fs * 4 <= wk->o.pool_bytes)
			wk->o.flush_size = fs;
	wk->secrets_dirfd = -1;
	wk->log_fd = -1;
	wk->decom_left = SIZE_MAX;
	/* Tests only: a crash at a step of the commit order. */
	const char *crash = getenv("USHUFFLED_TEST_CRASH");
	if (crash && *crash && wk_crash_parse(wk, crash))
		fprintf(stderr, "ushuffled: USHUFFLED_TEST_CRASH=%s: not "
			"step:n (issued, written, logged, data, acked): "
			"ignored\n", crash);
	pthread_mutex_init(&wk->lock, NULL);
	pthread_cond_init(&wk->busy_cv, NULL);
	pthread_mutex_init(&wk->log_lock, NULL);
	pthread_mutex_init(&wk->id_lock, NULL);
	wk_group_init(&wk->grp);
	pthread_mutex_init(&wk->m.sync_lock, NULL);
	int port = 0;
	char host[256];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	wk->nthreads = wk->o.threads ? wk->o.threads :
		       (unsigned)(ncpu > 0 ? ncpu : 1);
	uint32_t fs = wk->o.flush_size;
	/* Every connection may land on one thread (SO_REUSEPORT hashes). */
	wk->thread_conns = wk->o.max_conns < WK_THREAD_CONNS_MAX ?
				   wk->o.max_conns : WK_THREAD_CONNS_MAX;
	if (!opts->dir)
		ret = wk_refuse(-EINVAL, "worker: needs a directory");
	else if (wk->nthreads > 1024)
		ret = wk_refuse(-EINVAL, "worker: %u threads", wk->nthreads);
	else if (fs < 16384 || (fs & (fs - 1)) ||
		 wk->o.pool_bytes < 2 * (size_t)fs)
		ret = wk_refuse(-EINVAL, "worker: flush size %u must be a "
			       "power of two >= 16 KiB, pool two of them", fs);
	else if (wk->o.max_frame < 4096 || wk->o.max_frame > (1u << 30))
		ret = wk_refuse(-EINVAL, "worker: max frame %u", wk->o.max_frame);
	else if (wk->o.sync > USH_WORKER_SYNC_NONE)
		ret = wk_refuse(-EINVAL, "worker: sync mode %u: accepted: "
			       "USH_WORKER_SYNC_FULL (0) or "
			       "USH_WORKER_SYNC_NONE (1)", wk->o.sync);
	else if (wk->o.max_conns > (uint64_t)wk->nthreads * WK_THREAD_CONNS_MAX)
		ret = wk_refuse(-EINVAL, "worker: %u connections need %u "
			       "threads or more (each holds at most %u)",
			       wk->o.max_conns,
			       (wk->o.max_conns + WK_THREAD_CONNS_MAX - 1) /
				       WK_THREAD_CONNS_MAX,
			       WK_THREAD_CONNS_MAX);
	else if (split_hostport(wk->o.listen, host, sizeof(host), &port))
		ret = wk_refuse(-EINVAL, "worker: --listen=%s is not HOST:PORT",
			       wk->o.listen);
	else
		ret = auth_setup(wk, host);
	if (ret) {
		ushi_free(wk->secret);
		if (wk->secrets_dirfd >= 0)
			close(wk->secrets_dirfd);
		pthread_mutex_destroy(&wk->lock);
		pthread_cond_destroy(&wk->busy_cv);
		pthread_mutex_destroy(&wk->log_lock);
		pthread_mutex_destroy(&wk->id_lock);
		pthread_mutex_destroy(&wk->m.sync_lock);
		wk_group_fini(&wk->grp);
		ushi_free(wk);
		return ret;
	}
	wk->dirlist = ushi_strdup(opts->dir);
	wk->host = ushi_strdup(host);
	wk->threads = ushi_calloc(wk->nthreads, sizeof(*wk->threads));
	if (!wk->dirlist || !wk->host || !wk->threads) {
		ush_worker_free(wk);
		return ushi_fail(-ENOMEM, "worker: allocation");
	}
	wk->o.dir = wk->dirlist;
	wk->o.listen = NULL;
	/* Borrowed from the caller until now. */
	wk->o.secret_file = wk->o.secrets_dir = NULL;
	wk->o.secret = NULL;
	for (unsigned i = 0; i < wk->nthreads; i++) {
		wk->threads[i].wk = wk;
		wk->threads[i].idx = i;
		wk->threads[i].lfd = -1;
		wk->threads[i].wake[0] = wk->threads[i].wake[1] = -1;
	}
	ret = wk_store_init(wk);
	if (!ret && port)
		ret = port_free(wk, port);
	if (!ret)
		ret = wk_log_sync_mode(wk);
	if (!ret)
		ret = wk_log_replay(wk, wk_rec_replay, wk_verify_commit);
	if (!ret)
		ret = wk_group_start(wk);
	if (!ret && wk->torn)
		ret = wk_compact_torn(wk);
	if (!ret)
		ret = wk_drop_uncommitted(wk);
	if (!ret)
		wk_sweep(wk);
	if (!ret)
		ret = wk_app_usage(wk);
	if (!ret && !wk->o.max_app_bytes)
		wk->o.max_app_bytes = half_fs(wk);
	if (!ret)
		ret = bind_all(wk, port);
	if (ret) {
		ush_worker_free(wk);
		return ret;
	}
	*out = wk;
	return 0;
}

int ush_worker_dir(const ush_worker *wk, unsigned i, const char **path,
		   int *err)
{
	if (i >= wk->ndirs)
		return -ENOENT;
	*path = wk->dirs[i].path;
	*err = atomic_load(&wk->dirs[i].err);
	return 0;
}

int ush_worker_port(const ush_worker *wk)
{
	return wk->port;
}

int ush_worker_start(ush_worker *wk)
{
	if (wk->started)
		return ushi_fail(USH_ESTATE, "worker: already started");
	for (unsigned i = 0; i < wk->nthreads; i++) {
		int ret = -pthread_create(&wk->threads[i].tid, NULL,
					  wk_thread_main, &wk->threads[i]);
		if (ret) {
			atomic_store(&wk->stop, 1);
			for (unsigned j = 0; j < i; j++)
				pthread_join(wk->threads[j].tid, NULL);
			return ushi_fail(ret, "worker: thread %u", i);
		}
	}
	wk->started = true;
	/* Report a thread that cannot serve (no io_uring, no memory) here,
	 * not as a port that accepts and never answers. */
	for (unsigned i = 0; i < wk->nthreads; i++) {
		while (!atomic_load(&wk->threads[i].ready))
			usleep(1000);
		if (atomic_load(&wk->threads[i].ready) < 0) {
			struct wk_thread *t = &wk->threads[i];
			char msg[sizeof(t->errmsg)];
			int err = t->err;
			memcpy(msg, t->errmsg, sizeof(msg));
			ush_worker_stop(wk);
			ush_worker_wait(wk);
			return ushi_fail_msg(err, msg);
		}
	}
	log_start(wk);
	/* Each connection is a descriptor: past what the file budget
	 * leaves of the limit (files.c), connections are shed or refused
	 * before --max-conns is reached. */
	struct rlimit rl;
	if (wk->conn_fds < wk->o.max_conns && !getrlimit(RLIMIT_NOFILE, &rl))
		wk_log(wk, 1, "RLIMIT_NOFILE is %llu: beside %u log and index "
		       "files and %u more it leaves room for %u connections, "
		       "below --max-conns=%u; past them new connections "
		       "replace unauthenticated ones or are refused; raise it "
		       "(ulimit -n, LimitNOFILE=) or lower --max-conns or "
		       "--max-open-files", (unsigned long long)rl.rlim_cur,
		       wk->open_max * wk->nthreads, WK_FD_MARGIN,
		       wk->conn_fds, wk->o.max_conns);
	return 0;
}

void ush_worker_stop(ush_worker *wk)
{
	atomic_store(&wk->stop, 1);
}

void ush_worker_decommission(ush_worker *wk)
{
	atomic_store(&wk->decom, true);
}

int ush_worker_wait(ush_worker *wk)
{
	if (!wk->started)
		return 0;
	for (unsigned i = 0; i < wk->nthreads; i++)
		pthread_join(wk->threads[i].tid, NULL);
	wk->started = false;
	for (unsigned i = 0; i < wk->nthreads; i++)
		if (wk->threads[i].err && !wk->err)
			wk->err = wk->threads[i].err;
	return wk->err;
}

int ush_worker_run(ush_worker *wk)
{
	int ret = ush_worker_start(wk);
	return ret ? ret : ush_worker_wait(wk);
}

void ush_worker_free(ush_worker *wk)
{
	if (!wk)
		return;
	ush_worker_stop(wk);
	ush_worker_wait(wk);
	for (unsigned i = 0; wk->threads && i < wk->nthreads; i++) {
		if (wk->threads[i].lfd >= 0)
			close(wk->threads[i].lfd);
	}
	wk_group_stop(wk);
	if (wk->log_fd >= 0)
		close(wk->log_fd);
	wk_attempt_free(wk);
	wk_app_free(wk);
	wk_store_fini(wk);
	if (wk->secrets_dirfd >= 0)
		close(wk->secrets_dirfd);
	if (wk->secret)
		explicit_bzero(wk->secret, wk->secret_len);
	ushi_free(wk->secret);
	ushi_free(wk->busy);
	pthread_mutex_destroy(&wk->lock);
	pthread_cond_destroy(&wk->busy_cv);
	pthread_mutex_destroy(&wk->log_lock);
	pthread_mutex_destroy(&wk->id_lock);
	pthread_mutex_destroy(&wk->m.sync_lock);
	wk_group_fini(&wk->grp);
	ushi_free(wk->threads);
	ushi_free(wk->dirlist);
	ushi_free(wk->host);
	ushi_free(wk);
}
