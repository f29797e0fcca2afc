/*
 * ushuffle's worker: the shuffle server that ushuffled runs, as a library
 * (libushuffle_worker) so a program can embed one (the ushuffle CLI does,
 * on loopback). One thread, ring and SO_REUSEPORT listener per thread; it
 * stores pushed frames in a log per (shuffle, thread) with an index by
 * partition, commits map outputs in a
 * synced log and serves committed frames to readers. Protocol:
 * docs/protocol.md.
 *
 * Conventions are libushuffle's (ushuffle.h): 0 or a negative errno or
 * USH_E* code, described by ush_strerror(); extensible options structs
 * with a size field set by their _init(). The worker library links
 * libushuffle (shared), whose per-thread detail message and log sink it
 * uses: ush_worker_last_error() is ush_last_error(), ush_worker_set_log()
 * is ush_set_log().
 */
#ifndef USHUFFLE_WORKER_H
#define USHUFFLE_WORKER_H

#include "ushuffle.h"

#ifdef __cplusplus
extern "C" {
/* As in ushuffle.h: ush_worker_stats() names its struct. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif

typedef struct ush_worker ush_worker;

struct ush_worker_opts {
	uint32_t size;       /* sizeof, set by ush_worker_opts_init() */
	const char *listen;  /* "HOST:PORT" (default "127.0.0.1:7337"); port
				0 picks a free one, see ush_worker_port() */
	const char *dir;     /* storage directory, created if missing; or
				several separated by ':' (one per disk: the
				shuffle logs are spread over them) */
	unsigned threads;    /* 0: one per online CPU */
	int direct;          /* 1: O_DIRECT shuffle logs where the file
				system allows it (default 1; buffered, with
				a log line, where it refuses); 0: buffered */
	int log_level;       /* 0 errors; 1 (default) also start-up, each
				connection's HELLO, closes with a reason,
				drops and expiries; 2 also each commit and
				FETCH */
	uint32_t window;     /* credit per connection (default 4 MiB) */
	uint32_t max_frame;  /* largest frame accepted (default 64 MiB) */
	size_t pool_bytes;   /* registered memory per thread: log buffers
				and FETCH reads (32 MiB) */
	uint32_t flush_size; /* a shuffle log's buffer, a power of two >= 16
				KiB (0, the default: 1 MiB, or a quarter of
				a smaller pool) */
	uint32_t hello_timeout_ms; /* a connection that has not said HELLO
				      this long is closed (default 10000) */
	uint32_t app_ttl_ms; /* an application not heard of this long (no
				heartbeat, no connection naming it) loses
				its shuffles (default 300000) */
	/* In the fields below, 0 is the default. */
	uint32_t idle_timeout_ms;  /* a connection past HELLO that receives
				      nothing and has nothing to send or
				      stream this long gets ERROR -ETIMEDOUT
				      and is closed (default 300000: a writer
				      that computes between batches keeps its
				      connection silent meanwhile) */
	unsigned max_conns;        /* connections held at once, all threads
				      together; one more gets ERROR -EBUSY
				      and is closed (default 1024; a thread
				      holds at most 1536) */
	uint32_t drain_timeout_ms; /* after ush_worker_stop(): how long
				      pushes, commits and fetches under way
				      may go on before their connections are
				      told the worker is shutting down
				      (ERROR -ESHUTDOWN; default 20000) */
	unsigned max_open_files; /* log and index files kept open (two
				    per shuffle a thread writes), shared
				    evenly by the threads (at least two
				    each); the least recently written idle
				    log is synced and closed to open
				    another. 0 (default): a quarter of
				    RLIMIT_NOFILE's soft limit at create */
	/*
	 * Authentication (docs/security.md, docs/protocol.md §2.8). A client
	 * proves the secret of the application its HELLO names, and the
	 * worker proves it back; the connection is then bound to that
	 * application. The secret of an application is its file in
	 * secrets_dir, else the shared one (secret_file, else secret). A
	 * worker with neither refuses to start unless insecure.
	 */
	const char *secret_file;  /* the shared secret: this file's contents,
				     one trailing newline removed (read at
				     create) */
	const void *secret;       /* or these secret_len bytes (copied) */
	size_t secret_len;
	const char *secrets_dir;  /* one file per application, named by its
				     id and holding its secret (as Spark on
				     YARN: one secret per application). Read
				     at each HELLO: applications are added
				     and secrets rotated without a restart */
	int insecure;             /* 1: clients that prove no secret are
				     served too, trusted for the application
				     they name. Refused at create on a
				     listen address that is not loopback,
				     unless insecure_non_loopback is 1 */
	int insecure_non_loopback;
	/* Quotas per application; each refusal is an ERROR -EDQUOT naming
	 * the quota, and touches no other application and nothing stored. */
	unsigned max_app_conns;    /* connections at once (default 512) */
	unsigned max_app_shuffles; /* shuffles owned (default 4096) */
	uint64_t max_app_bytes;    /* DATA bytes stored (default: half the
				      size of dir's file system) */
	/* New fields go here, at the end (the size field tells a caller's
	 * layout), with a reservedN after one that would leave the struct
	 * ending in padding (ushuffle.h, "Extensible structs"); 0 is the
	 * default. */
	unsigned max_app_attempts; /* attempts open or abandoned (a writer
				      left without a commit), until their
				      shuffle is dropped (default 65536) */
	unsigned max_app_commits;  /* attempts committed, each a record of
				      the commit log until its shuffle is
				      dropped (default 262144: 32 MiB of
				      log) */
	unsigned max_apps;         /* applications known at once, all
				      together: a HELLO or heartbeat of one
				      more gets ERROR -EDQUOT (default
				      16384); one not heard of for
				      app_ttl_ms is removed */
	uint32_t reserved0;        /* never read, never reused */
	unsigned sync;             /* 0.4.5: USH_WORKER_SYNC_FULL (0, the
				      default) or USH_WORKER_SYNC_NONE
				      (docs/operations.md, "Durability") */
	uint32_t reserved1;        /* never read */
	uint64_t max_app_fetch_bytes; /* 0.4.6: memory the FETCHes of an
					 application being planned here may
					 hold at once (the entries they ask
					 for, the frames they will stream):
					 one beyond gets ERROR -EDQUOT
					 (default 256 MiB) */
};

