/*
 * Damaged spill files: after a normal committed write of two maps, damage
 * map 1's data file or index (flipped header byte, flipped payload byte,
 * truncation, missing data file or index, corrupt index entry or trailer,
 * an entry dropped from a valid index) and read partition 1 with the map
 * statuses the commits yielded. The reader
 * must return every record before the damage intact and in order, then an
 * error whose message names the file, the offset and the partition; never
 * a garbage record.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/frame.h"
#include "core/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHUFFLE 5
#define NMAPS 2
#define NPARTS 4
#define PART 1
#define BAD_MAP 1
#define NREC_PART 60 /* partition PART's records per map */
#define NREC_OTHER 20
#define MAXF 64

static uint64_t rec_seed(uint32_t map, uint32_t part, uint32_t i)
{
	return (uint64_t)map << 40 | (uint64_t)part << 20 | i;
}

static uint32_t rec_count(uint32_t part)
{
	return part == PART ? NREC_PART : NREC_OTHER;
}

static uint32_t rec_len(uint32_t map, uint32_t part, uint32_t i)
{
	return 100 + (map * 7 + part * 13 + i * 97) % 800;
}

/* Compressible bytes (a repeated 16-byte pattern) so codecs shrink them. */
static void rec_fill(uint8_t *buf, uint32_t len, uint64_t seed)
{
	uint32_t pat = len < 16 ? len : 16;
	th_fill(buf, pat, seed);
	for (uint32_t k = pat; k < len; k++)
		buf[k] = buf[k - pat];
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		fail_msg("open %s: %s", path, strerror(errno));
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

struct fx {
	const char *dir;
	char data[PATH_MAX], index[PATH_MAX]; /* map BAD_MAP's files */
	uint8_t *pdata, *pindex;              /* their pristine bytes */
	size_t dlen, ilen, nidx;
	struct spill_entry ents[MAXF];        /* PART's frames in BAD_MAP */
	size_t gidx[MAXF];                    /* their index positions */
	uint32_t nrec[MAXF];
	size_t nents;
	struct spill_entry other;             /* a frame of partition 0 */
	struct ush_status st[NMAPS];          /* the maps' statuses */
	uint8_t rec[1024];
};

static void fx_setup(struct fx *fx, enum ush_codec codec, int direct)
{
	memset(fx, 0, sizeof(*fx));
	fx->dir = th_scratch("corrupt");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = 4096; /* many small frames */
	ro.pool_bytes = 1u << 20;
	ro.codec = codec;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	for (uint32_t m = 0; m < NMAPS; m++) {
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = SHUFFLE, .map = m, .partitions = NPARTS,
			.target = USH_TARGET_DISK, .dir = fx->dir,
			.direct = direct};
		ush_writer *w;
		th_ok(ush_writer_open(&w, ring, &wo));
		/* Interleave partitions so their frames interleave. */
		for (uint32_t i = 0; i < NREC_PART; i++)
			for (uint32_t p = 0; p < NPARTS; p++) {
				if (i >= rec_count(p))
					continue;
				uint32_t len = rec_len(m, p, i);
				rec_fill(fx->rec, len, rec_seed(m, p, i));
				th_ok(ush_writer_write(w, p, fx->rec, len));
			}
		th_ok(th_commit(w, NULL, &fx->st[m]));
		ush_writer_free(w);
	}
	ush_ring_free(ring);

	spill_data(fx->data, sizeof(fx->data), fx->dir, SHUFFLE, BAD_MAP, 0);
	spill_index(fx->index, sizeof(fx->index), fx->dir, SHUFFLE, BAD_MAP,
		    0);
	fx->pdata = th_read_file(fx->data, &fx->dlen);
	fx->pindex = th_read_file(fx->index, &fx->ilen);
	fx->nidx = (fx->ilen - USHI_INDEX_TRAILER) / USHI_INDEX_ENTRY;
	for (size_t i = 0; i < fx->nidx; i++) {
		struct spill_entry e;
		spill_entry_get(fx->pindex + i * USHI_INDEX_ENTRY, &e);
		if (e.partition == 0 && !fx->other.len)
			fx->other = e;
		if (e.partition != PART)
			continue;
		assert_true(fx->nents < MAXF);
		struct ushi_frame f;
		th_ok(frame_decode(fx->pdata + e.off, &f));
		if (codec != USH_CODEC_NONE)
			assert_int_equal(f.codec, codec);
		fx->gidx[fx->nents] = i;
		fx->nrec[fx->nents] = f.nrec;
		fx->ents[fx->nents++] = e;
	}
	/* The damaged frame (#2) has intact frames on both sides. */
	assert_true(fx->nents >= 5);
	assert_true(fx->other.len > 0);
}

