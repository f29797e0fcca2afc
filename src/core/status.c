/* Map status encoding and checks; see status.h and docs/format.md §3. */
#include "core/status.h"

#include <errno.h>
#include <isa-l/crc.h>

/* Header byte offsets. */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_TARGET = 5,
	OFF_LOC_LEN = 6,
	OFF_SHUFFLE = 8,
	OFF_MAP = 12,
	OFF_ATTEMPT = 16,
	OFF_PARTS = 20,
	OFF_BODY = 24,
	OFF_APP_LEN = 28,
	OFF_FLAGS = 29, /* version 3; reserved zero before, as are 30, 31 */
	OFF_CRC = 32,
};
_Static_assert(OFF_CRC + 4 == USHI_STATUS_HDR, "status header layout");

#define VARINT_MAX 10u

static uint32_t crc(uint32_t c, const void *p, size_t n)
{
	return crc32_iscsi((unsigned char *)p, (int)n, c);
}

uint32_t status_sum_add(uint32_t sum, uint32_t frame_crc)
{
	uint8_t b[4];
	put_le32(b, frame_crc);
	return crc(sum, b, sizeof(b));
}

static uint32_t nblocks(uint32_t partitions)
{
	return (partitions + USHI_STATUS_BLOCK - 1) / USHI_STATUS_BLOCK;
}

/* CRC32C of the header up to its CRC field, the application, the
 * location and the block table (the `strings` bytes after the header). */
static uint32_t header_crc(const uint8_t *p, size_t strings, uint32_t nb)
{
	uint32_t c = crc(0xffffffffu, p, OFF_CRC);
	return ~crc(c, p + USHI_STATUS_HDR, strings + 8u * (size_t)nb);
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/* Reads a varint of at most VARINT_MAX bytes below end: bytes or 0. */
static size_t get_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
	uint64_t x = 0;
	for (size_t i = 0; i < VARINT_MAX && p + i < end; i++) {
		x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = x;
			return i + 1;
		}
	}
	return 0;
}

int status_build(uint8_t **out, size_t *len, const struct status *s,
		 void (*part)(const void *arg, uint32_t p, uint64_t *batches,
			      uint32_t *sum),
		 const void *arg)
{
	uint32_t nb = nblocks(s->partitions);
	size_t strings = s->app_len + s->loc_len +
			 (s->sealed ? USHI_STATUS_SEAL : 0);
	size_t head = USHI_STATUS_HDR + strings + 8u * (size_t)nb;
	/* Worst case per partition: a full varint, a checksum, a mask. */
	uint8_t *b = ushi_malloc(head + (size_t)s->partitions *
						(2 * VARINT_MAX + 4));
	if (!b)
		return -ENOMEM;
	uint8_t *body = b + head, *q = body, *blk = q;
	for (uint32_t p = 0; p < s->partitions; p++) {
		uint64_t batches;
		uint32_t sum;
		part(arg, p, &batches, &sum);
		q += put_varint(q, batches);
		if (batches) {
			put_le32(q, sum);
			q += 4;
			if (s->holders)
				q += put_varint(q, s->holders[p]);
		}
		if ((p + 1) % USHI_STATUS_BLOCK == 0 || p + 1 == s->partitions) {
			uint8_t *e = b + USHI_STATUS_HDR + strings +
				     8u * (p / USHI_STATUS_BLOCK);
			put_le32(e, (uint32_t)(q - body));
			put_le32(e + 4, ~crc(0xffffffffu, blk, (size_t)(q - blk)));
			blk = q;
		}
	}
	put_le32(b + OFF_MAGIC, USHI_STATUS_MAGIC);
	b[OFF_VERSION] = s->sealed ? 3 : s->holders ? 2 : 1;
	b[OFF_TARGET] = s->target;
	put_le16(b + OFF_LOC_LEN, (uint16_t)s->loc_len);
	put_le32(b + OFF_SHUFFLE, s->shuffle);
	put_le32(b + OFF_MAP, s->map);
	put_le32(b + OFF_ATTEMPT, s->attempt);
	put_le32(b + OFF_PARTS, s->partitions);
	put_le32(b + OFF_BODY, (uint32_t)(q - body));
	b[OFF_APP_LEN] = (uint8_t)s->app_len;
	memset(b + OFF_FLAGS, 0, 3);
	if (s->sealed)
		b[OFF_FLAGS] = USHI_STATUS_SEALED |
			       (s->holders ? USHI_STATUS_MASKS : 0);
	uint8_t *str = b + USHI_STATUS_HDR; /* the strings, then the seal */
	memcpy(str, s->app, s->app_len);
	memcpy(str + s->app_len, s->loc, s->loc_len);
	if (s->sealed) {
		uint8_t *seal_at = str + s->app_len + s->loc_len;
		put_le32(seal_at, s->seal_id);
		memcpy(seal_at + 4, s->salt, USHI_STATUS_SEAL - 4);
	}
	put_le32(b + OFF_CRC, header_crc(b, strings, nb));
	*out = b;
	*len = (size_t)(q - b);
	return 0;
}

