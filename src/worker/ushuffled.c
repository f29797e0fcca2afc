/*
 * ushuffled: the shuffle worker daemon, a thin main around the library's
 * ush_worker. Runs in the foreground; SIGTERM or SIGINT drain and exit 0;
 * SIGHUP reopens --log-file (logrotate); SIGUSR2 decommissions (exit 0
 * once no shuffle is left). Options: ushuffled_opts.c;
 * --metrics: ushuffled_metrics.c; systemd readiness and watchdog:
 * supervise() below. docs/operations.md.
 */
#include "worker/ushuffled.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef USH_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static ush_worker *worker;

/* Points stderr (every log line) at daemon_log_path, created if missing.
 * Async-signal-safe (open, dup2, close, write): SIGHUP calls it, so a
 * rotated file is let go of at once, not at the next line. */
static int open_log(void)
{
	int fd = open(daemon_log_path,
		      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
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
	if (daemon_log_path && !open_log())
		m = ok, n = sizeof(ok);
	else if (daemon_log_path)
		m = no, n = sizeof(no);
	if (write(STDERR_FILENO, m, n - 1) < 0)
		(void)0; /* nowhere to report it */
	errno = e;
}

/* One prefix per line, whatever the worker library logs. */
static void log_line(void *arg, const char *msg)
{
	(void)arg;
	fprintf(stderr, "ushuffled: %s\n", msg);
}

/* Set by the handler on whichever thread the signal lands (a worker
 * thread, often), read by the main thread: an atomic, lock-free and so
 * signal-safe, where a sig_atomic_t orders nothing across threads. */
static atomic_int stopping;

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&stopping, 1);
	if (worker)
		ush_worker_stop(worker); /* an atomic store: signal-safe */
}

/* SIGUSR2: decommission (docs/operations.md, "Decommission"); the
 * worker logs it on its next pass. */
static atomic_bool decommissioning; /* as stopping above */

static void on_usr2(int sig)
{
	(void)sig;
	atomic_store(&decommissioning, true);
	if (worker)
		ush_worker_decommission(worker); /* an atomic store */
}

/*
 * Serves until a signal stops the worker, or a decommission ends. Under
 * systemd (Type=notify): READY=1 once serving, the shuffles left while
 * decommissioning, and with WatchdogSec= a WATCHDOG=1 every half period
 * while no worker thread has stalled for a whole period, so a hung
 * thread gets the daemon restarted.
 */
/* The shortest watchdog period kept: worker threads pass their loop
 * every 100 ms while healthy, so a shorter one would see stalls in every
 * healthy thread (and under 2 us, half of it, the loop's sleep, was 0:
 * it spun). */
#define WATCHDOG_MIN_USEC 400000ull

/* systemd's watchdog period (WATCHDOG_USEC) in microseconds, 0 for none.
 * A value it refuses is said and ignored; one too short is said and
 * raised. */
static uint64_t watchdog_usec(void)
{
	uint64_t usec = 0;
#ifdef USH_HAVE_SYSTEMD
	const char *env = getenv("WATCHDOG_USEC");
	int r = sd_watchdog_enabled(0, &usec);
	if (r < 0)
		fprintf(stderr, "ushuffled: WATCHDOG_USEC=%s: %s; accepted: "
			"microseconds above 0; no watchdog pings\n",
			env ? env : "", strerror(-r));
	if (r <= 0)
		return 0;
	if (usec < WATCHDOG_MIN_USEC) {
		fprintf(stderr, "ushuffled: WATCHDOG_USEC=%llu is below %llu "
			"(worker threads pass every 100 ms): pinging as for "
			"%llu, every %llu us; raise WatchdogSec=\n",
			(unsigned long long)usec, WATCHDOG_MIN_USEC,
			WATCHDOG_MIN_USEC, WATCHDOG_MIN_USEC / 2);
		usec = WATCHDOG_MIN_USEC;
	}
#endif
	return usec;
}

