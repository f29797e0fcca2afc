/*
 * The option table: every option is declared once, with its type, field,
 * default and help. Parsing (command line and job files), defaults and
 * --help are all driven from it, like fio's options[].
 */
#include "cli.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define F(field) offsetof(struct job_opts, field), \
	sizeof(((struct job_opts *)0)->field)
#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)
#define TIB (1024ull * GIB)

const struct opt_choice rw_choices[] = {
	{"write", RW_WRITE}, {"read", RW_READ}, {"shuffle", RW_SHUFFLE}, {0}};
const struct opt_choice target_choices[] = {
	{"null", TARGET_NULL}, {"disk", TARGET_DISK}, {"net", TARGET_NET}, {0}};
static const struct opt_choice handoff_choices[] = {
	{"swap", HANDOFF_SWAP}, {"copy", HANDOFF_COPY}, {0}};
static const struct opt_choice ioengine_choices[] = {
	{"io_uring", USH_IOENGINE_URING}, {"psync", USH_IOENGINE_PSYNC}, {0}};
const struct opt_choice verify_choices[] = {
	{"crc32c", VERIFY_CRC32C}, {"none", VERIFY_NONE},
	{"0", VERIFY_NONE}, {0}}; /* fio's verify=0 is off */
static const struct opt_choice fixedbufs_choices[] = {
	{"0", 0}, {"1", 1}, {"auto", -1}, {0}};
static const struct opt_choice format_choices[] = {
	{"normal", OUT_NORMAL}, {"json", OUT_JSON}, {"json+", OUT_JSON_PLUS},
	{"terse", OUT_TERSE}, {0}};
static const struct opt_choice unlink_choices[] = {
	{"0", 0}, {"1", 1}, {"auto", -1}, {0}};
static const struct opt_choice eta_choices[] = {
	{"auto", ETA_AUTO}, {"always", ETA_ALWAYS}, {"never", ETA_NEVER}, {0}};

