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
	char *m = slurp(manifest);
	struct ush_status *st = NULL;
	uint32_t parts, nst;
	if (!m || parse_manifest(m, manifest, &parts, &st, &nst))
		return 1;
	if (opens > parts)
		opens = parts;
	double *open_us = calloc(opens, sizeof(double));
	double *read_us = calloc(opens, sizeof(double));
	double *first_us = calloc(opens, sizeof(double));
	uint32_t *pv = calloc(opens, sizeof(uint32_t));
	uint64_t *recs = calloc(opens, sizeof(uint64_t));
	uint64_t bytes = 0;
	if (!open_us || !read_us || !first_us || !pv || !recs)
		return fprintf(stderr, "%s: out of memory\n", PROG), 1;
	for (unsigned i = 0; i < opens; i++) {
		/* Evenly spread, the first one in the middle of its stride. */
		uint32_t p = (uint32_t)(((2ull * i + 1) * parts) / (2ull * opens));
		struct ush_reader_opts ro;
		ush_reader_opts_init(&ro);
		ro.partition = p;
		ro.statuses = st;
		ro.nstatuses = nst;
		ush_reader *r;
		const void *rec;
		size_t len;
		uint64_t t0 = now_ns();
		int ret = ush_reader_open(&r, &ro);
		uint64_t t1 = now_ns();
		if (ret) {
			fprintf(stderr, "%s: partition %u: %s\n", PROG, p,
				ush_last_error());
			return 1;
		}
		/* A reader may defer its index work to the first next():
		 * the time to the first record (or the end) is what a
		 * reducer waits before data, whichever call pays it. */
		uint64_t tf = 0;
		while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
			if (!recs[i]++)
				tf = now_ns();
		}
		uint64_t t2 = now_ns();
		if (!tf)
			tf = t2;
		if (ret) {
			fprintf(stderr, "%s: partition %u: %s\n", PROG, p,
				ush_last_error());
			ush_reader_free(r);
			return 1;
		}
		struct ush_reader_stats rs;
		ush_reader_stats(r, &rs);
		bytes += rs.stored_bytes;
		ush_reader_free(r);
		pv[i] = p;
		open_us[i] = (double)(t1 - t0) / 1e3;
		read_us[i] = (double)(t2 - t1) / 1e3;
		first_us[i] = (double)(tf - t0) / 1e3;
	}
	if (json) {
		printf("{\"bench\": \"open_part\", \"partitions\": %u, "
		       "\"maps\": %u, \"opens\": %u, \"opened\": [", parts,
		       nst, opens);
		for (unsigned i = 0; i < opens; i++)
			printf("%s[%u, %llu]", i ? ", " : "", pv[i],
			       (unsigned long long)recs[i]);
		printf("], \"open_us\": [");
		for (unsigned i = 0; i < opens; i++)
			printf("%s%.1f", i ? ", " : "", open_us[i]);
		printf("], \"first_us\": [");
		for (unsigned i = 0; i < opens; i++)
			printf("%s%.1f", i ? ", " : "", first_us[i]);
		printf("], \"frame_bytes\": %llu, ",
		       (unsigned long long)bytes);
	}
	double o50 = median(open_us, opens), r50 = median(read_us, opens);
	double omax = open_us[opens - 1];
	double f50 = median(first_us, opens), fmax = first_us[opens - 1];
	if (json)
		printf("\"open_us_median\": %.1f, \"open_us_max\": %.1f, "
		       "\"first_us_median\": %.1f, \"first_us_max\": %.1f, "
		       "\"read_us_median\": %.1f}\n", o50, omax, f50, fmax,
		       r50);
	else
		printf("%u of %u partitions opened: open median %.1f us (max "
		       "%.1f us), to the first record %.1f us (max %.1f us), "
		       "read to the end median %.1f us\n", opens, parts, o50,
		       omax, f50, fmax, r50);
	free(m);
	free(st);
	free(open_us);
	free(read_us);
	free(first_us);
	free(pv);
	free(recs);
	return 0;
}
