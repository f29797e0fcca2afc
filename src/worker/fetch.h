/* FETCH streams and the partition directories (fetch.c). */
#ifndef USHI_WK_FETCH_H
#define USHI_WK_FETCH_H

#include "worker/list.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ush_worker;
struct wk_thread;
struct wk_outq;
struct ushi_buf;
struct ushi_frame;
struct proto_want;
struct wk_app;

/* FETCH reads this long or longer are O_DIRECT (where the worker
 * writes so); shorter ones go through the page cache. */
#define WK_FETCH_DIRECT_MIN (32u << 10)
/* Reads of one FETCH stream in flight at once: many small ones (a range
 * of small partitions reads a frame or two per partition, scattered over
 * the log: the disk's queue depth is what makes them fast), and at most
 * WK_FETCH_RUNS flush buffers' worth of bytes. Beyond WK_FETCH_RUNS
 * reads, a stream takes more only while its thread's streams hold fewer
 * than half its ring's ops (WK_IODEPTH). */
#define WK_FETCH_READS 64
#define WK_FETCH_RUNS 8
/* Heap read buffers a thread keeps (wk_hbuf_put()), in flush buffers:
 * what one stream reads ahead (WK_FETCH_RUNS flush buffers of reads,
 * each in a buffer of up to twice its size). */
#define WK_HBUF_KEEP (2u * WK_FETCH_RUNS)
/* Small frames (below WK_FETCH_DIRECT_MIN: a range of many partitions
 * reads one or a few of each per writer's flush) are read a window at a
 * time: up to WK_FETCH_WIN_FRAMES of them (a sendmsg's pieces at most,
 * UIO_MAXIOV), a flush buffer's worth, read as runs of their log (a
 * frame goes on the run it follows across a gap of at most
 * WK_FETCH_WIN_GAP, while half of the run, or all but two blocks, is
 * frames of the window), then sent in stream order from the runs'
 * memory. The frames of neighbouring partitions that one flush wrote
 * side by side are then one read, not one each. */
#define WK_FETCH_WIN_FRAMES 1024u
#define WK_FETCH_WIN_GAP (32u << 10)
/* Windows of one stream read at once (within WK_FETCH_READS reads and
 * WK_FETCH_RUNS flush buffers' worth). */
#define WK_FETCH_WINS 8
/* A stream of small frames asks the page cache to read ahead the extent
 * of each log it reads from, when that is at most this long and at most
 * WK_FETCH_AHEAD_SPAN times the bytes streamed from it. */
#define WK_FETCH_AHEAD_MAX (256ull << 20)
#define WK_FETCH_AHEAD_SPAN 8

/* One frame of a partition directory. */
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

/* What a FETCH streams: the wanted frames of its partitions, in order
 * (partition, thread, log offset). */
struct wk_fent {
	uint64_t off;
	uint32_t len, partition;
	uint16_t thread;
};

/* A thread's log, open while a FETCH streams from it: buffered, and
 * O_DIRECT for long reads (-1: not open, -2: refused). */
struct wk_flog {
	int fd, dfd;
	struct wk_dir *dir;
};

struct wk_fetch;

/* A read of a FETCH stream: a run of adjacent frames of one log. */
struct wk_fread {
	struct wk_fetch *fe;
	struct wk_dir *dir;     /* the directory of the log it reads */
	struct ushi_buf *buf;   /* pool memory, or NULL: heap */
	uint8_t *mem;
	uint32_t hcap;          /* heap memory: its size class (0: exact) */
	uint64_t off;           /* file offset of mem[0]: aligned for an
				   O_DIRECT read */
	uint32_t need, got;     /* bytes asked for; read so far */
	uint8_t runs;           /* a window's first run: its runs (this
				   read and those after it), else 0 */
	uint32_t lead;          /* mem[lead] is the first frame's byte */
	uint32_t len, frames;   /* frame bytes and frames to send */
	int res;                /* an error, or 0 */
	bool inflight, done;
};

/* A window of small frames: ent[a, b) of the stream, entry a + i read
 * by its run wrun[i] (WK_FETCH_WIN_FRAMES). */
struct wk_fwin {
	uint32_t a, b;
	uint8_t *wrun;
};

