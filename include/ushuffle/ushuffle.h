/*
 * ushuffle — a shuffle transport on io_uring.
 *
 * This is the only public header. Every object is an opaque handle with a
 * create/free pair; every free function accepts NULL.
 *
 * Conventions (liburing's): functions return 0 or a count on success and a
 * negative errno, or a negative USH_E* code, on failure; errno is never set.
 * A failing call also leaves a detailed message (what, where, errno) for the
 * calling thread in ush_last_error().
 *
 * Threading: a ush_ring and the writers opened on it serve the thread that
 * created the ring (io_uring SINGLE_ISSUER; nothing is locked). From
 * another thread every call on them but the getters (info, stats, error)
 * changes nothing and returns -EINVAL ("ring used from a thread other than
 * the one that created it"), and the free calls abort. Use one ring per
 * thread. A reader is independent of rings: any thread may use it, one at
 * a time.
 *
 * fork(): a child's copies of its parent's rings, writers and readers are
 * not its own. Every call on them but the getters and the free calls
 * changes nothing and returns -EPERM ("... a fork() child of the process
 * that created the object"). The free calls release only the child's
 * copies (memory, its copies of descriptors): no file is unlinked, no
 * connection shut down and nothing in flight is waited for, so the parent
 * goes on, commits and reads as if there were no child. A child creates
 * its own rings, writers and readers.
 *
 * Asynchronous contract: once a call that hands a buffer over returns an
 * error, that buffer was not handed over and no completion for it will fire.
 *
 * Misuse that aborts: the library prints "ushuffle: BUG: ..." and calls
 * abort() for the errors it cannot return, in every build:
 *  - ush_writer_swap() or ush_writer_release() of a pointer that is not a
 *    buffer the caller holds: not the payload of a buffer of the ring's
 *    pool ("not a pool buffer"), or one not lent now: never lent, already
 *    swapped or released ("not owned"); a pointer kept past
 *    ush_writer_free() is caught so only until its buffer is lent again;
 *  - ush_writer_free() or ush_ring_free() from a thread other than the
 *    ring's creator;
 *  - ush_ring_free() of a ring with writers still open ("writers still
 *    open on the ring").
 */
#ifndef USHUFFLE_H
#define USHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
/* The stats getters share their struct's name (as stat() does), which
 * C++'s -Wshadow reports at each caller's build: not theirs to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif

#if defined(USH_BUILDING) && defined(__GNUC__)
#define USH_API __attribute__((visibility("default")))
#else
#define USH_API
#endif

/* ---------------------------------------------------------------- version */

/* The one place the version is kept: CMakeLists.txt reads these three. */
#define USH_VERSION_MAJOR 0
#define USH_VERSION_MINOR 4
#define USH_VERSION_PATCH 5
#define USH_QUOTE_(x) #x
#define USH_EXPAND_AND_QUOTE_(x) USH_QUOTE_(x)
#define USH_VERSION_STRING                                                   \
	USH_EXPAND_AND_QUOTE_(USH_VERSION_MAJOR.USH_VERSION_MINOR.USH_VERSION_PATCH)
/* MAJOR * 10000 + MINOR * 100 + PATCH, as zstd's ZSTD_VERSION_NUMBER. */
#define USH_VERSION_NUMBER                                                   \
	(USH_VERSION_MAJOR * 10000 + USH_VERSION_MINOR * 100 + USH_VERSION_PATCH)

/* The version of the library running, which may be newer than the header
 * the caller was compiled with: USH_VERSION_NUMBER's encoding. */
USH_API unsigned ush_version(void);
USH_API const char *ush_version_string(void);

/*
 * Extensible structs. Every options and stats struct starts with a size
 * field, set by its _init() (options) or by the inline wrapper (stats) to
 * the caller's sizeof. A library newer than the caller reads only the
 * fields the caller's struct has and takes the defaults for the rest; a
 * library older than the caller accepts a larger struct only if every
 * byte it does not know is zero (else -E2BIG). Fields are only ever
 * appended, and a field added after 0.3 has zero as its default. An
 * options struct never ends in padding: a caller built against an older
 * header may leave junk there, so a field appended where an older
 * layout had padding would read it. A field that would leave the tail
 * unaligned comes with a reservedN field after it, never read and never
 * reused (tests/abi/layout.c). So:
 * call the _init() before setting fields; for writer and reader options,
 * whose every field defaults to zero, a designated initialiser that sets
 * .size = sizeof(the struct) does the same. A struct whose size is 0 is
 * refused with -EINVAL.
 */