static void fx_restore(struct fx *fx)
{
	write_file(fx->data, fx->pdata, fx->dlen);
	write_file(fx->index, fx->pindex, fx->ilen);
}

static void fx_teardown(struct fx *fx)
{
	free(fx->pdata);
	free(fx->pindex);
	th_statuses_free(fx->st, NMAPS);
	th_rmrf(fx->dir);
}

/* Records of PART before frame k of BAD_MAP: all of the maps before it,
 * then those of BAD_MAP's frames before k. */
static uint64_t before(const struct fx *fx, size_t k)
{
	uint64_t n = (uint64_t)BAD_MAP * NREC_PART;
	for (size_t i = 0; i < k; i++)
		n += fx->nrec[i];
	return n;
}

/*
 * Reads PART until the end or an error, checking that every record
 * returned is the next one written. Returns the final status, sets *n to
 * the records returned and copies the error message into msg.
 */
static int read_part(struct fx *fx, uint64_t *n, char *msg, size_t msglen)
{
	ush_reader *r;
	const void *rec;
	size_t len;
	int ret = th_reader_open(&r, fx->st, NMAPS, PART, 0);
	*n = 0;
	msg[0] = 0;
	if (ret) {
		snprintf(msg, msglen, "%s", ush_last_error());
		return ret;
	}
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		uint32_t m = (uint32_t)(*n / NREC_PART);
		uint32_t i = (uint32_t)(*n % NREC_PART);
		if (m >= NMAPS)
			fail_msg("record #%llu: more records than written",
				 (unsigned long long)*n);
		uint32_t wlen = rec_len(m, PART, i);
		rec_fill(fx->rec, wlen, rec_seed(m, PART, i));
		if (len != wlen || memcmp(rec, fx->rec, len))
			fail_msg("record #%llu (map %u record %u): %zu bytes "
				 "returned, %u written, or different bytes",
				 (unsigned long long)*n, m, i, len, wlen);
		(*n)++;
	}
	if (ret < 0) {
		snprintf(msg, msglen, "%s", ush_last_error());
		/* The error is sticky: no record after it either. */
		assert_int_equal(ush_reader_next(r, &rec, &len), ret);
	}
	ush_reader_free(r);
	return ret;
}

/* Expects error code err after exactly nbefore good records, with a
 * message holding "<path> offset <off> partition 1" (off < 0: the path
 * and the partition only). */
static void expect_error(struct fx *fx, int err, uint64_t nbefore,
			 const char *path, long long off, const char *what)
{
	char msg[600], needle[PATH_MAX + 64];
	uint64_t n;
	int ret = read_part(fx, &n, msg, sizeof(msg));
	if (ret != err)
		fail_msg("%s: reader returned %d (%s), expected %d (%s): %s",
			 what, ret, ush_err_name(ret), err, ush_err_name(err),
			 msg);
	if (n != nbefore)
		fail_msg("%s: %llu records before the error, expected %llu",
			 what, (unsigned long long)n,
			 (unsigned long long)nbefore);
	if (off >= 0)
		snprintf(needle, sizeof(needle), "%s offset %lld partition %u",
			 path, off, PART);
	else
		snprintf(needle, sizeof(needle), "%s", path);
	if (!strstr(msg, needle))
		fail_msg("%s: message \"%s\" lacks \"%s\"", what, msg, needle);
	if (off < 0 && err != USH_ENOTCOMMITTED) {
		snprintf(needle, sizeof(needle), "partition %u", PART);
		if (!strstr(msg, needle))
			fail_msg("%s: message \"%s\" lacks \"%s\"", what, msg,
				 needle);
	}
}

static void flip(const char *path, uint64_t off, uint8_t mask)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= mask;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

static void check_pristine(struct fx *fx)
{
	char msg[600];
	uint64_t n;
	int ret = read_part(fx, &n, msg, sizeof(msg));
	if (ret)
		fail_msg("pristine read: %d: %s", ret, msg);
	assert_int_equal(n, NMAPS * NREC_PART);
}

/* One flipped bit in each field of frame #2's header. */
static void header_flips(struct fx *fx, enum ush_codec codec)
{
	const int comp = codec != USH_CODEC_NONE;
	const struct {
		unsigned off;
		int err;
		const char *what;
	} flips[] = {
		{0, USH_ECORRUPT, "magic"},
		{4, USH_EVERSION, "version"},
		{5, USH_ECORRUPT, "type"},
		{6, USH_ECORRUPT, "codec"},
		{7, USH_ECORRUPT, "flags"},
		{8, USH_ECORRUPT, "shuffle"},
		{12, USH_ECORRUPT, "map"},
		{16, USH_ECORRUPT, "attempt"},
		{20, USH_ECORRUPT, "partition"},
		{24, USH_ECRC, "sequence"},
		/* Raw and stored length agree without a codec. */
		{32, comp ? USH_ECRC : USH_ECORRUPT, "raw length"},
		{36, USH_ECORRUPT, "payload length"},
		{40, USH_ECRC, "record count"},
		{44, USH_ECRC, "crc"},
		{47, USH_ECRC, "crc high byte"},
	};
	const size_t k = 2;
	for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
		char what[64];
		snprintf(what, sizeof(what), "header %s", flips[i].what);
		flip(fx->data, fx->ents[k].off + flips[i].off, 0x01);
		expect_error(fx, flips[i].err, before(fx, k), fx->data,
			     (long long)fx->ents[k].off, what);
		fx_restore(fx);
	}
}