const struct opt cli_opts[] = {
	{"name", T_STR, F(name), "ushuffle", "starts a job, as in fio (the "
	 "options before the first --name are every job's); the shuffle id "
	 "is derived from the name, so --rw=read finds what --rw=write left",
	 1, 127, NULL, 0},
	{"numjobs", T_UINT, F(numjobs), "auto", "threads, each with its own "
	 "ring and map id; auto: one per online CPU", 1, 1024, NULL, OPT_AUTO},
	{"size", T_SIZE, F(size), "256m", "logical record bytes each thread "
	 "writes", 1, 1024 * TIB, NULL, 0},
	{"runtime", T_TIME, F(runtime_ms), "0", "stop writing (reading, for "
	 "--rw=read) after this long; 0: no limit", 0, 365 * 86400, NULL, 0},
	{"time_based", T_BOOL, F(time_based), "0", "run for --runtime even "
	 "when --size is reached", 0, 1, NULL, 0},
	{"hold", T_TIME, F(hold_ms), "0", "net, with --workers: after the "
	 "job, heartbeat this long so that the workers keep its output (they "
	 "drop an application's shuffles once it is silent for their "
	 "--app-ttl); Ctrl-C ends it; 0: exit at once", 0, 365 * 86400, NULL,
	 0},
	{"stonewall", T_BOOL, F(stonewall), "0", "wait until the jobs before "
	 "this one have ended, then start (a new group); without it jobs "
	 "run at the same time", 0, 1, NULL, 0},
	{"group_reporting", T_BOOL, F(group_reporting), "0", "report each "
	 "job's threads together, not one by one", 0, 1, NULL, 0},
	{"rw", T_ENUM, F(rw), "shuffle", "write: map phase, keep the output; "
	 "read: read back an earlier write (same --name, --dir); shuffle: "
	 "write, read back, remove", 0, 0, rw_choices, 0},
	{"keep", T_BOOL, F(keep), "0", "shuffle: keep the spill files", 0, 1,
	 NULL, 0},
	{"unlink", T_ENUM, F(unlink), "auto", "remove the job's output when "
	 "it ends: 1 always (a write's too; a read removes what it read, "
	 "once all of it is read without an error), 0 never (a shuffle's "
	 "too, as --keep); auto: a shuffle removes, a write and a read keep",
	 0, 0, unlink_choices, 0},
	{"loops", T_UINT, F(loops), "1", "run the job this many times, one "
	 "after another, each run reported", 1, 1000, NULL, 0},
	{"partitions", T_UINT, F(partitions), "64", "reduce partitions", 1,
	 1u << 24, NULL, 0},
	{"record-size", T_RANGE, F(record_size), "100-1000", "record bytes, "
	 "or MIN-MAX for a uniform spread", 0, 64 * MIB, NULL, 0},
	{"bs", T_SIZE, F(bs), "64k", "push buffer size (one batch)",
	 4 * KIB, 64 * MIB, NULL, OPT_POW2},
	{"codec", T_CODEC, F(codec), "lz4", "batch compression", 0, 0, NULL,
	 0},
	{"iodepth", T_UINT, F(iodepth), "64", "operations in flight per ring",
	 1, 4096, NULL, 0},
	{"direct", T_BOOL, F(direct), "1", "O_DIRECT spill files (buffered "
	 "where the file system refuses it)", 0, 1, NULL, 0},
	{"sqpoll", T_BOOL, F(sqpoll), "0", "kernel submission polling thread",
	 0, 1, NULL, 0},
	{"fixedbufs", T_ENUM, F(fixedbufs), "auto", "registered (1) or plain "
	 "(0) buffers; auto: registered, plain with a warning if refused",
	 0, 0, fixedbufs_choices, 0},
	{"handoff", T_ENUM, F(handoff), "swap", "swap: give full buffers "
	 "away; copy: the library copies them", 0, 0, handoff_choices, 0},
	{"ioengine", T_ENUM, F(ioengine), "io_uring", "psync: copy + pwrite "
	 "baseline, no ring I/O", 0, 0, ioengine_choices, 0},
	{"target", T_ENUM, F(target), "disk", "null: no I/O; disk: spill to "
	 "--dir; net: push to --workers", 0, 0, target_choices, 0},
	{"dir", T_STR, F(dir), ".", "spill directory", 1, PATH_MAX - 64,
	 NULL, 0},
	{"workers", T_STR, F(workers), "", "net: HOST:PORT[@LABEL],... of the "
	 "shuffle workers (LABEL: its host, default HOST)", 0, 1023, NULL, 0},
	{"replicas", T_UINT, F(replicas), "1", "net: distinct workers each "
	 "batch goes to, other host labels (HOST:PORT@LABEL) first; with 2 "
	 "or more a lost worker loses no data", 1, USH_REPLICAS_MAX, NULL, 0},
	{"secret-file", T_STR, F(secret_file), "", "net: file holding the "
	 "application's secret (else $USHUFFLE_SECRET; the embedded worker "
	 "makes one up)", 0, PATH_MAX - 1, NULL, 0},
	{"encrypt-key-file", T_STR, F(encrypt_key_file), "", "seal every "
	 "batch (AES-256-GCM) under the first key of this file and read "
	 "only sealed maps; workers never see the records (lines of 64 hex "
	 "digits, each optionally after 'ID ')", 0, PATH_MAX - 1, NULL, 0},
	{"app", T_STR, F(app), "default", "net: the application the job's "
	 "shuffles belong to (A-Z a-z 0-9 . _ : -); workers check its "
	 "secret (per application with their --secrets-dir) and drop its "
	 "shuffles when its heartbeats stop", 1, 64, NULL, 0},
	{"verify", T_ENUM, F(verify), "crc32c", "check every record read "
	 "back (needs records of 16 bytes or more)", 0, 0, verify_choices, 0},
	{"buffer_pattern", T_STR, F(buffer_pattern), "", "the filler of "
	 "each record's compressible share, repeated: 0x and up to 128 hex "
	 "digits, or up to 64 characters of text (as fio's, so what workers "
	 "and spill files store can be searched)", 0, 131, NULL, 0},
	{"buffer_compress_percentage", T_UINT, F(compress_pct), "50",
	 "compressible share of each record", 0, 100, NULL, 0},
	{"pin", T_BOOL, F(pin), "1", "pin thread i to the i-th allowed CPU", 0,
	 1, NULL, 0},
	{"cpus_allowed", T_STR, F(cpus_allowed), "", "the CPUs the job's "
	 "threads may run on, as fio's list (0-3,8); empty: the process's",
	 0, 255, NULL, 0},
	{"thread", T_BOOL, F(thread), "1", "accepted for fio's job files: "
	 "ushuffle's jobs always run as threads", 0, 1, NULL, 0},
	{"output-format", T_ENUM, F(output_format), "normal", "report "
	 "formats, a comma list as fio's (normal,json: both, one after the "
	 "other)", 0, 0, format_choices, OPT_GLOBAL | OPT_LIST},
	{"output", T_STR, F(output), "-", "report file; -: standard output",
	 1, PATH_MAX - 1, NULL, OPT_GLOBAL},
	{"eta", T_ENUM, F(eta), "auto", "live status line on stderr; auto: "
	 "when stderr is a terminal", 0, 0, eta_choices, OPT_GLOBAL},
	{"eta-newline", T_TIME, F(eta_newline_ms), "0", "end the status line "
	 "with a new line this often, so a log keeps it; 0: redraw in place",
	 0, 86400, NULL, OPT_GLOBAL},
	{"status-interval", T_TIME, F(status_interval_ms), "0", "print the "
	 "status line, a line of its own naming its job, on standard error "
	 "this often (a log of progress; fio prints its whole report); 0: "
	 "never", 0, 86400, NULL, OPT_GLOBAL},
	{"minimal", T_BOOL, F(minimal), "0", "fio's terse report, as "
	 "--output-format=terse", 0, 1, NULL, OPT_GLOBAL},
	{"parse-only", T_BOOL, F(parse_only), "0", "check the options and job "
	 "files, run nothing", 0, 1, NULL, OPT_GLOBAL},
};
const size_t cli_nopts = sizeof(cli_opts) / sizeof(cli_opts[0]);

