/*
 * Soak (the design's stage two: "tests that span lifetimes"): three
 * real ushuffled processes, each under RLIMIT_NOFILE 1024 and a short
 * --app-ttl, serve four client threads (a ring each) that run thousands
 * of shuffles of 16 to 2,000 partitions, while the main thread SIGKILLs a
 * worker every few seconds and restarts it on the same port and
 * directory. Each shuffle writes 1-3 maps (some after a failed attempt,
 * some with a second committed attempt that the driver discards),
 * commits, reads every partition back with the statuses it kept, and is
 * dropped a few shuffles later (read again first if a worker was
 * restarted meanwhile). Some are abandoned instead: their application
 * stops heartbeating, and the workers must expire them. A heartbeat
 * thread (an engine's driver) keeps the clients' applications alive.
 *
 * What it asserts, none of it about time:
 *  - every map whose commit returned 0 reads back exactly: each record
 *    once, in its partition, byte for byte, before and after restarts; no
 *    record of a failed or discarded attempt is ever read;
 *  - an operation fails only when a worker it talks to was killed while
 *    it ran, and its error names that worker; then a push is retried from
 *    scratch as new attempts, a read or a drop again after the restart;
 *  - at the end no shuffle is left in any worker's directory (dropped or
 *    expired), no worker still holds an abandoned shuffle for its
 *    application (another one may claim its number), and each worker's
 *    descriptors, RSS and directory size are within fixed bounds of their
 *    values at the start.
 *
 * The deadlines below (waiting for a restart, for the expiry) bound how
 * long the test waits for something that must happen; no assertion is
 * about how fast anything is.
 *
 * Knobs (environment, default): USH_SOAK_SHUFFLES (2000; 1000 in a
 * sanitizer build, which runs about twice as long) shuffles in all;
 * USH_SOAK_CLIENTS (4) client threads; USH_SOAK_MAX_PARTS (2000) largest
 * partition count; USH_SOAK_KILL_MS (4000) between kills, 0 for none
 * (a restart gives every application a full TTL again: a worker killed
 * more often than every TTL + 1 s expires nothing while the kills go
 * on, and expires one application a second afterwards);
 * USH_SOAK_TTL_MS (5000) the workers' --app-ttl (a worker thread blocks
 * in the fdatasyncs of a commit, a second or more for a large shuffle
 * here, before it reads the heartbeats that came meanwhile);
 * USH_SOAK_NOFILE (1024) the workers' RLIMIT_NOFILE; USH_SOAK_THREADS (2)
 * threads per worker; USH_SOAK_SEED (1).
 */
#include "net_helpers.h"
#include "net/net.h"

#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>

#define NW 3
#define MAX_CLIENTS 16
#define MAX_MAPS 3
#define DEFER 4          /* shuffles a client keeps before it drops one */
#define ABANDON_EVERY 100 /* one shuffle in this many is abandoned */
#define MAX_TRIES 20     /* pushes of one shuffle, from scratch */
#define MAX_READS 50     /* reads of one partition */
#define PUSH_SIZE (16u << 10)
#define REC_HDR 16u
#define REC_MAX (REC_HDR + 48u)
#define POISON_LEN PUSH_SIZE /* above the push size: sent at once */
#define DOWN_MS 300      /* how long a killed worker stays down */
#define WAIT_UP_S 60     /* a killed worker is back within this */
#define EXPIRY_S 120     /* abandoned shuffles are gone within this */
#define OP_TIMEOUT_MS 10000u
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SHUFFLES 1000
#else
#define SHUFFLES 2000
#endif

/* Bounds at the end against the start (see the file's top). A worker
 * thread's flush pool (32 MiB by default) and receive buffers (16 MiB)
 * are allocated at its start and become resident as they are first
 * used (or at once, where the pool could be registered). */
#define FD_SLACK 16
#define RSS_THREAD_KIB ((32 + 16) * 1024)
#define RSS_SLACK_KIB (64 * 1024)
/* The commit logs are compacted past 1 MiB, into a snapshot of at most
 * a quarter of that; files round up to blocks. */
#define DISK_SLACK_KIB (1024 + 256 + 64)

struct knobs {
	unsigned shuffles, clients, max_parts, kill_ms, ttl_ms, nofile,
		threads, seed;
};
static struct knobs K;

static unsigned knob(const char *name, unsigned def)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return def;
	unsigned long n = strtoul(v, &end, 10);
	if (*end || n > 1000000000ul)
		fail_msg("%s=%s: not a number up to 10^9", name, v);
	return (unsigned)n;
}

static struct th_worker wk[NW];
static char addr[NW][64]; /* fixed at the first start: ports are reused */
static char workers[256];
/* Per worker: odd while it is killed and not yet restarted. An
 * operation's failure is explained by a kill only if a worker it talks
 * to changed epoch (or was down) while it ran. */
static atomic_uint epoch[NW];
static atomic_bool stop;     /* a client failed: everyone stops */
static atomic_uint next_k;   /* the next shuffle to run */
static atomic_uint clients_left;

/* ------------------------------------------------------------ records */

