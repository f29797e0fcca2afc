/* Frame header encoding, CRC32C (ISA-L) and record iteration. */
#include "core/frame.h"
#include "core/seal.h"

#include <isa-l/crc.h>

/* Header byte offsets; docs/format.md is the reference. */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_TYPE = 5,
	OFF_CODEC = 6,
	OFF_FLAGS = 7,
	OFF_SHUFFLE = 8,
	OFF_MAP = 12,
	OFF_ATTEMPT = 16,
	OFF_PARTITION = 20,
	OFF_SEQ = 24,
	OFF_RAW = 32,
	OFF_PAYLOAD = 36,
	OFF_NREC = 40,
	OFF_CRC = 44,
};
_Static_assert(OFF_CRC + 4 == USH_FRAME_HDR_SIZE, "header layout");

/* CRC32C over the header up to the CRC field, then the payload. */
static uint32_t frame_crc(const uint8_t *hdr, uint32_t payload_len)
{
	uint32_t c = crc32_iscsi((unsigned char *)hdr, OFF_CRC, 0xffffffffu);
	c = crc32_iscsi((unsigned char *)hdr + USH_FRAME_HDR_SIZE,
			(int)payload_len, c);
	return ~c;
}

void frame_put(uint8_t *hdr, const struct ushi_frame *f)
{
	put_le32(hdr + OFF_MAGIC, USHI_FRAME_MAGIC);
	hdr[OFF_VERSION] = USHI_FRAME_VERSION;
	hdr[OFF_TYPE] = f->type;
	hdr[OFF_CODEC] = f->codec;
	hdr[OFF_FLAGS] = f->flags;
	put_le32(hdr + OFF_SHUFFLE, f->shuffle);
	put_le32(hdr + OFF_MAP, f->map);
	put_le32(hdr + OFF_ATTEMPT, f->attempt);
	put_le32(hdr + OFF_PARTITION, f->partition);
	put_le64(hdr + OFF_SEQ, f->seq);
	put_le32(hdr + OFF_RAW, f->raw_len);
	put_le32(hdr + OFF_PAYLOAD, f->payload_len);
	put_le32(hdr + OFF_NREC, f->nrec);
}

void frame_put_crc(uint8_t *hdr, struct ushi_frame *f)
{
	f->crc = frame_crc(hdr, f->payload_len);
	put_le32(hdr + OFF_CRC, f->crc);
}

void frame_encode(uint8_t *hdr, struct ushi_frame *f)
{
	frame_put(hdr, f);
	frame_put_crc(hdr, f);
}

int frame_parse(const uint8_t *hdr, struct ushi_frame *f)
{
	if (get_le32(hdr + OFF_MAGIC) != USHI_FRAME_MAGIC)
		return USH_ECORRUPT;
	if (hdr[OFF_VERSION] != USHI_FRAME_VERSION)
		return USH_EVERSION;
	f->type = hdr[OFF_TYPE];
	f->codec = hdr[OFF_CODEC];
	f->flags = hdr[OFF_FLAGS];
	f->shuffle = get_le32(hdr + OFF_SHUFFLE);
	f->map = get_le32(hdr + OFF_MAP);
	f->attempt = get_le32(hdr + OFF_ATTEMPT);
	f->partition = get_le32(hdr + OFF_PARTITION);
	f->seq = get_le64(hdr + OFF_SEQ);
	f->raw_len = get_le32(hdr + OFF_RAW);
	f->payload_len = get_le32(hdr + OFF_PAYLOAD);
	f->nrec = get_le32(hdr + OFF_NREC);
	f->crc = get_le32(hdr + OFF_CRC);
	return 0;
}

int frame_decode(const uint8_t *hdr, struct ushi_frame *f)
{
	int ret = frame_parse(hdr, f);
	if (ret)
		return ret;
	if (f->type != USHI_FRAME_DATA || f->codec > USH_CODEC_ZSTD ||
	    (f->flags & ~USHI_FRAME_SEALED) ||
	    ((f->flags & USHI_FRAME_SEALED) &&
	     f->payload_len < USHI_SEAL_TRAILER))
		return USH_ECORRUPT;
	/* The codec rules bind the stored payload, without a seal's
	 * trailer. Every record costs at least its 4-byte prefix. */
	uint32_t stored = frame_stored_len(f);
	if (f->raw_len > USH_RECORD_MAX + USH_RECORD_HDR_SIZE ||
	    stored > f->raw_len ||
	    (f->codec == USH_CODEC_NONE && stored != f->raw_len) ||
	    (f->codec != USH_CODEC_NONE && stored == f->raw_len) ||
	    (uint64_t)f->nrec * USH_RECORD_HDR_SIZE > f->raw_len)
		return USH_ECORRUPT;
	return 0;
}

int frame_check(const uint8_t *hdr, const struct ushi_frame *f)
{
	return frame_crc(hdr, f->payload_len) == f->crc ? 0 : USH_ECRC;
}

int records_next(const uint8_t *batch, size_t n, size_t *off,
		 const void **rec, size_t *len)
{
	size_t o = *off;
	if (o == n)
		return 0;
	if (n - o < USH_RECORD_HDR_SIZE)
		return USH_ECORRUPT;
	size_t l = get_le32(batch + o);
	o += USH_RECORD_HDR_SIZE;
	if (l > n - o)
		return USH_ECORRUPT;
	*rec = batch + o;
	*len = l;
	*off = o + l;
	return 1;
}

int records_check(const uint8_t *batch, size_t n, uint32_t nrec)
{
	size_t off = 0, len;
	const void *rec;
	uint32_t count = 0;
	int ret;
	while ((ret = records_next(batch, n, &off, &rec, &len)) == 1)
		count++;
	return ret == 0 && count == nrec ? 0 : USH_ECORRUPT;
}

size_t ush_frame_size(size_t stored_len)
{
	return USH_FRAME_HDR_SIZE + stored_len;
}