/* The inline wrappers that pass the caller's sizeof to the exported
 * X_init_size() and X_size() functions below. */
#define USH_SIZED_INIT(type)                                                 \
	static inline void type##_init(struct type *s)                       \
	{                                                                    \
		type##_init_size(s, sizeof(*s));                             \
	}
#define USH_SIZED_GET(type, obj)                                             \
	static inline void type(const obj *o, struct type *s)                \
	{                                                                    \
		type##_size(o, s, sizeof(*s));                               \
	}

/* ------------------------------------------------------------------ errors */

/* Library errors live below -4000, outside the errno range. */
#define USH_ERRORS(X)                                                        \
	X(CORRUPT, -4001, "corrupt or truncated data")                       \
	X(CRC, -4002, "CRC32C mismatch")                                     \
	X(VERSION, -4003, "unsupported format or protocol version")          \
	X(NOTCOMMITTED, -4004, "map output not committed")                   \
	X(POOL, -4005, "buffer pool exhausted")                              \
	X(CODEC, -4006, "compression or decompression failed")               \
	X(STATE, -4007, "object in the wrong state for this call")           \
	X(COMMITTED, -4008, "map attempt already committed")                 \
	X(DRAINING, -4009, "worker decommissioning: takes no new map output")

enum {
#define USH_ERR_ENUM(name, code, msg) USH_E##name = (code),
	USH_ERRORS(USH_ERR_ENUM)
#undef USH_ERR_ENUM
};

/* Description of err (a negative errno or USH_E* code). Never NULL. */
USH_API const char *ush_strerror(int err);
/* Symbolic name ("EIO", "USH_ECRC") of err. Never NULL. */
USH_API const char *ush_err_name(int err);
/*
 * The detailed message of the last failing call on this thread, e.g.
 * "reader: /d/s1/m3.a0.data offset 65536 partition 7: CRC32C mismatch".
 * Valid until the next failing call on this thread.
 */
USH_API const char *ush_last_error(void);

/* Log sink for warnings (fallbacks the caller should know about). The
 * default writes "ushuffle: <msg>" to stderr. fn == NULL restores it. */
typedef void (*ush_log_fn)(void *arg, const char *msg);
USH_API void ush_set_log(ush_log_fn fn, void *arg);

/* ------------------------------------------------------------------ frames */

enum ush_codec {
	USH_CODEC_NONE = 0,
	USH_CODEC_LZ4 = 1,
	USH_CODEC_ZSTD = 2,
};

/* Bytes of the frame header reserved in front of every push buffer. */
#define USH_FRAME_HDR_SIZE 48u
/* Bytes of the length prefix in front of every record inside a batch. */
#define USH_RECORD_HDR_SIZE 4u
/* Largest record (and batch) the format accepts. */
#define USH_RECORD_MAX (1u << 30)

/*
 * Exact bytes a frame occupies on the wire and on disk (before O_DIRECT
 * padding) when its stored payload is stored_len bytes.
 */
USH_API size_t ush_frame_size(size_t stored_len);
/*
 * Exact size of a frame of raw_len batch bytes under codec: for
 * USH_CODEC_NONE header + raw_len; for a compressing codec the frame is
 * compressed into a scratch buffer once to learn its size (use it in tests
 * and sizing tools, not per batch). A batch that does not shrink is stored
 * raw, so header + raw_len is also the upper bound for every codec.
 * Returns the size, or a negative error.
 */
USH_API long ush_frame_size_of(enum ush_codec codec, int level,
			       const void *batch, size_t raw_len);

/* Parses "none", "lz4", "zstd" or "zstd:LEVEL". Returns 0 or -EINVAL. */
USH_API int ush_codec_parse(const char *s, enum ush_codec *codec, int *level);
USH_API const char *ush_codec_name(enum ush_codec codec);

/* -------------------------------------------------------------------- ring */

typedef struct ush_ring ush_ring;

struct ush_ring_opts {
	uint32_t size;      /* sizeof, set by ush_ring_opts_init() */
	unsigned iodepth;   /* in-flight operations bound (default 64); each
			       connection of a net writer holds one, so
			       it must exceed their number */
	size_t pool_bytes;  /* registered buffer memory, 2 push buffers ..
			       1 GiB, rounded up to a push buffer multiple
			       (default 64 MiB) */
	size_t push_size;   /* push buffer size, power of two, 4 KiB..64 MiB
			       (default 64 KiB) */
	int sqpoll;         /* 1: IORING_SETUP_SQPOLL (default 0) */
	int fixedbufs;      /* 1: register buffers or fail; 0: never; -1
			       (default): register, fall back with a warning.
			       Without io_uring (uring_refused) nothing is
			       registered, and 1 does not fail */
	enum ush_codec codec;
	int level;          /* codec level (zstd default 1, lz4 accel 1) */
};

