/*
 * ushuffled's server loop, run by the library (src/worker/). One thread,
 * ring and SO_REUSEPORT listener per thread; a connection belongs to the
 * thread that accepted it. Threads share only the commit table.
 *
 * Callbacks of ring ops only record what happened (queue a chunk, note a
 * completion); the thread's loop does the work. So code that waits on the
 * ring from inside the loop (a full pool, a commit) never re-enters
 * itself.
 */
#ifndef USHI_WORKER_H
#define USHI_WORKER_H

#include "net/proto.h"
#include "ushuffle/worker.h"
#include "core/ring.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#define WK_BUFS 256          /* provided recv buffers per thread */
#define WK_BUF_SIZE (64u << 10)
#define WK_BGID 7
/* A thread's ring: WK_IODEPTH ops for partition writes, plus two per
 * connection (its armed recv and one send); the ring's own bound (4096)
 * caps the connections one thread serves at WK_THREAD_CONNS_MAX. */
#define WK_IODEPTH 1024
#define WK_THREAD_CONNS_MAX 1536
#define WK_SEND_TIMEOUT_MS 30000
/* A failed connection keeps reading (and dropping) what its peer still
 * sends this long after its ERROR frame, so that closing with unread
 * bytes does not reset the connection before the peer reads the ERROR. */
#define WK_LINGER_MS 2000
/* Accept errors (EMFILE...) pause accepting, from 10 ms doubling to 1 s. */
#define WK_ACCEPT_BACKOFF_MIN_MS 10u
#define WK_ACCEPT_BACKOFF_MAX_MS 1000u
/* Log lines per second of one kind (one format string), beyond which
 * they are counted and reported as suppressed. */
#define WK_LOG_BURST 10u
#define WK_LOG_KINDS 64u
#define WK_FETCH_CHUNK (1u << 20)

struct wk_thread;

/* An attempt a writer opened here, in the table until its shuffle is
 * dropped. Workers elect no winner: readers ask for the attempts their
 * map statuses name. */
enum wk_attempt_state {
	WK_OPEN = 1,   /* a connection is writing it */
	WK_ABANDONED,  /* its writer left without a commit */
	WK_COMMITTED,  /* synced and logged (MAPPER_END) */
	WK_GONE,       /* dropped: a tombstone until the table grows */
};

struct wk_attempt {
	uint32_t shuffle, map, attempt;
	uint8_t state;  /* enum wk_attempt_state; 0: a free slot */
	uint64_t owner; /* WK_OPEN: the id of the connection writing it */
};

/* A record of the worker's durable state (wal.c). */
enum wk_rec_type {
	WK_REC_CLAIM = 1,  /* app claims shuffle */
	WK_REC_COMMIT = 2, /* (shuffle, map, attempt) committed */
	WK_REC_DROP = 3,   /* shuffle dropped */
};

struct wk_rec {
	uint8_t type;
	uint32_t shuffle, map, attempt;
	char app[USHI_PROTO_APP_MAX + 1];
};

/* An application: its last sign of life and what it holds against its
 * quotas. Allocated one by one, so a connection may keep a pointer to its
 * own; freed only when it has no connection and no shuffle left. */
struct wk_app {
	struct wk_app *hnext; /* its chain in wk->apps */
	char id[USHI_PROTO_APP_MAX + 1];
	uint64_t seen_ns;   /* last heard of */
	unsigned nconns;    /* connections past HELLO (lock) */
	unsigned nshuffles; /* shuffles it owns (lock) */
	unsigned natt;      /* attempts of its shuffles open or abandoned
			       (lock) */
	unsigned ncommits;  /* attempts of its shuffles committed (lock) */
	/* DATA bytes stored here for it: its writers add each frame as it
	 * is taken (no lock: an atomic on the data path); a drop takes its
	 * shuffle's bytes off. */
	atomic_uint_fast64_t bytes;
};

struct wk_owner {
	uint32_t shuffle;
	char app[USHI_PROTO_APP_MAX + 1];
	uint64_t bytes; /* DATA bytes of the shuffle settled by its writers
			   (at commit or close), or found at start */
};

/* A kind of log line (its format string) and its rate this second. */
struct wk_log_kind {
	const char *fmt;
	uint64_t second;      /* ushi_now_ns() / 1e9 of the current window */
	unsigned lines;       /* printed in it */
	unsigned long suppressed; /* not printed since the last report */
};

