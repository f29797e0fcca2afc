/*
 * Helpers of the tests that run workers (tests/test_net_*.c and a few
 * more): real ushuffled processes on loopback, embedded workers, raw
 * protocol connections, pushes and verified reads of deterministic
 * records. Compiled once into the test helper library (net_helpers.c).
 */
#ifndef USH_TEST_NET_HELPERS_H
#define USH_TEST_NET_HELPERS_H

#define _GNU_SOURCE
#include "helpers.h"
#include "net/auth.h"
#include "net/mac.h"
#include "net/proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Replaces pid old (0: none) by pid (0: none) among the workers killed
 * when the test exits: a failed assertion skips its teardown. */
void th_track(pid_t old, pid_t pid);

struct th_worker {
	pid_t pid;
	int port;
	char dir[512];
	char addr[64];
	char ns[32]; /* network namespace to run in, or "" */
	const char *extra; /* one more ushuffled option, or NULL */
	unsigned nofile;   /* RLIMIT_NOFILE (soft and hard) to run under, or
			      0: unchanged */
	const char *errlog; /* file its stderr goes to (appended), or NULL:
			       the test's */
	const char *more[4]; /* further options, up to the first NULL */
	void (*child_setup)(void); /* called in the child before exec */
};

/* Starts ushuffled on host:port (port 0: any) over dir; waits for its
 * "ushuffled: port N" line. With ns set, runs it in that namespace. */
void th_worker_spawn(struct th_worker *w, const char *host, int port,
		     unsigned threads);
/* th_worker_spawn() on loopback over a fresh th_tmpdir(tag), with
 * threads threads and up to two more options (extra, more; NULL: none);
 * *w is reset first. */
void th_worker_fresh(struct th_worker *w, const char *tag, unsigned threads,
		     const char *extra, const char *more);
/* Runs ushuffled with args (NULL-terminated, at most 14) to its end:
 * its exit status, and its stdout and stderr in out and err (freed by
 * the caller). */
int th_ushuffled_run(const char *const *args, char **out, char **err);
/* SIGTERM; asserts a clean exit 0. */
void th_worker_stop(struct th_worker *w);
void th_worker_kill(struct th_worker *w);
/* Starts a killed worker again on its loopback port, over its dir. A
 * SIGKILLed worker's listener can outlive it briefly (its ring's
 * requests are torn down after the exit): waits, 10 s at most, until a
 * plain bind would take the port. */
void th_worker_restart(struct th_worker *w, unsigned threads);
/* n workers of one thread each on loopback, each over a th_tmpdir(tag),
 * their "HOST:PORT,..." list into list (len bytes); stopped, their
 * directories removed, by th_workers_stop(). */
void th_workers_spawn(struct th_worker *wk, unsigned n, const char *tag,
		      char *list, size_t len);
void th_workers_stop(struct th_worker *wk, unsigned n);
/* Partition p's holder mask in map status st (a version 2 status: one
 * written with replicas). */
uint64_t th_status_holders(const struct ush_status *st, uint32_t p);
/* SIGSTOP, and waits until the worker is stopped: kill() returns
 * before the signal takes effect, and a worker that is still running
 * may answer a connection made meanwhile. SIGCONT resumes it. */
void th_worker_sigstop(struct th_worker *w);
/* Is the worker process still running? */
int th_worker_alive(struct th_worker *w);

/* A worker embedded in this process, as the CLI runs it: threads
 * threads over dir with pool bytes of registered memory each (0: the
 * default), listening on addr if it is set (a restart where statuses
 * point), else on loopback at any port, written into addr. Free it with
 * ush_worker_free(). */
ush_worker *th_worker_embed_pool(const char *dir, unsigned threads,
				 size_t pool, char *addr, size_t n);
ush_worker *th_worker_embed(const char *dir, unsigned threads, char *addr,
			    size_t n);

/* A TCP connection to port on loopback. Every wait on it has a 30 s
 * deadline, far beyond any limit a test sets: a worker that never acts
 * fails the test. */
int th_tcp_connect(int port);
/* th_tcp_connect() for tests that speak the protocol by hand (its MAC,
 * th_mac(), starts empty). Internal tests only (net_helpers_int.c). */
int th_raw_connect(int port);
/* A socket listening on loopback at a port of its own, written into
 * *port: a fake worker's or a proxy's. */
int th_listen(int *port);
void th_send_all(int fd, const void *p, size_t n);
/* recv() of exactly n bytes: 0, or -1 at EOF or a reset. */
int th_recv_n(int fd, uint8_t *b, size_t n);
/* Reads one whole frame (at most cap bytes) from a raw connection into
 * buf; returns its type, or -1 at EOF or a reset. After th_try_hello()
 * the worker's control frames are opened with the connection's MACs (a
 * tag that fails fails the test): *f's lengths then leave out the tag. */
