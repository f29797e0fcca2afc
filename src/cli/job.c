/*
 * Running one job: numjobs threads, each pinned to a CPU with its own
 * ring. Thread i writes map i (write phase), then, after every map has
 * committed, reads partitions from a shared counter (read phase). The
 * phases are separated by barriers, at which the library's allocation
 * count is noted, so allocations per batch cover the steady state only.
 *
 * Ctrl-C (SIGINT) or SIGTERM sets cli_stop; every loop polls it, writers
 * abort (the library removes their partial files), the job removes what
 * it committed and the caller prints the partial report. A second Ctrl-C
 * kills the process at once.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, RUSAGE_THREAD */
#include "cli.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t tv_ns(const struct timeval *tv)
{
	return (uint64_t)tv->tv_sec * 1000000000u +
	       (uint64_t)tv->tv_usec * 1000u;
}

static void *thread_main(void *arg)
{
	struct thread_ctx *t = arg;
	struct job_ctx *j = t->job;
	const struct job_opts *o = j->o;
	struct rusage r0, r1;
	if (t->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(t->cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	} else if (t->cpus) { /* --cpus_allowed without --pin */
		pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t),
				       t->cpus);
	}
	getrusage(RUSAGE_THREAD, &r0);
	uint64_t t0 = now_ns();
	if (o->rw != RW_READ)
		write_phase(t);
	if (o->rw != RW_WRITE && o->target != TARGET_NULL)
		read_phase(t);
	getrusage(RUSAGE_THREAD, &r1);
	struct thread_result *r = t->res;
	r->wall_ns = now_ns() - t0;
	r->usr_ns = tv_ns(&r1.ru_utime) - tv_ns(&r0.ru_utime);
	r->sys_ns = tv_ns(&r1.ru_stime) - tv_ns(&r0.ru_stime);
	r->ctx = (uint64_t)((r1.ru_nvcsw + r1.ru_nivcsw) -
			    (r0.ru_nvcsw + r0.ru_nivcsw));
	atomic_fetch_add(&j->threads_done, 1);
	return NULL;
}

/* Only the files of this shuffle the library and manifest.c name. */
static bool spill_file(const char *n)
{
	if (*n++ != 'm' || !isdigit((unsigned char)*n))
		return false;
	while (isdigit((unsigned char)*n))
		n++;
	if (strncmp(n, ".a", 2) || !isdigit((unsigned char)n[2]))
		return false;
	for (n += 2; isdigit((unsigned char)*n);)
		n++;
	return !strcmp(n, ".data") || !strcmp(n, ".index") ||
	       !strcmp(n, ".index.tmp");
}

/* One directory's part of spill_clean(). */
static void spill_clean_dir(const char *dir, uint32_t shuffle)
{
	char path[PATH_MAX + 64];
	int k = snprintf(path, sizeof(path), "%s/s%u", dir, shuffle);
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (spill_file(e->d_name)) {
			snprintf(path + k, sizeof(path) - (size_t)k, "/%s",
				 e->d_name);
			unlink(path);
		}
	closedir(d);
	manifest_path(path, sizeof(path), dir, shuffle);
	unlink(path);
	path[k] = '\0';
	rmdir(path); /* fails, rightly, if something else is left */
}

/* Removes a shuffle's spill files and manifest from each directory of
 * the job, then its directories. */
static void spill_clean(const struct job_opts *o, uint32_t shuffle)
{
	char dir[PATH_MAX];
	unsigned n = job_dir(o, 0, dir, sizeof(dir));
	for (unsigned i = 0; i < n; i++) {
		job_dir(o, i, dir, sizeof(dir));
		spill_clean_dir(dir, shuffle);
	}
}

/* The CPUs the job's threads may run on: the process's, within
 * --cpus_allowed. Returns 0, or -EINVAL with res->errmsg when none is
 * left. */