/* Record i of map m of shuffle s: 16 bytes naming it (s, m, i, tag), then
 * filler. tag 0: the attempt a status names; anything else (a failed or
 * discarded attempt's records) must never be read. */
static size_t rec_make(uint8_t *b, uint32_t s, uint32_t m, uint32_t i,
		       uint32_t tag, size_t len)
{
	if (!len)
		len = REC_HDR +
		      (s * 31u + m * 17u + i * 7u) % (REC_MAX - REC_HDR);
	uint32_t h[4] = {s, m, i, tag};
	memcpy(b, h, sizeof(h));
	uint64_t seed = (uint64_t)s << 40 ^ (uint64_t)m << 32 ^ i ^
			(uint64_t)tag << 20;
	th_fill(b + REC_HDR, len - REC_HDR, seed);
	return len;
}

static uint32_t part_of(uint32_t m, uint32_t i, uint32_t parts)
{
	return (i + m) % parts;
}

/* --------------------------------------------------------- the plan */

struct plan {
	uint32_t shuffle, parts, maps;
	uint32_t records[MAX_MAPS];
	bool fail_first[MAX_MAPS]; /* an attempt that never commits first */
	bool discard[MAX_MAPS];    /* a second committed attempt, unused */
	bool abandon;
};

/* Shuffle k's plan, from the seed alone: 85% of 16-40 partitions, 14%
 * of 41-400, 1% of 401-2000, and every 250th at the largest count. A
 * map writes from a quarter of a record to one record per partition, of
 * 16-63 bytes: the run is short, and its cost is in files and
 * connections (a commit syncs every partition file it touched, a read
 * is a connection per partition), as with many partitions. */
static void plan_of(uint32_t k, struct plan *p)
{
	uint64_t r = ((uint64_t)K.seed << 32 | k) * 0x9e3779b97f4a7c15ull + 1;
	unsigned roll = th_rand(&r) % 100;
	*p = (struct plan){.shuffle = 1 + k};
	if (k % 250 == 125)
		p->parts = K.max_parts;
	else if (roll < 85)
		p->parts = 16 + th_rand(&r) % 25;
	else if (roll < 99)
		p->parts = 41 + th_rand(&r) % 360;
	else
		p->parts = 401 + th_rand(&r) % 1600;
	if (p->parts > K.max_parts)
		p->parts = K.max_parts;
	p->maps = 1 + th_rand(&r) % MAX_MAPS;
	for (uint32_t m = 0; m < p->maps; m++) {
		p->records[m] = p->parts / 4 +
				th_rand(&r) % (p->parts * 3 / 4 + 1);
		p->fail_first[m] = th_rand(&r) % 8 == 0;
		p->discard[m] = th_rand(&r) % 12 == 0;
	}
	p->abandon = k % ABANDON_EVERY == ABANDON_EVERY / 2;
}

/* ------------------------------------------------- kills and failures */

struct window {
	unsigned e[NW];
};

static void window_open(struct window *w)
{
	for (unsigned i = 0; i < NW; i++)
		w->e[i] = atomic_load(&epoch[i]);
}

/* Does msg name a, followed by something that is not a digit? */
static bool names(const char *msg, const char *a)
{
	size_t n = strlen(a);
	for (const char *p = msg; (p = strstr(p, a)); p++)
		if (p[n] < '0' || p[n] > '9')
			return true;
	return false;
}

/* Was a failure with message msg, of an operation that talked to the
 * workers in mask since w was opened, caused by a kill? */