static int bad(const char **why, const char *rule)
{
	*why = rule;
	return USH_ECORRUPT;
}

int status_parse(const uint8_t *p, size_t n, struct status *s,
		 const char **why)
{
	if (!p || n < USHI_STATUS_HDR)
		return bad(why, "shorter than its 36-byte header");
	if (get_le32(p + OFF_MAGIC) != USHI_STATUS_MAGIC)
		return bad(why, "bad magic (not a map status)");
	if (p[OFF_VERSION] < 1 || p[OFF_VERSION] > USHI_STATUS_VERSION) {
		*why = "unsupported version (this library reads 1 to 3)";
		return USH_EVERSION;
	}
	s->version = p[OFF_VERSION];
	s->holders = NULL; /* status_build()'s input only */
	s->target = p[OFF_TARGET];
	s->loc_len = get_le16(p + OFF_LOC_LEN);
	s->shuffle = get_le32(p + OFF_SHUFFLE);
	s->map = get_le32(p + OFF_MAP);
	s->attempt = get_le32(p + OFF_ATTEMPT);
	s->partitions = get_le32(p + OFF_PARTS);
	s->body_len = get_le32(p + OFF_BODY);
	s->app_len = p[OFF_APP_LEN];
	uint8_t flags = s->version == 3 ? p[OFF_FLAGS] : 0;
	s->masks = s->version == 2 || (flags & USHI_STATUS_MASKS);
	s->sealed = flags & USHI_STATUS_SEALED;
	if (s->target != USH_TARGET_DISK && s->target != USH_TARGET_NET)
		return bad(why, "unknown target");
	if (!s->loc_len || s->loc_len > USHI_STATUS_LOC_MAX)
		return bad(why, "location length out of range 1..4096");
	if (!s->app_len || s->app_len > USHI_STATUS_APP_MAX)
		return bad(why, "application id length out of range 1..64");
	if ((s->version < 3 && p[OFF_FLAGS]) || p[OFF_FLAGS + 1] |
	    p[OFF_FLAGS + 2] || (s->version == 3 && !s->sealed) ||
	    (flags & ~(USHI_STATUS_MASKS | USHI_STATUS_SEALED)))
		return bad(why, "reserved header bytes or flags set");
	if (!s->partitions || s->partitions > USHI_PARTS_MAX)
		return bad(why, "partition count out of range 1..16M");
	uint32_t nb = nblocks(s->partitions);
	size_t strings = s->app_len + s->loc_len +
			 (s->sealed ? USHI_STATUS_SEAL : 0);
	size_t head = USHI_STATUS_HDR + strings + 8u * (size_t)nb;
	if (n < head || n - head != s->body_len)
		return bad(why, "length disagrees with its header");
	if (header_crc(p, strings, nb) != get_le32(p + OFF_CRC))
		return bad(why, "header CRC32C mismatch");
	s->app = (const char *)p + USHI_STATUS_HDR;
	s->loc = s->app + s->app_len;
	if (memchr(s->app, 0, s->app_len + s->loc_len))
		return bad(why, "NUL byte in its application or location");
	/* A plain map has neither: no pointer into its block table. */
	const uint8_t *seal_at = (const uint8_t *)s->loc + s->loc_len;
	s->salt = s->sealed ? seal_at + 4 : NULL;
	s->seal_id = s->sealed ? get_le32(seal_at) : 0;
	s->blocks = p + USHI_STATUS_HDR + strings;
	s->body = p + head;
	uint32_t prev = 0;
	for (uint32_t i = 0; i < nb; i++) {
		uint32_t end = get_le32(s->blocks + 8u * i);
		if (end < prev || end > s->body_len)
			return bad(why, "block table out of order");
		prev = end;
	}
	if (prev != s->body_len)
		return bad(why, "block table does not cover its body");
	return 0;
}

