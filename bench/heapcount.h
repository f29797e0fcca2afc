/*
 * Heap byte counter for the benchmarks: heapcount.c replaces malloc and
 * friends in the benchmark binary (glibc allows it) and forwards to glibc's
 * own allocator, counting every call and every requested byte, from the
 * library, its codecs and libc alike. Reads are cheap; take the difference
 * around the work to measure.
 */
#ifndef USH_BENCH_HEAPCOUNT_H
#define USH_BENCH_HEAPCOUNT_H

#include <stdint.h>

struct heapcount {
	uint64_t calls; /* malloc, calloc, realloc, memalign family */
	uint64_t bytes; /* bytes requested by those calls */
};

void heapcount_get(struct heapcount *hc);

#endif
