/*
 * ushuffled's options: one table makes getopt's options, names the keys
 * of --config files (INI, a [ushuffled] section, read with inih as the
 * CLI reads job files) and says what each accepts when a value is bad.
 */
#include "worker/ushuffled.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *daemon_log_path;
const char *daemon_metrics;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ushuffled [options]\n"
		"  --listen=HOST:PORT  address to serve (default 127.0.0.1:7337;"
		" port 0: any)\n"
		"  --dir=PATH[:PATH...]  storage directories, one per disk "
		"(required);\n"
		"                      shuffle logs are spread over them\n"
		"  --threads=N         threads, one ring and listener each "
		"(default: one per CPU)\n"
		"  --direct=0|1        O_DIRECT shuffle logs (default 1)\n"
		"  --sync=full|none    full (default): a commit waits for "
		"its data and record\n"
		"                      to be synced; none: written to the "
		"page cache only,\n"
		"                      lost at a host crash "
		"(docs/operations.md, \"Durability\")\n"
		"  --log-level=LEVEL   error, info (default) or debug\n"
		"  --window=BYTES      credit per connection (default 4 MiB)\n"
		"  --max-frame=BYTES   largest frame accepted (default 64 MiB)\n"
		"  --pool=BYTES        registered log memory per thread "
		"(default 32 MiB)\n"
		"  --hello-timeout=MS  close connections silent this long "
		"before HELLO (10000)\n"
		"  --app-ttl=MS        drop the shuffles of an application not "
		"heard of\n"
		"                      this long (default 300000)\n"
		"  --idle-timeout=MS   close connections past HELLO that "
		"receive nothing and\n"
		"                      have nothing to send this long "
		"(300000)\n"
		"  --max-conns=N       connections at once, all threads; more "
		"are refused\n"
		"                      with an ERROR (1024; at most 1536 per "
		"thread)\n"
		"  --drain-timeout=MS  on SIGTERM, how long pushes and fetches "
		"under way may\n"
		"                      finish before clients are told it shuts "
		"down (20000)\n"
		"  --log-file=PATH     log there instead of stderr; SIGHUP "
		"reopens it\n"
		"  --version           print the version and exit\n"
		"  --metrics=HOST:PORT serve counters for Prometheus at "
		"http://HOST:PORT/metrics\n"
		"  --config=FILE       options from an INI file: a [ushuffled] "
		"section of\n"
		"                      NAME=VALUE, NAME a long option "
		"below; the command line\n"
		"                      overrides it\n"
		"  --max-open-files=N  log and index files kept open (default: a "
		"quarter of\n"
		"                      RLIMIT_NOFILE's soft limit)\n"
		"Authentication (docs/security.md): clients prove their "
		"application's secret.\n"
		"  --secret-file=PATH  the secret of every application (else "
		"$USHUFFLE_SECRET)\n"
		"  --secrets-dir=DIR   one file per application, named by its "
		"id, holding its\n"
		"                      secret (read at each connection; wins "
		"over the above)\n"
		"  --insecure          also serve clients without a secret "
		"(loopback only)\n"
		"  --insecure-non-loopback  allow --insecure on any address\n"
		"Quotas per application (ERROR -EDQUOT beyond them):\n"
		"  --max-app-conns=N   connections at once (default 512)\n"
		"  --max-app-shuffles=N  shuffles owned (default 4096)\n"
		"  --max-app-bytes=BYTES  data stored (default: half of --dir's "
		"file system)\n"
		"  --max-app-attempts=N  attempts open or abandoned, until "
		"dropped (65536)\n"
		"  --max-app-commits=N  attempts committed, until dropped "
		"(262144)\n"
		"  --max-apps=N        applications known at once, all together "
		"(16384)\n"
		"  --max-app-fetch-bytes=BYTES  memory its FETCHes being "
		"planned hold at once\n"
		"                      (default 256m)\n"
		"Signals: SIGTERM or SIGINT drains connections and exits 0; "
		"SIGHUP reopens the\n"
		"log file; SIGUSR2 decommissions: new writers are refused "
		"(clients place their\n"
		"data on their other workers), reads and drops are served, and "
		"the worker\n"
		"exits 0 once it holds no shuffle (docs/operations.md, "
		"\"Decommission\").\n"
		"Limits and defaults: docs/protocol.md, \"Limits\". Under "
		"systemd (Type=notify)\nit reports readiness and pings the "
		"watchdog%s. Operations: docs/operations.md.\n",
#ifdef USH_HAVE_SYSTEMD
		""
#else
		" (not in this build: no libsystemd)"
#endif
		);
}

