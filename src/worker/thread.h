/*
 * ushuffled's server loop, run by the library (src/worker/). One thread,
 * ring and SO_REUSEPORT listener per thread; a connection belongs to the
 * thread that accepted it. Threads share only the commit table and the
 * committer (group.c), which logs their commits in groups.
 *
 * Callbacks of ring ops only record what happened (queue a chunk, note a
 * completion); the thread's loop does the work. So code that waits on the
 * ring from inside the loop (a full pool, a commit) never re-enters
 * itself.
 *
 * This header holds the objects every layer reads: the worker, its
 * threads and their connections. Each module declares its functions in
 * a header of its own (docs/design.md, "The worker in layers").
 */
#ifndef USHI_WK_THREAD_H
#define USHI_WK_THREAD_H

#include "net/mac.h"
#include "net/proto.h"
#include "ushuffle/worker.h"
#include "core/ring.h"
#include "worker/attempt.h"
#include "worker/group.h"
#include "worker/list.h"
#include "worker/log.h"
#include "worker/out.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define WK_BUFS 256          /* provided recv buffers per thread */
#define WK_BUF_SIZE (64u << 10)
#define WK_BGID 7
/* A thread's ring: WK_IODEPTH ops for partition writes, plus two per
 * connection (its armed recv and one send); the ring's own bound (4096)
 * caps the connections one thread serves at WK_THREAD_CONNS_MAX. */
#define WK_IODEPTH 1024
#define WK_THREAD_CONNS_MAX 1536
#define WK_SEND_TIMEOUT_MS 30000
/* Outputs a connection sends at most in one gathered send. A FETCH
 * stream of small frames queues one per read; 64 took a third of the
 * reader's context switches of 8 at 10,000 partitions, but the read took
 * longer and the worker more CPU (docs/notes/wire.md, "The read path"). */
#define WK_SEND_IOV 8
/* Size classes of kept heap read buffers: 4 KiB to 1 MiB, the largest
 * flush size (worker.c). */
#define WK_HBUF_ORDERS 9
/* A failed connection keeps reading (and dropping) what its peer still
 * sends this long after its ERROR frame, so that closing with unread
 * bytes does not reset the connection before the peer reads the ERROR. */
#define WK_LINGER_MS 2000
/* Accept errors (EMFILE...) pause accepting, from 10 ms doubling to 1 s. */
#define WK_ACCEPT_BACKOFF_MIN_MS 10u
#define WK_ACCEPT_BACKOFF_MAX_MS 1000u
/* Out of descriptors, a thread closes at most this many connections that
 * have not authenticated at once (loop.c, shed()). */
#define WK_SHED_MAX 64u
/* Descriptors kept out of the connections' budget beside the files'
 * (listeners, rings, the commit log, directories, FETCH's reads). */
#define WK_FD_MARGIN 64u

struct wk_app;
struct wk_owner;
struct wk_fetch;
struct wk_rent;
struct wk_shuf;

/* One of --dir's directories (files.c). */
struct wk_dir {
	char *path;
	int fd;               /* opened once: paths resolve beneath */
	int lock;             /* holds the flock on <path>/ushuffled.lock */
	atomic_int err;       /* what quarantined it (out of placement), or
				 0: healthy (files.c, wk_dir_fail()) */
	uint8_t id[16];       /* its identity (dirid.c, its ushuffled.id) */
	atomic_bool holds;    /* the home's marker says it may hold shuffle
				 logs: a restart without it is refused */
	bool made;            /* made by this start: new and empty */
};

/* A shuffle whose claim or drop is being logged (wk_rec_log()), and for
 * a drop, until its files are removed (wk_drop_finish()). */
