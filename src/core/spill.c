/* Spill file names and index encoding; see spill.h. */
#include "core/spill.h"

#include <isa-l/crc.h>
#include <stdio.h>

int spill_dir(char *buf, size_t n, const char *dir, uint32_t shuffle)
{
	return snprintf(buf, n, "%s/s%u", dir, shuffle);
}

int spill_data(char *buf, size_t n, const char *dir, uint32_t shuffle,
	       uint32_t map, uint32_t attempt)
{
	return snprintf(buf, n, "%s/s%u/m%u.a%u.data", dir, shuffle, map,
			attempt);
}

int spill_index(char *buf, size_t n, const char *dir, uint32_t shuffle,
		uint32_t map, uint32_t attempt)
{
	return snprintf(buf, n, "%s/s%u/m%u.a%u.index", dir, shuffle, map,
			attempt);
}

uint32_t spill_crc(uint32_t crc, const void *p, size_t n)
{
	return crc32_iscsi((unsigned char *)p, (int)n, crc);
}

void spill_entry_put(uint8_t *p, const struct spill_entry *e)
{
	put_le64(p, e->off);
	put_le32(p + 8, e->len);
	put_le32(p + 12, e->partition);
}

void spill_entry_get(const uint8_t *p, struct spill_entry *e)
{
	e->off = get_le64(p);
	e->len = get_le32(p + 8);
	e->partition = get_le32(p + 12);
}

void spill_trailer_put(uint8_t *p, struct spill_trailer *t, uint32_t crc)
{
	memset(p, 0, USHI_INDEX_TRAILER);
	put_le32(p, USHI_INDEX_MAGIC);
	put_le16(p + 4, USHI_INDEX_VERSION);
	put_le16(p + 6, t->flags);
	put_le32(p + 8, t->shuffle);
	put_le32(p + 12, t->map);
	put_le32(p + 16, t->attempt);
	put_le32(p + 20, t->partitions);
	put_le64(p + 24, t->entries);
	put_le64(p + 32, t->data_bytes);
	t->crc = ~spill_crc(crc, p, 40);
	put_le32(p + 40, t->crc);
}

int spill_trailer_get(const uint8_t *p, struct spill_trailer *t,
		      uint32_t crc)
{
	if (get_le32(p) != USHI_INDEX_MAGIC)
		return USH_ECORRUPT;
	if (get_le16(p + 4) != USHI_INDEX_VERSION)
		return USH_EVERSION;
	t->flags = get_le16(p + 6);
	t->shuffle = get_le32(p + 8);
	t->map = get_le32(p + 12);
	t->attempt = get_le32(p + 16);
	t->partitions = get_le32(p + 20);
	t->entries = get_le64(p + 24);
	t->data_bytes = get_le64(p + 32);
	t->crc = get_le32(p + 40);
	return ~spill_crc(crc, p, 40) == t->crc ? 0 : USH_ECRC;
}
