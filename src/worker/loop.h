/* A worker thread's loop (loop.c). */
#ifndef USHI_WK_LOOP_H
#define USHI_WK_LOOP_H

void *wk_thread_main(void *arg);

#endif
