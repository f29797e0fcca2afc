/*
 * Local spill layout, shared by the disk sink and the reader
 * (docs/format.md): per map attempt a data file of frames and an index of
 * 16-byte entries closed by a 48-byte trailer. The index is written under
 * a temporary name and renamed into place at commit: its presence is the
 * attempt's atomic publish. Which attempt of a map counts is the
 * caller's driver's choice (the map status), never the files'.
 */
#ifndef USHI_SPILL_H
#define USHI_SPILL_H

#include "core/internal.h"

#define USHI_INDEX_MAGIC 0x49485355u /* "USHI" */
#define USHI_INDEX_VERSION 1
#define USHI_INDEX_ENTRY 16u
#define USHI_INDEX_TRAILER 48u
#define USHI_INDEX_PADDED 1u /* flag: frames padded to USHI_ALIGN (O_DIRECT) */

struct spill_entry {
	uint64_t off;
	uint32_t len; /* frame bytes, padding excluded */
	uint32_t partition;
};

struct spill_trailer {
	uint16_t flags;
	uint32_t shuffle, map, attempt, partitions;
	uint64_t entries, data_bytes;
	uint32_t crc; /* CRC32C of the entries and the trailer before it */
};

/* "<dir>/s<shuffle>", "<dir>/s<S>/m<map>.a<attempt>.data",
 * "<dir>/s<S>/m<M>.a<A>.index": snprintf into buf; returns its length. */
int spill_dir(char *buf, size_t n, const char *dir, uint32_t shuffle);
int spill_data(char *buf, size_t n, const char *dir, uint32_t shuffle,
	       uint32_t map, uint32_t attempt);
int spill_index(char *buf, size_t n, const char *dir, uint32_t shuffle,
		uint32_t map, uint32_t attempt);

void spill_entry_put(uint8_t *p, const struct spill_entry *e);
void spill_entry_get(const uint8_t *p, struct spill_entry *e);
/* crc: running CRC32C (ISA-L, not inverted) of the entries. */
void spill_trailer_put(uint8_t *p, struct spill_trailer *t, uint32_t crc);
/* Checks magic, version and the CRC; returns 0, USH_ECORRUPT, USH_ECRC or
 * USH_EVERSION. */
int spill_trailer_get(const uint8_t *p, struct spill_trailer *t,
		      uint32_t crc);
uint32_t spill_crc(uint32_t crc, const void *p, size_t n);

#endif