int th_recv_frame(int fd, uint8_t *buf, size_t cap, struct ushi_frame *f);
/* The MACs of raw connection fd: keyed by th_try_hello(), off before
 * (or for a connection that proved no secret). */
struct ushi_mac *th_mac(int fd);
/* Seals, with fd's MACs, each control frame of the whole frames that
 * fill b (n bytes, with USHI_MAC_TAG bytes of room behind for each),
 * moving what follows; returns the new length. */
size_t th_seal(int fd, uint8_t *b, size_t n);
/* th_send_all() of th_seal()'s frames: how the library sends. */
void th_send_ctrl(int fd, uint8_t *b, size_t n);
/* Opens a frame of fd's (mac_open(), its header parsed into f) read by
 * the test's own parser; fails the test when its tag does not check. */
void th_open(int fd, const uint8_t *frame, struct ushi_frame *f);
/* A fake worker's MACs after a handshake it proved with secret (the
 * client's HELLO frame hello, the fake's nonce nw): 0, or an error.
 * Cmocka-free: fakes run in threads of their own. */
int th_worker_mac(struct ushi_mac *m, const char *secret,
		  const uint8_t *hello, const uint8_t *nw);
/* Says HELLO h on a raw connection as the library does: with a fresh
 * nonce, it reads the worker's challenge, checks the worker's proof of
 * secret (TH_SECRET unless given) and answers with its own. The worker's
 * answer to that (its HELLO, or an ERROR) is left for the caller.
 * Returns 0, or -1 when an ERROR (its message in msg) or the end came in
 * place of the challenge. */
int th_try_hello(int fd, struct proto_hello h, const char *secret,
		 char *msg, size_t n);
/* th_try_hello() that must reach the challenge. */
void th_hello_secret(int fd, struct proto_hello h, const char *secret);
void th_hello(int fd, struct proto_hello h);

/* Record i of map m into buf (1024 bytes): 8 bytes of (m, i), then
 * bytes from th_fill; returns its length. */
size_t th_rec(uint8_t *buf, uint32_t m, uint32_t i);
/* Writes records of map 0 over 8 partitions until a write fails (a
 * stalled or dead worker), counting them in *records; returns the
 * failure. */
int th_push_until_error(ush_writer *w, atomic_ulong *records);

struct th_job {
	const char *workers;
	uint32_t shuffle, partitions, maps, records;
	enum ush_codec codec;
	uint32_t timeout_ms;
	int send_zc;
	enum ush_ioengine ioengine;
	const char *app; /* the application writing (NULL: "default") */
	uint32_t replicas; /* 0: the default (1) */
	/* Seals the maps under it, and th_verify() requires it, if set. */
	const struct ush_seal_key *seal_key;
	/* Called, if set, after each record written (map m, record i) and
	 * after each record th_verify() checked (n so far): a test's hook
	 * to act at a point of the push or the fetch. */
	void (*pushed)(const struct th_job *j, uint32_t m, uint32_t i);
	void (*checked)(const struct th_job *j, uint64_t n);
	/* th_verify() reads ranges of this many partitions with one reader
	 * each (ush_reader_opts.npartitions; 0: one partition a reader). */
	uint32_t range;
	/* If set, th_verify() adds its readers' failovers and duplicate
	 * batches dropped here. */
	struct ush_reader_stats *rsum;
	/* The map statuses, one per map (maps of them, zeroed at first):
	 * th_push_map() stores a copy of each commit's status at its map,
	 * replacing any earlier one; th_verify() reads them; free them with
	 * th_job_free(). Each job needs an array of its own. */
	struct ush_status *statuses;
};

void th_job_free(struct th_job *j);
/* Pushes map m (attempt a) of job; returns commit's result. A committed
 * map's status goes to j->statuses[m] (if j->statuses). Cmocka-free: may
 * run in a thread of its own. */
int th_push_map(const struct th_job *j, uint32_t m, uint32_t a,
		struct ush_writer_stats *st);
/* Reads every partition back with the job's statuses (j->range
 * partitions a reader) and checks each record exactly once, in its
 * partition, partition after partition. */
void th_verify(const struct th_job *j);
/* A one-record DATA frame of shuffle s, map 0, attempt 0, partition 0,
 * seq, into b; returns its size, *crc its CRC. */
size_t th_rec_frame(uint8_t *b, uint32_t s, uint64_t seq, const char *r,
		    uint32_t *crc);

#endif
