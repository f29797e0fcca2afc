/*
 * Local spill layout, shared by the disk sink and the reader
 * (docs/format.md §2): per map attempt a data file of frames, packed, and
 * an index: a 48-byte header, a directory of partitions + 1 slots and the
 * 16-byte entries grouped by partition, so a reader finds a partition's
 * entries with one small read whatever the partition count. The index is
 * written under a temporary name and renamed into place at commit: its
 * presence is the attempt's atomic publish. Which attempt of a map counts
 * is the caller's driver's choice (the map status), never the files'.
 */
#ifndef USHI_SPILL_H
#define USHI_SPILL_H

#include "core/internal.h"

#define USHI_INDEX_MAGIC 0x49485355u /* "USHI" */
#define USHI_INDEX_VERSION 2
#define USHI_INDEX_HEADER 48u
#define USHI_INDEX_SLOT 16u
#define USHI_INDEX_ENTRY 16u
#define USHI_INDEX_V1_TRAILER 48u /* version 1: a trailer, no header */
#define USHI_INDEX_DIRECT 1u /* flag: data written with O_DIRECT */
/* Which frames the disk sink copies into packs (sink_disk.c): those
 * below USHI_PACK_MIN, and those that O_DIRECT would pad by more than an
 * eighth of their size. The others are written in place, each costing
 * at most 1/8 of itself in padding. */
#define USHI_PACK_MIN (16u << 10)
static inline bool spill_packed(uint32_t flen)
{
	return flen < USHI_PACK_MIN ||
	       (ALIGN_UP(flen, USHI_ALIGN) - flen) * 8 > flen;
}

struct spill_entry {
	uint64_t off;
	uint32_t len; /* frame bytes */
	uint32_t partition;
};

struct spill_header {
	uint16_t flags;
	uint32_t shuffle, map, attempt, partitions;
	uint64_t entries, data_bytes;
	uint32_t crc; /* CRC32C of header bytes 0-39 */
};

/* Directory slot p: where partition p's entries start (entry number);
 * slot p + 1's start is where they end. */
struct spill_slot {
	uint64_t start;
	uint32_t crc; /* CRC32C of slot bytes 0-7, then p's entry bytes */
};

/* "<dir>/s<shuffle>", "<dir>/s<S>/m<map>.a<attempt>.data",
 * "<dir>/s<S>/m<M>.a<A>.index": snprintf into buf; returns its length. */
int spill_dir(char *buf, size_t n, const char *dir, uint32_t shuffle);
int spill_data(char *buf, size_t n, const char *dir, uint32_t shuffle,
	       uint32_t map, uint32_t attempt);
int spill_index(char *buf, size_t n, const char *dir, uint32_t shuffle,
		uint32_t map, uint32_t attempt);

/* File offsets of directory slot p, of entry i, and the index's size. */
static inline uint64_t spill_slot_off(uint32_t p)
{
	return USHI_INDEX_HEADER + (uint64_t)p * USHI_INDEX_SLOT;
}

static inline uint64_t spill_entry_off(uint32_t partitions, uint64_t i)
{
	return spill_slot_off(partitions + 1) + i * USHI_INDEX_ENTRY;
}

static inline uint64_t spill_index_size(uint32_t partitions, uint64_t entries)
{
	return spill_entry_off(partitions, entries);
}

void spill_entry_put(uint8_t *p, const struct spill_entry *e);
void spill_entry_get(const uint8_t *p, struct spill_entry *e);
/* Writes the header and sets h->crc. */
void spill_header_put(uint8_t *p, struct spill_header *h);
/* Checks magic, version, reserved bytes and the CRC; returns 0,
 * USH_ECORRUPT, USH_ECRC or USH_EVERSION. */
int spill_header_get(const uint8_t *p, struct spill_header *h);
/* Slot put/get; crc: CRC32C state (ISA-L, not inverted) of the slot's
 * partition's entry bytes, the slot's start fed first. */
void spill_slot_put(uint8_t *p, uint64_t start, const uint8_t *ents,
		    size_t n);
void spill_slot_get(const uint8_t *p, struct spill_slot *s);
/* The CRC a slot of start over n entry bytes must hold. */
uint32_t spill_slot_crc(uint64_t start, const uint8_t *ents, size_t n);
/* The index image of the n entries e, in submission order (each
 * partition below h->partitions): grouped by partition, stably, with
 * its directory and h's header (h->entries and h->crc set). *out is
 * ushi_malloc()ed; peak memory 16 B per entry and 24 B per partition
 * beside e. Returns 0 or -ENOMEM. */
int spill_index_build(const struct spill_entry *e, uint64_t n,
		      struct spill_header *h, uint8_t **out, size_t *len);
/* Is p (the last 48 bytes of an index) a version 1 trailer? */
bool spill_is_v1(const uint8_t *p);
uint32_t spill_crc(uint32_t crc, const void *p, size_t n);

#endif
