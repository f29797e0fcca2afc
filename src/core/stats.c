/* The process's library counters behind ush_lib_stats(); see ushuffle.h. */
#include "core/internal.h"

struct ushi_counters ushi_counters;

void ushi_count_writer(const struct ush_writer_stats *st, bool committed)
{
	if (committed)
		USHI_COUNT(writers_committed, 1);
	else
		USHI_COUNT(writers_aborted, 1);
	USHI_COUNT(records_written, st->records);
	USHI_COUNT(bytes_written, st->raw_bytes);
	USHI_COUNT(bytes_stored, st->stored_bytes);
}

void ushi_count_reader(const struct ush_reader_stats *st)
{
	USHI_COUNT(readers, 1);
	USHI_COUNT(records_read, st->records);
	USHI_COUNT(bytes_read, st->stored_bytes);
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
	};
	ushi_struct_init(st, size, &s, sizeof(s));
}
