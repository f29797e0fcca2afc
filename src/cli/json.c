/*
 * The JSON report (json-c) in fio's schema (--output-format=json, fio
 * 3.x), so fio's tools read it: every fio field is here, zero where
 * ushuffle measures nothing of the kind (trim, sync, total latency, I/O
 * depths), and ushuffle's own fields beside them (records, bytes by
 * stage, hand-off latency, verify). iops = batches per second.
 * docs/cli.md lists every field.
 */
#include "cli.h"

#include <json-c/json.h>
#include <math.h>
#include <string.h>
#include <time.h>

static json_object *jdouble(double v)
{
	char buf[64];
	if (!isfinite(v))
		v = 0;
	snprintf(buf, sizeof(buf), "%.6f", v);
	return json_object_new_double_s(v, buf);
}

static void add(json_object *o, const char *key, json_object *v)
{
	json_object_object_add(o, key, v);
}

static void add_u64(json_object *o, const char *key, uint64_t v)
{
	add(o, key, json_object_new_uint64(v));
}

/* The value bucket b of a histogram stands for: a histogram of one
 * sample in b, asked for its maximum, says so through the public API. */
static uint64_t bucket_value(unsigned b)
{
	struct ush_lat one;
	ush_lat_init(&one);
	one.bucket[b] = one.count = 1;
	one.min_ns = 0;
	one.max_ns = UINT64_MAX;
	return ush_lat_percentile(&one, 100);
}

/* json+: fio's "bins", each histogram bucket's value (ns) and count. */
static json_object *bins_json(const struct ush_lat *l)
{
	json_object *o = json_object_new_object();
	char key[32];
	for (unsigned b = 0; b < USH_LAT_BUCKETS; b++) {
		if (!l->bucket[b])
			continue;
		snprintf(key, sizeof(key), "%llu",
			 (unsigned long long)bucket_value(b));
		add_u64(o, key, l->bucket[b]);
	}
	return o;
}

static json_object *lat_json(const struct ush_lat *l, bool plus)
{
	json_object *o = json_object_new_object();
	add_u64(o, "min", l->count ? l->min_ns : 0);
	add_u64(o, "max", l->max_ns);
	add(o, "mean", jdouble(ush_lat_mean(l)));
	add(o, "stddev", jdouble(ush_lat_stdev(l)));
	add_u64(o, "N", l->count);
	if (l->count) {
		json_object *p = json_object_new_object();
		char key[32];
		for (size_t i = 0; i < report_npcts; i++) {
			snprintf(key, sizeof(key), "%f", report_pcts[i]);
			add_u64(p, key, ush_lat_percentile(l, report_pcts[i]));
		}
		add(o, "percentile", p);
	}
	if (plus && l->count) /* as fio: no bins without samples */
		add(o, "bins", bins_json(l));
	return o;
}

/* fio's latency object for what is not measured here: zeros, N 0. */
static json_object *lat_none(void)
{
	struct ush_lat none;
	ush_lat_init(&none);
	return lat_json(&none, false);
}

/* fio's bandwidth and IOPS sample statistics: ushuffle takes no samples
 * in time, so the one it has is the whole run's (as in the terse line). */
static void samples_json(json_object *o, double bw_kib, double iops)
{
	add_u64(o, "bw_min", (uint64_t)bw_kib);
	add_u64(o, "bw_max", (uint64_t)bw_kib);
	add(o, "bw_agg", jdouble(bw_kib > 0 ? 100 : 0));
	add(o, "bw_mean", jdouble(bw_kib));
	add(o, "bw_dev", jdouble(0));
	add_u64(o, "bw_samples", bw_kib > 0);
	add(o, "iops_min", json_object_new_int64((int64_t)iops));
	add(o, "iops_max", json_object_new_int64((int64_t)iops));
	add(o, "iops_mean", jdouble(iops));
	add(o, "iops_stddev", jdouble(0));
	add_u64(o, "iops_samples", iops > 0);
}

