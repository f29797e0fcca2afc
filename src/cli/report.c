/*
 * The normal report, laid out like fio's: per thread (or per job with
 * --group_reporting) a write and a read section with bandwidth, rates,
 * hand-off and completion latency with percentiles, bytes, allocations,
 * then CPU, ring and verify lines; a run-status summary per job.
 */
#include "cli.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

const double report_pcts[] = {1,  5,  10, 20, 30,   40,   50,    60,   70,
			      80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99};
const size_t report_npcts = sizeof(report_pcts) / sizeof(report_pcts[0]);

static void agg_dir(struct dir_stats *a, const struct dir_stats *d)
{
	a->bytes += d->bytes;
	a->records += d->records;
	a->batches += d->batches;
	a->raw_bytes += d->raw_bytes;
	a->frame_bytes += d->frame_bytes;
	a->stored_bytes += d->stored_bytes;
	for (unsigned k = 0; k < USH_REPLICAS_MAX; k++)
		a->replica_bytes[k] += d->replica_bytes[k];
	a->failovers += d->failovers;
	/* a group's rate: its bytes over its longest thread (fio's) */
	a->runtime_ns = d->runtime_ns > a->runtime_ns ? d->runtime_ns
						      : a->runtime_ns;
	a->allocs = d->allocs; /* process-wide per phase already */
	a->phase_batches = d->phase_batches;
	ush_lat_merge(&a->handoff, &d->handoff);
	ush_lat_merge(&a->clat, &d->clat);
}

void dir_stats_init(struct dir_stats *d)
{
	memset(d, 0, sizeof(*d));
	ush_lat_init(&d->handoff);
	ush_lat_init(&d->clat);
}

void agg_threads(struct agg *a, const struct thread_result *t, unsigned n)
{
	memset(a, 0, sizeof(*a));
	dir_stats_init(&a->w);
	dir_stats_init(&a->r);
	agg_add(a, t, n);
}

void agg_add(struct agg *a, const struct thread_result *t, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		agg_dir(&a->w, &t[i].w);
		agg_dir(&a->r, &t[i].r);
		a->usr_ns += t[i].usr_ns;
		a->sys_ns += t[i].sys_ns;
		a->wall_ns += t[i].wall_ns;
		a->ctx += t[i].ctx;
		a->verified += t[i].verified;
		a->verify_errors += t[i].verify_errors;
		a->threads++;
	}
}

double pct_cpu(uint64_t cpu_ns, uint64_t wall_ns)
{
	return wall_ns ? 100.0 * (double)cpu_ns / (double)wall_ns : 0;
}

const char *verify_status(const struct job_result *r)
{
	const struct job_opts *o = r->o;
	if (o->verify == VERIFY_NONE)
		return "off";
	if (r->expired)
		return "expired";
	if (atomic_load(&r->vlog.errors))
		return "failed";
	if (o->rw == RW_WRITE || o->target == TARGET_NULL)
		return "not-read";
	return r->verify_done ? "ok" : "partial";
}

/* "95.1k": fio's way with rates. */
static void fmt_count(char *buf, size_t n, double v)
{
	static const char sfx[] = " kMGT";
	unsigned u = 0;
	while (v >= 10000 && u < 4) {
		v /= 1000;
		u++;
	}
	if (!u)
		snprintf(buf, n, "%.0f", v);
	else
		snprintf(buf, n, "%.*f%c", v >= 100 ? 0 : 1, v, sfx[u]);
}

static void fmt_si(char *buf, size_t n, double v)
{
	static const char *const unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
	unsigned u = 0;
	while (v >= 1000 && u < 5) {
		v /= 1000;
		u++;
	}
	snprintf(buf, n, u && v < 100 ? "%.1f%s" : "%.0f%s", v, unit[u]);
}

