/*
 * The worker's log lines, rate-limited per kind, and its error and sync
 * counters: the bottom of the worker, called from every layer and
 * calling none.
 */
#define _GNU_SOURCE
#include "worker/thread.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

void wk_count_error(struct ush_worker *wk, int code)
{
	enum ush_worker_error_kind k;
	switch (code) {
	case -EACCES: case -EPERM: k = USH_WORKER_ERR_AUTH; break;
	case -EDQUOT: k = USH_WORKER_ERR_QUOTA; break;
	case -EBUSY: k = USH_WORKER_ERR_LIMIT; break;
	case -ETIMEDOUT: k = USH_WORKER_ERR_TIMEOUT; break;
	case -ESHUTDOWN: case USH_EDRAINING: /* told it stops, or drains */
		k = USH_WORKER_ERR_SHUTDOWN; break;
	case -EIO: case -ENOSPC: case -EROFS: case -EFBIG:
		k = USH_WORKER_ERR_STORAGE; break;
	case -EPROTO: case -EINVAL: case -EMSGSIZE: case USH_ECRC:
	case USH_ECORRUPT: case USH_EVERSION:
		k = USH_WORKER_ERR_PROTOCOL; break;
	default: k = USH_WORKER_ERR_OTHER;
	}
	WK_COUNT(wk, errors[k], 1);
}

void wk_count_sync(struct ush_worker *wk, uint64_t ns)
{
	unsigned i = 0;
	while (i < USH_WORKER_SYNC_BUCKETS &&
	       ns > USH_WORKER_SYNC_BUCKET_US(i) * 1000)
		i++;
	pthread_mutex_lock(&wk->m.sync_lock);
	wk->m.sync_count++;
	wk->m.sync_ns += ns;
	if (i < USH_WORKER_SYNC_BUCKETS)
		wk->m.sync_bucket[i]++;
	pthread_mutex_unlock(&wk->m.sync_lock);
}

/* The rate of fmt's lines: true if this one may be printed. Lock held. */
static bool log_admit(struct ush_worker *wk, const char *fmt, uint64_t sec)
{
	struct wk_log_kind *k = NULL;
	for (unsigned i = 0; i < WK_LOG_KINDS && !k; i++)
		if (wk->log_kinds[i].fmt == fmt || !wk->log_kinds[i].fmt)
			k = &wk->log_kinds[i];
	if (!k)
		return true; /* more kinds than slots: format strings are
				literals, so this does not happen */
	k->fmt = fmt;
	if (k->second != sec) {
		k->second = sec;
		k->lines = 0;
	}
	if (k->lines < WK_LOG_BURST) {
		k->lines++;
		return true;
	}
	k->suppressed++;
	atomic_store(&wk->log_suppressed, true);
	return false;
}

void wk_log(struct ush_worker *wk, int level, const char *fmt, ...)
{
	if (level > wk->o.log_level)
		return;
	wk_log_flush(wk);
	pthread_mutex_lock(&wk->log_lock);
	bool ok = log_admit(wk, fmt, ushi_now_ns() / 1000000000u);
	pthread_mutex_unlock(&wk->log_lock);
	if (!ok)
		return;
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ushi_warn("%s", msg); /* the log sink adds the program's prefix */
}

int wk_refuse(int err, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return ushi_fail_msg(err, msg);
}

void wk_log_flush(struct ush_worker *wk)
{
	if (!atomic_load(&wk->log_suppressed))
		return;
	uint64_t sec = ushi_now_ns() / 1000000000u;
	pthread_mutex_lock(&wk->log_lock);
	bool more = false;
	for (unsigned i = 0; i < WK_LOG_KINDS && wk->log_kinds[i].fmt; i++) {
		struct wk_log_kind *k = &wk->log_kinds[i];
		if (!k->suppressed || k->second == sec) {
			more |= k->suppressed > 0;
			continue;
		}
		/* The format names the kind: its arguments vary. */
		ushi_warn("... suppressed %lu similar lines "
			  "(\"%.60s\")", k->suppressed, k->fmt);
		k->suppressed = 0;
	}
	atomic_store(&wk->log_suppressed, more);
	pthread_mutex_unlock(&wk->log_lock);
}
