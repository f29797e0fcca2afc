/*
 * ushuffle [options] [jobfile ...]: parse, run each job in turn (like
 * fio's stonewall: a job file's sections are A/B runs, not rivals for the
 * same cores), then report. See docs/cli.md.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv)
{
	struct job_list l;
	int status = cli_parse(argc, argv, &l);
	if (status || !l.n)
		return status;
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
	int eta = l.global.eta == ETA_ALWAYS ||
		  (l.global.eta == ETA_AUTO && isatty(STDERR_FILENO));
	bool json = l.global.output_format == OUT_JSON;
	if (!json) {
		report_describe(out, &l);
		fflush(out);
	}
	struct job_result *res = calloc(l.n, sizeof(*res));
	size_t ran = 0;
	for (size_t i = 0; res && i < l.n; i++) {
		int ret = job_run(&l.jobs[i], &res[ran++], eta);
		report_errors(&res[ran - 1]);
		if (ret > status)
			status = ret;
		if (ret == EXIT_INTR)
			break;
	}
	if (!res) {
		fprintf(stderr, CLI_NAME ": out of memory\n");
		status = EXIT_RUN;
	} else if (json) {
		if (report_json(out, &l, res, ran))
			status = EXIT_RUN;
	} else {
		report_normal(out, res, ran);
	}
	if (out != stdout ? fclose(out) : fflush(out)) {
		fprintf(stderr, CLI_NAME ": --output=%s: writing the report: "
			"%s\n", l.global.output, strerror(errno));
		status = status ? status : EXIT_RUN;
	}
	for (size_t i = 0; i < ran; i++)
		job_result_free(&res[i]);
	free(res);
	job_list_free(&l);
	return status;
}