/* ush_ring_opts_init(&opts) fills opts with the defaults above. */
USH_API void ush_ring_opts_init_size(struct ush_ring_opts *opts, size_t size);
USH_SIZED_INIT(ush_ring_opts)

/*
 * Creates a ring for the calling thread: one io_uring, a pool of
 * pool_bytes carved into power-of-two buffers from 4 KiB to push_size, and
 * the compression contexts. On success *out owns them; free with
 * ush_ring_free() from the same thread. Options out of bounds: -EINVAL.
 *
 * The writers of a ring share its pool. A writer short of a buffer sends
 * batches and waits for completions; USH_EPOOL means neither helps: the
 * rest of the pool is held by the caller (buffers acquired or swapped and
 * not released) or by other writers' open batches. Release buffers, or
 * raise pool_bytes.
 */
USH_API int ush_ring_create(ush_ring **out, const struct ush_ring_opts *opts);
/* Frees the ring, from its creator thread. Every writer opened on it must
 * be freed first (else an abort, above). */
USH_API void ush_ring_free(ush_ring *ring);

struct ush_ring_info {
	uint32_t size;          /* sizeof, set by the getter's wrapper */
	unsigned setup_flags;   /* IORING_SETUP_* actually in effect */
	int fixedbufs;          /* 1 if the pool is registered */
	unsigned iodepth;
	size_t pool_bytes;
	size_t push_size;
	size_t pool_idle_bytes; /* bytes on the idle lists now */
	/* 0, or the -errno io_uring_setup gave (-EPERM: a seccomp filter or
	 * the io_uring_disabled sysctl; -ENOSYS): the ring then runs every
	 * operation with plain system calls (README, "Without io_uring"). */
	int uring_refused;
};
USH_API void ush_ring_info_size(const ush_ring *ring,
				struct ush_ring_info *info, size_t size);
USH_SIZED_GET(ush_ring_info, ush_ring)

/* ----------------------------------------------------------------- sealing */

/*
 * Sealed frames (docs/security.md): a writer given an application data
 * key encrypts and authenticates every batch (AES-256-GCM) before it
 * leaves; workers store and forward it sealed and never hold the key;
 * readers given the key open it, and fail with USH_ECORRUPT on a frame
 * that does not authenticate. The data key is the application's own,
 * not the secret workers authenticate it with.
 */
#define USH_SEAL_KEY_SIZE 32
#define USH_SEAL_KEYS_MAX 16
/* A sealed frame's payload ends with this many more bytes (key id and
 * tag): a sealing writer's buffers hold as many fewer batch bytes
 * (ush_writer_acquire() says how many). */
#define USH_SEAL_TRAILER_SIZE 20u
struct ush_seal_key {
	uint32_t id;   /* carried in every frame and map status it seals */
	unsigned char key[USH_SEAL_KEY_SIZE];
};

/*
 * Reads a key file (docs/security.md, "Key files"): lines of 64 hex
 * digits, each optionally preceded by a decimal key id and a space (else
 * id 0); blank lines and lines starting with '#' are skipped; the first
 * key is the one writers seal with. Fills keys (room for max) and
 * returns how many, or an error naming the file and line (-EINVAL), a
 * file that is not a regular file, or an I/O error. A file readable by
 * group or others is used, with a warning.
 */
USH_API int ush_seal_keys_load(const char *path, struct ush_seal_key *keys,
			       uint32_t max);

/* ------------------------------------------------------------------ writer */

typedef struct ush_writer ush_writer;

enum ush_target {
	USH_TARGET_NULL = 0, /* frames are built, then dropped: no I/O */
	USH_TARGET_DISK = 1, /* local spill: data file + index per attempt */
	USH_TARGET_NET = 2,  /* push to ushuffled workers over TCP */
};

/* How a disk writer writes (ush_writer_opts.ioengine). */
enum ush_ioengine {
	USH_IOENGINE_URING = 0, /* the ring: WRITE_FIXED, batched */
	USH_IOENGINE_PSYNC = 1, /* baseline: copy + pwrite, no ring */
};

