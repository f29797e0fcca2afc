/*
 * ushuffle, the fio-style driver. A client of the public API only: this
 * header is the CLI's own, shared by its files, never by the library.
 *
 *   options.c  the option table: parsing values, defaults, --help
 *   jobfile.c  the command line and INI job files -> a list of jobs
 *   job.c      running one job: threads, phases, Ctrl-C, clean-up
 *   write.c    the map phase of one thread (staging, swap/copy hand-off)
 *   read.c     the read-back phase of one thread
 *   verify.c   record content derived from (job, map, sequence), checks
 *   manifest.c what a write job leaves for a later read job
 *   eta.c      the live status line
 *   report.c   normal (fio-like) report; json.c: the JSON report;
 *              terse.c: fio's terse lines
 */
#ifndef USH_CLI_H
#define USH_CLI_H

/* The latency histograms and allocation counter behind the report. */
#define USH_UNSTABLE_API 1
#include <ushuffle/ushuffle.h>
#include <ushuffle/worker.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_NAME "ushuffle"

/* Exit statuses: 0 success, 1 run-time failure (I/O, verify), 2 bad
 * input, 130 interrupted (Ctrl-C), as shells report SIGINT. */
enum { EXIT_RUN = 1, EXIT_USAGE = 2, EXIT_INTR = 130 };

enum rw_mode { RW_WRITE, RW_READ, RW_SHUFFLE };
enum cli_target { TARGET_NULL, TARGET_DISK, TARGET_NET };
enum handoff { HANDOFF_SWAP, HANDOFF_COPY };
enum verify_mode { VERIFY_NONE, VERIFY_CRC32C };
/* --output-format is fio's comma list: a bit each */
enum out_format { OUT_NORMAL = 1, OUT_JSON = 2, OUT_JSON_PLUS = 4,
		  OUT_TERSE = 8 };
enum eta_mode { ETA_AUTO, ETA_ALWAYS, ETA_NEVER };

struct codec_opt {
	int codec; /* enum ush_codec */
	int level;
};

/* Every option's value; the option table (options.c) names each field. */
struct job_opts {
	/* bit i: cli_opts[i] was set in the job's own section or after its
	 * --name (fio's "job options"), not by a default or [global] */
	uint64_t given;
	char name[128];
	uint64_t numjobs; /* 0: online CPUs, resolved after parsing */
	uint64_t size;
	uint64_t runtime_ms; /* 0: no limit */
	uint64_t hold_ms;    /* heartbeat this long after the run: 0 none */
	int time_based, group_reporting, keep, pin;
	int stonewall;       /* wait for the jobs before this one */
	uint64_t loops;      /* runs of the job, one after another */
	int loop;            /* which of them this is: not an option */
	int thread;          /* fio's; jobs are threads anyway */
	int unlink;          /* remove the output at the end: -1 auto */
	char cpus_allowed[256]; /* fio's CPU list; "": the process's */
	int rw;
	uint64_t partitions;
	uint64_t record_size[2]; /* min, max */
	uint64_t bs;
	struct codec_opt codec;
	uint64_t iodepth;
	int direct, sqpoll, fixedbufs; /* fixedbufs: -1 auto */
	int handoff, ioengine, target, verify;
	uint64_t compress_pct;
	char buffer_pattern[132]; /* fio's: the filler, "0x…" hex or text */
	char dir[PATH_MAX];
	char workers[1024];
	uint64_t replicas;   /* net: workers each batch goes to */
	char secret_file[PATH_MAX]; /* net: the application's secret */
	char encrypt_key_file[PATH_MAX]; /* seal frames under its keys */
	char app[65];        /* net: the application the shuffles belong to */
	/* process-wide: from the command line or a [global] section */
	int output_format, eta, parse_only, minimal;
	uint64_t status_interval_ms, eta_newline_ms; /* 0: off */
	char output[PATH_MAX];
};

/* Does the job leave its output for a later read? (--keep, --unlink; a
 * read leaves what it read, unless job_read_unlinks()) */
static inline bool job_keeps(const struct job_opts *o)
{
	return o->rw == RW_READ || o->unlink == 0 ||
	       (o->unlink < 0 && (o->rw == RW_WRITE || o->keep));
}

/* A read with --unlink=1 removes what it read, once it has read all of
 * it without an error (a failed read keeps it, to be looked at). */
static inline bool job_read_unlinks(const struct job_opts *o)
{
	return o->rw == RW_READ && o->unlink == 1;
}

/* --dir is fio's list, DIR[:DIR...]: map i spills to the i-th (modulo
 * their count); the manifest and an embedded worker live in the first.
 * job_dir() writes the i-th into buf, returns the count. */
