/* A connection, the top of its layers (conn.c). */
#ifndef USHI_WK_CONN_H
#define USHI_WK_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wk_conn;

/* Handles what its receives brought: frames dispatched, chunks given
 * back. */
void wk_conn_process(struct wk_conn *c);
/* During a drain: whether c is in the middle of something that may
 * still finish (a push not yet closed, a stream, a frame, output). */
bool wk_conn_busy(const struct wk_conn *c);
/* Sends the next output (a credit ACK first when none is queued). */
void wk_conn_pump(struct wk_conn *c);

#endif