static int level(const char *s)
{
	if (!strcmp(s, "error") || !strcmp(s, "0"))
		return 0;
	if (!strcmp(s, "info") || !strcmp(s, "1"))
		return 1;
	if (!strcmp(s, "debug") || !strcmp(s, "2"))
		return 2;
	return -1;
}

/* A count with an optional k, m or g suffix; -1 when it is not one or
 * does not fit 64 bits (which would wrap into a small, valid value). */
static int number(const char *s, unsigned long long *v)
{
	char *end;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	static const char sfx[] = "kmgKMG";
	const char *p = *end ? strchr(sfx, *end) : NULL;
	unsigned shift = p ? 10 * (1 + (unsigned)(p - sfx) % 3) : 0;
	if (errno || (shift && *v > ULLONG_MAX >> shift))
		return -1;
	*v <<= shift;
	end += shift != 0;
	return *end ? -1 : 0;
}

/* HOST:PORT's port part: 0..65535 in digits (getaddrinfo() would take
 * 99999 and bind 34463), after a HOST unless any_host. */
static int hostport(const char *v, int any_host)
{
	const char *colon = strrchr(v, ':');
	if (!colon || (colon == v && !any_host))
		return -1;
	size_t d = strspn(colon + 1, "0123456789");
	return !d || d > 5 || colon[1 + d] || atoi(colon + 1) > 65535 ? -1 : 0;
}

/* Every option: getopt's table is made from it, the config file's keys
 * are its names, and a bad value's message says what it accepts. */
struct dopt {
	const char *name;
	int has_arg, code;
	const char *accepted;
};

static const struct dopt dopts[] = {
	{"listen", 1, 'l', "HOST:PORT or [V6]:PORT, PORT 0..65535"},
	{"dir", 1, 'd', "a directory path, or several separated by ':'"},
	{"threads", 1, 't', "1..1024"},
	{"direct", 1, 'D', "0 or 1"},
	{"sync", 1, 'y', "full or none"},
	{"log-level", 1, 'v', "error, info or debug (or 0, 1, 2)"},
	{"window", 1, 'w', "4k..1g"},
	{"max-frame", 1, 'm', "0..1g"},
	{"pool", 1, 'p', "BYTES, with an optional k, m or g suffix"},
	{"hello-timeout", 1, 'H', "1..3600000 ms"},
	{"app-ttl", 1, 'A', "1..2147483648 ms"},
	{"idle-timeout", 1, 'I', "1..86400000 ms"},
	{"max-conns", 1, 'C', "1..1572864"},
	{"drain-timeout", 1, 'T', "1..3600000 ms"},
	{"log-file", 1, 'L', "a file path"},
	{"max-open-files", 1, 'F', "1..1073741824"},
	{"secret-file", 1, 'S', "a file path"},
	{"secrets-dir", 1, 'Y', "a directory path"},
	{"insecure", 0, 'i', "no value (in a config file: 1)"},
	{"insecure-non-loopback", 0, 'N', "no value (in a config file: 1)"},
	{"max-app-conns", 1, 'a', "1..1073741824"},
	{"max-app-shuffles", 1, 's', "1..1073741824"},
	{"max-app-bytes", 1, 'b', "1 or more BYTES (k, m, g suffixes)"},
	{"max-app-attempts", 1, 'e', "1..1073741824"},
	{"max-app-commits", 1, 'o', "1..1073741824"},
	{"max-apps", 1, 'P', "1..1073741824"},
	{"max-app-fetch-bytes", 1, 'f', "1 or more BYTES (k, m, g suffixes)"},
	{"metrics", 1, 'M', "HOST:PORT, [V6]:PORT or :PORT (every address), "
			    "PORT 0..65535"},
	{"config", 1, 'c', "an INI file"},
	{"version", 0, 'V', "no value"},
	{"help", 0, 'h', "no value"},
};
#define NDOPTS (sizeof(dopts) / sizeof(dopts[0]))

static const struct dopt *dopt_of(int code)
{
	for (size_t i = 0; i < NDOPTS; i++)
		if (dopts[i].code == code)
			return &dopts[i];
	return NULL;
}

/* Sets the option code to v in o: 0, or -1 for a bad value. v must
 * outlive o (argv, or a copy the config reader keeps). */