unsigned job_dir(const struct job_opts *o, unsigned i, char *buf, size_t n);

/* ------------------------------------------------------------ options.c */

enum opt_type { T_STR, T_UINT, T_SIZE, T_TIME, T_BOOL, T_ENUM, T_RANGE,
		T_CODEC };
/* OPT_LIST: an enum of bits, given as a comma list (fio's
 * --output-format=normal,json) */
enum { OPT_GLOBAL = 1, OPT_AUTO = 2, OPT_POW2 = 4, OPT_LIST = 8 };

struct opt_choice {
	const char *name;
	int value;
};

struct opt {
	const char *name;
	enum opt_type type;
	size_t off, size;  /* field in struct job_opts */
	const char *def;   /* default, parsed like user input */
	const char *help;
	uint64_t min, max; /* numbers; T_STR: max length */
	const struct opt_choice *choices; /* T_ENUM, NULL-terminated */
	unsigned flags;
};

extern const struct opt cli_opts[];
extern const size_t cli_nopts;

/* The option called name ('-' and '_' match each other; fio's aliases
 * too, such as blocksize for bs), or NULL. */
const struct opt *opt_find(const char *name);
/* Why fio's option name has no meaning here and what to use instead, or
 * NULL for a name that is not one of those. */
const char *opt_refused(const char *name);
/* The option name or fio alias closest to name (a typo), or NULL. */
const char *opt_suggest(const char *name);
/* Sets o in j from text v. Returns 0, or -1 with "why; accepted: what"
 * in err. v == NULL: the bare flag form (booleans only). */
int opt_set(const struct opt *o, struct job_opts *j, const char *v,
	    char *err, size_t n);
/* Formats o's value in j as text that opt_set() accepts. */
void opt_format(const struct opt *o, const struct job_opts *j, char *buf,
		size_t n);
void opts_defaults(struct job_opts *j);
void opts_help(FILE *f);
const char *choice_name(const struct opt_choice *c, int value);
extern const struct opt_choice rw_choices[], verify_choices[],
	target_choices[];

/* ------------------------------------------------------------ jobfile.c */

struct cli_setting { /* one command-line option, as given */
	const struct opt *o;
	const char *value;
	int job; /* -1: before the first --name (every job); else the
		    command-line job it belongs to, counted from 0 */
};

struct job_list {
	/* The jobs in order: the files' sections, then the command line's.
	 * A job runs at the same time as the ones before it, back to the
	 * last one with stonewall set, which waits for all before it. */
	struct job_opts *jobs;
	unsigned *group;       /* per job: its stonewall group, from 0 */
	size_t n;
	struct job_opts global; /* process-wide settings */
	struct cli_setting *given; /* command-line options, for reports */
	size_t ngiven;
};

/* Parses argv. Returns 0 with *out filled, or an exit status: 0 after
 * --help/--version (*out empty), EXIT_USAGE after printing one message. */
int cli_parse(int argc, char **argv, struct job_list *out);
void job_list_free(struct job_list *l);

/* -------------------------------------------------------------- verify.c */

/* Little-endian 32-bit store: record length prefixes, verify headers. */
static inline void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

/* Header of a verifiable record: CRC32C (seeded with the job id) of the
 * rest, map, sequence number. Shorter records carry filler only. */
#define REC_HDR 16u

struct rec_gen {
	uint32_t job;        /* shuffle id, derived from the job name */
	uint32_t partitions;
	uint32_t min, max;   /* record size range */
	uint32_t compress_pct;
	uint8_t pattern[64]; /* --buffer_pattern: the filler (plen bytes) */
	uint32_t plen;
};

/* Where record seq of map goes, and how long it is. */
uint64_t rec_hash(const struct rec_gen *g, uint32_t map, uint64_t seq);
uint32_t rec_part(const struct rec_gen *g, uint64_t h);
uint32_t rec_len(const struct rec_gen *g, uint64_t h);
/* Writes record seq of map (len bytes, len = rec_len()) at dst. */
void rec_fill(const struct rec_gen *g, uint32_t map, uint64_t seq,
	      uint64_t h, uint8_t *dst, uint32_t len);

/* Checks the records of one partition as a reader yields them. */
struct part_check {
	const struct rec_gen *g;
	uint32_t part, maps;
	/* Records of one map come in order, but maps may interleave (a
	 * worker stores frames as they arrive). */
	uint64_t *next;  /* per map: lowest sequence still acceptable */
	uint64_t *count; /* per map: good records seen */
	uint64_t bad;    /* records that failed their check */
};