static bool explained(const struct window *w, unsigned mask, const char *msg)
{
	for (unsigned i = 0; i < NW; i++) {
		unsigned now = atomic_load(&epoch[i]);
		if ((mask >> i & 1) && ((w->e[i] & 1) || now != w->e[i]) &&
		    names(msg, addr[i]))
			return true;
	}
	return false;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Waits until the workers in mask are up. */
static bool wait_up(unsigned mask)
{
	for (unsigned waited = 0; waited < WAIT_UP_S * 1000; waited += 10) {
		bool up = true;
		for (unsigned i = 0; i < NW; i++)
			up &= !(mask >> i & 1) || !(atomic_load(&epoch[i]) & 1);
		if (up)
			return true;
		sleep_ms(10);
	}
	return false;
}

/* ------------------------------------------------------- heartbeats */

/* The applications alive now. A heartbeat thread per worker tells it
 * about each, as an engine's driver does: from threads of their own, so
 * that neither a client in a long push nor a worker being restarted
 * (whose connections wait for its threads) delays a heartbeat to the
 * others. */
#define MAX_APPS (MAX_CLIENTS * 3)
static pthread_mutex_t apps_lock = PTHREAD_MUTEX_INITIALIZER;
static char apps[MAX_APPS][40];
static atomic_bool hb_stop;
static atomic_ulong heartbeats;
static char hb_err[1024]; /* the first unexplained failure */

static void app_set(unsigned slot, const char *name)
{
	pthread_mutex_lock(&apps_lock);
	snprintf(apps[slot], sizeof(apps[slot]), "%s", name ? name : "");
	pthread_mutex_unlock(&apps_lock);
}

static void *heartbeat_main(void *arg)
{
	unsigned at = (unsigned)(uintptr_t)arg;
	while (!atomic_load(&hb_stop) && !atomic_load(&stop)) {
		char now[MAX_APPS][40];
		pthread_mutex_lock(&apps_lock);
		memcpy(now, apps, sizeof(now));
		pthread_mutex_unlock(&apps_lock);
		for (unsigned i = 0; i < MAX_APPS; i++) {
			if (!now[i][0])
				continue;
			struct window w;
			window_open(&w);
			int ret = ush_app_heartbeat(addr[at], now[i],
						    OP_TIMEOUT_MS);
			atomic_fetch_add(&heartbeats, 1);
			if (ret && !explained(&w, 1u << at, ush_last_error())) {
				pthread_mutex_lock(&apps_lock);
				if (!hb_err[0])
					snprintf(hb_err, sizeof(hb_err),
						 "heartbeat of %.40s: %.900s",
						 now[i], ush_last_error());
				pthread_mutex_unlock(&apps_lock);
				atomic_store(&stop, true);
			}
		}
		sleep_ms(K.ttl_ms / 8);
	}
	return NULL;
}

/* ---------------------------------------------------------- clients */

struct counts {
	unsigned long shuffles, tries, failed_attempts, discarded,
		read_retries, rereads, drops, drop_retries, abandoned,
		records, partitions;
	uint64_t push_ms, read_ms, drop_ms; /* where the clients' time went */
};

struct client {
	unsigned idx;
	pthread_t tid;
	ush_ring *ring;
	char app[2][40];
	struct counts n;
	uint32_t *abandoned; /* shuffle ids */
	unsigned nabandoned, cabandoned;
	char msg[1536];      /* the failure, if any */
	uint8_t poison[POISON_LEN];
};

/* A shuffle a client ran: its plan, the statuses it keeps and what the
 * workers' epochs were when it was read back. */
struct run {
	struct plan p;
	const char *app;
	struct ush_status st[MAX_MAPS];
	uint8_t *seen[MAX_MAPS];
	unsigned read_at[NW];
	uint32_t next_attempt;
};

static void run_free(struct run *r)
{
	th_statuses_free(r->st, MAX_MAPS);
	for (unsigned m = 0; m < MAX_MAPS; m++) {
		free(r->seen[m]);
		r->seen[m] = NULL;
	}
}

__attribute__((format(printf, 2, 3))) static int fatal(struct client *c,
							const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
	atomic_store(&stop, true);
	return -1;
}

/* Opens map m of r as attempt a and writes n records tagged tag; with
 * poison, one more of POISON_LEN bytes that goes out at once (a frame the
 * worker stores before the writer goes away). Commits if st, keeping a
 * copy of the status there. Returns the writer's result; *msg its error. */
static int push(struct client *c, struct run *r, uint32_t m, uint32_t a,
		uint32_t tag, uint32_t n, bool poison, struct ush_status *st,
		char *msg, size_t msz)
{
	const struct plan *p = &r->p;
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = p->shuffle,
		.map = m, .attempt = a, .partitions = p->parts,
		.target = USH_TARGET_NET, .workers = workers,
		.timeout_ms = OP_TIMEOUT_MS, .app = r->app};
	ush_writer *w = NULL;
	uint8_t b[REC_MAX];
	int ret = ush_writer_open(&w, c->ring, &wo);
	for (uint32_t i = 0; !ret && i < n; i++)
		ret = ush_writer_write(w, part_of(m, i, p->parts), b,
				       rec_make(b, p->shuffle, m, i, tag, 0));
	if (!ret && poison)
		ret = ush_writer_write(w, part_of(m, n, p->parts), c->poison,
				       rec_make(c->poison, p->shuffle, m, n,
						tag, POISON_LEN));
	if (!ret && st)
		ret = ush_writer_commit(w, NULL);
	struct ush_status s;
	if (!ret && st && !(ret = ush_writer_status(w, &s))) {
		void *copy = malloc(s.len);
		if (!copy)
			abort();
		memcpy(copy, s.data, s.len);
		th_status_free(st);
		*st = (struct ush_status){copy, s.len};
	}
	if (ret)
		snprintf(msg, msz, "%s", w && ush_writer_error(w) ?
				 ush_writer_error(w) : ush_last_error());
	ush_writer_free(w);
	return ret;
}

/* Writes and commits every map of r, each a new attempt: 0, 1 to push
 * again from scratch (a kill explains the failure), -1 fatal. Every
 * attempt number is new, so no worker can hold frames of it already. */
