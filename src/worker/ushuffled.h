/* The ushuffled daemon's own modules (not the worker library's). */
#ifndef USHUFFLED_H
#define USHUFFLED_H

#include <ushuffle/worker.h>

#include <stddef.h>

/* ushuffled_opts.c: the command line over a --config file. */
extern const char *daemon_log_path; /* --log-file, or NULL: stderr */
extern const char *daemon_metrics;  /* --metrics, or NULL */
/* Fills o (initialised) from argv, over a --config file's settings:
 * --config first, wherever it is, then the other options in order. Returns
 * -1 to go on, else the exit status (0 after --help or --version, 2
 * after one message naming the option, the value and what is accepted). */
int daemon_parse(int argc, char **argv, struct ush_worker_opts *o);

/* ushuffled_metrics.c: --metrics=HOST:PORT. */
/* Binds the endpoint (before the worker starts, so a bad address stops
 * the daemon at once): 0, or -1 with a message in err. */
int metrics_listen(const char *hostport, char *err, size_t n);
/* The bound port, or -1 when not listening. */
int metrics_port(void);
/* Serves w's counters, and its sync mode (--sync), from a thread of its
 * own (nothing when not listening). Returns 0 or -errno. */
int metrics_start(ush_worker *w, unsigned sync);
void metrics_stop(void);
/* w's counters in the Prometheus text format into buf (n bytes, cut
 * there); returns the length of the whole text. */
size_t metrics_text(ush_worker *w, char *buf, size_t n);

#endif