/* fio's names for options that mean the same here. */
static const struct {
	const char *name, *is;
} aliases[] = {
	{"directory", "dir"}, {"blocksize", "bs"}, {"readwrite", "rw"},
	{"wait_for_previous", "stonewall"}, {"sqthread_poll", "sqpoll"},
};

/* fio's options without a meaning for a shuffle, and what to use. */
static const struct {
	const char *name, *why;
} refused[] = {
	{"filename", "a shuffle has no one file: each map spills a data file "
	 "and an index under --dir; accepted: --dir=DIR, or "
	 "--directory=DIR1:DIR2 to spread the maps over drives"},
	{"nrfiles", "the files are one data file and one index per map; "
	 "accepted: --numjobs (maps) and --partitions"},
	{"filesize", "each map writes --size bytes of records; accepted: "
	 "--size"},
};

static bool same_name(const char *a, const char *b)
{
	for (; *a && *b; a++, b++)
		if (*a != *b && !(strchr("-_", *a) && strchr("-_", *b)))
			return false;
	return !*a && !*b;
}

const struct opt *opt_find(const char *name)
{
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (same_name(aliases[i].name, name))
			name = aliases[i].is;
	for (size_t i = 0; i < cli_nopts; i++)
		if (same_name(cli_opts[i].name, name))
			return &cli_opts[i];
	return NULL;
}

const char *opt_refused(const char *name)
{
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (same_name(refused[i].name, name))
			return refused[i].why;
	return NULL;
}

/* Edit distance of a and b ('-' and '_' alike), a swap of two letters
 * one edit ("nmae"), capped at 9. */
static unsigned distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned d[64][64];
	if (la >= 63 || lb >= 63)
		return 9;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		d[i][0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			bool same = a[i - 1] == b[j - 1] ||
				    (strchr("-_", a[i - 1]) &&
				     strchr("-_", b[j - 1]));
			unsigned best = d[i - 1][j - 1] + !same;
			best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
			best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	}
	return d[la][lb] < 9 ? d[la][lb] : 9;
}

/* Keeps name as *best if it is nearer than *bd edits, and fewer than
 * half its length. */
static void nearer(const char *typo, const char *name, const char **best,
		   unsigned *bd)
{
	unsigned d = distance(typo, name);
	if (d < *bd && 2 * d < strlen(name))
		*bd = d, *best = name;
}

