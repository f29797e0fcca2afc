/*
 * The read-back phase of one thread: ranges of partitions come from a
 * shared counter, each is read over every map with one range reader
 * (ush_reader_opts.npartitions), partition after partition, and, with
 * --verify=crc32c, every record is checked (verify.c) and each map's
 * record count compared with what the writer committed.
 *
 * A reader error (a frame whose CRC fails, a missing index) is described
 * with the library's message, which names the file and offset, counts as
 * a verify error and fails the run; the other partitions are still read,
 * unless it is a refused authentication (-EACCES), which every partition
 * would meet alike: then the job stops there.
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_RECORDS 4096 /* poll time and Ctrl-C this often */

static void reader_error(struct thread_ctx *t, uint32_t part, int err)
{
	struct job_result *res = t->job->res;
	atomic_fetch_add(&t->job->reader_errors, 1);
	if (err == USH_ENOTCOMMITTED)
		atomic_fetch_add(&t->job->absent, 1);
	atomic_fetch_add(&res->vlog.errors, 1);
	t->res->verify_errors++;
	verify_log_add(&res->vlog, "partition %u: %s", part, ush_last_error());
	if (!t->res->err)
		t->res->err = err;
	pthread_mutex_lock(&t->job->lock);
	if (!res->err)
		res->err = err; /* described by the verify log */
	pthread_mutex_unlock(&t->job->lock);
}

static void count_error(struct thread_ctx *t, uint64_t got, uint64_t want,
			const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void count_error(struct thread_ctx *t, uint64_t got, uint64_t want,
			const char *fmt, ...)
{
	struct job_ctx *j = t->job;
	uint64_t diff = got > want ? got - want : want - got;
	char what[96];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&j->res->vlog.errors, diff);
	t->res->verify_errors += diff;
	verify_log_add(&j->res->vlog, "%s: %llu records, expected %llu "
		       "(%llu %s)", what, (unsigned long long)got,
		       (unsigned long long)want, (unsigned long long)diff,
		       got > want ? "extra" : "missing");
}

/*
 * After a partition was read to its end: every map's record count. A
 * record that failed its check cannot be trusted to name its map, so then
 * only the partition's total is compared (bad records count as present:
 * they were described already).
 */
static void check_counts(struct thread_ctx *t, const struct part_check *c)
{
	struct job_ctx *j = t->job;
	if (c->bad) {
		uint64_t got = c->bad, want = 0;
		for (uint32_t m = 0; m < j->maps; m++) {
			got += c->count[m];
			want += j->expect.records[(size_t)m * j->partitions +
						  c->part];
		}
		if (got != want)
			count_error(t, got, want, "partition %u (%llu bad)",
				    c->part, (unsigned long long)c->bad);
		return;
	}
	for (uint32_t m = 0; m < j->maps; m++) {
		uint64_t want = j->expect.records[(size_t)m * j->partitions +
						  c->part];
		if (c->count[m] != want)
			count_error(t, c->count[m], want, "partition %u map %u",
				    c->part, m);
	}
}

/* Partition c->part was read to its end: counted, and its records per
 * map checked. The next one's counts start at zero. */
static void part_done(struct thread_ctx *t, struct part_check *c)
{
	struct job_ctx *j = t->job;
	atomic_fetch_add(&j->parts_done, 1);
	if (j->o->verify == VERIFY_CRC32C)
		check_counts(t, c);
	c->part++;
	c->bad = 0;
	memset(c->count, 0, 2 * j->maps * sizeof(*c->count));
}

static void add_stats(struct dir_stats *d, ush_reader *r)
{
	struct ush_reader_stats st;
	ush_reader_stats(r, &st);
	d->batches += st.batches;
	d->raw_bytes += st.raw_bytes;
	d->frame_bytes += st.stored_bytes;
	d->stored_bytes += st.stored_bytes;
	d->failovers += st.failovers;
	ush_lat_merge(&d->clat, ush_reader_load_lat(r));
}

/*
 * Reads partitions [*first, end) with one range reader; the records of
 * each come whole before the next's, so a partition is checked when the
 * reader moves past it (one without records included). Returns 1 when
 * the phase should end, 0 when the range was read, or -1 after a reader
 * error: *first is then the partition after the one that failed.
 */
