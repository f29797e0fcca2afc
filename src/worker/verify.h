/* Replay's check of a commit record against its data (verify.c). */
#ifndef USHI_WK_VERIFY_H
#define USHI_WK_VERIFY_H

#include "worker/wal.h"

struct ush_worker;

/* Whether the files hold exactly the data r names (r->sum): 0, or why
 * not (USH_ECORRUPT, or the error reading them), logged. A wk_rec_check_fn
 * for wk_log_replay(). */
int wk_verify_commit(struct ush_worker *wk, const struct wk_rec *r);

#endif