const char *opt_suggest(const char *name)
{
	const char *best = NULL;
	unsigned bd = 3; /* at most two edits, and fewer than half */
	for (size_t i = 0; i < cli_nopts; i++)
		nearer(name, cli_opts[i].name, &best, &bd);
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		nearer(name, aliases[i].name, &best, &bd); /* --blocksze */
	return best;
}

const char *choice_name(const struct opt_choice *c, int value)
{
	for (; c->name; c++)
		if (c->value == value)
			return c->name;
	return "?";
}

/* "4k" for 4096: the largest exact suffix. */
static void fmt_size(char *buf, size_t n, uint64_t v)
{
	static const char sfx[] = "\0kmgt";
	int i = 0;
	while (i < 4 && v && v % 1024 == 0) {
		v /= 1024;
		i++;
	}
	snprintf(buf, n, "%llu%.1s", (unsigned long long)v, &sfx[i]);
}

/* What o accepts, for --help and error messages. */
static void accepted(const struct opt *o, char *buf, size_t n)
{
	char lo[32], hi[32];
	size_t k = 0;
	switch (o->type) {
	case T_STR:
		snprintf(buf, n, "%s of at most %llu bytes",
			 o->min ? "a non-empty string" : "a string",
			 (unsigned long long)o->max);
		return;
	case T_UINT:
		snprintf(buf, n, "%llu..%llu%s", (unsigned long long)o->min,
			 (unsigned long long)o->max,
			 o->flags & OPT_AUTO ? " or auto" : "");
		return;
	case T_SIZE:
	case T_RANGE:
		fmt_size(lo, sizeof(lo), o->min);
		fmt_size(hi, sizeof(hi), o->max);
		snprintf(buf, n, "%s%s%s..%s, with an optional k, m, g or t "
			 "suffix (powers of 1024)",
			 o->type == T_RANGE ? "SIZE or MIN-MAX, each " : "",
			 o->flags & OPT_POW2 ? "a power of two " : "", lo, hi);
		return;
	case T_TIME:
		snprintf(buf, n, "seconds 0..%llu, with an optional s, m or h "
			 "suffix", (unsigned long long)o->max);
		return;
	case T_BOOL:
		snprintf(buf, n, "0 or 1");
		return;
	case T_ENUM:
		buf[0] = '\0';
		for (const struct opt_choice *c = o->choices; c->name; c++)
			k += (size_t)snprintf(
				buf + k, k < n ? n - k : 0, "%s%s",
				c == o->choices ? ""
				: c[1].name	? ", "
						: " or ",
				c->name);
		if (o->flags & OPT_LIST)
			snprintf(buf + k, k < n ? n - k : 0, ", or a comma "
				 "list of them");
		return;
	case T_CODEC:
		snprintf(buf, n, "none, lz4, zstd or zstd:LEVEL (LEVEL 1..22, "
			 "or negative for zstd's fast levels)");
		return;
	}
}

static int bad(const struct opt *o, char *err, size_t n, const char *fmt,
	       ...) __attribute__((format(printf, 4, 5)));
static int bad(const struct opt *o, char *err, size_t n, const char *fmt, ...)
{
	char acc[256];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(err, n, fmt, ap);
	va_end(ap);
	accepted(o, acc, sizeof(acc));
	if (k >= 0 && (size_t)k < n)
		snprintf(err + k, n - (size_t)k, "; accepted: %s", acc);
	return -1;
}

/* The leading digits of s into *v, *end after them. Too many digits
 * saturate to UINT64_MAX, beyond every option's max ("out of range"). */
static int parse_digits(const struct opt *o, const char *s, uint64_t *v,
			char **end, char *err, size_t n)
{
	if (!isdigit((unsigned char)*s))
		return bad(o, err, n, "not a number");
	*v = strtoull(s, end, 10);
	return 0;
}

