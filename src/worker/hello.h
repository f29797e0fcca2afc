/* A connection's handshake (hello.c). */
#ifndef USHI_WK_HELLO_H
#define USHI_WK_HELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wk_conn;
struct ushi_frame;

/* A HELLO (the whole frame, f parsed). */
void wk_hello(struct wk_conn *c, const struct ushi_frame *f,
	      const uint8_t *frame);
/* The client's AUTH (its payload). */
void wk_auth(struct wk_conn *c, const uint8_t *payload);
/* The client closed while its AUTH was due: logged and counted. */
void wk_auth_abandoned(struct wk_conn *c);
/* Is shuffle c's application's? An unowned one is claimed for it when
 * claim is set. Fails c (-EACCES, -EDQUOT) otherwise. Lock held. */
int wk_own_shuffle(struct wk_conn *c, uint32_t shuffle, bool claim);
/* Fails c for wk_app_seen()'s error. */
void wk_app_refused(struct wk_conn *c, int ret);

#endif