/* The counters behind ush_worker_stats() (worker.c): relaxed atomics,
 * bumped where the event happens, but the histogram, under its lock;
 * the gauges are computed when read. */
struct wk_metrics {
	atomic_uint_fast64_t bytes_in, bytes_out, frames_in, frames_out;
	atomic_uint_fast64_t bytes_in_place;
	atomic_uint_fast64_t accepted, refused, commits, drops, expiries;
	/* A scrape must see count, sum and buckets of the same syncs
	 * (count == +Inf bucket, sum within the buckets' bounds), which
	 * counters loaded one by one do not give; one sync a commit is
	 * rare enough for a lock. */
	pthread_mutex_t sync_lock;
	uint64_t sync_count, sync_ns;
	uint64_t sync_bucket[USH_WORKER_SYNC_BUCKETS];
	atomic_uint_fast64_t errors[USH_WORKER_ERR_KINDS];
};

#define WK_COUNT(wk, field, n)                                               \
	atomic_fetch_add_explicit(&(wk)->m.field, (n), memory_order_relaxed)

struct ush_worker {
	struct ush_worker_opts o;
	struct wk_metrics m;
	char *dir, *host;
	int port;
	unsigned nthreads;
	struct wk_thread *threads;
	bool started;
	atomic_int stop;
	int dir_lock;         /* fd holding the flock on <dir>/ushuffled.lock */
	pthread_mutex_t lock; /* attempts, owners, apps, drops, the logs */
	struct wk_attempt *att; /* open addressing, acap a power of two */
	size_t natt, nslots, acap; /* live entries, used slots, slots */
	struct wk_owner *owners; /* ascending shuffle */
	size_t nowners, cowners;
	struct wk_app **apps; /* hash chains by id, capps a power of two */
	size_t napps, capps;
	uint64_t app_key[2];  /* the hash's key, random: ids are the
				 clients' choice */
	size_t ncommits;      /* committed attempts: with nowners, the
				 records a compaction keeps */
	uint8_t *secret;      /* the secret of every application without a
				 file in secrets_dir (NULL: none) */
	size_t secret_len;
	int secrets_dirfd;    /* --secrets-dir, or -1 */
	uint64_t log_bytes;   /* appended since the last compaction */
	uint64_t snap_bytes;  /* the snapshot's size */
	uint32_t *drops;      /* shuffles dropped that some thread has not
				 yet seen (its drop_seen), in epoch order */
	size_t ndrops;
	unsigned drops_base;  /* the drop epoch of drops[0] */
	atomic_uint drop_epoch;
	atomic_uint_fast64_t next_conn_id;
	atomic_uint nconns;   /* connections accepted and not yet freed, all
				 threads: at most o.max_conns */
	unsigned thread_conns; /* what one thread may hold (its ring) */
	pthread_mutex_t log_lock;
	struct wk_log_kind log_kinds[WK_LOG_KINDS];
	atomic_bool log_suppressed; /* some kind has lines to report */
	int dirfd;            /* --dir, opened once: paths resolve beneath */
	unsigned open_max;    /* open log and index files per thread */
	size_t pdir_budget;   /* partition directory cache per thread */
	atomic_bool direct_refused; /* O_DIRECT refused for a log (logged) */
	int err;
};

/* An intrusive doubly-linked list (NULL-terminated; the owner knows
 * whether a node is on it). */
struct wk_link {
	struct wk_link *prev, *next;
};

struct wk_list {
	struct wk_link *head, *tail;
};