/* Digits, then a k/m/g/t suffix (times 1024^i), optional "i" and "b". */
static int parse_size(const struct opt *o, const char *s, uint64_t *out,
		      char *err, size_t n)
{
	char *end = NULL;
	uint64_t v = 0;
	if (parse_digits(o, s, &v, &end, err, n))
		return -1;
	const char *sfx = end;
	unsigned shift = 0;
	const char *p = strchr("kmgt", tolower((unsigned char)*end));
	if (*end && p) {
		shift = 10 * (unsigned)(p - "kmgt" + 1);
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
	}
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return bad(o, err, n, "bad suffix '%s'", sfx);
	if (v > (UINT64_MAX >> shift))
		return bad(o, err, n, "out of range");
	*out = v << shift;
	return 0;
}

/* Seconds, or with an s, m or h suffix; *out in ms. */
static int parse_time(const struct opt *o, const char *s, uint64_t *out,
		      char *err, size_t n)
{
	char *end = NULL;
	uint64_t v = 0, mul = 1;
	if (parse_digits(o, s, &v, &end, err, n))
		return -1;
	if (*end && !end[1] && strchr("smh", *end))
		mul = *end == 'h' ? 3600 : *end == 'm' ? 60 : 1, end++;
	if (*end)
		return bad(o, err, n, "bad suffix '%s'", end);
	if (v > o->max || v * mul > o->max)
		return bad(o, err, n, "out of range");
	*out = v * mul * 1000;
	return 0;
}

static int check_range(const struct opt *o, uint64_t v, char *err, size_t n)
{
	if (v < o->min || v > o->max)
		return bad(o, err, n, "out of range");
	if ((o->flags & OPT_POW2) && (v & (v - 1)))
		return bad(o, err, n, "not a power of two");
	return 0;
}

/* An OPT_LIST enum: the bits of a comma list of its choices. */
static int parse_list(const struct opt *o, struct job_opts *j,
		      const char *v, char *err, size_t n)
{
	int bits = 0;
	for (const char *p = v;; p++) {
		size_t k = strcspn(p, ",");
		const struct opt_choice *c = o->choices;
		while (c->name && (strlen(c->name) != k ||
				   strncmp(p, c->name, k)))
			c++;
		if (!c->name)
			return bad(o, err, n, "unknown value '%.*s'", (int)k,
				   p);
		bits |= c->value;
		p += k;
		if (!*p)
			break;
	}
	*(int *)((char *)j + o->off) = bits;
	return 0;
}

static int opt_parse(const struct opt *o, struct job_opts *j,
		     const char *v, char *err, size_t n)
{
	void *field = (char *)j + o->off;
	uint64_t u[2] = {0, 0};
	if (!v && o->type != T_BOOL)
		return bad(o, err, n, "needs a value");
	switch (o->type) {
	case T_STR:
		if (strlen(v) < o->min || strlen(v) > o->max)
			return bad(o, err, n, strlen(v) ? "too long" : "empty");
		memcpy(field, v, strlen(v) + 1);
		return 0;
	case T_UINT: {
		char *end = NULL;
		if ((o->flags & OPT_AUTO) && !strcmp(v, "auto")) {
			*(uint64_t *)field = 0;
			return 0;
		}
		if (parse_digits(o, v, u, &end, err, n))
			return -1;
		if (*end)
			return bad(o, err, n, "bad suffix '%s'", end);
		if (check_range(o, u[0], err, n))
			return -1;
		*(uint64_t *)field = u[0];
		return 0;
	}
	case T_SIZE:
		if (parse_size(o, v, u, err, n) || check_range(o, u[0], err, n))
			return -1;
		*(uint64_t *)field = u[0];
		return 0;
	case T_TIME:
		return parse_time(o, v, (uint64_t *)field, err, n);
	case T_BOOL:
		if (v && strcmp(v, "0") && strcmp(v, "1"))
			return bad(o, err, n, "not a boolean");
		*(int *)field = !v || *v == '1';
		return 0;
	case T_ENUM:
		if (o->flags & OPT_LIST)
			return parse_list(o, j, v, err, n);
		for (const struct opt_choice *c = o->choices; c->name; c++)
			if (!strcmp(v, c->name)) {
				*(int *)field = c->value;
				return 0;
			}
		if (o->choices == verify_choices) /* fio's md5, sha256... */
			return bad(o, err, n, "records are checked with "
				   "CRC32C only (a CRC32C header in each record, "
				   "over the frames' own CRC32C)");
		return bad(o, err, n, "unknown value");
	case T_RANGE: {
		char lo[32];
		const char *dash = strchr(v, '-');
		size_t k = dash ? (size_t)(dash - v) : strlen(v);
		if (k >= sizeof(lo))
			return bad(o, err, n, "not a size");
		memcpy(lo, v, k);
		lo[k] = '\0';
		if (parse_size(o, lo, &u[0], err, n) ||
		    check_range(o, u[0], err, n))
			return -1;
		u[1] = u[0];
		if (dash && (parse_size(o, dash + 1, &u[1], err, n) ||
			     check_range(o, u[1], err, n)))
			return -1;
		if (u[1] < u[0])
			return bad(o, err, n, "MIN above MAX");
		memcpy(field, u, sizeof(u));
		return 0;
	}
	case T_CODEC: {
		enum ush_codec c;
		struct codec_opt *co = field;
		if (ush_codec_parse(v, &c, &co->level))
			return bad(o, err, n, "unknown codec or level");
		co->codec = (int)c;
		return 0;
	}
	}
	return -1;
}

