/*
 * What the sinks report into: a writer's sticky error, its frames done
 * with, and its map status. Below both writer.c and the sinks, so the
 * writer calls its sink and the sink reports here, and neither calls the
 * other back.
 */
#include "core/status.h"
#include "write/writer.h"

#include <stdarg.h>
#include <stdio.h>

void writer_error(struct ush_writer *w, int err, const char *fmt, ...)
{
	if (w->err)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(w->errmsg, sizeof(w->errmsg), fmt, ap);
	va_end(ap);
	ushi_add_cause(w->errmsg, sizeof(w->errmsg), n, err);
	w->err = err;
}

void writer_frame_done(struct ush_writer *w, struct ushi_buf *b,
		       const uint8_t *mem, uint64_t t0)
{
	if (t0)
		ush_lat_add(&w->complete_lat, ushi_now_ns() - t0);
	if (b)
		pool_put(w->pool, b);
	else
		ushi_free((void *)mem);
	w->inflight--;
}

static void part_entry(const void *arg, uint32_t p, uint64_t *batches,
		       uint32_t *sum)
{
	const struct ushi_part *part = &((const struct ushi_part *)arg)[p];
	*batches = part->st.batches;
	*sum = ~part->sum;
}

/* The map status of the committed output: where it lives and, per
 * partition, its batches and their checksum. */
int writer_build_status(struct ush_writer *w, const uint64_t *holders)
{
	if (w->o.target == USH_TARGET_NULL)
		return 0; /* nothing stored, nothing to read */
	const char *loc = w->o.target == USH_TARGET_NET ? w->o.workers :
							  w->o.dir;
	struct status s = {
		.target = (uint8_t)w->o.target,
		.shuffle = w->o.shuffle,
		.map = w->o.map,
		.attempt = w->o.attempt,
		.partitions = w->o.partitions,
		.app = w->o.app,
		.app_len = (uint32_t)strlen(w->o.app),
		.loc = loc,
		.loc_len = (uint32_t)strlen(loc),
		.holders = holders,
		.sealed = w->tail != 0,
		.seal_id = w->seal_id,
		.salt = w->seal_salt,
	};
	ushi_free(w->status); /* a retried commit's */
	w->status = NULL;
	if (status_build(&w->status, &w->status_len, &s, part_entry,
			 w->parts))
		return ushi_fail(-ENOMEM, "writer: map status of %u "
				"partitions", w->o.partitions);
	return 0;
}