/* What a commit waits for before its ACK. FULL: the data, its index,
 * new directories and the commit record are synced (fdatasync): a
 * committed map output survives a host crash. NONE: written to the page
 * cache only (as Spark's own shuffle files are): a commit survives the
 * worker's process being stopped or killed, not a restart of the host
 * (crash or reboot); a start after one drops every shuffle of the
 * directories (readers get USH_ENOTCOMMITTED and their driver reruns
 * the maps). For ephemeral shuffles whose framework recomputes lost
 * outputs (Dask). */
#define USH_WORKER_SYNC_FULL 0u
#define USH_WORKER_SYNC_NONE 1u

/* ush_worker_opts_init(&opts) fills opts with the defaults above. */
USH_API void ush_worker_opts_init_size(struct ush_worker_opts *opts,
				       size_t size);
USH_SIZED_INIT(ush_worker_opts)

/*
 * Locks dir (one worker per directory: a second one fails, naming the
 * holder's pid), refuses a port another process listens on, binds the
 * listeners (so the port is known and bind errors surface here),
 * replays the commit logs in dir and sweeps what no application owns. Serves nothing until
 * ush_worker_start() or ush_worker_run(). opts is copied (NULL: the
 * defaults). Returns 0 and *out, which the caller frees with
 * ush_worker_free(), or an error: -EINVAL for options that do not work
 * (a bad value, insecure off loopback, no secret).
 */
USH_API int ush_worker_create(ush_worker **out,
			      const struct ush_worker_opts *opts);
/* The bound TCP port (useful with port 0). */
USH_API int ush_worker_port(const ush_worker *w);
/* Starts the worker threads in the background and returns. */
USH_API int ush_worker_start(ush_worker *w);
/*
 * Asks the threads to drain and exit: they stop accepting; connections
 * with nothing under way get ERROR -ESHUTDOWN "worker shutting down" and
 * are closed; pushes (until their writer closes), commits and fetches
 * under way may finish for drain_timeout_ms, after which their
 * connections get the same ERROR; then the threads sync and exit. Only
 * sets a flag: safe from a signal handler and any thread.
 */
USH_API void ush_worker_stop(ush_worker *w);
/*
 * Decommissions the worker before maintenance: from now on a writer's
 * HELLO is refused with ERROR USH_EDRAINING (clients place its
 * partitions on their other workers), whatever its shuffle; writers
 * already past their HELLO push and commit as before; reads, drops and
 * heartbeats are served. Once the worker holds no shuffle (each dropped
 * or expired), it stops as ush_worker_stop() does, so ush_worker_wait()
 * returns. Not persisted: a restarted worker takes writers again. Only
 * sets a flag: safe from a signal handler and any thread.
 */
USH_API void ush_worker_decommission(ush_worker *w);
/* Waits for the threads to exit; returns 0 or their first error. */
USH_API int ush_worker_wait(ush_worker *w);
/* start + wait: serves in the calling thread until ush_worker_stop(). */
USH_API int ush_worker_run(ush_worker *w);
/* Stops and waits if running, then frees. Accepts NULL. */
USH_API void ush_worker_free(ush_worker *w);
/* The detailed message of the last failing worker call on this thread
 * (what, where, errno). Never NULL. */
