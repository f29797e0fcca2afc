/* Spill file names and index encoding; see spill.h and docs/format.md. */
#include "core/spill.h"

#include <errno.h>
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

void spill_header_put(uint8_t *p, struct spill_header *h)
{
	memset(p, 0, USHI_INDEX_HEADER);
	put_le32(p, USHI_INDEX_MAGIC);
	put_le16(p + 4, USHI_INDEX_VERSION);
	put_le16(p + 6, h->flags);
	put_le32(p + 8, h->shuffle);
	put_le32(p + 12, h->map);
	put_le32(p + 16, h->attempt);
	put_le32(p + 20, h->partitions);
	put_le64(p + 24, h->entries);
	put_le64(p + 32, h->data_bytes);
	h->crc = ~spill_crc(0xffffffffu, p, 40);
	put_le32(p + 40, h->crc);
}

int spill_header_get(const uint8_t *p, struct spill_header *h)
{
	if (get_le32(p) != USHI_INDEX_MAGIC)
		return USH_ECORRUPT;
	if (get_le16(p + 4) != USHI_INDEX_VERSION)
		return USH_EVERSION;
	h->flags = get_le16(p + 6);
	h->shuffle = get_le32(p + 8);
	h->map = get_le32(p + 12);
	h->attempt = get_le32(p + 16);
	h->partitions = get_le32(p + 20);
	h->entries = get_le64(p + 24);
	h->data_bytes = get_le64(p + 32);
	h->crc = get_le32(p + 40);
	if (~spill_crc(0xffffffffu, p, 40) != h->crc)
		return USH_ECRC;
	return get_le32(p + 44) ? USH_ECORRUPT : 0;
}

uint32_t spill_slot_crc(uint64_t start, const uint8_t *ents, size_t n)
{
	uint8_t b[8];
	put_le64(b, start);
	return ~spill_crc(spill_crc(0xffffffffu, b, 8), ents, n);
}

void spill_slot_put(uint8_t *p, uint64_t start, const uint8_t *ents,
		    size_t n)
{
	put_le64(p, start);
	put_le32(p + 8, spill_slot_crc(start, ents, n));
	put_le32(p + 12, 0);
}

void spill_slot_get(const uint8_t *p, struct spill_slot *s)
{
	s->start = get_le64(p);
	s->crc = get_le32(p + 8);
}

bool spill_is_v1(const uint8_t *p)
{
	return get_le32(p) == USHI_INDEX_MAGIC && get_le16(p + 4) == 1;
}

int spill_index_build(const struct spill_entry *e, uint64_t n,
		      struct spill_header *h, uint8_t **out, size_t *len)
{
	uint32_t np = h->partitions;
	size_t size = spill_index_size(np, n);
	uint8_t *img = ushi_malloc(size);
	uint64_t *pos = ushi_calloc((size_t)np + 1, sizeof(*pos));
	if (!img || !pos) {
		ushi_free(img);
		ushi_free(pos);
		return -ENOMEM;
	}
	/* Counting sort, stable: pos[p + 1] counts p's entries, then
	 * pos[p] is where p's run starts. */
	for (uint64_t i = 0; i < n; i++)
		pos[e[i].partition + 1]++;
	for (uint32_t p = 0; p < np; p++)
		pos[p + 1] += pos[p];
	uint8_t *ents = img + spill_entry_off(np, 0);
	for (uint64_t i = 0; i < n; i++)
		spill_entry_put(ents + pos[e[i].partition]++ * USHI_INDEX_ENTRY,
				&e[i]);
	/* Now pos[p] is where p's run ends. */
	for (uint32_t p = 0; p <= np; p++) {
		uint64_t start = p ? pos[p - 1] : 0;
		uint64_t end = p < np ? pos[p] : start;
		spill_slot_put(img + spill_slot_off(p), start,
			       ents + start * USHI_INDEX_ENTRY,
			       (size_t)(end - start) * USHI_INDEX_ENTRY);
	}
	ushi_free(pos);
	h->entries = n;
	spill_header_put(img, h);
	*out = img;
	*len = size;
	return 0;
}