static json_object *dir_json(const struct dir_stats *d, bool plus)
{
	json_object *o = json_object_new_object();
	double secs = (double)d->runtime_ns / 1e9;
	double per_s = secs > 0 ? 1 / secs : 0;
	add_u64(o, "io_bytes", d->bytes);
	add_u64(o, "io_kbytes", d->bytes >> 10);
	add_u64(o, "bw_bytes", (uint64_t)((double)d->bytes * per_s));
	add_u64(o, "bw", (uint64_t)((double)d->bytes * per_s / 1024));
	add(o, "iops", jdouble((double)d->batches * per_s));
	add_u64(o, "runtime", d->runtime_ns / 1000000);
	add_u64(o, "total_ios", d->batches);
	add_u64(o, "short_ios", 0);
	add_u64(o, "drop_ios", 0);
	/* fio's: submission = the hand-off, completion, total (not
	 * measured per batch here) */
	add(o, "slat_ns", lat_json(&d->handoff, plus));
	add(o, "clat_ns", lat_json(&d->clat, plus));
	add(o, "lat_ns", lat_none());
	samples_json(o, (double)d->bytes * per_s / 1024,
		     (double)d->batches * per_s);
	add_u64(o, "records", d->records);
	add(o, "records_per_sec", jdouble((double)d->records * per_s));
	add_u64(o, "raw_bytes", d->raw_bytes);
	add_u64(o, "frame_bytes", d->frame_bytes);
	add_u64(o, "stored_bytes", d->stored_bytes);
	add(o, "compression_ratio",
	    jdouble(d->stored_bytes ? (double)d->bytes /
					      (double)d->stored_bytes : 0));
	json_object *rb = json_object_new_array();
	for (unsigned k = 0; k < USH_REPLICAS_MAX; k++)
		json_object_array_add(rb, json_object_new_int64(
						  (int64_t)d->replica_bytes[k]));
	add(o, "replica_bytes", rb);
	add_u64(o, "failovers", d->failovers);
	add_u64(o, "allocs", d->allocs);
	add(o, "allocs_per_batch",
	    jdouble(d->phase_batches ? (double)d->allocs /
					       (double)d->phase_batches : 0));
	add(o, "handoff_ns", lat_json(&d->handoff, plus));
	return o;
}

/* fio's directions that a shuffle has not: trim and sync, all zero. */
static void fio_only_dirs(json_object *o)
{
	struct dir_stats none;
	memset(&none, 0, sizeof(none));
	dir_stats_init(&none);
	add(o, "trim", dir_json(&none, false));
	json_object *sync = json_object_new_object();
	add_u64(sync, "total_ios", 0);
	add(sync, "lat_ns", lat_none());
	add(o, "sync", sync);
}

/* fio's distributions, keyed as fio keys them: zero, not measured. */
static json_object *zero_map(const char *const *keys)
{
	json_object *o = json_object_new_object();
	for (; *keys; keys++)
		add(o, *keys, jdouble(0));
	return o;
}

static void fio_distributions(json_object *o, const struct job_opts *j)
{
	static const char *const depth[] = {"1", "2", "4", "8", "16", "32",
					    ">=64", NULL};
	static const char *const sub[] = {"0", "4", "8", "16", "32", "64",
					  ">=64", NULL};
	static const char *const ns[] = {"2", "4", "10", "20", "50", "100",
					 "250", "500", "750", "1000", NULL};
	static const char *const ms[] = {"2", "4", "10", "20", "50", "100",
					 "250", "500", "750", "1000", "2000",
					 ">=2000", NULL};
	add_u64(o, "majf", 0);
	add_u64(o, "minf", 0);
	add(o, "iodepth_level", zero_map(depth));
	add(o, "iodepth_submit", zero_map(sub));
	add(o, "iodepth_complete", zero_map(sub));
	add(o, "latency_ns", zero_map(ns));
	add(o, "latency_us", zero_map(ns));
	add(o, "latency_ms", zero_map(ms));
	add_u64(o, "latency_depth", j->iodepth);
	add_u64(o, "latency_target", 0);
	add(o, "latency_percentile", jdouble(100));
	add_u64(o, "latency_window", 0);
}

/* Every option's effective value; with own, fio's "job options": only
 * those the job's section or its --name part set. */
static json_object *options_json(const struct job_opts *j, bool own)
{
	json_object *o = json_object_new_object();
	char v[PATH_MAX];
	for (size_t i = 0; i < cli_nopts; i++) {
		if ((cli_opts[i].flags & OPT_GLOBAL) ||
		    (own && !(j->given & (1ull << i))))
			continue;
		opt_format(&cli_opts[i], j, v, sizeof(v));
		add(o, cli_opts[i].name, json_object_new_string(v));
	}
	return o;
}

