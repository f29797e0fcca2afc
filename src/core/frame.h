/*
 * The frame: the unit on disk and on the wire. A fixed 48-byte
 * little-endian header, then the payload; layout in docs/format.md.
 */
#ifndef USHI_FRAME_H
#define USHI_FRAME_H

#include "core/internal.h"

#define USHI_FRAME_MAGIC 0x46485355u /* "USHF" */
#define USHI_FRAME_VERSION 1

enum ushi_frame_type {
	USHI_FRAME_DATA = 1,
	/* 2.. : the worker protocol's control frames, src/proto.h */
};

/* Header flags: SEALED, the stored payload is sealed (core/seal.h) and
 * followed by its 20-byte trailer, counted in payload_len. */
#define USHI_FRAME_SEALED 0x01u
/* After a sealed payload: the key id (u32) and the 16-byte GCM tag. */
#define USHI_SEAL_TRAILER USH_SEAL_TRAILER_SIZE

struct ushi_frame {
	uint8_t type, codec, flags;
	uint32_t shuffle, map, attempt, partition;
	uint64_t seq;
	uint32_t raw_len, payload_len, nrec, crc;
};

/* Writes f's header at hdr; the payload must follow it (hdr + 48) and is
 * covered by the CRC32C computed here. */
void frame_encode(uint8_t *hdr, struct ushi_frame *f);
/* frame_encode() in two steps, for a frame sealed in between: the
 * header's fields, then the CRC over them and the payload. */
void frame_put(uint8_t *hdr, const struct ushi_frame *f);
void frame_put_crc(uint8_t *hdr, struct ushi_frame *f);
/* The stored payload's bytes, without a sealed frame's trailer. */
static inline uint32_t frame_stored_len(const struct ushi_frame *f)
{
	return f->payload_len - (f->flags & USHI_FRAME_SEALED ? USHI_SEAL_TRAILER : 0u);
}
/* Parses magic, version and the fields of any frame type, checking
 * nothing else (src/proto.c bounds control frames). Returns 0,
 * USH_ECORRUPT or USH_EVERSION. */
int frame_parse(const uint8_t *hdr, struct ushi_frame *f);
/* Parses and bounds-checks a DATA frame header. Returns 0, USH_ECORRUPT or
 * USH_EVERSION. Does not check the CRC. */
int frame_decode(const uint8_t *hdr, struct ushi_frame *f);
/* Checks the CRC of a decoded frame whose payload follows hdr. */
int frame_check(const uint8_t *hdr, const struct ushi_frame *f);

/*
 * Iterates the length-prefixed records of a batch: *off is the cursor.
 * Returns 1 with *rec and *len set, 0 at the end, USH_ECORRUPT if a length
 * runs past the batch.
 */
int records_next(const uint8_t *batch, size_t n, size_t *off,
		 const void **rec, size_t *len);

/* Checks that a batch of n bytes holds exactly nrec well-formed records:
 * 0 or USH_ECORRUPT. Readers call it before yielding any record. */
int records_check(const uint8_t *batch, size_t n, uint32_t nrec);

#endif