static void supervise(void)
{
	uint64_t wd_usec = watchdog_usec();
#ifdef USH_HAVE_SYSTEMD
	sd_notifyf(0, "READY=1\nSTATUS=serving on port %d",
		   ush_worker_port(worker));
#endif
	uint64_t step = wd_usec ? wd_usec / 2 : 200000;
	step = step > 200000 ? 200000 : step;
	uint64_t since = 0;
#ifdef USH_HAVE_SYSTEMD
	uint64_t left = UINT64_MAX;
#endif
	while (!atomic_load(&stopping)) {
		struct timespec ts = {(time_t)(step / 1000000),
				      (long)(step % 1000000) * 1000};
		nanosleep(&ts, NULL);
		since += step;
		bool due = wd_usec && since >= wd_usec / 2;
		/* The stats take the worker's lock: read only when needed. */
		if (!due && !atomic_load(&decommissioning))
			continue;
		struct ush_worker_stats st;
		ush_worker_stats(worker, &st);
		/* A decommission that is done stops the worker itself:
		 * ush_worker_wait() returns. */
		if (st.decommissioning && !st.shuffles)
			break;
#ifdef USH_HAVE_SYSTEMD
		if (st.decommissioning && st.shuffles != left)
			sd_notifyf(0, "STATUS=decommissioning: %llu shuffles "
				   "left", (unsigned long long)st.shuffles);
		left = st.decommissioning ? st.shuffles : UINT64_MAX;
#endif
		if (!due)
			continue;
		since = 0;
		if (st.stalled_ms * 1000 >= wd_usec)
			continue; /* let the watchdog fire */
#ifdef USH_HAVE_SYSTEMD
		sd_notify(0, "WATCHDOG=1");
#endif
	}
#ifdef USH_HAVE_SYSTEMD
	sd_notify(0, "STOPPING=1");
#endif
}

int main(int argc, char **argv)
{
	struct ush_worker_opts o;
	ush_worker_opts_init(&o);
	int status = daemon_parse(argc, argv, &o);
	if (status >= 0)
		return status;
	ush_worker_set_log(log_line, NULL);
	/* Never on the command line (ps shows it to every user): a file,
	 * or the environment. */
	const char *env = getenv("USHUFFLE_SECRET");
	if (!o.secret_file && env && *env) {
		o.secret = env;
		o.secret_len = strlen(env);
	}
	if (daemon_log_path && open_log()) {
		fprintf(stderr, "ushuffled: --log-file=%s: %s\n", daemon_log_path,
			strerror(errno));
		return 1;
	}
	char err[512];
	if (daemon_metrics && metrics_listen(daemon_metrics, err, sizeof(err))) {
		fprintf(stderr, "ushuffled: %s\n", err);
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
		metrics_stop();
		/* -EINVAL: options that do not work together (--insecure off
		 * loopback, no secret): exit as a bad option does. */
		return ret == -EINVAL ? 2 : 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	struct sigaction hup = {.sa_handler = on_hup, .sa_flags = SA_RESTART};
	sigemptyset(&hup.sa_mask);
	sigaction(SIGHUP, &hup, NULL);
	struct sigaction usr2 = {.sa_handler = on_usr2, .sa_flags = SA_RESTART};
	sigemptyset(&usr2.sa_mask);
	sigaction(SIGUSR2, &usr2, NULL);
	signal(SIGPIPE, SIG_IGN);
	ret = ush_worker_start(worker);
	if (ret)
		fprintf(stderr, "ushuffled: %s\n", ush_worker_last_error());
	else if ((ret = metrics_start(worker, o.sync))) {
		fprintf(stderr, "ushuffled: --metrics: cannot start its "
			"thread: %s\n", strerror(-ret));
		ush_worker_stop(worker);
	}
	if (!ret) {
		if (daemon_metrics)
			fprintf(stderr, "ushuffled: metrics on %s (port %d), "
				"GET /metrics\n", daemon_metrics, metrics_port());
		/* Scripts and tests read the bound port from this line. */
		printf("ushuffled: port %d\n", ush_worker_port(worker));
		fflush(stdout);
		supervise();
	}
	int wret = ush_worker_wait(worker);
	if (!ret && wret) {
		fprintf(stderr, "ushuffled: %s\n", ush_strerror(wret));
		ret = wret;
	}
	metrics_stop();
	ush_worker_free(worker);
	return ret ? 1 : 0;
}