struct ush_writer_opts {
	uint32_t size;          /* sizeof, set by ush_writer_opts_init() */
	uint32_t shuffle, map, attempt;
	uint32_t partitions;    /* 1 .. 16M */
	enum ush_target target;
	const char *dir;        /* disk: spill directory (copied) */
	int direct;             /* disk: 1 O_DIRECT where supported, 0 off */
	enum ush_ioengine ioengine;
	/* net: the workers, "HOST:PORT[@LABEL],..." (copied). Partition p
	 * goes to worker ush_net_worker_of(p, number of workers), and its
	 * further replicas to the next workers of the list (wrapping) whose
	 * host label (default: HOST) no replica of p has yet, then to the
	 * next of any label; the map status names the workers holding it. */
	const char *workers;
	uint32_t timeout_ms;   /* net: a worker that neither takes data nor
				  answers this long is dead (default 10000) */
	uint32_t window;       /* net: bytes in flight per worker; 0: what
				  the worker offers (at most that anyway) */
	uint32_t zc_threshold; /* net: frames from this size go SEND_ZC
				  (0: 16 KiB; with send_zc 1, every
				  frame) */
	int send_zc;           /* net: 0 auto (threshold; off to a worker
				  on this host, and on a connection whose
				  sends the kernel copies), 1 always,
				  -1 never */
	/* The application the shuffle belongs to: 1..64 characters of
	 * A-Z a-z 0-9 . _ : - (NULL: "default"). Workers drop an
	 * application's shuffles when its heartbeats stop (see
	 * ush_app_heartbeat()); the map status carries it to readers. */
	const char *app;
	/* net: workers each batch goes to (0 or 1: one; 2 .. USH_REPLICAS_MAX
	 * distinct workers, at most 64 in the list). The same registered
	 * buffer is sent to each, no copy. With 2 or more a worker that
	 * dies or fails is dropped and the writer goes on with the others;
	 * it fails only when every replica of a partition is gone. */
	uint32_t replicas;
	uint32_t reserved0; /* never read, never reused: 0.4 callers' padding */
	/* 0.4.4: seal every batch under this key (copied at open; NULL: plain
	 * frames). The map status names its id. */
	const struct ush_seal_key *seal_key;
};
#define USH_REPLICAS_MAX 3

/* Fills opts (size bytes) with the defaults: every field zero (net
 * fields: the defaults above). Call it as ush_writer_opts_init(&opts). */
USH_API void ush_writer_opts_init_size(struct ush_writer_opts *opts,
				       size_t size);
USH_SIZED_INIT(ush_writer_opts)

/* Per-partition totals reported by ush_writer_commit(). */
struct ush_part_stats {
	uint64_t records;
	uint64_t bytes;   /* logical record bytes */
	uint64_t batches;
};

struct ush_writer_stats {
	uint32_t size;          /* sizeof, set by the getter's wrapper */
	uint64_t records, batches;
	uint64_t raw_bytes;     /* batch bytes before compression */
	uint64_t frame_bytes;   /* frame bytes produced (headers included) */
	uint64_t stored_bytes;  /* bytes written to the target (padding
				   incl.; a disk spill's file may be up
				   to an eighth longer: format.md §2.2) */
	uint64_t stored_raw;    /* with a codec: non-empty batches stored raw
				   (the compressed form was not smaller, no
				   buffer was idle for it, or the codec
				   failed) */
	uint64_t grows;         /* partition buffers grown by copy */
	/* net target */
	uint64_t net_sends;      /* frames sent with plain SEND */
	uint64_t net_zc_sends;   /* frames sent with SEND_ZC */
	uint64_t net_zc_notifs;  /* zero-copy notifications seen */
	uint64_t net_zc_copied;  /* ... that the kernel reported as copied */
	uint32_t net_zc_off;     /* connections that stopped using SEND_ZC
				    because the kernel copied anyway */
	uint32_t net_workers;
	uint64_t net_credit_waits; /* sends that waited for worker credit */
	uint64_t net_send_ops;   /* send operations issued (one SENDMSG may
				    carry many frames; a resumed send counts
				    again) */
	uint64_t net_short_sends; /* ... that the kernel completed short and
				     were resumed from the next byte */
	/* Frame bytes queued to each partition's first, second and third
	 * replica, and workers dropped (dead or failed) while replicas
	 * carried on. */
	uint64_t net_replica_bytes[USH_REPLICAS_MAX];
	uint32_t net_failovers;
	uint64_t staged_flushes; /* many partitions: times the records staged
				    in order were sorted by partition and
				    framed (docs/design.md, staged writes) */
};