static void print_lat(FILE *f, const char *what, const struct ush_lat *l)
{
	if (!l->count)
		return;
	/* the unit that shows the median with a few digits */
	double mean = ush_lat_mean(l), div = 1;
	double med = (double)ush_lat_percentile(l, 50);
	const char *unit = "nsec";
	if (med >= 10e6)
		div = 1e6, unit = "msec";
	else if (med >= 10e3)
		div = 1e3, unit = "usec";
	fprintf(f, "    %s (%s): min=%.0f, max=%.0f, avg=%.2f, stdev=%.2f, "
		"N=%llu\n", what, unit, (double)l->min_ns / div,
		(double)l->max_ns / div, mean / div, ush_lat_stdev(l) / div,
		(unsigned long long)l->count);
	uint64_t v[32];
	int w = 1;
	for (size_t i = 0; i < report_npcts; i++) {
		double p = (double)ush_lat_percentile(l, report_pcts[i]);
		v[i] = (uint64_t)(p / div + 0.5);
		int k = snprintf(NULL, 0, "%llu", (unsigned long long)v[i]);
		w = k > w ? k : w;
	}
	size_t row = w > 5 ? 3 : 4; /* stay within 80 columns */
	fprintf(f, "     %s percentiles (%s):", what, unit);
	for (size_t i = 0; i < report_npcts; i++)
		fprintf(f, "%s%5.2fth=[%*llu]%s", i % row ? " " : "\n     | ",
			report_pcts[i], w, (unsigned long long)v[i],
			i + 1 < report_npcts ? "," : "\n");
}

static void print_dir(FILE *f, const char *name, const struct dir_stats *d,
		      bool write)
{
	char bw[16], si[16], io[16], bps[16], rps[16], l[16], r[16], s[16];
	double secs = (double)d->runtime_ns / 1e9;
	if (!d->records && !d->batches)
		return;
	fmt_iec(bw, sizeof(bw), secs > 0 ? (double)d->bytes / secs : 0);
	fmt_si(si, sizeof(si), secs > 0 ? (double)d->bytes / secs : 0);
	fmt_iec(io, sizeof(io), (double)d->bytes);
	fmt_count(bps, sizeof(bps), secs > 0 ? (double)d->batches / secs : 0);
	fmt_count(rps, sizeof(rps), secs > 0 ? (double)d->records / secs : 0);
	fprintf(f, "  %s: batches/s=%s, records/s=%s, BW=%s/s (%s/s)"
		"(%s/%.0fmsec)\n", name, bps, rps, bw, si, io, secs * 1e3);
	print_lat(f, "handoff", &d->handoff);
	print_lat(f, "clat", &d->clat);
	fmt_iec(l, sizeof(l), (double)d->bytes);
	fmt_iec(r, sizeof(r), (double)d->raw_bytes);
	fmt_iec(s, sizeof(s), (double)d->stored_bytes);
	fprintf(f, "    bytes        : logical=%s, batches=%s, %s=%s "
		"(ratio %.2f:1)\n", l, r, write ? "stored" : "read", s,
		d->stored_bytes ? (double)d->bytes / (double)d->stored_bytes
				: 0.0);
	if (d->replica_bytes[1] || d->failovers) {
		char rb[USH_REPLICAS_MAX][32];
		for (unsigned k = 0; k < USH_REPLICAS_MAX; k++)
			fmt_iec(rb[k], sizeof(rb[k]),
				(double)d->replica_bytes[k]);
		if (write)
			fprintf(f, "    replicas     : sent=%s / %s / %s (first "
				"/ second / third), failovers=%llu\n", rb[0],
				rb[1], rb[2], (unsigned long long)d->failovers);
		else
			fprintf(f, "    replicas     : failovers=%llu\n",
				(unsigned long long)d->failovers);
	}
}