/* Checks block i's CRC and returns its bounds. */
static int block(const struct status *s, uint32_t i, const uint8_t **b,
		 const uint8_t **end, const char **why)
{
	uint32_t lo = i ? get_le32(s->blocks + 8u * (i - 1)) : 0;
	uint32_t hi = get_le32(s->blocks + 8u * i);
	*b = s->body + lo;
	*end = s->body + hi;
	if (~crc(0xffffffffu, *b, hi - lo) != get_le32(s->blocks + 8u * i + 4))
		return bad(why, "partition block CRC32C mismatch");
	return 0;
}

/* Reads one entry at *q below end. */
static int entry(const struct status *s, const uint8_t **q,
		 const uint8_t *end, uint64_t *batches, uint32_t *sum,
		 uint64_t *holders, const char **why)
{
	*holders = 0;
	size_t k = get_varint(*q, end, batches);
	if (!k)
		return bad(why, "truncated batch count");
	*q += k;
	*sum = 0;
	if (*batches) {
		if (end - *q < 4)
			return bad(why, "truncated checksum");
		*sum = get_le32(*q);
		*q += 4;
	}
	if (*batches && s->masks) {
		k = get_varint(*q, end, holders);
		if (!k || !*holders)
			return bad(why, k ? "partition held by no worker" :
					    "truncated holder mask");
		*q += k;
	}
	return 0;
}

int status_part(const struct status *s, uint32_t p, uint64_t *batches,
		uint32_t *sum, uint64_t *holders, const char **why)
{
	const uint8_t *q, *end;
	uint64_t h;
	int ret = block(s, p / USHI_STATUS_BLOCK, &q, &end, why);
	for (uint32_t i = p - p % USHI_STATUS_BLOCK; !ret && i <= p; i++)
		ret = entry(s, &q, end, batches, sum, holders ? holders : &h,
			    why);
	return ret;
}

int status_batches(const struct status *s, uint64_t *batches,
		   const char **why)
{
	*batches = 0;
	for (uint32_t i = 0; i < nblocks(s->partitions); i++) {
		const uint8_t *q, *end;
		int ret = block(s, i, &q, &end, why);
		uint32_t first = i * USHI_STATUS_BLOCK;
		for (uint32_t p = first; !ret && p < s->partitions &&
					 p < first + USHI_STATUS_BLOCK; p++) {
			uint64_t b, h;
			uint32_t sum;
			ret = entry(s, &q, end, &b, &sum, &h, why);
			if (!ret)
				*batches += b;
		}
		if (!ret && q != end)
			ret = bad(why, "partition block longer than its entries");
		if (ret)
			return ret;
	}
	return 0;
}

int ush_status_info_size(const struct ush_status *st,
			 struct ush_status_info *info, size_t size)
{
	struct status s;
	const char *why = "";
	struct ush_status_info i = {.size = sizeof(i)};
	int ret = st ? status_parse(st->data, st->len, &s, &why) : -EINVAL;
	if (!ret)
		ret = status_batches(&s, &i.batches, &why);
	if (ret)
		return ushi_fail(ret, "map status of %zu bytes: %s",
				st ? st->len : 0, st ? why : "NULL");
	i.shuffle = s.shuffle;
	i.map = s.map;
	i.attempt = s.attempt;
	i.partitions = s.partitions;
	i.target = (enum ush_target)s.target;
	i.location_len = s.loc_len;
	i.sealed = s.sealed;
	i.seal_key_id = s.seal_id;
	ushi_struct_init(info, size, &i, sizeof(i));
	return 0;
}
