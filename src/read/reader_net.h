/* The reader over the network (src/reader_net.c), behind ush_reader. */
#ifndef USHI_READER_NET_H
#define USHI_READER_NET_H

#include "core/internal.h"

struct reader_net;

int reader_net_open(struct reader_net **out, const struct ush_reader_opts *o);
int reader_net_next(struct reader_net *r, const void **rec, size_t *len);
void reader_net_free(struct reader_net *r);
/* Frame totals so far (records are counted by ush_reader). */
void reader_net_stats(const struct reader_net *r, struct ush_reader_stats *st);
const struct ush_lat *reader_net_load_lat(const struct reader_net *r);

#endif