static void print_unit(FILE *f, const struct job_result *res, size_t gid,
		       const struct agg *a, const struct thread_result *t)
{
	const struct job_opts *o = res->o;
	time_t now = time(NULL);
	char date[64];
	strftime(date, sizeof(date), "%a %b %e %H:%M:%S %Y", localtime(&now));
	/* Each thread's block says whose it is (its index is its map id). */
	char who[192], loop[32] = "";
	if (o->loops > 1)
		snprintf(loop, sizeof(loop), " loop %d", o->loop);
	if (t)
		snprintf(who, sizeof(who), "%s%s thread %u", o->name, loop,
			 (unsigned)(t - res->t));
	else
		snprintf(who, sizeof(who), "%s%s", o->name, loop);
	int err = t ? t->err : res->err;
	/* fio's err= is a positive errno */
	fprintf(f, "%s: (groupid=%zu, jobs=%u): err=%2d: pid=%d: %s\n", who,
		gid, a->threads, err < 0 ? -err : err, (int)getpid(), date);
	print_dir(f, "write", &a->w, true);
	print_dir(f, "read", &a->r, false);
	fprintf(f, "  cpu          : usr=%.2f%%, sys=%.2f%%, ctx=%llu\n",
		pct_cpu(a->usr_ns, a->wall_ns), pct_cpu(a->sys_ns, a->wall_ns),
		(unsigned long long)a->ctx);
	const struct thread_result *tr = t ? t : &res->t[0];
	int fb = tr->fixedbufs;
	if (fb >= 0 && tr->uring_refused)
		fprintf(f, "  ring         : plain system calls (io_uring: "
			"%s)\n", ush_strerror(tr->uring_refused));
	else if (fb >= 0)
		fprintf(f, "  ring         : %s buffers, iodepth=%llu, "
			"setup flags=0x%x\n", fb ? "registered" : "plain",
			(unsigned long long)o->iodepth,
			t ? t->setup_flags : res->t[0].setup_flags);
	fprintf(f, "  verify       : %s: %llu records checked, %llu errors "
		"(%s)\n", choice_name(verify_choices, o->verify),
		(unsigned long long)a->verified,
		(unsigned long long)a->verify_errors, verify_status(res));
}

static void print_group(FILE *f, size_t gid, const struct agg *a)
{
	fprintf(f, "\nRun status group %zu (all jobs):\n", gid);
	const struct dir_stats *d[2] = {&a->w, &a->r};
	for (int i = 0; i < 2; i++) {
		char bw[16], si[16], io[16], iosi[16];
		double secs = (double)d[i]->runtime_ns / 1e9;
		if (!d[i]->records && !d[i]->batches)
			continue;
		double rate = secs > 0 ? (double)d[i]->bytes / secs : 0;
		fmt_iec(bw, sizeof(bw), rate);
		fmt_si(si, sizeof(si), rate);
		fmt_iec(io, sizeof(io), (double)d[i]->bytes);
		fmt_si(iosi, sizeof(iosi), (double)d[i]->bytes);
		fprintf(f, "  %5s: bw=%s/s (%s/s), io=%s (%s), run=%.0fmsec\n",
			i ? "READ" : "WRITE", bw, si, io, iosi, secs * 1e3);
	}
	/* The allocation count is process-wide: said once, per phase. */
	for (int i = 0; i < 2; i++)
		if (d[i]->phase_batches)
			fprintf(f, "  %5s: allocs/batch=%.3f (%llu library "
				"allocations in %llu batches, all threads)\n",
				i ? "READ" : "WRITE",
				(double)d[i]->allocs /
					(double)d[i]->phase_batches,
				(unsigned long long)d[i]->allocs,
				(unsigned long long)d[i]->phase_batches);
}