static int push_all(struct client *c, struct run *r)
{
	const struct plan *p = &r->p;
	char msg[1024];
	struct window w;
	for (uint32_t m = 0; m < p->maps; m++) {
		uint32_t a = r->next_attempt++;
		int ret = 0;
		if (p->fail_first[m]) {
			/* Half its records and a poison one, then the writer
			 * goes away without a commit. */
			window_open(&w);
			ret = push(c, r, m, a, a + 1, p->records[m] / 2, true,
				   NULL, msg, sizeof(msg));
			if (ret && !explained(&w, 7, msg))
				return fatal(c, "shuffle %u map %u attempt %u "
					     "(meant to fail later): %s (no "
					     "kill explains it)", p->shuffle,
					     m, a, msg);
			c->n.failed_attempts++;
			a = r->next_attempt++;
		}
		window_open(&w);
		ret = push(c, r, m, a, 0, p->records[m], false, &r->st[m],
			   msg, sizeof(msg));
		if (!ret && p->discard[m]) {
			/* A second attempt commits too (a speculative task);
			 * the driver keeps the first one's status. */
			struct ush_status other = {0};
			a = r->next_attempt++;
			window_open(&w);
			ret = push(c, r, m, a, a + 1, p->records[m], true,
				   &other, msg, sizeof(msg));
			th_status_free(&other);
			c->n.discarded += !ret;
		}
		if (ret && explained(&w, 7, msg))
			return 1;
		if (ret)
			return fatal(c, "shuffle %u map %u attempt %u: %s (no "
				     "kill explains it)", p->shuffle, m, a,
				     msg);
	}
	return 0;
}

/* Checks one record of partition part read from r; marks it seen. */
static bool check_rec(struct client *c, struct run *r, uint32_t part,
		      const uint8_t *rec, size_t len, uint32_t *undo,
		      size_t *nundo)
{
	const struct plan *p = &r->p;
	uint32_t h[4];
	uint8_t exp[REC_MAX];
	if (len < REC_HDR)
		return fatal(c, "shuffle %u partition %u: a record of %zu "
			     "bytes", p->shuffle, part, len), false;
	memcpy(h, rec, sizeof(h));
	if (h[0] != p->shuffle || h[1] >= p->maps || h[2] >= p->records[h[1]]
	    || h[3] != 0)
		return fatal(c, "shuffle %u partition %u: record (shuffle %u "
			     "map %u index %u tag %u) is not one of the "
			     "attempts the statuses name", p->shuffle, part,
			     h[0], h[1], h[2], h[3]), false;
	uint32_t m = h[1], i = h[2];
	if (part_of(m, i, p->parts) != part)
		return fatal(c, "shuffle %u: map %u record %u read from "
			     "partition %u", p->shuffle, m, i, part), false;
	size_t el = rec_make(exp, p->shuffle, m, i, 0, 0);
	if (el != len || memcmp(exp, rec, len))
		return fatal(c, "shuffle %u partition %u map %u record %u: "
			     "bytes differ", p->shuffle, part, m, i), false;
	if (r->seen[m][i])
		return fatal(c, "shuffle %u partition %u map %u record %u: "
			     "read twice", p->shuffle, part, m, i), false;
	r->seen[m][i] = 1;
	undo[(*nundo)++] = m << 28 | i; /* maps < 4, records < 2^28 */
	return true;
}

/* Reads partition part: 0, 1 to read it again (a kill explains the
 * failure), -1 fatal. */
static int read_part(struct client *c, struct run *r, uint32_t part,
		     uint32_t *undo)
{
	const struct plan *p = &r->p;
	unsigned at = ush_net_worker_of(part, NW);
	struct window w;
	window_open(&w);
	struct ush_reader_opts o;
	ush_reader_opts_init(&o);
	o.partition = part;
	o.statuses = r->st;
	o.nstatuses = p->maps;
	o.timeout_ms = OP_TIMEOUT_MS;
	ush_reader *rd = NULL;
	int ret = ush_reader_open(&rd, &o);
	size_t nundo = 0;
	const void *rec;
	size_t len;
	while (!ret && (ret = ush_reader_next(rd, &rec, &len)) == 1) {
		ret = 0;
		if (!check_rec(c, r, part, rec, len, undo, &nundo)) {
			ush_reader_free(rd);
			return -1;
		}
	}
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", ush_last_error());
	ush_reader_free(rd);
	if (!ret) {
		c->n.records += nundo;
		return 0;
	}
	for (size_t k = 0; k < nundo; k++)
		r->seen[undo[k] >> 28][undo[k] & 0xfffffff] = 0;
	if (explained(&w, 1u << at, msg))
		return 1;
	return fatal(c, "shuffle %u partition %u (worker %s): %d %s: %s (no "
		     "kill explains it)", p->shuffle, part, addr[at], ret,
		     ush_err_name(ret), msg);
}

/* Reads back every partition of r that the workers in mask hold, and
 * checks that each of their records came exactly once. */