/* One flipped byte at the start, middle and end of a payload. */
static void payload_flips(struct fx *fx)
{
	for (size_t k = 0; k < fx->nents; k += fx->nents / 3) {
		uint32_t plen = fx->ents[k].len - USH_FRAME_HDR_SIZE;
		const uint32_t at[] = {0, plen / 2, plen - 1};
		for (size_t i = 0; i < 3; i++) {
			flip(fx->data, fx->ents[k].off + USH_FRAME_HDR_SIZE +
					       at[i],
			     0x80);
			expect_error(fx, USH_ECRC, before(fx, k), fx->data,
				     (long long)fx->ents[k].off,
				     "payload byte");
			fx_restore(fx);
		}
	}
}

static void truncations(struct fx *fx)
{
	const uint64_t sizes[] = {0, fx->ents[2].off + 100, fx->dlen - 1};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(truncate(fx->data, (off_t)sizes[i]), 0);
		/* The whole map is refused before any of its records. */
		expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->data,
			     (long long)sizes[i], "truncated data file");
		fx_restore(fx);
	}
	/* A data file gone while its index stays. */
	assert_int_equal(unlink(fx->data), 0);
	expect_error(fx, -ENOENT, before(fx, 0), fx->data, -1,
		     "missing data file");
	fx_restore(fx);
}

/* The attempt a status names is not committed there: refused at open,
 * before any record of any map. */
static void missing_index(struct fx *fx)
{
	assert_int_equal(unlink(fx->index), 0);
	expect_error(fx, USH_ENOTCOMMITTED, 0, fx->index, -1,
		     "missing index");
	fx_restore(fx);
}

/* Rewrites the index with entry gi replaced by e (gi >= nidx: none) and
 * the trailer passed through fix, with a valid CRC. */
static void rewrite_index(struct fx *fx, size_t gi,
			  const struct spill_entry *e,
			  void (*fix)(struct spill_trailer *t))
{
	size_t ents = fx->nidx * USHI_INDEX_ENTRY;
	uint8_t *b = malloc(fx->ilen);
	assert_non_null(b);
	memcpy(b, fx->pindex, fx->ilen);
	if (gi < fx->nidx)
		spill_entry_put(b + gi * USHI_INDEX_ENTRY, e);
	struct spill_trailer t;
	th_ok(spill_trailer_get(fx->pindex + ents, &t,
				spill_crc(0xffffffffu, fx->pindex, ents)));
	if (fix)
		fix(&t);
	spill_trailer_put(b + ents, &t, spill_crc(0xffffffffu, b, ents));
	write_file(fx->index, b, fx->ilen);
	free(b);
}

/* Rewrites the index without entry gi, with a valid trailer. */
static void drop_entry(struct fx *fx, size_t gi)
{
	size_t ents = fx->nidx * USHI_INDEX_ENTRY;
	uint8_t *b = malloc(fx->ilen);
	assert_non_null(b);
	memcpy(b, fx->pindex, gi * USHI_INDEX_ENTRY);
	memcpy(b + gi * USHI_INDEX_ENTRY,
	       fx->pindex + (gi + 1) * USHI_INDEX_ENTRY,
	       ents - (gi + 1) * USHI_INDEX_ENTRY);
	ents -= USHI_INDEX_ENTRY;
	struct spill_trailer t;
	th_ok(spill_trailer_get(fx->pindex + ents + USHI_INDEX_ENTRY, &t,
				spill_crc(0xffffffffu, fx->pindex,
					  ents + USHI_INDEX_ENTRY)));
	t.entries--;
	spill_trailer_put(b + ents, &t, spill_crc(0xffffffffu, b, ents));
	write_file(fx->index, b, ents + USHI_INDEX_TRAILER);
	free(b);
}

static void fix_map(struct spill_trailer *t)
{
	t->map ^= 1;
}

static void fix_entries(struct spill_trailer *t)
{
	t->entries++;
}

static void fix_shuffle(struct spill_trailer *t)
{
	t->shuffle++;
}