static int job_cpus(const struct job_opts *o, cpu_set_t *set,
		    struct job_result *res)
{
	cpu_set_t list;
	const char *at;
	if (sched_getaffinity(0, sizeof(*set), set))
		CPU_ZERO(set);
	if (!o->cpus_allowed[0] || cpu_list(o->cpus_allowed, &list, &at))
		return 0; /* the list was checked when parsed */
	CPU_AND(set, set, &list);
	if (CPU_COUNT(set))
		return 0;
	snprintf(res->errmsg, sizeof(res->errmsg), "--cpus_allowed=%s: none "
		 "of these CPUs is one this process may run on",
		 o->cpus_allowed);
	return -EINVAL;
}

/* The i-th CPU of set, or -1 when set is empty. */
static int nth_cpu(const cpu_set_t *set, unsigned i)
{
	unsigned n = (unsigned)CPU_COUNT(set), k = 0;
	for (int c = 0; n && c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set) && k++ == i % n)
			return c;
	return -1;
}

/* --buffer_pattern into g: "0x" and hex digits (an even number), else
 * the text itself; 0 or -EINVAL with res->errmsg. */
static int pattern_parse(const char *s, struct rec_gen *g,
			 struct job_result *res)
{
	size_t n = strlen(s);
	const char *why = NULL;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		n -= 2;
		if (!n || n % 2 || n / 2 > sizeof(g->pattern))
			why = "0x takes 2 to 128 hex digits, an even number";
		for (size_t i = 0; !why && i < n; i += 2) {
			const unsigned char *d = (const unsigned char *)s + 2 + i;
			int hi = hex_digit((char)tolower(d[0])),
			    lo = hex_digit((char)tolower(d[1]));
			if (hi < 0 || lo < 0)
				why = "a character after 0x is not a hex digit";
			else
				g->pattern[i / 2] = (uint8_t)(hi << 4 | lo);
		}
		n /= 2;
	} else if (n > sizeof(g->pattern)) {
		why = "text of more than 64 characters";
	} else {
		memcpy(g->pattern, s, n);
	}
	if (why) {
		snprintf(res->errmsg, sizeof(res->errmsg), "--buffer_pattern="
			 "'%.140s': %s", s, why);
		return -EINVAL;
	}
	g->plen = (uint32_t)n;
	return 0;
}

/* Sets up what the threads expect; returns 0 or an error with
 * res->errmsg. */
static int prepare(struct job_ctx *j, struct job_result *res)
{
	const struct job_opts *o = j->o;
	j->gen = (struct rec_gen){.job = j->shuffle,
				  .min = (uint32_t)o->record_size[0],
				  .max = (uint32_t)o->record_size[1],
				  .compress_pct = (uint32_t)o->compress_pct};
	if (o->buffer_pattern[0] &&
	    pattern_parse(o->buffer_pattern, &j->gen, res))
		return -EINVAL;
	if (o->rw == RW_READ) {
		int ret = manifest_load(&j->expect, o, res->errmsg,
					sizeof(res->errmsg));
		if (ret)
			return ret;
		/* The data is where the write job put it, whatever this
		 * job's --target says. */
		res->opts.target = manifest_target(&j->expect);
		j->maps = j->expect.maps;
		j->partitions = j->expect.partitions;
		j->gen.min = j->expect.rec_min;
		j->gen.max = j->expect.rec_max;
		if (o->verify == VERIFY_CRC32C && j->gen.min < REC_HDR) {
			snprintf(res->errmsg, sizeof(res->errmsg), "cannot "
				 "verify job '%s': it was written with records "
				 "of %u bytes, below the %u-byte verify "
				 "header; read it with --verify=none", o->name,
				 j->gen.min, REC_HDR);
			return -EINVAL;
		}
	} else {
		j->maps = (uint32_t)o->numjobs;
		j->partitions = (uint32_t)o->partitions;
		size_t cells = (size_t)j->maps * j->partitions;
		j->expect.records = calloc(cells, sizeof(uint64_t));
		j->expect.bytes = calloc(cells, sizeof(uint64_t));
		j->expect.status = calloc(j->maps, sizeof(struct ush_status));
		j->expect.maps = j->maps;
		if (!j->expect.records || !j->expect.bytes ||
		    !j->expect.status) {
			snprintf(res->errmsg, sizeof(res->errmsg),
				 "out of memory for %zu partition counters",
				 cells);
			return -ENOMEM;
		}
		if (o->target == TARGET_DISK)
			spill_clean(o, j->shuffle); /* an earlier run's */
	}
	j->gen.partitions = j->partitions;
	res->maps = j->maps;
	res->partitions = j->partitions;
	res->rec_min = j->gen.min;
	res->rec_max = j->gen.max;
	return 0;
}