int opt_set(const struct opt *o, struct job_opts *j, const char *v,
	    char *err, size_t n)
{
	_Static_assert(sizeof(cli_opts) / sizeof(cli_opts[0]) <=
		       8 * sizeof(j->given), "a bit of given per option");
	int ret = opt_parse(o, j, v, err, n);
	if (!ret)
		j->given |= 1ull << (o - cli_opts);
	return ret;
}

void opt_format(const struct opt *o, const struct job_opts *j, char *buf,
		size_t n)
{
	const void *field = (const char *)j + o->off;
	const uint64_t *u = field;
	const struct codec_opt *co = field;
	char a[32], b[32];
	switch (o->type) {
	case T_STR:
		snprintf(buf, n, "%s", (const char *)field);
		return;
	case T_UINT:
		if ((o->flags & OPT_AUTO) && !*u)
			snprintf(buf, n, "auto");
		else
			snprintf(buf, n, "%llu", (unsigned long long)*u);
		return;
	case T_SIZE:
		fmt_size(buf, n, *u);
		return;
	case T_TIME:
		snprintf(buf, n, "%llu", (unsigned long long)(*u / 1000));
		return;
	case T_BOOL:
		snprintf(buf, n, "%d", *(const int *)field);
		return;
	case T_ENUM:
		if (!(o->flags & OPT_LIST)) {
			int v = *(const int *)field;
			snprintf(buf, n, "%s", choice_name(o->choices, v));
			return;
		}
		buf[0] = '\0';
		for (const struct opt_choice *c = o->choices; c->name; c++)
			if (*(const int *)field & c->value)
				snprintf(buf + strlen(buf), n - strlen(buf),
					 "%s%s", buf[0] ? "," : "", c->name);
		return;
	case T_RANGE:
		fmt_size(a, sizeof(a), u[0]);
		fmt_size(b, sizeof(b), u[1]);
		if (u[0] == u[1])
			snprintf(buf, n, "%s", a);
		else
			snprintf(buf, n, "%s-%s", a, b);
		return;
	case T_CODEC:
		if (co->codec == USH_CODEC_ZSTD && co->level != 1)
			snprintf(buf, n, "zstd:%d", co->level);
		else
			snprintf(buf, n, "%s", ush_codec_name(co->codec));
		return;
	}
}

void opts_defaults(struct job_opts *j)
{
	char err[256];
	memset(j, 0, sizeof(*j));
	for (size_t i = 0; i < cli_nopts; i++)
		if (opt_set(&cli_opts[i], j, cli_opts[i].def, err, sizeof(err)))
			abort(); /* a bad default is a bug in the table */
	j->given = 0;
}

/* Writes text at column col, wrapped at 79, continuing at column ind. */
static void wrap(FILE *f, const char *text, int col, int ind)
{
	while (*text) {
		size_t w = strcspn(text, " ");
		if (col > ind && col + 1 + (int)w > 79) {
			fprintf(f, "\n%*s", ind, "");
			col = ind;
		} else if (col > ind) {
			fputc(' ', f);
			col++;
		}
		fprintf(f, "%.*s", (int)w, text);
		col += (int)w;
		text += w;
		text += strspn(text, " ");
	}
	fputc('\n', f);
}