USH_API const char *ush_worker_last_error(void);
/* Where every worker in the process logs, as ush_set_log() for the
 * client library: fn == NULL restores "ushuffle: <msg>" on stderr. */
USH_API void ush_worker_set_log(ush_log_fn fn, void *arg);

/*
 * A worker's counters since ush_worker_create(), for monitoring (ushuffled
 * --metrics serves them in the Prometheus text format; docs/operations.md
 * says what to watch). Cheap to read at any time from any thread; each
 * field is read on its own, so two fields may be a moment apart.
 */
#define USH_WORKER_ERROR_KINDS(X)                                            \
	X(PROTOCOL, "protocol") /* bad frames, CRCs, unexpected requests */  \
	X(AUTH, "auth")         /* failed or missing authentication */       \
	X(QUOTA, "quota")       /* an application's quota (-EDQUOT) */      \
	X(LIMIT, "limit")       /* connections refused: --max-conns */       \
	X(TIMEOUT, "timeout")   /* hello and idle timeouts */                \
	X(STORAGE, "storage")   /* failed writes, syncs and reads in --dir */ \
	X(SHUTDOWN, "shutdown") /* connections told the worker stops */     \
	X(OTHER, "other")
enum ush_worker_error_kind {
#define USH_X(name, text) USH_WORKER_ERR_##name,
	USH_WORKER_ERROR_KINDS(USH_X)
#undef USH_X
	USH_WORKER_ERR_KINDS
};
/* Commit syncs are counted in buckets of at most 250 us << i. */
#define USH_WORKER_SYNC_BUCKETS 12
#define USH_WORKER_SYNC_BUCKET_US(i) (250ull << (i))

struct ush_worker_stats {
	uint32_t size;           /* sizeof, set by the getter's wrapper */
	uint64_t bytes_in;       /* bytes received from clients */
	uint64_t bytes_out;      /* bytes sent to clients */
	uint64_t frames_in;      /* frames received */
	uint64_t frames_out;     /* DATA frames streamed to readers */
	uint64_t conns_accepted; /* connections accepted */
	uint64_t conns_refused;  /* ... refused at once (limit, shutdown) */
	uint64_t conns_open;     /* connections held now */
	uint64_t apps;           /* applications known now */
	uint64_t shuffles;       /* shuffles held now */
	uint64_t bytes_stored;   /* DATA bytes stored for applications now */
	uint64_t open_files;     /* log and index files open now */
	uint64_t commits;        /* map outputs committed */
	uint64_t drops;          /* shuffles dropped on request */
	uint64_t expiries;       /* shuffles dropped for an application's
				    silence (--app-ttl) */
	/* The time a commit waits for its data and its record to be
	 * durable (fdatasyncs of the log, index, directories, commit log). */
	uint64_t sync_count, sync_ns;
	uint64_t sync_le[USH_WORKER_SYNC_BUCKETS]; /* cumulative: syncs of at
				    most USH_WORKER_SYNC_BUCKET_US(i) */
	uint64_t errors[USH_WORKER_ERR_KINDS]; /* connections failed, and
				    storage errors, by enum ush_worker_error_kind */
	uint64_t stalled_ms;     /* the longest any thread has now gone
				    without a pass of its loop (they pass at
				    least every 100 ms while healthy) */
	uint64_t bytes_in_place; /* DATA frame bytes written to the logs
				    from the buffers they were received in
				    (the rest were copied once) */
	uint64_t decommissioning; /* 1 once ush_worker_decommission() was
				    called (0.4.4) */
	uint64_t fetch_heap_allocs; /* FETCH read buffers allocated from the
				    heap, where the pool's share was taken;
				    each thread keeps those freed for its next
				    reads, so it stays flat while streams read
				    no more at once than before (0.5) */
	uint64_t fetch_reads;    /* reads of the logs for FETCH streams:
				    adjacent frames are one read, and so are
				    a window's small frames that lie close in
				    a log (0.5) */
};
USH_API void ush_worker_stats_size(const ush_worker *w,
				   struct ush_worker_stats *st, size_t size);
USH_SIZED_GET(ush_worker_stats, ush_worker)

#ifdef USH_UNSTABLE_API
/* ush_alloc_count(): the worker allocates through libushuffle. */
USH_API uint64_t ush_worker_alloc_count(void);
/* Directory i of the worker's --dir (the home, with the commit log,
 * first): its path (the worker's, valid until ush_worker_free()) and, in
 * *err, the error that quarantined it (an I/O error, a read-only or full
 * file system: no new shuffle logs go there), or 0. Returns 0, or
 * -ENOENT when there is no directory i. */
USH_API int ush_worker_dir(const ush_worker *w, unsigned i,
			   const char **path, int *err);
#endif

#ifdef __cplusplus
#pragma GCC diagnostic pop
}
#endif
#endif /* USHUFFLE_WORKER_H */
