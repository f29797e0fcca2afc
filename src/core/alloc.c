/* Counted allocation: lets callers and tests see allocations per batch. */
#include "core/internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

static atomic_uint_fast64_t allocs;

uint64_t ush_alloc_count(void)
{
	return atomic_load_explicit(&allocs, memory_order_relaxed);
}

static void count(void)
{
	atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
}

void *ushi_malloc(size_t n)
{
	count();
	return malloc(n);
}

void *ushi_calloc(size_t n, size_t size)
{
	count();
	return calloc(n, size);
}

void *ushi_aligned_alloc(size_t n)
{
	void *p;
	count();
	return posix_memalign(&p, USHI_ALIGN, ALIGN_UP(n, USHI_ALIGN)) ? NULL : p;
}

char *ushi_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = ushi_malloc(n);
	return d ? memcpy(d, s, n) : NULL;
}

void ushi_free(void *p)
{
	free(p);
}

void *ushi_array_grow(void *p, size_t *cap, size_t size)
{
	size_t c = *cap ? 2 * *cap : 64;
	void *q = ushi_malloc(c * size);
	if (!q)
		return NULL;
	if (*cap)
		memcpy(q, p, *cap * size);
	ushi_free(p);
	*cap = c;
	return q;
}

int ushi_grow(uint8_t **p, size_t *cap, size_t n)
{
	if (n <= *cap)
		return 0;
	size_t c = pow2_ceil(n);
	uint8_t *q = ushi_malloc(c);
	if (!q)
		return -ENOMEM;
	ushi_free(*p);
	*p = q;
	*cap = c;
	return 0;
}