static int apply(struct ush_worker_opts *o, int code, const char *v)
{
	unsigned long long n = 0;
	switch (code) {
	case 'l': o->listen = v; return hostport(v, 0);
	case 'd': o->dir = v; return !*v;
	case 't':
		if (number(v, &n) || n < 1 || n > 1024)
			return -1;
		o->threads = (unsigned)n;
		return 0;
	case 'D':
		o->direct = v[0] == '1';
		return strcmp(v, "0") && strcmp(v, "1") ? -1 : 0;
	case 'y':
		o->sync = strcmp(v, "none") ? USH_WORKER_SYNC_FULL :
					      USH_WORKER_SYNC_NONE;
		return strcmp(v, "full") && strcmp(v, "none") ? -1 : 0;
	case 'v':
		o->log_level = level(v);
		return o->log_level < 0 ? -1 : 0;
	case 'w':
		if (number(v, &n) || n < 4096 || n > (1u << 30))
			return -1;
		o->window = (uint32_t)n;
		return 0;
	case 'm':
		if (number(v, &n) || n > (1u << 30))
			return -1;
		o->max_frame = (uint32_t)n;
		return 0;
	case 'p':
		if (number(v, &n))
			return -1;
		o->pool_bytes = (size_t)n;
		return 0;
	case 'H': case 'T':
		if (number(v, &n) || n < 1 || n > 3600000)
			return -1;
		*(code == 'H' ? &o->hello_timeout_ms : &o->drain_timeout_ms) =
			(uint32_t)n;
		return 0;
	case 'A':
		if (number(v, &n) || n < 1 || n > 1u << 31)
			return -1;
		o->app_ttl_ms = (uint32_t)n;
		return 0;
	case 'I':
		if (number(v, &n) || n < 1 || n > 86400000)
			return -1;
		o->idle_timeout_ms = (uint32_t)n;
		return 0;
	case 'C':
		if (number(v, &n) || n < 1 || n > 1536 * 1024)
			return -1;
		o->max_conns = (unsigned)n;
		return 0;
	case 'L': daemon_log_path = v; return !*v;
	case 'F': case 'a': case 's': case 'e': case 'o': case 'P':
		if (number(v, &n) || n < 1 || n > (1u << 30))
			return -1;
		*(code == 'F' ? &o->max_open_files :
		  code == 'a' ? &o->max_app_conns :
		  code == 's' ? &o->max_app_shuffles :
		  code == 'e' ? &o->max_app_attempts :
		  code == 'o' ? &o->max_app_commits : &o->max_apps) =
			(unsigned)n;
		return 0;
	case 'S': o->secret_file = v; return !*v;
	case 'Y': o->secrets_dir = v; return !*v;
	case 'i': case 'N':
		if (strcmp(v, "0") && strcmp(v, "1"))
			return -1;
		*(code == 'i' ? &o->insecure : &o->insecure_non_loopback) =
			v[0] == '1';
		return 0;
	case 'b': case 'f':
		if (number(v, &n) || n < 1)
			return -1;
		*(code == 'b' ? &o->max_app_bytes : &o->max_app_fetch_bytes) =
			n;
		return 0;
	case 'M': daemon_metrics = v; return hostport(v, 1);
	}
	return -1;
}

static int bad_value(const char *where, const char *name, const char *v,
		     int code)
{
	fprintf(stderr, "ushuffled: %s--%s=%s: bad value; accepted: %s\n",
		where, name, v, dopt_of(code)->accepted);
	return -1;
}

/* The config file's values, which the options point at until exit. */
static char **kept;
static size_t nkept;

static void free_kept(void)
{
	for (size_t i = 0; i < nkept; i++)
		free(kept[i]);
	free(kept);
}

static const char *keep(const char *v)
{
	char **k = realloc(kept, (nkept + 1) * sizeof(*k));
	char *copy = strdup(v);
	if (!k || !copy) {
		fprintf(stderr, "ushuffled: out of memory\n");
		exit(1);
	}
	if (!kept)
		atexit(free_kept);
	kept = k;
	return kept[nkept++] = copy;
}

struct config {
	const char *file;
	struct ush_worker_opts *o;
	FILE *f;
	int failed;
	int line;             /* the line last read */
	int long_line;        /* the first line too long to read, or 0 */
	int read_err;         /* errno of a failed read, or 0 */
	int set[NDOPTS];      /* the line that set each option, or 0 */
};

/* inih's line reader, counting lines so that each message names its
 * line, and stopping at a read error (fopen() opens a directory; its
 * reads fail with EISDIR) or at a line longer than inih's buffer, which
 * it would otherwise cut and read on as a line of its own. */
static char *config_line(char *str, int num, void *arg)
{
	struct config *c = arg;
	if (c->long_line || c->read_err)
		return NULL;
	errno = 0;
	if (!fgets(str, num, c->f)) {
		if (ferror(c->f))
			c->read_err = errno ? errno : EIO;
		return NULL;
	}
	c->line++;
	size_t len = strlen(str);
	if (len == (size_t)num - 1 && str[len - 1] != '\n' && !feof(c->f)) {
		c->long_line = c->line;
		return NULL;
	}
	return str;
}