/*
 * Opens the map output (shuffle, map, attempt) on ring. The writer borrows
 * ring until ush_writer_free(). Returns 0 and *out, or an error.
 *
 * Attempts: an attempt has one writer, once. Opening one that is
 * committed fails with USH_ECOMMITTED, one that another writer has open
 * with -EBUSY; both touch nothing. A retry of a map is a new attempt
 * number, as engines number task attempts. On disk, an attempt whose
 * writer failed before its commit may be reopened (its partial files are
 * replaced); a worker refuses one it holds frames of (-EEXIST).
 *
 * Net target: a worker that decommissions refuses the map, which is then
 * placed on the other workers of the list (replicas cut to those left,
 * with a warning) and its status names the workers used; when every
 * worker refuses, USH_EDRAINING naming them.
 */
USH_API int ush_writer_open(ush_writer **out, ush_ring *ring,
			    const struct ush_writer_opts *opts);

/*
 * Appends one record to partition's batch. Records are length-prefixed
 * and never split across batches; a record larger than the push buffer
 * goes out alone as its own batch. The record is copied; the caller keeps
 * rec, which may be NULL when len is 0. Returns 0 or an error (a sticky
 * I/O error returns on every call). A record is at most USH_RECORD_MAX
 * bytes (else -EMSGSIZE); on the net target its frame must also fit the
 * worker's frame limit (ush_worker_opts.max_frame, default 64 MiB), or the
 * writer fails with a sticky -EMSGSIZE.
 */
USH_API int ush_writer_write(ush_writer *w, uint32_t partition,
			     const void *rec, size_t len);

/*
 * Swap hand-off for callers that fill push buffers themselves.
 * ush_writer_acquire() lends the caller an idle push buffer: *buf points at
 * its payload area of *cap bytes (header room is reserved in front).
 * Fill it with records, each a 4-byte little-endian length then the bytes
 * (ush_record_put() does it). ush_writer_swap() hands *buf (len bytes,
 * nrecords records) over and lends in *buf a different idle buffer of the
 * same capacity: the old pointer must not be touched again. The batch
 * comes back after the records written to its partition before it. In
 * ush_writer_release() the caller gives back a buffer it no longer needs.
 * A buffer stays lent until then, or until ush_writer_free(), which takes
 * back every buffer still lent: the caller's pointers die there.
 *
 * A batch must be exactly nrecords records whose prefixes end at len.
 * swap stays O(1): it refuses at the call only what needs no walk
 * (nrecords x 4 > len, len > the capacity); the prefixes are walked when
 * the batch is framed, and a batch that does not parse is dropped with a
 * sticky -EINVAL naming the partition (every later call and the commit
 * return it; nothing is published). copy walks them at the call. On an
 * error returned by the call itself nothing was handed over and *buf is
 * unchanged, still the caller's.
 */
USH_API int ush_writer_acquire(ush_writer *w, void **buf, size_t *cap);
USH_API int ush_writer_swap(ush_writer *w, uint32_t partition, void **buf,
			    size_t len, uint32_t nrecords);
USH_API int ush_writer_release(ush_writer *w, void *buf);
/*
 * Copy hand-off: like swap, but the batch is copied into a pool buffer and
 * the caller keeps its memory (for callers that cannot give it away).
 */
USH_API int ush_writer_copy(ush_writer *w, uint32_t partition,
			    const void *batch, size_t len, uint32_t nrecords);

/* Writes one record header + bytes at dst; returns bytes written. */
static inline size_t ush_record_put(void *dst, const void *rec, uint32_t len)
{
	unsigned char *d = (unsigned char *)dst;
	const unsigned char *s = (const unsigned char *)rec;
	d[0] = (unsigned char)len;
	d[1] = (unsigned char)(len >> 8);
	d[2] = (unsigned char)(len >> 16);
	d[3] = (unsigned char)(len >> 24);
	for (uint32_t i = 0; i < len; i++)
		d[USH_RECORD_HDR_SIZE + i] = s[i];
	return USH_RECORD_HDR_SIZE + (size_t)len;
}

/*
 * Flushes every partition, waits for every completion, makes the output
 * durable and publishes it atomically: on disk the attempt's index is
 * renamed into place; on the net target every worker has synced and
 * logged the attempt. parts, if not NULL, receives `partitions` entries.
 * After commit the writer accepts no more records, and
 * ush_writer_status() yields the map status. A commit that failed
 * publishes nothing a reader can be given: retry the map as a new
 * attempt. An I/O error (a failed fdatasync included) is sticky: a
 * retried commit returns it again.
 */
