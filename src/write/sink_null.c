/* The null target: frames are built (codec, CRC) and dropped, no I/O. */
#include "write/writer.h"

static int null_open(struct ush_writer *w)
{
	(void)w;
	return 0;
}

static int null_submit(struct ush_writer *w, struct ushi_buf *b, uint8_t *mem,
		       uint32_t flen, uint32_t partition)
{
	(void)partition;
	writer_stored(w, flen);
	writer_frame_done(w, b, mem, 0);
	return 0;
}

static int null_commit(struct ush_writer *w)
{
	(void)w;
	return 0;
}

static void null_abort(struct ush_writer *w)
{
	(void)w;
}

const struct ushi_sink_ops ushi_sink_null = {
	.name = "null",
	.open = null_open,
	.submit = null_submit,
	.commit = null_commit,
	.abort = null_abort,
};