static int read_range(struct thread_ctx *t, uint32_t *first, uint32_t end,
		      uint64_t *count, uint64_t deadline)
{
	struct job_ctx *j = t->job;
	const struct job_opts *o = j->o;
	struct dir_stats *d = &t->res->r;
	struct ush_reader_opts ro = {.size = sizeof(ro), .partition = *first,
		.npartitions = end - *first,
		.statuses = j->expect.status, .nstatuses = j->maps,
		.seal_keys = j->keys, .nseal_keys = j->nkeys,
		.require_sealed = j->nkeys > 0};
	struct part_check c = {.g = &j->gen, .part = *first, .maps = j->maps,
			       .count = count, .next = count + j->maps};
	ush_reader *r = NULL;
	const void *rec;
	size_t len;
	bool go_on = true;
	uint64_t n = 0, bytes = 0;
	memset(count, 0, 2 * j->maps * sizeof(*count));
	int ret = ush_reader_open(&r, &ro);
	while (!ret && (ret = ush_reader_next(r, &rec, &len)) == 1) {
		for (uint32_t p = ush_reader_partition(r); c.part < p;)
			part_done(t, &c);
		n++;
		bytes += len;
		if (o->verify == VERIFY_CRC32C && rec_check(&c, &j->res->vlog,
							    rec, len))
			t->res->verify_errors++;
		if (n % CHECK_RECORDS == 0) {
			atomic_fetch_add(&j->rbytes, bytes);
			d->bytes += bytes;
			bytes = 0;
			if (job_stopping(j) || now_ns() >= deadline) {
				go_on = false;
				break;
			}
		}
		ret = 0;
	}
	atomic_fetch_add(&j->rbytes, bytes);
	d->bytes += bytes;
	d->records += n;
	if (o->verify == VERIFY_CRC32C)
		t->res->verified += n;
	if (ret < 0) {
		/* The partitions before it were checked whole. */
		uint32_t bad = r ? ush_reader_partition(r) : *first;
		while (c.part < bad)
			part_done(t, &c);
		/* Refused authentication (a secret the worker does not hold,
		 * a shuffle of another application): every partition would
		 * be refused alike, so the job stops at the first. */
		if (ret == -EACCES) {
			job_fail(t, ret, "read: partition %u: %s (stopped at the "
				 "first authentication error)", bad,
				 ush_last_error());
			go_on = false;
		}
		reader_error(t, bad, ret);
		*first = bad + 1;
	}
	if (ret == 0 && go_on)
		while (c.part < end)
			part_done(t, &c);
	if (r) {
		add_stats(d, r);
		ush_reader_free(r);
	}
	return !go_on ? 1 : ret < 0 ? -1 : 0;
}

/* Partitions per range reader: one range for one thread (each range
 * starts with a round trip and the worker's planning), about four per
 * thread for several, so that they end together; each within one
 * request's entries. */
static uint32_t range_len(const struct job_ctx *j)
{
	uint64_t threads = j->o->numjobs ? j->o->numjobs : 1;
	uint64_t n = j->partitions / (threads > 1 ? 4 * threads : 1);
	uint64_t max = USH_READER_RANGE_MAX / (j->maps ? j->maps : 1);
	n = n < max ? n : max;
	return n ? (uint32_t)n : 1;
}

void read_phase(struct thread_ctx *t)
{
	struct job_ctx *j = t->job;
	const struct job_opts *o = j->o;
	uint64_t *count = calloc(2 * (size_t)j->maps, sizeof(*count));
	if (!count)
		job_fail(t, -ENOMEM, "read: out of memory");
	phase_barrier(t, 2);
	uint64_t t0 = now_ns();
	/* --runtime bounds the writing in a shuffle; a read job's reading */
	uint64_t deadline = o->rw == RW_READ && o->runtime_ms
				    ? t0 + o->runtime_ms * 1000000
				    : UINT64_MAX;
	bool loop = o->rw == RW_READ && o->time_based;
	/* The shared counter hands out ranges: k is the k-th range. */
	uint32_t len = range_len(j);
	uint32_t ranges = (j->partitions - 1) / len + 1;
	while (count && !job_stopping(j) && now_ns() < deadline) {
		unsigned k = atomic_fetch_add(&j->next_part, 1);
		if (k >= ranges && !loop)
			break;
		uint32_t first = k % ranges * len;
		uint32_t end = j->partitions - first > len ? first + len :
							      j->partitions;
		int ret;
		while ((ret = read_range(t, &first, end, count, deadline)) < 0 &&
		       first < end)
			;
		if (ret > 0)
			break;
	}
	t->res->r.runtime_ns = now_ns() - t0;
	phase_barrier(t, 3);
	free(count);
}
