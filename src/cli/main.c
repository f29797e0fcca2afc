/*
 * ushuffle [options] [jobfile ...]: parse, run the jobs as fio does (those
 * of one stonewall group at the same time, the groups one after another),
 * then report. See docs/cli.md.
 */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The library warns per ring (e.g. a refused buffer registration); with
 * a ring per thread, say each thing once. */
static void log_once(void *arg, const char *msg)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static char seen[8][256];
	static unsigned n;
	(void)arg;
	pthread_mutex_lock(&lock);
	bool dup = false;
	for (unsigned i = 0; i < n && !dup; i++)
		dup = !strncmp(seen[i], msg, sizeof(seen[i]) - 1);
	if (!dup) {
		if (n < 8)
			snprintf(seen[n++], sizeof(seen[0]), "%s", msg);
		fprintf(stderr, CLI_NAME ": warning: %s\n", msg);
	}
	pthread_mutex_unlock(&lock);
}

/* A job and its further loops (--loops), run one after another. */
struct runner {
	const struct job_opts *o;
	struct job_result *res;
	size_t n;
	struct progress p;
	int ret;
};

static void *run_one(void *arg)
{
	struct runner *r = arg;
	for (size_t i = 0; i < r->n; i++) {
		int ret = job_run(&r->o[i], &r->res[i], &r->p);
		r->ret = ret > r->ret ? ret : r->ret;
	}
	return NULL;
}

/* Runs the n jobs at o at the same time, a thread each (a job's loops
 * on one), with SIGINT and SIGTERM blocked there: the main thread takes
 * them. The status line follows the first job. Returns the worst exit
 * status. */
static int run_group(const struct job_opts *o, struct job_result *res,
		     size_t n, const struct progress *p)
{
	struct runner *r = calloc(n, sizeof(*r));
	pthread_t *tid = calloc(n, sizeof(*tid));
	bool *started = calloc(n, sizeof(*started));
	sigset_t block, old;
	int worst = 0;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	size_t nr = 0; /* runners */
	for (size_t i = 0; r && tid && started && i < n; i += r[nr++].n) {
		size_t loops = (size_t)o[i].loops;
		r[nr] = (struct runner){&o[i], &res[i], loops, *p, 0};
		r[nr].p.eta = p->eta && !i;
		started[nr] = loops < n && !pthread_create(&tid[nr], NULL,
							    run_one, &r[nr]);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	for (size_t i = 0; r && tid && started && i < nr; i++) {
		if (started[i])
			pthread_join(tid[i], NULL);
		else /* alone, or no thread to be had: here */
			run_one(&r[i]);
		worst = r[i].ret > worst ? r[i].ret : worst;
	}
	if (!r || !tid || !started) {
		fprintf(stderr, CLI_NAME ": out of memory\n");
		worst = EXIT_RUN;
	}
	free(r);
	free(tid);
	free(started);
	return worst;
}

/* Heartbeats this often while holding: well within any sensible
 * --app-ttl of the workers. */
#define HOLD_BEAT_NS 1000000000ull

/*
 * --hold: after the report, heartbeat for each job that asked, until its
 * time is up or Ctrl-C, so that its workers keep its output (they drop an
 * application's shuffles once it is silent for their --app-ttl).
 */
static void hold_outputs(const struct job_result *res, size_t n)
{
	uint64_t t0 = now_ns(), until = t0, next = t0;
	bool warned = false;
	for (size_t i = 0; i < n; i++) {
		const struct job_opts *o = res[i].o;
		if (!o->hold_ms || !res[i].ran || res[i].err)
			continue;
		fprintf(stderr, CLI_NAME ": job '%s': holding its output on "
			"%s for %llu s (heartbeats for application '%s'); "
			"Ctrl-C ends the hold, and the workers then keep it "
			"their --app-ttl longer\n", o->name, o->workers,
			(unsigned long long)(o->hold_ms / 1000), o->app);
		uint64_t end = t0 + o->hold_ms * 1000000;
		until = end > until ? end : until;
	}
	while (now_ns() < until && !atomic_load(&cli_stop)) {
		if (now_ns() >= next) {
			next += HOLD_BEAT_NS;
			for (size_t i = 0; i < n; i++) {
				const struct job_opts *o = res[i].o;
				if (!o->hold_ms || !res[i].ran || res[i].err ||
				    now_ns() >= t0 + o->hold_ms * 1000000 ||
				    !ush_app_heartbeat(o->workers, o->app,
						       2000) ||
				    warned)
					continue;
				fprintf(stderr, CLI_NAME ": warning: job '%s': "
					"heartbeat while holding: %s\n",
					o->name, ush_last_error());
				warned = true;
			}
		}
		nanosleep(&(struct timespec){0, 50000000}, NULL);
	}
}

int main(int argc, char **argv)
{
	struct job_list l;
	int status = cli_parse(argc, argv, &l);
	if (status || !l.n || l.global.parse_only) {
		job_list_free(&l);
		return status;
	}
	FILE *out = stdout;
	if (strcmp(l.global.output, "-") &&
	    !(out = fopen(l.global.output, "w"))) {
		fprintf(stderr, CLI_NAME ": --output=%s: cannot open: %s; "
			"accepted: a writable file, or - for standard output\n",
			l.global.output, strerror(errno));
		job_list_free(&l);
		return EXIT_USAGE;
	}
	ush_set_log(log_once, NULL);
	ush_worker_set_log(log_once, NULL); /* the embedded worker */
	cli_signals();
	struct progress p = {
		.eta = l.global.eta == ETA_ALWAYS ||
		       (l.global.eta == ETA_AUTO && isatty(STDERR_FILENO)),
		.newline_ns = l.global.eta_newline_ms * 1000000,
		.status_ns = l.global.status_interval_ms * 1000000};
	int fmt = l.global.output_format;
	if (fmt & OUT_NORMAL) {
		report_describe(out, &l);
		fflush(out);
	}
	struct job_result *res = calloc(l.n, sizeof(*res));
	size_t ran = 0;
	while (res && ran < l.n && status != EXIT_INTR) {
		size_t n = 1;
		while (ran + n < l.n && l.group[ran + n] == l.group[ran])
			n++;
		int ret = run_group(&l.jobs[ran], &res[ran], n, &p);
		ran += n;
		status = ret > status ? ret : status;
	}
	if (!res) {
		fprintf(stderr, CLI_NAME ": out of memory\n");
		status = EXIT_RUN;
	} else { /* in fio's order, whatever the list's */
		if (fmt & OUT_NORMAL)
			report_normal(out, &l, res, ran);
		if (fmt & OUT_TERSE)
			report_terse(out, &l, res, ran);
		if ((fmt & (OUT_JSON | OUT_JSON_PLUS)) &&
		    report_json(out, &l, res, ran))
			status = EXIT_RUN;
	}
	if (out != stdout ? fclose(out) : fflush(out)) {
		fprintf(stderr, CLI_NAME ": --output=%s: writing the report: "
			"%s\n", l.global.output, strerror(errno));
		status = status ? status : EXIT_RUN;
	}
	/* after the report, in job order: a later group's error never
	 * comes before an earlier group's report */
	for (size_t i = 0; res && i < ran; i++)
		report_errors(&res[i]);
	if (res && status != EXIT_INTR)
		hold_outputs(res, ran);
	for (size_t i = 0; i < ran; i++)
		job_result_free(&res[i]);
	free(res);
	job_list_free(&l);
	return status;
}
