/*
 * malloc interposition for the benchmarks (see heapcount.h). The symbols
 * defined here win over libc's for every caller in the process, the
 * library's static objects and the shared lz4/zstd included; the real work
 * is done by glibc's exported __libc_* entry points, so pointers from
 * either side stay interchangeable. Under -fsanitize=address these
 * definitions also displace ASan's allocator in these binaries (they still
 * run; heap misuse is then not reported): the library's own ASan tests
 * cover that.
 */
#include "heapcount.h"

#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

/* Relaxed atomics: the benchmarks measure one thread, but the library
 * or a codec may allocate from another. */
static uint64_t calls, bytes;

static inline void count(size_t n)
{
	__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&bytes, n, __ATOMIC_RELAXED);
}

void heapcount_get(struct heapcount *hc)
{
	hc->calls = __atomic_load_n(&calls, __ATOMIC_RELAXED);
	hc->bytes = __atomic_load_n(&bytes, __ATOMIC_RELAXED);
}

void *malloc(size_t n)
{
	count(n);
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	count(n * size);
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	count(n);
	return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
	count(n);
	return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	count(n);
	return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	count(n);
	void *p = __libc_memalign(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

void free(void *p)
{
	__libc_free(p);
}