static inline void wk_list_add(struct wk_list *l, struct wk_link *n)
{
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

static inline void wk_list_del(struct wk_list *l, struct wk_link *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

/* The struct whose link `field` is at link. */
#define WK_OF(link, type, field)                                             \
	((type *)(void *)((char *)(link) - offsetof(type, field)))

/* Log writes of one shuffle log in flight at once (store.c). */
#define WK_LOG_QD 8
/* Index entries are written in batches of at least this many bytes
 * (and at every sync). */
#define WK_IDX_BATCH (64u << 10)
/* An index entry's bytes (docs/format.md, "The worker's log"). */
#define WK_IDX_ENTRY 20u
/* Partition directories cached per worker, all threads together. */
#define WK_PDIR_BUDGET (64u << 20)
/* FETCH reads this long or longer are O_DIRECT (where the worker
 * writes so); shorter ones go through the page cache. */
#define WK_FETCH_DIRECT_MIN (32u << 10)
/* Reads of one FETCH stream in flight at once. */
#define WK_FETCH_READS 8

/*
 * A shuffle's log on one thread (store.c): "s<S>/t<T>.log", the DATA
 * frames the thread received for S packed back to back, and
 * "s<S>/t<T>.idx", one entry per frame. Frames are copied into buf (a
 * pool buffer whose first byte is at file offset base, aligned) and
 * written at aligned offsets; a sync writes the partial tail block
 * padded and keeps it in buf, so the next write rewrites that block
 * from its start. Its files may be closed (the open files are a
 * bounded cache): the rest stays.
 */
struct wk_shuf {
	struct wk_shuf *hnext;
	struct wk_thread *t;
	uint32_t shuffle;
	struct wk_link lru;     /* t->lru while its files are open */
	struct wk_link bufq;    /* t->bufq while buf != NULL */
	int fd, slot, ifd;      /* log (and its ring slot), index; or -1 */
	bool opened;            /* the files were opened once (and checked) */
	bool direct;            /* the log is O_DIRECT: aligned writes */
	bool unsynced, iunsynced; /* written since their last fdatasync */
	uint64_t end;           /* the log's logical end: the next frame */
	uint64_t base;          /* file offset of buf->data[0] */
	uint64_t written;       /* log bytes below it are written */
	struct ushi_buf *buf;   /* the log buffer, or NULL */
	uint32_t len;           /* bytes of buf in use: end - base */
	uint8_t *ipend;         /* index entries not yet written */
	size_t ilen, icap;
	uint64_t ioff;          /* log offset of the first one's frame */
	uint64_t iend;          /* the index file's end */
	struct { uint64_t off, end; bool done; } wq[WK_LOG_QD];
	unsigned wq_head, wq_n; /* log writes in flight, oldest first */
	unsigned writes;        /* log and index writes in flight */
	unsigned fetch_threads; /* thread numbers whose logs fetch looks
				   for (0: not yet listed) */
	bool dir_made;          /* s<S> exists (mkdir done) */
	bool dir_unsynced;      /* s<S> has entries not yet synced */
	int err; /* the first failed write or sync of the shuffle here:
		    every later commit of it here fails with it */
};

/* One frame of a partition directory (fetch.c). */
struct wk_pent {
	uint64_t off;
	uint32_t len, map, attempt, partition;
};

/* A (shuffle, thread)'s frames by partition, built from its index. */
struct wk_pdir {
	struct wk_link lru;     /* t->pdirs, least recently used first */
	uint32_t shuffle, thread;
	uint64_t idx_size;      /* index bytes it was built from */
	struct wk_pent *ent;    /* by partition, log order within one */
	uint32_t nent;
	uint32_t *start;        /* partition p: ent[start[p] .. start[p+1]),
				   or NULL: binary search */
	uint32_t nparts;        /* start has nparts + 1 entries */
	struct wk_pent *bad;    /* extents the repair marked damaged */
	uint32_t nbad;
	size_t bytes;
};

/* What a FETCH streams: the wanted frames of the partition, in order. */
struct wk_fent {
	uint64_t off;
	uint32_t len;
	uint16_t thread;
};

struct wk_fetch;

/* A read of a FETCH stream: a run of adjacent frames of one log. */
struct wk_fread {
	struct wk_fetch *fe;
	struct ushi_buf *buf;   /* pool memory, or NULL: heap */
	uint8_t *mem;
	uint64_t off;           /* aligned file offset of mem[0] */
	uint32_t need, got;     /* bytes asked for; read so far */
	uint32_t lead;          /* mem[lead] is the first frame's byte */
	uint32_t len, frames;   /* frame bytes and frames to send */
	int res;                /* an error, or 0 */
	bool inflight, done;
};

struct wk_out {
	struct wk_out *next;
	uint32_t len;
	const uint8_t *ptr;     /* what to send: data, or a read's memory */
	struct ushi_buf *buf;   /* pool buffer to return after the send */
	void *heap;             /* memory to free after the send */
	uint8_t data[];
};

/* A connection's output queue, oldest first. */
struct wk_outq {
	struct wk_out *head, *tail;
};

struct wk_fetch {
	struct wk_thread *t;
	uint32_t shuffle, partition;
	uint64_t skip;            /* stream bytes the reader already has */
	struct proto_want *m;     /* attempts asked for, ascending maps */
	uint32_t nm;
	struct wk_fent *ent;      /* the frames to stream */
	uint32_t nent, next;      /* entries; the next one to read */
	int fd, dfd;              /* log being read, buffered and O_DIRECT
				     (-1: not open, -2: refused) */
	unsigned fd_thread;
	struct wk_fread rd[WK_FETCH_READS];
	unsigned rhead, rn;       /* reads queued, oldest first */
	unsigned inflight;        /* reads the kernel holds */
	uint64_t frames, bytes;
};

struct wk_chunk {
	uint16_t bid;
	uint32_t len;
};

struct wk_conn {
	struct wk_conn *next;
	struct wk_thread *t;
	int fd;
	char peer[64];
	uint32_t role;         /* 0 until HELLO */
	char app[USHI_PROTO_APP_MAX + 1]; /* its HELLO's application */
	struct wk_app *appr;   /* that application, held (nconns) from the
				  HELLO's answer until the connection closes */
	struct proto_hello pending; /* a HELLO waiting for its AUTH */
	bool auth_wait;        /* challenge sent: expect the client's AUTH */
	bool authed;           /* the client proved the secret */
	uint8_t expect[USHI_PROTO_MAC]; /* the client's proof, precomputed */
	uint64_t att_bytes;    /* DATA bytes of its attempt not yet settled
				  into the shuffle's owner entry */
	uint64_t id;           /* unique in the worker, from 1 */
	struct wk_attempt att; /* a writer's attempt (state: WK_OPEN while
				  it writes) */
	unsigned att_epoch;    /* drop_epoch when the attempt was last known
				  to be this connection's */
	uint64_t t_accept;     /* ushi_now_ns() when accepted */
	uint64_t t_active;     /* when bytes last came in or went out */
	uint64_t t_linger;     /* failed: when it stops waiting for the
				  peer's close (0: not lingering yet) */
	struct wk_chunk q[WK_BUFS];
	unsigned qhead, qn;
	/* In-place receive (a writer's, once the pool can spare a buffer):
	 * bytes land in rb, frames are parsed where they lie, and rb goes
	 * to the log as it is (wk_store_region): no copy. */
	struct ushi_buf *rb;
	uint32_t rlen, rpos;   /* bytes received into rb; parsed */
	bool rgot;             /* rb got bytes the loop has not looked at */
	uint32_t flast;        /* the size of the last frame received */
	struct wk_rent *rent;  /* rb's DATA frames */
	size_t rn, rcap;
	bool recv_armed, eof, failed, closed;
	int rerr;
	/* frame reassembly */
	uint8_t hdr[USH_FRAME_HDR_SIZE];
	uint32_t hlen;
	struct ushi_frame f;
	uint8_t *stage;
	size_t scap, sgot, sneed; /* sneed: 0 when not staging */
	/* output: one send in flight */
	struct wk_outq out;
	bool sending;
	uint64_t credit;       /* DATA bytes consumed, not yet acked */
	struct wk_fetch *fetch;
};

struct wk_thread {
	struct ush_worker *wk;
	unsigned idx;
	pthread_t tid;
	struct ush_ring *ring;
	int lfd;
	bool accept_armed;
	unsigned accept_backoff_ms; /* 0 after an accept that worked */
	uint64_t accept_resume;     /* no accept armed before (ushi_now_ns) */
	struct io_uring_buf_ring *br;
	uint8_t *bufs;
	size_t br_bytes;
	struct wk_conn *conns;
	unsigned nconns;
	int *accepted;         /* fds accepted, not yet set up (at most
				  wk->thread_conns, counted in wk->nconns) */
	unsigned naccepted;
	bool stopping;         /* draining: see drain_start() */
	uint64_t drain_end;    /* then every connection is told to go */
	struct wk_shuf **stab;
	size_t smask, nshuf;
	struct wk_list lru;    /* logs with open files, least recently
				  written first */
	struct wk_list bufq;   /* logs holding a log buffer, oldest first */
	atomic_uint nopen;     /* open log and index files (at most
				  wk->open_max; atomic for the metrics) */
	unsigned writes;       /* log and index writes in flight */
	unsigned flush_order;
	struct wk_list pdirs;  /* cached partition directories, LRU */
	size_t pdir_bytes;     /* their memory (at most wk->pdir_budget) */
	size_t fetch_pool;     /* pool bytes FETCH streams hold (at most
				  half the pool) */
	int log_fd;
	uint64_t log_off;
	bool dir_unsynced;
	atomic_uint drop_seen; /* drop epoch up to which it has dropped the
				  shuffles from its files (read by others to
				  trim wk->drops) */
	uint64_t expire_ns;    /* thread 0: the last TTL check */
	atomic_int ready;      /* 1 set up and serving, -1 setup failed */
	atomic_uint_fast64_t pass_ns; /* when its loop last passed (stalls) */
	char errmsg[512];      /* why setup failed (ush_last_error is
				  per thread) */
	int err;
};

/* worker.c */
/* Logs at level (0 error, 1 info, 2 debug) unless the worker's level is
 * lower. At most WK_LOG_BURST lines of one fmt per second are printed;
 * the rest are counted, and wk_log_flush() reports them. */
void wk_log(struct ush_worker *wk, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Counts an error of the kind that code (an errno or USH_E*) means. */
void wk_count_error(struct ush_worker *wk, int code);
/* Counts a commit's sync time in the histogram. */
void wk_count_sync(struct ush_worker *wk, uint64_t ns);
/* Reports lines suppressed in seconds that have ended. Cheap when none. */
void wk_log_flush(struct ush_worker *wk);

/* attempt.c: the shared attempt table. The caller holds wk->lock
 * around every function below up to store.c, but wk_log_open,
 * wk_log_replay, wk_app_expire, wk_drop_files and wk_sweep. */
struct wk_attempt *wk_attempt_find(struct ush_worker *wk, uint32_t shuffle,
				   uint32_t map, uint32_t attempt);
int wk_attempt_set(struct ush_worker *wk, uint32_t shuffle, uint32_t map,
		   uint32_t attempt, enum wk_attempt_state state);
/* Moves e (in the table) to state, counting it for its application. */
void wk_attempt_mark(struct ush_worker *wk, struct wk_attempt *e,
		     enum wk_attempt_state state);
/* Forgets the shuffle's attempts; call it before wk_owner_del(), which
 * ends the application's claim its attempts are counted against. */
void wk_attempt_drop(struct ush_worker *wk, uint32_t shuffle);
void wk_attempt_free(struct ush_worker *wk);

/* wal.c: the durable records. */
int wk_log_open(struct wk_thread *t);
/* What replay does with each record, in sequence order: 0 or -errno. */
typedef int (*wk_rec_fn)(struct ush_worker *wk, const struct wk_rec *r);
/* Reads the snapshot and every thread's log, skipping (and reporting)
 * corrupt records, and hands each record to apply. Returns 0 or the
 * first error. */
int wk_log_replay(struct ush_worker *wk, wk_rec_fn apply);
/* Appends the n records at r to t's log with one write and syncs it. */
int wk_log_append(struct wk_thread *t, const struct wk_rec *r, size_t n);
/* Whether most of the snapshot and logs is dead (lock held). */
bool wk_log_compact_due(const struct ush_worker *wk);
/* Writes the n records at r (the live state) as the snapshot and empties
 * every thread's log; a failure is logged and returned, and the logs
 * stand. Lock held. */
int wk_log_compact(struct ush_worker *wk, const struct wk_rec *r, size_t n);

/* state.c: changes logged, then applied; a shuffle's end. */
/* Applies a logged record to the tables. */
int wk_rec_apply(struct ush_worker *wk, const struct wk_rec *r);
/* Replay's apply: wk_rec_apply(), and a commit gives an unowned shuffle
 * its application. */
int wk_rec_replay(struct ush_worker *wk, const struct wk_rec *r);
/* The records that rebuild the live state (claims, then commits): fills
 * out (room for n) and returns how many there are. */
size_t wk_live_records(struct ush_worker *wk, struct wk_rec *out, size_t n);
/* wk_log_append(), compacting first when most of the logs is dead. */
int wk_rec_log(struct wk_thread *t, const struct wk_rec *r, size_t n);
/* Logs (one write) and applies the drops of the n shuffles; their files
 * go with wk_drop_files() after the lock is released. */
int wk_drop_locked(struct wk_thread *t, const uint32_t *shuffles, size_t n);
void wk_drop_files(struct wk_thread *t, uint32_t shuffle);
/* Drops the shuffles of every application silent for the TTL, and
 * removes those applications. */
void wk_app_expire(struct wk_thread *t);
/* At start: removes shuffle directories no application owns. */
void wk_sweep(struct ush_worker *wk);

/* app.c: applications, the shuffles they own, drops and expiry. */
const char *wk_owner_of(struct ush_worker *wk, uint32_t shuffle);
int wk_owner_set(struct ush_worker *wk, uint32_t shuffle, const char *app);
void wk_owner_del(struct ush_worker *wk, uint32_t shuffle);
/* The application is alive now: its entry in *out (if out), made if new
 * while the worker holds fewer than --max-apps. Returns 0, -EDQUOT
 * (that limit) or -ENOMEM. */
int wk_app_seen(struct ush_worker *wk, const char *app, struct wk_app **out);
/* The DATA bytes stored for all applications. */
uint64_t wk_app_bytes(struct ush_worker *wk);
/* The application's entry (made if new, whatever --max-apps says: a
 * claim, replayed or by a connection of an application held; alive
 * now), or NULL. */
struct wk_app *wk_app_get(struct ush_worker *wk, const char *app);
/* The application's entry, or NULL; changes nothing. */
struct wk_app *wk_app_find(struct ush_worker *wk, const char *app);
struct wk_owner *wk_owner_find(struct ush_worker *wk, uint32_t shuffle);
/* At start: the bytes each owned shuffle holds in --dir. Fails with
 * USH_EVERSION for a shuffle stored in an older worker's layout. */
int wk_app_usage(struct ush_worker *wk);
/* The secret of app (its file in secrets_dir, else the shared one) into
 * key (USHI_SECRET_MAX bytes): its length, 0 for none, or an error. No
 * lock needed. */
int wk_secret(struct ush_worker *wk, const char *app, uint8_t *key);
/* The shuffles of applications silent at now for the TTL, up to batch,
 * into *gone (allocated here); returns how many, and *more those left
 * over. */
size_t wk_app_silent_shuffles(struct ush_worker *wk, uint64_t now,
			      size_t batch, uint32_t **gone, size_t *more);
/* Frees every application silent at now that owns nothing (the drops
 * before took what they owned); returns how many. */
size_t wk_app_free_silent(struct ush_worker *wk, uint64_t now);
void wk_app_free(struct ush_worker *wk);

/* files.c: --dir, the bounded cache of open log files. */
/* Opens --dir (wk->dirfd) and sets the open file budget. */
int wk_store_init(struct ush_worker *wk);
void wk_store_fini(struct ush_worker *wk);
/* Opens path, relative to --dir, beneath it without following any
 * symbolic link (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or
 * O_NOFOLLOW at each component where the kernel lacks openat2).
 * Returns an fd or -errno: -ELOOP for a link, -EXDEV for a path that
 * leaves --dir. */
int wk_open_beneath(struct ush_worker *wk, const char *path, int flags,
		    mode_t mode);
/* What a failed wk_open_beneath() means, for a message. */
const char *wk_why_open(int err);
/* Makes s's log and index open (created, or checked and cut after the
 * last valid entry at the first open; reopened after an eviction) and
 * the most recently used, closing another's when the thread is at its
 * budget. Returns 0 or -errno. */
int wk_shuf_open(struct wk_thread *t, struct wk_shuf *s);
/* fdatasyncs s's open files that have unsynced writes: the log first. */
void wk_shuf_fsync(struct wk_shuf *s);
/* Closes s's files (synced or not: a dropped shuffle's). */
void wk_shuf_close(struct wk_thread *t, struct wk_shuf *s);
/* Records s's failure (of what, at offset off) as its error on this
 * thread, logged once. */
void wk_shuf_fail(struct wk_shuf *s, int err, const char *what,
		  uint64_t off);
/* Removes <dir>/s<S> and the files in it; a link in its place is
 * removed, never followed. */
void wk_store_unlink(struct ush_worker *wk, uint32_t shuffle);
/* An index entry's partition for a gap in the log (control frames, the
 * padding before an aligned write): no frame, never fetched. DATA frames
 * have partitions below USHI_PARTS_MAX. */
#define WK_IDX_HOLE UINT32_MAX
/* An index entry's partition for an extent of a committed attempt that
 * the repair found damaged (its map and attempt kept): never served, and
 * a FETCH of that attempt fails with USH_ECORRUPT. Map and attempt
 * WK_IDX_HOLE: log bytes after an unreadable entry, of no known map. */
#define WK_IDX_BAD (UINT32_MAX - 1)
/* An index as the repair scan reads it (files.c). */
struct wk_scan {
	uint8_t *ent;   /* its readable entries, damaged ones rewritten in
			   memory (ushi_free) */
	uint64_t n;     /* how many: the rest is unreadable */
	uint64_t end;   /* the log offset after them */
	uint64_t fixed; /* the first entry rewritten (n: none) */
	bool stuck;     /* stopped at an entry that is not zeros */
};
/* Reads the index (ifd, isize bytes) of shuffle's log (lfd, lsize bytes)
 * up to the first entry it cannot place: an entry whose CRC or bounds
 * fail, when the next entry checks after it, is rebuilt from the frame
 * header at its offset, or made a hole or a damaged extent (WK_IDX_BAD,
 * of the attempt it names). Returns 0 or -errno. */
int wk_idx_scan(int ifd, int lfd, uint32_t shuffle, uint64_t isize,
		uint64_t lsize, struct wk_scan *sc);
/* Whether the attempt is committed here (takes wk->lock). */
bool wk_committed(struct ush_worker *wk, uint32_t shuffle, uint32_t map,
		  uint32_t attempt);
/* Writes the index entry of len log bytes at offset off to e. */
void wk_idx_set(uint8_t *e, uint64_t off, uint32_t len, uint32_t partition,
		uint32_t map, uint32_t attempt);
/* Checks the index entry at e, of the frame at log offset off (its
 * CRC): 0, or USH_ECORRUPT. Fills len and the fields given (NULL: not
 * wanted). */
int wk_idx_get(const uint8_t *e, uint64_t off, uint32_t *len,
	       uint32_t *partition, uint32_t *map, uint32_t *attempt);

/* store.c: shuffle logs and their buffers. */
/* Copies frame (f, received whole) into its shuffle's log buffer. */
int wk_store_append(struct wk_thread *t, const struct ushi_frame *f,
		    const uint8_t *frame);
/* A DATA frame in a received buffer: its offset there and its entry. */
struct wk_rent {
	uint32_t rel, len, partition, map, attempt;
};
/*
 * Writes pool buffer b as it was received (conn.c's in-place receive) to
 * the log of shuffle at the next aligned offset: its first `have` bytes
 * hold the n DATA frames ents (in order) and other bytes around them,
 * which are indexed as holes. The ring owns b from here on, whatever the
 * result. Returns 0 or the shuffle's error.
 */
int wk_store_region(struct wk_thread *t, uint32_t shuffle, struct ushi_buf *b,
		    uint32_t have, const struct wk_rent *ents, size_t n);
/* Writes the shuffle's log buffer and index entries, waits for its
 * writes and syncs its log, then its index (and directories): after it
 * every frame of the shuffle received so far on this thread is durable.
 * Fails with the shuffle's first failed write or sync, if it had one
 * here. */
int wk_store_sync_shuffle(struct wk_thread *t, uint32_t shuffle);
/* The same for every shuffle; returns the first failure that is new. */
int wk_store_sync(struct wk_thread *t);
void wk_store_drop(struct wk_thread *t, uint32_t shuffle);
void wk_store_close(struct wk_thread *t);
/* Frees a log buffer for someone else (a FETCH's read): waits for a
 * write, or parks the oldest idle log's buffer. Returns 0, or -EAGAIN
 * when there is nothing to free. */
int wk_store_reclaim(struct wk_thread *t);
/* How many thread numbers may have logs of shuffle here: this run's
 * threads and those of an earlier run with more (found by listing s<S>
 * once per thread and shuffle). Returns 0 or -errno. */
int wk_store_fetch_threads(struct wk_thread *t, uint32_t shuffle,
			   unsigned *n);

/* out.c: what a connection sends. */
/* An empty output with room for cap bytes, or NULL. */
struct wk_out *wk_out_new(size_t cap);
/* Frees o and what it holds (a pool buffer goes back to t's pool). */
void wk_out_free(struct wk_thread *t, struct wk_out *o);
/* Appends o to q; q's connection owns it from here on. */
void wk_outq_add(struct wk_outq *q, struct wk_out *o);
/* Frees what q holds (its connection sends nothing more). */
void wk_outq_free(struct wk_thread *t, struct wk_outq *q);
/* Queues a copy of the n-byte frame. */
void wk_conn_send(struct wk_conn *c, const uint8_t *frame, size_t n);
void wk_conn_fail(struct wk_conn *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* wk_conn_fail() for what is no fault of the peer's (a timeout, a
 * shutdown): the same ERROR and close, logged at info level. */
void wk_conn_close_with(struct wk_conn *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* recv.c: frame reassembly. */
/* Parses a complete header into c->f; fails the connection if it breaks
 * a rule or names a frame c may not send now. */
bool wk_header_ok(struct wk_conn *c, const uint8_t *h);
/* Consumes n bytes of c's stream: whole frames are dispatched. */
void wk_feed(struct wk_conn *c, const uint8_t *p, size_t n);

/* inplace.c: a writer's in-place receive. */
/* Parses the frames that arrived whole in rb, where they lie. */
void wk_rb_parse(struct wk_conn *c);
/* Before a receive is armed: gives a writer at a frame boundary its
 * in-place buffer when the pool can spare one, and takes it back from a
 * connection that no longer writes. */
void wk_conn_rb_arm(struct wk_conn *c);
/* Frees what the connection holds for its receives (no recv armed). */
void wk_conn_rb_free(struct wk_conn *c);

/* dispatch.c: what each frame does. */
/* Whether c may send a frame of this type now (its header is all that
 * came); fails c otherwise. */
bool wk_type_ok(struct wk_conn *c, unsigned type);
/* Checks and acts on the whole frame f at frame. Returns 1 for DATA the
 * writer may store (counted against its quota): the caller stores it
 * and reports with wk_data_stored(); 0 otherwise (done, or c failed). */
int wk_dispatch(struct wk_conn *c, const struct ushi_frame *f,
		const uint8_t *frame);
/* The DATA frame f that wk_dispatch() passed was stored (ret 0: credit
 * for the writer) or not (ret: c fails, its bytes leave the quota). */
void wk_data_stored(struct wk_conn *c, const struct ushi_frame *f, int ret);
/* Is c's attempt still its own (not dropped since)? */
bool wk_still_mine(struct wk_conn *c);
/* A closing writer's attempt, unless committed, becomes abandoned. */
void wk_conn_leave(struct wk_conn *c);

/* hello.c: the handshake. */
/* A HELLO (the whole frame, f parsed). */
void wk_hello(struct wk_conn *c, const struct ushi_frame *f,
	      const uint8_t *frame);
/* The client's AUTH (its payload). */
void wk_auth(struct wk_conn *c, const uint8_t *payload);
/* The client closed while its AUTH was due: logged and counted. */
void wk_auth_abandoned(struct wk_conn *c);
/* Is shuffle c's application's? An unowned one is claimed for it when
 * claim is set. Fails c (-EACCES, -EDQUOT) otherwise. Lock held. */
int wk_own_shuffle(struct wk_conn *c, uint32_t shuffle, bool claim);
/* Fails c for wk_app_seen()'s error. */
void wk_app_refused(struct wk_conn *c, int ret);

/* conn.c: the connection. */
/* Handles what its receives brought: frames dispatched, chunks given
 * back. */
void wk_conn_process(struct wk_conn *c);
/* During a drain: whether c is in the middle of something that may
 * still finish (a push not yet closed, a stream, a frame, output). */
bool wk_conn_busy(const struct wk_conn *c);
/* Sends the next output (a credit ACK first when none is queued). */
void wk_conn_pump(struct wk_conn *c);

/* fetch.c */
/* Plans the stream that FETCH f (payload: its attempts) asks for and
 * queues its MANIFEST on q: 0 and the stream in *out, or an error (with
 * msg saying why, when it is not the caller's: a refused log, an attempt
 * not committed here). */
int wk_fetch_start(struct wk_thread *t, const struct ushi_frame *f,
		   const uint8_t *payload, struct wk_outq *q,
		   struct wk_fetch **out, char *msg, size_t n);
/* Submits the stream's next reads and queues on q the frames of those
 * done, in order, and FETCH_END after the last. Returns 1 when the stream
 * has ended (the caller frees it), 0 while it goes on, or an error
 * (USH_ECORRUPT: a log shorter than its index); then it reads no more. */
int wk_fetch_pump(struct wk_fetch *fe, struct wk_outq *q);
/* Whether the kernel still holds reads of fe (it may not be freed). */
bool wk_fetch_busy(const struct wk_fetch *fe);
void wk_fetch_free(struct wk_fetch *fe);
/* Forgets the cached partition directories of shuffle. */
void wk_pdir_drop(struct wk_thread *t, uint32_t shuffle);
void wk_pdir_close(struct wk_thread *t);

/* loop.c */
void *wk_thread_main(void *arg);

#endif
