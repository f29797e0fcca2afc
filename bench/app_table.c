/*
 * The worker's application table alone (issue 22): the cost of looking
 * an application up, which every HELLO and heartbeat pays under the
 * worker's lock, with --apps applications known. Built from the worker's
 * sources, so the same program measures any version of src/worker/app.c
 * side by side with another.
 *
 *   ush_bench_app_table --apps=100000 --probe=100000
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/app.h"

#include <stdio.h>

#include "util.h"

#define PROG "ush_bench_app_table"

/* Mean nanoseconds of n lookups of prefix<from + i> (made if new). */
static double lookups(struct ush_worker *wk, const char *prefix,
		      unsigned from, unsigned n)
{
	char id[64];
	uint64_t t0 = now_ns();
	for (unsigned i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "%s%u", prefix, from + i);
		if (!wk_app_get(wk, id)) {
			fprintf(stderr, "%s: out of memory\n", PROG);
			exit(1);
		}
	}
	return n ? (double)(now_ns() - t0) / n : 0;
}

int main(int argc, char **argv)
{
	unsigned apps = 100000, probe = 10000;
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"apps", "N", "applications known (100000)", BENCH_UINT, &apps},
		{"probe", "N", "lookups timed of each kind (10000)", BENCH_COUNT,
		 &probe},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	static struct ush_worker wk;
	double first = lookups(&wk, "first", 0, probe);
	double mint = lookups(&wk, "app", 0, apps);
	printf("apps=%u insert_first_ns=%.0f mint_mean_ns=%.0f "
	       "insert_ns=%.0f known_ns=%.0f\n", apps, first, mint,
	       lookups(&wk, "late", 0, probe),
	       lookups(&wk, "app", apps > probe ? apps - probe : 0, probe));
	wk_app_free(&wk);
	return 0;
}