/* A config file key: an option's name ('_' for '-' too), under
 * [ushuffled], once. Values are kept for the process's life. */
static int on_config(void *user, const char *section, const char *key,
		     const char *value)
{
	struct config *c = user;
	char name[64], where[600];
	snprintf(name, sizeof(name), "%s", key);
	for (char *p = name; *p; p++)
		*p = *p == '_' ? '-' : *p;
	snprintf(where, sizeof(where), "%s:%d: [%s] ", c->file, c->line,
		 section);
	const struct dopt *d = NULL;
	for (size_t i = 0; i < NDOPTS && !d; i++)
		if (!strcmp(dopts[i].name, name) && !strchr("cVh", dopts[i].code))
			d = &dopts[i];
	if (c->failed)
		return 0;
	c->failed = 1;
	if (strcmp(section, "ushuffled"))
		fprintf(stderr, "ushuffled: %s%s=%s: outside [ushuffled]; "
			"accepted: keys under a [ushuffled] section\n", where,
			key, value);
	else if (!d)
		fprintf(stderr, "ushuffled: %s%s=%s: unknown key; accepted: "
			"the long options of ushuffled --help, without the "
			"dashes (config, version and help aside)\n", where, key,
			value);
	else if (c->set[d - dopts])
		fprintf(stderr, "ushuffled: %s%s=%s: set before, on line %d; "
			"accepted: each key once\n", where, key, value,
			c->set[d - dopts]);
	else if (apply(c->o, d->code, keep(value)))
		bad_value(where, d->name, value, d->code);
	else
		c->failed = 0, c->set[d - dopts] = c->line;
	return !c->failed;
}

static int load_config(const char *file, struct ush_worker_opts *o)
{
	struct config c = {.file = file, .o = o, .f = fopen(file, "r")};
	struct stat st = {0};
	if (c.f && !fstat(fileno(c.f), &st) && S_ISDIR(st.st_mode))
		errno = EISDIR;
	if (!c.f || S_ISDIR(st.st_mode)) {
		fprintf(stderr, "ushuffled: --config=%s: cannot read it: %s; "
			"accepted: an INI file\n", file, strerror(errno));
		if (c.f)
			fclose(c.f);
		return -1;
	}
	int r = ini_parse_stream(config_line, &c, on_config, &c);
	fclose(c.f);
	if (c.failed)
		return -1; /* on_config said why */
	if (c.read_err)
		fprintf(stderr, "ushuffled: --config=%s: line %d: cannot read "
			"it: %s\n", file, c.line + 1, strerror(c.read_err));
	else if (c.long_line)
		fprintf(stderr, "ushuffled: --config=%s: line %d: too long; "
			"accepted: lines of at most %d characters\n", file,
			c.long_line, INI_MAX_LINE - 2);
	else if (r)
		fprintf(stderr, "ushuffled: --config=%s: line %d: syntax error; "
			"accepted: [ushuffled], KEY=VALUE or a comment\n", file,
			r);
	return r || c.read_err || c.long_line ? -1 : 0;
}

int daemon_parse(int argc, char **argv, struct ush_worker_opts *o)
{
	struct option lopts[NDOPTS + 1];
	memset(lopts, 0, sizeof(lopts));
	for (size_t i = 0; i < NDOPTS; i++)
		lopts[i] = (struct option){dopts[i].name,
					   dopts[i].has_arg ? required_argument
							    : no_argument,
					   NULL, dopts[i].code};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", lopts, NULL)) != -1)
		if (c == 'c' && load_config(optarg, o))
			return 2;
	optind = 0; /* glibc: start over */
	opterr = 1;
	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		const struct dopt *d = dopt_of(c);
		switch (c) {
		case 'V':
			printf("ushuffled %s\n", ush_version_string());
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		case 'c':
			break;
		case '?':
			fprintf(stderr, "ushuffled: see ushuffled --help\n");
			return 2;
		default:
			if (apply(o, c, d->has_arg ? optarg : "1"))
				return bad_value("", d->name, optarg, c), 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ushuffled: %s: unexpected argument; accepted: "
			"--NAME=VALUE options only\n", argv[optind]);
		return 2;
	}
	if (!o->dir) {
		fprintf(stderr, "ushuffled: --dir is required; accepted: "
			"--dir=PATH, or dir=PATH in --config's [ushuffled]\n");
		return 2;
	}
	if (o->insecure_non_loopback && !o->insecure) {
		fprintf(stderr, "ushuffled: --insecure-non-loopback needs "
			"--insecure\n");
		return 2;
	}
	return -1;
}

