/*
 * The helpers that reach the library's internals (helpers.h): forged map
 * statuses, spill indexes. Only in the internal tests' helper library
 * (tests/CMakeLists.txt).
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/spill.h"
#include "core/status.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void no_batches(const void *arg, uint32_t p, uint64_t *batches,
		       uint32_t *sum)
{
	(void)arg;
	(void)p;
	*batches = 0;
	*sum = 0;
}

/* Moves the library's n status bytes b into a malloc'd copy in st. */
static void status_take(struct ush_status *st, uint8_t *b, size_t n)
{
	void *p = malloc(n);
	assert_non_null(p);
	memcpy(p, b, n);
	ushi_free(b);
	st->data = p;
	st->len = n;
}

void th_status_forge(struct ush_status *st, enum ush_target target,
		     const char *loc, uint32_t shuffle, uint32_t map,
		     uint32_t attempt, uint32_t partitions)
{
	struct status s = {.target = (uint8_t)target, .shuffle = shuffle,
			   .map = map, .attempt = attempt,
			   .partitions = partitions, .app = "default", .app_len = 7, .loc = loc,
			   .loc_len = (uint32_t)strlen(loc)};
	uint8_t *b;
	size_t n;
	assert_int_equal(status_build(&b, &n, &s, no_batches, NULL), 0);
	status_take(st, b, n);
}

struct one_part {
	uint64_t batches;
	uint32_t sum;
};

static void one_part_entry(const void *arg, uint32_t p, uint64_t *batches,
			   uint32_t *sum)
{
	(void)p;
	const struct one_part *o = arg;
	*batches = o->batches;
	*sum = o->sum;
}

void th_status_one_part(struct ush_status *st, const char *app,
			const char *loc, uint32_t shuffle, uint64_t batches,
			uint32_t sum)
{
	struct status d = {.target = USH_TARGET_NET, .shuffle = shuffle,
			   .partitions = 1, .app = app,
			   .app_len = (uint32_t)strlen(app), .loc = loc,
			   .loc_len = (uint32_t)strlen(loc)};
	struct one_part o = {batches, sum};
	uint8_t *b;
	size_t n;
	assert_int_equal(status_build(&b, &n, &d, one_part_entry, &o), 0);
	status_take(st, b, n);
}

void th_index_load(const char *path, struct spill_header *h,
		   struct spill_entry **ents, size_t *n)
{
	size_t len;
	uint8_t *b = th_read_file(path, &len);
	assert_true(len >= USHI_INDEX_HEADER);
	th_ok(spill_header_get(b, h));
	assert_int_equal(len, spill_index_size(h->partitions, h->entries));
	*n = (size_t)h->entries;
	*ents = malloc(*n * sizeof(**ents) + 1);
	assert_non_null(*ents);
	const uint8_t *e0 = b + spill_entry_off(h->partitions, 0);
	for (size_t i = 0; i < *n; i++)
		spill_entry_get(e0 + i * USHI_INDEX_ENTRY, &(*ents)[i]);
	/* The directory: each slot's run holds its partition only. */
	for (uint32_t p = 0; p < h->partitions; p++) {
		struct spill_slot s0, s1;
		spill_slot_get(b + spill_slot_off(p), &s0);
		spill_slot_get(b + spill_slot_off(p + 1), &s1);
		assert_true(s0.start <= s1.start && s1.start <= *n);
		assert_int_equal(s0.crc, spill_slot_crc(s0.start,
				 e0 + s0.start * USHI_INDEX_ENTRY,
				 (s1.start - s0.start) * USHI_INDEX_ENTRY));
		for (uint64_t i = s0.start; i < s1.start; i++)
			assert_int_equal((*ents)[i].partition, p);
	}
	free(b);
}

void th_index_store(const char *path, struct spill_header *h,
		    const struct spill_entry *ents, size_t n)
{
	uint8_t *img;
	size_t len;
	th_ok(spill_index_build(ents, n, h, &img, &len));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, img, len), (ssize_t)len);
	close(fd);
	ushi_free(img);
}