static int read_all(struct client *c, struct run *r, unsigned mask)
{
	const struct plan *p = &r->p;
	uint32_t most = 0;
	for (uint32_t m = 0; m < p->maps; m++) {
		free(r->seen[m]);
		r->seen[m] = calloc(p->records[m] + 1, 1);
		if (!r->seen[m])
			abort();
		most += p->records[m];
	}
	uint32_t *undo = malloc((most + 1) * sizeof(*undo));
	if (!undo)
		abort();
	for (unsigned i = 0; i < NW; i++)
		r->read_at[i] = atomic_load(&epoch[i]);
	int ret = 0;
	for (uint32_t part = 0; !ret && part < p->parts; part++) {
		unsigned tries = 0;
		if (!(mask >> ush_net_worker_of(part, NW) & 1))
			continue;
		while ((ret = read_part(c, r, part, undo)) == 1 &&
		       ++tries < MAX_READS && !atomic_load(&stop)) {
			c->n.read_retries++;
			wait_up(7);
		}
		if (ret == 1 && atomic_load(&stop))
			ret = -1; /* another thread failed */
		else if (ret == 1)
			ret = fatal(c, "shuffle %u partition %u: %u reads "
				    "failed", p->shuffle, part, tries);
		c->n.partitions++;
	}
	free(undo);
	for (uint32_t m = 0; !ret && m < p->maps; m++)
		for (uint32_t i = 0; i < p->records[m]; i++)
			if (!r->seen[m][i] && mask >> ush_net_worker_of(
					   part_of(m, i, p->parts), NW) & 1)
				return fatal(c, "shuffle %u map %u record %u "
					     "(partition %u) never read",
					     p->shuffle, m, i,
					     part_of(m, i, p->parts));
	return ret;
}

static int drop(struct client *c, struct run *r)
{
	for (unsigned tries = 0; tries < MAX_TRIES; tries++) {
		struct window w;
		window_open(&w);
		if (!ush_shuffle_drop(workers, r->app, r->p.shuffle,
				      OP_TIMEOUT_MS)) {
			c->n.drops++;
			return 0;
		}
		if (!explained(&w, 7, ush_last_error()))
			return fatal(c, "drop of shuffle %u: %s (no kill "
				     "explains it)", r->p.shuffle,
				     ush_last_error());
		c->n.drop_retries++;
		wait_up(7);
	}
	return fatal(c, "drop of shuffle %u: %d tries failed", r->p.shuffle,
		     MAX_TRIES);
}

/* A shuffle kept since it was read: read again what the workers
 * restarted meanwhile hold (their acknowledged commits must have
 * survived), then drop it. */
static int retire(struct client *c, struct run *r)
{
	unsigned restarted = 0;
	for (unsigned i = 0; i < NW; i++)
		restarted |= (atomic_load(&epoch[i]) != r->read_at[i]) << i;
	int ret = 0;
	uint64_t t = now_ms();
	if (restarted) {
		c->n.rereads++;
		ret = read_all(c, r, restarted);
	}
	c->n.read_ms += now_ms() - t;
	t = now_ms();
	if (!ret)
		ret = drop(c, r);
	c->n.drop_ms += now_ms() - t;
	run_free(r);
	return ret;
}

static int run_one(struct client *c, struct run *r, uint32_t k)
{
	plan_of(k, &r->p);
	char eph[40];
	unsigned slot = c->idx * 3;
	if (r->p.abandon) {
		/* An application of its own, heartbeated while it runs. */
		snprintf(eph, sizeof(eph), "soak-c%u-x%u", c->idx,
			 r->p.shuffle);
		app_set(slot + 2, eph);
		r->app = eph;
	} else {
		r->app = c->app[c->app[1][0] && (k & 1)];
	}
	int ret = 1;
	for (unsigned t = 0; ret == 1 && t < MAX_TRIES; t++) {
		if (t) {
			th_statuses_free(r->st, MAX_MAPS);
			wait_up(7);
		}
		c->n.tries++;
		uint64_t t0 = now_ms();
		ret = atomic_load(&stop) ? -1 : push_all(c, r);
		c->n.push_ms += now_ms() - t0;
	}
	if (ret == 1)
		ret = fatal(c, "shuffle %u: %d pushes failed", r->p.shuffle,
			    MAX_TRIES);
	uint64_t t = now_ms();
	if (!ret)
		ret = read_all(c, r, 7);
	c->n.read_ms += now_ms() - t;
	c->n.shuffles += !ret;
	if (!ret && r->p.abandon) {
		/* Never dropped: the application goes silent. */
		app_set(slot + 2, NULL);
		if (c->nabandoned == c->cabandoned) {
			c->cabandoned = c->cabandoned ? 2 * c->cabandoned : 16;
			c->abandoned = realloc(c->abandoned, c->cabandoned *
					       sizeof(*c->abandoned));
			if (!c->abandoned)
				abort();
		}
		c->abandoned[c->nabandoned++] = r->p.shuffle;
		c->n.abandoned++;
		run_free(r);
		return 1; /* not kept */
	}
	return ret;
}

