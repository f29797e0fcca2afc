/*
 * fio's terse report (--output-format=terse, --minimal), version 3: one
 * line of ';'-separated fields per report unit, in fio's order, so that
 * scripts written for fio's terse output find each figure in its place.
 * Read status comes first, then write, as in fio. Where ushuffle has a
 * figure of that meaning it is there: "submission latency" is the
 * hand-off, "completion latency" the frame's completion; what it does
 * not measure (total latency, bandwidth samples, I/O depth and latency
 * distributions, faults) is 0. docs/cli.md lists the mapping.
 */
#include "cli.h"

#include <string.h>

#define TERSE_PCTS 20 /* fio's FIO_IO_U_LIST_MAX_LEN */

static void lat_fields(FILE *f, const struct ush_lat *l)
{
	fprintf(f, ";%llu;%llu;%f;%f",
		(unsigned long long)(l->count ? l->min_ns / 1000 : 0),
		(unsigned long long)(l->max_ns / 1000), ush_lat_mean(l) / 1e3,
		ush_lat_stdev(l) / 1e3);
}

static void dir_fields(FILE *f, const struct dir_stats *d)
{
	double secs = (double)d->runtime_ns / 1e9;
	unsigned long long bw = secs > 0 ? (unsigned long long)(
					(double)d->bytes / 1024 / secs) : 0;
	fprintf(f, ";%llu;%llu;%llu;%llu", (unsigned long long)d->bytes >> 10,
		bw, secs > 0 ? (unsigned long long)((double)d->batches / secs)
			     : 0ull,
		(unsigned long long)(d->runtime_ns / 1000000));
	lat_fields(f, &d->handoff);
	lat_fields(f, &d->clat);
	for (size_t i = 0; i < TERSE_PCTS; i++) {
		if (i < report_npcts && d->clat.count)
			fprintf(f, ";%f%%=%llu", report_pcts[i],
				(unsigned long long)(ush_lat_percentile(
					&d->clat, report_pcts[i]) / 1000));
		else
			fprintf(f, ";0%%=0");
	}
	fprintf(f, ";0;0;0.000000;0.000000");  /* total latency */
	fprintf(f, ";%llu;%llu;%f%%;%f;%f", bw, bw, bw ? 100.0 : 0.0,
		(double)bw, 0.0);
}

static void unit_line(FILE *f, const struct job_result *r, unsigned gid,
		      const struct agg *a, int err)
{
	fprintf(f, "3;" CLI_NAME "-" USH_VERSION_STRING ";%s;%u;%d", r->o->name,
		gid, err);
	dir_fields(f, &a->r);
	dir_fields(f, &a->w);
	fprintf(f, ";%f%%;%f%%;%llu;0;0", pct_cpu(a->usr_ns, a->wall_ns),
		pct_cpu(a->sys_ns, a->wall_ns), (unsigned long long)a->ctx);
	for (int i = 0; i < 7 + 10 + 12; i++) /* depths, latency buckets */
		fprintf(f, ";0.0%%");
	fputc('\n', f);
}

void report_terse(FILE *f, const struct job_list *l,
		  const struct job_result *res, size_t njobs)
{
	struct agg a;
	for (size_t k = 0; k < njobs; k++) {
		const struct job_result *r = &res[k];
		if (!r->ran || r->o->group_reporting) {
			agg_threads(&a, r->t, r->ran ? r->nthreads : 0);
			unit_line(f, r, l->group[k], &a, r->err);
			continue;
		}
		for (unsigned i = 0; i < r->nthreads; i++) {
			agg_threads(&a, &r->t[i], 1);
			unit_line(f, r, l->group[k], &a, r->t[i].err);
		}
	}
}