struct wk_busy {
	uint32_t shuffle;
	bool drop;
	char app[USHI_PROTO_APP_MAX + 1]; /* a claim's application */
};
struct ush_worker {
	struct ush_worker_opts o;
	struct wk_metrics m;
	char *dir, *host;     /* dir: the home directory (dirs[0]) */
	char *dirlist;        /* --dir as given: "D0[:D1...]" */
	struct wk_dir *dirs;  /* the home first (its commit log), then the
				 others as listed */
	unsigned ndirs;
	uint8_t wid[16];      /* the worker's identity, in every marker */
	pthread_mutex_t id_lock; /* the home's marker (wk_dirid_hold()) */
	int port;
	unsigned nthreads;
	struct wk_thread *threads;
	bool started;
	atomic_int stop;
	atomic_bool decom;    /* ush_worker_decommission(): no new writers;
				 stop once no shuffle is left */
	size_t decom_left;    /* thread 0: the shuffles last logged as left
				 (SIZE_MAX before the first line) */
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
	struct wk_group grp;  /* the committer (group.c) */
	int log_fd;           /* the commit log: the committer's */
	uint64_t log_off;
	atomic_uint_fast64_t log_bytes; /* appended since the last
					   compaction */
	atomic_uint_fast64_t snap_bytes; /* the snapshot's size */
	atomic_bool compact_queued; /* a compaction waits in the queue */
	size_t unsure, torn;  /* replay: commit records checked against
				 their data; dropped as torn */
	/* USHUFFLED_TEST_CRASH=step:n (tests only): the process kills
	 * itself with SIGKILL when the n-th commit reaches step. */
	int crash_step;
	unsigned crash_n;
	atomic_uint crash_seen;
	struct wk_busy *busy; /* ascending shuffle (lock) */
	size_t nbusy, cbusy;
	size_t nclaiming;     /* claims among them */
	pthread_cond_t busy_cv; /* with wk->lock: a busy mark ended */
	uint32_t *drops;      /* shuffles dropped that some thread has not
				 yet seen (its drop_seen), in epoch order */
	size_t ndrops;
	unsigned drops_base;  /* the drop epoch of drops[0] */
	atomic_uint drop_epoch;
	atomic_uint_fast64_t next_conn_id;
	atomic_uint nconns;   /* connections accepted and not yet freed, all
				 threads: at most o.max_conns */
	atomic_uint nshed;    /* among them, shed and not yet freed */
	unsigned thread_conns; /* what one thread may hold (its ring) */
	unsigned conn_fds;    /* connections RLIMIT_NOFILE leaves room for
				 beside the file budget (files.c); past it a
				 new one replaces its thread's oldest that has
				 not authenticated (loop.c, room_for_one()) */
	pthread_mutex_t log_lock;
	struct wk_log_kind log_kinds[WK_LOG_KINDS];
	atomic_bool log_suppressed; /* some kind has lines to report */
	unsigned open_max;    /* open log and index files per thread */
	size_t pdir_budget;   /* partition directory cache per thread */
	atomic_bool direct_refused; /* O_DIRECT refused for a log (logged) */
	int err;
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
	mac_keys keys;         /* the session keys, from the challenge until
				  the client's AUTH (the secret is not kept) */
	struct ushi_mac mac;   /* control-frame MACs, from the client's AUTH
				  on (off for a connection that proves no
				  secret) */
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
	bool shed;             /* closed for want of descriptors */
	int rerr;
	/* frame reassembly */
	uint8_t hdr[USH_FRAME_HDR_SIZE];
	uint32_t hlen;
	struct ushi_frame f;
	uint8_t *stage;
	size_t scap, sgot, sneed; /* sneed: 0 when not staging */
	/* output: one send in flight, of the first sn outputs queued (a
	 * FETCH's MANIFEST, frames and FETCH_END in one send when they are
	 * there together) */
	struct wk_outq out;
	bool sending;
	uint8_t sn;
	struct iovec siov[WK_SEND_IOV];
	struct msghdr smsg;
	uint64_t credit;       /* DATA bytes consumed, not yet acked */
	struct wk_fetch *fetch;
	/* A commit under way (MAPPER_END): its frames' sync round, then
	 * its record with the committer; the ACK goes once both are
	 * durable. */
	uint8_t cm_step;       /* 0, WK_CM_SYNC (until the data's syncs
				  start) or WK_CM_LOG (record and data
				  both under way) */
	bool cm_logged, cm_synced; /* WK_CM_LOG: which is back */
	int cm_logres, cm_syncres; /* and how it went */
	struct wk_sum cm_sum;  /* the attempt's DATA frames stored */
	uint64_t cm_ticket;    /* its sync round (wk_store_sync_begin) */
	uint64_t cm_t0;        /* when MAPPER_END came */
	struct wk_rec cm_rec;
	struct wk_logreq cm_req;
};

enum { WK_CM_SYNC = 1, WK_CM_LOG };

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
	unsigned nshed;        /* among them, shed and not yet freed */
	unsigned accepted_next; /* accepted[] before it are set up */
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
	unsigned fetch_reads;  /* FETCH reads in flight, all streams */
	size_t fetch_pool;     /* pool bytes FETCH streams hold (at most
				  half the pool) */
	/* FETCH read buffers beyond the pool's share, kept for the next
	 * reads (fetch.c, wk_hbuf_get): one LIFO per power-of-two size
	 * from USHI_BUF_MIN to 1 MiB, WK_HBUF_KEEP flush buffers' worth at
	 * most (fetch.h). Freed and allocated per read they cost a page fault per
	 * page each time (large blocks are mapped per malloc). */
	void *hfree[WK_HBUF_ORDERS];
	size_t hfree_bytes;
	struct wk_list syncq;  /* logs with a sync round asked for or under
				  way (store.c) */
	/* Commits back from the committer, logged, to be applied and
	 * acknowledged: a stack the committer pushes on and the loop takes
	 * whole (group.c); how many of its requests the committer still
	 * holds; and whether a wake-up is on its way. */
	_Atomic(struct wk_logreq *) cm_done;
	atomic_uint cm_out;
	atomic_bool cm_woken;
	int wake[2];           /* the committer writes a byte to wake[1]
				  when it hands commits back; the loop
				  keeps a recv armed on wake[0] */
	uint8_t wake_buf[64];
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

#endif