USH_API int ush_writer_commit(ush_writer *w, struct ush_part_stats *parts);
/* Drops everything written so far and removes partial files. */
USH_API int ush_writer_abort(ush_writer *w);
/* Totals so far. */
USH_API void ush_writer_stats_size(const ush_writer *w,
				   struct ush_writer_stats *st, size_t size);
USH_SIZED_GET(ush_writer_stats, ush_writer)
/* The sticky error message, or NULL if the writer has none. */
USH_API const char *ush_writer_error(const ush_writer *w);
/* Frees the writer, aborting it first if it was neither committed nor
 * aborted, once none of its operations is in flight; returns the buffers
 * still lent to the caller to the pool. From the ring's creator thread
 * only. */
USH_API void ush_writer_free(ush_writer *w);

/* -------------------------------------------------------------- map status */

/*
 * A map status: the compact bytes a commit yields (docs/format.md §3). It
 * names the shuffle, map and attempt, where the data lives (the disk
 * directory or the worker list) and, per partition, the batch count and a
 * checksum over the batches' CRC32Cs. The caller's driver decides which
 * attempt of each map counts, as Spark's MapOutputTracker does: it
 * collects the statuses (carrying them in its own machinery; they are
 * plain bytes, position-independent) and opens readers with the ones it
 * chose. Workers store every attempt and elect none.
 */
struct ush_status {
	const void *data;
	size_t len;
};

/* After a successful commit: the map status, borrowed from w (valid until
 * ush_writer_free()). Otherwise USH_ESTATE. */
USH_API int ush_writer_status(const ush_writer *w, struct ush_status *st);

struct ush_status_info {
	uint32_t size;          /* sizeof, set by the inline wrapper */
	uint32_t shuffle, map, attempt, partitions;
	enum ush_target target; /* USH_TARGET_DISK or USH_TARGET_NET */
	uint64_t batches;       /* of every partition */
	uint32_t location_len;  /* bytes of the directory or worker list */
	/* 0.4.4: 1 when its frames are sealed, under key seal_key_id */
	uint32_t sealed;
	uint32_t seal_key_id;
};
/* Checks a map status (bounds, version, header CRC) and describes it:
 * 0, USH_ECORRUPT or USH_EVERSION, with a message saying what is wrong. */
USH_API int ush_status_info_size(const struct ush_status *st,
				 struct ush_status_info *info, size_t size);
static inline int ush_status_info(const struct ush_status *st,
				  struct ush_status_info *info)
{
	return ush_status_info_size(st, info, sizeof(*info));
}

/* ------------------------------------------------------------------ reader */

typedef struct ush_reader ush_reader;

struct ush_reader_opts {
	uint32_t size;        /* sizeof, set by ush_reader_opts_init() */
	uint32_t partition;
	/* The map statuses of one shuffle to read, one per map: exactly
	 * these attempts are read, from where each status says. Borrowed
	 * until ush_reader_open() returns. */
	const struct ush_status *statuses;
	uint32_t nstatuses;
	uint32_t timeout_ms;  /* net: give up on a silent worker (10000) */
	/* 0.4.4: the keys sealed maps may name (by id; borrowed until
	 * ush_reader_open() returns). A sealed map whose key id is not
	 * among them fails the open with -ENOKEY. */
	const struct ush_seal_key *seal_keys;
	uint32_t nseal_keys;
	/* 0.4.4: 1 refuses a plain map (its status, at open: -EPERM), so no
	 * frame is read that its reader cannot authenticate. */
	uint32_t require_sealed;
	/* 0.4.5: read the partitions [partition, partition + npartitions)
	 * one after another (0 or 1: partition alone), as a reducer of
	 * coalesced partitions does: the records of each come whole before
	 * the next's, ush_reader_partition() says whose. On the net target
	 * one request per worker fetches the range, so a small partition
	 * costs what its bytes cost. npartitions times nstatuses is at most
	 * USH_READER_RANGE_MAX on every target, disk too (-E2BIG at open,
	 * before a file is opened: read fewer partitions at once). */
	uint32_t npartitions;
	uint32_t reserved0;
};
#define USH_READER_RANGE_MAX 699050u

/* ush_reader_opts_init(&opts) fills opts with the defaults (zero). */
USH_API void ush_reader_opts_init_size(struct ush_reader_opts *opts,
				       size_t size);
USH_SIZED_INIT(ush_reader_opts)

