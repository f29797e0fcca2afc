/*
 * Time to open one partition of a committed shuffle (issue 11): the
 * ush_reader_open() of --opens partitions spread evenly over the
 * shuffle, the time from it to the first record, and the read to the
 * end, timed apart. Opening should cost
 * the same at 64 and at 100,000 partitions (an index lookup, not a
 * scan of the whole index), on the disk target and from a worker.
 *
 * It reads the shuffle an `ushuffle --rw=write` job left: the job's
 * manifest (DIR/s<id>/ushuffle-job.json) names the partition count and
 * every map's status, which say where the data is (a directory or the
 * workers), so one program times both targets.
 *
 *   ushuffle --name=o --rw=write --partitions=100000 --dir=/var/tmp/o
 *   ush_bench_open_part --manifest=/var/tmp/o/s<id>/ushuffle-job.json --json
 */
#define _GNU_SOURCE
#include <ushuffle/ushuffle.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PROG "ush_bench_open_part"

/* The whole file, NUL-terminated; NULL with a message on failure. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "%s: %s: %s\n", PROG, path, strerror(errno));
		return NULL;
	}
	size_t cap = 1 << 16, len = 0, n;
	char *b = malloc(cap);
	while (b && (n = fread(b + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 == cap) {
			char *nb = realloc(b, cap *= 2);
			if (!nb)
				free(b);
			b = nb;
		}
	}
	fclose(f);
	if (!b) {
		fprintf(stderr, "%s: %s: out of memory\n", PROG, path);
		return NULL;
	}
	b[len] = 0;
	return b;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * The manifest's "partitions" and "map_statuses" (hex strings), decoded
 * in place into st[0..*n-1]: a manifest is the CLI's own flat JSON, so a
 * key search is enough here (the CLI validates it on its reads).
 */
static int parse_manifest(char *m, const char *path, uint32_t *parts,
			  struct ush_status **st, uint32_t *n)
{
	char *p = strstr(m, "\"partitions\":");
	char *s = strstr(m, "\"map_statuses\":[");
	if (!p || !s) {
		fprintf(stderr, "%s: %s: no \"partitions\" or \"map_statuses\""
			" (not an ushuffle-job.json?)\n", PROG, path);
		return -1;
	}
	*parts = (uint32_t)strtoul(p + strlen("\"partitions\":"), NULL, 10);
	s += strlen("\"map_statuses\":[");
	uint32_t cap = 0;
	*n = 0;
	*st = NULL;
	while (*s == '"') {
		char *h = ++s, *e = strchr(h, '"');
		if (!e || (e - h) % 2) {
			fprintf(stderr, "%s: %s: map status %u is not hex\n",
				PROG, path, *n);
			return -1;
		}
		size_t len = (size_t)(e - h) / 2;
		uint8_t *out = (uint8_t *)h; /* decodes over itself */
		for (size_t i = 0; i < len; i++) {
			int a = hexval(h[2 * i]), b = hexval(h[2 * i + 1]);
			if (a < 0 || b < 0) {
				fprintf(stderr, "%s: %s: map status %u is not "
					"hex\n", PROG, path, *n);
				return -1;
			}
			out[i] = (uint8_t)(a << 4 | b);
		}
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			struct ush_status *ns = realloc(*st, cap * sizeof(**st));
			if (!ns)
				return fprintf(stderr, "%s: out of memory\n",
					       PROG), -1;
			*st = ns;
		}
		(*st)[(*n)++] = (struct ush_status){out, len};
		s = e + 1;
		if (*s == ',')
			s++;
	}
	if (!*n || !*parts) {
		fprintf(stderr, "%s: %s: no map statuses or no partitions\n",
			PROG, path);
		return -1;
	}
	return 0;
}

/* What one partition's open and read cost, and what it held. */
struct sample {
	uint32_t partition;
	uint64_t records, frame_bytes;
	double open_us, first_us, read_us;
};

/* Opens partition p over st[0..n-1], reads it to its end and times
 * both into *s; 0, or 1 with the library's message on stderr. */
static int time_one(const struct ush_status *st, uint32_t n, uint32_t p,
		    struct sample *s)
{
	struct ush_reader_opts ro;
	ush_reader_opts_init(&ro);
	ro.partition = p;
	ro.statuses = st;
	ro.nstatuses = n;
	ush_reader *r;
	const void *rec;
	size_t len;
	*s = (struct sample){.partition = p};
	uint64_t t0 = now_ns();
	int ret = ush_reader_open(&r, &ro);
	uint64_t t1 = now_ns();
	if (ret) {
		fprintf(stderr, "%s: partition %u: %s\n", PROG, p,
			ush_last_error());
		return 1;
	}
	/* A reader may defer its index work to the first next(): the time
	 * to the first record (or the end) is what a reducer waits before
	 * data, whichever call pays it. */
	uint64_t tf = 0;
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		if (!s->records++)
			tf = now_ns();
	}
	uint64_t t2 = now_ns();
	if (ret) {
		fprintf(stderr, "%s: partition %u: %s\n", PROG, p,
			ush_last_error());
		ush_reader_free(r);
		return 1;
	}
	struct ush_reader_stats rs;
	ush_reader_stats(r, &rs);
	ush_reader_free(r);
	s->frame_bytes = rs.stored_bytes;
	s->open_us = (double)(t1 - t0) / 1e3;
	s->first_us = (double)((tf ? tf : t2) - t0) / 1e3;
	s->read_us = (double)(t2 - t1) / 1e3;
	return 0;
}

