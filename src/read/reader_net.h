/*
 * One worker's stream behind ush_reader (src/read/reader_net.c): FETCH of
 * a partition's frames of the attempts the reader was given, read back
 * frame by frame, every frame bounded and its CRC checked.
 */
#ifndef USHI_READER_NET_H
#define USHI_READER_NET_H

#include "net/proto.h"

struct reader_net;

/* Asks peer, as app, for the frames of the n entries w (ascending
 * (partition, map), each naming an attempt of a partition in [first,
 * first + count)), on a connection kept from an earlier stream or a new
 * one (net_conn_take()); reads the worker's acceptance or refusal (a
 * named attempt it does not hold committed: USH_ENOTCOMMITTED). The
 * connection goes back to the pool at the stream's FETCH_END. Waits for
 * the worker up to timeout_ms, or, with replica (another replica can go
 * on with every map), up to the stall window (net.h) only. */
int reader_net_open(struct reader_net **out, const char *peer,
		    const char *app, uint32_t shuffle, uint32_t first,
		    uint32_t count, const struct proto_want *w, uint32_t n,
		    uint32_t timeout_ms, bool replica);
/* The next DATA frame: returns 1 with *f and *frame (the whole frame,
 * valid until the next call), 0 after a FETCH_END that agrees with the
 * frames received (and at every call after it), or an error naming the
 * worker and offset. Frames come partition after partition. */
int reader_net_frame(struct reader_net *r, struct ushi_frame *f,
		     const uint8_t **frame);
/* The frame just returned comes again at the next reader_net_frame():
 * it is of a partition after the one being read. */
void reader_net_unget(struct reader_net *r);
/* "worker HOST:PORT offset N", the last frame's place, for messages. */
const char *reader_net_where(struct reader_net *r);
/* The worker's address, and the stream offset of the last frame read. */
const char *reader_net_peer(const struct reader_net *r);
uint64_t reader_net_at(const struct reader_net *r);
void reader_net_free(struct reader_net *r);

#endif