static void metavar(const struct opt *o, char *buf, size_t n)
{
	static const char *const meta[] = {
		[T_STR] = "=STR", [T_UINT] = "=N", [T_SIZE] = "=BYTES",
		[T_TIME] = "=SECONDS", [T_BOOL] = "[=0|1]",
		[T_RANGE] = "=MIN[-MAX]", [T_CODEC] = "=none|lz4|zstd[:LEVEL]",
	};
	size_t k = (size_t)snprintf(buf, n, "--%s", o->name);
	if (o->type != T_ENUM) {
		snprintf(buf + k, n - k, "%s%s", meta[o->type],
			 o->flags & OPT_AUTO ? "|auto" : "");
		return;
	}
	for (const struct opt_choice *c = o->choices; c->name && k < n; c++)
		k += (size_t)snprintf(buf + k, n - k, "%s%s",
				      c == o->choices ? "=" : "|", c->name);
}

/* The range part of accepted(), short, for --help. */
static void short_range(const struct opt *o, char *buf, size_t n)
{
	char lo[32], hi[32];
	fmt_size(lo, sizeof(lo), o->min);
	fmt_size(hi, sizeof(hi), o->max);
	switch (o->type) {
	case T_UINT:
		snprintf(buf, n, "; %llu..%llu", (unsigned long long)o->min,
			 (unsigned long long)o->max);
		return;
	case T_SIZE:
	case T_RANGE:
		snprintf(buf, n, "; %s%s..%s", o->flags & OPT_POW2 ?
			 "a power of two " : "", lo, hi);
		return;
	case T_TIME:
		snprintf(buf, n, "; 0..%llu s, or with an m or h suffix",
			 (unsigned long long)o->max);
		return;
	default:
		buf[0] = '\0';
	}
}

void opts_help(FILE *f)
{
	char meta[96], text[512], range[96];
	fprintf(f, "usage: " CLI_NAME " [options] [jobfile ...]\n\n"
		"A fio-style driver for the ushuffle shuffle transport. Job "
		"files are INI files:\na [global] section and one section per "
		"job, keys being the option names below\nwithout the dashes; "
		"command-line options override the files. Sizes take k, m,\n"
		"g, t suffixes (powers of 1024). Exit status: 0 ok, 1 run-time "
		"failure (I/O,\nverify), 2 bad input, 130 interrupted.\n\n"
		"Options, with their defaults in brackets:\n");
	for (size_t i = 0; i < cli_nopts; i++) {
		const struct opt *o = &cli_opts[i];
		metavar(o, meta, sizeof(meta));
		int col = fprintf(f, "  %-27s ", meta);
		if (col > 30) {
			fprintf(f, "\n%30s", "");
			col = 30;
		}
		short_range(o, range, sizeof(range));
		snprintf(text, sizeof(text), "%s%s [%s]%s", o->help, range,
			 *o->def ? o->def : "none", o->flags & OPT_GLOBAL ?
			 " (global: command line or [global] only)" : "");
		wrap(f, text, col, 30);
	}
	/* fio's names, so that --help, the manual and the completion
	 * offer them too */
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
		const struct opt *o = opt_find(aliases[i].is);
		metavar(o, meta, sizeof(meta));
		char alias[128];
		snprintf(alias, sizeof(alias), "--%s%s", aliases[i].name,
			 meta + 2 + strlen(o->name));
		snprintf(text, sizeof(text), "fio's name for --%s", o->name);
		int col = fprintf(f, "  %-27s ", alias);
		if (col > 30) {
			fprintf(f, "\n%30s", "");
			col = 30;
		}
		wrap(f, text, col, 30);
	}
	fprintf(f, "  %-28s%s\n  %-28s%s\n", "--help", "this text",
		"--version", "the version");
	fprintf(f, "\nnumjobs=auto is %ld here.\nMore in ushuffle(1), and "
		"in cli.md, which it names: job files, the\nreports, and what "
		"ushuffle does with each fio option.\n",
		sysconf(_SC_NPROCESSORS_ONLN));
}