void report_describe(FILE *f, const struct job_list *l)
{
	char v[64];
	for (size_t i = 0; i < l->n; i++) {
		const struct job_opts *o = &l->jobs[i];
		if (o->loop) /* a further run of the job just described */
			continue;
		fprintf(f, "%s: (g=%u): rw=%s", o->name, l->group[i],
			choice_name(rw_choices, o->rw));
		static const char *const keys[] = {
			"bs", "partitions", "record-size", "codec", "target",
			"handoff", "ioengine", "iodepth", "verify"};
		/* A read job reads what the write job's manifest says: its
		 * shape is not this job's options. */
		struct manifest m;
		char err[512];
		bool man = o->rw == RW_READ &&
			   !manifest_load(&m, o, err, sizeof(err));
		if (man) {
			fprintf(f, ", maps=%u, partitions=%u, record-size=%u",
				m.maps, m.partitions, m.rec_min);
			if (m.rec_max != m.rec_min)
				fprintf(f, "-%u", m.rec_max);
			fprintf(f, ", target=%s (from the write job's "
				"manifest)", choice_name(target_choices,
							 manifest_target(&m)));
			manifest_free(&m);
		}
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			/* Reading makes no batches: bs, codec and handoff
			 * are the write job's business, and its shape came
			 * from the manifest above. */
			if (o->rw == RW_READ && (k < 4 || k == 5 ||
						 (man && k == 4)))
				continue;
			opt_format(opt_find(keys[k]), o, v, sizeof(v));
			fprintf(f, ", %s=%s", keys[k], v);
		}
		fputc('\n', f);
	}
	unsigned long threads = 0;
	for (size_t i = 0; i < l->n; i++) /* a job's loops reuse them */
		if (!l->jobs[i].loop)
			threads += (unsigned long)l->jobs[i].numjobs;
	fprintf(f, CLI_NAME "-" USH_VERSION_STRING "\nStarting %lu thread%s\n",
		threads, threads == 1 ? "" : "s");
}

/* Each job in its own blocks, then its group's run status: the jobs
 * that ran together (fio's stonewall groups). */
void report_normal(FILE *f, const struct job_list *l,
		   const struct job_result *res, size_t njobs)
{
	struct agg a, group;
	agg_threads(&group, NULL, 0);
	for (size_t k = 0; k < njobs; k++) {
		const struct job_result *r = &res[k];
		size_t g = l->group[k];
		if (r->ran && r->o->group_reporting) {
			agg_threads(&a, r->t, r->nthreads);
			print_unit(f, r, g, &a, NULL);
		}
		for (unsigned i = 0; r->ran && !r->o->group_reporting &&
				     i < r->nthreads; i++) {
			agg_threads(&a, &r->t[i], 1);
			print_unit(f, r, g, &a, &r->t[i]);
		}
		if (r->ran && r->lifetime[0])
			fprintf(f, "  output       : %s\n", r->lifetime);
		if (r->ran)
			agg_add(&group, r->t, r->nthreads);
		if (k + 1 < njobs && l->group[k + 1] == g)
			continue;
		if (group.threads)
			print_group(f, g, &group);
		agg_threads(&group, NULL, 0);
	}
}

const char *report_error_message(const struct job_result *r, int err)
{
	if (!err)
		return "";
	if (r->errmsg[0])
		return r->errmsg;
	/* A reader's error is told by the verify log (read.c). */
	return r->vlog.nfirst ? r->vlog.first[0] : ush_strerror(err);
}

void report_errors(const struct job_result *r)
{
	const char *job = r->o->name;
	if (r->err && r->errmsg[0])
		fprintf(stderr, CLI_NAME ": job '%s': %s\n", job, r->errmsg);
	uint64_t errors = atomic_load(&r->vlog.errors);
	for (unsigned i = 0; i < r->vlog.nfirst; i++)
		fprintf(stderr, CLI_NAME ": job '%s': verify: %s\n", job,
			r->vlog.first[i]);
	if (errors) {
		uint64_t checked = 0;
		for (unsigned i = 0; r->t && i < r->nthreads; i++)
			checked += r->t[i].verified;
		fprintf(stderr, CLI_NAME ": job '%s': verify failed: %llu "
			"errors, %llu records checked\n", job,
			(unsigned long long)errors,
			(unsigned long long)checked);
	}
	if (r->interrupted)
		fprintf(stderr, CLI_NAME ": job '%s': interrupted; the report "
			"is partial\n", job);
	/* Last: the first line of a failed job names its failure. */
	/* A failed job's error is its story: a cleanup that failed the
	 * same way (a drop to the worker that refused it) is not said
	 * twice; the JSON report keeps it. */
	if (r->warning[0] && !r->err && !errors)
		fprintf(stderr, CLI_NAME ": warning: job '%s': %s\n", job,
			r->warning);
}
