/* A worker thread's loop (loop.c). */
#ifndef USHI_WK_LOOP_H
#define USHI_WK_LOOP_H

struct wk_thread;

void *wk_thread_main(void *arg);
/* Forgets the shuffles dropped since t last looked (its open files and
 * cached directories of them): each loop pass, and at a claim. t's
 * thread only. */
void wk_thread_check_drops(struct wk_thread *t);

#endif
