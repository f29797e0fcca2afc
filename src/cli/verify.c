/*
 * Record content and its check. Record seq of map (per-map sequence from
 * 0) is derived from (job, map, seq) alone: a hash picks its partition and
 * length, and seeds its bytes. A record of REC_HDR bytes or more starts
 * with a header
 *
 *   0  crc32c   CRC32C (ISA-L, seeded with the job id) of bytes 4..len
 *   4  map      le32
 *   8  seq      le64
 *
 * so a reader recomputes the CRC and checks that the record belongs to its
 * partition, has its length, and arrives once, in order (a reader yields
 * map 0's records first, each map's in sequence order).
 *
 * The body is compress_pct percent filler (one repeated 8-byte word, or
 * --buffer_pattern's bytes) after random bytes (a slice of a random
 * block made once), so codecs see data about that compressible.
 */
#include "cli.h"

#include <isa-l/crc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x)
{
	/* splitmix64's finalizer */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#define RAND_BLOCK (8u << 20)
static uint8_t *rand_bytes;
static pthread_once_t rand_once = PTHREAD_ONCE_INIT;

static void rand_init(void)
{
	rand_bytes = malloc(RAND_BLOCK);
	if (!rand_bytes) {
		fprintf(stderr, "ushuffle: no memory for the record generator\n");
		exit(1);
	}
	uint64_t x = 0x2545f4914f6cdd1dull;
	for (uint32_t i = 0; i < RAND_BLOCK; i += 8) {
		uint64_t v = mix64(x += 0x9e3779b97f4a7c15ull);
		memcpy(rand_bytes + i, &v, 8);
	}
}

/* RAND_BLOCK random bytes, made once per process. */
static const uint8_t *rand_block(void)
{
	pthread_once(&rand_once, rand_init);
	return rand_bytes;
}

uint64_t rec_hash(const struct rec_gen *g, uint32_t map, uint64_t seq)
{
	return mix64(mix64(((uint64_t)g->job << 32) | map) ^ seq);
}

uint32_t rec_part(const struct rec_gen *g, uint64_t h)
{
	return (uint32_t)(((h >> 32) * g->partitions) >> 32);
}

uint32_t rec_len(const struct rec_gen *g, uint64_t h)
{
	uint32_t span = g->max - g->min + 1;
	return g->min + (span ? (uint32_t)(h & 0xffffffffu) % span : 0);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

void rec_fill(const struct rec_gen *g, uint32_t map, uint64_t seq,
	      uint64_t h, uint8_t *dst, uint32_t len)
{
	uint8_t *body = dst;
	uint32_t blen = len;
	if (len >= REC_HDR) {
		put_le32(dst + 4, map);
		put_le32(dst + 8, (uint32_t)seq);
		put_le32(dst + 12, (uint32_t)(seq >> 32));
		body += REC_HDR;
		blen -= REC_HDR;
	}
	uint32_t rnd = (uint32_t)((uint64_t)blen * (100 - g->compress_pct) /
				  100);
	uint64_t word = mix64(h);
	/* Random bytes: a slice of one random block picked by the hash, as
	 * fio reuses its buffers; the driver's generator should cost little
	 * beside the transport it measures. */
	const uint8_t *rb = rand_block();
	uint32_t i = 0;
	while (i < rnd) {
		uint32_t k = rnd - i < RAND_BLOCK / 2 ? rnd - i : RAND_BLOCK / 2;
		memcpy(body + i, rb + (h >> 16) % (RAND_BLOCK / 2), k);
		h = mix64(h);
		i += k;
	}
	/* The pattern from its first byte on, a whole copy at a time. */
	for (uint32_t k; g->plen && i < blen; i += k) {
		k = blen - i < g->plen ? blen - i : g->plen;
		memcpy(body + i, g->pattern, k);
	}
	for (; i + 8 <= blen; i += 8)
		memcpy(body + i, &word, 8);
	for (; i < blen; i++)
		body[i] = (uint8_t)(word >> (8 * (i & 7)));
	if (len >= REC_HDR)
		put_le32(dst, crc32_iscsi(dst + 4, (int)(len - 4), g->job));
}

void verify_log_init(struct verify_log *v)
{
	memset(v, 0, sizeof(*v));
	pthread_mutex_init(&v->lock, NULL);
	atomic_init(&v->errors, 0);
}

void verify_log_add(struct verify_log *v, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&v->lock);
	if (v->nfirst < sizeof(v->first) / sizeof(v->first[0])) {
		va_start(ap, fmt);
		vsnprintf(v->first[v->nfirst++], sizeof(v->first[0]), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&v->lock);
}

/* Counts one mismatch and describes it if it is among the first. */
static int mismatch(struct part_check *c, struct verify_log *log,
		    uint32_t map, uint64_t seq, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int mismatch(struct part_check *c, struct verify_log *log,
		    uint32_t map, uint64_t seq, const char *fmt, ...)
{
	char what[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&log->errors, 1);
	c->bad++;
	verify_log_add(log, "partition %u map %u seq %llu: %s", c->part, map,
		       (unsigned long long)seq, what);
	return 1;
}

int rec_check(struct part_check *c, struct verify_log *log,
	      const uint8_t *rec, size_t len)
{
	const struct rec_gen *g = c->g;
	if (len < REC_HDR)
		return mismatch(c, log, 0, 0, "a %zu-byte record, shorter "
				"than the %u-byte verify header", len, REC_HDR);
	uint32_t crc = crc32_iscsi((uint8_t *)rec + 4, (int)(len - 4), g->job);
	uint32_t map = get32(rec + 4);
	uint64_t seq = get32(rec + 8) | (uint64_t)get32(rec + 12) << 32;
	if (crc != get32(rec))
		return mismatch(c, log, map, seq, "crc32c mismatch: stored "
				"0x%08x, computed 0x%08x", get32(rec), crc);
	if (map >= c->maps)
		return mismatch(c, log, map, seq, "no such map (the job has "
				"%u)", c->maps);
	uint64_t h = rec_hash(g, map, seq);
	if (rec_part(g, h) != c->part)
		return mismatch(c, log, map, seq, "belongs to partition %u",
				rec_part(g, h));
	if (rec_len(g, h) != len)
		return mismatch(c, log, map, seq, "%zu bytes, expected %u", len,
				rec_len(g, h));
	if (seq < c->next[map])
		return mismatch(c, log, map, seq, "duplicate or out of order: "
				"map %u is at seq %llu already", map,
				(unsigned long long)c->next[map]);
	c->next[map] = seq + 1;
	c->count[map]++;
	return 0;
}
