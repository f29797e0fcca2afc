/*
 * The live status line on stderr, fio's shape, refreshed about once a
 * second by the main thread while the job's threads run:
 *
 *   Jobs: 2 (f=2): [W(2)][45.1%][w=512MiB/s,r=0B/s][eta 00m:03s]
 */
#include "cli.h"

void fmt_iec(char *buf, size_t n, double v)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB",
					   "PiB"};
	unsigned u = 0;
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0 || v >= 100)
		snprintf(buf, n, "%.0f%s", v, unit[u]);
	else
		snprintf(buf, n, "%.*f%s", v >= 10 ? 1 : 2, v, unit[u]);
}

/* Bytes the job will move in all: written, then read back. */
static double total_bytes(const struct job_ctx *j, uint64_t w)
{
	const struct job_opts *o = j->o;
	if (o->rw == RW_READ) {
		double t = 0;
		for (size_t i = 0; i < (size_t)j->maps * j->partitions; i++)
			t += (double)j->expect.bytes[i];
		return t;
	}
	double tw = (double)o->numjobs * (double)o->size;
	if (atomic_load(&j->phase) >= 2) /* writing is over */
		tw = (double)w;
	bool reads = o->rw == RW_SHUFFLE && o->target == TARGET_DISK;
	return reads ? 2 * tw : tw;
}

void eta_tick(struct job_ctx *j, enum eta_tick how)
{
	const struct job_opts *o = j->o;
	if (how == ETA_CLEAR) {
		fprintf(stderr, "\r%79s\r", "");
		return;
	}
	uint64_t now = now_ns(), w = atomic_load(&j->wbytes),
		 r = atomic_load(&j->rbytes);
	if (!j->eta_t)
		j->eta_t = j->t_start;
	double dt = (double)(now - j->eta_t) / 1e9, el = (double)(now -
							     j->t_start) / 1e9;
	char wbw[16], rbw[16];
	fmt_iec(wbw, sizeof(wbw), dt > 0 ? (double)(w - j->eta_w) / dt : 0);
	fmt_iec(rbw, sizeof(rbw), dt > 0 ? (double)(r - j->eta_r) / dt : 0);
	j->eta_t = now;
	j->eta_w = w;
	j->eta_r = r;
	double total = total_bytes(j, w), pct = total > 0 ? (w + r) / total : 0;
	double rt = (double)o->runtime_ms / 1e3;
	bool writing = o->rw != RW_READ && atomic_load(&j->phase) < 2;
	if (o->time_based && (writing || o->rw == RW_READ))
		pct = el / rt;
	pct = pct > 1 ? 1 : pct;
	double eta = pct > 0 ? el * (1 - pct) / pct : 0;
	if (rt > 0 && (writing || o->rw == RW_READ) && eta > rt - el)
		eta = rt > el ? rt - el : 0;
	unsigned left = (unsigned)o->numjobs - atomic_load(&j->threads_done);
	unsigned secs = (unsigned)(eta + 0.5);
	/* A status line of its own names its job: jobs run side by side. */
	if (how == ETA_STATUS)
		fprintf(stderr, "%s: ", o->name);
	else
		fputc('\r', stderr);
	fprintf(stderr, "Jobs: %u (f=%u): [%c(%u)][%.1f%%][w=%s/s,r=%s/s]"
		"[eta %02um:%02us]%s", left, left, writing ? 'W' : 'R', left,
		100 * pct, wbw, rbw, secs / 60, secs % 60,
		how == ETA_REDRAW ? "" : "\n");
	fflush(stderr);
}
