/*
 * ushuffled: the shuffle worker daemon, a thin main around the library's
 * ush_worker. Runs in the foreground; SIGTERM or SIGINT drain and exit 0.
 */
#include <ushuffle/worker.h>

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ush_worker *worker;

static void on_signal(int sig)
{
	(void)sig;
	if (worker)
		ush_worker_stop(worker); /* an atomic store: signal-safe */
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
		"  --direct=0|1        O_DIRECT partition files (default 0)\n"
		"  --log-level=LEVEL   error, info (default) or debug\n"
		"  --window=BYTES      credit per connection (default 4 MiB)\n"
		"  --max-frame=BYTES   largest frame accepted (default 64 MiB)\n"
		"  --pool=BYTES        registered flush memory per thread "
		"(default 32 MiB)\n"
		"  --hello-timeout=MS  close connections silent this long "
		"before HELLO (10000)\n"
		"  --max-open-files=N  partition files kept open (default: a "
		"quarter of\n"
		"                      RLIMIT_NOFILE's soft limit)\n");
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
		{"max-open-files", required_argument, NULL, 'F'},
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
		case 'F':
			bad = number(optarg, &v) || v < 1 || v > (1u << 30);
			o.max_open_files = (unsigned)v;
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
	int ret = ush_worker_create(&worker, &o);
	if (ret) {
		fprintf(stderr, "ushuffled: %s\n", ush_worker_last_error());
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
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