static void index_damage(struct fx *fx)
{
	const long long trailer = (long long)(fx->nidx * USHI_INDEX_ENTRY);
	const size_t k = 2, gi = fx->gidx[k];

	/* Bytes flipped under the CRC: an entry, then trailer fields. */
	flip(fx->index, gi * USHI_INDEX_ENTRY + 1, 0x10);
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, trailer,
		     "index entry byte");
	fx_restore(fx);
	flip(fx->index, (uint64_t)trailer + 32, 0x01); /* data bytes */
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, trailer,
		     "trailer data bytes");
	fx_restore(fx);
	flip(fx->index, (uint64_t)trailer + 40, 0x01); /* its CRC */
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, trailer,
		     "trailer crc");
	fx_restore(fx);
	flip(fx->index, (uint64_t)trailer, 0x01); /* magic */
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, trailer,
		     "trailer magic");
	fx_restore(fx);
	/* Cut mid-entry, then by a whole entry (the trailer moves). */
	assert_int_equal(truncate(fx->index, (off_t)fx->ilen - 8), 0);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index,
		     (long long)fx->ilen - 8, "index cut mid-entry");
	fx_restore(fx);
	assert_int_equal(truncate(fx->index, (off_t)fx->ilen - 16), 0);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index,
		     trailer - 16, "index cut by an entry");
	fx_restore(fx);

	/* Valid CRCs over wrong contents. An entry pointing at another
	 * partition's frame, then one with a wrong length: caught when
	 * that frame is read, after the frames before it. */
	struct spill_entry e = fx->other;
	e.partition = PART;
	rewrite_index(fx, gi, &e, NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, k), fx->data,
		     (long long)e.off, "entry pointing at another frame");
	fx_restore(fx);
	e = fx->ents[k];
	e.len += 1;
	rewrite_index(fx, gi, &e, NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, k), fx->data,
		     (long long)e.off, "entry with a wrong length");
	fx_restore(fx);
	/* An entry past the data file's end: refused with the index. */
	e = fx->ents[k];
	struct spill_trailer t;
	th_ok(spill_trailer_get(fx->pindex + trailer, &t,
				spill_crc(0xffffffffu, fx->pindex,
					  (size_t)trailer)));
	e.off = t.data_bytes;
	rewrite_index(fx, gi, &e, NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index,
		     (long long)(gi * USHI_INDEX_ENTRY), "entry past the end");
	fx_restore(fx);
	/* An entry dropped from a valid index: the partition must not
	 * just come back short; the batch after the gap is refused. */
	drop_entry(fx, gi);
	expect_error(fx, USH_ECORRUPT, before(fx, k), fx->data,
		     (long long)fx->ents[k + 1].off, "entry dropped");
	fx_restore(fx);
	/* The partition's last entry dropped leaves no gap: the map status
	 * says how many batches there are. */
	drop_entry(fx, fx->gidx[fx->nents - 1]);
	expect_error(fx, USH_ECORRUPT, before(fx, fx->nents - 1), fx->data,
		     -1, "last entry dropped");
	fx_restore(fx);
	/* A trailer naming another map, shuffle or entry count. */
	rewrite_index(fx, SIZE_MAX, NULL, fix_map);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, trailer,
		     "trailer map");
	fx_restore(fx);
	rewrite_index(fx, SIZE_MAX, NULL, fix_shuffle);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, trailer,
		     "trailer shuffle");
	fx_restore(fx);
	rewrite_index(fx, SIZE_MAX, NULL, fix_entries);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, trailer,
		     "trailer entries");
	fx_restore(fx);
}

static void run_all(enum ush_codec codec, int direct)
{
	struct fx *fx = malloc(sizeof(*fx));
	assert_non_null(fx);
	fx_setup(fx, codec, direct);
	check_pristine(fx);
	header_flips(fx, codec);
	payload_flips(fx);
	truncations(fx);
	missing_index(fx);
	index_damage(fx);
	/* Every damage was undone: the files read back whole again. */
	check_pristine(fx);
	fx_teardown(fx);
	free(fx);
}

static void corrupt_none_direct(void **state)
{
	(void)state;
	run_all(USH_CODEC_NONE, 1);
}

static void corrupt_none_buffered(void **state)
{
	(void)state;
	run_all(USH_CODEC_NONE, 0);
}

static void corrupt_lz4(void **state)
{
	(void)state;
	run_all(USH_CODEC_LZ4, 0);
}

static void corrupt_zstd(void **state)
{
	(void)state;
	run_all(USH_CODEC_ZSTD, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(corrupt_none_direct, th_teardown),
		cmocka_unit_test_teardown(corrupt_none_buffered, th_teardown),
		cmocka_unit_test_teardown(corrupt_lz4, th_teardown),
		cmocka_unit_test_teardown(corrupt_zstd, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
