/* The null target: frames are built (codec, CRC) and dropped, no I/O.
 * Staged frames (stage.c) are built in a private pack of the push size,
 * as the disk sink builds them in its packs, and dropped once it fills. */
#include "write/writer.h"

#include <errno.h>

struct null_pack {
	uint32_t cap, len;
	uint8_t buf[];
};

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

/* The pack, made at its first use. */
static struct null_pack *pack(struct ush_writer *w)
{
	struct null_pack *n = w->sink_state;
	if (!n) {
		size_t cap = w->ropts->push_size;
		if (!(n = ushi_malloc(sizeof(*n) + cap))) {
			ushi_fail(-ENOMEM, "null: pack");
			return NULL;
		}
		*n = (struct null_pack){.cap = (uint32_t)cap};
		w->sink_state = n;
	}
	return n;
}

static int null_pack_room(struct ush_writer *w, uint32_t partition,
			  uint8_t **p, uint32_t *room)
{
	(void)partition;
	struct null_pack *n = pack(w);
	if (!n)
		return -ENOMEM;
	*p = n->buf + n->len;
	*room = n->cap - n->len;
	return 0;
}

static int null_pack_add(struct ush_writer *w, const uint8_t *p, uint32_t flen,
			 uint32_t partition)
{
	(void)partition;
	struct null_pack *n = pack(w);
	if (!n)
		return -ENOMEM;
	writer_stored(w, flen);
	/* A frame from elsewhere would be copied in across packs. */
	if (p != n->buf + n->len)
		flen %= n->cap;
	n->len = (n->len + flen) % n->cap;
	return 0;
}

static int null_span_put(struct ush_writer *w, struct ushi_buf *b, uint32_t len,
			 const struct ushi_span_frame *fr, uint32_t nfr)
{
	(void)fr;
	(void)nfr;
	writer_stored(w, len);
	pool_put(w->pool, b);
	return 0;
}

static int null_commit(struct ush_writer *w)
{
	ushi_free(w->sink_state);
	w->sink_state = NULL;
	return 0;
}

static void null_abort(struct ush_writer *w)
{
	null_commit(w);
}

const struct ushi_sink_ops ushi_sink_null = {
	.name = "null",
	.open = null_open,
	.submit = null_submit,
	.commit = null_commit,
	.abort = null_abort,
	.release = null_abort,
	.pack_room = null_pack_room,
	.pack_add = null_pack_add,
	.span_put = null_span_put,
};