/*
 * Opens partition (or the range of npartitions from it) over the
 * attempts the statuses name. Fails at open with -EINVAL for bad
 * arguments (no statuses, statuses of different shuffles or partition
 * counts, one map named twice, a partition beyond the count), -E2BIG for
 * a range beyond USH_READER_RANGE_MAX entries, USH_ECORRUPT for a status that does not parse, and
 * USH_ENOTCOMMITTED when a named attempt is not committed where its
 * status says (a missing index or directory; a worker that does not
 * hold it). The reader checks every map's batches against its status: a
 * missing, extra or different batch is USH_ECORRUPT naming map,
 * partition and file or worker. A status of a writer with replicas names
 * each partition's workers: a worker that fails (at open or mid-stream)
 * is replaced by the next, asked for each map's batches after those
 * verified, so the records go on with no duplicate and no gap; when none
 * is left, -EHOSTUNREACH names the partition and the workers tried, or,
 * when every one of them answered that a named attempt is not committed
 * there, USH_ENOTCOMMITTED as without replicas.
 */
USH_API int ush_reader_open(ush_reader **out,
			    const struct ush_reader_opts *opts);
/*
 * Yields the next record: returns 1 and sets *rec and *len (valid until the
 * next call or ush_reader_free()), 0 at the end, or an error naming file,
 * offset and partition. Every frame's CRC is checked before any of its
 * records is returned; a duplicate batch (a taken seq again) is dropped
 * when its CRC is the taken frame's, and is USH_ECORRUPT naming both
 * places when it is not. Records yielded before an error may come from a
 * frame later found to conflict: act on a partition once this returned 0.
 */
USH_API int ush_reader_next(ush_reader *r, const void **rec, size_t *len);
/* 0.4.5: the partition of the record ush_reader_next() last yielded (the
 * range's first before any). Every check of a partition (each map's
 * batches against its status) is done before a record of the next
 * partition is yielded. */
USH_API uint32_t ush_reader_partition(const ush_reader *r);

/* Totals of a reader so far. */
struct ush_reader_stats {
	uint32_t size;          /* sizeof, set by the getter's wrapper */
	uint64_t records;       /* records yielded */
	uint64_t batches;       /* frames yielded (duplicates excluded) */
	uint64_t dup_batches;   /* duplicate frames dropped */
	uint64_t raw_bytes;     /* batch bytes of the frames yielded */
	uint64_t stored_bytes;  /* frame bytes read, duplicates included */
	uint32_t failovers;     /* streams resumed from another replica */
	uint64_t resumed_batches; /* batches verified before a failover,
				     which the next replica did not send */
};
USH_API void ush_reader_stats_size(const ush_reader *r,
				   struct ush_reader_stats *st, size_t size);
USH_SIZED_GET(ush_reader_stats, ush_reader)
USH_API void ush_reader_free(ush_reader *r);

/* --------------------------------------------------------------------- net */

/*
 * Shuffle lifetimes on workers. Every shuffle belongs to the application
 * that first wrote it (ush_writer_opts.app). ush_shuffle_drop() asks every
 * worker of the list ("HOST:PORT,...") to drop all data of shuffle,
 * committed or not, and waits for each to confirm; a worker refuses a
 * shuffle of another application. ush_app_heartbeat() tells every worker
 * the application is alive: a worker drops all shuffles of an application
 * it has not heard of (heartbeat, or any connection naming it) for its
 * --app-ttl (default 300 s). A driver heartbeats well within the TTL, and
 * drops each shuffle when its job is done. Both ask every worker at once
 * (from up to 64 threads of their own, joined before they return), with
 * one deadline for the lot: timeout_ms, 0: 10 s. Both return 0 or the
 * first error in the list's order, naming the worker.
 */
USH_API int ush_shuffle_drop(const char *workers, const char *app,
			     uint32_t shuffle, uint32_t timeout_ms);
USH_API int ush_app_heartbeat(const char *workers, const char *app,
			      uint32_t timeout_ms);

/*
 * Authentication (docs/security.md). Workers refuse clients that do not
 * prove the secret of their application (unless run --insecure); every
 * connection of the library (writers, readers, drops, heartbeats) proves
 * the secret of the application it names, and requires the worker to
 * prove it too: a HMAC-SHA256 challenge with fresh nonces both ways
 * (docs/protocol.md §2.8). The secret of an application is the one set
 * for it here, else the one set with app == NULL (every application),
 * else the environment variable USHUFFLE_SECRET (read at each
 * connection), else none: the client then asks for no authentication,
 * which only an --insecure worker accepts.
 *
 * ush_auth_secret() copies len bytes (16..4096) of secret for app (an
 * application id, or NULL for every application); secret NULL and len 0
 * forget it. ush_auth_secret_file() reads the secret from the file at
 * path: its whole contents, one trailing newline removed (a file
 * readable by group or others is taken, with a warning). Both are
 * process-wide and thread-safe; they return 0, -EINVAL (a bad id or
 * length) or the error reading the file, with ush_last_error() naming it.
 */