/* Starts the threads with SIGINT/SIGTERM blocked: only the main thread
 * takes them, so no worker sees EINTR. Returns 0 or an errno. */
static int start(struct job_ctx *j, struct thread_ctx *tc, pthread_t *tid,
		 const cpu_set_t *cpus)
{
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	int ret = 0;
	for (unsigned i = 0; !ret && i < j->res->nthreads; i++) {
		tc[i] = (struct thread_ctx){
			.job = j, .index = i, .res = &j->res->t[i],
			.cpu = j->o->pin ? nth_cpu(cpus, i) : -1,
			.cpus = j->o->cpus_allowed[0] ? cpus : NULL};
		ret = pthread_create(&tid[i], NULL, thread_main, &tc[i]);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret;
}

static void net_drop(struct job_ctx *j, struct job_result *res);

/*
 * A net read whose every reader error found a map absent from its
 * worker, and that read nothing: the workers no longer have the shuffle
 * (their --app-ttl expired it, or it was dropped). Says so in one line,
 * in place of a verify message per partition.
 */
static bool read_expired(struct job_ctx *j, struct job_result *res)
{
	uint64_t records = 0;
	unsigned errors = atomic_load(&j->reader_errors);
	for (unsigned i = 0; i < res->nthreads; i++)
		records += res->t[i].r.records;
	if (j->o->target != TARGET_NET || j->expect.embedded || !errors ||
	    atomic_load(&j->absent) != errors || records)
		return false;
	char man[PATH_MAX + 64], dir[PATH_MAX];
	job_dir(j->o, 0, dir, sizeof(dir));
	manifest_path(man, sizeof(man), dir, j->shuffle);
	res->expired = true;
	res->err = USH_ENOTCOMMITTED;
	for (unsigned i = 0; i < res->nthreads; i++)
		res->t[i].verify_errors = 0;
	atomic_store(&res->vlog.errors, 0);
	res->vlog.nfirst = 0;
	snprintf(res->errmsg, sizeof(res->errmsg), "shuffle %u has expired "
		 "on its workers (%.100s), or was dropped: workers drop an "
		 "application's shuffles once it is silent for their --app-ttl "
		 "(300 s by default); write it again, with --hold=SECONDS to "
		 "keep it (%.150s is stale: --unlink=1 removes it)", j->shuffle,
		 j->workers, man);
	return true;
}

/* How long a kept output lives, and how to keep or drop it, for the
 * report. */
static void set_lifetime(struct job_ctx *j, struct job_result *res)
{
	const struct job_opts *o = j->o;
	char dir[PATH_MAX], hold[96] = "";
	job_dir(o, 0, dir, sizeof(dir));
	if (o->hold_ms)
		snprintf(hold, sizeof(hold), ", held %llu s after this run "
			 "(--hold)", (unsigned long long)(o->hold_ms / 1000));
	if (o->target == TARGET_NET && !j->embedded)
		snprintf(res->lifetime, sizeof(res->lifetime), "kept on the "
			 "workers while application '%s' is heard from%s, then "
			 "for their --app-ttl (300 s by default): read it "
			 "before, or hold it with --hold=SECONDS; --rw=read "
			 "--unlink=1 drops it", o->app, hold);
	else if (o->target == TARGET_NET)
		snprintf(res->lifetime, sizeof(res->lifetime), "kept in "
			 "%.200s (the embedded worker's storage) until "
			 "--rw=read --unlink=1 removes it", j->wdir);
	else
		snprintf(res->lifetime, sizeof(res->lifetime), "kept in "
			 "%.200s/s%u until --rw=read --unlink=1 removes it",
			 dir, j->shuffle);
}

/* Did a read job read everything, and find every record right? */
static bool read_complete(const struct job_result *res)
{
	return res->verify_done && !atomic_load(&res->vlog.errors);
}

static void finish(struct job_ctx *j, struct job_result *res)
{
	const struct job_opts *o = j->o;
	uint64_t wb = 0, rb = 0;
	for (unsigned i = 0; i < res->nthreads; i++) {
		wb += res->t[i].w.batches;
		rb += res->t[i].r.batches;
	}
	for (unsigned i = 0; i < res->nthreads; i++) {
		struct thread_result *t = &res->t[i];
		t->w.allocs = j->alloc_at[1] - j->alloc_at[0];
		t->w.phase_batches = wb;
		t->r.allocs = j->alloc_at[3] - j->alloc_at[2];
		t->r.phase_batches = rb;
	}
	res->interrupted = atomic_load(&cli_stop);
	bool ok = !res->err && !res->interrupted;
	res->verify_done = ok && o->rw != RW_WRITE &&
			   o->target != TARGET_NULL &&
			   atomic_load(&j->parts_done) >= j->partitions;
	if (o->target == TARGET_NULL)
		return;
	if (o->rw == RW_READ) {
		bool gone = read_expired(j, res);
		if (job_read_unlinks(o) && (gone || read_complete(res))) {
			if (!gone)
				net_drop(j, res);
			spill_clean(o, j->shuffle); /* the manifest, at least */
		}
		return;
	}
	if (ok && job_keeps(o)) {
		j->expect.shuffle = j->shuffle;
		j->expect.maps = j->maps;
		j->expect.partitions = j->partitions;
		j->expect.rec_min = j->gen.min;
		j->expect.rec_max = j->gen.max;
		snprintf(j->expect.workers, sizeof(j->expect.workers), "%s",
			 j->workers);
		j->expect.embedded = j->embedded != NULL;
		int ret = manifest_save(&j->expect, o, res->errmsg,
					sizeof(res->errmsg));
		if (ret)
			res->err = ret, ok = false;
	}
	if (!ok || !job_keeps(o))
		spill_clean(o, j->shuffle);
	else
		set_lifetime(j, res);
}

static int rm_entry(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

/*
 * --target=net without --workers: a worker in this process on a free
 * loopback port, so the job needs nothing else running. Its storage is
 * <dir>/ushuffled, kept for a later --rw=read, or a directory of its own
 * that goes away with a shuffle job that keeps nothing.
 */
/*
 * The secret the job proves to its workers (docs/security.md): the one in
 * --secret-file, else $USHUFFLE_SECRET, which the library reads itself.
 * An embedded worker holds the same; without either, a random one made
 * once per process for both sides, since it lives in this process only.
 * Sets wo's secret when wo is given (an embedded worker).
 */
static int net_secret(const struct job_opts *o, struct ush_worker_opts *wo,
		      struct job_result *res)
{
	static uint8_t made[32];
	static int have_made;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	const char *env = getenv("USHUFFLE_SECRET");
	int ret = 0;
	if (o->secret_file[0]) {
		ret = ush_auth_secret_file(o->app, o->secret_file);
		if (wo)
			wo->secret_file = o->secret_file;
	} else if (env && *env) {
		if (wo)
			wo->secret = env, wo->secret_len = strlen(env);
	} else if (wo) {
		pthread_mutex_lock(&lock); /* jobs run side by side */
		if (!have_made) {
			ret = getentropy(made, sizeof(made)) ? -errno : 0;
			if (!ret)
				ret = ush_auth_secret(NULL, made, sizeof(made));
			have_made = !ret;
		}
		pthread_mutex_unlock(&lock);
		wo->secret = made;
		wo->secret_len = sizeof(made);
	}
	if (ret)
		snprintf(res->errmsg, sizeof(res->errmsg), "secret: %.400s",
			 o->secret_file[0] ? ush_last_error() :
					     "no random bytes");
	return ret;
}

/* --encrypt-key-file's keys into j (docs/security.md, "Key files"). */
static int seal_setup(struct job_ctx *j, struct job_result *res)
{
	const char *path = j->o->encrypt_key_file;
	if (!path[0])
		return 0;
	int n = ush_seal_keys_load(path, j->keys, USH_SEAL_KEYS_MAX);
	if (n < 0) {
		snprintf(res->errmsg, sizeof(res->errmsg), "%.500s",
			 ush_last_error());
		return n;
	}
	j->nkeys = (uint32_t)n;
	return 0;
}

static int net_setup(struct job_ctx *j, struct job_result *res)
{
	const struct job_opts *o = j->o;
	if (o->target != TARGET_NET)
		return 0;
	/* A read job reads where the statuses say: the workers the writing
	 * job used, or its embedded worker's storage, served again at the
	 * address the statuses name. */
	const char *given = o->rw == RW_READ ? j->expect.workers : o->workers;
	if (o->rw == RW_READ ? !j->expect.embedded : o->workers[0] != 0) {
		snprintf(j->workers, sizeof(j->workers), "%s", given);
		return net_secret(o, NULL, res);
	}
	char dir[PATH_MAX];
	job_dir(o, 0, dir, sizeof(dir));
	j->wdir_tmp = !job_keeps(o);
	if (j->wdir_tmp)
		snprintf(j->wdir, sizeof(j->wdir), "%s/ushuffled.%d.%u", dir,
			 (int)getpid(), j->shuffle);
	else
		snprintf(j->wdir, sizeof(j->wdir), "%s/ushuffled", dir);
	struct ush_worker_opts wo;
	ush_worker_opts_init(&wo);
	wo.listen = o->rw == RW_READ ? j->expect.workers : "127.0.0.1:0";
	wo.dir = j->wdir;
	wo.direct = o->direct;
	wo.log_level = 0;
	int ret = net_secret(o, &wo, res);
	if (ret)
		return ret;
	ret = ush_worker_create(&j->embedded, &wo);
	if (!ret)
		ret = ush_worker_start(j->embedded);
	if (ret) {
		snprintf(res->errmsg, sizeof(res->errmsg), "embedded worker "
			 "in %.200s: %.250s", j->wdir, ush_worker_last_error());
		return ret;
	}
	snprintf(j->workers, sizeof(j->workers), "127.0.0.1:%d",
		 ush_worker_port(j->embedded));
	return 0;
}

/* Well within a worker's default --app-ttl (300 s). */
#define HEARTBEAT_NS (10 * 1000000000ull)
/* How long a heartbeat or a drop waits for the workers (all asked at
 * once): stalled ones cost the job this, once, and only a warning (the
 * others got it). */
#define ADMIN_TIMEOUT_MS 2000u

/* Workers keep every attempt until the shuffle is dropped: a job writing
 * the shuffle anew drops what an earlier run left (as the disk target
 * cleans its files), and a shuffle job drops it when done. A drop is
 * cleanup: a worker it cannot reach (a dead replica) is a warning, not
 * the job's failure, since what that worker holds expires with the
 * application's TTL and the job's result is its data's. */
static void net_drop(struct job_ctx *j, struct job_result *res)
{
	if (j->o->target != TARGET_NET ||
	    !ush_shuffle_drop(j->workers, j->o->app, j->shuffle,
			      ADMIN_TIMEOUT_MS) ||
	    res->warning[0])
		return;
	snprintf(res->warning, sizeof(res->warning), "dropping shuffle %u on "
		 "the workers: %.300s; what they keep of it expires with "
		 "application '%s' (the workers' --app-ttl)", j->shuffle,
		 ush_last_error(), j->o->app);
}

static void net_teardown(struct job_ctx *j)
{
	ush_worker_free(j->embedded); /* stops, drains, syncs */
	j->embedded = NULL;
	if (j->wdir_tmp)
		nftw(j->wdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Until the threads are done: heartbeats for the job's application (a
 * worker drops the shuffles of a silent one), the status lines. */
static void watch(struct job_ctx *j, const struct progress *p)
{
	const struct job_opts *o = j->o;
	struct job_result *res = j->res;
	uint64_t next_eta = j->t_start + 1000000000u;
	uint64_t next_nl = j->t_start + p->newline_ns;
	uint64_t next_status = j->t_start + p->status_ns;
	uint64_t next_beat = j->t_start + HEARTBEAT_NS;
	while (atomic_load(&j->threads_done) < res->nthreads) {
		nanosleep(&(struct timespec){0, 50000000}, NULL);
		uint64_t now = now_ns();
		if (o->target == TARGET_NET && now >= next_beat) {
			next_beat += HEARTBEAT_NS;
			if (ush_app_heartbeat(j->workers, o->app,
					      ADMIN_TIMEOUT_MS) &&
			    !res->warning[0]) /* the others got it */
				snprintf(res->warning, sizeof(res->warning),
					 "heartbeat: %.400s", ush_last_error());
		}
		if (p->status_ns && now >= next_status) {
			next_status += p->status_ns;
			eta_tick(j, ETA_STATUS);
		} else if (p->eta && now >= next_eta) {
			bool nl = p->newline_ns && now >= next_nl;
			if (nl)
				next_nl += p->newline_ns;
			eta_tick(j, nl ? ETA_NEWLINE : ETA_REDRAW);
		}
		if (p->eta && now >= next_eta)
			next_eta += 1000000000u;
	}
}

int job_run(const struct job_opts *o, struct job_result *res,
	    const struct progress *p)
{
	memset(res, 0, sizeof(*res));
	res->opts = *o;
	res->o = o = &res->opts;
	if (atomic_load(&cli_stop)) { /* Ctrl-C before its turn came */
		res->interrupted = true;
		snprintf(res->errmsg, sizeof(res->errmsg), "interrupted "
			 "before it started");
		verify_log_init(&res->vlog);
		return EXIT_INTR;
	}
	res->shuffle = job_shuffle_id(o->name);
	res->nthreads = (unsigned)o->numjobs;
	verify_log_init(&res->vlog);
	res->t = calloc(res->nthreads, sizeof(*res->t));
	struct thread_ctx *tc = calloc(res->nthreads, sizeof(*tc));
	pthread_t *tid = calloc(res->nthreads, sizeof(*tid));
	struct job_ctx j = {.o = o, .res = res, .shuffle = res->shuffle};
	pthread_mutex_init(&j.lock, NULL);
	int ret = res->t && tc && tid ? 0 : -ENOMEM;
	if (ret)
		snprintf(res->errmsg, sizeof(res->errmsg), "out of memory");
	for (unsigned i = 0; !ret && i < res->nthreads; i++) {
		dir_stats_init(&res->t[i].w);
		dir_stats_init(&res->t[i].r);
		res->t[i].fixedbufs = -1;
	}
	cpu_set_t cpus;
	if (!ret)
		ret = res->err = job_cpus(o, &cpus, res);
	if (!ret)
		ret = res->err = prepare(&j, res);
	if (!ret)
		ret = res->err = seal_setup(&j, res);
	if (!ret)
		ret = res->err = net_setup(&j, res);
	if (!ret) {
		if (o->rw != RW_READ)
			net_drop(&j, res);
		pthread_barrier_init(&j.bar, NULL, res->nthreads);
		j.t_start = now_ns();
		int err = start(&j, tc, tid, &cpus);
		if (err) { /* the barrier would wait for it forever */
			fprintf(stderr, CLI_NAME ": cannot start a thread: "
				"%s\n", strerror(err));
			exit(EXIT_RUN);
		}
		watch(&j, p);
		for (unsigned i = 0; i < res->nthreads; i++)
			pthread_join(tid[i], NULL);
		if (p->eta)
			eta_tick(&j, ETA_CLEAR);
		pthread_barrier_destroy(&j.bar);
		res->ran = true;
		finish(&j, res);
		if (!job_keeps(o))
			net_drop(&j, res);
	} else if (!res->err) {
		res->err = -EINVAL;
	}
	net_teardown(&j);
	manifest_free(&j.expect);
	pthread_mutex_destroy(&j.lock);
	explicit_bzero(j.keys, sizeof(j.keys));
	free(tc);
	free(tid);
	if (res->interrupted)
		return EXIT_INTR;
	return res->err || atomic_load(&res->vlog.errors) ? EXIT_RUN : 0;
}

void job_result_free(struct job_result *res)
{
	free(res->t);
	pthread_mutex_destroy(&res->vlog.lock);
	res->t = NULL;
}
