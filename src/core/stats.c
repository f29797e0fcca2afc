/* The process's library counters behind ush_lib_stats() (api.c); see
 * ushuffle.h. */
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
