/* A connection's frame reassembly (recv.c). */
#ifndef USHI_WK_RECV_H
#define USHI_WK_RECV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wk_conn;
struct ushi_frame;

/* Parses a complete header into c->f; fails the connection if it breaks
 * a rule or names a frame c may not send now. */
bool wk_header_ok(struct wk_conn *c, const uint8_t *h);
/* Consumes n bytes of c's stream: whole frames are dispatched. */
void wk_feed(struct wk_conn *c, const uint8_t *p, size_t n);

#endif