static json_object *unit_json(const struct job_result *r, size_t gid,
			      const struct agg *a,
			      const struct thread_result *t, bool plus)
{
	json_object *o = json_object_new_object();
	add(o, "jobname", json_object_new_string(r->o->name));
	add_u64(o, "groupid", gid);
	if (r->o->loops > 1)
		add_u64(o, "loop", (uint64_t)r->o->loop);
	add_u64(o, "threads", a->threads);
	if (t)
		add_u64(o, "thread", (uint64_t)(t - r->t));
	int err = t ? t->err : r->err;
	uint64_t wall = t ? t->wall_ns : a->wall_ns;
	/* fio's error is a positive errno; a library code's name beside */
	add(o, "error", json_object_new_int(err < 0 ? -err : err));
	add(o, "error_name", json_object_new_string(err ? ush_err_name(err)
							: ""));
	add(o, "error_message",
	    json_object_new_string(report_error_message(r, err)));
	add_u64(o, "eta", 0);
	add_u64(o, "elapsed", (wall + 999999999) / 1000000000);
	add_u64(o, "job_runtime", wall / 1000000);
	if (r->warning[0])
		add(o, "warning", json_object_new_string(r->warning));
	add(o, "interrupted", json_object_new_boolean(r->interrupted));
	if (r->lifetime[0])
		add(o, "output_lifetime", json_object_new_string(r->lifetime));
	add(o, "job options", options_json(r->o, true));
	add(o, "effective options", options_json(r->o, false));
	/* What it used: a read job's shape is its manifest's. */
	json_object *shape = json_object_new_object();
	add_u64(shape, "maps", r->maps);
	add_u64(shape, "partitions", r->partitions);
	add_u64(shape, "record_size_min", r->rec_min);
	add_u64(shape, "record_size_max", r->rec_max);
	add(o, "shape", shape);
	add(o, "write", dir_json(&a->w, plus));
	add(o, "read", dir_json(&a->r, plus));
	fio_only_dirs(o);
	add(o, "usr_cpu", jdouble(pct_cpu(a->usr_ns, a->wall_ns)));
	add(o, "sys_cpu", jdouble(pct_cpu(a->sys_ns, a->wall_ns)));
	add_u64(o, "ctx", a->ctx);
	fio_distributions(o, r->o);
	int fb = (t ? t : r->t)->fixedbufs;
	json_object *ring = json_object_new_object();
	add(ring, "fixedbufs", json_object_new_int(fb));
	add_u64(ring, "setup_flags", (t ? t : r->t)->setup_flags);
	add(ring, "uring_refused", json_object_new_int((t ? t : r->t)->uring_refused));
	add(o, "ring", ring);
	json_object *v = json_object_new_object();
	add(v, "mode", json_object_new_string(
			       choice_name(verify_choices, r->o->verify)));
	add_u64(v, "records", a->verified);
	add_u64(v, "errors", a->verify_errors);
	add(v, "status", json_object_new_string(verify_status(r)));
	json_object *first = json_object_new_array();
	for (unsigned i = 0; i < r->vlog.nfirst; i++)
		json_object_array_add(first,
				      json_object_new_string(r->vlog.first[i]));
	add(v, "first_errors", first);
	add(o, "verify", v);
	return o;
}

int report_json(FILE *f, const struct job_list *l,
		const struct job_result *res, size_t njobs)
{
	json_object *top = json_object_new_object(), *jobs, *given;
	bool plus = l->global.output_format & OUT_JSON_PLUS;
	time_t now = time(NULL);
	char date[64];
	strftime(date, sizeof(date), "%a %b %e %H:%M:%S %Y", localtime(&now));
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	/* fio's key, naming the program that wrote it */
	add(top, "fio version",
	    json_object_new_string(CLI_NAME "-" USH_VERSION_STRING));
	add(top, "ushuffle version",
	    json_object_new_string(CLI_NAME "-" USH_VERSION_STRING));
	add(top, "timestamp", json_object_new_int64((int64_t)now));
	add(top, "timestamp_ms", json_object_new_int64(
			(int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000));
	add(top, "time", json_object_new_string(date));
	given = json_object_new_object();
	for (size_t i = 0; i < l->ngiven; i++) /* before the first --name */
		if (l->given[i].job < 0)
			add(given, l->given[i].o->name,
			    json_object_new_string(l->given[i].value));
	add(top, "global options", given);
	jobs = json_object_new_array();
	struct agg a;
	for (size_t g = 0; g < njobs; g++) {
		const struct job_result *r = &res[g];
		if (!r->ran) { /* failed before its threads started */
			json_object *o = json_object_new_object();
			add(o, "jobname", json_object_new_string(r->o->name));
			add_u64(o, "groupid", l->group[g]);
			add(o, "error", json_object_new_int(
					r->err < 0 ? -r->err : r->err));
			add(o, "error_name", json_object_new_string(
					ush_err_name(r->err)));
			add(o, "error_message", json_object_new_string(
					report_error_message(r, r->err)));
			json_object_array_add(jobs, o);
			continue;
		}
		if (r->o->group_reporting) {
			agg_threads(&a, r->t, r->nthreads);
			json_object_array_add(jobs, unit_json(r, l->group[g],
							      &a, NULL, plus));
			continue;
		}
		for (unsigned i = 0; i < r->nthreads; i++) {
			agg_threads(&a, &r->t[i], 1);
			json_object_array_add(jobs, unit_json(r, l->group[g],
							      &a, &r->t[i],
							      plus));
		}
	}
	add(top, "jobs", jobs);
	add(top, "disk_util", json_object_new_array()); /* not measured */
	const char *s = json_object_to_json_string_ext(
		top, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
			     JSON_C_TO_STRING_NOSLASHESCAPE);
	int ret = fputs(s, f) < 0 || fputc('\n', f) == EOF ? -1 : 0;
	json_object_put(top);
	return ret;
}