/* The read of an index whose partition directory is not cached. */
struct wk_iread {
	int ifd, lfd;             /* the index, its log (-1: none) */
	struct wk_dir *dir;       /* the log's directory */
	uint64_t isize, lsize;    /* their sizes when opened */
	uint8_t *mem;             /* isize bytes */
	uint64_t got;             /* read so far */
	int res;                  /* an error, or 0 */
	bool inflight, done;
};

struct wk_fetch {
	struct wk_thread *t;
	const char *peer;         /* the connection's, for the log */
	struct wk_app *app;       /* its application, held by the
				     connection */
	const char *app_id;
	uint64_t charged;         /* bytes of app->fetch_bytes it holds */
	uint32_t shuffle, partition; /* the range [partition, +count) */
	uint32_t count;
	uint64_t skip;            /* stream bytes the reader already has */
	struct proto_want *m;     /* entries asked for, ascending
				     (partition, map) */
	uint32_t nm;
	struct wk_fent *ent;      /* the frames to stream */
	uint32_t nent, next;      /* entries; the next one to read */
	size_t cap;               /* ent's room */
	/* Planning, thread by thread, before the MANIFEST: */
	unsigned nthr, plan_k;    /* threads with logs; the next planned */
	struct wk_iread ir;       /* plan_k's index being read */
	bool planned;             /* the MANIFEST is queued */
	char msg[256];            /* why planning failed, when it says */
	struct wk_flog *logs;     /* per thread: its log, once opened */
	struct wk_dir *dir;       /* the directory of the log last read */
	struct wk_fread rd[WK_FETCH_READS];
	unsigned rhead, rn;       /* reads queued, oldest first */
	struct wk_fwin win[WK_FETCH_WINS]; /* windows queued, oldest at
				     whead; each one's runs are reads in rd[] */
	unsigned whead, wn;
	unsigned inflight;        /* reads the kernel holds */
	uint64_t rbytes;          /* bytes of the reads queued */
	uint64_t frames, bytes;
};

/* Plans the stream that FETCH f (payload: its attempts) of peer, of
 * application app (app_id), asks for and queues its MANIFEST on q; the
 * plan's memory (the entries asked for until planned, the frames to
 * stream) counts against app's --max-app-fetch-bytes (-EDQUOT beyond): 0 and the stream in *out, or an error
 * (with msg saying why, when it is not the caller's: a refused log, an
 * attempt not committed here). An index whose directory is not cached is
 * read on the ring: the planning, and the MANIFEST, then go on in
 * wk_fetch_pump(). */
int wk_fetch_start(struct wk_thread *t, const struct ushi_frame *f,
		   const uint8_t *payload, const char *peer,
		   struct wk_app *app, const char *app_id, struct wk_outq *q,
		   struct wk_fetch **out, char *msg, size_t n);
/* Plans on once the index read ended, then submits the stream's next
 * reads and queues on q the MANIFEST, the frames of those done, in
 * order, and FETCH_END after the last. Returns 1 when the stream has
 * ended (the caller frees it), 0 while it goes on, or an error (with
 * fe->msg saying why, when planning does; USH_ECORRUPT: a log shorter
 * than its index); then it reads no more. */
int wk_fetch_pump(struct wk_fetch *fe, struct wk_outq *q);
/* Whether the kernel still holds reads of fe (it may not be freed). */
bool wk_fetch_busy(const struct wk_fetch *fe);
/* Whether fe's first frames are still being read (its MANIFEST, queued,
 * may wait to go out with them in one send). */
bool wk_fetch_first(const struct wk_fetch *fe);
/* Gives what fe holds of its application's FETCH quotas back, and
 * counts no more there: its connection leaves the application. */
void wk_fetch_unbill(struct wk_fetch *fe);
void wk_fetch_free(struct wk_fetch *fe);
/* Heap memory for a read of need bytes that the pool cannot lend: a
 * buffer kept from an earlier read where one of its size class is, with
 * that class's size in *cap (0: allocated exactly, beyond the classes
 * kept), or NULL. wk_hbuf_put() gives it back (p may be NULL); beyond
 * what a thread keeps it is freed. wk_hbuf_close() frees those kept. */
void *wk_hbuf_get(struct wk_thread *t, size_t need, uint32_t *cap);
void wk_hbuf_put(struct wk_thread *t, void *p, uint32_t cap);
void wk_hbuf_close(struct wk_thread *t);
/* Forgets the cached partition directories of shuffle. */
void wk_pdir_drop(struct wk_thread *t, uint32_t shuffle);
void wk_pdir_close(struct wk_thread *t);

#endif
