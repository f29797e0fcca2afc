/*
 * ushuffled: the shuffle worker daemon, a thin main around the library's
 * ush_worker. Runs in the foreground; SIGTERM or SIGINT drain and exit 0;
 * SIGHUP reopens --log-file (logrotate).
 */
#include <ushuffle/worker.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static ush_worker *worker;
static const char *log_path; /* --log-file: stderr goes there */

static void on_signal(int sig)
{
	(void)sig;
	if (worker)
		ush_worker_stop(worker); /* an atomic store: signal-safe */
}

/* Points stderr (every log line) at log_path, created if missing.
 * Async-signal-safe (open, dup2, close, write): SIGHUP calls it, so a
 * rotated file is let go of at once, not at the next line. */
static int open_log(void)
{
	int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
		      0644);
	if (fd < 0)
		return -1;
	int ret = dup2(fd, STDERR_FILENO) < 0 ? -1 : 0;
	close(fd);
	return ret;
}

static void on_hup(int sig)
{
	(void)sig;
	int e = errno;
	static const char ok[] = "ushuffled: SIGHUP: log file reopened\n";
	static const char no[] = "ushuffled: SIGHUP: cannot reopen the log "
				 "file; logging on to the old one\n";
	static const char none[] = "ushuffled: SIGHUP ignored: no --log-file "
				   "to reopen\n";
	const char *m = none;
	size_t n = sizeof(none);
	if (log_path && !open_log())
		m = ok, n = sizeof(ok);
	else if (log_path)
		m = no, n = sizeof(no);
	if (write(STDERR_FILENO, m, n - 1) < 0)
		(void)0; /* nowhere to report it */
	errno = e;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ushuffled [options]\n"
		"  --listen=HOST:PORT  address to serve (default 127.0.0.1:7337;"
		" port 0: any)\n"
		"  --dir=PATH          storage directory (required)\n"
		"  --threads=N         threads, one ring and listener each "
		"(default: one per CPU)\n"
		"  --direct=0|1        O_DIRECT shuffle logs (default 1)\n"
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
		"Limits and defaults: docs/protocol.md, \"Limits\".\n");
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

