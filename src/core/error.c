/* Error names, messages and the per-thread detail buffer. */
#define _GNU_SOURCE /* strerrorname_np */
#include "core/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local char last_msg[512];

static void default_log(void *arg, const char *msg)
{
	(void)arg;
	fprintf(stderr, "ushuffle: %s\n", msg);
}

static ush_log_fn log_fn = default_log;
static void *log_arg;

void ush_set_log(ush_log_fn fn, void *arg)
{
	log_fn = fn ? fn : default_log;
	log_arg = fn ? arg : NULL;
}

const char *ush_strerror(int err)
{
	switch (err) {
#define X(name, code, msg)                                                   \
	case code:                                                           \
		return msg;
		USH_ERRORS(X)
#undef X
	}
	return err < 0 && err > -4000 ? strerror(-err) : "unknown error";
}

const char *ush_err_name(int err)
{
	switch (err) {
#define X(name, code, msg)                                                   \
	case code:                                                           \
		return "USH_E" #name;
		USH_ERRORS(X)
#undef X
	}
	const char *n = err < 0 && err > -4000 ? strerrorname_np(-err) : NULL;
	return n ? n : "UNKNOWN";
}

const char *ush_last_error(void)
{
	return last_msg;
}

int ushi_fail(int err, const char *fmt, ...)
{
	USHI_COUNT(errors, 1);
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
	va_end(ap);
	ushi_add_cause(last_msg, sizeof(last_msg), n, err);
	return err;
}

int ushi_fail_msg(int err, const char *msg)
{
	USHI_COUNT(errors, 1);
	snprintf(last_msg, sizeof(last_msg), "%s", msg);
	return err;
}

void ushi_warn(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_fn(log_arg, msg);
}

_Noreturn void ushi_panic(const char *fmt, ...)
{
	va_list ap;
	fputs("ushuffle: BUG: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}
