/* Small helpers shared by the benchmarks: clock, medians, arg parsing. */
#ifndef USH_BENCH_UTIL_H
#define USH_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median of v[0..n-1] (mean of the middle two for even n); sorts v. */
static inline double median(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	return n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline unsigned long bench_num(const char *prog, const char *s,
				      const char *opt)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (end == s || *end) {
		fprintf(stderr, "%s: bad %s '%s'\n", prog, opt, s);
		exit(1);
	}
	return v;
}

/* Parses "a,b,c" into at most max numbers; returns the count. */
static inline unsigned bench_list(const char *prog, const char *s,
				  const char *opt, size_t *out, unsigned max)
{
	unsigned n = 0;
	char buf[256], *save, *tok, *p = buf;
	snprintf(buf, sizeof(buf), "%s", s);
	while ((tok = strtok_r(p, ",", &save))) {
		p = NULL;
		if (n == max) {
			fprintf(stderr, "%s: at most %u values in %s\n", prog,
				max, opt);
			exit(1);
		}
		out[n++] = bench_num(prog, tok, opt);
	}
	return n;
}

#endif