USH_API int ush_auth_secret(const char *app, const void *secret, size_t len);
USH_API int ush_auth_secret_file(const char *app, const char *path);

/*
 * Checks a worker list as writers and readers take it ("HOST:PORT,...";
 * spaces around an entry are ignored): each entry HOST:PORT with PORT
 * 1..65535, no HOST:PORT twice, and with resolve != 0 each HOST known to
 * the resolver (a name lookup; no worker is contacted). Returns the
 * number of workers, or -EINVAL (a bad entry) or -EHOSTUNREACH (an
 * unknown host) with ush_last_error() naming the entry and what is
 * accepted.
 */
USH_API int ush_workers_check(const char *list, int resolve);

/* ---------------------------------------------------------------- counters */

/*
 * The library's counters in this process, for an application's own
 * monitoring (a worker's are ush_worker_stats(), worker.h). A writer's
 * and a reader's totals are added when it is freed. Cheap, thread-safe.
 */
struct ush_lib_stats {
	uint32_t size;              /* sizeof, set by the inline wrapper */
	uint64_t writers_committed; /* writers freed after a commit */
	uint64_t writers_aborted;   /* ... without one */
	uint64_t readers;           /* readers freed */
	uint64_t records_written, bytes_written; /* records, batch bytes */
	uint64_t bytes_stored;      /* frame bytes written to the targets */
	uint64_t records_read, bytes_read; /* records; frame bytes read */
	uint64_t net_connects;      /* connections to workers tried */
	uint64_t net_connect_errors; /* ... that failed */
	uint64_t errors;            /* calls that failed with a message
				       (ush_last_error()) */
	uint64_t net_reuses;        /* reader FETCHes sent on a connection
				       kept from an earlier one */
	uint64_t net_recv_bufs;     /* readers' stream receive buffers
				       (2 MiB) allocated: one freed is kept
				       for the next stream, a few at most
				       (0.5) */
};
USH_API void ush_lib_stats_size(struct ush_lib_stats *st, size_t size);
static inline void ush_lib_stats(struct ush_lib_stats *st)
{
	ush_lib_stats_size(st, sizeof(*st));
}

/* The worker (index into a writer's list of n) that stores partition. */
USH_API uint32_t ush_net_worker_of(uint32_t partition, uint32_t nworkers);

/* ----------------------------------------------------------- unstable API */

/*
 * For the ushuffle CLI, tests and benchmarks: the latency histograms
 * behind the reports and the library's allocation counter. Define
 * USH_UNSTABLE_API before including this header to see them. Their
 * layout and symbols may change in any release (they sit in their own
 * symbol version, USHUFFLE_UNSTABLE); nothing else in this header does.
 */
#ifdef USH_UNSTABLE_API
/*
 * Heap allocations made by the library (its own and its codecs') since the
 * process started. The difference around N batches is the allocation count
 * per batch; in steady state it is zero.
 */
USH_API uint64_t ush_alloc_count(void);

/* A log-linear latency histogram (16 buckets per power of two, so a
 * percentile is within 1/16 of the true value). */
#define USH_LAT_BUCKETS 976
struct ush_lat {
	uint64_t count, min_ns, max_ns;
	double sum_ns, sumsq_ns;
	uint64_t bucket[USH_LAT_BUCKETS];
};
USH_API void ush_lat_init(struct ush_lat *lat);
USH_API void ush_lat_add(struct ush_lat *lat, uint64_t ns);
USH_API void ush_lat_merge(struct ush_lat *dst, const struct ush_lat *src);
/* The pct-th percentile (0 < pct <= 100) in ns; 0 if lat is empty. */
USH_API uint64_t ush_lat_percentile(const struct ush_lat *lat, double pct);
USH_API double ush_lat_mean(const struct ush_lat *lat);
USH_API double ush_lat_stdev(const struct ush_lat *lat);
/* The writer's submission-to-completion latency per frame, and the
 * reader's per-frame load latency (read, CRC, decompress); borrowed,
 * valid until the object is freed. */
USH_API const struct ush_lat *ush_writer_complete_lat(const ush_writer *w);
USH_API const struct ush_lat *ush_reader_load_lat(const ush_reader *r);
#endif /* USH_UNSTABLE_API */

#ifdef __cplusplus
#pragma GCC diagnostic pop
}
#endif
#endif /* USHUFFLE_H */