static void client_run(struct client *c)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.pool_bytes = 16u << 20;
	ro.push_size = PUSH_SIZE;
	int ret = ush_ring_create(&c->ring, &ro);
	if (ret) {
		fatal(c, "ring: %s", ush_last_error());
		return;
	}
	/* Clients 0 and 2 write under two applications. */
	snprintf(c->app[0], sizeof(c->app[0]), "soak-c%u", c->idx);
	if (c->idx % 2 == 0)
		snprintf(c->app[1], sizeof(c->app[1]), "soak-c%u.b", c->idx);
	app_set(c->idx * 3, c->app[0]);
	app_set(c->idx * 3 + 1, c->app[1][0] ? c->app[1] : NULL);
	/* The last DEFER shuffles stay on the workers until the next ones
	 * are read, so the workers always hold a few, across kills. */
	struct run kept[DEFER] = {0};
	unsigned nkept = 0, head = 0;
	for (;;) {
		uint32_t k = atomic_fetch_add(&next_k, 1);
		if (k >= K.shuffles || atomic_load(&stop))
			break;
		if (nkept == DEFER) {
			if (retire(c, &kept[head]))
				break;
			head = (head + 1) % DEFER;
			nkept--;
		}
		struct run *r = &kept[(head + nkept) % DEFER];
		*r = (struct run){0};
		ret = run_one(c, r, k);
		if (ret < 0)
			break;
		nkept += ret == 0;
	}
	for (; nkept && !atomic_load(&stop); nkept--, head = (head + 1) % DEFER)
		if (retire(c, &kept[head]))
			break;
	for (unsigned i = 0; i < DEFER; i++)
		run_free(&kept[i]);
	app_set(c->idx * 3, NULL);
	app_set(c->idx * 3 + 1, NULL);
	ush_ring_free(c->ring);
}

static void *client_main(void *arg)
{
	client_run(arg);
	atomic_fetch_sub(&clients_left, 1);
	return NULL;
}

/* ------------------------------------------------ worker resources */

struct usage {
	long fds, rss_kib, disk_kib, entries;
	double cpu_s; /* user + system time of the process */
	char stray[256]; /* names in --dir that should not be there */
};

static long count_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	long n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long v = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

static double cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	unsigned long ut, st;
	const char *p = strrchr(buf, ')'); /* after the command name */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long du_bytes;
static int du_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)path;
	(void)flag;
	(void)ftw;
	du_bytes += (long)st->st_blocks * 512;
	return 0;
}

/* The worker's --dir: what it uses on disk, and what it holds besides
 * its lock, its commit logs and their snapshot (shuffle directories). */
static void usage_of(const struct th_worker *w, struct usage *u)
{
	*u = (struct usage){.fds = count_fds(w->pid),
			    .rss_kib = rss_kib(w->pid), .cpu_s = cpu_s(w->pid)};
	du_bytes = 0;
	nftw(w->dir, du_one, 16, FTW_PHYS);
	u->disk_kib = du_bytes / 1024;
	DIR *d = opendir(w->dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		const char *n = de->d_name;
		if (n[0] == '.' || !strcmp(n, "ushuffled.lock") ||
		    !strcmp(n, "ushuffled.id") || !strcmp(n, "commit.snap") ||
		    !strcmp(n, "commit.log"))
			continue;
		u->entries++;
		size_t l = strlen(u->stray);
		if (l + strlen(n) + 2 < sizeof(u->stray))
			snprintf(u->stray + l, sizeof(u->stray) - l, "%s%s",
				 l ? " " : "", n);
	}
	if (d)
		closedir(d);
}

/* ------------------------------------------------------------ main */

/* Has every worker forgotten abandoned shuffle s: may another
 * application claim it now? The probe's claims are dropped again (those
 * of the workers that took it before one refused, too). */
static bool forgotten(ush_ring *ring, uint32_t s)
{
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = s,
		.partitions = 16, .target = USH_TARGET_NET,
		.workers = workers, .timeout_ms = OP_TIMEOUT_MS,
		.app = "soak-probe"};
	ush_writer *w = NULL;
	int ret = ush_writer_open(&w, ring, &wo);
	ush_writer_free(w);
	if (ret && ret != -EACCES)
		fail_msg("probing shuffle %u: %s", s, ush_last_error());
	int dret = ush_shuffle_drop(workers, "soak-probe", s, OP_TIMEOUT_MS);
	if (!ret)
		th_ok(dret);
	return !ret;
}

static void spawn_worker(unsigned i, int port)
{
	static char ttl[32], log[NW][600];
	snprintf(ttl, sizeof(ttl), "--app-ttl=%u", K.ttl_ms);
	snprintf(log[i], sizeof(log[i]), "%s.log", wk[i].dir);
	wk[i].extra = ttl;
	wk[i].nofile = K.nofile;
	wk[i].errlog = log[i];
	th_worker_spawn(&wk[i], "127.0.0.1", port, K.threads);
}

/* Kills worker 1 and 2 in turn, every K.kill_ms, until the clients are
 * done. Worker 0 lives through the whole run, so its figures at the end
 * are those of one process. Returns the kills. */
static unsigned killer(struct usage *half)
{
	unsigned kills = 0;
	bool sampled = false;
	uint64_t next = now_ms() + K.kill_ms;
	while (atomic_load(&clients_left) && !atomic_load(&stop)) {
		sleep_ms(20);
		if (!sampled && atomic_load(&next_k) >= K.shuffles / 2) {
			for (unsigned i = 0; i < NW; i++)
				usage_of(&wk[i], &half[i]);
			sampled = true;
		}
		if (!K.kill_ms || now_ms() < next)
			continue;
		unsigned v = 1 + kills % (NW - 1);
		int port = wk[v].port;
		atomic_fetch_add(&epoch[v], 1);
		th_worker_kill(&wk[v]);
		sleep_ms(DOWN_MS);
		spawn_worker(v, port);
		atomic_fetch_add(&epoch[v], 1);
		kills++;
		next = now_ms() + K.kill_ms;
	}
	return kills;
}