struct verify_log { /* the first mismatches, shared by the threads */
	pthread_mutex_t lock;
	char first[8][256];
	unsigned nfirst;
	atomic_uint_fast64_t errors;
};

void verify_log_init(struct verify_log *v);
void verify_log_add(struct verify_log *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Returns 0 if rec is as expected, else logs the mismatch, returns 1. */
int rec_check(struct part_check *c, struct verify_log *log,
	      const uint8_t *rec, size_t len);

/* ------------------------------------------------------------ manifest.c */

/* What a write job leaves beside its spill files for a later read. */
struct manifest {
	uint32_t shuffle, maps, partitions;
	uint32_t rec_min, rec_max;
	uint64_t *records, *bytes; /* [map * partitions + part] */
	/* The driver's choice of attempt per map: its committed status
	 * (data heap-owned), what a read job's readers are opened with. */
	struct ush_status *status;
	char workers[1024];        /* net: the workers the job used */
	bool embedded;             /* ... an embedded worker, in DIR */
};

/* The value of lower-case hex digit c, or -1. */
int hex_digit(char c);
void manifest_path(char *buf, size_t n, const char *dir, uint32_t shuffle);
/* Return 0, or a negative error with a message in err. */
int manifest_save(const struct manifest *m, const struct job_opts *o,
		  char *err, size_t n);
int manifest_load(struct manifest *m, const struct job_opts *o, char *err,
		  size_t n);
void manifest_free(struct manifest *m);
/* Where the write job put the data: TARGET_NET if it named workers. */
int manifest_target(const struct manifest *m);

/* ---------------------------------------------------------------- job.c */

/* One direction (write or read) of one thread. */
struct dir_stats {
	uint64_t bytes, records, batches; /* logical bytes, records */
	uint64_t raw_bytes, frame_bytes, stored_bytes;
	uint64_t runtime_ns;
	uint64_t allocs;        /* library allocations in the phase */
	uint64_t phase_batches; /* batches of all threads in the phase */
	/* net: write: frame bytes sent to each replica; failovers: workers
	 * dropped (write) or streams resumed at another replica (read) */
	uint64_t replica_bytes[USH_REPLICAS_MAX];
	uint64_t failovers;
	struct ush_lat handoff, clat;
};

/* Zeroed, with empty histograms. */
void dir_stats_init(struct dir_stats *d);

struct thread_result {
	struct dir_stats w, r;
	uint64_t usr_ns, sys_ns, wall_ns, ctx;
	uint64_t verified;      /* records checked */
	uint64_t verify_errors; /* mismatches this thread found */
	int err;                /* first error of this thread, 0 if none */
	int fixedbufs;          /* what the ring got: -1 no ring */
	unsigned setup_flags;
	int uring_refused;      /* 0, or why io_uring was refused (plain
				   system calls instead) */
};

struct job_result {
	const struct job_opts *o;
	uint32_t shuffle;
	unsigned nthreads;
	struct thread_result *t;
	struct verify_log vlog;
	bool verify_done;       /* every record was read back and checked */
	bool interrupted;
	bool ran;               /* the threads ran: there is a report */
	bool expired;           /* a read found its shuffle gone */
	/* how long a write's output lives and how to keep or drop it;
	 * "" if it keeps none */
	char lifetime[384];
	/* The shape the job used: its options, or a read's manifest. */
	uint32_t maps, partitions, rec_min, rec_max;
	int err;                /* first error, 0 if none */
	char errmsg[512];
	char warning[512];      /* what went wrong without failing the job */
	/* The job's options as it ran them: a read takes its target from
	 * the write job's manifest. o points here. */
	struct job_opts opts;
};

/* What a job prints while it runs (--eta, --eta-newline,
 * --status-interval); intervals in ns, 0: off. */
struct progress {
	int eta;
	uint64_t newline_ns, status_ns;
};

/* Runs one job to completion. Returns 0, EXIT_RUN or EXIT_INTR. */
int job_run(const struct job_opts *o, struct job_result *res,
	    const struct progress *p);
void job_result_free(struct job_result *res);

/* Shared state of one job's threads; write.c and read.c see it. */
struct job_ctx {
	const struct job_opts *o;
	struct job_result *res;
	struct rec_gen gen;
	uint32_t shuffle, maps, partitions;
	pthread_barrier_t bar;
	struct manifest expect;  /* per (map, partition) record counts */
	atomic_uint next_part;   /* read phase work queue */
	atomic_int failed;       /* a thread failed: the others stop */
	atomic_uint_fast64_t wbytes, rbytes; /* progress, for the ETA */
	atomic_uint threads_done;
	atomic_uint phase;       /* the last mark all threads passed, + 1 */
	uint64_t eta_t, eta_w, eta_r; /* the previous status line's */
	uint64_t t_start;        /* CLOCK_MONOTONIC ns */
	uint64_t alloc_at[4];    /* both libraries' alloc counts at the marks */
	atomic_uint parts_done;  /* partitions read to the end */
	/* reader errors, and those of them that found a map absent from
	 * its worker (USH_ENOTCOMMITTED): all absent, nothing read, and
	 * the shuffle has expired there or was dropped */
	atomic_uint reader_errors, absent;
	pthread_mutex_t lock;
	/* net: the workers the threads push to and fetch from: --workers,
	 * or the embedded worker this job started on loopback. */
	char workers[1024];
	ush_worker *embedded;
	char wdir[PATH_MAX + 32]; /* the embedded worker's storage */
	bool wdir_tmp;           /* removed when the job ends */
	/* --encrypt-key-file's keys: writers seal under the first, readers
	 * hold them all and require sealed maps; none: plain frames. */
	struct ush_seal_key keys[USH_SEAL_KEYS_MAX];
	uint32_t nkeys;
};

struct thread_ctx {
	struct job_ctx *job;
	unsigned index;
	struct thread_result *res;
	int cpu; /* to pin to, or -1 */
	const void *cpus; /* cpu_set_t to run in (--cpus_allowed), or NULL */
};

/* ------------------------------------------------------------- jobctx.c */

/* Set by SIGINT/SIGTERM; every loop polls it. */
extern atomic_int cli_stop;
void cli_signals(void);
uint64_t now_ns(void);
uint32_t job_shuffle_id(const char *name);
/* The thread should stop early (Ctrl-C, another thread failed). */
bool job_stopping(const struct job_ctx *j);
/* Parses fio's CPU list s ("0-3,8") into set (a cpu_set_t, or NULL to
 * check only). Returns 0, or -1 with *at where s stops being one. */
#define CPU_LIST_MAX 1024 /* CPU_SETSIZE */
int cpu_list(const char *s, void *set, const char **at);
/* Records this thread's first error and makes the others stop. */
void job_fail(struct thread_ctx *t, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Waits for every thread; the last to arrive notes the library's
 * allocation count as mark (0, 1: write start/end; 2, 3: read). */
void phase_barrier(struct thread_ctx *t, unsigned mark);

/* write.c and read.c: one phase of one thread. */
void write_phase(struct thread_ctx *t);
void read_phase(struct thread_ctx *t);

/* ---------------------------------------------------------------- eta.c */

enum eta_tick {
	ETA_REDRAW,  /* the status line on stderr, over the last one */
	ETA_NEWLINE, /* ... then a new line, so that a log keeps it */
	ETA_STATUS,  /* the status line as a line of its own */
	ETA_CLEAR,   /* clears it at the end */
};
/* Prints the status line. From the thread that runs the job. */
void eta_tick(struct job_ctx *j, enum eta_tick how);
/* "512MiB", "1.50GiB": 3 significant digits, binary units. */
void fmt_iec(char *buf, size_t n, double v);

/* ------------------------------------------------------ report.c, json.c */

/* Merged results of a set of threads (one job, or a group). */
struct agg {
	struct dir_stats w, r;
	uint64_t usr_ns, sys_ns, wall_ns, ctx, verified, verify_errors;
	unsigned threads;
};

void agg_threads(struct agg *a, const struct thread_result *t, unsigned n);
/* Adds n threads' results to a. */
void agg_add(struct agg *a, const struct thread_result *t, unsigned n);
double pct_cpu(uint64_t cpu_ns, uint64_t wall_ns);
/* Percentiles reported for every latency histogram, fio's list. */
extern const double report_pcts[];
extern const size_t report_npcts;
const char *verify_status(const struct job_result *r);

/* The lines fio prints before it starts: one per job, then a count. */
void report_describe(FILE *f, const struct job_list *l);
/* The causes of a failed job and its first mismatches, on stderr. */
void report_errors(const struct job_result *r);
/* What the error err of r's job (or of one of its threads) was, never
 * empty when err is not 0; "" when it is. */
const char *report_error_message(const struct job_result *r, int err);
void report_normal(FILE *f, const struct job_list *l,
		   const struct job_result *res, size_t njobs);
int report_json(FILE *f, const struct job_list *l,
		const struct job_result *res, size_t njobs);
/* fio's terse lines (terse.c). */
void report_terse(FILE *f, const struct job_list *l,
		  const struct job_result *res, size_t njobs);

#endif
