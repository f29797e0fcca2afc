/* A writer's in-place receive (inplace.c). */
#ifndef USHI_WK_INPLACE_H
#define USHI_WK_INPLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wk_conn;

/* Parses the frames that arrived whole in rb, where they lie. */
void wk_rb_parse(struct wk_conn *c);
/* Before a receive is armed: gives a writer at a frame boundary its
 * in-place buffer when the pool can spare one, and takes it back from a
 * connection that no longer writes. */
void wk_conn_rb_arm(struct wk_conn *c);
/* Frees what the connection holds for its receives (no recv armed). */
void wk_conn_rb_free(struct wk_conn *c);

#endif
