/*
 * The heap read buffers a worker thread keeps for FETCH reads beyond its
 * pool's share (src/worker/fetch.c, wk_hbuf_get/put) at their limit: a
 * thread keeps at most WK_HBUF_KEEP log buffers' worth, frees the rest,
 * reuses a kept buffer of its size or a larger one before it allocates,
 * never keeps one beyond the largest size class, and frees all it keeps
 * at its end (ASan's leak check holds it to that). Every allocation is
 * counted where ush_worker_stats reads it (fetch_heap_allocs).
 */
#include "helpers.h"
#include "worker/fetch.h"
#include "worker/thread.h"

#include <stdlib.h>

static uint64_t allocs(const struct ush_worker *wk)
{
	return atomic_load(&wk->m.fetch_heap_allocs);
}

static void kept_up_to_the_limit(void **state)
{
	(void)state;
	enum { N = 2 * WK_HBUF_KEEP, FS = 64 << 10 };
	struct ush_worker *wk = calloc(1, sizeof(*wk));
	struct wk_thread *t = calloc(1, sizeof(*t));
	assert_non_null(wk);
	assert_non_null(t);
	wk->o.flush_size = FS;
	t->wk = wk;
	void *b[N];
	uint32_t cap[N];
	/* Twice the limit in use at once: each one allocated. */
	for (int i = 0; i < N; i++) {
		assert_non_null(b[i] = wk_hbuf_get(t, FS - 100, &cap[i]));
		assert_int_equal(cap[i], FS);
		memset(b[i], i, FS - 100);
	}
	assert_int_equal(allocs(wk), N);
	/* All freed: the limit's worth is kept, the rest freed. */
	for (int i = 0; i < N; i++)
		wk_hbuf_put(t, b[i], cap[i]);
	assert_int_equal(t->hfree_bytes, (size_t)WK_HBUF_KEEP * FS);
	/* That many come back without an allocation, one more needs one. */
	for (int i = 0; i < (int)WK_HBUF_KEEP; i++)
		assert_non_null(b[i] = wk_hbuf_get(t, FS, &cap[i]));
	assert_int_equal(allocs(wk), N);
	assert_int_equal(t->hfree_bytes, 0);
	assert_non_null(b[WK_HBUF_KEEP] = wk_hbuf_get(t, FS, &cap[WK_HBUF_KEEP]));
	assert_int_equal(allocs(wk), N + 1);
	for (int i = 0; i <= (int)WK_HBUF_KEEP; i++)
		wk_hbuf_put(t, b[i], cap[i]);
	/* A small read takes a larger buffer kept rather than allocate. */
	uint32_t c;
	void *p = wk_hbuf_get(t, 4096, &c);
	assert_non_null(p);
	assert_int_equal(c, FS);
	assert_int_equal(allocs(wk), N + 1);
	wk_hbuf_put(t, p, c);
	/* Beyond the largest class (1 MiB): allocated exactly, never kept. */
	size_t before = t->hfree_bytes;
	p = wk_hbuf_get(t, (2u << 20) + 1, &c);
	assert_non_null(p);
	assert_int_equal(c, 0);
	assert_int_equal(allocs(wk), N + 2);
	wk_hbuf_put(t, p, c);
	assert_int_equal(t->hfree_bytes, before);
	wk_hbuf_put(t, NULL, 0);
	wk_hbuf_close(t);
	assert_int_equal(t->hfree_bytes, 0);
	for (int o = 0; o < WK_HBUF_ORDERS; o++)
		assert_null(t->hfree[o]);
	free(t);
	free(wk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kept_up_to_the_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
