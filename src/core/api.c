/* The library's own queries (version, ush_lib_stats()) and the
 * size-versioned copy of options and stats structs (see "Extensible
 * structs" in ushuffle.h). */
#include "core/internal.h"

#include <errno.h>

unsigned ush_version(void)
{
	return USH_VERSION_NUMBER;
}

const char *ush_version_string(void)
{
	return USH_VERSION_STRING;
}

/* Every extensible struct starts with its uint32_t size. A caller's
 * struct, of any version, is far smaller than STRUCT_MAX: a larger size
 * is a field never initialised, not a struct to scan. */
#define STRUCT_MAX 4096u

static uint32_t size_of(const void *s)
{
	uint32_t n;
	memcpy(&n, s, sizeof(n));
	return n;
}

void ushi_struct_init(void *dst, size_t size, const void *defaults,
		      size_t ours)
{
	if (size < sizeof(uint32_t))
		return; /* not even room for the size field */
	size_t n = size < ours ? size : ours;
	memcpy(dst, defaults, n);
	if (size > ours) /* a newer caller: its fields stay at zero */
		memset((uint8_t *)dst + ours, 0, size - ours);
	uint32_t s = (uint32_t)size;
	memcpy(dst, &s, sizeof(s));
}

int ushi_opts_load(void *dst, const void *defaults, size_t ours,
		   const void *src, const char *what)
{
	memcpy(dst, defaults, ours);
	if (!src)
		return 0;
	size_t n = size_of(src);
	if (n < sizeof(uint32_t) || n > STRUCT_MAX)
		return ushi_fail(-EINVAL, "%s: size field %zu is not a struct "
				 "size: initialise the struct with its _init() "
				 "before setting fields", what, n);
	for (size_t i = ours; i < n; i++)
		if (((const uint8_t *)src)[i])
			return ushi_fail(-E2BIG, "%s: the caller's struct (%zu "
					 "bytes) sets fields this library "
					 "(%s, %zu bytes) does not know; run "
					 "with the libushuffle the program was "
					 "built against", what, n,
					 USH_VERSION_STRING, ours);
	memcpy(dst, src, n < ours ? n : ours);
	uint32_t s = (uint32_t)ours;
	memcpy(dst, &s, sizeof(s));
	return 0;
}

#define LOAD(f) atomic_load_explicit(&ushi_counters.f, memory_order_relaxed)

void ush_lib_stats_size(struct ush_lib_stats *st, size_t size)
{
	struct ush_lib_stats s = {
		.size = sizeof(s),
		.writers_committed = LOAD(writers_committed),
		.writers_aborted = LOAD(writers_aborted),
		.readers = LOAD(readers),
		.records_written = LOAD(records_written),
		.bytes_written = LOAD(bytes_written),
		.bytes_stored = LOAD(bytes_stored),
		.records_read = LOAD(records_read),
		.bytes_read = LOAD(bytes_read),
		.net_connects = LOAD(net_connects),
		.net_connect_errors = LOAD(net_connect_errors),
		.errors = LOAD(errors),
		.net_reuses = LOAD(net_reuses),
		.net_recv_bufs = LOAD(net_recv_bufs),
	};
	ushi_struct_init(st, size, &s, sizeof(s));
}
