/* Small helpers shared by the benchmarks: clock, medians, options. */
#ifndef USH_BENCH_UTIL_H
#define USH_BENCH_UTIL_H

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
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

/*
 * Command-line options. A bench declares each of its options once, in a
 * table ended by {0}, and bench_parse() does the rest: --NAME=ARG, --NAME
 * ARG and unambiguous abbreviations of NAME (getopt_long), --help, and an
 * exit status of 2, with a message naming the option and its value, on
 * anything it cannot take. Checks that only the bench knows (ranges, sizes
 * that must be powers of two) stay in the bench and end in bench_bad().
 */
enum bench_kind {
	BENCH_FLAG,   /* bool, set by --NAME */
	BENCH_UINT,   /* unsigned */
	BENCH_COUNT,  /* unsigned, at least 1 */
	BENCH_SIZE,   /* size_t */
	BENCH_INT,    /* int, may be negative */
	BENCH_STR,    /* const char *: the argument as given */
	BENCH_CHOICE, /* unsigned: index of the argument in arg, "a|b|c" */
	BENCH_LIST,   /* struct bench_list: "a,b,c" */
};

struct bench_opt {
	const char *name; /* --NAME */
	const char *arg;  /* its argument in --help; NULL for a flag */
	const char *help; /* a '\n' continues it on an indented line */
	enum bench_kind kind;
	void *dst;
};

/* Where a BENCH_LIST puts its numbers: v[0..*n-1], at most max. */
struct bench_list {
	size_t *v;
	unsigned *n, max;
};

struct bench_cmd {
	const char *prog;     /* names the bench in its messages */
	const char *operands; /* after [options] in the usage line; NULL
				 if it takes none */
	const char *tail;     /* --help text after the options, or NULL */
};

#define BENCH_MAX_OPTS 16

/* "prog: message", then exit 2: the command line asked for something
 * the bench cannot do. */
__attribute__((format(printf, 2, 3))) static inline _Noreturn void
bench_bad(const char *prog, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static inline void bench_usage(FILE *f, const struct bench_cmd *cmd,
			       const struct bench_opt *o)
{
	fprintf(f, "usage: %s [options]%s%s\n", cmd->prog,
		cmd->operands ? " " : "", cmd->operands ? cmd->operands : "");
	for (; o->name; o++) {
		char lhs[64];
		snprintf(lhs, sizeof(lhs), "--%s%s%s", o->name,
			 o->arg ? "=" : "", o->arg ? o->arg : "");
		if (strlen(lhs) > 18) /* help on the next line */
			fprintf(f, "  %s\n%21s", lhs, "");
		else
			fprintf(f, "  %-18s ", lhs);
		for (const char *h = o->help; *h; h++) {
			fputc(*h, f);
			if (*h == '\n')
				fprintf(f, "%21s", "");
		}
		fputc('\n', f);
	}
	if (cmd->tail)
		fprintf(f, "%s\n", cmd->tail);
}

/* The number in s (all of it, decimal) for --NAME=val; exits 2 if it is
 * none or does not lie in min..max. */
static inline long long bench_number(const char *prog, const char *name,
				     const char *val, const char *s,
				     long long min, long long max)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end || (s[0] != '-' && (s[0] < '0' || s[0] > '9')))
		bench_bad(prog, "--%s=%s: '%s' is not a whole number", name,
			  val, s);
	if (errno || v < min || v > max)
		bench_bad(prog, "--%s=%s: %s is not in %lld..%lld", name, val,
			  s, min, max);
	return v;
}

static inline void bench_set(const char *prog, const struct bench_opt *o,
			     char *val)
{
	switch (o->kind) {
	case BENCH_FLAG:
		*(bool *)o->dst = true;
		break;
	case BENCH_UINT:
	case BENCH_COUNT:
		*(unsigned *)o->dst = (unsigned)bench_number(prog, o->name, val,
			val, o->kind == BENCH_COUNT, UINT_MAX);
		break;
	case BENCH_SIZE:
		*(size_t *)o->dst = (size_t)bench_number(prog, o->name, val,
							 val, 0, LLONG_MAX);
		break;
	case BENCH_INT:
		*(int *)o->dst = (int)bench_number(prog, o->name, val, val,
						   INT_MIN, INT_MAX);
		break;
	case BENCH_STR:
		*(const char **)o->dst = val;
		break;
	case BENCH_CHOICE: {
		size_t n, len = strlen(val);
		const char *c = o->arg;
		for (unsigned i = 0;; c += n + 1, i++) {
			n = strcspn(c, "|");
			if (n == len && !strncmp(c, val, n)) {
				*(unsigned *)o->dst = i;
				return;
			}
			if (!c[n])
				break;
		}
		bench_bad(prog, "--%s=%s: not one of %s", o->name, val, o->arg);
	}
	case BENCH_LIST: {
		const struct bench_list *l = o->dst;
		char buf[256], *save, *tok, *p = buf;
		if (strlen(val) >= sizeof(buf)) /* never cut a number */
			bench_bad(prog, "--%s: a list of %zu characters, "
				  "at most %zu", o->name, strlen(val),
				  sizeof(buf) - 1);
		memcpy(buf, val, strlen(val) + 1);
		*l->n = 0;
		while ((tok = strtok_r(p, ",", &save))) {
			p = NULL;
			if (*l->n == l->max)
				bench_bad(prog, "--%s=%s: more than %u values",
					  o->name, val, l->max);
			l->v[(*l->n)++] = (size_t)bench_number(
				prog, o->name, val, tok, 0, LLONG_MAX);
		}
		if (!*l->n)
			bench_bad(prog, "--%s=%s: no values", o->name, val);
		break;
	}
	}
}

/* Sets what opts point to from argv; returns the index of the first
 * operand (there are none unless cmd->operands says so). */
static inline int bench_parse(int argc, char **argv,
			      const struct bench_cmd *cmd,
			      const struct bench_opt *opts)
{
	struct option lo[BENCH_MAX_OPTS + 2] = {{0}}; /* and help, {0} */
	int n = 0, ch, i;
	for (; opts[n].name; n++) {
		if (n == BENCH_MAX_OPTS)
			bench_bad(cmd->prog, "more than %d options",
				  BENCH_MAX_OPTS);
		lo[n] = (struct option){opts[n].name,
					opts[n].arg ? required_argument
						    : no_argument, NULL, 0};
	}
	lo[n] = (struct option){"help", no_argument, NULL, 'h'};
	while ((ch = getopt_long(argc, argv, "h", lo, &i)) != -1) {
		if (ch == 'h') {
			bench_usage(stdout, cmd, opts);
			exit(0);
		}
		if (ch) { /* getopt_long said what is wrong */
			bench_usage(stderr, cmd, opts);
			exit(2);
		}
		bench_set(cmd->prog, &opts[i], optarg);
	}
	if (optind < argc && !cmd->operands)
		bench_bad(cmd->prog, "unexpected argument '%s'", argv[optind]);
	return optind;
}

#endif
