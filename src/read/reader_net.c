/*
 * One worker's stream: FETCH with the attempts wanted, then MANIFEST (or
 * an ERROR refusing), DATA..., FETCH_END. Frames are bounded before
 * anything is allocated and their CRC (the writer's, end to end) checked
 * here; the reader checks everything else against its map statuses.
 */
#include "net/net.h"
#include "read/reader_net.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

struct reader_net {
	int fd;
	char peer[USHI_NET_PEER];
	char where[USHI_NET_PEER + 48];
	uint32_t shuffle, partition;
	uint8_t *fbuf;
	size_t fcap;
	uint64_t off;    /* stream bytes read */
	uint64_t at;     /* stream offset of the last frame read */
	uint64_t frames; /* DATA frames read */
	uint64_t bytes;  /* ... and their bytes */
};

const char *reader_net_where(struct reader_net *r)
{
	snprintf(r->where, sizeof(r->where), "worker %s offset %llu", r->peer,
		 (unsigned long long)r->at);
	return r->where;
}

/* Fails on the frame last read, naming where it starts. */
static int fail_at(struct reader_net *r, int err, const char *what)
{
	return ushi_fail(err, "reader: %s partition %u: %s",
			reader_net_where(r), r->partition, what);
}

/* Reads one whole frame into fbuf, bounded before it is allocated: by
 * the format's limit, not the worker's max_frame, which bounds what it
 * accepts now and may have been larger when the frames were stored. */
static int read_frame(struct reader_net *r, struct ushi_frame *f)
{
	const char *why = "";
	uint8_t h[USH_FRAME_HDR_SIZE];
	r->at = r->off;
	int ret = net_read(r->fd, h, USH_FRAME_HDR_SIZE);
	if (ret == -EPIPE)
		why = "the worker closed the stream";
	if (!ret && (ret = proto_header(h, f, USHI_FRAME_MAX, false, &why)) == 0)
		ret = ushi_grow(&r->fbuf, &r->fcap, proto_size(f));
	if (!ret)
		memcpy(r->fbuf, h, USH_FRAME_HDR_SIZE);
	if (!ret)
		ret = net_read(r->fd, r->fbuf + USH_FRAME_HDR_SIZE,
			       f->payload_len);
	if (!ret && frame_check(r->fbuf, f))
		ret = USH_ECRC, why = "frame CRC32C mismatch";
	if (ret)
		return fail_at(r, ret, *why ? why : ush_strerror(ret));
	r->off += proto_size(f);
	return 0;
}

/* The worker's answer to FETCH: MANIFEST, or an ERROR saying why not. */
static int accepted(struct reader_net *r)
{
	struct ushi_frame f;
	int ret = read_frame(r, &f);
	if (ret)
		return ret;
	if (f.type == USHI_FRAME_ERROR) {
		char msg[USHI_PROTO_ERRMSG_MAX];
		int code = proto_get_error(r->fbuf + USH_FRAME_HDR_SIZE,
					   f.payload_len, msg, sizeof(msg));
		return fail_at(r, code, msg);
	}
	if (f.type != USHI_FRAME_MANIFEST || f.shuffle != r->shuffle ||
	    f.partition != r->partition)
		return fail_at(r, -EPROTO, "expected the MANIFEST");
	return 0;
}

int reader_net_open(struct reader_net **out, const char *peer,
		    const char *app, uint32_t shuffle, uint32_t partition,
		    const struct proto_want *w, uint32_t n,
		    uint32_t timeout_ms)
{
	*out = NULL;
	if (n > USHI_PROTO_WANTS_MAX)
		return ushi_fail(-E2BIG, "reader: %u maps from worker %s "
				"exceed one FETCH (%u)", n, peer,
				(unsigned)USHI_PROTO_WANTS_MAX);
	struct reader_net *r = ushi_calloc(1, sizeof(*r));
	uint8_t *b = ushi_malloc(proto_fetch_size(n));
	if (!r || !b) {
		ushi_free(r);
		ushi_free(b);
		return ushi_fail(-ENOMEM, "reader: FETCH of %u maps", n);
	}
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	r->shuffle = shuffle;
	r->partition = partition;
	struct proto_hello me = {.role = USHI_ROLE_READER}, h;
	snprintf(me.app, sizeof(me.app), "%s", app);
	int ret = net_dial(peer, &me, timeout_ms, &h);
	r->fd = ret;
	if (ret >= 0) {
		ret = net_write(r->fd, b, proto_put_fetch(b, shuffle, partition,
							  0, w, n));
		if (ret)
			ushi_fail(ret, "reader: worker %s: sending FETCH", peer);
		else
			ret = accepted(r);
	}
	ushi_free(b);
	if (ret < 0) {
		reader_net_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

int reader_net_frame(struct reader_net *r, struct ushi_frame *f,
		     const uint8_t **frame)
{
	int ret = read_frame(r, f);
	if (ret)
		return ret;
	*frame = r->fbuf;
	if (f->type == USHI_FRAME_FETCH_END) {
		uint64_t bytes = get_le64(r->fbuf + USH_FRAME_HDR_SIZE);
		return f->seq == r->frames && bytes == r->bytes ?
			       0 :
			       fail_at(r, USH_ECORRUPT, "FETCH_END disagrees "
				       "with the frames received");
	}
	if (f->type != USHI_FRAME_DATA) {
		char what[40];
		snprintf(what, sizeof(what), "unexpected frame type %u",
			 f->type);
		return fail_at(r, -EPROTO, what);
	}
	r->frames++;
	r->bytes += proto_size(f);
	if (f->shuffle != r->shuffle || f->partition != r->partition)
		return fail_at(r, USH_ECORRUPT, "frame of another shuffle or "
			       "partition");
	return 1;
}

void reader_net_free(struct reader_net *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	ushi_free(r->fbuf);
	ushi_free(r);
}