static int number(const char *s, unsigned long long *v)
{
	char *end;
	*v = strtoull(s, &end, 10);
	if (end == s)
		return -1;
	if (*end == 'k' || *end == 'K')
		*v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		*v <<= 20, end++;
	else if (*end == 'g' || *end == 'G')
		*v <<= 30, end++;
	return *end ? -1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"dir", required_argument, NULL, 'd'},
		{"threads", required_argument, NULL, 't'},
		{"direct", required_argument, NULL, 'D'},
		{"log-level", required_argument, NULL, 'v'},
		{"window", required_argument, NULL, 'w'},
		{"max-frame", required_argument, NULL, 'm'},
		{"pool", required_argument, NULL, 'p'},
		{"hello-timeout", required_argument, NULL, 'H'},
		{"app-ttl", required_argument, NULL, 'A'},
		{"idle-timeout", required_argument, NULL, 'I'},
		{"max-conns", required_argument, NULL, 'C'},
		{"drain-timeout", required_argument, NULL, 'T'},
		{"log-file", required_argument, NULL, 'L'},
		{"version", no_argument, NULL, 'V'},
		{"max-open-files", required_argument, NULL, 'F'},
		{"secret-file", required_argument, NULL, 'S'},
		{"secrets-dir", required_argument, NULL, 'Y'},
		{"insecure", no_argument, NULL, 'i'},
		{"insecure-non-loopback", no_argument, NULL, 'N'},
		{"max-app-conns", required_argument, NULL, 'a'},
		{"max-app-shuffles", required_argument, NULL, 's'},
		{"max-app-bytes", required_argument, NULL, 'b'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	int c;
	unsigned long long v;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'l': o.listen = optarg; break;
		case 'd': o.dir = optarg; break;
		case 't':
			bad = number(optarg, &v) || v < 1 || v > 1024;
			o.threads = (unsigned)v;
			break;
		case 'D':
			bad = strcmp(optarg, "0") && strcmp(optarg, "1");
			o.direct = optarg[0] == '1';
			break;
		case 'v':
			o.log_level = level(optarg);
			bad = o.log_level < 0;
			break;
		case 'w':
			bad = number(optarg, &v) || v < 4096 || v > (1u << 30);
			o.window = (uint32_t)v;
			break;
		case 'm':
			bad = number(optarg, &v) || v > (1u << 30);
			o.max_frame = (uint32_t)v;
			break;
		case 'p':
			bad = number(optarg, &v);
			o.pool_bytes = (size_t)v;
			break;
		case 'H':
			bad = number(optarg, &v) || v < 1 || v > 3600000;
			o.hello_timeout_ms = (uint32_t)v;
			break;
		case 'A':
			bad = number(optarg, &v) || v < 1 || v > 1u << 31;
			o.app_ttl_ms = (uint32_t)v;
			break;
		case 'I':
			bad = number(optarg, &v) || v < 1 || v > 86400000;
			o.idle_timeout_ms = (uint32_t)v;
			break;
		case 'C':
			bad = number(optarg, &v) || v < 1 || v > 1536 * 1024;
			o.max_conns = (unsigned)v;
			break;
		case 'T':
			bad = number(optarg, &v) || v < 1 || v > 3600000;
			o.drain_timeout_ms = (uint32_t)v;
			break;
		case 'L':
			bad = !*optarg;
			log_path = optarg;
			break;
		case 'V':
			printf("ushuffled %s\n", ush_version_string());
			return 0;
		case 'F':
			bad = number(optarg, &v) || v < 1 || v > (1u << 30);
			o.max_open_files = (unsigned)v;
			break;
		case 'S':
			bad = !*optarg;
			o.secret_file = optarg;
			break;
		case 'Y':
			bad = !*optarg;
			o.secrets_dir = optarg;
			break;
		case 'i':
			o.insecure = 1;
			break;
		case 'N':
			o.insecure_non_loopback = 1;
			break;
		case 'a':
			bad = number(optarg, &v) || v < 1 || v > 1u << 30;
			o.max_app_conns = (unsigned)v;
			break;
		case 's':
			bad = number(optarg, &v) || v < 1 || v > 1u << 30;
			o.max_app_shuffles = (unsigned)v;
			break;
		case 'b':
			bad = number(optarg, &v) || v < 1;
			o.max_app_bytes = v;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (bad) {
			fprintf(stderr, "ushuffled: bad value: %s\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc || !o.dir) {
		usage(stderr);
		return 2;
	}
	/* Never on the command line (ps shows it to every user): a file,
	 * or the environment. */
	const char *env = getenv("USHUFFLE_SECRET");
	if (!o.secret_file && env && *env) {
		o.secret = env;
		o.secret_len = strlen(env);
	}
	if (o.insecure_non_loopback && !o.insecure) {
		fprintf(stderr, "ushuffled: --insecure-non-loopback needs "
			"--insecure\n");
		return 2;
	}
	if (log_path && open_log()) {
		fprintf(stderr, "ushuffled: --log-file=%s: %s\n", log_path,
			strerror(errno));
		return 1;
	}
	/* Each connection is a descriptor, and the soft limit is often 1024
	 * below a far higher hard one: raise it, as systemd asks of programs
	 * that need many (nothing here uses select()). */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	int ret = ush_worker_create(&worker, &o);
	if (ret) {
		fprintf(stderr, "ushuffled: %s\n", ush_worker_last_error());
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	struct sigaction hup = {.sa_handler = on_hup, .sa_flags = SA_RESTART};
	sigemptyset(&hup.sa_mask);
	sigaction(SIGHUP, &hup, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* Scripts and tests read the bound port from this line. */
	printf("ushuffled: port %d\n", ush_worker_port(worker));
	fflush(stdout);
	ret = ush_worker_run(worker);
	if (ret)
		fprintf(stderr, "ushuffled: %s\n", ush_strerror(ret));
	ush_worker_free(worker);
	return ret ? 1 : 0;
}