static void soak(void **state)
{
	(void)state;
	K = (struct knobs){
		.shuffles = knob("USH_SOAK_SHUFFLES", SHUFFLES),
		.clients = knob("USH_SOAK_CLIENTS", 4),
		.max_parts = knob("USH_SOAK_MAX_PARTS", 2000),
		.kill_ms = knob("USH_SOAK_KILL_MS", 4000),
		.ttl_ms = knob("USH_SOAK_TTL_MS", 5000),
		.nofile = knob("USH_SOAK_NOFILE", 1024),
		.threads = knob("USH_SOAK_THREADS", 2),
		.seed = knob("USH_SOAK_SEED", 1),
	};
	if (K.clients < 1 || K.clients > MAX_CLIENTS || K.max_parts < 16 ||
	    K.ttl_ms < 100 || K.threads < 1)
		fail_msg("USH_SOAK_*: clients 1..%d, max parts >= 16, ttl >= "
			 "100 ms, threads >= 1", MAX_CLIENTS);
	print_message("soak: %u shuffles, %u clients, 16..%u partitions, "
		      "kill every %u ms, --app-ttl=%u, nofile %u, %u "
		      "threads per worker, seed %u\n", K.shuffles, K.clients,
		      K.max_parts, K.kill_ms, K.ttl_ms, K.nofile, K.threads,
		      K.seed);
	uint64_t t0 = now_ms();
	struct usage u0[NW], u1[NW], uh[NW] = {{0}};
	for (unsigned i = 0; i < NW; i++) {
		wk[i] = (struct th_worker){0};
		snprintf(wk[i].dir, sizeof(wk[i].dir), "%s", th_tmpdir("soak"));
		spawn_worker(i, 0);
		snprintf(addr[i], sizeof(addr[i]), "%s", wk[i].addr);
		snprintf(workers + strlen(workers),
			 sizeof(workers) - strlen(workers), "%s%s",
			 i ? "," : "", addr[i]);
		atomic_store(&epoch[i], 0);
	}
	/* A worker prints its port before its threads are set up; once it
	 * answers, they are. */
	th_ok(ush_app_heartbeat(workers, "soak-start", OP_TIMEOUT_MS));
	for (unsigned i = 0; i < NW; i++)
		usage_of(&wk[i], &u0[i]);

	pthread_t hb[NW];
	struct client *cl = calloc(K.clients, sizeof(*cl));
	assert_non_null(cl);
	for (unsigned i = 0; i < NW; i++)
		assert_int_equal(pthread_create(&hb[i], NULL, heartbeat_main,
						(void *)(uintptr_t)i), 0);
	atomic_store(&clients_left, K.clients);
	for (unsigned i = 0; i < K.clients; i++) {
		cl[i].idx = i;
		assert_int_equal(pthread_create(&cl[i].tid, NULL, client_main,
						&cl[i]), 0);
	}
	unsigned kills = killer(uh);
	for (unsigned i = 0; i < K.clients; i++)
		pthread_join(cl[i].tid, NULL);
	atomic_store(&hb_stop, true);
	for (unsigned i = 0; i < NW; i++)
		pthread_join(hb[i], NULL);
	/* The readers' idle connections, kept for a next FETCH, are the
	 * library's: closed, so that the workers' descriptors below count
	 * what the workers keep. */
	net_conn_drain();
	uint64_t t_run = now_ms();

	struct counts sum = {0};
	int failed = -1;
	for (unsigned i = 0; i < K.clients; i++)
		if (cl[i].msg[0]) {
			print_message("client %u: %s\n", i, cl[i].msg);
			failed = (int)i;
		}
	if (hb_err[0])
		fail_msg("%s", hb_err);
	if (failed >= 0)
		fail_msg("client %d: %s", failed, cl[failed].msg);
	for (unsigned i = 0; i < K.clients; i++) {
#define ADD(f) sum.f += cl[i].n.f
		ADD(shuffles), ADD(tries), ADD(failed_attempts),
			ADD(discarded), ADD(read_retries), ADD(rereads),
			ADD(drops), ADD(drop_retries), ADD(abandoned),
			ADD(records), ADD(partitions), ADD(push_ms),
			ADD(read_ms), ADD(drop_ms);
#undef ADD
	}
	assert_int_equal(sum.shuffles, K.shuffles);

	/* The abandoned shuffles expire (their applications are silent);
	 * every other one was dropped. So no shuffle directory is left, and
	 * another application may claim an abandoned shuffle's number. */
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, NULL));
	bool clean = false;
	unsigned probed = 0;
	for (uint64_t end = now_ms() + EXPIRY_S * 1000u;
	     !clean && now_ms() < end; sleep_ms(clean ? 0 : 250)) {
		clean = true;
		for (unsigned i = 0; i < NW; i++) {
			usage_of(&wk[i], &u1[i]);
			clean &= u1[i].entries == 0;
		}
		for (unsigned i = 0; clean && i < K.clients; i++)
			while (clean && cl[i].nabandoned) {
				clean = forgotten(ring, cl[i].abandoned[
						cl[i].nabandoned - 1]);
				cl[i].nabandoned -= clean;
				probed += clean;
			}
	}
	ush_ring_free(ring);
	uint64_t t_expired = now_ms();
	for (unsigned i = 0; i < NW; i++) {
		usage_of(&wk[i], &u1[i]);
		assert_true(th_worker_alive(&wk[i]));
	}
	print_message("soak: %lu shuffles (%lu pushes from scratch, %lu "
		      "failed attempts, %lu discarded committed attempts, "
		      "%lu abandoned to the TTL), %lu partitions read (%lu "
		      "again after a kill, %lu shuffles reread after a "
		      "restart), %lu records checked, %lu drops (%lu "
		      "retried), %u kills, %lu heartbeats; %.1f s running, "
		      "expiry done %.1f s later; client time: %.0f%% "
		      "pushing, %.0f%% reading, %.0f%% dropping\n",
		      sum.shuffles, sum.tries,
		      sum.failed_attempts, sum.discarded, sum.abandoned,
		      sum.partitions, sum.read_retries, sum.rereads,
		      sum.records, sum.drops, sum.drop_retries, kills,
		      atomic_load(&heartbeats), (t_run - t0) / 1000.0,
		      (t_expired - t_run) / 1000.0,
		      100.0 * sum.push_ms / (K.clients * (t_run - t0)),
		      100.0 * sum.read_ms / (K.clients * (t_run - t0)),
		      100.0 * sum.drop_ms / (K.clients * (t_run - t0)));
	for (unsigned i = 0; i < NW; i++)
		print_message("soak: worker %u (%s): fds %ld -> %ld "
			      "(half-way %ld), VmRSS %ld -> %ld KiB (half-way "
			      "%ld), --dir %ld -> %ld KiB, %.1f CPU s%s%s%s\n",
			      i,
			      i ? "killed in turn" : "never killed",
			      u0[i].fds, u1[i].fds, uh[i].fds, u0[i].rss_kib,
			      u1[i].rss_kib, uh[i].rss_kib, u0[i].disk_kib,
			      u1[i].disk_kib, u1[i].cpu_s,
			      i ? " since its last start" : "",
			      u1[i].entries ? "; left: " : "", u1[i].stray);
	print_message("soak: bounds: fds <= start + %d, VmRSS <= start + "
		      "%u MiB (%u threads' buffers) + %d MiB, --dir <= start "
		      "+ %d KiB\n", FD_SLACK,
		      K.threads * RSS_THREAD_KIB / 1024, K.threads,
		      RSS_SLACK_KIB / 1024, DISK_SLACK_KIB);
	for (unsigned i = 0; i < NW; i++)
		if (u1[i].entries)
			fail_msg("worker %u: %ld shuffle directories left "
				 "after %d s: %s", i, u1[i].entries, EXPIRY_S,
				 u1[i].stray);
	for (unsigned i = 0; i < K.clients; i++)
		if (cl[i].nabandoned)
			fail_msg("shuffle %u, abandoned by client %u, is still "
				 "claimed after %d s", cl[i].abandoned[0], i,
				 EXPIRY_S);
	assert_int_equal(probed, sum.abandoned);
	for (unsigned i = 0; i < NW; i++) {
		/* A worker closes a connection once it reads its end. */
		for (int k = 0; k < 50 && u1[i].fds > u0[i].fds + FD_SLACK;
		     k++) {
			sleep_ms(100);
			usage_of(&wk[i], &u1[i]);
		}
		if (u1[i].fds > u0[i].fds + FD_SLACK)
			fail_msg("worker %u: %ld descriptors open, %ld at the "
				 "start", i, u1[i].fds, u0[i].fds);
		if (u1[i].disk_kib > u0[i].disk_kib + DISK_SLACK_KIB)
			fail_msg("worker %u: --dir holds %ld KiB, %ld at the "
				 "start", i, u1[i].disk_kib, u0[i].disk_kib);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
		/* (A sanitizer's allocator keeps freed memory.) */
		if (u1[i].rss_kib > u0[i].rss_kib + RSS_SLACK_KIB +
				    (long)K.threads * RSS_THREAD_KIB)
			fail_msg("worker %u: VmRSS %ld KiB, %ld at the start",
				 i, u1[i].rss_kib, u0[i].rss_kib);
#endif
	}
	for (unsigned i = 0; i < NW; i++) {
		th_worker_stop(&wk[i]);
		th_rmrf(wk[i].dir);
		unlink(wk[i].errlog);
	}
	for (unsigned i = 0; i < K.clients; i++)
		free(cl[i].abandoned);
	free(cl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(soak),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
