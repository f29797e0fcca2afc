/*
 * Frozen excerpts of older ushuffle.h releases, as a caller compiled
 * against one sees the library: the same functions, the structs as they
 * were. USH_OLD_MINOR 3 is 0.3.0 (commit c173b26); 4 is 0.4.0 to 0.4.2,
 * whose writer options end in four bytes of tail padding (after
 * replicas), where such a caller may leave junk. Never edit a layout
 * here: new fields go in ushuffle.h only, appended.
 */
#ifndef USH_TEST_OLD_H
#define USH_TEST_OLD_H

#include <stddef.h>
#include <stdint.h>

typedef struct ush_ring ush_ring;
typedef struct ush_writer ush_writer;
typedef struct ush_reader ush_reader;

struct ush_ring_opts {
	uint32_t size;
	unsigned iodepth;
	size_t pool_bytes;
	size_t push_size;
	int sqpoll;
	int fixedbufs;
	int codec;
	int level;
};

struct ush_ring_info {
	uint32_t size;
	unsigned setup_flags;
	int fixedbufs;
	unsigned iodepth;
	size_t pool_bytes;
	size_t push_size;
	size_t pool_idle_bytes;
};

struct ush_writer_opts {
	uint32_t size;
	uint32_t shuffle, map, attempt;
	uint32_t partitions;
	int target;
	const char *dir;
	int direct;
	int ioengine;
	const char *workers;
	uint32_t timeout_ms;
	uint32_t window;
	uint32_t zc_threshold;
	int send_zc;
	const char *app;
#if USH_OLD_MINOR >= 4
	uint32_t replicas;
#endif
};

struct ush_writer_stats {
	uint32_t size;
	uint64_t records, batches;
	uint64_t raw_bytes;
	uint64_t frame_bytes;
	uint64_t stored_bytes;
	uint64_t stored_raw;
	uint64_t grows;
	uint64_t net_sends;
	uint64_t net_zc_sends;
	uint64_t net_zc_notifs;
	uint64_t net_zc_copied;
	uint32_t net_zc_off;
	uint32_t net_workers;
	uint64_t net_credit_waits;
};

struct ush_status {
	const void *data;
	size_t len;
};

struct ush_reader_opts {
	uint32_t size;
	uint32_t partition;
	const struct ush_status *statuses;
	uint32_t nstatuses;
	uint32_t timeout_ms;
};

struct ush_part_stats {
	uint64_t records;
	uint64_t bytes;
	uint64_t batches;
};

#define OLD_TARGET_DISK 1
#define OLD_CODEC_ZSTD 2

const char *ush_last_error(void);
unsigned ush_version(void);
void ush_ring_opts_init_size(struct ush_ring_opts *opts, size_t size);
int ush_ring_create(ush_ring **out, const struct ush_ring_opts *opts);
void ush_ring_free(ush_ring *ring);
void ush_ring_info_size(const ush_ring *ring, struct ush_ring_info *info,
			size_t size);
void ush_writer_opts_init_size(struct ush_writer_opts *opts, size_t size);
int ush_writer_open(ush_writer **out, ush_ring *ring,
		    const struct ush_writer_opts *opts);
int ush_writer_write(ush_writer *w, uint32_t partition, const void *rec,
		     size_t len);
int ush_writer_commit(ush_writer *w, struct ush_part_stats *parts);
void ush_writer_stats_size(const ush_writer *w, struct ush_writer_stats *st,
			   size_t size);
void ush_writer_free(ush_writer *w);
int ush_writer_status(const ush_writer *w, struct ush_status *st);
void ush_reader_opts_init_size(struct ush_reader_opts *opts, size_t size);
int ush_reader_open(ush_reader **out, const struct ush_reader_opts *opts);
int ush_reader_next(ush_reader *r, const void **rec, size_t *len);
void ush_reader_free(ush_reader *r);

#endif