static void print_list(const char *key, const struct sample *s, unsigned n,
		       size_t off)
{
	printf(", \"%s\": [", key);
	for (unsigned i = 0; i < n; i++)
		printf("%s%.1f", i ? ", " : "",
		       *(const double *)((const char *)&s[i] + off));
	printf("]");
}

/* Median of field off (a double) of s[0..n-1], and its largest into *max. */
static double med_of(const struct sample *s, unsigned n, size_t off,
		     double *v, double *max)
{
	for (unsigned i = 0; i < n; i++)
		v[i] = *(const double *)((const char *)&s[i] + off);
	double m = median(v, n);
	*max = v[n - 1];
	return m;
}

static void report(const struct sample *s, unsigned n, uint32_t parts,
		   uint32_t maps, bool json, double *v)
{
	uint64_t bytes = 0;
	for (unsigned i = 0; i < n; i++)
		bytes += s[i].frame_bytes;
	double omax, fmax, rmax;
	double o50 = med_of(s, n, offsetof(struct sample, open_us), v, &omax);
	double f50 = med_of(s, n, offsetof(struct sample, first_us), v, &fmax);
	double r50 = med_of(s, n, offsetof(struct sample, read_us), v, &rmax);
	if (!json) {
		printf("%u of %u partitions opened: open median %.1f us (max "
		       "%.1f us), to the first record %.1f us (max %.1f us), "
		       "read to the end median %.1f us\n", n, parts, o50, omax,
		       f50, fmax, r50);
		return;
	}
	printf("{\"bench\": \"open_part\", \"partitions\": %u, \"maps\": %u, "
	       "\"opens\": %u, \"opened\": [", parts, maps, n);
	for (unsigned i = 0; i < n; i++)
		printf("%s[%u, %llu]", i ? ", " : "", s[i].partition,
		       (unsigned long long)s[i].records);
	printf("]");
	print_list("open_us", s, n, offsetof(struct sample, open_us));
	print_list("first_us", s, n, offsetof(struct sample, first_us));
	printf(", \"frame_bytes\": %llu, \"open_us_median\": %.1f, "
	       "\"open_us_max\": %.1f, \"first_us_median\": %.1f, "
	       "\"first_us_max\": %.1f, \"read_us_median\": %.1f}\n",
	       (unsigned long long)bytes, o50, omax, f50, fmax, r50);
}

int main(int argc, char **argv)
{
	const char *manifest = NULL;
	unsigned opens = 40;
	bool json = false;
	static const struct bench_cmd cmd = {PROG, NULL, NULL};
	const struct bench_opt opts[] = {
		{"manifest", "PATH", "the write job's ushuffle-job.json "
		 "(required)", BENCH_STR, &manifest},
		{"opens", "N", "partitions to open, spread evenly (default 40)",
		 BENCH_COUNT, &opens},
		{"json", NULL, "one JSON object on stdout", BENCH_FLAG, &json},
		{0},
	};
	bench_parse(argc, argv, &cmd, opts);
	if (!manifest)
		bench_bad(PROG, "--manifest is required");
	int rc = 1;
	struct ush_status *st = NULL;
	struct sample *s = NULL;
	double *v = NULL;
	uint32_t parts, nst;
	char *m = slurp(manifest);
	if (!m || parse_manifest(m, manifest, &parts, &st, &nst))
		goto out;
	if (opens > parts)
		opens = parts;
	s = calloc(opens, sizeof(*s));
	v = calloc(opens, sizeof(*v));
	if (!s || !v) {
		fprintf(stderr, "%s: out of memory\n", PROG);
		goto out;
	}
	for (unsigned i = 0; i < opens; i++) {
		/* Evenly spread, the first one in the middle of its stride. */
		uint32_t p = (uint32_t)(((2ull * i + 1) * parts) /
					(2ull * opens));
		if (time_one(st, nst, p, &s[i]))
			goto out;
	}
	report(s, opens, parts, nst, json, v);
	rc = 0;
out:
	free(v);
	free(s);
	free(st);
	free(m);
	return rc;
}
